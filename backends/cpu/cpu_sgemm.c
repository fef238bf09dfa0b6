/*
 * backends/cpu/cpu_sgemm.c - awl's own float32 matrix product for CPUs with
 * AVX-512, on one thread: C (m x n, row-major) = op(A) op(B), or += when
 * accumulating.
 *
 * Why not OpenBLAS: on the 16-core Xeon of the device machine (Emerald
 * Rapids) OpenBLAS's SkylakeX sgemm reaches 95-107 GFLOP/s a core at a
 * GPT's shapes, 0.3.21 and 0.3.34 alike, where Intel MKL reaches 121-143
 * (docs/performance.md, "awl's float32 product"). This is the classic
 * blocked product (Goto and van de Geijn, "Anatomy of high-performance
 * matrix multiplication", 2008), laid out for row-major C:
 *
 *   for each block of NC columns of B and C            (jc)
 *     for each slice of KC of the inner dimension      (pc)
 *       pack B's KC x NC block into panels of NR columns: k-major, so a
 *         panel is KC rows of NR floats; it stays in the L2 cache
 *       for each block of MC rows of A and C           (ic)
 *         pack A's MC x KC block into panels of MR rows, k-major (MR
 *           floats for each k); one panel fits in the L1 cache
 *         for each A panel, for each B panel: the micro-kernel
 *
 * The micro-kernel keeps an MR x NR = 8 x 48 tile of C in 24 of the 32
 * vector registers (8 rows of three 16-float vectors). For each k it loads
 * one row of the B panel (three vectors), and for each of the 8 rows
 * multiplies it by A's element broadcast from memory and adds: 24
 * independent multiply-adds, enough to keep both FMA ports busy through
 * their 4-cycle latency. The tile is added onto C (or stored over it, for
 * the first slice of K when not accumulating); tiles at the bottom or
 * right edge go through a small buffer, and the packed panels are padded
 * with zeros there, so the kernel itself has no edge cases.
 *
 * The order of the sums is fixed by the blocking: each element of C is the
 * sum over K's slices in order, each slice summed in order of k. So the
 * bits are the same on every run, as DESIGN.md's determinism asks.
 *
 * Packing buffers come from the backend's cache of large blocks
 * (cpu_memory.c), so a training step's products reuse them, already mapped.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_internal.h"

#if defined(__AVX512F__)
#include <immintrin.h>

#ifndef SGEMM_MR
#define SGEMM_MR 12
#define SGEMM_NV 2
#endif
#define MR SGEMM_MR        /* rows of the C tile: A's elements, broadcast */
#define NV SGEMM_NV        /* 16-float vectors across a row of the tile */
#define NR (16 * NV)       /* columns of the C tile: B's row, loaded */
#ifndef SGEMM_KC
#define SGEMM_KC 384
#endif
#ifndef SGEMM_NC
#define SGEMM_NC 480 /* a multiple of NR; KC x NC floats: 720 KB of L2 */
#endif
#ifndef SGEMM_MC
#define SGEMM_MC 192 /* a multiple of MR */
#endif

/* acc (MR x NR) := A panel (kc x MR) times B panel (kc x NR); then onto c
 * (ldc apart), added when `add`, else stored. */
static void micro_kernel(int64_t kc, const float *restrict ap, const float *restrict bp,
                         float *restrict c, int64_t ldc, bool add)
{
    __m512 acc[MR][NV];
    for (int r = 0; r < MR; r++) {
        for (int v = 0; v < NV; v++) acc[r][v] = _mm512_setzero_ps();
        _mm_prefetch((const char *)(c + r * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + r * ldc + NR - 1), _MM_HINT_T0);
    }
    for (int64_t p = 0; p < kc; p++) {
        __m512 b[NV];
        for (int v = 0; v < NV; v++) {
            b[v] = _mm512_loadu_ps(bp + 16 * v);
            _mm_prefetch((const char *)(bp + 8 * NR + 16 * v), _MM_HINT_T0);
        }
        for (int r = 0; r < MR; r++) {
            const __m512 a = _mm512_set1_ps(ap[r]);
            for (int v = 0; v < NV; v++) acc[r][v] = _mm512_fmadd_ps(a, b[v], acc[r][v]);
        }
        ap += MR;
        bp += NR;
    }
    for (int r = 0; r < MR; r++) {
        float *row = c + r * ldc;
        for (int v = 0; v < NV; v++) {
            __m512 x = acc[r][v];
            if (add) x = _mm512_add_ps(x, _mm512_loadu_ps(row + 16 * v));
            _mm512_storeu_ps(row + 16 * v, x);
        }
    }
}

/* A's rows [i0, i0 + mc) and columns [p0, p0 + kc) into panels of MR rows,
 * zero past m. op(A)(i, p) is a[i * lda + p], or a[p * lda + i] when ta. */
static void pack_a(bool ta, const float *a, int64_t lda, int64_t i0, int64_t mc, int64_t p0,
                   int64_t kc, int64_t m, float *restrict dst)
{
    for (int64_t ir = 0; ir < mc; ir += MR, dst += kc * MR) {
        const int64_t rows = m - (i0 + ir) < MR ? m - (i0 + ir) : MR;
        if (rows < MR) memset(dst, 0, (size_t)(kc * MR) * sizeof(float));
        if (ta) /* each k's MR elements are contiguous in a */
            for (int64_t p = 0; p < kc; p++)
                memcpy(dst + p * MR, a + (p0 + p) * lda + i0 + ir, (size_t)rows * sizeof(float));
        else
            for (int64_t r = 0; r < rows; r++) {
                const float *src = a + (i0 + ir + r) * lda + p0;
                for (int64_t p = 0; p < kc; p++) dst[p * MR + r] = src[p];
            }
    }
}

/* B's rows [p0, p0 + kc) and columns [j0, j0 + nc) into panels of NR
 * columns, zero past n. op(B)(p, j) is b[p * ldb + j], or b[j * ldb + p]
 * when tb. */
static void pack_b(bool tb, const float *b, int64_t ldb, int64_t p0, int64_t kc, int64_t j0,
                   int64_t nc, int64_t n, float *restrict dst)
{
    for (int64_t jr = 0; jr < nc; jr += NR, dst += kc * NR) {
        const int64_t cols = n - (j0 + jr) < NR ? n - (j0 + jr) : NR;
        if (cols < NR) memset(dst, 0, (size_t)(kc * NR) * sizeof(float));
        if (tb)
            for (int64_t q = 0; q < cols; q++) {
                const float *src = b + (j0 + jr + q) * ldb + p0;
                for (int64_t p = 0; p < kc; p++) dst[p * NR + q] = src[p];
            }
        else
            for (int64_t p = 0; p < kc; p++)
                memcpy(dst + p * NR, b + (p0 + p) * ldb + j0 + jr, (size_t)cols * sizeof(float));
    }
}

/* One MR x NR tile of C at (i, j), rows and cols of it inside C. */
static void tile(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc,
                 int64_t rows, int64_t cols, bool add)
{
    if (rows == MR && cols == NR) {
        micro_kernel(kc, ap, bp, c, ldc, add);
        return;
    }
    float buf[MR * NR];
    micro_kernel(kc, ap, bp, buf, NR, false);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t q = 0; q < cols; q++)
            c[r * ldc + q] = add ? c[r * ldc + q] + buf[r * NR + q] : buf[r * NR + q];
}

int awl_cpu_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a,
                  int64_t lda, const float *b, int64_t ldb, bool accumulate, float *c,
                  int64_t ldc)
{
    const size_t a_bytes = (size_t)(SGEMM_MC * SGEMM_KC) * sizeof(float);
    const size_t b_bytes = (size_t)(SGEMM_KC * SGEMM_NC) * sizeof(float);
    float *ap = awl_cpu_alloc(0, a_bytes), *bp = awl_cpu_alloc(0, b_bytes);
    if (!ap || !bp) {
        if (ap) awl_cpu_free(0, ap, a_bytes);
        if (bp) awl_cpu_free(0, bp, b_bytes);
        return AWL_ERR_OOM;
    }
    for (int64_t jc = 0; jc < n; jc += SGEMM_NC) {
        const int64_t nc = n - jc < SGEMM_NC ? n - jc : SGEMM_NC;
        for (int64_t pc = 0; pc < k; pc += SGEMM_KC) {
            const int64_t kc = k - pc < SGEMM_KC ? k - pc : SGEMM_KC;
            const bool add = accumulate || pc > 0;
            pack_b(tb, b, ldb, pc, kc, jc, nc, n, bp);
            for (int64_t ic = 0; ic < m; ic += SGEMM_MC) {
                const int64_t mc = m - ic < SGEMM_MC ? m - ic : SGEMM_MC;
                pack_a(ta, a, lda, ic, mc, pc, kc, m, ap);
                for (int64_t ir = 0; ir < mc; ir += MR)
                    for (int64_t jr = 0; jr < nc; jr += NR) {
                        const int64_t rows = mc - ir < MR ? mc - ir : MR;
                        const int64_t cols = nc - jr < NR ? nc - jr : NR;
                        tile(kc, ap + ir * kc, bp + jr * kc, c + (ic + ir) * ldc + jc + jr, ldc,
                             rows, cols, add);
                    }
            }
        }
    }
    awl_cpu_free(0, ap, a_bytes);
    awl_cpu_free(0, bp, b_bytes);
    return AWL_OK;
}

/* AWL_CPU_SGEMM=openblas hands every product to OpenBLAS (for comparison);
 * read once. */
bool awl_cpu_sgemm_enabled(void)
{
    static int enabled = -1; /* -1: not read yet */
    int e = __atomic_load_n(&enabled, __ATOMIC_RELAXED);
    if (e < 0) {
        const char *v = getenv("AWL_CPU_SGEMM");
        e = !(v && strcmp(v, "openblas") == 0);
        __atomic_store_n(&enabled, e, __ATOMIC_RELAXED);
    }
    return e;
}

#else /* no AVX-512: OpenBLAS does every product */

bool awl_cpu_sgemm_enabled(void) { return false; }

int awl_cpu_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a,
                  int64_t lda, const float *b, int64_t ldb, bool accumulate, float *c,
                  int64_t ldc)
{
    (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)a, (void)lda, (void)b, (void)ldb;
    (void)accumulate, (void)c, (void)ldc;
    return AWL_ERR_UNSUPPORTED;
}

#endif
