/*
 * nn/autocast.c - mixed precision by automatic casting (PyTorch's autocast).
 *
 * Mixed precision keeps the parameters, their gradients and the optimizer
 * state in float32 (the "master weights") and runs the matrix products in
 * bfloat16 on tensor cores. Rather than a second copy of the model in
 * bfloat16, the layers cast at the point of use: while this thread's
 * autocast dtype is AWL_BF16, a Linear layer casts its float32 input,
 * weight and bias to bfloat16 through awl_cast, so the product runs in
 * bfloat16 (cuBLAS accumulates in float32) and awl_cast's backward hands
 * float32 gradients back to the parameters. What follows a Linear (GELU,
 * dropout, attention on c_attn's output) then runs in bfloat16 because its
 * input is bfloat16; where a bfloat16 branch meets the float32 residual
 * stream (Block's two additions), the branch is cast up, as PyTorch's type
 * promotion does. So the residual stream, LayerNorm's arithmetic and the
 * embeddings stay float32, and the fused kernels that read bfloat16
 * (softmax, cross-entropy, attention) accumulate in float32 internally. A
 * Block's two LayerNorms, whose outputs only its Linears read, hand those
 * Linears bfloat16 directly (awl_layer_norm_to: the kernel rounds its
 * float32 result on the way out, the Linear's cast's bits, without
 * the float32 output and the cast pass).
 *
 * The rule "modules autocast, functional ops compute in the dtype they are
 * given" keeps every functional op's contract simple: awl_linear on two
 * float32 tensors is a float32 product whatever the autocast state. Only
 * float32 is cast: float64 tensors (gradient checks) are left alone, as
 * PyTorch does.
 *
 * The state is per thread and is set and restored by value, which nests:
 *     awl_dtype before = awl_autocast_set(AWL_BF16);
 *     ... forward ...
 *     awl_autocast_set(before);
 * Anything that re-runs a forward later (activation checkpointing) must
 * re-establish the state it ran under; awl_gpt does for its blocks.
 *
 * Casting at the point of use costs a kernel per weight and bias (97 for
 * gpt2-124m: its 96 Linear weights and biases and the head's embedding,
 * most of them tiny biases whose launch costs more than their work). So a forward may first cast
 * the weights it will read all at once into the cache below (awl_autocast_cache), one kernel for
 * all of them, and the layers' awl_autocast then finds their casts there. Each cast keeps its own
 * cast node, so the gradients are the same as without the cache, bit for bit. A checkpointed
 * block's replay in backward runs after the forward has cleared the cache and casts as before.
 */
#include <stdlib.h>

#include "common/alloc.h"
#include "nn/nn.h"

static _Thread_local awl_dtype autocast_dtype = AWL_F32;

/* The weight-cast cache: cast[i] is source[i] in the autocast dtype. */
static _Thread_local struct {
    int n;
    awl_tensor **source, **cast;
} cache;

awl_dtype awl_autocast_set(awl_dtype dtype)
{
    awl_dtype before = autocast_dtype;
    if (!awl_dtype_is_float(dtype)) {
        awl_error(AWL_ERR_INVALID,
                  "awl_autocast_set: %s is not a float dtype (float32 turns "
                  "autocast off, bfloat16 turns it on)",
                  awl_dtype_name(dtype));
        return before;
    }
    autocast_dtype = dtype;
    return before;
}

awl_dtype awl_autocast_get(void) { return autocast_dtype; }

awl_tensor *awl_autocast(awl_tensor *t)
{
    if (!t || autocast_dtype == AWL_F32 || t->dtype != AWL_F32) return t;
    for (int i = 0; i < cache.n; i++)
        if (cache.source[i] == t && cache.cast[i]->dtype == autocast_dtype) return cache.cast[i];
    return awl_cast(t, autocast_dtype);
}

void awl_autocast_cache_clear(void)
{
    free(cache.source);
    free(cache.cast);
    cache.n = 0;
    cache.source = cache.cast = NULL;
}

int awl_autocast_cache(int n, awl_tensor *const *ts)
{
    awl_autocast_cache_clear();
    if (autocast_dtype == AWL_F32 || n <= 0) return AWL_OK;
    cache.source = awl_xmalloc((size_t)n * sizeof *cache.source);
    cache.cast = awl_xmalloc((size_t)n * sizeof *cache.cast);
    int m = 0; /* the float32 ones, each once */
    for (int i = 0; i < n; i++) {
        bool seen = false;
        for (int j = 0; j < m && !seen; j++) seen = cache.source[j] == ts[i];
        if (ts[i] && ts[i]->dtype == AWL_F32 && !seen) cache.source[m++] = ts[i];
    }
    int status = awl_cast_many(m, cache.source, autocast_dtype, cache.cast);
    if (status < 0) {
        awl_autocast_cache_clear();
        return status;
    }
    cache.n = m;
    return AWL_OK;
}
