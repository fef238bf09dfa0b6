/*
 * autograd/ops_reduce.c - reductions and the softmax family.
 *
 * sum, mean and max reduce over a set of axes (all of them when none are
 * listed). Their backward broadcasts the gradient back to the input's shape:
 * the reduced axes are first restored as size 1 (a reshape, i.e. a view) and
 * then awl_expand makes a zero-stride view, so no (B, T, C)-sized copy of a
 * (B, 1, C) gradient is made until the consumer itself needs one.
 *
 * softmax, log_softmax and logsumexp are one node each rather than a chain
 * of exp/sum/div nodes: the node saves only its output (or its input and
 * output for logsumexp), where the composed chain would keep every
 * intermediate alive until backward. Their forward runs the backend's fused
 * kernel when it can (fused kernels enabled, last axis, contiguous input, the
 * kernel present and not answering AWL_ERR_UNSUPPORTED) and otherwise the
 * same arithmetic from raw primitives: subtract the row maximum, exp, sum,
 * divide (or subtract the log of the sum). The backward likewise uses the
 * fused softmax_backward kernel for a plain first-order pass; under
 * create_graph (grad mode on inside backward) it composes the formula from
 * differentiable ops so that the gradient can be differentiated again:
 *   softmax:     dx = y * (dy - sum(dy * y))
 *   log_softmax: dx = dy - exp(y) * sum(dy)
 *   logsumexp:   dx = dy * exp(x - out)
 */
#include "autograd/ops_common.h"

/* ---- sum, mean, max: x (...), out x's shape without (or with size-1) axes --- */

typedef struct reduce_ctx {
    unsigned mask; /* the reduced axes of the input */
    bool keepdim;
} reduce_ctx;

/* The gradient g of a reduction, of the output's shape, as a tensor of the
 * keepdim shape (size 1 along reduced axes); a view. */
static awl_tensor *restore_reduced_axes(awl_node *node, awl_tensor *g)
{
    const reduce_ctx *ctx = awl_node_ctx(node);
    const awl_node_input *in = &node->inputs[0];
    if (ctx->keepdim) return g;
    int64_t keep[AWL_MAX_DIMS];
    return awl_reshape(g, awl_ops_keepdim_shape(in->ndim, in->shape, ctx->mask, keep), keep);
}

/* g broadcast to the input's shape (a zero-stride view). */
static awl_tensor *broadcast_to_input(awl_node *node, awl_tensor *g)
{
    const awl_node_input *in = &node->inputs[0];
    return awl_expand(restore_reduced_axes(node, g), in->ndim, in->shape);
}

static int sum_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    grads[0] = broadcast_to_input(node, grad);
    return AWL_OK;
}

static int mean_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    const reduce_ctx *ctx = awl_node_ctx(node);
    const awl_node_input *in = &node->inputs[0];
    int64_t count = 1;
    for (int d = 0; d < in->ndim; d++)
        if (ctx->mask & (1u << d)) count *= in->shape[d];
    grads[0] = broadcast_to_input(node, awl_mul_scalar(grad, 1.0 / (double)count));
    return AWL_OK;
}

/* dx = grad * (x == max) / (number of maxima): ties share the gradient
 * equally. The share is a raw constant (its derivative is zero almost
 * everywhere). Saved: x, out. */
static int max_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    const reduce_ctx *ctx = awl_node_ctx(node);
    awl_tensor *x = awl_node_saved(node, 0), *out = awl_node_saved(node, 1);
    int64_t keep[AWL_MAX_DIMS];
    int ndim = awl_ops_keepdim_shape(x->ndim, x->shape, ctx->mask, keep);
    awl_tensor *is_max = awl_tensor_binary(AWL_BINARY_EQ, x, awl_tensor_reshape(out, ndim, keep));
    int axes[AWL_MAX_DIMS], n_axes = 0;
    for (int d = 0; d < ndim; d++)
        if (ctx->mask & (1u << d)) axes[n_axes++] = d;
    awl_tensor *ties = awl_tensor_reduce(AWL_REDUCE_SUM, is_max, n_axes, axes, true);
    awl_tensor *share = awl_tensor_binary(AWL_BINARY_DIV, is_max, ties);
    grads[0] = awl_mul(restore_reduced_axes(node, grad), share);
    return AWL_OK;
}

static awl_tensor *reduce_forward(const char *name, awl_reduce_op op, awl_backward_fn backward,
                                  awl_tensor *x, int ndims, const int *dims, bool keepdim)
{
    awl_tensor *out = awl_tensor_reduce(op, x, ndims, dims, keepdim);
    awl_node *node = awl_node_record(out, name, backward, 1, &x, sizeof(reduce_ctx));
    if (node) {
        unsigned mask = awl_ops_axes_mask(x->ndim, ndims, dims);
        *(reduce_ctx *)awl_node_ctx(node) = (reduce_ctx){mask, keepdim};
        if (op == AWL_REDUCE_MAX) {
            awl_node_save(node, x);
            awl_node_save_output(node, out);
        }
    }
    return out;
}

awl_tensor *awl_sum(awl_tensor *x, int ndims, const int *dims, bool keepdim)
{
    return reduce_forward("sum", AWL_REDUCE_SUM, sum_backward, x, ndims, dims, keepdim);
}

awl_tensor *awl_mean(awl_tensor *x, int ndims, const int *dims, bool keepdim)
{
    return reduce_forward("mean", AWL_REDUCE_MEAN, mean_backward, x, ndims, dims, keepdim);
}

awl_tensor *awl_max(awl_tensor *x, int ndims, const int *dims, bool keepdim)
{
    return reduce_forward("max", AWL_REDUCE_MAX, max_backward, x, ndims, dims, keepdim);
}

awl_tensor *awl_sum_all(awl_tensor *x) { return awl_sum(x, 0, NULL, false); }

awl_tensor *awl_mean_all(awl_tensor *x) { return awl_mean(x, 0, NULL, false); }

/* ---- softmax, log_softmax: x (...), out x's shape, over axis dim ------------- */

typedef struct softmax_ctx {
    int dim; /* normalised */
    bool log;
    bool keepdim; /* logsumexp only */
} softmax_ctx;

/* Whether the fused softmax kernels may run on a tensor like t, over axis
 * dim: the caller still falls back when a kernel answers UNSUPPORTED. */
static bool fused_softmax_applies(awl_kernel kernel, const awl_tensor *t, int dim)
{
    return dim == t->ndim - 1 && awl_numel(t) > 0 && awl_fused_available(kernel, t);
}

/* The fused forward into *out: 1 when it ran, 0 when the caller must
 * compose, negative after an error. */
static int softmax_fused(awl_tensor *x, int dim, bool log, awl_tensor **out)
{
    if (!fused_softmax_applies(AWL_KERNEL_SOFTMAX_FORWARD, x, dim) || !awl_is_contiguous(x))
        return 0;
    awl_tensor *y = awl_tensor_new_on(x, x->ndim, x->shape, x->dtype);
    if (!y) return awl_last_error_code();
    int rc = awl_tensor_softmax_forward(y, x, log);
    if (rc == AWL_ERR_UNSUPPORTED) return 0;
    if (rc != 0) return rc;
    *out = y;
    return 1;
}

/* softmax (or log_softmax) of x over dim from raw primitives, subtracting
 * the maximum first so exp cannot overflow. */
static awl_tensor *softmax_composed(awl_tensor *x, int dim, bool log)
{
    awl_tensor *m = awl_tensor_reduce(AWL_REDUCE_MAX, x, 1, &dim, true);
    awl_tensor *z = awl_tensor_binary(AWL_BINARY_SUB, x, m);
    awl_tensor *e = awl_tensor_unary(AWL_UNARY_EXP, z, 0.0);
    awl_tensor *s = awl_tensor_reduce(AWL_REDUCE_SUM, e, 1, &dim, true);
    if (log) return awl_tensor_binary(AWL_BINARY_SUB, z, awl_tensor_unary(AWL_UNARY_LOG, s, 0.0));
    return awl_tensor_binary(AWL_BINARY_DIV, e, s);
}

/* The fused backward into *dx (same contract as softmax_fused). */
static int softmax_backward_fused(awl_tensor *dy, awl_tensor *y, int dim, bool log, awl_tensor **dx)
{
    if (!fused_softmax_applies(AWL_KERNEL_SOFTMAX_BACKWARD, y, dim) || !awl_is_contiguous(y))
        return 0;
    awl_tensor *out = awl_tensor_new_on(y, y->ndim, y->shape, y->dtype);
    if (!out) return awl_last_error_code();
    int rc = awl_tensor_softmax_backward(out, dy, y, log);
    if (rc == AWL_ERR_UNSUPPORTED) return 0;
    if (rc != 0) return rc;
    *dx = out;
    return 1;
}

/* Saved: out (y). */
static int softmax_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    const softmax_ctx *ctx = awl_node_ctx(node);
    awl_tensor *y = awl_node_saved(node, 0);
    if (!awl_is_grad_enabled()) {
        int rc = softmax_backward_fused(grad, y, ctx->dim, ctx->log, &grads[0]);
        if (rc < 0) return rc;
        if (rc == 1) return AWL_OK;
    }
    const int *dim = &ctx->dim;
    if (ctx->log)
        grads[0] = awl_sub(grad, awl_mul(awl_exp(y), awl_sum(grad, 1, dim, true)));
    else
        grads[0] = awl_mul(y, awl_sub(grad, awl_sum(awl_mul(grad, y), 1, dim, true)));
    return AWL_OK;
}

static awl_tensor *softmax_forward(const char *api, awl_tensor *x, int dim, bool log)
{
    if (!x) return NULL;
    int d;
    if (awl_ops_check_float(api, x) != 0 || awl_normalize_dim(api, dim, x->ndim, &d) != 0)
        return NULL;
    awl_scope_begin(); /* the composed path's temporaries die here */
    awl_tensor *out = NULL;
    int rc = softmax_fused(x, d, log, &out);
    if (rc == 0) out = softmax_composed(x, d, log);
    out = awl_keep(rc < 0 ? NULL : out);
    awl_scope_end();
    awl_node *node = awl_node_record(out, log ? "log_softmax" : "softmax", softmax_backward, 1, &x,
                                     sizeof(softmax_ctx));
    if (node) {
        *(softmax_ctx *)awl_node_ctx(node) = (softmax_ctx){d, log, false};
        awl_node_save_output(node, out);
    }
    return out;
}

awl_tensor *awl_softmax(awl_tensor *x, int dim)
{
    return softmax_forward("awl_softmax", x, dim, false);
}

awl_tensor *awl_log_softmax(awl_tensor *x, int dim)
{
    return softmax_forward("awl_log_softmax", x, dim, true);
}

/* ---- logsumexp: x (...), out x's shape without (or with size-1) axis dim ----- */

/* dx = grad * exp(x - out), with out and grad given back their reduced axis.
 * Saved: x, out. */
static int logsumexp_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    const softmax_ctx *ctx = awl_node_ctx(node);
    awl_tensor *x = awl_node_saved(node, 0), *out = awl_node_saved(node, 1);
    if (!ctx->keepdim) {
        out = awl_unsqueeze(out, ctx->dim);
        grad = awl_unsqueeze(grad, ctx->dim);
    }
    grads[0] = awl_mul(grad, awl_exp(awl_sub(x, out)));
    return AWL_OK;
}

awl_tensor *awl_logsumexp(awl_tensor *x, int dim, bool keepdim)
{
    if (!x) return NULL;
    int d;
    if (awl_ops_check_float("awl_logsumexp", x) != 0 ||
        awl_normalize_dim("awl_logsumexp", dim, x->ndim, &d) != 0)
        return NULL;
    awl_scope_begin();
    awl_tensor *m = awl_tensor_reduce(AWL_REDUCE_MAX, x, 1, &d, true);
    awl_tensor *e = awl_tensor_unary(AWL_UNARY_EXP, awl_tensor_binary(AWL_BINARY_SUB, x, m), 0.0);
    awl_tensor *lse =
        awl_tensor_unary(AWL_UNARY_LOG, awl_tensor_reduce(AWL_REDUCE_SUM, e, 1, &d, true), 0.0);
    awl_tensor *out = awl_tensor_binary(AWL_BINARY_ADD, m, lse);
    if (!keepdim) out = awl_tensor_squeeze(out, d);
    out = awl_keep(out);
    awl_scope_end();
    awl_node *node =
        awl_node_record(out, "logsumexp", logsumexp_backward, 1, &x, sizeof(softmax_ctx));
    if (node) {
        *(softmax_ctx *)awl_node_ctx(node) = (softmax_ctx){d, false, keepdim};
        awl_node_save(node, x);
        awl_node_save_output(node, out);
    }
    return out;
}
