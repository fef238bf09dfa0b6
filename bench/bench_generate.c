/*
 * bench/bench_generate.c - generation speed with and without the key/value
 * cache, one JSON line per configuration and mode.
 *
 *     ./build/bench_generate                                  # the three configurations, CPU
 *                          (gpt2-124m's recompute of 256 tokens takes minutes on a CPU core)
 *     ./build/bench_generate --configs gpt2-124m --new 64 --rounds 2
 *     ./build/bench_generate --device cuda --precision bf16
 *
 * A run is awl_gpt_generate on a randomly initialised model: `batch` rows
 * of `prompt` random tokens, greedy, `new` new tokens each (at most block -
 * prompt, so that the context fits the block and neither mode starts
 * again), with the cache (mode "cache": a prefill, then one token a step)
 * or without (mode "recompute": every step runs the whole context), as
 * bench/torch_generate.py times its PyTorch peer. The step callback marks
 * the time each token is ready on the host, so:
 *
 *   prefill_tokens_per_s  batch * prompt / the time to the first new token
 *   decode_tokens_per_s   batch * (new - 1) / the time from the first new
 *                         token to the last
 *   ms_per_token          the decode time of one step
 *   decode_speedup        (cache lines) the cache's decode_tokens_per_s over
 *                         recompute's, both medians of the same process's
 *                         alternated rounds
 *
 * Each figure is the median over --rounds rounds; within a round the
 * modes alternate, so that a slow spell of the shared machine hits both.
 * One short untimed generation per configuration warms the allocator and
 * the BLAS threads first.
 *
 * --profile PREFIX: after the timed rounds, one more generation in each
 * mode under the op profiler (tensor/profiler.h), untimed: its summary
 * (ops by time against the device's ceilings) on stderr, its Chrome trace
 * in PREFIX-<config>-<mode>.json.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "awl.h"
#include "bench/bench_util.h"

enum { MAX_ROUNDS = 64 };

typedef struct bench_options {
    const char *configs, *device, *precision, *modes, *profile;
    int batch, prompt, new_tokens, rounds, threads;
} bench_options;

/* The times at which the first and the last new tokens were ready. */
typedef struct step_clock {
    double first, last;
    int steps;
} step_clock;

static int mark_step(void *user, const int32_t *tokens, int batch)
{
    (void)tokens;
    (void)batch;
    step_clock *c = user;
    c->last = bench_now();
    if (c->steps++ == 0) c->first = c->last;
    return 0;
}

/* One timed generation: its prefill and decode seconds. */
static int time_generation(awl_gpt *model, int batch, const int32_t *const *prompts,
                           const int *n_prompt, int32_t *const *out, int new_tokens, bool use_cache,
                           double *prefill_s, double *decode_s)
{
    awl_generate_options o = awl_generate_defaults();
    o.max_new_tokens = new_tokens;
    o.temperature = 0.0;
    o.use_cache = use_cache;
    step_clock clock = {0};
    o.on_step = mark_step;
    o.user = &clock;
    int *n_out = malloc((size_t)batch * sizeof *n_out);
    double start = bench_now();
    int status = awl_gpt_generate(model, batch, prompts, n_prompt, &o, out, n_out);
    free(n_out);
    if (status < 0) return status;
    *prefill_s = clock.first - start;
    *decode_s = clock.last - clock.first;
    return 0;
}

/* One generation of `mode` under the profiler: its summary on stderr and
 * its trace in PREFIX-<config>-<mode>.json. */
static int profile_generation(const bench_options *o, const char *config, awl_gpt *model,
                              int batch, const int32_t *const *prompts, const int *n_prompt,
                              int32_t *const *out, int new_tokens, bool use_cache)
{
    const char *mode = use_cache ? "cache" : "recompute";
    double p_s, d_s;
    awl_profiler_start();
    awl_profiler_begin(AWL_PROFILE_STEP, mode);
    int status =
        time_generation(model, batch, prompts, n_prompt, out, new_tokens, use_cache, &p_s, &d_s);
    awl_profiler_end();
    awl_profiler_stop();
    char path[512];
    snprintf(path, sizeof path, "%s-%s-%s.json", o->profile, config, mode);
    awl_roofline r;
    awl_dtype dt = strcmp(o->precision, "bf16") == 0 ? AWL_BF16 : AWL_F32;
    if (status == 0) status = awl_profiler_write(path);
    if (status == 0) status = awl_roofline_measure(o->device, dt, &r);
    if (status == 0) {
        fprintf(stderr, "== profile: %s, %s, %s, batch %d, %d new tokens (trace: %s)\n", config,
                o->precision, mode, batch, new_tokens, path);
        status = awl_profiler_print_summary(stderr, &r);
    }
    awl_profiler_clear();
    return status < 0 ? status : 0;
}

static int run_config(const bench_options *o, const char *config)
{
    awl_gpt_config cfg;
    if (awl_gpt_config_named(config, &cfg) < 0) {
        fprintf(stderr, "bench_generate: %s\n", awl_last_error());
        return -1;
    }
    int P = o->prompt < cfg.block ? o->prompt : cfg.block - 1;
    int N = o->new_tokens < cfg.block - P ? o->new_tokens : cfg.block - P;
    if (P < 1 || N < 2) {
        fprintf(stderr,
                "bench_generate: %s: a prompt of %d and %d new tokens: needs at least 1 "
                "and 2 within the block of %d\n",
                config, P, N, cfg.block);
        return -1;
    }
    awl_gpt *model = awl_gpt_new(&cfg, o->device, 1);
    if (!model ||
        (strcmp(o->precision, "bf16") == 0 && awl_gpt_set_autocast(model, AWL_BF16) < 0)) {
        fprintf(stderr, "bench_generate: %s on %s: %s\n", config, o->device, awl_last_error());
        awl_gpt_free(model);
        return -1;
    }
    int B = o->batch;
    int32_t **prompts = malloc((size_t)B * sizeof *prompts),
            **out = malloc((size_t)B * sizeof *out);
    int *n_prompt = malloc((size_t)B * sizeof *n_prompt);
    for (int b = 0; b < B; b++) {
        prompts[b] = malloc((size_t)P * sizeof **prompts);
        out[b] = malloc((size_t)(P + N) * sizeof **out);
        n_prompt[b] = P;
        for (int t = 0; t < P; t++)
            prompts[b][t] = (int32_t)(awl_philox4x32(7, (uint64_t)b * P + t).w[0] % cfg.vocab);
    }
    const int32_t *const *in = (const int32_t *const *)prompts;
    bool modes[2] = {strstr(o->modes, "cache") != NULL, strstr(o->modes, "recompute") != NULL};
    double prefill[2][MAX_ROUNDS], decode[2][MAX_ROUNDS], p_s, d_s;
    int status = time_generation(model, B, in, n_prompt, out, 2, true, &p_s, &d_s); /* warm-up */
    for (int r = 0; r < o->rounds && status == 0; r++) {
        for (int k = 0; k < 2 && status == 0; k++) {
            int m = (r + k) % 2; /* alternate which mode goes first */
            if (!modes[m]) continue;
            status = time_generation(model, B, in, n_prompt, out, N, m == 0, &prefill[m][r],
                                     &decode[m][r]);
        }
    }
    for (int m = 0; m < 2 && status == 0 && o->profile; m++)
        if (modes[m])
            status = profile_generation(o, config, model, B, in, n_prompt, out, N, m == 0);
    if (status < 0) fprintf(stderr, "bench_generate: %s: %s\n", config, awl_last_error());
    double decode_rate[2] = {0, 0};
    for (int m = 0; m < 2 && status == 0; m++) {
        if (!modes[m]) continue;
        decode_rate[m] = B * (N - 1) / bench_median(decode[m], o->rounds);
    }
    for (int m = 0; m < 2 && status == 0; m++) {
        if (!modes[m]) continue;
        double p = bench_median(prefill[m], o->rounds), d = bench_median(decode[m], o->rounds);
        bench_json_begin("generate");
        printf("\"impl\":\"awl\",\"config\":\"%s\",\"device\":\"%s\",\"precision\":\"%s\","
               "\"mode\":\"%s\",\"batch\":%d,\"prompt\":%d,\"new\":%d,\"rounds\":%d,"
               "\"prefill_tokens_per_s\":%.1f,\"decode_tokens_per_s\":%.2f,"
               "\"ms_per_token\":%.3f",
               config, o->device, o->precision, m == 0 ? "cache" : "recompute", B, P, N, o->rounds,
               B * P / p, decode_rate[m], 1e3 * d / (N - 1));
        if (m == 0 && modes[1]) printf(",\"decode_speedup\":%.2f", decode_rate[0] / decode_rate[1]);
        printf("}\n");
        fflush(stdout);
    }
    for (int b = 0; b < B; b++) {
        free(prompts[b]);
        free(out[b]);
    }
    free(prompts);
    free(out);
    free(n_prompt);
    awl_gpt_free(model);
    return status;
}

static int parse_int(const char *flag, const char *v, int lo, int hi, int *out)
{
    char *end = NULL;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || *end || end == v || x < lo || x > hi) {
        fprintf(stderr, "bench_generate: %s '%s': expected an integer in [%d, %d]\n", flag,
                v ? v : "", lo, hi);
        return -1;
    }
    *out = (int)x;
    return 0;
}

static int parse_args(int argc, char **argv, bench_options *o)
{
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int status = 0;
        if (strcmp(a, "--configs") == 0 && v)
            o->configs = v;
        else if (strcmp(a, "--device") == 0 && v)
            o->device = v;
        else if (strcmp(a, "--precision") == 0 && v)
            o->precision = v;
        else if (strcmp(a, "--modes") == 0 && v)
            o->modes = v;
        else if (strcmp(a, "--profile") == 0 && v)
            o->profile = v;
        else if (strcmp(a, "--batch") == 0)
            status = parse_int(a, v, 1, 4096, &o->batch);
        else if (strcmp(a, "--prompt") == 0)
            status = parse_int(a, v, 1, 1 << 20, &o->prompt);
        else if (strcmp(a, "--new") == 0)
            status = parse_int(a, v, 2, 1 << 20, &o->new_tokens);
        else if (strcmp(a, "--rounds") == 0)
            status = parse_int(a, v, 1, MAX_ROUNDS, &o->rounds);
        else if (strcmp(a, "--threads") == 0)
            status = parse_int(a, v, 0, 4096, &o->threads);
        else
            status = -1;
        if (status < 0) {
            fprintf(stderr,
                    "usage: bench_generate [--configs a,b] [--device cpu|cuda] [--precision "
                    "fp32|tf32|bf16] [--modes cache,recompute] [--batch B] [--prompt P] [--new "
                    "N] [--rounds R] [--threads N] [--profile PREFIX]\n");
            return -1;
        }
    }
    if (strcmp(o->precision, "fp32") != 0 && strcmp(o->precision, "tf32") != 0 &&
        strcmp(o->precision, "bf16") != 0) {
        fprintf(stderr, "bench_generate: --precision '%s': expected fp32, tf32 or bf16\n",
                o->precision);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    bench_options o = {.configs = "cpu-small,shakespeare-char,gpt2-124m",
                       .device = "cpu",
                       .precision = "fp32",
                       .modes = "cache,recompute",
                       .batch = 1,
                       .prompt = 16,
                       .new_tokens = 256,
                       .rounds = 3};
    if (parse_args(argc, argv, &o) < 0) return 2;
    if (o.threads > 0) awl_set_num_threads(o.threads);
    awl_set_float32_matmul_precision(strcmp(o.precision, "fp32") == 0 ? "highest" : "high");
    char *list = strdup(o.configs);
    int status = 0;
    for (char *c = strtok(list, ","); c && status == 0; c = strtok(NULL, ","))
        status = run_config(&o, c);
    free(list);
    return status < 0 ? 1 : 0;
}
