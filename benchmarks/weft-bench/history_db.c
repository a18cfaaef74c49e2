/*
 * This file contains the history database of weft-bench (regress.h): one
 * SQLite file that CI keeps between jobs, holding every record that
 * `history add` was given, keyed as compare keys measurements.
 *
 * The tables (version 1, PRAGMA user_version):
 *
 *   record(id, digest UNIQUE, measurement, label, env, unit, commit_sha,
 *          date, value, failed, text)
 *
 * One row per record: compare's key and label, the environment fingerprint
 * as canonical JSON (sorted keys, without weft's version and commit, which
 * are what a history is about), "ms" or "ns_per_op", the commit and date it
 * is filed under, the median (NULL when the run failed) and the record's
 * text as given. digest is FNV-1a of the text: adding the same results file
 * twice (a CI job retried) keeps each record once. A series is one
 * (measurement, env): records of unlike environments are never mixed.
 *
 * Two writers. CI jobs of two branches may add at once: the database is in
 * WAL mode, every add is one BEGIN IMMEDIATE transaction (the write lock is
 * taken up front, so two adds cannot deadlock upgrading read locks), and a
 * busy timeout makes the second wait for the first instead of failing. The
 * tables are made inside the first writer's transaction, after it checked
 * user_version, so two first writers do not race to make them.
 *
 * A newer database (user_version above WB_HISTORY_VERSION) is refused: an
 * older weft-bench must not write rows a newer one would misread. A file that
 * is not SQLite, or an SQLite file without weft-bench's tables at a nonzero
 * version, is refused too, and left as it was.
 */
#define _POSIX_C_SOURCE 200809L
#include "regress.h"

#include <errno.h>
#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

/* How long a writer waits for another to finish: longer than any add takes. */
#define BUSY_TIMEOUT_MS 60000

struct wb_hdb {
  sqlite3 *db;
  char *path;
};

static const char schema_sql[] =
    "CREATE TABLE IF NOT EXISTS record("
    " id INTEGER PRIMARY KEY,"
    " digest TEXT NOT NULL UNIQUE,"
    " measurement TEXT NOT NULL,"
    " label TEXT NOT NULL,"
    " env TEXT NOT NULL,"
    " unit TEXT NOT NULL,"
    " commit_sha TEXT NOT NULL,"
    " date TEXT NOT NULL,"
    " value REAL,"
    " failed INTEGER NOT NULL,"
    " text TEXT NOT NULL);"
    "CREATE INDEX IF NOT EXISTS record_series ON record(measurement, env, date);";

static int fail_db(wb_hdb *h, const char *what, char *err, size_t errlen) {
  snprintf(err, errlen, "%s: %s: %s", h->path, what, sqlite3_errmsg(h->db));
  int code = sqlite3_errcode(h->db);
  return code == SQLITE_BUSY || code == SQLITE_LOCKED ? -EBUSY : code == SQLITE_NOMEM ? -ENOMEM : -EIO;
}

static int user_version(wb_hdb *h, int *v, char *err, size_t errlen) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(h->db, "PRAGMA user_version", -1, &st, NULL) != SQLITE_OK)
    return fail_db(h, "cannot read its version", err, errlen);
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) *v = sqlite3_column_int(st, 0);
  sqlite3_finalize(st);
  return rc == SQLITE_ROW ? 0 : fail_db(h, "cannot read its version", err, errlen);
}

/* Check the version inside the caller's transaction; make the tables at version 0. */
static int check_schema(wb_hdb *h, bool make, char *err, size_t errlen) {
  int v = 0, rc = user_version(h, &v, err, errlen);
  if (rc < 0) return rc;
  if (v > WB_HISTORY_VERSION) {
    snprintf(err, errlen,
             "%s: a history of version %d, newer than this weft-bench's (%d): use a newer weft-bench",
             h->path, v, WB_HISTORY_VERSION);
    return -EPROTO;
  }
  sqlite3_stmt *st;
  bool has = false;
  if (sqlite3_prepare_v2(h->db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'record'", -1,
                         &st, NULL) != SQLITE_OK)
    return fail_db(h, "cannot read its tables", err, errlen);
  has = sqlite3_step(st) == SQLITE_ROW;
  sqlite3_finalize(st);
  if (v == WB_HISTORY_VERSION && has) return 0;
  if (v != 0 || (has && v == 0)) {
    snprintf(err, errlen, "%s: an SQLite database, but not a weft-bench history (version %d)", h->path, v);
    return -EPROTO;
  }
  if (!make) {
    snprintf(err, errlen, "%s: an empty database: no history yet (weft-bench history add makes one)",
             h->path);
    return -ENOENT;
  }
  char sql[64];
  snprintf(sql, sizeof sql, "PRAGMA user_version = %d", WB_HISTORY_VERSION);
  if (sqlite3_exec(h->db, schema_sql, NULL, NULL, NULL) != SQLITE_OK ||
      sqlite3_exec(h->db, sql, NULL, NULL, NULL) != SQLITE_OK)
    return fail_db(h, "cannot make the tables", err, errlen);
  return 0;
}

int wb_hdb_open(const char *path, bool create, wb_hdb **out, char *err, size_t errlen) {
  wb_hdb *h = calloc(1, sizeof *h);
  if (!h || !(h->path = strdup(path))) {
    free(h);
    snprintf(err, errlen, "out of memory");
    return -ENOMEM;
  }
  int flags = create ? SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE : SQLITE_OPEN_READONLY;
  int rc = 0;
  if (sqlite3_open_v2(path, &h->db, flags, NULL) != SQLITE_OK) {
    rc = h->db ? fail_db(h, "cannot open", err, errlen) : -ENOMEM;
    if (!h->db) snprintf(err, errlen, "out of memory");
    goto fail;
  }
  sqlite3_busy_timeout(h->db, BUSY_TIMEOUT_MS);
  /*
   * Reading it first tells "not a database" apart from everything else,
   * before anything is written; a newer or foreign database is refused
   * before WAL mode would change its header. One read transaction for both
   * looks: between two separate reads, another writer's first add could
   * commit its tables, and the version read before it (0) with the tables
   * read after it looked like a foreign database.
   */
  int v;
  bool in_tx = sqlite3_exec(h->db, "BEGIN", NULL, NULL, NULL) == SQLITE_OK;
  if ((rc = user_version(h, &v, err, errlen)) == 0) rc = check_schema(h, false, err, errlen);
  if (in_tx) sqlite3_exec(h->db, rc == 0 ? "COMMIT" : "ROLLBACK", NULL, NULL, NULL);
  if (rc == -ENOENT && create) rc = 0;
  if (rc < 0) goto fail;
  /*
   * Two writers creating one file at once both switch it to WAL; the switch
   * takes an exclusive lock, and SQLite answers the loser SQLITE_BUSY at once,
   * without its busy handler (waiting could deadlock a connection that holds
   * a shared lock). So the switch is tried again, for as long as the busy
   * timeout: the winner's switch is quick, and after it the mode is WAL.
   */
  int wal = create ? SQLITE_BUSY : SQLITE_OK;
  for (int waited = 0; wal == SQLITE_BUSY || wal == SQLITE_LOCKED; waited += 5) {
    wal = sqlite3_exec(h->db, "PRAGMA journal_mode = WAL", NULL, NULL, NULL);
    if ((wal != SQLITE_BUSY && wal != SQLITE_LOCKED) || waited >= BUSY_TIMEOUT_MS) break;
    sqlite3_sleep(5);
  }
  if (wal != SQLITE_OK) {
    rc = fail_db(h, "cannot switch to WAL", err, errlen);
    goto fail;
  }
  *out = h;
  return 0;
fail:
  wb_hdb_close(h);
  return rc;
}

void wb_hdb_close(wb_hdb *h) {
  if (!h) return;
  sqlite3_close(h->db);
  free(h->path);
  free(h);
}

int wb_hdb_add(wb_hdb *h, const wb_hrecord *recs, size_t n, size_t *added, char *err, size_t errlen) {
  *added = 0;
  if (sqlite3_exec(h->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
    return fail_db(h, "cannot start a transaction", err, errlen);
  int rc = check_schema(h, true, err, errlen);
  sqlite3_stmt *st = NULL;
  if (rc == 0 && sqlite3_prepare_v2(h->db,
                                    "INSERT OR IGNORE INTO record(digest, measurement, label, env, unit, "
                                    "commit_sha, date, value, failed, text) VALUES (?,?,?,?,?,?,?,?,?,?)",
                                    -1, &st, NULL) != SQLITE_OK)
    rc = fail_db(h, "cannot prepare", err, errlen);
  for (size_t i = 0; rc == 0 && i < n; i++) {
    const wb_hrecord *r = &recs[i];
    char digest[40];
    snprintf(digest, sizeof digest, "%016llx-%zu",
             (unsigned long long)wb_fnv1a(WB_FNV_INIT, r->text, strlen(r->text)), strlen(r->text));
    sqlite3_reset(st);
    sqlite3_bind_text(st, 1, digest, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, r->key, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, r->label, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, r->env, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 5, r->unit, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 6, r->commit, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 7, r->date, -1, SQLITE_STATIC);
    if (r->failed || !isfinite(r->value))
      sqlite3_bind_null(st, 8);
    else
      sqlite3_bind_double(st, 8, r->value);
    sqlite3_bind_int(st, 9, r->failed);
    sqlite3_bind_text(st, 10, r->text, -1, SQLITE_STATIC);
    if (sqlite3_step(st) != SQLITE_DONE)
      rc = fail_db(h, "cannot add a record", err, errlen);
    else
      *added += (size_t)sqlite3_changes(h->db);
  }
  sqlite3_finalize(st);
  if (rc == 0 && sqlite3_exec(h->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
    rc = fail_db(h, "cannot commit", err, errlen);
  if (rc < 0) {
    sqlite3_exec(h->db, "ROLLBACK", NULL, NULL, NULL);
    *added = 0;
  }
  return rc;
}

void wb_hseries_free(wb_hseries *s, size_t n) {
  for (size_t i = 0; s && i < n; i++) {
    free(s[i].key);
    free(s[i].label);
    free(s[i].env);
    free(s[i].unit);
    for (size_t j = 0; j < s[i].n; j++) {
      free(s[i].pts[j].commit);
      free(s[i].pts[j].date);
    }
    free(s[i].pts);
  }
  free(s);
}

static char *col(sqlite3_stmt *st, int c) {
  const unsigned char *t = sqlite3_column_text(st, c);
  return strdup(t ? (const char *)t : "");
}

/*
 * Close a point: the median of the values pooled at its commit. vals holds them;
 * the point's commit and date are already set.
 */
static void close_point(wb_hpoint *p, const double *vals, size_t nv) {
  p->value = wb_median(vals, nv);
  p->runs = nv;
}

int wb_hdb_series(wb_hdb *h, wb_hseries **out, size_t *nout, char *err, size_t errlen) {
  *out = NULL;
  *nout = 0;
  sqlite3_stmt *st;
  /* The first date of a commit orders it: a commit measured again later keeps its place. */
  if (sqlite3_prepare_v2(h->db,
                         "SELECT r.measurement, r.env, r.label, r.unit, r.commit_sha, f.first, r.value "
                         "FROM record r JOIN (SELECT measurement, env, commit_sha, MIN(date) AS first "
                         "FROM record WHERE value IS NOT NULL GROUP BY measurement, env, commit_sha) f "
                         "USING (measurement, env, commit_sha) WHERE r.value IS NOT NULL "
                         "ORDER BY r.measurement, r.env, f.first, r.commit_sha, r.id",
                         -1, &st, NULL) != SQLITE_OK)
    return fail_db(h, "cannot read", err, errlen);
  wb_hseries *s = NULL;
  size_t n = 0, cap = 0, nv = 0, vcap = 0;
  double *vals = NULL;
  int rc = 0, step;
  while ((step = sqlite3_step(st)) == SQLITE_ROW && rc == 0) {
    const char *key = (const char *)sqlite3_column_text(st, 0),
               *env = (const char *)sqlite3_column_text(st, 1);
    const char *commit = (const char *)sqlite3_column_text(st, 4);
    wb_hseries *cur = n ? &s[n - 1] : NULL;
    bool new_series = !cur || strcmp(cur->key, key) != 0 || strcmp(cur->env, env) != 0;
    bool new_point = new_series || strcmp(cur->pts[cur->n - 1].commit, commit ? commit : "") != 0;
    if (new_point && cur) close_point(&cur->pts[cur->n - 1], vals, nv);
    if (new_point) nv = 0;
    if (new_series) {
      if (n == cap) {
        size_t c2 = cap ? 2 * cap : 16;
        wb_hseries *p = realloc(s, c2 * sizeof *p);
        if (!p) {
          rc = -ENOMEM;
          break;
        }
        s = p;
        cap = c2;
      }
      cur = &s[n++];
      memset(cur, 0, sizeof *cur);
      cur->key = col(st, 0);
      cur->env = col(st, 1);
      cur->label = col(st, 2);
      cur->unit = col(st, 3);
      if (!cur->key || !cur->env || !cur->label || !cur->unit) rc = -ENOMEM;
    }
    if (rc == 0 && new_point) {
      wb_hpoint *p = realloc(cur->pts, (cur->n + 1) * sizeof *p);
      if (!p) {
        rc = -ENOMEM;
        break;
      }
      cur->pts = p;
      p[cur->n] = (wb_hpoint){col(st, 4), col(st, 5), NAN, 0};
      cur->n++;
    }
    if (rc == 0 && nv == vcap) {
      vcap = vcap ? 2 * vcap : 16;
      double *p = realloc(vals, vcap * sizeof *p);
      if (!p) {
        rc = -ENOMEM;
        break;
      }
      vals = p;
    }
    if (rc == 0) vals[nv++] = sqlite3_column_double(st, 6);
  }
  if (rc == 0 && step != SQLITE_DONE && step != SQLITE_ROW) rc = fail_db(h, "cannot read", err, errlen);
  if (rc == 0 && n) close_point(&s[n - 1].pts[s[n - 1].n - 1], vals, nv);
  sqlite3_finalize(st);
  free(vals);
  if (rc < 0) {
    if (rc == -ENOMEM) snprintf(err, errlen, "out of memory");
    wb_hseries_free(s, n);
    return rc;
  }
  *out = s;
  *nout = n;
  return 0;
}

int wb_hdb_each(wb_hdb *h, int (*fn)(void *arg, const char *text, const char *commit, const char *date),
                void *arg, char *err, size_t errlen) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(h->db, "SELECT text, commit_sha, date FROM record ORDER BY date, id", -1, &st,
                         NULL) != SQLITE_OK)
    return fail_db(h, "cannot read", err, errlen);
  int rc = 0, step = SQLITE_DONE;
  while (rc == 0 && (step = sqlite3_step(st)) == SQLITE_ROW)
    rc = fn(arg, (const char *)sqlite3_column_text(st, 0), (const char *)sqlite3_column_text(st, 1),
            (const char *)sqlite3_column_text(st, 2));
  if (rc == 0 && step != SQLITE_DONE) rc = fail_db(h, "cannot read", err, errlen);
  sqlite3_finalize(st);
  return rc;
}
