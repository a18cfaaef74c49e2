/*
 * This file contains weft-bench's loopback test servers (server.c): a fresh
 * 127.0.0.1 port, and a fiber or a thread per accepted connection running
 * the measurement's handler.
 */
#ifndef WEFT_BENCH_SERVER_H
#define WEFT_BENCH_SERVER_H

#include <stdbool.h>
#include <stddef.h>

#include "net.h"

/*
 * What a server does with one accepted connection: 0 when it ended well,
 * else a negative errno (counted as a server error). The server closes fd
 * afterwards. ctx is the server's.
 */
typedef int (*wb_conn_fn)(void *ctx, int fd, wb_io io);

typedef struct wb_server wb_server;

/*
 * Start a server on a fresh 127.0.0.1 port (port 0: the kernel picks one,
 * so TIME_WAIT connections to an earlier server's port never collide with
 * this one's). The listen backlog asked for is the larger of SOMAXCONN and
 * backlog_hint; the kernel caps it at net.core.somaxconn. When backlog_hint
 * is more than that cap, the server opens enough listeners on the one port
 * (SO_REUSEPORT, at most 8) that their accept queues together hold
 * backlog_hint connects, each with its own acceptor: a burst of connects
 * that overflows one queue loses handshakes, whose clients then wait about
 * a second for the retransmission (docs/benchmarks.md). Every backend, the
 * Go baseline's included, listens the same way.
 *
 *   WB_IO_WEFT   an acceptor fiber (a WEFT_BLOCKING future) that starts a
 *                fiber (future) per connection;
 *   WB_IO_PLAIN  an acceptor thread that starts a thread per connection,
 *                with thread_stack bytes of stack.
 *
 * nodelay sets TCP_NODELAY on every accepted connection (see wb_net_connect).
 * Returns 0, or a negative errno with err filled.
 */
int wb_server_start(wb_io io, size_t backlog_hint, size_t thread_stack, bool nodelay, wb_conn_fn fn,
                    void *ctx, wb_server **out, char *err, size_t errlen);
const wb_addr *wb_server_addr(const wb_server *s);
/* The backlog in force, each listener's: min(asked, net.core.somaxconn). */
int wb_server_backlog(const wb_server *s);
/* How many listeners share the port (1 unless backlog_hint exceeded the cap). */
int wb_server_listeners(const wb_server *s);

typedef struct wb_server_stats {
  size_t accepted;
  size_t errors;
  char first_error[256];
} wb_server_stats;

/*
 * Stop accepting (shutdown(2) of the listener wakes the acceptor), then wait
 * for every connection's fiber or thread to end: clients must have closed
 * their side (each connection also ends at its own I/O timeout). Frees the
 * server; st (may be NULL) gets its counts.
 */
void wb_server_stop(wb_server *s, wb_server_stats *st);

/* The stack size of the thread backends: weft's fiber stack size, so that both compare like with like. */
size_t wb_net_thread_stack(void);

/*
 * The weft backends of echo and http differ in the runtime's io_uring
 * setting (`weft` the environment's, -1; `weft-epoll` 1): start the runtime
 * again (weft_shutdown, weft_configure) when the next repetition wants the
 * other one. Nothing of weft's may be running (http: with --url only).
 */
void wb_weft_io_uring(int want);

/*
 * wb_server_start on a chosen address (weft-bench serve): at names the
 * address and port to listen on (IPv4 or IPv6; port 0: the kernel picks
 * one, which wb_server_addr then gives). SO_REUSEADDR is set, so a fixed
 * port can be taken again while connections to an earlier server there sit
 * in TIME_WAIT. Otherwise the same as wb_server_start, which is this with
 * 127.0.0.1 port 0.
 */
int wb_server_start_at(wb_io io, const wb_addr *at, size_t backlog_hint, size_t thread_stack, bool nodelay,
                       wb_conn_fn fn, void *ctx, wb_server **out, char *err, size_t errlen);

#endif /* WEFT_BENCH_SERVER_H */
