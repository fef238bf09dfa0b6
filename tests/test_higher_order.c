/*
 * tests/test_higher_order.c - second- and third-order gradients.
 *
 * Every backward formula is built from differentiable ops, so with
 * create_graph the first gradient has a graph of its own. awl_gradgradcheck
 * differentiates that graph and compares with finite differences of the
 * first gradient. Linear ops (slice, embedding, gather, concat, the views)
 * have constant first gradients, so they are checked inside products, which
 * sends the second derivative through their backward ops (slice_backward,
 * embedding_backward, gather_backward). Third order: gradgradcheck of a
 * function that itself returns a create_graph gradient.
 */
#include <math.h>
#include <stdlib.h>

#include "helpers/gradcheck.h"

typedef struct case2 {
    const char *name;
    awl_gc_fn fn;
    int n;
    bool positive; /* inputs must be positive */
} case2;

#define FN(name, body)                                                                             \
    static awl_tensor *name(awl_tensor *const *in, void *u)                                        \
    {                                                                                              \
        (void)u;                                                                                   \
        return body;                                                                               \
    }

static awl_tensor *index_rows; /* (2,3) int32 rows of a (4, ...) table */
static awl_tensor *index_cols; /* (3,2) int32 entries along axis 1 of (3,4) */
static awl_tensor *condition;  /* (3,4) */

FN(f_tanh, awl_tanh(in[0]))
FN(f_mul, awl_mul(in[0], in[1]))
FN(f_matmul, awl_matmul(in[0], in[1]))
FN(f_gelu, awl_gelu(in[0]))
FN(f_softmax_last, awl_softmax(in[0], -1))
FN(f_softmax_first, awl_softmax(in[0], 0))
FN(f_log_softmax, awl_log_softmax(in[0], -1))
FN(f_logsumexp, awl_logsumexp(in[0], 1, false))
FN(f_sigmoid, awl_sigmoid(in[0]))
FN(f_exp, awl_exp(in[0]))
FN(f_log, awl_log(in[0]))
FN(f_sqrt, awl_sqrt(in[0]))
FN(f_div, awl_div(in[0], in[1]))
FN(f_pow, awl_pow(in[0], 3.0))
FN(f_pow_frac, awl_pow(in[0], -0.5))
FN(f_rdiv, awl_rdiv_scalar(2.0, in[0]))
FN(f_sub, awl_mul(awl_sub(in[0], in[1]), awl_rsub_scalar(1.0, in[1])))
FN(f_sum, awl_mul(awl_sum(in[0], AWL_DIMS(1), true), in[0]))
FN(f_mean, awl_pow(awl_mean(in[0], AWL_DIMS(0), false), 2.0))
FN(f_max, awl_mul(awl_max(in[0], AWL_DIMS(1), true), in[0]))
FN(f_relu, awl_mul(awl_relu(in[0]), in[0]))
FN(f_abs, awl_mul(awl_abs(in[0]), in[0]))
FN(f_maximum, awl_mul(awl_maximum(in[0], in[1]), in[0]))
FN(f_slice, awl_mul(awl_slice(in[0], 1, 0, 4, 2), awl_slice(in[0], 1, 1, 4, 2)))
FN(f_views, awl_mul(awl_reshape(awl_permute(in[0], (int[]){1, 0}), AWL_SHAPE(2, 6)),
                    awl_expand(awl_unsqueeze(awl_sum_all(in[0]), 0), AWL_SHAPE(2, 6))))
FN(f_transpose, awl_matmul(awl_transpose(in[0], 0, 1), in[0]))
FN(f_concat, awl_pow(awl_concat(2, (awl_tensor *[]){in[0], in[1]}, 1), 2.0))
FN(f_stack, awl_mul(awl_stack(2, (awl_tensor *[]){in[0], in[1]}, 0), in[0]))
FN(f_embedding, awl_pow(awl_embedding(in[0], index_rows), 2.0))
FN(f_gather, awl_pow(awl_gather(in[0], 1, index_cols), 3.0))
FN(f_where, awl_where(condition, awl_mul(in[0], in[1]), awl_tanh(in[1])))
FN(f_mlp, awl_log_softmax(awl_matmul(awl_gelu(awl_matmul(in[0], in[1])), in[2]), -1))

/* Inputs for each case: (3,4) views, except where the op wants others. */
static void make_inputs(const case2 *c, int variant, awl_tensor **in)
{
    if (c->fn == f_matmul) {
        in[0] = variant ? awl_gc_expanded(AWL_SHAPE(2, 3, 4), 0) : awl_gc_permuted(AWL_SHAPE(3, 4));
        in[1] = variant ? awl_gc_sliced(AWL_SHAPE(4)) : awl_gc_randn(AWL_SHAPE(4, 2));
        return;
    }
    if (c->fn == f_mlp) {
        in[0] = awl_gc_randn(AWL_SHAPE(2, 3));
        in[1] = awl_gc_permuted(AWL_SHAPE(3, 4));
        in[2] = awl_gc_sliced(AWL_SHAPE(4, 3));
        return;
    }
    if (c->fn == f_concat || c->fn == f_stack) {
        in[0] = awl_gc_permuted(AWL_SHAPE(3, 4));
        in[1] = c->fn == f_concat ? awl_gc_sliced(AWL_SHAPE(3, 2)) : awl_gc_sliced(AWL_SHAPE(3, 4));
        return;
    }
    for (int i = 0; i < c->n; i++) {
        int layout = (variant + i) % AWL_GC_LAYOUTS;
        /* the second operand of a binary op broadcasts */
        in[i] = i == 1 && variant ? awl_gc_layout(layout, AWL_SHAPE(4), AWL_F64)
                                  : awl_gc_layout(layout, AWL_SHAPE(3, 4), AWL_F64);
        if (c->positive) awl_gc_make_positive(in[i]);
    }
}

static const case2 cases[] = {
    {"tanh", f_tanh, 1, false},
    {"mul", f_mul, 2, false},
    {"matmul", f_matmul, 2, false},
    {"gelu", f_gelu, 1, false},
    {"softmax last", f_softmax_last, 1, false},
    {"softmax first", f_softmax_first, 1, false},
    {"log_softmax", f_log_softmax, 1, false},
    {"logsumexp", f_logsumexp, 1, false},
    {"sigmoid", f_sigmoid, 1, false},
    {"exp", f_exp, 1, false},
    {"log", f_log, 1, true},
    {"sqrt", f_sqrt, 1, true},
    {"div", f_div, 2, true},
    {"pow 3", f_pow, 1, false},
    {"pow -0.5", f_pow_frac, 1, true},
    {"rdiv_scalar", f_rdiv, 1, true},
    {"sub, rsub_scalar", f_sub, 2, false},
    {"sum", f_sum, 1, false},
    {"mean", f_mean, 1, false},
    {"max", f_max, 1, false},
    {"relu", f_relu, 1, false},
    {"abs", f_abs, 1, false},
    {"maximum", f_maximum, 2, false},
    {"slice", f_slice, 1, false},
    {"views", f_views, 1, false},
    {"transpose", f_transpose, 1, false},
    {"concat", f_concat, 2, false},
    {"stack", f_stack, 2, false},
    {"embedding", f_embedding, 1, false},
    {"gather", f_gather, 1, false},
    {"where", f_where, 2, false},
    {"mlp", f_mlp, 3, false},
};

START_TEST(test_second_order)
{
    awl_gc_begin(80);
    index_rows = awl_gc_from_doubles((double[]){0, 2, 2, 3, 0, 1}, AWL_SHAPE(2, 3), AWL_I32);
    index_cols = awl_gc_from_doubles((double[]){3, 0, 1, 1, 2, 0}, AWL_SHAPE(3, 2), AWL_I32);
    condition = awl_gt(awl_gc_randn(AWL_SHAPE(3, 4)), awl_gc_randn(AWL_SHAPE(1)));
    for (int fused = 0; fused < 2; fused++) {
        awl_set_fused_kernels(fused);
        for (int c = 0; c < (int)(sizeof cases / sizeof cases[0]); c++)
            for (int variant = 0; variant < 2; variant++) {
                /* the embedding table is (4,4): rows 0..3 */
                awl_tensor *in[3];
                make_inputs(&cases[c], variant, in);
                if (cases[c].fn == f_embedding) in[0] = awl_gc_permuted(AWL_SHAPE(4, 4));
                ck_assert_msg(awl_gradgradcheck(cases[c].fn, NULL, cases[c].n, in, cases[c].name),
                              "%s variant %d fused %d", cases[c].name, variant, fused);
            }
    }
    awl_set_fused_kernels(true);
    ck_assert(awl_gc_end());
}
END_TEST

/* ---- third order --------------------------------------------------------------------------- */

/* d/dx sum(f(x)), recorded (create_graph), for the function in user. */
static awl_tensor *first_derivative(awl_tensor *const *in, void *user)
{
    const case2 *c = user;
    awl_tensor *g = NULL;
    awl_backward_options o = {.create_graph = true};
    if (awl_grad(awl_sum_all(c->fn(in, NULL)), 1, in, &g, &o) != 0) return NULL;
    return g;
}

START_TEST(test_third_order)
{
    awl_gc_begin(81);
    const case2 third[] = {{"tanh", f_tanh, 1, false},
                           {"gelu", f_gelu, 1, false},
                           {"softmax", f_softmax_last, 1, false},
                           {"log", f_log, 1, true}};
    for (int c = 0; c < 4; c++) {
        awl_tensor *x = awl_gc_permuted(AWL_SHAPE(2, 3));
        if (third[c].positive) awl_gc_make_positive(x);
        ck_assert_msg(awl_gradgradcheck(first_derivative, (void *)&third[c], 1, &x, third[c].name),
                      "third order of %s", third[c].name);
    }
    ck_assert(awl_gc_end());
}
END_TEST

/* A plain check of the known values: tanh'' = -2 t (1 - t^2) through two
 * create_graph passes. */
START_TEST(test_tanh_second_derivative_values)
{
    awl_gc_begin(82);
    const double xs[4] = {-1.5, -0.2, 0.4, 2.0};
    awl_tensor *x = awl_requires_grad_(awl_gc_from_doubles(xs, AWL_SHAPE(4), AWL_F64), true);
    awl_tensor *g1, *g2;
    awl_backward_options o = {.create_graph = true};
    ck_assert_int_eq(awl_grad(awl_sum_all(awl_tanh(x)), 1, &x, &g1, &o), 0);
    ck_assert(g1->requires_grad);
    ck_assert_int_eq(awl_grad(awl_sum_all(g1), 1, &x, &g2, NULL), 0);
    double *v = awl_gc_values(g2), want[4];
    for (int i = 0; i < 4; i++) {
        double t = tanh(xs[i]);
        want[i] = -2 * t * (1 - t * t);
    }
    ck_assert(awl_gc_allclose(v, want, 4, 1e-12, 1e-12, "tanh''"));
    free(v);
    ck_assert(awl_gc_end());
}
END_TEST

int main(void)
{
    return AWL_GC_RUN_SUITE("higher_order", test_second_order, test_third_order,
                            test_tanh_second_derivative_values);
}
