/*
 * This file contains `weft-bench http`: R GETs over C concurrent requests,
 * by the same HTTP/1.1 client (http.c) on three backends in one run, and by
 * Go's net/http client as the baseline:
 *
 *   weft     a WEFT_BLOCKING weft_pmap over the R requests with
 *            max_parallel = C: C fibers, each taking the next request as it
 *            finishes one, on weft_connect/weft_write/weft_read
 *   omp      #pragma omp parallel for schedule(dynamic,1) over the R
 *            requests on plain blocking sockets: weft's own fallback, and
 *            what a C programmer writes without weft; as many in flight as
 *            the OpenMP team has threads
 *   threads  a pthread per request, at most C alive at once (a new one starts
 *            when one ends), on plain blocking sockets
 *   go       the Go baseline (benchmarks/go/httpget, weft-go-httpget): C
 *            goroutines taking the next request from a counter, net/http's
 *            client with keep-alive as asked; a fresh process per repetition
 *            against the same server (skipped without Go)
 *
 * Why a parallel map rather than C hand-made fibers that loop: the map is the
 * API that weft offers for this (max_parallel is its bound on requests in
 * flight), its fibers claim indices from a shared counter exactly as C
 * looping fibers would, and it makes the weft and omp backends the same loop
 * over the same R elements. Connections that outlive a request (--keepalive)
 * live in the client's pool, not in a fiber, so nothing needs a long-lived
 * worker.
 *
 * By default the server is weft-bench's own, on 127.0.0.1 (a fiber per
 * connection, serving a fixed 9 KiB page), shared by all backends, the go
 * one included, so that only the client changes between them. --url points
 * the clients at another server instead.
 */
#define _POSIX_C_SOURCE 200809L
#include "driver.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "http.h"
#include "net.h"
#include "server.h"
#include "weft.h"

#define MAX_REQUESTS    50000000 /* a float of latency each */
#define MAX_CONCURRENCY 100000
#define MAX_TIMEOUT_MS  3600000
#define PAGE_SEED       42
#define WARMUP_MIN      100 /* default warm-up: max(this, WARMUP_PER_C x C), at most R */
#define WARMUP_PER_C    5

static const char http_help[] =
    "usage: weft-bench http [--url URL] [--requests R] [--concurrency C] [--keepalive]\n"
    "                       [--warmup W] [--backend B[,B...]] [--timeout-ms T] [--repeat K]\n"
    "                       [--json]\n"
    "\n"
    "R HTTP/1.1 GETs, at most C in flight, by the same client on each backend:\n"
    "requests per second, latency percentiles and errors.\n"
    "\n"
    "  --url URL        http://host[:port][/path] of the server (the name is resolved\n"
    "                   once, with getaddrinfo through weft_blocking); default: a\n"
    "                   loopback server that weft-bench runs on fibers, serving a\n"
    "                   9216-byte page\n"
    "  --requests R     GETs per measurement (default 10000)\n"
    "  --concurrency C  most requests in flight (default 1000)\n"
    "  --keepalive      reuse connections (default: connect, GET, close per request)\n"
    "  --warmup W       untimed GETs right before every measurement, on the same\n"
    "                   client (default max(100, 5 x C), at most R; 0: none)\n"
    "  --backend B      weft     WEFT_BLOCKING weft_pmap, max_parallel = C (fibers)\n"
    "                   omp      #pragma omp parallel for schedule(dynamic,1), plain\n"
    "                            blocking sockets (in flight: the team's threads)\n"
    "                   threads  a pthread per request, at most C at once, plain\n"
    "                            blocking sockets\n"
    "                   go       Go's net/http client, C goroutines (the Go baseline\n"
    "                            weft-go-httpget, a process per repetition, against\n"
    "                            the same server; skipped with a message when this\n"
    "                            build has no Go)\n"
    "                   weft-epoll  as weft, with the runtime started with\n"
    "                            WEFT_IO_URING=1 (sockets through epoll, read(2)\n"
    "                            and send(2), where weft's default has socket reads\n"
    "                            and writes as io_uring requests); with --url only\n"
    "                   a comma-separated list; default: all that this build has\n"
    "                   but weft-epoll\n"
    "  --timeout-ms T   limit of one request, connect included (default 10000)\n"
    "  --repeat K       K repetitions, backends interleaved; medians and spread\n"
    "  --json           one JSON object per backend (JSON Lines) on stdout\n"
    "  --help           this text\n"
    "\n"
    "Every measurement directly follows its warm-up of W requests on the same\n"
    "client: the go backend's program runs its own in each of its processes, and\n"
    "weft-bench's backends run theirs before each repetition, so that each client\n"
    "is measured in its steady state (weft's runtime has its fiber stacks by then,\n"
    "even where the runtime was restarted for weft-epoll, or gave memory back while\n"
    "other backends ran). With --keepalive the connections a client opens are kept\n"
    "and reused by its later requests (as Go's Transport in its program, and wrk\n"
    "over its run), and a warm-up first opens the client's pool up to C\n"
    "connections, so that the timed requests open none. A request that fails is\n"
    "counted and reported, never fatal. The soft descriptor limit is raised to the hard\n"
    "limit; a run that needs more descriptors than that says so and exits 1.\n"
    "The go backend's CPU time is its program's plus, with weft-bench's own\n"
    "server, that server's share; $WEFT_BENCH_GO_DIR names the folder of the Go\n"
    "baselines (default: this build's). Exit codes: 0 ok (also when go is\n"
    "skipped), 1 a request or the server failed, 2 usage, 3 a backend this build\n"
    "lacks.\n";

enum { B_WEFT, B_OMP, B_THREADS, B_GO, B_WEFT_EPOLL, NBACKENDS };

/* ------------------------------------------------------------------------ */
/* One measured run of one backend                                           */
/* ------------------------------------------------------------------------ */

typedef struct run_ctx {
  wb_http_client *cl;
  float *lat_us;    /* per request, microseconds; NAN when it failed */
  wb_errors errors; /* the failures, the first one as text */
  atomic_size_t ok; /* requests that succeeded */
  size_t stack;     /* threads backend: stack size */
} run_ctx;

/* One request: any context (fiber, OpenMP thread, a thread of its own). */
static int one_request(void *arg, size_t i) {
  run_ctx *rc = arg;
  int64_t t0 = wb_now_ns();
  wb_http_resp r;
  int e = wb_http_get(rc->cl, &r);
  if (e == 0) {
    rc->lat_us[i] = (float)((double)(wb_now_ns() - t0) / 1e3);
    atomic_fetch_add_explicit(&rc->ok, 1, memory_order_relaxed);
  } else {
    rc->lat_us[i] = NAN;
    wb_http_error(&rc->errors, e, &r);
  }
  /* The map's own error would stop nothing and say less than the count: always 0. */
  return 0;
}

static void run_weft(run_ctx *ctx, size_t requests, size_t concurrency) {
  weft_pmap_opts o = WEFT_PMAP_OPTS_INIT;
  o.kind = WEFT_BLOCKING;
  o.max_parallel = concurrency;
  int rc = weft_pmap(requests, one_request, ctx, &o);
  if (rc < 0) wb_errors_add(&ctx->errors, "weft_pmap", rc, NULL);
}

#ifdef _OPENMP
static void run_omp(run_ctx *ctx, size_t requests) {
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t i = 0; i < requests; i++) one_request(ctx, i);
}
#endif

/* The thread-per-request backend: C slots; a slot's thread frees it as its last act. */
typedef struct tpr tpr;
typedef struct tpr_slot {
  pthread_t tid;
  bool live;    /* tid is a thread not yet joined (main thread only) */
  size_t index; /* the request; written by the main thread before the thread starts */
  tpr *t;
} tpr_slot;

struct tpr {
  run_ctx *ctx;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* a slot was freed */
  size_t *free_ids;  /* protected by mu */
  size_t nfree;
  tpr_slot *slots;
};

static void *tpr_main(void *arg) {
  tpr_slot *s = arg;
  tpr *t = s->t;
  one_request(t->ctx, s->index);
  /* Last touch of the slot: the main thread may join us and reuse it once the id is back. */
  pthread_mutex_lock(&t->mu);
  t->free_ids[t->nfree++] = (size_t)(s - t->slots);
  pthread_cond_signal(&t->cv);
  pthread_mutex_unlock(&t->mu);
  return NULL;
}

static void run_threads(run_ctx *ctx, size_t requests, size_t concurrency) {
  tpr t;
  t.ctx = ctx;
  t.slots = calloc(concurrency, sizeof *t.slots);
  t.free_ids = malloc(concurrency * sizeof *t.free_ids);
  if (!t.slots || !t.free_ids) {
    free(t.slots);
    free(t.free_ids);
    wb_errors_add(&ctx->errors, "threads", -ENOMEM, NULL);
    return;
  }
  pthread_mutex_init(&t.mu, NULL);
  pthread_cond_init(&t.cv, NULL);
  for (size_t k = 0; k < concurrency; k++) {
    t.slots[k].t = &t;
    t.free_ids[k] = concurrency - 1 - k;
  }
  t.nfree = concurrency;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, ctx->stack);
  for (size_t i = 0; i < requests; i++) {
    pthread_mutex_lock(&t.mu);
    while (t.nfree == 0) pthread_cond_wait(&t.cv, &t.mu);
    size_t id = t.free_ids[--t.nfree];
    pthread_mutex_unlock(&t.mu);
    tpr_slot *s = &t.slots[id];
    if (s->live) pthread_join(s->tid, NULL); /* it has freed its slot: it is returning */
    s->index = i;
    int e = pthread_create(&s->tid, &attr, tpr_main, s);
    s->live = e == 0;
    if (e != 0) {
      ctx->lat_us[i] = NAN;
      wb_errors_add(&ctx->errors, "pthread_create", -e, NULL);
      pthread_mutex_lock(&t.mu);
      t.free_ids[t.nfree++] = id;
      pthread_mutex_unlock(&t.mu);
    }
  }
  for (size_t k = 0; k < concurrency; k++)
    if (t.slots[k].live) pthread_join(t.slots[k].tid, NULL);
  pthread_attr_destroy(&attr);
  pthread_cond_destroy(&t.cv);
  pthread_mutex_destroy(&t.mu);
  free(t.slots);
  free(t.free_ids);
}

/* What one run gives. */
typedef struct run_result {
  double elapsed_ms;
  double cpu_ms; /* the process's CPU time during the run: client, server and weft's threads */
  size_t ok, errors;
  char first_error[256];
  wb_latency lat;
  unsigned retries, reconnects, connects;
} run_result;

typedef struct http_setup {
  wb_url url;
  wb_addr addr;
  bool keepalive;
  size_t expect_len; /* SIZE_MAX with --url */
  int64_t timeout_ns;
  size_t stack;
  bool external; /* --url: no loopback server on weft's runtime, which may then be restarted */
} http_setup;

/*
 * The client of backend b, cl: made at its first run (the warm-up) and kept
 * for all its repetitions, so that, as Go's http.Transport in its program
 * and wrk over its whole run, the measured requests reuse the connections
 * that the warm-up opened (keep-alive), instead of opening C new ones in
 * every repetition. Made when cl->req is NULL (zeroed, or closed by
 * close_clients). NULL when it cannot be made (*err set).
 */
static wb_http_client *client_of(const http_setup *hs, wb_http_client *cl, bool weft, size_t concurrency,
                                 int *err) {
  if (cl->req) return cl;
  memset(cl, 0, sizeof *cl);
  cl->io = weft ? WB_IO_WEFT : WB_IO_PLAIN;
  cl->addr = hs->addr;
  cl->url = &hs->url;
  cl->keepalive = hs->keepalive;
  cl->expect_len = hs->expect_len;
  cl->timeout_ns = hs->timeout_ns;
  cl->pool_cap = concurrency;
  *err = wb_http_client_init(cl);
  return *err < 0 ? NULL : cl;
}

/*
 * Run `requests` GETs on backend b with its client; lat must hold `requests`
 * floats. fresh: each request opens a connection of its own (kept-alive
 * ones go to the pool).
 */
static void measure(const http_setup *hs, int b, size_t requests, size_t concurrency, bool fresh, float *lat,
                    wb_http_client *kept, run_result *res) {
  memset(res, 0, sizeof *res);
  bool weft = b == B_WEFT || b == B_WEFT_EPOLL;
  if (weft && hs->external) wb_weft_io_uring(b == B_WEFT_EPOLL ? 1 : -1);
  int rc = 0;
  wb_http_client *cl = client_of(hs, kept, weft, concurrency, &rc);
  if (!cl) {
    res->errors = requests;
    snprintf(res->first_error, sizeof res->first_error, "client: %s", weft_strerror(rc));
    return;
  }
  atomic_store(&cl->retries, 0);
  atomic_store(&cl->reconnects, 0);
  atomic_store(&cl->connects, 0);
  cl->fresh = fresh;
  run_ctx ctx;
  ctx.cl = cl;
  ctx.lat_us = lat;
  ctx.stack = hs->stack;
  wb_errors_init(&ctx.errors);
  atomic_init(&ctx.ok, 0);
  for (size_t i = 0; i < requests; i++) lat[i] = NAN;
  wb_usage u0 = wb_usage_now();
  int64_t t0 = wb_now_ns();
  if (weft) run_weft(&ctx, requests, concurrency);
#ifdef _OPENMP
  else if (b == B_OMP)
    run_omp(&ctx, requests);
#endif
  else if (b == B_THREADS)
    run_threads(&ctx, requests, concurrency);
  res->elapsed_ms = (double)(wb_now_ns() - t0) / 1e6;
  res->cpu_ms = wb_usage_cpu_ms(wb_usage_since(wb_usage_now(), u0));
  res->ok = atomic_load(&ctx.ok);
  /* Whatever did not succeed is an error, counted or not (a map that could not start counts them all). */
  res->errors = requests - res->ok;
  snprintf(res->first_error, sizeof res->first_error, "%s", wb_errors_first(&ctx.errors));
  res->retries = atomic_load(&cl->retries);
  res->reconnects = atomic_load(&cl->reconnects);
  res->connects = atomic_load(&cl->connects);
  cl->fresh = false;
  res->lat = wb_latency_summary(lat, requests);
}

/* ------------------------------------------------------------------------ */
/* The command                                                               */
/* ------------------------------------------------------------------------ */

enum { OPT_URL = 1, OPT_REQUESTS, OPT_CONCURRENCY, OPT_KEEPALIVE, OPT_TIMEOUT, OPT_WARMUP };

static const wb_opt http_opts[] = {
    {"url", true, OPT_URL},
    {"requests", true, OPT_REQUESTS},
    {"concurrency", true, OPT_CONCURRENCY},
    {"keepalive", false, OPT_KEEPALIVE},
    {"timeout-ms", true, OPT_TIMEOUT},
    {"warmup", true, OPT_WARMUP},
    {NULL, false, 0},
};

static const wb_choice http_backends[] = {
    {"weft", "weft pmap BLOCKING (fibers)", NULL, B_WEFT},
    {"omp", "OpenMP parallel for (blocking sockets)", WB_NEEDS_OPENMP, B_OMP},
    {"threads", "thread per request (blocking sockets)", NULL, B_THREADS},
    {"go", "Go net/http client (goroutines)", NULL, B_GO},
    {"weft-epoll", "weft pmap BLOCKING (fibers), WEFT_IO_URING=1", NULL, B_WEFT_EPOLL},
};

/* M_P50 .. M_CORES together and in this order: wb_print_net_cells prints them. */
enum { M_RPS, M_P50, M_P90, M_P99, M_PMAX, M_CPU_US, M_CORES, NMETRICS };
static const wb_metric http_metrics[NMETRICS] = {
    {"rps", WB_METRIC_MINMAX | WB_METRIC_SAMPLES, 1e-3},
    {"latency_ms_p50", 0, 1e-3},
    {"latency_ms_p90", 0, 1e-3},
    {"latency_ms_p99", 0, 1e-3},
    {"latency_ms_max", WB_METRIC_MAX, 1e-3},
    {"cpu_us_per_request", 0, 1e-3},
    {"cpu_cores_used", 0, 1e-2},
};

/* What a backend adds up over its repetitions besides the samples. */
typedef struct http_totals {
  size_t in_flight; /* C; the team size for omp */
  size_t errors, warmup_errors;
  unsigned retries, reconnects; /* go: reconnects are net/http's own, not counted */
  /* go: what its records say about the program (the last one's), its largest peak RSS, its dials */
  char go_version[64];
  int64_t gomaxprocs;
  double peak_rss_kb;        /* NAN: none read */
  size_t connections_opened; /* by the measured requests (go: its program's dials) */
  size_t served;         /* the loopback server's responses to this backend's requests, warm-ups included */
  wb_http_client client; /* weft-bench's own backends: kept over the repetitions (client_of) */
} http_totals;

typedef struct http_cmd {
  const char *url_arg;
  int64_t requests, concurrency, timeout_ms;
  int64_t warmup_arg; /* --warmup; -1: the default */
  bool keepalive;
  http_setup hs;
  size_t warmup; /* requests of each warm-up */
  wb_http_page page;
  bool have_page;
  wb_server *srv;
  wb_server_stats srv_stats;
  atomic_size_t served; /* the loopback server's responses (its page counts them) */
  int backlog;
  char url[1100]; /* the URL the clients GET */
  float *lat;     /* a latency per request */
  http_totals totals[NBACKENDS];
} http_cmd;

static int http_option(wb_driver *d, int id, const char *arg) {
  http_cmd *c = d->ctx;
  bool ok = true;
  switch (id) {
  case OPT_URL:
    c->url_arg = arg;
    break;
  case OPT_REQUESTS:
    ok = wb_parse_i64("http", "requests", arg, 1, MAX_REQUESTS, &c->requests);
    break;
  case OPT_CONCURRENCY:
    ok = wb_parse_i64("http", "concurrency", arg, 1, MAX_CONCURRENCY, &c->concurrency);
    break;
  case OPT_KEEPALIVE:
    c->keepalive = true;
    break;
  case OPT_TIMEOUT:
    ok = wb_parse_i64("http", "timeout-ms", arg, 1, MAX_TIMEOUT_MS, &c->timeout_ms);
    break;
  case OPT_WARMUP:
    ok = wb_parse_i64("http", "warmup", arg, 0, MAX_REQUESTS, &c->warmup_arg);
    break;
  }
  return ok ? 0 : WB_EXIT_USAGE;
}

static int http_prepare(wb_driver *d) {
  http_cmd *c = d->ctx;
  char err[512] = "";
  if (c->url_arg && wb_url_parse(c->url_arg, &c->hs.url, err, sizeof err) < 0)
    return wb_usage_error("http", "--url: %s", err);
  /*
   * Descriptors: a client socket per request in flight, and the server's end
   * of each when it is ours; each of weft-bench's own backends keeps its
   * connections open over the repetitions (client_of).
   */
  uint64_t own = 0;
  for (size_t j = 0; j < d->npicked; j++) own += wb_picked(d, j)->id != B_GO;
  if (own == 0) own = 1;
  uint64_t fd_limit;
  uint64_t need = own * (uint64_t)c->concurrency * (c->url_arg ? 1 : 2) + 64;
  if (wb_net_fd_limit("http", need, &fd_limit) < 0) return WB_EXIT_FAIL;
  for (size_t j = 0; j < d->npicked; j++) {
    const wb_choice *ch = wb_picked(d, j);
    wb_run *r = wb_add_run(d, ch->name, ch->id);
    if (!r) return WB_EXIT_FAIL;
    r->label = ch->label;
    r->state = &c->totals[ch->id];
    c->totals[ch->id].in_flight = (size_t)c->concurrency;
    c->totals[ch->id].peak_rss_kb = NAN;
    if (ch->id == B_GO) r->family = "go";
    if (ch->id == B_WEFT_EPOLL && !c->url_arg)
      wb_skip(d, r,
              "needs --url (the runtime restarts with WEFT_IO_URING=1; the loopback server runs on it)");
#ifdef _OPENMP
    if (ch->id == B_OMP) c->totals[ch->id].in_flight = (size_t)omp_get_max_threads();
#endif
  }
  if (c->warmup_arg >= 0) {
    c->warmup = (size_t)c->warmup_arg;
  } else {
    size_t w = WARMUP_PER_C * (size_t)c->concurrency;
    c->warmup = w > WARMUP_MIN ? w : WARMUP_MIN;
    if (c->warmup > (size_t)c->requests) c->warmup = (size_t)c->requests;
  }
  return 0;
}

static int http_args(wb_driver *d, wb_args *a) {
  http_cmd *c = d->ctx;
  if (c->url_arg) {
    wb_args_add(a, "--url");
    wb_args_add(a, c->url_arg);
  }
  wb_args_int(a, "--requests", c->requests);
  wb_args_int(a, "--concurrency", c->concurrency);
  if (c->keepalive) wb_args_add(a, "--keepalive");
  wb_args_int(a, "--warmup", (int64_t)c->warmup);
  wb_args_picked(d, a);
  wb_args_int(a, "--timeout-ms", c->timeout_ms);
  wb_args_repeat(d, a);
  return 0;
}

static int http_start(wb_driver *d) {
  http_cmd *c = d->ctx;
  char err[512] = "";
  c->hs.keepalive = c->keepalive;
  c->hs.timeout_ns = c->timeout_ms * 1000000;
  c->hs.stack = wb_net_thread_stack();
  c->hs.expect_len = SIZE_MAX;
  c->hs.external = c->url_arg != NULL;
  if (!(c->lat = malloc((size_t)c->requests * sizeof *c->lat))) {
    fprintf(stderr, "weft-bench http: out of memory for %lld latencies\n", (long long)c->requests);
    return WB_EXIT_FAIL;
  }
  int rc = 0;
  if (!c->url_arg) {
    rc = wb_http_page_init(&c->page, WB_HTTP_BODY_BYTES, PAGE_SEED, c->hs.timeout_ns);
    if (rc < 0) {
      snprintf(err, sizeof err, "out of memory");
    } else {
      c->have_page = true;
      atomic_init(&c->served, 0);
      c->page.served = &c->served;
      /*
       * The loopback server runs on fibers; without them (WEFT_FIBERS=0) a
       * server connection would hold one of the fallback's few threads for
       * its whole life, so it gets a thread of its own instead.
       */
      rc = wb_server_start(weft_fibers_available() ? WB_IO_WEFT : WB_IO_PLAIN, (size_t)c->concurrency, 0,
                           false, wb_http_serve, &c->page, &c->srv, err, sizeof err);
    }
    if (rc == 0) {
      char hp[96];
      wb_net_addr_str(wb_server_addr(c->srv), hp, sizeof hp);
      snprintf(c->url, sizeof c->url, "http://%s/", hp);
      wb_url_parse(c->url, &c->hs.url, err, sizeof err);
      c->hs.addr = *wb_server_addr(c->srv);
      c->hs.expect_len = WB_HTTP_BODY_BYTES;
      c->backlog = wb_server_backlog(c->srv);
    }
  } else {
    snprintf(c->url, sizeof c->url, "%s", c->url_arg);
    rc = wb_net_resolve(c->hs.url.host, c->hs.url.port, &c->hs.addr, err, sizeof err);
  }
  if (rc < 0) {
    fprintf(stderr, "weft-bench http: %s\n", err);
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
 * One repetition of the go backend: weft-go-httpget GETs the run's URL (the
 * loopback server's, or --url's) with the run's values, after a warm-up of
 * its own of the same size as the other backends' (every repetition is a
 * fresh process), and its record is read into res as measure would have
 * filled it. Its CPU time is its own over the R requests; with weft-bench's
 * server, the server's CPU time (this process's, while the program ran) is
 * added, scaled to the R requests of the warm-up and R it served, so that
 * the figure covers both sides like the other backends'. 0, WB_SKIP without
 * the program, or a negative errno when it gave no figures (err says why).
 */
static int measure_go(const http_cmd *c, http_totals *t, run_result *res, char *err, size_t errlen) {
  memset(res, 0, sizeof *res);
  char path[4096];
  if (wb_go_find("weft-go-httpget", path, sizeof path, err, errlen) < 0) return WB_SKIP;
  char req_s[24], conc_s[24], timeout_s[24], warm_s[24], expect_s[24];
  snprintf(req_s, sizeof req_s, "%lld", (long long)c->requests);
  snprintf(conc_s, sizeof conc_s, "%lld", (long long)c->concurrency);
  snprintf(timeout_s, sizeof timeout_s, "%lld", (long long)c->timeout_ms);
  snprintf(warm_s, sizeof warm_s, "%zu", c->warmup);
  snprintf(expect_s, sizeof expect_s, "%lld",
           c->hs.expect_len == SIZE_MAX ? -1LL : (long long)c->hs.expect_len);
  char *argv[16];
  size_t k = 0;
  argv[k++] = path;
  argv[k++] = "-url";
  argv[k++] = (char *)c->url;
  argv[k++] = "-requests";
  argv[k++] = req_s;
  argv[k++] = "-concurrency";
  argv[k++] = conc_s;
  argv[k++] = "-timeout-ms";
  argv[k++] = timeout_s;
  argv[k++] = "-warmup";
  argv[k++] = warm_s;
  argv[k++] = "-expect-bytes";
  argv[k++] = expect_s;
  if (c->keepalive) argv[k++] = "-keepalive";
  argv[k] = NULL;
  json_t *rec = NULL;
  int code;
  wb_usage u0 = wb_usage_now();
  int rc = wb_run_json(path, argv, NULL, &rec, &code);
  double server_ms = wb_usage_cpu_ms(wb_usage_since(wb_usage_now(), u0));
  /* Exit code 1 with a record: requests failed, and the record has the figures and the first error. */
  const char *status = wb_json_get_str(rec, "status");
  double ms, ok;
  if (rc < 0 || (code != 0 && code != 1) || !status || !wb_json_get_num(rec, "elapsed_ms", &ms) ||
      !wb_json_get_num(rec, "requests_ok", &ok)) {
    json_decref(rec);
    snprintf(err, errlen, "%.180s failed (exit code %d)", path, code);
    return rc < 0 ? rc : -EIO;
  }
  res->elapsed_ms = ms;
  res->cpu_ms = (num_or_nan(rec, "cpu_user_s") + num_or_nan(rec, "cpu_sys_s")) * 1000.0;
  if (c->srv) {
    double warm = (double)count_of(rec, "warmup_requests"), timed = (double)c->requests;
    res->cpu_ms += server_ms * timed / (timed + warm);
  }
  res->ok = ok > 0 ? (size_t)ok : 0;
  res->errors = (size_t)c->requests - (res->ok < (size_t)c->requests ? res->ok : (size_t)c->requests);
  res->retries = (unsigned)count_of(rec, "connect_retries");
  res->lat.p50 = num_or_nan(rec, "latency_ms_p50");
  res->lat.p90 = num_or_nan(rec, "latency_ms_p90");
  res->lat.p99 = num_or_nan(rec, "latency_ms_p99");
  res->lat.max = num_or_nan(rec, "latency_ms_max");
  const char *first = wb_json_get_str(rec, "error");
  if (!first && strcmp(status, "ok") != 0) first = "weft-go-httpget reported a failure";
  snprintf(res->first_error, sizeof res->first_error, "%s", first ? first : "");
  t->warmup_errors += count_of(rec, "warmup_errors");
  t->connections_opened += count_of(rec, "connections_opened");
  const char *v = wb_json_get_str(rec, "go_version");
  snprintf(t->go_version, sizeof t->go_version, "%s", v ? v : "unknown");
  double x;
  t->gomaxprocs = wb_json_get_num(rec, "gomaxprocs", &x) ? (int64_t)x : -1;
  if (wb_json_get_num(rec, "peak_rss_kb", &x) && (isnan(t->peak_rss_kb) || x > t->peak_rss_kb))
    t->peak_rss_kb = x;
  json_decref(rec);
  return 0;
}

/*
 * The warm-up phase, untimed: with --keepalive, first the client's pool is
 * topped up to min(C, R) connections, each opened by a request of its own;
 * then W requests. It starts weft's carriers, the OpenMP team and the
 * server's fibers, and makes each client. The driver runs it once more right
 * before every timed repetition (WB_CMD_WARMUP_EACH), as the go backend's
 * program does in each of its processes: a backend is measured as it runs
 * after W requests, not after whatever ran between its repetitions
 * (weft-epoll restarts the runtime, whose fiber stacks go with it; an idle
 * runtime gives stack memory back).
 */
/* A warm-up's failed requests: counted, and the first one's text on the sample. */
static void warmup_failures(http_totals *t, wb_sample *s, const run_result *res) {
  t->warmup_errors += res->errors;
  if (res->errors && !s->failed) {
    s->failed = true;
    snprintf(s->error, sizeof s->error, "%s", res->first_error);
  }
}

static void warm_up(http_cmd *c, wb_run *r, http_totals *t, wb_sample *s) {
  run_result res;
  size_t want = (size_t)(c->concurrency < c->requests ? c->concurrency : c->requests);
  size_t have = wb_http_client_idle(&t->client);
  /*
   * A pool that holds fewer than C connections opens the rest in a timed
   * repetition, whenever its requests in flight first reach a new high (a
   * map ramps up as its elements park). A server takes new connections at
   * its own pace (nginx accepts one per listener event and loop): 61 fresh
   * connections left requests of a repetition at 20,000 x 1000 waiting 40 to
   * 240 ms for their accept. wrk and the go program open their C
   * connections at once, when their C loops start.
   */
  if (c->keepalive && have < want) {
    measure(&c->hs, r->id, want - have, want, true, c->lat, &t->client, &res);
    warmup_failures(t, s, &res);
  }
  measure(&c->hs, r->id, c->warmup, (size_t)c->concurrency, false, c->lat, &t->client, &res);
  warmup_failures(t, s, &res);
}

static int http_run_counted(wb_driver *d, wb_run *r, wb_phase phase, wb_sample *s) {
  http_cmd *c = d->ctx;
  http_totals *t = r->state;
  run_result res;
  if (r->id == B_GO) {
    /* The go program warms itself up in each of its processes; here, only whether it is there. */
    char path[4096];
    if (phase == WB_WARMUP) {
      s->idle = true;
      return wb_go_find("weft-go-httpget", path, sizeof path, s->error, sizeof s->error) < 0 ? WB_SKIP : 0;
    }
    int rc = measure_go(c, t, &res, s->error, sizeof s->error);
    if (rc != 0) return rc;
  } else if (phase == WB_WARMUP) {
    s->quiet = true;
    if (c->warmup)
      warm_up(c, r, t, s);
    else
      s->idle = true;
    return 0;
  } else {
    measure(&c->hs, r->id, (size_t)c->requests, (size_t)c->concurrency, false, c->lat, &t->client, &res);
    t->connections_opened += res.connects;
  }
  /* Failed requests are counted and reported, never fatal: the figures stand, the record says "failed". */
  s->quiet = true;
  if (res.errors) {
    s->failed = true;
    snprintf(s->error, sizeof s->error, "%s", res.first_error);
  }
  s->ms = res.elapsed_ms;
  s->m[M_RPS] = res.elapsed_ms > 0 ? (double)res.ok / (res.elapsed_ms / 1000.0) : 0;
  s->m[M_P50] = res.lat.p50;
  s->m[M_P90] = res.lat.p90;
  s->m[M_P99] = res.lat.p99;
  s->m[M_PMAX] = res.lat.max;
  s->m[M_CPU_US] = res.ok ? res.cpu_ms * 1000.0 / (double)res.ok : NAN;
  s->m[M_CORES] = res.elapsed_ms > 0 ? res.cpu_ms / res.elapsed_ms : NAN;
  t->errors += res.errors;
  t->retries += res.retries;
  t->reconnects += res.reconnects;
  return 0;
}

/* One run, and what the loopback server served for it (the server's count, before and after). */
static int http_run(wb_driver *d, wb_run *r, wb_phase phase, wb_sample *s) {
  http_cmd *c = d->ctx;
  http_totals *t = r->state;
  size_t before = c->have_page ? atomic_load(&c->served) : 0;
  int rc = http_run_counted(d, r, phase, s);
  if (c->have_page) t->served += atomic_load(&c->served) - before;
  return rc;
}

/* Close the kept clients' idle connections (before the loopback server stops: they end cleanly). */
static void close_clients(http_cmd *c) {
  for (int b = 0; b < NBACKENDS; b++) {
    wb_http_client *cl = &c->totals[b].client;
    if (cl->req) wb_http_client_fini(cl); /* which leaves req NULL */
  }
}

static void http_finish(wb_driver *d) {
  http_cmd *c = d->ctx;
  close_clients(c);
  if (!c->srv) return;
  wb_server_stop(c->srv, &c->srv_stats);
  c->srv = NULL;
  /* A server connection that failed fails every backend's record: which client it served is not known. */
  for (size_t j = 0; j < d->nruns && c->srv_stats.errors; j++) {
    wb_run *r = &d->runs[j];
    r->failed = true;
    if (!r->error[0]) snprintf(r->error, sizeof r->error, "server: %s", c->srv_stats.first_error);
  }
}

static int http_record(wb_driver *d, const wb_run *r, json_t *rec) {
  http_cmd *c = d->ctx;
  const http_totals *t = r->state;
  bool own = !c->url_arg;
  int rc = wb_json_set_str(rec, "label", wb_run_label(r));
  if (rc == 0) rc = wb_json_set_str(rec, "url", c->url);
  if (rc == 0) rc = wb_json_set_str(rec, "server", own ? "loopback" : "external");
  if (rc == 0)
    rc = c->hs.expect_len != SIZE_MAX ? wb_json_set_int(rec, "body_bytes", (int64_t)c->hs.expect_len)
                                      : wb_json_set_null(rec, "body_bytes");
  if (rc == 0) rc = wb_json_set_int(rec, "requests", c->requests);
  if (rc == 0) rc = wb_json_set_int(rec, "concurrency", c->concurrency);
  if (rc == 0) rc = wb_json_set_int(rec, "in_flight_max", (int64_t)t->in_flight);
  if (rc == 0) rc = wb_json_set_bool(rec, "keepalive", c->keepalive);
  if (rc == 0) rc = wb_json_set_int(rec, "timeout_ms", c->timeout_ms);
  if (rc == 0) rc = wb_json_set_int(rec, "errors", (int64_t)t->errors);
  if (rc == 0) rc = wb_json_set_int(rec, "warmup_requests", (int64_t)c->warmup);
  if (rc == 0) rc = wb_json_set_int(rec, "warmup_errors", (int64_t)t->warmup_errors);
  if (rc == 0) rc = wb_json_set_int(rec, "connect_retries", t->retries);
  /* net/http retries a request on a kept-alive connection that the server closed, without a count. */
  if (rc == 0)
    rc = r->id == B_GO ? wb_json_set_null(rec, "reconnects")
                       : wb_json_set_int(rec, "reconnects", t->reconnects);
  if (rc == 0)
    rc = own ? wb_json_set_int(rec, "server_errors", (int64_t)c->srv_stats.errors)
             : wb_json_set_null(rec, "server_errors");
  if (rc == 0)
    rc = own ? wb_json_set_int(rec, "listen_backlog", c->backlog) : wb_json_set_null(rec, "listen_backlog");
  if (rc == 0)
    rc = own ? wb_json_set_int(rec, "server_requests", (int64_t)t->served)
             : wb_json_set_null(rec, "server_requests");
  if (rc == 0) rc = wb_json_set_int(rec, "connections_opened", (int64_t)t->connections_opened);
  if (rc == 0 && r->id == B_GO && t->go_version[0]) {
    /* The Go program's own process: its peak RSS (the largest over the repetitions), its runtime. */
    rc = wb_json_set_num(rec, "peak_rss_kb", t->peak_rss_kb);
    if (rc == 0) rc = wb_json_set_str(rec, "go_version", t->go_version);
    if (rc == 0) rc = wb_json_set_int(rec, "gomaxprocs", t->gomaxprocs);
  }
  if (rc == 0 && r->id == B_WEFT) {
    const wb_run *omp = wb_find_run(d, "omp"), *thr = wb_find_run(d, "threads"), *go = wb_find_run(d, "go");
    rc = omp ? wb_json_add_ratio(rec, "vs_omp", r->m[M_RPS], r->n, omp->m[M_RPS], omp->n)
             : wb_json_set_null(rec, "vs_omp");
    if (rc == 0)
      rc = thr ? wb_json_add_ratio(rec, "vs_threads", r->m[M_RPS], r->n, thr->m[M_RPS], thr->n)
               : wb_json_set_null(rec, "vs_threads");
    if (rc == 0)
      rc = go ? wb_json_add_ratio(rec, "vs_go", r->m[M_RPS], r->n, go->m[M_RPS], go->n)
              : wb_json_set_null(rec, "vs_go");
  }
  return rc;
}

static void http_report(wb_driver *d) {
  http_cmd *c = d->ctx;
  printf("http: %lld GETs of %s (%s), at most %lld in flight, %s; %u cores\n", (long long)c->requests, c->url,
         c->url_arg ? "external server" : "weft-bench's loopback server, a fiber per connection",
         (long long)c->concurrency, c->keepalive ? "connections kept alive" : "a new connection per request",
         wb_cores());
  printf("%-10s %9s %12s %12s %12s %9s %9s %9s %9s %10s %5s %8s\n", "backend", "in flight", "requests/s",
         "min", "max", "p50 ms", "p90 ms", "p99 ms", "max ms", "CPU us/req", "cores", "errors");
  for (size_t j = 0; j < d->nruns; j++) {
    const wb_run *r = &d->runs[j];
    const http_totals *t = r->state;
    if (r->skipped) {
      printf("%-10s skipped: %s\n", r->name, r->error);
      continue;
    }
    if (r->n == 0) {
      printf("%-10s  no repetition ran: %s\n", r->name, r->error);
      continue;
    }
    wb_summary s = wb_run_metric(r, M_RPS);
    printf("%-10s %9zu %12.0f %12.0f %12.0f", r->name, t->in_flight, s.median, s.min, s.max);
    wb_print_net_cells(r, M_P50);
    printf(" %8zu\n", t->errors);
  }
  const wb_run *w = wb_find_run(d, "weft"), *omp = wb_find_run(d, "omp"), *thr = wb_find_run(d, "threads");
  const wb_run *go = wb_find_run(d, "go");
  if (w && omp) wb_print_ratio("weft/omp", w->m[M_RPS], w->n, omp->m[M_RPS], omp->n);
  if (w && thr) wb_print_ratio("weft/threads", w->m[M_RPS], w->n, thr->m[M_RPS], thr->n);
  if (w && go) wb_print_ratio("weft/go", w->m[M_RPS], w->n, go->m[M_RPS], go->n);
  const wb_run *we = wb_find_run(d, "weft-epoll");
  if (w && we && !we->skipped) wb_print_ratio("weft/weft-epoll", w->m[M_RPS], w->n, we->m[M_RPS], we->n);
  for (size_t j = 0; j < d->nruns; j++) {
    const http_totals *t = d->runs[j].state;
    if (t->errors || t->warmup_errors)
      printf("  %s: %zu errors (%zu in the warm-up); first: %s\n", d->runs[j].name, t->errors,
             t->warmup_errors, d->runs[j].error);
  }
  if (c->srv_stats.errors)
    printf("  server: %zu errors; first: %s\n", c->srv_stats.errors, c->srv_stats.first_error);
  const http_totals *gt = go ? go->state : NULL;
  if (gt && gt->go_version[0])
    printf("  go: weft-go-httpget, %s, GOMAXPROCS %lld, peak RSS %.0f KiB, %.0f connections per repetition\n",
           gt->go_version, (long long)gt->gomaxprocs, gt->peak_rss_kb,
           (double)gt->connections_opened / (double)go->n);
  printf("(medians over %zu repetitions; latency: connect to close of one request, percentiles are the\n"
         " medians of each repetition's, max the largest; CPU: the whole process's, server included\n"
         " (go: its program's, plus the server's share); cores: CPU time over wall time, the share of\n"
         " the machine the run got)\n",
         d->nruns ? d->runs[0].n : 0);
}

static void http_teardown(wb_driver *d) {
  http_cmd *c = d->ctx;
  close_clients(c);
  if (c->srv) wb_server_stop(c->srv, NULL);
  if (c->have_page) wb_http_page_fini(&c->page);
  free(c->lat);
}

static const wb_command http_command = {
    .name = "http",
    .help = http_help,
    .opts = http_opts,
    .pick = "backend",
    .choices = http_backends,
    .nchoices = sizeof http_backends / sizeof http_backends[0],
    .metrics = http_metrics,
    .nmetrics = NMETRICS,
    .max_repeat = 1000,
    .flags = WB_CMD_WARMUP | WB_CMD_WARMUP_EACH,
    .option = http_option,
    .prepare = http_prepare,
    .args = http_args,
    .setup = http_start,
    .run = http_run,
    .finish = http_finish,
    .record = http_record,
    .report = http_report,
    .teardown = http_teardown,
};

int wb_cmd_http(int argc, char **argv) {
  http_cmd c;
  memset(&c, 0, sizeof c);
  c.requests = 10000;
  c.concurrency = 1000;
  c.timeout_ms = 10000;
  c.warmup_arg = -1;
  /*
   * The default list has go when its program is there. Asked for by name
   * without it, go is skipped with the reason, as in every command.
   */
  wb_command cmd = http_command;
  char path[4096], why[256], list[64] = "";
  /* Every backend this build has (omp needs OpenMP) but weft-epoll, go left out without its program. */
  bool go = wb_go_find("weft-go-httpget", path, sizeof path, why, sizeof why) == 0;
  size_t n = 0;
  for (size_t i = 0; i < cmd.nchoices; i++)
    if (!http_backends[i].unavailable && http_backends[i].id != B_WEFT_EPOLL &&
        (go || http_backends[i].id != B_GO) && n < sizeof list)
      n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", n ? "," : "", http_backends[i].name);
  cmd.pick_default = list;
  return wb_drive(&cmd, &c, argc, argv);
}
