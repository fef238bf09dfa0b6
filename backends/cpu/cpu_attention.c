/*
 * backends/cpu/cpu_attention.c - fused scaled dot-product attention.
 *
 * q, k, v, out (B, H, T, D) float32 with D contiguous and any strides along
 * B, H and T, which is how a GPT's fused qkv projection hands them over
 * (slices of (B, T, 3, H, D) with H and T swapped) without a copy; lse
 * (B, H, T) float32, the log of each softmax row's denominator.
 *
 * Each (b, h) is an independent problem done with three BLAS calls and a T x T
 * scratch: S = scale q k^T, row softmax with the causal mask (entries j > i
 * are exactly 0), out = P v. The backward pass recomputes P from q, k and lse
 * instead of saving it (T x T per head would dominate a GPT's activation
 * memory), then, with dO the output gradient:
 *   dv = P^T dO,  dP = dO v^T,  dS = P (dP - rowsum(dO o)) * scale,
 *   dq = dS k,    dk = dS^T q.
 * rowsum(dO o) equals rowsum(P dP), the softmax backward's dot product,
 * without a pass over the T x T matrix.
 *
 * The (b, h) problems are split between OpenMP threads, each with its own
 * scratch and single-threaded BLAS; with a single head (B = H = 1) the loop
 * runs on one thread and OpenBLAS threads each product instead.
 * Float32 only: other dtypes return AWL_ERR_UNSUPPORTED and are composed.
 */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>

#include "backends/cpu/cpu_internal.h"
#include "backends/cpu/cpu_math.h"

/* A (B, H, T, D) float32 view: base pointer, strides along B, H, T, and the
 * row stride BLAS sees (ld). */
typedef struct heads {
    char *base;
    int64_t sb, sh, st, ld;
} heads;

static bool heads_of(const awl_view *v, const int64_t *shape, heads *h)
{
    if (!v || v->dtype != AWL_F32 || v->ndim != 4) return false;
    for (int d = 0; d < 4; d++)
        if (v->shape[d] != shape[d]) return false;
    const int64_t T = shape[2], D = shape[3];
    if (D != 1 && v->strides[3] != 1) return false;
    h->base = cpu_view_ptr(v);
    h->sb = v->strides[0];
    h->sh = v->strides[1];
    h->st = v->strides[2];
    h->ld = T == 1 ? (D > 1 ? D : 1) : v->strides[2];
    return h->ld >= D && h->ld >= 1;
}

static float *head(const heads *h, int64_t b, int64_t i)
{
    return (float *)h->base + b * h->sb + i * h->sh;
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

/* Threads for B*H problems of cost T*T*D each, and the scratch they need. */
static float *scratch_for(int64_t BH, int64_t T, int64_t D, int64_t per_head, int *nt)
{
    *nt = cpu_threads_for(BH * T * T * D, 1 << 16);
    if (*nt > BH) *nt = (int)BH;
    if (*nt < 1) *nt = 1;
    return malloc((size_t)(*nt * per_head) * sizeof(float));
}

static void scores(const heads *q, const heads *k, int64_t b, int64_t i, int64_t T, int64_t D,
                   double scale, float *S)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)T, (int)T, (int)D, (float)scale,
                head(q, b, i), (int)q->ld, head(k, b, i), (int)k->ld, 0.0f, S, (int)T);
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
    const int64_t B = shape[0], H = shape[1], T = shape[2], D = shape[3];
    if (B * H * T == 0) return AWL_OK;
    int nt;
    float *scratch = scratch_for(B * H, T, D, T * T, &nt);
    if (!scratch)
        return awl_error(AWL_ERR_OOM, "awl_cpu attention_forward: out of memory for %d x %lld^2",
                         nt, (long long)T);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t bh = 0; bh < B * H; bh++) {
        const int64_t b = bh / H, i = bh % H;
        float *S = scratch + (int64_t)omp_get_thread_num() * T * T;
        scores(&hq, &hk, b, i, T, D, scale, S);
        for (int64_t r = 0; r < T; r++) {
            float *row = S + r * T;
            const int64_t valid = causal ? r + 1 : T;
            float m = -INFINITY;
            for (int64_t j = 0; j < valid; j++) m = row[j] > m ? row[j] : m;
            double sum = 0;
            for (int64_t j = 0; j < valid; j++) {
                row[j] = cpu_expf(row[j] - m);
                sum += row[j];
            }
            const float inv = (float)(1.0 / sum);
            for (int64_t j = 0; j < valid; j++) row[j] *= inv;
            for (int64_t j = valid; j < T; j++) row[j] = 0.0f;
            hl.base[b * hl.sb + i * hl.sh + r * hl.st] = m + logf((float)sum);
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)T, (int)D, (int)T, 1.0f, S,
                    (int)T, head(&hv, b, i), (int)hv.ld, 0.0f, head(&ho, b, i), (int)ho.ld);
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
    const int64_t B = shape[0], H = shape[1], T = shape[2], D = shape[3];
    if (B * H * T == 0) return AWL_OK;
    int nt;
    float *scratch = scratch_for(B * H, T, D, 2 * T * T, &nt);
    if (!scratch)
        return awl_error(AWL_ERR_OOM, "awl_cpu attention_backward: out of memory for %d x %lld^2",
                         nt, (long long)T);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t bh = 0; bh < B * H; bh++) {
        const int64_t b = bh / H, i = bh % H;
        float *P = scratch + (int64_t)omp_get_thread_num() * 2 * T * T, *dS = P + T * T;
        const float *g = head(&hdo, b, i), *o = head(&ho, b, i);
        scores(&hq, &hk, b, i, T, D, scale, P);
        for (int64_t r = 0; r < T; r++) {
            float *row = P + r * T;
            const float l = hl.base[b * hl.sb + i * hl.sh + r * hl.st];
            const int64_t valid = causal ? r + 1 : T;
            for (int64_t j = 0; j < valid; j++) row[j] = cpu_expf(row[j] - l);
            for (int64_t j = valid; j < T; j++) row[j] = 0.0f;
        }
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)T, (int)D, (int)T, 1.0f, P,
                    (int)T, g, (int)hdo.ld, 0.0f, head(&hdv, b, i), (int)hdv.ld);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)T, (int)T, (int)D, 1.0f, g,
                    (int)hdo.ld, head(&hv, b, i), (int)hv.ld, 0.0f, dS, (int)T);
        for (int64_t r = 0; r < T; r++) {
            double dot = 0;
            for (int64_t d = 0; d < D; d++) dot += (double)g[r * hdo.st + d] * o[r * ho.st + d];
            const float delta = (float)dot, s = (float)scale;
            float *pr = P + r * T, *dr = dS + r * T;
            for (int64_t j = 0; j < T; j++) dr[j] = pr[j] * (dr[j] - delta) * s;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)T, (int)D, (int)T, 1.0f, dS,
                    (int)T, head(&hk, b, i), (int)hk.ld, 0.0f, head(&hdq, b, i), (int)hdq.ld);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)T, (int)D, (int)T, 1.0f, dS,
                    (int)T, head(&hq, b, i), (int)hq.ld, 0.0f, head(&hdk, b, i), (int)hdk.ld);
    }
    free(scratch);
    return AWL_OK;
}
