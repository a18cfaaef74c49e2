/*
 * This file contains what the parts of weft-bench share: exit codes, the
 * option parser, strings and the command line, process statistics, the
 * environment fingerprint, statistics over samples, progress on a terminal,
 * the child runner that gives a measurement a fresh process, counted
 * failures, latency percentiles, checksums. The driver that runs every
 * measuring command is driver.h's; JSON Lines is jsonl.h's.
 *
 * weft-bench is one program split by concern:
 *
 *   main.c            the command table and the top-level --help
 *   driver.c          the driver: options, cases, warm-up, interleaved repetitions,
 *                     samples and their summaries, records, exit codes (driver.h)
 *   cli.c             option parsing, numbers, lists, shell quoting of the command line
 *   jsonl.c           JSON Lines on jansson: numbers, setters, one record a line (jsonl.h)
 *   meta.c            what goes with every record: the build, weft, the environment variables
 *   machine.c         the machine: CPU, cores and affinity, kernel, THP, virtualisation, CPU quota
 *   proc.c            cores, OS threads (/proc/self/task), peak RSS (VmHWM), CPU time, the sampler
 *   stats.c           min, median, max, spread, ratios over samples
 *   report.c          cells and ratio lines of the human tables
 *   progress.c        one status line on a terminal
 *   child.c           re-exec /proc/self/exe for a measurement, read its JSON line
 *   go.c              where the Go baselines (benchmarks/go) are, or why they are not
 *   errors.c          failures counted by many threads at once
 *   latency.c         latency percentiles
 *   hash.c            FNV-1a and xorshift64*: the cases' checksums and fixed inputs
 *   sock.c, net.h     client sockets: descriptor limit, addresses, connect, transfers
 *   server.c, server.h  the loopback servers: a fiber or a thread per connection
 *   http.c, http.h    the HTTP/1.1 client and server handler
 *   sleep.c, sleep.h  the sleep measurement, in this process or a child (sleep, embroidery)
 *   cmd_sleep.c       weft-bench sleep
 *   cmd_embroidery.c  weft-bench embroidery
 *   cmd_spawn.c       weft-bench spawn
 *   cmd_gpars.c       weft-bench gpars (backends); gpars.h, gpars_math.c, gpars_files.c, gpars_http.c (cases)
 *   cmd_http.c        weft-bench http
 *   cmd_echo.c        weft-bench echo
 *   cmd_grain.c       weft-bench grain
 *   cmd_serve.c       weft-bench serve: the HTTP server alone, for wrk (scripts/bench-net.sh)
 *   cmd_compare.c     weft-bench compare; compare_read.c its reader, compare_env.c its environment
 *                     check, junit.c its JUnit XML
 *   cmd_pair.c        weft-bench pair: BASE and NEW interleaved; pairstats.c its statistics (regress.h)
 *   cmd_history.c     weft-bench history: history_db.c the SQLite file, changepoint.c E-divisive means
 *   cmd_report.c      weft-bench report: one self-contained HTML file
 *   bench_cli_test.cmake  the bench_cli CTest
 */
#ifndef WEFT_BENCH_H
#define WEFT_BENCH_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "jsonl.h"

/* Exit codes, the same for every command (docs/weft-bench.md lists them). */
enum {
  WB_EXIT_OK = 0,
  WB_EXIT_FAIL = 1,        /* a measurement failed, or compare found a regression */
  WB_EXIT_USAGE = 2,       /* bad option, bad value, bad input file */
  WB_EXIT_UNAVAILABLE = 3, /* the feature is not in this build (yet) */
  WB_EXIT_UNLIKE = 4,      /* compare: the two runs' environments differ */
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
int wb_cmd_http(int argc, char **argv);
int wb_cmd_echo(int argc, char **argv);
int wb_cmd_grain(int argc, char **argv);
int wb_cmd_compare(int argc, char **argv);
int wb_cmd_serve(int argc, char **argv);
int wb_cmd_pair(int argc, char **argv);
int wb_cmd_history(int argc, char **argv);
int wb_cmd_report(int argc, char **argv);

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
 * opts ends with an entry whose name is NULL.
 */
int wb_opt_next(wb_optstate *st, const wb_opt *opts, const char **arg);

/* Print "weft-bench CMD: message (see weft-bench CMD --help)" on stderr; returns WB_EXIT_USAGE. */
int wb_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Parse an integer in [lo, hi] (decimal, no sign for unsigned use); false and a message on error. */
bool wb_parse_i64(const char *cmd, const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out);
/* Parse a number (decimal fraction allowed) in [lo, hi]. */
bool wb_parse_double(const char *cmd, const char *opt, const char *s, double lo, double hi, double *out);

/*
 * Parse a comma-separated list of names against names[0..nnames): each
 * known, none twice. chosen[] (nnames long) gets indices into names, in the
 * order given. Returns true, or false after a usage message that lists the
 * names.
 */
bool wb_parse_list(const char *cmd, const char *opt, const char *list, const char *const *names,
                   size_t nnames, size_t *chosen, size_t *nchosen);

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
 * The words of a command line, built one at a time (every word is copied).
 * An append that fails leaves err set, and the last call reports it, so
 * that a list of appends needs one check.
 */
typedef struct wb_args {
  char **v;
  size_t n, cap;
  int err; /* the first -ENOMEM */
} wb_args;

void wb_args_add(wb_args *a, const char *word);
void wb_args_addf(wb_args *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "--name" and the decimal value, as one more option. */
void wb_args_int(wb_args *a, const char *opt, int64_t v);
void wb_args_free(wb_args *a);

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
/* The CPUs of that mask as a list, "0-3,8" ("unknown" when it cannot be read). */
void wb_affinity_list(char *out, size_t len);

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
/* Its CPU time, user and system, in milliseconds. */
double wb_usage_cpu_ms(wb_usage u);

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
/* The environment of a record (meta.c, machine.c)                           */
/* ------------------------------------------------------------------------ */

/*
 * Add the environment fingerprint to a record: the machine (cores,
 * affinity, cpus_online, cpu_model, kernel, thp, thp_defrag, virtualization,
 * cpu_quota), the build (compiler, compiler_flags, build_type,
 * weft_compiler, openmp, openmp_runtime, weft_openmp, openmp_library,
 * weft_version, weft_header_version, git_commit), weft's set-up (fibers,
 * carriers, carriers_running, context_switch, stack_size, stack_guard,
 * io_uring), the recorded environment variables (env) and the date. Call it
 * after the measurement: asking weft whether fibers are available may start
 * its runtime, which must not be counted in another backend's threads.
 */
int wb_meta_add(json_t *rec);

/* The compiler that built weft-bench ("gcc 12.2.0", "Debian Clang 14.0.6"). */
const char *wb_compiler(void);

/* The machine's part of the fingerprint (machine.c): the keys listed above, added to rec. */
int wb_machine_add(json_t *rec);

/* ------------------------------------------------------------------------ */
/* Statistics over samples (stats.c)                                         */
/* ------------------------------------------------------------------------ */

typedef struct wb_summary {
  double min, median, max; /* NaN when no sample is a number */
  size_t n;                /* the samples that are numbers (NaN ones are left out) */
} wb_summary;

/* min, median (the mean of the middle two for an even count) and max of the numbers among v[0..n). */
wb_summary wb_summarize(const double *v, size_t n);

/* The median, the largest; NaN when there is none. */
double wb_median(const double *v, size_t n);
double wb_max(const double *v, size_t n);

/* (max - min) / median: how far apart the repetitions are; NaN without a positive median. */
double wb_spread(wb_summary s);

/* Round to microseconds when the value is in milliseconds: keeps the JSON short and exact. */
double wb_round_ms(double ms);

/* v rounded to a multiple of step (step 0: v itself). */
double wb_round_to(double v, double step);

/*
 * Put the timing keys on a record from samples in milliseconds: repeat,
 * elapsed_ms (the median), elapsed_ms_min, elapsed_ms_max, samples_ms.
 */
int wb_add_timing(json_t *rec, const double *samples_ms, size_t n);

/* Order in which repetition r (from 0) runs nb cases: rotated by r, so no case is always first. */
size_t wb_interleave(size_t r, size_t k, size_t nb);

/* Per-repetition ratios a[r] / b[r] into out (at least min(na, nb) long); returns how many. */
size_t wb_ratios(const double *a, size_t na, const double *b, size_t nb, double *out);

/*
 * Ratios of two cases' rates measured in the same run: key gets the ratio
 * of the medians (a over b), key_samples the ratio in each repetition (both
 * ran back to back there, so the machine's slow minutes cancel). Null when
 * either has no sample.
 */
int wb_json_add_ratio(json_t *rec, const char *key, const double *a, size_t na, const double *b, size_t nb);

/* ------------------------------------------------------------------------ */
/* The human tables (report.c)                                               */
/* ------------------------------------------------------------------------ */

/* Print " %W.Pf" of v, or a right-aligned "-" when v is NAN (a figure that no sample gave). */
void wb_print_cell(double v, int width, int prec);

/* Print "  NAME: 3.12x (per repetition: median 3.10x, min 2.80x, max 3.40x)" for a over b. */
void wb_print_ratio(const char *name, const double *a, size_t na, const double *b, size_t nb);

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
 * "sleep", NULL-ended) and the environment changed by set ("NAME=value", NULL-ended,
 * may be NULL). The child must print exactly one JSON object on stdout; it
 * is parsed into *rec (the caller decrefs it). The child's stderr passes
 * through. Returns 0; -ECHILD with a message when the child failed and
 * printed nothing usable; other negative errno values for spawn failures.
 * *exit_code gets the child's exit code (128 + signal when killed).
 */
int wb_child_run(char *const *args, const char *const *set, json_t **rec, int *exit_code);

/*
 * The same for another program: run path with argv (argv[0] included,
 * NULL-ended) and the environment changed by set, and parse the one JSON
 * object it prints into *rec. The Go baselines run through it.
 */
int wb_run_json(const char *path, char *const *argv, const char *const *set, json_t **rec, int *exit_code);

/*
 * What wb_run_json is built on, for a program that prints any number of
 * lines (pair's BASE and NEW): run path (searched in $PATH when search is
 * true) with argv and the environment changed by set, and collect its whole
 * stdout into *text (NUL-ended, malloc'd; *len bytes). Its stderr passes
 * through. Returns 0 with *exit_code set; a negative errno when it could
 * not be started (-ENOENT: no such program) or memory ran out.
 */
int wb_run_capture(const char *path, char *const *argv, const char *const *set, bool search, char **text,
                   size_t *len, int *exit_code);

/* The environment a child gets: this process's, with set applied. The caller frees the array and its strings.
 */
int wb_child_env(const char *const *set, char ***out);
void wb_free_strv(char **v);

/* ------------------------------------------------------------------------ */
/* The Go baselines (go.c)                                                   */
/* ------------------------------------------------------------------------ */

/*
 * The path of the Go baseline name ("weft-go-sleep", "weft-go-spawn", "weft-go-echo", "weft-go-httpget"):
 * from $WEFT_BENCH_GO_DIR when it is set, else from the folder this build
 * made them in. 0 with the path in out[0..len); -ENOENT when there is none,
 * with why in why[0..whylen), the words after "go: skipped: " ("Go not
 * found; install golang-go"). Measurements then skip their go case with
 * that message and keep their exit code.
 */
int wb_go_find(const char *name, char *out, size_t len, char *why, size_t whylen);

/* ------------------------------------------------------------------------ */
/* Counted failures (errors.c)                                               */
/* ------------------------------------------------------------------------ */

/* Failures counted by many fibers or threads at once; the first one is kept as text. */
typedef struct wb_errors {
  atomic_size_t count;
  atomic_flag first_taken; /* set by the one writer of `first` */
  atomic_bool first_ready; /* release: `first` is complete (pairs with the acquire in wb_errors_first) */
  char first[256];
} wb_errors;

void wb_errors_init(wb_errors *e);
/* Count one failure: "stage: weft_strerror(err)" (or detail, when not NULL, instead of the strerror). */
void wb_errors_add(wb_errors *e, const char *stage, int err, const char *detail);
size_t wb_errors_count(wb_errors *e);
/* The first failure's text, or "" when there was none. */
const char *wb_errors_first(wb_errors *e);

/* ------------------------------------------------------------------------ */
/* Latency (latency.c)                                                       */
/* ------------------------------------------------------------------------ */

typedef struct wb_latency {
  double p50, p90, p99, max; /* milliseconds (nearest rank); NAN when n == 0 */
  size_t n;                  /* samples that counted */
} wb_latency;

/* Percentiles of us[0..n) in microseconds; NAN entries (failed operations) are left out. Sorts us. */
wb_latency wb_latency_summary(float *us, size_t n);

/* ------------------------------------------------------------------------ */
/* Checksums and fixed inputs (hash.c)                                       */
/* ------------------------------------------------------------------------ */

/* FNV-1a, continued from h (start with WB_FNV_INIT). */
#define WB_FNV_INIT 0xcbf29ce484222325ull
uint64_t wb_fnv1a(uint64_t h, const void *p, size_t n);

/* The next value of xorshift64* (the kernels' input generator) from state *s (never 0). */
uint64_t wb_xorshift64s(uint64_t *s);

#endif /* WEFT_BENCH_H */
