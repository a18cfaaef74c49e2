/*
 * This file contains what weft-bench's network measurements share (net.c):
 * the descriptor limit, loopback listeners and name resolution, a client
 * connect that retries with backoff, transfers that run either on weft's
 * fiber-aware calls or on plain blocking sockets, the two kinds of test
 * server (a fiber per connection on weft, a thread per connection on plain
 * sockets), error counting, and latency percentiles. The commands are
 * cmd_http.c and cmd_echo.c; http.c is the HTTP/1.1 client and server.
 *
 * The same client and server code serves every backend: only `wb_io` says
 * whether a transfer goes through weft_read/weft_write (which park a fiber,
 * or block a plain thread in poll(2)) or through recv/send on a blocking
 * socket, as a C program without weft would do it.
 */
#ifndef WEFT_BENCH_NET_H
#define WEFT_BENCH_NET_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

/* The network commands (their prototypes live here so that bench.h stays the harness's). */
int wb_cmd_http(int argc, char **argv);
int wb_cmd_echo(int argc, char **argv);

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

/* net.core.somaxconn: the kernel's cap on any listen backlog (-1 when unreadable). */
int wb_net_somaxconn(void);

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

/* Write all len bytes: 0 or a negative errno. SIGPIPE is never raised. */
int wb_net_write_all(wb_io io, int fd, const void *buf, size_t len, int64_t deadline_ns);

/* Read exactly len bytes: 0, -ENODATA when the stream ends first, or a negative errno. */
int wb_net_read_full(wb_io io, int fd, void *buf, size_t len, int64_t deadline_ns);

/* The absolute deadline timeout_ns from now, on weft's clock. */
int64_t wb_net_deadline(int64_t timeout_ns);

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */
/* ------------------------------------------------------------------------ */

/* Failures counted by many fibers or threads at once; the first one is kept as text. */
typedef struct wb_errors {
  atomic_size_t count;
  atomic_flag first_taken; /* set by the one writer of `first` */
  atomic_bool first_ready; /* release: `first` is complete (pairs with the acquire in wb_errors_first) */
  char first[256];
} wb_errors;

void wb_errors_init(wb_errors *e);
/* Count one failure: "stage: weft_strerror(err)" (or detail, when not NULL, instead of the strerror). */
void wb_errors_add(wb_errors *e, const char *stage, int err, const char *detail);
size_t wb_errors_count(wb_errors *e);
/* The first failure's text, or "" when there was none. */
const char *wb_errors_first(wb_errors *e);

/* ------------------------------------------------------------------------ */
/* Servers                                                                   */
/* ------------------------------------------------------------------------ */

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
 * backlog_hint; the kernel caps it at net.core.somaxconn.
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
/* The backlog in force: min(asked, net.core.somaxconn). */
int wb_server_backlog(const wb_server *s);

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

/* ------------------------------------------------------------------------ */
/* Latency                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct wb_latency {
  double p50, p90, p99, max; /* milliseconds (nearest rank); NAN when n == 0 */
  size_t n;                  /* samples that counted */
} wb_latency;

/* Percentiles of us[0..n) in microseconds; NAN entries (failed operations) are left out. Sorts us. */
wb_latency wb_latency_summary(float *us, size_t n);

/* ------------------------------------------------------------------------ */
/* Reports over repetitions                                                  */
/* ------------------------------------------------------------------------ */

/* CPU time (user + system) this process has used so far, in milliseconds: all its threads. */
double wb_cpu_ms(void);

/* Median and maximum of n samples; NAN when n == 0. */
double wb_median(const double *v, size_t n);
double wb_max(const double *v, size_t n);

/* Set key to v, or to null when v is NAN. */
struct json_value;
int wb_json_num_or_null(struct json_value *rec, const char *key, double v);

/*
 * Ratios of two backends' rates measured in the same run: key gets the
 * ratio of the medians (a over b), key_samples the ratio in each repetition
 * (both ran back to back there, so the machine's slow minutes cancel). Null
 * when either has no sample.
 */
int wb_json_add_ratio(struct json_value *rec, const char *key, const double *a, size_t na, const double *b,
                      size_t nb);

/* Per-repetition ratios a[r] / b[r] into out (at least min(na, nb) long); returns how many. */
size_t wb_ratios(const double *a, size_t na, const double *b, size_t nb, double *out);

/* Print " %W.Pf" of v, or a right-aligned "-" when v is NAN (a figure that no sample gave). */
void wb_print_cell(double v, int width, int prec);

/* Print "  NAME: 3.12x (per repetition: median 3.10x, min 2.80x, max 3.40x)" for a over b. */
void wb_print_ratio(const char *name, const double *a, size_t na, const double *b, size_t nb);

/* ------------------------------------------------------------------------ */
/* Options shared by the network commands                                    */
/* ------------------------------------------------------------------------ */

/*
 * Parse a comma-separated backend list against names[0..nnames): each known,
 * none twice. chosen[] gets indices into names. Returns true, or false after
 * a usage message.
 */
bool wb_net_parse_backends(const char *cmd, const char *list, const char *const *names, size_t nnames,
                           size_t *chosen, size_t *nchosen);

#endif /* WEFT_BENCH_NET_H */
