/*
 * This file contains the driver of weft-bench's measuring commands
 * (driver.c). Every command is a table that plugs into it: its options, the
 * choices its --backend (or --case) picks from, the figures each
 * repetition gives besides the wall time, and a few functions; the driver
 * does what every command shares:
 *
 *   1. the options: --help, --json, --repeat R and the pick list are the
 *      driver's; the command's own go to its option();
 *   2. the pick list: known names, none twice, exit 3 for a choice this
 *      build lacks; prepare() checks the values and makes the runs (one per
 *      picked choice unless it makes its own: grain's backend x size);
 *   3. the command line that repeats the measurement (args(): every value
 *      spelled out), "command: ..." on stderr, and setup();
 *   4. the warm-up (WB_CMD_WARMUP): each run once, untimed, in order;
 *   5. R repetitions, the runs interleaved (repetition r starts with run
 *      r mod N), each calling run() for one sample: its wall time and the
 *      command's figures; with WB_CMD_WARMUP_EACH each such call directly
 *      follows an untimed one (phase WB_WARMUP) of the same run, so that
 *      every repetition is measured as its warm-up leaves the backend, not
 *      as the other runs left it; a case that cannot run here is skipped
 *      with a message (once per reason), a failure is told on stderr;
 *   6. finish(), then either the JSON records (one per run: the common keys,
 *      the command's record(), the timing keys, every figure as its median
 *      with its min, max and samples as the metric table asks, the
 *      environment fingerprint, the command line) or the command's report();
 *   7. the exit code: 1 when a run that was not skipped failed or never ran.
 *
 * A run is the unit of a record: one backend, or one backend at one size.
 * Failure has two kinds. A repetition that ran and gave its figures but
 * went wrong (requests failed, a child run reported status "failed") sets
 * s->failed: its figures count, the run's record says "failed", and the
 * repetitions go on. A repetition that could not give figures returns a
 * negative errno: the run is failed and not run again.
 */
#ifndef WEFT_BENCH_DRIVER_H
#define WEFT_BENCH_DRIVER_H

#include "bench.h"
#include "weft.h"

#define WB_MAX_METRICS 12
#define WB_MAX_CHOICES 16

/* The `unavailable` of a choice that needs OpenMP: NULL in a build with it. */
#ifdef _OPENMP
#define WB_NEEDS_OPENMP NULL
#else
#define WB_NEEDS_OPENMP "this weft-bench was built without OpenMP"
#endif

/* A choice of the command's pick option (--backend, --case). */
typedef struct wb_choice {
  const char *name;        /* the option's value; the record's backend (or case) */
  const char *label;       /* for people; NULL: the name */
  const char *unavailable; /* why this build lacks it (asking for it exits 3); NULL when it has it */
  int id;                  /* the command's own number for it */
} wb_choice;

/* A figure that every repetition gives besides its wall time. */
typedef struct wb_metric {
  const char *key; /* the record's key: the median over the repetitions */
  unsigned flags;  /* WB_METRIC_* */
  double step;     /* the record keeps multiples of this (0: the figure as measured) */
} wb_metric;

enum {
  WB_METRIC_MINMAX = 1u << 0,  /* also KEY_min and KEY_max */
  WB_METRIC_SAMPLES = 1u << 1, /* also KEY_samples: every repetition's, in the order run */
  WB_METRIC_MAX = 1u << 2,     /* KEY is the largest repetition's (a worst case), not the median */
  WB_METRIC_QUIET = 1u << 3,   /* not written: the command reads it itself */
};

/* What run() returns besides 0 and a negative errno: the case cannot run here (s->error says why). */
#define WB_SKIP 1

typedef enum wb_phase { WB_WARMUP, WB_MEASURE } wb_phase;

/* One repetition's results, filled by run(). The driver clears it before each call. */
typedef struct wb_sample {
  double ms;                /* the wall time: what compare compares */
  double m[WB_MAX_METRICS]; /* the command's figures, in the order of its metric table; NAN: none */
  bool failed;              /* it ran and gave its figures, but something in it failed (error says what) */
  bool quiet;      /* the failure was told already (a child's stderr) or is in the report: no message */
  bool idle;       /* a warm-up that warmed nothing (none asked for, or the program warms itself up) */
  char error[256]; /* why it failed or was skipped */
  json_t *rec;     /* the record of the child process it ran in, or NULL; the driver takes it */
} wb_sample;

/* A measurement: the unit of a record. */
typedef struct wb_run {
  /* set by the command */
  const char *name;   /* the record's backend (or case); messages */
  const char *label;  /* progress and reports; NULL: the name */
  const char *family; /* a skip says "FAMILY: skipped: why" once per family and reason ("go"); NULL: name */
  int id;             /* the choice's id, or the command's own */
  int64_t arg;        /* the command's: an index, a size */
  void *state;        /* the command's, one per run; its teardown frees it */
  /* filled by the driver */
  double *ms;                /* the wall time of each measured repetition, n of them */
  double *m[WB_MAX_METRICS]; /* each figure of each measured repetition */
  size_t n;                  /* measured repetitions */
  size_t warmups;            /* warm-up calls that did warm something up (the record's warmup_runs) */
  json_t *base;              /* the first child record, for runs made in child processes */
  bool skipped;              /* cannot run here: no record, and the exit code stays */
  bool failed;               /* the record says "failed", and the exit code is 1 */
  bool stopped;              /* a repetition gave no figures: the run is not run again */
  bool warmup_error;         /* error is the warm-up's (a measured failure's text replaces it) */
  char error[320];           /* the first failure ("warm-up: " and a sample's), or why it was skipped */
  weft_stats stats; /* weft's: counters summed over the measured repetitions, gauges as after the last */
  bool has_stats;   /* a weft backend: stats is filled (in process, or from its child records) */
} wb_run;

typedef struct wb_driver wb_driver;

typedef struct wb_command {
  const char *name;         /* "sleep": messages, the record's "bench" */
  const char *help;         /* what --help prints */
  const wb_opt *opts;       /* the command's own options (ids below WB_OPT_DRIVER), NULL-ended; or NULL */
  const char *pick;         /* the option that picks choices: "backend", "case"; NULL: none */
  const wb_choice *choices; /* what it picks from, in the default order */
  size_t nchoices;
  const char *pick_default; /* the list when the option is not given; NULL: every choice this build has */
  const char *name_key;     /* the record's key for a run's name: "backend" when NULL */
  const wb_metric *metrics; /* the figures of a sample, in the order of wb_sample.m */
  size_t nmetrics;
  int64_t max_repeat;
  unsigned flags; /* WB_CMD_* */
  /* What the command does; d->ctx is its state. Every function but run may be NULL. */
  int (*option)(wb_driver *d, int id, const char *arg); /* one of opts: 0 or an exit code */
  int (*prepare)(wb_driver *d);                         /* check the values, make runs: 0 or an exit code */
  int (*args)(wb_driver *d, wb_args *a);                /* the words after the command's name (not --json) */
  int (*setup)(wb_driver *d); /* after "command:": servers, files; 0 or an exit code */
  int (*run)(wb_driver *d, wb_run *r, wb_phase phase, wb_sample *s); /* 0, WB_SKIP or a negative errno */
  void (*finish)(wb_driver *d);                                      /* after the last repetition */
  int (*record)(wb_driver *d, const wb_run *r, json_t *rec);         /* the command's keys: 0 or -ENOMEM */
  void (*report)(wb_driver *d);                                      /* the output for people */
  void (*teardown)(wb_driver *d); /* after everything, whenever prepare ran */
} wb_command;

enum {
  WB_CMD_WARMUP = 1u << 0,            /* each run first runs once, untimed (WB_WARMUP) */
  WB_CMD_ARGS_AFTER_WARMUP = 1u << 1, /* the warm-up chooses values that the command line spells out */
  WB_CMD_WARMUP_EACH = 1u << 2,       /* and every timed repetition directly follows one more (WB_WARMUP) */
};

/* The command's options take ids below this one. */
#define WB_OPT_DRIVER 1000

struct wb_driver {
  const wb_command *cmd;
  void *ctx;                     /* the command's state */
  bool json;                     /* --json */
  bool stats;                    /* --stats: print weft's counters of each weft run after the report */
  int64_t repeat;                /* --repeat (1 by default) */
  size_t picked[WB_MAX_CHOICES]; /* indices into cmd->choices, in the order given */
  size_t npicked;
  wb_run *runs;
  size_t nruns;
  char *command;     /* the command line that repeats the measurement */
  int exit_code;     /* a command may raise it (never lower it) */
  char told[8][400]; /* the skip messages printed, so that each is printed once */
  size_t ntold;
};

/* Parse argv (argv[0] is the command's name), measure, report; returns the exit code. */
int wb_drive(const wb_command *cmd, void *ctx, int argc, char **argv);

/* A new run (for prepare); NULL when out of memory. */
wb_run *wb_add_run(wb_driver *d, const char *name, int id);

/* The i-th picked choice. */
const wb_choice *wb_picked(const wb_driver *d, size_t i);

/* Leave a run out: "weft-bench CMD: FAMILY: skipped: why" on stderr (once per family and reason). */
void wb_skip(wb_driver *d, wb_run *r, const char *why);

/* The command line's pieces the driver knows: "--backend a,b" (the picked choices) and "--repeat R". */
void wb_args_picked(const wb_driver *d, wb_args *a);
void wb_args_repeat(const wb_driver *d, wb_args *a);

/* The first run with this name that has measured repetitions, or NULL. */
const wb_run *wb_find_run(const wb_driver *d, const char *name);

/* The summary of a run's wall times, and of its figure m. */
wb_summary wb_run_ms(const wb_run *r);
wb_summary wb_run_metric(const wb_run *r, size_t m);
const char *wb_run_label(const wb_run *r);

/*
 * The cells that the network tables (http, echo) share, from r's figures
 * first..first+5: latency p50, p90, p99 (medians of each repetition's), the
 * largest latency, CPU us per operation and cores used (medians).
 */
void wb_print_net_cells(const wb_run *r, size_t first);

/* Fill s->error (printf-style) and return rc: `return wb_fail(s, -EIO, "...", ...)`. */
int wb_fail(wb_sample *s, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif /* WEFT_BENCH_DRIVER_H */
