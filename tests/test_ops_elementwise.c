/*
 * tests/test_ops_elementwise.c - element-wise differentiable ops.
 *
 * For every op: the forward result against a plain loop over host values
 * (float32 and float64, plus int32 where the op allows it), on contiguous,
 * permuted, sliced and broadcast inputs; then a finite-difference gradient
 * check in float64 on shapes that broadcast and on non-contiguous inputs.
 * Binary ops are checked with operands of different shapes, so the engine's
 * reduction of broadcast gradients is exercised too.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/node.h"
#include "helpers/gradcheck.h"

/* ---- reference arithmetic ----------------------------------------------------------- */

static double r_neg(double x) { return -x; }
static double r_relu(double x) { return x > 0 ? x : 0; }
static double r_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
static double r_gelu(double x)
{
    return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}
static double r_add_s(double x) { return x + 1.5; }
static double r_sub_s(double x) { return x - 0.75; }
static double r_rsub_s(double x) { return 2.0 - x; }
static double r_mul_s(double x) { return x * -3.0; }
static double r_div_s(double x) { return x / 4.0; }
static double r_rdiv_s(double x) { return 2.0 / x; }
static double r_pow2(double x) { return x * x; }
static double r_pow3(double x) { return x * x * x; }
static double r_pow_half(double x) { return sqrt(x); }
static double r_pow_neg(double x) { return pow(x, -1.5); }
static double r_pow0(double x)
{
    (void)x;
    return 1.0;
}

static awl_tensor *add_s(awl_tensor *x) { return awl_add_scalar(x, 1.5); }
static awl_tensor *sub_s(awl_tensor *x) { return awl_sub_scalar(x, 0.75); }
static awl_tensor *rsub_s(awl_tensor *x) { return awl_rsub_scalar(2.0, x); }
static awl_tensor *mul_s(awl_tensor *x) { return awl_mul_scalar(x, -3.0); }
static awl_tensor *div_s(awl_tensor *x) { return awl_div_scalar(x, 4.0); }
static awl_tensor *rdiv_s(awl_tensor *x) { return awl_rdiv_scalar(2.0, x); }
static awl_tensor *pow2(awl_tensor *x) { return awl_pow(x, 2.0); }
static awl_tensor *pow3(awl_tensor *x) { return awl_pow(x, 3.0); }
static awl_tensor *pow_half(awl_tensor *x) { return awl_pow(x, 0.5); }
static awl_tensor *pow_neg(awl_tensor *x) { return awl_pow(x, -1.5); }
static awl_tensor *pow0(awl_tensor *x) { return awl_pow(x, 0.0); }

typedef struct unary_case {
    const char *name;
    awl_tensor *(*op)(awl_tensor *);
    double (*ref)(double);
    bool positive; /* defined on positive inputs only */
    bool int_ok;   /* also runs on int32 */
} unary_case;

static const unary_case unary_cases[] = {
    {"neg", awl_neg, r_neg, false, true},
    {"exp", awl_exp, exp, false, false},
    {"log", awl_log, log, true, false},
    {"sqrt", awl_sqrt, sqrt, true, false},
    {"tanh", awl_tanh, tanh, false, false},
    {"sigmoid", awl_sigmoid, r_sigmoid, false, false},
    {"relu", awl_relu, r_relu, false, true},
    {"gelu", awl_gelu, r_gelu, false, false},
    {"abs", awl_abs, fabs, false, true},
    {"add_scalar", add_s, r_add_s, false, false},
    {"sub_scalar", sub_s, r_sub_s, false, false},
    {"rsub_scalar", rsub_s, r_rsub_s, false, false},
    {"mul_scalar", mul_s, r_mul_s, false, false},
    {"div_scalar", div_s, r_div_s, false, false},
    {"rdiv_scalar", rdiv_s, r_rdiv_s, true, false},
    {"pow 2", pow2, r_pow2, false, false},
    {"pow 3", pow3, r_pow3, false, false},
    {"pow 0.5", pow_half, r_pow_half, true, false},
    {"pow -1.5", pow_neg, r_pow_neg, true, false},
    {"pow 0", pow0, r_pow0, false, false},
};
#define N_UNARY (int)(sizeof unary_cases / sizeof unary_cases[0])

static double r_add(double a, double b) { return a + b; }
static double r_sub(double a, double b) { return a - b; }
static double r_mul(double a, double b) { return a * b; }
static double r_div(double a, double b) { return a / b; }
static double r_max(double a, double b) { return a > b ? a : b; }
static double r_min(double a, double b) { return a < b ? a : b; }
static double r_eq(double a, double b) { return a == b; }
static double r_gt(double a, double b) { return a > b; }
static double r_lt(double a, double b) { return a < b; }

typedef struct binary_case {
    const char *name;
    awl_tensor *(*op)(awl_tensor *, awl_tensor *);
    double (*ref)(double, double);
    bool int_ok;
    bool differentiable;
} binary_case;

static const binary_case binary_cases[] = {
    {"add", awl_add, r_add, true, true},         {"sub", awl_sub, r_sub, true, true},
    {"mul", awl_mul, r_mul, true, true},         {"div", awl_div, r_div, false, true},
    {"maximum", awl_maximum, r_max, true, true}, {"minimum", awl_minimum, r_min, true, true},
    {"eq", awl_eq, r_eq, true, false},           {"gt", awl_gt, r_gt, true, false},
    {"lt", awl_lt, r_lt, true, false},
};
#define N_BINARY (int)(sizeof binary_cases / sizeof binary_cases[0])

static const awl_dtype float_types[] = {AWL_F32, AWL_F64};

/* Row-major index, into a tensor of shape (nd, shape), of the element that
 * output element oidx (of an ond-dimensional broadcast) reads. */
static int64_t source_index(const int64_t *oidx, int ond, int nd, const int64_t *shape)
{
    int64_t at = 0;
    for (int d = 0; d < nd; d++) at = at * shape[d] + (shape[d] == 1 ? 0 : oidx[d + ond - nd]);
    return at;
}

static double tolerance(awl_dtype dtype) { return dtype == AWL_F64 ? 1e-12 : 2e-6; }

/* ---- forward --------------------------------------------------------------------------- */

START_TEST(test_unary_forward)
{
    awl_gc_begin(1);
    static const awl_dtype types[] = {AWL_F32, AWL_F64, AWL_I32};
    for (int c = 0; c < N_UNARY; c++) {
        const unary_case *u = &unary_cases[c];
        for (int t = 0; t < 3; t++) {
            if (types[t] == AWL_I32 && !u->int_ok) continue;
            for (int layout = 0; layout < AWL_GC_LAYOUTS; layout++) {
                awl_tensor *x = awl_gc_layout(layout, AWL_SHAPE(2, 3, 4), types[t]);
                if (u->positive) awl_gc_make_positive(x);
                awl_tensor *y = u->op(x);
                ck_assert_msg(y, "%s: %s", u->name, awl_last_error());
                ck_assert(awl_gc_has_shape(y, AWL_SHAPE(2, 3, 4)));
                ck_assert_int_eq(y->dtype, types[t]);
                double *xv = awl_gc_values(x), *yv = awl_gc_values(y), want[24];
                for (int i = 0; i < 24; i++) want[i] = u->ref(xv[i]);
                if (types[t] == AWL_F32) /* the reference sees float32-rounded results */
                    for (int i = 0; i < 24; i++) want[i] = (float)want[i];
                char what[96];
                snprintf(what, sizeof what, "%s %s %s", u->name, awl_dtype_name(types[t]),
                         awl_gc_layout_name(layout));
                ck_assert(awl_gc_allclose(yv, want, 24, tolerance(types[t]),
                                          4 * tolerance(types[t]), what));
                free(xv);
                free(yv);
            }
        }
    }
    ck_assert(awl_gc_end());
}
END_TEST

START_TEST(test_binary_forward)
{
    awl_gc_begin(2);
    static const awl_dtype types[] = {AWL_F32, AWL_F64, AWL_I32};
    const int64_t sa[3] = {2, 3, 4}, sb[2] = {3, 1};
    for (int c = 0; c < N_BINARY; c++) {
        const binary_case *bc = &binary_cases[c];
        for (int t = 0; t < 3; t++) {
            if (types[t] == AWL_I32 && !bc->int_ok) continue;
            for (int layout = 0; layout < AWL_GC_LAYOUTS; layout++) {
                /* both operand orders: the broadcast side changes */
                for (int swap = 0; swap < 2; swap++) {
                    awl_tensor *big = awl_gc_layout(layout, 3, sa, types[t]);
                    awl_tensor *small = awl_gc_layout((layout + 2) % 4, 2, sb, types[t]);
                    awl_tensor *a = swap ? small : big, *b = swap ? big : small;
                    awl_tensor *y = bc->op(a, b);
                    ck_assert_msg(y, "%s: %s", bc->name, awl_last_error());
                    ck_assert(awl_gc_has_shape(y, 3, sa));
                    double *av = awl_gc_values(a), *bv = awl_gc_values(b), *yv = awl_gc_values(y);
                    double want[24];
                    int64_t idx[3] = {0};
                    int k = 0;
                    do {
                        double x1 = av[source_index(idx, 3, a->ndim, a->shape)];
                        double x2 = bv[source_index(idx, 3, b->ndim, b->shape)];
                        want[k] = bc->ref(x1, x2);
                        if (types[t] == AWL_F32) want[k] = (float)want[k];
                        if (types[t] == AWL_I32 && bc->ref == r_div) want[k] = trunc(want[k]);
                        k++;
                    } while (awl_gc_next_index(idx, 3, sa));
                    char what[96];
                    snprintf(what, sizeof what, "%s %s %s swap=%d", bc->name,
                             awl_dtype_name(types[t]), awl_gc_layout_name(layout), swap);
                    ck_assert(awl_gc_allclose(yv, want, 24, tolerance(types[t]),
                                              4 * tolerance(types[t]), what));
                    free(av);
                    free(bv);
                    free(yv);
                }
            }
        }
    }
    ck_assert(awl_gc_end());
}
END_TEST

/* ---- gradients ------------------------------------------------------------------------- */

static awl_tensor *call_unary(awl_tensor *const *in, void *user)
{
    return ((const unary_case *)user)->op(in[0]);
}

static awl_tensor *call_binary(awl_tensor *const *in, void *user)
{
    return ((const binary_case *)user)->op(in[0], in[1]);
}

START_TEST(test_unary_gradcheck)
{
    awl_gc_begin(3);
    for (int c = 0; c < N_UNARY; c++) {
        const unary_case *u = &unary_cases[c];
        for (int layout = 0; layout < AWL_GC_LAYOUTS; layout++) {
            awl_tensor *x = awl_gc_layout(layout, AWL_SHAPE(3, 4), AWL_F64);
            if (u->positive) awl_gc_make_positive(x);
            ck_assert_msg(awl_gradcheck(call_unary, (void *)u, 1, &x, u->name), "%s %s", u->name,
                          awl_gc_layout_name(layout));
        }
    }
    ck_assert(awl_gc_end());
}
END_TEST

/* Operand pairs: equal shapes, non-contiguous views, and broadcasting in
 * both directions (with a broadcast view as one operand). */
static void binary_operands(int combo, awl_tensor **a, awl_tensor **b)
{
    switch (combo) {
    case 0:
        *a = awl_gc_randn(AWL_SHAPE(2, 3));
        *b = awl_gc_randn(AWL_SHAPE(2, 3));
        break;
    case 1:
        *a = awl_gc_permuted(AWL_SHAPE(3, 4));
        *b = awl_gc_sliced(AWL_SHAPE(3, 4));
        break;
    case 2:
        *a = awl_gc_expanded(AWL_SHAPE(3, 4), 0);
        *b = awl_gc_randn(AWL_SHAPE(4));
        break;
    case 3:
        *a = awl_gc_randn(AWL_SHAPE(3, 1, 4));
        *b = awl_gc_permuted(AWL_SHAPE(2, 4));
        break;
    default: *a = awl_gc_sliced(AWL_SHAPE(2, 1)); *b = awl_gc_expanded(AWL_SHAPE(3, 2, 5), 1);
    }
}
#define N_COMBOS 5

START_TEST(test_binary_gradcheck)
{
    awl_gc_begin(4);
    for (int c = 0; c < N_BINARY; c++) {
        const binary_case *bc = &binary_cases[c];
        if (!bc->differentiable) continue;
        for (int combo = 0; combo < N_COMBOS; combo++) {
            awl_tensor *in[2];
            binary_operands(combo, &in[0], &in[1]);
            if (bc->ref == r_div) awl_gc_make_positive(in[1]);
            ck_assert_msg(awl_gradcheck(call_binary, (void *)bc, 2, in, bc->name), "%s combo %d",
                          bc->name, combo);
        }
    }
    ck_assert(awl_gc_end());
}
END_TEST

/* A tensor used twice gets both contributions. */
START_TEST(test_same_input_twice)
{
    awl_gc_begin(5);
    awl_tensor *x = awl_requires_grad_(awl_gc_randn(AWL_SHAPE(3)), true);
    awl_tensor *y = awl_sum_all(awl_add(awl_mul(x, x), x));
    ck_assert_int_eq(awl_backward(y), 0);
    double *xv = awl_gc_values(x), *gv = awl_gc_values(x->grad), want[3];
    for (int i = 0; i < 3; i++) want[i] = 2 * xv[i] + 1;
    ck_assert(awl_gc_allclose(gv, want, 3, 1e-12, 1e-12, "d(x*x + x)"));
    free(xv);
    free(gv);
    awl_clear_grad(x);
    ck_assert(awl_gc_end());
}
END_TEST

/* The graph keeps only what backward reads. */
START_TEST(test_saves_only_what_is_needed)
{
    awl_gc_begin(6);
    awl_tensor *a = awl_requires_grad_(awl_gc_randn(AWL_SHAPE(4)), true);
    awl_tensor *b = awl_gc_randn(AWL_SHAPE(4));
    ck_assert_int_eq(awl_grad_fn(awl_mul(a, b))->n_saved, 1); /* b only */
    ck_assert_int_eq(awl_grad_fn(awl_mul(b, a))->n_saved, 1); /* b only */
    ck_assert_int_eq(awl_grad_fn(awl_add(a, b))->n_saved, 0);
    ck_assert_int_eq(awl_grad_fn(awl_div(a, b))->n_saved, 1);    /* b only */
    ck_assert_int_eq(awl_grad_fn(awl_div(b, a))->n_saved, 2);    /* a and b */
    ck_assert_int_eq(awl_grad_fn(awl_matmul(a, b))->n_saved, 1); /* b only */
    ck_assert_int_eq(awl_grad_fn(awl_tanh(a))->n_saved, 1);      /* the output */
    ck_assert_int_eq(awl_grad_fn(awl_mul_scalar(a, 2))->n_saved, 0);
    ck_assert(!awl_mul(b, b)->requires_grad);
    ck_assert(awl_grad_fn(awl_mul(b, b)) == NULL);
    ck_assert(awl_gc_end());
}
END_TEST

/* ---- where, masked_fill, comparisons ---------------------------------------------------- */

static awl_tensor *where_cond;

static awl_tensor *call_where(awl_tensor *const *in, void *user)
{
    (void)user;
    return awl_where(where_cond, in[0], in[1]);
}

static awl_tensor *call_masked_fill(awl_tensor *const *in, void *user)
{
    (void)user;
    return awl_masked_fill(in[0], where_cond, -7.5);
}

START_TEST(test_where)
{
    awl_gc_begin(7);
    for (int t = 0; t < 2; t++) {
        /* cond (3,4) of the other dtype, a (2,3,4) permuted, b (4) */
        awl_tensor *c = awl_gt(awl_gc_randn_dtype(AWL_SHAPE(3, 4), float_types[1 - t]),
                               awl_gc_randn_dtype(AWL_SHAPE(1), float_types[1 - t]));
        awl_tensor *a = awl_gc_layout(1, AWL_SHAPE(2, 3, 4), float_types[t]);
        awl_tensor *b = awl_gc_randn_dtype(AWL_SHAPE(4), float_types[t]);
        awl_tensor *y = awl_where(c, a, b);
        ck_assert(awl_gc_has_shape(y, AWL_SHAPE(2, 3, 4)));
        double *cv = awl_gc_values(c), *av = awl_gc_values(a), *bv = awl_gc_values(b);
        double *yv = awl_gc_values(y), want[24];
        for (int i = 0; i < 24; i++) want[i] = cv[i % 12] != 0 ? av[i] : bv[i % 4];
        ck_assert(awl_gc_allclose(yv, want, 24, 0, 0, "where"));
        free(cv);
        free(av);
        free(bv);
        free(yv);
    }
    where_cond = awl_gt(awl_gc_randn(AWL_SHAPE(3, 1)), awl_gc_randn(AWL_SHAPE(1)));
    awl_tensor *in[2] = {awl_gc_sliced(AWL_SHAPE(2, 3, 4)), awl_gc_expanded(AWL_SHAPE(3, 4), 0)};
    ck_assert(awl_gradcheck(call_where, NULL, 2, in, "where"));
    in[0] = awl_gc_randn(AWL_SHAPE(4)); /* broadcast up to (3,4) */
    in[1] = awl_gc_randn(AWL_SHAPE(3, 4));
    ck_assert(awl_gradcheck(call_where, NULL, 2, in, "where broadcast"));
    ck_assert(awl_gc_end());
}
END_TEST

START_TEST(test_masked_fill)
{
    awl_gc_begin(8);
    for (int t = 0; t < 2; t++) {
        awl_tensor *mask = awl_gt(awl_gc_randn(AWL_SHAPE(3, 1)), awl_gc_randn(AWL_SHAPE(1)));
        awl_tensor *x = awl_gc_layout(2, AWL_SHAPE(2, 3, 4), float_types[t]);
        awl_tensor *y = awl_masked_fill(x, mask, -7.5);
        ck_assert(awl_gc_has_shape(y, AWL_SHAPE(2, 3, 4)));
        ck_assert_int_eq(y->dtype, float_types[t]);
        double *mv = awl_gc_values(mask), *xv = awl_gc_values(x), *yv = awl_gc_values(y);
        double want[24];
        for (int i = 0; i < 24; i++) want[i] = mv[(i / 4) % 3] != 0 ? -7.5 : xv[i];
        ck_assert(awl_gc_allclose(yv, want, 24, 0, 0, "masked_fill"));
        free(mv);
        free(xv);
        free(yv);
    }
    where_cond = awl_lt(awl_gc_randn(AWL_SHAPE(4)), awl_gc_randn(AWL_SHAPE(1)));
    awl_tensor *x = awl_gc_permuted(AWL_SHAPE(3, 4));
    ck_assert(awl_gradcheck(call_masked_fill, NULL, 1, &x, "masked_fill"));
    ck_assert(awl_gc_end());
}
END_TEST

START_TEST(test_comparisons_carry_no_gradient)
{
    awl_gc_begin(9);
    awl_tensor *a = awl_requires_grad_(awl_gc_randn(AWL_SHAPE(3)), true);
    awl_tensor *b = awl_gc_randn(AWL_SHAPE(3));
    awl_tensor *outs[3] = {awl_eq(a, b), awl_gt(a, b), awl_lt(a, b)};
    for (int i = 0; i < 3; i++) {
        ck_assert_ptr_nonnull(outs[i]);
        ck_assert(!outs[i]->requires_grad);
        ck_assert_int_eq(outs[i]->dtype, AWL_F64);
    }
    ck_assert(awl_gc_end());
}
END_TEST

/* gelu's slope as used by backward, against the derivative of the reference. */
START_TEST(test_gelu_slope)
{
    awl_gc_begin(10);
    const double xs[] = {-4, -1.5, -0.3, 0, 0.2, 1, 2.5, 6};
    awl_tensor *x = awl_requires_grad_(awl_gc_from_doubles(xs, AWL_SHAPE(8), AWL_F64), true);
    ck_assert_int_eq(awl_backward(awl_sum_all(awl_gelu(x))), 0);
    double *g = awl_gc_values(x->grad), want[8];
    for (int i = 0; i < 8; i++) want[i] = (r_gelu(xs[i] + 1e-6) - r_gelu(xs[i] - 1e-6)) / 2e-6;
    ck_assert(awl_gc_allclose(g, want, 8, 1e-8, 1e-8, "gelu'"));
    free(g);
    awl_clear_grad(x);
    ck_assert(awl_gc_end());
}
END_TEST

/* GELU's backward through the backend's fused kernel (float32, where the
 * backend has one) agrees with the composed grad * gelu'(x). */
START_TEST(test_gelu_fused_backward)
{
    awl_gc_begin(31);
    const char *dev = awl_gc_device();
    awl_tensor *x3 = awl_mul_scalar(awl_randn(AWL_SHAPE(64, 130), AWL_F32, dev), 3.0);
    awl_tensor *x = awl_requires_grad_(awl_detach(x3), true);
    awl_tensor *w = awl_randn(AWL_SHAPE(64, 130), AWL_F32, dev);
    static float got[2][64 * 130];
    for (int fused = 0; fused < 2; fused++) {
        awl_set_fused_kernels(fused);
        awl_tensor *loss = awl_sum_all(awl_mul(awl_gelu(x), w));
        awl_tensor *g[1];
        ck_assert_int_eq(awl_grad(loss, 1, &x, g, NULL), 0);
        ck_assert_int_eq(awl_to_host(g[0], got[fused], sizeof got[fused]), 0);
    }
    awl_set_fused_kernels(true);
    for (int i = 0; i < 64 * 130; i++)
        ck_assert_msg(fabsf(got[0][i] - got[1][i]) <= 1e-6f * (1 + fabsf(got[0][i])),
                      "element %d: composed %g, fused %g", i, got[0][i], got[1][i]);
    ck_assert(awl_gc_end());
}
END_TEST

/* The CPU's float32 e^x (backends/cpu/cpu_math.h) at the ends of its range:
 * 0 below -87.33, infinity once e^x passes float32's largest value, NaN for
 * NaN, and float32's own e^x in between; and the MLP's fused GELU (its own
 * e^x, with fewer guards) gives the bits of the gelu op and of its slope
 * there too. */
START_TEST(test_exp_and_gelu_range_ends)
{
    if (strcmp(awl_gc_device(), "cpu") != 0) return; /* the CPU's e^x */
    awl_gc_begin(32);
    enum { N = 16 };
    const double xs[N] = {-INFINITY, -100, -87.5, -87.3, -20, -10.05, -1,       0,
                          1,         20,   88,    88.2,  89,  100,    INFINITY, NAN};
    awl_tensor *x = awl_gc_from_doubles(xs, AWL_SHAPE(N), AWL_F32);
    float e[N];
    ck_assert_int_eq(awl_to_host(awl_exp(x), e, sizeof e), 0);
    for (int i = 0; i < N; i++) {
        const float want = expf((float)xs[i]);
        if (isnan(xs[i]))
            ck_assert_msg(isnan(e[i]), "exp(nan) = %g", e[i]);
        else if (xs[i] < -87.33)
            ck_assert_msg(e[i] == 0.0f, "exp(%g) = %g, want 0", xs[i], e[i]);
        else if (isinf(want))
            ck_assert_msg(isinf(e[i]) && e[i] > 0, "exp(%g) = %g, want inf", xs[i], e[i]);
        else
            ck_assert_msg(fabsf(e[i] - want) <= 2e-7f * want, "exp(%g) = %.9g, want %.9g", xs[i],
                          e[i], want);
    }
    /* gelu(x) and gelu'(x) through the fused products: pre = x (N x 1) @ [1] */
    awl_tensor *a = awl_reshape(x, AWL_SHAPE(N, 1)),
               *one = awl_ones(AWL_SHAPE(1, 1), AWL_F32, "cpu");
    awl_tensor *pre = awl_empty(AWL_SHAPE(N, 1), AWL_F32, "cpu"), *out = awl_empty_like(pre);
    awl_tensor *slope = awl_empty_like(pre), *ones = awl_ones(AWL_SHAPE(N, 1), AWL_F32, "cpu");
    ck_assert_int_eq(awl_tensor_matmul_bias_gelu(out, pre, a, one, NULL), 0);
    ck_assert_int_eq(awl_tensor_matmul_gelu_backward(slope, ones, one, pre), 0);
    float got[2][N], want[2][N];
    ck_assert_int_eq(awl_to_host(out, got[0], sizeof got[0]), 0);
    ck_assert_int_eq(awl_to_host(slope, got[1], sizeof got[1]), 0);
    ck_assert_int_eq(awl_to_host(awl_gelu(x), want[0], sizeof want[0]), 0);
    ck_assert_int_eq(
        awl_to_host(awl_tensor_unary(AWL_UNARY_GELU_GRAD, x, 0), want[1], sizeof want[1]), 0);
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < N; i++)
            ck_assert_msg(memcmp(&got[k][i], &want[k][i], sizeof(float)) == 0 ||
                              (isnan(got[k][i]) && isnan(want[k][i])),
                          "%s(%g): fused %g, op %g", k ? "gelu'" : "gelu", xs[i], got[k][i],
                          want[k][i]);
    ck_assert(awl_gc_end());
}
END_TEST

int main(void)
{
    return AWL_GC_RUN_SUITE("ops_elementwise", test_unary_forward, test_binary_forward,
                            test_unary_gradcheck, test_binary_gradcheck, test_same_input_twice,
                            test_saves_only_what_is_needed, test_where, test_masked_fill,
                            test_comparisons_carry_no_gradient, test_gelu_slope,
                            test_gelu_fused_backward, test_exp_and_gelu_range_ends);
}
