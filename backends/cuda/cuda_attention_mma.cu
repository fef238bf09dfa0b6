/*
 * backends/cuda/cuda_attention_mma.cu - bfloat16 attention on tensor cores.
 *
 * The second rung of the attention ladder (docs/cuda.md): the same tiling
 * and the same algorithm as the float kernels of cuda_attention.cu (online
 * softmax forward; backward split into a dK/dV kernel and a dQ kernel so
 * that nothing is added with atomics), but every tile product is an
 * mma.sync.m16n8k16 (bf16 inputs, float32 accumulators) issued by one warp
 * on its own 16 rows, as in FlashAttention-2 (Dao, 2023).
 *
 * Fragment layouts (PTX ISA, "mma.m16n8k16"), with g = lane / 4 and
 * t = lane % 4: A (16 x 16, row-major) holds in its four 32-bit registers
 * the bf16 pairs (g, 2t..2t+1), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..);
 * B (16 x 8) the pairs (k = 2t..2t+1, n = g) and (k = 2t+8.., n = g);
 * C (16 x 8 floats) the pairs (g, 2t..2t+1) and (g+8, 2t..2t+1).
 * So:
 *   - every tile sits in shared memory row-major, as read from global memory
 *     (16-byte loads); B fragments come from ldmatrix: plain when B's
 *     columns are the tile's rows (K in S = Q K^T), .trans when B runs down
 *     the tile's columns (V in O = P V), so no tile is ever transposed;
 *   - the scores' C fragments of two neighbouring 8-column blocks are
 *     exactly the A fragment of the next product (P V, dS K, ...), so P and
 *     dS never touch shared memory: they are rounded to bf16 in registers;
 *   - a row's values live in the 4 lanes of one g: row max and sum take two
 *     shuffles.
 * Tile rows are padded by 8 bf16 (16 bytes) so that the 8 rows an ldmatrix
 * reads, and the 32 lanes' 32-bit A-fragment loads, fall in different banks.
 * Only tiles that cross the causal diagonal or the end of the sequence
 * evaluate the mask.
 *
 * Blocks are 4 warps on 64 rows; D is padded with zeros to 64 or 128.
 * Scores are scaled by scale * log2(e) so that exp2 does the exponentials;
 * lse is stored in natural-log units like the float kernels'.
 */
#include "backends/cuda/cuda_attention.cuh"

namespace
{

const int BR = 64;       /* rows of a tile */
const int THREADS = 128; /* 4 warps x 16 rows */
const float LOG2E = 1.4426950408889634f;
const float LN2 = 0.6931471805599453f;

__device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Two floats as a bf16 pair, `lo` in the low half (the smaller index). */
__device__ __forceinline__ uint32_t pack2(float lo, float hi)
{
    return (uint32_t)awl_float_to_bf16(lo).bits | ((uint32_t)awl_float_to_bf16(hi).bits << 16);
}

/* The 32-bit word holding elements (r, c) and (r, c + 1) of a tile. */
__device__ __forceinline__ uint32_t word(const uint16_t *tile, int stride, int r, int c)
{
    return *reinterpret_cast<const uint32_t *>(tile + r * stride + c);
}

/* Four 8 x 8 bf16 matrices from shared memory; lane i gives the address of
 * row i % 8 of matrix i / 8 and receives its fragment of each (register j
 * from matrix j). With .trans each matrix arrives transposed. */
__device__ __forceinline__ void ldsm4(uint32_t r[4], const uint16_t *p)
{
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

__device__ __forceinline__ void ldsm4_t(uint32_t r[4], const uint16_t *p)
{
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

/* Rows [t0, t0 + 64) of one head into tile (row-major, row stride DP + 8).
 * Rows past T and columns past D are zero. 16-byte loads where aligned. */
template <int DP>
__device__ void load_tile(uint16_t *tile, const heads<awl_bf16> &x, int b, int h, int t0,
                          const att_dims &a)
{
    const int CH = DP / 8; /* 8-element chunks per row */
    for (int idx = threadIdx.x; idx < BR * CH; idx += THREADS) {
        int r = idx / CH, c = (idx % CH) * 8, t = t0 + r;
        awlc_pack<uint16_t, 8> v;
#pragma unroll
        for (int e = 0; e < 8; e++) v.v[e] = 0;
        if (t < a.T) {
            const awl_bf16 *src = row_ptr(x, b, h, t) + c;
            if (c + 8 <= a.D && ((uintptr_t)src & 15u) == 0) {
                v = *reinterpret_cast<const awlc_pack<uint16_t, 8> *>(src);
            } else {
#pragma unroll
                for (int e = 0; e < 8; e++)
                    if (c + e < a.D) v.v[e] = src[e].bits;
            }
        }
        *reinterpret_cast<awlc_pack<uint16_t, 8> *>(tile + r * (DP + 8) + c) = v;
    }
}

/* A fragments of this warp's 16 rows of a row-major tile, all of DP. */
template <int DP>
__device__ __forceinline__ void load_a(uint32_t f[DP / 16][4], const uint16_t *tile, int r0, int g,
                                       int t)
{
#pragma unroll
    for (int ks = 0; ks < DP / 16; ks++) {
        f[ks][0] = word(tile, DP + 8, r0 + g, ks * 16 + 2 * t);
        f[ks][1] = word(tile, DP + 8, r0 + g + 8, ks * 16 + 2 * t);
        f[ks][2] = word(tile, DP + 8, r0 + g, ks * 16 + 2 * t + 8);
        f[ks][3] = word(tile, DP + 8, r0 + g + 8, ks * 16 + 2 * t + 8);
    }
}

/* acc[nb] (16 x 8 blocks, nb < 8) = A (16 x DP, fragments) times the 64 rows
 * of a row-major tile, transposed: S = Q K^T for one key tile. The tile's
 * rows are B's columns, so plain ldmatrix gives B fragments: matrices 0-3
 * are (rows nb*8.., cols ks*16), (nb*8.., ks*16+8), ((nb+1)*8.., ks*16),
 * ((nb+1)*8.., ks*16+8), i.e. b0, b1 of blocks nb and nb + 1. */
template <int DP>
__device__ __forceinline__ void scores(float acc[8][4], const uint32_t af[DP / 16][4],
                                       const uint16_t *tile, int lane)
{
    int mi = lane / 8, rr = lane % 8;
#pragma unroll
    for (int nb = 0; nb < 8; nb++) acc[nb][0] = acc[nb][1] = acc[nb][2] = acc[nb][3] = 0.0f;
#pragma unroll
    for (int nb = 0; nb < 8; nb += 2)
#pragma unroll
        for (int ks = 0; ks < DP / 16; ks++) {
            uint32_t r[4];
            ldsm4(r, tile + ((nb + mi / 2) * 8 + rr) * (DP + 8) + ks * 16 + (mi % 2) * 8);
            mma16816(acc[nb], af[ks], r[0], r[1]);
            mma16816(acc[nb + 1], af[ks], r[2], r[3]);
        }
}

/* acc (16 x DP) += W (16 x 64, the C fragments w[nb], rounded to bf16) times
 * a row-major 64 x DP tile M. B runs down M's columns, so ldmatrix.trans:
 * matrices (rows kc*16.., cols nb*8), (kc*16+8.., nb*8), (kc*16.., (nb+1)*8),
 * (kc*16+8.., (nb+1)*8) give b0, b1 of column blocks nb and nb + 1. */
template <int DP>
__device__ __forceinline__ void accumulate(float acc[DP / 8][4], const float w[8][4],
                                           const uint16_t *tile, int lane)
{
    int mi = lane / 8, rr = lane % 8;
#pragma unroll
    for (int kc = 0; kc < 4; kc++) {
        uint32_t a[4] = {pack2(w[2 * kc][0], w[2 * kc][1]), pack2(w[2 * kc][2], w[2 * kc][3]),
                         pack2(w[2 * kc + 1][0], w[2 * kc + 1][1]),
                         pack2(w[2 * kc + 1][2], w[2 * kc + 1][3])};
#pragma unroll
        for (int nb = 0; nb < DP / 8; nb += 2) {
            uint32_t r[4];
            ldsm4_t(r, tile + (kc * 16 + (mi % 2) * 8 + rr) * (DP + 8) + (nb + mi / 2) * 8);
            mma16816(acc[nb], a, r[0], r[1]);
            mma16816(acc[nb + 1], a, r[2], r[3]);
        }
    }
}

/* Whether a (query tile, key tile) pair needs the mask: it crosses the
 * causal diagonal or the end of the sequence. */
__device__ __forceinline__ bool needs_mask(int q0, int k0, const att_dims &a)
{
    return q0 + BR > a.T || k0 + BR > a.T || (a.causal && k0 + BR - 1 > q0);
}

/* Writes acc (this warp's rows r0 + g and r0 + g + 8, times mul[0], mul[1])
 * to rows t0 + ... of x, skipping rows past T and columns past D. */
template <int DP>
__device__ void store_rows(const heads<awl_bf16> &x, int b, int h, int t0, int r0,
                           const float acc[DP / 8][4], const float mul[2], const att_dims &a, int g,
                           int t)
{
#pragma unroll
    for (int i = 0; i < 2; i++) {
        int row = t0 + r0 + g + 8 * i;
        if (row >= a.T) continue;
        awl_bf16 *dst = const_cast<awl_bf16 *>(row_ptr(x, b, h, row));
#pragma unroll
        for (int nb = 0; nb < DP / 8; nb++) {
            int c = nb * 8 + 2 * t;
            if (c < a.D) dst[c] = awl_float_to_bf16(acc[nb][2 * i] * mul[i]);
            if (c + 1 < a.D) dst[c + 1] = awl_float_to_bf16(acc[nb][2 * i + 1] * mul[i]);
        }
    }
}

__device__ __forceinline__ float quad_max(float v)
{
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

__device__ __forceinline__ float quad_sum(float v)
{
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

template <int DP>
__global__ void __launch_bounds__(THREADS)
    fwd_kernel(heads<awl_bf16> out, lse_ref lse, heads<awl_bf16> q, heads<awl_bf16> k,
               heads<awl_bf16> v, att_dims a)
{
    extern __shared__ __align__(16) uint16_t smem[];
    uint16_t *Qs = smem, *Ks = Qs + BR * (DP + 8), *Vs = Ks + BR * (DP + 8);
    int ntiles = (a.T + BR - 1) / BR;
    int qt = a.causal ? ntiles - 1 - blockIdx.x : blockIdx.x;
    int b = blockIdx.y / a.H, h = blockIdx.y % a.H, q0 = qt * BR;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    int r0 = warp * 16;

    load_tile<DP>(Qs, q, b, h, q0, a);
    __syncthreads();
    uint32_t qf[DP / 16][4];
    load_a<DP>(qf, Qs, r0, g, t);
    float o[DP / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int nb = 0; nb < DP / 8; nb++) o[nb][0] = o[nb][1] = o[nb][2] = o[nb][3] = 0.0f;
    const float sl2 = a.scale * LOG2E;
    int last = a.causal ? qt : ntiles - 1;
    for (int kt = 0; kt <= last; kt++) {
        int k0 = kt * BR;
        __syncthreads(); /* every warp is done with the previous K and V */
        load_tile<DP>(Ks, k, b, h, k0, a);
        load_tile<DP>(Vs, v, b, h, k0, a);
        __syncthreads();
        float s[8][4];
        scores<DP>(s, qf, Ks, lane);
        float mx[2] = {-INFINITY, -INFINITY};
        bool mask = needs_mask(q0, k0, a);
#pragma unroll
        for (int nb = 0; nb < 8; nb++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int row = q0 + r0 + g + 8 * (e / 2), key = k0 + nb * 8 + 2 * t + (e & 1);
                s[nb][e] = !mask || att_visible(row, key, a) ? s[nb][e] * sl2 : -INFINITY;
                mx[e / 2] = fmaxf(mx[e / 2], s[nb][e]);
            }
        float alpha[2], rs[2] = {0.0f, 0.0f};
#pragma unroll
        for (int i = 0; i < 2; i++) {
            float mn = fmaxf(m[i], quad_max(mx[i]));
            alpha[i] = mn == -INFINITY ? 1.0f : exp2f(m[i] - mn);
            m[i] = mn;
        }
#pragma unroll
        for (int nb = 0; nb < 8; nb++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float p = s[nb][e] == -INFINITY ? 0.0f : exp2f(s[nb][e] - m[e / 2]);
                s[nb][e] = p;
                rs[e / 2] += p;
            }
#pragma unroll
        for (int i = 0; i < 2; i++) l[i] = l[i] * alpha[i] + quad_sum(rs[i]);
#pragma unroll
        for (int nb = 0; nb < DP / 8; nb++) {
            o[nb][0] *= alpha[0];
            o[nb][1] *= alpha[0];
            o[nb][2] *= alpha[1];
            o[nb][3] *= alpha[1];
        }
        accumulate<DP>(o, s, Vs, lane);
    }
    float inv[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        inv[i] = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
        int row = q0 + r0 + g + 8 * i;
        if (t == 0 && row < a.T)
            lse.p[b * lse.sb + h * lse.sh + (int64_t)row * lse.st] = (m[i] + log2f(l[i])) * LN2;
    }
    store_rows<DP>(out, b, h, q0, r0, o, inv, a, g, t);
}

/* lse (in log2 units) and Di of rows r and r + 8 of this warp. */
__device__ __forceinline__ void row_stats(float ls[2], float ds[2], const lse_ref &lse,
                                          const float *Dv, int b, int h, int row0,
                                          const att_dims &a)
{
#pragma unroll
    for (int i = 0; i < 2; i++) {
        int row = row0 + 8 * i;
        bool ok = row < a.T;
        ls[i] = ok ? lse.p[b * lse.sb + h * lse.sh + (int64_t)row * lse.st] * LOG2E : 0.0f;
        ds[i] = ok ? Dv[((int64_t)b * a.H + h) * a.T + row] : 0.0f;
    }
}

/* dK, dV for 64 keys; the warp owns keys k0 + r0 + g (+ 8). Walks the query
 * tiles: S^T = K Q^T, P^T = exp2(S^T - lse), dP^T = V dO^T,
 * dS^T = P^T (dP^T - D); dV += P^T dO, dK += dS^T Q. */
template <int DP>
__global__ void __launch_bounds__(THREADS)
    dkdv_kernel(heads<awl_bf16> dk, heads<awl_bf16> dv, heads<awl_bf16> dout, heads<awl_bf16> q,
                heads<awl_bf16> k, heads<awl_bf16> v, lse_ref lse, const float *Dv, att_dims a)
{
    extern __shared__ __align__(16) uint16_t smem[];
    const int TS = BR * (DP + 8);
    uint16_t *Qs = smem, *dOs = Qs + TS;
    float *ls = reinterpret_cast<float *>(dOs + TS), *ds = ls + BR;
    int ntiles = (a.T + BR - 1) / BR;
    int kt = blockIdx.x, b = blockIdx.y / a.H, h = blockIdx.y % a.H, k0 = kt * BR;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    int r0 = warp * 16;

    /* K and V fragments of the warp's keys, through the Q/dO buffers. */
    load_tile<DP>(Qs, k, b, h, k0, a);
    load_tile<DP>(dOs, v, b, h, k0, a);
    __syncthreads();
    uint32_t kf[DP / 16][4], vf[DP / 16][4];
    load_a<DP>(kf, Qs, r0, g, t);
    load_a<DP>(vf, dOs, r0, g, t);
    float gk[DP / 8][4], gv[DP / 8][4];
#pragma unroll
    for (int nb = 0; nb < DP / 8; nb++)
#pragma unroll
        for (int e = 0; e < 4; e++) gk[nb][e] = gv[nb][e] = 0.0f;
    const float sl2 = a.scale * LOG2E;
    for (int qt = a.causal ? kt : 0; qt < ntiles; qt++) {
        int q0 = qt * BR;
        __syncthreads();
        load_tile<DP>(Qs, q, b, h, q0, a);
        load_tile<DP>(dOs, dout, b, h, q0, a);
        for (int r = threadIdx.x; r < BR; r += THREADS) {
            bool ok = q0 + r < a.T;
            ls[r] = ok ? lse.p[b * lse.sb + h * lse.sh + (int64_t)(q0 + r) * lse.st] * LOG2E : 0.0f;
            ds[r] = ok ? Dv[((int64_t)b * a.H + h) * a.T + q0 + r] : 0.0f;
        }
        __syncthreads();
        float p[8][4], dp[8][4];
        scores<DP>(p, kf, Qs, lane);   /* S^T: keys x queries */
        scores<DP>(dp, vf, dOs, lane); /* dP^T */
        bool mask = needs_mask(q0, k0, a);
#pragma unroll
        for (int nb = 0; nb < 8; nb++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int key = k0 + r0 + g + 8 * (e / 2), qc = nb * 8 + 2 * t + (e & 1);
                float pv =
                    !mask || att_visible(q0 + qc, key, a) ? exp2f(p[nb][e] * sl2 - ls[qc]) : 0.0f;
                p[nb][e] = pv;
                dp[nb][e] = pv * (dp[nb][e] - ds[qc]);
            }
        accumulate<DP>(gv, p, dOs, lane);
        accumulate<DP>(gk, dp, Qs, lane);
    }
    const float one[2] = {1.0f, 1.0f}, sc[2] = {a.scale, a.scale};
    store_rows<DP>(dk, b, h, k0, r0, gk, sc, a, g, t);
    store_rows<DP>(dv, b, h, k0, r0, gv, one, a, g, t);
}

/* dQ for 64 queries; walks the key tiles: S = Q K^T, P, dP = dO V^T,
 * dS = P (dP - D), dQ += dS K. */
template <int DP>
__global__ void __launch_bounds__(THREADS)
    dq_kernel(heads<awl_bf16> dq, heads<awl_bf16> dout, heads<awl_bf16> q, heads<awl_bf16> k,
              heads<awl_bf16> v, lse_ref lse, const float *Dv, att_dims a)
{
    extern __shared__ __align__(16) uint16_t smem[];
    const int TS = BR * (DP + 8);
    uint16_t *Ks = smem, *Vs = Ks + TS;
    int ntiles = (a.T + BR - 1) / BR;
    int qt = a.causal ? ntiles - 1 - blockIdx.x : blockIdx.x;
    int b = blockIdx.y / a.H, h = blockIdx.y % a.H, q0 = qt * BR;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    int r0 = warp * 16;

    load_tile<DP>(Ks, q, b, h, q0, a);
    load_tile<DP>(Vs, dout, b, h, q0, a);
    __syncthreads();
    uint32_t qf[DP / 16][4], of[DP / 16][4];
    load_a<DP>(qf, Ks, r0, g, t);
    load_a<DP>(of, Vs, r0, g, t);
    float ls[2], ds[2];
    row_stats(ls, ds, lse, Dv, b, h, q0 + r0 + g, a);
    float gq[DP / 8][4];
#pragma unroll
    for (int nb = 0; nb < DP / 8; nb++) gq[nb][0] = gq[nb][1] = gq[nb][2] = gq[nb][3] = 0.0f;
    const float sl2 = a.scale * LOG2E;
    int last = a.causal ? qt : ntiles - 1;
    for (int kt = 0; kt <= last; kt++) {
        int k0 = kt * BR;
        __syncthreads();
        load_tile<DP>(Ks, k, b, h, k0, a);
        load_tile<DP>(Vs, v, b, h, k0, a);
        __syncthreads();
        float p[8][4], dp[8][4];
        scores<DP>(p, qf, Ks, lane);
        scores<DP>(dp, of, Vs, lane);
        bool mask = needs_mask(q0, k0, a);
#pragma unroll
        for (int nb = 0; nb < 8; nb++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int row = q0 + r0 + g + 8 * (e / 2), key = k0 + nb * 8 + 2 * t + (e & 1);
                float pv =
                    !mask || att_visible(row, key, a) ? exp2f(p[nb][e] * sl2 - ls[e / 2]) : 0.0f;
                dp[nb][e] = pv * (dp[nb][e] - ds[e / 2]);
            }
        accumulate<DP>(gq, dp, Ks, lane);
    }
    const float sc[2] = {a.scale, a.scale};
    store_rows<DP>(dq, b, h, q0, r0, gq, sc, a, g, t);
}

template <typename K> int allow(K kernel, size_t bytes)
{
    AWLC_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes),
             "attention shared memory");
    return AWL_OK;
}

template <int DP>
int forward(const heads<awl_bf16> &out, const lse_ref &lse, const heads<awl_bf16> &q,
            const heads<awl_bf16> &k, const heads<awl_bf16> &v, const att_dims &a)
{
    size_t smem = (size_t)(3 * BR * (DP + 8)) * 2;
    AWLC_TRY_STATUS(allow(fwd_kernel<DP>, smem));
    dim3 grid((a.T + BR - 1) / BR, a.B * a.H);
    fwd_kernel<DP><<<grid, THREADS, smem>>>(out, lse, q, k, v, a);
    return awlc_check_launch("attention_forward (tensor cores)");
}

template <int DP>
int backward(const heads<awl_bf16> &dq, const heads<awl_bf16> &dk, const heads<awl_bf16> &dv,
             const heads<awl_bf16> &dout, const heads<awl_bf16> &q, const heads<awl_bf16> &k,
             const heads<awl_bf16> &v, const lse_ref &lse, const float *Dv, const att_dims &a)
{
    dim3 grid((a.T + BR - 1) / BR, a.B * a.H);
    size_t s1 = (size_t)(2 * BR * (DP + 8)) * 2 + 2 * BR * sizeof(float);
    AWLC_TRY_STATUS(allow(dkdv_kernel<DP>, s1));
    dkdv_kernel<DP><<<grid, THREADS, s1>>>(dk, dv, dout, q, k, v, lse, Dv, a);
    AWLC_TRY_STATUS(awlc_check_launch("attention_backward dk dv (tensor cores)"));
    size_t s2 = (size_t)(2 * BR * (DP + 8)) * 2;
    AWLC_TRY_STATUS(allow(dq_kernel<DP>, s2));
    dq_kernel<DP><<<grid, THREADS, s2>>>(dq, dout, q, k, v, lse, Dv, a);
    return awlc_check_launch("attention_backward dq (tensor cores)");
}

} // namespace

int awlc_attention_mma_forward(const heads<awl_bf16> &out, const lse_ref &lse,
                               const heads<awl_bf16> &q, const heads<awl_bf16> &k,
                               const heads<awl_bf16> &v, const att_dims &a)
{
    if (a.D > 128) return AWL_ERR_UNSUPPORTED;
    return a.D <= 64 ? forward<64>(out, lse, q, k, v, a) : forward<128>(out, lse, q, k, v, a);
}

int awlc_attention_mma_backward(const heads<awl_bf16> &dq, const heads<awl_bf16> &dk,
                                const heads<awl_bf16> &dv, const heads<awl_bf16> &dout,
                                const heads<awl_bf16> &q, const heads<awl_bf16> &k,
                                const heads<awl_bf16> &v, const lse_ref &lse, const float *Dv,
                                const att_dims &a)
{
    if (a.D > 128) return AWL_ERR_UNSUPPORTED;
    return a.D <= 64 ? backward<64>(dq, dk, dv, dout, q, k, v, lse, Dv, a)
                     : backward<128>(dq, dk, dv, dout, q, k, v, lse, Dv, a);
}
