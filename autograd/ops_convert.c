/*
 * autograd/ops_convert.c - changing a tensor's dtype or device.
 *
 * Both are copies whose backward is the opposite copy: the gradient of a
 * cast comes back in the input's dtype (the engine casts nothing itself), and
 * the gradient of a device transfer comes back on the input's device, so a
 * model split across devices trains like any other. Casting to int32 ends
 * the graph: integers carry no gradient.
 */
#include "autograd/ops_common.h"

/* ---- cast: x (...) -> out (...) in dtype ---------------------------------------- */

static int cast_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    grads[0] = awl_cast(grad, node->inputs[0].dtype);
    return AWL_OK;
}

bool awl_node_input_widens(const awl_node *node, int i)
{
    if (awl_is_grad_enabled() || !awl_node_needs_grad(node, i)) return false;
    const awl_node *producer = node->inputs[i].node;
    return producer->backward == cast_backward && node->inputs[i].dtype == AWL_BF16 &&
           producer->inputs[0].dtype == AWL_F32;
}

awl_tensor *awl_cast(awl_tensor *x, awl_dtype dtype)
{
    awl_tensor *out = awl_tensor_cast(x, dtype);
    if (out != x && awl_dtype_is_float(dtype))
        awl_node_record(out, "cast", cast_backward, 1, &x, 0);
    return out;
}

int awl_cast_many(int n, awl_tensor *const *xs, awl_dtype dtype, awl_tensor **outs)
{
    int status = awl_tensor_cast_many(n, xs, dtype, outs);
    if (status < 0 || !awl_dtype_is_float(dtype)) return status;
    for (int i = 0; i < n; i++) awl_node_record(outs[i], "cast", cast_backward, 1, &xs[i], 0);
    return AWL_OK;
}

awl_tensor *awl_cast_kept(awl_tensor *x, awl_tensor *kept)
{
    if (!x || !kept) return NULL;
    if (!awl_dtype_is_float(kept->dtype) || awl_numel(kept) != awl_numel(x) ||
        !awl_is_contiguous(kept)) {
        awl_error(AWL_ERR_INVALID,
                  "awl_cast_kept: the kept copy (%s, %lld elements%s) cannot stand for a cast "
                  "of %lld elements",
                  awl_dtype_name(kept->dtype), (long long)awl_numel(kept),
                  awl_is_contiguous(kept) ? "" : ", not contiguous", (long long)awl_numel(x));
        return NULL;
    }
    awl_tensor *out = awl_tensor_reshape(awl_tensor_detach(kept), x->ndim, x->shape);
    if (out) awl_node_record(out, "cast", cast_backward, 1, &x, 0);
    return out;
}

/* ---- to: x (...) on one device -> out (...) on another ------------------------------ */

#define DEVICE_NAME_MAX 32

/* ctx: the input's device name. */
static int to_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    grads[0] = awl_to(grad, awl_node_ctx(node));
    return AWL_OK;
}

awl_tensor *awl_to(awl_tensor *x, const char *device)
{
    awl_tensor *out = awl_tensor_to_device(x, device);
    if (out == x) return out;
    awl_node *node = awl_node_record(out, "to", to_backward, 1, &x, DEVICE_NAME_MAX);
    if (node) awl_tensor_device_name(x, awl_node_ctx(node), DEVICE_NAME_MAX);
    return out;
}
