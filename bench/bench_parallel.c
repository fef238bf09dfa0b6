/*
 * bench/bench_parallel.c - data, ZeRO and tensor parallelism side by side:
 * memory per rank by category, tokens/s, bytes sent per step, against the
 * formulas; one JSON line per (configuration, scheme, ranks).
 *
 *     ./build/bench_parallel                                    # cpu-medium, 1 2 4 ranks
 *     ./build/bench_parallel --configs cpu-medium,shakespeare-char --threads 4 --steps 8
 *
 * Schemes: ddp (awl_ddp + AdamW), zero1, zero2 (awl_zero), tp (the GPT
 * split over all ranks, awl_tp_gpt + AdamW) and dp_tp (4 ranks as 2 data-
 * parallel replicas of 2 tensor-parallel ranks: awl_dist_split, awl_tp_gpt,
 * awl_ddp over the replicas). Every rank runs its own batch of the
 * configuration's size; the tensor-parallel ranks of a replica share one.
 *
 * Memory, in bytes, measured on rank 0 between steps (after the
 * optimizer's step and zero_grad), from the tensors themselves: parameters
 * (the model's, or the rank's pieces), gradients (the distinct storages
 * that hold them: DDP's buckets, ZeRO's buckets and shard), optimizer state
 * (exp_avg and exp_avg_sq); and the peak of awl_memory_get_stats over a
 * step, whose excess over the three is the activations and temporaries.
 * Beside each, the paper's formula for float32 AdamW (arXiv:1910.02054;
 * P = the model's parameter count, N the ranks sharing): parameters 4P,
 * gradients 4P (DDP, ZeRO-1) or 4P/N (ZeRO-2), optimizer 8P (DDP) or 8P/N;
 * for tensor parallelism the split matrices count 1/N. Bytes sent per step
 * per rank (the TCP transport's own count) beside the volume the algorithm
 * needs: 2(N-1)/N x 4P for DDP and ZeRO, 2(N-1)/N x 4 B T C per allreduce
 * for tensor parallelism (4 a block). Scaling efficiency: tokens/s over N
 * times one rank's (DDP, 1 rank, the same run).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "awl.h"
#include "bench/bench_ranks.h"
#include "bench/bench_util.h"

typedef enum scheme { DDP, ZERO1, ZERO2, TP, DP_TP, N_SCHEMES } scheme;
static const char *const scheme_names[] = {"ddp", "zero1", "zero2", "tp", "dp_tp"};

typedef struct job {
    const char *config;
    scheme s;
    int steps;
    double *tokens_per_s; /* shared: rank 0 writes */
} job;

/* Bytes of the distinct storages among tensors[0..n). */
static int64_t distinct_bytes(awl_tensor *const *tensors, int n)
{
    int64_t bytes = 0;
    for (int i = 0; i < n; i++) {
        if (!tensors[i]) continue;
        bool seen = false;
        for (int j = 0; j < i && !seen; j++) seen = tensors[j] && tensors[j]->storage == tensors[i]->storage;
        if (!seen) bytes += (int64_t)tensors[i]->storage->nbytes;
    }
    return bytes;
}

static int64_t bytes_of(const awl_param_list *p, bool grads)
{
    awl_tensor **t = calloc((size_t)p->count + 1, sizeof *t);
    for (int i = 0; i < p->count; i++) t[i] = grads ? p->items[i].tensor->grad : p->items[i].tensor;
    int64_t b = distinct_bytes(t, p->count);
    free(t);
    return b;
}

static int64_t optimizer_bytes(const awl_optimizer *o)
{
    int64_t b = 0;
    for (int i = 0; o && i < awl_optimizer_num_states(o); i++)
        b += awl_numel(awl_optimizer_state(o, i, NULL)) * 4;
    return b;
}

/* Elements of the matrices tensor parallelism splits (c_attn, c_proj, c_fc). */
static int64_t split_elements(const awl_param_list *p)
{
    int64_t n = 0;
    for (int i = 0; i < p->count; i++) {
        const char *name = p->items[i].name;
        if (strstr(name, "c_attn.") || strstr(name, "c_fc.") || strstr(name, "c_proj.weight"))
            n += awl_numel(p->items[i].tensor);
    }
    return n;
}

static void body(const awl_dist_options *d, void *arg)
{
    const job *j = arg;
    awl_process_group *pg = awl_dist_init(d);
    if (!pg) {
        fprintf(stderr, "bench_parallel: %s\n", awl_last_error());
        return;
    }
    int n = awl_dist_world_size(pg), rank = awl_dist_rank(pg);
    awl_gpt_config cfg;
    awl_gpt_config_named(j->config, &cfg);
    cfg.dropout = 0;
    awl_gpt *full = awl_gpt_new(&cfg, "cpu", 1337);
    const awl_param_list *fp = awl_gpt_parameters(full);
    int64_t P = awl_param_list_numel(fp), Ps = split_elements(fp);
    /* the groups: tensor-parallel ranks share a batch, data-parallel ones don't */
    int tp_size = j->s == TP ? n : j->s == DP_TP ? 2 : 1;
    awl_process_group *tp = tp_size > 1 ? (j->s == TP ? pg : awl_dist_split(pg, rank / tp_size, rank)) : NULL;
    awl_process_group *dp = j->s == DP_TP ? awl_dist_split(pg, rank % tp_size, rank) : NULL;
    awl_tp_gpt *split = tp ? awl_tp_gpt_new(full, tp) : NULL;
    if (split) { /* the pieces are all this rank keeps */
        awl_gpt_free(full);
        full = NULL;
    }
    const awl_param_list *params = split ? awl_tp_gpt_parameters(split) : fp;
    awl_ddp *ddp = NULL;
    awl_zero *zero = NULL;
    awl_optimizer *opt = NULL;
    if (j->s == ZERO1 || j->s == ZERO2) {
        awl_zero_options zo = {.stage = j->s == ZERO1 ? 1 : 2};
        zero = awl_zero_adamw_new(pg, params, 1e-3, 0.9, 0.95, 1e-8, 0.1, &zo);
    } else {
        opt = awl_adamw_new(params, 1e-3, 0.9, 0.95, 1e-8, 0.1);
        if (j->s == DDP) ddp = awl_ddp_new(pg, params, NULL);
        if (j->s == DP_TP) ddp = awl_ddp_new(dp, params, NULL);
    }
    int replicas = n / tp_size, replica = rank / tp_size;
    int64_t B = cfg.batch, T = cfg.block;
    double *times = calloc((size_t)j->steps, sizeof *times);
    int warm = 2, status = 0;
    int64_t sent0 = 0, peak = 0;
    for (int s = 0; s < j->steps + warm && status == 0; s++) {
        if (s == warm) {
            awl_dist_stats a, b = {0}, c = {0};
            awl_dist_get_stats(pg, &a);
            if (tp && tp != pg) awl_dist_get_stats(tp, &b);
            if (dp) awl_dist_get_stats(dp, &c);
            sent0 = a.bytes_sent + b.bytes_sent + c.bytes_sent;
            awl_memory_reset_peak("cpu");
        }
        int32_t *ids = malloc((size_t)(B * T) * sizeof *ids);
        for (int64_t i = 0; i < B * T; i++)
            ids[i] = (int32_t)((i * 7919 + s * 104729 + replica * 31) % cfg.vocab);
        awl_scope_begin();
        awl_tensor *x = awl_from_data(ids, AWL_SHAPE(B, T), AWL_I32, "cpu");
        free(ids);
        awl_dist_barrier(pg);
        double t0 = bench_now();
        awl_tensor *loss = awl_keep(split ? awl_tp_gpt_loss(split, x, x) : awl_gpt_loss(full, x, x));
        awl_scope_end();
        status = loss ? awl_backward(loss) : -1;
        awl_release(loss);
        if (status == 0 && ddp) status = awl_ddp_wait(ddp);
        if (status == 0) status = zero ? awl_zero_step(zero) : awl_optimizer_step(opt);
        if (status == 0)
            status = zero ? awl_zero_zero_grad(zero) : ddp ? awl_ddp_zero_grad(ddp) : awl_optimizer_zero_grad(opt);
        if (s >= warm) times[s - warm] = bench_now() - t0;
    }
    if (status) fprintf(stderr, "bench_parallel: %s %s: %s\n", j->config, scheme_names[j->s], awl_last_error());
    awl_memory_stats mem;
    awl_memory_get_stats("cpu", &mem);
    peak = mem.peak;
    awl_dist_stats a, b = {0}, c = {0};
    awl_dist_get_stats(pg, &a);
    if (tp && tp != pg) awl_dist_get_stats(tp, &b);
    if (dp) awl_dist_get_stats(dp, &c);
    double sent = (double)(a.bytes_sent + b.bytes_sent + c.bytes_sent - sent0) / j->steps;
    if (status == 0 && rank == 0) {
        double median = bench_median(times, j->steps);
        double tok_s = (double)B * T * replicas / median;
        int64_t p_bytes = bytes_of(params, false), g_bytes, o_bytes;
        if (zero) {
            awl_zero_stats zs;
            awl_zero_get_stats(zero, &zs);
            g_bytes = zs.gradient_bytes;
            o_bytes = zs.optimizer_bytes;
        } else {
            g_bytes = bytes_of(params, true);
            o_bytes = optimizer_bytes(opt);
        }
        /* the formulas, float32 AdamW */
        int shard = j->s == ZERO1 || j->s == ZERO2 ? n : 1;
        double local = (double)(P - Ps) + (double)Ps / tp_size; /* this rank's model elements */
        double f_params = 4 * local, f_grads = j->s == ZERO2 ? 4 * local / shard : 4 * local;
        double f_opt = 8 * local / shard;
        double f_sent = 0;
        if (j->s == DDP || j->s == ZERO1 || j->s == ZERO2) f_sent = 2.0 * (n - 1) / n * 4 * P;
        if (tp_size > 1)
            f_sent += 4.0 * cfg.n_layer * 2.0 * (tp_size - 1) / tp_size * 4 * B * T * cfg.n_embd;
        if (j->s == DP_TP) f_sent += 2.0 * (replicas - 1) / replicas * 4 * local;
        if (j->tokens_per_s) j->tokens_per_s[0] = tok_s;
        double base = j->tokens_per_s ? j->tokens_per_s[1] : 0;
        bench_json_begin("parallel");
        printf("\"config\":\"%s\",\"scheme\":\"%s\",\"ranks\":%d,\"params\":%lld,"
               "\"ms_per_step\":%.2f,\"tokens_per_s\":%.0f,\"scaling_efficiency\":%.3f,"
               "\"param_bytes\":%lld,\"param_formula\":%.0f,\"grad_bytes\":%lld,\"grad_formula\":%.0f,"
               "\"optimizer_bytes\":%lld,\"optimizer_formula\":%.0f,\"peak_bytes\":%lld,"
               "\"activation_bytes\":%lld,\"sent_bytes_per_step\":%.0f,\"sent_formula\":%.0f}\n",
               j->config, scheme_names[j->s], n, (long long)P, median * 1e3, tok_s,
               base > 0 ? tok_s / base / n : 1.0, (long long)p_bytes, f_params, (long long)g_bytes,
               f_grads, (long long)o_bytes, f_opt, (long long)peak,
               (long long)(peak - p_bytes - g_bytes - o_bytes), sent, f_sent);
        fflush(stdout);
    }
    free(times);
    awl_ddp_free(ddp);
    awl_zero_free(zero);
    awl_optimizer_free(opt);
    awl_tp_gpt_free(split);
    awl_gpt_free(full);
    if (dp) awl_dist_destroy(dp);
    if (tp && tp != pg) awl_dist_destroy(tp);
    awl_dist_destroy(pg);
}

int main(int argc, char **argv)
{
    const char *configs = "cpu-medium", *ranks = "1,2,4";
    int threads = 4, steps = 6;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--configs") == 0) configs = argv[i + 1];
        else if (strcmp(argv[i], "--ranks") == 0) ranks = argv[i + 1];
        else if (strcmp(argv[i], "--threads") == 0) threads = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--steps") == 0) steps = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: bench_parallel [--configs a,b] [--ranks 1,2,4] [--threads 4] [--steps 6]\n");
            return 2;
        }
    }
    awl_set_num_threads(threads);
    /* [0]: the last run's tokens/s, [1]: one rank's (the efficiency's base) */
    double *shared = mmap(NULL, 2 * sizeof(double), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    char list[256];
    snprintf(list, sizeof list, "%s", configs);
    for (char *config = strtok(list, ","); config; config = strtok(NULL, ",")) {
        shared[1] = 0;
        for (const char *p = ranks; *p;) {
            int n = atoi(p);
            for (int s = 0; s < N_SCHEMES; s++) {
                if (n == 1 && s != DDP) continue; /* one rank: every scheme is plain training */
                if (s == DP_TP && n != 4) continue;
                awl_gpt_config cfg;
                awl_gpt_config_named(config, &cfg);
                int tp = s == TP ? n : s == DP_TP ? 2 : 1;
                if (cfg.n_head % tp != 0) {
                    bench_json_begin("parallel");
                    printf("\"config\":\"%s\",\"scheme\":\"%s\",\"ranks\":%d,\"skipped\":"
                           "\"%d heads do not split over %d ranks\"}\n",
                           config, scheme_names[s], n, cfg.n_head, tp);
                    continue;
                }
                job j = {config, (scheme)s, steps, shared};
                bench_run_ranks(n, threads, body, &j);
                if (n == 1) shared[1] = shared[0];
            }
            p = strchr(p, ',') ? strchr(p, ',') + 1 : p + strlen(p);
        }
    }
    return 0;
}
