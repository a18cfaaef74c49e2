/*
 * This file contains the sleep measurement (sleep.h): N jobs that each
 * sleep, on one of five backends, measuring the wall time, the process's OS
 * threads a while into the run, its peak RSS, the most jobs in flight at
 * once, and the CPU time and minor page faults the run cost. It is the
 * embroidery experiment's unit of measurement.
 *
 *   weft     a WEFT_BLOCKING weft_pmap; each element calls weft_sleep_ns, which
 *            parks a fiber (or, on the fallback path, sleeps its OS thread)
 *   omp      #pragma omp parallel for schedule(dynamic,1) with nanosleep: what
 *            a C programmer writes without weft
 *   threads  one pthread per job, default attributes: the naive version, which
 *            runs into the system's thread limits and must say so, not crash
 *   seq      one job after another, the baseline
 *   go       N goroutines that each time.Sleep (benchmarks/go, weft-go-sleep):
 *            what Go's M:N scheduler does with the same jobs. Run as a child
 *            program, which measures itself; skipped when there is no Go
 *
 * Every job counts itself in and out of an atomic counter around its sleep,
 * and the largest value is kept: with N jobs of one sleep each, it says how
 * many a backend really had sleeping at once (N on fibers, the team size on
 * OpenMP), whatever the wall time suggests.
 *
 * A measurement runs in this process (wb_sleep_here) or in a child process
 * that is this program again (wb_sleep_child), because threads and peak RSS
 * outlive a run: the OpenMP pool and weft's carriers stay, and VmHWM never
 * goes down.
 */
#define _POSIX_C_SOURCE 200809L
#include "sleep.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "weft.h"

const wb_metric wb_sleep_metrics[WB_SLEEP_NMETRICS] = {
    {"os_threads", WB_METRIC_SAMPLES, 0},     {"peak_rss_kb", WB_METRIC_SAMPLES, 0},
    {"in_flight_peak", WB_METRIC_SAMPLES, 0}, {"cpu_user_s", WB_METRIC_SAMPLES, 1e-6},
    {"cpu_sys_s", WB_METRIC_SAMPLES, 1e-6},   {"minflt", WB_METRIC_SAMPLES, 0},
};

/* ------------------------------------------------------------------------ */
/* The backends                                                              */
/* ------------------------------------------------------------------------ */

/* What every job of a run shares: its sleep, and the count of jobs in flight. */
typedef struct sleep_jobs {
  int64_t ns;
  atomic_llong in_flight; /* jobs inside their sleep now */
  atomic_llong peak;      /* the largest in_flight seen; read after every job has returned */
} sleep_jobs;

/*
 * Count a job in, and raise the peak if it is a new one. Relaxed is enough:
 * both are single counters read after the backend has joined every job, and
 * the join orders them before the read.
 */
static void job_enter(sleep_jobs *j) {
  long long n = atomic_fetch_add_explicit(&j->in_flight, 1, memory_order_relaxed) + 1;
  long long p = atomic_load_explicit(&j->peak, memory_order_relaxed);
  while (n > p && !atomic_compare_exchange_weak_explicit(&j->peak, &p, n, memory_order_relaxed,
                                                         memory_order_relaxed)) {
  }
}

static void job_leave(sleep_jobs *j) { atomic_fetch_sub_explicit(&j->in_flight, 1, memory_order_relaxed); }

/* One job on the OS thread that runs it (omp, threads, seq). */
static void thread_sleep(sleep_jobs *j) {
  job_enter(j);
  wb_sleep_ns(j->ns);
  job_leave(j);
}

static int weft_job(void *ctx, size_t i) {
  (void)i;
  sleep_jobs *j = ctx;
  job_enter(j);
  int rc = weft_sleep_ns(j->ns);
  job_leave(j);
  return rc;
}

static int run_weft(int64_t jobs, sleep_jobs *j, wb_sample *s, wb_sleep_extra *x) {
  (void)x;
  weft_pmap_opts o = WEFT_PMAP_OPTS_INIT;
  o.kind = WEFT_BLOCKING;
  int rc = weft_pmap((size_t)jobs, weft_job, j, &o);
  if (rc != 0) snprintf(s->error, sizeof s->error, "weft_pmap failed: %s", weft_strerror(rc));
  return rc;
}

static int run_omp(int64_t jobs, sleep_jobs *j, wb_sample *s, wb_sleep_extra *x) {
  (void)x;
#ifdef _OPENMP
  (void)s;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < jobs; i++) thread_sleep(j);
  return 0;
#else
  (void)jobs;
  (void)j;
  return wb_fail(s, -ENOSYS, "this weft-bench was built without OpenMP");
#endif
}

static void *thread_job(void *arg) {
  thread_sleep(arg);
  return NULL;
}

static int run_threads(int64_t jobs, sleep_jobs *j, wb_sample *s, wb_sleep_extra *x) {
  pthread_t *tids = malloc((size_t)jobs * sizeof *tids);
  if (!tids) return wb_fail(s, -ENOMEM, "no memory for %lld thread ids", (long long)jobs);
  int64_t n = 0;
  int rc = 0;
  /* Default attributes on purpose: this is the version people write first. */
  for (; n < jobs; n++) {
    rc = pthread_create(&tids[n], NULL, thread_job, j);
    if (rc != 0) break;
  }
  for (int64_t i = 0; i < n; i++) pthread_join(tids[i], NULL);
  free(tids);
  x->created = n;
  if (rc != 0)
    snprintf(s->error, sizeof s->error, "pthread_create failed after %lld of %lld threads: %s", (long long)n,
             (long long)jobs, strerror(rc));
  return -rc;
}

static int run_seq(int64_t jobs, sleep_jobs *j, wb_sample *s, wb_sleep_extra *x) {
  (void)s;
  (void)x;
  for (int64_t i = 0; i < jobs; i++) thread_sleep(j);
  return 0;
}

static double num_or_nan(const json_t *rec, const char *key) {
  double v;
  return wb_json_get_num(rec, key, &v) ? v : NAN;
}

/* A record's figures into a sample (NaN where it has none). */
static void figures_of(const json_t *rec, wb_sample *s) {
  s->ms = num_or_nan(rec, "elapsed_ms");
  for (size_t m = 0; m < WB_SLEEP_NMETRICS; m++) s->m[m] = num_or_nan(rec, wb_sleep_metrics[m].key);
}

/*
 * The go backend: weft-go-sleep, a program of its own, measures itself the
 * way wb_sleep_here does (docs/weft-bench.md) and prints one record, read
 * back here. Its threads and memory are its own; this process only waits.
 */
static int run_go(const wb_sleep_job *j, wb_sample *s, wb_sleep_extra *x) {
  char path[4096];
  if (wb_go_find("weft-go-sleep", path, sizeof path, s->error, sizeof s->error) < 0) return WB_SKIP;
  char jobs_s[24], sleep_s[24], sample_s[24];
  snprintf(jobs_s, sizeof jobs_s, "%lld", (long long)j->jobs);
  snprintf(sleep_s, sizeof sleep_s, "%lld", (long long)j->sleep_ms);
  snprintf(sample_s, sizeof sample_s, "%lld", (long long)j->sample_ms);
  char *argv[] = {path, "-jobs", jobs_s, "-sleep-ms", sleep_s, "-sample-ms", sample_s, NULL};
  json_t *rec = NULL;
  int code;
  int rc = wb_run_json(path, argv, NULL, &rec, &code);
  const char *status = wb_json_get_str(rec, "status");
  double ms;
  if (rc < 0 || code != 0 || !status || strcmp(status, "ok") != 0 ||
      !wb_json_get_num(rec, "elapsed_ms", &ms)) {
    json_decref(rec);
    return wb_fail(s, rc < 0 ? rc : -EIO, "%.180s failed (exit code %d)", path, code);
  }
  figures_of(rec, s);
  x->threads_at_ms = num_or_nan(rec, "os_threads_at_ms");
  const char *v = wb_json_get_str(rec, "go_version");
  snprintf(x->go_version, sizeof x->go_version, "%s", v ? v : "unknown");
  double gmp;
  x->gomaxprocs = wb_json_get_num(rec, "gomaxprocs", &gmp) ? (int64_t)gmp : -1;
  json_decref(rec);
  return 0;
}

int wb_sleep_here(const wb_sleep_job *j, wb_sample *s, wb_sleep_extra *x) {
  memset(x, 0, sizeof *x);
  x->gomaxprocs = -1;
  if (strcmp(j->backend, "go") == 0) return run_go(j, s, x);
  static const struct {
    const char *name;
    int (*run)(int64_t, sleep_jobs *, wb_sample *, wb_sleep_extra *);
  } backends[] = {{"weft", run_weft}, {"omp", run_omp}, {"threads", run_threads}, {"seq", run_seq}};
  int (*run)(int64_t, sleep_jobs *, wb_sample *, wb_sleep_extra *) = NULL;
  for (size_t b = 0; b < sizeof backends / sizeof backends[0]; b++)
    if (strcmp(j->backend, backends[b].name) == 0) run = backends[b].run;
  if (!run) return wb_fail(s, -EINVAL, "no backend %s", j->backend);

  sleep_jobs sj = {.ns = j->sleep_ms * 1000000};
  atomic_init(&sj.in_flight, 0);
  atomic_init(&sj.peak, 0);
  wb_sampler *sampler = NULL;
  int src = wb_sampler_start(&sampler, j->sample_ms);
  wb_usage u0 = wb_usage_now();
  int64_t t0 = wb_now_ns();
  int rc = run(j->jobs, &sj, s, x);
  int64_t t1 = wb_now_ns();
  int threads = -1;
  x->threads_at_ms = 0;
  if (src == 0) wb_sampler_stop(sampler, &threads, &x->threads_at_ms);
  /* After the sampler's join: its few microseconds belong to the run it watched. */
  wb_usage u = wb_usage_since(wb_usage_now(), u0);
  int64_t rss = wb_peak_rss_kb();
  s->ms = (double)(t1 - t0) / 1e6;
  s->m[WB_M_THREADS] = threads >= 0 ? threads : NAN;
  s->m[WB_M_RSS] = rss >= 0 ? (double)rss : NAN;
  s->m[WB_M_IN_FLIGHT] = (double)atomic_load(&sj.peak);
  s->m[WB_M_CPU_USER] = u.user_s;
  s->m[WB_M_CPU_SYS] = u.sys_s;
  s->m[WB_M_MINFLT] = (double)u.minflt;
  /* A backend that failed part way (pthread_create at the thread limit) still ran what it could: figures
   * count. */
  if (rc != 0) s->failed = true;
  return 0;
}

int wb_sleep_extra_record(const wb_sleep_job *j, const wb_sleep_extra *x, json_t *rec) {
  int rc = 0;
  if (strcmp(j->backend, "threads") == 0) rc = wb_json_set_int(rec, "threads_created", x->created);
  if (rc == 0) rc = wb_json_set_num(rec, "os_threads_at_ms", wb_round_ms(x->threads_at_ms));
  if (rc == 0 && x->go_version[0]) rc = wb_json_set_str(rec, "go_version", x->go_version);
  if (rc == 0 && x->go_version[0]) rc = wb_json_set_int(rec, "gomaxprocs", x->gomaxprocs);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* In a child process                                                        */
/* ------------------------------------------------------------------------ */

void wb_sleep_child_args(const wb_sleep_job *j, wb_args *a) {
  wb_args_add(a, "sleep");
  wb_args_add(a, "--backend");
  wb_args_add(a, j->backend);
  wb_args_int(a, "--jobs", j->jobs);
  wb_args_int(a, "--sleep-ms", j->sleep_ms);
  wb_args_int(a, "--sample-ms", j->sample_ms);
}

int wb_sleep_child(const wb_sleep_job *j, wb_sample *s) {
  if (strcmp(j->backend, "go") == 0) {
    /* Without a Go baseline the go runs drop out; every other one runs as usual. */
    char path[4096];
    if (wb_go_find("weft-go-sleep", path, sizeof path, s->error, sizeof s->error) < 0) return WB_SKIP;
  }
  wb_args a = {0};
  wb_sleep_child_args(j, &a);
  wb_args_add(&a, "--json");
  if (a.err) {
    wb_args_free(&a);
    return wb_fail(s, -ENOMEM, "out of memory");
  }
  json_t *rec = NULL;
  int code;
  int rc = wb_child_run(a.v, j->set, &rec, &code);
  wb_args_free(&a);
  /* The child has said what went wrong on its stderr, which is ours. */
  s->quiet = true;
  if (rc == -ECHILD) return wb_fail(s, rc, "the child run failed (exit code %d)", code);
  if (rc < 0) return wb_fail(s, rc, "cannot run a child: %s", strerror(-rc));
  const char *status = wb_json_get_str(rec, "status");
  if (code != 0 || !status || strcmp(status, "ok") != 0) {
    const char *e = wb_json_get_str(rec, "error");
    s->failed = true;
    snprintf(s->error, sizeof s->error, "%s", e ? e : "the child run failed");
  }
  figures_of(rec, s);
  s->rec = rec;
  return 0;
}
