/*
 * This file contains `weft-bench serve`: weft-bench's own HTTP/1.1 server
 * (server.c with http.c's handler, the one `weft-bench http` measures its
 * clients against) run on its own, on a chosen address and port, so that
 * an outside load generator (wrk, scripts/bench-net.sh) can measure it and
 * compare it with another server (nginx) under the same load.
 *
 * It serves the same 9216-byte page at any path, with keep-alive, until
 * SIGINT or SIGTERM arrives or --duration-s has passed, then stops
 * accepting, waits for the open connections to end (their clients close, or
 * each one's --timeout-ms runs out), shuts weft down and reports the
 * requests served and the errors.
 *
 * The signals are taken synchronously: they are blocked in this thread
 * before weft starts any thread (every thread weft makes afterwards
 * inherits the mask), and the main thread waits for them with sigtimedwait.
 * No handler runs, so nothing has to be async-signal-safe, and no carrier
 * or connection fiber is ever interrupted by them.
 */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "http.h"
#include "net.h"
#include "server.h"
#include "weft.h"

#define PAGE_SEED       42 /* cmd_http.c's: the same page, byte for byte */
#define MAX_TIMEOUT_MS  3600000
#define MAX_DURATION_S  (30 * 24 * 3600.0)
#define DEFAULT_BACKLOG 4096

static const char serve_help[] =
    "usage: weft-bench serve [--address A] [--port P] [--backend weft|threads]\n"
    "                        [--duration-s S] [--timeout-ms T] [--backlog N]\n"
    "\n"
    "Run weft-bench's own HTTP/1.1 keep-alive server (the one `weft-bench http`\n"
    "measures against) for a load generator such as wrk: it serves the same\n"
    "9216-byte page at any path (GET and HEAD) until SIGINT or SIGTERM, or until\n"
    "--duration-s has passed. At start it prints one line on stdout,\n"
    "\"listening ADDRESS:PORT\" (flushed, for a script to read); at exit, the\n"
    "requests served, the connections and the errors.\n"
    "\n"
    "  --address A      IPv4 or IPv6 address to listen on (default 127.0.0.1)\n"
    "  --port P         port (default 0: any free one, printed at start)\n"
    "  --backend B      weft     an acceptor fiber and a fiber per connection, on\n"
    "                            weft's I/O (default)\n"
    "                   threads  an acceptor thread and a thread per connection,\n"
    "                            blocking sockets (the threads are joined at exit)\n"
    "  --duration-s S   stop after S seconds (default 0: only on a signal)\n"
    "  --timeout-ms T   limit of each read and write of a connection, an idle\n"
    "                   keep-alive included (default 10000); at exit, the longest\n"
    "                   wait for connections still open\n"
    "  --backlog N      listen backlog asked for (default 4096; the kernel caps it\n"
    "                   at net.core.somaxconn)\n"
    "  --help           this text\n"
    "\n"
    "The soft descriptor limit is raised to the hard limit. A connection that the\n"
    "client resets (wrk closing with a request in flight) is counted apart, not as\n"
    "an error. Exit codes: 0 ok, 1 the server failed to start or a connection\n"
    "failed, 2 usage, 3 --backend weft where fibers are not available.\n";

enum { OPT_HELP = 1, OPT_ADDRESS, OPT_PORT, OPT_BACKEND, OPT_DURATION, OPT_TIMEOUT, OPT_BACKLOG };

static const wb_opt serve_opts[] = {
    {"help", false, OPT_HELP},          {"address", true, OPT_ADDRESS},
    {"port", true, OPT_PORT},           {"backend", true, OPT_BACKEND},
    {"duration-s", true, OPT_DURATION}, {"timeout-ms", true, OPT_TIMEOUT},
    {"backlog", true, OPT_BACKLOG},     {NULL, false, 0},
};

typedef struct serve_opts_t {
  const char *address;
  int64_t port, timeout_ms, backlog;
  double duration_s;
  wb_io io;
} serve_opts_t;

/* What the connections share: the page and the counts (the page's `served` points at `served`). */
typedef struct serve_ctx {
  wb_http_page page;
  atomic_size_t served; /* responses of the page written */
  atomic_size_t open;   /* connections being served now */
  atomic_size_t resets; /* connections the client reset or closed under a response */
} serve_ctx;

/* One connection: http.c's handler, with the client's resets counted apart from the errors. */
static int serve_conn(void *arg, int fd, wb_io io) {
  serve_ctx *c = arg;
  atomic_fetch_add_explicit(&c->open, 1, memory_order_relaxed);
  int rc = wb_http_serve(&c->page, fd, io);
  atomic_fetch_sub_explicit(&c->open, 1, memory_order_relaxed);
  /*
   * A load generator that stops at its deadline closes connections with a
   * request in flight: the kernel answers the response with a reset. That is
   * the client leaving, not the server failing.
   */
  if (rc == -ECONNRESET || rc == -EPIPE) {
    atomic_fetch_add_explicit(&c->resets, 1, memory_order_relaxed);
    rc = 0;
  }
  return rc;
}

/* Returns -1 to go on, or the exit code (help, usage error). */
static int parse(int argc, char **argv, serve_opts_t *o) {
  wb_optstate st;
  wb_opt_init(&st, argc, argv, "serve");
  const char *arg;
  int id;
  while ((id = wb_opt_next(&st, serve_opts, &arg)) != WB_OPT_END) {
    switch (id) {
    case WB_OPT_ERROR:
      return WB_EXIT_USAGE;
    case WB_OPT_POSITIONAL:
      return wb_usage_error("serve", "unexpected argument '%s'", arg);
    case OPT_HELP:
      fputs(serve_help, stdout);
      return WB_EXIT_OK;
    case OPT_ADDRESS:
      o->address = arg;
      break;
    case OPT_PORT:
      if (!wb_parse_i64("serve", "port", arg, 0, 65535, &o->port)) return WB_EXIT_USAGE;
      break;
    case OPT_BACKEND:
      if (strcmp(arg, "weft") == 0)
        o->io = WB_IO_WEFT;
      else if (strcmp(arg, "threads") == 0)
        o->io = WB_IO_PLAIN;
      else
        return wb_usage_error("serve", "--backend: '%s' is not one of weft, threads", arg);
      break;
    case OPT_DURATION:
      if (!wb_parse_double("serve", "duration-s", arg, 0, MAX_DURATION_S, &o->duration_s))
        return WB_EXIT_USAGE;
      break;
    case OPT_TIMEOUT:
      if (!wb_parse_i64("serve", "timeout-ms", arg, 1, MAX_TIMEOUT_MS, &o->timeout_ms)) return WB_EXIT_USAGE;
      break;
    case OPT_BACKLOG:
      if (!wb_parse_i64("serve", "backlog", arg, 1, 1 << 20, &o->backlog)) return WB_EXIT_USAGE;
      break;
    }
  }
  return -1;
}

/* A numeric address and a port: a server listens on an address, so no name is looked up. */
static int parse_addr(const char *s, int64_t port, wb_addr *a) {
  memset(a, 0, sizeof *a);
  struct sockaddr_in *sin = (struct sockaddr_in *)&a->ss;
  struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&a->ss;
  if (inet_pton(AF_INET, s, &sin->sin_addr) == 1) {
    sin->sin_family = AF_INET;
    sin->sin_port = htons((uint16_t)port);
    a->len = sizeof *sin;
    return 0;
  }
  if (inet_pton(AF_INET6, s, &sin6->sin6_addr) == 1) {
    sin6->sin6_family = AF_INET6;
    sin6->sin6_port = htons((uint16_t)port);
    a->len = sizeof *sin6;
    return 0;
  }
  return -EINVAL;
}

/* Wait for SIGINT or SIGTERM (blocked in set), or until deadline_ns on CLOCK_MONOTONIC (-1: none). */
static int wait_for_stop(const sigset_t *set, int64_t deadline_ns) {
  for (;;) {
    int sig;
    if (deadline_ns < 0) {
      sig = sigwaitinfo(set, NULL);
    } else {
      int64_t left = deadline_ns - wb_now_ns();
      if (left <= 0) return 0;
      struct timespec ts = {(time_t)(left / 1000000000), (long)(left % 1000000000)};
      sig = sigtimedwait(set, NULL, &ts);
    }
    if (sig > 0) return sig;
    if (errno == EAGAIN) return 0; /* the duration has passed */
    /* EINTR: another signal's handler ran (a debugger, say); wait on. */
  }
}

int wb_cmd_serve(int argc, char **argv) {
  serve_opts_t o = {
      .address = "127.0.0.1", .timeout_ms = 10000, .backlog = DEFAULT_BACKLOG, .io = WB_IO_WEFT};
  int rc = parse(argc, argv, &o);
  if (rc >= 0) return rc;
  wb_addr at;
  if (parse_addr(o.address, o.port, &at) < 0)
    return wb_usage_error("serve", "--address: '%s' is not an IPv4 or IPv6 address", o.address);

  /* Before anything starts a thread of weft's: every one of them inherits this mask. */
  sigset_t stop_set;
  sigemptyset(&stop_set);
  sigaddset(&stop_set, SIGINT);
  sigaddset(&stop_set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_set, NULL);

  uint64_t fd_limit;
  if (wb_net_fd_limit("serve", 64, &fd_limit) < 0) return WB_EXIT_FAIL;
  if (o.io == WB_IO_WEFT && !weft_fibers_available()) {
    /* weft's fallback would hold one of its few OpenMP threads per connection for the connection's life. */
    fprintf(stderr,
            "weft-bench serve: --backend weft: fibers are not available here (WEFT_FIBERS=0, or not in "
            "this build); use --backend threads\n");
    return WB_EXIT_UNAVAILABLE;
  }

  serve_ctx *c = calloc(1, sizeof *c);
  if (!c || wb_http_page_init(&c->page, WB_HTTP_BODY_BYTES, PAGE_SEED, o.timeout_ms * 1000000) < 0) {
    fprintf(stderr, "weft-bench serve: out of memory\n");
    free(c);
    return WB_EXIT_FAIL;
  }
  atomic_init(&c->served, 0);
  atomic_init(&c->open, 0);
  atomic_init(&c->resets, 0);
  c->page.served = &c->served;

  char err[512] = "";
  wb_server *srv = NULL;
  rc = wb_server_start_at(o.io, &at, (size_t)o.backlog, wb_net_thread_stack(), false, serve_conn, c, &srv,
                          err, sizeof err);
  if (rc < 0) {
    fprintf(stderr, "weft-bench serve: %s\n", err);
    wb_http_page_fini(&c->page);
    free(c);
    return WB_EXIT_FAIL;
  }
  char where[96];
  wb_net_addr_str(wb_server_addr(srv), where, sizeof where);
  printf("listening %s\n", where);
  fflush(stdout);
  fprintf(stderr,
          "weft-bench serve: %s, %d-byte page at any path, keep-alive; backlog %d, %llu descriptors; until "
          "SIGINT/SIGTERM%s\n",
          o.io == WB_IO_WEFT ? "weft (an acceptor fiber, a fiber per connection)"
                             : "threads (an acceptor thread, a thread per connection)",
          WB_HTTP_BODY_BYTES, wb_server_backlog(srv), (unsigned long long)fd_limit,
          o.duration_s > 0 ? " or the duration" : "");

  int64_t t0 = wb_now_ns();
  int sig = wait_for_stop(&stop_set, o.duration_s > 0 ? t0 + (int64_t)(o.duration_s * 1e9) : -1);
  double elapsed_s = (double)(wb_now_ns() - t0) / 1e9;
  size_t open = atomic_load(&c->open);
  fprintf(stderr, "weft-bench serve: %s after %.1f s; stopping", sig ? strsignal(sig) : "duration reached",
          elapsed_s);
  if (open)
    fprintf(stderr, " (waiting for %zu open connections, at most %lld ms)", open, (long long)o.timeout_ms);
  fputc('\n', stderr);

  wb_server_stats st;
  wb_server_stop(srv, &st);
  weft_shutdown(); /* here, not in main.c: before the report, which says it ended cleanly */
  size_t served = atomic_load(&c->served);
  printf(
      "served %zu requests on %zu connections in %.3f s (%.0f requests/s); %zu errors, %zu client resets\n",
      served, st.accepted, elapsed_s, elapsed_s > 0 ? (double)served / elapsed_s : 0.0, st.errors,
      (size_t)atomic_load(&c->resets));
  fflush(stdout);
  if (st.errors) fprintf(stderr, "weft-bench serve: first error: %s\n", st.first_error);
  wb_http_page_fini(&c->page);
  free(c);
  return st.errors ? WB_EXIT_FAIL : WB_EXIT_OK;
}
