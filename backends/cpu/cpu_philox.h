/*
 * backends/cpu/cpu_philox.h - Philox blocks many at a time, and the dropout
 * decisions made from them, for the CPU kernels.
 *
 * common/philox.h defines the stream: block b of a draw at (seed, offset)
 * is awl_philox4x32(seed, offset + b), ten rounds of two 32 x 32 -> 64-bit
 * multiplies, each round waiting on the one before. One block at a time a
 * core runs that chain with little else in flight, and a dropout mask is
 * mostly its draw. With AVX-512, cpu_philox_blocks runs sixteen blocks side
 * by side, one in each 32-bit lane of a vector: the products come from
 * vpmuludq (32 x 32 -> 64 bits in the even lanes; the odd lanes shifted down
 * to meet it), and a block's four words end up in lanes 4 l .. 4 l + 3 of
 * the output, as sixteen awl_philox4x32 calls would leave them. The same
 * words either way (test_backend's test_philox_blocks compares them for
 * counters that carry into the high word); without AVX-512 (a build
 * without -march=native, another CPU) the blocks are drawn one by one.
 */
#ifndef AWL_BACKENDS_CPU_PHILOX_H
#define AWL_BACKENDS_CPU_PHILOX_H

#include <stdint.h>
#include <string.h>

#include "common/philox.h"

#if defined(__AVX512F__)
#include <immintrin.h>

/* lo (returned) and hi halves of a * m in every 32-bit lane, m the same
 * constant in every lane. */
static inline __m512i cpu_mulhilo16(__m512i a, __m512i m, __m512i *hi)
{
    const __m512i even = _mm512_mul_epu32(a, m); /* lanes 0, 2, ..: 64-bit products */
    const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m); /* lanes 1, 3, .. */
    *hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
    return _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
}

/* Blocks first .. first + 15 into words[0 .. 63], block first + l as words
 * 4 l .. 4 l + 3: awl_philox4x32's rounds with block l in lane l. */
static inline void cpu_philox16(uint64_t seed, uint64_t first, uint32_t *words)
{
    const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i base = _mm512_set1_epi32((int)(uint32_t)first);
    __m512i c0 = _mm512_add_epi32(base, lanes); /* the counter's low word */
    /* its high word, plus the carry where the low word wrapped */
    const __mmask16 carry = _mm512_cmplt_epu32_mask(c0, base);
    const __m512i high = _mm512_set1_epi32((int)(uint32_t)(first >> 32));
    __m512i c1 = _mm512_mask_add_epi32(high, carry, high, _mm512_set1_epi32(1));
    __m512i c2 = _mm512_setzero_si512(), c3 = _mm512_setzero_si512();
    const __m512i m0 = _mm512_set1_epi32((int)0xD2511F53u),
                  m1 = _mm512_set1_epi32((int)0xCD9E8D57u);
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int round = 0; round < 10; round++) {
        __m512i hi0, hi1;
        const __m512i lo0 = cpu_mulhilo16(c0, m0, &hi0), lo1 = cpu_mulhilo16(c2, m1, &hi1);
        c0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), _mm512_set1_epi32((int)k0));
        c2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), _mm512_set1_epi32((int)k1));
        c1 = lo1;
        c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    /* word w of block l sits in lane l of cw; interleave to 4 l + w: pairs
     * of words, then quadruples (blocks 0, 4, 8, 12 in u0, ...), then the
     * 128-bit quarters in block order */
    const __m512i t0 = _mm512_unpacklo_epi32(c0, c1), t1 = _mm512_unpackhi_epi32(c0, c1);
    const __m512i t2 = _mm512_unpacklo_epi32(c2, c3), t3 = _mm512_unpackhi_epi32(c2, c3);
    const __m512i u0 = _mm512_unpacklo_epi64(t0, t2), u1 = _mm512_unpackhi_epi64(t0, t2);
    const __m512i u2 = _mm512_unpacklo_epi64(t1, t3), u3 = _mm512_unpackhi_epi64(t1, t3);
    const __m512i a = _mm512_shuffle_i32x4(u0, u1, 0x44), b = _mm512_shuffle_i32x4(u2, u3, 0x44);
    const __m512i c = _mm512_shuffle_i32x4(u0, u1, 0xEE), d = _mm512_shuffle_i32x4(u2, u3, 0xEE);
    _mm512_storeu_si512(words, _mm512_shuffle_i32x4(a, b, 0x88));      /* blocks 0 .. 3 */
    _mm512_storeu_si512(words + 16, _mm512_shuffle_i32x4(a, b, 0xDD)); /* 4 .. 7 */
    _mm512_storeu_si512(words + 32, _mm512_shuffle_i32x4(c, d, 0x88)); /* 8 .. 11 */
    _mm512_storeu_si512(words + 48, _mm512_shuffle_i32x4(c, d, 0xDD)); /* 12 .. 15 */
}
#endif

/* Blocks first .. first + count - 1 of the stream keyed by seed into
 * words[0 .. 4 count - 1], block first + b as words 4 b .. 4 b + 3: sixteen
 * at a time where the CPU has AVX-512 (a last group of five or more too, of
 * which the words wanted are kept: sixteen side by side cost about what
 * four and a half one by one do), the rest one by one. */
static inline void cpu_philox_blocks(uint64_t seed, uint64_t first, int64_t count, uint32_t *words)
{
    int64_t done = 0; /* blocks drawn */
#if defined(__AVX512F__)
    done = count / 16 * 16;
    for (int64_t g = 0; g < done; g += 16) cpu_philox16(seed, first + (uint64_t)g, words + 4 * g);
    if (count - done >= 5) {
        uint32_t group[64];
        cpu_philox16(seed, first + (uint64_t)done, group);
        memcpy(words + 4 * done, group, (size_t)(count - done) * 4 * sizeof *words);
        return;
    }
#endif
    for (int64_t b = done; b < count; b++)
        memcpy(words + 4 * b, awl_philox4x32(seed, first + (uint64_t)b).w, 4 * sizeof *words);
}

/* Elements a dropout kernel decides at a time (cpu_dropout_keeps). */
#define CPU_DROPOUT_GROUP 256

/* keep[e] = 1 where element first + e of the mask drawn at (seed, offset)
 * keeps its value, 0 where it drops it (common/dropout.h's decision:
 * (w >> 8) < threshold, w word (first + e) % 4 of block offset + (first +
 * e) / 4), for e < n <= CPU_DROPOUT_GROUP. The blocks are drawn first and
 * their words compared after, in one loop the compiler vectorises: decided
 * an element at a time, with the generic loads and stores around it, the
 * mask cost several times what the draw does. */
static inline void cpu_dropout_keeps(uint8_t *keep, int64_t n, uint64_t seed, uint64_t offset,
                                     uint64_t first, uint32_t threshold)
{
    uint32_t words[CPU_DROPOUT_GROUP + 4];
    const int64_t skip = (int64_t)(first % 4), blocks = (skip + n + 3) / 4;
    cpu_philox_blocks(seed, offset + first / 4, blocks, words);
    for (int64_t e = 0; e < n; e++) keep[e] = (words[skip + e] >> 8) < threshold;
}

#endif
