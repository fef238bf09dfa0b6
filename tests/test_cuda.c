/*
 * tests/test_cuda.c - the CUDA backend against the CPU backend, op by op.
 *
 * Every case describes its operands once (dtype, shape, strides, offset,
 * role) and runs the same call on both backends. The CPU backend is the
 * reference (tests/test_backend.c validates it against float64 loops). For
 * bfloat16, where the CPU backend only stores and converts, the reference
 * runs on float32 copies of the (exactly representable) bf16 inputs and its
 * results are rounded to bf16 once.
 *
 * What a case checks (METHOD.md's rules):
 *   - inputs are fresh random values, never zeros (a seed per run, printed,
 *     AWL_TEST_SEED to replay);
 *   - outputs are poisoned (NaN, or 0xA5 bytes for int32) before each run:
 *     every element of the output view must be written, every element outside
 *     it (gaps of a sliced view and 64 guard elements past the storage) must
 *     keep its poison bit for bit;
 *   - ||cuda - cpu|| / ||cpu|| within a tolerance per dtype (float64 1e-12,
 *     float32 1e-5, bfloat16 1e-2, int32 exact) unless the case says why not;
 *   - the CUDA op runs twice from the same inputs and must give the same bits
 *     (determinism: no atomics whose order varies).
 * Views cover contiguous, transposed, sliced, broadcast (zero stride) and
 * permuted layouts.
 *
 * Without a GPU (CI) the binary prints why it skipped and exits 0.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/backend.h"

#ifdef AWL_WITH_CUDA
#include <cuda_runtime_api.h>

#define GUARD 64
#define MAX_OPS 16

static const awl_backend *cuda, *cpu;
static uint64_t rng_state;

/* ---- random values ----------------------------------------------------------- */

static uint64_t next_u64(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double next_uniform(void) { return (double)(next_u64() >> 11) * (1.0 / 9007199254740992.0); }

/* ---- operands ------------------------------------------------------------------ */

typedef enum role { IN, OUT, INOUT } role;

typedef struct operand {
    role role;
    awl_dtype dtype;
    int ndim;
    int64_t shape[AWL_MAX_DIMS];
    int64_t strides[AWL_MAX_DIMS];
    int64_t offset;
    double lo, hi; /* range of random contents */
    bool integer;  /* integers in [lo, hi] (indices, conditions) */
} operand;

static operand opnd(role r, awl_dtype dt, int ndim, const int64_t *shape)
{
    operand o;
    memset(&o, 0, sizeof o);
    o.role = r;
    o.dtype = dt;
    o.ndim = ndim;
    o.lo = -2.0;
    o.hi = 2.0;
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        o.shape[d] = shape[d];
        o.strides[d] = s;
        s *= shape[d];
    }
    return o;
}

#define OPND(r, dt, ...)                                                                           \
    opnd(r, dt, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__})

static operand ranged(operand o, double lo, double hi)
{
    o.lo = lo;
    o.hi = hi;
    return o;
}

static operand ints(operand o, double lo, double hi)
{
    o = ranged(o, lo, hi);
    o.integer = true;
    return o;
}

/* The same logical shape read from storage where axes a and b are swapped
 * (a transposed view). */
static operand transposed(operand o, int a, int b)
{
    int64_t shape[AWL_MAX_DIMS];
    memcpy(shape, o.shape, sizeof shape);
    shape[a] = o.shape[b];
    shape[b] = o.shape[a];
    int64_t s = 1, st[AWL_MAX_DIMS] = {0};
    for (int d = o.ndim - 1; d >= 0; d--) {
        st[d] = s;
        s *= shape[d];
    }
    o.strides[a] = st[b];
    o.strides[b] = st[a];
    for (int d = 0; d < o.ndim; d++)
        if (d != a && d != b) o.strides[d] = st[d];
    return o;
}

/* Every `step`-th element along axis d of a larger storage, starting at 1. */
static operand sliced(operand o, int d, int step)
{
    int64_t s = 1;
    for (int k = o.ndim - 1; k >= 0; k--) {
        int64_t n = k == d ? o.shape[k] * step + 1 : o.shape[k];
        o.strides[k] = k == d ? s * step : s;
        s *= n;
    }
    int64_t inner = 1;
    for (int k = d + 1; k < o.ndim; k++) inner *= o.shape[k];
    o.offset = inner > 0 ? o.strides[d] / step : 1;
    return o;
}

/* Broadcast along axis d: stride 0 (the storage holds one copy). */
static operand broadcast(operand o, int d)
{
    o.strides[d] = 0;
    return o;
}

static int64_t storage_elems(const operand *o)
{
    int64_t last = o->offset;
    for (int d = 0; d < o->ndim; d++) {
        if (o->shape[d] == 0) return 0;
        last += (o->shape[d] - 1) * o->strides[d];
    }
    return last + 1;
}

static double load_el(awl_dtype dt, const void *p, int64_t i)
{
    switch (dt) {
    case AWL_F32: return ((const float *)p)[i];
    case AWL_F64: return ((const double *)p)[i];
    case AWL_I32: return ((const int32_t *)p)[i];
    default: return awl_bf16_to_float(((const awl_bf16 *)p)[i]);
    }
}

static void store_el(awl_dtype dt, void *p, int64_t i, double v)
{
    switch (dt) {
    case AWL_F32: ((float *)p)[i] = (float)v; break;
    case AWL_F64: ((double *)p)[i] = v; break;
    case AWL_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    default: ((awl_bf16 *)p)[i] = awl_float_to_bf16((float)v); break;
    }
}

/* ---- cases --------------------------------------------------------------------- */

typedef int (*op_fn)(const awl_backend *be, awl_view *const *v, const void *ctx);

typedef struct tcase {
    char name[160];
    int n;
    operand op[MAX_OPS];
    op_fn fn;
    const void *ctx;
    double tol;   /* 0: the dtype's default */
    bool ref_f32; /* run the CPU on float32 copies of bfloat16 operands */
} tcase;

static double default_tol(awl_dtype dt)
{
    switch (dt) {
    case AWL_F64: return 1e-12;
    case AWL_F32: return 1e-5;
    case AWL_BF16: return 1e-2;
    default: return 0.0;
    }
}

typedef struct buf {
    int64_t elems; /* storage, guard excluded */
    size_t es, bytes;
    unsigned char *init, *back, *back2;
    void *host, *host32, *dev;
} buf;

static void fill_init(const operand *o, buf *b)
{
    int64_t total = b->elems + GUARD;
    if (o->role == OUT) {
        memset(b->init, o->dtype == AWL_I32 ? 0xA5 : 0xFF, b->bytes);
        return;
    }
    for (int64_t i = 0; i < total; i++) {
        double v = o->lo + (o->hi - o->lo) * next_uniform();
        if (o->integer) {
            v = floor(o->lo + (o->hi - o->lo + 1) * next_uniform());
            if (v > o->hi) v = o->hi;
        } else if (o->lo < 0 && o->hi > 0 && fabs(v) < 0.05 * (o->hi - o->lo)) {
            v = v < 0 ? -0.05 * (o->hi - o->lo) : 0.05 * (o->hi - o->lo);
        }
        store_el(o->dtype, b->init, i, v);
    }
}

static awl_view view_on(const operand *o, void *data, awl_dtype dt)
{
    awl_view v;
    memset(&v, 0, sizeof v);
    v.data = data;
    v.offset = o->offset;
    v.ndim = o->ndim;
    v.dtype = dt;
    memcpy(v.shape, o->shape, sizeof v.shape);
    memcpy(v.strides, o->strides, sizeof v.strides);
    return v;
}

/* Marks the storage elements the view covers. */
static void mark_view(const operand *o, unsigned char *mask)
{
    int64_t n = 1;
    for (int d = 0; d < o->ndim; d++) n *= o->shape[d];
    for (int64_t i = 0; i < n; i++) {
        int64_t q = i, off = o->offset;
        for (int d = o->ndim - 1; d >= 0; d--) {
            off += (q % o->shape[d]) * o->strides[d];
            q /= o->shape[d];
        }
        mask[off] = 1;
    }
}

/* Runs both backends; asserts; returns the largest relative error. */
static double run_case(const tcase *c)
{
    buf b[MAX_OPS];
    awl_view views[MAX_OPS];
    awl_view *vp[MAX_OPS];
    memset(b, 0, sizeof b);
    for (int i = 0; i < c->n; i++) {
        const operand *o = &c->op[i];
        b[i].elems = storage_elems(o);
        b[i].es = awl_dtype_size(o->dtype);
        b[i].bytes = (size_t)(b[i].elems + GUARD) * b[i].es;
        b[i].init = malloc(b[i].bytes);
        b[i].back = malloc(b[i].bytes);
        b[i].back2 = malloc(b[i].bytes);
        b[i].host = cpu->alloc(0, b[i].bytes);
        b[i].dev = cuda->alloc(0, b[i].bytes);
        ck_assert_msg(b[i].init && b[i].back && b[i].back2 && b[i].host && b[i].dev,
                      "%s: allocation: %s", c->name, awl_last_error());
        fill_init(o, &b[i]);
        memcpy(b[i].host, b[i].init, b[i].bytes);
        vp[i] = &views[i];
    }

    /* The reference. */
    for (int i = 0; i < c->n; i++) {
        const operand *o = &c->op[i];
        if (c->ref_f32 && o->dtype == AWL_BF16) {
            int64_t total = b[i].elems + GUARD;
            b[i].host32 = malloc((size_t)total * 4);
            for (int64_t k = 0; k < total; k++)
                ((float *)b[i].host32)[k] = (float)load_el(AWL_BF16, b[i].host, k);
            views[i] = view_on(o, b[i].host32, AWL_F32);
        } else {
            views[i] = view_on(o, b[i].host, o->dtype);
        }
    }
    awl_clear_error();
    int rc = c->fn(cpu, vp, c->ctx);
    ck_assert_msg(rc == AWL_OK, "%s: cpu backend returned %d: %s", c->name, rc, awl_last_error());
    for (int i = 0; i < c->n; i++) {
        if (!b[i].host32) continue;
        if (c->op[i].role != IN)
            for (int64_t k = 0; k < b[i].elems + GUARD; k++)
                store_el(AWL_BF16, b[i].host, k, ((float *)b[i].host32)[k]);
        free(b[i].host32);
    }

    /* CUDA, twice from the same inputs. */
    for (int run = 0; run < 2; run++) {
        for (int i = 0; i < c->n; i++) {
            ck_assert_int_eq(cuda->copy_from_host(0, b[i].dev, b[i].init, b[i].bytes), AWL_OK);
            views[i] = view_on(&c->op[i], b[i].dev, c->op[i].dtype);
        }
        rc = c->fn(cuda, vp, c->ctx);
        ck_assert_msg(rc == AWL_OK, "%s: cuda backend returned %d: %s", c->name, rc,
                      awl_last_error());
        ck_assert_msg(cuda->synchronize(0) == AWL_OK, "%s: %s", c->name, awl_last_error());
        for (int i = 0; i < c->n; i++)
            ck_assert_int_eq(
                cuda->copy_to_host(0, run ? b[i].back2 : b[i].back, b[i].dev, b[i].bytes), AWL_OK);
    }

    double worst = 0.0;
    for (int i = 0; i < c->n; i++) {
        const operand *o = &c->op[i];
        if (o->role == IN) goto done;
        ck_assert_msg(memcmp(b[i].back, b[i].back2, b[i].bytes) == 0,
                      "%s: operand %d differs between two identical runs (not deterministic)",
                      c->name, i);
        unsigned char *mask = calloc((size_t)(b[i].elems + GUARD), 1);
        mark_view(o, mask);
        double num = 0, den = 0;
        for (int64_t k = 0; k < b[i].elems + GUARD; k++) {
            const unsigned char *pg = b[i].back + k * b[i].es, *pi = b[i].init + k * b[i].es;
            if (!mask[k]) {
                ck_assert_msg(memcmp(pg, pi, b[i].es) == 0,
                              "%s: operand %d: element %lld outside the view was written", c->name,
                              i, (long long)k);
                continue;
            }
            double r = load_el(o->dtype, b[i].host, k), g = load_el(o->dtype, b[i].back, k);
            if (isnan(r) && isnan(g)) continue;
            ck_assert_msg(!isnan(g) && !isnan(r),
                          "%s: operand %d: element %lld is %g on cuda and %g on cpu (unwritten?)",
                          c->name, i, (long long)k, g, r);
            if (isinf(r) && r == g) continue;
            num += (g - r) * (g - r);
            den += r * r;
        }
        free(mask);
        double rel = den > 0 ? sqrt(num / den) : sqrt(num);
        double tol = c->tol > 0 ? c->tol : default_tol(o->dtype);
        ck_assert_msg(rel <= tol, "%s: operand %d: relative error %.3g > %.3g", c->name, i, rel,
                      tol);
        if (rel > worst) worst = rel;
    done:;
    }
    for (int i = 0; i < c->n; i++) {
        cuda->free(0, b[i].dev, b[i].bytes);
        cpu->free(0, b[i].host, b[i].bytes);
        free(b[i].init);
        free(b[i].back);
        free(b[i].back2);
    }
    return worst;
}

static const awl_dtype float_types[] = {AWL_F32, AWL_F64, AWL_BF16};

/* ---- op adapters --------------------------------------------------------------------- */

static int fn_fill(const awl_backend *be, awl_view *const *v, const void *ctx)
{
    return be->fill(v[0], *(const double *)ctx);
}

static int fn_copy(const awl_backend *be, awl_view *const *v, const void *ctx)
{
    (void)ctx;
    return be->copy(v[0], v[1]);
}

typedef struct unary_ctx {
    awl_unary_op op;
    double alpha;
} unary_ctx;

static int fn_unary(const awl_backend *be, awl_view *const *v, const void *ctx)
{
    const unary_ctx *u = ctx;
    return be->unary(u->op, v[0], v[1], u->alpha);
}

static int fn_binary(const awl_backend *be, awl_view *const *v, const void *ctx)
{
    return be->binary(*(const awl_binary_op *)ctx, v[0], v[1], v[2]);
}

static int fn_where(const awl_backend *be, awl_view *const *v, const void *ctx)
{
    (void)ctx;
    return be->where(v[0], v[1], v[2], v[3]);
}

static int fn_reduce(const awl_backend *be, awl_view *const *v, const void *ctx)
{
    return be->reduce(*(const awl_reduce_op *)ctx, v[0], v[1]);
}

typedef struct matmul_ctx {
    bool accumulate, tf32;
} matmul_ctx;

static int fn_matmul(const awl_backend *be, awl_view *const *v, const void *ctx)
{
    const matmul_ctx *m = ctx;
    if (m->tf32 && be == cuda) be->set_matmul_fast_fp32(true);
    int rc = be->matmul(v[0], v[1], v[2], m->accumulate);
    if (m->tf32 && be == cuda) be->set_matmul_fast_fp32(false);
    return rc;
}

/* ---- device, memory and errors ------------------------------------------------------ */

START_TEST(test_device_and_memory)
{
    ck_assert_int_ge(cuda->device_count(), 1);
    ck_assert_str_eq(cuda->name, "cuda");
    void *p = cuda->alloc(0, 1000);
    ck_assert_ptr_nonnull(p);
    ck_assert_uint_ge(cuda->memory_reserved(0), 1000);
    cuda->free(0, p, 1000);
    void *q = cuda->alloc(0, 900); /* same 1024-byte class: the cached block */
    ck_assert_ptr_eq(p, q);
    cuda->free(0, q, 900);
    void *z = cuda->alloc(0, 0);
    ck_assert_ptr_nonnull(z);
    cuda->free(0, z, 0);
    cuda->empty_cache(0);
    ck_assert_uint_eq(cuda->memory_reserved(0), 0);

    awl_clear_error();
    ck_assert_ptr_null(cuda->alloc(0, (size_t)1 << 52));
    ck_assert_int_eq(awl_last_error_code(), AWL_ERR_OOM);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "cuda:0"));
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "4503599627370496"));
    /* The device is still usable after an out-of-memory. */
    p = cuda->alloc(0, 4096);
    ck_assert_ptr_nonnull(p);
    cuda->free(0, p, 4096);

    awl_clear_error();
    ck_assert_ptr_null(cuda->alloc(cuda->device_count() + 3, 16));
    ck_assert_int_eq(awl_last_error_code(), AWL_ERR_DEVICE);
}
END_TEST

/* int32 has no matmul, exp or division (as on the CPU backend): refused
 * with a message naming the op, not computed with a silent rounding. */
START_TEST(test_refusals)
{
    awl_view v[3];
    awl_view *vp[3] = {&v[0], &v[1], &v[2]};
    operand o = OPND(OUT, AWL_I32, 2, 2);
    void *d = cuda->alloc(0, 64);
    for (int i = 0; i < 3; i++) v[i] = view_on(&o, d, AWL_I32);
    matmul_ctx m = {false, false};
    awl_clear_error();
    ck_assert_int_eq(fn_matmul(cuda, vp, &m), AWL_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "int32"));
    awl_clear_error();
    ck_assert_int_eq(cuda->unary(AWL_UNARY_EXP, &v[0], &v[1], 0), AWL_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "exp"));
    awl_clear_error();
    ck_assert_int_eq(cuda->binary(AWL_BINARY_DIV, &v[0], &v[1], &v[2]), AWL_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "div"));
    cuda->free(0, d, 64);
}
END_TEST

/* ---- element-wise -------------------------------------------------------------------- */

START_TEST(test_fill)
{
    const awl_dtype all[] = {AWL_F32, AWL_F64, AWL_I32, AWL_BF16};
    double value = -3.25;
    for (int t = 0; t < 4; t++) {
        operand outs[] = {OPND(OUT, all[t], 100003), sliced(OPND(OUT, all[t], 37, 29), 1, 2),
                          transposed(OPND(OUT, all[t], 5, 7, 3), 0, 2)};
        for (int l = 0; l < 3; l++) {
            tcase c = {.n = 1, .op = {outs[l]}, .fn = fn_fill, .ctx = &value};
            snprintf(c.name, sizeof c.name, "fill %s layout %d", awl_dtype_name(all[t]), l);
            run_case(&c);
        }
    }
}
END_TEST

START_TEST(test_copy)
{
    const awl_dtype all[] = {AWL_F32, AWL_F64, AWL_I32, AWL_BF16};
    for (int to = 0; to < 4; to++)
        for (int from = 0; from < 4; from++) {
            operand out2 = OPND(OUT, all[to], 37, 129), in2 = OPND(IN, all[from], 37, 129);
            operand pairs[][2] = {
                {OPND(OUT, all[to], 100003), OPND(IN, all[from], 100003)},
                {out2, transposed(in2, 0, 1)},
                {out2, broadcast(in2, 0)},
                {sliced(out2, 1, 3), in2},
                {OPND(OUT, all[to], 4, 5, 6), transposed(OPND(IN, all[from], 4, 5, 6), 0, 2)},
            };
            for (int l = 0; l < 5; l++) {
                pairs[l][1] = ranged(pairs[l][1], -300, 300);
                tcase c = {.n = 2, .op = {pairs[l][0], pairs[l][1]}, .fn = fn_copy};
                snprintf(c.name, sizeof c.name, "copy %s <- %s layout %d", awl_dtype_name(all[to]),
                         awl_dtype_name(all[from]), l);
                run_case(&c);
            }
        }
}
END_TEST

static bool unary_positive(awl_unary_op op)
{
    return op == AWL_UNARY_LOG || op == AWL_UNARY_SQRT || op == AWL_UNARY_RSQRT ||
           op == AWL_UNARY_POW_SCALAR;
}

static bool unary_int_defined(awl_unary_op op)
{
    switch (op) {
    case AWL_UNARY_NEG:
    case AWL_UNARY_ABS:
    case AWL_UNARY_SIGN:
    case AWL_UNARY_RELU:
    case AWL_UNARY_STEP:
    case AWL_UNARY_ADD_SCALAR:
    case AWL_UNARY_MUL_SCALAR:
    case AWL_UNARY_RSUB_SCALAR:
    case AWL_UNARY_GT_SCALAR:
    case AWL_UNARY_LT_SCALAR:
    case AWL_UNARY_EQ_SCALAR: return true;
    default: return false;
    }
}

START_TEST(test_unary)
{
    const awl_dtype all[] = {AWL_F32, AWL_F64, AWL_BF16, AWL_I32};
    for (int t = 0; t < 4; t++)
        for (int op = 0; op < AWL_UNARY_OP_COUNT; op++) {
            if (all[t] == AWL_I32 && !unary_int_defined(op)) continue;
            unary_ctx u = {op, op == AWL_UNARY_POW_SCALAR ? 1.7 : -0.75};
            if (all[t] == AWL_I32) u.alpha = 3;
            operand out2 = OPND(OUT, all[t], 37, 129), in2 = OPND(IN, all[t], 37, 129);
            operand pairs[][2] = {
                {OPND(OUT, all[t], 100003), OPND(IN, all[t], 100003)},
                {out2, transposed(in2, 0, 1)},
                {sliced(out2, 0, 2), broadcast(in2, 1)},
                {OPND(OUT, all[t], 4, 5, 6), transposed(OPND(IN, all[t], 4, 5, 6), 0, 2)},
            };
            for (int l = 0; l < 4; l++) {
                operand in = pairs[l][1];
                if (all[t] == AWL_I32)
                    in = ints(in, -50, 50);
                else if (unary_positive(op))
                    in = ranged(in, 0.1, 4.0);
                else
                    in = ranged(in, -3.0, 3.0);
                tcase c = {
                    .n = 2, .op = {pairs[l][0], in}, .fn = fn_unary, .ctx = &u, .ref_f32 = true};
                /* exp/tanh/pow: libm and CUDA's math differ by an ulp or two */
                if (all[t] == AWL_F32) c.tol = 2e-6 * 10;
                snprintf(c.name, sizeof c.name, "unary %s %s layout %d", awl_unary_op_name(op),
                         awl_dtype_name(all[t]), l);
                run_case(&c);
            }
        }
}
END_TEST

START_TEST(test_binary)
{
    const awl_dtype all[] = {AWL_F32, AWL_F64, AWL_BF16, AWL_I32};
    for (int t = 0; t < 4; t++)
        for (int op = 0; op < AWL_BINARY_OP_COUNT; op++) {
            if (all[t] == AWL_I32 && (op == AWL_BINARY_DIV || op == AWL_BINARY_POW)) continue;
            awl_binary_op bop = op;
            operand o2 = OPND(OUT, all[t], 37, 129), a2 = OPND(IN, all[t], 37, 129);
            operand sets[][3] = {
                {OPND(OUT, all[t], 100003), OPND(IN, all[t], 100003), OPND(IN, all[t], 100003)},
                {o2, a2, broadcast(a2, 0)},
                {o2, broadcast(a2, 1), transposed(a2, 0, 1)},
                {sliced(o2, 1, 2), transposed(a2, 0, 1), a2},
                {o2, a2, broadcast(broadcast(a2, 0), 1)},
                {OPND(OUT, all[t], 4, 5, 6), transposed(OPND(IN, all[t], 4, 5, 6), 1, 2),
                 broadcast(OPND(IN, all[t], 4, 5, 6), 1)},
                /* a bias row on either side: the packed row-broadcast path */
                {OPND(OUT, all[t], 33, 256), OPND(IN, all[t], 33, 256),
                 broadcast(OPND(IN, all[t], 33, 256), 0)},
                {OPND(OUT, all[t], 33, 256), broadcast(OPND(IN, all[t], 33, 256), 0),
                 OPND(IN, all[t], 33, 256)},
            };
            for (int l = 0; l < 8; l++) {
                operand a = sets[l][1], b = sets[l][2];
                if (all[t] == AWL_I32) {
                    a = ints(a, -20, 20);
                    b = ints(b, -20, 20);
                } else if (op == AWL_BINARY_POW) {
                    a = ranged(a, 0.2, 3.0);
                    b = ranged(b, -2.0, 2.0);
                } else if (op >= AWL_BINARY_EQ) { /* comparisons need ties */
                    a = ints(a, -3, 3);
                    b = ints(b, -3, 3);
                }
                tcase c = {.n = 3,
                           .op = {sets[l][0], a, b},
                           .fn = fn_binary,
                           .ctx = &bop,
                           .ref_f32 = true};
                if (all[t] == AWL_F32 && op == AWL_BINARY_POW) c.tol = 2e-5;
                snprintf(c.name, sizeof c.name, "binary %s %s layout %d", awl_binary_op_name(op),
                         awl_dtype_name(all[t]), l);
                run_case(&c);
            }
        }
}
END_TEST

START_TEST(test_where)
{
    const awl_dtype all[] = {AWL_F32, AWL_F64, AWL_I32, AWL_BF16};
    for (int t = 0; t < 4; t++)
        for (int ct = 0; ct < 4; ct++) {
            operand o = OPND(OUT, all[t], 37, 129);
            operand cond = ints(OPND(IN, all[ct], 37, 129), 0, 1);
            operand a = OPND(IN, all[t], 37, 129);
            tcase c = {.n = 4,
                       .op = {o, broadcast(cond, 0), transposed(a, 0, 1), broadcast(a, 1)},
                       .fn = fn_where};
            snprintf(c.name, sizeof c.name, "where %s cond %s", awl_dtype_name(all[t]),
                     awl_dtype_name(all[ct]));
            run_case(&c);
        }
}
END_TEST

/* ---- reductions ------------------------------------------------------------------------ */

START_TEST(test_reduce)
{
    const awl_dtype all[] = {AWL_F32, AWL_F64, AWL_BF16, AWL_I32};
    for (int t = 0; t < 4; t++)
        for (int op = 0; op < AWL_REDUCE_OP_COUNT; op++) {
            awl_reduce_op rop = op;
            awl_dtype dt = all[t];
            operand cases[][2] = {
                {OPND(OUT, dt, 37, 1), OPND(IN, dt, 37, 129)},      /* rows */
                {OPND(OUT, dt, 1, 129), OPND(IN, dt, 37, 129)},     /* columns */
                {OPND(OUT, dt, 1, 384), OPND(IN, dt, 16384, 384)},  /* columns, split */
                {OPND(OUT, dt, 1), OPND(IN, dt, 1000003)},          /* full, split */
                {OPND(OUT, dt, 6, 1, 35), OPND(IN, dt, 6, 17, 35)}, /* middle axis */
                {OPND(OUT, dt, 37, 1), transposed(OPND(IN, dt, 37, 129), 0, 1)},
                {OPND(OUT, dt, 1, 5, 1), transposed(OPND(IN, dt, 4, 5, 6), 0, 2)}, /* general */
                {sliced(OPND(OUT, dt, 1, 129), 1, 2), broadcast(OPND(IN, dt, 37, 129), 0)},
            };
            for (int l = 0; l < 8; l++) {
                operand in = cases[l][1];
                if (dt == AWL_I32) in = ints(in, -100, 100);
                tcase c = {
                    .n = 2, .op = {cases[l][0], in}, .fn = fn_reduce, .ctx = &rop, .ref_f32 = true};
                snprintf(c.name, sizeof c.name, "reduce %s %s layout %d", awl_reduce_op_name(op),
                         awl_dtype_name(dt), l);
                run_case(&c);
            }
        }
}
END_TEST

/* ---- matmul -------------------------------------------------------------------------------- */

START_TEST(test_matmul)
{
    for (int t = 0; t < 3; t++) {
        awl_dtype dt = float_types[t];
        operand o = OPND(OUT, dt, 33, 65), a = OPND(IN, dt, 33, 47), b = OPND(IN, dt, 47, 65);
        operand ob = OPND(OUT, dt, 3, 33, 65), ab = OPND(IN, dt, 3, 33, 47),
                bb = OPND(IN, dt, 3, 47, 65);
        operand o4 = OPND(OUT, dt, 2, 3, 17, 19), a4 = OPND(IN, dt, 2, 3, 17, 23),
                b4 = OPND(IN, dt, 2, 3, 23, 19);
        operand sets[][3] = {
            {o, a, b},
            {o, transposed(a, 0, 1), b},
            {o, a, transposed(b, 0, 1)},
            {transposed(o, 0, 1), transposed(a, 0, 1), transposed(b, 0, 1)},
            {o, sliced(a, 1, 2), sliced(b, 0, 2)}, /* not representable: copied */
            {ob, ab, bb},
            {ob, broadcast(ab, 0), bb}, /* broadcast batch */
            {ob, transposed(ab, 1, 2), broadcast(bb, 0)},
            {transposed(o4, 0, 1), a4, b4}, /* batch dims that do not merge */
            {o4, transposed(a4, 0, 1), broadcast(b4, 1)},
            {OPND(OUT, dt, 256, 384), OPND(IN, dt, 256, 768), OPND(IN, dt, 768, 384)},
        };
        for (int l = 0; l < 11; l++)
            for (int acc = 0; acc < 2; acc++) {
                matmul_ctx m = {acc == 1, false};
                tcase c = {.n = 3,
                           .op = {sets[l][0], sets[l][1], sets[l][2]},
                           .fn = fn_matmul,
                           .ctx = &m,
                           .ref_f32 = true};
                if (acc) c.op[0].role = INOUT;
                if (dt == AWL_BF16) c.tol = 1e-2;
                snprintf(c.name, sizeof c.name, "matmul %s layout %d accumulate %d",
                         awl_dtype_name(dt), l, acc);
                run_case(&c);
            }
    }
}
END_TEST

START_TEST(test_matmul_tf32)
{
    matmul_ctx exact = {false, false}, fast = {false, true};
    operand o = OPND(OUT, AWL_F32, 256, 256), a = OPND(IN, AWL_F32, 256, 1024),
            b = OPND(IN, AWL_F32, 1024, 256);
    tcase c = {.n = 3, .op = {o, a, b}, .fn = fn_matmul, .ctx = &exact};
    snprintf(c.name, sizeof c.name, "matmul f32 exact");
    double e_exact = run_case(&c);
    c.ctx = &fast;
    c.tol = 5e-3;
    snprintf(c.name, sizeof c.name, "matmul tf32");
    double e_fast = run_case(&c);
    printf("test_cuda: matmul 256x1024x256 relative error: fp32 %.2e, tf32 %.2e\n", e_exact,
           e_fast);
    /* TF32 keeps 10 mantissa bits: if the error did not grow, TF32 was not used. */
    ck_assert_msg(e_fast > 10 * e_exact, "TF32 mode changed nothing (%.2e vs %.2e)", e_fast,
                  e_exact);
}
END_TEST

/* out = a @ b + bias: the CUDA backend's epilogue against the CPU's copy of
 * the bias broadcast over the rows plus an accumulating product. */
static int fn_matmul_bias(const awl_backend *be, awl_view *const *v, const void *ctx)
{
    (void)ctx;
    if (be->matmul_bias) {
        int rc = be->matmul_bias(v[0], v[1], v[2], v[3]);
        if (rc != AWL_ERR_UNSUPPORTED) return rc;
    }
    awl_view rows = *v[3];
    rows.ndim = 2;
    rows.shape[0] = v[0]->shape[0];
    rows.shape[1] = v[3]->shape[0];
    rows.strides[0] = 0;
    rows.strides[1] = v[3]->strides[0];
    int rc = be->copy(v[0], &rows);
    return rc < 0 ? rc : be->matmul(v[0], v[1], v[2], true);
}

START_TEST(test_matmul_bias)
{
    const awl_dtype types[] = {AWL_F32, AWL_BF16};
    for (int t = 0; t < 2; t++) {
        awl_dtype dt = types[t];
        /* b as a linear layer passes it: the transposed view of a (N, K) weight */
        tcase c = {.n = 4,
                   .op = {OPND(OUT, dt, 300, 96), OPND(IN, dt, 300, 48),
                          transposed(OPND(IN, dt, 48, 96), 0, 1), OPND(IN, dt, 96)},
                   .fn = fn_matmul_bias,
                   .ref_f32 = true,
                   .tol = dt == AWL_BF16 ? 1e-2 : 0};
        snprintf(c.name, sizeof c.name, "matmul_bias %s", awl_dtype_name(dt));
        run_case(&c);
    }
    ck_assert_msg(cuda->matmul_bias != NULL, "the CUDA backend has a bias epilogue");
}
END_TEST

/* ---- indexing -------------------------------------------------------------------------------- */

static int fn_index_select(const awl_backend *be, awl_view *const *v, const void *ctx)
{
    (void)ctx;
    return be->index_select(v[0], v[1], v[2]);
}

static int fn_index_add(const awl_backend *be, awl_view *const *v, const void *ctx)
{
    (void)ctx;
    return be->index_add(v[0], v[1], v[2]);
}

static int fn_gather(const awl_backend *be, awl_view *const *v, const void *ctx)
{
    return be->gather(v[0], v[1], *(const int *)ctx, v[2]);
}

static int fn_scatter_add(const awl_backend *be, awl_view *const *v, const void *ctx)
{
    return be->scatter_add(v[0], *(const int *)ctx, v[1], v[2]);
}

START_TEST(test_index_select_add)
{
    const awl_dtype all[] = {AWL_F32, AWL_F64, AWL_BF16, AWL_I32};
    for (int t = 0; t < 4; t++) {
        awl_dtype dt = all[t];
        operand src = OPND(IN, dt, 65, 48), idx = ints(OPND(IN, AWL_I32, 4, 33), 0, 64);
        operand sets[][3] = {
            {OPND(OUT, dt, 4, 33, 48), src, idx},
            {sliced(OPND(OUT, dt, 4, 33, 48), 2, 2), transposed(src, 0, 1), transposed(idx, 0, 1)},
            {OPND(OUT, dt, 4, 33, 48), broadcast(src, 1), broadcast(idx, 0)},
        };
        for (int l = 0; l < 3; l++) {
            if (dt == AWL_I32) sets[l][1] = ints(sets[l][1], -1000, 1000);
            tcase c = {.n = 3,
                       .op = {sets[l][0], sets[l][1], sets[l][2]},
                       .fn = fn_index_select,
                       .ref_f32 = true};
            snprintf(c.name, sizeof c.name, "index_select %s layout %d", awl_dtype_name(dt), l);
            run_case(&c);
        }
        if (dt == AWL_I32) continue;
        /* index_add: many sources onto few rows, in a fixed order. */
        operand dsets[][3] = {
            {OPND(INOUT, dt, 65, 48), ints(OPND(IN, AWL_I32, 16, 128), 0, 64),
             OPND(IN, dt, 16, 128, 48)},
            {OPND(INOUT, dt, 1000, 96), ints(OPND(IN, AWL_I32, 2048), 0, 999),
             transposed(OPND(IN, dt, 2048, 96), 0, 1)},
            {transposed(OPND(INOUT, dt, 50, 40), 0, 1), ints(OPND(IN, AWL_I32, 7, 9), 0, 39),
             broadcast(OPND(IN, dt, 7, 9, 40), 1)},
            {OPND(INOUT, dt, 5, 3), ints(OPND(IN, AWL_I32, 300), 2, 2), OPND(IN, dt, 300, 3)},
        };
        for (int l = 0; l < 4; l++) {
            tcase c = {.n = 3,
                       .op = {dsets[l][0], dsets[l][1], dsets[l][2]},
                       .fn = fn_index_add,
                       .ref_f32 = true};
            snprintf(c.name, sizeof c.name, "index_add %s layout %d", awl_dtype_name(dt), l);
            run_case(&c);
        }
    }
}
END_TEST

START_TEST(test_gather_scatter)
{
    const awl_dtype all[] = {AWL_F32, AWL_F64, AWL_BF16};
    for (int t = 0; t < 3; t++) {
        awl_dtype dt = all[t];
        int axis1 = 1, axis0 = 0;
        /* cross-entropy's pattern: one column per row */
        tcase g1 = {.n = 3,
                    .op = {OPND(OUT, dt, 64, 1), OPND(IN, dt, 64, 65),
                           ints(OPND(IN, AWL_I32, 64, 1), 0, 64)},
                    .fn = fn_gather,
                    .ctx = &axis1,
                    .ref_f32 = true};
        snprintf(g1.name, sizeof g1.name, "gather %s axis 1", awl_dtype_name(dt));
        run_case(&g1);
        tcase g0 = {.n = 3,
                    .op = {OPND(OUT, dt, 9, 33), transposed(OPND(IN, dt, 17, 33), 0, 1),
                           ints(OPND(IN, AWL_I32, 9, 33), 0, 16)},
                    .fn = fn_gather,
                    .ctx = &axis0,
                    .ref_f32 = true};
        snprintf(g0.name, sizeof g0.name, "gather %s axis 0", awl_dtype_name(dt));
        run_case(&g0);
        tcase s1 = {.n = 3,
                    .op = {OPND(INOUT, dt, 64, 65), ints(OPND(IN, AWL_I32, 64, 3), 0, 64),
                           OPND(IN, dt, 64, 3)},
                    .fn = fn_scatter_add,
                    .ctx = &axis1,
                    .ref_f32 = true};
        snprintf(s1.name, sizeof s1.name, "scatter_add %s axis 1", awl_dtype_name(dt));
        run_case(&s1);
        tcase s0 = {.n = 3,
                    .op = {transposed(OPND(INOUT, dt, 5, 33), 0, 1),
                           ints(OPND(IN, AWL_I32, 40, 33), 0, 4),
                           broadcast(OPND(IN, dt, 40, 33), 1)},
                    .fn = fn_scatter_add,
                    .ctx = &axis0,
                    .ref_f32 = true};
        snprintf(s0.name, sizeof s0.name, "scatter_add %s axis 0 repeated", awl_dtype_name(dt));
        run_case(&s0);
    }
}
END_TEST

/* ---- random -------------------------------------------------------------------------------- */

typedef struct random_ctx {
    awl_random_kind kind;
    uint64_t seed, offset;
    double a, b;
} random_ctx;

static int fn_random(const awl_backend *be, awl_view *const *v, const void *ctx)
{
    const random_ctx *r = ctx;
    return be->random(v[0], r->kind, r->seed, r->offset, r->a, r->b);
}

START_TEST(test_random)
{
    for (int t = 0; t < 3; t++)
        for (int kind = 0; kind < 2; kind++) {
            awl_dtype dt = float_types[t];
            random_ctx r = {kind, next_u64(), next_u64() >> 8, kind ? 0.5 : -1.5, kind ? 2.0 : 3.0};
            operand outs[] = {OPND(OUT, dt, 100003), sliced(OPND(OUT, dt, 37, 29), 1, 2),
                              transposed(OPND(OUT, dt, 5, 7, 3), 0, 2)};
            for (int l = 0; l < 3; l++) {
                tcase c = {.n = 1, .op = {outs[l]}, .fn = fn_random, .ctx = &r};
                /* Uniform draws must be bit-identical; normal ones go through
                 * libm's log/cos/sin against CUDA's (an ulp or two in double). */
                c.tol = kind == AWL_RANDOM_UNIFORM ? 1e-300 : (dt == AWL_F64 ? 1e-14 : 1e-7);
                snprintf(c.name, sizeof c.name, "random %s %s layout %d",
                         kind ? "normal" : "uniform", awl_dtype_name(dt), l);
                double e = run_case(&c);
                if (l == 0)
                    printf("test_cuda: random %s %s: relative difference to the CPU %.3g\n",
                           kind ? "normal" : "uniform", awl_dtype_name(dt), e);
            }
        }
}
END_TEST

/* ---- fused kernels ----------------------------------------------------------------------- */

static int fn_softmax(const awl_backend *be, awl_view *const *v, const void *ctx)
{
    return be->softmax_forward(v[0], v[1], *(const bool *)ctx);
}

static int fn_softmax_bwd(const awl_backend *be, awl_view *const *v, const void *ctx)
{
    return be->softmax_backward(v[0], v[1], v[2], *(const bool *)ctx);
}

START_TEST(test_softmax)
{
    const int64_t shapes[][2] = {{37, 65}, {128, 1000}, {8, 50304}, {3, 7}};
    for (int t = 0; t < 2; t++)
        for (int s = 0; s < 4; s++)
            for (int lg = 0; lg < 2; lg++) {
                awl_dtype dt = t ? AWL_BF16 : AWL_F32;
                bool log = lg;
                int64_t R = shapes[s][0], N = shapes[s][1];
                tcase f = {.n = 2,
                           .op = {OPND(OUT, dt, R, N), ranged(OPND(IN, dt, R, N), -8, 8)},
                           .fn = fn_softmax,
                           .ctx = &log,
                           .ref_f32 = true};
                snprintf(f.name, sizeof f.name, "softmax %s log %d (%lld, %lld)",
                         awl_dtype_name(dt), lg, (long long)R, (long long)N);
                run_case(&f);
                operand y = log ? ranged(OPND(IN, dt, R, N), -6, -0.01)
                                : ranged(OPND(IN, dt, R, N), 0.001, 0.5);
                tcase b = {.n = 3,
                           .op = {OPND(OUT, dt, R, N), OPND(IN, dt, R, N), y},
                           .fn = fn_softmax_bwd,
                           .ctx = &log,
                           .ref_f32 = true};
                if (dt == AWL_F32) b.tol = 1e-4; /* dy - dot cancels */
                if (dt == AWL_BF16) b.tol = 3e-2;
                snprintf(b.name, sizeof b.name, "softmax_backward %s log %d (%lld, %lld)",
                         awl_dtype_name(dt), lg, (long long)R, (long long)N);
                run_case(&b);
            }
}
END_TEST

typedef struct ln_ctx {
    bool weight, bias;
} ln_ctx;

static int fn_ln_fwd(const awl_backend *be, awl_view *const *v, const void *ctx)
{
    const ln_ctx *l = ctx;
    return be->layernorm_forward(v[0], v[1], v[2], v[3], l->weight ? v[4] : NULL,
                                 l->bias ? v[5] : NULL, 1e-5);
}

static int fn_ln_bwd(const awl_backend *be, awl_view *const *v, const void *ctx)
{
    const ln_ctx *l = ctx;
    return be->layernorm_backward(v[0], l->bias ? v[1] : NULL, l->bias ? v[2] : NULL, v[3], v[4],
                                  l->weight ? v[5] : NULL, v[6], v[7]);
}

START_TEST(test_layernorm)
{
    const int64_t shapes[][2] = {{64, 384}, {1000, 768}, {33, 100}, {5, 2048}};
    for (int t = 0; t < 2; t++)
        for (int s = 0; s < 4; s++)
            for (int wb = 0; wb < 2; wb++) {
                awl_dtype dt = t ? AWL_BF16 : AWL_F32;
                int64_t R = shapes[s][0], C = shapes[s][1];
                ln_ctx l = {wb == 0, wb == 0};
                tcase f = {.n = 6,
                           .op = {OPND(OUT, dt, R, C), OPND(OUT, AWL_F32, R), OPND(OUT, AWL_F32, R),
                                  ranged(OPND(IN, dt, R, C), -3, 5), OPND(IN, dt, C),
                                  OPND(IN, dt, C)},
                           .fn = fn_ln_fwd,
                           .ctx = &l,
                           .ref_f32 = true,
                           .tol = t ? 1e-2 : 2e-5};
                snprintf(f.name, sizeof f.name, "layernorm %s (%lld, %lld) affine %d",
                         awl_dtype_name(dt), (long long)R, (long long)C, wb == 0);
                run_case(&f);
                tcase b = {.n = 8,
                           .op = {OPND(OUT, dt, R, C), OPND(OUT, dt, C), OPND(OUT, dt, C),
                                  OPND(IN, dt, R, C), ranged(OPND(IN, dt, R, C), -3, 5),
                                  OPND(IN, dt, C), ranged(OPND(IN, AWL_F32, R), -0.5, 1.5),
                                  ranged(OPND(IN, AWL_F32, R), 0.3, 1.2)},
                           .fn = fn_ln_bwd,
                           .ctx = &l,
                           .ref_f32 = true,
                           .tol = t ? 2e-2 : 1e-4};
                snprintf(b.name, sizeof b.name, "layernorm_backward %s (%lld, %lld) affine %d",
                         awl_dtype_name(dt), (long long)R, (long long)C, wb == 0);
                run_case(&b);
            }
}
END_TEST

static int fn_ce_fwd(const awl_backend *be, awl_view *const *v, const void *ctx)
{
    return be->cross_entropy_forward(v[0], v[1], v[2], v[3], *(const int *)ctx);
}

static int fn_ce_bwd(const awl_backend *be, awl_view *const *v, const void *ctx)
{
    return be->cross_entropy_backward(v[0], v[1], v[2], v[3], v[4], *(const int *)ctx);
}

START_TEST(test_cross_entropy)
{
    const int64_t shapes[][2] = {{64, 65}, {32, 50304}, {300, 1000}};
    for (int t = 0; t < 2; t++)
        for (int s = 0; s < 3; s++) {
            awl_dtype dt = t ? AWL_BF16 : AWL_F32;
            int64_t N = shapes[s][0], V = shapes[s][1];
            int ignore = 3; /* some targets hit it: targets are drawn from [0, 9] */
            operand targets = ints(OPND(IN, AWL_I32, N), 0, 9);
            tcase f = {.n = 4,
                       .op = {OPND(OUT, dt, N), OPND(OUT, AWL_F32, N),
                              ranged(OPND(IN, dt, N, V), -6, 6), targets},
                       .fn = fn_ce_fwd,
                       .ctx = &ignore,
                       .ref_f32 = true};
            snprintf(f.name, sizeof f.name, "cross_entropy %s (%lld, %lld)", awl_dtype_name(dt),
                     (long long)N, (long long)V);
            run_case(&f);
            double lo = log((double)V) + 1.0;
            tcase b = {.n = 5,
                       .op = {OPND(OUT, dt, N, V), broadcast(OPND(IN, dt, N), 0),
                              ranged(OPND(IN, dt, N, V), -6, 6),
                              ranged(OPND(IN, AWL_F32, N), lo, lo + 1), targets},
                       .fn = fn_ce_bwd,
                       .ctx = &ignore,
                       .ref_f32 = true};
            snprintf(b.name, sizeof b.name, "cross_entropy_backward %s (%lld, %lld)",
                     awl_dtype_name(dt), (long long)N, (long long)V);
            run_case(&b);
        }
}
END_TEST

typedef struct att_ctx {
    double scale;
    bool causal, tf32;
} att_ctx;

static int fn_att_fwd(const awl_backend *be, awl_view *const *v, const void *ctx)
{
    const att_ctx *a = ctx;
    if (a->tf32 && be == cuda) be->set_matmul_fast_fp32(true);
    int rc = be->attention_forward(v[0], v[1], v[2], v[3], v[4], a->scale, a->causal);
    if (a->tf32 && be == cuda) be->set_matmul_fast_fp32(false);
    return rc;
}

static int fn_att_bwd(const awl_backend *be, awl_view *const *v, const void *ctx)
{
    const att_ctx *a = ctx;
    if (a->tf32 && be == cuda) be->set_matmul_fast_fp32(true);
    int rc = be->attention_backward(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], a->scale,
                                    a->causal);
    if (a->tf32 && be == cuda) be->set_matmul_fast_fp32(false);
    return rc;
}

/* q, k or v as a slice of a fused (B, T, 3, H, D) projection: strides along
 * B, H, T of that layout, offset `which` * H * D. */
static operand qkv_slice(role r, awl_dtype dt, int64_t B, int64_t H, int64_t T, int64_t D,
                         int which)
{
    operand o = OPND(r, dt, B, H, T, D);
    o.strides[0] = T * 3 * H * D;
    o.strides[1] = D;
    o.strides[2] = 3 * H * D;
    o.strides[3] = 1;
    o.offset = which * H * D;
    return ranged(o, -1, 1);
}

START_TEST(test_attention)
{
    /* The last shape only in the default float32 mode: enough heads that the
     * one-pass backward gives each block several key tiles (its slices). */
    const int64_t shapes[][4] = {
        {2, 3, 100, 64}, {1, 2, 256, 128}, {2, 2, 67, 32}, {1, 1, 130, 80}, {8, 40, 256, 16}};
    /* Every rung: tensor cores (float32 as 3xTF32, or TF32 in TF32 mode;
     * bfloat16 mma), float32's backward in two kernels where it would take
     * one pass (AWL_CUDA_ATTENTION=split), and the CUDA-core kernels
     * (AWL_CUDA_ATTENTION=simt). */
    static const struct {
        awl_dtype dt;
        const char *env; /* AWL_CUDA_ATTENTION, or NULL */
        bool tf32;
        double tol_fwd, tol_bwd;
        const char *name;
    } modes[] = {
        {AWL_F32, NULL, false, 1e-5, 1e-4, ""},
        {AWL_F32, NULL, true, 5e-3, 1e-2, " tf32"},
        {AWL_F32, "split", false, 1e-5, 1e-4, " split"},
        {AWL_F32, "split", true, 5e-3, 1e-2, " tf32 split"},
        {AWL_F32, "simt", false, 1e-5, 1e-4, " simt"},
        {AWL_BF16, NULL, false, 1e-2, 2e-2, ""},
        {AWL_BF16, "simt", false, 1e-2, 2e-2, " simt"},
    };
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++)
        for (int s = 0; s < 5; s++)
            for (int causal = 0; causal < 2; causal++) {
                if (s == 4 && m != 0) continue;
                awl_dtype dt = modes[m].dt;
                if (modes[m].env)
                    setenv("AWL_CUDA_ATTENTION", modes[m].env, 1);
                else
                    unsetenv("AWL_CUDA_ATTENTION");
                int64_t B = shapes[s][0], H = shapes[s][1], T = shapes[s][2], D = shapes[s][3];
                att_ctx a = {1.0 / sqrt((double)D), causal == 1, modes[m].tf32};
                bool strided = s % 2 == 0;
                operand q = strided ? qkv_slice(IN, dt, B, H, T, D, 0)
                                    : ranged(OPND(IN, dt, B, H, T, D), -1, 1);
                operand k = strided ? qkv_slice(IN, dt, B, H, T, D, 1)
                                    : ranged(OPND(IN, dt, B, H, T, D), -1, 1);
                operand v = strided ? qkv_slice(IN, dt, B, H, T, D, 2)
                                    : ranged(OPND(IN, dt, B, H, T, D), -1, 1);
                tcase f = {.n = 5,
                           .op = {OPND(OUT, dt, B, H, T, D), OPND(OUT, AWL_F32, B, H, T), q, k, v},
                           .fn = fn_att_fwd,
                           .ctx = &a,
                           .ref_f32 = true,
                           .tol = modes[m].tol_fwd};
                snprintf(f.name, sizeof f.name, "attention %s%s (%lld,%lld,%lld,%lld) causal %d%s",
                         awl_dtype_name(dt), modes[m].name, (long long)B, (long long)H,
                         (long long)T, (long long)D, causal, strided ? " strided" : "");
                run_case(&f);
                operand dq =
                    strided ? qkv_slice(OUT, dt, B, H, T, D, 0) : OPND(OUT, dt, B, H, T, D);
                tcase b = {.n = 9,
                           .op = {dq, OPND(OUT, dt, B, H, T, D), OPND(OUT, dt, B, H, T, D),
                                  ranged(OPND(IN, dt, B, H, T, D), -1, 1), q, k, v,
                                  ranged(OPND(IN, dt, B, H, T, D), -1, 1),
                                  ranged(OPND(IN, AWL_F32, B, H, T), 2.5, 3.5)},
                           .fn = fn_att_bwd,
                           .ctx = &a,
                           .ref_f32 = true,
                           .tol = modes[m].tol_bwd};
                snprintf(b.name, sizeof b.name,
                         "attention_backward %s%s (%lld,%lld,%lld,%lld) causal %d%s",
                         awl_dtype_name(dt), modes[m].name, (long long)B, (long long)H,
                         (long long)T, (long long)D, causal, strided ? " strided" : "");
                run_case(&b);
            }
    unsetenv("AWL_CUDA_ATTENTION");
}
END_TEST

typedef struct adam_ctx {
    int n;
    float wd[4];
    awl_adamw_args args;
} adam_ctx;

static int fn_adamw(const awl_backend *be, awl_view *const *v, const void *ctx)
{
    const adam_ctx *a = ctx;
    awl_view p[4], g[4], m[4], s[4];
    for (int i = 0; i < a->n; i++) {
        p[i] = *v[4 * i];
        g[i] = *v[4 * i + 1];
        m[i] = *v[4 * i + 2];
        s[i] = *v[4 * i + 3];
    }
    return be->adamw_step(a->n, p, g, m, s, a->wd, &a->args);
}

START_TEST(test_adamw)
{
    adam_ctx a = {3, {0.1f, 0.0f, 0.1f, 0}, {1e-3f, 0.9f, 0.95f, 1e-8f, 7}};
    const int64_t sizes[3] = {1000003, 1, 4096};
    tcase c = {.n = 12, .fn = fn_adamw, .ctx = &a, .tol = 1e-6};
    for (int i = 0; i < 3; i++) {
        c.op[4 * i] = ranged(OPND(INOUT, AWL_F32, sizes[i]), -1, 1);
        c.op[4 * i + 1] = ranged(OPND(IN, AWL_F32, sizes[i]), -1, 1);
        c.op[4 * i + 2] = ranged(OPND(INOUT, AWL_F32, sizes[i]), -0.1, 0.1);
        c.op[4 * i + 3] = ranged(OPND(INOUT, AWL_F32, sizes[i]), 1e-4, 1e-2);
    }
    snprintf(c.name, sizeof c.name, "adamw_step");
    double e = run_case(&c);
    printf("test_cuda: adamw relative difference to the CPU %.3g (0 means bit-identical)\n", e);
}
END_TEST

static Suite *cuda_suite(void)
{
    /* Named groups, so CK_RUN_CASE=fused (say) runs one of them. */
    const struct {
        const char *group;
        const TTest *test;
    } tests[] = {
        {"memory", test_device_and_memory},
        {"memory", test_refusals},
        {"elementwise", test_fill},
        {"elementwise", test_copy},
        {"elementwise", test_unary},
        {"elementwise", test_binary},
        {"elementwise", test_where},
        {"reduce", test_reduce},
        {"matmul", test_matmul},
        {"matmul", test_matmul_tf32},
        {"matmul", test_matmul_bias},
        {"index", test_index_select_add},
        {"index", test_gather_scatter},
        {"random", test_random},
        {"fused", test_softmax},
        {"fused", test_layernorm},
        {"fused", test_cross_entropy},
        {"fused", test_attention},
        {"fused", test_adamw},
    };
    Suite *s = suite_create("cuda");
    TCase *tc = NULL;
    const char *current = "";
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        if (strcmp(current, tests[i].group) != 0) {
            current = tests[i].group;
            tc = tcase_create(current);
            suite_add_tcase(s, tc);
        }
        tcase_add_test(tc, tests[i].test);
    }
    return s;
}
#endif

int main(void)
{
#ifndef AWL_WITH_CUDA
    printf("test_cuda: skipped: awl was built without CUDA (AWL_WITH_CUDA=OFF)\n");
    return 0;
#else
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        printf("test_cuda: skipped: no CUDA device (cudaGetDeviceCount: %s)\n",
               err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
        return 0;
    }
    cuda = awl_cuda_backend();
    cpu = awl_cpu_backend();
    const char *seed = getenv("AWL_TEST_SEED");
    rng_state = seed ? strtoull(seed, NULL, 10) : (uint64_t)time(NULL);
    printf("test_cuda: %d device(s); inputs from AWL_TEST_SEED=%llu\n", count,
           (unsigned long long)rng_state);
    SRunner *sr = srunner_create(cuda_suite());
    /* A child forked after CUDA was initialised (cudaGetDeviceCount above)
     * cannot use the device, so the tests run in this process. */
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
#endif
}
