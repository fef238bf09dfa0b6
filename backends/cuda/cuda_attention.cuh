/*
 * backends/cuda/cuda_attention.cuh - what the two attention files share.
 *
 * cuda_attention.cu holds the entries, the CUDA-core kernels and the
 * backward's row dot product; cuda_attention_mma.cu the tensor-core
 * kernels. Both read q, k, v (B, H, T, D) through `heads` (strides along
 * B, H, T; D contiguous) and the saved log-sum-exp through `lse_ref`.
 */
#ifndef AWL_BACKENDS_CUDA_ATTENTION_CUH
#define AWL_BACKENDS_CUDA_ATTENTION_CUH

#include "backends/cuda/cuda_common.cuh"
#include "common/dropout.h"

/* A (B, H, T, D) tensor: base pointer and strides along B, H, T. */
template <typename T> struct heads {
    T *p;
    int64_t sb, sh, st;
    bool rows16; /* every row starts on a 16-byte boundary */
};

/* lse (B, H, T) float32. */
struct lse_ref {
    float *p;
    int64_t sb, sh, st;
};

/* Dropout (when `dropout`): weight (b, h, i, j) is multiplied by
 * drop_scale = 256 / keep_threshold where common/dropout.h's attention mask
 * keeps it, else by 0. */
struct att_dims {
    int B, H, T, D;
    float scale;
    bool causal;
    bool dropout;
    uint32_t keep_threshold;
    float drop_scale;
    uint64_t seed, offset;
    int group; /* the tensor-core kernels' block order: block_of */
};

template <typename T>
static __device__ __forceinline__ const T *row_ptr(const heads<T> &x, int b, int h, int t)
{
    return x.p + b * x.sb + h * x.sh + (int64_t)t * x.st;
}

static __device__ __forceinline__ bool att_visible(int q, int k, const att_dims &a)
{
    return k < a.T && q < a.T && (!a.causal || k <= q);
}

/* Keep bits of weights (b, h, query, 16 chunk + u), u < 16 (bit u): one
 * Philox block, the bits of awl_attention_dropout_bits. Its sixteen byte
 * comparisons are four SIMD ones here (__vcmpltu4: 0xff in each byte below
 * the threshold's), each word's four results gathered into four bits by
 * one multiplication (byte k's low bit lands on bit 24 + k). */
static __device__ __forceinline__ unsigned att_keep16(const att_dims &a, int b, int h, int query,
                                                      int chunk)
{
    if (a.keep_threshold > 255) return 0xffffu; /* p rounds to 0: all kept */
    uint64_t r = awl_attention_dropout_row(b, h, query, a.H, a.T);
    awl_philox_block blk =
        awl_philox4x32(a.seed, a.offset + r * awl_attention_dropout_chunks(a.T) + chunk);
    unsigned bits = 0, thr = a.keep_threshold * 0x01010101u;
#pragma unroll
    for (int w = 0; w < 4; w++) {
        unsigned lt = __vcmpltu4(blk.w[w], thr) & 0x01010101u;
        bits |= (lt * 0x01020408u) >> 24 << (4 * w);
    }
    return bits;
}

/* The dropout multiplier of weight (b, h, query, key): drop_scale or 0. */
static __device__ __forceinline__ float att_dropout(const att_dims &a, int b, int h, int query,
                                                    int key)
{
    return att_keep16(a, b, h, query, key / 16) >> (key % 16) & 1u ? a.drop_scale : 0.0f;
}

/* Forward on tensor cores (cuda_attention_mma.cu): bfloat16 on bf16 mma,
 * float32 on TF32 mma (three passes for float32 accuracy, one in TF32 mode).
 * AWL_OK, AWL_ERR_UNSUPPORTED (D > 128), or a device error. */
int awlc_attention_mma_forward(const heads<awl_bf16> &out, const lse_ref &lse,
                               const heads<awl_bf16> &q, const heads<awl_bf16> &k,
                               const heads<awl_bf16> &v, const att_dims &a);
int awlc_attention_mma_forward(const heads<float> &out, const lse_ref &lse, const heads<float> &q,
                               const heads<float> &k, const heads<float> &v, const att_dims &a);

/* Whether the "attention" setting (awlc_attention_set_rung) is "split" (the
 * backward in two kernels, the dQ kernel recomputing S and dP) or
 * "one-pass" (one kernel, dQ in slices, D <= 64) instead of the default
 * (tests and the benchmark compare them). */
bool awlc_attention_split(void);
bool awlc_attention_one_pass(void);
/* Whether it is "mma": the bfloat16 forward and dK/dV kernels on mma.sync
 * where they would take wgmma (Hopper, built for sm_90a). */
bool awlc_attention_mma_only(void);

/* Backward on tensor cores, given Dv[(b*H + h)*T + t] = rowsum(dout * out).
 * By default a dK/dV kernel that also stores dS^T, then a dQ kernel that
 * reads it back (scratch of B H T^2 / 2 elements under the causal mask, up
 * to 1 GiB); beyond that, as the "split" and "one-pass" settings choose. */
int awlc_attention_mma_backward(const heads<awl_bf16> &dq, const heads<awl_bf16> &dk,
                                const heads<awl_bf16> &dv, const heads<awl_bf16> &dout,
                                const heads<awl_bf16> &q, const heads<awl_bf16> &k,
                                const heads<awl_bf16> &v, const lse_ref &lse, const float *Dv,
                                const att_dims &a);
int awlc_attention_mma_backward(const heads<float> &dq, const heads<float> &dk,
                                const heads<float> &dv, const heads<float> &dout,
                                const heads<float> &q, const heads<float> &k, const heads<float> &v,
                                const lse_ref &lse, const float *Dv, const att_dims &a);

#endif
