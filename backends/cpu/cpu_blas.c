/*
 * backends/cpu/cpu_blas.c - OpenBLAS, loaded at the first BLAS call with the
 * kernels this CPU can run.
 *
 * OpenBLAS builds such as Debian's (DYNAMIC_ARCH) carry kernels for many
 * CPUs and pick one set when the library is loaded, from the CPU's model
 * number. A CPU the library does not know (newer than it, or behind a
 * hypervisor that reports a made-up model) gets the most generic set,
 * "Prescott" (SSE3): a third of the speed of the AVX-512 kernels on the same
 * core. The library reads one override, the environment variable
 * OPENBLAS_CORETYPE, and only while it is being loaded. A program linked
 * with OpenBLAS has loaded it before main runs, so awl does not link it:
 * the first BLAS call loads it here, with dlopen, after setting
 * OPENBLAS_CORETYPE to the kernels the CPU's vector features allow:
 *
 *     AVX-512 (F, BW, VL, DQ)  SkylakeX
 *     AVX2 and FMA             Zen on AMD, Haswell on others
 *     AVX                      Sandybridge
 *     less                     the library's own choice
 *
 * The features come from CPUID, which hypervisors pass through even where
 * they hide the model. A user's own OPENBLAS_CORETYPE is never replaced
 * (only reported, with a warning when it asks for instructions the CPU
 * lacks, which would end in SIGILL). The variable is removed again after
 * loading when awl set it, so the environment stays the user's.
 *
 * The library's path is the OpenMP build CMake found (AWL_OPENBLAS_PATH),
 * else whatever the loader finds as libopenblas.so.0 (LD_LIBRARY_PATH).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "backends/cpu/cpu_blas.h"
#include "backends/cpu/cpu_gemm.h"
#include "backends/cpu/cpu_internal.h"
#include "common/error.h"

#ifndef AWL_OPENBLAS_PATH
#define AWL_OPENBLAS_PATH "libopenblas.so.0"
#endif

/* CBLAS's enumerations (cblas.h): the values are the ABI. */
enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 };

typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *,
                         int, float, float *, int);
typedef void (*dgemm_fn)(int, int, int, int, int, int, double, const double *, int,
                         const double *, int, double, double *, int);
typedef void (*sgemv_fn)(int, int, int, int, float, const float *, int, const float *, int, float,
                         float *, int);
typedef void (*dgemv_fn)(int, int, int, int, double, const double *, int, const double *, int,
                         double, double *, int);

static struct {
    pthread_once_t once;
    void *handle;
    sgemm_fn sgemm;
    dgemm_fn dgemm;
    sgemv_fn sgemv;
    dgemv_fn dgemv;
    void (*set_num_threads)(int);
    int (*get_num_threads)(void);
    awl_blas_info info;
} blas = {.once = PTHREAD_ONCE_INIT};

/* How wide the vector unit behind a set of kernels is: 0 SSE, 1 AVX,
 * 2 AVX2 + FMA, 3 AVX-512. Names are OpenBLAS's core names. */
static int kernel_level(const char *name)
{
    static const struct {
        const char *name;
        int level;
    } known[] = {
        {"SkylakeX", 3},    {"CooperLake", 3}, {"SapphireRapids", 3}, {"Haswell", 2},
        {"Zen", 2},         {"Excavator", 2},  {"Sandybridge", 1},    {"Bulldozer", 1},
        {"Piledriver", 1},  {"Steamroller", 1},
    };
    for (size_t i = 0; i < sizeof known / sizeof *known; i++)
        if (strcasecmp(name, known[i].name) == 0) return known[i].level;
    return 0;
}

static int cpu_feature_level(void)
{
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        return 3;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 2;
    if (__builtin_cpu_supports("avx")) return 1;
    return 0;
}

static const char *best_kernels_for(int level)
{
    switch (level) {
    case 3: return "SkylakeX";
    case 2: return __builtin_cpu_is("amd") ? "Zen" : "Haswell";
    case 1: return "Sandybridge";
    default: return "";
    }
}

static void copy_text(char *dst, size_t size, const char *src)
{
    snprintf(dst, size, "%s", src ? src : "");
}

static void load(void)
{
    awl_blas_info *in = &blas.info;
    static const char *const feature_names[] = {"sse", "avx", "avx2+fma", "avx512"};
    int level = cpu_feature_level();
    copy_text(in->cpu_features, sizeof in->cpu_features, feature_names[level]);
    copy_text(in->best_kernels, sizeof in->best_kernels, best_kernels_for(level));

    const char *user = getenv("OPENBLAS_CORETYPE");
    bool set_here = false;
    if (user && *user) {
        in->chosen_by = "user";
        if (kernel_level(user) > level)
            snprintf(in->error, sizeof in->error,
                     "OPENBLAS_CORETYPE=%s needs instructions this CPU lacks (it has %s)", user,
                     in->cpu_features);
    } else if (in->best_kernels[0]) {
        setenv("OPENBLAS_CORETYPE", in->best_kernels, 1);
        set_here = true;
        in->chosen_by = "awl";
    } else {
        in->chosen_by = "library";
    }

    blas.handle = dlopen(AWL_OPENBLAS_PATH, RTLD_NOW | RTLD_LOCAL);
    if (!blas.handle) blas.handle = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
    if (set_here) unsetenv("OPENBLAS_CORETYPE");
    if (!blas.handle) {
        copy_text(in->error, sizeof in->error, dlerror());
        return;
    }
    blas.sgemm = (sgemm_fn)dlsym(blas.handle, "cblas_sgemm");
    blas.dgemm = (dgemm_fn)dlsym(blas.handle, "cblas_dgemm");
    blas.sgemv = (sgemv_fn)dlsym(blas.handle, "cblas_sgemv");
    blas.dgemv = (dgemv_fn)dlsym(blas.handle, "cblas_dgemv");
    *(void **)&blas.set_num_threads = dlsym(blas.handle, "openblas_set_num_threads");
    *(void **)&blas.get_num_threads = dlsym(blas.handle, "openblas_get_num_threads");
    const char *(*get_config)(void) = NULL, *(*get_corename)(void) = NULL;
    *(void **)&get_config = dlsym(blas.handle, "openblas_get_config");
    *(void **)&get_corename = dlsym(blas.handle, "openblas_get_corename");
    if (!blas.sgemm || !blas.dgemm || !blas.sgemv || !blas.dgemv || !blas.set_num_threads ||
        !get_config || !get_corename) {
        snprintf(in->error, sizeof in->error, "%s is not OpenBLAS (a symbol is missing)",
                 AWL_OPENBLAS_PATH);
        blas.sgemm = NULL;
        return;
    }
    /* "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ... Haswell MAX_THREADS=64" */
    const char *config = get_config();
    copy_text(in->config, sizeof in->config, config);
    const char *space = strchr(config, ' ');
    space = space ? strchr(space + 1, ' ') : NULL;
    int name_len = space ? (int)(space - config) : (int)strlen(config);
    snprintf(in->library, sizeof in->library, "%.*s", name_len, config);
    copy_text(in->kernels, sizeof in->kernels, get_corename());
    in->kernels_weaker = kernel_level(in->kernels) < level;
    in->loaded = true;
}

int awl_cpu_blas_load(const char *caller)
{
    pthread_once(&blas.once, load);
    if (blas.info.loaded) return AWL_OK;
    return awl_error(AWL_ERR_UNSUPPORTED, "%s: OpenBLAS could not be loaded: %s", caller,
                     blas.info.error);
}

int awl_blas_get_info(awl_blas_info *out)
{
    int status = awl_cpu_blas_load("awl_blas_get_info");
    *out = blas.info;
    out->threads = status == AWL_OK && blas.get_num_threads ? blas.get_num_threads() : 0;
    const char *own = awl_cpu_gemm_f32_name();
    if (own) {
        char blocks[32];
        snprintf(out->gemm_f32, sizeof out->gemm_f32, "%s, blocks %s", own,
                 awl_cpu_gemm_blocking_name(awl_cpu_gemm_blocking_get(), blocks, sizeof blocks));
    } else
        snprintf(out->gemm_f32, sizeof out->gemm_f32, "%s", out->kernels);
    return status;
}

int awl_blas_set_num_threads(int n)
{
    int status = awl_cpu_blas_load("awl_set_num_threads");
    if (status == AWL_OK) blas.set_num_threads(n);
    return status;
}

int awl_blas_sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *a,
                   int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    int status = awl_cpu_blas_load("awl_matmul");
    if (status == AWL_OK)
        blas.sgemm(CBLAS_ROW_MAJOR, trans_a ? CBLAS_TRANS : CBLAS_NO_TRANS,
                   trans_b ? CBLAS_TRANS : CBLAS_NO_TRANS, m, n, k, alpha, a, lda, b, ldb, beta, c,
                   ldc);
    return status;
}

int awl_blas_dgemm(bool trans_a, bool trans_b, int m, int n, int k, double alpha, const double *a,
                   int lda, const double *b, int ldb, double beta, double *c, int ldc)
{
    int status = awl_cpu_blas_load("awl_matmul");
    if (status == AWL_OK)
        blas.dgemm(CBLAS_ROW_MAJOR, trans_a ? CBLAS_TRANS : CBLAS_NO_TRANS,
                   trans_b ? CBLAS_TRANS : CBLAS_NO_TRANS, m, n, k, alpha, a, lda, b, ldb, beta, c,
                   ldc);
    return status;
}

void awl_cpu_blas_gemv(awl_dtype dtype, bool trans, int rows, int cols, const void *a, int lda,
                       const void *x, int incx, double beta, void *y, int incy)
{
    const int t = trans ? CBLAS_TRANS : CBLAS_NO_TRANS, len = trans ? cols : rows;
    if (beta == 0.0) /* y may be uninitialised: a NaN there must not survive 0 * y */
        for (int i = 0; i < len; i++) {
            if (dtype == AWL_F32)
                ((float *)y)[(int64_t)i * incy] = 0.0f;
            else
                ((double *)y)[(int64_t)i * incy] = 0.0;
        }
    if (dtype == AWL_F32)
        blas.sgemv(CBLAS_ROW_MAJOR, t, rows, cols, 1.0f, a, lda, x, incx, (float)beta, y, incy);
    else
        blas.dgemv(CBLAS_ROW_MAJOR, t, rows, cols, 1.0, a, lda, x, incx, beta, y, incy);
}
