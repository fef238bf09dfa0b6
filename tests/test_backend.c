/*
 * tests/test_backend.c - the backend conformance suite.
 *
 * Calls a backend's table directly (no tensor layer) and compares every
 * primitive and fused kernel with straightforward float64 loops written here.
 * Data are random (a small LCG, never zeros where a zero would hide a bug),
 * and every op runs on contiguous, permuted (last two axes swapped), sliced
 * (step 2, offset 3) and broadcast (zero-stride) views, in every dtype the op
 * is defined for. Buffers live on the backend's device (alloc,
 * copy_from_host, copy_to_host), so the same suite checks any backend.
 *
 * Every output's storage starts filled with a guard byte pattern; after the
 * op, every storage element the output view does not cover, including a
 * guard tail, must still hold it (catches out-of-bounds and stray writes).
 *
 * Error metric: per element |got - ref| <= tol (|ref| + rms(ref)), a relative
 * error that does not blow up where ref crosses zero; tol is 1e-5 for
 * float32, 1e-12 for float64, 0 for int32 and 4e-3 for bfloat16.
 *
 * AWL_TEST_BACKEND selects the backends: a name ("cpu", the default), a
 * comma-separated list, or "all" for every registered backend; each with
 * device_count() > 0 gets its own suite run.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"

/* Lets the out-of-memory test see NULL under AddressSanitizer too. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }

static const awl_backend *B; /* the backend under test */

/* ---- random data -------------------------------------------------------------- */

static uint64_t lcg = 88172645463325252ull;

static double urand(void)
{
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(lcg >> 11) * (1.0 / 9007199254740992.0);
}

enum gen {
    GEN_ANY,  /* [-2, 2), magnitude >= 0.05 */
    GEN_POS,  /* [0.1, 2) */
    GEN_GRID, /* multiples of 0.5 in [-1.5, 1.5]: equal values occur */
};

static double gen_value(enum gen g, awl_dtype dt)
{
    if (dt == AWL_I32) {
        if (g == GEN_POS) return 1 + (int)(urand() * 20);
        if (g == GEN_GRID) return (int)(urand() * 7) - 3;
        return (int)(urand() * 41) - 20;
    }
    if (g == GEN_POS) return 0.1 + 1.9 * urand();
    if (g == GEN_GRID) return 0.5 * ((int)(urand() * 7) - 3);
    double m = 0.05 + 1.95 * urand();
    return urand() < 0.5 ? -m : m;
}

/* ---- test tensors: a device storage, its host mirror, one view ----------------- */

enum layout { L_CONTIG, L_PERM, L_SLICED, L_BCAST, L_COUNT };
static const char *layout_name[L_COUNT] = {"contig", "perm", "sliced", "bcast"};

#define GUARD 16
#define SENTINEL 0xA5

typedef struct tt {
    awl_view v;
    char *host;
    size_t nbytes;
} tt;

static size_t esize(awl_dtype dt) { return awl_dtype_size(dt); }

/* noinline: once this is inlined into a caller that passes &j for a 1-D view,
 * GCC 12 cannot see that v->ndim bounds the reads and warns (-Werror) that
 * idx[1..] "may be used uninitialized"; which CPUs trigger it depends on
 * -march=native's cost model. */
__attribute__((noinline)) static int64_t view_off(const awl_view *v, const int64_t *idx)
{
    int64_t off = v->offset;
    for (int d = 0; d < v->ndim; d++) off += idx[d] * v->strides[d];
    return off;
}

/* Next row-major index of shape; false after the last. */
static bool idx_next(int64_t *idx, int ndim, const int64_t *shape)
{
    for (int d = ndim - 1; d >= 0; d--) {
        if (++idx[d] < shape[d]) return true;
        idx[d] = 0;
    }
    return false;
}

static int64_t numel(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    return n;
}

static double bf16_bits_to_double(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Round to bfloat16, nearest-even, written from the definition. */
static double round_bf16(double x)
{
    float f = (float)x;
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t lower = u & 0xffffu, upper = u >> 16;
    if (lower > 0x8000u || (lower == 0x8000u && (upper & 1u))) upper++;
    return bf16_bits_to_double((uint16_t)upper);
}

static double host_get(const char *host, awl_dtype dt, int64_t off)
{
    const char *p = host + off * (int64_t)esize(dt);
    switch (dt) {
    case AWL_F32: {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    case AWL_F64: {
        double d;
        memcpy(&d, p, 8);
        return d;
    }
    case AWL_I32: {
        int32_t i;
        memcpy(&i, p, 4);
        return i;
    }
    default: {
        uint16_t h;
        memcpy(&h, p, 2);
        return bf16_bits_to_double(h);
    }
    }
}

static void host_set(char *host, awl_dtype dt, int64_t off, double x)
{
    char *p = host + off * (int64_t)esize(dt);
    switch (dt) {
    case AWL_F32: {
        float f = (float)x;
        memcpy(p, &f, 4);
        break;
    }
    case AWL_F64: memcpy(p, &x, 8); break;
    case AWL_I32: {
        int32_t i = (int32_t)x;
        memcpy(p, &i, 4);
        break;
    }
    default: {
        float f = (float)round_bf16(x);
        uint32_t u;
        memcpy(&u, &f, 4);
        uint16_t h = (uint16_t)(u >> 16);
        memcpy(p, &h, 2);
    }
    }
}

static double at(const tt *t, const awl_view *v, const int64_t *idx)
{
    return host_get(t->host, v->dtype, view_off(v, idx));
}

static double tt_at(const tt *t, const int64_t *idx) { return at(t, &t->v, idx); }

static void tt_upload(tt *t)
{
    ck_assert_int_eq(B->copy_from_host(0, t->v.data, t->host, t->nbytes), AWL_OK);
}

static void tt_download(tt *t)
{
    ck_assert_int_eq(B->synchronize(0), AWL_OK);
    ck_assert_int_eq(B->copy_to_host(0, t->host, t->v.data, t->nbytes), AWL_OK);
}

/* A view of `shape` in layout L over a new storage filled with the guard
 * pattern (host and device). */
static tt tt_new(awl_dtype dt, int ndim, const int64_t *shape, enum layout L)
{
    tt t;
    memset(&t, 0, sizeof t);
    awl_view *v = &t.v;
    v->dtype = dt;
    v->ndim = ndim;
    for (int d = 0; d < ndim; d++) v->shape[d] = shape[d];
    int64_t s = 1;
    if (L == L_PERM && ndim < 2) L = L_CONTIG; /* one axis has no transpose */
    switch (L) {
    case L_PERM: {
        int a = ndim - 2, b = ndim - 1;
        v->strides[a] = 1;
        v->strides[b] = shape[a];
        s = shape[a] * shape[b];
        for (int d = ndim - 3; d >= 0; d--) {
            v->strides[d] = s;
            s *= shape[d];
        }
        v->offset = 1;
        break;
    }
    case L_CONTIG:
        for (int d = ndim - 1; d >= 0; d--) {
            v->strides[d] = s;
            s *= shape[d];
        }
        break;
    case L_SLICED:
        s = 2;
        for (int d = ndim - 1; d >= 0; d--) {
            v->strides[d] = s;
            s *= shape[d] + 1;
        }
        v->offset = 3;
        break;
    default: /* L_BCAST: zero stride on even axes */
        for (int d = ndim - 1; d >= 0; d--) {
            v->strides[d] = d % 2 == 0 ? 0 : s;
            if (d % 2) s *= shape[d];
        }
        v->offset = 2;
    }
    int64_t last = v->offset;
    bool empty = numel(ndim, shape) == 0;
    for (int d = 0; d < ndim && !empty; d++) last += (shape[d] - 1) * v->strides[d];
    t.nbytes = (size_t)(last + 1 + GUARD) * esize(dt);
    t.host = malloc(t.nbytes);
    ck_assert_ptr_nonnull(t.host);
    memset(t.host, SENTINEL, t.nbytes);
    v->data = B->alloc(0, t.nbytes);
    ck_assert_ptr_nonnull(v->data);
    tt_upload(&t);
    return t;
}

/* Sets every element of view v over t's storage to a value of kind g. */
static void fill_view(tt *t, const awl_view *v, enum gen g)
{
    int64_t idx[AWL_MAX_DIMS] = {0};
    if (awl_view_numel(v) == 0) return;
    do host_set(t->host, v->dtype, view_off(v, idx), gen_value(g, v->dtype));
    while (idx_next(idx, v->ndim, v->shape));
    tt_upload(t);
}

static tt tt_input(awl_dtype dt, int ndim, const int64_t *shape, enum layout L, enum gen g)
{
    tt t = tt_new(dt, ndim, shape, L);
    fill_view(&t, &t.v, g);
    return t;
}

static void tt_free(tt *t)
{
    B->free(0, t->v.data, t->nbytes);
    free(t->host);
}

/* After tt_download: storage elements outside every view in vs[] still hold
 * the guard pattern. */
static void check_guards_of(const tt *t, const awl_view *vs, int nv, const char *what)
{
    size_t es = esize(t->v.dtype), n = t->nbytes / es;
    char *covered = calloc(n, 1);
    for (int k = 0; k < nv; k++) {
        int64_t idx[AWL_MAX_DIMS] = {0};
        if (awl_view_numel(&vs[k]) == 0) continue;
        do covered[view_off(&vs[k], idx)] = 1;
        while (idx_next(idx, vs[k].ndim, vs[k].shape));
    }
    unsigned char guard[8];
    memset(guard, SENTINEL, sizeof guard);
    for (size_t i = 0; i < n; i++)
        if (!covered[i] && memcmp(t->host + i * es, guard, es) != 0)
            ck_abort_msg("%s: stray write at storage element %zu", what, i);
    free(covered);
}

static void check_guards(const tt *t, const char *what) { check_guards_of(t, &t->v, 1, what); }

static double tol_for(awl_dtype dt)
{
    switch (dt) {
    case AWL_F32: return 1e-5;
    case AWL_F64: return 1e-12;
    case AWL_I32: return 0;
    default: return 4e-3;
    }
}

/* Downloads out, checks its guards and compares view v (over out's storage)
 * with ref[] in row-major order. */
static void expect_view(tt *out, const awl_view *v, const double *ref, double tol, const char *what)
{
    int64_t n = awl_view_numel(v);
    double rms = 0;
    for (int64_t i = 0; i < n; i++) rms += isfinite(ref[i]) ? ref[i] * ref[i] : 0;
    rms = n ? sqrt(rms / (double)n) : 0;
    int64_t idx[AWL_MAX_DIMS] = {0};
    for (int64_t i = 0; i < n; i++) {
        double got = at(out, v, idx), r = ref[i];
        bool ok = (isnan(got) && isnan(r)) || got == r || fabs(got - r) <= tol * (fabs(r) + rms);
        if (!ok)
            ck_abort_msg("%s: element %lld: got %.17g, want %.17g", what, (long long)i, got, r);
        idx_next(idx, v->ndim, v->shape);
    }
}

static void expect_out(tt *out, const double *ref, double tol, const char *what)
{
    tt_download(out);
    check_guards(out, what);
    expect_view(out, &out->v, ref, tol, what);
}

/* ref[] in row-major order from a function of the logical index. */
#define REF_LOOP(shape_, ndim_, ref_, expr)                                                        \
    do {                                                                                           \
        int64_t idx[AWL_MAX_DIMS] = {0};                                                           \
        int64_t i_ = 0;                                                                            \
        if (numel(ndim_, shape_) > 0) do                                                           \
                ref_[i_++] = (expr);                                                               \
            while (idx_next(idx, ndim_, shape_));                                                  \
    } while (0)

static void setup(void) { awl_clear_error(); }

/* Per-element checks use `if (...) ck_abort_msg()`: every passing ck_assert
 * reports a mark point to Check's parent process, too slow in a loop. */

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
    return op == AWL_UNARY_NEG || op == AWL_UNARY_RELU ||
           (op >= AWL_UNARY_ABS && op <= AWL_UNARY_RSUB_SCALAR) || op >= AWL_UNARY_GT_SCALAR;
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

static tt index_input(int nd, const int64_t *shape, enum layout l, int64_t range)
{
    tt t = tt_new(AWL_I32, nd, shape, l);
    int64_t idx[AWL_MAX_DIMS] = {0};
    do host_set(t.host, AWL_I32, view_off(&t.v, idx), (int)(urand() * (double)range));
    while (idx_next(idx, nd, shape));
    tt_upload(&t);
    return t;
}

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

/* ---- fused kernels ------------------------------------------------------------------ */

/* True when an optional kernel ran; false (skip the check) when the backend
 * lacks it or refuses the dtype. The CPU backend must run float32. */
static bool fused_ran(bool present, int rc, awl_dtype dt)
{
    if (!present) return false;
    if (rc == AWL_ERR_UNSUPPORTED) {
        ck_assert_msg(strcmp(B->name, "cpu") != 0 || dt != AWL_F32,
                      "the cpu backend must run its fused kernels in float32");
        return false;
    }
    ck_assert_int_eq(rc, AWL_OK);
    return true;
}

/* Row r of a contiguous (rows, n) tensor's host mirror, as doubles. */
static void row_of(const tt *t, int64_t r, int64_t n, double *out)
{
    for (int64_t j = 0; j < n; j++) out[j] = host_get(t->host, t->v.dtype, t->v.offset + r * n + j);
}

START_TEST(test_softmax)
{
    const int64_t shapes[2][2] = {{6, 37}, {64, 1000}};
    for (int dt = 0; dt < 2; dt++)
        for (int log_ = 0; log_ < 2; log_++)
            for (int si = 0; si < 2; si++) {
                const int64_t *shape = shapes[si], rows = shape[0], n = shape[1];
                tt x = tt_input(dt, 2, shape, L_CONTIG, GEN_ANY);
                host_set(x.host, dt, 0, 100.0); /* exp(100) overflows float32 */
                tt_upload(&x);
                tt y = tt_new(dt, 2, shape, L_CONTIG), yref = tt_new(dt, 2, shape, L_CONTIG);
                tt dy = tt_input(dt, 2, shape, L_CONTIG, GEN_ANY);
                tt dx = tt_new(dt, 2, shape, L_CONTIG);
                double *ref = malloc((size_t)(rows * n) * sizeof *ref);
                double *xr = malloc((size_t)n * sizeof *xr), *g = malloc((size_t)n * sizeof *g);
                for (int64_t r = 0; r < rows; r++) {
                    row_of(&x, r, n, xr);
                    double m = -INFINITY, s = 0;
                    for (int64_t j = 0; j < n; j++) m = fmax(m, xr[j]);
                    for (int64_t j = 0; j < n; j++) s += exp(xr[j] - m);
                    for (int64_t j = 0; j < n; j++)
                        ref[r * n + j] = log_ ? xr[j] - m - log(s) : exp(xr[j] - m) / s;
                }
                int rc = B->softmax_forward ? B->softmax_forward(&y.v, &x.v, log_) : 0;
                if (fused_ran(B->softmax_forward, rc, dt))
                    expect_out(&y, ref, tol_for(dt), "softmax");

                /* Backward from the reference output, rounded to dtype. */
                for (int64_t i = 0; i < rows * n; i++) host_set(yref.host, dt, i, ref[i]);
                tt_upload(&yref);
                for (int64_t r = 0; r < rows; r++) {
                    row_of(&yref, r, n, xr);
                    row_of(&dy, r, n, g);
                    double s = 0;
                    for (int64_t j = 0; j < n; j++) s += log_ ? g[j] : g[j] * xr[j];
                    for (int64_t j = 0; j < n; j++)
                        ref[r * n + j] = log_ ? g[j] - exp(xr[j]) * s : xr[j] * (g[j] - s);
                }
                rc = B->softmax_backward ? B->softmax_backward(&dx.v, &dy.v, &yref.v, log_) : 0;
                if (fused_ran(B->softmax_backward, rc, dt))
                    expect_out(&dx, ref, tol_for(dt), "softmax_backward");
                free(ref);
                free(xr);
                free(g);
                tt_free(&x);
                tt_free(&y);
                tt_free(&yref);
                tt_free(&dy);
                tt_free(&dx);
            }
}
END_TEST

static void layernorm_case(int64_t rows, int64_t C, bool affine)
{
    const int64_t shape[2] = {rows, C};
    const double eps = 1e-5;
    tt x = tt_input(AWL_F32, 2, shape, L_CONTIG, GEN_ANY);
    tt w = tt_input(AWL_F32, 1, &C, L_CONTIG, GEN_ANY),
       b = tt_input(AWL_F32, 1, &C, L_CONTIG, GEN_ANY);
    tt out = tt_new(AWL_F32, 2, shape, L_CONTIG);
    tt mean = tt_new(AWL_F32, 1, &rows, L_CONTIG), rstd = tt_new(AWL_F32, 1, &rows, L_CONTIG);
    double *ref = malloc((size_t)(rows * C) * sizeof *ref), *xr = malloc((size_t)C * sizeof *xr);
    double *mref = malloc((size_t)rows * sizeof *mref), *rref = malloc((size_t)rows * sizeof *rref);
    for (int64_t r = 0; r < rows; r++) {
        row_of(&x, r, C, xr);
        double mu = 0, var = 0;
        for (int64_t j = 0; j < C; j++) mu += xr[j] / (double)C;
        for (int64_t j = 0; j < C; j++) var += (xr[j] - mu) * (xr[j] - mu) / (double)C;
        mref[r] = mu;
        rref[r] = 1 / sqrt(var + eps);
        for (int64_t j = 0; j < C; j++) {
            double v = (xr[j] - mu) * rref[r];
            ref[r * C + j] = affine ? v * tt_at(&w, &j) + tt_at(&b, &j) : v;
        }
    }
    int rc = B->layernorm_forward
                 ? B->layernorm_forward(&out.v, &mean.v, &rstd.v, &x.v, affine ? &w.v : NULL,
                                        affine ? &b.v : NULL, eps)
                 : 0;
    if (!fused_ran(B->layernorm_forward, rc, AWL_F32)) goto done;
    expect_out(&out, ref, 1e-5, "layernorm out");
    expect_out(&mean, mref, 1e-5, "layernorm mean");
    expect_out(&rstd, rref, 1e-5, "layernorm rstd");

    /* Backward with the saved statistics as the kernel stored them. */
    tt dy = tt_input(AWL_F32, 2, shape, L_CONTIG, GEN_ANY),
       dx = tt_new(AWL_F32, 2, shape, L_CONTIG);
    tt dw = tt_new(AWL_F32, 1, &C, L_CONTIG), db = tt_new(AWL_F32, 1, &C, L_CONTIG);
    double *dwref = calloc((size_t)C, sizeof *dwref), *dbref = calloc((size_t)C, sizeof *dbref);
    double *g = malloc((size_t)C * sizeof *g), *xhat = malloc((size_t)C * sizeof *xhat);
    for (int64_t r = 0; r < rows; r++) {
        row_of(&x, r, C, xr);
        row_of(&dy, r, C, g);
        double mu = ((float *)mean.host)[r], rs = ((float *)rstd.host)[r], a = 0, bb = 0;
        for (int64_t j = 0; j < C; j++) {
            xhat[j] = (xr[j] - mu) * rs;
            dwref[j] += g[j] * xhat[j];
            dbref[j] += g[j];
            double gj = affine ? g[j] * tt_at(&w, &j) : g[j];
            a += gj / (double)C;
            bb += gj * xhat[j] / (double)C;
        }
        for (int64_t j = 0; j < C; j++) {
            double gj = affine ? g[j] * tt_at(&w, &j) : g[j];
            ref[r * C + j] = rs * (gj - a - xhat[j] * bb);
        }
    }
    rc = B->layernorm_backward(&dx.v, affine ? &dw.v : NULL, affine ? &db.v : NULL, &dy.v, &x.v,
                               affine ? &w.v : NULL, &mean.v, &rstd.v);
    if (fused_ran(B->layernorm_backward, rc, AWL_F32)) {
        expect_out(&dx, ref, 1e-5, "layernorm dx");
        if (affine) {
            expect_out(&dw, dwref, 1e-5, "layernorm dweight");
            expect_out(&db, dbref, 1e-5, "layernorm dbias");
        }
    }
    free(dwref);
    free(dbref);
    free(g);
    free(xhat);
    tt_free(&dy);
    tt_free(&dx);
    tt_free(&dw);
    tt_free(&db);
done:
    free(ref);
    free(xr);
    free(mref);
    free(rref);
    tt_free(&x);
    tt_free(&w);
    tt_free(&b);
    tt_free(&out);
    tt_free(&mean);
    tt_free(&rstd);
}

START_TEST(test_layernorm)
{
    layernorm_case(7, 33, true);
    layernorm_case(5, 16, false);
    layernorm_case(300, 64, true);
}
END_TEST

START_TEST(test_cross_entropy)
{
    const int ignore = -100;
    const int64_t sizes[2][2] = {{9, 11}, {64, 1000}};
    for (int si = 0; si < 2; si++)
        for (int bcast = 0; bcast < 2; bcast++) {
            const int64_t N = sizes[si][0], V = sizes[si][1], shape[2] = {N, V};
            tt x = tt_input(AWL_F32, 2, shape, L_CONTIG, GEN_ANY);
            tt t = index_input(1, &N, bcast ? L_SLICED : L_CONTIG, V);
            host_set(t.host, AWL_I32, view_off(&t.v, (int64_t[]){2}), ignore);
            tt_upload(&t);
            tt loss = tt_new(AWL_F32, 1, &N, L_CONTIG), lse = tt_new(AWL_F32, 1, &N, L_CONTIG);
            double *lref = malloc((size_t)N * sizeof *lref),
                   *zref = malloc((size_t)N * sizeof *zref);
            double *xr = malloc((size_t)V * sizeof *xr);
            for (int64_t i = 0; i < N; i++) {
                row_of(&x, i, V, xr);
                double m = -INFINITY, s = 0;
                for (int64_t j = 0; j < V; j++) m = fmax(m, xr[j]);
                for (int64_t j = 0; j < V; j++) s += exp(xr[j] - m);
                zref[i] = m + log(s);
                int ti = (int)tt_at(&t, &i);
                lref[i] = ti == ignore ? 0 : zref[i] - xr[ti];
            }
            int rc = B->cross_entropy_forward
                         ? B->cross_entropy_forward(&loss.v, &lse.v, &x.v, &t.v, ignore)
                         : 0;
            if (fused_ran(B->cross_entropy_forward, rc, AWL_F32)) {
                expect_out(&loss, lref, 1e-5, "cross_entropy loss");
                expect_out(&lse, zref, 1e-5, "cross_entropy lse");
                /* dloss per row, or one value broadcast (the gradient of a mean). */
                tt dl = tt_input(AWL_F32, 1, &N, bcast ? L_BCAST : L_CONTIG, GEN_ANY);
                tt dx = tt_new(AWL_F32, 2, shape, L_CONTIG);
                double *ref = malloc((size_t)(N * V) * sizeof *ref);
                for (int64_t i = 0; i < N; i++) {
                    row_of(&x, i, V, xr);
                    int ti = (int)tt_at(&t, &i);
                    double z = ((float *)lse.host)[i], gi = tt_at(&dl, &i);
                    for (int64_t j = 0; j < V; j++)
                        ref[i * V + j] = ti == ignore ? 0 : gi * (exp(xr[j] - z) - (j == ti));
                }
                rc = B->cross_entropy_backward(&dx.v, &dl.v, &x.v, &lse.v, &t.v, ignore);
                if (fused_ran(B->cross_entropy_backward, rc, AWL_F32))
                    expect_out(&dx, ref, 1e-5, "cross_entropy dlogits");
                free(ref);
                tt_free(&dl);
                tt_free(&dx);
            }
            free(lref);
            free(zref);
            free(xr);
            tt_free(&x);
            tt_free(&t);
            tt_free(&loss);
            tt_free(&lse);
        }
}
END_TEST

/* q, k or v (which = 0, 1, 2) as a (B, H, T, D) view of a (B, T, 3, H, D)
 * buffer, the way a fused qkv projection lays them out. */
static awl_view qkv_view(const tt *buf, const int64_t *s, int which)
{
    const int64_t Bn = s[0], H = s[1], T = s[2], D = s[3];
    awl_view v = buf->v;
    v.ndim = 4;
    const int64_t shape[4] = {Bn, H, T, D}, strides[4] = {T * 3 * H * D, D, 3 * H * D, 1};
    memcpy(v.shape, shape, sizeof shape);
    memcpy(v.strides, strides, sizeof strides);
    v.offset = buf->v.offset + which * H * D;
    return v;
}

/* A (B, H, T, D) view transposing a (B, T, H, D) buffer: how attention's
 * output goes back to (B, T, C) without a copy. */
static tt heads_transposed(const int64_t *s)
{
    const int64_t bthd[4] = {s[0], s[2], s[1], s[3]};
    tt t = tt_new(AWL_F32, 4, bthd, L_CONTIG);
    memcpy(t.v.shape, s, 4 * sizeof *s);
    t.v.strides[1] = s[3];
    t.v.strides[2] = s[1] * s[3];
    return t;
}

static void attention_case(const int64_t *s, bool causal)
{
    const int64_t Bn = s[0], H = s[1], T = s[2], D = s[3], n = Bn * H * T * D;
    const int64_t qkv_shape[5] = {Bn, T, 3, H, D}, bht[3] = {Bn, H, T};
    const double scale = 1 / sqrt((double)D);
    tt qkv = tt_input(AWL_F32, 5, qkv_shape, L_CONTIG, GEN_ANY);
    awl_view qv[3];
    for (int w = 0; w < 3; w++) qv[w] = qkv_view(&qkv, s, w);
    tt out = heads_transposed(s), lse = tt_new(AWL_F32, 3, bht, L_CONTIG);
    tt dout = heads_transposed(s), dqkv = tt_new(AWL_F32, 5, qkv_shape, L_CONTIG);
    fill_view(&dout, &dout.v, GEN_ANY);
    awl_view dv3[3];
    for (int w = 0; w < 3; w++) dv3[w] = qkv_view(&dqkv, s, w);
    double *oref = malloc((size_t)n * sizeof *oref),
           *lref = malloc((size_t)(Bn * H * T) * sizeof *lref);
    double *dref[3];
    for (int w = 0; w < 3; w++) dref[w] = calloc((size_t)n, sizeof(double));
    double *P = malloc((size_t)(T * T) * sizeof *P), *dP = malloc((size_t)(T * T) * sizeof *dP);
#define QKV(w, b, h, t, d) at(&qkv, &qv[w], (int64_t[]){b, h, t, d})
#define DOUT(b, h, t, d) tt_at(&dout, (int64_t[]){b, h, t, d})
#define AT4(b, h, t, d) ((((b)*H + (h)) * T + (t)) * D + (d))
    for (int64_t b = 0; b < Bn; b++)
        for (int64_t h = 0; h < H; h++) {
            for (int64_t t = 0; t < T; t++) {
                int64_t valid = causal ? t + 1 : T;
                double m = -INFINITY, sum = 0;
                for (int64_t j = 0; j < T; j++) {
                    double sc = 0;
                    for (int64_t d = 0; d < D; d++) sc += QKV(0, b, h, t, d) * QKV(1, b, h, j, d);
                    P[t * T + j] = j < valid ? sc * scale : -INFINITY;
                    m = fmax(m, P[t * T + j]);
                }
                for (int64_t j = 0; j < T; j++) sum += exp(P[t * T + j] - m);
                for (int64_t j = 0; j < T; j++) P[t * T + j] = exp(P[t * T + j] - m) / sum;
                lref[(b * H + h) * T + t] = m + log(sum);
                for (int64_t d = 0; d < D; d++) {
                    double o = 0;
                    for (int64_t j = 0; j < T; j++) o += P[t * T + j] * QKV(2, b, h, j, d);
                    oref[AT4(b, h, t, d)] = o;
                }
            }
            /* dv = P^T dO; dP = dO v^T; dS = P (dP - rowsum(P dP)); dq = scale dS k;
             * dk = scale dS^T q. */
            for (int64_t t = 0; t < T; t++) {
                double delta = 0;
                for (int64_t j = 0; j < T; j++) {
                    double g = 0;
                    for (int64_t d = 0; d < D; d++) g += DOUT(b, h, t, d) * QKV(2, b, h, j, d);
                    dP[t * T + j] = g;
                    delta += P[t * T + j] * g;
                }
                for (int64_t j = 0; j < T; j++) {
                    double ds = P[t * T + j] * (dP[t * T + j] - delta) * scale;
                    for (int64_t d = 0; d < D; d++) {
                        dref[2][AT4(b, h, j, d)] += P[t * T + j] * DOUT(b, h, t, d);
                        dref[0][AT4(b, h, t, d)] += ds * QKV(1, b, h, j, d);
                        dref[1][AT4(b, h, j, d)] += ds * QKV(0, b, h, t, d);
                    }
                }
            }
        }
#undef QKV
#undef DOUT
#undef AT4
    int rc = B->attention_forward
                 ? B->attention_forward(&out.v, &lse.v, &qv[0], &qv[1], &qv[2], scale, causal)
                 : 0;
    if (fused_ran(B->attention_forward, rc, AWL_F32)) {
        expect_out(&out, oref, 1e-5, "attention out");
        expect_out(&lse, lref, 1e-5, "attention lse");
        rc = B->attention_backward(&dv3[0], &dv3[1], &dv3[2], &dout.v, &qv[0], &qv[1], &qv[2],
                                   &out.v, &lse.v, scale, causal);
        if (fused_ran(B->attention_backward, rc, AWL_F32)) {
            tt_download(&dqkv);
            check_guards_of(&dqkv, dv3, 3, "attention dqkv");
            expect_view(&dqkv, &dv3[0], dref[0], 1e-5, "attention dq");
            expect_view(&dqkv, &dv3[1], dref[1], 1e-5, "attention dk");
            expect_view(&dqkv, &dv3[2], dref[2], 1e-5, "attention dv");
        }
    }
    for (int w = 0; w < 3; w++) free(dref[w]);
    free(oref);
    free(lref);
    free(P);
    free(dP);
    tt_free(&qkv);
    tt_free(&out);
    tt_free(&lse);
    tt_free(&dout);
    tt_free(&dqkv);
}

START_TEST(test_attention)
{
    const int64_t small[4] = {2, 3, 7, 4}, larger[4] = {2, 2, 64, 16}, ragged[4] = {1, 2, 37, 20};
    for (int causal = 0; causal < 2; causal++) {
        attention_case(small, causal);
        attention_case(larger, causal);
        attention_case(ragged, causal);
    }
}
END_TEST

START_TEST(test_adamw)
{
    if (!B->adamw_step) return;
    const int64_t sizes[3] = {5, 1000, 40000};
    const float wd[3] = {0.1f, 0.0f, 0.1f};
    const awl_adamw_args args = {1e-2f, 0.9f, 0.95f, 1e-8f, 3};
    tt p[3], g[3], m[3], v[3];
    awl_view pv[3], gv[3], mv[3], vv[3];
    double *ref[3][3];
    const double bc1 = 1 - pow(args.beta1, 3), bc2 = 1 - pow(args.beta2, 3);
    for (int i = 0; i < 3; i++) {
        p[i] = tt_input(AWL_F32, 1, &sizes[i], L_CONTIG, GEN_ANY);
        g[i] = tt_input(AWL_F32, 1, &sizes[i], L_CONTIG, GEN_ANY);
        m[i] = tt_input(AWL_F32, 1, &sizes[i], L_CONTIG, GEN_ANY);
        v[i] = tt_input(AWL_F32, 1, &sizes[i], L_CONTIG, GEN_POS);
        pv[i] = p[i].v, gv[i] = g[i].v, mv[i] = m[i].v, vv[i] = v[i].v;
        for (int k = 0; k < 3; k++) ref[i][k] = malloc((size_t)sizes[i] * sizeof(double));
        for (int64_t e = 0; e < sizes[i]; e++) {
            double pe = tt_at(&p[i], &e), ge = tt_at(&g[i], &e);
            double me = args.beta1 * tt_at(&m[i], &e) + (1 - args.beta1) * ge;
            double ve = args.beta2 * tt_at(&v[i], &e) + (1 - args.beta2) * ge * ge;
            pe *= 1 - (double)args.lr * wd[i];
            pe -= args.lr / bc1 * me / (sqrt(ve / bc2) + args.eps);
            ref[i][0][e] = pe, ref[i][1][e] = me, ref[i][2][e] = ve;
        }
    }
    int rc = B->adamw_step(3, pv, gv, mv, vv, wd, &args);
    if (fused_ran(true, rc, AWL_F32))
        for (int i = 0; i < 3; i++) {
            expect_out(&p[i], ref[i][0], 1e-5, "adamw param");
            expect_out(&m[i], ref[i][1], 1e-5, "adamw m");
            expect_out(&v[i], ref[i][2], 1e-5, "adamw v");
        }
    for (int i = 0; i < 3; i++) {
        for (int k = 0; k < 3; k++) free(ref[i][k]);
        tt_free(&p[i]);
        tt_free(&g[i]);
        tt_free(&m[i]);
        tt_free(&v[i]);
    }
}
END_TEST

/* GELU backward: dx = dy * gelu'(x), against the derivative of the tanh
 * form in float64, below and above the parallel threshold. */
START_TEST(test_gelu_backward)
{
    if (!B->gelu_backward) return;
    const int64_t sizes[2] = {37, 50000};
    for (int c = 0; c < 2; c++) {
        tt x = tt_input(AWL_F32, 1, &sizes[c], L_CONTIG, GEN_ANY);
        tt dy = tt_input(AWL_F32, 1, &sizes[c], L_CONTIG, GEN_ANY);
        tt dx = tt_new(AWL_F32, 1, &sizes[c], L_CONTIG);
        double *ref = malloc((size_t)sizes[c] * sizeof *ref);
        const double k = 0.7978845608028654, a = 0.044715;
        for (int64_t e = 0; e < sizes[c]; e++) {
            double xe = tt_at(&x, &e), t = tanh(k * (xe + a * xe * xe * xe));
            double slope = 0.5 * (1 + t) + 0.5 * xe * (1 - t * t) * k * (1 + 3 * a * xe * xe);
            ref[e] = tt_at(&dy, &e) * slope;
        }
        int rc = B->gelu_backward(&dx.v, &dy.v, &x.v);
        if (fused_ran(true, rc, AWL_F32)) expect_out(&dx, ref, 1e-5, "gelu_backward");
        free(ref);
        tt_free(&x);
        tt_free(&dy);
        tt_free(&dx);
    }
}
END_TEST

static Suite *backend_suite(const char *name)
{
    static char title[64]; /* Check keeps the pointer */
    snprintf(title, sizeof title, "backend_%s", name);
    Suite *s = suite_create(title);
    struct {
        const char *name;
        const TTest *test;
    } cases[] = {
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
        {"fused", test_softmax},
        {"fused", test_layernorm},
        {"fused", test_cross_entropy},
        {"fused", test_attention},
        {"fused", test_adamw},
        {"fused", test_gelu_backward},
    };
    TCase *tc = NULL;
    const char *current = "";
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (strcmp(current, cases[i].name) != 0) {
            current = cases[i].name;
            tc = tcase_create(current);
            tcase_add_checked_fixture(tc, setup, NULL);
            tcase_set_timeout(tc, 300);
            suite_add_tcase(s, tc);
        }
        tcase_add_test(tc, cases[i].test);
    }
    return s;
}

/* Runs the suite on every backend AWL_TEST_BACKEND names that has a device. */
int main(void)
{
    const char *env = getenv("AWL_TEST_BACKEND");
    char list[256];
    snprintf(list, sizeof list, "%s", env && env[0] ? env : "cpu");
    const char *all[] = {"cpu", "cuda"};
    int failed = 0, found = 0;
    for (int i = 0; i < 2; i++) {
        bool wanted = strcmp(list, "all") == 0;
        char copy[256];
        memcpy(copy, list, sizeof copy);
        for (char *tok = strtok(copy, ","); tok && !wanted; tok = strtok(NULL, ","))
            wanted = strcmp(tok, all[i]) == 0;
        const awl_backend *be = wanted ? awl_backend_find(all[i]) : NULL;
        if (!be) continue;
        found++;
        if (be->device_count() <= 0) {
            printf("backend %s: no device, skipped\n", all[i]);
            continue;
        }
        B = be;
        SRunner *sr = srunner_create(backend_suite(be->name));
        /* a forked child cannot use a GPU its parent initialised */
        if (strcmp(be->name, "cpu") != 0) srunner_set_fork_status(sr, CK_NOFORK);
        srunner_run_all(sr, CK_NORMAL);
        failed += srunner_ntests_failed(sr);
        srunner_free(sr);
    }
    /* A named backend that is not built in is an error; one built without a
     * device on this machine is a skip. */
    if (!found) printf("no backend built matches AWL_TEST_BACKEND=%s\n", list);
    return failed == 0 && found > 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
