/*
 * tests/dist/dist_worker.c - one rank of a test job, started by awlrun or by
 * the namespace tests with torchrun's variables set. What it does is its
 * first argument:
 *
 *     check                  every collective on known values; "rank R ok"
 *     digest N ITERS         ITERS averages of N random floats (seeded by rank);
 *                            prints "digest <hex>" of the result
 *     loop SECONDS           3 MiB allreduces until one fails (exit 3, printing
 *                            "rank R failed after T s: <message>") or time is up
 *     fail RANK CODE         rank RANK exits with CODE after a barrier, the others loop
 *     crash RANK             rank RANK aborts after a barrier, the others loop
 *     fail-slowly RANK CODE  rank RANK shuts its sockets after a barrier, then
 *                            exits with CODE 1 s later, ignoring SIGTERM: the
 *                            others notice, fail and exit first (as when a
 *                            dead rank's exit is slow)
 *     hang                   a barrier, then sleep until a signal
 *     env                    print the launcher's variables
 *     launch                 print what awl_dist_launch_info makes of them
 *     ddp                    a tiny GPT under DDP against one process on the
 *                            global batch; "rank R ddp ok"
 *     disagree               the last rank allreduces 11 elements, the others 10
 *     free-port              print a TCP port free on 127.0.0.1 now
 */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "awl.h"
#include "dist/net.h"
#include "helpers/dist_harness.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static awl_process_group *join(void)
{
    awl_process_group *pg = awl_dist_init(NULL);
    if (!pg) {
        fprintf(stderr, "dist_worker: %s\n", awl_last_error());
        exit(2);
    }
    return pg;
}

static int loop(awl_process_group *pg, double seconds)
{
    awl_scope_begin();
    awl_tensor *t = awl_ones(AWL_SHAPE(786432), AWL_F32, "cpu");
    double start = now();
    int status = 0;
    while (status == 0 && now() - start < seconds) status = awl_dist_allreduce(pg, t, AWL_DIST_SUM);
    awl_scope_end();
    if (status == 0) return 0;
    fprintf(stderr, "rank %d failed after %.2f s: %s\n", awl_dist_rank(pg), now() - start,
            awl_last_error());
    return 3;
}

static int check(awl_process_group *pg)
{
    int r = awl_dist_rank(pg), n = awl_dist_world_size(pg);
    int status = 0;
    awl_scope_begin();
    for (int64_t count = 0; count <= 300001 && status == 0; count = count * 7 + 1) {
        awl_tensor *t = awl_full(AWL_SHAPE(count), r + 1, AWL_F32, "cpu");
        awl_tensor *all = awl_zeros(AWL_SHAPE(count * n), AWL_F64, "cpu");
        status = awl_dist_allreduce(pg, t, AWL_DIST_SUM);
        if (status == 0 && count && awl_item(awl_tensor_slice(t, 0, count - 1, count, 1)) != n * (n + 1) / 2)
            status = -100;
        if (status == 0) status = awl_dist_broadcast(pg, t, n - 1);
        if (status == 0)
            status = awl_dist_allgather(pg, all, awl_full(AWL_SHAPE(count), r, AWL_F64, "cpu"));
        if (status == 0 && count && awl_item(awl_tensor_slice(all, 0, count * n - 1, count * n, 1)) != n - 1)
            status = -101;
    }
    if (status == 0) status = awl_dist_barrier(pg);
    awl_scope_end();
    if (status) {
        fprintf(stderr, "rank %d: check failed (%d): %s\n", r, status, awl_last_error());
        return 1;
    }
    printf("rank %d ok\n", r);
    return 0;
}

static int digest(awl_process_group *pg, int64_t n, int iters)
{
    awl_manual_seed(99 + (uint64_t)awl_dist_rank(pg));
    awl_scope_begin();
    awl_tensor *t = awl_randn(AWL_SHAPE(n), AWL_F32, "cpu");
    int status = 0;
    for (int i = 0; i < iters && status == 0; i++) status = awl_dist_allreduce(pg, t, AWL_DIST_AVG);
    float *v = malloc((size_t)n * sizeof *v);
    awl_to_host(t, v, (size_t)n * sizeof *v);
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < (size_t)n * sizeof *v; i++) h = (h ^ ((unsigned char *)v)[i]) * 1099511628211ULL;
    free(v);
    awl_scope_end();
    if (status) {
        fprintf(stderr, "rank %d: %s\n", awl_dist_rank(pg), awl_last_error());
        return 1;
    }
    printf("digest %016llx\n", (unsigned long long)h);
    return 0;
}

/* 3 SGD steps of the tiny GPT under DDP against the same on the whole
 * batch in this process (the bound of tests/test_ddp.c). */
static int ddp(awl_process_group *pg)
{
    int r = awl_dist_rank(pg), n = awl_dist_world_size(pg), share = 8 / n, status = 0;
    awl_gpt_config cfg = dist_tiny_gpt();
    awl_gpt *model = awl_gpt_new(&cfg, "cpu", 3), *ref = awl_gpt_new(&cfg, "cpu", 3);
    awl_ddp *d = awl_ddp_new(pg, awl_gpt_parameters(model), NULL);
    awl_optimizer *o = awl_sgd_new(awl_gpt_parameters(model), 0.1, 0.9, 0);
    awl_optimizer *ro = awl_sgd_new(awl_gpt_parameters(ref), 0.1, 0.9, 0);
    if (!d) status = -1;
    for (int step = 0; step < 3 && status == 0; step++) {
        status = dist_tiny_backward(model, step, 0, r * share, share, 1.0);
        if (status == 0) status = awl_ddp_wait(d);
        if (status == 0) status = awl_optimizer_step(o);
        if (status == 0) status = awl_ddp_zero_grad(d);
        if (status == 0) status = dist_tiny_backward(ref, step, 0, 0, 8, 1.0);
        if (status == 0) status = awl_optimizer_step(ro);
        awl_optimizer_zero_grad(ro);
    }
    const awl_param_list *a = awl_gpt_parameters(model), *b = awl_gpt_parameters(ref);
    double worst = 0;
    for (int i = 0; status == 0 && i < a->count; i++) {
        int64_t k = awl_numel(a->items[i].tensor);
        float *x = malloc((size_t)k * 4), *y = malloc((size_t)k * 4);
        awl_to_host(a->items[i].tensor, x, (size_t)k * 4);
        awl_to_host(b->items[i].tensor, y, (size_t)k * 4);
        for (int64_t j = 0; j < k; j++) worst = fmax(worst, fabs((double)x[j] - y[j]));
        free(x);
        free(y);
    }
    if (status) fprintf(stderr, "rank %d: %s\n", r, awl_last_error());
    else if (worst > 1e-6) fprintf(stderr, "rank %d: DDP differs from one process by %g\n", r, worst);
    else printf("rank %d ddp ok (%g)\n", r, worst);
    awl_ddp_free(d);
    awl_optimizer_free(o);
    awl_optimizer_free(ro);
    awl_gpt_free(model);
    awl_gpt_free(ref);
    return status == 0 && worst <= 1e-6 ? 0 : 1;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "env") == 0) {
        const char *vars[] = {"RANK",        "WORLD_SIZE",  "LOCAL_RANK",    "LOCAL_WORLD_SIZE",
                              "MASTER_ADDR", "MASTER_PORT", "AWL_JOB_TOKEN", "OMP_NUM_THREADS"};
        for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
            printf("%s=%s\n", vars[i], getenv(vars[i]) ? getenv(vars[i]) : "");
        return 0;
    }
    if (strcmp(mode, "launch") == 0) {
        awl_dist_launch l;
        if (awl_dist_launch_info(NULL, &l) < 0) {
            fprintf(stderr, "dist_worker: %s\n", awl_last_error());
            return 2;
        }
        printf("launcher=%s rank=%d world=%d local=%d master=%s:%d backend=%s\n", l.launcher, l.rank,
               l.world_size, l.local_rank, l.master_addr, l.master_port, l.backend);
        return 0;
    }
    if (strcmp(mode, "free-port") == 0) {
        char err[128];
        int fd = awl_net_listen("127.0.0.1", 0, err, sizeof err);
        printf("%d\n", fd >= 0 ? awl_net_local_port(fd) : 29611);
        return 0;
    }
    awl_process_group *pg = join();
    int rank = awl_dist_rank(pg), status = 0;
    if (strcmp(mode, "check") == 0) {
        status = check(pg);
    } else if (strcmp(mode, "digest") == 0 && argc > 3) {
        status = digest(pg, atol(argv[2]), atoi(argv[3]));
    } else if (strcmp(mode, "loop") == 0 && argc > 2) {
        status = loop(pg, atof(argv[2]));
    } else if ((strcmp(mode, "fail") == 0 || strcmp(mode, "crash") == 0) && argc > 2) {
        awl_dist_barrier(pg);
        if (rank == atoi(argv[2])) {
            fprintf(stderr, "rank %d: failing on purpose\n", rank);
            fflush(stderr);
            if (mode[0] == 'c') abort();
            exit(argc > 3 ? atoi(argv[3]) : 1);
        }
        status = loop(pg, 60);
    } else if (strcmp(mode, "fail-slowly") == 0 && argc > 3) {
        awl_dist_barrier(pg);
        if (rank == atoi(argv[2])) {
            fprintf(stderr, "rank %d: failing on purpose, slowly\n", rank);
            fflush(stderr);
            signal(SIGTERM, SIG_IGN);
            const char *report = getenv("AWLRUN_REPORT_FD");
            if (report) close(atoi(report)); /* a dead rank reports nothing */
            for (int fd = 3; fd < 1024; fd++) shutdown(fd, SHUT_RDWR); /* ENOTSOCK for the rest */
            sleep(1);
            exit(atoi(argv[3]));
        }
        status = loop(pg, 60);
    } else if (strcmp(mode, "ddp") == 0) {
        status = ddp(pg);
    } else if (strcmp(mode, "disagree") == 0) {
        awl_scope_begin();
        bool odd = rank == awl_dist_world_size(pg) - 1;
        status = awl_dist_allreduce(pg, awl_ones(AWL_SHAPE(odd ? 11 : 10), AWL_F32, "cpu"), AWL_DIST_SUM);
        awl_scope_end();
        if (status) fprintf(stderr, "rank %d failed: %s\n", rank, awl_last_error());
        status = status ? 3 : 0;
    } else if (strcmp(mode, "hang") == 0) {
        awl_dist_barrier(pg);
        printf("rank %d waiting\n", rank);
        fflush(stdout);
        for (;;) pause();
    } else {
        fprintf(stderr, "dist_worker: unknown mode '%s' (see the source)\n", mode);
        status = 2;
    }
    awl_dist_destroy(pg);
    return status;
}
