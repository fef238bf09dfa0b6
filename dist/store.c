/*
 * dist/store.c - the rendezvous key-value store (see store.h).
 */
#include "dist/store.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/error.h"
#include "dist/dist.h"
#include "dist/net.h"

enum { CMD_SET = 1, CMD_GET = 2, CMD_ADD = 3, CMD_WAIT = 4 };
enum { REQ_HEADER = 20, REPLY_HEADER = 8 };
enum { STATUS_OK = 0, STATUS_TIMEOUT = 1 };
#define STORE_MAX_CLIENTS 1024
#define HELLO_TIMEOUT 5.0 /* seconds a new client has to say hello */

/* ---- the server ------------------------------------------------------------------------------ */

typedef struct entry {
    char *key;
    uint8_t *value;
    uint32_t len;
} entry;

typedef struct client {
    int fd;
    bool greeted;
    double hello_deadline;
    char name[64];
    uint8_t *buf; /* the request being read: header, then key and value */
    size_t have, need;
    /* a parked GET or WAIT */
    bool parked;
    uint8_t cmd;
    double park_deadline;
} client;

struct store_server {
    int listen_fd, wake[2];
    uint8_t token[NET_TOKEN_BYTES];
    int world;
    pthread_t thread;
    entry *entries;
    int n_entries;
    client *clients;
    int n_clients;
};

static void server_log(const store_server *s, const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "awl_dist: store (rank 0, port %d): ", awl_net_local_port(s->listen_fd));
    fprintf(stderr, fmt, a, b);
    fputc('\n', stderr);
}

static entry *find(store_server *s, const char *key)
{
    for (int i = 0; i < s->n_entries; i++)
        if (strcmp(s->entries[i].key, key) == 0) return &s->entries[i];
    return NULL;
}

static void put(store_server *s, const char *key, const uint8_t *value, uint32_t len)
{
    entry *e = find(s, key);
    if (!e) {
        s->entries = realloc(s->entries, (size_t)(s->n_entries + 1) * sizeof *s->entries);
        e = &s->entries[s->n_entries++];
        e->key = strdup(key);
        e->value = NULL;
    }
    free(e->value);
    e->value = malloc(len ? len : 1);
    memcpy(e->value, value, len);
    e->len = len;
}

static void drop_client(store_server *s, int i)
{
    close(s->clients[i].fd);
    free(s->clients[i].buf);
    s->clients[i] = s->clients[--s->n_clients];
}

static int reply(client *c, uint32_t status, const uint8_t *value, uint32_t len)
{
    uint8_t head[REPLY_HEADER];
    net_put32(head, status);
    net_put32(head + 4, len);
    char err[128];
    double deadline = awl_net_now() + 2.0;
    if (awl_net_send_all(c->fd, head, sizeof head, deadline, err, sizeof err) < 0) return -1;
    return len ? awl_net_send_all(c->fd, value, len, deadline, err, sizeof err) : 0;
}

/* The keys of a request: one for GET, several NUL-separated for WAIT. */
static bool all_present(store_server *s, const client *c)
{
    const char *key = (const char *)c->buf + REQ_HEADER;
    size_t key_len = net_get32(c->buf + 8);
    for (size_t at = 0; at < key_len; at += strlen(key + at) + 1)
        if (!find(s, key + at)) return false;
    return true;
}

/* Answers a parked GET or WAIT if it can (or must, at its deadline). */
static int try_answer(store_server *s, client *c, bool expired)
{
    if (!all_present(s, c)) {
        if (!expired) return 0;
        c->parked = false;
        c->have = 0;
        return reply(c, STATUS_TIMEOUT, NULL, 0);
    }
    c->parked = false;
    c->have = 0;
    if (c->cmd == CMD_WAIT) return reply(c, STATUS_OK, NULL, 0);
    entry *e = find(s, (const char *)c->buf + REQ_HEADER);
    return reply(c, STATUS_OK, e->value, e->len);
}

/* Runs a complete request. Returns -1 to drop the client. */
static int execute(store_server *s, client *c)
{
    uint8_t cmd = c->buf[4];
    uint32_t key_len = net_get32(c->buf + 8), value_len = net_get32(c->buf + 12);
    uint32_t timeout_ms = net_get32(c->buf + 16);
    char *key = (char *)c->buf + REQ_HEADER;
    const uint8_t *value = c->buf + REQ_HEADER + key_len;
    if (key[key_len - 1] != '\0') return -1;
    switch (cmd) {
    case CMD_SET:
        put(s, key, value, value_len);
        c->have = 0;
        if (reply(c, STATUS_OK, NULL, 0) < 0) return -1;
        break;
    case CMD_ADD: {
        if (value_len != 8) return -1;
        entry *e = find(s, key);
        int64_t v = (int64_t)net_get64(value);
        if (e && e->len == 8) v += (int64_t)net_get64(e->value);
        uint8_t out[8];
        net_put64(out, (uint64_t)v);
        put(s, key, out, 8);
        c->have = 0;
        if (reply(c, STATUS_OK, out, 8) < 0) return -1;
        break;
    }
    case CMD_GET:
    case CMD_WAIT:
        c->cmd = cmd;
        c->parked = true;
        c->park_deadline = awl_net_now() + timeout_ms * 1e-3;
        return try_answer(s, c, false);
    default: return -1;
    }
    /* a change may complete parked requests */
    for (int i = 0; i < s->n_clients; i++)
        if (s->clients[i].parked && try_answer(s, &s->clients[i], false) < 0)
            s->clients[i].parked = false; /* dropped on its next read */
    return 0;
}

/* Reads what has arrived from a client. Returns -1 to drop it. */
static int serve(store_server *s, client *c)
{
    if (!c->greeted) {
        if (!c->buf) {
            c->buf = malloc(NET_HELLO_BYTES);
            c->need = NET_HELLO_BYTES;
        }
        ssize_t k = recv(c->fd, c->buf + c->have, c->need - c->have, MSG_DONTWAIT);
        if (k <= 0) return k < 0 && (errno == EAGAIN || errno == EINTR) ? 0 : -1;
        c->have += (size_t)k;
        if (c->have < c->need) return 0;
        net_hello h;
        char why[160];
        if (awl_net_hello_decode(c->buf, &h, why, sizeof why) < 0) {
            server_log(s, "rejected a connection from %s: %s", c->name, why);
            return -1;
        }
        if (h.kind != NET_KIND_STORE || memcmp(h.token, s->token, NET_TOKEN_BYTES) != 0 ||
            (int)h.world != s->world) {
            server_log(s, "rejected a connection from %s: %s", c->name,
                       h.kind != NET_KIND_STORE ? "not a store client"
                       : (int)h.world != s->world ? "another world size"
                                                  : "wrong job token (another job on this port?)");
            return -1;
        }
        uint8_t back[NET_HELLO_BYTES];
        h.rank = 0;
        awl_net_hello_encode(&h, back);
        char err[64];
        if (awl_net_send_all(c->fd, back, sizeof back, awl_net_now() + 2, err, sizeof err) < 0)
            return -1;
        c->greeted = true;
        c->have = 0;
        c->need = REQ_HEADER;
        return 0;
    }
    if (c->parked) { /* a client speaks only after its answer */
        char probe;
        ssize_t k = recv(c->fd, &probe, 1, MSG_PEEK | MSG_DONTWAIT);
        return k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR) ? -1 : 0;
    }
    ssize_t k = recv(c->fd, c->buf + c->have, c->need - c->have, MSG_DONTWAIT);
    if (k <= 0) return k < 0 && (errno == EAGAIN || errno == EINTR) ? 0 : -1;
    c->have += (size_t)k;
    if (c->have < c->need) return 0;
    if (c->need == REQ_HEADER) {
        uint32_t key_len = net_get32(c->buf + 8), value_len = net_get32(c->buf + 12);
        if (memcmp(c->buf, "AWLS", 4) != 0 || key_len == 0 || key_len > STORE_MAX_KEY ||
            value_len > STORE_MAX_VALUE) {
            server_log(s, "dropped client %s: %s", c->name, "a malformed request");
            return -1;
        }
        c->need = REQ_HEADER + key_len + value_len;
        c->buf = realloc(c->buf, c->need);
        if (c->have < c->need) return 0;
    }
    c->need = REQ_HEADER;
    return execute(s, c);
}

static void *server_main(void *arg)
{
    store_server *s = arg;
    struct pollfd *fds = malloc((STORE_MAX_CLIENTS + 2) * sizeof *fds);
    for (;;) {
        double now = awl_net_now(), next = now + 1.0;
        for (int i = 0; i < s->n_clients; i++) {
            client *c = &s->clients[i];
            if (!c->greeted && c->hello_deadline < next) next = c->hello_deadline;
            if (c->parked && c->park_deadline < next) next = c->park_deadline;
        }
        fds[0] = (struct pollfd){s->wake[0], POLLIN, 0};
        fds[1] = (struct pollfd){s->listen_fd, POLLIN, 0};
        for (int i = 0; i < s->n_clients; i++)
            fds[i + 2] = (struct pollfd){s->clients[i].fd, POLLIN, 0};
        int n = s->n_clients;
        int ms = next > now ? (int)((next - now) * 1e3) + 1 : 0;
        if (poll(fds, (nfds_t)(n + 2), ms) < 0 && errno != EINTR) break;
        if (fds[0].revents) break;
        now = awl_net_now();
        for (int i = n - 1; i >= 0; i--) {
            client *c = &s->clients[i];
            int rc = 0;
            if (fds[i + 2].revents) rc = serve(s, c);
            if (rc == 0 && !c->greeted && now > c->hello_deadline) {
                server_log(s, "dropped a connection from %s: %s", c->name,
                           "no handshake within 5 s");
                rc = -1;
            }
            if (rc == 0 && c->parked && now >= c->park_deadline) rc = try_answer(s, c, true);
            if (rc < 0) drop_client(s, i);
        }
        if (fds[1].revents) {
            int fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC);
            if (fd >= 0 && s->n_clients == STORE_MAX_CLIENTS) {
                close(fd);
            } else if (fd >= 0) {
                client *c = &s->clients[s->n_clients++];
                memset(c, 0, sizeof *c);
                c->fd = fd;
                c->hello_deadline = now + HELLO_TIMEOUT;
                awl_net_peer_name(fd, c->name, sizeof c->name);
            }
        }
    }
    free(fds);
    return NULL;
}

store_server *awl_store_server_start(const char *host, int port, const char *token, int world,
                                 char *err, size_t size)
{
    int fd = awl_net_listen(host, port, err, size);
    if (fd < 0) return NULL;
    store_server *s = calloc(1, sizeof *s);
    s->listen_fd = fd;
    s->world = world;
    awl_net_token_bytes(token, s->token);
    s->clients = calloc(STORE_MAX_CLIENTS, sizeof *s->clients);
    if (pipe2(s->wake, O_CLOEXEC) < 0 || pthread_create(&s->thread, NULL, server_main, s) != 0) {
        snprintf(err, size, "cannot start the store's thread");
        close(fd);
        free(s->clients);
        free(s);
        return NULL;
    }
    return s;
}

int awl_store_server_port(const store_server *s) { return awl_net_local_port(s->listen_fd); }

void awl_store_server_stop(store_server *s)
{
    if (!s) return;
    ssize_t ignored = write(s->wake[1], "x", 1);
    (void)ignored;
    pthread_join(s->thread, NULL);
    while (s->n_clients) drop_client(s, s->n_clients - 1);
    for (int i = 0; i < s->n_entries; i++) {
        free(s->entries[i].key);
        free(s->entries[i].value);
    }
    free(s->entries);
    free(s->clients);
    close(s->listen_fd);
    close(s->wake[0]);
    close(s->wake[1]);
    free(s);
}

/* ---- the client ------------------------------------------------------------------------------ */

struct awl_store {
    int fd;
    char where[128]; /* "the store at 10.0.0.1:29500" */
    pthread_mutex_t lock;
};

awl_store *awl_store_connect(const char *host, int port, const char *token, int rank, int world,
                         double timeout, char *err, size_t size)
{
    double deadline = awl_net_now() + timeout;
    int fd = awl_net_connect(host, port, deadline, err, size);
    if (fd < 0) return NULL;
    net_hello h = {NET_VERSION, NET_KIND_STORE, {0}, (uint32_t)rank, (uint32_t)world, 0};
    awl_net_token_bytes(token, h.token);
    uint8_t hello[NET_HELLO_BYTES];
    awl_net_hello_encode(&h, hello);
    char why[160] = "";
    int rc = awl_net_send_all(fd, hello, sizeof hello, deadline, why, sizeof why);
    if (rc == 0) rc = awl_net_recv_all(fd, hello, sizeof hello, deadline, why, sizeof why);
    if (rc == 0) rc = awl_net_hello_decode(hello, &h, why, sizeof why);
    if (rc < 0) {
        snprintf(err, size,
                 "the store at %s:%d refused this rank's handshake (%s): another job's store, "
                 "or a different job token or world size",
                 host, port, why);
        close(fd);
        return NULL;
    }
    awl_store *c = calloc(1, sizeof *c);
    c->fd = fd;
    snprintf(c->where, sizeof c->where, "the store at %s:%d", host, port);
    pthread_mutex_init(&c->lock, NULL);
    return c;
}

void awl_store_close(awl_store *c)
{
    if (!c) return;
    close(c->fd);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

int awl_store_fd(const awl_store *c) { return c->fd; }

/* One request and its reply; *value (malloc'd, may be NULL) for GET/ADD. */
static int request(awl_store *c, const char *op, uint8_t cmd, const char *keys, size_t key_len,
                   const void *value, uint32_t value_len, double timeout, uint8_t **out,
                   uint32_t *out_len)
{
    if (key_len == 0 || key_len > STORE_MAX_KEY || value_len > STORE_MAX_VALUE)
        return awl_error(AWL_ERR_INVALID, "%s: key of %zu bytes or value of %u bytes over the "
                                          "store's limits (%d, %u)",
                         op, key_len, value_len, STORE_MAX_KEY, STORE_MAX_VALUE);
    if (timeout < 0) timeout = 0;
    uint8_t head[REQ_HEADER] = {'A', 'W', 'L', 'S', cmd};
    net_put32(head + 8, (uint32_t)key_len);
    net_put32(head + 12, value_len);
    net_put32(head + 16, (uint32_t)(timeout * 1e3 > 4e9 ? 4e9 : timeout * 1e3));
    /* the server answers a timed-out GET itself; the extra seconds are for
     * a server that is gone */
    double deadline = awl_net_now() + timeout + 10.0;
    char why[128] = "";
    pthread_mutex_lock(&c->lock);
    int rc = awl_net_send_all(c->fd, head, sizeof head, deadline, why, sizeof why);
    if (rc == 0) rc = awl_net_send_all(c->fd, keys, key_len, deadline, why, sizeof why);
    if (rc == 0 && value_len)
        rc = awl_net_send_all(c->fd, value, value_len, deadline, why, sizeof why);
    uint8_t back[REPLY_HEADER];
    if (rc == 0) rc = awl_net_recv_all(c->fd, back, sizeof back, deadline, why, sizeof why);
    uint32_t status = net_get32(back), len = rc == 0 ? net_get32(back + 4) : 0;
    if (rc == 0 && len > STORE_MAX_VALUE) {
        rc = -1;
        snprintf(why, sizeof why, "a reply of %u bytes", len);
    }
    uint8_t *data = rc == 0 ? malloc(len ? len : 1) : NULL;
    if (rc == 0 && len) rc = awl_net_recv_all(c->fd, data, len, deadline, why, sizeof why);
    pthread_mutex_unlock(&c->lock);
    if (rc < 0) {
        free(data);
        return awl_error(AWL_ERR_DIST, "%s: %s failed (%s): is rank 0 still running?", op,
                         c->where, why);
    }
    if (status == STATUS_TIMEOUT) {
        free(data);
        return awl_error(AWL_ERR_DIST, "%s: '%s' did not appear in %s within %.0f s", op, keys,
                         c->where, timeout);
    }
    if (out) {
        *out = data;
        *out_len = len;
    } else {
        free(data);
    }
    return AWL_OK;
}

int awl_store_set(awl_store *c, const char *key, const void *value, size_t len)
{
    if (!c || !key) return AWL_ERR_INVALID;
    if (len > STORE_MAX_VALUE)
        return awl_error(AWL_ERR_INVALID, "awl_store_set: a value of %zu bytes (at most %u)", len,
                         STORE_MAX_VALUE);
    return request(c, "awl_store_set", CMD_SET, key, strlen(key) + 1, value, (uint32_t)len, 0, NULL,
                   NULL);
}

int awl_store_get(awl_store *c, const char *key, void **value, size_t *len, double timeout)
{
    if (!c || !key || !value) return AWL_ERR_INVALID;
    uint8_t *data;
    uint32_t n;
    int rc = request(c, "awl_store_get", CMD_GET, key, strlen(key) + 1, NULL, 0, timeout, &data, &n);
    if (rc < 0) return rc;
    /* one byte more, zero: a value set from a string reads back as one */
    *value = realloc(data, (size_t)n + 1);
    ((uint8_t *)*value)[n] = 0;
    if (len) *len = n;
    return AWL_OK;
}

int awl_store_add(awl_store *c, const char *key, int64_t delta, int64_t *result)
{
    if (!c || !key) return AWL_ERR_INVALID;
    uint8_t v[8], *data;
    uint32_t n;
    net_put64(v, (uint64_t)delta);
    int rc = request(c, "awl_store_add", CMD_ADD, key, strlen(key) + 1, v, 8, 0, &data, &n);
    if (rc < 0) return rc;
    if (result) *result = n == 8 ? (int64_t)net_get64(data) : 0;
    free(data);
    return AWL_OK;
}

int awl_store_wait(awl_store *c, int n, const char *const *keys, double timeout)
{
    if (!c || n <= 0 || !keys) return AWL_ERR_INVALID;
    size_t total = 0;
    for (int i = 0; i < n; i++) total += strlen(keys[i]) + 1;
    if (total > STORE_MAX_KEY)
        return awl_error(AWL_ERR_INVALID, "awl_store_wait: the keys take %zu bytes (at most %d)",
                         total, STORE_MAX_KEY);
    char *joined = malloc(total), *at = joined;
    for (int i = 0; i < n; i++) at = stpcpy(at, keys[i]) + 1;
    int rc = request(c, "awl_store_wait", CMD_WAIT, joined, total, NULL, 0, timeout, NULL, NULL);
    free(joined);
    return rc;
}
