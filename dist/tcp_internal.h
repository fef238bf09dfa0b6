/*
 * dist/tcp_internal.h - the TCP transport's state, shared by tcp.c (the
 * mesh of connections, the control channel, faults) and ring.c (the data
 * path: pipelined ring schedules).
 *
 * Between every pair of ranks there are two connections:
 *   - control: small frames only (STATE heartbeats that say what the sender
 *     is doing, ABORT with a message, BYE), read at all times, so a peer's
 *     death or silence and a disagreement are seen even while the data
 *     connections are busy or idle;
 *   - data: the frames of collectives and point-to-point messages, read
 *     only while an operation expects them.
 */
#ifndef AWL_DIST_TCP_INTERNAL_H
#define AWL_DIST_TCP_INTERNAL_H

#include <poll.h>

#include "dist/dist_internal.h"

/* ---- control frames ----------------------------------------------------------------------- */

/*     offset  size  field
 *          0     4  magic "AWLC"
 *          4     1  kind (CTRL_STATE, CTRL_ABORT, CTRL_BYE)
 *          5     1  1 while the sender is inside the collective below
 *          6     1  op          \
 *          7     1  dtype        |  the fingerprint of the sender's current
 *          8     8  seq          |  (or last) collective
 *         16     8  count        |
 *         24     4  root         |
 *         28     1  reduce      /
 *         32     4  bytes of text that follow (ABORT: the message, <= 1024)
 *         60     4  CRC-32 of bytes 0..59 */
#define CTRL_BYTES 64
#define CTRL_MAX_TEXT 1024
enum { CTRL_STATE = 1, CTRL_ABORT = 2, CTRL_BYE = 3 };

/* ---- data frames -------------------------------------------------------------------------- */

/*     offset  size  field
 *          0     4  magic "AWLF"
 *          4     1  op, 5 dtype, 6 reduce, 7 zero
 *          8     4  root (or the receiver, for send)
 *         12     4  the sender's rank
 *         16     8  seq
 *         24     8  count: the operation's elements per rank
 *         32     8  offset: the segment's first element in the operation's buffer
 *         40     4  payload bytes that follow
 *         44     4  CRC-32 of bytes 0..43
 * The receiver knows which frame comes next and compares every field
 * before it reads a byte of payload. */
#define FRAME_BYTES 48

typedef struct tcp_peer {
    int rank, global_rank; /* in this group, and in the job's (messages name that one) */
    int ctrl, data;
    char addr[96]; /* where it listens: "10.0.0.2:41234" */
    double last_heard;
    /* what its last STATE said */
    bool announced, in_collective;
    dist_fingerprint fp;
    /* it said BYE after its collective bye_seq; its control connection
     * closed (gone) */
    bool bye, gone;
    uint64_t bye_seq;
    /* a control frame being read */
    uint8_t in[CTRL_BYTES + CTRL_MAX_TEXT];
    size_t in_have;
    /* control bytes waiting to be sent */
    uint8_t out[8192];
    size_t out_len;
} tcp_peer;

typedef struct tcp_state {
    tcp_peer *peers; /* [world]; peers[rank] is this rank, unused */
    int listen_fd;
    double next_heartbeat, heartbeat_interval;
    /* what this rank says in its STATE frames */
    dist_fingerprint fp;
    bool in_collective;
    uint64_t last_seq;
    /* where a reduction's incoming segment lands before it is added */
    void *scratch;
    size_t scratch_size;
    void *work; /* reduce_scatter's intermediate sums */
    size_t work_size;
} tcp_state;

/* Failures of awl_tcp_service and awl_tcp_check_peers: found here (tell the
 * others), or reported by a peer's ABORT (they know). */
enum { TCP_FAULT_HERE = -1, TCP_FAULT_RELAYED = -2 };

/* Queues a control frame for every live peer and sends what it can. */
void awl_tcp_broadcast_ctrl(awl_process_group *pg, int kind, const char *text);
/* Services every control connection, the listener and pg->wake without
 * blocking: reads control frames, sends heartbeats when due, turns
 * strangers away. Returns 0, or a TCP_FAULT_* code with the reason in err
 * (a peer died or aborted: the group is broken). */
int awl_tcp_service(awl_process_group *pg, char *err, size_t size);
/* Fills fds with pg->wake, the listener and the control sockets (the
 * fixed part of every poll) and returns how many; fds has room for
 * world + 1. */
int awl_tcp_poll_fds(awl_process_group *pg, struct pollfd *fds);
/* Seconds until awl_tcp_service has something to do by the clock (a heartbeat). */
double awl_tcp_next_service(const awl_process_group *pg);
/* Checks each peer's silence and, inside a collective, its STATE against
 * this rank's (same seq, another collective; or it left before this
 * collective). Returns 0 or TCP_FAULT_HERE with err. */
int awl_tcp_check_peers(awl_process_group *pg, char *err, size_t size);
/* p's data connection closed or broke (`how`: "end of stream" or the
 * error). A peer that failed by itself sent ABORT on its control
 * connection before it closed the data one, and the kernel delivers the
 * two connections' bytes independently: so p's control connection is read
 * to its end first (a second at most). Returns TCP_FAULT_RELAYED with p's
 * words in err, or TCP_FAULT_HERE with err naming p (closed, or left the
 * group). */
int awl_tcp_data_failed(awl_process_group *pg, tcp_peer *p, const char *how, char *err,
                        size_t size);
/* "rank 2 (10.0.0.3:41234)" */
const char *awl_tcp_peer_name(const tcp_peer *p, char *buf, size_t size);
/* What a peer last said it was doing, for timeout messages. */
const char *awl_tcp_peer_doing(const awl_process_group *pg, const tcp_peer *p, char *buf,
                           size_t size);

/* ring.c: runs a work's schedule on the data connections. */
int awl_tcp_run(awl_process_group *pg, awl_work *w);

/* For a transport that moves the data some other way but keeps this mesh
 * for awl's guarantees (nccl.c), around each operation:
 *   awl_tcp_exchange_fingerprints announces w (a collective's STATE) and
 *     exchanges header-only data frames carrying its fingerprint with the
 *     ranks it involves (every peer for a collective, the one peer of a
 *     send or recv), each checked as awl_tcp_run checks data frames, watching
 *     the control connections and the deadline as awl_tcp_run does: 0, or -1
 *     with w->message written and the peers told;
 *   awl_tcp_fail_operation writes w->message for a fault found later ("<op>
 *     failed on rank r: <err>") and, unless `fault` is TCP_FAULT_RELAYED,
 *     sends it to the peers as ABORT; returns -1;
 *   awl_tcp_end_operation, always last: the rank is between collectives again. */
int awl_tcp_exchange_fingerprints(awl_process_group *pg, awl_work *w);
int awl_tcp_fail_operation(awl_process_group *pg, awl_work *w, int fault, const char *err);
void awl_tcp_end_operation(awl_process_group *pg, const awl_work *w);

#endif
