/*
 * examples/train_gpt/profile.c - what a run measures about itself besides
 * its loss: the op profiler (--profile), MFU's denominator, and the memory
 * ledger (--memory-ledger, and the CSV log's mem_* columns).
 *
 * The profiler records whole steps: it starts before step A's data is
 * drawn and stops after step B (and B's evaluation, when there is one), so
 * the trace holds the steps' ranges, every kernel of their forward,
 * backward and optimizer step, and the memory track. The summary's
 * ceilings are measured just before the recording starts, so their own
 * kernels are not in it.
 *
 * The ledger is the tensor layer's (awl_memory_get_ledger): every byte the
 * device holds is counted under one role. Each step starts with
 * awl_memory_reset_peak, so a step's figures are the most each role held
 * during that step, and its peak.
 */
#include <string.h>
#include <unistd.h>

#include "train_gpt.h"

int parse_profile_steps(settings *s)
{
    long long a, b;
    char extra;
    bool given = option_given(s, "profile-steps");
    if (given && !s->profile)
        return complain("--profile-steps %s needs --profile PATH (where the trace goes)",
                        s->profile_steps);
    if (sscanf(s->profile_steps, "%lld:%lld%c", &a, &b, &extra) != 2 || a < 1 || b < a)
        return complain("--profile-steps %s: expected A:B, the first and the last step to record "
                        "(1 <= A <= B)",
                        s->profile_steps);
    if (given && s->profile && b > s->steps)
        return complain("--profile-steps %s: the run ends at step %lld (--steps)", s->profile_steps,
                        (long long)s->steps);
    /* the default, 2:4, is cut to a shorter run */
    s->profile_to = b < s->steps ? b : s->steps;
    s->profile_from = a < s->profile_to ? a : s->profile_to;
    return 0;
}

double mfu_peak(const trainer *t, char *source, size_t size)
{
    const settings *s = &t->s;
    if (s->peak_gflops > 0) {
        snprintf(source, size, "--peak-gflops");
        return s->peak_gflops * 1e9 * t->world;
    }
    awl_dtype dtype = strcmp(s->precision, "bf16") == 0 ? AWL_BF16 : AWL_F32;
    return awl_device_peak_flops(s->device, dtype, source, size) * t->world;
}

/* The summary's ceilings, measured before the recording starts (and
 * before the step's peak is reset: the probes' buffers are not the step's). */
static awl_roofline ceilings;

int profile_step_begin(trainer *t, int64_t step)
{
    const settings *s = &t->s;
    static bool started, told;
    if (s->profile && step > s->profile_from && !started && !told) {
        told = true; /* a resumed run that starts after the steps asked for */
        printf("train_gpt: --profile-steps %s: the run starts at step %lld, after step %lld: "
               "nothing is recorded\n",
               s->profile_steps, (long long)step, (long long)s->profile_from);
    }
    bool start = s->profile && step == s->profile_from;
    awl_dtype dtype = strcmp(s->precision, "bf16") == 0 ? AWL_BF16 : AWL_F32;
    if (start && is_leader(t) && awl_roofline_measure(s->device, dtype, &ceilings) < 0)
        return fail("--profile");
    awl_memory_reset_peak(s->device);
    if (start) {
        started = true;
        awl_profiler_name_thread("main"); /* the trace's name for this thread's track */
        if (awl_profiler_start() < 0) return fail("--profile");
    }
    awl_profiler_begin(AWL_PROFILE_STEP, "step");
    return 0;
}

/* PATH's summary file: "trace.json" -> "trace.summary.tsv". */
static void summary_path(const char *trace, char *buf, size_t size)
{
    size_t n = strlen(trace);
    if (n > 5 && strcmp(trace + n - 5, ".json") == 0) n -= 5;
    snprintf(buf, size, "%.*s.summary.tsv", (int)n, trace);
}

int profile_step_end(trainer *t, int64_t step, bool last)
{
    const settings *s = &t->s;
    if (!awl_profiler_recording() || (step < s->profile_to && !last)) return 0;
    awl_profiler_stop();
    int status = 0;
    if (is_leader(t)) {
        char tsv[1024];
        summary_path(s->profile, tsv, sizeof tsv);
        if (awl_profiler_write(s->profile) < 0 || awl_profiler_write_summary(tsv, &ceilings) < 0)
            status = fail("--profile");
        else {
            printf("profile: steps %lld to %lld in %s (open it in https://ui.perfetto.dev), "
                   "summary in %s\n",
                   (long long)s->profile_from, (long long)step, s->profile, tsv);
            awl_profiler_print_summary(stdout, &ceilings);
        }
    }
    awl_profiler_clear();
    return status;
}

void ledger_step(trainer *t, int64_t step, bool print, awl_memory_ledger *out)
{
    awl_memory_get_ledger(t->s.device, out);
    if (!print || !t->s.memory_ledger) return;
    if (isatty(STDOUT_FILENO)) printf("\r\033[K"); /* over the progress bar */
    printf("memory step %lld:", (long long)step);
    for (int r = 0; r < AWL_MEMORY_ROLE_COUNT; r++)
        printf(" %s %.3f MB,", awl_memory_role_name((awl_memory_role)r), out->max[r] / 1e6);
    printf(" cached free %.3f MB, peak %.3f MB\n", out->cached_free / 1e6, out->peak / 1e6);
    if (t->world > 1 || t->tp_model) return;
    /* float32 AdamW: 4 bytes a parameter, 4 a gradient, 8 of moments */
    int64_t psi = awl_gpt_num_params(t->model);
    const struct {
        awl_memory_role role;
        int per;
    } expect[] = {{AWL_MEMORY_PARAMETER, 4}, {AWL_MEMORY_GRADIENT, 4}, {AWL_MEMORY_OPTIMIZER, 8}};
    printf("memory step %lld: with psi = %lld parameters:", (long long)step, (long long)psi);
    for (int i = 0; i < 3; i++) {
        int64_t have = out->max[expect[i].role], want = expect[i].per * psi;
        printf(" %s %lld %s %d psi%s", awl_memory_role_name(expect[i].role), (long long)have,
               have == want ? "=" : "!=", expect[i].per, i < 2 ? "," : "\n");
    }
}
