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
#include "bench.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define MAX_REPEAT 100
/* Threads are counted 250 ms into every run, as in the write-up (the 10 ms fallback run lasts seconds). */
#define SAMPLE_MS   250
#define SAMPLE_MS_S "250"

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

enum { OPT_HELP = 1, OPT_FULL, OPT_REPEAT, OPT_JSON };

static const wb_opt embroidery_opts[] = {
    {"help", false, OPT_HELP}, {"full", false, OPT_FULL}, {"repeat", true, OPT_REPEAT},
    {"json", false, OPT_JSON}, {NULL, false, 0},
};

/* The go runs come last, so that without Go the first four run alone. */
enum { FIB_CORES, FIB_1000, FB_CORES, FB_1000, GO_CORES, GO_1000, NRUNS };

static int measure_command(const wb_sleep_run *run, int64_t repeat, char **out) {
  char jobs_s[24], sleep_s[24], repeat_s[24];
  snprintf(jobs_s, sizeof jobs_s, "%lld", (long long)run->jobs);
  snprintf(sleep_s, sizeof sleep_s, "%lld", (long long)run->sleep_ms);
  snprintf(repeat_s, sizeof repeat_s, "%lld", (long long)repeat);
  char *args[14];
  size_t n = 0;
  args[n++] = "sleep";
  args[n++] = "--backend";
  args[n++] = (char *)run->backend;
  args[n++] = "--jobs";
  args[n++] = jobs_s;
  args[n++] = "--sleep-ms";
  args[n++] = sleep_s;
  args[n++] = "--sample-ms";
  args[n++] = SAMPLE_MS_S;
  if (repeat != 1) {
    args[n++] = "--repeat";
    args[n++] = repeat_s;
  }
  args[n++] = "--json";
  char **env;
  int rc = wb_child_env(run->set, &env);
  if (rc < 0) return rc;
  rc = wb_command_line(args, n, env, out);
  wb_free_strv(env);
  return rc;
}

static void fmt_ms(char *out, size_t len, const wb_sleep_run *r) {
  if (r->n == 0) {
    snprintf(out, len, "failed");
    return;
  }
  wb_summary s = wb_summarize(r->elapsed_ms, r->n);
  if (r->n == 1)
    snprintf(out, len, "%.0f", s.median);
  else
    snprintf(out, len, "%.0f (%.0f-%.0f)", s.median, s.min, s.max);
}

/* The median of figure m; "-" without samples, "skipped" for a go run that could not run. */
static void fmt_median(char *out, size_t len, const wb_sleep_run *r, int m, const char *fmt) {
  if (r->n == 0)
    snprintf(out, len, "-");
  else
    snprintf(out, len, fmt, wb_summarize(r->m[m], r->n).median);
}

/* CPU time of the run, user + system, as "0.52 (0.31+0.21)". */
static void fmt_cpu(char *out, size_t len, const wb_sleep_run *r) {
  if (r->n == 0) {
    snprintf(out, len, "-");
    return;
  }
  double u = wb_summarize(r->m[WB_M_CPU_USER], r->n).median,
         s = wb_summarize(r->m[WB_M_CPU_SYS], r->n).median;
  snprintf(out, len, "%.2f (%.2f+%.2f)", u + s, u, s);
}

/* One row of the table: our three columns, then the write-up's two (reference figures or "-"). */
static void row(const char *what, const char *fib, const char *fb, const char *go, const char *ref_vt,
                const char *ref_fb) {
  printf("  %-24s %-18s %-28s %-18s %-18s %s\n", what, fib, fb, go, ref_vt, ref_fb);
}

/* One figure for the three measured columns; go_run is NULL when Go was skipped. */
static void figure_row(const char *what, const wb_sleep_run *const col[3], int m, const char *fmt,
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

static void print_block(const char *title, const wb_sleep_run *fib, const wb_sleep_run *fb,
                        const wb_sleep_run *go, const char *fb_note, const char *ref_ms_vt,
                        const char *ref_ms_fb, const char *ref_threads) {
  char a[64], b[96], c[64];
  const wb_sleep_run *col[3] = {fib, fb, go};
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

static void print_report(wb_sleep_run *runs, unsigned cores, bool full, int64_t repeat, bool have_go,
                         const char *go_why) {
  char title[96], ref_vt_cores[32], ref_vt_1000[32], ref_fb[32], ref_threads[32];
  printf("embroidery: jobs that each sleep 1000 ms on weft's blocking pmap, %u cores", cores);
  if (repeat > 1) printf(", median (min-max) of %lld repetitions", (long long)repeat);
  printf("\nEvery figure in the first three columns was measured here, each run in a fresh process.\n");
  printf("The last two are the embroidery write-up's (JVM virtual threads; its machine), for reference "
         "only.\n\n");
  row("", "weft fibers", "weft fallback", "Go goroutines", "write-up: virtual", "write-up: fallback");
  row("", "(WEFT_FIBERS=1)", "(WEFT_FIBERS=0)", "(weft-go-sleep)", "threads", "");
  snprintf(ref_vt_cores, sizeof ref_vt_cores, "%.0f", REF_VT_CORES_MS);
  snprintf(ref_vt_1000, sizeof ref_vt_1000, "%.0f", REF_VT_1000_MS);
  snprintf(ref_fb, sizeof ref_fb, "%.0f", REF_FALLBACK_S * 1000);
  snprintf(ref_threads, sizeof ref_threads, "%d", REF_THREADS);
  snprintf(title, sizeof title, "jobs = cores = %u", cores);
  print_block(title, &runs[FIB_CORES], &runs[FB_CORES], have_go ? &runs[GO_CORES] : NULL, "", ref_vt_cores,
              "-", "-");
  snprintf(title, sizeof title, "jobs = 1000 x cores = %lld", (long long)runs[FIB_1000].jobs);
  print_block(title, &runs[FIB_1000], &runs[FB_1000], have_go ? &runs[GO_1000] : NULL,
              full ? "" : " [10 ms sleeps]", ref_vt_1000, ref_fb, ref_threads);
  if (!have_go) printf("\nGo goroutines: skipped: %s\n", go_why);

  if (!full && runs[FB_1000].n > 0) {
    /* Rounds of sleeps: each OS thread of the fallback sleeps once per round, so time scales with the sleep.
     */
    double ms = wb_summarize(runs[FB_1000].elapsed_ms, runs[FB_1000].n).median;
    double factor = 1000.0 / (double)runs[FB_1000].sleep_ms;
    printf("\nNOTE: the fallback's 1000 x cores run slept %lld ms per job, not 1000 ms: at 1000 ms it would\n"
           "run for about %.0f s. Extrapolated to 1000 ms sleeps: ~%.0f s (%.0f ms measured x %.0f); this\n"
           "figure is an estimate, not a measurement: `--full` measures it.\n",
           (long long)runs[FB_1000].sleep_ms, ms * factor / 1000.0, ms * factor / 1000.0, ms, factor);
  }
  for (int i = 0; i < NRUNS; i++)
    if (runs[i].failed) printf("\n%s run FAILED: %s\n", runs[i].label, runs[i].error);
  printf("\n(in flight: the most jobs inside their sleep at once; CPU s and page faults: the run's process,\n"
         " over the run; Go's figures are its own program's)\n");
}

int wb_cmd_embroidery(int argc, char **argv) {
  bool json = false, full = false;
  int64_t repeat = 1;
  wb_optstate st;
  wb_opt_init(&st, argc, argv, "embroidery");
  const char *arg;
  int id;
  while ((id = wb_opt_next(&st, embroidery_opts, &arg)) != WB_OPT_END) {
    switch (id) {
    case WB_OPT_ERROR:
      return WB_EXIT_USAGE;
    case WB_OPT_POSITIONAL:
      return wb_usage_error("embroidery", "unexpected argument '%s'", arg);
    case OPT_HELP:
      fputs(embroidery_help, stdout);
      return WB_EXIT_OK;
    case OPT_FULL:
      full = true;
      break;
    case OPT_REPEAT:
      if (!wb_parse_i64("embroidery", "repeat", arg, 1, MAX_REPEAT, &repeat)) return WB_EXIT_USAGE;
      break;
    case OPT_JSON:
      json = true;
      break;
    }
  }
  unsigned cores = wb_cores();
  wb_progress_init(json);

  /* The parent's own command line, as it was understood. */
  char repeat_s[24];
  snprintf(repeat_s, sizeof repeat_s, "%lld", (long long)repeat);
  char *args[6];
  size_t nargs = 0;
  args[nargs++] = "embroidery";
  if (full) args[nargs++] = "--full";
  if (repeat != 1) {
    args[nargs++] = "--repeat";
    args[nargs++] = repeat_s;
  }
  if (json) args[nargs++] = "--json";
  char *command = NULL;
  if (wb_command_line(args, nargs, NULL, &command) < 0) {
    fprintf(stderr, "weft-bench embroidery: out of memory\n");
    return WB_EXIT_FAIL;
  }
  if (!json) fprintf(stderr, "command: %s\n", command);

  wb_sleep_run runs[NRUNS];
  memset(runs, 0, sizeof runs);
  static const char *const labels[NRUNS] = {"fibers, jobs = cores",   "fibers, jobs = 1000 x cores",
                                            "fallback, jobs = cores", "fallback, jobs = 1000 x cores",
                                            "go, jobs = cores",       "go, jobs = 1000 x cores"};
  for (int i = 0; i < NRUNS; i++) {
    runs[i].backend = i >= GO_CORES ? "go" : "weft";
    runs[i].label = labels[i];
    runs[i].jobs =
        (i == FIB_CORES || i == FB_CORES || i == GO_CORES) ? (int64_t)cores : 1000 * (int64_t)cores;
    runs[i].sleep_ms = (i == FB_1000 && !full) ? 10 : 1000;
    /* Explicit both ways: a WEFT_FIBERS=0 in the caller's environment must not turn the fiber runs into
     * fallbacks. The go runs do not call weft. */
    if (i < GO_CORES) runs[i].set[0] = i < FB_CORES ? "WEFT_FIBERS=1" : "WEFT_FIBERS=0";
  }
  char go_path[4096], go_why[256];
  bool have_go = wb_go_find("weft-go-sleep", go_path, sizeof go_path, go_why, sizeof go_why) == 0;
  if (!have_go) fprintf(stderr, "weft-bench embroidery: go: skipped: %s\n", go_why);
  int nruns = have_go ? NRUNS : GO_CORES;
  int exit_code = WB_EXIT_OK;
  int rc = wb_sleep_children(runs, (size_t)nruns, repeat, SAMPLE_MS);
  if (rc < 0) {
    fprintf(stderr, "weft-bench embroidery: %s\n", strerror(-rc));
    exit_code = WB_EXIT_FAIL;
  }
  for (int i = 0; i < nruns; i++)
    if (runs[i].failed || runs[i].n == 0) exit_code = WB_EXIT_FAIL;
  if (!json) print_report(runs, cores, full, repeat, have_go, go_why);
  for (int i = 0; i < nruns && json; i++) {
    char *mcmd = NULL;
    if (measure_command(&runs[i], repeat, &mcmd) < 0) {
      exit_code = WB_EXIT_FAIL;
      continue;
    }
    json_value *rec = wb_sleep_aggregate(&runs[i], command);
    int wrc = rec ? 0 : -ENOMEM;
    if (wrc == 0) wrc = json_set_str(rec, "bench", "embroidery");
    if (wrc == 0)
      wrc = json_set_str(rec, "backend",
                         i >= GO_CORES  ? "go"
                         : i < FB_CORES ? "weft-fibers"
                                        : "weft-fallback");
    if (wrc == 0) wrc = json_set_bool(rec, "full", full);
    if (wrc == 0) wrc = json_set_str(rec, "measure_command", mcmd);
    if (wrc == 0 && i == FB_1000 && !full) {
      double ms = 0;
      json_get_num(rec, "elapsed_ms", &ms);
      wrc = json_set_num(rec, "extrapolated_ms_at_1000", wb_round_ms(ms * 1000.0 / (double)runs[i].sleep_ms));
    }
    if (wrc == 0) wrc = json_print_line(rec, stdout);
    if (wrc < 0 && runs[i].n > 0) {
      fprintf(stderr, "weft-bench embroidery: cannot write the record for %s\n", runs[i].label);
      exit_code = WB_EXIT_FAIL;
    }
    json_free(rec);
    free(mcmd);
  }
  for (int i = 0; i < NRUNS; i++) wb_sleep_run_free(&runs[i]);
  free(command);
  return exit_code;
}
