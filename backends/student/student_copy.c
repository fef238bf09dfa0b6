/*
 * backends/student/student_copy.c - milestone 1: strided copy and fill.
 *
 * The two primitives every other one leans on: the framework makes a
 * tensor contiguous, converts its dtype and moves it between devices with
 * copy, and zeroes gradients with fill. Both walk a strided view element by
 * element: keep a multi-index idx over the view's shape (student_next
 * steps it), and element idx lives at storage element
 * student_element(view, idx). Read and write through student_get and
 * student_set, which convert to and from double for every dtype.
 *
 * Check with: awl-check --device student --op fill   (then --op copy)
 */
#include "backends/student/student_internal.h"

#define FILE_NAME "backends/student/student_copy.c"

/* Every element of out = value, converted to out's dtype (any of the four).
 * out is any strided view, perhaps with gaps between its elements (a slice
 * with a step) that must stay untouched, perhaps with zero elements. */
int awl_student_fill(const awl_view *out, double value)
{
    (void)out;
    (void)value;
    return awl_student_todo("fill", 1, FILE_NAME);
}

/* out = in element by element, converting the dtype where the two differ
 * (float to int32 truncates toward zero; student_set does it). in has out's
 * shape, and may be broadcast: a stride of 0 reads one element again and
 * again. out and in are separate memory. */
int awl_student_copy(const awl_view *out, const awl_view *in)
{
    (void)out;
    (void)in;
    return awl_student_todo("copy", 1, FILE_NAME);
}
