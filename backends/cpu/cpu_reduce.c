/*
 * backends/cpu/cpu_reduce.c - sum, mean, max and min over any set of axes.
 *
 * out has in's rank with size 1 on the reduced axes. The axes are split into
 * two groups: kept (one output element per index) and reduced. Kept axes keep
 * their order and merge where contiguous; reduced axes are sorted by input
 * stride, largest first, so the innermost reduced axis is the one with the
 * smallest non-zero stride (a transposed input reduces along memory), then
 * merge. Two walks cover every case:
 *
 *   runs     out[k] = fold over the outer reduced indices of a reduction of
 *            one run along the innermost reduced axis. With a unit stride
 *            that is a row sum: eight independent lanes the compiler
 *            vectorises, blocks of 4096 combined pairwise. Used for (N, C) ->
 *            (N, 1), full reductions, and anything without a better layout.
 *   columns  the innermost kept axis has unit input stride (bias gradients,
 *            (N, C) -> (1, C)): each thread owns a tile of output columns
 *            and streams every reduced row's part of that tile into double
 *            accumulators, so memory is read in long contiguous runs. When
 *            all columns fit one tile and there are many rows, the threads
 *            split the rows instead, in fixed chunks whose partials are
 *            combined in chunk order.
 *
 * Accumulation is always in double (float32 sums of 16M elements stay
 * accurate to about 1e-16 relative per addition, int32 sums are exact below
 * 2^53), and max/min propagate NaN as PyTorch's do.
 *
 * Determinism: every output's summation order depends only on the shapes and
 * strides, never on the thread count. Threads split outputs (each summed by
 * one thread), or, when there are fewer outputs than threads, split the
 * 4096-element blocks of one output, whose partial sums are then combined by
 * the same pairwise tree the serial code uses, or split a column
 * reduction's rows into chunks whose size depends on the row count only.
 */
#include <math.h>
#include <stdlib.h>

#include "backends/cpu/cpu_internal.h"

#define BLOCK 4096
/* Column tiles: at least MIN_TILE outputs, at most TILE (8 KiB of double
 * accumulators, which stay in L1 while rows stream past). */
#define MIN_TILE 64
#define TILE 1024
/* Rows per chunk, at least, when a column reduction is split by rows. */
#define MIN_CHUNK 64

/* ---- typed leaf kernels ----------------------------------------------------- */

/* One combining step of each reduction (backends/ops.h). */
#define DEF_COMBINE(OP, name, dtypes, identity, combine, mean)                                     \
    static inline double combine_##OP(double acc, double x) { return combine; }
AWL_REDUCE_OPS(DEF_COMBINE)

/* NAME_run: reduction of n elements at stride `stride`; unit stride uses eight
 * lanes combined in a fixed tree. NAME_col: acc[j] (op)= x[j] for j < w. */
#define DEFINE_REDUCE_KERNELS(NAME, T, INIT, COMBINE)                                              \
    static double NAME##_run(const char *px, int64_t n, int64_t stride)                            \
    {                                                                                              \
        const T *x = (const T *)px;                                                                \
        if (stride != 1) {                                                                         \
            double acc = INIT;                                                                     \
            for (int64_t i = 0; i < n; i++) acc = COMBINE(acc, (double)x[i * stride]);             \
            return acc;                                                                            \
        }                                                                                          \
        double lane[8];                                                                            \
        for (int j = 0; j < 8; j++) lane[j] = INIT;                                                \
        int64_t i = 0;                                                                             \
        for (; i + 8 <= n; i += 8)                                                                 \
            for (int j = 0; j < 8; j++) lane[j] = COMBINE(lane[j], (double)x[i + j]);              \
        for (int j = 0; i + j < n; j++) lane[j] = COMBINE(lane[j], (double)x[i + j]);              \
        for (int j = 0; j < 4; j++) lane[j] = COMBINE(lane[j], lane[j + 4]);                       \
        for (int j = 0; j < 2; j++) lane[j] = COMBINE(lane[j], lane[j + 2]);                       \
        return COMBINE(lane[0], lane[1]);                                                          \
    }                                                                                              \
    static void NAME##_col(double *acc, const char *px, int64_t w)                                 \
    {                                                                                              \
        const T *x = (const T *)px;                                                                \
        _Pragma("omp simd") for (int64_t j = 0; j < w; j++) acc[j] =                               \
            COMBINE(acc[j], (double)x[j]);                                                         \
    }

#define DEFINE_REDUCE_OP(OP, name, dtypes, identity, combine, mean)                                \
    DEFINE_REDUCE_KERNELS(OP##_f32, float, identity, combine_##OP)                                 \
    DEFINE_REDUCE_KERNELS(OP##_f64, double, identity, combine_##OP)                                \
    DEFINE_REDUCE_KERNELS(OP##_i32, int32_t, identity, combine_##OP)
AWL_REDUCE_OPS(DEFINE_REDUCE_OP)

typedef struct reduce_kernels {
    double (*run)(const char *x, int64_t n, int64_t stride);
    void (*col)(double *acc, const char *x, int64_t w);
} reduce_kernels;

#define KERNELS_F32(OP, name, dtypes, identity, combine, mean) {OP##_f32_run, OP##_f32_col},
#define KERNELS_F64(OP, name, dtypes, identity, combine, mean) {OP##_f64_run, OP##_f64_col},
#define KERNELS_I32(OP, name, dtypes, identity, combine, mean) {OP##_i32_run, OP##_i32_col},
/* Indexed [dtype][op]. */
static const reduce_kernels kernels[3][AWL_REDUCE_OP_COUNT] = {
    [AWL_F32] = {AWL_REDUCE_OPS(KERNELS_F32)},
    [AWL_F64] = {AWL_REDUCE_OPS(KERNELS_F64)},
    [AWL_I32] = {AWL_REDUCE_OPS(KERNELS_I32)},
};

/* ---- the plan ------------------------------------------------------------------ */

typedef struct reduce_plan {
    awl_reduce_op op;
    awl_dtype dtype;
    int64_t elsize;
    reduce_kernels k;
    double init;
    const char *in;
    char *out;
    int nk, nr; /* kept, reduced axes */
    int64_t kshape[AWL_MAX_DIMS], kin[AWL_MAX_DIMS], kout[AWL_MAX_DIMS];
    int64_t rshape[AWL_MAX_DIMS], rin[AWL_MAX_DIMS]; /* innermost last */
    int64_t nout, nred;
    int64_t run_len, run_stride; /* the innermost reduced axis, (1, 0) if none */
    int64_t nruns;               /* nred / run_len */
} reduce_plan;

/* Sort key putting broadcast (zero-stride) axes outermost: reading the same
 * element again is cheapest on the outside. */
static int64_t stride_key(int64_t s) { return s == 0 ? INT64_MAX : (s < 0 ? -s : s); }

static void plan_init(reduce_plan *p, awl_reduce_op op, const awl_view *out, const awl_view *in)
{
    p->op = op;
    p->dtype = in->dtype;
    p->elsize = (int64_t)awl_dtype_size(in->dtype);
    p->k = kernels[in->dtype][op];
    p->init = awl_reduce_identity(op);
    p->in = cpu_view_ptr(in);
    p->out = cpu_view_ptr(out);
    p->nk = p->nr = 0;
    p->nout = p->nred = 1;
    int64_t rs[AWL_MAX_DIMS], rst[AWL_MAX_DIMS];
    int nr = 0;
    for (int d = 0; d < in->ndim; d++) {
        int64_t size = in->shape[d];
        if (size == 1) continue;
        if (out->shape[d] == 1) {
            /* Insertion by stride key, largest first, stable. */
            int j = nr++;
            while (j > 0 && stride_key(rst[j - 1]) < stride_key(in->strides[d])) {
                rs[j] = rs[j - 1];
                rst[j] = rst[j - 1];
                j--;
            }
            rs[j] = size;
            rst[j] = in->strides[d];
            p->nred *= size;
            continue;
        }
        p->nout *= size;
        int m = p->nk;
        if (m > 0 && p->kin[m - 1] == in->strides[d] * size &&
            p->kout[m - 1] == out->strides[d] * size) {
            p->kshape[m - 1] *= size;
            p->kin[m - 1] = in->strides[d];
            p->kout[m - 1] = out->strides[d];
        } else {
            p->kshape[m] = size;
            p->kin[m] = in->strides[d];
            p->kout[m] = out->strides[d];
            p->nk++;
        }
    }
    for (int j = 0; j < nr; j++) {
        int m = p->nr;
        if (m > 0 && p->rin[m - 1] == rst[j] * rs[j]) {
            p->rshape[m - 1] *= rs[j];
            p->rin[m - 1] = rst[j];
        } else {
            p->rshape[m] = rs[j];
            p->rin[m] = rst[j];
            p->nr++;
        }
    }
    p->run_len = p->nr ? p->rshape[p->nr - 1] : 1;
    p->run_stride = p->nr ? p->rin[p->nr - 1] : 0;
    p->nruns = p->run_len ? p->nred / p->run_len : 0;
}

/* Element offsets (in, out) of output element k, counting kept axes
 * [0, nk_used) row-major. */
static void kept_offsets(const reduce_plan *p, int nk_used, int64_t k, int64_t *in_off,
                         int64_t *out_off)
{
    int64_t i = 0, o = 0;
    for (int d = nk_used - 1; d >= 0; d--) {
        int64_t idx = k % p->kshape[d];
        k /= p->kshape[d];
        i += idx * p->kin[d];
        o += idx * p->kout[d];
    }
    *in_off = i;
    *out_off = o;
}

/* Input offset of the start of run r (the reduced axes but the innermost). */
static int64_t run_offset(const reduce_plan *p, int64_t r)
{
    int64_t off = 0;
    for (int d = p->nr - 2; d >= 0; d--) {
        off += (r % p->rshape[d]) * p->rin[d];
        r /= p->rshape[d];
    }
    return off;
}

static void store(const reduce_plan *p, int64_t out_off, double value)
{
    if (awl_reduce_is_mean(p->op)) value /= (double)p->nred;
    cpu_store(p->dtype, p->out, out_off, value);
}

/* ---- the runs walk --------------------------------------------------------------- */

static int64_t nblocks(const reduce_plan *p)
{
    return p->run_stride == 1 ? (p->run_len + BLOCK - 1) / BLOCK : 1;
}

/* Leaf b of the run at x: a block of a unit-stride run, or the whole run. */
static double leaf(const reduce_plan *p, const char *x, int64_t b)
{
    if (p->run_stride != 1) return p->k.run(x, p->run_len, p->run_stride);
    int64_t start = b * BLOCK;
    int64_t n = p->run_len - start < BLOCK ? p->run_len - start : BLOCK;
    return p->k.run(x + start * p->elsize, n, 1);
}

/* Pairwise combination of leaves [b0, b0 + nb) of the run at x; `stored`, when
 * not NULL, holds them already computed (indexed from b0 = 0). Both forms use
 * one tree, so parallel and serial results agree bit for bit. */
static double pairwise(const reduce_plan *p, const char *x, const double *stored, int64_t b0,
                       int64_t nb)
{
    if (nb == 1) return stored ? stored[b0] : leaf(p, x, b0);
    int64_t half = nb / 2;
    return awl_reduce_combine(p->op, pairwise(p, x, stored, b0, half),
                              pairwise(p, x, stored, b0 + half, nb - half));
}

/* One output from its input offset, on the calling thread. */
static double output_value(const reduce_plan *p, int64_t in_off)
{
    double acc = p->init;
    int64_t nb = nblocks(p);
    for (int64_t r = 0; r < p->nruns; r++) {
        const char *x = p->in + (in_off + run_offset(p, r)) * p->elsize;
        acc = awl_reduce_combine(p->op, acc, pairwise(p, x, NULL, 0, nb));
    }
    return acc;
}

/* One output whose leaves are computed by `nt` threads first. */
static int output_value_parallel(const reduce_plan *p, int64_t in_off, int nt, double *value)
{
    int64_t nb = nblocks(p), nleaves = p->nruns * nb;
    double *leaves = malloc((size_t)nleaves * sizeof *leaves);
    if (!leaves)
        return awl_error(AWL_ERR_OOM, "awl_cpu reduce: out of memory for %lld partial sums",
                         (long long)nleaves);
#pragma omp parallel for num_threads(awl_cpu_team(nt)) schedule(static, awl_cpu_chunk(nleaves, nt))
    for (int64_t l = 0; l < nleaves; l++) {
        const char *x = p->in + (in_off + run_offset(p, l / nb)) * p->elsize;
        leaves[l] = leaf(p, x, l % nb);
    }
    double acc = p->init;
    for (int64_t r = 0; r < p->nruns; r++)
        acc = awl_reduce_combine(p->op, acc, pairwise(p, NULL, leaves + r * nb, 0, nb));
    free(leaves);
    *value = acc;
    return AWL_OK;
}

static int reduce_runs(const reduce_plan *p)
{
    int nt = awl_cpu_threads_for(p->nout * p->nred, CPU_GRAIN_CHEAP);
    if (nt > 1 && p->nout >= nt) {
#pragma omp parallel for num_threads(awl_cpu_team(nt)) schedule(static, awl_cpu_chunk(p->nout, nt))
        for (int64_t k = 0; k < p->nout; k++) {
            int64_t in_off, out_off;
            kept_offsets(p, p->nk, k, &in_off, &out_off);
            store(p, out_off, output_value(p, in_off));
        }
        return AWL_OK;
    }
    for (int64_t k = 0; k < p->nout; k++) {
        int64_t in_off, out_off;
        kept_offsets(p, p->nk, k, &in_off, &out_off);
        double value = 0;
        if (nt > 1 && p->nruns * nblocks(p) > 1) {
            int rc = output_value_parallel(p, in_off, nt, &value);
            if (rc) return rc;
        } else {
            value = output_value(p, in_off);
        }
        store(p, out_off, value);
    }
    return AWL_OK;
}

/* ---- the columns walk -------------------------------------------------------------- */

/* acc[0..w) (op)= every reduced row at in offset base: walks all reduced axes. */
/* acc[j] (op)= row r's element j for the reduced rows r0 <= r < r1, j < w,
 * row r starting `base` elements plus r's offset into the input. */
static void accumulate_rows(const reduce_plan *p, double *acc, int64_t base, int64_t w, int64_t r0,
                            int64_t r1)
{
    int64_t idx[AWL_MAX_DIMS] = {0};
    int64_t off = base, q = r0;
    for (int d = p->nr - 1; d >= 0; d--) { /* row r0's index and offset */
        idx[d] = q % p->rshape[d];
        q /= p->rshape[d];
        off += idx[d] * p->rin[d];
    }
    for (int64_t r = r0; r < r1; r++) {
        p->k.col(acc, p->in + off * p->elsize, w);
        for (int d = p->nr - 1; d >= 0; d--) {
            off += p->rin[d];
            if (++idx[d] < p->rshape[d]) break;
            off -= p->rshape[d] * p->rin[d];
            idx[d] = 0;
        }
    }
}

/* Rows per chunk of a column reduction split by rows: a function of the row
 * count only, so that every output's summation order is the same on any
 * number of threads. */
static int64_t row_chunk(int64_t rows)
{
    int64_t c = (rows + 63) / 64;
    return c < MIN_CHUNK ? MIN_CHUNK : c;
}

/* One tile of columns over many rows ((N, C) -> (1, C), a bias gradient):
 * threads split the rows instead of the columns, in fixed chunks, each
 * chunk reduced into its own partials, which are then combined in chunk
 * order. A thread then reads whole rows, the ones that the element-wise
 * kernel or matmul band before it wrote on the same core (they split rows
 * too), instead of a strip of columns of every row. */
static int reduce_row_chunks(const reduce_plan *p)
{
    const int64_t cols = p->kshape[p->nk - 1], cout = p->kout[p->nk - 1];
    const int64_t chunk = row_chunk(p->nred), nchunks = (p->nred + chunk - 1) / chunk;
    double *part = malloc((size_t)(nchunks * cols) * sizeof *part);
    if (!part)
        return awl_error(AWL_ERR_OOM, "awl_cpu reduce: out of memory for %lld x %lld partials",
                         (long long)nchunks, (long long)cols);
    int nt = awl_cpu_threads_for(p->nout * p->nred, CPU_GRAIN_CHEAP);
    if (nt > nchunks) nt = (int)nchunks;
#pragma omp parallel for num_threads(awl_cpu_team(nt)) schedule(static, awl_cpu_chunk(nchunks, nt))
    for (int64_t c = 0; c < nchunks; c++) {
        double *acc = part + c * cols;
        for (int64_t j = 0; j < cols; j++) acc[j] = p->init;
        const int64_t r1 = (c + 1) * chunk < p->nred ? (c + 1) * chunk : p->nred;
        accumulate_rows(p, acc, 0, cols, c * chunk, r1);
    }
    /* the double column kernel of the same op combines two partials */
    const reduce_kernels *combine = &kernels[AWL_F64][p->op];
    for (int64_t c = 1; c < nchunks; c++) combine->col(part, (const char *)(part + c * cols), cols);
    for (int64_t j = 0; j < cols; j++) store(p, j * cout, part[j]);
    free(part);
    return AWL_OK;
}

static int reduce_columns(const reduce_plan *p)
{
    const int64_t cols = p->kshape[p->nk - 1], cout = p->kout[p->nk - 1];
    const int64_t outer = p->nout / cols;
    if (outer == 1 && cols <= TILE && p->nred >= 2 * MIN_CHUNK) return reduce_row_chunks(p);
    int nt = awl_cpu_threads_for(p->nout * p->nred, CPU_GRAIN_CHEAP);
    /* Tiles as wide as the threads allow (long contiguous reads per row),
     * at most TILE. Each column's sum runs over the rows in order whatever
     * the tiling, so the width may depend on the thread count. */
    int64_t width = (cols * outer + nt - 1) / nt / outer;
    width = width < MIN_TILE ? MIN_TILE : width > TILE ? TILE : (width + 15) & ~(int64_t)15;
    const int64_t tiles = (cols + width - 1) / width, items = outer * tiles;
    if (nt > items) nt = (int)items;
#pragma omp parallel for num_threads(awl_cpu_team(nt)) schedule(static, awl_cpu_chunk(items, nt))
    for (int64_t it = 0; it < items; it++) {
        int64_t in_off, out_off;
        kept_offsets(p, p->nk - 1, it / tiles, &in_off, &out_off);
        int64_t c0 = (it % tiles) * width;
        int64_t w = cols - c0 < width ? cols - c0 : width;
        double acc[TILE];
        for (int64_t j = 0; j < w; j++) acc[j] = p->init;
        accumulate_rows(p, acc, in_off + c0, w, 0, p->nred);
        for (int64_t j = 0; j < w; j++) store(p, out_off + (c0 + j) * cout, acc[j]);
    }
    return AWL_OK;
}

int awl_cpu_reduce(awl_reduce_op op, const awl_view *out, const awl_view *in)
{
    if (op < 0 || op >= AWL_REDUCE_OP_COUNT)
        return awl_error(AWL_ERR_INVALID, "awl_cpu reduce: unknown op %d", (int)op);
    if (in->dtype < 0 || in->dtype >= AWL_BF16)
        return awl_error(AWL_ERR_INVALID, "awl_cpu reduce %s: not supported for %s",
                         awl_reduce_op_name(op), awl_dtype_name(in->dtype));
    reduce_plan p;
    plan_init(&p, op, out, in);
    if (p.nout == 0) return AWL_OK;
    bool columns = p.nr > 0 && p.run_stride != 1 && p.nk > 0 && p.kin[p.nk - 1] == 1 &&
                   p.kshape[p.nk - 1] >= 8;
    return columns ? reduce_columns(&p) : reduce_runs(&p);
}
