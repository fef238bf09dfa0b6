/*
 * backends/cpu/cpu_attention.c - fused scaled dot-product attention.
 *
 * q, k, v, out (B, H, T, D) float32 with D contiguous and any strides along
 * B, H and T, which is how a GPT's fused qkv projection hands them over
 * (slices of (B, T, 3, H, D) with H and T swapped) without a copy; lse
 * (B, H, T) float32, the log of each softmax row's denominator.
 *
 * Each (b, h) is an independent problem, and the (b, h) problems are split
 * between OpenMP threads. Within one, the work goes a query row at a time:
 *
 *   forward, row r:   s_j = scale q_r . k_j            for the keys j it sees
 *                     p = softmax(s), lse_r = log sum exp(s)
 *                     out_r = sum_j p_j v_j
 *   backward, row r:  p_j = exp(scale q_r . k_j - lse_r)   (recomputed, not saved)
 *                     dv_j += p_j dO_r,   dp_j = dO_r . v_j
 *                     ds_j = p_j (dp_j - dO_r . out_r) scale
 *                     dq_r = sum_j ds_j k_j,   dk_j += ds_j q_r
 *
 * (dO_r . out_r equals sum_j p_j dp_j, the softmax backward's dot product,
 * without a pass over the row.) With the causal mask row r sees keys 0..r
 * only, so half of the T x T work is skipped outright, and no T x T matrix
 * exists anywhere: per head the scratch is k and v transposed (D x T, so the
 * dot products with every key vectorise over the keys), one row of scores,
 * and the dk, dv accumulators (T x D).
 *
 * Why not three BLAS calls per head: at a GPT's head sizes (T = 64..256,
 * D = 32..64) each product is tiny, BLAS spends its time packing operands
 * and zeroing outputs, and it cannot skip the masked half. These loops are
 * plain C that the compiler vectorises (omp simd, cpu_math.h's expf).
 * Float32 only: other dtypes return AWL_ERR_UNSUPPORTED and are composed.
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_internal.h"
#include "backends/cpu/cpu_math.h"

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

static int64_t padded(int64_t T) { return (T + BLOCK - 1) / BLOCK * BLOCK; }

static void transpose_head(const heads *src, int64_t b, int64_t i, int64_t T, int64_t D,
                           float scale, float *dst)
{
    const int64_t Tp = padded(T);
    for (int64_t d = 0; d < D; d++)
        for (int64_t t = T; t < Tp; t++) dst[d * Tp + t] = 0.0f;
    for (int64_t t = 0; t < T; t++) {
        const float *r = row_of(src, b, i, t);
        for (int64_t d = 0; d < D; d++) dst[d * Tp + t] = r[d] * scale;
    }
}

/* s[j] = x . yt[:, j] for j < n (and up to n rounded up to BLOCK, which
 * the caller ignores), yt (D x Tp). A block of BLOCK sums stays in
 * registers while the loop walks the D dimensions. */
static void row_dots(const float *x, const float *yt, int64_t n, int64_t Tp, int64_t D, float *s)
{
    for (int64_t j0 = 0; j0 < n; j0 += BLOCK) {
        float acc[BLOCK] = {0};
        for (int64_t d = 0; d < D; d++) {
            const float xd = x[d], *y = yt + d * Tp + j0;
#pragma omp simd
            for (int jj = 0; jj < BLOCK; jj++) acc[jj] += xd * y[jj];
        }
        memcpy(s + j0, acc, sizeof acc);
    }
}

/* out = sum_{j<n} w[j * w_stride] * rows[j], rows[j] = base + j * stride (D
 * floats): a weighted sum of rows, D / BLOCK register blocks at a time. */
static void weighted_rows(const float *w, int64_t w_stride, int64_t n, const float *base,
                          int64_t stride, int64_t D, float *out)
{
    int64_t d0 = 0;
    for (; d0 + BLOCK <= D; d0 += BLOCK) {
        float acc[BLOCK] = {0};
        for (int64_t j = 0; j < n; j++) {
            const float wj = w[j * w_stride], *r = base + j * stride + d0;
#pragma omp simd
            for (int dd = 0; dd < BLOCK; dd++) acc[dd] += wj * r[dd];
        }
        memcpy(out + d0, acc, sizeof acc);
    }
    for (; d0 < D; d0++) {
        float acc = 0.0f;
        for (int64_t j = 0; j < n; j++) acc += w[j * w_stride] * base[j * stride + d0];
        out[d0] = acc;
    }
}

/* Threads for B*H problems of cost T*T*D each, and the scratch they need. */
static float *scratch_for(int64_t BH, int64_t T, int64_t D, int64_t per_head, int *nt)
{
    *nt = cpu_threads_for(BH * T * T * D, 1 << 16);
    if (*nt > BH) *nt = (int)BH;
    if (*nt < 1) *nt = 1;
    return malloc((size_t)(*nt * per_head) * sizeof(float));
}

int cpu_attention_forward(const awl_view *out, const awl_view *lse, const awl_view *q,
                          const awl_view *k, const awl_view *v, double scale, bool causal)
{
    const int64_t *shape = q->shape;
    heads hq, hk, hv, ho;
    lse_view hl;
    if (!heads_of(q, shape, &hq) || !heads_of(k, shape, &hk) || !heads_of(v, shape, &hv) ||
        !heads_of(out, shape, &ho) || !lse_of(lse, shape, &hl))
        return AWL_ERR_UNSUPPORTED;
    const int64_t B = shape[0], H = shape[1], T = shape[2], D = shape[3], Tp = padded(T);
    if (B * H * T == 0) return AWL_OK;
    int nt;
    const int64_t per_head = D * Tp + Tp; /* k transposed, one row of scores */
    float *scratch = scratch_for(B * H, T, D, per_head, &nt);
    if (!scratch)
        return awl_error(AWL_ERR_OOM, "awl_cpu attention_forward: out of memory (%d x %lld floats)",
                         nt, (long long)per_head);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t bh = 0; bh < B * H; bh++) {
        const int64_t b = bh / H, i = bh % H;
        float *kt = scratch + (int64_t)omp_get_thread_num() * per_head, *p = kt + D * Tp;
        transpose_head(&hk, b, i, T, D, (float)scale, kt);
        for (int64_t r = 0; r < T; r++) {
            const int64_t n = causal ? r + 1 : T;
            row_dots(row_of(&hq, b, i, r), kt, n, Tp, D, p);
            float m = -INFINITY, sum = 0.0f;
#pragma omp simd reduction(max : m)
            for (int64_t j = 0; j < n; j++) m = p[j] > m ? p[j] : m;
#pragma omp simd reduction(+ : sum)
            for (int64_t j = 0; j < n; j++) {
                p[j] = cpu_expf(p[j] - m);
                sum += p[j];
            }
            *lse_at(&hl, b, i, r) = m + logf(sum);
            const float inv = 1.0f / sum;
#pragma omp simd
            for (int64_t j = 0; j < n; j++) p[j] *= inv;
            weighted_rows(p, 1, n, row_of(&hv, b, i, 0), hv.st, D, row_of(&ho, b, i, r));
        }
    }
    free(scratch);
    return AWL_OK;
}

int cpu_attention_backward(const awl_view *dq, const awl_view *dk, const awl_view *dv,
                           const awl_view *dout, const awl_view *q, const awl_view *k,
                           const awl_view *v, const awl_view *out, const awl_view *lse,
                           double scale, bool causal)
{
    const int64_t *shape = q->shape;
    heads hq, hk, hv, ho, hdq, hdk, hdv, hdo;
    lse_view hl;
    if (!heads_of(q, shape, &hq) || !heads_of(k, shape, &hk) || !heads_of(v, shape, &hv) ||
        !heads_of(out, shape, &ho) || !heads_of(dq, shape, &hdq) || !heads_of(dk, shape, &hdk) ||
        !heads_of(dv, shape, &hdv) || !heads_of(dout, shape, &hdo) || !lse_of(lse, shape, &hl))
        return AWL_ERR_UNSUPPORTED;
    const int64_t B = shape[0], H = shape[1], T = shape[2], D = shape[3], Tp = padded(T);
    if (B * H * T == 0) return AWL_OK;
    int nt;
    /* k and v transposed; P and dS (T x Tp each, row r filled up to the
     * keys it sees), kept so that dk and dv can be summed column by column
     * after all rows are done */
    const int64_t per_head = 2 * D * Tp + 2 * T * Tp;
    float *scratch = scratch_for(B * H, T, D, per_head, &nt);
    if (!scratch)
        return awl_error(AWL_ERR_OOM,
                         "awl_cpu attention_backward: out of memory (%d x %lld floats)", nt,
                         (long long)per_head);
    const float sc = (float)scale;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t bh = 0; bh < B * H; bh++) {
        const int64_t b = bh / H, i = bh % H;
        float *kt = scratch + (int64_t)omp_get_thread_num() * per_head, *vt = kt + D * Tp;
        float *P = vt + D * Tp, *dS = P + T * Tp;
        transpose_head(&hk, b, i, T, D, sc, kt);
        transpose_head(&hv, b, i, T, D, 1.0f, vt);
        /* rows: P, dS and dq */
        for (int64_t r = 0; r < T; r++) {
            const int64_t n = causal ? r + 1 : T;
            const float *qr = row_of(&hq, b, i, r), *gr = row_of(&hdo, b, i, r);
            const float *orow = row_of(&ho, b, i, r), l = *lse_at(&hl, b, i, r);
            float *p = P + r * Tp, *ds = dS + r * Tp;
            row_dots(qr, kt, n, Tp, D, p);
            row_dots(gr, vt, n, Tp, D, ds); /* dp, overwritten by ds below */
            float delta = 0.0f;
#pragma omp simd reduction(+ : delta)
            for (int64_t d = 0; d < D; d++) delta += gr[d] * orow[d];
#pragma omp simd
            for (int64_t j = 0; j < n; j++) {
                p[j] = cpu_expf(p[j] - l);
                ds[j] = p[j] * (ds[j] - delta) * sc;
            }
            weighted_rows(ds, 1, n, row_of(&hk, b, i, 0), hk.st, D, row_of(&hdq, b, i, r));
        }
        /* columns: dk_j = sum_r dS[r][j] q_r, dv_j = sum_r P[r][j] dO_r over
         * the rows that see key j */
        for (int64_t j = 0; j < T; j++) {
            const int64_t r0 = causal ? j : 0;
            weighted_rows(dS + r0 * Tp + j, Tp, T - r0, row_of(&hq, b, i, r0), hq.st, D,
                          row_of(&hdk, b, i, j));
            weighted_rows(P + r0 * Tp + j, Tp, T - r0, row_of(&hdo, b, i, r0), hdo.st, D,
                          row_of(&hdv, b, i, j));
        }
    }
    free(scratch);
    return AWL_OK;
}
