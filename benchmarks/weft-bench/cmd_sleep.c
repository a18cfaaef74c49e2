/*
 * This file contains `weft-bench sleep`: N jobs that each sleep, on one of
 * five backends, measuring the wall time, the process's OS threads 250 ms
 * into the run, its peak RSS, the most jobs in flight at once, and the CPU
 * time and minor page faults the run cost. It is the embroidery
 * experiment's unit of measurement, and what `embroidery` re-runs in child
 * processes.
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
 * One measurement runs in this process. Several (more than one backend, or
 * --repeat) run each in a child process, because threads and peak RSS
 * outlive a run: the OpenMP pool and weft's carriers stay, and VmHWM never
 * goes down.
 */
#define _POSIX_C_SOURCE 200809L
#include "bench.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "weft.h"

#define MAX_JOBS     10000000      /* a pthread_t or fiber each: keep the bookkeeping sane */
#define MAX_SLEEP_MS (3600 * 1000) /* an hour */
#define MAX_REPEAT   1000

static const char *const backends[] = {"weft", "omp", "threads", "seq", "go"};
#define NBACKENDS (sizeof backends / sizeof backends[0])

static const char sleep_help[] =
    "usage: weft-bench sleep [--backend B[,B...]] [--jobs N | --per-core K] [--sleep-ms MS]\n"
    "                        [--repeat R] [--sample-ms T] [--json]\n"
    "\n"
    "Run N jobs that each sleep MS milliseconds and measure the wall time, the\n"
    "process's OS threads T ms into the run (/proc/self/task, counted by a helper\n"
    "thread that leaves itself out), the peak RSS (VmHWM), the most jobs in their\n"
    "sleep at once (in_flight_peak), and the process's user and system CPU time and\n"
    "minor page faults over the run (getrusage).\n"
    "\n"
    "  --backend B     weft     a WEFT_BLOCKING weft_pmap; each job calls weft_sleep_ns\n"
    "                  omp      #pragma omp parallel for schedule(dynamic,1) + nanosleep\n"
    "                  threads  one pthread per job (fails cleanly at the thread limit)\n"
    "                  seq      one job after another\n"
    "                  go       N goroutines that each time.Sleep (the Go baseline\n"
    "                           weft-go-sleep, a program of its own; skipped with a\n"
    "                           message when this build has no Go)\n"
    "                  A comma-separated list runs each; default: weft\n"
    "  --jobs N        number of jobs (default: the number of cores)\n"
    "  --per-core K    N = K x cores (cores = CPUs in the affinity mask)\n"
    "  --sleep-ms MS   each job's sleep (default 1000)\n"
    "  --repeat R      R repetitions: min, median and max are reported; backends are\n"
    "                  interleaved between repetitions (default 1)\n"
    "  --sample-ms T   when to count the OS threads (default: 250, or half of MS\n"
    "                  when that is shorter, so that the jobs are still running)\n"
    "  --json          one JSON object per measurement (JSON Lines) on stdout\n"
    "  --help          this text\n"
    "\n"
    "With one backend and one repetition the run happens in this process;\n"
    "otherwise every repetition of every backend runs in a fresh child process\n"
    "(this program re-run with --json), so that threads and RSS are its own.\n"
    "The go backend's figures are its program's own (its threads, its RSS).\n"
    "$WEFT_BENCH_GO_DIR names the folder of the Go baselines (default: this build's).\n"
    "Human output follows the embroidery write-up: Platform threads: N and\n"
    "\"Elapsed time: X msecs\". Exit codes: 0 ok (also when go is skipped), 1 a run\n"
    "failed, 2 usage, 3 a backend this build lacks.\n";

enum { OPT_HELP = 1, OPT_BACKEND, OPT_JOBS, OPT_PER_CORE, OPT_SLEEP_MS, OPT_REPEAT, OPT_SAMPLE_MS, OPT_JSON };

static const wb_opt sleep_opts[] = {
    {"help", false, OPT_HELP},          {"backend", true, OPT_BACKEND},   {"jobs", true, OPT_JOBS},
    {"per-core", true, OPT_PER_CORE},   {"sleep-ms", true, OPT_SLEEP_MS}, {"repeat", true, OPT_REPEAT},
    {"sample-ms", true, OPT_SAMPLE_MS}, {"json", false, OPT_JSON},        {NULL, false, 0},
};

/* ------------------------------------------------------------------------ */
/* The backends                                                              */
/* ------------------------------------------------------------------------ */

typedef struct sleep_result {
  int rc;            /* 0, or a negative errno / weft error */
  bool skipped;      /* go: no Go baseline; why in error */
  int64_t created;   /* threads backend: threads created before a failure */
  char error[256];   /* what failed, for the report */
  double elapsed_ms; /* wall time of the whole run */
  int threads;       /* OS threads at the sample, the sampler left out */
  double threads_at_ms;
  int64_t rss_kb;
  int64_t in_flight_peak; /* the most jobs inside their sleep at once */
  wb_usage usage;         /* CPU time and minor faults of the run */
  char go_version[64];    /* go: the runtime that ran it ("" otherwise) */
  int64_t gomaxprocs;     /* go: its GOMAXPROCS */
} sleep_result;

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

static void run_weft(int64_t jobs, sleep_jobs *j, sleep_result *res) {
  weft_pmap_opts o = WEFT_PMAP_OPTS_INIT;
  o.kind = WEFT_BLOCKING;
  res->rc = weft_pmap((size_t)jobs, weft_job, j, &o);
  if (res->rc != 0) snprintf(res->error, sizeof res->error, "weft_pmap failed: %s", weft_strerror(res->rc));
}

static void run_omp(int64_t jobs, sleep_jobs *j, sleep_result *res) {
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < jobs; i++) thread_sleep(j);
  res->rc = 0;
#else
  (void)jobs;
  (void)j;
  res->rc = -ENOSYS;
  snprintf(res->error, sizeof res->error, "backend omp: this weft-bench was built without OpenMP");
#endif
}

static void *thread_job(void *arg) {
  thread_sleep(arg);
  return NULL;
}

static void run_threads(int64_t jobs, sleep_jobs *j, sleep_result *res) {
  pthread_t *tids = malloc((size_t)jobs * sizeof *tids);
  if (!tids) {
    res->rc = -ENOMEM;
    snprintf(res->error, sizeof res->error, "no memory for %lld thread ids", (long long)jobs);
    return;
  }
  int64_t n = 0;
  int rc = 0;
  /* Default attributes on purpose: this is the version people write first. */
  for (; n < jobs; n++) {
    rc = pthread_create(&tids[n], NULL, thread_job, j);
    if (rc != 0) break;
  }
  for (int64_t i = 0; i < n; i++) pthread_join(tids[i], NULL);
  free(tids);
  res->created = n;
  res->rc = -rc;
  if (rc != 0)
    snprintf(res->error, sizeof res->error, "pthread_create failed after %lld of %lld threads: %s",
             (long long)n, (long long)jobs, strerror(rc));
}

static void run_seq(int64_t jobs, sleep_jobs *j, sleep_result *res) {
  for (int64_t i = 0; i < jobs; i++) thread_sleep(j);
  res->rc = 0;
}

static int64_t get_int(const json_value *rec, const char *key, int64_t dflt) {
  double v;
  return json_get_num(rec, key, &v) ? (int64_t)v : dflt;
}

/*
 * The go backend: weft-go-sleep, a program of its own, measures itself the
 * way measure() does (docs/weft-bench.md) and prints one record, read back
 * here. Its threads and memory are its own; this process only waits.
 */
static void run_go(int64_t jobs, int64_t sleep_ms, int64_t sample_ms, sleep_result *res) {
  char path[4096];
  if (wb_go_find("weft-go-sleep", path, sizeof path, res->error, sizeof res->error) < 0) {
    res->skipped = true;
    return;
  }
  char jobs_s[24], sleep_s[24], sample_s[24];
  snprintf(jobs_s, sizeof jobs_s, "%lld", (long long)jobs);
  snprintf(sleep_s, sizeof sleep_s, "%lld", (long long)sleep_ms);
  snprintf(sample_s, sizeof sample_s, "%lld", (long long)sample_ms);
  char *argv[] = {path, "-jobs", jobs_s, "-sleep-ms", sleep_s, "-sample-ms", sample_s, NULL};
  json_value *rec = NULL;
  int code;
  int rc = wb_run_json(path, argv, NULL, &rec, &code);
  const char *status = rec ? json_get_str(rec, "status") : NULL;
  double ms;
  if (rc < 0 || code != 0 || !status || strcmp(status, "ok") != 0 || !json_get_num(rec, "elapsed_ms", &ms)) {
    res->rc = rc < 0 ? rc : -EIO;
    snprintf(res->error, sizeof res->error, "%.180s failed (exit code %d)", path, code);
    json_free(rec);
    return;
  }
  res->elapsed_ms = ms;
  res->threads = (int)get_int(rec, "os_threads", -1);
  json_get_num(rec, "os_threads_at_ms", &res->threads_at_ms);
  res->rss_kb = get_int(rec, "peak_rss_kb", -1);
  res->in_flight_peak = get_int(rec, "in_flight_peak", 0);
  json_get_num(rec, "cpu_user_s", &res->usage.user_s);
  json_get_num(rec, "cpu_sys_s", &res->usage.sys_s);
  res->usage.minflt = get_int(rec, "minflt", 0);
  const char *v = json_get_str(rec, "go_version");
  snprintf(res->go_version, sizeof res->go_version, "%s", v ? v : "unknown");
  res->gomaxprocs = get_int(rec, "gomaxprocs", -1);
  json_free(rec);
}

static void measure(const char *backend, int64_t jobs, int64_t sleep_ms, int64_t sample_ms,
                    sleep_result *res) {
  memset(res, 0, sizeof *res);
  res->threads = -1;
  res->rss_kb = -1;
  res->gomaxprocs = -1;
  if (strcmp(backend, "go") == 0) {
    run_go(jobs, sleep_ms, sample_ms, res);
    return;
  }
  sleep_jobs j = {.ns = sleep_ms * 1000000};
  atomic_init(&j.in_flight, 0);
  atomic_init(&j.peak, 0);
  wb_sampler *sampler = NULL;
  int src = wb_sampler_start(&sampler, sample_ms);
  wb_usage u0 = wb_usage_now();
  int64_t t0 = wb_now_ns();
  if (strcmp(backend, "weft") == 0)
    run_weft(jobs, &j, res);
  else if (strcmp(backend, "omp") == 0)
    run_omp(jobs, &j, res);
  else if (strcmp(backend, "threads") == 0)
    run_threads(jobs, &j, res);
  else
    run_seq(jobs, &j, res);
  int64_t t1 = wb_now_ns();
  if (src == 0) wb_sampler_stop(sampler, &res->threads, &res->threads_at_ms);
  /* After the sampler's join: its few microseconds belong to the run it watched. */
  res->usage = wb_usage_since(wb_usage_now(), u0);
  res->elapsed_ms = (double)(t1 - t0) / 1e6;
  res->rss_kb = wb_peak_rss_kb();
  res->in_flight_peak = atomic_load(&j.peak);
}

/* ------------------------------------------------------------------------ */
/* Records                                                                   */
/* ------------------------------------------------------------------------ */

/* The command line that repeats this run; sample_ms < 0 leaves --sample-ms to its default. */
static char *canonical_command(const char *backend_list, int64_t jobs, int64_t sleep_ms, int64_t repeat,
                               int64_t sample_ms, bool json, char *const *env) {
  char jobs_s[24], sleep_s[24], repeat_s[24], sample_s[24];
  snprintf(jobs_s, sizeof jobs_s, "%lld", (long long)jobs);
  snprintf(sleep_s, sizeof sleep_s, "%lld", (long long)sleep_ms);
  snprintf(repeat_s, sizeof repeat_s, "%lld", (long long)repeat);
  snprintf(sample_s, sizeof sample_s, "%lld", (long long)sample_ms);
  char *args[14];
  size_t n = 0;
  args[n++] = "sleep";
  args[n++] = "--backend";
  args[n++] = (char *)backend_list;
  args[n++] = "--jobs";
  args[n++] = jobs_s;
  args[n++] = "--sleep-ms";
  args[n++] = sleep_s;
  if (repeat != 1) {
    args[n++] = "--repeat";
    args[n++] = repeat_s;
  }
  if (sample_ms >= 0) {
    args[n++] = "--sample-ms";
    args[n++] = sample_s;
  }
  if (json) args[n++] = "--json";
  char *cmd = NULL;
  if (wb_command_line(args, n, env, &cmd) < 0) return NULL;
  return cmd;
}

static json_value *one_record(const char *backend, int64_t jobs, int64_t sleep_ms, int64_t per_core,
                              const sleep_result *res, const char *command) {
  json_value *rec = json_new_object();
  if (!rec) return NULL;
  double sample = res->elapsed_ms;
  int rc = json_set_int(rec, "schema", WB_SCHEMA);
  if (rc == 0) rc = json_set_str(rec, "bench", "sleep");
  if (rc == 0) rc = json_set_str(rec, "backend", backend);
  if (rc == 0) rc = json_set_int(rec, "jobs", jobs);
  if (rc == 0) rc = json_set_int(rec, "sleep_ms", sleep_ms);
  if (rc == 0) rc = per_core ? json_set_int(rec, "per_core", per_core) : json_set_null(rec, "per_core");
  if (rc == 0) rc = json_set_str(rec, "status", res->rc == 0 ? "ok" : "failed");
  if (rc == 0 && res->rc != 0) rc = json_set_str(rec, "error", res->error);
  if (rc == 0 && strcmp(backend, "threads") == 0) rc = json_set_int(rec, "threads_created", res->created);
  if (rc == 0) rc = wb_add_timing(rec, &sample, 1);
  if (rc == 0)
    rc = res->threads >= 0 ? json_set_int(rec, "os_threads", res->threads) : json_set_null(rec, "os_threads");
  if (rc == 0) rc = json_set_num(rec, "os_threads_at_ms", wb_round_ms(res->threads_at_ms));
  if (rc == 0)
    rc = res->rss_kb >= 0 ? json_set_int(rec, "peak_rss_kb", res->rss_kb) : json_set_null(rec, "peak_rss_kb");
  if (rc == 0) rc = json_set_int(rec, "in_flight_peak", res->in_flight_peak);
  if (rc == 0) rc = json_set_num(rec, "cpu_user_s", round(res->usage.user_s * 1e6) / 1e6);
  if (rc == 0) rc = json_set_num(rec, "cpu_sys_s", round(res->usage.sys_s * 1e6) / 1e6);
  if (rc == 0) rc = json_set_int(rec, "minflt", res->usage.minflt);
  if (rc == 0 && res->go_version[0]) rc = json_set_str(rec, "go_version", res->go_version);
  if (rc == 0 && res->go_version[0]) rc = json_set_int(rec, "gomaxprocs", res->gomaxprocs);
  if (rc == 0) rc = wb_meta_add(rec);
  if (rc == 0) rc = json_set_str(rec, "command", command);
  if (rc < 0) {
    json_free(rec);
    return NULL;
  }
  return rec;
}

/* ------------------------------------------------------------------------ */
/* Child runs                                                                */
/* ------------------------------------------------------------------------ */

const char *const wb_sleep_metric_keys[WB_NMETRICS] = {"os_threads", "peak_rss_kb", "in_flight_peak",
                                                       "cpu_user_s", "cpu_sys_s",   "minflt"};

static int push_sample(double **arr, size_t n, double v) {
  double *p = realloc(*arr, (n + 1) * sizeof *p);
  if (!p) return -ENOMEM;
  p[n] = v;
  *arr = p;
  return 0;
}

static double num_or_nan(const json_value *rec, const char *key) {
  double v;
  return json_get_num(rec, key, &v) ? v : NAN;
}

int wb_sleep_children(wb_sleep_run *runs, size_t nruns, int64_t repeat, int64_t sample_ms) {
  size_t total = (size_t)repeat * nruns, done = 0;
  for (int64_t r = 0; r < repeat; r++) {
    for (size_t k = 0; k < nruns; k++) {
      wb_sleep_run *run = &runs[wb_interleave((size_t)r, k, nruns)];
      char jobs_s[24], sleep_s[24], sample_s[24];
      snprintf(jobs_s, sizeof jobs_s, "%lld", (long long)run->jobs);
      snprintf(sleep_s, sizeof sleep_s, "%lld", (long long)run->sleep_ms);
      snprintf(sample_s, sizeof sample_s, "%lld", (long long)sample_ms);
      char *args[] = {"sleep",      "--backend", (char *)run->backend, "--jobs", jobs_s,
                      "--sleep-ms", sleep_s,     "--sample-ms",        sample_s, "--json",
                      NULL};
      wb_progress(true, "[%zu/%zu] %s: %lld jobs x %lld ms (repetition %lld of %lld)", done + 1, total,
                  run->label, (long long)run->jobs, (long long)run->sleep_ms, (long long)r + 1,
                  (long long)repeat);
      json_value *rec = NULL;
      int code;
      int rc = wb_child_run(args, run->set, &rec, &code);
      done++;
      if (rc == -ECHILD) {
        run->failed = true;
        if (!run->error[0])
          snprintf(run->error, sizeof run->error, "the child run failed (exit code %d)", code);
        continue;
      }
      if (rc < 0) return rc;
      const char *status = json_get_str(rec, "status");
      if (code != 0 || !status || strcmp(status, "ok") != 0) {
        run->failed = true;
        const char *e = json_get_str(rec, "error");
        if (!run->error[0]) snprintf(run->error, sizeof run->error, "%s", e ? e : "the child run failed");
      }
      int prc = push_sample(&run->elapsed_ms, run->n, num_or_nan(rec, "elapsed_ms"));
      for (int m = 0; m < WB_NMETRICS && prc == 0; m++)
        prc = push_sample(&run->m[m], run->n, num_or_nan(rec, wb_sleep_metric_keys[m]));
      if (prc < 0) {
        json_free(rec);
        return -ENOMEM;
      }
      run->n++;
      if (!run->rec)
        run->rec = rec;
      else
        json_free(rec);
    }
  }
  wb_progress_clear();
  return 0;
}

json_value *wb_sleep_aggregate(wb_sleep_run *run, const char *command) {
  json_value *rec = run->rec;
  if (!rec) return NULL;
  run->rec = NULL;
  int rc = wb_add_timing(rec, run->elapsed_ms, run->n);
  for (int m = 0; m < WB_NMETRICS && rc == 0; m++) {
    char key[64];
    snprintf(key, sizeof key, "%s_samples", wb_sleep_metric_keys[m]);
    rc = json_set_num(rec, wb_sleep_metric_keys[m], wb_summarize(run->m[m], run->n).median);
    if (rc == 0) rc = json_set_nums(rec, key, run->m[m], run->n);
  }
  if (rc == 0) rc = json_set_str(rec, "status", run->failed ? "failed" : "ok");
  if (rc == 0 && run->failed) rc = json_set_str(rec, "error", run->error);
  if (rc == 0) rc = json_set_str(rec, "command", command);
  if (rc < 0) {
    json_free(rec);
    return NULL;
  }
  return rec;
}

void wb_sleep_run_free(wb_sleep_run *run) {
  json_free(run->rec);
  free(run->elapsed_ms);
  run->rec = NULL;
  run->elapsed_ms = NULL;
  for (int m = 0; m < WB_NMETRICS; m++) {
    free(run->m[m]);
    run->m[m] = NULL;
  }
}

/* ------------------------------------------------------------------------ */
/* The command                                                               */
/* ------------------------------------------------------------------------ */

static void print_human_one(const char *backend, int64_t jobs, int64_t sleep_ms, const sleep_result *res) {
  printf("sleep: backend %s, %lld jobs x %lld ms, %u cores\n", backend, (long long)jobs, (long long)sleep_ms,
         wb_cores());
  if (res->threads >= 0)
    printf("Platform threads: %d  (at %.0f ms)\n", res->threads, res->threads_at_ms);
  else
    printf("Platform threads: unknown (/proc/self/task unreadable)\n");
  printf("\"Elapsed time: %.3f msecs\"\n", res->elapsed_ms);
  if (res->rss_kb >= 0) printf("Peak RSS: %lld KiB\n", (long long)res->rss_kb);
  printf("Jobs in flight (peak): %lld\n", (long long)res->in_flight_peak);
  printf("CPU time: user %.3f s, system %.3f s; minor page faults: %lld\n", res->usage.user_s,
         res->usage.sys_s, (long long)res->usage.minflt);
  if (res->go_version[0]) printf("Go: %s, GOMAXPROCS %lld\n", res->go_version, (long long)res->gomaxprocs);
}

static double median_of(const wb_sleep_run *r, int m) { return wb_summarize(r->m[m], r->n).median; }

static void print_human_runs(wb_sleep_run *runs, size_t nruns, const char *go_skipped) {
  printf("%-8s %9s %9s %11s %11s %11s %8s %12s %10s %8s %8s %9s\n", "backend", "jobs", "sleep_ms", "min ms",
         "median ms", "max ms", "threads", "peak RSS KiB", "in flight", "user s", "sys s", "minflt");
  for (size_t i = 0; i < nruns; i++) {
    wb_sleep_run *r = &runs[i];
    if (r->n == 0) {
      printf("%-8s %9lld %9lld  failed: %s\n", r->backend, (long long)r->jobs, (long long)r->sleep_ms,
             r->error);
      continue;
    }
    wb_summary e = wb_summarize(r->elapsed_ms, r->n);
    printf("%-8s %9lld %9lld %11.3f %11.3f %11.3f %8.0f %12.0f %10.0f %8.3f %8.3f %9.0f%s%s\n", r->backend,
           (long long)r->jobs, (long long)r->sleep_ms, e.min, e.median, e.max, median_of(r, WB_M_THREADS),
           median_of(r, WB_M_RSS), median_of(r, WB_M_IN_FLIGHT), median_of(r, WB_M_CPU_USER),
           median_of(r, WB_M_CPU_SYS), median_of(r, WB_M_MINFLT), r->failed ? "  FAILED: " : "",
           r->failed ? r->error : "");
  }
  if (go_skipped) printf("%-8s skipped: %s\n", "go", go_skipped);
  printf("(medians over the repetitions; in flight: the most jobs inside their sleep at once;\n"
         " user, sys: CPU seconds of the run's process; minflt: its minor page faults)\n");
}

int wb_cmd_sleep(int argc, char **argv) {
  const char *backend_list = "weft";
  int64_t jobs = 0, per_core = 0, sleep_ms = 1000, repeat = 1, sample_ms = -1;
  bool json = false;
  wb_optstate st;
  wb_opt_init(&st, argc, argv, "sleep");
  const char *arg;
  int id;
  while ((id = wb_opt_next(&st, sleep_opts, &arg)) != WB_OPT_END) {
    switch (id) {
    case WB_OPT_ERROR:
      return WB_EXIT_USAGE;
    case WB_OPT_POSITIONAL:
      return wb_usage_error("sleep", "unexpected argument '%s'", arg);
    case OPT_HELP:
      fputs(sleep_help, stdout);
      return WB_EXIT_OK;
    case OPT_BACKEND:
      backend_list = arg;
      break;
    case OPT_JOBS:
      if (!wb_parse_i64("sleep", "jobs", arg, 1, MAX_JOBS, &jobs)) return WB_EXIT_USAGE;
      break;
    case OPT_PER_CORE:
      if (!wb_parse_i64("sleep", "per-core", arg, 1, MAX_JOBS, &per_core)) return WB_EXIT_USAGE;
      break;
    case OPT_SLEEP_MS:
      if (!wb_parse_i64("sleep", "sleep-ms", arg, 0, MAX_SLEEP_MS, &sleep_ms)) return WB_EXIT_USAGE;
      break;
    case OPT_REPEAT:
      if (!wb_parse_i64("sleep", "repeat", arg, 1, MAX_REPEAT, &repeat)) return WB_EXIT_USAGE;
      break;
    case OPT_SAMPLE_MS:
      if (!wb_parse_i64("sleep", "sample-ms", arg, 0, MAX_SLEEP_MS, &sample_ms)) return WB_EXIT_USAGE;
      break;
    case OPT_JSON:
      json = true;
      break;
    }
  }
  if (jobs && per_core) return wb_usage_error("sleep", "--jobs and --per-core are exclusive");
  /*
   * 250 ms into the run, as the write-up looked; but a run of short sleeps may
   * be over by then, and a count taken after the jobs have finished says
   * nothing about them. Every job sleeps sleep_ms, so halfway through that
   * the first jobs are still in flight on every backend.
   */
  bool sample_given = sample_ms >= 0;
  if (!sample_given) sample_ms = sleep_ms / 2 < 250 ? sleep_ms / 2 : 250;
  unsigned cores = wb_cores();
  if (per_core) {
    if (per_core > MAX_JOBS / (int64_t)cores)
      return wb_usage_error("sleep", "--per-core %lld x %u cores is over %d jobs", (long long)per_core, cores,
                            MAX_JOBS);
    jobs = per_core * (int64_t)cores;
  }
  if (!jobs) jobs = cores;

  /* The backend list: known names, no repeats. */
  const char *chosen[NBACKENDS];
  size_t nchosen = 0;
  for (const char *p = backend_list;;) {
    size_t len = strcspn(p, ",");
    size_t b = 0;
    while (b < NBACKENDS && !(strlen(backends[b]) == len && strncmp(backends[b], p, len) == 0)) b++;
    if (b == NBACKENDS)
      return wb_usage_error("sleep", "--backend: unknown backend '%.*s' (weft, omp, threads, seq, go)",
                            (int)len, p);
    for (size_t j = 0; j < nchosen; j++)
      if (chosen[j] == backends[b])
        return wb_usage_error("sleep", "--backend: '%s' given twice", backends[b]);
    chosen[nchosen++] = backends[b];
    if (p[len] == '\0') break;
    p += len + 1;
  }
#ifndef _OPENMP
  for (size_t j = 0; j < nchosen; j++) {
    if (strcmp(chosen[j], "omp") == 0) {
      fprintf(stderr,
              "weft-bench sleep: backend omp is not available: this weft-bench was built without OpenMP\n");
      return WB_EXIT_UNAVAILABLE;
    }
  }
#endif

  wb_progress_init(json);
  char *command =
      canonical_command(backend_list, jobs, sleep_ms, repeat, sample_given ? sample_ms : -1, json, NULL);
  if (!command) {
    fprintf(stderr, "weft-bench sleep: out of memory\n");
    return WB_EXIT_FAIL;
  }
  if (!json) fprintf(stderr, "command: %s\n", command);

  int exit_code = WB_EXIT_OK;
  if (nchosen == 1 && repeat == 1) {
    sleep_result res;
    wb_progress(true, "sleep: %s, %lld jobs x %lld ms ...", chosen[0], (long long)jobs, (long long)sleep_ms);
    measure(chosen[0], jobs, sleep_ms, sample_ms, &res);
    wb_progress_clear();
    if (res.skipped) {
      /* Not a failure: a machine without Go still runs every other measurement. */
      fprintf(stderr, "weft-bench sleep: go: skipped: %s\n", res.error);
      free(command);
      return WB_EXIT_OK;
    }
    if (res.rc != 0) {
      fprintf(stderr, "weft-bench sleep: %s\n", res.error);
      exit_code = WB_EXIT_FAIL;
    }
    if (json) {
      json_value *rec = one_record(chosen[0], jobs, sleep_ms, per_core, &res, command);
      if (!rec || json_print_line(rec, stdout) < 0) {
        fprintf(stderr, "weft-bench sleep: cannot write the record\n");
        exit_code = WB_EXIT_FAIL;
      }
      json_free(rec);
    } else if (res.rc == 0) {
      print_human_one(chosen[0], jobs, sleep_ms, &res);
    }
    free(command);
    return exit_code;
  }

  /* Without a Go baseline the go backend drops out before anything runs; the others run as usual. */
  char go_why[256];
  const char *go_skipped = NULL;
  for (size_t j = 0; j < nchosen; j++) {
    char path[4096];
    if (strcmp(chosen[j], "go") != 0 ||
        wb_go_find("weft-go-sleep", path, sizeof path, go_why, sizeof go_why) == 0)
      continue;
    fprintf(stderr, "weft-bench sleep: go: skipped: %s\n", go_why);
    go_skipped = go_why;
    memmove(&chosen[j], &chosen[j + 1], (nchosen - j - 1) * sizeof chosen[0]);
    nchosen--;
    break;
  }

  wb_sleep_run runs[NBACKENDS];
  memset(runs, 0, sizeof runs);
  for (size_t j = 0; j < nchosen; j++) {
    runs[j].backend = runs[j].label = chosen[j];
    runs[j].jobs = jobs;
    runs[j].sleep_ms = sleep_ms;
  }
  int rc = nchosen ? wb_sleep_children(runs, nchosen, repeat, sample_ms) : 0;
  if (rc < 0) {
    fprintf(stderr, "weft-bench sleep: %s\n", strerror(-rc));
    exit_code = WB_EXIT_FAIL;
  }
  if (!json) print_human_runs(runs, nchosen, go_skipped);
  for (size_t j = 0; j < nchosen; j++) {
    if (runs[j].failed || runs[j].n == 0) exit_code = WB_EXIT_FAIL;
    if (!json) continue;
    json_value *rec = wb_sleep_aggregate(&runs[j], command);
    if (rec) {
      if (per_core) json_set_int(rec, "per_core", per_core);
      if (json_print_line(rec, stdout) < 0) exit_code = WB_EXIT_FAIL;
    }
    json_free(rec);
  }
  for (size_t j = 0; j < nchosen; j++) wb_sleep_run_free(&runs[j]);
  free(command);
  return exit_code;
}
