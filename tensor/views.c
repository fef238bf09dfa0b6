/*
 * tensor/views.c - raw views: new shapes and strides over the same storage.
 *
 * A view is only arithmetic on (shape, strides, offset): permuting axes
 * permutes strides, slicing scales a stride and moves the offset, expanding
 * gives a stride of 0. Nothing is copied, so a kernel that receives the view
 * reads the original memory in the new order. reshape is the one exception:
 * merging axes whose strides do not line up cannot be expressed as strides,
 * and then it copies (as PyTorch's reshape does).
 *
 * These functions record no autograd history; autograd/ops_shape.c wraps each
 * in a differentiable op.
 */
#include "tensor/tensor_internal.h"

#include <string.h>

awl_tensor *awl_tensor_as_strided(awl_tensor *t, int ndim, const int64_t *shape,
                                  const int64_t *strides, int64_t offset)
{
    if (!t) return NULL;
    if (ndim < 0 || ndim > AWL_MAX_DIMS) {
        awl_error(AWL_ERR_INVALID, "awl_tensor_as_strided: %d dimensions (at most %d)", ndim,
                  AWL_MAX_DIMS);
        return NULL;
    }
    return awl_tensor_wrap(t->storage, ndim, shape, strides, offset, t->dtype);
}

/* Strides that let `shape` view memory laid out as (old_shape, old_strides),
 * or false when no such strides exist. Walks both shapes in chunks of equal
 * element count; inside a chunk the old axes must be contiguous with each
 * other, and the new axes then take strides within that chunk. */
static bool view_strides(int old_ndim, const int64_t *old_shape, const int64_t *old_strides,
                         int ndim, const int64_t *shape, int64_t *strides)
{
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++) numel *= shape[d];
    if (numel == 0) {
        awl_contiguous_strides(ndim, shape, strides);
        return true;
    }
    int old_d = old_ndim - 1, d = ndim - 1;
    while (d >= 0 || old_d >= 0) {
        /* skip size-1 axes, which take any stride */
        if (d >= 0 && shape[d] == 1) {
            strides[d] = (d + 1 < ndim) ? strides[d + 1] * shape[d + 1] : 1;
            d--;
            continue;
        }
        if (old_d >= 0 && old_shape[old_d] == 1) {
            old_d--;
            continue;
        }
        if (d < 0 || old_d < 0) return false;
        /* one chunk: grow old and new element counts until they match */
        int64_t chunk_stride = old_strides[old_d];
        int64_t old_count = old_shape[old_d], new_count = shape[d];
        int old_first = old_d, new_first = d;
        while (old_count != new_count) {
            if (old_count < new_count) {
                old_first--;
                while (old_first >= 0 && old_shape[old_first] == 1) old_first--;
                if (old_first < 0) return false;
                int prev = old_first + 1;
                while (old_shape[prev] == 1) prev++;
                if (old_strides[old_first] != old_strides[prev] * old_shape[prev]) return false;
                old_count *= old_shape[old_first];
            } else {
                new_first--;
                if (new_first < 0) return false;
                new_count *= shape[new_first];
            }
        }
        int64_t s = chunk_stride;
        for (int k = d; k >= new_first; k--) {
            strides[k] = s;
            s *= shape[k];
        }
        d = new_first - 1;
        old_d = old_first - 1;
    }
    return true;
}

awl_tensor *awl_tensor_reshape(awl_tensor *t, int ndim, const int64_t *shape)
{
    if (!t) return NULL;
    char a[160], b[160];
    if (ndim < 0 || ndim > AWL_MAX_DIMS) {
        awl_error(AWL_ERR_INVALID, "awl_reshape: %d dimensions (at most %d)", ndim, AWL_MAX_DIMS);
        return NULL;
    }
    int64_t resolved[AWL_MAX_DIMS];
    int infer = -1;
    int64_t known = 1;
    for (int d = 0; d < ndim; d++) {
        resolved[d] = shape[d];
        if (shape[d] == -1 && infer < 0) {
            infer = d;
        } else if (shape[d] < 0) {
            awl_error(AWL_ERR_INVALID, "awl_reshape: invalid target shape %s",
                      awl_format_shape(ndim, shape, b, sizeof b));
            return NULL;
        } else {
            known *= shape[d];
        }
    }
    int64_t numel = awl_numel(t);
    if (infer >= 0) {
        if (known == 0 || numel % known != 0) goto mismatch;
        resolved[infer] = numel / known;
    } else if (known != numel) {
        goto mismatch;
    }
    int64_t strides[AWL_MAX_DIMS];
    if (view_strides(t->ndim, t->shape, t->strides, ndim, resolved, strides))
        return awl_tensor_wrap(t->storage, ndim, resolved, strides, t->offset, t->dtype);
    /* The axes cannot be merged in place: reshape a fresh contiguous copy,
     * which nothing else references yet, by rewriting its shape. */
    awl_tensor *c = awl_tensor_clone(t);
    if (!c) return NULL;
    c->ndim = ndim;
    memcpy(c->shape, resolved, (size_t)ndim * sizeof *resolved);
    awl_contiguous_strides(ndim, resolved, c->strides);
    return c;

mismatch:
    awl_error(AWL_ERR_INVALID, "awl_reshape: cannot reshape %s (%lld elements) to %s",
              awl_shape_str(t, a, sizeof a), (long long)numel,
              awl_format_shape(ndim, shape, b, sizeof b));
    return NULL;
}

awl_tensor *awl_tensor_permute(awl_tensor *t, const int *dims)
{
    if (!t) return NULL;
    int64_t shape[AWL_MAX_DIMS], strides[AWL_MAX_DIMS];
    bool seen[AWL_MAX_DIMS] = {false};
    for (int i = 0; i < t->ndim; i++) {
        int d = dims[i] < 0 ? dims[i] + t->ndim : dims[i];
        if (d < 0 || d >= t->ndim || seen[d]) {
            char buf[160], perm[160];
            size_t used = (size_t)snprintf(perm, sizeof perm, "(");
            for (int k = 0; k < t->ndim && used < sizeof perm; k++)
                used +=
                    (size_t)snprintf(perm + used, sizeof perm - used, k ? ",%d" : "%d", dims[k]);
            if (used < sizeof perm) snprintf(perm + used, sizeof perm - used, ")");
            awl_error(AWL_ERR_INVALID, "awl_permute: %s is not a permutation of the axes of %s",
                      perm, awl_shape_str(t, buf, sizeof buf));
            return NULL;
        }
        seen[d] = true;
        shape[i] = t->shape[d];
        strides[i] = t->strides[d];
    }
    return awl_tensor_wrap(t->storage, t->ndim, shape, strides, t->offset, t->dtype);
}

awl_tensor *awl_tensor_transpose(awl_tensor *t, int dim0, int dim1)
{
    if (!t) return NULL;
    int d0, d1;
    if (awl_normalize_dim("awl_transpose", dim0, t->ndim, &d0) < 0 ||
        awl_normalize_dim("awl_transpose", dim1, t->ndim, &d1) < 0)
        return NULL;
    int perm[AWL_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++) perm[i] = i;
    perm[d0] = d1;
    perm[d1] = d0;
    return awl_tensor_permute(t, perm);
}

awl_tensor *awl_tensor_expand(awl_tensor *t, int ndim, const int64_t *shape)
{
    if (!t) return NULL;
    char a[160], b[160];
    if (ndim < t->ndim || ndim > AWL_MAX_DIMS) goto bad;
    int64_t out_shape[AWL_MAX_DIMS], strides[AWL_MAX_DIMS];
    int lead = ndim - t->ndim;
    for (int d = 0; d < ndim; d++) {
        int src = d - lead;
        int64_t want = shape[d];
        if (src < 0) { /* a new leading axis */
            if (want < 0) goto bad;
            out_shape[d] = want;
            strides[d] = 0;
        } else if (want == -1 || want == t->shape[src]) {
            out_shape[d] = t->shape[src];
            strides[d] = t->strides[src];
        } else if (t->shape[src] == 1 && want >= 0) {
            out_shape[d] = want;
            strides[d] = 0;
        } else {
            goto bad;
        }
    }
    return awl_tensor_wrap(t->storage, ndim, out_shape, strides, t->offset, t->dtype);
bad:
    awl_error(AWL_ERR_INVALID, "awl_expand: cannot expand %s to %s", awl_shape_str(t, a, sizeof a),
              awl_format_shape(ndim, shape, b, sizeof b));
    return NULL;
}

awl_tensor *awl_tensor_slice(awl_tensor *t, int dim, int64_t start, int64_t stop, int64_t step)
{
    if (!t) return NULL;
    int d;
    if (awl_normalize_dim("awl_slice", dim, t->ndim, &d) < 0) return NULL;
    int64_t n = t->shape[d];
    char buf[160];
    if (step <= 0) {
        awl_error(AWL_ERR_INVALID, "awl_slice: step must be positive, got %lld", (long long)step);
        return NULL;
    }
    int64_t s = start < 0 ? start + n : start;
    int64_t e = stop < 0 ? stop + n : stop;
    if (s < 0 || s > n || e < 0 || e > n) {
        awl_error(AWL_ERR_INVALID,
                  "awl_slice: range %lld:%lld out of bounds for dim %d of size %lld (shape %s)",
                  (long long)start, (long long)stop, d, (long long)n,
                  awl_shape_str(t, buf, sizeof buf));
        return NULL;
    }
    int64_t len = e > s ? (e - s + step - 1) / step : 0;
    int64_t shape[AWL_MAX_DIMS], strides[AWL_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    memcpy(strides, t->strides, sizeof strides);
    shape[d] = len;
    strides[d] = t->strides[d] * step;
    int64_t offset = t->offset + (len > 0 ? s * t->strides[d] : 0);
    return awl_tensor_wrap(t->storage, t->ndim, shape, strides, offset, t->dtype);
}

awl_tensor *awl_tensor_squeeze(awl_tensor *t, int dim)
{
    if (!t) return NULL;
    int d;
    if (awl_normalize_dim("awl_squeeze", dim, t->ndim, &d) < 0) return NULL;
    if (t->shape[d] != 1) {
        char buf[160];
        awl_error(AWL_ERR_INVALID, "awl_squeeze: dim %d of %s has size %lld, not 1", dim,
                  awl_shape_str(t, buf, sizeof buf), (long long)t->shape[d]);
        return NULL;
    }
    int64_t shape[AWL_MAX_DIMS], strides[AWL_MAX_DIMS];
    for (int i = 0, j = 0; i < t->ndim; i++) {
        if (i == d) continue;
        shape[j] = t->shape[i];
        strides[j++] = t->strides[i];
    }
    return awl_tensor_wrap(t->storage, t->ndim - 1, shape, strides, t->offset, t->dtype);
}

awl_tensor *awl_tensor_unsqueeze(awl_tensor *t, int dim)
{
    if (!t) return NULL;
    int d;
    if (t->ndim == AWL_MAX_DIMS) {
        awl_error(AWL_ERR_INVALID, "awl_unsqueeze: tensor already has %d dimensions", AWL_MAX_DIMS);
        return NULL;
    }
    if (awl_normalize_dim("awl_unsqueeze", dim, t->ndim + 1, &d) < 0) return NULL;
    int64_t shape[AWL_MAX_DIMS], strides[AWL_MAX_DIMS];
    for (int i = 0, j = 0; i <= t->ndim; i++) {
        if (i == d) {
            shape[i] = 1;
            strides[i] = (j < t->ndim) ? t->strides[j] * t->shape[j] : 1;
        } else {
            shape[i] = t->shape[j];
            strides[i] = t->strides[j++];
        }
    }
    return awl_tensor_wrap(t->storage, t->ndim + 1, shape, strides, t->offset, t->dtype);
}

awl_tensor *awl_tensor_detach(awl_tensor *t)
{
    if (!t) return NULL;
    return awl_tensor_wrap(t->storage, t->ndim, t->shape, t->strides, t->offset, t->dtype);
}
