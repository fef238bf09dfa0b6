/*
 * bench/bench_cublas.cu - what cuBLAS itself offers awl's CUDA products, measured on the
 * device at gpt2-124m's shapes (16,384 tokens, C = 768), apart from awl: JSON lines.
 *
 * 1. float32 products ("fp32_mode" lines). Each compute mode's time and its largest error
 *    against a float64 product of the same inputs (cuBLAS's DGEMM, the first 64 columns):
 *      sgemm        CUBLAS_COMPUTE_32F, IEEE float32 multiply-adds (awl's float32 mode)
 *      bf16x9       CUBLAS_COMPUTE_32F_EMULATED_16BFX9 with the EAGER emulation strategy:
 *                   float32 emulated by nine bfloat16 products, where the GPU has it
 *      tf32         CUBLAS_COMPUTE_32F_FAST_TF32, one pass (awl's TF32 mode)
 *      3xtf32       each operand split as big + small TF32 values and the three products
 *                   big.big + big.small + small.big done as one TF32 product over 3K
 *                   (A' = [Ab Ab As], B' = [Bb; Bs; Bb]), the splits included in the time
 *      awl_3xtf32_splitsS  awl's own kernel (backends/cuda/cuda_gemm_tf32x3.cu), K whole
 *                   and in the slices the backend would choose; where it chooses more
 *                   than one, "awl_3xtf32_try_splitsS" lines with other counts
 *      awl_tf32_splitsS     the same kernel in one pass (TF32, to see what bounds it)
 *    and products of the big parts alone (exact in float32, so their error is the
 *    accumulation's): "bigs_sgemm", "bigs_tf32", and "bigs_awl_mma" (the kernel's one
 *    pass, which sums each 32-long chunk of K on the tensor cores).
 * 2. GELU epilogues ("gelu_epilogue" lines), bfloat16: the MLP's first product with its
 *    bias then a GELU kernel, against CUBLASLT_EPILOGUE_GELU_AUX_BIAS (the output and the
 *    pre-activation written by the product); the product giving the GELU's output gradient
 *    then a GELU-backward kernel, against CUBLASLT_EPILOGUE_DGELU (reading that
 *    pre-activation). The GELU kernels here are plain ones, one bf16 pair a thread.
 * 3. Every algorithm cuBLASLt's heuristic offers for those products ("lt_candidate"
 *    lines, in the heuristic's order, up to 16): the MLP's first product with a bias
 *    alone and with GELU_AUX_BIAS, the output gradient's product plain, with DGELU and
 *    with DGELU_BGRAD (the bias gradient in float32 as well), each timed, with its tile,
 *    stages, split-K and cluster ids, and how far its output is from the first's.
 *
 *     ./build/bench_cublas            (a CUDA build; on the device: scripts/gpu_run.sh's
 *                                      "cublas" stage)
 */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "backends/cuda/cuda_gemm_tf32x3.cuh"

namespace
{

#define CHECK(x) check_status((int)(x), #x, __LINE__)
void check_status(int status, const char *what, int line)
{
    if (status == 0) return;
    fprintf(stderr, "bench_cublas: %s failed (%d) at line %d\n", what, status, line);
    exit(1);
}

const int ROWS = 16384, C = 768, HIDDEN = 3072, REF_COLS = 64;

/* A deterministic pseudo-random value in [-0.5, 0.5) * scale for element i. */
__device__ float hashed(size_t i, unsigned seed, float scale)
{
    unsigned h = (unsigned)i * 2654435761u ^ seed;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    return ((float)(h & 0xffffff) / 16777216.0f - 0.5f) * scale;
}

__global__ void fill_f32(float *p, size_t n, unsigned seed)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) p[i] = hashed(i, seed, 1.0f);
}

__global__ void fill_bf16(__nv_bfloat16 *p, size_t n, unsigned seed)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) p[i] = __float2bfloat16(hashed(i, seed, 0.2f));
}

__global__ void widen(double *d, const float *s, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) d[i] = s[i];
}

/* v rounded to the nearest TF32 value (10 fraction bits), by integer add and mask. */
__device__ float tf32_big(float v)
{
    return __uint_as_float((__float_as_uint(v) + 0x1000u) & 0xffffe000u);
}

__global__ void round_tf32(float *d, const float *s, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) d[i] = tf32_big(s[i]);
}

/* The three K blocks of a split operand. src is a column-major rows x cols matrix
 * (leading dimension ld) whose K runs along its rows (k_rows) or its columns; dst
 * keeps that orientation with K tripled, block b holding the small part where bit b
 * of `smalls` is set and the big part elsewhere. */
__global__ void split3(float *dst, const float *src, int rows, int cols, int ld, int k, bool k_rows,
                       unsigned smalls)
{
    size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (idx >= (size_t)rows * cols) return;
    int i = (int)(idx % rows), j = (int)(idx / rows);
    float v = src[i + (size_t)j * ld], big = tf32_big(v), small = v - big;
    for (int b = 0; b < 3; b++) {
        float w = (smalls >> b) & 1 ? small : big;
        if (k_rows)
            dst[(i + (size_t)b * k) + (size_t)j * 3 * k] = w;
        else
            dst[i + (size_t)(j + b * k) * rows] = w;
    }
}

/* The GELU of awl (backends/ops.h's formula, tanh's approximation as a sigmoid). */
__device__ float gelu_sigmoid(float x)
{
    return 1.0f / (1.0f + __expf(-1.5957691216057308f * (x + 0.044715f * x * x * x)));
}

__global__ void gelu_pairs(__nv_bfloat162 *y, const __nv_bfloat162 *x, size_t pairs)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= pairs) return;
    float2 v = __bfloat1622float2(x[i]);
    y[i] = __floats2bfloat162_rn(v.x * gelu_sigmoid(v.x), v.y * gelu_sigmoid(v.y));
}

__device__ float gelu_grad(float x)
{
    float s = gelu_sigmoid(x);
    return s * (1.0f + x * (1.0f - s) * 1.5957691216057308f * (1.0f + 0.134145f * x * x));
}

__global__ void gelu_backward_pairs(__nv_bfloat162 *dx, const __nv_bfloat162 *dy,
                                    const __nv_bfloat162 *x, size_t pairs)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= pairs) return;
    float2 v = __bfloat1622float2(x[i]), g = __bfloat1622float2(dy[i]);
    dx[i] = __floats2bfloat162_rn(g.x * gelu_grad(v.x), g.y * gelu_grad(v.y));
}

unsigned blocks(size_t n) { return (unsigned)((n + 255) / 256); }

/* Milliseconds a call of f takes on the GPU: the mean of 20 after 3 warm-up calls. */
template <class F> double time_ms(F f)
{
    for (int i = 0; i < 3; i++) f();
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    CHECK(cudaEventRecord(e0));
    for (int i = 0; i < 20; i++) f();
    CHECK(cudaEventRecord(e1));
    CHECK(cudaEventSynchronize(e1));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, e0, e1));
    CHECK(cudaEventDestroy(e0));
    CHECK(cudaEventDestroy(e1));
    return ms / 20;
}

/* A column-major product D (m x n) = op(A) op(B) in cuBLAS's terms. */
struct product {
    const char *name;
    cublasOperation_t ta, tb;
    int m, n, k;
    int lda() const { return ta == CUBLAS_OP_N ? m : k; }
    int ldb() const { return tb == CUBLAS_OP_N ? k : n; }
    size_t a_elems() const { return (size_t)m * k; }
    size_t b_elems() const { return (size_t)k * n; }
};

/* The largest |got - ref| over the first REF_COLS columns, and the largest |ref|. */
void max_error(const float *got_dev, const double *ref, int m, double *err, double *ref_max)
{
    size_t n = (size_t)m * REF_COLS;
    float *got = (float *)malloc(n * sizeof *got);
    CHECK(cudaMemcpy(got, got_dev, n * sizeof *got, cudaMemcpyDeviceToHost));
    *err = *ref_max = 0;
    for (size_t i = 0; i < n; i++) {
        *err = fmax(*err, fabs(got[i] - ref[i]));
        *ref_max = fmax(*ref_max, fabs(ref[i]));
    }
    free(got);
}

/* The float64 product of A and B's first REF_COLS columns, copied to the host. */
double *reference(cublasHandle_t h, const product &p, const float *a, const float *b)
{
    double *ad, *bd, *cd, one = 1, zero = 0;
    CHECK(cudaMalloc(&ad, p.a_elems() * sizeof(double)));
    CHECK(cudaMalloc(&bd, p.b_elems() * sizeof(double)));
    CHECK(cudaMalloc(&cd, (size_t)p.m * REF_COLS * sizeof(double)));
    widen<<<blocks(p.a_elems()), 256>>>(ad, a, p.a_elems());
    widen<<<blocks(p.b_elems()), 256>>>(bd, b, p.b_elems());
    CHECK(cublasDgemm(h, p.ta, p.tb, p.m, REF_COLS, p.k, &one, ad, p.lda(), bd, p.ldb(), &zero, cd,
                      p.m));
    double *ref = (double *)malloc((size_t)p.m * REF_COLS * sizeof *ref);
    CHECK(cudaMemcpy(ref, cd, (size_t)p.m * REF_COLS * sizeof *ref, cudaMemcpyDeviceToHost));
    cudaFree(ad);
    cudaFree(bd);
    cudaFree(cd);
    return ref;
}

void fp32_modes(cublasHandle_t h)
{
    const product products[] = {
        {"qkv", CUBLAS_OP_T, CUBLAS_OP_N, 3 * C, ROWS, C},
        {"fc", CUBLAS_OP_T, CUBLAS_OP_N, HIDDEN, ROWS, C},
        {"proj_fc", CUBLAS_OP_T, CUBLAS_OP_N, C, ROWS, HIDDEN},
        {"fc_dx", CUBLAS_OP_N, CUBLAS_OP_N, C, ROWS, HIDDEN},
        {"fc_dw", CUBLAS_OP_N, CUBLAS_OP_T, C, HIDDEN, ROWS},
    };
    size_t most = (size_t)HIDDEN * ROWS;
    float *a, *b, *d, *a3, *b3, *abig, *bbig;
    CHECK(cudaMalloc(&a, most * 4));
    CHECK(cudaMalloc(&b, most * 4));
    CHECK(cudaMalloc(&d, most * 4));
    CHECK(cudaMalloc(&a3, 3 * most * 4));
    CHECK(cudaMalloc(&b3, 3 * most * 4));
    CHECK(cudaMalloc(&abig, most * 4));
    CHECK(cudaMalloc(&bbig, most * 4));
    fill_f32<<<blocks(most), 256>>>(a, most, 1);
    fill_f32<<<blocks(most), 256>>>(b, most, 2);
    const float one = 1, zero = 0;
    for (const product &p : products) {
        auto gemm = [&](const float *x, int ldx, const float *y, int ldy, int k,
                        cublasComputeType_t mode) {
            return cublasGemmEx(h, p.ta, p.tb, p.m, p.n, k, &one, x, CUDA_R_32F, ldx, y, CUDA_R_32F,
                                ldy, &zero, d, CUDA_R_32F, p.m, mode, CUBLAS_GEMM_DEFAULT);
        };
        /* ms < 0: not timed (the error alone) */
        auto report = [&](const char *mode, double ms, const double *ref) {
            double err, ref_max;
            max_error(d, ref, p.m, &err, &ref_max);
            char timing[64] = "\"ms\":null,\"tflops\":null";
            if (ms > 0)
                snprintf(timing, sizeof timing, "\"ms\":%.4f,\"tflops\":%.1f", ms,
                         2.0 * p.m * p.n * p.k / ms / 1e9);
            printf("{\"bench\":\"fp32_mode\",\"product\":\"%s\",\"m\":%d,\"n\":%d,\"k\":%d,"
                   "\"mode\":\"%s\",%s,\"max_abs_err\":%.3e,\"max_abs_ref\":%.3f}\n",
                   p.name, p.m, p.n, p.k, mode, timing, err, ref_max);
        };
        double *ref = reference(h, p, a, b);
        struct {
            const char *name;
            cublasComputeType_t mode;
            cublasEmulationStrategy_t strategy;
        } modes[] = {
            {"sgemm", CUBLAS_COMPUTE_32F, CUBLAS_EMULATION_STRATEGY_DEFAULT},
            {"bf16x9", CUBLAS_COMPUTE_32F_EMULATED_16BFX9, CUBLAS_EMULATION_STRATEGY_EAGER},
            {"tf32", CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_EMULATION_STRATEGY_DEFAULT},
        };
        for (const auto &mode : modes) {
            CHECK(cublasSetEmulationStrategy(h, mode.strategy));
            double ms = time_ms([&] { CHECK(gemm(a, p.lda(), b, p.ldb(), p.k, mode.mode)); });
            report(mode.name, ms, ref);
        }
        CHECK(cublasSetEmulationStrategy(h, CUBLAS_EMULATION_STRATEGY_DEFAULT));
        /* 3xTF32 over K' = 3K: A' = [Ab Ab As] (small in block 2), B' = [Bb; Bs; Bb] (in 1) */
        bool a_k_rows = p.ta != CUBLAS_OP_N, b_k_rows = p.tb == CUBLAS_OP_N;
        int a_rows = p.ta == CUBLAS_OP_N ? p.m : p.k, b_rows = p.tb == CUBLAS_OP_N ? p.k : p.n;
        int lda3 = a_k_rows ? 3 * p.k : p.m, ldb3 = b_k_rows ? 3 * p.k : p.n;
        double ms = time_ms([&] {
            split3<<<blocks(p.a_elems()), 256>>>(a3, a, a_rows, (int)(p.a_elems() / a_rows),
                                                 p.lda(), p.k, a_k_rows, 4u);
            split3<<<blocks(p.b_elems()), 256>>>(b3, b, b_rows, (int)(p.b_elems() / b_rows),
                                                 p.ldb(), p.k, b_k_rows, 2u);
            CHECK(gemm(a3, lda3, b3, ldb3, 3 * p.k, CUBLAS_COMPUTE_32F_FAST_TF32));
        });
        report("3xtf32", ms, ref);
        /* awl's own kernel (backends/cuda/cuda_gemm_tf32x3.cu): D^T row-major = op(B)^T op(A)^T */
        auto awl_args = [&](const float *x, const float *y, int passes) {
            awlc_tf32x3_args g = {};
            g.out = d, g.ldo = p.m, g.M = p.n, g.N = p.m, g.K = p.k;
            g.x = x, g.y = y, g.passes = passes;
            if (p.tb == CUBLAS_OP_N)
                g.xs_m = p.ldb(), g.xs_k = 1;
            else
                g.xs_m = 1, g.xs_k = p.ldb();
            if (p.ta == CUBLAS_OP_N)
                g.ys_k = p.lda(), g.ys_n = 1;
            else
                g.ys_k = 1, g.ys_n = p.lda();
            return g;
        };
        int sms = 0;
        CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
        float *ws = NULL;
        auto awl_gemm = [&](const awlc_tf32x3_args &g, int splits) {
            CHECK(awlc_tf32x3_gemm(&g, splits, ws, 0));
        };
        for (int passes : {3, 1})
            for (int sliced = 0; sliced <= 1; sliced++) {
                awlc_tf32x3_args g = awl_args(b, a, passes);
                if (!awlc_tf32x3_takes(&g)) continue;
                int splits = sliced ? awlc_tf32x3_splits(&g, sms) : 1;
                if (sliced && splits == 1) continue;
                if (sliced && passes == 3) /* other slice counts */
                    for (int s2 : {2, 4, 8, 12, 16}) {
                        CHECK(cudaMalloc(&ws, awlc_tf32x3_workspace_bytes(&g, s2) + 16));
                        double t2 = time_ms([&] { awl_gemm(g, s2); });
                        CHECK(cudaFree(ws));
                        char nm[64];
                        snprintf(nm, sizeof nm, "awl_3xtf32_try_splits%d", s2);
                        report(nm, t2, ref);
                    }
                CHECK(cudaMalloc(&ws, awlc_tf32x3_workspace_bytes(&g, splits) + 16));
                double t = time_ms([&] { awl_gemm(g, splits); });
                CHECK(cudaFree(ws));
                char name[64];
                snprintf(name, sizeof name, "awl_%s_splits%d", passes == 3 ? "3xtf32" : "tf32",
                         splits);
                report(name, t, ref);
            }
        free(ref);
        /* the big parts alone: each product exact in float32, the error the sum's */
        round_tf32<<<blocks(p.a_elems()), 256>>>(abig, a, p.a_elems());
        round_tf32<<<blocks(p.b_elems()), 256>>>(bbig, b, p.b_elems());
        ref = reference(h, p, abig, bbig);
        CHECK(gemm(abig, p.lda(), bbig, p.ldb(), p.k, CUBLAS_COMPUTE_32F));
        report("bigs_sgemm", -1, ref);
        CHECK(gemm(abig, p.lda(), bbig, p.ldb(), p.k, CUBLAS_COMPUTE_32F_FAST_TF32));
        report("bigs_tf32", -1, ref);
        {
            awlc_tf32x3_args g = awl_args(bbig, abig, 1);
            if (awlc_tf32x3_takes(&g)) {
                ws = NULL;
                awl_gemm(g, 1);
                report("bigs_awl_mma", -1, ref);
            }
        }
        free(ref);
    }
    for (float *p : {a, b, d, a3, b3, abig, bbig}) cudaFree(p);
}

/* cuBLASLt: D (m x n, column-major, bf16) = op(A) op(B) through an epilogue. */
struct lt_context {
    cublasLtHandle_t handle;
    void *workspace;
    size_t workspace_bytes;
};

/* One product's descriptors and the heuristic's preference (lt's workspace): D (m x n,
 * column-major, bf16) = op(A) op(B) through an epilogue reading or writing bias (a float32
 * one where bias_f32) and aux (NULL where the epilogue has none). */
struct lt_problem {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulPreference_t pref;
};

lt_problem lt_describe(const lt_context &lt, cublasOperation_t ta, cublasOperation_t tb, int m,
                       int n, int k, int lda, int ldb, cublasLtEpilogue_t epilogue,
                       const void *bias, bool bias_f32, void *aux)
{
    lt_problem p;
    CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                         sizeof epilogue));
    if (bias)
        CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                             sizeof bias));
    if (bias_f32) {
        cudaDataType_t t = CUDA_R_32F;
        CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &t,
                                             sizeof t));
    }
    if (aux) {
        int64_t ld = m;
        CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                             &aux, sizeof aux));
        CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld,
                                             sizeof ld));
    }
    CHECK(cublasLtMatrixLayoutCreate(&p.la, CUDA_R_16BF, ta == CUBLAS_OP_N ? m : k,
                                     ta == CUBLAS_OP_N ? k : m, lda));
    CHECK(cublasLtMatrixLayoutCreate(&p.lb, CUDA_R_16BF, tb == CUBLAS_OP_N ? k : n,
                                     tb == CUBLAS_OP_N ? n : k, ldb));
    CHECK(cublasLtMatrixLayoutCreate(&p.ld, CUDA_R_16BF, m, n, m));
    CHECK(cublasLtMatmulPreferenceCreate(&p.pref));
    CHECK(cublasLtMatmulPreferenceSetAttribute(p.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                               &lt.workspace_bytes, sizeof lt.workspace_bytes));
    return p;
}

void lt_release(lt_problem &p)
{
    cublasLtMatmulPreferenceDestroy(p.pref);
    cublasLtMatrixLayoutDestroy(p.la);
    cublasLtMatrixLayoutDestroy(p.lb);
    cublasLtMatrixLayoutDestroy(p.ld);
    cublasLtMatmulDescDestroy(p.desc);
}

/* The product through the heuristic's first choice. */
void lt_matmul(const lt_context &lt, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
               int k, const void *a, int lda, const void *b, int ldb, void *d,
               cublasLtEpilogue_t epilogue, const void *bias, void *aux)
{
    lt_problem p = lt_describe(lt, ta, tb, m, n, k, lda, ldb, epilogue, bias, false, aux);
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    CHECK(cublasLtMatmulAlgoGetHeuristic(lt.handle, p.desc, p.la, p.lb, p.ld, p.ld, p.pref, 1,
                                         &result, &found));
    if (!found) check_status(1, "cublasLtMatmulAlgoGetHeuristic: no algorithm", __LINE__);
    const float one = 1, zero = 0;
    CHECK(cublasLtMatmul(lt.handle, p.desc, &one, a, p.la, b, p.lb, &zero, d, p.ld, d, p.ld,
                         &result.algo, lt.workspace, lt.workspace_bytes, 0));
    lt_release(p);
}

/* The largest difference of two bf16 arrays of n, and how many elements differ. */
void compare_bf16(const __nv_bfloat16 *x_dev, const __nv_bfloat16 *y_dev, size_t n,
                  double *max_diff, size_t *differ)
{
    __nv_bfloat16 *x = (__nv_bfloat16 *)malloc(n * 2), *y = (__nv_bfloat16 *)malloc(n * 2);
    CHECK(cudaMemcpy(x, x_dev, n * 2, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(y, y_dev, n * 2, cudaMemcpyDeviceToHost));
    *max_diff = 0;
    *differ = 0;
    for (size_t i = 0; i < n; i++) {
        double diff = fabs((double)__bfloat162float(x[i]) - (double)__bfloat162float(y[i]));
        *max_diff = fmax(*max_diff, diff);
        *differ += diff != 0;
    }
    free(x);
    free(y);
}

/* Every algorithm cuBLASLt's heuristic offers for one epilogue product (up to
 * CANDIDATES, in its order, with lt's workspace), each timed and its output compared
 * with the first's: "lt_candidate" lines. bias_f32 sets a float32 bias (DGELU_BGRAD's
 * output: the bias gradient). */
const int CANDIDATES = 16;
void lt_candidates(const lt_context &lt, const char *name, cublasOperation_t ta,
                   cublasOperation_t tb, int m, int n, int k, const void *a, int lda, const void *b,
                   int ldb, __nv_bfloat16 *d, __nv_bfloat16 *first, cublasLtEpilogue_t epilogue,
                   const void *bias, bool bias_f32, void *aux)
{
    lt_problem p = lt_describe(lt, ta, tb, m, n, k, lda, ldb, epilogue, bias, bias_f32, aux);
    cublasLtMatmulHeuristicResult_t results[CANDIDATES];
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt.handle, p.desc, p.la, p.lb, p.ld, p.ld,
                                                       p.pref, CANDIDATES, results, &found);
    if (st != CUBLAS_STATUS_SUCCESS || found == 0)
        printf("{\"bench\":\"lt_candidate\",\"product\":\"%s\",\"found\":0,\"status\":%d}\n", name,
               (int)st);
    const float one = 1, zero = 0;
    const double flop = 2.0 * m * n * k;
    for (int i = 0; i < found; i++) {
        cublasLtMatmulAlgo_t *algo = &results[i].algo;
        auto run = [&] {
            cublasStatus_t s =
                cublasLtMatmul(lt.handle, p.desc, &one, a, p.la, b, p.lb, &zero, d, p.ld, d, p.ld,
                               algo, lt.workspace, lt.workspace_bytes, 0);
            if (s != CUBLAS_STATUS_SUCCESS) check_status((int)s, "cublasLtMatmul", __LINE__);
        };
        double ms = time_ms(run); /* d then holds this algorithm's product, synchronised */
        size_t elems = (size_t)m * n, differ = 0;
        double diff = 0;
        if (i == 0)
            CHECK(cudaMemcpy(first, d, elems * 2, cudaMemcpyDeviceToDevice));
        else
            compare_bf16(first, d, elems, &diff, &differ);
        int id = 0, tile = 0, stages = 0, splitk = 0, swizzle = 0, custom = 0, cluster = 0;
        size_t got;
        cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &got);
        cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile,
                                             &got);
        cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages,
                                             sizeof stages, &got);
        cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk,
                                             sizeof splitk, &got);
        cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swizzle,
                                             sizeof swizzle, &got);
        cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &custom,
                                             sizeof custom, &got);
        cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster,
                                             sizeof cluster, &got);
        printf("{\"bench\":\"lt_candidate\",\"product\":\"%s\",\"rank\":%d,\"ms\":%.4f,"
               "\"tflops\":%.1f,\"workspace\":%zu,\"waves\":%.2f,\"algo_id\":%d,\"tile_id\":%d,"
               "\"stages_id\":%d,\"splitk\":%d,\"swizzle\":%d,\"custom\":%d,\"cluster_id\":%d,"
               "\"max_diff_from_rank0\":%.3e,\"differ_from_rank0\":%zu}\n",
               name, i, ms, flop / ms / 1e9, results[i].workspaceSize, results[i].wavesCount, id,
               tile, stages, splitk, swizzle, custom, cluster, diff, differ);
    }
    lt_release(p);
}

void gelu_epilogues(void)
{
    lt_context lt = {nullptr, nullptr, (size_t)64 << 20};
    CHECK(cublasLtCreate(&lt.handle));
    CHECK(cudaMalloc(&lt.workspace, lt.workspace_bytes));
    size_t nx = (size_t)ROWS * C, nh = (size_t)ROWS * HIDDEN, nw = (size_t)HIDDEN * C;
    __nv_bfloat16 *x, *w1, *b1, *w2, *dy, *pre, *act, *pre_aux, *act_epi, *dact, *dpre, *dpre_epi;
    __nv_bfloat16 **buffers[] = {&x,   &w1,      &b1,      &w2,   &dy,   &pre,
                                 &act, &pre_aux, &act_epi, &dact, &dpre, &dpre_epi};
    const size_t sizes[] = {nx, nw, HIDDEN, nw, nx, nh, nh, nh, nh, nh, nh, nh};
    for (int i = 0; i < 12; i++) CHECK(cudaMalloc(buffers[i], sizes[i] * 2));
    fill_bf16<<<blocks(nx), 256>>>(x, nx, 1);
    fill_bf16<<<blocks(nw), 256>>>(w1, nw, 2);
    fill_bf16<<<blocks(HIDDEN), 256>>>(b1, HIDDEN, 3);
    fill_bf16<<<blocks(nw), 256>>>(w2, nw, 4);
    fill_bf16<<<blocks(nx), 256>>>(dy, nx, 5);
    size_t pairs = nh / 2;
    /* row-major pre (ROWS, HIDDEN) = x w1^T + b1, as column-major pre^T = w1 x^T */
    auto fc = [&](void *out, cublasLtEpilogue_t epilogue, void *aux) {
        lt_matmul(lt, CUBLAS_OP_T, CUBLAS_OP_N, HIDDEN, ROWS, C, w1, C, x, C, out, epilogue, b1,
                  aux);
    };
    /* row-major dact (ROWS, HIDDEN) = dy w2, w2 (C, HIDDEN) row-major */
    auto fc_output_grad = [&](void *out, cublasLtEpilogue_t epilogue, void *aux) {
        lt_matmul(lt, CUBLAS_OP_N, CUBLAS_OP_N, HIDDEN, ROWS, C, w2, HIDDEN, dy, C, out, epilogue,
                  nullptr, aux);
    };
    double fwd_gemm = time_ms([&] { fc(pre, CUBLASLT_EPILOGUE_BIAS, nullptr); });
    double fwd_two = time_ms([&] {
        fc(pre, CUBLASLT_EPILOGUE_BIAS, nullptr);
        gelu_pairs<<<blocks(pairs), 256>>>((__nv_bfloat162 *)act, (__nv_bfloat162 *)pre, pairs);
    });
    double fwd_epi = time_ms([&] { fc(act_epi, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, pre_aux); });
    double bwd_gemm = time_ms([&] { fc_output_grad(dact, CUBLASLT_EPILOGUE_DEFAULT, nullptr); });
    double bwd_two = time_ms([&] {
        fc_output_grad(dact, CUBLASLT_EPILOGUE_DEFAULT, nullptr);
        gelu_backward_pairs<<<blocks(pairs), 256>>>((__nv_bfloat162 *)dpre, (__nv_bfloat162 *)dact,
                                                    (__nv_bfloat162 *)pre, pairs);
    });
    double bwd_epi = time_ms([&] { fc_output_grad(dpre_epi, CUBLASLT_EPILOGUE_DGELU, pre_aux); });
    double aux_diff, act_diff, grad_diff;
    size_t aux_differ, act_differ, grad_differ;
    compare_bf16(pre, pre_aux, nh, &aux_diff, &aux_differ);
    compare_bf16(act, act_epi, nh, &act_diff, &act_differ);
    compare_bf16(dpre, dpre_epi, nh, &grad_diff, &grad_differ);
    printf(
        "{\"bench\":\"gelu_epilogue\",\"pass\":\"forward\",\"gemm_ms\":%.4f,"
        "\"gemm_then_gelu_ms\":%.4f,\"epilogue_ms\":%.4f,\"aux_max_diff\":%.3e,\"aux_differ\":%zu,"
        "\"out_max_diff\":%.3e,\"out_differ\":%zu,\"elements\":%zu}\n",
        fwd_gemm, fwd_two, fwd_epi, aux_diff, aux_differ, act_diff, act_differ, nh);
    printf("{\"bench\":\"gelu_epilogue\",\"pass\":\"backward\",\"gemm_ms\":%.4f,"
           "\"gemm_then_gelu_ms\":%.4f,\"epilogue_ms\":%.4f,\"out_max_diff\":%.3e,"
           "\"out_differ\":%zu,\"elements\":%zu}\n",
           bwd_gemm, bwd_two, bwd_epi, grad_diff, grad_differ, nh);
    float *dbias;
    CHECK(cudaMalloc(&dbias, HIDDEN * sizeof(float)));
    lt_candidates(lt, "fc", CUBLAS_OP_T, CUBLAS_OP_N, HIDDEN, ROWS, C, w1, C, x, C, pre, act,
                  CUBLASLT_EPILOGUE_BIAS, b1, false, nullptr);
    lt_candidates(lt, "fc_gelu_aux_bias", CUBLAS_OP_T, CUBLAS_OP_N, HIDDEN, ROWS, C, w1, C, x, C,
                  act_epi, act, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, b1, false, pre_aux);
    lt_candidates(lt, "fc_output_grad", CUBLAS_OP_N, CUBLAS_OP_N, HIDDEN, ROWS, C, w2, HIDDEN, dy,
                  C, dact, dpre, CUBLASLT_EPILOGUE_DEFAULT, nullptr, false, nullptr);
    lt_candidates(lt, "fc_output_grad_dgelu", CUBLAS_OP_N, CUBLAS_OP_N, HIDDEN, ROWS, C, w2, HIDDEN,
                  dy, C, dpre_epi, dpre, CUBLASLT_EPILOGUE_DGELU, nullptr, false, pre_aux);
    lt_candidates(lt, "fc_output_grad_dgelu_bgrad_f32", CUBLAS_OP_N, CUBLAS_OP_N, HIDDEN, ROWS, C,
                  w2, HIDDEN, dy, C, dpre_epi, dpre, CUBLASLT_EPILOGUE_DGELU_BGRAD, dbias, true,
                  pre_aux);
    cudaFree(dbias);
    for (__nv_bfloat16 **p : buffers) cudaFree(*p);
    cudaFree(lt.workspace);
    cublasLtDestroy(lt.handle);
}

} // namespace

int main(void)
{
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        printf("bench_cublas: no CUDA device, nothing to measure\n");
        return 0;
    }
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    cublasHandle_t h;
    CHECK(cublasCreate(&h));
    int version;
    CHECK(cublasGetVersion(h, &version));
    printf("{\"bench\":\"cublas\",\"device\":\"%s\",\"sm\":%d%d,\"cublas_version\":%d}\n",
           prop.name, prop.major, prop.minor, version);
    fp32_modes(h);
    gelu_epilogues();
    cublasDestroy(h);
    return 0;
}
