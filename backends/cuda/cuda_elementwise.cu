/*
 * backends/cuda/cuda_elementwise.cu - fill, copy/cast, unary, binary, where,
 * random fill and dropout.
 *
 * Two paths for every op:
 *   - contiguous: after coalescing (cuda_common.cuh) every operand is one
 *     unit-stride run; each thread then moves 16-byte packs (4 floats, 8
 *     bf16, 2 doubles) when all pointers are 16-byte aligned, so a warp reads
 *     512 contiguous bytes per instruction;
 *   - strided: one thread per element of the output; the coalesced layout
 *     (at most 8 dims, taken by value) turns the linear index into an offset
 *     per operand, with 32-bit divisions whenever the count fits. A zero
 *     stride is a broadcast and a permuted stride order a transpose; neither
 *     is ever copied.
 * A bias broadcast over rows (out and one operand contiguous, the other a
 * single row) moves 16-byte packs too. Other two-dimensional layouts get a
 * kernel (cuda_common.cuh) that walks rows and columns on the
 * grid's two axes, with no divisions at all.
 * The op code is a run-time switch inside the kernel: it is uniform across
 * the grid, costs a few instructions per element of a memory-bound loop, and
 * keeps the number of template instances (and the build time) small. GELU,
 * the one op a training step runs on its largest tensors, has a kernel of
 * its own, and so has its backward (dx = dy gelu'(x) in one pass).
 *
 * Random fill follows common/philox.h exactly: element i of the output, in
 * row-major order, is a pure function of (seed, offset, i). The affine map
 * a + (b - a) u uses explicitly rounded double operations (__dmul_rn,
 * __dadd_rn) so the compiler cannot fuse them into an FMA: the CPU computes
 * the same expression with two roundings, and uniform draws must agree bit
 * for bit. Dropout draws its mask from the same stream (common/dropout.h)
 * inside the multiply, so no mask is written.
 */
#include "backends/cuda/cuda_common.cuh"
#include "common/philox.h"

namespace
{

const int THREADS = 256;

/* ---- contiguous engines ------------------------------------------------------------ */

/* Elements per 16-byte pack. */
template <typename T> struct pack_width {
    static const int value = 16 / sizeof(T);
};

/* out[i] = op(in[i]) over contiguous arrays; V elements per load when V > 1
 * (the host checked the alignment). */
template <int V, typename TO, typename TI, typename Op>
__global__ void map1_kernel(TO *out, const TI *in, int64_t n, Op op)
{
    awlc_await_previous_kernel();
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t nv = n / V;
    for (int64_t i = first; i < nv; i += step) {
        awlc_pack<TI, V> a = reinterpret_cast<const awlc_pack<TI, V> *>(in)[i];
        awlc_pack<TO, V> o;
#pragma unroll
        for (int j = 0; j < V; j++) o.v[j] = op(a.v[j]);
        reinterpret_cast<awlc_pack<TO, V> *>(out)[i] = o;
    }
    for (int64_t i = nv * V + first; i < n; i += step) out[i] = op(in[i]);
}

/* out[i] = op(a[i], b[i]) over contiguous arrays of one type. */
template <int V, typename T, typename Op>
__global__ void map2_kernel(T *out, const T *a, const T *b, int64_t n, Op op)
{
    awlc_await_previous_kernel();
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t nv = n / V;
    for (int64_t i = first; i < nv; i += step) {
        awlc_pack<T, V> x = reinterpret_cast<const awlc_pack<T, V> *>(a)[i];
        awlc_pack<T, V> y = reinterpret_cast<const awlc_pack<T, V> *>(b)[i];
        awlc_pack<T, V> o;
#pragma unroll
        for (int j = 0; j < V; j++) o.v[j] = op(x.v[j], y.v[j]);
        reinterpret_cast<awlc_pack<T, V> *>(out)[i] = o;
    }
    for (int64_t i = nv * V + first; i < n; i += step) out[i] = op(a[i], b[i]);
}

/* out (rows, cols) = a op b with out and x contiguous and y one row
 * broadcast over rows (a bias): 16-byte packs of all three; y_first says
 * y is the left operand. cols is a multiple of V, all rows aligned. */
template <int V, typename T, typename Op>
__global__ void rowcast_kernel(T *out, const T *x, const T *y, int64_t npacks, uint32_t row_packs,
                               bool y_first, Op op)
{
    awlc_await_previous_kernel();
    typedef awlc_pack<T, V> P;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < npacks;
         i += (int64_t)gridDim.x * blockDim.x) {
        P u = reinterpret_cast<const P *>(x)[i];
        P w = reinterpret_cast<const P *>(y)[(uint32_t)(i % row_packs)];
        P o;
#pragma unroll
        for (int j = 0; j < V; j++) o.v[j] = y_first ? op(w.v[j], u.v[j]) : op(u.v[j], w.v[j]);
        reinterpret_cast<P *>(out)[i] = o;
    }
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

template <typename TO, typename TI, typename Op>
int launch_map1(TO *out, const TI *in, int64_t n, const Op &op, const char *what)
{
    const int V = pack_width<TO>::value < pack_width<TI>::value ? pack_width<TO>::value
                                                                : pack_width<TI>::value;
    unsigned grid = awlc_grid_for((n + V - 1) / V, THREADS);
    if (aligned16(out) && aligned16(in))
        awlc_launch(map1_kernel<V, TO, TI, Op>, grid, THREADS, 0, out, in, n, op);
    else
        awlc_launch(map1_kernel<1, TO, TI, Op>, grid, THREADS, 0, out, in, n, op);
    return awlc_check_launch(what);
}

template <typename T, typename Op>
int launch_map2(T *out, const T *a, const T *b, int64_t n, const Op &op, const char *what)
{
    const int V = pack_width<T>::value;
    unsigned grid = awlc_grid_for((n + V - 1) / V, THREADS);
    if (aligned16(out) && aligned16(a) && aligned16(b))
        awlc_launch(map2_kernel<V, T, Op>, grid, THREADS, 0, out, a, b, n, op);
    else
        awlc_launch(map2_kernel<1, T, Op>, grid, THREADS, 0, out, a, b, n, op);
    return awlc_check_launch(what);
}

/* ---- the arithmetic ------------------------------------------------------------------ */

/* The formulas of backends/ops.h in the compute type C: alpha is the scalar
 * in C, alpha_d the double the caller gave (comparisons use it, so that
 * alpha is never rounded, as on the CPU). */
template <typename C> __device__ __forceinline__ C unary_apply(int op, C x, C alpha, double alpha_d)
{
    switch (op) {
#define UNARY_CASE(OP, name, dtypes, domain, math, formula)                                        \
    case AWL_UNARY_##OP: return (C)(formula);
        AWL_UNARY_OPS(UNARY_CASE)
#undef UNARY_CASE
    default: return x;
    }
}

template <typename C> __device__ __forceinline__ C binary_apply(int op, C a, C b)
{
    switch (op) {
#define BINARY_CASE(OP, name, dtypes, domain, math, formula)                                       \
    case AWL_BINARY_##OP: return (C)(formula);
        AWL_BINARY_OPS(BINARY_CASE)
#undef BINARY_CASE
    default: return a;
    }
}

/* ---- per-element functors (by value into kernels) ------------------------------------ */

/* GELU and its backward (backends/ops.h's formulas) with the op fixed at
 * compile time. In bfloat16 a 16-byte pack is eight elements, and the
 * run-time switch, not the bytes, bounded the hidden layer's GELU. The
 * backward reads dy and x and writes dx once: the composed gelu' then a
 * multiply wrote and read gelu'(x) as well. */
template <typename T> struct gelu_op {
    typedef typename Compute<T>::type C;
    __device__ T operator()(T xin) const
    {
        C x = awlc_cast<C>(xin);
        return awlc_cast<T>((C)(AWL_GELU(x)));
    }
};

template <typename T> struct gelu_backward_op {
    typedef typename Compute<T>::type C;
    __device__ T operator()(T dy, T xin) const
    {
        C x = awlc_cast<C>(xin);
        return awlc_cast<T>(awlc_cast<C>(dy) * (C)(AWL_GELU_GRAD(x)));
    }
};

template <typename TO, typename TI> struct cast_op {
    __device__ TO operator()(TI x) const { return awlc_cast<TO>(x); }
};

template <typename T> struct unary_op {
    typedef typename Compute<T>::type C;
    int op;
    C alpha;
    double alpha_d;
    __device__ T operator()(T x) const
    {
        return awlc_cast<T>(unary_apply<C>(op, awlc_cast<C>(x), alpha, alpha_d));
    }
};

template <typename T> struct binary_op {
    typedef typename Compute<T>::type C;
    int op;
    __device__ T operator()(T a, T b) const
    {
        return awlc_cast<T>(binary_apply<C>(op, awlc_cast<C>(a), awlc_cast<C>(b)));
    }
};

template <typename T> struct fill_fn {
    T *out;
    T value;
    __device__ void operator()(int64_t, const int64_t *off) const { out[off[0]] = value; }
};

template <typename TO, typename TI> struct copy_fn {
    TO *out;
    const TI *in;
    __device__ void operator()(int64_t, const int64_t *off) const
    {
        out[off[0]] = awlc_cast<TO>(in[off[1]]);
    }
};

template <typename T> struct unary_fn {
    T *out;
    const T *in;
    unary_op<T> f;
    __device__ void operator()(int64_t, const int64_t *off) const { out[off[0]] = f(in[off[1]]); }
};

template <typename T> struct binary_fn {
    T *out;
    const T *a, *b;
    binary_op<T> f;
    __device__ void operator()(int64_t, const int64_t *off) const
    {
        out[off[0]] = f(a[off[1]], b[off[2]]);
    }
};

template <typename T> struct where_fn {
    T *out;
    const void *cond;
    awl_dtype cond_dtype;
    const T *a, *b;
    __device__ void operator()(int64_t, const int64_t *off) const
    {
        out[off[0]] = awlc_load_any(cond, cond_dtype, off[1]) != 0.0 ? a[off[2]] : b[off[3]];
    }
};

template <typename T> struct random_fn {
    T *out;
    int kind;
    uint64_t seed, offset;
    double a, b;
    __device__ void operator()(int64_t i, const int64_t *off) const
    {
        double r;
        if (kind == AWL_RANDOM_UNIFORM)
            r = __dadd_rn(a, __dmul_rn(b - a, awl_philox_uniform_at(seed, offset, (uint64_t)i)));
        else
            r = __dadd_rn(a, __dmul_rn(b, awl_philox_normal_at(seed, offset, (uint64_t)i)));
        out[off[0]] = awlc_cast<T>(r);
    }
};

/* out = in * 1 / (1 - p) where element i keeps (common/dropout.h), else 0.
 * The product is taken in double, which is exact for two float32 (or two
 * bf16) factors, so the one rounding gives the dtype's own product. */
template <typename T> struct dropout_fn {
    T *out;
    const T *in;
    uint64_t seed, offset;
    uint32_t threshold;
    double scale; /* rounded to T */
    __device__ void operator()(int64_t i, const int64_t *off) const
    {
        bool keep = awl_dropout_keep(seed, offset, (uint64_t)i, threshold);
        out[off[0]] = awlc_cast<T>(keep ? awlc_cast<double>(in[off[1]]) * scale : 0.0);
    }
};

/* Contiguous dropout: thread j takes elements 4 j .. 4 j + 3, one Philox
 * block (element i uses block offset + i / 4, word i % 4). ADD
 * (add_dropout): the element dropped is in_i + h_(i mod nh), rounded to T
 * as the add kernel rounds it, so the bits are the composed path's. TI:
 * in's type, rounded to T first (a cast then a dropout, in one pass). */
template <typename T, bool ADD, typename TI = T>
__global__ void dropout4_kernel(T *out, const TI *in, const T *h, int64_t n, int64_t nh,
                                uint64_t seed, uint64_t offset, uint32_t threshold, double scale)
{
    awlc_await_previous_kernel();
    typedef typename Compute<T>::type C;
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j * 4 < n;
         j += (int64_t)gridDim.x * blockDim.x) {
        unsigned keep =
            awl_dropout_block_bits(awl_philox4x32(seed, offset + (uint64_t)j), threshold);
#pragma unroll
        for (int u = 0; u < 4; u++) {
            int64_t i = 4 * j + u;
            if (i >= n) break;
            T v = ADD ? awlc_cast<T>(awlc_cast<C>(in[i]) + awlc_cast<C>(h[i % nh]))
                      : awlc_cast<T>(in[i]);
            out[i] = awlc_cast<T>(keep >> u & 1u ? awlc_cast<double>(v) * scale : 0.0);
        }
    }
}

/* out = x + keep_i h_i scale over contiguous arrays, computed in T's compute
 * type with h_i first cast to T: thread j takes elements 4 j .. 4 j + 3, one
 * Philox block as in dropout4_kernel (every element kept when !drop). VEC:
 * all three arrays aligned to four elements, loaded as packs. */
template <bool VEC, typename T, typename TH>
__global__ void dropout_add4_kernel(T *out, const T *x, const TH *h, int64_t n, uint64_t seed,
                                    uint64_t offset, uint32_t threshold, bool drop,
                                    typename Compute<T>::type scale)
{
    awlc_await_previous_kernel();
    typedef typename Compute<T>::type C;
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j * 4 < n;
         j += (int64_t)gridDim.x * blockDim.x) {
        unsigned keep =
            drop ? awl_dropout_block_bits(awl_philox4x32(seed, offset + (uint64_t)j), threshold)
                 : 15u;
        if (VEC && 4 * j + 4 <= n) {
            awlc_pack<T, 4> a = reinterpret_cast<const awlc_pack<T, 4> *>(x)[j], o;
            awlc_pack<TH, 4> b = reinterpret_cast<const awlc_pack<TH, 4> *>(h)[j];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                C v = awlc_cast<C>(a.v[u]);
                if (keep >> u & 1u) v += awlc_cast<C>(awlc_cast<T>(b.v[u])) * scale;
                o.v[u] = awlc_cast<T>(v);
            }
            reinterpret_cast<awlc_pack<T, 4> *>(out)[j] = o;
            continue;
        }
        for (int u = 0; u < 4; u++) {
            int64_t i = 4 * j + u;
            if (i >= n) break;
            C v = awlc_cast<C>(x[i]);
            if (keep >> u & 1u) v += awlc_cast<C>(awlc_cast<T>(h[i])) * scale;
            out[i] = awlc_cast<T>(v);
        }
    }
}

} // namespace

/* ---- entries ------------------------------------------------------------------------- */

int awlc_fill(const awl_view *out, double value)
{
    AWLC_TRY_STATUS(awlc_enter(out->data));
    const awl_view *views[1] = {out};
    awlc_layout<1> L;
    int64_t n = awlc_coalesce<1>(&L, views);
    if (n == 0) return AWL_OK;
    auto run = [&](auto tag) -> int {
        typedef decltype(tag) T;
        fill_fn<T> f = {awlc_ptr<T>(out), awlc_cast<T>(value)};
        return awlc_launch_strided<1>(L, n, f, "fill");
    };
    return AWLC_DISPATCH(out->dtype, run);
}

int awlc_copy(const awl_view *out, const awl_view *in)
{
    AWLC_TRY_STATUS(awlc_enter(out->data));
    const awl_view *views[2] = {out, in};
    awlc_layout<2> L;
    int64_t n = awlc_coalesce<2>(&L, views);
    if (n == 0) return AWL_OK;
    bool contiguous = awlc_layout_contiguous<2>(&L);
    if (contiguous && out->dtype == in->dtype) {
        size_t es = awl_dtype_size(out->dtype);
        AWLC_TRY(cudaMemcpyAsync((char *)out->data + out->offset * es,
                                 (const char *)in->data + in->offset * es, (size_t)n * es,
                                 cudaMemcpyDeviceToDevice, 0),
                 "copy");
        return AWL_OK;
    }
    auto run_out = [&](auto otag) -> int {
        typedef decltype(otag) TO;
        auto run_in = [&](auto itag) -> int {
            typedef decltype(itag) TI;
            if (contiguous)
                return launch_map1(awlc_ptr<TO>(out), awlc_ptr<TI>(in), n, cast_op<TO, TI>(),
                                   "copy");
            copy_fn<TO, TI> f = {awlc_ptr<TO>(out), awlc_ptr<TI>(in)};
            return awlc_launch_strided<2>(L, n, f, "copy");
        };
        return AWLC_DISPATCH(in->dtype, run_in);
    };
    return AWLC_DISPATCH(out->dtype, run_out);
}

int awlc_unary(awl_unary_op op, const awl_view *out, const awl_view *in, double alpha)
{
    if (op < 0 || op >= AWL_UNARY_OP_COUNT)
        return awl_error(AWL_ERR_INVALID, "awl_cuda unary: unknown op %d", (int)op);
    /* int32 has the ops with exact integer meaning only (backends/ops.h) */
    if (!awl_kernel_defined(AWL_KERNEL_UNARY, op, out->dtype))
        return awl_error(AWL_ERR_INVALID, "awl_cuda unary %s: not defined for %s",
                         awl_unary_op_name(op), awl_dtype_name(out->dtype));
    AWLC_TRY_STATUS(awlc_enter(out->data));
    const awl_view *views[2] = {out, in};
    awlc_layout<2> L;
    int64_t n = awlc_coalesce<2>(&L, views);
    if (n == 0) return AWL_OK;
    auto run = [&](auto tag) -> int {
        typedef decltype(tag) T;
        typedef typename Compute<T>::type C;
        /* int32 ops take an integer scalar, truncated like a stored int32. */
        C al = awl_dtype_is_float(out->dtype) ? (C)alpha : (C)awlc_cast<int32_t>(alpha);
        unary_op<T> f = {(int)op, al, alpha};
        if (awlc_layout_contiguous<2>(&L) && op == AWL_UNARY_GELU && awl_dtype_is_float(out->dtype))
            return launch_map1(awlc_ptr<T>(out), awlc_ptr<T>(in), n, gelu_op<T>(), "gelu");
        if (awlc_layout_contiguous<2>(&L))
            return launch_map1(awlc_ptr<T>(out), awlc_ptr<T>(in), n, f, "unary");
        unary_fn<T> g = {awlc_ptr<T>(out), awlc_ptr<T>(in), f};
        return awlc_launch_strided<2>(L, n, g, "unary");
    };
    return AWLC_DISPATCH(out->dtype, run);
}

int awlc_binary(awl_binary_op op, const awl_view *out, const awl_view *a, const awl_view *b)
{
    if (op < 0 || op >= AWL_BINARY_OP_COUNT)
        return awl_error(AWL_ERR_INVALID, "awl_cuda binary: unknown op %d", (int)op);
    if (!awl_kernel_defined(AWL_KERNEL_BINARY, op, out->dtype))
        return awl_error(AWL_ERR_INVALID, "awl_cuda binary %s: not defined for %s",
                         awl_binary_op_name(op), awl_dtype_name(out->dtype));
    AWLC_TRY_STATUS(awlc_enter(out->data));
    const awl_view *views[3] = {out, a, b};
    awlc_layout<3> L;
    int64_t n = awlc_coalesce<3>(&L, views);
    if (n == 0) return AWL_OK;
    auto run = [&](auto tag) -> int {
        typedef decltype(tag) T;
        binary_op<T> f = {(int)op};
        if (awlc_layout_contiguous<3>(&L))
            return launch_map2(awlc_ptr<T>(out), awlc_ptr<T>(a), awlc_ptr<T>(b), n, f, "binary");
        /* A bias over rows: out and one operand contiguous (rows, cols), the
         * other (0, 1). */
        const int V = pack_width<T>::value;
        int64_t cols = L.ndim == 2 ? L.shape[1] : 0;
        bool plain = L.ndim == 2 && L.stride[0][0] == cols && L.stride[0][1] == 1;
        bool bias_b = plain && L.stride[1][0] == cols && L.stride[1][1] == 1 &&
                      L.stride[2][0] == 0 && L.stride[2][1] == 1;
        bool bias_a = plain && L.stride[2][0] == cols && L.stride[2][1] == 1 &&
                      L.stride[1][0] == 0 && L.stride[1][1] == 1;
        if ((bias_a || bias_b) && cols % V == 0 && cols / V <= UINT32_MAX &&
            aligned16(awlc_ptr<T>(out)) && aligned16(awlc_ptr<T>(a)) && aligned16(awlc_ptr<T>(b))) {
            const T *x = bias_b ? awlc_ptr<T>(a) : awlc_ptr<T>(b);
            const T *y = bias_b ? awlc_ptr<T>(b) : awlc_ptr<T>(a);
            int64_t np = n / V;
            awlc_launch(rowcast_kernel<V, T, binary_op<T>>, awlc_grid_for(np, THREADS), THREADS, 0,
                        awlc_ptr<T>(out), x, y, np, (uint32_t)(cols / V), bias_a, f);
            return awlc_check_launch("binary");
        }
        binary_fn<T> g = {awlc_ptr<T>(out), awlc_ptr<T>(a), awlc_ptr<T>(b), f};
        return awlc_launch_strided<3>(L, n, g, "binary");
    };
    return AWLC_DISPATCH(out->dtype, run);
}

int awlc_where(const awl_view *out, const awl_view *cond, const awl_view *a, const awl_view *b)
{
    AWLC_TRY_STATUS(awlc_enter(out->data));
    const awl_view *views[4] = {out, cond, a, b};
    awlc_layout<4> L;
    int64_t n = awlc_coalesce<4>(&L, views);
    if (n == 0) return AWL_OK;
    size_t ces = awl_dtype_size(cond->dtype);
    const void *cptr = (const char *)cond->data + cond->offset * (int64_t)ces;
    auto run = [&](auto tag) -> int {
        typedef decltype(tag) T;
        where_fn<T> f = {awlc_ptr<T>(out), cptr, cond->dtype, awlc_ptr<T>(a), awlc_ptr<T>(b)};
        return awlc_launch_strided<4>(L, n, f, "where");
    };
    return AWLC_DISPATCH(out->dtype, run);
}

int awlc_random(const awl_view *out, awl_random_kind kind, uint64_t seed, uint64_t offset, double a,
                double b)
{
    AWLC_TRY_STATUS(awlc_enter(out->data));
    const awl_view *views[1] = {out};
    awlc_layout<1> L;
    int64_t n = awlc_coalesce<1>(&L, views);
    if (n == 0) return AWL_OK;
    auto run = [&](auto tag) -> int {
        typedef decltype(tag) T;
        random_fn<T> f = {awlc_ptr<T>(out), (int)kind, seed, offset, a, b};
        return awlc_launch_strided<1>(L, n, f, "random");
    };
    return AWLC_DISPATCH_FLOAT(out->dtype, run);
}

int awlc_gelu_backward(const awl_view *dx, const awl_view *dy, const awl_view *x)
{
    if (dy->dtype != dx->dtype || x->dtype != dx->dtype || !awl_dtype_is_float(dx->dtype))
        return AWL_ERR_UNSUPPORTED;
    AWLC_TRY_STATUS(awlc_enter(dx->data));
    const awl_view *views[3] = {dx, dy, x};
    awlc_layout<3> L;
    int64_t n = awlc_coalesce<3>(&L, views);
    if (n == 0) return AWL_OK;
    if (!awlc_layout_contiguous<3>(&L)) return AWL_ERR_UNSUPPORTED;
    auto run = [&](auto tag) -> int {
        typedef decltype(tag) T;
        return launch_map2(awlc_ptr<T>(dx), awlc_ptr<T>(dy), awlc_ptr<T>(x), n,
                           gelu_backward_op<T>(), "gelu_backward");
    };
    return AWLC_DISPATCH_FLOAT(dx->dtype, run);
}

/* h in out's dtype, or bfloat16 into float32 (a bf16 branch joining the
 * float32 residual stream under autocast); other pairs compose. */
int awlc_dropout_add(const awl_view *out, const awl_view *x, const awl_view *h,
                     const awl_dropout_args *args)
{
    bool mixed = out->dtype == AWL_F32 && h->dtype == AWL_BF16;
    if (x->dtype != out->dtype || !awl_dtype_is_float(out->dtype) ||
        (h->dtype != out->dtype && !mixed))
        return AWL_ERR_UNSUPPORTED;
    AWLC_TRY_STATUS(awlc_enter(out->data));
    const awl_view *views[3] = {out, x, h};
    awlc_layout<3> L;
    int64_t n = awlc_coalesce<3>(&L, views);
    if (n == 0) return AWL_OK;
    if (!awlc_layout_contiguous<3>(&L)) return AWL_ERR_UNSUPPORTED;
    uint64_t seed = args ? args->seed : 0, offset = args ? args->offset : 0;
    uint32_t threshold = args ? awl_dropout_threshold(args->p) : 0;
    double scale = args ? awl_dropout_scale(args->p) : 1.0;
    unsigned grid = awlc_grid_for((n + 3) / 4, 256);
    auto launch = [&](auto tag, auto htag) -> int {
        typedef decltype(tag) T;
        typedef decltype(htag) TH;
        typedef typename Compute<T>::type C;
        T *o = awlc_ptr<T>(out);
        const T *a = awlc_ptr<T>(x);
        const TH *b = awlc_ptr<TH>(h);
        C s = (C)awlc_cast<double>(awlc_cast<T>(scale));
        bool vec = (uintptr_t)o % (4 * sizeof(T)) == 0 && (uintptr_t)a % (4 * sizeof(T)) == 0 &&
                   (uintptr_t)b % (4 * sizeof(TH)) == 0;
        if (vec)
            awlc_launch(dropout_add4_kernel<true, T, TH>, grid, 256, 0, o, a, b, n, seed, offset,
                        threshold, args != NULL, s);
        else
            awlc_launch(dropout_add4_kernel<false, T, TH>, grid, 256, 0, o, a, b, n, seed, offset,
                        threshold, args != NULL, s);
        return awlc_check_launch("dropout_add");
    };
    if (mixed) return launch(float(), awl_bf16());
    auto run = [&](auto tag) -> int { return launch(tag, tag); };
    return AWLC_DISPATCH_FLOAT(out->dtype, run);
}

int awlc_add_dropout(const awl_view *out, const awl_view *x, const awl_view *h,
                     const awl_dropout_args *args)
{
    int64_t n = awl_view_numel(out), nh = awl_view_numel(h);
    if (x->dtype != out->dtype || h->dtype != out->dtype || !awl_dtype_is_float(out->dtype) ||
        awl_view_numel(x) != n || nh == 0 || n % nh != 0 || !awl_view_is_contiguous(out) ||
        !awl_view_is_contiguous(x) || !awl_view_is_contiguous(h))
        return AWL_ERR_UNSUPPORTED;
    AWLC_TRY_STATUS(awlc_enter(out->data));
    if (n == 0) return AWL_OK;
    auto run = [&](auto tag) -> int {
        typedef decltype(tag) T;
        awlc_launch(dropout4_kernel<T, true>, awlc_grid_for((n + 3) / 4, 256), 256, 0,
                    awlc_ptr<T>(out), awlc_ptr<T>(x), awlc_ptr<T>(h), n, nh, args->seed,
                    args->offset, awl_dropout_threshold(args->p),
                    awlc_cast<double>(awlc_cast<T>(awl_dropout_scale(args->p))));
        return awlc_check_launch("add_dropout");
    };
    return AWLC_DISPATCH_FLOAT(out->dtype, run);
}

int awlc_dropout(const awl_view *out, const awl_view *in, const awl_dropout_args *args)
{
    if (in->dtype != out->dtype) {
        /* float32 in, bfloat16 out: the cast and the dropout in one pass */
        int64_t n = awl_view_numel(out);
        if (in->dtype != AWL_F32 || out->dtype != AWL_BF16 || awl_view_numel(in) != n ||
            !awl_view_is_contiguous(in) || !awl_view_is_contiguous(out))
            return AWL_ERR_UNSUPPORTED;
        AWLC_TRY_STATUS(awlc_enter(out->data));
        awlc_launch(dropout4_kernel<awl_bf16, false, float>, awlc_grid_for((n + 3) / 4, 256), 256,
                    0, awlc_ptr<awl_bf16>(out), awlc_ptr<float>(in), nullptr, n, 1, args->seed,
                    args->offset, awl_dropout_threshold(args->p),
                    awlc_cast<double>(awlc_cast<awl_bf16>(awl_dropout_scale(args->p))));
        return awlc_check_launch("dropout");
    }
    AWLC_TRY_STATUS(awlc_enter(out->data));
    const awl_view *views[2] = {out, in};
    awlc_layout<2> L;
    int64_t n = awlc_coalesce<2>(&L, views);
    if (n == 0) return AWL_OK;
    bool contiguous = awlc_layout_contiguous<2>(&L);
    auto run = [&](auto tag) -> int {
        typedef decltype(tag) T;
        dropout_fn<T> f = {awlc_ptr<T>(out),
                           awlc_ptr<T>(in),
                           args->seed,
                           args->offset,
                           awl_dropout_threshold(args->p),
                           awlc_cast<double>(awlc_cast<T>(awl_dropout_scale(args->p)))};
        if (!contiguous) return awlc_launch_strided<2>(L, n, f, "dropout");
        awlc_launch(dropout4_kernel<T, false>, awlc_grid_for((n + 3) / 4, 256), 256, 0, f.out, f.in,
                    nullptr, n, 1, f.seed, f.offset, f.threshold, f.scale);
        return awlc_check_launch("dropout");
    };
    return AWLC_DISPATCH_FLOAT(out->dtype, run);
}
