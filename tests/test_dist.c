/*
 * tests/test_dist.c - the process group's collectives over TCP on
 * loopback: every operation for world sizes 1-4, sizes 0, 1, 7, 3 MiB and
 * sizes no world size divides, every dtype, strided tensors, and the same
 * bits on every rank and in every run.
 *
 * Each case forks one process per rank (tests/helpers/dist_harness.h);
 * the collectives are tests/helpers/dist_collectives.h's, which
 * tests/test_nccl.c runs over NCCL.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "awl.h"
#include "helpers/dist_collectives.h"

static const awl_dtype dtypes[] = {AWL_F32, AWL_F64, AWL_I32};
static const int64_t sizes[] = {0, 1, 7, 1000003, 786432 /* 3 MiB of float32 */};
static const dist_collectives_case tcp = {"tcp", false, dtypes, 3, sizes, 5, false};

START_TEST(test_collectives)
{
    int world = _i; /* 1..4 */
    dist_run *run = dist_run_ranks(world, 120, dist_all_collectives, (void *)&tcp);
    dist_check_all_ok(run, world);
    dist_run_free(run);
}
END_TEST

/* Random values: the same bits on every rank, and in a second run. */
static void random_allreduce(dist_rank *me)
{
    awl_dist_options o = dist_test_options(me);
    awl_process_group *pg = dist_test_init(me, &o);
    if (!pg) return;
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
        dist_check_all_ok(run, world);
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
    dist_check_all_ok(run, 4);
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
