/*
 * tests/test_backend.c - what the conformance runner does not cover, and
 * the runner itself.
 *
 * Every backend's ops are checked by awl-check (tools/awl-check; CTest runs
 * `awl-check --device cpu`). This suite checks the rest of the interface
 * on each backend that AWL_TEST_BACKEND names ("cpu" by default, a comma-
 * separated list, or "all"): memory, its cache and out-of-memory message,
 * refusals that name the op, reductions that do not depend on the thread
 * count, and the Philox generator against its published answers. And it
 * checks the checker: a backend with one deliberate mistake at a time (a
 * write past the end, into a gap, into an input, an element left
 * unwritten, a wrong value, a NaN, a result that changes between runs, a
 * stub, a required dtype declared unsupported) must fail with the message
 * docs/backend-guide.md shows for it.
 *
 *     AWL_TEST_BACKEND=cuda CK_FORK=no ./build/test_backend
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_philox.h"
#include "common/philox.h"
#include "tensor/tensor.h"
#include "tools/awl-check/awl_check.h"

/* Lets the out-of-memory test see NULL under AddressSanitizer too. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }

static const awl_backend *B; /* the backend under test */

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

/* Element e of copy c: distinct for every copy and exact in float32. */
static float copy_pattern(int c, int64_t e) { return (float)(c * 1000003 + e); }

/* Once copy_from_host returns, the caller's buffer is free to reuse and
 * the work queued next sees the data, whether or not the backend has
 * finished the copy by then (a GPU backend may queue it from a pinned
 * staging buffer). Twelve copies in a row of sizes on both sides of 1 MiB,
 * each from the same host buffer overwritten as soon as the call returns,
 * each copied on the device right away; then every copy and every device
 * copy of it read back. */
START_TEST(test_copies_from_reused_buffer)
{
    enum { N = 12 };
    const size_t sizes[3] = {4000, (size_t)1 << 20, ((size_t)1 << 20) + 4};
    const size_t most = sizes[2];
    float *host = malloc(most), *back = malloc(most);
    ck_assert_ptr_nonnull(host);
    ck_assert_ptr_nonnull(back);
    void *dev[N], *twin[N];
    for (int c = 0; c < N; c++) {
        const size_t nbytes = sizes[c % 3];
        const int64_t n = (int64_t)(nbytes / sizeof(float));
        for (int64_t e = 0; e < n; e++) host[e] = copy_pattern(c, e);
        dev[c] = B->alloc(0, nbytes);
        twin[c] = B->alloc(0, nbytes);
        ck_assert_ptr_nonnull(dev[c]);
        ck_assert_ptr_nonnull(twin[c]);
        ck_assert_int_eq(B->copy_from_host(0, dev[c], host, nbytes), AWL_OK);
        memset(host, 0xff, nbytes); /* the caller's buffer, reused at once */
        awl_view from = awl_view_1d(dev[c], AWL_F32, n), to = awl_view_1d(twin[c], AWL_F32, n);
        ck_assert_int_eq(B->copy(&to, &from), AWL_OK);
    }
    for (int c = 0; c < N; c++) {
        const size_t nbytes = sizes[c % 3];
        const int64_t n = (int64_t)(nbytes / sizeof(float));
        for (int k = 0; k < 2; k++) {
            ck_assert_int_eq(B->copy_to_host(0, back, k ? twin[c] : dev[c], nbytes), AWL_OK);
            for (int64_t e = 0; e < n; e++)
                if (back[e] != copy_pattern(c, e))
                    ck_abort_msg("copy %d (%zu bytes)%s: element %lld is %g, not %g", c, nbytes,
                                 k ? ", copied on the device" : "", (long long)e, back[e],
                                 copy_pattern(c, e));
        }
        B->free(0, dev[c], nbytes);
        B->free(0, twin[c], nbytes);
    }
    free(host);
    free(back);
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

/* ---- refusals and determinism ------------------------------------------------------- */

START_TEST(test_refusals)
{
    void *d = B->alloc(0, 64);
    awl_view i = awl_view_1d(d, AWL_I32, 4), h = awl_view_1d(d, AWL_BF16, 4);
    awl_clear_error();
    ck_assert_int_eq(B->unary(AWL_UNARY_EXP, &i, &i, 0), AWL_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "exp"));
    /* bf16 arithmetic is optional (backend.h): a backend that declares it
     * unsupported must also refuse it with a message naming the dtype */
    if (!awl_backend_supports(B, AWL_KERNEL_BINARY, AWL_BINARY_ADD, AWL_BF16)) {
        awl_clear_error();
        ck_assert_int_eq(B->binary(AWL_BINARY_ADD, &h, &h, &h), AWL_ERR_INVALID);
        ck_assert_ptr_nonnull(strstr(awl_last_error(), "bfloat16"));
    }
    B->free(0, d, 64);
}
END_TEST

START_TEST(test_reduce_deterministic)
{
    /* One output (split across threads when they exist) and three; float64,
     * since a float32 result would round away a different order. */
    if (!B->set_num_threads) return;
    const int64_t rows[2] = {1, 3}, cols[2] = {1200000, 400000};
    for (int si = 0; si < 2; si++) {
        int64_t n = rows[si] * cols[si];
        double *host = malloc((size_t)n * sizeof *host), first[3], got[3];
        for (int64_t e = 0; e < n; e++) host[e] = sin((double)e) * 1e3 + 1e-3 * (double)(e % 7);
        void *in = B->alloc(0, (size_t)n * 8), *out = B->alloc(0, 24);
        ck_assert_int_eq(B->copy_from_host(0, in, host, (size_t)n * 8), AWL_OK);
        awl_view vi = awl_view_1d(in, AWL_F64, n), vo = awl_view_1d(out, AWL_F64, rows[si]);
        vi.ndim = vo.ndim = 2;
        vi.shape[0] = vo.shape[0] = rows[si];
        vi.shape[1] = cols[si], vo.shape[1] = 1;
        vi.strides[0] = cols[si], vo.strides[0] = 1;
        vi.strides[1] = vo.strides[1] = 1;
        for (int threads = 1; threads <= 4; threads++) {
            B->set_num_threads(threads);
            ck_assert_int_eq(B->reduce(AWL_REDUCE_SUM, &vo, &vi), AWL_OK);
            ck_assert_int_eq(B->copy_to_host(0, got, out, (size_t)rows[si] * 8), AWL_OK);
            if (threads == 1) memcpy(first, got, sizeof first);
            ck_assert_mem_eq(first, got, (size_t)rows[si] * 8);
        }
        B->free(0, in, (size_t)n * 8);
        B->free(0, out, 24);
        free(host);
    }
    B->set_num_threads(2);
}
END_TEST

START_TEST(test_thread_count)
{
    /* what a benchmark line reports before anything sets the count: the
     * backend's own (OMP_NUM_THREADS, or the cores), never 0 */
    ck_assert_int_ge(awl_get_num_threads(), 1);
    if (!B->set_num_threads || !B->get_num_threads) return;
    B->set_num_threads(3);
    ck_assert_int_eq(B->get_num_threads(), 3);
    B->set_num_threads(2);
}
END_TEST

/* ---- random: the generator itself --------------------------------------------------------- */

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
    /* common/philox.h, which every backend and awl-check's reference use,
     * gives the same words for the counters it takes (the upper two 0) */
    for (uint64_t seed = 0; seed < 3; seed++)
        for (uint64_t block = 0; block < 100; block += 7) {
            uint32_t c[4] = {(uint32_t)block, (uint32_t)(block >> 32), 0, 0};
            uint32_t k[2] = {(uint32_t)(seed * 0x9E3779B97F4A7C15ull),
                             (uint32_t)((seed * 0x9E3779B97F4A7C15ull) >> 32)};
            uint32_t w[4];
            philox_ref(c, k, w);
            awl_philox_block b = awl_philox4x32(seed * 0x9E3779B97F4A7C15ull, block);
            ck_assert_mem_eq(w, b.w, sizeof w);
        }
}
END_TEST

/* backends/cpu/cpu_philox.h's many blocks at a time (sixteen side by side
 * where the CPU has AVX-512) give awl_philox4x32's words, block by block:
 * counts that are and are not multiples of sixteen, and first blocks whose
 * low word wraps inside a group (the carry into the high word). */
START_TEST(test_philox_blocks)
{
    const uint64_t firsts[] = {0, 5, 0xfffffff8u, 0x1fffffff5ull, 0xfffffffffffffff0ull};
    const int64_t counts[] = {1, 16, 20, 37, 64};
    uint32_t words[4 * 64];
    for (int f = 0; f < 5; f++)
        for (int c = 0; c < 5; c++) {
            const uint64_t seed = 0x9E3779B97F4A7C15ull * (uint64_t)(f + 1);
            cpu_philox_blocks(seed, firsts[f], counts[c], words);
            for (int64_t b = 0; b < counts[c]; b++)
                ck_assert_mem_eq(words + 4 * b, awl_philox4x32(seed, firsts[f] + (uint64_t)b).w,
                                 4 * sizeof *words);
        }
}
END_TEST

/* ---- the checker catches mistakes --------------------------------------------------------- */

static const awl_backend *cpu;
static awl_backend broken;
static int calls;

/* First element of a view (contiguous in the cases used below). */
static float *first_f32(const awl_view *v) { return (float *)v->data + v->offset; }

static bool plain_f32(const awl_view *v)
{
    return v->dtype == AWL_F32 && awl_view_is_contiguous(v) && awl_view_numel(v) > 1;
}

static int unary_past_end(awl_unary_op op, const awl_view *out, const awl_view *in, double a)
{
    int rc = cpu->unary(op, out, in, a);
    if (rc == AWL_OK && plain_f32(out)) first_f32(out)[awl_view_numel(out)] = 0; /* one more */
    return rc;
}

static int unary_before_start(awl_unary_op op, const awl_view *out, const awl_view *in, double a)
{
    int rc = cpu->unary(op, out, in, a);
    if (rc == AWL_OK && out->offset > 0 && out->dtype == AWL_F32) first_f32(out)[-1] = 0;
    return rc;
}

/* Writes numel elements from the first one on, as if every view were
 * contiguous. */
static int fill_ignores_strides(const awl_view *out, double value)
{
    if (out->dtype != AWL_F32) return cpu->fill(out, value);
    for (int64_t i = 0; i < awl_view_numel(out); i++) first_f32(out)[i] = (float)value;
    return AWL_OK;
}

/* Leaves the last row of a 2-d output alone. */
static int binary_skips_a_row(awl_binary_op op, const awl_view *out, const awl_view *a,
                              const awl_view *b)
{
    awl_view o = *out, x = *a, y = *b;
    if (out->ndim == 2 && out->shape[0] > 1)
        o.shape[0] = x.shape[0] = y.shape[0] = out->shape[0] - 1;
    return cpu->binary(op, &o, &x, &y);
}

static int unary_wrong_value(awl_unary_op op, const awl_view *out, const awl_view *in, double a)
{
    int rc = cpu->unary(op, out, in, a);
    if (rc == AWL_OK && plain_f32(out)) first_f32(out)[1] += 0.01f;
    return rc;
}

static int unary_nan(awl_unary_op op, const awl_view *out, const awl_view *in, double a)
{
    int rc = cpu->unary(op, out, in, a);
    if (rc == AWL_OK && plain_f32(out)) first_f32(out)[2] = NAN;
    return rc;
}

static int unary_writes_input(awl_unary_op op, const awl_view *out, const awl_view *in, double a)
{
    int rc = cpu->unary(op, out, in, a);
    if (rc == AWL_OK && plain_f32(in) && in->data != out->data) first_f32(in)[0] = 7;
    return rc;
}

static int reduce_varies(awl_reduce_op op, const awl_view *out, const awl_view *in)
{
    int rc = cpu->reduce(op, out, in);
    if (rc == AWL_OK && out->dtype == AWL_F32 && awl_view_numel(out) > 0)
        first_f32(out)[0] += (float)(calls++ % 2) * 1e-3f;
    return rc;
}

static int unary_stub(awl_unary_op op, const awl_view *out, const awl_view *in, double a)
{
    (void)op, (void)out, (void)in, (void)a;
    return awl_error(AWL_ERR_NOT_IMPLEMENTED, "broken: unary is not written yet");
}

static bool no_float32_matmul(awl_kernel kernel, int op, awl_dtype dtype)
{
    (void)op;
    return !(kernel == AWL_KERNEL_MATMUL && dtype == AWL_F32);
}

/* Runs awl-check on `broken` for op and dtype, and returns its output
 * (malloc'd) and counts. */
static char *check_broken(const char *op, int dtype, awl_check_counts *counts, int *status)
{
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    awl_check_options o = {.device = "broken", .op = op, .dtype = dtype, .seed = 5, .out = f};
    memset(counts, 0, sizeof *counts);
    ck_assert_int_eq(awl_backend_register(&broken), AWL_OK);
    *status = awl_check_run(&o, counts);
    fclose(f);
    return text;
}

/* The mistake is reported as FAIL (or MISSING) with `message` in its line. */
static void expect_caught(const char *op, const char *message, int want_status)
{
    awl_check_counts c;
    int status;
    char *text = check_broken(op, AWL_F32, &c, &status);
    ck_assert_msg(status == want_status, "%s: status %d, expected %d:\n%s", op, status, want_status,
                  text);
    ck_assert_msg(strstr(text, message) != NULL, "%s: no line says \"%s\":\n%s", op, message, text);
    free(text);
    broken = *cpu;
    broken.name = "broken";
}

START_TEST(test_checker_catches)
{
    cpu = awl_cpu_backend();
    broken = *cpu;
    broken.name = "broken";
    /* the unchanged copy passes */
    awl_check_counts c;
    int status;
    char *text = check_broken("unary.neg", AWL_F32, &c, &status);
    ck_assert_msg(status == AWL_CHECK_OK && c.passed > 0 && c.failed == 0, "%s", text);
    free(text);

    broken.unary = unary_past_end;
    expect_caught("unary.neg", "wrote past the end of out by 4 bytes", AWL_CHECK_FAILED);
    broken.unary = unary_before_start;
    expect_caught("unary.neg", "before the view starts", AWL_CHECK_FAILED);
    broken.fill = fill_ignores_strides;
    expect_caught("fill", "a gap between the strided view's elements", AWL_CHECK_FAILED);
    broken.binary = binary_skips_a_row;
    expect_caught("binary.add", "out(4,0) was never written (it still holds the poison value)",
                  AWL_CHECK_FAILED);
    broken.unary = unary_wrong_value;
    expect_caught("unary.exp", "> tol 1e-05; first at out(0,1): got", AWL_CHECK_FAILED);
    broken.unary = unary_nan;
    expect_caught("unary.exp", "out(0,2) is nan, expected", AWL_CHECK_FAILED);
    broken.unary = unary_writes_input;
    expect_caught("unary.neg", "changed its input x (storage element 0)", AWL_CHECK_FAILED);
    broken.reduce = reduce_varies;
    expect_caught("reduce.sum", "two runs from the same inputs differ", AWL_CHECK_FAILED);
    broken.unary = unary_stub;
    expect_caught("unary", "MISSING     unary", AWL_CHECK_MISSING);
    broken.unary = unary_stub;
    expect_caught("unary", "checks: broken: unary is not written yet", AWL_CHECK_MISSING);
    broken.unary = NULL;
    expect_caught("unary", "not implemented (its entry in the table is NULL)", AWL_CHECK_MISSING);
    broken.supports = no_float32_matmul;
    expect_caught("matmul", "declared unsupported, but every backend must compute it",
                  AWL_CHECK_FAILED);
    broken.softmax_forward = NULL;
    expect_caught("softmax_forward", "not provided (the framework composes it from primitives)",
                  AWL_CHECK_OK);
    ck_assert_int_eq(awl_backend_register(awl_cpu_backend()), AWL_OK);
}
END_TEST

/* --progress: one line per milestone, the first problem under it. */
START_TEST(test_checker_progress)
{
    cpu = awl_cpu_backend();
    broken = *cpu;
    broken.name = "broken";
    broken.unary = unary_stub;
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    awl_check_options o = {.device = "broken", .op = "unary.neg", .progress = true, .out = f};
    ck_assert_int_eq(awl_backend_register(&broken), AWL_OK);
    awl_check_counts c = {0, 0, 0, 0};
    ck_assert_int_eq(awl_check_run(&o, &c), AWL_CHECK_MISSING);
    fclose(f);
    ck_assert_msg(strstr(text, "milestone 2  element-wise ops with broadcasting") != NULL, "%s",
                  text);
    ck_assert_msg(strstr(text, "[todo]") != NULL, "%s", text);
    ck_assert_msg(strstr(text, "broken: unary is not written yet") != NULL, "%s", text);
    ck_assert_msg(strstr(text, "0 passed, 0 failed,") != NULL, "%s", text);
    free(text);
}
END_TEST

/* ---- running the suite on each backend ---------------------------------------------- */

static Suite *backend_suite(const char *name)
{
    static char title[64]; /* Check keeps the pointer */
    snprintf(title, sizeof title, "backend_%s", name);
    Suite *s = suite_create(title);
    TCase *tc = tcase_create("backend");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_memory);
    tcase_add_test(tc, test_copies_from_reused_buffer);
    tcase_add_test(tc, test_memory_cache);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_reduce_deterministic);
    tcase_add_test(tc, test_thread_count);
    suite_add_tcase(s, tc);
    if (strcmp(name, "cpu") == 0) { /* once: they need no device */
        TCase *checker = tcase_create("checker");
        tcase_set_timeout(checker, 300);
        tcase_add_test(checker, test_philox_known_answers);
        tcase_add_test(checker, test_philox_blocks);
        tcase_add_test(checker, test_checker_catches);
        tcase_add_test(checker, test_checker_progress);
        suite_add_tcase(s, checker);
    }
    return s;
}

int main(void)
{
    const char *env = getenv("AWL_TEST_BACKEND");
    char list[256];
    snprintf(list, sizeof list, "%s", env && env[0] ? env : "cpu");
    int failed = 0, found = 0;
    for (int i = 0; i < awl_backend_count(); i++) {
        const awl_backend *be = awl_backend_at(i);
        bool wanted = strcmp(list, "all") == 0;
        char copy[256];
        memcpy(copy, list, sizeof copy);
        for (char *tok = strtok(copy, ","); tok && !wanted; tok = strtok(NULL, ","))
            wanted = strcmp(tok, be->name) == 0;
        if (!wanted) continue;
        found++;
        if (be->device_count() <= 0) {
            printf("backend %s: no device, skipped\n", be->name);
            continue;
        }
        B = be;
        SRunner *sr = srunner_create(backend_suite(be->name));
        /* a forked child cannot use a GPU its parent initialised */
        if (!be->host_memory) srunner_set_fork_status(sr, CK_NOFORK);
        srunner_run_all(sr, CK_NORMAL);
        failed += srunner_ntests_failed(sr);
        srunner_free(sr);
    }
    if (!found) printf("no backend built matches AWL_TEST_BACKEND=%s\n", list);
    return failed == 0 && found > 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
