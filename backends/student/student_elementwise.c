/*
 * backends/student/student_elementwise.c - milestone 2: element-wise ops
 * with broadcasting; milestone 3: where.
 *
 * The framework broadcasts for you: every input arrives with out's shape,
 * and an axis it is broadcast along has stride 0. So one loop over out's
 * multi-index, reading each input at the same multi-index through its own
 * strides, is the whole of broadcasting. out may also be the very same
 * view as an input (an in-place update such as x *= 2): read the element
 * before you write it and that just works.
 *
 * What each op computes is written once, in backends/ops.h:
 * awl_unary_eval(op, x, alpha, alpha_d) and awl_binary_eval(op, a, b) give
 * it in double. Compute in double and store with student_set; for int32,
 * pass alpha truncated toward zero as `alpha` and the double as `alpha_d`.
 * Ops not defined for int32 (exp, division, ...) never reach you with it.
 *
 * Check with: awl-check --device student --op unary   (then binary, where)
 */
#include "backends/student/student_internal.h"

#define FILE_NAME "backends/student/student_elementwise.c"

/* out = op(in, alpha); in has out's shape (maybe broadcast) and dtype. */
int awl_student_unary(awl_unary_op op, const awl_view *out, const awl_view *in, double alpha)
{
    (void)op;
    (void)out;
    (void)in;
    (void)alpha;
    return awl_student_todo("unary", 2, FILE_NAME);
}

/* out = a (op) b; a and b have out's shape (maybe broadcast) and dtype. */
int awl_student_binary(awl_binary_op op, const awl_view *out, const awl_view *a, const awl_view *b)
{
    (void)op;
    (void)out;
    (void)a;
    (void)b;
    return awl_student_todo("binary", 2, FILE_NAME);
}

/* Milestone 3: out = cond != 0 ? a : b. All four have out's shape (maybe
 * broadcast); a, b and out share a dtype, cond may have any dtype
 * (bfloat16 too: -0.0 counts as 0). */
int awl_student_where(const awl_view *out, const awl_view *cond, const awl_view *a,
                      const awl_view *b)
{
    (void)out;
    (void)cond;
    (void)a;
    (void)b;
    return awl_student_todo("where", 3, FILE_NAME);
}
