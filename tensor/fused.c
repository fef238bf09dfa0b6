/*
 * tensor/fused.c - the optional fused kernels, at the level of tensors.
 *
 * Every fused kernel of backends/backend.h has an entry point here, and
 * these are the only calls to them: nn/ and autograd/ ask
 * awl_fused_available() whether a kernel can run, call the entry point, and
 * compose the same computation from ordinary ops when it answers
 * AWL_ERR_UNSUPPORTED. That status, returned without a message, means one
 * of: fused kernels are switched off (awl_set_fused_kernels), the device's
 * backend lacks the kernel or declares the dtype unsupported (its
 * `supports`), a tensor is not laid out as the kernel reads it, or the
 * kernel itself declined. Any other failure is recorded with a message.
 *
 * Each entry point checks the contract its backend.h comment states (one
 * device, the dtypes, the shapes), so a kernel may assume it, then builds
 * the kernel's views: a contiguous (..., C) tensor is handed over as
 * (rows, C), a vector of n elements along one axis as (n) with its stride.
 */
#include "tensor/tensor_internal.h"

#include <stdlib.h>
#include <string.h>

bool awl_fused_available(awl_kernel kernel, const awl_tensor *like)
{
    return like && awl_fused_kernels_enabled() &&
           awl_backend_supports(awl_tensor_backend(like), kernel, 0, like->dtype);
}

/* ---- contract checks -------------------------------------------------------------- */

/* AWL_OK when every tensor of ts[0..n) (NULL entries skipped) lives on the
 * device of ts[0]. */
static int check_devices(const char *op, int n, awl_tensor *const *ts)
{
    for (int i = 1; i < n; i++)
        if (ts[i] && awl_check_same_device(op, ts[0], ts[i]) < 0) return AWL_ERR_INVALID;
    return AWL_OK;
}

static int check_dtype(const char *op, const char *what, const awl_tensor *t, awl_dtype dtype)
{
    if (!t || t->dtype == dtype) return AWL_OK;
    return awl_error(AWL_ERR_INVALID, "%s: %s is %s, expected %s", op, what,
                     awl_dtype_name(t->dtype), awl_dtype_name(dtype));
}

/* A LayerNorm's out (forward) or dy (backward): x's dtype, or bfloat16 for a
 * float32 x (autocast: the LayerNorm feeds a matmul). */
static int check_ln_dtype(const char *op, const char *what, const awl_tensor *t,
                          const awl_tensor *x)
{
    if (t->dtype == x->dtype || (x->dtype == AWL_F32 && t->dtype == AWL_BF16)) return AWL_OK;
    return awl_error(AWL_ERR_INVALID, "%s: %s is %s, expected %s (or bfloat16 for a float32 x)", op,
                     what, awl_dtype_name(t->dtype), awl_dtype_name(x->dtype));
}

static int check_numel(const char *op, const char *what, const awl_tensor *t, int64_t n)
{
    if (!t || awl_numel(t) == n) return AWL_OK;
    char s[160];
    return awl_error(AWL_ERR_INVALID, "%s: %s has shape %s, expected %lld elements", op, what,
                     awl_shape_str(t, s, sizeof s), (long long)n);
}

static int check_shape(const char *op, const char *what, const awl_tensor *t,
                       const awl_tensor *like)
{
    if (!t || awl_same_shape(t, like)) return AWL_OK;
    char s1[160], s2[160];
    return awl_error(AWL_ERR_INVALID, "%s: %s has shape %s, expected %s", op, what,
                     awl_shape_str(t, s1, sizeof s1), awl_shape_str(like, s2, sizeof s2));
}

/* A status from a kernel: UNSUPPORTED passes through silently, a failure
 * without a message gets one naming op. */
static int kernel_status(const char *op, int status)
{
    return status == AWL_ERR_UNSUPPORTED ? status : awl_backend_status(op, status);
}

/* ---- kernel views ------------------------------------------------------------------ */

/* The last axis of t (1 for a 0-d tensor). */
static int64_t last_dim(const awl_tensor *t) { return t->ndim ? t->shape[t->ndim - 1] : 1; }

/* A contiguous t as (rows, n), n its last axis. */
static awl_view rows_view(const awl_tensor *t)
{
    awl_view v = awl_tensor_view(t);
    int64_t n = last_dim(t);
    v.ndim = 2;
    v.shape[0] = n ? awl_numel(t) / n : 0;
    v.shape[1] = n;
    v.strides[0] = n;
    v.strides[1] = 1;
    return v;
}

/* t as a vector of its elements, when they are evenly spaced in memory (one
 * stride, 0 included: a contiguous tensor of any shape, a strided 1-D
 * view, a broadcast); false otherwise. */
static bool vector_view(const awl_tensor *t, awl_view *out)
{
    awl_view v = awl_tensor_view(t);
    int64_t stride = 1, next = 0; /* the stride the next outer axis must have */
    bool first = true;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] == 1) continue;
        if (first)
            stride = t->strides[d];
        else if (t->strides[d] != next)
            return false;
        first = false;
        next = t->strides[d] * t->shape[d];
    }
    v.ndim = 1;
    v.shape[0] = awl_numel(t);
    v.strides[0] = stride;
    *out = v;
    return true;
}

/* ---- softmax ------------------------------------------------------------------------- */

int awl_tensor_softmax_forward(awl_tensor *out, awl_tensor *x, bool log)
{
    const char *op = "awl_tensor_softmax_forward";
    if (!out || !x) return AWL_ERR_INVALID;
    if (check_devices(op, 2, (awl_tensor *[]){x, out}) < 0 || check_shape(op, "out", out, x) < 0 ||
        check_dtype(op, "out", out, x->dtype) < 0)
        return AWL_ERR_INVALID;
    if (!awl_fused_available(AWL_KERNEL_SOFTMAX_FORWARD, x) || !awl_is_contiguous(x) ||
        !awl_is_contiguous(out) || awl_numel(x) == 0)
        return AWL_ERR_UNSUPPORTED;
    awl_view vo = rows_view(out), vx = rows_view(x);
    awl_trace k;
    AWL_TRACE_BEGIN(&k, "softmax_forward", x, AWL_WORK(OUTPUT, 5), 1, 2,
                    (const awl_view *[]){&vo, &vx});
    return kernel_status(op,
                         awl_trace_end(&k, awl_tensor_backend(x)->softmax_forward(&vo, &vx, log)));
}

int awl_tensor_softmax_backward(awl_tensor *dx, awl_tensor *dy, awl_tensor *y, bool log)
{
    const char *op = "awl_tensor_softmax_backward";
    if (!dx || !dy || !y) return AWL_ERR_INVALID;
    if (check_devices(op, 3, (awl_tensor *[]){y, dx, dy}) < 0 || check_shape(op, "dx", dx, y) < 0 ||
        check_shape(op, "dy", dy, y) < 0 || check_dtype(op, "dx", dx, y->dtype) < 0 ||
        check_dtype(op, "dy", dy, y->dtype) < 0)
        return AWL_ERR_INVALID;
    if (!awl_fused_available(AWL_KERNEL_SOFTMAX_BACKWARD, y) || !awl_is_contiguous(y) ||
        !awl_is_contiguous(dx) || awl_numel(y) == 0)
        return AWL_ERR_UNSUPPORTED;
    awl_scope_begin();
    awl_tensor *dyc = awl_tensor_contiguous(dy);
    int status = AWL_ERR_INVALID;
    if (dyc) {
        awl_view vdx = rows_view(dx), vdy = rows_view(dyc), vy = rows_view(y);
        awl_trace k;
        AWL_TRACE_BEGIN(&k, "softmax_backward", y, AWL_WORK(OUTPUT, 4), 1, 3,
                        (const awl_view *[]){&vdx, &vdy, &vy});
        status = kernel_status(
            op, awl_trace_end(&k, awl_tensor_backend(y)->softmax_backward(&vdx, &vdy, &vy, log)));
    }
    awl_scope_end();
    return status;
}

/* ---- layer norm ------------------------------------------------------------------------ */

/* The (C) vectors of a layer norm (weight, bias or their gradients), each
 * NULL or a vector view; false (UNSUPPORTED) when one is not a vector. */
static bool vectors_of(int n, awl_tensor *const *ts, awl_view *vs, awl_view **ps)
{
    for (int i = 0; i < n; i++) {
        ps[i] = NULL;
        if (!ts[i]) continue;
        if (!vector_view(ts[i], &vs[i])) return false;
        ps[i] = &vs[i];
    }
    return true;
}

/* A LayerNorm forward's operands: out of x's shape (x's dtype, or
 * bfloat16 for a float32 x), mean and rstd float32 of a row each, weight
 * and bias of x's dtype and C elements (or NULL), all on x's device. */
static int check_ln_forward(const char *op, awl_tensor *out, awl_tensor *mean, awl_tensor *rstd,
                            awl_tensor *x, awl_tensor *weight, awl_tensor *bias)
{
    int64_t C = last_dim(x), rows = C ? awl_numel(x) / C : 0;
    if (check_devices(op, 6, (awl_tensor *[]){x, out, mean, rstd, weight, bias}) < 0 ||
        check_shape(op, "out", out, x) < 0 || check_ln_dtype(op, "out", out, x) < 0 ||
        check_dtype(op, "weight", weight, x->dtype) < 0 ||
        check_dtype(op, "bias", bias, x->dtype) < 0 || check_dtype(op, "mean", mean, AWL_F32) < 0 ||
        check_dtype(op, "rstd", rstd, AWL_F32) < 0 || check_numel(op, "mean", mean, rows) < 0 ||
        check_numel(op, "rstd", rstd, rows) < 0 || check_numel(op, "weight", weight, C) < 0 ||
        check_numel(op, "bias", bias, C) < 0)
        return AWL_ERR_INVALID;
    return AWL_OK;
}

int awl_tensor_layernorm_forward(awl_tensor *out, awl_tensor *mean, awl_tensor *rstd, awl_tensor *x,
                                 awl_tensor *weight, awl_tensor *bias, double eps)
{
    const char *op = "awl_tensor_layernorm_forward";
    if (!out || !mean || !rstd || !x) return AWL_ERR_INVALID;
    if (check_ln_forward(op, out, mean, rstd, x, weight, bias) < 0) return AWL_ERR_INVALID;
    awl_view v[4], *p[4];
    if (!awl_fused_available(AWL_KERNEL_LAYERNORM_FORWARD, x) || !awl_is_contiguous(x) ||
        !awl_is_contiguous(out) || !vectors_of(4, (awl_tensor *[]){mean, rstd, weight, bias}, v, p))
        return AWL_ERR_UNSUPPORTED;
    awl_view vo = rows_view(out), vx = rows_view(x);
    awl_trace k;
    AWL_TRACE_BEGIN(&k, "layernorm_forward", x, AWL_WORK(OUTPUT, 8), 1, 2,
                    (const awl_view *[]){&vo, &vx});
    return kernel_status(op, awl_trace_end(&k, awl_tensor_backend(x)->layernorm_forward(
                                                   &vo, p[0], p[1], &vx, p[2], p[3], eps)));
}

int awl_tensor_dropout_add_layernorm(awl_tensor *sum, awl_tensor *out, awl_tensor *mean,
                                     awl_tensor *rstd, awl_tensor *x, awl_tensor *h,
                                     awl_tensor *weight, awl_tensor *bias, double eps,
                                     const awl_dropout_args *d)
{
    const char *op = "awl_tensor_dropout_add_layernorm";
    if (!sum || !out || !mean || !rstd || !x || !h) return AWL_ERR_INVALID;
    int64_t C = last_dim(x), rows = C ? awl_numel(x) / C : 0;
    if (check_ln_forward(op, out, mean, rstd, x, weight, bias) < 0 ||
        check_devices(op, 3, (awl_tensor *[]){x, h, sum}) < 0 || check_shape(op, "h", h, x) < 0 ||
        check_shape(op, "sum", sum, x) < 0 || check_dtype(op, "sum", sum, x->dtype) < 0)
        return AWL_ERR_INVALID;
    awl_view v[4], *p[4];
    if (!awl_fused_available(AWL_KERNEL_DROPOUT_ADD_LAYERNORM, x) || !awl_is_contiguous(x) ||
        !awl_is_contiguous(h) || !awl_is_contiguous(sum) || !awl_is_contiguous(out) ||
        (d && !(d->p > 0.0 && d->p < 1.0)) || rows == 0 ||
        !vectors_of(4, (awl_tensor *[]){mean, rstd, weight, bias}, v, p))
        return AWL_ERR_UNSUPPORTED;
    awl_view vs = rows_view(sum), vo = rows_view(out), vx = rows_view(x), vh = rows_view(h);
    awl_trace k;
    AWL_TRACE_BEGIN(&k, "dropout_add_layernorm", x, AWL_WORK(OUTPUT, 9), 2, 4,
                    (const awl_view *[]){&vs, &vo, &vx, &vh});
    return kernel_status(
        op, awl_trace_end(&k, awl_tensor_backend(x)->dropout_add_layernorm(
                                  &vs, &vo, p[0], p[1], &vx, &vh, p[2], p[3], eps, d)));
}

int awl_tensor_layernorm_backward(awl_tensor *dx, awl_tensor *dweight, awl_tensor *dbias,
                                  awl_tensor *dy, awl_tensor *x, awl_tensor *weight,
                                  awl_tensor *mean, awl_tensor *rstd, awl_tensor *dx_add,
                                  awl_tensor *dx_copy)
{
    const char *op = "awl_tensor_layernorm_backward";
    if (!dx || !dy || !x || !mean || !rstd) return AWL_ERR_INVALID;
    int64_t C = last_dim(x), rows = C ? awl_numel(x) / C : 0;
    if (check_devices(
            op, 10,
            (awl_tensor *[]){x, dx, dweight, dbias, dy, weight, mean, rstd, dx_add, dx_copy}) < 0 ||
        check_shape(op, "dx", dx, x) < 0 || check_shape(op, "dy", dy, x) < 0 ||
        check_shape(op, "dx_add", dx_add, x) < 0 ||
        check_dtype(op, "dx_add", dx_add, x->dtype) < 0 ||
        check_shape(op, "dx_copy", dx_copy, x) < 0 ||
        (dx_copy && check_dtype(op, "x (with dx_copy)", x, AWL_F32) < 0) ||
        check_dtype(op, "dx_copy", dx_copy, AWL_BF16) < 0 ||
        check_dtype(op, "dx", dx, x->dtype) < 0 || check_ln_dtype(op, "dy", dy, x) < 0 ||
        check_dtype(op, "weight", weight, x->dtype) < 0 ||
        check_dtype(op, "dweight", dweight, x->dtype) < 0 ||
        check_dtype(op, "dbias", dbias, x->dtype) < 0 ||
        check_dtype(op, "mean", mean, AWL_F32) < 0 || check_dtype(op, "rstd", rstd, AWL_F32) < 0 ||
        check_numel(op, "mean", mean, rows) < 0 || check_numel(op, "rstd", rstd, rows) < 0 ||
        check_numel(op, "weight", weight, C) < 0 || check_numel(op, "dweight", dweight, C) < 0 ||
        check_numel(op, "dbias", dbias, C) < 0)
        return AWL_ERR_INVALID;
    awl_view v[5], *p[5];
    if (!awl_fused_available(AWL_KERNEL_LAYERNORM_BACKWARD, x) || !awl_is_contiguous(x) ||
        !awl_is_contiguous(dx) || (dx_copy && !awl_is_contiguous(dx_copy)) ||
        !vectors_of(5, (awl_tensor *[]){dweight, dbias, weight, mean, rstd}, v, p))
        return AWL_ERR_UNSUPPORTED;
    awl_scope_begin();
    awl_tensor *dyc = awl_tensor_contiguous(dy), *addc = dx_add ? awl_tensor_contiguous(dx_add) : NULL;
    int status = AWL_ERR_INVALID;
    if (dyc && (addc || !dx_add)) {
        awl_view vdx = rows_view(dx), vdy = rows_view(dyc), vx = rows_view(x);
        awl_view vadd = addc ? rows_view(addc) : (awl_view){0};
        awl_view vcopy = dx_copy ? rows_view(dx_copy) : (awl_view){0};
        /* the outputs (dx, its copy) first, then the inputs */
        const awl_view *views[5] = {&vdx, &vcopy};
        int n_out = dx_copy ? 2 : 1, n = n_out;
        views[n++] = &vdy;
        views[n++] = &vx;
        if (addc) views[n++] = &vadd;
        awl_trace k;
        AWL_TRACE_BEGIN(&k, "layernorm_backward", x, AWL_WORK(OUTPUT, addc ? 15 : 14), n_out, n,
                        views);
        status =
            kernel_status(op, awl_trace_end(&k, awl_tensor_backend(x)->layernorm_backward(
                                                    &vdx, p[0], p[1], &vdy, &vx, p[2], p[3], p[4],
                                                    addc ? &vadd : NULL, dx_copy ? &vcopy : NULL)));
    }
    awl_scope_end();
    return status;
}

/* ---- cross-entropy ----------------------------------------------------------------------- */

/* The shared checks: logits (..., V) and N = numel / V rows; targets int32
 * of N elements; lse float32 of N. */
static int check_cross_entropy(const char *op, awl_tensor *logits, awl_tensor *targets,
                               awl_tensor *lse, awl_tensor *rows, const char *rows_name)
{
    int64_t V = last_dim(logits), N = V ? awl_numel(logits) / V : 0;
    if (check_devices(op, 4, (awl_tensor *[]){logits, targets, lse, rows}) < 0 ||
        check_dtype(op, "targets", targets, AWL_I32) < 0 ||
        check_dtype(op, "lse", lse, AWL_F32) < 0 ||
        check_dtype(op, rows_name, rows, logits->dtype) < 0 ||
        check_numel(op, "targets", targets, N) < 0 || check_numel(op, "lse", lse, N) < 0 ||
        check_numel(op, rows_name, rows, N) < 0)
        return AWL_ERR_INVALID;
    return AWL_OK;
}

int awl_tensor_cross_entropy_forward(awl_tensor *loss, awl_tensor *lse, awl_tensor *logits,
                                     awl_tensor *targets, int ignore_index)
{
    const char *op = "awl_tensor_cross_entropy_forward";
    if (!loss || !lse || !logits || !targets) return AWL_ERR_INVALID;
    if (check_cross_entropy(op, logits, targets, lse, loss, "loss") < 0) return AWL_ERR_INVALID;
    awl_view vl, vz, vt;
    if (!awl_fused_available(AWL_KERNEL_CROSS_ENTROPY_FORWARD, logits) ||
        !awl_is_contiguous(logits) || !vector_view(loss, &vl) || !vector_view(lse, &vz) ||
        !vector_view(targets, &vt))
        return AWL_ERR_UNSUPPORTED;
    awl_view vx = rows_view(logits);
    awl_trace k;
    AWL_TRACE_BEGIN(&k, "cross_entropy_forward", logits, AWL_WORK(INPUT, 4), 1, 3,
                    (const awl_view *[]){&vl, &vx, &vt});
    return kernel_status(op, awl_trace_end(&k, awl_tensor_backend(logits)->cross_entropy_forward(
                                                   &vl, &vz, &vx, &vt, ignore_index)));
}

/* The backward's checks: check_cross_entropy's with dloss, and dlogits of
 * the logits' device, shape and dtype. */
static int check_ce_gradient(const char *op, awl_tensor *logits, awl_tensor *targets,
                             awl_tensor *lse, awl_tensor *dloss, awl_tensor *dlogits)
{
    if (check_cross_entropy(op, logits, targets, lse, dloss, "dloss") < 0 ||
        check_devices(op, 2, (awl_tensor *[]){logits, dlogits}) < 0 ||
        check_shape(op, "dlogits", dlogits, logits) < 0 ||
        check_dtype(op, "dlogits", dlogits, logits->dtype) < 0)
        return AWL_ERR_INVALID;
    return AWL_OK;
}

int awl_tensor_cross_entropy_backward(awl_tensor *dlogits, awl_tensor *dloss, awl_tensor *logits,
                                      awl_tensor *lse, awl_tensor *targets, int ignore_index)
{
    const char *op = "awl_tensor_cross_entropy_backward";
    if (!dlogits || !dloss || !logits || !lse || !targets) return AWL_ERR_INVALID;
    if (check_ce_gradient(op, logits, targets, lse, dloss, dlogits) < 0) return AWL_ERR_INVALID;
    awl_view vg, vz, vt;
    if (!awl_fused_available(AWL_KERNEL_CROSS_ENTROPY_BACKWARD, logits) ||
        !awl_is_contiguous(logits) || !awl_is_contiguous(dlogits) || !vector_view(dloss, &vg) ||
        !vector_view(lse, &vz) || !vector_view(targets, &vt))
        return AWL_ERR_UNSUPPORTED;
    awl_view vd = rows_view(dlogits), vx = rows_view(logits);
    awl_trace k;
    AWL_TRACE_BEGIN(&k, "cross_entropy_backward", logits, AWL_WORK(OUTPUT, 4), 1, 3,
                    (const awl_view *[]){&vd, &vx, &vt});
    return kernel_status(op, awl_trace_end(&k, awl_tensor_backend(logits)->cross_entropy_backward(
                                                   &vd, &vg, &vx, &vz, &vt, ignore_index)));
}

int awl_tensor_cross_entropy_forward_backward(awl_tensor *loss, awl_tensor *lse,
                                              awl_tensor *dlogits, awl_tensor *dloss,
                                              awl_tensor *logits, awl_tensor *targets,
                                              int ignore_index)
{
    const char *op = "awl_tensor_cross_entropy_forward_backward";
    if (!loss || !dlogits || !dloss || !lse || !logits || !targets) return AWL_ERR_INVALID;
    if (check_cross_entropy(op, logits, targets, lse, loss, "loss") < 0 ||
        check_ce_gradient(op, logits, targets, lse, dloss, dlogits) < 0)
        return AWL_ERR_INVALID;
    awl_view vl, vg, vz, vt;
    if (!awl_fused_available(AWL_KERNEL_CROSS_ENTROPY_FORWARD_BACKWARD, logits) ||
        !awl_is_contiguous(logits) || !awl_is_contiguous(dlogits) || !vector_view(loss, &vl) ||
        !vector_view(dloss, &vg) || !vector_view(lse, &vz) || !vector_view(targets, &vt))
        return AWL_ERR_UNSUPPORTED;
    awl_view vd = rows_view(dlogits), vx = rows_view(logits);
    awl_trace k;
    /* the logits read once and dlogits written; the forward's 4 and the
     * backward's 4 FLOPs a logit */
    AWL_TRACE_BEGIN(&k, "cross_entropy_forward_backward", logits, AWL_WORK(OUTPUT, 8), 2, 4,
                    (const awl_view *[]){&vl, &vd, &vx, &vt});
    return kernel_status(
        op, awl_trace_end(&k, awl_tensor_backend(logits)->cross_entropy_forward_backward(
                                  &vl, &vz, &vd, &vg, &vx, &vt, ignore_index)));
}

/* ---- attention ------------------------------------------------------------------------------ */

/* Every (B, H, T, D) tensor of ts[0..n) has q's shape and dtype and a
 * contiguous last axis; false when one's layout is not the kernel's. */
static int check_heads(const char *op, int n, awl_tensor *const *ts, const char *const *names,
                       awl_tensor *lse, bool *layout_ok)
{
    awl_tensor *q = ts[0];
    *layout_ok = true;
    if (q->ndim != 4) {
        char s[160];
        return awl_error(AWL_ERR_INVALID, "%s: q has shape %s, expected (B, H, T, D)", op,
                         awl_shape_str(q, s, sizeof s));
    }
    for (int i = 0; i < n; i++) {
        if (check_shape(op, names[i], ts[i], q) < 0 ||
            check_dtype(op, names[i], ts[i], q->dtype) < 0)
            return AWL_ERR_INVALID;
        if (q->shape[3] != 1 && ts[i]->strides[3] != 1) *layout_ok = false;
    }
    int64_t bht[3] = {q->shape[0], q->shape[1], q->shape[2]};
    if (lse->ndim != 3 || memcmp(lse->shape, bht, sizeof bht) != 0) {
        char s[160];
        return awl_error(AWL_ERR_INVALID, "%s: lse has shape %s, expected (B, H, T)", op,
                         awl_shape_str(lse, s, sizeof s));
    }
    return check_dtype(op, "lse", lse, AWL_F32);
}

/* FLOPs of an attention kernel of `products` (T x T x D) products per
 * head: 2 forward (q k^T, p v), 5 backward (the scores again, then dv, dp,
 * dq, dk); causal attention computes half of each. */
static double attention_flops(const awl_tensor *q, const awl_tensor *k,
                              const awl_attention_args *args, int products)
{
    double bh = (double)q->shape[0] * (double)q->shape[1];
    double per = 2.0 * (double)q->shape[2] * (double)k->shape[2] * (double)q->shape[3];
    return products * bh * per * (args->causal ? 0.5 : 1.0);
}

int awl_tensor_attention_forward(awl_tensor *out, awl_tensor *lse, awl_tensor *q, awl_tensor *k,
                                 awl_tensor *v, const awl_attention_args *args)
{
    const char *op = "awl_tensor_attention_forward";
    if (!out || !lse || !q || !k || !v || !args) return AWL_ERR_INVALID;
    awl_tensor *heads[4] = {q, k, v, out};
    static const char *const names[4] = {"q", "k", "v", "out"};
    bool layout_ok;
    if (check_devices(op, 5, (awl_tensor *[]){q, k, v, out, lse}) < 0 ||
        check_heads(op, 4, heads, names, lse, &layout_ok) < 0)
        return AWL_ERR_INVALID;
    if (!awl_fused_available(AWL_KERNEL_ATTENTION_FORWARD, q) || !layout_ok)
        return AWL_ERR_UNSUPPORTED;
    awl_view vo = awl_tensor_view(out), vl = awl_tensor_view(lse), vq = awl_tensor_view(q),
             vk = awl_tensor_view(k), vv = awl_tensor_view(v);
    awl_trace t;
    AWL_TRACE_BEGIN(&t, "attention_forward", q, AWL_WORK(GIVEN, attention_flops(q, k, args, 2)), 1,
                    4, (const awl_view *[]){&vo, &vq, &vk, &vv});
    return kernel_status(op, awl_trace_end(&t, awl_tensor_backend(q)->attention_forward(
                                                   &vo, &vl, &vq, &vk, &vv, args->scale,
                                                   args->causal, args->dropout)));
}

int awl_tensor_attention_backward(awl_tensor *dq, awl_tensor *dk, awl_tensor *dv, awl_tensor *dout,
                                  awl_tensor *q, awl_tensor *k, awl_tensor *v, awl_tensor *out,
                                  awl_tensor *lse, const awl_attention_args *args)
{
    const char *op = "awl_tensor_attention_backward";
    if (!dq || !dk || !dv || !dout || !q || !k || !v || !out || !lse || !args)
        return AWL_ERR_INVALID;
    awl_tensor *heads[8] = {q, k, v, out, dout, dq, dk, dv};
    static const char *const names[8] = {"q", "k", "v", "out", "dout", "dq", "dk", "dv"};
    bool layout_ok;
    if (check_devices(op, 9, (awl_tensor *[]){q, k, v, out, dout, dq, dk, dv, lse}) < 0 ||
        check_heads(op, 8, heads, names, lse, &layout_ok) < 0)
        return AWL_ERR_INVALID;
    if (!awl_fused_available(AWL_KERNEL_ATTENTION_BACKWARD, q) || !layout_ok)
        return AWL_ERR_UNSUPPORTED;
    awl_view vdq = awl_tensor_view(dq), vdk = awl_tensor_view(dk), vdv = awl_tensor_view(dv),
             vdo = awl_tensor_view(dout), vq = awl_tensor_view(q), vk = awl_tensor_view(k),
             vv = awl_tensor_view(v), vo = awl_tensor_view(out), vl = awl_tensor_view(lse);
    awl_trace t;
    AWL_TRACE_BEGIN(&t, "attention_backward", q, AWL_WORK(GIVEN, attention_flops(q, k, args, 5)), 3,
                    8, (const awl_view *[]){&vdq, &vdk, &vdv, &vdo, &vq, &vk, &vv, &vo});
    return kernel_status(op, awl_trace_end(&t, awl_tensor_backend(q)->attention_backward(
                                                   &vdq, &vdk, &vdv, &vdo, &vq, &vk, &vv, &vo, &vl,
                                                   args->scale, args->causal, args->dropout)));
}

/* ---- dropout ------------------------------------------------------------------------------ */

int awl_tensor_dropout(awl_tensor *out, awl_tensor *in, const awl_dropout_args *d)
{
    const char *op = "awl_tensor_dropout";
    if (!out || !in || !d) return AWL_ERR_INVALID;
    /* out bfloat16 of a float32 in: the cast and the dropout together */
    bool rounding = in->dtype == AWL_F32 && out->dtype == AWL_BF16;
    if (check_devices(op, 2, (awl_tensor *[]){in, out}) < 0 ||
        check_shape(op, "out", out, in) < 0 ||
        (!rounding && check_dtype(op, "out", out, in->dtype) < 0))
        return AWL_ERR_INVALID;
    /* the mask's element i is out's i-th in row-major order: out contiguous */
    if (!awl_fused_available(AWL_KERNEL_DROPOUT, in) || !awl_is_contiguous(out) ||
        !(d->p > 0.0 && d->p < 1.0) || awl_numel(out) == 0)
        return AWL_ERR_UNSUPPORTED;
    awl_view vo = awl_tensor_view(out), vi = awl_tensor_view(in);
    awl_trace k;
    AWL_TRACE_BEGIN(&k, "dropout", in, AWL_WORK(OUTPUT, 1), 1, 2, (const awl_view *[]){&vo, &vi});
    return kernel_status(op, awl_trace_end(&k, awl_tensor_backend(in)->dropout(&vo, &vi, d)));
}

int awl_tensor_dropout_add(awl_tensor *out, awl_tensor *x, awl_tensor *h, const awl_dropout_args *d)
{
    const char *op = "awl_tensor_dropout_add";
    if (!out || !x || !h) return AWL_ERR_INVALID;
    if (check_devices(op, 3, (awl_tensor *[]){x, h, out}) < 0 ||
        check_shape(op, "out", out, x) < 0 || check_shape(op, "h", h, x) < 0 ||
        check_dtype(op, "out", out, x->dtype) < 0)
        return AWL_ERR_INVALID;
    if (!awl_fused_available(AWL_KERNEL_DROPOUT_ADD, x) || !awl_is_contiguous(out) ||
        !awl_is_contiguous(x) || !awl_is_contiguous(h) || (d && !(d->p > 0.0 && d->p < 1.0)) ||
        awl_numel(out) == 0)
        return AWL_ERR_UNSUPPORTED;
    awl_view vo = awl_tensor_view(out), vx = awl_tensor_view(x), vh = awl_tensor_view(h);
    awl_trace k;
    AWL_TRACE_BEGIN(&k, "dropout_add", x, AWL_WORK(OUTPUT, 1), 1, 3,
                    (const awl_view *[]){&vo, &vx, &vh});
    return kernel_status(op,
                         awl_trace_end(&k, awl_tensor_backend(x)->dropout_add(&vo, &vx, &vh, d)));
}

int awl_tensor_add_dropout(awl_tensor *out, awl_tensor *x, awl_tensor *h, const awl_dropout_args *d)
{
    const char *op = "awl_tensor_add_dropout";
    if (!out || !x || !h || !d) return AWL_ERR_INVALID;
    if (check_devices(op, 3, (awl_tensor *[]){x, h, out}) < 0 ||
        check_shape(op, "out", out, x) < 0 || check_dtype(op, "out", out, x->dtype) < 0 ||
        check_dtype(op, "h", h, x->dtype) < 0)
        return AWL_ERR_INVALID;
    if (!awl_trailing_shape(h, x)) {
        char s1[160], s2[160];
        return awl_error(AWL_ERR_INVALID, "%s: h %s is not the last axes of x %s", op,
                         awl_shape_str(h, s1, sizeof s1), awl_shape_str(x, s2, sizeof s2));
    }
    if (!awl_fused_available(AWL_KERNEL_ADD_DROPOUT, x) || !awl_is_contiguous(out) ||
        !awl_is_contiguous(x) || !awl_is_contiguous(h) || !(d->p > 0.0 && d->p < 1.0) ||
        awl_numel(out) == 0)
        return AWL_ERR_UNSUPPORTED;
    awl_view vo = awl_tensor_view(out), vx = awl_tensor_view(x), vh = awl_tensor_view(h);
    awl_trace k;
    AWL_TRACE_BEGIN(&k, "add_dropout", x, AWL_WORK(OUTPUT, 1), 1, 3,
                    (const awl_view *[]){&vo, &vx, &vh});
    return kernel_status(op,
                         awl_trace_end(&k, awl_tensor_backend(x)->add_dropout(&vo, &vx, &vh, d)));
}

/* ---- matmul with a bias, GELU backward --------------------------------------------------- */

/* out (M, N) = a (M, K) @ b (K, N) (+ bias (N) where given), and the GELU
 * products' pre of out's shape where given, all on a's device and of a's
 * dtype but out, of out_dtype: the checks of the products below. */
static int check_product(const char *op, awl_tensor *out, awl_dtype out_dtype, awl_tensor *a,
                         awl_tensor *b, awl_tensor *bias, awl_tensor *pre)
{
    if (check_devices(op, 5, (awl_tensor *[]){a, b, out, bias, pre}) < 0 ||
        check_dtype(op, "b", b, a->dtype) < 0 || check_dtype(op, "bias", bias, a->dtype) < 0 ||
        check_dtype(op, "out", out, out_dtype) < 0 || check_dtype(op, "pre", pre, a->dtype) < 0)
        return AWL_ERR_INVALID;
    bool ok = a->ndim == 2 && b->ndim == 2 && out->ndim == 2 && a->shape[1] == b->shape[0] &&
              out->shape[0] == a->shape[0] && out->shape[1] == b->shape[1] &&
              (!bias || (bias->ndim == 1 && bias->shape[0] == b->shape[1]));
    if (!ok) {
        char s1[160], s2[160], s3[160], s4[176] = "";
        if (bias) {
            char sb[160];
            snprintf(s4, sizeof s4, " + bias %s", awl_shape_str(bias, sb, sizeof sb));
        }
        return awl_error(AWL_ERR_INVALID, "%s: out %s = a %s @ b %s%s do not fit", op,
                         awl_shape_str(out, s1, sizeof s1), awl_shape_str(a, s2, sizeof s2),
                         awl_shape_str(b, s3, sizeof s3), s4);
    }
    return check_shape(op, "pre", pre, out);
}

int awl_tensor_matmul_bias(awl_tensor *out, awl_tensor *a, awl_tensor *b, awl_tensor *bias)
{
    const char *op = "awl_tensor_matmul_bias";
    if (!out || !a || !b || !bias) return AWL_ERR_INVALID;
    if (check_product(op, out, a->dtype, a, b, bias, NULL) < 0) return AWL_ERR_INVALID;
    if (!awl_fused_available(AWL_KERNEL_MATMUL_BIAS, a)) return AWL_ERR_UNSUPPORTED;
    awl_view vo = awl_tensor_view(out), va = awl_tensor_view(a), vb = awl_tensor_view(b),
             vbias = awl_tensor_view(bias);
    awl_trace k;
    AWL_TRACE_BEGIN(&k, "matmul_bias", a, AWL_WORK(MATMUL, 1), 1, 4,
                    (const awl_view *[]){&vo, &va, &vb, &vbias});
    return kernel_status(
        op, awl_trace_end(&k, awl_tensor_backend(a)->matmul_bias(&vo, &va, &vb, &vbias)));
}

int awl_tensor_matmul_wide(awl_tensor *out, awl_tensor *a_row_sums, awl_tensor *a, awl_tensor *b)
{
    const char *op = "awl_tensor_matmul_wide";
    if (!out || !a || !b) return AWL_ERR_INVALID;
    if (check_dtype(op, "a", a, AWL_BF16) < 0 ||
        check_product(op, out, AWL_F32, a, b, NULL, NULL) < 0 ||
        check_dtype(op, "a_row_sums", a_row_sums, AWL_F32) < 0 ||
        check_devices(op, 2, (awl_tensor *[]){a, a_row_sums}) < 0)
        return AWL_ERR_INVALID;
    if (a_row_sums && (a_row_sums->ndim != 1 || a_row_sums->shape[0] != a->shape[0])) {
        char s1[160], s2[160];
        return awl_error(AWL_ERR_INVALID, "%s: a_row_sums has shape %s, expected (%lld) for a %s",
                         op, awl_shape_str(a_row_sums, s1, sizeof s1), (long long)a->shape[0],
                         awl_shape_str(a, s2, sizeof s2));
    }
    if (!awl_fused_available(AWL_KERNEL_MATMUL_WIDE, a)) return AWL_ERR_UNSUPPORTED;
    awl_view vo = awl_tensor_view(out), va = awl_tensor_view(a), vb = awl_tensor_view(b);
    awl_view vs = a_row_sums ? awl_tensor_view(a_row_sums) : (awl_view){0};
    awl_trace k;
    if (a_row_sums)
        AWL_TRACE_BEGIN(&k, "matmul_wide", a, AWL_WORK(MATMUL, 0), 2, 4,
                        (const awl_view *[]){&vo, &vs, &va, &vb});
    else
        AWL_TRACE_BEGIN(&k, "matmul_wide", a, AWL_WORK(MATMUL, 0), 1, 3,
                        (const awl_view *[]){&vo, &va, &vb});
    const awl_view *sums = a_row_sums ? &vs : NULL;
    return kernel_status(
        op, awl_trace_end(&k, awl_tensor_backend(a)->matmul_wide(&vo, sums, &va, &vb)));
}

int awl_tensor_matmul_bias_gelu(awl_tensor *out, awl_tensor *pre, awl_tensor *a, awl_tensor *b,
                                awl_tensor *bias)
{
    const char *op = "awl_tensor_matmul_bias_gelu";
    if (!out || !pre || !a || !b) return AWL_ERR_INVALID;
    if (check_product(op, out, a->dtype, a, b, bias, pre) < 0) return AWL_ERR_INVALID;
    if (!awl_fused_available(AWL_KERNEL_MATMUL_BIAS_GELU, a)) return AWL_ERR_UNSUPPORTED;
    awl_view vo = awl_tensor_view(out), vp = awl_tensor_view(pre), va = awl_tensor_view(a),
             vb = awl_tensor_view(b), vbias = bias ? awl_tensor_view(bias) : (awl_view){0};
    awl_trace k;
    AWL_TRACE_BEGIN(&k, "matmul_bias_gelu", a, AWL_WORK(MATMUL, 1), 2, bias ? 5 : 4,
                    (const awl_view *[]){&vo, &vp, &va, &vb, &vbias});
    return kernel_status(op, awl_trace_end(&k, awl_tensor_backend(a)->matmul_bias_gelu(
                                                   &vo, &vp, &va, &vb, bias ? &vbias : NULL)));
}

int awl_tensor_matmul_gelu_backward(awl_tensor *out, awl_tensor *a, awl_tensor *b, awl_tensor *pre)
{
    const char *op = "awl_tensor_matmul_gelu_backward";
    if (!out || !a || !b || !pre) return AWL_ERR_INVALID;
    if (check_product(op, out, a->dtype, a, b, NULL, pre) < 0) return AWL_ERR_INVALID;
    if (!awl_fused_available(AWL_KERNEL_MATMUL_GELU_BACKWARD, a)) return AWL_ERR_UNSUPPORTED;
    awl_view vo = awl_tensor_view(out), va = awl_tensor_view(a), vb = awl_tensor_view(b),
             vp = awl_tensor_view(pre);
    awl_trace k;
    AWL_TRACE_BEGIN(&k, "matmul_gelu_backward", a, AWL_WORK(MATMUL, 1), 1, 4,
                    (const awl_view *[]){&vo, &va, &vb, &vp});
    return kernel_status(
        op, awl_trace_end(&k, awl_tensor_backend(a)->matmul_gelu_backward(&vo, &va, &vb, &vp)));
}

int awl_tensor_gelu_backward(awl_tensor *dx, awl_tensor *dy, awl_tensor *x)
{
    const char *op = "awl_tensor_gelu_backward";
    if (!dx || !dy || !x) return AWL_ERR_INVALID;
    if (check_devices(op, 3, (awl_tensor *[]){x, dx, dy}) < 0 || check_shape(op, "dx", dx, x) < 0 ||
        check_shape(op, "dy", dy, x) < 0 || check_dtype(op, "dx", dx, x->dtype) < 0 ||
        check_dtype(op, "dy", dy, x->dtype) < 0)
        return AWL_ERR_INVALID;
    if (!awl_fused_available(AWL_KERNEL_GELU_BACKWARD, x)) return AWL_ERR_UNSUPPORTED;
    awl_view vdx = awl_tensor_view(dx), vdy = awl_tensor_view(dy), vx = awl_tensor_view(x);
    awl_trace k;
    AWL_TRACE_BEGIN(&k, "gelu_backward", x, AWL_WORK(OUTPUT, 1), 1, 3,
                    (const awl_view *[]){&vdx, &vdy, &vx});
    return kernel_status(op,
                         awl_trace_end(&k, awl_tensor_backend(x)->gelu_backward(&vdx, &vdy, &vx)));
}

/* ---- AdamW -------------------------------------------------------------------------------- */

int awl_tensor_adamw_step(int n, awl_tensor *const *params, awl_tensor *const *grads,
                          awl_tensor *const *m, awl_tensor *const *v, awl_tensor *const *casts,
                          const float *weight_decay, const awl_adamw_args *args)
{
    const char *op = "awl_tensor_adamw_step";
    if (n <= 0 || !params || !grads || !m || !v || !weight_decay || !args) return AWL_ERR_INVALID;
    for (int i = 0; i < n; i++) {
        awl_tensor *set[4] = {params[i], grads[i], m[i], v[i]};
        static const char *const names[4] = {"param", "grad", "exp_avg", "exp_avg_sq"};
        for (int k = 0; k < 4; k++)
            if (!set[k] || check_shape(op, names[k], set[k], set[0]) < 0 ||
                check_dtype(op, names[k], set[k], set[0]->dtype) < 0 ||
                awl_check_same_device(op, params[0], set[k]) < 0)
                return AWL_ERR_INVALID;
        if (casts && (!casts[i] || check_numel(op, "cast", casts[i], awl_numel(params[i])) < 0 ||
                      check_dtype(op, "cast", casts[i], AWL_BF16) < 0 ||
                      awl_check_same_device(op, params[0], casts[i]) < 0))
            return AWL_ERR_INVALID;
        if (casts && !awl_is_contiguous(casts[i]))
            return awl_error(AWL_ERR_INVALID, "%s: cast %d of %d is not contiguous", op, i, n);
    }
    if (!awl_fused_available(AWL_KERNEL_ADAMW_STEP, params[0])) return AWL_ERR_UNSUPPORTED;
    awl_view *views = awl_xmalloc((size_t)n * 5 * sizeof *views);
    for (int i = 0; i < n; i++) {
        views[i] = awl_tensor_view(params[i]);
        views[n + i] = awl_tensor_view(grads[i]);
        views[2 * n + i] = awl_tensor_view(m[i]);
        views[3 * n + i] = awl_tensor_view(v[i]);
        if (casts) views[4 * n + i] = awl_tensor_view(casts[i]);
    }
    awl_adamw_args with = *args;
    with.casts = casts ? views + 4 * n : NULL;
    /* per element: the parameter, m and v read and written, the gradient
     * read; about 12 FLOPs (docs/profiling.md) */
    double elements = 0, size = (double)awl_dtype_size(params[0]->dtype);
    for (int i = 0; i < n; i++) elements += (double)awl_numel(params[i]);
    awl_trace k;
    AWL_TRACE_BEGIN(&k, "adamw_step", params[0], AWL_WORK(NONE, 0), 1, 1,
                    (const awl_view *[]){&views[0]});
    awl_trace_set_work(&k, (7 * size + (casts ? 2 : 0)) * elements, 12 * elements);
    for (int i = 0; i < n; i++) {
        awl_tensor_written(params[i]);
        awl_tensor_written(m[i]);
        awl_tensor_written(v[i]);
        if (casts) awl_tensor_written(casts[i]);
    }
    int status = kernel_status(op, awl_trace_end(&k, awl_tensor_backend(params[0])->adamw_step(
                                                         n, views, views + n, views + 2 * n,
                                                         views + 3 * n, weight_decay, &with)));
    free(views);
    return status;
}

/* ---- gradient clipping: a sum of squares and a scaling over many tensors ----------------- */

/* Views of n tensors of xs[0]'s device and dtype, or NULL with the error
 * recorded. */
static awl_view *views_of_many(const char *op, int n, awl_tensor *const *xs)
{
    for (int i = 0; i < n; i++)
        if (!xs[i] || check_dtype(op, "tensor", xs[i], xs[0]->dtype) < 0 ||
            awl_check_same_device(op, xs[0], xs[i]) < 0) {
            if (!xs[i]) awl_error(AWL_ERR_INVALID, "%s: tensor %d of %d is NULL", op, i, n);
            return NULL;
        }
    awl_view *views = awl_xmalloc((size_t)n * sizeof *views);
    for (int i = 0; i < n; i++) views[i] = awl_tensor_view(xs[i]);
    return views;
}

static double elements_of_many(int n, awl_tensor *const *xs)
{
    double elements = 0;
    for (int i = 0; i < n; i++) elements += (double)awl_numel(xs[i]);
    return elements;
}

int awl_tensor_sum_squares(int n, awl_tensor *const *xs, awl_tensor *out)
{
    const char *op = "awl_tensor_sum_squares";
    if (n <= 0 || !xs || !out) return AWL_ERR_INVALID;
    awl_view *views = views_of_many(op, n, xs);
    if (!views) return AWL_ERR_INVALID;
    if (check_dtype(op, "out", out, AWL_F64) < 0 || check_numel(op, "out", out, 1) < 0 ||
        awl_check_same_device(op, xs[0], out) < 0) {
        free(views);
        return AWL_ERR_INVALID;
    }
    if (!awl_fused_available(AWL_KERNEL_SUM_SQUARES, xs[0])) {
        free(views);
        return AWL_ERR_UNSUPPORTED;
    }
    awl_view vo = awl_tensor_view(out);
    const double elements = elements_of_many(n, xs);
    awl_trace k;
    AWL_TRACE_BEGIN(&k, "sum_squares", xs[0], AWL_WORK(NONE, 0), 1, 1, (const awl_view *[]){&vo});
    awl_trace_set_work(&k, (double)awl_dtype_size(xs[0]->dtype) * elements, 2 * elements);
    int status =
        kernel_status(op, awl_trace_end(&k, awl_tensor_backend(xs[0])->sum_squares(n, views, &vo)));
    free(views);
    return status;
}

int awl_tensor_scale(int n, awl_tensor *const *xs, double factor)
{
    const char *op = "awl_tensor_scale";
    if (n <= 0 || !xs) return AWL_ERR_INVALID;
    awl_view *views = views_of_many(op, n, xs);
    if (!views) return AWL_ERR_INVALID;
    if (!awl_fused_available(AWL_KERNEL_SCALE, xs[0])) {
        free(views);
        return AWL_ERR_UNSUPPORTED;
    }
    const double elements = elements_of_many(n, xs);
    awl_trace k;
    AWL_TRACE_BEGIN(&k, "scale", xs[0], AWL_WORK(NONE, 0), 1, 1, (const awl_view *[]){&views[0]});
    awl_trace_set_work(&k, 2 * (double)awl_dtype_size(xs[0]->dtype) * elements, elements);
    for (int i = 0; i < n; i++) awl_tensor_written(xs[i]);
    int status =
        kernel_status(op, awl_trace_end(&k, awl_tensor_backend(xs[0])->scale(n, views, factor)));
    free(views);
    return status;
}

/* ---- casts of many tensors: autocast's weights ------------------------------------------ */

int awl_tensor_cast_many(int n, awl_tensor *const *xs, awl_dtype dtype, awl_tensor **outs)
{
    const char *op = "awl_tensor_cast_many";
    if (n < 0 || (n > 0 && (!xs || !outs))) return AWL_ERR_INVALID;
    if (n == 0) return AWL_OK;
    awl_view *views = views_of_many(op, n, xs);
    if (!views) return AWL_ERR_INVALID;
    awl_view *out_views = awl_xmalloc((size_t)n * sizeof *out_views);
    int status = AWL_OK, made = 0;
    for (; made < n; made++) {
        awl_tensor *x = xs[made];
        outs[made] = awl_tensor_alloc(op, x->storage->device, x->ndim, x->shape, dtype);
        if (!outs[made]) {
            status = AWL_ERR_OOM;
            break;
        }
        out_views[made] = awl_tensor_view(outs[made]);
    }
    bool contiguous = true;
    for (int i = 0; i < n && contiguous; i++) contiguous = awl_is_contiguous(xs[i]);
    if (status == AWL_OK) {
        status = AWL_ERR_UNSUPPORTED;
        if (contiguous && xs[0]->dtype == AWL_F32 &&
            awl_fused_available(AWL_KERNEL_CAST_MANY, outs[0])) {
            const double elements = elements_of_many(n, xs);
            awl_trace k;
            AWL_TRACE_BEGIN(&k, "cast_many", outs[0], AWL_WORK(NONE, 0), 1, 1,
                            (const awl_view *[]){&out_views[0]});
            awl_trace_set_work(&k, (4.0 + awl_dtype_size(dtype)) * elements, 0);
            status = kernel_status(
                op, awl_trace_end(&k, awl_tensor_backend(xs[0])->cast_many(n, out_views, views)));
        }
        if (status == AWL_ERR_UNSUPPORTED) { /* composed: the copy kernel, a tensor at a time */
            status = AWL_OK;
            for (int i = 0; status == AWL_OK && i < n; i++)
                status = awl_tensor_copy_(outs[i], xs[i]);
        }
    }
    if (status < 0)
        for (int i = 0; i < made; i++) awl_discard(outs[i]);
    free(views);
    free(out_views);
    return status;
}
