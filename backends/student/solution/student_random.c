/*
 * backends/student/solution/student_random.c - milestone 7, solved:
 * element i of the row-major walk from common/philox.h's stream.
 */
#include "backends/student/student_internal.h"
#include "common/philox.h"

int awl_student_random(const awl_view *out, awl_random_kind kind, uint64_t seed, uint64_t offset,
                       double a, double b)
{
    if (awl_view_numel(out) == 0) return AWL_OK;
    int64_t idx[AWL_MAX_DIMS] = {0};
    uint64_t i = 0;
    do {
        double v = kind == AWL_RANDOM_UNIFORM ? a + (b - a) * awl_philox_uniform_at(seed, offset, i)
                                              : a + b * awl_philox_normal_at(seed, offset, i);
        student_set(out, student_element(out, idx), v);
        i++;
    } while (student_next(idx, out->ndim, out->shape));
    return AWL_OK;
}
