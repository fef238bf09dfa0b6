/*
 * autograd/ops_shape.c - differentiable views and joins.
 *
 * Views (reshape where the strides allow, flatten, permute, transpose,
 * expand, slice, squeeze, unsqueeze, split) share the input's storage: the
 * raw layer builds new strides and nothing is copied. Their backward is the
 * inverse view of the gradient (permute by the inverse permutation,
 * unsqueeze for squeeze, ...), except in two cases:
 *   - expand returns the gradient as is; the engine sums it over the axes
 *     the input was broadcast along, which is exactly expand's adjoint;
 *   - slice has no inverse view: its adjoint places the gradient into zeros
 *     of the input's shape. That is a differentiable op of its own,
 *     slice_backward, whose backward is the slice again, so that double
 *     backward through a slice works.
 * concat's backward is one slice per input; stack is unsqueeze + concat.
 * split is one slice per piece, so its backward makes one input-sized
 * zero tensor per piece and the engine adds them: k times the traffic of a
 * single multi-output node, accepted for k as small as a q/k/v split.
 *
 * Shape and axis errors come from the raw views, which name the public op
 * ("awl_permute: (0,0,1) is not a permutation of the axes of (2,3,4)").
 * A slice's start and stop may be negative (counted from the end) but must
 * lie in [-size, size]; there is no Python-style clamping, since in C an
 * out-of-range bound is far more often a bug than an intended empty slice.
 */
#include <stdlib.h>

#include "autograd/ops_common.h"

/* ---- reshape, flatten: x (...), out (shape) with as many elements --------- */

static int reshape_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    grads[0] = awl_reshape(grad, node->inputs[0].ndim, node->inputs[0].shape);
    return AWL_OK;
}

awl_tensor *awl_reshape(awl_tensor *x, int ndim, const int64_t *shape)
{
    awl_tensor *out = awl_tensor_reshape(x, ndim, shape);
    if (out != x) awl_node_record(out, "reshape", reshape_backward, 1, &x, 0);
    return out;
}

/* Axes start_dim..end_dim become one; a 0-d x becomes (1). */
awl_tensor *awl_flatten(awl_tensor *x, int start_dim, int end_dim)
{
    if (!x) return NULL;
    if (x->ndim == 0) return awl_reshape(x, AWL_SHAPE(1));
    int s, e;
    if (awl_normalize_dim("awl_flatten", start_dim, x->ndim, &s) != 0 ||
        awl_normalize_dim("awl_flatten", end_dim, x->ndim, &e) != 0)
        return NULL;
    if (s > e) {
        awl_error(AWL_ERR_INVALID, "awl_flatten: start_dim %d comes after end_dim %d", start_dim,
                  end_dim);
        return NULL;
    }
    int64_t shape[AWL_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < s; d++) shape[n++] = x->shape[d];
    shape[n] = 1;
    for (int d = s; d <= e; d++) shape[n] *= x->shape[d];
    n++;
    for (int d = e + 1; d < x->ndim; d++) shape[n++] = x->shape[d];
    return awl_reshape(x, n, shape);
}

/* ---- permute, transpose: out axis i is x's axis dims[i] ---------------------- */

typedef struct permute_ctx {
    int inverse[AWL_MAX_DIMS];
} permute_ctx;

static int permute_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    grads[0] = awl_permute(grad, ((permute_ctx *)awl_node_ctx(node))->inverse);
    return AWL_OK;
}

awl_tensor *awl_permute(awl_tensor *x, const int *dims)
{
    awl_tensor *out = awl_tensor_permute(x, dims);
    awl_node *node = awl_node_record(out, "permute", permute_backward, 1, &x, sizeof(permute_ctx));
    if (node) {
        permute_ctx *ctx = awl_node_ctx(node);
        for (int i = 0; i < x->ndim; i++)
            ctx->inverse[dims[i] < 0 ? dims[i] + x->ndim : dims[i]] = i;
    }
    return out;
}

typedef struct transpose_ctx {
    int dim0, dim1;
} transpose_ctx;

static int transpose_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    const transpose_ctx *ctx = awl_node_ctx(node);
    grads[0] = awl_transpose(grad, ctx->dim0, ctx->dim1);
    return AWL_OK;
}

awl_tensor *awl_transpose(awl_tensor *x, int dim0, int dim1)
{
    awl_tensor *out = awl_tensor_transpose(x, dim0, dim1);
    awl_node *node =
        awl_node_record(out, "transpose", transpose_backward, 1, &x, sizeof(transpose_ctx));
    if (node) *(transpose_ctx *)awl_node_ctx(node) = (transpose_ctx){dim0, dim1};
    return out;
}

/* ---- expand: x (...) broadcast to (shape); -1 keeps a size ------------------- */

static int pass_through_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    (void)node;
    grads[0] = grad;
    return AWL_OK;
}

awl_tensor *awl_expand(awl_tensor *x, int ndim, const int64_t *shape)
{
    awl_tensor *out = awl_tensor_expand(x, ndim, shape);
    awl_node_record(out, "expand", pass_through_backward, 1, &x, 0);
    return out;
}

/* ---- slice: x (..., n, ...), out (..., ceil((stop - start) / step), ...) ---- */

typedef struct slice_ctx {
    int dim;
    int64_t start, stop, step; /* normalised: 0 <= start, stop <= n */
} slice_ctx;

/* out = zeros of the input's shape with g written into the slice. */
static awl_tensor *slice_backward_op(awl_tensor *g, int ndim, const int64_t *shape,
                                     const slice_ctx *s);

static int slice_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    grads[0] =
        slice_backward_op(grad, node->inputs[0].ndim, node->inputs[0].shape, awl_node_ctx(node));
    return AWL_OK;
}

/* The slice's adjoint is a slice again. */
static int slice_backward_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    const slice_ctx *s = awl_node_ctx(node);
    grads[0] = awl_slice(grad, s->dim, s->start, s->stop, s->step);
    return AWL_OK;
}

static awl_tensor *slice_backward_op(awl_tensor *g, int ndim, const int64_t *shape,
                                     const slice_ctx *s)
{
    if (!g) return NULL;
    awl_scope_begin();
    awl_tensor *out = awl_tensor_new_on(g, ndim, shape, g->dtype);
    if (out &&
        (awl_tensor_fill_(out, 0.0) != 0 ||
         awl_tensor_copy_(awl_tensor_slice(out, s->dim, s->start, s->stop, s->step), g) != 0))
        out = NULL;
    out = awl_keep(out);
    awl_scope_end();
    awl_node *node =
        awl_node_record(out, "slice_backward", slice_backward_backward, 1, &g, sizeof(slice_ctx));
    if (node) *(slice_ctx *)awl_node_ctx(node) = *s;
    return out;
}

awl_tensor *awl_slice(awl_tensor *x, int dim, int64_t start, int64_t stop, int64_t step)
{
    awl_tensor *out = awl_tensor_slice(x, dim, start, stop, step);
    awl_node *node = awl_node_record(out, "slice", slice_backward, 1, &x, sizeof(slice_ctx));
    if (node) {
        int d = dim < 0 ? dim + x->ndim : dim;
        int64_t n = x->shape[d];
        *(slice_ctx *)awl_node_ctx(node) =
            (slice_ctx){d, start < 0 ? start + n : start, stop < 0 ? stop + n : stop, step};
    }
    return out;
}

/* Pieces of `size` along dim (the last may be shorter); each a slice view. */
int awl_split(awl_tensor *x, int64_t size, int dim, awl_tensor **out, int max_out)
{
    if (!x) return AWL_ERR_INVALID;
    int d;
    if (awl_normalize_dim("awl_split", dim, x->ndim, &d) != 0) return AWL_ERR_INVALID;
    if (size <= 0)
        return awl_error(AWL_ERR_INVALID, "awl_split: piece size must be positive, got %lld",
                         (long long)size);
    int64_t n = x->shape[d], pieces = (n + size - 1) / size;
    if (pieces > max_out)
        return awl_error(AWL_ERR_INVALID, "awl_split: %lld pieces needed, room for %d",
                         (long long)pieces, max_out);
    for (int64_t i = 0; i < pieces; i++) {
        out[i] = awl_slice(x, d, i * size, (i + 1) * size < n ? (i + 1) * size : n, 1);
        if (!out[i]) return awl_last_error_code();
    }
    return (int)pieces;
}

/* ---- squeeze, unsqueeze -------------------------------------------------------- */

/* A negative dim names the same position in the squeezed gradient's
 * unsqueeze (and vice versa), so the op's own argument is kept as given. */
static int squeeze_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    grads[0] = awl_unsqueeze(grad, *(int *)awl_node_ctx(node));
    return AWL_OK;
}

/* x (..., 1, ...) -> out without axis dim. */
awl_tensor *awl_squeeze(awl_tensor *x, int dim)
{
    awl_tensor *out = awl_tensor_squeeze(x, dim);
    awl_node *node = awl_node_record(out, "squeeze", squeeze_backward, 1, &x, sizeof(int));
    if (node) *(int *)awl_node_ctx(node) = dim;
    return out;
}

static int unsqueeze_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    grads[0] = awl_squeeze(grad, *(int *)awl_node_ctx(node));
    return AWL_OK;
}

/* x (...) -> out with a new size-1 axis at dim (-1: the end). */
awl_tensor *awl_unsqueeze(awl_tensor *x, int dim)
{
    awl_tensor *out = awl_tensor_unsqueeze(x, dim);
    awl_node *node = awl_node_record(out, "unsqueeze", unsqueeze_backward, 1, &x, sizeof(int));
    if (node) *(int *)awl_node_ctx(node) = dim;
    return out;
}

/* ---- contiguous, clone: out x's shape, row-major -------------------------------- */

awl_tensor *awl_contiguous(awl_tensor *x)
{
    if (!x) return NULL;
    awl_tensor *out = awl_tensor_contiguous(x);
    /* Already contiguous: x itself comes back, and it must not get a node. */
    if (out != x) awl_node_record(out, "contiguous", pass_through_backward, 1, &x, 0);
    return out;
}

awl_tensor *awl_clone(awl_tensor *x)
{
    if (!x) return NULL;
    awl_tensor *out = awl_tensor_clone(x);
    awl_node_record(out, "clone", pass_through_backward, 1, &x, 0);
    return out;
}

/* ---- concat, stack --------------------------------------------------------------- */

/* stack's inputs must share dtype, device and shape; checked here so that
 * the message names awl_stack rather than the concat it is built on. */
static int check_stackable(int n, awl_tensor *const *ts)
{
    if (n < 1) return awl_error(AWL_ERR_INVALID, "awl_stack: needs at least one tensor");
    for (int i = 1; i < n; i++) {
        const awl_tensor *t = ts[i];
        if (t->dtype != ts[0]->dtype)
            return awl_error(AWL_ERR_INVALID, "awl_stack: dtypes differ: %s and %s",
                             awl_dtype_name(ts[0]->dtype), awl_dtype_name(t->dtype));
        int rc = awl_check_same_device("awl_stack", ts[0], t);
        if (rc != 0) return rc;
        if (!awl_same_shape(ts[0], t)) {
            char s0[AWL_OPS_SHAPE_BUF], s1[AWL_OPS_SHAPE_BUF];
            return awl_error(AWL_ERR_INVALID, "awl_stack: tensor %d has shape %s, tensor 0 has %s",
                             i, awl_shape_str(t, s1, sizeof s1),
                             awl_shape_str(ts[0], s0, sizeof s0));
        }
    }
    return AWL_OK;
}

/* The gradient of input i is its slice of grad along the joined axis. */
static int concat_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    int dim = *(int *)awl_node_ctx(node);
    int64_t offset = 0;
    for (int i = 0; i < node->n_inputs; i++) {
        int64_t size = node->inputs[i].shape[dim];
        if (awl_node_needs_grad(node, i)) grads[i] = awl_slice(grad, dim, offset, offset + size, 1);
        offset += size;
    }
    return AWL_OK;
}

/* ts[i] (..., n_i, ...) -> out (..., sum n_i, ...). */
awl_tensor *awl_concat(int n, awl_tensor *const *ts, int dim)
{
    awl_tensor *out = awl_tensor_concat(n, ts, dim);
    awl_node *node = awl_node_record(out, "concat", concat_backward, n, ts, sizeof(int));
    if (node) *(int *)awl_node_ctx(node) = dim < 0 ? dim + ts[0]->ndim : dim;
    return out;
}

/* ts[i] (...) all of one shape -> out with a new axis dim of size n. */
awl_tensor *awl_stack(int n, awl_tensor *const *ts, int dim)
{
    for (int i = 0; i < n; i++)
        if (!ts[i]) return NULL;
    int d;
    if (check_stackable(n, ts) != 0 ||
        awl_normalize_dim("awl_stack", dim, ts[0]->ndim + 1, &d) != 0)
        return NULL;
    awl_tensor **rows = malloc((size_t)n * sizeof *rows);
    if (!rows) {
        awl_error(AWL_ERR_OOM, "awl_stack: out of host memory for %d tensors", n);
        return NULL;
    }
    awl_scope_begin(); /* the unsqueezed views die here; the graph keeps what it needs */
    for (int i = 0; i < n; i++) rows[i] = awl_unsqueeze(ts[i], d);
    awl_tensor *out = awl_keep(awl_concat(n, rows, d));
    awl_scope_end();
    free(rows);
    return out;
}
