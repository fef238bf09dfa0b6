/*
 * tests/test_ops_index.c - embedding lookup and gather.
 *
 * Forward results against loops, with repeated indices (whose gradients
 * must add up), on contiguous and non-contiguous weights, in float32 and
 * float64; gradients by finite differences.
 */
#include <stdlib.h>

#include "helpers/gradcheck.h"

static const awl_dtype float_types[] = {AWL_F32, AWL_F64};

/* Row indices (2,4) into a table of 6 rows, with repeats. */
static const double token_ids[8] = {0, 5, 2, 2, 5, 1, 0, 2};

START_TEST(test_embedding_forward)
{
    awl_gc_begin(50);
    awl_tensor *idx = awl_gc_from_doubles(token_ids, AWL_SHAPE(2, 4), AWL_I32);
    for (int t = 0; t < 2; t++)
        for (int layout = 0; layout < AWL_GC_LAYOUTS; layout++) {
            awl_tensor *w = awl_gc_layout(layout, AWL_SHAPE(6, 3), float_types[t]);
            awl_tensor *y = awl_embedding(w, idx);
            ck_assert_msg(y, "%s", awl_last_error());
            ck_assert(awl_gc_has_shape(y, AWL_SHAPE(2, 4, 3)));
            ck_assert_int_eq(y->dtype, float_types[t]);
            double *wv = awl_gc_values(w), *yv = awl_gc_values(y), want[24];
            for (int i = 0; i < 8; i++)
                for (int c = 0; c < 3; c++) want[i * 3 + c] = wv[(int)token_ids[i] * 3 + c];
            ck_assert(awl_gc_allclose(yv, want, 24, 0, 0, awl_gc_layout_name(layout)));
            free(wv);
            free(yv);
        }
    /* a 1-D table: one value per index */
    awl_tensor *w1 = awl_gc_randn(AWL_SHAPE(6));
    awl_tensor *y1 = awl_embedding(w1, idx);
    ck_assert(awl_gc_has_shape(y1, AWL_SHAPE(2, 4)));
    double *wv = awl_gc_values(w1), *yv = awl_gc_values(y1), want[8];
    for (int i = 0; i < 8; i++) want[i] = wv[(int)token_ids[i]];
    ck_assert(awl_gc_allclose(yv, want, 8, 0, 0, "1-D table"));
    free(wv);
    free(yv);
    ck_assert(awl_gc_end());
}
END_TEST

static awl_tensor *index_tensor;

static awl_tensor *call_embedding(awl_tensor *const *in, void *u)
{
    (void)u;
    return awl_embedding(in[0], index_tensor);
}

START_TEST(test_embedding_gradcheck)
{
    awl_gc_begin(51);
    index_tensor = awl_gc_from_doubles(token_ids, AWL_SHAPE(2, 4), AWL_I32);
    for (int layout = 0; layout < AWL_GC_LAYOUTS; layout++) {
        awl_tensor *w = awl_gc_layout(layout, AWL_SHAPE(6, 3), AWL_F64);
        ck_assert_msg(awl_gradcheck(call_embedding, NULL, 1, &w, "embedding"), "%s",
                      awl_gc_layout_name(layout));
    }
    /* rows never picked get exactly zero; repeated rows the sum */
    awl_tensor *w = awl_requires_grad_(awl_gc_randn(AWL_SHAPE(6, 3)), true);
    ck_assert_int_eq(awl_backward(awl_sum_all(awl_embedding(w, index_tensor))), 0);
    double *g = awl_gc_values(w->grad);
    const double count[6] = {2, 1, 3, 0, 0, 2};
    for (int r = 0; r < 6; r++)
        for (int c = 0; c < 3; c++) ck_assert_double_eq(g[r * 3 + c], count[r]);
    free(g);
    awl_clear_grad(w);
    ck_assert(awl_gc_end());
}
END_TEST

/* x (3,5): idx_1 (3,2) picks along dim 1, idx_0 (2,5) along dim 0. */
static const double along1[6] = {4, 0, 2, 2, 1, 3};
static const double along0[10] = {2, 0, 1, 1, 2, 0, 0, 2, 2, 1};

START_TEST(test_gather_forward)
{
    awl_gc_begin(52);
    awl_tensor *i1 = awl_gc_from_doubles(along1, AWL_SHAPE(3, 2), AWL_I32);
    awl_tensor *i0 = awl_gc_from_doubles(along0, AWL_SHAPE(2, 5), AWL_I32);
    for (int t = 0; t < 2; t++)
        for (int layout = 0; layout < AWL_GC_LAYOUTS; layout++) {
            awl_tensor *x = awl_gc_layout(layout, AWL_SHAPE(3, 5), float_types[t]);
            double *xv = awl_gc_values(x);
            awl_tensor *y = awl_gather(x, 1, i1);
            ck_assert(awl_gc_has_shape(y, AWL_SHAPE(3, 2)));
            double *yv = awl_gc_values(y), want[10];
            for (int r = 0; r < 3; r++)
                for (int j = 0; j < 2; j++) want[r * 2 + j] = xv[r * 5 + (int)along1[r * 2 + j]];
            ck_assert(awl_gc_allclose(yv, want, 6, 0, 0, "gather dim 1"));
            free(yv);
            y = awl_gather(x, -2, i0);
            ck_assert(awl_gc_has_shape(y, AWL_SHAPE(2, 5)));
            yv = awl_gc_values(y);
            for (int r = 0; r < 2; r++)
                for (int c = 0; c < 5; c++) want[r * 5 + c] = xv[(int)along0[r * 5 + c] * 5 + c];
            ck_assert(awl_gc_allclose(yv, want, 10, 0, 0, "gather dim 0"));
            free(yv);
            free(xv);
        }
    ck_assert(awl_gc_end());
}
END_TEST

static int gather_dim;

static awl_tensor *call_gather(awl_tensor *const *in, void *u)
{
    (void)u;
    return awl_gather(in[0], gather_dim, index_tensor);
}

START_TEST(test_gather_gradcheck)
{
    awl_gc_begin(53);
    for (int layout = 0; layout < AWL_GC_LAYOUTS; layout++) {
        awl_tensor *x = awl_gc_layout(layout, AWL_SHAPE(3, 5), AWL_F64);
        index_tensor = awl_gc_from_doubles(along1, AWL_SHAPE(3, 2), AWL_I32);
        gather_dim = 1;
        ck_assert_msg(awl_gradcheck(call_gather, NULL, 1, &x, "gather dim 1"), "%s",
                      awl_gc_layout_name(layout));
        index_tensor = awl_gc_from_doubles(along0, AWL_SHAPE(2, 5), AWL_I32);
        gather_dim = 0;
        ck_assert_msg(awl_gradcheck(call_gather, NULL, 1, &x, "gather dim 0"), "%s",
                      awl_gc_layout_name(layout));
    }
    ck_assert(awl_gc_end());
}
END_TEST

int main(void)
{
    return AWL_GC_RUN_SUITE("ops_index", test_embedding_forward, test_embedding_gradcheck,
                            test_gather_forward, test_gather_gradcheck);
}
