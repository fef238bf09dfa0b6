/*
 * tensor/tensor.c - the tensor struct: creation, shapes, reading back.
 *
 * A tensor is a view (shape, strides, offset, dtype) onto a storage
 * (tensor/storage.c) owned by reference counts and scopes (tensor/scope.c).
 * This file makes new tensor structs (wrapping a storage, or allocating a
 * fresh contiguous one), the creation functions that fill them (zeros,
 * full, arange, from host data; random tensors are in tensor/random.c),
 * and reads values back to the host. The other concepts of the layer have
 * files of their own: devices and settings (device.c), views (views.c),
 * raw compute (compute.c), the fused kernels' entry points (fused.c),
 * printing (print.c).
 */
#include "tensor/tensor_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- shapes ---------------------------------------------------------------------- */

void awl_contiguous_strides(int ndim, const int64_t *shape, int64_t *strides)
{
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        strides[d] = s;
        s *= shape[d] > 0 ? shape[d] : 1;
    }
}

int awl_normalize_dim(const char *op, int dim, int ndim, int *out)
{
    int d = dim < 0 ? dim + ndim : dim;
    if (d < 0 || d >= ndim)
        return awl_error(AWL_ERR_INVALID, "%s: dim %d out of range for a %d-dimensional tensor", op,
                         dim, ndim);
    *out = d;
    return AWL_OK;
}

const char *awl_format_shape(int ndim, const int64_t *shape, char *buf, size_t size)
{
    size_t used = 0;
    used += (size_t)snprintf(buf, size, "(");
    for (int d = 0; d < ndim && used < size; d++)
        used +=
            (size_t)snprintf(buf + used, size - used, d ? ",%lld" : "%lld", (long long)shape[d]);
    if (used < size) snprintf(buf + used, size - used, ")");
    return buf;
}

const char *awl_shape_str(const awl_tensor *t, char *buf, size_t size)
{
    if (!t) {
        snprintf(buf, size, "(null)");
        return buf;
    }
    return awl_format_shape(t->ndim, t->shape, buf, size);
}

int awl_backend_status(const char *op, int status)
{
    if (status < 0 && status != AWL_ERR_UNSUPPORTED && awl_last_error_code() == AWL_OK)
        return awl_error(status, "%s: backend call failed (status %d)", op, status);
    return status;
}

/* ---- tensor structs ------------------------------------------------------------- */

awl_tensor *awl_tensor_wrap(awl_storage *storage, int ndim, const int64_t *shape,
                            const int64_t *strides, int64_t offset, awl_dtype dtype)
{
    awl_tensor *t = awl_xcalloc(1, sizeof *t);
    t->refcount = 1;
    t->ndim = ndim;
    if (ndim > 0) { /* a 0-d tensor may come with NULL shape and strides */
        memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
        memcpy(t->strides, strides, (size_t)ndim * sizeof *strides);
    }
    t->offset = offset;
    t->dtype = dtype;
    t->storage = storage;
    storage->refcount++;
    return awl_adopt(t);
}

awl_tensor *awl_tensor_alloc(const char *op, awl_device device, int ndim, const int64_t *shape,
                             awl_dtype dtype)
{
    char buf[160];
    if (ndim < 0 || ndim > AWL_MAX_DIMS) {
        awl_error(AWL_ERR_INVALID, "%s: %d dimensions (at most %d)", op, ndim, AWL_MAX_DIMS);
        return NULL;
    }
    if (dtype < 0 || dtype >= AWL_DTYPE_COUNT) {
        awl_error(AWL_ERR_INVALID, "%s: invalid dtype %d", op, (int)dtype);
        return NULL;
    }
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0 || (shape[d] > 0 && numel > INT64_MAX / 16 / shape[d])) {
            awl_error(AWL_ERR_INVALID, "%s: invalid shape %s", op,
                      awl_format_shape(ndim, shape, buf, sizeof buf));
            return NULL;
        }
        numel *= shape[d];
    }
    awl_storage *s = awl_storage_new(op, device, (size_t)numel * awl_dtype_size(dtype));
    if (!s) return NULL;
    int64_t strides[AWL_MAX_DIMS];
    awl_contiguous_strides(ndim, shape, strides);
    awl_tensor *t = awl_tensor_wrap(s, ndim, shape, strides, 0, dtype);
    s->refcount--; /* wrap took a reference; the new storage's first is the tensor's */
    return t;
}

awl_tensor *awl_tensor_new_on(const awl_tensor *like, int ndim, const int64_t *shape,
                              awl_dtype dtype)
{
    if (!like) return NULL;
    return awl_tensor_alloc("awl_tensor_new_on", like->storage->device, ndim, shape, dtype);
}

awl_view awl_tensor_view(const awl_tensor *t)
{
    awl_view v;
    v.data = t->storage->data;
    v.offset = t->offset;
    v.ndim = t->ndim;
    memcpy(v.shape, t->shape, sizeof v.shape);
    memcpy(v.strides, t->strides, sizeof v.strides);
    v.dtype = t->dtype;
    return v;
}

const awl_backend *awl_tensor_backend(const awl_tensor *t) { return t->storage->device.backend; }

int awl_tensor_device_index(const awl_tensor *t) { return t->storage->device.index; }

bool awl_tensor_is_host(const awl_tensor *t) { return t->storage->device.backend->host_memory; }

bool awl_same_device(const awl_tensor *a, const awl_tensor *b)
{
    return awl_device_equal(a->storage->device, b->storage->device);
}

int awl_check_same_device(const char *op, const awl_tensor *a, const awl_tensor *b)
{
    if (awl_same_device(a, b)) return AWL_OK;
    char na[32], nb[32];
    return awl_error(AWL_ERR_INVALID, "%s: tensors are on different devices: %s and %s", op,
                     awl_tensor_device_name(a, na, sizeof na),
                     awl_tensor_device_name(b, nb, sizeof nb));
}

int64_t awl_numel(const awl_tensor *t)
{
    if (!t) return 0;
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

bool awl_is_contiguous(const awl_tensor *t)
{
    awl_view v = awl_tensor_view(t);
    return awl_view_is_contiguous(&v);
}

bool awl_same_shape(const awl_tensor *a, const awl_tensor *b)
{
    if (a->ndim != b->ndim) return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return false;
    return true;
}

bool awl_trailing_shape(const awl_tensor *t, const awl_tensor *of)
{
    if (t->ndim > of->ndim) return false;
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] != of->shape[of->ndim - t->ndim + d]) return false;
    return true;
}

/* ---- creation --------------------------------------------------------------------- */

awl_tensor *awl_tensor_create(const char *op, int ndim, const int64_t *shape, awl_dtype dtype,
                              const char *device)
{
    if (ndim > 0 && !shape) {
        awl_error(AWL_ERR_INVALID, "%s: shape is NULL", op);
        return NULL;
    }
    awl_device d;
    if (awl_device_parse(device, &d) < 0) return NULL;
    return awl_tensor_alloc(op, d, ndim, shape, dtype);
}

static awl_tensor *create_filled(const char *op, int ndim, const int64_t *shape, double value,
                                 awl_dtype dtype, const char *device)
{
    awl_tensor *t = awl_tensor_create(op, ndim, shape, dtype, device);
    if (t && awl_tensor_fill_(t, value) < 0) {
        awl_discard(t);
        return NULL;
    }
    return t;
}

awl_tensor *awl_empty(int ndim, const int64_t *shape, awl_dtype dtype, const char *device)
{
    return awl_tensor_create("awl_empty", ndim, shape, dtype, device);
}

awl_tensor *awl_zeros(int ndim, const int64_t *shape, awl_dtype dtype, const char *device)
{
    return create_filled("awl_zeros", ndim, shape, 0.0, dtype, device);
}

awl_tensor *awl_ones(int ndim, const int64_t *shape, awl_dtype dtype, const char *device)
{
    return create_filled("awl_ones", ndim, shape, 1.0, dtype, device);
}

awl_tensor *awl_full(int ndim, const int64_t *shape, double value, awl_dtype dtype,
                     const char *device)
{
    return create_filled("awl_full", ndim, shape, value, dtype, device);
}

/* Writes n doubles into a host buffer of `dtype`. */
static void store_doubles(void *dst, const double *src, int64_t n, awl_dtype dtype)
{
    for (int64_t i = 0; i < n; i++) {
        switch (dtype) {
        case AWL_F32: ((float *)dst)[i] = (float)src[i]; break;
        case AWL_F64: ((double *)dst)[i] = src[i]; break;
        case AWL_I32: ((int32_t *)dst)[i] = (int32_t)src[i]; break;
        case AWL_BF16: ((awl_bf16 *)dst)[i] = awl_float_to_bf16((float)src[i]); break;
        default: break;
        }
    }
}

awl_tensor *awl_arange(double start, double stop, double step, awl_dtype dtype, const char *device)
{
    if (step == 0 || !isfinite(start) || !isfinite(stop) || !isfinite(step)) {
        awl_error(AWL_ERR_INVALID, "awl_arange: invalid range %g:%g:%g", start, stop, step);
        return NULL;
    }
    double count = ceil((stop - start) / step);
    int64_t n = count > 0 ? (int64_t)count : 0;
    double *values = awl_xmalloc((size_t)n * sizeof *values);
    for (int64_t i = 0; i < n; i++) values[i] = start + (double)i * step;
    void *host = awl_xmalloc((size_t)n * awl_dtype_size(dtype) + 1);
    store_doubles(host, values, n, dtype);
    awl_tensor *t = awl_from_data(host, 1, &n, dtype, device);
    free(values);
    free(host);
    return t;
}

awl_tensor *awl_from_data(const void *data, int ndim, const int64_t *shape, awl_dtype dtype,
                          const char *device)
{
    awl_tensor *t = awl_tensor_create("awl_from_data", ndim, shape, dtype, device);
    if (!t) return NULL;
    size_t nbytes = (size_t)awl_numel(t) * awl_dtype_size(dtype);
    awl_storage *s = t->storage;
    if (nbytes && !data) {
        awl_error(AWL_ERR_INVALID, "awl_from_data: data is NULL");
        awl_discard(t);
        return NULL;
    }
    if (nbytes && s->device.backend->copy_from_host(s->device.index, s->data, data, nbytes) < 0) {
        awl_discard(t);
        return NULL;
    }
    return t;
}

static awl_tensor *create_like(const awl_tensor *t)
{
    if (!t) return NULL;
    return awl_tensor_alloc("awl_empty_like", t->storage->device, t->ndim, t->shape, t->dtype);
}

awl_tensor *awl_empty_like(const awl_tensor *t) { return create_like(t); }

awl_tensor *awl_full_like(const awl_tensor *t, double value)
{
    awl_tensor *out = create_like(t);
    if (out && awl_tensor_fill_(out, value) < 0) {
        awl_discard(out);
        return NULL;
    }
    return out;
}

awl_tensor *awl_zeros_like(const awl_tensor *t) { return awl_full_like(t, 0.0); }

awl_tensor *awl_ones_like(const awl_tensor *t) { return awl_full_like(t, 1.0); }

/* ---- reading back ------------------------------------------------------------------ */

int awl_to_host(const awl_tensor *t, void *dst, size_t nbytes)
{
    if (!t) return AWL_ERR_INVALID;
    size_t need = (size_t)awl_numel(t) * awl_dtype_size(t->dtype);
    if (nbytes < need)
        return awl_error(AWL_ERR_INVALID, "awl_to_host: buffer of %zu bytes, tensor needs %zu",
                         nbytes, need);
    if (need == 0) return AWL_OK;
    awl_scope_begin();
    awl_tensor *c = awl_tensor_contiguous((awl_tensor *)t);
    int status = AWL_ERR_INVALID;
    if (c) {
        awl_storage *s = c->storage;
        const char *src = (const char *)s->data + c->offset * (int64_t)awl_dtype_size(c->dtype);
        status = s->device.backend->copy_to_host(s->device.index, dst, src, need);
    }
    awl_scope_end();
    return status;
}

double awl_item(const awl_tensor *t)
{
    if (!t) return NAN;
    if (awl_numel(t) != 1) {
        char buf[160];
        awl_error(AWL_ERR_INVALID, "awl_item: tensor of shape %s has %lld elements, not 1",
                  awl_shape_str(t, buf, sizeof buf), (long long)awl_numel(t));
        return NAN;
    }
    unsigned char raw[8];
    if (awl_to_host(t, raw, sizeof raw) < 0) return NAN;
    return awl_dtype_load(t->dtype, raw);
}
