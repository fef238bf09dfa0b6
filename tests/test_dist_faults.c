/*
 * tests/test_dist_faults.c - a distributed job never hangs and never
 * computes a wrong result: a killed rank, a frozen one, ranks that call
 * different collectives, a collective nobody else joins, a rank that left,
 * and strangers sending garbage to the store and to a rank's port. Every
 * surviving rank must fail with AWL_ERR_DIST and a message naming the rank
 * at fault, within the bounds asserted below; garbage must not disturb the
 * job at all.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "awl.h"
#include "dist/net.h"
#include "helpers/dist_harness.h"

static awl_process_group *join(dist_rank *me, double timeout, double peer_timeout)
{
    awl_dist_options o = dist_test_options(me);
    o.timeout_s = timeout;
    o.peer_timeout_s = peer_timeout;
    awl_process_group *pg = awl_dist_init(&o);
    if (!pg) {
        snprintf(me->message, sizeof me->message, "init: %s", awl_last_error());
        me->status = -1000;
    }
    return pg;
}

/* Records the first failure of a loop of collectives: status, message, time. */
static void record(dist_rank *me, int status)
{
    me->status = status;
    me->when = dist_now();
    snprintf(me->message, sizeof me->message, "%s", status < 0 ? awl_last_error() : "");
}

/* Allreduces (or, with arg "reduce_scatter", reduce-scatters) of 3 MiB
 * until something fails (or 60 s). */
static void allreduce_until_failure(dist_rank *me)
{
    awl_process_group *pg = join(me, 20, 3);
    if (!pg) return;
    bool scatter = me->arg && strcmp(me->arg, "reduce_scatter") == 0;
    awl_scope_begin();
    awl_tensor *t = awl_ones(AWL_SHAPE(786432), AWL_F32, "cpu");
    awl_tensor *part = awl_empty(AWL_SHAPE(786432 / me->world), AWL_F32, "cpu");
    int status = 0;
    double end = dist_now() + 60;
    snprintf(me->text, sizeof me->text, "ready");
    while (status == 0 && dist_now() < end)
        status = scatter ? awl_dist_reduce_scatter(pg, part, t, AWL_DIST_SUM)
                         : awl_dist_allreduce(pg, t, AWL_DIST_SUM);
    record(me, status);
    /* once broken, everything fails at once */
    if (status < 0) me->values[0] = awl_dist_barrier(pg);
    awl_scope_end();
    awl_dist_destroy(pg);
}

static void wait_until_ready(dist_run *run, int world)
{
    double end = dist_now() + 20;
    for (int r = 0; r < world; r++)
        while (strcmp(run->rank[r].text, "ready") != 0 && dist_now() < end) usleep(1000);
    usleep(300000); /* well into the loop */
}

static void kill_rank_2(dist_run *run, void *arg)
{
    (void)arg;
    wait_until_ready(run, 3);
    run->rank[2].when = dist_now();
    kill(run->pid[2], SIGKILL);
}

static void assert_names(const dist_rank *me, const char *a, const char *b, const char *c)
{
    ck_assert_msg(me->status == AWL_ERR_DIST, "rank %d: status %d: %s", me->rank, me->status,
                  me->message);
    ck_assert_msg(strstr(me->message, a), "rank %d's message lacks '%s': %s", me->rank, a,
                  me->message);
    if (b) ck_assert_msg(strstr(me->message, b), "rank %d's message lacks '%s': %s", me->rank, b, me->message);
    if (c) ck_assert_msg(strstr(me->message, c), "rank %d's message lacks '%s': %s", me->rank, c, me->message);
}

/* A rank killed in the middle of allreduces: the others fail within 2 s,
 * naming it, its address, the operation and its sequence number. */
START_TEST(test_killed_rank_in_collective)
{
    const char *op = _i ? "reduce_scatter" : "allreduce";
    dist_run *run = dist_run_ranks_with(3, 60, allreduce_until_failure, kill_rank_2, (void *)op);
    ck_assert(!run->timed_out);
    char what[32];
    snprintf(what, sizeof what, "%s #", op);
    for (int r = 0; r < 2; r++) {
        assert_names(&run->rank[r], "rank 2 (127.0.0.1:", what, "killed");
        double late = run->rank[r].when - run->rank[2].when;
        ck_assert_msg(late < 2.0, "rank %d noticed after %.2f s", r, late);
        ck_assert_int_eq(run->rank[r].values[0], AWL_ERR_DIST);
    }
    dist_run_free(run);
}
END_TEST

/* A rank that was computing when its peer died fails at its next
 * collective, at once, naming the dead rank. */
static void compute_then_collect(dist_rank *me)
{
    awl_process_group *pg = join(me, 20, 3);
    if (!pg) return;
    awl_scope_begin();
    awl_tensor *t = awl_ones(AWL_SHAPE(16), AWL_F32, "cpu");
    int status = awl_dist_allreduce(pg, t, AWL_DIST_SUM);
    snprintf(me->text, sizeof me->text, "ready");
    if (me->rank == 2) pause(); /* killed here */
    usleep(1500000);            /* "computing" while rank 2 dies */
    double before = dist_now();
    if (status == 0) status = awl_dist_allreduce(pg, t, AWL_DIST_SUM);
    record(me, status);
    me->values[1] = (int64_t)((me->when - before) * 1e6);
    awl_scope_end();
    awl_dist_destroy(pg);
}

START_TEST(test_killed_rank_while_computing)
{
    dist_run *run = dist_run_ranks_with(3, 60, compute_then_collect, kill_rank_2, NULL);
    ck_assert(!run->timed_out);
    for (int r = 0; r < 2; r++) {
        assert_names(&run->rank[r], "rank 2 (127.0.0.1:", "between collectives", NULL);
        ck_assert_msg(run->rank[r].values[1] < 500000, "rank %d's collective took %lld us to fail", r,
                      (long long)run->rank[r].values[1]);
    }
    dist_run_free(run);
}
END_TEST

/* A frozen rank (SIGSTOP: its sockets stay open, it sends nothing) is
 * reported as silent once the peer timeout (3 s here) has passed. */
static void freeze_rank_2(dist_run *run, void *arg)
{
    (void)arg;
    wait_until_ready(run, 3);
    run->rank[2].when = dist_now();
    kill(run->pid[2], SIGSTOP);
    double end = dist_now() + 30;
    while ((run->rank[0].status == -999 || run->rank[1].status == -999) && dist_now() < end)
        usleep(10000);
    kill(run->pid[2], SIGKILL);
}

START_TEST(test_silent_rank)
{
    dist_run *run = dist_run_ranks_with(3, 60, allreduce_until_failure, freeze_rank_2, NULL);
    ck_assert(!run->timed_out);
    for (int r = 0; r < 2; r++) {
        assert_names(&run->rank[r], "rank 2 (127.0.0.1:", NULL, NULL);
        double late = run->rank[r].when - run->rank[2].when;
        ck_assert_msg(late < 3.0 + 2.0, "rank %d noticed after %.2f s", r, late);
    }
    /* at least one of them saw the silence itself */
    ck_assert(strstr(run->rank[0].message, "has not been heard from") ||
              strstr(run->rank[1].message, "has not been heard from"));
    dist_run_free(run);
}
END_TEST

/* ---- disagreements ------------------------------------------------------------------------ */

enum { SIZES, ORDER, DTYPE, OP, EMPTY };

static void disagree(dist_rank *me)
{
    int kind = *(int *)me->arg;
    awl_process_group *pg = join(me, 20, 3);
    if (!pg) return;
    awl_scope_begin();
    bool odd = me->rank == me->world - 1; /* the last rank does something else */
    int status = awl_dist_barrier(pg);
    awl_tensor *a = awl_ones(AWL_SHAPE(1000), AWL_F32, "cpu");
    if (status == 0) switch (kind) {
        case SIZES:
            status = awl_dist_allreduce(pg, odd ? awl_ones(AWL_SHAPE(1001), AWL_F32, "cpu") : a,
                                        AWL_DIST_SUM);
            break;
        case ORDER:
            status = odd ? awl_dist_broadcast(pg, a, 0) : awl_dist_allreduce(pg, a, AWL_DIST_SUM);
            if (status == 0)
                status = odd ? awl_dist_allreduce(pg, a, AWL_DIST_SUM) : awl_dist_broadcast(pg, a, 0);
            break;
        case DTYPE:
            status = awl_dist_allreduce(pg, odd ? awl_ones(AWL_SHAPE(1000), AWL_F64, "cpu") : a,
                                        AWL_DIST_SUM);
            break;
        case OP:
            status = odd ? awl_dist_allgather(pg, awl_zeros(AWL_SHAPE(1000 * me->world), AWL_F32, "cpu"), a)
                         : awl_dist_allreduce(pg, a, AWL_DIST_SUM);
            break;
        case EMPTY: /* no data flows from the odd rank: only its STATE tells */
            status = awl_dist_allreduce(pg, odd ? awl_ones(AWL_SHAPE(0), AWL_F32, "cpu") : a,
                                        AWL_DIST_SUM);
            if (status == 0) status = awl_dist_barrier(pg);
            break;
        }
    record(me, status);
    awl_scope_end();
    awl_dist_destroy(pg);
}

START_TEST(test_disagreement)
{
    int kind = _i;
    int world = kind == ORDER ? 2 : 3;
    double start = dist_now();
    dist_run *run = dist_run_ranks(world, 60, disagree, &kind);
    ck_assert(!run->timed_out);
    int named = 0;
    for (int r = 0; r < world; r++) {
        const dist_rank *me = &run->rank[r];
        ck_assert_msg(me->status == AWL_ERR_DIST, "case %d rank %d: status %d: %s", kind, r,
                      me->status, me->message);
        ck_assert_msg(me->when - start < 15, "case %d rank %d failed only after %.1f s", kind, r,
                      me->when - start);
        named += strstr(me->message, "disagree") != NULL;
    }
    /* someone saw both fingerprints and said so; the others relay it */
    ck_assert_msg(named >= 1, "case %d: nobody said 'disagree': %s", kind, run->rank[0].message);
    dist_run_free(run);
}
END_TEST

/* ---- timeouts and departures --------------------------------------------------------------- */

/* Rank 1 stays alive (heartbeats go on) but does not join collective #2:
 * rank 0 gives up after its 2 s timeout, naming rank 1 and what it did last. */
static void lonely(dist_rank *me)
{
    awl_process_group *pg = join(me, 2, 3);
    if (!pg) return;
    int status = awl_dist_barrier(pg);
    if (me->rank == 0) {
        awl_scope_begin();
        if (status == 0) status = awl_dist_allreduce(pg, awl_ones(AWL_SHAPE(8), AWL_F32, "cpu"), AWL_DIST_SUM);
        awl_scope_end();
        record(me, status);
    } else {
        usleep(4000000);
        me->status = 0;
    }
    awl_dist_destroy(pg);
}

START_TEST(test_collective_timeout)
{
    dist_run *run = dist_run_ranks(2, 60, lonely, NULL);
    ck_assert(!run->timed_out);
    assert_names(&run->rank[0], "timed out after 2 s", "rank 1 (127.0.0.1:", "finished barrier #1");
    dist_run_free(run);
}
END_TEST

/* Rank 1 leaves after one barrier; rank 0's second barrier fails at once. */
static void leaver(dist_rank *me)
{
    awl_process_group *pg = join(me, 20, 3);
    if (!pg) return;
    int status = awl_dist_barrier(pg);
    if (me->rank == 0) {
        usleep(500000);
        double before = dist_now();
        if (status == 0) status = awl_dist_barrier(pg);
        record(me, status);
        me->values[1] = (int64_t)((me->when - before) * 1e6);
    } else {
        me->status = status;
    }
    awl_dist_destroy(pg);
}

START_TEST(test_rank_left)
{
    dist_run *run = dist_run_ranks(2, 60, leaver, NULL);
    ck_assert(!run->timed_out);
    ck_assert_int_eq(run->rank[1].status, 0);
    assert_names(&run->rank[0], "rank 1 (127.0.0.1:", "left the group", "barrier #2");
    ck_assert(run->rank[0].values[1] < 1000000);
    dist_run_free(run);
}
END_TEST

/* ---- strangers ------------------------------------------------------------------------------ */

/* Connects to 127.0.0.1:port and sends bytes (garbage, or a hello with the
 * wrong token), then lingers a moment. */
static void stranger(int port, const void *bytes, size_t n)
{
    char err[128];
    int fd = awl_net_connect("127.0.0.1", port, awl_net_now() + 2, err, sizeof err);
    if (fd < 0) return;
    awl_net_send_all(fd, bytes, n, awl_net_now() + 1, err, sizeof err);
    usleep(100000);
    close(fd);
}

static void strangers_at_the_door(dist_run *run, void *arg)
{
    (void)arg;
    const char garbage[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n\x01\x02\x03 and a lot more nonsense";
    net_hello h = {NET_VERSION, NET_KIND_STORE, {0}, 1, 2, 0};
    awl_net_token_bytes("another job's token", h.token);
    uint8_t foreign[NET_HELLO_BYTES];
    awl_net_hello_encode(&h, foreign);
    /* at the store while the ranks rendezvous */
    stranger(run->rank[0].port, garbage, sizeof garbage);
    stranger(run->rank[0].port, foreign, sizeof foreign);
    /* at rank 1's own port once the job runs */
    double end = dist_now() + 20;
    while (!run->rank[1].text[0] && dist_now() < end) usleep(1000);
    char host[64];
    int port = 0;
    if (awl_net_split_address(run->rank[1].text, host, sizeof host, &port, 0) == 0 && port) {
        stranger(port, garbage, sizeof garbage);
        h.kind = NET_KIND_DATA;
        awl_net_hello_encode(&h, foreign);
        stranger(port, foreign, sizeof foreign);
    }
    stranger(run->rank[0].port, garbage, 5); /* and the store again, mid-job */
}

static void steady_job(dist_rank *me)
{
    awl_process_group *pg = join(me, 20, 3);
    if (!pg) return;
    if (me->rank == 1) {
        void *addr;
        if (awl_store_get(awl_dist_store(pg), "awl/rank/1/addr", &addr, NULL, 5) == 0) {
            snprintf(me->text, sizeof me->text, "%s", (char *)addr);
            free(addr);
        }
    }
    awl_scope_begin();
    awl_tensor *t = awl_ones(AWL_SHAPE(100000), AWL_F32, "cpu");
    int status = 0;
    for (int i = 0; i < 200 && status == 0; i++) {
        awl_tensor_fill_(t, 1.0);
        status = awl_dist_allreduce(pg, t, AWL_DIST_SUM);
        if (status == 0 && awl_item(awl_tensor_slice(t, 0, 0, 1, 1)) != me->world) status = -77;
        usleep(2000);
    }
    record(me, status);
    awl_scope_end();
    awl_dist_destroy(pg);
}

START_TEST(test_strangers_do_not_disturb)
{
    dist_run *run = dist_run_ranks_with(2, 60, steady_job, strangers_at_the_door, NULL);
    ck_assert(!run->timed_out);
    for (int r = 0; r < 2; r++)
        ck_assert_msg(run->rank[r].status == 0, "rank %d: %d: %s", r, run->rank[r].status,
                      run->rank[r].message);
    ck_assert_msg(run->rank[1].text[0], "rank 1 did not publish its address");
    dist_run_free(run);
}
END_TEST

/* World size 1 opens no socket and every collective is the identity. */
START_TEST(test_world_of_one)
{
    awl_dist_options o = awl_dist_default_options();
    o.rank = 0;
    o.world_size = 1;
    o.master_port = 1; /* nothing may listen or connect */
    awl_process_group *pg = awl_dist_init(&o);
    ck_assert_ptr_nonnull(pg);
    ck_assert_ptr_null(awl_dist_store(pg));
    awl_scope_begin();
    awl_tensor *t = awl_full(AWL_SHAPE(3), 2.5, AWL_F32, "cpu");
    ck_assert_int_eq(awl_dist_allreduce(pg, t, AWL_DIST_AVG), 0);
    ck_assert_int_eq(awl_dist_barrier(pg), 0);
    awl_work *w = awl_dist_allreduce_async(pg, t, AWL_DIST_SUM);
    ck_assert_int_eq(awl_work_test(w), 1);
    ck_assert_int_eq(awl_work_wait(w), 0);
    ck_assert_double_eq(awl_item(awl_tensor_slice(t, 0, 2, 3, 1)), 2.5);
    ck_assert_int_lt(awl_dist_send(pg, t, 0), 0);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "cannot send to itself"));
    ck_assert_int_lt(awl_dist_allreduce(pg, awl_ones(AWL_SHAPE(2), AWL_I32, "cpu"), AWL_DIST_AVG), 0);
    ck_assert_ptr_nonnull(strstr(awl_last_error(), "AVG of int32"));
    awl_scope_end();
    awl_dist_destroy(pg);
}
END_TEST

static Suite *faults_suite(void)
{
    Suite *s = suite_create("dist_faults");
    TCase *tc = tcase_create("faults");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_killed_rank_in_collective, 0, 2); /* allreduce, reduce_scatter */
    tcase_add_test(tc, test_killed_rank_while_computing);
    tcase_add_test(tc, test_silent_rank);
    tcase_add_loop_test(tc, test_disagreement, SIZES, EMPTY + 1);
    tcase_add_test(tc, test_collective_timeout);
    tcase_add_test(tc, test_rank_left);
    tcase_add_test(tc, test_strangers_do_not_disturb);
    tcase_add_test(tc, test_world_of_one);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(faults_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
