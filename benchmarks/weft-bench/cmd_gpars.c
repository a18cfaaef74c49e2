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
#include "bench.h"

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
#define MAX_REPEAT   1000
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
    "  --repeat R     R repetitions, backends interleaved; min, median and max\n"
    "  --json         one JSON object per backend (JSON Lines) on stdout\n"
    "  --help         this text\n"
    "\n"
    "Each backend gets one untimed warm-up call; outputs are checked against the\n"
    "sequential answer after every timed batch. Exit codes: 0 ok, 1 a call failed\n"
    "or gave a wrong answer, 2 usage, 3 a case or backend this build lacks.\n";

enum {
  OPT_HELP = 1,
  OPT_CASE,
  OPT_LOOPS,
  OPT_SIZE,
  OPT_BACKEND,
  OPT_THREADS,
  OPT_SEED,
  OPT_REPEAT,
  OPT_JSON,
  OPT_URL
};

static const wb_opt gpars_opts[] = {
    {"help", false, OPT_HELP},
    {"case", true, OPT_CASE},
    {"loops", true, OPT_LOOPS},
    {"size", true, OPT_SIZE},
    {"backend", true, OPT_BACKEND},
    {"threads", true, OPT_THREADS},
    {"seed", true, OPT_SEED},
    {"repeat", true, OPT_REPEAT},
    {"json", false, OPT_JSON},
    {"url", true, OPT_URL},
    {NULL, false, 0},
};

static const gpars_case *const cases[] = {&wb_gpars_math, &wb_gpars_files, &wb_gpars_http};

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

typedef struct backend {
  const char *name;  /* --backend value and the JSON "backend" */
  const char *label; /* the report's: the write-up's "Normal" for sequential */
  map_fn map;
} backend;

static const backend backends[] = {
    {"seq", "Normal", map_seq},
    {"weft-cpu", "weft pmap CPU", map_weft_cpu},
    {"weft-blocking", "weft pmap BLOCKING", map_weft_blocking},
#ifdef _OPENMP
    {"omp", "OpenMP parallel for", map_omp},
#else
    {"omp", "OpenMP parallel for", NULL},
#endif
    {"pool-per-call", "Pool per call", map_pool},
};
#define NBACKENDS (sizeof backends / sizeof backends[0])

/* ------------------------------------------------------------------------ */
/* The command                                                               */
/* ------------------------------------------------------------------------ */

typedef struct gpars_run {
  const backend *b;
  double *samples; /* ms per batch of L calls, one per repetition */
  size_t n;
} gpars_run;

static json_value *gpars_record(const gpars_case *gc, const gpars_run *run, int64_t loops, size_t items,
                                uint64_t seed, unsigned threads, double seq_median, const char *command) {
  json_value *rec = json_new_object();
  if (!rec) return NULL;
  wb_summary s = wb_summarize(run->samples, run->n);
  int rc = json_set_int(rec, "schema", WB_SCHEMA);
  if (rc == 0) rc = json_set_str(rec, "bench", "gpars");
  if (rc == 0) rc = json_set_str(rec, "case", gc->name);
  if (rc == 0) rc = json_set_str(rec, "backend", run->b->name);
  if (rc == 0) rc = json_set_str(rec, "label", run->b->label);
  if (rc == 0) rc = json_set_int(rec, "loops", loops);
  if (rc == 0) rc = json_set_int(rec, "items", (int64_t)items);
  if (rc == 0) rc = json_set_int(rec, "seed", (int64_t)seed);
  if (rc == 0 && run->b->map == map_pool) rc = json_set_int(rec, "pool_threads", threads);
  if (rc == 0) rc = json_set_int(rec, "warmup_calls", 1);
  if (rc == 0) rc = json_set_str(rec, "status", "ok");
  if (rc == 0) rc = wb_add_timing(rec, run->samples, run->n);
  if (rc == 0)
    rc = json_set_num(rec, "per_s", s.median > 0 ? wb_round_ms((double)loops / (s.median / 1000.0)) : 0);
  if (rc == 0) rc = json_set_num(rec, "ns_per_call", wb_round_ms(s.median * 1e6 / (double)loops));
  if (rc == 0)
    rc = seq_median > 0 ? json_set_num(rec, "speedup", round(seq_median / s.median * 1e4) / 1e4)
                        : json_set_null(rec, "speedup");
  if (rc == 0) rc = wb_meta_add(rec);
  if (rc == 0) rc = json_set_str(rec, "command", command);
  if (rc < 0) {
    json_free(rec);
    return NULL;
  }
  return rec;
}

/* Prefix a case's check message in err with the backend that gave the wrong answer. */
static void wrong_answer(char *err, size_t errlen, const char *backend_name) {
  char *why = strdup(err);
  snprintf(err, errlen, "%s gave a wrong answer: %s", backend_name,
           why ? why : "(no details: out of memory)");
  free(why);
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

static void print_line(const gpars_run *run, int64_t loops, double seq_median) {
  wb_summary s = wb_summarize(run->samples, run->n);
  printf("%s: %lld in ", run->b->label, (long long)loops);
  print_ms(s.median);
  printf(" ms (%.0f/s)", s.median > 0 ? (double)loops / (s.median / 1000.0) : 0.0);
  if (run->b->map != map_seq && seq_median > 0) printf(", %.2fx sequential", seq_median / s.median);
  if (run->n > 1) {
    printf("  [min ");
    print_ms(s.min);
    printf(", max ");
    print_ms(s.max);
    printf(" ms over %zu]", run->n);
  }
  printf("\n");
}

/* One timed batch: reset, L calls, stop the clock, check. Returns 0 or the first failure (err filled). */
static int timed_batch(const gpars_case *gc, void *ctx, const backend *b, int64_t loops, size_t items,
                       unsigned threads, const char *progress_tag, double *ms, char *err, size_t errlen) {
  gc->reset(ctx);
  int64_t t0 = wb_now_ns();
  for (int64_t l = 0; l < loops; l++) {
    int rc = b->map(items, gc->element, ctx, threads);
    if (rc != 0) {
      snprintf(err, errlen, "%s: call %lld failed: %s", b->name, (long long)l + 1,
               rc < 0 ? weft_strerror(rc) : "an element returned nonzero");
      return rc < 0 ? rc : -EIO;
    }
    if ((l & 63) == 0)
      wb_progress(false, "%s %s: %lld of %lld calls", progress_tag, b->name, (long long)l, (long long)loops);
  }
  *ms = (double)(wb_now_ns() - t0) / 1e6;
  int rc = gc->check(ctx, err, errlen);
  if (rc < 0) wrong_answer(err, errlen, b->name);
  return rc;
}

int wb_cmd_gpars(int argc, char **argv) {
  const char *case_name = "math", *backend_list = NULL, *url = NULL;
  int64_t loops = 5000, size = 0, repeat = 1, seed = DEFAULT_SEED, threads = 0;
  bool json = false;
  wb_optstate st;
  wb_opt_init(&st, argc, argv, "gpars");
  const char *arg;
  int id;
  while ((id = wb_opt_next(&st, gpars_opts, &arg)) != WB_OPT_END) {
    switch (id) {
    case WB_OPT_ERROR:
      return WB_EXIT_USAGE;
    case WB_OPT_POSITIONAL:
      return wb_usage_error("gpars", "unexpected argument '%s'", arg);
    case OPT_HELP:
      fputs(gpars_help, stdout);
      return WB_EXIT_OK;
    case OPT_CASE:
      case_name = arg;
      break;
    case OPT_LOOPS:
      if (!wb_parse_i64("gpars", "loops", arg, 1, MAX_LOOPS, &loops)) return WB_EXIT_USAGE;
      break;
    case OPT_SIZE:
      if (!wb_parse_i64("gpars", "size", arg, 1, MAX_ITEMS, &size)) return WB_EXIT_USAGE;
      break;
    case OPT_BACKEND:
      backend_list = arg;
      break;
    case OPT_THREADS:
      if (!wb_parse_i64("gpars", "threads", arg, 1, MAX_THREADS, &threads)) return WB_EXIT_USAGE;
      break;
    case OPT_SEED:
      if (!wb_parse_i64("gpars", "seed", arg, 0, INT64_MAX, &seed)) return WB_EXIT_USAGE;
      break;
    case OPT_REPEAT:
      if (!wb_parse_i64("gpars", "repeat", arg, 1, MAX_REPEAT, &repeat)) return WB_EXIT_USAGE;
      break;
    case OPT_JSON:
      json = true;
      break;
    case OPT_URL:
      url = arg;
      break;
    }
  }
  const gpars_case *gc = NULL;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    if (strcmp(cases[i]->name, case_name) == 0) gc = cases[i];
  if (!gc) return wb_usage_error("gpars", "--case: unknown case '%s' (math, files, http)", case_name);
  if (url && gc != &wb_gpars_http) return wb_usage_error("gpars", "--url is for --case http");
  if (url) wb_gpars_http_set_url(url);
  size_t items = size ? (size_t)size : gc->default_items;
  unsigned cores = wb_cores();
  if (!threads) threads = cores;

  /* The backends, in the order given (default: all this build has). */
  gpars_run runs[NBACKENDS];
  size_t nruns = 0;
  memset(runs, 0, sizeof runs);
  if (!backend_list) {
    for (size_t b = 0; b < NBACKENDS; b++)
      if (backends[b].map) runs[nruns++].b = &backends[b];
  } else {
    for (const char *p = backend_list;;) {
      size_t len = strcspn(p, ",");
      size_t b = 0;
      while (b < NBACKENDS && !(strlen(backends[b].name) == len && strncmp(backends[b].name, p, len) == 0))
        b++;
      if (b == NBACKENDS)
        return wb_usage_error("gpars",
                              "--backend: unknown backend '%.*s' (seq, weft-cpu, weft-blocking, omp, "
                              "pool-per-call)",
                              (int)len, p);
      for (size_t j = 0; j < nruns; j++)
        if (runs[j].b == &backends[b])
          return wb_usage_error("gpars", "--backend: '%s' given twice", backends[b].name);
      if (!backends[b].map) {
        fprintf(stderr,
                "weft-bench gpars: backend %s is not available: this weft-bench was built without OpenMP\n",
                backends[b].name);
        return WB_EXIT_UNAVAILABLE;
      }
      runs[nruns++].b = &backends[b];
      if (p[len] == '\0') break;
      p += len + 1;
    }
  }
  for (size_t j = 0; j < nruns; j++) {
    runs[j].samples = calloc((size_t)repeat, sizeof *runs[j].samples);
    if (!runs[j].samples) {
      for (size_t k = 0; k < j; k++) free(runs[k].samples);
      fprintf(stderr, "weft-bench gpars: out of memory\n");
      return WB_EXIT_FAIL;
    }
  }

  /* The canonical command line: every value explicit, so a later default change cannot alter the rerun. */
  wb_str blist = {0};
  for (size_t j = 0; j < nruns; j++) {
    if (j) wb_str_add(&blist, ",");
    wb_str_add(&blist, runs[j].b->name);
  }
  char loops_s[24], size_s[24], seed_s[24], threads_s[24], repeat_s[24];
  snprintf(loops_s, sizeof loops_s, "%lld", (long long)loops);
  snprintf(size_s, sizeof size_s, "%zu", items);
  snprintf(seed_s, sizeof seed_s, "%lld", (long long)seed);
  snprintf(threads_s, sizeof threads_s, "%lld", (long long)threads);
  snprintf(repeat_s, sizeof repeat_s, "%lld", (long long)repeat);
  char *args[18] = {"gpars",   "--case", (char *)gc->name, "--loops",  loops_s,
                    "--size",  size_s,   "--backend",      blist.s,    "--threads",
                    threads_s, "--seed", seed_s,           "--repeat", repeat_s};
  size_t nargs = 15;
  if (url) {
    args[nargs++] = "--url";
    args[nargs++] = (char *)url;
  }
  if (json) args[nargs++] = "--json";
  char *command = NULL;
  if (!blist.s || wb_command_line(args, nargs, NULL, &command) < 0) {
    fprintf(stderr, "weft-bench gpars: out of memory\n");
    for (size_t j = 0; j < nruns; j++) free(runs[j].samples);
    wb_str_free(&blist);
    return WB_EXIT_FAIL;
  }
  wb_str_free(&blist);
  wb_progress_init(json);
  if (!json) fprintf(stderr, "command: %s\n", command);

  char err[512] = "";
  void *ctx = NULL;
  int exit_code = WB_EXIT_OK;
  int rc = gc->setup(&ctx, items, (uint64_t)seed, err, sizeof err);
  if (rc == -ENOSYS) {
    fprintf(stderr, "weft-bench gpars: %s\n", err);
    exit_code = WB_EXIT_UNAVAILABLE;
    goto out;
  }
  if (rc < 0) {
    fprintf(stderr, "weft-bench gpars: case %s: %s\n", gc->name, err);
    exit_code = WB_EXIT_FAIL;
    goto out;
  }

  /* Warm-up, untimed: the first call of a backend pays for starting its threads once. */
  for (size_t j = 0; j < nruns && rc == 0; j++) {
    wb_progress(true, "warm-up: %s", runs[j].b->name);
    gc->reset(ctx);
    rc = runs[j].b->map(items, gc->element, ctx, (unsigned)threads);
    if (rc != 0)
      snprintf(err, sizeof err, "%s: the warm-up call failed: %s", runs[j].b->name,
               rc < 0 ? weft_strerror(rc) : "an element returned nonzero");
    else if ((rc = gc->check(ctx, err, sizeof err)) < 0)
      wrong_answer(err, sizeof err, runs[j].b->name);
  }
  for (int64_t r = 0; r < repeat && rc == 0; r++) {
    for (size_t k = 0; k < nruns && rc == 0; k++) {
      gpars_run *run = &runs[wb_interleave((size_t)r, k, nruns)];
      char tag[64];
      snprintf(tag, sizeof tag, "[repetition %lld of %lld]", (long long)r + 1, (long long)repeat);
      rc = timed_batch(gc, ctx, run->b, loops, items, (unsigned)threads, tag, &run->samples[run->n], err,
                       sizeof err);
      if (rc == 0) run->n++;
    }
  }
  wb_progress_clear();
  if (rc != 0) {
    fprintf(stderr, "weft-bench gpars: case %s: %s\n", gc->name, err);
    exit_code = WB_EXIT_FAIL;
    goto out;
  }

  double seq_median = 0;
  for (size_t j = 0; j < nruns; j++)
    if (runs[j].b->map == map_seq) seq_median = wb_summarize(runs[j].samples, runs[j].n).median;
  if (!json) {
    printf("gpars %s: %lld calls of a map over %zu elements (%s); %u cores, seed %lld\n", gc->name,
           (long long)loops, items, gc->what, cores, (long long)seed);
    for (size_t j = 0; j < nruns; j++) print_line(&runs[j], loops, seq_median);
  } else {
    for (size_t j = 0; j < nruns; j++) {
      json_value *rec =
          gpars_record(gc, &runs[j], loops, items, (uint64_t)seed, (unsigned)threads, seq_median, command);
      if (!rec || json_print_line(rec, stdout) < 0) {
        fprintf(stderr, "weft-bench gpars: cannot write the record for %s\n", runs[j].b->name);
        exit_code = WB_EXIT_FAIL;
      }
      json_free(rec);
    }
  }
out:
  gc->teardown(ctx);
  for (size_t j = 0; j < nruns; j++) free(runs[j].samples);
  free(command);
  return exit_code;
}
