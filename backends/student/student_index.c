/*
 * backends/student/student_index.c - milestone 6: indexing.
 *
 * The embedding lookup and its gradient (index_select, index_add), and
 * gather and its gradient (scatter_add), which cross-entropy uses. Indices
 * are int32 views (any layout; read them with student_get) and already
 * checked to be in range. The two adjoints add: several indices may name
 * the same row, and their contributions must be summed in index order, so
 * that the result is the same bits on every run.
 *
 * Check with: awl-check --device student --op index   (then gather, scatter)
 */
#include "backends/student/student_internal.h"

#define FILE_NAME "backends/student/student_index.c"

/* out[i..., r...] = src[idx[i...], r...]: idx of any shape (I...), src
 * (V, R...), out (I..., R...). */
int awl_student_index_select(const awl_view *out, const awl_view *src, const awl_view *idx)
{
    (void)out;
    (void)src;
    (void)idx;
    return awl_student_todo("index_select", 6, FILE_NAME);
}

/* dst[idx[i...], r...] += src[i..., r...]: dst (V, R...), src (I..., R...). */
int awl_student_index_add(const awl_view *dst, const awl_view *idx, const awl_view *src)
{
    (void)dst;
    (void)idx;
    (void)src;
    return awl_student_todo("index_add", 6, FILE_NAME);
}

/* out[..., j, ...] = in[..., idx[..., j, ...], ...] along axis: out and idx
 * share a shape, in agrees with it except along axis. */
int awl_student_gather(const awl_view *out, const awl_view *in, int axis, const awl_view *idx)
{
    (void)out;
    (void)in;
    (void)axis;
    (void)idx;
    return awl_student_todo("gather", 6, FILE_NAME);
}

/* out[..., idx[..., j, ...], ...] += src[..., j, ...] along axis: idx and
 * src share a shape. */
int awl_student_scatter_add(const awl_view *out, int axis, const awl_view *idx, const awl_view *src)
{
    (void)out;
    (void)axis;
    (void)idx;
    (void)src;
    return awl_student_todo("scatter_add", 6, FILE_NAME);
}
