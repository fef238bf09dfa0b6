/*
 * common/dropout.h - the dropout mask as a pure function of the generator.
 *
 * Element i of a dropout mask drawn at generator state (seed, offset) keeps
 * its value exactly when u_i < 1 - p, u_i being element i of the uniform
 * stream of common/philox.h that starts at `offset`: the mask that
 * awl_dropout builds from awl_tensor_uniform_ and a comparison. Since u_i is
 * (w >> 8) * 2^-24 for a Philox word w, the comparison is one on integers:
 * (w >> 8) < ceil((1 - p) 2^24). A kernel computes any element's decision
 * from (seed, offset, i) alone, so a fused kernel never stores a mask: its
 * backward (and an activation-checkpointing replay, which puts the
 * generator back where it was) computes the same one again.
 *
 * Attention dropout acts on the (B, H, T, S) attention weights, element
 * ((b H + h) T + i) S + j for batch b, head h, query i and key j: the
 * row-major order of the composed path's weight tensor, so the fused and
 * the composed computations drop the same weights.
 *
 * Shared by the CPU and CUDA backends and the framework (host and device
 * code).
 */
#ifndef AWL_COMMON_DROPOUT_H
#define AWL_COMMON_DROPOUT_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/philox.h"

/* One dropout draw, what a backend's kernel is handed: drop with
 * probability p, scale what is kept by 1 / (1 - p), mask from the stream
 * (seed, offset). */
typedef struct awl_dropout_args {
    double p;
    uint64_t seed, offset;
} awl_dropout_args;

/* (w >> 8) must be below this to keep: ceil((1 - p) 2^24), exact (a product
 * by a power of two). */
static inline AWL_HOST_DEVICE uint32_t awl_dropout_threshold(double p)
{
    return (uint32_t)ceil((1.0 - p) * 16777216.0);
}

/* What a kept element is multiplied by: 1 / (1 - p), 0 when p = 1. */
static inline AWL_HOST_DEVICE double awl_dropout_scale(double p)
{
    return p < 1.0 ? 1.0 / (1.0 - p) : 0.0;
}

/* Whether element i of the mask keeps its value. */
static inline AWL_HOST_DEVICE bool awl_dropout_keep(uint64_t seed, uint64_t offset, uint64_t i,
                                                    uint32_t threshold)
{
    awl_philox_block b = awl_philox4x32(seed, offset + i / 4);
    return (b.w[i % 4] >> 8) < threshold;
}

/* The decisions of a whole Philox block's four elements: bit w for word w. */
static inline AWL_HOST_DEVICE unsigned awl_dropout_block_bits(awl_philox_block b,
                                                              uint32_t threshold)
{
    return (unsigned)((b.w[0] >> 8) < threshold) | (unsigned)((b.w[1] >> 8) < threshold) << 1 |
           (unsigned)((b.w[2] >> 8) < threshold) << 2 | (unsigned)((b.w[3] >> 8) < threshold) << 3;
}

/* Decisions for elements i .. i + 3 (bit u for i + u): one Philox block
 * when i is a multiple of 4, two when the four straddle blocks. */
static inline AWL_HOST_DEVICE unsigned awl_dropout_keep4(uint64_t seed, uint64_t offset, uint64_t i,
                                                         uint32_t threshold)
{
    unsigned w = (unsigned)(i % 4);
    uint64_t blk = offset + i / 4;
    unsigned bits = awl_dropout_block_bits(awl_philox4x32(seed, blk), threshold);
    if (w) bits |= awl_dropout_block_bits(awl_philox4x32(seed, blk + 1), threshold) << 4;
    return (bits >> w) & 15u;
}

/* Element index of attention weight (b, h, i, j) in a (B, H, T, S) mask. */
static inline AWL_HOST_DEVICE uint64_t awl_attention_dropout_index(int64_t b, int64_t h, int64_t i,
                                                                   int64_t j, int64_t H, int64_t T,
                                                                   int64_t S)
{
    return (uint64_t)(((b * H + h) * T + i) * S + j);
}

#endif
