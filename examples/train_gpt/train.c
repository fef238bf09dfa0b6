/*
 * examples/train_gpt/train.c - the training step, evaluation and the loop
 * around them: progress, the CSV log, periodic checkpoints, signals.
 *
 * One step (train_step) is grad_accum micro-batches of forward and
 * backward, the global gradient norm (clipped when --grad-clip is on), and
 * the optimizer's update. A step whose loss or gradient norm is not finite
 * stops the run before the update, naming the step and the first tensor
 * that went bad, and nothing is saved: a checkpoint is only ever written
 * from finite weights.
 *
 * Data-parallel (t->ddp): every micro-batch but the last runs under
 * no_sync, the last one's backward sends the buckets, and awl_ddp_wait
 * before the update leaves every rank with the mean gradient. A rank does
 * not stop alone on a non-finite loss: the averaged gradient's norm, the
 * same on every rank, stops all of them at the same step. After each step
 * the ranks exchange their loss and whether a signal came (one small
 * allgather), so the log shows the global mean loss and they all stop
 * after the same step.
 *
 * Evaluation estimates each split's loss on eval_iters batches drawn from a
 * stream of its own (awl_text_dataset_batch_at under t->eval_seed), the same
 * batches at every evaluation: it reads neither the training stream nor the
 * dropout generator, so evaluating more or less often, or resuming at a
 * point where an evaluation ran, leaves the training run bitwise the same.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "train_gpt.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void format_duration(double seconds, char *buf, size_t size)
{
    long s = (long)(seconds + 0.5);
    if (s >= 3600)
        snprintf(buf, size, "%ldh%02ldm", s / 3600, (s / 60) % 60);
    else if (s >= 60)
        snprintf(buf, size, "%ldm%02lds", s / 60, s % 60);
    else
        snprintf(buf, size, "%lds", s);
}

/* ---- progress ------------------------------------------------------------------- */

typedef struct progress {
    bool tty;
    int64_t start_step, total_steps;
    double start_time;
} progress;

/* `step` is the number of steps done, counting the one just finished;
 * comm, when not negative, the share of time spent waiting for the ranks'
 * gradients. */
static void show_progress(const progress *p, int64_t step, double loss, double lr, double tok_s,
                          double mfu, double comm, int64_t log_interval)
{
    int64_t done = step - p->start_step, todo = p->total_steps - step;
    double elapsed = now() - p->start_time;
    char eta[32], wait[32] = "";
    format_duration(done > 0 ? elapsed / (double)done * (double)todo : 0, eta, sizeof eta);
    if (comm >= 0) snprintf(wait, sizeof wait, "  comm %.0f%%", 100 * comm);
    if (p->tty) {
        enum { WIDTH = 24 };
        int filled = (int)((double)step / (double)p->total_steps * WIDTH);
        char bar[WIDTH + 1];
        for (int i = 0; i < WIDTH; i++) bar[i] = i < filled ? '#' : '.';
        bar[WIDTH] = '\0';
        printf("\r\033[K[%s] step %lld/%lld  loss %.4f  lr %.2e  %.1fk tok/s  MFU %.1f%%%s  ETA %s",
               bar, (long long)step, (long long)p->total_steps, loss, lr, tok_s / 1e3, 100 * mfu,
               wait, eta);
        fflush(stdout);
    } else if (step % log_interval == 0 || step == p->total_steps || done == 1) {
        printf("step %lld/%lld  loss %.4f  lr %.2e  %.1fk tok/s  MFU %.1f%%%s  ETA %s\n",
               (long long)step, (long long)p->total_steps, loss, lr, tok_s / 1e3, 100 * mfu, wait,
               eta);
        fflush(stdout);
    }
}

/* ---- non-finite values ----------------------------------------------------------- */

/* The first parameter, or else gradient, that holds NaN or infinity. */
static void describe_non_finite(trainer *t, char *buf, size_t size)
{
    const awl_param_list *params = awl_gpt_parameters(t->model);
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < params->count; i++) {
            awl_tensor *p = params->items[i].tensor;
            double v = 0;
            int64_t at = awl_tensor_first_non_finite(pass == 0 ? p : p->grad, &v);
            if (at >= 0) {
                snprintf(buf, size, "the first non-finite tensor is the %s %s (%s at element %lld)",
                         pass == 0 ? "parameter" : "gradient of", params->items[i].name,
                         isnan(v) ? "NaN"
                         : v > 0  ? "+inf"
                                  : "-inf",
                         (long long)at);
                return;
            }
        }
    }
    snprintf(buf, size, "every parameter and gradient is finite: the forward pass overflowed");
}

static int non_finite(trainer *t, const char *what, double value)
{
    char where[512];
    describe_non_finite(t, where, sizeof where);
    return complain("step %lld: %s is %s; %s. Stopped before the update%s (try a lower --lr)",
                    (long long)t->state.step + 1, what, isnan(value) ? "NaN" : "infinite", where,
                    t->s.save ? ", nothing saved" : "");
}

static int step_failed(trainer *t, const char *what)
{
    char buf[128];
    snprintf(buf, sizeof buf, "step %lld: %s", (long long)t->state.step + 1, what);
    return fail(buf);
}

/* ---- one step ------------------------------------------------------------------- */

/* The mean of a step's micro-batch losses, read once its gradient norm
 * has been: by then the device has finished every forward, so reading the
 * losses waits for nothing, where reading each before its backward would
 * stop the host until the device caught up, once per micro-batch, and
 * leave the device idle while the host queued the backward. false when
 * one is not finite, *bad then the first such. */
static bool read_losses(trainer *t, awl_tensor **losses, int n, double *mean, double *bad)
{
    double total = 0;
    bool finite = true;
    for (int i = 0; i < n; i++) {
        double value = awl_item(losses[i]) * t->s.grad_accum;
        if (finite && !isfinite(value)) {
            finite = false;
            *bad = value;
        }
        total += value;
    }
    *mean = total / n;
    return finite;
}

/* The step's loss array; slots not reached yet are NULL (calloc). */
static void release_all(awl_tensor **losses, int n)
{
    for (int i = 0; i < n; i++) awl_release(losses[i]);
    free(losses);
}

/* One optimizer step over grad_accum micro-batches; *mean_loss is their
 * mean loss. 0, or -1 after printing why. */
static int train_step(trainer *t, double lr, double *mean_loss)
{
    const settings *s = &t->s;
    if (set_lr(t, lr) < 0) return step_failed(t, "setting the learning rate");
    awl_tensor **losses = calloc((size_t)s->grad_accum, sizeof *losses);
    if (!losses) return step_failed(t, "out of memory");
    for (int micro = 0; micro < s->grad_accum; micro++) {
        bool local = micro < s->grad_accum - 1; /* accumulate without sending */
        if (local) accumulate_locally(t, true);
        awl_scope_begin();
        awl_tensor *x, *y, *loss = NULL;
        awl_profiler_begin(AWL_PROFILE_PHASE, "data");
        int got = awl_text_dataset_batch(t->data, AWL_SPLIT_TRAIN, t->cfg.batch, s->device, &x, &y);
        awl_profiler_end();
        if (got == 0) {
            awl_profiler_begin(AWL_PROFILE_PHASE, "forward");
            loss = awl_keep(model_loss(t, x, y, 1.0 / s->grad_accum));
            awl_profiler_end();
        }
        awl_scope_end();
        if (!loss) {
            release_all(losses, s->grad_accum);
            return step_failed(t, "forward");
        }
        losses[micro] = loss;
        int status = awl_backward(loss);
        if (local) accumulate_locally(t, false);
        if (status < 0) {
            release_all(losses, s->grad_accum);
            return step_failed(t, "backward");
        }
    }
    awl_profiler_begin(AWL_PROFILE_COMM, "wait for gradients");
    int waited = wait_gradients(t);
    awl_profiler_end();
    if (waited < 0) {
        release_all(losses, s->grad_accum);
        return step_failed(t, "averaging the gradients");
    }
    /* the norm is measured even without clipping: it is the check that
     * every gradient is finite */
    awl_profiler_begin(AWL_PROFILE_PHASE, "grad_clip");
    double norm = clip_gradients(t, s->grad_clip > 0 ? s->grad_clip : INFINITY);
    awl_profiler_end();
    /* a rank alone does not stop on its loss: DDP ranks stop together on
     * the norm (see above) */
    double bad = 0;
    bool finite = read_losses(t, losses, s->grad_accum, mean_loss, &bad);
    release_all(losses, s->grad_accum);
    if (!finite && t->world == 1) return non_finite(t, "the loss", bad);
    if (!isfinite(norm)) return non_finite(t, "the gradient norm", norm);
    if (norm < 0) return step_failed(t, "clipping the gradients");
    if (optimizer_step(t) < 0) return step_failed(t, "the optimizer");
    if (zero_gradients(t) < 0) return step_failed(t, "zeroing the gradients");
    return 0;
}

/* ---- evaluation ---------------------------------------------------------------- */

/* Mean loss over eval_iters batches of a split, in evaluation mode. */
static int evaluate(trainer *t, awl_data_split split, double *mean)
{
    awl_module_train(awl_gpt_module(t->model), false);
    awl_tp_gpt_train(t->tp_model, false);
    awl_no_grad_begin();
    double sum = 0;
    int status = 0;
    for (int i = 0; i < t->s.eval_iters && status == 0; i++) {
        awl_scope_begin();
        awl_tensor *x, *y;
        if (awl_text_dataset_batch_at(t->data, split, t->eval_seed, (uint64_t)i, t->cfg.batch,
                                      t->s.device, &x, &y) == 0)
            sum += awl_item(model_loss(t, x, y, 1.0));
        else
            status = -1;
        awl_scope_end();
    }
    awl_no_grad_end();
    awl_module_train(awl_gpt_module(t->model), true);
    awl_tp_gpt_train(t->tp_model, true);
    if (status < 0) return step_failed(t, "evaluation");
    *mean = sum / t->s.eval_iters;
    if (!isfinite(*mean))
        return complain("step %lld: the %s loss is %s", (long long)t->state.step,
                        split == AWL_SPLIT_TRAIN ? "train" : "val",
                        isnan(*mean) ? "NaN" : "infinite");
    return 0;
}

/* ---- the loop ------------------------------------------------------------------ */

typedef struct speed {
    double peak;   /* MFU's denominator: the hardware's peak of all ranks together, FLOP/s */
    double matmul; /* the sgemm ceiling measured at start-up, FLOP/s */
    char peak_source[160];
    double flops_per_token;
    int64_t tokens_per_step; /* all ranks together */
    double window_start, window_wait;
    int window_steps;
    bool had_window; /* a window has been complete */
    double tok_s, mfu, comm; /* comm: share of the time spent waiting for gradients */
} speed;

/* evaluate(), as a phase of the trace. */
static int evaluate_profiled(trainer *t, awl_data_split split, double *mean)
{
    awl_profiler_begin(AWL_PROFILE_PHASE, "eval");
    int status = evaluate(t, split, mean);
    awl_profiler_end();
    return status;
}

/* The speed over a window of steps (half a second, or 20 steps); until the
 * first window is complete, over the steps so far, so that a short run
 * does not log 0 tokens/s. */
static void speed_update(speed *v, const trainer *t)
{
    v->window_steps++;
    v->window_wait += gradient_wait_seconds(t);
    double elapsed = now() - v->window_start;
    bool complete = elapsed > 0.5 || v->window_steps >= 20;
    if ((complete || !v->had_window) && elapsed > 0) {
        v->tok_s = (double)v->tokens_per_step * v->window_steps / elapsed;
        v->mfu = v->peak > 0 ? v->tok_s * v->flops_per_token / v->peak : 0;
        v->comm = v->window_wait / elapsed;
    }
    if (complete) {
        v->had_window = true;
        v->window_start = now();
        v->window_steps = 0;
        v->window_wait = 0;
    }
}

/* The mean of the ranks' losses and the strongest signal any rank had got
 * when it came here (SIGTERM over SIGINT, 0 for none): all ranks log alike
 * and stop after the same step, whatever a signal arriving meanwhile does
 * to stop_signal. */
static int agree(trainer *t, double *loss, int *stop)
{
    *stop = stop_signal;
    if (t->world == 1) return 0;
    double mine[2] = {*loss, (double)*stop}, *all = calloc((size_t)t->world * 2, sizeof *all);
    awl_scope_begin();
    awl_tensor *out = awl_empty(AWL_SHAPE((int64_t)t->world * 2), AWL_F64, "cpu");
    int status = awl_dist_allgather(t->pg, out, awl_from_data(mine, AWL_SHAPE(2), AWL_F64, "cpu"));
    if (status == 0) status = awl_to_host(out, all, (size_t)t->world * 2 * sizeof *all);
    awl_scope_end();
    double sum = 0;
    int sig = 0;
    for (int r = 0; r < t->world && status == 0; r++) {
        sum += all[2 * r];
        if ((int)all[2 * r + 1] > sig) sig = (int)all[2 * r + 1];
    }
    free(all);
    if (status < 0) return step_failed(t, "exchanging the ranks' losses");
    *loss = sum / t->world;
    *stop = sig;
    if (sig) stop_signal = sig;
    return 0;
}

static void print_banner(const trainer *t, const speed *v)
{
    const settings *s = &t->s;
    const char *from = s->resume      ? " (from the checkpoint)"
                       : s->init_from ? " (from the weights)"
                                      : "";
    printf("model: %s%s, %lld parameters (%d layers, %d heads, width %d, block %d, vocab %d %s, "
           "batch %d, dropout %g)\n",
           s->init_from ? s->init_from : s->config, from, (long long)awl_gpt_num_params(t->model),
           t->cfg.n_layer, t->cfg.n_head, t->cfg.n_embd, t->cfg.block, t->cfg.vocab,
           awl_tokenizer_kind(t->tok), t->cfg.batch, t->cfg.dropout);
    printf("training: steps %lld to %lld of %lld tokens on %s (%s), %d threads; matmul ceiling "
           "%.1f GFLOP/s; MFU against %.1f GFLOP/s (%s)\n",
           (long long)t->state.step + 1, (long long)s->steps, (long long)v->tokens_per_step,
           s->device, s->precision, awl_get_num_threads(), v->matmul * 1e-9, v->peak * 1e-9,
           v->peak_source);
    if (t->ddp && !t->tp) {
        awl_ddp_stats st;
        awl_ddp_get_stats(t->ddp, &st);
        printf("data-parallel: %d ranks over %s, each %lld tokens a step (its own batches); "
               "gradients averaged in %d buckets of %.1f MB together; rank 0 logs, evaluates and "
               "saves\n",
               t->world, awl_dist_backend(t->pg), (long long)(v->tokens_per_step / t->world), st.n_buckets,
               (double)st.bucket_bytes / 1e6);
    } else if (t->world > 1) {
        char how[160] = "";
        if (t->zero)
            snprintf(how, sizeof how, "ZeRO stage %d: each rank keeps 1/%d of the optimizer "
                                      "state%s", t->s.zero, t->dp_world,
                     t->s.zero == 2 ? " and of the gradients" : "");
        else
            snprintf(how, sizeof how, "%d data-parallel replicas of %d tensor-parallel ranks "
                                      "(each block split over them)",
                     t->dp_world, t->s.tensor_parallel);
        printf("parallel: %d ranks over %s, %s; %lld tokens a step in all; rank 0 logs, "
               "evaluates and saves\n",
               t->world, awl_dist_backend(t->pg), how, (long long)v->tokens_per_step);
    }
    awl_blas_info blas;
    if (strncmp(s->device, "cpu", 3) == 0 && awl_blas_get_info(&blas) == 0)
        printf("blas: %s, %s kernels (chosen by %s; this CPU has %s), %d threads; float32 "
               "products: %s\n",
               blas.library, blas.kernels, blas.chosen_by, blas.cpu_features, blas.threads,
               blas.gemm_f32);
    if (strcmp(s->schedule, "cosine") == 0)
        printf("schedule: lr %g, warmup %lld steps, cosine to %g at step %lld%s\n", s->lr,
               (long long)s->warmup, s->min_lr, (long long)s->decay_steps,
               s->decay_steps < s->steps ? ", then constant" : "");
    else
        printf("schedule: constant lr %g\n", s->lr);
}

static void print_memory(trainer *t);

int train(trainer *t)
{
    settings *s = &t->s;
    bool tty = isatty(STDOUT_FILENO);
    speed v = {0};
    /* MFU against the hardware's fixed peak in the run's precision (TF32's
     * with --precision tf32), so it cannot read above 100%; the sgemm rate
     * is shown beside it (the probe leaves the generator alone) */
    v.peak = mfu_peak(t, v.peak_source, sizeof v.peak_source);
    v.matmul =
        awl_gpt_matmul_rate(s->device, strcmp(s->precision, "bf16") == 0 ? AWL_BF16 : AWL_F32) *
        t->world;
    v.flops_per_token = awl_gpt_flops_per_token(&t->cfg);
    v.tokens_per_step = (int64_t)t->cfg.batch * t->cfg.block * s->grad_accum * t->dp_world;
    print_banner(t, &v);
    progress p = {tty, t->state.step, s->steps, now()};
    v.window_start = now();
    double best_val = INFINITY; /* small corpora overfit: the best is what to keep */
    int64_t best_step = 0;
    bool target_met = false;
    while (t->state.step < s->steps) {
        double lr = awl_lr_at(&t->schedule, t->state.step), loss = 0;
        int stop = 0;
        if (profile_step_begin(t, t->state.step + 1) < 0) return -1;
        if (train_step(t, lr, &loss) < 0 || agree(t, &loss, &stop) < 0) {
            if (tty) printf("\n");
            return -1;
        }
        awl_profiler_end(); /* the step's range */
        t->state.step++;
        int64_t step = t->state.step;
        awl_memory_ledger ledger;
        ledger_step(t, step, step % s->log_interval == 0 || step == s->steps, &ledger);
        speed_update(&v, t);
        show_progress(&p, step, loss, lr, v.tok_s, v.mfu, t->ddp || t->zero ? v.comm : -1,
                      s->log_interval);
        bool last = step == s->steps;
        /* the split model evaluates on all its ranks (its forward has collectives) */
        bool eval = (is_leader(t) || t->tp_model) && !stop &&
                    (last || (s->eval_interval > 0 && step % s->eval_interval == 0));
        double val = NAN, train_eval = NAN;
        if (eval) {
            if (evaluate_profiled(t, AWL_SPLIT_TRAIN, &train_eval) < 0 ||
                evaluate_profiled(t, AWL_SPLIT_VAL, &val) < 0)
                return -1;
            printf("%sstep %lld: train loss %.4f, val loss %.4f (%.0f s)\n", tty ? "\r\033[K" : "",
                   (long long)step, train_eval, val, now() - p.start_time);
            if (val < best_val) {
                best_val = val;
                best_step = step;
            }
            if (s->target_loss > 0 && !target_met && val <= s->target_loss) {
                target_met = true;
                printf("target: val loss %.4f <= %.4f at step %lld, %.1f s after training began\n",
                       val, s->target_loss, (long long)step, now() - p.start_time);
            }
            v.window_start = now(); /* evaluation time is not training speed */
            v.window_steps = 0;
            v.window_wait = 0;
        }
        if (t->log) {
            memory_use m;
            memory_ledger(t, &m);
            fprintf(t->log, "%lld,%.6f,", (long long)step, loss);
            if (eval) fprintf(t->log, "%.6f", val);
            fprintf(t->log, ",%.6e,%.1f,%.4f,%.2f,%lld,%lld,%lld,%lld", lr, v.tok_s, v.mfu,
                    now() - p.start_time, (long long)m.params, (long long)m.grads,
                    (long long)m.optimizer, (long long)m.peak);
            for (int r = 0; r < AWL_MEMORY_ROLE_COUNT; r++)
                fprintf(t->log, ",%lld", (long long)ledger.max[r]);
            fprintf(t->log, ",%lld,%lld\n", (long long)ledger.cached_free, (long long)ledger.peak);
            fflush(t->log);
        }
        if (profile_step_end(t, step, last || stop) < 0) return -1;
        if (stop) {
            if (tty) printf("\n");
            printf("train_gpt: %s: stopped after step %lld\n", stop == SIGINT ? "SIGINT" : "SIGTERM",
                   (long long)step);
            return stop;
        }
        if (s->save && s->save_interval > 0 && step % s->save_interval == 0 && !last &&
            save_checkpoint(t, s->save) < 0)
            return -1;
    }
    if (tty) printf("\n");
    double elapsed = now() - p.start_time;
    printf("done: %lld steps in %.1f s", (long long)(s->steps - p.start_step), elapsed);
    if (best_step) printf("; best val loss %.4f at step %lld", best_val, (long long)best_step);
    if (s->target_loss > 0 && !target_met) printf("; val loss never reached %.4f", s->target_loss);
    printf("\n");
    print_memory(t);
    double run_tok_s = (double)v.tokens_per_step * (double)(s->steps - p.start_step) / elapsed;
    if (t->world > 1 && s->baseline_tokens_per_s > 0)
        printf("scaling: %.1fk tokens/s on %d ranks against %.1fk on one: %.2fx, efficiency "
               "%.0f%%\n",
               run_tok_s / 1e3, t->world, s->baseline_tokens_per_s / 1e3,
               run_tok_s / s->baseline_tokens_per_s,
               100 * run_tok_s / s->baseline_tokens_per_s / t->world);
    return 0;
}

/* The memory ledger of rank 0, from the tensors it holds. */
static void print_memory(trainer *t)
{
    memory_use m;
    memory_ledger(t, &m);
    int64_t held = m.params + m.grads + m.optimizer;
    printf("memory (rank %d): parameters %.2f MB, gradients %.2f MB, optimizer state %.2f MB, "
           "activations and temporaries at the peak %.2f MB, peak %.2f MB\n",
           t->rank, m.params / 1e6, m.grads / 1e6, m.optimizer / 1e6,
           (m.peak > held ? m.peak - held : 0) / 1e6, m.peak / 1e6);
}
