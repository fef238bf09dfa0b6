/*
 * tests/test_tp.c - tensor parallelism: a GPT split over 2 and 4 ranks has
 * the unsplit model's loss and gradients (each rank's pieces against the
 * same pieces of the unsplit gradients, cut here by the rules Megatron-LM
 * gives, independently of dist/tensor_parallel.c), does exactly two
 * allreduces forward and two backward per block, and on a 2 x 2 grid of
 * data- and tensor-parallel ranks trains like one process on the global
 * batch.
 *
 * The bound: float32, and the split sums the row-parallel products in
 * another order (each rank's partial product, then across ranks), so
 * losses agree within 1e-5 relative and gradients within TP_BOUND = 1e-5
 * absolute (measured: a few 1e-8; the gradients are of order 1e-2).
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "awl.h"
#include "helpers/dist_harness.h"

#define TP_BOUND 1e-5

/* The unsplit gradient's piece that rank r of n holds, by the parameter's
 * role: c_attn's q, k, v rows by heads, c_fc's rows, the c_proj weights'
 * columns; the rest whole. */
static awl_tensor *expected_piece(const char *name, awl_tensor *g, int r, int n)
{
    int64_t rows = g->shape[0];
    if (strstr(name, ".attn.c_attn.")) {
        int64_t C = rows / 3;
        awl_tensor *parts[3];
        for (int i = 0; i < 3; i++)
            parts[i] = awl_tensor_slice(g, 0, i * C + C * r / n, i * C + C * (r + 1) / n, 1);
        return awl_tensor_concat(3, parts, 0);
    }
    if (strstr(name, ".mlp.c_fc.")) return awl_tensor_slice(g, 0, rows * r / n, rows * (r + 1) / n, 1);
    if (strstr(name, ".c_proj.weight"))
        return awl_tensor_slice(g, 1, g->shape[1] * r / n, g->shape[1] * (r + 1) / n, 1);
    return g;
}

static double max_abs_difference(awl_tensor *a, awl_tensor *b)
{
    awl_scope_begin();
    double d = awl_item(awl_tensor_reduce(AWL_REDUCE_MAX,
                                          awl_tensor_unary(AWL_UNARY_ABS,
                                                           awl_tensor_binary(AWL_BINARY_SUB, a, b), 0),
                                          0, NULL, false));
    awl_scope_end();
    return d;
}

/* Loss (returned) and gradients of a model, whole or split, on one batch:
 * the same 4 rows on every rank. */
static double loss_and_grads(awl_gpt *whole, awl_tp_gpt *split)
{
    int32_t xs[32], ys[32];
    for (int i = 0; i < 32; i++) {
        xs[i] = (i * 7 + 3) % 17;
        ys[i] = (i * 5 + 1) % 17;
    }
    awl_scope_begin();
    awl_tensor *x = awl_from_data(xs, AWL_SHAPE(4, 8), AWL_I32, "cpu");
    awl_tensor *y = awl_from_data(ys, AWL_SHAPE(4, 8), AWL_I32, "cpu");
    awl_tensor *loss = awl_keep(whole ? awl_gpt_loss(whole, x, y) : awl_tp_gpt_loss(split, x, y));
    awl_scope_end();
    double value = loss && awl_backward(loss) == 0 ? awl_item(loss) : NAN;
    awl_release(loss);
    return value;
}

static void split_against_whole(dist_rank *me)
{
    awl_dist_options o = dist_test_options(me);
    awl_process_group *pg = awl_dist_init(&o);
    awl_set_num_threads(1);
    awl_gpt_config cfg = dist_tiny_gpt();
    cfg.n_head = 4;
    awl_gpt *whole = awl_gpt_new(&cfg, "cpu", 11);
    awl_tp_gpt *split = pg ? awl_tp_gpt_new(whole, pg) : NULL;
    int status = split ? 0 : -1;
    double loss_whole = loss_and_grads(whole, NULL);
    awl_dist_stats before, after;
    awl_dist_get_stats(pg, &before);
    double loss_split = split ? loss_and_grads(NULL, split) : NAN;
    awl_dist_get_stats(pg, &after);
    me->values[0] = after.collectives - before.collectives;
    if (status == 0 && !(fabs(loss_split - loss_whole) <= 1e-5 * fabs(loss_whole))) {
        snprintf(me->message, sizeof me->message, "loss %.9f split, %.9f whole: %s", loss_split,
                 loss_whole, awl_last_error());
        status = -2;
    }
    const awl_param_list *sp = awl_tp_gpt_parameters(split), *wp = awl_gpt_parameters(whole);
    double worst = 0;
    for (int i = 0; status == 0 && i < sp->count; i++) {
        awl_tensor *w = awl_param_list_find(wp, sp->items[i].name);
        awl_scope_begin();
        awl_tensor *want = expected_piece(sp->items[i].name, w->grad, me->rank, me->world);
        double d = max_abs_difference(sp->items[i].tensor->grad, want);
        awl_scope_end();
        if (d > worst) worst = d;
        if (d > TP_BOUND) {
            snprintf(me->message, sizeof me->message, "rank %d: the gradient of %s differs by %g",
                     me->rank, sp->items[i].name, d);
            status = -3;
        }
    }
    me->values[1] = (int64_t)(worst * 1e12);
    if (status == -1) snprintf(me->message, sizeof me->message, "rank %d: %s", me->rank, awl_last_error());
    me->status = status;
    awl_tp_gpt_free(split);
    awl_gpt_free(whole);
    awl_dist_destroy(pg);
}

START_TEST(test_tp_matches_whole)
{
    int world = _i;
    dist_run *run = dist_run_ranks(world, 120, split_against_whole, NULL);
    ck_assert(!run->timed_out);
    for (int r = 0; r < world; r++) {
        ck_assert_msg(run->rank[r].status == 0, "TP %d: %s", world, run->rank[r].message);
        /* 2 layers: 2 g's forward and 2 f's backward in each */
        ck_assert_msg(run->rank[r].values[0] == 2 * 4, "TP %d rank %d: %lld allreduces, not 8", world,
                      r, (long long)run->rank[r].values[0]);
        if (getenv("AWL_TEST_VERBOSE"))
            fprintf(stderr, "TP %d rank %d: worst gradient difference %g\n", world, r,
                    run->rank[r].values[1] * 1e-12);
    }
    dist_run_free(run);
}
END_TEST

/* 4 ranks as 2 x 2: tensor-parallel pairs {0,1} {2,3}, data-parallel pairs
 * {0,2} {1,3}; each pair of the grid trains half the global batch; SGD. The
 * pieces must match one process's SGD on the global batch. */
static void grid_training(dist_rank *me)
{
    awl_dist_options o = dist_test_options(me);
    awl_process_group *pg = awl_dist_init(&o);
    int r = me->rank, status = pg ? 0 : -1;
    awl_process_group *tp = pg ? awl_dist_split(pg, r / 2, r) : NULL;
    awl_process_group *dp = pg ? awl_dist_split(pg, r % 2, r) : NULL;
    awl_set_num_threads(1);
    awl_gpt_config cfg = dist_tiny_gpt();
    awl_gpt *whole = awl_gpt_new(&cfg, "cpu", 5), *ref = awl_gpt_new(&cfg, "cpu", 5);
    awl_tp_gpt *split = tp ? awl_tp_gpt_new(whole, tp) : NULL;
    awl_ddp *ddp = split && dp ? awl_ddp_new(dp, awl_tp_gpt_parameters(split), NULL) : NULL;
    awl_optimizer *opt = split ? awl_sgd_new(awl_tp_gpt_parameters(split), 0.1, 0.9, 0) : NULL;
    awl_optimizer *ref_opt = awl_sgd_new(awl_gpt_parameters(ref), 0.1, 0.9, 0);
    if (!tp || !dp || !split || !ddp || !opt) status = -1;
    int dp_rank = awl_dist_rank(dp), share = 8 / 2;
    for (int step = 0; step < 3 && status == 0; step++) {
        int32_t xs[32], ys[32];
        for (int b = 0; b < share; b++)
            for (int t = 0; t < 8; t++) {
                int row = dp_rank * share + b;
                xs[b * 8 + t] = (row * 7 + t * 3 + step * 5) % 17;
                ys[b * 8 + t] = (row * 5 + t * 2 + step * 3) % 17;
            }
        awl_scope_begin();
        awl_tensor *loss = awl_keep(awl_tp_gpt_loss(split, awl_from_data(xs, AWL_SHAPE(share, 8), AWL_I32, "cpu"),
                                                    awl_from_data(ys, AWL_SHAPE(share, 8), AWL_I32, "cpu")));
        awl_scope_end();
        status = loss ? awl_backward(loss) : -1;
        awl_release(loss);
        if (status == 0) status = awl_ddp_wait(ddp);
        if (status == 0) status = awl_optimizer_step(opt);
        if (status == 0) status = awl_ddp_zero_grad(ddp);
        if (status == 0) status = dist_tiny_backward(ref, step, 0, 0, 8, 1.0);
        if (status == 0) status = awl_optimizer_step(ref_opt);
        awl_optimizer_zero_grad(ref_opt);
    }
    double worst = 0;
    const awl_param_list *sp = split ? awl_tp_gpt_parameters(split) : NULL;
    for (int i = 0; status == 0 && i < sp->count; i++) {
        awl_tensor *w = awl_param_list_find(awl_gpt_parameters(ref), sp->items[i].name);
        awl_scope_begin();
        double d = max_abs_difference(sp->items[i].tensor,
                                      expected_piece(sp->items[i].name, w, awl_dist_rank(tp), 2));
        awl_scope_end();
        if (d > worst) worst = d;
    }
    if (status == 0 && worst > TP_BOUND) {
        snprintf(me->message, sizeof me->message, "rank %d: differs from one process by %g", r, worst);
        status = -2;
    }
    if (status == -1) snprintf(me->message, sizeof me->message, "rank %d: %s", r, awl_last_error());
    me->status = status;
    awl_ddp_free(ddp);
    awl_optimizer_free(opt);
    awl_optimizer_free(ref_opt);
    awl_tp_gpt_free(split);
    awl_gpt_free(whole);
    awl_gpt_free(ref);
    awl_dist_destroy(dp);
    awl_dist_destroy(tp);
    awl_dist_destroy(pg);
}

START_TEST(test_data_by_tensor_grid)
{
    dist_run *run = dist_run_ranks(4, 120, grid_training, NULL);
    ck_assert(!run->timed_out);
    for (int r = 0; r < 4; r++) ck_assert_msg(run->rank[r].status == 0, "%s", run->rank[r].message);
    dist_run_free(run);
}
END_TEST

static Suite *tp_suite(void)
{
    Suite *s = suite_create("tp");
    TCase *tc = tcase_create("tp");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_tp_matches_whole, 2, 3);
    tcase_add_loop_test(tc, test_tp_matches_whole, 4, 5);
    tcase_add_test(tc, test_data_by_tensor_grid);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(tp_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
