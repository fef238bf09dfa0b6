/*
 * nn/optim.h - optimizers, learning-rate schedules, gradient clipping and
 * gradient accumulation.
 *
 * An optimizer holds its own reference to every parameter of an
 * awl_param_list (nn/param.h) and, per parameter, the state PyTorch keeps
 * (momentum buffer; Adam's exp_avg and exp_avg_sq; a step count). A step
 * reads each parameter's accumulated `grad` and updates the parameter in
 * place with raw ops (tensor/tensor.h), so nothing is recorded in the graph.
 * The formulas are PyTorch's (torch.optim.SGD, Adam, AdamW), in PyTorch's
 * order, so the same hyper-parameters give the same trajectory:
 *
 *     awl_optimizer *opt = awl_adamw_new(params, 1e-3, 0.9, 0.95, 1e-8, 0.1);
 *     awl_lr_schedule sched = awl_lr_warmup_cosine(1e-3, 100, 2000, 1e-4);
 *     for (int64_t it = 0; it < 2000; it++) {
 *         awl_optimizer_set_lr(opt, awl_lr_at(&sched, it));
 *         for (int micro = 0; micro < 4; micro++) {    // gradient accumulation:
 *             ... loss = forward(...) / 4; awl_backward(loss); ...  // grads add up
 *         }
 *         awl_clip_grad_norm(params, 1.0);   // or awl_optimizer_clip_grad_norm(opt, 1.0)
 *         awl_optimizer_step(opt);
 *         awl_optimizer_zero_grad(opt);
 *     }
 *     awl_optimizer_free(opt);
 *
 * Gradient accumulation needs nothing special: backward adds into each
 * leaf's grad until zero_grad. Either divide each micro-batch's loss by the
 * number of micro-batches (as nanoGPT does), or call awl_scale_grads(params,
 * 1.0 / n) once before the step; both give the mean gradient.
 *
 * The optimizer keeps the very tensors it was given: make it after moving
 * the model to its device (as in PyTorch).
 *
 * State is created (zeros) when the optimizer is made, not at the first step
 * as in PyTorch; the first update is the same either way, and a checkpoint
 * can be loaded into a fresh optimizer. The state is exposed by name
 * ("<param>.exp_avg", "<param>.exp_avg_sq", "<param>.momentum_buffer") for
 * nn/checkpoint_io.h.
 *
 * Failure follows common/error.h: constructors return NULL, the others a
 * negative status, after recording a message; a NULL optimizer fails
 * silently.
 */
#ifndef AWL_NN_OPTIM_H
#define AWL_NN_OPTIM_H

#include <stdbool.h>
#include <stdint.h>

#include "nn/param.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- optimizers ------------------------------------------------------------ */

typedef struct awl_optimizer awl_optimizer;

typedef enum awl_optimizer_kind {
    AWL_OPTIM_SGD,
    AWL_OPTIM_ADAM,
    AWL_OPTIM_ADAMW,
} awl_optimizer_kind;

/* torch.optim.SGD with dampening 0:
 *     g = grad + weight_decay * p                  (coupled L2)
 *     buf = g at the first step, else momentum * buf + g
 *     g = nesterov ? g + momentum * buf : buf      (when momentum != 0)
 *     p = p - lr * g
 * A parameter listed twice (the same tensor under two names) is updated
 * once, under its first name. Parameters must be float tensors; the list may
 * be freed after the call. Free with awl_optimizer_free. */
awl_optimizer *awl_sgd_new(const awl_param_list *params, double lr, double momentum,
                           double weight_decay);
/* Nesterov momentum (needs momentum > 0, as PyTorch requires). */
int awl_sgd_set_nesterov(awl_optimizer *opt, bool on);

/* torch.optim.Adam, coupled L2 decay, at step t (counted from 1):
 *     g = grad + weight_decay * p
 *     m = beta1 * m + (1 - beta1) * g
 *     v = beta2 * v + (1 - beta2) * g * g
 *     p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 * (eps outside the square root). */
awl_optimizer *awl_adam_new(const awl_param_list *params, double lr, double beta1, double beta2,
                            double eps, double weight_decay);

/* torch.optim.AdamW: first p = p * (1 - lr * weight_decay) (decoupled
 * decay), then Adam's update without the L2 term. By default only
 * parameters with 2 or more dimensions (matmul weights, embeddings) decay;
 * biases and LayerNorm gains do not, as in nanoGPT's configure_optimizers.
 * Where the backend has the fused adamw_step kernel, float32 contiguous
 * parameters of one device are updated in one call. */
awl_optimizer *awl_adamw_new(const awl_param_list *params, double lr, double beta1, double beta2,
                             double eps, double weight_decay);
/* AdamW: decay every parameter (all = true) or only those of 2+ dimensions. */
int awl_adamw_set_decay_all(awl_optimizer *opt, bool all);
/* AdamW for mixed precision: with dtype AWL_BF16, the fused step also
 * writes each float32 parameter's value rounded to bfloat16 into a copy the
 * optimizer keeps (2 bytes a parameter, allocated at the first step, in the
 * same pass as the update, the copy kernel's rounding), and hands the
 * copies to autocast (nn/nn.h's awl_autocast_keep), so that the next
 * bfloat16 forward reads them instead of casting the weights again: the
 * same bits and the same gradients, without the cast's pass over the
 * weights. A parameter written by anything else since the step is cast as
 * before. AWL_F32 turns it off and frees the copies. Parameters the fused
 * kernel does not take (composed updates) keep no copy. */
int awl_optimizer_keep_casts(awl_optimizer *opt, awl_dtype dtype);
/* Parameter i's kept copy (borrowed) as the last fused step wrote it, or
 * NULL: keeping off, no fused step yet, or i out of range. */
awl_tensor *awl_optimizer_kept_cast(const awl_optimizer *opt, int i);

/* Frees the optimizer, its state, and its references to the parameters.
 * NULL is a no-op. */
void awl_optimizer_free(awl_optimizer *opt);

/* Updates every parameter that has a grad (one without is skipped and its
 * step count does not advance, as in PyTorch). Returns 0 or a negative
 * status; after a failure some parameters may have been updated. */
int awl_optimizer_step(awl_optimizer *opt);

/* Zeroes every parameter's grad in place, keeping the buffers, so the next
 * backward accumulates into them without allocating. */
int awl_optimizer_zero_grad(awl_optimizer *opt);
/* As zero_grad, or, with set_to_none, drops the grads (awl_clear_grad). */
int awl_optimizer_zero_grad_ex(awl_optimizer *opt, bool set_to_none);

int awl_optimizer_set_lr(awl_optimizer *opt, double lr);
double awl_optimizer_get_lr(const awl_optimizer *opt); /* NaN for NULL */
awl_optimizer_kind awl_optimizer_get_kind(const awl_optimizer *opt);
/* "sgd", "adam", "adamw" ("" for NULL). */
const char *awl_optimizer_kind_name(const awl_optimizer *opt);

/* ---- optimizer state, for checkpoints ------------------------------------------ */

/* Number of successful awl_optimizer_step calls (restorable). */
int64_t awl_optimizer_step_count(const awl_optimizer *opt);
int awl_optimizer_set_step_count(awl_optimizer *opt, int64_t count);

/* The parameters the optimizer updates, in list order without duplicates:
 * their number, the i-th name (borrowed), and its own step count (how many
 * updates it has had; bias corrections use it). -1 / NULL when out of range. */
int awl_optimizer_num_params(const awl_optimizer *opt);
const char *awl_optimizer_param_name(const awl_optimizer *opt, int i);
int64_t awl_optimizer_param_step(const awl_optimizer *opt, int i);
int awl_optimizer_set_param_step(awl_optimizer *opt, int i, int64_t step);

/* The state tensors, in parameter order: their number, and the i-th one
 * with its name ("<param>.exp_avg"), both borrowed and valid until the
 * optimizer is freed. A checkpoint loader writes into them in place (same
 * shape, dtype and device as the parameter). NULL when out of range. */
int awl_optimizer_num_states(const awl_optimizer *opt);
awl_tensor *awl_optimizer_state(const awl_optimizer *opt, int i, const char **name);

/* ---- gradients ------------------------------------------------------------------ */

/* Like torch.nn.utils.clip_grad_norm_: the L2 norm of all grads together
 * (accumulated in float64 on each grad's device, by the backend's
 * sum_squares kernel over all of a device's grads at once where it has one,
 * and the grads scaled by its scale kernel); with
 * c = max_norm / (norm + 1e-6), every grad is scaled in place by c unless
 * c >= 1. Parameters without a grad are skipped. Returns the norm before
 * clipping (inf or NaN when a grad holds them; the grads are then scaled by
 * 0 or NaN, as PyTorch does), or a negative value after recording an error
 * (max_norm < 0, a device fault). */
double awl_clip_grad_norm(const awl_param_list *params, double max_norm);

/* Gradient clipping fused with the optimizer's next step: the norm of the
 * grads of the optimizer's parameters, as awl_clip_grad_norm measures it,
 * and the factor c, which the next awl_optimizer_step applies to each
 * gradient as it reads it instead of a pass that scales the grads first.
 * The fused AdamW kernel takes c as an argument and leaves the grads as
 * backward made them; the composed forms scale a grad in place before its
 * update. Either way the parameters and the optimizer's state come out
 * bit for bit as after awl_clip_grad_norm then awl_optimizer_step. The
 * factor is dropped by the step and by zero_grad. Returns the norm before
 * clipping, or a negative value after recording an error. */
double awl_optimizer_clip_grad_norm(awl_optimizer *opt, double max_norm);

/* Multiplies every existing grad by factor in place (1 / n after
 * accumulating n micro-batches). Returns 0 or a negative status. */
int awl_scale_grads(const awl_param_list *params, double factor);

/* ---- learning-rate schedules (nn/schedule.c) ------------------------------------- */

typedef enum awl_lr_kind {
    AWL_LR_CONSTANT,
    AWL_LR_WARMUP_COSINE,
} awl_lr_kind;

/* A schedule is plain data; awl_lr_at is a pure function of it and the
 * iteration, so resuming at iteration k needs nothing but k. */
typedef struct awl_lr_schedule {
    awl_lr_kind kind;
    double lr;              /* constant, or peak after warmup             */
    double min_lr;          /* floor of the cosine decay                  */
    int64_t warmup_iters;   /* linear warmup over iterations [0, warmup)  */
    int64_t lr_decay_iters; /* cosine reaches min_lr at this iteration    */
} awl_lr_schedule;

awl_lr_schedule awl_lr_constant(double lr);
awl_lr_schedule awl_lr_warmup_cosine(double lr, int64_t warmup_iters, int64_t lr_decay_iters,
                                     double min_lr);

/* The learning rate of iteration `it` (counted from 0), nanoGPT's get_lr:
 *   it < warmup_iters:       lr * (it + 1) / (warmup_iters + 1)
 *   it > lr_decay_iters:     min_lr
 *   otherwise, with r = (it - warmup_iters) / (lr_decay_iters - warmup_iters),
 *                            min_lr + 0.5 * (1 + cos(pi * r)) * (lr - min_lr)
 * When lr_decay_iters <= warmup_iters the decay is a step to min_lr right
 * after warmup. A constant schedule returns lr; NULL gives NaN. */
double awl_lr_at(const awl_lr_schedule *schedule, int64_t it);

#ifdef __cplusplus
}
#endif

#endif
