/*
 * backends/cpu/cpu_elementwise.c - fill, copy (with dtype conversion), unary,
 * binary and where on strided views.
 *
 * Every op is one cpu_iter walk (cpu_iter.c) calling a typed segment kernel
 * picked from a table indexed by dtype and op code. The kernels are generated
 * from the op formulas of backends/ops.h by the DEFINE_* macros below, so
 * float32, float64 and int32 share the one definition of each op; each
 * generated kernel has three loops: all operands contiguous (vectorised through `omp simd`), one
 * input broadcast as a scalar (also vectorised), and the general strided loop.
 *
 * Why `omp simd` and not `restrict`: the contract allows out to be the very
 * same view as an input (in-place updates), which `restrict` would make
 * undefined. `omp simd` only promises that iterations are independent, which
 * holds for exact aliasing, and makes GCC vectorise without a runtime overlap
 * check that would send in-place ops down the scalar path.
 *
 * Arithmetic types: float32 computes in float (through <tgmath.h>, so exp()
 * is expf()), float64 in double, int32 in int64 so that sums and products
 * wrap when stored instead of overflowing (undefined behaviour in C). Scalar
 * comparisons (x > alpha) are done in double so that alpha is never rounded.
 * Which ops int32 has (no exp, division or pow: integer semantics there are
 * a choice the tensor layer should make explicitly) is ops.h's dtype column;
 * bfloat16 is a storage type here: fill, copy and where move it, arithmetic
 * refuses it.
 */
#include <stdint.h>
#include <string.h>
#include <tgmath.h>

#include "backends/cpu/cpu_internal.h"
#include "backends/cpu/cpu_math.h"

#define SEGMENT_ARGS int64_t n, int64_t flat, char *const *p, const int64_t *s, const void *ctx

/* ---- unary ------------------------------------------------------------------ */

/* out = formula(in) for T elements computed in CT (the formulas' C); ALPHA
 * converts the op's double scalar to CT. */
#define DEFINE_UNARY(NAME, T, CT, ALPHA, EXPR)                                                     \
    static void NAME(SEGMENT_ARGS)                                                                 \
    {                                                                                              \
        typedef CT C;                                                                              \
        (void)flat;                                                                                \
        const double alpha_d = *(const double *)ctx;                                               \
        const C alpha = ALPHA(alpha_d);                                                            \
        (void)alpha;                                                                               \
        T *o = (T *)p[0];                                                                          \
        const T *in = (const T *)p[1];                                                             \
        if (s[0] == 1 && s[1] == 1) {                                                              \
            _Pragma("omp simd") for (int64_t i = 0; i < n; i++)                                    \
            {                                                                                      \
                C x = in[i];                                                                       \
                o[i] = (T)(EXPR);                                                                  \
            }                                                                                      \
        } else if (s[0] == 1 && s[1] == 0) {                                                       \
            C x = in[0];                                                                           \
            const T v = (T)(EXPR);                                                                 \
            _Pragma("omp simd") for (int64_t i = 0; i < n; i++) o[i] = v;                          \
        } else {                                                                                   \
            for (int64_t i = 0; i < n; i++) {                                                      \
                C x = in[i * s[1]];                                                                \
                o[i * s[0]] = (T)(EXPR);                                                           \
            }                                                                                      \
        }                                                                                          \
    }

#define ALPHA_F32(a) ((float)(a))
#define ALPHA_F64(a) (a)
#define ALPHA_I32(a) ((int64_t)cpu_double_to_i32(a))

/* A kernel per op and dtype; int32's versions of float-only ops are never
 * entered in the table below, and the compiler drops them. */
#define DEF_UNARY(OP, name, dtypes, domain, math, EXPR)                                            \
    DEFINE_UNARY(unary_f32_##OP, float, float, ALPHA_F32, EXPR)                                    \
    DEFINE_UNARY(unary_f64_##OP, double, double, ALPHA_F64, EXPR)                                  \
    DEFINE_UNARY(unary_i32_##OP, int32_t, int64_t, ALPHA_I32, EXPR)
AWL_UNARY_OPS(DEF_UNARY)

/* The entry for op in dtype DT: NULL where the op is not defined for it. */
#define ENTRY_FOR(DT, dtypes, fn) ((dtypes)&AWL_DT(DT) ? (fn) : NULL)
#define UNARY_ENTRY_F32(OP, name, dtypes, domain, math, EXPR) unary_f32_##OP,
#define UNARY_ENTRY_F64(OP, name, dtypes, domain, math, EXPR) unary_f64_##OP,
#define UNARY_ENTRY_I32(OP, name, dtypes, domain, math, EXPR)                                      \
    ENTRY_FOR(AWL_I32, dtypes, unary_i32_##OP),
/* Indexed [dtype][op]; NULL where the op is not defined for the dtype. */
static const cpu_segment_fn unary_kernels[3][AWL_UNARY_OP_COUNT] = {
    [AWL_F32] = {AWL_UNARY_OPS(UNARY_ENTRY_F32)},
    [AWL_F64] = {AWL_UNARY_OPS(UNARY_ENTRY_F64)},
    [AWL_I32] = {AWL_UNARY_OPS(UNARY_ENTRY_I32)},
};

static int refuse_dtype(const char *what, const char *opname, awl_dtype dtype)
{
    if (dtype == AWL_BF16)
        return awl_error(AWL_ERR_INVALID,
                         "awl_cpu %s %s: bfloat16 is a storage type on the CPU backend; "
                         "convert to float32 first",
                         what, opname);
    return awl_error(AWL_ERR_INVALID, "awl_cpu %s %s: not defined for %s", what, opname,
                     awl_dtype_name(dtype));
}

int awl_cpu_unary(awl_unary_op op, const awl_view *out, const awl_view *in, double alpha)
{
    if (op < 0 || op >= AWL_UNARY_OP_COUNT)
        return awl_error(AWL_ERR_INVALID, "awl_cpu unary: unknown op %d", (int)op);
    cpu_segment_fn fn = out->dtype < AWL_BF16 ? unary_kernels[out->dtype][op] : NULL;
    if (!fn) return refuse_dtype("unary", awl_unary_op_name(op), out->dtype);
    const awl_view *views[2] = {out, in};
    cpu_iter it;
    awl_cpu_iter_init(&it, 2, views);
    awl_cpu_iter_run(&it, awl_unary_info(op)->math ? CPU_GRAIN_COSTLY : CPU_GRAIN_CHEAP, fn,
                     &alpha);
    return AWL_OK;
}

/* ---- binary ------------------------------------------------------------------ */

#define DEFINE_BINARY(NAME, T, CT, EXPR)                                                           \
    static void NAME(SEGMENT_ARGS)                                                                 \
    {                                                                                              \
        typedef CT C;                                                                              \
        (void)flat;                                                                                \
        (void)ctx;                                                                                 \
        T *o = (T *)p[0];                                                                          \
        const T *pa = (const T *)p[1], *pb = (const T *)p[2];                                      \
        if (s[0] == 1 && s[1] == 1 && s[2] == 1) {                                                 \
            _Pragma("omp simd") for (int64_t i = 0; i < n; i++)                                    \
            {                                                                                      \
                C a = pa[i], b = pb[i];                                                            \
                o[i] = (T)(EXPR);                                                                  \
            }                                                                                      \
        } else if (s[0] == 1 && s[1] == 1 && s[2] == 0) {                                          \
            const C b = pb[0];                                                                     \
            _Pragma("omp simd") for (int64_t i = 0; i < n; i++)                                    \
            {                                                                                      \
                C a = pa[i];                                                                       \
                o[i] = (T)(EXPR);                                                                  \
            }                                                                                      \
        } else if (s[0] == 1 && s[1] == 0 && s[2] == 1) {                                          \
            const C a = pa[0];                                                                     \
            _Pragma("omp simd") for (int64_t i = 0; i < n; i++)                                    \
            {                                                                                      \
                C b = pb[i];                                                                       \
                o[i] = (T)(EXPR);                                                                  \
            }                                                                                      \
        } else {                                                                                   \
            for (int64_t i = 0; i < n; i++) {                                                      \
                C a = pa[i * s[1]], b = pb[i * s[2]];                                              \
                o[i * s[0]] = (T)(EXPR);                                                           \
            }                                                                                      \
        }                                                                                          \
    }

#define DEF_BINARY(OP, name, dtypes, domain, math, EXPR)                                           \
    DEFINE_BINARY(binary_f32_##OP, float, float, EXPR)                                             \
    DEFINE_BINARY(binary_f64_##OP, double, double, EXPR)                                           \
    DEFINE_BINARY(binary_i32_##OP, int32_t, int64_t, EXPR)
AWL_BINARY_OPS(DEF_BINARY)

#define BINARY_ENTRY_F32(OP, name, dtypes, domain, math, EXPR) binary_f32_##OP,
#define BINARY_ENTRY_F64(OP, name, dtypes, domain, math, EXPR) binary_f64_##OP,
#define BINARY_ENTRY_I32(OP, name, dtypes, domain, math, EXPR)                                     \
    ENTRY_FOR(AWL_I32, dtypes, binary_i32_##OP),
static const cpu_segment_fn binary_kernels[3][AWL_BINARY_OP_COUNT] = {
    [AWL_F32] = {AWL_BINARY_OPS(BINARY_ENTRY_F32)},
    [AWL_F64] = {AWL_BINARY_OPS(BINARY_ENTRY_F64)},
    [AWL_I32] = {AWL_BINARY_OPS(BINARY_ENTRY_I32)},
};

int awl_cpu_binary(awl_binary_op op, const awl_view *out, const awl_view *a, const awl_view *b)
{
    if (op < 0 || op >= AWL_BINARY_OP_COUNT)
        return awl_error(AWL_ERR_INVALID, "awl_cpu binary: unknown op %d", (int)op);
    cpu_segment_fn fn = out->dtype < AWL_BF16 ? binary_kernels[out->dtype][op] : NULL;
    if (!fn) return refuse_dtype("binary", awl_binary_op_name(op), out->dtype);
    const awl_view *views[3] = {out, a, b};
    cpu_iter it;
    awl_cpu_iter_init(&it, 3, views);
    awl_cpu_iter_run(&it, awl_binary_info(op)->math ? CPU_GRAIN_COSTLY : CPU_GRAIN_CHEAP, fn, NULL);
    return AWL_OK;
}

/* ---- copy with conversion ------------------------------------------------------ */

/* Same dtype: a move of `size`-byte words (T is an unsigned integer type). */
#define DEFINE_MOVE(NAME, T)                                                                       \
    static void NAME(SEGMENT_ARGS)                                                                 \
    {                                                                                              \
        (void)flat;                                                                                \
        (void)ctx;                                                                                 \
        T *o = (T *)p[0];                                                                          \
        const T *in = (const T *)p[1];                                                             \
        if (s[0] == 1 && s[1] == 1) {                                                              \
            if (o != in) memcpy(o, in, (size_t)n * sizeof(T));                                     \
        } else if (s[0] == 1 && s[1] == 0) {                                                       \
            const T v = in[0];                                                                     \
            _Pragma("omp simd") for (int64_t i = 0; i < n; i++) o[i] = v;                          \
        } else {                                                                                   \
            for (int64_t i = 0; i < n; i++) o[i * s[0]] = in[i * s[1]];                            \
        }                                                                                          \
    }

DEFINE_MOVE(move_16, uint16_t)
DEFINE_MOVE(move_32, uint32_t)
DEFINE_MOVE(move_64, uint64_t)

/* Different dtypes: out = CONV(in element). */
#define DEFINE_CONVERT(NAME, TO, FROM, CONV)                                                       \
    static void NAME(SEGMENT_ARGS)                                                                 \
    {                                                                                              \
        (void)flat;                                                                                \
        (void)ctx;                                                                                 \
        TO *o = (TO *)p[0];                                                                        \
        const FROM *in = (const FROM *)p[1];                                                       \
        if (s[0] == 1 && s[1] == 1) {                                                              \
            _Pragma("omp simd") for (int64_t i = 0; i < n; i++) o[i] = CONV(in[i]);                \
        } else {                                                                                   \
            for (int64_t i = 0; i < n; i++) o[i * s[0]] = CONV(in[i * s[1]]);                      \
        }                                                                                          \
    }

#define TO_F32(x) ((float)(x))
#define TO_F64(x) ((double)(x))
#define TO_I32(x) cpu_double_to_i32((double)(x))
#define TO_BF16(x) awl_float_to_bf16((float)(x))

DEFINE_CONVERT(convert_f32_f64, float, double, TO_F32)
DEFINE_CONVERT(convert_f32_i32, float, int32_t, TO_F32)
DEFINE_CONVERT(convert_f32_bf16, float, awl_bf16, awl_bf16_to_float)
DEFINE_CONVERT(convert_f64_f32, double, float, TO_F64)
DEFINE_CONVERT(convert_f64_i32, double, int32_t, TO_F64)
DEFINE_CONVERT(convert_i32_f32, int32_t, float, TO_I32)
DEFINE_CONVERT(convert_i32_f64, int32_t, double, TO_I32)
DEFINE_CONVERT(convert_bf16_f32, awl_bf16, float, TO_BF16)
DEFINE_CONVERT(convert_bf16_f64, awl_bf16, double, TO_BF16)
DEFINE_CONVERT(convert_bf16_i32, awl_bf16, int32_t, TO_BF16)

static inline double bf16_to_f64(awl_bf16 h) { return awl_bf16_to_float(h); }
static inline int32_t bf16_to_i32(awl_bf16 h) { return cpu_double_to_i32(awl_bf16_to_float(h)); }
DEFINE_CONVERT(convert_f64_bf16, double, awl_bf16, bf16_to_f64)
DEFINE_CONVERT(convert_i32_bf16, int32_t, awl_bf16, bf16_to_i32)

/* Indexed [out dtype][in dtype]. */
static const cpu_segment_fn copy_kernels[AWL_DTYPE_COUNT][AWL_DTYPE_COUNT] = {
    [AWL_F32] = {move_32, convert_f32_f64, convert_f32_i32, convert_f32_bf16},
    [AWL_F64] = {convert_f64_f32, move_64, convert_f64_i32, convert_f64_bf16},
    [AWL_I32] = {convert_i32_f32, convert_i32_f64, move_32, convert_i32_bf16},
    [AWL_BF16] = {convert_bf16_f32, convert_bf16_f64, convert_bf16_i32, move_16},
};

static bool dtype_ok(awl_dtype d) { return d >= 0 && d < AWL_DTYPE_COUNT; }

int awl_cpu_copy(const awl_view *out, const awl_view *in)
{
    if (!dtype_ok(out->dtype) || !dtype_ok(in->dtype))
        return awl_error(AWL_ERR_INVALID, "awl_cpu copy: invalid dtype %d -> %d", (int)in->dtype,
                         (int)out->dtype);
    const awl_view *views[2] = {out, in};
    cpu_iter it;
    awl_cpu_iter_init(&it, 2, views);
    awl_cpu_iter_run(&it, CPU_GRAIN_CHEAP, copy_kernels[out->dtype][in->dtype], NULL);
    return AWL_OK;
}

/* ---- fill ------------------------------------------------------------------------- */

/* ctx points at the value already converted to out's dtype. */
#define DEFINE_FILL(NAME, T)                                                                       \
    static void NAME(SEGMENT_ARGS)                                                                 \
    {                                                                                              \
        (void)flat;                                                                                \
        T *o = (T *)p[0];                                                                          \
        const T v = *(const T *)ctx;                                                               \
        if (s[0] == 1) {                                                                           \
            _Pragma("omp simd") for (int64_t i = 0; i < n; i++) o[i] = v;                          \
        } else {                                                                                   \
            for (int64_t i = 0; i < n; i++) o[i * s[0]] = v;                                       \
        }                                                                                          \
    }

DEFINE_FILL(fill_16, uint16_t)
DEFINE_FILL(fill_32, uint32_t)
DEFINE_FILL(fill_64, uint64_t)

int awl_cpu_fill(const awl_view *out, double value)
{
    if (!dtype_ok(out->dtype))
        return awl_error(AWL_ERR_INVALID, "awl_cpu fill: invalid dtype %d", (int)out->dtype);
    uint64_t bits = 0;
    cpu_store(out->dtype, (char *)&bits, 0, value);
    size_t size = awl_dtype_size(out->dtype);
    cpu_segment_fn fn = size == 2 ? fill_16 : size == 4 ? fill_32 : fill_64;
    const awl_view *views[1] = {out};
    cpu_iter it;
    awl_cpu_iter_init(&it, 1, views);
    awl_cpu_iter_run(&it, CPU_GRAIN_CHEAP, fn, &bits);
    return AWL_OK;
}

/* ---- where ------------------------------------------------------------------------ */

/* out = cond != 0 ? a : b, moving T-sized words; C is cond's type, NZ tests
 * one cond element. */
#define DEFINE_WHERE(NAME, T, C, NZ)                                                               \
    static void NAME(SEGMENT_ARGS)                                                                 \
    {                                                                                              \
        (void)flat;                                                                                \
        (void)ctx;                                                                                 \
        T *o = (T *)p[0];                                                                          \
        const C *c = (const C *)p[1];                                                              \
        const T *pa = (const T *)p[2], *pb = (const T *)p[3];                                      \
        if (s[0] == 1 && s[1] == 1 && s[2] == 1 && s[3] == 1) {                                    \
            _Pragma("omp simd") for (int64_t i = 0; i < n; i++) o[i] = NZ(c[i]) ? pa[i] : pb[i];   \
        } else {                                                                                   \
            for (int64_t i = 0; i < n; i++)                                                        \
                o[i * s[0]] = NZ(c[i * s[1]]) ? pa[i * s[2]] : pb[i * s[3]];                       \
        }                                                                                          \
    }

#define NZ_NUM(x) ((x) != 0)
#define NZ_BF16(x) (((x).bits & 0x7fffu) != 0)

#define DEFINE_WHERE_SIZES(SUF, C, NZ)                                                             \
    DEFINE_WHERE(where_##SUF##_16, uint16_t, C, NZ)                                                \
    DEFINE_WHERE(where_##SUF##_32, uint32_t, C, NZ)                                                \
    DEFINE_WHERE(where_##SUF##_64, uint64_t, C, NZ)
DEFINE_WHERE_SIZES(f32, float, NZ_NUM)
DEFINE_WHERE_SIZES(f64, double, NZ_NUM)
DEFINE_WHERE_SIZES(i32, int32_t, NZ_NUM)
DEFINE_WHERE_SIZES(bf16, awl_bf16, NZ_BF16)

/* Indexed [cond dtype][log2(element size) - 1]. */
static const cpu_segment_fn where_kernels[AWL_DTYPE_COUNT][3] = {
    [AWL_F32] = {where_f32_16, where_f32_32, where_f32_64},
    [AWL_F64] = {where_f64_16, where_f64_32, where_f64_64},
    [AWL_I32] = {where_i32_16, where_i32_32, where_i32_64},
    [AWL_BF16] = {where_bf16_16, where_bf16_32, where_bf16_64},
};

int awl_cpu_where(const awl_view *out, const awl_view *cond, const awl_view *a, const awl_view *b)
{
    if (!dtype_ok(out->dtype) || !dtype_ok(cond->dtype))
        return awl_error(AWL_ERR_INVALID, "awl_cpu where: invalid dtype");
    size_t size = awl_dtype_size(out->dtype);
    int size_class = size == 2 ? 0 : size == 4 ? 1 : 2;
    const awl_view *views[4] = {out, cond, a, b};
    cpu_iter it;
    awl_cpu_iter_init(&it, 4, views);
    awl_cpu_iter_run(&it, CPU_GRAIN_CHEAP, where_kernels[cond->dtype][size_class], NULL);
    return AWL_OK;
}
