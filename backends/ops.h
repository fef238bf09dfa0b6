/*
 * backends/ops.h - the facts about every op, written once.
 *
 * Each op family is one X-macro list: a line per op giving its code, its
 * name, the dtypes it is defined for, the inputs that exercise it, and its
 * scalar formula. Every place that needs a fact expands the list instead of
 * restating it: the op enums (backend.h), the names and dtype checks
 * (ops.c, tensor/compute.c), the CPU kernels (cpu_elementwise.c,
 * cpu_reduce.c), the CUDA kernels (cuda_elementwise.cu, cuda_reduce.cu) and
 * the conformance runner's float64 reference (tools/awl-check). Adding a
 * unary op is one line here, its backward in autograd/ops_elementwise.c and
 * a test; nothing else.
 *
 * A formula is a C expression that every site compiles in its own compute
 * type, named C (float for float32 and bfloat16 on CUDA, double for
 * float64, int64_t for int32 on the CPU). Its variables:
 *   unary:   x, the element; alpha, the op's scalar in the compute type
 *            (truncated toward zero for int32); alpha_d, the scalar as the
 *            double the caller gave (comparisons use it, so 0.1 is never
 *            rounded to float);
 *   binary:  a and b;
 *   reduce:  acc, the running value (double), and x, the next element.
 * Constants are written (C)0.5 so a float kernel stays in float. Math goes
 * through AWL_EXP, AWL_LOG, AWL_SQRT, AWL_TANH and AWL_POW, which default
 * to libm's exp, log, sqrt, tanh and pow and which a site may redefine
 * before it expands a list (the CPU maps AWL_EXP to its vectorisable expf,
 * CUDA to its device functions): macros in a formula are expanded where
 * the formula is used, so each site gets its own math.
 *
 * The host/device qualifier (AWL_HOST_DEVICE, common/dtype.h) on the
 * float64 evaluators below lets CUDA code call them as well.
 */
#ifndef AWL_BACKENDS_OPS_H
#define AWL_BACKENDS_OPS_H

#include <math.h>
#include <stdbool.h>

#include "common/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- dtype sets ------------------------------------------------------------------ */

#define AWL_DT(dtype) (1u << (dtype))
#define AWL_DTYPES_FLOAT (AWL_DT(AWL_F32) | AWL_DT(AWL_F64) | AWL_DT(AWL_BF16))
#define AWL_DTYPES_NUMERIC (AWL_DTYPES_FLOAT | AWL_DT(AWL_I32))
#define AWL_DTYPES_ALL AWL_DTYPES_NUMERIC
/* What every backend must compute: float32, float64, int32 (bfloat16
 * arithmetic is optional; see backend.h). */
#define AWL_DTYPES_REQUIRED (AWL_DT(AWL_F32) | AWL_DT(AWL_F64) | AWL_DT(AWL_I32))

/* The inputs that exercise an op (what the conformance runner and the
 * gradient checks draw): any real number away from 0, positive numbers
 * (log, sqrt; the base of pow), or values on a coarse grid so that ties
 * occur (comparisons, sign, relu's kink). */
typedef enum awl_op_domain {
    AWL_DOMAIN_REAL,
    AWL_DOMAIN_POSITIVE,
    AWL_DOMAIN_STEPS,
} awl_op_domain;

/* ---- math used by the formulas ----------------------------------------------------- */

#ifndef AWL_EXP
#define AWL_EXP(x) exp(x)
#endif
#ifndef AWL_LOG
#define AWL_LOG(x) log(x)
#endif
#ifndef AWL_SQRT
#define AWL_SQRT(x) sqrt(x)
#endif
#ifndef AWL_TANH
#define AWL_TANH(x) tanh(x)
#endif
#ifndef AWL_POW
#define AWL_POW(x, y) pow(x, y)
#endif

/* GELU, tanh form: gelu(x) = x/2 (1 + tanh u), u = sqrt(2/pi) (x + 0.044715
 * x^3). Since (1 + tanh u)/2 is the logistic function s(2u), gelu(x) is
 * x s(2u) = x / (1 + e^-2u): one exp instead of a tanh, and no cancellation
 * in 1 + tanh u for negative x. Its derivative, with s' = s (1 - s):
 * s(2u) (1 + x (1 - s(2u)) 2u'), 2u' = 2 sqrt(2/pi) (1 + 3 * 0.044715 x^2). */
#define AWL_GELU_2U(x) ((C)1.5957691216057308 * ((x) + (C)0.044715 * (x) * (x) * (x)))
#define AWL_GELU_S(x) ((C)1 / ((C)1 + AWL_EXP(-AWL_GELU_2U(x))))
#define AWL_GELU(x) ((x) / ((C)1 + AWL_EXP(-AWL_GELU_2U(x))))
#define AWL_GELU_GRAD(x)                                                                           \
    (AWL_GELU_S(x) * ((C)1 + (x) * ((C)1 - AWL_GELU_S(x)) * (C)1.5957691216057308 *                \
                                 ((C)1 + (C)0.134145 * (x) * (x))))

/* ---- unary: out = f(x) ------------------------------------------------------------- */

/* clang-format off */
/*  X(OP,           name,           dtypes,              domain,    math, formula) */
#define AWL_UNARY_OPS(X) \
    X(NEG,          "neg",          AWL_DTYPES_NUMERIC,  REAL,      0, -x) \
    X(EXP,          "exp",          AWL_DTYPES_FLOAT,    REAL,      1, AWL_EXP(x)) \
    X(LOG,          "log",          AWL_DTYPES_FLOAT,    POSITIVE,  1, AWL_LOG(x)) \
    X(SQRT,         "sqrt",         AWL_DTYPES_FLOAT,    POSITIVE,  1, AWL_SQRT(x)) \
    X(RSQRT,        "rsqrt",        AWL_DTYPES_FLOAT,    POSITIVE,  1, (C)1 / AWL_SQRT(x)) \
    X(TANH,         "tanh",         AWL_DTYPES_FLOAT,    REAL,      1, AWL_TANH(x)) \
    X(SIGMOID,      "sigmoid",      AWL_DTYPES_FLOAT,    REAL,      1, (C)1 / ((C)1 + AWL_EXP(-x))) \
    X(RELU,         "relu",         AWL_DTYPES_NUMERIC,  STEPS,     0, x > 0 ? x : (C)0) \
    X(GELU,         "gelu",         AWL_DTYPES_FLOAT,    REAL,      1, AWL_GELU(x)) \
    X(GELU_GRAD,    "gelu_grad",    AWL_DTYPES_FLOAT,    REAL,      1, AWL_GELU_GRAD(x)) \
    X(ABS,          "abs",          AWL_DTYPES_NUMERIC,  REAL,      0, x < 0 ? -x : x) \
    X(SIGN,         "sign",         AWL_DTYPES_NUMERIC,  STEPS,     0, (C)((x > 0) - (x < 0))) \
    X(STEP,         "step",         AWL_DTYPES_NUMERIC,  STEPS,     0, (C)(x > 0)) \
    X(ADD_SCALAR,   "add_scalar",   AWL_DTYPES_NUMERIC,  REAL,      0, x + alpha) \
    X(MUL_SCALAR,   "mul_scalar",   AWL_DTYPES_NUMERIC,  REAL,      0, x * alpha) \
    X(RSUB_SCALAR,  "rsub_scalar",  AWL_DTYPES_NUMERIC,  REAL,      0, alpha - x) \
    X(RDIV_SCALAR,  "rdiv_scalar",  AWL_DTYPES_FLOAT,    REAL,      0, alpha / x) \
    X(POW_SCALAR,   "pow",          AWL_DTYPES_FLOAT,    POSITIVE,  1, AWL_POW(x, alpha)) \
    X(GT_SCALAR,    "gt_scalar",    AWL_DTYPES_NUMERIC,  STEPS,     0, (C)((double)x > alpha_d)) \
    X(LT_SCALAR,    "lt_scalar",    AWL_DTYPES_NUMERIC,  STEPS,     0, (C)((double)x < alpha_d)) \
    X(EQ_SCALAR,    "eq_scalar",    AWL_DTYPES_NUMERIC,  STEPS,     0, (C)((double)x == alpha_d))
/* clang-format on */

/* ---- binary: out = a (op) b; comparisons give 1 or 0 in out's dtype ------------------ */

/* Float maximum and minimum propagate NaN, as PyTorch's do. */
/* clang-format off */
/*  X(OP,       name,       dtypes,              domain,    math, formula) */
#define AWL_BINARY_OPS(X) \
    X(ADD,      "add",      AWL_DTYPES_NUMERIC,  REAL,      0, a + b) \
    X(SUB,      "sub",      AWL_DTYPES_NUMERIC,  REAL,      0, a - b) \
    X(MUL,      "mul",      AWL_DTYPES_NUMERIC,  REAL,      0, a * b) \
    X(DIV,      "div",      AWL_DTYPES_FLOAT,    REAL,      0, a / b) \
    X(MAXIMUM,  "maximum",  AWL_DTYPES_NUMERIC,  REAL,      0, (a > b || a != a) ? a : b) \
    X(MINIMUM,  "minimum",  AWL_DTYPES_NUMERIC,  REAL,      0, (a < b || a != a) ? a : b) \
    X(POW,      "pow",      AWL_DTYPES_FLOAT,    POSITIVE,  1, AWL_POW(a, b)) \
    X(EQ,       "eq",       AWL_DTYPES_NUMERIC,  STEPS,     0, (C)(a == b)) \
    X(NE,       "ne",       AWL_DTYPES_NUMERIC,  STEPS,     0, (C)(a != b)) \
    X(GT,       "gt",       AWL_DTYPES_NUMERIC,  STEPS,     0, (C)(a > b)) \
    X(GE,       "ge",       AWL_DTYPES_NUMERIC,  STEPS,     0, (C)(a >= b)) \
    X(LT,       "lt",       AWL_DTYPES_NUMERIC,  STEPS,     0, (C)(a < b)) \
    X(LE,       "le",       AWL_DTYPES_NUMERIC,  STEPS,     0, (C)(a <= b))
/* clang-format on */

/* ---- reductions along axes ----------------------------------------------------------- */

/* acc starts at `identity` and takes every element x in turn; MEAN divides
 * the sum by the reduced count at the end. Max and min propagate NaN. */
/* clang-format off */
/*  X(OP,    name,    dtypes,              identity,   combine, mean) */
#define AWL_REDUCE_OPS(X) \
    X(SUM,   "sum",   AWL_DTYPES_NUMERIC,  0.0,        acc + x, 0) \
    X(MEAN,  "mean",  AWL_DTYPES_FLOAT,    0.0,        acc + x, 1) \
    X(MAX,   "max",   AWL_DTYPES_NUMERIC,  -INFINITY,  (x > acc || x != x) ? x : acc, 0) \
    X(MIN,   "min",   AWL_DTYPES_NUMERIC,  INFINITY,   (x < acc || x != x) ? x : acc, 0)
/* clang-format on */

/* ---- the op codes ------------------------------------------------------------------------ */

#define AWL_OPS_ENUM_UNARY(OP, name, dtypes, domain, math, formula) AWL_UNARY_##OP,
#define AWL_OPS_ENUM_BINARY(OP, name, dtypes, domain, math, formula) AWL_BINARY_##OP,
#define AWL_OPS_ENUM_REDUCE(OP, name, dtypes, identity, combine, mean) AWL_REDUCE_##OP,

/* out = f(in) element-wise; `alpha` is the scalar of the *_SCALAR ops. */
typedef enum awl_unary_op { AWL_UNARY_OPS(AWL_OPS_ENUM_UNARY) AWL_UNARY_OP_COUNT } awl_unary_op;

/* out = a (op) b element-wise, a and b broadcast to out's shape. */
typedef enum awl_binary_op {
    AWL_BINARY_OPS(AWL_OPS_ENUM_BINARY) AWL_BINARY_OP_COUNT
} awl_binary_op;

typedef enum awl_reduce_op {
    AWL_REDUCE_OPS(AWL_OPS_ENUM_REDUCE) AWL_REDUCE_OP_COUNT
} awl_reduce_op;

/* ---- the backend's kernels ------------------------------------------------------------ */

/* Every computing entry of a backend table (backend.h), in the order a new
 * backend implements them: the required primitives by milestone (1 to 7),
 * then the optional fused kernels (milestone 0). `dtypes` is what the
 * kernel is defined for (unary, binary and reduce intersect it with the
 * op's own set); `required` what every backend must compute (the rest may
 * be declared unsupported, see backend.h's `supports`). */
/* clang-format off */
/*  X(KERNEL,                  field,                   milestone, dtypes,              required) */
#define AWL_KERNELS(X) \
    X(FILL,                    fill,                    1,         AWL_DTYPES_ALL,      AWL_DTYPES_ALL) \
    X(COPY,                    copy,                    1,         AWL_DTYPES_ALL,      AWL_DTYPES_ALL) \
    X(UNARY,                   unary,                   2,         AWL_DTYPES_NUMERIC,  AWL_DTYPES_REQUIRED) \
    X(BINARY,                  binary,                  2,         AWL_DTYPES_NUMERIC,  AWL_DTYPES_REQUIRED) \
    X(WHERE,                   where,                   3,         AWL_DTYPES_ALL,      AWL_DTYPES_ALL) \
    X(REDUCE,                  reduce,                  4,         AWL_DTYPES_NUMERIC,  AWL_DTYPES_REQUIRED) \
    X(MATMUL,                  matmul,                  5,         AWL_DTYPES_FLOAT,    AWL_DT(AWL_F32) | AWL_DT(AWL_F64)) \
    X(INDEX_SELECT,            index_select,            6,         AWL_DTYPES_ALL,      AWL_DTYPES_REQUIRED) \
    X(INDEX_ADD,               index_add,               6,         AWL_DTYPES_NUMERIC,  AWL_DTYPES_REQUIRED) \
    X(GATHER,                  gather,                  6,         AWL_DTYPES_ALL,      AWL_DTYPES_REQUIRED) \
    X(SCATTER_ADD,             scatter_add,             6,         AWL_DTYPES_NUMERIC,  AWL_DTYPES_REQUIRED) \
    X(RANDOM,                  random,                  7,         AWL_DTYPES_FLOAT,    AWL_DT(AWL_F32) | AWL_DT(AWL_F64)) \
    X(SOFTMAX_FORWARD,         softmax_forward,         0,         AWL_DTYPES_FLOAT,    0) \
    X(SOFTMAX_BACKWARD,        softmax_backward,        0,         AWL_DTYPES_FLOAT,    0) \
    X(LAYERNORM_FORWARD,       layernorm_forward,       0,         AWL_DTYPES_FLOAT,    0) \
    X(LAYERNORM_BACKWARD,      layernorm_backward,      0,         AWL_DTYPES_FLOAT,    0) \
    X(CROSS_ENTROPY_FORWARD,   cross_entropy_forward,   0,         AWL_DTYPES_FLOAT,    0) \
    X(CROSS_ENTROPY_BACKWARD,  cross_entropy_backward,  0,         AWL_DTYPES_FLOAT,    0) \
    X(CROSS_ENTROPY_FORWARD_BACKWARD, cross_entropy_forward_backward, 0, AWL_DTYPES_FLOAT, 0) \
    X(ATTENTION_FORWARD,       attention_forward,       0,         AWL_DTYPES_FLOAT,    0) \
    X(ATTENTION_BACKWARD,      attention_backward,      0,         AWL_DTYPES_FLOAT,    0) \
    X(MATMUL_BIAS,             matmul_bias,             0,         AWL_DTYPES_FLOAT,    0) \
    X(MATMUL_BIAS_GELU,        matmul_bias_gelu,        0,         AWL_DTYPES_FLOAT,    0) \
    X(MATMUL_GELU_BACKWARD,    matmul_gelu_backward,    0,         AWL_DTYPES_FLOAT,    0) \
    X(DROPOUT,                 dropout,                 0,         AWL_DTYPES_FLOAT,    0) \
    X(DROPOUT_ADD,             dropout_add,             0,         AWL_DTYPES_FLOAT,    0) \
    X(ADD_DROPOUT,             add_dropout,             0,         AWL_DTYPES_FLOAT,    0) \
    X(DROPOUT_ADD_LAYERNORM,   dropout_add_layernorm,   0,         AWL_DTYPES_FLOAT,    0) \
    X(GELU_BACKWARD,           gelu_backward,           0,         AWL_DTYPES_FLOAT,    0) \
    X(ADAMW_STEP,              adamw_step,              0,         AWL_DT(AWL_F32),     0) \
    X(SUM_SQUARES,             sum_squares,             0,         AWL_DT(AWL_F32),     0) \
    X(SCALE,                   scale,                   0,         AWL_DT(AWL_F32),     0) \
    X(CAST_MANY,               cast_many,               0,         AWL_DTYPES_FLOAT,    0) \
    X(MATMUL_WIDE,             matmul_wide,             0,         AWL_DT(AWL_BF16),    0)
/* clang-format on */

/* The milestones of a new backend, in order (docs/backend-guide.md). */
/*  X(number, title) */
#define AWL_MILESTONES(X)                                                                          \
    X(1, "strided copy and fill")                                                                  \
    X(2, "element-wise ops with broadcasting")                                                     \
    X(3, "where")                                                                                  \
    X(4, "reductions")                                                                             \
    X(5, "matmul, naive then blocked")                                                             \
    X(6, "indexing: embeddings, gather, scatter")                                                  \
    X(7, "random fill from Philox")

#define AWL_OPS_ENUM_KERNEL(K, field, milestone, dtypes, required) AWL_KERNEL_##K,
typedef enum awl_kernel { AWL_KERNELS(AWL_OPS_ENUM_KERNEL) AWL_KERNEL_COUNT } awl_kernel;

#define AWL_OPS_COUNT_MILESTONE(n, title) +1
enum { AWL_MILESTONE_COUNT = 0 AWL_MILESTONES(AWL_OPS_COUNT_MILESTONE) };

/* ---- the facts at run time (backends/ops.c) ------------------------------------------ */

typedef struct awl_op_info {
    const char *name; /* "exp"                                          */
    unsigned dtypes;  /* AWL_DT(...) bits of the dtypes it is defined for */
    awl_op_domain domain;
    bool math; /* the formula calls exp, log, tanh or pow: costly */
} awl_op_info;

typedef struct awl_kernel_info {
    const char *name;  /* the backend table's field: "index_select"      */
    int milestone;     /* 1..AWL_MILESTONE_COUNT, 0 for a fused kernel    */
    unsigned dtypes;   /* defined for                                     */
    unsigned required; /* every backend computes these                   */
} awl_kernel_info;

/* NULL for a code out of range. */
const awl_op_info *awl_unary_info(awl_unary_op op);
const awl_op_info *awl_binary_info(awl_binary_op op);
/* (Reductions have no domain or math: dtypes and name only.) */
const awl_op_info *awl_reduce_info(awl_reduce_op op);
const awl_kernel_info *awl_kernel_get_info(awl_kernel kernel);
/* "strided copy and fill"; NULL outside 1..AWL_MILESTONE_COUNT. */
const char *awl_milestone_title(int milestone);

/* Whether op (of a family, or 0 for the other kernels) is defined for
 * dtype: the kernel's set intersected with the op's. */
bool awl_kernel_defined(awl_kernel kernel, int op, awl_dtype dtype);
/* Whether every backend must compute it. */
bool awl_kernel_required(awl_kernel kernel, int op, awl_dtype dtype);

/* ---- the formulas in float64 ------------------------------------------------------------ */

/* op(x) as a float64 computation (alpha and alpha_d as above); NaN for an
 * unknown op. */
static inline AWL_HOST_DEVICE double awl_unary_eval(awl_unary_op op, double x, double alpha,
                                                    double alpha_d)
{
    typedef double C;
    (void)alpha;
    (void)alpha_d;
    switch (op) {
#define AWL_OPS_EVAL_UNARY(OP, name, dtypes, domain, math, formula)                                \
    case AWL_UNARY_##OP: return (double)(formula);
        AWL_UNARY_OPS(AWL_OPS_EVAL_UNARY)
#undef AWL_OPS_EVAL_UNARY
    default: return NAN;
    }
}

static inline AWL_HOST_DEVICE double awl_binary_eval(awl_binary_op op, double a, double b)
{
    typedef double C;
    switch (op) {
#define AWL_OPS_EVAL_BINARY(OP, name, dtypes, domain, math, formula)                               \
    case AWL_BINARY_##OP: return (double)(formula);
        AWL_BINARY_OPS(AWL_OPS_EVAL_BINARY)
#undef AWL_OPS_EVAL_BINARY
    default: return NAN;
    }
}

/* The identity a reduction starts from, and one combining step. */
static inline AWL_HOST_DEVICE double awl_reduce_identity(awl_reduce_op op)
{
    switch (op) {
#define AWL_OPS_IDENTITY(OP, name, dtypes, identity, combine, mean)                                \
    case AWL_REDUCE_##OP: return identity;
        AWL_REDUCE_OPS(AWL_OPS_IDENTITY)
#undef AWL_OPS_IDENTITY
    default: return NAN;
    }
}

static inline AWL_HOST_DEVICE double awl_reduce_combine(awl_reduce_op op, double acc, double x)
{
    switch (op) {
#define AWL_OPS_COMBINE(OP, name, dtypes, identity, combine, mean)                                 \
    case AWL_REDUCE_##OP: return combine;
        AWL_REDUCE_OPS(AWL_OPS_COMBINE)
#undef AWL_OPS_COMBINE
    default: return NAN;
    }
}

/* Whether the reduction divides by the reduced count at the end (MEAN). */
static inline AWL_HOST_DEVICE bool awl_reduce_is_mean(awl_reduce_op op)
{
    switch (op) {
#define AWL_OPS_MEAN(OP, name, dtypes, identity, combine, mean)                                    \
    case AWL_REDUCE_##OP: return mean;
        AWL_REDUCE_OPS(AWL_OPS_MEAN)
#undef AWL_OPS_MEAN
    default: return false;
    }
}

#ifdef __cplusplus
}
#endif

#endif
