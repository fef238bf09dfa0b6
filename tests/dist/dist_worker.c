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
 *     hang                   a barrier, then sleep until a signal
 *     env                    print the launcher's variables
 *     free-port              print a TCP port free on 127.0.0.1 now
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "awl.h"
#include "dist/net.h"

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
    if (strcmp(mode, "free-port") == 0) {
        char err[128];
        int fd = net_listen("127.0.0.1", 0, err, sizeof err);
        printf("%d\n", fd >= 0 ? net_local_port(fd) : 29611);
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
