/*
 * dist/process_group.c - what every transport has in common: the group's
 * options, staging tensors into host buffers, sequence numbers and
 * fingerprints, the work queue run by one communication thread, the flight
 * ring and failure bookkeeping (see dist_internal.h).
 *
 * A collective's life: the user's thread checks its arguments, numbers it
 * (pg->next_seq), stages the tensors (a contiguous CPU tensor is used in
 * place; any other is copied into a contiguous host tensor), retains them,
 * and appends the work to the queue. The communication thread takes works
 * in order, records each in the flight ring, and hands it to the
 * transport. awl_work_wait blocks until the work is done, copies staged
 * results back into the user's tensors, releases them and reports the
 * status. World size 1 needs no transport: the work completes as it starts.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"
#include "dist/dist_internal.h"
#include "dist/net.h"
#include "tensor/profiler.h"

/* ---- options --------------------------------------------------------------------------------- */

awl_dist_options awl_dist_default_options(void)
{
    awl_dist_options o = {0};
    o.rank = o.world_size = o.local_rank = -1;
    return o;
}

/* An integer from the environment; `fallback` when unset, -2 when malformed. */
static long env_long(const char *name, long fallback)
{
    const char *v = getenv(name);
    if (!v || !*v) return fallback;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    return *end || errno ? -2 : x;
}

static double env_double(const char *name, double fallback)
{
    const char *v = getenv(name);
    if (!v || !*v) return fallback;
    char *end;
    double x = strtod(v, &end);
    return *end || !(x > 0) ? -1 : x;
}

/* The first host of a Slurm node list: "node[07-09,12],gpu1" -> "node07". */
static void first_slurm_host(const char *list, char *out, size_t size)
{
    size_t n = strcspn(list, ",[");
    if (list[n] != '[') {
        snprintf(out, size, "%.*s", (int)n, list);
        return;
    }
    size_t digits = strcspn(list + n + 1, "-,]");
    snprintf(out, size, "%.*s%.*s", (int)n, list, (int)digits, list + n + 1);
}

/* The transport of a name, or NULL; one this build lacks is there, by
 * name, only to be refused with a message. */
static const dist_transport *transport_named(const char *name)
{
    if (strcmp(name, "tcp") == 0) return &awl_dist_tcp_transport;
    if (strcmp(name, "mpi") == 0) return dist_mpi;
    if (strcmp(name, "nccl") == 0) return dist_nccl;
    return NULL;
}

int awl_dist_launch_info(const awl_dist_options *options, awl_dist_launch *out)
{
    awl_dist_options o = options ? *options : awl_dist_default_options();
    memset(out, 0, sizeof *out);
    /* the launcher's variables, in the order torchrun (awlrun), Open MPI,
     * PMI (MPICH, Intel MPI), Slurm */
    static const struct {
        const char *launcher, *rank, *world, *local;
    } launchers[] = {
        {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
        {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
        {"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
        {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
    };
    out->launcher = "none";
    long rank = 0, world = 1, local = 0;
    for (size_t i = 0; i < sizeof launchers / sizeof *launchers; i++) {
        if (!getenv(launchers[i].rank)) continue;
        out->launcher = launchers[i].launcher;
        rank = env_long(launchers[i].rank, 0);
        world = env_long(launchers[i].world, 1);
        local = env_long(launchers[i].local, 0);
        break;
    }
    if (o.rank >= 0) rank = o.rank;
    if (o.world_size > 0) world = o.world_size;
    if (o.local_rank >= 0) local = o.local_rank;
    bool slurm = strcmp(out->launcher, "slurm") == 0;
    long port = o.master_port > 0 ? o.master_port
                : getenv("MASTER_PORT") ? env_long("MASTER_PORT", 29500)
                : slurm ? 20000 + env_long("SLURM_JOB_ID", 9500) % 20000 /* one port per job */
                        : 29500;
    if (world < 1 || world > 4096)
        return awl_error(AWL_ERR_INVALID, "awl_dist_init: world size %ld (%s's variables) is not in "
                                          "1..4096",
                         world, out->launcher);
    if (rank < 0 || rank >= world)
        return awl_error(AWL_ERR_INVALID, "awl_dist_init: rank %ld (%s's variables) is not in 0..%ld",
                         rank, out->launcher, world - 1);
    if (local < 0) return awl_error(AWL_ERR_INVALID, "awl_dist_init: the local rank is malformed");
    if (port < 1 || port > 65535)
        return awl_error(AWL_ERR_INVALID, "awl_dist_init: master port %ld (MASTER_PORT) is not in "
                                          "1..65535",
                         port);
    out->rank = (int)rank;
    out->world_size = (int)world;
    out->local_rank = (int)local;
    out->master_port = (int)port;
    const char *addr = o.master_addr ? o.master_addr : getenv("MASTER_ADDR");
    if (addr && *addr)
        snprintf(out->master_addr, sizeof out->master_addr, "%s", addr);
    else if (slurm && getenv("SLURM_NODELIST"))
        first_slurm_host(getenv("SLURM_NODELIST"), out->master_addr, sizeof out->master_addr);
    else
        snprintf(out->master_addr, sizeof out->master_addr, "127.0.0.1");
    /* the transport: as asked, else MPI under an MPI launcher (when built
     * in), else awl's TCP */
    const char *backend = o.backend ? o.backend : getenv("AWL_DIST_BACKEND");
    bool mpi_launch = strcmp(out->launcher, "openmpi") == 0 || strcmp(out->launcher, "pmi") == 0;
    out->backend = backend && *backend ? backend : mpi_launch && AWL_WITH_MPI ? "mpi" : "tcp";
    const dist_transport *t = transport_named(out->backend);
    if (!t)
        return awl_error(AWL_ERR_INVALID, "awl_dist_init: unknown transport '%s' (tcp, mpi or nccl)",
                         out->backend);
    if (strcmp(out->backend, "mpi") == 0 && !AWL_WITH_MPI)
        return awl_error(AWL_ERR_UNSUPPORTED,
                         "awl_dist_init: this build has no MPI transport (CMake did not find MPI: "
                         "install libopenmpi-dev, or use --dist-backend tcp)");
    if (strcmp(out->backend, "nccl") == 0 && !AWL_WITH_NCCL)
        return awl_error(AWL_ERR_UNSUPPORTED,
                         "awl_dist_init: this build has no NCCL transport, so no process group "
                         "of CUDA tensors (CMake found no CUDA, or no nccl.h and libnccl beside "
                         "it: install NCCL and configure again, or use --dist-backend tcp, which "
                         "stages CUDA tensors through host memory)");
    out->backend = t->name;
    return AWL_OK;
}

static int resolve_options(const awl_dist_options *in, awl_process_group *pg)
{
    awl_dist_options o = in ? *in : awl_dist_default_options();
    awl_dist_launch l;
    if (awl_dist_launch_info(in, &l) < 0) return AWL_ERR_INVALID;
    pg->rank = l.rank;
    pg->world = l.world_size;
    pg->local_rank = l.local_rank;
    pg->master_port = l.master_port;
    snprintf(pg->master_addr, sizeof pg->master_addr, "%s", l.master_addr);
    pg->transport = transport_named(l.backend);
    if (!pg->transport->device_memory)
        snprintf(pg->device, sizeof pg->device, "cpu");
    else if (o.device)
        snprintf(pg->device, sizeof pg->device, "%s", o.device);
    else
        snprintf(pg->device, sizeof pg->device, "cuda:%d", pg->local_rank);
    const char *token = o.token ? o.token : getenv("AWL_JOB_TOKEN");
    snprintf(pg->token, sizeof pg->token, "%s", token ? token : "");
    pg->timeout = o.timeout_s > 0 ? o.timeout_s : env_double("AWL_DIST_TIMEOUT", 300);
    pg->peer_timeout = o.peer_timeout_s > 0 ? o.peer_timeout_s
                                            : env_double("AWL_DIST_PEER_TIMEOUT", 15);
    pg->init_timeout = o.init_timeout_s > 0 ? o.init_timeout_s
                                            : env_double("AWL_DIST_INIT_TIMEOUT", 120);
    long seg = o.segment_bytes > 0 ? (long)o.segment_bytes
                                   : env_long("AWL_DIST_SEGMENT_BYTES", 1 << 20);
    if (pg->timeout < 0 || pg->peer_timeout < 0 || pg->init_timeout < 0)
        return awl_error(AWL_ERR_INVALID, "awl_dist_init: AWL_DIST_TIMEOUT, AWL_DIST_PEER_TIMEOUT "
                                          "and AWL_DIST_INIT_TIMEOUT are positive seconds");
    if (seg < 1024 || seg > (1L << 30))
        return awl_error(AWL_ERR_INVALID, "awl_dist_init: segment size %ld bytes is not in "
                                          "1 KiB..1 GiB",
                         seg);
    pg->segment_bytes = seg;
    return AWL_OK;
}

/* ---- SIGUSR1 prints the flight ring --------------------------------------------------------- */

#define MAX_GROUPS 16
static awl_process_group *volatile groups[MAX_GROUPS];
static pthread_mutex_t groups_lock = PTHREAD_MUTEX_INITIALIZER;

static void on_sigusr1(int sig)
{
    (void)sig;
    int saved = errno;
    for (int i = 0; i < MAX_GROUPS; i++) {
        awl_process_group *pg = groups[i];
        if (!pg) continue;
        pg->dump_requested = 1;
        ssize_t ignored = write(pg->wake[1], "d", 1);
        (void)ignored;
    }
    errno = saved;
}

static void register_group(awl_process_group *pg, bool on)
{
    pthread_mutex_lock(&groups_lock);
    for (int i = 0; i < MAX_GROUPS; i++) {
        if (on && !groups[i]) {
            groups[i] = pg;
            break;
        }
        if (!on && groups[i] == pg) groups[i] = NULL;
    }
    /* a program's own SIGUSR1 handler wins */
    struct sigaction old;
    if (on && sigaction(SIGUSR1, NULL, &old) == 0 && old.sa_handler == SIG_DFL) {
        struct sigaction sa = {0};
        sa.sa_handler = on_sigusr1;
        sa.sa_flags = SA_RESTART;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGUSR1, &sa, NULL);
    }
    pthread_mutex_unlock(&groups_lock);
}

/* ---- fingerprints and the flight ring ------------------------------------------------------- */

static const char *op_name(int op)
{
    static const char *const names[] = {"?",       "allreduce", "broadcast", "allgather",
                                        "reduce_scatter", "barrier", "send", "recv"};
    return op >= 1 && op <= DIST_OP_RECV ? names[op] : names[0];
}

static const char *reduce_name(int r)
{
    return r == AWL_DIST_SUM ? "sum" : r == AWL_DIST_AVG ? "avg" : r == AWL_DIST_MAX ? "max" : "?";
}

const char *awl_dist_describe(const dist_fingerprint *fp, char *buf, size_t size)
{
    const char *dtype = fp->dtype < AWL_DTYPE_COUNT ? awl_dtype_name(fp->dtype) : "?";
    unsigned long long seq = (unsigned long long)fp->seq, n = (unsigned long long)fp->count;
    switch (fp->op) {
    case DIST_OP_ALLREDUCE:
        snprintf(buf, size, "allreduce #%llu (%s, %s, %llu elements)", seq, reduce_name(fp->reduce),
                 dtype, n);
        break;
    case DIST_OP_REDUCE_SCATTER:
    case DIST_OP_ALLGATHER: {
        char shares[32] = "";
        if (fp->root != -1) snprintf(shares, sizeof shares, ", shares %08x", (unsigned)fp->root);
        if (fp->op == DIST_OP_ALLGATHER)
            snprintf(buf, size, "allgather #%llu (%s, %llu elements%s)", seq, dtype, n, shares);
        else
            snprintf(buf, size, "reduce_scatter #%llu (%s, %s, %llu elements%s)", seq,
                     reduce_name(fp->reduce), dtype, n, shares);
        break;
    }
    case DIST_OP_BROADCAST:
        snprintf(buf, size, "broadcast #%llu (%s, %llu elements, root %d)", seq, dtype, n,
                 (int)fp->root);
        break;
    case DIST_OP_BARRIER: snprintf(buf, size, "barrier #%llu", seq); break;
    case DIST_OP_SEND:
        snprintf(buf, size, "send #%llu to rank %d (%s, %llu elements)", seq, (int)fp->root, dtype,
                 n);
        break;
    case DIST_OP_RECV:
        snprintf(buf, size, "recv #%llu from rank %d (%s, %llu elements)", seq, (int)fp->root,
                 dtype, n);
        break;
    default:
        snprintf(buf, size, "%s #%llu (%s, %llu elements)", op_name(fp->op), seq, dtype, n);
    }
    return buf;
}

bool awl_dist_fingerprint_equal(const dist_fingerprint *a, const dist_fingerprint *b)
{
    return a->op == b->op && a->dtype == b->dtype && a->reduce == b->reduce &&
           a->root == b->root && a->seq == b->seq && a->count == b->count;
}

double awl_dist_elapsed(const awl_process_group *pg) { return awl_net_now() - pg->t0; }

/* Caller holds pg->lock. */
static void print_flight_locked(awl_process_group *pg, FILE *out)
{
    fprintf(out, "awl_dist: rank %d's last operations (newest last; times since the group began):\n",
            dist_me(pg));
    int printed = 0;
    for (int i = 0; i < DIST_FLIGHT_SLOTS; i++) {
        const dist_flight *f = &pg->flight[(pg->flight_next + i) % DIST_FLIGHT_SLOTS];
        if (!f->fp.op) continue;
        char what[160];
        awl_dist_describe(&f->fp, what, sizeof what);
        if (f->end > 0)
            fprintf(out, "  %-58s %9.3f s  took %9.3f ms  %s\n", what, f->start,
                    (f->end - f->start) * 1e3, f->status == 0 ? "ok" : "FAILED");
        else
            fprintf(out, "  %-58s %9.3f s  running for %.3f s\n", what, f->start,
                    awl_dist_elapsed(pg) - f->start);
        printed++;
    }
    if (!printed) fprintf(out, "  (none yet)\n");
    fflush(out);
}

void awl_dist_print_flight_ring(awl_process_group *pg, FILE *out)
{
    if (!pg) return;
    pthread_mutex_lock(&pg->lock);
    print_flight_locked(pg, out ? out : stderr);
    pthread_mutex_unlock(&pg->lock);
}

/* Under awlrun: one line "RANK BLAMED" on the pipe it names, so that its
 * verdict can follow the blame from the rank that ended first to the rank
 * that failed first (they differ when the culprit's exit is slow). */
static void report_to_launcher(const awl_process_group *pg)
{
    const char *text = getenv("AWLRUN_REPORT_FD");
    char *end;
    long fd = text ? strtol(text, &end, 10) : -1;
    struct stat st;
    if (fd < 0 || *end || fstat((int)fd, &st) < 0 || !S_ISFIFO(st.st_mode)) return;
    char line[48];
    int n = snprintf(line, sizeof line, "%d %d\n", dist_me(pg), pg->blamed);
    if (write((int)fd, line, (size_t)n) < 0) {
        /* awlrun is gone: its verdict needs nothing */
    }
}

void awl_dist_fail(awl_process_group *pg, const char *message)
{
    pthread_mutex_lock(&pg->lock);
    if (!pg->failed) {
        pg->failed = true;
        snprintf(pg->failure, sizeof pg->failure, "%s", message);
        fprintf(stderr, "awl_dist: rank %d: %s\n", dist_me(pg), message);
        print_flight_locked(pg, stderr);
        report_to_launcher(pg);
    }
    pthread_mutex_unlock(&pg->lock);
}

void awl_dist_work_message(const awl_process_group *pg, awl_work *w, const char *err)
{
    char what[160];
    snprintf(w->message, sizeof w->message, "%s failed on rank %d: %s",
             awl_dist_describe(&w->fp, what, sizeof what), dist_me(pg), err);
}

bool awl_dist_failed(awl_process_group *pg, char *message, size_t size)
{
    pthread_mutex_lock(&pg->lock);
    bool failed = pg->failed;
    if (failed && message) snprintf(message, size, "%s", pg->failure);
    pthread_mutex_unlock(&pg->lock);
    return failed;
}

void awl_dist_service_wake(awl_process_group *pg)
{
    char buf[64];
    while (read(pg->wake[0], buf, sizeof buf) > 0) {
    }
    if (pg->dump_requested) {
        pg->dump_requested = 0;
        awl_dist_print_flight_ring(pg, stderr);
    }
}

void awl_dist_wait_wake(awl_process_group *pg, double seconds)
{
    struct pollfd p = {pg->wake[0], POLLIN, 0};
    poll(&p, 1, (int)(seconds * 1e3));
    awl_dist_service_wake(pg);
}

void awl_dist_count_bytes(awl_process_group *pg, int64_t sent, int64_t received)
{
    __atomic_add_fetch(&pg->stats.bytes_sent, sent, __ATOMIC_RELAXED);
    __atomic_add_fetch(&pg->stats.bytes_received, received, __ATOMIC_RELAXED);
}

void awl_dist_get_stats(const awl_process_group *pg, awl_dist_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!pg) return;
    out->bytes_sent = __atomic_load_n(&pg->stats.bytes_sent, __ATOMIC_RELAXED);
    out->bytes_received = __atomic_load_n(&pg->stats.bytes_received, __ATOMIC_RELAXED);
    pthread_mutex_lock((pthread_mutex_t *)&pg->lock);
    out->collectives = pg->stats.collectives;
    out->busy_s = pg->stats.busy_s;
    pthread_mutex_unlock((pthread_mutex_t *)&pg->lock);
}

/* ---- the communication thread --------------------------------------------------------------- */

static void complete(awl_process_group *pg, awl_work *w, int status)
{
    pthread_mutex_lock(&pg->lock);
    w->status = status;
    w->end = awl_dist_elapsed(pg);
    dist_flight *f = &pg->flight[w->flight_slot];
    if (awl_dist_fingerprint_equal(&f->fp, &w->fp)) {
        f->end = w->end > f->start ? w->end : f->start + 1e-9;
        f->status = status;
    }
    pg->stats.busy_s += w->end - w->start;
    w->done = true;
    pthread_cond_broadcast(&pg->cond);
    pthread_mutex_unlock(&pg->lock);
}

static void run_one(awl_process_group *pg, awl_work *w)
{
    pthread_mutex_lock(&pg->lock);
    w->start = awl_dist_elapsed(pg);
    w->flight_slot = pg->flight_next;
    pg->flight[pg->flight_next] = (dist_flight){w->fp, w->start, 0, 0,
                                                w->in_count * (int64_t)awl_dtype_size(w->fp.dtype)};
    pg->flight_next = (pg->flight_next + 1) % DIST_FLIGHT_SLOTS;
    pg->stats.collectives++;
    bool failed = pg->failed;
    char what[160];
    if (failed)
        snprintf(w->message, sizeof w->message, "%s on rank %d cannot run: %.1700s",
                 awl_dist_describe(&w->fp, what, sizeof what), dist_me(pg), pg->failure);
    pthread_mutex_unlock(&pg->lock);
    if (failed) {
        complete(pg, w, AWL_ERR_DIST);
        return;
    }
    awl_profiler_begin(AWL_PROFILE_COMM, op_name(w->fp.op));
    int status = pg->transport->run(pg, w);
    awl_profiler_end();
    if (status < 0) awl_dist_fail(pg, w->message);
    complete(pg, w, status < 0 ? AWL_ERR_DIST : AWL_OK);
}

static void *comm_main(void *arg)
{
    awl_process_group *pg = arg;
    /* the signal is the user's thread's business */
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &block, NULL);
    awl_profiler_name_thread("comm");
    for (;;) {
        pthread_mutex_lock(&pg->lock);
        awl_work *w = pg->head;
        if (w) {
            pg->head = w->next;
            if (!pg->head) pg->tail = NULL;
        }
        bool stop = pg->stop;
        pthread_mutex_unlock(&pg->lock);
        if (pg->dump_requested) awl_dist_service_wake(pg);
        if (w)
            run_one(pg, w);
        else if (stop)
            break;
        else
            pg->transport->idle(pg, 1.0);
    }
    return NULL;
}

/* ---- creation and destruction --------------------------------------------------------------- */

static awl_process_group *new_group(void)
{
    awl_process_group *pg = calloc(1, sizeof *pg);
    pg->t0 = awl_net_now();
    pg->wake[0] = pg->wake[1] = -1;
    pg->blamed = -1;
    pthread_mutex_init(&pg->lock, NULL);
    pthread_cond_init(&pg->cond, NULL);
    return pg;
}

/* The per-rank bookkeeping of a group whose rank and world are set;
 * global: the members' ranks in the job's group (NULL: 0..world-1). */
static void size_group(awl_process_group *pg, const int *global)
{
    const size_t n = pg->world > 0 ? (size_t)pg->world : 1;
    pg->send_seq = awl_xcalloc(n, sizeof *pg->send_seq);
    pg->recv_seq = awl_xcalloc(n, sizeof *pg->recv_seq);
    pg->global_rank = awl_xcalloc(n, sizeof *pg->global_rank);
    for (int r = 0; r < pg->world; r++) pg->global_rank[r] = global ? global[r] : r;
}

/* Connects a group whose store is up and starts its communication thread.
 * Returns 0, or negative after an error (destroy the group). */
static int start_group(awl_process_group *pg)
{
    if (pipe2(pg->wake, O_CLOEXEC | O_NONBLOCK) < 0)
        return awl_error(AWL_ERR_DIST, "awl_dist_init: cannot make a pipe: %s", strerror(errno));
    if (pg->transport->connect(pg) < 0) return AWL_ERR_DIST;
    pg->connected = true;
    if (pthread_create(&pg->thread, NULL, comm_main, pg) != 0)
        return awl_error(AWL_ERR_DIST, "awl_dist_init: cannot start the communication thread");
    pg->thread_started = true;
    register_group(pg, true);
    return AWL_OK;
}

awl_process_group *awl_dist_init(const awl_dist_options *options)
{
    awl_process_group *pg = new_group();
    snprintf(pg->key_prefix, sizeof pg->key_prefix, "awl");
    pg->owns_store = true;
    if (resolve_options(options, pg) < 0) {
        awl_dist_destroy(pg);
        return NULL;
    }
    size_group(pg, NULL);
    if (pg->world == 1 && !pg->transport->device_memory) return pg; /* works run as they start */
    if (pg->world == 1 || !pg->transport->store) { /* alone, or MPI: no rendezvous */
        if (start_group(pg) < 0) {
            awl_dist_destroy(pg);
            return NULL;
        }
        return pg;
    }

    char err[512] = "";
    if (pg->rank == 0) {
        pg->server = awl_store_server_start(pg->master_addr, pg->master_port, pg->token, pg->world,
                                            err, sizeof err);
        if (!pg->server) {
            awl_error(AWL_ERR_DIST, "awl_dist_init: rank 0 cannot start the store: %s%s", err,
                      strstr(err, "in use") ? " (another job on this port? set MASTER_PORT)" : "");
            awl_dist_destroy(pg);
            return NULL;
        }
    }
    pg->store = awl_store_connect(pg->master_addr, pg->master_port, pg->token, pg->rank, pg->world,
                              pg->init_timeout, err, sizeof err);
    if (!pg->store) {
        awl_error(AWL_ERR_DIST, "awl_dist_init: rank %d cannot reach the store of rank 0: %s",
                  dist_me(pg), err);
        awl_dist_destroy(pg);
        return NULL;
    }
    if (start_group(pg) < 0) {
        awl_dist_destroy(pg);
        return NULL;
    }
    return pg;
}

awl_process_group *awl_dist_split(awl_process_group *pg, int color, int key)
{
    if (!pg) {
        awl_error(AWL_ERR_INVALID, "awl_dist_split: no process group");
        return NULL;
    }
    /* every rank's (color, key) */
    int n = pg->world;
    int32_t mine[2] = {color, key}, *all = calloc((size_t)n * 2, sizeof *all);
    awl_scope_begin();
    awl_tensor *out = awl_empty(AWL_SHAPE((int64_t)n * 2), AWL_I32, "cpu");
    int status = awl_dist_allgather(pg, out, awl_from_data(mine, AWL_SHAPE(2), AWL_I32, "cpu"));
    if (status == AWL_OK) status = awl_to_host(out, all, (size_t)n * 2 * sizeof *all);
    awl_scope_end();
    int split = ++pg->splits;
    if (status < 0) {
        free(all);
        return NULL;
    }
    /* the members: my color, ordered by key, then rank */
    int *members = calloc((size_t)n, sizeof *members), count = 0;
    for (int r = 0; r < n; r++)
        if (all[2 * r] == color) members[count++] = r;
    for (int i = 1; i < count; i++)
        for (int j = i; j > 0; j--) {
            int a = members[j - 1], b = members[j];
            if (all[2 * a + 1] < all[2 * b + 1] || (all[2 * a + 1] == all[2 * b + 1] && a < b)) break;
            members[j - 1] = b;
            members[j] = a;
        }
    awl_process_group *sub = new_group();
    sub->world = count;
    for (int i = 0; i < count; i++) {
        if (members[i] == pg->rank) sub->rank = i;
        members[i] = pg->global_rank[members[i]];
    }
    free(all);
    size_group(sub, members);
    free(members);
    sub->local_rank = pg->local_rank;
    snprintf(sub->master_addr, sizeof sub->master_addr, "%s", pg->master_addr);
    sub->master_port = pg->master_port;
    snprintf(sub->token, sizeof sub->token, "%s", pg->token);
    sub->timeout = pg->timeout;
    sub->peer_timeout = pg->peer_timeout;
    sub->init_timeout = pg->init_timeout;
    sub->segment_bytes = pg->segment_bytes;
    snprintf(sub->device, sizeof sub->device, "%s", pg->device);
    /* the id: a digest of where the group comes from, the same on every
     * member (never 0, the job's group's) */
    char origin[128];
    snprintf(origin, sizeof origin, "%s/split%d/color%d", pg->key_prefix, split, color);
    sub->group_id = awl_net_crc32(origin, strlen(origin)) | 1u;
    snprintf(sub->key_prefix, sizeof sub->key_prefix, "awl/g%08x", sub->group_id);
    sub->store = pg->store;
    sub->transport = pg->transport;
    sub->parent = pg;
    sub->split_color = color;
    sub->split_key = key;
    /* a singleton needs no transport, except that MPI_Comm_split is
     * collective over the whole parent, and that a device transport runs
     * even alone */
    bool alone = sub->world == 1 && sub->transport->store && !sub->transport->device_memory;
    if (!alone && start_group(sub) < 0) {
        awl_dist_destroy(sub);
        return NULL;
    }
    return sub;
}

void awl_dist_destroy(awl_process_group *pg)
{
    if (!pg) return;
    if (pg->thread_started) {
        register_group(pg, false);
        pthread_mutex_lock(&pg->lock);
        pg->stop = true;
        pthread_mutex_unlock(&pg->lock);
        ssize_t ignored = write(pg->wake[1], "s", 1);
        (void)ignored;
        pthread_join(pg->thread, NULL);
    }
    if (pg->connected) pg->transport->shutdown(pg, !pg->failed);
    if (pg->owns_store) awl_store_close(pg->store);
    awl_store_server_stop(pg->server);
    for (int i = 0; i < 2; i++)
        if (pg->wake[i] >= 0) close(pg->wake[i]);
    pthread_mutex_destroy(&pg->lock);
    pthread_cond_destroy(&pg->cond);
    free(pg->send_seq);
    free(pg->recv_seq);
    free(pg->global_rank);
    free(pg);
}

int awl_dist_rank(const awl_process_group *pg) { return pg ? pg->rank : -1; }
int awl_dist_world_size(const awl_process_group *pg) { return pg ? pg->world : -1; }
int awl_dist_local_rank(const awl_process_group *pg) { return pg ? pg->local_rank : -1; }
const char *awl_dist_backend(const awl_process_group *pg)
{
    return pg && pg->thread_started ? pg->transport->name : "none";
}
awl_store *awl_dist_store(awl_process_group *pg) { return pg ? pg->store : NULL; }

/* ---- starting work ---------------------------------------------------------------------------- */

/* Whether t lives where the transport's buffers do: host memory (the CPU,
 * or any backend whose memory is the host's) or the group's GPU. */
static bool in_transport_memory(const awl_process_group *pg, const awl_tensor *t)
{
    if (!pg->transport->device_memory) return awl_tensor_is_host(t);
    char device[32];
    return strcmp(awl_tensor_device_name(t, device, sizeof device), pg->device) == 0;
}

/* t's first element (host or device memory). */
static void *data_ptr(const awl_tensor *t)
{
    return (char *)t->storage->data + t->offset * (int64_t)awl_dtype_size(t->dtype);
}

/* Binds one of the work's buffers to t: t's own memory when it is
 * contiguous on the transport's device, or else a contiguous copy there
 * (copied from t when `read`). The work holds a reference to both. */
static int stage(awl_process_group *pg, awl_tensor *t, bool read, awl_tensor **user,
                 awl_tensor **staged, void **ptr)
{
    *user = awl_retain(t);
    if (in_transport_memory(pg, t) && awl_is_contiguous(t)) {
        *ptr = data_ptr(t);
        return AWL_OK;
    }
    awl_scope_begin();
    awl_tensor *s = awl_empty(t->ndim, t->shape, t->dtype, pg->device);
    if (s && read && awl_tensor_copy_(s, t) < 0) s = NULL;
    if (s) *staged = awl_retain(s);
    awl_scope_end();
    if (!s) return AWL_ERR_OOM;
    *ptr = data_ptr(s);
    return AWL_OK;
}

static void release_tensors(awl_work *w)
{
    awl_release(w->stage_in);
    awl_release(w->stage_out);
    awl_release(w->user_in);
    awl_release(w->user_out);
}

/* t's dtype is one the transport moves, and t is on the host or on the
 * transport's own device (a GPU transport does not take another GPU's
 * tensors, which belong to another rank's group). */
static int check_tensor(const awl_process_group *pg, const char *op, const awl_tensor *t)
{
    const dist_transport *tx = pg->transport;
    if (!(tx->dtypes & DIST_DTYPE(t->dtype))) {
        char names[64] = "";
        for (int d = 0; d < AWL_DTYPE_COUNT; d++)
            if (tx->dtypes & DIST_DTYPE(d))
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s",
                         names[0] ? ", " : "", awl_dtype_name((awl_dtype)d));
        return awl_error(AWL_ERR_INVALID, "%s: %s tensors are not supported over %s (%s)", op,
                         awl_dtype_name(t->dtype), tx->name, names);
    }
    char device[32];
    awl_tensor_device_name(t, device, sizeof device);
    if (tx->device_memory && !awl_tensor_is_host(t) && strcmp(device, pg->device) != 0)
        return awl_error(AWL_ERR_INVALID,
                         "%s: the tensor is on %s, but rank %d's %s group runs on %s", op, device,
                         dist_me(pg), tx->name, pg->device);
    return AWL_OK;
}

static int check_peer(const char *op, const awl_process_group *pg, int peer, const char *what)
{
    if (peer < 0 || peer >= pg->world)
        return awl_error(AWL_ERR_INVALID, "%s: %s %d is not a rank of this group (0..%d)", op,
                         what, peer, pg->world - 1);
    return AWL_OK;
}

/* Runs a world-size-1 operation at once: the result is the input. */
static void run_alone(awl_work *w)
{
    size_t bytes = (size_t)w->out_count * awl_dtype_size(w->fp.dtype);
    if (w->out != w->in && bytes) memcpy(w->out, w->in, bytes);
    w->done = true;
}

/* Queues w (the arguments are checked and staged). */
static awl_work *submit(awl_process_group *pg, awl_work *w)
{
    if (!pg->thread_started) {
        run_alone(w);
        return w;
    }
    pthread_mutex_lock(&pg->lock);
    if (pg->tail)
        pg->tail->next = w;
    else
        pg->head = w;
    pg->tail = w;
    pthread_mutex_unlock(&pg->lock);
    ssize_t ignored = write(pg->wake[1], "w", 1);
    (void)ignored;
    return w;
}

/* Builds a work item: in (read) and out (written), which may be the same
 * tensor; bounds (malloc'd, or NULL) becomes the work's. Returns NULL
 * after an error. */
static awl_work *make_work(awl_process_group *pg, const char *op, dist_fingerprint fp,
                           int64_t *bounds, awl_tensor *in, awl_tensor *out)
{
    if (!pg || !in || !out || check_tensor(pg, op, in) < 0 || check_tensor(pg, op, out) < 0) {
        if (!pg) awl_error(AWL_ERR_INVALID, "%s: no process group", op);
        free(bounds); /* a NULL tensor: an earlier op failed, and its message stands */
        return NULL;
    }
    awl_work *w = calloc(1, sizeof *w);
    w->pg = pg;
    w->fp = fp;
    w->bounds = bounds;
    w->in_count = awl_numel(in);
    w->out_count = awl_numel(out);
    int status = stage(pg, in, true, &w->user_in, &w->stage_in, &w->in);
    if (status == AWL_OK) {
        if (out == in) {
            w->out = w->in;
        } else {
            status = stage(pg, out, false, &w->user_out, &w->stage_out, &w->out);
        }
    }
    if (status == AWL_OK && pg->thread_started && pg->transport->enqueue)
        status = pg->transport->enqueue(pg, w);
    if (status < 0) {
        release_tensors(w);
        free(w->bounds);
        free(w);
        return NULL;
    }
    return submit(pg, w);
}

static dist_fingerprint collective(awl_process_group *pg, dist_op op, awl_dtype dtype,
                                   awl_dist_reduce reduce, int32_t root, int64_t count)
{
    dist_fingerprint fp = {(uint8_t)op, (uint8_t)dtype, (uint8_t)reduce, root, ++pg->next_seq,
                           (uint64_t)count};
    return fp;
}

static int check_reduce(const char *op, const awl_tensor *t, awl_dist_reduce r)
{
    if (r != AWL_DIST_SUM && r != AWL_DIST_AVG && r != AWL_DIST_MAX)
        return awl_error(AWL_ERR_INVALID, "%s: unknown reduction %d", op, (int)r);
    if (r == AWL_DIST_AVG && t->dtype == AWL_I32)
        return awl_error(AWL_ERR_INVALID, "%s: AWL_DIST_AVG of int32 is not defined (use SUM)",
                         op);
    return AWL_OK;
}

awl_work *awl_dist_allreduce_async(awl_process_group *pg, awl_tensor *t, awl_dist_reduce op)
{
    const char *name = "awl_dist_allreduce";
    if (!pg || !t) return make_work(pg, name, (dist_fingerprint){0}, NULL, t, t);
    if (check_reduce(name, t, op) < 0) return NULL;
    return make_work(pg, name, collective(pg, DIST_OP_ALLREDUCE, t->dtype, op, -1, awl_numel(t)),
                     NULL, t, t);
}

awl_work *awl_dist_broadcast_async(awl_process_group *pg, awl_tensor *t, int root)
{
    const char *name = "awl_dist_broadcast";
    if (!pg || !t) return make_work(pg, name, (dist_fingerprint){0}, NULL, t, t);
    if (check_peer(name, pg, root, "root") < 0) return NULL;
    return make_work(pg, name, collective(pg, DIST_OP_BROADCAST, t->dtype, 0, root, awl_numel(t)),
                     NULL, t, t);
}

/* allgather and reduce_scatter, with equal shares (counts NULL) or the
 * given ones: checks the shapes, and the work gets the shares' bounds. */
static awl_work *sharded(awl_process_group *pg, const char *name, dist_op op, awl_tensor *out,
                         awl_tensor *in, const int64_t *counts, awl_dist_reduce reduce)
{
    if (!pg || !out || !in) return make_work(pg, name, (dist_fingerprint){0}, NULL, in, out);
    int n = pg->world;
    bool gather = op == DIST_OP_ALLGATHER;
    awl_tensor *whole = gather ? out : in, *part = gather ? in : out;
    int64_t *bounds = calloc((size_t)n + 1, sizeof *bounds);
    uint64_t digest = 1469598103934665603ULL;
    for (int c = 0; c < n; c++) {
        int64_t k = counts ? counts[c] : awl_numel(part);
        if (k < 0) {
            awl_error(AWL_ERR_INVALID, "%s: counts[%d] is %lld", name, c, (long long)k);
            free(bounds);
            return NULL;
        }
        bounds[c + 1] = bounds[c] + k;
        digest = (digest ^ (uint64_t)k) * 1099511628211ULL;
    }
    char a[64], b[64];
    if (in->dtype != out->dtype || awl_numel(whole) != bounds[n] ||
        awl_numel(part) != bounds[pg->rank + 1] - bounds[pg->rank]) {
        awl_error(AWL_ERR_INVALID,
                  "%s: %s %s %s must have %lld elements (%s) and %s %s %s %lld (this rank's share)",
                  name, gather ? "out" : "in", awl_shape_str(whole, a, sizeof a),
                  awl_dtype_name(whole->dtype), (long long)bounds[n],
                  counts ? "the sum of counts" : "world size times the share",
                  gather ? "in" : "out", awl_shape_str(part, b, sizeof b),
                  awl_dtype_name(part->dtype), (long long)(bounds[pg->rank + 1] - bounds[pg->rank]));
        free(bounds);
        return NULL;
    }
    if (!gather && check_reduce(name, in, reduce) < 0) {
        free(bounds);
        return NULL;
    }
    /* equal shares keep the plain fingerprint; given ones add their digest */
    dist_fingerprint fp = collective(pg, op, in->dtype, gather ? 0 : reduce,
                                     counts ? (int32_t)(digest & 0x7fffffff) : -1,
                                     counts ? bounds[n] : awl_numel(part));
    return make_work(pg, name, fp, bounds, in, out);
}

awl_work *awl_dist_allgather_async(awl_process_group *pg, awl_tensor *out, awl_tensor *in)
{
    return sharded(pg, "awl_dist_allgather", DIST_OP_ALLGATHER, out, in, NULL, 0);
}

awl_work *awl_dist_allgather_v_async(awl_process_group *pg, awl_tensor *out, awl_tensor *in,
                                     const int64_t *counts)
{
    return sharded(pg, "awl_dist_allgather_v", DIST_OP_ALLGATHER, out, in, counts, 0);
}

awl_work *awl_dist_reduce_scatter_async(awl_process_group *pg, awl_tensor *out, awl_tensor *in,
                                        awl_dist_reduce op)
{
    return sharded(pg, "awl_dist_reduce_scatter", DIST_OP_REDUCE_SCATTER, out, in, NULL, op);
}

awl_work *awl_dist_reduce_scatter_v_async(awl_process_group *pg, awl_tensor *out, awl_tensor *in,
                                          const int64_t *counts, awl_dist_reduce op)
{
    return sharded(pg, "awl_dist_reduce_scatter_v", DIST_OP_REDUCE_SCATTER, out, in, counts, op);
}

static awl_work *point_to_point(awl_process_group *pg, awl_tensor *t, int peer, bool sending)
{
    const char *name = sending ? "awl_dist_send" : "awl_dist_recv";
    if (!pg || !t) return make_work(pg, name, (dist_fingerprint){0}, NULL, t, t);
    if (check_peer(name, pg, peer, sending ? "destination" : "source") < 0) return NULL;
    if (peer == pg->rank) {
        awl_error(AWL_ERR_INVALID, "%s: rank %d cannot %s itself", name, peer,
                  sending ? "send to" : "receive from");
        return NULL;
    }
    uint64_t seq = sending ? ++pg->send_seq[peer] : ++pg->recv_seq[peer];
    dist_fingerprint fp = {(uint8_t)(sending ? DIST_OP_SEND : DIST_OP_RECV), (uint8_t)t->dtype, 0,
                           peer, seq, (uint64_t)awl_numel(t)};
    return make_work(pg, name, fp, NULL, t, t);
}

awl_work *awl_dist_send_async(awl_process_group *pg, awl_tensor *t, int dst)
{
    return point_to_point(pg, t, dst, true);
}

awl_work *awl_dist_recv_async(awl_process_group *pg, awl_tensor *t, int src)
{
    return point_to_point(pg, t, src, false);
}

/* ---- waiting ------------------------------------------------------------------------------------ */

int awl_work_test(awl_work *w)
{
    if (!w) return AWL_ERR_INVALID;
    if (!w->pg->thread_started) return 1;
    pthread_mutex_lock(&w->pg->lock);
    bool done = w->done;
    pthread_mutex_unlock(&w->pg->lock);
    return done ? 1 : 0;
}

int awl_work_wait(awl_work *w) { return awl_dist_work_wait(w, NULL); }

int awl_dist_work_wait(awl_work *w, double *busy_s)
{
    if (!w) return AWL_ERR_INVALID;
    awl_process_group *pg = w->pg;
    if (pg->thread_started) {
        pthread_mutex_lock(&pg->lock);
        while (!w->done) pthread_cond_wait(&pg->cond, &pg->lock);
        pthread_mutex_unlock(&pg->lock);
    }
    int status = w->status;
    if (busy_s) *busy_s = w->end - w->start;
    if (status == AWL_OK && w->stage_out)
        status = awl_tensor_copy_(w->user_out, w->stage_out);
    else if (status == AWL_OK && w->stage_in && w->out == w->in && w->fp.op != DIST_OP_SEND)
        status = awl_tensor_copy_(w->user_in, w->stage_in);
    if (w->status < 0) awl_error(AWL_ERR_DIST, "%s", w->message);
    if (pg->transport->release) pg->transport->release(pg, w);
    release_tensors(w);
    free(w->bounds);
    free(w);
    return status;
}

/* ---- blocking forms ------------------------------------------------------------------------------ */

static int wait_or_fail(awl_work *w) { return w ? awl_work_wait(w) : AWL_ERR_INVALID; }

int awl_dist_allreduce(awl_process_group *pg, awl_tensor *t, awl_dist_reduce op)
{
    return wait_or_fail(awl_dist_allreduce_async(pg, t, op));
}

int awl_dist_broadcast(awl_process_group *pg, awl_tensor *t, int root)
{
    return wait_or_fail(awl_dist_broadcast_async(pg, t, root));
}

int awl_dist_allgather(awl_process_group *pg, awl_tensor *out, awl_tensor *in)
{
    return wait_or_fail(awl_dist_allgather_async(pg, out, in));
}

int awl_dist_reduce_scatter(awl_process_group *pg, awl_tensor *out, awl_tensor *in,
                            awl_dist_reduce op)
{
    return wait_or_fail(awl_dist_reduce_scatter_async(pg, out, in, op));
}

int awl_dist_allgather_v(awl_process_group *pg, awl_tensor *out, awl_tensor *in,
                         const int64_t *counts)
{
    return wait_or_fail(awl_dist_allgather_v_async(pg, out, in, counts));
}

int awl_dist_reduce_scatter_v(awl_process_group *pg, awl_tensor *out, awl_tensor *in,
                              const int64_t *counts, awl_dist_reduce op)
{
    return wait_or_fail(awl_dist_reduce_scatter_v_async(pg, out, in, counts, op));
}

int awl_dist_send(awl_process_group *pg, awl_tensor *t, int dst)
{
    return wait_or_fail(awl_dist_send_async(pg, t, dst));
}

int awl_dist_recv(awl_process_group *pg, awl_tensor *t, int src)
{
    return wait_or_fail(awl_dist_recv_async(pg, t, src));
}

int awl_dist_barrier(awl_process_group *pg)
{
    if (!pg) return awl_error(AWL_ERR_INVALID, "awl_dist_barrier: no process group");
    int32_t one = 1;
    awl_scope_begin();
    awl_tensor *t = awl_from_data(&one, AWL_SHAPE(1), AWL_I32, "cpu");
    awl_work *w = t ? make_work(pg, "awl_dist_barrier",
                                collective(pg, DIST_OP_BARRIER, AWL_I32, AWL_DIST_SUM, -1, 1), NULL,
                                t, t)
                    : NULL;
    awl_scope_end();
    return wait_or_fail(w);
}
