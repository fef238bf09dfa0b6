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
 */
#include "nn/nn.h"

static _Thread_local awl_dtype autocast_dtype = AWL_F32;

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
    return awl_cast(t, autocast_dtype);
}
