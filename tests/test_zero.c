/*
 * tests/test_zero.c - ZeRO stages 1 and 2 against DDP on a small GPT:
 * bitwise on 2 ranks (a + b is the same sum whichever rank adds it), within
 * ZERO_BOUND on 3 and 4 (the shards cut the gradient in other places than
 * DDP's ring chunks, so some sums run in another order); shards of uneven
 * size; the memory each rank holds (and the memory ledger's gradients);
 * and consolidated checkpoints: written
 * by 2 ranks, resumed bitwise by 2, and loaded by one process and by 3 ranks.
 *
 * The bound: after 4 AdamW steps at lr 1e-3 the parameters agree within
 * ZERO_BOUND = 1e-5 (measured: 3.3e-7 on 3 ranks, 3.1e-7 on 4). Adam
 * divides by sqrt(v), so an element whose gradient is near zero can turn a
 * rounding difference into a larger one; at lr 1e-3 no step moves a
 * weight by more than about 1e-3.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "awl.h"
#include "helpers/dist_harness.h"

#define ZERO_BOUND 1e-5
#define GLOBAL_BATCH 12

typedef struct zero_case {
    int stage;           /* 0: DDP */
    int steps;
    bool small_buckets;
    const char *save;    /* after `steps`, save here */
    const char *load;    /* before training, load this */
} zero_case;

/* Where rank 0 writes the final parameters (set before the ranks fork). */
static char dump_path[64];

/* Trains the tiny GPT on this rank's share of every global batch: under
 * DDP + AdamW (stage 0) or ZeRO; reports the parameters' digest, and rank
 * 0 writes their values to dump_path. */
static void train(dist_rank *me)
{
    const zero_case *c = me->arg;
    awl_dist_options o = dist_test_options(me);
    awl_process_group *pg = dist_test_init(me, &o);
    if (!pg) return;
    awl_set_num_threads(1);
    awl_gpt_config cfg = dist_tiny_gpt();
    awl_gpt *model = awl_gpt_new(&cfg, "cpu", 7);
    const awl_param_list *params = awl_gpt_parameters(model);
    awl_ddp *ddp = NULL;
    awl_optimizer *opt = NULL;
    awl_zero *zero = NULL;
    awl_zero_options zo = {.stage = c->stage};
    if (c->small_buckets) zo.first_bucket_bytes = zo.bucket_cap_bytes = 2048;
    int status = 0;
    if (c->stage == 0) {
        ddp = awl_ddp_new(pg, params, NULL);
        opt = awl_adamw_new(params, 1e-3, 0.9, 0.95, 1e-8, 0.1);
        if (!ddp || !opt) status = -1;
    } else {
        zero = awl_zero_adamw_new(pg, params, 1e-3, 0.9, 0.95, 1e-8, 0.1, &zo);
        if (!zero) status = -1;
    }
    int first_step = 0;
    if (status == 0 && c->load) {
        awl_train_state st = {0};
        status = zero ? awl_zero_load(zero, c->load, &st)
                      : awl_checkpoint_load(c->load, params, opt, &st);
        first_step = (int)st.step;
        awl_train_state_clear(&st);
    }
    int share = GLOBAL_BATCH / me->world;
    for (int step = first_step; step < c->steps && status == 0; step++) {
        status = dist_tiny_backward(model, step, 0, me->rank * share, share, 1.0);
        if (status == 0) status = ddp ? awl_ddp_wait(ddp) : 0;
        if (status == 0) status = zero ? awl_zero_step(zero) : awl_optimizer_step(opt);
        if (status == 0) status = zero ? awl_zero_zero_grad(zero) : awl_ddp_zero_grad(ddp);
        if (status == 0 && zero && step == first_step) {
            awl_zero_stats zs;
            awl_zero_get_stats(zero, &zs);
            me->values[1] = zs.gradient_bytes;
            me->values[2] = zs.optimizer_bytes;
            me->values[3] = zs.shard_count;
            me->values[4] = awl_param_list_numel(params);
            awl_memory_ledger l;
            awl_memory_get_ledger("cpu", &l);
            me->values[5] = l.now[AWL_MEMORY_GRADIENT]; /* between steps */
        }
    }
    if (status == 0 && c->save) {
        awl_train_state st = {.step = c->steps};
        status = zero ? awl_zero_save(zero, c->save, &st)
                      : (me->rank == 0 ? awl_checkpoint_save(c->save, params, opt, &st) : 0);
    }
    if (status == 0) {
        int64_t n = awl_param_list_numel(params), at = 0;
        float *v = malloc((size_t)n * sizeof *v);
        for (int i = 0; i < params->count; i++) {
            int64_t k = awl_numel(params->items[i].tensor);
            awl_to_host(params->items[i].tensor, v + at, (size_t)k * sizeof *v);
            at += k;
        }
        me->digest = dist_digest(v, (size_t)n * sizeof *v, 0);
        if (me->rank == 0) {
            FILE *f = fopen(dump_path, "wb");
            if (f) {
                fwrite(v, sizeof *v, (size_t)n, f);
                fclose(f);
            }
        }
        free(v);
    }
    me->status = status;
    if (status) snprintf(me->message, sizeof me->message, "rank %d: %s", me->rank, awl_last_error());
    awl_zero_free(zero);
    awl_ddp_free(ddp);
    awl_optimizer_free(opt);
    awl_gpt_free(model);
    awl_dist_destroy(pg);
}

/* Runs a case on `world` ranks; the parameters (rank 0's) into *out. */
static uint64_t run_case(int world, zero_case c, float **out, int64_t *n, dist_rank *rank0)
{
    snprintf(dump_path, sizeof dump_path, "/tmp/awl_zero_%d.bin", (int)getpid());
    dist_run *run = dist_run_ranks(world, 120, train, &c);
    ck_assert(!run->timed_out);
    uint64_t digest = run->rank[0].digest;
    for (int r = 0; r < world; r++) {
        ck_assert_msg(run->rank[r].status == 0, "rank %d: %s", r, run->rank[r].message);
        ck_assert_msg(run->rank[r].digest == digest, "rank %d's parameters differ from rank 0's", r);
    }
    if (rank0) *rank0 = run->rank[0];
    dist_run_free(run);
    if (out) {
        FILE *f = fopen(dump_path, "rb");
        ck_assert_ptr_nonnull(f);
        fseek(f, 0, SEEK_END);
        *n = ftell(f) / (long)sizeof **out;
        fseek(f, 0, SEEK_SET);
        *out = malloc((size_t)*n * sizeof **out);
        ck_assert_int_eq(fread(*out, sizeof **out, (size_t)*n, f), (size_t)*n);
        fclose(f);
    }
    unlink(dump_path); /* rank 0 writes it in every case */
    return digest;
}

static double worst_difference(const float *a, const float *b, int64_t n)
{
    double worst = 0;
    for (int64_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)a[i] - b[i]));
    return worst;
}

START_TEST(test_zero_matches_ddp)
{
    for (int world = 2; world <= 4; world++) {
        float *ddp, *z1, *z2;
        int64_t n;
        uint64_t d = run_case(world, (zero_case){0, 4, false, NULL, NULL}, &ddp, &n, NULL);
        uint64_t d1 = run_case(world, (zero_case){1, 4, true, NULL, NULL}, &z1, &n, NULL);
        uint64_t d2 = run_case(world, (zero_case){2, 4, true, NULL, NULL}, &z2, &n, NULL);
        if (world == 2) {
            ck_assert_msg(d1 == d, "ZeRO-1 on 2 ranks is not bitwise DDP");
            ck_assert_msg(d2 == d, "ZeRO-2 on 2 ranks is not bitwise DDP");
        }
        double w1 = worst_difference(ddp, z1, n), w2 = worst_difference(ddp, z2, n);
        ck_assert_msg(w1 <= ZERO_BOUND && w2 <= ZERO_BOUND, "world %d: ZeRO-1 %g, ZeRO-2 %g from DDP",
                      world, w1, w2);
        if (getenv("AWL_TEST_VERBOSE"))
            fprintf(stderr, "world %d: zero-1 %g, zero-2 %g\n", world, w1, w2);
        free(ddp);
        free(z1);
        free(z2);
    }
}
END_TEST

/* 3 ranks: P is not a multiple of 3, and the shards cut parameters. The
 * memory: ZeRO-1 holds all gradients and 1/N of the optimizer state, ZeRO-2
 * 1/N of both (after the first step). */
START_TEST(test_zero_uneven_shards_and_memory)
{
    for (int stage = 1; stage <= 2; stage++) {
        dist_rank r0;
        run_case(3, (zero_case){stage, 2, true, NULL, NULL}, NULL, NULL, &r0);
        int64_t P = r0.values[4], shard = r0.values[3];
        ck_assert_msg(P % 3 != 0, "the model's %lld elements divide by 3", (long long)P);
        ck_assert_int_eq(shard, P * 1 / 3);
        ck_assert_int_eq(r0.values[2], 8 * shard); /* exp_avg + exp_avg_sq */
        if (stage == 1)
            ck_assert_int_eq(r0.values[1], 4 * P);
        else
            ck_assert_int_eq(r0.values[1], 4 * shard);
        /* the memory ledger counts the same bytes as gradients between
         * steps: stage 1 keeps DDP's buckets, stage 2 only its shard */
        ck_assert_int_eq(r0.values[5], r0.values[1]);
    }
}
END_TEST

/* Saved by 2 ranks after 2 steps: resumed by 2 ranks it is bitwise the
 * straight run; one process and 3 ranks load it and stay within the bound. */
START_TEST(test_zero_checkpoints)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/awl_zero_%d.safetensors", (int)getpid());
    float *straight, *resumed, *alone, *three;
    int64_t n;
    uint64_t d = run_case(2, (zero_case){2, 4, true, NULL, NULL}, &straight, &n, NULL);
    run_case(2, (zero_case){2, 2, true, path, NULL}, NULL, NULL, NULL);
    uint64_t dr = run_case(2, (zero_case){2, 4, true, NULL, path}, &resumed, &n, NULL);
    ck_assert_msg(dr == d, "resumed on 2 ranks differs from straight");
    run_case(1, (zero_case){0, 4, false, NULL, path}, &alone, &n, NULL);
    run_case(3, (zero_case){1, 4, true, NULL, path}, &three, &n, NULL);
    double wa = worst_difference(straight, alone, n), w3 = worst_difference(straight, three, n);
    ck_assert_msg(wa <= ZERO_BOUND && w3 <= ZERO_BOUND, "one process %g, 3 ranks %g", wa, w3);
    unlink(path);
    free(straight);
    free(resumed);
    free(alone);
    free(three);
}
END_TEST

static Suite *zero_suite(void)
{
    Suite *s = suite_create("zero");
    TCase *tc = tcase_create("zero");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_zero_matches_ddp);
    tcase_add_test(tc, test_zero_uneven_shards_and_memory);
    tcase_add_test(tc, test_zero_checkpoints);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(zero_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
