/*
 * backends/cpu/cpu_attention.c - fused scaled dot-product attention.
 *
 * q, k, v, out (B, H, T, D) float32 with D contiguous and any strides along
 * B, H and T, which is how a GPT's fused qkv projection hands them over
 * (slices of (B, T, 3, H, D) with H and T swapped) without a copy; lse
 * (B, H, T) float32, the log of each softmax row's denominator.
 *
 * Each (b, h) is an independent problem, and the (b, h) problems are split
 * between OpenMP threads. Within one, for each query row:
 *
 *   forward, row r:   s_j = scale q_r . k_j            for the keys j it sees
 *                     e_j = exp(s_j - max_j s_j),  lse_r = log sum exp(s)
 *                     out_r = (sum_j e_j v_j) / sum_j e_j    (= sum_j p_j v_j)
 *   backward, row r:  p_j = exp(scale q_r . k_j - lse_r)   (recomputed, not saved)
 *                     dv_j += p_j dO_r,   dp_j = dO_r . v_j
 *                     ds_j = p_j (dp_j - dO_r . out_r) scale
 *                     dq_r = sum_j ds_j k_j,   dk_j += ds_j q_r
 *
 * (dO_r . out_r equals sum_j p_j dp_j, the softmax backward's dot product,
 * without a pass over the row.) With the causal mask row r sees keys 0..r
 * only, so half of the T x T work is skipped outright. Per head the scratch
 * is k (and in the backward v) transposed, D x T, so the dot products with
 * every key vectorise over the keys; the forward keeps one tile of scores
 * (ROWS x T), the backward the head's P and dS (T x T), so that dk and dv
 * are summed column by column once all rows are done. The loops run over
 * ROWS query rows at a time (see ROWS below).
 *
 * Dropout (p > 0) multiplies weight j of row r by m_j, 256 / threshold
 * where common/dropout.h's attention mask keeps it (1 / (1 - p) with p
 * rounded to a multiple of 1/256) and 0 where it drops it, recomputed in the
 * backward from the generator state the forward got (one row of m sits in
 * the scratch):
 *
 *   forward:          out_r = sum_j p_j m_j v_j       (lse_r as without)
 *   backward:         dv_j += p_j m_j dO_r,   ds_j = p_j (m_j dp_j - dO_r . out_r) scale
 *
 * (dO_r . out_r is still sum_j p_j m_j dp_j, the dot product the dropped
 * softmax's backward needs.)
 *
 * Why not three BLAS calls per head: at a GPT's head sizes (T = 64..256,
 * D = 32..64) each product is tiny, BLAS spends its time packing operands
 * and zeroing outputs, and it cannot skip the masked half. These loops are
 * plain C that the compiler vectorises (omp simd, cpu_math.h's expf).
 * Float32 only: other dtypes return AWL_ERR_UNSUPPORTED and are composed.
 */
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_gemm.h"
#include "backends/cpu/cpu_internal.h"
#include "backends/cpu/cpu_math.h"
#include "backends/cpu/cpu_philox.h"
#include "common/dropout.h"

/* A (B, H, T, D) float32 view: base pointer and strides along B, H, T (D is
 * contiguous). */
typedef struct heads {
    char *base;
    int64_t sb, sh, st;
} heads;

static bool heads_of(const awl_view *v, const int64_t *shape, heads *h)
{
    if (!v || v->dtype != AWL_F32 || v->ndim != 4) return false;
    for (int d = 0; d < 4; d++)
        if (v->shape[d] != shape[d]) return false;
    if (shape[3] != 1 && v->strides[3] != 1) return false;
    h->base = cpu_view_ptr(v);
    h->sb = v->strides[0];
    h->sh = v->strides[1];
    h->st = v->strides[2];
    return true;
}

/* Row t of head (b, i). */
static float *row_of(const heads *h, int64_t b, int64_t i, int64_t t)
{
    return (float *)h->base + b * h->sb + i * h->sh + t * h->st;
}

/* lse (B, H, T) float32, any strides. */
typedef struct lse_view {
    float *base;
    int64_t sb, sh, st;
} lse_view;

static bool lse_of(const awl_view *v, const int64_t *shape, lse_view *l)
{
    if (!v || v->dtype != AWL_F32 || v->ndim != 3) return false;
    for (int d = 0; d < 3; d++)
        if (v->shape[d] != shape[d]) return false;
    l->base = (float *)cpu_view_ptr(v);
    l->sb = v->strides[0];
    l->sh = v->strides[1];
    l->st = v->strides[2];
    return true;
}

static float *lse_at(const lse_view *l, int64_t b, int64_t i, int64_t t)
{
    return l->base + b * l->sb + i * l->sh + t * l->st;
}

/* Keys (or values) transposed to D x Tp, Tp = T rounded up to BLOCK, the
 * padding zeroed: the dot products of one query with a block of keys then
 * read BLOCK consecutive floats per dimension. */
#define BLOCK 16

/* Query rows (and, in the backward's second phase, key columns) are taken
 * ROWS at a time. One row's sums alone form a single chain of dependent
 * multiply-adds, each waiting for the last; ROWS rows give ROWS independent
 * chains that keep the vector units busy, and each block of keys or values
 * loaded from memory serves all of them. Six: a 6 x 16 tile of float32 sums
 * is 12 of AVX2's 16 vector registers, which leaves room for the two loads
 * and the broadcast, where 8 x 16 spilled sums to the stack on every step
 * (`OMP_NUM_THREADS=1 perf stat -e task-clock ./build-cpu/bench_kernels
 * full attention` on Zen 3: 7.3-7.6 s with 8 rows and separate multiplies
 * and adds, 6.1-6.4 s with 6 rows and fused multiply-adds). */
/*
 * With AVX-512 there are 32 vector registers, and the tiles change:
 *   - the loops use 16-float (zmm) vectors: GCC's tuning for these CPUs
 *     prefers 8-float ones, and so would give each multiply-add half the
 *     lanes the CPU has;
 *   - eight rows: a 16-float block of a row's sums is then one register,
 *     and a multiply-add has 4 cycles of latency on two ports, so eight
 *     independent chains are what keeps both busy (six would leave a
 *     quarter of the cycles idle).
 * AWL_CPU_ATTENTION_AVX2_TILES keeps the AVX2 tiles on such a CPU, for
 * the comparison (scripts/cpu_device_run.sh, the kernels stage;
 * docs/performance.md gives the figures).
 */
#if defined(__AVX512F__) && !defined(AWL_CPU_ATTENTION_AVX2_TILES)
#if defined(__GNUC__) && !defined(__clang__) /* clang takes the width from -march */
#pragma GCC target("prefer-vector-width=512")
#endif
#define ROWS 8
#define TRANSPOSE_IN_REGISTERS 1 /* transpose_head: cpu_gemm.c's 16 x 16 blocks */
#define WIDE_DOTS 1              /* tile_dots may take 32 keys at a time: wide_dots */
#else
#define ROWS 6
#endif

static int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

/* The row stride of every T-long scratch row (k and v transposed, the
 * score tiles, P and dS): Tp, or Tp + BLOCK where Tp / BLOCK is even. The
 * loops walk these arrays down a column, one row per step, and a stride
 * of a power of two cache lines (T = 128: 8 lines; T = 256: 16) maps every
 * row to the same few sets of the L1 cache, which then holds 8 or 4 of the
 * rows per column block and misses on the rest. An odd number of lines
 * spreads the rows over all sets. (`OMP_NUM_THREADS=1 perf stat -e
 * task-clock ./build-cpu/bench_kernels full attention`, Zen 3, alternated
 * three times: 8.53, 8.08, 8.79 s with a stride of Tp; 8.44, 7.74, 8.33 s
 * with this one.) */
static int64_t row_stride(int64_t Tp) { return (Tp / BLOCK) % 2 ? Tp : Tp + BLOCK; }

/* The last key each row r0 + k of a tile sees: itself with the causal
 * mask, else T - 1. A row past T (the last tile's padding) sees key 0
 * only, so that its weights stay finite; its output goes to the sink. */
static void tile_last_keys(int64_t r0, int64_t T, bool causal, int64_t last[ROWS])
{
    for (int k = 0; k < ROWS; k++) last[k] = r0 + k >= T ? 0 : causal ? r0 + k : T - 1;
}

/* A tile's rows of scores (row k at S + k * ld, keys [0, nt), nt a
 * multiple of BLOCK) := e^(s_j - top_k) for the keys j <= last[k] the row
 * sees and 0 past them, top_k the row's largest score; sum[k] := the sum
 * of the row's weights. The rows are walked together, a block of keys at
 * a time, each row's largest score and sum kept in BLOCK lanes until the
 * end: one row alone is a few blocks (72 keys on average at cpu-medium's
 * T = 128), too short a loop for its e^x's to overlap, where eight rows'
 * are independent (docs/performance.md, "The softmax a tile at a time").
 * The whole blocks past a row's last key are set to 0 without an e^x. */
static void tile_softmax(float *S, int64_t ld, int64_t nt, const int64_t last[ROWS],
                         float top[ROWS], float sum[ROWS])
{
    float most[ROWS][BLOCK], total[ROWS][BLOCK];
    for (int k = 0; k < ROWS; k++)
        for (int jj = 0; jj < BLOCK; jj++) most[k][jj] = -INFINITY, total[k][jj] = 0.0f;
    for (int64_t j0 = 0; j0 < nt; j0 += BLOCK)
        for (int k = 0; k < ROWS; k++) {
            if (j0 > last[k]) continue;
            float *p = S + k * ld + j0;
            const int64_t seen = last[k] - j0; /* the block's keys jj <= seen are seen */
#pragma omp simd
            for (int jj = 0; jj < BLOCK; jj++) {
                const float s = jj <= seen ? p[jj] : -INFINITY;
                p[jj] = s;
                most[k][jj] = s > most[k][jj] ? s : most[k][jj];
            }
        }
    for (int k = 0; k < ROWS; k++) {
        top[k] = -INFINITY;
        for (int jj = 0; jj < BLOCK; jj++) top[k] = most[k][jj] > top[k] ? most[k][jj] : top[k];
    }
    for (int64_t j0 = 0; j0 < nt; j0 += BLOCK)
        for (int k = 0; k < ROWS; k++) {
            float *p = S + k * ld + j0;
            if (j0 > last[k]) {
                memset(p, 0, BLOCK * sizeof *p);
                continue;
            }
#pragma omp simd
            for (int jj = 0; jj < BLOCK; jj++) {
                p[jj] = cpu_expf(p[jj] - top[k]);
                total[k][jj] += p[jj];
            }
        }
    for (int k = 0; k < ROWS; k++) {
        sum[k] = 0.0f;
        for (int jj = 0; jj < BLOCK; jj++) sum[k] += total[k][jj];
    }
}

static void transpose_head(const heads *src, int64_t b, int64_t i, int64_t T, int64_t D,
                           float scale, float *dst)
{
    const int64_t Tp = round_up(T, BLOCK), ld = row_stride(Tp);
    const float *r = row_of(src, b, i, 0);
    int64_t t0 = 0;
#ifdef TRANSPOSE_IN_REGISTERS
    /* 16 x 16 blocks transposed in registers (16 rows read at once, their
     * misses in flight together), then scaled a row of dst at a time */
    if (D % 16 == 0) {
        for (; t0 + 16 <= T; t0 += 16)
            for (int64_t d = 0; d < D; d += 16)
                awl_cpu_transpose16(r + t0 * src->st + d, src->st, dst + d * ld + t0, ld);
        if (scale != 1.0f)
            for (int64_t d = 0; d < D; d++)
#pragma omp simd
                for (int64_t t = 0; t < t0; t++) dst[d * ld + t] *= scale;
    }
#endif
    /* the rest, a float at a time: d outermost, so that the first pass
     * reads one float of every row and the misses on all of them are in
     * flight together */
    for (int64_t d = 0; d < D; d++) {
        for (int64_t t = t0; t < T; t++) dst[d * ld + t] = r[t * src->st + d] * scale;
        for (int64_t t = T; t < Tp; t++) dst[d * ld + t] = 0.0f;
    }
}

/* Pointers to rows r0 .. r0+ROWS-1 of head (b, i); rows past T point to
 * `spare` (a D-float row: zeros for inputs, a sink for outputs). */
static void tile_rows(const heads *h, int64_t b, int64_t i, int64_t r0, int64_t T, float *spare,
                      float *rows[ROWS])
{
    for (int k = 0; k < ROWS; k++) rows[k] = r0 + k < T ? row_of(h, b, i, r0 + k) : spare;
}

/* Asks for rows r0 .. r0+ROWS-1 of head (b, i) ahead of their use: the
 * next tile's queries (and output gradients) are loaded while this tile's
 * products run, instead of each tile_dots starting on cache misses. */
static void prefetch_rows(const heads *h, int64_t b, int64_t i, int64_t r0, int64_t T, int64_t D)
{
    for (int64_t r = r0; r < r0 + ROWS && r < T; r++) {
        const char *row = (const char *)row_of(h, b, i, r);
        for (int64_t byte = 0; byte < D * (int64_t)sizeof(float); byte += 64)
            __builtin_prefetch(row + byte);
    }
}

/* s[k * ld + j] = x[k] . yt[:, j] for the ROWS rows x[k] and j in [j0, j0 +
 * W), W a multiple of BLOCK. A ROWS x W tile of sums stays in registers
 * while the loop walks the D dimensions, each step a fused multiply-add
 * (cpu_fmaf: one instruction and one rounding where the CPU has FMA). */
static inline __attribute__((always_inline)) void
dots_tile(int W, float *const x[ROWS], const float *yt, int64_t j0, int64_t ld, int64_t D, float *s)
{
    float acc[ROWS][2 * BLOCK] = {{0}};
    for (int64_t d = 0; d < D; d++) {
        const float *y = yt + d * ld + j0;
        for (int k = 0; k < ROWS; k++) {
            const float xd = x[k][d];
#pragma omp simd
            for (int jj = 0; jj < W; jj++) acc[k][jj] = cpu_fmaf(xd, y[jj], acc[k][jj]);
        }
    }
    for (int k = 0; k < ROWS; k++) memcpy(s + k * ld + j0, acc[k], (size_t)W * sizeof(float));
}

/* Whether tile_dots takes 32 keys at a time (two 16-float vectors a row of
 * the tile) rather than BLOCK. Each step of its loop loads a row of keys
 * and broadcasts one float of each of the ROWS query rows: with 32 keys
 * that is 10 loads for 16 multiply-adds, with 16 keys 9 for 8, which
 * starves a core that issues two 16-float multiply-adds a cycle (Intel's
 * AVX-512 server cores) and not one that issues one (Zen 4, whose 16-float
 * multiply-add is two 8-float halves). Measured (docs/performance.md,
 * "Attention's dot products, 32 keys at a time"): on an H100 lease's Xeon
 * the tile of 32 took 14% less time at 4 threads, forward and backward;
 * on the Zen 4 dev machine it was level or up to 1-4% slower. So: Intel
 * CPUs. The weighted sums of rows (tile_weighted_rows) take 32 dimensions
 * a row at a time under the same switch, for the same reason: on one core
 * of the Emerald Rapids dev machine the forward took 7-10% less time and
 * the backward 2-6% ("Attention's weighted rows, 32 dimensions at a
 * time"). AWL_CPU_ATTENTION_KEYS=16 or =32 chooses either width for both
 * anywhere (read once). */
#ifdef WIDE_DOTS
static pthread_once_t dots_decided = PTHREAD_ONCE_INIT;
static bool dots_wide;

static void decide_dots(void)
{
    const char *keys = getenv("AWL_CPU_ATTENTION_KEYS");
    __builtin_cpu_init();
    dots_wide = keys ? strcmp(keys, "32") == 0 : __builtin_cpu_is("intel");
}

static bool wide_dots(void)
{
    pthread_once(&dots_decided, decide_dots);
    return dots_wide;
}
#else
static bool wide_dots(void) { return false; }
#endif

/* s[k * ld + j] = x[k] . yt[:, j] for the ROWS rows x[k] and j < n rounded
 * up to BLOCK, yt (D x ld): 32 keys at a time where wide (wide_dots), the
 * rest BLOCK at a time. */
static void tile_dots(bool wide, float *const x[ROWS], const float *yt, int64_t n, int64_t ld,
                      int64_t D, float *s)
{
    const int64_t nb = round_up(n, BLOCK);
    int64_t j0 = 0;
    if (wide)
        for (; j0 + 2 * BLOCK <= nb; j0 += 2 * BLOCK) dots_tile(2 * BLOCK, x, yt, j0, ld, D, s);
    for (; j0 < nb; j0 += BLOCK) dots_tile(BLOCK, x, yt, j0, ld, D, s);
}

/* out[k][d0 .. d0+W) = sum_{j<n} w[k * wk + j * wj] rows[j][d0 .. d0+W)
 * for k < ROWS, rows[j] = base + j * stride: W dimensions (BLOCK or 2 *
 * BLOCK) of ROWS weighted sums of the same rows, a ROWS x W tile of sums
 * in registers, each times scale[k] as it is stored (scale NULL: 1). */
static inline __attribute__((always_inline)) void
weighted_tile(int W, const float *w, int64_t wk, int64_t wj, int64_t n, const float *base,
              int64_t stride, int64_t d0, const float *scale, float *const out[ROWS])
{
    float acc[ROWS][2 * BLOCK] = {{0}};
    for (int64_t j = 0; j < n; j++) {
        const float *r = base + j * stride + d0;
        for (int k = 0; k < ROWS; k++) {
            const float wkj = w[k * wk + j * wj];
#pragma omp simd
            for (int dd = 0; dd < W; dd++) acc[k][dd] = cpu_fmaf(wkj, r[dd], acc[k][dd]);
        }
    }
    for (int k = 0; k < ROWS; k++) {
        if (scale)
#pragma omp simd
            for (int dd = 0; dd < W; dd++) out[k][d0 + dd] = acc[k][dd] * scale[k];
        else
            memcpy(out[k] + d0, acc[k], (size_t)W * sizeof(float));
    }
}

/* out[k] = sum_{j<n} w[k * wk + j * wj] rows[j] for k < ROWS, rows[j] = base
 * + j * stride (D floats each): ROWS weighted sums of the same rows, 32
 * dimensions at a time where wide (wide_dots: a step's row then serves 16
 * multiply-adds for its 2 loads and the ROWS weights' broadcasts, as in
 * tile_dots), the rest BLOCK at a time; each times scale[k] as it is
 * stored (scale NULL: 1). The weights are a ROWS-row tile of P or dS (wk =
 * ld, wj = 1) or a ROWS-column one (wk = 1, wj = ld). Each sum runs over j
 * in order whatever the width, so both widths give the same bits. */
static void tile_weighted_rows(bool wide, const float *w, int64_t wk, int64_t wj, int64_t n,
                               const float *base, int64_t stride, int64_t D, const float *scale,
                               float *const out[ROWS])
{
    int64_t d0 = 0;
    if (wide)
        for (; d0 + 2 * BLOCK <= D; d0 += 2 * BLOCK)
            weighted_tile(2 * BLOCK, w, wk, wj, n, base, stride, d0, scale, out);
    for (; d0 + BLOCK <= D; d0 += BLOCK)
        weighted_tile(BLOCK, w, wk, wj, n, base, stride, d0, scale, out);
    for (; d0 < D; d0++)
        for (int k = 0; k < ROWS; k++) {
            float acc = 0.0f;
            for (int64_t j = 0; j < n; j++) acc += w[k * wk + j * wj] * base[j * stride + d0];
            out[k][d0] = scale ? acc * scale[k] : acc;
        }
}

/* The attention's dropout, or NULL when there is none. */
static const awl_dropout_args *active(const awl_dropout_args *d)
{
    return d && d->p > 0.0 ? d : NULL;
}

/* Whether a tile's rows draw their dropout blocks together (tile_words)
 * rather than each its own (row_multipliers). A row of at most 64 keys is
 * at most four Philox blocks, fewer than cpu_philox_blocks draws side by
 * side, so drawn alone its blocks come one at a time; but a tile's rows
 * are consecutive in the stream (awl_attention_dropout_row), so their
 * blocks, whole rows, are one run of up to 32. Longer rows draw their own,
 * up to the last key they see (a causal row drawn whole would be twice
 * the blocks), and so does every row without AVX-512, where blocks are
 * drawn one at a time either way. */
static bool tile_drawn(int64_t T)
{
#if defined(__AVX512F__)
    return awl_attention_dropout_chunks(T) < 5;
#else
    (void)T;
    return false;
#endif
}

/* Where tile_drawn: the Philox blocks of the tile's rows r0 .. r0 + ROWS
 * - 1 (those below T) of head (b, i), whole rows, into words: row r0 + k's
 * 4 chunks words start at words + 4 k chunks, chunks =
 * awl_attention_dropout_chunks(T). */
static void tile_words(const awl_dropout_args *d, int64_t b, int64_t i, int64_t r0, int64_t H,
                       int64_t T, uint32_t *words)
{
    if (!tile_drawn(T)) return;
    const uint64_t chunks = awl_attention_dropout_chunks(T);
    const int64_t rows = T - r0 < ROWS ? T - r0 : ROWS;
    cpu_philox_blocks(d->seed, d->offset + awl_attention_dropout_row(b, i, r0, H, T) * chunks,
                      rows * (int64_t)chunks, words);
}

/* The dropout multipliers of keys 0 .. n - 1 of row r = r0 + k of head
 * (b, i) (common/dropout.h's awl_attention_dropout_multipliers): from the
 * tile's words where tile_words drew them, else from the row's own blocks
 * (four words for every 16 keys), drawn here into words by
 * cpu_philox_blocks. */
static void row_multipliers(float *m, int64_t n, const awl_dropout_args *d, int64_t b, int64_t i,
                            int64_t r0, int k, int64_t H, int64_t T, uint32_t threshold,
                            float scale, uint32_t *words)
{
    const uint64_t chunks = awl_attention_dropout_chunks(T);
    if (tile_drawn(T))
        words += 4 * (uint64_t)k * chunks;
    else
        cpu_philox_blocks(d->seed,
                          d->offset + awl_attention_dropout_row(b, i, r0 + k, H, T) * chunks,
                          (n + 15) / 16, words);
    awl_attention_dropout_multipliers_of(m, n, words, threshold, scale);
}

/* Threads for B*H problems of cost T*T*D each, and the scratch they need. */
static float *scratch_for(int64_t BH, int64_t T, int64_t D, int64_t per_head, int *nt)
{
    *nt = awl_cpu_threads_for(BH * T * T * D, 1 << 16);
    if (*nt > BH) *nt = (int)BH;
    if (*nt < 1) *nt = 1;
    return calloc((size_t)(*nt * per_head), sizeof(float));
}

int awl_cpu_attention_forward(const awl_view *out, const awl_view *lse, const awl_view *q,
                          const awl_view *k, const awl_view *v, double scale, bool causal,
                          const awl_dropout_args *dropout)
{
    const awl_dropout_args *drop = active(dropout);
    const int64_t *shape = q->shape;
    heads hq, hk, hv, ho;
    lse_view hl;
    if (!heads_of(q, shape, &hq) || !heads_of(k, shape, &hk) || !heads_of(v, shape, &hv) ||
        !heads_of(out, shape, &ho) || !lse_of(lse, shape, &hl))
        return AWL_ERR_UNSUPPORTED;
    const int64_t B = shape[0], H = shape[1], T = shape[2], D = shape[3], Tp = round_up(T, BLOCK),
                  ld = row_stride(Tp);
    if (B * H * T == 0) return AWL_OK;
    int nt;
    /* k transposed, a tile of scores, a zero row, a sink row, a row of
     * dropout multipliers and the Philox words of a tile's rows */
    const int64_t per_head = D * ld + ROWS * ld + 2 * D + Tp + ROWS * Tp / 4;
    const uint32_t threshold = drop ? awl_attention_dropout_threshold(drop->p) : 0;
    const float keep_scale = drop ? (float)awl_attention_dropout_scale(threshold) : 1.0f;
    const bool wide = wide_dots();
    float *scratch = scratch_for(B * H, T, D, per_head, &nt);
    if (!scratch)
        return awl_error(AWL_ERR_OOM, "awl_cpu attention_forward: out of memory (%d x %lld floats)",
                         nt, (long long)per_head);
#pragma omp parallel for num_threads(awl_cpu_team(nt)) schedule(static, awl_cpu_chunk(B * H, nt))
    for (int64_t bh = 0; bh < B * H; bh++) {
        const int64_t b = bh / H, i = bh % H;
        float *kt = scratch + (int64_t)omp_get_thread_num() * per_head, *S = kt + D * ld;
        float *zeros = S + ROWS * ld, *sink = zeros + D, *mrow = sink + D;
        uint32_t *words = (uint32_t *)(mrow + Tp);
        transpose_head(&hk, b, i, T, D, (float)scale, kt);
        for (int64_t r0 = 0; r0 < T; r0 += ROWS) {
            /* the keys the tile's last row sees; rows past T score 0 */
            const int64_t n = causal ? (r0 + ROWS < T ? r0 + ROWS : T) : T;
            float *qs[ROWS], *os[ROWS];
            tile_rows(&hq, b, i, r0, T, zeros, qs);
            tile_rows(&ho, b, i, r0, T, sink, os);
            prefetch_rows(&hq, b, i, r0 + ROWS, T, D);
            tile_dots(wide, qs, kt, n, ld, D, S);
            /* each row's weights are left unnormalised, e^(s_j - max), and
             * its output row is divided by their sum once it is made: D
             * multiplies instead of one per key */
            int64_t last[ROWS];
            float top[ROWS], sum[ROWS], inv[ROWS];
            tile_last_keys(r0, T, causal, last);
            tile_softmax(S, ld, round_up(n, BLOCK), last, top, sum);
            if (drop) tile_words(drop, b, i, r0, H, T, words);
            for (int k = 0; k < ROWS; k++) {
                const int64_t r = r0 + k;
                inv[k] = 1.0f / sum[k];
                if (r >= T) continue; /* out to the sink */
                *lse_at(&hl, b, i, r) = top[k] + logf(sum[k]);
                if (drop) {
                    const int64_t nb = round_up(last[k] + 1, BLOCK);
                    float *p = S + k * ld;
                    row_multipliers(mrow, nb, drop, b, i, r0, k, H, T, threshold, keep_scale,
                                    words);
#pragma omp simd
                    for (int64_t j = 0; j < nb; j++) p[j] *= mrow[j];
                }
            }
            tile_weighted_rows(wide, S, ld, 1, n, row_of(&hv, b, i, 0), hv.st, D, inv, os);
        }
    }
    free(scratch);
    return AWL_OK;
}

int awl_cpu_attention_backward(const awl_view *dq, const awl_view *dk, const awl_view *dv,
                           const awl_view *dout, const awl_view *q, const awl_view *k,
                           const awl_view *v, const awl_view *out, const awl_view *lse,
                           double scale, bool causal, const awl_dropout_args *dropout)
{
    const awl_dropout_args *drop = active(dropout);
    const int64_t *shape = q->shape;
    heads hq, hk, hv, ho, hdq, hdk, hdv, hdo;
    lse_view hl;
    if (!heads_of(q, shape, &hq) || !heads_of(k, shape, &hk) || !heads_of(v, shape, &hv) ||
        !heads_of(out, shape, &ho) || !heads_of(dq, shape, &hdq) || !heads_of(dk, shape, &hdk) ||
        !heads_of(dv, shape, &hdv) || !heads_of(dout, shape, &hdo) || !lse_of(lse, shape, &hl))
        return AWL_ERR_UNSUPPORTED;
    const int64_t B = shape[0], H = shape[1], T = shape[2], D = shape[3], Tp = round_up(T, BLOCK),
                  ld = row_stride(Tp), Tr = round_up(T, ROWS);
    if (B * H * T == 0) return AWL_OK;
    int nt;
    /* k and v transposed; P and dS (Tr x ld each, row r filled up to the
     * keys it sees, zero after), kept so that dk and dv can be summed column
     * by column after all rows are done; a zero row, a sink row, a row of
     * dropout multipliers, each row's dO_r . out_r, and the Philox words
     * of a tile's rows */
    const int64_t per_head = 2 * D * ld + 2 * Tr * ld + 2 * D + Tp + T + ROWS * Tp / 4;
    const uint32_t threshold = drop ? awl_attention_dropout_threshold(drop->p) : 0;
    const float keep_scale = drop ? (float)awl_attention_dropout_scale(threshold) : 1.0f;
    const bool wide = wide_dots();
    float *scratch = scratch_for(B * H, T, D, per_head, &nt);
    if (!scratch)
        return awl_error(AWL_ERR_OOM,
                         "awl_cpu attention_backward: out of memory (%d x %lld floats)", nt,
                         (long long)per_head);
    const float sc = (float)scale;
#pragma omp parallel for num_threads(awl_cpu_team(nt)) schedule(static, awl_cpu_chunk(B * H, nt))
    for (int64_t bh = 0; bh < B * H; bh++) {
        const int64_t b = bh / H, i = bh % H;
        float *kt = scratch + (int64_t)omp_get_thread_num() * per_head, *vt = kt + D * ld;
        float *P = vt + D * ld, *dS = P + Tr * ld, *zeros = dS + Tr * ld, *sink = zeros + D;
        float *mrow = sink + D, *deltas = mrow + Tp;
        uint32_t *words = (uint32_t *)(deltas + T);
        float *in[ROWS], *grads[ROWS], *outs[ROWS];
        transpose_head(&hk, b, i, T, D, sc, kt);
        transpose_head(&hv, b, i, T, D, 1.0f, vt);
        /* dO_r . out_r for every row first, in a loop of its own: out's
         * rows are read nowhere else here and are rarely still in cache,
         * and only a loop whose rows do not wait on each other keeps many
         * of their misses in flight at once (inside the row loop below,
         * one miss at a time stalled it: 44% of its samples) */
        for (int64_t r = 0; r < T; r++) {
            const float *gr = row_of(&hdo, b, i, r), *orow = row_of(&ho, b, i, r);
            float delta = 0.0f;
#pragma omp simd reduction(+ : delta)
            for (int64_t d = 0; d < D; d++) delta += gr[d] * orow[d];
            deltas[r] = delta;
        }
        /* rows: P, dS and dq */
        for (int64_t r0 = 0; r0 < T; r0 += ROWS) {
            const int64_t n = causal ? (r0 + ROWS < T ? r0 + ROWS : T) : T;
            tile_rows(&hq, b, i, r0, T, zeros, in);
            tile_rows(&hdo, b, i, r0, T, zeros, grads);
            prefetch_rows(&hq, b, i, r0 + ROWS, T, D);
            prefetch_rows(&hdo, b, i, r0 + ROWS, T, D);
            tile_dots(wide, in, kt, n, ld, D, P + r0 * ld);
            tile_dots(wide, grads, vt, n, ld, D, dS + r0 * ld); /* dp, overwritten by ds below */
            if (drop) tile_words(drop, b, i, r0, H, T, words);
            for (int64_t r = r0; r < r0 + ROWS && r < T; r++) {
                float *p = P + r * ld, *ds = dS + r * ld;
                /* the row's loops run over whole blocks of keys, its scores
                 * past its last key set to -inf (e^-inf = 0), as in
                 * tile_softmax; a row at a time here, where each e^x has
                 * dS's arithmetic beside it (walked together, the rows
                 * measured no faster) */
                const int64_t nr = causal ? r + 1 : T, nb = round_up(nr, BLOCK);
                for (int64_t j = nr; j < nb; j++) p[j] = -INFINITY;
                const float l = *lse_at(&hl, b, i, r), delta = deltas[r];
                if (drop) {
                    row_multipliers(mrow, nb, drop, b, i, r0, (int)(r - r0), H, T, threshold,
                                    keep_scale, words);
#pragma omp simd
                    for (int64_t j = 0; j < nb; j++) {
                        const float e = cpu_expf(p[j] - l);
                        ds[j] = e * (mrow[j] * ds[j] - delta) * sc;
                        p[j] = e * mrow[j];
                    }
                } else {
#pragma omp simd
                    for (int64_t j = 0; j < nb; j++) {
                        p[j] = cpu_expf(p[j] - l);
                        ds[j] = p[j] * (ds[j] - delta) * sc;
                    }
                }
                /* the column tiles below (and dq's, up to n) read row r up
                 * to its tile's last column, round_up(nr, ROWS) - 1, which
                 * can lie past nb when ROWS does not divide BLOCK; never past
                 * Tp, the row's end when it has no padding (the tile's
                 * columns there are keys past T, whose sums go to the sink) */
                const int64_t read_to = round_up(nr, ROWS) < Tp ? round_up(nr, ROWS) : Tp;
                for (int64_t j = nb; j < read_to; j++) p[j] = ds[j] = 0.0f;
            }
            tile_rows(&hdq, b, i, r0, T, sink, outs);
            tile_weighted_rows(wide, dS + r0 * ld, ld, 1, n, row_of(&hk, b, i, 0), hk.st, D, NULL,
                               outs);
        }
        /* columns: dk_j = sum_r dS[r][j] q_r, dv_j = sum_r P[r][j] dO_r (P
         * dropped) over
         * the rows that see key j, ROWS columns at a time */
        for (int64_t j0 = 0; j0 < T; j0 += ROWS) {
            const int64_t r0 = causal ? j0 : 0;
            tile_rows(&hdk, b, i, j0, T, sink, outs);
            tile_weighted_rows(wide, dS + r0 * ld + j0, 1, ld, T - r0, row_of(&hq, b, i, r0), hq.st,
                               D, NULL, outs);
            tile_rows(&hdv, b, i, j0, T, sink, outs);
            tile_weighted_rows(wide, P + r0 * ld + j0, 1, ld, T - r0, row_of(&hdo, b, i, r0),
                               hdo.st, D, NULL, outs);
        }
    }
    free(scratch);
    return AWL_OK;
}
