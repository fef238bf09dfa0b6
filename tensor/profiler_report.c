/*
 * tensor/profiler_report.c - what a recording says: the Chrome trace, the
 * table of ops by time, and the ceilings the ops are judged against.
 *
 * The trace is the Trace Event Format (one JSON object, "traceEvents"),
 * which Perfetto and chrome://tracing open:
 *   - process 1 ("awl") has a track per thread: its ranges (steps, phases,
 *     graph nodes' backward, communication) as complete events ("X"),
 *     instants ("i"), and the kernels timed on the host (the CPU), nested
 *     in the ranges they ran in;
 *   - process 2 ("device time") has a track per asynchronous device
 *     (cuda:0): its kernels as the device ran them, from the markers;
 *   - communication spans that end on another thread (a bucket from sent
 *     to done) are async events ("b"/"e") in the category "comm";
 *   - the memory ledger is a counter ("C") per device, one series a role.
 *
 * The roofline: an op that moves B bytes and does F FLOPs in t seconds
 * reaches F/t, and the most it could reach is min(P, I x W), I = F/B its
 * arithmetic intensity, P the matmul rate and W the copy bandwidth measured
 * in this process. Data movement (F = 0) is judged by its bandwidth
 * against W alone.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tensor/tensor_internal.h"

/* ---- the trace --------------------------------------------------------------------- */

/* s as the body of a JSON string. */
static void put_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static const char *kind_name(awl_profile_kind kind)
{
    static const char *const names[] = {"step", "phase", "op", "comm"};
    return kind >= 0 && kind <= AWL_PROFILE_COMM ? names[kind] : "?";
}

/* Microseconds, as the format counts time. */
static double us(double seconds) { return 1e6 * seconds; }

static bool device_timed(const awl_kernel_event *e) { return e->device.backend->marker_record; }

/* The index of a device among those with device-timed kernels (for its
 * track), added to devs[] when new. */
static int device_track(awl_device *devs, int *n, awl_device d)
{
    for (int i = 0; i < *n; i++)
        if (awl_device_equal(devs[i], d)) return i;
    if (*n == 16) return 15;
    devs[*n] = d;
    return (*n)++;
}

static void put_kernel(FILE *f, const awl_kernel_event *e, int pid, int tid, double t0, double t1)
{
    fprintf(f, ",\n{\"name\":");
    put_string(f, e->name);
    fprintf(f, ",\"cat\":\"kernel\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,",
            pid, tid, us(t0), us(t1 - t0));
    fprintf(f, "\"args\":{\"shapes\":\"");
    for (int i = 0; i < e->n_shapes; i++) {
        char buf[160];
        fprintf(f, "%s%s", i ? " " : "",
                awl_format_shape(e->ndim[i], e->shape[i], buf, sizeof buf));
    }
    char dev[32];
    fprintf(f, "\",\"dtype\":\"%s\",\"device\":\"%s\",\"bytes\":%.0f,\"flops\":%.0f,\"phase\":",
            awl_dtype_name(e->dtype), awl_device_name(e->device, dev, sizeof dev), e->bytes,
            e->flops);
    put_string(f, e->phase ? e->phase : "other");
    if (e->op) {
        fprintf(f, ",\"node\":");
        put_string(f, e->op);
    }
    fprintf(f, "}}");
}

static void write_events(FILE *f, const awl_recording *r)
{
    fprintf(f, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
    fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"args\":{\"name\":\"awl\"}}");
    for (int tid = 0; tid < r->n_threads; tid++) {
        char fallback[32];
        snprintf(fallback, sizeof fallback, "thread %d", tid);
        fprintf(f,
                ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"args\":{"
                "\"name\":",
                tid);
        put_string(f, r->thread_names[tid] ? r->thread_names[tid] : fallback);
        fprintf(f, "}}");
    }
    for (int i = 0; i < r->n_ranges; i++) {
        const awl_range_event *e = &r->ranges[i];
        fprintf(f, ",\n{\"name\":");
        put_string(f, e->name);
        fprintf(f, ",\"cat\":\"%s\",\"pid\":1,\"tid\":%d,", kind_name(e->kind), e->tid);
        if (e->ph == 'X')
            fprintf(f, "\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f}", us(e->t0), us(e->t1 - e->t0));
        else if (e->ph == 'i')
            fprintf(f, "\"ph\":\"i\",\"s\":\"t\",\"ts\":%.3f}", us(e->t0));
        else
            fprintf(f,
                    "\"ph\":\"b\",\"id\":%llu,\"ts\":%.3f},\n{\"name\":", (unsigned long long)e->id,
                    us(e->t0));
        if (e->ph == 'b') {
            put_string(f, e->name);
            fprintf(f,
                    ",\"cat\":\"comm\",\"pid\":1,\"tid\":%d,\"ph\":\"e\",\"id\":%llu,"
                    "\"ts\":%.3f}",
                    e->tid, (unsigned long long)e->id, us(e->t1));
        }
    }
    awl_device devs[16];
    int n_devs = 0;
    for (int i = 0; i < r->n_kernels; i++) {
        const awl_kernel_event *e = &r->kernels[i];
        if (device_timed(e))
            put_kernel(f, e, 2, device_track(devs, &n_devs, e->device), e->d0, e->d1);
        else
            put_kernel(f, e, 1, e->tid, e->t0, e->t1);
    }
    if (n_devs) {
        fprintf(f, ",\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":2,\"args\":{\"name\":"
                   "\"device time\"}}");
        for (int i = 0; i < n_devs; i++) {
            char dev[32];
            fprintf(f,
                    ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":2,\"tid\":%d,"
                    "\"args\":{\"name\":\"%s\"}}",
                    i, awl_device_name(devs[i], dev, sizeof dev));
        }
    }
    for (int i = 0; i < r->n_memory; i++) {
        const awl_memory_event *m = &r->memory[i];
        char dev[32];
        fprintf(f, ",\n{\"name\":\"memory %s\",\"ph\":\"C\",\"pid\":1,\"ts\":%.3f,\"args\":{",
                awl_device_name(m->device, dev, sizeof dev), us(m->t));
        for (int k = 0; k < AWL_MEMORY_ROLE_COUNT; k++)
            fprintf(f, "%s\"%s\":%lld", k ? "," : "", awl_memory_role_name((awl_memory_role)k),
                    (long long)m->by_role[k]);
        fprintf(f, "}}");
    }
    fprintf(f, "\n],\"otherData\":{\"span_s\":%.6f,\"dropped_events\":%lld}}\n", r->span,
            (long long)r->dropped);
}

int awl_profiler_write(const char *path)
{
    const awl_recording *r = awl_profiler_recording_data();
    if (!r) return awl_error(AWL_ERR_INVALID, "awl_profiler_write: the profiler still records");
    if (!path || !path[0]) return awl_error(AWL_ERR_INVALID, "awl_profiler_write: no path");
    FILE *f = fopen(path, "w");
    if (!f)
        return awl_error(AWL_ERR_IO, "awl_profiler_write: cannot write %s: %s", path,
                         strerror(errno));
    write_events(f, r);
    if (fclose(f) != 0) return awl_error(AWL_ERR_IO, "awl_profiler_write: writing %s failed", path);
    return AWL_OK;
}

/* ---- totals ------------------------------------------------------------------------ */

/* The seconds a kernel took: on the device when it was timed there. */
static double kernel_seconds(const awl_kernel_event *e)
{
    return device_timed(e) ? e->d1 - e->d0 : e->t1 - e->t0;
}

static bool is_step(const awl_range_event *r)
{
    return r->kind == AWL_PROFILE_STEP && r->ph == 'X' && !r->cut;
}

/* Whether host time t lies inside one of the steps[0..n). */
static bool inside_step(const awl_range_event *const *steps, int n, double t)
{
    for (int i = 0; i < n; i++)
        if (t >= steps[i]->t0 && t <= steps[i]->t1) return true;
    return false;
}

static int by_time(const void *a, const void *b)
{
    double x = ((const awl_profile_op *)a)->seconds, y = ((const awl_profile_op *)b)->seconds;
    return (x < y) - (x > y);
}

int awl_profiler_totals(awl_profile_totals *out)
{
    memset(out, 0, sizeof *out);
    const awl_recording *r = awl_profiler_recording_data();
    if (!r) return awl_error(AWL_ERR_INVALID, "awl_profiler_totals: the profiler still records");
    const awl_range_event **steps = awl_xcalloc((size_t)r->n_ranges + 1, sizeof *steps);
    for (int i = 0; i < r->n_ranges; i++) {
        const awl_range_event *e = &r->ranges[i];
        if (is_step(e)) {
            steps[out->steps++] = e;
            out->step_seconds += e->t1 - e->t0;
        }
        if (e->kind != AWL_PROFILE_PHASE || e->ph != 'X' || e->nested) continue;
        int k = 0;
        while (k < out->n_phases && strcmp(out->phases[k], e->name) != 0) k++;
        if (k == out->n_phases) {
            if (k == 8) continue;
            out->phases[out->n_phases++] = e->name;
        }
        out->phase_seconds[k] += e->t1 - e->t0;
    }
    if (!out->steps) out->step_seconds = r->span;
    out->ops = awl_xcalloc((size_t)r->n_kernels + 1, sizeof *out->ops);
    for (int i = 0; i < r->n_kernels; i++) {
        const awl_kernel_event *e = &r->kernels[i];
        if (out->steps && !inside_step(steps, out->steps, e->t0)) continue;
        const char *phase = e->phase ? e->phase : "other";
        int k = 0;
        while (k < out->n_ops &&
               (strcmp(out->ops[k].name, e->name) != 0 || strcmp(out->ops[k].phase, phase) != 0))
            k++;
        if (k == out->n_ops)
            out->ops[out->n_ops++] = (awl_profile_op){.name = e->name, .phase = phase};
        awl_profile_op *op = &out->ops[k];
        double t = kernel_seconds(e);
        op->calls++;
        op->seconds += t;
        op->bytes += e->bytes;
        op->flops += e->flops;
        out->kernel_seconds += t;
    }
    free(steps);
    qsort(out->ops, (size_t)out->n_ops, sizeof *out->ops, by_time);
    return AWL_OK;
}

void awl_profile_totals_free(awl_profile_totals *t)
{
    if (!t) return;
    free(t->ops);
    t->ops = NULL;
    t->n_ops = 0;
}

/* ---- the roofline -------------------------------------------------------------------- */

/* The fraction of the attainable rate an op reached (0 without ceilings). */
static double of_ceiling(const awl_profile_op *op, const awl_roofline *r)
{
    if (!r || op->seconds <= 0) return 0;
    if (op->flops <= 0 || op->bytes <= 0)
        return r->copy_bytes > 0 ? op->bytes / op->seconds / r->copy_bytes : 0;
    double attainable = fmin(r->matmul_flops, op->flops / op->bytes * r->copy_bytes);
    return attainable > 0 ? op->flops / op->seconds / attainable : 0;
}

int awl_profiler_print_summary(FILE *f, const awl_roofline *r)
{
    awl_profile_totals t;
    if (awl_profiler_totals(&t) < 0) return AWL_ERR_INVALID;
    double step = t.steps ? t.step_seconds / t.steps : t.step_seconds;
    fprintf(f, "profile: %d step%s, %.2f ms a step; kernels %.1f ms of it (%.0f%%)\n", t.steps,
            t.steps == 1 ? "" : "s", 1e3 * step, 1e3 * t.kernel_seconds / (t.steps ? t.steps : 1),
            t.step_seconds > 0 ? 100 * t.kernel_seconds / t.step_seconds : 0);
    if (r)
        fprintf(f,
                "ceilings on %s (measured in this process): matmul %.1f GFLOP/s, copy %.1f GB/s; "
                "peak %.1f "
                "GFLOP/s (%s)\n",
                r->device, 1e-9 * r->matmul_flops, 1e-9 * r->copy_bytes, 1e-9 * r->peak_flops,
                r->peak_source);
    fprintf(f, "%-26s %-10s %10s %10s %6s %9s %9s %7s %8s\n", "op", "phase", "calls/step",
            "ms/step", "share", "GB/s", "GFLOP/s", "FLOP/B", "ceiling");
    for (int i = 0; i < t.n_ops; i++) {
        const awl_profile_op *op = &t.ops[i];
        double per_step = op->seconds / (t.steps ? t.steps : 1);
        char gflops[16] = "-", intensity[16] = "-", ceiling[16] = "-";
        if (op->flops > 0) {
            snprintf(gflops, sizeof gflops, "%.1f", 1e-9 * op->flops / op->seconds);
            snprintf(intensity, sizeof intensity, "%.1f", op->flops / op->bytes);
        }
        if (r) snprintf(ceiling, sizeof ceiling, "%.0f%%", 100 * of_ceiling(op, r));
        fprintf(f, "%-26s %-10s %10lld %10.3f %5.1f%% %9.1f %9s %7s %8s\n", op->name, op->phase,
                (long long)(op->calls / (t.steps ? t.steps : 1)), 1e3 * per_step,
                t.step_seconds > 0 ? 100 * op->seconds / t.step_seconds : 0,
                op->seconds > 0 ? 1e-9 * op->bytes / op->seconds : 0, gflops, intensity, ceiling);
    }
    if (t.n_phases) {
        fprintf(f, "phases (ms a step):");
        for (int k = 0; k < t.n_phases; k++)
            fprintf(f, " %s %.3f", t.phases[k], 1e3 * t.phase_seconds[k] / (t.steps ? t.steps : 1));
        fprintf(f, "\n");
    }
    awl_profile_totals_free(&t);
    return AWL_OK;
}

int awl_profiler_write_summary(const char *path, const awl_roofline *r)
{
    awl_profile_totals t;
    if (awl_profiler_totals(&t) < 0) return AWL_ERR_INVALID;
    FILE *f = path && path[0] ? fopen(path, "w") : NULL;
    if (!f) {
        awl_profile_totals_free(&t);
        return awl_error(AWL_ERR_IO, "awl_profiler_write_summary: cannot write %s: %s",
                         path ? path : "(null)", strerror(errno));
    }
    if (r)
        fprintf(f, "# device %s\n# matmul_flops %.6e\n# copy_bytes %.6e\n# peak_flops %.6e\n",
                r->device, r->matmul_flops, r->copy_bytes, r->peak_flops);
    fprintf(f, "# steps %d\n# step_seconds %.6e\n", t.steps, t.step_seconds);
    fprintf(f, "op\tphase\tcalls\tseconds\tshare\tbytes\tflops\tintensity\tflops_per_s\t"
               "bytes_per_s\tof_ceiling\n");
    for (int i = 0; i < t.n_ops; i++) {
        const awl_profile_op *op = &t.ops[i];
        double s = op->seconds > 0 ? op->seconds : 1e-12;
        fprintf(f, "%s\t%s\t%lld\t%.6e\t%.4f\t%.6e\t%.6e\t%.6e\t%.6e\t%.6e\t%.4f\n", op->name,
                op->phase, (long long)op->calls, op->seconds,
                t.step_seconds > 0 ? op->seconds / t.step_seconds : 0, op->bytes, op->flops,
                op->bytes > 0 ? op->flops / op->bytes : 0, op->flops / s, op->bytes / s,
                of_ceiling(op, r));
    }
    awl_profile_totals_free(&t);
    if (fclose(f) != 0)
        return awl_error(AWL_ERR_IO, "awl_profiler_write_summary: writing %s failed", path);
    return AWL_OK;
}

/* ---- the ceilings ------------------------------------------------------------------ */

static double clock_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The best seconds of `reps` runs of dst = a @ b (or dst = a, b NULL),
 * each run waited for; negative on failure. */
static double best_seconds(const char *device, awl_tensor *dst, awl_tensor *a, awl_tensor *b,
                           int reps)
{
    double best = -1;
    for (int rep = 0; rep < reps; rep++) {
        awl_synchronize(device);
        double t0 = clock_seconds();
        int status = b ? awl_tensor_matmul_out(dst, a, b, false) : awl_tensor_copy_(dst, a);
        if (status < 0 || awl_synchronize(device) < 0) return -1;
        double t = clock_seconds() - t0;
        if (best < 0 || t < best) best = t;
    }
    return best;
}

/* Seconds of one n x n product (the best of reps), negative on failure. */
static double product_seconds(const char *device, awl_dtype dtype, int64_t n, int reps)
{
    /* the operands are random, but drawing them must not move the global
     * generator: a trainer probes after restoring it from a checkpoint */
    uint64_t rng_seed, rng_offset;
    awl_rng_get_state(&rng_seed, &rng_offset);
    awl_scope_begin();
    awl_tensor *a = awl_tensor_cast(awl_randn(AWL_SHAPE(n, n), AWL_F32, device), dtype);
    awl_tensor *b = awl_tensor_cast(awl_randn(AWL_SHAPE(n, n), AWL_F32, device), dtype);
    awl_rng_set_state(rng_seed, rng_offset);
    awl_tensor *c = awl_empty(AWL_SHAPE(n, n), dtype, device);
    double t = a && b && c ? best_seconds(device, c, a, b, reps) : -1;
    awl_scope_end();
    return t;
}

double awl_measure_matmul_rate(const char *device, awl_dtype dtype)
{
    /* the size: doubled from 256 until a product takes 10 ms (1024 on a
     * laptop CPU, 8192 on a datacenter GPU, a few hundred on a backend
     * still made of plain loops); these first products are the warm-up.
     * The very first one is not timed: it pays for opening the library
     * (cuBLAS loads on first use), which took more than 10 ms and stopped
     * the search at 256, a launch-bound size (1.4 TFLOP/s on an H200). */
    int64_t n = 256;
    if (product_seconds(device, dtype, n, 1) < 0) return 0;
    for (;;) {
        double t = product_seconds(device, dtype, n, 1);
        if (t < 0) return 0;
        if (t >= 0.01 || n >= 8192) break;
        n *= 2;
    }
    double t = product_seconds(device, dtype, n, 7);
    return t > 0 ? 2.0 * (double)n * (double)n * (double)n / t : 0;
}

double awl_measure_copy_bandwidth(const char *device)
{
    const int64_t n = (int64_t)16 << 20; /* 64 MiB of float32 */
    awl_scope_begin();
    awl_tensor *a = awl_zeros(AWL_SHAPE(n), AWL_F32, device);
    awl_tensor *b = awl_empty(AWL_SHAPE(n), AWL_F32, device);
    double t = a && b ? best_seconds(device, b, a, NULL, 5) : -1;
    awl_scope_end();
    return t > 0 ? 2.0 * 4.0 * (double)n / t : 0;
}

double awl_device_peak_flops(const char *device, awl_dtype dtype, char *source, size_t size)
{
    awl_device d;
    if (source && size) source[0] = '\0';
    if (awl_device_parse(device, &d) < 0) return 0;
    if (!d.backend->peak_flops) {
        if (source && size)
            snprintf(source, size, "the %s backend does not know its peak", d.backend->name);
        return 0;
    }
    return d.backend->peak_flops(d.index, dtype, awl_float32_matmul_fast(), source, size);
}

int awl_roofline_measure(const char *device, awl_dtype dtype, awl_roofline *out)
{
    memset(out, 0, sizeof *out);
    if (awl_profiler_recording())
        return awl_error(AWL_ERR_INVALID,
                         "awl_roofline_measure: the profiler records; measure after stopping it");
    snprintf(out->device, sizeof out->device, "%s", device ? device : "cpu");
    out->dtype = dtype;
    out->matmul_flops = awl_measure_matmul_rate(out->device, dtype);
    out->copy_bytes = awl_measure_copy_bandwidth(out->device);
    out->peak_flops =
        awl_device_peak_flops(out->device, dtype, out->peak_source, sizeof out->peak_source);
    if (out->matmul_flops <= 0 || out->copy_bytes <= 0)
        return awl_error(AWL_ERR_DEVICE, "awl_roofline_measure: cannot measure %s", out->device);
    return AWL_OK;
}
