/*
 * bench/bench_dist.c - the TCP process group against the wire it runs on,
 * and DDP training steps; one JSON line per measurement (rank 0 prints).
 *
 *     ./build/bench_dist                                 # 2 and 4 ranks, 4 KiB .. 256 MiB
 *     ./build/bench_dist --ranks 2 --max-bytes 16777216
 *     ./build/bench_dist --no-allreduce --ddp cpu-medium --ddp-ranks 1,4 --threads 4
 *     mpirun -np 2 ./build/bench_dist --backend mpi --ddp cpu-medium
 *     ./build/bench_dist --backend nccl --ranks 2 --min-bytes 1048576 --max-bytes 1073741824 \
 *         --ddp gpt2-124m --ddp-ranks 1,2 --device cuda --precision bf16
 *
 * It forks the ranks itself (one process each, on loopback, each pinned to
 * `threads` cores of its own when the machine has enough), or, started by
 * awlrun, mpirun or srun, is one rank of the job they made. With --backend
 * mpi (under mpirun, ranks on one host) every measurement runs over awl's
 * MPI transport ("mpi") and over its TCP transport ("tcp") in the same
 * process, and the allreduce rounds also call Open MPI's MPI_Allreduce
 * directly ("mpi-direct"); vs_mpi_direct = MPI_Allreduce's time / this
 * path's time. With --backend nccl, rank r on cuda:r (forked here) or on
 * cuda:<LOCAL_RANK> (under awlrun), the allreduces are of float32 CUDA
 * tensors over awl's NCCL transport ("nccl"; no raw ring: PyTorch's
 * torch.distributed allreduce, scripts/torch_nccl_allreduce.py, is the
 * peer to put beside it), and --device cuda puts DDP's model on the
 * rank's GPU, --precision bf16 under bfloat16 autocast.
 *
 * allreduce  For each size, alternated rounds of
 *              - a raw TCP ring: every rank sends the bytes to its right
 *                neighbour while receiving as many from its left, over plain
 *                sockets opened for this, with no framing and no reduction:
 *                what the wire can carry, the ceiling (ring_GBs per link);
 *              - awl_dist_allreduce (sum, float32) of the same bytes.
 *            busbw = size / time * 2(n-1)/n, the bytes each link carries per
 *            second (NCCL's definition), so it is comparable with ring_GBs:
 *            ratio = busbw / ring_GBs. Medians over the rounds.
 * latency    4-byte and 4 KiB allreduces, median of 500.
 * ddp_step   a training step of a GPT (--ddp CONFIG) on each --ddp-ranks
 *            count, with buckets overlapping backward ("overlap"), sent at
 *            the end ("at_end"), and with no communication at all ("none":
 *            each rank trains alone, the ceiling the machine's cores allow):
 *            ms per step, global tokens/s, the communication thread's time
 *            for the buckets (comm_ms), the time awl_ddp_wait blocked
 *            (wait_ms), and hidden = 1 - wait/comm (at least 0), the share
 *            of communication that backward hid; and how far apart the
 *            ranks are before any byte moves: backward_ms (rank 0, from the
 *            step's barrier to the end of its backward), slowest_backward_ms
 *            (the slowest rank's, median over steps), slowest_rank (the
 *            rank slowest in most steps) and skew_ms (slowest minus
 *            fastest, median over steps). --bucket-mb sets both DDP
 *            bucket caps.
 * ddp_scaling  with --ddp-rounds R, the rank counts run alternated R times
 *            (1, 4, 1, 4, ...) and each count's median tokens/s, with the
 *            speedup over the first count. "none_slowest_rank" is the
 *            "none" run with each step timed to the end of the slowest
 *            rank's backward (and this rank's optimizer step): what a
 *            synchronous step could reach with communication free.
 */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "awl.h"
#include "bench/bench_ranks.h"
#include "bench/bench_util.h"
#include "dist/net.h"

#ifndef AWL_WITH_MPI
#define AWL_WITH_MPI 0
#endif
#ifndef AWL_WITH_NCCL
#define AWL_WITH_NCCL 0
#endif
#if AWL_WITH_MPI
#include <mpi.h>
#endif

typedef struct bench_options {
    const char *ranks, *ddp, *ddp_ranks;
    const char *device, *precision; /* DDP's model: cpu or cuda (the rank's GPU); fp32 or bf16 */
    int64_t min_bytes, max_bytes;
    int rounds, threads, ddp_steps, ddp_rounds;
    bool allreduce, latency;
    bool mpi;  /* --backend mpi: under mpirun, the MPI transport beside TCP */
    bool nccl; /* --backend nccl: the NCCL transport alone, each rank on its GPU */
    double bucket_mb; /* 0: DDP's default caps */
} bench_options;

/* Tokens/s of each DDP run, [round][rank count][mode], shared with the
 * forked ranks (rank 0 writes), for the scaling summary; mode 3 is the
 * no-communication run timed as a synchronous step would be (NONE_SLOWEST). */
#define MAX_ROUNDS 8
#define MAX_COUNTS 8
static double (*ddp_results)[MAX_COUNTS][4];
static int ddp_round, ddp_count_index;

/* How a DDP step communicates: buckets during backward, all at the end,
 * or not at all (each rank trains alone: the compute-only ceiling). */
typedef enum ddp_mode { DDP_OVERLAP, DDP_AT_END, DDP_NONE } ddp_mode;
#define NONE_SLOWEST 3

/* ---- the raw ring ---------------------------------------------------------------------------- */

typedef struct ring {
    int right, left; /* sockets */
} ring;

static int ring_open(awl_process_group *pg, ring *r)
{
    int rank = awl_dist_rank(pg), n = awl_dist_world_size(pg);
    awl_store *store = awl_dist_store(pg);
    char err[256], key[64], addr[64], host[64];
    int lfd = awl_net_listen("127.0.0.1", 0, err, sizeof err);
    snprintf(addr, sizeof addr, "127.0.0.1:%d", awl_net_local_port(lfd));
    snprintf(key, sizeof key, "bench/ring/%d", rank);
    awl_store_set(store, key, addr, strlen(addr) + 1);
    snprintf(key, sizeof key, "bench/ring/%d", (rank + 1) % n);
    void *value;
    if (awl_store_get(store, key, &value, NULL, 30) < 0) return -1;
    int port;
    awl_net_split_address(value, host, sizeof host, &port, 0);
    free(value);
    r->right = awl_net_connect(host, port, awl_net_now() + 30, err, sizeof err);
    r->left = awl_net_accept(lfd, awl_net_now() + 30, err, sizeof err);
    close(lfd);
    if (r->right < 0 || r->left < 0) return -1;
    awl_net_set_nonblocking(r->right, true);
    awl_net_set_nonblocking(r->left, true);
    return 0;
}

/* Sends n bytes right while receiving n from the left; seconds taken. */
static double ring_pass(ring *r, char *out, char *in, size_t n)
{
    double t0 = bench_now();
    size_t sent = 0, got = 0;
    while (sent < n || got < n) {
        bool moved = false;
        if (sent < n) {
            ssize_t k = send(r->right, out + sent, n - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (k > 0) sent += (size_t)k, moved = true;
        }
        if (got < n) {
            ssize_t k = recv(r->left, in + got, n - got, MSG_DONTWAIT);
            if (k > 0) got += (size_t)k, moved = true;
            if (k == 0) return -1;
        }
        if (!moved) {
            struct pollfd p[2] = {{r->right, sent < n ? POLLOUT : 0, 0}, {r->left, got < n ? POLLIN : 0, 0}};
            poll(p, 2, 1000);
        }
    }
    return bench_now() - t0;
}

/* ---- one rank's measurements ----------------------------------------------------------------- */

/* The groups one rank measures: awl's TCP transport always; with --backend
 * mpi (started by mpirun) awl's MPI transport beside it, and Open MPI's own
 * MPI_Allreduce called directly, in the same process and rounds. */
typedef struct bench_groups {
    awl_process_group *tcp, *mpi; /* mpi: NULL without --backend mpi */
} bench_groups;

/* What one allreduce round times: the raw TCP ring, awl over TCP, awl over
 * MPI, MPI_Allreduce itself. */
enum { PATH_RING, PATH_TCP, PATH_MPI, PATH_MPI_DIRECT, N_PATHS };
static const char *const path_names[N_PATHS] = {"ring", "tcp", "mpi", "mpi-direct"};

/* Seconds for one allreduce of `bytes` along path p (the mean of reps). */
static double time_path(const bench_groups *g, int p, ring *r, awl_tensor *t, char *out, char *in,
                        int64_t bytes, int reps)
{
    awl_dist_barrier(g->tcp);
    double t0 = bench_now(), ring_s = 0;
    for (int i = 0; i < reps; i++) {
        if (p == PATH_RING) ring_s += ring_pass(r, out, in, (size_t)bytes);
        if (p == PATH_TCP) awl_dist_allreduce(g->tcp, t, AWL_DIST_SUM);
        if (p == PATH_MPI) awl_dist_allreduce(g->mpi, t, AWL_DIST_SUM);
#if AWL_WITH_MPI
        if (p == PATH_MPI_DIRECT)
            MPI_Allreduce(MPI_IN_PLACE, out, (int)(bytes / 4), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
#endif
    }
    return (p == PATH_RING ? ring_s : bench_now() - t0) / reps;
}

static void allreduce_sizes(const bench_groups *g, const bench_options *o)
{
    int n = awl_dist_world_size(g->tcp), n_paths = g->mpi ? N_PATHS : PATH_MPI;
    ring r;
    if (ring_open(g->tcp, &r) < 0) {
        fprintf(stderr, "bench_dist: cannot open the raw ring\n");
        return;
    }
    for (int64_t bytes = o->min_bytes; bytes <= o->max_bytes; bytes *= 4) {
        int reps = (int)(64.0 * 1048576 / (double)bytes);
        reps = reps < 2 ? 2 : reps > 100 ? 100 : reps;
        awl_scope_begin();
        awl_tensor *t = awl_ones(AWL_SHAPE(bytes / 4), AWL_F32, "cpu");
        char *out = calloc(1, (size_t)bytes), *in = malloc((size_t)bytes);
        double times[N_PATHS][16], median[N_PATHS];
        for (int p = 0; p < n_paths; p++) time_path(g, p, &r, t, out, in, bytes, 1); /* warm up */
        for (int round = 0; round < o->rounds; round++) /* the paths alternated */
            for (int p = 0; p < n_paths; p++)
                times[p][round] = time_path(g, p, &r, t, out, in, bytes, reps);
        for (int p = 0; p < n_paths; p++) median[p] = bench_median(times[p], o->rounds);
        double ring_bw = (double)bytes / median[PATH_RING];
        for (int p = PATH_TCP; p < n_paths && awl_dist_rank(g->tcp) == 0; p++) {
            double busbw = (double)bytes / median[p] * 2.0 * (n - 1) / n;
            bench_json_begin("allreduce");
            printf("\"transport\":\"%s\",\"ranks\":%d,\"bytes\":%lld,\"us\":%.1f,\"algbw_GBs\":%.3f,"
                   "\"busbw_GBs\":%.3f,\"ring_GBs\":%.3f,\"ratio\":%.3f",
                   path_names[p], n, (long long)bytes, median[p] * 1e6,
                   (double)bytes / median[p] * 1e-9, busbw * 1e-9, ring_bw * 1e-9, busbw / ring_bw);
            if (g->mpi) printf(",\"vs_mpi_direct\":%.3f", median[PATH_MPI_DIRECT] / median[p]);
            printf("}\n");
            fflush(stdout);
        }
        free(out);
        free(in);
        awl_scope_end();
    }
    close(r.left);
    close(r.right);
}

static void latency(const bench_groups *g)
{
    int64_t sizes[2] = {1, 1024};
    int n_paths = g->mpi ? N_PATHS : PATH_MPI;
    for (int s = 0; s < 2; s++) {
        awl_scope_begin();
        awl_tensor *t = awl_ones(AWL_SHAPE(sizes[s]), AWL_F32, "cpu");
        char buf[4096] = {0};
        enum { N = 500 };
        double times[N];
        for (int p = PATH_TCP; p < n_paths; p++) {
            for (int i = 0; i < 20; i++) time_path(g, p, NULL, t, buf, NULL, sizes[s] * 4, 1);
            for (int i = 0; i < N; i++) {
                double t0 = bench_now();
                if (p == PATH_TCP) awl_dist_allreduce(g->tcp, t, AWL_DIST_SUM);
                if (p == PATH_MPI) awl_dist_allreduce(g->mpi, t, AWL_DIST_SUM);
#if AWL_WITH_MPI
                if (p == PATH_MPI_DIRECT)
                    MPI_Allreduce(MPI_IN_PLACE, buf, (int)sizes[s], MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
#endif
                times[i] = bench_now() - t0;
            }
            if (awl_dist_rank(g->tcp) == 0) {
                bench_json_begin("allreduce_latency");
                printf("\"transport\":\"%s\",\"ranks\":%d,\"bytes\":%lld,\"median_us\":%.1f}\n",
                       path_names[p], awl_dist_world_size(g->tcp), (long long)sizes[s] * 4,
                       bench_median(times, N) * 1e6);
                fflush(stdout);
            }
        }
        awl_scope_end();
    }
}

/* How far apart the ranks' backward passes end, the time DDP's wait spends
 * on the slowest rank before any byte can move: backward_ms, this rank's
 * median time from the step's barrier to the end of its backward;
 * slowest_backward_ms, the median over steps of the slowest rank's;
 * slowest_rank, the rank slowest in most steps; skew_ms, the median over
 * steps of slowest minus fastest. late[s] gets how many seconds after this
 * rank the slowest one ended step s's backward. Sorts bwd in place. */
typedef struct rank_skew {
    double own_ms, slowest_ms, skew_ms;
    int slowest_rank;
} rank_skew;

static int gather_skew(awl_process_group *pg, double *bwd, int steps, rank_skew *out, double *late)
{
    int n = awl_dist_world_size(pg), rank = awl_dist_rank(pg);
    awl_scope_begin();
    awl_tensor *mine = awl_from_data(bwd, AWL_SHAPE(steps), AWL_F64, "cpu");
    awl_tensor *all = awl_zeros(AWL_SHAPE((int64_t)n * steps), AWL_F64, "cpu");
    int status = mine && all ? awl_dist_allgather(pg, all, mine) : -1;
    double *t = calloc((size_t)n * (size_t)steps, sizeof *t); /* [rank][step] */
    if (status == 0) status = awl_to_host(all, t, (size_t)n * (size_t)steps * sizeof *t);
    if (status == 0) {
        double *slowest = calloc((size_t)steps, sizeof *slowest),
               *spread = calloc((size_t)steps, sizeof *spread);
        int *times_slowest = calloc((size_t)n, sizeof *times_slowest);
        for (int s = 0; s < steps; s++) {
            int arg = 0;
            double lo = t[s], hi = t[s];
            for (int r = 1; r < n; r++) {
                double v = t[(int64_t)r * steps + s];
                if (v > hi) hi = v, arg = r;
                if (v < lo) lo = v;
            }
            slowest[s] = hi * 1e3;
            spread[s] = (hi - lo) * 1e3;
            late[s] = hi - t[(int64_t)rank * steps + s];
            times_slowest[arg]++;
        }
        out->own_ms = bench_median(bwd, steps) * 1e3;
        out->slowest_ms = bench_median(slowest, steps);
        out->skew_ms = bench_median(spread, steps);
        for (int r = 0; r < n; r++)
            if (times_slowest[r] > times_slowest[out->slowest_rank]) out->slowest_rank = r;
        free(slowest);
        free(spread);
        free(times_slowest);
    }
    free(t);
    awl_scope_end();
    return status;
}

/* Median step of a GPT under DDP in the given mode. */
static void ddp_steps(awl_process_group *pg, const char *transport, const bench_options *o,
                      ddp_mode mode)
{
    awl_gpt_config cfg;
    if (awl_gpt_config_named(o->ddp, &cfg) < 0) {
        fprintf(stderr, "bench_dist: %s\n", awl_last_error());
        return;
    }
    cfg.dropout = 0;
    char device[32] = "cpu";
    if (strcmp(o->device, "cuda") == 0) snprintf(device, sizeof device, "cuda:%d", awl_dist_local_rank(pg));
    awl_gpt *model = awl_gpt_new(&cfg, device, 1337);
    if (strcmp(o->precision, "bf16") == 0) awl_gpt_set_autocast(model, AWL_BF16);
    awl_optimizer *opt = awl_adamw_new(awl_gpt_parameters(model), 1e-3, 0.9, 0.95, 1e-8, 0.1);
    awl_ddp_options dopt = {.no_overlap = mode == DDP_AT_END};
    if (o->bucket_mb > 0) dopt.bucket_cap_bytes = dopt.first_bucket_bytes = (int64_t)(o->bucket_mb * 1048576);
    awl_ddp *ddp = mode == DDP_NONE ? NULL : awl_ddp_new(pg, awl_gpt_parameters(model), &dopt);
    int steps = o->ddp_steps, warm = 3;
    double *step_t = calloc((size_t)steps, sizeof *step_t),
           *comm = calloc((size_t)steps, sizeof *comm), *wait = calloc((size_t)steps, sizeof *wait),
           *bwd = calloc((size_t)steps, sizeof *bwd), *late = calloc((size_t)steps, sizeof *late);
    int status = ddp || mode == DDP_NONE ? 0 : -1;
    for (int s = 0; s < steps + warm && status == 0; s++) {
        awl_scope_begin();
        int64_t B = cfg.batch, T = cfg.block;
        int32_t *ids = malloc((size_t)(B * T) * sizeof *ids);
        for (int64_t i = 0; i < B * T; i++)
            ids[i] = (int32_t)((i * 7919 + s * 104729 + awl_dist_rank(pg) * 31) % cfg.vocab);
        awl_tensor *x = awl_from_data(ids, AWL_SHAPE(B, T), AWL_I32, device);
        awl_tensor *y = awl_from_data(ids, AWL_SHAPE(B, T), AWL_I32, device);
        free(ids);
        awl_dist_barrier(pg);
        double t0 = bench_now();
        awl_tensor *loss = awl_keep(awl_gpt_loss(model, x, y));
        awl_scope_end();
        status = loss ? awl_backward(loss) : -1;
        double t_bwd = bench_now() - t0;
        if (status == 0 && ddp) status = awl_ddp_wait(ddp);
        if (status == 0) status = awl_optimizer_step(opt);
        if (status == 0) status = ddp ? awl_ddp_zero_grad(ddp) : awl_optimizer_zero_grad(opt);
        if (status == 0) status = awl_synchronize(device); /* the GPU's step, not its queueing */
        awl_release(loss);
        if (s >= warm) {
            awl_ddp_stats st = {0};
            awl_ddp_get_stats(ddp, &st);
            step_t[s - warm] = bench_now() - t0;
            comm[s - warm] = st.comm_s;
            wait[s - warm] = st.wait_s;
            bwd[s - warm] = t_bwd;
        }
    }
    int n = awl_dist_world_size(pg);
    rank_skew skew = {0};
    if (status == 0) status = gather_skew(pg, bwd, steps, &skew, late);
    /* no communication, but every step as long as the slowest rank's: the
     * ceiling of a synchronous step (late: how long after this rank the
     * slowest ended its backward) */
    for (int s = 0; s < steps; s++) late[s] += step_t[s];
    const double synchronous = bench_median(late, steps);
    if (status) fprintf(stderr, "bench_dist: ddp: %s\n", awl_last_error());
    if (status == 0 && awl_dist_rank(pg) == 0) {
        static const char *const mode_names[] = {"overlap", "at_end", "none"};
        awl_ddp_stats st = {0};
        awl_ddp_get_stats(ddp, &st);
        double ms = bench_median(step_t, steps), c = bench_median(comm, steps), w = bench_median(wait, steps);
        bench_json_begin("ddp_step");
        printf("\"config\":\"%s\",\"device\":\"%s\",\"precision\":\"%s\",\"transport\":\"%s\","
               "\"ranks\":%d,\"communication\":\"%s\",\"buckets\":%d,\"bucket_mb\":%.2f,"
               "\"ms_per_step\":%.2f,\"tokens_per_s\":%.0f,\"comm_ms\":%.2f,\"wait_ms\":%.2f,"
               "\"hidden\":%.3f,\"backward_ms\":%.2f,\"slowest_backward_ms\":%.2f,"
               "\"slowest_rank\":%d,\"skew_ms\":%.2f}\n",
               o->ddp, o->device, o->precision, transport, n, mode_names[mode], st.n_buckets,
               st.bucket_bytes / 1048576.0, ms * 1e3, (double)cfg.batch * cfg.block * n / ms,
               c * 1e3, w * 1e3, c > 0 && w < c ? 1.0 - w / c : 0.0, skew.own_ms, skew.slowest_ms,
               skew.slowest_rank, skew.skew_ms);
        fflush(stdout);
        if (ddp_results) {
            ddp_results[ddp_round][ddp_count_index][mode] = (double)cfg.batch * cfg.block * n / ms;
            if (mode == DDP_NONE)
                ddp_results[ddp_round][ddp_count_index][NONE_SLOWEST] =
                    (double)cfg.batch * cfg.block * n / synchronous;
        }
    }
    free(step_t);
    free(comm);
    free(wait);
    free(bwd);
    free(late);
    awl_ddp_free(ddp);
    awl_optimizer_free(opt);
    awl_gpt_free(model);
}

#if AWL_WITH_MPI
/* Under mpirun: the MPI group, then a TCP group of the same ranks beside it
 * (its port a free one of rank 0's, told to the others over MPI). This
 * program initializes MPI, so that it may call MPI_Allreduce itself. */
static int open_mpi_groups(bench_groups *g)
{
    int level;
    MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &level);
    awl_dist_options d = awl_dist_default_options();
    d.backend = "mpi";
    if (!(g->mpi = awl_dist_init(&d))) return -1;
    int port = 0;
    if (awl_dist_rank(g->mpi) == 0) {
        char err[128];
        int fd = awl_net_listen("0.0.0.0", 0, err, sizeof err);
        port = awl_net_local_port(fd);
        close(fd);
    }
    MPI_Bcast(&port, 1, MPI_INT, 0, MPI_COMM_WORLD);
    d.backend = "tcp";
    d.master_port = port;
    return (g->tcp = awl_dist_init(&d)) ? 0 : -1;
}
#endif

/* ---- over NCCL ----------------------------------------------------------------------------------- */

/* Seconds per blocking allreduce (sum) of t, the mean of reps after a
 * barrier. */
static double time_allreduce(awl_process_group *pg, awl_tensor *t, int reps)
{
    awl_dist_barrier(pg);
    double t0 = bench_now();
    for (int i = 0; i < reps; i++) awl_dist_allreduce(pg, t, AWL_DIST_SUM);
    return (bench_now() - t0) / reps;
}

/* Allreduces of float32 tensors on the rank's GPU: 4-byte and 4 KiB
 * latencies (median of 200), then busbw for each size. */
static void allreduce_gpu(awl_process_group *pg, const bench_options *o)
{
    int n = awl_dist_world_size(pg), me = awl_dist_rank(pg);
    char device[32];
    snprintf(device, sizeof device, "cuda:%d", awl_dist_local_rank(pg));
    for (int64_t bytes = 4; o->latency && bytes <= 4096; bytes *= 1024) {
        awl_scope_begin();
        awl_tensor *t = awl_ones(AWL_SHAPE(bytes / 4), AWL_F32, device);
        enum { N = 200 };
        double times[N];
        time_allreduce(pg, t, 20);
        for (int i = 0; i < N; i++) times[i] = time_allreduce(pg, t, 1);
        if (me == 0) {
            bench_json_begin("allreduce_latency");
            printf("\"transport\":\"nccl\",\"ranks\":%d,\"bytes\":%lld,\"median_us\":%.1f}\n", n,
                   (long long)bytes, bench_median(times, N) * 1e6);
            fflush(stdout);
        }
        awl_scope_end();
    }
    for (int64_t bytes = o->min_bytes; o->allreduce && bytes <= o->max_bytes; bytes *= 4) {
        int reps = (int)(4.0 * 1073741824 / (double)bytes);
        reps = reps < 5 ? 5 : reps > 200 ? 200 : reps;
        awl_scope_begin();
        awl_tensor *t = awl_ones(AWL_SHAPE(bytes / 4), AWL_F32, device);
        double times[16];
        time_allreduce(pg, t, 2); /* warm up: NCCL connects on first use */
        for (int round = 0; round < o->rounds; round++) times[round] = time_allreduce(pg, t, reps);
        double median = bench_median(times, o->rounds), busbw = (double)bytes / median * 2.0 * (n - 1) / n;
        if (me == 0) {
            bench_json_begin("allreduce");
            printf("\"transport\":\"nccl\",\"ranks\":%d,\"bytes\":%lld,\"us\":%.1f,\"algbw_GBs\":%.3f,"
                   "\"busbw_GBs\":%.3f}\n",
                   n, (long long)bytes, median * 1e6, (double)bytes / median * 1e-9, busbw * 1e-9);
            fflush(stdout);
        }
        awl_scope_end();
    }
}

/* --backend nccl: one group over NCCL, rank r on cuda:r when forked here
 * (else cuda:<LOCAL_RANK>), for the allreduces and DDP. */
static void nccl_rank(const bench_options *o, const awl_dist_options *dopt, bool collectives,
                      bool ddp)
{
    awl_dist_options d = dopt ? *dopt : awl_dist_default_options();
    d.backend = "nccl";
    if (dopt) d.local_rank = d.rank;
    awl_process_group *pg = awl_dist_init(&d);
    if (!pg) {
        fprintf(stderr, "bench_dist: %s\n", awl_last_error());
        return;
    }
    int n = awl_dist_world_size(pg);
    if (collectives && n > 1) allreduce_gpu(pg, o);
    if (ddp && o->ddp) {
        ddp_steps(pg, "nccl", o, DDP_OVERLAP);
        if (n > 1) {
            ddp_steps(pg, "nccl", o, DDP_AT_END);
            ddp_steps(pg, "none", o, DDP_NONE);
        }
    }
    awl_dist_destroy(pg);
}

static void one_rank(const bench_options *o, const awl_dist_options *dopt, bool collectives,
                     bool ddp)
{
    if (o->nccl) {
        nccl_rank(o, dopt, collectives, ddp);
        return;
    }
    awl_set_num_threads(o->threads > 0 ? o->threads : 1);
    bench_groups g = {0};
#if AWL_WITH_MPI
    if (o->mpi && open_mpi_groups(&g) < 0) fprintf(stderr, "bench_dist: %s\n", awl_last_error());
#endif
    if (!o->mpi && !(g.tcp = awl_dist_init(dopt))) fprintf(stderr, "bench_dist: %s\n", awl_last_error());
    int n = g.tcp ? awl_dist_world_size(g.tcp) : 0;
    if (g.tcp && collectives && n > 1) {
        if (o->latency) latency(&g);
        if (o->allreduce) allreduce_sizes(&g, o);
    }
    if (g.tcp && ddp && o->ddp) {
        if (g.mpi) ddp_steps(g.mpi, "mpi", o, DDP_OVERLAP);
        ddp_steps(g.tcp, "tcp", o, DDP_OVERLAP);
        if (n > 1) {
            if (g.mpi) ddp_steps(g.mpi, "mpi", o, DDP_AT_END);
            ddp_steps(g.tcp, "tcp", o, DDP_AT_END);
            ddp_steps(g.tcp, "none", o, DDP_NONE);
        }
    }
    awl_dist_destroy(g.tcp);
    awl_dist_destroy(g.mpi);
#if AWL_WITH_MPI
    if (o->mpi) MPI_Finalize();
#endif
}

/* ---- launching the ranks --------------------------------------------------------------------- */

typedef struct world_job {
    const bench_options *o;
    bool collectives, ddp;
} world_job;

static void world_body(const awl_dist_options *d, void *arg)
{
    const world_job *j = arg;
    one_rank(j->o, d, j->collectives, j->ddp);
}

static void run_world(const bench_options *o, int n, bool collectives, bool ddp)
{
    world_job j = {o, collectives, ddp};
    bench_run_ranks(n, o->threads, world_body, &j);
}

static void usage(void)
{
    fprintf(stderr,
            "usage: bench_dist [--ranks 2,4] [--min-bytes 4096] [--max-bytes 268435456]\n"
            "                  [--rounds 3] [--threads 1] [--no-allreduce] [--no-latency]\n"
            "                  [--ddp CONFIG] [--ddp-ranks 2] [--ddp-steps 10] [--ddp-rounds 1]\n"
            "                  [--bucket-mb X] [--backend tcp|mpi|nccl] [--device cpu|cuda]\n"
            "                  [--precision fp32|bf16]\n");
}

int main(int argc, char **argv)
{
    bench_options o = {.ranks = "2,4", .ddp_ranks = "2", .device = "cpu", .precision = "fp32",
                       .min_bytes = 4096, .max_bytes = 256 << 20, .rounds = 3, .threads = 1,
                       .ddp_steps = 10, .ddp_rounds = 1, .allreduce = true, .latency = true};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--no-allreduce") == 0) o.allreduce = false;
        else if (strcmp(a, "--no-latency") == 0) o.latency = false;
        else if (!v) { usage(); return 2; }
        else if (strcmp(a, "--ranks") == 0) o.ranks = v, i++;
        else if (strcmp(a, "--min-bytes") == 0) o.min_bytes = atoll(v), i++;
        else if (strcmp(a, "--max-bytes") == 0) o.max_bytes = atoll(v), i++;
        else if (strcmp(a, "--rounds") == 0) o.rounds = atoi(v), i++;
        else if (strcmp(a, "--threads") == 0) o.threads = atoi(v), i++;
        else if (strcmp(a, "--ddp") == 0) o.ddp = v, i++;
        else if (strcmp(a, "--ddp-ranks") == 0) o.ddp_ranks = v, i++;
        else if (strcmp(a, "--ddp-steps") == 0) o.ddp_steps = atoi(v), i++;
        else if (strcmp(a, "--bucket-mb") == 0) o.bucket_mb = atof(v), i++;
        else if (strcmp(a, "--ddp-rounds") == 0) o.ddp_rounds = atoi(v), i++;
        else if (strcmp(a, "--backend") == 0 &&
                 (strcmp(v, "tcp") == 0 || strcmp(v, "mpi") == 0 || strcmp(v, "nccl") == 0))
            o.mpi = strcmp(v, "mpi") == 0, o.nccl = strcmp(v, "nccl") == 0, i++;
        else if (strcmp(a, "--device") == 0 && (strcmp(v, "cpu") == 0 || strcmp(v, "cuda") == 0))
            o.device = v, i++;
        else if (strcmp(a, "--precision") == 0 && (strcmp(v, "fp32") == 0 || strcmp(v, "bf16") == 0))
            o.precision = v, i++;
        else { usage(); return 2; }
    }
    if (o.rounds < 1 || o.rounds > 16 || o.min_bytes < 4 || o.ddp_steps < 1 || o.ddp_rounds < 1 ||
        o.ddp_rounds > MAX_ROUNDS || (strcmp(o.precision, "bf16") == 0 && strcmp(o.device, "cuda") != 0)) {
        usage();
        return 2;
    }
    if (o.nccl && !AWL_WITH_NCCL) {
        fprintf(stderr, "bench_dist: --backend nccl: this build has no NCCL transport\n");
        return 2;
    }
    awl_set_num_threads(o.threads > 0 ? o.threads : 1);
    awl_dist_launch launch;
    bool launched = awl_dist_launch_info(NULL, &launch) == 0 && strcmp(launch.launcher, "none") != 0;
    if (o.mpi && (!AWL_WITH_MPI || (strcmp(launch.launcher, "openmpi") != 0 &&
                                      strcmp(launch.launcher, "pmi") != 0))) {
        fprintf(stderr, AWL_WITH_MPI ? "bench_dist: --backend mpi runs under mpirun: mpirun -np 2 "
                                       "bench_dist --backend mpi\n"
                                     : "bench_dist: --backend mpi: this build has no MPI transport "
                                       "(install libopenmpi-dev and configure again)\n");
        return 2;
    }
    if (launched) { /* one rank of a job that awlrun, mpirun or srun started */
        one_rank(&o, NULL, true, true);
        return 0;
    }
    bool collectives = o.allreduce || o.latency;
    for (const char *p = o.ranks; collectives && *p;) {
        run_world(&o, atoi(p), true, false);
        p = strchr(p, ',') ? strchr(p, ',') + 1 : p + strlen(p);
    }
    /* DDP: the rank counts alternated, round after round, so a noisy
     * machine moves all of them alike; then the medians and the speedups
     * over the first count */
    int counts[MAX_COUNTS], n_counts = 0;
    for (const char *p = o.ddp_ranks; o.ddp && *p && n_counts < MAX_COUNTS;) {
        counts[n_counts++] = atoi(p);
        p = strchr(p, ',') ? strchr(p, ',') + 1 : p + strlen(p);
    }
    if (!n_counts) return 0;
    ddp_results = mmap(NULL, sizeof(double[MAX_ROUNDS][MAX_COUNTS][4]), PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    for (ddp_round = 0; ddp_round < o.ddp_rounds; ddp_round++)
        for (ddp_count_index = 0; ddp_count_index < n_counts; ddp_count_index++)
            run_world(&o, counts[ddp_count_index], false, true);
    static const char *const mode_names[] = {"overlap", "at_end", "none", "none_slowest_rank"};
    double base = 0;
    for (int k = 0; k < n_counts; k++)
        for (int m = 0; m < 4; m++) {
            if (counts[k] == 1 && m > 0) continue;
            double v[MAX_ROUNDS];
            for (int r = 0; r < o.ddp_rounds; r++) v[r] = ddp_results[r][k][m];
            double median = bench_median(v, o.ddp_rounds);
            if (k == 0 && m == 0) base = median;
            bench_json_begin("ddp_scaling");
            printf("\"config\":\"%s\",\"ranks\":%d,\"communication\":\"%s\",\"rounds\":%d,"
                   "\"median_tokens_per_s\":%.0f,\"speedup_vs_%d_rank%s\":%.3f}\n",
                   o.ddp, counts[k], mode_names[m], o.ddp_rounds, median, counts[0],
                   counts[0] > 1 ? "s" : "", base > 0 ? median / base : 0);
        }
    return 0;
}
