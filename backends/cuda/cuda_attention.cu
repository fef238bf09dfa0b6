/*
 * backends/cuda/cuda_attention.cu - scaled dot-product attention, forward and
 * backward, flash-attention style (Dao et al., 2022; Dao, 2023).
 *
 * q, k, v, out (B, H, T, D), strided along B, H, T with D contiguous (the
 * slices of a fused qkv projection are read in place); lse (B, H, T) float32
 * is the log-sum-exp of each row of scaled scores, saved for backward.
 * No T x T matrix ever reaches global memory: a block owns 64 rows of one
 * (b, h) and walks the other side in tiles of 64, keeping its tiles in shared
 * memory (rows padded by 4 floats so 16-byte reads are conflict-free).
 *
 * Thread layout (256 threads, all three kernels): thread (tr, tc) = (tid / 16,
 * tid % 16) owns the 4 x 4 scores of rows tr + 16 i and columns tc + 16 j,
 * and the output columns 4 tc + 64 e + u (u < 4) of its 4 rows. A row's 16
 * owners are 16 adjacent lanes, so row maxima and sums are 4 shuffles.
 *
 *   forward (grid: query tiles x B*H): S = (scale q) k^T for one key tile,
 *     online softmax (running max m, sum l, rescaled output), O += P v
 *     through a 64 x 64 P tile in shared memory; out = O / l, lse = m + ln l.
 *     Causal blocks stop at the diagonal tile; the heaviest start first.
 *   backward, with Di = rowsum(dO * O) precomputed (one warp per row):
 *     dK/dV kernel (grid: key tiles x B*H) walks the query tiles, recomputes
 *     P = exp(S - lse) and dS = P (dP - Di) with dP = dO v^T, and accumulates
 *     dV += P^T dO and dK += dS^T (scale q) in registers;
 *     dQ kernel (grid: query tiles x B*H) walks the key tiles and accumulates
 *     dQ += dS k, then scales by `scale`.
 *   Splitting dQ from dK/dV recomputes S and dP once more (7 tile products
 *   instead of 5), the simplest price of determinism: the usual single
 *   kernel adds dQ across key tiles with float atomics, whose order varies
 *   from run to run. (The float32 tensor-core backward of
 *   cuda_attention_mma.cu shows a one-pass way that stays deterministic.)
 *
 * These are the CUDA-core rung of the kernel ladder (docs/cuda.md): FFMA on
 * float tiles. By default float32 and bfloat16 run on the tensor-core
 * kernels of cuda_attention_mma.cu (float32 as 3xTF32, or plain TF32 in TF32
 * mode); they run here (bfloat16 widened to float in shared memory) when the
 * backend's "attention" setting is "simt", which the tests and the benchmark
 * use to compare the rungs ("split" keeps float32's tensor-core backward in
 * two kernels; "auto" is the default, and AWL_CUDA_ATTENTION, read once when
 * the backend starts, can change it). D up to 128 (tiles padded to 64 or 128
 * columns); other dtypes AWL_ERR_UNSUPPORTED.
 *
 * Dropout: every kernel multiplies weight (query, key) by its multiplier
 * from common/dropout.h (att_dropout), recomputed wherever the weight is:
 * P before P V in the forward, P for dV and dP = M (dO V^T) in the
 * backward (see cuda_attention_mma.cu).
 */
#include <atomic>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_attention.cuh"

namespace
{

const int TILE = 64;
const int ATT_THREADS = 256;
const int PAD = 4;

/* Loads rows [t0, t0 + 64) of one head into tile[64][DP + PAD] as floats,
 * times mul; rows past T and columns past D are zero. */
template <int DP, typename T>
__device__ __forceinline__ void load_tile(float *tile, const heads<T> &x, int b, int h, int t0,
                                          const att_dims &a, float mul)
{
    for (int idx = threadIdx.x; idx < TILE * DP; idx += ATT_THREADS) {
        int r = idx / DP, d = idx % DP, t = t0 + r;
        float v = 0.0f;
        if (t < a.T && d < a.D) v = awlc_cast<float>(row_ptr(x, b, h, t)[d]) * mul;
        tile[r * (DP + PAD) + d] = v;
    }
}

/* s[i][j] = dot(A row (tr + 16 i), B row (tc + 16 j)) over DP columns. */
template <int DP>
__device__ __forceinline__ void tile_scores(const float *A, const float *Bm, int tr, int tc,
                                            float s[4][4])
{
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) s[i][j] = 0.0f;
    for (int d = 0; d < DP; d += 4) {
        float4 a[4], bv[4];
#pragma unroll
        for (int i = 0; i < 4; i++) a[i] = *(const float4 *)&A[(tr + 16 * i) * (DP + PAD) + d];
#pragma unroll
        for (int j = 0; j < 4; j++) bv[j] = *(const float4 *)&Bm[(tc + 16 * j) * (DP + PAD) + d];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++)
                s[i][j] +=
                    a[i].x * bv[j].x + a[i].y * bv[j].y + a[i].z * bv[j].z + a[i].w * bv[j].w;
    }
}

/* acc[i][e*4+u] += sum_c W[row tr+16i][c] * M[c][4 tc + 64 e + u] over the
 * 64 columns of W (a 64 x (64 + PAD) tile). */
template <int DP>
__device__ __forceinline__ void tile_accumulate(const float *W, const float *M, int tr, int tc,
                                                float acc[4][DP / 16])
{
    for (int c = 0; c < TILE; c += 4) {
        float4 w[4];
#pragma unroll
        for (int i = 0; i < 4; i++) w[i] = *(const float4 *)&W[(tr + 16 * i) * (TILE + PAD) + c];
#pragma unroll
        for (int cc = 0; cc < 4; cc++) {
#pragma unroll
            for (int e = 0; e < DP / 64; e++) {
                float4 m = *(const float4 *)&M[(c + cc) * (DP + PAD) + 4 * tc + 64 * e];
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    float wi = cc == 0 ? w[i].x : cc == 1 ? w[i].y : cc == 2 ? w[i].z : w[i].w;
                    acc[i][4 * e + 0] += wi * m.x;
                    acc[i][4 * e + 1] += wi * m.y;
                    acc[i][4 * e + 2] += wi * m.z;
                    acc[i][4 * e + 3] += wi * m.w;
                }
            }
        }
    }
}

/* Writes acc (rows t0 + tr + 16 i, scaled by mul[i]) to x, skipping rows
 * past T and columns past D. */
template <int DP, typename T>
__device__ __forceinline__ void store_rows(const heads<T> &x, int b, int h, int t0,
                                           const att_dims &a, int tr, int tc,
                                           const float acc[4][DP / 16], const float mul[4])
{
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int t = t0 + tr + 16 * i;
        if (t >= a.T) continue;
        T *row = x.p + b * x.sb + h * x.sh + (int64_t)t * x.st;
#pragma unroll
        for (int e = 0; e < DP / 64; e++)
#pragma unroll
            for (int u = 0; u < 4; u++) {
                int d = 4 * tc + 64 * e + u;
                if (d < a.D) row[d] = awlc_cast<T>(acc[i][4 * e + u] * mul[i]);
            }
    }
}

__device__ __forceinline__ float row_max16(float v)
{
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float row_sum16(float v)
{
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

template <int DP, typename T>
__global__ void __launch_bounds__(ATT_THREADS)
    attn_fwd_kernel(heads<T> out, lse_ref lse, heads<T> q, heads<T> k, heads<T> v, att_dims a)
{
    awlc_await_previous_kernel();
    extern __shared__ float sm[];
    float *Qs = sm, *Ks = Qs + TILE * (DP + PAD), *Vs = Ks + TILE * (DP + PAD);
    float *Ps = Vs + TILE * (DP + PAD);
    int ntiles = (a.T + TILE - 1) / TILE;
    int qt = a.causal ? ntiles - 1 - blockIdx.x : blockIdx.x;
    int b = blockIdx.y / a.H, h = blockIdx.y % a.H, q0 = qt * TILE;
    int tr = threadIdx.x / 16, tc = threadIdx.x % 16;

    load_tile<DP>(Qs, q, b, h, q0, a, a.scale);
    float o[4][DP / 16], m[4], l[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
#pragma unroll
        for (int e = 0; e < DP / 16; e++) o[i][e] = 0.0f;
    }
    int last = a.causal ? qt : ntiles - 1;
    for (int kt = 0; kt <= last; kt++) {
        int k0 = kt * TILE;
        __syncthreads(); /* the previous tile's Ks, Vs, Ps are no longer read */
        load_tile<DP>(Ks, k, b, h, k0, a, 1.0f);
        load_tile<DP>(Vs, v, b, h, k0, a, 1.0f);
        __syncthreads();
        float s[4][4];
        tile_scores<DP>(Qs, Ks, tr, tc, s);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int qi = q0 + tr + 16 * i;
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                if (!att_visible(qi, k0 + tc + 16 * j, a)) s[i][j] = -INFINITY;
                mx = fmaxf(mx, s[i][j]);
            }
            float mn = fmaxf(m[i], row_max16(mx));
            float alpha = mn == -INFINITY ? 1.0f : expf(m[i] - mn);
            float rs = 0.0f;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                float p = s[i][j] == -INFINITY ? 0.0f : expf(s[i][j] - mn);
                rs += p;
                if (a.dropout) p *= att_dropout(a, b, h, qi, k0 + tc + 16 * j);
                Ps[(tr + 16 * i) * (TILE + PAD) + tc + 16 * j] = p;
            }
            l[i] = l[i] * alpha + row_sum16(rs);
            m[i] = mn;
#pragma unroll
            for (int e = 0; e < DP / 16; e++) o[i][e] *= alpha;
        }
        __syncthreads();
        tile_accumulate<DP>(Ps, Vs, tr, tc, o);
    }
    float inv[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        inv[i] = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
        int t = q0 + tr + 16 * i;
        if (tc == 0 && t < a.T)
            lse.p[b * lse.sb + h * lse.sh + (int64_t)t * lse.st] = m[i] + logf(l[i]);
    }
    store_rows<DP>(out, b, h, q0, a, tr, tc, o, inv);
}

/* Di = sum_d dO[i, d] O[i, d], one warp per row; Dv is (B*H*T) contiguous. */
template <typename T>
__global__ void attn_rowdot_kernel(float *Dv, heads<T> dout, heads<T> out, att_dims a)
{
    awlc_await_previous_kernel();
    int lane = threadIdx.x % AWLC_WARP;
    int64_t rows = (int64_t)a.B * a.H * a.T;
    for (int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / AWLC_WARP; r < rows;
         r += (int64_t)gridDim.x * blockDim.x / AWLC_WARP) {
        int t = (int)(r % a.T), bh = (int)(r / a.T), b = bh / a.H, h = bh % a.H;
        const T *g = row_ptr(dout, b, h, t), *o = row_ptr(out, b, h, t);
        float s = 0.0f;
        for (int d = lane; d < a.D; d += AWLC_WARP)
            s += awlc_cast<float>(g[d]) * awlc_cast<float>(o[d]);
        s = awlc_warp_sum(s);
        if (lane == 0) Dv[r] = s;
    }
}

/* The same with 16-byte loads, when every row of dO and O is 16-byte
 * aligned and D is L packs of V elements, L a power of two up to 32: L
 * lanes take a row, one pack each, and add their products by shuffles, so
 * a warp takes 32 / L rows at a time (gpt2-124m's bfloat16 heads, D = 64:
 * 8 lanes a row, where the loop above loads 2 bytes a lane). */
template <typename T, int V>
__global__ void attn_rowdot_packs_kernel(float *Dv, heads<T> dout, heads<T> out, att_dims a, int L)
{
    awlc_await_previous_kernel();
    int lane = threadIdx.x % AWLC_WARP, sub = lane % L, per_warp = AWLC_WARP / L;
    int64_t rows = (int64_t)a.B * a.H * a.T;
    int64_t warps = (int64_t)gridDim.x * blockDim.x / AWLC_WARP;
    for (int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / AWLC_WARP;
         w * per_warp < rows; w += warps) { /* the same trips for the whole warp */
        int64_t r = w * per_warp + lane / L;
        float s = 0.0f;
        if (r < rows) {
            int t = (int)(r % a.T), bh = (int)(r / a.T), b = bh / a.H, h = bh % a.H;
            typedef awlc_pack<T, V> P;
            P g = reinterpret_cast<const P *>(row_ptr(dout, b, h, t))[sub];
            P o = reinterpret_cast<const P *>(row_ptr(out, b, h, t))[sub];
#pragma unroll
            for (int e = 0; e < V; e++) s += awlc_cast<float>(g.v[e]) * awlc_cast<float>(o.v[e]);
        }
        for (int off = L / 2; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
        if (r < rows && sub == 0) Dv[r] = s;
    }
}

/* Whether x's rows are all 16-byte aligned runs of V-element packs. */
template <typename T> bool rows_in_packs(const heads<T> &x, int V)
{
    return ((uintptr_t)x.p & 15u) == 0 && x.sb % V == 0 && x.sh % V == 0 && x.st % V == 0;
}

/* Dv = the row dot products of dout and out (one of the two kernels above). */
template <typename T>
int rowdot(float *Dv, const heads<T> &dout, const heads<T> &out, const att_dims &a)
{
    const int V = 16 / sizeof(T);
    int64_t rows = (int64_t)a.B * a.H * a.T;
    int L = a.D / V;
    if (a.D % V == 0 && L <= AWLC_WARP && (L & (L - 1)) == 0 && rows_in_packs(dout, V) &&
        rows_in_packs(out, V)) {
        awlc_launch(attn_rowdot_packs_kernel<T, V>, awlc_grid_for(rows * L, 256), 256, 0, Dv, dout,
                    out, a, L);
    } else {
        awlc_launch(attn_rowdot_kernel<T>, awlc_grid_for(rows * AWLC_WARP, 256), 256, 0, Dv, dout,
                    out, a);
    }
    return awlc_check_launch("attention_backward rowdot");
}

/* Loads lse and Di of rows [t0, t0 + 64) into shared memory (0 past T). */
__device__ __forceinline__ void load_row_stats(float *ls, float *ds, const lse_ref &lse,
                                               const float *Dv, int b, int h, int t0,
                                               const att_dims &a)
{
    for (int r = threadIdx.x; r < TILE; r += ATT_THREADS) {
        int t = t0 + r;
        bool ok = t < a.T;
        ls[r] = ok ? lse.p[b * lse.sb + h * lse.sh + (int64_t)t * lse.st] : 0.0f;
        ds[r] = ok ? Dv[((int64_t)b * a.H + h) * a.T + t] : 0.0f;
    }
}

template <int DP, typename T>
__global__ void __launch_bounds__(ATT_THREADS)
    attn_dkdv_kernel(heads<T> dk, heads<T> dv, heads<T> dout, heads<T> q, heads<T> k, heads<T> v,
                     lse_ref lse, const float *Dv, att_dims a)
{
    awlc_await_previous_kernel();
    extern __shared__ float sm[];
    const int TS = TILE * (DP + PAD);
    float *Ks = sm, *Vs = Ks + TS, *Qs = Vs + TS, *dOs = Qs + TS;
    float *Pt = dOs + TS, *dSt = Pt + TILE * (TILE + PAD);
    float *ls = dSt + TILE * (TILE + PAD), *ds = ls + TILE;
    int ntiles = (a.T + TILE - 1) / TILE;
    int kt = blockIdx.x, b = blockIdx.y / a.H, h = blockIdx.y % a.H, k0 = kt * TILE;
    int tr = threadIdx.x / 16, tc = threadIdx.x % 16;

    load_tile<DP>(Ks, k, b, h, k0, a, 1.0f);
    load_tile<DP>(Vs, v, b, h, k0, a, 1.0f);
    float gk[4][DP / 16], gv[4][DP / 16];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int e = 0; e < DP / 16; e++) gk[i][e] = gv[i][e] = 0.0f;
    for (int qt = a.causal ? kt : 0; qt < ntiles; qt++) {
        int q0 = qt * TILE;
        __syncthreads();
        load_tile<DP>(Qs, q, b, h, q0, a, a.scale);
        load_tile<DP>(dOs, dout, b, h, q0, a, 1.0f);
        load_row_stats(ls, ds, lse, Dv, b, h, q0, a);
        __syncthreads();
        float s[4][4], dp[4][4];
        tile_scores<DP>(Ks, Qs, tr, tc, s);   /* S^T: keys x queries */
        tile_scores<DP>(Vs, dOs, tr, tc, dp); /* dP^T */
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                int key = tr + 16 * i, qr = tc + 16 * j;
                float p = att_visible(q0 + qr, k0 + key, a) ? expf(s[i][j] - ls[qr]) : 0.0f;
                float m = a.dropout ? att_dropout(a, b, h, q0 + qr, k0 + key) : 1.0f;
                Pt[key * (TILE + PAD) + qr] = p * m;
                dSt[key * (TILE + PAD) + qr] = p * (m * dp[i][j] - ds[qr]);
            }
        __syncthreads();
        tile_accumulate<DP>(Pt, dOs, tr, tc, gv);
        tile_accumulate<DP>(dSt, Qs, tr, tc, gk);
    }
    const float one[4] = {1.0f, 1.0f, 1.0f, 1.0f};
    store_rows<DP>(dk, b, h, k0, a, tr, tc, gk, one);
    store_rows<DP>(dv, b, h, k0, a, tr, tc, gv, one);
}

template <int DP, typename T>
__global__ void __launch_bounds__(ATT_THREADS)
    attn_dq_kernel(heads<T> dq, heads<T> dout, heads<T> q, heads<T> k, heads<T> v, lse_ref lse,
                   const float *Dv, att_dims a)
{
    awlc_await_previous_kernel();
    extern __shared__ float sm[];
    const int TS = TILE * (DP + PAD);
    float *Qs = sm, *dOs = Qs + TS, *Ks = dOs + TS, *Vs = Ks + TS;
    float *dS = Vs + TS, *ls = dS + TILE * (TILE + PAD), *ds = ls + TILE;
    int ntiles = (a.T + TILE - 1) / TILE;
    int qt = a.causal ? ntiles - 1 - blockIdx.x : blockIdx.x;
    int b = blockIdx.y / a.H, h = blockIdx.y % a.H, q0 = qt * TILE;
    int tr = threadIdx.x / 16, tc = threadIdx.x % 16;

    load_tile<DP>(Qs, q, b, h, q0, a, a.scale);
    load_tile<DP>(dOs, dout, b, h, q0, a, 1.0f);
    load_row_stats(ls, ds, lse, Dv, b, h, q0, a);
    float g[4][DP / 16];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int e = 0; e < DP / 16; e++) g[i][e] = 0.0f;
    int last = a.causal ? qt : ntiles - 1;
    for (int kt = 0; kt <= last; kt++) {
        int k0 = kt * TILE;
        __syncthreads();
        load_tile<DP>(Ks, k, b, h, k0, a, 1.0f);
        load_tile<DP>(Vs, v, b, h, k0, a, 1.0f);
        __syncthreads();
        float s[4][4], dp[4][4];
        tile_scores<DP>(Qs, Ks, tr, tc, s);
        tile_scores<DP>(dOs, Vs, tr, tc, dp);
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                int qr = tr + 16 * i, key = tc + 16 * j;
                float p = att_visible(q0 + qr, k0 + key, a) ? expf(s[i][j] - ls[qr]) : 0.0f;
                float m = a.dropout ? att_dropout(a, b, h, q0 + qr, k0 + key) : 1.0f;
                dS[qr * (TILE + PAD) + key] = p * (m * dp[i][j] - ds[qr]);
            }
        __syncthreads();
        tile_accumulate<DP>(dS, Ks, tr, tc, g);
    }
    const float sc[4] = {a.scale, a.scale, a.scale, a.scale};
    store_rows<DP>(dq, b, h, q0, a, tr, tc, g, sc);
}

/* ---- host side ---------------------------------------------------------------------- */

template <typename T>
bool heads_of(const awl_view *v, const int64_t *shape, awl_dtype dt, heads<T> *h)
{
    if (v->ndim != 4 || v->dtype != dt) return false;
    for (int d = 0; d < 4; d++)
        if (v->shape[d] != shape[d]) return false;
    if (shape[3] != 1 && v->strides[3] != 1) return false;
    h->p = awlc_ptr<T>(v);
    h->sb = v->strides[0];
    h->sh = v->strides[1];
    h->st = v->strides[2];
    h->rows16 = (((uintptr_t)h->p | (uint64_t)(h->sb | h->sh | h->st) * sizeof(T)) & 15u) == 0;
    return true;
}

bool lse_of(const awl_view *v, const int64_t *shape, lse_ref *l)
{
    if (v->ndim != 3 || v->dtype != AWL_F32) return false;
    for (int d = 0; d < 3; d++)
        if (v->shape[d] != shape[d]) return false;
    l->p = awlc_ptr<float>(v);
    l->sb = v->strides[0];
    l->sh = v->strides[1];
    l->st = v->strides[2];
    return true;
}

size_t fwd_smem(int DP) { return (size_t)(3 * TILE * (DP + PAD) + TILE * (TILE + PAD)) * 4; }
size_t dkdv_smem(int DP)
{
    return (size_t)(4 * TILE * (DP + PAD) + 2 * TILE * (TILE + PAD) + 2 * TILE) * 4;
}
size_t dq_smem(int DP)
{
    return (size_t)(4 * TILE * (DP + PAD) + TILE * (TILE + PAD) + 2 * TILE) * 4;
}

template <typename K> int allow_smem(K kernel, size_t bytes)
{
    AWLC_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes),
             "attention shared memory");
    return AWL_OK;
}

bool dims_ok(const int64_t *shape, att_dims *a, double scale, bool causal,
             const awl_dropout_args *drop)
{
    if (shape[3] < 1 || shape[3] > 128 || shape[2] > INT32_MAX / 2 || shape[0] * shape[1] > 65535 ||
        shape[0] * shape[1] * shape[2] > ((int64_t)1 << 40))
        return false;
    *a = att_dims{};
    a->B = (int)shape[0], a->H = (int)shape[1], a->T = (int)shape[2], a->D = (int)shape[3];
    a->scale = (float)scale;
    a->causal = causal;
    if (drop && drop->p > 0.0) {
        a->dropout = true;
        a->keep_threshold = awl_attention_dropout_threshold(drop->p);
        a->drop_scale = (float)awl_attention_dropout_scale(a->keep_threshold);
        a->seed = drop->seed;
        a->offset = drop->offset;
    }
    return true;
}

template <int DP, typename T>
int fwd_launch(const heads<T> &o, const lse_ref &l, const heads<T> &q, const heads<T> &k,
               const heads<T> &v, const att_dims &a)
{
    size_t smem = fwd_smem(DP);
    AWLC_TRY_STATUS(allow_smem(attn_fwd_kernel<DP, T>, smem));
    dim3 grid((a.T + TILE - 1) / TILE, a.B * a.H);
    awlc_launch(attn_fwd_kernel<DP, T>, grid, ATT_THREADS, smem, o, l, q, k, v, a);
    return awlc_check_launch("attention_forward");
}

/* The rung the "attention" setting chose: set once, read by every call. */
enum rung { RUNG_AUTO, RUNG_SIMT, RUNG_SPLIT, RUNG_ONE_PASS, RUNG_MMA };
std::atomic<int> chosen_rung{RUNG_AUTO};

/* float32 and bfloat16 go to the tensor-core kernels unless the setting
 * asks for the CUDA-core rung (for comparisons). */
bool tensor_cores(void) { return chosen_rung.load(std::memory_order_relaxed) != RUNG_SIMT; }

} // namespace

bool awlc_attention_split(void)
{
    return chosen_rung.load(std::memory_order_relaxed) == RUNG_SPLIT;
}

bool awlc_attention_one_pass(void)
{
    return chosen_rung.load(std::memory_order_relaxed) == RUNG_ONE_PASS;
}

bool awlc_attention_mma_only(void)
{
    return chosen_rung.load(std::memory_order_relaxed) == RUNG_MMA;
}

int awlc_attention_set_rung(const char *value)
{
    static const char *const names[] = {"auto", "simt", "split", "one-pass", "mma"};
    for (int r = 0; r < 5; r++)
        if (value && strcmp(value, names[r]) == 0) {
            chosen_rung.store(r);
            return AWL_OK;
        }
    return awl_error(AWL_ERR_INVALID,
                     "awl_cuda: attention setting '%s' is not auto, simt, split, one-pass or mma",
                     value ? value : "(null)");
}

namespace
{

template <int DP, typename T>
int bwd_launch(const heads<T> &dq, const heads<T> &dk, const heads<T> &dv, const heads<T> &dout,
               const heads<T> &q, const heads<T> &k, const heads<T> &v, const heads<T> &out,
               const lse_ref &l, const att_dims &a)
{
    int64_t rows = (int64_t)a.B * a.H * a.T;
    size_t dbytes = (size_t)rows * sizeof(float);
    float *Dv = (float *)awlc_scratch_alloc(dbytes);
    if (!Dv) return AWL_ERR_OOM;
    int st = rowdot(Dv, dout, out, a);
    dim3 grid((a.T + TILE - 1) / TILE, a.B * a.H);
    if (st == AWL_OK && tensor_cores()) {
        st = awlc_attention_mma_backward(dq, dk, dv, dout, q, k, v, l, Dv, a);
        awlc_scratch_free(Dv, dbytes);
        return st;
    }
    if (st == AWL_OK) st = allow_smem(attn_dkdv_kernel<DP, T>, dkdv_smem(DP));
    if (st == AWL_OK) {
        awlc_launch(attn_dkdv_kernel<DP, T>, grid, ATT_THREADS, dkdv_smem(DP), dk, dv, dout, q, k,
                    v, l, Dv, a);
        st = awlc_check_launch("attention_backward dk dv");
    }
    if (st == AWL_OK) st = allow_smem(attn_dq_kernel<DP, T>, dq_smem(DP));
    if (st == AWL_OK) {
        awlc_launch(attn_dq_kernel<DP, T>, grid, ATT_THREADS, dq_smem(DP), dq, dout, q, k, v, l, Dv,
                    a);
        st = awlc_check_launch("attention_backward dq");
    }
    awlc_scratch_free(Dv, dbytes);
    return st;
}

} // namespace

int awlc_attention_forward(const awl_view *out, const awl_view *lse, const awl_view *q,
                           const awl_view *k, const awl_view *v, double scale, bool causal,
                           const awl_dropout_args *dropout)
{
    const int64_t *shape = q->shape;
    att_dims a;
    lse_ref l;
    if (q->ndim != 4 || !dims_ok(shape, &a, scale, causal, dropout) || !lse_of(lse, shape, &l))
        return AWL_ERR_UNSUPPORTED;
    auto run = [&](auto tag) -> int {
        typedef decltype(tag) T;
        heads<T> ho, hq, hk, hv;
        if (!heads_of(out, shape, q->dtype, &ho) || !heads_of(q, shape, q->dtype, &hq) ||
            !heads_of(k, shape, q->dtype, &hk) || !heads_of(v, shape, q->dtype, &hv))
            return AWL_ERR_UNSUPPORTED;
        AWLC_TRY_STATUS(awlc_enter(out->data));
        if (a.B * a.H * a.T == 0) return AWL_OK;
        /* the tensor-core forward keeps the unscaled scores' row maxima */
        if (tensor_cores() && a.scale > 0.0f)
            return awlc_attention_mma_forward(ho, l, hq, hk, hv, a);
        return a.D <= 64 ? fwd_launch<64>(ho, l, hq, hk, hv, a)
                         : fwd_launch<128>(ho, l, hq, hk, hv, a);
    };
    if (q->dtype == AWL_F32) return run(float());
    if (q->dtype == AWL_BF16) return run(awl_bf16());
    return AWL_ERR_UNSUPPORTED;
}

int awlc_attention_backward(const awl_view *dq, const awl_view *dk, const awl_view *dv,
                            const awl_view *dout, const awl_view *q, const awl_view *k,
                            const awl_view *v, const awl_view *out, const awl_view *lse,
                            double scale, bool causal, const awl_dropout_args *dropout)
{
    const int64_t *shape = q->shape;
    att_dims a;
    lse_ref l;
    if (q->ndim != 4 || !dims_ok(shape, &a, scale, causal, dropout) || !lse_of(lse, shape, &l))
        return AWL_ERR_UNSUPPORTED;
    auto run = [&](auto tag) -> int {
        typedef decltype(tag) T;
        heads<T> hdq, hdk, hdv, hdo, hq, hk, hv, ho;
        awl_dtype dt = q->dtype;
        if (!heads_of(dq, shape, dt, &hdq) || !heads_of(dk, shape, dt, &hdk) ||
            !heads_of(dv, shape, dt, &hdv) || !heads_of(dout, shape, dt, &hdo) ||
            !heads_of(q, shape, dt, &hq) || !heads_of(k, shape, dt, &hk) ||
            !heads_of(v, shape, dt, &hv) || !heads_of(out, shape, dt, &ho))
            return AWL_ERR_UNSUPPORTED;
        AWLC_TRY_STATUS(awlc_enter(dq->data));
        if (a.B * a.H * a.T == 0) return AWL_OK;
        return a.D <= 64 ? bwd_launch<64>(hdq, hdk, hdv, hdo, hq, hk, hv, ho, l, a)
                         : bwd_launch<128>(hdq, hdk, hdv, hdo, hq, hk, hv, ho, l, a);
    };
    if (q->dtype == AWL_F32) return run(float());
    if (q->dtype == AWL_BF16) return run(awl_bf16());
    return AWL_ERR_UNSUPPORTED;
}
