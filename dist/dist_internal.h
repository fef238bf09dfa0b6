/*
 * dist/dist_internal.h - what the process group (process_group.c) and its
 * transports (tcp.c and ring.c, mpi.c, nccl.c) share: the transport table,
 * the work item, fingerprints and the flight ring.
 *
 * The split mirrors backends/: process_group.c is the part every transport
 * has in common (options from the environment, staging tensors into
 * contiguous buffers in the transport's memory, sequence numbers, the work
 * queue and its communication thread, the flight ring, failure
 * bookkeeping), and a transport is a table of functions that moves the
 * bytes: awl's TCP ring, MPI, NCCL.
 *
 * Threads: the user's thread starts work (awl_dist_*_async) and waits for
 * it; one communication thread per group runs the work in order, calling
 * the transport. Only the user's thread touches awl tensors (reference
 * counts are not atomic); the communication thread sees raw buffers: host
 * memory for TCP and MPI, the group's GPU for NCCL.
 */
#ifndef AWL_DIST_INTERNAL_H
#define AWL_DIST_INTERNAL_H

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "dist/dist.h"
#include "dist/store.h"

typedef enum dist_op {
    DIST_OP_ALLREDUCE = 1,
    DIST_OP_BROADCAST,
    DIST_OP_ALLGATHER,
    DIST_OP_REDUCE_SCATTER,
    DIST_OP_BARRIER,
    DIST_OP_SEND,
    DIST_OP_RECV,
} dist_op;

/* What identifies one operation on every rank. Collectives number 1, 2, ...
 * in the order they are started, and all ranks must agree on every field;
 * point-to-point operations number each (sender, receiver) pair's messages
 * separately. */
typedef struct dist_fingerprint {
    uint8_t op;     /* dist_op */
    uint8_t dtype;  /* awl_dtype */
    uint8_t reduce; /* awl_dist_reduce (reductions), else 0 */
    int32_t root;   /* broadcast's root; send's receiver, recv's sender; the
                       digest of the shares of the _v collectives; else -1 */
    uint64_t seq;
    uint64_t count; /* elements per rank (allgather: of in; reduce_scatter: of out) */
} dist_fingerprint;

/* "allreduce #12 (sum, float32, 1000 elements)" */
const char *awl_dist_describe(const dist_fingerprint *fp, char *buf, size_t size);
bool awl_dist_fingerprint_equal(const dist_fingerprint *a, const dist_fingerprint *b);

/* One started operation. Buffers are contiguous, in the transport's memory
 * (host, or the group's GPU); in/out alias for in-place collectives. */
struct awl_work {
    awl_process_group *pg;
    dist_fingerprint fp;
    void *in, *out;
    int64_t in_count, out_count;
    /* allgather and reduce_scatter: rank c's share is elements
     * [bounds[c], bounds[c+1]) of the whole (world + 1 entries) */
    int64_t *bounds;

    /* the caller's tensors and their host staging copies (NULL when the
     * caller's memory is used directly); user thread only */
    awl_tensor *user_in, *user_out, *stage_in, *stage_out;
    /* what the transport's enqueue captured (NCCL: the event its inputs are
     * ready at), freed by its release */
    void *tx;

    /* set by the communication thread, under pg->lock */
    bool done;
    int status;
    char message[2048];
    double start, end;
    int flight_slot;
    struct awl_work *next;
};

/* The flight ring: the last DIST_FLIGHT_SLOTS operations, printed on every
 * distributed error and on SIGUSR1. */
#define DIST_FLIGHT_SLOTS 32
typedef struct dist_flight {
    dist_fingerprint fp;
    double start, end; /* seconds since the group was made; end 0: running */
    int status;
    int64_t bytes;
} dist_flight;

typedef struct dist_transport {
    const char *name;
    /* Where the buffers it is given live: host memory (false), or the
     * group's GPU, pg->device (NCCL). A tensor elsewhere, or strided, is
     * staged through a contiguous copy there. A device transport runs even
     * a group of one: its buffers are not the host's to memcpy. */
    bool device_memory;
    /* Whether its ranks meet through rank 0's store (awl_dist_init starts
     * it), or their launcher has wired them up already (MPI). */
    bool store;
    /* The dtypes it moves: bit d for awl_dtype d. */
    uint32_t dtypes;
    /* Rendezvous done (pg->store is up, when the group has one): connects
     * this rank to the others. Returns 0, or negative after awl_error (the
     * user's thread), having left nothing behind: shutdown is called only
     * after a connect that succeeded. */
    int (*connect)(awl_process_group *pg);
    /* Runs one operation to its end on the communication thread. On failure
     * writes w->message and returns negative; the transport has already told
     * the peers it could reach. */
    int (*run)(awl_process_group *pg, awl_work *w);
    /* Between operations: waits up to `seconds` for pg->wake, keeping the
     * connections alive (heartbeats, peers that close, strangers at the
     * door). Reports a fault with awl_dist_fail. */
    void (*idle)(awl_process_group *pg, double seconds);
    /* The communication thread has stopped: says goodbye (when clean) and
     * closes everything. */
    void (*shutdown)(awl_process_group *pg, bool clean);
    /* Optional (NULL: nothing to do). On the user's thread, once a work's
     * buffers are bound and just before it is queued: captures in w->tx
     * what the transport needs of that moment (NCCL: an event on the
     * compute stream, after the kernels that produce the inputs). 0, or
     * negative after awl_error (the work is then not queued). */
    int (*enqueue)(awl_process_group *pg, awl_work *w);
    /* Optional. On the user's thread, as awl_work_wait frees the work:
     * frees what enqueue captured. */
    void (*release)(awl_process_group *pg, awl_work *w);
} dist_transport;

#define DIST_DTYPE(d) (1u << (d))

extern const dist_transport awl_dist_tcp_transport;
#ifndef AWL_WITH_MPI
#define AWL_WITH_MPI 0
#endif
#if AWL_WITH_MPI
extern const dist_transport awl_dist_mpi_transport;
#define dist_mpi (&awl_dist_mpi_transport)
#else
#define dist_mpi (&awl_dist_tcp_transport) /* never chosen: awl_dist_launch_info refuses mpi */
#endif
#ifndef AWL_WITH_NCCL
#define AWL_WITH_NCCL 0
#endif
#if AWL_WITH_NCCL
extern const dist_transport awl_dist_nccl_transport;
#define dist_nccl (&awl_dist_nccl_transport)
#else
#define dist_nccl (&awl_dist_tcp_transport) /* never chosen: awl_dist_launch_info refuses nccl */
#endif

struct awl_process_group {
    int rank, world, local_rank;
    /* sub-groups (awl_dist_split): the id every member agrees on (0 for the
     * job's group), the prefix of its keys in the store, each member's rank
     * in the job's group (for messages), and whether it owns the store */
    uint32_t group_id;
    char key_prefix[64];
    int *global_rank;
    bool owns_store;
    int splits; /* how many sub-groups have been made from this one */
    awl_process_group *parent; /* a sub-group's, and its split's color and key */
    int split_color, split_key;
    char master_addr[256];
    int master_port;
    char token[64];
    /* where the transport's buffers live: "cpu", or this rank's GPU
     * ("cuda:<local rank>" unless the options name one) for NCCL */
    char device[32];
    double timeout, peer_timeout, init_timeout;
    int64_t segment_bytes;
    double t0; /* awl_net_now() at creation */

    const dist_transport *transport;
    bool connected; /* the transport's connect succeeded: shutdown is owed */
    void *tx; /* the transport's state (NCCL: that of the TCP mesh it keeps beside) */
    struct nccl_state *nccl; /* NCCL's communicator, stream and events (nccl.c) */
    store_server *server;
    awl_store *store;

    /* user thread only */
    uint64_t next_seq;
    uint64_t *send_seq, *recv_seq; /* per peer */

    /* the queue and the communication thread */
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    awl_work *head, *tail;
    bool stop;
    int wake[2]; /* a pipe: new work, SIGUSR1, shutdown */
    volatile sig_atomic_t dump_requested;

    /* The rank (the job's numbering) that the transport's latest fault is
     * about: a peer that closed, went silent, sent damage or relayed an
     * abort; -1 when it is nobody's but this rank's. Communication thread;
     * awl_dist_fail passes it to the launcher (AWLRUN_REPORT_FD), which so tells
     * the rank that failed first from the ranks that failed because of it. */
    int blamed;

    /* under lock */
    bool failed;
    char failure[2048];
    dist_flight flight[DIST_FLIGHT_SLOTS];
    int flight_next;
    awl_dist_stats stats;
};

/* This rank's number in the job's group: what messages call it. */
static inline int dist_me(const awl_process_group *pg)
{
    return pg->global_rank ? pg->global_rank[pg->rank] : pg->rank;
}

/* Records the group's first failure (later ones are dropped), prints it and
 * the flight ring to stderr, and tells awlrun whom it blames (pg->blamed).
 * Any thread. */
void awl_dist_fail(awl_process_group *pg, const char *message);
bool awl_dist_failed(awl_process_group *pg, char *message, size_t size);
/* w->message = "<operation> failed on rank <r>: <err>". */
void awl_dist_work_message(const awl_process_group *pg, awl_work *w, const char *err);
/* Drains pg->wake and prints the flight ring when SIGUSR1 asked for it. The
 * transport calls it whenever pg->wake was readable. */
void awl_dist_service_wake(awl_process_group *pg);
/* Waits up to `seconds` for pg->wake, then services it: the idle of a
 * transport with nothing of its own to watch. */
void awl_dist_wait_wake(awl_process_group *pg, double seconds);
/* Adds to the byte counters (communication thread). */
void awl_dist_count_bytes(awl_process_group *pg, int64_t sent, int64_t received);
/* Seconds since the group was made. */
double awl_dist_elapsed(const awl_process_group *pg);

/* awl_work_wait that also says how long the communication thread spent on
 * the work (DDP's statistics). */
int awl_dist_work_wait(awl_work *w, double *busy_s);

/* ---- element-wise reductions (reduce.c) ------------------------------------------------- */

/* dst = a (op) b over n elements; dst may be a. AVG adds (the division is
 * awl_dist_scale's). */
void awl_dist_reduce_values(awl_dtype dtype, awl_dist_reduce op, void *dst, const void *a,
                            const void *b, int64_t n);
/* dst /= divisor (float dtypes). */
void awl_dist_scale(awl_dtype dtype, void *dst, int64_t n, int divisor);

#endif
