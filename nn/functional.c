/*
 * nn/functional.c - differentiable layers: linear, dropout, cross-entropy,
 * LayerNorm. (Attention lives in nn/attention.c.)
 *
 * Each is one graph node with a hand-written backward rather than a chain of
 * generic ops, for speed and memory:
 *   - linear multiplies all rows in one GEMM, reads the weight through a
 *     transposed view and adds the bias in place into the product, so a
 *     layer allocates exactly its output;
 *   - dropout saves nothing where the backend has a dropout kernel: the mask
 *     is a function of the generator state (common/dropout.h), which the
 *     node keeps, and its backward computes it again; composed, it saves
 *     only its mask;
 *   - cross-entropy and LayerNorm run the backend's fused kernels forward
 *     and backward, saving only what the kernels need (the log-sum-exp per
 *     row; the mean and 1/std per row).
 *
 * Cross-entropy of bfloat16 logits (mixed precision, nn/autocast.c) returns
 * a float32 loss, as under PyTorch's autocast: the per-row losses are summed
 * in float32, and the gradient goes back to the logits in bfloat16.
 *
 * The composed path (awl_fused_kernels_enabled() off, a backend without the
 * kernel, or a kernel answering AWL_ERR_UNSUPPORTED for a dtype) builds the
 * same function from autograd ops and is the reference the tests compare
 * with. The fused nodes' backward functions also fall back to a formula
 * written with differentiable ops when grad mode is on during backward
 * (create_graph): the kernels' results carry no graph, the formula's do, so
 * gradients of gradients stay correct.
 */
#include "nn/nn.h"

#include <math.h>
#include <stdlib.h>

#include "autograd/node.h"
#include "common/alloc.h"
#include "nn/functional_internal.h"

/* Every axis but the last, for summing a (..., C) gradient down to (C). */
static awl_tensor *sum_to_last_axis(awl_tensor *g)
{
    if (!g || g->ndim <= 1) return g;
    int dims[AWL_MAX_DIMS];
    for (int d = 0; d < g->ndim - 1; d++) dims[d] = d;
    return awl_sum(g, g->ndim - 1, dims, false);
}

static int check_vector(const char *op, const char *what, const awl_tensor *t, int64_t n,
                        const awl_tensor *like)
{
    char s[AWL_MAX_DIMS * 24];
    if (t->ndim != 1 || t->shape[0] != n)
        return awl_error(AWL_ERR_INVALID, "%s: %s has shape %s, expected (%lld)", op, what,
                         awl_shape_str(t, s, sizeof s), (long long)n);
    if (t->dtype != like->dtype)
        return awl_error(AWL_ERR_INVALID, "%s: %s is %s, the input %s", op, what,
                         awl_dtype_name(t->dtype), awl_dtype_name(like->dtype));
    return awl_check_same_device(op, t, like);
}

/* ---- linear: x (..., in), weight (out, in), bias (out) -> (..., out) -------------- */

typedef struct linear_ctx {
    int x_slot, w_slot; /* saved-tensor index, -1 when not saved */
} linear_ctx;

/* The gradient of input i of `node`, a weight: a (out, rows) @ b (rows, in),
 * a being dY^T. Where the weight is a bfloat16 cast of a float32 parameter
 * (autocast), the product's float32 sums are the gradient
 * (awl_node_input_widens): float32, not rounded to bfloat16 and then cast
 * back by the cast's backward. Where input j (-1: none), the layer's bias,
 * is such a cast too and needs a gradient, the same product also sums dY's
 * columns (a's rows) into *bias_grad, float32, so dY is read once for both;
 * *bias_grad stays NULL where the backend cannot, and the caller sums.
 * Elsewhere, or where the backend has no such product, the product in the
 * operands' dtype. */
static awl_tensor *weight_gradient(awl_node *node, int i, awl_tensor *a, awl_tensor *b, int j,
                                   awl_tensor **bias_grad)
{
    *bias_grad = NULL;
    if (a && b && a->ndim == 2 && b->ndim == 2 && awl_node_input_widens(node, i)) {
        awl_tensor *wide = awl_tensor_new_on(a, AWL_SHAPE(a->shape[0], b->shape[1]), AWL_F32);
        awl_tensor *sums = NULL;
        if (wide && j >= 0 && awl_node_needs_grad(node, j) && awl_node_input_widens(node, j) &&
            !(sums = awl_tensor_new_on(a, AWL_SHAPE(a->shape[0]), AWL_F32)))
            return NULL;
        int status = wide ? awl_tensor_matmul_wide(wide, sums, a, b) : AWL_ERR_OOM;
        if (status == AWL_ERR_UNSUPPORTED && sums) {
            sums = NULL;
            status = awl_tensor_matmul_wide(wide, NULL, a, b);
        }
        if (status == AWL_OK) {
            *bias_grad = sums;
            return wide;
        }
        if (status != AWL_ERR_UNSUPPORTED) return NULL; /* the error is recorded */
    }
    return awl_matmul(a, b);
}

static int linear_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    const linear_ctx *c = awl_node_ctx(node);
    int64_t out_f = node->inputs[1].shape[0], in_f = node->inputs[1].shape[1];
    awl_tensor *g = awl_reshape(grad, AWL_SHAPE(-1, out_f)); /* (rows, out) */
    if (c->w_slot >= 0) {                                    /* dx (rows, in) = g @ W */
        awl_tensor *w = awl_node_saved(node, c->w_slot);
        grads[0] = awl_reshape(awl_matmul(g, w), node->inputs[0].ndim, node->inputs[0].shape);
    }
    awl_tensor *db = NULL;
    if (c->x_slot >= 0) { /* dW (out, in) = g^T @ x, and db with it where it can */
        awl_tensor *x2 = awl_reshape(awl_node_saved(node, c->x_slot), AWL_SHAPE(-1, in_f));
        grads[1] = weight_gradient(node, 1, awl_transpose(g, 0, 1), x2, 2, &db);
    }
    if (awl_node_needs_grad(node, 2)) grads[2] = db ? db : awl_sum(g, AWL_DIMS(0), false);
    return AWL_OK;
}

/* out (rows, out) = x (rows, in) @ wt (in, out) + bias, no graph: a backend
 * with a bias epilogue (CUDA: cuBLASLt) adds the bias as the product is
 * written. Otherwise the output starts as the bias broadcast over the rows
 * and the product is accumulated onto it: one pass over the output instead
 * of the two that zeroing (BLAS's beta = 0) and a separate add take. */
static int linear_into(awl_tensor *out, awl_tensor *x, awl_tensor *wt, awl_tensor *bias)
{
    int status = AWL_ERR_UNSUPPORTED;
    if (bias && awl_fused_available(AWL_KERNEL_MATMUL_BIAS, x))
        status = awl_tensor_matmul_bias(out, x, wt, bias);
    if (status == AWL_ERR_UNSUPPORTED) {
        status = bias ? awl_tensor_copy_(out, bias) : AWL_OK;
        if (status == AWL_OK) status = awl_tensor_matmul_out(out, x, wt, bias != NULL);
    }
    return status;
}

awl_tensor *awl_linear(awl_tensor *x, awl_tensor *weight, awl_tensor *bias)
{
    if (!x || !weight) return NULL;
    const char *op = "awl_linear";
    char s1[AWL_MAX_DIMS * 24], s2[AWL_MAX_DIMS * 24];
    if (weight->ndim != 2 || x->ndim < 1 || x->shape[x->ndim - 1] != weight->shape[1]) {
        awl_error(AWL_ERR_INVALID, "%s: input %s does not match weight %s (out, in)", op,
                  awl_shape_str(x, s1, sizeof s1), awl_shape_str(weight, s2, sizeof s2));
        return NULL;
    }
    int64_t in_f = weight->shape[1], out_f = weight->shape[0];
    if (bias && check_vector(op, "bias", bias, out_f, x) < 0) return NULL;
    int64_t shape[AWL_MAX_DIMS], rows = 1;
    for (int d = 0; d < x->ndim - 1; d++) rows *= shape[d] = x->shape[d];
    shape[x->ndim - 1] = out_f;

    awl_scope_begin();
    awl_tensor *out = awl_tensor_new_on(x, x->ndim, shape, x->dtype);
    awl_tensor *out2 = awl_tensor_reshape(out, AWL_SHAPE(rows, out_f));
    awl_tensor *x2 = awl_tensor_reshape(x, AWL_SHAPE(rows, in_f));
    awl_tensor *wt = awl_tensor_transpose(weight, 0, 1);
    int status = out2 && x2 && wt ? linear_into(out2, x2, wt, bias) : awl_last_error_code();
    out = status == AWL_OK ? awl_keep(out) : NULL;
    awl_scope_end();

    awl_node *node = awl_node_record(out, "linear", linear_backward, 3,
                                     (awl_tensor *[]){x, weight, bias}, sizeof(linear_ctx));
    if (node) {
        linear_ctx *c = awl_node_ctx(node);
        c->w_slot = awl_node_needs_grad(node, 0) ? awl_node_save(node, weight) : -1;
        c->x_slot = awl_node_needs_grad(node, 1) ? awl_node_save(node, x) : -1;
    }
    return out;
}

/* ---- mlp: linear, GELU, linear ---------------------------------------------------- */

/* Saved: x, w1, w2, pre = x W1^T + b1 (rows, hidden), act = gelu(pre)
 * (rows, hidden), then b1 where there is one (its slot in the context). */
enum { MLP_X, MLP_W1, MLP_W2, MLP_PRE, MLP_ACT };
typedef struct mlp_ctx {
    int b1_slot; /* -1: no b1 */
} mlp_ctx;

/* g (rows, out): dW2 = g^T act, db2 = sum g, dpre = (g W2) * gelu'(pre)
 * (in one product where the backend has it), dW1 = dpre^T x, db1 = sum
 * dpre, dx = dpre W1. A backward that is itself recorded (create_graph)
 * takes pre and act again from the inputs through the composed ops, so that
 * its result depends on them as the forward did. */
static int mlp_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    const mlp_ctx *c = awl_node_ctx(node);
    awl_tensor *x = awl_node_saved(node, MLP_X), *w1 = awl_node_saved(node, MLP_W1),
               *w2 = awl_node_saved(node, MLP_W2), *pre = awl_node_saved(node, MLP_PRE),
               *act = awl_node_saved(node, MLP_ACT);
    if (!x || !w1 || !w2 || !pre || !act) return AWL_ERR_INVALID;
    const bool recorded = awl_is_grad_enabled();
    awl_tensor *x2 = awl_reshape(x, AWL_SHAPE(-1, w1->shape[1]));
    if (recorded) {
        pre = awl_linear(x2, w1, c->b1_slot >= 0 ? awl_node_saved(node, c->b1_slot) : NULL);
        act = awl_gelu(pre);
    }
    awl_tensor *g = awl_reshape(grad, AWL_SHAPE(-1, w2->shape[0]));
    awl_tensor *db2 = NULL, *db1 = NULL;
    if (awl_node_needs_grad(node, 3))
        grads[3] = weight_gradient(node, 3, awl_transpose(g, 0, 1), act, 4, &db2);
    if (awl_node_needs_grad(node, 4)) grads[4] = db2 ? db2 : awl_sum(g, AWL_DIMS(0), false);
    if (!awl_node_needs_grad(node, 0) && !awl_node_needs_grad(node, 1) &&
        !awl_node_needs_grad(node, 2))
        return AWL_OK;
    awl_tensor *dpre = NULL;
    if (!recorded && g) {
        dpre = awl_tensor_new_on(pre, 2, pre->shape, pre->dtype);
        int status = dpre ? awl_tensor_matmul_gelu_backward(dpre, g, w2, pre) : AWL_ERR_OOM;
        if (status == AWL_ERR_UNSUPPORTED)
            dpre = NULL;
        else if (status != AWL_OK)
            return status;
    }
    if (!dpre) dpre = awl_gelu_backward(awl_matmul(g, w2), pre);
    if (awl_node_needs_grad(node, 1))
        grads[1] = weight_gradient(node, 1, awl_transpose(dpre, 0, 1), x2, 2, &db1);
    if (awl_node_needs_grad(node, 2)) grads[2] = db1 ? db1 : awl_sum(dpre, AWL_DIMS(0), false);
    if (awl_node_needs_grad(node, 0))
        grads[0] = awl_reshape(awl_matmul(dpre, w1), x->ndim, x->shape);
    return AWL_OK;
}

awl_tensor *awl_mlp(awl_tensor *x, awl_tensor *w1, awl_tensor *b1, awl_tensor *w2, awl_tensor *b2)
{
    if (!x || !w1 || !w2) return NULL;
    const char *op = "awl_mlp";
    char s1[AWL_MAX_DIMS * 24], s2[AWL_MAX_DIMS * 24], s3[AWL_MAX_DIMS * 24];
    if (w1->ndim != 2 || w2->ndim != 2 || x->ndim < 1 || x->shape[x->ndim - 1] != w1->shape[1] ||
        w2->shape[1] != w1->shape[0]) {
        awl_error(AWL_ERR_INVALID, "%s: input %s, w1 %s and w2 %s do not chain", op,
                  awl_shape_str(x, s1, sizeof s1), awl_shape_str(w1, s2, sizeof s2),
                  awl_shape_str(w2, s3, sizeof s3));
        return NULL;
    }
    int64_t in_f = w1->shape[1], hidden = w1->shape[0], out_f = w2->shape[0];
    if ((b1 && check_vector(op, "b1", b1, hidden, x) < 0) ||
        (b2 && check_vector(op, "b2", b2, out_f, x) < 0) || awl_check_same_device(op, w1, x) < 0 ||
        awl_check_same_device(op, w2, x) < 0)
        return NULL;
    if (w1->dtype != x->dtype || w2->dtype != x->dtype) {
        awl_error(AWL_ERR_INVALID, "%s: input %s, w1 %s, w2 %s: one dtype", op,
                  awl_dtype_name(x->dtype), awl_dtype_name(w1->dtype), awl_dtype_name(w2->dtype));
        return NULL;
    }
    bool fused = awl_fused_available(AWL_KERNEL_MATMUL_BIAS_GELU, x) &&
                 awl_fused_available(AWL_KERNEL_MATMUL_GELU_BACKWARD, x);
    int64_t shape[AWL_MAX_DIMS], rows = 1;
    for (int d = 0; d < x->ndim - 1; d++) rows *= shape[d] = x->shape[d];
    shape[x->ndim - 1] = out_f;

    /* the first product and its GELU in one kernel, else the composed ops */
    int status = AWL_ERR_UNSUPPORTED;
    awl_tensor *out = NULL, *pre = NULL, *act = NULL;
    awl_scope_begin();
    if (fused) {
        pre = awl_tensor_new_on(x, AWL_SHAPE(rows, hidden), x->dtype);
        act = awl_tensor_new_on(x, AWL_SHAPE(rows, hidden), x->dtype);
        awl_tensor *x2 = awl_tensor_reshape(x, AWL_SHAPE(rows, in_f));
        awl_tensor *w1t = awl_tensor_transpose(w1, 0, 1);
        status = pre && act && x2 && w1t ? awl_tensor_matmul_bias_gelu(act, pre, x2, w1t, b1)
                                         : awl_last_error_code();
    }
    if (status == AWL_OK) {
        out = awl_tensor_new_on(x, x->ndim, shape, x->dtype);
        awl_tensor *out2 = awl_tensor_reshape(out, AWL_SHAPE(rows, out_f));
        awl_tensor *w2t = awl_tensor_transpose(w2, 0, 1);
        status = out2 && w2t ? linear_into(out2, act, w2t, b2) : awl_last_error_code();
    }
    if (status == AWL_OK) {
        out = awl_keep(out);
        pre = awl_keep(pre);
        act = awl_keep(act);
    }
    awl_scope_end();
    if (status == AWL_ERR_UNSUPPORTED) return awl_linear(awl_gelu(awl_linear(x, w1, b1)), w2, b2);
    if (status != AWL_OK) return NULL;

    awl_node *node = awl_node_record(out, "mlp", mlp_backward, 5,
                                     (awl_tensor *[]){x, w1, b1, w2, b2}, sizeof(mlp_ctx));
    if (node) {
        awl_node_save(node, x);
        awl_node_save(node, w1);
        awl_node_save(node, w2);
        awl_node_save(node, pre);
        awl_node_save(node, act);
        ((mlp_ctx *)awl_node_ctx(node))->b1_slot = b1 ? awl_node_save(node, b1) : -1;
    }
    return out;
}

/* ---- dropout: x (...) -> out (...) ------------------------------------------------ */

/* The mask of common/dropout.h for draw d: (u < 1 - p) / (1 - p) in x's
 * dtype and shape, u the uniform stream at (d->seed, d->offset). */
static awl_tensor *dropout_mask(awl_tensor *x, const awl_dropout_args *d)
{
    uint64_t seed, offset;
    awl_rng_get_state(&seed, &offset);
    awl_rng_set_state(d->seed, d->offset);
    awl_tensor *mask = awl_tensor_new_on(x, x->ndim, x->shape, x->dtype);
    int status = awl_tensor_uniform_(mask, 0.0, 1.0);
    awl_rng_set_state(seed, offset);
    if (status == AWL_OK)
        status = awl_tensor_unary_out(AWL_UNARY_LT_SCALAR, mask, mask, 1.0 - d->p);
    if (status == AWL_OK)
        status = awl_tensor_unary_out(AWL_UNARY_MUL_SCALAR, mask, mask, awl_dropout_scale(d->p));
    return status == AWL_OK ? mask : NULL;
}

/* Composed: the mask is built and saved. */
static int dropout_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    grads[0] = awl_mul(grad, awl_node_saved(node, 0));
    return AWL_OK;
}

/* Fused: nothing is saved; the backward is the same dropout of the
 * gradient (a differentiable op, so gradients of gradients work too). */
static int dropout_fused_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    grads[0] = awl_nn_dropout_at(grad, awl_node_ctx(node));
    return AWL_OK;
}

awl_tensor *awl_nn_dropout_at(awl_tensor *x, const awl_dropout_args *d)
{
    if (!x) return NULL;
    awl_scope_begin();
    awl_tensor *out = NULL, *mask = NULL;
    int status = AWL_ERR_UNSUPPORTED;
    if (awl_fused_available(AWL_KERNEL_DROPOUT, x)) {
        out = awl_tensor_new_on(x, x->ndim, x->shape, x->dtype);
        status = out ? awl_tensor_dropout(out, x, d) : AWL_ERR_OOM;
        if (status != AWL_OK) out = NULL;
    }
    if (status == AWL_ERR_UNSUPPORTED) {
        mask = dropout_mask(x, d);
        out = mask ? awl_tensor_binary(AWL_BINARY_MUL, x, mask) : NULL;
    }
    awl_node *node = mask ? awl_node_record(out, "dropout", dropout_backward, 1, &x, 0)
                          : awl_node_record(out, "dropout", dropout_fused_backward, 1, &x,
                                            sizeof(awl_dropout_args));
    if (node && mask) awl_node_save(node, mask);
    if (node && !mask) *(awl_dropout_args *)awl_node_ctx(node) = *d;
    out = awl_keep(out);
    awl_scope_end();
    return out;
}

awl_dropout_args awl_nn_dropout_draw(double p, uint64_t n)
{
    awl_dropout_args d = {p, 0, 0};
    awl_rng_get_state(&d.seed, NULL);
    d.offset = awl_rng_reserve(n);
    return d;
}

awl_tensor *awl_dropout(awl_tensor *x, double p, bool training)
{
    if (!x) return NULL;
    if (!(p >= 0.0 && p <= 1.0)) {
        awl_error(AWL_ERR_INVALID, "awl_dropout: probability %g is outside [0, 1]", p);
        return NULL;
    }
    if (!training || p == 0.0) return awl_adopt(awl_retain(x));
    if (!awl_dtype_is_float(x->dtype)) {
        awl_error(AWL_ERR_INVALID, "awl_dropout: %s tensors are not supported",
                  awl_dtype_name(x->dtype));
        return NULL;
    }
    awl_dropout_args d = awl_nn_dropout_draw(p, (uint64_t)awl_numel(x));
    return awl_nn_dropout_at(x, &d);
}

/* ---- dropout_add: x (...), h (...) -> out (...) ----------------------------------- */

typedef struct dropout_add_ctx {
    awl_dropout_args d; /* p = 0: no dropout */
    awl_dtype h_dtype;
} dropout_add_ctx;

/* The dropout of grad cast to dtype in one kernel (a bfloat16 branch's
 * gradient from the float32 stream), or NULL where the backend cannot, or
 * where the backward itself is recorded (create_graph), which needs the
 * composed path's nodes. */
static awl_tensor *dropout_of_cast(awl_tensor *grad, awl_dtype dtype, const awl_dropout_args *d)
{
    if (awl_is_grad_enabled() || dtype == grad->dtype) return NULL;
    awl_tensor *out = awl_tensor_new_on(grad, grad->ndim, grad->shape, dtype);
    if (out && awl_tensor_dropout(out, grad, d) == AWL_OK) return out;
    if (out) awl_release(awl_take(out)); /* the composed path instead */
    return NULL;
}

/* dx = grad; dh = the dropout of grad cast to h's dtype (the composed
 * path's order: the cast's backward, then the dropout's; one kernel for
 * both where the backend has it, the same bits). Without dropout, the cast
 * may have come with grad already (awl_node_want_grad_copy, asked for
 * when the node was recorded): the LayerNorm that reads this sum wrote it
 * beside its gradient. */
static int dropout_add_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    const dropout_add_ctx *c = awl_node_ctx(node);
    if (awl_node_needs_grad(node, 0)) grads[0] = grad;
    if (awl_node_needs_grad(node, 1)) {
        awl_tensor *g = c->d.p > 0.0 ? dropout_of_cast(grad, c->h_dtype, &c->d)
                                     : awl_node_take_grad_copy(node, c->h_dtype);
        if (!g) {
            g = awl_cast(grad, c->h_dtype);
            if (c->d.p > 0.0) g = awl_nn_dropout_at(g, &c->d);
        }
        grads[1] = g;
    }
    return AWL_OK;
}

/* Checks x and h and draws the dropout (none when !training): c. */
static int dropout_add_setup(const char *op, awl_tensor *x, awl_tensor *h, double p, bool training,
                             dropout_add_ctx *c)
{
    if (!(p >= 0.0 && p <= 1.0))
        return awl_error(AWL_ERR_INVALID, "%s: probability %g is outside [0, 1]", op, p);
    if (!awl_dtype_is_float(x->dtype) || !awl_dtype_is_float(h->dtype) || !awl_same_shape(x, h)) {
        char s1[160], s2[160];
        return awl_error(AWL_ERR_INVALID,
                         "%s: x %s %s and h %s %s must be float tensors of one shape", op,
                         awl_dtype_name(x->dtype), awl_shape_str(x, s1, sizeof s1),
                         awl_dtype_name(h->dtype), awl_shape_str(h, s2, sizeof s2));
    }
    if (!training) p = 0.0;
    *c = (dropout_add_ctx){{p, 0, 0}, h->dtype};
    if (p > 0.0) c->d = awl_nn_dropout_draw(p, (uint64_t)awl_numel(h));
    return AWL_OK;
}

/* The node of out = x + dropout(h) made by a kernel. */
static void record_dropout_add(awl_tensor *out, awl_tensor *x, awl_tensor *h,
                               const dropout_add_ctx *c)
{
    awl_node *node = awl_node_record(out, "dropout_add", dropout_add_backward, 2,
                                     (awl_tensor *[]){x, h}, sizeof *c);
    if (!node) return;
    *(dropout_add_ctx *)awl_node_ctx(node) = *c;
    /* a bfloat16 branch's gradient is the cast of the stream's */
    if (c->d.p == 0.0 && h->dtype != x->dtype) awl_node_want_grad_copy(node, h->dtype);
}

/* x + dropout(h) with c's draw: the kernel, or the composed ops. */
static awl_tensor *dropout_add_drawn(awl_tensor *x, awl_tensor *h, const dropout_add_ctx *c)
{
    const double p = c->d.p;
    awl_scope_begin();
    awl_tensor *out = NULL;
    int status = AWL_ERR_UNSUPPORTED;
    if (p < 1.0 && awl_fused_available(AWL_KERNEL_DROPOUT_ADD, x)) {
        out = awl_tensor_new_on(x, x->ndim, x->shape, x->dtype);
        status = out ? awl_tensor_dropout_add(out, x, h, p > 0.0 ? &c->d : NULL) : AWL_ERR_OOM;
        if (status != AWL_OK) out = NULL;
    }
    if (status == AWL_ERR_UNSUPPORTED) {
        awl_tensor *branch = p > 0.0 ? awl_nn_dropout_at(h, &c->d) : h;
        if (branch && branch->dtype != x->dtype) branch = awl_cast(branch, x->dtype);
        out = awl_add(x, branch);
    } else if (out) {
        record_dropout_add(out, x, h, c);
    }
    out = awl_keep(out);
    awl_scope_end();
    return out;
}

awl_tensor *awl_dropout_add(awl_tensor *x, awl_tensor *h, double p, bool training)
{
    if (!x || !h) return NULL;
    dropout_add_ctx c;
    if (dropout_add_setup("awl_dropout_add", x, h, p, training, &c) < 0) return NULL;
    return dropout_add_drawn(x, h, &c);
}

/* ---- add_dropout: x (..., S), h (S) -> out (..., S) ------------------------------ */

/* dx = dropout(grad) (the mask again, from the draw); dh = dx summed over
 * the axes h repeats along. */
static int add_dropout_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    const awl_dropout_args *d = awl_node_ctx(node);
    awl_tensor *g = awl_nn_dropout_at(grad, d);
    if (awl_node_needs_grad(node, 0)) grads[0] = g;
    if (awl_node_needs_grad(node, 1)) {
        const awl_node_input *h = &node->inputs[1];
        int64_t nh = 1;
        for (int i = 0; i < h->ndim; i++) nh *= h->shape[i];
        grads[1] = awl_reshape(
            awl_sum(awl_reshape(g, AWL_SHAPE(awl_numel(g) / nh, nh)), AWL_DIMS(0), false), h->ndim,
            h->shape);
    }
    return AWL_OK;
}

awl_tensor *awl_add_dropout(awl_tensor *x, awl_tensor *h, double p, bool training)
{
    if (!x || !h) return NULL;
    const char *op = "awl_add_dropout";
    if (!(p >= 0.0 && p <= 1.0)) {
        awl_error(AWL_ERR_INVALID, "%s: probability %g is outside [0, 1]", op, p);
        return NULL;
    }
    if (!awl_dtype_is_float(x->dtype) || h->dtype != x->dtype || !awl_trailing_shape(h, x)) {
        char s1[160], s2[160];
        awl_error(AWL_ERR_INVALID,
                  "%s: x %s %s and h %s %s must be float tensors of one dtype, h's shape x's "
                  "last axes",
                  op, awl_dtype_name(x->dtype), awl_shape_str(x, s1, sizeof s1),
                  awl_dtype_name(h->dtype), awl_shape_str(h, s2, sizeof s2));
        return NULL;
    }
    if (!training || p == 0.0) return awl_add(x, h);
    awl_dropout_args d = awl_nn_dropout_draw(p, (uint64_t)awl_numel(x));
    awl_scope_begin();
    awl_tensor *out = NULL;
    int status = AWL_ERR_UNSUPPORTED;
    if (p < 1.0 && awl_numel(h) > 0 && awl_fused_available(AWL_KERNEL_ADD_DROPOUT, x)) {
        out = awl_tensor_new_on(x, x->ndim, x->shape, x->dtype);
        status = out ? awl_tensor_add_dropout(out, x, h, &d) : AWL_ERR_OOM;
        if (status != AWL_OK) out = NULL;
    }
    if (status == AWL_ERR_UNSUPPORTED) {
        out = awl_nn_dropout_at(awl_add(x, h), &d);
    } else if (out) {
        awl_node *node = awl_node_record(out, "add_dropout", add_dropout_backward, 2,
                                         (awl_tensor *[]){x, h}, sizeof d);
        if (node) *(awl_dropout_args *)awl_node_ctx(node) = d;
    }
    out = awl_keep(out);
    awl_scope_end();
    return out;
}

/* ---- cross-entropy: logits (N, V) or (B, T, V), targets int32 -> scalar ----------- */

typedef struct ce_ctx {
    int ignore_index;
    int64_t count; /* rows not ignored; -1: counted on the device (saved tensor 3) */
    double scale;  /* the loss is scale times the mean */
    int dl_slot;   /* saved index of the gradient the forward wrote; -1: none */
} ce_ctx;

/* The loss's dtype: float32 for bfloat16 logits, else the logits'. */
static awl_dtype ce_loss_dtype(awl_dtype logits) { return logits == AWL_BF16 ? AWL_F32 : logits; }

/* Copies targets to the host, checks each is in [0, V) or ignore_index, and
 * counts the rows that are not ignored. Returns the host copy (free it) or
 * NULL after an error. (Where the backend checks indices on the device, the
 * fused path does not come here: count_on_device.) */
static int32_t *targets_to_host(awl_tensor *targets, int64_t V, int ignore_index, int64_t *count)
{
    int64_t n = awl_numel(targets);
    int32_t *host = awl_xmalloc((size_t)(n > 0 ? n : 1) * sizeof *host);
    if (awl_to_host(targets, host, (size_t)n * sizeof *host) < 0) {
        free(host);
        return NULL;
    }
    *count = 0;
    for (int64_t i = 0; i < n; i++) {
        if (host[i] == ignore_index) continue;
        if (host[i] < 0 || host[i] >= V) { /* the message of count_on_device's check */
            awl_error(AWL_ERR_INVALID, "awl_cross_entropy: index %d out of range for %lld classes",
                      host[i], (long long)V);
            free(host);
            return NULL;
        }
        (*count)++;
    }
    return host;
}

/* For the composed formulas: the targets as (N, 1) int32 indices with
 * ignored rows pointing at class 0, and a (N, 1) mask in logits' dtype that
 * is 0 on ignored rows (NULL when no row is ignored). */
static int ce_index_tensors(awl_tensor *logits, const int32_t *host, int64_t n, int ignore_index,
                            awl_tensor **idx, awl_tensor **mask)
{
    char device[32];
    awl_tensor_device_name(logits, device, sizeof device);
    int32_t *safe = awl_xmalloc((size_t)(n > 0 ? n : 1) * sizeof *safe);
    double *keep = awl_xmalloc((size_t)(n > 0 ? n : 1) * sizeof *keep);
    bool any_ignored = false;
    for (int64_t i = 0; i < n; i++) {
        bool ignored = host[i] == ignore_index;
        any_ignored |= ignored;
        safe[i] = ignored ? 0 : host[i];
        keep[i] = ignored ? 0.0 : 1.0;
    }
    *idx = awl_from_data(safe, AWL_SHAPE(n, 1), AWL_I32, device);
    *mask = any_ignored ? awl_tensor_cast(awl_from_data(keep, AWL_SHAPE(n, 1), AWL_F64, device),
                                          logits->dtype)
                        : NULL;
    free(safe);
    free(keep);
    return *idx && (*mask || !any_ignored) ? AWL_OK : AWL_ERR_INVALID;
}

static awl_tensor *cross_entropy_composed(awl_tensor *logits2, const int32_t *host, int64_t n,
                                          int ignore_index, int64_t count, double scale)
{
    awl_tensor *idx, *mask;
    if (ce_index_tensors(logits2, host, n, ignore_index, &idx, &mask) < 0) return NULL;
    awl_tensor *picked = awl_gather(awl_log_softmax(logits2, -1), 1, idx); /* (N, 1) */
    if (mask) picked = awl_mul(picked, mask);
    if (picked && picked->dtype != ce_loss_dtype(picked->dtype))
        picked = awl_cast(picked, ce_loss_dtype(picked->dtype));
    awl_tensor *mean = awl_mul_scalar(awl_sum_all(picked), -1.0 / (double)count);
    return scale != 1.0 ? awl_mul_scalar(mean, scale) : mean;
}

/* d loss / d logits = (softmax(logits) - onehot(t)) * mask * grad / count, as
 * differentiable ops. */
static awl_tensor *cross_entropy_grad_composed(awl_tensor *logits, awl_tensor *targets,
                                               const ce_ctx *c, awl_tensor *grad)
{
    int64_t V = logits->shape[logits->ndim - 1], n = awl_numel(targets), count;
    int32_t *host = targets_to_host(targets, V, c->ignore_index, &count);
    if (!host) return NULL;
    awl_tensor *idx, *mask;
    int status = ce_index_tensors(logits, host, n, c->ignore_index, &idx, &mask);
    free(host);
    if (status < 0) return NULL;
    awl_tensor *p = awl_softmax(awl_reshape(logits, AWL_SHAPE(n, V)), -1);
    /* onehot, already masked: zeros with the mask's value scattered at t */
    awl_tensor *onehot = awl_tensor_new_on(logits, AWL_SHAPE(n, V), logits->dtype);
    awl_tensor *src = mask ? mask : awl_tensor_new_on(logits, AWL_SHAPE(n, 1), logits->dtype);
    if (!onehot || !src || awl_tensor_fill_(onehot, 0.0) < 0 ||
        (!mask && awl_tensor_fill_(src, 1.0) < 0) ||
        awl_tensor_scatter_add_(onehot, 1, idx, src) < 0)
        return NULL;
    if (mask) p = awl_mul(p, mask);
    awl_tensor *scale = awl_mul_scalar(grad, 1.0 / (double)count);
    if (scale && scale->dtype != logits->dtype) scale = awl_cast(scale, logits->dtype);
    awl_tensor *d = awl_mul(awl_sub(p, onehot), scale);
    return awl_reshape(d, logits->ndim, logits->shape);
}

/* Each row's share of the loss's gradient grad (a scalar), as the kernels
 * take it: grad * scale / count in logits' dtype, n of them. */
static awl_tensor *ce_row_grads(awl_tensor *grad, const ce_ctx *c, awl_tensor *count_t, int64_t n,
                                awl_dtype dtype)
{
    if (c->scale != 1.0) grad = awl_tensor_unary(AWL_UNARY_MUL_SCALAR, grad, c->scale);
    awl_tensor *scaled = !grad ? NULL
                         : c->count < 0
                             ? awl_tensor_binary(AWL_BINARY_DIV, grad, count_t)
                             : awl_tensor_unary(AWL_UNARY_MUL_SCALAR, grad, 1.0 / (double)c->count);
    return awl_tensor_cast(awl_tensor_contiguous(awl_tensor_expand(scaled, 1, &n)), dtype);
}

/* Saved: logits, lse (N) float32, targets, then count_t where counted on
 * the device and the forward's gradient (ctx.dl_slot) where it wrote one. */
static int cross_entropy_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    const ce_ctx *c = awl_node_ctx(node);
    awl_tensor *logits = awl_node_saved(node, 0), *lse = awl_node_saved(node, 1),
               *targets = awl_node_saved(node, 2);
    if (!logits || !lse || !targets) return AWL_ERR_INVALID;
    /* the forward wrote the gradient for a gradient of exactly 1: the loss
     * is backward's root (awl_cross_entropy_scaled's note) */
    if (c->dl_slot >= 0 && !awl_is_grad_enabled() && awl_grad_is_implied_one(grad)) {
        grads[0] = awl_node_saved(node, c->dl_slot);
        return grads[0] ? AWL_OK : AWL_ERR_INVALID;
    }
    if (!awl_is_grad_enabled() && awl_fused_available(AWL_KERNEL_CROSS_ENTROPY_BACKWARD, logits)) {
        int64_t n = awl_numel(targets);
        awl_tensor *lc = awl_tensor_contiguous(logits);
        awl_tensor *dloss =
            ce_row_grads(grad, c, c->count < 0 ? awl_node_saved(node, 3) : NULL, n, logits->dtype);
        awl_tensor *dl = awl_tensor_new_on(logits, logits->ndim, logits->shape, logits->dtype);
        if (!lc || !dloss || !dl) return AWL_ERR_INVALID;
        int status =
            awl_tensor_cross_entropy_backward(dl, dloss, lc, lse, targets, c->ignore_index);
        if (status != AWL_ERR_UNSUPPORTED) {
            grads[0] = dl;
            return status;
        }
    }
    if (c->scale != 1.0) grad = awl_mul_scalar(grad, c->scale);
    grads[0] = cross_entropy_grad_composed(logits, targets, c, grad);
    return AWL_OK;
}

/* On a device that checks indices itself (awl_tensor_indices_checked_later),
 * the targets stay there: their range is checked by the device (ignored rows
 * masked to 0 first) and the rows not ignored are counted there, as a 0-d
 * tensor of the loss's dtype, so the step does not wait for the device to
 * hand the targets to the host. NULL after an error. */
static awl_tensor *count_on_device(awl_tensor *targets, int64_t V, int ignore_index, awl_dtype dtype)
{
    char device[32];
    awl_tensor_device_name(targets, device, sizeof device);
    awl_tensor *ignored = awl_full(0, NULL, ignore_index, AWL_I32, device);
    awl_tensor *kept = awl_tensor_binary(AWL_BINARY_NE, targets, ignored);
    awl_tensor *masked = awl_tensor_binary(AWL_BINARY_MUL, targets, kept);
    if (!masked || awl_tensor_check_indices(masked, V, "awl_cross_entropy", "classes") < 0)
        return NULL;
    return awl_tensor_reduce(AWL_REDUCE_SUM, awl_tensor_cast(kept, dtype), 0, NULL, false);
}

/* In training (grad mode on, logits needing a gradient), on a backend with
 * the cross_entropy_forward_backward kernel: the loss and, from the same
 * read of the logits, the gradient that backward will hand on when the
 * loss is its root (a gradient of exactly 1), into *dl; else the forward
 * kernel alone. Returns the kernel's status. */
static int ce_forward(awl_tensor *rows, awl_tensor *lse, awl_tensor *lc, awl_tensor *logits,
                      awl_tensor *targets, const ce_ctx *c, awl_tensor *count_t, awl_tensor **dl)
{
    *dl = NULL;
    if (awl_is_grad_enabled() && logits->requires_grad &&
        awl_fused_available(AWL_KERNEL_CROSS_ENTROPY_FORWARD_BACKWARD, logits)) {
        char device[32];
        awl_tensor_device_name(logits, device, sizeof device);
        /* backward's implied gradient, as the engine makes it */
        awl_tensor *one = awl_full(0, NULL, 1.0, ce_loss_dtype(logits->dtype), device);
        awl_tensor *dloss =
            one ? ce_row_grads(one, c, count_t, awl_numel(targets), logits->dtype) : NULL;
        awl_tensor *d = awl_tensor_new_on(logits, logits->ndim, logits->shape, logits->dtype);
        int status = dloss && d ? awl_tensor_cross_entropy_forward_backward(
                                      rows, lse, d, dloss, lc, targets, c->ignore_index)
                                : AWL_ERR_INVALID;
        if (status != AWL_ERR_UNSUPPORTED) {
            *dl = status == AWL_OK ? d : NULL;
            return status;
        }
    }
    return awl_tensor_cross_entropy_forward(rows, lse, lc, targets, c->ignore_index);
}

/* The fused forward, over count rows (count_t, on the device, when count
 * is -1); NULL with *unsupported set when the kernel declines. */
static awl_tensor *cross_entropy_fused(awl_tensor *logits, awl_tensor *targets, int ignore_index,
                                       int64_t count, awl_tensor *count_t, double scale,
                                       bool *unsupported)
{
    int64_t n = awl_numel(targets);
    *unsupported = false;
    awl_scope_begin();
    awl_tensor *lc = awl_tensor_contiguous(logits);
    awl_tensor *rows = awl_tensor_new_on(logits, 1, &n, logits->dtype);
    awl_tensor *lse = awl_tensor_new_on(logits, 1, &n, AWL_F32);
    awl_tensor *loss = NULL, *dl = NULL;
    ce_ctx ctx = {ignore_index, count, scale, -1};
    if (lc && rows && lse) {
        int status = ce_forward(rows, lse, lc, logits, targets, &ctx, count_t, &dl);
        *unsupported = status == AWL_ERR_UNSUPPORTED;
        awl_tensor *sum =
            status != AWL_OK
                ? NULL
                : awl_tensor_reduce(AWL_REDUCE_SUM,
                                    awl_tensor_cast(rows, ce_loss_dtype(rows->dtype)), 0, NULL,
                                    false);
        if (sum)
            loss = count < 0 ? awl_tensor_binary(AWL_BINARY_DIV, sum, count_t)
                             : awl_tensor_unary(AWL_UNARY_MUL_SCALAR, sum, 1.0 / (double)count);
        if (loss && scale != 1.0) loss = awl_tensor_unary(AWL_UNARY_MUL_SCALAR, loss, scale);
    }
    awl_node *node =
        awl_node_record(loss, "cross_entropy", cross_entropy_backward, 1, &logits, sizeof(ce_ctx));
    if (node) {
        awl_node_save(node, logits);
        awl_node_save(node, lse);
        awl_node_save(node, targets);
        if (count < 0) awl_node_save(node, count_t);
        if (dl) ctx.dl_slot = awl_node_save(node, dl);
        *(ce_ctx *)awl_node_ctx(node) = ctx;
    }
    loss = awl_keep(loss);
    awl_scope_end();
    return loss;
}

awl_tensor *awl_cross_entropy(awl_tensor *logits, awl_tensor *targets, int ignore_index)
{
    return awl_cross_entropy_scaled(logits, targets, ignore_index, 1.0);
}

awl_tensor *awl_cross_entropy_scaled(awl_tensor *logits, awl_tensor *targets, int ignore_index,
                                     double scale)
{
    if (!logits || !targets) return NULL;
    const char *op = "awl_cross_entropy";
    char s1[AWL_MAX_DIMS * 24], s2[AWL_MAX_DIMS * 24];
    bool shapes_ok = (logits->ndim == 2 || logits->ndim == 3) && targets->ndim == logits->ndim - 1;
    for (int d = 0; shapes_ok && d < targets->ndim; d++)
        shapes_ok = targets->shape[d] == logits->shape[d];
    if (!shapes_ok) {
        awl_error(AWL_ERR_INVALID,
                  "%s: logits %s and targets %s: expected (N,V) and (N), or "
                  "(B,T,V) and (B,T)",
                  op, awl_shape_str(logits, s1, sizeof s1), awl_shape_str(targets, s2, sizeof s2));
        return NULL;
    }
    if (!awl_dtype_is_float(logits->dtype) || targets->dtype != AWL_I32) {
        awl_error(AWL_ERR_INVALID, "%s: logits must be float and targets int32, not %s and %s", op,
                  awl_dtype_name(logits->dtype), awl_dtype_name(targets->dtype));
        return NULL;
    }
    if (awl_check_same_device(op, logits, targets) < 0) return NULL;
    int64_t V = logits->shape[logits->ndim - 1], n = awl_numel(targets), count;
    awl_tensor *loss = NULL;
    bool unsupported = true;
    bool fused = awl_fused_available(AWL_KERNEL_CROSS_ENTROPY_FORWARD, logits);
    if (fused && awl_tensor_indices_checked_later(targets)) {
        awl_scope_begin();
        awl_tensor *count_t = count_on_device(targets, V, ignore_index,
                                              ce_loss_dtype(logits->dtype));
        if (!count_t) {
            awl_scope_end();
            return NULL;
        }
        loss = awl_keep(
            cross_entropy_fused(logits, targets, ignore_index, -1, count_t, scale, &unsupported));
        awl_scope_end();
        if (loss || !unsupported) return loss;
        fused = false; /* the kernel declined: the composed path, from the host */
    }
    int32_t *host = targets_to_host(targets, V, ignore_index, &count);
    if (!host) return NULL;
    if (fused)
        loss = cross_entropy_fused(logits, targets, ignore_index, count, NULL, scale, &unsupported);
    if (!loss && unsupported)
        loss = cross_entropy_composed(awl_reshape(logits, AWL_SHAPE(n, V)), host, n, ignore_index,
                                      count, scale);
    free(host);
    return loss;
}

/* ---- LayerNorm: x (..., C), weight, bias (C) or NULL -> (..., C) ------------------- */

typedef struct ln_ctx {
    double eps;
    int w_slot; /* saved index of the weight, -1 without one */
} ln_ctx;

/* xhat = (x - mean) * rstd and rstd = 1 / sqrt(var + eps) over the last axis,
 * as differentiable ops. */
static awl_tensor *ln_normalize(awl_tensor *x, double eps, awl_tensor **rstd)
{
    awl_tensor *xm = awl_sub(x, awl_mean(x, AWL_DIMS(-1), true));
    *rstd = awl_pow(awl_add_scalar(awl_mean(awl_mul(xm, xm), AWL_DIMS(-1), true), eps), -0.5);
    return awl_mul(xm, *rstd);
}

static awl_tensor *layer_norm_composed(awl_tensor *x, awl_tensor *w, awl_tensor *b, double eps)
{
    awl_tensor *rstd, *y = ln_normalize(x, eps, &rstd);
    if (w) y = awl_mul(y, w);
    if (b) y = awl_add(y, b);
    return y;
}

/* The backward formula as differentiable ops (create_graph, or no kernel):
 * dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = g * w. */
static void layer_norm_grad_composed(awl_node *node, awl_tensor *x, awl_tensor *w, double eps,
                                     awl_tensor *grad, awl_tensor **grads)
{
    awl_tensor *rstd, *xhat = ln_normalize(x, eps, &rstd);
    if (awl_node_needs_grad(node, 0)) {
        awl_tensor *dxhat = w ? awl_mul(grad, w) : grad;
        awl_tensor *a = awl_mean(dxhat, AWL_DIMS(-1), true);
        awl_tensor *b = awl_mean(awl_mul(dxhat, xhat), AWL_DIMS(-1), true);
        grads[0] = awl_mul(rstd, awl_sub(awl_sub(dxhat, a), awl_mul(xhat, b)));
    }
    if (awl_node_needs_grad(node, 1)) grads[1] = sum_to_last_axis(awl_mul(grad, xhat));
    if (awl_node_needs_grad(node, 2)) grads[2] = sum_to_last_axis(grad);
}

/* Saved: x, mean, rstd (rows) float32, then the weight if any. */
static int layer_norm_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    const ln_ctx *c = awl_node_ctx(node);
    awl_tensor *x = awl_node_saved(node, 0), *mean = awl_node_saved(node, 1),
               *rstd = awl_node_saved(node, 2);
    awl_tensor *w = c->w_slot >= 0 ? awl_node_saved(node, c->w_slot) : NULL;
    if (!x || !mean || !rstd || (c->w_slot >= 0 && !w)) return AWL_ERR_INVALID;
    /* the kernel widens a bfloat16 grad (of awl_layer_norm_to's output)
     * itself, and adds in the gradient x already has (a residual's) */
    awl_tensor *pending = NULL;
    if (!awl_is_grad_enabled() && awl_fused_available(AWL_KERNEL_LAYERNORM_BACKWARD, x)) {
        int64_t C = x->shape[x->ndim - 1];
        awl_tensor *xc = awl_tensor_contiguous(x);
        awl_tensor *dx = awl_tensor_new_on(x, x->ndim, x->shape, x->dtype);
        bool need_w = awl_node_needs_grad(node, 1), need_b = awl_node_needs_grad(node, 2);
        awl_tensor *dw = need_w ? awl_tensor_new_on(x, 1, &C, x->dtype) : NULL;
        awl_tensor *db = need_b ? awl_tensor_new_on(x, 1, &C, x->dtype) : NULL;
        if (!xc || !dx || (need_w && !dw) || (need_b && !db)) return AWL_ERR_INVALID;
        if (awl_node_needs_grad(node, 0)) pending = awl_node_take_pending_grad(node, 0);
        /* dx rounded to bfloat16 as well, where x's producer (a residual
         * addition) would cast dx for its bfloat16 branch */
        awl_dtype copy_dtype;
        awl_tensor *copy = NULL;
        if (awl_node_input_wants_grad_copy(node, 0, &copy_dtype) && copy_dtype == AWL_BF16 &&
            x->dtype == AWL_F32)
            copy = awl_tensor_new_on(x, x->ndim, x->shape, copy_dtype);
        int status =
            awl_tensor_layernorm_backward(dx, dw, db, grad, xc, w, mean, rstd, pending, copy);
        if (status == AWL_ERR_UNSUPPORTED && copy) { /* the producer casts instead */
            copy = NULL;
            status =
                awl_tensor_layernorm_backward(dx, dw, db, grad, xc, w, mean, rstd, pending, NULL);
        }
        if (status != AWL_ERR_UNSUPPORTED) {
            grads[0] = awl_node_needs_grad(node, 0) ? dx : NULL;
            grads[1] = dw;
            grads[2] = db;
            if (status == AWL_OK && copy) status = awl_node_offer_grad_copy(node, 0, copy);
            return status;
        }
    }
    if (grad->dtype != x->dtype && !(grad = awl_cast(grad, x->dtype))) return AWL_ERR_INVALID;
    layer_norm_grad_composed(node, x, w, c->eps, grad, grads);
    if (pending && !(grads[0] = awl_add(grads[0], pending))) return AWL_ERR_INVALID;
    return AWL_OK;
}

/* The node of out = layer_norm(x) made by a kernel that saved mean and rstd. */
static void record_layer_norm(awl_tensor *out, awl_tensor *x, awl_tensor *w, awl_tensor *b,
                              double eps, awl_tensor *mean, awl_tensor *rstd)
{
    awl_node *node = awl_node_record(out, "layer_norm", layer_norm_backward, 3,
                                     (awl_tensor *[]){x, w, b}, sizeof(ln_ctx));
    if (!node) return;
    ln_ctx *c = awl_node_ctx(node);
    c->eps = eps;
    awl_node_save(node, x);
    awl_node_save(node, mean);
    awl_node_save(node, rstd);
    c->w_slot = w ? awl_node_save(node, w) : -1;
}

static awl_tensor *layer_norm_fused(awl_tensor *x, awl_tensor *w, awl_tensor *b, double eps,
                                    awl_dtype dtype, bool *unsupported)
{
    int64_t C = x->shape[x->ndim - 1], rows = C > 0 ? awl_numel(x) / C : 0;
    *unsupported = false;
    awl_scope_begin();
    awl_tensor *xc = awl_tensor_contiguous(x);
    awl_tensor *out = awl_tensor_new_on(x, x->ndim, x->shape, dtype);
    awl_tensor *mean = awl_tensor_new_on(x, 1, &rows, AWL_F32);
    awl_tensor *rstd = awl_tensor_new_on(x, 1, &rows, AWL_F32);
    bool ok = xc && out && mean && rstd;
    if (ok) {
        int status = awl_tensor_layernorm_forward(out, mean, rstd, xc, w, b, eps);
        *unsupported = status == AWL_ERR_UNSUPPORTED;
        ok = status == AWL_OK;
    }
    if (!ok) out = NULL;
    record_layer_norm(out, x, w, b, eps, mean, rstd);
    out = awl_keep(out);
    awl_scope_end();
    return out;
}

/* The arguments of a LayerNorm of x with a dtype output. */
static int layer_norm_check(const char *op, awl_tensor *x, awl_tensor *weight, awl_tensor *bias,
                            awl_dtype dtype)
{
    if (x->ndim < 1 || !awl_dtype_is_float(x->dtype))
        return awl_error(AWL_ERR_INVALID,
                         "%s: needs a float tensor with at least one axis, got %s of %d axes", op,
                         awl_dtype_name(x->dtype), x->ndim);
    if (dtype != x->dtype && !(x->dtype == AWL_F32 && dtype == AWL_BF16))
        return awl_error(AWL_ERR_INVALID,
                         "%s: a %s output of a %s x (x's dtype, or bfloat16 for a float32 x)", op,
                         awl_dtype_name(dtype), awl_dtype_name(x->dtype));
    int64_t C = x->shape[x->ndim - 1];
    if ((weight && check_vector(op, "weight", weight, C, x) < 0) ||
        (bias && check_vector(op, "bias", bias, C, x) < 0))
        return AWL_ERR_INVALID;
    return AWL_OK;
}

awl_tensor *awl_layer_norm_to(awl_tensor *x, awl_tensor *weight, awl_tensor *bias, double eps,
                              awl_dtype dtype)
{
    if (!x) return NULL;
    /* awl_layer_norm is this with x's own dtype */
    const char *op = dtype == x->dtype ? "awl_layer_norm" : "awl_layer_norm_to";
    if (layer_norm_check(op, x, weight, bias, dtype) < 0) return NULL;
    bool unsupported = true;
    awl_tensor *out = NULL;
    if (awl_fused_available(AWL_KERNEL_LAYERNORM_FORWARD, x))
        out = layer_norm_fused(x, weight, bias, eps, dtype, &unsupported);
    /* a backend that does not round on the way out: the float32 kernel (or
     * the composed form), then a cast */
    if (!out && unsupported && dtype != x->dtype)
        return awl_cast(awl_layer_norm(x, weight, bias, eps), dtype);
    if (!out && unsupported) out = layer_norm_composed(x, weight, bias, eps);
    return out;
}

awl_tensor *awl_layer_norm(awl_tensor *x, awl_tensor *weight, awl_tensor *bias, double eps)
{
    return x ? awl_layer_norm_to(x, weight, bias, eps, x->dtype) : NULL;
}

/* ---- dropout_add_layer_norm: the residual addition and the LayerNorm after it ----- */

/* sum = x + dropout(h) and out = layer_norm(sum) from one kernel, each with
 * the node the two ops would have recorded; NULL where the kernel is not
 * there (*unsupported) or failed. */
static awl_tensor *dropout_add_layer_norm_fused(awl_tensor *x, awl_tensor *h,
                                                const dropout_add_ctx *c, awl_tensor *w,
                                                awl_tensor *b, double eps, awl_dtype dtype,
                                                awl_tensor **sum, bool *unsupported)
{
    int64_t C = x->shape[x->ndim - 1], rows = C > 0 ? awl_numel(x) / C : 0;
    awl_scope_begin();
    awl_tensor *s = awl_tensor_new_on(x, x->ndim, x->shape, x->dtype);
    awl_tensor *out = awl_tensor_new_on(x, x->ndim, x->shape, dtype);
    awl_tensor *mean = awl_tensor_new_on(x, 1, &rows, AWL_F32);
    awl_tensor *rstd = awl_tensor_new_on(x, 1, &rows, AWL_F32);
    int status = s && out && mean && rstd
                     ? awl_tensor_dropout_add_layernorm(s, out, mean, rstd, x, h, w, b, eps,
                                                        c->d.p > 0.0 ? &c->d : NULL)
                     : AWL_ERR_OOM;
    *unsupported = status == AWL_ERR_UNSUPPORTED;
    if (status == AWL_OK) {
        record_dropout_add(s, x, h, c);
        record_layer_norm(out, s, w, b, eps, mean, rstd);
        *sum = awl_keep(s);
        out = awl_keep(out);
    } else {
        out = NULL;
    }
    awl_scope_end();
    return out;
}

awl_tensor *awl_dropout_add_layer_norm_to(awl_tensor *x, awl_tensor *h, double p, bool training,
                                          awl_tensor *weight, awl_tensor *bias, double eps,
                                          awl_dtype dtype, awl_tensor **sum)
{
    if (sum) *sum = NULL;
    if (!x || !h || !sum) return NULL;
    const char *op = "awl_dropout_add_layer_norm";
    dropout_add_ctx c;
    if (dropout_add_setup(op, x, h, p, training, &c) < 0 ||
        layer_norm_check(op, x, weight, bias, dtype) < 0)
        return NULL;
    bool unsupported = true;
    awl_tensor *out = NULL;
    if (c.d.p < 1.0 && awl_fused_available(AWL_KERNEL_DROPOUT_ADD_LAYERNORM, x))
        out = dropout_add_layer_norm_fused(x, h, &c, weight, bias, eps, dtype, sum, &unsupported);
    if (out || !unsupported) return out;
    /* the two ops, with the same draw */
    *sum = dropout_add_drawn(x, h, &c);
    return *sum ? awl_layer_norm_to(*sum, weight, bias, eps, dtype) : NULL;
}
