/*
 * tensor/profiler.c - recording: the switch, the events, device time.
 *
 * The recording is three growing arrays (kernel calls, ranges, memory
 * samples) behind one mutex, filled between awl_profiler_start and
 * awl_profiler_stop. Off, nothing here runs but the check of the switch
 * (profiler_internal.h's AWL_TRACE_BEGIN, and the first line of every
 * range call).
 *
 * Each thread keeps, in thread-local storage, the ranges it has open: the
 * innermost phase and op ranges are what a kernel call is filed under. A
 * thread's track number (tid) is given on its first event and kept across
 * recordings, as is the name awl_profiler_name_thread gave it.
 *
 * Device time. A backend with markers (CUDA) gets two per kernel call,
 * queued before and after it; the first call on a device in a recording
 * waits for the device and queues a reference marker, noting the host
 * clock. At stop, each marker's time is read as seconds after the
 * reference, which puts the kernels on the host's time line (within the
 * few microseconds a marker takes to record) with the device's own
 * durations.
 *
 * Times are seconds since awl_profiler_start on CLOCK_MONOTONIC.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tensor/tensor_internal.h"

atomic_bool awl_profiler_on;

#define MAX_EVENTS (1 << 22) /* of each kind; more are counted as dropped */
#define MAX_DEPTH 64         /* open ranges per thread that are recorded  */
#define MAX_CLOCKS 16        /* devices with markers in one recording     */
#define MAX_TOOLS 4          /* backends with range_push (NVTX)           */

typedef struct device_clock {
    awl_device device;
    void *reference;
    double host; /* when the reference was queued, the device idle */
} device_clock;

/* A range this thread has open: its index in the ranges array (-1 when
 * not recorded: too deep). */
typedef struct open_range {
    int index;
    awl_profile_kind kind;
    const char *name;
} open_range;

typedef struct thread_state {
    int tid; /* -1 until the thread's first event */
    uint64_t generation;
    int depth;
    open_range stack[MAX_DEPTH];
} thread_state;

static _Thread_local thread_state me = {.tid = -1};

static struct {
    pthread_mutex_t mu;
    bool recording; /* under mu: appends after stop are refused */
    uint64_t generation;
    double t_start;
    awl_recording rec; /* the arrays, and what awl_profiler_recording_data shows */
    int cap_kernels, cap_ranges, cap_memory;
    char **names; /* interned range names */
    int n_names, cap_names;
    char **thread_names; /* by tid, kept across recordings */
    int n_threads;
    device_clock clocks[MAX_CLOCKS];
    int n_clocks;
    const awl_backend *tools[MAX_TOOLS];
    int n_tools;
} prof = {.mu = PTHREAD_MUTEX_INITIALIZER};

static double clock_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static char *copy_string(const char *s)
{
    size_t n = strlen(s) + 1;
    return memcpy(awl_xmalloc(n), s, n);
}

static double since_start(void) { return clock_now() - prof.t_start; }

bool awl_profiler_recording(void)
{
    return atomic_load_explicit(&awl_profiler_on, memory_order_relaxed);
}

/* Room for one more element in a growing array (the caller holds mu);
 * false when the recording is full. */
static bool grow(void **items, int count, int *cap, size_t size)
{
    if (count == MAX_EVENTS) {
        prof.rec.dropped++;
        return false;
    }
    if (count == *cap) {
        *cap = *cap ? 2 * *cap : 1024;
        *items = awl_xrealloc(*items, (size_t)*cap * size);
    }
    return true;
}

/* The calling thread's track, given on its first event (the caller holds
 * mu), and its stack emptied when it was left by an earlier recording. */
static int my_tid(void)
{
    if (me.tid < 0) {
        me.tid = prof.n_threads++;
        prof.thread_names =
            awl_xrealloc(prof.thread_names, (size_t)prof.n_threads * sizeof *prof.thread_names);
        prof.thread_names[me.tid] = NULL;
    }
    return me.tid;
}

static void sync_thread(void)
{
    if (me.generation != prof.generation) {
        me.generation = prof.generation;
        me.depth = 0;
    }
}

/* A copy of name that lives as long as the recording (the caller holds mu). */
static const char *intern(const char *name)
{
    for (int i = 0; i < prof.n_names; i++)
        if (strcmp(prof.names[i], name) == 0) return prof.names[i];
    if (prof.n_names == prof.cap_names) {
        prof.cap_names = prof.cap_names ? 2 * prof.cap_names : 64;
        prof.names = awl_xrealloc(prof.names, (size_t)prof.cap_names * sizeof *prof.names);
    }
    return prof.names[prof.n_names++] = copy_string(name);
}

static void free_recording(void)
{
    for (int i = 0; i < prof.rec.n_kernels; i++) { /* markers a failed stop left */
        awl_kernel_event *e = &prof.rec.kernels[i];
        if (e->m0) e->device.backend->marker_free(e->device.index, e->m0);
        if (e->m1) e->device.backend->marker_free(e->device.index, e->m1);
    }
    free(prof.rec.kernels);
    free(prof.rec.ranges);
    free(prof.rec.memory);
    for (int i = 0; i < prof.n_names; i++) free(prof.names[i]);
    free(prof.names);
    for (int i = 0; i < prof.n_clocks; i++) {
        device_clock *c = &prof.clocks[i];
        c->device.backend->marker_free(c->device.index, c->reference);
    }
    prof.n_clocks = 0;
    prof.names = NULL;
    prof.n_names = prof.cap_names = 0;
    prof.rec = (awl_recording){0};
    prof.cap_kernels = prof.cap_ranges = prof.cap_memory = 0;
}

/* ---- start, stop, clear ---------------------------------------------------------- */

int awl_profiler_start(void)
{
    pthread_mutex_lock(&prof.mu);
    if (prof.recording) {
        pthread_mutex_unlock(&prof.mu);
        return awl_error(AWL_ERR_INVALID, "awl_profiler_start: the profiler records already");
    }
    free_recording();
    prof.generation++;
    prof.n_tools = 0;
    for (int i = 0; i < awl_backend_count() && prof.n_tools < MAX_TOOLS; i++)
        if (awl_backend_at(i)->range_push) prof.tools[prof.n_tools++] = awl_backend_at(i);
    prof.t_start = clock_now();
    prof.recording = true;
    atomic_store(&awl_profiler_on, true);
    pthread_mutex_unlock(&prof.mu);
    return AWL_OK;
}

static const device_clock *clock_of(awl_device device)
{
    for (int i = 0; i < prof.n_clocks; i++)
        if (awl_device_equal(prof.clocks[i].device, device)) return &prof.clocks[i];
    return NULL;
}

/* Seconds on the host's time line of a marker on a device, or the host
 * time `fallback` when it cannot be read. */
static double marker_time(const awl_kernel_event *e, void *marker, double fallback)
{
    const device_clock *c = clock_of(e->device);
    double s;
    if (!c || e->device.backend->marker_seconds(e->device.index, c->reference, marker, &s) < 0)
        return fallback;
    return c->host + s;
}

void awl_profiler_stop(void)
{
    pthread_mutex_lock(&prof.mu);
    if (!prof.recording) {
        pthread_mutex_unlock(&prof.mu);
        return;
    }
    atomic_store(&awl_profiler_on, false);
    prof.recording = false;
    prof.rec.span = since_start();
    for (int i = 0; i < prof.rec.n_ranges; i++) {
        awl_range_event *r = &prof.rec.ranges[i];
        if (r->t1 < 0) {
            r->t1 = prof.rec.span;
            r->cut = true;
        }
    }
    for (int i = 0; i < prof.rec.n_kernels; i++) {
        awl_kernel_event *e = &prof.rec.kernels[i];
        e->d0 = e->t0;
        e->d1 = e->t1;
        if (!e->m0 || !e->m1) continue;
        e->d0 = marker_time(e, e->m0, e->t0);
        e->d1 = marker_time(e, e->m1, e->t1);
        if (e->d1 < e->d0) e->d1 = e->d0;
        e->device.backend->marker_free(e->device.index, e->m0);
        e->device.backend->marker_free(e->device.index, e->m1);
        e->m0 = e->m1 = NULL;
    }
    prof.rec.thread_names = (const char *const *)prof.thread_names;
    prof.rec.n_threads = prof.n_threads;
    pthread_mutex_unlock(&prof.mu);
}

void awl_profiler_clear(void)
{
    pthread_mutex_lock(&prof.mu);
    if (!prof.recording) free_recording();
    pthread_mutex_unlock(&prof.mu);
}

const awl_recording *awl_profiler_recording_data(void)
{
    pthread_mutex_lock(&prof.mu);
    const awl_recording *r = prof.recording ? NULL : &prof.rec;
    pthread_mutex_unlock(&prof.mu);
    return r;
}

void awl_profiler_name_thread(const char *name)
{
    pthread_mutex_lock(&prof.mu);
    int tid = my_tid();
    free(prof.thread_names[tid]);
    prof.thread_names[tid] = name ? copy_string(name) : NULL;
    pthread_mutex_unlock(&prof.mu);
}

/* ---- ranges -------------------------------------------------------------------------- */

/* Appends a range event (the caller holds mu and has checked recording);
 * its index, or -1 when the recording is full. */
static int add_range(awl_profile_kind kind, char ph, const char *name, uint64_t id)
{
    if (!grow((void **)&prof.rec.ranges, prof.rec.n_ranges, &prof.cap_ranges,
              sizeof *prof.rec.ranges))
        return -1;
    double t = since_start();
    prof.rec.ranges[prof.rec.n_ranges] = (awl_range_event){.name = intern(name),
                                                           .kind = kind,
                                                           .ph = ph,
                                                           .tid = my_tid(),
                                                           .t0 = t,
                                                           .t1 = ph == 'X' || ph == 'b' ? -1 : t,
                                                           .id = id};
    return prof.rec.n_ranges++;
}

void awl_profiler_begin(awl_profile_kind kind, const char *name)
{
    if (!awl_profiler_recording()) return;
    pthread_mutex_lock(&prof.mu);
    if (prof.recording) {
        sync_thread();
        int index = me.depth < MAX_DEPTH ? add_range(kind, 'X', name, 0) : -1;
        if (me.depth < MAX_DEPTH) {
            bool nested = false;
            for (int i = 0; i < me.depth && kind == AWL_PROFILE_PHASE; i++)
                nested |= me.stack[i].kind == kind && strcmp(me.stack[i].name, name) == 0;
            if (index >= 0) prof.rec.ranges[index].nested = nested;
            me.stack[me.depth] =
                (open_range){index, kind, index >= 0 ? prof.rec.ranges[index].name : ""};
        }
        me.depth++;
        for (int i = 0; i < prof.n_tools; i++) prof.tools[i]->range_push(name);
    }
    pthread_mutex_unlock(&prof.mu);
}

void awl_profiler_end(void)
{
    if (!awl_profiler_recording()) return;
    pthread_mutex_lock(&prof.mu);
    if (prof.recording) {
        sync_thread();
        if (me.depth > 0) { /* an end for a range begun before start is ignored */
            me.depth--;
            if (me.depth < MAX_DEPTH && me.stack[me.depth].index >= 0)
                prof.rec.ranges[me.stack[me.depth].index].t1 = since_start();
            for (int i = 0; i < prof.n_tools; i++) prof.tools[i]->range_pop();
        }
    }
    pthread_mutex_unlock(&prof.mu);
}

void awl_profiler_instant(awl_profile_kind kind, const char *name)
{
    if (!awl_profiler_recording()) return;
    pthread_mutex_lock(&prof.mu);
    if (prof.recording) add_range(kind, 'i', name, 0);
    pthread_mutex_unlock(&prof.mu);
}

void awl_profiler_async_begin(const char *name, uint64_t id)
{
    if (!awl_profiler_recording()) return;
    pthread_mutex_lock(&prof.mu);
    if (prof.recording) add_range(AWL_PROFILE_COMM, 'b', name, id);
    pthread_mutex_unlock(&prof.mu);
}

void awl_profiler_async_end(uint64_t id)
{
    if (!awl_profiler_recording()) return;
    pthread_mutex_lock(&prof.mu);
    for (int i = prof.rec.n_ranges - 1; prof.recording && i >= 0; i--) {
        awl_range_event *r = &prof.rec.ranges[i];
        if (r->ph == 'b' && r->id == id && r->t1 < 0) {
            r->t1 = since_start();
            break;
        }
    }
    pthread_mutex_unlock(&prof.mu);
}

/* ---- kernels ----------------------------------------------------------------------- */

/* Elements of a view that occupy memory: a stride-0 (broadcast) axis once. */
static double footprint(const awl_view *v)
{
    double n = 1;
    for (int d = 0; d < v->ndim; d++)
        if (v->strides[d] != 0) n *= (double)v->shape[d];
    return n;
}

static double count_flops(awl_trace_work work, int n_out, int n, const awl_view *const *views)
{
    switch (work.flops) {
    case AWL_FLOPS_NONE: return 0;
    case AWL_FLOPS_OUTPUT: return work.per * (double)awl_view_numel(views[0]);
    case AWL_FLOPS_INPUT: return n > n_out ? work.per * (double)awl_view_numel(views[n_out]) : 0;
    case AWL_FLOPS_MATMUL: {
        const awl_view *a = views[n_out];
        double k = a->ndim ? (double)a->shape[a->ndim - 1] : 1;
        double out = (double)awl_view_numel(views[0]);
        return 2.0 * out * k + work.per * out;
    }
    case AWL_FLOPS_GIVEN: return work.per;
    }
    return 0;
}

/* The device's clock, started on its first kernel in this recording
 * (the caller holds mu); false when it cannot be. */
static bool start_clock(awl_device device)
{
    if (clock_of(device)) return true;
    if (prof.n_clocks == MAX_CLOCKS) return false;
    const awl_backend *b = device.backend;
    if (b->synchronize(device.index) < 0) return false;
    void *reference = b->marker_record(device.index);
    if (!reference) return false;
    prof.clocks[prof.n_clocks++] = (device_clock){device, reference, since_start()};
    return true;
}

void awl_trace_start(awl_trace *k, const char *name, awl_device device, awl_trace_work work,
                     int n_out, int n, const awl_view *const *views)
{
    awl_kernel_event *e = &k->e;
    memset(e, 0, sizeof *e);
    e->name = name;
    e->device = device;
    e->dtype = n > 0 ? views[n > n_out ? n_out : 0]->dtype : AWL_F32;
    e->n_shapes = n < AWL_TRACE_SHAPES ? n : AWL_TRACE_SHAPES;
    for (int i = 0; i < e->n_shapes; i++) {
        e->ndim[i] = (int8_t)views[i]->ndim;
        memcpy(e->shape[i], views[i]->shape, sizeof e->shape[i]);
    }
    for (int i = 0; i < n; i++) {
        double b = footprint(views[i]) * (double)awl_dtype_size(views[i]->dtype);
        e->bytes += i < n_out && work.rmw ? 2 * b : b;
    }
    e->flops = count_flops(work, n_out, n, views);
    pthread_mutex_lock(&prof.mu);
    if (prof.recording) {
        sync_thread();
        e->tid = my_tid();
        for (int i = (me.depth < MAX_DEPTH ? me.depth : MAX_DEPTH) - 1; i >= 0; i--) {
            const open_range *r = &me.stack[i];
            if (!e->phase && r->kind == AWL_PROFILE_PHASE) e->phase = r->name;
            if (!e->op && r->kind == AWL_PROFILE_OP) e->op = r->name;
        }
        if (device.backend->marker_record && start_clock(device))
            e->m0 = device.backend->marker_record(device.index);
    }
    pthread_mutex_unlock(&prof.mu);
    if (device.backend->range_push) device.backend->range_push(name);
    e->t0 = since_start();
}

void awl_trace_finish(awl_trace *k)
{
    awl_kernel_event *e = &k->e;
    e->t1 = since_start();
    const awl_backend *b = e->device.backend;
    if (e->m0) e->m1 = b->marker_record(e->device.index);
    if (b->range_pop) b->range_pop();
    pthread_mutex_lock(&prof.mu);
    bool kept = prof.recording && me.generation == prof.generation &&
                grow((void **)&prof.rec.kernels, prof.rec.n_kernels, &prof.cap_kernels,
                     sizeof *prof.rec.kernels);
    if (kept) prof.rec.kernels[prof.rec.n_kernels++] = *e;
    pthread_mutex_unlock(&prof.mu);
    if (!kept) {
        if (e->m0) b->marker_free(e->device.index, e->m0);
        if (e->m1) b->marker_free(e->device.index, e->m1);
    }
}

/* ---- memory ------------------------------------------------------------------------- */

void awl_profiler_memory_sample(awl_device device, const int64_t *by_role)
{
    pthread_mutex_lock(&prof.mu);
    if (prof.recording && grow((void **)&prof.rec.memory, prof.rec.n_memory, &prof.cap_memory,
                               sizeof *prof.rec.memory)) {
        awl_memory_event *m = &prof.rec.memory[prof.rec.n_memory++];
        m->t = since_start();
        m->device = device;
        memcpy(m->by_role, by_role, sizeof m->by_role);
    }
    pthread_mutex_unlock(&prof.mu);
}
