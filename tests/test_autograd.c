/*
 * tests/test_autograd.c - the backward engine: accumulation, retain_graph,
 * no-grad, detach, hooks, awl_grad, create_graph, a backward taking its
 * input's pending gradient, and memory behaviour (bytes in use stay flat
 * across steps; saved tensors die during backward).
 *
 * Per-op gradients are checked in the tests/test_ops_*.c suites.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/node.h"
#include "awl.h"

static void setup(void) { awl_clear_error(); }

/* Element i (row-major) of t, as a double. */
static double at(awl_tensor *t, int64_t i)
{
    awl_scope_begin();
    awl_tensor *flat = awl_tensor_reshape(t, AWL_SHAPE(-1));
    double v = awl_item(awl_tensor_slice(flat, 0, i, i + 1, 1));
    awl_scope_end();
    return v;
}

static awl_tensor *leaf(const double *values, int64_t n)
{
    return awl_requires_grad_(awl_from_data(values, 1, &n, AWL_F64, "cpu"), true);
}

START_TEST(test_simple_and_accumulation)
{
    awl_tensor *x = leaf((double[]){1, 2, 3}, 3);
    for (int pass = 1; pass <= 2; pass++) {
        awl_scope_begin();
        /* y = sum(x * x + 3 x): dy/dx = 2x + 3, accumulated over two passes */
        awl_tensor *y = awl_sum_all(awl_add(awl_mul(x, x), awl_mul_scalar(x, 3)));
        ck_assert_int_eq(awl_backward(y), 0);
        awl_scope_end();
        for (int i = 0; i < 3; i++)
            ck_assert_double_eq_tol(at(x->grad, i), pass * (2 * (i + 1) + 3), 1e-12);
    }
    awl_release(x);
}
END_TEST

START_TEST(test_shared_input_and_broadcast)
{
    awl_tensor *b = leaf((double[]){1, 2}, 2);
    awl_scope_begin();
    /* b broadcast over 3 rows and used twice: d/db sum(m + b) * b... */
    awl_tensor *m = awl_ones(AWL_SHAPE(3, 2), AWL_F64, "cpu");
    awl_tensor *y = awl_sum_all(awl_mul(awl_add(m, b), b)); /* sum_rows (1 + b) b = 3 (b + b^2) */
    ck_assert_int_eq(awl_backward(y), 0);
    ck_assert_int_eq(b->grad->ndim, 1);
    ck_assert_double_eq_tol(at(b->grad, 0), 3 * (1 + 2 * 1), 1e-12);
    ck_assert_double_eq_tol(at(b->grad, 1), 3 * (1 + 2 * 2), 1e-12);
    awl_scope_end();
    awl_release(b);
}
END_TEST

/* twice(x) = 2 x, whose backward takes x's pending gradient
 * (awl_node_take_pending_grad) and returns 2 grad + pending, counting what
 * it took in `taken`. */
static int taken;
static double taken_first;

static int twice_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    awl_tensor *pending = awl_node_take_pending_grad(node, 0);
    if (pending) {
        taken++;
        taken_first = at(pending, 0);
    }
    awl_tensor *g = awl_mul_scalar(grad, 2);
    grads[0] = pending ? awl_add(g, pending) : g;
    return grads[0] ? 0 : AWL_ERR_INVALID;
}

static awl_tensor *twice(awl_tensor *x)
{
    bool was = awl_set_grad_enabled(false);
    awl_tensor *out = awl_mul_scalar(x, 2);
    awl_set_grad_enabled(was);
    awl_node_record(out, "twice", twice_backward, 1, &x, 0);
    return out;
}

/* d/dx of y, x = [1, 2, 3], with taken counted from 0. */
static double slope(awl_tensor *(*f)(awl_tensor *), bool create_graph)
{
    awl_tensor *x = leaf((double[]){1, 2, 3}, 3);
    taken = 0;
    awl_scope_begin();
    awl_backward_options o = {.create_graph = create_graph};
    ck_assert_int_eq(awl_backward_ex(awl_sum_all(f(x)), &o), 0);
    double d = at(x->grad, 1);
    for (int i = 0; i < 3; i++) ck_assert_double_eq_tol(at(x->grad, i), d, 1e-12);
    awl_scope_end();
    awl_release(x);
    return d;
}

/* h + twice(h), h = 5 x: the add gives h its gradient (1) before twice's
 * backward runs, which takes it: 5 (1 + 2) */
static awl_tensor *residual(awl_tensor *x)
{
    awl_tensor *h = awl_mul_scalar(x, 5);
    return awl_add(h, twice(h));
}
/* 4 h + twice(h): 4 h is recorded first, so its backward runs after
 * twice's, which finds nothing pending: 5 (4 + 2) */
static awl_tensor *nothing_pending(awl_tensor *x)
{
    awl_tensor *h = awl_mul_scalar(x, 5), *four = awl_mul_scalar(h, 4);
    return awl_add(four, twice(h));
}
/* x + twice(x): the pending gradient of a leaf's accumulate node */
static awl_tensor *leaf_residual(awl_tensor *x) { return awl_add(x, twice(x)); }

START_TEST(test_backward_takes_pending_gradient)
{
    ck_assert_double_eq_tol(slope(residual, false), 15, 1e-12);
    ck_assert_int_eq(taken, 1);
    ck_assert_double_eq_tol(taken_first, 1, 1e-12);
    ck_assert_double_eq_tol(slope(nothing_pending, false), 30, 1e-12);
    ck_assert_int_eq(taken, 0);
    ck_assert_double_eq_tol(slope(leaf_residual, false), 3, 1e-12);
    ck_assert_int_eq(taken, 1);
    /* a recorded backward takes nothing: the engine's sum is recorded */
    ck_assert_double_eq_tol(slope(residual, true), 15, 1e-12);
    ck_assert_int_eq(taken, 0);
    /* outside a backward there is nothing to take */
    awl_tensor *x = leaf((double[]){1}, 1);
    awl_scope_begin();
    awl_tensor *y = twice(x);
    ck_assert_ptr_null(awl_node_take_pending_grad(awl_grad_fn(y), 0));
    ck_assert_ptr_null(awl_node_take_pending_grad(awl_grad_fn(y), 1));
    awl_scope_end();
    awl_release(x);
}
END_TEST

/* k times the output's gradient, returned in float32 where the input is a
 * bfloat16 cast of a float32 tensor (awl_node_input_widens), as autocast's
 * weight gradients are, unless ctx's narrow is set: then in bfloat16. */
typedef struct widen_ctx {
    double k;
    bool narrow;
} widen_ctx;
static int widens_seen;

static int widen_backward(awl_node *node, awl_tensor *grad, awl_tensor **grads)
{
    const widen_ctx *c = awl_node_ctx(node);
    bool wide = awl_node_input_widens(node, 0);
    widens_seen += wide;
    awl_tensor *g = awl_mul_scalar(grad, c->k);
    grads[0] = wide && !c->narrow ? g : awl_cast(g, AWL_BF16);
    return grads[0] ? 0 : AWL_ERR_INVALID;
}

static awl_tensor *widen_op(awl_tensor *x, double k, bool narrow)
{
    bool was = awl_set_grad_enabled(false);
    awl_tensor *out = awl_cast(x, AWL_F32);
    awl_set_grad_enabled(was);
    awl_node *node = awl_node_record(out, "widen", widen_backward, 1, &x, sizeof(widen_ctx));
    if (node) *(widen_ctx *)awl_node_ctx(node) = (widen_ctx){k, narrow};
    return out;
}

START_TEST(test_gradient_widened_past_a_cast)
{
    /* x (float32) -> xb = cast(x, bfloat16) -> two consumers: one hands xb
     * a float32 gradient (2), the other a bfloat16 one (3); the engine sums
     * them in float32 and the cast passes the sum on: x.grad = 5, float32 */
    const int64_t n = 4;
    awl_tensor *x = awl_requires_grad_(awl_full(1, &n, 1.5, AWL_F32, "cpu"), true);
    awl_scope_begin();
    awl_tensor *xb = awl_cast(x, AWL_BF16);
    widens_seen = 0;
    awl_tensor *y = awl_add(widen_op(xb, 2, false), widen_op(xb, 3, true));
    ck_assert_int_eq(awl_backward(awl_sum_all(y)), 0);
    ck_assert_int_eq(widens_seen, 2);
    ck_assert_int_eq(x->grad->dtype, AWL_F32);
    for (int64_t i = 0; i < n; i++) ck_assert_double_eq_tol(at(x->grad, i), 5, 1e-12);
    /* not for a bfloat16 input that is no cast of float32, nor while the
     * backward is recorded */
    awl_tensor *b = awl_requires_grad_(awl_full(1, &n, 1.5, AWL_BF16, "cpu"), true);
    widens_seen = 0;
    ck_assert_int_eq(awl_backward(awl_sum_all(widen_op(b, 2, false))), 0);
    ck_assert_int_eq(widens_seen, 0);
    ck_assert_int_eq(b->grad->dtype, AWL_BF16);
    /* awl_grad at the cast's output: the input's own dtype */
    awl_tensor *at_xb = NULL;
    ck_assert_int_eq(awl_grad(awl_sum_all(widen_op(xb, 2, false)), 1, &xb, &at_xb, NULL), 0);
    ck_assert_int_eq(at_xb->dtype, AWL_BF16);
    for (int64_t i = 0; i < n; i++) ck_assert_double_eq_tol(at(at_xb, i), 2, 1e-12);
    awl_clear_grad(x);
    widens_seen = 0;
    awl_backward_options recorded = {.create_graph = true};
    ck_assert_int_eq(
        awl_backward_ex(awl_sum_all(widen_op(awl_cast(x, AWL_BF16), 2, false)), &recorded), 0);
    ck_assert_int_eq(widens_seen, 0);
    for (int64_t i = 0; i < n; i++) ck_assert_double_eq_tol(at(x->grad, i), 2, 1e-12);
    awl_scope_end();
    awl_release(x);
}
END_TEST

START_TEST(test_retain_graph)
{
    awl_tensor *x = leaf((double[]){2}, 1);
    awl_scope_begin();
    awl_tensor *y = awl_sum_all(awl_mul(x, x));
    awl_backward_options keep = {.retain_graph = true};
    ck_assert_int_eq(awl_backward_ex(y, &keep), 0);
    ck_assert_int_eq(awl_backward(y), 0); /* the graph was kept */
    ck_assert_double_eq(at(x->grad, 0), 8);
    ck_assert_int_lt(awl_backward(y), 0); /* now its saved tensors are gone */
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "retain_graph"));
    awl_scope_end();
    awl_release(x);
}
END_TEST

/* A tensor a node saved for backward, then written in place before the
 * backward, makes that backward fail with the op and the shape named, and
 * leaves the gradients as they were (awl_tensor_version). */
START_TEST(test_saved_tensor_modified_in_place)
{
    awl_tensor *x = leaf((double[]){1, 2, 3, 4, 5, 6}, 6);
    awl_scope_begin();
    awl_tensor *xm = awl_reshape(x, AWL_SHAPE(2, 3));
    awl_tensor *w = awl_full(AWL_SHAPE(2, 3), 2.0, AWL_F64, "cpu");
    uint64_t v0 = awl_tensor_version(w);
    awl_tensor *y = awl_sum_all(awl_mul(xm, w)); /* mul saves w */
    ck_assert_int_eq(awl_tensor_fill_(w, 3.0), 0);
    ck_assert_uint_eq(awl_tensor_version(w), v0 + 1);
    ck_assert_int_lt(awl_backward(y), 0);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "mul"));
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "(2,3)"));
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "modified in place"));
    ck_assert_ptr_null(x->grad); /* nothing accumulated */

    /* a write through a view counts: the views share the storage's count */
    awl_clear_error();
    y = awl_sum_all(awl_mul(xm, w));
    awl_tensor *row = awl_tensor_slice(w, 0, 1, 2, 1);
    ck_assert_int_eq(awl_tensor_copy_(row, awl_zeros(AWL_SHAPE(1, 3), AWL_F64, "cpu")), 0);
    ck_assert_uint_eq(awl_tensor_version(w), v0 + 2);
    ck_assert_uint_eq(awl_tensor_version(row), v0 + 2);
    ck_assert_int_lt(awl_backward(y), 0);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "modified in place"));
    ck_assert_ptr_null(x->grad);

    /* a tensor no node saved (add keeps none) may change; so may a saved
     * one after its backward */
    awl_clear_error();
    y = awl_sum_all(awl_add(awl_mul(xm, w), w));
    ck_assert_int_eq(awl_tensor_fill_(awl_zeros(AWL_SHAPE(2, 3), AWL_F64, "cpu"), 1.0), 0);
    ck_assert_int_eq(awl_backward(y), 0);
    ck_assert_int_eq(awl_tensor_fill_(w, 7.0), 0);
    ck_assert_double_eq(at(x->grad, 0), 3); /* w's rows as they were at the forward */
    ck_assert_double_eq(at(x->grad, 3), 0);

    /* an update of the leaf itself between two backward passes of one
     * graph (what an optimizer step does) */
    awl_tensor *z = awl_sum_all(awl_mul(x, x));
    awl_backward_options keep = {.retain_graph = true};
    ck_assert_int_eq(awl_backward_ex(z, &keep), 0);
    ck_assert_int_eq(awl_tensor_binary_out(AWL_BINARY_ADD, x, x, x), 0);
    ck_assert_int_lt(awl_backward(z), 0);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "mul"));
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "(6)"));
    awl_scope_end();
    awl_release(x);
}
END_TEST

/* The fused AdamW step writes the parameters, both moments and the
 * parameters' bfloat16 casts in place. */
START_TEST(test_adamw_step_counts_as_a_write)
{
    awl_scope_begin();
    awl_tensor *t[5];
    for (int i = 0; i < 4; i++) t[i] = awl_ones(AWL_SHAPE(4), AWL_F32, "cpu");
    t[4] = awl_zeros(AWL_SHAPE(2, 2), AWL_BF16, "cpu");
    uint64_t before[5];
    for (int i = 0; i < 5; i++) before[i] = awl_tensor_version(t[i]);
    const float decay = 0.1f;
    awl_adamw_args args = {
        .lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .step = 1, .grad_scale = 1.0f};
    int status = awl_tensor_adamw_step(1, &t[0], &t[1], &t[2], &t[3], &t[4], &decay, &args);
    if (status == AWL_ERR_UNSUPPORTED) {
        awl_scope_end();
        return; /* no fused kernel on this backend: the composed path's writes count */
    }
    ck_assert_int_eq(status, 0);
    ck_assert_uint_eq(awl_tensor_version(t[0]), before[0] + 1); /* the parameter */
    ck_assert_uint_eq(awl_tensor_version(t[1]), before[1]);     /* the gradient is only read */
    ck_assert_uint_eq(awl_tensor_version(t[2]), before[2] + 1);
    ck_assert_uint_eq(awl_tensor_version(t[3]), before[3] + 1);
    ck_assert_uint_eq(awl_tensor_version(t[4]), before[4] + 1); /* the cast */
    awl_scope_end();
}
END_TEST

/* So does the fused in-place scale (gradient clipping): each tensor once. */
START_TEST(test_scale_counts_as_a_write)
{
    awl_scope_begin();
    awl_tensor *t[2] = {awl_ones(AWL_SHAPE(4), AWL_F32, "cpu"),
                        awl_ones(AWL_SHAPE(3), AWL_F32, "cpu")};
    const uint64_t before[2] = {awl_tensor_version(t[0]), awl_tensor_version(t[1])};
    int status = awl_tensor_scale(2, t, 0.5);
    if (status == AWL_ERR_UNSUPPORTED) {
        awl_scope_end();
        return; /* no fused kernel on this backend: the composed path's writes count */
    }
    ck_assert_int_eq(status, 0);
    ck_assert_uint_eq(awl_tensor_version(t[0]), before[0] + 1);
    ck_assert_uint_eq(awl_tensor_version(t[1]), before[1] + 1);
    awl_scope_end();
}
END_TEST

START_TEST(test_no_grad_and_detach)
{
    awl_tensor *x = leaf((double[]){1, 2}, 2);
    awl_scope_begin();
    awl_no_grad_begin();
    awl_tensor *a = awl_mul(x, x);
    awl_no_grad_begin();
    awl_no_grad_end();
    ck_assert(!awl_is_grad_enabled()); /* nested regions restore the outer state */
    awl_no_grad_end();
    ck_assert(awl_is_grad_enabled());
    ck_assert(!a->requires_grad);
    ck_assert_ptr_null(a->grad_fn);
    awl_tensor *d = awl_detach(awl_mul(x, x));
    ck_assert(!d->requires_grad);
    awl_tensor *y = awl_sum_all(awl_mul(x, d)); /* d is a constant: dy/dx = d = x^2 */
    ck_assert_int_eq(awl_backward(y), 0);
    ck_assert_double_eq(at(x->grad, 1), 4);
    ck_assert_int_lt(awl_backward(awl_sum_all(a)), 0);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "does not require grad"));
    ck_assert_ptr_null(awl_requires_grad_(y, true)); /* only leaves */
    ck_assert_ptr_null(awl_requires_grad_(awl_zeros(AWL_SHAPE(1), AWL_I32, "cpu"), true));
    awl_scope_end();
    awl_release(x);
}
END_TEST

static int hook_calls;
static double hook_seen;

static void count_hook(awl_tensor *leaf_tensor, void *user)
{
    hook_calls++;
    hook_seen = at(leaf_tensor->grad, 0);
    *(int *)user += 1;
}

START_TEST(test_hooks_fire_once_when_complete)
{
    awl_tensor *x = leaf((double[]){3}, 1);
    int mine = 0;
    hook_calls = 0;
    ck_assert_int_eq(awl_register_grad_hook(x, count_hook, &mine), 0);
    awl_scope_begin();
    /* x reaches the loss along three paths; the hook sees the full sum */
    awl_tensor *y = awl_sum_all(awl_add(awl_mul(x, x), awl_mul_scalar(x, 5)));
    ck_assert_int_eq(awl_backward(y), 0);
    awl_scope_end();
    ck_assert_int_eq(hook_calls, 1);
    ck_assert_int_eq(mine, 1);
    ck_assert_double_eq(hook_seen, 2 * 3 + 5);
    awl_release(x);
}
END_TEST

START_TEST(test_grad_function_and_higher_order)
{
    awl_tensor *x = leaf((double[]){2, -1}, 2);
    awl_scope_begin();
    /* y = sum(x^3): dy/dx = 3 x^2, d2y/dx2 = 6 x */
    awl_tensor *y = awl_sum_all(awl_mul(awl_mul(x, x), x));
    awl_tensor *g[1];
    awl_backward_options create = {.create_graph = true};
    ck_assert_int_eq(awl_grad(y, 1, &x, g, &create), 0);
    ck_assert_ptr_null(x->grad); /* awl_grad leaves .grad alone */
    ck_assert_double_eq_tol(at(g[0], 0), 12, 1e-12);
    ck_assert(g[0]->requires_grad);
    ck_assert_int_eq(awl_backward(awl_sum_all(g[0])), 0);
    ck_assert_double_eq_tol(at(x->grad, 0), 12, 1e-12);
    ck_assert_double_eq_tol(at(x->grad, 1), -6, 1e-12);
    awl_scope_end();
    awl_release(x);
}
END_TEST

START_TEST(test_grad_stops_at_targets)
{
    /* awl_grad runs only what leads to its inputs: the graph below h keeps
     * its saved tensors for a later backward */
    awl_tensor *x = leaf((double[]){3}, 1);
    awl_tensor *z = leaf((double[]){1}, 1);
    awl_scope_begin();
    awl_tensor *h = awl_mul(x, x);
    awl_tensor *y = awl_sum_all(awl_mul(h, h));
    awl_tensor *g[1];
    ck_assert_int_eq(awl_grad(y, 1, &h, g, NULL), 0);
    ck_assert_double_eq(at(g[0], 0), 2 * 9);
    ck_assert_ptr_null(x->grad);
    ck_assert_int_eq(awl_backward(awl_sum_all(h)), 0);
    ck_assert_double_eq(at(x->grad, 0), 6);
    /* an input the root does not depend on gets no gradient */
    ck_assert_int_eq(awl_grad(awl_sum_all(awl_mul(x, x)), 1, &z, g, NULL), 0);
    ck_assert_ptr_null(g[0]);
    awl_scope_end();
    awl_release(z);
    awl_release(x);
}
END_TEST

START_TEST(test_non_scalar_root)
{
    awl_tensor *x = leaf((double[]){1, 2}, 2);
    awl_scope_begin();
    awl_tensor *y = awl_mul(x, x);
    ck_assert_int_lt(awl_backward(y), 0);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "only for a scalar"));
    awl_backward_options o = {.grad =
                                  awl_from_data((double[]){1, 10}, AWL_SHAPE(2), AWL_F64, "cpu")};
    ck_assert_int_eq(awl_backward_ex(y, &o), 0);
    ck_assert_double_eq(at(x->grad, 1), 40);
    awl_scope_end();
    awl_release(x);
}
END_TEST

START_TEST(test_null_propagates_first_error)
{
    awl_scope_begin();
    awl_tensor *a = awl_zeros(AWL_SHAPE(2, 3), AWL_F32, "cpu");
    awl_tensor *b = awl_zeros(AWL_SHAPE(4, 3), AWL_F32, "cpu");
    awl_tensor *y = awl_sum_all(awl_exp(awl_mul(awl_add(a, b), a)));
    ck_assert_ptr_null(y);
    ck_assert_str_eq(awl_last_error(), "awl_add: shapes (2,3) and (4,3) cannot be broadcast");
    ck_assert_int_lt(awl_backward(y), 0);
    ck_assert_str_eq(awl_last_error(), "awl_add: shapes (2,3) and (4,3) cannot be broadcast");
    awl_scope_end();
}
END_TEST

/* ---- memory ---------------------------------------------------------------------------- */

typedef struct mlp {
    awl_tensor *w1, *w2;
} mlp;

/* A two-layer MLP's loss: mean((tanh(x W1) W2)^2). */
static awl_tensor *mlp_loss(const mlp *m, awl_tensor *x)
{
    return awl_mean_all(awl_pow(awl_matmul(awl_tanh(awl_matmul(x, m->w1)), m->w2), 2));
}

static int64_t in_use(void)
{
    awl_memory_stats s;
    awl_memory_get_stats("cpu", &s);
    return s.in_use;
}

START_TEST(test_memory_flat_across_steps)
{
    awl_manual_seed(1);
    mlp m = {awl_requires_grad_(awl_randn(AWL_SHAPE(64, 128), AWL_F32, "cpu"), true),
             awl_requires_grad_(awl_randn(AWL_SHAPE(128, 16), AWL_F32, "cpu"), true)};
    int64_t after_first = 0;
    for (int step = 0; step < 100; step++) {
        awl_scope_begin();
        awl_tensor *x = awl_randn(AWL_SHAPE(32, 64), AWL_F32, "cpu");
        awl_tensor *loss = awl_keep(mlp_loss(&m, x));
        awl_scope_end();
        ck_assert_int_eq(awl_backward(loss), 0);
        awl_release(loss);
        /* an SGD step in place, then clear */
        awl_tensor *ps[2] = {m.w1, m.w2};
        for (int i = 0; i < 2; i++) {
            awl_scope_begin();
            awl_tensor_binary_out(AWL_BINARY_SUB, ps[i], ps[i],
                                  awl_tensor_unary(AWL_UNARY_MUL_SCALAR, ps[i]->grad, 1e-3));
            awl_scope_end();
            awl_tensor_fill_(ps[i]->grad, 0);
        }
        if (step == 0)
            after_first = in_use();
        else
            ck_assert_int_eq(in_use(), after_first);
    }
    awl_release(m.w1);
    awl_release(m.w2);
}
END_TEST

START_TEST(test_backward_frees_activations)
{
    /* a deep chain: peak during backward must stay below the peak after
     * forward plus the gradients, i.e. saved activations die as backward
     * passes them */
    awl_manual_seed(2);
    enum { DEPTH = 16, WIDTH = 256 };
    awl_tensor *w[DEPTH];
    for (int i = 0; i < DEPTH; i++) {
        awl_scope_begin();
        awl_tensor *init = awl_mul_scalar(awl_randn(AWL_SHAPE(WIDTH, WIDTH), AWL_F32, "cpu"), 0.05);
        w[i] = awl_requires_grad_(awl_keep(init), true);
        awl_scope_end();
    }
    int64_t base = in_use();
    awl_scope_begin();
    awl_tensor *h = awl_randn(AWL_SHAPE(64, WIDTH), AWL_F32, "cpu");
    for (int i = 0; i < DEPTH; i++) h = awl_tanh(awl_matmul(h, w[i]));
    awl_tensor *loss = awl_keep(awl_mean_all(h));
    awl_scope_end();
    int64_t after_forward = in_use();
    int64_t grads = (int64_t)DEPTH * WIDTH * WIDTH * 4;
    awl_memory_reset_peak("cpu");
    ck_assert_int_eq(awl_backward(loss), 0);
    awl_memory_stats s;
    awl_memory_get_stats("cpu", &s);
    ck_assert_int_lt(s.peak, after_forward + grads);
    ck_assert_int_gt(after_forward, base); /* activations were alive */
    awl_release(loss);
    for (int i = 0; i < DEPTH; i++) {
        awl_clear_grad(w[i]);
        awl_release(w[i]);
    }
}
END_TEST

START_TEST(test_determinism)
{
    double first[8];
    for (int run = 0; run < 2; run++) {
        awl_manual_seed(1234);
        mlp m = {awl_requires_grad_(awl_randn(AWL_SHAPE(64, 128), AWL_F32, "cpu"), true),
                 awl_requires_grad_(awl_randn(AWL_SHAPE(128, 16), AWL_F32, "cpu"), true)};
        awl_scope_begin();
        awl_tensor *loss = mlp_loss(&m, awl_randn(AWL_SHAPE(32, 64), AWL_F32, "cpu"));
        awl_backward(loss);
        double got[8];
        awl_to_host(
            awl_cast(awl_slice(awl_reshape(m.w1->grad, AWL_SHAPE(-1)), 0, 0, 8, 1), AWL_F64), got,
            sizeof got);
        if (run == 0)
            memcpy(first, got, sizeof got);
        else
            ck_assert_mem_eq(first, got, sizeof got);
        awl_scope_end();
        awl_release(m.w1);
        awl_release(m.w2);
    }
}
END_TEST

static Suite *autograd_suite(void)
{
    Suite *s = suite_create("autograd");
    TCase *tc = tcase_create("engine");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, test_simple_and_accumulation);
    tcase_add_test(tc, test_shared_input_and_broadcast);
    tcase_add_test(tc, test_backward_takes_pending_gradient);
    tcase_add_test(tc, test_gradient_widened_past_a_cast);
    tcase_add_test(tc, test_retain_graph);
    tcase_add_test(tc, test_saved_tensor_modified_in_place);
    tcase_add_test(tc, test_adamw_step_counts_as_a_write);
    tcase_add_test(tc, test_scale_counts_as_a_write);
    tcase_add_test(tc, test_no_grad_and_detach);
    tcase_add_test(tc, test_hooks_fire_once_when_complete);
    tcase_add_test(tc, test_grad_function_and_higher_order);
    tcase_add_test(tc, test_grad_stops_at_targets);
    tcase_add_test(tc, test_non_scalar_root);
    tcase_add_test(tc, test_null_propagates_first_error);
    tcase_add_test(tc, test_memory_flat_across_steps);
    tcase_add_test(tc, test_backward_frees_activations);
    tcase_add_test(tc, test_determinism);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(autograd_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
