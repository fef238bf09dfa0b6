/*
 * dist/net.c - TCP sockets with deadlines and the handshake (see net.h).
 */
#include "dist/net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

double awl_net_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

uint32_t awl_net_crc32(const void *data, size_t n)
{
    return (uint32_t)crc32(0L, (const Bytef *)data, (uInt)n);
}

/* Milliseconds until the deadline, for poll (at least 0). */
static int ms_until(double deadline)
{
    double ms = (deadline - awl_net_now()) * 1e3;
    if (ms <= 0) return 0;
    return ms > 1e9 ? 1000000000 : (int)ms + 1;
}

static int resolve(const char *host, int port, int passive, struct addrinfo **out, char *err,
                   size_t size)
{
    struct addrinfo hints = {0};
    hints.ai_family = AF_INET; /* IPv4 throughout: loopback, veth, cluster networks */
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = passive ? AI_PASSIVE : 0;
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    int rc = getaddrinfo(host && *host ? host : NULL, service, &hints, out);
    if (rc != 0) {
        snprintf(err, size, "cannot resolve '%s': %s", host ? host : "", gai_strerror(rc));
        return -1;
    }
    return 0;
}

int awl_net_listen(const char *host, int port, char *err, size_t size)
{
    struct addrinfo *ai;
    if (resolve(host, port, 1, &ai, err, size) < 0) return -1;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
        bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 128) < 0) {
        snprintf(err, size, "cannot listen on %s:%d: %s", host && *host ? host : "*", port,
                 strerror(errno));
        if (fd >= 0) close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    return fd;
}

int awl_net_local_port(int fd)
{
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    if (getsockname(fd, (struct sockaddr *)&a, &len) < 0) return -1;
    return ntohs(a.sin_port);
}

int awl_net_local_ip(int fd, char *buf, size_t size)
{
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    if (getsockname(fd, (struct sockaddr *)&a, &len) < 0) return -1;
    return inet_ntop(AF_INET, &a.sin_addr, buf, (socklen_t)size) ? 0 : -1;
}

const char *awl_net_peer_name(int fd, char *buf, size_t size)
{
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    char ip[INET_ADDRSTRLEN] = "?";
    if (getpeername(fd, (struct sockaddr *)&a, &len) == 0 &&
        inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip)) {
        snprintf(buf, size, "%s:%d", ip, ntohs(a.sin_port));
    } else {
        snprintf(buf, size, "an unknown address");
    }
    return buf;
}

int awl_net_set_nonblocking(int fd, bool on)
{
    int flags = fcntl(fd, F_GETFL, 0);
    if (flags < 0) return -1;
    return fcntl(fd, F_SETFL, on ? flags | O_NONBLOCK : flags & ~O_NONBLOCK);
}

void awl_net_set_nodelay(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* One non-blocking connect attempt, waiting for it until the deadline. */
static int connect_once(const struct addrinfo *ai, double deadline, int *err_no)
{
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        *err_no = errno;
        return -1;
    }
    awl_net_set_nonblocking(fd, true);
    int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc < 0 && errno == EINPROGRESS) {
        struct pollfd p = {fd, POLLOUT, 0};
        rc = poll(&p, 1, ms_until(deadline));
        if (rc == 0) {
            *err_no = ETIMEDOUT;
            close(fd);
            return -1;
        }
        int so = 0;
        socklen_t len = sizeof so;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &len);
        rc = so ? -1 : 0;
        errno = so;
    }
    if (rc < 0) {
        *err_no = errno;
        close(fd);
        return -1;
    }
    awl_net_set_nonblocking(fd, false);
    awl_net_set_nodelay(fd);
    return fd;
}

int awl_net_connect(const char *host, int port, double deadline, char *err, size_t size)
{
    struct addrinfo *ai;
    if (resolve(host, port, 0, &ai, err, size) < 0) return -1;
    int fd = -1, err_no = 0;
    double pause = 0.01;
    for (;;) {
        fd = connect_once(ai, deadline, &err_no);
        if (fd >= 0) break;
        bool retry = err_no == ECONNREFUSED || err_no == ENETUNREACH || err_no == EHOSTUNREACH ||
                     err_no == ECONNRESET || err_no == ECONNABORTED;
        if (!retry || awl_net_now() + pause > deadline) break;
        struct timespec ts = {0, (long)(pause * 1e9)};
        nanosleep(&ts, NULL);
        if (pause < 0.2) pause *= 2;
    }
    if (fd < 0)
        snprintf(err, size, "cannot connect to %s:%d: %s", host, port,
                 err_no == ETIMEDOUT ? "timed out" : strerror(err_no));
    freeaddrinfo(ai);
    return fd;
}

int awl_net_accept(int listen_fd, double deadline, char *err, size_t size)
{
    struct pollfd p = {listen_fd, POLLIN, 0};
    for (;;) {
        int rc = poll(&p, 1, ms_until(deadline));
        if (rc < 0 && errno == EINTR) continue;
        if (rc == 0) {
            snprintf(err, size, "no connection came in time");
            return NET_TIMEOUT;
        }
        int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0) {
            awl_net_set_nodelay(fd);
            return fd;
        }
        if (errno == EINTR || errno == ECONNABORTED || errno == EAGAIN) continue;
        snprintf(err, size, "accept failed: %s", strerror(errno));
        return NET_ERROR;
    }
}

/* Waits until fd is ready for `events` or the deadline passes. */
static int wait_fd(int fd, short events, double deadline)
{
    struct pollfd p = {fd, events, 0};
    for (;;) {
        int rc = poll(&p, 1, ms_until(deadline));
        if (rc > 0) return NET_OK;
        if (rc == 0) return NET_TIMEOUT;
        if (errno != EINTR) return NET_ERROR;
    }
}

int awl_net_send_all(int fd, const void *buf, size_t n, double deadline, char *err, size_t size)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k > 0) {
            p += k;
            n -= (size_t)k;
            continue;
        }
        if (k < 0 && (errno == EAGAIN || errno == EINTR)) {
            int rc = wait_fd(fd, POLLOUT, deadline);
            if (rc == NET_TIMEOUT) {
                snprintf(err, size, "sending timed out");
                return rc;
            }
            continue;
        }
        snprintf(err, size, "send failed: %s", strerror(errno));
        return errno == EPIPE || errno == ECONNRESET ? NET_EOF : NET_ERROR;
    }
    return NET_OK;
}

int awl_net_recv_all(int fd, void *buf, size_t n, double deadline, char *err, size_t size)
{
    char *p = buf;
    while (n > 0) {
        ssize_t k = recv(fd, p, n, MSG_DONTWAIT);
        if (k > 0) {
            p += k;
            n -= (size_t)k;
            continue;
        }
        if (k == 0) {
            snprintf(err, size, "the connection was closed");
            return NET_EOF;
        }
        if (errno == EAGAIN || errno == EINTR) {
            int rc = wait_fd(fd, POLLIN, deadline);
            if (rc == NET_TIMEOUT) {
                snprintf(err, size, "no answer in time");
                return rc;
            }
            continue;
        }
        snprintf(err, size, "receive failed: %s", strerror(errno));
        return errno == ECONNRESET ? NET_EOF : NET_ERROR;
    }
    return NET_OK;
}

/* ---- the handshake ------------------------------------------------------------------------- */

static const uint8_t hello_magic[4] = {'A', 'W', 'L', 'D'};

void awl_net_hello_encode(const net_hello *h, uint8_t out[NET_HELLO_BYTES])
{
    memset(out, 0, NET_HELLO_BYTES);
    memcpy(out, hello_magic, 4);
    net_put16(out + 4, h->version);
    net_put16(out + 6, h->kind);
    memcpy(out + 8, h->token, NET_TOKEN_BYTES);
    net_put32(out + 40, h->rank);
    net_put32(out + 44, h->world);
    net_put32(out + 48, h->group);
    net_put32(out + 60, awl_net_crc32(out, 60));
}

int awl_net_hello_decode(const uint8_t in[NET_HELLO_BYTES], net_hello *h, char *err, size_t size)
{
    if (memcmp(in, hello_magic, 4) != 0) {
        snprintf(err, size, "not an awl connection (the first bytes are %02x %02x %02x %02x)",
                 in[0], in[1], in[2], in[3]);
        return -1;
    }
    if (net_get32(in + 60) != awl_net_crc32(in, 60)) {
        snprintf(err, size, "a damaged handshake (CRC mismatch)");
        return -1;
    }
    h->version = net_get16(in + 4);
    h->kind = net_get16(in + 6);
    memcpy(h->token, in + 8, NET_TOKEN_BYTES);
    h->rank = net_get32(in + 40);
    h->world = net_get32(in + 44);
    h->group = net_get32(in + 48);
    if (h->version != NET_VERSION) {
        snprintf(err, size, "protocol version %u (this build speaks %d)", h->version, NET_VERSION);
        return -1;
    }
    return 0;
}

void awl_net_token_bytes(const char *token, uint8_t out[NET_TOKEN_BYTES])
{
    memset(out, 0, NET_TOKEN_BYTES);
    if (token) memcpy(out, token, strnlen(token, NET_TOKEN_BYTES));
}

int awl_net_split_address(const char *text, char *host, size_t host_size, int *port,
                          int default_port)
{
    const char *colon = strrchr(text, ':');
    size_t len = colon ? (size_t)(colon - text) : strlen(text);
    if (len == 0 || len >= host_size) return -1;
    memcpy(host, text, len);
    host[len] = '\0';
    *port = default_port;
    if (colon) {
        char *end;
        long p = strtol(colon + 1, &end, 10);
        if (*end || p < 0 || p > 65535) return -1;
        *port = (int)p;
    }
    return 0;
}
