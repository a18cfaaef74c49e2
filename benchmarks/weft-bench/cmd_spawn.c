/*
 * This file contains `weft-bench spawn`: what it costs to start a piece of
 * work that does nothing and wait for it, per piece, on weft's public API
 * and, as the baseline, on Go's goroutines (benchmarks/go, weft-go-spawn):
 *
 *   future-fiber         an empty WEFT_BLOCKING future started, got and freed,
 *                        one at a time, by a fiber (the loop itself runs inside a
 *                        WEFT_BLOCKING future, as bm_future's in_fiber)
 *   future-fiber-batch   K such futures started, then all got and freed, by a fiber
 *   future-thread-batch  the same from the main thread, a plain OS thread
 *   pmap-empty           WEFT_BLOCKING weft_pmap calls of N elements that return at
 *                        once, from the main thread (L calls a repetition)
 *   go-single            wg.Add(1); go func() { wg.Done() }(); wg.Wait()
 *   go-batch             K go statements per wg.Wait()
 *
 * A repetition times each case as a whole (CLOCK_MONOTONIC, around the loop
 * only: the fiber cases start their clock on the fiber) and divides by the
 * operations it made. Repetitions interleave the cases, rotated by one each
 * time, as every weft-bench command does. Repetition 0 is a warm-up and is
 * thrown away: the first futures of a process pay for carriers, stacks and
 * free lists that later ones reuse, and that start-up is not what this
 * measures. Go runs as a child program per repetition, and its program also
 * throws away its own first pass, for the same reason.
 *
 * Every case should get a few hundred milliseconds a repetition, so that a
 * clock tick or one descheduling does not decide it. The futures and
 * goroutines get that from --count; an empty pmap may cost anywhere from a
 * fiber per element to a plain loop's few nanoseconds, so pmap-empty makes L
 * calls a repetition, and by default the warm-up picks L: it times one more
 * call after its own and takes enough calls for 300 ms. The chosen L is in
 * the command line and the record (calls, ops), so a rerun repeats it and
 * `compare` matches the two.
 *
 * weft's cases run in this process; their figures are per operation, so
 * they need no fresh process (no thread count or RSS is reported here).
 */
#define _POSIX_C_SOURCE 200809L
#include "bench.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "weft.h"

#define MAX_COUNT  1000000000
#define MAX_BATCH  10000000
#define MAX_N      100000000
#define MAX_REPEAT 1000

static const char spawn_help[] =
    "usage: weft-bench spawn [--case C[,C...]] [--count C] [--batch K] [--n N]\n"
    "                        [--pmap-calls L] [--repeat R] [--json]\n"
    "\n"
    "What starting an empty task and waiting for it costs, in ns per task, on weft\n"
    "and on Go's goroutines:\n"
    "\n"
    "  --case C     future-fiber         an empty WEFT_BLOCKING future started, got and\n"
    "                                    freed, one at a time, from a fiber\n"
    "               future-fiber-batch   K futures started, then all got, from a fiber\n"
    "               future-thread-batch  the same from the main thread\n"
    "               pmap-empty           WEFT_BLOCKING weft_pmap calls over N elements\n"
    "                                    that return at once, from the main thread\n"
    "               go-single            Go: go func() { wg.Done() }(); wg.Wait()\n"
    "               go-batch             Go: K go statements, then one wg.Wait()\n"
    "               a comma-separated list; default: all\n"
    "  --count C    futures (goroutines) per repetition (default 1000000; the batch\n"
    "               cases make C / K whole batches, at least one)\n"
    "  --batch K    tasks per batch (default 1000)\n"
    "  --n N        elements per pmap-empty call (default 1000000)\n"
    "  --pmap-calls L  pmap-empty calls per repetition (default: chosen by the\n"
    "               warm-up for at least 300 ms; the command line shows the choice)\n"
    "  --repeat R   R measured repetitions, cases interleaved; the median and the\n"
    "               minimum are reported (default 1)\n"
    "  --json       one JSON object per case (JSON Lines) on stdout\n"
    "  --help       this text\n"
    "\n"
    "Every case first runs one more repetition, a warm-up that is discarded (the\n"
    "first tasks of a process pay for carriers, stacks and free lists). The table\n"
    "gives weft over Go per task: future-fiber against go-single, the batch cases\n"
    "and pmap-empty against go-batch. The Go cases run the Go baseline\n"
    "weft-go-spawn ($WEFT_BENCH_GO_DIR, default this build's), which is skipped\n"
    "with a message when this build has no Go; the fiber cases are skipped without\n"
    "fibers (WEFT_FIBERS=0). Exit codes: 0 ok (also when a case is skipped),\n"
    "1 a case failed, 2 usage.\n";

enum { OPT_HELP = 1, OPT_CASE, OPT_COUNT, OPT_BATCH, OPT_N, OPT_PMAP_CALLS, OPT_REPEAT, OPT_JSON };

static const wb_opt spawn_opts[] = {
    {"help", false, OPT_HELP},    {"case", true, OPT_CASE},  {"count", true, OPT_COUNT},
    {"batch", true, OPT_BATCH},   {"n", true, OPT_N},        {"pmap-calls", true, OPT_PMAP_CALLS},
    {"repeat", true, OPT_REPEAT}, {"json", false, OPT_JSON}, {NULL, false, 0},
};

/* What every case is given, and what the go cases leave for the records. */
typedef struct spawn_params {
  int64_t count, batch, n;
  int64_t pmap_calls;  /* pmap-empty calls per repetition; 0 until the warm-up chose */
  weft_future **fs;    /* batch slots, batch of them */
  char go_path[4096];  /* weft-go-spawn, when found */
  char go_version[64]; /* from its records */
  int64_t gomaxprocs;  /* from its records, -1 until one came */
} spawn_params;

/* A case's result codes besides 0 and a negative errno: the case cannot run here (err says why). */
#define SPAWN_SKIP 1

typedef struct spawn_case {
  const char *name;
  const char *backend; /* "weft" or "go": the record's backend */
  const char *vs_go;   /* the go case it is held against; NULL for the go cases */
  bool batched;        /* ops: whole batches of K (else count, or n for pmap-empty) */
  int (*run)(spawn_params *p, int64_t *ns, char *err, size_t errlen);
} spawn_case;

static int64_t batches_of(const spawn_params *p) {
  int64_t b = p->count / p->batch;
  return b > 0 ? b : 1;
}

/* ------------------------------------------------------------------------ */
/* The weft cases                                                            */
/* ------------------------------------------------------------------------ */

/* The empty task: its argument back, through a call the compiler cannot remove. */
static void *noop(void *arg) {
  weft_kernel_sink(arg);
  return arg;
}

static int token; /* every task's argument: its result must come back */

static int start_one(weft_future **f, int64_t done, char *err, size_t errlen) {
  int rc = weft_future_start(WEFT_BLOCKING, noop, &token, f);
  if (rc != 0)
    snprintf(err, errlen, "weft_future_start failed after %lld futures: %s", (long long)done,
             weft_strerror(rc));
  return rc;
}

static int get_one(weft_future *f, int64_t done, char *err, size_t errlen) {
  void *res = NULL;
  int rc = weft_future_get(f, -1, &res);
  weft_future_free(f);
  if (rc != 0 || res != &token) {
    snprintf(err, errlen, "weft_future_get failed after %lld futures: %s", (long long)done,
             rc ? weft_strerror(rc) : "wrong result");
    return rc ? rc : -EIO;
  }
  return 0;
}

static int body_single(spawn_params *p, int64_t *ns, char *err, size_t errlen) {
  int64_t t0 = wb_now_ns();
  for (int64_t i = 0; i < p->count; i++) {
    weft_future *f;
    int rc = start_one(&f, i, err, errlen);
    if (rc == 0) rc = get_one(f, i, err, errlen);
    if (rc != 0) return rc;
  }
  *ns = wb_now_ns() - t0;
  return 0;
}

static int body_batch(spawn_params *p, int64_t *ns, char *err, size_t errlen) {
  int64_t batches = batches_of(p), k = p->batch;
  int64_t t0 = wb_now_ns();
  for (int64_t b = 0; b < batches; b++) {
    int64_t started = 0;
    int rc = 0;
    for (; started < k && rc == 0; started++) rc = start_one(&p->fs[started], b * k + started, err, errlen);
    if (rc != 0) started--; /* the slot that failed holds nothing */
    /* Every started future is got (or at least freed), also after a failure: none may be left behind. */
    for (int64_t i = 0; i < started; i++) {
      if (rc == 0)
        rc = get_one(p->fs[i], b * k + i, err, errlen);
      else
        weft_future_free(p->fs[i]);
    }
    if (rc != 0) return rc;
  }
  *ns = wb_now_ns() - t0;
  return 0;
}

/* A fiber's loop: body runs inside a WEFT_BLOCKING future, and takes its own time there. */
typedef struct fiber_call {
  int (*body)(spawn_params *, int64_t *, char *, size_t);
  spawn_params *p;
  int64_t ns;
  int rc;
  bool on_fiber; /* false: the future ran on the fallback path, so there is no fiber to measure */
  char *err;
  size_t errlen;
} fiber_call;

static void *fiber_main(void *arg) {
  fiber_call *c = arg;
  c->on_fiber = weft_in_fiber();
  if (c->on_fiber) c->rc = c->body(c->p, &c->ns, c->err, c->errlen);
  return NULL;
}

static int on_fiber(int (*body)(spawn_params *, int64_t *, char *, size_t), spawn_params *p, int64_t *ns,
                    char *err, size_t errlen) {
  fiber_call c = {.body = body, .p = p, .err = err, .errlen = errlen};
  weft_future *f;
  int rc = weft_future_start(WEFT_BLOCKING, fiber_main, &c, &f);
  if (rc != 0) {
    snprintf(err, errlen, "weft_future_start (the fiber that runs the loop) failed: %s", weft_strerror(rc));
    return rc;
  }
  rc = weft_future_get(f, -1, NULL);
  weft_future_free(f);
  if (rc != 0) {
    snprintf(err, errlen, "weft_future_get (the fiber that runs the loop) failed: %s", weft_strerror(rc));
    return rc;
  }
  if (!c.on_fiber) {
    snprintf(err, errlen, "not on a fiber (fibers unavailable or WEFT_FIBERS=0)");
    return SPAWN_SKIP;
  }
  *ns = c.ns;
  return c.rc;
}

static int run_future_fiber(spawn_params *p, int64_t *ns, char *err, size_t errlen) {
  return on_fiber(body_single, p, ns, err, errlen);
}

static int run_future_fiber_batch(spawn_params *p, int64_t *ns, char *err, size_t errlen) {
  return on_fiber(body_batch, p, ns, err, errlen);
}

static int run_future_thread_batch(spawn_params *p, int64_t *ns, char *err, size_t errlen) {
  return body_batch(p, ns, err, errlen);
}

static int empty_element(void *ctx, size_t i) {
  (void)i;
  weft_kernel_sink(ctx);
  return 0;
}

static int pmap_calls(const spawn_params *p, int64_t calls, int64_t *ns, char *err, size_t errlen) {
  weft_pmap_opts o = WEFT_PMAP_OPTS_INIT;
  o.kind = WEFT_BLOCKING;
  int64_t t0 = wb_now_ns();
  for (int64_t c = 0; c < calls; c++) {
    int rc = weft_pmap((size_t)p->n, empty_element, &token, &o);
    if (rc != 0) {
      snprintf(err, errlen, "weft_pmap failed: %s", weft_strerror(rc));
      return rc;
    }
  }
  *ns = wb_now_ns() - t0;
  return 0;
}

#define PMAP_TARGET_NS 300000000 /* what the chosen calls should take at least */
#define MAX_PMAP_CALLS 1000000

static int run_pmap_empty(spawn_params *p, int64_t *ns, char *err, size_t errlen) {
  if (p->pmap_calls > 0) return pmap_calls(p, p->pmap_calls, ns, err, errlen);
  /* The warm-up without --pmap-calls: one call to warm up, one timed to choose how many make 300 ms. */
  int64_t one;
  int rc = pmap_calls(p, 1, ns, err, errlen);
  if (rc == 0) rc = pmap_calls(p, 1, &one, err, errlen);
  if (rc != 0) return rc;
  int64_t calls = one > 0 ? (PMAP_TARGET_NS + one - 1) / one : MAX_PMAP_CALLS;
  p->pmap_calls = calls < 1 ? 1 : calls > MAX_PMAP_CALLS ? MAX_PMAP_CALLS : calls;
  return 0;
}

/* ------------------------------------------------------------------------ */
/* The go cases: one weft-go-spawn run per repetition                        */
/* ------------------------------------------------------------------------ */

static int run_go(spawn_params *p, const char *which, int64_t ops, int64_t *ns, char *err, size_t errlen) {
  if (!p->go_path[0]) {
    if (wb_go_find("weft-go-spawn", p->go_path, sizeof p->go_path, err, errlen) < 0) {
      p->go_path[0] = '\0';
      return SPAWN_SKIP;
    }
  }
  char count_s[24], batch_s[24];
  snprintf(count_s, sizeof count_s, "%lld", (long long)p->count);
  snprintf(batch_s, sizeof batch_s, "%lld", (long long)p->batch);
  char *argv[] = {p->go_path, "-case", (char *)which, "-count",  count_s, "-batch",
                  batch_s,    "-reps", "1",           "-warmup", "1",     NULL};
  json_value *rec = NULL;
  int code;
  int rc = wb_run_json(p->go_path, argv, NULL, &rec, &code);
  double ms = NAN, got_ops = NAN, gmp;
  const char *status = rec ? json_get_str(rec, "status") : NULL;
  if (rc < 0 || code != 0 || !status || strcmp(status, "ok") != 0 || !json_get_num(rec, "elapsed_ms", &ms) ||
      !json_get_num(rec, "ops", &got_ops) || (int64_t)got_ops != ops) {
    snprintf(err, errlen, "%.180s -case %s failed (exit code %d)", p->go_path, which, code);
    json_free(rec);
    return rc < 0 ? rc : -EIO;
  }
  const char *v = json_get_str(rec, "go_version");
  if (v) snprintf(p->go_version, sizeof p->go_version, "%s", v);
  if (json_get_num(rec, "gomaxprocs", &gmp)) p->gomaxprocs = (int64_t)gmp;
  json_free(rec);
  *ns = (int64_t)llround(ms * 1e6);
  return 0;
}

static int run_go_single(spawn_params *p, int64_t *ns, char *err, size_t errlen) {
  return run_go(p, "single", p->count, ns, err, errlen);
}

static int run_go_batch(spawn_params *p, int64_t *ns, char *err, size_t errlen) {
  return run_go(p, "batch", batches_of(p) * p->batch, ns, err, errlen);
}

static const spawn_case cases[] = {
    {"future-fiber", "weft", "go-single", false, run_future_fiber},
    {"future-fiber-batch", "weft", "go-batch", true, run_future_fiber_batch},
    {"future-thread-batch", "weft", "go-batch", true, run_future_thread_batch},
    {"pmap-empty", "weft", "go-batch", false, run_pmap_empty},
    {"go-single", "go", NULL, false, run_go_single},
    {"go-batch", "go", NULL, true, run_go_batch},
};
#define NCASES (sizeof cases / sizeof cases[0])

static int64_t ops_of(const spawn_case *c, const spawn_params *p) {
  if (c->batched) return batches_of(p) * p->batch;
  return c->run == run_pmap_empty ? p->pmap_calls * p->n : p->count;
}

/* ------------------------------------------------------------------------ */
/* The command                                                               */
/* ------------------------------------------------------------------------ */

typedef struct spawn_run {
  const spawn_case *c;
  int64_t ops;
  double *ms;    /* ms per measured repetition */
  double *ns_op; /* ns per operation, the same samples */
  size_t n;      /* measured repetitions so far */
  bool skipped;  /* the case cannot run here; why in error */
  bool failed;   /* a repetition failed; the first error in error */
  char error[256];
} spawn_run;

static const spawn_run *find_run(const spawn_run *runs, size_t nruns, const char *name) {
  for (size_t i = 0; i < nruns; i++)
    if (strcmp(runs[i].c->name, name) == 0 && runs[i].n > 0 && !runs[i].failed) return &runs[i];
  return NULL;
}

/* weft's ns per operation over go's, medians; NaN when either did not run. */
static double vs_go(const spawn_run *r, const spawn_run *runs, size_t nruns) {
  if (!r->c->vs_go || r->n == 0 || r->failed) return NAN;
  const spawn_run *g = find_run(runs, nruns, r->c->vs_go);
  if (!g) return NAN;
  double w = wb_summarize(r->ns_op, r->n).median, b = wb_summarize(g->ns_op, g->n).median;
  return b > 0 ? w / b : NAN;
}

static double round3(double v) { return round(v * 1e3) / 1e3; }

static json_value *spawn_record(const spawn_run *r, const spawn_run *runs, size_t nruns,
                                const spawn_params *p, const char *command) {
  json_value *rec = json_new_object();
  if (!rec) return NULL;
  int rc = json_set_int(rec, "schema", WB_SCHEMA);
  if (rc == 0) rc = json_set_str(rec, "bench", "spawn");
  if (rc == 0) rc = json_set_str(rec, "case", r->c->name);
  if (rc == 0) rc = json_set_str(rec, "backend", r->c->backend);
  if (rc == 0) rc = json_set_int(rec, "ops", r->ops);
  if (rc == 0) rc = r->c->batched ? json_set_int(rec, "batch", p->batch) : json_set_null(rec, "batch");
  if (rc == 0 && r->c->run == run_pmap_empty) rc = json_set_int(rec, "n", p->n);
  if (rc == 0 && r->c->run == run_pmap_empty) rc = json_set_int(rec, "calls", p->pmap_calls);
  if (rc == 0) rc = json_set_str(rec, "status", r->failed ? "failed" : "ok");
  if (rc == 0 && r->failed) rc = json_set_str(rec, "error", r->error);
  if (rc == 0) rc = json_set_int(rec, "warmup_repetitions", 1);
  if (rc == 0 && r->n > 0) {
    wb_summary s = wb_summarize(r->ns_op, r->n);
    double small[64];
    double *v = r->n <= 64 ? small : malloc(r->n * sizeof *v);
    rc = wb_add_timing(rec, r->ms, r->n);
    if (rc == 0) rc = json_set_num(rec, "ns_per_op", round3(s.median));
    if (rc == 0) rc = json_set_num(rec, "ns_per_op_min", round3(s.min));
    if (rc == 0) rc = json_set_num(rec, "ns_per_op_max", round3(s.max));
    if (rc == 0 && !v) rc = -ENOMEM;
    if (rc == 0) {
      for (size_t i = 0; i < r->n; i++) v[i] = round3(r->ns_op[i]);
      rc = json_set_nums(rec, "ns_per_op_samples", v, r->n);
    }
    if (v != small) free(v);
  }
  if (rc == 0 && r->c->vs_go) {
    double x = vs_go(r, runs, nruns);
    rc = json_set_num(rec, "vs_go", isnan(x) ? NAN : round(x * 1e4) / 1e4);
    if (rc == 0) rc = json_set_str(rec, "vs_go_case", r->c->vs_go);
  }
  if (rc == 0 && !r->c->vs_go && p->go_version[0]) rc = json_set_str(rec, "go_version", p->go_version);
  if (rc == 0 && !r->c->vs_go && p->gomaxprocs >= 0) rc = json_set_int(rec, "gomaxprocs", p->gomaxprocs);
  if (rc == 0) rc = wb_meta_add(rec);
  if (rc == 0) rc = json_set_str(rec, "command", command);
  if (rc < 0) {
    json_free(rec);
    return NULL;
  }
  return rec;
}

static void print_table(const spawn_run *runs, size_t nruns, const spawn_params *p, int64_t repeat) {
  printf("spawn: start an empty task and wait for it; %u cores, %lld repetition%s after 1 warm-up\n",
         wb_cores(), (long long)repeat, repeat == 1 ? "" : "s");
  printf("%-20s %-7s %10s %7s %14s %12s %12s  %s\n", "case", "backend", "ops", "batch", "median ns/op",
         "min ns/op", "median ms", "weft/go");
  for (size_t i = 0; i < nruns; i++) {
    const spawn_run *r = &runs[i];
    char batch[24];
    snprintf(batch, sizeof batch, r->c->batched ? "%lld" : "-", (long long)p->batch);
    printf("%-20s %-7s %10lld %7s", r->c->name, r->c->backend, (long long)r->ops, batch);
    if (r->skipped) {
      printf("  skipped: %s\n", r->error);
      continue;
    }
    if (r->n == 0) {
      printf("  FAILED: %s\n", r->error);
      continue;
    }
    wb_summary s = wb_summarize(r->ns_op, r->n), m = wb_summarize(r->ms, r->n);
    printf(" %14.1f %12.1f %12.3f", s.median, s.min, m.median);
    double x = vs_go(r, runs, nruns);
    if (!isnan(x))
      printf("  %.2fx %s", x, r->c->vs_go);
    else if (r->c->vs_go)
      printf("  -");
    if (r->failed) printf("  FAILED: %s", r->error);
    printf("\n");
  }
  for (size_t i = 0; i < nruns; i++)
    if (runs[i].c->run == run_pmap_empty && runs[i].n > 0)
      printf("(pmap-empty: %lld calls of %lld elements a repetition; ns per element)\n",
             (long long)p->pmap_calls, (long long)p->n);
  printf("(weft/go: weft's median ns per task over the Go case's; above 1, weft is slower.");
  if (p->gomaxprocs >= 0)
    printf(" The Go cases\n run Go's own scheduler, %s, GOMAXPROCS %lld, in a process of their own.",
           p->go_version, (long long)p->gomaxprocs);
  printf(")\n");
}

/* The command line that repeats the run: every value explicit, pmap-empty's calls as the warm-up chose them.
 */
static int make_command(const spawn_run *runs, size_t nruns, const spawn_params *p, int64_t repeat, bool json,
                        char **out) {
  wb_str clist = {0};
  int rc = 0;
  bool pmap = false;
  for (size_t j = 0; j < nruns && rc == 0; j++) {
    rc = wb_str_addf(&clist, "%s%s", j ? "," : "", runs[j].c->name);
    pmap = pmap || runs[j].c->run == run_pmap_empty;
  }
  char count_s[24], batch_s[24], n_s[24], calls_s[24], repeat_s[24];
  snprintf(count_s, sizeof count_s, "%lld", (long long)p->count);
  snprintf(batch_s, sizeof batch_s, "%lld", (long long)p->batch);
  snprintf(n_s, sizeof n_s, "%lld", (long long)p->n);
  snprintf(calls_s, sizeof calls_s, "%lld", (long long)p->pmap_calls);
  snprintf(repeat_s, sizeof repeat_s, "%lld", (long long)repeat);
  char *args[16] = {"spawn", "--case", clist.s, "--count", count_s, "--batch", batch_s, "--n", n_s};
  size_t n = 9;
  if (pmap && p->pmap_calls > 0) {
    args[n++] = "--pmap-calls";
    args[n++] = calls_s;
  }
  args[n++] = "--repeat";
  args[n++] = repeat_s;
  if (json) args[n++] = "--json";
  if (rc == 0) rc = clist.s ? wb_command_line(args, n, NULL, out) : -ENOMEM;
  wb_str_free(&clist);
  return rc;
}

int wb_cmd_spawn(int argc, char **argv) {
  const char *case_list = NULL;
  spawn_params p = {.count = 1000000, .batch = 1000, .n = 1000000, .gomaxprocs = -1};
  int64_t repeat = 1;
  bool json = false;
  wb_optstate st;
  wb_opt_init(&st, argc, argv, "spawn");
  const char *arg;
  int id;
  while ((id = wb_opt_next(&st, spawn_opts, &arg)) != WB_OPT_END) {
    switch (id) {
    case WB_OPT_ERROR:
      return WB_EXIT_USAGE;
    case WB_OPT_POSITIONAL:
      return wb_usage_error("spawn", "unexpected argument '%s'", arg);
    case OPT_HELP:
      fputs(spawn_help, stdout);
      return WB_EXIT_OK;
    case OPT_CASE:
      case_list = arg;
      break;
    case OPT_COUNT:
      if (!wb_parse_i64("spawn", "count", arg, 1, MAX_COUNT, &p.count)) return WB_EXIT_USAGE;
      break;
    case OPT_BATCH:
      if (!wb_parse_i64("spawn", "batch", arg, 1, MAX_BATCH, &p.batch)) return WB_EXIT_USAGE;
      break;
    case OPT_N:
      if (!wb_parse_i64("spawn", "n", arg, 1, MAX_N, &p.n)) return WB_EXIT_USAGE;
      break;
    case OPT_PMAP_CALLS:
      if (!wb_parse_i64("spawn", "pmap-calls", arg, 1, MAX_PMAP_CALLS, &p.pmap_calls)) return WB_EXIT_USAGE;
      break;
    case OPT_REPEAT:
      if (!wb_parse_i64("spawn", "repeat", arg, 1, MAX_REPEAT, &repeat)) return WB_EXIT_USAGE;
      break;
    case OPT_JSON:
      json = true;
      break;
    }
  }

  /* The cases, in the order given (default: all). */
  spawn_run runs[NCASES];
  size_t nruns = 0;
  memset(runs, 0, sizeof runs);
  if (!case_list) {
    for (size_t c = 0; c < NCASES; c++) runs[nruns++].c = &cases[c];
  } else {
    for (const char *q = case_list;;) {
      size_t len = strcspn(q, ",");
      size_t c = 0;
      while (c < NCASES && !(strlen(cases[c].name) == len && strncmp(cases[c].name, q, len) == 0)) c++;
      if (c == NCASES)
        return wb_usage_error("spawn",
                              "--case: unknown case '%.*s' (future-fiber, future-fiber-batch, "
                              "future-thread-batch, pmap-empty, go-single, go-batch)",
                              (int)len, q);
      for (size_t j = 0; j < nruns; j++)
        if (runs[j].c == &cases[c]) return wb_usage_error("spawn", "--case: '%s' given twice", cases[c].name);
      runs[nruns++].c = &cases[c];
      if (q[len] == '\0') break;
      q += len + 1;
    }
  }

  int exit_code = WB_EXIT_OK;
  char *command = NULL;
  p.fs = calloc((size_t)p.batch, sizeof *p.fs);
  for (size_t j = 0; j < nruns && p.fs; j++) {
    runs[j].ms = calloc((size_t)repeat, sizeof *runs[j].ms);
    runs[j].ns_op = calloc((size_t)repeat, sizeof *runs[j].ns_op);
    if (!runs[j].ms || !runs[j].ns_op) exit_code = WB_EXIT_FAIL;
  }
  if (!p.fs || exit_code != WB_EXIT_OK) {
    fprintf(stderr, "weft-bench spawn: out of memory\n");
    exit_code = WB_EXIT_FAIL;
    goto out;
  }
  wb_progress_init(json);

  /* Repetition 0 is the warm-up: run, then thrown away (it also chooses pmap-empty's calls). */
  for (int64_t r = 0; r <= repeat; r++) {
    if (r == 1) {
      /* The canonical command line, once every value is known: a rerun repeats exactly this. */
      for (size_t j = 0; j < nruns; j++) runs[j].ops = ops_of(runs[j].c, &p);
      if (make_command(runs, nruns, &p, repeat, json, &command) < 0) {
        fprintf(stderr, "weft-bench spawn: out of memory\n");
        exit_code = WB_EXIT_FAIL;
        goto out;
      }
      if (!json) {
        wb_progress_clear();
        fprintf(stderr, "command: %s\n", command);
      }
    }
    for (size_t k = 0; k < nruns; k++) {
      spawn_run *run = &runs[wb_interleave((size_t)r, k, nruns)];
      if (run->skipped || run->failed) continue;
      wb_progress(true, "[%s %lld of %lld] %s", r ? "repetition" : "warm-up", (long long)(r ? r : 1),
                  (long long)(r ? repeat : 1), run->c->name);
      int64_t ns = 0;
      char err[256] = "";
      int rc = run->c->run(&p, &ns, err, sizeof err);
      if (rc == SPAWN_SKIP) {
        run->skipped = true;
        snprintf(run->error, sizeof run->error, "%s", err);
        wb_progress_clear();
        if (strcmp(run->c->backend, "go") == 0)
          fprintf(stderr, "weft-bench spawn: go: skipped: %s\n", err);
        else
          fprintf(stderr, "weft-bench spawn: %s: skipped: %s\n", run->c->name, err);
        continue;
      }
      if (rc != 0) {
        run->failed = true;
        snprintf(run->error, sizeof run->error, "%s", err);
        wb_progress_clear();
        fprintf(stderr, "weft-bench spawn: %s: %s\n", run->c->name, err);
        exit_code = WB_EXIT_FAIL;
        continue;
      }
      if (r == 0) continue;
      run->ms[run->n] = (double)ns / 1e6;
      run->ns_op[run->n] = (double)ns / (double)run->ops;
      run->n++;
    }
  }
  wb_progress_clear();

  if (!json) {
    print_table(runs, nruns, &p, repeat);
  } else {
    for (size_t j = 0; j < nruns; j++) {
      if (runs[j].skipped) continue;
      json_value *rec = spawn_record(&runs[j], runs, nruns, &p, command);
      if (!rec || json_print_line(rec, stdout) < 0) {
        fprintf(stderr, "weft-bench spawn: cannot write the record for %s\n", runs[j].c->name);
        exit_code = WB_EXIT_FAIL;
      }
      json_free(rec);
    }
  }
out:
  for (size_t j = 0; j < nruns; j++) {
    free(runs[j].ms);
    free(runs[j].ns_op);
  }
  free(p.fs);
  free(command);
  return exit_code;
}
