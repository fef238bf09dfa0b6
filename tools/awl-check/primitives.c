/*
 * tools/awl-check/primitives.c - the cases of the required primitives and
 * their float64 references, milestone by milestone.
 *
 * Every element-wise op runs over the same grid of layouts: odd sizes
 * (5 x 73, 127, 3 x 5 x 7), a transposed, broadcast (zero-stride), sliced
 * (step 2, offset 3), reversed and offset input or output, one element,
 * zero elements, in place, and 67 x 1031 (above the CPU's parallel grain).
 * The references are plain loops over logical indices, with the op
 * formulas of backends/ops.h evaluated in float64; reductions combine
 * with ops.h's combine step; random fills follow common/philox.h.
 */
#include <math.h>
#include <string.h>

#include "common/philox.h"
#include "tools/awl-check/harness.h"

static const int64_t S_ODD[2] = {5, 73};
static const int64_t S_3D[3] = {3, 5, 7};
static const int64_t S_LONG[1] = {127};
static const int64_t S_ZERO[2] = {0, 5};
static const int64_t S_BIG[2] = {67, 1031};
static const int64_t S_ROW[2] = {33, 256}; /* a bias row: rows of 16-byte multiples */

static const awl_dtype ALL_DTYPES[4] = {AWL_F32, AWL_F64, AWL_I32, AWL_BF16};

#define OPERAND(name, role, dt, shape, layout)                                                     \
    ac_operand_new(name, role, dt, (int)(sizeof(shape) / sizeof(shape)[0]), shape, layout)

/* An element-wise layout: the shape, and the layouts of the output and the
 * (up to three) inputs; alias_input >= 0 makes the output that input. */
typedef struct ew_layout {
    const char *name;
    int ndim;
    const int64_t *shape;
    ac_layout out, in[3];
    int alias_input;
} ew_layout;

#define EW(name, shape, out, a, b, c, alias)                                                       \
    {                                                                                              \
        name, (int)(sizeof(shape) / sizeof(shape)[0]), shape, out, {a, b, c}, alias                \
    }
#define EW0(name, out, a, b, c)                                                                    \
    {                                                                                              \
        name, 0, S_ODD, out, {a, b, c}, -1                                                         \
    }

/* Unary and copy: one input. */
static const ew_layout UNARY_LAYOUTS[] = {
    EW("contiguous", S_ODD, AC_CONTIG, AC_CONTIG, 0, 0, -1),
    EW("transposed in", S_ODD, AC_CONTIG, AC_TRANSPOSED, 0, 0, -1),
    EW("transposed out", S_ODD, AC_TRANSPOSED, AC_CONTIG, 0, 0, -1),
    EW("broadcast in", S_ODD, AC_CONTIG, AC_BCAST0, 0, 0, -1),
    EW("sliced in and out", S_ODD, AC_SLICED, AC_SLICED, 0, 0, -1),
    EW("reversed 3-d in", S_3D, AC_CONTIG, AC_REVERSED, 0, 0, -1),
    EW("offset 1-d", S_LONG, AC_OFFSET, AC_OFFSET, 0, 0, -1),
    EW0("one element", AC_CONTIG, AC_CONTIG, 0, 0),
    EW("zero-size", S_ZERO, AC_CONTIG, AC_CONTIG, 0, 0, -1),
    EW("in place", S_ODD, AC_CONTIG, AC_CONTIG, 0, 0, 0),
    EW("large", S_BIG, AC_CONTIG, AC_CONTIG, 0, 0, -1),
    EW("large sliced in", S_BIG, AC_CONTIG, AC_SLICED, 0, 0, -1),
};

static const ew_layout BINARY_LAYOUTS[] = {
    EW("contiguous", S_ODD, AC_CONTIG, AC_CONTIG, AC_CONTIG, 0, -1),
    EW("b broadcast along rows", S_ODD, AC_CONTIG, AC_CONTIG, AC_BCAST0, 0, -1),
    EW("a broadcast, b transposed", S_ODD, AC_CONTIG, AC_BCAST1, AC_TRANSPOSED, 0, -1),
    EW("sliced a and out", S_ODD, AC_SLICED, AC_SLICED, AC_CONTIG, 0, -1),
    EW("b a scalar, out transposed", S_ODD, AC_TRANSPOSED, AC_CONTIG, AC_BCAST_ALL, 0, -1),
    EW("3-d reversed a, broadcast b", S_3D, AC_CONTIG, AC_REVERSED, AC_BCAST1, 0, -1),
    EW("offset 1-d", S_LONG, AC_OFFSET, AC_OFFSET, AC_OFFSET, 0, -1),
    EW0("one element", AC_CONTIG, AC_CONTIG, AC_CONTIG, 0),
    EW("zero-size", S_ZERO, AC_CONTIG, AC_CONTIG, AC_CONTIG, 0, -1),
    EW("in place (out is a)", S_ODD, AC_CONTIG, AC_CONTIG, AC_TRANSPOSED, 0, 0),
    EW("bias row as b", S_ROW, AC_CONTIG, AC_CONTIG, AC_BCAST0, 0, -1),
    EW("bias row as a", S_ROW, AC_CONTIG, AC_BCAST0, AC_CONTIG, 0, -1),
    EW("large", S_BIG, AC_CONTIG, AC_CONTIG, AC_CONTIG, 0, -1),
};

static const ew_layout WHERE_LAYOUTS[] = {
    EW("contiguous", S_ODD, AC_CONTIG, AC_CONTIG, AC_CONTIG, AC_CONTIG, -1),
    EW("broadcast cond, transposed a", S_ODD, AC_CONTIG, AC_BCAST0, AC_TRANSPOSED, AC_BCAST1, -1),
    EW("sliced cond and out", S_ODD, AC_SLICED, AC_SLICED, AC_CONTIG, AC_REVERSED, -1),
    EW0("one element", AC_CONTIG, AC_CONTIG, AC_CONTIG, AC_CONTIG),
    EW("zero-size", S_ZERO, AC_CONTIG, AC_CONTIG, AC_CONTIG, AC_CONTIG, -1),
    EW("large", S_BIG, AC_CONTIG, AC_CONTIG, AC_CONTIG, AC_CONTIG, -1),
};

#define COUNT(a) (int)(sizeof(a) / sizeof((a)[0]))

/* ---- milestone 1: fill and copy --------------------------------------------------------- */

static int call_fill(const awl_backend *b, awl_view *const *v, const ac_args *a)
{
    return b->fill(v[0], a->alpha);
}

static int ref_fill(const ac_case *c, double *const *in, double **ref)
{
    (void)in;
    int64_t n = ac_numel(c->op[0].ndim, c->op[0].shape);
    for (int64_t i = 0; i < n; i++) ref[0][i] = c->args.alpha;
    return 0;
}

static int call_copy(const awl_backend *b, awl_view *const *v, const ac_args *a)
{
    (void)a;
    return b->copy(v[0], v[1]);
}

/* out = in, converted: to int32 by truncation toward zero (the harness
 * rounds every expected value to the output's dtype). */
static int ref_copy(const ac_case *c, double *const *in, double **ref)
{
    int64_t n = ac_numel(c->op[0].ndim, c->op[0].shape);
    for (int64_t i = 0; i < n; i++)
        ref[0][i] = c->op[0].dtype == AWL_I32 ? trunc(in[1][i]) : in[1][i];
    return 0;
}

static void fill_copy_cases(ac_list *l)
{
    static const ew_layout fills[] = {
        EW("contiguous", S_ODD, AC_CONTIG, 0, 0, 0, -1),
        EW("transposed", S_ODD, AC_TRANSPOSED, 0, 0, 0, -1),
        EW("sliced", S_ODD, AC_SLICED, 0, 0, 0, -1),
        EW("reversed 3-d", S_3D, AC_REVERSED, 0, 0, 0, -1),
        EW0("one element", AC_CONTIG, 0, 0, 0),
        EW("zero-size", S_ZERO, AC_CONTIG, 0, 0, 0, -1),
        EW("large", S_BIG, AC_CONTIG, 0, 0, 0, -1),
    };
    for (int t = 0; t < 4; t++)
        for (int k = 0; k < COUNT(fills); k++) {
            const ew_layout *L = &fills[k];
            ac_case c =
                ac_case_new(AWL_KERNEL_FILL, "", ALL_DTYPES[t], L->name, call_fill, ref_fill);
            ac_add(&c, ac_operand_new("out", AC_OUT, ALL_DTYPES[t], L->ndim, L->shape, L->out));
            c.args.alpha = ALL_DTYPES[t] == AWL_I32 ? -7 : 2.75;
            ac_push(l, &c);
        }
    for (int from = 0; from < 4; from++)
        for (int to = 0; to < 4; to++)
            for (int k = 0; k < COUNT(UNARY_LAYOUTS); k++) {
                const ew_layout *L = &UNARY_LAYOUTS[k];
                if (L->alias_input >= 0 && from != to) continue;
                char name[40];
                snprintf(name, sizeof name, "copy.from_%s", awl_dtype_name(ALL_DTYPES[from]));
                ac_case c = ac_case_new(AWL_KERNEL_COPY, name, ALL_DTYPES[to], L->name, call_copy,
                                        ref_copy);
                ac_operand out =
                    ac_operand_new("out", AC_OUT, ALL_DTYPES[to], L->ndim, L->shape, L->out);
                out.alias = L->alias_input >= 0 ? 1 : -1;
                ac_add(&c, out);
                ac_add(&c,
                       ac_operand_new("in", AC_IN, ALL_DTYPES[from], L->ndim, L->shape, L->in[0]));
                ac_push(l, &c);
            }
}

/* ---- milestone 2: unary and binary -------------------------------------------------------- */

/* The scalar as the kernel sees it: rounded to a float dtype, truncated
 * for int32 (the formulas' `alpha`). */
static double kernel_alpha(awl_dtype dt, double alpha)
{
    if (dt == AWL_I32) return trunc(alpha);
    if (dt == AWL_F64) return alpha;
    return (float)alpha;
}

static int call_unary(const awl_backend *b, awl_view *const *v, const ac_args *a)
{
    return b->unary((awl_unary_op)a->op, v[0], v[1], a->alpha);
}

static int ref_unary(const ac_case *c, double *const *in, double **ref)
{
    int64_t n = ac_numel(c->op[0].ndim, c->op[0].shape);
    double alpha = kernel_alpha(c->dtype, c->args.alpha);
    for (int64_t i = 0; i < n; i++)
        ref[0][i] = awl_unary_eval((awl_unary_op)c->args.op, in[1][i], alpha, c->args.alpha);
    return 0;
}

static int call_binary(const awl_backend *b, awl_view *const *v, const ac_args *a)
{
    return b->binary((awl_binary_op)a->op, v[0], v[1], v[2]);
}

static int ref_binary(const ac_case *c, double *const *in, double **ref)
{
    int64_t n = ac_numel(c->op[0].ndim, c->op[0].shape);
    for (int64_t i = 0; i < n; i++)
        ref[0][i] = awl_binary_eval((awl_binary_op)c->args.op, in[1][i], in[2][i]);
    return 0;
}

static void elementwise_cases(ac_list *l)
{
    for (int op = 0; op < AWL_UNARY_OP_COUNT; op++) {
        const awl_op_info *info = awl_unary_info((awl_unary_op)op);
        for (int t = 0; t < 4; t++) {
            awl_dtype dt = ALL_DTYPES[t];
            if (!awl_kernel_defined(AWL_KERNEL_UNARY, op, dt)) continue;
            for (int k = 0; k < COUNT(UNARY_LAYOUTS); k++) {
                const ew_layout *L = &UNARY_LAYOUTS[k];
                char name[40];
                snprintf(name, sizeof name, "unary.%s", info->name);
                ac_case c = ac_case_new(AWL_KERNEL_UNARY, name, dt, L->name, call_unary, ref_unary);
                c.args.op = op;
                /* comparisons meet ties on the grid of STEPS inputs */
                bool steps = info->domain == AWL_DOMAIN_STEPS;
                c.args.alpha = dt == AWL_I32 ? (steps ? 1 : 3) : steps ? 0.5 : 0.75;
                ac_operand out = ac_operand_new("out", AC_OUT, dt, L->ndim, L->shape, L->out);
                out.alias = L->alias_input >= 0 ? 1 : -1;
                ac_add(&c, out);
                ac_add(&c, ac_domain(ac_operand_new("x", AC_IN, dt, L->ndim, L->shape, L->in[0]),
                                     info->domain));
                ac_push(l, &c);
            }
        }
    }
    for (int op = 0; op < AWL_BINARY_OP_COUNT; op++) {
        const awl_op_info *info = awl_binary_info((awl_binary_op)op);
        for (int t = 0; t < 4; t++) {
            awl_dtype dt = ALL_DTYPES[t];
            if (!awl_kernel_defined(AWL_KERNEL_BINARY, op, dt)) continue;
            for (int k = 0; k < COUNT(BINARY_LAYOUTS); k++) {
                const ew_layout *L = &BINARY_LAYOUTS[k];
                char name[40];
                snprintf(name, sizeof name, "binary.%s", info->name);
                ac_case c =
                    ac_case_new(AWL_KERNEL_BINARY, name, dt, L->name, call_binary, ref_binary);
                c.args.op = op;
                ac_operand out = ac_operand_new("out", AC_OUT, dt, L->ndim, L->shape, L->out);
                out.alias = L->alias_input >= 0 ? 1 : -1;
                ac_add(&c, out);
                /* the domain is the first operand's (pow's base); a
                 * comparison's operands both lie on the grid */
                awl_op_domain db =
                    info->domain == AWL_DOMAIN_STEPS ? AWL_DOMAIN_STEPS : AWL_DOMAIN_REAL;
                ac_add(&c, ac_domain(ac_operand_new("a", AC_IN, dt, L->ndim, L->shape, L->in[0]),
                                     info->domain));
                ac_add(&c,
                       ac_domain(ac_operand_new("b", AC_IN, dt, L->ndim, L->shape, L->in[1]), db));
                ac_push(l, &c);
            }
        }
    }
}

/* ---- milestone 3: where ---------------------------------------------------------------- */

static int call_where(const awl_backend *b, awl_view *const *v, const ac_args *a)
{
    (void)a;
    return b->where(v[0], v[1], v[2], v[3]);
}

static int ref_where(const ac_case *c, double *const *in, double **ref)
{
    int64_t n = ac_numel(c->op[0].ndim, c->op[0].shape);
    for (int64_t i = 0; i < n; i++) ref[0][i] = in[1][i] != 0 ? in[2][i] : in[3][i];
    return 0;
}

static void where_cases(ac_list *l)
{
    for (int t = 0; t < 4; t++)
        for (int ct = 0; ct < 4; ct++)
            for (int k = 0; k < COUNT(WHERE_LAYOUTS); k++) {
                const ew_layout *L = &WHERE_LAYOUTS[k];
                char name[40];
                snprintf(name, sizeof name, "where.cond_%s", awl_dtype_name(ALL_DTYPES[ct]));
                ac_case c = ac_case_new(AWL_KERNEL_WHERE, name, ALL_DTYPES[t], L->name, call_where,
                                        ref_where);
                awl_dtype dt = ALL_DTYPES[t];
                ac_add(&c, ac_operand_new("out", AC_OUT, dt, L->ndim, L->shape, L->out));
                ac_add(&c, ac_domain(ac_operand_new("cond", AC_IN, ALL_DTYPES[ct], L->ndim,
                                                    L->shape, L->in[0]),
                                     AWL_DOMAIN_STEPS));
                ac_add(&c, ac_operand_new("a", AC_IN, dt, L->ndim, L->shape, L->in[1]));
                ac_add(&c, ac_operand_new("b", AC_IN, dt, L->ndim, L->shape, L->in[2]));
                ac_push(l, &c);
            }
}

/* ---- milestone 4: reductions --------------------------------------------------------------- */

static int call_reduce(const awl_backend *b, awl_view *const *v, const ac_args *a)
{
    return b->reduce((awl_reduce_op)a->op, v[0], v[1]);
}

/* out[k] = combine over the input elements that map to output element k
 * (the reduced axes have size 1 in out). */
static int ref_reduce(const ac_case *c, double *const *in, double **ref)
{
    const ac_operand *o = &c->op[0], *x = &c->op[1];
    awl_reduce_op op = (awl_reduce_op)c->args.op;
    int64_t nout = ac_numel(o->ndim, o->shape), nin = ac_numel(x->ndim, x->shape);
    int64_t per = nout ? nin / nout : 0;
    for (int64_t k = 0; k < nout; k++) ref[0][k] = awl_reduce_identity(op);
    int64_t idx[AWL_MAX_DIMS];
    for (int64_t i = 0; i < nin; i++) {
        ac_unravel(i, x->ndim, x->shape, idx);
        for (int d = 0; d < x->ndim; d++)
            if (o->shape[d] == 1) idx[d] = 0;
        int64_t k = ac_ravel(idx, o->ndim, o->shape);
        ref[0][k] = awl_reduce_combine(op, ref[0][k], in[1][i]);
    }
    if (awl_reduce_is_mean(op))
        for (int64_t k = 0; k < nout; k++) ref[0][k] = per ? ref[0][k] / (double)per : NAN;
    return 0;
}

typedef struct reduce_layout {
    const char *name;
    int ndim;
    int64_t shape[3];
    unsigned axes; /* bit d: axis d reduced */
    ac_layout in, out;
} reduce_layout;

static void reduce_cases(ac_list *l)
{
    static const reduce_layout layouts[] = {
        {"rows", 2, {5, 73}, 2, AC_CONTIG, AC_CONTIG},
        {"columns", 2, {5, 73}, 1, AC_CONTIG, AC_CONTIG},
        {"every axis", 2, {5, 73}, 3, AC_CONTIG, AC_CONTIG},
        {"middle axis of 3-d", 3, {3, 5, 7}, 2, AC_CONTIG, AC_CONTIG},
        {"transposed in, axis 0", 2, {5, 73}, 1, AC_TRANSPOSED, AC_CONTIG},
        {"broadcast in, sliced out", 2, {5, 73}, 1, AC_BCAST0, AC_SLICED},
        {"reversed 3-d, axes 0 and 2", 3, {3, 5, 7}, 5, AC_REVERSED, AC_CONTIG},
        {"zero-size kept axis", 2, {0, 5}, 2, AC_CONTIG, AC_CONTIG},
        {"zero-size reduced axis", 2, {5, 0}, 2, AC_CONTIG, AC_CONTIG},
        {"one element", 0, {0}, 0, AC_CONTIG, AC_CONTIG},
        {"large rows", 2, {67, 1031}, 2, AC_CONTIG, AC_CONTIG},
        {"large columns", 2, {67, 1031}, 1, AC_CONTIG, AC_CONTIG},
        {"large, every axis", 2, {67, 1031}, 3, AC_CONTIG, AC_CONTIG},
        {"tall columns", 2, {4096, 384}, 1, AC_CONTIG, AC_CONTIG},
        {"tall and narrow, rows", 2, {20000, 3}, 2, AC_CONTIG, AC_CONTIG},
        {"tall and narrow, columns", 2, {20000, 3}, 1, AC_CONTIG, AC_CONTIG},
        {"short and wide, rows", 2, {2, 40000}, 2, AC_TRANSPOSED, AC_CONTIG},
        {"short and wide, columns", 2, {2, 40000}, 1, AC_CONTIG, AC_CONTIG},
        {"long vector", 1, {1000003}, 1, AC_CONTIG, AC_CONTIG},
        /* every set of axes of a 3-d tensor, read in place and reversed */
        {"axes 0 of 4x6x5", 3, {4, 6, 5}, 1, AC_CONTIG, AC_CONTIG},
        {"axes 1 of 4x6x5", 3, {4, 6, 5}, 2, AC_REVERSED, AC_CONTIG},
        {"axes 0,1 of 4x6x5", 3, {4, 6, 5}, 3, AC_CONTIG, AC_SLICED},
        {"axes 2 of 4x6x5", 3, {4, 6, 5}, 4, AC_REVERSED, AC_CONTIG},
        {"axes 0,2 of 4x6x5", 3, {4, 6, 5}, 5, AC_TRANSPOSED, AC_CONTIG},
        {"axes 1,2 of 4x6x5", 3, {4, 6, 5}, 6, AC_SLICED, AC_CONTIG},
        {"axes 0,1,2 of 4x6x5", 3, {4, 6, 5}, 7, AC_REVERSED, AC_CONTIG},
    };
    for (int op = 0; op < AWL_REDUCE_OP_COUNT; op++) {
        const awl_op_info *info = awl_reduce_info((awl_reduce_op)op);
        for (int t = 0; t < 4; t++) {
            awl_dtype dt = ALL_DTYPES[t];
            if (!awl_kernel_defined(AWL_KERNEL_REDUCE, op, dt)) continue;
            for (int k = 0; k < COUNT(layouts); k++) {
                const reduce_layout *L = &layouts[k];
                bool empty_reduced = L->shape[1] == 0 && L->ndim == 2 && (L->axes & 2);
                /* max and min of nothing are refused before any kernel */
                if (empty_reduced && (op == AWL_REDUCE_MAX || op == AWL_REDUCE_MIN)) continue;
                char name[40];
                snprintf(name, sizeof name, "reduce.%s", info->name);
                ac_case c =
                    ac_case_new(AWL_KERNEL_REDUCE, name, dt, L->name, call_reduce, ref_reduce);
                c.args.op = op;
                int64_t out_shape[3];
                for (int d = 0; d < L->ndim; d++)
                    out_shape[d] = (L->axes >> d) & 1 ? 1 : L->shape[d];
                ac_add(&c, ac_operand_new("out", AC_OUT, dt, L->ndim, out_shape, L->out));
                ac_add(&c, ac_operand_new("x", AC_IN, dt, L->ndim, L->shape, L->in));
                ac_push(l, &c);
            }
        }
    }
    /* float32 sums of many values must accumulate in double: a float
     * accumulator is off by ~1e-3 here */
    static const int64_t many[1] = {(int64_t)1 << 22}, one[1] = {1};
    ac_case c = ac_case_new(AWL_KERNEL_REDUCE, "reduce.sum", AWL_F32, "accuracy, 4M positive",
                            call_reduce, ref_reduce);
    c.args.op = AWL_REDUCE_SUM;
    c.tol = 2e-7;
    ac_add(&c, OPERAND("out", AC_OUT, AWL_F32, one, AC_CONTIG));
    ac_add(&c, ac_domain(OPERAND("x", AC_IN, AWL_F32, many, AC_CONTIG), AWL_DOMAIN_POSITIVE));
    ac_push(l, &c);
}

/* ---- milestone 5: matmul --------------------------------------------------------------------- */

static int call_matmul(const awl_backend *b, awl_view *const *v, const ac_args *a)
{
    return b->matmul(v[0], v[1], v[2], a->flag);
}

/* out (batch..., M, N) (+)= a (batch..., M, K) @ b (batch..., K, N). */
static int ref_matmul(const ac_case *c, double *const *in, double **ref)
{
    const ac_operand *o = &c->op[0];
    int nd = o->ndim;
    int64_t M = o->shape[nd - 2], N = o->shape[nd - 1], K = c->op[1].shape[nd - 1];
    int64_t batches = ac_numel(nd - 2, o->shape);
    for (int64_t bt = 0; bt < batches; bt++)
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) {
                double s = c->args.flag ? in[0][(bt * M + m) * N + n] : 0;
                for (int64_t k = 0; k < K; k++)
                    s += in[1][(bt * M + m) * K + k] * in[2][(bt * K + k) * N + n];
                ref[0][(bt * M + m) * N + n] = s;
            }
    return 0;
}

static void matmul_case(ac_list *l, awl_dtype dt, int nb, const int64_t *batch, int64_t M,
                        int64_t K, int64_t N, ac_layout la, ac_layout lb, ac_layout lo,
                        bool a_bcast, bool accumulate, const char *what)
{
    /* contiguous, transposed, reversed, sliced, broadcast 0, 1, all, offset */
    static const char *const ln[] = {"c", "t", "r", "s", "b0", "b1", "ball", "o"};
    int nd = nb + 2;
    int64_t sa[AWL_MAX_DIMS], sb[AWL_MAX_DIMS], so[AWL_MAX_DIMS];
    for (int d = 0; d < nb; d++) sa[d] = sb[d] = so[d] = batch[d];
    sa[nb] = M, sa[nb + 1] = K, sb[nb] = K, sb[nb + 1] = N, so[nb] = M, so[nb + 1] = N;
    char layout[56];
    snprintf(layout, sizeof layout, "%s%s@%s->%s%s%s", what, ln[la], ln[lb], ln[lo],
             a_bcast ? " a-batch-bcast" : "", accumulate ? " accumulate" : "");
    ac_case c = ac_case_new(AWL_KERNEL_MATMUL, "", dt, layout, call_matmul, ref_matmul);
    c.args.flag = accumulate;
    ac_add(&c, ac_operand_new("out", accumulate ? AC_INOUT : AC_OUT, dt, nd, so, lo));
    ac_operand a = ac_operand_new("a", AC_IN, dt, nd, sa, la);
    if (a_bcast) a.strides[0] = 0;
    ac_add(&c, a);
    ac_add(&c, ac_operand_new("b", AC_IN, dt, nd, sb, lb));
    ac_push(l, &c);
}

static void matmul_cases(ac_list *l)
{
    static const int64_t none[1] = {1}, batch[2] = {3, 2}, many[1] = {40}, four[2] = {2, 3};
    static const ac_layout ls[3] = {AC_CONTIG, AC_TRANSPOSED, AC_SLICED};
    static const awl_dtype dts[3] = {AWL_F32, AWL_F64, AWL_BF16};
    for (int t = 0; t < 3; t++) {
        awl_dtype dt = dts[t];
        for (int la = 0; la < 3; la++)
            for (int lb = 0; lb < 3; lb++)
                for (int lo = 0; lo < 3; lo++) {
                    matmul_case(l, dt, 0, none, 5, 7, 3, ls[la], ls[lb], ls[lo], false, lo == 1,
                                "");
                    matmul_case(l, dt, 2, batch, 4, 6, 5, ls[la], ls[lb], ls[lo], la == 0, lo == 2,
                                "batched ");
                }
        matmul_case(l, dt, 0, none, 1, 9, 1, AC_TRANSPOSED, AC_TRANSPOSED, AC_CONTIG, false, false,
                    "1x9x1 ");
        matmul_case(l, dt, 0, none, 1, 9, 6, AC_SLICED, AC_CONTIG, AC_TRANSPOSED, false, true,
                    "1x9x6 ");
        /* one row or one column (a decoding step's products): the CPU
         * backend's matrix-vector path, in every layout, and split between
         * threads */
        for (int la = 0; la < 3; la++)
            for (int lb = 0; lb < 3; lb++) {
                matmul_case(l, dt, 0, none, 1, 9, 6, ls[la], ls[lb], ls[(la + lb) % 3], false,
                            lb == 1, "1x9x6 ");
                matmul_case(l, dt, 0, none, 6, 9, 1, ls[la], ls[lb], ls[(la + 2 * lb) % 3], false,
                            la == 1, "6x9x1 ");
            }
        matmul_case(l, dt, 0, none, 1, 512, 512, AC_CONTIG, AC_TRANSPOSED, AC_CONTIG, false, false,
                    "1x512x512 ");
        matmul_case(l, dt, 0, none, 512, 512, 1, AC_TRANSPOSED, AC_CONTIG, AC_SLICED, false, true,
                    "512x512x1 ");
        matmul_case(l, dt, 0, none, 6, 0, 4, AC_CONTIG, AC_CONTIG, AC_SLICED, false, false, "K=0 ");
        matmul_case(l, dt, 0, none, 6, 0, 4, AC_CONTIG, AC_CONTIG, AC_CONTIG, false, true, "K=0 ");
        matmul_case(l, dt, 1, many, 16, 8, 16, AC_CONTIG, AC_TRANSPOSED, AC_CONTIG, false, false,
                    "40 small ");
        matmul_case(l, dt, 1, many, 9, 8, 7, AC_SLICED, AC_CONTIG, AC_CONTIG, true, true,
                    "40 small ");
        matmul_case(l, dt, 2, four, 17, 23, 19, AC_CONTIG, AC_CONTIG, AC_TRANSPOSED, false, false,
                    "2x3 batch ");
        matmul_case(l, dt, 0, none, 130, 70, 90, AC_TRANSPOSED, AC_CONTIG, AC_CONTIG, false, false,
                    "130x70x90 ");
        /* large enough to be split between threads, in bands of rows (M > N)
         * or of columns (M < N), under every transposition */
        for (int la = 0; la < 2; la++)
            for (int lb = 0; lb < 2; lb++)
                for (int lo = 0; lo < 2; lo++) {
                    matmul_case(l, dt, 0, none, 150, 100, 40, ls[la], ls[lb], ls[lo], false,
                                lo == 1, "150x100x40 ");
                    matmul_case(l, dt, 0, none, 40, 100, 150, ls[la], ls[lb], ls[lo], false,
                                lo == 0, "40x100x150 ");
                }
        matmul_case(l, dt, 0, none, 256, 768, 384, AC_CONTIG, AC_CONTIG, AC_CONTIG, false, false,
                    "256x768x384 ");
    }
    /* float32 sides that the CUDA backend's tensor-core kernel takes (M and
     * N multiples of 128, K of 32): every transposition, outputs row- and
     * column-major, accumulated, and one 20 bytes off alignment (which the
     * kernel leaves to cuBLAS); and a long K that the kernel cuts into
     * four slices of 512 (a weight gradient's shape) */
    static const ac_layout outs[3] = {AC_CONTIG, AC_TRANSPOSED, AC_OFFSET};
    for (int la = 0; la < 2; la++)
        for (int lb = 0; lb < 2; lb++)
            for (int lo = 0; lo < 3; lo++)
                matmul_case(l, AWL_F32, 0, none, 128, 96, 256, ls[la], ls[lb], outs[lo], false,
                            la == lb, "128x96x256 ");
    matmul_case(l, AWL_F32, 0, none, 128, 2048, 128, AC_TRANSPOSED, AC_CONTIG, AC_CONTIG, false,
                true, "128x2048x128 ");
}

/* ---- milestone 6: indexing ------------------------------------------------------------------ */

static int call_index_select(const awl_backend *b, awl_view *const *v, const ac_args *a)
{
    (void)a;
    return b->index_select(v[0], v[1], v[2]);
}

/* out[i..., r...] = src[idx[i...], r...]: out (I..., R...), src (V, R...). */
static int ref_index_select(const ac_case *c, double *const *in, double **ref)
{
    const ac_operand *src = &c->op[1];
    int64_t rows = ac_numel(src->ndim - 1, src->shape + 1);
    int64_t nidx = ac_numel(c->op[2].ndim, c->op[2].shape);
    for (int64_t i = 0; i < nidx; i++)
        for (int64_t r = 0; r < rows; r++)
            ref[0][i * rows + r] = in[1][(int64_t)in[2][i] * rows + r];
    return 0;
}

static int call_index_add(const awl_backend *b, awl_view *const *v, const ac_args *a)
{
    (void)a;
    return b->index_add(v[0], v[1], v[2]);
}

/* dst[idx[i...], r...] += src[i..., r...], in index order. */
static int ref_index_add(const ac_case *c, double *const *in, double **ref)
{
    const ac_operand *dst = &c->op[0];
    int64_t rows = ac_numel(dst->ndim - 1, dst->shape + 1), n = ac_numel(dst->ndim, dst->shape);
    int64_t nidx = ac_numel(c->op[1].ndim, c->op[1].shape);
    memcpy(ref[0], in[0], (size_t)n * sizeof(double));
    for (int64_t i = 0; i < nidx; i++)
        for (int64_t r = 0; r < rows; r++)
            ref[0][(int64_t)in[1][i] * rows + r] += in[2][i * rows + r];
    return 0;
}

static int call_gather(const awl_backend *b, awl_view *const *v, const ac_args *a)
{
    return b->gather(v[0], v[1], a->axis, v[2]);
}

/* out[.., j, ..] = in[.., idx[.., j, ..], ..] along axis. */
static int ref_gather(const ac_case *c, double *const *in, double **ref)
{
    const ac_operand *o = &c->op[0], *x = &c->op[1];
    int64_t n = ac_numel(o->ndim, o->shape), idx[AWL_MAX_DIMS];
    for (int64_t i = 0; i < n; i++) {
        ac_unravel(i, o->ndim, o->shape, idx);
        idx[c->args.axis] = (int64_t)in[2][i];
        ref[0][i] = in[1][ac_ravel(idx, x->ndim, x->shape)];
    }
    return 0;
}

static int call_scatter_add(const awl_backend *b, awl_view *const *v, const ac_args *a)
{
    return b->scatter_add(v[0], a->axis, v[1], v[2]);
}

/* out[.., idx[.., j, ..], ..] += src[.., j, ..]. */
static int ref_scatter_add(const ac_case *c, double *const *in, double **ref)
{
    const ac_operand *o = &c->op[0], *ix = &c->op[1];
    int64_t n = ac_numel(ix->ndim, ix->shape), idx[AWL_MAX_DIMS];
    memcpy(ref[0], in[0], (size_t)ac_numel(o->ndim, o->shape) * sizeof(double));
    for (int64_t i = 0; i < n; i++) {
        ac_unravel(i, ix->ndim, ix->shape, idx);
        idx[c->args.axis] = (int64_t)in[1][i];
        ref[0][ac_ravel(idx, o->ndim, o->shape)] += in[2][i];
    }
    return 0;
}

static void select_add_case(ac_list *l, awl_dtype dt, const char *what, int snd,
                            const int64_t *sshape, int ind, const int64_t *ishape, ac_layout ls,
                            ac_layout li, ac_layout lo, ac_layout lsrc, double lo_idx,
                            double hi_idx)
{
    int64_t oshape[AWL_MAX_DIMS];
    int ond = 0;
    for (int d = 0; d < ind; d++) oshape[ond++] = ishape[d];
    for (int d = 1; d < snd; d++) oshape[ond++] = sshape[d];
    ac_case c =
        ac_case_new(AWL_KERNEL_INDEX_SELECT, "", dt, what, call_index_select, ref_index_select);
    ac_add(&c, ac_operand_new("out", AC_OUT, dt, ond, oshape, lo));
    ac_add(&c, ac_operand_new("src", AC_IN, dt, snd, sshape, ls));
    ac_add(&c, ac_ints(ac_operand_new("idx", AC_IN, AWL_I32, ind, ishape, li), lo_idx, hi_idx));
    ac_push(l, &c);
    ac_case a = ac_case_new(AWL_KERNEL_INDEX_ADD, "", dt, what, call_index_add, ref_index_add);
    /* an output is never broadcast: two of its elements would be one */
    bool bcast = ls == AC_BCAST0 || ls == AC_BCAST1 || ls == AC_BCAST_ALL;
    ac_add(&a, ac_operand_new("dst", AC_INOUT, dt, snd, sshape, bcast ? AC_CONTIG : ls));
    ac_add(&a, ac_ints(ac_operand_new("idx", AC_IN, AWL_I32, ind, ishape, li), lo_idx, hi_idx));
    ac_add(&a, ac_operand_new("src", AC_IN, dt, ond, oshape, lsrc));
    ac_push(l, &a);
}

static void gather_scatter_case(ac_list *l, awl_dtype dt, const char *what, int nd,
                                const int64_t *shape, int axis, int64_t along, ac_layout lx,
                                ac_layout li, ac_layout lo, ac_layout lsrc)
{
    int64_t ishape[AWL_MAX_DIMS];
    memcpy(ishape, shape, (size_t)nd * sizeof *shape);
    ishape[axis] = along;
    char layout[56];
    snprintf(layout, sizeof layout, "%saxis %d", what, axis);
    ac_case g = ac_case_new(AWL_KERNEL_GATHER, "", dt, layout, call_gather, ref_gather);
    g.args.axis = axis;
    ac_add(&g, ac_operand_new("out", AC_OUT, dt, nd, ishape, lo));
    ac_add(&g, ac_operand_new("in", AC_IN, dt, nd, shape, lx));
    ac_add(&g, ac_ints(ac_operand_new("idx", AC_IN, AWL_I32, nd, ishape, li), 0,
                       (double)shape[axis] - 1));
    ac_push(l, &g);
    ac_case s =
        ac_case_new(AWL_KERNEL_SCATTER_ADD, "", dt, layout, call_scatter_add, ref_scatter_add);
    s.args.axis = axis;
    ac_add(&s, ac_operand_new("out", AC_INOUT, dt, nd, shape, lx));
    ac_add(&s, ac_ints(ac_operand_new("idx", AC_IN, AWL_I32, nd, ishape, li), 0,
                       (double)shape[axis] - 1));
    ac_add(&s, ac_operand_new("src", AC_IN, dt, nd, ishape, lsrc));
    ac_push(l, &s);
}

static void index_cases(ac_list *l)
{
    static const int64_t src[3] = {7, 3, 4}, idx[2] = {2, 5}, emb[2] = {65, 128},
                         tokens[2] = {64, 64}, rows[2] = {1000, 96}, many[1] = {2048},
                         few[2] = {5, 3}, repeat[1] = {300}, three[2] = {3, 40}, ids[1] = {4096},
                         x3[3] = {4, 9, 5}, ce[2] = {64, 65};
    for (int t = 0; t < 4; t++) {
        awl_dtype dt = ALL_DTYPES[t];
        select_add_case(l, dt, "contiguous", 3, src, 2, idx, AC_CONTIG, AC_CONTIG, AC_CONTIG,
                        AC_CONTIG, 0, 6);
        select_add_case(l, dt, "transposed src, sliced out", 3, src, 2, idx, AC_TRANSPOSED,
                        AC_CONTIG, AC_SLICED, AC_REVERSED, 0, 6);
        select_add_case(l, dt, "sliced idx, broadcast src", 3, src, 2, idx, AC_BCAST1, AC_SLICED,
                        AC_CONTIG, AC_BCAST0, 0, 6);
        select_add_case(l, dt, "embedding rows", 2, emb, 2, tokens, AC_CONTIG, AC_CONTIG, AC_CONTIG,
                        AC_CONTIG, 0, 64);
        select_add_case(l, dt, "2048 ids onto 1000 rows", 2, rows, 1, many, AC_CONTIG, AC_CONTIG,
                        AC_CONTIG, AC_TRANSPOSED, 0, 999);
        select_add_case(l, dt, "300 repeats of one row", 2, few, 1, repeat, AC_CONTIG, AC_CONTIG,
                        AC_CONTIG, AC_CONTIG, 2, 2);
        select_add_case(l, dt, "4096 ids onto 3 rows", 2, three, 1, ids, AC_CONTIG, AC_CONTIG,
                        AC_CONTIG, AC_SLICED, 0, 2);
        for (int axis = 0; axis < 3; axis++) {
            gather_scatter_case(l, dt, "", 3, x3, axis, 6, AC_CONTIG, AC_CONTIG, AC_CONTIG,
                                AC_CONTIG);
            gather_scatter_case(l, dt, "strided ", 3, x3, axis, 6, AC_TRANSPOSED, AC_REVERSED,
                                AC_SLICED, AC_BCAST0);
        }
        gather_scatter_case(l, dt, "one class per row, ", 2, ce, 1, 1, AC_CONTIG, AC_CONTIG,
                            AC_CONTIG, AC_CONTIG);
    }
}

/* ---- milestone 7: random fill ---------------------------------------------------------------- */

static int call_random(const awl_backend *b, awl_view *const *v, const ac_args *a)
{
    return b->random(v[0], (awl_random_kind)a->kind, a->seed, a->offset, a->a, a->b);
}

/* Element i, in row-major order of out's shape, from the stream (seed,
 * offset) of common/philox.h. */
static int ref_random(const ac_case *c, double *const *in, double **ref)
{
    (void)in;
    const ac_args *a = &c->args;
    int64_t n = ac_numel(c->op[0].ndim, c->op[0].shape);
    for (int64_t i = 0; i < n; i++)
        ref[0][i] =
            a->kind == AWL_RANDOM_UNIFORM
                ? a->a + (a->b - a->a) * awl_philox_uniform_at(a->seed, a->offset, (uint64_t)i)
                : a->a + a->b * awl_philox_normal_at(a->seed, a->offset, (uint64_t)i);
    return 0;
}

static void random_cases(ac_list *l)
{
    static const int64_t n1[1] = {1003}, n2[2] = {37, 29}, n3[3] = {5, 7, 3}, big[2] = {250, 401};
    static const awl_dtype dts[3] = {AWL_F32, AWL_F64, AWL_BF16};
    for (int kind = 0; kind < 2; kind++)
        for (int t = 0; t < 3; t++) {
            const struct {
                const char *name;
                int nd;
                const int64_t *shape;
                ac_layout layout;
            } outs[] = {{"contiguous", 1, n1, AC_CONTIG},
                        {"sliced", 2, n2, AC_SLICED},
                        {"reversed 3-d", 3, n3, AC_REVERSED},
                        {"large", 2, big, AC_CONTIG}};
            for (int k = 0; k < 4; k++) {
                ac_case c =
                    ac_case_new(AWL_KERNEL_RANDOM, kind ? "random.normal" : "random.uniform",
                                dts[t], outs[k].name, call_random, ref_random);
                c.args.kind = kind ? AWL_RANDOM_NORMAL : AWL_RANDOM_UNIFORM;
                c.args.seed = 0x123456789abcdefull + (uint64_t)k;
                c.args.offset = 77;
                c.args.a = kind ? 0.5 : -1;
                c.args.b = kind ? 2 : 3;
                /* uniform draws are exact; normal ones go through libm */
                if (!kind) c.tol = 1e-300;
                ac_add(&c, ac_operand_new("out", AC_OUT, dts[t], outs[k].nd, outs[k].shape,
                                          outs[k].layout));
                ac_push(l, &c);
            }
        }
}

void ac_primitive_cases(ac_list *l)
{
    fill_copy_cases(l);
    elementwise_cases(l);
    where_cases(l);
    reduce_cases(l);
    matmul_cases(l);
    index_cases(l);
    random_cases(l);
}
