/*
 * backends/cuda/cuda_common.cuh - what every file of the CUDA backend shares.
 *
 * The CUDA backend is split by concept: the table and devices
 * (cuda_backend.cu), the caching allocator (cuda_memory.cu), element-wise
 * kernels and random fill (cuda_elementwise.cu), reductions (cuda_reduce.cu),
 * cuBLAS matrix products (cuda_matmul.cu), indexing (cuda_index.cu) and the
 * fused kernels (cuda_softmax.cu, cuda_layernorm.cu, cuda_attention.cu,
 * cuda_optim.cu). This private header holds the pieces they all use: error
 * checking, kernel launches, element types and conversions, the coalesced
 * strided layout that element-wise and reduction kernels take by value, and
 * block reductions.
 *
 * Streams: all work goes to the legacy default stream of the current device.
 * One stream per device makes every queued kernel, copy and cuBLAS call run
 * in call order, so a freed block can go straight back to the allocator's
 * cache and be handed to the next op without any synchronisation.
 *
 * Devices: the entries that take views carry no device index, so each entry
 * first makes the device owning its output current (awlc_use_device). On a
 * one-GPU machine that is a no-op.
 */
#ifndef AWL_BACKENDS_CUDA_COMMON_CUH
#define AWL_BACKENDS_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "backends/backend.h"
#include "common/dtype.h"

#define AWLC_MAX_DEVICES 16
#define AWLC_WARP 32

/* ---- errors ---------------------------------------------------------------- */

/* Records AWL_ERR_DEVICE "awl_cuda <what>: <CUDA error string> (<name>)",
 * clears CUDA's last error, and returns AWL_ERR_DEVICE. */
int awlc_fail(cudaError_t err, const char *what);

/* AWL_OK, or awlc_fail with the error of the last kernel launch. Call after
 * every launch. */
int awlc_check_launch(const char *what);

#define AWLC_TRY(call, what)                                                                       \
    do {                                                                                           \
        cudaError_t awlc_err_ = (call);                                                            \
        if (awlc_err_ != cudaSuccess) return awlc_fail(awlc_err_, what);                           \
    } while (0)

#define AWLC_TRY_STATUS(call)                                                                      \
    do {                                                                                           \
        int awlc_st_ = (call);                                                                     \
        if (awlc_st_ != AWL_OK) return awlc_st_;                                                   \
    } while (0)

/* ---- launches ------------------------------------------------------------------ */

/* Every kernel of the backend is launched with awlc_launch and begins with
 * awlc_await_previous_kernel(), but the 3xTF32 product's
 * (cuda_gemm_tf32x3.cu: its callers hand it a stream, and it is ordered as
 * usual). scripts/check_cuda_launches.sh checks both.
 *
 * Between two kernels in a stream the device normally drains the first one
 * completely before it starts to schedule the second: a gap of a few
 * microseconds, paid about 500 times in a gpt2-124m step. On Hopper (sm_90)
 * a kernel launched with CUDA's programmatic dependent launch may instead be
 * scheduled while the kernel before it is still running its last blocks,
 * once every block of that kernel has said it may be
 * (griddepcontrol.launch_dependents); it then has to wait for the kernel
 * before it itself (griddepcontrol.wait, which returns once that kernel has
 * finished and its writes are visible) before it touches global memory.
 * awlc_await_previous_kernel() does both at the top of each kernel: it waits,
 * and then lets the next kernel be scheduled. So a kernel sees every write
 * of the kernels before it, as with ordinary launches, and only the launch
 * latency overlaps. Kernels launched otherwise (cuBLAS's, or ours on older
 * devices or with the setting off) are ordered as usual and the two
 * instructions do nothing.
 *
 * The setting `dependent_launch` (on|off, default on; AWL_CUDA_DEPENDENT_LAUNCH
 * in the environment) turns it off, to measure it or to rule it out. */
__device__ __forceinline__ void awlc_await_previous_kernel(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* Whether launches on the current device may overlap the kernel before them:
 * the device is sm_90 or newer and the setting is on. */
bool awlc_dependent_launch(void);

/* Whether the kernels built for sm_90a (wgmma; AWL_CUDA_WGMMA, set where
 * the build's architectures include 90a) can run on the current device:
 * compute capability 9.0. */
bool awlc_wgmma(void);

/* Sets `dependent_launch` from "on" or "off": AWL_OK or AWL_ERR_INVALID. */
int awlc_set_dependent_launch(const char *value);

/* kernel<<<grid, block, smem>>>(args...) on the current device's stream, with
 * programmatic dependent launch where awlc_dependent_launch() says so. The
 * kernel must begin with awlc_await_previous_kernel(). Check the launch with
 * awlc_check_launch. */
template <typename... Params, typename... Args>
static inline void awlc_launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                               Args... args)
{
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = awlc_dependent_launch() ? 1 : 0;
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = smem;
    config.stream = 0; /* the stream <<<...>>> uses: see "Streams" above */
    config.attrs = &attr;
    config.numAttrs = 1;
    (void)cudaLaunchKernelEx(&config, kernel, args...); /* errors: awlc_check_launch */
}

/* ---- devices ----------------------------------------------------------------- */

/* Number of CUDA devices, 0 when there is no GPU or no driver (never prints,
 * never records an error). */
int awlc_device_count(void);

/* Makes `device` current. AWL_OK or AWL_ERR_DEVICE. */
int awlc_set_device(int device);

/* Makes the device that owns ptr current; returns that device (>= 0) or a
 * negative status. */
int awlc_use_device(const void *ptr);

/* Makes the device owning an op's output current: AWL_OK or a negative
 * status. */
static inline int awlc_enter(const void *out_data)
{
    int d = awlc_use_device(out_data);
    return d < 0 ? d : AWL_OK;
}

/* Multiprocessors of the current device (cached per device). */
int awlc_sm_count(void);

/* Blocks for a grid-stride loop over n items with `threads` per block: enough
 * to fill the chip, never more than the work needs. */
unsigned awlc_grid_for(int64_t n, int threads);

/* ---- internal scratch memory ----------------------------------------------------- */

/* Scratch memory from the caching allocator on the current device; freed
 * with awlc_scratch_free right after the launches that use it are queued
 * (stream order makes that safe). NULL after recording AWL_ERR_OOM. */
void *awlc_scratch_alloc(size_t nbytes);
void awlc_scratch_free(void *ptr, size_t nbytes);

/* ---- element types ------------------------------------------------------------- */

/* Arithmetic happens in Compute<T>: float for float32 and bfloat16 (bf16 is
 * only a storage format), double for float64 and int32 (int32 ops then round
 * toward zero on the way out, as a C cast does). */
template <typename T> struct Compute {
    typedef float type;
};
template <> struct Compute<double> {
    typedef double type;
};
template <> struct Compute<int32_t> {
    typedef double type;
};

/* Conversions between the storage types, the same as the CPU backend's C
 * casts: bf16 rounds to nearest even through awl_float_to_bf16 (on the
 * device one cvt.rn.bf16.f32, the same bits but for a NaN's payload). */
template <typename To> struct Conv {
    template <typename From> static __host__ __device__ __forceinline__ To from(From x)
    {
        return (To)x;
    }
    static __host__ __device__ __forceinline__ To from(awl_bf16 x)
    {
        return (To)awl_bf16_to_float(x);
    }
};
template <> struct Conv<awl_bf16> {
    template <typename From> static __host__ __device__ __forceinline__ awl_bf16 from(From x)
    {
        return awl_float_to_bf16((float)x);
    }
    static __host__ __device__ __forceinline__ awl_bf16 from(awl_bf16 x) { return x; }
};

template <typename To, typename From>
static __host__ __device__ __forceinline__ To awlc_cast(From x)
{
    return Conv<To>::from(x);
}

/* Loads element `i` of a pointer of run-time dtype as a double; used where
 * one operand (a condition, an index) may be of any dtype. */
static __device__ __forceinline__ double awlc_load_any(const void *p, awl_dtype dt, int64_t i)
{
    switch (dt) {
    case AWL_F32: return ((const float *)p)[i];
    case AWL_F64: return ((const double *)p)[i];
    case AWL_I32: return ((const int32_t *)p)[i];
    default: return awl_bf16_to_float(((const awl_bf16 *)p)[i]);
    }
}

/* Base pointer of a view, offset applied. */
template <typename T> static inline T *awlc_ptr(const awl_view *v)
{
    return (T *)v->data + v->offset;
}

/* Calls f(T()) with T the C type of the dtype (a generic lambda reads it as
 * decltype); AWL_ERR_UNSUPPORTED for anything else. */
#define AWLC_DISPATCH(dtype, f)                                                                    \
    ((dtype) == AWL_F32    ? (f)(float())                                                          \
     : (dtype) == AWL_F64  ? (f)(double())                                                         \
     : (dtype) == AWL_I32  ? (f)(int32_t())                                                        \
     : (dtype) == AWL_BF16 ? (f)(awl_bf16())                                                       \
                           : AWL_ERR_UNSUPPORTED)

/* Float dtypes only (f32, f64, bf16). */
#define AWLC_DISPATCH_FLOAT(dtype, f)                                                              \
    ((dtype) == AWL_F32    ? (f)(float())                                                          \
     : (dtype) == AWL_F64  ? (f)(double())                                                         \
     : (dtype) == AWL_BF16 ? (f)(awl_bf16())                                                       \
                           : AWL_ERR_UNSUPPORTED)

/* ---- strided layouts ------------------------------------------------------------ */

/* N operands walked together over one shape: after awlc_coalesce, size-1
 * dimensions are gone and neighbours that every operand steps through as one
 * run are merged, so a contiguous tensor becomes one dimension and a bias
 * broadcast over rows becomes two. Passed to kernels by value. */
template <int N> struct awlc_layout {
    int ndim;
    int64_t shape[AWL_MAX_DIMS];
    int64_t stride[N][AWL_MAX_DIMS];
};

/* Fills L from the views (all of views[0]'s shape). Returns the element
 * count. */
template <int N>
static inline int64_t awlc_coalesce(awlc_layout<N> *L, const awl_view *const views[N])
{
    const awl_view *o = views[0];
    int64_t n = 1;
    *L = awlc_layout<N>(); /* zeros past ndim: the whole struct goes to the kernel */
    for (int d = o->ndim - 1; d >= 0; d--) { /* innermost first, reversed at the end */
        int64_t s = o->shape[d];
        n *= s;
        if (s == 1) continue;
        int k = L->ndim;
        bool merge = k > 0;
        for (int op = 0; op < N && merge; op++)
            merge = views[op]->strides[d] == L->stride[op][k - 1] * L->shape[k - 1];
        if (merge) {
            L->shape[k - 1] *= s;
            continue;
        }
        L->shape[k] = s;
        for (int op = 0; op < N; op++) L->stride[op][k] = views[op]->strides[d];
        L->ndim++;
    }
    for (int a = 0, b = L->ndim - 1; a < b; a++, b--) {
        int64_t t = L->shape[a];
        L->shape[a] = L->shape[b];
        L->shape[b] = t;
        for (int op = 0; op < N; op++) {
            t = L->stride[op][a];
            L->stride[op][a] = L->stride[op][b];
            L->stride[op][b] = t;
        }
    }
    return n;
}

/* True when every operand is one unit-stride run. */
template <int N> static inline bool awlc_layout_contiguous(const awlc_layout<N> *L)
{
    if (L->ndim > 1) return false;
    for (int op = 0; op < N && L->ndim == 1; op++)
        if (L->stride[op][0] != 1) return false;
    return true;
}

/* Element offsets of linear index i (row-major over L's shape). IndexT is
 * uint32_t when the count fits, which makes the divisions cheap. */
template <int N, typename IndexT>
static __device__ __forceinline__ void awlc_offsets(const awlc_layout<N> &L, IndexT i,
                                                    int64_t off[N])
{
#pragma unroll
    for (int op = 0; op < N; op++) off[op] = 0;
    for (int d = L.ndim - 1; d >= 0; d--) {
        IndexT s = (IndexT)L.shape[d];
        IndexT q = i / s;
        IndexT c = i - q * s;
        i = q;
#pragma unroll
        for (int op = 0; op < N; op++) off[op] += (int64_t)c * L.stride[op][d];
    }
}

/* One thread per element of a layout: f(i, off) gets the linear (row-major)
 * index i and each operand's offset off[k]. F is a functor taken by value. */
template <int N, typename IndexT, typename F>
__global__ void awlc_strided_kernel(awlc_layout<N> L, IndexT n, F f)
{
    awlc_await_previous_kernel();
    IndexT step = (IndexT)gridDim.x * blockDim.x;
    for (IndexT i = (IndexT)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        int64_t off[N];
        awlc_offsets<N, IndexT>(L, i, off);
        f((int64_t)i, off);
    }
}

/* Two coalesced dimensions (a bias broadcast over rows, a transpose):
 * blockIdx.y walks rows and x walks columns, so no index divisions. */
template <int N, typename F> __global__ void awlc_strided2_kernel(awlc_layout<N> L, F f)
{
    awlc_await_previous_kernel();
    int64_t rows = L.shape[0], cols = L.shape[1];
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y)
        for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < cols;
             c += (int64_t)gridDim.x * blockDim.x) {
            int64_t off[N];
#pragma unroll
            for (int op = 0; op < N; op++) off[op] = r * L.stride[op][0] + c * L.stride[op][1];
            f(r * cols + c, off);
        }
}

template <int N, typename F>
static int awlc_launch_strided(const awlc_layout<N> &L, int64_t n, const F &f, const char *what)
{
    const int threads = 256;
    if (L.ndim == 2 && L.shape[1] >= threads / 2) {
        /* Enough blocks to fill the chip; each then loops over many rows,
         * not one block per 256 elements. */
        int64_t cols = (L.shape[1] + threads - 1) / threads;
        unsigned gx = (unsigned)(cols < 1024 ? cols : 1024);
        int64_t want = (int64_t)awlc_sm_count() * 8 / gx + 1;
        int64_t rows = L.shape[0] < want ? L.shape[0] : want;
        unsigned gy = (unsigned)(rows < 65535 ? rows : 65535);
        awlc_launch(awlc_strided2_kernel<N, F>, dim3(gx, gy), threads, 0, L, f);
        return awlc_check_launch(what);
    }
    unsigned grid = awlc_grid_for(n, threads);
    if (n < INT32_MAX)
        awlc_launch(awlc_strided_kernel<N, uint32_t, F>, grid, threads, 0, L, (uint32_t)n, f);
    else
        awlc_launch(awlc_strided_kernel<N, uint64_t, F>, grid, threads, 0, L, (uint64_t)n, f);
    return awlc_check_launch(what);
}

/* V elements of T moved as one aligned load or store. */
template <typename T, int V> struct alignas(sizeof(T) * V) awlc_pack {
    T v[V];
};

/* Calls f(j, x) for the elements x = row[j], j in [0, n), that thread `tid`
 * of `nth` owns; 16-byte loads when the row is 16-byte aligned. */
template <typename T, typename F>
static __device__ __forceinline__ void awlc_row_visit_by(const T *row, int64_t n, int tid, int nth,
                                                         F f)
{
    const int V = 16 / sizeof(T);
    int64_t done = 0;
    if (((uintptr_t)row & 15u) == 0) {
        int64_t nv = n / V;
        for (int64_t i = tid; i < nv; i += nth) {
            awlc_pack<T, V> p = reinterpret_cast<const awlc_pack<T, V> *>(row)[i];
#pragma unroll
            for (int j = 0; j < V; j++) f(i * V + j, p.v[j]);
        }
        done = nv * V;
    }
    for (int64_t i = done + tid; i < n; i += nth) f(i, row[i]);
}

/* The same, shared among the threads of the block. */
template <typename T, typename F>
static __device__ __forceinline__ void awlc_row_visit(const T *row, int64_t n, F f)
{
    awlc_row_visit_by(row, n, threadIdx.x, blockDim.x, f);
}

/* out[j] = f(j, in[j]) for this thread's share of a row, 16-byte accesses
 * when both rows are 16-byte aligned. */
template <typename TO, typename TI, typename F>
static __device__ __forceinline__ void awlc_row_map(TO *out, const TI *in, int64_t n, F f)
{
    const int V = 16 / (sizeof(TO) > sizeof(TI) ? sizeof(TO) : sizeof(TI));
    int64_t done = 0;
    if ((((uintptr_t)in | (uintptr_t)out) & 15u) == 0) {
        int64_t nv = n / V;
        for (int64_t i = threadIdx.x; i < nv; i += blockDim.x) {
            awlc_pack<TI, V> p = reinterpret_cast<const awlc_pack<TI, V> *>(in)[i];
            awlc_pack<TO, V> o;
#pragma unroll
            for (int j = 0; j < V; j++) o.v[j] = f(i * V + j, p.v[j]);
            reinterpret_cast<awlc_pack<TO, V> *>(out)[i] = o;
        }
        done = nv * V;
    }
    for (int64_t i = done + threadIdx.x; i < n; i += blockDim.x) out[i] = f(i, in[i]);
}

/* A (rows, n) view whose last axis has stride 1 and whose leading axes
 * collapse to one row stride; false otherwise. */
static inline bool awlc_rows_of(const awl_view *v, int64_t *rows, int64_t *n, int64_t *row_stride)
{
    if (v->ndim == 0) {
        *rows = *n = 1;
        *row_stride = 1;
        return true;
    }
    *n = v->shape[v->ndim - 1];
    if (*n != 1 && v->strides[v->ndim - 1] != 1) return false;
    int64_t r = 1, rs = *n, expect = -1;
    for (int d = v->ndim - 2; d >= 0; d--) {
        if (v->shape[d] == 1) continue;
        if (expect < 0)
            rs = v->strides[d];
        else if (v->strides[d] != expect)
            return false;
        r *= v->shape[d];
        expect = v->strides[d] * v->shape[d];
    }
    *rows = r;
    *row_stride = rs;
    return true;
}

/* A vector of n elements with one stride (0 broadcasts); false otherwise. */
static inline bool awlc_vector_of(const awl_view *v, int64_t n, int64_t *stride)
{
    if (awl_view_numel(v) != n) return false;
    int64_t s = 0;
    int found = 0;
    for (int d = 0; d < v->ndim; d++) {
        if (v->shape[d] == 1) continue;
        s = v->strides[d];
        found++;
    }
    *stride = s;
    return found <= 1;
}

/* ---- reductions inside a block ----------------------------------------------------- */

/* Sum over the warp, the same order on every run. */
template <typename A> static __device__ __forceinline__ A awlc_warp_sum(A v)
{
#pragma unroll
    for (int o = AWLC_WARP / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

template <typename A> static __device__ __forceinline__ A awlc_warp_max(A v)
{
#pragma unroll
    for (int o = AWLC_WARP / 2; o > 0; o >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over the whole block (blockDim.x a multiple of 32, at most 1024);
 * every thread gets the result. `scratch` holds 32 values. */
template <typename A> static __device__ A awlc_block_sum(A v, A *scratch)
{
    int lane = threadIdx.x % AWLC_WARP, warp = threadIdx.x / AWLC_WARP;
    int nwarps = blockDim.x / AWLC_WARP;
    v = awlc_warp_sum(v);
    __syncthreads(); /* scratch may still be read by a previous call */
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < nwarps ? scratch[lane] : (A)0;
    return awlc_warp_sum(v);
}

template <typename A> static __device__ A awlc_block_max(A v, A *scratch)
{
    int lane = threadIdx.x % AWLC_WARP, warp = threadIdx.x / AWLC_WARP;
    int nwarps = blockDim.x / AWLC_WARP;
    v = awlc_warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < nwarps ? scratch[lane] : (A)-INFINITY;
    return awlc_warp_max(v);
}

/* Math on float or double by overload, so templates pick the right width. */
static __device__ __forceinline__ float awlc_exp(float x) { return expf(x); }
static __device__ __forceinline__ double awlc_exp(double x) { return exp(x); }
/* 2^x on the special-function unit, as exp2f (ex2.approx, 2 ulp) but with
 * subnormal results flushed to zero, which saves exp2f's rescaling around
 * it: one instruction. The attention kernels and the bfloat16
 * cross-entropy take their softmax weights from it: a weight below 2^-126
 * of its row's largest adds nothing to a float32 row sum anyway. */
static __device__ __forceinline__ float awlc_exp2_ftz(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
static __device__ __forceinline__ float awlc_log(float x) { return logf(x); }
static __device__ __forceinline__ double awlc_log(double x) { return log(x); }
static __device__ __forceinline__ float awlc_sqrt(float x) { return sqrtf(x); }
static __device__ __forceinline__ double awlc_sqrt(double x) { return sqrt(x); }
static __device__ __forceinline__ float awlc_tanh(float x) { return tanhf(x); }
static __device__ __forceinline__ double awlc_tanh(double x) { return tanh(x); }
static __device__ __forceinline__ float awlc_pow(float x, float y) { return powf(x, y); }
static __device__ __forceinline__ double awlc_pow(double x, double y) { return pow(x, y); }

/* The math of the op formulas (backends/ops.h) in device code, by overload
 * so that a float kernel stays in float. */
#undef AWL_EXP
#undef AWL_LOG
#undef AWL_SQRT
#undef AWL_TANH
#undef AWL_POW
#define AWL_EXP(x) awlc_exp(x)
#define AWL_LOG(x) awlc_log(x)
#define AWL_SQRT(x) awlc_sqrt(x)
#define AWL_TANH(x) awlc_tanh(x)
#define AWL_POW(x, y) awlc_pow(x, y)

/* ---- entries of the table, defined in the files named -------------------------------- */

/* cuda_memory.cu */
void *awlc_alloc(int device, size_t nbytes);
void awlc_free(int device, void *ptr, size_t nbytes);
size_t awlc_memory_reserved(int device);
void awlc_empty_cache(int device);

/* cuda_elementwise.cu */
int awlc_fill(const awl_view *out, double value);
int awlc_copy(const awl_view *out, const awl_view *in);
int awlc_unary(awl_unary_op op, const awl_view *out, const awl_view *in, double alpha);
int awlc_binary(awl_binary_op op, const awl_view *out, const awl_view *a, const awl_view *b);
int awlc_where(const awl_view *out, const awl_view *cond, const awl_view *a, const awl_view *b);
int awlc_random(const awl_view *out, awl_random_kind kind, uint64_t seed, uint64_t offset, double a,
                double b);
int awlc_dropout(const awl_view *out, const awl_view *in, const awl_dropout_args *args);
int awlc_gelu_backward(const awl_view *dx, const awl_view *dy, const awl_view *x);
int awlc_dropout_add(const awl_view *out, const awl_view *x, const awl_view *h,
                     const awl_dropout_args *args);
int awlc_add_dropout(const awl_view *out, const awl_view *x, const awl_view *h,
                     const awl_dropout_args *args);

/* cuda_reduce.cu */
int awlc_reduce(awl_reduce_op op, const awl_view *out, const awl_view *in);

/* cuda_matmul.cu */
int awlc_matmul(const awl_view *out, const awl_view *a, const awl_view *b, bool accumulate);
int awlc_matmul_wide(const awl_view *out, const awl_view *a_row_sums, const awl_view *a,
                     const awl_view *b);
void awlc_set_matmul_fast_fp32(bool on);
bool awlc_matmul_fast_fp32(void); /* TF32 mode on? Attention follows it too. */
int awlc_matmul_bias(const awl_view *out, const awl_view *a, const awl_view *b,
                     const awl_view *bias);
int awlc_matmul_bias_gelu(const awl_view *out, const awl_view *pre, const awl_view *a,
                          const awl_view *b, const awl_view *bias);
int awlc_matmul_gelu_backward(const awl_view *out, const awl_view *a, const awl_view *b,
                              const awl_view *pre);

/* cuda_index.cu */
int awlc_index_select(const awl_view *out, const awl_view *src, const awl_view *idx);
int awlc_index_add(const awl_view *dst, const awl_view *idx, const awl_view *src);
int awlc_gather(const awl_view *out, const awl_view *in, int axis, const awl_view *idx);
int awlc_scatter_add(const awl_view *out, int axis, const awl_view *idx, const awl_view *src);
int awlc_check_indices(const awl_view *idx, int64_t limit, const char *op, const char *what);
/* Reports (AWL_ERR_INVALID) the first index out of range that a check on
 * this device found since the last report; call once the device has
 * finished the work queued before (after a synchronisation). */
int awlc_index_faults(int device);

/* cuda_softmax.cu (softmax and cross-entropy: both are row-wise logsumexp) */
int awlc_softmax_forward(const awl_view *out, const awl_view *in, bool log);
int awlc_softmax_backward(const awl_view *dx, const awl_view *dy, const awl_view *y, bool log);
int awlc_cross_entropy_forward(const awl_view *loss, const awl_view *lse, const awl_view *logits,
                               const awl_view *targets, int ignore_index);
int awlc_cross_entropy_backward(const awl_view *dlogits, const awl_view *dloss,
                                const awl_view *logits, const awl_view *lse,
                                const awl_view *targets, int ignore_index);
int awlc_cross_entropy_forward_backward(const awl_view *loss, const awl_view *lse,
                                        const awl_view *dlogits, const awl_view *dloss,
                                        const awl_view *logits, const awl_view *targets,
                                        int ignore_index);

/* cuda_layernorm.cu */
int awlc_layernorm_forward(const awl_view *out, const awl_view *mean, const awl_view *rstd,
                           const awl_view *x, const awl_view *weight, const awl_view *bias,
                           double eps);
int awlc_dropout_add_layernorm(const awl_view *sum, const awl_view *out, const awl_view *mean,
                               const awl_view *rstd, const awl_view *x, const awl_view *h,
                               const awl_view *weight, const awl_view *bias, double eps,
                               const awl_dropout_args *dropout);
int awlc_layernorm_backward(const awl_view *dx, const awl_view *dweight, const awl_view *dbias,
                            const awl_view *dy, const awl_view *x, const awl_view *weight,
                            const awl_view *mean, const awl_view *rstd, const awl_view *dx_add,
                            const awl_view *dx_copy);

/* cuda_matmul.cu; the "fp32_matmul" setting: "3xtf32" (the default: awl's
 * tensor-core kernel where it takes the product) or "sgemm" (cuBLAS's
 * float32 product always). */
int awlc_matmul_set_fp32(const char *value);

/* cuda_attention.cu; the "attention" setting: "auto" (the default: tensor
 * cores), "simt" (the CUDA-core kernels) or "split" (float32's backward in
 * two kernels). */
int awlc_attention_set_rung(const char *value);
int awlc_attention_forward(const awl_view *out, const awl_view *lse, const awl_view *q,
                           const awl_view *k, const awl_view *v, double scale, bool causal,
                           const awl_dropout_args *dropout);
int awlc_attention_backward(const awl_view *dq, const awl_view *dk, const awl_view *dv,
                            const awl_view *dout, const awl_view *q, const awl_view *k,
                            const awl_view *v, const awl_view *out, const awl_view *lse,
                            double scale, bool causal, const awl_dropout_args *dropout);

/* cuda_profile.cu: device time, NVTX ranges and the chip's peak (backend.h) */
void *awlc_marker_record(int device);
int awlc_marker_seconds(int device, void *a, void *b, double *seconds);
void awlc_marker_free(int device, void *marker);
void awlc_range_push(const char *name);
void awlc_range_pop(void);
double awlc_peak_flops(int device, awl_dtype dtype, bool fast_fp32, char *source, size_t size);

/* cuda_optim.cu */
int awlc_adamw_step(int n, const awl_view *params, const awl_view *grads, const awl_view *m,
                    const awl_view *v, const float *weight_decay, const awl_adamw_args *args);
int awlc_sum_squares(int n, const awl_view *xs, const awl_view *out);
int awlc_scale(int n, const awl_view *xs, double factor);
int awlc_cast_many(int n, const awl_view *outs, const awl_view *xs);

#endif
