/*
 * tests/helpers/backend_harness.h - what the backend conformance suites
 * share (tests/test_backend.c: the primitives; tests/test_backend_fused.c:
 * the optional fused kernels).
 *
 * Both call a backend's table directly (no tensor layer) and compare every
 * op with straightforward float64 loops. Data are random (a small LCG, never
 * zeros where a zero would hide a bug), and every op runs on contiguous,
 * permuted (last two axes swapped), sliced (step 2, offset 3) and broadcast
 * (zero-stride) views, in every dtype the op is defined for. Buffers live on
 * the backend's device (alloc, copy_from_host, copy_to_host), so the same
 * suites check any backend.
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
 * device_count() > 0 gets its own suite run (backend_tests_main).
 *
 * Header-only (static functions) and included by the two suites alone, so the
 * other test programs, which link every .c file of tests/helpers, do not
 * carry it.
 */
#ifndef AWL_TESTS_BACKEND_HARNESS_H
#define AWL_TESTS_BACKEND_HARNESS_H

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"

static const awl_backend *B; /* the backend under test */

/* Each suite uses only part of the harness. */
#define HARNESS static __attribute__((unused))

/* ---- random data -------------------------------------------------------------- */

static uint64_t lcg = 88172645463325252ull;

HARNESS double urand(void)
{
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(lcg >> 11) * (1.0 / 9007199254740992.0);
}

enum gen {
    GEN_ANY,  /* [-2, 2), magnitude >= 0.05 */
    GEN_POS,  /* [0.1, 2) */
    GEN_GRID, /* multiples of 0.5 in [-1.5, 1.5]: equal values occur */
};

HARNESS double gen_value(enum gen g, awl_dtype dt)
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
HARNESS const char *layout_name[L_COUNT] = {"contig", "perm", "sliced", "bcast"};

#define GUARD 16
#define SENTINEL 0xA5

typedef struct tt {
    awl_view v;
    char *host;
    size_t nbytes;
} tt;

HARNESS size_t esize(awl_dtype dt) { return awl_dtype_size(dt); }

/* noinline: once this is inlined into a caller that passes &j for a 1-D view,
 * GCC 12 cannot see that v->ndim bounds the reads and warns (-Werror) that
 * idx[1..] "may be used uninitialized"; which CPUs trigger it depends on
 * -march=native's cost model. */
__attribute__((noinline)) HARNESS int64_t view_off(const awl_view *v, const int64_t *idx)
{
    int64_t off = v->offset;
    for (int d = 0; d < v->ndim; d++) off += idx[d] * v->strides[d];
    return off;
}

/* Next row-major index of shape; false after the last. */
HARNESS bool idx_next(int64_t *idx, int ndim, const int64_t *shape)
{
    for (int d = ndim - 1; d >= 0; d--) {
        if (++idx[d] < shape[d]) return true;
        idx[d] = 0;
    }
    return false;
}

HARNESS int64_t numel(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    return n;
}

HARNESS double bf16_bits_to_double(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Round to bfloat16, nearest-even, written from the definition. */
HARNESS double round_bf16(double x)
{
    float f = (float)x;
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t lower = u & 0xffffu, upper = u >> 16;
    if (lower > 0x8000u || (lower == 0x8000u && (upper & 1u))) upper++;
    return bf16_bits_to_double((uint16_t)upper);
}

HARNESS double host_get(const char *host, awl_dtype dt, int64_t off)
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

HARNESS void host_set(char *host, awl_dtype dt, int64_t off, double x)
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

HARNESS double at(const tt *t, const awl_view *v, const int64_t *idx)
{
    return host_get(t->host, v->dtype, view_off(v, idx));
}

HARNESS double tt_at(const tt *t, const int64_t *idx) { return at(t, &t->v, idx); }

HARNESS void tt_upload(tt *t)
{
    ck_assert_int_eq(B->copy_from_host(0, t->v.data, t->host, t->nbytes), AWL_OK);
}

HARNESS void tt_download(tt *t)
{
    ck_assert_int_eq(B->synchronize(0), AWL_OK);
    ck_assert_int_eq(B->copy_to_host(0, t->host, t->v.data, t->nbytes), AWL_OK);
}

/* A view of `shape` in layout L over a new storage filled with the guard
 * pattern (host and device). */
HARNESS tt tt_new(awl_dtype dt, int ndim, const int64_t *shape, enum layout L)
{
    tt t;
    memset(&t, 0, sizeof t);
    awl_view *v = &t.v;
    v->dtype = dt;
    v->ndim = ndim;
    for (int d = 0; d < ndim; d++) v->shape[d] = shape[d];
    int64_t s = 1;
    if (L == L_PERM && ndim >= 2) { /* last two axes swapped */
        int a = ndim - 2, b = ndim - 1;
        v->strides[a] = 1;
        v->strides[b] = shape[a];
        s = shape[a] * shape[b];
        for (int d = ndim - 3; d >= 0; d--) {
            v->strides[d] = s;
            s *= shape[d];
        }
        v->offset = 1;
    } else if (L == L_SLICED) {
        s = 2;
        for (int d = ndim - 1; d >= 0; d--) {
            v->strides[d] = s;
            s *= shape[d] + 1;
        }
        v->offset = 3;
    } else if (L == L_BCAST) { /* zero stride on even axes */
        for (int d = ndim - 1; d >= 0; d--) {
            v->strides[d] = d % 2 == 0 ? 0 : s;
            if (d % 2) s *= shape[d];
        }
        v->offset = 2;
    } else { /* L_CONTIG, and L_PERM of one axis, which has no transpose */
        for (int d = ndim - 1; d >= 0; d--) {
            v->strides[d] = s;
            s *= shape[d];
        }
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
HARNESS void fill_view(tt *t, const awl_view *v, enum gen g)
{
    int64_t idx[AWL_MAX_DIMS] = {0};
    if (awl_view_numel(v) == 0) return;
    do host_set(t->host, v->dtype, view_off(v, idx), gen_value(g, v->dtype));
    while (idx_next(idx, v->ndim, v->shape));
    tt_upload(t);
}

HARNESS tt tt_input(awl_dtype dt, int ndim, const int64_t *shape, enum layout L, enum gen g)
{
    tt t = tt_new(dt, ndim, shape, L);
    fill_view(&t, &t.v, g);
    return t;
}

/* int32 indices in [0, range), in layout l. */
HARNESS tt index_input(int nd, const int64_t *shape, enum layout l, int64_t range)
{
    tt t = tt_new(AWL_I32, nd, shape, l);
    int64_t idx[AWL_MAX_DIMS] = {0};
    do host_set(t.host, AWL_I32, view_off(&t.v, idx), (int)(urand() * (double)range));
    while (idx_next(idx, nd, shape));
    tt_upload(&t);
    return t;
}

HARNESS void tt_free(tt *t)
{
    B->free(0, t->v.data, t->nbytes);
    free(t->host);
}

/* After tt_download: storage elements outside every view in vs[] still hold
 * the guard pattern. */
HARNESS void check_guards_of(const tt *t, const awl_view *vs, int nv, const char *what)
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

HARNESS void check_guards(const tt *t, const char *what) { check_guards_of(t, &t->v, 1, what); }

HARNESS double tol_for(awl_dtype dt)
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
HARNESS void expect_view(tt *out, const awl_view *v, const double *ref, double tol,
                         const char *what)
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

HARNESS void expect_out(tt *out, const double *ref, double tol, const char *what)
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

HARNESS void setup(void) { awl_clear_error(); }

/* Per-element checks use `if (...) ck_abort_msg()`: every passing ck_assert
 * reports a mark point to Check's parent process, too slow in a loop. */

/* ---- running the suite on each backend ------------------------------------------- */

/* A test and the Check test case (group) it belongs to. */
typedef struct backend_test {
    const char *group;
    const TTest *test;
} backend_test;

/* The suite "<title>_<backend>" with the tests in order, consecutive tests
 * of one group in one Check test case. */
HARNESS Suite *backend_suite(const char *title, const char *backend, const backend_test *tests,
                             size_t n)
{
    static char name[64]; /* Check keeps the pointer */
    snprintf(name, sizeof name, "%s_%s", title, backend);
    Suite *s = suite_create(name);
    TCase *tc = NULL;
    const char *current = "";
    for (size_t i = 0; i < n; i++) {
        if (strcmp(current, tests[i].group) != 0) {
            current = tests[i].group;
            tc = tcase_create(current);
            tcase_add_checked_fixture(tc, setup, NULL);
            tcase_set_timeout(tc, 300);
            suite_add_tcase(s, tc);
        }
        tcase_add_test(tc, tests[i].test);
    }
    return s;
}

/* Runs the tests on every backend AWL_TEST_BACKEND names that has a device:
 * main() of both suites. */
HARNESS int backend_tests_main(const char *title, const backend_test *tests, size_t n)
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
        SRunner *sr = srunner_create(backend_suite(title, be->name, tests, n));
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

#endif
