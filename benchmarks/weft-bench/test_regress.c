/*
 * This file contains the CUnit suite of weft-bench's regression tracking
 * (regress.h): the paired statistics on fixed samples with answers worked
 * out independently (the signed-rank tables; Walsh averages by brute force),
 * the change-point code on series with known steps, and the history
 * database: two writers at once, a file that is not a database, a newer
 * version, all refused with nothing lost.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "regress.h"

const char *wb_argv0 = "test_regress";

#define NEAR(a, b) CU_ASSERT(fabs((a) - (b)) < 1e-9)

/* ------------------------------------------------------------------------ */
/* Paired statistics                                                         */
/* ------------------------------------------------------------------------ */

static void test_signrank_table(void) {
  /* n = 10: 25 of the 1024 sign patterns have T+ <= 8, 33 have T+ <= 9 (the 5% two-sided critical value is
   * 8). */
  NEAR(wb_signrank_cdf(10, 8), 25.0 / 1024);
  NEAR(wb_signrank_cdf(10, 9), 33.0 / 1024);
  NEAR(wb_signrank_cdf(6, 0), 1.0 / 64);
  NEAR(wb_signrank_cdf(6, 21), 1.0);
  CU_ASSERT_EQUAL(wb_signrank_cdf(6, -1), 0);
  /* The normal approximation beyond 60 pairs is centred where the exact one is. */
  CU_ASSERT(fabs(wb_signrank_cdf(61, 61.0 * 62 / 4) - 0.5) < 0.01);
  CU_ASSERT(fabs(wb_signrank_cdf(60, 60.0 * 61 / 4) - 0.5) < 0.02);
}

static void test_paired_known(void) {
  /* Ten rounds, worked out by brute force: the 55 Walsh averages of the log ratios. */
  const double base[10] = {100, 200, 50, 10, 100, 100, 100, 100, 100, 100};
  const double r[10] = {1.03, 0.99, 1.05, 1.02, 1.08, 1.01, 0.97, 1.04, 1.06, 1.025};
  double neu[10];
  for (int i = 0; i < 10; i++) neu[i] = base[i] * r[i];
  wb_paired p;
  CU_ASSERT_EQUAL(wb_paired_ratio(base, neu, 10, 0.95, &p), 0);
  CU_ASSERT_EQUAL(p.n, 10);
  CU_ASSERT(fabs(p.ratio - 1.0274969586329683) < 1e-12);
  CU_ASSERT(fabs(p.median_ratio - 1.0275) < 1e-12);
  /* c = 8: [W_(9), W_(47)], coverage 1 - 2 * 25/1024. */
  CU_ASSERT(fabs(p.low - 1.0043903623591777) < 1e-12);
  CU_ASSERT(fabs(p.high - 1.05) < 1e-12);
  NEAR(p.coverage, 1 - 50.0 / 1024);
  /* T+ = 47: two-sided p = 2 P(T+ >= 47) = 50/1024. */
  NEAR(p.p_value, 50.0 / 1024);
}

static void test_paired_small(void) {
  const double base[6] = {100, 100, 100, 100, 100, 100}, neu[6] = {101, 102, 103, 104, 105, 106};
  wb_paired p;
  /* n = 6 at 95%: P(T+ <= 0) = 1/64 <= 0.025 < P(T+ <= 1): the interval is [min, max] of the Walsh averages.
   */
  CU_ASSERT_EQUAL(wb_paired_ratio(base, neu, 6, 0.95, &p), 0);
  CU_ASSERT(fabs(p.low - 1.01) < 1e-12);
  CU_ASSERT(fabs(p.high - 1.06) < 1e-12);
  NEAR(p.p_value, 2.0 / 64);
  /* Five pairs reach no 95% interval: unbounded, said so. */
  CU_ASSERT_EQUAL(wb_paired_ratio(base, neu, 5, 0.95, &p), 0);
  CU_ASSERT(isinf(p.low) && isinf(p.high));
  CU_ASSERT(isnan(p.coverage));
  /* Identical sides: ratio 1, p 1. */
  CU_ASSERT_EQUAL(wb_paired_ratio(base, base, 6, 0.95, &p), 0);
  NEAR(p.ratio, 1);
  NEAR(p.p_value, 1);
  /* Pairs with a side that is not a positive number are left out. */
  const double b2[4] = {100, NAN, 0, 100}, n2[4] = {110, 100, 100, -1};
  CU_ASSERT_EQUAL(wb_paired_ratio(b2, n2, 4, 0.95, &p), 0);
  CU_ASSERT_EQUAL(p.n, 1);
  NEAR(p.ratio, 1.1);
  CU_ASSERT_EQUAL(wb_paired_ratio(base, neu, 6, 1.5, &p), -EINVAL);
}

/* ------------------------------------------------------------------------ */
/* Change points                                                             */
/* ------------------------------------------------------------------------ */

/* A level plus deterministic noise of +-amp (xorshift from seed). */
static void series(double *x, size_t n, const size_t *at, const double *level, size_t nlevels, double amp,
                   uint64_t seed) {
  for (size_t i = 0; i < n; i++) {
    size_t l = 0;
    while (l + 1 < nlevels && i >= at[l]) l++;
    double u = (double)(wb_xorshift64s(&seed) >> 11) / 9007199254740992.0;
    x[i] = level[l] * (1 + amp * (2 * u - 1));
  }
}

static void test_cp_one_step(void) {
  double x[60];
  size_t at[1] = {40};
  double lv[2] = {100, 108};
  series(x, 60, at, lv, 2, 0.02, 7);
  wb_cp_opts o = WB_CP_OPTS_INIT;
  wb_cp cps[8];
  size_t found;
  CU_ASSERT_EQUAL(wb_changepoints(x, 60, &o, cps, 8, &found), 0);
  CU_ASSERT_EQUAL(found, 1);
  CU_ASSERT_EQUAL(cps[0].index, 40);
  CU_ASSERT(cps[0].p_value < o.alpha);
}

static void test_cp_two_steps(void) {
  double x[90];
  size_t at[2] = {30, 60};
  double lv[3] = {100, 90, 115};
  series(x, 90, at, lv, 3, 0.02, 11);
  wb_cp_opts o = WB_CP_OPTS_INIT;
  wb_cp cps[8];
  size_t found;
  CU_ASSERT_EQUAL(wb_changepoints(x, 90, &o, cps, 8, &found), 0);
  CU_ASSERT_EQUAL_FATAL(found, 2);
  CU_ASSERT_EQUAL(cps[0].index, 30);
  CU_ASSERT_EQUAL(cps[1].index, 60);
}

static void test_cp_flat(void) {
  /* Ten flat series of 60 points with +-5% noise: no change point in any. */
  size_t total = 0;
  for (uint64_t seed = 1; seed <= 10; seed++) {
    double x[60];
    double lv[1] = {100};
    series(x, 60, NULL, lv, 1, 0.05, seed * 7919);
    wb_cp_opts o = WB_CP_OPTS_INIT;
    wb_cp cps[8];
    size_t found;
    CU_ASSERT_EQUAL(wb_changepoints(x, 60, &o, cps, 8, &found), 0);
    total += found;
  }
  CU_ASSERT_EQUAL(total, 0);
}

static void test_cp_steps_and_levels(void) {
  /* wb_series_steps: levels as medians either side, and --min-change drops a small real step. */
  wb_hseries s = {0};
  wb_hpoint pts[80];
  double x[80];
  size_t at[2] = {30, 55};
  double lv[3] = {100, 110, 112};
  series(x, 80, at, lv, 3, 0.003, 3);
  for (size_t i = 0; i < 80; i++) pts[i] = (wb_hpoint){"c", "d", x[i], 1};
  s.pts = pts;
  s.n = 80;
  wb_cp_opts o = WB_CP_OPTS_INIT;
  wb_step *st;
  size_t ns;
  CU_ASSERT_EQUAL(wb_series_steps(&s, &o, 0, &st, &ns), 0);
  CU_ASSERT_EQUAL_FATAL(ns, 2);
  CU_ASSERT_EQUAL(st[0].index, 30);
  CU_ASSERT(fabs(st[0].before - 100) < 0.5 && fabs(st[0].after - 110) < 0.5);
  CU_ASSERT(fabs(st[0].change_pct - 10) < 0.6);
  free(st);
  CU_ASSERT_EQUAL(wb_series_steps(&s, &o, 5, &st, &ns), 0);
  CU_ASSERT_EQUAL_FATAL(ns, 1);
  CU_ASSERT_EQUAL(st[0].index, 30);
  /* Without the 2% step, the level after is everything from 30 on. */
  CU_ASSERT(st[0].after > 110 && st[0].after < 112.5);
  free(st);
}

static void test_cp_bad_input(void) {
  double x[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, NAN};
  wb_cp cps[2];
  size_t found = 99;
  wb_cp_opts o = WB_CP_OPTS_INIT;
  CU_ASSERT_EQUAL(wb_changepoints(x, 10, &o, cps, 2, &found), -EINVAL);
  o.alpha = 0;
  CU_ASSERT_EQUAL(wb_changepoints(x, 9, &o, cps, 2, &found), -EINVAL);
  o = (wb_cp_opts)WB_CP_OPTS_INIT;
  o.min_size = 1;
  CU_ASSERT_EQUAL(wb_changepoints(x, 9, &o, cps, 2, &found), -EINVAL);
  /* Too short to split: no change, no error. */
  o = (wb_cp_opts)WB_CP_OPTS_INIT;
  CU_ASSERT_EQUAL(wb_changepoints(x, 7, &o, cps, 2, &found), 0);
  CU_ASSERT_EQUAL(found, 0);
}

/* ------------------------------------------------------------------------ */
/* The history database                                                      */
/* ------------------------------------------------------------------------ */

static char dir[256];

static void path_of(char *out, size_t len, const char *name) { snprintf(out, len, "%s/%s", dir, name); }

/* n records of one measurement at commits first.., values 100 + i. */
static int add_some(const char *db_path, const char *tag, size_t first, size_t n) {
  wb_hrecord *r = calloc(n, sizeof *r);
  char(*texts)[128] = calloc(n, sizeof *texts);
  char(*commits)[32] = calloc(n, sizeof *commits);
  char(*dates)[32] = calloc(n, sizeof *dates);
  for (size_t i = 0; i < n; i++) {
    snprintf(texts[i], sizeof texts[i], "{\"bench\":\"t\",\"tag\":\"%s\",\"i\":%zu}", tag, first + i);
    snprintf(commits[i], sizeof commits[i], "%s%04zu", tag, first + i);
    snprintf(dates[i], sizeof dates[i], "2026-01-01T00:%02zu:%02zuZ", (first + i) / 60 % 60,
             (first + i) % 60);
    r[i] = (wb_hrecord){"k", "t", "{}", "ms", commits[i], dates[i], texts[i], 100.0 + (double)i, false};
  }
  wb_hdb *db;
  char err[256];
  size_t added = 0;
  int rc = wb_hdb_open(db_path, true, &db, err, sizeof err);
  if (rc == 0) {
    rc = wb_hdb_add(db, r, n, &added, err, sizeof err);
    wb_hdb_close(db);
  }
  if (rc < 0) fprintf(stderr, "add_some: %s\n", err);
  free(r);
  free(texts);
  free(commits);
  free(dates);
  return rc < 0 ? rc : (int)added;
}

static int count_one(void *arg, const char *text, const char *commit, const char *date) {
  (void)text;
  (void)commit;
  (void)date;
  (*(size_t *)arg)++;
  return 0;
}

static size_t count_records(const char *db_path) {
  wb_hdb *db;
  char err[256];
  size_t n = 0;
  if (wb_hdb_open(db_path, false, &db, err, sizeof err) != 0) return (size_t)-1;
  wb_hdb_each(db, count_one, &n, err, sizeof err);
  wb_hdb_close(db);
  return n;
}

static void test_db_two_writers(void) {
  char p[300];
  path_of(p, sizeof p, "two.db");
  unlink(p);
  /* Two processes, each adding 50 transactions of 10 records, at once. */
  pid_t kids[2];
  for (int k = 0; k < 2; k++) {
    if ((kids[k] = fork()) == 0) {
      int bad = 0;
      for (size_t t = 0; t < 50; t++) bad |= add_some(p, k ? "b" : "a", t * 10, 10) != 10;
      _exit(bad);
    }
  }
  for (int k = 0; k < 2; k++) {
    int st;
    CU_ASSERT_EQUAL(waitpid(kids[k], &st, 0), kids[k]);
    CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  CU_ASSERT_EQUAL(count_records(p), 1000);
  /* The same records again: kept once. */
  CU_ASSERT_EQUAL(add_some(p, "a", 0, 10), 0);
  CU_ASSERT_EQUAL(count_records(p), 1000);
  /* Series: one key, one environment, 1000 commits in date order. */
  wb_hdb *db;
  char err[256];
  wb_hseries *s;
  size_t n;
  CU_ASSERT_EQUAL_FATAL(wb_hdb_open(p, false, &db, err, sizeof err), 0);
  CU_ASSERT_EQUAL(wb_hdb_series(db, &s, &n, err, sizeof err), 0);
  CU_ASSERT_EQUAL_FATAL(n, 1);
  CU_ASSERT_EQUAL(s[0].n, 1000);
  for (size_t i = 1; i < s[0].n; i++) CU_ASSERT(strcmp(s[0].pts[i - 1].date, s[0].pts[i].date) <= 0);
  wb_hseries_free(s, n);
  wb_hdb_close(db);
}

/* The bytes of a file (up to cap), for "nothing changed". */
static size_t slurp(const char *p, char *buf, size_t cap) {
  FILE *f = fopen(p, "rb");
  if (!f) return 0;
  size_t n = fread(buf, 1, cap, f);
  fclose(f);
  return n;
}

static void test_db_not_a_database(void) {
  char p[300], before[256], after[256], err[256];
  path_of(p, sizeof p, "garbage.db");
  FILE *f = fopen(p, "wb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  for (int i = 0; i < 8; i++) fputs("this is not SQLite at all. ", f);
  fclose(f);
  size_t nb = slurp(p, before, sizeof before);
  wb_hdb *db = NULL;
  int rc = wb_hdb_open(p, true, &db, err, sizeof err);
  CU_ASSERT(rc < 0);
  CU_ASSERT(strstr(err, "not a database") != NULL);
  CU_ASSERT_EQUAL(slurp(p, after, sizeof after), nb);
  CU_ASSERT(memcmp(before, after, nb) == 0);
  CU_ASSERT(wb_hdb_open(p, false, &db, err, sizeof err) < 0);
  /* A missing file, read: an error, and no file made. */
  path_of(p, sizeof p, "missing.db");
  unlink(p);
  CU_ASSERT(wb_hdb_open(p, false, &db, err, sizeof err) < 0);
  CU_ASSERT(access(p, F_OK) != 0);
}

static void test_db_newer_and_foreign(void) {
  char p[300], err[256];
  path_of(p, sizeof p, "newer.db");
  unlink(p);
  CU_ASSERT_EQUAL(add_some(p, "n", 0, 3), 3);
  sqlite3 *raw;
  CU_ASSERT_EQUAL_FATAL(sqlite3_open(p, &raw), SQLITE_OK);
  CU_ASSERT_EQUAL(sqlite3_exec(raw, "PRAGMA user_version = 99", NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(raw);
  wb_hdb *db;
  CU_ASSERT_EQUAL(wb_hdb_open(p, true, &db, err, sizeof err), -EPROTO);
  CU_ASSERT(strstr(err, "newer") != NULL);
  CU_ASSERT_EQUAL(wb_hdb_open(p, false, &db, err, sizeof err), -EPROTO);
  /* Put the version back: the three records are all there. */
  CU_ASSERT_EQUAL_FATAL(sqlite3_open(p, &raw), SQLITE_OK);
  sqlite3_exec(raw, "PRAGMA user_version = 1", NULL, NULL, NULL);
  sqlite3_close(raw);
  CU_ASSERT_EQUAL(count_records(p), 3);
  /* Another program's SQLite file: refused, its table untouched. */
  path_of(p, sizeof p, "foreign.db");
  unlink(p);
  CU_ASSERT_EQUAL_FATAL(sqlite3_open(p, &raw), SQLITE_OK);
  sqlite3_exec(raw, "CREATE TABLE record(x); INSERT INTO record VALUES (42)", NULL, NULL, NULL);
  sqlite3_close(raw);
  CU_ASSERT_EQUAL(wb_hdb_open(p, true, &db, err, sizeof err), -EPROTO);
  CU_ASSERT(strstr(err, "not a weft-bench history") != NULL);
}

static const weft_test tests[] = {
    {"signrank_table", test_signrank_table},
    {"paired_known", test_paired_known},
    {"paired_small", test_paired_small},
    {"cp_one_step", test_cp_one_step},
    {"cp_two_steps", test_cp_two_steps},
    {"cp_flat", test_cp_flat},
    {"cp_steps_and_levels", test_cp_steps_and_levels},
    {"cp_bad_input", test_cp_bad_input},
    {"db_two_writers", test_db_two_writers},
    {"db_not_a_database", test_db_not_a_database},
    {"db_newer_and_foreign", test_db_newer_and_foreign},
    {NULL, NULL},
};

int main(int argc, char **argv) {
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/weft-regress-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  int rc = weft_test_run(argc, argv, "regress", tests);
  /* The scratch files: the databases and their WAL companions. */
  static const char *const names[] = {"two.db", "garbage.db", "newer.db", "foreign.db"};
  char p[300];
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    static const char *const sfx[] = {"", "-wal", "-shm"};
    for (size_t k = 0; k < 3; k++) {
      snprintf(p, sizeof p, "%s/%s%s", dir, names[i], sfx[k]);
      unlink(p);
    }
  }
  rmdir(dir);
  return rc;
}
