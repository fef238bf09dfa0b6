/*
 * backends/student/solution/student_index.c - milestone 6, solved: index
 * loops over the index tensor's multi-index, in its row-major order (so
 * the adjoints add repeated indices in a fixed order), through each
 * operand's strides.
 */
#include "backends/student/student_internal.h"

/* Rows of R elements, R = the shape after the first axis of a (V, R...)
 * view; row r's element j of a (I..., R...) view at index position i. */
static int64_t row_len(const awl_view *v, int first)
{
    int64_t n = 1;
    for (int d = first; d < v->ndim; d++) n *= v->shape[d];
    return n;
}

/* The storage element of element j (row-major over axes [first, ndim)) of
 * view v with the leading axes at lead[0..first). */
static int64_t element_at(const awl_view *v, const int64_t *lead, int first, int64_t j)
{
    int64_t e = v->offset;
    for (int d = 0; d < first; d++) e += lead[d] * v->strides[d];
    for (int d = v->ndim - 1; d >= first; d--) {
        e += (j % v->shape[d]) * v->strides[d];
        j /= v->shape[d];
    }
    return e;
}

int awl_student_index_select(const awl_view *out, const awl_view *src, const awl_view *idx)
{
    int64_t rows = row_len(src, 1), lead[AWL_MAX_DIMS] = {0};
    if (awl_view_numel(idx) == 0) return AWL_OK;
    do {
        int64_t row = (int64_t)student_get(idx, student_element(idx, lead));
        for (int64_t j = 0; j < rows; j++)
            student_set(out, element_at(out, lead, idx->ndim, j),
                        student_get(src, element_at(src, &row, 1, j)));
    } while (student_next(lead, idx->ndim, idx->shape));
    return AWL_OK;
}

int awl_student_index_add(const awl_view *dst, const awl_view *idx, const awl_view *src)
{
    int64_t rows = row_len(dst, 1), lead[AWL_MAX_DIMS] = {0};
    if (awl_view_numel(idx) == 0) return AWL_OK;
    do {
        int64_t row = (int64_t)student_get(idx, student_element(idx, lead));
        for (int64_t j = 0; j < rows; j++) {
            int64_t e = element_at(dst, &row, 1, j);
            student_set(dst, e,
                        student_get(dst, e) +
                            student_get(src, element_at(src, lead, idx->ndim, j)));
        }
    } while (student_next(lead, idx->ndim, idx->shape));
    return AWL_OK;
}

int awl_student_gather(const awl_view *out, const awl_view *in, int axis, const awl_view *idx)
{
    int64_t i[AWL_MAX_DIMS] = {0};
    if (awl_view_numel(idx) == 0) return AWL_OK;
    do {
        int64_t j[AWL_MAX_DIMS];
        for (int d = 0; d < idx->ndim; d++) j[d] = i[d];
        j[axis] = (int64_t)student_get(idx, student_element(idx, i));
        student_set(out, student_element(out, i), student_get(in, student_element(in, j)));
    } while (student_next(i, idx->ndim, idx->shape));
    return AWL_OK;
}

int awl_student_scatter_add(const awl_view *out, int axis, const awl_view *idx, const awl_view *src)
{
    int64_t i[AWL_MAX_DIMS] = {0};
    if (awl_view_numel(idx) == 0) return AWL_OK;
    do {
        int64_t j[AWL_MAX_DIMS];
        for (int d = 0; d < idx->ndim; d++) j[d] = i[d];
        j[axis] = (int64_t)student_get(idx, student_element(idx, i));
        int64_t e = student_element(out, j);
        student_set(out, e, student_get(out, e) + student_get(src, student_element(src, i)));
    } while (student_next(i, idx->ndim, idx->shape));
    return AWL_OK;
}
