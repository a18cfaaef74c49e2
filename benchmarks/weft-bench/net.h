/*
 * This file contains weft-bench's client sockets (sock.c): the descriptor
 * limit, addresses and name resolution, a connect that retries with
 * backoff, and reads and writes that run either on weft's fiber-aware calls
 * or on plain blocking sockets. server.h has the loopback servers, http.h
 * the HTTP/1.1 client and server handler; the commands are cmd_http.c,
 * cmd_echo.c and the gpars http case.
 *
 * The same client and server code serves every backend: only `wb_io` says
 * whether a transfer goes through weft_read/weft_write (which park a fiber,
 * or block a plain thread in poll(2)) or through recv/send on a blocking
 * socket, as a C program without weft would do it.
 */
#ifndef WEFT_BENCH_NET_H
#define WEFT_BENCH_NET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

/* How a socket is driven. */
typedef enum wb_io {
  WB_IO_WEFT, /* weft_connect/read/write with absolute deadlines; the socket is O_NONBLOCK */
  WB_IO_PLAIN /* blocking connect/recv/send; SO_RCVTIMEO/SO_SNDTIMEO bound each call */
} wb_io;

/* Each connect attempt waits at most this long: a SYN dropped by a full accept queue is resent after 1 s. */
#define WB_CONNECT_ATTEMPT_NS (3 * 1000000000LL)

/* ------------------------------------------------------------------------ */
/* Descriptors and addresses                                                 */
/* ------------------------------------------------------------------------ */

/*
 * Raise RLIMIT_NOFILE's soft limit to the hard limit, then check that
 * `need` descriptors fit. Returns 0; -EMFILE after printing what to do
 * ("weft-bench CMD: ...") when the hard limit is too low. *limit gets the
 * soft limit in force afterwards.
 */
int wb_net_fd_limit(const char *cmd, uint64_t need, uint64_t *limit);

typedef struct wb_addr {
  struct sockaddr_storage ss;
  socklen_t len;
} wb_addr;

/*
 * Resolve host:port (numeric or a name) to its first TCP address. getaddrinfo
 * blocks (DNS, /etc/hosts, NSS modules), so it runs through weft_blocking:
 * on a fiber it goes to weft's offload pool, on a thread it simply runs.
 * Returns 0, or -ENOENT with err filled.
 */
int wb_net_resolve(const char *host, const char *port, wb_addr *out, char *err, size_t errlen);

/* "127.0.0.1:8080" or "[::1]:8080" for messages. */
void wb_net_addr_str(const wb_addr *a, char *out, size_t len);

/* ------------------------------------------------------------------------ */
/* Client sockets                                                            */
/* ------------------------------------------------------------------------ */

/*
 * Open a TCP connection to a; nodelay sets TCP_NODELAY (for a stream of
 * small messages, where a partial write could meet Nagle's algorithm and
 * the peer's delayed ACK; an HTTP GET is one write and needs no such help,
 * nor the system call). An attempt that times out (or finds no free port) is retried on a fresh
 * socket after a backoff (10 ms, doubling, at most 1 s) until timeout_ns
 * has passed; other errors (ECONNREFUSED) fail at once. *retries (may be
 * NULL) counts the retries. Returns 0 with the descriptor in *fd, or a
 * negative errno.
 */
int wb_net_connect(wb_io io, const wb_addr *a, bool nodelay, int64_t timeout_ns, int *fd, unsigned *retries);

/*
 * One read of at most len bytes: a count, 0 at end of stream, or a negative
 * errno (-ETIMEDOUT once deadline_ns passes; WB_IO_PLAIN bounds the call by
 * the socket's SO_RCVTIMEO instead).
 */
ssize_t wb_net_read(wb_io io, int fd, void *buf, size_t len, int64_t deadline_ns);

/*
 * One read without a copy where the socket is an owned descriptor
 * (weft_fd_read_lend): *data points at the count of bytes returned, which
 * stay valid until wb_net_read_done(io, fd, used), called after every
 * positive count; `used` of them are consumed and the rest come first in the
 * next read. Elsewhere one read of at most len bytes into buf (*data = buf),
 * whose bytes past `used` are dropped: ask for no more than will be used.
 */
ssize_t wb_net_read_lend(wb_io io, int fd, void *buf, size_t len, const void **data, int64_t deadline_ns);
void wb_net_read_done(wb_io io, int fd, size_t used);

/* Write all len bytes: 0 or a negative errno. SIGPIPE is never raised. */
int wb_net_write_all(wb_io io, int fd, const void *buf, size_t len, int64_t deadline_ns);

/* Read exactly len bytes: 0, -ENODATA when the stream ends first, or a negative errno. */
int wb_net_read_full(wb_io io, int fd, void *buf, size_t len, int64_t deadline_ns);

/*
 * Owned descriptors (weft_fd, weft.h). With WB_IO_WEFT, sockets are handed
 * to weft once (wb_net_adopt: weft_fd_open, which makes them non-blocking)
 * and found again by number; the transfers above then use weft_fd_read and
 * weft_fd_write, and wb_net_close closes through weft_fd_close. With
 * WB_IO_PLAIN, or WEFT_BENCH_RAW_FD=1 in the environment (the calls on raw
 * descriptors, for comparison), adopt does nothing and close is close(2).
 */
int wb_net_adopt(wb_io io, int fd);
/* Accept one connection on lfd (adopted when lfd is): the new descriptor or a negative errno. */
int wb_net_accept(wb_io io, int lfd);
int wb_net_close(int fd);
/* Does this run hand sockets to weft (not WEFT_BENCH_RAW_FD)? For reports. */
bool wb_net_owned_fds(void);

/* The absolute deadline timeout_ns from now, on weft's clock. */
int64_t wb_net_deadline(int64_t timeout_ns);

#endif /* WEFT_BENCH_NET_H */
