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
#include "driver.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "weft.h"

#define MAX_COUNT 1000000000
#define MAX_BATCH 10000000
#define MAX_N     100000000

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

/* What every case is given, and what the go cases leave for the records. */
typedef struct spawn_params {
  int64_t count, batch, n;
  int64_t pmap_calls;  /* pmap-empty calls per repetition; 0 until the warm-up chose */
  weft_future **fs;    /* batch slots, batch of them */
  char go_path[4096];  /* weft-go-spawn, when found */
  char go_version[64]; /* from its records */
  int64_t gomaxprocs;  /* from its records, -1 until one came */
} spawn_params;

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
    return WB_SKIP;
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
  /*
   * The warm-up without --pmap-calls: one call to warm up, then 1, 2, 4, ...
   * calls timed until they take an eighth of the target, to choose how many
   * make 300 ms. One timed call alone could be a lucky 20 us among calls of
   * milliseconds, and choose thousands of them.
   */
  int rc = pmap_calls(p, 1, ns, err, errlen);
  int64_t calls = 1, t = 0;
  while (rc == 0) {
    rc = pmap_calls(p, calls, &t, err, errlen);
    if (rc != 0 || t >= PMAP_TARGET_NS / 8 || calls >= MAX_PMAP_CALLS / 2) break;
    calls *= 2;
  }
  if (rc != 0) return rc;
  double want = t > 0 ? (double)calls * PMAP_TARGET_NS / (double)t : MAX_PMAP_CALLS;
  p->pmap_calls = want < 1 ? 1 : want > MAX_PMAP_CALLS ? MAX_PMAP_CALLS : (int64_t)want;
  return 0;
}

/* ------------------------------------------------------------------------ */
/* The go cases: one weft-go-spawn run per repetition                        */
/* ------------------------------------------------------------------------ */

static int run_go(spawn_params *p, const char *which, int64_t ops, int64_t *ns, char *err, size_t errlen) {
  if (!p->go_path[0]) {
    if (wb_go_find("weft-go-spawn", p->go_path, sizeof p->go_path, err, errlen) < 0) {
      p->go_path[0] = '\0';
      return WB_SKIP;
    }
  }
  char count_s[24], batch_s[24];
  snprintf(count_s, sizeof count_s, "%lld", (long long)p->count);
  snprintf(batch_s, sizeof batch_s, "%lld", (long long)p->batch);
  char *argv[] = {p->go_path, "-case", (char *)which, "-count",  count_s, "-batch",
                  batch_s,    "-reps", "1",           "-warmup", "1",     NULL};
  json_t *rec = NULL;
  int code;
  int rc = wb_run_json(p->go_path, argv, NULL, &rec, &code);
  double ms = NAN, got_ops = NAN, gmp;
  const char *status = wb_json_get_str(rec, "status");
  if (rc < 0 || code != 0 || !status || strcmp(status, "ok") != 0 ||
      !wb_json_get_num(rec, "elapsed_ms", &ms) || !wb_json_get_num(rec, "ops", &got_ops) ||
      (int64_t)got_ops != ops) {
    snprintf(err, errlen, "%.180s -case %s failed (exit code %d)", p->go_path, which, code);
    json_decref(rec);
    return rc < 0 ? rc : -EIO;
  }
  const char *v = wb_json_get_str(rec, "go_version");
  if (v) snprintf(p->go_version, sizeof p->go_version, "%s", v);
  if (wb_json_get_num(rec, "gomaxprocs", &gmp)) p->gomaxprocs = (int64_t)gmp;
  json_decref(rec);
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

static int64_t ops_of(const spawn_case *c, const spawn_params *p) {
  if (c->batched) return batches_of(p) * p->batch;
  return c->run == run_pmap_empty ? p->pmap_calls * p->n : p->count;
}

/* ------------------------------------------------------------------------ */
/* The command                                                               */
/* ------------------------------------------------------------------------ */

enum { OPT_COUNT = 1, OPT_BATCH, OPT_N, OPT_PMAP_CALLS };

static const wb_opt spawn_opts[] = {
    {"count", true, OPT_COUNT},           {"batch", true, OPT_BATCH}, {"n", true, OPT_N},
    {"pmap-calls", true, OPT_PMAP_CALLS}, {NULL, false, 0},
};

/* The cases as choices of --case, in the default order; a choice's id is its index in cases[]. */
static const wb_choice spawn_choices[] = {
    {"future-fiber", NULL, NULL, 0},        {"future-fiber-batch", NULL, NULL, 1},
    {"future-thread-batch", NULL, NULL, 2}, {"pmap-empty", NULL, NULL, 3},
    {"go-single", NULL, NULL, 4},           {"go-batch", NULL, NULL, 5},
};

enum { M_NS_PER_OP, NMETRICS };
static const wb_metric spawn_metrics[NMETRICS] = {
    {"ns_per_op", WB_METRIC_MINMAX | WB_METRIC_SAMPLES, 1e-3},
};

static int spawn_option(wb_driver *d, int id, const char *arg) {
  spawn_params *p = d->ctx;
  bool ok = true;
  switch (id) {
  case OPT_COUNT:
    ok = wb_parse_i64("spawn", "count", arg, 1, MAX_COUNT, &p->count);
    break;
  case OPT_BATCH:
    ok = wb_parse_i64("spawn", "batch", arg, 1, MAX_BATCH, &p->batch);
    break;
  case OPT_N:
    ok = wb_parse_i64("spawn", "n", arg, 1, MAX_N, &p->n);
    break;
  case OPT_PMAP_CALLS:
    ok = wb_parse_i64("spawn", "pmap-calls", arg, 1, MAX_PMAP_CALLS, &p->pmap_calls);
    break;
  }
  return ok ? 0 : WB_EXIT_USAGE;
}

static int spawn_prepare(wb_driver *d) {
  spawn_params *p = d->ctx;
  p->fs = calloc((size_t)p->batch, sizeof *p->fs);
  if (!p->fs) {
    fprintf(stderr, "weft-bench spawn: out of memory\n");
    return WB_EXIT_FAIL;
  }
  for (size_t i = 0; i < d->npicked; i++) {
    const wb_choice *ch = wb_picked(d, i);
    wb_run *r = wb_add_run(d, ch->name, ch->id);
    if (!r) return WB_EXIT_FAIL;
    if (strcmp(cases[ch->id].backend, "go") == 0) r->family = "go";
  }
  return 0;
}

/* The command line that repeats the run: every value explicit, pmap-empty's calls as the warm-up chose them.
 */
static int spawn_args(wb_driver *d, wb_args *a) {
  spawn_params *p = d->ctx;
  bool pmap = false;
  for (size_t j = 0; j < d->nruns; j++) pmap = pmap || cases[d->runs[j].id].run == run_pmap_empty;
  wb_args_add(a, "--case");
  wb_str clist = {0};
  for (size_t j = 0; j < d->nruns; j++) wb_str_addf(&clist, "%s%s", j ? "," : "", d->runs[j].name);
  if (clist.s)
    wb_args_add(a, clist.s);
  else
    a->err = -ENOMEM;
  wb_str_free(&clist);
  wb_args_int(a, "--count", p->count);
  wb_args_int(a, "--batch", p->batch);
  wb_args_int(a, "--n", p->n);
  if (pmap && p->pmap_calls > 0) wb_args_int(a, "--pmap-calls", p->pmap_calls);
  wb_args_repeat(d, a);
  return 0;
}

/* Repetition 0 is the driver's warm-up: run, then thrown away (it also chooses pmap-empty's calls). */
static int spawn_run(wb_driver *d, wb_run *r, wb_phase phase, wb_sample *s) {
  (void)phase;
  spawn_params *p = d->ctx;
  const spawn_case *c = &cases[r->id];
  int64_t ns = 0;
  int rc = c->run(p, &ns, s->error, sizeof s->error);
  if (rc != 0) return rc;
  s->ms = (double)ns / 1e6;
  s->m[M_NS_PER_OP] = (double)ns / (double)ops_of(c, p);
  return 0;
}

/* weft's ns per operation over go's, medians; NaN when either did not run. */
static double vs_go(const wb_driver *d, const wb_run *r) {
  const spawn_case *c = &cases[r->id];
  if (!c->vs_go || r->n == 0 || r->failed) return NAN;
  const wb_run *g = wb_find_run(d, c->vs_go);
  if (!g || g->failed) return NAN;
  double w = wb_run_metric(r, M_NS_PER_OP).median, b = wb_run_metric(g, M_NS_PER_OP).median;
  return b > 0 ? w / b : NAN;
}

static int spawn_record(wb_driver *d, const wb_run *r, json_t *rec) {
  spawn_params *p = d->ctx;
  const spawn_case *c = &cases[r->id];
  int rc = wb_json_set_str(rec, "backend", c->backend);
  if (rc == 0) rc = wb_json_set_int(rec, "ops", ops_of(c, p));
  if (rc == 0) rc = c->batched ? wb_json_set_int(rec, "batch", p->batch) : wb_json_set_null(rec, "batch");
  if (rc == 0 && c->run == run_pmap_empty) rc = wb_json_set_int(rec, "n", p->n);
  if (rc == 0 && c->run == run_pmap_empty) rc = wb_json_set_int(rec, "calls", p->pmap_calls);
  if (rc == 0) rc = wb_json_set_int(rec, "warmup_repetitions", 1);
  if (rc == 0 && c->vs_go) {
    double x = vs_go(d, r);
    rc = wb_json_set_num(rec, "vs_go", isnan(x) ? NAN : round(x * 1e4) / 1e4);
    if (rc == 0) rc = wb_json_set_str(rec, "vs_go_case", c->vs_go);
  }
  if (rc == 0 && !c->vs_go && p->go_version[0]) rc = wb_json_set_str(rec, "go_version", p->go_version);
  if (rc == 0 && !c->vs_go && p->gomaxprocs >= 0) rc = wb_json_set_int(rec, "gomaxprocs", p->gomaxprocs);
  return rc;
}

static void spawn_report(wb_driver *d) {
  spawn_params *p = d->ctx;
  printf("spawn: start an empty task and wait for it; %u cores, %lld repetition%s after 1 warm-up\n",
         wb_cores(), (long long)d->repeat, d->repeat == 1 ? "" : "s");
  printf("%-20s %-7s %10s %7s %14s %12s %12s  %s\n", "case", "backend", "ops", "batch", "median ns/op",
         "min ns/op", "median ms", "weft/go");
  bool pmap = false;
  for (size_t i = 0; i < d->nruns; i++) {
    const wb_run *r = &d->runs[i];
    const spawn_case *c = &cases[r->id];
    char batch[24];
    snprintf(batch, sizeof batch, c->batched ? "%lld" : "-", (long long)p->batch);
    printf("%-20s %-7s %10lld %7s", r->name, c->backend, (long long)ops_of(c, p), batch);
    if (r->skipped) {
      printf("  skipped: %s\n", r->error);
      continue;
    }
    if (r->n == 0) {
      printf("  FAILED: %s\n", r->error);
      continue;
    }
    pmap = pmap || c->run == run_pmap_empty;
    wb_summary s = wb_run_metric(r, M_NS_PER_OP), m = wb_run_ms(r);
    printf(" %14.1f %12.1f %12.3f", s.median, s.min, m.median);
    double x = vs_go(d, r);
    if (!isnan(x))
      printf("  %.2fx %s", x, c->vs_go);
    else if (c->vs_go)
      printf("  -");
    if (r->failed) printf("  FAILED: %s", r->error);
    printf("\n");
  }
  if (pmap)
    printf("(pmap-empty: %lld calls of %lld elements a repetition; ns per element)\n",
           (long long)p->pmap_calls, (long long)p->n);
  printf("(weft/go: weft's median ns per task over the Go case's; above 1, weft is slower.");
  if (p->gomaxprocs >= 0)
    printf(" The Go cases\n run Go's own scheduler, %s, GOMAXPROCS %lld, in a process of their own.",
           p->go_version, (long long)p->gomaxprocs);
  printf(")\n");
}

static void spawn_teardown(wb_driver *d) {
  spawn_params *p = d->ctx;
  free(p->fs);
  p->fs = NULL;
}

static const wb_command spawn_command = {
    .name = "spawn",
    .help = spawn_help,
    .opts = spawn_opts,
    .pick = "case",
    .choices = spawn_choices,
    .nchoices = sizeof spawn_choices / sizeof spawn_choices[0],
    .name_key = "case",
    .metrics = spawn_metrics,
    .nmetrics = NMETRICS,
    .max_repeat = 1000,
    .flags = WB_CMD_WARMUP | WB_CMD_ARGS_AFTER_WARMUP,
    .option = spawn_option,
    .prepare = spawn_prepare,
    .args = spawn_args,
    .run = spawn_run,
    .record = spawn_record,
    .report = spawn_report,
    .teardown = spawn_teardown,
};

int wb_cmd_spawn(int argc, char **argv) {
  spawn_params p = {.count = 1000000, .batch = 1000, .n = 1000000, .gomaxprocs = -1};
  return wb_drive(&spawn_command, &p, argc, argv);
}
