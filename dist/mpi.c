/*
 * dist/mpi.c - the MPI transport: the process group's table filled by an
 * MPI library (Open MPI from Debian's packages), for jobs that mpirun or
 * Slurm's srun start. Built when CMake finds MPI (AWL_WITH_MPI).
 *
 * The communication thread makes every MPI call after MPI_Init_thread
 * (made on the user's thread, in awl_dist_init), so the library must offer
 * MPI_THREAD_SERIALIZED at least; awl asks for MPI_THREAD_MULTIPLE, which
 * sub-groups (each with its communication thread) need, and a lower level
 * than needed is an error that says what was offered.
 *
 * awl's guarantees hold on top of MPI's:
 *   - fingerprints: before every collective each rank sends its
 *     fingerprint to every other (small point-to-point messages, tag
 *     FP_TAG) and checks the ones it receives, so ranks that call different
 *     collectives all fail naming both, never run a wrong one;
 *   - timeouts: every operation is a non-blocking MPI call tested until
 *     done or the deadline. A rank whose fingerprint has not come by then
 *     is named ("rank 2 has not started allreduce #5"); past the deadline
 *     the job is aborted with MPI_Abort after the message and the flight
 *     ring, since MPI gives no way to cancel a collective in flight;
 *   - a killed rank: mpirun ends the job and names it.
 * Sub-groups (awl_dist_split) are MPI_Comm_split's. The TCP transport's key
 * value store does not exist here (awl_dist_store gives NULL).
 */
#include "dist/dist_internal.h"

#if AWL_WITH_MPI
#include <mpi.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/net.h"

enum { FP_TAG = 7301, P2P_TAG = 7302 };
#define FP_WORDS 6

typedef struct mpi_state {
    MPI_Comm comm;
    bool owns_init; /* this group called MPI_Init_thread */
} mpi_state;

static mpi_state *state_of(const awl_process_group *pg) { return pg->tx; }

static MPI_Datatype type_of(uint8_t dtype)
{
    return dtype == AWL_F64 ? MPI_DOUBLE : dtype == AWL_I32 ? MPI_INT : MPI_FLOAT;
}

static void encode(const dist_fingerprint *fp, int64_t *w)
{
    w[0] = fp->op;
    w[1] = fp->dtype;
    w[2] = fp->reduce;
    w[3] = fp->root;
    w[4] = (int64_t)fp->seq;
    w[5] = (int64_t)fp->count;
}

static dist_fingerprint decode(const int64_t *w)
{
    dist_fingerprint fp = {(uint8_t)w[0], (uint8_t)w[1], (uint8_t)w[2], (int32_t)w[3],
                           (uint64_t)w[4], (uint64_t)w[5]};
    return fp;
}

/* Tests req until done or the deadline; 0, or -1 at the deadline. */
static int finish(MPI_Request *req, double deadline)
{
    int done = 0;
    while (!done) {
        MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (done) break;
        if (awl_net_now() > deadline) return -1;
        poll(NULL, 0, 0); /* yield */
    }
    return 0;
}

_Noreturn static void give_up(awl_process_group *pg, const char *message)
{
    awl_dist_fail(pg, message); /* prints it and the flight ring */
    fprintf(stderr, "awl_dist: rank %d aborts the MPI job (MPI_Abort): an MPI collective in "
                    "flight cannot be cancelled\n",
            dist_me(pg));
    fflush(stderr);
    MPI_Abort(state_of(pg)->comm, 1);
    abort();
}

/* Every rank's fingerprint against this one's: 0, -1 when one has not come
 * by the deadline (err names the rank), -2 when one differs. */
static int check_fingerprints(awl_process_group *pg, const awl_work *w, char *err, size_t size)
{
    mpi_state *st = state_of(pg);
    int n = pg->world, me = pg->rank;
    int64_t mine[FP_WORDS], *theirs = calloc((size_t)n * FP_WORDS, sizeof *theirs);
    MPI_Request *recv = calloc((size_t)n, sizeof *recv), *send = calloc((size_t)n, sizeof *send);
    encode(&w->fp, mine);
    for (int r = 0; r < n; r++) {
        recv[r] = send[r] = MPI_REQUEST_NULL;
        if (r == me) continue;
        MPI_Irecv(theirs + r * FP_WORDS, FP_WORDS, MPI_INT64_T, r, FP_TAG, st->comm, &recv[r]);
        MPI_Isend(mine, FP_WORDS, MPI_INT64_T, r, FP_TAG, st->comm, &send[r]);
    }
    double deadline = awl_net_now() + pg->timeout;
    int status = 0;
    char what[160], a[160], b[160];
    for (int r = 0; r < n && status == 0; r++) {
        if (r == me) continue;
        if (finish(&recv[r], deadline) < 0) {
            snprintf(err, size, "%s on rank %d timed out after %g s (AWL_DIST_TIMEOUT): rank %d has "
                                "not started it",
                     awl_dist_describe(&w->fp, what, sizeof what), dist_me(pg), pg->timeout,
                     pg->global_rank[r]);
            status = -1;
            break;
        }
        dist_fingerprint fp = decode(theirs + r * FP_WORDS);
        if (!awl_dist_fingerprint_equal(&fp, &w->fp)) {
            snprintf(err, size, "ranks disagree: rank %d is in %s, but rank %d is in %s", dist_me(pg),
                     awl_dist_describe(&w->fp, a, sizeof a), pg->global_rank[r],
                     awl_dist_describe(&fp, b, sizeof b));
            status = -2;
        }
    }
    for (int r = 0; r < n && status == 0; r++)
        if (r != me && finish(&send[r], deadline) < 0) status = -1;
    free(theirs);
    free(recv);
    free(send);
    return status;
}

static int mpi_run(awl_process_group *pg, awl_work *w)
{
    mpi_state *st = state_of(pg);
    const dist_fingerprint *fp = &w->fp;
    int n = pg->world, me = pg->rank;
    MPI_Datatype type = type_of(fp->dtype);
    size_t es = awl_dtype_size(fp->dtype);
    char err[1024] = "", what[160];
    bool collective = fp->op != DIST_OP_SEND && fp->op != DIST_OP_RECV;
    if (collective) {
        int rc = check_fingerprints(pg, w, err, sizeof err);
        if (rc == -1) {
            snprintf(w->message, sizeof w->message, "%s", err);
            give_up(pg, w->message);
        }
        if (rc < 0) {
            snprintf(w->message, sizeof w->message, "%s failed on rank %d: %s",
                     awl_dist_describe(fp, what, sizeof what), dist_me(pg), err);
            return -1;
        }
    }
    if (w->out_count > INT_MAX || w->in_count > INT_MAX) { /* MPI's counts are ints */
        snprintf(w->message, sizeof w->message,
                 "%s failed on rank %d: more than %d elements in one call, MPI's limit",
                 awl_dist_describe(fp, what, sizeof what), dist_me(pg), INT_MAX);
        return -1;
    }
    MPI_Request req = MPI_REQUEST_NULL;
    MPI_Op op = fp->reduce == AWL_DIST_MAX ? MPI_MAX : MPI_SUM;
    int *counts = NULL, *displs = NULL;
    if (w->bounds) {
        counts = calloc((size_t)n, sizeof *counts);
        displs = calloc((size_t)n, sizeof *displs);
        for (int r = 0; r < n; r++) {
            counts[r] = (int)(w->bounds[r + 1] - w->bounds[r]);
            displs[r] = (int)w->bounds[r];
        }
    }
    switch (fp->op) {
    case DIST_OP_ALLREDUCE:
    case DIST_OP_BARRIER:
        MPI_Iallreduce(MPI_IN_PLACE, w->out, (int)w->out_count, type, op, st->comm, &req);
        break;
    case DIST_OP_BROADCAST: MPI_Ibcast(w->out, (int)w->out_count, type, fp->root, st->comm, &req); break;
    case DIST_OP_ALLGATHER:
        MPI_Iallgatherv(w->in, (int)w->in_count, type, w->out, counts, displs, type, st->comm, &req);
        break;
    case DIST_OP_REDUCE_SCATTER:
        MPI_Ireduce_scatter(w->in, w->out, counts, type, op, st->comm, &req);
        break;
    case DIST_OP_SEND: {
        /* the fingerprint first, so the receiver checks what comes */
        int64_t head[FP_WORDS];
        encode(fp, head);
        MPI_Request h;
        MPI_Isend(head, FP_WORDS, MPI_INT64_T, fp->root, P2P_TAG, st->comm, &h);
        if (finish(&h, awl_net_now() + pg->timeout) < 0) {
            snprintf(
                w->message, sizeof w->message, "%s on rank %d timed out: rank %d does not receive",
                awl_dist_describe(fp, what, sizeof what), dist_me(pg), pg->global_rank[fp->root]);
            give_up(pg, w->message);
        }
        MPI_Isend(w->in, (int)w->in_count, type, fp->root, P2P_TAG, st->comm, &req);
        break;
    }
    case DIST_OP_RECV: {
        int64_t head[FP_WORDS];
        MPI_Request h;
        MPI_Irecv(head, FP_WORDS, MPI_INT64_T, fp->root, P2P_TAG, st->comm, &h);
        if (finish(&h, awl_net_now() + pg->timeout) < 0) {
            snprintf(
                w->message, sizeof w->message, "%s on rank %d timed out: rank %d sends nothing",
                awl_dist_describe(fp, what, sizeof what), dist_me(pg), pg->global_rank[fp->root]);
            give_up(pg, w->message);
        }
        dist_fingerprint got = decode(head), want = *fp;
        want.op = DIST_OP_SEND;
        want.root = me;
        if (!awl_dist_fingerprint_equal(&got, &want)) {
            char a[160], b[160];
            snprintf(w->message, sizeof w->message,
                     "%s failed on rank %d: rank %d sent %s", awl_dist_describe(fp, a, sizeof a),
                     dist_me(pg), pg->global_rank[fp->root], awl_dist_describe(&got, b, sizeof b));
            give_up(pg, w->message); /* its payload is on the way: no clean way back */
        }
        MPI_Irecv(w->out, (int)w->out_count, type, fp->root, P2P_TAG, st->comm, &req);
        break;
    }
    }
    if (finish(&req, awl_net_now() + pg->timeout) < 0) {
        snprintf(w->message, sizeof w->message,
                 "%s on rank %d did not complete in %g s (AWL_DIST_TIMEOUT): a rank stopped in it",
                 awl_dist_describe(fp, what, sizeof what), dist_me(pg), pg->timeout);
        give_up(pg, w->message);
    }
    if (fp->reduce == AWL_DIST_AVG && fp->op == DIST_OP_ALLREDUCE)
        awl_dist_scale(fp->dtype, w->out, w->out_count, n);
    if (fp->reduce == AWL_DIST_AVG && fp->op == DIST_OP_REDUCE_SCATTER)
        awl_dist_scale(fp->dtype, w->out, w->out_count, n);
    int64_t bytes = (int64_t)(w->in_count > w->out_count ? w->in_count : w->out_count) * (int64_t)es;
    awl_dist_count_bytes(pg, bytes, bytes);
    free(counts);
    free(displs);
    return 0;
}

/* The group's communicator: MPI_COMM_WORLD's duplicate, or a split of the
 * parent's. */
static int open_comm(awl_process_group *pg)
{
    mpi_state *st = state_of(pg);
    int inited = 0;
    MPI_Initialized(&inited);
    int level = 0;
    if (inited) MPI_Query_thread(&level);
    if (pg->parent) { /* a sub-group: the parent's communicator, split */
        /* this thread and the groups' communication threads call MPI at once */
        if (level < MPI_THREAD_MULTIPLE)
            return awl_error(AWL_ERR_UNSUPPORTED,
                             "awl_dist_split: sub-groups over MPI need MPI_THREAD_MULTIPLE; the "
                             "library offers level %d",
                             level);
        MPI_Comm_split(state_of(pg->parent)->comm, pg->split_color, pg->split_key, &st->comm);
        return AWL_OK;
    }
    if (!inited) {
        MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &level);
        st->owns_init = true;
    }
    if (level < MPI_THREAD_SERIALIZED)
        return awl_error(AWL_ERR_UNSUPPORTED,
                         "awl_dist_init: the MPI library offers thread level %d; awl's "
                         "communication thread needs MPI_THREAD_SERIALIZED (%d) at least",
                         level, MPI_THREAD_SERIALIZED);
    MPI_Comm_dup(MPI_COMM_WORLD, &st->comm);
    int rank, size;
    MPI_Comm_rank(st->comm, &rank);
    MPI_Comm_size(st->comm, &size);
    if (rank != pg->rank || size != pg->world)
        return awl_error(AWL_ERR_INVALID,
                         "awl_dist_init: MPI says rank %d of %d, the environment rank %d of %d "
                         "(RANK, WORLD_SIZE or the launcher's variables)",
                         rank, size, pg->rank, pg->world);
    return AWL_OK;
}

static void mpi_shutdown(awl_process_group *pg, bool clean)
{
    mpi_state *st = state_of(pg);
    (void)clean;
    if (st->comm != MPI_COMM_NULL && st->comm) MPI_Comm_free(&st->comm);
    if (st->owns_init) MPI_Finalize();
    free(st);
    pg->tx = NULL;
}

static int mpi_connect(awl_process_group *pg)
{
    pg->tx = calloc(1, sizeof(mpi_state));
    int status = open_comm(pg);
    if (status < 0) mpi_shutdown(pg, false); /* a failed connect leaves nothing behind */
    return status;
}

const dist_transport awl_dist_mpi_transport = {
    .name = "mpi",
    .dtypes = DIST_DTYPE(AWL_F32) | DIST_DTYPE(AWL_F64) | DIST_DTYPE(AWL_I32),
    .connect = mpi_connect,
    .run = mpi_run,
    .idle = awl_dist_wait_wake,
    .shutdown = mpi_shutdown,
};

#endif
