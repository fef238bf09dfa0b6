/*
 * tests/helpers/cuda_harness.h - what the CUDA conformance suites share
 * (tests/test_cuda.c: the primitives; tests/test_cuda_fused.c: the fused
 * kernels): the CUDA backend against the CPU backend, op by op.
 *
 * Every case describes its operands once (dtype, shape, strides, offset,
 * role) and runs the same call on both backends. The CPU backend is the
 * reference (tests/test_backend.c validates it against float64 loops). For
 * bfloat16, where the CPU backend only stores and converts, the reference
 * runs on float32 copies of the (exactly representable) bf16 inputs and its
 * results are rounded to bf16 once.
 *
 * What a case checks (METHOD.md's rules):
 *   - inputs are fresh random values, never zeros (a seed per run, printed,
 *     AWL_TEST_SEED to replay);
 *   - outputs are poisoned (NaN, or 0xA5 bytes for int32) before each run:
 *     every element of the output view must be written, every element outside
 *     it (gaps of a sliced view and 64 guard elements past the storage) must
 *     keep its poison bit for bit;
 *   - ||cuda - cpu|| / ||cpu|| within a tolerance per dtype (float64 1e-12,
 *     float32 1e-5, bfloat16 1e-2, int32 exact) unless the case says why not;
 *   - the CUDA op runs twice from the same inputs and must give the same bits
 *     (determinism: no atomics whose order varies).
 * Views cover contiguous, transposed, sliced, broadcast (zero stride) and
 * permuted layouts.
 *
 * Without a GPU (CI) a suite prints why it skipped and exits 0
 * (cuda_tests_main). Header-only (static functions), included by the two
 * suites alone, as tests/helpers/backend_harness.h.
 */
#ifndef AWL_TESTS_CUDA_HARNESS_H
#define AWL_TESTS_CUDA_HARNESS_H

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/backend.h"

#ifdef AWL_WITH_CUDA
#include <cuda_runtime_api.h>

#define HARNESS static __attribute__((unused))

#define GUARD 64
#define MAX_OPS 16

static const awl_backend *cuda, *cpu;
HARNESS uint64_t rng_state;

/* ---- random values ----------------------------------------------------------- */

HARNESS uint64_t next_u64(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

HARNESS double next_uniform(void)
{
    return (double)(next_u64() >> 11) * (1.0 / 9007199254740992.0);
}

/* ---- operands ------------------------------------------------------------------ */

typedef enum role { IN, OUT, INOUT } role;

typedef struct operand {
    role role;
    awl_dtype dtype;
    int ndim;
    int64_t shape[AWL_MAX_DIMS];
    int64_t strides[AWL_MAX_DIMS];
    int64_t offset;
    double lo, hi; /* range of random contents */
    bool integer;  /* integers in [lo, hi] (indices, conditions) */
} operand;

HARNESS operand opnd(role r, awl_dtype dt, int ndim, const int64_t *shape)
{
    operand o;
    memset(&o, 0, sizeof o);
    o.role = r;
    o.dtype = dt;
    o.ndim = ndim;
    o.lo = -2.0;
    o.hi = 2.0;
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        o.shape[d] = shape[d];
        o.strides[d] = s;
        s *= shape[d];
    }
    return o;
}

#define OPND(r, dt, ...)                                                                           \
    opnd(r, dt, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__})

HARNESS operand ranged(operand o, double lo, double hi)
{
    o.lo = lo;
    o.hi = hi;
    return o;
}

HARNESS operand ints(operand o, double lo, double hi)
{
    o = ranged(o, lo, hi);
    o.integer = true;
    return o;
}

/* The same logical shape read from storage where axes a and b are swapped
 * (a transposed view). */
HARNESS operand transposed(operand o, int a, int b)
{
    int64_t shape[AWL_MAX_DIMS];
    memcpy(shape, o.shape, sizeof shape);
    shape[a] = o.shape[b];
    shape[b] = o.shape[a];
    int64_t s = 1, st[AWL_MAX_DIMS] = {0};
    for (int d = o.ndim - 1; d >= 0; d--) {
        st[d] = s;
        s *= shape[d];
    }
    o.strides[a] = st[b];
    o.strides[b] = st[a];
    for (int d = 0; d < o.ndim; d++)
        if (d != a && d != b) o.strides[d] = st[d];
    return o;
}

/* Every `step`-th element along axis d of a larger storage, starting at 1. */
HARNESS operand sliced(operand o, int d, int step)
{
    int64_t s = 1;
    for (int k = o.ndim - 1; k >= 0; k--) {
        int64_t n = k == d ? o.shape[k] * step + 1 : o.shape[k];
        o.strides[k] = k == d ? s * step : s;
        s *= n;
    }
    int64_t inner = 1;
    for (int k = d + 1; k < o.ndim; k++) inner *= o.shape[k];
    o.offset = inner > 0 ? o.strides[d] / step : 1;
    return o;
}

/* Broadcast along axis d: stride 0 (the storage holds one copy). */
HARNESS operand broadcast(operand o, int d)
{
    o.strides[d] = 0;
    return o;
}

HARNESS int64_t storage_elems(const operand *o)
{
    int64_t last = o->offset;
    for (int d = 0; d < o->ndim; d++) {
        if (o->shape[d] == 0) return 0;
        last += (o->shape[d] - 1) * o->strides[d];
    }
    return last + 1;
}

HARNESS double load_el(awl_dtype dt, const void *p, int64_t i)
{
    switch (dt) {
    case AWL_F32: return ((const float *)p)[i];
    case AWL_F64: return ((const double *)p)[i];
    case AWL_I32: return ((const int32_t *)p)[i];
    default: return awl_bf16_to_float(((const awl_bf16 *)p)[i]);
    }
}

HARNESS void store_el(awl_dtype dt, void *p, int64_t i, double v)
{
    switch (dt) {
    case AWL_F32: ((float *)p)[i] = (float)v; break;
    case AWL_F64: ((double *)p)[i] = v; break;
    case AWL_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    default: ((awl_bf16 *)p)[i] = awl_float_to_bf16((float)v); break;
    }
}

/* ---- cases --------------------------------------------------------------------- */

typedef int (*op_fn)(const awl_backend *be, awl_view *const *v, const void *ctx);

typedef struct tcase {
    char name[160];
    int n;
    operand op[MAX_OPS];
    op_fn fn;
    const void *ctx;
    double tol;   /* 0: the dtype's default */
    bool ref_f32; /* run the CPU on float32 copies of bfloat16 operands */
} tcase;

HARNESS double default_tol(awl_dtype dt)
{
    switch (dt) {
    case AWL_F64: return 1e-12;
    case AWL_F32: return 1e-5;
    case AWL_BF16: return 1e-2;
    default: return 0.0;
    }
}

typedef struct buf {
    int64_t elems; /* storage, guard excluded */
    size_t es, bytes;
    unsigned char *init, *back, *back2;
    void *host, *host32, *dev;
} buf;

HARNESS void fill_init(const operand *o, buf *b)
{
    int64_t total = b->elems + GUARD;
    if (o->role == OUT) {
        memset(b->init, o->dtype == AWL_I32 ? 0xA5 : 0xFF, b->bytes);
        return;
    }
    for (int64_t i = 0; i < total; i++) {
        double v = o->lo + (o->hi - o->lo) * next_uniform();
        if (o->integer) {
            v = floor(o->lo + (o->hi - o->lo + 1) * next_uniform());
            if (v > o->hi) v = o->hi;
        } else if (o->lo < 0 && o->hi > 0 && fabs(v) < 0.05 * (o->hi - o->lo)) {
            v = v < 0 ? -0.05 * (o->hi - o->lo) : 0.05 * (o->hi - o->lo);
        }
        store_el(o->dtype, b->init, i, v);
    }
}

HARNESS awl_view view_on(const operand *o, void *data, awl_dtype dt)
{
    awl_view v;
    memset(&v, 0, sizeof v);
    v.data = data;
    v.offset = o->offset;
    v.ndim = o->ndim;
    v.dtype = dt;
    memcpy(v.shape, o->shape, sizeof v.shape);
    memcpy(v.strides, o->strides, sizeof v.strides);
    return v;
}

/* Marks the storage elements the view covers. */
HARNESS void mark_view(const operand *o, unsigned char *mask)
{
    int64_t n = 1;
    for (int d = 0; d < o->ndim; d++) n *= o->shape[d];
    for (int64_t i = 0; i < n; i++) {
        int64_t q = i, off = o->offset;
        for (int d = o->ndim - 1; d >= 0; d--) {
            off += (q % o->shape[d]) * o->strides[d];
            q /= o->shape[d];
        }
        mask[off] = 1;
    }
}

/* Runs both backends; asserts; returns the largest relative error. */
HARNESS double run_case(const tcase *c)
{
    buf b[MAX_OPS];
    awl_view views[MAX_OPS];
    awl_view *vp[MAX_OPS];
    memset(b, 0, sizeof b);
    for (int i = 0; i < c->n; i++) {
        const operand *o = &c->op[i];
        b[i].elems = storage_elems(o);
        b[i].es = awl_dtype_size(o->dtype);
        b[i].bytes = (size_t)(b[i].elems + GUARD) * b[i].es;
        b[i].init = malloc(b[i].bytes);
        b[i].back = malloc(b[i].bytes);
        b[i].back2 = malloc(b[i].bytes);
        b[i].host = cpu->alloc(0, b[i].bytes);
        b[i].dev = cuda->alloc(0, b[i].bytes);
        ck_assert_msg(b[i].init && b[i].back && b[i].back2 && b[i].host && b[i].dev,
                      "%s: allocation: %s", c->name, awl_last_error());
        fill_init(o, &b[i]);
        memcpy(b[i].host, b[i].init, b[i].bytes);
        vp[i] = &views[i];
    }

    /* The reference. */
    for (int i = 0; i < c->n; i++) {
        const operand *o = &c->op[i];
        if (c->ref_f32 && o->dtype == AWL_BF16) {
            int64_t total = b[i].elems + GUARD;
            b[i].host32 = malloc((size_t)total * 4);
            for (int64_t k = 0; k < total; k++)
                ((float *)b[i].host32)[k] = (float)load_el(AWL_BF16, b[i].host, k);
            views[i] = view_on(o, b[i].host32, AWL_F32);
        } else {
            views[i] = view_on(o, b[i].host, o->dtype);
        }
    }
    awl_clear_error();
    int rc = c->fn(cpu, vp, c->ctx);
    ck_assert_msg(rc == AWL_OK, "%s: cpu backend returned %d: %s", c->name, rc, awl_last_error());
    for (int i = 0; i < c->n; i++) {
        if (!b[i].host32) continue;
        if (c->op[i].role != IN)
            for (int64_t k = 0; k < b[i].elems + GUARD; k++)
                store_el(AWL_BF16, b[i].host, k, ((float *)b[i].host32)[k]);
        free(b[i].host32);
    }

    /* CUDA, twice from the same inputs. */
    for (int run = 0; run < 2; run++) {
        for (int i = 0; i < c->n; i++) {
            ck_assert_int_eq(cuda->copy_from_host(0, b[i].dev, b[i].init, b[i].bytes), AWL_OK);
            views[i] = view_on(&c->op[i], b[i].dev, c->op[i].dtype);
        }
        rc = c->fn(cuda, vp, c->ctx);
        ck_assert_msg(rc == AWL_OK, "%s: cuda backend returned %d: %s", c->name, rc,
                      awl_last_error());
        ck_assert_msg(cuda->synchronize(0) == AWL_OK, "%s: %s", c->name, awl_last_error());
        for (int i = 0; i < c->n; i++)
            ck_assert_int_eq(
                cuda->copy_to_host(0, run ? b[i].back2 : b[i].back, b[i].dev, b[i].bytes), AWL_OK);
    }

    double worst = 0.0;
    for (int i = 0; i < c->n; i++) {
        const operand *o = &c->op[i];
        if (o->role == IN) goto done;
        ck_assert_msg(memcmp(b[i].back, b[i].back2, b[i].bytes) == 0,
                      "%s: operand %d differs between two identical runs (not deterministic)",
                      c->name, i);
        unsigned char *mask = calloc((size_t)(b[i].elems + GUARD), 1);
        mark_view(o, mask);
        double num = 0, den = 0;
        for (int64_t k = 0; k < b[i].elems + GUARD; k++) {
            const unsigned char *pg = b[i].back + k * b[i].es, *pi = b[i].init + k * b[i].es;
            if (!mask[k]) {
                ck_assert_msg(memcmp(pg, pi, b[i].es) == 0,
                              "%s: operand %d: element %lld outside the view was written", c->name,
                              i, (long long)k);
                continue;
            }
            double r = load_el(o->dtype, b[i].host, k), g = load_el(o->dtype, b[i].back, k);
            if (isnan(r) && isnan(g)) continue;
            ck_assert_msg(!isnan(g) && !isnan(r),
                          "%s: operand %d: element %lld is %g on cuda and %g on cpu (unwritten?)",
                          c->name, i, (long long)k, g, r);
            if (isinf(r) && r == g) continue;
            num += (g - r) * (g - r);
            den += r * r;
        }
        free(mask);
        double rel = den > 0 ? sqrt(num / den) : sqrt(num);
        double tol = c->tol > 0 ? c->tol : default_tol(o->dtype);
        ck_assert_msg(rel <= tol, "%s: operand %d: relative error %.3g > %.3g", c->name, i, rel,
                      tol);
        if (rel > worst) worst = rel;
    done:;
    }
    for (int i = 0; i < c->n; i++) {
        cuda->free(0, b[i].dev, b[i].bytes);
        cpu->free(0, b[i].host, b[i].bytes);
        free(b[i].init);
        free(b[i].back);
        free(b[i].back2);
    }
    return worst;
}

HARNESS const awl_dtype float_types[] = {AWL_F32, AWL_F64, AWL_BF16};

/* A test and the group (Check tcase) it runs in: CK_RUN_CASE=<group> runs
 * one group. */
typedef struct cuda_test {
    const char *group;
    const TTest *test;
} cuda_test;

/* Runs the tests as suite `name` in this process (a child forked after CUDA
 * was initialised cannot use the device); skips, with the reason, without
 * a device. */
HARNESS int cuda_tests_main(const char *name, const cuda_test *tests, size_t n)
{
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        printf("test_%s: skipped: no CUDA device (cudaGetDeviceCount: %s)\n", name,
               err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
        return 0;
    }
    cuda = awl_cuda_backend();
    cpu = awl_cpu_backend();
    const char *seed = getenv("AWL_TEST_SEED");
    rng_state = seed ? strtoull(seed, NULL, 10) : (uint64_t)time(NULL);
    printf("test_%s: %d device(s); inputs from AWL_TEST_SEED=%llu\n", name, count,
           (unsigned long long)rng_state);
    Suite *s = suite_create(name);
    TCase *tc = NULL;
    const char *current = "";
    for (size_t i = 0; i < n; i++) {
        if (strcmp(current, tests[i].group) != 0) {
            current = tests[i].group;
            tc = tcase_create(current);
            suite_add_tcase(s, tc);
        }
        tcase_add_test(tc, tests[i].test);
    }
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
#endif

/* Without CUDA built in: the line a suite prints before it exits 0. */
#define CUDA_SKIP_UNBUILT(prog)                                                                    \
    printf("%s: skipped: awl was built without CUDA (AWL_WITH_CUDA=OFF)\n", prog)

#endif
