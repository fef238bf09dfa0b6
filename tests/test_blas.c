/*
 * tests/test_blas.c - the BLAS library under the CPU backend: loaded with
 * the widest kernels the CPU can run, a user's OPENBLAS_CORETYPE kept.
 *
 * OpenBLAS chooses its kernels once per process, when awl loads it, so each
 * case runs in a child process of its own (whatever CK_FORK says) and
 * reports back through a pipe.
 */
#include <check.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>

#include "awl.h"
#include "backends/cpu/cpu_gemm.h"

/* Runs fn in a child; fn writes "" on success or what went wrong into msg. */
static void in_child(void (*fn)(char *msg, size_t size))
{
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        char msg[512] = "";
        close(fds[0]);
        fn(msg, sizeof msg);
        ssize_t ignored = write(fds[1], msg, strlen(msg));
        (void)ignored;
        _exit(0);
    }
    close(fds[1]);
    char msg[512] = "";
    ssize_t n = read(fds[0], msg, sizeof msg - 1);
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child died (status %d)",
                  status);
    msg[n > 0 ? n : 0] = '\0';
    ck_assert_msg(msg[0] == '\0', "%s", msg);
}

static void default_kernels(char *msg, size_t size)
{
    unsetenv("OPENBLAS_CORETYPE");
    awl_blas_info b;
    if (awl_blas_get_info(&b) < 0) {
        snprintf(msg, size, "not loaded: %s", awl_last_error());
        return;
    }
    if (b.kernels_weaker)
        snprintf(msg, size, "%s runs %s kernels, weaker than this CPU's %s allows (%s)", b.library,
                 b.kernels, b.cpu_features, b.best_kernels);
    else if (b.best_kernels[0] && strcasecmp(b.kernels, b.best_kernels) != 0)
        snprintf(msg, size, "kernels %s, but awl chose %s", b.kernels, b.best_kernels);
    else if (strcmp(b.chosen_by, b.best_kernels[0] ? "awl" : "library") != 0)
        snprintf(msg, size, "chosen by %s", b.chosen_by);
    else if (getenv("OPENBLAS_CORETYPE"))
        snprintf(msg, size, "OPENBLAS_CORETYPE left in the environment");
    else if (strncmp(b.library, "OpenBLAS ", 9) != 0)
        snprintf(msg, size, "library named '%s'", b.library);
}

START_TEST(test_default_kernels_are_the_widest)
{
    in_child(default_kernels);
}
END_TEST

/* Prescott (SSE3) runs on every x86-64 CPU, so any CPU can test with it. */
static void user_setting_kept(char *msg, size_t size)
{
    setenv("OPENBLAS_CORETYPE", "Prescott", 1);
    awl_blas_info b;
    if (awl_blas_get_info(&b) < 0)
        snprintf(msg, size, "not loaded: %s", awl_last_error());
    else if (strcasecmp(b.kernels, "Prescott") != 0 || strcmp(b.chosen_by, "user") != 0)
        snprintf(msg, size, "kernels %s chosen by %s; the user asked for Prescott", b.kernels,
                 b.chosen_by);
    else if (b.kernels_weaker != (strcmp(b.cpu_features, "sse") != 0))
        snprintf(msg, size, "kernels_weaker is %d on a CPU with %s", b.kernels_weaker,
                 b.cpu_features);
    else if (!getenv("OPENBLAS_CORETYPE") || strcmp(getenv("OPENBLAS_CORETYPE"), "Prescott"))
        snprintf(msg, size, "the user's OPENBLAS_CORETYPE was changed");
}

START_TEST(test_user_setting_is_kept)
{
    in_child(user_setting_kept);
}
END_TEST

/* A setting the CPU cannot run is kept too, with a warning (no product is
 * run here: it would die of SIGILL). */
static void user_setting_too_wide(char *msg, size_t size)
{
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return; /* nothing wider to ask for */
    setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
    awl_blas_info b;
    awl_blas_get_info(&b);
    if (!strstr(b.error, "OPENBLAS_CORETYPE=SkylakeX needs instructions this CPU lacks"))
        snprintf(msg, size, "no warning: '%s'", b.error);
}

START_TEST(test_user_setting_too_wide_is_reported)
{
    in_child(user_setting_too_wide);
}
END_TEST

static void products(char *msg, size_t size)
{
    /* (2,3) @ (3,2), and the same with b given transposed */
    const float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {7, 8, 9, 10, 11, 12}, bt[6] = {7, 9, 11, 8, 10, 12};
    const float want[4] = {58, 64, 139, 154};
    float c[4] = {0}, ct[4] = {0};
    double ad[6] = {1, 2, 3, 4, 5, 6}, bd[6] = {7, 8, 9, 10, 11, 12}, cd[4] = {1, 1, 1, 1};
    if (awl_blas_sgemm(false, false, 2, 2, 3, 1.0f, a, 3, b, 2, 0.0f, c, 2) < 0 ||
        awl_blas_sgemm(false, true, 2, 2, 3, 1.0f, a, 3, bt, 3, 0.0f, ct, 2) < 0 ||
        awl_blas_dgemm(false, false, 2, 2, 3, 1.0, ad, 3, bd, 2, 1.0, cd, 2) < 0) {
        snprintf(msg, size, "gemm failed: %s", awl_last_error());
        return;
    }
    for (int i = 0; i < 4; i++)
        if (c[i] != want[i] || ct[i] != want[i] || cd[i] != want[i] + 1)
            snprintf(msg, size, "element %d: %g %g %g, want %g", i, c[i], ct[i], cd[i], want[i]);
}

START_TEST(test_products)
{
    in_child(products);
}
END_TEST

/* float32 products run awl's own code on a CPU with AVX-512 (cpu_gemm.h),
 * or with AVX2 and FMA when AWL_CPU_GEMM=avx2, and the library's kernels
 * elsewhere or when AWL_CPU_GEMM=blas. */
static void gemm_f32_named(char *msg, size_t size)
{
    __builtin_cpu_init();
    const char *setting = getenv("AWL_CPU_GEMM");
    const bool avx2 = setting && strcmp(setting, "avx2") == 0;
    const bool own =
        avx2 ? __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")
             : __builtin_cpu_supports("avx512f") && !(setting && strcmp(setting, "blas") == 0);
    awl_blas_info b;
    if (awl_blas_get_info(&b) < 0)
        snprintf(msg, size, "not loaded: %s", awl_last_error());
    else if (own ? strncmp(b.gemm_f32, avx2 ? "awl avx2 " : "awl avx512 ", avx2 ? 9 : 11) != 0
                 : strcmp(b.gemm_f32, b.kernels) != 0)
        snprintf(msg, size, "float32 products run '%s' on a CPU with %s (kernels %s)", b.gemm_f32,
                 b.cpu_features, b.kernels);
}

static void gemm_f32_blas_when_asked(char *msg, size_t size)
{
    setenv("AWL_CPU_GEMM", "blas", 1);
    gemm_f32_named(msg, size);
}

static void gemm_f32_avx2_when_asked(char *msg, size_t size)
{
    setenv("AWL_CPU_GEMM", "avx2", 1);
    gemm_f32_named(msg, size);
}

START_TEST(test_gemm_f32_is_named)
{
    in_child(gemm_f32_named);
    in_child(gemm_f32_blas_when_asked);
    in_child(gemm_f32_avx2_when_asked);
}
END_TEST

/* awl's float32 product under blockings that split every dimension into
 * several blocks, with edges, and copy A or read it in place, against sums
 * in double: every transpose, with and without accumulation and bias. */
static void gemm_f32_blockings(char *msg, size_t size)
{
    const awl_cpu_gemm_blocking blockings[] = {
        awl_cpu_gemm_blocking_get(),
        {.kc = 32, .nc = 64, .mc = 24, .copy_a = AWL_CPU_GEMM_COPY_NONE},
        {.kc = 32, .nc = 64, .mc = 24, .copy_a = AWL_CPU_GEMM_COPY_BLOCKS},
        {.kc = 32, .nc = 64, .mc = 24, .copy_a = AWL_CPU_GEMM_COPY_TILES},
        {.kc = 384, .nc = 480, .mc = 1536, .copy_a = AWL_CPU_GEMM_COPY_BLOCKS},
        {.kc = 384, .nc = 480, .mc = 1536, .copy_a = AWL_CPU_GEMM_COPY_TILES},
        {.kc = 17, .nc = 32, .mc = 12, .copy_a = AWL_CPU_GEMM_COPY_BLOCKS},
        {.kc = 17, .nc = 32, .mc = 12, .copy_a = AWL_CPU_GEMM_COPY_TILES},
    };
    enum { M = 50, N = 90, K = 100 };
    float a[M * K], b[K * N], bias[N], c[M * N];
    for (int i = 0; i < M * K; i++) a[i] = (float)((i * 37 % 101) - 50) / 64.0f;
    for (int i = 0; i < K * N; i++) b[i] = (float)((i * 53 % 89) - 44) / 64.0f;
    for (int j = 0; j < N; j++) bias[j] = (float)j / 8.0f;
    for (size_t x = 0; x < sizeof blockings / sizeof *blockings; x++)
        for (int t = 0; t < 8; t++) {
            const bool ta = t & 1, tb = t & 2, acc = t & 4;
            if (!awl_cpu_gemm_blocking_set(blockings[x])) {
                snprintf(msg, size, "blocking %zu refused", x);
                return;
            }
            for (int i = 0; i < M * N; i++) c[i] = acc ? 1.0f : -99.0f;
            /* a holds A (M x K) or A^T (K x M); b holds B (K x N) or B^T */
            if (!awl_cpu_gemm_f32(ta, tb, M, N, K, a, ta ? M : K, b, tb ? K : N, acc, c, N,
                                  acc ? NULL : bias))
                return; /* not for awl's product on this CPU: BLAS's products are tested elsewhere
                         */
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N; j++) {
                    double want = acc ? 1.0 : bias[j];
                    for (int p = 0; p < K; p++)
                        want += (double)a[ta ? p * M + i : i * K + p] *
                                (double)b[tb ? j * K + p : p * N + j];
                    const double got = c[i * N + j];
                    if (got - want > 1e-4 || want - got > 1e-4) {
                        char name[32];
                        snprintf(msg, size,
                                 "blocking %s, ta %d tb %d accumulate %d: C(%d, %d) = %.7g, want "
                                 "%.7g",
                                 awl_cpu_gemm_blocking_name(blockings[x], name, sizeof name), ta,
                                 tb, acc, i, j, got, want);
                        return;
                    }
                }
        }
}

static void gemm_f32_blockings_avx2(char *msg, size_t size)
{
    setenv("AWL_CPU_GEMM", "avx2", 1);
    gemm_f32_blockings(msg, size);
}

/* AWL_CPU_GEMM_BLOCKING sets the blocking, and gemm_f32 names it; a value
 * out of range is ignored. */
static void blocking_from_environment(const char *value, const char *want, char *msg, size_t size)
{
    setenv("AWL_CPU_GEMM_BLOCKING", value, 1);
    awl_blas_info b;
    if (awl_blas_get_info(&b) < 0)
        snprintf(msg, size, "not loaded: %s", awl_last_error());
    else if (strncmp(b.gemm_f32, "awl ", 4) == 0 && !strstr(b.gemm_f32, want))
        snprintf(msg, size, "AWL_CPU_GEMM_BLOCKING=%s: gemm_f32 is '%s', want blocks %s", value,
                 b.gemm_f32, want);
}

static void blocking_set(char *msg, size_t size)
{
    blocking_from_environment("256x960x768c", "blocks 256x960x768c", msg, size);
}

static void blocking_set_tiles(char *msg, size_t size)
{
    blocking_from_environment("384x480x1536t", "blocks 384x480x1536t", msg, size);
}

static void blocking_out_of_range(char *msg, size_t size)
{
    blocking_from_environment("384x100x1536", "blocks 384x480x1536", msg, size);
}

START_TEST(test_gemm_f32_blockings)
{
    in_child(gemm_f32_blockings);
    in_child(gemm_f32_blockings_avx2);
    in_child(blocking_set);
    in_child(blocking_set_tiles);
    in_child(blocking_out_of_range);
}
END_TEST

static Suite *blas_suite(void)
{
    Suite *s = suite_create("blas");
    TCase *tc = tcase_create("loading");
    tcase_add_test(tc, test_default_kernels_are_the_widest);
    tcase_add_test(tc, test_user_setting_is_kept);
    tcase_add_test(tc, test_user_setting_too_wide_is_reported);
    tcase_add_test(tc, test_products);
    tcase_add_test(tc, test_gemm_f32_is_named);
    tcase_add_test(tc, test_gemm_f32_blockings);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(blas_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
