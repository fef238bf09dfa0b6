/*
 * backends/cuda/cuda_index.cu - index_select, index_add, gather, scatter_add.
 *
 * The reads (index_select, gather) are one thread per output element on the
 * shared strided engine: the index operand and the source get extra "views"
 * over the output's shape (zero strides where they do not move), so the
 * layout coalescing of cuda_common.cuh applies unchanged and a contiguous
 * embedding lookup becomes a plain two-dimensional walk.
 *
 * The adjoints must be deterministic (repeated indices summed in a fixed
 * order), so no floating-point atomics:
 *
 *   - scatter_add: a line of idx/src along `axis` only ever writes into the
 *     matching line of out, so one thread per line walks its line in order.
 *     The usual use (cross-entropy's one-hot, a line of length 1) is fully
 *     parallel.
 *   - index_add (embedding backward, many source rows onto few destination
 *     rows): the (index, position) pairs are sorted with CUB's stable radix
 *     sort, so each destination row's sources form one run in position
 *     order. The sorted pairs are then cut into windows of 64, one block
 *     each, and the runs cut each window into pieces, each summed in order
 *     (a long piece by the whole block, a thread per column; a short one,
 *     as a large vocabulary's runs mostly are, by one warp). A run inside
 *     one window is added onto its row by that block; the pieces of a run
 *     that crosses windows go to scratch and a second kernel adds them, in
 *     window order, onto the row. So a frequent token's run (with a
 *     character vocabulary every run is long: a space is one token in six)
 *     is summed by as many blocks as it spans at once, not walked by one
 *     block from end to end. How a run is cut depends only on where it
 *     lies among the sorted pairs: the result is the same on every run
 *     (not the serial loop's rounding, but as close). The sort costs two
 *     short launches and R * 16 bytes of scratch, the pieces' sums R / 32
 *     floats a column.
 *
 * Index checks (check_indices) run on the device too, so that no indices
 * are copied to the host: a kernel compares each index with its limit and
 * the first one out of range goes into a small per-device record, which a
 * copy queued after the check mirrors into pinned host memory. The
 * backend's next synchronize or copy_to_host, once the device has caught
 * up, reads the mirror and reports it (awlc_index_faults). The four kernels
 * above skip an index out of range (index_select and gather write 0) in the
 * meantime, so bad indices never reach memory they do not own.
 */
#include <mutex>
#include <type_traits>

#include <cub/device/device_radix_sort.cuh>

#include "backends/cuda/cuda_common.cuh"

namespace
{

/* A view over `shape` (ndim dims) with the given strides. */
awl_view shaped(const awl_view *like, int ndim, const int64_t *shape, const int64_t *strides)
{
    awl_view v = *like;
    v.ndim = ndim;
    for (int d = 0; d < ndim; d++) {
        v.shape[d] = shape[d];
        v.strides[d] = strides[d];
    }
    return v;
}

template <typename T> struct select_fn {
    T *out;
    const int32_t *idx;
    const T *src;
    int64_t src_row_stride, rows;
    __device__ void operator()(int64_t, const int64_t *off) const
    {
        int64_t r = idx[off[1]];
        out[off[0]] = r >= 0 && r < rows ? src[r * src_row_stride + off[2]] : awlc_cast<T>(0.0f);
    }
};

/* The sorted (index, position) pairs, and how rows and columns map: the
 * sources of destination row keys[p] are the rows vals[p] of src (positions
 * in idx), and the keys ascend, so each row's sources are one run of p. */
template <typename T> struct add_args {
    typedef typename Compute<T>::type A;
    T *dst;
    const T *src;
    const int32_t *keys, *vals;
    int64_t R, inner, V; /* pairs; columns; dst's rows (a key outside [0, V) is skipped) */
    int64_t dst_row_stride;
    awlc_layout<2> cols; /* inner columns: dst and src strides */
    awlc_layout<1> rows; /* src rows (idx's shape): src strides */
    A *head, *tail;      /* (windows, inner) each: the pieces of runs that cross windows */
};

const int WIN = 64;          /* pairs a block takes: a window */
const int ADD_THREADS = 256; /* 8 warps */
const int ADD_WARPS = ADD_THREADS / 32;
const int SHORT_PIECE = 8;  /* a piece shorter than this is summed by one warp */
const int COLS_AT_ONCE = 4; /* columns a thread sums side by side (loads in flight) */
static_assert(WIN == 64, "a window's piece starts are one 64-bit mask");

/* The end of the piece starting at s: the next start in the mask, or n. */
__device__ __forceinline__ int piece_end(unsigned long long starts, int s, int n)
{
    unsigned long long later = s + 1 < 64 ? starts >> (s + 1) << (s + 1) : 0;
    return later ? __ffsll((long long)later) - 1 : n;
}

/* The sums, in order, of sources s..e-1 of a window (their src row offsets
 * in off) at columns j, j + step, ... (COLS_AT_ONCE of them, those below
 * inner): into part[column] where part is given, else added onto row. */
template <typename T>
__device__ void sum_piece(const add_args<T> &a, const int64_t *off, int s, int e, int64_t j,
                          int64_t step, typename Compute<T>::type *part, T *row)
{
    typedef typename Compute<T>::type A;
    int64_t cd[COLS_AT_ONCE], cs[COLS_AT_ONCE];
    A acc[COLS_AT_ONCE];
#pragma unroll
    for (int c = 0; c < COLS_AT_ONCE; c++) {
        int64_t o[2] = {0, 0};
        if (j + c * step < a.inner) awlc_offsets<2, int64_t>(a.cols, j + c * step, o);
        cd[c] = o[0], cs[c] = o[1], acc[c] = 0;
    }
#pragma unroll 4
    for (int q = s; q < e; q++)
#pragma unroll
        for (int c = 0; c < COLS_AT_ONCE; c++)
            if (j + c * step < a.inner) acc[c] += awlc_cast<A>(a.src[off[q] + cs[c]]);
#pragma unroll
    for (int c = 0; c < COLS_AT_ONCE; c++) {
        if (j + c * step >= a.inner) continue;
        if (part)
            part[j + c * step] = acc[c];
        else
            row[cd[c]] = awlc_cast<T>(awlc_cast<A>(row[cd[c]]) + acc[c]);
    }
}

/* Block w takes the window of pairs [64 w, 64 w + 64). The runs cut it into
 * pieces; each piece's sources are summed in order, a piece of SHORT_PIECE
 * or more by the whole block (a thread per column), a shorter one by one
 * warp (the pieces dealt round the warps; a lane per column). A run wholly
 * inside the window is added onto its row here. A run that crosses into
 * the window from the one before leaves its piece in head[w]; one that goes
 * on into the next window, but began in this one, leaves it in tail[w], and
 * index_add_carry_kernel adds the pieces up. So a run of any length is
 * summed by as many blocks as it has windows, and how it is cut depends
 * only on where it lies among the sorted pairs: the result is the same on
 * every run. */
template <typename T>
__global__ void __launch_bounds__(ADD_THREADS) index_add_window_kernel(add_args<T> a)
{
    awlc_await_previous_kernel();
    typedef typename Compute<T>::type A;
    __shared__ int32_t key[WIN];
    __shared__ int64_t off[WIN];
    __shared__ unsigned starts[WIN / 32];
    const int64_t p0 = (int64_t)blockIdx.x * WIN;
    const int n = (int)min((int64_t)WIN, a.R - p0);
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    if (tid < WIN) {
        bool start = false;
        if (tid < n) {
            int64_t p = p0 + tid, o[1];
            key[tid] = a.keys[p];
            awlc_offsets<1, int64_t>(a.rows, (int64_t)a.vals[p], o);
            off[tid] = o[0];
            start = tid == 0 || a.keys[p - 1] != key[tid];
        }
        unsigned m = __ballot_sync(0xffffffffu, start);
        if (lane == 0) starts[warp] = m;
    }
    __syncthreads();
    const unsigned long long mask = (unsigned long long)starts[1] << 32 | starts[0];
    const bool before = p0 > 0 && a.keys[p0 - 1] == key[0];
    const bool after = p0 + n < a.R && a.keys[p0 + n] == key[n - 1];
    for (int s = 0, i = 0, e; s < n; s = e, i++) {
        e = piece_end(mask, s, n);
        int k = key[s];
        if (k < 0 || k >= a.V) continue;
        A *part = s == 0 && before  ? a.head + blockIdx.x * a.inner
                  : e == n && after ? a.tail + blockIdx.x * a.inner
                                    : nullptr;
        T *row = a.dst + (int64_t)k * a.dst_row_stride;
        if (e - s >= SHORT_PIECE)
            for (int64_t j = tid; j < a.inner; j += ADD_THREADS * COLS_AT_ONCE)
                sum_piece(a, off, s, e, j, ADD_THREADS, part, row);
        else if (i % ADD_WARPS == warp)
            for (int64_t j = lane; j < a.inner; j += 32 * COLS_AT_ONCE)
                sum_piece(a, off, s, e, j, 32, part, row);
    }
}

/* Block w: where window w has a tail (a run that begins in it and goes
 * on), that run's further pieces are the heads of windows w + 1 .. last;
 * tail, then the heads in window order, are added onto its row. */
template <typename T>
__global__ void __launch_bounds__(ADD_THREADS) index_add_carry_kernel(add_args<T> a)
{
    awlc_await_previous_kernel();
    typedef typename Compute<T>::type A;
    const int64_t w = blockIdx.x, p0 = w * WIN, pn = min(a.R, p0 + WIN);
    const int32_t k = a.keys[pn - 1];
    const bool began_before = p0 > 0 && a.keys[p0 - 1] == k;
    if (pn == a.R || a.keys[pn] != k || began_before || k < 0 || k >= a.V) return;
    /* the last window that starts with k (the keys ascend) */
    int64_t lo = w + 1, hi = (a.R - 1) / WIN;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        if (a.keys[mid * WIN] == k)
            lo = mid;
        else
            hi = mid - 1;
    }
    T *row = a.dst + (int64_t)k * a.dst_row_stride;
    for (int64_t j = threadIdx.x; j < a.inner; j += ADD_THREADS) {
        A sum = a.tail[w * a.inner + j];
#pragma unroll 4
        for (int64_t v = w + 1; v <= lo; v++) sum += a.head[v * a.inner + j];
        int64_t o[2];
        awlc_offsets<2, int64_t>(a.cols, j, o);
        row[o[0]] = awlc_cast<T>(awlc_cast<A>(row[o[0]]) + sum);
    }
}

__global__ void iota_kernel(int32_t *out, int64_t n)
{
    awlc_await_previous_kernel();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        out[i] = (int32_t)i;
}

template <typename T> struct gather_fn {
    T *out;
    const int32_t *idx;
    const T *in;
    int64_t axis_stride, limit;
    __device__ void operator()(int64_t, const int64_t *off) const
    {
        int64_t j = idx[off[1]];
        out[off[0]] = j >= 0 && j < limit ? in[off[2] + j * axis_stride] : awlc_cast<T>(0.0f);
    }
};

/* One thread per line: off[] are the line's starts in out, idx and src. */
template <typename T> struct scatter_fn {
    T *out;
    const int32_t *idx;
    const T *src;
    int64_t J, out_axis, idx_axis, src_axis, limit;
    __device__ void operator()(int64_t, const int64_t *off) const
    {
        typedef typename Compute<T>::type A;
        for (int64_t j = 0; j < J; j++) {
            int64_t k = idx[off[1] + j * idx_axis];
            if (k < 0 || k >= limit) continue;
            T *o = out + off[0] + k * out_axis;
            *o = awlc_cast<T>(awlc_cast<A>(*o) + awlc_cast<A>(src[off[2] + j * src_axis]));
        }
    }
};

/* ---- index checks ---- */

/* The first index out of range since the last report: site 0 for none,
 * else 1 + the call site's slot in `sites`. */
struct index_fault {
    int site;
    int index;
    long long limit;
};

struct check_fn {
    const int32_t *idx;
    int64_t limit;
    int site;
    index_fault *fault;
    __device__ void operator()(int64_t, const int64_t *off) const
    {
        int32_t v = idx[off[0]];
        if ((v < 0 || v >= limit) && atomicCAS(&fault->site, 0, site) == 0) {
            fault->index = v;
            fault->limit = limit;
        }
    }
};

const int MAX_SITES = 16;
std::mutex check_mu;
index_fault *fault_dev[AWLC_MAX_DEVICES], *fault_host[AWLC_MAX_DEVICES];
bool checked[AWLC_MAX_DEVICES];  /* a check ran since the last report */
const char *sites[MAX_SITES][2]; /* op, what */
int n_sites;

/* The slot (1-based) of (op, what), added when new; the last slot is
 * shared once the table is full. Under check_mu. */
int site_of(const char *op, const char *what)
{
    for (int i = 0; i < n_sites; i++)
        if (sites[i][0] == op && sites[i][1] == what) return i + 1;
    if (n_sites < MAX_SITES) {
        sites[n_sites][0] = op, sites[n_sites][1] = what;
        n_sites++;
    }
    return n_sites;
}

int bits_for(int64_t v)
{
    int b = 1;
    while (b < 31 && ((int64_t)1 << b) < v) b++;
    return b;
}

} // namespace

int awlc_index_select(const awl_view *out, const awl_view *src, const awl_view *idx)
{
    AWLC_TRY_STATUS(awlc_enter(out->data));
    int ni = idx->ndim, nd = out->ndim;
    int64_t is[AWL_MAX_DIMS] = {0}, ss[AWL_MAX_DIMS] = {0};
    for (int d = 0; d < ni; d++) is[d] = idx->strides[d];
    for (int d = ni; d < nd; d++) ss[d] = src->strides[d - ni + 1];
    awl_view iv = shaped(idx, nd, out->shape, is), sv = shaped(src, nd, out->shape, ss);
    const awl_view *views[3] = {out, &iv, &sv};
    awlc_layout<3> L;
    int64_t n = awlc_coalesce<3>(&L, views);
    if (n == 0) return AWL_OK;
    auto run = [&](auto tag) -> int {
        typedef decltype(tag) T;
        select_fn<T> f = {awlc_ptr<T>(out), awlc_ptr<int32_t>(idx), awlc_ptr<T>(src),
                          src->strides[0], src->shape[0]};
        return awlc_launch_strided<3>(L, n, f, "index_select");
    };
    return AWLC_DISPATCH(out->dtype, run);
}

int awlc_index_add(const awl_view *dst, const awl_view *idx, const awl_view *src)
{
    AWLC_TRY_STATUS(awlc_enter(dst->data));
    int64_t R = awl_view_numel(idx), inner = 1;
    for (int d = 1; d < dst->ndim; d++) inner *= dst->shape[d];
    if (R == 0 || inner == 0) return AWL_OK;
    if (R > INT32_MAX)
        return awl_error(AWL_ERR_INVALID, "awl_cuda index_add: more than 2^31 indices");

    /* Scratch: keys in, keys out, values in, values out, CUB's, then the
     * windows' heads and tails (in Compute's type: float64 for float64 and
     * int32 sums, float32 otherwise). */
    size_t cub_bytes = 0;
    int bits = bits_for(dst->shape[0]);
    AWLC_TRY(cub::DeviceRadixSort::SortPairs(NULL, cub_bytes, (const int32_t *)NULL,
                                             (int32_t *)NULL, (const int32_t *)NULL,
                                             (int32_t *)NULL, (int)R, 0, bits),
             "index_add sort");
    const int64_t windows = (R + WIN - 1) / WIN;
    auto rounded = [](size_t n) { return (n + 255) & ~(size_t)255; };
    size_t arr = rounded((size_t)R * 4), cub_part = rounded(cub_bytes);
    size_t pieces = rounded((size_t)(windows * inner) *
                            (dst->dtype == AWL_F64 || dst->dtype == AWL_I32 ? 8 : 4));
    size_t bytes = 4 * arr + cub_part + 2 * pieces;
    char *scratch = (char *)awlc_scratch_alloc(bytes);
    if (!scratch) return AWL_ERR_OOM;
    int32_t *k_in = (int32_t *)scratch, *k_out = (int32_t *)(scratch + arr);
    int32_t *v_in = (int32_t *)(scratch + 2 * arr), *v_out = (int32_t *)(scratch + 3 * arr);
    void *cub_tmp = scratch + 4 * arr;
    char *heads = scratch + 4 * arr + cub_part, *tails = heads + pieces;

    awl_view kv = *idx;
    kv.data = k_in;
    kv.offset = 0;
    int64_t stride = 1;
    for (int d = kv.ndim - 1; d >= 0; d--) {
        kv.strides[d] = stride;
        stride *= kv.shape[d];
    }
    int st = awlc_copy(&kv, idx);
    if (st == AWL_OK) {
        awlc_launch(iota_kernel, awlc_grid_for(R, 256), 256, 0, v_in, R);
        st = awlc_check_launch("index_add iota");
    }
    if (st == AWL_OK) {
        cudaError_t err = cub::DeviceRadixSort::SortPairs(cub_tmp, cub_bytes, k_in, k_out, v_in,
                                                          v_out, (int)R, 0, bits);
        st = err == cudaSuccess ? awlc_check_launch("index_add sort")
                                : awlc_fail(err, "index_add sort");
    }
    if (st == AWL_OK) {
        /* Column layouts over dst's trailing dims: dst and src strides. */
        int nt = dst->ndim - 1, ni = idx->ndim;
        awl_view dcol = shaped(dst, nt, dst->shape + 1, dst->strides + 1);
        awl_view scol = shaped(src, nt, dst->shape + 1, src->strides + ni);
        const awl_view *cviews[2] = {&dcol, &scol};
        awl_view srow = shaped(src, ni, idx->shape, src->strides);
        const awl_view *rviews[1] = {&srow};
        auto run = [&](auto tag) -> int {
            typedef decltype(tag) T;
            typedef typename Compute<T>::type A;
            add_args<T> a;
            a.dst = awlc_ptr<T>(dst);
            a.src = awlc_ptr<T>(src);
            a.keys = k_out;
            a.vals = v_out;
            a.R = R;
            a.inner = inner;
            a.V = dst->shape[0];
            a.dst_row_stride = dst->strides[0];
            awlc_coalesce<2>(&a.cols, cviews);
            awlc_coalesce<1>(&a.rows, rviews);
            static_assert(
                sizeof(A) ==
                    (std::is_same<T, double>::value || std::is_same<T, int32_t>::value ? 8 : 4),
                "the scratch's size above");
            a.head = (A *)heads;
            a.tail = (A *)tails;
            awlc_launch(index_add_window_kernel<T>, (unsigned)windows, ADD_THREADS, 0, a);
            AWLC_TRY_STATUS(awlc_check_launch("index_add (windows)"));
            awlc_launch(index_add_carry_kernel<T>, (unsigned)windows, ADD_THREADS, 0, a);
            return awlc_check_launch("index_add (runs across windows)");
        };
        st = AWLC_DISPATCH(dst->dtype, run);
    }
    awlc_scratch_free(scratch, bytes);
    return st;
}

int awlc_gather(const awl_view *out, const awl_view *in, int axis, const awl_view *idx)
{
    AWLC_TRY_STATUS(awlc_enter(out->data));
    int64_t ins[AWL_MAX_DIMS];
    for (int d = 0; d < in->ndim; d++) ins[d] = d == axis ? 0 : in->strides[d];
    awl_view iv = shaped(in, out->ndim, out->shape, ins);
    const awl_view *views[3] = {out, idx, &iv};
    awlc_layout<3> L;
    int64_t n = awlc_coalesce<3>(&L, views);
    if (n == 0) return AWL_OK;
    auto run = [&](auto tag) -> int {
        typedef decltype(tag) T;
        gather_fn<T> f = {awlc_ptr<T>(out), awlc_ptr<int32_t>(idx), awlc_ptr<T>(in),
                          in->strides[axis], in->shape[axis]};
        return awlc_launch_strided<3>(L, n, f, "gather");
    };
    return AWLC_DISPATCH(out->dtype, run);
}

int awlc_scatter_add(const awl_view *out, int axis, const awl_view *idx, const awl_view *src)
{
    AWLC_TRY_STATUS(awlc_enter(out->data));
    int64_t lines_shape[AWL_MAX_DIMS];
    for (int d = 0; d < idx->ndim; d++) lines_shape[d] = d == axis ? 1 : idx->shape[d];
    awl_view ov = shaped(out, idx->ndim, lines_shape, out->strides);
    awl_view iv = shaped(idx, idx->ndim, lines_shape, idx->strides);
    awl_view sv = shaped(src, idx->ndim, lines_shape, src->strides);
    const awl_view *views[3] = {&ov, &iv, &sv};
    awlc_layout<3> L;
    int64_t n = awlc_coalesce<3>(&L, views);
    int64_t J = idx->shape[axis];
    if (n == 0 || J == 0) return AWL_OK;
    auto run = [&](auto tag) -> int {
        typedef decltype(tag) T;
        scatter_fn<T> f = {
            awlc_ptr<T>(out),   awlc_ptr<int32_t>(idx), awlc_ptr<T>(src),   J,
            out->strides[axis], idx->strides[axis],     src->strides[axis], out->shape[axis]};
        return awlc_launch_strided<3>(L, n, f, "scatter_add");
    };
    return AWLC_DISPATCH(out->dtype, run);
}

int awlc_check_indices(const awl_view *idx, int64_t limit, const char *op, const char *what)
{
    AWLC_TRY_STATUS(awlc_enter(idx->data));
    int device = 0;
    AWLC_TRY(cudaGetDevice(&device), "cudaGetDevice");
    const awl_view *views[1] = {idx};
    awlc_layout<1> L;
    int64_t n = awlc_coalesce<1>(&L, views);
    if (n == 0) return AWL_OK;
    int site;
    {
        std::lock_guard<std::mutex> lock(check_mu);
        if (!fault_dev[device]) {
            AWLC_TRY(cudaMalloc(&fault_dev[device], sizeof(index_fault)), "index check record");
            AWLC_TRY(cudaMallocHost(&fault_host[device], sizeof(index_fault)),
                     "index check mirror");
            AWLC_TRY(cudaMemset(fault_dev[device], 0, sizeof(index_fault)), "index check record");
            fault_host[device]->site = 0;
        }
        site = site_of(op, what);
        checked[device] = true;
    }
    check_fn f = {awlc_ptr<int32_t>(idx), limit, site, fault_dev[device]};
    AWLC_TRY_STATUS(awlc_launch_strided<1>(L, n, f, "check_indices"));
    AWLC_TRY(cudaMemcpyAsync(fault_host[device], fault_dev[device], sizeof(index_fault),
                             cudaMemcpyDeviceToHost, 0),
             "index check mirror");
    return AWL_OK;
}

int awlc_index_faults(int device)
{
    std::lock_guard<std::mutex> lock(check_mu);
    if (device < 0 || device >= AWLC_MAX_DEVICES || !checked[device]) return AWL_OK;
    checked[device] = false;
    index_fault f = *fault_host[device];
    if (f.site == 0) return AWL_OK;
    fault_host[device]->site = 0;
    AWLC_TRY(cudaMemset(fault_dev[device], 0, sizeof(index_fault)), "index check record");
    return awl_error(AWL_ERR_INVALID, "%s: index %d out of range for %lld %s", sites[f.site - 1][0],
                     f.index, f.limit, sites[f.site - 1][1]);
}
