/*
 * tests/helpers/dist_collectives.h - every collective of a process group,
 * checked on one transport: what tests/test_dist.c (TCP, host tensors) and
 * tests/test_nccl.c (NCCL, each rank's GPU) share.
 *
 *     static const dist_collectives_case tcp = {"tcp", false, dtypes, 3, sizes, 5, false};
 *     dist_run *run = dist_run_ranks(world, 120, dist_all_collectives, (void *)&tcp);
 *     dist_check_all_ok(run, world);
 *
 * Every rank runs allreduce (sum, max, avg), broadcast, allgather,
 * reduce_scatter, their _v forms with uneven shares (zeros among them),
 * send/recv around the ring and barrier, for each dtype and size of the
 * case, then an allreduce of a transposed view (staged through a copy).
 * Values are small integers, exact in every dtype (bfloat16 too) and every
 * summation order, so a result is right or wrong, never "close"; averages
 * are exact where the transport divides the sum once (awl's ring), and
 * within a few units of the dtype's last place where it multiplies each
 * rank's value by 1/n first (NCCL's ncclAvg).
 */
#ifndef AWL_TESTS_DIST_COLLECTIVES_H
#define AWL_TESTS_DIST_COLLECTIVES_H

#include <check.h>
#include <math.h>

#include "helpers/dist_harness.h"

typedef struct dist_collectives_case {
    const char *backend; /* "tcp", "nccl" */
    bool gpu;            /* tensors on the rank's GPU (cuda:<rank>, its LOCAL_RANK), else the CPU */
    const awl_dtype *dtypes;
    int n_dtypes;
    const int64_t *sizes;
    int n_sizes;
    bool approx_avg; /* averages within dist_avg_tolerance, not exact */
} dist_collectives_case;

/* The options of rank me for the case's transport. */
static inline awl_dist_options dist_case_options(const dist_rank *me, const dist_collectives_case *c)
{
    awl_dist_options o = dist_test_options(me);
    o.backend = c->backend;
    if (c->gpu) o.local_rank = me->rank;
    return o;
}

/* What rank r contributes at element i. */
static inline double dist_value_at(int r, int64_t i) { return (double)((r + 1) * 3 + (i % 17)) - 8.0; }

/* Rank r's values [0, n) as a tensor of dtype on device. */
static inline awl_tensor *dist_filled(int r, int64_t n, awl_dtype dtype, const char *device)
{
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = dist_value_at(r, i);
    awl_tensor *t = awl_tensor_cast(awl_from_data(v, AWL_SHAPE(n), AWL_F64, "cpu"), dtype);
    free(v);
    return awl_tensor_to_device(t, device);
}

/* Relative error allowed in an average of dtype (NCCL's: each value times
 * 1/n, rounded, then summed and rounded). */
static inline double dist_avg_tolerance(awl_dtype dtype)
{
    return dtype == AWL_BF16 ? 2e-2 : dtype == AWL_F32 ? 1e-6 : 1e-12;
}

/* Compares t with want[0..n), within tol relative (0: exactly); writes a
 * message into me on the first miss. */
static inline bool dist_expect(dist_rank *me, const char *what, awl_tensor *t, const double *want,
                               int64_t n, double tol)
{
    double *got = malloc((size_t)(n ? n : 1) * sizeof *got);
    awl_scope_begin();
    int status = awl_to_host(awl_tensor_cast(t, AWL_F64), got, (size_t)n * sizeof *got);
    awl_scope_end();
    bool ok = status == 0;
    if (!ok)
        snprintf(me->message, sizeof me->message, "rank %d: %s: reading the result: %s", me->rank,
                 what, awl_last_error());
    for (int64_t i = 0; i < n && ok; i++)
        if (fabs(got[i] - want[i]) > tol * fmax(1, fabs(want[i]))) {
            snprintf(me->message, sizeof me->message,
                     "rank %d: %s (%s, %lld elements): element %lld is %g, want %g", me->rank, what,
                     awl_dtype_name(t->dtype), (long long)n, (long long)i, got[i], want[i]);
            ok = false;
        }
    free(got);
    return ok;
}

/* Every collective on every size and dtype of the case (me->arg); reports
 * the first failure. */
static inline void dist_all_collectives(dist_rank *me)
{
    const dist_collectives_case *c = me->arg;
    awl_dist_options o = dist_case_options(me, c);
    awl_process_group *pg = dist_test_init(me, &o);
    if (!pg) return;
    int n = me->world, r = me->rank;
    char dev[32] = "cpu";
    if (c->gpu) snprintf(dev, sizeof dev, "cuda:%d", r);
    /* a host transport needs itself only for two ranks or more */
    const char *over = n == 1 && !c->gpu ? "none" : c->backend;
    bool ok = strcmp(awl_dist_backend(pg), over) == 0;
    if (!ok)
        snprintf(me->message, sizeof me->message, "the group runs over %s, not %s",
                 awl_dist_backend(pg), over);
    for (int di = 0; di < c->n_dtypes && ok; di++) {
        for (int si = 0; si < c->n_sizes && ok; si++) {
            awl_dtype dt = c->dtypes[di];
            int64_t count = c->sizes[si];
            awl_scope_begin();
            double *want = malloc((size_t)(count * n + 3 * n + 1) * sizeof *want);
            /* allreduce: sum, max, avg */
            awl_tensor *t = dist_filled(r, count, dt, dev);
            ok = awl_dist_allreduce(pg, t, AWL_DIST_SUM) == 0;
            for (int64_t i = 0; i < count; i++) {
                want[i] = 0;
                for (int k = 0; k < n; k++) want[i] += dist_value_at(k, i);
            }
            ok = ok && dist_expect(me, "allreduce sum", t, want, count, 0);
            t = dist_filled(r, count, dt, dev);
            ok = ok && awl_dist_allreduce(pg, t, AWL_DIST_MAX) == 0;
            for (int64_t i = 0; i < count; i++) want[i] = dist_value_at(n - 1, i);
            ok = ok && dist_expect(me, "allreduce max", t, want, count, 0);
            if (dt != AWL_I32) {
                t = dist_filled(r, count, dt, dev);
                ok = ok && awl_dist_allreduce(pg, t, AWL_DIST_AVG) == 0;
                for (int64_t i = 0; i < count; i++) {
                    double s = 0;
                    for (int k = 0; k < n; k++) s += dist_value_at(k, i);
                    want[i] = dt == AWL_F32 && !c->approx_avg ? (double)((float)s / (float)n) : s / n;
                }
                ok = ok && dist_expect(me, "allreduce avg", t, want, count,
                                       c->approx_avg ? dist_avg_tolerance(dt) : 0);
            }
            /* broadcast from the last rank */
            t = dist_filled(r, count, dt, dev);
            ok = ok && awl_dist_broadcast(pg, t, n - 1) == 0;
            for (int64_t i = 0; i < count; i++) want[i] = dist_value_at(n - 1, i);
            ok = ok && dist_expect(me, "broadcast", t, want, count, 0);
            /* allgather */
            awl_tensor *all = awl_zeros(AWL_SHAPE(count * n), dt, dev);
            ok = ok && awl_dist_allgather(pg, all, dist_filled(r, count, dt, dev)) == 0;
            for (int k = 0; k < n; k++)
                for (int64_t i = 0; i < count; i++) want[k * count + i] = dist_value_at(k, i);
            ok = ok && dist_expect(me, "allgather", all, want, count * n, 0);
            /* reduce_scatter: rank k's input element j is dist_value_at(k, j) */
            awl_tensor *mine = awl_zeros(AWL_SHAPE(count), dt, dev);
            ok = ok && awl_dist_reduce_scatter(pg, mine, dist_filled(r, count * n, dt, dev),
                                               AWL_DIST_SUM) == 0;
            for (int64_t i = 0; i < count; i++) {
                want[i] = 0;
                for (int k = 0; k < n; k++) want[i] += dist_value_at(k, r * count + i);
            }
            ok = ok && dist_expect(me, "reduce_scatter", mine, want, count, 0);
            /* the _v forms: uneven shares, zeros among them */
            int64_t counts[DIST_MAX_RANKS], total = 0, before = 0;
            for (int k = 0; k < n; k++) {
                counts[k] = (count + k * 7) % (count + 3);
                if (k < r) before += counts[k];
                total += counts[k];
            }
            awl_tensor *gathered = awl_zeros(AWL_SHAPE(total), dt, dev);
            awl_tensor *share =
                awl_tensor_slice(dist_filled(r, total, dt, dev), 0, before, before + counts[r], 1);
            ok = ok && awl_dist_allgather_v(pg, gathered, share, counts) == 0;
            for (int k = 0, at = 0; k < n; k++)
                for (int64_t i = 0; i < counts[k]; i++, at++) want[at] = dist_value_at(k, at);
            ok = ok && dist_expect(me, "allgather_v", gathered, want, total, 0);
            awl_tensor *mine_v = awl_zeros(AWL_SHAPE(counts[r]), dt, dev);
            ok = ok && awl_dist_reduce_scatter_v(pg, mine_v, dist_filled(r, total, dt, dev), counts,
                                                 AWL_DIST_MAX) == 0;
            for (int64_t i = 0; i < counts[r]; i++) want[i] = dist_value_at(n - 1, before + i);
            ok = ok && dist_expect(me, "reduce_scatter_v", mine_v, want, counts[r], 0);
            /* send/recv around the ring */
            if (n > 1) {
                awl_work *s = awl_dist_send_async(pg, dist_filled(r, count, dt, dev), (r + 1) % n);
                awl_tensor *got = awl_zeros(AWL_SHAPE(count), dt, dev);
                ok = ok && awl_dist_recv(pg, got, (r + n - 1) % n) == 0;
                ok = awl_work_wait(s) == 0 && ok;
                for (int64_t i = 0; i < count; i++) want[i] = dist_value_at((r + n - 1) % n, i);
                ok = ok && dist_expect(me, "recv", got, want, count, 0);
            }
            ok = ok && awl_dist_barrier(pg) == 0;
            if (!ok && !me->message[0])
                snprintf(me->message, sizeof me->message, "rank %d: %s", r, awl_last_error());
            free(want);
            awl_scope_end();
        }
    }
    /* a strided tensor: the transpose of a (3,5) */
    awl_scope_begin();
    awl_tensor *m = awl_tensor_transpose(
        awl_tensor_reshape(dist_filled(r, 15, AWL_F32, dev), AWL_SHAPE(3, 5)), 0, 1);
    ok = ok && awl_dist_allreduce(pg, m, AWL_DIST_SUM) == 0;
    double want[15];
    for (int a = 0; a < 5; a++)
        for (int b = 0; b < 3; b++) {
            want[a * 3 + b] = 0;
            for (int k = 0; k < n; k++) want[a * 3 + b] += dist_value_at(k, b * 5 + a);
        }
    ok = ok && dist_expect(me, "allreduce of a transposed view", m, want, 15, 0);
    awl_scope_end();
    if (!ok && !me->message[0])
        snprintf(me->message, sizeof me->message, "rank %d: %s", r, awl_last_error());
    me->status = ok ? 0 : -1;
    awl_dist_destroy(pg);
}

/* Every rank reported success and exited cleanly (LeakSanitizer included). */
static inline void dist_check_all_ok(dist_run *run, int world)
{
    ck_assert_msg(!run->timed_out, "the ranks did not finish in time");
    for (int r = 0; r < world; r++)
        ck_assert_msg(run->rank[r].status == 0 && WIFEXITED(run->exit_status[r]) &&
                          WEXITSTATUS(run->exit_status[r]) == 0,
                      "rank %d: status %d (exit %d): %s", r, run->rank[r].status,
                      run->exit_status[r], run->rank[r].message);
}

#endif
