/*
 * backends/cuda/cuda_reduce.cu - sum, mean, max and min along axes.
 *
 * The host first splits the input's axes into kept ones (the output's) and
 * reduced ones, and coalesces each group (cuda_common.cuh's idea), so any
 * reduction becomes "K outputs, each over R inputs". Then one of three
 * kernels runs:
 *
 *   - lines: the reduced axes collapse to one axis of stride sr (sr == 1 is
 *     the row, last-axis, case: a warp per row up to 4096 elements, 16-byte
 *     loads and shuffles only; a block per row beyond);
 *   - columns: the reduced axes collapse to one axis and the innermost kept
 *     axis has stride 1 (summing a (rows, C) matrix over rows): 32 adjacent
 *     outputs per block so that each warp reads 128 contiguous bytes of a row,
 *     8 row-groups per block combined through shared memory;
 *   - general: one thread per output walks every reduced element.
 *
 * When there are too few outputs to fill the chip (a full sum, a bias
 * gradient of 768 columns over 65536 rows), lines and columns split the
 * reduced range into chunks: the first launch writes partial results
 * (accumulator type) to scratch memory, a second launch reduces each output's
 * partials in chunk order.
 *
 * Everything is deterministic: each output is combined in an order fixed by
 * the shapes alone (no atomics). bfloat16 accumulates in float; float32,
 * float64 and int32 in double, like the CPU backend (a memory-bound kernel
 * pays nothing for Hopper's double-precision adds); MEAN divides once, at
 * the end.
 */
#include <algorithm>

#include "backends/cuda/cuda_common.cuh"

namespace
{

const int SPLIT_LINE = 4096; /* elements one block reduces before splitting pays */
const int SPLIT_COL = 256;   /* rows one column block reduces before splitting pays */

template <typename T> struct reduce_acc {
    typedef double type;
};
template <> struct reduce_acc<awl_bf16> {
    typedef float type;
};

/* Kept axes: shape, stride in the input, stride in the output. */
struct kept_map {
    int ndim;
    int64_t shape[AWL_MAX_DIMS];
    int64_t in[AWL_MAX_DIMS];
    int64_t out[AWL_MAX_DIMS];
};

struct reduced_map {
    int ndim;
    int64_t shape[AWL_MAX_DIMS];
    int64_t in[AWL_MAX_DIMS];
};

__device__ __forceinline__ void kept_offsets(const kept_map &m, int64_t k, int64_t *in_off,
                                             int64_t *out_off)
{
    int64_t a = 0, b = 0;
    for (int d = m.ndim - 1; d >= 0; d--) {
        int64_t c = k % m.shape[d];
        k /= m.shape[d];
        a += c * m.in[d];
        b += c * m.out[d];
    }
    *in_off = a;
    *out_off = b;
}

/* One combining step and the identity of each reduction (backends/ops.h),
 * in the accumulator type A. */
template <typename A> __device__ __forceinline__ A combine(int op, A acc, A x)
{
    switch (op) {
#define REDUCE_COMBINE(OP, name, dtypes, identity, combine, mean)                                  \
    case AWL_REDUCE_##OP: return combine;
        AWL_REDUCE_OPS(REDUCE_COMBINE)
#undef REDUCE_COMBINE
    default: return acc;
    }
}

template <typename A> __host__ __device__ __forceinline__ A identity(int op)
{
    return (A)awl_reduce_identity((awl_reduce_op)op);
}

template <typename A> __device__ A block_combine(int op, A v, A *scratch)
{
    int lane = threadIdx.x % AWLC_WARP, warp = threadIdx.x / AWLC_WARP;
#pragma unroll
    for (int o = AWLC_WARP / 2; o > 0; o >>= 1)
        v = combine(op, v, __shfl_xor_sync(0xffffffffu, v, o));
    if (blockDim.x == AWLC_WARP) return v;
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < (int)(blockDim.x / AWLC_WARP) ? scratch[lane] : identity<A>(op);
#pragma unroll
        for (int o = AWLC_WARP / 2; o > 0; o >>= 1)
            v = combine(op, v, __shfl_xor_sync(0xffffffffu, v, o));
    }
    return v;
}

/* Where a result goes: a partial slot (accumulator type, contiguous K x
 * nsplit) or its output element, finished. */
template <typename A, typename TO> struct sink {
    TO *out;    /* final output, or NULL */
    A *partial; /* partials, or NULL */
    int op;
    double count; /* MEAN's divisor */
    __device__ void put(int64_t slot, int64_t out_off, A acc) const
    {
        if (partial) {
            partial[slot] = acc;
            return;
        }
        if (awl_reduce_is_mean((awl_reduce_op)op)) acc = (A)((double)acc / count);
        out[out_off] = awlc_cast<TO>(acc);
    }
};

/* One block per (output k, chunk s): reduces in[k's base + r * sr] for r in
 * the chunk. */
template <typename T, typename A, typename TO>
__global__ void lines_kernel(const T *in, kept_map km, int64_t K, int64_t R, int64_t sr, int nsplit,
                             int64_t chunk, sink<A, TO> dst)
{
    awlc_await_previous_kernel();
    __shared__ A scratch[AWLC_WARP];
    for (int64_t line = blockIdx.x; line < K * nsplit; line += gridDim.x) {
        int64_t k = line / nsplit, s = line % nsplit;
        int64_t in_off, out_off;
        kept_offsets(km, k, &in_off, &out_off);
        int64_t r0 = s * chunk, r1 = min(R, r0 + chunk);
        A acc = identity<A>(dst.op);
        for (int64_t r = r0 + threadIdx.x; r < r1; r += blockDim.x)
            acc = combine(dst.op, acc, awlc_cast<A>(in[in_off + r * sr]));
        acc = block_combine(dst.op, acc, scratch);
        if (threadIdx.x == 0) dst.put(line, out_off, acc);
        __syncthreads(); /* scratch is reused by the next line */
    }
}

/* Unit-stride lines of at most LINE_WARP elements: one warp per line (8 per
 * block), 16-byte loads, shuffles only. Short rows (a (B*T, C) -> (B*T, 1)
 * mean) would leave most threads of a block-per-line idle behind barriers. */
const int LINE_WARP = 4096;

template <typename T, typename A, typename TO>
__global__ void warp_lines_kernel(const T *in, kept_map km, int64_t K, int64_t R, int nsplit,
                                  int64_t chunk, sink<A, TO> dst)
{
    awlc_await_previous_kernel();
    int lane = threadIdx.x % AWLC_WARP, nw = blockDim.x / AWLC_WARP;
    for (int64_t line = (int64_t)blockIdx.x * nw + threadIdx.x / AWLC_WARP; line < K * nsplit;
         line += (int64_t)gridDim.x * nw) {
        int64_t k = line / nsplit, s = line % nsplit;
        int64_t in_off, out_off;
        kept_offsets(km, k, &in_off, &out_off);
        int64_t r0 = s * chunk, r1 = min(R, r0 + chunk);
        A acc = identity<A>(dst.op);
        int op = dst.op;
        awlc_row_visit_by(in + in_off + r0, r1 - r0, lane, AWLC_WARP,
                          [&](int64_t, T x) { acc = combine(op, acc, awlc_cast<A>(x)); });
#pragma unroll
        for (int o = AWLC_WARP / 2; o > 0; o >>= 1)
            acc = combine(op, acc, __shfl_xor_sync(0xffffffffu, acc, o));
        if (lane == 0) dst.put(line, out_off, acc);
    }
}

const int COL_X = 32, COL_Y = 8;

/* Columns: block (32, 8); x walks the innermost kept axis (stride 1 in the
 * input, ncol long, stride out_sc in the output), blockIdx.y the outer kept
 * axes (om), blockIdx.z the chunk of the reduced axis (R long, stride sr). */
template <typename T, typename A, typename TO>
__global__ void columns_kernel(const T *in, kept_map om, int64_t nouter, int64_t ncol,
                               int64_t out_sc, int64_t R, int64_t sr, int64_t chunk,
                               sink<A, TO> dst)
{
    awlc_await_previous_kernel();
    __shared__ A part[COL_Y][COL_X + 1];
    int64_t c = (int64_t)blockIdx.x * COL_X + threadIdx.x;
    int s = blockIdx.z, nsplit = gridDim.z;
    for (int64_t o = blockIdx.y; o < nouter; o += gridDim.y) {
        int64_t in_off, out_off;
        kept_offsets(om, o, &in_off, &out_off);
        int64_t r0 = s * chunk, r1 = min(R, r0 + chunk);
        A acc = identity<A>(dst.op);
        if (c < ncol)
            for (int64_t r = r0 + threadIdx.y; r < r1; r += COL_Y)
                acc = combine(dst.op, acc, awlc_cast<A>(in[in_off + c + r * sr]));
        part[threadIdx.y][threadIdx.x] = acc;
        __syncthreads();
        if (threadIdx.y == 0 && c < ncol) {
            for (int y = 1; y < COL_Y; y++) acc = combine(dst.op, acc, part[y][threadIdx.x]);
            dst.put((o * ncol + c) * nsplit + s, out_off + c * out_sc, acc);
        }
        __syncthreads();
    }
}

/* Any layout: one thread per output, every reduced element in row-major
 * order. */
template <typename T, typename A, typename TO>
__global__ void general_kernel(const T *in, kept_map km, int64_t K, reduced_map rm, int64_t R,
                               sink<A, TO> dst)
{
    awlc_await_previous_kernel();
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < K;
         k += (int64_t)gridDim.x * blockDim.x) {
        int64_t in_off, out_off;
        kept_offsets(km, k, &in_off, &out_off);
        A acc = identity<A>(dst.op);
        for (int64_t r = 0; r < R; r++) {
            int64_t off = in_off, q = r;
            for (int d = rm.ndim - 1; d >= 0; d--) {
                off += (q % rm.shape[d]) * rm.in[d];
                q /= rm.shape[d];
            }
            acc = combine(dst.op, acc, awlc_cast<A>(in[off]));
        }
        dst.put(k, out_off, acc);
    }
}

/* Appends axis (shape, strides) to a list kept innermost-first, merging it
 * into the previous entry when every stride continues that run. */
void push_axis(int *ndim, int64_t *shape, int64_t *s0, int64_t *s1, int64_t n, int64_t a, int64_t b)
{
    int k = *ndim;
    if (k > 0 && a == s0[k - 1] * shape[k - 1] && (!s1 || b == s1[k - 1] * shape[k - 1])) {
        shape[k - 1] *= n;
        return;
    }
    shape[k] = n;
    s0[k] = a;
    if (s1) s1[k] = b;
    (*ndim)++;
}

template <typename T> void reverse_axes(int n, T *a)
{
    for (int i = 0, j = n - 1; i < j; i++, j--) {
        T t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

unsigned pow2_threads(int64_t n)
{
    unsigned t = AWLC_WARP;
    while (t < 512 && (int64_t)t < n) t *= 2;
    return t;
}

template <typename T>
int run_reduce(int op, const awl_view *out, const awl_view *in, const kept_map &km, int64_t K,
               const reduced_map &rm, int64_t R)
{
    typedef typename reduce_acc<T>::type A;
    const T *src = awlc_ptr<T>(in);
    T *dst_ptr = awlc_ptr<T>(out);
    sink<A, T> final_sink = {dst_ptr, NULL, op, (double)R};
    int sms = awlc_sm_count();

    if (rm.ndim > 1) {
        unsigned grid = awlc_grid_for(K, 128);
        awlc_launch(general_kernel<T, A, T>, grid, 128, 0, src, km, K, rm, R, final_sink);
        return awlc_check_launch("reduce");
    }
    int64_t sr = rm.in[0];
    bool columns = sr != 1 && km.ndim > 0 && km.in[km.ndim - 1] == 1;
    int64_t nsplit = 1;
    kept_map om = km;
    int64_t ncol = 1, nouter = K;
    if (columns) {
        ncol = km.shape[km.ndim - 1];
        nouter = K / ncol;
        om.ndim--;
        int64_t blocks = (ncol + COL_X - 1) / COL_X * nouter;
        if (blocks < 2 * sms && R > SPLIT_COL)
            nsplit =
                std::min((R + SPLIT_COL - 1) / SPLIT_COL, (4 * (int64_t)sms + blocks - 1) / blocks);
    } else if (K < 2 * sms && R > SPLIT_LINE) {
        nsplit = std::min((R + SPLIT_LINE - 1) / SPLIT_LINE, (4 * (int64_t)sms + K - 1) / K);
    }
    int64_t chunk = (R + nsplit - 1) / nsplit;
    nsplit = (R + chunk - 1) / chunk;

    A *partial = NULL;
    size_t partial_bytes = (size_t)(K * nsplit) * sizeof(A);
    if (nsplit > 1) {
        partial = (A *)awlc_scratch_alloc(partial_bytes);
        if (!partial) return AWL_ERR_OOM;
    }
    sink<A, T> first = final_sink;
    if (partial) first.partial = partial;

    if (columns) {
        dim3 block(COL_X, COL_Y);
        dim3 grid((unsigned)((ncol + COL_X - 1) / COL_X),
                  (unsigned)std::min<int64_t>(nouter, 65535), (unsigned)nsplit);
        awlc_launch(columns_kernel<T, A, T>, grid, block, 0, src, om, nouter, ncol,
                    km.out[km.ndim - 1], R, sr, chunk, first);
    } else if (sr == 1 && chunk <= LINE_WARP) {
        unsigned grid = (unsigned)std::min<int64_t>((K * nsplit + 7) / 8, 1 << 30);
        awlc_launch(warp_lines_kernel<T, A, T>, grid, 256, 0, src, km, K, R, (int)nsplit, chunk,
                    first);
    } else {
        unsigned threads = pow2_threads(chunk);
        unsigned grid = (unsigned)std::min<int64_t>(K * nsplit, 1 << 30);
        awlc_launch(lines_kernel<T, A, T>, grid, threads, 0, src, km, K, R, sr, (int)nsplit, chunk,
                    first);
    }
    int st = awlc_check_launch("reduce");
    if (st == AWL_OK && partial) {
        /* Second pass: each output's partials are one contiguous run. */
        kept_map pm = km;
        int64_t inner = nsplit;
        for (int d = pm.ndim - 1; d >= 0; d--) {
            pm.in[d] = inner;
            inner *= pm.shape[d];
        }
        unsigned threads = pow2_threads(nsplit);
        unsigned grid = (unsigned)std::min<int64_t>(K, 1 << 30);
        awlc_launch(lines_kernel<A, A, T>, grid, threads, 0, partial, pm, K, nsplit, 1, 1, nsplit,
                    final_sink);
        st = awlc_check_launch("reduce");
    }
    if (partial) awlc_scratch_free(partial, partial_bytes);
    return st;
}

} // namespace

int awlc_reduce(awl_reduce_op op, const awl_view *out, const awl_view *in)
{
    AWLC_TRY_STATUS(awlc_enter(out->data));
    kept_map km = {};
    reduced_map rm = {};
    int64_t K = 1, R = 1;
    for (int d = in->ndim - 1; d >= 0; d--) {
        int64_t n = in->shape[d];
        if (n == 1) continue;
        if (out->shape[d] == 1) {
            R *= n;
            push_axis(&rm.ndim, rm.shape, rm.in, NULL, n, in->strides[d], 0);
        } else {
            K *= n;
            push_axis(&km.ndim, km.shape, km.in, km.out, n, in->strides[d], out->strides[d]);
        }
    }
    reverse_axes(km.ndim, km.shape);
    reverse_axes(km.ndim, km.in);
    reverse_axes(km.ndim, km.out);
    reverse_axes(rm.ndim, rm.shape);
    reverse_axes(rm.ndim, rm.in);
    if (K == 0) return AWL_OK;
    if (R == 0) {
        return awlc_fill(out, awl_reduce_is_mean(op) ? NAN : awl_reduce_identity(op));
    }
    if (rm.ndim == 0) { /* nothing to reduce: every reduced axis has size 1 */
        rm.ndim = 1;
        rm.shape[0] = 1;
        rm.in[0] = 1;
    }
    auto run = [&](auto tag) -> int {
        return run_reduce<decltype(tag)>((int)op, out, in, km, K, rm, R);
    };
    return AWLC_DISPATCH(out->dtype, run);
}
