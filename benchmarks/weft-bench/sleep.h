/*
 * This file contains the sleep measurement (sleep.c) that `weft-bench
 * sleep` and `weft-bench embroidery` share: N jobs that each sleep, on a
 * backend, in this process or in a fresh child process, giving the wall
 * time and the figures of wb_sleep_metrics.
 */
#ifndef WEFT_BENCH_SLEEP_H
#define WEFT_BENCH_SLEEP_H

#include "driver.h"

/* The figures of a sleep sample, in the order of wb_sleep_metrics (the records' keys). */
enum {
  WB_M_THREADS,   /* os_threads: OS threads at the sample time */
  WB_M_RSS,       /* peak_rss_kb */
  WB_M_IN_FLIGHT, /* in_flight_peak: the most jobs inside their sleep at once */
  WB_M_CPU_USER,  /* cpu_user_s: the process's user CPU time over the run */
  WB_M_CPU_SYS,   /* cpu_sys_s: its system CPU time */
  WB_M_MINFLT,    /* minflt: its minor page faults over the run */
  WB_SLEEP_NMETRICS
};
extern const wb_metric wb_sleep_metrics[WB_SLEEP_NMETRICS];

/* What one sleep measurement is. */
typedef struct wb_sleep_job {
  const char *backend;    /* weft, omp, threads, seq, go */
  int64_t jobs, sleep_ms; /* as for `weft-bench sleep` */
  int64_t sample_ms;      /* when the OS threads are counted */
  const char *const *set; /* child runs: "NAME=value" for its environment, NULL-ended; may be NULL */
} wb_sleep_job;

/* What a run in this process gives besides the sample: the record's other keys. */
typedef struct wb_sleep_extra {
  double threads_at_ms; /* when the OS threads were counted */
  int64_t created;      /* threads backend: threads created (all, or those before a failure) */
  char go_version[64];  /* go: the runtime that ran it ("" otherwise) */
  int64_t gomaxprocs;   /* go: its GOMAXPROCS (-1 otherwise) */
} wb_sleep_extra;

/*
 * Measure in this process: s gets the wall time and the figures, x the
 * rest. Returns 0 (s->failed when the backend failed part way, as
 * pthread_create at the thread limit), WB_SKIP for go without a Go
 * baseline, or a negative errno (the go program failed).
 */
int wb_sleep_here(const wb_sleep_job *j, wb_sample *s, wb_sleep_extra *x);

/* The extra keys of a record made in this process: threads_created, os_threads_at_ms, go_version, gomaxprocs.
 */
int wb_sleep_extra_record(const wb_sleep_job *j, const wb_sleep_extra *x, json_t *rec);

/*
 * Measure in a fresh child process (this program, `sleep ... --json`, with
 * j->set in its environment): s gets its figures and its record (s->rec).
 * Returns 0 (s->failed when the child reported a failure), or a negative
 * errno when it gave no record.
 */
int wb_sleep_child(const wb_sleep_job *j, wb_sample *s);

/* The words of the child's command line: sleep --backend B --jobs N --sleep-ms MS --sample-ms T. */
void wb_sleep_child_args(const wb_sleep_job *j, wb_args *a);

#endif /* WEFT_BENCH_SLEEP_H */
