/*
 * backends/cuda/cuda_softmax.cu - softmax / log_softmax and cross-entropy,
 * forward and backward: the row-wise logsumexp family.
 *
 * One block per row (rows of a (rows, n) view with unit stride along n and
 * one row stride). Each thread keeps an online softmax state (running max m
 * and sum s of exp(x - m), rescaled when m grows: Milakov and Gimelshein,
 * "Online normalizer calculation for softmax", 2018), so a row's max and
 * normaliser take a single pass; the block then merges the threads' (m, s)
 * pairs through warp shuffles and shared memory. Loads are 16 bytes wide
 * when a row is 16-byte aligned.
 *
 *   softmax forward:        1 read pass for (m, s), 1 read + 1 write pass;
 *   softmax backward:       1 pass for the row dot product, 1 read + write;
 *   cross-entropy forward:  1 read pass (no output the size of the logits);
 *   cross-entropy backward: 1 read + 1 write pass, the probabilities
 *                           recomputed from the saved lse, never stored;
 *   both at once (training): 1 read pass that keeps the row in shared
 *                           memory, then 1 write pass from there.
 * The second read of a row usually hits L2. Every row is reduced in an order
 * fixed by its length and the block size, so results are deterministic.
 *
 * Dtypes: float32 and bfloat16 accumulate in float, float64 in double. A
 * target outside [0, V) (other than ignore_index) cannot be reported without
 * waiting for the device, so the forward writes NaN as that row's loss and
 * the backward a zero row; awl_cross_entropy has the device check the
 * targets (check_indices), which reports it at the next synchronisation.
 */
#include <type_traits>

#include "backends/cuda/cuda_common.cuh"

namespace
{

template <typename A> struct online {
    A m, s; /* max so far, sum of exp(x - m) */
};

template <typename A> __device__ __forceinline__ online<A> online_add(online<A> o, A x)
{
    if (x > o.m) {
        o.s = o.s * awlc_exp(o.m - x) + (A)1;
        o.m = x;
    } else if (x != (A)-INFINITY) { /* masked entries add nothing */
        o.s += awlc_exp(x - o.m);
    }
    return o;
}

template <typename A> __device__ __forceinline__ online<A> online_merge(online<A> a, online<A> b)
{
    A m = a.m > b.m ? a.m : b.m;
    if (m == (A)-INFINITY) return a;
    online<A> r = {m, a.s * awlc_exp(a.m - m) + b.s * awlc_exp(b.m - m)};
    return r;
}

/* Merges every thread's state; all threads get the block's (m, s). */
template <typename A> __device__ online<A> block_online(online<A> o)
{
    __shared__ A sm[AWLC_WARP], ss[AWLC_WARP];
    int lane = threadIdx.x % AWLC_WARP, warp = threadIdx.x / AWLC_WARP;
#pragma unroll
    for (int off = AWLC_WARP / 2; off > 0; off >>= 1) {
        online<A> p = {__shfl_xor_sync(0xffffffffu, o.m, off),
                       __shfl_xor_sync(0xffffffffu, o.s, off)};
        o = online_merge(o, p);
    }
    __syncthreads();
    if (lane == 0) {
        sm[warp] = o.m;
        ss[warp] = o.s;
    }
    __syncthreads();
    int nw = blockDim.x / AWLC_WARP;
    online<A> r = {(A)-INFINITY, (A)0};
    for (int w = 0; w < nw; w++) {
        online<A> p = {sm[w], ss[w]};
        r = online_merge(r, p);
    }
    return r;
}

/* e^(x - shift); with FAST (float only), 2^(x log2 e - shift log2 e) by
 * awlc_exp2_ftz (one instruction after one multiply-add), where expf's
 * range reduction costs several more. Its error (about 2^-22 relative, and
 * the rounding of x log2 e) is far below what a bfloat16 logit or gradient
 * holds (2^-8); the cross-entropy kernels take it for bfloat16 rows
 * (fast_exp<T>). */
template <bool FAST, typename A> __device__ __forceinline__ A exp_shifted(A x, A shift)
{
    if constexpr (FAST) {
        const float L = 1.4426950408889634f;
        return awlc_exp2_ftz(fmaf(x, L, -shift * L));
    } else {
        return awlc_exp(x - shift);
    }
}

/* Whether the cross-entropy of T rows takes the fast exponential. */
template <typename T> constexpr bool fast_exp = std::is_same<T, awl_bf16>::value;

/* One 16-byte pack into the running (m, s) state. */
template <typename T, typename A, bool FAST, int V>
__device__ __forceinline__ void online_pack(online<A> &o, const awlc_pack<T, V> &p)
{
    A x[V], m = o.m;
#pragma unroll
    for (int j = 0; j < V; j++) {
        x[j] = awlc_cast<A>(p.v[j]);
        m = fmax(x[j], m); /* a NaN x leaves m as it is; the sum takes it */
    }
    /* every entry so far masked: no shift (a NaN still gets through) */
    const A shift = m == (A)-INFINITY ? (A)0 : m;
    A sum = o.s * exp_shifted<FAST>(o.m, shift);
#pragma unroll
    for (int j = 0; j < V; j++) sum += exp_shifted<FAST>(x[j], shift);
    o.m = m;
    o.s = sum;
}

/* The (m, s) state of one row. A thread takes its 16-byte packs whole:
 * the pack's maximum first, then one rescale of the running sum to it and
 * the pack's exponentials, where online_add would compare, branch and
 * perhaps rescale at every element (bfloat16 logits of gpt2-124m's head,
 * eight to a pack: the cross-entropy forward was bound by that, not by
 * its bytes; docs/cuda.md). With FAST, the exponentials are
 * exp_shifted's fast form. With a stash (shared memory, n elements) the
 * row is also copied there, for a second pass that does not read it again. */
template <typename T, typename A, bool FAST = false>
__device__ online<A> row_online(const T *row, int64_t n, T *stash = nullptr)
{
    const int V = 16 / sizeof(T), LOADS = 4;
    online<A> o = {(A)-INFINITY, (A)0};
    int64_t done = 0;
    if (((uintptr_t)row & 15u) == 0) {
        const int64_t nv = n / V;
        const awlc_pack<T, V> *packs = reinterpret_cast<const awlc_pack<T, V> *>(row);
        /* a thread's packs i, i + blockDim.x, ... in that order, LOADS of
         * them loaded before any is used, so that that many loads are in
         * flight at once: the running (m, s) chains the arithmetic, and a
         * load issued after the last pack's arithmetic would wait for it
         * (the stash, a plain pointer, may alias the row for the compiler) */
        for (int64_t i = threadIdx.x; i < nv; i += LOADS * (int64_t)blockDim.x) {
            awlc_pack<T, V> p[LOADS];
#pragma unroll
            for (int u = 0; u < LOADS; u++) {
                int64_t k = i + u * (int64_t)blockDim.x;
                if (k < nv) p[u] = packs[k];
            }
#pragma unroll
            for (int u = 0; u < LOADS; u++) {
                int64_t k = i + u * (int64_t)blockDim.x;
                if (k >= nv) break;
                if (stash) reinterpret_cast<awlc_pack<T, V> *>(stash)[k] = p[u];
                online_pack<T, A, FAST, V>(o, p[u]);
            }
        }
        done = nv * V;
    }
    for (int64_t i = done + threadIdx.x; i < n; i += blockDim.x) {
        if (stash) stash[i] = row[i];
        o = online_add(o, awlc_cast<A>(row[i]));
    }
    return block_online(o); /* its barriers also publish the stash */
}

template <typename T>
__global__ void softmax_fwd_kernel(T *out, const T *in, int64_t rows, int64_t n, int64_t so,
                                   int64_t si, bool log)
{
    awlc_await_previous_kernel();
    typedef typename Compute<T>::type A;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const T *x = in + r * si;
        online<A> o = row_online<T, A>(x, n);
        A inv = (A)1 / o.s, lse = o.m + awlc_log(o.s);
        awlc_row_map(out + r * so, x, n, [&](int64_t, T v) {
            A a = awlc_cast<A>(v);
            return awlc_cast<T>(log ? a - lse : awlc_exp(a - o.m) * inv);
        });
    }
}

/* softmax: dx = y (dy - sum(dy y)); log_softmax: dx = dy - exp(y) sum(dy). */
template <typename T>
__global__ void softmax_bwd_kernel(T *dx, const T *dy, const T *y, int64_t rows, int64_t n,
                                   int64_t sdx, int64_t sdy, int64_t sy, bool log)
{
    awlc_await_previous_kernel();
    typedef typename Compute<T>::type A;
    __shared__ A scratch[AWLC_WARP];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const T *g = dy + r * sdy, *yr = y + r * sy;
        A dot = 0;
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
            dot += log ? awlc_cast<A>(g[j]) : awlc_cast<A>(g[j]) * awlc_cast<A>(yr[j]);
        dot = awlc_block_sum(dot, scratch);
        awlc_row_map(dx + r * sdx, g, n, [&](int64_t j, T gv) {
            A a = awlc_cast<A>(gv), yv = awlc_cast<A>(yr[j]);
            return awlc_cast<T>(log ? a - awlc_exp(yv) * dot : yv * (a - dot));
        });
    }
}

struct ce_args {
    int64_t N, V, s_logits;
    const int32_t *targets;
    int64_t s_targets;
    float *lse;
    int64_t s_lse;
    int ignore_index;
};

/* Row r's loss and lse, from its logits x, its target t and its lse: lse -
 * x[t], 0 for an ignored row, NaN for a target outside [0, V). */
template <typename T, typename A>
__device__ __forceinline__ void ce_write_loss(T *loss, int64_t s_loss, const T *x, A lse, int32_t t,
                                              int64_t r, const ce_args &a)
{
    A l = t == a.ignore_index ? (A)0 : (t < 0 || t >= a.V) ? (A)NAN : lse - awlc_cast<A>(x[t]);
    a.lse[r * a.s_lse] = (float)lse;
    loss[r * s_loss] = awlc_cast<T>(l);
}

/* A row of dlogits d from the row's logits x (in global or shared memory),
 * its lse, its share g of the loss's gradient and its target t: g
 * (softmax - onehot(t)), zeros where skip (an ignored or invalid target).
 * The row is written as g softmax, with no test against t at every
 * element; thread 0 then writes g (softmax - 1) over the target's entry,
 * after a barrier that orders the two writes and ends every read of x (so
 * a stash in shared memory may take the next row). */
template <typename T, typename A>
__device__ __forceinline__ void ce_write_grad(T *d, const T *x, int64_t V, A g, A lse, int32_t t,
                                              bool skip)
{
    if (skip) {
        awlc_row_map(d, x, V, [](int64_t, T) { return awlc_cast<T>((A)0); });
        __syncthreads();
        return;
    }
    awlc_row_map(d, x, V, [&](int64_t, T v) {
        return awlc_cast<T>(g * exp_shifted<fast_exp<T>>(awlc_cast<A>(v), lse));
    });
    A at_t = 0;
    if (threadIdx.x == 0) at_t = g * (exp_shifted<fast_exp<T>>(awlc_cast<A>(x[t]), lse) - (A)1);
    __syncthreads();
    if (threadIdx.x == 0) d[t] = awlc_cast<T>(at_t);
}

template <typename T>
__global__ void ce_fwd_kernel(T *loss, int64_t s_loss, const T *logits, ce_args a)
{
    awlc_await_previous_kernel();
    typedef typename Compute<T>::type A;
    for (int64_t r = blockIdx.x; r < a.N; r += gridDim.x) {
        const T *x = logits + r * a.s_logits;
        online<A> o = row_online<T, A, fast_exp<T>>(x, a.V);
        if (threadIdx.x == 0) {
            A lse = o.m + awlc_log(o.s);
            ce_write_loss(loss, s_loss, x, lse, a.targets[r * a.s_targets], r, a);
        }
    }
}

template <typename T>
__global__ void ce_bwd_kernel(T *dlogits, int64_t s_dlogits, const T *dloss, int64_t s_dloss,
                              const T *logits, ce_args a)
{
    awlc_await_previous_kernel();
    typedef typename Compute<T>::type A;
    for (int64_t r = blockIdx.x; r < a.N; r += gridDim.x) {
        int32_t t = a.targets[r * a.s_targets];
        bool skip = t == a.ignore_index || t < 0 || t >= a.V;
        A g = skip ? (A)0 : awlc_cast<A>(dloss[r * s_dloss]);
        A lse = (A)a.lse[r * a.s_lse];
        ce_write_grad(dlogits + r * s_dlogits, logits + r * a.s_logits, a.V, g, lse, t, skip);
    }
}

/* Both: the forward's (m, s) pass over a row, then the backward's pass,
 * each value computed as by the two kernels above. With STASH the first
 * pass keeps the row in shared memory (dynamic, V elements) and the
 * second reads it there, so the logits are read once; without it (a row
 * too long for shared memory) the second pass reads the row again, from
 * L2 where it is still there. */
template <typename T, bool STASH>
__global__ void ce_fwd_bwd_kernel(T *loss, int64_t s_loss, T *dlogits, int64_t s_dlogits,
                                  const T *dloss, int64_t s_dloss, const T *logits, ce_args a)
{
    awlc_await_previous_kernel();
    typedef typename Compute<T>::type A;
    extern __shared__ __align__(16) unsigned char ce_smem[];
    T *stash = STASH ? reinterpret_cast<T *>(ce_smem) : nullptr;
    for (int64_t r = blockIdx.x; r < a.N; r += gridDim.x) {
        const T *x = logits + r * a.s_logits;
        online<A> o = row_online<T, A, fast_exp<T>>(x, a.V, stash);
        const A lse = o.m + awlc_log(o.s);
        const int32_t t = a.targets[r * a.s_targets];
        const bool skip = t == a.ignore_index || t < 0 || t >= a.V;
        if (threadIdx.x == 0) ce_write_loss(loss, s_loss, x, lse, t, r, a);
        /* the backward takes lse as saved, in float32 */
        const A g = skip ? (A)0 : awlc_cast<A>(dloss[r * s_dloss]), ls = (A)(float)lse;
        ce_write_grad(dlogits + r * s_dlogits, STASH ? stash : x, a.V, g, ls, t, skip);
    }
}

/* The shared memory a row's stash may take: two blocks an SM on an H100 or
 * H200 (227 KB a block at most, 228 an SM). */
const size_t CE_STASH_MAX = 112 * 1024;

unsigned row_threads(int64_t n)
{
    unsigned t = 64;
    while (t < 512 && (int64_t)t * 8 < n) t *= 2;
    return t;
}

unsigned row_blocks(int64_t rows) { return (unsigned)(rows < (1 << 30) ? rows : (1 << 30)); }

} // namespace

int awlc_softmax_forward(const awl_view *out, const awl_view *in, bool log)
{
    int64_t rows, n, so, si, r2, n2;
    if (!awlc_rows_of(out, &rows, &n, &so) || !awlc_rows_of(in, &r2, &n2, &si) || rows != r2)
        return AWL_ERR_UNSUPPORTED;
    AWLC_TRY_STATUS(awlc_enter(out->data));
    if (rows == 0 || n == 0) return AWL_OK;
    auto run = [&](auto tag) -> int {
        typedef decltype(tag) T;
        awlc_launch(softmax_fwd_kernel<T>, row_blocks(rows), row_threads(n), 0, awlc_ptr<T>(out),
                    awlc_ptr<T>(in), rows, n, so, si, log);
        return awlc_check_launch("softmax_forward");
    };
    return AWLC_DISPATCH_FLOAT(out->dtype, run);
}

int awlc_softmax_backward(const awl_view *dx, const awl_view *dy, const awl_view *y, bool log)
{
    int64_t rows, n, sdx, sdy, sy, r2, n2, r3, n3;
    if (!awlc_rows_of(dx, &rows, &n, &sdx) || !awlc_rows_of(dy, &r2, &n2, &sdy) ||
        !awlc_rows_of(y, &r3, &n3, &sy) || rows != r2 || rows != r3)
        return AWL_ERR_UNSUPPORTED;
    AWLC_TRY_STATUS(awlc_enter(dx->data));
    if (rows == 0 || n == 0) return AWL_OK;
    auto run = [&](auto tag) -> int {
        typedef decltype(tag) T;
        awlc_launch(softmax_bwd_kernel<T>, row_blocks(rows), row_threads(n), 0, awlc_ptr<T>(dx),
                    awlc_ptr<T>(dy), awlc_ptr<T>(y), rows, n, sdx, sdy, sy, log);
        return awlc_check_launch("softmax_backward");
    };
    return AWLC_DISPATCH_FLOAT(dx->dtype, run);
}

/* The (N, V) logits and the per-row vectors, or AWL_ERR_UNSUPPORTED.
 * The saved log-sum-exp is float32, which cannot carry a float64 row's
 * precision (its backward came out ~5e-8 off), so float64 logits take the
 * composed path, as on the CPU. */
static int ce_setup(const awl_view *logits, const awl_view *lse, const awl_view *targets,
                    int ignore_index, ce_args *a)
{
    if (logits->dtype == AWL_F64 || !awlc_rows_of(logits, &a->N, &a->V, &a->s_logits) ||
        lse->dtype != AWL_F32 ||
        targets->dtype != AWL_I32 || !awlc_vector_of(lse, a->N, &a->s_lse) ||
        !awlc_vector_of(targets, a->N, &a->s_targets))
        return AWL_ERR_UNSUPPORTED;
    a->targets = awlc_ptr<int32_t>(targets);
    a->lse = awlc_ptr<float>(lse);
    a->ignore_index = ignore_index;
    return AWL_OK;
}

int awlc_cross_entropy_forward(const awl_view *loss, const awl_view *lse, const awl_view *logits,
                               const awl_view *targets, int ignore_index)
{
    ce_args a;
    int64_t s_loss;
    if (ce_setup(logits, lse, targets, ignore_index, &a) != AWL_OK ||
        !awlc_vector_of(loss, a.N, &s_loss) || loss->dtype != logits->dtype)
        return AWL_ERR_UNSUPPORTED;
    AWLC_TRY_STATUS(awlc_enter(loss->data));
    if (a.N == 0 || a.V == 0) return AWL_OK;
    auto run = [&](auto tag) -> int {
        typedef decltype(tag) T;
        awlc_launch(ce_fwd_kernel<T>, row_blocks(a.N), row_threads(a.V), 0, awlc_ptr<T>(loss),
                    s_loss, awlc_ptr<T>(logits), a);
        return awlc_check_launch("cross_entropy_forward");
    };
    return AWLC_DISPATCH_FLOAT(logits->dtype, run);
}

/* The backward's dloss (N) and dlogits (N, V) against the rows of a, in
 * the logits' dtype; false where the kernels do not take them. */
static bool ce_grad_views(const awl_view *dlogits, const awl_view *dloss, awl_dtype dtype,
                          const ce_args &a, int64_t *s_dlogits, int64_t *s_dloss)
{
    int64_t r2, v2;
    return awlc_vector_of(dloss, a.N, s_dloss) && awlc_rows_of(dlogits, &r2, &v2, s_dlogits) &&
           r2 == a.N && v2 == a.V && dloss->dtype == dtype && dlogits->dtype == dtype;
}

int awlc_cross_entropy_forward_backward(const awl_view *loss, const awl_view *lse,
                                        const awl_view *dlogits, const awl_view *dloss,
                                        const awl_view *logits, const awl_view *targets,
                                        int ignore_index)
{
    ce_args a;
    int64_t s_loss, s_dloss, s_dlogits;
    if (ce_setup(logits, lse, targets, ignore_index, &a) != AWL_OK ||
        !awlc_vector_of(loss, a.N, &s_loss) || loss->dtype != logits->dtype ||
        !ce_grad_views(dlogits, dloss, logits->dtype, a, &s_dlogits, &s_dloss))
        return AWL_ERR_UNSUPPORTED;
    AWLC_TRY_STATUS(awlc_enter(loss->data));
    if (a.N == 0 || a.V == 0) return AWL_OK;
    auto run = [&](auto tag) -> int {
        typedef decltype(tag) T;
        const size_t bytes = ((size_t)a.V * sizeof(T) + 15) / 16 * 16;
        if (bytes <= CE_STASH_MAX) {
            if (bytes > 48 * 1024)
                AWLC_TRY(cudaFuncSetAttribute(ce_fwd_bwd_kernel<T, true>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              (int)bytes),
                         "cross_entropy_forward_backward (shared memory)");
            awlc_launch(ce_fwd_bwd_kernel<T, true>, row_blocks(a.N), row_threads(a.V), bytes,
                        awlc_ptr<T>(loss), s_loss, awlc_ptr<T>(dlogits), s_dlogits,
                        awlc_ptr<T>(dloss), s_dloss, awlc_ptr<T>(logits), a);
        } else {
            awlc_launch(ce_fwd_bwd_kernel<T, false>, row_blocks(a.N), row_threads(a.V), 0,
                        awlc_ptr<T>(loss), s_loss, awlc_ptr<T>(dlogits), s_dlogits,
                        awlc_ptr<T>(dloss), s_dloss, awlc_ptr<T>(logits), a);
        }
        return awlc_check_launch("cross_entropy_forward_backward");
    };
    return AWLC_DISPATCH_FLOAT(logits->dtype, run);
}

int awlc_cross_entropy_backward(const awl_view *dlogits, const awl_view *dloss,
                                const awl_view *logits, const awl_view *lse,
                                const awl_view *targets, int ignore_index)
{
    ce_args a;
    int64_t s_dloss, s_dlogits;
    if (ce_setup(logits, lse, targets, ignore_index, &a) != AWL_OK ||
        !ce_grad_views(dlogits, dloss, logits->dtype, a, &s_dlogits, &s_dloss))
        return AWL_ERR_UNSUPPORTED;
    AWLC_TRY_STATUS(awlc_enter(dlogits->data));
    if (a.N == 0 || a.V == 0) return AWL_OK;
    auto run = [&](auto tag) -> int {
        typedef decltype(tag) T;
        awlc_launch(ce_bwd_kernel<T>, row_blocks(a.N), row_threads(a.V), 0, awlc_ptr<T>(dlogits),
                    s_dlogits, awlc_ptr<T>(dloss), s_dloss, awlc_ptr<T>(logits), a);
        return awlc_check_launch("cross_entropy_backward");
    };
    return AWLC_DISPATCH_FLOAT(logits->dtype, run);
}
