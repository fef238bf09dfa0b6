/*
 * backends/cpu/cpu_iter.c - walking several strided views at once.
 *
 * See cpu_internal.h for the idea. Two choices worth knowing:
 *
 *   - Axes are never reordered, only merged, so the walk is in row-major
 *     order of the output's logical shape. Random fills depend on that order,
 *     and an output is almost always contiguous, so reordering axes by stride
 *     would rarely help.
 *   - Parallel work is split over the flat element range, not over rows:
 *     a contiguous tensor of 16M elements is one row after merging, and a
 *     (16M, 2) transpose has millions of tiny rows; an even flat split serves
 *     both. Chunks start at multiples of 64 elements so that two threads do
 *     not write the same cache line of a contiguous output.
 */
#include "backends/cpu/cpu_internal.h"

#include <omp.h>

int awl_cpu_threads_for(int64_t work, int64_t grain)
{
    if (work <= grain || omp_in_parallel()) return 1;
    int64_t want = work / grain;
    int max = omp_get_max_threads();
    return want < max ? (int)want : max;
}

int awl_cpu_team(int nt)
{
    if (nt <= 1) return 1;
    int max = omp_get_max_threads();
    return nt > max ? nt : max;
}

void awl_cpu_iter_init(cpu_iter *it, int nop, const awl_view *const *views)
{
    const awl_view *out = views[0];
    it->nop = nop;
    it->ndim = 0;
    it->numel = 1;
    for (int k = 0; k < nop; k++) {
        it->base[k] = cpu_view_ptr(views[k]);
        it->elsize[k] = (int64_t)awl_dtype_size(views[k]->dtype);
    }
    for (int d = 0; d < out->ndim; d++) {
        int64_t size = out->shape[d];
        it->numel *= size;
        if (size == 1) continue;
        int m = it->ndim;
        /* Merge with the previous kept axis when, in every operand, stepping
         * the previous axis once equals stepping this one `size` times. */
        bool merge = m > 0;
        for (int k = 0; k < nop && merge; k++)
            merge = it->strides[k][m - 1] == views[k]->strides[d] * size;
        if (merge) {
            it->shape[m - 1] *= size;
            for (int k = 0; k < nop; k++) it->strides[k][m - 1] = views[k]->strides[d];
        } else {
            it->shape[m] = size;
            for (int k = 0; k < nop; k++) it->strides[k][m] = views[k]->strides[d];
            it->ndim++;
        }
    }
    if (it->ndim == 0) {
        it->ndim = 1;
        it->shape[0] = 1;
        for (int k = 0; k < nop; k++) it->strides[k][0] = 0;
    }
}

/* One segment per (partial) row, in row-major order. */
void awl_cpu_iter_walk(const cpu_iter *it, int64_t begin, int64_t end, cpu_segment_fn fn,
                       const void *ctx)
{
    const int last = it->ndim - 1;
    const int64_t row = it->shape[last];
    int64_t idx[AWL_MAX_DIMS];
    char *ptr[CPU_MAX_OPERANDS];
    int64_t inner[CPU_MAX_OPERANDS];

    int64_t rem = begin;
    for (int d = last; d >= 0; d--) {
        idx[d] = rem % it->shape[d];
        rem /= it->shape[d];
    }
    for (int k = 0; k < it->nop; k++) {
        int64_t off = 0;
        for (int d = 0; d <= last; d++) off += idx[d] * it->strides[k][d];
        ptr[k] = it->base[k] + off * it->elsize[k];
        inner[k] = it->strides[k][last];
    }

    int64_t pos = begin;
    while (pos < end) {
        int64_t n = row - idx[last];
        if (n > end - pos) n = end - pos;
        fn(n, pos, ptr, inner, ctx);
        pos += n;
        if (pos >= end) break;
        /* Step to the start of the next row, carrying into outer axes. */
        for (int k = 0; k < it->nop; k++) ptr[k] -= idx[last] * inner[k] * it->elsize[k];
        idx[last] = 0;
        for (int d = last - 1; d >= 0; d--) {
            for (int k = 0; k < it->nop; k++) ptr[k] += it->strides[k][d] * it->elsize[k];
            if (++idx[d] < it->shape[d]) break;
            for (int k = 0; k < it->nop; k++)
                ptr[k] -= it->shape[d] * it->strides[k][d] * it->elsize[k];
            idx[d] = 0;
        }
    }
}

void awl_cpu_iter_run(const cpu_iter *it, int64_t grain, cpu_segment_fn fn, const void *ctx)
{
    if (it->numel == 0) return;
    int nt = awl_cpu_threads_for(it->numel, grain);
    if (nt == 1) {
        awl_cpu_iter_walk(it, 0, it->numel, fn, ctx);
        return;
    }
    int64_t chunk = (it->numel + nt - 1) / nt;
    chunk = (chunk + 63) & ~(int64_t)63;
#pragma omp parallel num_threads(awl_cpu_team(nt))
    {
        int64_t begin = (int64_t)omp_get_thread_num() * chunk;
        int64_t end = begin + chunk < it->numel ? begin + chunk : it->numel;
        if (begin < end) awl_cpu_iter_walk(it, begin, end, fn, ctx);
    }
}
