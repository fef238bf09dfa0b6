/*
 * backends/student/solution/student_reduce.c - milestone 4, solved: one
 * walk over the input's rows, each element combined into its output
 * element (the input's multi-index with the reduced axes set to 0),
 * accumulated in double in a scratch array, then stored.
 *
 * Along a row the output element either stays put (the last axis is
 * reduced) or moves one step per element (it is kept), so only each row's
 * first output element needs the multi-index arithmetic.
 */
#include <stdlib.h>

#include "backends/student/student_internal.h"

int awl_student_reduce(awl_reduce_op op, const awl_view *out, const awl_view *in)
{
    int64_t nout = awl_view_numel(out), nin = awl_view_numel(in);
    if (nout == 0) return AWL_OK;
    double *acc = malloc((size_t)nout * sizeof *acc);
    if (!acc) return awl_error(AWL_ERR_OOM, "student reduce: out of memory");
    for (int64_t k = 0; k < nout; k++) acc[k] = awl_reduce_identity(op);
    int64_t n = student_row_length(in), rows = n ? nin / n : 0, s = student_row_stride(in);
    int last = in->ndim - 1;
    int64_t step = in->ndim && out->shape[last] != 1 ? 1 : 0;
    for (int64_t r = 0; r < rows; r++) {
        /* out's row-major index of the row's first output element */
        int64_t k = 0, q = r, place = 1;
        for (int d = last - 1; d >= 0; d--) {
            if (out->shape[d] != 1) k += (q % in->shape[d]) * place;
            q /= in->shape[d];
            place *= out->shape[d];
        }
        k *= in->ndim ? out->shape[last] : 1;
        int64_t e = student_row_start(in, r);
        for (int64_t j = 0; j < n; j++)
            acc[k + j * step] =
                awl_reduce_combine(op, acc[k + j * step], student_get(in, e + j * s));
    }
    double count = (double)(nin / nout);
    int64_t idx[AWL_MAX_DIMS] = {0}, k = 0;
    do {
        student_set(out, student_element(out, idx),
                    awl_reduce_is_mean(op) ? acc[k] / count : acc[k]);
        k++;
    } while (student_next(idx, out->ndim, out->shape));
    free(acc);
    return AWL_OK;
}
