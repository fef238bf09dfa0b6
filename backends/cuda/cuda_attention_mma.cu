/*
 * backends/cuda/cuda_attention_mma.cu - attention on tensor cores.
 *
 * The second rung of the attention ladder (docs/cuda.md): the same tiling
 * and the same algorithm as the float kernels of cuda_attention.cu (online
 * softmax forward; backward split into a dK/dV kernel and a dQ kernel so
 * that nothing is added with atomics), but every tile product is a warp-wide
 * mma.sync issued by one warp on its own 16 rows, as in FlashAttention-2
 * (Dao, 2023). By default the dK/dV kernel stores the dS^T tiles it
 * computes and the dQ kernel reads them back (dq_stored_kernel) instead of
 * recomputing them (dq_kernel: the `split` rung, and the way where the
 * stored tiles would not fit); with D <= 64 a third way is one pass,
 * bwd_fused_kernel, dQ in slices summed in order (the `one-pass` rung; see
 * there). One algorithm, two
 * instruction families, chosen by a policy type that the kernels take as a
 * template parameter:
 *
 *   bf16_mma      bfloat16 tensors: mma.m16n8k16 (bf16 inputs, float32
 *                 accumulators); B fragments through ldmatrix.
 *   tf32_mma<P>   float32 tensors: mma.m16n8k8 with TF32 inputs (10-bit
 *                 mantissas). P = 1 pass in TF32 mode, as cuBLAS's TF32
 *                 matmuls; P = 3 passes in the default float32 mode: each
 *                 operand is split as big + small, both TF32, and
 *                 small*big + big*small + big*big keeps about float32's
 *                 accuracy ("3xTF32", Ootomo and Yokota, 2022).
 *
 * The accumulator (C) fragment of both instructions is the same 16 x 8
 * floats: with g = lane / 4 and t = lane % 4, a lane holds (g, 2t..2t+1) and
 * (g+8, 2t..2t+1) (PTX ISA, "Matrix fragments for mma.m16n8k16/k8"). So
 * masking, the online softmax and the backward's dS are written once, on
 * that layout; a policy supplies only how tiles sit in shared memory and
 * three tile products:
 *   load_a       A fragments of the warp's 16 rows of a tile (Q, K, V, dO);
 *   scores       S (16 x 64) = A times a 64-row tile, transposed (Q K^T);
 *   accumulate   O (16 x DP) += W (16 x 64, C fragments) times a tile (P V).
 *
 * bfloat16 (A: pairs (g, 2t..), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..);
 * B: pairs (k = 2t.., n = g), (k = 2t+8.., n = g)): tiles are row-major as
 * read from global memory; ldmatrix gives B fragments, plain when B's
 * columns are the tile's rows (K in Q K^T), .trans when B runs down the
 * tile's columns (V in P V), so no tile is ever transposed; the scores' C
 * fragments of two neighbouring 8-column blocks are exactly the next
 * product's A fragment, so P and dS are rounded to bf16 in registers. Rows
 * are padded by 8 bf16 (16 bytes): ldmatrix rows and A loads hit distinct
 * banks.
 *
 * TF32 (A: (g, t), (g+8, t), (g, t+4), (g+8, t+4); B: (k = t, n = g),
 * (k = t+4, n = g)): scalar shared-memory loads, rows padded by 4 floats, so
 * row stride = 4 (mod 32 banks) and lane (g, t) reads bank 4g + t. A C
 * fragment is not an A fragment here, but the sum over k does not care in
 * which order k runs: accumulate feeds the lane's own (g, 2t) and (g, 2t+1)
 * as k = t and k = t + 4, and loads B's rows 2t and 2t + 1 to match
 * (banks 8t + g), so P and dS still never leave registers.
 *
 * Blocks are 4 warps on 64 rows (some forwards: 8 warps on 128, see
 * forward()); D is padded with zeros to 64 or 128. The
 * tiles of the walked side sit in two buffers: while the warps work on one,
 * cp.async fills the other with the next tile, so global-memory latency
 * hides behind the tile products (FlashAttention-2's pipelining). Only
 * tiles that cross the causal diagonal or the end of the sequence evaluate
 * the mask. Scores are scaled by scale * log2(e) so that exp2 does the
 * exponentials; lse is stored in natural-log units like the float kernels'.
 *
 * On Hopper, built for sm_90a (AWL_CUDA_WGMMA), bfloat16 with D <= 64 runs
 * the forward and the stored-dS dK/dV kernel as fwd_wgmma_kernel and
 * dkdv_wgmma_kernel: the same algorithm, each tile product one
 * warpgroup-wide wgmma (see there); the "mma" setting keeps mma.sync.
 *
 * Dropout (a.dropout; a template parameter DROP of every kernel, so that
 * the kernels without it are what they were) needs no memory: each lane computes the multipliers
 * of the weights it holds from common/dropout.h. The forward multiplies
 * the weights after their row sums are taken (lse stays that of the whole
 * softmax) and before they meet V; the backward recomputes the same
 * multipliers M for dV += (M P)^T dO and dP = M (dO V^T), and dS = P (dP -
 * D) keeps its form (D = rowsum(dO O) is still rowsum(P dP)). A Philox
 * block is sixteen neighbouring keys of one query (8-bit decisions); the
 * lanes of a warp draw each block of their tile once, two a lane, and hand
 * each other the keep bits by shuffles (drop_rows; drop_words_t and
 * drop_bits_t where the dK/dV walk holds queries along the fragment's
 * columns), so a weight costs a sixteenth of a Philox block in each kernel
 * that needs it.
 */
#include <cuda_bf16.h>

#include <type_traits>

#include "backends/cuda/cuda_attention.cuh"
#include "backends/cuda/cuda_mma.cuh"
#include "common/error.h"

namespace
{

const int BR = 64;       /* rows of a tile */
const int THREADS = 128; /* 4 warps x 16 rows */
const float LOG2E = 1.4426950408889634f;
const float LN2 = 0.6931471805599453f;

/* ---- bfloat16: mma.m16n8k16 ------------------------------------------------------ */

__device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Two floats as a bf16 pair, `lo` in the low half (the smaller index); one
 * cvt.rn.bf16x2.f32, rounding to nearest even like awl_float_to_bf16. */
__device__ __forceinline__ uint32_t pack2(float lo, float hi)
{
    __nv_bfloat162 p = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&p);
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

struct bf16_mma {
    typedef awl_bf16 elem;             /* tensors in global memory */
    typedef uint16_t word;             /* tiles in shared memory */
    static const int PAD = 8, KS = 16; /* row padding (words); k of one mma */
    /* The backward kernels hold their fixed tile's A fragments in registers
     * across the walk when D <= 64 (tf32_mma re-reads them: its 3xTF32
     * split needs the registers). */
    static const bool HOLD = true;

    static __device__ __forceinline__ word to_word(awl_bf16 x) { return x.bits; }

    /* The 32-bit word holding elements (r, c) and (r, c + 1) of a tile. */
    template <int DP>
    static __device__ __forceinline__ uint32_t pair(const word *tile, int r, int c)
    {
        return *reinterpret_cast<const uint32_t *>(tile + r * (DP + PAD) + c);
    }

    template <int DP>
    static __device__ __forceinline__ void load_a(uint32_t f[DP / KS][4], const word *tile, int r0,
                                                  int g, int t)
    {
#pragma unroll
        for (int ks = 0; ks < DP / KS; ks++) {
            f[ks][0] = pair<DP>(tile, r0 + g, ks * 16 + 2 * t);
            f[ks][1] = pair<DP>(tile, r0 + g + 8, ks * 16 + 2 * t);
            f[ks][2] = pair<DP>(tile, r0 + g, ks * 16 + 2 * t + 8);
            f[ks][3] = pair<DP>(tile, r0 + g + 8, ks * 16 + 2 * t + 8);
        }
    }

    /* Plain ldmatrix: matrices 0-3 are (rows nb*8.., cols ks*16),
     * (nb*8.., ks*16+8), ((nb+1)*8.., ks*16), ((nb+1)*8.., ks*16+8), i.e.
     * b0, b1 of column blocks nb and nb + 1. */
    template <int DP>
    static __device__ __forceinline__ void scores(float acc[8][4], const uint32_t af[DP / KS][4],
                                                  const word *tile, int lane)
    {
        int mi = lane / 8, rr = lane % 8;
#pragma unroll
        for (int nb = 0; nb < 8; nb++) acc[nb][0] = acc[nb][1] = acc[nb][2] = acc[nb][3] = 0.0f;
#pragma unroll
        for (int nb = 0; nb < 8; nb += 2)
#pragma unroll
            for (int ks = 0; ks < DP / KS; ks++) {
                uint32_t r[4];
                ldsm4(r, tile + ((nb + mi / 2) * 8 + rr) * (DP + PAD) + ks * 16 + (mi % 2) * 8);
                mma16816(acc[nb], af[ks], r[0], r[1]);
                mma16816(acc[nb + 1], af[ks], r[2], r[3]);
            }
    }

    /* acc (16 x DP) += A (16 x 16, keys kc*16..) times rows kc*16.. of the
     * tile. ldmatrix.trans: matrices (rows kc*16.., cols nb*8), (kc*16+8..,
     * nb*8), (kc*16.., (nb+1)*8), (kc*16+8.., (nb+1)*8) give b0, b1 of column
     * blocks nb and nb + 1. */
    template <int DP>
    static __device__ __forceinline__ void product_k16(float acc[DP / 8][4], const uint32_t a[4],
                                                       const word *tile, int kc, int lane)
    {
        int mi = lane / 8, rr = lane % 8;
#pragma unroll
        for (int nb = 0; nb < DP / 8; nb += 2) {
            uint32_t r[4];
            ldsm4_t(r, tile + (kc * 16 + (mi % 2) * 8 + rr) * (DP + PAD) + (nb + mi / 2) * 8);
            mma16816(acc[nb], a, r[0], r[1]);
            mma16816(acc[nb + 1], a, r[2], r[3]);
        }
    }

    template <int DP>
    static __device__ __forceinline__ void accumulate(float acc[DP / 8][4], const float w[8][4],
                                                      const word *tile, int lane)
    {
#pragma unroll
        for (int kc = 0; kc < 4; kc++) {
            uint32_t a[4] = {pack2(w[2 * kc][0], w[2 * kc][1]), pack2(w[2 * kc][2], w[2 * kc][3]),
                             pack2(w[2 * kc + 1][0], w[2 * kc + 1][1]),
                             pack2(w[2 * kc + 1][2], w[2 * kc + 1][3])};
            product_k16<DP>(acc, a, tile, kc, lane);
        }
    }

    /* The same product with W read from shared memory, transposed: W (16 x
     * 64) is columns [r0, r0 + 16) of `wt`, a 64 x 64 tile (dS^T: keys x
     * queries). ldmatrix.trans gives W's A fragment from wt directly:
     * matrices (keys kc*16.., queries r0..), (kc*16.., r0+8..), (kc*16+8..,
     * r0..), (kc*16+8.., r0+8..) are a0..a3. */
    template <int DP>
    static __device__ __forceinline__ void accumulate_t(float acc[DP / 8][4], const word *wt,
                                                        int r0, const word *tile, int lane)
    {
        int mi = lane / 8, rr = lane % 8;
        const int WS = 64 + PAD; /* wt's row stride */
#pragma unroll
        for (int kc = 0; kc < 4; kc++) {
            uint32_t a[4];
            ldsm4_t(a, wt + (kc * 16 + (mi / 2) * 8 + rr) * WS + r0 + (mi % 2) * 8);
            product_k16<DP>(acc, a, tile, kc, lane);
        }
    }

    /* Elements (r, c) and (r, c + 1) of a tile, rounded to bf16. */
    static __device__ __forceinline__ void store_pair(word *p, float lo, float hi)
    {
        *reinterpret_cast<uint32_t *>(p) = pack2(lo, hi);
    }
};

/* ---- float32: mma.m16n8k8 on TF32 --------------------------------------------------- */

template <int P> struct tf32_mma {
    typedef float elem;
    typedef float word;
    static const int PAD = 4, KS = 8;
    static const bool HOLD = false;

    static __device__ __forceinline__ word to_word(float x) { return x; }

    /* c += a b, with a (4 floats as bits, split once per k step) and b. */
    static __device__ __forceinline__ void mma(float c[4], const tf32_split<P> a[4], float b0,
                                               float b1)
    {
        tf32_split<P> x(b0), y(b1);
        uint32_t big[4] = {a[0].big, a[1].big, a[2].big, a[3].big};
        if (P == 3) {
            uint32_t small[4] = {a[0].small, a[1].small, a[2].small, a[3].small};
            mma1688(c, small, x.big, y.big);
            mma1688(c, big, x.small, y.small);
        }
        mma1688(c, big, x.big, y.big);
    }

    template <int DP>
    static __device__ __forceinline__ void load_a(uint32_t f[DP / KS][4], const word *tile, int r0,
                                                  int g, int t)
    {
        const word *lo = tile + (r0 + g) * (DP + PAD) + t, *hi = lo + 8 * (DP + PAD);
#pragma unroll
        for (int ks = 0; ks < DP / KS; ks++) {
            f[ks][0] = __float_as_uint(lo[ks * 8]);
            f[ks][1] = __float_as_uint(hi[ks * 8]);
            f[ks][2] = __float_as_uint(lo[ks * 8 + 4]);
            f[ks][3] = __float_as_uint(hi[ks * 8 + 4]);
        }
    }

    /* B (k = t and t + 4, n = g) of column block nb is the tile's row
     * nb * 8 + g, columns ks * 8 + t and + 4. */
    template <int DP>
    static __device__ __forceinline__ void scores(float acc[8][4], const uint32_t af[DP / KS][4],
                                                  const word *tile, int lane)
    {
        int g = lane / 4, t = lane % 4;
#pragma unroll
        for (int nb = 0; nb < 8; nb++) acc[nb][0] = acc[nb][1] = acc[nb][2] = acc[nb][3] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < DP / KS; ks++) {
            const tf32_split<P> a[4] = {tf32_split<P>(__uint_as_float(af[ks][0])),
                                        tf32_split<P>(__uint_as_float(af[ks][1])),
                                        tf32_split<P>(__uint_as_float(af[ks][2])),
                                        tf32_split<P>(__uint_as_float(af[ks][3]))};
#pragma unroll
            for (int nb = 0; nb < 8; nb++) {
                const word *b = tile + (nb * 8 + g) * (DP + PAD) + ks * 8 + t;
                mma(acc[nb], a, b[0], b[4]);
            }
        }
    }

    /* k = t and t + 4 of key block kc stand for keys 2t and 2t + 1: A is the
     * lane's own C fragment, B the tile's rows kc * 8 + 2t and + 1. */
    template <int DP>
    static __device__ __forceinline__ void accumulate(float acc[DP / 8][4], const float w[8][4],
                                                      const word *tile, int lane)
    {
        int g = lane / 4, t = lane % 4;
#pragma unroll
        for (int kc = 0; kc < 8; kc++) {
            const tf32_split<P> a[4] = {tf32_split<P>(w[kc][0]), tf32_split<P>(w[kc][2]),
                                        tf32_split<P>(w[kc][1]), tf32_split<P>(w[kc][3])};
            const word *b = tile + (kc * 8 + 2 * t) * (DP + PAD) + g;
#pragma unroll
            for (int nb = 0; nb < DP / 8; nb++) mma(acc[nb], a, b[nb * 8], b[nb * 8 + DP + PAD]);
        }
    }

    /* The same product with W read from shared memory, transposed: W (16 x
     * 64) is columns [r0, r0 + 16) of `wt`, a 64 x 64 tile (dS^T: keys x
     * queries), so W's (g, k) is wt's (k, r0 + g). Keys 2t and 2t + 1 again
     * stand for k = t and t + 4: both operands' loads sit at banks 8t + g. */
    template <int DP>
    static __device__ __forceinline__ void accumulate_t(float acc[DP / 8][4], const word *wt,
                                                        int r0, const word *tile, int lane)
    {
        int g = lane / 4, t = lane % 4;
        const int WS = 64 + PAD; /* wt's row stride */
#pragma unroll
        for (int kc = 0; kc < 8; kc++) {
            const word *w = wt + (kc * 8 + 2 * t) * WS + r0 + g;
            const tf32_split<P> a[4] = {tf32_split<P>(w[0]), tf32_split<P>(w[8]),
                                        tf32_split<P>(w[WS]), tf32_split<P>(w[WS + 8])};
            const word *b = tile + (kc * 8 + 2 * t) * (DP + PAD) + g;
#pragma unroll
            for (int nb = 0; nb < DP / 8; nb++) mma(acc[nb], a, b[nb * 8], b[nb * 8 + DP + PAD]);
        }
    }

    static __device__ __forceinline__ void store_pair(word *p, float lo, float hi)
    {
        *reinterpret_cast<float2 *>(p) = make_float2(lo, hi);
    }
};

/* ---- what both share ---------------------------------------------------------------- */

/* Where element (r, c) of a tile sits (in words): rows padded by PAD, or,
 * with SW, rows of 128 bytes in the 128-byte swizzle that wgmma reads
 * (16-byte chunk j of row r at chunk j ^ (r % 8); see fwd_wgmma_kernel). */
template <typename M, int DP, bool SW> __device__ __forceinline__ int tile_at(int r, int c)
{
    const int V = 16 / sizeof(typename M::word); /* words of a chunk */
    return SW ? r * DP + ((c / V) ^ (r % 8)) * V + c % V : r * (DP + M::PAD) + c;
}

/* Starts loading rows [t0, t0 + 64) of one head into tile (row-major, row
 * stride DP + PAD, or swizzled: tile_at): whole aligned 16-byte chunks by
 * cp.async, the rest (rows past T and columns past D as zeros, unaligned
 * rows) by plain stores. The tile is complete once this thread's cp.async
 * group is waited for and the block has synchronised. A tile of whole
 * aligned rows (every tile but a sequence's partial last one, where D = DP
 * and the strides keep each row on a 16-byte boundary) takes a path of its
 * own: a thread's chunks are then one column of rows NT / CH apart, one
 * address and a constant step, where the general loop spends some fifty
 * integer instructions on each chunk's row, bounds and alignment (the
 * forward's and the backward's main loops were led by the integer pipe; the
 * gpt2-124m bf16 step 3.8% shorter on an H100, docs/cuda.md). */
template <typename M, int DP, int NT = THREADS, bool SW = false>
__device__ void load_tile(typename M::word *tile, const heads<typename M::elem> &x, int b, int h,
                          int t0, const att_dims &a)
{
    typedef typename M::word W;
    const int V = 16 / sizeof(W), CH = DP / V; /* V-element chunks per row */
    static_assert(!SW || CH == 8, "the 128-byte swizzle takes rows of eight chunks");
    if (a.D == DP && t0 + BR <= a.T && x.rows16) {
        /* the common case, every chunk whole and aligned: a thread copies
         * the same column of rows RS apart, so one address and one step */
        const int RS = NT / CH;
        static_assert(NT % CH == 0 && BR % (NT / CH) == 0, "a tile in whole passes");
        int r = threadIdx.x / CH, c = (threadIdx.x % CH) * V;
        const typename M::elem *src = row_ptr(x, b, h, t0 + r) + c;
#pragma unroll
        for (int i = 0; i < BR / RS; i++)
            cp_async16(tile + tile_at<M, DP, SW>(r + i * RS, c), src + i * RS * x.st);
        return;
    }
    for (int idx = threadIdx.x; idx < BR * CH; idx += NT) {
        int r = idx / CH, c = (idx % CH) * V, t = t0 + r;
        W *dst = tile + tile_at<M, DP, SW>(r, c);
        int n = t < a.T ? min(max(a.D - c, 0), V) : 0; /* elements to read */
        const typename M::elem *src = n > 0 ? row_ptr(x, b, h, t) + c : nullptr;
        if (n == V && ((uintptr_t)src & 15u) == 0) {
            cp_async16(dst, src);
            continue;
        }
        awlc_pack<W, V> v;
#pragma unroll
        for (int e = 0; e < V; e++) v.v[e] = e < n ? M::to_word(src[e]) : W(0);
        *reinterpret_cast<awlc_pack<W, V> *>(dst) = v;
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
template <typename T, int DP>
__device__ void store_rows(const heads<T> &x, int b, int h, int t0, int r0,
                           const float acc[DP / 8][4], const float mul[2], const att_dims &a, int g,
                           int t)
{
#pragma unroll
    for (int i = 0; i < 2; i++) {
        int row = t0 + r0 + g + 8 * i;
        if (row >= a.T) continue;
        T *dst = const_cast<T *>(row_ptr(x, b, h, row));
#pragma unroll
        for (int nb = 0; nb < DP / 8; nb++) {
            int c = nb * 8 + 2 * t;
            if (c < a.D) dst[c] = awlc_cast<T>(acc[nb][2 * i] * mul[i]);
            if (c + 1 < a.D) dst[c + 1] = awlc_cast<T>(acc[nb][2 * i + 1] * mul[i]);
        }
    }
}

/* Multiplies a warp's 16 x 64 tile w of weights (C fragments: lane (g, t)
 * holds query rows row and row + 8, keys key0 + nb * 8 + 2 t and + 1, row
 * = the warp's first row + g; key0 a multiple of 64) by their dropout
 * multipliers. The quad's two rows are eight Philox blocks of 16 keys
 * (chunks m = 0..3 of each row), two a lane: lane t draws row + 8 (t & 1),
 * chunks 2 (t >> 1) and 2 (t >> 1) + 1, as one word of 32 keep bits, and
 * four shuffles bring each lane the words of the quad. */
__device__ __forceinline__ void drop_rows(float w[8][4], const att_dims &a, int b, int h, int row,
                                          int key0, int lane)
{
    int t = lane % 4, quad = lane - t;
    int r = row + 8 * (t & 1), c = key0 / 16 + 2 * (t >> 1);
    unsigned mine = att_keep16(a, b, h, r, c) | att_keep16(a, b, h, r, c + 1) << 16;
#pragma unroll
    for (int s = 0; s < 4; s++) { /* lane s of the quad: row + 8 (s & 1), chunks 2 (s >> 1) on */
        unsigned word = __shfl_sync(0xffffffffu, mine, quad + s);
#pragma unroll
        for (int half = 0; half < 4; half++) { /* 8 keys: nb 4 (s >> 1) + half */
            unsigned pair = word >> (8 * half + 2 * t);
            float *x = &w[4 * (s >> 1) + half][2 * (s & 1)];
            x[0] *= pair & 1u ? a.drop_scale : 0.0f;
            x[1] *= pair & 2u ? a.drop_scale : 0.0f;
        }
    }
}

/* The keep words of a dK/dV pair (query tile q0, the warp's 16 keys
 * key0..key0 + 15, key0 a multiple of 16): lane l draws query q0 + l (low
 * 16 bits) and q0 + 32 + l (high), one Philox block each. */
__device__ __forceinline__ unsigned drop_words_t(const att_dims &a, int b, int h, int q0, int key0,
                                                 int lane)
{
    return att_keep16(a, b, h, q0 + lane, key0 / 16) |
           att_keep16(a, b, h, q0 + 32 + lane, key0 / 16) << 16;
}

/* The keep bits of a lane's four weights in column block nb of a dK/dV
 * tile (lane (g, t): keys key0 + g + 8 i, queries q0 + nb * 8 + 2 t + j, as
 * bit 2 i + j of the C fragment), from the warp's words (drop_words_t):
 * two shuffles. */
__device__ __forceinline__ unsigned drop_bits_t(unsigned words, int nb, int lane)
{
    int g = lane / 4, t = lane % 4;
    unsigned bits = 0;
#pragma unroll
    for (int j = 0; j < 2; j++) {
        int qc = nb * 8 + 2 * t + j; /* the query within the tile */
        unsigned src = __shfl_sync(0xffffffffu, words, qc % 32) >> (16 * (qc / 32) + g);
        bits |= (src & 1u) << j | (src >> 8 & 1u) << (2 + j);
    }
    return bits;
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

/* One key tile of the online softmax, for a warp's query rows row and row
 * + 8 (row = its first row + g) and keys k0..k0 + 63, given their scores s
 * (C fragments): masks s where `mask` says the tile crosses the diagonal
 * or the end of the sequence, turns the scores into weights against the
 * running maximum m, adds their sums into l, sets alpha to how far m moved
 * (the factor for the rows' output so far: rescale), and multiplies the
 * weights by their dropout multipliers after their sums are taken (lse
 * stays that of the whole softmax). */
template <bool DROP>
__device__ __forceinline__ void softmax_tile(float s[8][4], float alpha[2], float m[2], float l[2],
                                             bool mask, const att_dims &a, int b, int h, int row,
                                             int k0, int lane)
{
    int t = lane % 4;
    const float sl2 = a.scale * LOG2E;
    if (mask)
#pragma unroll
        for (int nb = 0; nb < 8; nb++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int key = k0 + nb * 8 + 2 * t + (e & 1);
                if (!att_visible(row + 8 * (e / 2), key, a)) s[nb][e] = -INFINITY;
            }
    /* m is the running maximum of the unscaled scores (the same keys' as of
     * the scaled ones: scale > 0), so a weight is one FFMA and one ex2,
     * exp2(s sl2 - m sl2); ms = m sl2, or 0 while a row has seen no key,
     * so that its hidden keys give exp2(-inf) = 0. */
    float mx[2] = {m[0], m[1]}, ms[2], rs[2] = {0.0f, 0.0f};
#pragma unroll
    for (int nb = 0; nb < 8; nb++)
#pragma unroll
        for (int e = 0; e < 4; e++) mx[e / 2] = fmaxf(mx[e / 2], s[nb][e]);
#pragma unroll
    for (int i = 0; i < 2; i++) {
        float mn = quad_max(mx[i]);
        ms[i] = mn == -INFINITY ? 0.0f : mn * sl2;
        alpha[i] = m[i] == mn ? 1.0f : awlc_exp2_ftz(fmaf(m[i], sl2, -ms[i]));
        m[i] = mn;
    }
#pragma unroll
    for (int nb = 0; nb < 8; nb++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            s[nb][e] = awlc_exp2_ftz(fmaf(s[nb][e], sl2, -ms[e / 2]));
            rs[e / 2] += s[nb][e];
        }
    if (DROP) drop_rows(s, a, b, h, row, k0, lane);
#pragma unroll
    for (int i = 0; i < 2; i++) l[i] = l[i] * alpha[i] + quad_sum(rs[i]);
}

/* o (C fragments of rows g and g + 8) times alpha[0] and alpha[1]. */
template <int DP> __device__ __forceinline__ void rescale(float o[DP / 8][4], const float alpha[2])
{
#pragma unroll
    for (int nb = 0; nb < DP / 8; nb++) {
        o[nb][0] *= alpha[0];
        o[nb][1] *= alpha[0];
        o[nb][2] *= alpha[1];
        o[nb][3] *= alpha[1];
    }
}

/* The end of a forward for a warp's rows qs + r0 + g (+ 8): lse (natural
 * log units) and out = o / l. */
template <typename T, int DP>
__device__ __forceinline__ void
finish_rows(const heads<T> &out, const lse_ref &lse, const float o[DP / 8][4], const float m[2],
            const float l[2], const att_dims &a, int b, int h, int qs, int r0, int lane)
{
    int g = lane / 4, t = lane % 4;
    const float sl2 = a.scale * LOG2E;
    float inv[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        inv[i] = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
        int row = qs + r0 + g + 8 * i;
        if (t == 0 && row < a.T)
            lse.p[b * lse.sb + h * lse.sh + (int64_t)row * lse.st] =
                (m[i] * sl2 + log2f(l[i])) * LN2;
    }
    store_rows<T, DP>(out, b, h, qs, r0, o, inv, a, g, t);
}

/* Which of its head's `tiles` tiles, and which head (b H + h), a block
 * takes. With a.group = 0 the grid is (tiles, heads); else it is one row
 * of every head's tiles, in groups of `group` heads, each group's first
 * tiles (the heaviest under the causal mask) for all its heads before any
 * of their next ones. Blocks start in the order of their index, so a
 * group's blocks end on the lightest tiles, where (tiles, heads) ends on a
 * last head's heaviest. */
struct att_block {
    int tile, bh;
};
__device__ __forceinline__ att_block block_of(const att_dims &a, int tiles)
{
    if (a.group == 0) return att_block{(int)blockIdx.x, (int)blockIdx.y};
    int64_t i = blockIdx.x, per_group = (int64_t)a.group * tiles;
    int first = (int)(i / per_group) * a.group, rest = (int)(i % per_group);
    int heads = min(a.group, a.B * a.H - first); /* the last group may be short */
    return att_block{rest / heads, first + rest % heads};
}

/* The forward of QW x 64 query rows: QW x 4 warps, warp w on rows
 * (w / 4) 64 + (w % 4) 16 .. + 15 of the block; every key tile brought
 * into shared memory serves all of them. */
template <typename M, int DP, int QW, bool DROP>
__global__ void __launch_bounds__(THREADS * QW)
    fwd_kernel(heads<typename M::elem> out, lse_ref lse, heads<typename M::elem> q,
               heads<typename M::elem> k, heads<typename M::elem> v, att_dims a)
{
    awlc_await_previous_kernel();
    extern __shared__ __align__(16) unsigned char smem_bytes[];
    typedef typename M::word W;
    const int NT = THREADS * QW;
    W *smem = reinterpret_cast<W *>(smem_bytes);
    const int TS = BR * (DP + M::PAD);
    int ntiles = (a.T + BR - 1) / BR, nblocks = (a.T + QW * BR - 1) / (QW * BR);
    att_block at = block_of(a, nblocks);
    int qt = a.causal ? nblocks - 1 - at.tile : at.tile;
    int b = at.bh / a.H, h = at.bh % a.H, q0 = qt * QW * BR;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    int sub = warp / 4, r0 = (warp % 4) * 16, qs = q0 + sub * BR; /* the warp's 64-row tile */

    /* Two K/V buffers, [K0 V0 K1 V1]: the next key tile loads while this one
     * is used. Q's 64-row tiles pass through K1 (and V1) on their way to
     * registers. */
#pragma unroll
    for (int u = 0; u < QW; u++) load_tile<M, DP, NT>(smem + (2 + u) * TS, q, b, h, q0 + u * BR, a);
    load_tile<M, DP, NT>(smem, k, b, h, 0, a);
    load_tile<M, DP, NT>(smem + TS, v, b, h, 0, a);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    uint32_t qf[DP / M::KS][4];
    M::template load_a<DP>(qf, smem + (2 + sub) * TS, r0, g, t);
    __syncthreads(); /* every warp holds its Q before K1 is refilled */
    float o[DP / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int nb = 0; nb < DP / 8; nb++) o[nb][0] = o[nb][1] = o[nb][2] = o[nb][3] = 0.0f;
    int last = a.causal ? min(ntiles - 1, (q0 + QW * BR - 1) / BR) : ntiles - 1;
    for (int kt = 0; kt <= last; kt++) {
        int k0 = kt * BR;
        W *Ks = smem + (kt & 1) * 2 * TS, *Vs = Ks + TS, *next = smem + (~kt & 1) * 2 * TS;
        if (kt < last) {
            load_tile<M, DP, NT>(next, k, b, h, k0 + BR, a);
            load_tile<M, DP, NT>(next + TS, v, b, h, k0 + BR, a);
        }
        cp_async_commit();
        cp_async_wait<1>(); /* all but the prefetch: this tile has arrived */
        __syncthreads();
        /* a warp whose rows all come before this tile's keys skips it */
        if (!a.causal || k0 <= qs + r0 + 15) {
            float s[8][4];
            M::template scores<DP>(s, qf, Ks, lane);
            float alpha[2];
            softmax_tile<DROP>(s, alpha, m, l, needs_mask(qs, k0, a), a, b, h, qs + r0 + g, k0,
                               lane);
            rescale<DP>(o, alpha);
            M::template accumulate<DP>(o, s, Vs, lane);
        }
        __syncthreads(); /* every warp is done with this buffer before it is refilled */
    }
    finish_rows<typename M::elem, DP>(out, lse, o, m, l, a, b, h, qs, r0, lane);
}

/* ---- Hopper's warpgroup products (sm_90a): the forward and dK/dV ------------------ */

#if defined(AWL_CUDA_WGMMA)
/*
 * bfloat16 with D <= 64: fwd_kernel's algorithm, with each tile product
 * one wgmma.mma_async issued by a warpgroup (4 consecutive warps, 128
 * threads) for all its 64 query rows, its B operand (and S's A, Q) read by
 * the tensor cores straight from shared memory: 4 instructions where each
 * warp issued 32 mma.sync and 16 ldmatrix, and no registers spent on B
 * fragments. The accumulators of wgmma.m64n64k16 give warp w of the group
 * rows 16w..16w + 15 in exactly mma.m16n8's C fragments, and its A
 * operand in registers is mma.m16n8k16's A fragment (PTX ISA, "Register
 * Fragments and Shared Memory Matrix Layouts" of wgmma), so the masking,
 * the online softmax, dropout and the stores are fwd_kernel's
 * (softmax_tile, finish_rows), and P goes from S's registers to the second
 * product as in bf16_mma::accumulate.
 *
 * Tiles lie in the layout the tensor cores read with the 128-byte swizzle:
 * a row of 64 bf16 is 128 bytes, its 16-byte chunk j at chunk j ^ (row %
 * 8), eight rows one 1024-byte atom (tile_at; tiles 1024-byte aligned).
 * A shared-memory operand is a 64-bit descriptor (sw128): the tile's
 * address, the 1024 bytes from one group of 8 rows to the next, and the
 * swizzle mode. Q and K are "K-major" (the summed index, d, runs along a
 * row): the k-th 16 columns of a product start 32 k bytes into the rows
 * (the swizzle is applied to the address, so an offset inside the atom
 * holds). V in P V is "MN-major" (d is the output's column, along the row;
 * the keys are summed), read with the transpose bit: its k-th 16 keys are
 * two atoms, 2048 k bytes on.
 *
 * The ordering rules: the tiles come by cp.async, whose writes the tensor
 * cores (the async proxy) see only after fence.proxy.async and the block's
 * barrier; registers the products read or accumulate into are handed over
 * by wgmma.fence; the products run asynchronously until
 * wgmma.commit_group / wait_group, and nothing touches their accumulators
 * before that wait (reg_fence tells the compiler so).
 */

/* The helpers below are compiled in the sm_90a pass and the host pass
 * only: a build for several architectures ("80;90a") compiles this file
 * once for each, and the other passes' kernels are stubs that use none of
 * them. */
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) || !defined(__CUDA_ARCH__)
/* A shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"):
 * address >> 4 (bits 0-13), leading byte offset >> 4 (16-29), stride byte
 * offset >> 4 (32-45), swizzle mode (62-63; 1 = 128 bytes). The stride
 * from one 8-row group to the next is 1024 bytes in both majors; the
 * leading offset is unused for these 64-wide tiles (K-major: 16 columns
 * lie within a row; MN-major: 64 columns are one atom) and set to 1024
 * bytes too. */
__device__ __forceinline__ uint64_t sw128(const void *tile)
{
    uint64_t addr = (uint32_t)__cvta_generic_to_shared(tile);
    return (addr & 0x3FFFF) >> 4 | (uint64_t)(1024 >> 4) << 16 | (uint64_t)(1024 >> 4) << 32 |
           (uint64_t)1 << 62;
}

__device__ __forceinline__ void wgmma_fence()
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_wait_all()
{
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}
/* Shared memory written by this thread through the generic proxy
 * (cp.async) made visible to the tensor cores' reads. */
__device__ __forceinline__ void fence_proxy_async()
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
/* Keeps the compiler from moving reads or writes of x across this point
 * (an empty asm volatile that claims to rewrite x). */
__device__ __forceinline__ void reg_fence(float x[8][4])
{
#pragma unroll
    for (int nb = 0; nb < 8; nb++)
#pragma unroll
        for (int e = 0; e < 4; e++) asm volatile("" : "+f"(x[nb][e])::"memory");
}
__device__ __forceinline__ void reg_fence(uint32_t x[4])
{
#pragma unroll
    for (int e = 0; e < 4; e++) asm volatile("" : "+r"(x[e])::"memory");
}

/* A 16 x 64 tile of a warp's C fragments (floats) as bf16 A fragments
 * for a product over its 64 columns, 16 at a time (f[kk]: columns 16 kk..;
 * the C fragments of two neighbouring 8-column blocks are exactly one A
 * fragment), each fenced for the wgmma that reads it. */
__device__ __forceinline__ void a_fragments(uint32_t f[4][4], const float c[8][4])
{
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        f[kk][0] = pack2(c[2 * kk][0], c[2 * kk][1]);
        f[kk][1] = pack2(c[2 * kk][2], c[2 * kk][3]);
        f[kk][2] = pack2(c[2 * kk + 1][0], c[2 * kk + 1][1]);
        f[kk][3] = pack2(c[2 * kk + 1][2], c[2 * kk + 1][3]);
        reg_fence(f[kk]);
    }
}

#define AWLC_WG_D                                                                                  \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "  \
    "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define AWLC_WG_OUT(d)                                                                             \
    "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),      \
        "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),  \
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]),  \
        "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),  \
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),  \
        "+f"(d[7][2]), "+f"(d[7][3])

/* d (64 x 64, f32) = A B^T, or += where `add`: A a 64 x 16 slice of a
 * K-major tile, B one of another (both by descriptor). */
__device__ __forceinline__ void wgmma_ss(float d[8][4], uint64_t da, uint64_t db, int add)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " AWLC_WG_D
                 ", %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : AWLC_WG_OUT(d)
                 : "l"(da), "l"(db), "r"(add));
}

/* d (64 x 64, f32) += A B: A (64 x 16) in registers (a warp's rows as
 * mma.m16n8k16's A fragment), B 16 rows of an MN-major tile (descriptor,
 * transposed). */
__device__ __forceinline__ void wgmma_rs_t(float d[8][4], const uint32_t a[4], uint64_t db)
{
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " AWLC_WG_D
                 ", {%32, %33, %34, %35}, %36, 1, 1, 1, 1;\n"
                 : AWLC_WG_OUT(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

#endif

/* The forward of QW x 64 query rows on QW warpgroups, warpgroup u on rows
 * u 64 .. u 64 + 63 of the block (warp w of it on 16 w ..); every key tile
 * brought into shared memory serves all of them. Shared memory: QW Q
 * tiles, then two K/V buffers [K0 V0 K1 V1], 1024-byte aligned. */
template <int QW, bool DROP>
__global__ void __launch_bounds__(THREADS * QW)
    fwd_wgmma_kernel(heads<awl_bf16> out, lse_ref lse, heads<awl_bf16> q, heads<awl_bf16> k,
                     heads<awl_bf16> v, att_dims a)
{
    awlc_await_previous_kernel();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    typedef bf16_mma M;
    extern __shared__ __align__(16) unsigned char smem_bytes[];
    const int NT = THREADS * QW, TS = BR * 64; /* a tile's words */
    uint32_t base = (uint32_t)__cvta_generic_to_shared(smem_bytes);
    uint16_t *smem = reinterpret_cast<uint16_t *>(smem_bytes + ((1024 - base % 1024) % 1024));
    int ntiles = (a.T + BR - 1) / BR, nblocks = (a.T + QW * BR - 1) / (QW * BR);
    att_block at = block_of(a, nblocks);
    int qt = a.causal ? nblocks - 1 - at.tile : at.tile;
    int b = at.bh / a.H, h = at.bh % a.H, q0 = qt * QW * BR;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4;
    int sub = warp / 4, r0 = (warp % 4) * 16, qs = q0 + sub * BR; /* the group's 64-row tile */
    uint16_t *kv = smem + QW * TS;

#pragma unroll
    for (int u = 0; u < QW; u++) load_tile<M, 64, NT, true>(smem + u * TS, q, b, h, q0 + u * BR, a);
    load_tile<M, 64, NT, true>(kv, k, b, h, 0, a);
    load_tile<M, 64, NT, true>(kv + TS, v, b, h, 0, a);
    cp_async_commit();
    const uint64_t dq = sw128(smem + sub * TS);
    float o[8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int nb = 0; nb < 8; nb++) o[nb][0] = o[nb][1] = o[nb][2] = o[nb][3] = 0.0f;
    int last = a.causal ? min(ntiles - 1, (q0 + QW * BR - 1) / BR) : ntiles - 1;
    for (int kt = 0; kt <= last; kt++) {
        int k0 = kt * BR;
        uint16_t *Ks = kv + (kt & 1) * 2 * TS, *Vs = Ks + TS, *next = kv + (~kt & 1) * 2 * TS;
        if (kt < last) {
            load_tile<M, 64, NT, true>(next, k, b, h, k0 + BR, a);
            load_tile<M, 64, NT, true>(next + TS, v, b, h, k0 + BR, a);
        }
        cp_async_commit();
        cp_async_wait<1>(); /* all but the prefetch: this tile has arrived */
        fence_proxy_async();
        __syncthreads();
        /* a warpgroup whose rows all come before this tile's keys skips it */
        if (!a.causal || k0 <= qs + BR - 1) {
            float s[8][4] = {}; /* the first product overwrites it (add = 0) */
            const uint64_t dk = sw128(Ks), dv = sw128(Vs);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < 4; kk++) wgmma_ss(s, dq + 2 * kk, dk + 2 * kk, kk);
            wgmma_commit();
            wgmma_wait_all();
            reg_fence(s);
            float alpha[2];
            softmax_tile<DROP>(s, alpha, m, l, needs_mask(qs, k0, a), a, b, h, qs + r0 + g, k0,
                               lane);
            rescale<64>(o, alpha);
            uint32_t p[4][4]; /* P in bf16, the A fragments of keys 16 kk.. */
            a_fragments(p, s);
            reg_fence(o);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < 4; kk++) wgmma_rs_t(o, p[kk], dv + kk * (2048 >> 4));
            wgmma_commit();
            wgmma_wait_all();
            reg_fence(o);
        }
        __syncthreads(); /* every warp is done with this buffer before it is refilled */
    }
    finish_rows<awl_bf16, 64>(out, lse, o, m, l, a, b, h, qs, r0, lane);
#else
    __trap(); /* launched only where awlc_wgmma() holds */
#endif
}
#endif

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

/* lse (in log2 units) and Di of query rows [q0, q0 + 64) into ls and ds;
 * zeros past T. */
__device__ void load_stats(float *ls, float *ds, const lse_ref &lse, const float *Dv, int b, int h,
                           int q0, const att_dims &a)
{
    for (int r = threadIdx.x; r < BR; r += THREADS) {
        bool ok = q0 + r < a.T;
        ls[r] = ok ? lse.p[b * lse.sb + h * lse.sh + (int64_t)(q0 + r) * lse.st] * LOG2E : 0.0f;
        ds[r] = ok ? Dv[((int64_t)b * a.H + h) * a.T + q0 + r] : 0.0f;
    }
}

/* Starts loading query rows [q0, q0 + 64) for the walk over query tiles:
 * Q into qd, dO into the tile after it, their statistics into st (lse,
 * then Di). */
template <typename M, int DP, bool SW = false>
__device__ void load_query_tile(typename M::word *qd, float *st, const heads<typename M::elem> &q,
                                const heads<typename M::elem> &dout, const lse_ref &lse,
                                const float *Dv, int b, int h, int q0, const att_dims &a)
{
    load_tile<M, DP, THREADS, SW>(qd, q, b, h, q0, a);
    load_tile<M, DP, THREADS, SW>(qd + BR * (SW ? DP : DP + M::PAD), dout, b, h, q0, a);
    load_stats(st, st + BR, lse, Dv, b, h, q0, a);
}

/* The middle of a dK/dV pair, element by element: from S^T (in p) and
 * dP^T (in dst), C fragments of the warp's keys k0 + r0 + g (+ 8) and
 * query tile q0, to P^T times the dropout multipliers M^T (in p) and dS^T
 * = P^T (M^T dP^T - D) (in dst). ls and ds: the query tile's statistics. */
template <bool DROP>
__device__ __forceinline__ void dkdv_weights(float p[8][4], float dst[8][4], const float *ls,
                                             const float *ds, int b, int h, int q0, int k0, int r0,
                                             const att_dims &a, int lane)
{
    int g = lane / 4, t = lane % 4;
    const float sl2 = a.scale * LOG2E;
    bool mask = needs_mask(q0, k0, a);
    unsigned words = DROP ? drop_words_t(a, b, h, q0, k0 + r0, lane) : 0u;
#pragma unroll
    for (int nb = 0; nb < 8; nb++) {
        unsigned keep = DROP ? drop_bits_t(words, nb, lane) : 15u;
        /* the statistics of the lane's two queries, nb * 8 + 2t and + 1 */
        const float2 lq = *reinterpret_cast<const float2 *>(ls + nb * 8 + 2 * t);
        const float2 dq = *reinterpret_cast<const float2 *>(ds + nb * 8 + 2 * t);
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int key = k0 + r0 + g + 8 * (e / 2), qc = nb * 8 + 2 * t + (e & 1);
            float lse_q = e & 1 ? lq.y : lq.x, d_q = e & 1 ? dq.y : dq.x;
            float pv = !mask || att_visible(q0 + qc, key, a)
                           ? awlc_exp2_ftz(fmaf(p[nb][e], sl2, -lse_q))
                           : 0.0f;
            float m = !DROP ? 1.0f : keep >> e & 1u ? a.drop_scale : 0.0f;
            p[nb][e] = pv * m;
            dst[nb][e] = pv * (m * dst[nb][e] - d_q);
        }
    }
}

/* One (key tile, query tile) pair of the backward, for the warp's keys
 * k0 + r0 + g (+ 8) of head (b, h), given their K and V fragments: S^T =
 * K Q^T, P^T = exp2(S^T - lse), dP^T = M^T (V dO^T), dS^T = P^T (dP^T - D)
 * (left in dst); dV += (M P)^T dO, dK += dS^T Q, M the dropout multipliers
 * (1 without dropout). ls and ds: the query tile's statistics. */
template <typename M, int DP, bool DROP>
__device__ __forceinline__ void
dkdv_pair(float dst[8][4], float gk[DP / 8][4], float gv[DP / 8][4],
          const uint32_t kf[DP / M::KS][4], const uint32_t vf[DP / M::KS][4],
          const typename M::word *Qs, const typename M::word *dOs, const float *ls, const float *ds,
          int b, int h, int q0, int k0, int r0, const att_dims &a, int lane)
{
    float p[8][4];
    M::template scores<DP>(p, kf, Qs, lane);    /* S^T: keys x queries */
    M::template scores<DP>(dst, vf, dOs, lane); /* dP^T */
    dkdv_weights<DROP>(p, dst, ls, ds, b, h, q0, k0, r0, a, lane);
    M::template accumulate<DP>(gv, p, dOs, lane);
    M::template accumulate<DP>(gk, dst, Qs, lane);
}

/* The dS^T tiles of the stored-dS backward (backward() given `ds`, the
 * default): for each head (b H + h), one 64 x 64 tile (keys x queries,
 * row-major, in the tiles' word: bf16 or float32) per (key tile, query
 * tile) pair that the mask lets through, ordered by query tile and then key
 * tile, so that dq_stored_kernel reads a query tile's tiles one after the
 * other. */
__host__ __device__ __forceinline__ int64_t ds_pairs(const att_dims &a, int ntiles)
{
    return a.causal ? (int64_t)ntiles * (ntiles + 1) / 2 : (int64_t)ntiles * ntiles;
}

template <typename W>
__device__ __forceinline__ W *ds_tile(W *ds, const att_dims &a, int ntiles, int bh, int qt, int kt)
{
    int64_t pair = a.causal ? (int64_t)qt * (qt + 1) / 2 + kt : (int64_t)qt * ntiles + kt;
    return ds + (bh * ds_pairs(a, ntiles) + pair) * (BR * BR);
}

/* Writes a warp's 16 rows r0.. of a dS^T tile (C fragments, rounded to
 * the tiles' word) to `tile` (64 x 64, row-major): through the warp's part
 * of `stage` (64 rows of 64 + PAD words), then out in 16-byte chunks,
 * eight lanes to a row, so that each store instruction writes whole
 * 128-byte lines (a C fragment's pairs written directly are 4 bytes a
 * lane, half sectors). */
template <typename M>
__device__ __forceinline__ void store_ds_rows(typename M::word *tile, typename M::word *stage,
                                              const float ds_t[8][4], int r0, int lane)
{
    typedef typename M::word W;
    int g = lane / 4, t = lane % 4;
    const int SW = BR + M::PAD, V = 16 / sizeof(W), CH = BR / V;
    W *st = stage + r0 * SW;
#pragma unroll
    for (int nb = 0; nb < 8; nb++)
#pragma unroll
        for (int i = 0; i < 2; i++)
            M::store_pair(st + (g + 8 * i) * SW + nb * 8 + 2 * t, ds_t[nb][2 * i],
                          ds_t[nb][2 * i + 1]);
    __syncwarp();
    tile += r0 * BR;
#pragma unroll
    for (int i = 0; i < 16 * CH / 32; i++) {
        int c = lane + 32 * i;
        *reinterpret_cast<uint4 *>(tile + (c / CH) * BR + (c % CH) * V) =
            *reinterpret_cast<const uint4 *>(st + (c / CH) * SW + (c % CH) * V);
    }
    __syncwarp(); /* read out before the next tile's rows are written */
}

/* The blocks an SM the dK/dV kernel is compiled for: bfloat16 with D <= 64
 * storing dS^T, 3 (at most 168 registers a thread, its K and V fragments
 * re-read from shared memory for every query tile instead of held; 12
 * warps an SM instead of 8: on an H100 the gpt2-124m bf16 step 1% shorter
 * with dropout 0.1, as fast without, docs/cuda.md); else 1. */
template <typename M, int DP, bool STORE> __host__ __device__ constexpr int dkdv_blocks()
{
    return std::is_same<M, bf16_mma>::value && DP == 64 && STORE ? 3 : 1;
}

/* dK, dV for 64 keys; the warp owns keys k0 + r0 + g (+ 8). Walks the query
 * tiles: S^T = K Q^T, P^T = exp2(S^T - lse), dP^T = V dO^T,
 * dS^T = P^T (dP^T - D); dV += P^T dO, dK += dS^T Q. With STORE it also
 * writes each dS^T tile, rounded as the products use it, to `ds_out` (ds_tile)
 * for dq_stored_kernel; without it ds_out is NULL. */
template <typename M, int DP, bool DROP, bool STORE = false>
__global__ void __launch_bounds__(THREADS, dkdv_blocks<M, DP, STORE>())
    dkdv_kernel(heads<typename M::elem> dk, heads<typename M::elem> dv,
                heads<typename M::elem> dout, heads<typename M::elem> q, heads<typename M::elem> k,
                heads<typename M::elem> v, lse_ref lse, const float *Dv, att_dims a,
                typename M::word *ds_out)
{
    awlc_await_previous_kernel();
    extern __shared__ __align__(16) unsigned char smem_bytes[];
    typedef typename M::word W;
    W *smem = reinterpret_cast<W *>(smem_bytes);
    const int TS = BR * (DP + M::PAD);
    float *stats = reinterpret_cast<float *>(smem + 6 * TS); /* [ls0 ds0 ls1 ds1] */
    W *stage = reinterpret_cast<W *>(stats + 4 * BR);        /* STORE: BR rows of BR + PAD */
    int ntiles = (a.T + BR - 1) / BR;
    att_block at = block_of(a, ntiles);
    int kt = at.tile, b = at.bh / a.H, h = at.bh % a.H, k0 = kt * BR;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    int r0 = warp * 16;
    int first = a.causal ? kt : 0;

    /* K and V stay in shared memory, followed by two Q/dO buffers,
     * [K V Q0 dO0 Q1 dO1]: the next query tile loads while this one is used.
     * bfloat16 with D <= 64 loads the warp's K and V fragments once and
     * holds them; the rest re-read them for each tile, since holding them
     * would leave too few registers for the 3xTF32 split (or, D = 128, for
     * anything). */
    const W *Ks = smem, *Vs = smem + TS;
    load_tile<M, DP>(smem, k, b, h, k0, a);
    load_tile<M, DP>(smem + TS, v, b, h, k0, a);
    load_query_tile<M, DP>(smem + 2 * TS, stats, q, dout, lse, Dv, b, h, first * BR, a);
    cp_async_commit();
    float gk[DP / 8][4], gv[DP / 8][4];
#pragma unroll
    for (int nb = 0; nb < DP / 8; nb++)
#pragma unroll
        for (int e = 0; e < 4; e++) gk[nb][e] = gv[nb][e] = 0.0f;
    /* with D = 128 they would spill; in 3 blocks an SM there is no room */
    const bool hold = M::HOLD && DP == 64 && dkdv_blocks<M, DP, STORE>() == 1;
    uint32_t kf[DP / M::KS][4], vf[DP / M::KS][4];
    for (int qt = first; qt < ntiles; qt++) {
        int q0 = qt * BR, cur = (qt - first) & 1;
        W *Qs = smem + (2 + 2 * cur) * TS, *dOs = Qs + TS, *next = smem + (4 - 2 * cur) * TS;
        const float *ls = stats + cur * 2 * BR, *ds = ls + BR;
        if (qt + 1 < ntiles)
            load_query_tile<M, DP>(next, stats + (cur ^ 1) * 2 * BR, q, dout, lse, Dv, b, h,
                                   q0 + BR, a);
        cp_async_commit();
        cp_async_wait<1>(); /* all but the prefetch: this tile has arrived */
        __syncthreads();
        if (!hold || qt == first) {
            M::template load_a<DP>(kf, Ks, r0, g, t);
            M::template load_a<DP>(vf, Vs, r0, g, t);
        }
        float ds_t[8][4];
        dkdv_pair<M, DP, DROP>(ds_t, gk, gv, kf, vf, Qs, dOs, ls, ds, b, h, q0, k0, r0, a, lane);
        if (STORE)
            store_ds_rows<M>(ds_tile(ds_out, a, ntiles, at.bh, qt, kt), stage, ds_t, r0, lane);
        __syncthreads(); /* every warp is done with this buffer before it is refilled */
    }
    const float one[2] = {1.0f, 1.0f}, sc[2] = {a.scale, a.scale};
    store_rows<typename M::elem, DP>(dk, b, h, k0, r0, gk, sc, a, g, t);
    store_rows<typename M::elem, DP>(dv, b, h, k0, r0, gv, one, a, g, t);
}

#if defined(AWL_CUDA_WGMMA)
/* dkdv_kernel for bfloat16 with D <= 64, storing dS^T, on wgmma (see
 * fwd_wgmma_kernel): the block is one warpgroup on its 64 keys, and each
 * pair of tiles is four warpgroup products, S^T = K Q^T and dP^T = V dO^T
 * (both operands K-major tiles), then dV += P^T dO and dK += dS^T Q with
 * P^T and dS^T from registers and dO and Q read as MN-major (the same
 * tiles, with the transpose bit). */
template <bool DROP>
__global__ void __launch_bounds__(THREADS, 3)
    dkdv_wgmma_kernel(heads<awl_bf16> dk, heads<awl_bf16> dv, heads<awl_bf16> dout,
                      heads<awl_bf16> q, heads<awl_bf16> k, heads<awl_bf16> v, lse_ref lse,
                      const float *Dv, att_dims a, uint16_t *ds_out)
{
    awlc_await_previous_kernel();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    typedef bf16_mma M;
    extern __shared__ __align__(16) unsigned char smem_bytes[];
    const int TS = BR * 64; /* a tile's words */
    uint32_t base = (uint32_t)__cvta_generic_to_shared(smem_bytes);
    uint16_t *smem = reinterpret_cast<uint16_t *>(smem_bytes + ((1024 - base % 1024) % 1024));
    float *stats = reinterpret_cast<float *>(smem + 6 * TS); /* [ls0 ds0 ls1 ds1] */
    uint16_t *stage = reinterpret_cast<uint16_t *>(stats + 4 * BR);
    int ntiles = (a.T + BR - 1) / BR;
    att_block at = block_of(a, ntiles);
    int kt = at.tile, b = at.bh / a.H, h = at.bh % a.H, k0 = kt * BR;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int r0 = warp * 16;
    int first = a.causal ? kt : 0;

    /* [K V Q0 dO0 Q1 dO1], all in the 128-byte swizzle */
    load_tile<M, 64, THREADS, true>(smem, k, b, h, k0, a);
    load_tile<M, 64, THREADS, true>(smem + TS, v, b, h, k0, a);
    load_query_tile<M, 64, true>(smem + 2 * TS, stats, q, dout, lse, Dv, b, h, first * BR, a);
    cp_async_commit();
    const uint64_t dK = sw128(smem), dV = sw128(smem + TS);
    float gk[8][4], gv[8][4];
#pragma unroll
    for (int nb = 0; nb < 8; nb++)
#pragma unroll
        for (int e = 0; e < 4; e++) gk[nb][e] = gv[nb][e] = 0.0f;
    for (int qt = first; qt < ntiles; qt++) {
        int q0 = qt * BR, cur = (qt - first) & 1;
        uint16_t *Qs = smem + (2 + 2 * cur) * TS, *next = smem + (4 - 2 * cur) * TS;
        const float *ls = stats + cur * 2 * BR, *ds = ls + BR;
        if (qt + 1 < ntiles)
            load_query_tile<M, 64, true>(next, stats + (cur ^ 1) * 2 * BR, q, dout, lse, Dv, b, h,
                                         q0 + BR, a);
        cp_async_commit();
        cp_async_wait<1>(); /* all but the prefetch: this tile has arrived */
        fence_proxy_async();
        __syncthreads();
        const uint64_t dQ = sw128(Qs), dO = sw128(Qs + TS);
        float p[8][4] = {}, ds_t[8][4] = {};
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; kk++) wgmma_ss(p, dK + 2 * kk, dQ + 2 * kk, kk);
#pragma unroll
        for (int kk = 0; kk < 4; kk++) wgmma_ss(ds_t, dV + 2 * kk, dO + 2 * kk, kk);
        wgmma_commit();
        wgmma_wait_all();
        reg_fence(p);
        reg_fence(ds_t);
        dkdv_weights<DROP>(p, ds_t, ls, ds, b, h, q0, k0, r0, a, lane);
        uint32_t pa[4][4], sa[4][4]; /* P^T and dS^T in bf16, A fragments */
        a_fragments(pa, p);
        a_fragments(sa, ds_t);
        reg_fence(gv);
        reg_fence(gk);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; kk++) wgmma_rs_t(gv, pa[kk], dO + kk * (2048 >> 4));
#pragma unroll
        for (int kk = 0; kk < 4; kk++) wgmma_rs_t(gk, sa[kk], dQ + kk * (2048 >> 4));
        wgmma_commit();
        store_ds_rows<M>(ds_tile(ds_out, a, ntiles, at.bh, qt, kt), stage, ds_t, r0, lane);
        wgmma_wait_all();
        reg_fence(gv);
        reg_fence(gk);
        __syncthreads(); /* every warp is done with this buffer before it is refilled */
    }
    const float one[2] = {1.0f, 1.0f}, sc[2] = {a.scale, a.scale};
    int g = lane / 4, t = lane % 4;
    store_rows<awl_bf16, 64>(dk, b, h, k0, r0, gk, sc, a, g, t);
    store_rows<awl_bf16, 64>(dv, b, h, k0, r0, gv, one, a, g, t);
#else
    __trap(); /* launched only where awlc_wgmma() holds */
#endif
}
#endif

/* dQ for 64 queries; walks the key tiles: S = Q K^T, P, dP = M (dO V^T),
 * dS = P (dP - D), dQ += dS K (M: dropout multipliers, or none). */
template <typename M, int DP, bool DROP>
__global__ void __launch_bounds__(THREADS)
    dq_kernel(heads<typename M::elem> dq, heads<typename M::elem> dout, heads<typename M::elem> q,
              heads<typename M::elem> k, heads<typename M::elem> v, lse_ref lse, const float *Dv,
              att_dims a)
{
    awlc_await_previous_kernel();
    extern __shared__ __align__(16) unsigned char smem_bytes[];
    typedef typename M::word W;
    W *smem = reinterpret_cast<W *>(smem_bytes);
    const int TS = BR * (DP + M::PAD);
    int ntiles = (a.T + BR - 1) / BR;
    att_block at = block_of(a, ntiles);
    int qt = a.causal ? ntiles - 1 - at.tile : at.tile;
    int b = at.bh / a.H, h = at.bh % a.H, q0 = qt * BR;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    int r0 = warp * 16;

    /* Q and dO stay in shared memory, followed by two K/V buffers as in the
     * forward, [Q dO K0 V0 K1 V1]; Q and dO fragments held or re-read as in dK/dV. */
    const W *Qs = smem, *dOs = smem + TS;
    load_tile<M, DP>(smem, q, b, h, q0, a);
    load_tile<M, DP>(smem + TS, dout, b, h, q0, a);
    load_tile<M, DP>(smem + 2 * TS, k, b, h, 0, a);
    load_tile<M, DP>(smem + 3 * TS, v, b, h, 0, a);
    cp_async_commit();
    float ls[2], ds[2];
    row_stats(ls, ds, lse, Dv, b, h, q0 + r0 + g, a);
    float gq[DP / 8][4];
#pragma unroll
    for (int nb = 0; nb < DP / 8; nb++) gq[nb][0] = gq[nb][1] = gq[nb][2] = gq[nb][3] = 0.0f;
    const float sl2 = a.scale * LOG2E;
    int last = a.causal ? qt : ntiles - 1;
    const bool hold = M::HOLD && DP == 64;
    uint32_t qf[DP / M::KS][4], of[DP / M::KS][4];
    for (int kt = 0; kt <= last; kt++) {
        int k0 = kt * BR;
        W *Ks = smem + (2 + 2 * (kt & 1)) * TS, *Vs = Ks + TS,
          *next = smem + (4 - 2 * (kt & 1)) * TS;
        if (kt < last) {
            load_tile<M, DP>(next, k, b, h, k0 + BR, a);
            load_tile<M, DP>(next + TS, v, b, h, k0 + BR, a);
        }
        cp_async_commit();
        cp_async_wait<1>(); /* all but the prefetch: this tile has arrived */
        __syncthreads();
        if (!hold || kt == 0) {
            M::template load_a<DP>(qf, Qs, r0, g, t);
            M::template load_a<DP>(of, dOs, r0, g, t);
        }
        float p[8][4], dp[8][4];
        M::template scores<DP>(p, qf, Ks, lane);
        M::template scores<DP>(dp, of, Vs, lane);
        if (DROP) drop_rows(dp, a, b, h, q0 + r0 + g, k0, lane); /* dP = M (dO V^T) */
        bool mask = needs_mask(q0, k0, a);
#pragma unroll
        for (int nb = 0; nb < 8; nb++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int row = q0 + r0 + g + 8 * (e / 2), key = k0 + nb * 8 + 2 * t + (e & 1);
                float pv = !mask || att_visible(row, key, a)
                               ? awlc_exp2_ftz(fmaf(p[nb][e], sl2, -ls[e / 2]))
                               : 0.0f;
                dp[nb][e] = pv * (dp[nb][e] - ds[e / 2]);
            }
        M::template accumulate<DP>(gq, dp, Ks, lane);
        __syncthreads(); /* every warp is done with this buffer before it is refilled */
    }
    const float sc[2] = {a.scale, a.scale};
    store_rows<typename M::elem, DP>(dq, b, h, q0, r0, gq, sc, a, g, t);
}

/* Starts loading a stored 64 x 64 dS^T tile (ds_tile) into shared memory,
 * row stride 64 + PAD: whole 16-byte chunks by cp.async, all aligned. */
template <typename M, int NT = THREADS>
__device__ void load_ds_tile(typename M::word *dst, const typename M::word *src)
{
    const int V = 16 / sizeof(typename M::word), CH = BR / V;
    for (int idx = threadIdx.x; idx < BR * CH; idx += NT) {
        int r = idx / CH, c = (idx % CH) * V;
        cp_async16(dst + r * (BR + M::PAD) + c, src + r * BR + c);
    }
}

/* The query tiles a dq_stored_kernel block takes: 2, but 1 for float32 at
 * D = 128, where 8 warps' registers would spill (3xTF32: 44 bytes). */
template <typename M, int DP> __host__ __device__ constexpr int dq_groups()
{
    return DP == 128 && !std::is_same<M, bf16_mma>::value ? 1 : 2;
}

/* dQ for QW x 64 queries from the dS^T tiles that dkdv_kernel stored:
 * dQ = scale * (sum over key tiles of dS K), the key tiles added in order.
 * One tile product a pair of tiles, where dq_kernel recomputes S and dP for
 * it (three). QW x 4 warps; warp w takes rows 16 (w % 4) of query tile
 * QW p + w / 4 of the block's p-th group of tiles. The kernel reads about
 * as many bytes of K as of dS^T, so with QW = 2 each K tile serves two
 * query tiles and a pair of tiles costs 3 tile loads instead of 4. Shared
 * memory: two buffers of [K, QW dS^T tiles], the next loading while this
 * one is used; dS^T's columns are the warps' query rows, which accumulate_t
 * reads transposed. Under the causal mask the group's first tile has one
 * key tile fewer than its second: its warps sit out the last one. */
template <typename M, int DP, int QW>
__global__ void __launch_bounds__(THREADS * QW)
    dq_stored_kernel(heads<typename M::elem> dq, heads<typename M::elem> k,
                     const typename M::word *ds, att_dims a)
{
    awlc_await_previous_kernel();
    const int NT = THREADS * QW;
    extern __shared__ __align__(16) unsigned char smem_bytes[];
    typedef typename M::word W;
    W *smem = reinterpret_cast<W *>(smem_bytes);
    const int TS = BR * (DP + M::PAD), DS = BR * (BR + M::PAD), PS = TS + QW * DS;
    int ntiles = (a.T + BR - 1) / BR, groups = (ntiles + QW - 1) / QW;
    att_block at = block_of(a, groups);
    int q_first = (a.causal ? groups - 1 - at.tile : at.tile) * QW;
    int q_last = min(q_first + QW, ntiles) - 1;
    int b = at.bh / a.H, h = at.bh % a.H;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    int qt = q_first + warp / 4, r0 = (warp % 4) * 16;
    int last = a.causal ? q_last : ntiles - 1; /* the block's last key tile */
    /* the pair (kt, q_first + i)'s tile, where the mask lets it through */
    auto load_pair = [&](W *buf, int kt) {
        load_tile<M, DP, NT>(buf, k, b, h, kt * BR, a);
        for (int i = 0; i < QW && q_first + i <= q_last; i++)
            if (!a.causal || kt <= q_first + i)
                load_ds_tile<M, NT>(buf + TS + i * DS,
                                    ds_tile(ds, a, ntiles, at.bh, q_first + i, kt));
    };
    load_pair(smem, 0);
    cp_async_commit();
    float gq[DP / 8][4];
#pragma unroll
    for (int nb = 0; nb < DP / 8; nb++) gq[nb][0] = gq[nb][1] = gq[nb][2] = gq[nb][3] = 0.0f;
    for (int kt = 0; kt <= last; kt++) {
        W *Ks = smem + (kt & 1) * PS;
        if (kt < last) load_pair(smem + ((kt + 1) & 1) * PS, kt + 1);
        cp_async_commit();
        cp_async_wait<1>(); /* all but the prefetch: this pair has arrived */
        __syncthreads();
        if (qt <= q_last && (!a.causal || kt <= qt))
            M::template accumulate_t<DP>(gq, Ks + TS + (warp / 4) * DS, r0, Ks, lane);
        __syncthreads(); /* every warp is done with this buffer before it is refilled */
    }
    const float sc[2] = {a.scale, a.scale};
    if (qt <= q_last) store_rows<typename M::elem, DP>(dq, b, h, qt * BR, r0, gq, sc, a, g, t);
}

/* The backward in one pass (D <= 64): dK and dV of a key tile as in
 * dkdv_kernel, and with the same dS^T the tile's share of dQ, dS K, so that
 * nothing is recomputed (5 tile products a pair of tiles, not 7). The
 * warps own keys, but dQ sums over keys: dS^T goes through shared memory
 * and each warp then takes 16 query rows, as FlashAttention-2 does.
 *
 * Adding those shares without atomics whose order varies: block (s, b*H+h)
 * walks the key tiles s, 2n-1-s, 2n+s, ... (n = nsplit: a snake, so that
 * under the causal mask every block has the same work) and owns slice s of
 * dq_acc, (nsplit, B, H, T, D) float32. Its first key tile stores a query
 * row's share, later ones add to it with red.global.add: one thread always
 * adds to the same address, in program order, so the sums are the same on
 * every run. dq_sum_kernel then adds the slices in order.
 *
 * Shared memory: [K Q0 dO0 Q1 dO1 dS^T] and the row statistics; V passes
 * through the dS^T tile into registers (each warp needs only its own 16
 * rows of V), so that two blocks fit on an SM. */
template <typename M, bool DROP>
__global__ void __launch_bounds__(THREADS)
    bwd_fused_kernel(float *dq_acc, heads<typename M::elem> dk, heads<typename M::elem> dv,
                     heads<typename M::elem> dout, heads<typename M::elem> q,
                     heads<typename M::elem> k, heads<typename M::elem> v, lse_ref lse,
                     const float *Dv, att_dims a, int nsplit)
{
    awlc_await_previous_kernel();
    typedef typename M::word W;
    const int DP = 64, TS = BR * (DP + M::PAD);
    extern __shared__ __align__(16) unsigned char smem_bytes[];
    W *smem = reinterpret_cast<W *>(smem_bytes);
    W *Ks = smem, *dSs = smem + 5 * TS;
    float *stats = reinterpret_cast<float *>(smem + 6 * TS); /* [ls0 ds0 ls1 ds1] */
    int ntiles = (a.T + BR - 1) / BR, s = blockIdx.x;
    int b = blockIdx.y / a.H, h = blockIdx.y % a.H;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    int r0 = warp * 16;
    float *acc = dq_acc + ((int64_t)s * a.B * a.H + blockIdx.y) * a.T * a.D;
    for (int round = 0;; round++) {
        int kt = round * nsplit + (round % 2 == 0 ? s : nsplit - 1 - s);
        if (kt >= ntiles) break;
        int k0 = kt * BR, first = a.causal ? kt : 0;
        load_tile<M, DP>(Ks, k, b, h, k0, a);
        load_tile<M, DP>(dSs, v, b, h, k0, a);
        load_query_tile<M, DP>(smem + TS, stats, q, dout, lse, Dv, b, h, first * BR, a);
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads();
        uint32_t vf[DP / M::KS][4];
        M::template load_a<DP>(vf, dSs, r0, g, t);
        float gk[DP / 8][4], gv[DP / 8][4];
#pragma unroll
        for (int nb = 0; nb < DP / 8; nb++)
#pragma unroll
            for (int e = 0; e < 4; e++) gk[nb][e] = gv[nb][e] = 0.0f;
        for (int qt = first; qt < ntiles; qt++) {
            int q0 = qt * BR, cur = (qt - first) & 1;
            W *Qs = smem + (1 + 2 * cur) * TS, *dOs = Qs + TS, *next = smem + (3 - 2 * cur) * TS;
            const float *ls = stats + cur * 2 * BR, *ds = ls + BR;
            if (qt + 1 < ntiles)
                load_query_tile<M, DP>(next, stats + (cur ^ 1) * 2 * BR, q, dout, lse, Dv, b, h,
                                       q0 + BR, a);
            cp_async_commit();
            cp_async_wait<1>(); /* all but the prefetch: this tile has arrived */
            __syncthreads();
            float dp[8][4]; /* dS^T */
            {
                uint32_t kf[DP / M::KS][4];
                M::template load_a<DP>(kf, Ks, r0, g, t);
                dkdv_pair<M, DP, DROP>(dp, gk, gv, kf, vf, Qs, dOs, ls, ds, b, h, q0, k0, r0, a,
                                       lane);
            }
#pragma unroll
            for (int nb = 0; nb < 8; nb++)
#pragma unroll
                for (int i = 0; i < 2; i++)
                    M::store_pair(dSs + (r0 + g + 8 * i) * (DP + M::PAD) + nb * 8 + 2 * t,
                                  dp[nb][2 * i], dp[nb][2 * i + 1]);
            __syncthreads(); /* dS^T complete */
            float gq[DP / 8][4];
#pragma unroll
            for (int nb = 0; nb < DP / 8; nb++)
                gq[nb][0] = gq[nb][1] = gq[nb][2] = gq[nb][3] = 0.0f;
            M::template accumulate_t<DP>(gq, dSs, r0, Ks, lane);
#pragma unroll
            for (int i = 0; i < 2; i++) {
                int row = q0 + r0 + g + 8 * i;
                if (row >= a.T) continue;
                float *dst = acc + (int64_t)row * a.D;
#pragma unroll
                for (int nb = 0; nb < DP / 8; nb++)
#pragma unroll
                    for (int j = 0; j < 2; j++) {
                        int c = nb * 8 + 2 * t + j;
                        if (c >= a.D) continue;
                        if (round == 0)
                            dst[c] = gq[nb][2 * i + j];
                        else
                            atomicAdd(dst + c, gq[nb][2 * i + j]); /* the result unused: red */
                    }
            }
            __syncthreads(); /* every warp is done with Q, dO and dS^T before they are refilled */
        }
        const float one[2] = {1.0f, 1.0f}, sc[2] = {a.scale, a.scale};
        store_rows<typename M::elem, DP>(dk, b, h, k0, r0, gk, sc, a, g, t);
        store_rows<typename M::elem, DP>(dv, b, h, k0, r0, gv, one, a, g, t);
    }
}

/* dq = scale * the sum of dq_acc's slices, in slice order; under the causal
 * mask slice s holds rows of query tiles s and later only. A block is
 * SUM_ROWS query rows of one head (blockIdx.y = b H + h), a thread one
 * column (D <= 64): no divisions, which bounded a grid-stride loop of one
 * thread per element. */
const int SUM_ROWS = 4;

template <typename T>
__global__ void dq_sum_kernel(heads<T> dq, const float *dq_acc, int nsplit, att_dims a)
{
    awlc_await_previous_kernel();
    int tq = blockIdx.x * SUM_ROWS + threadIdx.y, d = threadIdx.x, bh = blockIdx.y;
    if (tq >= a.T || d >= a.D) return;
    int64_t n = (int64_t)a.B * a.H * a.T * a.D, i = ((int64_t)bh * a.T + tq) * a.D + d;
    int used = a.causal ? min(nsplit, tq / BR + 1) : nsplit;
    float sum = 0.0f;
    for (int j = 0; j < used; j++) sum += dq_acc[j * n + i];
    const_cast<T *>(row_ptr(dq, bh / a.H, bh % a.H, tq))[d] = awlc_cast<T>(sum * a.scale);
}

template <typename K> int allow(K kernel, size_t bytes)
{
    AWLC_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes),
             "attention shared memory");
    return AWL_OK;
}

/* The grid of n tiles of every head for the kernels that take their tile
 * with block_of (given n); sets a->group. Under the causal mask
 * the blocks go in groups of ATT_GROUP heads, heaviest tiles first: on an
 * H100, gpt2-124m's attention took 3% less time a step than on a (tiles,
 * heads) grid in groups of 24 (12 and 48 alike), and 4-7% more as one
 * group of all 192 heads, whose keys and values (48 MB) no longer stay in
 * L2 between a head's blocks (docs/cuda.md, the ladder). */
static const int ATT_GROUP = 24;

static dim3 tile_grid(int n, att_dims *a)
{
    int bh = a->B * a->H;
    a->group = a->causal && (int64_t)bh * n <= INT32_MAX ? min(ATT_GROUP, bh) : 0;
    return a->group ? dim3((unsigned)((int64_t)bh * n)) : dim3(n, bh);
}

/* Bytes of n tiles of policy M. */
template <typename M, int DP> size_t tiles(int n)
{
    return (size_t)(n * BR * (DP + M::PAD)) * sizeof(typename M::word);
}

template <typename M, int DP, int QW, bool DROP>
int forward_rows(const heads<typename M::elem> &out, const lse_ref &lse,
                 const heads<typename M::elem> &q, const heads<typename M::elem> &k,
                 const heads<typename M::elem> &v, const att_dims &a)
{
    size_t smem = tiles<M, DP>(4);
    AWLC_TRY_STATUS(allow(fwd_kernel<M, DP, QW, DROP>, smem));
    att_dims g = a;
    dim3 grid = tile_grid((a.T + QW * BR - 1) / (QW * BR), &g);
    awlc_launch(fwd_kernel<M, DP, QW, DROP>, grid, THREADS * QW, smem, out, lse, q, k, v, g);
    return awlc_check_launch("attention_forward (tensor cores)");
}

/* 128 query rows a block (8 warps) where that measured faster than 64 (4
 * warps), once there are more than 64: bfloat16 without dropout and
 * float32 (3xTF32) with or without (gpt2-124m forward 6-8% faster); bf16
 * with dropout was 11% slower on 8 warps and TF32 level, so those keep 4
 * (docs/cuda.md, the ladder). */
template <typename M, int DP, bool DROP>
int forward(const heads<typename M::elem> &out, const lse_ref &lse,
            const heads<typename M::elem> &q, const heads<typename M::elem> &k,
            const heads<typename M::elem> &v, const att_dims &a)
{
    constexpr bool wide =
        (std::is_same<M, bf16_mma>::value && !DROP) || std::is_same<M, tf32_mma<3>>::value;
    if constexpr (wide)
        if (a.T > BR) return forward_rows<M, DP, 2, DROP>(out, lse, q, k, v, a);
    return forward_rows<M, DP, 1, DROP>(out, lse, q, k, v, a);
}

#if defined(AWL_CUDA_WGMMA)
/* Whether the bfloat16 kernels that have a wgmma form take it: the device
 * can run them (awlc_wgmma) and the "attention" setting is not "mma". */
static bool wgmma_on(void) { return awlc_wgmma() && !awlc_attention_mma_only(); }

/* The wgmma forward (bfloat16, D <= 64), QW warpgroups a block: 64 rows
 * of Q each, two K/V buffers, and 1 KB to align them on. */
template <int QW, bool DROP>
int forward_wgmma_rows(const heads<awl_bf16> &out, const lse_ref &lse, const heads<awl_bf16> &q,
                       const heads<awl_bf16> &k, const heads<awl_bf16> &v, const att_dims &a)
{
    size_t smem = (size_t)(QW + 4) * BR * 64 * sizeof(uint16_t) + 1024;
    AWLC_TRY_STATUS(allow(fwd_wgmma_kernel<QW, DROP>, smem));
    att_dims g = a;
    dim3 grid = tile_grid((a.T + QW * BR - 1) / (QW * BR), &g);
    awlc_launch(fwd_wgmma_kernel<QW, DROP>, grid, THREADS * QW, smem, out, lse, q, k, v, g);
    return awlc_check_launch("attention_forward (wgmma)");
}

/* Two warpgroups a block once there are more than 64 rows. */
template <bool DROP>
int forward_wgmma(const heads<awl_bf16> &out, const lse_ref &lse, const heads<awl_bf16> &q,
                  const heads<awl_bf16> &k, const heads<awl_bf16> &v, const att_dims &a)
{
    if (a.T > BR) return forward_wgmma_rows<2, DROP>(out, lse, q, k, v, a);
    return forward_wgmma_rows<1, DROP>(out, lse, q, k, v, a);
}
#endif

/* Launches the dK/dV kernel on `grid` (smem: its tiles and statistics),
 * storing dS^T in ds where ds is not NULL: on wgmma for bfloat16 with D
 * <= 64 where the build and the device have it, else on mma.sync. */
template <typename M, int DP, bool DROP>
int launch_dkdv(dim3 grid, size_t smem, const heads<typename M::elem> &dk,
                const heads<typename M::elem> &dv, const heads<typename M::elem> &dout,
                const heads<typename M::elem> &q, const heads<typename M::elem> &k,
                const heads<typename M::elem> &v, const lse_ref &lse, const float *Dv,
                const att_dims &a, typename M::word *ds)
{
#if defined(AWL_CUDA_WGMMA)
    if constexpr (std::is_same<M, bf16_mma>::value && DP == 64)
        if (ds && wgmma_on()) {
            smem += tiles<M, 64>(1) + 1024; /* the dS^T rows on their way out; alignment */
            AWLC_TRY_STATUS(allow(dkdv_wgmma_kernel<DROP>, smem));
            awlc_launch(dkdv_wgmma_kernel<DROP>, grid, THREADS, smem, dk, dv, dout, q, k, v, lse,
                        Dv, a, ds);
            return AWL_OK;
        }
#endif
    if (ds) {
        smem += tiles<M, 64>(1); /* the dS^T rows on their way out */
        AWLC_TRY_STATUS(allow(dkdv_kernel<M, DP, DROP, true>, smem));
        awlc_launch(dkdv_kernel<M, DP, DROP, true>, grid, THREADS, smem, dk, dv, dout, q, k, v, lse,
                    Dv, a, ds);
        return AWL_OK;
    }
    AWLC_TRY_STATUS(allow(dkdv_kernel<M, DP, DROP>, smem));
    awlc_launch(dkdv_kernel<M, DP, DROP>, grid, THREADS, smem, dk, dv, dout, q, k, v, lse, Dv, a,
                nullptr);
    return AWL_OK;
}

/* The backward in two kernels: dkdv_kernel, then dQ. With `ds` (scratch of
 * stored_ds_bytes) the dK/dV kernel stores its dS^T tiles there and
 * dq_stored_kernel reads them back: 5 tile products a pair of tiles, for a
 * round trip of dS^T through memory (bf16: half of B H T^2 x 2 bytes under
 * the causal mask, 214 MB a gpt2-124m layer). With ds NULL, dq_kernel
 * recomputes S, P and dP instead (7 tile products). */
template <typename M, int DP, bool DROP>
int backward(const heads<typename M::elem> &dq, const heads<typename M::elem> &dk,
             const heads<typename M::elem> &dv, const heads<typename M::elem> &dout,
             const heads<typename M::elem> &q, const heads<typename M::elem> &k,
             const heads<typename M::elem> &v, const lse_ref &lse, const float *Dv,
             const att_dims &a0, typename M::word *ds)
{
    att_dims a = a0;
    dim3 grid = tile_grid((a.T + BR - 1) / BR, &a);
    size_t s1 = tiles<M, DP>(6) + 4 * BR * sizeof(float);
    AWLC_TRY_STATUS((launch_dkdv<M, DP, DROP>(grid, s1, dk, dv, dout, q, k, v, lse, Dv, a, ds)));
    AWLC_TRY_STATUS(awlc_check_launch("attention_backward dk dv (tensor cores)"));
    if (ds) {
        const int QW = dq_groups<M, DP>();
        att_dims a2 = a0;
        dim3 grid2 = tile_grid(((a.T + BR - 1) / BR + QW - 1) / QW, &a2);
        size_t s2 = tiles<M, DP>(2) + tiles<M, 64>(2 * QW);
        AWLC_TRY_STATUS(allow(dq_stored_kernel<M, DP, QW>, s2));
        awlc_launch(dq_stored_kernel<M, DP, QW>, grid2, THREADS * QW, s2, dq, k, ds, a2);
        return awlc_check_launch("attention_backward dq from stored dS (tensor cores)");
    }
    size_t s2 = tiles<M, DP>(6);
    AWLC_TRY_STATUS(allow(dq_kernel<M, DP, DROP>, s2));
    awlc_launch(dq_kernel<M, DP, DROP>, grid, THREADS, s2, dq, dout, q, k, v, lse, Dv, a);
    return awlc_check_launch("attention_backward dq (tensor cores)");
}

/* The most scratch the stored-dS backward takes; beyond it (long
 * sequences: the tiles grow as T^2), or when the allocation fails, the
 * backward takes one of the other two ways (awlc_attention_mma_backward). */
const size_t STORED_DS_MAX = (size_t)1 << 30;

template <typename M> size_t stored_ds_bytes(const att_dims &a)
{
    int ntiles = (a.T + BR - 1) / BR;
    return (size_t)a.B * a.H * (size_t)ds_pairs(a, ntiles) * BR * BR * sizeof(typename M::word);
}

/* How many slices the one-pass backward uses. Its blocks all do about the
 * same work (the snake), so they run in waves of `slots` (the blocks that
 * fit on the GPU at once), and a last wave that is mostly empty wastes the
 * rest: gpt2-124m's 12 x 16 heads in 3 slices make 2.2 waves of 264 blocks
 * on an H200, run as 3 (73% busy), in 4 slices 2.9 (97%). So the fewest
 * slices (the least scratch) that keep the waves 90% full, else the
 * fullest; at most one slice per key tile, and at most MAX_SLICES (a single
 * head of 16K tokens would otherwise take 238 slices, a gigabyte). */
const int MAX_SLICES = 8;

int fused_slices(int bh, int ntiles, int slots)
{
    int best = 1;
    double best_fill = 0.0;
    for (int n = 1; n <= ntiles && n <= MAX_SLICES; n++) {
        int64_t blocks = (int64_t)bh * n, waves = (blocks + slots - 1) / slots;
        double fill = (double)blocks / (double)(waves * slots);
        if (fill >= 0.9) return n;
        if (fill > best_fill + 1e-9) best = n, best_fill = fill;
    }
    return best;
}

/* The one-pass backward: bwd_fused_kernel on fused_slices slices, then
 * their sum; the slices take that many times dq's size in float32 scratch. */
template <typename M, bool DROP>
int backward_fused(const heads<typename M::elem> &dq, const heads<typename M::elem> &dk,
                   const heads<typename M::elem> &dv, const heads<typename M::elem> &dout,
                   const heads<typename M::elem> &q, const heads<typename M::elem> &k,
                   const heads<typename M::elem> &v, const lse_ref &lse, const float *Dv,
                   const att_dims &a)
{
    size_t smem = tiles<M, 64>(6) + 4 * BR * sizeof(float);
    AWLC_TRY_STATUS(allow(bwd_fused_kernel<M, DROP>, smem));
    static int per_sm = 0; /* blocks per SM: the same on every call */
    if (per_sm == 0)
        AWLC_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, bwd_fused_kernel<M, DROP>,
                                                               THREADS, smem),
                 "attention_backward occupancy");
    int ntiles = (a.T + BR - 1) / BR, bh = a.B * a.H;
    int nsplit = fused_slices(bh, ntiles, (per_sm > 0 ? per_sm : 1) * awlc_sm_count());
    size_t n = (size_t)bh * a.T * a.D, bytes = (size_t)nsplit * n * sizeof(float);
    float *acc = (float *)awlc_scratch_alloc(bytes);
    if (!acc) return AWL_ERR_OOM;
    awlc_launch(bwd_fused_kernel<M, DROP>, dim3(nsplit, bh), THREADS, smem, acc, dk, dv, dout, q, k,
                v, lse, Dv, a, nsplit);
    int st = awlc_check_launch("attention_backward (tensor cores, one pass)");
    if (st == AWL_OK) {
        awlc_launch(dq_sum_kernel<typename M::elem>, dim3((a.T + SUM_ROWS - 1) / SUM_ROWS, bh),
                    dim3(64, SUM_ROWS), 0, dq, acc, nsplit, a);
        st = awlc_check_launch("attention_backward dq sum");
    }
    awlc_scratch_free(acc, bytes);
    return st;
}

/* D padded to 64 or 128; dropout compiled in or out (a kernel with the
 * branch in it would keep more registers live without dropout too). */
template <typename M>
int forward_d(const heads<typename M::elem> &out, const lse_ref &lse,
              const heads<typename M::elem> &q, const heads<typename M::elem> &k,
              const heads<typename M::elem> &v, const att_dims &a)
{
    if (a.D > 128) return AWL_ERR_UNSUPPORTED;
    if (a.dropout)
        return a.D <= 64 ? forward<M, 64, true>(out, lse, q, k, v, a)
                         : forward<M, 128, true>(out, lse, q, k, v, a);
    return a.D <= 64 ? forward<M, 64, false>(out, lse, q, k, v, a)
                     : forward<M, 128, false>(out, lse, q, k, v, a);
}

/* The two-kernel backward (dS stored in `ds`, or recomputed when NULL). */
template <typename M>
int backward_d(const heads<typename M::elem> &dq, const heads<typename M::elem> &dk,
               const heads<typename M::elem> &dv, const heads<typename M::elem> &dout,
               const heads<typename M::elem> &q, const heads<typename M::elem> &k,
               const heads<typename M::elem> &v, const lse_ref &lse, const float *Dv,
               const att_dims &a, typename M::word *ds = nullptr)
{
    if (a.D > 128) return AWL_ERR_UNSUPPORTED;
    if (a.dropout)
        return a.D <= 64 ? backward<M, 64, true>(dq, dk, dv, dout, q, k, v, lse, Dv, a, ds)
                         : backward<M, 128, true>(dq, dk, dv, dout, q, k, v, lse, Dv, a, ds);
    return a.D <= 64 ? backward<M, 64, false>(dq, dk, dv, dout, q, k, v, lse, Dv, a, ds)
                     : backward<M, 128, false>(dq, dk, dv, dout, q, k, v, lse, Dv, a, ds);
}

/* The stored-dS backward's scratch for policy M, or nullptr where it would
 * take more than STORED_DS_MAX or cannot be had (the caller then
 * recomputes instead; the failed allocation's error is cleared). */
template <typename M> typename M::word *stored_ds_scratch(const att_dims &a, size_t *bytes)
{
    *bytes = stored_ds_bytes<M>(a);
    if (a.D > 128 || *bytes > STORED_DS_MAX) return nullptr;
    void *p = awlc_scratch_alloc(*bytes);
    if (!p) awl_clear_error();
    return (typename M::word *)p;
}

/* The stored-dS backward of policy M where its scratch can be had (returns
 * true and sets *st); false otherwise. */
template <typename M>
bool backward_stored_m(int *st, const heads<typename M::elem> &dq,
                       const heads<typename M::elem> &dk, const heads<typename M::elem> &dv,
                       const heads<typename M::elem> &dout, const heads<typename M::elem> &q,
                       const heads<typename M::elem> &k, const heads<typename M::elem> &v,
                       const lse_ref &lse, const float *Dv, const att_dims &a)
{
    size_t bytes = 0;
    typename M::word *ds = stored_ds_scratch<M>(a, &bytes);
    if (!ds) return false;
    *st = backward_d<M>(dq, dk, dv, dout, q, k, v, lse, Dv, a, ds);
    awlc_scratch_free(ds, bytes);
    return true;
}

/* The one-pass backward of policy M, dropout compiled in or out. */
template <typename M>
int backward_fused_m(const heads<typename M::elem> &dq, const heads<typename M::elem> &dk,
                     const heads<typename M::elem> &dv, const heads<typename M::elem> &dout,
                     const heads<typename M::elem> &q, const heads<typename M::elem> &k,
                     const heads<typename M::elem> &v, const lse_ref &lse, const float *Dv,
                     const att_dims &a)
{
    return a.dropout ? backward_fused<M, true>(dq, dk, dv, dout, q, k, v, lse, Dv, a)
                     : backward_fused<M, false>(dq, dk, dv, dout, q, k, v, lse, Dv, a);
}

} // namespace

int awlc_attention_mma_forward(const heads<awl_bf16> &out, const lse_ref &lse,
                               const heads<awl_bf16> &q, const heads<awl_bf16> &k,
                               const heads<awl_bf16> &v, const att_dims &a)
{
#if defined(AWL_CUDA_WGMMA)
    /* on Hopper, unless the "attention" setting asks for mma.sync ("mma") */
    if (a.D <= 64 && wgmma_on())
        return a.dropout ? forward_wgmma<true>(out, lse, q, k, v, a)
                         : forward_wgmma<false>(out, lse, q, k, v, a);
#endif
    return forward_d<bf16_mma>(out, lse, q, k, v, a);
}

int awlc_attention_mma_backward(const heads<awl_bf16> &dq, const heads<awl_bf16> &dk,
                                const heads<awl_bf16> &dv, const heads<awl_bf16> &dout,
                                const heads<awl_bf16> &q, const heads<awl_bf16> &k,
                                const heads<awl_bf16> &v, const lse_ref &lse, const float *Dv,
                                const att_dims &a)
{
    /* By default dS stored by the first kernel for the second, which is
     * faster than every other rung, with dropout or without (docs/cuda.md);
     * where its scratch is too large, one pass with dropout (drawing the
     * mask once instead of twice pays for the slices), and without it the
     * two kernels, which are as fast or faster. */
    bool split = awlc_attention_split(), one_pass = awlc_attention_one_pass();
    int st = AWL_OK;
    if (!split && !one_pass &&
        backward_stored_m<bf16_mma>(&st, dq, dk, dv, dout, q, k, v, lse, Dv, a))
        return st;
    if (a.D <= 64 && !split && (a.dropout || one_pass))
        return backward_fused_m<bf16_mma>(dq, dk, dv, dout, q, k, v, lse, Dv, a);
    return backward_d<bf16_mma>(dq, dk, dv, dout, q, k, v, lse, Dv, a);
}

int awlc_attention_mma_forward(const heads<float> &out, const lse_ref &lse, const heads<float> &q,
                               const heads<float> &k, const heads<float> &v, const att_dims &a)
{
    return awlc_matmul_fast_fp32() ? forward_d<tf32_mma<1>>(out, lse, q, k, v, a)
                                   : forward_d<tf32_mma<3>>(out, lse, q, k, v, a);
}

int awlc_attention_mma_backward(const heads<float> &dq, const heads<float> &dk,
                                const heads<float> &dv, const heads<float> &dout,
                                const heads<float> &q, const heads<float> &k, const heads<float> &v,
                                const lse_ref &lse, const float *Dv, const att_dims &a)
{
    bool fast = awlc_matmul_fast_fp32(), split = awlc_attention_split();
    int st = AWL_OK;
    if (!split && !awlc_attention_one_pass() &&
        (fast ? backward_stored_m<tf32_mma<1>>(&st, dq, dk, dv, dout, q, k, v, lse, Dv, a)
              : backward_stored_m<tf32_mma<3>>(&st, dq, dk, dv, dout, q, k, v, lse, Dv, a)))
        return st;
    if (a.D <= 64 && !split) {
        return fast ? backward_fused_m<tf32_mma<1>>(dq, dk, dv, dout, q, k, v, lse, Dv, a)
                    : backward_fused_m<tf32_mma<3>>(dq, dk, dv, dout, q, k, v, lse, Dv, a);
    }
    return fast ? backward_d<tf32_mma<1>>(dq, dk, dv, dout, q, k, v, lse, Dv, a)
                : backward_d<tf32_mma<3>>(dq, dk, dv, dout, q, k, v, lse, Dv, a);
}
