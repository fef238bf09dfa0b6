/*
 * dist/nccl.c - the NCCL transport: the process group's table filled by
 * NVIDIA's collective library, for CUDA tensors, one GPU per rank. Built
 * when CMake finds NCCL (AWL_WITH_NCCL) and chosen by name
 * (awl_dist_options.backend or AWL_DIST_BACKEND "nccl"; train_gpt --device
 * cuda under a launcher), it fills the same table as tcp.c and mpi.c, so
 * DDP, ZeRO and tensor parallelism run on GPUs through the code they run on
 * CPUs. A rank's GPU is cuda:<LOCAL_RANK> unless the options name another.
 *
 * Rendezvous. A group of several ranks first builds the TCP transport's
 * mesh (tcp.c): a control and a data connection to every peer, through
 * rank 0's store, so awlrun launches a GPU job as it launches any other.
 * Rank 0 then makes NCCL's unique id and publishes it in the store under
 * the group's prefix ("awl/nccl/id"; a sub-group's "awl/g<id>/nccl/id"),
 * and every rank creates its communicator from it. Sub-groups
 * (awl_dist_split) do the same with an id of their own: one communicator,
 * one communication stream and one mesh per group.
 *
 * Streams and events. awl queues all of a device's kernels on one stream
 * (awl_device_stream). NCCL runs on a stream of the group's own, created
 * non-blocking (it never waits for the legacy default stream implicitly,
 * nor that stream for it) and at the highest priority (its kernels take
 * SMs as soon as they can, while backward keeps the rest busy):
 *
 *   user's thread    compute:  ... kernels that produce x ... [ready] ... backward goes on
 *                    (queues the work: an event, never a wait)     |
 *   comm thread      comm:                    wait(ready) -> ncclAllReduce(x) -> [done]
 *                                                                                  |
 *   awl_work_wait    returns once the communication thread has seen [done] pass
 *
 * so a collective waits for the kernels queued before it and for nothing
 * else (DDP's bucket: the gradients of its layers), the user's thread never
 * blocks when it starts one, and the result is there for every kernel
 * queued after awl_work_wait returns. The communication thread, not the
 * user's, polls [done]: it already runs each work to its end, watching the
 * peers and the deadline, and so every NCCL call after creation comes from
 * that one thread (creating and destroying the communicator are the user's
 * thread's, before the thread starts and after it stops). A stream per
 * group, not per device: two groups' collectives on one stream would run in
 * the order this rank queued them, which another rank need not share.
 *
 * Guarantees, as over TCP. NCCL itself neither checks that ranks agree nor
 * notices a peer that died; the TCP mesh stays beside it for that:
 *   - fingerprints: before NCCL runs an operation, its fingerprint goes to
 *     every rank the operation involves as a header-only data frame, and
 *     theirs are checked (ring.c's awl_tcp_exchange_fingerprints), so ranks that
 *     call different collectives fail naming both, and NCCL never runs a
 *     mismatched pair (it would hang, or worse). The price is a host round
 *     trip per operation, tens of microseconds, which only small messages
 *     notice;
 *   - a dead or silent peer: the control connections, read all along, say
 *     so at once (or after the peer timeout), even while NCCL waits for the
 *     peer on the GPU;
 *   - NCCL's own faults (a network error, a peer's NCCL failing): its
 *     asynchronous error, ncclCommGetAsyncError, polled with the completion
 *     event;
 *   - timeouts: an operation not finished by the group's timeout fails.
 * On any of these the communicator is aborted (ncclCommAbort stops the
 * kernels that wait for a peer that will never come) and the peers are told
 * (ABORT on the control connections, which makes them abort theirs), so
 * every rank returns AWL_ERR_DIST naming the operation, its sequence number
 * and the rank at fault, and the group is broken. The communicator is
 * non-blocking (ncclConfig_t.blocking = 0): creating it, or the first
 * collective that connects a pair of GPUs, returns ncclInProgress instead
 * of blocking until the peers take part, and the thread polls, watching
 * for all of the above; no NCCL call can hold it while a peer is dead.
 *
 * NCCL is opened with dlopen when the first group is made, not linked, for
 * the reason cuBLAS is (backends/cuda/cuda_matmul.cu): libnccl is over 200
 * MB, and a process that never makes an NCCL group (every CPU run of a
 * CUDA build) never maps it. nccl.h gives the types.
 */
#include "dist/dist_internal.h"

#if AWL_WITH_NCCL
#include <dlfcn.h>
#include <nccl.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/net.h"
#include "dist/tcp_internal.h"

/* ---- the library --------------------------------------------------------------------------- */

#define NCCL_FUNCTIONS(X)                                                                          \
    X(ncclGetVersion)                                                                              \
    X(ncclGetUniqueId)                                                                             \
    X(ncclCommInitRankConfig)                                                                      \
    X(ncclCommFinalize)                                                                            \
    X(ncclCommDestroy)                                                                             \
    X(ncclCommAbort)                                                                               \
    X(ncclCommGetAsyncError)                                                                       \
    X(ncclGetErrorString)                                                                          \
    X(ncclGetLastError)                                                                            \
    X(ncclGroupStart)                                                                              \
    X(ncclGroupEnd)                                                                                \
    X(ncclAllReduce)                                                                               \
    X(ncclBroadcast)                                                                               \
    X(ncclReduce)                                                                                  \
    X(ncclAllGather)                                                                               \
    X(ncclReduceScatter)                                                                           \
    X(ncclSend)                                                                                    \
    X(ncclRecv)

static struct {
#define NCCL_MEMBER(fn) __typeof__(&fn) fn;
    NCCL_FUNCTIONS(NCCL_MEMBER)
#undef NCCL_MEMBER
} api;

static pthread_mutex_t api_lock = PTHREAD_MUTEX_INITIALIZER;
static bool api_loaded;

/* NCCL's version code as "2.28.9" (codes below 2.9 had one digit less). */
static const char *version_text(int code, char *buf, size_t size)
{
    if (code >= 10000)
        snprintf(buf, size, "%d.%d.%d", code / 10000, code / 100 % 100, code % 100);
    else
        snprintf(buf, size, "%d.%d.%d", code / 1000, code / 100 % 10, code % 100);
    return buf;
}

/* Opens libnccl (the one CMake found, else the loader's libnccl.so.2) and
 * looks up every function, once per process. */
static int load_api(void)
{
    pthread_mutex_lock(&api_lock);
    int status = AWL_OK;
    if (!api_loaded) {
        void *lib = NULL;
#ifdef AWL_NCCL_PATH
        lib = dlopen(AWL_NCCL_PATH, RTLD_NOW | RTLD_LOCAL);
#endif
        if (!lib) lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
        const char *missing = lib ? NULL : dlerror();
#define NCCL_LOOKUP(fn)                                                                            \
    if (lib && !missing && !(api.fn = (__typeof__(api.fn))dlsym(lib, #fn))) missing = #fn;
        NCCL_FUNCTIONS(NCCL_LOOKUP)
#undef NCCL_LOOKUP
        int version = 0;
        char have[32];
        if (!lib)
            status = awl_error(AWL_ERR_UNSUPPORTED,
                               "awl_dist_init: cannot open NCCL (%s): install it, or put the "
                               "directory of libnccl.so.2 on LD_LIBRARY_PATH",
                               missing);
        else if (missing)
            status = awl_error(AWL_ERR_UNSUPPORTED, "awl_dist_init: this NCCL has no %s", missing);
        else if (api.ncclGetVersion(&version) != ncclSuccess || version < NCCL_VERSION(2, 14, 0))
            status = awl_error(AWL_ERR_UNSUPPORTED,
                               "awl_dist_init: NCCL %s is too old: awl needs 2.14 or later "
                               "(non-blocking communicators)",
                               version_text(version, have, sizeof have));
        api_loaded = status == AWL_OK;
        if (lib && !api_loaded) dlclose(lib);
    }
    pthread_mutex_unlock(&api_lock);
    return status;
}

/* ---- the state --------------------------------------------------------------------------------- */

typedef struct nccl_state {
    ncclComm_t comm;     /* NULL once aborted */
    int device;          /* the CUDA ordinal of pg->device */
    void *compute;       /* the stream awl queues the device's kernels on */
    cudaStream_t stream; /* the communication stream */
    cudaEvent_t done;    /* recorded on it after each operation */
    bool mesh;           /* the TCP mesh is up beside (pg->tx): world > 1 */
} nccl_state;

static ncclDataType_t type_of(uint8_t dtype)
{
    switch (dtype) {
    case AWL_F64: return ncclFloat64;
    case AWL_I32: return ncclInt32;
    case AWL_BF16: return ncclBfloat16;
    default: return ncclFloat32;
    }
}

static ncclRedOp_t op_of(uint8_t reduce)
{
    return reduce == AWL_DIST_AVG ? ncclAvg : reduce == AWL_DIST_MAX ? ncclMax : ncclSum;
}

static int cuda_fault(const awl_process_group *pg, cudaError_t e, const char *call, char *err,
                      size_t size)
{
    (void)cudaGetLastError();
    snprintf(err, size, "%s on %s: %s (%s)", call, pg->device, cudaGetErrorString(e),
             cudaGetErrorName(e));
    return TCP_FAULT_HERE;
}

static int nccl_fault(const awl_process_group *pg, ncclResult_t r, const char *call, char *err,
                      size_t size)
{
    const char *last = api.ncclGetLastError(pg->nccl->comm);
    snprintf(err, size, "NCCL's %s on %s: %s%s%s", call, pg->device, api.ncclGetErrorString(r),
             last && *last ? ": " : "", last ? last : "");
    return TCP_FAULT_HERE;
}

/* What each peer last said it was doing, for a timeout's message. */
static void peers_doing(const awl_process_group *pg, char *buf, size_t size)
{
    const tcp_state *ts = pg->tx;
    size_t at = 0;
    buf[0] = '\0';
    for (int r = 0; r < pg->world && at + 64 < size; r++) {
        if (r == pg->rank) continue;
        char who[96], doing[200];
        at += (size_t)snprintf(buf + at, size - at, "; %s: %s",
                               awl_tcp_peer_name(&ts->peers[r], who, sizeof who),
                               awl_tcp_peer_doing(pg, &ts->peers[r], doing, sizeof doing));
    }
}

/* Between two looks at the GPU: spins for the first milliseconds (a
 * collective's usual time), then sleeps on the control connections (and
 * pg->wake), so that a peer's death still wakes the thread at once. */
static void nap(awl_process_group *pg, double waited)
{
    if (waited < 2e-3) {
        sched_yield();
        return;
    }
    struct pollfd fds[pg->world + 1];
    int n = 1;
    fds[0] = (struct pollfd){pg->wake[0], POLLIN, 0};
    if (pg->nccl->mesh) n = awl_tcp_poll_fds(pg, fds);
    poll(fds, (nfds_t)n, 1);
}

/* After NCCL reported an error: a peer's death or abort explains most of
 * them, and the mesh says which peer (NCCL does not), given half a second
 * to notice. Returns the fault, err the cause first, NCCL's words after. */
static int find_cause(awl_process_group *pg, char *err, size_t size)
{
    if (!pg->nccl->mesh) return TCP_FAULT_HERE;
    char cause[1024];
    int fault = 0;
    for (double end = awl_net_now() + 0.5; !fault && awl_net_now() < end;) {
        fault = awl_tcp_service(pg, cause, sizeof cause);
        if (!fault) fault = awl_tcp_check_peers(pg, cause, sizeof cause);
        if (!fault) nap(pg, 1);
    }
    if (!fault) return TCP_FAULT_HERE;
    char nccl_said[512];
    snprintf(nccl_said, sizeof nccl_said, "%.500s", err);
    snprintf(err, size, "%.1000s (and %s)", cause, nccl_said);
    return fault;
}

/* What a wait is for ("create the communicator"), and its bound: `limit`
 * seconds (the variable that sets them named) after `since`. */
typedef struct wait_spec {
    const char *what;
    double since, limit;
    const char *limit_name;
} wait_spec;

/* Waits until the communicator has settled (no call of it in progress:
 * the non-blocking communicator's state is ncclSuccess) and, with
 * `until_done`, the last operation's event has passed; meanwhile watches
 * NCCL's asynchronous error, the mesh (a peer that dies, aborts, goes
 * silent or says goodbye too early) and the bound. 0, or a TCP_FAULT_*
 * code with err. */
static int wait_for(awl_process_group *pg, bool until_done, const wait_spec *w, char *err,
                    size_t size)
{
    nccl_state *st = pg->nccl;
    double start = awl_net_now(), deadline = w->since + w->limit;
    for (;;) {
        ncclResult_t state;
        ncclResult_t r = api.ncclCommGetAsyncError(st->comm, &state);
        if (r != ncclSuccess) state = r;
        if (state != ncclSuccess && state != ncclInProgress) {
            nccl_fault(pg, state, "asynchronous error", err, size);
            return find_cause(pg, err, size);
        }
        if (state == ncclSuccess) {
            if (!until_done) return 0;
            cudaError_t e = cudaEventQuery(st->done);
            if (e == cudaSuccess) return 0;
            if (e != cudaErrorNotReady) return cuda_fault(pg, e, "the completion event", err, size);
        }
        double now = awl_net_now();
        if (now - start >= 2e-3) {
            if (st->mesh) {
                int fault = awl_tcp_service(pg, err, size);
                if (fault == 0) fault = awl_tcp_check_peers(pg, err, size);
                if (fault) return fault;
            } else {
                awl_dist_service_wake(pg);
            }
            if (now > deadline) {
                char doing[1024] = "";
                if (st->mesh) peers_doing(pg, doing, sizeof doing);
                snprintf(err, size, "timed out after %g s (%s) waiting for NCCL on %s to %s%s",
                         w->limit, w->limit_name, pg->device, w->what, doing);
                return TCP_FAULT_HERE;
            }
        }
        nap(pg, now - start);
    }
}

/* ---- operations ----------------------------------------------------------------------------------- */

/* Whether every rank's share of an allgather or reduce_scatter is the same
 * size (NCCL's own collective then; else one broadcast or reduce per
 * share, grouped). */
static bool equal_shares(const awl_process_group *pg, const awl_work *w)
{
    for (int r = 1; r < pg->world; r++)
        if (w->bounds[r + 1] - w->bounds[r] != w->bounds[1]) return false;
    return true;
}

/* Queues w's NCCL call(s) on the communication stream; *call names it.
 * Nothing is queued for zero elements (every rank agrees on the counts). */
static ncclResult_t queue_nccl(awl_process_group *pg, awl_work *w, const char **call)
{
    nccl_state *st = pg->nccl;
    const dist_fingerprint *fp = &w->fp;
    ncclDataType_t type = type_of(fp->dtype);
    size_t es = awl_dtype_size(fp->dtype);
    char *in = w->in, *out = w->out;
    switch (fp->op) {
    case DIST_OP_ALLREDUCE:
    case DIST_OP_BARRIER:
        *call = "ncclAllReduce";
        if (!w->out_count) return ncclSuccess;
        return api.ncclAllReduce(in, out, (size_t)w->out_count, type, op_of(fp->reduce), st->comm,
                                 st->stream);
    case DIST_OP_BROADCAST:
        *call = "ncclBroadcast";
        if (!w->out_count) return ncclSuccess;
        return api.ncclBroadcast(out, out, (size_t)w->out_count, type, fp->root, st->comm,
                                 st->stream);
    case DIST_OP_SEND:
        *call = "ncclSend";
        if (!w->in_count) return ncclSuccess;
        return api.ncclSend(in, (size_t)w->in_count, type, fp->root, st->comm, st->stream);
    case DIST_OP_RECV:
        *call = "ncclRecv";
        if (!w->out_count) return ncclSuccess;
        return api.ncclRecv(out, (size_t)w->out_count, type, fp->root, st->comm, st->stream);
    }
    bool gather = fp->op == DIST_OP_ALLGATHER;
    const int64_t *b = w->bounds;
    if (equal_shares(pg, w)) {
        *call = gather ? "ncclAllGather" : "ncclReduceScatter";
        size_t share = (size_t)b[1];
        if (!share) return ncclSuccess;
        return gather ? api.ncclAllGather(in, out, share, type, st->comm, st->stream)
                      : api.ncclReduceScatter(in, out, share, type, op_of(fp->reduce), st->comm,
                                              st->stream);
    }
    /* shares of different sizes: share r broadcast from rank r (allgather),
     * or reduced onto rank r (reduce_scatter), all in one group */
    *call = gather ? "ncclBroadcast (allgather_v)" : "ncclReduce (reduce_scatter_v)";
    ncclResult_t r = api.ncclGroupStart();
    for (int k = 0; k < pg->world && r == ncclSuccess; k++) {
        size_t share = (size_t)(b[k + 1] - b[k]);
        if (!share) continue;
        bool mine = k == pg->rank;
        if (gather)
            r = api.ncclBroadcast(mine ? in : out + b[k] * (int64_t)es, out + b[k] * (int64_t)es,
                                  share, type, k, st->comm, st->stream);
        else
            r = api.ncclReduce(in + b[k] * (int64_t)es, mine ? out : NULL, share, type,
                               op_of(fp->reduce), k, st->comm, st->stream);
    }
    ncclResult_t end = api.ncclGroupEnd();
    return r != ncclSuccess ? r : end;
}

/* Puts w on the communication stream behind its inputs' event, then its
 * completion event; `since`: when w began (its timeout counts from there).
 * 0, or a TCP_FAULT_* code with err. */
static int launch(awl_process_group *pg, awl_work *w, double since, char *err, size_t size)
{
    nccl_state *st = pg->nccl;
    cudaError_t e = cudaSetDevice(st->device);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(st->stream, (cudaEvent_t)w->tx, 0);
    if (e != cudaSuccess) return cuda_fault(pg, e, "cudaStreamWaitEvent", err, size);
    const char *call = "";
    ncclResult_t r = queue_nccl(pg, w, &call);
    if (r != ncclSuccess && r != ncclInProgress) return nccl_fault(pg, r, call, err, size);
    if (r == ncclInProgress) { /* connecting to its peers: nothing more on the stream until done */
        wait_spec queued = {"queue the operation (connecting the GPUs)", since, pg->timeout,
                            "AWL_DIST_TIMEOUT"};
        int fault = wait_for(pg, false, &queued, err, size);
        if (fault) return fault;
    }
    e = cudaEventRecord(st->done, st->stream);
    return e == cudaSuccess ? 0 : cuda_fault(pg, e, "cudaEventRecord", err, size);
}

/* Aborts the communicator: NCCL's kernels waiting for peers stop. Then
 * waits (a few seconds at most) for the stream to drain, so that the
 * work's memory is not reused while the GPU may still write it. */
static void abort_comm(awl_process_group *pg)
{
    nccl_state *st = pg->nccl;
    if (!st->comm) return;
    api.ncclCommAbort(st->comm);
    st->comm = NULL;
    double deadline = awl_net_now() + 5;
    while (cudaEventQuery(st->done) == cudaErrorNotReady && awl_net_now() < deadline) sched_yield();
    (void)cudaGetLastError();
}

/* The bytes this rank sends and receives for w under the bandwidth-optimal
 * algorithm (NCCL does not say what it moved): the ring's 2(n-1)/n of an
 * allreduce, the others' shares of an allgather or reduce_scatter. */
static void count_bytes(awl_process_group *pg, const awl_work *w)
{
    int64_t es = (int64_t)awl_dtype_size(w->fp.dtype), n = pg->world, bytes;
    switch (w->fp.op) {
    case DIST_OP_ALLREDUCE:
    case DIST_OP_BARRIER: bytes = 2 * (n - 1) * w->out_count / n * es; break;
    case DIST_OP_ALLGATHER: bytes = (w->out_count - w->in_count) * es; break;
    case DIST_OP_REDUCE_SCATTER: bytes = (w->in_count - w->out_count) * es; break;
    case DIST_OP_SEND: awl_dist_count_bytes(pg, w->in_count * es, 0); return;
    case DIST_OP_RECV: awl_dist_count_bytes(pg, 0, w->out_count * es); return;
    default: bytes = w->out_count * es; /* broadcast */
    }
    awl_dist_count_bytes(pg, bytes, bytes);
}

static int nccl_run(awl_process_group *pg, awl_work *w)
{
    nccl_state *st = pg->nccl;
    wait_spec done = {"finish the operation", awl_net_now(), pg->timeout, "AWL_DIST_TIMEOUT"};
    char err[1536] = "";
    int status = st->mesh ? awl_tcp_exchange_fingerprints(pg, w) : 0;
    if (status == 0) {
        int fault = launch(pg, w, done.since, err, sizeof err);
        if (fault == 0) fault = wait_for(pg, true, &done, err, sizeof err);
        if (fault == 0) {
            count_bytes(pg, w);
        } else {
            size_t at = strlen(err);
            snprintf(err + at, sizeof err - at, " (rank %d aborted its NCCL communicator)",
                     dist_me(pg));
            if (st->mesh)
                awl_tcp_fail_operation(pg, w, fault, err);
            else
                awl_dist_work_message(pg, w, err);
            status = -1;
        }
    }
    if (status < 0) abort_comm(pg);
    if (st->mesh) awl_tcp_end_operation(pg, w);
    return status;
}

/* ---- the user's thread: events ------------------------------------------------------------------- */

static int nccl_enqueue(awl_process_group *pg, awl_work *w)
{
    nccl_state *st = pg->nccl;
    cudaEvent_t ready = NULL;
    cudaError_t e = cudaSetDevice(st->device);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&ready, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventRecord(ready, (cudaStream_t)st->compute);
    if (e != cudaSuccess) {
        if (ready) cudaEventDestroy(ready);
        (void)cudaGetLastError();
        char what[160];
        return awl_error(
            AWL_ERR_DEVICE, "%s: cannot record the event its inputs are ready at on %s: %s",
            awl_dist_describe(&w->fp, what, sizeof what), pg->device, cudaGetErrorString(e));
    }
    w->tx = ready;
    return AWL_OK;
}

static void nccl_release(awl_process_group *pg, awl_work *w)
{
    (void)pg;
    if (w->tx) cudaEventDestroy((cudaEvent_t)w->tx);
    w->tx = NULL;
}

/* ---- setting up and shutting down ------------------------------------------------------------------- */

/* This rank's GPU, the compute stream awl uses on it, and the group's
 * communication stream and completion event. */
static int open_device(awl_process_group *pg)
{
    nccl_state *st = pg->nccl;
    awl_device d;
    /* by name: the backend's table is tensor/'s business (scripts/check_layers.sh) */
    bool cuda = strncmp(pg->device, "cuda", 4) == 0 && (pg->device[4] == '\0' || pg->device[4] == ':');
    int status = cuda ? awl_device_parse(pg->device, &d)
                      : awl_error(AWL_ERR_INVALID, "%s is not a CUDA device", pg->device);
    if (status < 0)
        return awl_error(AWL_ERR_INVALID,
                         "awl_dist_init: rank %d's NCCL group runs on its GPU, cuda:<LOCAL_RANK> "
                         "(LOCAL_RANK is %d) unless the options name one: %s",
                         dist_me(pg), pg->local_rank, awl_last_error());
    st->device = d.index;
    awl_device_stream(pg->device, &st->compute);
    int low, high;
    cudaError_t e = cudaSetDevice(st->device);
    if (e == cudaSuccess) e = cudaDeviceGetStreamPriorityRange(&low, &high);
    if (e == cudaSuccess) e = cudaStreamCreateWithPriority(&st->stream, cudaStreamNonBlocking, high);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&st->done, cudaEventDisableTiming);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return awl_error(AWL_ERR_DEVICE, "awl_dist_init: rank %d cannot make a stream on %s: %s",
                         dist_me(pg), pg->device, cudaGetErrorString(e));
    }
    return AWL_OK;
}

/* The unique id (rank 0's, through the store) and the communicator. */
static int create_comm(awl_process_group *pg)
{
    nccl_state *st = pg->nccl;
    ncclUniqueId id;
    char key[96], err[1536];
    snprintf(key, sizeof key, "%s/nccl/id", pg->key_prefix);
    ncclResult_t r = pg->rank == 0 ? api.ncclGetUniqueId(&id) : ncclSuccess;
    if (r != ncclSuccess)
        return awl_error(AWL_ERR_DIST, "awl_dist_init: rank 0 cannot make an NCCL unique id: %s",
                         api.ncclGetErrorString(r));
    int status = AWL_OK;
    if (st->mesh && pg->rank == 0) status = awl_store_set(pg->store, key, &id, sizeof id);
    if (st->mesh && pg->rank != 0) {
        void *value = NULL;
        size_t len = 0;
        status = awl_store_get(pg->store, key, &value, &len, pg->init_timeout);
        if (status == AWL_OK && len != sizeof id)
            status = awl_error(AWL_ERR_DIST, "awl_dist_init: the store's %s has %zu bytes, not an "
                                             "NCCL unique id's %zu",
                               key, len, sizeof id);
        if (status == AWL_OK) memcpy(&id, value, sizeof id);
        free(value);
    }
    if (status < 0)
        return awl_error(AWL_ERR_DIST, "awl_dist_init: rank %d: the NCCL unique id: %s", dist_me(pg),
                         awl_last_error());
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    config.commName = pg->key_prefix;
    r = api.ncclCommInitRankConfig(&st->comm, pg->world, id, pg->rank, &config);
    wait_spec created = {"create the communicator", awl_net_now(), pg->init_timeout,
                         "AWL_DIST_INIT_TIMEOUT"};
    int fault = r == ncclSuccess || r == ncclInProgress
                    ? wait_for(pg, false, &created, err, sizeof err)
                    : nccl_fault(pg, r, "ncclCommInitRankConfig", err, sizeof err);
    if (fault)
        return awl_error(AWL_ERR_DIST, "awl_dist_init: rank %d could not create its NCCL "
                                       "communicator (%d ranks, %s): %s",
                         dist_me(pg), pg->world, pg->device, err);
    return AWL_OK;
}

static void nccl_shutdown(awl_process_group *pg, bool clean)
{
    nccl_state *st = pg->nccl;
    if (st->comm) {
        /* finalize (every operation flushed, NCCL's peers told), then free;
         * a peer gone or silent meanwhile makes it an abort */
        char err[1536] = "";
        bool finalized = false;
        if (clean) {
            ncclResult_t r = api.ncclCommFinalize(st->comm);
            wait_spec quiet = {"finalize the communicator", awl_net_now(), pg->peer_timeout,
                               "AWL_DIST_PEER_TIMEOUT"};
            if (r == ncclSuccess || r == ncclInProgress)
                finalized = wait_for(pg, false, &quiet, err, sizeof err) == 0;
            else
                nccl_fault(pg, r, "ncclCommFinalize", err, sizeof err);
        }
        if (clean && !finalized)
            fprintf(stderr, "awl_dist: rank %d: NCCL's finalize failed (%s): aborting\n",
                    dist_me(pg), err);
        if (finalized)
            api.ncclCommDestroy(st->comm);
        else
            api.ncclCommAbort(st->comm);
    }
    if (st->done) cudaEventDestroy(st->done);
    if (st->stream) cudaStreamDestroy(st->stream);
    if (st->mesh) awl_dist_tcp_transport.shutdown(pg, clean);
    free(st);
    pg->nccl = NULL;
}

static int nccl_connect(awl_process_group *pg)
{
    int status = load_api();
    if (status < 0) return status;
    pg->nccl = calloc(1, sizeof *pg->nccl);
    if (!pg->nccl)
        return awl_error(AWL_ERR_OOM, "awl_dist_init: rank %d: out of memory for its NCCL state",
                         dist_me(pg));
    status = open_device(pg);
    if (status == AWL_OK && pg->world > 1) {
        status = awl_dist_tcp_transport.connect(pg);
        pg->nccl->mesh = status == AWL_OK;
    }
    if (status == AWL_OK) status = create_comm(pg);
    if (status < 0) nccl_shutdown(pg, false); /* a failed connect leaves nothing behind */
    return status;
}

static void nccl_idle(awl_process_group *pg, double seconds)
{
    if (pg->nccl->mesh)
        awl_dist_tcp_transport.idle(pg, seconds);
    else
        awl_dist_wait_wake(pg, seconds);
}

const dist_transport awl_dist_nccl_transport = {
    .name = "nccl",
    .device_memory = true,
    .store = true,
    .dtypes = DIST_DTYPE(AWL_F32) | DIST_DTYPE(AWL_BF16) | DIST_DTYPE(AWL_F64) | DIST_DTYPE(AWL_I32),
    .connect = nccl_connect,
    .run = nccl_run,
    .idle = nccl_idle,
    .shutdown = nccl_shutdown,
    .enqueue = nccl_enqueue,
    .release = nccl_release,
};

#endif
