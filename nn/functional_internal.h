/*
 * nn/functional_internal.h - what nn/functional.c shares with nn/attention.c:
 * dropout with a given mask, which the composed attention applies to its
 * weights. Not part of the public API.
 */
#ifndef AWL_NN_FUNCTIONAL_INTERNAL_H
#define AWL_NN_FUNCTIONAL_INTERNAL_H

#include "common/dropout.h"
#include "tensor/tensor.h"

/* Differentiable dropout of x with the mask of draw d (common/dropout.h):
 * the backend's dropout kernel when it has one (nothing saved), else the
 * mask built from the uniform stream at (d->seed, d->offset) and saved.
 * Leaves the global generator where it was. */
awl_tensor *awl_nn_dropout_at(awl_tensor *x, const awl_dropout_args *d);

#endif
