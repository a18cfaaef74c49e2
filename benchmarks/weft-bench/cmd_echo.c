/*
 * This file contains `weft-bench echo`: C loopback TCP connections at once,
 * each sending M messages of B bytes and reading each one back before the
 * next (a round trip per message), in two versions in one run:
 *
 *   weft     server: an acceptor fiber and a fiber per accepted connection;
 *            client: a WEFT_BLOCKING weft_pmap over the C connections with no
 *            bound, so a fiber per connection; weft_connect/read/write
 *   threads  server: an acceptor thread and a thread per connection; client:
 *            a thread per connection; plain blocking sockets throughout
 *
 * Both versions run the same client and server functions (only wb_io
 * differs), and threads get the same stack size as weft's fibers, so what
 * differs is how waiting is done: a parked fiber against a blocked thread.
 *
 * Every repetition gets a fresh server on a fresh port: each connection ends
 * with the client closing first, which leaves the client's port in
 * TIME_WAIT, and a new server port keeps those old connections from
 * colliding with the next repetition's (a four-tuple must be unique).
 */
#define _POSIX_C_SOURCE 200809L
#include "bench.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "net.h"
#include "weft.h"

#define MAX_CONNECTIONS 100000
#define MAX_MESSAGES    10000000
#define MAX_SIZE        (16 * 1024 * 1024)
#define MAX_SAMPLES     50000000 /* C x M round trips, a float of latency each */
#define MAX_REPEAT      1000
#define MAX_TIMEOUT_MS  3600000
#define STACK_BUF       4096 /* messages up to this size live on the client's stack */

static const char echo_help[] =
    "usage: weft-bench echo [--connections C] [--messages M] [--size B]\n"
    "                       [--backend B[,B...]] [--timeout-ms T] [--repeat K] [--json]\n"
    "\n"
    "C loopback TCP connections at once, each echoing M messages of B bytes (one\n"
    "round trip per message): messages/s, MB/s, round-trip latency percentiles,\n"
    "errors.\n"
    "\n"
    "  --connections C  concurrent connections (default 1000)\n"
    "  --messages M     round trips per connection (default 100)\n"
    "  --size B         bytes per message (default 64)\n"
    "  --backend B      weft     a fiber per connection on both sides (weft I/O)\n"
    "                   threads  a thread per connection on both sides (blocking\n"
    "                            sockets, threads with weft's fiber stack size)\n"
    "                   a comma-separated list; default: weft,threads\n"
    "  --timeout-ms T   limit of each round trip, and of connecting (default 30000)\n"
    "  --repeat K       K repetitions, backends interleaved; medians and spread\n"
    "  --json           one JSON object per backend (JSON Lines) on stdout\n"
    "  --help           this text\n"
    "\n"
    "The run needs 2 x C descriptors: the soft limit is raised to the hard limit,\n"
    "and a run that needs more says so and exits 1. Connects that time out (a full\n"
    "accept queue drops SYNs) are retried with backoff. Exit codes: 0 ok, 1 a\n"
    "connection or the server failed, 2 usage.\n";

enum {
  OPT_HELP = 1,
  OPT_CONNECTIONS,
  OPT_MESSAGES,
  OPT_SIZE,
  OPT_BACKEND,
  OPT_TIMEOUT,
  OPT_REPEAT,
  OPT_JSON
};

static const wb_opt echo_opts[] = {
    {"help", false, OPT_HELP},
    {"connections", true, OPT_CONNECTIONS},
    {"messages", true, OPT_MESSAGES},
    {"size", true, OPT_SIZE},
    {"backend", true, OPT_BACKEND},
    {"timeout-ms", true, OPT_TIMEOUT},
    {"repeat", true, OPT_REPEAT},
    {"json", false, OPT_JSON},
    {NULL, false, 0},
};

enum { B_WEFT, B_THREADS, NBACKENDS };
static const char *const backend_names[NBACKENDS] = {"weft", "threads"};
static const char *const backend_labels[NBACKENDS] = {"fiber per connection (weft I/O)",
                                                      "thread per connection (blocking sockets)"};

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
  close(fd);
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
  wb_server_stats srv;
  int backlog;
  char first_error[256];
} run_result;

typedef struct echo_setup {
  size_t messages, size;
  int64_t timeout_ns;
  size_t stack;
} echo_setup;

/* One measurement: a fresh server of the backend's kind, the clients (timed), the server's stop. */
static void measure(const echo_setup *es, int b, size_t connections, float *lat, run_result *res) {
  memset(res, 0, sizeof *res);
  wb_io io = b == B_WEFT ? WB_IO_WEFT : WB_IO_PLAIN;
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
  double cpu0 = wb_cpu_ms();
  int64_t t0 = wb_now_ns();
  if (b == B_WEFT)
    run_weft(&e, connections);
  else
    run_threads(&e, connections);
  res->elapsed_ms = (double)(wb_now_ns() - t0) / 1e6;
  res->cpu_ms = wb_cpu_ms() - cpu0;
  wb_server_stop(srv, &res->srv);
  res->msgs_ok = atomic_load(&e.msgs_ok);
  res->failed_conns = wb_errors_count(&e.errors);
  res->retries = atomic_load(&e.retries);
  snprintf(res->first_error, sizeof res->first_error, "%s",
           res->failed_conns ? wb_errors_first(&e.errors) : res->srv.first_error);
  res->lat = wb_latency_summary(lat, nsamples);
}

/* ------------------------------------------------------------------------ */
/* Aggregates, records, the report                                           */
/* ------------------------------------------------------------------------ */

typedef struct agg {
  int b;
  double *elapsed, *mps, *mbps, *p50, *p90, *p99, *pmax; /* one per repetition */
  double *cpu_us;                                        /* CPU microseconds per round trip */
  double *cores;                                         /* CPU time over wall time: cores the process got */
  size_t n;
  size_t failed_conns, msgs_failed, server_errors, warmup_errors;
  unsigned retries;
  int backlog;
  char first_error[320]; /* a run's first error (256 at most) with "warm-up: " in front */
} agg;

static json_value *record(const agg *a, const agg *thr, size_t connections, const echo_setup *es,
                          const char *command) {
  json_value *rec = json_new_object();
  if (!rec) return NULL;
  bool failed = a->failed_conns || a->server_errors || a->warmup_errors || a->n == 0;
  int rc = json_set_int(rec, "schema", WB_SCHEMA);
  if (rc == 0) rc = json_set_str(rec, "bench", "echo");
  if (rc == 0) rc = json_set_str(rec, "backend", backend_names[a->b]);
  if (rc == 0) rc = json_set_str(rec, "label", backend_labels[a->b]);
  if (rc == 0) rc = json_set_int(rec, "connections", (int64_t)connections);
  if (rc == 0) rc = json_set_int(rec, "messages", (int64_t)es->messages);
  if (rc == 0) rc = json_set_int(rec, "size", (int64_t)es->size);
  if (rc == 0) rc = json_set_int(rec, "timeout_ms", es->timeout_ns / 1000000);
  if (rc == 0) rc = json_set_str(rec, "status", failed ? "failed" : "ok");
  if (rc == 0 && failed)
    rc = json_set_str(rec, "error", a->first_error[0] ? a->first_error : "no repetition ran");
  if (rc == 0) rc = json_set_int(rec, "errors", (int64_t)(a->failed_conns + a->server_errors));
  if (rc == 0) rc = json_set_int(rec, "failed_connections", (int64_t)a->failed_conns);
  if (rc == 0) rc = json_set_int(rec, "messages_failed", (int64_t)a->msgs_failed);
  if (rc == 0) rc = json_set_int(rec, "server_errors", (int64_t)a->server_errors);
  if (rc == 0) rc = json_set_int(rec, "warmup_errors", (int64_t)a->warmup_errors);
  if (rc == 0) rc = json_set_int(rec, "connect_retries", a->retries);
  if (rc == 0) rc = json_set_int(rec, "listen_backlog", a->backlog);
  if (rc == 0 && a->b == B_THREADS) rc = json_set_int(rec, "thread_stack", (int64_t)es->stack);
  if (rc == 0 && a->n) rc = wb_add_timing(rec, a->elapsed, a->n);
  if (rc == 0) rc = wb_json_num_or_null(rec, "msgs_per_s", wb_round_ms(wb_median(a->mps, a->n)));
  if (rc == 0)
    rc = wb_json_num_or_null(rec, "msgs_per_s_min", a->n ? wb_round_ms(wb_summarize(a->mps, a->n).min) : NAN);
  if (rc == 0) rc = wb_json_num_or_null(rec, "msgs_per_s_max", wb_round_ms(wb_max(a->mps, a->n)));
  if (rc == 0) rc = json_set_nums(rec, "msgs_per_s_samples", a->mps, a->n);
  if (rc == 0) rc = wb_json_num_or_null(rec, "mb_per_s", wb_round_ms(wb_median(a->mbps, a->n)));
  if (rc == 0) rc = wb_json_num_or_null(rec, "latency_ms_p50", wb_round_ms(wb_median(a->p50, a->n)));
  if (rc == 0) rc = wb_json_num_or_null(rec, "latency_ms_p90", wb_round_ms(wb_median(a->p90, a->n)));
  if (rc == 0) rc = wb_json_num_or_null(rec, "latency_ms_p99", wb_round_ms(wb_median(a->p99, a->n)));
  if (rc == 0) rc = wb_json_num_or_null(rec, "latency_ms_max", wb_round_ms(wb_max(a->pmax, a->n)));
  if (rc == 0) rc = wb_json_num_or_null(rec, "cpu_us_per_message", wb_round_ms(wb_median(a->cpu_us, a->n)));
  if (rc == 0) rc = wb_json_num_or_null(rec, "cpu_cores_used", round(wb_median(a->cores, a->n) * 100) / 100);
  if (rc == 0 && a->b == B_WEFT)
    rc = thr ? wb_json_add_ratio(rec, "vs_threads", a->mps, a->n, thr->mps, thr->n)
             : json_set_null(rec, "vs_threads");
  if (rc == 0) rc = wb_meta_add(rec);
  if (rc == 0) rc = json_set_str(rec, "command", command);
  if (rc < 0) {
    json_free(rec);
    return NULL;
  }
  return rec;
}

static void print_report(const agg *aggs, size_t n, size_t connections, const echo_setup *es) {
  printf("echo: %zu connections at once, each echoing %zu messages of %zu bytes over loopback; %u cores\n",
         connections, es->messages, es->size, wb_cores());
  printf("%-8s %12s %12s %12s %9s %9s %9s %9s %9s %10s %5s %7s\n", "backend", "messages/s", "min", "max",
         "MB/s", "p50 ms", "p90 ms", "p99 ms", "max ms", "CPU us/msg", "cores", "errors");
  const agg *w = NULL, *thr = NULL;
  for (size_t j = 0; j < n; j++) {
    const agg *a = &aggs[j];
    if (a->b == B_WEFT) w = a;
    if (a->b == B_THREADS) thr = a;
    if (a->n == 0) {
      printf("%-8s  no repetition ran: %s\n", backend_names[a->b], a->first_error);
      continue;
    }
    wb_summary s = wb_summarize(a->mps, a->n);
    printf("%-8s %12.0f %12.0f %12.0f %9.2f", backend_names[a->b], s.median, s.min, s.max,
           wb_median(a->mbps, a->n));
    wb_print_cell(wb_median(a->p50, a->n), 9, 3);
    wb_print_cell(wb_median(a->p90, a->n), 9, 3);
    wb_print_cell(wb_median(a->p99, a->n), 9, 3);
    wb_print_cell(wb_max(a->pmax, a->n), 9, 3);
    wb_print_cell(wb_median(a->cpu_us, a->n), 10, 1);
    wb_print_cell(wb_median(a->cores, a->n), 5, 2);
    printf(" %7zu\n", a->failed_conns + a->server_errors);
  }
  if (w && thr) wb_print_ratio("weft/threads", w->mps, w->n, thr->mps, thr->n);
  for (size_t j = 0; j < n; j++)
    if (aggs[j].failed_conns || aggs[j].server_errors || aggs[j].warmup_errors)
      printf("  %s: %zu failed connections, %zu server errors, %zu in the warm-up; first: %s\n",
             backend_names[aggs[j].b], aggs[j].failed_conns, aggs[j].server_errors, aggs[j].warmup_errors,
             aggs[j].first_error);
  printf("(medians over %zu repetitions; MB/s counts each echoed byte once; latency: one round trip,\n"
         " percentiles are the medians of each repetition's, max the largest; CPU: the whole process's,\n"
         " both sides; cores: CPU time over wall time, the share of the machine the run got)\n",
         n ? aggs[0].n : 0);
}

/* ------------------------------------------------------------------------ */
/* The command                                                               */
/* ------------------------------------------------------------------------ */

int wb_cmd_echo(int argc, char **argv) {
  const char *backend_list = NULL;
  int64_t connections = 1000, messages = 100, size = 64, timeout_ms = 30000, repeat = 1;
  bool json = false;
  wb_optstate st;
  wb_opt_init(&st, argc, argv, "echo");
  const char *arg;
  int id;
  while ((id = wb_opt_next(&st, echo_opts, &arg)) != WB_OPT_END) {
    switch (id) {
    case WB_OPT_ERROR:
      return WB_EXIT_USAGE;
    case WB_OPT_POSITIONAL:
      return wb_usage_error("echo", "unexpected argument '%s'", arg);
    case OPT_HELP:
      fputs(echo_help, stdout);
      return WB_EXIT_OK;
    case OPT_CONNECTIONS:
      if (!wb_parse_i64("echo", "connections", arg, 1, MAX_CONNECTIONS, &connections)) return WB_EXIT_USAGE;
      break;
    case OPT_MESSAGES:
      if (!wb_parse_i64("echo", "messages", arg, 1, MAX_MESSAGES, &messages)) return WB_EXIT_USAGE;
      break;
    case OPT_SIZE:
      if (!wb_parse_i64("echo", "size", arg, 1, MAX_SIZE, &size)) return WB_EXIT_USAGE;
      break;
    case OPT_BACKEND:
      backend_list = arg;
      break;
    case OPT_TIMEOUT:
      if (!wb_parse_i64("echo", "timeout-ms", arg, 1, MAX_TIMEOUT_MS, &timeout_ms)) return WB_EXIT_USAGE;
      break;
    case OPT_REPEAT:
      if (!wb_parse_i64("echo", "repeat", arg, 1, MAX_REPEAT, &repeat)) return WB_EXIT_USAGE;
      break;
    case OPT_JSON:
      json = true;
      break;
    }
  }
  if (connections * messages > MAX_SAMPLES)
    return wb_usage_error("echo", "--connections x --messages is %lld, over %d round trips",
                          (long long)(connections * messages), MAX_SAMPLES);
  size_t chosen[NBACKENDS], nchosen = 0;
  if (backend_list) {
    if (!wb_net_parse_backends("echo", backend_list, backend_names, NBACKENDS, chosen, &nchosen))
      return WB_EXIT_USAGE;
  } else {
    for (size_t b = 0; b < NBACKENDS; b++) chosen[nchosen++] = b;
  }
  /* Both ends of every connection live in this process, plus a listener and weft's own descriptors. */
  uint64_t fd_limit;
  if (wb_net_fd_limit("echo", (uint64_t)connections * 2 + 64, &fd_limit) < 0) return WB_EXIT_FAIL;

  wb_str blist = {0};
  for (size_t j = 0; j < nchosen; j++) {
    if (j) wb_str_add(&blist, ",");
    wb_str_add(&blist, backend_names[chosen[j]]);
  }
  char c_s[24], m_s[24], b_s[24], to_s[24], rep_s[24];
  snprintf(c_s, sizeof c_s, "%lld", (long long)connections);
  snprintf(m_s, sizeof m_s, "%lld", (long long)messages);
  snprintf(b_s, sizeof b_s, "%lld", (long long)size);
  snprintf(to_s, sizeof to_s, "%lld", (long long)timeout_ms);
  snprintf(rep_s, sizeof rep_s, "%lld", (long long)repeat);
  char *args[] = {"echo",  "--connections", c_s,  "--messages", m_s,   "--size", b_s, "--backend",
                  blist.s, "--timeout-ms",  to_s, "--repeat",   rep_s, "--json"};
  char *command = NULL;
  if (!blist.s || wb_command_line(args, sizeof args / sizeof args[0] - (json ? 0 : 1), NULL, &command) < 0) {
    wb_str_free(&blist);
    fprintf(stderr, "weft-bench echo: out of memory\n");
    return WB_EXIT_FAIL;
  }
  wb_str_free(&blist);
  wb_progress_init(json);
  if (!json) fprintf(stderr, "command: %s\n", command);

  echo_setup es = {(size_t)messages, (size_t)size, timeout_ms * 1000000, wb_net_thread_stack()};
  int exit_code = WB_EXIT_OK;
  size_t nsamples = (size_t)connections * (size_t)messages;
  float *lat = malloc(nsamples * sizeof *lat);
  agg aggs[NBACKENDS];
  memset(aggs, 0, sizeof aggs);
  if (!lat) {
    fprintf(stderr, "weft-bench echo: out of memory for %zu latencies\n", nsamples);
    free(command);
    return WB_EXIT_FAIL;
  }
  for (size_t j = 0; j < nchosen; j++) {
    agg *a = &aggs[j];
    a->b = (int)chosen[j];
    double **arrs[] = {&a->elapsed, &a->mps,  &a->mbps,   &a->p50,  &a->p90,
                       &a->p99,     &a->pmax, &a->cpu_us, &a->cores};
    for (size_t k = 0; k < sizeof arrs / sizeof arrs[0]; k++) {
      *arrs[k] = calloc((size_t)repeat, sizeof(double));
      if (!*arrs[k]) {
        fprintf(stderr, "weft-bench echo: out of memory\n");
        exit_code = WB_EXIT_FAIL;
        goto out;
      }
    }
  }

  /* Warm-up, untimed, on a few connections: weft's carriers and stacks, the thread library's caches. */
  echo_setup ws = es;
  ws.messages = es.messages < 10 ? es.messages : 10;
  size_t wconn = connections < 50 ? (size_t)connections : 50;
  for (size_t j = 0; j < nchosen; j++) {
    run_result res;
    wb_progress(true, "warm-up: %s", backend_names[aggs[j].b]);
    measure(&ws, aggs[j].b, wconn, lat, &res);
    aggs[j].warmup_errors = res.failed_conns + res.srv.errors;
    if (aggs[j].warmup_errors)
      snprintf(aggs[j].first_error, sizeof aggs[j].first_error, "warm-up: %s", res.first_error);
  }
  for (int64_t r = 0; r < repeat; r++) {
    for (size_t k = 0; k < nchosen; k++) {
      agg *a = &aggs[wb_interleave((size_t)r, k, nchosen)];
      wb_progress(true, "[repetition %lld of %lld] %s: %lld connections x %lld messages", (long long)r + 1,
                  (long long)repeat, backend_names[a->b], (long long)connections, (long long)messages);
      run_result res;
      measure(&es, a->b, (size_t)connections, lat, &res);
      double s = res.elapsed_ms / 1000.0;
      a->elapsed[a->n] = res.elapsed_ms;
      a->mps[a->n] = s > 0 ? (double)res.msgs_ok / s : 0;
      a->mbps[a->n] = s > 0 ? (double)res.msgs_ok * (double)es.size / s / 1e6 : 0;
      a->p50[a->n] = res.lat.p50;
      a->p90[a->n] = res.lat.p90;
      a->p99[a->n] = res.lat.p99;
      a->pmax[a->n] = res.lat.max;
      a->cpu_us[a->n] = res.msgs_ok ? res.cpu_ms * 1000.0 / (double)res.msgs_ok : NAN;
      a->cores[a->n] = res.elapsed_ms > 0 ? res.cpu_ms / res.elapsed_ms : NAN;
      a->n++;
      a->failed_conns += res.failed_conns;
      a->msgs_failed += nsamples - res.msgs_ok;
      a->server_errors += res.srv.errors;
      a->retries += res.retries;
      a->backlog = res.backlog;
      if ((res.failed_conns || res.srv.errors) &&
          (!a->first_error[0] || strncmp(a->first_error, "warm-up: ", 9) == 0))
        snprintf(a->first_error, sizeof a->first_error, "%s", res.first_error);
    }
  }
  wb_progress_clear();
  for (size_t j = 0; j < nchosen; j++)
    if (aggs[j].failed_conns || aggs[j].server_errors || aggs[j].warmup_errors || aggs[j].n == 0)
      exit_code = WB_EXIT_FAIL;
  const agg *thr = NULL;
  for (size_t j = 0; j < nchosen; j++)
    if (aggs[j].b == B_THREADS) thr = &aggs[j];
  if (!json) {
    print_report(aggs, nchosen, (size_t)connections, &es);
  } else {
    for (size_t j = 0; j < nchosen; j++) {
      json_value *rec = record(&aggs[j], thr, (size_t)connections, &es, command);
      if (!rec || json_print_line(rec, stdout) < 0) {
        fprintf(stderr, "weft-bench echo: cannot write the record for %s\n", backend_names[aggs[j].b]);
        exit_code = WB_EXIT_FAIL;
      }
      json_free(rec);
    }
  }
out:
  for (size_t j = 0; j < nchosen; j++) {
    free(aggs[j].elapsed);
    free(aggs[j].mps);
    free(aggs[j].mbps);
    free(aggs[j].p50);
    free(aggs[j].p90);
    free(aggs[j].p99);
    free(aggs[j].pmax);
    free(aggs[j].cpu_us);
    free(aggs[j].cores);
  }
  free(lat);
  free(command);
  return exit_code;
}
