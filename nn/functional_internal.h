/*
 * nn/functional_internal.h - what the fused functional layers (functional.c,
 * attention.c) share: when to try a fused kernel, how to read its answer,
 * and dropout with a given mask.
 * Not part of the public API.
 */
#ifndef AWL_NN_FUNCTIONAL_INTERNAL_H
#define AWL_NN_FUNCTIONAL_INTERNAL_H

#include "common/dropout.h"
#include "tensor/tensor_internal.h"

/* Whether to try a backend's optional kernel (NULL when it has none). */
static inline bool awl_nn_try_fused(const void *kernel)
{
    return kernel && awl_fused_kernels_enabled();
}

/* Reads a fused kernel's status: true on success; *unsupported when it
 * declined (the caller composes instead, no message recorded); otherwise
 * records the failure under op's name. */
static inline bool awl_nn_kernel_ok(const char *op, int status, bool *unsupported)
{
    *unsupported = status == AWL_ERR_UNSUPPORTED;
    if (status != AWL_OK && !*unsupported) awl_backend_status(op, status);
    return status == AWL_OK;
}

/* Differentiable dropout of x with the mask of draw d (common/dropout.h):
 * the backend's dropout kernel when it has one (nothing saved), else the
 * mask built from the uniform stream at (d->seed, d->offset) and saved.
 * Leaves the global generator where it was. */
awl_tensor *awl_nn_dropout_at(awl_tensor *x, const awl_dropout_args *d);

#endif
