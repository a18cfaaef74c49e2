/*
 * This file contains what the parts of weft-bench share: exit codes, the
 * option parser, the measurement record (a JSON object), process statistics,
 * metadata, progress on a terminal, statistics over samples, and the child
 * runner that gives each measurement a fresh process.
 *
 * weft-bench is one program split by concern:
 *
 *   main.c            the command table and the top-level --help
 *   cli.c             option parsing, numbers, shell quoting of the command line
 *   json.h, json.c    the JSON value, its writer and a strict reader (no dependency)
 *   meta.c            machine and build metadata for every record
 *   proc.c            cores, OS threads (/proc/self/task), peak RSS (VmHWM), CPU time, the sampler
 *   stats.c           min, median, max over samples
 *   progress.c        one status line on a terminal
 *   child.c           re-exec /proc/self/exe for a measurement, read its JSON line
 *   go.c              where the Go baselines (benchmarks/go) are, or why they are not
 *   cmd_sleep.c       weft-bench sleep
 *   cmd_embroidery.c  weft-bench embroidery
 *   cmd_spawn.c       weft-bench spawn
 *   cmd_gpars.c       weft-bench gpars (backends); gpars.h, gpars_math.c, gpars_files.c, gpars_http.c (cases)
 *   cmd_compare.c     weft-bench compare
 *   bench_cli_test.cmake  the bench_cli CTest
 */
#ifndef WEFT_BENCH_H
#define WEFT_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "json.h"

/* Exit codes, the same for every command (docs/weft-bench.md lists them). */
enum {
  WB_EXIT_OK = 0,
  WB_EXIT_FAIL = 1,        /* a measurement failed, or compare found a regression */
  WB_EXIT_USAGE = 2,       /* bad option, bad value, bad input file */
  WB_EXIT_UNAVAILABLE = 3, /* the feature is not in this build (yet) */
};

/* The version of the JSON Lines format that weft-bench writes ("schema" key). */
#define WB_SCHEMA 1

/* ------------------------------------------------------------------------ */
/* Commands                                                                  */
/* ------------------------------------------------------------------------ */

/* Every command: argv[0] is the command's name; returns an exit code. */
int wb_cmd_sleep(int argc, char **argv);
int wb_cmd_embroidery(int argc, char **argv);
int wb_cmd_gpars(int argc, char **argv);
int wb_cmd_spawn(int argc, char **argv);
int wb_cmd_compare(int argc, char **argv);

/* The program's name as invoked (argv[0]), for messages and the "command" key. */
extern const char *wb_argv0;

/* ------------------------------------------------------------------------ */
/* Options (cli.c)                                                           */
/* ------------------------------------------------------------------------ */

typedef struct wb_opt {
  const char *name; /* long name without the dashes */
  bool has_arg;     /* takes a value: "--name V" or "--name=V" */
  int id;           /* returned by wb_opt_next */
} wb_opt;

typedef struct wb_optstate {
  int argc;
  char **argv;
  int i;           /* next argv index to look at */
  const char *cmd; /* command name for messages */
  bool dashdash;   /* "--" seen: every later word is positional */
} wb_optstate;

enum { WB_OPT_END = -1, WB_OPT_POSITIONAL = -2, WB_OPT_ERROR = -3 };

/* Start parsing argv[1..] of a command (argv[0] is the command). */
void wb_opt_init(wb_optstate *st, int argc, char **argv, const char *cmd);

/*
 * The next option: its id (with its value in *arg when it takes one),
 * WB_OPT_POSITIONAL (the word in *arg), WB_OPT_END, or WB_OPT_ERROR after
 * printing a message (unknown option, missing value). "--" ends the options.
 */
int wb_opt_next(wb_optstate *st, const wb_opt *opts, const char **arg);

/* Print "weft-bench CMD: message (see weft-bench CMD --help)" on stderr; returns WB_EXIT_USAGE. */
int wb_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Parse an integer in [lo, hi] (decimal, no sign for unsigned use); false and a message on error. */
bool wb_parse_i64(const char *cmd, const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out);
/* Parse a number (decimal fraction allowed) in [lo, hi]. */
bool wb_parse_double(const char *cmd, const char *opt, const char *s, double lo, double hi, double *out);

/*
 * A growable string. Every append returns 0 or -ENOMEM; after a failure the
 * string keeps what it had. wb_str_free releases it.
 */
typedef struct wb_str {
  char *s;
  size_t len, cap;
} wb_str;

int wb_str_add(wb_str *b, const char *s);
int wb_str_addn(wb_str *b, const char *s, size_t n);
int wb_str_addf(wb_str *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void wb_str_free(wb_str *b);

/* Append s to b quoted for a POSIX shell (left bare when it needs no quotes). */
int wb_str_add_shell_word(wb_str *b, const char *s);

/*
 * The command line that repeats a measurement: "NAME=value ... weft-bench
 * args...". The environment variables that change what weft, OpenMP or the
 * Go baselines do (WEFT_*, OMP_*, GOMP_*, KMP_*; GOMAXPROCS, GOGC, GODEBUG,
 * GOMEMLIMIT) are taken from env (NULL: this process's) and put in front;
 * the program is wb_argv0.
 */
int wb_command_line(char *const *args, size_t nargs, char *const *env, char **out);

/* True for the names of environment variables that the "command" and "env" keys record. */
bool wb_env_name_recorded(const char *name, size_t len);

/* ------------------------------------------------------------------------ */
/* Process statistics (proc.c)                                               */
/* ------------------------------------------------------------------------ */

/* CPUs in this process's affinity mask (at least 1). */
unsigned wb_cores(void);

/* OS threads in this process now (entries of /proc/self/task), or a negative errno. */
int wb_thread_count(void);

/* Peak resident set size in KiB (VmHWM of /proc/self/status), or a negative errno. */
int64_t wb_peak_rss_kb(void);

/* What the process has used so far (getrusage RUSAGE_SELF: all its threads). */
typedef struct wb_usage {
  double user_s, sys_s; /* CPU time in user and system mode */
  int64_t minflt;       /* minor page faults: pages first touched, mostly */
} wb_usage;

/* The usage now; zeros when getrusage fails. */
wb_usage wb_usage_now(void);
/* What a run between two readings cost: after - before. */
wb_usage wb_usage_since(wb_usage after, wb_usage before);

/* Nanoseconds on CLOCK_MONOTONIC. */
int64_t wb_now_ns(void);

/* Sleep for ns nanoseconds on this OS thread, resuming after signals. */
void wb_sleep_ns(int64_t ns);

/*
 * The thread sampler: a helper thread that counts the process's OS threads
 * once, delay_ms after wb_sampler_start (or when wb_sampler_stop is called
 * first), and leaves itself out of the count. wb_sampler_stop joins it, so it
 * is gone before the measurement's results are read.
 */
typedef struct wb_sampler wb_sampler;
int wb_sampler_start(wb_sampler **out, int64_t delay_ms);
/* Stop and free the sampler: *threads gets the count (or -1), *at_ms when it was taken. */
void wb_sampler_stop(wb_sampler *s, int *threads, double *at_ms);

/* ------------------------------------------------------------------------ */
/* Metadata (meta.c)                                                         */
/* ------------------------------------------------------------------------ */

/*
 * Add the machine and build metadata to a record: cores, cpu_model, kernel,
 * compiler, weft_compiler, openmp, openmp_runtime, weft_openmp, weft_version,
 * git_commit, date, fibers, carriers, carriers_running, context_switch,
 * stack_size, stack_guard, io_uring, env. Call it after the measurement:
 * asking weft whether fibers are available may start its runtime, which
 * must not be counted in another backend's threads.
 */
int wb_meta_add(json_value *rec);

/* The compiler that built weft-bench ("gcc 12.2.0", "Debian Clang 14.0.6"). */
const char *wb_compiler(void);

/* ------------------------------------------------------------------------ */
/* Statistics over samples (stats.c)                                         */
/* ------------------------------------------------------------------------ */

typedef struct wb_summary {
  double min, median, max;
} wb_summary;

/* min, median (the mean of the middle two for an even count) and max of n > 0 values. */
wb_summary wb_summarize(const double *v, size_t n);

/* Round to microseconds when the value is in milliseconds: keeps the JSON short and exact. */
double wb_round_ms(double ms);

/*
 * Put the timing keys on a record from samples in milliseconds: repeat,
 * elapsed_ms (the median), elapsed_ms_min, elapsed_ms_max, samples_ms.
 */
int wb_add_timing(json_value *rec, const double *samples_ms, size_t n);

/* Order in which repetition r (from 0) runs nb backends: rotated by r, so no backend is always first. */
size_t wb_interleave(size_t r, size_t k, size_t nb);

/* ------------------------------------------------------------------------ */
/* Progress (progress.c)                                                     */
/* ------------------------------------------------------------------------ */

/* Turn the status line on when stderr is a terminal and json is false. */
void wb_progress_init(bool json);
/* Replace the status line (rate-limited to a few updates a second unless force). */
void wb_progress(bool force, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Erase the status line (before printing results). */
void wb_progress_clear(void);
bool wb_progress_enabled(void);

/* ------------------------------------------------------------------------ */
/* Child runs (child.c)                                                      */
/* ------------------------------------------------------------------------ */

/*
 * Run this program again (the file /proc/self/exe names) with args (args[0] is the command,
 * "sleep") and the environment changed by set ("NAME=value", NULL-ended,
 * may be NULL). The child must print exactly one JSON object on stdout; it
 * is parsed into *rec (the caller frees it). The child's stderr passes
 * through. Returns 0; -ECHILD with a message when the child failed and
 * printed nothing usable; other negative errno values for spawn failures.
 * *exit_code gets the child's exit code (128 + signal when killed).
 */
int wb_child_run(char *const *args, const char *const *set, json_value **rec, int *exit_code);

/*
 * The same for another program: run path with argv (argv[0] included,
 * NULL-ended) and the environment changed by set, and parse the one JSON
 * object it prints into *rec. The Go baselines run through it.
 */
int wb_run_json(const char *path, char *const *argv, const char *const *set, json_value **rec,
                int *exit_code);

/* The environment a child gets: this process's, with set applied. The caller frees the array and its strings.
 */
int wb_child_env(const char *const *set, char ***out);
void wb_free_strv(char **v);

/* ------------------------------------------------------------------------ */
/* The Go baselines (go.c)                                                   */
/* ------------------------------------------------------------------------ */

/*
 * The path of the Go baseline name ("weft-go-sleep", "weft-go-spawn"):
 * from $WEFT_BENCH_GO_DIR when it is set, else from the folder this build
 * made them in. 0 with the path in out[0..len); -ENOENT when there is none,
 * with why in why[0..whylen), the words after "go: skipped: " ("Go not
 * found; install golang-go"). Measurements then skip their go case with
 * that message and keep their exit code.
 */
int wb_go_find(const char *name, char *out, size_t len, char *why, size_t whylen);

/* ------------------------------------------------------------------------ */
/* Sleep measurements in child processes (cmd_sleep.c)                       */
/* ------------------------------------------------------------------------ */

/*
 * One measurement of `sleep` that runs in child processes: the parent fills
 * the inputs; wb_sleep_children fills the rest. `embroidery` and `sleep`
 * with several backends or repetitions both use it.
 */
/* The figures a sleep run keeps per repetition besides its wall time: m[] of wb_sleep_run. */
enum {
  WB_M_THREADS,   /* os_threads: OS threads at the sample time */
  WB_M_RSS,       /* peak_rss_kb */
  WB_M_IN_FLIGHT, /* in_flight_peak: the most jobs inside their sleep at once */
  WB_M_CPU_USER,  /* cpu_user_s: the process's user CPU time over the run */
  WB_M_CPU_SYS,   /* cpu_sys_s: its system CPU time */
  WB_M_MINFLT,    /* minflt: its minor page faults over the run */
  WB_NMETRICS
};
/* Their JSON keys, in the order above; each also has KEY_samples on an aggregated record. */
extern const char *const wb_sleep_metric_keys[WB_NMETRICS];

typedef struct wb_sleep_run {
  /* inputs */
  const char *backend;    /* weft, omp, threads, seq, go */
  int64_t jobs, sleep_ms; /* as for `weft-bench sleep` */
  const char *set[3];     /* "NAME=value" for the child's environment, NULL-ended */
  const char *label;      /* for the progress line */
  /* results, one entry per repetition that ran */
  json_value *rec;        /* the first child's record (metadata and all); NULL until one ran */
  double *elapsed_ms;     /* samples */
  double *m[WB_NMETRICS]; /* the other figures' samples (NaN where a child had none) */
  size_t n;               /* samples so far */
  bool failed;            /* a child failed or reported status "failed" */
  char error[256];        /* the first failure, for the report */
} wb_sleep_run;

/*
 * Run repeat repetitions of nruns measurements, each in a fresh child,
 * interleaved (repetition r starts with measurement r mod nruns). Returns 0
 * when every child ran (runs may still be failed), or a negative errno.
 */
int wb_sleep_children(wb_sleep_run *runs, size_t nruns, int64_t repeat, int64_t sample_ms);

/*
 * Turn a run into its aggregated record: the first child's record with the
 * timing keys and the figures of wb_sleep_metric_keys replaced by summaries
 * over the repetitions (medians, and the samples), status and command set. Returns the record (owned by
 * the caller, taken from run->rec) or NULL when no child produced one.
 */
json_value *wb_sleep_aggregate(wb_sleep_run *run, const char *command);
void wb_sleep_run_free(wb_sleep_run *run);

#endif /* WEFT_BENCH_H */
