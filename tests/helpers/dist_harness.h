/*
 * tests/helpers/dist_harness.h - runs a test body in several processes, one
 * per rank, on loopback, and collects what each rank reports.
 *
 *     static void body(dist_rank *me) { ... me->status = ...; }
 *     dist_run run = dist_run_ranks(4, 60.0, body, NULL);   // forks 4 ranks
 *     ck_assert_int_eq(run.rank[2].status, 0);
 *
 * Each rank is a forked child that gets its rank, the world size, a free
 * port for the store and a slot in shared memory (status, a message, a
 * time, a 64-bit digest of whatever it computed). It ends with exit(0),
 * so under LeakSanitizer a leak makes its exit status non-zero. The parent waits for all
 * of them, and kills the lot (then fails the test) when they run past the
 * time limit: a hang becomes a failure, never a stuck test.
 */
#ifndef AWL_TESTS_DIST_HARNESS_H
#define AWL_TESTS_DIST_HARNESS_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "awl.h"

#define DIST_MAX_RANKS 8

typedef struct dist_rank {
    int rank, world, port;
    void *arg;
    /* written by the rank */
    int status;
    char message[2048];
    double when;      /* monotonic seconds, e.g. when an error surfaced */
    uint64_t digest;  /* e.g. a hash of the final parameters */
    int64_t values[8];
    char text[256];   /* e.g. an address the parent needs */
} dist_rank;

typedef struct dist_run {
    dist_rank rank[DIST_MAX_RANKS];
    int exit_status[DIST_MAX_RANKS]; /* waitpid's status */
    bool timed_out;
    pid_t pid[DIST_MAX_RANKS];
} dist_run;

static inline double dist_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A port nothing listens on right now. */
static inline int dist_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    bind(fd, (struct sockaddr *)&a, sizeof a);
    getsockname(fd, (struct sockaddr *)&a, &len);
    close(fd);
    return ntohs(a.sin_port);
}

/* The options of rank me with short timeouts (tests must end fast). */
static inline awl_dist_options dist_test_options(const dist_rank *me)
{
    awl_dist_options o = awl_dist_default_options();
    o.rank = me->rank;
    o.world_size = me->world;
    o.master_addr = "127.0.0.1";
    o.master_port = me->port;
    o.token = "awl-test-token";
    o.timeout_s = 20;
    o.peer_timeout_s = 3;
    o.init_timeout_s = 20;
    return o;
}

/* awl_dist_init(o) for rank me; NULL after recording why in me. */
static inline awl_process_group *dist_test_init(dist_rank *me, const awl_dist_options *o)
{
    awl_process_group *pg = awl_dist_init(o);
    if (!pg) {
        snprintf(me->message, sizeof me->message, "init: %s", awl_last_error());
        me->status = -1;
    }
    return pg;
}

/* A 64-bit FNV-1a digest of bytes. */
static inline uint64_t dist_digest(const void *data, size_t n, uint64_t h)
{
    const unsigned char *p = data;
    if (!h) h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

/* The shared slots of the current run, for a parent that acts while the
 * ranks run (see dist_run_ranks_with). */
typedef void (*dist_body)(dist_rank *me);
typedef void (*dist_parent)(dist_run *run, void *arg);

/* Forks world ranks running body; `during`, if not NULL, runs in the
 * parent while they do (it may kill one). */
static inline dist_run *dist_run_ranks_with(int world, double limit, dist_body body,
                                            dist_parent during, void *arg)
{
    dist_run *run = mmap(NULL, sizeof *run, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                         -1, 0);
    memset(run, 0, sizeof *run);
    int port = dist_free_port();
    fflush(stdout);
    fflush(stderr);
    for (int r = 0; r < world; r++) {
        dist_rank *me = &run->rank[r];
        me->rank = r;
        me->world = world;
        me->port = port;
        me->arg = arg;
        me->status = -999; /* "never reported" */
        pid_t pid = fork();
        if (pid == 0) {
            alarm((unsigned)limit + 5); /* belt and braces: never outlive the test */
            body(me);
            exit(0); /* not _exit: LeakSanitizer checks the rank at exit */
        }
        run->pid[r] = pid;
    }
    if (during) during(run, arg);
    double deadline = dist_now() + limit;
    int left = world;
    while (left > 0) {
        for (int r = 0; r < world; r++) {
            if (!run->pid[r]) continue;
            int st;
            if (waitpid(run->pid[r], &st, WNOHANG) == run->pid[r]) {
                run->exit_status[r] = st;
                run->pid[r] = 0;
                left--;
            }
        }
        if (left && dist_now() > deadline) {
            run->timed_out = true;
            for (int r = 0; r < world; r++)
                if (run->pid[r]) kill(run->pid[r], SIGKILL);
        }
        if (left) usleep(2000);
    }
    return run;
}

static inline dist_run *dist_run_ranks(int world, double limit, dist_body body, void *arg)
{
    return dist_run_ranks_with(world, limit, body, NULL, arg);
}

static inline void dist_run_free(dist_run *run) { munmap(run, sizeof *run); }

/* ---- a GPT small enough to train on several ranks in a test ------------------------------ */

/* vocabulary 17, block 8, 2 layers, 2 heads, width 16, no dropout */
static inline awl_gpt_config dist_tiny_gpt(void)
{
    awl_gpt_config cfg;
    awl_gpt_config_named("cpu-small", &cfg);
    cfg.vocab = 17;
    cfg.block = 8;
    cfg.n_layer = 2;
    cfg.n_head = 2;
    cfg.n_embd = 16;
    cfg.dropout = 0;
    return cfg;
}

/* Forward and backward of (loss * scale) on rows [first, first + n) of
 * the global batch of (step, micro): token ids a fixed function of the row
 * and position, the same on every rank, on the model's device. */
static inline int dist_tiny_backward(awl_gpt *model, int step, int micro, int first, int n,
                                     double scale)
{
    char device[32];
    awl_tensor_device_name(awl_gpt_parameters(model)->items[0].tensor, device, sizeof device);
    int32_t *xs = malloc((size_t)n * 8 * sizeof *xs), *ys = malloc((size_t)n * 8 * sizeof *ys);
    for (int b = 0; b < n; b++)
        for (int t = 0; t < 8; t++) {
            int row = first + b;
            xs[b * 8 + t] = (row * 7 + t * 3 + step * 5 + micro * 11) % 17;
            ys[b * 8 + t] = (row * 5 + t * 2 + step * 3 + micro) % 17;
        }
    awl_scope_begin();
    awl_tensor *x = awl_from_data(xs, AWL_SHAPE(n, 8), AWL_I32, device);
    awl_tensor *y = awl_from_data(ys, AWL_SHAPE(n, 8), AWL_I32, device);
    awl_tensor *loss = awl_keep(awl_mul_scalar(awl_gpt_loss(model, x, y), scale));
    awl_scope_end();
    free(xs);
    free(ys);
    int status = loss ? awl_backward(loss) : -1;
    awl_release(loss);
    return status;
}

#endif
