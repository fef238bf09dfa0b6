/*
 * common/philox.h - the counter-based random number generator.
 *
 * Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
 * SC 2011) maps a 128-bit counter and a 64-bit key to four independent 32-bit
 * words. Because element i of a random tensor is a pure function of
 * (seed, offset, i), every backend draws the same numbers, any thread can
 * compute any element, and a generator is fully described by two integers:
 * a recomputed checkpoint segment or a resumed run replays it exactly.
 *
 * The stream layout, which every backend must follow:
 *   - key = seed (low word, high word);
 *   - element i of a fill that starts at `offset` uses the block
 *     counter = (offset + i / 4) (64 bits in the two low words, upper words 0)
 *     and takes word i % 4 of it;
 *   - a fill of n elements advances the generator's offset by ceil(n / 4).
 *
 * Uniform [0, 1): (word >> 8) * 2^-24, exact in float32 and in float64, so
 * a float64 tensor holds the same values as a float32 one from the same state.
 * Normal (Box-Muller in double precision, rounded once to the output type):
 * the words of a block pair up as (w0, w1) and (w2, w3); element 4b + 0 and
 * 4b + 1 are r*cos(t) and r*sin(t) of the first pair, 4b + 2 and 4b + 3 of the
 * second, with r = sqrt(-2 ln u1), u1 = ((w_even >> 8) + 1) * 2^-24 in (0, 1],
 * and t = 2 pi u2.
 */
#ifndef AWL_COMMON_PHILOX_H
#define AWL_COMMON_PHILOX_H

#include <math.h>
#include <stdint.h>

#include "common/dtype.h"

typedef struct awl_philox_block {
    uint32_t w[4];
} awl_philox_block;

static inline AWL_HOST_DEVICE uint32_t awl_mulhilo32(uint32_t a, uint32_t b, uint32_t *hi)
{
    uint64_t p = (uint64_t)a * (uint64_t)b;
    *hi = (uint32_t)(p >> 32);
    return (uint32_t)p;
}

/* Philox4x32 with 10 rounds, keyed by `seed`, applied to the 64-bit counter
 * `block`. */
static inline AWL_HOST_DEVICE awl_philox_block awl_philox4x32(uint64_t seed, uint64_t block)
{
    uint32_t c0 = (uint32_t)block, c1 = (uint32_t)(block >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int round = 0; round < 10; round++) {
        uint32_t hi0, hi1;
        uint32_t lo0 = awl_mulhilo32(0xD2511F53u, c0, &hi0);
        uint32_t lo1 = awl_mulhilo32(0xCD9E8D57u, c2, &hi1);
        uint32_t n0 = hi1 ^ c1 ^ k0;
        uint32_t n1 = lo1;
        uint32_t n2 = hi0 ^ c3 ^ k1;
        uint32_t n3 = lo0;
        c0 = n0;
        c1 = n1;
        c2 = n2;
        c3 = n3;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    awl_philox_block out = {{c0, c1, c2, c3}};
    return out;
}

/* Uniform in [0, 1) from one word: exact in float and double. */
static inline AWL_HOST_DEVICE double awl_philox_uniform(uint32_t w)
{
    return (double)(w >> 8) * (1.0 / 16777216.0);
}

/* Element i (counted from the fill's start) of a uniform stream. */
static inline AWL_HOST_DEVICE double awl_philox_uniform_at(uint64_t seed, uint64_t offset,
                                                           uint64_t i)
{
    awl_philox_block b = awl_philox4x32(seed, offset + i / 4);
    return awl_philox_uniform(b.w[i % 4]);
}

/* Element i of a standard normal stream (see the layout above). */
static inline AWL_HOST_DEVICE double awl_philox_normal_at(uint64_t seed, uint64_t offset,
                                                          uint64_t i)
{
    awl_philox_block b = awl_philox4x32(seed, offset + i / 4);
    unsigned pair = (unsigned)(i % 4) / 2;
    double u1 = (double)((b.w[2 * pair] >> 8) + 1) * (1.0 / 16777216.0);
    double u2 = (double)(b.w[2 * pair + 1] >> 8) * (1.0 / 16777216.0);
    double r = sqrt(-2.0 * log(u1));
    double t = 6.283185307179586476925286766559 * u2;
    return (i % 2 == 0) ? r * cos(t) : r * sin(t);
}

/* How far a fill of n elements advances a generator's offset. */
static inline uint64_t awl_philox_blocks(uint64_t n) { return (n + 3) / 4; }

#endif
