/*
 * backends/cpu/cpu_math.h - e^x for float32 in a form the compiler vectorises.
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
 * It is also the exp of the op formulas (backends/ops.h) on the CPU.
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

static inline float cpu_expf(float x)
{
    const float hi = 88.0f, lo = -87.33f;
    float c = x < lo ? lo : x; /* selects, not fminf: those stay calls */
    c = c > hi ? hi : c;
    float n = floorf(cpu_fmaf(c, 1.44269504088896341f, 0.5f)); /* round(c / ln2) */
    float r = cpu_fmaf(n, -0.693359375f, c);                   /* ln2 in two parts, so */
    r = cpu_fmaf(n, 2.12194440e-4f, r);                        /* c - n ln2 is exact   */
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
    float y = p * scale;
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

/* GELU in float32 (the GELU epilogue of matmul_bias_gelu). */
static inline float cpu_gelu_f(float x)
{
    typedef float C;
    return AWL_GELU(x);
}

/* GELU's derivative in float32 (the fused GELU backward). */
static inline float cpu_gelu_grad_f(float x)
{
    typedef float C;
    return AWL_GELU_GRAD(x);
}

#endif
