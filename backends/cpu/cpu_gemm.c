/*
 * backends/cpu/cpu_gemm.c - awl's own float32 product on CPUs with AVX-512.
 *
 * C (m x n, row-major) = op(A) op(B), or += when accumulating, on one
 * thread (cpu_matmul.c splits a product between threads in bands and calls
 * this for each). Float64, and CPUs without AVX-512, go to OpenBLAS.
 *
 * Why not OpenBLAS here too: at a GPT's shapes its SkylakeX kernel runs at
 * 92-95% of the core's FMA peak, and around it the product spends another
 * 6-8% packing both operands into its own layouts and zeroing C before a
 * product that overwrites it. The kernel below runs at 97% of the peak, and
 * the product packs only one operand (docs/performance.md has the figures).
 *
 * The register tile. The innermost loop keeps a 12 x 32 block of C in 24
 * AVX-512 registers (12 rows, two 16-float vectors a row). Each step p
 * loads one row of B's block (32 floats, two vectors) and, for each of the
 * 12 rows, broadcasts A(r, p) and adds A(r, p) * B(p, 0..32) into the row:
 * 24 fused multiply-adds for 14 loads, and no other work. 24 independent
 * sums hide the FMA latency (4 cycles, two pipes) with room to spare; the
 * 32 registers hold the tile, B's two vectors and the broadcast.
 *
 * Which operand is packed. The 12 values broadcast at each step are read
 * from A where it lies: 12 rows of a row-major A (one float from each row's
 * current cache line), or 12 neighbours of a transposed A's row. Packing A
 * would cost one pass over A for every 2n multiply-adds done with it; at
 * n = 128 that is as much time as it saves. The rows' next cache lines are
 * prefetched every 16 steps, which the hardware prefetcher does not do well
 * for 12 streams at once. The exception: rows a multiple of 4 KB apart
 * (K = 1024, 2048, 3072 in a row-major A) fall in one set of the L1 cache,
 * which holds 8 lines, and the tile's reads miss; then each block of A's
 * rows and KC steps is copied once, tile by tile (rows_alias; a 2048^3
 * product 93-95 GFLOP/s on one thread without the copy, 106 with it,
 * OpenBLAS 106-108). B's block is read 32 floats at a time for every
 * 12 rows of A, so it is packed: KC rows by NC columns of op(B), as panels
 * of 32 columns whose rows follow each other (a panel is one contiguous
 * stream for the tile), columns past n zero. From a row-major B that is a
 * copy of 32-float runs; from a transposed B (a linear layer's weight in
 * x @ w^T) a transpose, done 16 x 16 floats at a time in registers.
 *
 * Blocking. KC = 256 rows of B (a panel is 32 KB; a tile's 12 rows of A
 * are 12 KB) and NC = 384 columns (the packed block, 384 KB, stays in the
 * L2 cache while the rows of A pass over it). A's rows are taken in blocks
 * of at most MC = 1536 (one block for a thread's band at a GPT's sizes),
 * so that a block's rows of A are still in a cache when the next block of
 * columns comes round; within one, C's columns are walked in blocks of NC,
 * then K in blocks of KC (each block after the first adds onto C), then
 * A's rows 12 at a time, then the block's panels. (The rows of a product
 * of 16,384 x 384 x 1,152, shakespeare-char's qkv, in one block: 200-207
 * GFLOP/s on 2 threads; in blocks of 1536: 213-215.)
 *
 * Edges: the last panel's columns past n are masked off when C is read and
 * written (and are zero in the panel); a block's last rows, fewer than 12,
 * go to the same loop compiled for their number of rows (tile_edge).
 *
 * Summation order: each element of C is sum over p in order within a KC
 * block, the blocks added onto C in order. That does not depend on where a
 * band of C starts or ends, so a product gives the same bits whatever the
 * thread count (docs/determinism in DESIGN.md).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_gemm.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_AVX512_GEMM 1
#include <immintrin.h>
#endif

#ifdef HAVE_AVX512_GEMM

#define MR 12       /* rows of the register tile */
#define NR 32       /* its columns: two 16-float vectors */
#define KC 256      /* rows of B packed at a time */
#define NC 384      /* columns of B packed at a time */
#define MC 1536     /* rows of A and C that pass over one packed block of B */
#define PREFETCH 32 /* how many floats ahead A's rows are prefetched */

#define AVX512 __attribute__((target("avx512f")))

/* Each thread's scratch, made on its first product and freed when the
 * thread ends (scratch_key's destructor; libgomp ends threads when the
 * thread count falls): the packed block of B, KC x NC floats, and, made
 * when first needed, a block of A's rows copied tile by tile, MC x KC. */
typedef struct scratch {
    float *b, *a;
} scratch;

static _Thread_local scratch *mine;
static pthread_key_t scratch_key;
static bool have_scratch_key;

static void scratch_free(void *p)
{
    scratch *s = p;
    free(s->b);
    free(s->a);
    free(s);
}

/* C's tile of R rows (ldc apart; the columns past the masks untouched) :=
 * the tile's A (R rows of kc, element (r, p) at a[r * ars + p * acs]) times
 * a packed panel (kc rows of NR), plus the addend's rows (ld apart: C
 * itself, or a bias row with ld 0; NULL: nothing). R is a constant
 * wherever this is inlined, so the loops over rows unroll and the sums
 * stay in registers. */
static inline __attribute__((always_inline)) AVX512 void
tile(int R, int64_t kc, const float *restrict a, int64_t ars, int64_t acs,
     const float *restrict panel, float *c, int64_t ldc, __mmask16 mask0, __mmask16 mask1,
     const float *add, int64_t ld)
{
    __m512 sum[MR][2];
#pragma GCC unroll 12
    for (int r = 0; r < R; r++) sum[r][0] = sum[r][1] = _mm512_setzero_ps();
    for (int64_t p = 0; p < kc; p++) {
        if (acs == 1 && (p & 15) == 0) { /* rows apart: each one's next cache line */
#pragma GCC unroll 12
            for (int r = 0; r < R; r++)
                _mm_prefetch((const char *)(a + r * ars + PREFETCH), _MM_HINT_T0);
        }
        const __m512 b0 = _mm512_load_ps(panel), b1 = _mm512_load_ps(panel + 16);
#pragma GCC unroll 12
        for (int r = 0; r < R; r++) {
            const __m512 ar = _mm512_set1_ps(a[r * ars]);
            sum[r][0] = _mm512_fmadd_ps(ar, b0, sum[r][0]);
            sum[r][1] = _mm512_fmadd_ps(ar, b1, sum[r][1]);
        }
        a += acs;
        panel += NR;
    }
#pragma GCC unroll 12
    for (int r = 0; r < R; r++) {
        float *row = c + r * ldc;
        if (add) {
            sum[r][0] = _mm512_add_ps(_mm512_maskz_loadu_ps(mask0, add + r * ld), sum[r][0]);
            sum[r][1] = _mm512_add_ps(_mm512_maskz_loadu_ps(mask1, add + r * ld + 16), sum[r][1]);
        }
        /* plain stores where the panel is full: a load cannot be served
         * from a masked store still in flight (the finish reads the tile
         * back at once), only from a plain one */
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
 * one (a tile's rows are neighbours): two copies of the loop, each with its
 * strides' constants folded in. */
static AVX512 void tile_rows(int64_t kc, const float *a, int64_t lda, const float *panel, float *c,
                             int64_t ldc, __mmask16 mask0, __mmask16 mask1, const float *add,
                             int64_t ld)
{
    tile(MR, kc, a, lda, 1, panel, c, ldc, mask0, mask1, add, ld);
}

static AVX512 void tile_neighbours(int64_t kc, const float *a, int64_t lda, const float *panel,
                                   float *c, int64_t ldc, __mmask16 mask0, __mmask16 mask1,
                                   const float *add, int64_t ld)
{
    tile(MR, kc, a, 1, lda, panel, c, ldc, mask0, mask1, add, ld);
}

/* The last tile of a block whose rows do not fill one: R = mr < MR rows,
 * one copy of the loop for each R (from a row-major or a transposed A). */
static AVX512 void tile_edge(int mr, int64_t kc, const float *a, int64_t ars, int64_t acs,
                             const float *panel, float *c, int64_t ldc, __mmask16 mask0,
                             __mmask16 mask1, const float *add, int64_t ld)
{
#define EDGE(R)                                                                                    \
    case R:                                                                                        \
        if (acs == 1)                                                                              \
            tile(R, kc, a, ars, 1, panel, c, ldc, mask0, mask1, add, ld);                          \
        else                                                                                       \
            tile(R, kc, a, 1, acs, panel, c, ldc, mask0, mask1, add, ld);                          \
        break;
    switch (mr) {
        EDGE(1) EDGE(2) EDGE(3) EDGE(4) EDGE(5) EDGE(6) EDGE(7) EDGE(8) EDGE(9) EDGE(10) EDGE(11)
    }
#undef EDGE
}

/* dst[i * ldd + j] = src[j * lds + i] for a 16 x 16 block: three rounds of
 * shuffles, pairs of floats, then pairs of pairs, then 128-bit lanes. */
static AVX512 void transpose16(const float *src, int64_t lds, float *dst, int64_t ldd)
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

/* The masks of a panel's two vectors for w valid columns. */
static __mmask16 columns_mask(int64_t w)
{
    return w >= 16 ? (__mmask16)0xffff : w <= 0 ? 0 : (__mmask16)((1u << w) - 1);
}

/* Packs op(B)'s rows [p0, p0 + kc) and columns [j0, j0 + nc) into panels of
 * NR columns (kc x NR each, one after the other), columns past nc zero.
 * op(B)(p, j) is b[p * ldb + j], or b[j * ldb + p] when transposed. */
static AVX512 void pack_b(float *restrict dst, const float *b, int64_t ldb, bool tb, int64_t p0,
                          int64_t kc, int64_t j0, int64_t nc)
{
    for (int64_t jp = 0; jp < nc; jp += NR) {
        const int64_t w = nc - jp < NR ? nc - jp : NR;
        float *panel = dst + jp * kc;
        if (!tb) { /* B's rows, 32 floats at a time (masked past n) */
            const __mmask16 m0 = columns_mask(w), m1 = columns_mask(w - 16);
            for (int64_t p = 0; p < kc; p++) {
                const float *src = b + (p0 + p) * ldb + j0 + jp;
                _mm512_store_ps(panel + p * NR, _mm512_maskz_loadu_ps(m0, src));
                _mm512_store_ps(panel + p * NR + 16, _mm512_maskz_loadu_ps(m1, src + 16));
            }
            continue;
        }
        const float *src = b + (j0 + jp) * ldb + p0; /* column j0 + jp of op(B), from row p0 */
        int64_t p = 0;
        if (w == NR)
            for (; p + 16 <= kc; p += 16) {
                transpose16(src + p, ldb, panel + p * NR, NR);
                transpose16(src + 16 * ldb + p, ldb, panel + p * NR + 16, NR);
            }
        for (; p < kc; p++)
            for (int64_t q = 0; q < NR; q++) panel[p * NR + q] = q < w ? src[q * ldb + p] : 0.0f;
    }
}

/* Whether awl's product runs: the CPU has AVX-512 and AWL_CPU_GEMM is not
 * "blas". Decided once, at the first product. */
static pthread_once_t decided = PTHREAD_ONCE_INIT;
static bool use_awl_gemm;

static void decide(void)
{
    const char *setting = getenv("AWL_CPU_GEMM");
    __builtin_cpu_init();
    use_awl_gemm = __builtin_cpu_supports("avx512f") && !(setting && strcmp(setting, "blas") == 0);
    have_scratch_key = use_awl_gemm && pthread_key_create(&scratch_key, scratch_free) == 0;
}

/* This thread's scratch, with room for a block of A when with_a; NULL
 * when it cannot be had. */
static scratch *thread_scratch(bool with_a)
{
    if (!mine && have_scratch_key) {
        scratch *s = calloc(1, sizeof *s);
        if (s) s->b = aligned_alloc(64, (size_t)KC * NC * sizeof(float));
        if (!s || !s->b || pthread_setspecific(scratch_key, s) != 0) {
            if (s) free(s->b);
            free(s);
            return NULL;
        }
        mine = s;
    }
    if (mine && with_a && !mine->a) mine->a = aligned_alloc(64, (size_t)MC * KC * sizeof(float));
    return mine && (!with_a || mine->a) ? mine : NULL;
}

/* One product's operands, as awl_cpu_gemm_f32 got them. */
typedef struct product {
    bool ta, tb, accumulate;
    int64_t m, n, k, lda, ldb, ldc;
    const float *a, *b, *bias;
    float *c;
} product;

/* A row-major A whose rows are a multiple of 4 KB apart puts a tile's 12
 * rows in one set of the L1 cache, which holds 8, and its reads miss:
 * such an A is copied a block of rows and steps at a time, tile by tile,
 * each tile step-major (its rows neighbours), before the block's products. */
static bool rows_alias(const product *g) { return !g->ta && g->lda % 1024 == 0; }

/* Every tile of rows [i1, i2) over the packed block of B: steps [p0, p0 +
 * kc), columns [j0, j0 + nc). a_block: those rows' steps copied tile by
 * tile (rows_alias), or NULL to read A where it lies. */
static AVX512 void pass_tiles(const product *g, int64_t i1, int64_t i2, int64_t p0, int64_t kc,
                              int64_t j0, int64_t nc, const float *packed, const float *a_block)
{
    const int64_t lda = g->lda, ldc = g->ldc;
    const bool onto_c = g->accumulate || p0 > 0;
    for (int64_t i0 = i1; i0 < i2; i0 += MR) {
        const int mr = i2 - i0 < MR ? (int)(i2 - i0) : MR;
        const float *ap = g->a + (g->ta ? i0 + p0 * lda : i0 * lda + p0);
        int64_t ars = g->ta ? 1 : lda, acs = g->ta ? lda : 1;
        if (a_block) {
            ap = a_block + (i0 - i1) * kc;
            ars = 1;
            acs = MR;
        }
        float *cp = g->c + i0 * ldc + j0;
        for (int64_t jp = 0; jp < nc; jp += NR) {
            const __mmask16 m0 = columns_mask(nc - jp), m1 = columns_mask(nc - jp - 16);
            const float *panel = packed + jp * kc;
            const float *add = onto_c ? cp + jp : g->bias ? g->bias + j0 + jp : NULL;
            const int64_t ld = onto_c ? ldc : 0;
            if (mr < MR)
                tile_edge(mr, kc, ap, ars, acs, panel, cp + jp, ldc, m0, m1, add, ld);
            else if (ars == 1)
                tile_neighbours(kc, ap, acs, panel, cp + jp, ldc, m0, m1, add, ld);
            else
                tile_rows(kc, ap, ars, panel, cp + jp, ldc, m0, m1, add, ld);
        }
    }
}

/* Rows [i1, i2) of C: for each block of NC columns and KC steps, B's block
 * is packed and every tile of these rows passes over it. With rows_alias,
 * the steps come first, so that each block of A is copied once for all
 * the columns (C's elements still sum their KC blocks in order). */
static AVX512 void block_of_rows(const product *g, int64_t i1, int64_t i2, scratch *s)
{
    const int64_t n = g->n, k = g->k;
    if (!rows_alias(g)) {
        for (int64_t j0 = 0; j0 < n; j0 += NC)
            for (int64_t p0 = 0; p0 < k; p0 += KC) {
                const int64_t nc = n - j0 < NC ? n - j0 : NC, kc = k - p0 < KC ? k - p0 : KC;
                pack_b(s->b, g->b, g->ldb, g->tb, p0, kc, j0, nc);
                pass_tiles(g, i1, i2, p0, kc, j0, nc, s->b, NULL);
            }
        return;
    }
    for (int64_t p0 = 0; p0 < k; p0 += KC) {
        const int64_t kc = k - p0 < KC ? k - p0 : KC;
        for (int64_t i0 = i1; i0 < i2; i0 += MR) {
            const int mr = i2 - i0 < MR ? (int)(i2 - i0) : MR;
            const float *ap = g->a + i0 * g->lda + p0;
            float *tile_a = s->a + (i0 - i1) * kc;
            for (int r = 0; r < mr; r++)
                for (int64_t p = 0; p < kc; p++) tile_a[p * MR + r] = ap[r * g->lda + p];
        }
        for (int64_t j0 = 0; j0 < n; j0 += NC) {
            const int64_t nc = n - j0 < NC ? n - j0 : NC;
            pack_b(s->b, g->b, g->ldb, g->tb, p0, kc, j0, nc);
            pass_tiles(g, i1, i2, p0, kc, j0, nc, s->b, s->a);
        }
    }
}

bool awl_cpu_gemm_f32(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a,
                      int64_t lda, const float *b, int64_t ldb, bool accumulate, float *c,
                      int64_t ldc, const float *bias)
{
    if (!awl_cpu_gemm_f32_suits(m, n, k)) return false;
    const product g = {ta, tb, accumulate, m, n, k, lda, ldb, ldc, a, b, accumulate ? NULL : bias,
                       c};
    scratch *s = thread_scratch(rows_alias(&g));
    if (!s) return false;
    /* Rows in blocks of at most MC, all the same size but the last, each a
     * multiple of MR (a band of one thread is one block at a GPT's sizes) */
    const int64_t blocks = (m + MC - 1) / MC;
    const int64_t rows = ((m + blocks - 1) / blocks + MR - 1) / MR * MR;
    for (int64_t i1 = 0; i1 < m; i1 += rows)
        block_of_rows(&g, i1, m - i1 < rows ? m : i1 + rows, s);
    return true;
}

const char *awl_cpu_gemm_f32_name(void)
{
    pthread_once(&decided, decide);
    return use_awl_gemm ? "awl avx512 12x32" : NULL;
}

bool awl_cpu_gemm_f32_suits(int64_t m, int64_t n, int64_t k)
{
    /* Enough rows to fill tiles, and columns that fill the last panel to
     * within an eighth (n = 65 would compute 96 columns: BLAS's narrower
     * tiles do better there). */
    const int64_t padded = (n + NR - 1) / NR * NR;
    return awl_cpu_gemm_f32_name() && m >= 2 * MR && k >= 1 && n >= 16 && 8 * padded <= 9 * n;
}

#else /* no AVX-512 build: every product goes to BLAS */

bool awl_cpu_gemm_f32(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a,
                      int64_t lda, const float *b, int64_t ldb, bool accumulate, float *c,
                      int64_t ldc, const float *bias)
{
    (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)a, (void)lda, (void)b, (void)ldb;
    (void)accumulate, (void)c, (void)ldc, (void)bias;
    return false;
}

const char *awl_cpu_gemm_f32_name(void) { return NULL; }

bool awl_cpu_gemm_f32_suits(int64_t m, int64_t n, int64_t k)
{
    (void)m, (void)n, (void)k;
    return false;
}

#endif
