/*
 * bench/bench_tensor.c - the foundation's speed, through the public API.
 *
 * Prints one JSON line per case. Every ratio compares awl with a baseline
 * measured in the same process, seconds apart, so a noisy shared machine
 * moves both sides together:
 *
 *   matmul       awl_matmul vs BLAS sgemm called directly on the same buffers
 *                (square 256..2048 and the GPT's shapes, incl. transposed
 *                operands as backward uses them); goal ratio >= 0.95
 *   elementwise  awl_add / awl_mul on 16M floats vs memcpy bandwidth
 *                (bytes read + written); goal ratio >= 0.6
 *   op_overhead  one op on a 1-element tensor, without and with autograd
 *                recording; goal < 1 us and < 2 us
 *
 *   ./build/bench_tensor [--threads N] [--quick] [--overhead-only]
 *
 * --overhead-only runs op_overhead alone: a second's run, for comparing two
 * builds' dispatch paths in alternated runs (docs/profiling.md).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "awl.h"
#include "bench/bench_util.h"

/* Median seconds of `reps` runs of fn after one warm-up. */
typedef void (*bench_fn)(void *ctx);

static double median_time(bench_fn fn, void *ctx, int reps)
{
    double t[64];
    if (reps > 64) reps = 64;
    fn(ctx);
    for (int i = 0; i < reps; i++) {
        double t0 = bench_now();
        fn(ctx);
        t[i] = bench_now() - t0;
    }
    return bench_median(t, reps);
}

/* ---- matmul ------------------------------------------------------------------------ */

typedef struct matmul_case {
    const char *name;
    int64_t M, N, K;
    bool a_transposed, b_transposed; /* operand stored transposed, read as a view */
} matmul_case;

typedef struct matmul_ctx {
    const matmul_case *c;
    awl_tensor *a, *b, *out; /* a, b as the kernel sees them (maybe views) */
    float *pa, *pb, *pc;     /* the underlying buffers */
} matmul_ctx;

static void run_awl_matmul(void *p)
{
    matmul_ctx *m = p;
    awl_tensor_matmul_out(m->out, m->a, m->b, false);
}

static void run_sgemm(void *p)
{
    matmul_ctx *m = p;
    const matmul_case *c = m->c;
    awl_blas_sgemm(c->a_transposed, c->b_transposed, (int)c->M, (int)c->N, (int)c->K, 1.0f, m->pa,
                   c->a_transposed ? (int)c->M : (int)c->K, m->pb,
                   c->b_transposed ? (int)c->K : (int)c->N, 0.0f, m->pc, (int)c->N);
}

static void bench_matmul(const matmul_case *c, int reps)
{
    awl_scope_begin();
    matmul_ctx m = {.c = c};
    awl_tensor *a = c->a_transposed ? awl_randn(AWL_SHAPE(c->K, c->M), AWL_F32, "cpu")
                                    : awl_randn(AWL_SHAPE(c->M, c->K), AWL_F32, "cpu");
    awl_tensor *b = c->b_transposed ? awl_randn(AWL_SHAPE(c->N, c->K), AWL_F32, "cpu")
                                    : awl_randn(AWL_SHAPE(c->K, c->N), AWL_F32, "cpu");
    m.a = c->a_transposed ? awl_tensor_transpose(a, 0, 1) : a;
    m.b = c->b_transposed ? awl_tensor_transpose(b, 0, 1) : b;
    m.out = awl_empty(AWL_SHAPE(c->M, c->N), AWL_F32, "cpu");
    m.pa = a->storage->data;
    m.pb = b->storage->data;
    m.pc = m.out->storage->data;
    double flops = 2.0 * (double)c->M * (double)c->N * (double)c->K;
    /* interleave the two sides so drift in machine load hits both */
    double t_blas = median_time(run_sgemm, &m, reps);
    double t_awl = median_time(run_awl_matmul, &m, reps);
    double t_blas2 = median_time(run_sgemm, &m, reps);
    if (t_blas2 < t_blas) t_blas = t_blas2;
    bench_json_begin("matmul");
    printf("\"case\":\"%s\",\"M\":%lld,\"N\":%lld,\"K\":%lld,"
           "\"awl_gflops\":%.2f,\"sgemm_gflops\":%.2f,\"ratio\":%.3f}\n",
           c->name, (long long)c->M, (long long)c->N, (long long)c->K, flops / t_awl * 1e-9,
           flops / t_blas * 1e-9, t_blas / t_awl);
    fflush(stdout);
    awl_scope_end();
}

/* ---- element-wise --------------------------------------------------------------------- */

typedef struct ew_ctx {
    awl_tensor *a, *b, *out;
    awl_binary_op op;
    void *src, *dst;
    size_t nbytes;
} ew_ctx;

static void run_binary(void *p)
{
    ew_ctx *e = p;
    awl_tensor_binary_out(e->op, e->out, e->a, e->b);
}

static void run_memcpy(void *p)
{
    ew_ctx *e = p;
    memcpy(e->dst, e->src, e->nbytes);
}

static void bench_elementwise(int reps)
{
    const int64_t n = 16 << 20;
    awl_scope_begin();
    ew_ctx e = {awl_randn(AWL_SHAPE(n), AWL_F32, "cpu"),
                awl_randn(AWL_SHAPE(n), AWL_F32, "cpu"),
                awl_empty(AWL_SHAPE(n), AWL_F32, "cpu"),
                AWL_BINARY_ADD,
                NULL,
                NULL,
                0};
    awl_tensor *copy_dst = awl_empty(AWL_SHAPE(2 * n), AWL_F32, "cpu");
    e.src = copy_dst->storage->data;
    e.dst = (char *)copy_dst->storage->data + (size_t)n * 4;
    e.nbytes = (size_t)n * 4;
    awl_tensor_fill_(copy_dst, 1.0);
    double t_copy = median_time(run_memcpy, &e, reps);
    double copy_bw = 2.0 * (double)e.nbytes / t_copy; /* read + write */
    const awl_binary_op ops[2] = {AWL_BINARY_ADD, AWL_BINARY_MUL};
    for (int i = 0; i < 2; i++) {
        e.op = ops[i];
        double t = median_time(run_binary, &e, reps);
        double bw = 3.0 * (double)n * 4 / t; /* two reads + one write */
        bench_json_begin("elementwise");
        printf("\"op\":\"%s\",\"n\":%lld,\"ms\":%.3f,\"gbps\":%.2f,"
               "\"memcpy_gbps\":%.2f,\"ratio\":%.3f}\n",
               awl_binary_op_name(e.op), (long long)n, t * 1e3, bw * 1e-9, copy_bw * 1e-9,
               bw / copy_bw);
        fflush(stdout);
    }
    awl_scope_end();
}

/* ---- per-op overhead --------------------------------------------------------------------- */

static double op_cost(bool record, int iters)
{
    awl_tensor *x = awl_requires_grad_(awl_ones(AWL_SHAPE(1), AWL_F32, "cpu"), record);
    awl_tensor *y = awl_ones(AWL_SHAPE(1), AWL_F32, "cpu");
    double best = 1e9;
    for (int round = 0; round < 5; round++) {
        awl_scope_begin();
        double t0 = bench_now();
        for (int i = 0; i < iters; i++) awl_mul(x, y);
        double t = (bench_now() - t0) / iters;
        awl_scope_end(); /* frees the results (and their graph nodes) outside the timing */
        if (t < best) best = t;
    }
    awl_release(x);
    awl_release(y);
    return best;
}

static void bench_overhead(void)
{
    const int iters = 200000;
    double plain = op_cost(false, iters), recorded = op_cost(true, iters);
    bench_json_begin("op_overhead");
    printf("\"op\":\"mul\",\"numel\":1,\"no_grad_us\":%.3f,"
           "\"with_grad_us\":%.3f}\n",
           plain * 1e6, recorded * 1e6);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    int threads = 2;
    bool quick = false, overhead_only = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--quick") == 0)
            quick = true;
        else if (strcmp(argv[i], "--overhead-only") == 0)
            overhead_only = true;
        else {
            fprintf(stderr, "usage: %s [--threads N] [--quick] [--overhead-only]\n", argv[0]);
            return 2;
        }
    }
    awl_set_num_threads(threads);
    awl_manual_seed(0);
    if (overhead_only) {
        bench_overhead();
        return 0;
    }
    const matmul_case cases[] = {
        {"square", 256, 256, 256, false, false},
        {"square", 512, 512, 512, false, false},
        {"square", 1024, 1024, 1024, false, false},
        {"square", 2048, 2048, 2048, false, false},
        /* cpu-small (B*T = 1024 rows, C = 128): qkv, proj, fc, fc_proj, head */
        {"gpt_qkv", 1024, 384, 128, false, true},
        {"gpt_fc", 1024, 512, 128, false, true},
        {"gpt_fc_proj", 1024, 128, 512, false, true},
        {"gpt_head", 1024, 65, 128, false, true},
        /* backward: dX = dY W (no transpose), dW = dY^T X (A transposed) */
        {"gpt_fc_dx", 1024, 128, 512, false, false},
        {"gpt_fc_dw", 512, 128, 1024, true, false},
        /* cpu-medium fc: 2048 x 768 x 192 */
        {"gpt_medium_fc", 2048, 768, 192, false, true},
    };
    int n_cases = (int)(sizeof cases / sizeof *cases);
    for (int i = 0; i < n_cases; i++) {
        if (quick && cases[i].M * cases[i].N * cases[i].K > (int64_t)1 << 30) continue;
        int reps = cases[i].M * cases[i].N * cases[i].K > (int64_t)1 << 29 ? 5 : 21;
        bench_matmul(&cases[i], reps);
    }
    bench_elementwise(quick ? 5 : 11);
    bench_overhead();
    return 0;
}
