/*
 * This file contains `weft-bench sleep`: N jobs that each sleep, on one of
 * four backends, measuring the wall time, the process's OS threads 250 ms
 * into the run and its peak RSS. It is the embroidery experiment's unit of
 * measurement, and what `embroidery` re-runs in child processes.
 *
 *   weft     a WEFT_BLOCKING weft_pmap; each element calls weft_sleep_ns, which
 *            parks a fiber (or, on the fallback path, sleeps its OS thread)
 *   omp      #pragma omp parallel for schedule(dynamic,1) with nanosleep: what
 *            a C programmer writes without weft
 *   threads  one pthread per job, default attributes: the naive version, which
 *            runs into the system's thread limits and must say so, not crash
 *   seq      one job after another, the baseline
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
#include <stdlib.h>
#include <string.h>

#include "weft.h"

#define MAX_JOBS     10000000      /* a pthread_t or fiber each: keep the bookkeeping sane */
#define MAX_SLEEP_MS (3600 * 1000) /* an hour */
#define MAX_REPEAT   1000

static const char *const backends[] = {"weft", "omp", "threads", "seq"};
#define NBACKENDS (sizeof backends / sizeof backends[0])

static const char sleep_help[] =
    "usage: weft-bench sleep [--backend B[,B...]] [--jobs N | --per-core K] [--sleep-ms MS]\n"
    "                        [--repeat R] [--sample-ms T] [--json]\n"
    "\n"
    "Run N jobs that each sleep MS milliseconds and measure the wall time, the\n"
    "process's OS threads T ms into the run (/proc/self/task, counted by a helper\n"
    "thread that leaves itself out) and the peak RSS (VmHWM).\n"
    "\n"
    "  --backend B     weft     a WEFT_BLOCKING weft_pmap; each job calls weft_sleep_ns\n"
    "                  omp      #pragma omp parallel for schedule(dynamic,1) + nanosleep\n"
    "                  threads  one pthread per job (fails cleanly at the thread limit)\n"
    "                  seq      one job after another\n"
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
    "Human output follows the embroidery write-up: Platform threads: N and\n"
    "\"Elapsed time: X msecs\". Exit codes: 0 ok, 1 a run failed, 2 usage,\n"
    "3 a backend this build lacks.\n";

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
  int64_t created;   /* threads backend: threads created before a failure */
  char error[256];   /* what failed, for the report */
  double elapsed_ms; /* wall time of the whole run */
  int threads;       /* OS threads at the sample, the sampler left out */
  double threads_at_ms;
  int64_t rss_kb;
} sleep_result;

static int weft_job(void *ctx, size_t i) {
  (void)i;
  return weft_sleep_ns(*(const int64_t *)ctx);
}

static void run_weft(int64_t jobs, int64_t ns, sleep_result *res) {
  weft_pmap_opts o = WEFT_PMAP_OPTS_INIT;
  o.kind = WEFT_BLOCKING;
  res->rc = weft_pmap((size_t)jobs, weft_job, &ns, &o);
  if (res->rc != 0) snprintf(res->error, sizeof res->error, "weft_pmap failed: %s", weft_strerror(res->rc));
}

static void run_omp(int64_t jobs, int64_t ns, sleep_result *res) {
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < jobs; i++) wb_sleep_ns(ns);
  res->rc = 0;
#else
  (void)jobs;
  (void)ns;
  res->rc = -ENOSYS;
  snprintf(res->error, sizeof res->error, "backend omp: this weft-bench was built without OpenMP");
#endif
}

static void *thread_job(void *arg) {
  wb_sleep_ns(*(const int64_t *)arg);
  return NULL;
}

static void run_threads(int64_t jobs, int64_t ns, sleep_result *res) {
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
    rc = pthread_create(&tids[n], NULL, thread_job, &ns);
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

static void run_seq(int64_t jobs, int64_t ns, sleep_result *res) {
  for (int64_t i = 0; i < jobs; i++) wb_sleep_ns(ns);
  res->rc = 0;
}

static void measure(const char *backend, int64_t jobs, int64_t sleep_ms, int64_t sample_ms,
                    sleep_result *res) {
  memset(res, 0, sizeof *res);
  res->threads = -1;
  int64_t ns = sleep_ms * 1000000;
  wb_sampler *sampler = NULL;
  int src = wb_sampler_start(&sampler, sample_ms);
  int64_t t0 = wb_now_ns();
  if (strcmp(backend, "weft") == 0)
    run_weft(jobs, ns, res);
  else if (strcmp(backend, "omp") == 0)
    run_omp(jobs, ns, res);
  else if (strcmp(backend, "threads") == 0)
    run_threads(jobs, ns, res);
  else
    run_seq(jobs, ns, res);
  int64_t t1 = wb_now_ns();
  if (src == 0) wb_sampler_stop(sampler, &res->threads, &res->threads_at_ms);
  res->elapsed_ms = (double)(t1 - t0) / 1e6;
  res->rss_kb = wb_peak_rss_kb();
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
      if (push_sample(&run->elapsed_ms, run->n, num_or_nan(rec, "elapsed_ms")) < 0 ||
          push_sample(&run->threads, run->n, num_or_nan(rec, "os_threads")) < 0 ||
          push_sample(&run->rss_kb, run->n, num_or_nan(rec, "peak_rss_kb")) < 0) {
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
  wb_summary th = wb_summarize(run->threads, run->n), rss = wb_summarize(run->rss_kb, run->n);
  int rc = wb_add_timing(rec, run->elapsed_ms, run->n);
  if (rc == 0) rc = json_set_num(rec, "os_threads", th.median);
  if (rc == 0) rc = json_set_nums(rec, "os_threads_samples", run->threads, run->n);
  if (rc == 0) rc = json_set_num(rec, "peak_rss_kb", rss.median);
  if (rc == 0) rc = json_set_nums(rec, "peak_rss_kb_samples", run->rss_kb, run->n);
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
  free(run->threads);
  free(run->rss_kb);
  run->rec = NULL;
  run->elapsed_ms = run->threads = run->rss_kb = NULL;
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
}

static void print_human_runs(wb_sleep_run *runs, size_t nruns) {
  printf("%-8s %9s %9s %12s %12s %12s %10s %12s\n", "backend", "jobs", "sleep_ms", "min ms", "median ms",
         "max ms", "threads", "peak RSS KiB");
  for (size_t i = 0; i < nruns; i++) {
    wb_sleep_run *r = &runs[i];
    if (r->n == 0) {
      printf("%-8s %9lld %9lld  failed: %s\n", r->backend, (long long)r->jobs, (long long)r->sleep_ms,
             r->error);
      continue;
    }
    wb_summary e = wb_summarize(r->elapsed_ms, r->n), t = wb_summarize(r->threads, r->n),
               m = wb_summarize(r->rss_kb, r->n);
    printf("%-8s %9lld %9lld %12.3f %12.3f %12.3f %10.0f %12.0f%s%s\n", r->backend, (long long)r->jobs,
           (long long)r->sleep_ms, e.min, e.median, e.max, t.median, m.median, r->failed ? "  FAILED: " : "",
           r->failed ? r->error : "");
  }
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
      return wb_usage_error("sleep", "--backend: unknown backend '%.*s' (weft, omp, threads, seq)", (int)len,
                            p);
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

  wb_sleep_run runs[NBACKENDS];
  memset(runs, 0, sizeof runs);
  for (size_t j = 0; j < nchosen; j++) {
    runs[j].backend = runs[j].label = chosen[j];
    runs[j].jobs = jobs;
    runs[j].sleep_ms = sleep_ms;
  }
  int rc = wb_sleep_children(runs, nchosen, repeat, sample_ms);
  if (rc < 0) {
    fprintf(stderr, "weft-bench sleep: %s\n", strerror(-rc));
    exit_code = WB_EXIT_FAIL;
  }
  if (!json) print_human_runs(runs, nchosen);
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
