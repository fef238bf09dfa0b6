/*
 * tensor/profiler_internal.h - the profiler's hook on every backend call,
 * and the recording that tensor/profiler_report.c reads. Private to
 * tensor/ (tensor_internal.h includes it).
 *
 * Each place in tensor/ that calls a backend's kernel brackets the call:
 *
 *     awl_view vo = awl_tensor_view(out), vx = awl_tensor_view(x);
 *     awl_trace k;
 *     AWL_TRACE_BEGIN(&k, "gelu", x, AWL_WORK(OUTPUT, 1), 1, 2, (const awl_view *[]){&vo, &vx});
 *     status = awl_trace_end(&k, backend->unary(op, &vo, &vx, alpha));
 *
 * views[0..n_out) are what the kernel writes, views[n_out..n) what it
 * reads. When the profiler does not record, begin is one load and branch
 * and end one branch on a local; when it does, begin describes the call
 * (shapes, dtype, bytes, FLOPs, the phase and op it runs in) and starts
 * its clock, end stops it and files the event.
 *
 * Bytes moved are each operand's footprint once (its elements, a broadcast
 * axis counted once) times its element size, outputs once more when the
 * kernel also reads them (AWL_WORK_RMW: accumulating matmuls, index_add):
 * the traffic of a kernel that reads every input and writes every output
 * exactly once, the roofline's convention.
 */
#ifndef AWL_TENSOR_PROFILER_INTERNAL_H
#define AWL_TENSOR_PROFILER_INTERNAL_H

#include <stdatomic.h>

#include "tensor/profiler.h"

/* How a kernel's FLOPs are counted (docs/profiling.md lists the kernels). */
typedef enum awl_flop_rule {
    AWL_FLOPS_NONE,   /* data movement: copies, fills, indexing, random   */
    AWL_FLOPS_OUTPUT, /* `per` for every element written (views[0])       */
    AWL_FLOPS_INPUT,  /* `per` for every element of the first input       */
    AWL_FLOPS_MATMUL, /* 2 M N K per product, plus `per` per output element
                         (a bias); K from the first input's last axis     */
    AWL_FLOPS_GIVEN,  /* `per` is the count                               */
} awl_flop_rule;

typedef struct awl_trace_work {
    awl_flop_rule flops;
    double per;
    bool rmw; /* the outputs are read too */
} awl_trace_work;

#define AWL_WORK(rule, per) ((awl_trace_work){AWL_FLOPS_##rule, (per), false})
#define AWL_WORK_RMW(rule, per) ((awl_trace_work){AWL_FLOPS_##rule, (per), true})

#define AWL_TRACE_SHAPES 4

/* One recorded kernel call. */
typedef struct awl_kernel_event {
    const char *name;  /* a string with static storage               */
    const char *phase; /* the innermost phase range, or NULL          */
    const char *op;    /* the innermost op range (a node's backward)  */
    awl_device device;
    awl_dtype dtype;
    int tid;
    int n_shapes; /* shapes[0] the output, then the inputs       */
    int8_t ndim[AWL_TRACE_SHAPES];
    int64_t shape[AWL_TRACE_SHAPES][AWL_MAX_DIMS];
    double bytes, flops;
    double t0, t1; /* host seconds since the recording started    */
    void *m0, *m1; /* device markers (asynchronous backends)      */
    double d0, d1; /* device time on the host's clock, once read  */
} awl_kernel_event;

typedef struct awl_trace {
    bool on;
    awl_kernel_event e;
} awl_trace;

/* The profiler's switch, read by the hooks below. */
extern atomic_bool awl_profiler_on;

void awl_trace_start(awl_trace *k, const char *name, awl_device device, awl_trace_work work,
                     int n_out, int n, const awl_view *const *views);
void awl_trace_finish(awl_trace *k);

/* A macro, not a function, so that its arguments (the op's name, looked
 * up in a table; the list of views) are evaluated only while recording:
 * off, it is one load and one branch. The views come last, as the rest of
 * the arguments, because the commas of their list would split them. */
#define AWL_TRACE_BEGIN(k, name, tensor, work, n_out, n, ... /* views */)                          \
    do {                                                                                           \
        (k)->on = atomic_load_explicit(&awl_profiler_on, memory_order_relaxed);                    \
        if ((k)->on)                                                                               \
            awl_trace_start((k), (name), (tensor)->storage->device, (work), (n_out), (n),          \
                            (__VA_ARGS__));                                                        \
    } while (0)

/* Returns status, so that a call reads status = awl_trace_end(&k, call). */
static inline int awl_trace_end(awl_trace *k, int status)
{
    if (k->on) awl_trace_finish(k);
    return status;
}

/* Replaces the counts begin worked out (kernels whose operands are not
 * one list of views: the optimizer's). */
static inline void awl_trace_set_work(awl_trace *k, double bytes, double flops)
{
    if (k->on) {
        k->e.bytes = bytes;
        k->e.flops = flops;
    }
}

/* A sample of a device's ledger (tensor/storage.c, under its lock). */
void awl_profiler_memory_sample(awl_device device, const int64_t *by_role);

/* ---- the recording, for tensor/profiler_report.c ----------------------------------- */

typedef struct awl_range_event {
    const char *name; /* interned: lives as long as the recording */
    awl_profile_kind kind;
    char ph;     /* 'X' a range, 'i' an instant, 'b' an async span (written as b and e) */
    bool nested; /* a phase inside a phase of the same name (a re-entrant backward) */
    bool cut;    /* still open at stop: t1 is the stop */
    int tid;
    double t0, t1;
    uint64_t id;
} awl_range_event;

typedef struct awl_memory_event {
    double t;
    awl_device device;
    int64_t by_role[AWL_MEMORY_ROLE_COUNT];
} awl_memory_event;

typedef struct awl_recording {
    double span; /* seconds from start to stop */
    awl_kernel_event *kernels;
    int n_kernels;
    awl_range_event *ranges;
    int n_ranges;
    awl_memory_event *memory;
    int n_memory;
    const char *const *thread_names; /* by tid; NULL entries unnamed */
    int n_threads;
    int64_t dropped; /* events not kept: the recording was full */
} awl_recording;

/* The recording as it stands once stopped (NULL while recording). */
const awl_recording *awl_profiler_recording_data(void);

#endif
