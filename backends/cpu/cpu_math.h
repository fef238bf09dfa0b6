/*
 * backends/cpu/cpu_math.h - e^x and GELU for float32 in a form that vectorises.
 *
 * glibc's expf is accurate and fast for one value, but it is a call: a loop
 * over a row of attention scores or GELU inputs that calls it stays scalar.
 * cpu_expf is the classic Cody-Waite / polynomial construction (as in
 * Cephes): write x = n ln2 + r with |r| <= ln2 / 2, approximate e^r with a
 * degree-6 polynomial, and build 2^n directly in the exponent bits. It has
 * no branches and no tables, so a loop calling it becomes 8-wide AVX2 code
 * under `omp simd`. The reduction and the polynomial are fused
 * multiply-adds (cpu_fmaf) where the CPU has them: awl builds as ISO C11,
 * in which GCC does not fuse a * b + c by itself, and fused they are half
 * the instructions (a cpu-small training step on 2 threads 1-4% shorter,
 * docs/performance.md). Error: within 2 ulp of e^x over the float32 range
 * (the conformance suite compares every kernel that uses it with float64
 * references); e^x rounds to 0 below -87.3 (the smallest normal float is
 * e^-87.34) and NaN stays NaN.
 *
 * It is also the exp of the op formulas (backends/ops.h) on the CPU. GELU,
 * the MLP's epilogue, has its own e^x with fewer guards and, with AVX-512,
 * its rows in 16-float intrinsics (the end of this file), with the same
 * values as the formulas.
 */
#ifndef AWL_BACKENDS_CPU_MATH_H
#define AWL_BACKENDS_CPU_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backends/ops.h"

/* a * b + c in one rounding where the CPU has a fused multiply-add
 * (FP_FAST_FMAF: built with -march for such a CPU, awl's default); without
 * one, fmaf would be a library call in every step of a vectorised loop, so
 * the product and the sum are rounded apart there. */
static inline float cpu_fmaf(float a, float b, float c)
{
#ifdef FP_FAST_FMAF
    return fmaf(a, b, c);
#else
    return a * b + c;
#endif
}

/* e^x for x in [-87.33, 88], where 2^n below is a normal float: the
 * reduction and the polynomial, without cpu_expf's guards for the ends of
 * the range. */
static inline float cpu_expf_in_range(float x)
{
    float n = floorf(cpu_fmaf(x, 1.44269504088896341f, 0.5f)); /* round(x / ln2) */
    float r = cpu_fmaf(n, -0.693359375f, x);                   /* ln2 in two parts, so */
    r = cpu_fmaf(n, 2.12194440e-4f, r);                        /* x - n ln2 is exact   */
    float p = 1.9875691500e-4f;
    p = cpu_fmaf(p, r, 1.3981999507e-3f);
    p = cpu_fmaf(p, r, 8.3334519073e-3f);
    p = cpu_fmaf(p, r, 4.1665795894e-2f);
    p = cpu_fmaf(p, r, 1.6666665459e-1f);
    p = cpu_fmaf(p, r, 5.0000001201e-1f);
    p = cpu_fmaf(p * r, r, r) + 1.0f;
    uint32_t bits = (uint32_t)((int32_t)n + 127) << 23; /* 2^n, n in [-126, 127] */
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* x clamped to [lo, hi]; NaN gives lo. Selects, not fminf / fmaxf: those
 * stay calls. */
static inline float cpu_clampf(float x, float lo, float hi)
{
    x = x > lo ? x : lo;
    return x < hi ? x : hi;
}

static inline float cpu_expf(float x)
{
    const float hi = 88.0f, lo = -87.33f;
    float y = cpu_expf_in_range(cpu_clampf(x, lo, hi));
    y = x < lo ? 0.0f : y;
    y = x > hi ? INFINITY : y;
    return x != x ? x : y;
}

/* ---- the op formulas' math --------------------------------------------------- */

/* The formulas of backends/ops.h call AWL_EXP; on the CPU it is cpu_expf for
 * float (so loops over them vectorise) and libm's exp for double. */
static inline double cpu_exp_d(double x) { return exp(x); }
#undef AWL_EXP
#define AWL_EXP(x) _Generic((x), float : cpu_expf, default : cpu_exp_d)(x)

/* GELU's e^-2u (backends/ops.h) in float32, for the GELU epilogues of the
 * products and gelu_backward: e^z with fewer guards than cpu_expf. Below
 * -87.33, e^z at -87.33 serves (1 + e^z rounds to 1 either way); NaN
 * needs no guard, since x itself carries it into gelu(x) and gelu'(x).
 * So gelu and gelu' come out with the bits AWL_GELU and AWL_GELU_GRAD
 * give through cpu_expf. */
static inline float cpu_gelu_exp(float x)
{
    typedef float C;
    const float z = -AWL_GELU_2U(x);
    const float e = cpu_expf_in_range(cpu_clampf(z, -87.33f, 88.0f));
    return z > 88.0f ? INFINITY : e;
}

/* GELU in float32: AWL_GELU with cpu_gelu_exp. */
static inline float cpu_gelu_f(float x) { return x / (1.0f + cpu_gelu_exp(x)); }

/* GELU's derivative in float32: AWL_GELU_GRAD with cpu_gelu_exp. */
static inline float cpu_gelu_grad_f(float x)
{
    const float s = 1.0f / (1.0f + cpu_gelu_exp(x));
    return s * (1.0f + x * (1.0f - s) * 1.5957691216057308f * (1.0f + 0.134145f * x * x));
}

/* ---- GELU along a row -------------------------------------------------------- */

#if defined(__AVX512F__)
#include <immintrin.h>

/* 1 + e^-2u(x) for 16 floats: cpu_gelu_exp's steps one by one, in the
 * same order and roundings, so the same bits; the clamp as vmaxps and
 * vminps and 2^n by vscalefps, where GCC makes of cpu_gelu_exp's selects
 * six compares and mask operations and builds 2^n with an integer
 * conversion, an add and a shift. On one core of the Emerald Rapids dev
 * machine the GELU epilogues took 12-19% less time with these rows
 * (docs/performance.md, "GELU's e^x with fewer guards"). */
static inline __m512 cpu_gelu_denominator16(__m512 x)
{
#define K(c) _mm512_set1_ps(c)
    const __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(K(0.044715f), x), x), x);
    const __m512 z = _mm512_mul_ps(K(-1.5957691216057308f), _mm512_add_ps(x, x3));
    const __m512 c = _mm512_min_ps(_mm512_max_ps(z, K(-87.33f)), K(88.0f));
    const __m512 n = _mm512_roundscale_ps(_mm512_fmadd_ps(c, K(1.44269504088896341f), K(0.5f)),
                                          _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fmadd_ps(n, K(-0.693359375f), c);
    r = _mm512_fmadd_ps(n, K(2.12194440e-4f), r);
    __m512 p = K(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, K(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, K(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, K(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, K(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, K(5.0000001201e-1f));
    p = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), K(1.0f));
    __m512 e = _mm512_scalef_ps(p, n);
    e = _mm512_mask_mov_ps(e, _mm512_cmp_ps_mask(z, K(88.0f), _CMP_GT_OQ), K(INFINITY));
    return _mm512_add_ps(K(1.0f), e);
#undef K
}

/* The lanes of a row's 16 floats from i on that lie below n. */
static inline __mmask16 cpu_lanes16(int64_t i, int64_t n)
{
    return n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
}
#endif

/* y[i] = gelu(x[i]) for i < n. */
static inline void cpu_gelu_row(float *y, const float *x, int64_t n)
{
#if defined(__AVX512F__)
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = cpu_lanes16(i, n);
        const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        _mm512_mask_storeu_ps(y + i, m, _mm512_div_ps(v, cpu_gelu_denominator16(v)));
    }
#else
#pragma omp simd
    for (int64_t i = 0; i < n; i++) y[i] = cpu_gelu_f(x[i]);
#endif
}

/* g[i] *= gelu'(x[i]) for i < n. */
static inline void cpu_gelu_grad_row(float *g, const float *x, int64_t n)
{
#if defined(__AVX512F__)
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = cpu_lanes16(i, n);
        const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        const __m512 s = _mm512_div_ps(one, cpu_gelu_denominator16(v));
        /* s (1 + x (1 - s) 1.5957691216057308 (1 + 0.134145 x x)), as
         * cpu_gelu_grad_f rounds it */
        const __m512 slope = _mm512_mul_ps(_mm512_mul_ps(v, _mm512_sub_ps(one, s)),
                                           _mm512_set1_ps(1.5957691216057308f));
        const __m512 curve =
            _mm512_add_ps(one, _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.134145f), v), v));
        const __m512 grad = _mm512_mul_ps(s, _mm512_add_ps(one, _mm512_mul_ps(slope, curve)));
        _mm512_mask_storeu_ps(g + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, g + i), grad));
    }
#else
#pragma omp simd
    for (int64_t i = 0; i < n; i++) g[i] = g[i] * cpu_gelu_grad_f(x[i]);
#endif
}

#endif
