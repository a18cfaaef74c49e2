/*
 * This file contains `weft-bench embroidery`: the experiment of the Clojure
 * library embroidery's write-up, repeated with weft. Jobs that each sleep
 * 1 s, first as many as there are cores, then 1000 x cores; first on weft's
 * blocking pmap (fibers), then on its fallback (the same call with
 * WEFT_FIBERS=0), and on Go's goroutines (benchmarks/go, weft-go-sleep:
 * the nearest thing to the write-up's virtual threads that runs here; left
 * out with a message when this build has no Go). Every measurement runs in
 * a fresh child process, so its OS threads and peak RSS are its own.
 *
 * The fallback's 1000 x cores run sleeps 10 ms per job unless --full: at
 * 1 s it runs for about 1000 s on 2 cores (1000 rounds of one sleep per
 * OpenMP thread). The report says so, and extrapolates to 1 s.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "sleep.h"

#define MAX_REPEAT 100
/* Threads are counted 250 ms into every run, as in the write-up (the 10 ms fallback run lasts seconds). */
#define SAMPLE_MS 250

/* The write-up's own figures, printed for reference only: its JVM, its machine. */
#define REF_VT_CORES_MS 1005.0 /* virtual threads, jobs = cores */
#define REF_VT_1000_MS  1027.0 /* virtual threads, jobs = 1000 x cores */
#define REF_FALLBACK_S  440.0  /* the fallback (platform-thread pool), 1000 x cores */
#define REF_THREADS     22     /* platform threads during the virtual-thread run */

static const char embroidery_help[] =
    "usage: weft-bench embroidery [--full] [--repeat R] [--json]\n"
    "\n"
    "The embroidery experiment: jobs that each sleep 1000 ms, jobs = cores and then\n"
    "jobs = 1000 x cores, on weft's blocking pmap with fibers (WEFT_FIBERS=1), on\n"
    "the fallback (the same weft call with WEFT_FIBERS=0) and on Go goroutines (the\n"
    "Go baseline weft-go-sleep; skipped with a message when this build has no Go).\n"
    "Every measurement runs in a fresh child process (weft-bench sleep --backend\n"
    "weft|go ... --json), so the OS thread count, the peak RSS, the CPU time and the\n"
    "page faults are per run; the jobs in flight are counted around each sleep.\n"
    "\n"
    "  --full        run the fallback's 1000 x cores case at 1000 ms too (about\n"
    "                1000 s on 2 cores); by default it sleeps 10 ms per job and the\n"
    "                report extrapolates to 1000 ms\n"
    "  --repeat R    R repetitions, interleaved; min, median and max (default 1)\n"
    "  --json        one JSON object per measurement (JSON Lines) on stdout\n"
    "  --help        this text\n"
    "\n"
    "The default run takes about 5 s + 10 ms x 1000 = 15 s on 2 cores.\n"
    "The write-up's figures (1005 and 1027 ms on virtual threads, 440 s on the\n"
    "fallback, 22 platform threads) are printed beside the results for reference:\n"
    "they were measured on the JVM, on another machine.\n";

static void fmt_ms(char *out, size_t len, const wb_run *r) {
  if (r->n == 0) {
    snprintf(out, len, "failed");
    return;
  }
  wb_summary s = wb_run_ms(r);
  if (r->n == 1)
    snprintf(out, len, "%.0f", s.median);
  else
    snprintf(out, len, "%.0f (%.0f-%.0f)", s.median, s.min, s.max);
}

/* The median of figure m; "-" without samples, "skipped" for a go run that could not run. */
static void fmt_median(char *out, size_t len, const wb_run *r, int m, const char *fmt) {
  if (r->n == 0)
    snprintf(out, len, "-");
  else
    snprintf(out, len, fmt, wb_run_metric(r, (size_t)m).median);
}

/* CPU time of the run, user + system, as "0.52 (0.31+0.21)". */
static void fmt_cpu(char *out, size_t len, const wb_run *r) {
  if (r->n == 0) {
    snprintf(out, len, "-");
    return;
  }
  double u = wb_run_metric(r, WB_M_CPU_USER).median, s = wb_run_metric(r, WB_M_CPU_SYS).median;
  snprintf(out, len, "%.2f (%.2f+%.2f)", u + s, u, s);
}

/* One row of the table: our three columns, then the write-up's two (reference figures or "-"). */
static void row(const char *what, const char *fib, const char *fb, const char *go, const char *ref_vt,
                const char *ref_fb) {
  printf("  %-24s %-18s %-28s %-18s %-18s %s\n", what, fib, fb, go, ref_vt, ref_fb);
}

/* One figure for the three measured columns; go_run is NULL when Go was skipped. */
static void figure_row(const char *what, const wb_run *const col[3], int m, const char *fmt,
                       const char *ref_vt, const char *ref_fb) {
  char c[3][64];
  for (int i = 0; i < 3; i++) {
    if (!col[i])
      snprintf(c[i], sizeof c[i], "skipped");
    else if (m < 0)
      fmt_cpu(c[i], sizeof c[i], col[i]);
    else
      fmt_median(c[i], sizeof c[i], col[i], m, fmt);
  }
  row(what, c[0], c[1], c[2], ref_vt, ref_fb);
}

static void print_block(const char *title, const wb_run *fib, const wb_run *fb, const wb_run *go,
                        const char *fb_note, const char *ref_ms_vt, const char *ref_ms_fb,
                        const char *ref_threads) {
  char a[64], b[96], c[64];
  const wb_run *col[3] = {fib, fb, go};
  printf("%s\n", title);
  fmt_ms(a, sizeof a, fib);
  fmt_ms(b, sizeof b, fb);
  strncat(b, fb_note, sizeof b - strlen(b) - 1);
  if (go)
    fmt_ms(c, sizeof c, go);
  else
    snprintf(c, sizeof c, "skipped");
  row("\"Elapsed time\" (msecs)", a, b, c, ref_ms_vt, ref_ms_fb);
  figure_row("Platform threads", col, WB_M_THREADS, "%.0f", ref_threads, "-");
  figure_row("Peak RSS (KiB)", col, WB_M_RSS, "%.0f", "-", "-");
  figure_row("Jobs in flight (peak)", col, WB_M_IN_FLIGHT, "%.0f", "-", "-");
  figure_row("CPU s (user+system)", col, -1, NULL, "-", "-");
  figure_row("Minor page faults", col, WB_M_MINFLT, "%.0f", "-", "-");
}

/* The go runs come last, so that without Go the first four run alone. */
enum { FIB_CORES, FIB_1000, FB_CORES, FB_1000, GO_CORES, GO_1000, NRUNS };

static const struct {
  const char *name;  /* the record's backend */
  const char *label; /* progress and failures */
  const char *set;   /* the child's environment */
} runs_of[NRUNS] = {
    /* Explicit both ways: a WEFT_FIBERS=0 in the caller's environment must not turn the fiber runs into
     * fallbacks. The go runs do not call weft. */
    {"weft-fibers", "fibers, jobs = cores", "WEFT_FIBERS=1"},
    {"weft-fibers", "fibers, jobs = 1000 x cores", "WEFT_FIBERS=1"},
    {"weft-fallback", "fallback, jobs = cores", "WEFT_FIBERS=0"},
    {"weft-fallback", "fallback, jobs = 1000 x cores", "WEFT_FIBERS=0"},
    {"go", "go, jobs = cores", NULL},
    {"go", "go, jobs = 1000 x cores", NULL},
};

static const wb_opt embroidery_opts[] = {
    {"full", false, 1},
    {NULL, false, 0},
};

typedef struct embroidery_cmd {
  bool full;
  unsigned cores;
  wb_sleep_job jobs[NRUNS];
  const char *set[NRUNS][2];
} embroidery_cmd;

static int embroidery_option(wb_driver *d, int id, const char *arg) {
  (void)id;
  (void)arg;
  ((embroidery_cmd *)d->ctx)->full = true;
  return 0;
}

static int embroidery_prepare(wb_driver *d) {
  embroidery_cmd *c = d->ctx;
  c->cores = wb_cores();
  for (int i = 0; i < NRUNS; i++) {
    wb_sleep_job *j = &c->jobs[i];
    j->backend = i >= GO_CORES ? "go" : "weft";
    j->jobs =
        (i == FIB_CORES || i == FB_CORES || i == GO_CORES) ? (int64_t)c->cores : 1000 * (int64_t)c->cores;
    j->sleep_ms = (i == FB_1000 && !c->full) ? 10 : 1000;
    /* Threads are counted 250 ms into every run, as in the write-up (the 10 ms fallback run lasts seconds).
     */
    j->sample_ms = SAMPLE_MS;
    c->set[i][0] = runs_of[i].set;
    j->set = c->set[i];
    wb_run *r = wb_add_run(d, runs_of[i].name, i);
    if (!r) return WB_EXIT_FAIL;
    r->label = runs_of[i].label;
    if (i >= GO_CORES) r->family = "go";
  }
  return 0;
}

static int embroidery_args(wb_driver *d, wb_args *a) {
  if (((embroidery_cmd *)d->ctx)->full) wb_args_add(a, "--full");
  if (d->repeat != 1) wb_args_repeat(d, a);
  return 0;
}

static int embroidery_run(wb_driver *d, wb_run *r, wb_phase phase, wb_sample *s) {
  (void)phase;
  embroidery_cmd *c = d->ctx;
  return wb_sleep_child(&c->jobs[r->id], s);
}

/* The `sleep` command line, with its environment, that repeats one measurement. */
static int measure_command(const wb_driver *d, const wb_sleep_job *j, char **out) {
  wb_args a = {0};
  wb_sleep_child_args(j, &a);
  if (d->repeat != 1) wb_args_repeat(d, &a);
  wb_args_add(&a, "--json");
  char **env = NULL;
  int rc = a.err ? a.err : wb_child_env(j->set, &env);
  if (rc == 0) rc = wb_command_line(a.v, a.n, env, out);
  wb_free_strv(env);
  wb_args_free(&a);
  return rc;
}

static int embroidery_record(wb_driver *d, const wb_run *r, json_t *rec) {
  embroidery_cmd *c = d->ctx;
  const wb_sleep_job *j = &c->jobs[r->id];
  char *mcmd = NULL;
  int rc = measure_command(d, j, &mcmd);
  if (rc == 0) rc = wb_json_set_bool(rec, "full", c->full);
  if (rc == 0) rc = wb_json_set_str(rec, "measure_command", mcmd);
  if (rc == 0 && r->id == FB_1000 && !c->full && r->n)
    rc = wb_json_set_num(rec, "extrapolated_ms_at_1000",
                         wb_round_ms(wb_round_ms(wb_run_ms(r).median) * 1000.0 / (double)j->sleep_ms));
  free(mcmd);
  return rc;
}

static void embroidery_report(wb_driver *d) {
  embroidery_cmd *c = d->ctx;
  const wb_run *runs = d->runs;
  bool have_go = !runs[GO_CORES].skipped;
  char title[96], ref_vt_cores[32], ref_vt_1000[32], ref_fb[32], ref_threads[32];
  printf("embroidery: jobs that each sleep 1000 ms on weft's blocking pmap, %u cores", c->cores);
  if (d->repeat > 1) printf(", median (min-max) of %lld repetitions", (long long)d->repeat);
  printf("\nEvery figure in the first three columns was measured here, each run in a fresh process.\n");
  printf("The last two are the embroidery write-up's (JVM virtual threads; its machine), for reference "
         "only.\n\n");
  row("", "weft fibers", "weft fallback", "Go goroutines", "write-up: virtual", "write-up: fallback");
  row("", "(WEFT_FIBERS=1)", "(WEFT_FIBERS=0)", "(weft-go-sleep)", "threads", "");
  snprintf(ref_vt_cores, sizeof ref_vt_cores, "%.0f", REF_VT_CORES_MS);
  snprintf(ref_vt_1000, sizeof ref_vt_1000, "%.0f", REF_VT_1000_MS);
  snprintf(ref_fb, sizeof ref_fb, "%.0f", REF_FALLBACK_S * 1000);
  snprintf(ref_threads, sizeof ref_threads, "%d", REF_THREADS);
  snprintf(title, sizeof title, "jobs = cores = %u", c->cores);
  print_block(title, &runs[FIB_CORES], &runs[FB_CORES], have_go ? &runs[GO_CORES] : NULL, "", ref_vt_cores,
              "-", "-");
  snprintf(title, sizeof title, "jobs = 1000 x cores = %lld", (long long)c->jobs[FIB_1000].jobs);
  print_block(title, &runs[FIB_1000], &runs[FB_1000], have_go ? &runs[GO_1000] : NULL,
              c->full ? "" : " [10 ms sleeps]", ref_vt_1000, ref_fb, ref_threads);
  if (!have_go) printf("\nGo goroutines: skipped: %s\n", runs[GO_CORES].error);

  if (!c->full && runs[FB_1000].n > 0) {
    /* Rounds of sleeps: each OS thread of the fallback sleeps once per round, so time scales with the sleep.
     */
    double ms = wb_run_ms(&runs[FB_1000]).median;
    double factor = 1000.0 / (double)c->jobs[FB_1000].sleep_ms;
    printf("\nNOTE: the fallback's 1000 x cores run slept %lld ms per job, not 1000 ms: at 1000 ms it would\n"
           "run for about %.0f s. Extrapolated to 1000 ms sleeps: ~%.0f s (%.0f ms measured x %.0f); this\n"
           "figure is an estimate, not a measurement: `--full` measures it.\n",
           (long long)c->jobs[FB_1000].sleep_ms, ms * factor / 1000.0, ms * factor / 1000.0, ms, factor);
  }
  for (size_t i = 0; i < d->nruns; i++)
    if (runs[i].failed) printf("\n%s run FAILED: %s\n", wb_run_label(&runs[i]), runs[i].error);
  printf("\n(in flight: the most jobs inside their sleep at once; CPU s and page faults: the run's process,\n"
         " over the run; Go's figures are its own program's)\n");
}

static const wb_command embroidery_command = {
    .name = "embroidery",
    .help = embroidery_help,
    .opts = embroidery_opts,
    .metrics = wb_sleep_metrics,
    .nmetrics = WB_SLEEP_NMETRICS,
    .max_repeat = MAX_REPEAT,
    .option = embroidery_option,
    .prepare = embroidery_prepare,
    .args = embroidery_args,
    .run = embroidery_run,
    .record = embroidery_record,
    .report = embroidery_report,
};

int wb_cmd_embroidery(int argc, char **argv) {
  embroidery_cmd c;
  memset(&c, 0, sizeof c);
  return wb_drive(&embroidery_command, &c, argc, argv);
}
