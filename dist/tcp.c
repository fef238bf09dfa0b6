/*
 * dist/tcp.c - awl's TCP transport: the mesh of connections, the control
 * channel and the fault model (tcp_internal.h says what travels where;
 * ring.c moves the data).
 *
 * Setting up (tcp_connect, on the user's thread): each rank listens on an
 * ephemeral port of the address its store connection came from (an
 * address its peers can reach), publishes "ip:port" in the store, connects
 * a control and a data connection to every lower rank and accepts the same
 * from every higher one. Both sides of a connection send the handshake of
 * net.h and check the other's: magic, version, token, world size, rank.
 * A connection that fails the check is logged and closed, and setup waits
 * on for the real peer.
 *
 * Faults, and how each is seen (docs/distributed.md has the table):
 *   - a peer dies: its control connection closes (the kernel closes a
 *     killed process's sockets), seen at once whether this rank is in a
 *     collective or between them;
 *   - a peer goes silent (hangs, or the network between us fails without a
 *     reset): every rank sends a STATE frame on every control connection at
 *     least every heartbeat interval (a quarter of the peer timeout, at
 *     most 1 s); a peer unheard for peer_timeout is reported;
 *   - ranks disagree: STATE frames carry the fingerprint of the sender's
 *     current collective, and data frames the fingerprint of the operation
 *     they belong to; a rank that sees another fingerprint under its own
 *     sequence number reports both;
 *   - a collective cannot finish: ring.c gives up after the timeout.
 * The rank that finds a fault sends ABORT with its message to every peer
 * it can still reach, so all of them fail with the same words.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/error.h"
#include "dist/net.h"
#include "dist/tcp_internal.h"

#define HELLO_TIMEOUT 5.0 /* seconds a new connection has to say hello */

static tcp_state *state_of(const awl_process_group *pg) { return pg->tx; }

const char *awl_tcp_peer_name(const tcp_peer *p, char *buf, size_t size)
{
    snprintf(buf, size, "rank %d (%s)", p->global_rank, p->addr[0] ? p->addr : "address unknown");
    return buf;
}

const char *awl_tcp_peer_doing(const awl_process_group *pg, const tcp_peer *p, char *buf,
                               size_t size)
{
    (void)pg;
    char what[160];
    if (!p->announced)
        snprintf(buf, size, "it has not reported a collective yet");
    else if (p->in_collective)
        snprintf(buf, size, "it last reported being in %s",
                 awl_dist_describe(&p->fp, what, sizeof what));
    else if (p->fp.seq)
        snprintf(buf, size, "it last reported having finished %s",
                 awl_dist_describe(&p->fp, what, sizeof what));
    else
        snprintf(buf, size, "it has not started a collective");
    return buf;
}

/* ---- control frames ------------------------------------------------------------------------- */

static const uint8_t ctrl_magic[4] = {'A', 'W', 'L', 'C'};

static void ctrl_encode(uint8_t *out, int kind, bool in_collective, const dist_fingerprint *fp,
                        uint32_t text_len)
{
    memset(out, 0, CTRL_BYTES);
    memcpy(out, ctrl_magic, 4);
    out[4] = (uint8_t)kind;
    out[5] = in_collective;
    out[6] = fp->op;
    out[7] = fp->dtype;
    net_put64(out + 8, fp->seq);
    net_put64(out + 16, fp->count);
    net_put32(out + 24, (uint32_t)fp->root);
    out[28] = fp->reduce;
    net_put32(out + 32, text_len);
    net_put32(out + 60, awl_net_crc32(out, 60));
}

/* Sends what is queued for p without blocking. */
static void flush(tcp_peer *p)
{
    while (p->out_len && !p->gone) {
        ssize_t k = send(p->ctrl, p->out, p->out_len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k <= 0) return; /* full (the peer is not reading) or broken: reading will tell */
        memmove(p->out, p->out + k, p->out_len - (size_t)k);
        p->out_len -= (size_t)k;
    }
}

static void queue_ctrl(tcp_peer *p, const uint8_t *frame, const char *text, uint32_t text_len)
{
    if (p->gone || p->out_len + CTRL_BYTES + text_len > sizeof p->out) return;
    memcpy(p->out + p->out_len, frame, CTRL_BYTES);
    if (text_len) memcpy(p->out + p->out_len + CTRL_BYTES, text, text_len);
    p->out_len += CTRL_BYTES + text_len;
    flush(p);
}

void awl_tcp_broadcast_ctrl(awl_process_group *pg, int kind, const char *text)
{
    tcp_state *st = state_of(pg);
    uint32_t len = text ? (uint32_t)strnlen(text, CTRL_MAX_TEXT) : 0;
    dist_fingerprint fp = st->fp;
    if (!st->in_collective) fp.seq = st->last_seq;
    uint8_t frame[CTRL_BYTES];
    ctrl_encode(frame, kind, st->in_collective, &fp, len);
    for (int r = 0; r < pg->world; r++)
        if (r != pg->rank) queue_ctrl(&st->peers[r], frame, text, len);
}

/* Whether p's last STATE names another collective under this rank's
 * current sequence number (it may be in it or have finished it). */
static bool disagrees(const awl_process_group *pg, const tcp_peer *p, char *err, size_t size)
{
    const tcp_state *st = state_of(pg);
    if (!st->in_collective || !p->announced || p->fp.seq != st->fp.seq ||
        awl_dist_fingerprint_equal(&p->fp, &st->fp))
        return false;
    char who[96], mine[160], theirs[160];
    snprintf(err, size, "ranks disagree: rank %d is in %s, but %s %s %s", dist_me(pg),
             awl_dist_describe(&st->fp, mine, sizeof mine), awl_tcp_peer_name(p, who, sizeof who),
             p->in_collective ? "is in" : "has done",
             awl_dist_describe(&p->fp, theirs, sizeof theirs));
    return true;
}

/* Handles one complete control frame from p. */
static int handle_ctrl(awl_process_group *pg, tcp_peer *p, char *err, size_t size)
{
    const uint8_t *f = p->in;
    char who[96];
    dist_fingerprint fp = {f[6], f[7], f[28], (int32_t)net_get32(f + 24), net_get64(f + 8),
                           net_get64(f + 16)};
    switch (f[4]) {
    case CTRL_STATE:
        p->announced = true;
        p->in_collective = f[5] != 0;
        p->fp = fp;
        /* checked as it arrives: a later STATE may overwrite this one */
        return disagrees(pg, p, err, size) ? TCP_FAULT_HERE : 0;
    case CTRL_BYE:
        p->bye = true;
        p->bye_seq = fp.seq;
        return 0;
    case CTRL_ABORT: {
        pg->blamed = p->global_rank;
        uint32_t len = net_get32(f + 32);
        snprintf(err, size, "%.*s (reported by %s)", (int)len, (const char *)f + CTRL_BYTES,
                 awl_tcp_peer_name(p, who, sizeof who));
        return TCP_FAULT_RELAYED;
    }
    default:
        snprintf(err, size, "%s sent a control frame of unknown kind %d",
                 awl_tcp_peer_name(p, who, sizeof who), f[4]);
        return TCP_FAULT_HERE;
    }
}

/* Reads whatever p's control connection has. */
static int read_ctrl(awl_process_group *pg, tcp_peer *p, double now, char *err, size_t size)
{
    char who[96];
    for (;;) {
        size_t want = CTRL_BYTES;
        if (p->in_have >= CTRL_BYTES) want += net_get32(p->in + 32);
        ssize_t k = recv(p->ctrl, p->in + p->in_have, want - p->in_have, MSG_DONTWAIT);
        if (k < 0 && (errno == EAGAIN || errno == EINTR)) return 0;
        if (k <= 0) {
            p->gone = true;
            close(p->ctrl);
            p->ctrl = -1;
            if (p->bye) return 0;
            pg->blamed = p->global_rank;
            snprintf(err, size, "%s closed its connection (%s): the process exited or was killed",
                     awl_tcp_peer_name(p, who, sizeof who),
                     k == 0 ? "end of stream" : strerror(errno));
            return TCP_FAULT_HERE;
        }
        p->last_heard = now;
        p->in_have += (size_t)k;
        if (p->in_have == CTRL_BYTES) {
            if (memcmp(p->in, ctrl_magic, 4) != 0 ||
                net_get32(p->in + 60) != awl_net_crc32(p->in, 60) ||
                net_get32(p->in + 32) > CTRL_MAX_TEXT) {
                pg->blamed = p->global_rank;
                snprintf(err, size, "%s sent a damaged control frame",
                         awl_tcp_peer_name(p, who, sizeof who));
                return TCP_FAULT_HERE;
            }
            want = CTRL_BYTES + net_get32(p->in + 32);
        }
        if (p->in_have == want) {
            p->in_have = 0;
            int rc = handle_ctrl(pg, p, err, size);
            if (rc < 0) return rc;
        }
    }
}

int awl_tcp_data_failed(awl_process_group *pg, tcp_peer *p, const char *how, char *err, size_t size)
{
    char who[96], ctrl_err[1024], cause[96];
    snprintf(cause, sizeof cause, "%s", how); /* strerror's text: reading may replace it */
    double deadline = awl_net_now() + (pg->peer_timeout < 1.0 ? pg->peer_timeout : 1.0);
    while (!p->gone && awl_net_now() < deadline) {
        struct pollfd fd = {p->ctrl, POLLIN, 0};
        poll(&fd, 1, (int)((deadline - awl_net_now()) * 1e3) + 1);
        int rc = read_ctrl(pg, p, awl_net_now(), ctrl_err, sizeof ctrl_err);
        if (rc == TCP_FAULT_RELAYED) {
            snprintf(err, size, "%s", ctrl_err);
            return TCP_FAULT_RELAYED;
        }
        if (rc < 0) break;
    }
    if (awl_tcp_check_peers(pg, err, size) < 0) return TCP_FAULT_HERE; /* it left the group */
    pg->blamed = p->global_rank;
    snprintf(err, size, "%s closed its data connection (%s): the process exited or was killed",
             awl_tcp_peer_name(p, who, sizeof who), cause);
    return TCP_FAULT_HERE;
}

/* A connection to the listener after setup is nobody this group expects. */
static void turn_away(awl_process_group *pg)
{
    tcp_state *st = state_of(pg);
    for (;;) {
        int fd = accept4(st->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) return;
        char from[64];
        fprintf(stderr, "awl_dist: rank %d turned away a connection from %s: the group is complete\n",
                dist_me(pg), awl_net_peer_name(fd, from, sizeof from));
        close(fd);
    }
}

int awl_tcp_poll_fds(awl_process_group *pg, struct pollfd *fds)
{
    tcp_state *st = state_of(pg);
    int n = 0;
    fds[n++] = (struct pollfd){pg->wake[0], POLLIN, 0};
    fds[n++] = (struct pollfd){st->listen_fd, POLLIN, 0};
    for (int r = 0; r < pg->world; r++) {
        tcp_peer *p = &st->peers[r];
        if (r == pg->rank || p->gone) continue;
        fds[n++] = (struct pollfd){p->ctrl, (short)(POLLIN | (p->out_len ? POLLOUT : 0)), 0};
    }
    return n;
}

double awl_tcp_next_service(const awl_process_group *pg)
{
    double wait = state_of(pg)->next_heartbeat - awl_net_now();
    return wait > 0 ? wait : 0;
}

int awl_tcp_service(awl_process_group *pg, char *err, size_t size)
{
    tcp_state *st = state_of(pg);
    awl_dist_service_wake(pg);
    turn_away(pg);
    double now = awl_net_now();
    if (now >= st->next_heartbeat) {
        awl_tcp_broadcast_ctrl(pg, CTRL_STATE, NULL);
        st->next_heartbeat = now + st->heartbeat_interval;
    }
    for (int r = 0; r < pg->world; r++) {
        tcp_peer *p = &st->peers[r];
        if (r == pg->rank || p->gone) continue;
        flush(p);
        int rc = read_ctrl(pg, p, now, err, size);
        if (rc < 0) return rc;
    }
    return 0;
}

int awl_tcp_check_peers(awl_process_group *pg, char *err, size_t size)
{
    tcp_state *st = state_of(pg);
    double now = awl_net_now();
    char who[96], mine[160], theirs[200];
    for (int r = 0; r < pg->world; r++) {
        tcp_peer *p = &st->peers[r];
        if (r == pg->rank) continue;
        if (st->in_collective && p->bye && p->bye_seq < st->fp.seq) {
            pg->blamed = p->global_rank;
            snprintf(err, size,
                     "%s left the group (awl_dist_destroy) after its collective #%llu, but rank %d "
                     "is in %s",
                     awl_tcp_peer_name(p, who, sizeof who), (unsigned long long)p->bye_seq,
                     dist_me(pg), awl_dist_describe(&st->fp, mine, sizeof mine));
            return TCP_FAULT_HERE;
        }
        if (p->gone) continue; /* a death without goodbye was reported when it closed */
        if (now - p->last_heard > pg->peer_timeout) {
            pg->blamed = p->global_rank;
            snprintf(err, size,
                     "%s has not been heard from for %.1f s (the peer timeout, "
                     "AWL_DIST_PEER_TIMEOUT, is %g s): it hangs, or the network between the two "
                     "ranks is down; %s",
                     awl_tcp_peer_name(p, who, sizeof who), now - p->last_heard, pg->peer_timeout,
                     awl_tcp_peer_doing(pg, p, theirs, sizeof theirs));
            return TCP_FAULT_HERE;
        }
        if (disagrees(pg, p, err, size)) return TCP_FAULT_HERE;
    }
    return 0;
}

/* ---- idle ------------------------------------------------------------------------------------- */

static void tcp_idle(awl_process_group *pg, double seconds)
{
    struct pollfd fds[pg->world + 1];
    int n = awl_tcp_poll_fds(pg, fds);
    bool failed = awl_dist_failed(pg, NULL, 0);
    double wait = failed ? seconds : awl_tcp_next_service(pg);
    if (wait > seconds) wait = seconds;
    poll(fds, (nfds_t)(failed ? 1 : n), (int)(wait * 1e3) + 1);
    if (failed) {
        awl_dist_service_wake(pg);
        return;
    }
    char err[1024], msg[1200];
    int rc = awl_tcp_service(pg, err, sizeof err);
    if (rc == 0) rc = awl_tcp_check_peers(pg, err, sizeof err);
    if (rc == 0) return;
    tcp_state *st = state_of(pg);
    snprintf(msg, sizeof msg, "%s (noticed by rank %d between collectives, after its #%llu)", err,
             dist_me(pg), (unsigned long long)st->last_seq);
    if (rc == TCP_FAULT_HERE) awl_tcp_broadcast_ctrl(pg, CTRL_ABORT, msg);
    awl_dist_fail(pg, rc == TCP_FAULT_HERE ? msg : err);
}

/* ---- setting up -------------------------------------------------------------------------------- */

static bool same_token(const awl_process_group *pg, const net_hello *h)
{
    uint8_t mine[NET_TOKEN_BYTES];
    awl_net_token_bytes(pg->token, mine);
    return memcmp(mine, h->token, NET_TOKEN_BYTES) == 0;
}

static void say_hello(const awl_process_group *pg, int kind, uint8_t out[NET_HELLO_BYTES])
{
    net_hello h = {NET_VERSION, (uint16_t)kind, {0}, (uint32_t)pg->rank, (uint32_t)pg->world,
                   pg->group_id};
    awl_net_token_bytes(pg->token, h.token);
    awl_net_hello_encode(&h, out);
}

/* Opens this rank's control and data connections to lower rank j. */
static int connect_down(awl_process_group *pg, int j, double deadline)
{
    tcp_state *st = state_of(pg);
    tcp_peer *p = &st->peers[j];
    char key[96], host[256], err[256] = "";
    snprintf(key, sizeof key, "%s/rank/%d/addr", pg->key_prefix, j);
    void *value;
    size_t len;
    double left = deadline - awl_net_now();
    if (awl_store_get(pg->store, key, &value, &len, left > 0 ? left : 0) < 0)
        return awl_error(AWL_ERR_DIST,
                         "awl_dist_init: rank %d waited %.0f s for rank %d to publish its address "
                         "(is it running? MASTER_ADDR/MASTER_PORT and WORLD_SIZE the same on every "
                         "rank?): %s",
                         dist_me(pg), pg->init_timeout, pg->global_rank[j], awl_last_error());
    snprintf(p->addr, sizeof p->addr, "%s", (char *)value);
    free(value);
    int port;
    if (awl_net_split_address(p->addr, host, sizeof host, &port, 0) < 0)
        return awl_error(AWL_ERR_DIST, "awl_dist_init: rank %d published a malformed address '%s'",
                         j, p->addr);
    for (int kind = NET_KIND_CTRL; kind <= NET_KIND_DATA; kind++) {
        int fd = awl_net_connect(host, port, deadline, err, sizeof err);
        if (fd < 0)
            return awl_error(AWL_ERR_DIST, "awl_dist_init: rank %d cannot reach rank %d: %s",
                             dist_me(pg), pg->global_rank[j], err);
        uint8_t hello[NET_HELLO_BYTES];
        say_hello(pg, kind, hello);
        net_hello h;
        int rc = awl_net_send_all(fd, hello, sizeof hello, deadline, err, sizeof err);
        if (rc == 0) rc = awl_net_recv_all(fd, hello, sizeof hello, deadline, err, sizeof err);
        if (rc == 0) rc = awl_net_hello_decode(hello, &h, err, sizeof err);
        if (rc == 0 && (h.rank != (uint32_t)j || h.kind != kind || !same_token(pg, &h) ||
                        h.world != (uint32_t)pg->world || h.group != pg->group_id)) {
            snprintf(err, sizeof err, "its handshake says rank %u of %u in group %08x", h.rank,
                     h.world, h.group);
            rc = -1;
        }
        if (rc < 0) {
            close(fd);
            return awl_error(AWL_ERR_DIST,
                             "awl_dist_init: rank %d's handshake with rank %d at %s failed: %s "
                             "(another job's process at that address, or a different job token?)",
                             dist_me(pg), pg->global_rank[j], p->addr, err);
        }
        if (kind == NET_KIND_CTRL)
            p->ctrl = fd;
        else
            p->data = fd;
    }
    return AWL_OK;
}

typedef struct pending {
    int fd;
    uint8_t hello[NET_HELLO_BYTES];
    size_t have;
    double deadline;
    char from[64];
} pending;

/* Checks a complete hello from a connection to our listener; installs it
 * or says why not. */
static int admit(awl_process_group *pg, pending *c, char *why, size_t size)
{
    tcp_state *st = state_of(pg);
    net_hello h;
    if (awl_net_hello_decode(c->hello, &h, why, size) < 0) return -1;
    if (!same_token(pg, &h)) {
        snprintf(why, size, "wrong job token (another job's rank?)");
        return -1;
    }
    if (h.world != (uint32_t)pg->world || h.rank <= (uint32_t)pg->rank ||
        h.rank >= (uint32_t)pg->world || (h.kind != NET_KIND_CTRL && h.kind != NET_KIND_DATA) ||
        h.group != pg->group_id) {
        snprintf(why, size, "it says it is rank %u of %u in group %08x (kind %u)", h.rank,
                 h.world, h.group, h.kind);
        return -1;
    }
    tcp_peer *p = &st->peers[h.rank];
    int *slot = h.kind == NET_KIND_CTRL ? &p->ctrl : &p->data;
    if (*slot >= 0) {
        snprintf(why, size, "rank %u is already connected", h.rank);
        return -1;
    }
    uint8_t back[NET_HELLO_BYTES];
    say_hello(pg, h.kind, back);
    char err[128];
    if (awl_net_send_all(c->fd, back, sizeof back, awl_net_now() + HELLO_TIMEOUT, err, sizeof err) <
        0) {
        snprintf(why, size, "%s", err);
        return -1;
    }
    *slot = c->fd;
    return 0;
}

/* Accepts the control and data connections of every higher rank. */
static int accept_up(awl_process_group *pg, double deadline)
{
    tcp_state *st = state_of(pg);
    int expected = 2 * (pg->world - 1 - pg->rank), got = 0, n = 0;
    pending *list = calloc(64, sizeof *list);
    struct pollfd fds[65];
    int status = AWL_OK;
    while (got < expected) {
        double now = awl_net_now();
        if (now > deadline) {
            char missing[256] = "";
            size_t at = 0;
            for (int r = pg->rank + 1; r < pg->world && at < sizeof missing - 16; r++)
                if (st->peers[r].ctrl < 0 || st->peers[r].data < 0)
                    at += (size_t)snprintf(missing + at, sizeof missing - at, "%s%d", at ? ", " : "",
                                           pg->global_rank[r]);
            status = awl_error(AWL_ERR_DIST,
                               "awl_dist_init: rank %d waited %.0f s for ranks %s to connect", dist_me(pg),
                               pg->init_timeout, missing);
            break;
        }
        fds[0] = (struct pollfd){st->listen_fd, POLLIN, 0};
        for (int i = 0; i < n; i++) fds[i + 1] = (struct pollfd){list[i].fd, POLLIN, 0};
        poll(fds, (nfds_t)(n + 1), 100);
        now = awl_net_now();
        for (int i = n - 1; i >= 0; i--) {
            pending *c = &list[i];
            char why[256] = "";
            int verdict = 1; /* 1: still reading, 0: admitted, -1: turned away */
            ssize_t k = recv(c->fd, c->hello + c->have, NET_HELLO_BYTES - c->have, MSG_DONTWAIT);
            if (k > 0) c->have += (size_t)k;
            if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) {
                snprintf(why, sizeof why, "it closed before its handshake");
                verdict = -1;
            } else if (c->have == NET_HELLO_BYTES) {
                verdict = admit(pg, c, why, sizeof why);
            } else if (now > c->deadline) {
                snprintf(why, sizeof why, "no handshake within %.0f s", HELLO_TIMEOUT);
                verdict = -1;
            }
            if (verdict == 1) continue;
            if (verdict == 0) {
                got++;
            } else {
                fprintf(stderr, "awl_dist: rank %d rejected a connection from %s: %s\n", dist_me(pg),
                        c->from, why);
                close(c->fd);
            }
            list[i] = list[--n];
        }
        if (fds[0].revents && n < 64) {
            int fd = accept4(st->listen_fd, NULL, NULL, SOCK_CLOEXEC);
            if (fd >= 0) {
                awl_net_set_nodelay(fd);
                pending *c = &list[n++];
                memset(c, 0, sizeof *c);
                c->fd = fd;
                c->deadline = now + HELLO_TIMEOUT;
                awl_net_peer_name(fd, c->from, sizeof c->from);
            }
        }
    }
    for (int i = 0; i < n; i++) close(list[i].fd);
    free(list);
    return status;
}

static void free_state(awl_process_group *pg)
{
    tcp_state *st = state_of(pg);
    if (!st) return;
    for (int r = 0; r < pg->world; r++) {
        if (st->peers[r].ctrl >= 0) close(st->peers[r].ctrl);
        if (st->peers[r].data >= 0) close(st->peers[r].data);
    }
    if (st->listen_fd >= 0) close(st->listen_fd);
    free(st->peers);
    free(st->scratch);
    free(st->work);
    free(st);
    pg->tx = NULL;
}

static int tcp_connect(awl_process_group *pg)
{
    tcp_state *st = calloc(1, sizeof *st);
    pg->tx = st;
    st->peers = calloc((size_t)pg->world, sizeof *st->peers);
    st->listen_fd = -1;
    for (int r = 0; r < pg->world; r++) {
        st->peers[r].rank = r;
        st->peers[r].global_rank = pg->global_rank[r];
        st->peers[r].ctrl = st->peers[r].data = -1;
    }
    double deadline = awl_net_now() + pg->init_timeout;
    char ip[64], err[256], addr[96], key[96];
    if (awl_net_local_ip(awl_store_fd(pg->store), ip, sizeof ip) < 0)
        snprintf(ip, sizeof ip, "127.0.0.1");
    st->listen_fd = awl_net_listen(ip, 0, err, sizeof err);
    if (st->listen_fd < 0) {
        free_state(pg);
        return awl_error(AWL_ERR_DIST, "awl_dist_init: rank %d: %s", dist_me(pg), err);
    }
    snprintf(addr, sizeof addr, "%s:%d", ip, awl_net_local_port(st->listen_fd));
    snprintf(st->peers[pg->rank].addr, sizeof st->peers[pg->rank].addr, "%s", addr);
    snprintf(key, sizeof key, "%s/rank/%d/addr", pg->key_prefix, pg->rank);
    int status = awl_store_set(pg->store, key, addr, strlen(addr) + 1);
    for (int j = 0; j < pg->rank && status == AWL_OK; j++) status = connect_down(pg, j, deadline);
    if (status == AWL_OK) status = accept_up(pg, deadline);
    /* the higher ranks' addresses, for messages */
    for (int r = pg->rank + 1; r < pg->world && status == AWL_OK; r++) {
        void *value;
        snprintf(key, sizeof key, "%s/rank/%d/addr", pg->key_prefix, r);
        if (awl_store_get(pg->store, key, &value, NULL, 5.0) == 0) {
            snprintf(st->peers[r].addr, sizeof st->peers[r].addr, "%s", (char *)value);
            free(value);
        }
    }
    if (status < 0) {
        free_state(pg);
        return status;
    }
    double now = awl_net_now();
    st->heartbeat_interval = pg->peer_timeout / 4 < 1.0 ? pg->peer_timeout / 4 : 1.0;
    st->next_heartbeat = now;
    awl_net_set_nonblocking(st->listen_fd, true);
    for (int r = 0; r < pg->world; r++) {
        if (r == pg->rank) continue;
        st->peers[r].last_heard = now;
        awl_net_set_nonblocking(st->peers[r].ctrl, true);
        awl_net_set_nonblocking(st->peers[r].data, true);
    }
    return AWL_OK;
}

/* ---- shutting down ------------------------------------------------------------------------------ */

static void tcp_shutdown(awl_process_group *pg, bool clean)
{
    tcp_state *st = state_of(pg);
    if (clean) {
        st->in_collective = false;
        awl_tcp_broadcast_ctrl(pg, CTRL_BYE, NULL);
        /* rank 0 serves the store: it stays until every peer has said
         * goodbye or gone (a few seconds at most); the others only make
         * sure their goodbye has left */
        double deadline = awl_net_now() + (pg->rank == 0 ? 5.0 : 1.0);
        char err[512];
        while (awl_net_now() < deadline) {
            bool pending = false;
            for (int r = 0; r < pg->world; r++) {
                tcp_peer *p = &st->peers[r];
                if (r == pg->rank || p->gone) continue;
                pending |= p->out_len > 0 || (pg->rank == 0 && !p->bye);
            }
            if (!pending) break;
            struct pollfd fds[pg->world + 1];
            int n = awl_tcp_poll_fds(pg, fds);
            poll(fds, (nfds_t)n, 50);
            st->next_heartbeat = awl_net_now() + 3600; /* goodbyes only */
            if (awl_tcp_service(pg, err, sizeof err) < 0) break;
        }
    }
    free_state(pg);
}

const dist_transport awl_dist_tcp_transport = {
    .name = "tcp",
    .store = true,
    .dtypes = DIST_DTYPE(AWL_F32) | DIST_DTYPE(AWL_F64) | DIST_DTYPE(AWL_I32),
    .connect = tcp_connect,
    .run = awl_tcp_run,
    .idle = tcp_idle,
    .shutdown = tcp_shutdown,
};
