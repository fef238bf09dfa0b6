/*
 * tensor/tensor.c - tensor lifetime: devices, storage, scopes, creation.
 *
 * Lifetime is two mechanisms layered on one reference count.
 *
 * Reference counts: a tensor struct counts the references to it; a storage
 * counts the tensors (views) that use it. Releasing the last reference to a
 * tensor drops its storage, its gradient and its graph node.
 *
 * Scopes: every tensor created while a scope is open gets its first
 * reference owned by that scope, which releases it at awl_scope_end(). This
 * is an autorelease pool, as in Objective-C: it lets expressions nest
 * (awl_mul(awl_add(a, b), c)) without naming and freeing each temporary,
 * while the graph keeps exactly the tensors backward needs by holding its
 * own references. awl_keep() moves a tensor's reference one scope outward.
 *
 * Memory statistics are kept here, per device, at the one place every
 * storage is allocated and freed, so every backend reports the same figures.
 */
#include "tensor/tensor_internal.h"

#include <math.h>

#include "common/philox.h"
#include <stdlib.h>
#include <string.h>

/* ---- small host allocations --------------------------------------------------- */

static void out_of_host_memory(size_t size)
{
    fprintf(stderr, "awl: out of host memory allocating %zu bytes of bookkeeping\n", size);
    abort();
}

void *awl_xmalloc(size_t size)
{
    void *p = malloc(size ? size : 1);
    if (!p) out_of_host_memory(size);
    return p;
}

void *awl_xcalloc(size_t count, size_t size)
{
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) out_of_host_memory(count * size);
    return p;
}

void *awl_xrealloc(void *ptr, size_t size)
{
    void *p = realloc(ptr, size ? size : 1);
    if (!p) out_of_host_memory(size);
    return p;
}

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

/* ---- devices ----------------------------------------------------------------------- */

/* Resolves a device name without recording anything; on failure writes the
 * reason to `why` and returns the status to report. Queries
 * (awl_device_available) must not disturb the error slot or trip
 * abort-on-error. */
static int device_lookup(const char *name, awl_device *out, char *why, size_t size)
{
    if (!name) name = "cpu";
    char backend_name[32];
    int index = 0;
    const char *colon = strchr(name, ':');
    size_t len = colon ? (size_t)(colon - name) : strlen(name);
    if (len == 0 || len >= sizeof backend_name) {
        snprintf(why, size, "awl: invalid device name '%s'", name);
        return AWL_ERR_INVALID;
    }
    memcpy(backend_name, name, len);
    backend_name[len] = '\0';
    if (colon) {
        char *end;
        long v = strtol(colon + 1, &end, 10);
        if (*end || end == colon + 1 || v < 0 || v > 1024) {
            snprintf(why, size, "awl: invalid device index in '%s'", name);
            return AWL_ERR_INVALID;
        }
        index = (int)v;
    }
    const awl_backend *backend = awl_backend_find(backend_name);
    if (!backend) {
        snprintf(why, size, "awl: unknown device '%s' (this build has: cpu%s)", name,
                 awl_cuda_backend() ? ", cuda" : "");
        return AWL_ERR_INVALID;
    }
    int count = backend->device_count();
    if (index >= count) {
        snprintf(why, size, "awl: device '%s' is not available (%d %s device%s found)", name, count,
                 backend->name, count == 1 ? "" : "s");
        return AWL_ERR_DEVICE;
    }
    out->backend = backend;
    out->index = index;
    return AWL_OK;
}

int awl_device_parse(const char *name, awl_device *out)
{
    /* The CPU is asked for on every creation call: skip the parsing. */
    if (!name || strcmp(name, "cpu") == 0) {
        out->backend = awl_backend_find("cpu");
        out->index = 0;
        return AWL_OK;
    }
    char why[256];
    int status = device_lookup(name, out, why, sizeof why);
    return status < 0 ? awl_error(status, "%s", why) : AWL_OK;
}

bool awl_device_available(const char *name)
{
    awl_device d;
    char why[256];
    return device_lookup(name, &d, why, sizeof why) == AWL_OK;
}

const char *awl_device_name(awl_device device, char *buf, size_t size)
{
    if (strcmp(device.backend->name, "cpu") == 0)
        snprintf(buf, size, "cpu");
    else
        snprintf(buf, size, "%s:%d", device.backend->name, device.index);
    return buf;
}

const char *awl_tensor_device_name(const awl_tensor *t, char *buf, size_t size)
{
    return awl_device_name(t->storage->device, buf, size);
}

static int num_threads;

void awl_set_num_threads(int n)
{
    if (n < 1) n = 1;
    num_threads = n;
    const awl_backend *cpu = awl_cpu_backend();
    if (cpu->set_num_threads) cpu->set_num_threads(n);
}

int awl_get_num_threads(void) { return num_threads; }

int awl_set_float32_matmul_precision(const char *precision)
{
    bool fast;
    if (precision && strcmp(precision, "highest") == 0)
        fast = false;
    else if (precision && (strcmp(precision, "high") == 0 || strcmp(precision, "medium") == 0))
        fast = true;
    else
        return awl_error(AWL_ERR_INVALID,
                         "awl_set_float32_matmul_precision: '%s' is not highest, high or medium",
                         precision ? precision : "(null)");
    const char *names[] = {"cpu", "cuda"};
    for (int i = 0; i < 2; i++) {
        const awl_backend *b = awl_backend_find(names[i]);
        if (b && b->set_matmul_fast_fp32) b->set_matmul_fast_fp32(fast);
    }
    return AWL_OK;
}

int awl_synchronize(const char *device)
{
    awl_device d;
    if (awl_device_parse(device, &d) < 0) return AWL_ERR_INVALID;
    return d.backend->synchronize(d.index);
}

int awl_device_stream(const char *device, void **stream)
{
    awl_device d;
    *stream = NULL;
    if (awl_device_parse(device, &d) < 0) return AWL_ERR_INVALID;
    if (d.backend->stream) *stream = d.backend->stream(d.index);
    return AWL_OK;
}

/* ---- memory statistics -------------------------------------------------------- */

#define MAX_TRACKED_DEVICES 16

typedef struct device_stats {
    const awl_backend *backend;
    int index;
    awl_memory_stats stats;
} device_stats;

static device_stats tracked[MAX_TRACKED_DEVICES];
static int n_tracked;

static awl_memory_stats *stats_for(awl_device device)
{
    for (int i = 0; i < n_tracked; i++)
        if (tracked[i].backend == device.backend && tracked[i].index == device.index)
            return &tracked[i].stats;
    if (n_tracked == MAX_TRACKED_DEVICES) return &tracked[MAX_TRACKED_DEVICES - 1].stats;
    tracked[n_tracked].backend = device.backend;
    tracked[n_tracked].index = device.index;
    return &tracked[n_tracked++].stats;
}

int awl_memory_get_stats(const char *device, awl_memory_stats *out)
{
    awl_device d;
    if (awl_device_parse(device, &d) < 0) return AWL_ERR_INVALID;
    *out = *stats_for(d);
    out->reserved =
        d.backend->memory_reserved ? (int64_t)d.backend->memory_reserved(d.index) : out->in_use;
    return AWL_OK;
}

int awl_memory_reset_peak(const char *device)
{
    awl_device d;
    if (awl_device_parse(device, &d) < 0) return AWL_ERR_INVALID;
    awl_memory_stats *s = stats_for(d);
    s->peak = s->in_use;
    return AWL_OK;
}

/* ---- storage ---------------------------------------------------------------------- */

static awl_storage *storage_new(const char *op, awl_device device, size_t nbytes)
{
    void *data = device.backend->alloc(device.index, nbytes);
    if (!data && nbytes > 0) {
        if (awl_last_error_code() == AWL_OK || strncmp(awl_last_error(), op, strlen(op)) != 0) {
            char name[32], msg[1024];
            snprintf(msg, sizeof msg, "%s", awl_last_error());
            awl_error(AWL_ERR_OOM, "%s: cannot allocate %zu bytes on %s: %s", op, nbytes,
                      awl_device_name(device, name, sizeof name), msg);
        }
        return NULL;
    }
    awl_storage *s = awl_xmalloc(sizeof *s);
    s->refcount = 1;
    s->data = data;
    s->nbytes = nbytes;
    s->device = device;
    awl_memory_stats *st = stats_for(device);
    st->in_use += (int64_t)nbytes;
    st->allocations++;
    st->live++;
    if (st->in_use > st->peak) st->peak = st->in_use;
    return s;
}

static void storage_release(awl_storage *s)
{
    if (--s->refcount > 0) return;
    awl_memory_stats *st = stats_for(s->device);
    st->in_use -= (int64_t)s->nbytes;
    st->live--;
    s->device.backend->free(s->device.index, s->data, s->nbytes);
    free(s);
}

/* ---- scopes ----------------------------------------------------------------------- */

typedef struct scope {
    awl_tensor **owned;
    int count, capacity;
} scope;

static _Thread_local scope *scopes;
static _Thread_local int scope_count, scope_capacity;

int awl_scope_depth(void) { return scope_count; }

void awl_scope_begin(void)
{
    if (scope_count == scope_capacity) {
        int cap = scope_capacity ? 2 * scope_capacity : 8;
        scopes = awl_xrealloc(scopes, (size_t)cap * sizeof *scopes);
        memset(scopes + scope_capacity, 0, (size_t)(cap - scope_capacity) * sizeof *scopes);
        scope_capacity = cap;
    }
    scopes[scope_count++].count = 0; /* the owned array is reused across scopes */
}

static void scope_push(scope *s, awl_tensor *t)
{
    if (s->count == s->capacity) {
        s->capacity = s->capacity ? 2 * s->capacity : 64;
        s->owned = awl_xrealloc(s->owned, (size_t)s->capacity * sizeof *s->owned);
    }
    s->owned[s->count++] = t;
}

void awl_scope_end(void)
{
    if (scope_count == 0) {
        fprintf(stderr, "awl: awl_scope_end without awl_scope_begin\n");
        return;
    }
    scope *s = &scopes[scope_count - 1];
    /* Newest first: a view dies before the tensor it views. Releasing may run
     * graph destructors but never opens or closes scopes. */
    for (int i = s->count - 1; i >= 0; i--) awl_release(s->owned[i]);
    s->count = 0;
    scope_count--;
    if (scope_count == 0) { /* outside every scope: give the memory back */
        for (int i = 0; i < scope_capacity; i++) free(scopes[i].owned);
        free(scopes);
        scopes = NULL;
        scope_capacity = 0;
    }
}

/* Removes one occurrence of t from the current scope; false if absent. */
static bool scope_remove(awl_tensor *t)
{
    if (scope_count == 0) return false;
    scope *cur = &scopes[scope_count - 1];
    for (int i = cur->count - 1; i >= 0; i--) {
        if (cur->owned[i] == t) {
            cur->owned[i] = cur->owned[--cur->count];
            return true;
        }
    }
    return false;
}

/* Gives the current scope (if any) ownership of t's first reference. */
static awl_tensor *scope_adopt(awl_tensor *t)
{
    if (scope_count > 0) scope_push(&scopes[scope_count - 1], t);
    return t;
}

awl_tensor *awl_keep(awl_tensor *t)
{
    if (!t || scope_count == 0) return t;
    if (!scope_remove(t)) t->refcount++; /* not ours to move: hand out a new reference */
    if (scope_count > 1) scope_push(&scopes[scope_count - 2], t);
    return t;
}

void awl_discard(awl_tensor *t)
{
    if (!t) return;
    scope_remove(t);
    awl_release(t);
}

awl_tensor *awl_take(awl_tensor *t)
{
    if (t) scope_remove(t);
    return t;
}

awl_tensor *awl_adopt(awl_tensor *t) { return t ? scope_adopt(t) : NULL; }

awl_tensor *awl_retain(awl_tensor *t)
{
    if (t) t->refcount++;
    return t;
}

void awl_release(awl_tensor *t)
{
    if (!t || --t->refcount > 0) return;
    storage_release(t->storage);
    awl_release(t->grad);
    if (t->grad_fn && --t->grad_fn->refcount == 0) t->grad_fn->destroy(t->grad_fn);
    free(t->hooks);
    free(t);
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
    return scope_adopt(t);
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
    awl_storage *s = storage_new(op, device, (size_t)numel * awl_dtype_size(dtype));
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

bool awl_same_device(const awl_tensor *a, const awl_tensor *b)
{
    return a->storage->device.backend == b->storage->device.backend &&
           a->storage->device.index == b->storage->device.index;
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

/* ---- creation --------------------------------------------------------------------- */

static awl_tensor *create(const char *op, int ndim, const int64_t *shape, awl_dtype dtype,
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
    awl_tensor *t = create(op, ndim, shape, dtype, device);
    if (t && awl_tensor_fill_(t, value) < 0) {
        awl_discard(t);
        return NULL;
    }
    return t;
}

awl_tensor *awl_empty(int ndim, const int64_t *shape, awl_dtype dtype, const char *device)
{
    return create("awl_empty", ndim, shape, dtype, device);
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

static int fill_random(const char *op, awl_tensor *dst, awl_random_kind kind, double a, double b);

/* A new tensor drawn from the global generator: U[0, 1) or N(0, 1) (both
 * kinds take a = 0, b = 1 for these). */
static awl_tensor *create_random(const char *op, awl_random_kind kind, int ndim,
                                 const int64_t *shape, awl_dtype dtype, const char *device)
{
    awl_tensor *t = create(op, ndim, shape, dtype, device);
    if (t && fill_random(op, t, kind, 0.0, 1.0) < 0) {
        awl_discard(t);
        return NULL;
    }
    return t;
}

awl_tensor *awl_rand(int ndim, const int64_t *shape, awl_dtype dtype, const char *device)
{
    return create_random("awl_rand", AWL_RANDOM_UNIFORM, ndim, shape, dtype, device);
}

awl_tensor *awl_randn(int ndim, const int64_t *shape, awl_dtype dtype, const char *device)
{
    return create_random("awl_randn", AWL_RANDOM_NORMAL, ndim, shape, dtype, device);
}

awl_tensor *awl_from_data(const void *data, int ndim, const int64_t *shape, awl_dtype dtype,
                          const char *device)
{
    awl_tensor *t = create("awl_from_data", ndim, shape, dtype, device);
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
    switch (t->dtype) {
    case AWL_F32: {
        float v;
        memcpy(&v, raw, 4);
        return v;
    }
    case AWL_F64: {
        double v;
        memcpy(&v, raw, 8);
        return v;
    }
    case AWL_I32: {
        int32_t v;
        memcpy(&v, raw, 4);
        return v;
    }
    case AWL_BF16: {
        awl_bf16 v;
        memcpy(&v, raw, 2);
        return awl_bf16_to_float(v);
    }
    default: return NAN;
    }
}

/* ---- random numbers ----------------------------------------------------------------- */

static uint64_t rng_seed = 0x5eed;
static uint64_t rng_offset;

void awl_manual_seed(uint64_t seed)
{
    rng_seed = seed;
    rng_offset = 0;
}

void awl_rng_get_state(uint64_t *seed, uint64_t *offset)
{
    if (seed) *seed = rng_seed;
    if (offset) *offset = rng_offset;
}

void awl_rng_set_state(uint64_t seed, uint64_t offset)
{
    rng_seed = seed;
    rng_offset = offset;
}

uint64_t awl_rng_reserve(uint64_t n)
{
    uint64_t start = rng_offset;
    rng_offset += awl_philox_blocks(n);
    return start;
}

static int fill_random(const char *op, awl_tensor *dst, awl_random_kind kind, double a, double b)
{
    if (!dst) return AWL_ERR_INVALID;
    if (!awl_dtype_is_float(dst->dtype))
        return awl_error(AWL_ERR_INVALID, "%s: random fill needs a float tensor, not %s", op,
                         awl_dtype_name(dst->dtype));
    uint64_t offset = awl_rng_reserve((uint64_t)awl_numel(dst));
    awl_view v = awl_tensor_view(dst);
    return awl_backend_status(op,
                              awl_tensor_backend(dst)->random(&v, kind, rng_seed, offset, a, b));
}

int awl_tensor_uniform_(awl_tensor *dst, double low, double high)
{
    return fill_random("awl_tensor_uniform_", dst, AWL_RANDOM_UNIFORM, low, high);
}

int awl_tensor_normal_(awl_tensor *dst, double mean, double std)
{
    return fill_random("awl_tensor_normal_", dst, AWL_RANDOM_NORMAL, mean, std);
}
