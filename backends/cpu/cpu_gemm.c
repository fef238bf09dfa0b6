/*
 * backends/cpu/cpu_gemm.c - awl's own float32 product, for CPUs with
 * AVX-512 (and, when asked, with AVX2 and FMA).
 *
 * C (m x n, row-major) = op(A) op(B), or += when accumulating, on one
 * thread (cpu_matmul.c splits a product between threads in bands and calls
 * this for each). Float64, and CPUs without AVX-512, go to OpenBLAS.
 *
 * Why not OpenBLAS here too: at a GPT's shapes its product spends about
 * 6% of its time outside its kernel, packing both operands into its own
 * layouts and zeroing C before a product that overwrites it. The product
 * below packs one operand and writes C directly: on one core of the
 * AVX-512 dev machine it runs cpu-small's and cpu-medium's products 1.08x
 * as fast as OpenBLAS 0.3.21's SkylakeX kernels, shakespeare-char's
 * 1.01-1.06x (medians over the products, each against sgemm in the same
 * process; FMA peak 118 GFLOP/s, the tile alone 116-117;
 * docs/performance.md, "awl's own float32 product" and "Three pointers to
 * a tile's rows").
 *
 * The register tile. With AVX-512 the innermost loop keeps a 12 x 32
 * block of C in 24 registers (12 rows, two 16-float vectors a row). Each
 * step p loads one row of B's block (32 floats, two vectors) and, for each
 * of the 12 rows, broadcasts A(r, p) and adds A(r, p) * B(p, 0..32) into
 * the row: 24 fused multiply-adds for 14 loads, and no other work. 24
 * independent sums hide the FMA latency (4 cycles, two pipes) with room to
 * spare; the 32 registers hold the tile, B's two vectors and the
 * broadcast. With AVX2 there are 16 registers of 8 floats, and the tile is
 * 6 x 16: 12 sums, 12 multiply-adds for 8 loads a step.
 *
 * Which operand is packed. The values broadcast at each step are read
 * from A where it lies: a tile's rows of a row-major A (one float from
 * each row's current cache line), or neighbours in a transposed A's row.
 * Packing A would cost one pass over A for every 2n multiply-adds done
 * with it; at n = 128 that is as much time as it saves. The rows' next
 * cache lines are prefetched every 16 steps, which the hardware prefetcher
 * does not do well for 12 streams at once. In a transposed A (a weight's
 * gradient dY^T X, K every token of the batch) a step's neighbours lie
 * lda floats (a row of dY) after the last step's: a new line (or two) at
 * every step, and a new 4 KB page at every step where rows are 1152 or
 * 1536 floats long; the hardware's stride prefetchers stop at a page's
 * end. So the tile prefetches the line of the step 16 ahead (STEPS_AHEAD;
 * in a copy of A too, where it is not needed and costs two instructions a
 * step), and, where it adds onto C (every block of K after the first), its
 * rows of C 48 steps before its last (C_AHEAD). On an H100 lease's Xeon
 * that ran shakespeare-char's four weight gradients 1.15-1.21x as fast on
 * one thread and 1.12-1.29x on four; on the Zen 4 dev machine 1.02-1.07x
 * (docs/performance.md, "Weight gradients: a transposed A's lines
 * prefetched"); the AVX2 tiles, which run only when asked, do the same,
 * untimed. The exception: rows a multiple of 4 KB apart (K = 1024, 2048,
 * 3072 in a row-major A) fall in one set of the L1 cache, which holds 8
 * lines, and the tile's reads miss; then each block of A's rows and K's
 * steps is copied once, tile by tile (rows_alias; a 2048^3 product 93-95
 * GFLOP/s on one thread without the copy, 106 with it, OpenBLAS 106-108).
 * B's block is read a panel row at a time for every tile of A, so it is
 * packed: a block of K's rows by NC columns of op(B), as panels of the
 * tile's width whose rows follow each other (a panel is one contiguous
 * stream for the tile), columns past n zero. From a row-major B that is a
 * copy of short runs; from a transposed B (a linear layer's weight in
 * x @ w^T) a transpose, done a square block of floats at a time in
 * registers.
 *
 * Blocking (the struct `blocking` below, KC, NC and MC its fields kc, nc and
 * mc, with the values the code runs unless AWL_CPU_GEMM_BLOCKING or a
 * benchmark sets others). K is taken in blocks of at most KC = 384 steps,
 * all of one length (K = 384, a GPT's C at shakespeare-char's size, is one
 * block; K = 512 two of 256, K = 1536 four of 384), and C's columns in
 * blocks of NC = 480: a packed block of B is at most 720 KB and stays in the
 * L2 cache while the rows of A pass over it; a panel is 48 KB, a tile's 12
 * rows of A 18 KB. A block of K that ends the product short (K = 384 in
 * blocks of 256 and 128) costs a second read and write of C for a third of
 * the multiply-adds, and a short loop: on one core of the Zen 4 dev machine
 * shakespeare-char's four products with K = 384 ran 2.6-8.4% faster in one
 * block of 384 than in 256 + 128, its eight others 0.995-1.028x (blocks of
 * 384 steps by 480 columns against 256 by 384, alternated product by product
 * in one process; docs/performance.md, "Blocks of K"). A's rows are taken in
 * blocks of at most MC = 1536 (one block for a thread's band at a GPT's
 * sizes), so that a block's rows of A are still in a cache when the next
 * block of columns comes round; within one, C's columns are walked in blocks
 * of NC, then K in its blocks (each block after the first adds onto C), then
 * A's rows a tile at a time, then the block's panels. (The rows of a product
 * of 16,384 x 384 x 1,152, shakespeare-char's qkv, in one block: 200-207
 * GFLOP/s on 2 threads; in blocks of 1536: 213-215, in runs one after the
 * other, `bench_kernels full matmul_large`.) On an H100 lease's 16-core
 * Xeon no other blocking ran shakespeare-char's products faster, timed call
 * by call (`bench_kernels full gemm_blocking`; docs/performance.md, "Other
 * blockings, timed call by call").
 *
 * Edges: the last panel's columns past n are masked off when C is read and
 * written (and are zero in the panel); a block's last rows, fewer than a
 * tile's, go to the same loop compiled for their number of rows.
 *
 * Summation order: each element of C is sum over p in order within a
 * block of K, the blocks (set by K alone) added onto C in order. That does
 * not depend on where a band of C starts or ends (a band too small for
 * these tiles goes to BLAS, which has its own order).
 *
 * AWL_CPU_GEMM=blas sends every product to OpenBLAS; AWL_CPU_GEMM=avx2
 * runs the AVX2 tiles (on a CPU with AVX-512 too: tests and comparisons;
 * see `decide` for why they are not the default where AVX-512 is missing).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_gemm.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_X86_GEMM 1
#include <immintrin.h>
#endif

#ifdef HAVE_X86_GEMM

#define PREFETCH 32    /* how many floats ahead a row-major A's rows are prefetched */
#define STEPS_AHEAD 16 /* how many steps ahead a transposed A's lines are prefetched */
#define C_AHEAD 48     /* how many steps before its last a tile prefetches the C it adds onto */

/* The blocking ("Blocking" above): K in blocks of at most kc steps (the
 * most rows of B packed at a time), C's columns in blocks of nc (columns
 * of B packed at a time, a multiple of both tiles' widths), A's rows in
 * blocks of at most mc (rows that pass over one packed block of B), and
 * where A is copied (copy_a: cpu_gemm.h). A benchmark may set another
 * (awl_cpu_gemm_blocking_set) within the bounds below. */
static awl_cpu_gemm_blocking blocking = {
    .kc = 384, .nc = 480, .mc = 1536, .copy_a = AWL_CPU_GEMM_COPY_NONE};
#define KC_MAX 768
#define NC_MAX 1920
#define MC_MAX 3072

/* The code of one instruction set: its tile's rows and columns, how it
 * packs B's block into panels of nr columns, and its tiles. A tile is C's
 * rows (ldc apart) and first w (<= nr) columns := A's rows of kc steps
 * times a panel (kc rows of nr), plus the addend's rows (ld apart: C
 * itself, or a bias row with ld 0; NULL: nothing). tile_rows takes mr rows
 * of a row-major A (lda apart), tile_neighbours mr neighbours in the rows
 * of a transposed A (lda apart), tile_edge a block's last rows, fewer than
 * mr, element (r, p) at a[r * ars + p * acs]. */
typedef void tile_fn(int64_t kc, const float *a, int64_t lda, const float *panel, float *c,
                     int64_t ldc, int64_t w, const float *add, int64_t ld);
typedef struct kernels {
    const char *name;
    int mr, nr;
    void (*pack_b)(float *dst, const float *b, int64_t ldb, bool tb, int64_t p0, int64_t kc,
                   int64_t j0, int64_t nc);
    tile_fn *tile_rows, *tile_neighbours;
    void (*tile_edge)(int mr, int64_t kc, const float *a, int64_t ars, int64_t acs,
                      const float *panel, float *c, int64_t ldc, int64_t w, const float *add,
                      int64_t ld);
    /* dst[p * MR + r] = A(r, p) for a tile's mr rows (MR, this set's
     * full tile, apart) and kc steps: a[r * lda + p], or a[p * lda + r]
     * when ta */
    void (*copy_a)(int mr, int64_t kc, const float *a, int64_t lda, bool ta, float *dst);
} kernels;

/* A case of a tile_edge's switch: R rows through TILE (tile512 or
 * tile256), from a row-major A (acs = 1) or a transposed one. */
#define EDGE(TILE, R)                                                                              \
    case R:                                                                                        \
        if (acs == 1)                                                                              \
            TILE(R, kc, a, ars, 1, panel, c, ldc, w, add, ld);                                     \
        else                                                                                       \
            TILE(R, kc, a, 1, acs, panel, c, ldc, w, add, ld);                                     \
        break;

/* ---- AVX-512: 12 x 32 ----------------------------------------------------------- */

#define AVX512 __attribute__((target("avx512f")))

/* The mask of a 16-float vector's first w lanes. */
static AVX512 __mmask16 mask16(int64_t w)
{
    return w >= 16 ? (__mmask16)0xffff : w <= 0 ? 0 : (__mmask16)((1u << w) - 1);
}

/* C's tile of R rows (ldc apart; its columns past w untouched) :=
 * the tile's A (R rows of kc, element (r, p) at a[r * ars + p * acs]) times
 * a packed panel (kc rows of 32), plus the addend's rows (ld apart: C
 * itself, or a bias row with ld 0; NULL: nothing). R is a constant
 * wherever this is inlined, so the loops over rows unroll and the sums
 * stay in registers. */
static inline __attribute__((always_inline)) AVX512 void
tile512(int R, int64_t kc, const float *restrict a, int64_t ars, int64_t acs,
        const float *restrict panel, float *c, int64_t ldc, int64_t w, const float *add, int64_t ld)
{
    __m512 sum[12][2];
#pragma GCC unroll 12
    for (int r = 0; r < R; r++) sum[r][0] = sum[r][1] = _mm512_setzero_ps();
    /* Row r = 4g + q of the tile's A is at four[g] + q * ars: three
     * pointers and the offsets 0, ars, 2 ars and 3 ars, where a pointer or
     * an offset per row would take twelve registers; then the compiler
     * runs out of general registers, keeps one in a vector register and
     * moves it back at every step through a port the multiply-adds need
     * (the tile alone, its data in L1, on one Zen 4 core: 111 GFLOP/s
     * that way, 116-117 this way; docs/performance.md). */
    const float *four[3] = {a, a + (R > 4 ? 4 * ars : 0), a + (R > 8 ? 8 * ars : 0)};
    const int64_t c_soon = add && ld ? kc - C_AHEAD : -1; /* when C's rows are prefetched */
    for (int64_t p = 0; p < kc; p++) {
        if (acs == 1 && (p & 15) == 0) { /* rows apart: each one's next cache line */
#pragma GCC unroll 12
            for (int r = 0; r < R; r++)
                _mm_prefetch((const char *)(four[r / 4] + r % 4 * ars + PREFETCH), _MM_HINT_T0);
        } else if (acs != 1) { /* neighbours: the line (or two) of step p + STEPS_AHEAD */
            _mm_prefetch((const char *)(four[0] + STEPS_AHEAD * acs), _MM_HINT_T0);
            _mm_prefetch((const char *)(four[0] + STEPS_AHEAD * acs + R - 1), _MM_HINT_T0);
        }
        if (p == c_soon) { /* the rows of C this tile adds onto */
#pragma GCC unroll 12
            for (int r = 0; r < R; r++) {
                _mm_prefetch((const char *)(add + r * ld), _MM_HINT_T0);
                _mm_prefetch((const char *)(add + r * ld + 16), _MM_HINT_T0);
            }
        }
        const __m512 b0 = _mm512_load_ps(panel), b1 = _mm512_load_ps(panel + 16);
#pragma GCC unroll 12
        for (int r = 0; r < R; r++) {
            const __m512 ar = _mm512_set1_ps(four[r / 4][r % 4 * ars]);
            sum[r][0] = _mm512_fmadd_ps(ar, b0, sum[r][0]);
            sum[r][1] = _mm512_fmadd_ps(ar, b1, sum[r][1]);
        }
        for (int g = 0; g < 3; g++) four[g] += acs;
        panel += 32;
    }
    const __mmask16 mask0 = mask16(w), mask1 = mask16(w - 16);
#pragma GCC unroll 12
    for (int r = 0; r < R; r++) {
        float *row = c + r * ldc;
        if (add) {
            sum[r][0] = _mm512_add_ps(_mm512_maskz_loadu_ps(mask0, add + r * ld), sum[r][0]);
            sum[r][1] = _mm512_add_ps(_mm512_maskz_loadu_ps(mask1, add + r * ld + 16), sum[r][1]);
        }
        /* plain stores where the panel is full: a later load of these
         * floats cannot take them from a masked store still in flight */
        if (mask1 == 0xffff) {
            _mm512_storeu_ps(row, sum[r][0]);
            _mm512_storeu_ps(row + 16, sum[r][1]);
        } else {
            _mm512_mask_storeu_ps(row, mask0, sum[r][0]);
            _mm512_mask_storeu_ps(row + 16, mask1, sum[r][1]);
        }
    }
}

/* The full tile, for a row-major A (rows lda apart) and for a transposed
 * one (a tile's rows are neighbours), each a copy of the loop with its
 * strides' constants folded in; then the last rows of a block (fewer than
 * 12), each number of rows with a copy of the loop of its own. */
static AVX512 void tile512_rows(int64_t kc, const float *a, int64_t lda, const float *panel,
                                float *c, int64_t ldc, int64_t w, const float *add, int64_t ld)
{
    tile512(12, kc, a, lda, 1, panel, c, ldc, w, add, ld);
}

static AVX512 void tile512_neighbours(int64_t kc, const float *a, int64_t lda, const float *panel,
                                      float *c, int64_t ldc, int64_t w, const float *add,
                                      int64_t ld)
{
    tile512(12, kc, a, 1, lda, panel, c, ldc, w, add, ld);
}

static AVX512 void tile512_edge(int mr, int64_t kc, const float *a, int64_t ars, int64_t acs,
                                const float *panel, float *c, int64_t ldc, int64_t w,
                                const float *add, int64_t ld)
{
    /* clang-format off */
    switch (mr) {
        EDGE(tile512, 1) EDGE(tile512, 2) EDGE(tile512, 3) EDGE(tile512, 4) EDGE(tile512, 5)
        EDGE(tile512, 6) EDGE(tile512, 7) EDGE(tile512, 8) EDGE(tile512, 9) EDGE(tile512, 10)
        EDGE(tile512, 11)
    }
    /* clang-format on */
}

/* dst[i * ldd + j] = src[j * lds + i] for a 16 x 16 block: three rounds of
 * shuffles, pairs of floats, then pairs of pairs, then 128-bit lanes
 * (cpu_gemm.h; the CPU attention transposes its keys and values with it
 * too). */
AVX512 void awl_cpu_transpose16(const float *src, int64_t lds, float *dst, int64_t ldd)
{
    __m512 r[16], t[16];
    for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(src + i * lds);
    for (int i = 0; i < 16; i += 2) { /* t[i]: rows i, i+1 interleaved, columns 0,1 of each lane */
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) { /* r[i + c]: column c of each lane, rows i..i+3 */
        r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xee);
        r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    /* r[4g + c] holds, lane by lane, columns c, 4 + c, 8 + c, 12 + c of rows
     * 4g..4g+3; gather each column's four lanes from the four groups */
    for (int c = 0; c < 4; c++) {
        const __m512 lo02 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x88); /* cols c, 8+c; rows 0-7 */
        const __m512 hi02 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x88);
        const __m512 lo13 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xdd); /* cols 4+c, 12+c */
        const __m512 hi13 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xdd);
        _mm512_storeu_ps(dst + c * ldd, _mm512_shuffle_f32x4(lo02, hi02, 0x88));
        _mm512_storeu_ps(dst + (8 + c) * ldd, _mm512_shuffle_f32x4(lo02, hi02, 0xdd));
        _mm512_storeu_ps(dst + (4 + c) * ldd, _mm512_shuffle_f32x4(lo13, hi13, 0x88));
        _mm512_storeu_ps(dst + (12 + c) * ldd, _mm512_shuffle_f32x4(lo13, hi13, 0xdd));
    }
}

/* Packs op(B)'s rows [p0, p0 + kc) and columns [j0, j0 + nc) into panels of
 * 32 columns (kc x 32 each, one after the other), columns past nc zero.
 * op(B)(p, j) is b[p * ldb + j], or b[j * ldb + p] when transposed. */
static AVX512 void pack_b512(float *restrict dst, const float *b, int64_t ldb, bool tb, int64_t p0,
                             int64_t kc, int64_t j0, int64_t nc)
{
    for (int64_t jp = 0; jp < nc; jp += 32) {
        const int64_t w = nc - jp < 32 ? nc - jp : 32;
        float *panel = dst + jp * kc;
        if (!tb) { /* B's rows, 32 floats at a time (masked past n) */
            const __mmask16 m0 = mask16(w), m1 = mask16(w - 16);
            for (int64_t p = 0; p < kc; p++) {
                const float *src = b + (p0 + p) * ldb + j0 + jp;
                _mm512_store_ps(panel + p * 32, _mm512_maskz_loadu_ps(m0, src));
                _mm512_store_ps(panel + p * 32 + 16, _mm512_maskz_loadu_ps(m1, src + 16));
            }
            continue;
        }
        const float *src = b + (j0 + jp) * ldb + p0; /* column j0 + jp of op(B), from row p0 */
        int64_t p = 0;
        if (w == 32)
            for (; p + 16 <= kc; p += 16) {
                awl_cpu_transpose16(src + p, ldb, panel + p * 32, 32);
                awl_cpu_transpose16(src + 16 * ldb + p, ldb, panel + p * 32 + 16, 32);
            }
        for (; p < kc; p++)
            for (int64_t q = 0; q < 32; q++) panel[p * 32 + q] = q < w ? src[q * ldb + p] : 0.0f;
    }
}

/* kernels.copy_a for 12-row tiles: from a row-major A, 16 steps of the
 * rows at a time, transposed in registers; from a transposed one, each
 * step's neighbours in one masked load and store. */
static AVX512 void copy_a512(int mr, int64_t kc, const float *a, int64_t lda, bool ta, float *dst)
{
    const __mmask16 rows = mask16(mr);
    if (ta) {
        for (int64_t p = 0; p < kc; p++)
            _mm512_mask_storeu_ps(dst + p * 12, rows, _mm512_maskz_loadu_ps(rows, a + p * lda));
        return;
    }
    float in[16][16] __attribute__((aligned(64))), out[16][16] __attribute__((aligned(64)));
    memset(in, 0, sizeof in);
    for (int64_t p = 0; p < kc; p += 16) {
        const int64_t w = kc - p < 16 ? kc - p : 16;
        const __mmask16 steps = mask16(w);
        for (int r = 0; r < mr; r++)
            _mm512_store_ps(in[r], _mm512_maskz_loadu_ps(steps, a + r * lda + p));
        awl_cpu_transpose16(&in[0][0], 16, &out[0][0], 16);
        for (int64_t q = 0; q < w; q++)
            _mm512_mask_storeu_ps(dst + (p + q) * 12, rows, _mm512_load_ps(out[q]));
    }
}

static const kernels avx512_kernels = {"awl avx512 12x32", 12,           32,
                                       pack_b512,          tile512_rows, tile512_neighbours,
                                       tile512_edge,       copy_a512};

/* ---- AVX2 and FMA: 6 x 16 ------------------------------------------------------- */

#define AVX2 __attribute__((target("avx2,fma")))

/* The mask of an 8-float vector's first w lanes (all bits of a lane set). */
static AVX2 __m256i mask8(int64_t w)
{
    const int n = w <= 0 ? 0 : w >= 8 ? 8 : (int)w;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* tile512 with 8-float vectors: R (<= 6) rows of 16 columns. */
static inline __attribute__((always_inline)) AVX2 void
tile256(int R, int64_t kc, const float *restrict a, int64_t ars, int64_t acs,
        const float *restrict panel, float *c, int64_t ldc, int64_t w, const float *add, int64_t ld)
{
    __m256 sum[6][2];
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) sum[r][0] = sum[r][1] = _mm256_setzero_ps();
    const int64_t c_soon = add && ld ? kc - C_AHEAD : -1;
    for (int64_t p = 0; p < kc; p++) {
        if (acs == 1 && (p & 15) == 0) {
#pragma GCC unroll 6
            for (int r = 0; r < R; r++)
                _mm_prefetch((const char *)(a + r * ars + PREFETCH), _MM_HINT_T0);
        } else if (acs != 1) {
            _mm_prefetch((const char *)(a + STEPS_AHEAD * acs), _MM_HINT_T0);
            _mm_prefetch((const char *)(a + STEPS_AHEAD * acs + R - 1), _MM_HINT_T0);
        }
        if (p == c_soon) {
#pragma GCC unroll 6
            for (int r = 0; r < R; r++) {
                _mm_prefetch((const char *)(add + r * ld), _MM_HINT_T0);
                _mm_prefetch((const char *)(add + r * ld + 8), _MM_HINT_T0);
            }
        }
        const __m256 b0 = _mm256_load_ps(panel), b1 = _mm256_load_ps(panel + 8);
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            const __m256 ar = _mm256_broadcast_ss(a + r * ars);
            sum[r][0] = _mm256_fmadd_ps(ar, b0, sum[r][0]);
            sum[r][1] = _mm256_fmadd_ps(ar, b1, sum[r][1]);
        }
        a += acs;
        panel += 16;
    }
    const bool full = w >= 16;
    const __m256i mask0 = mask8(w), mask1 = mask8(w - 8);
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) {
        float *row = c + r * ldc;
        if (add) {
            const float *x = add + r * ld;
            sum[r][0] =
                _mm256_add_ps(full ? _mm256_loadu_ps(x) : _mm256_maskload_ps(x, mask0), sum[r][0]);
            sum[r][1] = _mm256_add_ps(
                full ? _mm256_loadu_ps(x + 8) : _mm256_maskload_ps(x + 8, mask1), sum[r][1]);
        }
        if (full) {
            _mm256_storeu_ps(row, sum[r][0]);
            _mm256_storeu_ps(row + 8, sum[r][1]);
        } else {
            _mm256_maskstore_ps(row, mask0, sum[r][0]);
            _mm256_maskstore_ps(row + 8, mask1, sum[r][1]);
        }
    }
}

static AVX2 void tile256_rows(int64_t kc, const float *a, int64_t lda, const float *panel, float *c,
                              int64_t ldc, int64_t w, const float *add, int64_t ld)
{
    tile256(6, kc, a, lda, 1, panel, c, ldc, w, add, ld);
}

static AVX2 void tile256_neighbours(int64_t kc, const float *a, int64_t lda, const float *panel,
                                    float *c, int64_t ldc, int64_t w, const float *add, int64_t ld)
{
    tile256(6, kc, a, 1, lda, panel, c, ldc, w, add, ld);
}

static AVX2 void tile256_edge(int mr, int64_t kc, const float *a, int64_t ars, int64_t acs,
                              const float *panel, float *c, int64_t ldc, int64_t w,
                              const float *add, int64_t ld)
{
    /* clang-format off */
    switch (mr) {
        EDGE(tile256, 1) EDGE(tile256, 2) EDGE(tile256, 3) EDGE(tile256, 4) EDGE(tile256, 5)
    }
    /* clang-format on */
}

/* dst[i * ldd + j] = src[j * lds + i] for an 8 x 8 block: pairs of floats,
 * pairs of pairs, then 128-bit halves. */
static AVX2 void transpose8(const float *src, int64_t lds, float *dst, int64_t ldd)
{
    __m256 r[8], t[8];
    for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(src + i * lds);
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) { /* r[i + c]: column c of each half, rows i..i+3 */
        r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
        r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    for (int c = 0; c < 4; c++) { /* columns c and 4 + c: the low and high halves */
        _mm256_storeu_ps(dst + c * ldd, _mm256_permute2f128_ps(r[c], r[4 + c], 0x20));
        _mm256_storeu_ps(dst + (4 + c) * ldd, _mm256_permute2f128_ps(r[c], r[4 + c], 0x31));
    }
}

/* pack_b512 with panels of 16 columns. */
static AVX2 void pack_b256(float *restrict dst, const float *b, int64_t ldb, bool tb, int64_t p0,
                           int64_t kc, int64_t j0, int64_t nc)
{
    for (int64_t jp = 0; jp < nc; jp += 16) {
        const int64_t w = nc - jp < 16 ? nc - jp : 16;
        float *panel = dst + jp * kc;
        if (!tb) {
            const __m256i m0 = mask8(w), m1 = mask8(w - 8);
            for (int64_t p = 0; p < kc; p++) {
                const float *src = b + (p0 + p) * ldb + j0 + jp;
                _mm256_store_ps(panel + p * 16, _mm256_maskload_ps(src, m0));
                _mm256_store_ps(panel + p * 16 + 8, _mm256_maskload_ps(src + 8, m1));
            }
            continue;
        }
        const float *src = b + (j0 + jp) * ldb + p0;
        int64_t p = 0;
        if (w == 16)
            for (; p + 8 <= kc; p += 8) {
                transpose8(src + p, ldb, panel + p * 16, 16);
                transpose8(src + 8 * ldb + p, ldb, panel + p * 16 + 8, 16);
            }
        for (; p < kc; p++)
            for (int64_t q = 0; q < 16; q++) panel[p * 16 + q] = q < w ? src[q * ldb + p] : 0.0f;
    }
}

/* kernels.copy_a for 6-row tiles, in plain C. */
static void copy_a256(int mr, int64_t kc, const float *a, int64_t lda, bool ta, float *dst)
{
    if (ta)
        for (int64_t p = 0; p < kc; p++)
            for (int r = 0; r < mr; r++) dst[p * 6 + r] = a[p * lda + r];
    else
        for (int r = 0; r < mr; r++)
            for (int64_t p = 0; p < kc; p++) dst[p * 6 + r] = a[r * lda + p];
}

static const kernels avx2_kernels = {
    "awl avx2 6x16", 6, 16, pack_b256, tile256_rows, tile256_neighbours, tile256_edge, copy_a256};

/* ---- the product, over either set ------------------------------------------------ */

/* Each thread's scratch, made on its first product and freed when the
 * thread ends (scratch_key's destructor; libgomp ends threads when the
 * thread count falls): the packed block of B, kc x nc floats, and, made
 * when first needed, a block of A's rows copied tile by tile, mc x kc;
 * each made again larger when a larger blocking is set. */
typedef struct scratch {
    float *b, *a, *tile;                    /* tile: one tile of A (AWL_CPU_GEMM_COPY_TILES) */
    size_t b_floats, a_floats, tile_floats; /* what each holds */
} scratch;

static _Thread_local scratch *mine;
static pthread_key_t scratch_key;
static bool have_scratch_key;

static void scratch_free(void *p)
{
    scratch *s = p;
    free(s->b);
    free(s->a);
    free(s->tile);
    free(s);
}

/* Which set runs the products (NULL: none, BLAS does): AVX-512 where the
 * CPU has it; AWL_CPU_GEMM=blas for none, =avx2 for the AVX2 set (on any
 * CPU with AVX2 and FMA). A CPU with AVX2 but not AVX-512 keeps OpenBLAS
 * unless asked: on a Zen 3 (AVX2 alone) the AVX2 tiles made cpu-medium's
 * training step 1.10x slower than OpenBLAS's Zen kernels (median of six
 * alternated rounds, every round slower; blocks of K, B and A that fit
 * its 512 KB L2 did not close it), and on the AVX-512 machine they were
 * level with them (docs/performance.md). Decided once, at the first
 * product. */
static pthread_once_t decided = PTHREAD_ONCE_INIT;
static const kernels *chosen;

/* The bounds of awl_cpu_gemm_blocking_set (cpu_gemm.h). */
static bool blocking_valid(awl_cpu_gemm_blocking b)
{
    return b.kc >= 16 && b.kc <= KC_MAX && b.nc >= 32 && b.nc <= NC_MAX && b.nc % 32 == 0 &&
           b.mc >= 12 && b.mc <= MC_MAX && b.mc % 12 == 0 && b.copy_a >= AWL_CPU_GEMM_COPY_NONE &&
           b.copy_a <= AWL_CPU_GEMM_COPY_TILES;
}

static void decide(void)
{
    const char *shape = getenv("AWL_CPU_GEMM_BLOCKING");
    awl_cpu_gemm_blocking b;
    if (shape && awl_cpu_gemm_blocking_parse(shape, &b) == shape + strlen(shape) &&
        blocking_valid(b))
        blocking = b;
    const char *setting = getenv("AWL_CPU_GEMM");
    const bool blas = setting && strcmp(setting, "blas") == 0;
    const bool avx2 = setting && strcmp(setting, "avx2") == 0;
    __builtin_cpu_init();
    if (blas)
        chosen = NULL;
    else if (avx2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        chosen = &avx2_kernels;
    else if (__builtin_cpu_supports("avx512f") && !avx2)
        chosen = &avx512_kernels;
    have_scratch_key = chosen && pthread_key_create(&scratch_key, scratch_free) == 0;
}

/* *buf with room for n floats (made anew when it holds fewer); false
 * when that cannot be had. */
static bool room(float **buf, size_t *holds, size_t n)
{
    if (*buf && *holds >= n) return true;
    free(*buf);
    *buf = aligned_alloc(64, n * sizeof(float));
    *holds = *buf ? n : 0;
    return *buf != NULL;
}

/* This thread's scratch for blocking bl, with room for a block of A when
 * with_a and for a tile of A (mr rows) when bl copies A a tile at a time;
 * NULL when it cannot be had. */
static scratch *thread_scratch(const awl_cpu_gemm_blocking *bl, bool with_a, int mr)
{
    if (!mine && have_scratch_key) {
        scratch *s = calloc(1, sizeof *s);
        if (!s || pthread_setspecific(scratch_key, s) != 0) {
            free(s);
            return NULL;
        }
        mine = s;
    }
    if (!mine || !room(&mine->b, &mine->b_floats, (size_t)bl->kc * (size_t)bl->nc)) return NULL;
    if (with_a && !room(&mine->a, &mine->a_floats, (size_t)bl->mc * (size_t)bl->kc)) return NULL;
    if (bl->copy_a == AWL_CPU_GEMM_COPY_TILES &&
        !room(&mine->tile, &mine->tile_floats, (size_t)mr * (size_t)bl->kc))
        return NULL;
    return mine;
}

/* One product's operands, as awl_cpu_gemm_f32 got them. */
typedef struct product {
    const kernels *kn;
    awl_cpu_gemm_blocking bl; /* as it was when the product began */
    bool ta, tb, accumulate;
    int64_t m, n, k, lda, ldb, ldc;
    const float *a, *b, *bias;
    float *c;
} product;

/* A row-major A whose rows are a multiple of 4 KB apart puts a tile's
 * rows (and their prefetched next lines) in one set of the L1 cache, which
 * holds 8, and its reads miss: such an A is copied a block of rows and
 * steps at a time, tile by tile, each tile step-major (its rows
 * neighbours), before the block's products. */
static bool rows_alias(const product *g) { return !g->ta && g->lda % 1024 == 0; }

/* Whether A is copied a block at a time (rows_alias, or every A when the
 * blocking says so). */
static bool copies_a(const product *g)
{
    return g->bl.copy_a == AWL_CPU_GEMM_COPY_BLOCKS || rows_alias(g);
}

/* Every tile of rows [i1, i2) over the packed block of B: steps [p0, p0 +
 * kc), columns [j0, j0 + nc). a_block: those rows' steps copied tile by
 * tile (copies_a), or NULL to read A where it lies, or, with
 * AWL_CPU_GEMM_COPY_TILES, to copy each full tile's steps into tile_a
 * before its pass. */
static void pass_tiles(const product *g, int64_t i1, int64_t i2, int64_t p0, int64_t kc, int64_t j0,
                       int64_t nc, const float *packed, const float *a_block, float *tile_a)
{
    const int tile_m = g->kn->mr, tile_n = g->kn->nr;
    const int64_t lda = g->lda, ldc = g->ldc;
    const bool onto_c = g->accumulate || p0 > 0;
    for (int64_t i0 = i1; i0 < i2; i0 += tile_m) {
        const int mr = i2 - i0 < tile_m ? (int)(i2 - i0) : tile_m;
        const float *ap = g->a + (g->ta ? i0 + p0 * lda : i0 * lda + p0);
        int64_t ars = g->ta ? 1 : lda, acs = g->ta ? lda : 1;
        if (a_block) {
            ap = a_block + (i0 - i1) * kc;
            ars = 1;
            acs = tile_m;
        } else if (tile_a && mr == tile_m) {
            g->kn->copy_a(mr, kc, ap, lda, g->ta, tile_a);
            ap = tile_a;
            ars = 1;
            acs = tile_m;
        }
        float *cp = g->c + i0 * ldc + j0;
        for (int64_t jp = 0; jp < nc; jp += tile_n) {
            const float *add = onto_c ? cp + jp : g->bias ? g->bias + j0 + jp : NULL;
            const int64_t w = nc - jp < tile_n ? nc - jp : tile_n;
            const float *panel = packed + jp * kc;
            const int64_t ld = onto_c ? ldc : 0;
            if (mr < tile_m)
                g->kn->tile_edge(mr, kc, ap, ars, acs, panel, cp + jp, ldc, w, add, ld);
            else if (ars == 1)
                g->kn->tile_neighbours(kc, ap, acs, panel, cp + jp, ldc, w, add, ld);
            else
                g->kn->tile_rows(kc, ap, ars, panel, cp + jp, ldc, w, add, ld);
        }
    }
}

/* Rows [i1, i2) of C: for each block of nc columns and kb steps (K in
 * blocks of one length, at most kc), B's block is packed and every tile of
 * these rows passes over it. Where A is copied (copies_a), the steps come
 * first, so that each block of A is copied once for all the columns (C's
 * elements still sum their blocks of K in order). */
static void block_of_rows(const product *g, int64_t i1, int64_t i2, scratch *s)
{
    const int tile_m = g->kn->mr;
    const int64_t n = g->n, k = g->k;
    const int64_t most_k = g->bl.kc, block_n = g->bl.nc;
    const int64_t k_blocks = (k + most_k - 1) / most_k, kb = (k + k_blocks - 1) / k_blocks;
    if (!copies_a(g)) {
        for (int64_t j0 = 0; j0 < n; j0 += block_n)
            for (int64_t p0 = 0; p0 < k; p0 += kb) {
                const int64_t nc = n - j0 < block_n ? n - j0 : block_n,
                              kc = k - p0 < kb ? k - p0 : kb;
                g->kn->pack_b(s->b, g->b, g->ldb, g->tb, p0, kc, j0, nc);
                pass_tiles(g, i1, i2, p0, kc, j0, nc, s->b, NULL,
                           g->bl.copy_a == AWL_CPU_GEMM_COPY_TILES ? s->tile : NULL);
            }
        return;
    }
    for (int64_t p0 = 0; p0 < k; p0 += kb) {
        const int64_t kc = k - p0 < kb ? k - p0 : kb;
        for (int64_t i0 = i1; i0 < i2; i0 += tile_m) {
            const int mr = i2 - i0 < tile_m ? (int)(i2 - i0) : tile_m;
            const float *ap = g->a + (g->ta ? p0 * g->lda + i0 : i0 * g->lda + p0);
            g->kn->copy_a(mr, kc, ap, g->lda, g->ta, s->a + (i0 - i1) * kc);
        }
        for (int64_t j0 = 0; j0 < n; j0 += block_n) {
            const int64_t nc = n - j0 < block_n ? n - j0 : block_n;
            g->kn->pack_b(s->b, g->b, g->ldb, g->tb, p0, kc, j0, nc);
            pass_tiles(g, i1, i2, p0, kc, j0, nc, s->b, s->a, NULL);
        }
    }
}

bool awl_cpu_gemm_f32(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a,
                      int64_t lda, const float *b, int64_t ldb, bool accumulate, float *c,
                      int64_t ldc, const float *bias)
{
    if (!awl_cpu_gemm_f32_suits(m, n, k)) return false;
    const product g = {chosen, blocking, ta,  tb,  accumulate, m, n,
                       k,      lda,      ldb, ldc, a,          b, accumulate ? NULL : bias,
                       c};
    scratch *s = thread_scratch(&g.bl, copies_a(&g), chosen->mr);
    if (!s) return false;
    /* Rows in blocks of at most mc, all the same size but the last, each a
     * multiple of the tile's rows (a band of one thread is one block at a
     * GPT's sizes) */
    const int64_t blocks = (m + g.bl.mc - 1) / g.bl.mc, mr = chosen->mr;
    const int64_t rows = ((m + blocks - 1) / blocks + mr - 1) / mr * mr;
    for (int64_t i1 = 0; i1 < m; i1 += rows)
        block_of_rows(&g, i1, m - i1 < rows ? m : i1 + rows, s);
    return true;
}

awl_cpu_gemm_blocking awl_cpu_gemm_blocking_get(void)
{
    pthread_once(&decided, decide);
    return blocking;
}

bool awl_cpu_gemm_blocking_set(awl_cpu_gemm_blocking b)
{
    if (!blocking_valid(b)) return false;
    pthread_once(&decided, decide); /* so that a setting from the environment comes first */
    blocking = b;
    return true;
}

const char *awl_cpu_gemm_f32_name(void)
{
    pthread_once(&decided, decide);
    return chosen ? chosen->name : NULL;
}

bool awl_cpu_gemm_f32_suits(int64_t m, int64_t n, int64_t k)
{
    /* Enough rows to fill tiles, and columns that fill the last panel to
     * within an eighth (n = 65 would compute 96 columns with AVX-512: BLAS's
     * narrower tiles do better there). */
    if (!awl_cpu_gemm_f32_name()) return false;
    const int64_t padded = (n + chosen->nr - 1) / chosen->nr * chosen->nr;
    return m >= 2 * chosen->mr && k >= 1 && n >= 16 && 8 * padded <= 9 * n;
}

#else /* not x86-64: every product goes to BLAS */

bool awl_cpu_gemm_f32(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a,
                      int64_t lda, const float *b, int64_t ldb, bool accumulate, float *c,
                      int64_t ldc, const float *bias)
{
    (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)a, (void)lda, (void)b, (void)ldb;
    (void)accumulate, (void)c, (void)ldc, (void)bias;
    return false;
}

const char *awl_cpu_gemm_f32_name(void) { return NULL; }

awl_cpu_gemm_blocking awl_cpu_gemm_blocking_get(void) { return (awl_cpu_gemm_blocking){0}; }

bool awl_cpu_gemm_blocking_set(awl_cpu_gemm_blocking b)
{
    (void)b;
    return false;
}

bool awl_cpu_gemm_f32_suits(int64_t m, int64_t n, int64_t k)
{
    (void)m, (void)n, (void)k;
    return false;
}

#endif

/* ---- blockings written as text (any CPU) ----------------------------------------- */

const char *awl_cpu_gemm_blocking_parse(const char *text, awl_cpu_gemm_blocking *b)
{
    int kc, nc, mc, used = 0;
    if (sscanf(text, "%dx%dx%d%n", &kc, &nc, &mc, &used) != 3) return NULL;
    text += used;
    const awl_cpu_gemm_copy copy = *text == 'c'   ? AWL_CPU_GEMM_COPY_BLOCKS
                                   : *text == 't' ? AWL_CPU_GEMM_COPY_TILES
                                                  : AWL_CPU_GEMM_COPY_NONE;
    *b = (awl_cpu_gemm_blocking){.kc = kc, .nc = nc, .mc = mc, .copy_a = copy};
    return copy == AWL_CPU_GEMM_COPY_NONE ? text : text + 1;
}

const char *awl_cpu_gemm_blocking_name(awl_cpu_gemm_blocking b, char *buf, size_t size)
{
    const char *suffix = b.copy_a == AWL_CPU_GEMM_COPY_BLOCKS  ? "c"
                         : b.copy_a == AWL_CPU_GEMM_COPY_TILES ? "t"
                                                               : "";
    snprintf(buf, size, "%dx%dx%d%s", b.kc, b.nc, b.mc, suffix);
    return buf;
}
