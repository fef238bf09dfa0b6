/*
 * dist/store.h - the rendezvous key-value store: a small TCP server on rank
 * 0 (torchrun's TCPStore, in spirit) and the client every rank keeps.
 *
 * Ranks find each other through it: each publishes "where I listen" under
 * its rank and reads the others'. It offers what rendezvous needs and no
 * more: set, get (waits until the key exists), add (an atomic counter) and
 * wait (for several keys), each with a timeout.
 *
 * The server is one thread with one poll loop. A client must open with the
 * handshake of net.h (kind NET_KIND_STORE, the job's token); anything else
 * (a port scanner, another job, garbage) is logged and dropped, and the
 * store goes on serving the others. A request is checked against fixed
 * limits before anything is allocated for it:
 *
 *     request:  "AWLS" | cmd u8 | 0 0 0 | key_len u32 | value_len u32 | timeout_ms u32
 *               | key | value
 *     reply:    status u32 (0 ok, 1 timed out) | value_len u32 | value
 *
 * GET and WAIT time out on the server (which answers status 1), so a
 * client's connection never carries a late answer to an abandoned request.
 */
#ifndef AWL_DIST_STORE_H
#define AWL_DIST_STORE_H

#include <stddef.h>
#include <stdint.h>

#define STORE_MAX_KEY 1024
#define STORE_MAX_VALUE (16u << 20)

typedef struct store_server store_server;
typedef struct awl_store awl_store;

/* Starts the server thread on host:port. token: the job token; log_rank:
 * the rank named in log lines. NULL after writing why into err. */
store_server *awl_store_server_start(const char *host, int port, const char *token, int world,
                                 char *err, size_t size);
/* The port it listens on (useful when started on port 0). */
int awl_store_server_port(const store_server *s);
void awl_store_server_stop(store_server *s);

/* Connects to the store, retrying until `timeout` seconds have passed (rank
 * 0's server may start after the others). */
awl_store *awl_store_connect(const char *host, int port, const char *token, int rank, int world,
                         double timeout, char *err, size_t size);
void awl_store_close(awl_store *c);
/* The socket (for its local address: where this host is reachable). */
int awl_store_fd(const awl_store *c);

#endif
