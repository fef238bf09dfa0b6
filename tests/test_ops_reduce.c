/*
 * tests/test_ops_reduce.c - sum, mean, max and the softmax family.
 *
 * Forward results against loops over host values for several axis sets,
 * with and without keepdim, on every input layout; gradients by finite
 * differences; max's tie rule; and the fused softmax kernels against the
 * composed path (forward and backward must agree).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "helpers/gradcheck.h"

enum { R_SUM, R_MEAN, R_MAX };

/* Row-major index, in the keepdim-shaped result, of x's element idx. */
static int64_t kept_index(const int64_t *idx, int nd, const int64_t *shape, unsigned mask)
{
    int64_t at = 0;
    for (int d = 0; d < nd; d++)
        if (!(mask & (1u << d))) at = at * shape[d] + idx[d];
    return at;
}

/* out (keepdim layout, n_out elements) = op over the axes in mask. */
static void ref_reduce(const double *x, int nd, const int64_t *shape, unsigned mask, int op,
                       double *out, int64_t n_out)
{
    int64_t count = 1;
    for (int d = 0; d < nd; d++)
        if (mask & (1u << d)) count *= shape[d];
    for (int64_t i = 0; i < n_out; i++) out[i] = op == R_MAX ? -INFINITY : 0.0;
    int64_t idx[AWL_MAX_DIMS] = {0}, k = 0;
    do {
        double *o = &out[kept_index(idx, nd, shape, mask)];
        *o = op == R_MAX ? fmax(*o, x[k]) : *o + x[k];
        k++;
    } while (awl_gc_next_index(idx, nd, shape));
    if (op == R_MEAN)
        for (int64_t i = 0; i < n_out; i++) out[i] /= (double)count;
}

typedef struct axes_case {
    int ndims;
    int dims[3];
    unsigned mask; /* for shape (2,3,4) */
} axes_case;

static const axes_case axes_cases[] = {
    {0, {0}, 7}, {1, {0}, 1}, {1, {1}, 2}, {1, {-1}, 4}, {2, {0, 2}, 5}, {2, {2, 1}, 6},
};
#define N_AXES (int)(sizeof axes_cases / sizeof axes_cases[0])

typedef awl_tensor *(*reduce_fn)(awl_tensor *, int, const int *, bool);
static const reduce_fn reduce_ops[] = {awl_sum, awl_mean, awl_max};
static const char *const reduce_names[] = {"sum", "mean", "max"};

START_TEST(test_reduce_forward)
{
    awl_gc_begin(30);
    static const awl_dtype types[] = {AWL_F32, AWL_F64, AWL_I32};
    const int64_t shape[3] = {2, 3, 4};
    for (int op = 0; op < 3; op++)
        for (int t = 0; t < 3; t++) {
            if (types[t] == AWL_I32 && op == R_MEAN) continue;
            for (int layout = 0; layout < AWL_GC_LAYOUTS; layout++)
                for (int c = 0; c < N_AXES; c++)
                    for (int keep = 0; keep < 2; keep++) {
                        const axes_case *ac = &axes_cases[c];
                        awl_tensor *x = awl_gc_layout(layout, 3, shape, types[t]);
                        awl_tensor *y = reduce_ops[op](x, ac->ndims, ac->dims, keep);
                        ck_assert_msg(y, "%s: %s", reduce_names[op], awl_last_error());
                        int64_t oshape[3];
                        int on = 0;
                        for (int d = 0; d < 3; d++) {
                            bool r = ac->mask & (1u << d);
                            if (keep || !r) oshape[on++] = r ? 1 : shape[d];
                        }
                        ck_assert(awl_gc_has_shape(y, on, oshape));
                        double *xv = awl_gc_values(x), *yv = awl_gc_values(y), want[24];
                        ref_reduce(xv, 3, shape, ac->mask, op, want, awl_numel(y));
                        char what[96];
                        snprintf(what, sizeof what, "%s %s %s axes %d keep %d", reduce_names[op],
                                 awl_dtype_name(types[t]), awl_gc_layout_name(layout), c, keep);
                        double tol = types[t] == AWL_F32 ? 1e-5 : 1e-12;
                        ck_assert(awl_gc_allclose(yv, want, awl_numel(y), tol, tol, what));
                        free(xv);
                        free(yv);
                    }
        }
    awl_tensor *x = awl_gc_randn(AWL_SHAPE(3, 4));
    double *xv = awl_gc_values(x), s = 0;
    for (int i = 0; i < 12; i++) s += xv[i];
    ck_assert_int_eq(awl_sum_all(x)->ndim, 0);
    ck_assert_double_eq_tol(awl_item(awl_sum_all(x)), s, 1e-12);
    ck_assert_double_eq_tol(awl_item(awl_mean_all(x)), s / 12, 1e-12);
    free(xv);
    ck_assert(awl_gc_end());
}
END_TEST

typedef struct reduce_call {
    int op;
    const axes_case *axes;
    bool keepdim;
} reduce_call;

static awl_tensor *call_reduce(awl_tensor *const *in, void *user)
{
    const reduce_call *r = user;
    return reduce_ops[r->op](in[0], r->axes->ndims, r->axes->dims, r->keepdim);
}

START_TEST(test_reduce_gradcheck)
{
    awl_gc_begin(31);
    for (int op = 0; op < 3; op++)
        for (int layout = 0; layout < AWL_GC_LAYOUTS; layout++)
            for (int c = 0; c < N_AXES; c++) {
                /* a broadcast input ties max along axis 0: both copies are one
                 * stored value, whose derivative is the sum of the halves */
                reduce_call r = {op, &axes_cases[c], c % 2 == 0};
                awl_tensor *x = awl_gc_layout(layout, AWL_SHAPE(2, 3, 4), AWL_F64);
                char name[64];
                snprintf(name, sizeof name, "%s %s axes %d", reduce_names[op],
                         awl_gc_layout_name(layout), c);
                ck_assert_msg(awl_gradcheck(call_reduce, &r, 1, &x, name), "%s", name);
            }
    ck_assert(awl_gc_end());
}
END_TEST

START_TEST(test_max_ties_share_the_gradient)
{
    awl_gc_begin(32);
    const double v[8] = {1, 3, 3, 2, 5, 5, 5, -1};
    awl_tensor *x = awl_requires_grad_(awl_gc_from_doubles(v, AWL_SHAPE(2, 4), AWL_F64), true);
    awl_tensor *m = awl_max(x, AWL_DIMS(1), false);
    double *mv = awl_gc_values(m);
    ck_assert_double_eq(mv[0], 3);
    ck_assert_double_eq(mv[1], 5);
    free(mv);
    ck_assert_int_eq(awl_backward(awl_sum_all(awl_mul_scalar(m, 6.0))), 0);
    const double want[8] = {0, 3, 3, 0, 2, 2, 2, 0};
    double *g = awl_gc_values(x->grad);
    ck_assert(awl_gc_allclose(g, want, 8, 1e-12, 0, "max ties"));
    free(g);
    awl_clear_grad(x);
    ck_assert(awl_gc_end());
}
END_TEST

/* ---- softmax, log_softmax, logsumexp ----------------------------------------------------- */

enum { S_SOFTMAX, S_LOG_SOFTMAX, S_LOGSUMEXP };

/* The reference for one of the three over axis d of a (2,3,4) x; out in the
 * op's layout (logsumexp: keepdim layout, which has the same order). */
static void ref_softmax(const double *x, const int64_t *shape, int d, int kind, double *out)
{
    unsigned mask = 1u << d;
    double m[12], s[12];
    ref_reduce(x, 3, shape, mask, R_MAX, m, 24 / shape[d]);
    for (int i = 0; i < 24 / shape[d]; i++) s[i] = 0;
    int64_t idx[3] = {0}, k = 0;
    do {
        int64_t r = kept_index(idx, 3, shape, mask);
        s[r] += exp(x[k++] - m[r]);
    } while (awl_gc_next_index(idx, 3, shape));
    if (kind == S_LOGSUMEXP) {
        for (int i = 0; i < 24 / shape[d]; i++) out[i] = m[i] + log(s[i]);
        return;
    }
    k = 0;
    do {
        int64_t r = kept_index(idx, 3, shape, mask);
        double z = x[k] - m[r];
        out[k++] = kind == S_SOFTMAX ? exp(z) / s[r] : z - log(s[r]);
    } while (awl_gc_next_index(idx, 3, shape));
}

typedef struct softmax_call {
    int kind, dim;
    bool keepdim;
} softmax_call;

static awl_tensor *call_softmax(awl_tensor *const *in, void *user)
{
    const softmax_call *c = user;
    if (c->kind == S_SOFTMAX) return awl_softmax(in[0], c->dim);
    if (c->kind == S_LOG_SOFTMAX) return awl_log_softmax(in[0], c->dim);
    return awl_logsumexp(in[0], c->dim, c->keepdim);
}

static const char *const softmax_names[] = {"softmax", "log_softmax", "logsumexp"};

START_TEST(test_softmax_forward)
{
    awl_gc_begin(33);
    static const awl_dtype types[] = {AWL_F32, AWL_F64};
    const int64_t shape[3] = {2, 3, 4};
    for (int fused = 0; fused < 2; fused++) {
        awl_set_fused_kernels(fused);
        for (int kind = 0; kind < 3; kind++)
            for (int t = 0; t < 2; t++)
                for (int layout = 0; layout < AWL_GC_LAYOUTS; layout++)
                    for (int dim = -1; dim < 3; dim++) {
                        softmax_call c = {kind, dim, layout % 2 == 0};
                        awl_tensor *x = awl_gc_layout(layout, 3, shape, types[t]);
                        awl_tensor *y = call_softmax(&x, &c);
                        ck_assert_msg(y, "%s: %s", softmax_names[kind], awl_last_error());
                        double *xv = awl_gc_values(x), *yv = awl_gc_values(y), want[24];
                        ref_softmax(xv, shape, dim < 0 ? dim + 3 : dim, kind, want);
                        char what[96];
                        snprintf(what, sizeof what, "%s %s %s dim %d fused %d", softmax_names[kind],
                                 awl_dtype_name(types[t]), awl_gc_layout_name(layout), dim, fused);
                        double tol = types[t] == AWL_F32 ? 1e-5 : 1e-12;
                        ck_assert(awl_gc_allclose(yv, want, awl_numel(y), tol, tol, what));
                        free(xv);
                        free(yv);
                    }
    }
    awl_set_fused_kernels(true);
    /* large logits: the maximum is subtracted first */
    const double big[4] = {1000, 1001, 999, -1000};
    double *p = awl_gc_values(awl_softmax(awl_gc_from_doubles(big, AWL_SHAPE(4), AWL_F32), 0));
    ck_assert(isfinite(p[0]) && isfinite(p[1]));
    ck_assert_double_eq_tol(p[0] + p[1] + p[2] + p[3], 1.0, 1e-6);
    free(p);
    ck_assert(awl_gc_end());
}
END_TEST

START_TEST(test_softmax_gradcheck)
{
    awl_gc_begin(34);
    for (int fused = 0; fused < 2; fused++) {
        awl_set_fused_kernels(fused);
        for (int kind = 0; kind < 3; kind++)
            for (int layout = 0; layout < AWL_GC_LAYOUTS; layout++)
                for (int dim = -1; dim < 3; dim += 2) { /* the last axis and axis 1 */
                    softmax_call c = {kind, dim, layout % 2 == 1};
                    awl_tensor *x = awl_gc_layout(layout, AWL_SHAPE(2, 3, 4), AWL_F64);
                    char name[64];
                    snprintf(name, sizeof name, "%s %s dim %d fused %d", softmax_names[kind],
                             awl_gc_layout_name(layout), dim, fused);
                    ck_assert_msg(awl_gradcheck(call_softmax, &c, 1, &x, name), "%s", name);
                }
    }
    awl_set_fused_kernels(true);
    ck_assert(awl_gc_end());
}
END_TEST

/* The fused kernels and the composed primitives give the same values and
 * the same gradients. */
START_TEST(test_fused_matches_composed)
{
    awl_gc_begin(35);
    static const awl_dtype types[] = {AWL_F32, AWL_F64};
    for (int t = 0; t < 2; t++)
        for (int kind = 0; kind < 2; kind++) {
            awl_tensor *x0 = awl_gc_randn_dtype(AWL_SHAPE(5, 33), types[t]);
            awl_tensor *up = awl_gc_randn_dtype(AWL_SHAPE(5, 33), types[t]);
            if (!awl_tensor_backend(x0)->softmax_forward)
                fprintf(stderr, "note: this backend has no fused softmax; both paths compose\n");
            double *y[2], *g[2];
            for (int fused = 0; fused < 2; fused++) {
                awl_set_fused_kernels(fused);
                awl_tensor *x = awl_requires_grad_(awl_detach(x0), true);
                softmax_call c = {kind, -1, false};
                awl_tensor *out = call_softmax(&x, &c);
                awl_backward_options o = {.grad = up};
                ck_assert_int_eq(awl_backward_ex(out, &o), 0);
                y[fused] = awl_gc_values(out);
                g[fused] = awl_gc_values(x->grad);
                awl_clear_grad(x);
            }
            char what[64];
            snprintf(what, sizeof what, "%s %s fused vs composed", softmax_names[kind],
                     awl_dtype_name(types[t]));
            double tol = types[t] == AWL_F32 ? 1e-6 : 1e-14;
            ck_assert(awl_gc_allclose(y[1], y[0], 5 * 33, tol, tol, what));
            ck_assert(awl_gc_allclose(g[1], g[0], 5 * 33, tol, tol, what));
            for (int i = 0; i < 2; i++) {
                free(y[i]);
                free(g[i]);
            }
        }
    awl_set_fused_kernels(true);
    ck_assert(awl_gc_end());
}
END_TEST

int main(void)
{
    return AWL_GC_RUN_SUITE("ops_reduce", test_reduce_forward, test_reduce_gradcheck,
                            test_max_ties_share_the_gradient, test_softmax_forward,
                            test_softmax_gradcheck, test_fused_matches_composed);
}
