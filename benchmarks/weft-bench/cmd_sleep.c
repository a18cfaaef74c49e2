/*
 * This file contains `weft-bench sleep`: N jobs that each sleep (sleep.c),
 * on one or more backends. With one backend and one repetition the run
 * happens in this process; otherwise every repetition of every backend runs
 * in a fresh child process, because threads and peak RSS outlive a run
 * (the OpenMP pool and weft's carriers stay, and VmHWM never goes down).
 */
#define _POSIX_C_SOURCE 200809L
#include <string.h>

#include "sleep.h"

#define MAX_JOBS     10000000      /* a pthread_t or fiber each: keep the bookkeeping sane */
#define MAX_SLEEP_MS (3600 * 1000) /* an hour */

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

enum { OPT_JOBS = 1, OPT_PER_CORE, OPT_SLEEP_MS, OPT_SAMPLE_MS };

static const wb_opt sleep_opts[] = {
    {"jobs", true, OPT_JOBS},
    {"per-core", true, OPT_PER_CORE},
    {"sleep-ms", true, OPT_SLEEP_MS},
    {"sample-ms", true, OPT_SAMPLE_MS},
    {NULL, false, 0},
};

static const wb_choice sleep_backends[] = {
    {"weft", NULL, NULL, 0},    {"omp", NULL, WB_NEEDS_OPENMP, 0},
    {"threads", NULL, NULL, 0}, {"seq", NULL, NULL, 0},
    {"go", NULL, NULL, 0},
};

typedef struct sleep_cmd {
  int64_t jobs, per_core, sleep_ms, sample_ms;
  bool sample_given;    /* --sample-ms: the command line spells it out */
  bool here;            /* one backend, one repetition: in this process */
  wb_sleep_extra extra; /* the run in this process: its record's other keys */
} sleep_cmd;

static wb_sleep_job job_of(const sleep_cmd *c, const wb_run *r) {
  wb_sleep_job j = {r->name, c->jobs, c->sleep_ms, c->sample_ms, NULL};
  return j;
}

static int sleep_option(wb_driver *d, int id, const char *arg) {
  sleep_cmd *c = d->ctx;
  bool ok = true;
  switch (id) {
  case OPT_JOBS:
    ok = wb_parse_i64("sleep", "jobs", arg, 1, MAX_JOBS, &c->jobs);
    break;
  case OPT_PER_CORE:
    ok = wb_parse_i64("sleep", "per-core", arg, 1, MAX_JOBS, &c->per_core);
    break;
  case OPT_SLEEP_MS:
    ok = wb_parse_i64("sleep", "sleep-ms", arg, 0, MAX_SLEEP_MS, &c->sleep_ms);
    break;
  case OPT_SAMPLE_MS:
    ok = wb_parse_i64("sleep", "sample-ms", arg, 0, MAX_SLEEP_MS, &c->sample_ms);
    c->sample_given = true;
    break;
  }
  return ok ? 0 : WB_EXIT_USAGE;
}

static int sleep_prepare(wb_driver *d) {
  sleep_cmd *c = d->ctx;
  if (c->jobs && c->per_core) return wb_usage_error("sleep", "--jobs and --per-core are exclusive");
  /*
   * 250 ms into the run, as the write-up looked; but a run of short sleeps may
   * be over by then, and a count taken after the jobs have finished says
   * nothing about them. Every job sleeps sleep_ms, so halfway through that
   * the first jobs are still in flight on every backend.
   */
  if (!c->sample_given) c->sample_ms = c->sleep_ms / 2 < 250 ? c->sleep_ms / 2 : 250;
  unsigned cores = wb_cores();
  if (c->per_core) {
    if (c->per_core > MAX_JOBS / (int64_t)cores)
      return wb_usage_error("sleep", "--per-core %lld x %u cores is over %d jobs", (long long)c->per_core,
                            cores, MAX_JOBS);
    c->jobs = c->per_core * (int64_t)cores;
  }
  if (!c->jobs) c->jobs = cores;
  c->here = d->npicked == 1 && d->repeat == 1;
  for (size_t i = 0; i < d->npicked; i++) {
    const wb_choice *ch = wb_picked(d, i);
    wb_run *r = wb_add_run(d, ch->name, 0);
    if (!r) return WB_EXIT_FAIL;
    if (strcmp(ch->name, "go") == 0) r->family = "go";
  }
  return 0;
}

static int sleep_args(wb_driver *d, wb_args *a) {
  sleep_cmd *c = d->ctx;
  wb_args_picked(d, a);
  wb_args_int(a, "--jobs", c->jobs);
  wb_args_int(a, "--sleep-ms", c->sleep_ms);
  if (d->repeat != 1) wb_args_repeat(d, a);
  if (c->sample_given) wb_args_int(a, "--sample-ms", c->sample_ms);
  return 0;
}

static int sleep_run(wb_driver *d, wb_run *r, wb_phase phase, wb_sample *s) {
  (void)phase;
  sleep_cmd *c = d->ctx;
  wb_sleep_job j = job_of(c, r);
  if (c->here) return wb_sleep_here(&j, s, &c->extra);
  return wb_sleep_child(&j, s);
}

static int sleep_record(wb_driver *d, const wb_run *r, json_t *rec) {
  sleep_cmd *c = d->ctx;
  int rc = 0;
  if (!r->base) {
    wb_sleep_job j = job_of(c, r);
    rc = wb_json_set_int(rec, "jobs", c->jobs);
    if (rc == 0) rc = wb_json_set_int(rec, "sleep_ms", c->sleep_ms);
    if (rc == 0) rc = wb_sleep_extra_record(&j, &c->extra, rec);
  }
  if (rc == 0)
    rc = c->per_core ? wb_json_set_int(rec, "per_core", c->per_core) : wb_json_set_null(rec, "per_core");
  return rc;
}

static void print_one(const sleep_cmd *c, const wb_run *r) {
  double threads = r->m[WB_M_THREADS][0];
  printf("sleep: backend %s, %lld jobs x %lld ms, %u cores\n", r->name, (long long)c->jobs,
         (long long)c->sleep_ms, wb_cores());
  if (threads >= 0)
    printf("Platform threads: %.0f  (at %.0f ms)\n", threads, c->extra.threads_at_ms);
  else
    printf("Platform threads: unknown (/proc/self/task unreadable)\n");
  printf("\"Elapsed time: %.3f msecs\"\n", r->ms[0]);
  if (r->m[WB_M_RSS][0] >= 0) printf("Peak RSS: %.0f KiB\n", r->m[WB_M_RSS][0]);
  printf("Jobs in flight (peak): %.0f\n", r->m[WB_M_IN_FLIGHT][0]);
  printf("CPU time: user %.3f s, system %.3f s; minor page faults: %.0f\n", r->m[WB_M_CPU_USER][0],
         r->m[WB_M_CPU_SYS][0], r->m[WB_M_MINFLT][0]);
  if (c->extra.go_version[0])
    printf("Go: %s, GOMAXPROCS %lld\n", c->extra.go_version, (long long)c->extra.gomaxprocs);
}

static void sleep_report(wb_driver *d) {
  sleep_cmd *c = d->ctx;
  if (c->here) {
    /* Failures were told on stderr; the write-up's lines are for a run that worked. */
    if (d->runs[0].n && !d->runs[0].failed) print_one(c, &d->runs[0]);
    return;
  }
  printf("%-8s %9s %9s %11s %11s %11s %8s %12s %10s %8s %8s %9s\n", "backend", "jobs", "sleep_ms", "min ms",
         "median ms", "max ms", "threads", "peak RSS KiB", "in flight", "user s", "sys s", "minflt");
  const wb_run *skipped = NULL;
  for (size_t i = 0; i < d->nruns; i++) {
    const wb_run *r = &d->runs[i];
    if (r->skipped) {
      skipped = r;
      continue;
    }
    if (r->n == 0) {
      printf("%-8s %9lld %9lld  failed: %s\n", r->name, (long long)c->jobs, (long long)c->sleep_ms, r->error);
      continue;
    }
    wb_summary e = wb_run_ms(r);
    printf("%-8s %9lld %9lld %11.3f %11.3f %11.3f %8.0f %12.0f %10.0f %8.3f %8.3f %9.0f%s%s\n", r->name,
           (long long)c->jobs, (long long)c->sleep_ms, e.min, e.median, e.max,
           wb_run_metric(r, WB_M_THREADS).median, wb_run_metric(r, WB_M_RSS).median,
           wb_run_metric(r, WB_M_IN_FLIGHT).median, wb_run_metric(r, WB_M_CPU_USER).median,
           wb_run_metric(r, WB_M_CPU_SYS).median, wb_run_metric(r, WB_M_MINFLT).median,
           r->failed ? "  FAILED: " : "", r->failed ? r->error : "");
  }
  if (skipped) printf("%-8s skipped: %s\n", skipped->name, skipped->error);
  printf("(medians over the repetitions; in flight: the most jobs inside their sleep at once;\n"
         " user, sys: CPU seconds of the run's process; minflt: its minor page faults)\n");
}

static const wb_command sleep_command = {
    .name = "sleep",
    .help = sleep_help,
    .opts = sleep_opts,
    .pick = "backend",
    .choices = sleep_backends,
    .nchoices = sizeof sleep_backends / sizeof sleep_backends[0],
    .pick_default = "weft",
    .metrics = wb_sleep_metrics,
    .nmetrics = WB_SLEEP_NMETRICS,
    .max_repeat = 1000,
    .option = sleep_option,
    .prepare = sleep_prepare,
    .args = sleep_args,
    .run = sleep_run,
    .record = sleep_record,
    .report = sleep_report,
};

int wb_cmd_sleep(int argc, char **argv) {
  sleep_cmd c = {.sleep_ms = 1000, .sample_ms = -1};
  return wb_drive(&sleep_command, &c, argc, argv);
}
