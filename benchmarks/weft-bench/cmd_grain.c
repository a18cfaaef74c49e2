/*
 * This file contains `weft-bench grain`: how small the tasks of a parallel
 * map may be before the runtime's overhead eats the parallelism, on five
 * backends, measured as Task Bench (Slaughter et al., SC'20) measures it:
 *
 *   efficiency  = useful work / (elapsed x workers), where the useful work is
 *                 tasks x the task's time run alone, sequentially;
 *   granularity = elapsed x workers / tasks: the wall time a task really
 *                 occupied a worker for, overhead included;
 *   METG(50%)   = the minimum effective task granularity: the smallest
 *                 granularity at which the efficiency is still 50%.
 *
 * Every task runs the same kernel (weft_kernel_spin of benchmarks/kernels.c:
 * a dependent chain of multiply-adds, one 64-byte-aligned copy for every
 * backend) for the same number of iterations. Its cost per iteration is
 * measured first, sequentially on the main thread (the fastest of five runs
 * of about 20 ms), and every task size of the sweep (100 ns to 10 ms by
 * default) becomes a number of iterations. The useful work of a task is then
 * measured as Task Bench means it, the same tasks with no runtime at all: a
 * plain loop over about 2 ms of them on the main thread, once at the start
 * and once before every measured call, of which the fastest counts (on a
 * shared machine noise only ever adds time; and consecutive independent
 * tasks overlap in the core's pipeline as they do on the workers, so a tiny
 * task costs less in a loop than its chain of iterations alone). One measurement is one parallel call over T
 * tasks, with T chosen so that the call is --work-ms of work per worker (at least 8 tasks a worker, at most
 * 2^20 tasks):
 *
 *   weft-cpu       weft_pmap, WEFT_CPU (OpenMP tasks, weft's grain)
 *   weft-blocking  weft_pmap, WEFT_BLOCKING (fibers)
 *   omp-for        #pragma omp parallel for (the runtime's default schedule)
 *   omp-task       #pragma omp parallel + single + one #pragma omp task a task
 *   threads        one pthread a task (default attributes), at most 256 alive at
 *                  once, and at most 2000 tasks a call: 100 ns tasks would
 *                  otherwise need a million threads
 *
 * After every call each task's output is checked (a task that did not run
 * leaves a 0), so a backend cannot look fast by skipping work.
 *
 * METG is read from the sweep, per backend, from the medians, as Task Bench
 * defines it: the smallest granularity at which the efficiency reaches 50%.
 * The smallest task size that reaches it and the next smaller one (which
 * does not) bracket the crossing, and METG is interpolated between their
 * granularities (linearly in efficiency against log granularity). When the
 * smallest size reaches 50%, METG is at most its granularity; when no size
 * does, it is above the sweep (null). A size above the METG that falls under
 * 50% again (noise, or a runtime's misjudgement) does not move it: the
 * table and the plot show it.
 */
#define _POSIX_C_SOURCE 200809L
#include "driver.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "weft.h"

#define MAX_SIZES        32
#define MAX_TASKS        (1u << 20)
#define MAX_THREAD_TASKS 2000       /* a pthread each: about 60 us apiece to create and join on 2 cores */
#define THREAD_WAVE      256        /* threads alive at once */
#define TASKS_PER_WORKER 8          /* at least: one task per worker measures nothing but the fork and join */
#define CALIBRATE_NS     20000000.0 /* the first runs */
#define CALIBRATE_RUNS   5
#define SEQ_LOOP_NS      2000000.0 /* the sequential loop of a size's tasks: its useful work */
#define EFFICIENT        0.5       /* Task Bench's 50% */
#define DEFAULT_SIZES    "100,300,1000,3000,10000,30000,100000,300000,1000000,3000000,10000000"

static const char grain_help[] =
    "usage: weft-bench grain [--backend B[,B...]] [--task-ns N[,N...]] [--work-ms W]\n"
    "                        [--repeat R] [--json]\n"
    "\n"
    "The efficiency of a parallel map against the size of its tasks, and each\n"
    "backend's minimum effective task granularity (METG(50%), as Task Bench, SC'20,\n"
    "defines it): efficiency = useful work / (elapsed x workers), granularity =\n"
    "elapsed x workers / tasks, METG = the smallest granularity at 50% efficiency.\n"
    "Every task spins the same kernel (benchmarks/kernels.c) for as many iterations\n"
    "as make its size, from the kernel's cost per iteration measured sequentially\n"
    "first; a task's useful work is its time in a plain loop of the same tasks (the\n"
    "fastest of such 2 ms loops, one before every call).\n"
    "\n"
    "  --backend B    weft-cpu       weft_pmap, WEFT_CPU\n"
    "                 weft-blocking  weft_pmap, WEFT_BLOCKING (fibers)\n"
    "                 omp-for        #pragma omp parallel for\n"
    "                 omp-task       #pragma omp task, one per task, from a single\n"
    "                 threads        a pthread per task (at most 256 at once, at\n"
    "                                most 2000 tasks a call)\n"
    "                 a comma-separated list; default: all that this build has\n"
    "  --task-ns N    task sizes in nanoseconds of the kernel (default\n"
    "                 100,300,1000,...,10000000: 100 ns to 10 ms)\n"
    "  --work-ms W    work per worker in one call: tasks = W x workers / size, at\n"
    "                 least 8 a worker, at most 2^20 (default 50)\n"
    "  --repeat R     R repetitions, every (backend, size) interleaved; medians\n"
    "  --json         one JSON object per backend and size (JSON Lines) on stdout\n"
    "  --help         this text\n"
    "\n"
    "Workers: the cores (CPUs in the affinity mask). Each (backend, size) first runs\n"
    "one short untimed call. Exit codes: 0 ok, 1 a call failed or a task did not\n"
    "run, 2 usage, 3 a backend this build lacks.\n";

enum { B_WEFT_CPU, B_WEFT_BLOCKING, B_OMP_FOR, B_OMP_TASK, B_THREADS };

static const wb_choice grain_backends[] = {
    {"weft-cpu", "weft_pmap WEFT_CPU", NULL, B_WEFT_CPU},
    {"weft-blocking", "weft_pmap WEFT_BLOCKING", NULL, B_WEFT_BLOCKING},
    {"omp-for", "omp parallel for", WB_NEEDS_OPENMP, B_OMP_FOR},
    {"omp-task", "omp task", WB_NEEDS_OPENMP, B_OMP_TASK},
    {"threads", "a thread per task", NULL, B_THREADS},
};
#define NBACKENDS (sizeof grain_backends / sizeof grain_backends[0])

enum { OPT_TASK_NS = 1, OPT_WORK_MS };

static const wb_opt grain_opts[] = {
    {"task-ns", true, OPT_TASK_NS},
    {"work-ms", true, OPT_WORK_MS},
    {NULL, false, 0},
};

enum { M_EFFICIENCY, M_GRANULARITY, NMETRICS };
static const wb_metric grain_metrics[NMETRICS] = {
    {"efficiency", WB_METRIC_MINMAX | WB_METRIC_SAMPLES, 1e-4},
    {"granularity_ns", WB_METRIC_MINMAX, 0.1},
};

typedef struct grain_cmd {
  int64_t sizes[MAX_SIZES]; /* nominal task sizes, ns, ascending */
  size_t nsizes;
  int64_t work_ms;
  unsigned workers;
  uint64_t iters[MAX_SIZES];          /* each size's iterations, from the first calibration */
  size_t tasks[NBACKENDS][MAX_SIZES]; /* each backend's tasks a call at each size */
  double iter_ns;                     /* the kernel's cost per iteration: the fastest run so far */
  double task_seq_ns[MAX_SIZES];      /* a task's time in a plain loop: the fastest loop so far */
  double *cal;                        /* every calibration run's ns per iteration */
  size_t ncal, capcal;
  uint64_t *out; /* each task's output: 0 until it ran */
  char labels[NBACKENDS * MAX_SIZES][64];
  /* METG per backend (index: the choice's id), filled by finish */
  double metg[NBACKENDS];
  const char *metg_bound[NBACKENDS];
} grain_cmd;

/* ------------------------------------------------------------------------ */
/* Sizes                                                                     */
/* ------------------------------------------------------------------------ */

/* Each size's iterations and each backend's tasks, from the first calibration (fixed from then on). */
static void size_tasks(grain_cmd *c) {
  for (size_t k = 0; k < c->nsizes; k++) {
    double it = round((double)c->sizes[k] / c->iter_ns);
    c->iters[k] = it < 1 ? 1 : (uint64_t)it;
    double task = (double)c->iters[k] * c->iter_ns;
    for (size_t b = 0; b < NBACKENDS; b++) {
      double t = ceil((double)c->workers * (double)c->work_ms * 1e6 / task);
      double lo = (double)TASKS_PER_WORKER * c->workers, hi = b == B_THREADS ? MAX_THREAD_TASKS : MAX_TASKS;
      c->tasks[b][k] = (size_t)(t < lo ? lo : t > hi ? hi : t);
    }
  }
}

/* "100 ns", "3.2 us", "10 ms". */
static void fmt_ns(char *out, size_t len, double ns) {
  if (isnan(ns))
    snprintf(out, len, "-");
  else if (ns >= 1e6)
    snprintf(out, len, "%.3g ms", ns / 1e6);
  else if (ns >= 1e3)
    snprintf(out, len, "%.3g us", ns / 1e3);
  else
    snprintf(out, len, "%.3g ns", ns);
}

/* ------------------------------------------------------------------------ */
/* The backends                                                              */
/* ------------------------------------------------------------------------ */

typedef struct call {
  uint64_t *out;
  uint64_t iters;
} call;

static void task(const call *k, size_t i) { k->out[i] = weft_kernel_spin(k->iters, (uint64_t)i + 1); }

static int pmap_task(void *ctx, size_t i) {
  task(ctx, i);
  return 0;
}

static int run_pmap(call *k, size_t n, weft_kind kind) {
  weft_pmap_opts o = WEFT_PMAP_OPTS_INIT;
  o.kind = kind;
  return weft_pmap(n, pmap_task, k, &o);
}

static int run_omp_for(call *k, size_t n) {
#ifdef _OPENMP
#pragma omp parallel for
  for (size_t i = 0; i < n; i++) task(k, i);
  return 0;
#else
  (void)k;
  (void)n;
  return -ENOSYS;
#endif
}

static int run_omp_task(call *k, size_t n) {
#ifdef _OPENMP
#pragma omp parallel
#pragma omp single
  for (size_t i = 0; i < n; i++) {
#pragma omp task firstprivate(i)
    task(k, i);
  }
  /* The parallel region's closing barrier waits for every task. */
  return 0;
#else
  (void)k;
  (void)n;
  return -ENOSYS;
#endif
}

typedef struct thread_task {
  const call *k;
  size_t i;
} thread_task;

static void *thread_main(void *arg) {
  thread_task *t = arg;
  task(t->k, t->i);
  return NULL;
}

static int run_threads(call *k, size_t n) {
  pthread_t tids[THREAD_WAVE];
  thread_task args[THREAD_WAVE];
  for (size_t base = 0; base < n; base += THREAD_WAVE) {
    size_t wave = n - base < THREAD_WAVE ? n - base : THREAD_WAVE, made = 0;
    int rc = 0;
    for (; made < wave; made++) {
      args[made] = (thread_task){k, base + made};
      if ((rc = pthread_create(&tids[made], NULL, thread_main, &args[made])) != 0) break;
    }
    for (size_t t = 0; t < made; t++) pthread_join(tids[t], NULL);
    if (rc != 0) return -rc;
  }
  return 0;
}

static int run_backend(int backend, call *k, size_t n) {
  switch (backend) {
  case B_WEFT_CPU:
    return run_pmap(k, n, WEFT_CPU);
  case B_WEFT_BLOCKING:
    return run_pmap(k, n, WEFT_BLOCKING);
  case B_OMP_FOR:
    return run_omp_for(k, n);
  case B_OMP_TASK:
    return run_omp_task(k, n);
  default:
    return run_threads(k, n);
  }
}

/* ------------------------------------------------------------------------ */
/* The command                                                               */
/* ------------------------------------------------------------------------ */

static int grain_option(wb_driver *d, int id, const char *arg) {
  grain_cmd *c = d->ctx;
  if (id == OPT_WORK_MS)
    return wb_parse_i64("grain", "work-ms", arg, 1, 60000, &c->work_ms) ? 0 : WB_EXIT_USAGE;
  c->nsizes = 0;
  for (const char *p = arg;;) {
    size_t len = strcspn(p, ",");
    char word[32];
    if (len == 0 || len >= sizeof word)
      return wb_usage_error("grain", "--task-ns: '%s' is not a list of numbers", arg);
    memcpy(word, p, len);
    word[len] = '\0';
    if (c->nsizes == MAX_SIZES) return wb_usage_error("grain", "--task-ns: more than %d sizes", MAX_SIZES);
    if (!wb_parse_i64("grain", "task-ns", word, 1, 10000000000LL, &c->sizes[c->nsizes])) return WB_EXIT_USAGE;
    for (size_t i = 0; i < c->nsizes; i++)
      if (c->sizes[i] == c->sizes[c->nsizes])
        return wb_usage_error("grain", "--task-ns: %s given twice", word);
    c->nsizes++;
    if (p[len] == '\0') break;
    p += len + 1;
  }
  return 0;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

static int grain_prepare(wb_driver *d) {
  grain_cmd *c = d->ctx;
  if (c->nsizes == 0) grain_option(d, OPT_TASK_NS, DEFAULT_SIZES);
  qsort(c->sizes, c->nsizes, sizeof c->sizes[0], cmp_i64);
  c->workers = wb_cores();
  /* Every backend at every size: the runs interleave over all of them. */
  for (size_t b = 0; b < d->npicked; b++) {
    const wb_choice *ch = wb_picked(d, b);
    for (size_t k = 0; k < c->nsizes; k++) {
      wb_run *r = wb_add_run(d, ch->name, ch->id);
      if (!r) return WB_EXIT_FAIL;
      r->arg = (int64_t)k;
      char ns[32];
      fmt_ns(ns, sizeof ns, (double)c->sizes[k]);
      char *label = c->labels[(size_t)ch->id * MAX_SIZES + k];
      snprintf(label, sizeof c->labels[0], "%s, %s tasks", ch->name, ns);
      r->label = label;
    }
  }
  return 0;
}

static int grain_args(wb_driver *d, wb_args *a) {
  grain_cmd *c = d->ctx;
  wb_args_picked(d, a);
  wb_str list = {0};
  for (size_t k = 0; k < c->nsizes; k++) wb_str_addf(&list, "%s%lld", k ? "," : "", (long long)c->sizes[k]);
  wb_args_add(a, "--task-ns");
  if (list.s)
    wb_args_add(a, list.s);
  else
    a->err = -ENOMEM;
  wb_str_free(&list);
  wb_args_int(a, "--work-ms", c->work_ms);
  wb_args_repeat(d, a);
  return 0;
}

/* One sequential run of the kernel for about ns: its cost per iteration, kept; the fastest so far is the
 * cost. */
static int calibrate(grain_cmd *c, double ns) {
  uint64_t n = c->iter_ns > 0 ? (uint64_t)(ns / c->iter_ns) : 1u << 20;
  if (n < 1024) n = 1024;
  int64_t t0 = wb_now_ns();
  weft_kernel_sink((void *)(uintptr_t)weft_kernel_spin(n, c->ncal + 1));
  double per = (double)(wb_now_ns() - t0) / (double)n;
  if (c->ncal == c->capcal) {
    size_t cap = c->capcal ? 2 * c->capcal : 64;
    double *p = realloc(c->cal, cap * sizeof *p);
    if (!p) return -ENOMEM;
    c->cal = p;
    c->capcal = cap;
  }
  c->cal[c->ncal++] = per;
  if (per > 0 && (!(c->iter_ns > 0) || per < c->iter_ns)) c->iter_ns = per;
  return 0;
}

/* A plain loop over about 2 ms of size k's tasks on this thread: a task's useful work; the fastest counts. */
static void seq_loop(grain_cmd *c, size_t k) {
  double m = floor(SEQ_LOOP_NS / (double)c->sizes[k]);
  size_t n = m < 1 ? 1 : m > MAX_TASKS ? MAX_TASKS : (size_t)m;
  call kk = {c->out, c->iters[k]};
  int64_t t0 = wb_now_ns();
  for (size_t i = 0; i < n; i++) task(&kk, i);
  double per = (double)(wb_now_ns() - t0) / (double)n;
  if (per > 0 && (!(c->task_seq_ns[k] > 0) || per < c->task_seq_ns[k])) c->task_seq_ns[k] = per;
}

static int grain_setup(wb_driver *d) {
  grain_cmd *c = d->ctx;
  int rc = calibrate(c, 0); /* a probe of 2^20 iterations, to size the runs that count */
  c->ncal = 0;
  double probe = c->iter_ns;
  for (int i = 0; i < CALIBRATE_RUNS && rc == 0; i++) rc = calibrate(c, CALIBRATE_NS);
  if (rc == 0 && !(c->iter_ns > 0)) {
    fprintf(stderr, "weft-bench grain: the kernel's cost per iteration came out as %g ns\n", probe);
    return WB_EXIT_FAIL;
  }
  if (rc == 0 && !(c->out = calloc(MAX_TASKS, sizeof *c->out))) rc = -ENOMEM;
  if (rc < 0) {
    fprintf(stderr, "weft-bench grain: out of memory\n");
    return WB_EXIT_FAIL;
  }
  size_tasks(c);
  /* Touch every page once here: a first touch inside a timed call would be charged to the backend. */
  memset(c->out, 1, MAX_TASKS * sizeof *c->out);
  for (size_t k = 0; k < c->nsizes; k++) seq_loop(c, k);
  return 0;
}

/* The warm-up is a short call of the same tasks (8 a worker): the runtime's threads start, untimed. */
static int grain_run(wb_driver *d, wb_run *r, wb_phase phase, wb_sample *s) {
  grain_cmd *c = d->ctx;
  call k = {c->out, c->iters[r->arg]};
  size_t n = c->tasks[r->id][r->arg];
  if (phase == WB_WARMUP) n = (size_t)TASKS_PER_WORKER * c->workers;
  if (phase == WB_MEASURE) seq_loop(c, (size_t)r->arg);
  memset(c->out, 0, n * sizeof *c->out);
  int64_t t0 = wb_now_ns();
  int rc = run_backend(r->id, &k, n);
  int64_t t1 = wb_now_ns();
  if (rc != 0) return wb_fail(s, rc < 0 ? rc : -EIO, "the call failed: %s", weft_strerror(rc));
  size_t missed = 0;
  for (size_t i = 0; i < n; i++) missed += c->out[i] == 0;
  if (missed) return wb_fail(s, -EIO, "%zu of %zu tasks did not run", missed, n);
  double elapsed_ns = (double)(t1 - t0);
  s->ms = elapsed_ns / 1e6;
  s->m[M_EFFICIENCY] = (double)n * c->task_seq_ns[r->arg] / (elapsed_ns * c->workers); /* finish redoes it */
  s->m[M_GRANULARITY] = elapsed_ns * c->workers / (double)n;
  return 0;
}

/*
 * The efficiencies again, by each size's fastest sequential loop of the
 * whole run (each sample was computed by the fastest so far), then the METG
 * of every backend, from the medians of its sizes (see the top of the file).
 */
static void grain_finish(wb_driver *d) {
  grain_cmd *c = d->ctx;
  for (size_t i = 0; i < d->nruns; i++) {
    wb_run *r = &d->runs[i];
    double useful_ns = (double)c->tasks[r->id][r->arg] * c->task_seq_ns[r->arg];
    for (size_t j = 0; j < r->n; j++) r->m[M_EFFICIENCY][j] = useful_ns / (r->ms[j] * 1e6 * c->workers);
  }
  for (size_t b = 0; b < NBACKENDS; b++) {
    c->metg[b] = NAN;
    c->metg_bound[b] = NULL;
    /* The backend's sizes, ascending (its runs were made in that order). */
    double g[MAX_SIZES], e[MAX_SIZES];
    size_t n = 0;
    for (size_t i = 0; i < d->nruns; i++) {
      const wb_run *r = &d->runs[i];
      if (r->id != (int)b || r->n == 0 || r->failed) continue;
      g[n] = wb_run_metric(r, M_GRANULARITY).median;
      e[n] = wb_run_metric(r, M_EFFICIENCY).median;
      n++;
    }
    if (n == 0) continue;
    size_t k = 0;
    while (k < n && !(e[k] >= EFFICIENT)) k++;
    if (k == n) {
      c->metg_bound[b] = "not_reached";
    } else if (k == 0) {
      c->metg[b] = g[0];
      c->metg_bound[b] = "at_most";
    } else {
      double t = (e[k] - EFFICIENT) / (e[k] - e[k - 1]);
      c->metg[b] = exp(log(g[k]) + t * (log(g[k - 1]) - log(g[k])));
      c->metg_bound[b] = "interpolated";
    }
  }
}

static int grain_record(wb_driver *d, const wb_run *r, json_t *rec) {
  grain_cmd *c = d->ctx;
  uint64_t iters = c->iters[r->arg];
  wb_summary cal = wb_summarize(c->cal, c->ncal);
  int rc = wb_json_set_int(rec, "task_ns", c->sizes[r->arg]);
  if (rc == 0) rc = wb_json_set_int(rec, "task_iters", (int64_t)iters);
  if (rc == 0) rc = wb_json_set_num(rec, "task_ns_actual", wb_round_to(c->task_seq_ns[r->arg], 0.1));
  if (rc == 0) rc = wb_json_set_int(rec, "tasks", (int64_t)c->tasks[r->id][r->arg]);
  if (rc == 0) rc = wb_json_set_int(rec, "workers", c->workers);
  if (rc == 0) rc = wb_json_set_int(rec, "work_ms", c->work_ms);
  if (rc == 0) rc = wb_json_set_num(rec, "iter_ns", wb_round_to(c->iter_ns, 1e-4));
  if (rc == 0) rc = wb_json_set_num(rec, "iter_ns_median", wb_round_to(cal.median, 1e-4));
  if (rc == 0) rc = wb_json_set_num(rec, "iter_ns_max", wb_round_to(cal.max, 1e-4));
  if (rc == 0) rc = wb_json_set_int(rec, "calibration_runs", (int64_t)c->ncal);
  if (rc == 0) rc = wb_json_set_num(rec, "metg_ns", wb_round_to(c->metg[r->id], 0.1));
  if (rc == 0) rc = wb_json_set_str(rec, "metg_bound", c->metg_bound[r->id]);
  return rc;
}

static void grain_report(wb_driver *d) {
  grain_cmd *c = d->ctx;
  wb_summary cal = wb_summarize(c->cal, c->ncal);
  printf("grain: one parallel call over T tasks of the same spin kernel, %u workers (cores); the kernel:\n"
         "%.3f ns an iteration (sequential, the fastest of %zu runs; median %.3f, slowest %.3f)\n",
         c->workers, c->iter_ns, c->ncal, cal.median, cal.max);
  printf("efficiency = useful work / (elapsed x workers), median of %lld repetition%s; * spread "
         "(max-min)/median "
         "> 50%%\n",
         (long long)d->repeat, d->repeat == 1 ? "" : "s");
  printf("%10s %9s", "task size", "tasks");
  for (size_t b = 0; b < d->npicked; b++) printf(" %14s", wb_picked(d, b)->name);
  printf("\n");
  for (size_t k = 0; k < c->nsizes; k++) {
    char ns[32];
    fmt_ns(ns, sizeof ns, (double)c->sizes[k]);
    printf("%10s %9zu", ns, c->tasks[B_WEFT_CPU][k]);
    for (size_t b = 0; b < d->npicked; b++) {
      const wb_run *r = NULL;
      for (size_t i = 0; i < d->nruns && !r; i++)
        if (d->runs[i].id == wb_picked(d, b)->id && d->runs[i].arg == (int64_t)k) r = &d->runs[i];
      if (!r || r->n == 0) {
        printf(" %14s", "failed");
        continue;
      }
      wb_summary e = wb_run_metric(r, M_EFFICIENCY);
      char cell[32];
      snprintf(cell, sizeof cell, "%.1f%%%s", e.median * 100, wb_spread(e) > 0.5 ? "*" : " ");
      printf(" %14s", cell);
    }
    printf("\n");
  }
  printf("METG(50%%), the smallest task granularity (elapsed x workers / tasks) at 50%% efficiency\n"
         "(Task Bench, SC'20):\n");
  for (size_t b = 0; b < d->npicked; b++) {
    const wb_choice *ch = wb_picked(d, b);
    char g[32];
    fmt_ns(g, sizeof g, c->metg[ch->id]);
    const char *bound = c->metg_bound[ch->id];
    printf("  %-14s %s%s\n", ch->name,
           !bound                              ? "-"
           : strcmp(bound, "not_reached") == 0 ? "above the largest task size"
           : strcmp(bound, "at_most") == 0     ? "at most "
                                               : "",
           bound && strcmp(bound, "not_reached") != 0 ? g : "");
  }
  for (size_t b = 0; b < d->npicked; b++)
    if (wb_picked(d, b)->id == B_THREADS)
      printf("(threads: at most %d tasks a call, %d threads alive at once; tasks: the other backends')\n",
             MAX_THREAD_TASKS, THREAD_WAVE);
  for (size_t i = 0; i < d->nruns; i++)
    if (d->runs[i].failed) printf("  %s FAILED: %s\n", wb_run_label(&d->runs[i]), d->runs[i].error);
}

static void grain_teardown(wb_driver *d) {
  grain_cmd *c = d->ctx;
  free(c->out);
  free(c->cal);
  c->out = NULL;
  c->cal = NULL;
}

static const wb_command grain_command = {
    .name = "grain",
    .help = grain_help,
    .opts = grain_opts,
    .pick = "backend",
    .choices = grain_backends,
    .nchoices = NBACKENDS,
    .metrics = grain_metrics,
    .nmetrics = NMETRICS,
    .max_repeat = 1000,
    .flags = WB_CMD_WARMUP,
    .option = grain_option,
    .prepare = grain_prepare,
    .args = grain_args,
    .setup = grain_setup,
    .run = grain_run,
    .finish = grain_finish,
    .record = grain_record,
    .report = grain_report,
    .teardown = grain_teardown,
};

int wb_cmd_grain(int argc, char **argv) {
  grain_cmd c;
  memset(&c, 0, sizeof c);
  c.work_ms = 50;
  return wb_drive(&grain_command, &c, argc, argv);
}
