/*
 * This file contains what weft-bench's regression tracking shares: the
 * statistics of paired runs (pairstats.c, for `pair`), E-divisive change
 * points (changepoint.c, for `history changes` and the report) and the
 * history database (history_db.c, SQLite, for `history` and `report`).
 * The commands are cmd_pair.c, cmd_history.c and cmd_report.c; they judge
 * and key measurements as compare does (compare.h).
 */
#ifndef WEFT_BENCH_REGRESS_H
#define WEFT_BENCH_REGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "compare.h"

/* ------------------------------------------------------------------------ */
/* Paired ratios (pairstats.c)                                               */
/* ------------------------------------------------------------------------ */

/*
 * What n pairs (base[i], neu[i]) say about the ratio neu / base. Each pair
 * ran back to back on the same machine, so the machine's slow minutes move
 * both sides and cancel in the ratio. The estimate is Hodges-Lehmann's on
 * the log ratios (the median of their Walsh averages) and the interval the
 * Wilcoxon signed-rank one that goes with it: exact for n <= 60, the normal
 * approximation beyond. Neither assumes the noise is normal; only that a
 * log ratio is as likely above its centre as below.
 */
typedef struct wb_paired {
  size_t n;            /* pairs used (both sides positive numbers) */
  double ratio;        /* the estimate of neu / base */
  double median_ratio; /* the plain median of the n ratios, for the table */
  double low, high;    /* the interval; -INFINITY/INFINITY when n is too small for the level */
  double coverage;     /* the interval's exact coverage (at least the level asked for); NAN without one */
  double p_value;      /* two-sided signed-rank p-value of "no change" (1 when n == 0) */
} wb_paired;

/*
 * The paired statistics of base[0..n) and neu[0..n) at confidence level
 * (0.5 < level < 1). Pairs where either side is not a positive number are
 * left out. Returns 0 or -ENOMEM (n up to a few thousand: the Walsh
 * averages are n(n+1)/2 doubles).
 */
int wb_paired_ratio(const double *base, const double *neu, size_t n, double level, wb_paired *out);

/* P(T+ <= t) for the signed-rank statistic of n untied pairs: the exact distribution (n <= 60). */
double wb_signrank_cdf(size_t n, double t);

/* ------------------------------------------------------------------------ */
/* Change points (changepoint.c)                                             */
/* ------------------------------------------------------------------------ */

typedef struct wb_cp_opts {
  double alpha;        /* a change point must have a permutation p-value below this */
  size_t permutations; /* permutations per test (the smallest p is 1 / (permutations + 1)) */
  size_t min_size;     /* points on each side of a change, at least 2 */
  uint64_t seed;       /* the permutations' generator: the same series gives the same answer */
} wb_cp_opts;

#define WB_CP_OPTS_INIT                                                                                      \
  { 0.01, 499, 4, 0x9e3779b97f4a7c15ull }

/* One change point: x[index] is the first point of the new level. */
typedef struct wb_cp {
  size_t index;
  double q;       /* the E-statistic of the split (larger: the two sides differ more) */
  double p_value; /* the permutation test's */
} wb_cp;

/*
 * The change points of x[0..n) by E-divisive means (Matteson and James,
 * 2014, as Apache Otava (formerly Hunter) and R's ecp use it), with the
 * permutation test for significance. At most max are stored in cps, in
 * increasing index order; *found gets their count. Returns 0, -EINVAL for
 * bad options, -ENOMEM.
 */
int wb_changepoints(const double *x, size_t n, const wb_cp_opts *o, wb_cp *cps, size_t max, size_t *found);

/* ------------------------------------------------------------------------ */
/* The history database (history_db.c)                                       */
/* ------------------------------------------------------------------------ */

/* The version of the database's tables (PRAGMA user_version). */
#define WB_HISTORY_VERSION 1

typedef struct wb_hdb wb_hdb;

/* One point of a series: a commit, its date, and the median of the runs at that commit. */
typedef struct wb_hpoint {
  char *commit, *date;
  double value;
  size_t runs; /* records pooled into this point */
} wb_hpoint;

/* The history of one measurement in one environment, oldest first. */
typedef struct wb_hseries {
  char *key;   /* compare's key of the measurement */
  char *label; /* compare's label */
  char *env;   /* the fingerprint as wb_env_fingerprint_text writes it */
  char *unit;  /* "ms" or "ns_per_op" */
  wb_hpoint *pts;
  size_t n;
} wb_hseries;

/* A record to add: compare's key, label, fingerprint and value of one JSON line, with its commit and date. */
typedef struct wb_hrecord {
  char *key, *label, *env, *unit, *commit, *date, *text;
  double value; /* NAN for a failed run */
  bool failed;
} wb_hrecord;

/*
 * Open (and with create, make) the database at path. The tables are made
 * inside the first writer's transaction, so two first writers do not both
 * make them. A database whose user_version is newer than this weft-bench's,
 * or that is not a weft-bench history, is refused. 0 with *out; else a
 * negative errno with why in err.
 */
int wb_hdb_open(const char *path, bool create, wb_hdb **out, char *err, size_t errlen);
void wb_hdb_close(wb_hdb *db);

/*
 * Add recs[0..n) in one transaction (all or none). Records already there
 * (the same text) are kept once. *added gets how many were new. Waits for
 * another writer (a busy timeout), so two CI jobs adding at once both land.
 */
int wb_hdb_add(wb_hdb *db, const wb_hrecord *recs, size_t n, size_t *added, char *err, size_t errlen);

/* Every series, by key then environment; failed runs left out. The caller frees with wb_hseries_free. */
int wb_hdb_series(wb_hdb *db, wb_hseries **out, size_t *n, char *err, size_t errlen);
void wb_hseries_free(wb_hseries *s, size_t n);

/* Call fn with every stored record's text, its commit and date, oldest first; stops at fn's nonzero. */
int wb_hdb_each(wb_hdb *db, int (*fn)(void *arg, const char *text, const char *commit, const char *date),
                void *arg, char *err, size_t errlen);

/* ------------------------------------------------------------------------ */
/* Levels and steps of a series                                              */
/* ------------------------------------------------------------------------ */

/* A change point with what it changed: the medians of the levels either side. */
typedef struct wb_step {
  size_t index;
  double before, after, change_pct, p_value;
} wb_step;

/*
 * The change points of s's values that move the level by at least
 * min_change percent, with their levels (medians between neighbouring
 * change points). A weaker change is dropped and the levels recomputed
 * without it. *steps is malloc'd (the caller frees it). 0 or a negative errno.
 */
int wb_series_steps(const wb_hseries *s, const wb_cp_opts *o, double min_change, wb_step **steps,
                    size_t *nsteps);

#endif /* WEFT_BENCH_REGRESS_H */
