/*
 * backends/cuda/cuda_gemm_tf32x3.cu - float32 matrix products on tensor
 * cores, at float32's accuracy.
 *
 * cuBLAS's float32 product on the H200 is sgemm on the CUDA cores (about 50
 * TFLOP/s), and its TF32 kernels keep only 10 bits of each input and sum
 * with less than float32's precision (docs/performance.md, "What cuBLAS
 * offers a float32 product"). This kernel splits each input x into two
 * TF32 values, big = tf32(x) (rounded) and small = x - big (which the
 * tensor core reads to its top 11 bits), and takes
 *
 *     x y ~ small_x big_y + big_x small_y + big_x big_y
 *
 * with three mma.sync.m16n8k8 (TF32 inputs, float32 accumulators) per
 * product (Ootomo and Yokota, 2022; the attention kernels' "3xTF32"): about
 * 21 of the 24 bits of each input take part, and the term left out,
 * small_x small_y, is at most 2^-22 of the product. The tensor cores'
 * sums are the other half of accuracy: see gemm_kernel.
 *
 * The blocking is the classic one for mma.sync GEMMs:
 *
 *   block    128 x 128 outputs, 8 warps (2 along M x 4 along N), each warp
 *            64 x 32 outputs: 4 x 4 tiles of 16 x 8, 64 float32 sums a
 *            lane, held in registers for the whole walk along K;
 *   K walk   32 at a time; each operand's 128 x 32 tile brought into shared
 *            memory by cp.async, three stages deep, so the loads of the
 *            next two tiles run while the warps multiply this one;
 *   tiles    kept in the orientation they have in global memory (so that
 *            every copy is whole 16-byte chunks): K-major rows padded by 8
 *            floats (a lane's two k of a step are neighbours, one 8-byte
 *            load; banks 8g + 2t), M- or N-major rows padded by 4 (banks
 *            8t + g): no bank conflicts;
 *   splits   each fragment is split into big and small as it is loaded
 *            from shared memory (two integer instructions and a subtraction
 *            an element);
 *   sums     each 32-long chunk of K summed by the tensor cores from zero,
 *            then added to the running sum in float32 (gemm_kernel says
 *            why).
 *
 * Infinities: an infinite input's small part is inf - inf, so a product
 * that sgemm makes infinite comes out NaN here (a non-finite result stays
 * non-finite, which is what the trainer's checks look for).
 *
 * When the output has too few 128 x 128 blocks to fill the GPU (a weight
 * gradient: 768 x 3072 outputs summed over 16,384 tokens), K is cut into
 * slices whose partial products go to a workspace, and a second kernel adds
 * them in slice order: every result is the same bits on every run.
 */
#include <atomic>

#include "backends/cuda/cuda_gemm_tf32x3.cuh"
#include "backends/cuda/cuda_mma.cuh"

namespace
{

const int BM = 128, BK = 32, THREADS = 256, STAGES = 3;
const int LD_K = BK + 8;    /* a K-major tile row: 32 floats and 8 of padding */
const int LD_MN = BM + 4;   /* an M- (N-) major tile row: 128 floats and 4 */
const int TILE = BM * LD_K; /* floats an operand tile takes (the larger layout) */
const int SMEM_BYTES = STAGES * 2 * TILE * (int)sizeof(float);
static_assert(BK * LD_MN <= TILE, "both layouts fit a tile");

/* Starts copying the tile i0..i0+127, k0..k0+31 of an operand whose element
 * (i, k) is p[i * s + k] (KMAJOR) or p[k * s + i], 16 bytes a cp.async. */
template <bool KMAJOR>
__device__ __forceinline__ void load_tile(float *tile, const float *p, int64_t s, int64_t i0,
                                          int64_t k0, int tid)
{
#pragma unroll
    for (int j = 0; j < BM * BK / 4 / THREADS; j++) {
        int c = tid + j * THREADS;
        if (KMAJOR) {
            int i = c / (BK / 4), k = c % (BK / 4) * 4;
            cp_async16(tile + i * LD_K + k, p + (i0 + i) * s + k0 + k);
        } else {
            int k = c / (BM / 4), i = c % (BM / 4) * 4;
            cp_async16(tile + k * LD_MN + i, p + (k0 + k) * s + i0 + i);
        }
    }
}

/* c = a b (C = 0 going in): the first product of a chunk's chain. */
__device__ __forceinline__ void mma1688_first(float c[4], const uint32_t a[4], uint32_t b0,
                                              uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
        : "=f"(c[0]), "=f"(c[1]), "=f"(c[2]), "=f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.0f));
}

/* The two TF32 halves of a float32 input: big = tf32(x) (rounded), small =
 * x - big (exact in float32; the tensor core reads its top 10 fraction bits,
 * so the part of x both leave out is below 2^-21 of x). The attention's
 * tf32_split also rounds small, two instructions more an element: here that
 * gave the same largest errors on all five of bench_cublas's products, ran
 * level on two and 3-11% slower on three (the MLP's dx 1.49 against 1.34
 * ms; two rounds alternated in one call). */
template <int P> struct split {
    uint32_t big, small;
    __device__ __forceinline__ explicit split(float x)
    {
        big = to_tf32(x);
        small = P == 3 ? __float_as_uint(x - __uint_as_float(big)) : 0u;
    }
};

/* Element (i, k) of an operand tile in shared memory, i along M (x) or N (y),
 * k along the tile's 32. */
template <bool KMAJOR> __device__ __forceinline__ int at(int i, int k)
{
    return KMAJOR ? i * LD_K + k : k * LD_MN + i;
}

/* Fragment elements k = t and k = t + 4 of step s (of 8 k), row (column) i
 * of a tile, taken from the step's places 2t and 2t + 1: neighbours, so a
 * K-major tile gives both in one 8-byte load. The sum over k does not care
 * in which order the k come, as long as x and y agree, and both are read
 * this way. */
template <bool KMAJOR, int P>
__device__ __forceinline__ void load_pair(const float *tile, int i, int s, int t, split<P> &lo,
                                          split<P> &hi)
{
    if (KMAJOR) {
        float2 v = *reinterpret_cast<const float2 *>(tile + at<true>(i, s * 8 + 2 * t));
        lo = split<P>(v.x), hi = split<P>(v.y);
    } else {
        lo = split<P>(tile[at<false>(i, s * 8 + 2 * t)]);
        hi = split<P>(tile[at<false>(i, s * 8 + 2 * t + 1)]);
    }
}

/* One block: outputs (blockIdx.y, blockIdx.x) of 128 x 128, summed over the
 * K slice blockIdx.z (k_slice long; the last may be shorter). XK: x is
 * K-major (xs_k == 1); YK: y is (ys_k == 1). With one slice the block
 * writes out (adding out and bias as asked); with several, its slice's
 * partial sums to ws.
 *
 * The tensor cores add a product into its accumulator with less than
 * float32's precision: summed straight along K, products exact in float32
 * came out with 3 to 46 times sgemm's error, the larger the longer K
 * (bench/bench_cublas.cu's "bigs_tf32" lines; this kernel's own first
 * build did the same). So each tile of 32 k is summed by the tensor cores
 * from zero, and that chunk is added to the running sum by an ordinary
 * float32 addition. */
template <bool XK, bool YK, int P>
__global__ void __launch_bounds__(THREADS, 1)
    gemm_kernel(awlc_tf32x3_args a, int64_t k_slice, float *ws)
{
    extern __shared__ float4 smem4[];
    float *smem = reinterpret_cast<float *>(smem4);
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, t = lane % 4;
    const int wm = warp / 4 * 64, wn = warp % 4 * 32;
    const int64_t m0 = (int64_t)blockIdx.y * BM, n0 = (int64_t)blockIdx.x * BM;
    const int64_t kbeg = (int64_t)blockIdx.z * k_slice;
    const int64_t klen = a.K - kbeg < k_slice ? a.K - kbeg : k_slice;
    const int ktiles = (int)(klen / BK);
    const int64_t xs = XK ? a.xs_m : a.xs_k, ys = YK ? a.ys_n : a.ys_k;

    float acc[4][4][4];
#pragma unroll
    for (int mt = 0; mt < 4; mt++)
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[mt][nt][e] = 0.0f;

    auto load = [&](int kt) {
        float *xt = smem + kt % STAGES * 2 * TILE;
        int64_t k0 = kbeg + (int64_t)kt * BK;
        load_tile<XK>(xt, a.x, xs, m0, k0, tid);
        load_tile<YK>(xt + TILE, a.y, ys, n0, k0, tid);
    };
    for (int kt = 0; kt < STAGES - 1; kt++) {
        if (kt < ktiles) load(kt);
        cp_async_commit();
    }
    for (int kt = 0; kt < ktiles; kt++) {
        cp_async_wait<STAGES - 2>(); /* this thread's copies of tile kt have landed */
        __syncthreads();             /* everyone's have; and tile kt-1 is no longer read */
        if (kt + STAGES - 1 < ktiles) load(kt + STAGES - 1);
        cp_async_commit();
        const float *xt = smem + kt % STAGES * 2 * TILE, *yt = xt + TILE;
        /* y's fragments for the whole tile: 4 steps of 8 k, 4 columns of 8 */
        uint32_t bb[BK / 8][4][2], bs[BK / 8][4][2];
#pragma unroll
        for (int s = 0; s < BK / 8; s++)
#pragma unroll
            for (int nt = 0; nt < 4; nt++) {
                split<P> lo(0.0f), hi(0.0f);
                load_pair<YK, P>(yt, wn + nt * 8 + g, s, t, lo, hi);
                bb[s][nt][0] = lo.big, bb[s][nt][1] = hi.big;
                bs[s][nt][0] = lo.small, bs[s][nt][1] = hi.small;
            }
#pragma unroll
        for (int mt = 0; mt < 4; mt++) {
            const int r = wm + mt * 16 + g;
            float chunk[4][4];
#pragma unroll
            for (int s = 0; s < BK / 8; s++) {
                split<P> x0(0.0f), x2(0.0f), x1(0.0f), x3(0.0f);
                load_pair<XK, P>(xt, r, s, t, x0, x2);
                load_pair<XK, P>(xt, r + 8, s, t, x1, x3);
                const uint32_t ab[4] = {x0.big, x1.big, x2.big, x3.big};
                const uint32_t as[4] = {x0.small, x1.small, x2.small, x3.small};
#pragma unroll
                for (int nt = 0; nt < 4; nt++) {
                    if (s == 0)
                        mma1688_first(chunk[nt], ab, bb[s][nt][0], bb[s][nt][1]);
                    else
                        mma1688(chunk[nt], ab, bb[s][nt][0], bb[s][nt][1]);
                    if (P == 3) {
                        mma1688(chunk[nt], as, bb[s][nt][0], bb[s][nt][1]);
                        mma1688(chunk[nt], ab, bs[s][nt][0], bs[s][nt][1]);
                    }
                }
            }
#pragma unroll
            for (int nt = 0; nt < 4; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[mt][nt][e] += chunk[nt][e];
        }
    }
    cp_async_wait<0>();

    /* a lane's sums: rows g and g + 8 of each 16 x 8 tile, columns 2t, 2t + 1 */
    const bool sliced = gridDim.z > 1;
#pragma unroll
    for (int mt = 0; mt < 4; mt++)
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                int64_t r = m0 + wm + mt * 16 + g + 8 * h, c = n0 + wn + nt * 8 + 2 * t;
                float2 v = make_float2(acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1]);
                if (sliced) {
                    *reinterpret_cast<float2 *>(ws + (blockIdx.z * a.M + r) * a.N + c) = v;
                    continue;
                }
                float2 *o = reinterpret_cast<float2 *>(a.out + r * a.ldo + c);
                if (a.accumulate) {
                    float2 old = *o;
                    v.x += old.x, v.y += old.y;
                }
                if (a.bias) v.x += a.bias[c], v.y += a.bias[c + 1];
                *o = v;
            }
}

/* out = sum of the slices' partial products in slice order [+ out] [+ bias],
 * four columns a thread. */
__global__ void add_slices(awlc_tf32x3_args a, const float *ws, int splits)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, quads = a.M * a.N / 4;
    if (i >= quads) return;
    int64_t r = i / (a.N / 4), c = i % (a.N / 4) * 4;
    float4 s = *reinterpret_cast<const float4 *>(ws + r * a.N + c);
    for (int z = 1; z < splits; z++) {
        float4 p = *reinterpret_cast<const float4 *>(ws + (z * a.M + r) * a.N + c);
        s.x += p.x, s.y += p.y, s.z += p.z, s.w += p.w;
    }
    float4 *o = reinterpret_cast<float4 *>(a.out + r * a.ldo + c);
    if (a.accumulate) {
        float4 old = *o;
        s.x += old.x, s.y += old.y, s.z += old.z, s.w += old.w;
    }
    if (a.bias) s.x += a.bias[c], s.y += a.bias[c + 1], s.z += a.bias[c + 2], s.w += a.bias[c + 3];
    *o = s;
}

template <bool XK, bool YK, int P>
cudaError_t launch(const awlc_tf32x3_args *a, int splits, float *ws, cudaStream_t stream)
{
    /* the kernel's shared memory is over the default 48 KB: allowed once
     * per device (a bit per device; two threads may both set it) */
    static std::atomic<uint64_t> sized{0};
    int device = 0;
    cudaError_t e = cudaGetDevice(&device);
    if (e != cudaSuccess) return e;
    const uint64_t bit = 1ull << (device & 63);
    if (!(sized.load() & bit)) {
        e = cudaFuncSetAttribute(gemm_kernel<XK, YK, P>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES);
        if (e != cudaSuccess) return e;
        sized.fetch_or(bit);
    }
    int64_t ktiles = a->K / BK, per = (ktiles + splits - 1) / splits;
    dim3 grid((unsigned)(a->N / BM), (unsigned)(a->M / BM), (unsigned)splits);
    gemm_kernel<XK, YK, P><<<grid, THREADS, SMEM_BYTES, stream>>>(*a, per * BK, ws);
    if (splits > 1) {
        int64_t quads = a->M * a->N / 4;
        add_slices<<<(unsigned)((quads + 255) / 256), 256, 0, stream>>>(*a, ws, splits);
    }
    return cudaGetLastError();
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

} // namespace

bool awlc_tf32x3_takes(const awlc_tf32x3_args *a)
{
    bool x_ok = (a->xs_k == 1 && a->xs_m % 4 == 0) || (a->xs_m == 1 && a->xs_k % 4 == 0);
    bool y_ok = (a->ys_k == 1 && a->ys_n % 4 == 0) || (a->ys_n == 1 && a->ys_k % 4 == 0);
    return a->M > 0 && a->N > 0 && a->K > 0 && a->M % BM == 0 && a->N % BM == 0 && a->K % BK == 0 &&
           a->M / BM <= 65535 && x_ok && y_ok && a->ldo % 4 == 0 && a->ldo >= a->N &&
           aligned16(a->x) && aligned16(a->y) && aligned16(a->out) &&
           (!a->bias || aligned16(a->bias)) && (a->passes == 1 || a->passes == 3);
}

int awlc_tf32x3_splits(const awlc_tf32x3_args *a, int sms)
{
    /* One block runs on an SM at a time (its registers). An output of two
     * waves of blocks or more is not cut; a smaller one is cut into slices
     * until there are eight waves, each slice at least 512 long (so that
     * the walk outlasts the pipeline's fill), at most 16 slices. A
     * gpt2-124m weight gradient (768 x 3072 over 16,384 tokens, 144 blocks)
     * in 1, 2, 4 and 8 slices: 2.33, 1.76, 1.47 and 1.34 ms (bench_cublas's
     * "try_splits" lines; cuBLAS's sgemm 1.50). */
    int64_t blocks = (a->M / BM) * (a->N / BM), want = 8 * (int64_t)sms;
    int splits = 1;
    if (blocks >= 2 * (int64_t)sms) return 1;
    while (blocks * splits < want && a->K / (splits + 1) >= 512 && splits < 16) splits++;
    return splits;
}

size_t awlc_tf32x3_workspace_bytes(const awlc_tf32x3_args *a, int splits)
{
    return splits > 1 ? (size_t)splits * (size_t)(a->M * a->N) * sizeof(float) : 0;
}

cudaError_t awlc_tf32x3_gemm(const awlc_tf32x3_args *a, int splits, float *workspace,
                             cudaStream_t stream)
{
    bool xk = a->xs_k == 1, yk = a->ys_k == 1;
    if (a->passes == 1) {
        if (xk)
            return yk ? launch<true, true, 1>(a, splits, workspace, stream)
                      : launch<true, false, 1>(a, splits, workspace, stream);
        return yk ? launch<false, true, 1>(a, splits, workspace, stream)
                  : launch<false, false, 1>(a, splits, workspace, stream);
    }
    if (xk)
        return yk ? launch<true, true, 3>(a, splits, workspace, stream)
                  : launch<true, false, 3>(a, splits, workspace, stream);
    return yk ? launch<false, true, 3>(a, splits, workspace, stream)
              : launch<false, false, 3>(a, splits, workspace, stream);
}
