/*
 * tests/test_profiler.c - the op profiler and the memory ledger
 * (tensor/profiler.h, tensor/tensor.h).
 *
 * - a recorded training step of a small GPT writes a trace that is valid
 *   JSON (checked by the parser below), holds the expected events (the
 *   step, the forward, backward and optimizer phases, graph nodes, matmul
 *   kernels with their FLOPs, the memory counter), and nests: every
 *   complete event of a thread lies inside the ones it starts in, and
 *   every backward kernel inside the backward phase;
 * - a matmul's FLOPs and bytes are the formulas' (2 M N K; each operand
 *   once, a broadcast axis once);
 * - off, nothing is recorded: kernels and ranges between stop and start
 *   leave the recording as it was;
 * - bad calls fail with a message: start twice, write while recording or
 *   to a folder that does not exist, measure ceilings while recording;
 * - the ledger: after a float32 AdamW step of a GPT with psi parameters,
 *   parameters, gradients and optimizer state are exactly 4 psi, 4 psi and
 *   8 psi bytes; the roles add up to the bytes in use; checkpointing every
 *   block lowers the most the saved activations held;
 * - the peak MFU divides by: known for the CPU, half as much in float64;
 * - on CUDA (skipped without a GPU): kernels are timed on the device, by
 *   events, on a track of their own, and the chip's peak is known.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "awl.h"
#include "helpers/dist_harness.h"
#include "helpers/gradcheck.h"

/* ---- a small JSON parser that keeps the trace's events --------------------------- */

typedef struct trace_event {
    char name[64], cat[64], ph[64], phase[64];
    int pid, tid;
    double ts, dur;
} trace_event;

typedef struct parser {
    const char *p;
    trace_event *events;
    int n_events, cap;
} parser;

static void skip_space(parser *ps)
{
    while (isspace((unsigned char)*ps->p)) ps->p++;
}

/* A string into buf (escapes kept as they are, enough for the keys and
 * names awl writes); false when it is not one. */
static bool parse_string(parser *ps, char *buf, size_t size)
{
    skip_space(ps);
    if (*ps->p != '"') return false;
    size_t n = 0;
    for (ps->p++; *ps->p && *ps->p != '"'; ps->p++) {
        if ((unsigned char)*ps->p < 0x20) return false;
        if (*ps->p == '\\') {
            ps->p++;
            if (!strchr("\"\\/bfnrtu", *ps->p)) return false;
        }
        if (n + 1 < size) buf[n++] = *ps->p;
    }
    if (*ps->p != '"') return false;
    ps->p++;
    if (size) buf[n] = '\0';
    return true;
}

static bool parse_value(parser *ps, int depth, trace_event *e, const char *key);

static bool parse_number(parser *ps, double *out)
{
    skip_space(ps);
    char *end;
    *out = strtod(ps->p, &end);
    if (end == ps->p) return false;
    ps->p = end;
    return true;
}

/* An object; at depth 2 (an element of traceEvents) its fields, and its
 * args' "phase", fill *e. */
static bool parse_object(parser *ps, int depth, trace_event *e)
{
    ps->p++; /* '{' */
    skip_space(ps);
    if (*ps->p == '}') {
        ps->p++;
        return true;
    }
    for (;;) {
        char key[64];
        if (!parse_string(ps, key, sizeof key)) return false;
        skip_space(ps);
        if (*ps->p++ != ':') return false;
        if (!parse_value(ps, depth + 1, e, key)) return false;
        skip_space(ps);
        if (*ps->p == '}') {
            ps->p++;
            return true;
        }
        if (*ps->p++ != ',') return false;
    }
}

static bool parse_array(parser *ps, int depth, const char *key)
{
    ps->p++; /* '[' */
    skip_space(ps);
    if (*ps->p == ']') {
        ps->p++;
        return true;
    }
    for (;;) {
        trace_event *e = NULL;
        skip_space(ps);
        if (depth == 1 && key && strcmp(key, "traceEvents") == 0 && *ps->p == '{') {
            if (ps->n_events == ps->cap) {
                ps->cap = ps->cap ? 2 * ps->cap : 1024;
                ps->events = realloc(ps->events, (size_t)ps->cap * sizeof *ps->events);
            }
            e = &ps->events[ps->n_events++];
            memset(e, 0, sizeof *e);
            e->dur = -1;
        }
        if (!parse_value(ps, depth + 1, e, NULL)) return false;
        skip_space(ps);
        if (*ps->p == ']') {
            ps->p++;
            return true;
        }
        if (*ps->p++ != ',') return false;
    }
}

static bool parse_value(parser *ps, int depth, trace_event *e, const char *key)
{
    skip_space(ps);
    char buf[64];
    double x;
    switch (*ps->p) {
    case '{': return parse_object(ps, depth, e);
    case '[': return parse_array(ps, depth, key);
    case '"':
        if (!parse_string(ps, buf, sizeof buf)) return false;
        if (e && key && depth == 3) {
            if (strcmp(key, "name") == 0) snprintf(e->name, sizeof e->name, "%s", buf);
            if (strcmp(key, "cat") == 0) snprintf(e->cat, sizeof e->cat, "%s", buf);
            if (strcmp(key, "ph") == 0) snprintf(e->ph, sizeof e->ph, "%s", buf);
        }
        if (e && key && depth == 4 && strcmp(key, "phase") == 0)
            snprintf(e->phase, sizeof e->phase, "%s", buf);
        return true;
    case 't': return strncmp(ps->p, "true", 4) == 0 && (ps->p += 4);
    case 'f': return strncmp(ps->p, "false", 5) == 0 && (ps->p += 5);
    case 'n': return strncmp(ps->p, "null", 4) == 0 && (ps->p += 4);
    default:
        if (!parse_number(ps, &x)) return false;
        if (e && key && depth == 3) {
            if (strcmp(key, "ts") == 0) e->ts = x;
            if (strcmp(key, "dur") == 0) e->dur = x;
            if (strcmp(key, "pid") == 0) e->pid = (int)x;
            if (strcmp(key, "tid") == 0) e->tid = (int)x;
        }
        return true;
    }
}

/* The events of the trace at path; ck_assert that the file is one valid
 * JSON value. */
static parser read_trace(const char *path)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)size + 1);
    ck_assert_int_eq(fread(text, 1, (size_t)size, f), size);
    text[size] = '\0';
    fclose(f);
    parser ps = {text, NULL, 0, 0};
    bool ok = parse_value(&ps, 0, NULL, NULL);
    skip_space(&ps);
    ck_assert_msg(ok && *ps.p == '\0', "not valid JSON at offset %ld", (long)(ps.p - text));
    free(text);
    ps.p = NULL;
    return ps;
}

static int count_events(const parser *ps, const char *ph, const char *cat, const char *name)
{
    int n = 0;
    for (int i = 0; i < ps->n_events; i++) {
        const trace_event *e = &ps->events[i];
        n += (!ph || strcmp(e->ph, ph) == 0) && (!cat || strcmp(e->cat, cat) == 0) &&
             (!name || strcmp(e->name, name) == 0);
    }
    return n;
}

/* ---- a small GPT's training step --------------------------------------------------- */

/* the distributed tests' tiny GPT (vocabulary 17, block 8, 2 layers of
 * width 16), 2 sequences a batch */
static awl_gpt_config small_config(void)
{
    awl_gpt_config c = dist_tiny_gpt();
    c.batch = 2;
    return c;
}

/* forward, backward and an AdamW step, in the phases train_gpt marks */
static void train_step(awl_gpt *model, awl_optimizer *opt, const awl_gpt_config *c)
{
    int32_t x[64], y[64];
    for (int i = 0; i < c->batch * c->block; i++) {
        x[i] = (i * 7) % c->vocab;
        y[i] = (i * 5 + 3) % c->vocab;
    }
    awl_profiler_begin(AWL_PROFILE_STEP, "step");
    awl_profiler_begin(AWL_PROFILE_PHASE, "forward");
    awl_scope_begin();
    awl_tensor *xi = awl_from_data(x, AWL_SHAPE(c->batch, c->block), AWL_I32, "cpu");
    awl_tensor *yi = awl_from_data(y, AWL_SHAPE(c->batch, c->block), AWL_I32, "cpu");
    awl_tensor *loss = awl_retain(awl_gpt_loss(model, xi, yi)); /* outlives the scope */
    awl_scope_end();
    awl_profiler_end();
    ck_assert_msg(loss && awl_backward(loss) == 0, "%s", awl_last_error());
    awl_release(loss);
    ck_assert_int_eq(awl_optimizer_step(opt), 0);
    awl_optimizer_zero_grad_ex(opt, true);
    awl_profiler_end();
}

START_TEST(test_trace_of_a_step)
{
    awl_gc_begin(1);
    awl_gpt_config c = small_config();
    awl_gpt *model = awl_gpt_new(&c, "cpu", 7);
    awl_optimizer *opt = awl_adamw_new(awl_gpt_parameters(model), 1e-3, 0.9, 0.95, 1e-8, 0.1);
    ck_assert_ptr_nonnull(opt);
    ck_assert_int_eq(awl_profiler_start(), 0);
    ck_assert(awl_profiler_recording());
    train_step(model, opt, &c);
    awl_profiler_stop();
    ck_assert(!awl_profiler_recording());
    char path[] = "/tmp/awl_trace_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_msg(awl_profiler_write(path) == 0, "%s", awl_last_error());
    parser ps = read_trace(path);
    remove(path);

    ck_assert_int_eq(count_events(&ps, "X", "step", "step"), 1);
    ck_assert_int_eq(count_events(&ps, "X", "phase", "forward"), 1);
    ck_assert_int_eq(count_events(&ps, "X", "phase", "backward"), 1);
    ck_assert_int_eq(count_events(&ps, "X", "phase", "optimizer"), 1);
    ck_assert_int_ge(count_events(&ps, "X", "op", NULL), 10); /* the graph's nodes */
    ck_assert_int_ge(count_events(&ps, "X", "kernel", "matmul"), 6);
    ck_assert_int_ge(count_events(&ps, "C", NULL, "memory cpu"), 10);
    /* complete events of a thread nest, and backward kernels lie in the
     * backward phase */
    const trace_event *backward = NULL;
    for (int i = 0; i < ps.n_events; i++)
        if (strcmp(ps.events[i].name, "backward") == 0) backward = &ps.events[i];
    const double slack = 0.002; /* microseconds: the printed precision */
    int kernels_in_backward = 0;
    for (int i = 0; i < ps.n_events; i++) {
        const trace_event *a = &ps.events[i];
        if (strcmp(a->ph, "X") != 0) continue;
        ck_assert(a->ts >= 0 && a->dur >= 0);
        for (int j = 0; j < ps.n_events; j++) {
            const trace_event *b = &ps.events[j];
            if (j == i || strcmp(b->ph, "X") != 0 || b->tid != a->tid || b->pid != a->pid) continue;
            bool starts_inside = b->ts >= a->ts && b->ts < a->ts + a->dur;
            if (starts_inside && !(b->ts == a->ts && b->dur > a->dur))
                ck_assert_msg(b->ts + b->dur <= a->ts + a->dur + slack,
                              "%s (%.3f +%.3f) starts in %s (%.3f +%.3f) but ends after it",
                              b->name, b->ts, b->dur, a->name, a->ts, a->dur);
        }
        if (strcmp(a->cat, "kernel") == 0 && strcmp(a->phase, "backward") == 0) {
            kernels_in_backward++;
            ck_assert(a->ts >= backward->ts - slack &&
                      a->ts + a->dur <= backward->ts + backward->dur + slack);
        }
    }
    ck_assert_int_gt(kernels_in_backward, 10);
    free(ps.events);

    awl_profile_totals t;
    ck_assert_int_eq(awl_profiler_totals(&t), 0);
    ck_assert_int_eq(t.steps, 1);
    ck_assert(t.kernel_seconds > 0 && t.kernel_seconds <= t.step_seconds);
    bool forward_matmul = false;
    for (int i = 0; i < t.n_ops; i++) {
        forward_matmul |= strcmp(t.ops[i].name, "matmul") == 0 &&
                          strcmp(t.ops[i].phase, "forward") == 0 && t.ops[i].flops > 0;
        if (i > 0) ck_assert(t.ops[i - 1].seconds >= t.ops[i].seconds);
    }
    ck_assert(forward_matmul);
    awl_profile_totals_free(&t);
    awl_profiler_clear();
    awl_optimizer_free(opt);
    awl_gpt_free(model);
    ck_assert(awl_gc_end());
}
END_TEST

START_TEST(test_counts_of_a_matmul)
{
    awl_gc_begin(2);
    awl_scope_begin();
    awl_tensor *a = awl_randn(AWL_SHAPE(3, 5), AWL_F32, "cpu");
    awl_tensor *b = awl_randn(AWL_SHAPE(5, 4), AWL_F32, "cpu");
    awl_tensor *bias = awl_randn(AWL_SHAPE(4), AWL_F32, "cpu");
    ck_assert_int_eq(awl_profiler_start(), 0);
    awl_tensor *c = awl_tensor_matmul(a, b);
    awl_tensor *d = awl_tensor_binary(AWL_BINARY_ADD, c, bias); /* bias broadcast over rows */
    awl_profiler_stop();
    ck_assert(c && d);
    awl_profile_totals t;
    ck_assert_int_eq(awl_profiler_totals(&t), 0);
    ck_assert_int_eq(t.n_ops, 2);
    for (int i = 0; i < 2; i++) {
        const awl_profile_op *op = &t.ops[i];
        ck_assert_int_eq(op->calls, 1);
        ck_assert_str_eq(op->phase, "other");
        if (strcmp(op->name, "matmul") == 0) {
            ck_assert_double_eq(op->flops, 2.0 * 3 * 4 * 5);
            ck_assert_double_eq(op->bytes, 4.0 * (3 * 5 + 5 * 4 + 3 * 4));
        } else {
            ck_assert_str_eq(op->name, "add");
            ck_assert_double_eq(op->flops, 12);
            ck_assert_double_eq(op->bytes, 4.0 * (12 + 12 + 4));
        }
    }
    awl_profile_totals_free(&t);
    awl_profiler_clear();
    awl_scope_end();
    ck_assert(awl_gc_end());
}
END_TEST

START_TEST(test_off_records_nothing)
{
    awl_gc_begin(3);
    awl_scope_begin();
    awl_tensor *a = awl_randn(AWL_SHAPE(8, 8), AWL_F32, "cpu");
    ck_assert(!awl_profiler_recording());
    ck_assert_int_eq(awl_profiler_start(), 0);
    awl_profiler_begin(AWL_PROFILE_PHASE, "forward");
    ck_assert_ptr_nonnull(awl_tensor_matmul(a, a));
    awl_profiler_end();
    awl_profiler_stop();
    /* off: neither kernels nor ranges reach the recording */
    awl_profiler_begin(AWL_PROFILE_STEP, "step");
    ck_assert_ptr_nonnull(awl_tensor_matmul(a, a));
    ck_assert_ptr_nonnull(awl_tensor_unary(AWL_UNARY_EXP, a, 0));
    awl_profiler_instant(AWL_PROFILE_COMM, "bucket 0 ready");
    awl_profiler_async_begin("bucket 0", 1);
    awl_profiler_async_end(1);
    awl_profiler_end();
    awl_profile_totals t;
    ck_assert_int_eq(awl_profiler_totals(&t), 0);
    ck_assert_int_eq(t.steps, 0);
    ck_assert_int_eq(t.n_ops, 1);
    ck_assert_str_eq(t.ops[0].name, "matmul");
    ck_assert_str_eq(t.ops[0].phase, "forward");
    ck_assert_int_eq(t.ops[0].calls, 1);
    ck_assert_int_eq(t.n_phases, 1);
    awl_profile_totals_free(&t);
    /* a new recording starts empty */
    ck_assert_int_eq(awl_profiler_start(), 0);
    awl_profiler_stop();
    ck_assert_int_eq(awl_profiler_totals(&t), 0);
    ck_assert_int_eq(t.n_ops, 0);
    ck_assert_int_eq(t.n_phases, 0);
    awl_profile_totals_free(&t);
    awl_profiler_clear();
    awl_scope_end();
    ck_assert(awl_gc_end());
}
END_TEST

START_TEST(test_bad_calls)
{
    awl_gc_begin(4);
    ck_assert_int_eq(awl_profiler_start(), 0);
    ck_assert_int_eq(awl_profiler_start(), AWL_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "records already"));
    ck_assert_int_eq(awl_profiler_write("/tmp/awl_never.json"), AWL_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "still records"));
    awl_roofline r;
    ck_assert_int_eq(awl_roofline_measure("cpu", AWL_F32, &r), AWL_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "measure after stopping"));
    awl_profile_totals t;
    ck_assert_int_eq(awl_profiler_totals(&t), AWL_ERR_INVALID);
    awl_profiler_stop();
    awl_profiler_stop(); /* a no-op */
    ck_assert_int_eq(awl_profiler_write("/nonexistent/folder/trace.json"), AWL_ERR_IO);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "cannot write /nonexistent/folder/trace.json"));
    ck_assert_int_eq(awl_profiler_write_summary("/nonexistent/folder/s.tsv", NULL), AWL_ERR_IO);
    awl_profiler_end(); /* an end without a begin is ignored */
    awl_profiler_clear();
    awl_clear_error();
    ck_assert(awl_gc_end());
}
END_TEST

/* ---- the ledger ---------------------------------------------------------------------- */

/* The ledger after reset and one training step, with checkpointing or not. */
static awl_memory_ledger ledger_of_step(bool checkpointing, int64_t *psi)
{
    awl_gpt_config c = small_config();
    c.n_layer = 4;
    awl_gpt *model = awl_gpt_new(&c, "cpu", 7);
    awl_gpt_set_checkpointing(model, checkpointing);
    awl_optimizer *opt = awl_adamw_new(awl_gpt_parameters(model), 1e-3, 0.9, 0.95, 1e-8, 0.1);
    ck_assert_ptr_nonnull(opt);
    *psi = awl_gpt_num_params(model);
    awl_memory_reset_peak("cpu");
    train_step(model, opt, &c);
    awl_memory_ledger l;
    ck_assert_int_eq(awl_memory_get_ledger("cpu", &l), 0);
    /* the roles split the bytes in use exactly */
    awl_memory_stats st;
    awl_memory_get_stats("cpu", &st);
    int64_t sum = 0;
    for (int r = 0; r < AWL_MEMORY_ROLE_COUNT; r++) sum += l.now[r];
    ck_assert_int_eq(sum, st.in_use);
    ck_assert_int_eq(l.peak, st.peak);
    awl_optimizer_free(opt);
    awl_gpt_free(model);
    return l;
}

START_TEST(test_ledger_formulas)
{
    awl_gc_begin(5);
    int64_t psi;
    awl_memory_ledger plain = ledger_of_step(false, &psi);
    ck_assert_int_eq(plain.max[AWL_MEMORY_PARAMETER], 4 * psi);
    ck_assert_int_eq(plain.max[AWL_MEMORY_GRADIENT], 4 * psi);
    ck_assert_int_eq(plain.max[AWL_MEMORY_OPTIMIZER], 8 * psi);
    ck_assert_int_gt(plain.max[AWL_MEMORY_ACTIVATION], 0);
    ck_assert_int_eq(plain.now[AWL_MEMORY_ACTIVATION], 0); /* backward dropped them all */
    ck_assert_int_eq(plain.now[AWL_MEMORY_GRADIENT], 0);   /* zero_grad set them to none */
    int64_t psi2;
    awl_memory_ledger ckpt = ledger_of_step(true, &psi2);
    ck_assert_int_eq(psi2, psi);
    ck_assert_int_eq(ckpt.max[AWL_MEMORY_PARAMETER], 4 * psi);
    ck_assert_int_eq(ckpt.max[AWL_MEMORY_GRADIENT], 4 * psi);
    ck_assert_int_eq(ckpt.max[AWL_MEMORY_OPTIMIZER], 8 * psi);
    ck_assert_msg(ckpt.max[AWL_MEMORY_ACTIVATION] < plain.max[AWL_MEMORY_ACTIVATION] * 3 / 4,
                  "checkpointing: %lld saved-activation bytes, without: %lld",
                  (long long)ckpt.max[AWL_MEMORY_ACTIVATION],
                  (long long)plain.max[AWL_MEMORY_ACTIVATION]);
    ck_assert(awl_gc_end());
}
END_TEST

START_TEST(test_ledger_tags)
{
    awl_gc_begin(6);
    awl_scope_begin();
    awl_memory_ledger before, after;
    awl_memory_get_ledger("cpu", &before);
    awl_tensor *t = awl_zeros(AWL_SHAPE(10), AWL_F32, "cpu");
    ck_assert_int_eq(awl_tensor_set_memory_role(t, AWL_MEMORY_OPTIMIZER), 0);
    awl_memory_get_ledger("cpu", &after);
    ck_assert_int_eq(after.now[AWL_MEMORY_OPTIMIZER] - before.now[AWL_MEMORY_OPTIMIZER], 40);
    ck_assert_int_eq(after.now[AWL_MEMORY_TEMPORARY], before.now[AWL_MEMORY_TEMPORARY]);
    ck_assert_int_eq(awl_tensor_set_memory_role(t, AWL_MEMORY_ACTIVATION), AWL_ERR_INVALID);
    ck_assert_int_eq(awl_tensor_set_memory_role(t, AWL_MEMORY_ROLE_COUNT), AWL_ERR_INVALID);
    ck_assert_int_eq(awl_tensor_set_memory_role(NULL, AWL_MEMORY_PARAMETER), 0);
    ck_assert_str_eq(awl_memory_role_name(AWL_MEMORY_ACTIVATION), "saved activations");
    awl_scope_end();
    awl_memory_get_ledger("cpu", &after);
    ck_assert_int_eq(after.now[AWL_MEMORY_OPTIMIZER], before.now[AWL_MEMORY_OPTIMIZER]);
    awl_clear_error();
    ck_assert(awl_gc_end());
}
END_TEST

START_TEST(test_peak_flops)
{
    char source[160];
    double f32 = awl_device_peak_flops("cpu", AWL_F32, source, sizeof source);
    ck_assert_msg(f32 > 1e9, "%g FLOP/s (%s)", f32, source);
    ck_assert_ptr_nonnull(strstr(source, "FMA peak"));
    double f64 = awl_device_peak_flops("cpu", AWL_F64, NULL, 0);
    ck_assert_double_eq_tol(f64, f32 / 2, f32 * 1e-9);
    ck_assert_double_eq(awl_device_peak_flops("cpu", AWL_I32, NULL, 0), 0);
    ck_assert_double_eq(awl_device_peak_flops("nonsense", AWL_F32, source, sizeof source), 0);
    awl_clear_error();
}
END_TEST

START_TEST(test_cuda_device_time)
{
    if (!awl_device_available("cuda")) {
        printf("test_cuda_device_time: skipped: no CUDA device\n");
        awl_clear_error();
        return;
    }
    awl_gc_begin(7);
    awl_scope_begin();
    awl_tensor *a = awl_randn(AWL_SHAPE(1024, 1024), AWL_F32, "cuda");
    awl_tensor *b = awl_randn(AWL_SHAPE(1024, 1024), AWL_F32, "cuda");
    ck_assert_int_eq(awl_profiler_start(), 0);
    awl_profiler_begin(AWL_PROFILE_STEP, "step");
    for (int i = 0; i < 4; i++) ck_assert_ptr_nonnull(awl_tensor_matmul(a, b));
    ck_assert_int_eq(awl_synchronize("cuda"), 0);
    awl_profiler_end();
    awl_profiler_stop();
    awl_profile_totals t;
    ck_assert_int_eq(awl_profiler_totals(&t), 0);
    ck_assert_int_eq(t.n_ops, 1);
    ck_assert_int_eq(t.ops[0].calls, 4);
    /* 4 products of 2 GFLOP each: device time, well above zero and below the step */
    ck_assert_msg(t.ops[0].seconds > 1e-6 && t.ops[0].seconds <= t.step_seconds,
                  "matmul %g s in a step of %g s", t.ops[0].seconds, t.step_seconds);
    awl_profile_totals_free(&t);
    char path[] = "/tmp/awl_trace_cuda_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    ck_assert_int_eq(awl_profiler_write(path), 0);
    parser ps = read_trace(path);
    remove(path);
    int on_device = 0;
    for (int i = 0; i < ps.n_events; i++)
        on_device += strcmp(ps.events[i].cat, "kernel") == 0 && ps.events[i].pid == 2;
    ck_assert_int_eq(on_device, 4);
    free(ps.events);
    awl_profiler_clear();
    char source[160];
    double peak = awl_device_peak_flops("cuda", AWL_BF16, source, sizeof source);
    printf("test_cuda_device_time: bf16 peak %g FLOP/s (%s)\n", peak, source);
    if (strstr(source, "H100") || strstr(source, "H200")) ck_assert(peak > 900e12);
    awl_scope_end();
    ck_assert(awl_gc_end());
}
END_TEST

int main(void)
{
    return AWL_GC_RUN_SUITE("profiler", test_trace_of_a_step, test_counts_of_a_matmul,
                            test_off_records_nothing, test_bad_calls, test_ledger_formulas,
                            test_ledger_tags, test_peak_flops, test_cuda_device_time);
}
