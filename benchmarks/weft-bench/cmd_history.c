/*
 * This file contains `weft-bench history`: a history of runs per commit in
 * one SQLite file (history_db.c), and the change points in it
 * (changepoint.c), after asv and Apache Otava.
 *
 *   history add --db FILE [--commit SHA] [--date ISO] RESULTS.jsonl...
 *   history changes --db FILE [--json] [--min-change PCT] [--alpha A]
 *   history export --db FILE
 *
 * add reads every file completely (compare's reader checks and keys each
 * record) before it opens the database, so a bad file adds nothing; then
 * it adds all records in one transaction. A record is filed under --commit
 * (else its git_commit) and --date (else its date).
 *
 * changes takes each series (one measurement in one environment; records
 * of unlike environments are never mixed), one point per commit (the median
 * of that commit's runs), in date order, and reports each change point
 * that is significant at --alpha and moves the level by at least
 * --min-change percent: the first commit of the new level, the size of the
 * step, and the levels (medians) before and after.
 */
#define _POSIX_C_SOURCE 200809L
#include "regress.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char history_help[] =
    "usage: weft-bench history add --db FILE [--commit SHA] [--date ISO] RESULTS.jsonl...\n"
    "       weft-bench history changes --db FILE [--json] [--min-change PCT] [--alpha A]\n"
    "       weft-bench history export --db FILE\n"
    "\n"
    "A history of weft-bench records in one SQLite file, and the change points in it.\n"
    "\n"
    "  add      store the records of RESULTS files (JSON Lines of weft-bench --json),\n"
    "           all or none, filed under --commit (default: each record's git_commit)\n"
    "           and --date (ISO 8601 UTC, default: each record's date); a record\n"
    "           already stored is kept once; two adds at once both land\n"
    "  changes  per measurement and environment, one point per commit (the median of\n"
    "           its runs) in date order: the change points by E-divisive means with a\n"
    "           permutation test, each with its commit (the first of the new level),\n"
    "           the step and the levels before and after\n"
    "  export   every stored record as JSON Lines, oldest first\n"
    "\n"
    "  --db FILE         the history (made by the first add)\n"
    "  --commit SHA      add: file the records under this commit\n"
    "  --date ISO        add: and this date (YYYY-MM-DDTHH:MM:SSZ)\n"
    "  --json            changes: one JSON object per change point (JSON Lines)\n"
    "  --min-change PCT  changes: leave out steps smaller than PCT% (default 0)\n"
    "  --alpha A         changes: significance level of a change point (default 0.01)\n"
    "  --help            this text\n"
    "\n"
    "Exit codes: 0 ok, 2 bad input (a record that is not weft-bench's, a database\n"
    "that is not a weft-bench history or is newer than this weft-bench), 3 this\n"
    "weft-bench was built without SQLite.\n";

#ifndef WEFT_BENCH_HAVE_SQLITE

int wb_cmd_history(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      fputs(history_help, stdout);
      return WB_EXIT_OK;
    }
  }
  fprintf(stderr,
          "weft-bench history: not built: this weft-bench was built without SQLite (install libsqlite3-dev, "
          "which scripts/deps.sh base installs, and configure again)\n");
  return WB_EXIT_UNAVAILABLE;
}

#else

enum { OPT_HELP = 1, OPT_DB, OPT_COMMIT, OPT_DATE, OPT_JSON, OPT_MIN_CHANGE, OPT_ALPHA };

static const wb_opt history_opts[] = {
    {"help", false, OPT_HELP},  {"db", true, OPT_DB},      {"commit", true, OPT_COMMIT},
    {"date", true, OPT_DATE},   {"json", false, OPT_JSON}, {"min-change", true, OPT_MIN_CHANGE},
    {"alpha", true, OPT_ALPHA}, {NULL, false, 0},
};

typedef struct hist_opts {
  const char *sub, *db, *commit, *date;
  const char **files;
  size_t nfiles;
  bool json;
  double min_change, alpha;
} hist_opts;

/* A date as the history orders them: ISO 8601, UTC ("2026-01-31T12:00:00Z"; the time may be left out). */
static bool iso_date(const char *s) {
  static const char pat[] = "dddd-dd-ddTdd:dd:ddZ";
  size_t n = strlen(s);
  if (n != 10 && n != 20) return false;
  for (size_t i = 0; i < n; i++)
    if (pat[i] == 'd' ? !(s[i] >= '0' && s[i] <= '9') : s[i] != pat[i]) return false;
  return true;
}

static int parse(int argc, char **argv, hist_opts *o) {
  wb_optstate st;
  wb_opt_init(&st, argc, argv, "history");
  const char *arg;
  int id;
  if (!(o->files = calloc((size_t)argc + 1, sizeof *o->files)))
    return wb_usage_error("history", "out of memory");
  while ((id = wb_opt_next(&st, history_opts, &arg)) != WB_OPT_END) {
    switch (id) {
    case WB_OPT_ERROR:
      return WB_EXIT_USAGE;
    case WB_OPT_POSITIONAL:
      if (!o->sub)
        o->sub = arg;
      else
        o->files[o->nfiles++] = arg;
      break;
    case OPT_HELP:
      fputs(history_help, stdout);
      return WB_EXIT_OK;
    case OPT_DB:
      o->db = arg;
      break;
    case OPT_COMMIT:
      if (!*arg) return wb_usage_error("history", "--commit: empty");
      o->commit = arg;
      break;
    case OPT_DATE:
      if (!iso_date(arg))
        return wb_usage_error("history", "--date: '%s' is not YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ", arg);
      o->date = arg;
      break;
    case OPT_JSON:
      o->json = true;
      break;
    case OPT_MIN_CHANGE:
      if (!wb_parse_double("history", "min-change", arg, 0, 1e6, &o->min_change)) return WB_EXIT_USAGE;
      break;
    case OPT_ALPHA:
      if (!wb_parse_double("history", "alpha", arg, 1e-6, 0.5, &o->alpha)) return WB_EXIT_USAGE;
      break;
    }
  }
  if (!o->sub) return wb_usage_error("history", "needs a subcommand: add, changes or export");
  if (strcmp(o->sub, "add") && strcmp(o->sub, "changes") && strcmp(o->sub, "export"))
    return wb_usage_error("history", "unknown subcommand '%s' (add, changes, export)", o->sub);
  if (!o->db) return wb_usage_error("history", "%s needs --db FILE", o->sub);
  if (strcmp(o->sub, "add") == 0 && o->nfiles == 0)
    return wb_usage_error("history", "add needs RESULTS files");
  if (strcmp(o->sub, "add") != 0 && o->nfiles)
    return wb_usage_error("history", "%s takes no files ('%s')", o->sub, o->files[0]);
  if (strcmp(o->sub, "add") != 0 && (o->commit || o->date))
    return wb_usage_error("history", "--commit and --date are for add");
  return -1;
}

/* ------------------------------------------------------------------------ */
/* add                                                                       */
/* ------------------------------------------------------------------------ */

typedef struct hrecs {
  wb_hrecord *v;
  size_t n, cap;
} hrecs;

static void hrecs_free(hrecs *rs) {
  for (size_t i = 0; i < rs->n; i++) {
    wb_hrecord *r = &rs->v[i];
    free(r->key);
    free(r->label);
    free(r->env);
    free(r->unit);
    free(r->commit);
    free(r->date);
    free(r->text);
  }
  free(rs->v);
}

/* One record: checked and keyed by compare's reader, then filed. 0, or -EINVAL with why, or -ENOMEM. */
static int file_record(hrecs *rs, const json_t *rec, const char *line, size_t len, const hist_opts *o,
                       const char *now, char *why, size_t whylen) {
  wb_cmp_entries es = {0};
  int rc = wb_cmp_add_record(&es, rec, why, whylen);
  if (rc < 0) {
    wb_cmp_entries_free(&es);
    return rc;
  }
  const wb_cmp_entry *e = &es.v[0];
  const char *commit = o->commit ? o->commit : wb_json_get_str(rec, "git_commit");
  const char *date = o->date ? o->date : wb_json_get_str(rec, "date");
  if (date && !iso_date(date)) {
    snprintf(why, whylen, "\"date\" '%s' is not ISO 8601 UTC (give --date)", date);
    wb_cmp_entries_free(&es);
    return -EINVAL;
  }
  if (rs->n == rs->cap) {
    size_t cap = rs->cap ? 2 * rs->cap : 64;
    wb_hrecord *p = realloc(rs->v, cap * sizeof *p);
    if (!p) {
      wb_cmp_entries_free(&es);
      return -ENOMEM;
    }
    rs->v = p;
    rs->cap = cap;
  }
  wb_hrecord *r = &rs->v[rs->n++];
  memset(r, 0, sizeof *r);
  r->key = strdup(e->key);
  r->label = strdup(e->label);
  r->env = wb_env_fingerprint_text(e->fp);
  r->unit = strdup(e->per_op ? "ns_per_op" : "ms");
  r->commit = strdup(commit ? commit : "unknown");
  r->date = strdup(date ? date : now);
  r->text = strndup(line, len);
  r->failed = e->failed || !e->n;
  r->value = r->failed ? NAN : wb_median(e->samples, e->n);
  wb_cmp_entries_free(&es);
  if (!r->key || !r->label || !r->env || !r->unit || !r->commit || !r->date || !r->text) return -ENOMEM;
  return 0;
}

static int read_file(hrecs *rs, const char *path, const hist_opts *o, const char *now) {
  char *text;
  size_t len;
  int rc = wb_cmp_slurp("history", path, &text, &len);
  if (rc != 0) return rc;
  size_t lineno = 0, before = rs->n;
  for (size_t pos = 0; pos < len && rc == 0;) {
    const char *nl = memchr(text + pos, '\n', len - pos);
    size_t end = nl ? (size_t)(nl - text) : len, a = pos, b = end;
    lineno++;
    while (a < b && (text[a] == ' ' || text[a] == '\t' || text[a] == '\r')) a++;
    while (b > a && (text[b - 1] == ' ' || text[b - 1] == '\t' || text[b - 1] == '\r')) b--;
    if (a < b) {
      json_t *rec = NULL;
      char why[256];
      int r = wb_json_parse(text + a, b - a, &rec, why, sizeof why);
      if (r == 0) r = file_record(rs, rec, text + a, b - a, o, now, why, sizeof why);
      json_decref(rec);
      if (r < 0) {
        fprintf(stderr, "weft-bench history: %s:%zu: %s; nothing was added\n", path, lineno,
                r == -ENOMEM ? "out of memory" : why);
        rc = WB_EXIT_USAGE;
      }
    }
    pos = end + 1;
  }
  free(text);
  if (rc == 0 && rs->n == before) {
    fprintf(stderr, "weft-bench history: %s holds no records; nothing was added\n", path);
    rc = WB_EXIT_USAGE;
  }
  return rc;
}

static int cmd_add(const hist_opts *o) {
  char now[32];
  time_t t = time(NULL);
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(now, sizeof now, "%Y-%m-%dT%H:%M:%SZ", &tm);
  hrecs rs = {0};
  int rc = 0;
  for (size_t i = 0; i < o->nfiles && rc == 0; i++) rc = read_file(&rs, o->files[i], o, now);
  wb_hdb *db = NULL;
  char err[512];
  size_t added = 0;
  if (rc == 0) {
    int r = wb_hdb_open(o->db, true, &db, err, sizeof err);
    if (r == 0) r = wb_hdb_add(db, rs.v, rs.n, &added, err, sizeof err);
    if (r < 0) {
      fprintf(stderr, "weft-bench history: %s; nothing was added\n", err);
      rc = WB_EXIT_USAGE;
    } else {
      printf("history: %zu record%s added to %s (%zu already there)\n", added, added == 1 ? "" : "s", o->db,
             rs.n - added);
    }
  }
  wb_hdb_close(db);
  hrecs_free(&rs);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* changes and export                                                        */
/* ------------------------------------------------------------------------ */

/* A short name for an environment: the first 8 hex digits of its FNV-1a. */
static void env_id(const char *env, char out[9]) {
  snprintf(out, 9, "%08llx", (unsigned long long)(wb_fnv1a(WB_FNV_INIT, env, strlen(env)) >> 32));
}

static int print_change(const wb_hseries *s, const wb_step *st, bool json) {
  const wb_hpoint *p = &s->pts[st->index], *prev = &s->pts[st->index - 1];
  char id[9];
  env_id(s->env, id);
  if (!json) {
    printf("%s [env %s]: %+.1f%% at %s (%s): %.6g -> %.6g %s (p = %.3g; previous commit %s)\n", s->label, id,
           st->change_pct, p->commit, p->date, st->before, st->after, strcmp(s->unit, "ms") ? "ns/op" : "ms",
           st->p_value, prev->commit);
    return 0;
  }
  json_t *rec = json_object();
  int rc = rec ? 0 : -ENOMEM;
  if (rc == 0) rc = wb_json_set_int(rec, "schema", WB_SCHEMA);
  if (rc == 0) rc = wb_json_set_str(rec, "bench", "history-change");
  if (rc == 0) rc = wb_json_set_str(rec, "measurement", s->label);
  if (rc == 0) rc = wb_json_set_str(rec, "environment", id);
  if (rc == 0) rc = wb_json_set_str(rec, "commit", p->commit);
  if (rc == 0) rc = wb_json_set_str(rec, "date", p->date);
  if (rc == 0) rc = wb_json_set_str(rec, "previous_commit", prev->commit);
  if (rc == 0) rc = wb_json_set_int(rec, "index", (int64_t)st->index);
  if (rc == 0) rc = wb_json_set_int(rec, "points", (int64_t)s->n);
  if (rc == 0) rc = wb_json_set_num(rec, "change_pct", st->change_pct);
  if (rc == 0) rc = wb_json_set_num(rec, "before", st->before);
  if (rc == 0) rc = wb_json_set_num(rec, "after", st->after);
  if (rc == 0) rc = wb_json_set_str(rec, "unit", s->unit);
  if (rc == 0) rc = wb_json_set_num(rec, "p_value", st->p_value);
  if (rc == 0) rc = wb_json_print_line(rec, stdout);
  json_decref(rec);
  return rc;
}

static int cmd_changes(const hist_opts *o) {
  wb_hdb *db = NULL;
  wb_hseries *s = NULL;
  size_t n = 0, total = 0;
  char err[512];
  int rc = wb_hdb_open(o->db, false, &db, err, sizeof err);
  if (rc == 0) rc = wb_hdb_series(db, &s, &n, err, sizeof err);
  if (rc < 0) {
    fprintf(stderr, "weft-bench history: %s\n", err);
    wb_hdb_close(db);
    return WB_EXIT_USAGE;
  }
  wb_cp_opts co = WB_CP_OPTS_INIT;
  co.alpha = o->alpha;
  for (size_t i = 0; i < n && rc == 0; i++) {
    wb_step *st;
    size_t ns;
    /* The same series gives the same answer: the permutations are seeded by the series' key. */
    co.seed = wb_fnv1a(wb_fnv1a(WB_FNV_INIT, s[i].key, strlen(s[i].key)), s[i].env, strlen(s[i].env));
    rc = wb_series_steps(&s[i], &co, o->min_change, &st, &ns);
    for (size_t k = 0; rc == 0 && k < ns; k++) rc = print_change(&s[i], &st[k], o->json);
    total += ns;
    free(st);
  }
  if (rc < 0) fprintf(stderr, "weft-bench history: %s\n", strerror(-rc));
  if (rc == 0 && !o->json)
    printf("%zu change point%s in %zu series (alpha %g, min change %g%%)\n", total, total == 1 ? "" : "s", n,
           o->alpha, o->min_change);
  wb_hseries_free(s, n);
  wb_hdb_close(db);
  return rc < 0 ? WB_EXIT_FAIL : WB_EXIT_OK;
}

static int export_one(void *arg, const char *text, const char *commit, const char *date) {
  (void)arg;
  json_t *rec = NULL;
  char err[128];
  if (wb_json_parse(text, strlen(text), &rec, err, sizeof err) < 0) return -EIO;
  /* Filed under another commit or date than the record says: export says what the history holds. */
  int rc = wb_json_set_str(rec, "git_commit", commit);
  if (rc == 0) rc = wb_json_set_str(rec, "date", date);
  if (rc == 0) rc = wb_json_print_line(rec, stdout);
  json_decref(rec);
  return rc;
}

static int cmd_export(const hist_opts *o) {
  wb_hdb *db = NULL;
  char err[512];
  int rc = wb_hdb_open(o->db, false, &db, err, sizeof err);
  if (rc == 0) rc = wb_hdb_each(db, export_one, NULL, err, sizeof err);
  if (rc < 0)
    fprintf(stderr, "weft-bench history: %s\n",
            rc == -EIO      ? "a stored record is not JSON"
            : rc == -ENOMEM ? "out of memory"
                            : err);
  wb_hdb_close(db);
  return rc < 0 ? WB_EXIT_USAGE : WB_EXIT_OK;
}

int wb_cmd_history(int argc, char **argv) {
  hist_opts o = {.alpha = 0.01};
  int rc = parse(argc, argv, &o);
  if (rc < 0) {
    if (strcmp(o.sub, "add") == 0)
      rc = cmd_add(&o);
    else if (strcmp(o.sub, "changes") == 0)
      rc = cmd_changes(&o);
    else
      rc = cmd_export(&o);
  }
  free(o.files);
  return rc;
}

#endif /* WEFT_BENCH_HAVE_SQLITE */
