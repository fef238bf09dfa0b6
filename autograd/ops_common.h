/*
 * autograd/ops_common.h - private helpers shared by the differentiable ops.
 *
 * The raw layer (tensor/compute.c, tensor/views.c) already checks shapes,
 * dtypes, devices and axes and names the public op in its messages
 * ("awl_add: shapes (2,3) and (4,3) cannot be broadcast"), so most ops simply
 * call it and record a node when it succeeds. The helpers here cover what is
 * left: ops composed of several raw calls, whose own name must appear in a
 * message, and small pieces of backward bookkeeping.
 *
 * Not part of the public API; only autograd/ops_*.c include it.
 */
#ifndef AWL_AUTOGRAD_OPS_COMMON_H
#define AWL_AUTOGRAD_OPS_COMMON_H

#include "autograd/node.h"
#include "common/alloc.h"

/* Room for "(a,b,...)" of AWL_MAX_DIMS 64-bit sizes. */
#define AWL_OPS_SHAPE_BUF 192

/* A float dtype, or AWL_ERR_INVALID: "op: int32 tensors are not supported". */
int awl_ops_check_float(const char *op, const awl_tensor *t);

/* The reduced axes of a reduction over dims[0..ndims) of a tensor with
 * `ndim` axes (ndims == 0: all of them), as a bit mask. The axes must
 * already have been validated (by the raw reduction). */
unsigned awl_ops_axes_mask(int ndim, int ndims, const int *dims);

/* shape with the axes in mask set to 1 (keepdim's shape) into out; returns
 * ndim. */
int awl_ops_keepdim_shape(int ndim, const int64_t *shape, unsigned mask, int64_t *out);

/* A 0-d tensor holding v, with like's dtype and device (owned by the scope).
 * Broadcasting it costs nothing. */
awl_tensor *awl_ops_scalar_like(awl_tensor *like, double v);

#endif
