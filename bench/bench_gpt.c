/*
 * bench/bench_gpt.c - GPT training speed and memory, one JSON line per run.
 *
 *     ./build/bench_gpt                                   # cpu-small and cpu-medium
 *     ./build/bench_gpt --configs cpu-medium --n-layer 8 --checkpoint-activations both
 *     ./build/bench_gpt --device cuda --configs shakespeare-char,gpt2-124m --precisions
 * fp32,tf32,bf16
 *
 * One timed step is what train_gpt does: zero_grad, forward, cross-entropy,
 * backward, gradient clipping when --grad-clip X > 0 (off by default: the
 * CPU peer does not clip, the GPU peer clips to 1.0, and scripts/gpu_run.sh
 * passes --grad-clip 1; awl_optimizer_clip_grad_norm, whose factor the
 * AdamW step applies as it reads the gradients), AdamW step (constant LR; dropout 0 unless
 * --dropout P, which applies nanoGPT's dropout to the embeddings, the
 * attention weights and the residual branches, as the PyTorch peer's
 * --dropout does), as the PyTorch peer script
 * (../shared/peers/torch_gpt_*.py) times it; batches are drawn before the
 * timer starts. Reported per run:
 *
 *   ms_per_step   median over the timed steps
 *   host_ms_per_step  median time for the host to issue a step (until
 *                 train_one returns; a GPU may still be running it). On a
 *                 GPU, ms_per_step less this is what was still queued;
 *                 with --grad-clip the host waits for the backward, whose
 *                 norm it reads back
 *   tokens_per_s  batch * block / median step time
 *   mfu           model FLOPs per second (6 N + 12 L T C per token) over the
 *                 device's fixed peak for the run's precision
 *                 (awl_device_peak_flops: the CPU's FMA peak, measured once
 *                 and cached; a GPU's datasheet rate), peak_tflops
 *   of_ceiling    the same over the matmul rate of the run's precision
 *                 (float32, TF32, or bfloat16 for bf16 mixed precision)
 *                 measured on the device in this process just before the
 *                 run (matmul_ceiling_tflops): the gap to the sgemm ceiling
 *   split_ms, split_share  the step split into matmul, attention,
 *                 LayerNorm, GELU, cross-entropy, optimizer and the rest
 *                 (everything else, the host's time between kernels too),
 *                 from PROFILED_STEPS more steps run under the op profiler
 *                 after the timed ones (tensor/profiler.h), so the
 *                 profiler's own cost is not in ms_per_step
 *   peak_mb       highest bytes held by tensors on the device during the
 *                 timed steps (awl_memory_get_stats)
 *   activation_peak_mb  that peak less what is held between steps
 *                 (parameters, gradients, optimizer state): the memory
 *                 activations and temporaries take, which checkpointing cuts
 *   rss_mb        the process's peak resident set (CPU runs: compare with
 *                 PyTorch's figure, which is its peak RSS)
 *   back_to_back_ms_per_step  the timed steps' count of steps more, run
 *                 as train_gpt runs them: no wait for the device between
 *                 steps (the batch's copy and the next step's launches can
 *                 overlap the last step's kernels), the whole run timed
 *                 once and divided by its steps, the loss read at the end.
 *                 On a CPU it equals ms_per_step up to noise; on a GPU the
 *                 difference is what the synchronisation around each timed
 *                 step (which the PyTorch peer's timing has too) hides
 *   clip_ms, clip_composed_ms  with --grad-clip: one awl_clip_grad_norm over
 *                 the model's gradients after the timed steps, with the
 *                 backend's sum_squares and scale kernels and with the
 *                 composed ops (a cast, a square, a sum, an add and a scaling
 *                 per gradient), median of 7
 *
 * --keep-casts off (bf16 only): AdamW does not write the weights' bfloat16
 * copies (awl_optimizer_keep_casts, which train_gpt turns on for bf16), so
 * every forward casts the weights again; for the comparison.
 *
 * --extras off leaves out what runs after the timed steps (the profiled
 * split, the back-to-back steps and the clipping figures, and their
 * fields): then a run is its warm-up and timed steps only, which
 * scripts/profile_kernels.py needs (it takes the difference of two runs
 * that must differ by steps alone).
 *
 * Data: tokens of ../shared/data/tinyshakespeare.txt when it is there (char
 * vocabulary, 65), otherwise uniformly random tokens: speed does not depend
 * on which.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "awl.h"
#include "bench/bench_util.h"

#define PROFILED_STEPS 3

/* The parts of a step bench_gpt reports, and which kernels make each. */
enum {
    PART_MATMUL,
    PART_ATTENTION,
    PART_LAYERNORM,
    PART_GELU,
    PART_CROSS_ENTROPY,
    PART_OPTIMIZER,
    PART_REST,
    N_PARTS
};
static const char *const part_names[N_PARTS] = {"matmul",        "attention", "layernorm", "gelu",
                                                "cross_entropy", "optimizer", "rest"};

static bool starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

static int part_of(const awl_profile_op *op)
{
    if (strcmp(op->phase, "optimizer") == 0) return PART_OPTIMIZER;
    if (starts_with(op->name, "matmul")) return PART_MATMUL;
    if (starts_with(op->name, "attention") || starts_with(op->name, "softmax"))
        return PART_ATTENTION;
    /* a residual addition fused with the LayerNorm after it counts as LayerNorm */
    if (starts_with(op->name, "layernorm") || strcmp(op->name, "dropout_add_layernorm") == 0)
        return PART_LAYERNORM;
    if (starts_with(op->name, "gelu")) return PART_GELU;
    if (starts_with(op->name, "cross_entropy")) return PART_CROSS_ENTROPY;
    return PART_REST;
}

typedef struct bench_options {
    const char *configs, *device, *precisions, *checkpointing, *data;
    int steps, warmup, threads, n_layer, batch;
    double dropout, grad_clip;
    bool extras;     /* the split, back-to-back steps and clipping figures after the timed steps */
    bool keep_casts; /* bf16: AdamW writes the weights' bfloat16 copies (train_gpt's way) */
} bench_options;

/* A batch of windows of `tokens` (or random ids) as int32 (B, T) pairs. */
static int make_batch(const int32_t *tokens, size_t n_tokens, int vocab, int B, int T,
                      uint64_t draw, const char *device, awl_tensor **x, awl_tensor **y)
{
    int32_t *hx = malloc((size_t)B * T * sizeof *hx), *hy = malloc((size_t)B * T * sizeof *hy);
    for (int b = 0; b < B; b++) {
        awl_philox_block r = awl_philox4x32(draw, (uint64_t)b);
        size_t start = tokens ? r.w[0] % (n_tokens - (size_t)T - 1) : 0;
        for (int t = 0; t < T; t++) {
            awl_philox_block q = awl_philox4x32(draw + 1, (uint64_t)b * T + t);
            hx[b * T + t] = tokens ? tokens[start + t] : (int32_t)(q.w[0] % (uint32_t)vocab);
            hy[b * T + t] = tokens ? tokens[start + t + 1] : (int32_t)(q.w[1] % (uint32_t)vocab);
        }
    }
    *x = awl_from_data(hx, AWL_SHAPE(B, T), AWL_I32, device);
    *y = awl_from_data(hy, AWL_SHAPE(B, T), AWL_I32, device);
    free(hx);
    free(hy);
    return *x && *y ? 0 : -1;
}

/* One step as the benchmark times it (the caller waits for the device);
 * grad_clip > 0 clips the gradients' norm first, as the GPU peer does. */
static int train_one(awl_gpt *model, awl_optimizer *opt, double grad_clip, awl_tensor *x,
                     awl_tensor *y, awl_tensor **loss)
{
    awl_optimizer_zero_grad_ex(opt, true); /* set_to_none, as the PyTorch peer */
    *loss = awl_gpt_loss(model, x, y);
    if (!*loss || awl_backward(*loss) < 0) return -1;
    if (grad_clip > 0 && awl_optimizer_clip_grad_norm(opt, grad_clip) < 0) return -1;
    return awl_optimizer_step(opt) < 0 ? -1 : 0;
}

/* Seconds of one awl_clip_grad_norm over the model's gradients (median of
 * CLIP_REPEATS), with the backend's clipping kernels (fused) or the
 * composed ops; each call scales the gradients (max_norm 1e-3). */
#define CLIP_REPEATS 7
static double clip_seconds(const char *device, awl_gpt *model, bool fused)
{
    double t[CLIP_REPEATS];
    bool was = awl_set_fused_kernels(fused);
    for (int r = 0; r < CLIP_REPEATS; r++) {
        awl_synchronize(device);
        double t0 = bench_now();
        double norm = awl_clip_grad_norm(awl_gpt_parameters(model), 1e-3);
        awl_synchronize(device);
        t[r] = norm < 0 ? NAN : bench_now() - t0;
    }
    awl_set_fused_kernels(was);
    return bench_median(t, CLIP_REPEATS);
}

/* PROFILED_STEPS steps under the profiler: the seconds of each part of a
 * step, on average, in split[]. */
static int profiled_split(const char *device, awl_gpt *model, awl_optimizer *opt, double grad_clip,
                          const awl_gpt_config *cfg, const int32_t *tokens, size_t n_tokens,
                          uint64_t draw, double *split)
{
    int status = awl_profiler_start();
    for (int step = 0; step < PROFILED_STEPS && status == 0; step++) {
        awl_scope_begin();
        awl_tensor *x, *y, *loss;
        status = make_batch(tokens, n_tokens, cfg->vocab, cfg->batch, cfg->block,
                            draw + 2 * (uint64_t)step, device, &x, &y);
        awl_synchronize(device);
        awl_profiler_begin(AWL_PROFILE_STEP, "step");
        if (status == 0) status = train_one(model, opt, grad_clip, x, y, &loss);
        awl_synchronize(device);
        awl_profiler_end();
        awl_scope_end();
    }
    awl_profiler_stop();
    awl_profile_totals t;
    if (status == 0) status = awl_profiler_totals(&t);
    if (status == 0) {
        double known = 0;
        for (int k = 0; k < N_PARTS; k++) split[k] = 0;
        for (int i = 0; i < t.n_ops; i++) {
            int k = part_of(&t.ops[i]);
            if (k != PART_REST) {
                split[k] += t.ops[i].seconds / t.steps;
                known += t.ops[i].seconds / t.steps;
            }
        }
        split[PART_REST] = t.step_seconds / t.steps - known;
        awl_profile_totals_free(&t);
    }
    awl_profiler_clear();
    return status;
}

/* `steps` steps run back to back, as train_gpt runs them: the device is
 * waited for once, at the end, where the last loss is read; the seconds a
 * step in *seconds. */
static int back_to_back_steps(const char *device, awl_gpt *model, awl_optimizer *opt,
                              double grad_clip, const awl_gpt_config *cfg, const int32_t *tokens,
                              size_t n_tokens, uint64_t draw, int steps, double *seconds)
{
    int status = 0;
    awl_synchronize(device);
    double t0 = bench_now();
    for (int step = 0; step < steps && status == 0; step++) {
        awl_scope_begin();
        awl_tensor *x, *y, *loss = NULL;
        status = make_batch(tokens, n_tokens, cfg->vocab, cfg->batch, cfg->block,
                            draw + 2 * (uint64_t)step, device, &x, &y);
        if (status == 0) status = train_one(model, opt, grad_clip, x, y, &loss);
        if (status == 0 && step == steps - 1) awl_item(loss);
        awl_scope_end();
    }
    awl_synchronize(device);
    *seconds = (bench_now() - t0) / steps;
    return status;
}

static int run_one(const bench_options *o, const char *config, const char *precision,
                   bool checkpointing, const int32_t *tokens, size_t n_tokens, int vocab)
{
    awl_gpt_config cfg;
    if (awl_gpt_config_named(config, &cfg) < 0) return -1;
    /* the corpus's vocabulary, except gpt2-124m keeps its padded 50304 */
    if (tokens && strcmp(config, "gpt2-124m") != 0) cfg.vocab = vocab;
    if (o->n_layer > 0) cfg.n_layer = o->n_layer;
    if (o->batch > 0) cfg.batch = o->batch;
    cfg.dropout = o->dropout;
    bool bf16 = strcmp(precision, "bf16") == 0;
    if (!bf16 && strcmp(precision, "fp32") != 0 && strcmp(precision, "tf32") != 0) {
        fprintf(stderr, "bench_gpt: unknown precision '%s' (fp32, tf32, bf16)\n", precision);
        return -1;
    }
    awl_set_float32_matmul_precision(strcmp(precision, "fp32") == 0 ? "highest" : "high");
    awl_gpt *model = awl_gpt_new(&cfg, o->device, 1337);
    if (!model) return -1;
    if (bf16 && awl_gpt_set_autocast(model, AWL_BF16) < 0) {
        fprintf(stderr, "bench_gpt: %s bf16: %s\n", config, awl_last_error());
        awl_gpt_free(model);
        return -1;
    }
    double ceiling = awl_gpt_matmul_rate(o->device, bf16 ? AWL_BF16 : AWL_F32);
    awl_gpt_set_checkpointing(model, checkpointing);
    awl_optimizer *opt = awl_adamw_new(awl_gpt_parameters(model), 1e-3, 0.9, 0.95, 1e-8, 0.1);
    if (!opt) return -1;
    if (bf16 && o->keep_casts) awl_optimizer_keep_casts(opt, AWL_BF16);
    int total = o->warmup + o->steps;
    double *times = calloc((size_t)total, sizeof *times);
    double *host_times = calloc((size_t)total, sizeof *host_times);
    double loss_first = NAN, loss_last = NAN;
    int status = 0;
    int64_t resident = 0; /* parameters, gradients and optimizer state */
    for (int step = 0; step < total && status == 0; step++) {
        if (step == o->warmup) {
            awl_memory_stats before;
            awl_memory_get_stats(o->device, &before);
            resident = before.in_use;
            awl_memory_reset_peak(o->device);
        }
        awl_scope_begin();
        awl_tensor *x, *y;
        status = make_batch(tokens, n_tokens, cfg.vocab, cfg.batch, cfg.block, 2 * (uint64_t)step,
                            o->device, &x, &y);
        awl_synchronize(o->device);
        double t0 = bench_now();
        awl_tensor *loss = NULL;
        if (status == 0) status = train_one(model, opt, o->grad_clip, x, y, &loss);
        host_times[step] = bench_now() - t0; /* the host has issued the step */
        awl_synchronize(o->device);
        times[step] = bench_now() - t0;
        double l = status == 0 ? awl_item(loss) : NAN;
        if (step == 0) loss_first = l;
        loss_last = l;
        awl_scope_end();
    }
    awl_memory_stats mem;
    awl_memory_get_stats(o->device, &mem); /* before the profiled steps */
    double split[N_PARTS];
    if (status == 0 && o->extras)
        status = profiled_split(o->device, model, opt, o->grad_clip, &cfg, tokens, n_tokens,
                                2 * (uint64_t)total, split);
    double back_to_back = 0;
    if (status == 0 && o->extras)
        status =
            back_to_back_steps(o->device, model, opt, o->grad_clip, &cfg, tokens, n_tokens,
                               2 * (uint64_t)(total + PROFILED_STEPS), o->steps, &back_to_back);
    /* what clipping costs, with the clipping kernels and composed */
    double clip_fused = NAN, clip_composed = NAN;
    if (status == 0 && o->extras && o->grad_clip > 0) {
        clip_fused = clip_seconds(o->device, model, true);
        clip_composed = clip_seconds(o->device, model, false);
    }
    char source[160];
    double peak =
        awl_device_peak_flops(o->device, bf16 ? AWL_BF16 : AWL_F32, source, sizeof source);
    if (status < 0) {
        fprintf(stderr, "bench_gpt: %s: %s\n", config, awl_last_error());
    } else {
        double median = bench_median(times + o->warmup, o->steps);
        double tokens_per_s = (double)cfg.batch * cfg.block / median;
        double flops = awl_gpt_flops_per_token(&cfg) * tokens_per_s;
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        bench_json_begin("gpt_train");
        printf("\"config\":\"%s\",\"device\":\"%s\",\"precision\":\"%s\","
               "\"n_layer\":%d,\"batch\":%d,\"block\":%d,\"dropout\":%g,\"grad_clip\":%g,"
               "\"params\":%lld,"
               "\"checkpointing\":%s,\"steps\":%d,\"ms_per_step\":%.2f,\"host_ms_per_step\":%.2f,"
               "\"tokens_per_s\":%.0f,"
               "\"model_tflops\":%.4f,\"matmul_ceiling_tflops\":%.4f,\"of_ceiling\":%.4f,"
               "\"peak_tflops\":%.4f,\"mfu\":%.4f,"
               "\"peak_mb\":%.1f,\"activation_peak_mb\":%.1f,\"rss_mb\":%.1f,"
               "\"loss_first\":%.4f,\"loss_last\":%.4f,",
               config, o->device, precision, cfg.n_layer, cfg.batch, cfg.block, cfg.dropout,
               o->grad_clip, (long long)awl_gpt_num_params(model), checkpointing ? "true" : "false",
               o->steps, median * 1e3, 1e3 * bench_median(host_times + o->warmup, o->steps),
               tokens_per_s, flops * 1e-12, ceiling * 1e-12,
               ceiling > 0 ? flops / ceiling : 0, peak * 1e-12, peak > 0 ? flops / peak : 0,
               (double)mem.peak / 1048576.0, (double)(mem.peak - resident) / 1048576.0,
               (double)ru.ru_maxrss / 1024.0, loss_first, loss_last);
        if (bf16) printf("\"keep_casts\":%s,", o->keep_casts ? "true" : "false");
        double step = 0;
        for (int k = 0; k < N_PARTS && o->extras; k++) step += split[k];
        for (int pass = 0; pass < 2 && o->extras; pass++) {
            printf("%s\"%s\":{", pass ? "," : "", pass ? "split_share" : "split_ms");
            for (int k = 0; k < N_PARTS; k++)
                printf("%s\"%s\":%.4f", k ? "," : "", part_names[k],
                       pass ? (step > 0 ? split[k] / step : 0) : 1e3 * split[k]);
            printf("}");
        }
        if (o->extras) printf(",\"back_to_back_ms_per_step\":%.2f", 1e3 * back_to_back);
        if (o->extras && o->grad_clip > 0)
            printf(",\"clip_ms\":%.4f,\"clip_composed_ms\":%.4f", 1e3 * clip_fused,
                   1e3 * clip_composed);
        printf("%s\"peak_source\":\"%s\"}\n", o->extras ? "," : "", source);
        fflush(stdout);
    }
    free(times);
    free(host_times);
    awl_optimizer_free(opt);
    awl_gpt_free(model);
    return status;
}

/* Calls fn on each comma-separated item of list. */
static int for_each_item(const char *list, int (*fn)(const char *item, void *ctx), void *ctx)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    int status = 0;
    for (char *save = NULL, *item = strtok_r(buf, ",", &save); item && status == 0;
         item = strtok_r(NULL, ",", &save))
        status = fn(item, ctx);
    return status;
}

typedef struct run_ctx {
    const bench_options *o;
    const char *config, *precision;
    const int32_t *tokens;
    size_t n_tokens;
    int vocab;
} run_ctx;

static int run_checkpointing(const char *mode, void *p)
{
    run_ctx *c = p;
    return run_one(c->o, c->config, c->precision, strcmp(mode, "on") == 0, c->tokens, c->n_tokens,
                   c->vocab);
}

static int run_precision(const char *precision, void *p)
{
    run_ctx *c = p;
    c->precision = precision;
    const char *modes = strcmp(c->o->checkpointing, "both") == 0 ? "off,on" : c->o->checkpointing;
    return for_each_item(modes, run_checkpointing, c);
}

static int run_config(const char *config, void *p)
{
    run_ctx *c = p;
    c->config = config;
    return for_each_item(c->o->precisions, run_precision, c);
}

static int parse_args(int argc, char **argv, bench_options *o)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) goto usage;
        if (strcmp(a, "--configs") == 0)
            o->configs = v;
        else if (strcmp(a, "--device") == 0)
            o->device = v;
        else if (strcmp(a, "--precisions") == 0)
            o->precisions = v;
        else if (strcmp(a, "--checkpoint-activations") == 0)
            o->checkpointing = v;
        else if (strcmp(a, "--data") == 0)
            o->data = v;
        else if (strcmp(a, "--steps") == 0)
            o->steps = atoi(v);
        else if (strcmp(a, "--warmup") == 0)
            o->warmup = atoi(v);
        else if (strcmp(a, "--threads") == 0)
            o->threads = atoi(v);
        else if (strcmp(a, "--n-layer") == 0)
            o->n_layer = atoi(v);
        else if (strcmp(a, "--batch") == 0)
            o->batch = atoi(v);
        else if (strcmp(a, "--dropout") == 0)
            o->dropout = atof(v);
        else if (strcmp(a, "--grad-clip") == 0)
            o->grad_clip = atof(v);
        else if (strcmp(a, "--extras") == 0 && (strcmp(v, "on") == 0 || strcmp(v, "off") == 0))
            o->extras = strcmp(v, "on") == 0;
        else if (strcmp(a, "--keep-casts") == 0 && (strcmp(v, "on") == 0 || strcmp(v, "off") == 0))
            o->keep_casts = strcmp(v, "on") == 0;
        else
            goto usage;
        i++;
    }
    if (o->steps < 1 || o->warmup < 0 || !(o->dropout >= 0 && o->dropout < 1) ||
        !(o->grad_clip >= 0))
        goto usage;
    return 0;
usage:
    fprintf(
        stderr,
        "usage: bench_gpt [--configs a,b] [--device cpu|cuda] [--precisions fp32,tf32,bf16]\n"
        "                 [--checkpoint-activations off|on|both] [--steps N] [--warmup N]\n"
        "                 [--threads N] [--n-layer N] [--batch N] [--dropout P] [--grad-clip X]\n"
        "                 [--data PATH] [--extras on|off] [--keep-casts on|off]\n");
    return -1;
}

int main(int argc, char **argv)
{
    bench_options o = {"cpu-small,cpu-medium",
                       "cpu",
                       "fp32",
                       "off",
                       "../shared/data/tinyshakespeare.txt",
                       30,
                       5,
                       2,
                       0,
                       0,
                       0.0,
                       0.0,
                       true,
                       true};
    if (parse_args(argc, argv, &o) < 0) return 2;
    awl_set_num_threads(o.threads);
    run_ctx c = {.o = &o};
    awl_text_dataset *ds = awl_text_dataset_open(o.data, NULL, 8, 1.0);
    if (ds) {
        c.tokens = awl_text_dataset_tokens(ds, AWL_SPLIT_TRAIN, &c.n_tokens);
        c.vocab = awl_tokenizer_vocab_size(awl_text_dataset_tokenizer(ds));
    } else {
        awl_clear_error(); /* no corpus: random tokens */
    }
    int status = for_each_item(o.configs, run_config, &c);
    awl_text_dataset_free(ds);
    return status < 0 ? 1 : 0;
}
