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
 * Attention dropout has a mask of its own, drawn four times more cheaply:
 * 8-bit decisions, sixteen to a Philox block (the functions at the end).
 * The fused kernels and the composed path both draw it, so they drop the
 * same weights.
 *
 * Shared by the CPU and CUDA backends and the framework (host and device
 * code).
 */
#ifndef AWL_COMMON_DROPOUT_H
#define AWL_COMMON_DROPOUT_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

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

/* ---- attention dropout ---------------------------------------------------------
 *
 * The (..., T, S) attention weights are a stack of rows, row r being query
 * i of head h of batch b, r = (b H + h) T + i for (B, H, T, S) weights.
 * Each row is cut into chunks of 16 keys, and chunk c of row r is Philox
 * block offset + r ceil(S / 16) + c, so a draw over R rows reserves R
 * ceil(S / 16) blocks. Key j's decision is byte j % 16 of its chunk's
 * block (word (j % 16) / 4, bits 8 (j % 4) up): the weight is kept when
 * the byte is below round((1 - p) 256).
 *
 * So attention acts on p rounded to a multiple of 1/256 (0.1 acts as
 * 0.1016, 0.2 as 0.1992), and a kept weight is multiplied by 256 /
 * threshold, the inverse of the probability it is kept with, which leaves
 * the expectation unchanged. In exchange a block gives sixteen decisions
 * instead of four: in the tensor-core kernels the generator was most of
 * what dropout cost. */

/* The byte that keeps a weight must be below this: round((1 - p) 256), in
 * [0, 256]. */
static inline AWL_HOST_DEVICE uint32_t awl_attention_dropout_threshold(double p)
{
    double t = floor((1.0 - p) * 256.0 + 0.5);
    return t <= 0.0 ? 0u : t >= 256.0 ? 256u : (uint32_t)t;
}

/* What a kept weight is multiplied by: 256 / threshold (0 when nothing is
 * kept). */
static inline AWL_HOST_DEVICE double awl_attention_dropout_scale(uint32_t threshold)
{
    return threshold ? 256.0 / threshold : 0.0;
}

/* Chunks of 16 keys in a row of S. */
static inline AWL_HOST_DEVICE uint64_t awl_attention_dropout_chunks(int64_t S)
{
    return (uint64_t)(S + 15) / 16;
}

/* Row r of (B, H, T, S) weights for batch b, head h, query i. */
static inline AWL_HOST_DEVICE uint64_t awl_attention_dropout_row(int64_t b, int64_t h, int64_t i,
                                                                 int64_t H, int64_t T)
{
    return (uint64_t)((b * H + h) * T + i);
}

/* The keep bits of chunk c of row r (bit u: key 16 c + u), rows of S keys. */
static inline AWL_HOST_DEVICE unsigned awl_attention_dropout_bits(uint64_t seed, uint64_t offset,
                                                                  uint64_t r, uint64_t c, int64_t S,
                                                                  uint32_t threshold)
{
    awl_philox_block blk = awl_philox4x32(seed, offset + r * awl_attention_dropout_chunks(S) + c);
    unsigned bits = 0;
    for (unsigned u = 0; u < 16; u++)
        bits |= (unsigned)((blk.w[u / 4] >> (8 * (u % 4)) & 255u) < threshold) << u;
    return bits;
}

/* The multipliers of keys 0 .. n - 1 of a row whose Philox blocks are
 * words (block c as words 4 c .. 4 c + 3; n <= 16 times their number):
 * m[j] = scale where the weight is kept, 0 where it is dropped. Key j's
 * byte is byte j % 4 of word j / 4, so whole words take one loop the
 * compiler vectorises. (Host code.) */
static inline void awl_attention_dropout_multipliers_of(float *m, int64_t n, const uint32_t *words,
                                                        uint32_t threshold, float scale)
{
    const int64_t whole = n / 4;
    for (int64_t w = 0; w < whole; w++)
        for (int k = 0; k < 4; k++)
            m[4 * w + k] = (words[w] >> (8 * k) & 255u) < threshold ? scale : 0.0f;
    for (int64_t j = 4 * whole; j < n; j++)
        m[j] = (words[j / 4] >> (8 * (j % 4)) & 255u) < threshold ? scale : 0.0f;
}

/* The multipliers of keys 0 .. n - 1 of row r (n <= S rounded up to 16:
 * keys S and up, which no row has, take the rest of the last chunk's bytes):
 * m[j] = scale where the weight is kept, 0 where it is dropped; one Philox
 * block per 16 keys, drawn 16 blocks at a time before their bytes are
 * compared (awl_attention_dropout_multipliers_of): with sixteen bits packed
 * and unpacked a block, the CPU's fused attention, which draws a row for
 * every query forward and backward, spent longer on its mask than on its
 * products. (Host code: the composed path's mask; the CPU kernel draws its
 * blocks with backends/cpu/cpu_philox.h.) */
static inline void awl_attention_dropout_multipliers(float *m, int64_t n, uint64_t seed,
                                                     uint64_t offset, uint64_t r, int64_t S,
                                                     uint32_t threshold, float scale)
{
    const uint64_t first = offset + r * awl_attention_dropout_chunks(S);
    for (int64_t c0 = 0; 16 * c0 < n; c0 += 16) {
        const int64_t keys = n - 16 * c0 < 256 ? n - 16 * c0 : 256;
        uint32_t words[64];
        for (int64_t l = 0; 16 * l < keys; l++)
            memcpy(words + 4 * l, awl_philox4x32(seed, first + (uint64_t)(c0 + l)).w,
                   4 * sizeof *words);
        awl_attention_dropout_multipliers_of(m + 16 * c0, keys, words, threshold, scale);
    }
}

/* Whether weight (r, j) is kept. */
static inline AWL_HOST_DEVICE bool awl_attention_dropout_keep(uint64_t seed, uint64_t offset,
                                                              uint64_t r, int64_t j, int64_t S,
                                                              uint32_t threshold)
{
    return awl_attention_dropout_bits(seed, offset, r, (uint64_t)j / 16, S, threshold) >> (j % 16) &
           1u;
}

#endif
