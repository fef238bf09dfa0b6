/*
 * nn/optim.c - SGD, Adam and AdamW, gradient clipping and scaling (see
 * optim.h).
 *
 * One struct serves the three optimizers: they differ only in the update of
 * one parameter, and a checkpoint treats them alike (named state tensors and
 * step counts). Each update is composed of raw in-place ops
 * (awl_tensor_unary_out / binary_out), which record no graph and work on any
 * device and float dtype, in PyTorch's order of operations, with the scalar
 * factors (bias corrections, step size) computed in double precision on the
 * host as PyTorch computes them in Python. A float64 parameter therefore
 * follows the textbook formulas to the last bits, which is what the tests
 * check.
 *
 * AdamW, the optimizer GPT training uses, additionally hands whole groups of
 * float32 contiguous parameters to the backend's fused adamw_step kernel
 * (one call per device per step count; the kernel reads each tensor once
 * instead of the dozen passes the composed form makes). A missing kernel,
 * AWL_ERR_UNSUPPORTED, a parameter the kernel cannot take, or fused kernels
 * switched off (awl_set_fused_kernels) all fall back to the composed form.
 *
 * Temporaries live in a scope opened around each parameter's update, so a
 * step holds at most one parameter's worth of scratch memory.
 */
#include "nn/optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "nn/nn.h"
#include "tensor/profiler.h"

struct awl_optimizer {
    awl_optimizer_kind kind;
    double lr, momentum, beta1, beta2, eps, weight_decay;
    bool nesterov;
    bool decay_all; /* AdamW: decay 1-D parameters too */
    int64_t step_count;
    /* The factor awl_optimizer_clip_grad_norm left for the next step to
     * apply to the gradients as it reads them; 1 when none. */
    double grad_scale;

    int n; /* parameters, without duplicates */
    char **names;
    awl_tensor **params; /* one reference each */
    int64_t *steps;      /* updates each parameter has had */
    awl_tensor **first;  /* momentum_buffer or exp_avg (NULL: no state) */
    awl_tensor **second; /* exp_avg_sq (NULL: no state) */

    int n_states; /* first/second flattened, for checkpoints */
    char **state_names;
    awl_tensor **states; /* borrowed from first/second */

    /* awl_optimizer_keep_casts: the dtype of the parameters' kept copies
     * (AWL_F32: none), and each parameter's copy once the fused step has
     * written one (one reference each, NULL before) */
    awl_dtype keep_dtype;
    awl_tensor **casts;
};

static const char *kind_names[] = {"sgd", "adam", "adamw"};

/* ---- construction -------------------------------------------------------------- */

static char *concat(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    char *s = awl_xmalloc(la + lb + 1);
    memcpy(s, a, la);
    memcpy(s + la, b, lb + 1);
    return s;
}

/* Whether the tensor of list item i already appeared earlier in the list
 * (a tied weight listed under two names must be updated, clipped and scaled
 * once). */
static bool listed_before(const awl_param_list *list, int i)
{
    for (int j = 0; j < i; j++)
        if (list->items[j].tensor == list->items[i].tensor) return true;
    return false;
}

static int check_hyper(const char *op, const char *what, double value, double lo, double hi)
{
    if (!(value >= lo && value <= hi))
        return awl_error(AWL_ERR_INVALID, "%s: invalid %s %g (must be in [%g, %g])", op, what,
                         value, lo, hi);
    return AWL_OK;
}

/* Adds a zero state tensor shaped like params[i] under "<param><suffix>". */
static awl_tensor *add_state(awl_optimizer *o, int i, const char *suffix)
{
    awl_tensor *z = awl_take(awl_zeros_like(o->params[i]));
    if (!z) return NULL;
    awl_tensor_set_memory_role(z, AWL_MEMORY_OPTIMIZER);
    o->state_names[o->n_states] = concat(o->names[i], suffix);
    o->states[o->n_states++] = z;
    return z;
}

/* The part every constructor shares: validate the list, copy names, take
 * references, create `n_buffers` (0, 1 or 2) zero state tensors per
 * parameter named by `suffixes`. */
static awl_optimizer *optimizer_new(const char *op, awl_optimizer_kind kind,
                                    const awl_param_list *params, int n_buffers,
                                    const char *const *suffixes)
{
    if (!params) return NULL;
    if (params->count == 0) {
        awl_error(AWL_ERR_INVALID, "%s: the parameter list is empty", op);
        return NULL;
    }
    for (int i = 0; i < params->count; i++) {
        const awl_param *p = &params->items[i];
        if (!p->tensor || !awl_dtype_is_float(p->tensor->dtype)) {
            awl_error(AWL_ERR_INVALID, "%s: parameter %s is %s (must be a float tensor)", op,
                      p->name, p->tensor ? awl_dtype_name(p->tensor->dtype) : "NULL");
            return NULL;
        }
    }
    awl_optimizer *o = awl_xcalloc(1, sizeof *o);
    o->kind = kind;
    o->grad_scale = 1.0;
    size_t cap = (size_t)params->count;
    o->names = awl_xcalloc(cap, sizeof *o->names);
    o->params = awl_xcalloc(cap, sizeof *o->params);
    o->steps = awl_xcalloc(cap, sizeof *o->steps);
    o->first = awl_xcalloc(cap, sizeof *o->first);
    o->second = awl_xcalloc(cap, sizeof *o->second);
    o->state_names = awl_xcalloc(cap * 2 + 1, sizeof *o->state_names);
    o->states = awl_xcalloc(cap * 2 + 1, sizeof *o->states);
    o->keep_dtype = AWL_F32;
    o->casts = awl_xcalloc(cap, sizeof *o->casts);
    for (int i = 0; i < params->count; i++) {
        if (listed_before(params, i)) continue;
        int k = o->n++;
        o->names[k] = concat(params->items[i].name, "");
        o->params[k] = awl_retain(params->items[i].tensor);
        if ((n_buffers >= 1 && !(o->first[k] = add_state(o, k, suffixes[0]))) ||
            (n_buffers >= 2 && !(o->second[k] = add_state(o, k, suffixes[1])))) {
            awl_optimizer_free(o);
            return NULL;
        }
    }
    return o;
}

awl_optimizer *awl_sgd_new(const awl_param_list *params, double lr, double momentum,
                           double weight_decay)
{
    const char *op = "awl_sgd_new";
    if (check_hyper(op, "learning rate", lr, 0, INFINITY) < 0 ||
        check_hyper(op, "momentum", momentum, 0, INFINITY) < 0 ||
        check_hyper(op, "weight decay", weight_decay, 0, INFINITY) < 0)
        return NULL;
    static const char *const suffixes[] = {".momentum_buffer"};
    awl_optimizer *o = optimizer_new(op, AWL_OPTIM_SGD, params, momentum != 0 ? 1 : 0, suffixes);
    if (!o) return NULL;
    o->lr = lr;
    o->momentum = momentum;
    o->weight_decay = weight_decay;
    return o;
}

static awl_optimizer *adam_new(const char *op, awl_optimizer_kind kind,
                               const awl_param_list *params, double lr, double beta1, double beta2,
                               double eps, double weight_decay)
{
    if (check_hyper(op, "learning rate", lr, 0, INFINITY) < 0 ||
        check_hyper(op, "beta1", beta1, 0, nextafter(1.0, 0.0)) < 0 ||
        check_hyper(op, "beta2", beta2, 0, nextafter(1.0, 0.0)) < 0 ||
        check_hyper(op, "epsilon", eps, 0, INFINITY) < 0 ||
        check_hyper(op, "weight decay", weight_decay, 0, INFINITY) < 0)
        return NULL;
    static const char *const suffixes[] = {".exp_avg", ".exp_avg_sq"};
    awl_optimizer *o = optimizer_new(op, kind, params, 2, suffixes);
    if (!o) return NULL;
    o->lr = lr;
    o->beta1 = beta1;
    o->beta2 = beta2;
    o->eps = eps;
    o->weight_decay = weight_decay;
    return o;
}

awl_optimizer *awl_adam_new(const awl_param_list *params, double lr, double beta1, double beta2,
                            double eps, double weight_decay)
{
    return adam_new("awl_adam_new", AWL_OPTIM_ADAM, params, lr, beta1, beta2, eps, weight_decay);
}

awl_optimizer *awl_adamw_new(const awl_param_list *params, double lr, double beta1, double beta2,
                             double eps, double weight_decay)
{
    return adam_new("awl_adamw_new", AWL_OPTIM_ADAMW, params, lr, beta1, beta2, eps, weight_decay);
}

int awl_sgd_set_nesterov(awl_optimizer *o, bool on)
{
    if (!o) return AWL_ERR_INVALID;
    if (o->kind != AWL_OPTIM_SGD)
        return awl_error(AWL_ERR_INVALID, "awl_sgd_set_nesterov: the optimizer is %s, not sgd",
                         kind_names[o->kind]);
    if (on && o->momentum <= 0)
        return awl_error(AWL_ERR_INVALID, "awl_sgd_set_nesterov: Nesterov momentum needs "
                                          "momentum > 0");
    o->nesterov = on;
    return AWL_OK;
}

int awl_adamw_set_decay_all(awl_optimizer *o, bool all)
{
    if (!o) return AWL_ERR_INVALID;
    if (o->kind != AWL_OPTIM_ADAMW)
        return awl_error(AWL_ERR_INVALID, "awl_adamw_set_decay_all: the optimizer is %s, not adamw",
                         kind_names[o->kind]);
    o->decay_all = all;
    return AWL_OK;
}

static void drop_casts(awl_optimizer *o);

void awl_optimizer_free(awl_optimizer *o)
{
    if (!o) return;
    drop_casts(o);
    for (int i = 0; i < o->n; i++) {
        free(o->names[i]);
        awl_release(o->params[i]);
    }
    for (int i = 0; i < o->n_states; i++) {
        free(o->state_names[i]);
        awl_release(o->states[i]);
    }
    free(o->names);
    free(o->params);
    free(o->steps);
    free(o->first);
    free(o->second);
    free(o->state_names);
    free(o->states);
    free(o->casts);
    free(o);
}

/* ---- kept casts ------------------------------------------------------------------------ */

/* Hands back every kept copy and takes them out of autocast's table. */
static void drop_casts(awl_optimizer *o)
{
    for (int i = 0; i < o->n && o->casts; i++)
        if (o->casts[i]) {
            awl_autocast_forget(o->params[i]);
            awl_release(o->casts[i]);
            o->casts[i] = NULL;
        }
}

int awl_optimizer_keep_casts(awl_optimizer *o, awl_dtype dtype)
{
    const char *op = "awl_optimizer_keep_casts";
    if (!o) return AWL_ERR_INVALID;
    if (o->kind != AWL_OPTIM_ADAMW)
        return awl_error(AWL_ERR_INVALID, "%s: the optimizer is %s; only adamw keeps casts", op,
                         kind_names[o->kind]);
    if (dtype != AWL_F32 && dtype != AWL_BF16)
        return awl_error(AWL_ERR_INVALID, "%s: %s is not bfloat16 (float32 turns keeping off)", op,
                         awl_dtype_name(dtype));
    if (dtype == AWL_F32) drop_casts(o);
    o->keep_dtype = dtype;
    return AWL_OK;
}

awl_tensor *awl_optimizer_kept_cast(const awl_optimizer *o, int i)
{
    return o && i >= 0 && i < o->n && o->keep_dtype != AWL_F32 ? o->casts[i] : NULL;
}

/* Parameter i's copy for the fused step to write, made the first time;
 * NULL where the parameter is not float32 (or on failure: the step then
 * goes without copies). */
static awl_tensor *cast_for(awl_optimizer *o, int i)
{
    awl_tensor *p = o->params[i];
    if (!o->casts[i] && p->dtype == AWL_F32) {
        char device[32];
        awl_tensor *c = awl_take(awl_empty(p->ndim, p->shape, o->keep_dtype,
                                           awl_tensor_device_name(p, device, sizeof device)));
        if (c) awl_tensor_set_memory_role(c, AWL_MEMORY_OPTIMIZER);
        o->casts[i] = c;
    }
    return o->casts[i];
}

/* ---- composed updates ------------------------------------------------------------ */

#define TRY(expr)                                                                                  \
    do {                                                                                           \
        int status_ = (expr);                                                                      \
        if (status_ < 0) return status_;                                                           \
    } while (0)

/* The gradient of parameter i, checked against it; NULL (no error) when the
 * parameter has none. */
static int grad_of(const awl_optimizer *o, int i, awl_tensor **grad)
{
    awl_tensor *p = o->params[i];
    *grad = p->grad;
    if (!p->grad) return AWL_OK;
    if (!awl_same_shape(p->grad, p) || p->grad->dtype != p->dtype) {
        char s1[64], s2[64];
        return awl_error(AWL_ERR_INVALID, "awl_optimizer_step: %s is %s %s but its grad is %s %s",
                         o->names[i], awl_dtype_name(p->dtype), awl_shape_str(p, s1, sizeof s1),
                         awl_dtype_name(p->grad->dtype), awl_shape_str(p->grad, s2, sizeof s2));
    }
    return AWL_OK;
}

/* A new tensor holding x * alpha. */
static awl_tensor *scaled(awl_tensor *x, double alpha)
{
    return awl_tensor_unary(AWL_UNARY_MUL_SCALAR, x, alpha);
}

/* dst = dst + alpha * x, through the scratch tensor tmp (x's shape). */
static int add_scaled_(awl_tensor *dst, awl_tensor *x, double alpha, awl_tensor *tmp)
{
    TRY(awl_tensor_unary_out(AWL_UNARY_MUL_SCALAR, tmp, x, alpha));
    return awl_tensor_binary_out(AWL_BINARY_ADD, dst, dst, tmp);
}

/* g + weight_decay * p as a new tensor (coupled L2), or g itself. */
static awl_tensor *with_l2(awl_tensor *g, awl_tensor *p, double weight_decay)
{
    if (weight_decay == 0) return g;
    awl_tensor *d = scaled(p, weight_decay);
    if (!d || awl_tensor_binary_out(AWL_BINARY_ADD, d, g, d) < 0) return NULL;
    return d;
}

// p, grad, momentum_buffer all of p's shape; step is this update's count (1 first)
static int sgd_update(awl_optimizer *o, int i, awl_tensor *grad, int64_t step)
{
    awl_tensor *p = o->params[i], *buf = o->first[i];
    awl_tensor *d = with_l2(grad, p, o->weight_decay);
    if (!d) return AWL_ERR_INVALID;
    if (o->momentum != 0) {
        if (step == 1) {
            TRY(awl_tensor_copy_(buf, d));
        } else {
            TRY(awl_tensor_unary_out(AWL_UNARY_MUL_SCALAR, buf, buf, o->momentum));
            TRY(awl_tensor_binary_out(AWL_BINARY_ADD, buf, buf, d));
        }
        if (o->nesterov) {
            awl_tensor *nd = scaled(buf, o->momentum);
            if (!nd) return AWL_ERR_INVALID;
            TRY(awl_tensor_binary_out(AWL_BINARY_ADD, nd, d, nd));
            d = nd;
        } else {
            d = buf;
        }
    }
    awl_tensor *tmp = awl_empty_like(p);
    if (!tmp) return AWL_ERR_OOM;
    return add_scaled_(p, d, -o->lr, tmp);
}

/* The weight decay AdamW applies to parameter i. */
static double adamw_decay(const awl_optimizer *o, int i)
{
    return (o->decay_all || o->params[i]->ndim >= 2) ? o->weight_decay : 0.0;
}

// p, grad, exp_avg (m), exp_avg_sq (v) all of p's shape; step counts from 1
static int adam_update(awl_optimizer *o, int i, awl_tensor *grad, int64_t step)
{
    awl_tensor *p = o->params[i], *m = o->first[i], *v = o->second[i];
    awl_tensor *g = grad;
    if (o->kind == AWL_OPTIM_ADAMW) {
        double wd = adamw_decay(o, i);
        if (wd != 0) TRY(awl_tensor_unary_out(AWL_UNARY_MUL_SCALAR, p, p, 1.0 - o->lr * wd));
    } else {
        g = with_l2(grad, p, o->weight_decay);
        if (!g) return AWL_ERR_INVALID;
    }
    awl_tensor *tmp = awl_empty_like(p);
    if (!tmp) return AWL_ERR_OOM;
    /* m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2 */
    TRY(awl_tensor_unary_out(AWL_UNARY_MUL_SCALAR, m, m, o->beta1));
    TRY(add_scaled_(m, g, 1.0 - o->beta1, tmp));
    TRY(awl_tensor_unary_out(AWL_UNARY_MUL_SCALAR, v, v, o->beta2));
    TRY(awl_tensor_binary_out(AWL_BINARY_MUL, tmp, g, g));
    TRY(awl_tensor_unary_out(AWL_UNARY_MUL_SCALAR, tmp, tmp, 1.0 - o->beta2));
    TRY(awl_tensor_binary_out(AWL_BINARY_ADD, v, v, tmp));

    double bias1 = 1.0 - pow(o->beta1, (double)step);
    double bias2_sqrt = sqrt(1.0 - pow(o->beta2, (double)step));
    double step_size = o->lr / bias1;
    /* denom = sqrt(v) / sqrt(bias2) + eps, dividing by a broadcast scalar
     * as PyTorch does rather than multiplying by its reciprocal */
    awl_tensor *b2 = awl_tensor_new_on(p, 0, NULL, p->dtype);
    if (!b2) return AWL_ERR_OOM;
    TRY(awl_tensor_fill_(b2, bias2_sqrt));
    TRY(awl_tensor_unary_out(AWL_UNARY_SQRT, tmp, v, 0));
    TRY(awl_tensor_binary_out(AWL_BINARY_DIV, tmp, tmp, b2));
    TRY(awl_tensor_unary_out(AWL_UNARY_ADD_SCALAR, tmp, tmp, o->eps));
    /* p = p - step_size * m / denom */
    TRY(awl_tensor_binary_out(AWL_BINARY_DIV, tmp, m, tmp));
    TRY(awl_tensor_unary_out(AWL_UNARY_MUL_SCALAR, tmp, tmp, -step_size));
    return awl_tensor_binary_out(AWL_BINARY_ADD, p, p, tmp);
}

/* ---- fused AdamW ---------------------------------------------------------------- */

static bool fusable(const awl_optimizer *o, int i)
{
    awl_tensor *p = o->params[i], *g = p->grad;
    return g && awl_fused_available(AWL_KERNEL_ADAMW_STEP, p) && awl_is_contiguous(p) &&
           awl_is_contiguous(g) && awl_is_contiguous(o->first[i]) &&
           awl_is_contiguous(o->second[i]);
}

/* Updates, with the backend's adamw_step, every parameter it can take and
 * marks them in done[]; the rest are left for the composed form. Groups
 * share a device and a step count (they differ only after some parameter
 * went without a grad). */
static int adamw_fused(awl_optimizer *o, bool *done)
{
    bool *grouped = awl_xcalloc((size_t)o->n, sizeof *grouped);
    int *members = awl_xmalloc((size_t)o->n * sizeof *members);
    awl_tensor **group = awl_xmalloc((size_t)o->n * 5 * sizeof *group);
    float *decay = awl_xmalloc((size_t)o->n * sizeof *decay);
    int status = AWL_OK;
    for (int lead = 0; lead < o->n && status >= 0; lead++) {
        if (grouped[lead] || !fusable(o, lead)) continue;
        int count = 0;
        bool keep = o->keep_dtype != AWL_F32;
        for (int i = lead; i < o->n; i++) {
            if (grouped[i] || !fusable(o, i) || !awl_same_device(o->params[i], o->params[lead]) ||
                o->steps[i] != o->steps[lead])
                continue;
            grouped[i] = true;
            members[count] = i;
            group[count] = o->params[i];
            group[o->n + count] = o->params[i]->grad;
            group[2 * o->n + count] = o->first[i];
            group[3 * o->n + count] = o->second[i];
            if (keep) keep = (group[4 * o->n + count] = cast_for(o, i)) != NULL;
            decay[count] = (float)adamw_decay(o, i);
            count++;
        }
        awl_adamw_args args = {.lr = (float)o->lr,
                               .beta1 = (float)o->beta1,
                               .beta2 = (float)o->beta2,
                               .eps = (float)o->eps,
                               .step = o->steps[lead] + 1,
                               .grad_scale = (float)o->grad_scale};
        awl_tensor **casts = keep ? group + 4 * o->n : NULL;
        int s = awl_tensor_adamw_step(count, group, group + o->n, group + 2 * o->n,
                                      group + 3 * o->n, casts, decay, &args);
        if (s == AWL_ERR_UNSUPPORTED && casts) { /* a backend without the copies */
            casts = NULL;
            s = awl_tensor_adamw_step(count, group, group + o->n, group + 2 * o->n,
                                      group + 3 * o->n, NULL, decay, &args);
        }
        if (s == AWL_ERR_UNSUPPORTED) continue;
        if (s < 0) {
            status = s;
            break;
        }
        for (int k = 0; k < count; k++) {
            done[members[k]] = true;
            o->steps[members[k]]++;
            /* written with the parameter's new value: current until its next write */
            if (casts && awl_autocast_keep(group[k], casts[k]) < 0) status = AWL_ERR_INVALID;
        }
    }
    free(grouped);
    free(members);
    free(group);
    free(decay);
    return status;
}

/* ---- stepping and gradients ------------------------------------------------------- */

static int scale_grads(int n, awl_tensor **grads, double factor);

int awl_optimizer_step(awl_optimizer *o)
{
    if (!o) return AWL_ERR_INVALID;
    for (int i = 0; i < o->n; i++) {
        awl_tensor *g;
        TRY(grad_of(o, i, &g));
    }
    bool *done = awl_xcalloc((size_t)o->n, sizeof *done);
    int status = AWL_OK;
    awl_profiler_begin(AWL_PROFILE_PHASE, "optimizer");
    if (o->kind == AWL_OPTIM_ADAMW && awl_fused_kernels_enabled()) status = adamw_fused(o, done);
    for (int i = 0; i < o->n && status >= 0; i++) {
        awl_tensor *g = o->params[i]->grad;
        if (done[i] || !g) continue;
        int64_t step = o->steps[i] + 1;
        /* the composed forms apply a clipping factor as awl_clip_grad_norm
         * does, to the grad in place (the scale kernel's bits) */
        if (o->grad_scale != 1.0) status = scale_grads(1, &g, o->grad_scale);
        if (status < 0) break;
        awl_scope_begin();
        status = o->kind == AWL_OPTIM_SGD ? sgd_update(o, i, g, step) : adam_update(o, i, g, step);
        awl_scope_end();
        if (status >= 0) o->steps[i] = step;
    }
    awl_profiler_end();
    free(done);
    o->grad_scale = 1.0;
    if (status < 0) return status;
    o->step_count++;
    return AWL_OK;
}

int awl_optimizer_zero_grad_ex(awl_optimizer *o, bool set_to_none)
{
    if (!o) return AWL_ERR_INVALID;
    o->grad_scale = 1.0;
    for (int i = 0; i < o->n; i++) {
        awl_tensor *p = o->params[i];
        if (!p->grad) continue;
        if (set_to_none)
            awl_clear_grad(p);
        else
            TRY(awl_tensor_fill_(p->grad, 0.0));
    }
    return AWL_OK;
}

int awl_optimizer_zero_grad(awl_optimizer *o) { return awl_optimizer_zero_grad_ex(o, false); }

int awl_optimizer_set_lr(awl_optimizer *o, double lr)
{
    if (!o) return AWL_ERR_INVALID;
    TRY(check_hyper("awl_optimizer_set_lr", "learning rate", lr, 0, INFINITY));
    o->lr = lr;
    return AWL_OK;
}

double awl_optimizer_get_lr(const awl_optimizer *o) { return o ? o->lr : NAN; }

awl_optimizer_kind awl_optimizer_get_kind(const awl_optimizer *o)
{
    return o ? o->kind : AWL_OPTIM_SGD;
}

const char *awl_optimizer_kind_name(const awl_optimizer *o) { return o ? kind_names[o->kind] : ""; }

int64_t awl_optimizer_step_count(const awl_optimizer *o) { return o ? o->step_count : -1; }

int awl_optimizer_set_step_count(awl_optimizer *o, int64_t count)
{
    if (!o) return AWL_ERR_INVALID;
    if (count < 0)
        return awl_error(AWL_ERR_INVALID, "awl_optimizer_set_step_count: negative count %lld",
                         (long long)count);
    o->step_count = count;
    return AWL_OK;
}

int awl_optimizer_num_params(const awl_optimizer *o) { return o ? o->n : -1; }

const char *awl_optimizer_param_name(const awl_optimizer *o, int i)
{
    return o && i >= 0 && i < o->n ? o->names[i] : NULL;
}

int64_t awl_optimizer_param_step(const awl_optimizer *o, int i)
{
    return o && i >= 0 && i < o->n ? o->steps[i] : -1;
}

int awl_optimizer_set_param_step(awl_optimizer *o, int i, int64_t step)
{
    if (!o) return AWL_ERR_INVALID;
    if (i < 0 || i >= o->n || step < 0)
        return awl_error(AWL_ERR_INVALID,
                         "awl_optimizer_set_param_step: parameter %d of %d, step %lld", i, o->n,
                         (long long)step);
    o->steps[i] = step;
    return AWL_OK;
}

int awl_optimizer_num_states(const awl_optimizer *o) { return o ? o->n_states : -1; }

awl_tensor *awl_optimizer_state(const awl_optimizer *o, int i, const char **name)
{
    if (!o || i < 0 || i >= o->n_states) return NULL;
    if (name) *name = o->state_names[i];
    return o->states[i];
}

/* The grads of params, each once (a tied weight listed under two names has
 * one grad); returns their count. */
static int distinct_grads(const awl_param_list *params, awl_tensor **grads)
{
    int n = 0;
    for (int i = 0; i < params->count; i++) {
        awl_tensor *g = params->items[i].tensor->grad;
        if (g && !listed_before(params, i)) grads[n++] = g;
    }
    return n;
}

/* The grads not yet taken that a fused kernel can take together with
 * grads[lead] (one device, one dtype, contiguous), marked taken and listed
 * in group; returns their count (0 when the kernel cannot take grads[lead]). */
static int fused_group(awl_kernel kernel, awl_tensor **grads, int n, bool *taken, int lead,
                       awl_tensor **group)
{
    awl_tensor *g0 = grads[lead];
    if (taken[lead] || !awl_fused_available(kernel, g0) || !awl_is_contiguous(g0)) return 0;
    int count = 0;
    for (int i = lead; i < n; i++)
        if (!taken[i] && awl_is_contiguous(grads[i]) && grads[i]->dtype == g0->dtype &&
            awl_same_device(grads[i], g0)) {
            taken[i] = true;
            group[count++] = grads[i];
        }
    return count;
}

/* Gives the grads of a group the kernel declined back to the composed form. */
static void untake(awl_tensor **grads, int n, bool *taken, awl_tensor **group, int count)
{
    for (int i = 0; i < n; i++)
        for (int k = 0; k < count; k++)
            if (grads[i] == group[k]) taken[i] = false;
}

/* Running float64 sums of squares, one per device, so a step synchronises
 * with each device once rather than once per parameter. */
typedef struct device_sum {
    awl_tensor *like; /* a tensor on the device */
    awl_tensor *sum;  /* float64 scalar there */
} device_sum;

/* Adds the float64 scalar s, on like's device, to that device's sum. */
static int add_to_sums(device_sum *sums, int *n_sums, awl_tensor *like, awl_tensor *s)
{
    if (!s) return AWL_ERR_INVALID;
    for (int k = 0; k < *n_sums; k++)
        if (awl_same_device(sums[k].like, like))
            return awl_tensor_binary_out(AWL_BINARY_ADD, sums[k].sum, sums[k].sum, s);
    sums[(*n_sums)++] = (device_sum){like, s};
    return AWL_OK;
}

/* The composed form for one grad: cast to float64, square, sum. */
static awl_tensor *square_sum(awl_tensor *g)
{
    awl_tensor *g64 = awl_tensor_cast(g, AWL_F64);
    awl_tensor *sq = awl_tensor_binary(AWL_BINARY_MUL, g64, g64);
    return awl_tensor_reduce(AWL_REDUCE_SUM, sq, 0, NULL, false);
}

/* Every grad's sum of squares into the per-device sums: the backend's
 * sum_squares kernel over as many grads at once as it takes (one launch for
 * a whole model on CUDA), the composed form for the rest. */
static int sum_squares(awl_tensor **grads, int n, device_sum *sums, int *n_sums)
{
    bool *taken = awl_xcalloc((size_t)n + 1, sizeof *taken);
    awl_tensor **group = awl_xmalloc(((size_t)n + 1) * sizeof *group);
    int status = AWL_OK;
    for (int lead = 0; lead < n && status >= 0; lead++) {
        int count = fused_group(AWL_KERNEL_SUM_SQUARES, grads, n, taken, lead, group);
        if (count == 0) continue;
        awl_tensor *s = awl_tensor_new_on(group[0], 0, NULL, AWL_F64);
        if (!s) status = AWL_ERR_OOM;
        int fused = s ? awl_tensor_sum_squares(count, group, s) : status;
        if (fused == AWL_ERR_UNSUPPORTED) {
            untake(grads, n, taken, group, count);
            break;
        }
        status = fused < 0 ? fused : add_to_sums(sums, n_sums, group[0], s);
    }
    for (int i = 0; i < n && status >= 0; i++)
        if (!taken[i]) status = add_to_sums(sums, n_sums, grads[i], square_sum(grads[i]));
    free(taken);
    free(group);
    return status;
}

/* The L2 norm of n grads together, or a negative status. */
static double grads_norm(awl_tensor **grads, int n)
{
    device_sum *sums = awl_xcalloc((size_t)n + 1, sizeof *sums);
    int n_sums = 0;
    double total = 0;
    awl_scope_begin();
    int status = sum_squares(grads, n, sums, &n_sums);
    for (int k = 0; k < n_sums && status >= 0; k++) {
        unsigned long errors = awl_error_count();
        total += awl_item(sums[k].sum);
        if (awl_error_count() != errors) status = AWL_ERR_DEVICE;
    }
    awl_scope_end();
    free(sums);
    return status < 0 ? status : sqrt(total);
}

/* The factor that brings a norm down to max_norm, or 1 where it is below:
 * written so that a NaN norm gives a NaN factor, which then scales too, as
 * PyTorch's clamp does. */
static double clip_factor(double max_norm, double norm)
{
    double coef = max_norm / (norm + 1e-6);
    return coef >= 1.0 ? 1.0 : coef;
}

static int check_max_norm(const char *op, double max_norm)
{
    if (!(max_norm >= 0))
        return awl_error(AWL_ERR_INVALID, "%s: max_norm %g must be >= 0", op, max_norm);
    return AWL_OK;
}

double awl_clip_grad_norm(const awl_param_list *params, double max_norm)
{
    if (!params) return AWL_ERR_INVALID;
    TRY(check_max_norm("awl_clip_grad_norm", max_norm));
    awl_tensor **grads = awl_xmalloc(((size_t)params->count + 1) * sizeof *grads);
    int n = distinct_grads(params, grads);
    double norm = grads_norm(grads, n), coef = clip_factor(max_norm, norm);
    int status = norm < 0 ? (int)norm : coef != 1.0 ? scale_grads(n, grads, coef) : AWL_OK;
    free(grads);
    return status < 0 ? status : norm;
}

double awl_optimizer_clip_grad_norm(awl_optimizer *o, double max_norm)
{
    if (!o) return AWL_ERR_INVALID;
    TRY(check_max_norm("awl_optimizer_clip_grad_norm", max_norm));
    awl_tensor **grads = awl_xmalloc(((size_t)o->n + 1) * sizeof *grads);
    int n = 0;
    for (int i = 0; i < o->n; i++)
        if (o->params[i]->grad) grads[n++] = o->params[i]->grad;
    double norm = grads_norm(grads, n);
    free(grads);
    if (norm < 0) return norm;
    o->grad_scale = clip_factor(max_norm, norm);
    return norm;
}

/* grads[i] *= factor for n grads: the backend's scale kernel over as many
 * at once as it takes, MUL_SCALAR (the same bits) for the rest. */
static int scale_grads(int n, awl_tensor **grads, double factor)
{
    awl_tensor **group = awl_xmalloc(((size_t)n + 1) * sizeof *group);
    bool *taken = awl_xcalloc((size_t)n + 1, sizeof *taken);
    int status = AWL_OK;
    for (int lead = 0; lead < n && status >= 0; lead++) {
        int count = fused_group(AWL_KERNEL_SCALE, grads, n, taken, lead, group);
        int fused = count ? awl_tensor_scale(count, group, factor) : AWL_OK;
        if (fused == AWL_ERR_UNSUPPORTED) {
            untake(grads, n, taken, group, count);
            break;
        }
        if (fused < 0) status = fused;
    }
    for (int i = 0; i < n && status >= 0; i++)
        if (!taken[i])
            status = awl_tensor_unary_out(AWL_UNARY_MUL_SCALAR, grads[i], grads[i], factor);
    free(group);
    free(taken);
    return status < 0 ? status : AWL_OK;
}

int awl_scale_grads(const awl_param_list *params, double factor)
{
    if (!params) return AWL_ERR_INVALID;
    awl_tensor **grads = awl_xmalloc(((size_t)params->count + 1) * sizeof *grads);
    int status = scale_grads(distinct_grads(params, grads), grads, factor);
    free(grads);
    return status;
}
