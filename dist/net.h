/*
 * dist/net.h - TCP sockets with deadlines, and the bytes of awl's wire
 * formats: what the key-value store (store.c) and the TCP transport (tcp.c)
 * are built from.
 *
 * Every blocking step takes a deadline (seconds on the monotonic clock,
 * awl_net_now() + timeout) and gives up when it passes, so nothing here can
 * wait forever. Failures return a negative NET_* code and write a sentence
 * into the caller's `err` buffer (these run on communication threads,
 * where the thread-local error of common/error.h would reach nobody).
 *
 * Wire integers are little-endian, written byte by byte (net_put32, ...),
 * never by casting a struct, so the format does not depend on the
 * compiler's padding. Every header ends with a CRC-32 of what precedes it.
 */
#ifndef AWL_DIST_NET_H
#define AWL_DIST_NET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
    NET_OK = 0,
    NET_ERROR = -1,   /* a socket call failed (err says which, with errno's text) */
    NET_EOF = -2,     /* the peer closed the connection */
    NET_TIMEOUT = -3, /* the deadline passed */
};

/* Seconds on the monotonic clock. */
double awl_net_now(void);

/* A listening socket on host:port (host NULL or "": every interface; port
 * 0: any free port), with SO_REUSEADDR so a port freed by a finished job
 * can be bound again at once. Returns the fd, or -1. */
int awl_net_listen(const char *host, int port, char *err, size_t size);
/* The port a socket is bound to, or -1. */
int awl_net_local_port(int fd);
/* The local IP address of a connected socket ("10.0.0.2"): the address its
 * peers can reach this host at. */
int awl_net_local_ip(int fd, char *buf, size_t size);
/* "127.0.0.1:41234" for the remote end of a connected socket. */
const char *awl_net_peer_name(int fd, char *buf, size_t size);

/* Connects to host:port, retrying refused connections (the listener may
 * not be up yet) until the deadline. Returns the fd (blocking, TCP_NODELAY),
 * or -1. */
int awl_net_connect(const char *host, int port, double deadline, char *err, size_t size);
/* Accepts one connection, waiting until the deadline. Returns the fd or a
 * negative NET_* code. */
int awl_net_accept(int listen_fd, double deadline, char *err, size_t size);

int awl_net_set_nonblocking(int fd, bool on);
/* TCP_NODELAY: a frame leaves at once instead of waiting for the last
 * one's acknowledgement (Nagle's algorithm would add tens of ms). */
void awl_net_set_nodelay(int fd);

/* Sends / receives exactly n bytes before the deadline. */
int awl_net_send_all(int fd, const void *buf, size_t n, double deadline, char *err, size_t size);
int awl_net_recv_all(int fd, void *buf, size_t n, double deadline, char *err, size_t size);

/* ---- wire helpers -------------------------------------------------------------------------- */

static inline void net_put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static inline void net_put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void net_put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint16_t net_get16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t net_get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static inline uint64_t net_get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
uint32_t awl_net_crc32(const void *data, size_t n);

/* ---- the handshake ------------------------------------------------------------------------- */

/* Every connection, to the store or between ranks, opens with a hello from
 * each side (docs/distributed.md, "Handshake"):
 *
 *     offset  size  field
 *          0     4  magic "AWLD"
 *          4     2  protocol version (NET_VERSION)
 *          6     2  kind: NET_KIND_STORE, NET_KIND_CTRL or NET_KIND_DATA
 *          8    32  the job token (random per launch; zero-padded text)
 *         40     4  the sender's rank (the store's clients say their rank too)
 *         44     4  the world size
 *         48     4  the process group's id (0: the default group)
 *         52     8  reserved, zero
 *         60     4  CRC-32 of bytes 0..59
 */
#define NET_HELLO_BYTES 64
#define NET_TOKEN_BYTES 32
#define NET_VERSION 1
enum { NET_KIND_STORE = 1, NET_KIND_CTRL = 2, NET_KIND_DATA = 3 };

typedef struct net_hello {
    uint16_t version, kind;
    uint8_t token[NET_TOKEN_BYTES];
    uint32_t rank, world, group;
} net_hello;

void awl_net_hello_encode(const net_hello *h, uint8_t out[NET_HELLO_BYTES]);
/* Decodes and checks magic, CRC and version; on failure says why in err and
 * returns -1. */
int awl_net_hello_decode(const uint8_t in[NET_HELLO_BYTES], net_hello *h, char *err, size_t size);
/* The token as it travels: the text, zero-padded (longer tokens are cut). */
void awl_net_token_bytes(const char *token, uint8_t out[NET_TOKEN_BYTES]);

/* Parses "host:port" or a bare host (port = default_port). Returns 0 or -1. */
int awl_net_split_address(const char *text, char *host, size_t host_size, int *port,
                          int default_port);

#endif
