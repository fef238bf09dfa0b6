/*
 * backends/cpu/cpu_index.c - index_select, index_add, gather, scatter_add and
 * Philox random fills.
 *
 * index_select and gather are one kernel. Both read `in` through a view of
 * out's shape whose stride is 0 along the indexed axes, plus a jump of
 * idx * (the indexed axis's real stride) per element: for gather the indexed
 * axis is `axis`; for index_select it is src's axis 0 and idx is broadcast
 * along the row axes. The cpu_iter walk then gives contiguous embedding rows
 * (idx constant along a row) to memcpy, and everything else to a strided loop.
 *
 * The two adjoints must be deterministic, so threads never share an output
 * element and every output element sums its contributions in index order:
 *   - index_add splits the row's columns between threads; each thread walks
 *     all indices in order over its own columns;
 *   - scatter_add splits the positions off the axis between threads (two
 *     different positions never meet in out); each walks its axis in order.
 *
 * Random: element e of the fill uses Philox block offset + e / 4, word e % 4
 * (common/philox.h). A segment computes each block once and uses all of its
 * words that fall inside the segment, so threads may split anywhere. Dropout
 * draws its mask the same way (common/dropout.h) and multiplies as it goes,
 * so no mask is ever stored.
 */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "backends/cpu/cpu_internal.h"
#include "backends/cpu/cpu_philox.h"
#include "common/dropout.h"

#define SEGMENT_ARGS int64_t n, int64_t flat, char *const *p, const int64_t *s, const void *ctx

/* ---- gather / index_select ------------------------------------------------- */

/* ptr/stride: 0 out, 1 in (zero stride on the indexed axis), 2 idx. ctx is
 * the indexed axis's stride in `in`, in elements. */
#define DEFINE_GATHER(NAME, T)                                                                     \
    static void NAME(SEGMENT_ARGS)                                                                 \
    {                                                                                              \
        (void)flat;                                                                                \
        const int64_t jump = *(const int64_t *)ctx;                                                \
        T *o = (T *)p[0];                                                                          \
        const T *in = (const T *)p[1];                                                             \
        const int32_t *idx = (const int32_t *)p[2];                                                \
        if (s[2] == 0) {                                                                           \
            const T *row = in + idx[0] * jump;                                                     \
            if (s[0] == 1 && s[1] == 1) {                                                          \
                memcpy(o, row, (size_t)n * sizeof(T));                                             \
            } else {                                                                               \
                for (int64_t i = 0; i < n; i++) o[i * s[0]] = row[i * s[1]];                       \
            }                                                                                      \
        } else {                                                                                   \
            for (int64_t i = 0; i < n; i++) o[i * s[0]] = in[i * s[1] + idx[i * s[2]] * jump];     \
        }                                                                                          \
    }

DEFINE_GATHER(gather_16, uint16_t)
DEFINE_GATHER(gather_32, uint32_t)
DEFINE_GATHER(gather_64, uint64_t)

static int run_gather(const awl_view *out, const awl_view *in_like, const awl_view *idx_like,
                      int64_t jump)
{
    size_t size = awl_dtype_size(out->dtype);
    if (!size) return awl_error(AWL_ERR_INVALID, "awl_cpu gather: invalid dtype");
    cpu_segment_fn fn = size == 2 ? gather_16 : size == 4 ? gather_32 : gather_64;
    const awl_view *views[3] = {out, in_like, idx_like};
    cpu_iter it;
    awl_cpu_iter_init(&it, 3, views);
    awl_cpu_iter_run(&it, CPU_GRAIN_CHEAP, fn, &jump);
    return AWL_OK;
}

/* A view with the shape and strides of `shape_of` over the elements of
 * `storage_of` (its data, offset and dtype); callers then set strides. */
static awl_view retarget(const awl_view *shape_of, const awl_view *storage_of)
{
    awl_view v = *shape_of;
    v.data = storage_of->data;
    v.offset = storage_of->offset;
    v.dtype = storage_of->dtype;
    return v;
}

int awl_cpu_gather(const awl_view *out, const awl_view *in, int axis, const awl_view *idx)
{
    awl_view in_like = *in;
    for (int d = 0; d < out->ndim; d++) in_like.shape[d] = out->shape[d];
    in_like.strides[axis] = 0;
    return run_gather(out, &in_like, idx, in->strides[axis]);
}

int awl_cpu_index_select(const awl_view *out, const awl_view *src, const awl_view *idx)
{
    /* out is idx.shape + src.shape[1:]. */
    awl_view src_like = retarget(out, src), idx_like = retarget(out, idx);
    for (int d = 0; d < out->ndim; d++) {
        bool row_axis = d >= idx->ndim;
        src_like.strides[d] = row_axis ? src->strides[d - idx->ndim + 1] : 0;
        idx_like.strides[d] = row_axis ? 0 : idx->strides[d];
    }
    return run_gather(out, &src_like, &idx_like, src->strides[0]);
}

/* ---- typed accumulation for the adjoints -------------------------------------------- */

/* o[i] += x[i] along a segment: ptr/stride 0 is the destination, 1 the source. */
#define DEFINE_ADD_INTO(NAME, T)                                                                   \
    static void NAME(SEGMENT_ARGS)                                                                 \
    {                                                                                              \
        (void)flat;                                                                                \
        (void)ctx;                                                                                 \
        T *o = (T *)p[0];                                                                          \
        const T *x = (const T *)p[1];                                                              \
        if (s[0] == 1 && s[1] == 1) {                                                              \
            _Pragma("omp simd") for (int64_t i = 0; i < n; i++) o[i] += x[i];                      \
        } else {                                                                                   \
            for (int64_t i = 0; i < n; i++) o[i * s[0]] += x[i * s[1]];                            \
        }                                                                                          \
    }

/* Integers add in uint32 so that overflow wraps instead of being undefined. */
#define DEFINE_ADD_INTO_I32(NAME)                                                                  \
    static void NAME(SEGMENT_ARGS)                                                                 \
    {                                                                                              \
        (void)flat;                                                                                \
        (void)ctx;                                                                                 \
        uint32_t *o = (uint32_t *)p[0];                                                            \
        const uint32_t *x = (const uint32_t *)p[1];                                                \
        for (int64_t i = 0; i < n; i++) o[i * s[0]] += x[i * s[1]];                                \
    }

DEFINE_ADD_INTO(add_into_f32, float)
DEFINE_ADD_INTO(add_into_f64, double)
DEFINE_ADD_INTO_I32(add_into_i32)

static const cpu_segment_fn add_into[3] = {add_into_f32, add_into_f64, add_into_i32};

static int check_add_dtype(const char *op, awl_dtype dtype)
{
    if (dtype >= 0 && dtype < AWL_BF16) return AWL_OK;
    return awl_error(AWL_ERR_INVALID, "awl_cpu %s: %s is not supported", op, awl_dtype_name(dtype));
}

/* ---- index_add ---------------------------------------------------------------- */

/* Element offset, in a view with strides `strides`, of row-major element i of
 * `shape` (ndim axes). */
static int64_t offset_of(int64_t i, int ndim, const int64_t *shape, const int64_t *strides)
{
    int64_t off = 0;
    for (int d = ndim - 1; d >= 0; d--) {
        off += (i % shape[d]) * strides[d];
        i /= shape[d];
    }
    return off;
}

int awl_cpu_index_add(const awl_view *dst, const awl_view *idx, const awl_view *src)
{
    int rc = check_add_dtype("index_add", dst->dtype);
    if (rc) return rc;
    /* Row views: dst (V, R...) at row 0 and src (I..., R...) at index 0, both
     * of shape R. */
    awl_view drow = *dst, srow = retarget(dst, src);
    drow.ndim = srow.ndim = dst->ndim - 1;
    for (int d = 0; d < drow.ndim; d++) {
        drow.shape[d] = srow.shape[d] = dst->shape[d + 1];
        drow.strides[d] = dst->strides[d + 1];
        srow.strides[d] = src->strides[d + idx->ndim];
    }
    const awl_view *views[2] = {&drow, &srow};
    cpu_iter row;
    awl_cpu_iter_init(&row, 2, views);

    const int64_t nidx = awl_view_numel(idx), rowlen = row.numel;
    const int32_t *ids = (const int32_t *)cpu_view_ptr(idx);
    char *dbase = row.base[0];
    const char *sbase = row.base[1];
    const int64_t esize = row.elsize[0];
    int nt = rowlen >= 64 ? awl_cpu_threads_for(nidx * rowlen, CPU_GRAIN_CHEAP) : 1;
    int64_t chunk = ((rowlen + nt - 1) / nt + 15) & ~(int64_t)15;
#pragma omp parallel num_threads(awl_cpu_team(nt))
    {
        int64_t c0 = (int64_t)omp_get_thread_num() * chunk;
        int64_t c1 = c0 + chunk < rowlen ? c0 + chunk : rowlen;
        cpu_iter mine = row;
        for (int64_t i = 0; i < nidx && c0 < c1; i++) {
            int64_t id = ids[offset_of(i, idx->ndim, idx->shape, idx->strides)];
            mine.base[0] = dbase + id * dst->strides[0] * esize;
            mine.base[1] =
                (char *)sbase + offset_of(i, idx->ndim, src->shape, src->strides) * esize;
            awl_cpu_iter_walk(&mine, c0, c1, add_into[dst->dtype], NULL);
        }
    }
    return AWL_OK;
}

/* ---- scatter_add ---------------------------------------------------------------- */

typedef struct scatter_ctx {
    cpu_segment_fn add;
    int64_t len, idx_stride, src_stride, out_stride; /* along the axis */
    int64_t esize;
} scatter_ctx;

/* ptr/stride: 0 out, 1 idx, 2 src, positions off the axis. For each position,
 * the axis is walked in order. */
static void scatter_segment(SEGMENT_ARGS)
{
    (void)flat;
    const scatter_ctx *c = ctx;
    const int32_t *idx = (const int32_t *)p[1];
    const int64_t one[2] = {1, 1};
    for (int64_t e = 0; e < n; e++) {
        char *o = p[0] + e * s[0] * c->esize;
        const char *x = p[2] + e * s[2] * c->esize;
        const int32_t *ie = idx + e * s[1];
        for (int64_t j = 0; j < c->len; j++) {
            char *ptr[2] = {o + ie[j * c->idx_stride] * c->out_stride * c->esize,
                            (char *)x + j * c->src_stride * c->esize};
            c->add(1, 0, ptr, one, NULL);
        }
    }
}

int awl_cpu_scatter_add(const awl_view *out, int axis, const awl_view *idx, const awl_view *src)
{
    int rc = check_add_dtype("scatter_add", out->dtype);
    if (rc) return rc;
    awl_view o = retarget(idx, out), i = *idx, x = retarget(idx, src);
    for (int d = 0; d < idx->ndim; d++) {
        o.strides[d] = out->strides[d];
        x.strides[d] = src->strides[d];
    }
    o.shape[axis] = i.shape[axis] = x.shape[axis] = 1;
    scatter_ctx c = {add_into[out->dtype], idx->shape[axis],   idx->strides[axis],
                     src->strides[axis],   out->strides[axis], (int64_t)awl_dtype_size(out->dtype)};
    const awl_view *views[3] = {&o, &i, &x};
    cpu_iter it;
    awl_cpu_iter_init(&it, 3, views);
    /* Each position costs an axis walk: count that in the grain. */
    int64_t grain = CPU_GRAIN_CHEAP / (c.len > 0 ? c.len : 1);
    awl_cpu_iter_run(&it, grain > 0 ? grain : 1, scatter_segment, &c);
    return AWL_OK;
}

/* ---- random ------------------------------------------------------------------------ */

/* A random fill (kind uniform or normal: a, b as awl_cpu_random's), or
 * dropout of operand 1 (dropout: threshold and scale as awl_cpu_dropout's). */
typedef struct random_ctx {
    awl_random_kind kind;
    bool dropout;
    awl_dtype dtype;
    uint64_t seed, offset;
    double a, b;
    uint32_t threshold;
    double scale; /* 1 / (1 - p) rounded to the dtype, as the composed mask holds it */
} random_ctx;

/* Word w of a block as a standard normal: the same arithmetic as
 * awl_philox_normal_at, so every backend gets identical values. */
static double normal_from_block(const awl_philox_block *blk, unsigned w)
{
    unsigned pair = w / 2;
    double u1 = (double)((blk->w[2 * pair] >> 8) + 1) * (1.0 / 16777216.0);
    double u2 = (double)(blk->w[2 * pair + 1] >> 8) * (1.0 / 16777216.0);
    double r = sqrt(-2.0 * log(u1));
    double t = 6.283185307179586476925286766559 * u2;
    return (w % 2 == 0) ? r * cos(t) : r * sin(t);
}

/* Dropout of a float32 run with unit strides: CPU_DROPOUT_GROUP elements
 * at a time, the mask decided by cpu_dropout_keeps, out = in * scale (the
 * same float32 product as the general loop's double one: both factors are
 * float32, so their product is exact in double and rounded once). */
static void dropout_f32_run(float *out, const float *in, int64_t n, uint64_t flat,
                            const random_ctx *c)
{
    const float scale = (float)c->scale;
    for (int64_t i0 = 0; i0 < n; i0 += CPU_DROPOUT_GROUP) {
        const int64_t len = n - i0 < CPU_DROPOUT_GROUP ? n - i0 : CPU_DROPOUT_GROUP;
        uint8_t keep[CPU_DROPOUT_GROUP];
        cpu_dropout_keeps(keep, len, c->seed, c->offset, flat + (uint64_t)i0, c->threshold);
#pragma omp simd
        for (int64_t e = 0; e < len; e++) out[i0 + e] = keep[e] ? in[i0 + e] * scale : 0.0f;
    }
}

static void random_segment(SEGMENT_ARGS)
{
    const random_ctx *c = ctx;
    if (c->dropout && c->dtype == AWL_F32 && s[0] == 1 && s[1] == 1) {
        dropout_f32_run((float *)p[0], (const float *)p[1], n, (uint64_t)flat, c);
        return;
    }
    int64_t i = 0;
    while (i < n) {
        uint64_t e = (uint64_t)(flat + i);
        awl_philox_block blk = awl_philox4x32(c->seed, c->offset + e / 4);
        for (unsigned w = (unsigned)(e % 4); w < 4 && i < n; w++, i++) {
            double v;
            if (c->dropout)
                v = (blk.w[w] >> 8) < c->threshold ? cpu_load(c->dtype, p[1], i * s[1]) * c->scale
                                                   : 0.0;
            else if (c->kind == AWL_RANDOM_UNIFORM)
                v = c->a + (c->b - c->a) * awl_philox_uniform(blk.w[w]);
            else
                v = c->a + c->b * normal_from_block(&blk, w);
            cpu_store(c->dtype, p[0], i * s[0], v);
        }
    }
}

int awl_cpu_random(const awl_view *out, awl_random_kind kind, uint64_t seed, uint64_t offset,
                   double a, double b)
{
    if (!awl_dtype_is_float(out->dtype) || out->dtype >= AWL_DTYPE_COUNT)
        return awl_error(AWL_ERR_INVALID, "awl_cpu random: %s is not a float dtype",
                         awl_dtype_name(out->dtype));
    if (kind != AWL_RANDOM_UNIFORM && kind != AWL_RANDOM_NORMAL)
        return awl_error(AWL_ERR_INVALID, "awl_cpu random: unknown kind %d", (int)kind);
    random_ctx c = {
        .kind = kind, .dtype = out->dtype, .seed = seed, .offset = offset, .a = a, .b = b};
    const awl_view *views[1] = {out};
    cpu_iter it;
    awl_cpu_iter_init(&it, 1, views);
    awl_cpu_iter_run(&it, CPU_GRAIN_COSTLY, random_segment, &c);
    return AWL_OK;
}

/* ---- dropout ----------------------------------------------------------------------- */

/* out = in * scale where the mask (the uniform stream's words) keeps, else
 * 0: random_segment with operand 1. */
int awl_cpu_dropout(const awl_view *out, const awl_view *in, const awl_dropout_args *args)
{
    if (!awl_dtype_is_float(out->dtype) || in->dtype != out->dtype) return AWL_ERR_UNSUPPORTED;
    random_ctx c = {.dropout = true,
                    .dtype = out->dtype,
                    .seed = args->seed,
                    .offset = args->offset,
                    .threshold = awl_dropout_threshold(args->p)};
    char scale[8];
    cpu_store(out->dtype, scale, 0, awl_dropout_scale(args->p));
    c.scale = cpu_load(out->dtype, scale, 0);
    const awl_view *views[2] = {out, in};
    cpu_iter it;
    awl_cpu_iter_init(&it, 2, views);
    awl_cpu_iter_run(&it, CPU_GRAIN_COSTLY, random_segment, &c);
    return AWL_OK;
}
