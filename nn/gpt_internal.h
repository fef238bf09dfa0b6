/*
 * nn/gpt_internal.h - the GPT's insides, shared with nn/generate.c, whose
 * cached forward runs the same layers with a key/value cache attached to
 * each attention layer.
 */
#ifndef AWL_NN_GPT_INTERNAL_H
#define AWL_NN_GPT_INTERNAL_H

#include "nn/gpt.h"

/* What a checkpointed block's replay needs: the block and the autocast
 * dtype its forward ran under. */
typedef struct block_segment_ctx {
    awl_module *block;
    awl_dtype autocast;
} block_segment_ctx;

struct awl_gpt {
    awl_module base; /* the root, type "GPT"; awl_gpt_free frees it */
    awl_gpt_config cfg;
    awl_module *wte, *wpe, *ln_f;
    awl_module **blocks;
    block_segment_ctx *segments; /* one per block */
    bool checkpointing;
    awl_dtype autocast; /* AWL_F32: off */
    awl_param_list params;
};

/* Enters the model's autocast (leaving the caller's state alone when the
 * model's is off); returns the state to restore with awl_autocast_set. */
awl_dtype awl_gpt_autocast_enter(const awl_gpt *g);

/* idx (B, T) -> the final LayerNorm's output (B, T, C). pos NULL: the
 * tokens sit at positions 0 .. T-1; else int32 (B, T), each token's
 * position (generation's padded rows and cached tokens). */
awl_tensor *awl_gpt_hidden(awl_gpt *g, awl_tensor *idx, awl_tensor *pos);

/* The tied head: h (..., C) -> logits (..., vocab), in the autocast dtype
 * when autocast is on (the float32 embedding is cast for the product). */
awl_tensor *awl_gpt_head(awl_gpt *g, awl_tensor *h);

#endif
