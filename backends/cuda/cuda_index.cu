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
 *     order. A run shorter than 64 (a large vocabulary's are mostly one
 *     long) is added in order by one warp, 32 columns at a time; a longer
 *     one, listed by that first kernel, by blocks of 8 warps (a block per 32
 *     columns) that take every 8th source in order, their sums then added
 *     in warp order. Which way a run goes, and so how it is grouped, depends
 *     only on its length: the result is the same on every run (not the
 *     serial loop's rounding for long runs, but as close). The sort costs
 *     two short launches and R * 16 bytes of scratch.
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
#include <algorithm>
#include <mutex>

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

/* Each destination run: position p starts a run when sorted key p differs
 * from key p - 1, and its sources vals[p..end) (positions in idx order) go
 * into row key[p] of dst. Rows and columns are mapped through small
 * layouts. */
template <typename T> struct run_args {
    T *dst;
    const T *src;
    const int32_t *keys, *vals;
    int64_t R, inner, V; /* V: dst's rows (a key outside [0, V) is skipped) */
    int64_t dst_row_stride;
    awlc_layout<2> cols; /* inner columns: dst and src strides */
    awlc_layout<1> rows; /* src rows (idx's shape): src strides */
};

const int ADD_COLS = 32;  /* columns of a warp at a time: one per lane */
const int ADD_GROUPS = 8; /* warps of a block */
/* Runs at least this long take a whole block (eight warps on each 32
 * columns); a shorter run is summed by one warp, its rows one after
 * another. With 64, the short runs of a character vocabulary's rarer
 * characters took 0.80 ms of a gpt2-124m step's embedding backward, against
 * 0.11 with 8 (docs/cuda.md). */
const int LONG_RUN = 8;

/* The end of the run starting at p: the first q > p whose key differs
 * (keys ascend). Steps of 1, 2, 4, ... past p, then a binary search in
 * the last step: one read for a run of one, as with a large vocabulary. */
__device__ __forceinline__ int64_t run_end(const int32_t *keys, int64_t p, int64_t R)
{
    int32_t v = keys[p];
    int64_t lo = p + 1, step = 1;
    while (lo < R && keys[lo] == v) {
        lo += step;
        step *= 2;
    }
    int64_t hi = lo < R ? lo : R;
    lo = lo - step / 2; /* the last probe that matched */
    if (step == 1) return hi;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (keys[mid] == v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The sum, in order, of sources from, from + by, ... (before end) at column offset cj. */
template <typename T>
__device__ __forceinline__ typename Compute<T>::type run_sum(const run_args<T> &a, int64_t from,
                                                             int64_t end, int by, int64_t cj)
{
    typename Compute<T>::type acc = 0;
#pragma unroll 4
    for (int64_t q = from; q < end; q += by) {
        int64_t rr[1];
        awlc_offsets<1, int64_t>(a.rows, (int64_t)a.vals[q], rr);
        acc += awlc_cast<typename Compute<T>::type>(a.src[rr[0] + cj]);
    }
    return acc;
}

/* A warp per sorted position (blocks stride over them). A warp whose
 * position starts a run shorter than LONG_RUN (every run of a large
 * vocabulary) adds it alone, all columns, 32 at a time, the sources in
 * order. A longer run goes on a list for index_add_long_kernel; the list's
 * order varies from run to run, but each run only ever writes its own row. */
template <typename T>
__global__ void __launch_bounds__(ADD_COLS *ADD_GROUPS)
    index_add_short_kernel(run_args<T> a, int *n_long, int64_t *long_runs)
{
    typedef typename Compute<T>::type A;
    int lane = threadIdx.x % ADD_COLS;
    for (int64_t p = (int64_t)blockIdx.x * ADD_GROUPS + threadIdx.x / ADD_COLS; p < a.R;
         p += (int64_t)gridDim.x * ADD_GROUPS) {
        if ((p > 0 && a.keys[p - 1] == a.keys[p]) || a.keys[p] < 0 || a.keys[p] >= a.V) continue;
        int64_t end = run_end(a.keys, p, a.R);
        if (end - p >= LONG_RUN) {
            if (lane == 0) {
                int i = atomicAdd(n_long, 1);
                long_runs[2 * i] = p;
                long_runs[2 * i + 1] = end;
            }
            continue;
        }
        T *row = a.dst + (int64_t)a.keys[p] * a.dst_row_stride;
        for (int64_t j = lane; j < a.inner; j += ADD_COLS) {
            int64_t cj[2];
            awlc_offsets<2, int64_t>(a.cols, j, cj);
            A acc = run_sum(a, p, end, 1, cj[1]);
            row[cj[0]] = awlc_cast<T>(awlc_cast<A>(row[cj[0]]) + acc);
        }
    }
}

/* Block (i, column tile): long run i of the list and 32 columns; warp g
 * sums sources p + g, p + g + 8, ... and the eight partial sums are added in
 * warp order onto dst. The split depends only on the run's length, so every
 * run adds the same numbers in the same order each time, and a long run (a
 * frequent token; every run of a character vocabulary) is eight chains, not
 * one. The list's length is read on the device; blocks take its runs in
 * turn (blockIdx.x, then gridDim.x further on). */
template <typename T>
__global__ void __launch_bounds__(ADD_COLS *ADD_GROUPS)
    index_add_long_kernel(run_args<T> a, const int *n_long, const int64_t *long_runs)
{
    typedef typename Compute<T>::type A;
    __shared__ A part[ADD_GROUPS][ADD_COLS];
    const int n = *n_long;
    int lane = threadIdx.x % ADD_COLS, grp = threadIdx.x / ADD_COLS;
    for (int i = blockIdx.x; i < n; i += gridDim.x) {
        int64_t p = long_runs[2 * i], end = long_runs[2 * i + 1];
        T *row = a.dst + (int64_t)a.keys[p] * a.dst_row_stride;
        for (int64_t j0 = (int64_t)blockIdx.y * ADD_COLS; j0 < a.inner;
             j0 += (int64_t)gridDim.y * ADD_COLS) {
            int64_t j = j0 + lane, cj[2] = {0, 0};
            if (j < a.inner) awlc_offsets<2, int64_t>(a.cols, j, cj);
            part[grp][lane] = j < a.inner ? run_sum(a, p + grp, end, ADD_GROUPS, cj[1]) : A(0);
            __syncthreads();
            if (grp == 0 && j < a.inner) {
                A sum = awlc_cast<A>(row[cj[0]]);
#pragma unroll
                for (int g = 0; g < ADD_GROUPS; g++) sum += part[g][lane];
                row[cj[0]] = awlc_cast<T>(sum);
            }
            __syncthreads();
        }
    }
}

__global__ void iota_kernel(int32_t *out, int64_t n)
{
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

    /* Scratch: keys in, keys out, values in, values out, then CUB's. */
    size_t cub_bytes = 0;
    int bits = bits_for(dst->shape[0]);
    AWLC_TRY(cub::DeviceRadixSort::SortPairs(NULL, cub_bytes, (const int32_t *)NULL,
                                             (int32_t *)NULL, (const int32_t *)NULL,
                                             (int32_t *)NULL, (int)R, 0, bits),
             "index_add sort");
    size_t arr = ((size_t)R * 4 + 255) & ~(size_t)255;
    size_t list = 256 + (size_t)(R / LONG_RUN + 1) * 2 * sizeof(int64_t); /* count, (p, end) */
    size_t bytes = 4 * arr + list + cub_bytes;
    char *scratch = (char *)awlc_scratch_alloc(bytes);
    if (!scratch) return AWL_ERR_OOM;
    int32_t *k_in = (int32_t *)scratch, *k_out = (int32_t *)(scratch + arr);
    int32_t *v_in = (int32_t *)(scratch + 2 * arr), *v_out = (int32_t *)(scratch + 3 * arr);
    int *n_long = (int *)(scratch + 4 * arr);
    int64_t *long_runs = (int64_t *)(scratch + 4 * arr + 256);
    void *cub_tmp = scratch + 4 * arr + list;

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
        cudaError_t err = cudaMemsetAsync(n_long, 0, sizeof(int));
        if (err != cudaSuccess) st = awlc_fail(err, "index_add");
    }
    if (st == AWL_OK) {
        iota_kernel<<<awlc_grid_for(R, 256), 256>>>(v_in, R);
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
            run_args<T> a;
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
            int64_t blocks = std::min<int64_t>((R + ADD_GROUPS - 1) / ADD_GROUPS, 4096);
            index_add_short_kernel<T>
                <<<(unsigned)blocks, ADD_COLS * ADD_GROUPS>>>(a, n_long, long_runs);
            AWLC_TRY_STATUS(awlc_check_launch("index_add (short runs)"));
            /* the list's length is known on the device only: blocks walk
             * it, two a multiprocessor (a run each when it is short) */
            const int64_t gx = std::min<int64_t>(R / LONG_RUN, 2 * awlc_sm_count());
            dim3 grid((unsigned)std::max<int64_t>(gx, 1),
                      (unsigned)std::min<int64_t>((inner + ADD_COLS - 1) / ADD_COLS, 65535));
            index_add_long_kernel<T><<<grid, ADD_COLS * ADD_GROUPS>>>(a, n_long, long_runs);
            return awlc_check_launch("index_add (long runs)");
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
