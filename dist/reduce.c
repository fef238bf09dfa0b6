/*
 * dist/reduce.c - the element-wise reductions a ring step applies to the
 * segment it received: dst = a (op) b, as loops the compiler vectorises
 * (dst may be a, so no restrict; GCC checks the overlap once per call).
 *
 * int32 adds wrap (in unsigned arithmetic: signed overflow is undefined);
 * float max propagates NaN, as torch.maximum does.
 */
#include "dist/dist_internal.h"

#define REDUCE_LOOPS(T, ADD)                                                                       \
    do {                                                                                           \
        T *d = dst;                                                                                \
        const T *x = a, *y = b;                                                                    \
        if (op == AWL_DIST_MAX) {                                                                  \
            for (int64_t i = 0; i < n; i++) d[i] = (x[i] > y[i] || x[i] != x[i]) ? x[i] : y[i];    \
        } else {                                                                                   \
            for (int64_t i = 0; i < n; i++) d[i] = ADD(x[i], y[i]);                                \
        }                                                                                          \
    } while (0)

#define PLAIN_ADD(p, q) ((p) + (q))
#define WRAPPING_ADD(p, q) ((int32_t)((uint32_t)(p) + (uint32_t)(q)))

void awl_dist_reduce_values(awl_dtype dtype, awl_dist_reduce op, void *dst, const void *a,
                            const void *b, int64_t n)
{
    switch (dtype) {
    case AWL_F32: REDUCE_LOOPS(float, PLAIN_ADD); break;
    case AWL_F64: REDUCE_LOOPS(double, PLAIN_ADD); break;
    case AWL_I32: REDUCE_LOOPS(int32_t, WRAPPING_ADD); break;
    default: break; /* refused when the work was started */
    }
}

void awl_dist_scale(awl_dtype dtype, void *dst, int64_t n, int divisor)
{
    if (dtype == AWL_F32) {
        float *d = dst, s = (float)divisor;
        for (int64_t i = 0; i < n; i++) d[i] /= s;
    } else if (dtype == AWL_F64) {
        double *d = dst, s = divisor;
        for (int64_t i = 0; i < n; i++) d[i] /= s;
    }
}
