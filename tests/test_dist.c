/*
 * tests/test_dist.c - the process group's collectives over TCP on
 * loopback: every operation for world sizes 1-4, sizes 0, 1, 7, 3 MiB and
 * sizes no world size divides, every dtype, strided tensors, and the same
 * bits on every rank and in every run.
 *
 * Each case forks one process per rank (tests/helpers/dist_harness.h);
 * values are small integers (exact in every dtype and every summation
 * order), so a result is either right or wrong, never "close".
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "awl.h"
#include "helpers/dist_harness.h"

/* What rank r contributes at element i. */
static double value_at(int r, int64_t i) { return (double)((r + 1) * 3 + (i % 17)) - 8.0; }

static awl_tensor *filled(int r, int64_t n, awl_dtype dtype)
{
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = value_at(r, i);
    awl_tensor *t = awl_tensor_cast(awl_from_data(v, AWL_SHAPE(n), AWL_F64, "cpu"), dtype);
    free(v);
    return t;
}

/* Compares t with want[0..n); writes a message into me on the first miss. */
static bool expect(dist_rank *me, const char *what, awl_tensor *t, const double *want, int64_t n)
{
    double *got = malloc((size_t)(n ? n : 1) * sizeof *got);
    awl_scope_begin();
    awl_to_host(awl_tensor_cast(t, AWL_F64), got, (size_t)n * sizeof *got);
    awl_scope_end();
    bool ok = true;
    for (int64_t i = 0; i < n && ok; i++)
        if (got[i] != want[i]) {
            snprintf(me->message, sizeof me->message,
                     "rank %d: %s (%s, %lld elements): element %lld is %g, want %g", me->rank, what,
                     awl_dtype_name(t->dtype), (long long)n, (long long)i, got[i], want[i]);
            ok = false;
        }
    free(got);
    return ok;
}

static const awl_dtype dtypes[] = {AWL_F32, AWL_F64, AWL_I32};
static const int64_t sizes[] = {0, 1, 7, 1000003, 786432 /* 3 MiB of float32 */};

/* Every collective on every size and dtype; reports the first failure. */
static void all_collectives(dist_rank *me)
{
    awl_dist_options o = dist_test_options(me);
    awl_process_group *pg = awl_dist_init(&o);
    if (!pg) {
        snprintf(me->message, sizeof me->message, "init: %s", awl_last_error());
        me->status = -1;
        return;
    }
    int n = me->world, r = me->rank;
    bool ok = true;
    for (size_t di = 0; di < sizeof dtypes / sizeof *dtypes && ok; di++) {
        for (size_t si = 0; si < sizeof sizes / sizeof *sizes && ok; si++) {
            awl_dtype dt = dtypes[di];
            int64_t count = sizes[si];
            awl_scope_begin();
            double *want = malloc((size_t)(count * n + 3 * n + 1) * sizeof *want);
            /* allreduce: sum, max, avg */
            awl_tensor *t = filled(r, count, dt);
            ok = awl_dist_allreduce(pg, t, AWL_DIST_SUM) == 0;
            for (int64_t i = 0; i < count; i++) {
                want[i] = 0;
                for (int k = 0; k < n; k++) want[i] += value_at(k, i);
            }
            ok = ok && expect(me, "allreduce sum", t, want, count);
            t = filled(r, count, dt);
            ok = ok && awl_dist_allreduce(pg, t, AWL_DIST_MAX) == 0;
            for (int64_t i = 0; i < count; i++) want[i] = value_at(n - 1, i);
            ok = ok && expect(me, "allreduce max", t, want, count);
            if (dt != AWL_I32) {
                t = filled(r, count, dt);
                ok = ok && awl_dist_allreduce(pg, t, AWL_DIST_AVG) == 0;
                for (int64_t i = 0; i < count; i++) {
                    double s = 0;
                    for (int k = 0; k < n; k++) s += value_at(k, i);
                    want[i] = dt == AWL_F32 ? (double)((float)s / (float)n) : s / n;
                }
                ok = ok && expect(me, "allreduce avg", t, want, count);
            }
            /* broadcast from the last rank */
            t = filled(r, count, dt);
            ok = ok && awl_dist_broadcast(pg, t, n - 1) == 0;
            for (int64_t i = 0; i < count; i++) want[i] = value_at(n - 1, i);
            ok = ok && expect(me, "broadcast", t, want, count);
            /* allgather */
            awl_tensor *all = awl_zeros(AWL_SHAPE(count * n), dt, "cpu");
            ok = ok && awl_dist_allgather(pg, all, filled(r, count, dt)) == 0;
            for (int k = 0; k < n; k++)
                for (int64_t i = 0; i < count; i++) want[k * count + i] = value_at(k, i);
            ok = ok && expect(me, "allgather", all, want, count * n);
            /* reduce_scatter: rank k's input element j is value_at(k, j) */
            awl_tensor *mine = awl_zeros(AWL_SHAPE(count), dt, "cpu");
            ok = ok && awl_dist_reduce_scatter(pg, mine, filled(r, count * n, dt), AWL_DIST_SUM) == 0;
            for (int64_t i = 0; i < count; i++) {
                want[i] = 0;
                for (int k = 0; k < n; k++) want[i] += value_at(k, r * count + i);
            }
            ok = ok && expect(me, "reduce_scatter", mine, want, count);
            /* the _v forms: uneven shares, zeros among them */
            int64_t counts[DIST_MAX_RANKS], total = 0, before = 0;
            for (int k = 0; k < n; k++) {
                counts[k] = (count + k * 7) % (count + 3);
                if (k < r) before += counts[k];
                total += counts[k];
            }
            awl_tensor *gathered = awl_zeros(AWL_SHAPE(total), dt, "cpu");
            awl_tensor *share = awl_tensor_slice(filled(r, total, dt), 0, before, before + counts[r], 1);
            ok = ok && awl_dist_allgather_v(pg, gathered, share, counts) == 0;
            for (int k = 0, at = 0; k < n; k++)
                for (int64_t i = 0; i < counts[k]; i++, at++) want[at] = value_at(k, at);
            ok = ok && expect(me, "allgather_v", gathered, want, total);
            awl_tensor *mine_v = awl_zeros(AWL_SHAPE(counts[r]), dt, "cpu");
            ok = ok && awl_dist_reduce_scatter_v(pg, mine_v, filled(r, total, dt), counts, AWL_DIST_MAX) == 0;
            for (int64_t i = 0; i < counts[r]; i++) want[i] = value_at(n - 1, before + i);
            ok = ok && expect(me, "reduce_scatter_v", mine_v, want, counts[r]);
            /* send/recv around the ring */
            if (n > 1) {
                awl_work *s = awl_dist_send_async(pg, filled(r, count, dt), (r + 1) % n);
                awl_tensor *got = awl_zeros(AWL_SHAPE(count), dt, "cpu");
                ok = ok && awl_dist_recv(pg, got, (r + n - 1) % n) == 0;
                ok = awl_work_wait(s) == 0 && ok;
                for (int64_t i = 0; i < count; i++) want[i] = value_at((r + n - 1) % n, i);
                ok = ok && expect(me, "recv", got, want, count);
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
        awl_tensor_reshape(filled(r, 15, AWL_F32), AWL_SHAPE(3, 5)), 0, 1);
    ok = ok && awl_dist_allreduce(pg, m, AWL_DIST_SUM) == 0;
    double want[15];
    for (int a = 0; a < 5; a++)
        for (int b = 0; b < 3; b++) {
            want[a * 3 + b] = 0;
            for (int k = 0; k < n; k++) want[a * 3 + b] += value_at(k, b * 5 + a);
        }
    ok = ok && expect(me, "allreduce of a transposed view", m, want, 15);
    awl_scope_end();
    me->status = ok ? 0 : -1;
    awl_dist_destroy(pg);
}

static void check_all_ok(dist_run *run, int world)
{
    ck_assert_msg(!run->timed_out, "the ranks did not finish in time");
    for (int r = 0; r < world; r++)
        ck_assert_msg(run->rank[r].status == 0 && WIFEXITED(run->exit_status[r]) &&
                          WEXITSTATUS(run->exit_status[r]) == 0,
                      "rank %d: status %d (exit %d): %s", r, run->rank[r].status,
                      run->exit_status[r], run->rank[r].message);
}

START_TEST(test_collectives)
{
    int world = _i; /* 1..4 */
    dist_run *run = dist_run_ranks(world, 120, all_collectives, NULL);
    check_all_ok(run, world);
    dist_run_free(run);
}
END_TEST

/* Random values: the same bits on every rank, and in a second run. */
static void random_allreduce(dist_rank *me)
{
    awl_dist_options o = dist_test_options(me);
    awl_process_group *pg = awl_dist_init(&o);
    if (!pg) {
        snprintf(me->message, sizeof me->message, "init: %s", awl_last_error());
        me->status = -1;
        return;
    }
    awl_manual_seed(1000 + (uint64_t)me->rank);
    awl_scope_begin();
    int64_t n = 300001;
    awl_tensor *t = awl_randn(AWL_SHAPE(n), AWL_F32, "cpu");
    me->status = awl_dist_allreduce(pg, t, AWL_DIST_AVG);
    float *v = malloc((size_t)n * sizeof *v);
    awl_to_host(t, v, (size_t)n * sizeof *v);
    me->digest = dist_digest(v, (size_t)n * sizeof *v, 0);
    free(v);
    awl_scope_end();
    if (me->status) snprintf(me->message, sizeof me->message, "%s", awl_last_error());
    awl_dist_destroy(pg);
}

START_TEST(test_deterministic)
{
    int world = 3;
    uint64_t first = 0;
    for (int round = 0; round < 2; round++) {
        dist_run *run = dist_run_ranks(world, 60, random_allreduce, NULL);
        check_all_ok(run, world);
        for (int r = 0; r < world; r++)
            ck_assert_msg(run->rank[r].digest == run->rank[0].digest,
                          "rank %d's result differs from rank 0's", r);
        if (round == 0) first = run->rank[0].digest;
        ck_assert_msg(run->rank[0].digest == first, "the second run gave other bits");
        dist_run_free(run);
    }
}
END_TEST


/* A 2 x 2 grid: rows {0,1} {2,3} and columns {0,2} {1,3}, each its own
 * group, used concurrently with the job's group; and singletons. */
static void grid(dist_rank *me)
{
    awl_dist_options o = dist_test_options(me);
    awl_process_group *pg = awl_dist_init(&o);
    int r = me->rank, status = pg ? 0 : -1;
    awl_process_group *row = pg ? awl_dist_split(pg, r / 2, r) : NULL;
    awl_process_group *col = pg ? awl_dist_split(pg, r % 2, -r) : NULL; /* reversed order */
    awl_process_group *alone = pg ? awl_dist_split(pg, r, 0) : NULL;
    if (!row || !col || !alone) status = -1;
    if (status == 0 && (awl_dist_world_size(row) != 2 || awl_dist_rank(row) != r % 2 ||
                        awl_dist_rank(col) != 1 - r / 2 || awl_dist_world_size(alone) != 1))
        status = -2;
    awl_scope_begin();
    for (int i = 0; i < 3 && status == 0; i++) {
        awl_tensor *a = awl_full(AWL_SHAPE(1000), r + 1, AWL_F64, "cpu");
        awl_tensor *b = awl_full(AWL_SHAPE(1000), r + 1, AWL_F64, "cpu");
        awl_tensor *c = awl_full(AWL_SHAPE(1000), r + 1, AWL_F64, "cpu");
        awl_work *wa = awl_dist_allreduce_async(row, a, AWL_DIST_SUM);
        awl_work *wb = awl_dist_allreduce_async(col, b, AWL_DIST_SUM);
        status = awl_dist_allreduce(pg, c, AWL_DIST_SUM);
        if (awl_work_wait(wa) < 0 || awl_work_wait(wb) < 0) status = -3;
        double want_row = r / 2 == 0 ? 1 + 2 : 3 + 4, want_col = r % 2 == 0 ? 1 + 3 : 2 + 4;
        if (status == 0 && (awl_item(awl_tensor_slice(a, 0, 999, 1000, 1)) != want_row ||
                            awl_item(awl_tensor_slice(b, 0, 0, 1, 1)) != want_col ||
                            awl_item(awl_tensor_slice(c, 0, 5, 6, 1)) != 10))
            status = -4;
        if (status == 0) status = awl_dist_barrier(alone);
    }
    awl_scope_end();
    if (status) snprintf(me->message, sizeof me->message, "rank %d: %d %s", r, status, awl_last_error());
    me->status = status;
    awl_dist_destroy(alone);
    awl_dist_destroy(col);
    awl_dist_destroy(row);
    awl_dist_destroy(pg);
}

START_TEST(test_split_groups)
{
    dist_run *run = dist_run_ranks(4, 60, grid, NULL);
    check_all_ok(run, 4);
    dist_run_free(run);
}
END_TEST

static Suite *dist_suite(void)
{
    Suite *s = suite_create("dist");
    TCase *tc = tcase_create("collectives");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_collectives, 1, 5);
    tcase_add_test(tc, test_deterministic);
    tcase_add_test(tc, test_split_groups);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(dist_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
