/*
 * backends/cpu/cpu_fused.c - fused softmax, layernorm, cross-entropy and AdamW.
 *
 * Each kernel does in one or two passes over a row what the composed version
 * does in many primitive calls, and each is the plain textbook formula, so
 * the file doubles as a reference. They handle float32 only (the training
 * dtype); any other dtype, or a layout they do not expect, returns
 * AWL_ERR_UNSUPPORTED without a message and the framework composes the op
 * from primitives instead (which is also what float64 gradient checks use).
 *
 * Numerics: row sums (softmax denominators, layernorm moments, dot products)
 * accumulate in double; exponentials are taken of x - max(x) so nothing
 * overflows. Layernorm's row sums run as `omp simd` reductions: a few
 * partial sums side by side instead of one chain of dependent adds (the
 * order is fixed by the build, so results stay reproducible). Rows are
 * independent and split between threads; the one cross-row sum
 * (layernorm's dweight and dbias) is done over fixed chunks of rows whose
 * partials are added in chunk order, so the result does not depend on the
 * number of threads.
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>

#include "backends/cpu/cpu_internal.h"
#include "backends/cpu/cpu_philox.h"
#include "backends/cpu/cpu_math.h"

/* (rows, n) float32, contiguous: the layout every row kernel here reads. */
static bool rows_f32(const awl_view *v)
{
    return v && v->dtype == AWL_F32 && v->ndim >= 1 && awl_view_is_contiguous(v);
}

/* A float32 or int32 vector of n elements laid out along one axis (any
 * stride, 0 included), as a pointer and a stride; false otherwise. */
static bool vector_of(const awl_view *v, awl_dtype dtype, int64_t n, char **ptr, int64_t *stride)
{
    if (!v || v->dtype != dtype || awl_view_numel(v) != n) return false;
    *stride = 1;
    for (int d = 0; d < v->ndim; d++)
        if (v->shape[d] != 1) *stride = v->strides[d];
    *ptr = cpu_view_ptr(v);
    /* More than one axis of size > 1 is not a vector walk. */
    int big = 0;
    for (int d = 0; d < v->ndim; d++) big += v->shape[d] != 1;
    return big <= 1;
}

static int64_t last_dim(const awl_view *v) { return v->ndim ? v->shape[v->ndim - 1] : 1; }

/* A vector of n floats `stride` apart as a contiguous one: p itself when
 * stride is 1 (or p is NULL), else a copy in *copy (malloc'd; the caller
 * frees it). false when the copy cannot be had. The row loops that read it
 * then vectorise with unit strides. */
static bool unit_stride(const char *p, int64_t stride, int64_t n, const float **out, float **copy)
{
    *copy = NULL;
    *out = (const float *)p;
    if (!p || stride == 1 || n <= 1) return true;
    *copy = malloc((size_t)n * sizeof(float));
    if (!*copy) return false;
    for (int64_t j = 0; j < n; j++) (*copy)[j] = ((const float *)p)[j * stride];
    *out = *copy;
    return true;
}

/* max over x[0..n) */
static float row_max(const float *x, int64_t n)
{
    float m = -INFINITY;
    for (int64_t j = 0; j < n; j++) m = x[j] > m ? x[j] : m;
    return m;
}

/* ---- softmax ---------------------------------------------------------------- */

/* in, out (rows, n): out = softmax(in) or log_softmax(in) along n. */
int awl_cpu_softmax_forward(const awl_view *out, const awl_view *in, bool log)
{
    if (!rows_f32(out) || !rows_f32(in)) return AWL_ERR_UNSUPPORTED;
    const int64_t n = last_dim(in), rows = n ? awl_view_numel(in) / n : 0;
    const float *x0 = (const float *)cpu_view_ptr(in);
    float *y0 = (float *)cpu_view_ptr(out);
    int nt = awl_cpu_threads_for(rows * n, CPU_GRAIN_COSTLY);
#pragma omp parallel for num_threads(awl_cpu_team(nt)) schedule(static, awl_cpu_chunk(rows, nt))
    for (int64_t r = 0; r < rows; r++) {
        const float *x = x0 + r * n;
        float *y = y0 + r * n;
        const float m = row_max(x, n);
        double sum = 0;
        if (log) {
            for (int64_t j = 0; j < n; j++) sum += cpu_expf(x[j] - m);
            const float shift = m + (float)logf((float)sum);
            for (int64_t j = 0; j < n; j++) y[j] = x[j] - shift;
        } else {
            for (int64_t j = 0; j < n; j++) {
                y[j] = cpu_expf(x[j] - m);
                sum += y[j];
            }
            const float inv = (float)(1.0 / sum);
            for (int64_t j = 0; j < n; j++) y[j] *= inv;
        }
    }
    return AWL_OK;
}

/* dx, dy, y (rows, n): softmax: dx = y (dy - sum(dy y)); log_softmax:
 * dx = dy - exp(y) sum(dy). */
int awl_cpu_softmax_backward(const awl_view *dx, const awl_view *dy, const awl_view *y, bool log)
{
    if (!rows_f32(dx) || !rows_f32(dy) || !rows_f32(y)) return AWL_ERR_UNSUPPORTED;
    const int64_t n = last_dim(y), rows = n ? awl_view_numel(y) / n : 0;
    const float *g0 = (const float *)cpu_view_ptr(dy), *y0 = (const float *)cpu_view_ptr(y);
    float *d0 = (float *)cpu_view_ptr(dx);
    int nt = awl_cpu_threads_for(rows * n, log ? CPU_GRAIN_COSTLY : CPU_GRAIN_CHEAP);
#pragma omp parallel for num_threads(awl_cpu_team(nt)) schedule(static, awl_cpu_chunk(rows, nt))
    for (int64_t r = 0; r < rows; r++) {
        const float *g = g0 + r * n, *yr = y0 + r * n;
        float *d = d0 + r * n;
        double acc = 0;
        if (log) {
            for (int64_t j = 0; j < n; j++) acc += g[j];
            const float s = (float)acc;
            for (int64_t j = 0; j < n; j++) d[j] = g[j] - cpu_expf(yr[j]) * s;
        } else {
            for (int64_t j = 0; j < n; j++) acc += (double)g[j] * yr[j];
            const float s = (float)acc;
            for (int64_t j = 0; j < n; j++) d[j] = yr[j] * (g[j] - s);
        }
    }
    return AWL_OK;
}

/* ---- layernorm -------------------------------------------------------------- */

/* x, out (rows, C); weight, bias (C) or NULL; mean, rstd (rows) float32.
 * out = (x - mean) * rstd * weight + bias, rstd = 1 / sqrt(var + eps) with the
 * biased variance. The float32 mean and rstd are the ones saved, and also the
 * ones used here, so forward and backward agree exactly. */
int awl_cpu_layernorm_forward(const awl_view *out, const awl_view *mean, const awl_view *rstd,
                              const awl_view *x, const awl_view *weight, const awl_view *bias,
                              double eps)
{
    if (!rows_f32(out) || !rows_f32(x)) return AWL_ERR_UNSUPPORTED;
    const int64_t C = last_dim(x), rows = C ? awl_view_numel(x) / C : 0;
    char *pm, *pr, *pw = NULL, *pb = NULL;
    int64_t sm, sr, sw = 0, sb = 0;
    if (!vector_of(mean, AWL_F32, rows, &pm, &sm) || !vector_of(rstd, AWL_F32, rows, &pr, &sr) ||
        (weight && !vector_of(weight, AWL_F32, C, &pw, &sw)) ||
        (bias && !vector_of(bias, AWL_F32, C, &pb, &sb)))
        return AWL_ERR_UNSUPPORTED;
    const float *x0 = (const float *)cpu_view_ptr(x), *w, *b;
    float *y0 = (float *)cpu_view_ptr(out), *m0 = (float *)pm, *r0 = (float *)pr, *wcopy, *bcopy;
    bool have_w = unit_stride(pw, sw, C, &w, &wcopy), have_b = unit_stride(pb, sb, C, &b, &bcopy);
    if (!have_w || !have_b) {
        free(wcopy);
        free(bcopy);
        return awl_error(AWL_ERR_OOM, "awl_cpu layernorm_forward: out of memory (%lld floats)",
                         (long long)C);
    }
    int nt = awl_cpu_threads_for(rows * C, CPU_GRAIN_CHEAP);
#pragma omp parallel for num_threads(awl_cpu_team(nt)) schedule(static, awl_cpu_chunk(rows, nt))
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x0 + r * C;
        float *y = y0 + r * C;
        double s = 0, ss = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t j = 0; j < C; j++) s += xr[j];
        const double mu = s / (double)C;
#pragma omp simd reduction(+ : ss)
        for (int64_t j = 0; j < C; j++) ss += (xr[j] - mu) * (xr[j] - mu);
        const float m = (float)mu, rs = (float)(1.0 / sqrt(ss / (double)C + eps));
        m0[r * sm] = m;
        r0[r * sr] = rs;
        /* branches outside the loops, which then vectorise */
        if (w && b) {
#pragma omp simd
            for (int64_t j = 0; j < C; j++) y[j] = (xr[j] - m) * rs * w[j] + b[j];
        } else {
#pragma omp simd
            for (int64_t j = 0; j < C; j++) y[j] = (xr[j] - m) * rs;
            if (w)
#pragma omp simd
                for (int64_t j = 0; j < C; j++) y[j] *= w[j];
            if (b)
#pragma omp simd
                for (int64_t j = 0; j < C; j++) y[j] += b[j];
        }
    }
    free(wcopy);
    free(bcopy);
    return AWL_OK;
}

/* Rows per chunk of layernorm's dweight/dbias partial sums: a function of the
 * row count only, never of the thread count. */
static int64_t ln_chunk_rows(int64_t rows)
{
    int64_t c = (rows + 255) / 256;
    return c < 32 ? 32 : c;
}

/* dy, x, dx (rows, C); weight (C) or NULL; mean, rstd (rows) from forward;
 * dweight, dbias (C) written, each may be NULL; dx_add (rows, C) or NULL;
 * dx_copy (rows, C) bfloat16 or NULL: dx rounded, written beside it.
 * With xhat = (x - mean) rstd and g = dy * weight:
 *   dx = rstd (g - mean(g) - xhat mean(g xhat)) [+ dx_add],
 *   dweight = sum over rows of dy xhat, dbias = sum over rows of dy. */
int awl_cpu_layernorm_backward(const awl_view *dx, const awl_view *dweight, const awl_view *dbias,
                               const awl_view *dy, const awl_view *x, const awl_view *weight,
                               const awl_view *mean, const awl_view *rstd, const awl_view *dx_add,
                               const awl_view *dx_copy)
{
    if (!rows_f32(dx) || !rows_f32(dy) || !rows_f32(x) || (dx_add && !rows_f32(dx_add)) ||
        (dx_copy && (dx_copy->dtype != AWL_BF16 || !awl_view_is_contiguous(dx_copy) ||
                     awl_view_numel(dx_copy) != awl_view_numel(dx))))
        return AWL_ERR_UNSUPPORTED;
    const int64_t C = last_dim(x), rows = C ? awl_view_numel(x) / C : 0;
    char *pm, *pr, *pw = NULL, *pdw = NULL, *pdb = NULL;
    int64_t sm, sr, sw = 0, sdw = 0, sdb = 0;
    if (!vector_of(mean, AWL_F32, rows, &pm, &sm) || !vector_of(rstd, AWL_F32, rows, &pr, &sr) ||
        (weight && !vector_of(weight, AWL_F32, C, &pw, &sw)) ||
        (dweight && !vector_of(dweight, AWL_F32, C, &pdw, &sdw)) ||
        (dbias && !vector_of(dbias, AWL_F32, C, &pdb, &sdb)))
        return AWL_ERR_UNSUPPORTED;
    const float *g0 = (const float *)cpu_view_ptr(dy), *x0 = (const float *)cpu_view_ptr(x);
    const float *w, *m0 = (const float *)pm, *r0 = (const float *)pr;
    float *wcopy;
    if (!unit_stride(pw, sw, C, &w, &wcopy))
        return awl_error(AWL_ERR_OOM, "awl_cpu layernorm_backward: out of memory (%lld floats)",
                         (long long)C);
    float *d0 = (float *)cpu_view_ptr(dx);
    const float *add0 = dx_add ? (const float *)cpu_view_ptr(dx_add) : NULL;
    awl_bf16 *copy0 = dx_copy ? (awl_bf16 *)cpu_view_ptr(dx_copy) : NULL;

    const bool partials = dweight || dbias;
    const int64_t chunk = ln_chunk_rows(rows), nchunks = (rows + chunk - 1) / chunk;
    /* Per chunk: C partial sums of dy*xhat, then C of dy. */
    double *part = NULL;
    if (partials && nchunks > 0) {
        part = calloc((size_t)(nchunks * 2 * C), sizeof *part);
        if (!part) {
            free(wcopy);
            return awl_error(AWL_ERR_OOM, "awl_cpu layernorm_backward: out of memory (%lld x %lld)",
                             (long long)nchunks, (long long)C);
        }
    }
    int nt = awl_cpu_threads_for(rows * C, CPU_GRAIN_CHEAP);
#pragma omp parallel for num_threads(awl_cpu_team(nt)) schedule(static, awl_cpu_chunk(nchunks, nt))
    for (int64_t c = 0; c < nchunks; c++) {
        double *pw_sum = part ? part + c * 2 * C : NULL, *pb_sum = pw_sum ? pw_sum + C : NULL;
        const int64_t r1 = (c + 1) * chunk < rows ? (c + 1) * chunk : rows;
        for (int64_t r = c * chunk; r < r1; r++) {
            const float *g = g0 + r * C, *xr = x0 + r * C;
            float *d = d0 + r * C;
            const float m = m0[r * sm], rs = r0[r * sr];
            double sg = 0, sgx = 0;
            /* with the weight's branch or its stride inside, GCC left this
             * loop scalar: a chain of dependent double adds, most of the
             * kernel's time */
            if (w) {
#pragma omp simd reduction(+ : sg, sgx)
                for (int64_t j = 0; j < C; j++) {
                    const float xhat = (xr[j] - m) * rs, gj = g[j] * w[j];
                    sg += gj;
                    sgx += (double)gj * xhat;
                }
            } else {
#pragma omp simd reduction(+ : sg, sgx)
                for (int64_t j = 0; j < C; j++) {
                    const float xhat = (xr[j] - m) * rs;
                    sg += g[j];
                    sgx += (double)g[j] * xhat;
                }
            }
            /* the chunk's dweight and dbias partials: a loop of their own,
             * which vectorises (inside the reduction above it did not) */
            if (pw_sum)
#pragma omp simd
                for (int64_t j = 0; j < C; j++) {
                    const float xhat = (xr[j] - m) * rs;
                    pw_sum[j] += (double)g[j] * xhat;
                    pb_sum[j] += g[j];
                }
            const float a = (float)(sg / (double)C), bb = (float)(sgx / (double)C);
            if (w)
#pragma omp simd
                for (int64_t j = 0; j < C; j++)
                    d[j] = rs * (g[j] * w[j] - a - (xr[j] - m) * rs * bb);
            else
#pragma omp simd
                for (int64_t j = 0; j < C; j++) d[j] = rs * (g[j] - a - (xr[j] - m) * rs * bb);
            if (add0) {
                const float *add = add0 + r * C;
#pragma omp simd
                for (int64_t j = 0; j < C; j++) d[j] += add[j];
            }
            if (copy0) {
                awl_bf16 *copy = copy0 + r * C;
                for (int64_t j = 0; j < C; j++) copy[j] = awl_float_to_bf16(d[j]);
            }
        }
    }
    if (part) {
        /* 2 C nchunks adds (tens of thousands at a GPT's sizes): one thread
         * does them sooner than a second parallel region starts. Chunk 0's
         * partials gather the others, row by row, in chunk order. */
        float *dw = (float *)pdw, *db = (float *)pdb;
        for (int64_t c = 1; c < nchunks; c++)
#pragma omp simd
            for (int64_t j = 0; j < 2 * C; j++) part[j] += part[c * 2 * C + j];
        for (int64_t j = 0; j < C; j++) {
            if (dw) dw[j * sdw] = (float)part[j];
            if (db) db[j * sdb] = (float)part[C + j];
        }
        free(part);
    }
    free(wcopy);
    return AWL_OK;
}

/* ---- cross-entropy -------------------------------------------------------------- */

/* logits (N, V); targets int32 (N); loss (N), lse (N) float32.
 * lse = log sum exp logits[i]; loss = lse - logits[i, t_i], or 0 where
 * t_i == ignore_index. A target outside [0, V) is an error. */
int awl_cpu_cross_entropy_forward(const awl_view *loss, const awl_view *lse, const awl_view *logits,
                                  const awl_view *targets, int ignore_index)
{
    if (!rows_f32(logits)) return AWL_ERR_UNSUPPORTED;
    const int64_t V = last_dim(logits), N = V ? awl_view_numel(logits) / V : 0;
    char *pl, *pz, *pt;
    int64_t sl, sz, st;
    if (!vector_of(loss, AWL_F32, N, &pl, &sl) || !vector_of(lse, AWL_F32, N, &pz, &sz) ||
        !vector_of(targets, AWL_I32, N, &pt, &st))
        return AWL_ERR_UNSUPPORTED;
    const float *x0 = (const float *)cpu_view_ptr(logits);
    const int32_t *t = (const int32_t *)pt;
    float *l = (float *)pl, *z = (float *)pz;
    int64_t bad = -1;
    int nt = awl_cpu_threads_for(N * V, CPU_GRAIN_COSTLY);
#pragma omp parallel for num_threads(awl_cpu_team(nt)) \
    schedule(static, awl_cpu_chunk(N, nt)) reduction(max : bad)
    for (int64_t i = 0; i < N; i++) {
        const float *x = x0 + i * V;
        const float m = row_max(x, V);
        double sum = 0;
        for (int64_t j = 0; j < V; j++) sum += cpu_expf(x[j] - m);
        const float lz = m + logf((float)sum);
        const int32_t ti = t[i * st];
        z[i * sz] = lz;
        if (ti == ignore_index) {
            l[i * sl] = 0.0f;
        } else if (ti < 0 || ti >= V) {
            l[i * sl] = NAN;
            bad = i > bad ? i : bad;
        } else {
            l[i * sl] = lz - x[ti];
        }
    }
    if (bad >= 0)
        return awl_error(AWL_ERR_INVALID,
                         "awl_cpu cross_entropy: target %d of row %lld is outside [0, %lld)",
                         t[bad * st], (long long)bad, (long long)V);
    return AWL_OK;
}

/* dlogits, logits (N, V); dloss (N) (a zero stride broadcasts a mean's
 * gradient); lse (N) from forward; targets int32 (N).
 * dlogits[i] = dloss[i] (softmax(logits[i]) - onehot(t_i)), 0 for ignored rows. */
int awl_cpu_cross_entropy_backward(const awl_view *dlogits, const awl_view *dloss,
                                   const awl_view *logits, const awl_view *lse,
                                   const awl_view *targets, int ignore_index)
{
    if (!rows_f32(logits) || !rows_f32(dlogits)) return AWL_ERR_UNSUPPORTED;
    const int64_t V = last_dim(logits), N = V ? awl_view_numel(logits) / V : 0;
    char *pg, *pz, *pt;
    int64_t sg, sz, st;
    if (!vector_of(dloss, AWL_F32, N, &pg, &sg) || !vector_of(lse, AWL_F32, N, &pz, &sz) ||
        !vector_of(targets, AWL_I32, N, &pt, &st))
        return AWL_ERR_UNSUPPORTED;
    const float *x0 = (const float *)cpu_view_ptr(logits), *g = (const float *)pg,
                *z = (const float *)pz;
    const int32_t *t = (const int32_t *)pt;
    float *d0 = (float *)cpu_view_ptr(dlogits);
    int nt = awl_cpu_threads_for(N * V, CPU_GRAIN_COSTLY);
#pragma omp parallel for num_threads(awl_cpu_team(nt)) schedule(static, awl_cpu_chunk(N, nt))
    for (int64_t i = 0; i < N; i++) {
        const float *x = x0 + i * V;
        float *d = d0 + i * V;
        const int32_t ti = t[i * st];
        if (ti == ignore_index || ti < 0 || ti >= V) {
            for (int64_t j = 0; j < V; j++) d[j] = 0.0f;
            continue;
        }
        const float gi = g[i * sg], lz = z[i * sz];
        for (int64_t j = 0; j < V; j++) d[j] = gi * cpu_expf(x[j] - lz);
        d[ti] -= gi;
    }
    return AWL_OK;
}

/* Both, one after the other: on the CPU a row the forward has just read is
 * still in cache when the backward reads it, so a single kernel would save
 * little; this keeps the values of the two calls, bit for bit. */
int awl_cpu_cross_entropy_forward_backward(const awl_view *loss, const awl_view *lse,
                                           const awl_view *dlogits, const awl_view *dloss,
                                           const awl_view *logits, const awl_view *targets,
                                           int ignore_index)
{
    int status = awl_cpu_cross_entropy_forward(loss, lse, logits, targets, ignore_index);
    if (status != AWL_OK) return status;
    return awl_cpu_cross_entropy_backward(dlogits, dloss, logits, lse, targets, ignore_index);
}

/* ---- GELU backward: dx, dy, x contiguous float32 of one shape ------------------ */

int awl_cpu_gelu_backward(const awl_view *dx, const awl_view *dy, const awl_view *x)
{
    const int64_t n = awl_view_numel(x);
    if (dx->dtype != AWL_F32 || dy->dtype != AWL_F32 || x->dtype != AWL_F32 ||
        awl_view_numel(dx) != n || awl_view_numel(dy) != n || !awl_view_is_contiguous(dx) ||
        !awl_view_is_contiguous(dy) || !awl_view_is_contiguous(x))
        return AWL_ERR_UNSUPPORTED;
    float *o = (float *)cpu_view_ptr(dx);
    const float *g = (const float *)cpu_view_ptr(dy), *in = (const float *)cpu_view_ptr(x);
    int nt = awl_cpu_threads_for(n, CPU_GRAIN_COSTLY);
#pragma omp parallel for simd num_threads(awl_cpu_team(nt)) schedule(static, awl_cpu_chunk(n, nt))
    for (int64_t i = 0; i < n; i++) o[i] = g[i] * cpu_gelu_grad_f(in[i]);
    return AWL_OK;
}

/* ---- dropout with an addition: dropout_add and add_dropout ---------------------- */

/* The loop of both kernels, CPU_DROPOUT_GROUP elements at a time, the
 * mask as the dropout kernel draws it (cpu_dropout_keeps). sum
 * (add_dropout): o = keep_i (a_i + h_(i mod nh)) scale; else (dropout_add,
 * nh = n): o = a_i + keep_i h_i scale, a bfloat16 h (an autocast branch)
 * widened as it is read. */
static void dropout_with_add(float *o, const float *a, const void *h, bool h_bf16, int64_t n,
                             int64_t nh, const awl_dropout_args *args, bool sum)
{
    const float *hf = h;
    const awl_bf16 *hb = h;
    const uint32_t threshold = awl_dropout_threshold(args->p);
    const float scale = (float)awl_dropout_scale(args->p);
    const int64_t groups = (n + CPU_DROPOUT_GROUP - 1) / CPU_DROPOUT_GROUP;
    int nt = awl_cpu_threads_for(n, CPU_GRAIN_COSTLY);
#pragma omp parallel for num_threads(awl_cpu_team(nt)) schedule(static, awl_cpu_chunk(groups, nt))
    for (int64_t g = 0; g < groups; g++) {
        const int64_t i0 = g * CPU_DROPOUT_GROUP;
        const int64_t len = n - i0 < CPU_DROPOUT_GROUP ? n - i0 : CPU_DROPOUT_GROUP;
        uint8_t keep[CPU_DROPOUT_GROUP];
        cpu_dropout_keeps(keep, len, args->seed, args->offset, (uint64_t)i0, threshold);
        float *og = o + i0;
        const float *ag = a + i0;
        if (sum) { /* h repeats every nh elements: its group's values, without a division each */
            float hg[CPU_DROPOUT_GROUP];
            for (int64_t e = 0, j = i0 % nh; e < len; e++, j = j + 1 == nh ? 0 : j + 1)
                hg[e] = hf[j];
#pragma omp simd
            for (int64_t e = 0; e < len; e++) og[e] = keep[e] ? (ag[e] + hg[e]) * scale : 0.0f;
        } else if (h_bf16) {
#pragma omp simd
            for (int64_t e = 0; e < len; e++)
                og[e] = keep[e] ? ag[e] + awl_bf16_to_float(hb[i0 + e]) * scale : ag[e];
        } else {
#pragma omp simd
            for (int64_t e = 0; e < len; e++) og[e] = keep[e] ? ag[e] + hf[i0 + e] * scale : ag[e];
        }
    }
}

/* out = x + keep_i h_i / (1 - p); args NULL: out = x + h. out and x
 * float32, h float32 or bfloat16. */
int awl_cpu_dropout_add(const awl_view *out, const awl_view *x, const awl_view *h,
                        const awl_dropout_args *args)
{
    const int64_t n = awl_view_numel(out);
    if (out->dtype != AWL_F32 || x->dtype != AWL_F32 ||
        (h->dtype != AWL_F32 && h->dtype != AWL_BF16) || awl_view_numel(x) != n ||
        awl_view_numel(h) != n || !awl_view_is_contiguous(out) || !awl_view_is_contiguous(x) ||
        !awl_view_is_contiguous(h))
        return AWL_ERR_UNSUPPORTED;
    float *o = (float *)cpu_view_ptr(out);
    const float *a = (const float *)cpu_view_ptr(x), *bf = (const float *)cpu_view_ptr(h);
    const awl_bf16 *bh = (const awl_bf16 *)cpu_view_ptr(h);
    const bool wide = h->dtype == AWL_F32;
    if (!args) { /* no dropout: a plain add, in loops the compiler vectorises */
        int nt = awl_cpu_threads_for(n, CPU_GRAIN_CHEAP);
        if (wide) {
#pragma omp parallel for simd num_threads(awl_cpu_team(nt)) schedule(static, awl_cpu_chunk(n, nt))
            for (int64_t i = 0; i < n; i++) o[i] = a[i] + bf[i];
        } else {
#pragma omp parallel for simd num_threads(awl_cpu_team(nt)) schedule(static, awl_cpu_chunk(n, nt))
            for (int64_t i = 0; i < n; i++) o[i] = a[i] + awl_bf16_to_float(bh[i]);
        }
        return AWL_OK;
    }
    dropout_with_add(o, a, cpu_view_ptr(h), !wide, n, n, args, false);
    return AWL_OK;
}

/* out = keep_i (x_i + h_(i mod nh)) / (1 - p), all float32, h repeating
 * over x's leading axes. */
int awl_cpu_add_dropout(const awl_view *out, const awl_view *x, const awl_view *h,
                        const awl_dropout_args *args)
{
    const int64_t n = awl_view_numel(out), nh = awl_view_numel(h);
    if (out->dtype != AWL_F32 || x->dtype != AWL_F32 || h->dtype != AWL_F32 ||
        awl_view_numel(x) != n || nh == 0 || n % nh != 0 || !awl_view_is_contiguous(out) ||
        !awl_view_is_contiguous(x) || !awl_view_is_contiguous(h))
        return AWL_ERR_UNSUPPORTED;
    dropout_with_add((float *)cpu_view_ptr(out), (const float *)cpu_view_ptr(x), cpu_view_ptr(h),
                     false, n, nh, args, true);
    return AWL_OK;
}

/* ---- many tensors as one flat range ---------------------------------------------- */

/* The optimizer's kernels treat n tensors as one range of elements, tensor i
 * at [start[i], start[i + 1]), split evenly between nt threads: many small
 * tensors cost one parallel region. */

/* start[0..n] of n contiguous float32 tensors, or NULL (UNSUPPORTED, or OOM
 * recorded) in *status. */
static int64_t *flat_starts(int n, const awl_view *xs, const char *kernel, int *status)
{
    int64_t *start = malloc((size_t)(n + 1) * sizeof *start);
    if (!start) {
        *status = awl_error(AWL_ERR_OOM, "awl_cpu %s: out of memory", kernel);
        return NULL;
    }
    start[0] = 0;
    for (int i = 0; i < n; i++) {
        if (xs[i].dtype != AWL_F32 || !awl_view_is_contiguous(&xs[i])) {
            free(start);
            *status = AWL_ERR_UNSUPPORTED;
            return NULL;
        }
        start[i + 1] = start[i] + awl_view_numel(&xs[i]);
    }
    return start;
}

/* The calling thread's share [lo, hi) of `total` elements split nt ways
 * (empty for the threads numbered nt and up). */
static void flat_share(int64_t total, int nt, int64_t *lo, int64_t *hi)
{
    const int64_t per = (total + nt - 1) / nt;
    *lo = (int64_t)omp_get_thread_num() * per;
    *hi = *lo + per < total ? *lo + per : total;
}

/* The part of tensor i inside [lo, hi), in the tensor's own indices [a, b);
 * false when there is none. */
static bool flat_part(const int64_t *start, int i, int64_t lo, int64_t hi, int64_t *a, int64_t *b)
{
    *a = (start[i] > lo ? start[i] : lo) - start[i];
    *b = (start[i + 1] < hi ? start[i + 1] : hi) - start[i];
    return *a < *b;
}

/* ---- AdamW ------------------------------------------------------------------------ */

/* n parameters, each with grads, m, v of its shape, all contiguous float32;
 * in place, with g = grad * grad_scale: p -= lr wd p; m = b1 m + (1 - b1) g;
 * v = b2 v + (1 - b2) g^2;
 * p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps) (PyTorch's
 * arrangement); with args->casts, each new p rounded to bfloat16 into its
 * cast, by the thread that wrote it, while it is in cache. All parameters
 * form one flat range split evenly between threads, so many small tensors
 * cost one parallel region. */
int awl_cpu_adamw_step(int n, const awl_view *params, const awl_view *grads, const awl_view *m,
                       const awl_view *v, const float *weight_decay, const awl_adamw_args *args)
{
    const awl_view *casts = args->casts;
    for (int i = 0; i < n; i++)
        if (!rows_f32(&params[i]) || !rows_f32(&grads[i]) || !rows_f32(&m[i]) || !rows_f32(&v[i]) ||
            (casts && (casts[i].dtype != AWL_BF16 || !awl_view_is_contiguous(&casts[i]) ||
                       awl_view_numel(&casts[i]) != awl_view_numel(&params[i]))))
            return AWL_ERR_UNSUPPORTED;
    int status = AWL_OK;
    int64_t *start = flat_starts(n, params, "adamw_step", &status);
    if (!start) return status;
    const int64_t total = start[n];
    const double t = (double)args->step;
    const float b1 = args->beta1, b2 = args->beta2, eps = args->eps, lr = args->lr,
                gs = args->grad_scale;
    const float step_size = (float)(lr / (1.0 - pow(b1, t)));
    const float inv_bc2_sqrt = (float)(1.0 / sqrt(1.0 - pow(b2, t)));
    int nt = awl_cpu_threads_for(total, CPU_GRAIN_CHEAP);
#pragma omp parallel num_threads(awl_cpu_team(nt))
    {
        int64_t lo, hi, a, b;
        flat_share(total, nt, &lo, &hi);
        for (int i = 0; i < n && lo < hi; i++) {
            if (!flat_part(start, i, lo, hi, &a, &b)) continue;
            float *p = (float *)cpu_view_ptr(&params[i]), *mm = (float *)cpu_view_ptr(&m[i]);
            float *vv = (float *)cpu_view_ptr(&v[i]);
            const float *g = (const float *)cpu_view_ptr(&grads[i]);
            const float decay = 1.0f - lr * weight_decay[i];
#pragma omp simd
            for (int64_t e = a; e < b; e++) {
                float pe = p[e] * decay, ge = g[e] * gs;
                float me = b1 * mm[e] + (1.0f - b1) * ge;
                float ve = b2 * vv[e] + (1.0f - b2) * ge * ge;
                mm[e] = me;
                vv[e] = ve;
                p[e] = pe - step_size * me / (sqrtf(ve) * inv_bc2_sqrt + eps);
            }
            if (casts) {
                awl_bf16 *c = (awl_bf16 *)cpu_view_ptr(&casts[i]);
                for (int64_t e = a; e < b; e++) c[e] = awl_float_to_bf16(p[e]);
            }
        }
    }
    free(start);
    return AWL_OK;
}

/* ---- gradient clipping: a sum of squares and a scaling over many tensors ------------ */

/* The sum of squares runs in chunks of SQUARES_CHUNK elements, each inside
 * one tensor, and the chunks' partial sums are added in order at the end:
 * the order is fixed by the tensors' sizes alone, whatever the threads. */
#define SQUARES_CHUNK 16384

static int64_t chunks_of(int64_t elements)
{
    return (elements + SQUARES_CHUNK - 1) / SQUARES_CHUNK;
}

int awl_cpu_sum_squares(int n, const awl_view *xs, const awl_view *out)
{
    if (out->dtype != AWL_F64 || awl_view_numel(out) != 1) return AWL_ERR_UNSUPPORTED;
    int status = AWL_OK;
    int64_t *start = flat_starts(n, xs, "sum_squares", &status);
    if (!start) return status;
    /* chunk c belongs to tensor i when first[i] <= c < first[i + 1] */
    int64_t *first = malloc((size_t)(n + 1) * sizeof *first);
    double *partial = NULL;
    if (first) {
        first[0] = 0;
        for (int i = 0; i < n; i++) first[i + 1] = first[i] + chunks_of(start[i + 1] - start[i]);
        partial = malloc((size_t)(first[n] > 0 ? first[n] : 1) * sizeof *partial);
    }
    if (!partial) {
        free(start);
        free(first);
        return awl_error(AWL_ERR_OOM, "awl_cpu sum_squares: out of memory");
    }
    const int64_t chunks = first[n];
    int nt = awl_cpu_threads_for(start[n], CPU_GRAIN_CHEAP);
    if (nt > chunks) nt = chunks > 1 ? (int)chunks : 1;
#pragma omp parallel for num_threads(awl_cpu_team(nt)) schedule(static, awl_cpu_chunk(chunks, nt))
    for (int64_t c = 0; c < chunks; c++) {
        int i = 0, past = n; /* the tensor of chunk c: first[i] <= c < first[past] */
        while (past - i > 1) {
            int mid = (i + past) / 2;
            if (first[mid] <= c)
                i = mid;
            else
                past = mid;
        }
        const float *x = (const float *)cpu_view_ptr(&xs[i]);
        const int64_t a = (c - first[i]) * SQUARES_CHUNK, e = start[i + 1] - start[i];
        const int64_t b = a + SQUARES_CHUNK < e ? a + SQUARES_CHUNK : e;
        double sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int64_t k = a; k < b; k++) sum += (double)x[k] * (double)x[k];
        partial[c] = sum;
    }
    double total = 0;
    for (int64_t c = 0; c < chunks; c++) total += partial[c];
    *(double *)cpu_view_ptr(out) = total;
    free(start);
    free(first);
    free(partial);
    return AWL_OK;
}

int awl_cpu_scale(int n, const awl_view *xs, double factor)
{
    int status = AWL_OK;
    int64_t *start = flat_starts(n, xs, "scale", &status);
    if (!start) return status;
    const float f = (float)factor;
    const int64_t total = start[n];
    int nt = awl_cpu_threads_for(total, CPU_GRAIN_CHEAP);
#pragma omp parallel num_threads(awl_cpu_team(nt))
    {
        int64_t lo, hi, a, b;
        flat_share(total, nt, &lo, &hi);
        for (int i = 0; i < n && lo < hi; i++) {
            if (!flat_part(start, i, lo, hi, &a, &b)) continue;
            float *x = (float *)cpu_view_ptr(&xs[i]);
#pragma omp simd
            for (int64_t k = a; k < b; k++) x[k] *= f;
        }
    }
    free(start);
    return AWL_OK;
}
