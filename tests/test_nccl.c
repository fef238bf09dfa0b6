/*
 * tests/test_nccl.c - the NCCL transport (dist/nccl.c) on the GPUs this
 * machine has, one rank per GPU (rank r on cuda:r, its LOCAL_RANK), every
 * rank a forked process (tests/helpers/dist_harness.h: CUDA is never
 * initialised in this process, whose children could not use it then).
 *
 * On one GPU, a group of one rank, which still runs NCCL (a communicator
 * of one, its stream and events):
 *   - every collective in float32, bfloat16, float64 and int32 at sizes 0,
 *     1, 7 and 1000003, CPU and strided tensors staged through the GPU
 *     (tests/helpers/dist_collectives.h, as test_dist runs over TCP);
 *   - order: a collective queued behind 40 slow matmuls that produce its
 *     input returns to the host at once and still sees their result;
 *   - DDP and ZeRO-2 on the GPU through a group of one against plain
 *     training, and a sub-group (awl_dist_split);
 *   - argument errors (another GPU's tensor, int32 averages, sending to
 *     itself, no GPU at the device asked for) that leave the group usable.
 * On two GPUs or more, also:
 *   - every collective on 2, 3 and 4 ranks (as many as there are GPUs);
 *   - DDP on 2 ranks against one process on the global batch;
 *   - ranks that call different collectives, a collective one rank never
 *     joins (the timeout), and a rank killed in the middle of allreduces:
 *     every other rank fails with AWL_ERR_DIST naming the rank and the
 *     operation, within the bounds below, never hangs.
 *
 * Without a GPU, or in a build without NCCL, it says why and exits 77
 * (ctest: skipped).
 */
#include <check.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "awl.h"
#include "helpers/dist_collectives.h"

#if defined(AWL_WITH_NCCL) && AWL_WITH_NCCL

static const awl_dtype dtypes[] = {AWL_F32, AWL_BF16, AWL_F64, AWL_I32};
static const int64_t sizes[] = {0, 1, 7, 1000003};
static const dist_collectives_case nccl = {"nccl", true, dtypes, 4, sizes, 4, true};

static int n_gpus; /* counted in a child process (count_gpus) */

/* DDP against one process on the global batch: SGD at lr 0.1 for 4 steps,
 * as tests/test_ddp.c; the bound is its DDP_BOUND with room for the GPU's
 * other summation orders (cuBLAS picks kernels by shape). */
#define DDP_BOUND 1e-5
#define STEPS 4
#define GLOBAL_BATCH 8

/* ---- in the ranks ------------------------------------------------------------------------ */

/* Records a failure of rank me (the first one only) and returns false. */
static bool rank_fail(dist_rank *me, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool rank_fail(dist_rank *me, const char *fmt, ...)
{
    if (!me->message[0]) {
        va_list ap;
        va_start(ap, fmt);
        int at = snprintf(me->message, sizeof me->message, "rank %d: ", me->rank);
        vsnprintf(me->message + at, sizeof me->message - (size_t)at, fmt, ap);
        va_end(ap);
    }
    me->status = -1;
    return false;
}

static awl_process_group *join(dist_rank *me, double timeout)
{
    awl_dist_options o = dist_case_options(me, &nccl);
    if (timeout > 0) o.timeout_s = timeout;
    awl_process_group *pg = awl_dist_init(&o);
    if (!pg) rank_fail(me, "init: %s", awl_last_error());
    return pg;
}

static const char *gpu_of(const dist_rank *me, char *buf, size_t size)
{
    snprintf(buf, size, "cuda:%d", me->rank);
    return buf;
}

/* Every parameter of a and b: the largest difference. */
static double max_difference(const awl_param_list *a, const awl_param_list *b)
{
    double worst = 0;
    for (int i = 0; i < a->count; i++) {
        int64_t n = awl_numel(a->items[i].tensor);
        float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
        awl_to_host(a->items[i].tensor, x, (size_t)n * sizeof *x);
        awl_to_host(b->items[i].tensor, y, (size_t)n * sizeof *y);
        for (int64_t k = 0; k < n; k++) worst = fmax(worst, fabs((double)x[k] - y[k]));
        free(x);
        free(y);
    }
    return worst;
}

/* A digest of every parameter's bits. */
static uint64_t params_digest(const awl_param_list *p)
{
    uint64_t h = 0;
    for (int i = 0; i < p->count; i++) {
        int64_t n = awl_numel(p->items[i].tensor);
        float *x = malloc((size_t)n * sizeof *x);
        awl_to_host(p->items[i].tensor, x, (size_t)n * sizeof *x);
        h = dist_digest(x, (size_t)n * sizeof *x, h);
        free(x);
    }
    return h;
}

/* A collective queued behind slow kernels that produce its input: the
 * host gets control back at once, and the result is theirs. 40 products
 * with the identity (4096 x 4096, float32: exact, and tens of milliseconds
 * on the GPU) make x, which is allgathered (out of place, so a collective
 * that ran early would leave zeros). */
static void order(dist_rank *me)
{
    awl_process_group *pg = join(me, 0);
    if (!pg) return;
    enum { N = 4096, PRODUCTS = 40 };
    char dev[32];
    gpu_of(me, dev, sizeof dev);
    float *eye = calloc((size_t)N * N, sizeof *eye);
    for (int i = 0; i < N; i++) eye[(size_t)i * N + i] = 1;
    awl_scope_begin();
    awl_tensor *id = awl_from_data(eye, AWL_SHAPE(N, N), AWL_F32, dev);
    awl_tensor *x0 = awl_tensor_reshape(dist_filled(me->rank, (int64_t)N * N, AWL_F32, dev), AWL_SHAPE(N, N));
    awl_tensor *out = awl_zeros(AWL_SHAPE((int64_t)N * N), AWL_F32, dev);
    bool ok = awl_synchronize(dev) == 0 || rank_fail(me, "%s", awl_last_error());
    awl_tensor *x = x0;
    for (int i = 0; i < PRODUCTS && ok; i++) x = awl_matmul(x, id);
    double t0 = dist_now();
    awl_work *w = ok ? awl_dist_allgather_async(pg, out, awl_tensor_reshape(x, AWL_SHAPE((int64_t)N * N))) : NULL;
    double queued = dist_now() - t0;
    if (ok && !w) ok = rank_fail(me, "allgather_async: %s", awl_last_error());
    if (ok && awl_work_wait(w) < 0) ok = rank_fail(me, "wait: %s", awl_last_error());
    double done = dist_now() - t0;
    float *got = malloc((size_t)N * N * sizeof *got);
    if (ok && awl_to_host(out, got, (size_t)N * N * sizeof *got) < 0) ok = rank_fail(me, "%s", awl_last_error());
    for (int64_t i = 0; i < (int64_t)N * N && ok; i++)
        if (got[i] != (float)dist_value_at(me->rank, i))
            ok = rank_fail(me, "element %lld is %g, want %g: the allgather did not wait for its input",
                      (long long)i, got[i], dist_value_at(me->rank, i));
    if (ok && queued > 0.02)
        ok = rank_fail(me, "queueing the allgather took %.1f ms: the host waited for the GPU", queued * 1e3);
    me->values[0] = (int64_t)(queued * 1e6);
    me->values[1] = (int64_t)(done * 1e6);
    awl_scope_end();
    free(got);
    free(eye);
    if (ok) me->status = 0;
    awl_dist_destroy(pg);
}

/* ZeRO-2 over a group of one against plain AdamW, on the GPU; and a
 * sub-group of one. */
static void zero_alone(dist_rank *me)
{
    awl_process_group *pg = join(me, 0);
    if (!pg) return;
    char dev[32];
    gpu_of(me, dev, sizeof dev);
    awl_gpt_config cfg = dist_tiny_gpt();
    awl_gpt *model = awl_gpt_new(&cfg, dev, 7), *ref = awl_gpt_new(&cfg, dev, 7);
    const awl_param_list *p = awl_gpt_parameters(model), *pr = awl_gpt_parameters(ref);
    awl_optimizer *ref_opt = awl_adamw_new(pr, 1e-3, 0.9, 0.95, 1e-8, 0.1);
    awl_zero *zero = awl_zero_adamw_new(pg, p, 1e-3, 0.9, 0.95, 1e-8, 0.1,
                                        &(awl_zero_options){.stage = 2, .bucket_cap_bytes = 4096});
    bool ok = zero || rank_fail(me, "awl_zero_adamw_new: %s", awl_last_error());
    for (int step = 0; step < STEPS && ok; step++)
        ok = (dist_tiny_backward(model, step, 0, 0, GLOBAL_BATCH, 1) == 0 && awl_zero_step(zero) == 0 &&
              awl_zero_zero_grad(zero) == 0 && dist_tiny_backward(ref, step, 0, 0, GLOBAL_BATCH, 1) == 0 &&
              awl_optimizer_step(ref_opt) == 0 && awl_optimizer_zero_grad(ref_opt) == 0) ||
             rank_fail(me, "step %d: %s", step, awl_last_error());
    double worst = ok ? max_difference(p, pr) : 0;
    if (ok && worst > 1e-6) ok = rank_fail(me, "ZeRO-2 of one rank differs from AdamW by %g", worst);
    /* a sub-group of one: its own communicator */
    awl_process_group *sub = ok ? awl_dist_split(pg, 0, 0) : NULL;
    awl_scope_begin();
    awl_tensor *t = awl_full(AWL_SHAPE(5), 3, AWL_F32, dev);
    if (ok && (!sub || strcmp(awl_dist_backend(sub), "nccl") != 0 ||
               awl_dist_allreduce(sub, t, AWL_DIST_SUM) < 0 || awl_item(awl_tensor_slice(t, 0, 4, 5, 1)) != 3))
        ok = rank_fail(me, "the sub-group: %s", awl_last_error());
    awl_scope_end();
    if (ok) me->status = 0;
    awl_dist_destroy(sub);
    awl_zero_free(zero);
    awl_optimizer_free(ref_opt);
    awl_gpt_free(model);
    awl_gpt_free(ref);
    awl_dist_destroy(pg);
}

/* Whether the last error says `what` (after a call that had to fail). */
static bool refused(dist_rank *me, int status, const char *call, const char *what)
{
    if (status == AWL_ERR_INVALID && strstr(awl_last_error(), what)) return true;
    return rank_fail(me, "%s: status %d, '%s' (want AWL_ERR_INVALID saying '%s')", call, status,
                awl_last_error(), what);
}

static void errors(dist_rank *me)
{
    /* no GPU where the group asks for one */
    awl_dist_options o = dist_case_options(me, &nccl);
    o.device = "cuda:99";
    bool ok = !awl_dist_init(&o) && strstr(awl_last_error(), "cuda:99");
    if (!ok) rank_fail(me, "a group on cuda:99: %s", awl_last_error());
    o.device = "cpu";
    ok = ok && ((!awl_dist_init(&o) && strstr(awl_last_error(), "not a CUDA device")) ||
                rank_fail(me, "a group on the CPU: %s", awl_last_error()));
    awl_process_group *pg = ok ? join(me, 0) : NULL;
    if (!pg) return;
    char dev[32];
    gpu_of(me, dev, sizeof dev);
    awl_scope_begin();
    awl_tensor *t = awl_ones(AWL_SHAPE(8), AWL_I32, dev);
    ok = refused(me, awl_dist_allreduce(pg, t, AWL_DIST_AVG), "an int32 average", "AWL_DIST_AVG of int32");
    ok = ok && refused(me, awl_dist_send(pg, t, 0), "sending to itself", "cannot send to itself");
    if (ok && n_gpus > 1)
        ok = refused(me, awl_dist_allreduce(pg, awl_ones(AWL_SHAPE(8), AWL_F32, "cuda:1"), AWL_DIST_SUM),
                     "another GPU's tensor", "is on cuda:1, but rank 0's nccl group runs on cuda:0");
    /* none of these broke the group */
    ok = ok && ((awl_dist_allreduce(pg, t, AWL_DIST_SUM) == 0 && awl_dist_barrier(pg) == 0) ||
                rank_fail(me, "after the refusals: %s", awl_last_error()));
    awl_scope_end();
    if (ok) me->status = 0;
    awl_dist_destroy(pg);
}

/* DDP on every rank against one process on the global batch (each rank's
 * reference on its own GPU), as tests/test_ddp.c; on a group of one, DDP
 * against plain training. */
static void ddp_training(dist_rank *me)
{
    awl_process_group *pg = join(me, 0);
    if (!pg) return;
    char dev[32];
    gpu_of(me, dev, sizeof dev);
    awl_gpt_config cfg = dist_tiny_gpt();
    /* different seeds: DDP must broadcast rank 0's weights */
    awl_gpt *model = awl_gpt_new(&cfg, dev, 7 + (uint64_t)me->rank), *ref = awl_gpt_new(&cfg, dev, 7);
    const awl_param_list *p = awl_gpt_parameters(model), *pr = awl_gpt_parameters(ref);
    awl_optimizer *opt = awl_sgd_new(p, 0.1, 0.9, 0.0), *ref_opt = awl_sgd_new(pr, 0.1, 0.9, 0.0);
    awl_ddp *ddp = awl_ddp_new(pg, p, &(awl_ddp_options){.first_bucket_bytes = 512, .bucket_cap_bytes = 4096});
    bool ok = ddp || rank_fail(me, "awl_ddp_new: %s", awl_last_error());
    int share = GLOBAL_BATCH / me->world, first = me->rank * share;
    for (int step = 0; step < STEPS && ok; step++)
        ok = (dist_tiny_backward(model, step, 0, first, share, 1) == 0 && awl_ddp_wait(ddp) == 0 &&
              awl_optimizer_step(opt) == 0 && awl_ddp_zero_grad(ddp) == 0 &&
              dist_tiny_backward(ref, step, 0, 0, GLOBAL_BATCH, 1) == 0 &&
              awl_optimizer_step(ref_opt) == 0 && awl_optimizer_zero_grad(ref_opt) == 0) ||
             rank_fail(me, "step %d: %s", step, awl_last_error());
    if (ok) {
        double worst = max_difference(p, pr);
        me->values[0] = (int64_t)(worst * 1e12); /* picounits */
        me->digest = params_digest(p);
        if (worst > DDP_BOUND) ok = rank_fail(me, "DDP differs from one process by %g", worst);
    }
    if (ok) me->status = 0;
    awl_ddp_free(ddp);
    awl_optimizer_free(opt);
    awl_optimizer_free(ref_opt);
    awl_gpt_free(model);
    awl_gpt_free(ref);
    awl_dist_destroy(pg);
}

/* Records the first failure of a loop of collectives: its status, its
 * message and when; then checks that the broken group fails at once. */
static void record(dist_rank *me, awl_process_group *pg, int status)
{
    me->status = status;
    me->when = dist_now();
    snprintf(me->message, sizeof me->message, "%s", status < 0 ? awl_last_error() : "");
    if (status < 0) me->values[0] = awl_dist_barrier(pg);
}

/* Rank 0 allreduces 100 elements, rank 1 200: both must fail. */
static void disagree(dist_rank *me)
{
    awl_process_group *pg = join(me, 20);
    if (!pg) return;
    char dev[32];
    awl_scope_begin();
    awl_tensor *t = awl_ones(AWL_SHAPE(100 + 100 * me->rank), AWL_F32, gpu_of(me, dev, sizeof dev));
    int status = awl_dist_allreduce(pg, t, AWL_DIST_SUM);
    me->values[1] = (int64_t)(dist_now() * 1e6);
    record(me, pg, status);
    awl_scope_end();
    awl_dist_destroy(pg);
}

/* Rank 1 computes for 4 s before its allreduce; the others' times out
 * after 2. */
static void late_rank(dist_rank *me)
{
    awl_process_group *pg = join(me, 2);
    if (!pg) return;
    char dev[32];
    awl_scope_begin();
    awl_tensor *t = awl_ones(AWL_SHAPE(1000), AWL_F32, gpu_of(me, dev, sizeof dev));
    int status = awl_dist_barrier(pg);
    double start = dist_now();
    if (me->rank == 1) usleep(4000000);
    if (status == 0) status = awl_dist_allreduce(pg, t, AWL_DIST_SUM);
    record(me, pg, status);
    me->values[1] = (int64_t)((me->when - start) * 1e6);
    awl_scope_end();
    awl_dist_destroy(pg);
}

/* Allreduces of 3 MiB until one fails (or 60 s). */
static void allreduce_until_failure(dist_rank *me)
{
    awl_process_group *pg = join(me, 20);
    if (!pg) return;
    char dev[32];
    awl_scope_begin();
    awl_tensor *t = awl_ones(AWL_SHAPE(786432), AWL_F32, gpu_of(me, dev, sizeof dev));
    int status = 0;
    double end = dist_now() + 60;
    snprintf(me->text, sizeof me->text, "ready");
    while (status == 0 && dist_now() < end) status = awl_dist_allreduce(pg, t, AWL_DIST_SUM);
    record(me, pg, status);
    awl_scope_end();
    awl_dist_destroy(pg);
}

/* ---- the cases ------------------------------------------------------------------------------ */

/* That rank me failed with AWL_ERR_DIST, its message naming each of the
 * (NULL-ended) strings, and that its group then failed at once too. */
static void assert_failed(const dist_rank *me, ...)
{
    ck_assert_msg(me->status == AWL_ERR_DIST, "rank %d: status %d: %s", me->rank, me->status,
                  me->message);
    va_list ap;
    va_start(ap, me);
    for (const char *s; (s = va_arg(ap, const char *));)
        ck_assert_msg(strstr(me->message, s), "rank %d's message lacks '%s': %s", me->rank, s,
                      me->message);
    va_end(ap);
    ck_assert_msg(me->values[0] == AWL_ERR_DIST, "rank %d: the broken group's barrier gave %d",
                  me->rank, (int)me->values[0]);
}

START_TEST(test_alone_collectives)
{
    dist_run *run = dist_run_ranks(1, 120, dist_all_collectives, (void *)&nccl);
    dist_check_all_ok(run, 1);
    dist_run_free(run);
}
END_TEST

START_TEST(test_alone_order)
{
    dist_run *run = dist_run_ranks(1, 60, order, NULL);
    dist_check_all_ok(run, 1);
    printf("test_nccl: an allgather behind 40 matmuls: queued in %.3f ms, done after %.1f ms\n",
           run->rank[0].values[0] * 1e-3, run->rank[0].values[1] * 1e-3);
    dist_run_free(run);
}
END_TEST

START_TEST(test_alone_training)
{
    dist_run *run = dist_run_ranks(1, 120, ddp_training, NULL);
    dist_check_all_ok(run, 1);
    printf("test_nccl: DDP on a group of one against plain training: %.3g\n",
           run->rank[0].values[0] * 1e-12);
    dist_run_free(run);
    run = dist_run_ranks(1, 120, zero_alone, NULL);
    dist_check_all_ok(run, 1);
    dist_run_free(run);
}
END_TEST

START_TEST(test_alone_errors)
{
    dist_run *run = dist_run_ranks(1, 60, errors, NULL);
    dist_check_all_ok(run, 1);
    dist_run_free(run);
}
END_TEST

START_TEST(test_ranks_collectives)
{
    int world = _i; /* 2 .. min(GPUs, 4) */
    dist_run *run = dist_run_ranks(world, 180, dist_all_collectives, (void *)&nccl);
    dist_check_all_ok(run, world);
    dist_run_free(run);
}
END_TEST

START_TEST(test_ranks_ddp)
{
    dist_run *run = dist_run_ranks(2, 120, ddp_training, NULL);
    dist_check_all_ok(run, 2);
    for (int r = 0; r < 2; r++)
        ck_assert_msg(run->rank[r].digest == run->rank[0].digest,
                      "rank %d's parameters are not bitwise rank 0's", r);
    printf("test_nccl: DDP on 2 GPUs against one process: %.3g\n", run->rank[0].values[0] * 1e-12);
    dist_run_free(run);
}
END_TEST

START_TEST(test_ranks_disagree)
{
    dist_run *run = dist_run_ranks(2, 60, disagree, NULL);
    ck_assert(!run->timed_out);
    for (int r = 0; r < 2; r++) assert_failed(&run->rank[r], "ranks disagree", "allreduce #", NULL);
    dist_run_free(run);
}
END_TEST

START_TEST(test_ranks_timeout)
{
    dist_run *run = dist_run_ranks(2, 60, late_rank, NULL);
    ck_assert(!run->timed_out);
    assert_failed(&run->rank[0], "timed out after 2 s", "rank 1 (127.0.0.1:", "allreduce #", NULL);
    double waited = run->rank[0].values[1] * 1e-6;
    ck_assert_msg(waited < 3.5, "rank 0 failed after %.2f s, its timeout is 2", waited);
    /* the late rank learns of it when it comes: at once */
    assert_failed(&run->rank[1], "allreduce #", NULL);
    ck_assert_msg(run->rank[1].values[1] * 1e-6 < 4.5, "rank 1 failed %.2f s after its start",
                  run->rank[1].values[1] * 1e-6);
    dist_run_free(run);
}
END_TEST

static void kill_rank_1(dist_run *run, void *arg)
{
    (void)arg;
    double end = dist_now() + 30;
    for (int r = 0; r < 2; r++)
        while (strcmp(run->rank[r].text, "ready") != 0 && dist_now() < end) usleep(1000);
    usleep(500000); /* well into the loop */
    run->rank[1].when = dist_now();
    kill(run->pid[1], SIGKILL);
}

START_TEST(test_ranks_killed)
{
    dist_run *run = dist_run_ranks_with(2, 60, allreduce_until_failure, kill_rank_1, NULL);
    ck_assert(!run->timed_out);
    assert_failed(&run->rank[0], "rank 1 (127.0.0.1:", "allreduce #", "killed", NULL);
    double late = run->rank[0].when - run->rank[1].when;
    printf("test_nccl: rank 1 killed in an allreduce: rank 0 failed %.3f s later\n", late);
    ck_assert_msg(late < 10.0, "rank 0 noticed after %.2f s", late);
    dist_run_free(run);
}
END_TEST

/* GPUs present, counted in a child: this process must not initialise CUDA,
 * or its forked ranks could not use it. */
static int count_gpus(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        int n = 0;
        char name[16];
        while (n < 16 && (snprintf(name, sizeof name, "cuda:%d", n), awl_device_available(name))) n++;
        _exit(n);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 0;
}

int main(void)
{
    n_gpus = count_gpus();
    if (n_gpus == 0) {
        printf("test_nccl: skipped: no CUDA device on this machine\n");
        return 77;
    }
    Suite *s = suite_create("nccl");
    TCase *alone = tcase_create("one GPU");
    tcase_set_timeout(alone, 180);
    tcase_add_test(alone, test_alone_collectives);
    tcase_add_test(alone, test_alone_order);
    tcase_add_test(alone, test_alone_training);
    tcase_add_test(alone, test_alone_errors);
    suite_add_tcase(s, alone);
    if (n_gpus >= 2) {
        TCase *ranks = tcase_create("one rank per GPU");
        tcase_set_timeout(ranks, 300);
        tcase_add_loop_test(ranks, test_ranks_collectives, 2, (n_gpus < 4 ? n_gpus : 4) + 1);
        tcase_add_test(ranks, test_ranks_ddp);
        tcase_add_test(ranks, test_ranks_disagree);
        tcase_add_test(ranks, test_ranks_timeout);
        tcase_add_test(ranks, test_ranks_killed);
        suite_add_tcase(s, ranks);
    } else {
        printf("test_nccl: 1 GPU: the cases of 2 ranks or more need 2 GPUs, skipped\n");
    }
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#else

int main(void)
{
    printf("test_nccl: skipped: awl was built without the NCCL transport (AWL_WITH_NCCL=OFF: no "
           "CUDA, or no NCCL beside it)\n");
    return 77;
}

#endif
