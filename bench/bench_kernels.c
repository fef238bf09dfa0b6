/*
 * bench/bench_kernels.c - the CPU backend's kernels against their ceilings.
 *
 * Prints one JSON line per case. Each figure is the median of several timed
 * repeats after a warm-up, and each comparison interleaves the two sides
 * (ceiling, backend, ceiling, ...) so that a machine shared with other work
 * slows both alike. The ceilings, measured in the same process:
 *   - matmul: BLAS sgemm called directly (awl_blas_sgemm) with the same operands and
 *     transpose flags; the backend should reach >= 0.95x;
 *   - element-wise and reductions: memcpy bandwidth, counting bytes read plus
 *     bytes written for both; add should reach >= 0.6x.
 * Fused attention has no ceiling here; its lines give time and GFLOP/s at the
 * reference GPT configurations (docs/DESIGN.md) for comparison across changes,
 * and the dropout masks' Philox blocks drawn one by one against
 * cpu_philox_blocks (sixteen side by side with AVX-512). The MLP's GELU
 * products ("gelu") are timed against the same products without it: the
 * difference is the GELU epilogue's cost.
 *
 *   ./bench_kernels                 all cases
 *   ./bench_kernels quick           smaller sizes, fewer repeats (a smoke run)
 *   ./bench_kernels full WORD       only the benches whose name contains WORD
 *   ./bench_kernels full gemm_blocking   awl's product under other blockings
 *                                   (bench_blocking; run only when named)
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/backend.h"
#include "backends/cpu/cpu_gemm.h"
#include "backends/cpu/cpu_philox.h"
#include "bench/bench_util.h"

static const awl_backend *B;
static int repeats = 7;
static const char *only; /* run only benches whose name contains this */

static bool selected(const char *name) { return !only || strstr(name, only); }

typedef void (*bench_fn)(void *ctx);

/* Median seconds per call of f and g, timed alternately; each timing runs
 * `inner` calls. */
static void time_pair(bench_fn f, void *fc, bench_fn g, void *gc, int inner, double *tf, double *tg)
{
    double a[64], b[64];
    f(fc);
    g(gc);
    for (int r = 0; r < repeats; r++) {
        double t0 = bench_now();
        for (int i = 0; i < inner; i++) f(fc);
        double t1 = bench_now();
        for (int i = 0; i < inner; i++) g(gc);
        double t2 = bench_now();
        a[r] = (t1 - t0) / inner;
        b[r] = (t2 - t1) / inner;
    }
    *tf = bench_median(a, repeats);
    *tg = bench_median(b, repeats);
}

static float *random_floats(int64_t n)
{
    float *x = NULL;
    if (posix_memalign((void **)&x, 64, (size_t)n * sizeof *x)) {
        fprintf(stderr, "bench_kernels: out of memory\n");
        exit(1);
    }
    uint32_t s = 12345;
    for (int64_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
    }
    return x;
}

static awl_view view2(float *data, int64_t rows, int64_t cols, int64_t rs, int64_t cs)
{
    awl_view v;
    memset(&v, 0, sizeof v);
    v.data = data;
    v.ndim = 2;
    v.shape[0] = rows;
    v.shape[1] = cols;
    v.strides[0] = rs;
    v.strides[1] = cs;
    v.dtype = AWL_F32;
    return v;
}

/* A contiguous vector of n floats: view2's first axis alone. */
static awl_view view1(float *data, int64_t n)
{
    awl_view v = view2(data, n, 1, 1, 1);
    v.ndim = 1;
    return v;
}

/* Exits with the backend's message where a kernel call failed. */
static void check_ok(int status, const char *what)
{
    if (status == AWL_OK) return;
    fprintf(stderr, "bench_kernels: %s failed: %s\n", what, awl_last_error());
    exit(1);
}

/* ---- matmul --------------------------------------------------------------------- */

typedef struct mm_case {
    int64_t m, k, n;
    bool ta, tb; /* a stored as (k, m), b stored as (n, k): transposed views */
    float *a, *b, *c;
    awl_view va, vb, vc;
} mm_case;

static void mm_direct(void *p)
{
    mm_case *c = p;
    awl_blas_sgemm(c->ta, c->tb, (int)c->m, (int)c->n, (int)c->k, 1.0f, c->a,
                   (int)(c->ta ? c->m : c->k), c->b, (int)(c->tb ? c->k : c->n), 0.0f, c->c,
                   (int)c->n);
}

static void mm_backend(void *p)
{
    mm_case *c = p;
    check_ok(B->matmul(&c->vc, &c->va, &c->vb, false), "matmul");
}

/* An m x k x n product's operands, random, and their views. */
static mm_case mm_case_new(int64_t m, int64_t k, int64_t n, bool ta, bool tb)
{
    mm_case c = {.m = m, .k = k, .n = n, .ta = ta, .tb = tb};
    c.a = random_floats(m * k);
    c.b = random_floats(k * n);
    c.c = random_floats(m * n);
    c.va = ta ? view2(c.a, m, k, 1, m) : view2(c.a, m, k, k, 1);
    c.vb = tb ? view2(c.b, k, n, 1, k) : view2(c.b, k, n, n, 1);
    c.vc = view2(c.c, m, n, n, 1);
    return c;
}

static void mm_case_free(mm_case *c)
{
    free(c->a);
    free(c->b);
    free(c->c);
}

static void bench_matmul(const char *bench, const char *name, int64_t m, int64_t k, int64_t n,
                         bool ta, bool tb)
{
    if (!selected(bench)) return;
    mm_case c = mm_case_new(m, k, n, ta, tb);
    double flops = 2.0 * (double)m * (double)n * (double)k;
    int inner = (int)(2e8 / flops) + 1;
    double td, tb_;
    time_pair(mm_direct, &c, mm_backend, &c, inner, &td, &tb_);
    bench_json_begin(bench);
    printf("\"case\":\"%s\",\"m\":%lld,\"k\":%lld,\"n\":%lld,\"a\":\"%s\","
           "\"b\":\"%s\",\"cblas_gflops\":%.2f,\"backend_gflops\":%.2f,"
           "\"ratio\":%.3f}\n",
           name, (long long)m, (long long)k, (long long)n, ta ? "T" : "N", tb ? "T" : "N",
           flops / td * 1e-9, flops / tb_ * 1e-9, td / tb_);
    fflush(stdout);
    mm_case_free(&c);
}

/* ---- the MLP's GELU products ----------------------------------------------------- */

/* An MLP's first product (tokens x in x hidden) with and without its GELU:
 * matmul_bias_gelu against matmul_bias, and the backward's matmul_gelu_backward
 * (dH = dY W2^T scaled by gelu'(pre), tokens x in x hidden as well) against
 * the plain matmul; the difference is the GELU epilogue's time. */
typedef struct gelu_case {
    mm_case mm;
    float *bias, *pre;
    awl_view vbias, vpre;
} gelu_case;

static void gelu_plain_forward(void *p)
{
    gelu_case *g = p;
    check_ok(B->matmul_bias(&g->vpre, &g->mm.va, &g->mm.vb, &g->vbias), "matmul_bias");
}

static void gelu_fused_forward(void *p)
{
    gelu_case *g = p;
    check_ok(B->matmul_bias_gelu(&g->mm.vc, &g->vpre, &g->mm.va, &g->mm.vb, &g->vbias),
             "matmul_bias_gelu");
}

static void gelu_plain_backward(void *p) { mm_backend(&((gelu_case *)p)->mm); }

static void gelu_fused_backward(void *p)
{
    gelu_case *g = p;
    check_ok(B->matmul_gelu_backward(&g->mm.vc, &g->mm.va, &g->mm.vb, &g->vpre),
             "matmul_gelu_backward");
}

static void bench_gelu(const char *config, int64_t tokens, int64_t in, int64_t hidden)
{
    if (!selected("gelu")) return;
    gelu_case g = {.mm = mm_case_new(tokens, in, hidden, false, false)};
    g.bias = random_floats(hidden);
    g.pre = random_floats(tokens * hidden);
    g.vbias = view1(g.bias, hidden);
    g.vpre = view2(g.pre, tokens, hidden, hidden, 1);
    const double flops = 2.0 * (double)tokens * (double)in * (double)hidden;
    const int inner = (int)(2e8 / flops) + 1;
    double plain[2], fused[2];
    time_pair(gelu_plain_forward, &g, gelu_fused_forward, &g, inner, &plain[0], &fused[0]);
    time_pair(gelu_plain_backward, &g, gelu_fused_backward, &g, inner, &plain[1], &fused[1]);
    for (int backward = 0; backward < 2; backward++) {
        bench_json_begin("gelu");
        printf("\"config\":\"%s\",\"pass\":\"%s\",\"m\":%lld,\"k\":%lld,\"n\":%lld,"
               "\"plain_ms\":%.4f,\"with_gelu_ms\":%.4f,\"gelu_ms\":%.4f,"
               "\"gelu_ns_per_element\":%.3f}\n",
               config, backward ? "backward" : "forward", (long long)tokens, (long long)in,
               (long long)hidden, plain[backward] * 1e3, fused[backward] * 1e3,
               (fused[backward] - plain[backward]) * 1e3,
               (fused[backward] - plain[backward]) / (double)(tokens * hidden) * 1e9);
    }
    fflush(stdout);
    mm_case_free(&g.mm);
    free(g.bias);
    free(g.pre);
}

/* Product `kind` (0, 1, 2) of a linear layer of shape (tokens, in, out):
 * forward Y = X W (tokens x in x out), then dX = dY W^T and dW = dY^T X
 * (out x tokens x in, as nn/functional.c's linear_backward computes it:
 * the weight is out x in, and A, dY^T, is read transposed). */
typedef struct layer_product {
    const char *name;
    int64_t m, k, n;
    bool ta, tb;
} layer_product;

static layer_product layer_product_of(const int64_t shape[3], int kind)
{
    const int64_t tokens = shape[0], in = shape[1], out = shape[2];
    const layer_product kinds[3] = {{"transformer", tokens, in, out, false, false},
                                    {"transformer_dx", tokens, out, in, false, true},
                                    {"transformer_dw", out, tokens, in, true, false}};
    return kinds[kind];
}

/* shakespeare-char's linear layers (B*T = 16,384 tokens, C = 384: qkv,
 * attention out, MLP in, MLP out), whose activations are 25-100 MB a
 * product. */
static const int64_t shakespeare_layers[4][3] = {
    {16384, 384, 1152}, {16384, 384, 384}, {16384, 384, 1536}, {16384, 1536, 384}};

/* A linear layer's three products (layer_product_of). */
static void bench_block(const char *bench, const int64_t shape[3])
{
    for (int kind = 0; kind < 3; kind++) {
        const layer_product p = layer_product_of(shape, kind);
        bench_matmul(bench, p.name, p.m, p.k, p.n, p.ta, p.tb);
    }
}

/* ---- gemm_blocking: awl's product under other blockings ----------------------- */

/* Blockings of awl's float32 product, comma-separated, each as
 * awl_cpu_gemm_blocking_parse reads it ("KCxNCxMC", a trailing "c" where
 * every A is copied a block at a time, "t" a tile at a time); -1 when
 * list is not such a list. */
#define MAX_BLOCKINGS 8

static int parse_blockings(const char *list, awl_cpu_gemm_blocking *out)
{
    int n = 0;
    const char *p = list;
    while (p && *p && n < MAX_BLOCKINGS) {
        p = awl_cpu_gemm_blocking_parse(p, &out[n++]);
        if (p && *p == ',') p++;
    }
    return p && !*p ? n : -1;
}

/* shakespeare-char's 12 products (bench_block's), each timed under every
 * blocking in turn, call by call, so that a machine's slow spells fall on
 * all of them alike. The first blocking is the one the code has; each
 * line gives a blocking's GFLOP/s (median) and the median over repeats of
 * the first's time over its own ("vs_first", > 1: faster), and a summary
 * line per blocking the min / median / max of vs_first over the products.
 * AWL_BENCH_BLOCKINGS replaces the list after the first. Runs only when
 * named (`bench_kernels full gemm_blocking`). */
static void bench_blocking(void)
{
    if (!only || !strstr(only, "gemm_blocking")) return;
    const awl_cpu_gemm_blocking as_is = awl_cpu_gemm_blocking_get();
    if (!awl_cpu_gemm_f32_name()) {
        fprintf(stderr, "bench_kernels: gemm_blocking: awl's float32 product is not in use\n");
        return;
    }
    awl_cpu_gemm_blocking bl[MAX_BLOCKINGS] = {as_is};
    const char *env = getenv("AWL_BENCH_BLOCKINGS");
    int nb = 1 + parse_blockings(env ? env
                                     : "384x960x1536,384x480x1536c,384x960x1536c,"
                                       "384x960x768c,256x960x1536",
                                 bl + 1);
    if (nb < 2) {
        fprintf(stderr, "bench_kernels: AWL_BENCH_BLOCKINGS: expected KCxNCxMC[c],...\n");
        exit(1);
    }
    if (nb > MAX_BLOCKINGS) nb = MAX_BLOCKINGS;
    double vs_first[MAX_BLOCKINGS][12];
    for (int i = 0; i < 12; i++) { /* bench_block's three products of each layer */
        const layer_product lp = layer_product_of(shakespeare_layers[i / 3], i % 3);
        const int64_t m = lp.m, k = lp.k, n = lp.n;
        const bool ta = lp.ta, tb = lp.tb;
        mm_case c = mm_case_new(m, k, n, ta, tb);
        const double flops = 2.0 * (double)m * (double)n * (double)k;
        const int inner = (int)(2e8 / flops) + 1;
        double t[MAX_BLOCKINGS][64];
        for (int r = -1; r < repeats; r++) /* r = -1: a warm-up call under each */
            for (int b = 0; b < nb; b++) {
                if (!awl_cpu_gemm_blocking_set(bl[b])) {
                    char name[32];
                    fprintf(stderr, "bench_kernels: blocking %s out of range\n",
                            awl_cpu_gemm_blocking_name(bl[b], name, sizeof name));
                    exit(1);
                }
                const double t0 = bench_now();
                for (int j = 0; j < (r < 0 ? 1 : inner); j++) mm_backend(&c);
                if (r >= 0) t[b][r] = (bench_now() - t0) / inner;
            }
        awl_cpu_gemm_blocking_set(as_is); /* the lines' gemm_f32 names the first */
        for (int b = 0; b < nb; b++) {    /* before bench_median sorts any t[b] */
            double ratio[64];
            for (int r = 0; r < repeats; r++) ratio[r] = t[0][r] / t[b][r];
            vs_first[b][i] = bench_median(ratio, repeats);
        }
        for (int b = 0; b < nb; b++) {
            char name[32];
            bench_json_begin("gemm_blocking");
            printf("\"case\":\"%s\",\"m\":%lld,\"k\":%lld,\"n\":%lld,\"a\":\"%s\",\"b\":\"%s\","
                   "\"blocking\":\"%s\",\"gflops\":%.2f,\"vs_first\":%.3f}\n",
                   lp.name, (long long)m, (long long)k, (long long)n, ta ? "T" : "N",
                   tb ? "T" : "N", awl_cpu_gemm_blocking_name(bl[b], name, sizeof name),
                   flops / bench_median(t[b], repeats) * 1e-9, vs_first[b][i]);
        }
        fflush(stdout);
        mm_case_free(&c);
    }
    for (int b = 1; b < nb; b++) {
        double v[12];
        memcpy(v, vs_first[b], sizeof v);
        double lo = v[0], hi = v[0];
        for (int i = 1; i < 12; i++) lo = v[i] < lo ? v[i] : lo, hi = v[i] > hi ? v[i] : hi;
        char name[32], first[32];
        bench_json_begin("gemm_blocking_summary");
        printf("\"blocking\":\"%s\",\"first\":\"%s\",\"vs_first_min\":%.3f,"
               "\"vs_first_median\":%.3f,\"vs_first_max\":%.3f}\n",
               awl_cpu_gemm_blocking_name(bl[b], name, sizeof name),
               awl_cpu_gemm_blocking_name(bl[0], first, sizeof first), lo, bench_median(v, 12), hi);
    }
    fflush(stdout);
}

/* Batched products, as attention's per-head scores: the ceiling is a loop of
 * direct sgemm calls. */
typedef struct bmm_case {
    int64_t batch, m, k, n;
    float *a, *b, *c;
    awl_view va, vb, vc;
} bmm_case;

static void bmm_direct(void *p)
{
    bmm_case *c = p;
    for (int64_t i = 0; i < c->batch; i++)
        awl_blas_sgemm(false, true, (int)c->m, (int)c->n, (int)c->k, 1.0f, c->a + i * c->m * c->k,
                       (int)c->k, c->b + i * c->n * c->k, (int)c->k, 0.0f, c->c + i * c->m * c->n,
                       (int)c->n);
}

static void bmm_backend(void *p)
{
    bmm_case *c = p;
    check_ok(B->matmul(&c->vc, &c->va, &c->vb, false), "batched matmul");
}

static void bench_batched(int64_t batch, int64_t m, int64_t k, int64_t n)
{
    if (!selected("matmul_batched")) return;
    bmm_case c = {.batch = batch, .m = m, .k = k, .n = n};
    c.a = random_floats(batch * m * k);
    c.b = random_floats(batch * k * n);
    c.c = random_floats(batch * m * n);
    awl_view *vs[3] = {&c.va, &c.vb, &c.vc};
    float *data[3] = {c.a, c.b, c.c};
    /* a (batch, m, k); b is k^T: (batch, k, n) over storage (batch, n, k). */
    const int64_t shapes[3][3] = {{batch, m, k}, {batch, k, n}, {batch, m, n}};
    const int64_t strides[3][3] = {{m * k, k, 1}, {n * k, 1, k}, {m * n, n, 1}};
    for (int i = 0; i < 3; i++) {
        memset(vs[i], 0, sizeof *vs[i]);
        vs[i]->data = data[i];
        vs[i]->ndim = 3;
        vs[i]->dtype = AWL_F32;
        memcpy(vs[i]->shape, shapes[i], sizeof shapes[i]);
        memcpy(vs[i]->strides, strides[i], sizeof strides[i]);
    }
    double flops = 2.0 * (double)(batch * m * n * k);
    double td, tb;
    time_pair(bmm_direct, &c, bmm_backend, &c, (int)(1e8 / flops) + 1, &td, &tb);
    bench_json_begin("matmul_batched");
    printf("\"batch\":%lld,\"m\":%lld,\"k\":%lld,\"n\":%lld,"
           "\"cblas_loop_gflops\":%.2f,\"backend_gflops\":%.2f,\"ratio\":%.3f}\n",
           (long long)batch, (long long)m, (long long)k, (long long)n, flops / td * 1e-9,
           flops / tb * 1e-9, td / tb);
    fflush(stdout);
    free(c.a);
    free(c.b);
    free(c.c);
}

/* ---- memory-bound kernels ------------------------------------------------------------ */

typedef struct mem_case {
    int64_t n;
    float *x, *y, *z;
    awl_view vx, vy, vz, vr;
    int kind; /* 0 add, 1 mul, 2 broadcast add, 3 exp, 4 sum all, 5 row sums, 6 column sums */
    int64_t rows, cols;
} mem_case;

static void run_memcpy(void *p)
{
    mem_case *c = p;
    memcpy(c->z, c->x, (size_t)c->n * sizeof(float));
}

static void run_kernel(void *p)
{
    mem_case *c = p;
    int rc;
    switch (c->kind) {
    case 0: rc = B->binary(AWL_BINARY_ADD, &c->vz, &c->vx, &c->vy); break;
    case 1: rc = B->binary(AWL_BINARY_MUL, &c->vz, &c->vx, &c->vy); break;
    case 2: rc = B->binary(AWL_BINARY_ADD, &c->vz, &c->vx, &c->vr); break;
    case 3: rc = B->unary(AWL_UNARY_EXP, &c->vz, &c->vx, 0); break;
    default: rc = B->reduce(AWL_REDUCE_SUM, &c->vr, &c->vx);
    }
    check_ok(rc, "element-wise kernel");
}

/* bytes: moved by the kernel (read + written), against memcpy's 2n floats. */
static void bench_memory(const char *name, int kind, int64_t rows, int64_t cols, double bytes)
{
    if (!selected("memory") && !selected(name)) return;
    mem_case c;
    memset(&c, 0, sizeof c);
    c.n = rows * cols;
    c.kind = kind;
    c.x = random_floats(c.n);
    c.y = random_floats(c.n);
    c.z = random_floats(c.n);
    c.vx = view2(c.x, rows, cols, cols, 1);
    c.vy = view2(c.y, rows, cols, cols, 1);
    c.vz = view2(c.z, rows, cols, cols, 1);
    /* A (1, cols) row broadcast, or the reduction's output. */
    switch (kind) {
    case 2: c.vr = view2(c.y, rows, cols, 0, 1); break;
    case 4: c.vr = view2(c.z, 1, 1, 1, 1); break;
    case 5: c.vr = view2(c.z, rows, 1, 1, 1); break;
    case 6: c.vr = view2(c.z, 1, cols, cols, 1); break;
    default: break;
    }
    double tm, tk;
    time_pair(run_memcpy, &c, run_kernel, &c, 3, &tm, &tk);
    double memcpy_gbs = 2.0 * (double)c.n * 4 / tm * 1e-9, kernel_gbs = bytes / tk * 1e-9;
    bench_json_begin("memory");
    printf("\"case\":\"%s\",\"rows\":%lld,\"cols\":%lld,"
           "\"memcpy_gbs\":%.2f,\"backend_gbs\":%.2f,\"backend_ms\":%.3f,\"ratio\":%.3f}\n",
           name, (long long)rows, (long long)cols, memcpy_gbs, kernel_gbs, tk * 1e3,
           kernel_gbs / memcpy_gbs);
    fflush(stdout);
    free(c.x);
    free(c.y);
    free(c.z);
}

/* Latency of an op too small to be worth a thread. */
static void bench_tiny(void)
{
    if (!selected("tiny_add")) return;
    mem_case c;
    memset(&c, 0, sizeof c);
    c.n = 64;
    c.x = random_floats(64);
    c.y = random_floats(64);
    c.z = random_floats(64);
    c.vx = view2(c.x, 8, 8, 8, 1);
    c.vy = view2(c.y, 8, 8, 8, 1);
    c.vz = view2(c.z, 8, 8, 8, 1);
    double tm, tk;
    time_pair(run_memcpy, &c, run_kernel, &c, 100000, &tm, &tk);
    bench_json_begin("tiny_add");
    printf("\"elements\":64,\"ns_per_call\":%.1f}\n", tk * 1e9);
    free(c.x);
    free(c.y);
    free(c.z);
}

/* ---- the dropout masks' Philox blocks ------------------------------------------------- */

typedef struct philox_case {
    uint32_t words[4 * 256];
    uint64_t next; /* the first block of the next draw */
} philox_case;

/* 256 blocks, one awl_philox4x32 call each. */
static void philox_one_by_one(void *p)
{
    philox_case *c = p;
    for (int b = 0; b < 256; b++)
        memcpy(c->words + 4 * b, awl_philox4x32(1337, c->next + (uint64_t)b).w, 16);
    c->next += 256;
}

/* The same 256 blocks through cpu_philox_blocks (sixteen at a time with
 * AVX-512). */
static void philox_many(void *p)
{
    philox_case *c = p;
    cpu_philox_blocks(1337, c->next, 256, c->words);
    c->next += 256;
}

static void bench_philox(void)
{
    if (!selected("philox")) return;
    static philox_case c;
    double t1, tm;
    time_pair(philox_one_by_one, &c, philox_many, &c, 200, &t1, &tm);
    bench_json_begin("philox");
    printf("\"blocks\":256,\"ns_per_block_one_by_one\":%.2f,\"ns_per_block_many\":%.2f,"
           "\"ratio\":%.3f}\n",
           t1 / 256 * 1e9, tm / 256 * 1e9, tm / t1);
    fflush(stdout);
}

/* ---- fused kernels at the reference GPT shapes ----------------------------------------- */

typedef struct attn_case {
    awl_view q, k, v, out, lse, dq, dk, dv, dout;
    const awl_dropout_args *dropout; /* NULL: none */
} attn_case;

static void attn_forward(void *p)
{
    attn_case *c = p;
    check_ok(B->attention_forward(&c->out, &c->lse, &c->q, &c->k, &c->v, 0.125, true, c->dropout),
             "attention_forward");
}

static void attn_backward(void *p)
{
    attn_case *c = p;
    check_ok(B->attention_backward(&c->dq, &c->dk, &c->dv, &c->dout, &c->q, &c->k, &c->v, &c->out,
                                   &c->lse, 0.125, true, c->dropout),
             "attention_backward");
}

/* A (B, H, T, D) view; qkv >= 0 picks q, k or v out of a (B, T, 3, H, D) buffer. */
static awl_view heads_view(float *data, const int64_t *s, int qkv)
{
    const int64_t H = s[1], T = s[2], D = s[3];
    awl_view v;
    memset(&v, 0, sizeof v);
    v.data = data;
    v.ndim = 4;
    v.dtype = AWL_F32;
    memcpy(v.shape, s, 4 * sizeof *s);
    const int64_t packed[4] = {T * 3 * H * D, D, 3 * H * D, 1}, plain[4] = {H * T * D, T * D, D, 1};
    memcpy(v.strides, qkv >= 0 ? packed : plain, sizeof packed);
    v.offset = qkv >= 0 ? qkv * H * D : 0;
    return v;
}

/* Causal attention forward and backward, q, k, v sliced from one qkv buffer. */
static void bench_attention(const char *config, int64_t Bn, int64_t H, int64_t T, int64_t D)
{
    if (!selected("attention")) return;
    const int64_t s[4] = {Bn, H, T, D}, n = Bn * H * T * D, bht[3] = {Bn, H, T};
    float *qkv = random_floats(3 * n), *dqkv = random_floats(3 * n);
    float *out = random_floats(n), *dout = random_floats(n), *lse = random_floats(Bn * H * T);
    attn_case c;
    c.q = heads_view(qkv, s, 0), c.k = heads_view(qkv, s, 1), c.v = heads_view(qkv, s, 2);
    c.dq = heads_view(dqkv, s, 0), c.dk = heads_view(dqkv, s, 1), c.dv = heads_view(dqkv, s, 2);
    c.out = heads_view(out, s, -1), c.dout = heads_view(dout, s, -1);
    memset(&c.lse, 0, sizeof c.lse);
    c.lse.data = lse;
    c.lse.ndim = 3;
    c.lse.dtype = AWL_F32;
    memcpy(c.lse.shape, bht, sizeof bht);
    const int64_t lstrides[3] = {H * T, T, 1};
    memcpy(c.lse.strides, lstrides, sizeof lstrides);
    double tf, tb, flops = 4.0 * (double)(Bn * H * T * T * D);
    /* without dropout, then with nanoGPT's 0.2 on the weights (the mask
     * drawn in the forward and again in the backward) */
    const awl_dropout_args drop = {0.2, 1337, 7};
    for (int d = 0; d < 2; d++) {
        c.dropout = d ? &drop : NULL;
        time_pair(attn_forward, &c, attn_backward, &c, 3, &tf, &tb);
        bench_json_begin("attention");
        printf("\"config\":\"%s\",\"B\":%lld,\"H\":%lld,\"T\":%lld,"
               "\"D\":%lld,\"dropout\":%g,\"forward_ms\":%.3f,\"forward_gflops\":%.2f,"
               "\"backward_ms\":%.3f,\"backward_gflops\":%.2f}\n",
               config, (long long)Bn, (long long)H, (long long)T, (long long)D, d ? drop.p : 0.0,
               tf * 1e3, flops / tf * 1e-9, tb * 1e3, 2.5 * flops / tb * 1e-9);
        fflush(stdout);
    }
    free(qkv);
    free(dqkv);
    free(out);
    free(dout);
    free(lse);
}

int main(int argc, char **argv)
{
    bool quick = argc > 1 && strcmp(argv[1], "quick") == 0;
    if (quick) repeats = 3;
    if (argc > 2) only = argv[2];
    B = awl_cpu_backend();
    const int64_t big = quick ? (int64_t)1 << 20 : (int64_t)1 << 24;
    const int64_t sq_max = quick ? 512 : 2048;
    for (int64_t s = 256; s <= sq_max; s *= 2)
        bench_matmul("matmul", "square", s, s, s, false, false);
    /* A GPT block's products, forward, then the two backward products of
     * each (dX = dY W^T, dW = dY^T X): cpu-small (B*T = 1024 tokens, C =
     * 128: qkv, MLP out, MLP in), then cpu-medium (2048 tokens, C = 192:
     * qkv, attention out, MLP in, MLP out). */
    const int64_t shapes[7][3] = {{1024, 128, 384}, {1024, 512, 128}, {1024, 128, 512},
                                  {2048, 192, 576}, {2048, 192, 192}, {2048, 192, 768},
                                  {2048, 768, 192}};
    for (int i = 0; i < (quick ? 1 : 7); i++) bench_block("matmul", shapes[i]);
    /* shakespeare-char's: a bench of their own, "matmul_large" (run by
     * `full matmul` as well). */
    for (int i = 0; i < (quick ? 0 : 4); i++) bench_block("matmul_large", shakespeare_layers[i]);
    bench_gelu("cpu-small", 1024, 128, 512);
    if (!quick) bench_gelu("cpu-medium", 2048, 192, 768);
    /* A decoding step of a batch of prompts: a few rows against a linear
     * layer's weight, stored (out, in) (shakespeare-char's qkv; gpt2-124m's
     * MLP in). */
    bench_blocking();
    const int64_t skinny[2][2] = {{384, 1152}, {768, 3072}};
    for (int i = 0; i < (quick ? 1 : 2); i++)
        for (int64_t m = 2; m <= 32; m *= 2)
            bench_matmul("matmul", "decode", m, skinny[i][0], skinny[i][1], false, true);
    bench_batched(64, 64, 32, 64);
    bench_batched(16, 256, 64, 256);

    const int64_t cols = 4096, rows = big / cols;
    bench_memory("add", 0, rows, cols, 3.0 * 4 * (double)big);
    bench_memory("mul", 1, rows, cols, 3.0 * 4 * (double)big);
    bench_memory("add_row_broadcast", 2, rows, cols, 2.0 * 4 * (double)big);
    bench_memory("exp", 3, rows, cols, 2.0 * 4 * (double)big);
    bench_memory("sum_all", 4, rows, cols, 4.0 * (double)big);
    bench_memory("sum_rows", 5, rows, cols, 4.0 * (double)big);
    bench_memory("sum_columns", 6, rows, cols, 4.0 * (double)big);
    bench_tiny();
    bench_philox();
    bench_attention("cpu-small", 16, 4, 64, 32);
    bench_attention("cpu-medium", 16, 6, 128, 32);
    if (!quick) bench_attention("shakespeare-char", 64, 6, 256, 64);
    return 0;
}
