/*
 * This file contains `weft-bench compare BASE.json NEW.json`: it reads two
 * JSON Lines files that weft-bench wrote, matches measurements by what was
 * measured (bench, case, backend, jobs, sleep_ms, loops, items, and the
 * http/echo parameters: requests, concurrency, keepalive, connections,
 * messages, size; spawn's batch and n; and whether fibers ran), and says
 * for each whether the median wall time changed. A record that gives a time
 * per operation (ns_per_op: spawn's) is compared by that instead, so that
 * runs that made different numbers of operations (spawn's --count, or the
 * pmap calls its warm-up chose) still compare.
 *
 * A measurement is a regression ("SLOWER", exit 1) when both hold:
 *   - its median got slower by more than --threshold percent (default 10), and
 *   - the samples do not overlap: the new minimum is above the base maximum.
 * The second condition is a rank test in its simplest form: the samples are
 * completely separated, the most extreme outcome of the Mann-Whitney U test
 * (U = 0). By chance alone that happens with probability 1/C(m+n, n): 0.05 for
 * 3 repetitions each, 0.004 for 5 each. With one repetition each it cannot
 * tell noise from change, and only the threshold decides (docs/weft-bench.md).
 * A slowdown past the threshold whose samples overlap is reported as "noise"
 * and does not fail. A measurement whose new run failed, where the base run
 * succeeded, is a regression too.
 *
 * Records of the same measurement that appear more than once in one file
 * (runs appended with >>) are pooled: their samples are merged.
 *
 * The other figures that sleep and embroidery records carry (peak RSS, CPU
 * time, page faults, OS threads, jobs in flight) are compared the same way,
 * each in its own direction (lower is better, but more jobs in flight is
 * better), and reported as information only: they never change the exit
 * code, since a gate on them would fail runs that only the wall time
 * decided before. Changes smaller than a fixed amount per figure (10 ms of
 * CPU, 100 faults, 256 KiB) are "same" whatever their percentage: a run
 * that used 1 ms of system time against 0 is not twice as bad.
 */
#define _POSIX_C_SOURCE 200809L
#include "bench.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char compare_help[] =
    "usage: weft-bench compare BASE.json NEW.json [--threshold PCT] [--json]\n"
    "\n"
    "Compare two JSON Lines files written by weft-bench --json. Measurements are\n"
    "matched by bench, case, backend, jobs, sleep_ms, loops, items, requests,\n"
    "concurrency, keepalive, connections, messages, size, batch, n and fibers;\n"
    "records of one measurement that repeat within a file are pooled. Records\n"
    "with ns_per_op (spawn) are compared by their ns per operation, marked [ns/op].\n"
    "\n"
    "  --threshold PCT  slowdown of the median that counts (default 10)\n"
    "  --json           one JSON object per measurement instead of the table\n"
    "  --help           this text\n"
    "\n"
    "Verdicts: same, faster, noise (past the threshold but the samples overlap),\n"
    "SLOWER (median slower by more than PCT% and every new sample slower than\n"
    "every base sample), FAILED (the new run failed), only-base, only-new.\n"
    "Peak RSS, CPU time, page faults, OS threads and jobs in flight, where records\n"
    "have them, are judged alike (worse, better, noise, same) for information only.\n"
    "Exit codes: 0 no regression, 1 at least one SLOWER or FAILED, 2 bad input\n"
    "(unreadable file, a line that is not a weft-bench record).\n";

enum { OPT_HELP = 1, OPT_THRESHOLD, OPT_JSON };

static const wb_opt compare_opts[] = {
    {"help", false, OPT_HELP},
    {"threshold", true, OPT_THRESHOLD},
    {"json", false, OPT_JSON},
    {NULL, false, 0},
};

/* What identifies a measurement: the same values in both files means the same experiment. */
static const char *const key_fields[] = {
    "bench",       "case",      "backend",     "jobs",     "sleep_ms", "loops", "items", "requests",
    "concurrency", "keepalive", "connections", "messages", "size",     "batch", "n",     "fibers"};
#define NKEYS (sizeof key_fields / sizeof key_fields[0])

/* The figures compared for information, besides the wall time. */
static const struct metric {
  const char *key;    /* the record's median; KEY_samples holds its samples */
  bool higher_better; /* in_flight_peak: more jobs sleeping at once is the point */
  double min_change;  /* smaller absolute changes are "same" */
} metrics[] = {
    {"peak_rss_kb", false, 256}, {"cpu_user_s", false, 0.01}, {"cpu_sys_s", false, 0.01},
    {"minflt", false, 100},      {"os_threads", false, 1},    {"in_flight_peak", true, 1},
};
#define NMETRICS (sizeof metrics / sizeof metrics[0])

typedef struct figure_samples {
  double *v;
  size_t n;
} figure_samples;

typedef struct entry {
  char *key;   /* the key fields' JSON text joined by '\x1f': equal keys, same measurement */
  char *label; /* "sleep weft jobs=8 sleep_ms=20" for the table */
  double *samples;
  size_t n;
  double min, max; /* from elapsed_ms_min/max when a record has no samples_ms */
  bool failed;     /* some record of it has status "failed" */
  bool matched;
  bool per_op;                /* samples are ns per operation (ns_per_op_samples), not ms */
  figure_samples m[NMETRICS]; /* the informational figures' samples, pooled like the times */
} entry;

typedef struct entries {
  entry *v;
  size_t n, cap;
} entries;

static void entries_free(entries *es) {
  for (size_t i = 0; i < es->n; i++) {
    free(es->v[i].key);
    free(es->v[i].label);
    free(es->v[i].samples);
    for (size_t m = 0; m < NMETRICS; m++) free(es->v[i].m[m].v);
  }
  free(es->v);
}

static int push_samples(entry *e, const double *v, size_t n) {
  double *p = realloc(e->samples, (e->n + n) * sizeof *p);
  if (!p && e->n + n) return -ENOMEM;
  memcpy(p + e->n, v, n * sizeof *p);
  e->samples = p;
  e->n += n;
  return 0;
}

static int push_value(figure_samples *s, double v) {
  double *p = realloc(s->v, (s->n + 1) * sizeof *p);
  if (!p) return -ENOMEM;
  p[s->n++] = v;
  s->v = p;
  return 0;
}

/* A record's samples of one figure: KEY_samples (numbers; nulls skipped), else KEY itself. */
static int add_metric(figure_samples *s, const json_value *rec, const char *key) {
  char skey[64];
  snprintf(skey, sizeof skey, "%s_samples", key);
  const json_value *arr = json_get(rec, skey);
  int rc = 0;
  if (arr && arr->type == JSON_ARRAY && arr->u.arr.n) {
    for (size_t i = 0; i < arr->u.arr.n && rc == 0; i++)
      if (arr->u.arr.items[i]->type == JSON_NUMBER) rc = push_value(s, arr->u.arr.items[i]->u.num);
    return rc;
  }
  double v;
  return json_get_num(rec, key, &v) ? push_value(s, v) : 0;
}

/* Build the key and the label of a record; NULL fields count as absent. */
static int make_key(const json_value *rec, char **key, char **label) {
  wb_str k = {0}, l = {0};
  int rc = 0;
  for (size_t i = 0; i < NKEYS && rc == 0; i++) {
    const json_value *v = json_get(rec, key_fields[i]);
    char *text = NULL;
    if (v && v->type != JSON_NULL) rc = json_write(v, &text);
    if (rc == 0) rc = wb_str_addf(&k, "%s\x1f", text ? text : "null");
    if (rc == 0 && text) {
      if (v->type == JSON_STRING)
        rc = wb_str_addf(&l, "%s%s", l.len ? " " : "", v->u.str);
      else
        rc = wb_str_addf(&l, "%s%s=%s", l.len ? " " : "", key_fields[i], text);
    }
    free(text);
  }
  if (rc < 0) {
    wb_str_free(&k);
    wb_str_free(&l);
    return rc;
  }
  *key = k.s;
  *label = l.s;
  return 0;
}

/* Validate one record and add it to es. Returns 0, -EINVAL with why filled, or -ENOMEM. */
static int add_record(entries *es, const json_value *rec, char *why, size_t whylen) {
  if (rec->type != JSON_OBJECT) {
    snprintf(why, whylen, "not a JSON object");
    return -EINVAL;
  }
  double schema;
  if (json_get_num(rec, "schema", &schema) && schema != WB_SCHEMA) {
    snprintf(why, whylen, "schema %g, but this weft-bench reads schema %d", schema, WB_SCHEMA);
    return -EINVAL;
  }
  if (!json_get_str(rec, "bench")) {
    snprintf(why, whylen, "no \"bench\" string: not a weft-bench record");
    return -EINVAL;
  }
  const char *status = json_get_str(rec, "status");
  bool failed = status && strcmp(status, "ok") != 0;
  double elapsed = NAN;
  if (!json_get_num(rec, "elapsed_ms", &elapsed) && !failed) {
    snprintf(why, whylen, "no \"elapsed_ms\" number");
    return -EINVAL;
  }
  if (!failed && !(elapsed >= 0)) {
    snprintf(why, whylen, "\"elapsed_ms\" is negative");
    return -EINVAL;
  }
  /* A time per operation, where the record has one, is what is compared (its samples and spread). */
  double per_op_v;
  bool per_op = !failed && json_get_num(rec, "ns_per_op", &per_op_v) && per_op_v >= 0;
  const char *skey = per_op ? "ns_per_op_samples" : "samples_ms";
  const json_value *samples = json_get(rec, skey);
  if (samples && samples->type != JSON_ARRAY) {
    snprintf(why, whylen, "\"%s\" is not an array", skey);
    return -EINVAL;
  }
  for (size_t i = 0; samples && i < samples->u.arr.n; i++) {
    if (samples->u.arr.items[i]->type != JSON_NUMBER || samples->u.arr.items[i]->u.num < 0) {
      snprintf(why, whylen, "\"%s\" holds something that is not a time", skey);
      return -EINVAL;
    }
  }
  if (per_op) elapsed = per_op_v;

  char *key, *label;
  int rc = make_key(rec, &key, &label);
  if (rc == 0 && per_op) {
    /* Its own measurement, and labelled: the table's columns then hold ns, not ms. */
    char *k2 = NULL, *l2 = NULL;
    wb_str a = {0}, b = {0};
    if (wb_str_addf(&a, "%sns_per_op", key) == 0) k2 = a.s;
    if (wb_str_addf(&b, "%s [ns/op]", label) == 0) l2 = b.s;
    free(key);
    free(label);
    if (!k2 || !l2) {
      free(k2);
      free(l2);
      return -ENOMEM;
    }
    key = k2;
    label = l2;
  }
  if (rc < 0) return rc;
  entry *e = NULL;
  for (size_t i = 0; i < es->n && !e; i++)
    if (strcmp(es->v[i].key, key) == 0) e = &es->v[i];
  if (e) {
    free(key);
    free(label);
  } else {
    if (es->n == es->cap) {
      size_t cap = es->cap ? 2 * es->cap : 16;
      entry *p = realloc(es->v, cap * sizeof *p);
      if (!p) {
        free(key);
        free(label);
        return -ENOMEM;
      }
      es->v = p;
      es->cap = cap;
    }
    e = &es->v[es->n++];
    memset(e, 0, sizeof *e);
    e->key = key;
    e->label = label;
    e->min = INFINITY;
    e->max = -INFINITY;
    e->per_op = per_op;
  }
  if (failed) {
    e->failed = true;
    return 0;
  }
  for (size_t m = 0; m < NMETRICS; m++)
    if ((rc = add_metric(&e->m[m], rec, metrics[m].key)) < 0) return rc;
  if (samples && samples->u.arr.n) {
    for (size_t i = 0; i < samples->u.arr.n; i++)
      if ((rc = push_samples(e, &samples->u.arr.items[i]->u.num, 1)) < 0) return rc;
  } else {
    /* A record without samples: its median stands for it; its min and max, if given, for the spread. */
    double lo = elapsed, hi = elapsed;
    json_get_num(rec, per_op ? "ns_per_op_min" : "elapsed_ms_min", &lo);
    json_get_num(rec, per_op ? "ns_per_op_max" : "elapsed_ms_max", &hi);
    if (lo < e->min) e->min = lo;
    if (hi > e->max) e->max = hi;
    if ((rc = push_samples(e, &elapsed, 1)) < 0) return rc;
  }
  return 0;
}

/* Read a JSON Lines file into es. Returns 0, or WB_EXIT_USAGE after a message naming file:line. */
static int read_file(const char *path, entries *es) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "weft-bench compare: cannot open %s: %s\n", path, strerror(errno));
    return WB_EXIT_USAGE;
  }
  char *text = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (len + 65536 > cap) {
      cap = cap ? 2 * cap : 131072;
      char *p = realloc(text, cap);
      if (!p) {
        free(text);
        fclose(f);
        fprintf(stderr, "weft-bench compare: %s: out of memory\n", path);
        return WB_EXIT_USAGE;
      }
      text = p;
    }
    size_t r = fread(text + len, 1, cap - len, f);
    len += r;
    if (r == 0) break;
  }
  bool ioerr = ferror(f);
  fclose(f);
  if (ioerr) {
    free(text);
    fprintf(stderr, "weft-bench compare: cannot read %s\n", path);
    return WB_EXIT_USAGE;
  }
  int result = 0;
  size_t lineno = 0, records = 0;
  for (size_t pos = 0; pos < len && result == 0;) {
    const char *nl = memchr(text + pos, '\n', len - pos);
    size_t end = nl ? (size_t)(nl - text) : len;
    lineno++;
    size_t a = pos, b = end;
    while (a < b && (text[a] == ' ' || text[a] == '\t' || text[a] == '\r')) a++;
    while (b > a && (text[b - 1] == ' ' || text[b - 1] == '\t' || text[b - 1] == '\r')) b--;
    if (a < b) {
      json_value *rec = NULL;
      char err[256], why[256];
      int rc = json_parse(text + a, b - a, &rec, err, sizeof err);
      if (rc < 0) {
        fprintf(stderr, "weft-bench compare: %s:%zu: %s\n", path, lineno,
                rc == -ENOMEM ? "out of memory" : err);
        result = WB_EXIT_USAGE;
      } else if ((rc = add_record(es, rec, why, sizeof why)) < 0) {
        fprintf(stderr, "weft-bench compare: %s:%zu: %s\n", path, lineno,
                rc == -ENOMEM ? "out of memory" : why);
        result = WB_EXIT_USAGE;
      } else {
        records++;
      }
      json_free(rec);
    }
    pos = end + 1;
  }
  free(text);
  if (result == 0 && records == 0) {
    fprintf(stderr, "weft-bench compare: %s holds no records\n", path);
    result = WB_EXIT_USAGE;
  }
  return result;
}

typedef struct verdict {
  const char *word;
  bool regression;
  double base_med, new_med, change_pct;
} verdict;

static void spread(const entry *e, wb_summary *s) {
  *s = wb_summarize(e->samples, e->n);
  /* Records without samples told their own min and max: take the wider. */
  if (e->min < s->min) s->min = e->min;
  if (e->max > s->max) s->max = e->max;
}

static verdict judge(const entry *base, const entry *neu, double threshold) {
  verdict v = {"same", false, NAN, NAN, NAN};
  if (base && base->n) v.base_med = wb_summarize(base->samples, base->n).median;
  if (neu && neu->n) v.new_med = wb_summarize(neu->samples, neu->n).median;
  if (!neu) return (verdict){"only-base", false, v.base_med, NAN, NAN};
  if (!base) return (verdict){"only-new", false, NAN, v.new_med, NAN};
  if (neu->failed || !neu->n) {
    v.word = base->failed || !base->n ? "failed-both" : "FAILED";
    v.regression = !(base->failed || !base->n);
    return v;
  }
  if (base->failed || !base->n) {
    v.word = "fixed";
    return v;
  }
  if (v.base_med > 0)
    v.change_pct = (v.new_med - v.base_med) / v.base_med * 100.0;
  else
    v.change_pct = v.new_med > 0 ? INFINITY : 0;
  wb_summary bs, ns;
  spread(base, &bs);
  spread(neu, &ns);
  if (v.change_pct > threshold) {
    v.regression = ns.min > bs.max;
    v.word = v.regression ? "SLOWER" : "noise";
  } else if (v.change_pct < -threshold) {
    v.word = ns.max < bs.min ? "faster" : "noise";
  }
  return v;
}

/* One informational figure: its medians, change and verdict ("same", "worse", "better", "noise"). */
typedef struct metric_verdict {
  const char *word;
  double base_med, new_med, change_pct;
} metric_verdict;

/*
 * Judge figure m of a matched measurement as judge() judges the time: past
 * the threshold with the samples apart is a change, with them overlapping
 * noise. False when either side lacks the figure.
 */
static bool judge_metric(const entry *b, const entry *n, size_t m, double threshold, metric_verdict *v) {
  const figure_samples *bs = &b->m[m], *ns = &n->m[m];
  if (!bs->n || !ns->n || b->failed || n->failed) return false;
  wb_summary x = wb_summarize(bs->v, bs->n), y = wb_summarize(ns->v, ns->n);
  double diff = y.median - x.median;
  v->base_med = x.median;
  v->new_med = y.median;
  v->change_pct = x.median != 0 ? diff / fabs(x.median) * 100.0 : NAN;
  v->word = "same";
  if (fabs(diff) < metrics[m].min_change) return true;
  /* From zero any change is past the threshold. */
  double pct = isnan(v->change_pct) ? (diff > 0 ? INFINITY : -INFINITY) : v->change_pct;
  if (fabs(pct) <= threshold) return true;
  bool apart = diff > 0 ? y.min > x.max : y.max < x.min;
  bool up_is_bad = !metrics[m].higher_better;
  if (!apart)
    v->word = "noise";
  else
    v->word = (diff > 0) == up_is_bad ? "worse" : "better";
  return true;
}

/* The "metrics" object of a compare record: every figure both sides have, with its verdict. */
static int add_metrics_json(json_value *rec, const entry *b, const entry *n, double threshold) {
  json_value *obj = json_new_object();
  int rc = obj ? 0 : -ENOMEM;
  for (size_t m = 0; m < NMETRICS && rc == 0; m++) {
    metric_verdict v;
    if (!judge_metric(b, n, m, threshold, &v)) continue;
    json_value *one = json_new_object();
    rc = one ? 0 : -ENOMEM;
    if (rc == 0) rc = json_set_num(one, "base", v.base_med);
    if (rc == 0) rc = json_set_num(one, "new", v.new_med);
    if (rc == 0) rc = json_set_num(one, "change_pct", v.change_pct);
    if (rc == 0) rc = json_set_str(one, "verdict", v.word);
    if (rc == 0)
      rc = json_set(obj, metrics[m].key, one);
    else
      json_free(one);
  }
  if (rc == 0) return json_set(rec, "metrics", obj);
  json_free(obj);
  return rc;
}

/* Under a measurement's row: the figures that moved (worse, better or noise), one line each. */
static void print_metrics(const entry *b, const entry *n, double threshold) {
  for (size_t m = 0; m < NMETRICS; m++) {
    metric_verdict v;
    if (!judge_metric(b, n, m, threshold, &v) || strcmp(v.word, "same") == 0) continue;
    printf("    %-16s %12.6g %12.6g", metrics[m].key, v.base_med, v.new_med);
    if (isnan(v.change_pct))
      printf(" %9s", "-");
    else
      printf(" %+8.1f%%", v.change_pct);
    printf("  %s (information)\n", v.word);
  }
}

static void print_ms(double v) {
  if (isnan(v))
    printf(" %12s", "-");
  else
    printf(" %12.3f", v);
}

int wb_cmd_compare(int argc, char **argv) {
  const char *files[2];
  int nfiles = 0;
  double threshold = 10;
  bool json = false;
  wb_optstate st;
  wb_opt_init(&st, argc, argv, "compare");
  const char *arg;
  int id;
  while ((id = wb_opt_next(&st, compare_opts, &arg)) != WB_OPT_END) {
    switch (id) {
    case WB_OPT_ERROR:
      return WB_EXIT_USAGE;
    case WB_OPT_POSITIONAL:
      if (nfiles == 2) return wb_usage_error("compare", "more than two files ('%s')", arg);
      files[nfiles++] = arg;
      break;
    case OPT_HELP:
      fputs(compare_help, stdout);
      return WB_EXIT_OK;
    case OPT_THRESHOLD:
      if (!wb_parse_double("compare", "threshold", arg, 0, 1e6, &threshold)) return WB_EXIT_USAGE;
      break;
    case OPT_JSON:
      json = true;
      break;
    }
  }
  if (nfiles != 2) return wb_usage_error("compare", "needs two files: BASE.json NEW.json");

  entries base = {0}, neu = {0};
  int rc = read_file(files[0], &base);
  if (rc == 0) rc = read_file(files[1], &neu);
  if (rc != 0) {
    entries_free(&base);
    entries_free(&neu);
    return rc;
  }

  size_t width = 11;
  for (size_t i = 0; i < base.n; i++)
    if (strlen(base.v[i].label) > width) width = strlen(base.v[i].label);
  for (size_t i = 0; i < neu.n; i++)
    if (strlen(neu.v[i].label) > width) width = strlen(neu.v[i].label);
  if (!json)
    printf("%-*s %12s %12s %9s  %s\n", (int)width, "measurement", "base ms", "new ms", "change", "verdict");

  size_t regressions = 0, compared = 0;
  /* Base order first, then what only the new file has. */
  for (size_t pass = 0; pass < 2; pass++) {
    entries *es = pass == 0 ? &base : &neu;
    for (size_t i = 0; i < es->n; i++) {
      entry *b = NULL, *n = NULL;
      if (pass == 0) {
        b = &base.v[i];
        for (size_t j = 0; j < neu.n && !n; j++)
          if (strcmp(neu.v[j].key, b->key) == 0) n = &neu.v[j];
        if (n) n->matched = true;
      } else {
        if (neu.v[i].matched) continue;
        n = &neu.v[i];
      }
      verdict v = judge(b, n, threshold);
      const char *label = b ? b->label : n->label;
      regressions += v.regression;
      compared += b && n;
      if (json) {
        json_value *rec = json_new_object();
        int jrc = rec ? 0 : -ENOMEM;
        if (jrc == 0) jrc = json_set_int(rec, "schema", WB_SCHEMA);
        if (jrc == 0) jrc = json_set_str(rec, "bench", "compare");
        if (jrc == 0) jrc = json_set_str(rec, "measurement", label);
        if (jrc == 0) jrc = json_set_num(rec, "base_ms", v.base_med);
        if (jrc == 0) jrc = json_set_num(rec, "new_ms", v.new_med);
        if (jrc == 0) jrc = json_set_str(rec, "unit", (b ? b : n)->per_op ? "ns_per_op" : "ms");
        if (jrc == 0) jrc = json_set_num(rec, "change_pct", isfinite(v.change_pct) ? v.change_pct : NAN);
        if (jrc == 0) jrc = json_set_num(rec, "threshold_pct", threshold);
        if (jrc == 0) jrc = json_set_str(rec, "verdict", v.word);
        if (jrc == 0) jrc = json_set_bool(rec, "regression", v.regression);
        if (jrc == 0 && b && n) jrc = add_metrics_json(rec, b, n, threshold);
        if (jrc == 0) jrc = json_print_line(rec, stdout);
        json_free(rec);
        if (jrc < 0) rc = WB_EXIT_FAIL;
        continue;
      }
      printf("%-*s", (int)width, label);
      print_ms(v.base_med);
      print_ms(v.new_med);
      if (isnan(v.change_pct))
        printf(" %9s", "-");
      else
        printf(" %+8.1f%%", v.change_pct);
      printf("  %s\n", v.word);
      if (b && n) print_metrics(b, n, threshold);
    }
  }
  if (!json) {
    printf(
        "\n%zu compared, %zu regression%s (threshold %.3g%%, and the new minimum above the base maximum)\n",
        compared, regressions, regressions == 1 ? "" : "s", threshold);
  }
  entries_free(&base);
  entries_free(&neu);
  if (rc != 0) return rc;
  return regressions ? WB_EXIT_FAIL : WB_EXIT_OK;
}
