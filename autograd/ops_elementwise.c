/*
 * autograd/ops_elementwise.c - differentiable element-wise ops.
 *
 * Each op computes its result with one raw kernel call (awl_tensor_unary,
 * awl_tensor_binary, awl_tensor_where) and records a node whose backward is
 * written with the differentiable ops of this file. That is the whole trick
 * behind higher-order gradients: under create_graph the engine records the
 * backward, so d(tanh)/dx = grad * (1 - out^2) is itself a small graph of
 * mul and rsub_scalar nodes that can be differentiated again.
 *
 * Design choices:
 *   - Broadcasting is left to the engine: a backward returns gradients of
 *     the output's shape and the engine sums them over the axes an input was
 *     broadcast along. Backward functions therefore never reduce.
 *   - An op saves only what its backward reads, and only for the inputs that
 *     need a gradient (mul keeps b only when a needs a gradient), so the
 *     graph holds as little memory as PyTorch's would.
 *   - Slopes that are piecewise constant (relu's step, abs's sign, the tie
 *     masks of maximum/minimum) are computed with the raw layer: they have a
 *     zero derivative almost everywhere, so a constant is exact for
 *     second-order gradients and records nothing.
 *   - gelu's slope is a differentiable op of its own (gelu_grad) whose
 *     backward is gelu'' composed from primitives, so gelu has correct
 *     second and higher derivatives while the first-order path still runs
 *     one fused kernel (AWL_UNARY_GELU_GRAD).
 *   - Argument errors come from the raw layer, which already names the
 *     public op ("awl_add: shapes (2,3) and (4,3) cannot be broadcast").
 *     Backward functions return AWL_OK even when one of their ops failed:
 *     the engine notices the recorded error and stops the pass.
 */
#include <math.h>

#include "autograd/ops_common.h"

/* ---- shared forward plumbing ------------------------------------------------- */

/* What a unary op keeps for its backward. */
typedef enum { SAVE_NOTHING, SAVE_INPUT, SAVE_OUTPUT } unary_save;

/* out = op(x, alpha), x and out of one shape; records `name` with `backward`
 * and alpha in the node's context. Returns NULL on failure or NULL x. */
static awl_tensor *unary_forward(awl_unary_op op, awl_tensor *x, double alpha, const char *name,
                                 awl_backward_fn backward, unary_save save)
{
    if (!x) return NULL;
    awl_tensor *out = awl_tensor_unary(op, x, alpha);
    awl_node *node = awl_node_record(out, name, backward, 1, &x, sizeof(double));
    if (node) {
        *(double *)awl_node_ctx(node) = alpha;
        if (save == SAVE_INPUT) awl_node_save(node, x);
        if (save == SAVE_OUTPUT) awl_node_save_output(node, out);
    }
    return out;
}

static double node_alpha(awl_node *node) { return *(double *)awl_node_ctx(node); }

/* ---- add, sub: a, b broadcast; out has the broadcast shape ------------------- */

static int add_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    if (awl_node_needs_grad(node, 0)) grads[0] = grad;
    if (awl_node_needs_grad(node, 1)) grads[1] = grad;
    return AWL_OK;
}

awl_tensor *awl_add(awl_tensor *a, awl_tensor *b)
{
    awl_tensor *out = awl_tensor_binary(AWL_BINARY_ADD, a, b);
    awl_node_record(out, "add", add_backward, 2, (awl_tensor *[]){a, b}, 0);
    return out;
}

static int sub_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    if (awl_node_needs_grad(node, 0)) grads[0] = grad;
    if (awl_node_needs_grad(node, 1)) grads[1] = awl_neg(grad);
    return AWL_OK;
}

awl_tensor *awl_sub(awl_tensor *a, awl_tensor *b)
{
    awl_tensor *out = awl_tensor_binary(AWL_BINARY_SUB, a, b);
    awl_node_record(out, "sub", sub_backward, 2, (awl_tensor *[]){a, b}, 0);
    return out;
}

/* ---- mul: da = grad * b, db = grad * a ------------------------------------------ */

/* Saved: b when a needs a gradient, then a when b needs one. */
static int mul_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    int slot = 0;
    if (awl_node_needs_grad(node, 0)) grads[0] = awl_mul(grad, awl_node_saved(node, slot++));
    if (awl_node_needs_grad(node, 1)) grads[1] = awl_mul(grad, awl_node_saved(node, slot++));
    return AWL_OK;
}

awl_tensor *awl_mul(awl_tensor *a, awl_tensor *b)
{
    awl_tensor *out = awl_tensor_binary(AWL_BINARY_MUL, a, b);
    awl_node *node = awl_node_record(out, "mul", mul_backward, 2, (awl_tensor *[]){a, b}, 0);
    if (node) {
        if (awl_node_needs_grad(node, 0)) awl_node_save(node, b);
        if (awl_node_needs_grad(node, 1)) awl_node_save(node, a);
    }
    return out;
}

/* ---- div: da = grad / b, db = -(grad / b) * (a / b) ------------------------------ */

/* Saved: b, then a when b needs a gradient. */
static int div_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    awl_tensor *b = awl_node_saved(node, 0);
    awl_tensor *q = awl_div(grad, b);
    if (awl_node_needs_grad(node, 0)) grads[0] = q;
    if (awl_node_needs_grad(node, 1))
        grads[1] = awl_neg(awl_mul(q, awl_div(awl_node_saved(node, 1), b)));
    return AWL_OK;
}

awl_tensor *awl_div(awl_tensor *a, awl_tensor *b)
{
    awl_tensor *out = awl_tensor_binary(AWL_BINARY_DIV, a, b);
    awl_node *node = awl_node_record(out, "div", div_backward, 2, (awl_tensor *[]){a, b}, 0);
    if (node) {
        awl_node_save(node, b);
        if (awl_node_needs_grad(node, 1)) awl_node_save(node, a);
    }
    return out;
}

/* ---- maximum, minimum ------------------------------------------------------------- */

/* The share of the gradient that goes to a: 1 where a wins, 1/2 on ties, 0
 * where b wins (b gets 1 minus it). A raw constant: its derivative is zero
 * almost everywhere. wins is AWL_BINARY_GT for maximum, LT for minimum. */
static awl_tensor *winner_share(awl_binary_op wins, awl_tensor *a, awl_tensor *b)
{
    awl_tensor *half_ties =
        awl_tensor_unary(AWL_UNARY_MUL_SCALAR, awl_tensor_binary(AWL_BINARY_EQ, a, b), 0.5);
    return awl_tensor_binary(AWL_BINARY_ADD, awl_tensor_binary(wins, a, b), half_ties);
}

static int extremum_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads,
                             awl_binary_op wins)
{
    awl_tensor *share = winner_share(wins, awl_node_saved(node, 0), awl_node_saved(node, 1));
    if (awl_node_needs_grad(node, 0)) grads[0] = awl_mul(grad, share);
    if (awl_node_needs_grad(node, 1))
        grads[1] = awl_mul(grad, awl_tensor_unary(AWL_UNARY_RSUB_SCALAR, share, 1.0));
    return AWL_OK;
}

static int maximum_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    return extremum_backward(node, grad, grads, AWL_BINARY_GT);
}

static int minimum_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    return extremum_backward(node, grad, grads, AWL_BINARY_LT);
}

static awl_tensor *extremum_forward(const char *name, awl_binary_op op, awl_backward_fn backward,
                                    awl_tensor *a, awl_tensor *b)
{
    awl_tensor *out = awl_tensor_binary(op, a, b);
    awl_node *node = awl_node_record(out, name, backward, 2, (awl_tensor *[]){a, b}, 0);
    if (node) {
        awl_node_save(node, a);
        awl_node_save(node, b);
    }
    return out;
}

awl_tensor *awl_maximum(awl_tensor *a, awl_tensor *b)
{
    return extremum_forward("maximum", AWL_BINARY_MAXIMUM, maximum_backward, a, b);
}

awl_tensor *awl_minimum(awl_tensor *a, awl_tensor *b)
{
    return extremum_forward("minimum", AWL_BINARY_MINIMUM, minimum_backward, a, b);
}

/* ---- scalar forms: x and out of one shape --------------------------------------- */

static int identity_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    (void)node;
    grads[0] = grad;
    return AWL_OK;
}

awl_tensor *awl_add_scalar(awl_tensor *x, double s)
{
    return unary_forward(AWL_UNARY_ADD_SCALAR, x, s, "add_scalar", identity_backward, SAVE_NOTHING);
}

awl_tensor *awl_sub_scalar(awl_tensor *x, double s) { return awl_add_scalar(x, -s); }

static int neg_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    (void)node;
    grads[0] = awl_neg(grad);
    return AWL_OK;
}

awl_tensor *awl_rsub_scalar(double s, awl_tensor *x)
{
    return unary_forward(AWL_UNARY_RSUB_SCALAR, x, s, "rsub_scalar", neg_backward, SAVE_NOTHING);
}

static int mul_scalar_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    grads[0] = awl_mul_scalar(grad, node_alpha(node));
    return AWL_OK;
}

awl_tensor *awl_mul_scalar(awl_tensor *x, double s)
{
    return unary_forward(AWL_UNARY_MUL_SCALAR, x, s, "mul_scalar", mul_scalar_backward,
                         SAVE_NOTHING);
}

/* Multiplies by the reciprocal: one rounding more than a true division, in
 * exchange for needing no extra kernel. */
awl_tensor *awl_div_scalar(awl_tensor *x, double s) { return awl_mul_scalar(x, 1.0 / s); }

/* out = s / x; dx = grad * (-s / x^2). Saved: x. */
static int rdiv_scalar_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    awl_tensor *x = awl_node_saved(node, 0);
    grads[0] = awl_div(awl_mul_scalar(grad, -node_alpha(node)), awl_mul(x, x));
    return AWL_OK;
}

awl_tensor *awl_rdiv_scalar(double s, awl_tensor *x)
{
    return unary_forward(AWL_UNARY_RDIV_SCALAR, x, s, "rdiv_scalar", rdiv_scalar_backward,
                         SAVE_INPUT);
}

/* out = x^e; dx = grad * e * x^(e-1) (zero for e == 0, where x^-1 could be
 * infinite). Saved: x. */
static int pow_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    double e = node_alpha(node);
    if (e == 0.0)
        grads[0] = awl_mul_scalar(grad, 0.0);
    else
        grads[0] = awl_mul(grad, awl_mul_scalar(awl_pow(awl_node_saved(node, 0), e - 1.0), e));
    return AWL_OK;
}

awl_tensor *awl_pow(awl_tensor *x, double exponent)
{
    return unary_forward(AWL_UNARY_POW_SCALAR, x, exponent, "pow", pow_backward, SAVE_INPUT);
}

/* ---- unary functions: x and out of one shape ------------------------------------- */

awl_tensor *awl_neg(awl_tensor *x)
{
    return unary_forward(AWL_UNARY_NEG, x, 0.0, "neg", neg_backward, SAVE_NOTHING);
}

/* dx = grad * out. Saved: out. */
static int exp_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    grads[0] = awl_mul(grad, awl_node_saved(node, 0));
    return AWL_OK;
}

awl_tensor *awl_exp(awl_tensor *x)
{
    return unary_forward(AWL_UNARY_EXP, x, 0.0, "exp", exp_backward, SAVE_OUTPUT);
}

/* dx = grad / x. Saved: x. */
static int log_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    grads[0] = awl_div(grad, awl_node_saved(node, 0));
    return AWL_OK;
}

awl_tensor *awl_log(awl_tensor *x)
{
    return unary_forward(AWL_UNARY_LOG, x, 0.0, "log", log_backward, SAVE_INPUT);
}

/* dx = grad / (2 out). Saved: out. */
static int sqrt_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    grads[0] = awl_div(awl_mul_scalar(grad, 0.5), awl_node_saved(node, 0));
    return AWL_OK;
}

awl_tensor *awl_sqrt(awl_tensor *x)
{
    return unary_forward(AWL_UNARY_SQRT, x, 0.0, "sqrt", sqrt_backward, SAVE_OUTPUT);
}

/* dx = grad * (1 - out^2). Saved: out. */
static int tanh_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    awl_tensor *out = awl_node_saved(node, 0);
    grads[0] = awl_mul(grad, awl_rsub_scalar(1.0, awl_mul(out, out)));
    return AWL_OK;
}

awl_tensor *awl_tanh(awl_tensor *x)
{
    return unary_forward(AWL_UNARY_TANH, x, 0.0, "tanh", tanh_backward, SAVE_OUTPUT);
}

/* dx = grad * out * (1 - out). Saved: out. */
static int sigmoid_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    awl_tensor *out = awl_node_saved(node, 0);
    grads[0] = awl_mul(grad, awl_mul(out, awl_rsub_scalar(1.0, out)));
    return AWL_OK;
}

awl_tensor *awl_sigmoid(awl_tensor *x)
{
    return unary_forward(AWL_UNARY_SIGMOID, x, 0.0, "sigmoid", sigmoid_backward, SAVE_OUTPUT);
}

/* dx = grad * step(out): out > 0 exactly where x > 0, so the output serves
 * and x need not be kept. Saved: out. */
static int relu_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    grads[0] = awl_mul(grad, awl_tensor_unary(AWL_UNARY_STEP, awl_node_saved(node, 0), 0.0));
    return AWL_OK;
}

awl_tensor *awl_relu(awl_tensor *x)
{
    return unary_forward(AWL_UNARY_RELU, x, 0.0, "relu", relu_backward, SAVE_OUTPUT);
}

/* dx = grad * sign(x) (0 at 0, as PyTorch). Saved: x. */
static int abs_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    grads[0] = awl_mul(grad, awl_tensor_unary(AWL_UNARY_SIGN, awl_node_saved(node, 0), 0.0));
    return AWL_OK;
}

awl_tensor *awl_abs(awl_tensor *x)
{
    return unary_forward(AWL_UNARY_ABS, x, 0.0, "abs", abs_backward, SAVE_INPUT);
}

/* ---- gelu (tanh form) ------------------------------------------------------------ */

/* gelu(x) = x/2 (1 + t), t = tanh(u), u = c (x + k x^3), c = sqrt(2/pi),
 * k = 0.044715. With u' = c (1 + 3k x^2) and u'' = 6ck x:
 *   gelu'(x)  = (1 + t)/2 + x/2 (1 - t^2) u'                 (the raw kernel)
 *   gelu''(x) = (1 - t^2) (u' - x t u'^2 + 3ck x^2)          (composed below)
 */
#define GELU_C 0.7978845608028654 /* sqrt(2/pi) */
#define GELU_K 0.044715

/* gelu''(x), x of any shape, built from differentiable ops so that gelu's
 * third derivative exists too. */
static awl_tensor *gelu_second_derivative(awl_tensor *x)
{
    awl_tensor *x2 = awl_mul(x, x);
    awl_tensor *u = awl_mul_scalar(awl_add(x, awl_mul_scalar(awl_mul(x, x2), GELU_K)), GELU_C);
    awl_tensor *t = awl_tanh(u);
    awl_tensor *du = awl_mul_scalar(awl_add_scalar(awl_mul_scalar(x2, 3.0 * GELU_K), 1.0), GELU_C);
    awl_tensor *inner = awl_add(awl_sub(du, awl_mul(awl_mul(x, t), awl_mul(du, du))),
                                awl_mul_scalar(x2, 3.0 * GELU_C * GELU_K));
    return awl_mul(awl_rsub_scalar(1.0, awl_mul(t, t)), inner);
}

/* out = gelu'(x); dx = grad * gelu''(x). Saved: x. */
static int gelu_grad_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    grads[0] = awl_mul(grad, gelu_second_derivative(awl_node_saved(node, 0)));
    return AWL_OK;
}

static awl_tensor *gelu_grad(awl_tensor *x)
{
    return unary_forward(AWL_UNARY_GELU_GRAD, x, 0.0, "gelu_grad", gelu_grad_backward, SAVE_INPUT);
}

/* dx = grad * gelu'(x) in one pass with the backend's fused kernel, for a
 * first-order pass (grad mode off) on same-shaped operands. Returns 1 when
 * it ran, 0 to compose instead, or a negative status. */
static int gelu_backward_fused(awl_tensor *grad, awl_tensor *x, awl_tensor **dx)
{
    if (!awl_fused_available(AWL_KERNEL_GELU_BACKWARD, x) || awl_is_grad_enabled() ||
        !awl_same_shape(grad, x) || grad->dtype != x->dtype)
        return 0;
    awl_tensor *out = awl_tensor_new_on(x, x->ndim, x->shape, x->dtype);
    if (!out) return awl_last_error_code();
    int rc = awl_tensor_gelu_backward(out, grad, x);
    if (rc == AWL_ERR_UNSUPPORTED) return 0;
    if (rc != AWL_OK) return rc;
    *dx = out;
    return 1;
}

/* *dx = grad * gelu'(x): fused where it can be, else composed. A negative
 * status where the fused kernel failed. */
static int gelu_backward_of(awl_tensor *grad, awl_tensor *x, awl_tensor **dx)
{
    int rc = x ? gelu_backward_fused(grad, x, dx) : 0;
    if (rc < 0) return rc;
    if (rc == 0) *dx = awl_mul(grad, gelu_grad(x));
    return AWL_OK;
}

awl_tensor *awl_gelu_backward(awl_tensor *grad, awl_tensor *x)
{
    awl_tensor *dx = NULL;
    return grad && gelu_backward_of(grad, x, &dx) == AWL_OK ? dx : NULL;
}

/* dx = grad * gelu'(x). Saved: x. */
static int gelu_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    return gelu_backward_of(grad, awl_node_saved(node, 0), &grads[0]);
}

awl_tensor *awl_gelu(awl_tensor *x)
{
    return unary_forward(AWL_UNARY_GELU, x, 0.0, "gelu", gelu_backward, SAVE_INPUT);
}

/* ---- where, masked_fill ------------------------------------------------------------ */

/* out = cond ? a : b, all three broadcast; da = cond ? grad : 0, db = cond ?
 * 0 : grad (cond receives no gradient). Saved: cond. */
static int where_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    awl_tensor *cond = awl_node_saved(node, 0);
    awl_tensor *zero = awl_ops_scalar_like(grad, 0.0);
    if (awl_node_needs_grad(node, 0)) grads[0] = awl_where(cond, grad, zero);
    if (awl_node_needs_grad(node, 1)) grads[1] = awl_where(cond, zero, grad);
    return AWL_OK;
}

awl_tensor *awl_where(awl_tensor *cond, awl_tensor *a, awl_tensor *b)
{
    awl_tensor *out = awl_tensor_where(cond, a, b);
    awl_node *node = awl_node_record(out, "where", where_backward, 2, (awl_tensor *[]){a, b}, 0);
    if (node) awl_node_save(node, cond);
    return out;
}

/* x (...) with value where mask (broadcast to x's shape) is non-zero: a where
 * whose "then" branch is a constant, so the gradient is where's. mask must
 * broadcast to x itself, not to a larger shape. */
awl_tensor *awl_masked_fill(awl_tensor *x, awl_tensor *mask, double value)
{
    if (!x || !mask) return NULL;
    bool fits = mask->ndim <= x->ndim;
    for (int d = 0; fits && d < mask->ndim; d++) {
        int64_t m = mask->shape[d], n = x->shape[x->ndim - mask->ndim + d];
        fits = m == n || m == 1;
    }
    if (!fits) {
        char xs[AWL_OPS_SHAPE_BUF], ms[AWL_OPS_SHAPE_BUF];
        awl_error(AWL_ERR_INVALID, "awl_masked_fill: mask of shape %s cannot be broadcast to %s",
                  awl_shape_str(mask, ms, sizeof ms), awl_shape_str(x, xs, sizeof xs));
        return NULL;
    }
    if (awl_check_same_device("awl_masked_fill", x, mask) != 0) return NULL;
    awl_scope_begin(); /* the fill value must not outlive the call */
    awl_tensor *out = awl_keep(awl_where(mask, awl_ops_scalar_like(x, value), x));
    awl_scope_end();
    return out;
}

/* ---- comparisons: 1 or 0 in the inputs' dtype; no gradient ------------------------ */

awl_tensor *awl_eq(awl_tensor *a, awl_tensor *b) { return awl_tensor_binary(AWL_BINARY_EQ, a, b); }

awl_tensor *awl_gt(awl_tensor *a, awl_tensor *b) { return awl_tensor_binary(AWL_BINARY_GT, a, b); }

awl_tensor *awl_lt(awl_tensor *a, awl_tensor *b) { return awl_tensor_binary(AWL_BINARY_LT, a, b); }
