/*
 * tests/test_cuda_fused.c - the CUDA backend's fused kernels against the
 * CPU backend: softmax, LayerNorm, cross-entropy, attention on every rung,
 * AdamW. tests/helpers/cuda_harness.h says what every case checks;
 * tests/test_cuda.c has the primitives.
 *
 * Without a GPU (CI) the binary prints why it skipped and exits 0.
 */
#include "tests/helpers/cuda_harness.h"

#ifdef AWL_WITH_CUDA

/* ---- fused kernels ----------------------------------------------------------------------- */

static int fn_softmax(const awl_backend *be, awl_view *const *v, const void *ctx)
{
    return be->softmax_forward(v[0], v[1], *(const bool *)ctx);
}

static int fn_softmax_bwd(const awl_backend *be, awl_view *const *v, const void *ctx)
{
    return be->softmax_backward(v[0], v[1], v[2], *(const bool *)ctx);
}

START_TEST(test_softmax)
{
    const int64_t shapes[][2] = {{37, 65}, {128, 1000}, {8, 50304}, {3, 7}};
    for (int t = 0; t < 2; t++)
        for (int s = 0; s < 4; s++)
            for (int lg = 0; lg < 2; lg++) {
                awl_dtype dt = t ? AWL_BF16 : AWL_F32;
                bool log = lg;
                int64_t R = shapes[s][0], N = shapes[s][1];
                tcase f = {.n = 2,
                           .op = {OPND(OUT, dt, R, N), ranged(OPND(IN, dt, R, N), -8, 8)},
                           .fn = fn_softmax,
                           .ctx = &log,
                           .ref_f32 = true};
                snprintf(f.name, sizeof f.name, "softmax %s log %d (%lld, %lld)",
                         awl_dtype_name(dt), lg, (long long)R, (long long)N);
                run_case(&f);
                operand y = log ? ranged(OPND(IN, dt, R, N), -6, -0.01)
                                : ranged(OPND(IN, dt, R, N), 0.001, 0.5);
                tcase b = {.n = 3,
                           .op = {OPND(OUT, dt, R, N), OPND(IN, dt, R, N), y},
                           .fn = fn_softmax_bwd,
                           .ctx = &log,
                           .ref_f32 = true};
                if (dt == AWL_F32) b.tol = 1e-4; /* dy - dot cancels */
                if (dt == AWL_BF16) b.tol = 3e-2;
                snprintf(b.name, sizeof b.name, "softmax_backward %s log %d (%lld, %lld)",
                         awl_dtype_name(dt), lg, (long long)R, (long long)N);
                run_case(&b);
            }
}
END_TEST

typedef struct ln_ctx {
    bool weight, bias;
} ln_ctx;

static int fn_ln_fwd(const awl_backend *be, awl_view *const *v, const void *ctx)
{
    const ln_ctx *l = ctx;
    return be->layernorm_forward(v[0], v[1], v[2], v[3], l->weight ? v[4] : NULL,
                                 l->bias ? v[5] : NULL, 1e-5);
}

static int fn_ln_bwd(const awl_backend *be, awl_view *const *v, const void *ctx)
{
    const ln_ctx *l = ctx;
    return be->layernorm_backward(v[0], l->bias ? v[1] : NULL, l->bias ? v[2] : NULL, v[3], v[4],
                                  l->weight ? v[5] : NULL, v[6], v[7]);
}

START_TEST(test_layernorm)
{
    const int64_t shapes[][2] = {{64, 384}, {1000, 768}, {33, 100}, {5, 2048}};
    for (int t = 0; t < 2; t++)
        for (int s = 0; s < 4; s++)
            for (int wb = 0; wb < 2; wb++) {
                awl_dtype dt = t ? AWL_BF16 : AWL_F32;
                int64_t R = shapes[s][0], C = shapes[s][1];
                ln_ctx l = {wb == 0, wb == 0};
                tcase f = {.n = 6,
                           .op = {OPND(OUT, dt, R, C), OPND(OUT, AWL_F32, R), OPND(OUT, AWL_F32, R),
                                  ranged(OPND(IN, dt, R, C), -3, 5), OPND(IN, dt, C),
                                  OPND(IN, dt, C)},
                           .fn = fn_ln_fwd,
                           .ctx = &l,
                           .ref_f32 = true,
                           .tol = t ? 1e-2 : 2e-5};
                snprintf(f.name, sizeof f.name, "layernorm %s (%lld, %lld) affine %d",
                         awl_dtype_name(dt), (long long)R, (long long)C, wb == 0);
                run_case(&f);
                tcase b = {.n = 8,
                           .op = {OPND(OUT, dt, R, C), OPND(OUT, dt, C), OPND(OUT, dt, C),
                                  OPND(IN, dt, R, C), ranged(OPND(IN, dt, R, C), -3, 5),
                                  OPND(IN, dt, C), ranged(OPND(IN, AWL_F32, R), -0.5, 1.5),
                                  ranged(OPND(IN, AWL_F32, R), 0.3, 1.2)},
                           .fn = fn_ln_bwd,
                           .ctx = &l,
                           .ref_f32 = true,
                           .tol = t ? 2e-2 : 1e-4};
                snprintf(b.name, sizeof b.name, "layernorm_backward %s (%lld, %lld) affine %d",
                         awl_dtype_name(dt), (long long)R, (long long)C, wb == 0);
                run_case(&b);
            }
}
END_TEST

static int fn_ce_fwd(const awl_backend *be, awl_view *const *v, const void *ctx)
{
    return be->cross_entropy_forward(v[0], v[1], v[2], v[3], *(const int *)ctx);
}

static int fn_ce_bwd(const awl_backend *be, awl_view *const *v, const void *ctx)
{
    return be->cross_entropy_backward(v[0], v[1], v[2], v[3], v[4], *(const int *)ctx);
}

START_TEST(test_cross_entropy)
{
    const int64_t shapes[][2] = {{64, 65}, {32, 50304}, {300, 1000}};
    for (int t = 0; t < 2; t++)
        for (int s = 0; s < 3; s++) {
            awl_dtype dt = t ? AWL_BF16 : AWL_F32;
            int64_t N = shapes[s][0], V = shapes[s][1];
            int ignore = 3; /* some targets hit it: targets are drawn from [0, 9] */
            operand targets = ints(OPND(IN, AWL_I32, N), 0, 9);
            tcase f = {.n = 4,
                       .op = {OPND(OUT, dt, N), OPND(OUT, AWL_F32, N),
                              ranged(OPND(IN, dt, N, V), -6, 6), targets},
                       .fn = fn_ce_fwd,
                       .ctx = &ignore,
                       .ref_f32 = true};
            snprintf(f.name, sizeof f.name, "cross_entropy %s (%lld, %lld)", awl_dtype_name(dt),
                     (long long)N, (long long)V);
            run_case(&f);
            double lo = log((double)V) + 1.0;
            tcase b = {.n = 5,
                       .op = {OPND(OUT, dt, N, V), broadcast(OPND(IN, dt, N), 0),
                              ranged(OPND(IN, dt, N, V), -6, 6),
                              ranged(OPND(IN, AWL_F32, N), lo, lo + 1), targets},
                       .fn = fn_ce_bwd,
                       .ctx = &ignore,
                       .ref_f32 = true};
            snprintf(b.name, sizeof b.name, "cross_entropy_backward %s (%lld, %lld)",
                     awl_dtype_name(dt), (long long)N, (long long)V);
            run_case(&b);
        }
}
END_TEST

typedef struct att_ctx {
    double scale;
    bool causal, tf32;
} att_ctx;

static int fn_att_fwd(const awl_backend *be, awl_view *const *v, const void *ctx)
{
    const att_ctx *a = ctx;
    if (a->tf32 && be == cuda) be->set_matmul_fast_fp32(true);
    int rc = be->attention_forward(v[0], v[1], v[2], v[3], v[4], a->scale, a->causal);
    if (a->tf32 && be == cuda) be->set_matmul_fast_fp32(false);
    return rc;
}

static int fn_att_bwd(const awl_backend *be, awl_view *const *v, const void *ctx)
{
    const att_ctx *a = ctx;
    if (a->tf32 && be == cuda) be->set_matmul_fast_fp32(true);
    int rc = be->attention_backward(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], a->scale,
                                    a->causal);
    if (a->tf32 && be == cuda) be->set_matmul_fast_fp32(false);
    return rc;
}

/* q, k or v as a slice of a fused (B, T, 3, H, D) projection: strides along
 * B, H, T of that layout, offset `which` * H * D. */
static operand qkv_slice(role r, awl_dtype dt, int64_t B, int64_t H, int64_t T, int64_t D,
                         int which)
{
    operand o = OPND(r, dt, B, H, T, D);
    o.strides[0] = T * 3 * H * D;
    o.strides[1] = D;
    o.strides[2] = 3 * H * D;
    o.strides[3] = 1;
    o.offset = which * H * D;
    return ranged(o, -1, 1);
}

START_TEST(test_attention)
{
    /* The last shape only in the default float32 mode: enough heads that the
     * one-pass backward gives each block several key tiles (its slices). */
    const int64_t shapes[][4] = {
        {2, 3, 100, 64}, {1, 2, 256, 128}, {2, 2, 67, 32}, {1, 1, 130, 80}, {8, 40, 256, 16}};
    /* Every rung: tensor cores (float32 as 3xTF32, or TF32 in TF32 mode;
     * bfloat16 mma), float32's backward in two kernels where it would take
     * one pass (the "attention" setting "split"), and the CUDA-core kernels
     * ("simt"). */
    static const struct {
        awl_dtype dt;
        const char *env; /* the "attention" setting, or NULL for "auto" */
        bool tf32;
        double tol_fwd, tol_bwd;
        const char *name;
    } modes[] = {
        {AWL_F32, NULL, false, 1e-5, 1e-4, ""},
        {AWL_F32, NULL, true, 5e-3, 1e-2, " tf32"},
        {AWL_F32, "split", false, 1e-5, 1e-4, " split"},
        {AWL_F32, "split", true, 5e-3, 1e-2, " tf32 split"},
        {AWL_F32, "simt", false, 1e-5, 1e-4, " simt"},
        {AWL_BF16, NULL, false, 1e-2, 2e-2, ""},
        {AWL_BF16, "simt", false, 1e-2, 2e-2, " simt"},
    };
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++)
        for (int s = 0; s < 5; s++)
            for (int causal = 0; causal < 2; causal++) {
                if (s == 4 && m != 0) continue;
                awl_dtype dt = modes[m].dt;
                ck_assert_int_eq(
                    cuda->set_option("attention", modes[m].env ? modes[m].env : "auto"), AWL_OK);
                int64_t B = shapes[s][0], H = shapes[s][1], T = shapes[s][2], D = shapes[s][3];
                att_ctx a = {1.0 / sqrt((double)D), causal == 1, modes[m].tf32};
                bool strided = s % 2 == 0;
                operand q = strided ? qkv_slice(IN, dt, B, H, T, D, 0)
                                    : ranged(OPND(IN, dt, B, H, T, D), -1, 1);
                operand k = strided ? qkv_slice(IN, dt, B, H, T, D, 1)
                                    : ranged(OPND(IN, dt, B, H, T, D), -1, 1);
                operand v = strided ? qkv_slice(IN, dt, B, H, T, D, 2)
                                    : ranged(OPND(IN, dt, B, H, T, D), -1, 1);
                tcase f = {.n = 5,
                           .op = {OPND(OUT, dt, B, H, T, D), OPND(OUT, AWL_F32, B, H, T), q, k, v},
                           .fn = fn_att_fwd,
                           .ctx = &a,
                           .ref_f32 = true,
                           .tol = modes[m].tol_fwd};
                snprintf(f.name, sizeof f.name, "attention %s%s (%lld,%lld,%lld,%lld) causal %d%s",
                         awl_dtype_name(dt), modes[m].name, (long long)B, (long long)H,
                         (long long)T, (long long)D, causal, strided ? " strided" : "");
                run_case(&f);
                operand dq =
                    strided ? qkv_slice(OUT, dt, B, H, T, D, 0) : OPND(OUT, dt, B, H, T, D);
                tcase b = {.n = 9,
                           .op = {dq, OPND(OUT, dt, B, H, T, D), OPND(OUT, dt, B, H, T, D),
                                  ranged(OPND(IN, dt, B, H, T, D), -1, 1), q, k, v,
                                  ranged(OPND(IN, dt, B, H, T, D), -1, 1),
                                  ranged(OPND(IN, AWL_F32, B, H, T), 2.5, 3.5)},
                           .fn = fn_att_bwd,
                           .ctx = &a,
                           .ref_f32 = true,
                           .tol = modes[m].tol_bwd};
                snprintf(b.name, sizeof b.name,
                         "attention_backward %s%s (%lld,%lld,%lld,%lld) causal %d%s",
                         awl_dtype_name(dt), modes[m].name, (long long)B, (long long)H,
                         (long long)T, (long long)D, causal, strided ? " strided" : "");
                run_case(&b);
            }
    ck_assert_int_eq(cuda->set_option("attention", "auto"), AWL_OK);
}
END_TEST

typedef struct adam_ctx {
    int n;
    float wd[4];
    awl_adamw_args args;
} adam_ctx;

static int fn_adamw(const awl_backend *be, awl_view *const *v, const void *ctx)
{
    const adam_ctx *a = ctx;
    awl_view p[4], g[4], m[4], s[4];
    for (int i = 0; i < a->n; i++) {
        p[i] = *v[4 * i];
        g[i] = *v[4 * i + 1];
        m[i] = *v[4 * i + 2];
        s[i] = *v[4 * i + 3];
    }
    return be->adamw_step(a->n, p, g, m, s, a->wd, &a->args);
}

START_TEST(test_adamw)
{
    adam_ctx a = {3, {0.1f, 0.0f, 0.1f, 0}, {1e-3f, 0.9f, 0.95f, 1e-8f, 7}};
    const int64_t sizes[3] = {1000003, 1, 4096};
    tcase c = {.n = 12, .fn = fn_adamw, .ctx = &a, .tol = 1e-6};
    for (int i = 0; i < 3; i++) {
        c.op[4 * i] = ranged(OPND(INOUT, AWL_F32, sizes[i]), -1, 1);
        c.op[4 * i + 1] = ranged(OPND(IN, AWL_F32, sizes[i]), -1, 1);
        c.op[4 * i + 2] = ranged(OPND(INOUT, AWL_F32, sizes[i]), -0.1, 0.1);
        c.op[4 * i + 3] = ranged(OPND(INOUT, AWL_F32, sizes[i]), 1e-4, 1e-2);
    }
    snprintf(c.name, sizeof c.name, "adamw_step");
    double e = run_case(&c);
    printf("test_cuda_fused: adamw relative difference to the CPU %.3g (0 means bit-identical)\n",
           e);
}
END_TEST

#endif

int main(void)
{
#ifndef AWL_WITH_CUDA
    CUDA_SKIP_UNBUILT("test_cuda_fused");
    return 0;
#else
    const cuda_test tests[] = {
        {"softmax", test_softmax},
        {"layernorm", test_layernorm},
        {"cross_entropy", test_cross_entropy},
        {"attention", test_attention},
        {"adamw", test_adamw},
    };
    return cuda_tests_main("cuda_fused", tests, sizeof tests / sizeof tests[0]);
#endif
}
