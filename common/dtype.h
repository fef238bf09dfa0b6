/*
 * common/dtype.h - element types, shared by every layer and every backend.
 *
 * float32 is the default; float64 is for gradient checks and references;
 * int32 holds indices (token ids, targets); bfloat16 is the storage type of
 * mixed-precision training on CUDA. The helpers are inline so that CUDA
 * kernels can use them too.
 */
#ifndef AWL_COMMON_DTYPE_H
#define AWL_COMMON_DTYPE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define AWL_HOST_DEVICE __host__ __device__
#else
#define AWL_HOST_DEVICE
#endif

typedef enum awl_dtype {
    AWL_F32 = 0,
    AWL_F64 = 1,
    AWL_I32 = 2,
    AWL_BF16 = 3,
    AWL_DTYPE_COUNT
} awl_dtype;

static inline size_t awl_dtype_size(awl_dtype dtype)
{
    switch (dtype) {
    case AWL_F32: return 4;
    case AWL_F64: return 8;
    case AWL_I32: return 4;
    case AWL_BF16: return 2;
    default: return 0;
    }
}

/* "float32", "float64", "int32", "bfloat16" (PyTorch's names, no prefix). */
static inline const char *awl_dtype_name(awl_dtype dtype)
{
    switch (dtype) {
    case AWL_F32: return "float32";
    case AWL_F64: return "float64";
    case AWL_I32: return "int32";
    case AWL_BF16: return "bfloat16";
    default: return "invalid";
    }
}

static inline int awl_dtype_is_float(awl_dtype dtype) { return dtype != AWL_I32; }

/* bfloat16 is the top half of a float32. Conversion rounds to nearest even;
 * NaN stays NaN. On a GPU (sm_80 and later) the conversion is the one
 * instruction cvt.rn.bf16.f32, the same rounding, where the integer form
 * below takes about nine; there a NaN comes out as the canonical NaN
 * (0x7fff) rather than with its payload kept. */
typedef struct awl_bf16 {
    uint16_t bits;
} awl_bf16;

static inline AWL_HOST_DEVICE float awl_bf16_to_float(awl_bf16 h)
{
    uint32_t u = (uint32_t)h.bits << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline AWL_HOST_DEVICE awl_bf16 awl_float_to_bf16(float f)
{
    awl_bf16 h;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));
#else
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        h.bits = (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    } else {
        u += 0x7fffu + ((u >> 16) & 1u);
        h.bits = (uint16_t)(u >> 16);
    }
#endif
    return h;
}

/* The element at p, of type dtype, as a double (bfloat16 widened exactly). */
static inline double awl_dtype_load(awl_dtype dtype, const void *p)
{
    switch (dtype) {
    case AWL_F32: {
        float v;
        memcpy(&v, p, sizeof v);
        return v;
    }
    case AWL_F64: {
        double v;
        memcpy(&v, p, sizeof v);
        return v;
    }
    case AWL_I32: {
        int32_t v;
        memcpy(&v, p, sizeof v);
        return v;
    }
    case AWL_BF16: {
        awl_bf16 v;
        memcpy(&v, p, sizeof v);
        return awl_bf16_to_float(v);
    }
    default: return NAN;
    }
}

#endif
