/*
 * bench/bench_cuda.c - the CUDA backend's kernels against the chip's ceilings.
 *
 *   ./bench_cuda            JSON lines on stdout, one per measurement
 *   ./bench_cuda attention  the ceilings and the attention rungs alone
 *
 * First the two ceilings, measured in this process (METHOD.md): a large
 * device-to-device copy (bytes read + written per second) and the backend's
 * matrix products in float32 (awl's 3xTF32 kernel), TF32 and bfloat16
 * (cuBLAS) on random data. Then every fused
 * kernel, and the element-wise and reduction paths a GPT step leans on, at
 * the reference shapes of DESIGN.md (shakespeare-char: B=64, T=256, C=384,
 * H=6, V=65; gpt2-124m: B=16, T=1024, C=768, H=12, V=50304). Each line gives
 * the median time of 20 launches (CUDA events, after 3 warm-ups), the fewest
 * bytes the kernel must move (each input read once, each output written
 * once) and that over the time as a fraction of the copy ceiling, or, for
 * matrix-bound kernels, FLOP/s as a fraction of the matching product rate.
 * Without a GPU it prints one "skipped" line and exits 0.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"

#ifdef AWL_WITH_CUDA
#include <cuda_runtime_api.h>

static const awl_backend *be;
static double copy_gbps, gemm_tflops[3]; /* f32, tf32, bf16 */

typedef struct dbuf {
    awl_view v;
    size_t bytes;
} dbuf;

/* A contiguous device tensor, filled from Philox (uniform in [lo, hi]). */
static dbuf make(awl_dtype dt, int ndim, const int64_t *shape, double lo, double hi)
{
    dbuf b;
    memset(&b, 0, sizeof b);
    b.v.ndim = ndim;
    b.v.dtype = dt;
    int64_t n = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        b.v.shape[d] = shape[d];
        b.v.strides[d] = n;
        n *= shape[d];
    }
    b.bytes = (size_t)n * awl_dtype_size(dt);
    b.v.data = be->alloc(0, b.bytes);
    if (!b.v.data) {
        fprintf(stderr, "bench_cuda: %s\n", awl_last_error());
        exit(1);
    }
    static uint64_t offset;
    if (dt == AWL_I32) {
        int32_t *h = malloc(b.bytes);
        for (int64_t i = 0; i < n; i++) h[i] = (int32_t)((i * 2654435761u) % (uint64_t)hi);
        be->copy_from_host(0, b.v.data, h, b.bytes);
        free(h);
    } else {
        be->random(&b.v, AWL_RANDOM_UNIFORM, 1234, offset, lo, hi);
        offset += (uint64_t)n;
    }
    return b;
}

#define MAKE(dt, lo, hi, ...)                                                                      \
    make(dt, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__},  \
         lo, hi)

static void drop(dbuf *b) { be->free(0, b->v.data, b->bytes); }

typedef int (*bench_fn)(const void *ctx);

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Median milliseconds of 20 runs after 3 warm-ups; negative on failure. */
static double time_ms(bench_fn fn, const void *ctx)
{
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    float t[20];
    for (int i = 0; i < 3; i++)
        if (fn(ctx) != AWL_OK) return -1;
    for (int i = 0; i < 20; i++) {
        cudaEventRecord(e0, 0);
        if (fn(ctx) != AWL_OK) return -1;
        cudaEventRecord(e1, 0);
        cudaEventSynchronize(e1);
        cudaEventElapsedTime(&t[i], e0, e1);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    if (cudaGetLastError() != cudaSuccess) return -1;
    qsort(t, 20, sizeof t[0], cmp_float);
    return 0.5 * (t[9] + t[10]);
}

static void report_bytes(const char *config, const char *name, double ms, double bytes)
{
    if (ms < 0) {
        printf("{\"bench\":\"cuda\",\"config\":\"%s\",\"name\":\"%s\",\"error\":\"%s\"}\n", config,
               name, awl_last_error());
        return;
    }
    double gbps = bytes / (ms * 1e-3) / 1e9;
    printf("{\"bench\":\"cuda\",\"config\":\"%s\",\"name\":\"%s\",\"ms\":%.4f,\"bytes\":%.0f,"
           "\"GBps\":%.1f,\"of_copy_ceiling\":%.3f}\n",
           config, name, ms, bytes, gbps, gbps / copy_gbps);
    fflush(stdout);
}

static void report_flops(const char *config, const char *name, double ms, double flops, int ceil)
{
    if (ms < 0) {
        printf("{\"bench\":\"cuda\",\"config\":\"%s\",\"name\":\"%s\",\"error\":\"%s\"}\n", config,
               name, awl_last_error());
        return;
    }
    double tf = flops / (ms * 1e-3) / 1e12;
    printf("{\"bench\":\"cuda\",\"config\":\"%s\",\"name\":\"%s\",\"ms\":%.4f,\"flop\":%.0f,"
           "\"TFLOPs\":%.2f,\"of_gemm_ceiling\":%.3f}\n",
           config, name, ms, flops, tf, ceil >= 0 ? tf / gemm_tflops[ceil] : 0.0);
    fflush(stdout);
}

/* ---- adapters ------------------------------------------------------------------- */

typedef struct views {
    const awl_view *v[10];
    int i0;
    double d0;
    bool b0;
    awl_adamw_args adam;
    const float *wd;
    int n;
    awl_view *list[4];
    const awl_dropout_args *drop;
} views;

static int b_copy(const void *c)
{
    const views *x = c;
    return be->copy(x->v[0], x->v[1]);
}
static int b_matmul(const void *c)
{
    const views *x = c;
    return be->matmul(x->v[0], x->v[1], x->v[2], false);
}
static int b_binary(const void *c)
{
    const views *x = c;
    return be->binary(AWL_BINARY_ADD, x->v[0], x->v[1], x->v[2]);
}
static int b_dropout(const void *c)
{
    const views *x = c;
    return be->dropout(x->v[0], x->v[1], x->drop);
}
static int b_gelu(const void *c)
{
    const views *x = c;
    return be->unary(AWL_UNARY_GELU, x->v[0], x->v[1], 0);
}
static int b_reduce(const void *c)
{
    const views *x = c;
    return be->reduce(AWL_REDUCE_SUM, x->v[0], x->v[1]);
}
static int b_softmax(const void *c)
{
    const views *x = c;
    return be->softmax_forward(x->v[0], x->v[1], false);
}
static int b_softmax_bwd(const void *c)
{
    const views *x = c;
    return be->softmax_backward(x->v[0], x->v[1], x->v[2], false);
}
static int b_ln(const void *c)
{
    const views *x = c;
    return be->layernorm_forward(x->v[0], x->v[1], x->v[2], x->v[3], x->v[4], x->v[5], 1e-5);
}
/* a block's residual addition then ln_2: two kernels, or one */
static int b_add_then_ln(const void *c)
{
    const views *x = c;
    int st = be->dropout_add(x->v[0], x->v[4], x->v[5], NULL);
    return st ? st
              : be->layernorm_forward(x->v[1], x->v[2], x->v[3], x->v[0], x->v[6], x->v[7], 1e-5);
}
static int b_add_ln(const void *c)
{
    const views *x = c;
    return be->dropout_add_layernorm(x->v[0], x->v[1], x->v[2], x->v[3], x->v[4], x->v[5], x->v[6],
                                     x->v[7], 1e-5, NULL);
}
static int b_ln_bwd(const void *c)
{
    const views *x = c;
    return be->layernorm_backward(x->v[0], x->v[1], x->v[2], x->v[3], x->v[4], x->v[5], x->v[6],
                                  x->v[7], x->v[8], x->v[9]);
}
static int b_ce(const void *c)
{
    const views *x = c;
    return be->cross_entropy_forward(x->v[0], x->v[1], x->v[2], x->v[3], -1);
}
static int b_ce_bwd(const void *c)
{
    const views *x = c;
    return be->cross_entropy_backward(x->v[0], x->v[1], x->v[2], x->v[3], x->v[4], -1);
}
static int b_ce_both(const void *c)
{
    const views *x = c;
    return be->cross_entropy_forward_backward(x->v[0], x->v[1], x->v[2], x->v[3], x->v[4], x->v[5],
                                              -1);
}
static int b_att(const void *c)
{
    const views *x = c;
    return be->attention_forward(x->v[0], x->v[1], x->v[2], x->v[3], x->v[4], x->d0, true, x->drop);
}
static int b_att_bwd(const void *c)
{
    const views *x = c;
    return be->attention_backward(x->v[0], x->v[1], x->v[2], x->v[3], x->v[4], x->v[5], x->v[6],
                                  x->v[7], x->v[8], x->d0, true, x->drop);
}
static int b_index_add(const void *c)
{
    const views *x = c;
    return be->index_add(x->v[0], x->v[1], x->v[2]);
}
static int b_adamw(const void *c)
{
    const views *x = c;
    return be->adamw_step(x->n, x->list[0], x->list[1], x->list[2], x->list[3], x->wd, &x->adam);
}

/* ---- ceilings -------------------------------------------------------------------- */

static void ceilings(void)
{
    int64_t n = (int64_t)1 << 28; /* 1 GiB of float32 each way */
    dbuf a = MAKE(AWL_F32, -1, 1, n), b = MAKE(AWL_F32, -1, 1, n);
    views x = {.v = {&b.v, &a.v}};
    double ms = time_ms(b_copy, &x);
    copy_gbps = 2.0 * (double)n * 4 / (ms * 1e-3) / 1e9;
    printf("{\"bench\":\"cuda\",\"name\":\"copy_ceiling\",\"ms\":%.4f,\"GBps\":%.1f}\n", ms,
           copy_gbps);
    drop(&a);
    drop(&b);

    /* the backend's own products: float32 on awl's 3xTF32 kernel
     * (cuda_gemm_tf32x3.cu; cuBLAS's sgemm with the fp32_matmul setting
     * "sgemm"), TF32 mode and bf16 on cuBLAS */
    const awl_dtype types[3] = {AWL_F32, AWL_F32, AWL_BF16};
    const char *names[3] = {"f32_gemm", "tf32_gemm", "bf16_gemm"};
    for (int t = 0; t < 3; t++) {
        int64_t m = t == 0 ? 4096 : 8192;
        dbuf A = MAKE(types[t], -1, 1, m, m), B = MAKE(types[t], -1, 1, m, m),
             C = MAKE(types[t], -1, 1, m, m);
        views y = {.v = {&C.v, &A.v, &B.v}};
        be->set_matmul_fast_fp32(t == 1);
        ms = time_ms(b_matmul, &y);
        be->set_matmul_fast_fp32(false);
        gemm_tflops[t] = 2.0 * m * m * m / (ms * 1e-3) / 1e12;
        printf(
            "{\"bench\":\"cuda\",\"name\":\"%s_ceiling\",\"m\":%lld,\"ms\":%.4f,\"TFLOPs\":%.1f}\n",
            names[t], (long long)m, ms, gemm_tflops[t]);
        drop(&A);
        drop(&B);
        drop(&C);
    }
    fflush(stdout);
}

/* ---- one configuration -------------------------------------------------------------- */

/* Causal attention at one configuration's shape, on every rung. */
static void attention_rungs(const char *name, int64_t B, int64_t T, int64_t H, int64_t D)
{
    /* tensor cores (f32 as 3xTF32, TF32 mode, bf16) with the backward's dS
     * stored by its first kernel for its second (the default), the backward
     * in two kernels that recompute it (split) and in one pass with dQ in
     * slices (one-pass), bf16's wgmma kernels on mma.sync (mma), and CUDA cores (simt); the
     * tensor-core rungs again with dropout 0.1 (the mask drawn in the kernels); ceiling: the
     * matching GEMM rate */
    const awl_dropout_args att_drop = {0.1, 1, 0};
    static const struct {
        awl_dtype dt;
        const char *env; /* the "attention" setting, or NULL for "auto" */
        bool tf32, dropout;
        int ceiling; /* index into gemm_tflops */
        const char *suffix;
    } rungs[] = {{AWL_F32, NULL, false, false, 0, "f32"},
                 {AWL_F32, "split", false, false, 0, "f32 split"},
                 {AWL_F32, "one-pass", false, false, 0, "f32 one-pass"},
                 {AWL_F32, NULL, true, false, 1, "f32 tf32"},
                 {AWL_F32, "split", true, false, 1, "f32 tf32 split"},
                 {AWL_F32, "one-pass", true, false, 1, "f32 tf32 one-pass"},
                 {AWL_F32, "simt", false, false, 0, "f32 simt"},
                 {AWL_BF16, NULL, false, false, 2, "bf16"},
                 {AWL_BF16, "split", false, false, 2, "bf16 split"},
                 {AWL_BF16, "one-pass", false, false, 2, "bf16 one-pass"},
                 {AWL_BF16, "mma", false, false, 2, "bf16 mma"},
                 {AWL_BF16, "simt", false, false, 2, "bf16 simt"},
                 {AWL_F32, NULL, false, true, 0, "f32 dropout"},
                 {AWL_F32, "one-pass", false, true, 0, "f32 dropout one-pass"},
                 {AWL_F32, NULL, true, true, 1, "f32 tf32 dropout"},
                 {AWL_F32, "one-pass", true, true, 1, "f32 tf32 dropout one-pass"},
                 {AWL_BF16, NULL, false, true, 2, "bf16 dropout"},
                 {AWL_BF16, "split", false, true, 2, "bf16 dropout split"},
                 {AWL_BF16, "one-pass", false, true, 2, "bf16 dropout one-pass"},
                 {AWL_BF16, "mma", false, true, 2, "bf16 dropout mma"}};
    for (size_t t = 0; t < sizeof rungs / sizeof rungs[0]; t++) {
        awl_dtype dt = rungs[t].dt;
        be->set_option("attention", rungs[t].env ? rungs[t].env : "auto");
        be->set_matmul_fast_fp32(rungs[t].tf32);
        char fwd_name[64], bwd_name[64];
        snprintf(fwd_name, sizeof fwd_name, "attention_forward %s", rungs[t].suffix);
        snprintf(bwd_name, sizeof bwd_name, "attention_backward %s", rungs[t].suffix);
        dbuf q = MAKE(dt, -1, 1, B, H, T, D), k = MAKE(dt, -1, 1, B, H, T, D),
             v = MAKE(dt, -1, 1, B, H, T, D), o = MAKE(dt, -1, 1, B, H, T, D),
             lse = MAKE(AWL_F32, 0, 1, B, H, T), dq = MAKE(dt, -1, 1, B, H, T, D),
             dk = MAKE(dt, -1, 1, B, H, T, D), dv = MAKE(dt, -1, 1, B, H, T, D),
             dout = MAKE(dt, -1, 1, B, H, T, D);
        views f = {.v = {&o.v, &lse.v, &q.v, &k.v, &v.v},
                   .d0 = 1.0 / sqrt((double)D),
                   .drop = rungs[t].dropout ? &att_drop : NULL};
        double flops = 4.0 * B * H * T * T * D / 2; /* two products, causal half */
        report_flops(name, fwd_name, time_ms(b_att, &f), flops, rungs[t].ceiling);
        be->attention_forward(&o.v, &lse.v, &q.v, &k.v, &v.v, f.d0, true, f.drop);
        views g = {.v = {&dq.v, &dk.v, &dv.v, &dout.v, &q.v, &k.v, &v.v, &o.v, &lse.v},
                   .d0 = f.d0,
                   .drop = f.drop};
        report_flops(name, bwd_name, time_ms(b_att_bwd, &g), 2.5 * flops, rungs[t].ceiling);
        be->set_matmul_fast_fp32(false);
        be->set_option("attention", "auto");
        drop(&q);
        drop(&k);
        drop(&v);
        drop(&o);
        drop(&lse);
        drop(&dq);
        drop(&dk);
        drop(&dv);
        drop(&dout);
    }
}

static void config(const char *name, int64_t B, int64_t T, int64_t C, int64_t H, int64_t V, int L)
{
    int64_t N = B * T, D = C / H;
    /* element-wise: residual add, bias broadcast add, GELU */
    {
        dbuf x = MAKE(AWL_F32, -1, 1, N, 4 * C), y = MAKE(AWL_F32, -1, 1, N, 4 * C),
             o = MAKE(AWL_F32, -1, 1, N, 4 * C), bias = MAKE(AWL_F32, -1, 1, 1, 4 * C);
        views v = {.v = {&o.v, &x.v, &y.v}};
        report_bytes(name, "add (B*T,4C)", time_ms(b_binary, &v), 3.0 * x.bytes);
        awl_view bb = bias.v;
        bb.shape[0] = N;
        bb.strides[0] = 0;
        views vb = {.v = {&o.v, &x.v, &bb}};
        report_bytes(name, "add bias broadcast (B*T,4C)", time_ms(b_binary, &vb), 2.0 * x.bytes);
        views vg = {.v = {&o.v, &x.v}};
        report_bytes(name, "gelu (B*T,4C)", time_ms(b_gelu, &vg), 2.0 * x.bytes);
        const awl_dropout_args d = {0.1, 1, 0};
        views vd = {.v = {&o.v, &x.v}, .drop = &d};
        report_bytes(name, "dropout, mask drawn in-kernel (B*T,4C)", time_ms(b_dropout, &vd),
                     2.0 * x.bytes);
        views vr = {.v = {&bias.v, &x.v}};
        report_bytes(name, "sum over rows (bias grad) (B*T,4C)", time_ms(b_reduce, &vr), x.bytes);
        awl_view col = o.v;
        col.shape[1] = 1;
        views vr2 = {.v = {&col, &x.v}};
        report_bytes(name, "sum over last axis (B*T,4C)", time_ms(b_reduce, &vr2), x.bytes);
        /* matmul of the MLP: (B*T, C) @ (C, 4C) */
        awl_view a = x.v, w = y.v, out = o.v;
        a.shape[1] = C;
        a.strides[0] = C;
        w.shape[0] = C;
        w.strides[0] = 4 * C;
        views vm = {.v = {&out, &a, &w}};
        report_flops(name, "matmul f32 (B*T,C)@(C,4C)", time_ms(b_matmul, &vm), 2.0 * N * C * 4 * C,
                     0);
        be->set_matmul_fast_fp32(true);
        report_flops(name, "matmul tf32 (B*T,C)@(C,4C)", time_ms(b_matmul, &vm),
                     2.0 * N * C * 4 * C, 1);
        be->set_matmul_fast_fp32(false);
        drop(&x);
        drop(&y);
        drop(&o);
        drop(&bias);
    }
    /* layernorm */
    {
        dbuf x = MAKE(AWL_F32, -1, 1, N, C), o = MAKE(AWL_F32, -1, 1, N, C),
             dy = MAKE(AWL_F32, -1, 1, N, C), m = MAKE(AWL_F32, -1, 1, N),
             r = MAKE(AWL_F32, 0.5, 1.5, N), w = MAKE(AWL_F32, -1, 1, C),
             b = MAKE(AWL_F32, -1, 1, C), dw = MAKE(AWL_F32, -1, 1, C),
             db = MAKE(AWL_F32, -1, 1, C);
        views v = {.v = {&o.v, &m.v, &r.v, &x.v, &w.v, &b.v}};
        report_bytes(name, "layernorm_forward", time_ms(b_ln, &v), 2.0 * x.bytes);
        /* autocast's residual addition (bfloat16 branch) then ln_2 (bfloat16
         * out): sum written, out written, x and h read */
        {
            dbuf h = MAKE(AWL_BF16, -1, 1, N, C), s = MAKE(AWL_F32, -1, 1, N, C),
                 o16 = MAKE(AWL_BF16, -1, 1, N, C);
            views va = {.v = {&s.v, &o16.v, &m.v, &r.v, &x.v, &h.v, &w.v, &b.v}};
            double bytes = 3.0 * x.bytes; /* 4 + 2 + 4 + 2 bytes an element */
            report_bytes(name, "dropout_add + layernorm_forward (bf16 h and out)",
                         time_ms(b_add_then_ln, &va), bytes + x.bytes);
            report_bytes(name, "dropout_add_layernorm (bf16 h and out)", time_ms(b_add_ln, &va),
                         bytes);
            drop(&h);
            drop(&s);
            drop(&o16);
        }
        views vb = {.v = {&o.v, &dw.v, &db.v, &dy.v, &x.v, &w.v, &m.v, &r.v}};
        report_bytes(name, "layernorm_backward", time_ms(b_ln_bwd, &vb), 3.0 * x.bytes);
        /* with a residual's gradient added in (dx_add): one more read */
        dbuf da = MAKE(AWL_F32, -1, 1, N, C);
        vb.v[8] = &da.v;
        report_bytes(name, "layernorm_backward + dx_add", time_ms(b_ln_bwd, &vb), 4.0 * x.bytes);
        /* and dx rounded to bfloat16 as well (dx_copy): half a write more */
        dbuf dc = MAKE(AWL_BF16, -1, 1, N, C);
        vb.v[9] = &dc.v;
        report_bytes(name, "layernorm_backward + dx_add + dx_copy", time_ms(b_ln_bwd, &vb),
                     4.5 * x.bytes);
        drop(&dc);
        drop(&da);
        drop(&x);
        drop(&o);
        drop(&dy);
        drop(&m);
        drop(&r);
        drop(&w);
        drop(&b);
        drop(&dw);
        drop(&db);
    }
    /* cross-entropy over the vocabulary */
    {
        dbuf lg = MAKE(AWL_F32, -4, 4, N, V), dl = MAKE(AWL_F32, -4, 4, N, V),
             loss = MAKE(AWL_F32, 0, 1, N), lse = MAKE(AWL_F32, 0, 1, N),
             t = MAKE(AWL_I32, 0, (double)V, N), g = MAKE(AWL_F32, 0, 1, N);
        views v = {.v = {&loss.v, &lse.v, &lg.v, &t.v}};
        report_bytes(name, "cross_entropy_forward", time_ms(b_ce, &v), (double)lg.bytes);
        be->cross_entropy_forward(&loss.v, &lse.v, &lg.v, &t.v, -1);
        views vb = {.v = {&dl.v, &g.v, &lg.v, &lse.v, &t.v}};
        report_bytes(name, "cross_entropy_backward", time_ms(b_ce_bwd, &vb), 2.0 * lg.bytes);
        /* both in one kernel: the logits read from DRAM once, dlogits written */
        views vf = {.v = {&loss.v, &lse.v, &dl.v, &g.v, &lg.v, &t.v}};
        report_bytes(name, "cross_entropy_forward_backward", time_ms(b_ce_both, &vf),
                     2.0 * lg.bytes);
        drop(&lg);
        drop(&dl);
        drop(&loss);
        drop(&lse);
        drop(&t);
        drop(&g);
    }
    /* softmax over attention rows (the composed path's shape) */
    if (B * H * T * T <= ((int64_t)1 << 31)) {
        dbuf s = MAKE(AWL_F32, -4, 4, B * H * T, T), y = MAKE(AWL_F32, 0, 1, B * H * T, T),
             d = MAKE(AWL_F32, -1, 1, B * H * T, T);
        views v = {.v = {&y.v, &s.v}};
        report_bytes(name, "softmax_forward (B*H*T,T)", time_ms(b_softmax, &v), 2.0 * s.bytes);
        views vb = {.v = {&d.v, &s.v, &y.v}};
        report_bytes(name, "softmax_backward (B*H*T,T)", time_ms(b_softmax_bwd, &vb),
                     3.0 * s.bytes);
        drop(&s);
        drop(&y);
        drop(&d);
    }
    attention_rungs(name, B, T, H, D);
    /* embedding backward: index_add of B*T rows of C onto V rows */
    {
        dbuf dst = MAKE(AWL_F32, -1, 1, V, C), idx = MAKE(AWL_I32, 0, (double)V, N),
             src = MAKE(AWL_F32, -1, 1, N, C);
        views v = {.v = {&dst.v, &idx.v, &src.v}};
        report_bytes(name, "index_add (embedding backward)", time_ms(b_index_add, &v),
                     (double)src.bytes + 2.0 * dst.bytes);
        /* the same with every index among 65 rows, as with a character
         * vocabulary: long runs of one row */
        dbuf few = MAKE(AWL_I32, 0, 65.0, N);
        views vf = {.v = {&dst.v, &few.v, &src.v}};
        report_bytes(name, "index_add (65 distinct rows)", time_ms(b_index_add, &vf),
                     (double)src.bytes + 2.0 * 65 * C * 4);
        drop(&few);
        drop(&dst);
        drop(&idx);
        drop(&src);
    }
    /* AdamW over the model's parameters, grouped as four tensors of the
     * model's sizes: embeddings, attention, MLP, and the small vectors. */
    {
        int64_t sizes[4] = {V * C + T * C, L * 4 * C * C, L * 8 * C * C, L * 13 * C + 2 * C};
        dbuf p[4], g[4], m[4], s[4];
        awl_view pv[4], gv[4], mv[4], sv[4];
        double total = 0;
        for (int i = 0; i < 4; i++) {
            p[i] = MAKE(AWL_F32, -1, 1, sizes[i]);
            g[i] = MAKE(AWL_F32, -1, 1, sizes[i]);
            m[i] = MAKE(AWL_F32, -0.1, 0.1, sizes[i]);
            s[i] = MAKE(AWL_F32, 0, 0.01, sizes[i]);
            pv[i] = p[i].v;
            gv[i] = g[i].v;
            mv[i] = m[i].v;
            sv[i] = s[i].v;
            total += (double)sizes[i];
        }
        float wd[4] = {0.1f, 0.1f, 0.1f, 0.0f};
        views v = {.n = 4,
                   .list = {pv, gv, mv, sv},
                   .wd = wd,
                   .adam = {.lr = 1e-3f,
                            .beta1 = 0.9f,
                            .beta2 = 0.95f,
                            .eps = 1e-8f,
                            .step = 1,
                            .grad_scale = 1.0f}};
        /* reads p, g, m, v; writes p, m, v */
        report_bytes(name, "adamw_step (all parameters)", time_ms(b_adamw, &v), 7.0 * 4 * total);
        for (int i = 0; i < 4; i++) {
            drop(&p[i]);
            drop(&g[i]);
            drop(&m[i]);
            drop(&s[i]);
        }
    }
}
#endif

int main(int argc, char **argv)
{
#ifndef AWL_WITH_CUDA
    (void)argc;
    (void)argv;
    printf("{\"bench\":\"cuda\",\"skipped\":\"awl was built without CUDA\"}\n");
    return 0;
#else
    be = awl_cuda_backend();
    if (be->device_count() == 0) {
        int n = 0;
        cudaError_t err = cudaGetDeviceCount(&n);
        printf("{\"bench\":\"cuda\",\"skipped\":\"no CUDA device (cudaGetDeviceCount: %s)\"}\n",
               cudaGetErrorString(err));
        return 0;
    }
    struct cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    printf("{\"bench\":\"cuda\",\"device\":\"%s\",\"sms\":%d,\"l2_mb\":%.0f}\n", prop.name,
           prop.multiProcessorCount, prop.l2CacheSize / 1048576.0);
    ceilings();
    if (argc > 1 && strcmp(argv[1], "attention") == 0) {
        attention_rungs("shakespeare-char", 64, 256, 6, 64);
        attention_rungs("gpt2-124m", 16, 1024, 12, 64);
    } else {
        config("shakespeare-char", 64, 256, 384, 6, 65, 6);
        config("gpt2-124m", 16, 1024, 768, 12, 50304, 12);
    }
    printf("{\"bench\":\"cuda\",\"reserved_bytes\":%zu}\n", be->memory_reserved(0));
    return 0;
#endif
}
