/*
 * dist/ring.c - the TCP transport's data path: every operation as a
 * schedule of segments, run by one non-blocking event loop.
 *
 * Allreduce is the bandwidth-optimal ring: the buffer is cut into one
 * chunk per rank, and in 2(n-1) steps each rank sends one chunk to its
 * right neighbour and receives one from its left. In the first n-1 steps
 * (reduce-scatter) the received chunk is added to the rank's own; after
 * them rank r holds the full sum of chunk r+1. In the last n-1 steps
 * (allgather) the finished chunks travel once more around the ring,
 * copied straight into place. Here for 3 ranks (a, b, c: their chunks):
 *
 *     step        rank 0 sends / gets      rank 1                  rank 2
 *     0 (reduce)  a0 -> 1   gets c2        b1 -> 2   gets a0       c2 -> 0   gets b1
 *     1 (reduce)  a2+c2 ->  gets b1+c1 ... each rank then owns one summed chunk
 *     2, 3 (gather) the summed chunks go round, each copied into place
 *
 * Each rank sends and receives 2(n-1)/n of the buffer, whatever n is.
 *
 * Pipelining: every chunk is cut into segments (segment_bytes, 1 MiB by
 * default), and a segment is a unit of its own: it may leave as soon as
 * the segment it depends on (the same part of the chunk, received in the
 * step before) has arrived and been added. So the socket carries segment
 * k+1 while segment k is being reduced, and many segments are in flight
 * around the ring at once:
 *
 *     left --[seg k+1 arriving]--> [rank: reduce seg k] --[seg k-1 leaving]--> right
 *
 * The loop (run_schedule) keeps one send and one receive going, each as
 * far as the socket allows without blocking, and polls only when neither
 * can move; each poll also watches the control connections (tcp.c), so a
 * death, an abort or a disagreement ends the loop at once.
 *
 * Determinism: chunk c is always summed in the same order (starting at
 * rank c+1 and going round), and the finished chunk is copied, not
 * recomputed, onto every rank: the same bits everywhere, every run.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "dist/net.h"
#include "dist/tcp_internal.h"

/* One segment moving over one connection. */
typedef struct unit {
    int peer;
    char *ptr;         /* send: its bytes; receive: where they end up     */
    const char *local; /* receive: reduce with this (NULL: plain copy)    */
    int64_t offset;    /* its first element in the operation's buffer     */
    int64_t count;     /* elements                                        */
    int dep;           /* send: the receive unit it waits for, -1 for none */
    bool scale;        /* receive: divide by the world size afterwards    */
} unit;

typedef struct unit_list {
    unit *items;
    int n, cap;
} unit_list;

typedef struct schedule {
    unit_list sends, recvs;
} schedule;

static int mod(int a, int n) { return ((a % n) + n) % n; }

/* Room for one more unit at the end of l. */
static unit *push(unit_list *l)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->items = realloc(l->items, (size_t)l->cap * sizeof *l->items);
    }
    return &l->items[l->n++];
}

/* Adds the segments of elements [first, first + len) of a buffer whose
 * element `first` is at ptr (and whose partner operand is at local).
 * Returns the index of the first unit added. */
static int add_segments(unit_list *l, int peer, char *ptr, const char *local, int64_t first,
                        int64_t len, int64_t seg, size_t esize, int dep_first, bool scale)
{
    int start = l->n;
    for (int64_t at = 0, k = 0; at < len; at += seg, k++) {
        int64_t n = len - at < seg ? len - at : seg;
        *push(l) = (unit){peer,
                                  ptr + at * (int64_t)esize,
                                  local ? local + at * (int64_t)esize : NULL,
                                  first + at,
                                  n,
                                  dep_first < 0 ? -1 : dep_first + (int)k,
                                  scale};
    }
    return start;
}

/* The ring's chunk c of `count` elements over n ranks: [begin, end). */
static int64_t chunk_begin(int64_t count, int n, int c) { return count * c / n; }
static int64_t chunk_len(int64_t count, int n, int c)
{
    return chunk_begin(count, n, c + 1) - chunk_begin(count, n, c);
}

/* In-place allreduce (and barrier) of buf. */
static void plan_allreduce(schedule *s, int r, int n, char *buf, int64_t count, size_t es,
                           int64_t seg, bool avg)
{
    int right = mod(r + 1, n), left = mod(r - 1, n), steps = 2 * (n - 1);
    int recv_first[2 * 4096];
    for (int t = 0; t < steps; t++) {
        bool reducing = t < n - 1;
        int c = reducing ? mod(r - t - 1, n) : mod(r - (t - (n - 1)), n);
        int64_t b = chunk_begin(count, n, c);
        recv_first[t] = add_segments(&s->recvs, left, buf + b * (int64_t)es,
                                     reducing ? buf + b * (int64_t)es : NULL, b,
                                     chunk_len(count, n, c), seg, es, -1, avg && t == n - 2);
    }
    for (int t = 0; t < steps; t++) {
        int c = t < n - 1 ? mod(r - t, n) : mod(r + 1 - (t - (n - 1)), n);
        int64_t b = chunk_begin(count, n, c);
        add_segments(&s->sends, right, buf + b * (int64_t)es, NULL, b, chunk_len(count, n, c), seg,
                     es, t > 0 ? recv_first[t - 1] : -1, false);
    }
}

/* Reduce-scatter: chunk c of in is elements [bounds[c], bounds[c+1]), and
 * out gets the reduced chunk r. Partial sums of the chunks passed on
 * (n > 2) live in work, at the chunks' own offsets. */
static void plan_reduce_scatter(schedule *s, int r, int n, const char *in, char *out, char *work,
                                const int64_t *bounds, size_t es, int64_t seg, bool avg)
{
    int right = mod(r + 1, n), left = mod(r - 1, n);
    int64_t e = (int64_t)es;
    int recv_first[4096];
    for (int t = 0; t < n - 1; t++) {
        int c = mod(r - t - 2, n);
        char *dst = t == n - 2 ? out : work + bounds[c] * e;
        recv_first[t] = add_segments(&s->recvs, left, dst, in + bounds[c] * e, bounds[c],
                                     bounds[c + 1] - bounds[c], seg, es, -1, avg && t == n - 2);
    }
    for (int t = 0; t < n - 1; t++) {
        int c = mod(r - t - 1, n);
        char *src = t == 0 ? (char *)in + bounds[c] * e : work + bounds[c] * e;
        add_segments(&s->sends, right, src, NULL, bounds[c], bounds[c + 1] - bounds[c], seg, es,
                     t > 0 ? recv_first[t - 1] : -1, false);
    }
}

/* Allgather into out, whose chunk c is [bounds[c], bounds[c+1]); chunk r
 * is already in place. */
static void plan_allgather(schedule *s, int r, int n, char *out, const int64_t *bounds, size_t es,
                           int64_t seg)
{
    int right = mod(r + 1, n), left = mod(r - 1, n);
    int64_t e = (int64_t)es;
    int recv_first[4096];
    for (int t = 0; t < n - 1; t++) {
        int c = mod(r - t - 1, n);
        recv_first[t] = add_segments(&s->recvs, left, out + bounds[c] * e, NULL, bounds[c],
                                     bounds[c + 1] - bounds[c], seg, es, -1, false);
    }
    for (int t = 0; t < n - 1; t++) {
        int c = mod(r - t, n);
        add_segments(&s->sends, right, out + bounds[c] * e, NULL, bounds[c],
                     bounds[c + 1] - bounds[c], seg, es, t > 0 ? recv_first[t - 1] : -1, false);
    }
}

/* Broadcast down the chain root -> root+1 -> ... -> root-1, each rank
 * passing a segment on as soon as it has arrived. */
static void plan_broadcast(schedule *s, int r, int n, char *buf, int64_t count, size_t es,
                           int64_t seg, int root)
{
    int position = mod(r - root, n);
    if (position > 0) add_segments(&s->recvs, mod(r - 1, n), buf, NULL, 0, count, seg, es, -1, false);
    if (position < n - 1)
        add_segments(&s->sends, mod(r + 1, n), buf, NULL, 0, count, seg, es, position > 0 ? 0 : -1,
                     false);
}

/* The fingerprints alone, for a transport that moves the data another way
 * (nccl.c): a header-only frame to and from every peer for a collective,
 * to the receiver for a send, from the sender for a recv. */
static void plan_fingerprints(schedule *s, int r, int n, const dist_fingerprint *fp)
{
    for (int peer = 0; peer < n; peer++) {
        bool involved = fp->op == DIST_OP_SEND || fp->op == DIST_OP_RECV ? peer == fp->root
                                                                          : peer != r;
        if (!involved) continue;
        if (fp->op != DIST_OP_RECV) *push(&s->sends) = (unit){peer, NULL, NULL, 0, 0, -1, false};
        if (fp->op != DIST_OP_SEND) *push(&s->recvs) = (unit){peer, NULL, NULL, 0, 0, -1, false};
    }
}

/* ---- frames ------------------------------------------------------------------------------------- */

static const uint8_t frame_magic[4] = {'A', 'W', 'L', 'F'};

static void frame_encode(uint8_t *f, const dist_fingerprint *fp, int from, int64_t offset,
                         uint32_t nbytes)
{
    memset(f, 0, FRAME_BYTES);
    memcpy(f, frame_magic, 4);
    f[4] = fp->op;
    f[5] = fp->dtype;
    f[6] = fp->reduce;
    net_put32(f + 8, (uint32_t)fp->root);
    net_put32(f + 12, (uint32_t)from);
    net_put64(f + 16, fp->seq);
    net_put64(f + 24, fp->count);
    net_put64(f + 32, (uint64_t)offset);
    net_put32(f + 40, nbytes);
    net_put32(f + 44, awl_net_crc32(f, 44));
}

/* Compares a received header with the frame this rank expects next; on a
 * difference writes a message naming both operations. */
static int frame_check(awl_process_group *pg, const uint8_t *f, const uint8_t *want,
                       const tcp_peer *p, const dist_fingerprint *mine, char *err, size_t size)
{
    char who[96], theirs[160], ours[160];
    awl_tcp_peer_name(p, who, sizeof who);
    if (memcmp(f, frame_magic, 4) != 0 || net_get32(f + 44) != awl_net_crc32(f, 44)) {
        pg->blamed = p->global_rank;
        snprintf(err, size, "%s sent a damaged data frame header (rank %d was in %s)", who,
                 dist_me(pg), awl_dist_describe(mine, ours, sizeof ours));
        return -1;
    }
    if (memcmp(f, want, 32) == 0 && memcmp(f + 32, want + 32, 12) == 0) return 0;
    dist_fingerprint got = {f[4], f[5], f[6], (int32_t)net_get32(f + 8), net_get64(f + 16),
                            net_get64(f + 24)};
    awl_dist_describe(&got, theirs, sizeof theirs);
    awl_dist_describe(mine, ours, sizeof ours);
    if (memcmp(f, want, 32) != 0)
        snprintf(err, size, "ranks disagree: rank %d is in %s, but %s sent data of %s", dist_me(pg),
                 ours, who, theirs);
    else
        snprintf(err, size,
                 "%s sent the segment at element %llu (%u bytes) of %s where rank %d expected "
                 "element %llu (%u bytes)",
                 who, (unsigned long long)net_get64(f + 32), net_get32(f + 40), theirs, dist_me(pg),
                 (unsigned long long)net_get64(want + 32), net_get32(want + 40));
    return -1;
}

/* ---- the loop -------------------------------------------------------------------------------------- */

typedef struct progress {
    int next;       /* the unit under way */
    size_t done;    /* its bytes moved so far, header included */
    uint8_t head[FRAME_BYTES];
} progress;

static int peer_failed(awl_process_group *pg, tcp_peer *p, ssize_t k, int err_no, char *err,
                       size_t size)
{
    return awl_tcp_data_failed(pg, p, k == 0 ? "end of stream" : strerror(err_no), err, size);
}

static int run_schedule(awl_process_group *pg, const awl_work *w, const schedule *s,
                        const dist_fingerprint *send_fp, const dist_fingerprint *recv_fp, char *err,
                        size_t size)
{
    tcp_state *st = pg->tx;
    const size_t es = awl_dtype_size(w->fp.dtype);
    const unit *sends = s->sends.items, *recvs = s->recvs.items;
    const int ns = s->sends.n, nr = s->recvs.n;
    progress out = {0}, in = {0};
    uint8_t want[FRAME_BYTES];
    double start = awl_net_now(), deadline = start + pg->timeout;
    double next_service = start + st->heartbeat_interval;
    int64_t sent = 0, received = 0;
    struct pollfd fds[pg->world + 3];
    int status = 0;
    while (status == 0 && (out.next < ns || in.next < nr)) {
        bool moved = false;
        while (out.next < ns && sends[out.next].dep < in.next) {
            const unit *u = &sends[out.next];
            tcp_peer *p = &st->peers[u->peer];
            size_t nbytes = (size_t)u->count * es;
            if (out.done == 0) frame_encode(out.head, send_fp, pg->rank, u->offset, (uint32_t)nbytes);
            struct iovec iov[2];
            int niov = 0;
            if (out.done < FRAME_BYTES) {
                iov[niov++] = (struct iovec){out.head + out.done, FRAME_BYTES - out.done};
                iov[niov++] = (struct iovec){u->ptr, nbytes};
            } else {
                iov[niov++] = (struct iovec){u->ptr + (out.done - FRAME_BYTES),
                                             nbytes - (out.done - FRAME_BYTES)};
            }
            struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)niov};
            ssize_t k = sendmsg(p->data, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (k < 0 && (errno == EAGAIN || errno == EINTR)) break;
            if (k <= 0) {
                status = peer_failed(pg, p, k, errno, err, size);
                break;
            }
            moved = true;
            sent += k;
            out.done += (size_t)k;
            if (out.done == FRAME_BYTES + nbytes) {
                out.next++;
                out.done = 0;
            }
        }
        while (status == 0 && in.next < nr) {
            const unit *u = &recvs[in.next];
            tcp_peer *p = &st->peers[u->peer];
            size_t nbytes = (size_t)u->count * es;
            ssize_t k;
            if (in.done < FRAME_BYTES) {
                k = recv(p->data, in.head + in.done, FRAME_BYTES - in.done, MSG_DONTWAIT);
            } else {
                char *dst = u->local ? st->scratch : u->ptr;
                k = recv(p->data, dst + (in.done - FRAME_BYTES), nbytes - (in.done - FRAME_BYTES),
                         MSG_DONTWAIT);
            }
            if (k < 0 && (errno == EAGAIN || errno == EINTR)) break;
            if (k <= 0) {
                status = peer_failed(pg, p, k, errno, err, size);
                break;
            }
            moved = true;
            received += k;
            in.done += (size_t)k;
            if (in.done == FRAME_BYTES) {
                frame_encode(want, recv_fp, u->peer, u->offset, (uint32_t)nbytes);
                if (frame_check(pg, in.head, want, p, &w->fp, err, size) < 0) status = -1;
            }
            if (status == 0 && in.done == FRAME_BYTES + nbytes) {
                if (u->local)
                    awl_dist_reduce_values(w->fp.dtype, w->fp.reduce, u->ptr, u->local, st->scratch,
                                           u->count);
                if (u->scale) awl_dist_scale(w->fp.dtype, u->ptr, u->count, pg->world);
                in.next++;
                in.done = 0;
            }
        }
        if (status != 0 || (out.next == ns && in.next == nr)) break;
        double now = awl_net_now();
        if (moved && now < next_service) continue;
        /* nothing could move (or it is time): wait for any socket, then
         * look after the control connections */
        int n = awl_tcp_poll_fds(pg, fds);
        int send_fd = -1, recv_fd = -1;
        if (out.next < ns && sends[out.next].dep < in.next) {
            send_fd = st->peers[sends[out.next].peer].data;
            fds[n++] = (struct pollfd){send_fd, POLLOUT, 0};
        }
        if (in.next < nr) {
            recv_fd = st->peers[recvs[in.next].peer].data;
            fds[n++] = (struct pollfd){recv_fd, POLLIN, 0};
        }
        double wait = awl_tcp_next_service(pg);
        if (deadline - now < wait) wait = deadline - now;
        if (!moved) poll(fds, (nfds_t)n, wait > 0 ? (int)(wait * 1e3) + 1 : 0);
        int rc = awl_tcp_service(pg, err, size);
        if (rc == 0) rc = awl_tcp_check_peers(pg, err, size);
        if (rc == TCP_FAULT_RELAYED) status = TCP_FAULT_RELAYED;
        if (rc == TCP_FAULT_HERE) status = -1;
        next_service = awl_net_now() + st->heartbeat_interval;
        if (status == 0 && awl_net_now() > deadline) {
            char who[96], doing[200], what[64];
            bool receiving = in.next < nr;
            const unit *u = receiving ? &recvs[in.next] : &sends[out.next];
            if (u->count)
                snprintf(what, sizeof what, "the segment at element %lld", (long long)u->offset);
            else
                snprintf(what, sizeof what, "the fingerprint of the operation");
            pg->blamed = st->peers[u->peer].global_rank;
            snprintf(err, size, "timed out after %g s (AWL_DIST_TIMEOUT) waiting for %s to %s %s: %s",
                     pg->timeout, awl_tcp_peer_name(&st->peers[u->peer], who, sizeof who),
                     receiving ? "send" : "receive", what,
                     awl_tcp_peer_doing(pg, &st->peers[u->peer], doing, sizeof doing));
            status = -1;
        }
    }
    awl_dist_count_bytes(pg, sent, received);
    return status;
}

/* ---- operations -------------------------------------------------------------------------------------- */

static bool is_collective(const dist_fingerprint *fp)
{
    return fp->op != DIST_OP_SEND && fp->op != DIST_OP_RECV;
}

/* The start of w: a collective is announced in STATE frames (so that the
 * peers see a disagreement, and timeouts say what each rank does); a fault
 * noticed between operations, or a peer that left before this one, fails
 * it at once. 0, or a TCP_FAULT_* code with err. */
static int begin_operation(awl_process_group *pg, const awl_work *w, char *err, size_t size)
{
    tcp_state *st = pg->tx;
    if (is_collective(&w->fp)) {
        st->fp = w->fp;
        st->in_collective = true;
        awl_tcp_broadcast_ctrl(pg, CTRL_STATE, NULL);
    }
    return awl_tcp_check_peers(pg, err, size);
}

void awl_tcp_end_operation(awl_process_group *pg, const awl_work *w)
{
    tcp_state *st = pg->tx;
    if (!is_collective(&w->fp)) return;
    st->in_collective = false;
    st->last_seq = w->fp.seq;
}

int awl_tcp_fail_operation(awl_process_group *pg, awl_work *w, int fault, const char *err)
{
    awl_dist_work_message(pg, w, err);
    if (fault != TCP_FAULT_RELAYED) awl_tcp_broadcast_ctrl(pg, CTRL_ABORT, w->message);
    return -1;
}

/* The fingerprint that the frames this rank receives for fp carry: fp's
 * own, except for a recv, whose frames say what the sender does: send, to
 * this rank. */
static dist_fingerprint incoming(const awl_process_group *pg, const dist_fingerprint *fp)
{
    dist_fingerprint in = *fp;
    if (fp->op == DIST_OP_RECV) {
        in.op = DIST_OP_SEND;
        in.root = pg->rank;
    }
    return in;
}

int awl_tcp_exchange_fingerprints(awl_process_group *pg, awl_work *w)
{
    schedule s = {0};
    dist_fingerprint recv_fp = incoming(pg, &w->fp);
    plan_fingerprints(&s, pg->rank, pg->world, &w->fp);
    char err[1024] = "";
    int status = begin_operation(pg, w, err, sizeof err);
    if (status == 0) status = run_schedule(pg, w, &s, &w->fp, &recv_fp, err, sizeof err);
    free(s.sends.items);
    free(s.recvs.items);
    return status < 0 ? awl_tcp_fail_operation(pg, w, status, err) : 0;
}

static int reserve(void **buf, size_t *have, size_t need)
{
    if (need <= *have) return 0;
    void *grown = realloc(*buf, need);
    if (!grown) return -1;
    *buf = grown;
    *have = need;
    return 0;
}

int awl_tcp_run(awl_process_group *pg, awl_work *w)
{
    tcp_state *st = pg->tx;
    const dist_fingerprint *fp = &w->fp;
    const int r = pg->rank, n = pg->world;
    const size_t es = awl_dtype_size(fp->dtype);
    const int64_t seg = pg->segment_bytes / (int64_t)es > 0 ? pg->segment_bytes / (int64_t)es : 1;
    const bool avg = fp->reduce == AWL_DIST_AVG && fp->op != DIST_OP_BARRIER;
    dist_fingerprint send_fp = *fp, recv_fp = incoming(pg, fp);
    schedule s = {0};
    int status = 0;
    if (reserve(&st->scratch, &st->scratch_size, (size_t)seg * es) < 0) status = -1;
    switch (fp->op) {
    case DIST_OP_ALLREDUCE:
    case DIST_OP_BARRIER:
        plan_allreduce(&s, r, n, w->out, w->out_count, es, seg, avg);
        break;
    case DIST_OP_BROADCAST: plan_broadcast(&s, r, n, w->out, w->out_count, es, seg, fp->root); break;
    case DIST_OP_ALLGATHER:
        if (w->in_count)
            memmove((char *)w->out + (size_t)w->bounds[r] * es, w->in, (size_t)w->in_count * es);
        plan_allgather(&s, r, n, w->out, w->bounds, es, seg);
        break;
    case DIST_OP_REDUCE_SCATTER:
        if (n > 2 && reserve(&st->work, &st->work_size, (size_t)w->in_count * es) < 0) status = -1;
        plan_reduce_scatter(&s, r, n, w->in, w->out, st->work, w->bounds, es, seg, avg);
        break;
    case DIST_OP_SEND: add_segments(&s.sends, fp->root, w->in, NULL, 0, w->in_count, seg, es, -1, false); break;
    case DIST_OP_RECV:
        add_segments(&s.recvs, fp->root, w->out, NULL, 0, w->out_count, seg, es, -1, false);
        break;
    }
    if (status < 0) {
        snprintf(w->message, sizeof w->message, "rank %d: out of memory for the ring's buffers", dist_me(pg));
    } else {
        char err[1024] = "";
        status = begin_operation(pg, w, err, sizeof err);
        if (status == 0)
            status = run_schedule(pg, w, &s, &send_fp, &recv_fp, err, sizeof err);
        if (status < 0) awl_tcp_fail_operation(pg, w, status, err);
        awl_tcp_end_operation(pg, w);
    }
    free(s.sends.items);
    free(s.recvs.items);
    return status < 0 ? -1 : 0;
}
