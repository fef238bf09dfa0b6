/*
 * nn/functional_internal.h - what the files of nn/ share: dropout with a
 * given mask, which the composed attention applies to its weights, and the
 * residual branches of a Block without their output dropout, which Block
 * fuses with its additions. Not part of the public API.
 */
#ifndef AWL_NN_FUNCTIONAL_INTERNAL_H
#define AWL_NN_FUNCTIONAL_INTERNAL_H

#include "common/dropout.h"
#include "nn/nn.h"
#include "tensor/tensor.h"

/* Differentiable dropout of x with the mask of draw d (common/dropout.h):
 * the backend's dropout kernel when it has one (nothing saved), else the
 * mask built from the uniform stream at (d->seed, d->offset) and saved.
 * Leaves the global generator where it was. */
awl_tensor *awl_nn_dropout_at(awl_tensor *x, const awl_dropout_args *d);

/* A dropout draw of probability p over n elements of the global generator
 * (n / 4 Philox blocks, rounded up): the generator moves past them. */
awl_dropout_args awl_nn_dropout_draw(double p, uint64_t n);

/* CausalSelfAttention's and MLP's forward before their output dropout (the
 * module's forward is that dropout of this); *p: the dropout's probability,
 * 0 outside training. */
awl_tensor *awl_nn_attention_branch(awl_module *attn, awl_tensor *x, double *p);
awl_tensor *awl_nn_mlp_branch(awl_module *mlp, awl_tensor *x, double *p);

/* A Block's forward left open at its end: *x + dropout(h_in) (h_in NULL:
 * *x itself) goes through the block and *x becomes the residual stream
 * before the block's last addition, whose branch this returns, with its
 * dropout's probability in *p. The block's output is then *x +
 * dropout(returned), which the caller adds, fused with the LayerNorm that
 * reads it (awl_dropout_add_layer_norm_to): the next block's ln_1 or the
 * GPT's ln_f. Block's own forward is this with h_in NULL, then that
 * addition. */
awl_tensor *awl_nn_block_forward_open(awl_module *block, awl_tensor **x, awl_tensor *h_in,
                                      double p_in, double *p);
/* *x = *x + dropout(h), then the LayerNorm module ln of it, in x's dtype
 * (a GPT's ln_f after its last block left open). */
awl_tensor *awl_nn_add_layer_norm(awl_module *ln, awl_tensor **x, awl_tensor *h, double p);

#endif
