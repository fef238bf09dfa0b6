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
 * The ledger splits the bytes in use by role (tensor.h, awl_memory_role):
 * each storage is counted under exactly one role at a time, so the roles
 * always add up to in_use, and moving a storage to another role moves its
 * bytes. Besides each role's bytes now, the ledger keeps each role's
 * maximum and the split at the moment of the peak, all since the last
 * awl_memory_reset_peak: a training step's gradients are complete only
 * after backward and gone after zero_grad (set to none), its activations
 * complete only at the end of forward, so "the most each role held during
 * the step" is the figure that matches 4 bytes a gradient, and "at the
 * peak" is what the peak is made of.
 *
 * The statistics are shared by all threads, under one mutex: allocating a
 * storage already costs a backend call, so the lock is not what a step
 * pays for. A storage's keeper count (graph nodes saving it) changes
 * without the lock, as its reference count does: only when the count
 * leaves or reaches 0 do its bytes move between roles, under the lock. So
 * saving a tensor costs nothing but an increment, unless it is the first
 * node to keep it. While the profiler records, every change is also a
 * sample of its memory track (tensor/profiler.c).
 */
#include "tensor/tensor_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TRACKED_DEVICES 16

typedef struct device_stats {
    awl_device device;
    awl_memory_stats stats;
    awl_memory_ledger ledger; /* cached_free is filled when read */
    bool at_peak_now;         /* nothing allocated or freed since the peak */
} device_stats;

static struct {
    pthread_mutex_t mu;
    device_stats tracked[MAX_TRACKED_DEVICES];
    int n_tracked;
} stats = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* The statistics of a device (the caller holds stats.mu). Devices beyond
 * MAX_TRACKED_DEVICES share the last slot. */
static device_stats *stats_for(awl_device device)
{
    for (int i = 0; i < stats.n_tracked; i++)
        if (awl_device_equal(stats.tracked[i].device, device)) return &stats.tracked[i];
    if (stats.n_tracked == MAX_TRACKED_DEVICES) return &stats.tracked[MAX_TRACKED_DEVICES - 1];
    stats.tracked[stats.n_tracked].device = device;
    return &stats.tracked[stats.n_tracked++];
}

/* The role a storage's bytes should count under. */
static awl_memory_role counted_role(const awl_storage *s)
{
    if (s->role == AWL_MEMORY_TEMPORARY && s->saved > 0) return AWL_MEMORY_ACTIVATION;
    return (awl_memory_role)s->role;
}

/* bytes more (or fewer) under role (the caller holds stats.mu). */
static void account(device_stats *d, awl_memory_role role, int64_t bytes)
{
    awl_memory_ledger *l = &d->ledger;
    l->now[role] += bytes;
    if (l->now[role] > l->max[role]) l->max[role] = l->now[role];
}

/* The caller holds stats.mu and has changed d's figures: a sample for the
 * profiler's memory track, taken after the lock is dropped. */
typedef struct memory_sample {
    bool take;
    awl_device device;
    int64_t by_role[AWL_MEMORY_ROLE_COUNT];
} memory_sample;

static void sample_of(const device_stats *d, memory_sample *m)
{
    m->take = awl_profiler_recording();
    if (!m->take) return;
    m->device = d->device;
    memcpy(m->by_role, d->ledger.now, sizeof m->by_role);
}

static void record_sample(const memory_sample *m)
{
    if (m->take) awl_profiler_memory_sample(m->device, m->by_role);
}

/* Moves a storage's bytes from the role they are counted under to the one
 * its tag and keeper count give now. */
static void move_storage(awl_storage *s)
{
    pthread_mutex_lock(&stats.mu);
    device_stats *d = stats_for(s->device);
    account(d, (awl_memory_role)s->counted, -(int64_t)s->nbytes);
    s->counted = counted_role(s);
    account(d, (awl_memory_role)s->counted, (int64_t)s->nbytes);
    /* a storage tagged right after the allocation that made the peak
     * (a gradient, say) is part of the peak under its new role */
    if (d->at_peak_now) memcpy(d->ledger.at_peak, d->ledger.now, sizeof d->ledger.at_peak);
    memory_sample m;
    sample_of(d, &m);
    pthread_mutex_unlock(&stats.mu);
    record_sample(&m);
}

const char *awl_memory_role_name(awl_memory_role role)
{
    static const char *const names[AWL_MEMORY_ROLE_COUNT] = {
        "temporaries", "parameters", "gradients", "optimizer state", "saved activations"};
    return role >= 0 && role < AWL_MEMORY_ROLE_COUNT ? names[role] : "?";
}

int awl_tensor_set_memory_role(awl_tensor *t, awl_memory_role role)
{
    if (!t) return AWL_OK;
    if (role < 0 || role >= AWL_MEMORY_ROLE_COUNT || role == AWL_MEMORY_ACTIVATION)
        return awl_error(AWL_ERR_INVALID, "awl_tensor_set_memory_role: invalid role %d", (int)role);
    if (t->storage->role != (int)role) {
        t->storage->role = role;
        move_storage(t->storage);
    }
    return AWL_OK;
}

awl_memory_role awl_tensor_memory_role(const awl_tensor *t)
{
    return t ? counted_role(t->storage) : AWL_MEMORY_TEMPORARY;
}

uint64_t awl_tensor_version(const awl_tensor *t) { return t ? t->storage->version : 0; }

/* Called for every tensor a graph node saves and drops, so it takes the
 * lock only when the keeper count leaves or reaches 0 (a storage is used
 * by one thread at a time, as its reference count is). */
void awl_tensor_saved(awl_tensor *t, int delta)
{
    if (!t) return;
    awl_storage *s = t->storage;
    bool was_kept = s->saved > 0;
    s->saved += delta;
    if ((s->saved > 0) != was_kept && s->role == AWL_MEMORY_TEMPORARY) move_storage(s);
}

int awl_memory_get_stats(const char *device, awl_memory_stats *out)
{
    awl_device d;
    if (awl_device_parse(device, &d) < 0) return AWL_ERR_INVALID;
    pthread_mutex_lock(&stats.mu);
    *out = stats_for(d)->stats;
    pthread_mutex_unlock(&stats.mu);
    out->reserved =
        d.backend->memory_reserved ? (int64_t)d.backend->memory_reserved(d.index) : out->in_use;
    return AWL_OK;
}

int awl_memory_get_ledger(const char *device, awl_memory_ledger *out)
{
    awl_memory_stats st;
    if (awl_memory_get_stats(device, &st) < 0) return AWL_ERR_INVALID;
    awl_device d;
    awl_device_parse(device, &d);
    pthread_mutex_lock(&stats.mu);
    device_stats *ds = stats_for(d);
    *out = ds->ledger;
    out->peak = ds->stats.peak;
    int64_t in_use = ds->stats.in_use;
    pthread_mutex_unlock(&stats.mu);
    out->cached_free = st.reserved > in_use ? st.reserved - in_use : 0;
    return AWL_OK;
}

int awl_memory_reset_peak(const char *device)
{
    awl_device d;
    if (awl_device_parse(device, &d) < 0) return AWL_ERR_INVALID;
    pthread_mutex_lock(&stats.mu);
    device_stats *s = stats_for(d);
    s->stats.peak = s->stats.in_use;
    memcpy(s->ledger.max, s->ledger.now, sizeof s->ledger.max);
    memcpy(s->ledger.at_peak, s->ledger.now, sizeof s->ledger.at_peak);
    s->at_peak_now = true;
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
    s->role = s->counted = AWL_MEMORY_TEMPORARY;
    s->saved = 0;
    s->version = 0;
    pthread_mutex_lock(&stats.mu);
    device_stats *d = stats_for(device);
    awl_memory_stats *st = &d->stats;
    st->in_use += (int64_t)nbytes;
    st->allocations++;
    st->live++;
    account(d, AWL_MEMORY_TEMPORARY, (int64_t)nbytes);
    d->at_peak_now = st->in_use > st->peak;
    if (d->at_peak_now) {
        st->peak = st->in_use;
        memcpy(d->ledger.at_peak, d->ledger.now, sizeof d->ledger.at_peak);
    }
    memory_sample m;
    sample_of(d, &m);
    pthread_mutex_unlock(&stats.mu);
    record_sample(&m);
    return s;
}

void awl_storage_release(awl_storage *s)
{
    if (--s->refcount > 0) return;
    pthread_mutex_lock(&stats.mu);
    device_stats *d = stats_for(s->device);
    d->stats.in_use -= (int64_t)s->nbytes;
    d->stats.live--;
    d->at_peak_now = false;
    account(d, (awl_memory_role)s->counted, -(int64_t)s->nbytes);
    memory_sample m;
    sample_of(d, &m);
    pthread_mutex_unlock(&stats.mu);
    record_sample(&m);
    s->device.backend->free(s->device.index, s->data, s->nbytes);
    free(s);
}
