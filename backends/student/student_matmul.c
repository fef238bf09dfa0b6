/*
 * backends/student/student_matmul.c - milestone 5: matrix products, first
 * naive, then blocked for speed.
 *
 * out (..., M, N) = a (..., M, K) @ b (..., K, N), or out += a @ b when
 * accumulate is true. All three have the same number of axes (at least 2)
 * and out's batch axes; a or b may be broadcast along a batch axis (stride
 * 0), and any of them may be transposed or sliced (its last two strides
 * anything). Float dtypes only, all three the same; bfloat16 is declared
 * unsupported here. K may be 0 (out = 0, or unchanged when accumulating).
 *
 * Naive first: three loops over m, n, k per batch, reading through the
 * strides, the sum in double. It passes awl-check, and a GPT trains with
 * it, slowly: a product is 90% of a training step. Then make it fast: copy
 * a and b into contiguous tiles (which also removes every stride from the
 * inner loop), order the loops so the innermost one walks memory with
 * stride 1 (i, k, j rather than i, j, k), and keep a block of out in cache
 * while you sweep k. `awl-check --device student --perf --op matmul`
 * shows GFLOP/s against the CPU backend's OpenBLAS.
 *
 * Check with: awl-check --device student --op matmul
 */
#include "backends/student/student_internal.h"

int awl_student_matmul(const awl_view *out, const awl_view *a, const awl_view *b, bool accumulate)
{
    (void)out;
    (void)a;
    (void)b;
    (void)accumulate;
    return awl_student_todo("matmul", 5, "backends/student/student_matmul.c");
}
