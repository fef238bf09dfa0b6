/*
 * autograd/ops_common.c - small helpers shared by the differentiable ops
 * (see ops_common.h).
 */
#include "autograd/ops_common.h"

int awl_ops_check_float(const char *op, const awl_tensor *t)
{
    if (awl_dtype_is_float(t->dtype)) return AWL_OK;
    return awl_error(AWL_ERR_INVALID, "%s: %s tensors are not supported; cast to float32 first", op,
                     awl_dtype_name(t->dtype));
}

unsigned awl_ops_axes_mask(int ndim, int ndims, const int *dims)
{
    if (ndims == 0) return (1u << ndim) - 1;
    unsigned mask = 0;
    for (int i = 0; i < ndims; i++) mask |= 1u << (dims[i] < 0 ? dims[i] + ndim : dims[i]);
    return mask;
}

int awl_ops_keepdim_shape(int ndim, const int64_t *shape, unsigned mask, int64_t *out)
{
    for (int d = 0; d < ndim; d++) out[d] = (mask & (1u << d)) ? 1 : shape[d];
    return ndim;
}

awl_tensor *awl_ops_scalar_like(awl_tensor *like, double v)
{
    int64_t none[1] = {0}; /* a 0-d shape; never read */
    awl_tensor *s = awl_tensor_new_on(like, 0, none, like->dtype);
    if (s && awl_tensor_fill_(s, v) != 0) return NULL;
    return s;
}
