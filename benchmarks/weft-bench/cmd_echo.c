/*
 * This file contains `weft-bench echo`: C loopback TCP connections at once,
 * each sending M messages of B bytes and reading each one back before the
 * next (a round trip per message), in three versions in one run:
 *
 *   weft     server: an acceptor fiber and a fiber per accepted connection;
 *            client: a WEFT_BLOCKING weft_pmap over the C connections with no
 *            bound, so a fiber per connection; weft_connect/read/write
 *   threads  server: an acceptor thread and a thread per connection; client:
 *            a thread per connection; plain blocking sockets throughout
 *   go       the Go baseline (benchmarks/go/echo, weft-go-echo): the same
 *            protocol in a program of its own, a goroutine per connection on
 *            both sides; a fresh process per repetition, skipped without Go
 *
 * weft and threads run the same client and server functions (only wb_io
 * differs), and threads get the same stack size as weft's fibers, so what
 * differs is how waiting is done: a parked fiber against a blocked thread.
 * The Go program measures itself the same way (both sides in its process,
 * timed from the start of its clients to their end) and prints one record,
 * which measure_go reads back into the figures the other two give.
 *
 * Every repetition gets a fresh server on a fresh port: each connection ends
 * with the client closing first, which leaves the client's port in
 * TIME_WAIT, and a new server port keeps those old connections from
 * colliding with the next repetition's (a four-tuple must be unique).
 */
#define _POSIX_C_SOURCE 200809L
#include "driver.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "net.h"
#include "server.h"
#include "weft.h"

#define MAX_CONNECTIONS 100000
#define MAX_MESSAGES    10000000
#define MAX_SIZE        (16 * 1024 * 1024)
#define MAX_SAMPLES     50000000 /* C x M round trips, a float of latency each */
#define MAX_TIMEOUT_MS  3600000
#define STACK_BUF       4096 /* messages up to this size live on the client's stack */

static const char echo_help[] =
    "usage: weft-bench echo [--connections C] [--messages M] [--size B]\n"
    "                       [--warmup-connections W] [--backend B[,B...]]\n"
    "                       [--timeout-ms T] [--repeat K] [--json]\n"
    "\n"
    "C loopback TCP connections at once, each echoing M messages of B bytes (one\n"
    "round trip per message): messages/s, MB/s, round-trip latency percentiles,\n"
    "errors.\n"
    "\n"
    "  --connections C  concurrent connections (default 1000)\n"
    "  --messages M     round trips per connection (default 100)\n"
    "  --size B         bytes per message (default 64)\n"
    "  --warmup-connections W  connections of the untimed warm-up right before\n"
    "                   every measurement, min(M, 10) messages each (default C,\n"
    "                   at most C; 0: none)\n"
    "  --backend B      weft     a fiber per connection on both sides (weft I/O; by\n"
    "                            default the carriers wait in io_uring, and socket\n"
    "                            reads and writes are ring requests)\n"
    "                   weft-epoll  the same with WEFT_IO_URING=1: sockets through\n"
    "                            epoll, read(2) and send(2)\n"
    "                   threads  a thread per connection on both sides (blocking\n"
    "                            sockets, threads with weft's fiber stack size)\n"
    "                   go       a goroutine per connection on both sides (the Go\n"
    "                            baseline weft-go-echo, a process per repetition;\n"
    "                            skipped with a message when this build has no Go)\n"
    "                   a comma-separated list; default: weft,threads, and go\n"
    "                   when its program is there\n"
    "  --timeout-ms T   limit of each round trip, and of connecting (default 30000)\n"
    "  --repeat K       K repetitions, backends interleaved; medians and spread\n"
    "  --json           one JSON object per backend (JSON Lines) on stdout\n"
    "  --help           this text\n"
    "\n"
    "Every measurement directly follows its warm-up: the go backend's program runs\n"
    "its own in each of its processes, the others run theirs before each\n"
    "repetition, so that each is measured after W connections' worth of stacks,\n"
    "threads and buffers, not after whatever ran between its repetitions.\n"
    "The run needs 2 x C descriptors: the soft limit is raised to the hard limit,\n"
    "and a run that needs more says so and exits 1. Connects that time out (a full\n"
    "accept queue drops SYNs) are retried with backoff. The go backend's figures\n"
    "are its program's own; $WEFT_BENCH_GO_DIR names the folder of the Go\n"
    "baselines (default: this build's). Exit codes: 0 ok (also when go is\n"
    "skipped), 1 a connection or the server failed, 2 usage.\n";

enum { B_WEFT, B_THREADS, B_GO, B_WEFT_EPOLL, NBACKENDS };

/* ------------------------------------------------------------------------ */
/* Server and client                                                         */
/* ------------------------------------------------------------------------ */

typedef struct echo_srv {
  int64_t timeout_ns;
} echo_srv;

/* The server's side of one connection: send back whatever arrives, until the client closes. */
static int echo_serve(void *ctx, int fd, wb_io io) {
  const echo_srv *e = ctx;
  char buf[16384];
  if (io == WB_IO_PLAIN) {
    /* A blocking read with no limit would hang this thread on a client that vanished. */
    struct timeval tv = {.tv_sec = (time_t)(e->timeout_ns / 1000000000),
                         .tv_usec = (suseconds_t)(e->timeout_ns % 1000000000 / 1000)};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  for (;;) {
    int64_t deadline = wb_net_deadline(e->timeout_ns);
    ssize_t n = wb_net_read(io, fd, buf, sizeof buf, deadline);
    if (n == 0) return 0;
    if (n < 0) return (int)n;
    int rc = wb_net_write_all(io, fd, buf, (size_t)n, deadline);
    if (rc < 0) return rc;
  }
}

typedef struct echo_run {
  wb_io io;
  wb_addr addr;
  size_t messages, size;
  int64_t timeout_ns;
  float *lat_us;         /* connections x messages round trips, microseconds; NAN when not done */
  wb_errors errors;      /* failed connections */
  atomic_size_t msgs_ok; /* round trips that came back right */
  atomic_uint retries;   /* connect retries */
  size_t stack;          /* threads backend */
} echo_run;

/* The bytes of message m of connection c: different for every (c, m), so a mix-up cannot pass. */
static void fill(unsigned char *p, size_t n, size_t c, size_t m) {
  for (size_t j = 0; j < n; j++) p[j] = (unsigned char)(j * 7 + m * 13 + c * 31);
}

/* The client's side of connection c: any context (fiber or thread). Failures are counted, never returned. */
static int echo_client(void *arg, size_t c) {
  echo_run *e = arg;
  float *lat = e->lat_us + c * e->messages;
  unsigned char small[2][STACK_BUF];
  unsigned char *sbuf = small[0], *rbuf = small[1], *heap = NULL;
  if (e->size > STACK_BUF) {
    heap = malloc(2 * e->size);
    if (!heap) {
      wb_errors_add(&e->errors, "client", -ENOMEM, NULL);
      return 0;
    }
    sbuf = heap;
    rbuf = heap + e->size;
  }
  int fd;
  unsigned retries = 0;
  int rc = wb_net_connect(e->io, &e->addr, true, e->timeout_ns, &fd, &retries);
  if (retries) atomic_fetch_add_explicit(&e->retries, retries, memory_order_relaxed);
  if (rc < 0) {
    wb_errors_add(&e->errors, "connect", rc, NULL);
    free(heap);
    return 0;
  }
  size_t ok = 0;
  for (size_t m = 0; m < e->messages; m++) {
    fill(sbuf, e->size, c, m);
    int64_t t0 = wb_now_ns();
    int64_t deadline = t0 + e->timeout_ns;
    rc = wb_net_write_all(e->io, fd, sbuf, e->size, deadline);
    if (rc < 0) {
      wb_errors_add(&e->errors, "send", rc, NULL);
      break;
    }
    rc = wb_net_read_full(e->io, fd, rbuf, e->size, deadline);
    if (rc < 0) {
      wb_errors_add(&e->errors, "recv", rc, rc == -ENODATA ? "the server closed the connection early" : NULL);
      break;
    }
    int64_t t1 = wb_now_ns();
    if (memcmp(sbuf, rbuf, e->size) != 0) {
      wb_errors_add(&e->errors, "echo", -EBADMSG, "a message came back different");
      break;
    }
    lat[m] = (float)((double)(t1 - t0) / 1e3);
    ok++;
  }
  wb_net_close(fd);
  atomic_fetch_add_explicit(&e->msgs_ok, ok, memory_order_relaxed);
  free(heap);
  return 0;
}

static void run_weft(echo_run *e, size_t connections) {
  weft_pmap_opts o = WEFT_PMAP_OPTS_INIT;
  o.kind = WEFT_BLOCKING; /* max_parallel 0: every connection at once, a fiber each */
  int rc = weft_pmap(connections, echo_client, e, &o);
  if (rc < 0) wb_errors_add(&e->errors, "weft_pmap", rc, NULL);
}

typedef struct thread_arg {
  echo_run *e;
  size_t c;
} thread_arg;

static void *thread_main(void *arg) {
  thread_arg *t = arg;
  echo_client(t->e, t->c);
  return NULL;
}

static void run_threads(echo_run *e, size_t connections) {
  pthread_t *tids = malloc(connections * sizeof *tids);
  thread_arg *args = malloc(connections * sizeof *args);
  if (!tids || !args) {
    free(tids);
    free(args);
    wb_errors_add(&e->errors, "threads", -ENOMEM, NULL);
    return;
  }
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, e->stack);
  size_t made = 0;
  int rc = 0;
  for (; made < connections; made++) {
    args[made].e = e;
    args[made].c = made;
    if ((rc = pthread_create(&tids[made], &attr, thread_main, &args[made])) != 0) break;
  }
  if (rc != 0) {
    /* Every connection that got no thread is one failure; the message says how far it got. */
    char what[96];
    snprintf(what, sizeof what, "pthread_create failed after %zu of %zu threads: %s", made, connections,
             weft_strerror(-rc));
    wb_errors_add(&e->errors, "client", -rc, what);
    atomic_fetch_add(&e->errors.count, connections - made - 1);
  }
  for (size_t i = 0; i < made; i++) pthread_join(tids[i], NULL);
  pthread_attr_destroy(&attr);
  free(tids);
  free(args);
}

typedef struct run_result {
  double elapsed_ms;
  double cpu_ms; /* the process's CPU time during the clients' run: both sides, all threads */
  size_t msgs_ok, failed_conns;
  unsigned retries;
  wb_latency lat;
  double p99_first, p99_rest; /* the p99 of each connection's first round trip, and of the others */
  wb_server_stats srv;
  int backlog, listeners;
  char first_error[256];
} run_result;

typedef struct echo_setup {
  size_t messages, size;
  int64_t timeout_ns;
  size_t stack;
} echo_setup;

/*
 * The p99 of each connection's first round trip and of all the others,
 * before lat is summed up (the summary sorts it). A tail made of first
 * messages says connections were served late (accepted, or first read,
 * after the burst of connects); one in the rest says round trips were slow.
 */
static void latency_split(const float *lat, size_t connections, size_t messages, run_result *res) {
  res->p99_first = res->p99_rest = NAN;
  float *first = malloc(connections * sizeof *first);
  float *rest = messages > 1 ? malloc(connections * (messages - 1) * sizeof *rest) : NULL;
  if (first) {
    for (size_t c = 0; c < connections; c++) first[c] = lat[c * messages];
    res->p99_first = wb_latency_summary(first, connections).p99;
  }
  if (rest) {
    for (size_t c = 0; c < connections; c++)
      memcpy(rest + c * (messages - 1), lat + c * messages + 1, (messages - 1) * sizeof *rest);
    res->p99_rest = wb_latency_summary(rest, connections * (messages - 1)).p99;
  }
  free(first);
  free(rest);
}

/* One measurement: a fresh server of the backend's kind, the clients (timed), the server's stop. */
static void measure(const echo_setup *es, int b, size_t connections, float *lat, run_result *res) {
  memset(res, 0, sizeof *res);
  bool weft = b == B_WEFT || b == B_WEFT_EPOLL;
  if (weft) wb_weft_io_uring(b == B_WEFT_EPOLL ? 1 : -1);
  wb_io io = weft ? WB_IO_WEFT : WB_IO_PLAIN;
  echo_srv sctx = {es->timeout_ns};
  wb_server *srv;
  char err[256];
  int rc = wb_server_start(io, connections, es->stack, true, echo_serve, &sctx, &srv, err, sizeof err);
  if (rc < 0) {
    res->failed_conns = connections;
    snprintf(res->first_error, sizeof res->first_error, "%s", err);
    res->lat = wb_latency_summary(lat, 0);
    return;
  }
  res->backlog = wb_server_backlog(srv);
  res->listeners = wb_server_listeners(srv);
  echo_run e;
  memset(&e, 0, sizeof e);
  e.io = io;
  e.addr = *wb_server_addr(srv);
  e.messages = es->messages;
  e.size = es->size;
  e.timeout_ns = es->timeout_ns;
  e.lat_us = lat;
  e.stack = es->stack;
  wb_errors_init(&e.errors);
  atomic_init(&e.msgs_ok, 0);
  atomic_init(&e.retries, 0);
  size_t nsamples = connections * es->messages;
  for (size_t i = 0; i < nsamples; i++) lat[i] = NAN;
  wb_usage u0 = wb_usage_now();
  int64_t t0 = wb_now_ns();
  if (weft)
    run_weft(&e, connections);
  else
    run_threads(&e, connections);
  res->elapsed_ms = (double)(wb_now_ns() - t0) / 1e6;
  res->cpu_ms = wb_usage_cpu_ms(wb_usage_since(wb_usage_now(), u0));
  wb_server_stop(srv, &res->srv);
  res->msgs_ok = atomic_load(&e.msgs_ok);
  res->failed_conns = wb_errors_count(&e.errors);
  res->retries = atomic_load(&e.retries);
  snprintf(res->first_error, sizeof res->first_error, "%s",
           res->failed_conns ? wb_errors_first(&e.errors) : res->srv.first_error);
  latency_split(lat, connections, es->messages, res);
  res->lat = wb_latency_summary(lat, nsamples);
}

/* ------------------------------------------------------------------------ */
/* The command                                                               */
/* ------------------------------------------------------------------------ */

enum { OPT_CONNECTIONS = 1, OPT_MESSAGES, OPT_SIZE, OPT_TIMEOUT, OPT_WARMUP_CONNS };

static const wb_opt echo_opts[] = {
    {"connections", true, OPT_CONNECTIONS},
    {"messages", true, OPT_MESSAGES},
    {"size", true, OPT_SIZE},
    {"timeout-ms", true, OPT_TIMEOUT},
    {"warmup-connections", true, OPT_WARMUP_CONNS},
    {NULL, false, 0},
};

static const wb_choice echo_backends[] = {
    {"weft", "fiber per connection (weft I/O)", NULL, B_WEFT},
    {"threads", "thread per connection (blocking sockets)", NULL, B_THREADS},
    {"go", "goroutine per connection (Go)", NULL, B_GO},
    {"weft-epoll", "fiber per connection (weft I/O, WEFT_IO_URING=1)", NULL, B_WEFT_EPOLL},
};

/* M_P50 .. M_CORES together and in this order: wb_print_net_cells prints them. */
enum { M_MPS, M_MBPS, M_P50, M_P90, M_P99, M_PMAX, M_CPU_US, M_CORES, M_P99_FIRST, M_P99_REST, NMETRICS };
static const wb_metric echo_metrics[NMETRICS] = {
    {"msgs_per_s", WB_METRIC_MINMAX | WB_METRIC_SAMPLES, 1e-3},
    {"mb_per_s", 0, 1e-3},
    {"latency_ms_p50", 0, 1e-3},
    {"latency_ms_p90", 0, 1e-3},
    {"latency_ms_p99", 0, 1e-3},
    {"latency_ms_max", WB_METRIC_MAX, 1e-3},
    {"cpu_us_per_message", 0, 1e-3},
    {"cpu_cores_used", 0, 1e-2},
    {"latency_ms_p99_first", 0, 1e-3},
    {"latency_ms_p99_rest", 0, 1e-3},
};

/* What a backend adds up over its repetitions besides the samples. */
typedef struct echo_totals {
  size_t failed_conns, msgs_failed, server_errors, warmup_errors;
  size_t accepted; /* weft-bench's own backends: connections their servers accepted, warm-ups included */
  unsigned retries;
  int backlog, listeners;
  /* go: what its records say about the program (the last one's), and its largest peak RSS */
  char go_version[64];
  int64_t gomaxprocs;
  double peak_rss_kb; /* NAN: none read */
} echo_totals;

typedef struct echo_cmd {
  int64_t connections, messages, size, timeout_ms;
  int64_t warmup_conns; /* --warmup-connections; -1: C */
  echo_setup es;
  float *lat; /* a latency per round trip */
  echo_totals totals[NBACKENDS];
} echo_cmd;

static int echo_option(wb_driver *d, int id, const char *arg) {
  echo_cmd *c = d->ctx;
  bool ok = true;
  switch (id) {
  case OPT_CONNECTIONS:
    ok = wb_parse_i64("echo", "connections", arg, 1, MAX_CONNECTIONS, &c->connections);
    break;
  case OPT_MESSAGES:
    ok = wb_parse_i64("echo", "messages", arg, 1, MAX_MESSAGES, &c->messages);
    break;
  case OPT_SIZE:
    ok = wb_parse_i64("echo", "size", arg, 1, MAX_SIZE, &c->size);
    break;
  case OPT_TIMEOUT:
    ok = wb_parse_i64("echo", "timeout-ms", arg, 1, MAX_TIMEOUT_MS, &c->timeout_ms);
    break;
  case OPT_WARMUP_CONNS:
    ok = wb_parse_i64("echo", "warmup-connections", arg, 0, MAX_CONNECTIONS, &c->warmup_conns);
    break;
  }
  return ok ? 0 : WB_EXIT_USAGE;
}

static int echo_prepare(wb_driver *d) {
  echo_cmd *c = d->ctx;
  if (c->connections * c->messages > MAX_SAMPLES)
    return wb_usage_error("echo", "--connections x --messages is %lld, over %d round trips",
                          (long long)(c->connections * c->messages), MAX_SAMPLES);
  if (c->warmup_conns > c->connections)
    return wb_usage_error("echo", "--warmup-connections %lld is more than --connections %lld",
                          (long long)c->warmup_conns, (long long)c->connections);
  if (c->warmup_conns < 0) c->warmup_conns = c->connections;
  /* Both ends of every connection live in this process, plus a listener and weft's own descriptors. */
  uint64_t fd_limit;
  if (wb_net_fd_limit("echo", (uint64_t)c->connections * 2 + 64, &fd_limit) < 0) return WB_EXIT_FAIL;
  for (size_t j = 0; j < d->npicked; j++) {
    const wb_choice *ch = wb_picked(d, j);
    wb_run *r = wb_add_run(d, ch->name, ch->id);
    if (!r) return WB_EXIT_FAIL;
    r->label = ch->label;
    r->state = &c->totals[ch->id];
    c->totals[ch->id].peak_rss_kb = NAN;
    if (ch->id == B_GO) r->family = "go";
  }
  return 0;
}

static int echo_args(wb_driver *d, wb_args *a) {
  echo_cmd *c = d->ctx;
  wb_args_int(a, "--connections", c->connections);
  wb_args_int(a, "--messages", c->messages);
  wb_args_int(a, "--size", c->size);
  wb_args_int(a, "--warmup-connections", c->warmup_conns);
  wb_args_picked(d, a);
  wb_args_int(a, "--timeout-ms", c->timeout_ms);
  wb_args_repeat(d, a);
  return 0;
}

static int echo_setup_run(wb_driver *d) {
  echo_cmd *c = d->ctx;
  c->es = (echo_setup){(size_t)c->messages, (size_t)c->size, c->timeout_ms * 1000000, wb_net_thread_stack()};
  size_t nsamples = (size_t)c->connections * (size_t)c->messages;
  if (!(c->lat = malloc(nsamples * sizeof *c->lat))) {
    fprintf(stderr, "weft-bench echo: out of memory for %zu latencies\n", nsamples);
    return WB_EXIT_FAIL;
  }
  return 0;
}

/* ------------------------------------------------------------------------ */
/* The go backend                                                            */
/* ------------------------------------------------------------------------ */

static double num_or_nan(const json_t *rec, const char *key) {
  double v;
  return wb_json_get_num(rec, key, &v) ? v : NAN;
}

static size_t count_of(const json_t *rec, const char *key) {
  double v;
  return wb_json_get_num(rec, key, &v) && v > 0 ? (size_t)v : 0;
}

/*
 * One repetition of the go backend: weft-go-echo with the run's values and
 * the warm-up the other backends got (it warms itself up, untimed, as every
 * repetition is a fresh process), then its record read into res as measure
 * would have filled it. 0, WB_SKIP without the program, or a negative errno
 * when it gave no figures (err says why).
 */
static int measure_go(const echo_setup *es, size_t connections, size_t warm_conns, size_t warm_msgs,
                      echo_totals *t, run_result *res, char *err, size_t errlen) {
  memset(res, 0, sizeof *res);
  char path[4096];
  if (wb_go_find("weft-go-echo", path, sizeof path, err, errlen) < 0) return WB_SKIP;
  char conns_s[24], msgs_s[24], size_s[24], timeout_s[24], wc_s[24], wm_s[24];
  snprintf(conns_s, sizeof conns_s, "%zu", connections);
  snprintf(msgs_s, sizeof msgs_s, "%zu", es->messages);
  snprintf(size_s, sizeof size_s, "%zu", es->size);
  snprintf(timeout_s, sizeof timeout_s, "%lld", (long long)(es->timeout_ns / 1000000));
  snprintf(wc_s, sizeof wc_s, "%zu", warm_conns);
  snprintf(wm_s, sizeof wm_s, "%zu", warm_msgs);
  char *argv[] = {
      path,      "-connections",        conns_s, "-messages",        msgs_s, "-size", size_s, "-timeout-ms",
      timeout_s, "-warmup-connections", wc_s,    "-warmup-messages", wm_s,   NULL};
  json_t *rec = NULL;
  int code;
  int rc = wb_run_json(path, argv, NULL, &rec, &code);
  /* Exit code 1 with a record: connections failed, and the record has the figures and the first error. */
  const char *status = wb_json_get_str(rec, "status");
  double ms, ok;
  if (rc < 0 || (code != 0 && code != 1) || !status || !wb_json_get_num(rec, "elapsed_ms", &ms) ||
      !wb_json_get_num(rec, "messages_ok", &ok)) {
    json_decref(rec);
    snprintf(err, errlen, "%.180s failed (exit code %d)", path, code);
    return rc < 0 ? rc : -EIO;
  }
  res->elapsed_ms = ms;
  res->cpu_ms = (num_or_nan(rec, "cpu_user_s") + num_or_nan(rec, "cpu_sys_s")) * 1000.0;
  res->msgs_ok = ok > 0 ? (size_t)ok : 0;
  res->failed_conns = count_of(rec, "failed_connections");
  res->srv.errors = count_of(rec, "server_errors");
  res->retries = (unsigned)count_of(rec, "connect_retries");
  res->backlog = (int)num_or_nan(rec, "listen_backlog");
  res->listeners = (int)count_of(rec, "listeners");
  res->lat.p50 = num_or_nan(rec, "latency_ms_p50");
  res->lat.p90 = num_or_nan(rec, "latency_ms_p90");
  res->lat.p99 = num_or_nan(rec, "latency_ms_p99");
  res->lat.max = num_or_nan(rec, "latency_ms_max");
  res->p99_first = num_or_nan(rec, "latency_ms_p99_first");
  res->p99_rest = num_or_nan(rec, "latency_ms_p99_rest");
  const char *first = wb_json_get_str(rec, "error");
  if (!first && strcmp(status, "ok") != 0) first = "weft-go-echo reported a failure";
  snprintf(res->first_error, sizeof res->first_error, "%s", first ? first : "");
  snprintf(res->srv.first_error, sizeof res->srv.first_error, "%s", res->first_error);
  if (!res->failed_conns && !res->srv.errors && (res->msgs_ok != connections * es->messages || first)) {
    /* Round trips missing with no failure counted, or a failure with no count: the program is at odds with
     * itself, and the run cannot pass. */
    res->srv.errors = 1;
    if (!first)
      snprintf(res->first_error, sizeof res->first_error,
               "weft-go-echo: %zu of %zu round trips, no failure counted", res->msgs_ok,
               connections * es->messages);
    snprintf(res->srv.first_error, sizeof res->srv.first_error, "%s", res->first_error);
  }
  t->warmup_errors += count_of(rec, "warmup_errors");
  const char *v = wb_json_get_str(rec, "go_version");
  snprintf(t->go_version, sizeof t->go_version, "%s", v ? v : "unknown");
  double x;
  t->gomaxprocs = wb_json_get_num(rec, "gomaxprocs", &x) ? (int64_t)x : -1;
  if (wb_json_get_num(rec, "peak_rss_kb", &x) && (isnan(t->peak_rss_kb) || x > t->peak_rss_kb))
    t->peak_rss_kb = x;
  json_decref(rec);
  return 0;
}

/* Messages on each warm-up connection: min(M, 10). */
static size_t warmup_messages(const echo_cmd *c) { return c->messages < 10 ? (size_t)c->messages : 10; }

/*
 * The warm-up, untimed: W connections of min(M, 10) messages (weft's
 * carriers and fiber stacks, the threads' stacks, the sockets' buffers),
 * once in the driver's warm-up phase and again right before every timed
 * repetition (WB_CMD_WARMUP_EACH), as the go program runs it in each of its
 * processes: each backend is measured after the same warm-up, not after
 * whatever ran between its repetitions (weft-epoll restarts the runtime, an
 * idle runtime gives stack memory back).
 */
static int echo_measure(wb_driver *d, wb_run *r, wb_phase phase, wb_sample *s) {
  echo_cmd *c = d->ctx;
  echo_totals *t = r->state;
  echo_setup es = c->es;
  size_t conns = (size_t)c->connections;
  size_t warm_conns = (size_t)c->warmup_conns, warm_msgs = warmup_messages(c);
  run_result res;
  if (r->id == B_GO) {
    /* The go program warms itself up in each of its processes; here, only whether it is there. */
    char path[4096];
    if (phase == WB_WARMUP) {
      s->idle = true;
      return wb_go_find("weft-go-echo", path, sizeof path, s->error, sizeof s->error) < 0 ? WB_SKIP : 0;
    }
    int rc = measure_go(&es, conns, warm_conns, warm_msgs, t, &res, s->error, sizeof s->error);
    if (rc != 0) return rc;
  } else if (phase == WB_WARMUP) {
    if (!warm_conns) {
      s->idle = true;
      return 0;
    }
    echo_setup wes = es;
    wes.messages = warm_msgs;
    measure(&wes, r->id, warm_conns, c->lat, &res);
    t->warmup_errors += res.failed_conns + res.srv.errors;
    t->accepted += res.srv.accepted;
    s->quiet = true;
    if (res.failed_conns || res.srv.errors) {
      s->failed = true;
      snprintf(s->error, sizeof s->error, "%s", res.first_error);
    }
    return 0;
  } else {
    measure(&es, r->id, conns, c->lat, &res);
    t->accepted += res.srv.accepted;
  }
  /* Failed connections are counted and reported, never fatal: the figures stand, the record says "failed". */
  s->quiet = true;
  if (res.failed_conns || res.srv.errors) {
    s->failed = true;
    snprintf(s->error, sizeof s->error, "%s", res.first_error);
  }
  double sec = res.elapsed_ms / 1000.0;
  s->ms = res.elapsed_ms;
  s->m[M_MPS] = sec > 0 ? (double)res.msgs_ok / sec : 0;
  s->m[M_MBPS] = sec > 0 ? (double)res.msgs_ok * (double)es.size / sec / 1e6 : 0;
  s->m[M_P50] = res.lat.p50;
  s->m[M_P90] = res.lat.p90;
  s->m[M_P99] = res.lat.p99;
  s->m[M_PMAX] = res.lat.max;
  s->m[M_CPU_US] = res.msgs_ok ? res.cpu_ms * 1000.0 / (double)res.msgs_ok : NAN;
  s->m[M_CORES] = res.elapsed_ms > 0 ? res.cpu_ms / res.elapsed_ms : NAN;
  s->m[M_P99_FIRST] = res.p99_first;
  s->m[M_P99_REST] = res.p99_rest;
  t->failed_conns += res.failed_conns;
  t->msgs_failed += conns * es.messages - res.msgs_ok;
  t->server_errors += res.srv.errors;
  t->retries += res.retries;
  t->backlog = res.backlog;
  t->listeners = res.listeners;
  return 0;
}

static int echo_record(wb_driver *d, const wb_run *r, json_t *rec) {
  echo_cmd *c = d->ctx;
  const echo_totals *t = r->state;
  int rc = wb_json_set_str(rec, "label", wb_run_label(r));
  if (rc == 0) rc = wb_json_set_int(rec, "connections", c->connections);
  if (rc == 0) rc = wb_json_set_int(rec, "messages", c->messages);
  if (rc == 0) rc = wb_json_set_int(rec, "size", c->size);
  if (rc == 0) rc = wb_json_set_int(rec, "timeout_ms", c->timeout_ms);
  if (rc == 0) rc = wb_json_set_int(rec, "errors", (int64_t)(t->failed_conns + t->server_errors));
  if (rc == 0) rc = wb_json_set_int(rec, "failed_connections", (int64_t)t->failed_conns);
  if (rc == 0) rc = wb_json_set_int(rec, "messages_failed", (int64_t)t->msgs_failed);
  if (rc == 0) rc = wb_json_set_int(rec, "server_errors", (int64_t)t->server_errors);
  if (rc == 0) rc = wb_json_set_int(rec, "warmup_errors", (int64_t)t->warmup_errors);
  if (rc == 0) rc = wb_json_set_int(rec, "warmup_connections", c->warmup_conns);
  if (rc == 0)
    rc = r->id == B_GO ? wb_json_set_null(rec, "server_connections")
                       : wb_json_set_int(rec, "server_connections", (int64_t)t->accepted);
  if (rc == 0) rc = wb_json_set_int(rec, "warmup_messages", (int64_t)warmup_messages(c));
  if (rc == 0) rc = wb_json_set_int(rec, "connect_retries", t->retries);
  if (rc == 0) rc = wb_json_set_int(rec, "listen_backlog", t->backlog);
  if (rc == 0) rc = wb_json_set_int(rec, "listeners", t->listeners);
  if (rc == 0 && r->id == B_THREADS) rc = wb_json_set_int(rec, "thread_stack", (int64_t)c->es.stack);
  if (rc == 0 && r->id == B_GO && t->go_version[0]) {
    /* The Go program's own process: its peak RSS (the largest over the repetitions) and runtime. */
    rc = wb_json_set_num(rec, "peak_rss_kb", t->peak_rss_kb);
    if (rc == 0) rc = wb_json_set_str(rec, "go_version", t->go_version);
    if (rc == 0) rc = wb_json_set_int(rec, "gomaxprocs", t->gomaxprocs);
  }
  if (rc == 0 && (r->id == B_WEFT || r->id == B_WEFT_EPOLL)) {
    /* Whether the carriers waited in io_uring (the kernel may refuse it: then weft is epoll too). */
    weft_info info;
    bool ring = r->id == B_WEFT && weft_get_info(&info) == 0 && info.io_uring;
    rc = wb_json_set_bool(rec, "io_uring", ring);
  }
  if (rc == 0 && r->id == B_WEFT) {
    const wb_run *thr = wb_find_run(d, "threads"), *go = wb_find_run(d, "go");
    rc = thr ? wb_json_add_ratio(rec, "vs_threads", r->m[M_MPS], r->n, thr->m[M_MPS], thr->n)
             : wb_json_set_null(rec, "vs_threads");
    if (rc == 0)
      rc = go ? wb_json_add_ratio(rec, "vs_go", r->m[M_MPS], r->n, go->m[M_MPS], go->n)
              : wb_json_set_null(rec, "vs_go");
  }
  return rc;
}

static void echo_report(wb_driver *d) {
  echo_cmd *c = d->ctx;
  printf("echo: %lld connections at once, each echoing %lld messages of %lld bytes over loopback; %u cores\n",
         (long long)c->connections, (long long)c->messages, (long long)c->size, wb_cores());
  printf("%-10s %12s %12s %12s %9s %9s %9s %9s %9s %10s %5s %7s\n", "backend", "messages/s", "min", "max",
         "MB/s", "p50 ms", "p90 ms", "p99 ms", "max ms", "CPU us/msg", "cores", "errors");
  for (size_t j = 0; j < d->nruns; j++) {
    const wb_run *r = &d->runs[j];
    const echo_totals *t = r->state;
    if (r->skipped) {
      printf("%-10s skipped: %s\n", r->name, r->error);
      continue;
    }
    if (r->n == 0) {
      printf("%-10s  no repetition ran: %s\n", r->name, r->error);
      continue;
    }
    wb_summary s = wb_run_metric(r, M_MPS);
    printf("%-10s %12.0f %12.0f %12.0f %9.2f", r->name, s.median, s.min, s.max,
           wb_run_metric(r, M_MBPS).median);
    wb_print_net_cells(r, M_P50);
    printf(" %7zu\n", t->failed_conns + t->server_errors);
  }
  printf("  p99 ms of each connection's first round trip / of the others:");
  for (size_t j = 0; j < d->nruns; j++) {
    const wb_run *r = &d->runs[j];
    if (!r->skipped && r->n)
      printf(" %s %.1f / %.1f;", r->name, wb_run_metric(r, M_P99_FIRST).median,
             wb_run_metric(r, M_P99_REST).median);
  }
  printf("\n");
  const wb_run *w = wb_find_run(d, "weft"), *thr = wb_find_run(d, "threads"), *go = wb_find_run(d, "go");
  if (w && thr) wb_print_ratio("weft/threads", w->m[M_MPS], w->n, thr->m[M_MPS], thr->n);
  if (w && go) wb_print_ratio("weft/go", w->m[M_MPS], w->n, go->m[M_MPS], go->n);
  const wb_run *we = wb_find_run(d, "weft-epoll");
  if (w && we) wb_print_ratio("weft/weft-epoll", w->m[M_MPS], w->n, we->m[M_MPS], we->n);
  for (size_t j = 0; j < d->nruns; j++) {
    const echo_totals *t = d->runs[j].state;
    if (t->failed_conns || t->server_errors || t->warmup_errors)
      printf("  %s: %zu failed connections, %zu server errors, %zu in the warm-up; first: %s\n",
             d->runs[j].name, t->failed_conns, t->server_errors, t->warmup_errors, d->runs[j].error);
  }
  const echo_totals *gt = go ? go->state : NULL;
  if (gt && gt->go_version[0])
    printf("  go: weft-go-echo, %s, GOMAXPROCS %lld, peak RSS %.0f KiB (its process's)\n", gt->go_version,
           (long long)gt->gomaxprocs, gt->peak_rss_kb);
  printf("(medians over %zu repetitions; MB/s counts each echoed byte once; latency: one round trip,\n"
         " percentiles are the medians of each repetition's, max the largest; CPU: the whole process's,\n"
         " both sides (go: its program's); cores: CPU time over wall time, the share of the machine\n"
         " the run got)\n",
         d->nruns ? d->runs[0].n : 0);
}

static void echo_teardown(wb_driver *d) { free(((echo_cmd *)d->ctx)->lat); }

static const wb_command echo_command = {
    .name = "echo",
    .help = echo_help,
    .opts = echo_opts,
    .pick = "backend",
    .choices = echo_backends,
    .nchoices = sizeof echo_backends / sizeof echo_backends[0],
    .metrics = echo_metrics,
    .nmetrics = NMETRICS,
    .max_repeat = 1000,
    .flags = WB_CMD_WARMUP | WB_CMD_WARMUP_EACH,
    .option = echo_option,
    .prepare = echo_prepare,
    .args = echo_args,
    .setup = echo_setup_run,
    .run = echo_measure,
    .record = echo_record,
    .report = echo_report,
    .teardown = echo_teardown,
};

int wb_cmd_echo(int argc, char **argv) {
  echo_cmd c;
  memset(&c, 0, sizeof c);
  c.connections = 1000;
  c.messages = 100;
  c.size = 64;
  c.timeout_ms = 30000;
  c.warmup_conns = -1;
  /*
   * The default list has go when its program is there. Asked for by name
   * without it, go is skipped with the reason, as in every command.
   */
  wb_command cmd = echo_command;
  char path[4096], why[256];
  cmd.pick_default = "weft,threads,go";
  if (wb_go_find("weft-go-echo", path, sizeof path, why, sizeof why) < 0) cmd.pick_default = "weft,threads";
  return wb_drive(&cmd, &c, argc, argv);
}
