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

#endif
