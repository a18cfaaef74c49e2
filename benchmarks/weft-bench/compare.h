/*
 * This file contains what `weft-bench compare` (cmd_compare.c) shares with
 * its environment check (compare_env.c) and its JUnit report (junit.c).
 */
#ifndef WEFT_BENCH_COMPARE_H
#define WEFT_BENCH_COMPARE_H

#include "bench.h"

/* ------------------------------------------------------------------------ */
/* The measurements of a results file (compare_read.c)                       */
/* ------------------------------------------------------------------------ */

/* The figures compared for information, besides the wall time. */
typedef struct wb_cmp_metric {
  const char *key;    /* the record's median; KEY_samples holds its samples */
  bool higher_better; /* in_flight_peak: more jobs sleeping at once is the point */
  double min_change;  /* smaller absolute changes are "same" */
} wb_cmp_metric;
#define WB_CMP_NMETRICS 6
extern const wb_cmp_metric wb_cmp_metrics[WB_CMP_NMETRICS];

typedef struct wb_figure_samples {
  double *v;
  size_t n;
} wb_figure_samples;

/* One measurement of a file: every record of it pooled. */
typedef struct wb_cmp_entry {
  char *key;       /* the key fields' text joined by '\x1f': equal keys, same measurement */
  char *label;     /* "sleep weft jobs=8 sleep_ms=20" for the table */
  char *classname; /* "weft-bench.BENCH": the JUnit classname */
  char *command;   /* the first record's "command" (the line that repeats it), or NULL */
  json_t *fp;      /* the first record's environment fingerprint (compare_env.c) */
  double *samples;
  size_t n;
  double min, max; /* from elapsed_ms_min/max when a record has no samples_ms */
  bool failed;     /* some record of it has status "failed" */
  bool matched;
  bool per_op;                          /* samples are ns per operation (ns_per_op_samples), not ms */
  wb_figure_samples m[WB_CMP_NMETRICS]; /* the informational figures' samples, pooled like the times */
} wb_cmp_entry;

typedef struct wb_cmp_entries {
  wb_cmp_entry *v;
  size_t n, cap;
} wb_cmp_entries;

/*
 * Read a JSON Lines file of weft-bench records into es, pooling the records
 * of one measurement. Returns 0, or WB_EXIT_USAGE after a message naming
 * file:line (an unreadable file, a line that is not a record, no records).
 */
int wb_cmp_read(const char *path, wb_cmp_entries *es);
void wb_cmp_entries_free(wb_cmp_entries *es);

/*
 * The pieces of wb_cmp_read, for the commands that read records from
 * elsewhere (pair: a child's stdout; history: one record at a time). cmd
 * names the command in messages ("weft-bench CMD: ...").
 *
 * wb_cmp_slurp: the whole file into *text (malloc'd; the caller frees it).
 * wb_cmp_read_text: the records of text[0..len) into es, name standing for
 *   the file in messages; 0 or WB_EXIT_USAGE after a message.
 * wb_cmp_add_record: validate one record and pool it into es (a new entry
 *   or the one of its measurement); 0, -EINVAL with why filled, -ENOMEM.
 */
int wb_cmp_slurp(const char *cmd, const char *path, char **text, size_t *len);
int wb_cmp_read_text(const char *cmd, const char *name, const char *text, size_t len, wb_cmp_entries *es);
int wb_cmp_add_record(wb_cmp_entries *es, const json_t *rec, char *why, size_t whylen);

/* ------------------------------------------------------------------------ */
/* Verdicts (cmd_compare.c)                                                  */
/* ------------------------------------------------------------------------ */

/* A measurement's verdict: compare's words, also used by the report against a base file. */
typedef struct wb_cmp_verdict {
  const char *word; /* same, faster, noise, SLOWER, FAILED, failed-both, fixed, only-base, only-new */
  bool regression;  /* SLOWER or FAILED: exit code 1 */
  double base_med, new_med, change_pct;
} wb_cmp_verdict;

/* compare's verdict on one measurement (either side may be NULL) at threshold percent. */
wb_cmp_verdict wb_cmp_judge(const wb_cmp_entry *base, const wb_cmp_entry *neu, double threshold);

/* ------------------------------------------------------------------------ */
/* The environment check (compare_env.c)                                    */
/* ------------------------------------------------------------------------ */

/*
 * A record's fingerprint as compare keeps it: the fields that must be equal
 * for two runs to be comparable, and the weft version and commit, which are
 * expected to differ and are only reported. A new reference to the values
 * of rec (decref it), or NULL when out of memory.
 */
json_t *wb_env_fingerprint(const json_t *rec);

/*
 * A fingerprint as one canonical text (compact JSON, sorted keys) without
 * weft's version and commit: equal texts, the same environment. The
 * history keys its series by it. malloc'd; NULL when out of memory.
 */
char *wb_env_fingerprint_text(const json_t *fp);

/* One field that differs between the two sides. */
typedef struct wb_env_diff {
  char *field;      /* "thp", or "env.OMP_WAIT_POLICY" for a recorded environment variable */
  char *base, *neu; /* the values as JSON text; "(not set)" for an unset variable */
  size_t pairs;     /* measurements that differ so */
} wb_env_diff;

typedef struct wb_env_check {
  wb_env_diff *diffs;
  size_t ndiffs, cap;
  size_t pairs;               /* matched measurements checked */
  unsigned fields;            /* bit f: field f was recorded on both sides somewhere */
  char *base_weft, *new_weft; /* "0.1.0 (2dc5a32)", from the first pair */
  int err;                    /* -ENOMEM once something could not be kept */
} wb_env_check;

/* Compare the fingerprints of one matched measurement. */
void wb_env_check_pair(wb_env_check *c, const json_t *base_fp, const json_t *new_fp);
/* "cpu_model, cores, ..." of the fields that were compared, into b. */
int wb_env_checked_fields(const wb_env_check *c, wb_str *b);
/*
 * The environment's verdict, for compare and pair: "same environment (...)"
 * or the fields that differ, each with how many measurements showed it when
 * counts is set. refused is the line that says the sides differ when
 * allowed is false ("weft-bench compare: the runs were ...").
 */
void wb_env_print(const wb_env_check *ec, bool allowed, bool counts, const char *refused, FILE *f);
void wb_env_check_free(wb_env_check *c);

/* ------------------------------------------------------------------------ */
/* JUnit XML (junit.c)                                                       */
/* ------------------------------------------------------------------------ */

/* One test case: a measurement (or the environment check). */
typedef struct wb_junit_case {
  const char *classname, *name;
  double time_s;       /* the new run's median, in seconds; 0 when it is not a time */
  const char *failure; /* the failure's type ("SLOWER", "FAILED"); NULL when it passed */
  const char *skipped; /* why it was not judged ("only in the base file"); NULL otherwise */
  char *message;       /* one line: the verdict and the figures */
  char *output;        /* more lines for <system-out> (the other figures); may be NULL */
} wb_junit_case;

/*
 * Write cases as one JUnit <testsuite> named suite, with properties (name,
 * value pairs, NULL-ended) into path. Returns 0 or a negative errno (with a
 * message on stderr).
 */
int wb_junit_write(const char *path, const char *suite, const char *const *properties,
                   const wb_junit_case *cases, size_t ncases);

#endif /* WEFT_BENCH_COMPARE_H */
