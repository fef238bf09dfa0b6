/*
 * tensor/device.c - devices: names, lookup in the backend registry, and the
 * process-wide settings that apply to every backend (threads, float32
 * matmul precision).
 *
 * A device is a backend and an index ("cuda:1"). The tensor layer never
 * names a backend: it finds them in the registry (backends/registry.c) and
 * applies settings to every registered backend that has the setting, so a
 * backend added by a student or a program is treated like the built-in
 * ones.
 */
#include "tensor/tensor_internal.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Writes the registered backends' names, comma-separated, into buf. */
static const char *backend_names(char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < awl_backend_count() && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? ", " : "",
                                 awl_backend_at(i)->name);
    return buf;
}

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
        char names[128];
        snprintf(why, size, "awl: unknown device '%s' (this build has: %s)", name,
                 backend_names(names, sizeof names));
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

bool awl_device_supports(const char *device, awl_kernel kernel, int op, awl_dtype dtype)
{
    awl_device d;
    char why[256];
    return device_lookup(device, &d, why, sizeof why) == AWL_OK &&
           awl_backend_supports(d.backend, kernel, op, dtype);
}

bool awl_device_equal(awl_device a, awl_device b)
{
    return a.backend == b.backend && a.index == b.index;
}

const char *awl_device_name(awl_device device, char *buf, size_t size)
{
    /* a host-memory backend has one device, named without an index ("cpu") */
    if (device.backend->host_memory)
        snprintf(buf, size, "%s", device.backend->name);
    else
        snprintf(buf, size, "%s:%d", device.backend->name, device.index);
    return buf;
}

const char *awl_tensor_device_name(const awl_tensor *t, char *buf, size_t size)
{
    return awl_device_name(t->storage->device, buf, size);
}

/* ---- process-wide settings ------------------------------------------------------ */

static atomic_int num_threads;
static atomic_bool fused_disabled;
static atomic_bool matmul_fast; /* awl_set_float32_matmul_precision: high or medium */

void awl_set_num_threads(int n)
{
    if (n < 1) n = 1;
    atomic_store(&num_threads, n);
    for (int i = 0; i < awl_backend_count(); i++)
        if (awl_backend_at(i)->set_num_threads) awl_backend_at(i)->set_num_threads(n);
}

int awl_get_num_threads(void)
{
    int n = atomic_load(&num_threads);
    /* never set: what the first backend that has a count uses */
    for (int i = 0; i < awl_backend_count() && !n; i++)
        if (awl_backend_at(i)->get_num_threads) n = awl_backend_at(i)->get_num_threads();
    return n > 0 ? n : 1;
}

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
    atomic_store(&matmul_fast, fast);
    for (int i = 0; i < awl_backend_count(); i++)
        if (awl_backend_at(i)->set_matmul_fast_fp32) awl_backend_at(i)->set_matmul_fast_fp32(fast);
    return AWL_OK;
}

bool awl_float32_matmul_fast(void) { return atomic_load(&matmul_fast); }

bool awl_set_fused_kernels(bool on) { return !atomic_exchange(&fused_disabled, !on); }

bool awl_fused_kernels_enabled(void)
{
    return !atomic_load_explicit(&fused_disabled, memory_order_relaxed);
}

int awl_device_set_option(const char *device, const char *name, const char *value)
{
    awl_device d;
    if (awl_device_parse(device, &d) < 0) return AWL_ERR_INVALID;
    if (!d.backend->set_option)
        return awl_error(AWL_ERR_INVALID, "awl_device_set_option: the %s backend has no settings",
                         d.backend->name);
    return d.backend->set_option(name, value);
}

/* ---- which required primitives a device has ---------------------------------------- */

int awl_device_missing_primitives(const char *device, char *report, size_t size)
{
    awl_device d;
    if (awl_device_parse(device, &d) < 0) return AWL_ERR_INVALID;
    const awl_backend *b = d.backend;
    if (size) report[0] = '\0';
    /* four buffers of 4 zeroed float32s (or int32 indices, all 0: valid) */
    void *buf[4] = {NULL, NULL, NULL, NULL};
    const float zeros[4] = {0, 0, 0, 0};
    for (int i = 0; i < 4; i++) {
        buf[i] = b->alloc(d.index, sizeof zeros);
        if (!buf[i] || b->copy_from_host(d.index, buf[i], zeros, sizeof zeros) < 0) {
            for (int k = 0; k <= i; k++) b->free(d.index, buf[k], sizeof zeros);
            return AWL_ERR_DEVICE;
        }
    }
    awl_view out = awl_view_1d(buf[0], AWL_F32, 2), a = awl_view_1d(buf[1], AWL_F32, 2),
             c = awl_view_1d(buf[2], AWL_F32, 2), idx = awl_view_1d(buf[3], AWL_I32, 1);
    awl_view one = awl_view_1d(buf[0], AWL_F32, 1), src1 = awl_view_1d(buf[2], AWL_F32, 1);
    awl_view mo = out, ma = a, mb = c; /* 1 x 1 products */
    mo.ndim = ma.ndim = mb.ndim = 2;
    mo.shape[0] = ma.shape[0] = mb.shape[0] = mo.shape[1] = ma.shape[1] = mb.shape[1] = 1;
    mo.strides[0] = ma.strides[0] = mb.strides[0] = 1;
    int status[AWL_KERNEL_COUNT];
    for (int k = 0; k < AWL_KERNEL_COUNT; k++) status[k] = AWL_OK;
    status[AWL_KERNEL_FILL] = b->fill ? b->fill(&out, 0.0) : AWL_ERR_NOT_IMPLEMENTED;
    status[AWL_KERNEL_COPY] = b->copy ? b->copy(&out, &a) : AWL_ERR_NOT_IMPLEMENTED;
    status[AWL_KERNEL_UNARY] =
        b->unary ? b->unary(AWL_UNARY_NEG, &out, &a, 0.0) : AWL_ERR_NOT_IMPLEMENTED;
    status[AWL_KERNEL_BINARY] =
        b->binary ? b->binary(AWL_BINARY_ADD, &out, &a, &c) : AWL_ERR_NOT_IMPLEMENTED;
    status[AWL_KERNEL_WHERE] = b->where ? b->where(&out, &a, &a, &c) : AWL_ERR_NOT_IMPLEMENTED;
    status[AWL_KERNEL_REDUCE] =
        b->reduce ? b->reduce(AWL_REDUCE_SUM, &mo, &ma) : AWL_ERR_NOT_IMPLEMENTED;
    status[AWL_KERNEL_MATMUL] =
        b->matmul ? b->matmul(&mo, &ma, &mb, false) : AWL_ERR_NOT_IMPLEMENTED;
    status[AWL_KERNEL_INDEX_SELECT] =
        b->index_select ? b->index_select(&one, &a, &idx) : AWL_ERR_NOT_IMPLEMENTED;
    status[AWL_KERNEL_INDEX_ADD] =
        b->index_add ? b->index_add(&a, &idx, &src1) : AWL_ERR_NOT_IMPLEMENTED;
    status[AWL_KERNEL_GATHER] = b->gather ? b->gather(&one, &a, 0, &idx) : AWL_ERR_NOT_IMPLEMENTED;
    status[AWL_KERNEL_SCATTER_ADD] =
        b->scatter_add ? b->scatter_add(&a, 0, &idx, &src1) : AWL_ERR_NOT_IMPLEMENTED;
    status[AWL_KERNEL_RANDOM] =
        b->random ? b->random(&out, AWL_RANDOM_UNIFORM, 1, 0, 0.0, 1.0) : AWL_ERR_NOT_IMPLEMENTED;
    b->synchronize(d.index);
    for (int i = 0; i < 4; i++) b->free(d.index, buf[i], sizeof zeros);
    int missing = 0;
    size_t used = 0;
    for (int k = 0; k < AWL_KERNEL_COUNT; k++) {
        const awl_kernel_info *info = awl_kernel_get_info((awl_kernel)k);
        if (!info->milestone || status[k] != AWL_ERR_NOT_IMPLEMENTED) continue;
        missing++;
        if (used < size)
            used +=
                (size_t)snprintf(report + used, size - used, "  %s (milestone %d: %s)\n",
                                 info->name, info->milestone, awl_milestone_title(info->milestone));
    }
    awl_clear_error();
    return missing;
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
