/*
 * This file contains `weft-bench gpars`: the GPars write-up's question, what
 * a parallel map costs per call against plain sequential code, asked of
 * weft. A case (math, files, http: gpars_*.c) says what one element does;
 * this file calls a map over all elements L times (5000 by default) on each
 * backend and reports calls per second in the write-up's form,
 * "Normal: 5000 in 14594 ms (343/s)", with the speed-up over sequential.
 *
 *   seq            Normal: a for loop
 *   weft-cpu       weft_pmap, WEFT_CPU (OpenMP tasks)
 *   weft-blocking  weft_pmap, WEFT_BLOCKING (a fiber per element)
 *   omp            #pragma omp parallel for, the runtime's default schedule
 *   pool-per-call  a fresh pool of `--threads` pthreads created and joined on
 *                  every call: the cost the write-up's co-workers feared
 *
 * Every backend calls the same element function through the same pointer,
 * so differences are the backends'. Each backend gets one untimed call
 * first (warm-up: OpenMP's pool, weft's runtime, the page cache), and the
 * outputs are checked against the sequential answer after every timed batch.
 */
#define _POSIX_C_SOURCE 200809L
#include "driver.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "gpars.h"
#include "http.h"
#include "weft.h"

#define MAX_LOOPS    1000000000
#define MAX_ITEMS    1000000
#define MAX_THREADS  4096
#define DEFAULT_SEED 42

static const char gpars_help[] =
    "usage: weft-bench gpars [--case math|files|http] [--loops L] [--size N]\n"
    "                        [--backend B[,B...]] [--threads P] [--seed S]\n"
    "                        [--url URL] [--repeat R] [--json]\n"
    "\n"
    "The GPars write-up in C: call a parallel map over N elements L times on each\n"
    "backend and report calls per second against sequential code.\n"
    "\n"
    "  --case C       math   sum over i = 1..100 of (i XOR x) per element (N = 100)\n"
    "                 files  read one of N = 120 files of 1-4 KiB per element; the\n"
    "                        files are made under $TMPDIR (or /tmp) and removed\n"
    "                 http   GET a 9 KiB page over a new connection per element from\n"
    "                        weft-bench's loopback server (a fiber per connection)\n"
    "                 default: math\n"
    "  --loops L      calls per measurement (default 5000)\n"
    "  --size N       elements per call (default: the case's)\n"
    "  --backend B    seq (\"Normal\"), weft-cpu, weft-blocking, omp, pool-per-call;\n"
    "                 a comma-separated list; default: all that this build has\n"
    "  --threads P    threads of the pool-per-call backend (default: cores)\n"
    "  --seed S       seed of the inputs (default 42)\n"
    "  --url URL      http case: GET this http:// URL instead of the loopback server\n"
    "  --work-scale F each call maps over round(F x N) elements (more inputs of the\n"
    "                 same kind; default 1): a build made F times slower, for\n"
    "                 testing regression checks such as weft-bench pair; the record\n"
    "                 keeps N as its items, so that it matches F = 1 runs\n"
    "  --repeat R     R repetitions, backends interleaved; min, median and max\n"
    "  --json         one JSON object per backend (JSON Lines) on stdout\n"
    "  --help         this text\n"
    "\n"
    "Each backend gets one untimed warm-up call; outputs are checked against the\n"
    "sequential answer after every timed batch. Exit codes: 0 ok, 1 a call failed\n"
    "or gave a wrong answer, 2 usage, 3 a case or backend this build lacks.\n";

/* ------------------------------------------------------------------------ */
/* The backends: one parallel map each                                       */
/* ------------------------------------------------------------------------ */

typedef int (*map_fn)(size_t n, weft_index_fn fn, void *ctx, unsigned threads);

static int map_seq(size_t n, weft_index_fn fn, void *ctx, unsigned threads) {
  (void)threads;
  int err = 0;
  for (size_t i = 0; i < n; i++) {
    int rc = fn(ctx, i);
    if (rc && !err) err = rc;
  }
  return err;
}

static int map_weft(size_t n, weft_index_fn fn, void *ctx, weft_kind kind) {
  weft_pmap_opts o = WEFT_PMAP_OPTS_INIT;
  o.kind = kind;
  return weft_pmap(n, fn, ctx, &o);
}

static int map_weft_cpu(size_t n, weft_index_fn fn, void *ctx, unsigned threads) {
  (void)threads;
  return map_weft(n, fn, ctx, WEFT_CPU);
}

static int map_weft_blocking(size_t n, weft_index_fn fn, void *ctx, unsigned threads) {
  (void)threads;
  return map_weft(n, fn, ctx, WEFT_BLOCKING);
}

#ifdef _OPENMP
static int map_omp(size_t n, weft_index_fn fn, void *ctx, unsigned threads) {
  (void)threads;
  atomic_int err = 0;
#pragma omp parallel for
  for (size_t i = 0; i < n; i++) {
    int rc = fn(ctx, i);
    int zero = 0;
    if (rc) atomic_compare_exchange_strong(&err, &zero, rc);
  }
  return atomic_load(&err);
}
#endif

typedef struct pool_call {
  weft_index_fn fn;
  void *ctx;
  size_t n;
  atomic_size_t next; /* the next element to claim */
  atomic_int err;     /* the first element error */
} pool_call;

static void *pool_worker(void *arg) {
  pool_call *c = arg;
  size_t i;
  while ((i = atomic_fetch_add_explicit(&c->next, 1, memory_order_relaxed)) < c->n) {
    int rc = c->fn(c->ctx, i);
    int zero = 0;
    if (rc) atomic_compare_exchange_strong(&c->err, &zero, rc);
  }
  return NULL;
}

static int map_pool(size_t n, weft_index_fn fn, void *ctx, unsigned threads) {
  pool_call c = {.fn = fn, .ctx = ctx, .n = n};
  atomic_init(&c.next, 0);
  atomic_init(&c.err, 0);
  pthread_t small[64];
  pthread_t *tids = threads <= 64 ? small : malloc(threads * sizeof *tids);
  if (!tids) return -ENOMEM;
  unsigned made = 0;
  int rc = 0;
  for (; made < threads; made++)
    if ((rc = pthread_create(&tids[made], NULL, pool_worker, &c)) != 0) break;
  /* A pool that could not be made whole still finishes the call (the caller helps), then says so. */
  if (rc != 0) pool_worker(&c);
  for (unsigned t = 0; t < made; t++) pthread_join(tids[t], NULL);
  if (tids != small) free(tids);
  return rc ? -rc : atomic_load(&c.err);
}

/* The backends: a choice's id is its index in maps[]. */
static const map_fn maps[] = {
    map_seq,  map_weft_cpu, map_weft_blocking,
#ifdef _OPENMP
    map_omp,
#else
    NULL,
#endif
    map_pool,
};
enum { B_SEQ, B_WEFT_CPU, B_WEFT_BLOCKING, B_OMP, B_POOL };

static const wb_choice gpars_backends[] = {
    {"seq", "Normal", NULL, B_SEQ},
    {"weft-cpu", "weft pmap CPU", NULL, B_WEFT_CPU},
    {"weft-blocking", "weft pmap BLOCKING", NULL, B_WEFT_BLOCKING},
    {"omp", "OpenMP parallel for", WB_NEEDS_OPENMP, B_OMP},
    {"pool-per-call", "Pool per call", NULL, B_POOL},
};

/* ------------------------------------------------------------------------ */
/* The command                                                               */
/* ------------------------------------------------------------------------ */

enum { OPT_CASE = 1, OPT_LOOPS, OPT_SIZE, OPT_THREADS, OPT_SEED, OPT_URL, OPT_WORK_SCALE };

static const wb_opt gpars_opts[] = {
    {"case", true, OPT_CASE},
    {"loops", true, OPT_LOOPS},
    {"size", true, OPT_SIZE},
    {"threads", true, OPT_THREADS},
    {"seed", true, OPT_SEED},
    {"url", true, OPT_URL},
    {"work-scale", true, OPT_WORK_SCALE},
    {NULL, false, 0},
};

static const gpars_case *const cases[] = {&wb_gpars_math, &wb_gpars_files, &wb_gpars_http};

typedef struct gpars_cmd {
  const char *case_name, *url;
  int64_t loops, size, seed, threads;
  double work_scale; /* --work-scale: the map runs over work_items, the record says items */
  const gpars_case *gc;
  size_t items, work_items;
  void *ctx; /* the case's, from its setup */
} gpars_cmd;

static int gpars_option(wb_driver *d, int id, const char *arg) {
  gpars_cmd *c = d->ctx;
  bool ok = true;
  switch (id) {
  case OPT_CASE:
    c->case_name = arg;
    break;
  case OPT_LOOPS:
    ok = wb_parse_i64("gpars", "loops", arg, 1, MAX_LOOPS, &c->loops);
    break;
  case OPT_SIZE:
    ok = wb_parse_i64("gpars", "size", arg, 1, MAX_ITEMS, &c->size);
    break;
  case OPT_THREADS:
    ok = wb_parse_i64("gpars", "threads", arg, 1, MAX_THREADS, &c->threads);
    break;
  case OPT_SEED:
    ok = wb_parse_i64("gpars", "seed", arg, 0, INT64_MAX, &c->seed);
    break;
  case OPT_URL:
    c->url = arg;
    break;
  case OPT_WORK_SCALE:
    ok = wb_parse_double("gpars", "work-scale", arg, 0.01, 100, &c->work_scale);
    break;
  }
  return ok ? 0 : WB_EXIT_USAGE;
}

static int gpars_prepare(wb_driver *d) {
  gpars_cmd *c = d->ctx;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    if (strcmp(cases[i]->name, c->case_name) == 0) c->gc = cases[i];
  if (!c->gc) return wb_usage_error("gpars", "--case: unknown case '%s' (math, files, http)", c->case_name);
  if (c->url && c->gc != &wb_gpars_http) return wb_usage_error("gpars", "--url is for --case http");
  if (c->url) wb_gpars_http_set_url(c->url);
  c->items = c->size ? (size_t)c->size : c->gc->default_items;
  /* The extra elements are more inputs of the same kind (the case's setup makes them from the same seed). */
  double w = round((double)c->items * c->work_scale);
  c->work_items = w < 1 ? 1 : (size_t)w;
  if (c->work_items > MAX_ITEMS)
    return wb_usage_error("gpars", "--work-scale: more than %d elements", MAX_ITEMS);
  if (!c->threads) c->threads = wb_cores();
  return 0;
}

/* The canonical command line: every value explicit, so a later default change cannot alter the rerun. */
static int gpars_args(wb_driver *d, wb_args *a) {
  gpars_cmd *c = d->ctx;
  wb_args_add(a, "--case");
  wb_args_add(a, c->gc->name);
  wb_args_int(a, "--loops", c->loops);
  wb_args_int(a, "--size", (int64_t)c->items);
  wb_args_picked(d, a);
  wb_args_int(a, "--threads", c->threads);
  wb_args_int(a, "--seed", c->seed);
  wb_args_repeat(d, a);
  if (c->url) {
    wb_args_add(a, "--url");
    wb_args_add(a, c->url);
  }
  if (c->work_scale != 1) {
    wb_args_add(a, "--work-scale");
    wb_args_addf(a, "%g", c->work_scale);
  }
  return 0;
}

static int gpars_setup(wb_driver *d) {
  gpars_cmd *c = d->ctx;
  char err[512] = "";
  int rc = c->gc->setup(&c->ctx, c->work_items, (uint64_t)c->seed, err, sizeof err);
  if (rc == -ENOSYS) {
    fprintf(stderr, "weft-bench gpars: %s\n", err);
    return WB_EXIT_UNAVAILABLE;
  }
  if (rc < 0) {
    fprintf(stderr, "weft-bench gpars: case %s: %s\n", c->gc->name, err);
    return WB_EXIT_FAIL;
  }
  return 0;
}

/* A map's failure: the first element error or weft's. */
static int call_failed(wb_sample *s, int rc, const char *what) {
  return wb_fail(s, rc < 0 ? rc : -EIO, "%s failed: %s", what,
                 rc < 0 ? weft_strerror(rc) : "an element returned nonzero");
}

/*
 * The warm-up is one untimed call (the first call of a backend pays for
 * starting its threads once); a measurement is L calls, timed as a whole.
 * Both end with the check against the sequential answer.
 */
static int gpars_run(wb_driver *d, wb_run *r, wb_phase phase, wb_sample *s) {
  gpars_cmd *c = d->ctx;
  map_fn map = maps[r->id];
  int64_t loops = phase == WB_WARMUP ? 1 : c->loops;
  c->gc->reset(c->ctx);
  int64_t t0 = wb_now_ns();
  for (int64_t l = 0; l < loops; l++) {
    int rc = map(c->work_items, c->gc->element, c->ctx, (unsigned)c->threads);
    if (rc != 0) {
      char what[64];
      snprintf(what, sizeof what, phase == WB_WARMUP ? "the call" : "call %lld", (long long)l + 1);
      return call_failed(s, rc, what);
    }
    if ((l & 63) == 0) wb_progress(false, "%s: %lld of %lld calls", r->name, (long long)l, (long long)loops);
  }
  s->ms = (double)(wb_now_ns() - t0) / 1e6;
  char err[200];
  int rc = c->gc->check(c->ctx, err, sizeof err);
  if (rc < 0) return wb_fail(s, rc, "a wrong answer: %s", err);
  return 0;
}

static double seq_median(const wb_driver *d) {
  const wb_run *seq = wb_find_run(d, "seq");
  return seq && !seq->failed ? wb_run_ms(seq).median : 0;
}

static int gpars_record(wb_driver *d, const wb_run *r, json_t *rec) {
  gpars_cmd *c = d->ctx;
  wb_summary s = wb_run_ms(r);
  double seq = seq_median(d);
  int rc = wb_json_set_str(rec, "case", c->gc->name);
  if (rc == 0) rc = wb_json_set_str(rec, "label", wb_run_label(r));
  if (rc == 0) rc = wb_json_set_int(rec, "loops", c->loops);
  if (rc == 0) rc = wb_json_set_int(rec, "items", (int64_t)c->items);
  if (rc == 0) rc = wb_json_set_int(rec, "seed", c->seed);
  if (rc == 0 && c->work_scale != 1) rc = wb_json_set_num(rec, "work_scale", c->work_scale);
  if (rc == 0 && r->id == B_POOL) rc = wb_json_set_int(rec, "pool_threads", c->threads);
  if (rc == 0) rc = wb_json_set_int(rec, "warmup_calls", 1);
  if (rc == 0 && r->n) {
    rc =
        wb_json_set_num(rec, "per_s", s.median > 0 ? wb_round_ms((double)c->loops / (s.median / 1000.0)) : 0);
    if (rc == 0) rc = wb_json_set_num(rec, "ns_per_call", wb_round_ms(s.median * 1e6 / (double)c->loops));
    if (rc == 0)
      rc = seq > 0 ? wb_json_set_num(rec, "speedup", round(seq / s.median * 1e4) / 1e4)
                   : wb_json_set_null(rec, "speedup");
  }
  return rc;
}

/* Milliseconds with the precision they deserve: whole above 100, to the microsecond below 1. */
static void print_ms(double ms) {
  if (ms >= 100)
    printf("%.0f", ms);
  else if (ms >= 1)
    printf("%.1f", ms);
  else
    printf("%.3f", ms);
}

static void gpars_report(wb_driver *d) {
  gpars_cmd *c = d->ctx;
  double seq = seq_median(d);
  printf("gpars %s: %lld calls of a map over %zu elements (%s); %u cores, seed %lld\n", c->gc->name,
         (long long)c->loops, c->items, c->gc->what, wb_cores(), (long long)c->seed);
  for (size_t j = 0; j < d->nruns; j++) {
    const wb_run *r = &d->runs[j];
    if (r->n == 0) {
      printf("%s: FAILED: %s\n", wb_run_label(r), r->error);
      continue;
    }
    wb_summary s = wb_run_ms(r);
    printf("%s: %lld in ", wb_run_label(r), (long long)c->loops);
    print_ms(s.median);
    printf(" ms (%.0f/s)", s.median > 0 ? (double)c->loops / (s.median / 1000.0) : 0.0);
    if (r->id != B_SEQ && seq > 0) printf(", %.2fx sequential", seq / s.median);
    if (r->n > 1) {
      printf("  [min ");
      print_ms(s.min);
      printf(", max ");
      print_ms(s.max);
      printf(" ms over %zu]", r->n);
    }
    if (r->failed) printf("  FAILED: %s", r->error);
    printf("\n");
  }
}

static void gpars_teardown(wb_driver *d) {
  gpars_cmd *c = d->ctx;
  if (c->gc) c->gc->teardown(c->ctx);
  c->ctx = NULL;
}

static const wb_command gpars_command = {
    .name = "gpars",
    .help = gpars_help,
    .opts = gpars_opts,
    .pick = "backend",
    .choices = gpars_backends,
    .nchoices = sizeof gpars_backends / sizeof gpars_backends[0],
    .max_repeat = 1000,
    .flags = WB_CMD_WARMUP,
    .option = gpars_option,
    .prepare = gpars_prepare,
    .args = gpars_args,
    .setup = gpars_setup,
    .run = gpars_run,
    .record = gpars_record,
    .report = gpars_report,
    .teardown = gpars_teardown,
};

int wb_cmd_gpars(int argc, char **argv) {
  gpars_cmd c = {.case_name = "math", .loops = 5000, .seed = DEFAULT_SEED, .work_scale = 1};
  return wb_drive(&gpars_command, &c, argc, argv);
}
