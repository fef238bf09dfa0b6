/*
 * backends/student/student_random.c - milestone 7: random fill.
 *
 * Element i of out, counted in row-major order of out's shape (whatever
 * its strides), is a pure function of (seed, offset, i): common/philox.h's
 * awl_philox_uniform_at(seed, offset, i) for a uniform draw in [0, 1),
 * awl_philox_normal_at(seed, offset, i) for a standard normal. So every
 * device draws the same numbers, and a training run on this device
 * initialises its model exactly as on the CPU.
 *
 *   AWL_RANDOM_UNIFORM: out[i] = a + (b - a) * u_i
 *   AWL_RANDOM_NORMAL:  out[i] = a + b * z_i
 *
 * computed in double and stored with student_set. Float dtypes only.
 *
 * Check with: awl-check --device student --op random
 */
#include "backends/student/student_internal.h"

int awl_student_random(const awl_view *out, awl_random_kind kind, uint64_t seed, uint64_t offset,
                       double a, double b)
{
    (void)out;
    (void)kind;
    (void)seed;
    (void)offset;
    (void)a;
    (void)b;
    return awl_student_todo("random", 7, "backends/student/student_random.c");
}
