/*
 * backends/student/student_internal.h - what the student backend's files
 * share: the primitives you write, and the few helpers they all use.
 *
 * The student backend is a device, "student", whose memory is host memory
 * (student_backend.c, done for you) and whose compute primitives are yours
 * to write, one milestone at a time (docs/backend-guide.md):
 *
 *   1  fill, copy                       student_copy.c
 *   2  unary, binary (broadcasting)     student_elementwise.c
 *   3  where                            student_elementwise.c
 *   4  reduce                           student_reduce.c
 *   5  matmul, naive then blocked       student_matmul.c
 *   6  index_select, index_add,         student_index.c
 *      gather, scatter_add
 *   7  random                           student_random.c
 *
 * Until you write one it answers AWL_ERR_NOT_IMPLEMENTED, with a message
 * naming it, its milestone and its file; `awl-check --device student
 * --progress` shows where you are. Every primitive receives awl_views
 * (backends/backend.h): a base pointer, an offset, a shape and strides,
 * all counted in elements. Element (i0, i1, ...) of a view is storage
 * element offset + i0 * strides[0] + i1 * strides[1] + ...; a stride of 0
 * repeats one element along an axis (broadcasting).
 */
#ifndef AWL_BACKENDS_STUDENT_INTERNAL_H
#define AWL_BACKENDS_STUDENT_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "backends/backend.h"

/* ---- the primitives, by milestone (see backend.h for each contract) ------------ */

int awl_student_fill(const awl_view *out, double value);
int awl_student_copy(const awl_view *out, const awl_view *in);
int awl_student_unary(awl_unary_op op, const awl_view *out, const awl_view *in, double alpha);
int awl_student_binary(awl_binary_op op, const awl_view *out, const awl_view *a, const awl_view *b);
int awl_student_where(const awl_view *out, const awl_view *cond, const awl_view *a,
                      const awl_view *b);
int awl_student_reduce(awl_reduce_op op, const awl_view *out, const awl_view *in);
int awl_student_matmul(const awl_view *out, const awl_view *a, const awl_view *b, bool accumulate);
int awl_student_index_select(const awl_view *out, const awl_view *src, const awl_view *idx);
int awl_student_index_add(const awl_view *dst, const awl_view *idx, const awl_view *src);
int awl_student_gather(const awl_view *out, const awl_view *in, int axis, const awl_view *idx);
int awl_student_scatter_add(const awl_view *out, int axis, const awl_view *idx,
                            const awl_view *src);
int awl_student_random(const awl_view *out, awl_random_kind kind, uint64_t seed, uint64_t offset,
                       double a, double b);

/* A stub's answer: records "student backend: <primitive> is not
 * implemented yet (milestone N: <title>); write it in <file>" and returns
 * AWL_ERR_NOT_IMPLEMENTED. */
int awl_student_todo(const char *primitive, int milestone, const char *file);

/* ---- helpers -------------------------------------------------------------------- */

/* Storage element e of v (counted from v->data, so pass the offset in e) as
 * a double, whatever v's dtype. */
static inline double student_get(const awl_view *v, int64_t e)
{
    switch (v->dtype) {
    case AWL_F32: return ((const float *)v->data)[e];
    case AWL_F64: return ((const double *)v->data)[e];
    case AWL_I32: return ((const int32_t *)v->data)[e];
    default: return awl_bf16_to_float(((const awl_bf16 *)v->data)[e]);
    }
}

/* Stores x into storage element e of v, converted to v's dtype: rounded to
 * float32 or bfloat16; for int32 truncated toward zero, saturated at the
 * ends of the range, NaN stored as 0 (as every backend converts). */
static inline void student_set(const awl_view *v, int64_t e, double x)
{
    switch (v->dtype) {
    case AWL_F32: ((float *)v->data)[e] = (float)x; break;
    case AWL_F64: ((double *)v->data)[e] = x; break;
    case AWL_I32:
        ((int32_t *)v->data)[e] = x != x               ? 0
                                  : x >= 2147483647.0  ? INT32_MAX
                                  : x <= -2147483648.0 ? INT32_MIN
                                                       : (int32_t)x;
        break;
    default: ((awl_bf16 *)v->data)[e] = awl_float_to_bf16((float)x); break;
    }
}

/* The storage element of the view's element at multi-index idx. */
static inline int64_t student_element(const awl_view *v, const int64_t *idx)
{
    int64_t e = v->offset;
    for (int d = 0; d < v->ndim; d++) e += idx[d] * v->strides[d];
    return e;
}

/* The view seen as rows along its last axis: how long a row is and the
 * stride along it (a 0-d view is one row of one element), and the storage
 * element where row r starts (rows counted row-major over the other
 * axes). A loop over rows, and inside it a loop along the row stepping by
 * its stride, visits every element in row-major order, with only one
 * multiplication per element. */
static inline int64_t student_row_length(const awl_view *v)
{
    return v->ndim ? v->shape[v->ndim - 1] : 1;
}

static inline int64_t student_row_stride(const awl_view *v)
{
    return v->ndim ? v->strides[v->ndim - 1] : 0;
}

static inline int64_t student_row_start(const awl_view *v, int64_t r)
{
    int64_t e = v->offset;
    for (int d = v->ndim - 2; d >= 0; d--) {
        e += (r % v->shape[d]) * v->strides[d];
        r /= v->shape[d];
    }
    return e;
}

/* Steps a row-major multi-index (the last axis fastest) over shape; false
 * after the last element, with idx back at all zeros. */
static inline bool student_next(int64_t *idx, int ndim, const int64_t *shape)
{
    for (int d = ndim - 1; d >= 0; d--) {
        if (++idx[d] < shape[d]) return true;
        idx[d] = 0;
    }
    return false;
}

#endif
