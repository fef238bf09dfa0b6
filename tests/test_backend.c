/*
 * tests/test_backend.c - the backend conformance suite: the required
 * primitives (memory, fill and copy, unary, binary and where, reductions,
 * matmul, indexing, random), each against float64 loops on every layout and
 * dtype; tests/helpers/backend_harness.h says how, and
 * tests/test_backend_fused.c does the same for the optional fused kernels.
 *
 *     AWL_TEST_BACKEND=cuda CK_FORK=no ./build/test_backend
 */
#include "tests/helpers/backend_harness.h"

/* Lets the out-of-memory test see NULL under AddressSanitizer too. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }

/* ---- memory ----------------------------------------------------------------------- */

START_TEST(test_memory)
{
    ck_assert_int_ge(B->device_count(), 1);
    char src[1000], back[1000];
    for (int i = 0; i < 1000; i++) src[i] = (char)(i * 7);
    void *p = B->alloc(0, sizeof src);
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(B->copy_from_host(0, p, src, sizeof src), AWL_OK);
    ck_assert_int_eq(B->copy_to_host(0, back, p, sizeof back), AWL_OK);
    ck_assert_mem_eq(src, back, sizeof src);
    B->free(0, p, sizeof src);
    void *z = B->alloc(0, 0);
    ck_assert_ptr_nonnull(z);
    B->free(0, z, 0);
    B->free(0, NULL, 0);
    awl_clear_error();
    ck_assert_ptr_null(B->alloc(0, (size_t)1 << 62));
    ck_assert_int_eq(awl_last_error_code(), AWL_ERR_OOM);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "4611686018427387904"));
}
END_TEST

/* A backend with a cache hands a freed large block out again for a request
 * of the same size class, counts it as reserved while cached, and gives it
 * back on empty_cache. */
START_TEST(test_memory_cache)
{
    if (!B->memory_reserved || !B->empty_cache) return;
    B->empty_cache(0);
    const size_t before = B->memory_reserved(0), big = (size_t)3 << 20;
    void *p = B->alloc(0, big);
    ck_assert_ptr_nonnull(p);
    ck_assert_uint_ge(B->memory_reserved(0), before + big);
    char *host = calloc(1, big); /* touch it through the backend: p may be device memory */
    ck_assert_ptr_nonnull(host);
    ck_assert_int_eq(B->copy_from_host(0, p, host, big), AWL_OK);
    free(host);
    B->free(0, p, big);
    ck_assert_uint_ge(B->memory_reserved(0), before + big); /* cached, still held */
    void *q = B->alloc(0, big - 1000);                      /* same class */
    ck_assert_ptr_eq(q, p);
    B->free(0, q, big - 1000);
    B->empty_cache(0);
    ck_assert_uint_eq(B->memory_reserved(0), before);
}
END_TEST

/* ---- fill and copy -------------------------------------------------------------------- */

static const int64_t SHAPE3[3] = {3, 5, 7};
static const int64_t BIG2[2] = {67, 1031}; /* above the parallel grain, odd rows */

START_TEST(test_fill)
{
    const enum layout outs[] = {L_CONTIG, L_PERM, L_SLICED};
    for (int dt = 0; dt < AWL_DTYPE_COUNT; dt++)
        for (int li = 0; li < 3; li++)
            for (int big = 0; big < 2; big++) {
                int nd = big ? 2 : 3;
                const int64_t *shape = big ? BIG2 : SHAPE3;
                tt o = tt_new(dt, nd, shape, outs[li]);
                double value = dt == AWL_I32 ? -7 : 2.75;
                ck_assert_int_eq(B->fill(&o.v, value), AWL_OK);
                int64_t n = numel(nd, shape);
                double *ref = malloc((size_t)n * sizeof *ref);
                for (int64_t i = 0; i < n; i++) ref[i] = value;
                expect_out(&o, ref, 0, "fill");
                free(ref);
                tt_free(&o);
            }
}
END_TEST

static double convert_ref(double x, awl_dtype to)
{
    switch (to) {
    case AWL_F32: return (float)x;
    case AWL_I32: return trunc(x);
    case AWL_BF16: return round_bf16(x);
    default: return x;
    }
}

START_TEST(test_copy)
{
    const enum layout outs[] = {L_CONTIG, L_SLICED, L_PERM};
    for (int from = 0; from < AWL_DTYPE_COUNT; from++)
        for (int to = 0; to < AWL_DTYPE_COUNT; to++)
            for (int li = 0; li < L_COUNT; li++)
                for (int lo = 0; lo < 3; lo++)
                    for (int big = 0; big < 2; big++) {
                        if (big && li == L_BCAST) continue;
                        int nd = big ? 2 : 3;
                        const int64_t *shape = big ? BIG2 : SHAPE3;
                        tt in = tt_input(from, nd, shape, li, GEN_ANY);
                        tt o = tt_new(to, nd, shape, outs[lo]);
                        ck_assert_int_eq(B->copy(&o.v, &in.v), AWL_OK);
                        double *ref = malloc((size_t)numel(nd, shape) * sizeof *ref);
                        REF_LOOP(shape, nd, ref, convert_ref(tt_at(&in, idx), to));
                        char what[96];
                        snprintf(what, sizeof what, "copy %s -> %s, %s -> %s", awl_dtype_name(from),
                                 awl_dtype_name(to), layout_name[li], layout_name[outs[lo]]);
                        expect_out(&o, ref, tol_for(to) / 100, what);
                        free(ref);
                        tt_free(&in);
                        tt_free(&o);
                    }
}
END_TEST

/* ---- unary ------------------------------------------------------------------------------ */

static double gelu_ref(double x)
{
    return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

static double gelu_grad_ref(double x)
{
    double c = sqrt(2 / M_PI), u = c * (x + 0.044715 * x * x * x), t = tanh(u);
    double du = c * (1 + 3 * 0.044715 * x * x);
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * du;
}

static double unary_ref(awl_unary_op op, double x, double a)
{
    switch (op) {
    case AWL_UNARY_NEG: return -x;
    case AWL_UNARY_EXP: return exp(x);
    case AWL_UNARY_LOG: return log(x);
    case AWL_UNARY_SQRT: return sqrt(x);
    case AWL_UNARY_RSQRT: return 1 / sqrt(x);
    case AWL_UNARY_TANH: return tanh(x);
    case AWL_UNARY_SIGMOID: return 1 / (1 + exp(-x));
    case AWL_UNARY_RELU: return x > 0 ? x : 0;
    case AWL_UNARY_GELU: return gelu_ref(x);
    case AWL_UNARY_GELU_GRAD: return gelu_grad_ref(x);
    case AWL_UNARY_ABS: return fabs(x);
    case AWL_UNARY_SIGN: return x > 0 ? 1 : x < 0 ? -1 : 0;
    case AWL_UNARY_STEP: return x > 0;
    case AWL_UNARY_ADD_SCALAR: return x + a;
    case AWL_UNARY_MUL_SCALAR: return x * a;
    case AWL_UNARY_RSUB_SCALAR: return a - x;
    case AWL_UNARY_RDIV_SCALAR: return a / x;
    case AWL_UNARY_POW_SCALAR: return pow(x, a);
    case AWL_UNARY_GT_SCALAR: return x > a;
    case AWL_UNARY_LT_SCALAR: return x < a;
    case AWL_UNARY_EQ_SCALAR: return x == a;
    default: return NAN;
    }
}

static bool unary_int_ok(awl_unary_op op)
{
    return awl_kernel_defined(AWL_KERNEL_UNARY, op, AWL_I32);
}

static enum gen unary_gen(awl_unary_op op)
{
    switch (op) {
    case AWL_UNARY_LOG:
    case AWL_UNARY_SQRT:
    case AWL_UNARY_RSQRT:
    case AWL_UNARY_POW_SCALAR: return GEN_POS;
    case AWL_UNARY_EQ_SCALAR:
    case AWL_UNARY_SIGN:
    case AWL_UNARY_STEP:
    case AWL_UNARY_RELU: return GEN_GRID;
    default: return GEN_ANY;
    }
}

START_TEST(test_unary)
{
    const enum layout outs[] = {L_CONTIG, L_SLICED, L_PERM};
    for (int op = 0; op < AWL_UNARY_OP_COUNT; op++)
        for (int dt = 0; dt < 3; dt++) {
            if (dt == AWL_I32 && !unary_int_ok(op)) continue;
            double alpha = dt == AWL_I32 ? 3 : op == AWL_UNARY_EQ_SCALAR ? 0.5 : 0.75;
            for (int li = 0; li < L_COUNT; li++)
                for (int lo = 0; lo < 3; lo++)
                    for (int big = 0; big < 2; big++) {
                        if (big && (li == L_BCAST || lo == L_PERM)) continue;
                        int nd = big ? 2 : 3;
                        const int64_t *shape = big ? BIG2 : SHAPE3;
                        tt in = tt_input(dt, nd, shape, li, unary_gen(op));
                        tt o = tt_new(dt, nd, shape, outs[lo]);
                        ck_assert_int_eq(B->unary(op, &o.v, &in.v, alpha), AWL_OK);
                        double *ref = malloc((size_t)numel(nd, shape) * sizeof *ref);
                        REF_LOOP(shape, nd, ref, unary_ref(op, tt_at(&in, idx), alpha));
                        char what[96];
                        snprintf(what, sizeof what, "unary %s %s, %s -> %s", awl_unary_op_name(op),
                                 awl_dtype_name(dt), layout_name[li], layout_name[outs[lo]]);
                        expect_out(&o, ref, tol_for(dt), what);
                        free(ref);
                        tt_free(&in);
                        tt_free(&o);
                    }
        }
}
END_TEST

START_TEST(test_unary_in_place)
{
    for (int dt = 0; dt < 3; dt++) {
        tt t = tt_input(dt, 2, BIG2, L_CONTIG, GEN_ANY);
        double *ref = malloc((size_t)numel(2, BIG2) * sizeof *ref);
        REF_LOOP(BIG2, 2, ref, tt_at(&t, idx) * (dt == AWL_I32 ? 3 : 0.75));
        ck_assert_int_eq(B->unary(AWL_UNARY_MUL_SCALAR, &t.v, &t.v, dt == AWL_I32 ? 3 : 0.75),
                         AWL_OK);
        expect_out(&t, ref, tol_for(dt), "in-place mul_scalar");
        free(ref);
        tt_free(&t);
    }
}
END_TEST

START_TEST(test_unary_extremes)
{
    /* Saturated and near-zero arguments, where a careless formula overflows
     * to NaN or cancels. */
    const double xs[8] = {-100, -30, -10, -1e-3, 0, 1e-3, 10, 100};
    const awl_unary_op ops[5] = {AWL_UNARY_GELU, AWL_UNARY_GELU_GRAD, AWL_UNARY_SIGMOID,
                                 AWL_UNARY_TANH, AWL_UNARY_EXP};
    const int64_t n = 8;
    for (int dt = 0; dt < 2; dt++)
        for (int k = 0; k < 5; k++) {
            tt in = tt_new(dt, 1, &n, L_CONTIG), o = tt_new(dt, 1, &n, L_CONTIG);
            double ref[8];
            for (int64_t i = 0; i < n; i++) {
                host_set(in.host, dt, i, xs[i]);
                ref[i] = unary_ref(ops[k], xs[i], 0);
                if (dt == AWL_F32) ref[i] = (float)ref[i];
            }
            tt_upload(&in);
            ck_assert_int_eq(B->unary(ops[k], &o.v, &in.v, 0), AWL_OK);
            expect_out(&o, ref, tol_for(dt), awl_unary_op_name(ops[k]));
            tt_free(&in);
            tt_free(&o);
        }
}
END_TEST

/* ---- binary and where ---------------------------------------------------------------- */

static double binary_ref(awl_binary_op op, double a, double b, awl_dtype dt)
{
    switch (op) {
    case AWL_BINARY_ADD: return a + b;
    case AWL_BINARY_SUB: return a - b;
    case AWL_BINARY_MUL: return a * b;
    case AWL_BINARY_DIV: return dt == AWL_F32 ? (double)((float)a / (float)b) : a / b;
    case AWL_BINARY_MAXIMUM: return a > b ? a : b;
    case AWL_BINARY_MINIMUM: return a < b ? a : b;
    case AWL_BINARY_POW: return pow(a, b);
    case AWL_BINARY_EQ: return a == b;
    case AWL_BINARY_NE: return a != b;
    case AWL_BINARY_GT: return a > b;
    case AWL_BINARY_GE: return a >= b;
    case AWL_BINARY_LT: return a < b;
    case AWL_BINARY_LE: return a <= b;
    default: return NAN;
    }
}

START_TEST(test_binary)
{
    const enum layout outs[] = {L_CONTIG, L_SLICED};
    for (int op = 0; op < AWL_BINARY_OP_COUNT; op++)
        for (int dt = 0; dt < 3; dt++) {
            if (dt == AWL_I32 && (op == AWL_BINARY_DIV || op == AWL_BINARY_POW)) continue;
            enum gen ga = op == AWL_BINARY_POW ? GEN_POS : op >= AWL_BINARY_EQ ? GEN_GRID : GEN_ANY;
            enum gen gb = op >= AWL_BINARY_EQ ? GEN_GRID : GEN_ANY;
            for (int la = 0; la < L_COUNT; la++)
                for (int lb = 0; lb < L_COUNT; lb++)
                    for (int lo = 0; lo < 2; lo++) {
                        bool big = la == lb && la != L_BCAST && lo == 0;
                        int nd = big ? 2 : 3;
                        const int64_t *shape = big ? BIG2 : SHAPE3;
                        tt a = tt_input(dt, nd, shape, la, ga), b = tt_input(dt, nd, shape, lb, gb);
                        tt o = tt_new(dt, nd, shape, outs[lo]);
                        ck_assert_int_eq(B->binary(op, &o.v, &a.v, &b.v), AWL_OK);
                        double *ref = malloc((size_t)numel(nd, shape) * sizeof *ref);
                        REF_LOOP(shape, nd, ref,
                                 binary_ref(op, tt_at(&a, idx), tt_at(&b, idx), dt));
                        char what[96];
                        snprintf(what, sizeof what, "binary %s %s, %s (op) %s -> %s",
                                 awl_binary_op_name(op), awl_dtype_name(dt), layout_name[la],
                                 layout_name[lb], layout_name[outs[lo]]);
                        expect_out(&o, ref, tol_for(dt), what);
                        free(ref);
                        tt_free(&a);
                        tt_free(&b);
                        tt_free(&o);
                    }
        }
}
END_TEST

START_TEST(test_where)
{
    for (int cdt = 0; cdt < AWL_DTYPE_COUNT; cdt++)
        for (int dt = 0; dt < AWL_DTYPE_COUNT; dt++)
            for (int lc = 0; lc < L_COUNT; lc++) {
                tt c = tt_input(cdt, 3, SHAPE3, lc, GEN_GRID);
                tt a = tt_input(dt, 3, SHAPE3, (lc + 1) % L_COUNT, GEN_ANY);
                tt b = tt_input(dt, 3, SHAPE3, (lc + 2) % L_COUNT, GEN_ANY);
                tt o = tt_new(dt, 3, SHAPE3, lc == L_SLICED ? L_PERM : L_CONTIG);
                ck_assert_int_eq(B->where(&o.v, &c.v, &a.v, &b.v), AWL_OK);
                double ref[105];
                REF_LOOP(SHAPE3, 3, ref, tt_at(&c, idx) != 0 ? tt_at(&a, idx) : tt_at(&b, idx));
                expect_out(&o, ref, 0, "where");
                tt_free(&c);
                tt_free(&a);
                tt_free(&b);
                tt_free(&o);
            }
}
END_TEST

START_TEST(test_refusals)
{
    int64_t shape[1] = {4};
    tt i = tt_input(AWL_I32, 1, shape, L_CONTIG, GEN_POS);
    tt h = tt_input(AWL_BF16, 1, shape, L_CONTIG, GEN_POS);
    awl_clear_error();
    ck_assert_int_eq(B->unary(AWL_UNARY_EXP, &i.v, &i.v, 0), AWL_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "exp"));
    /* bf16 arithmetic is optional (backend.h): a backend without it must
     * refuse with a message naming the dtype; one with it is checked by its
     * own suite (tests/test_cuda.c) */
    awl_clear_error();
    int status = B->binary(AWL_BINARY_ADD, &h.v, &h.v, &h.v);
    if (status != AWL_OK) {
        ck_assert_int_eq(status, AWL_ERR_INVALID);
        ck_assert_ptr_nonnull(strstr(awl_last_error(), "bfloat16"));
    }
    tt_free(&i);
    tt_free(&h);
}
END_TEST

/* ---- reductions ------------------------------------------------------------------------- */

static void reduce_case(awl_reduce_op op, awl_dtype dt, int nd, const int64_t *shape, unsigned axes,
                        enum layout li, enum layout lo)
{
    int64_t oshape[AWL_MAX_DIMS];
    for (int d = 0; d < nd; d++) oshape[d] = (axes >> d) & 1 ? 1 : shape[d];
    tt in = tt_input(dt, nd, shape, li, GEN_ANY);
    tt o = tt_new(dt, nd, oshape, lo);
    ck_assert_int_eq(B->reduce(op, &o.v, &in.v), AWL_OK);
    int64_t nout = numel(nd, oshape);
    double *ref = malloc((size_t)nout * sizeof *ref);
    int64_t count = numel(nd, shape) / nout;
    for (int64_t i = 0; i < nout; i++)
        ref[i] = op == AWL_REDUCE_MAX ? -INFINITY : op == AWL_REDUCE_MIN ? INFINITY : 0;
    int64_t idx[AWL_MAX_DIMS] = {0};
    do {
        int64_t k = 0;
        for (int d = 0; d < nd; d++) k = k * oshape[d] + ((axes >> d) & 1 ? 0 : idx[d]);
        double x = tt_at(&in, idx);
        ref[k] = op == AWL_REDUCE_MAX   ? fmax(ref[k], x)
                 : op == AWL_REDUCE_MIN ? fmin(ref[k], x)
                                        : ref[k] + x;
    } while (idx_next(idx, nd, shape));
    for (int64_t i = 0; i < nout; i++) {
        if (op == AWL_REDUCE_MEAN) ref[i] /= (double)count;
        if (dt == AWL_I32) ref[i] = trunc(ref[i]);
    }
    char what[96];
    snprintf(what, sizeof what, "reduce %s %s axes 0x%x, %s -> %s", awl_reduce_op_name(op),
             awl_dtype_name(dt), axes, layout_name[li], layout_name[lo]);
    expect_out(&o, ref, tol_for(dt), what);
    free(ref);
    tt_free(&in);
    tt_free(&o);
}

START_TEST(test_reduce)
{
    const int64_t shape[3] = {4, 6, 5};
    for (int op = 0; op < AWL_REDUCE_OP_COUNT; op++)
        for (int dt = 0; dt < 3; dt++)
            for (unsigned axes = 1; axes < 8; axes++)
                for (int li = 0; li < L_COUNT; li++)
                    reduce_case(op, dt, 3, shape, axes, li, li == L_SLICED ? L_SLICED : L_CONTIG);
}
END_TEST

START_TEST(test_reduce_large)
{
    /* Rows, columns and all of a matrix above the parallel grain, in both
     * layouts, so that every parallel path runs. */
    const int64_t shape[2] = {301, 257}, tall[2] = {20000, 3}, wide[2] = {2, 40000};
    for (int op = 0; op < AWL_REDUCE_OP_COUNT; op++)
        for (int dt = 0; dt < 2; dt++)
            for (unsigned axes = 1; axes < 4; axes++)
                for (int li = 0; li < 3; li++) {
                    reduce_case(op, dt, 2, shape, axes, li, L_CONTIG);
                    if (li == 0) reduce_case(op, dt, 2, tall, axes, li, L_CONTIG);
                    if (li == 0) reduce_case(op, dt, 2, wide, axes, li, L_CONTIG);
                }
}
END_TEST

START_TEST(test_reduce_accuracy)
{
    /* 16M float32 values: summed naively in float32 this is off by ~1e-3. */
    const int64_t n = (int64_t)1 << 24, one = 1;
    tt in = tt_new(AWL_F32, 1, &n, L_CONTIG);
    double ref = 0;
    float *x = (float *)in.host;
    for (int64_t i = 0; i < n; i++) {
        x[i] = (float)(0.5 + urand());
        ref += x[i];
    }
    tt_upload(&in);
    tt o = tt_new(AWL_F32, 1, &one, L_CONTIG);
    ck_assert_int_eq(B->reduce(AWL_REDUCE_SUM, &o.v, &in.v), AWL_OK);
    expect_out(&o, &ref, 1e-7, "sum of 16M float32");
    tt_free(&in);
    tt_free(&o);
}
END_TEST

START_TEST(test_reduce_deterministic)
{
    /* One output (split across threads when they exist) and three. */
    if (!B->set_num_threads) return;
    const int64_t shapes[2][2] = {{1, 1200000}, {3, 400000}};
    for (int si = 0; si < 2; si++) {
        const int64_t oshape[2] = {shapes[si][0], 1};
        /* float64: a float32 result would round away a different order. */
        tt in = tt_input(AWL_F64, 2, shapes[si], L_CONTIG, GEN_ANY);
        tt o = tt_new(AWL_F64, 2, oshape, L_CONTIG);
        double first[3];
        for (int threads = 1; threads <= 4; threads++) {
            B->set_num_threads(threads);
            ck_assert_int_eq(B->reduce(AWL_REDUCE_SUM, &o.v, &in.v), AWL_OK);
            tt_download(&o);
            if (threads == 1) memcpy(first, o.host, (size_t)oshape[0] * sizeof *first);
            ck_assert_mem_eq(first, o.host, (size_t)oshape[0] * sizeof *first);
        }
        tt_free(&in);
        tt_free(&o);
    }
    B->set_num_threads(2);
}
END_TEST

/* ---- matmul ---------------------------------------------------------------------------- */

/* out (batch..., M, N) = a @ b with layouts; a_bcast broadcasts a's first
 * batch axis; accumulate adds into random initial values. */
static void matmul_case(awl_dtype dt, int nb, const int64_t *batch, int64_t M, int64_t K, int64_t N,
                        enum layout la, enum layout lb, enum layout lo, bool a_bcast,
                        bool accumulate)
{
    int nd = nb + 2;
    int64_t sa[AWL_MAX_DIMS], sb[AWL_MAX_DIMS], so[AWL_MAX_DIMS];
    for (int d = 0; d < nb; d++) sa[d] = sb[d] = so[d] = batch[d];
    sa[nb] = M, sa[nb + 1] = K, sb[nb] = K, sb[nb + 1] = N, so[nb] = M, so[nb + 1] = N;
    tt a = tt_input(dt, nd, sa, la, GEN_ANY), b = tt_input(dt, nd, sb, lb, GEN_ANY);
    if (a_bcast) a.v.strides[0] = 0;
    tt o = tt_new(dt, nd, so, lo);
    if (accumulate) fill_view(&o, &o.v, GEN_ANY);
    int64_t n = numel(nd, so);
    double *ref = malloc((size_t)(n ? n : 1) * sizeof *ref);
    int64_t idx[AWL_MAX_DIMS] = {0};
    for (int64_t i = 0; i < n; i++) {
        int64_t ia[AWL_MAX_DIMS], ib[AWL_MAX_DIMS];
        memcpy(ia, idx, sizeof ia);
        memcpy(ib, idx, sizeof ib);
        double s = accumulate ? tt_at(&o, idx) : 0;
        for (int64_t k = 0; k < K; k++) {
            ia[nb + 1] = k;
            ib[nb] = k;
            s += tt_at(&a, ia) * tt_at(&b, ib);
        }
        ref[i] = s;
        idx_next(idx, nd, so);
    }
    ck_assert_int_eq(B->matmul(&o.v, &a.v, &b.v, accumulate), AWL_OK);
    char what[128];
    snprintf(what, sizeof what, "matmul %s (%lld,%lld,%lld) %s@%s->%s%s%s", awl_dtype_name(dt),
             (long long)M, (long long)K, (long long)N, layout_name[la], layout_name[lb],
             layout_name[lo], a_bcast ? " a-bcast" : "", accumulate ? " acc" : "");
    expect_out(&o, ref, dt == AWL_F32 ? 1e-5 : 1e-12, what);
    free(ref);
    tt_free(&a);
    tt_free(&b);
    tt_free(&o);
}

START_TEST(test_matmul)
{
    const int64_t none[1] = {1}, batch[2] = {3, 2}, many[1] = {40};
    const enum layout ls[] = {L_CONTIG, L_PERM, L_SLICED};
    for (int dt = 0; dt < 2; dt++) {
        for (int la = 0; la < 3; la++)
            for (int lb = 0; lb < 3; lb++)
                for (int lo = 0; lo < 3; lo++) {
                    matmul_case(dt, 0, none, 5, 7, 3, ls[la], ls[lb], ls[lo], false, lo == 1);
                    matmul_case(dt, 2, batch, 4, 6, 5, ls[la], ls[lb], ls[lo], la == 0, lo == 2);
                }
        matmul_case(dt, 0, none, 1, 9, 1, L_PERM, L_PERM, L_CONTIG, false, false);
        matmul_case(dt, 0, none, 1, 9, 6, L_SLICED, L_CONTIG, L_PERM, false, true);
        matmul_case(dt, 0, none, 6, 0, 4, L_CONTIG, L_CONTIG, L_SLICED, false, false);
        matmul_case(dt, 1, many, 16, 8, 16, L_CONTIG, L_PERM, L_CONTIG, false, false);
        matmul_case(dt, 1, many, 9, 8, 7, L_SLICED, L_CONTIG, L_CONTIG, true, true);
        matmul_case(dt, 0, none, 130, 70, 90, L_PERM, L_CONTIG, L_CONTIG, false, false);
        /* large enough to be split between threads, in bands of rows
         * (M > N) or of columns (M < N), under every transposition */
        for (int la = 0; la < 2; la++)
            for (int lb = 0; lb < 2; lb++)
                for (int lo = 0; lo < 2; lo++) {
                    matmul_case(dt, 0, none, 150, 100, 40, ls[la], ls[lb], ls[lo], false, lo == 1);
                    matmul_case(dt, 0, none, 40, 100, 150, ls[la], ls[lb], ls[lo], false, lo == 0);
                }
    }
}
END_TEST

/* ---- indexing ---------------------------------------------------------------------------- */

/* src[idx[i...], r...] for out index (i..., r...) with idx of rank 2. */
static double selected(const tt *src, const tt *idx_t, const int64_t *idx, int ond)
{
    int64_t si[AWL_MAX_DIMS] = {0};
    si[0] = (int64_t)tt_at(idx_t, idx);
    for (int d = 2; d < ond; d++) si[d - 1] = idx[d];
    return tt_at(src, si);
}

/* in[..., idx[...], ...] for a rank-3 gather along axis. */
static double gathered(const tt *in, const tt *idx_t, const int64_t *idx, int axis)
{
    int64_t j[3] = {idx[0], idx[1], idx[2]};
    j[axis] = (int64_t)tt_at(idx_t, idx);
    return tt_at(in, j);
}

START_TEST(test_index_select_add)
{
    const int64_t src_shape[3] = {7, 3, 4}, idx_shape[2] = {2, 5};
    const int64_t out_shape[4] = {2, 5, 3, 4};
    const int64_t emb_src[2] = {65, 128}, emb_idx[2] = {64, 64}, emb_out[3] = {64, 64, 128};
    for (int dt = 0; dt < 3; dt++)
        for (int ls = 0; ls < 4; ls++) {
            bool big = ls == 3;
            enum layout l = big ? L_CONTIG : (enum layout)ls;
            const int64_t *ss = big ? emb_src : src_shape, *is = big ? emb_idx : idx_shape,
                          *os = big ? emb_out : out_shape;
            int snd = big ? 2 : 3, ond = big ? 3 : 4;
            tt src = tt_input(dt, snd, ss, l, GEN_ANY);
            tt idx_t = index_input(2, is, ls == 2 ? L_SLICED : L_CONTIG, ss[0]);
            tt o = tt_new(dt, ond, os, ls == 1 ? L_SLICED : L_CONTIG);
            ck_assert_int_eq(B->index_select(&o.v, &src.v, &idx_t.v), AWL_OK);
            int64_t n = numel(ond, os);
            double *ref = malloc((size_t)n * sizeof *ref);
            REF_LOOP(os, ond, ref, selected(&src, &idx_t, idx, ond));
            expect_out(&o, ref, 0, "index_select");
            free(ref);

            /* index_add: the adjoint, into random initial values. */
            tt dst = tt_new(dt, snd, ss, l);
            fill_view(&dst, &dst.v, GEN_ANY);
            int64_t dn = numel(snd, ss);
            double *dref = malloc((size_t)dn * sizeof *dref);
            REF_LOOP(ss, snd, dref, tt_at(&dst, idx));
            tt grad = tt_input(dt, ond, os, ls == 2 ? L_PERM : L_CONTIG, GEN_ANY);
            int64_t oi[AWL_MAX_DIMS] = {0};
            do {
                int64_t row = (int64_t)tt_at(&idx_t, oi), k = row;
                for (int d = 2; d < ond; d++) k = k * os[d] + oi[d];
                dref[k] += tt_at(&grad, oi);
            } while (idx_next(oi, ond, os));
            ck_assert_int_eq(B->index_add(&dst.v, &idx_t.v, &grad.v), AWL_OK);
            expect_out(&dst, dref, tol_for(dt), "index_add");
            free(dref);
            tt_free(&grad);
            tt_free(&dst);
            tt_free(&src);
            tt_free(&idx_t);
            tt_free(&o);
        }
}
END_TEST

START_TEST(test_gather_scatter)
{
    const int64_t in_shape[3] = {4, 9, 5};
    for (int dt = 0; dt < 3; dt++)
        for (int axis = 0; axis < 3; axis++)
            for (int l = 0; l < 3; l++) {
                int64_t is[3] = {4, 9, 5};
                is[axis] = 6;
                tt in = tt_input(dt, 3, in_shape, l, GEN_ANY);
                tt idx_t = index_input(3, is, l == 2 ? L_PERM : L_CONTIG, in_shape[axis]);
                tt o = tt_new(dt, 3, is, l == 1 ? L_SLICED : L_CONTIG);
                ck_assert_int_eq(B->gather(&o.v, &in.v, axis, &idx_t.v), AWL_OK);
                double ref[6 * 9 * 5];
                REF_LOOP(is, 3, ref, gathered(&in, &idx_t, idx, axis));
                expect_out(&o, ref, 0, "gather");

                tt dst = tt_new(dt, 3, in_shape, l);
                fill_view(&dst, &dst.v, GEN_ANY);
                double dref[4 * 9 * 5];
                REF_LOOP(in_shape, 3, dref, tt_at(&dst, idx));
                tt src = tt_input(dt, 3, is, (enum layout)((l + 1) % 3), GEN_ANY);
                int64_t si[3] = {0};
                do {
                    int64_t j[3] = {si[0], si[1], si[2]};
                    j[axis] = (int64_t)tt_at(&idx_t, si);
                    dref[(j[0] * 9 + j[1]) * 5 + j[2]] += tt_at(&src, si);
                } while (idx_next(si, 3, is));
                ck_assert_int_eq(B->scatter_add(&dst.v, axis, &idx_t.v, &src.v), AWL_OK);
                expect_out(&dst, dref, tol_for(dt), "scatter_add");
                tt_free(&src);
                tt_free(&dst);
                tt_free(&in);
                tt_free(&idx_t);
                tt_free(&o);
            }
}
END_TEST

/* ---- random -------------------------------------------------------------------------------- */

/* Philox4x32-10 written from the paper (Salmon et al. 2011), full 128-bit
 * counter, independently of common/philox.h. */
static void philox_ref(const uint32_t ctr_in[4], const uint32_t key_in[2], uint32_t out[4])
{
    uint32_t c[4] = {ctr_in[0], ctr_in[1], ctr_in[2], ctr_in[3]}, k[2] = {key_in[0], key_in[1]};
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c[0], p1 = (uint64_t)0xCD9E8D57u * c[2];
        uint32_t n[4] = {(uint32_t)(p1 >> 32) ^ c[1] ^ k[0], (uint32_t)p1,
                         (uint32_t)(p0 >> 32) ^ c[3] ^ k[1], (uint32_t)p0};
        memcpy(c, n, sizeof c);
        k[0] += 0x9E3779B9u;
        k[1] += 0xBB67AE85u;
    }
    memcpy(out, c, sizeof c);
}

/* Element i of the awl stream (seed, offset), as a uniform or a normal. */
static double stream_ref(uint64_t seed, uint64_t offset, uint64_t i, bool normal)
{
    uint64_t blk = offset + i / 4;
    uint32_t ctr[4] = {(uint32_t)blk, (uint32_t)(blk >> 32), 0, 0};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)}, w[4];
    philox_ref(ctr, key, w);
    if (!normal) return (w[i % 4] >> 8) / 16777216.0;
    int pair = (int)(i % 4) / 2;
    double u1 = ((w[2 * pair] >> 8) + 1) / 16777216.0, u2 = (w[2 * pair + 1] >> 8) / 16777216.0;
    double r = sqrt(-2 * log(u1)), t = 2 * M_PI * u2;
    return i % 2 ? r * sin(t) : r * cos(t);
}

START_TEST(test_philox_known_answers)
{
    /* Known-answer vectors of Philox4x32-10 from the Random123 distribution. */
    const uint32_t ctr[3][4] = {{0, 0, 0, 0},
                                {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                                {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}};
    const uint32_t key[3][2] = {{0, 0}, {0xffffffffu, 0xffffffffu}, {0xa4093822u, 0x299f31d0u}};
    const uint32_t want[3][4] = {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u},
                                 {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu},
                                 {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}};
    for (int t = 0; t < 3; t++) {
        uint32_t got[4];
        philox_ref(ctr[t], key[t], got);
        for (int j = 0; j < 4; j++) ck_assert_uint_eq(got[j], want[t][j]);
    }
    /* A few stream values from the formula, pinned so a change of layout shows. */
    ck_assert_double_eq(stream_ref(0, 0, 0, false), (0x6627e8d5u >> 8) / 16777216.0);
    ck_assert_double_eq(stream_ref(0, 0, 3, false), (0x9b00dbd8u >> 8) / 16777216.0);
}
END_TEST

START_TEST(test_random)
{
    const uint64_t seed = 0x123456789abcdefull, offset = 77;
    const int64_t n1[1] = {1003}, n2[2] = {250, 401};
    for (int normal = 0; normal < 2; normal++)
        for (int dt = 0; dt < 2; dt++)
            for (int l = 0; l < 3; l++) {
                bool big = l == 2;
                tt o = tt_new(dt, big ? 2 : 1, big ? n2 : n1, l ? L_SLICED : L_CONTIG);
                double a = normal ? 0.5 : -1, b = normal ? 2 : 3;
                ck_assert_int_eq(B->random(&o.v, normal ? AWL_RANDOM_NORMAL : AWL_RANDOM_UNIFORM,
                                           seed, offset, a, b),
                                 AWL_OK);
                int64_t n = awl_view_numel(&o.v);
                double *ref = malloc((size_t)n * sizeof *ref);
                for (int64_t i = 0; i < n; i++) {
                    double z = stream_ref(seed, offset, (uint64_t)i, normal);
                    ref[i] = normal ? a + b * z : a + (b - a) * z;
                    if (dt == AWL_F32) ref[i] = (float)ref[i];
                }
                /* Uniform values are exact; normals go through libm. */
                expect_out(&o, ref, normal ? tol_for(dt) / 10 : 0, "random");
                free(ref);
                tt_free(&o);
            }
    /* float32 and float64 uniforms from one state are the same numbers. */
    tt f = tt_new(AWL_F32, 1, n1, L_CONTIG), d = tt_new(AWL_F64, 1, n1, L_CONTIG);
    ck_assert_int_eq(B->random(&f.v, AWL_RANDOM_UNIFORM, 5, 9, 0, 1), AWL_OK);
    ck_assert_int_eq(B->random(&d.v, AWL_RANDOM_UNIFORM, 5, 9, 0, 1), AWL_OK);
    tt_download(&f);
    tt_download(&d);
    for (int64_t i = 0; i < n1[0]; i++)
        if (((float *)f.host)[i] != ((double *)d.host)[i])
            ck_abort_msg("uniform element %lld differs between float32 and float64", (long long)i);
    tt_free(&f);
    tt_free(&d);
}
END_TEST

int main(void)
{
    const backend_test tests[] = {
        {"memory", test_memory},
        {"memory_cache", test_memory_cache},
        {"fill_copy", test_fill},
        {"fill_copy", test_copy},
        {"unary", test_unary},
        {"unary", test_unary_in_place},
        {"unary", test_unary_extremes},
        {"binary", test_binary},
        {"binary", test_where},
        {"binary", test_refusals},
        {"reduce", test_reduce},
        {"reduce", test_reduce_large},
        {"reduce", test_reduce_accuracy},
        {"reduce", test_reduce_deterministic},
        {"matmul", test_matmul},
        {"index", test_index_select_add},
        {"index", test_gather_scatter},
        {"random", test_philox_known_answers},
        {"random", test_random},
    };
    return backend_tests_main("backend", tests, sizeof tests / sizeof tests[0]);
}
