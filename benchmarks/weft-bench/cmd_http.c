/*
 * This file contains `weft-bench http`: R GETs over C concurrent requests,
 * by the same HTTP/1.1 client (http.c) on three backends in one run:
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
 * connection, serving a fixed 9 KiB page), shared by all backends, so that
 * only the client changes between them. --url points the clients at another
 * server instead.
 */
#define _POSIX_C_SOURCE 200809L
#include "bench.h"

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
#include "weft.h"

#define MAX_REQUESTS    50000000 /* a float of latency each */
#define MAX_CONCURRENCY 100000
#define MAX_REPEAT      1000
#define MAX_TIMEOUT_MS  3600000
#define PAGE_SEED       42
#define WARMUP_MIN      100 /* untimed requests per backend first: max(this, C), at most R */

static const char http_help[] =
    "usage: weft-bench http [--url URL] [--requests R] [--concurrency C] [--keepalive]\n"
    "                       [--backend B[,B...]] [--timeout-ms T] [--repeat K] [--json]\n"
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
    "  --backend B      weft     WEFT_BLOCKING weft_pmap, max_parallel = C (fibers)\n"
    "                   omp      #pragma omp parallel for schedule(dynamic,1), plain\n"
    "                            blocking sockets (in flight: the team's threads)\n"
    "                   threads  a pthread per request, at most C at once, plain\n"
    "                            blocking sockets\n"
    "                   a comma-separated list; default: all that this build has\n"
    "  --timeout-ms T   limit of one request, connect included (default 10000)\n"
    "  --repeat K       K repetitions, backends interleaved; medians and spread\n"
    "  --json           one JSON object per backend (JSON Lines) on stdout\n"
    "  --help           this text\n"
    "\n"
    "Each backend first runs an untimed warm-up. A request that fails is counted\n"
    "and reported, never fatal. The soft descriptor limit is raised to the hard\n"
    "limit; a run that needs more descriptors than that says so and exits 1.\n"
    "Exit codes: 0 ok, 1 a request or the server failed, 2 usage, 3 a backend\n"
    "this build lacks.\n";

enum {
  OPT_HELP = 1,
  OPT_URL,
  OPT_REQUESTS,
  OPT_CONCURRENCY,
  OPT_KEEPALIVE,
  OPT_BACKEND,
  OPT_TIMEOUT,
  OPT_REPEAT,
  OPT_JSON
};

static const wb_opt http_opts[] = {
    {"help", false, OPT_HELP},           {"url", true, OPT_URL},
    {"requests", true, OPT_REQUESTS},    {"concurrency", true, OPT_CONCURRENCY},
    {"keepalive", false, OPT_KEEPALIVE}, {"backend", true, OPT_BACKEND},
    {"timeout-ms", true, OPT_TIMEOUT},   {"repeat", true, OPT_REPEAT},
    {"json", false, OPT_JSON},           {NULL, false, 0},
};

enum { B_WEFT, B_OMP, B_THREADS, NBACKENDS };
static const char *const backend_names[NBACKENDS] = {"weft", "omp", "threads"};
static const char *const backend_labels[NBACKENDS] = {"weft pmap BLOCKING (fibers)",
                                                      "OpenMP parallel for (blocking sockets)",
                                                      "thread per request (blocking sockets)"};

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
  unsigned retries, reconnects;
} run_result;

typedef struct http_setup {
  wb_url url;
  wb_addr addr;
  bool keepalive;
  size_t expect_len; /* SIZE_MAX with --url */
  int64_t timeout_ns;
  size_t stack;
} http_setup;

/* Run `requests` GETs on backend b; lat must hold `requests` floats. */
static void measure(const http_setup *hs, int b, size_t requests, size_t concurrency, float *lat,
                    run_result *res) {
  memset(res, 0, sizeof *res);
  wb_http_client cl;
  memset(&cl, 0, sizeof cl);
  cl.io = b == B_WEFT ? WB_IO_WEFT : WB_IO_PLAIN;
  cl.addr = hs->addr;
  cl.url = &hs->url;
  cl.keepalive = hs->keepalive;
  cl.expect_len = hs->expect_len;
  cl.timeout_ns = hs->timeout_ns;
  cl.pool_cap = concurrency;
  int rc = wb_http_client_init(&cl);
  if (rc < 0) {
    res->errors = requests;
    snprintf(res->first_error, sizeof res->first_error, "client: %s", weft_strerror(rc));
    return;
  }
  run_ctx ctx;
  ctx.cl = &cl;
  ctx.lat_us = lat;
  ctx.stack = hs->stack;
  wb_errors_init(&ctx.errors);
  atomic_init(&ctx.ok, 0);
  for (size_t i = 0; i < requests; i++) lat[i] = NAN;
  double cpu0 = wb_cpu_ms();
  int64_t t0 = wb_now_ns();
  if (b == B_WEFT) run_weft(&ctx, requests, concurrency);
#ifdef _OPENMP
  else if (b == B_OMP)
    run_omp(&ctx, requests);
#endif
  else if (b == B_THREADS)
    run_threads(&ctx, requests, concurrency);
  res->elapsed_ms = (double)(wb_now_ns() - t0) / 1e6;
  res->cpu_ms = wb_cpu_ms() - cpu0;
  res->ok = atomic_load(&ctx.ok);
  /* Whatever did not succeed is an error, counted or not (a map that could not start counts them all). */
  res->errors = requests - res->ok;
  snprintf(res->first_error, sizeof res->first_error, "%s", wb_errors_first(&ctx.errors));
  res->retries = atomic_load(&cl.retries);
  res->reconnects = atomic_load(&cl.reconnects);
  res->lat = wb_latency_summary(lat, requests);
  wb_http_client_fini(&cl);
}

/* ------------------------------------------------------------------------ */
/* Aggregates over repetitions, records, the report                          */
/* ------------------------------------------------------------------------ */

typedef struct agg {
  int b;
  size_t in_flight;
  double *elapsed, *rps, *p50, *p90, *p99, *pmax; /* one per repetition */
  double *cpu_us;                                 /* CPU microseconds per successful request */
  double *cores;                                  /* CPU time over wall time: cores the process got */
  size_t n;
  size_t errors, warmup_errors;
  unsigned retries, reconnects;
  char first_error[320]; /* a run's first error (256 at most) with "warm-up: " in front */
} agg;

static json_value *record(const agg *a, const agg *all, size_t nall, const http_setup *hs, const char *url,
                          bool own_server, size_t requests, size_t concurrency, size_t warmup,
                          const wb_server_stats *srv, int backlog, const char *command) {
  json_value *rec = json_new_object();
  if (!rec) return NULL;
  const agg *omp = NULL, *thr = NULL;
  for (size_t j = 0; j < nall; j++) {
    if (all[j].b == B_OMP) omp = &all[j];
    if (all[j].b == B_THREADS) thr = &all[j];
  }
  bool failed = a->errors > 0 || a->n == 0 || (srv && srv->errors > 0);
  const char *why = a->first_error[0] ? a->first_error : (srv && srv->errors ? srv->first_error : "");
  int rc = json_set_int(rec, "schema", WB_SCHEMA);
  if (rc == 0) rc = json_set_str(rec, "bench", "http");
  if (rc == 0) rc = json_set_str(rec, "backend", backend_names[a->b]);
  if (rc == 0) rc = json_set_str(rec, "label", backend_labels[a->b]);
  if (rc == 0) rc = json_set_str(rec, "url", url);
  if (rc == 0) rc = json_set_str(rec, "server", own_server ? "loopback" : "external");
  if (rc == 0)
    rc = hs->expect_len != SIZE_MAX ? json_set_int(rec, "body_bytes", (int64_t)hs->expect_len)
                                    : json_set_null(rec, "body_bytes");
  if (rc == 0) rc = json_set_int(rec, "requests", (int64_t)requests);
  if (rc == 0) rc = json_set_int(rec, "concurrency", (int64_t)concurrency);
  if (rc == 0) rc = json_set_int(rec, "in_flight_max", (int64_t)a->in_flight);
  if (rc == 0) rc = json_set_bool(rec, "keepalive", hs->keepalive);
  if (rc == 0) rc = json_set_int(rec, "timeout_ms", hs->timeout_ns / 1000000);
  if (rc == 0) rc = json_set_str(rec, "status", failed ? "failed" : "ok");
  if (rc == 0 && failed) rc = json_set_str(rec, "error", why[0] ? why : "no repetition ran");
  if (rc == 0) rc = json_set_int(rec, "errors", (int64_t)a->errors);
  if (rc == 0) rc = json_set_int(rec, "warmup_requests", (int64_t)warmup);
  if (rc == 0) rc = json_set_int(rec, "warmup_errors", (int64_t)a->warmup_errors);
  if (rc == 0) rc = json_set_int(rec, "connect_retries", a->retries);
  if (rc == 0) rc = json_set_int(rec, "reconnects", a->reconnects);
  if (rc == 0)
    rc = srv ? json_set_int(rec, "server_errors", (int64_t)srv->errors) : json_set_null(rec, "server_errors");
  if (rc == 0) rc = srv ? json_set_int(rec, "listen_backlog", backlog) : json_set_null(rec, "listen_backlog");
  if (rc == 0 && a->n) rc = wb_add_timing(rec, a->elapsed, a->n);
  if (rc == 0) rc = wb_json_num_or_null(rec, "rps", a->n ? wb_round_ms(wb_median(a->rps, a->n)) : NAN);
  if (rc == 0)
    rc = wb_json_num_or_null(rec, "rps_min", a->n ? wb_round_ms(wb_summarize(a->rps, a->n).min) : NAN);
  if (rc == 0) rc = wb_json_num_or_null(rec, "rps_max", a->n ? wb_round_ms(wb_max(a->rps, a->n)) : NAN);
  if (rc == 0) rc = json_set_nums(rec, "rps_samples", a->rps, a->n);
  if (rc == 0) rc = wb_json_num_or_null(rec, "latency_ms_p50", wb_round_ms(wb_median(a->p50, a->n)));
  if (rc == 0) rc = wb_json_num_or_null(rec, "latency_ms_p90", wb_round_ms(wb_median(a->p90, a->n)));
  if (rc == 0) rc = wb_json_num_or_null(rec, "latency_ms_p99", wb_round_ms(wb_median(a->p99, a->n)));
  if (rc == 0) rc = wb_json_num_or_null(rec, "latency_ms_max", wb_round_ms(wb_max(a->pmax, a->n)));
  if (rc == 0) rc = wb_json_num_or_null(rec, "cpu_us_per_request", wb_round_ms(wb_median(a->cpu_us, a->n)));
  if (rc == 0) rc = wb_json_num_or_null(rec, "cpu_cores_used", round(wb_median(a->cores, a->n) * 100) / 100);
  if (rc == 0 && a->b == B_WEFT)
    rc =
        omp ? wb_json_add_ratio(rec, "vs_omp", a->rps, a->n, omp->rps, omp->n) : json_set_null(rec, "vs_omp");
  if (rc == 0 && a->b == B_WEFT)
    rc = thr ? wb_json_add_ratio(rec, "vs_threads", a->rps, a->n, thr->rps, thr->n)
             : json_set_null(rec, "vs_threads");
  if (rc == 0) rc = wb_meta_add(rec);
  if (rc == 0) rc = json_set_str(rec, "command", command);
  if (rc < 0) {
    json_free(rec);
    return NULL;
  }
  return rec;
}

static void print_report(const agg *aggs, size_t n, const char *url, bool own, const http_setup *hs,
                         size_t requests, size_t concurrency, const wb_server_stats *srv) {
  printf("http: %zu GETs of %s (%s), at most %zu in flight, %s; %u cores\n", requests, url,
         own ? "weft-bench's loopback server, a fiber per connection" : "external server", concurrency,
         hs->keepalive ? "connections kept alive" : "a new connection per request", wb_cores());
  printf("%-8s %9s %12s %12s %12s %9s %9s %9s %9s %10s %5s %8s\n", "backend", "in flight", "requests/s",
         "min", "max", "p50 ms", "p90 ms", "p99 ms", "max ms", "CPU us/req", "cores", "errors");
  for (size_t j = 0; j < n; j++) {
    const agg *a = &aggs[j];
    if (a->n == 0) {
      printf("%-8s  no repetition ran: %s\n", backend_names[a->b], a->first_error);
      continue;
    }
    wb_summary s = wb_summarize(a->rps, a->n);
    printf("%-8s %9zu %12.0f %12.0f %12.0f", backend_names[a->b], a->in_flight, s.median, s.min, s.max);
    wb_print_cell(wb_median(a->p50, a->n), 9, 3);
    wb_print_cell(wb_median(a->p90, a->n), 9, 3);
    wb_print_cell(wb_median(a->p99, a->n), 9, 3);
    wb_print_cell(wb_max(a->pmax, a->n), 9, 3);
    wb_print_cell(wb_median(a->cpu_us, a->n), 10, 1);
    wb_print_cell(wb_median(a->cores, a->n), 5, 2);
    printf(" %8zu\n", a->errors);
  }
  const agg *omp = NULL, *thr = NULL;
  for (size_t j = 0; j < n; j++) {
    if (aggs[j].b == B_OMP) omp = &aggs[j];
    if (aggs[j].b == B_THREADS) thr = &aggs[j];
  }
  for (size_t j = 0; j < n; j++) {
    if (aggs[j].b != B_WEFT) continue;
    if (omp) wb_print_ratio("weft/omp", aggs[j].rps, aggs[j].n, omp->rps, omp->n);
    if (thr) wb_print_ratio("weft/threads", aggs[j].rps, aggs[j].n, thr->rps, thr->n);
  }
  for (size_t j = 0; j < n; j++)
    if (aggs[j].errors || aggs[j].warmup_errors)
      printf("  %s: %zu errors (%zu in the warm-up); first: %s\n", backend_names[aggs[j].b], aggs[j].errors,
             aggs[j].warmup_errors, aggs[j].first_error);
  if (srv && srv->errors) printf("  server: %zu errors; first: %s\n", srv->errors, srv->first_error);
  printf("(medians over %zu repetitions; latency: connect to close of one request, percentiles are the\n"
         " medians of each repetition's, max the largest; CPU: the whole process's, server included;\n"
         " cores: CPU time over wall time, the share of the machine the run got)\n",
         n ? aggs[0].n : 0);
}

/* ------------------------------------------------------------------------ */
/* The command                                                               */
/* ------------------------------------------------------------------------ */

int wb_cmd_http(int argc, char **argv) {
  const char *url_arg = NULL, *backend_list = NULL;
  int64_t requests = 10000, concurrency = 1000, timeout_ms = 10000, repeat = 1;
  bool keepalive = false, json = false;
  wb_optstate st;
  wb_opt_init(&st, argc, argv, "http");
  const char *arg;
  int id;
  while ((id = wb_opt_next(&st, http_opts, &arg)) != WB_OPT_END) {
    switch (id) {
    case WB_OPT_ERROR:
      return WB_EXIT_USAGE;
    case WB_OPT_POSITIONAL:
      return wb_usage_error("http", "unexpected argument '%s'", arg);
    case OPT_HELP:
      fputs(http_help, stdout);
      return WB_EXIT_OK;
    case OPT_URL:
      url_arg = arg;
      break;
    case OPT_REQUESTS:
      if (!wb_parse_i64("http", "requests", arg, 1, MAX_REQUESTS, &requests)) return WB_EXIT_USAGE;
      break;
    case OPT_CONCURRENCY:
      if (!wb_parse_i64("http", "concurrency", arg, 1, MAX_CONCURRENCY, &concurrency)) return WB_EXIT_USAGE;
      break;
    case OPT_KEEPALIVE:
      keepalive = true;
      break;
    case OPT_BACKEND:
      backend_list = arg;
      break;
    case OPT_TIMEOUT:
      if (!wb_parse_i64("http", "timeout-ms", arg, 1, MAX_TIMEOUT_MS, &timeout_ms)) return WB_EXIT_USAGE;
      break;
    case OPT_REPEAT:
      if (!wb_parse_i64("http", "repeat", arg, 1, MAX_REPEAT, &repeat)) return WB_EXIT_USAGE;
      break;
    case OPT_JSON:
      json = true;
      break;
    }
  }
  http_setup hs;
  memset(&hs, 0, sizeof hs);
  char err[512] = "";
  if (url_arg && wb_url_parse(url_arg, &hs.url, err, sizeof err) < 0)
    return wb_usage_error("http", "--url: %s", err);

  /* The backends, in the order given (default: all this build has). */
  size_t chosen[NBACKENDS], nchosen = 0;
  if (backend_list) {
    if (!wb_net_parse_backends("http", backend_list, backend_names, NBACKENDS, chosen, &nchosen))
      return WB_EXIT_USAGE;
  } else {
    for (size_t b = 0; b < NBACKENDS; b++) {
#ifndef _OPENMP
      if (b == B_OMP) continue;
#endif
      chosen[nchosen++] = b;
    }
  }
#ifndef _OPENMP
  for (size_t j = 0; j < nchosen; j++) {
    if (chosen[j] == B_OMP) {
      fprintf(stderr,
              "weft-bench http: backend omp is not available: this weft-bench was built without OpenMP\n");
      return WB_EXIT_UNAVAILABLE;
    }
  }
#endif

  /* Descriptors: a client socket per request in flight, and the server's end of each when it is ours. */
  uint64_t fd_limit;
  uint64_t need = (uint64_t)concurrency * (url_arg ? 1 : 2) + 64;
  if (wb_net_fd_limit("http", need, &fd_limit) < 0) return WB_EXIT_FAIL;

  /* The canonical command line. */
  wb_str blist = {0};
  for (size_t j = 0; j < nchosen; j++) {
    if (j) wb_str_add(&blist, ",");
    wb_str_add(&blist, backend_names[chosen[j]]);
  }
  char req_s[24], conc_s[24], to_s[24], rep_s[24];
  snprintf(req_s, sizeof req_s, "%lld", (long long)requests);
  snprintf(conc_s, sizeof conc_s, "%lld", (long long)concurrency);
  snprintf(to_s, sizeof to_s, "%lld", (long long)timeout_ms);
  snprintf(rep_s, sizeof rep_s, "%lld", (long long)repeat);
  char *args[16];
  size_t na = 0;
  args[na++] = "http";
  if (url_arg) {
    args[na++] = "--url";
    args[na++] = (char *)url_arg;
  }
  args[na++] = "--requests";
  args[na++] = req_s;
  args[na++] = "--concurrency";
  args[na++] = conc_s;
  if (keepalive) args[na++] = "--keepalive";
  args[na++] = "--backend";
  args[na++] = blist.s;
  args[na++] = "--timeout-ms";
  args[na++] = to_s;
  args[na++] = "--repeat";
  args[na++] = rep_s;
  if (json) args[na++] = "--json";
  char *command = NULL;
  if (!blist.s || wb_command_line(args, na, NULL, &command) < 0) {
    wb_str_free(&blist);
    fprintf(stderr, "weft-bench http: out of memory\n");
    return WB_EXIT_FAIL;
  }
  wb_str_free(&blist);
  wb_progress_init(json);
  if (!json) fprintf(stderr, "command: %s\n", command);

  int exit_code = WB_EXIT_OK;
  hs.keepalive = keepalive;
  hs.timeout_ns = timeout_ms * 1000000;
  hs.stack = wb_net_thread_stack();
  hs.expect_len = SIZE_MAX;
  wb_http_page page;
  bool have_page = false;
  wb_server *srv = NULL;
  wb_server_stats srv_stats;
  memset(&srv_stats, 0, sizeof srv_stats);
  int backlog = 0;
  char url_buf[1100];
  const char *url = url_arg;
  agg aggs[NBACKENDS];
  memset(aggs, 0, sizeof aggs);
  float *lat = malloc((size_t)requests * sizeof *lat);
  if (!lat) {
    fprintf(stderr, "weft-bench http: out of memory for %lld latencies\n", (long long)requests);
    free(command);
    return WB_EXIT_FAIL;
  }
  int rc = 0;
  if (!url_arg) {
    rc = wb_http_page_init(&page, WB_HTTP_BODY_BYTES, PAGE_SEED, hs.timeout_ns);
    if (rc < 0) {
      snprintf(err, sizeof err, "out of memory");
    } else {
      have_page = true;
      /*
       * The loopback server runs on fibers; without them (WEFT_FIBERS=0) a
       * server connection would hold one of the fallback's few threads for
       * its whole life, so it gets a thread of its own instead.
       */
      rc = wb_server_start(weft_fibers_available() ? WB_IO_WEFT : WB_IO_PLAIN, (size_t)concurrency, 0, false,
                           wb_http_serve, &page, &srv, err, sizeof err);
    }
    if (rc == 0) {
      char hp[96];
      wb_net_addr_str(wb_server_addr(srv), hp, sizeof hp);
      snprintf(url_buf, sizeof url_buf, "http://%s/", hp);
      url = url_buf;
      wb_url_parse(url, &hs.url, err, sizeof err);
      hs.addr = *wb_server_addr(srv);
      hs.expect_len = WB_HTTP_BODY_BYTES;
      backlog = wb_server_backlog(srv);
    }
  } else {
    rc = wb_net_resolve(hs.url.host, hs.url.port, &hs.addr, err, sizeof err);
  }
  if (rc < 0) {
    fprintf(stderr, "weft-bench http: %s\n", err);
    exit_code = WB_EXIT_FAIL;
    goto out;
  }

  for (size_t j = 0; j < nchosen; j++) {
    agg *a = &aggs[j];
    a->b = (int)chosen[j];
    a->in_flight = (size_t)concurrency;
#ifdef _OPENMP
    if (a->b == B_OMP) a->in_flight = (size_t)omp_get_max_threads();
#endif
    double **arrs[] = {&a->elapsed, &a->rps, &a->p50, &a->p90, &a->p99, &a->pmax, &a->cpu_us, &a->cores};
    for (size_t k = 0; k < sizeof arrs / sizeof arrs[0]; k++) {
      *arrs[k] = calloc((size_t)repeat, sizeof(double));
      if (!*arrs[k]) {
        fprintf(stderr, "weft-bench http: out of memory\n");
        exit_code = WB_EXIT_FAIL;
        goto out;
      }
    }
  }

  /* Warm-up, untimed: weft's carriers, the OpenMP team and the server's first fibers start once. */
  size_t warmup = (size_t)concurrency > WARMUP_MIN ? (size_t)concurrency : WARMUP_MIN;
  if (warmup > (size_t)requests) warmup = (size_t)requests;
  for (size_t j = 0; j < nchosen; j++) {
    run_result res;
    wb_progress(true, "warm-up: %s, %zu requests", backend_names[aggs[j].b], warmup);
    measure(&hs, aggs[j].b, warmup, (size_t)concurrency, lat, &res);
    aggs[j].warmup_errors = res.errors;
    if (res.errors && !aggs[j].first_error[0])
      snprintf(aggs[j].first_error, sizeof aggs[j].first_error, "warm-up: %s", res.first_error);
  }
  for (int64_t r = 0; r < repeat; r++) {
    for (size_t k = 0; k < nchosen; k++) {
      agg *a = &aggs[wb_interleave((size_t)r, k, nchosen)];
      wb_progress(true, "[repetition %lld of %lld] %s: %lld requests", (long long)r + 1, (long long)repeat,
                  backend_names[a->b], (long long)requests);
      run_result res;
      measure(&hs, a->b, (size_t)requests, (size_t)concurrency, lat, &res);
      a->elapsed[a->n] = res.elapsed_ms;
      a->rps[a->n] = res.elapsed_ms > 0 ? (double)res.ok / (res.elapsed_ms / 1000.0) : 0;
      a->p50[a->n] = res.lat.p50;
      a->p90[a->n] = res.lat.p90;
      a->p99[a->n] = res.lat.p99;
      a->pmax[a->n] = res.lat.max;
      a->cpu_us[a->n] = res.ok ? res.cpu_ms * 1000.0 / (double)res.ok : NAN;
      a->cores[a->n] = res.elapsed_ms > 0 ? res.cpu_ms / res.elapsed_ms : NAN;
      a->n++;
      a->errors += res.errors;
      a->retries += res.retries;
      a->reconnects += res.reconnects;
      if (res.errors && (!a->first_error[0] || strncmp(a->first_error, "warm-up: ", 9) == 0))
        snprintf(a->first_error, sizeof a->first_error, "%s", res.first_error);
    }
  }
  wb_progress_clear();
  if (srv) {
    wb_server_stop(srv, &srv_stats);
    srv = NULL;
  }

  for (size_t j = 0; j < nchosen; j++)
    if (aggs[j].errors || aggs[j].warmup_errors || aggs[j].n == 0) exit_code = WB_EXIT_FAIL;
  if (srv_stats.errors) exit_code = WB_EXIT_FAIL;
  if (!json) {
    print_report(aggs, nchosen, url, !url_arg, &hs, (size_t)requests, (size_t)concurrency,
                 url_arg ? NULL : &srv_stats);
  } else {
    for (size_t j = 0; j < nchosen; j++) {
      json_value *rec = record(&aggs[j], aggs, nchosen, &hs, url, !url_arg, (size_t)requests,
                               (size_t)concurrency, warmup, url_arg ? NULL : &srv_stats, backlog, command);
      if (!rec || json_print_line(rec, stdout) < 0) {
        fprintf(stderr, "weft-bench http: cannot write the record for %s\n", backend_names[aggs[j].b]);
        exit_code = WB_EXIT_FAIL;
      }
      json_free(rec);
    }
  }
out:
  if (srv) wb_server_stop(srv, NULL);
  if (have_page) wb_http_page_fini(&page);
  for (size_t j = 0; j < nchosen; j++) {
    free(aggs[j].elapsed);
    free(aggs[j].rps);
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
