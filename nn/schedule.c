/*
 * nn/schedule.c - learning-rate schedules (see optim.h).
 *
 * A schedule is a pure function of the iteration number rather than an
 * object that advances with each step (PyTorch's LRScheduler): the trainer
 * asks for the rate of iteration `it` and sets it on the optimizer. So a
 * resumed run needs only the iteration count, which the checkpoint already
 * stores, and a plot of the schedule is a loop over awl_lr_at.
 *
 * The warmup-cosine shape is nanoGPT's get_lr, including its warmup
 * (it + 1) / (warmup_iters + 1), which never starts at zero so the first
 * step already moves the weights.
 */
#include <math.h>

#include "nn/optim.h"

awl_lr_schedule awl_lr_constant(double lr)
{
    return (awl_lr_schedule){.kind = AWL_LR_CONSTANT, .lr = lr, .min_lr = lr};
}

awl_lr_schedule awl_lr_warmup_cosine(double lr, int64_t warmup_iters, int64_t lr_decay_iters,
                                     double min_lr)
{
    return (awl_lr_schedule){.kind = AWL_LR_WARMUP_COSINE,
                             .lr = lr,
                             .min_lr = min_lr,
                             .warmup_iters = warmup_iters,
                             .lr_decay_iters = lr_decay_iters};
}

double awl_lr_at(const awl_lr_schedule *s, int64_t it)
{
    if (!s) return NAN;
    if (s->kind == AWL_LR_CONSTANT) return s->lr;
    if (it < s->warmup_iters) return s->lr * (double)(it + 1) / (double)(s->warmup_iters + 1);
    /* a decay window of zero length (or less) is a step down after warmup,
     * where nanoGPT's formula would divide by zero */
    if (it > s->lr_decay_iters || s->lr_decay_iters <= s->warmup_iters) return s->min_lr;
    double ratio = (double)(it - s->warmup_iters) / (double)(s->lr_decay_iters - s->warmup_iters);
    double coeff = 0.5 * (1.0 + cos(M_PI * ratio));
    return s->min_lr + coeff * (s->lr - s->min_lr);
}
