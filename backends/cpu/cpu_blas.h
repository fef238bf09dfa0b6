/*
 * backends/cpu/cpu_blas.h - the BLAS library under the CPU backend: which
 * one, which kernels, how many threads, and its two products.
 *
 * awl does not link OpenBLAS; it loads it (dlopen) at the first BLAS call,
 * after choosing the kernels the CPU can run (cpu_blas.c says why). Programs
 * print what was chosen, so that every figure names the kernels behind it:
 *
 *     awl_blas_info info;
 *     awl_blas_get_info(&info);
 *     printf("%s, %s kernels (%s), %d threads\n", info.library, info.kernels,
 *            info.chosen_by, info.threads);
 *     // OpenBLAS 0.3.21, SkylakeX kernels (awl, for avx512), 16 threads
 *
 * On a CPU with AVX-512, float32 products run awl's own code instead
 * (cpu_gemm.h; info.gemm_f32 names what runs them); the library keeps
 * float64 products, matrix-vector products and every product elsewhere.
 *
 * awl_blas_sgemm and awl_blas_dgemm are cblas_?gemm with the row-major
 * layout fixed, for benchmarks that compare awl's matmul with BLAS called
 * directly (linking OpenBLAS themselves would load it before awl chooses).
 */
#ifndef AWL_BACKENDS_CPU_BLAS_H
#define AWL_BACKENDS_CPU_BLAS_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct awl_blas_info {
    bool loaded;            /* false: the library could not be loaded (error says why) */
    char library[64];       /* "OpenBLAS 0.3.21" */
    char config[160];       /* the library's own description of its build */
    char kernels[32];       /* the kernels it runs: "Haswell", "SkylakeX", "Prescott" */
    char cpu_features[32];  /* the widest vector unit awl found: "avx512", "avx2+fma", "avx", "sse" */
    char best_kernels[32];  /* the kernels those features allow, "" when awl has no choice */
    const char *chosen_by;  /* "user" (OPENBLAS_CORETYPE was set), "awl" or "library" */
    bool kernels_weaker;    /* the kernels in use are weaker than the CPU's features allow */
    char gemm_f32[64];      /* what runs float32 products: "awl avx512 12x32, blocks
                               384x480x1536" (cpu_gemm.h: the tile, then the blocking) on
                               CPUs with AVX-512, else the library's kernels */
    char error[160];        /* why loading failed, or a warning about the user's setting */
    int threads;
} awl_blas_info;

/* Loads the library if that has not happened yet and describes it. Returns
 * 0, or negative (after recording an error) when it cannot be loaded; *out
 * is filled either way. */
int awl_blas_get_info(awl_blas_info *out);

/* C (m x n, row-major, ldc) = alpha op(A) op(B) + beta C. Returns 0, or
 * negative when the library cannot be loaded. */
int awl_blas_sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *a,
                   int lda, const float *b, int ldb, float beta, float *c, int ldc);
int awl_blas_dgemm(bool trans_a, bool trans_b, int m, int n, int k, double alpha, const double *a,
                   int lda, const double *b, int ldb, double beta, double *c, int ldc);

/* The library's thread count (it shares OpenMP's pool; awl_set_num_threads
 * sets both). */
int awl_blas_set_num_threads(int n);

#ifdef __cplusplus
}
#endif

#endif
