/*
 * backends/cpu/cpu_gemm.h - awl's own float32 product (cpu_gemm.c), for CPUs
 * with AVX-512; everything else goes to OpenBLAS.
 *
 *     if (!awl_cpu_gemm_f32(false, true, m, n, k, x, k, w, k, false, y, n, NULL))
 *         ... call sgemm instead (no AVX-512, a shape it leaves to BLAS,
 *             or its scratch could not be had)
 *
 * The environment variable AWL_CPU_GEMM=blas sends every product to
 * OpenBLAS instead, and AWL_CPU_GEMM=avx2 runs the AVX2 tiles (6 x 16) in
 * place of the AVX-512 ones, or on a CPU that has AVX2 and FMA but not
 * AVX-512 (for comparisons); AWL_CPU_GEMM_BLOCKING=384x960x1536c sets the
 * blocking (awl_cpu_gemm_blocking below; ignored unless
 * awl_cpu_gemm_blocking_set would take it). Both are read once, at the
 * first product; awl_blas_get_info's gemm_f32 names the tile and the
 * blocking in use.
 */
#ifndef AWL_BACKENDS_CPU_GEMM_H
#define AWL_BACKENDS_CPU_GEMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* C (m x n, row-major, rows ldc apart) = op(A) op(B) (+ bias), or += when
 * accumulating, on the calling thread. op(A) is m x k: a's rows lda apart,
 * or a holds A^T (k x m, rows lda apart) when ta. op(B) is k x n: b's rows
 * ldb apart, or b holds B^T when tb. bias (n floats; NULL: none) is added
 * to every row of a product that does not accumulate, as each tile of C is
 * stored (a linear layer's forward). Returns false, having done nothing,
 * when the product is not one for this code (awl_cpu_gemm_f32_suits). */
bool awl_cpu_gemm_f32(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a,
                      int64_t lda, const float *b, int64_t ldb, bool accumulate, float *c,
                      int64_t ldc, const float *bias);

/* Whether awl_cpu_gemm_f32 takes an m x n x k product: the CPU has AVX-512
 * (or AWL_CPU_GEMM=avx2 and AVX2), AWL_CPU_GEMM is not "blas", m is at
 * least two register tiles and n fills its last panel to within an eighth. */
bool awl_cpu_gemm_f32_suits(int64_t m, int64_t n, int64_t k);

/* "awl avx512 12x32" (or "awl avx2 6x16") when awl's product is in use,
 * NULL when every float32 product goes to BLAS. */
const char *awl_cpu_gemm_f32_name(void);

/* Where awl_cpu_gemm_f32 copies A (step-major, a tile's rows neighbours)
 * rather than read it where it lies: only an A whose rows alias in the L1
 * cache (NONE), every A a block of rows and steps at a time (BLOCKS), or
 * every A a tile at a time, just before the tile's pass over a block of B
 * (TILES). Written as a blocking's suffix: none, "c", "t". */
typedef enum awl_cpu_gemm_copy {
    AWL_CPU_GEMM_COPY_NONE,
    AWL_CPU_GEMM_COPY_BLOCKS,
    AWL_CPU_GEMM_COPY_TILES,
} awl_cpu_gemm_copy;

/* How awl_cpu_gemm_f32 blocks a product (cpu_gemm.c, "Blocking"): K in
 * blocks of at most kc steps, C's columns in blocks of nc, A's rows in
 * blocks of at most mc, and where A is copied. */
typedef struct awl_cpu_gemm_blocking {
    int kc, nc, mc;
    awl_cpu_gemm_copy copy_a;
} awl_cpu_gemm_blocking;

/* The blocking of the products to come (all zero where awl's product is
 * not built: not x86-64). */
awl_cpu_gemm_blocking awl_cpu_gemm_blocking_get(void);

/* For benchmarks that compare blockings on the same operands
 * (bench_kernels' gemm_blocking): every product that begins after it uses
 * b. Call it between products, never while one runs on another thread.
 * false, changing nothing, when a value is out of range: kc from 16 to
 * 768, nc a multiple of 32 from 32 to 1920, mc a multiple of 12 from 12
 * to 3072. The summation order follows kc, so results differ in their
 * last bits between blockings with different kc. */
bool awl_cpu_gemm_blocking_set(awl_cpu_gemm_blocking b);

/* Reads a blocking written "KCxNCxMC" with copy_a's suffix
 * ("384x960x1536c") from the start of text into *b; returns where it
 * stopped, or NULL when text does not start with one. */
const char *awl_cpu_gemm_blocking_parse(const char *text, awl_cpu_gemm_blocking *b);

/* b written as awl_cpu_gemm_blocking_parse reads it, into buf (size
 * bytes); returns buf. */
const char *awl_cpu_gemm_blocking_name(awl_cpu_gemm_blocking b, char *buf, size_t size);

/* dst[i * ldd + j] = src[j * lds + i] for i, j < 16: a 16 x 16 block of
 * floats transposed in registers. Only on x86-64 CPUs with AVX-512 (call it
 * from code compiled for them). */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
void awl_cpu_transpose16(const float *src, int64_t lds, float *dst, int64_t ldd);
#endif

#endif
