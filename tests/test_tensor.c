/*
 * tests/test_tensor.c - the tensor layer: creation, views, scopes, memory
 * statistics, random numbers, printing and the raw compute dispatch.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "awl.h"

static void setup(void) { awl_clear_error(); }

static void expect_values(awl_tensor *t, const double *want, int64_t n)
{
    ck_assert_int_eq(awl_numel(t), n);
    double got[64];
    awl_scope_begin();
    ck_assert_int_eq(awl_to_host(awl_tensor_cast(t, AWL_F64), got, sizeof got), 0);
    awl_scope_end();
    for (int64_t i = 0; i < n; i++) ck_assert_double_eq_tol(got[i], want[i], 1e-6);
}

/* ---- creation ------------------------------------------------------------------ */

START_TEST(test_creation)
{
    awl_scope_begin();
    awl_tensor *z = awl_zeros(AWL_SHAPE(2, 3), AWL_F32, "cpu");
    ck_assert_int_eq(z->ndim, 2);
    ck_assert_int_eq(z->shape[0], 2);
    ck_assert_int_eq(z->strides[0], 3);
    ck_assert_int_eq(z->strides[1], 1);
    expect_values(z, (double[]){0, 0, 0, 0, 0, 0}, 6);
    expect_values(awl_ones(AWL_SHAPE(3), AWL_F64, NULL), (double[]){1, 1, 1}, 3);
    expect_values(awl_full(AWL_SHAPE(2), 2.5, AWL_F32, "cpu"), (double[]){2.5, 2.5}, 2);
    expect_values(awl_arange(0, 5, 2, AWL_I32, "cpu"), (double[]){0, 2, 4}, 3);
    expect_values(awl_arange(3, 0, -1, AWL_F32, "cpu"), (double[]){3, 2, 1}, 3);
    float data[4] = {1, 2, 3, 4};
    awl_tensor *d = awl_from_data(data, AWL_SHAPE(2, 2), AWL_F32, "cpu");
    float back[4];
    ck_assert_int_eq(awl_to_host(d, back, sizeof back), 0);
    ck_assert_mem_eq(back, data, sizeof data);
    ck_assert_int_lt(awl_to_host(d, back, 8), 0); /* buffer too small */
    awl_tensor *s = awl_full(0, NULL, 7.0, AWL_F64, "cpu");
    ck_assert_int_eq(s->ndim, 0);
    ck_assert_double_eq(awl_item(s), 7.0);
    ck_assert(isnan(awl_item(d)));
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "awl_item"));
    awl_scope_end();
}
END_TEST

START_TEST(test_creation_errors)
{
    awl_scope_begin();
    ck_assert_ptr_null(awl_zeros(AWL_SHAPE(2, -1), AWL_F32, "cpu"));
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "invalid shape (2,-1)"));
    ck_assert_ptr_null(awl_zeros(AWL_SHAPE(2), AWL_F32, "tpu"));
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "unknown device 'tpu'"));
    ck_assert(!awl_device_available("tpu"));
    ck_assert(awl_device_available("cpu"));
    ck_assert_ptr_null(awl_zeros(AWL_SHAPE(2), AWL_F32, "cuda:99"));
    ck_assert_ptr_null(awl_zeros(9, (int64_t[]){1, 1, 1, 1, 1, 1, 1, 1, 1}, AWL_F32, "cpu"));
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "9 dimensions"));
    ck_assert_ptr_null(awl_arange(0, 1, 0, AWL_F32, "cpu"));
    ck_assert_ptr_null(awl_rand(AWL_SHAPE(2), AWL_I32, "cpu"));
    awl_scope_end();
}
END_TEST

/* ---- views -------------------------------------------------------------------- */

START_TEST(test_views_share_storage)
{
    awl_scope_begin();
    awl_tensor *x = awl_arange(0, 24, 1, AWL_F32, "cpu");
    awl_tensor *r = awl_tensor_reshape(x, AWL_SHAPE(2, 3, 4));
    ck_assert_ptr_eq(r->storage, x->storage);
    awl_tensor *p = awl_tensor_permute(r, (int[]){2, 0, 1});
    ck_assert_ptr_eq(p->storage, x->storage);
    ck_assert_int_eq(p->shape[0], 4);
    ck_assert_int_eq(p->strides[0], 1);
    ck_assert(!awl_is_contiguous(p));
    /* p[i][j][k] = r[j][k][i] = 12 j + 4 k + i */
    awl_tensor *c = awl_tensor_contiguous(p);
    ck_assert(awl_is_contiguous(c));
    float v[24];
    awl_to_host(c, v, sizeof v);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 2; j++)
            for (int k = 0; k < 3; k++)
                ck_assert_float_eq(v[i * 6 + j * 3 + k], 12 * j + 4 * k + i);
    /* slice with a step, negative bounds */
    awl_tensor *s = awl_tensor_slice(r, 2, 1, -1, 1); /* (2,3,2): elements 1,2 of each row */
    ck_assert_ptr_eq(s->storage, x->storage);
    ck_assert_int_eq(s->shape[2], 2);
    ck_assert_int_eq(s->offset, 1);
    awl_tensor *s2 = awl_tensor_slice(x, 0, 0, 24, 5);
    expect_values(s2, (double[]){0, 5, 10, 15, 20}, 5);
    awl_tensor *t = awl_tensor_transpose(r, 0, -1);
    ck_assert_int_eq(t->shape[0], 4);
    ck_assert_int_eq(t->shape[2], 2);
    awl_tensor *u = awl_tensor_unsqueeze(x, 0);
    ck_assert_int_eq(u->ndim, 2);
    ck_assert_int_eq(u->shape[0], 1);
    awl_tensor *q = awl_tensor_squeeze(u, 0);
    ck_assert_int_eq(q->ndim, 1);
    awl_tensor *col = awl_tensor_reshape(awl_arange(0, 3, 1, AWL_F32, "cpu"), AWL_SHAPE(3, 1));
    awl_tensor *e = awl_tensor_expand(col, AWL_SHAPE(2, 3, 4));
    ck_assert_int_eq(e->strides[0], 0);
    ck_assert_int_eq(e->strides[2], 0);
    awl_tensor *ec = awl_tensor_contiguous(e);
    float ev[24];
    awl_to_host(ec, ev, sizeof ev);
    for (int i = 0; i < 24; i++) ck_assert_float_eq(ev[i], (i / 4) % 3);
    awl_scope_end();
}
END_TEST

START_TEST(test_reshape_view_or_copy)
{
    awl_scope_begin();
    awl_tensor *x = awl_arange(0, 12, 1, AWL_F32, "cpu");
    awl_tensor *m = awl_tensor_reshape(x, AWL_SHAPE(3, -1));
    ck_assert_int_eq(m->shape[1], 4);
    /* a transposed matrix cannot be flattened in place: reshape copies */
    awl_tensor *t = awl_tensor_transpose(m, 0, 1);
    awl_tensor *flat = awl_tensor_reshape(t, AWL_SHAPE(12));
    ck_assert_ptr_ne(flat->storage, x->storage);
    expect_values(flat, (double[]){0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}, 12);
    /* splitting an axis of a transposed view is still a view */
    awl_tensor *split = awl_tensor_reshape(t, AWL_SHAPE(2, 2, 3));
    ck_assert_ptr_eq(split->storage, x->storage);
    awl_tensor *sc = awl_tensor_contiguous(split);
    expect_values(sc, (double[]){0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}, 12);
    /* merging the leading axes of a (B, T, C) slice along C stays a view */
    awl_tensor *btc = awl_tensor_reshape(awl_arange(0, 24, 1, AWL_F32, "cpu"), AWL_SHAPE(2, 3, 4));
    awl_tensor *half = awl_tensor_slice(btc, 2, 0, 2, 1);
    awl_tensor *merged = awl_tensor_reshape(half, AWL_SHAPE(6, 2));
    ck_assert_ptr_eq(merged->storage, btc->storage);
    ck_assert_ptr_null(awl_tensor_reshape(x, AWL_SHAPE(5, -1)));
    ck_assert_str_eq(awl_last_error(), "awl_reshape: cannot reshape (12) (12 elements) to (5,-1)");
    ck_assert_ptr_null(awl_tensor_reshape(x, AWL_SHAPE(-1, -1)));
    awl_scope_end();
}
END_TEST

START_TEST(test_view_errors)
{
    awl_scope_begin();
    awl_tensor *x = awl_zeros(AWL_SHAPE(2, 3), AWL_F32, "cpu");
    ck_assert_ptr_null(awl_tensor_permute(x, (int[]){0, 0}));
    ck_assert_str_eq(awl_last_error(),
                     "awl_permute: (0,0) is not a permutation of the axes of (2,3)");
    ck_assert_ptr_null(awl_tensor_slice(x, 1, 0, 4, 1));
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "out of bounds for dim 1 of size 3"));
    ck_assert_ptr_null(awl_tensor_slice(x, 2, 0, 1, 1));
    ck_assert_ptr_null(awl_tensor_slice(x, 0, 0, 1, 0));
    ck_assert_ptr_null(awl_tensor_squeeze(x, 0));
    ck_assert_ptr_null(awl_tensor_expand(x, AWL_SHAPE(2, 4)));
    ck_assert_str_eq(awl_last_error(), "awl_expand: cannot expand (2,3) to (2,4)");
    awl_tensor *empty = awl_tensor_slice(x, 1, 2, 1, 1);
    ck_assert_int_eq(empty->shape[1], 0);
    awl_scope_end();
}
END_TEST

/* ---- scopes and memory ------------------------------------------------------------ */

static awl_memory_stats cpu_stats(void)
{
    awl_memory_stats s;
    ck_assert_int_eq(awl_memory_get_stats("cpu", &s), 0);
    return s;
}

START_TEST(test_scopes_free_temporaries)
{
    awl_memory_stats before = cpu_stats();
    awl_tensor *kept;
    awl_scope_begin();
    awl_tensor *a = awl_ones(AWL_SHAPE(1000), AWL_F32, "cpu");
    awl_scope_begin();
    awl_tensor *b = awl_tensor_binary(AWL_BINARY_ADD, a, a);
    awl_tensor *c = awl_keep(awl_tensor_binary(AWL_BINARY_MUL, b, b)); /* to the outer scope */
    ck_assert_int_eq(cpu_stats().live, before.live + 3);
    awl_scope_end(); /* b dies */
    ck_assert_int_eq(cpu_stats().live, before.live + 2);
    kept = awl_keep(c); /* to the caller */
    awl_scope_end();    /* a dies, c survives */
    ck_assert_int_eq(cpu_stats().live, before.live + 1);
    awl_tensor *first = awl_tensor_slice(kept, 0, 0, 1, 1); /* no scope: the caller owns it */
    ck_assert_double_eq(awl_item(first), 4.0);
    awl_release(first);
    awl_release(kept);
    ck_assert_int_eq(cpu_stats().live, before.live);
}
END_TEST

START_TEST(test_keep_and_retain)
{
    awl_memory_stats before = cpu_stats();
    awl_tensor *param = awl_zeros(AWL_SHAPE(10), AWL_F32, "cpu"); /* outside scopes: ours */
    awl_scope_begin();
    awl_tensor *same = awl_keep(param); /* not owned by the scope: a new reference */
    ck_assert_ptr_eq(same, param);
    ck_assert_int_eq(param->refcount, 2);
    awl_scope_end();
    awl_release(same);
    ck_assert_int_eq(param->refcount, 1);
    awl_retain(param);
    awl_release(param);
    awl_release(param);
    ck_assert_int_eq(cpu_stats().live, before.live);
    ck_assert_int_eq(cpu_stats().in_use, before.in_use);
}
END_TEST

START_TEST(test_memory_stats)
{
    awl_memory_reset_peak("cpu");
    awl_memory_stats s0 = cpu_stats();
    awl_scope_begin();
    awl_zeros(AWL_SHAPE(256), AWL_F64, "cpu");
    awl_memory_stats s1 = cpu_stats();
    ck_assert_int_eq(s1.in_use - s0.in_use, 256 * 8);
    ck_assert_int_eq(s1.allocations - s0.allocations, 1);
    ck_assert_int_ge(s1.peak, s1.in_use);
    awl_scope_end();
    awl_memory_stats s2 = cpu_stats();
    ck_assert_int_eq(s2.in_use, s0.in_use);
    ck_assert_int_eq(s2.peak, s1.in_use);
    awl_memory_reset_peak("cpu");
    ck_assert_int_eq(cpu_stats().peak, s0.in_use);

    /* a large storage's block stays reserved (cached) after it dies, and the
     * next one of its size reuses it without reserving more */
    awl_scope_begin();
    awl_zeros(AWL_SHAPE(1 << 20), AWL_F32, "cpu");
    awl_scope_end();
    awl_memory_stats s3 = cpu_stats();
    ck_assert_int_eq(s3.in_use, s0.in_use);
    ck_assert_int_ge(s3.reserved, s3.in_use + (4 << 20));
    awl_scope_begin();
    awl_zeros(AWL_SHAPE(1 << 20), AWL_F32, "cpu");
    ck_assert_int_eq(cpu_stats().reserved, s3.reserved);
    awl_scope_end();
}
END_TEST

/* ---- random numbers --------------------------------------------------------------- */

START_TEST(test_rng_determinism)
{
    awl_scope_begin();
    awl_manual_seed(42);
    awl_tensor *a = awl_randn(AWL_SHAPE(1001), AWL_F32, "cpu");
    awl_tensor *u = awl_rand(AWL_SHAPE(7), AWL_F64, "cpu");
    awl_manual_seed(42);
    awl_tensor *b = awl_randn(AWL_SHAPE(1001), AWL_F32, "cpu");
    float va[1001], vb[1001];
    awl_to_host(a, va, sizeof va);
    awl_to_host(b, vb, sizeof vb);
    ck_assert_mem_eq(va, vb, sizeof va);
    /* the stream is a function of (seed, offset): replaying the state replays it */
    uint64_t seed, offset;
    awl_rng_get_state(&seed, &offset);
    ck_assert_int_eq(seed, 42);
    ck_assert_int_eq(offset, 251); /* ceil(1001 / 4) blocks */
    awl_tensor *u2 = awl_rand(AWL_SHAPE(7), AWL_F32, "cpu");
    awl_rng_set_state(42, 251);
    awl_tensor *u3 = awl_rand(AWL_SHAPE(7), AWL_F32, "cpu");
    float f2[7], f3[7];
    double d1[7];
    awl_to_host(u2, f2, sizeof f2);
    awl_to_host(u3, f3, sizeof f3);
    ck_assert_mem_eq(f2, f3, sizeof f2);
    awl_to_host(u, d1, sizeof d1); /* float64 draws equal the float32 ones exactly */
    for (int i = 0; i < 7; i++) ck_assert(d1[i] == (double)f2[i]);
    /* moments of 100k normals */
    awl_tensor *n = awl_randn(AWL_SHAPE(100000), AWL_F64, "cpu");
    double mean = awl_item(awl_tensor_reduce(AWL_REDUCE_MEAN, n, 0, NULL, false));
    awl_tensor *sq = awl_tensor_binary(AWL_BINARY_MUL, n, n);
    double var = awl_item(awl_tensor_reduce(AWL_REDUCE_MEAN, sq, 0, NULL, false));
    ck_assert_double_le(fabs(mean), 0.01);
    ck_assert_double_le(fabs(var - 1.0), 0.02);
    awl_tensor *r = awl_rand(AWL_SHAPE(10000), AWL_F32, "cpu");
    ck_assert_double_ge(awl_item(awl_tensor_reduce(AWL_REDUCE_MIN, r, 0, NULL, false)), 0.0);
    ck_assert_double_lt(awl_item(awl_tensor_reduce(AWL_REDUCE_MAX, r, 0, NULL, false)), 1.0);
    awl_scope_end();
}
END_TEST

/* ---- printing ---------------------------------------------------------------------- */

START_TEST(test_repr)
{
    awl_scope_begin();
    char buf[512];
    awl_tensor *m = awl_from_data((float[]){1.5f, -2, 3, 4}, AWL_SHAPE(2, 2), AWL_F32, "cpu");
    awl_repr(m, buf, sizeof buf);
    ck_assert_str_eq(buf, "tensor([[ 1.5000, -2.0000],\n        [ 3.0000,  4.0000]])");
    awl_repr(awl_arange(1, 4, 1, AWL_F32, "cpu"), buf, sizeof buf);
    ck_assert_str_eq(buf, "tensor([1., 2., 3.])");
    awl_repr(awl_arange(1, 4, 1, AWL_I32, "cpu"), buf, sizeof buf);
    ck_assert_str_eq(buf, "tensor([1, 2, 3], dtype=int32)");
    awl_repr(awl_full(0, NULL, 0.25, AWL_F64, "cpu"), buf, sizeof buf);
    ck_assert_str_eq(buf, "tensor(0.2500, dtype=float64)");
    awl_tensor *w = awl_requires_grad_(awl_zeros(AWL_SHAPE(2), AWL_F32, "cpu"), true);
    awl_repr(w, buf, sizeof buf);
    ck_assert_str_eq(buf, "tensor([0., 0.], requires_grad=True)");
    awl_repr(awl_arange(0, 2000, 1, AWL_F32, "cpu"), buf, sizeof buf);
    ck_assert_str_eq(buf, "tensor([   0.,    1.,    2., ..., 1997., 1998., 1999.])");
    ck_assert_int_gt(awl_repr(m, buf, 4), 4); /* truncated, returns the full length */
    ck_assert_int_eq(strlen(buf), 3);
    awl_scope_end();
}
END_TEST

/* ---- raw compute ----------------------------------------------------------------------- */

START_TEST(test_broadcast_compute)
{
    awl_scope_begin();
    awl_tensor *col = awl_reshape(awl_arange(0, 3, 1, AWL_F32, "cpu"), AWL_SHAPE(3, 1));
    awl_tensor *row = awl_arange(0, 4, 1, AWL_F32, "cpu");
    awl_tensor *sum = awl_tensor_binary(AWL_BINARY_ADD, col, row);
    ck_assert_int_eq(sum->shape[0], 3);
    ck_assert_int_eq(sum->shape[1], 4);
    expect_values(sum, (double[]){0, 1, 2, 3, 1, 2, 3, 4, 2, 3, 4, 5}, 12);
    awl_tensor *bad = awl_zeros(AWL_SHAPE(2, 3), AWL_F32, "cpu");
    ck_assert_ptr_null(
        awl_tensor_binary(AWL_BINARY_ADD, bad, awl_zeros(AWL_SHAPE(4, 3), AWL_F32, "cpu")));
    ck_assert_str_eq(awl_last_error(), "awl_add: shapes (2,3) and (4,3) cannot be broadcast");
    ck_assert_ptr_null(
        awl_tensor_binary(AWL_BINARY_MUL, bad, awl_zeros(AWL_SHAPE(2, 3), AWL_F64, "cpu")));
    ck_assert_str_eq(awl_last_error(), "awl_mul: dtypes differ: float32 and float64");
    ck_assert_ptr_null(awl_tensor_unary(AWL_UNARY_EXP, awl_zeros(AWL_SHAPE(2), AWL_I32, "cpu"), 0));
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "awl_exp: int32"));
    /* reductions */
    awl_tensor *x = awl_reshape(awl_arange(0, 6, 1, AWL_F64, "cpu"), AWL_SHAPE(2, 3));
    awl_tensor *s0 = awl_tensor_reduce(AWL_REDUCE_SUM, x, AWL_DIMS(0), false);
    ck_assert_int_eq(s0->ndim, 1);
    expect_values(s0, (double[]){3, 5, 7}, 3);
    awl_tensor *s1 = awl_tensor_reduce(AWL_REDUCE_MAX, x, AWL_DIMS(-1), true);
    ck_assert_int_eq(s1->ndim, 2);
    ck_assert_int_eq(s1->shape[1], 1);
    expect_values(s1, (double[]){2, 5}, 2);
    ck_assert_double_eq(awl_item(awl_tensor_reduce(AWL_REDUCE_MEAN, x, 0, NULL, false)), 2.5);
    ck_assert_ptr_null(awl_tensor_reduce(AWL_REDUCE_SUM, x, AWL_DIMS(0, 0), false));
    /* where */
    awl_tensor *cond = awl_from_data((int32_t[]){1, 0, 1}, AWL_SHAPE(3), AWL_I32, "cpu");
    awl_tensor *w = awl_tensor_where(cond, x, awl_full(0, NULL, -1, AWL_F64, "cpu"));
    expect_values(w, (double[]){0, -1, 2, 3, -1, 5}, 6);
    awl_scope_end();
}
END_TEST

START_TEST(test_matmul_shapes)
{
    awl_scope_begin();
    awl_tensor *a = awl_reshape(awl_arange(0, 6, 1, AWL_F64, "cpu"), AWL_SHAPE(2, 3));
    awl_tensor *b = awl_reshape(awl_arange(0, 12, 1, AWL_F64, "cpu"), AWL_SHAPE(3, 4));
    awl_tensor *c = awl_tensor_matmul(a, b);
    ck_assert_int_eq(c->shape[0], 2);
    ck_assert_int_eq(c->shape[1], 4);
    expect_values(c, (double[]){20, 23, 26, 29, 56, 68, 80, 92}, 8);
    /* vector promotion: (3) @ (3,4) -> (4); (2,3) @ (3) -> (2); (3) @ (3) -> () */
    awl_tensor *v = awl_arange(0, 3, 1, AWL_F64, "cpu");
    ck_assert_int_eq(awl_tensor_matmul(v, b)->ndim, 1);
    expect_values(awl_tensor_matmul(a, v), (double[]){5, 14}, 2);
    ck_assert_int_eq(awl_tensor_matmul(v, v)->ndim, 0);
    /* a transposed view is read in place */
    awl_tensor *at = awl_tensor_transpose(
        awl_reshape(awl_arange(0, 6, 1, AWL_F64, "cpu"), AWL_SHAPE(3, 2)), 0, 1);
    expect_values(awl_tensor_matmul(at, b), (double[]){40, 46, 52, 58, 52, 61, 70, 79}, 8);
    /* batch broadcasting: (5,1,2,3) @ (4,3,4) -> (5,4,2,4) */
    awl_tensor *ba = awl_randn(AWL_SHAPE(5, 1, 2, 3), AWL_F64, "cpu");
    awl_tensor *bb = awl_randn(AWL_SHAPE(4, 3, 4), AWL_F64, "cpu");
    awl_tensor *bc = awl_tensor_matmul(ba, bb);
    ck_assert_int_eq(bc->ndim, 4);
    ck_assert_int_eq(bc->shape[0], 5);
    ck_assert_int_eq(bc->shape[1], 4);
    ck_assert_ptr_null(awl_tensor_matmul(awl_zeros(AWL_SHAPE(4, 3), AWL_F32, "cpu"),
                                         awl_zeros(AWL_SHAPE(5, 2), AWL_F32, "cpu")));
    ck_assert_str_eq(awl_last_error(), "awl_matmul: inner dimensions differ: (4,3) @ (5,2)");
    awl_scope_end();
}
END_TEST

START_TEST(test_concat_and_indexing)
{
    awl_scope_begin();
    awl_tensor *a = awl_reshape(awl_arange(0, 4, 1, AWL_F32, "cpu"), AWL_SHAPE(2, 2));
    awl_tensor *b = awl_reshape(awl_arange(4, 6, 1, AWL_F32, "cpu"), AWL_SHAPE(2, 1));
    awl_tensor *c = awl_tensor_concat(2, (awl_tensor *[]){a, b}, 1);
    expect_values(c, (double[]){0, 1, 4, 2, 3, 5}, 6);
    ck_assert_ptr_null(awl_tensor_concat(2, (awl_tensor *[]){a, b}, 0));
    awl_tensor *table = awl_reshape(awl_arange(0, 6, 1, AWL_F32, "cpu"), AWL_SHAPE(3, 2));
    awl_tensor *idx = awl_from_data((int32_t[]){2, 0, 2}, AWL_SHAPE(3), AWL_I32, "cpu");
    expect_values(awl_tensor_index_select(table, idx), (double[]){4, 5, 0, 1, 4, 5}, 6);
    awl_tensor *bad = awl_from_data((int32_t[]){3}, AWL_SHAPE(1), AWL_I32, "cpu");
    ck_assert_ptr_null(awl_tensor_index_select(table, bad));
    ck_assert_str_eq(awl_last_error(), "awl_embedding: index 3 out of range for 3 rows");
    awl_tensor *g = awl_tensor_gather(
        table, 1, awl_from_data((int32_t[]){1, 0, 1}, AWL_SHAPE(3, 1), AWL_I32, "cpu"));
    expect_values(g, (double[]){1, 2, 5}, 3);
    awl_tensor *acc = awl_zeros(AWL_SHAPE(3, 2), AWL_F32, "cpu");
    ck_assert_int_eq(awl_tensor_index_add_(acc, idx, awl_ones(AWL_SHAPE(3, 2), AWL_F32, "cpu")), 0);
    expect_values(acc, (double[]){1, 1, 0, 0, 2, 2}, 6);
    awl_scope_end();
}
END_TEST

START_TEST(test_in_place_and_cast)
{
    awl_scope_begin();
    awl_tensor *x = awl_zeros(AWL_SHAPE(2, 3), AWL_F32, "cpu");
    ck_assert_int_eq(awl_tensor_copy_(x, awl_arange(0, 3, 1, AWL_F64, "cpu")),
                     0); /* broadcast + cast */
    expect_values(x, (double[]){0, 1, 2, 0, 1, 2}, 6);
    ck_assert_int_eq(awl_tensor_unary_out(AWL_UNARY_MUL_SCALAR, x, x, 2.0), 0);
    expect_values(x, (double[]){0, 2, 4, 0, 2, 4}, 6);
    ck_assert_int_eq(
        awl_tensor_binary_out(AWL_BINARY_ADD, x, x, awl_ones(AWL_SHAPE(2, 1), AWL_F32, "cpu")), 0);
    expect_values(x, (double[]){1, 3, 5, 1, 3, 5}, 6);
    ck_assert_int_lt(awl_tensor_copy_(x, awl_zeros(AWL_SHAPE(3, 3), AWL_F32, "cpu")), 0);
    awl_tensor *i = awl_tensor_cast(awl_full(AWL_SHAPE(2), 2.7, AWL_F32, "cpu"), AWL_I32);
    ck_assert_int_eq(i->dtype, AWL_I32);
    expect_values(i, (double[]){2, 2}, 2);
    awl_tensor *h = awl_tensor_cast(awl_full(AWL_SHAPE(1), 1.0 / 3, AWL_F32, "cpu"), AWL_BF16);
    ck_assert_double_eq_tol(awl_item(h), 1.0 / 3, 2e-3);
    awl_scope_end();
}
END_TEST

static Suite *tensor_suite(void)
{
    Suite *s = suite_create("tensor");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, test_creation);
    tcase_add_test(tc, test_creation_errors);
    tcase_add_test(tc, test_views_share_storage);
    tcase_add_test(tc, test_reshape_view_or_copy);
    tcase_add_test(tc, test_view_errors);
    tcase_add_test(tc, test_scopes_free_temporaries);
    tcase_add_test(tc, test_keep_and_retain);
    tcase_add_test(tc, test_memory_stats);
    tcase_add_test(tc, test_rng_determinism);
    tcase_add_test(tc, test_repr);
    tcase_add_test(tc, test_broadcast_compute);
    tcase_add_test(tc, test_matmul_shapes);
    tcase_add_test(tc, test_concat_and_indexing);
    tcase_add_test(tc, test_in_place_and_cast);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(tensor_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
