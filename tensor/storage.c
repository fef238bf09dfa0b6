/*
 * tensor/storage.c - reference-counted device memory, and the memory
 * statistics kept where every storage is allocated and freed.
 *
 * A storage owns one backend allocation and counts the tensors (views)
 * that use it; the last one to go frees it. Because every storage passes
 * through here, every backend reports the same figures (bytes in use, peak,
 * allocation count, live storages) without keeping them itself; "reserved"
 * comes from the backend, which alone knows what its cache holds.
 *
 * The statistics are shared by all threads, under one mutex: allocating a
 * storage already costs a backend call, so the lock is not what a step
 * pays for.
 */
#include "tensor/tensor_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TRACKED_DEVICES 16

typedef struct device_stats {
    awl_device device;
    awl_memory_stats stats;
} device_stats;

static struct {
    pthread_mutex_t mu;
    device_stats tracked[MAX_TRACKED_DEVICES];
    int n_tracked;
} stats = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* The statistics of a device (the caller holds stats.mu). Devices beyond
 * MAX_TRACKED_DEVICES share the last slot. */
static awl_memory_stats *stats_for(awl_device device)
{
    for (int i = 0; i < stats.n_tracked; i++)
        if (awl_device_equal(stats.tracked[i].device, device)) return &stats.tracked[i].stats;
    if (stats.n_tracked == MAX_TRACKED_DEVICES)
        return &stats.tracked[MAX_TRACKED_DEVICES - 1].stats;
    stats.tracked[stats.n_tracked].device = device;
    return &stats.tracked[stats.n_tracked++].stats;
}

int awl_memory_get_stats(const char *device, awl_memory_stats *out)
{
    awl_device d;
    if (awl_device_parse(device, &d) < 0) return AWL_ERR_INVALID;
    pthread_mutex_lock(&stats.mu);
    *out = *stats_for(d);
    pthread_mutex_unlock(&stats.mu);
    out->reserved =
        d.backend->memory_reserved ? (int64_t)d.backend->memory_reserved(d.index) : out->in_use;
    return AWL_OK;
}

int awl_memory_reset_peak(const char *device)
{
    awl_device d;
    if (awl_device_parse(device, &d) < 0) return AWL_ERR_INVALID;
    pthread_mutex_lock(&stats.mu);
    awl_memory_stats *s = stats_for(d);
    s->peak = s->in_use;
    pthread_mutex_unlock(&stats.mu);
    return AWL_OK;
}

awl_storage *awl_storage_new(const char *op, awl_device device, size_t nbytes)
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
    pthread_mutex_lock(&stats.mu);
    awl_memory_stats *st = stats_for(device);
    st->in_use += (int64_t)nbytes;
    st->allocations++;
    st->live++;
    if (st->in_use > st->peak) st->peak = st->in_use;
    pthread_mutex_unlock(&stats.mu);
    return s;
}

void awl_storage_release(awl_storage *s)
{
    if (--s->refcount > 0) return;
    pthread_mutex_lock(&stats.mu);
    awl_memory_stats *st = stats_for(s->device);
    st->in_use -= (int64_t)s->nbytes;
    st->live--;
    pthread_mutex_unlock(&stats.mu);
    s->device.backend->free(s->device.index, s->data, s->nbytes);
    free(s);
}
