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
 * the MLP's epilogue, has an e^x with fewer guards (its section below),
 * with the same values as the formulas give through cpu_expf.
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

/* e^x for x in [-87.33, 89]: the reduction and the polynomial, without
 * cpu_expf's guards. 2^n below is a normal float for n in [-126, 127] and
 * infinity for n = 128, the n of x from 88.38 up: e^x is infinity there,
 * where float32's largest e^x (at 88.72) is 3.4e38. */
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
    uint32_t bits = (uint32_t)((int32_t)n + 127) << 23; /* 2^n, n in [-126, 128] */
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

/* e^x: 0 below -87.33 (a select), infinity from 88.38 up (the clamp to
 * 89 keeps n at 128 there), NaN for NaN. */
static inline float cpu_expf(float x)
{
    const float lo = -87.33f;
    const float y = cpu_expf_in_range(cpu_clampf(x, lo, 89.0f));
    return x != x ? x : x < lo ? 0.0f : y;
}

/* ---- GELU -------------------------------------------------------------------- */

/* GELU and its derivative in float32, for the GELU epilogues of the
 * products and gelu_backward: ops.h's AWL_GELU and AWL_GELU_GRAD with an
 * e^z of fewer guards than cpu_expf (the clamp alone; AWL_EXP is this
 * until the next section sets it for the op formulas). Below -87.33, e^z
 * at -87.33 serves (1 + e^z rounds to 1 either way); NaN needs no guard,
 * since x itself carries it into gelu(x) and gelu'(x). So the values are
 * the bits the formulas give through cpu_expf. */
#undef AWL_EXP
#define AWL_EXP(z) cpu_expf_in_range(cpu_clampf((z), -87.33f, 89.0f))
static inline float cpu_gelu_f(float x)
{
    typedef float C;
    return AWL_GELU(x);
}

static inline float cpu_gelu_grad_f(float x)
{
    typedef float C;
    return AWL_GELU_GRAD(x);
}

/* ---- the op formulas' math --------------------------------------------------- */

/* The formulas of backends/ops.h call AWL_EXP; on the CPU it is cpu_expf for
 * float (so loops over them vectorise) and libm's exp for double. */
static inline double cpu_exp_d(double x) { return exp(x); }
#undef AWL_EXP
#define AWL_EXP(x) _Generic((x), float : cpu_expf, default : cpu_exp_d)(x)

#endif
