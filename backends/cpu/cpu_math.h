/*
 * backends/cpu/cpu_math.h - e^x for float32 in a form the compiler vectorises.
 *
 * glibc's expf is accurate and fast for one value, but it is a call: a loop
 * over a row of attention scores or GELU inputs that calls it stays scalar.
 * cpu_expf is the classic Cody-Waite / polynomial construction (as in
 * Cephes): write x = n ln2 + r with |r| <= ln2 / 2, approximate e^r with a
 * degree-6 polynomial, and build 2^n directly in the exponent bits. It has
 * no branches and no tables, so a loop calling it becomes 8-wide AVX2 code
 * under `omp simd`. Error: within 2 ulp of e^x over the float32 range (the
 * conformance suite compares every kernel that uses it with float64
 * references); e^x rounds to 0 below -87.3 (the smallest normal float is
 * e^-87.34) and NaN stays NaN.
 *
 * GELU and its derivative live here too: the element-wise kernels and the
 * fused GELU backward share them.
 */
#ifndef AWL_BACKENDS_CPU_MATH_H
#define AWL_BACKENDS_CPU_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float cpu_expf(float x)
{
    const float hi = 88.0f, lo = -87.33f;
    float c = x < lo ? lo : x; /* selects, not fminf: those stay calls */
    c = c > hi ? hi : c;
    float n = floorf(c * 1.44269504088896341f + 0.5f); /* round(c / ln2) */
    float r = c - n * 0.693359375f;                    /* ln2 in two parts, so */
    r = r - n * -2.12194440e-4f;                       /* c - n ln2 is exact   */
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    uint32_t bits = (uint32_t)((int32_t)n + 127) << 23; /* 2^n, n in [-126, 127] */
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    float y = p * scale;
    y = x < lo ? 0.0f : y;
    y = x > hi ? INFINITY : y;
    return x != x ? x : y;
}

/* ---- GELU (tanh form) and its exact derivative ---------------------------- */

/* gelu(x) = x/2 (1 + tanh u), u = c (x + a x^3). Since (1 + tanh u)/2 is the
 * logistic function s(2u), this is x s(2u): one exp instead of a tanh (libm's
 * tanhf costs six times expf), and no cancellation in 1 + tanh u for
 * negative x. The derivative, with 1 - tanh^2 u = 4 s (1 - s):
 *   s + 2 x s (1 - s) c (1 + 3 a x^2). */
#define GELU_C 0.7978845608028654 /* sqrt(2 / pi) */
#define GELU_A 0.044715

static inline float gelu_f(float x)
{
    float u = (float)GELU_C * (x + (float)GELU_A * x * x * x);
    return x / (1.0f + cpu_expf(-2.0f * u));
}

static inline double gelu_d(double x)
{
    double u = GELU_C * (x + GELU_A * x * x * x);
    return x / (1.0 + exp(-2.0 * u));
}

static inline float gelu_grad_f(float x)
{
    float u = (float)GELU_C * (x + (float)GELU_A * x * x * x);
    float s = 1.0f / (1.0f + cpu_expf(-2.0f * u));
    return s + 2.0f * x * s * (1.0f - s) * (float)GELU_C * (1.0f + 3.0f * (float)GELU_A * x * x);
}

static inline double gelu_grad_d(double x)
{
    double u = GELU_C * (x + GELU_A * x * x * x);
    double s = 1.0 / (1.0 + exp(-2.0 * u));
    return s + 2.0 * x * s * (1.0 - s) * GELU_C * (1.0 + 3.0 * GELU_A * x * x);
}

#endif
