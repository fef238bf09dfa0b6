/*
 * tools/awl-check/perf.c - awl-check --perf: how fast each primitive runs
 * on the device, against the CPU backend on the same shapes.
 *
 * Each op runs on one large contiguous case (16 MB of float32 for the
 * memory-bound ops; a 1024^3 product for matmul). The device and the CPU
 * backend are timed in turns, three rounds of repeated calls each (with
 * synchronize before the clock stops), and the best round of each counts:
 * a machine shared with other work then slows both alike, and the ratio is
 * the figure to quote. Rates: GB/s of the bytes the op must read and write
 * at least once, GFLOP/s (2 M N K) for matmul.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tools/awl-check/harness.h"

typedef struct perf_case {
    const char *name;
    awl_kernel kernel;
    int nop;
    int ndim[4];
    int64_t shape[4][2];
    awl_dtype dtype[4];
    double bytes, flops; /* per call */
    ac_args args;
    ac_call_fn call;
} perf_case;

static int p_fill(const awl_backend *b, awl_view *const *v, const ac_args *a)
{
    return b->fill(v[0], a->alpha);
}
static int p_copy(const awl_backend *b, awl_view *const *v, const ac_args *a)
{
    (void)a;
    return b->copy(v[0], v[1]);
}
static int p_unary(const awl_backend *b, awl_view *const *v, const ac_args *a)
{
    return b->unary((awl_unary_op)a->op, v[0], v[1], a->alpha);
}
static int p_binary(const awl_backend *b, awl_view *const *v, const ac_args *a)
{
    return b->binary((awl_binary_op)a->op, v[0], v[1], v[2]);
}
static int p_where(const awl_backend *b, awl_view *const *v, const ac_args *a)
{
    (void)a;
    return b->where(v[0], v[1], v[2], v[3]);
}
static int p_reduce(const awl_backend *b, awl_view *const *v, const ac_args *a)
{
    return b->reduce((awl_reduce_op)a->op, v[0], v[1]);
}
static int p_matmul(const awl_backend *b, awl_view *const *v, const ac_args *a)
{
    (void)a;
    return b->matmul(v[0], v[1], v[2], false);
}
static int p_index_select(const awl_backend *b, awl_view *const *v, const ac_args *a)
{
    (void)a;
    return b->index_select(v[0], v[1], v[2]);
}
static int p_index_add(const awl_backend *b, awl_view *const *v, const ac_args *a)
{
    (void)a;
    return b->index_add(v[0], v[2], v[1]);
}
static int p_random(const awl_backend *b, awl_view *const *v, const ac_args *a)
{
    return b->random(v[0], AWL_RANDOM_NORMAL, 7, 0, a->a, a->b);
}

#define M4 (4 << 20)
#define F32 AWL_F32
static const perf_case CASES[] = {
    {"fill", AWL_KERNEL_FILL, 1, {1}, {{M4}}, {F32}, 4.0 * M4, 0, {.alpha = 1}, p_fill},
    {"copy", AWL_KERNEL_COPY, 2, {1, 1}, {{M4}, {M4}}, {F32, F32}, 8.0 * M4, 0, {0}, p_copy},
    {"unary.add_scalar",
     AWL_KERNEL_UNARY,
     2,
     {1, 1},
     {{M4}, {M4}},
     {F32, F32},
     8.0 * M4,
     0,
     {.op = AWL_UNARY_ADD_SCALAR, .alpha = 1},
     p_unary},
    {"unary.exp",
     AWL_KERNEL_UNARY,
     2,
     {1, 1},
     {{M4}, {M4}},
     {F32, F32},
     8.0 * M4,
     0,
     {.op = AWL_UNARY_EXP},
     p_unary},
    {"binary.add",
     AWL_KERNEL_BINARY,
     3,
     {1, 1, 1},
     {{M4}, {M4}, {M4}},
     {F32, F32, F32},
     12.0 * M4,
     0,
     {.op = AWL_BINARY_ADD},
     p_binary},
    {"where",
     AWL_KERNEL_WHERE,
     4,
     {1, 1, 1, 1},
     {{M4}, {M4}, {M4}, {M4}},
     {F32, F32, F32, F32},
     16.0 * M4,
     0,
     {0},
     p_where},
    {"reduce.sum",
     AWL_KERNEL_REDUCE,
     2,
     {2, 2},
     {{4096, 1}, {4096, 1024}},
     {F32, F32},
     4.0 * M4,
     0,
     {.op = AWL_REDUCE_SUM},
     p_reduce},
    {"matmul",
     AWL_KERNEL_MATMUL,
     3,
     {2, 2, 2},
     {{1024, 1024}, {1024, 1024}, {1024, 1024}},
     {F32, F32, F32},
     0,
     2.0 * 1024 * 1024 * 1024,
     {0},
     p_matmul},
    /* out (4096, 256) rows of a (65536, 256) table */
    {"index_select",
     AWL_KERNEL_INDEX_SELECT,
     3,
     {2, 2, 1},
     {{4096, 256}, {65536, 256}, {4096}},
     {F32, F32, AWL_I32},
     2.0 * 4096 * 256 * 4,
     0,
     {0},
     p_index_select},
    {"index_add",
     AWL_KERNEL_INDEX_ADD,
     3,
     {2, 2, 1},
     {{65536, 256}, {4096, 256}, {4096}},
     {F32, F32, AWL_I32},
     3.0 * 4096 * 256 * 4,
     0,
     {0},
     p_index_add},
    {"random.normal",
     AWL_KERNEL_RANDOM,
     1,
     {1},
     {{M4}},
     {F32},
     4.0 * M4,
     0,
     {.a = 0, .b = 1},
     p_random},
};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct perf_buffers {
    awl_view views[4];
    size_t bytes[4];
} perf_buffers;

/* The case's operands on backend b (device dev), filled with values in
 * [0, 1) (indices: valid rows). */
static int setup(const perf_case *p, const awl_backend *b, int dev, perf_buffers *pb)
{
    memset(pb, 0, sizeof *pb);
    for (int k = 0; k < p->nop; k++) {
        awl_view *v = &pb->views[k];
        v->ndim = p->ndim[k];
        v->dtype = p->dtype[k];
        int64_t n = 1, s = 1;
        for (int d = v->ndim - 1; d >= 0; d--) {
            v->shape[d] = p->shape[k][d];
            v->strides[d] = s;
            s *= v->shape[d];
        }
        n = s;
        pb->bytes[k] = (size_t)n * awl_dtype_size(v->dtype);
        v->data = b->alloc(dev, pb->bytes[k]);
        unsigned char *host = malloc(pb->bytes[k]);
        if (!v->data || !host) {
            free(host);
            return AWL_ERR_OOM;
        }
        for (int64_t i = 0; i < n; i++) {
            if (v->dtype == AWL_I32) {
                int32_t x = (int32_t)(i * 7919 % 4096);
                memcpy(host + i * 4, &x, 4);
            } else {
                float x = (float)((double)(i % 1000) / 1000.0);
                memcpy(host + i * 4, &x, 4);
            }
        }
        int rc = b->copy_from_host(dev, v->data, host, pb->bytes[k]);
        free(host);
        if (rc < 0) return rc;
    }
    return AWL_OK;
}

static void teardown(const perf_case *p, const awl_backend *b, int dev, perf_buffers *pb)
{
    for (int k = 0; k < p->nop; k++)
        if (pb->views[k].data) b->free(dev, pb->views[k].data, pb->bytes[k]);
}

/* Seconds per call over a round of at least 50 ms; negative status on
 * failure. */
static double time_round(const perf_case *p, const awl_backend *b, int dev, perf_buffers *pb,
                         int *status)
{
    awl_view *vp[4] = {&pb->views[0], &pb->views[1], &pb->views[2], &pb->views[3]};
    int reps = 0;
    double t0 = now(), t = 0;
    do {
        *status = p->call(b, vp, &p->args);
        if (*status < 0) return -1;
        reps++;
        if (reps % 4 == 0 || reps == 1) {
            b->synchronize(dev);
            t = now() - t0;
        }
    } while (t < 0.05 && reps < 10000);
    b->synchronize(dev);
    return (now() - t0) / reps;
}

int awl_check_perf(const awl_check_options *o)
{
    int status = ac_open_device(o);
    if (status != AWL_OK) return status;
    FILE *f = o->out ? o->out : stdout;
    const awl_backend *dev_b = ac_backend, *cpu = awl_backend_find("cpu");
    int dev = ac_device;
    if (!o->json)
        fprintf(f, "awl-check --perf: device %s against cpu, best of 3 alternating rounds\n",
                o->device ? o->device : "cpu");
    int failed = 0;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        const perf_case *p = &CASES[i];
        if (o->op && o->op[0] && strncmp(o->op, p->name, strlen(o->op)) != 0) continue;
        char shape[64];
        awl_format_shape(p->ndim[p->nop > 1 ? 1 : 0], p->shape[p->nop > 1 ? 1 : 0], shape,
                         sizeof shape);
        if (!awl_backend_has(dev_b, p->kernel)) {
            ac_print(o, "MISSING", p->name, "float32", shape, "no entry in the table");
            continue;
        }
        perf_buffers on_dev, on_cpu;
        int rc = setup(p, dev_b, dev, &on_dev);
        if (rc == AWL_OK) rc = setup(p, cpu, 0, &on_cpu);
        double best_dev = INFINITY, best_cpu = INFINITY;
        for (int round = 0; round < 3 && rc == AWL_OK; round++) {
            double td = time_round(p, dev_b, dev, &on_dev, &rc);
            if (rc < 0) break;
            double tc = time_round(p, cpu, 0, &on_cpu, &rc);
            if (td < best_dev) best_dev = td;
            if (tc < best_cpu) best_cpu = tc;
        }
        teardown(p, dev_b, dev, &on_dev);
        teardown(p, cpu, 0, &on_cpu);
        if (rc < 0) {
            ac_print(o, rc == AWL_ERR_NOT_IMPLEMENTED ? "MISSING" : "FAIL", p->name, "float32",
                     shape, awl_last_error());
            failed += rc != AWL_ERR_NOT_IMPLEMENTED;
            continue;
        }
        double work = p->flops ? p->flops : p->bytes, scale = 1e-9;
        const char *unit = p->flops ? "GFLOP/s" : "GB/s";
        double rate = work / best_dev * scale, cpu_rate = work / best_cpu * scale;
        char detail[200];
        if (o->json)
            snprintf(detail, sizeof detail, "%.2f %s; cpu %.2f; ratio %.3f", rate, unit, cpu_rate,
                     rate / cpu_rate);
        else
            snprintf(detail, sizeof detail, "%8.2f %-7s  cpu %8.2f  %6.3fx  (%.3f ms)", rate, unit,
                     cpu_rate, rate / cpu_rate, best_dev * 1e3);
        ac_print(o, "PERF", p->name, "float32", shape, detail);
    }
    return failed ? AWL_CHECK_FAILED : AWL_CHECK_OK;
}
