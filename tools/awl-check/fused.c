/*
 * tools/awl-check/fused.c - the cases of the optional fused kernels, each
 * checked against its composed version: the reference runs the same
 * computation in float64 on the CPU with ordinary ops (the harness turns
 * fused kernels off around it), which is what the framework does when a
 * backend lacks the kernel, and gradients come from autograd through that
 * composition.
 *
 * Inputs that a kernel expects to be consistent (a softmax output, the
 * statistics a layer norm forward saved, the log-sum-exp and output an
 * attention forward saved) are computed the same way by each case's init
 * function, so a backward kernel is checked on what its forward would give
 * it.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd.h"
#include "common/alloc.h"
#include "nn/nn.h"
#include "tools/awl-check/harness.h"

#define COUNT(a) (int)(sizeof(a) / sizeof((a)[0]))

static const awl_dtype FLOATS[3] = {AWL_F32, AWL_F64, AWL_BF16};

/* A case's tolerance by dtype: float32's and bfloat16's given, float64's
 * the default. */
static double tol_of(awl_dtype dt, double f32, double bf16)
{
    return dt == AWL_F32 ? f32 : dt == AWL_BF16 ? bf16 : 0;
}

/* Operand k of c as a float64 CPU tensor that requires grad. */
static awl_tensor *leaf(const ac_case *c, double *const *in, int k)
{
    return awl_requires_grad_(ac_cpu_tensor(c, in, k), true);
}

/* ---- softmax ----------------------------------------------------------------------- */

/* forward: out, x; backward: dx, dy, y. */
static int call_softmax(const awl_backend *b, awl_view *const *v, const ac_args *a)
{
    return b->softmax_forward(v[0], v[1], a->flag);
}

static int call_softmax_bwd(const awl_backend *b, awl_view *const *v, const ac_args *a)
{
    return b->softmax_backward(v[0], v[1], v[2], a->flag);
}

static awl_tensor *softmax_of(awl_tensor *x, bool log)
{
    return log ? awl_log_softmax(x, -1) : awl_softmax(x, -1);
}

static int ref_softmax(const ac_case *c, double *const *in, double **ref)
{
    return ac_values(softmax_of(ac_cpu_tensor(c, in, 1), c->args.flag), ref[0],
                     ac_numel(c->op[0].ndim, c->op[0].shape));
}

/* softmax: dx = y (dy - sum(dy y)); log_softmax: dx = dy - exp(y) sum(dy). */
static int ref_softmax_bwd(const ac_case *c, double *const *in, double **ref)
{
    awl_tensor *dy = ac_cpu_tensor(c, in, 1), *y = ac_cpu_tensor(c, in, 2), *dx;
    if (c->args.flag)
        dx = awl_sub(dy, awl_mul(awl_exp(y), awl_sum(dy, AWL_DIMS(-1), true)));
    else
        dx = awl_mul(y, awl_sub(dy, awl_sum(awl_mul(dy, y), AWL_DIMS(-1), true)));
    return ac_values(dx, ref[0], ac_numel(c->op[0].ndim, c->op[0].shape));
}

/* One large logit, so exp overflows unless the row maximum is subtracted. */
static void init_softmax(const ac_case *c, double **in)
{
    (void)c;
    in[1][0] = 100.0;
}

/* y: the softmax (or log_softmax) of random logits. */
static void init_softmax_bwd(const ac_case *c, double **in)
{
    awl_scope_begin();
    bool fused = awl_set_fused_kernels(false);
    ac_values(softmax_of(ac_cpu_tensor(c, in, 2), c->args.flag), in[2],
              ac_numel(c->op[2].ndim, c->op[2].shape));
    awl_set_fused_kernels(fused);
    awl_scope_end();
}

static void softmax_cases(ac_list *l)
{
    static const int64_t shapes[][2] = {{6, 37}, {64, 1000}, {3, 7}, {8, 50304}};
    for (int t = 0; t < 3; t++)
        for (int s = 0; s < COUNT(shapes); s++)
            for (int lg = 0; lg < 2; lg++) {
                awl_dtype dt = FLOATS[t];
                char layout[56];
                snprintf(layout, sizeof layout, "%s", lg ? "log" : "softmax");
                ac_case f = ac_case_new(AWL_KERNEL_SOFTMAX_FORWARD, "", dt, layout, call_softmax,
                                        ref_softmax);
                f.args.flag = lg;
                f.init = init_softmax;
                f.tol = tol_of(dt, 1e-5, 2e-2);
                ac_add(&f, ac_operand_new("out", AC_OUT, dt, 2, shapes[s], AC_CONTIG));
                ac_add(&f, ac_operand_new("x", AC_IN, dt, 2, shapes[s], AC_CONTIG));
                ac_push(l, &f);
                ac_case b = ac_case_new(AWL_KERNEL_SOFTMAX_BACKWARD, "", dt, layout,
                                        call_softmax_bwd, ref_softmax_bwd);
                b.args.flag = lg;
                b.init = init_softmax_bwd;
                b.tol = tol_of(dt, 1e-4, 6e-2); /* dy - dot cancels */
                ac_add(&b, ac_operand_new("dx", AC_OUT, dt, 2, shapes[s], AC_CONTIG));
                ac_add(&b, ac_operand_new("dy", AC_IN, dt, 2, shapes[s], AC_CONTIG));
                ac_add(&b, ac_operand_new("y", AC_IN, dt, 2, shapes[s], AC_CONTIG));
                ac_push(l, &b);
            }
}

/* ---- layer norm -------------------------------------------------------------------------- */

#define LN_EPS 1e-5

/* forward: out, mean, rstd, x [, weight, bias]. */
static int call_ln(const awl_backend *b, awl_view *const *v, const ac_args *a)
{
    return b->layernorm_forward(v[0], v[1], v[2], v[3], a->flag ? v[4] : NULL,
                                a->flag ? v[5] : NULL, a->eps);
}

/* backward: dx, dy, x, mean, rstd [, weight, dweight, dbias] [, dx_add]
 * [, dx_copy]. */
static int call_ln_bwd(const awl_backend *b, awl_view *const *v, const ac_args *a)
{
    return b->layernorm_backward(v[0], a->flag ? v[6] : NULL, a->flag ? v[7] : NULL, v[1], v[2],
                                 a->flag ? v[5] : NULL, v[3], v[4], a->extra ? v[a->extra] : NULL,
                                 a->extra2 ? v[a->extra2] : NULL);
}

/* mean and 1/sqrt(var + eps) of the rows of x, composed. */
static void ln_stats(awl_tensor *x, awl_tensor **mean, awl_tensor **rstd)
{
    awl_tensor *m = awl_mean(x, AWL_DIMS(-1), true), *xm = awl_sub(x, m);
    *mean = m;
    *rstd = awl_pow(awl_add_scalar(awl_mean(awl_mul(xm, xm), AWL_DIMS(-1), true), LN_EPS), -0.5);
}

static int ref_ln(const ac_case *c, double *const *in, double **ref)
{
    awl_tensor *x = ac_cpu_tensor(c, in, 3), *mean, *rstd;
    awl_tensor *w = c->args.flag ? ac_cpu_tensor(c, in, 4) : NULL;
    awl_tensor *b = c->args.flag ? ac_cpu_tensor(c, in, 5) : NULL;
    ln_stats(x, &mean, &rstd);
    int64_t rows = ac_numel(c->op[1].ndim, c->op[1].shape);
    int rc = ac_values(awl_layer_norm(x, w, b, LN_EPS), ref[0], ac_numel(2, c->op[0].shape));
    if (rc == 0) rc = ac_values(mean, ref[1], rows);
    if (rc == 0) rc = ac_values(rstd, ref[2], rows);
    return rc;
}

static int ref_ln_bwd(const ac_case *c, double *const *in, double **ref)
{
    bool affine = c->args.flag;
    awl_tensor *x = leaf(c, in, 2), *w = affine ? leaf(c, in, 5) : NULL;
    /* a zero bias: it changes nothing but gives dbias */
    awl_tensor *b = affine ? awl_requires_grad_(awl_zeros_like(w), true) : NULL;
    awl_tensor *y = awl_layer_norm(x, w, b, LN_EPS), *grads[3];
    awl_tensor *inputs[3] = {x, w, b};
    awl_backward_options opts = {.grad = ac_cpu_tensor(c, in, 1)};
    if (!y || awl_grad(y, affine ? 3 : 1, inputs, grads, &opts) < 0) return AWL_ERR_INVALID;
    int64_t n = ac_numel(2, c->op[0].shape), C = c->op[0].shape[1];
    awl_tensor *dx =
        c->args.extra ? awl_add(grads[0], ac_cpu_tensor(c, in, c->args.extra)) : grads[0];
    int rc = ac_values(dx, ref[0], n);
    if (c->args.extra2 && rc == 0) rc = ac_values(dx, ref[c->args.extra2], n); /* dx_copy */
    if (affine && rc == 0) rc = ac_values(grads[1], ref[6], C);
    if (affine && rc == 0) rc = ac_values(grads[2], ref[7], C);
    return rc;
}

/* mean and rstd: the statistics of x that a forward saves. */
static void init_ln_bwd(const ac_case *c, double **in)
{
    awl_scope_begin();
    bool fused = awl_set_fused_kernels(false);
    awl_tensor *mean, *rstd;
    ln_stats(ac_cpu_tensor(c, in, 2), &mean, &rstd);
    int64_t rows = ac_numel(c->op[3].ndim, c->op[3].shape);
    ac_values(mean, in[3], rows);
    ac_values(rstd, in[4], rows);
    awl_set_fused_kernels(fused);
    awl_scope_end();
}

/* b again with dx rounded to bfloat16 beside dx (dx_copy: the copy the
 * residual addition's backward takes instead of a cast). */
static void push_with_dx_copy(ac_list *l, ac_case *b, const int64_t *x2, const char *layout)
{
    snprintf(b->layout, sizeof b->layout, "%s", layout);
    b->args.extra2 = b->n;
    ac_operand copy = ac_operand_new("dx_copy", AC_OUT, AWL_BF16, 2, x2, AC_CONTIG);
    copy.tol = 1e-2; /* bfloat16 rounding of a float32 dx */
    ac_add(b, copy);
    ac_push(l, b);
}

static void layernorm_cases(ac_list *l)
{
    static const struct {
        int64_t rows, C;
        bool affine;
    } shapes[] = {
        {7, 33, true}, {5, 16, false}, {300, 64, true}, {1000, 768, true}, {5, 2048, false}};
    for (int t = 0; t < 3; t++)
        for (int s = 0; s < COUNT(shapes); s++) {
            awl_dtype dt = FLOATS[t];
            int64_t x2[2] = {shapes[s].rows, shapes[s].C}, rows[1] = {shapes[s].rows},
                    C[1] = {shapes[s].C};
            bool affine = shapes[s].affine;
            const char *layout = affine ? "affine" : "no weight or bias";
            ac_case f = ac_case_new(AWL_KERNEL_LAYERNORM_FORWARD, "", dt, layout, call_ln, ref_ln);
            f.args.flag = affine;
            f.args.eps = LN_EPS;
            f.tol = tol_of(dt, 2e-5, 3e-2);
            ac_add(&f, ac_operand_new("out", AC_OUT, dt, 2, x2, AC_CONTIG));
            ac_add(&f, ac_operand_new("mean", AC_OUT, AWL_F32, 1, rows, AC_CONTIG));
            ac_add(&f, ac_operand_new("rstd", AC_OUT, AWL_F32, 1, rows, AC_CONTIG));
            ac_add(&f, ac_operand_new("x", AC_IN, dt, 2, x2, AC_CONTIG));
            if (affine) {
                ac_add(&f, ac_operand_new("weight", AC_IN, dt, 1, C, AC_CONTIG));
                ac_add(&f, ac_operand_new("bias", AC_IN, dt, 1, C, AC_CONTIG));
            }
            ac_push(l, &f);
            ac_case b =
                ac_case_new(AWL_KERNEL_LAYERNORM_BACKWARD, "", dt, layout, call_ln_bwd, ref_ln_bwd);
            b.args.flag = affine;
            b.init = init_ln_bwd;
            b.tol = tol_of(dt, 1e-4, 6e-2);
            ac_add(&b, ac_operand_new("dx", AC_OUT, dt, 2, x2, AC_CONTIG));
            ac_add(&b, ac_operand_new("dy", AC_IN, dt, 2, x2, AC_CONTIG));
            ac_add(&b, ac_operand_new("x", AC_IN, dt, 2, x2, AC_CONTIG));
            ac_add(&b, ac_operand_new("mean", AC_IN, AWL_F32, 1, rows, AC_CONTIG));
            ac_add(&b, ac_operand_new("rstd", AC_IN, AWL_F32, 1, rows, AC_CONTIG));
            if (affine) {
                ac_add(&b, ac_operand_new("weight", AC_IN, dt, 1, C, AC_CONTIG));
                ac_add(&b, ac_operand_new("dweight", AC_OUT, dt, 1, C, AC_CONTIG));
                ac_add(&b, ac_operand_new("dbias", AC_OUT, dt, 1, C, AC_CONTIG));
            }
            ac_push(l, &b);
            if (affine) { /* with a residual's gradient added in */
                snprintf(b.layout, sizeof b.layout, "affine, dx_add");
                b.args.extra = b.n;
                ac_add(&b, ac_operand_new("dx_add", AC_IN, dt, 2, x2, AC_CONTIG));
                ac_push(l, &b);
                if (dt == AWL_F32) push_with_dx_copy(l, &b, x2, "affine, dx_add, dx_copy");
            }
        }
    /* autocast's LayerNorm feeding a matmul: a float32 x with a bfloat16 out
     * (forward) or dy (backward); named by the bfloat16 operand's dtype, so
     * only a backend with bfloat16 LayerNorms is asked */
    for (int s = 2; s < 4; s++) {
        int64_t x2[2] = {shapes[s].rows, shapes[s].C}, rows[1] = {shapes[s].rows},
                C[1] = {shapes[s].C};
        ac_case f = ac_case_new(AWL_KERNEL_LAYERNORM_FORWARD, "", AWL_BF16,
                                "float32 x, bfloat16 out", call_ln, ref_ln);
        f.args.flag = true;
        f.args.eps = LN_EPS;
        f.tol = tol_of(AWL_BF16, 2e-5, 3e-2);
        ac_add(&f, ac_operand_new("out", AC_OUT, AWL_BF16, 2, x2, AC_CONTIG));
        ac_add(&f, ac_operand_new("mean", AC_OUT, AWL_F32, 1, rows, AC_CONTIG));
        ac_add(&f, ac_operand_new("rstd", AC_OUT, AWL_F32, 1, rows, AC_CONTIG));
        ac_add(&f, ac_operand_new("x", AC_IN, AWL_F32, 2, x2, AC_CONTIG));
        ac_add(&f, ac_operand_new("weight", AC_IN, AWL_F32, 1, C, AC_CONTIG));
        ac_add(&f, ac_operand_new("bias", AC_IN, AWL_F32, 1, C, AC_CONTIG));
        ac_push(l, &f);
        ac_case b = ac_case_new(AWL_KERNEL_LAYERNORM_BACKWARD, "", AWL_BF16,
                                "float32 x, bfloat16 dy", call_ln_bwd, ref_ln_bwd);
        b.args.flag = true;
        b.init = init_ln_bwd;
        b.tol = tol_of(AWL_F32, 1e-4, 6e-2); /* dx and dweight are float32 */
        ac_add(&b, ac_operand_new("dx", AC_OUT, AWL_F32, 2, x2, AC_CONTIG));
        ac_add(&b, ac_operand_new("dy", AC_IN, AWL_BF16, 2, x2, AC_CONTIG));
        ac_add(&b, ac_operand_new("x", AC_IN, AWL_F32, 2, x2, AC_CONTIG));
        ac_add(&b, ac_operand_new("mean", AC_IN, AWL_F32, 1, rows, AC_CONTIG));
        ac_add(&b, ac_operand_new("rstd", AC_IN, AWL_F32, 1, rows, AC_CONTIG));
        ac_add(&b, ac_operand_new("weight", AC_IN, AWL_F32, 1, C, AC_CONTIG));
        ac_add(&b, ac_operand_new("dweight", AC_OUT, AWL_F32, 1, C, AC_CONTIG));
        ac_add(&b, ac_operand_new("dbias", AC_OUT, AWL_F32, 1, C, AC_CONTIG));
        ac_push(l, &b);
        /* a GPT block's: the residual stream's gradient added in */
        snprintf(b.layout, sizeof b.layout, "float32 x, bfloat16 dy, dx_add");
        b.args.extra = b.n;
        ac_add(&b, ac_operand_new("dx_add", AC_IN, AWL_F32, 2, x2, AC_CONTIG));
        ac_push(l, &b);
        push_with_dx_copy(l, &b, x2, "float32 x, bfloat16 dy, dx_add, dx_copy");
    }
}

/* ---- cross-entropy ----------------------------------------------------------------------------
 */

#define CE_IGNORE (-100)

/* forward: loss, lse, logits, targets; backward: dlogits, dloss, logits,
 * lse, targets. */
static int call_ce(const awl_backend *b, awl_view *const *v, const ac_args *a)
{
    return b->cross_entropy_forward(v[0], v[1], v[2], v[3], a->ignore_index);
}

static int call_ce_bwd(const awl_backend *b, awl_view *const *v, const ac_args *a)
{
    return b->cross_entropy_backward(v[0], v[1], v[2], v[3], v[4], a->ignore_index);
}

static int ref_ce(const ac_case *c, double *const *in, double **ref)
{
    int64_t N = c->op[2].shape[0], V = c->op[2].shape[1];
    int rc = ac_values(awl_logsumexp(ac_cpu_tensor(c, in, 2), -1, false), ref[1], N);
    for (int64_t i = 0; rc == 0 && i < N; i++) {
        int t = (int)in[3][i];
        ref[0][i] = t == c->args.ignore_index ? 0 : ref[1][i] - in[2][i * V + t];
    }
    return rc;
}

/* dlogits[i] = dloss[i] (softmax(logits[i]) - onehot(t_i)), 0 for ignored. */
static int ref_ce_bwd(const ac_case *c, double *const *in, double **ref)
{
    int64_t N = c->op[2].shape[0], V = c->op[2].shape[1];
    int rc = ac_values(awl_softmax(ac_cpu_tensor(c, in, 2), -1), ref[0], N * V);
    for (int64_t i = 0; rc == 0 && i < N; i++) {
        int t = (int)in[4][i];
        for (int64_t j = 0; j < V; j++) {
            double *d = &ref[0][i * V + j];
            *d = t == c->args.ignore_index ? 0 : in[1][i] * (*d - (j == t));
        }
    }
    return rc;
}

/* both: loss, lse, dlogits, dloss, logits, targets */
static int call_ce_both(const awl_backend *b, awl_view *const *v, const ac_args *a)
{
    return b->cross_entropy_forward_backward(v[0], v[1], v[2], v[3], v[4], v[5], a->ignore_index);
}

/* The forward's loss and lse and the backward's dlogits from dloss. */
static int ref_ce_both(const ac_case *c, double *const *in, double **ref)
{
    int64_t N = c->op[4].shape[0], V = c->op[4].shape[1];
    int rc = ac_values(awl_logsumexp(ac_cpu_tensor(c, in, 4), -1, false), ref[1], N);
    if (rc == 0) rc = ac_values(awl_softmax(ac_cpu_tensor(c, in, 4), -1), ref[2], N * V);
    for (int64_t i = 0; rc == 0 && i < N; i++) {
        int t = (int)in[5][i];
        bool ignored = t == c->args.ignore_index;
        ref[0][i] = ignored ? 0 : ref[1][i] - in[4][i * V + t];
        for (int64_t j = 0; j < V; j++) {
            double *d = &ref[2][i * V + j];
            *d = ignored ? 0 : in[3][i] * (*d - (j == t));
        }
    }
    return rc;
}

static void init_ce_both(const ac_case *c, double **in)
{
    (void)c;
    in[5][2] = CE_IGNORE;
}

/* Row 2 is ignored. */
static void init_ce(const ac_case *c, double **in)
{
    (void)c;
    in[3][2] = CE_IGNORE;
}

/* Row 2 ignored; lse: the log-sum-exp of the logits, as the forward saved
 * it. */
static void init_ce_bwd(const ac_case *c, double **in)
{
    in[4][2] = CE_IGNORE;
    awl_scope_begin();
    bool fused = awl_set_fused_kernels(false);
    ac_values(awl_logsumexp(ac_cpu_tensor(c, in, 2), -1, false), in[3], c->op[2].shape[0]);
    awl_set_fused_kernels(fused);
    awl_scope_end();
}

/* A case of cross-entropy kernel k whose init ignores row 2's target. */
static ac_case ce_case(awl_kernel k, awl_dtype dt, const char *layout, ac_call_fn call,
                       ac_ref_fn ref, ac_init_fn init)
{
    ac_case c = ac_case_new(k, "", dt, layout, call, ref);
    c.args.ignore_index = CE_IGNORE;
    c.init = init;
    c.tol = tol_of(dt, 1e-5, 3e-2);
    return c;
}

static void cross_entropy_cases(ac_list *l)
{
    static const int64_t shapes[][2] = {{9, 11}, {64, 1000}, {32, 50304}};
    for (int t = 0; t < 3; t++)
        for (int s = 0; s < COUNT(shapes); s++)
            for (int strided = 0; strided < 2; strided++) {
                awl_dtype dt = FLOATS[t];
                int64_t N[1] = {shapes[s][0]};
                double V = (double)shapes[s][1];
                const char *layout = strided ? "sliced targets, broadcast dloss" : "contiguous";
                ac_layout lt = strided ? AC_SLICED : AC_CONTIG;
                ac_case f =
                    ce_case(AWL_KERNEL_CROSS_ENTROPY_FORWARD, dt, layout, call_ce, ref_ce, init_ce);
                ac_add(&f, ac_operand_new("loss", AC_OUT, dt, 1, N, AC_CONTIG));
                ac_add(&f, ac_operand_new("lse", AC_OUT, AWL_F32, 1, N, AC_CONTIG));
                ac_add(&f, ac_operand_new("logits", AC_IN, dt, 2, shapes[s], AC_CONTIG));
                ac_add(&f, ac_ints(ac_operand_new("targets", AC_IN, AWL_I32, 1, N, lt), 0, V - 1));
                ac_push(l, &f);
                ac_case b = ce_case(AWL_KERNEL_CROSS_ENTROPY_BACKWARD, dt, layout, call_ce_bwd,
                                    ref_ce_bwd, init_ce_bwd);
                ac_add(&b, ac_operand_new("dlogits", AC_OUT, dt, 2, shapes[s], AC_CONTIG));
                ac_add(&b,
                       ac_operand_new("dloss", AC_IN, dt, 1, N, strided ? AC_BCAST0 : AC_CONTIG));
                ac_add(&b, ac_operand_new("logits", AC_IN, dt, 2, shapes[s], AC_CONTIG));
                ac_add(&b, ac_operand_new("lse", AC_IN, AWL_F32, 1, N, AC_CONTIG));
                ac_add(&b, ac_ints(ac_operand_new("targets", AC_IN, AWL_I32, 1, N, lt), 0, V - 1));
                ac_push(l, &b);
                ac_case fb = ce_case(AWL_KERNEL_CROSS_ENTROPY_FORWARD_BACKWARD, dt, layout,
                                     call_ce_both, ref_ce_both, init_ce_both);
                ac_add(&fb, ac_operand_new("loss", AC_OUT, dt, 1, N, AC_CONTIG));
                ac_add(&fb, ac_operand_new("lse", AC_OUT, AWL_F32, 1, N, AC_CONTIG));
                ac_add(&fb, ac_operand_new("dlogits", AC_OUT, dt, 2, shapes[s], AC_CONTIG));
                ac_add(&fb,
                       ac_operand_new("dloss", AC_IN, dt, 1, N, strided ? AC_BCAST0 : AC_CONTIG));
                ac_add(&fb, ac_operand_new("logits", AC_IN, dt, 2, shapes[s], AC_CONTIG));
                ac_add(&fb, ac_ints(ac_operand_new("targets", AC_IN, AWL_I32, 1, N, lt), 0, V - 1));
                ac_push(l, &fb);
            }
}

/* ---- attention ----------------------------------------------------------------------------------
 */

/* The dropout the kernels get: NULL for none. */
static const awl_dropout_args *dropout_of(const ac_args *a)
{
    return a->dropout.p > 0 ? &a->dropout : NULL;
}

/* forward: out, lse, q, k, v; backward: dq, dk, dv, dout, q, k, v, out, lse. */
static int call_att(const awl_backend *b, awl_view *const *v, const ac_args *a)
{
    return b->attention_forward(v[0], v[1], v[2], v[3], v[4], a->scale, a->flag, dropout_of(a));
}

static int call_att_bwd(const awl_backend *b, awl_view *const *v, const ac_args *a)
{
    return b->attention_backward(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], a->scale,
                                 a->flag, dropout_of(a));
}

/* Scaled, masked scores (B, H, T, T). */
static awl_tensor *attention_scores(awl_tensor *q, awl_tensor *k, double scale, bool causal)
{
    int64_t T = q->shape[2];
    awl_tensor *s = awl_mul_scalar(awl_matmul(q, awl_transpose(k, -2, -1)), scale);
    if (causal) { /* key j after query i is masked */
        double *m = awl_xcalloc((size_t)(T * T), sizeof *m);
        for (int64_t i = 0; i < T; i++)
            for (int64_t j = i + 1; j < T; j++) m[i * T + j] = 1;
        s = awl_masked_fill(s, awl_from_data(m, AWL_SHAPE(T, T), AWL_F64, "cpu"), -INFINITY);
        free(m);
    }
    return s;
}

/* The log-sum-exp of each row of scaled, masked scores (B, H, T). */
static awl_tensor *attention_lse(awl_tensor *q, awl_tensor *k, double scale, bool causal)
{
    return awl_logsumexp(attention_scores(q, k, scale, causal), -1, false);
}

/* The dropout mask of the (B, H, T, T) weights as a float64 CPU tensor:
 * 256 / threshold where common/dropout.h's attention mask keeps weight
 * (b, h, i, j), else 0. */
static awl_tensor *attention_dropout_mask(const awl_dropout_args *d, const int64_t *s)
{
    const int64_t B = s[0], H = s[1], T = s[2], n = B * H * T * T;
    const uint32_t threshold = awl_attention_dropout_threshold(d->p);
    double *m = awl_xmalloc((size_t)n * sizeof *m);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < T; i++) {
                uint64_t r = awl_attention_dropout_row(b, h, i, H, T);
                for (int64_t j = 0; j < T; j++)
                    m[(int64_t)r * T + j] =
                        awl_attention_dropout_keep(d->seed, d->offset, r, j, T, threshold)
                            ? awl_attention_dropout_scale(threshold)
                            : 0.0;
            }
    awl_tensor *t = awl_from_data(m, AWL_SHAPE(B, H, T, T), AWL_F64, "cpu");
    free(m);
    return t;
}

/* The composed attention of the case's arguments: softmax, the dropout
 * mask of its arguments (none for p = 0), a product with v. */
static awl_tensor *attention_of(const ac_args *a, awl_tensor *q, awl_tensor *k, awl_tensor *v)
{
    if (!dropout_of(a)) return awl_scaled_dot_product_attention(q, k, v, a->flag, 0.0);
    awl_tensor *p = awl_softmax(attention_scores(q, k, a->scale, a->flag), -1);
    return awl_matmul(awl_mul(p, attention_dropout_mask(&a->dropout, q->shape)), v);
}

static int ref_att(const ac_case *c, double *const *in, double **ref)
{
    awl_tensor *q = ac_cpu_tensor(c, in, 2), *k = ac_cpu_tensor(c, in, 3),
               *v = ac_cpu_tensor(c, in, 4);
    int rc = ac_values(attention_of(&c->args, q, k, v), ref[0], ac_numel(4, c->op[0].shape));
    if (rc == 0)
        rc = ac_values(attention_lse(q, k, c->args.scale, c->args.flag), ref[1],
                       ac_numel(3, c->op[1].shape));
    return rc;
}

static int ref_att_bwd(const ac_case *c, double *const *in, double **ref)
{
    awl_tensor *inputs[3] = {leaf(c, in, 4), leaf(c, in, 5), leaf(c, in, 6)}, *grads[3];
    awl_tensor *out = attention_of(&c->args, inputs[0], inputs[1], inputs[2]);
    awl_backward_options opts = {.grad = ac_cpu_tensor(c, in, 3)};
    if (!out || awl_grad(out, 3, inputs, grads, &opts) < 0) return AWL_ERR_INVALID;
    int rc = 0;
    for (int i = 0; i < 3 && rc == 0; i++)
        rc = ac_values(grads[i], ref[i], ac_numel(4, c->op[i].shape));
    return rc;
}

/* out and lse: what the forward computes from q, k and v. */
static void init_att_bwd(const ac_case *c, double **in)
{
    awl_scope_begin();
    bool fused = awl_set_fused_kernels(false);
    awl_tensor *q = ac_cpu_tensor(c, in, 4), *k = ac_cpu_tensor(c, in, 5),
               *v = ac_cpu_tensor(c, in, 6);
    ac_values(attention_of(&c->args, q, k, v), in[7], ac_numel(4, c->op[7].shape));
    ac_values(attention_lse(q, k, c->args.scale, c->args.flag), in[8], ac_numel(3, c->op[8].shape));
    awl_set_fused_kernels(fused);
    awl_scope_end();
}

/* q, k or v (which) of a fused (B, T, 3, H, D) projection, as (B, H, T, D);
 * or a plain (B, H, T, D) tensor. */
static ac_operand heads(const char *name, ac_role role, awl_dtype dt, const int64_t *s, int which,
                        bool packed)
{
    ac_operand o = ac_operand_new(name, role, dt, 4, s, AC_CONTIG);
    if (!packed) return o;
    const int64_t B = s[0], H = s[1], T = s[2], D = s[3];
    (void)B;
    o.strides[0] = T * 3 * H * D;
    o.strides[1] = D;
    o.strides[2] = 3 * H * D;
    o.strides[3] = 1;
    o.offset = which * H * D;
    return o;
}

/* A (B, H, T, D) view transposing (B, T, H, D) memory: how attention's
 * output goes back to (B, T, C) without a copy. */
static ac_operand heads_transposed(const char *name, ac_role role, awl_dtype dt, const int64_t *s)
{
    ac_operand o = ac_operand_new(name, role, dt, 4, s, AC_CONTIG);
    o.strides[3] = 1;
    o.strides[1] = s[3];
    o.strides[2] = s[1] * s[3];
    o.strides[0] = s[1] * s[2] * s[3];
    return o;
}

static void attention_cases(ac_list *l)
{
    /* T = 200, D = 32: several query tiles, the last part empty, and D
     * padded to 64 in the tensor-core kernels; T = 80: an odd number of
     * 16-key blocks, so the CPU kernel's scratch rows have no padding, and
     * not a multiple of its AVX2 tiles' 6 rows; B H = 30: more heads than
     * a group of the tensor-core kernels' block order (24), the last group
     * short */
    static const int64_t shapes[][4] = {{2, 3, 7, 4},    {2, 2, 64, 16},   {1, 2, 37, 20},
                                        {2, 3, 100, 64}, {1, 2, 256, 128}, {1, 1, 130, 80},
                                        {1, 2, 200, 32}, {2, 2, 80, 32},   {5, 6, 130, 16}};
    /* dropout 0.3 from a stream starting at offset 5: with T = 7 and 37,
     * rows of weights start inside a Philox block */
    const awl_dropout_args drop = {0.3, 0x1234abcdull, 5};
    for (int t = 0; t < 3; t++)
        for (int s = 0; s < COUNT(shapes); s++)
            for (int causal = 0; causal < 2; causal++)
                for (int d = 0; d < 2; d++) {
                    awl_dtype dt = FLOATS[t];
                    const int64_t *sh = shapes[s], bht[3] = {sh[0], sh[1], sh[2]};
                    bool packed = s % 2 == 0;
                    if (d && s != 0 && s != 2 && s != 3 && s != 6)
                        continue; /* dropout: four shapes */
                    char layout[56];
                    snprintf(layout, sizeof layout, "%s%s%s", causal ? "causal" : "full",
                             packed ? ", packed qkv" : "", d ? ", dropout 0.3" : "");
                    ac_case f = ac_case_new(AWL_KERNEL_ATTENTION_FORWARD, "", dt, layout, call_att,
                                            ref_att);
                    f.args.flag = causal;
                    f.args.scale = 1 / sqrt((double)sh[3]);
                    if (d) f.args.dropout = drop;
                    f.tol = tol_of(dt, 1e-5, 3e-2);
                    ac_add(&f, heads_transposed("out", AC_OUT, dt, sh));
                    ac_add(&f, ac_operand_new("lse", AC_OUT, AWL_F32, 3, bht, AC_CONTIG));
                    const char *names[3] = {"q", "k", "v"};
                    for (int w = 0; w < 3; w++)
                        ac_add(&f, heads(names[w], AC_IN, dt, sh, w, packed));
                    ac_push(l, &f);
                    ac_case b = ac_case_new(AWL_KERNEL_ATTENTION_BACKWARD, "", dt, layout,
                                            call_att_bwd, ref_att_bwd);
                    b.args = f.args;
                    b.init = init_att_bwd;
                    b.tol = tol_of(dt, 1e-4, 8e-2);
                    const char *dnames[3] = {"dq", "dk", "dv"};
                    for (int w = 0; w < 3; w++)
                        ac_add(&b, heads(dnames[w], AC_OUT, dt, sh, w, packed));
                    ac_add(&b, heads_transposed("dout", AC_IN, dt, sh));
                    for (int w = 0; w < 3; w++)
                        ac_add(&b, heads(names[w], AC_IN, dt, sh, w, packed));
                    ac_add(&b, heads_transposed("out", AC_IN, dt, sh));
                    ac_add(&b, ac_operand_new("lse", AC_IN, AWL_F32, 3, bht, AC_CONTIG));
                    ac_push(l, &b);
                }
}

/* ---- dropout ------------------------------------------------------------------------------------
 */

/* out, in */
static int call_dropout(const awl_backend *b, awl_view *const *v, const ac_args *a)
{
    return b->dropout(v[0], v[1], &a->dropout);
}

/* out = in * M, M = 1 / (1 - p) rounded to the dtype where common/dropout.h
 * keeps element e of out (row-major), else 0. */
static int ref_dropout(const ac_case *c, double *const *in, double **ref)
{
    const awl_dropout_args *d = &c->args.dropout;
    const uint32_t threshold = awl_dropout_threshold(d->p);
    const double scale = ac_round(c->dtype, awl_dropout_scale(d->p));
    int64_t n = ac_numel(c->op[0].ndim, c->op[0].shape);
    for (int64_t e = 0; e < n; e++)
        ref[0][e] =
            awl_dropout_keep(d->seed, d->offset, (uint64_t)e, threshold) ? in[1][e] * scale : 0.0;
    return 0;
}

static void dropout_cases(ac_list *l)
{
    static const int64_t shapes[][2] = {{1, 37}, {300, 129}, {64, 384}};
    static const ac_layout layouts[] = {AC_CONTIG, AC_TRANSPOSED, AC_BCAST0};
    static const char *const names[] = {"contiguous", "transposed in", "broadcast in"};
    /* p = 0.3 from a stream starting at an odd offset */
    const awl_dropout_args d = {0.3, 0x9e3779b97f4a7c15ull, 7};
    for (int t = 0; t < 3; t++)
        for (int s = 0; s < COUNT(shapes); s++) {
            awl_dtype dt = FLOATS[t];
            ac_case c =
                ac_case_new(AWL_KERNEL_DROPOUT, "", dt, names[s], call_dropout, ref_dropout);
            c.args.dropout = d;
            c.tol = tol_of(dt, 1e-6, 0);
            ac_add(&c, ac_operand_new("out", AC_OUT, dt, 2, shapes[s], AC_CONTIG));
            ac_add(&c, ac_operand_new("in", AC_IN, dt, 2, shapes[s], layouts[s]));
            ac_push(l, &c);
        }
}

/* out, x, h */
static int call_dropout_add(const awl_backend *b, awl_view *const *v, const ac_args *a)
{
    return b->dropout_add(v[0], v[1], v[2], a->dropout.p > 0 ? &a->dropout : NULL);
}

/* sum = x + h M over n elements (M as in ref_dropout, 1 without dropout),
 * each rounded to dt: dropout_add's values, and the sum that
 * dropout_add_layernorm normalises. */
static void dropout_add_values(const awl_dropout_args *d, awl_dtype dt, int64_t n, const double *x,
                               const double *h, double *sum)
{
    const uint32_t threshold = awl_dropout_threshold(d->p);
    const double scale = ac_round(dt, d->p > 0 ? awl_dropout_scale(d->p) : 1.0);
    for (int64_t e = 0; e < n; e++) {
        bool keep = d->p == 0 || awl_dropout_keep(d->seed, d->offset, (uint64_t)e, threshold);
        sum[e] = ac_round(dt, x[e] + (keep ? h[e] * scale : 0.0));
    }
}

/* out = x + h M, in out's dtype. */
static int ref_dropout_add(const ac_case *c, double *const *in, double **ref)
{
    dropout_add_values(&c->args.dropout, c->dtype, ac_numel(c->op[0].ndim, c->op[0].shape), in[1],
                       in[2], ref[0]);
    return 0;
}

/* Each float dtype with and without dropout, and a bfloat16 branch into a
 * float32 stream (autocast's residual additions). */
static void dropout_add_cases(ac_list *l)
{
    static const int64_t shapes[][2] = {{1, 37}, {5, 77}, {64, 384}};
    const awl_dropout_args d = {0.3, 0x9e3779b97f4a7c15ull, 7};
    for (int t = 0; t < 4; t++)
        for (int s = 0; s < COUNT(shapes); s++)
            for (int drop = 0; drop < 2; drop++) {
                awl_dtype dt = t < 3 ? FLOATS[t] : AWL_F32, ht = t < 3 ? dt : AWL_BF16;
                char name[64];
                snprintf(name, sizeof name, "%s%s", drop ? "dropout 0.3" : "no dropout",
                         t == 3 ? ", bf16 h" : "");
                ac_case c = ac_case_new(AWL_KERNEL_DROPOUT_ADD, "", dt, name, call_dropout_add,
                                        ref_dropout_add);
                if (drop) c.args.dropout = d;
                c.tol = tol_of(dt, 1e-6, 1e-2);
                ac_add(&c, ac_operand_new("out", AC_OUT, dt, 2, shapes[s], AC_CONTIG));
                ac_add(&c, ac_operand_new("x", AC_IN, dt, 2, shapes[s], AC_CONTIG));
                ac_add(&c, ac_operand_new("h", AC_IN, ht, 2, shapes[s], AC_CONTIG));
                ac_push(l, &c);
            }
}

/* sum, out, mean, rstd, x, h, weight, bias */
static int call_dropout_add_ln(const awl_backend *b, awl_view *const *v, const ac_args *a)
{
    return b->dropout_add_layernorm(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], a->eps,
                                    a->dropout.p > 0 ? &a->dropout : NULL);
}

/* sum = x + h M in float32 (dropout_add_values), then the LayerNorm of
 * that float32 sum (as ref_ln). */
static int ref_dropout_add_ln(const ac_case *c, double *const *in, double **ref)
{
    int64_t n = ac_numel(c->op[0].ndim, c->op[0].shape), rows = c->op[0].shape[0];
    dropout_add_values(&c->args.dropout, AWL_F32, n, in[4], in[5], ref[0]);
    awl_tensor *sum = awl_from_data(ref[0], c->op[0].ndim, c->op[0].shape, AWL_F64, "cpu");
    awl_tensor *mean, *rstd;
    ln_stats(sum, &mean, &rstd);
    int rc = ac_values(
        awl_layer_norm(sum, ac_cpu_tensor(c, in, 6), ac_cpu_tensor(c, in, 7), LN_EPS), ref[1], n);
    if (rc == 0) rc = ac_values(mean, ref[2], rows);
    if (rc == 0) rc = ac_values(rstd, ref[3], rows);
    return rc;
}

/* A block's first residual addition and ln_2 (awl_dropout_add_layer_norm_to):
 * with and without dropout, a float32 or a bfloat16 branch h and output. */
static void dropout_add_ln_cases(ac_list *l)
{
    static const int64_t shapes[][2] = {{37, 64}, {300, 768}, {5, 40}};
    const awl_dropout_args d = {0.3, 0x9e3779b97f4a7c15ull, 7};
    for (int s = 0; s < COUNT(shapes); s++)
        for (int bf = 0; bf < 2; bf++)
            for (int drop = 0; drop < 2; drop++) {
                awl_dtype ht = bf ? AWL_BF16 : AWL_F32;
                char name[64];
                snprintf(name, sizeof name, "%s%s", drop ? "dropout 0.3" : "no dropout",
                         bf ? ", bf16 h and out" : "");
                /* named by the branch's dtype, as dropout_add's cases */
                ac_case c = ac_case_new(AWL_KERNEL_DROPOUT_ADD_LAYERNORM, "", ht, name,
                                        call_dropout_add_ln, ref_dropout_add_ln);
                if (drop) c.args.dropout = d;
                c.args.eps = LN_EPS;
                c.tol = 2e-5;
                int64_t rows[1] = {shapes[s][0]}, C[1] = {shapes[s][1]};
                ac_add(&c, ac_operand_new("sum", AC_OUT, AWL_F32, 2, shapes[s], AC_CONTIG));
                ac_operand out = ac_operand_new("out", AC_OUT, ht, 2, shapes[s], AC_CONTIG);
                out.tol = tol_of(ht, 0, 1e-2);
                ac_add(&c, out);
                ac_add(&c, ac_operand_new("mean", AC_OUT, AWL_F32, 1, rows, AC_CONTIG));
                ac_add(&c, ac_operand_new("rstd", AC_OUT, AWL_F32, 1, rows, AC_CONTIG));
                ac_add(&c, ac_operand_new("x", AC_IN, AWL_F32, 2, shapes[s], AC_CONTIG));
                ac_add(&c, ac_operand_new("h", AC_IN, ht, 2, shapes[s], AC_CONTIG));
                ac_add(&c, ac_operand_new("weight", AC_IN, AWL_F32, 1, C, AC_CONTIG));
                ac_add(&c, ac_operand_new("bias", AC_IN, AWL_F32, 1, C, AC_CONTIG));
                ac_push(l, &c);
            }
}

/* out, x, h */
static int call_add_dropout(const awl_backend *b, awl_view *const *v, const ac_args *a)
{
    return b->add_dropout(v[0], v[1], v[2], &a->dropout);
}

/* out = (x + h, h repeating over x's rows) M, M as in ref_dropout; the sum
 * rounded to the dtype first, as the composed addition rounds it. */
static int ref_add_dropout(const ac_case *c, double *const *in, double **ref)
{
    const awl_dropout_args *d = &c->args.dropout;
    const uint32_t threshold = awl_dropout_threshold(d->p);
    double scale = awl_dropout_scale(d->p);
    int64_t n = ac_numel(c->op[0].ndim, c->op[0].shape),
            nh = ac_numel(c->op[2].ndim, c->op[2].shape);
    for (int64_t e = 0; e < n; e++) {
        const double sum = ac_round(c->dtype, in[1][e] + in[2][e % nh]);
        ref[0][e] =
            awl_dropout_keep(d->seed, d->offset, (uint64_t)e, threshold) ? sum * scale : 0.0;
    }
    return 0;
}

/* Each float dtype: h one row repeated over x's rows, and h of x's shape. */
static void add_dropout_cases(ac_list *l)
{
    static const int64_t shapes[][2] = {{3, 37}, {5, 77}, {64, 384}};
    const awl_dropout_args d = {0.2, 0x9e3779b97f4a7c15ull, 11};
    for (int t = 0; t < 3; t++)
        for (int s = 0; s < COUNT(shapes); s++)
            for (int whole = 0; whole < 2; whole++) {
                awl_dtype dt = FLOATS[t];
                const int64_t row[1] = {shapes[s][1]};
                ac_case c = ac_case_new(AWL_KERNEL_ADD_DROPOUT, "", dt,
                                        whole ? "dropout 0.2, h of x's shape"
                                              : "dropout 0.2, h a repeated row",
                                        call_add_dropout, ref_add_dropout);
                c.args.dropout = d;
                c.tol = tol_of(dt, 1e-6, 1e-2);
                ac_add(&c, ac_operand_new("out", AC_OUT, dt, 2, shapes[s], AC_CONTIG));
                ac_add(&c, ac_operand_new("x", AC_IN, dt, 2, shapes[s], AC_CONTIG));
                ac_add(&c, whole ? ac_operand_new("h", AC_IN, dt, 2, shapes[s], AC_CONTIG)
                                 : ac_operand_new("h", AC_IN, dt, 1, row, AC_CONTIG));
                ac_push(l, &c);
            }
}

/* ---- matmul with a bias, GELU backward, AdamW --------------------------------------------------
 */

/* out, a, b, bias */
static int call_matmul_bias(const awl_backend *b, awl_view *const *v, const ac_args *a)
{
    (void)a;
    return b->matmul_bias(v[0], v[1], v[2], v[3]);
}

static int ref_matmul_bias(const ac_case *c, double *const *in, double **ref)
{
    awl_tensor *y = awl_add(awl_matmul(ac_cpu_tensor(c, in, 1), ac_cpu_tensor(c, in, 2)),
                            ac_cpu_tensor(c, in, 3));
    return ac_values(y, ref[0], ac_numel(2, c->op[0].shape));
}

/* out, pre, a, b, then the bias when a->count is 1: pre = a @ b (+ bias),
 * out = gelu(pre) */
static int call_matmul_bias_gelu(const awl_backend *b, awl_view *const *v, const ac_args *a)
{
    return b->matmul_bias_gelu(v[0], v[1], v[2], v[3], a->count ? v[4] : NULL);
}

static int ref_matmul_bias_gelu(const ac_case *c, double *const *in, double **ref)
{
    awl_tensor *pre = awl_matmul(ac_cpu_tensor(c, in, 2), ac_cpu_tensor(c, in, 3));
    if (c->args.count) pre = awl_add(pre, ac_cpu_tensor(c, in, 4));
    int64_t n = ac_numel(2, c->op[0].shape);
    int status = ac_values(pre, ref[1], n);
    return status < 0 ? status : ac_values(awl_gelu(pre), ref[0], n);
}

/* out, a, b, pre: out = (a @ b) * gelu'(pre) */
static int call_matmul_gelu_bwd(const awl_backend *b, awl_view *const *v, const ac_args *a)
{
    (void)a;
    return b->matmul_gelu_backward(v[0], v[1], v[2], v[3]);
}

static int ref_matmul_gelu_bwd(const ac_case *c, double *const *in, double **ref)
{
    awl_tensor *slope = awl_tensor_unary(AWL_UNARY_GELU_GRAD, ac_cpu_tensor(c, in, 3), 0);
    awl_tensor *y = awl_mul(awl_matmul(ac_cpu_tensor(c, in, 1), ac_cpu_tensor(c, in, 2)), slope);
    return ac_values(y, ref[0], ac_numel(2, c->op[0].shape));
}

/* A Transformer MLP's two GELU products (awl_mlp): the first with its bias
 * and without, b read through a weight's transpose; the backward's dy @ W2
 * scaled by gelu'(pre). */
static void mlp_cases(ac_list *l)
{
    static const int64_t h2[2] = {300, 96}, x2[2] = {300, 48}, w2[2] = {48, 96}, bias[1] = {96};
    for (int t = 0; t < 3; t++)
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            awl_dtype dt = FLOATS[t];
            ac_case c = ac_case_new(AWL_KERNEL_MATMUL_BIAS_GELU, "", dt,
                                    with_bias ? "an MLP's first product, bias"
                                              : "an MLP's first product, no bias",
                                    call_matmul_bias_gelu, ref_matmul_bias_gelu);
            c.tol = tol_of(dt, 1e-5, 2e-2);
            c.args.count = with_bias;
            ac_add(&c, ac_operand_new("out", AC_OUT, dt, 2, h2, AC_CONTIG));
            ac_add(&c, ac_operand_new("pre", AC_OUT, dt, 2, h2, AC_CONTIG));
            ac_add(&c, ac_operand_new("a", AC_IN, dt, 2, x2, AC_CONTIG));
            ac_add(&c, ac_operand_new("b", AC_IN, dt, 2, w2, AC_TRANSPOSED));
            if (with_bias) ac_add(&c, ac_operand_new("bias", AC_IN, dt, 1, bias, AC_CONTIG));
            ac_push(l, &c);
        }
    static const int64_t dy2[2] = {300, 48}, w2t[2] = {48, 96};
    for (int t = 0; t < 3; t++) {
        awl_dtype dt = FLOATS[t];
        ac_case c =
            ac_case_new(AWL_KERNEL_MATMUL_GELU_BACKWARD, "", dt, "dpre = (dy @ W2) * gelu'(pre)",
                        call_matmul_gelu_bwd, ref_matmul_gelu_bwd);
        c.tol = tol_of(dt, 1e-5, 2e-2);
        ac_add(&c, ac_operand_new("out", AC_OUT, dt, 2, h2, AC_CONTIG));
        ac_add(&c, ac_operand_new("a", AC_IN, dt, 2, dy2, AC_CONTIG));
        ac_add(&c, ac_operand_new("b", AC_IN, dt, 2, w2t, AC_CONTIG));
        ac_add(&c, ac_operand_new("pre", AC_IN, dt, 2, h2, AC_CONTIG));
        ac_push(l, &c);
    }
}

/* dx, dy, x */
static int call_gelu_bwd(const awl_backend *b, awl_view *const *v, const ac_args *a)
{
    (void)a;
    return b->gelu_backward(v[0], v[1], v[2]);
}

/* dx = dy * gelu'(x), as autograd composes it. */
static int ref_gelu_bwd(const ac_case *c, double *const *in, double **ref)
{
    awl_tensor *slope = awl_tensor_unary(AWL_UNARY_GELU_GRAD, ac_cpu_tensor(c, in, 2), 0);
    return ac_values(awl_mul(ac_cpu_tensor(c, in, 1), slope), ref[0],
                     ac_numel(c->op[0].ndim, c->op[0].shape));
}

/* params, grads, m, v of a->count tensors: operands 4i .. 4i + 3; with
 * `stride` 5, each parameter's bfloat16 copy (awl_adamw_args.casts) is
 * operand 5i + 4. */
static int adamw_with(const awl_backend *b, awl_view *const *v, const ac_args *a, int stride)
{
    awl_view p[4], g[4], m[4], s[4], c[4];
    for (int i = 0; i < a->count; i++) {
        p[i] = *v[stride * i];
        g[i] = *v[stride * i + 1];
        m[i] = *v[stride * i + 2];
        s[i] = *v[stride * i + 3];
        if (stride == 5) c[i] = *v[stride * i + 4];
    }
    awl_adamw_args args = a->adam;
    args.casts = stride == 5 ? c : NULL;
    return b->adamw_step(a->count, p, g, m, s, a->wd, &args);
}

static int call_adamw(const awl_backend *b, awl_view *const *v, const ac_args *a)
{
    return adamw_with(b, v, a, 4);
}

/* A backend may decline the copies (unsupported); one that takes the call
 * must write them. */
static int call_adamw_casts(const awl_backend *b, awl_view *const *v, const ac_args *a)
{
    return adamw_with(b, v, a, 5);
}

/* PyTorch's AdamW, in float64, on the gradient scaled in float32 (as
 * clip_grad_norm_ scales it: the exact product of two floats, rounded);
 * operands as adamw_with's, a copy's reference the new parameter. */
static void adamw_reference(const ac_case *c, int stride, double *const *in, double **ref)
{
    const awl_adamw_args *a = &c->args.adam;
    double bc1 = 1 - pow(a->beta1, (double)a->step), bc2 = 1 - pow(a->beta2, (double)a->step);
    for (int i = 0; i < c->args.count; i++) {
        const int o = stride * i;
        int64_t n = ac_numel(c->op[o].ndim, c->op[o].shape);
        for (int64_t e = 0; e < n; e++) {
            double p = in[o][e], g = (float)(in[o + 1][e] * a->grad_scale);
            double m = a->beta1 * in[o + 2][e] + (1 - a->beta1) * g;
            double v = a->beta2 * in[o + 3][e] + (1 - a->beta2) * g * g;
            p *= 1 - (double)a->lr * c->args.wd[i];
            p -= a->lr / bc1 * m / (sqrt(v / bc2) + a->eps);
            ref[o][e] = p;
            ref[o + 2][e] = m;
            ref[o + 3][e] = v;
            if (stride == 5) ref[o + 4][e] = p;
        }
    }
}

static int ref_adamw(const ac_case *c, double *const *in, double **ref)
{
    adamw_reference(c, 4, in, ref);
    return 0;
}

static int ref_adamw_casts(const ac_case *c, double *const *in, double **ref)
{
    adamw_reference(c, 5, in, ref);
    return 0;
}

/* a->count tensors (operands 0 .. count - 1), then the float64 scalar out. */
static int call_sum_squares(const awl_backend *b, awl_view *const *v, const ac_args *a)
{
    awl_view xs[AC_MAX_OPERANDS];
    for (int i = 0; i < a->count; i++) xs[i] = *v[i];
    return b->sum_squares(a->count, xs, v[a->count]);
}

static int ref_sum_squares(const ac_case *c, double *const *in, double **ref)
{
    double s = 0;
    for (int i = 0; i < c->args.count; i++)
        for (int64_t e = 0; e < ac_numel(c->op[i].ndim, c->op[i].shape); e++)
            s += in[i][e] * in[i][e];
    ref[c->args.count][0] = s;
    return 0;
}

/* a->count tensors scaled in place by a->alpha. */
static int call_scale(const awl_backend *b, awl_view *const *v, const ac_args *a)
{
    awl_view xs[AC_MAX_OPERANDS];
    for (int i = 0; i < a->count; i++) xs[i] = *v[i];
    return b->scale(a->count, xs, a->alpha);
}

static int ref_scale(const ac_case *c, double *const *in, double **ref)
{
    const double f = (float)c->args.alpha; /* the kernel's factor is float32 */
    for (int i = 0; i < c->args.count; i++)
        for (int64_t e = 0; e < ac_numel(c->op[i].ndim, c->op[i].shape); e++)
            ref[i][e] = in[i][e] * f;
    return 0;
}

/* Gradient clipping's kernels over tensors of mixed sizes: one element, a
 * bias, a block's worth and more, one read from 5 elements into its storage
 * (unaligned for 16-byte loads). */
static void clipping_cases(ac_list *l)
{
    static const int64_t sizes[5][1] = {{1}, {768}, {40003}, {70001}, {16384}};
    static const int64_t one[1] = {1};
    for (int k = 0; k < 2; k++) {
        ac_case c =
            k == 0 ? ac_case_new(AWL_KERNEL_SUM_SQUARES, "", AWL_F32, "5 tensors", call_sum_squares,
                                 ref_sum_squares)
                   : ac_case_new(AWL_KERNEL_SCALE, "", AWL_F32, "5 tensors", call_scale, ref_scale);
        c.args.count = 5;
        c.args.alpha = 0.3;
        for (int i = 0; i < 5; i++)
            ac_add(&c, ac_operand_new("x", k == 0 ? AC_IN : AC_INOUT, AWL_F32, 1, sizes[i],
                                      i == 3 ? AC_OFFSET : AC_CONTIG));
        if (k == 0) ac_add(&c, ac_operand_new("out", AC_OUT, AWL_F64, 1, one, AC_CONTIG));
        ac_push(l, &c);
    }
}

/* count bfloat16 outputs (operands 0 .. count - 1), then their float32
 * inputs. */
static int call_cast_many(const awl_backend *b, awl_view *const *v, const ac_args *a)
{
    awl_view outs[AC_MAX_OPERANDS], xs[AC_MAX_OPERANDS];
    for (int i = 0; i < a->count; i++) outs[i] = *v[i], xs[i] = *v[a->count + i];
    return b->cast_many(a->count, outs, xs);
}

static int ref_cast_many(const ac_case *c, double *const *in, double **ref)
{
    for (int i = 0; i < c->args.count; i++)
        for (int64_t e = 0; e < ac_numel(c->op[i].ndim, c->op[i].shape); e++)
            ref[i][e] = in[c->args.count + i][e];
    return 0;
}

/* Autocast's weight casts: float32 tensors of the clipping cases' sizes to
 * bfloat16, one of each pair 5 elements into its storage. */
static void cast_many_cases(ac_list *l)
{
    static const int64_t sizes[4][1] = {{1}, {768}, {40003}, {16384}};
    ac_case c = ac_case_new(AWL_KERNEL_CAST_MANY, "", AWL_BF16, "4 tensors from float32",
                            call_cast_many, ref_cast_many);
    c.args.count = 4;
    c.tol = tol_of(AWL_BF16, 0, 1e-2);
    for (int i = 0; i < 4; i++)
        ac_add(&c, ac_operand_new("out", AC_OUT, AWL_BF16, 1, sizes[i], AC_CONTIG));
    for (int i = 0; i < 4; i++)
        ac_add(&c,
               ac_operand_new("x", AC_IN, AWL_F32, 1, sizes[i], i == 2 ? AC_OFFSET : AC_CONTIG));
    ac_push(l, &c);
}

/* An input of shape (cols, rows) read through the transpose of a contiguous
 * (rows, cols) buffer: a weight (out, in) as x @ w^T reads it, or a
 * gradient dY as dY^T X does. */
static ac_operand transposed(const char *name, awl_dtype dt, int64_t rows, int64_t cols)
{
    const int64_t shape[2] = {rows, cols};
    ac_operand o = ac_operand_new(name, AC_IN, dt, 2, shape, AC_CONTIG);
    o.shape[0] = cols, o.shape[1] = rows, o.strides[0] = 1, o.strides[1] = cols;
    return o;
}

/* out (M, N) = a (M, K) @ b (K, N) + bias, b read through the transpose of a
 * (N, K) weight, as a linear layer does. */
static void linear_case(ac_list *l, awl_dtype dt, int64_t M, int64_t K, int64_t N, const char *what)
{
    const int64_t o2[2] = {M, N}, a2[2] = {M, K}, bias[1] = {N};
    ac_case c =
        ac_case_new(AWL_KERNEL_MATMUL_BIAS, "", dt, what, call_matmul_bias, ref_matmul_bias);
    c.tol = tol_of(dt, 1e-5, 1e-2);
    ac_add(&c, ac_operand_new("out", AC_OUT, dt, 2, o2, AC_CONTIG));
    ac_add(&c, ac_operand_new("a", AC_IN, dt, 2, a2, AC_CONTIG));
    ac_add(&c, transposed("b", dt, N, K));
    ac_add(&c, ac_operand_new("bias", AC_IN, dt, 1, bias, AC_CONTIG));
    ac_push(l, &c);
}

/* out (float32), [a_row_sums (float32),] a, b (bfloat16); args.count: 1
 * with the row sums */
static int call_matmul_wide(const awl_backend *b, awl_view *const *v, const ac_args *a)
{
    return a->count ? b->matmul_wide(v[0], v[1], v[2], v[3])
                    : b->matmul_wide(v[0], NULL, v[1], v[2]);
}

static int ref_matmul_wide(const ac_case *c, double *const *in, double **ref)
{
    int ia = c->args.count ? 2 : 1;
    awl_tensor *a = ac_cpu_tensor(c, in, ia);
    int status =
        ac_values(awl_matmul(a, ac_cpu_tensor(c, in, ia + 1)), ref[0], ac_numel(2, c->op[0].shape));
    if (status < 0 || !c->args.count) return status;
    return ac_values(awl_sum(a, AWL_DIMS(1), false), ref[1], a->shape[0]);
}

/* A weight's gradient under autocast: out (N, K) float32 = dY^T (N, M) @ X
 * (M, K), dY^T read through the transpose of a (M, N) gradient; where
 * with_sums, the bias's gradient too, dY^T's row sums (N). The float32
 * outputs hold the exact sums to float32 accuracy, not bfloat16's. */
static void matmul_wide_case(ac_list *l, int64_t M, int64_t K, int64_t N, bool with_sums)
{
    const int64_t o2[2] = {N, K}, x2[2] = {M, K}, n1[1] = {N};
    ac_case c = ac_case_new(AWL_KERNEL_MATMUL_WIDE, "", AWL_BF16,
                            with_sums ? "a linear layer's weight and bias gradients, float32 out"
                                      : "a weight's gradient dY^T X, float32 out",
                            call_matmul_wide, ref_matmul_wide);
    c.tol = 1e-5;
    c.args.count = with_sums;
    ac_add(&c, ac_operand_new("out", AC_OUT, AWL_F32, 2, o2, AC_CONTIG));
    if (with_sums) ac_add(&c, ac_operand_new("a_row_sums", AC_OUT, AWL_F32, 1, n1, AC_CONTIG));
    ac_add(&c, transposed("a", AWL_BF16, M, N));
    ac_add(&c, ac_operand_new("b", AC_IN, AWL_BF16, 2, x2, AC_CONTIG));
    ac_push(l, &c);
}

static void other_cases(ac_list *l)
{
    matmul_wide_case(l, 300, 48, 96, false);
    matmul_wide_case(l, 300, 48, 96, true);
    /* the bias gradient over several blocks of columns (the last one part
     * full) and chunks of rows, and with a width (100) that is no multiple of
     * 8 (CUDA: column_sums declines, cuBLASLt's epilogue sums) */
    matmul_wide_case(l, 2000, 40, 264, true);
    matmul_wide_case(l, 300, 48, 100, true);
    for (int t = 0; t < 3; t++) linear_case(l, FLOATS[t], 300, 48, 96, "a linear layer's weight^T");
    /* sides the CUDA backend's float32 tensor-core kernel takes (M and N
     * multiples of 128, K of 32) */
    linear_case(l, AWL_F32, 256, 96, 128, "a linear layer's weight^T, 256x96x128");
    static const int64_t sizes[2][1] = {{37}, {50000}};
    for (int t = 0; t < 3; t++)
        for (int s = 0; s < 2; s++) {
            awl_dtype dt = FLOATS[t];
            ac_case c = ac_case_new(AWL_KERNEL_GELU_BACKWARD, "", dt, s ? "large" : "contiguous",
                                    call_gelu_bwd, ref_gelu_bwd);
            c.tol = tol_of(dt, 1e-5, 2e-2);
            ac_add(&c, ac_operand_new("dx", AC_OUT, dt, 1, sizes[s], AC_CONTIG));
            ac_add(&c, ac_operand_new("dy", AC_IN, dt, 1, sizes[s], AC_CONTIG));
            ac_add(&c, ac_operand_new("x", AC_IN, dt, 1, sizes[s], AC_CONTIG));
            ac_push(l, &c);
        }
    static const int64_t psizes[3][1] = {{5}, {1000}, {40003}};
    /* without a gradient scale, and with a clipping factor applied as the
     * gradients are read */
    static const float grad_scales[2] = {1.0f, 0.37f};
    /* the third also writes each parameter's bfloat16 copy (bfloat16's
     * tolerance then covers the case) */
    static const char *const adamw_names[3] = {"3 tensors, step 3",
                                               "3 tensors, step 3, grads x 0.37",
                                               "3 tensors, step 3, bfloat16 copies"};
    for (int s = 0; s < 3; s++) {
        const bool casts = s == 2;
        ac_case c =
            ac_case_new(AWL_KERNEL_ADAMW_STEP, "", AWL_F32, adamw_names[s],
                        casts ? call_adamw_casts : call_adamw, casts ? ref_adamw_casts : ref_adamw);
        c.args.count = 3;
        c.args.adam = (awl_adamw_args){.lr = 1e-2f,
                                       .beta1 = 0.9f,
                                       .beta2 = 0.95f,
                                       .eps = 1e-8f,
                                       .step = 3,
                                       .grad_scale = grad_scales[s % 2]};
        c.args.wd[0] = 0.1f, c.args.wd[1] = 0.0f, c.args.wd[2] = 0.1f;
        if (casts) c.tol = tol_of(AWL_BF16, 0, 1e-2);
        const char *names[4] = {"param", "grad", "exp_avg", "exp_avg_sq"};
        for (int i = 0; i < 3; i++) {
            for (int k = 0; k < 4; k++) {
                ac_operand o = ac_operand_new(names[k], k == 1 ? AC_IN : AC_INOUT, AWL_F32, 1,
                                              psizes[i], AC_CONTIG);
                ac_add(&c, k == 3 ? ac_domain(o, AWL_DOMAIN_POSITIVE) : o);
            }
            if (casts)
                ac_add(&c, ac_operand_new("cast", AC_OUT, AWL_BF16, 1, psizes[i], AC_CONTIG));
        }
        ac_push(l, &c);
    }
    clipping_cases(l);
    cast_many_cases(l);
    mlp_cases(l);
}

void ac_fused_cases(ac_list *l)
{
    softmax_cases(l);
    layernorm_cases(l);
    cross_entropy_cases(l);
    attention_cases(l);
    dropout_cases(l);
    dropout_add_cases(l);
    dropout_add_ln_cases(l);
    add_dropout_cases(l);
    other_cases(l);
}
