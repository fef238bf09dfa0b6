/*
 * backends/student/student_reduce.c - milestone 4: reductions.
 *
 * out has in's number of axes, with size 1 along every reduced axis and
 * in's size along the others. So output element k collects every input
 * element whose multi-index, with the reduced axes set to 0, is k's. Walk
 * the input once: for each element, find its output element and combine
 * (one pass, any layout); or walk the outputs and, for each, the reduced
 * axes.
 *
 * backends/ops.h gives the arithmetic: start every output at
 * awl_reduce_identity(op), fold each element in with
 * awl_reduce_combine(op, acc, x), and for MEAN divide by the number of
 * elements reduced (awl_reduce_is_mean). Accumulate in double: a float32
 * sum of millions of values is off by a percent otherwise, and awl-check
 * sums 4M of them. An empty reduced axis gives the identity (MEAN: 0 / 0).
 *
 * Check with: awl-check --device student --op reduce
 */
#include "backends/student/student_internal.h"

int awl_student_reduce(awl_reduce_op op, const awl_view *out, const awl_view *in)
{
    (void)op;
    (void)out;
    (void)in;
    return awl_student_todo("reduce", 4, "backends/student/student_reduce.c");
}
