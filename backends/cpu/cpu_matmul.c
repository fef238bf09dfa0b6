/*
 * backends/cpu/cpu_matmul.c - (batched) matrix products, through awl's own float32
 * product (cpu_gemm.c) and OpenBLAS.
 *
 * out (..., M, N) = a (..., M, K) @ b (..., K, N), or += when accumulating
 * (beta = 1). Every operand is passed to BLAS ?gemm (cpu_blas.c) in place whenever BLAS
 * can describe its layout: a row-major matrix whose column stride is 1 and
 * whose row stride is at least its row length is NoTrans with ld = row stride;
 * one whose row stride is 1 (a transposed view, as backward passes produce)
 * is Trans with ld = column stride. Only an operand with neither layout
 * (both strides > 1, say a slice with step 2) is copied to a contiguous
 * scratch. An output whose rows are strided the other way is handled by
 * computing the transposed product, out^T = b^T a^T.
 *
 * Threads: when there are many small products (attention's per-head score
 * and value products) the batch is split across OpenMP threads, each calling
 * a single-threaded gemm (OpenBLAS's OpenMP build does not thread inside a
 * parallel region). A large product is split the same way, into bands of
 * its rows or columns, one per thread, rather than left to OpenBLAS's own
 * threading: each thread then packs its own copy of one operand, but the
 * threads never wait for each other inside the product. At a GPT's shapes
 * on 2 threads that measured 1.1-1.9x faster (bench_kernels matmul).
 *
 * A linear layer's product with its bias (matmul_bias): awl's own float32
 * product (cpu_gemm.h, on CPUs with AVX-512) adds the bias as it stores
 * each tile of C; otherwise the bias is written into each band just before
 * the band's gemm accumulates onto it (beta = 1). Either way it is the
 * same arithmetic as a copy of the bias and then the product, in one
 * parallel region instead of two. The MLP's GELU is applied band by band,
 * as each band's product is done (matmul_bias_gelu writes gelu(pre) beside
 * the pre-activation; matmul_gelu_backward scales the product by gelu'(pre)).
 * Tile by tile inside the product measured slower: the backward's tiles
 * read gelu'(pre) from 12 rows at a time of a pre-activation that is no
 * longer in the cache, where a band reads it row after row.
 *
 * Float32 products on CPUs with AVX-512 run awl's own code (cpu_gemm.c);
 * everything else, and any product it declines, goes to BLAS.
 */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_blas.h"
#include "backends/cpu/cpu_gemm.h"
#include "backends/cpu/cpu_internal.h"
#include "backends/cpu/cpu_math.h"

/* A batch of matrices: rows x cols with strides (rs, cs) in elements. */
typedef struct mat {
    const char *base;
    int64_t rows, cols, rs, cs;
    int64_t bstrides[AWL_MAX_DIMS];
} mat;

/* How BLAS sees one matrix: transposed or not, and its leading dimension.
 * `copy` when neither layout fits. */
typedef struct mat_layout {
    bool trans, copy;
    int64_t ld;
} mat_layout;

static mat_layout layout_of(const mat *m)
{
    mat_layout l = {false, false, 0};
    /* A unit axis's stride is meaningless; treat it as whatever fits. */
    int64_t cs = m->cols == 1 ? 1 : m->cs;
    int64_t rs = m->rows == 1 ? (m->cols > 1 ? m->cols : 1) : m->rs;
    if (cs == 1 && rs >= m->cols && rs >= 1) {
        l.ld = rs;
        return l;
    }
    rs = m->rows == 1 ? 1 : m->rs;
    cs = m->cols == 1 ? (m->rows > 1 ? m->rows : 1) : m->cs;
    if (rs == 1 && cs >= m->rows && cs >= 1) {
        l.trans = true;
        l.ld = cs;
        return l;
    }
    l.copy = true;
    l.ld = m->cols > 1 ? m->cols : 1;
    return l;
}

/* What is done to a band of C once its product is in (matmul_bias_gelu,
 * matmul_gelu_backward; NULL where nothing is): GELU writes other =
 * gelu(C), C being the pre-activation; GELU_BACKWARD scales C by
 * gelu'(other), other the pre-activation. other is laid out as C, rows ld
 * elements apart. */
typedef struct epilogue {
    enum { EPILOGUE_GELU, EPILOGUE_GELU_BACKWARD } kind;
    char *other;
    int64_t ld;
} epilogue;

/* The epilogue on C's rows [r0, r1) and columns [q0, q1). */
static void apply_epilogue(awl_dtype dtype, const epilogue *ep, char *c, int64_t ldc, int64_t r0,
                           int64_t r1, int64_t q0, int64_t q1)
{
    if (!ep) return;
    const bool forward = ep->kind == EPILOGUE_GELU;
    for (int64_t r = r0; r < r1; r++) {
        if (dtype == AWL_F32) {
            float *restrict x = (float *)c + r * ldc, *restrict y = (float *)ep->other + r * ep->ld;
            if (forward) {
#pragma omp simd
                for (int64_t q = q0; q < q1; q++) y[q] = cpu_gelu_f(x[q]);
            } else {
#pragma omp simd
                for (int64_t q = q0; q < q1; q++) x[q] = x[q] * cpu_gelu_grad_f(y[q]);
            }
        } else {
            typedef double C;
            double *x = (double *)c + r * ldc, *y = (double *)ep->other + r * ep->ld;
            for (int64_t q = q0; q < q1; q++) {
                if (forward)
                    y[q] = AWL_GELU(x[q]);
                else
                    x[q] = x[q] * AWL_GELU_GRAD(y[q]);
            }
        }
    }
}

typedef struct gemm_job {
    awl_dtype dtype;
    int64_t elsize;
    int nbatch_dims;
    int64_t bshape[AWL_MAX_DIMS];
    int64_t nbatch;
    mat a, b, c;
    mat_layout la, lb, lc;
    bool accumulate;
    const char *bias;   /* matmul_bias's, n contiguous elements; NULL: none */
    const epilogue *ep; /* NULL: none */
    int64_t m, n, k;
} gemm_job;

static void mat_from_view(mat *m, const awl_view *v)
{
    int nd = v->ndim;
    m->base = cpu_view_ptr(v);
    m->rows = v->shape[nd - 2];
    m->cols = v->shape[nd - 1];
    m->rs = v->strides[nd - 2];
    m->cs = v->strides[nd - 1];
    for (int d = 0; d < nd - 2; d++) m->bstrides[d] = v->strides[d];
}

static const char *batch_ptr(const gemm_job *j, const mat *m, int64_t batch)
{
    int64_t off = 0;
    for (int d = j->nbatch_dims - 1; d >= 0; d--) {
        off += (batch % j->bshape[d]) * m->bstrides[d];
        batch /= j->bshape[d];
    }
    return m->base + off * j->elsize;
}

/* Copies one strided matrix to contiguous row-major scratch. */
static void pack(const gemm_job *j, char *dst, const char *src, const mat *m)
{
    for (int64_t r = 0; r < m->rows; r++)
        for (int64_t c = 0; c < m->cols; c++)
            memcpy(dst + (r * m->cols + c) * j->elsize, src + (r * m->rs + c * m->cs) * j->elsize,
                   (size_t)j->elsize);
}

/* Products of at most this many rows against a transposed matrix go to
 * skinny_product instead of sgemm. */
#define SKINNY_ROWS 8

/* C (m x n, row-major, ldc) = A B^T + beta C for a few rows: A is m x k
 * (lda), B is stored as n rows of k (ldb), as a linear layer's weight is.
 * A decoding step of a batch of prompts is such a product, one row per
 * prompt. sgemm would first pack B, the weights, into its own layout,
 * reading and writing them once more than the product reads them; here
 * each row of B is read once, from memory, and dotted with A's rows, which
 * stay in the cache. Four rows of A share each load of B. */
static void skinny_product(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                           const float *b, int64_t ldb, double beta, float *c, int64_t ldc)
{
    for (int64_t j = 0; j < n; j++) {
        const float *w = b + j * ldb;
        int64_t i = 0;
        for (; i + 4 <= m; i += 4) {
            const float *x0 = a + i * lda, *x1 = x0 + lda, *x2 = x1 + lda, *x3 = x2 + lda;
            float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
            for (int64_t t = 0; t < k; t++) {
                s0 += x0[t] * w[t];
                s1 += x1[t] * w[t];
                s2 += x2[t] * w[t];
                s3 += x3[t] * w[t];
            }
            const float s[4] = {s0, s1, s2, s3};
            for (int r = 0; r < 4; r++) {
                float *o = c + (i + r) * ldc + j;
                *o = beta != 0.0 ? *o + s[r] : s[r];
            }
        }
        for (; i < m; i++) {
            const float *x = a + i * lda;
            float s = 0.0f;
#pragma omp simd reduction(+ : s)
            for (int64_t t = 0; t < k; t++) s += x[t] * w[t];
            float *o = c + i * ldc + j;
            *o = beta != 0.0 ? *o + s : s;
        }
    }
}

/* C (m x n, row-major, ldc) = alpha A B + beta C through the dtype's BLAS
 * call (awl_cpu_matmul has made sure the library is loaded). */
static void blas_product(awl_dtype dtype, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                         const void *a, int64_t lda, const void *b, int64_t ldb, double beta,
                         void *c, int64_t ldc)
{
    /* One row of C is op(B)^T times a's row; one column, op(A) times b's
     * column: matrix-vector products, which read the matrix once where
     * gemm would pack it first (a decoding step's products are all so). */
    if (m == 1) /* b is k x n, or n x k when tb; a's row has stride lda when ta */
        awl_cpu_blas_gemv(dtype, !tb, tb ? (int)n : (int)k, tb ? (int)k : (int)n, b, (int)ldb, a,
                          ta ? (int)lda : 1, beta, c, 1);
    else if (n == 1) /* a is m x k, or k x m when ta; b's column has stride 1 when tb */
        awl_cpu_blas_gemv(dtype, ta, ta ? (int)k : (int)m, ta ? (int)m : (int)k, a, (int)lda, b,
                          tb ? 1 : (int)ldb, beta, c, (int)ldc);
    else if (dtype == AWL_F32 && m <= SKINNY_ROWS && !ta && tb)
        skinny_product(m, n, k, a, lda, b, ldb, beta, c, ldc);
    else if (dtype == AWL_F32) {
        if (!awl_cpu_gemm_f32(ta, tb, m, n, k, a, lda, b, ldb, beta != 0.0, c, ldc, NULL))
            awl_blas_sgemm(ta, tb, (int)m, (int)n, (int)k, 1.0f, a, (int)lda, b, (int)ldb,
                           (float)beta, c, (int)ldc);
    }
    else
        awl_blas_dgemm(ta, tb, (int)m, (int)n, (int)k, 1.0, a, (int)lda, b, (int)ldb, beta, c,
                       (int)ldc);
}

/* blas_product on one thread. awl has chosen the threads already (the
 * bands below), and OpenBLAS's OpenMP build threads a call made outside a
 * parallel region over omp_get_max_threads(), which it reads at every call:
 * its matrix-vector products would wake every thread from 9,216
 * multiply-adds up, and a decoding step is hundreds of such products. So
 * outside a region the thread count is 1 for the duration of the call
 * (inside one, OpenBLAS runs on the calling thread by itself). */
static void gemm(awl_dtype dtype, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *a,
                 int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc)
{
    if (omp_in_parallel()) {
        blas_product(dtype, ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    blas_product(dtype, ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
    omp_set_num_threads(threads);
}

/* Rows (or columns) per band of a product split between threads: a
 * multiple of 16, so that no band but the last ends in a partial register
 * tile of OpenBLAS's float32 kernels. */
#define BAND_ALIGN 16
/* Multiply-adds per thread below which a product is not split. */
#define SPLIT_GRAIN (1 << 17)
/* The same for a matrix-vector product (one row or one column of C), which
 * reads each element of its matrix once and is bound by memory, not by
 * arithmetic: 32K float32 elements (128 KB) a thread. */
#define GEMV_GRAIN (1 << 15)

/* C's m x n block (row-major, ldc) := the bias row (n elements) on every row. */
static void fill_bias(char *c, int64_t ldc, int64_t m, int64_t n, const char *bias, int64_t es)
{
    for (int64_t r = 0; r < m; r++) memcpy(c + r * ldc * es, bias, (size_t)(n * es));
}

/* len split into parts pieces: the length of each but the last, rounded
 * up to a multiple of BAND_ALIGN. */
static int64_t aligned_share(int64_t len, int64_t parts)
{
    return ((len + parts - 1) / parts + BAND_ALIGN - 1) / BAND_ALIGN * BAND_ALIGN;
}

/* When a product splits along K instead of into bands (gemm_bands): when K
 * is at least SPLIT_K_RATIO times C's longer side, as in a weight's
 * gradient X^T dY (C: in x out, K: every token of the batch), and K's
 * slices are no fewer than the bands would be, and either each slice is
 * at least SPLIT_K_LONG long or the bands would leave threads without work
 * (a side of 192 is 12 bands of 16 on 16 threads). Shorter slices than
 * that measured slower than bands where bands fill every thread
 * (bench_kernels, docs/performance.md). No slice is shorter than
 * SPLIT_K_MIN. */
#define SPLIT_K_RATIO 2
#define SPLIT_K_LONG 256
#define SPLIT_K_MIN 128

static bool k_is_long(int64_t m, int64_t n, int64_t k)
{
    return k >= SPLIT_K_RATIO * (m > n ? m : n);
}

static int k_slices(int nt, int64_t m, int64_t n, int64_t k, int64_t bands)
{
    const int64_t most = k / SPLIT_K_MIN, parts = most < nt ? most : nt;
    if (!k_is_long(m, n, k) || parts < 2 || parts < bands) return 0;
    return k / parts >= SPLIT_K_LONG || bands < nt ? (int)parts : 0;
}

/* c[r][0..n) += part[r][0..n) for rows [r0, r1), n contiguous elements in
 * part (row stride n) and ldc apart in c. */
static void add_rows(awl_dtype dtype, char *c, int64_t ldc, const char *part, int64_t r0,
                     int64_t r1, int64_t n)
{
    for (int64_t r = r0; r < r1; r++) {
        if (dtype == AWL_F32) {
            float *restrict dst = (float *)c + r * ldc;
            const float *restrict src = (const float *)part + r * n;
#pragma omp simd
            for (int64_t q = 0; q < n; q++) dst[q] += src[q];
        } else {
            double *restrict dst = (double *)c + r * ldc;
            const double *restrict src = (const double *)part + r * n;
#pragma omp simd
            for (int64_t q = 0; q < n; q++) dst[q] += src[q];
        }
    }
}

/* gemm over `parts` threads, each multiplying one slice of K: the first
 * adds its product onto C (beta as given; the bias already written there),
 * the others write theirs into scratch, and then every thread adds the
 * partial products onto its share of C's rows, in slice order, so the sum
 * is the same on every run with the same thread count. Rows and columns
 * split would each pack the whole of the unsplit operand, m x K or K x n;
 * slices of K pack only their slice of both, and cost instead (parts - 1)
 * partial products of m x n written and read once. false when the scratch
 * cannot be had (the caller splits rows or columns instead). */
static bool gemm_split_k(int nt, int parts, awl_dtype dtype, bool ta, bool tb, int64_t m, int64_t n,
                         int64_t k, const char *a, int64_t lda, const char *b, int64_t ldb,
                         double beta, char *c, int64_t ldc)
{
    const int64_t es = (int64_t)awl_dtype_size(dtype);
    const int64_t slice = aligned_share(k, parts), size = m * n * es;
    char *partial = malloc((size_t)((parts - 1) * size));
    if (!partial) return false;
    const int64_t rows = (m + nt - 1) / nt;
#pragma omp parallel num_threads(awl_cpu_team(nt))
    {
        const int p = omp_get_thread_num();
        const int64_t k0 = p * slice, w = k - k0 < slice ? k - k0 : slice;
        if (p < parts && w > 0) { /* a's column k0, or row k0 when transposed; b's row k0 */
            const char *ap = a + (ta ? k0 * lda : k0) * es, *bp = b + (tb ? k0 : k0 * ldb) * es;
            if (p == 0)
                gemm(dtype, ta, tb, m, n, w, ap, lda, bp, ldb, beta, c, ldc);
            else
                gemm(dtype, ta, tb, m, n, w, ap, lda, bp, ldb, 0.0, partial + (p - 1) * size, n);
        }
#pragma omp barrier
        const int64_t r0 = p * rows, r1 = r0 + rows < m ? r0 + rows : m;
        if (p < nt && r0 < r1)
            for (int q = 1; q < parts && (int64_t)q * slice < k; q++)
                add_rows(dtype, c, ldc, partial + (q - 1) * size, r0, r1, n);
    }
    free(partial);
    return true;
}

/* One band of C (m x n from cb) = the product plus the bias, in one
 * float32 product of awl's own (cpu_gemm.h) that adds the bias as it
 * stores each tile of C. false when that product does not take it: then
 * the caller writes the bias over the band and multiplies onto it. */
static bool product_with_bias(awl_dtype dtype, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                              const char *a, int64_t lda, const char *b, int64_t ldb, char *cb,
                              int64_t ldc, const char *bias)
{
    return dtype == AWL_F32 && bias &&
           awl_cpu_gemm_f32(ta, tb, m, n, k, (const float *)a, lda, (const float *)b, ldb, false,
                            (float *)cb, ldc, (const float *)bias);
}

/* gemm over nt threads, each computing a band of C with a single-threaded
 * call (nt = 1: one call on this thread), or a slice of K (k_slices says
 * when). Each thread packs its
 * own copy of the operand it does not split, so the bands run along C's
 * longer side: rows of C and of a when m >= n, else columns of C and of b.
 * With a bias (n contiguous elements; NULL: none) each band is its product
 * plus its part of the bias (product_with_bias, or the bias written first
 * and the product added onto it). */
static void gemm_bands(int nt, awl_dtype dtype, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                       const char *a, int64_t lda, const char *b, int64_t ldb, double beta, char *c,
                       int64_t ldc, const char *bias, const epilogue *ep)
{
    const int64_t es = (int64_t)awl_dtype_size(dtype);
    if (nt <= 1) {
        if (!product_with_bias(dtype, ta, tb, m, n, k, a, lda, b, ldb, c, ldc, bias)) {
            if (bias) fill_bias(c, ldc, m, n, bias, es);
            gemm(dtype, ta, tb, m, n, k, a, lda, b, ldb, bias ? 1.0 : beta, c, ldc);
        }
        apply_epilogue(dtype, ep, c, ldc, 0, m, 0, n);
        return;
    }
    const bool rows = m >= n;
    const int64_t len = rows ? m : n;
    const int64_t band = aligned_share(len, nt);
    const int parts = k_slices(nt, m, n, k, (len + band - 1) / band);
    if (parts) {
        if (bias) fill_bias(c, ldc, m, n, bias, es);
        if (gemm_split_k(nt, parts, dtype, ta, tb, m, n, k, a, lda, b, ldb, bias ? 1.0 : beta, c,
                         ldc)) {
            if (ep) {
#pragma omp parallel for num_threads(awl_cpu_team(nt)) schedule(static)
                for (int64_t r = 0; r < m; r++) apply_epilogue(dtype, ep, c, ldc, r, r + 1, 0, n);
            }
            return;
        }
        bias = NULL; /* in place already; the bands add onto it */
        beta = 1.0;
    }
#pragma omp parallel for num_threads(awl_cpu_team(nt)) schedule(static, 1)
    for (int64_t i0 = 0; i0 < len; i0 += band) {
        const int64_t w = len - i0 < band ? len - i0 : band;
        if (rows) { /* a's row i0 is i0 rows down, or i0 columns across when transposed */
            const char *ab = a + (ta ? i0 : i0 * lda) * es;
            char *cb = c + i0 * ldc * es;
            if (!product_with_bias(dtype, ta, tb, w, n, k, ab, lda, b, ldb, cb, ldc, bias)) {
                if (bias) fill_bias(cb, ldc, w, n, bias, es);
                gemm(dtype, ta, tb, w, n, k, ab, lda, b, ldb, bias ? 1.0 : beta, cb, ldc);
            }
            apply_epilogue(dtype, ep, c, ldc, i0, i0 + w, 0, n);
        } else { /* b's column i0 is i0 columns across, or i0 rows down when transposed */
            const char *bb = b + (tb ? i0 * ldb : i0) * es, *bias_b = bias ? bias + i0 * es : NULL;
            char *cb = c + i0 * es;
            if (!product_with_bias(dtype, ta, tb, m, w, k, a, lda, bb, ldb, cb, ldc, bias_b)) {
                if (bias) fill_bias(cb, ldc, m, w, bias_b, es);
                gemm(dtype, ta, tb, m, w, k, a, lda, bb, ldb, bias ? 1.0 : beta, cb, ldc);
            }
            apply_epilogue(dtype, ep, c, ldc, 0, m, i0, i0 + w);
        }
    }
}

/* Threads to split one m x n x k product between. */
static int band_threads(int64_t m, int64_t n, int64_t k)
{
    int nt = awl_cpu_threads_for(m * n * k, m == 1 || n == 1 ? GEMV_GRAIN : SPLIT_GRAIN);
    const int64_t longer = m > n ? m : n, slices = k_is_long(m, n, k) ? k / SPLIT_K_MIN : 0;
    /* bands of at least BAND_ALIGN, or slices of K of at least SPLIT_K_MIN */
    const int64_t most = longer / BAND_ALIGN > slices ? longer / BAND_ALIGN : slices;
    if (nt > most) nt = most > 1 ? (int)most : 1;
    return nt;
}

/* One product of the batch. scratch holds room for the operands that need
 * packing (a, then b, then c), or is NULL when none does. The product runs
 * in bands on nt threads when nt > 1. */
static void run_one(const gemm_job *j, int64_t batch, char *scratch, int nt)
{
    const char *a = batch_ptr(j, &j->a, batch), *b = batch_ptr(j, &j->b, batch);
    char *c = (char *)batch_ptr(j, &j->c, batch);
    char *next = scratch;
    if (j->la.copy) {
        pack(j, next, a, &j->a);
        a = next;
        next += j->m * j->k * j->elsize;
    }
    if (j->lb.copy) {
        pack(j, next, b, &j->b);
        b = next;
        next += j->k * j->n * j->elsize;
    }
    double beta = j->accumulate ? 1.0 : 0.0;
    if (j->lc.copy) {
        /* Compute into scratch, then add or copy into the strided output. */
        gemm_bands(nt, j->dtype, j->la.trans, j->lb.trans, j->m, j->n, j->k, a, j->la.ld, b,
                   j->lb.ld, 0.0, next, j->n, NULL, NULL);
        for (int64_t r = 0; r < j->m; r++)
            for (int64_t q = 0; q < j->n; q++) {
                char *dst = c + (r * j->c.rs + q * j->c.cs) * j->elsize;
                double v = cpu_load(j->dtype, next, r * j->n + q);
                if (j->accumulate) v += cpu_load(j->dtype, dst, 0);
                cpu_store(j->dtype, dst, 0, v);
            }
    } else if (j->lc.trans) {
        /* out^T (n x m) = b^T a^T: each operand's transposition flips. */
        gemm_bands(nt, j->dtype, !j->lb.trans, !j->la.trans, j->n, j->m, j->k, b, j->lb.ld, a,
                   j->la.ld, beta, c, j->lc.ld, NULL, NULL);
    } else {
        gemm_bands(nt, j->dtype, j->la.trans, j->lb.trans, j->m, j->n, j->k, a, j->la.ld, b,
                   j->lb.ld, beta, c, j->lc.ld, j->bias, j->ep);
    }
}

static int64_t scratch_bytes(const gemm_job *j)
{
    return ((j->la.copy ? j->m * j->k : 0) + (j->lb.copy ? j->k * j->n : 0) +
            (j->lc.copy ? j->m * j->n : 0)) *
           j->elsize;
}

/* Products below this many multiply-adds gain more from one thread per
 * product than from OpenBLAS threading each. */
#define SMALL_GEMM (1 << 22)

/* out = a @ b (+= when accumulating; + bias when bias is not NULL, n
 * contiguous elements, and out is a matrix that BLAS writes in place). */
static int matmul(const char *op, const awl_view *out, const awl_view *a, const awl_view *b,
                  bool accumulate, const char *bias, const epilogue *ep)
{
    if (out->dtype != AWL_F32 && out->dtype != AWL_F64)
        return awl_error(AWL_ERR_INVALID, "awl_cpu %s: %s is not supported (float32, float64)", op,
                         awl_dtype_name(out->dtype));
    int status = awl_cpu_blas_load(op);
    if (status < 0) return status;
    gemm_job j;
    j.dtype = out->dtype;
    j.elsize = (int64_t)awl_dtype_size(out->dtype);
    j.accumulate = accumulate;
    j.bias = bias;
    j.ep = ep;
    j.nbatch_dims = out->ndim - 2;
    j.nbatch = 1;
    for (int d = 0; d < j.nbatch_dims; d++) {
        j.bshape[d] = out->shape[d];
        j.nbatch *= out->shape[d];
    }
    mat_from_view(&j.a, a);
    mat_from_view(&j.b, b);
    mat_from_view(&j.c, out);
    j.m = j.c.rows;
    j.n = j.c.cols;
    j.k = j.a.cols;
    if (j.nbatch == 0 || j.m == 0 || j.n == 0) return AWL_OK;
    if (j.k == 0 && bias) {
        fill_bias(cpu_view_ptr(out), j.c.rs, j.m, j.n, bias, j.elsize);
        return AWL_OK;
    }
    if (j.k == 0) return accumulate ? AWL_OK : awl_cpu_fill(out, 0.0);
    j.la = layout_of(&j.a);
    j.lb = layout_of(&j.b);
    j.lc = layout_of(&j.c);

    int64_t bytes = scratch_bytes(&j);
    int64_t macs = j.m * j.n * j.k;
    int nt = j.nbatch > 1 && macs < SMALL_GEMM ? awl_cpu_threads_for(j.nbatch * macs, 1 << 16) : 1;
    if (nt > j.nbatch) nt = (int)j.nbatch;
    char *scratch = NULL;
    if (bytes) {
        scratch = malloc((size_t)(bytes * nt));
        if (!scratch)
            return awl_error(AWL_ERR_OOM, "awl_cpu %s: out of memory for %lld bytes of scratch", op,
                             (long long)(bytes * nt));
    }
    if (nt > 1) {
#pragma omp parallel for num_threads(awl_cpu_team(nt)) schedule(static, awl_cpu_chunk(j.nbatch, nt))
        for (int64_t i = 0; i < j.nbatch; i++) {
            char *mine = scratch ? scratch + bytes * omp_get_thread_num() : NULL;
            run_one(&j, i, mine, 1);
        }
    } else {
        /* one product at a time, each split into bands */
        int bands = band_threads(j.m, j.n, j.k);
        for (int64_t i = 0; i < j.nbatch; i++) run_one(&j, i, scratch, bands);
    }
    free(scratch);
    return AWL_OK;
}

int awl_cpu_matmul(const awl_view *out, const awl_view *a, const awl_view *b, bool accumulate)
{
    return matmul("matmul", out, a, b, accumulate, NULL, NULL);
}

int awl_cpu_matmul_bias(const awl_view *out, const awl_view *a, const awl_view *b,
                        const awl_view *bias)
{
    mat c;
    mat_from_view(&c, out);
    mat_layout lc = layout_of(&c);
    const char *bp = cpu_view_ptr(bias);
    if ((bias->shape[0] <= 1 || bias->strides[0] == 1) && !lc.copy && !lc.trans)
        return matmul("matmul_bias", out, a, b, false, bp, NULL);
    /* An output BLAS cannot write in place, or a strided bias: the bias
     * written over the output first, then the product added onto it. */
    const awl_dtype dt = out->dtype;
    char *o = cpu_view_ptr(out);
    for (int64_t r = 0; r < c.rows; r++)
        for (int64_t q = 0; q < c.cols; q++)
            cpu_store(dt, o, r * c.rs + q * c.cs, cpu_load(dt, bp, q * bias->strides[0]));
    return matmul("matmul_bias", out, a, b, true, NULL, NULL);
}

/* The GELU products take the plain case only: 2-D, c and other written in
 * place by BLAS with one row stride, K > 0, a contiguous bias; the rest is
 * AWL_ERR_UNSUPPORTED (awl_mlp then composes). */
static bool plain_pair(const awl_view *c, const awl_view *other, const awl_view *a)
{
    if (c->ndim != 2 || other->ndim != 2 || a->ndim != 2 || a->shape[1] == 0 ||
        (c->dtype != AWL_F32 && c->dtype != AWL_F64))
        return false;
    mat m;
    mat_from_view(&m, c);
    mat_layout l = layout_of(&m);
    return !l.copy && !l.trans && other->strides[0] == c->strides[0] &&
           (c->shape[1] <= 1 || (c->strides[1] == 1 && other->strides[1] == 1));
}

int awl_cpu_matmul_bias_gelu(const awl_view *out, const awl_view *pre, const awl_view *a,
                             const awl_view *b, const awl_view *bias)
{
    if (!plain_pair(pre, out, a) || (bias && bias->shape[0] > 1 && bias->strides[0] != 1))
        return AWL_ERR_UNSUPPORTED;
    epilogue ep = {EPILOGUE_GELU, cpu_view_ptr(out), out->strides[0]};
    return matmul("matmul_bias_gelu", pre, a, b, false, bias ? cpu_view_ptr(bias) : NULL, &ep);
}

int awl_cpu_matmul_gelu_backward(const awl_view *out, const awl_view *a, const awl_view *b,
                                 const awl_view *pre)
{
    if (!plain_pair(out, pre, a)) return AWL_ERR_UNSUPPORTED;
    epilogue ep = {EPILOGUE_GELU_BACKWARD, cpu_view_ptr(pre), pre->strides[0]};
    return matmul("matmul_gelu_backward", out, a, b, false, NULL, &ep);
}
