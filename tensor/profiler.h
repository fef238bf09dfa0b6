/*
 * tensor/profiler.h - where a run's time goes: the op profiler, its
 * summary and roofline, and the ceilings they are judged against.
 *
 * While the profiler records, every backend call the tensor layer makes (a
 * kernel: matmul, add, layernorm_forward, ...) is timed and described: its
 * input shapes, dtype, bytes moved and FLOPs. Time is the device's: on the
 * CPU the host clock around the call, on CUDA the time between two events
 * queued around it (never the launch time). Ranges name what the kernels
 * belong to: steps, phases (data, forward, backward, optimizer, eval),
 * each graph node's backward (the engine marks them), and communication
 * (dist/ marks its collectives and DDP's buckets). The memory ledger's
 * figures (tensor.h) are sampled at every allocation, for a memory track.
 *
 *     awl_profiler_start();
 *     for (int step = 0; step < 5; step++) {
 *         awl_profiler_begin(AWL_PROFILE_STEP, "step");
 *         awl_profiler_begin(AWL_PROFILE_PHASE, "forward");
 *         awl_tensor *loss = ...;
 *         awl_profiler_end();
 *         awl_backward(loss);                     // the engine's "backward" phase
 *         awl_profiler_end();
 *     }
 *     awl_profiler_stop();
 *     awl_profiler_write("trace.json");           // Perfetto, chrome://tracing
 *     awl_roofline r;
 *     awl_roofline_measure("cpu", AWL_F32, &r);   // sgemm rate, copy bandwidth
 *     awl_profiler_print_summary(stdout, &r);     // ops by time, against the ceilings
 *     awl_profiler_clear();
 *
 * When it is not recording, a kernel call pays one load and branch to ask,
 * and each range call the same (docs/profiling.md measures it). On CUDA
 * the ranges and kernels are also NVTX ranges, for Nsight Systems.
 *
 * Threads: recording, ranges and instants may come from any thread (each
 * thread has a track of its own, and its own stack of open ranges); start,
 * stop, write and clear from one thread while no other records.
 */
#ifndef AWL_TENSOR_PROFILER_H
#define AWL_TENSOR_PROFILER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- recording ------------------------------------------------------------------ */

typedef enum awl_profile_kind {
    AWL_PROFILE_STEP,  /* a training step: the summary's shares are of these */
    AWL_PROFILE_PHASE, /* data, forward, backward, optimizer, eval: each kernel
                          is counted under the innermost phase it runs in */
    AWL_PROFILE_OP,    /* a graph node's backward (the engine), or a user's own */
    AWL_PROFILE_COMM,  /* distributed communication */
} awl_profile_kind;

/* Whether the profiler records now (one relaxed load). */
bool awl_profiler_recording(void);
/* Drops any earlier recording and starts a new one. 0, or AWL_ERR_INVALID
 * when it records already. */
int awl_profiler_start(void);
/* Stops recording and reads the devices' clocks back (waiting for the
 * kernels recorded); the recording stays until awl_profiler_clear or the
 * next start. A no-op when not recording. */
void awl_profiler_stop(void);
/* Frees the recording. */
void awl_profiler_clear(void);

/* Opens a range on the calling thread (name copied), closed by the
 * matching awl_profiler_end; ranges nest. Both do nothing when the
 * profiler does not record. */
void awl_profiler_begin(awl_profile_kind kind, const char *name);
void awl_profiler_end(void);
/* A moment: "bucket 3 ready". */
void awl_profiler_instant(awl_profile_kind kind, const char *name);
/* A span that may end on another thread: begun with a name and an id,
 * ended by the id ("bucket 3" from sent to done). An end whose id was not
 * begun is ignored. */
void awl_profiler_async_begin(const char *name, uint64_t id);
void awl_profiler_async_end(uint64_t id);
/* The name the calling thread's track gets in the trace (copied; kept
 * across recordings). */
void awl_profiler_name_thread(const char *name);

/* ---- what was recorded ------------------------------------------------------------ */

/* Writes the recording as Chrome trace JSON (the Trace Event Format, which
 * Perfetto and chrome://tracing open). 0 or negative with a message. */
int awl_profiler_write(const char *path);

/* The kernels of the recording, summed by (name, phase). */
typedef struct awl_profile_op {
    const char *name;  /* "matmul", "add", "layernorm_forward" */
    const char *phase; /* the innermost phase it ran in, or "other" */
    int64_t calls;
    double seconds; /* device time */
    double bytes;   /* read and written, each operand's footprint once */
    double flops;   /* 0 for data movement */
} awl_profile_op;

/* The recording as it stands (after awl_profiler_stop; AWL_ERR_INVALID
 * while it records): the sums of its kernels by (name, phase), longest
 * first, in ops (n_ops entries; awl_profile_totals_free frees them, the
 * names live as long as the recording), and the time of its steps. When
 * the recording has closed steps, only the kernels that start inside one
 * are summed, so that the ops' shares are of the steps. */
typedef struct awl_profile_totals {
    awl_profile_op *ops;
    int n_ops;
    int steps;               /* AWL_PROFILE_STEP ranges, closed ones           */
    double step_seconds;     /* their total; the recording's span when none    */
    double kernel_seconds;   /* all kernels together (inside steps, when any)  */
    double phase_seconds[8]; /* time inside each phase named in phases[]  */
    const char *phases[8];
    int n_phases;
} awl_profile_totals;

int awl_profiler_totals(awl_profile_totals *out);
void awl_profile_totals_free(awl_profile_totals *t);

/* ---- ceilings and the summary -------------------------------------------------------- */

/* What the ops are judged against, measured in this process on one
 * device: the rate of awl's own matmul on an n x n product (the roofline's
 * flat part), the bandwidth of a device copy of 64 MiB, read plus written
 * (its slope), and the hardware's fixed peak for MFU. */
typedef struct awl_roofline {
    char device[32];
    awl_dtype dtype;
    double matmul_flops; /* FLOP/s                                  */
    double copy_bytes;   /* bytes/s                                 */
    double peak_flops;   /* FLOP/s; 0 when the device's is unknown  */
    char peak_source[160];
} awl_roofline;

/* Measures the ceilings (a second or so; leaves the global generator as it
 * was). Not while the profiler records (AWL_ERR_INVALID): its own kernels
 * would be recorded. 0 or negative with a message. */
int awl_roofline_measure(const char *device, awl_dtype dtype, awl_roofline *out);

/* MFU's denominator: the device's peak dense matmul rate in dtype (float32
 * follows awl_set_float32_matmul_precision: "high" is TF32's rate), from
 * its backend (the CPU: the FMA peak of the cores in use, measured once
 * and cached; CUDA: the chip's datasheet). Writes where it comes from into
 * source; 0 when unknown (source says why). */
double awl_device_peak_flops(const char *device, awl_dtype dtype, char *source, size_t size);

/* The best FLOP/s of awl's matmul on an n x n product in dtype on device
 * (n doubled from 256 until one takes 10 ms, at most 8192), measured now;
 * 0 when it cannot be. The global generator is left as it was. */
double awl_measure_matmul_rate(const char *device, awl_dtype dtype);
/* Bytes per second (read + write) of a 64 MiB float32 copy on device. */
double awl_measure_copy_bandwidth(const char *device);

/* The table of ops by total time (awl_profiler_totals): calls and time per
 * step, share of the steps, achieved GB/s and GFLOP/s, arithmetic intensity
 * and the fraction of the roofline's attainable rate, min(matmul_flops,
 * intensity x copy_bytes), or of copy_bytes for data movement (r may be
 * NULL: no fractions); then the phases' time per step. */
int awl_profiler_print_summary(FILE *f, const awl_roofline *r);
/* The same as tab-separated columns, with the ceilings in '#' lines, for
 * scripts/plot_roofline.sh. 0 or negative with a message. */
int awl_profiler_write_summary(const char *path, const awl_roofline *r);

#ifdef __cplusplus
}
#endif

#endif
