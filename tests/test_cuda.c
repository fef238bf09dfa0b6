/*
 * tests/test_cuda.c - the CUDA backend's primitives against the CPU backend:
 * device and memory, element-wise ops, reductions, matmul (TF32 mode, bias
 * epilogue), indexing and random numbers. tests/helpers/cuda_harness.h says
 * what every case checks; tests/test_cuda_fused.c has the fused kernels.
 *
 * Without a GPU (CI) the binary prints why it skipped and exits 0.
 */
#include "tests/helpers/cuda_harness.h"

#ifdef AWL_WITH_CUDA

/* ---- op adapters --------------------------------------------------------------------- */

static int fn_fill(const awl_backend *be, awl_view *const *v, const void *ctx)
{
    return be->fill(v[0], *(const double *)ctx);
}

static int fn_copy(const awl_backend *be, awl_view *const *v, const void *ctx)
{
    (void)ctx;
    return be->copy(v[0], v[1]);
}

typedef struct unary_ctx {
    awl_unary_op op;
    double alpha;
} unary_ctx;

static int fn_unary(const awl_backend *be, awl_view *const *v, const void *ctx)
{
    const unary_ctx *u = ctx;
    return be->unary(u->op, v[0], v[1], u->alpha);
}

static int fn_binary(const awl_backend *be, awl_view *const *v, const void *ctx)
{
    return be->binary(*(const awl_binary_op *)ctx, v[0], v[1], v[2]);
}

static int fn_where(const awl_backend *be, awl_view *const *v, const void *ctx)
{
    (void)ctx;
    return be->where(v[0], v[1], v[2], v[3]);
}

static int fn_reduce(const awl_backend *be, awl_view *const *v, const void *ctx)
{
    return be->reduce(*(const awl_reduce_op *)ctx, v[0], v[1]);
}

typedef struct matmul_ctx {
    bool accumulate, tf32;
} matmul_ctx;

static int fn_matmul(const awl_backend *be, awl_view *const *v, const void *ctx)
{
    const matmul_ctx *m = ctx;
    if (m->tf32 && be == cuda) be->set_matmul_fast_fp32(true);
    int rc = be->matmul(v[0], v[1], v[2], m->accumulate);
    if (m->tf32 && be == cuda) be->set_matmul_fast_fp32(false);
    return rc;
}

/* ---- device, memory and errors ------------------------------------------------------ */

START_TEST(test_device_and_memory)
{
    ck_assert_int_ge(cuda->device_count(), 1);
    ck_assert_str_eq(cuda->name, "cuda");
    void *p = cuda->alloc(0, 1000);
    ck_assert_ptr_nonnull(p);
    ck_assert_uint_ge(cuda->memory_reserved(0), 1000);
    cuda->free(0, p, 1000);
    void *q = cuda->alloc(0, 900); /* same 1024-byte class: the cached block */
    ck_assert_ptr_eq(p, q);
    cuda->free(0, q, 900);
    void *z = cuda->alloc(0, 0);
    ck_assert_ptr_nonnull(z);
    cuda->free(0, z, 0);
    cuda->empty_cache(0);
    ck_assert_uint_eq(cuda->memory_reserved(0), 0);

    awl_clear_error();
    ck_assert_ptr_null(cuda->alloc(0, (size_t)1 << 52));
    ck_assert_int_eq(awl_last_error_code(), AWL_ERR_OOM);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "cuda:0"));
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "4503599627370496"));
    /* The device is still usable after an out-of-memory. */
    p = cuda->alloc(0, 4096);
    ck_assert_ptr_nonnull(p);
    cuda->free(0, p, 4096);

    awl_clear_error();
    ck_assert_ptr_null(cuda->alloc(cuda->device_count() + 3, 16));
    ck_assert_int_eq(awl_last_error_code(), AWL_ERR_DEVICE);
}
END_TEST

/* int32 has no matmul, exp or division (as on the CPU backend): refused
 * with a message naming the op, not computed with a silent rounding. */
START_TEST(test_refusals)
{
    awl_view v[3];
    awl_view *vp[3] = {&v[0], &v[1], &v[2]};
    operand o = OPND(OUT, AWL_I32, 2, 2);
    void *d = cuda->alloc(0, 64);
    for (int i = 0; i < 3; i++) v[i] = view_on(&o, d, AWL_I32);
    matmul_ctx m = {false, false};
    awl_clear_error();
    ck_assert_int_eq(fn_matmul(cuda, vp, &m), AWL_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "int32"));
    awl_clear_error();
    ck_assert_int_eq(cuda->unary(AWL_UNARY_EXP, &v[0], &v[1], 0), AWL_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "exp"));
    awl_clear_error();
    ck_assert_int_eq(cuda->binary(AWL_BINARY_DIV, &v[0], &v[1], &v[2]), AWL_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "div"));
    cuda->free(0, d, 64);
}
END_TEST

/* ---- element-wise -------------------------------------------------------------------- */

START_TEST(test_fill)
{
    const awl_dtype all[] = {AWL_F32, AWL_F64, AWL_I32, AWL_BF16};
    double value = -3.25;
    for (int t = 0; t < 4; t++) {
        operand outs[] = {OPND(OUT, all[t], 100003), sliced(OPND(OUT, all[t], 37, 29), 1, 2),
                          transposed(OPND(OUT, all[t], 5, 7, 3), 0, 2)};
        for (int l = 0; l < 3; l++) {
            tcase c = {.n = 1, .op = {outs[l]}, .fn = fn_fill, .ctx = &value};
            snprintf(c.name, sizeof c.name, "fill %s layout %d", awl_dtype_name(all[t]), l);
            run_case(&c);
        }
    }
}
END_TEST

START_TEST(test_copy)
{
    const awl_dtype all[] = {AWL_F32, AWL_F64, AWL_I32, AWL_BF16};
    for (int to = 0; to < 4; to++)
        for (int from = 0; from < 4; from++) {
            operand out2 = OPND(OUT, all[to], 37, 129), in2 = OPND(IN, all[from], 37, 129);
            operand pairs[][2] = {
                {OPND(OUT, all[to], 100003), OPND(IN, all[from], 100003)},
                {out2, transposed(in2, 0, 1)},
                {out2, broadcast(in2, 0)},
                {sliced(out2, 1, 3), in2},
                {OPND(OUT, all[to], 4, 5, 6), transposed(OPND(IN, all[from], 4, 5, 6), 0, 2)},
            };
            for (int l = 0; l < 5; l++) {
                pairs[l][1] = ranged(pairs[l][1], -300, 300);
                tcase c = {.n = 2, .op = {pairs[l][0], pairs[l][1]}, .fn = fn_copy};
                snprintf(c.name, sizeof c.name, "copy %s <- %s layout %d", awl_dtype_name(all[to]),
                         awl_dtype_name(all[from]), l);
                run_case(&c);
            }
        }
}
END_TEST

static bool unary_positive(awl_unary_op op)
{
    return op == AWL_UNARY_LOG || op == AWL_UNARY_SQRT || op == AWL_UNARY_RSQRT ||
           op == AWL_UNARY_POW_SCALAR;
}

static bool unary_int_defined(awl_unary_op op)
{
    return awl_kernel_defined(AWL_KERNEL_UNARY, op, AWL_I32);
}

START_TEST(test_unary)
{
    const awl_dtype all[] = {AWL_F32, AWL_F64, AWL_BF16, AWL_I32};
    for (int t = 0; t < 4; t++)
        for (int op = 0; op < AWL_UNARY_OP_COUNT; op++) {
            if (all[t] == AWL_I32 && !unary_int_defined(op)) continue;
            unary_ctx u = {op, op == AWL_UNARY_POW_SCALAR ? 1.7 : -0.75};
            if (all[t] == AWL_I32) u.alpha = 3;
            operand out2 = OPND(OUT, all[t], 37, 129), in2 = OPND(IN, all[t], 37, 129);
            operand pairs[][2] = {
                {OPND(OUT, all[t], 100003), OPND(IN, all[t], 100003)},
                {out2, transposed(in2, 0, 1)},
                {sliced(out2, 0, 2), broadcast(in2, 1)},
                {OPND(OUT, all[t], 4, 5, 6), transposed(OPND(IN, all[t], 4, 5, 6), 0, 2)},
            };
            for (int l = 0; l < 4; l++) {
                operand in = pairs[l][1];
                if (all[t] == AWL_I32)
                    in = ints(in, -50, 50);
                else if (unary_positive(op))
                    in = ranged(in, 0.1, 4.0);
                else
                    in = ranged(in, -3.0, 3.0);
                tcase c = {
                    .n = 2, .op = {pairs[l][0], in}, .fn = fn_unary, .ctx = &u, .ref_f32 = true};
                /* exp/tanh/pow: libm and CUDA's math differ by an ulp or two */
                if (all[t] == AWL_F32) c.tol = 2e-6 * 10;
                snprintf(c.name, sizeof c.name, "unary %s %s layout %d", awl_unary_op_name(op),
                         awl_dtype_name(all[t]), l);
                run_case(&c);
            }
        }
}
END_TEST

START_TEST(test_binary)
{
    const awl_dtype all[] = {AWL_F32, AWL_F64, AWL_BF16, AWL_I32};
    for (int t = 0; t < 4; t++)
        for (int op = 0; op < AWL_BINARY_OP_COUNT; op++) {
            if (all[t] == AWL_I32 && (op == AWL_BINARY_DIV || op == AWL_BINARY_POW)) continue;
            awl_binary_op bop = op;
            operand o2 = OPND(OUT, all[t], 37, 129), a2 = OPND(IN, all[t], 37, 129);
            operand sets[][3] = {
                {OPND(OUT, all[t], 100003), OPND(IN, all[t], 100003), OPND(IN, all[t], 100003)},
                {o2, a2, broadcast(a2, 0)},
                {o2, broadcast(a2, 1), transposed(a2, 0, 1)},
                {sliced(o2, 1, 2), transposed(a2, 0, 1), a2},
                {o2, a2, broadcast(broadcast(a2, 0), 1)},
                {OPND(OUT, all[t], 4, 5, 6), transposed(OPND(IN, all[t], 4, 5, 6), 1, 2),
                 broadcast(OPND(IN, all[t], 4, 5, 6), 1)},
                /* a bias row on either side: the packed row-broadcast path */
                {OPND(OUT, all[t], 33, 256), OPND(IN, all[t], 33, 256),
                 broadcast(OPND(IN, all[t], 33, 256), 0)},
                {OPND(OUT, all[t], 33, 256), broadcast(OPND(IN, all[t], 33, 256), 0),
                 OPND(IN, all[t], 33, 256)},
            };
            for (int l = 0; l < 8; l++) {
                operand a = sets[l][1], b = sets[l][2];
                if (all[t] == AWL_I32) {
                    a = ints(a, -20, 20);
                    b = ints(b, -20, 20);
                } else if (op == AWL_BINARY_POW) {
                    a = ranged(a, 0.2, 3.0);
                    b = ranged(b, -2.0, 2.0);
                } else if (op >= AWL_BINARY_EQ) { /* comparisons need ties */
                    a = ints(a, -3, 3);
                    b = ints(b, -3, 3);
                }
                tcase c = {.n = 3,
                           .op = {sets[l][0], a, b},
                           .fn = fn_binary,
                           .ctx = &bop,
                           .ref_f32 = true};
                if (all[t] == AWL_F32 && op == AWL_BINARY_POW) c.tol = 2e-5;
                snprintf(c.name, sizeof c.name, "binary %s %s layout %d", awl_binary_op_name(op),
                         awl_dtype_name(all[t]), l);
                run_case(&c);
            }
        }
}
END_TEST

START_TEST(test_where)
{
    const awl_dtype all[] = {AWL_F32, AWL_F64, AWL_I32, AWL_BF16};
    for (int t = 0; t < 4; t++)
        for (int ct = 0; ct < 4; ct++) {
            operand o = OPND(OUT, all[t], 37, 129);
            operand cond = ints(OPND(IN, all[ct], 37, 129), 0, 1);
            operand a = OPND(IN, all[t], 37, 129);
            tcase c = {.n = 4,
                       .op = {o, broadcast(cond, 0), transposed(a, 0, 1), broadcast(a, 1)},
                       .fn = fn_where};
            snprintf(c.name, sizeof c.name, "where %s cond %s", awl_dtype_name(all[t]),
                     awl_dtype_name(all[ct]));
            run_case(&c);
        }
}
END_TEST

/* ---- reductions ------------------------------------------------------------------------ */

START_TEST(test_reduce)
{
    const awl_dtype all[] = {AWL_F32, AWL_F64, AWL_BF16, AWL_I32};
    for (int t = 0; t < 4; t++)
        for (int op = 0; op < AWL_REDUCE_OP_COUNT; op++) {
            awl_reduce_op rop = op;
            awl_dtype dt = all[t];
            operand cases[][2] = {
                {OPND(OUT, dt, 37, 1), OPND(IN, dt, 37, 129)},      /* rows */
                {OPND(OUT, dt, 1, 129), OPND(IN, dt, 37, 129)},     /* columns */
                {OPND(OUT, dt, 1, 384), OPND(IN, dt, 16384, 384)},  /* columns, split */
                {OPND(OUT, dt, 1), OPND(IN, dt, 1000003)},          /* full, split */
                {OPND(OUT, dt, 6, 1, 35), OPND(IN, dt, 6, 17, 35)}, /* middle axis */
                {OPND(OUT, dt, 37, 1), transposed(OPND(IN, dt, 37, 129), 0, 1)},
                {OPND(OUT, dt, 1, 5, 1), transposed(OPND(IN, dt, 4, 5, 6), 0, 2)}, /* general */
                {sliced(OPND(OUT, dt, 1, 129), 1, 2), broadcast(OPND(IN, dt, 37, 129), 0)},
            };
            for (int l = 0; l < 8; l++) {
                operand in = cases[l][1];
                if (dt == AWL_I32) in = ints(in, -100, 100);
                tcase c = {
                    .n = 2, .op = {cases[l][0], in}, .fn = fn_reduce, .ctx = &rop, .ref_f32 = true};
                snprintf(c.name, sizeof c.name, "reduce %s %s layout %d", awl_reduce_op_name(op),
                         awl_dtype_name(dt), l);
                run_case(&c);
            }
        }
}
END_TEST

/* ---- matmul -------------------------------------------------------------------------------- */

START_TEST(test_matmul)
{
    for (int t = 0; t < 3; t++) {
        awl_dtype dt = float_types[t];
        operand o = OPND(OUT, dt, 33, 65), a = OPND(IN, dt, 33, 47), b = OPND(IN, dt, 47, 65);
        operand ob = OPND(OUT, dt, 3, 33, 65), ab = OPND(IN, dt, 3, 33, 47),
                bb = OPND(IN, dt, 3, 47, 65);
        operand o4 = OPND(OUT, dt, 2, 3, 17, 19), a4 = OPND(IN, dt, 2, 3, 17, 23),
                b4 = OPND(IN, dt, 2, 3, 23, 19);
        operand sets[][3] = {
            {o, a, b},
            {o, transposed(a, 0, 1), b},
            {o, a, transposed(b, 0, 1)},
            {transposed(o, 0, 1), transposed(a, 0, 1), transposed(b, 0, 1)},
            {o, sliced(a, 1, 2), sliced(b, 0, 2)}, /* not representable: copied */
            {ob, ab, bb},
            {ob, broadcast(ab, 0), bb}, /* broadcast batch */
            {ob, transposed(ab, 1, 2), broadcast(bb, 0)},
            {transposed(o4, 0, 1), a4, b4}, /* batch dims that do not merge */
            {o4, transposed(a4, 0, 1), broadcast(b4, 1)},
            {OPND(OUT, dt, 256, 384), OPND(IN, dt, 256, 768), OPND(IN, dt, 768, 384)},
        };
        for (int l = 0; l < 11; l++)
            for (int acc = 0; acc < 2; acc++) {
                matmul_ctx m = {acc == 1, false};
                tcase c = {.n = 3,
                           .op = {sets[l][0], sets[l][1], sets[l][2]},
                           .fn = fn_matmul,
                           .ctx = &m,
                           .ref_f32 = true};
                if (acc) c.op[0].role = INOUT;
                if (dt == AWL_BF16) c.tol = 1e-2;
                snprintf(c.name, sizeof c.name, "matmul %s layout %d accumulate %d",
                         awl_dtype_name(dt), l, acc);
                run_case(&c);
            }
    }
}
END_TEST

START_TEST(test_matmul_tf32)
{
    matmul_ctx exact = {false, false}, fast = {false, true};
    operand o = OPND(OUT, AWL_F32, 256, 256), a = OPND(IN, AWL_F32, 256, 1024),
            b = OPND(IN, AWL_F32, 1024, 256);
    tcase c = {.n = 3, .op = {o, a, b}, .fn = fn_matmul, .ctx = &exact};
    snprintf(c.name, sizeof c.name, "matmul f32 exact");
    double e_exact = run_case(&c);
    c.ctx = &fast;
    c.tol = 5e-3;
    snprintf(c.name, sizeof c.name, "matmul tf32");
    double e_fast = run_case(&c);
    printf("test_cuda: matmul 256x1024x256 relative error: fp32 %.2e, tf32 %.2e\n", e_exact,
           e_fast);
    /* TF32 keeps 10 mantissa bits: if the error did not grow, TF32 was not used. */
    ck_assert_msg(e_fast > 10 * e_exact, "TF32 mode changed nothing (%.2e vs %.2e)", e_fast,
                  e_exact);
}
END_TEST

/* out = a @ b + bias: the CUDA backend's epilogue against the CPU's copy of
 * the bias broadcast over the rows plus an accumulating product. */
static int fn_matmul_bias(const awl_backend *be, awl_view *const *v, const void *ctx)
{
    (void)ctx;
    if (be->matmul_bias) {
        int rc = be->matmul_bias(v[0], v[1], v[2], v[3]);
        if (rc != AWL_ERR_UNSUPPORTED) return rc;
    }
    awl_view rows = *v[3];
    rows.ndim = 2;
    rows.shape[0] = v[0]->shape[0];
    rows.shape[1] = v[3]->shape[0];
    rows.strides[0] = 0;
    rows.strides[1] = v[3]->strides[0];
    int rc = be->copy(v[0], &rows);
    return rc < 0 ? rc : be->matmul(v[0], v[1], v[2], true);
}

START_TEST(test_matmul_bias)
{
    const awl_dtype types[] = {AWL_F32, AWL_BF16};
    for (int t = 0; t < 2; t++) {
        awl_dtype dt = types[t];
        /* b as a linear layer passes it: the transposed view of a (N, K) weight */
        tcase c = {.n = 4,
                   .op = {OPND(OUT, dt, 300, 96), OPND(IN, dt, 300, 48),
                          transposed(OPND(IN, dt, 48, 96), 0, 1), OPND(IN, dt, 96)},
                   .fn = fn_matmul_bias,
                   .ref_f32 = true,
                   .tol = dt == AWL_BF16 ? 1e-2 : 0};
        snprintf(c.name, sizeof c.name, "matmul_bias %s", awl_dtype_name(dt));
        run_case(&c);
    }
    ck_assert_msg(cuda->matmul_bias != NULL, "the CUDA backend has a bias epilogue");
}
END_TEST

/* ---- indexing -------------------------------------------------------------------------------- */

static int fn_index_select(const awl_backend *be, awl_view *const *v, const void *ctx)
{
    (void)ctx;
    return be->index_select(v[0], v[1], v[2]);
}

static int fn_index_add(const awl_backend *be, awl_view *const *v, const void *ctx)
{
    (void)ctx;
    return be->index_add(v[0], v[1], v[2]);
}

static int fn_gather(const awl_backend *be, awl_view *const *v, const void *ctx)
{
    return be->gather(v[0], v[1], *(const int *)ctx, v[2]);
}

static int fn_scatter_add(const awl_backend *be, awl_view *const *v, const void *ctx)
{
    return be->scatter_add(v[0], *(const int *)ctx, v[1], v[2]);
}

START_TEST(test_index_select_add)
{
    const awl_dtype all[] = {AWL_F32, AWL_F64, AWL_BF16, AWL_I32};
    for (int t = 0; t < 4; t++) {
        awl_dtype dt = all[t];
        operand src = OPND(IN, dt, 65, 48), idx = ints(OPND(IN, AWL_I32, 4, 33), 0, 64);
        operand sets[][3] = {
            {OPND(OUT, dt, 4, 33, 48), src, idx},
            {sliced(OPND(OUT, dt, 4, 33, 48), 2, 2), transposed(src, 0, 1), transposed(idx, 0, 1)},
            {OPND(OUT, dt, 4, 33, 48), broadcast(src, 1), broadcast(idx, 0)},
        };
        for (int l = 0; l < 3; l++) {
            if (dt == AWL_I32) sets[l][1] = ints(sets[l][1], -1000, 1000);
            tcase c = {.n = 3,
                       .op = {sets[l][0], sets[l][1], sets[l][2]},
                       .fn = fn_index_select,
                       .ref_f32 = true};
            snprintf(c.name, sizeof c.name, "index_select %s layout %d", awl_dtype_name(dt), l);
            run_case(&c);
        }
        if (dt == AWL_I32) continue;
        /* index_add: many sources onto few rows, in a fixed order. */
        operand dsets[][3] = {
            {OPND(INOUT, dt, 65, 48), ints(OPND(IN, AWL_I32, 16, 128), 0, 64),
             OPND(IN, dt, 16, 128, 48)},
            {OPND(INOUT, dt, 1000, 96), ints(OPND(IN, AWL_I32, 2048), 0, 999),
             transposed(OPND(IN, dt, 2048, 96), 0, 1)},
            {transposed(OPND(INOUT, dt, 50, 40), 0, 1), ints(OPND(IN, AWL_I32, 7, 9), 0, 39),
             broadcast(OPND(IN, dt, 7, 9, 40), 1)},
            {OPND(INOUT, dt, 5, 3), ints(OPND(IN, AWL_I32, 300), 2, 2), OPND(IN, dt, 300, 3)},
        };
        for (int l = 0; l < 4; l++) {
            tcase c = {.n = 3,
                       .op = {dsets[l][0], dsets[l][1], dsets[l][2]},
                       .fn = fn_index_add,
                       .ref_f32 = true};
            snprintf(c.name, sizeof c.name, "index_add %s layout %d", awl_dtype_name(dt), l);
            run_case(&c);
        }
    }
}
END_TEST

START_TEST(test_gather_scatter)
{
    const awl_dtype all[] = {AWL_F32, AWL_F64, AWL_BF16};
    for (int t = 0; t < 3; t++) {
        awl_dtype dt = all[t];
        int axis1 = 1, axis0 = 0;
        /* cross-entropy's pattern: one column per row */
        tcase g1 = {.n = 3,
                    .op = {OPND(OUT, dt, 64, 1), OPND(IN, dt, 64, 65),
                           ints(OPND(IN, AWL_I32, 64, 1), 0, 64)},
                    .fn = fn_gather,
                    .ctx = &axis1,
                    .ref_f32 = true};
        snprintf(g1.name, sizeof g1.name, "gather %s axis 1", awl_dtype_name(dt));
        run_case(&g1);
        tcase g0 = {.n = 3,
                    .op = {OPND(OUT, dt, 9, 33), transposed(OPND(IN, dt, 17, 33), 0, 1),
                           ints(OPND(IN, AWL_I32, 9, 33), 0, 16)},
                    .fn = fn_gather,
                    .ctx = &axis0,
                    .ref_f32 = true};
        snprintf(g0.name, sizeof g0.name, "gather %s axis 0", awl_dtype_name(dt));
        run_case(&g0);
        tcase s1 = {.n = 3,
                    .op = {OPND(INOUT, dt, 64, 65), ints(OPND(IN, AWL_I32, 64, 3), 0, 64),
                           OPND(IN, dt, 64, 3)},
                    .fn = fn_scatter_add,
                    .ctx = &axis1,
                    .ref_f32 = true};
        snprintf(s1.name, sizeof s1.name, "scatter_add %s axis 1", awl_dtype_name(dt));
        run_case(&s1);
        tcase s0 = {.n = 3,
                    .op = {transposed(OPND(INOUT, dt, 5, 33), 0, 1),
                           ints(OPND(IN, AWL_I32, 40, 33), 0, 4),
                           broadcast(OPND(IN, dt, 40, 33), 1)},
                    .fn = fn_scatter_add,
                    .ctx = &axis0,
                    .ref_f32 = true};
        snprintf(s0.name, sizeof s0.name, "scatter_add %s axis 0 repeated", awl_dtype_name(dt));
        run_case(&s0);
    }
}
END_TEST

/* ---- random -------------------------------------------------------------------------------- */

typedef struct random_ctx {
    awl_random_kind kind;
    uint64_t seed, offset;
    double a, b;
} random_ctx;

static int fn_random(const awl_backend *be, awl_view *const *v, const void *ctx)
{
    const random_ctx *r = ctx;
    return be->random(v[0], r->kind, r->seed, r->offset, r->a, r->b);
}

START_TEST(test_random)
{
    for (int t = 0; t < 3; t++)
        for (int kind = 0; kind < 2; kind++) {
            awl_dtype dt = float_types[t];
            random_ctx r = {kind, next_u64(), next_u64() >> 8, kind ? 0.5 : -1.5, kind ? 2.0 : 3.0};
            operand outs[] = {OPND(OUT, dt, 100003), sliced(OPND(OUT, dt, 37, 29), 1, 2),
                              transposed(OPND(OUT, dt, 5, 7, 3), 0, 2)};
            for (int l = 0; l < 3; l++) {
                tcase c = {.n = 1, .op = {outs[l]}, .fn = fn_random, .ctx = &r};
                /* Uniform draws must be bit-identical; normal ones go through
                 * libm's log/cos/sin against CUDA's (an ulp or two in double). */
                c.tol = kind == AWL_RANDOM_UNIFORM ? 1e-300 : (dt == AWL_F64 ? 1e-14 : 1e-7);
                snprintf(c.name, sizeof c.name, "random %s %s layout %d",
                         kind ? "normal" : "uniform", awl_dtype_name(dt), l);
                double e = run_case(&c);
                if (l == 0)
                    printf("test_cuda: random %s %s: relative difference to the CPU %.3g\n",
                           kind ? "normal" : "uniform", awl_dtype_name(dt), e);
            }
        }
}
END_TEST

#endif

int main(void)
{
#ifndef AWL_WITH_CUDA
    CUDA_SKIP_UNBUILT("test_cuda");
    return 0;
#else
    const cuda_test tests[] = {
        {"memory", test_device_and_memory},
        {"memory", test_refusals},
        {"elementwise", test_fill},
        {"elementwise", test_copy},
        {"elementwise", test_unary},
        {"elementwise", test_binary},
        {"elementwise", test_where},
        {"reduce", test_reduce},
        {"matmul", test_matmul},
        {"matmul", test_matmul_tf32},
        {"matmul", test_matmul_bias},
        {"index", test_index_select_add},
        {"index", test_gather_scatter},
        {"random", test_random},
    };
    return cuda_tests_main("cuda", tests, sizeof tests / sizeof tests[0]);
#endif
}
