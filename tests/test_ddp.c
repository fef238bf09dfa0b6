/*
 * tests/test_ddp.c - DistributedDataParallel on a small GPT: the same
 * training as one process on the global batch, bit-identical parameters on
 * every rank, gradient accumulation with no_sync, and the errors for a
 * parameter without a gradient and for ranks with different models.
 *
 * The bound. Each rank's loss is the mean over its share of the global
 * batch, and DDP averages the gradients, so the update equals the
 * single-process one on the whole batch up to float32 rounding: the ring
 * sums the ranks' gradients in another order than one process sums the
 * rows. The optimizer is SGD with momentum, linear in the gradient, so the
 * rounding is not amplified (Adam's m / sqrt(v) turns a gradient that is
 * rounding noise into a full step of size lr). After 4 steps at lr 0.1
 * every parameter agrees within DDP_BOUND = 1e-6 (measured: 1.5e-8, a few
 * float32 ulps of weights of order 0.1-1).
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "awl.h"
#include "helpers/dist_harness.h"

#define DDP_BOUND 1e-6
#define GLOBAL_BATCH 8
#define STEPS 4

typedef struct ddp_case {
    bool checkpointing, small_buckets, no_overlap, accumulate;
} ddp_case;

static void copy_params(awl_gpt *model, float **out, int64_t *n)
{
    const awl_param_list *p = awl_gpt_parameters(model);
    *n = awl_param_list_numel(p);
    *out = malloc((size_t)*n * sizeof **out);
    int64_t at = 0;
    for (int i = 0; i < p->count; i++) {
        int64_t k = awl_numel(p->items[i].tensor);
        awl_to_host(p->items[i].tensor, *out + at, (size_t)k * sizeof **out);
        at += k;
    }
}

static void ddp_training(dist_rank *me)
{
    const ddp_case *c = me->arg;
    awl_dist_options o = dist_test_options(me);
    awl_process_group *pg = dist_test_init(me, &o);
    if (!pg) return;
    awl_set_num_threads(1);
    awl_gpt_config cfg = dist_tiny_gpt();
    /* different seeds: DDP must broadcast rank 0's weights */
    awl_gpt *model = awl_gpt_new(&cfg, "cpu", 7 + (uint64_t)me->rank);
    awl_gpt *ref = awl_gpt_new(&cfg, "cpu", 7);
    awl_gpt_set_checkpointing(model, c->checkpointing);
    awl_optimizer *opt = awl_sgd_new(awl_gpt_parameters(model), 0.1, 0.9, 0.0);
    awl_optimizer *ref_opt = awl_sgd_new(awl_gpt_parameters(ref), 0.1, 0.9, 0.0);
    awl_ddp_options dopt = {0};
    if (c->small_buckets) {
        dopt.first_bucket_bytes = 512;
        dopt.bucket_cap_bytes = 4096;
    }
    dopt.no_overlap = c->no_overlap;
    awl_ddp *ddp = awl_ddp_new(pg, awl_gpt_parameters(model), &dopt);
    int status = ddp ? 0 : -1;
    int share = GLOBAL_BATCH / me->world, first = me->rank * share;
    int micros = c->accumulate ? 2 : 1;
    for (int step = 0; step < STEPS && status == 0; step++) {
        for (int m = 0; m < micros && status == 0; m++) {
            if (m < micros - 1) awl_ddp_no_sync_begin(ddp);
            status = dist_tiny_backward(model, step, m, first, share, 1.0 / micros);
            if (m < micros - 1) awl_ddp_no_sync_end(ddp);
            if (status == 0) status = dist_tiny_backward(ref, step, m, 0, GLOBAL_BATCH, 1.0 / micros);
        }
        if (status == 0) status = awl_ddp_wait(ddp);
        if (status == 0) status = awl_optimizer_step(opt);
        if (status == 0) status = awl_ddp_zero_grad(ddp);
        if (status == 0) status = awl_optimizer_step(ref_opt);
        awl_optimizer_zero_grad(ref_opt);
    }
    if (status == 0) {
        float *a, *b;
        int64_t n;
        copy_params(model, &a, &n);
        copy_params(ref, &b, &n);
        double worst = 0;
        for (int64_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)a[i] - b[i]));
        me->values[0] = (int64_t)(worst * 1e12); /* picounits */
        me->digest = dist_digest(a, (size_t)n * sizeof *a, 0);
        free(a);
        free(b);
    }
    me->status = status;
    if (status) snprintf(me->message, sizeof me->message, "rank %d: %s", me->rank, awl_last_error());
    awl_ddp_free(ddp);
    awl_optimizer_free(opt);
    awl_optimizer_free(ref_opt);
    awl_gpt_free(model);
    awl_gpt_free(ref);
    awl_dist_destroy(pg);
}

static uint64_t run_case(int world, ddp_case c)
{
    dist_run *run = dist_run_ranks(world, 120, ddp_training, &c);
    ck_assert(!run->timed_out);
    for (int r = 0; r < world; r++) {
        ck_assert_msg(run->rank[r].status == 0, "rank %d: %s", r, run->rank[r].message);
        ck_assert_msg(WIFEXITED(run->exit_status[r]) && WEXITSTATUS(run->exit_status[r]) == 0,
                      "rank %d exited with status %d (a leak?)", r, run->exit_status[r]);
        double worst = run->rank[r].values[0] * 1e-12;
        ck_assert_msg(worst <= DDP_BOUND, "rank %d: DDP differs from one process by %g", r, worst);
        if (getenv("AWL_TEST_VERBOSE")) fprintf(stderr, "world %d rank %d: worst %g\n", world, r, worst);
        ck_assert_msg(run->rank[r].digest == run->rank[0].digest,
                      "rank %d's parameters are not bitwise rank 0's", r);
    }
    uint64_t digest = run->rank[0].digest;
    dist_run_free(run);
    return digest;
}

START_TEST(test_ddp_matches_one_process)
{
    run_case(2, (ddp_case){0});
    run_case(4, (ddp_case){.small_buckets = true});
}
END_TEST

START_TEST(test_ddp_checkpointing)
{
    run_case(2, (ddp_case){.checkpointing = true, .small_buckets = true});
}
END_TEST

START_TEST(test_ddp_overlap_is_bitwise_the_same)
{
    uint64_t a = run_case(2, (ddp_case){.small_buckets = true});
    uint64_t b = run_case(2, (ddp_case){.small_buckets = true, .no_overlap = true});
    ck_assert_msg(a == b, "overlapped and not-overlapped buckets gave other bits");
}
END_TEST

START_TEST(test_ddp_no_sync)
{
    run_case(2, (ddp_case){.accumulate = true});
}
END_TEST

/* ---- errors --------------------------------------------------------------------------------- */

/* A parameter the forward never uses: an error naming it, unless
 * find_unused_parameters. */
static void unused_parameter(dist_rank *me)
{
    bool find = *(bool *)me->arg;
    awl_dist_options o = dist_test_options(me);
    awl_process_group *pg = awl_dist_init(&o);
    awl_gpt_config cfg = dist_tiny_gpt();
    awl_gpt *model = awl_gpt_new(&cfg, "cpu", 7);
    awl_param_list list = {0};
    const awl_param_list *all = awl_gpt_parameters(model);
    for (int i = 0; i < all->count; i++)
        awl_param_list_add(&list, all->items[i].name, all->items[i].tensor);
    awl_tensor *spare = awl_requires_grad_(awl_zeros(AWL_SHAPE(3), AWL_F32, "cpu"), true);
    awl_param_list_add(&list, "spare.weight", spare);
    awl_ddp_options dopt = {.find_unused_parameters = find};
    awl_ddp *ddp = awl_ddp_new(pg, &list, &dopt);
    int status = ddp ? dist_tiny_backward(model, 0, 0, 0, 2, 1.0) : -1;
    if (status == 0) status = awl_ddp_wait(ddp);
    me->status = status;
    snprintf(me->message, sizeof me->message, "%s", status ? awl_last_error() : "");
    awl_ddp_free(ddp);
    awl_release(spare);
    awl_param_list_clear(&list);
    awl_gpt_free(model);
    awl_dist_destroy(pg);
}

START_TEST(test_ddp_unused_parameter)
{
    bool find = false;
    dist_run *run = dist_run_ranks(2, 60, unused_parameter, &find);
    ck_assert(!run->timed_out);
    for (int r = 0; r < 2; r++) {
        ck_assert_int_lt(run->rank[r].status, 0);
        ck_assert_msg(strstr(run->rank[r].message, "received no gradient") &&
                          strstr(run->rank[r].message, "'spare.weight'"),
                      "%s", run->rank[r].message);
    }
    dist_run_free(run);
    find = true;
    run = dist_run_ranks(2, 60, unused_parameter, &find);
    for (int r = 0; r < 2; r++)
        ck_assert_msg(run->rank[r].status == 0, "%s", run->rank[r].message);
    dist_run_free(run);
}
END_TEST

/* Rank 1 builds a wider model: every rank's awl_ddp_new fails, and rank 1's
 * message names the first parameter that differs. */
static void different_models(dist_rank *me)
{
    awl_dist_options o = dist_test_options(me);
    awl_process_group *pg = awl_dist_init(&o);
    awl_gpt_config cfg = dist_tiny_gpt();
    if (me->rank == 1) cfg.n_embd = 32;
    awl_gpt *model = awl_gpt_new(&cfg, "cpu", 7);
    awl_ddp *ddp = awl_ddp_new(pg, awl_gpt_parameters(model), NULL);
    me->status = ddp ? 0 : awl_last_error_code();
    snprintf(me->message, sizeof me->message, "%s", awl_last_error());
    awl_ddp_free(ddp);
    awl_gpt_free(model);
    awl_dist_destroy(pg);
}

START_TEST(test_ddp_different_models)
{
    dist_run *run = dist_run_ranks(2, 60, different_models, NULL);
    ck_assert(!run->timed_out);
    for (int r = 0; r < 2; r++) {
        ck_assert_msg(run->rank[r].status == AWL_ERR_INVALID, "rank %d: %d %s", r,
                      run->rank[r].status, run->rank[r].message);
        ck_assert_msg(strstr(run->rank[r].message, "parameters differ"), "%s",
                      run->rank[r].message);
    }
    ck_assert_msg(strstr(run->rank[1].message, "'transformer.ln_f.bias float32 (32)'") &&
                      strstr(run->rank[1].message, "'transformer.ln_f.bias float32 (16)'"),
                  "%s", run->rank[1].message);
    dist_run_free(run);
}
END_TEST

static Suite *ddp_suite(void)
{
    Suite *s = suite_create("ddp");
    TCase *tc = tcase_create("ddp");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_ddp_matches_one_process);
    tcase_add_test(tc, test_ddp_checkpointing);
    tcase_add_test(tc, test_ddp_overlap_is_bitwise_the_same);
    tcase_add_test(tc, test_ddp_no_sync);
    tcase_add_test(tc, test_ddp_unused_parameter);
    tcase_add_test(tc, test_ddp_different_models);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(ddp_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
