/*
 * tests/test_ops_shape.c - views and joins.
 *
 * Each view op: its values against index arithmetic on host values, whether
 * it shares the input's storage (a view) or not, and a finite-difference
 * gradient check on contiguous and non-contiguous inputs. Joins (concat,
 * stack) and split likewise, split through a function that reassembles its
 * pieces in another order so every piece's gradient path is exercised.
 */
#include <stdlib.h>

#include "helpers/gradcheck.h"

static const awl_dtype types[] = {AWL_F32, AWL_F64, AWL_I32};

/* The values of x (2,3,4) read at the row-major index that `map` gives for
 * each of y's n elements. */
typedef int64_t (*index_map)(int64_t i);

static bool values_follow(awl_tensor *x, awl_tensor *y, index_map map, const char *what)
{
    double *xv = awl_gc_values(x), *yv = awl_gc_values(y);
    int64_t n = awl_numel(y);
    double *want = malloc((size_t)n * sizeof *want);
    for (int64_t i = 0; i < n; i++) want[i] = xv[map(i)];
    bool ok = awl_gc_allclose(yv, want, n, 0, 0, what);
    free(xv);
    free(yv);
    free(want);
    return ok;
}

static int64_t identity_map(int64_t i) { return i; }

/* y = permute(x (2,3,4), (2,0,1)) is (4,2,3): y[c][a][b] = x[a][b][c]. */
static int64_t permute_map(int64_t i)
{
    int64_t c = i / 6, a = (i / 3) % 2, b = i % 3;
    return (a * 3 + b) * 4 + c;
}

/* y = transpose(x (2,3,4), 0, 2) is (4,3,2): y[c][b][a] = x[a][b][c]. */
static int64_t transpose_map(int64_t i)
{
    int64_t c = i / 6, b = (i / 2) % 3, a = i % 2;
    return (a * 3 + b) * 4 + c;
}

/* y = slice(x (2,3,4), 2, -3, 4, 2) is (2,3,2): y[a][b][k] = x[a][b][1 + 2k]. */
static int64_t slice_map(int64_t i) { return (i / 2) * 4 + 1 + 2 * (i % 2); }

/* y = expand(x (3,1), (2,3,4)): y[a][b][c] = x[b][0]. */
static int64_t expand_map(int64_t i) { return (i / 4) % 3; }

START_TEST(test_view_values)
{
    awl_gc_begin(40);
    for (int t = 0; t < 3; t++)
        for (int layout = 0; layout < AWL_GC_LAYOUTS; layout++) {
            awl_tensor *x = awl_gc_layout(layout, AWL_SHAPE(2, 3, 4), types[t]);
            awl_tensor *y = awl_permute(x, (int[]){2, 0, 1});
            ck_assert(awl_gc_has_shape(y, AWL_SHAPE(4, 2, 3)));
            ck_assert_ptr_eq(y->storage, x->storage);
            ck_assert(values_follow(x, y, permute_map, "permute"));
            ck_assert(
                values_follow(x, awl_permute(x, (int[]){-1, 0, -2}), permute_map, "permute-"));
            y = awl_transpose(x, 0, -1);
            ck_assert_ptr_eq(y->storage, x->storage);
            ck_assert(values_follow(x, y, transpose_map, "transpose"));
            y = awl_slice(x, 2, -3, 4, 2);
            ck_assert(awl_gc_has_shape(y, AWL_SHAPE(2, 3, 2)));
            ck_assert_ptr_eq(y->storage, x->storage);
            ck_assert(values_follow(x, y, slice_map, "slice"));
            y = awl_reshape(x, AWL_SHAPE(4, -1));
            ck_assert(awl_gc_has_shape(y, AWL_SHAPE(4, 6)));
            ck_assert(values_follow(x, y, identity_map, "reshape"));
            /* a contiguous input reshapes as a view; others may copy */
            if (layout == 0) ck_assert_ptr_eq(y->storage, x->storage);
            y = awl_flatten(x, 1, 2);
            ck_assert(awl_gc_has_shape(y, AWL_SHAPE(2, 12)));
            ck_assert(values_follow(x, y, identity_map, "flatten"));
            ck_assert(awl_gc_has_shape(awl_flatten(x, 0, -1), AWL_SHAPE(24)));
            y = awl_unsqueeze(x, -1);
            ck_assert(awl_gc_has_shape(y, AWL_SHAPE(2, 3, 4, 1)));
            ck_assert_ptr_eq(y->storage, x->storage);
            ck_assert(values_follow(x, y, identity_map, "unsqueeze"));
            y = awl_squeeze(awl_unsqueeze(x, 1), 1);
            ck_assert(awl_gc_has_shape(y, AWL_SHAPE(2, 3, 4)));
            ck_assert(values_follow(x, y, identity_map, "squeeze"));
            y = awl_contiguous(x);
            ck_assert(awl_is_contiguous(y));
            ck_assert(values_follow(x, y, identity_map, "contiguous"));
            y = awl_clone(x);
            ck_assert_ptr_ne(y->storage, x->storage);
            ck_assert(values_follow(x, y, identity_map, "clone"));
        }
    for (int t = 0; t < 3; t++) {
        awl_tensor *x = awl_gc_layout(2, AWL_SHAPE(3, 1), types[t]);
        awl_tensor *y = awl_expand(x, AWL_SHAPE(2, 3, 4));
        ck_assert(awl_gc_has_shape(y, AWL_SHAPE(2, 3, 4)));
        ck_assert_ptr_eq(y->storage, x->storage);
        ck_assert_int_eq(y->strides[0], 0);
        ck_assert(values_follow(x, y, expand_map, "expand"));
        ck_assert(awl_gc_has_shape(awl_expand(x, AWL_SHAPE(-1, 5)), AWL_SHAPE(3, 5)));
    }
    ck_assert(awl_gc_end());
}
END_TEST

/* ---- gradients of the views ------------------------------------------------------------ */

static awl_tensor *g_permute(awl_tensor *const *in, void *u)
{
    (void)u;
    return awl_permute(in[0], (int[]){2, 0, 1});
}
static awl_tensor *g_transpose(awl_tensor *const *in, void *u)
{
    (void)u;
    return awl_transpose(in[0], -1, 0);
}
static awl_tensor *g_reshape(awl_tensor *const *in, void *u)
{
    (void)u;
    return awl_reshape(in[0], AWL_SHAPE(3, -1, 2));
}
static awl_tensor *g_flatten(awl_tensor *const *in, void *u)
{
    (void)u;
    return awl_flatten(in[0], 0, 1);
}
static awl_tensor *g_slice(awl_tensor *const *in, void *u)
{
    (void)u;
    return awl_slice(awl_slice(in[0], 2, -3, 4, 2), 0, 1, 2, 1);
}
static awl_tensor *g_squeeze(awl_tensor *const *in, void *u)
{
    (void)u;
    return awl_mul(awl_squeeze(awl_unsqueeze(in[0], -2), 2), awl_unsqueeze(in[0], 0));
}
static awl_tensor *g_expand(awl_tensor *const *in, void *u)
{
    (void)u;
    return awl_mul(awl_expand(awl_slice(in[0], 2, 0, 1, 1), AWL_SHAPE(2, 2, 3, 4)), in[0]);
}
static awl_tensor *g_contiguous(awl_tensor *const *in, void *u)
{
    (void)u;
    return awl_mul(awl_contiguous(in[0]), awl_clone(in[0]));
}

typedef struct view_case {
    const char *name;
    awl_gc_fn fn;
} view_case;

static const view_case view_cases[] = {
    {"permute", g_permute}, {"transpose", g_transpose},
    {"reshape", g_reshape}, {"flatten", g_flatten},
    {"slice", g_slice},     {"squeeze/unsqueeze", g_squeeze},
    {"expand", g_expand},   {"contiguous/clone", g_contiguous},
};

START_TEST(test_view_gradcheck)
{
    awl_gc_begin(41);
    for (int c = 0; c < (int)(sizeof view_cases / sizeof view_cases[0]); c++)
        for (int layout = 0; layout < AWL_GC_LAYOUTS; layout++) {
            awl_tensor *x = awl_gc_layout(layout, AWL_SHAPE(2, 3, 4), AWL_F64);
            ck_assert_msg(awl_gradcheck(view_cases[c].fn, NULL, 1, &x, view_cases[c].name), "%s %s",
                          view_cases[c].name, awl_gc_layout_name(layout));
        }
    ck_assert(awl_gc_end());
}
END_TEST

/* ---- concat, stack, split ---------------------------------------------------------------- */

START_TEST(test_concat_stack_values)
{
    awl_gc_begin(42);
    for (int t = 0; t < 3; t++) {
        awl_tensor *parts[3] = {awl_gc_layout(1, AWL_SHAPE(2, 1, 3), types[t]),
                                awl_gc_layout(2, AWL_SHAPE(2, 2, 3), types[t]),
                                awl_gc_layout(3, AWL_SHAPE(2, 3, 3), types[t])};
        awl_tensor *y = awl_concat(3, parts, -2);
        ck_assert(awl_gc_has_shape(y, AWL_SHAPE(2, 6, 3)));
        double *yv = awl_gc_values(y), want[36];
        for (int p = 0, row0 = 0; p < 3; row0 += (int)parts[p]->shape[1], p++) {
            double *pv = awl_gc_values(parts[p]);
            int rows = (int)parts[p]->shape[1];
            for (int a = 0; a < 2; a++)
                for (int r = 0; r < rows; r++)
                    for (int c = 0; c < 3; c++)
                        want[(a * 6 + row0 + r) * 3 + c] = pv[(a * rows + r) * 3 + c];
            free(pv);
        }
        ck_assert(awl_gc_allclose(yv, want, 36, 0, 0, "concat"));
        free(yv);

        awl_tensor *same[2] = {awl_gc_layout(1, AWL_SHAPE(2, 3), types[t]),
                               awl_gc_layout(2, AWL_SHAPE(2, 3), types[t])};
        for (int dim = 0; dim <= 2; dim++) {
            y = awl_stack(2, same, dim == 2 ? -1 : dim);
            int64_t shape[3]; /* (2,3) with the stacked axis of 2 inserted at dim */
            for (int d = 0, s = 0; d < 3; d++) shape[d] = d == dim ? 2 : same[0]->shape[s++];
            ck_assert_msg(awl_gc_has_shape(y, 3, shape), "stack dim %d", dim);
            double *s0 = awl_gc_values(same[0]), *s1 = awl_gc_values(same[1]);
            double *sv = awl_gc_values(y), w[12];
            for (int i = 0; i < 2; i++)
                for (int j = 0; j < 3; j++) {
                    int a[3] = {i, j, 0}; /* insert the stacked index at dim */
                    for (int k = 0; k < 2; k++) {
                        int64_t idx[3];
                        for (int d = 0, s = 0; d < 3; d++) idx[d] = d == dim ? k : a[s++];
                        w[(idx[0] * shape[1] + idx[1]) * shape[2] + idx[2]] =
                            (k ? s1 : s0)[i * 3 + j];
                    }
                }
            ck_assert(awl_gc_allclose(sv, w, 12, 0, 0, "stack"));
            free(s0);
            free(s1);
            free(sv);
        }
    }
    ck_assert(awl_gc_end());
}
END_TEST

START_TEST(test_split_views)
{
    awl_gc_begin(43);
    awl_tensor *x = awl_gc_permuted(AWL_SHAPE(7, 3));
    awl_tensor *pieces[4];
    ck_assert_int_eq(awl_split(x, 3, 0, pieces, 4), 3);
    ck_assert(awl_gc_has_shape(pieces[0], AWL_SHAPE(3, 3)));
    ck_assert(awl_gc_has_shape(pieces[2], AWL_SHAPE(1, 3)));
    double *xv = awl_gc_values(x);
    for (int p = 0; p < 3; p++) {
        ck_assert_ptr_eq(pieces[p]->storage, x->storage);
        double *pv = awl_gc_values(pieces[p]);
        ck_assert(awl_gc_allclose(pv, xv + 9 * p, awl_numel(pieces[p]), 0, 0, "split"));
        free(pv);
    }
    free(xv);
    ck_assert_int_eq(awl_split(x, 2, -1, pieces, 4), 2);
    ck_assert(awl_gc_has_shape(pieces[1], AWL_SHAPE(7, 1)));
    ck_assert_int_lt(awl_split(x, 1, 0, pieces, 4), 0); /* 7 pieces, room for 4 */
    ck_assert_int_lt(awl_split(x, 0, 0, pieces, 4), 0);
    ck_assert(awl_gc_end());
}
END_TEST

static awl_tensor *g_concat(awl_tensor *const *in, void *u)
{
    (void)u;
    return awl_concat(3, (awl_tensor *[]){in[0], awl_mul_scalar(in[1], 2), in[2]}, 1);
}

static awl_tensor *g_stack(awl_tensor *const *in, void *u)
{
    int dim = *(int *)u;
    return awl_stack(2, (awl_tensor *[]){awl_tanh(in[0]), in[1]}, dim);
}

/* Pieces reassembled in another order, each scaled differently. */
static awl_tensor *g_split(awl_tensor *const *in, void *u)
{
    (void)u;
    awl_tensor *p[3];
    if (awl_split(in[0], 2, 1, p, 3) != 3) return NULL;
    return awl_concat(3, (awl_tensor *[]){p[2], awl_mul_scalar(p[0], 3), awl_exp(p[1])}, 1);
}

START_TEST(test_join_gradcheck)
{
    awl_gc_begin(44);
    awl_tensor *in[3] = {awl_gc_permuted(AWL_SHAPE(3, 2)), awl_gc_sliced(AWL_SHAPE(3, 1)),
                         awl_gc_expanded(AWL_SHAPE(3, 3), 0)};
    ck_assert(awl_gradcheck(g_concat, NULL, 3, in, "concat"));
    for (int dim = -1; dim < 3; dim++) {
        awl_tensor *two[2] = {awl_gc_permuted(AWL_SHAPE(3, 2)),
                              awl_gc_expanded(AWL_SHAPE(3, 2), 0)};
        ck_assert_msg(awl_gradcheck(g_stack, &dim, 2, two, "stack"), "stack dim %d", dim);
    }
    awl_tensor *x = awl_gc_sliced(AWL_SHAPE(2, 5));
    ck_assert(awl_gradcheck(g_split, NULL, 1, &x, "split"));
    ck_assert(awl_gc_end());
}
END_TEST

int main(void)
{
    return AWL_GC_RUN_SUITE("ops_shape", test_view_values, test_view_gradcheck,
                            test_concat_stack_values, test_split_views, test_join_gradcheck);
}
