/*
 * backends/cuda/cuda_gemm_tf32x3.cuh - float32 matrix products on TF32 tensor
 * cores at float32's accuracy (3xTF32); see cuda_gemm_tf32x3.cu.
 *
 * Kept apart from cuda_common.cuh so that bench/bench_cublas.cu can build
 * the kernel alone and set it beside cuBLAS's own float32 modes.
 */
#ifndef AWL_BACKENDS_CUDA_GEMM_TF32X3_CUH
#define AWL_BACKENDS_CUDA_GEMM_TF32X3_CUH

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

/* out (M x N, row-major, row stride ldo) = x (M x K) y (K x N) [+ out] [+ bias],
 * x's element (m, k) at x[m * xs_m + k * xs_k] and y's element (k, n) at
 * y[k * ys_k + n * ys_n]; each operand has one of its two strides 1. */
struct awlc_tf32x3_args {
    float *out;
    int64_t ldo;
    const float *x;
    int64_t xs_m, xs_k;
    const float *y;
    int64_t ys_k, ys_n;
    const float *bias; /* N floats added to every row, or NULL */
    int64_t M, N, K;
    bool accumulate; /* add the product to out */
    int passes;      /* 3 (float32 accuracy); 1, plain TF32, only for measurements */
};

/* Whether the kernel takes the product: M and N multiples of 128, K of 32,
 * 16-byte aligned operands and rows. Everything else goes to cuBLAS. */
bool awlc_tf32x3_takes(const awlc_tf32x3_args *a);

/* How many slices of K the product is cut into so that a GPU of `sms`
 * multiprocessors gets enough blocks (1 when the output alone gives them),
 * and the float32 workspace those slices need (bytes, 0 for one slice). */
int awlc_tf32x3_splits(const awlc_tf32x3_args *a, int sms);
size_t awlc_tf32x3_workspace_bytes(const awlc_tf32x3_args *a, int splits);

/* Queues the product on `stream` (and, for several slices, the kernel that
 * adds them in slice order into out). */
cudaError_t awlc_tf32x3_gemm(const awlc_tf32x3_args *a, int splits, float *workspace,
                             cudaStream_t stream);

#endif
