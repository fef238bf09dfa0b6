/*
 * backends/student/solution/student_matmul.c - milestone 5, solved.
 *
 * The naive product (three loops through the strides, the sum in double)
 * is kept as the reference the fast one is measured against. The blocked
 * one copies each operand of a batch into contiguous double tiles (which
 * removes every stride, broadcast and transpose from the inner loop), then
 * runs the loops in i, k, j order: the innermost loop walks rows of b and
 * a row of the output with stride 1, which the compiler vectorises, four
 * steps of k at a time, and a block of output rows stays in cache while k
 * sweeps. Rows of the output
 * are split between OpenMP threads; each output element is summed in the
 * same order whatever the thread count.
 */
#include <stdlib.h>
#include <string.h>

#include "backends/student/student_internal.h"

/* The view of batch `batch` (row-major over the batch axes) of a
 * (batch..., R, C) view, as a (R, C) view. */
static awl_view matrix_of(const awl_view *v, int64_t batch, const int64_t *bshape, int nb)
{
    awl_view m = *v;
    for (int d = nb - 1; d >= 0; d--) {
        m.offset += (batch % bshape[d]) * v->strides[d];
        batch /= bshape[d];
    }
    m.ndim = 2;
    m.shape[0] = v->shape[nb];
    m.shape[1] = v->shape[nb + 1];
    m.strides[0] = v->strides[nb];
    m.strides[1] = v->strides[nb + 1];
    return m;
}

/* out = a @ b (+ out) for (M, K) @ (K, N), through the strides. */
static void matmul_naive(const awl_view *out, const awl_view *a, const awl_view *b, bool accumulate)
{
    int64_t M = out->shape[0], N = out->shape[1], K = a->shape[1];
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            int64_t e = out->offset + i * out->strides[0] + j * out->strides[1];
            double s = accumulate ? student_get(out, e) : 0;
            for (int64_t k = 0; k < K; k++)
                s += student_get(a, a->offset + i * a->strides[0] + k * a->strides[1]) *
                     student_get(b, b->offset + k * b->strides[0] + j * b->strides[1]);
            student_set(out, e, s);
        }
}

/* A (R, C) view copied into contiguous doubles. */
static void pack(const awl_view *m, double *dst)
{
    for (int64_t r = 0; r < m->shape[0]; r++)
        for (int64_t c = 0; c < m->shape[1]; c++)
            dst[r * m->shape[1] + c] =
                student_get(m, m->offset + r * m->strides[0] + c * m->strides[1]);
}

#define ROWS 16 /* output rows per block */

static int matmul_blocked(const awl_view *out, const awl_view *a, const awl_view *b,
                          bool accumulate)
{
    int64_t M = out->shape[0], N = out->shape[1], K = a->shape[1];
    double *pa = malloc((size_t)(M * K + 1) * sizeof *pa);
    double *pb = malloc((size_t)(K * N + 1) * sizeof *pb);
    double *pc = malloc((size_t)(M * N + 1) * sizeof *pc);
    if (!pa || !pb || !pc) {
        free(pa), free(pb), free(pc);
        return awl_error(AWL_ERR_OOM, "student matmul: out of memory for %lld x %lld x %lld",
                         (long long)M, (long long)K, (long long)N);
    }
    pack(a, pa);
    pack(b, pb);
    if (accumulate)
        pack(out, pc);
    else
        memset(pc, 0, (size_t)(M * N) * sizeof *pc);
#pragma omp parallel for schedule(static)
    for (int64_t i0 = 0; i0 < M; i0 += ROWS) {
        int64_t i1 = i0 + ROWS < M ? i0 + ROWS : M;
        /* four steps of k at once: each load and store of an output row
         * then serves four multiply-adds instead of one */
        int64_t k = 0;
        for (; k + 4 <= K; k += 4)
            for (int64_t i = i0; i < i1; i++) {
                const double *ar = pa + i * K + k;
                const double *restrict b0 = pb + k * N, *restrict b1 = b0 + N,
                                       *restrict b2 = b1 + N, *restrict b3 = b2 + N;
                double *restrict crow = pc + i * N;
                for (int64_t j = 0; j < N; j++)
                    crow[j] += ar[0] * b0[j] + ar[1] * b1[j] + ar[2] * b2[j] + ar[3] * b3[j];
            }
        for (; k < K; k++)
            for (int64_t i = i0; i < i1; i++) {
                const double aik = pa[i * K + k], *restrict brow = pb + k * N;
                double *restrict crow = pc + i * N;
                for (int64_t j = 0; j < N; j++) crow[j] += aik * brow[j];
            }
    }
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++)
            student_set(out, out->offset + i * out->strides[0] + j * out->strides[1],
                        pc[i * N + j]);
    free(pa), free(pb), free(pc);
    return AWL_OK;
}

int awl_student_matmul(const awl_view *out, const awl_view *a, const awl_view *b, bool accumulate)
{
    int nb = out->ndim - 2;
    int64_t batches = 1;
    for (int d = 0; d < nb; d++) batches *= out->shape[d];
    for (int64_t t = 0; t < batches; t++) {
        awl_view o = matrix_of(out, t, out->shape, nb), x = matrix_of(a, t, out->shape, nb),
                 y = matrix_of(b, t, out->shape, nb);
        if (o.shape[0] * o.shape[1] * x.shape[1] < 4096) { /* small: no packing */
            matmul_naive(&o, &x, &y, accumulate);
            continue;
        }
        int rc = matmul_blocked(&o, &x, &y, accumulate);
        if (rc < 0) return rc;
    }
    return AWL_OK;
}
