/*
 * This file contains `weft-bench report`: one self-contained HTML file
 * that a CI job publishes as it is (an artifact, GitHub Pages), after
 * criterion.rs's and asv's reports, for people who were not at the
 * terminal. Per measurement:
 *
 *   - the spread of its samples: every sample as a dot, the new run's and
 *     (with --base) the base run's, with their medians (inline SVG);
 *   - its history (with --db): one point per commit, the levels between
 *     change points and the change points marked, with a table of them;
 *   - its verdict against the base (compare's words and rule);
 *   - its environment fingerprint and the command that repeats it.
 *
 * The file makes no request: no script, font, stylesheet or image from
 * anywhere, and no script at all (the details are <details>, which need
 * none). The plots are SVG with a viewBox, so they shrink to a phone's
 * width; long tables scroll inside their box. It stays small: a history
 * line is one <polyline> with coordinates rounded to tenths, so that 50
 * measurements of 100 runs each stay well under 1 MB.
 */
#define _POSIX_C_SOURCE 200809L
#include "regress.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char report_help[] =
    "usage: weft-bench report [--db FILE] [RESULTS.jsonl...] [--base FILE]\n"
    "                         [--pair FILE] [--threshold PCT] [--title TEXT]\n"
    "                         -o report.html\n"
    "\n"
    "Write one self-contained HTML file (inline SVG and CSS; no script, no request):\n"
    "per measurement of the RESULTS files (or, without them, of the history), the\n"
    "spread of its samples, its history with the change points marked (--db), its\n"
    "verdict against --base (compare's rule), its environment fingerprint and the\n"
    "command that repeats it.\n"
    "\n"
    "  --db FILE        a history (weft-bench history add)\n"
    "  --base FILE      results to judge the RESULTS files against\n"
    "  --pair FILE      pair's verdicts (weft-bench pair --json-file): shown with\n"
    "                   their ratio and interval, in place of compare's rule\n"
    "  --threshold PCT  as compare's (default 10)\n"
    "  --title TEXT     the page's title (default \"weft-bench report\")\n"
    "  -o, --output F   the file to write\n"
    "  --help           this text\n"
    "\n"
    "Exit codes: 0 written, 2 bad input, 3 --db in a weft-bench built without SQLite.\n";

enum { OPT_HELP = 1, OPT_DB, OPT_BASE, OPT_PAIR, OPT_THRESHOLD, OPT_TITLE, OPT_OUTPUT };

static const wb_opt report_opts[] = {
    {"help", false, OPT_HELP},  {"db", true, OPT_DB},
    {"base", true, OPT_BASE},   {"threshold", true, OPT_THRESHOLD},
    {"title", true, OPT_TITLE}, {"output", true, OPT_OUTPUT},
    {"o", true, OPT_OUTPUT},    {"pair", true, OPT_PAIR},
    {NULL, false, 0},
};

typedef struct report_opts_t {
  const char *db, *base, *out, *title, *pair;
  json_t *pairs; /* pair's objects by measurement label (--pair), or NULL */
  const char **files;
  size_t nfiles;
  double threshold;
} report_opts_t;

/* ------------------------------------------------------------------------ */
/* HTML                                                                      */
/* ------------------------------------------------------------------------ */

static void esc(wb_str *b, const char *s) {
  for (const char *p = s ? s : ""; *p; p++) {
    switch (*p) {
    case '<':
      wb_str_add(b, "&lt;");
      break;
    case '>':
      wb_str_add(b, "&gt;");
      break;
    case '&':
      wb_str_add(b, "&amp;");
      break;
    case '"':
      wb_str_add(b, "&quot;");
      break;
    default:
      wb_str_addn(b, p, 1);
    }
  }
}

static const char css[] =
    "body{font:15px/1.45 system-ui,sans-serif;margin:0 auto;max-width:980px;padding:0 12px;color:#1d1d1f}"
    "h1{font-size:1.5em}h2{font-size:1.15em;margin:1.6em 0 .4em;word-break:break-word}"
    "section{border-top:1px solid #ddd;padding-bottom:.6em}"
    "svg{width:100%;height:auto;display:block;background:#fafafa;border:1px solid #e4e4e4}"
    ".wrap{overflow-x:auto}table{border-collapse:collapse;font-size:.9em}"
    "td,th{padding:2px 8px;text-align:left;border-bottom:1px solid #eee;vertical-align:top}"
    "code{font:12px/1.4 ui-monospace,monospace;word-break:break-all}"
    ".v{font-weight:600;padding:1px 6px;border-radius:3px}.SLOWER,.FAILED{background:#fdd;color:#900}"
    ".faster,.fixed{background:#dfd;color:#060}.same{background:#eee}.noise{background:#ffe9b3}"
    ".legend{font-size:.85em;color:#555}"
    "@media (max-width:600px){body{font-size:14px}td,th{padding:2px 4px}}";

/* The spread of the samples: one row of dots per side, and the medians. */
static void svg_spread(wb_str *b, const wb_cmp_entry *base, const wb_cmp_entry *e) {
  const wb_cmp_entry *sides[2] = {base, e};
  double lo = INFINITY, hi = -INFINITY;
  for (int s = 0; s < 2; s++)
    for (size_t i = 0; sides[s] && i < sides[s]->n; i++) {
      if (sides[s]->samples[i] < lo) lo = sides[s]->samples[i];
      if (sides[s]->samples[i] > hi) hi = sides[s]->samples[i];
    }
  if (!isfinite(lo)) return;
  double pad = (hi - lo) * 0.05 + (hi > 0 ? hi : 1) * 1e-3;
  lo -= pad;
  hi += pad;
  const double W = 600, x0 = 60, x1 = 590;
  int rows = base ? 2 : 1;
  double H = 30.0 + 30.0 * rows;
  wb_str_addf(b, "<svg viewBox=\"0 0 %.0f %.0f\" role=\"img\" aria-label=\"samples\">", W, H);
  for (int s = 0, row = 0; s < 2; s++) {
    if (!sides[s]) continue;
    double y = 22.0 + 30.0 * row++;
    const char *color = s == 0 ? "#888" : "#1f5fbf";
    wb_str_addf(b, "<text x=\"4\" y=\"%.0f\" font-size=\"12\" fill=\"#333\">%s</text>", y + 4,
                s == 0 ? "base" : "new");
    for (size_t i = 0; i < sides[s]->n; i++) {
      double x = x0 + (sides[s]->samples[i] - lo) / (hi - lo) * (x1 - x0);
      wb_str_addf(b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\" fill-opacity=\".6\"/>", x, y,
                  color);
    }
    double med = wb_median(sides[s]->samples, sides[s]->n);
    double xm = x0 + (med - lo) / (hi - lo) * (x1 - x0);
    wb_str_addf(b, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"/>",
                xm, xm, y - 11, y + 11, color);
  }
  wb_str_addf(
      b,
      "<text x=\"%.0f\" y=\"%.0f\" font-size=\"11\" fill=\"#555\">%.6g</text>"
      "<text x=\"%.0f\" y=\"%.0f\" font-size=\"11\" fill=\"#555\" text-anchor=\"end\">%.6g</text></svg>",
      x0, H - 4, lo, x1, H - 4, hi);
}

/* The history: the points, the levels between change points, the change points. */
static void svg_history(wb_str *b, const wb_hseries *s, const wb_step *st, size_t ns) {
  const double W = 600, H = 170, x0 = 60, x1 = 590, y0 = 10, y1 = 150;
  double lo = INFINITY, hi = -INFINITY;
  for (size_t i = 0; i < s->n; i++) {
    if (s->pts[i].value < lo) lo = s->pts[i].value;
    if (s->pts[i].value > hi) hi = s->pts[i].value;
  }
  if (!isfinite(lo)) return;
  double pad = (hi - lo) * 0.08 + (hi > 0 ? hi : 1) * 1e-3;
  lo -= pad;
  hi += pad;
#define HX(i) (s->n > 1 ? x0 + (double)(i) / (double)(s->n - 1) * (x1 - x0) : (x0 + x1) / 2)
#define HY(v) (y1 - ((v)-lo) / (hi - lo) * (y1 - y0))
  wb_str_addf(b, "<svg viewBox=\"0 0 %.0f %.0f\" role=\"img\" aria-label=\"history\">", W, H);
  wb_str_add(b, "<polyline fill=\"none\" stroke=\"#1f5fbf\" stroke-width=\"1.5\" points=\"");
  for (size_t i = 0; i < s->n; i++) wb_str_addf(b, "%s%.1f,%.1f", i ? " " : "", HX(i), HY(s->pts[i].value));
  wb_str_add(b, "\"/>");
  /* The levels: a segment at each level's median, from one change point to the next. */
  for (size_t k = 0; ns && k <= ns; k++) {
    size_t a = k ? st[k - 1].index : 0, z = k < ns ? st[k].index : s->n;
    double level = k < ns ? st[k].before : st[ns - 1].after;
    wb_str_addf(b,
                "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#444\" stroke-width=\"1\"/>",
                HX(a), HX(z - 1), HY(level), HY(level));
  }
  for (size_t k = 0; k < ns; k++) {
    double x = (HX(st[k].index - 1) + HX(st[k].index)) / 2;
    wb_str_addf(
        b,
        "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.0f\" y2=\"%.0f\" stroke=\"#c00\" stroke-width=\"2\" "
        "stroke-dasharray=\"4 3\"/><text x=\"%.1f\" y=\"%.0f\" font-size=\"11\" fill=\"#c00\">%+.1f%%</text>",
        x, x, y0, y1, x + 3, y0 + 12, st[k].change_pct);
  }
  wb_str_addf(
      b,
      "<text x=\"4\" y=\"%.0f\" font-size=\"11\" fill=\"#555\">%.4g</text>"
      "<text x=\"4\" y=\"%.0f\" font-size=\"11\" fill=\"#555\">%.4g</text>"
      "<text x=\"%.0f\" y=\"%.0f\" font-size=\"11\" fill=\"#555\">%zu commits, oldest to newest</text></svg>",
      y0 + 10, hi, y1, lo, x0, H - 4, s->n);
#undef HX
#undef HY
}

static void env_table(wb_str *b, const json_t *fp) {
  wb_str_add(b, "<details><summary>environment fingerprint</summary><div class=\"wrap\"><table>");
  const char *k;
  json_t *v;
  json_object_foreach((json_t *)fp, k, v) {
    char *t =
        json_is_string(v) ? strdup(json_string_value(v)) : json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    wb_str_add(b, "<tr><th>");
    esc(b, k);
    wb_str_add(b, "</th><td><code>");
    esc(b, t);
    wb_str_add(b, "</code></td></tr>");
    free(t);
  }
  wb_str_add(b, "</table></div></details>");
}

static void unit_of(const wb_cmp_entry *e, const wb_hseries *s, const char **unit) {
  *unit = (e ? e->per_op : s && strcmp(s->unit, "ms") != 0) ? "ns/op" : "ms";
}

/* One measurement's section. e (with base) from results files, s (with its steps) from the history. */
static void section(wb_str *b, size_t id, const wb_cmp_entry *e, const wb_cmp_entry *base,
                    const wb_hseries *s, const wb_step *st, size_t ns, const report_opts_t *o) {
  const char *unit;
  unit_of(e, s, &unit);
  wb_str_addf(b, "<section id=\"m%zu\"><h2>", id);
  esc(b, e ? e->label : s->label);
  wb_str_add(b, "</h2>");
  const json_t *pv = e && o->pairs ? json_object_get(o->pairs, e->label) : NULL;
  if (pv) {
    const char *word = wb_json_get_str(pv, "verdict");
    double ratio = NAN, lo = NAN, hi = NAN, conf = NAN, rounds = NAN;
    wb_json_get_num(pv, "ratio", &ratio);
    wb_json_get_num(pv, "ratio_low", &lo);
    wb_json_get_num(pv, "ratio_high", &hi);
    wb_json_get_num(pv, "confidence", &conf);
    wb_json_get_num(pv, "rounds", &rounds);
    wb_str_add(b, "<p>paired against the base: <span class=\"v ");
    esc(b, word ? word : "?");
    wb_str_add(b, "\">");
    esc(b, word ? word : "?");
    wb_str_addf(b, "</span> ratio %.4f", ratio);
    if (isfinite(lo) && isfinite(hi)) wb_str_addf(b, ", %g%% interval [%.4f, %.4f]", conf * 100, lo, hi);
    wb_str_addf(b, " over %.0f rounds (weft-bench pair)</p>", rounds);
  } else if (e && o->base) {
    wb_cmp_verdict v = wb_cmp_judge(base, e, o->threshold);
    wb_str_addf(b, "<p>against the base: <span class=\"v %s\">%s</span>", v.word, v.word);
    if (!isnan(v.change_pct)) wb_str_addf(b, " %+.1f%%", v.change_pct);
    if (!isnan(v.base_med) || !isnan(v.new_med))
      wb_str_addf(b, " (base median %.6g %s, new %.6g %s; threshold %g%%)", v.base_med, unit, v.new_med, unit,
                  o->threshold);
    wb_str_add(b, "</p>");
  }
  if (e && e->n) {
    wb_summary sm = wb_summarize(e->samples, e->n);
    wb_str_addf(b, "<p class=\"legend\">samples (%s): %zu, median %.6g, min %.6g, max %.6g%s</p>", unit, e->n,
                sm.median, sm.min, sm.max, base ? "; grey: the base run" : "");
    svg_spread(b, base && base->n ? base : NULL, e);
  } else if (e) {
    wb_str_add(b, "<p>this run failed: no samples</p>");
  }
  if (s && s->n) {
    wb_str_addf(b, "<p class=\"legend\">history (%s, median per commit): %zu commits, %zu change point%s</p>",
                unit, s->n, ns, ns == 1 ? "" : "s");
    svg_history(b, s, st, ns);
    if (ns) {
      wb_str_add(b,
                 "<div class=\"wrap\"><table><tr><th>commit</th><th>date</th><th>change</th><th>before</th>"
                 "<th>after</th><th>p</th></tr>");
      for (size_t k = 0; k < ns; k++) {
        wb_str_add(b, "<tr><td><code>");
        esc(b, s->pts[st[k].index].commit);
        wb_str_add(b, "</code></td><td>");
        esc(b, s->pts[st[k].index].date);
        wb_str_addf(b, "</td><td>%+.1f%%</td><td>%.6g</td><td>%.6g</td><td>%.3g</td></tr>", st[k].change_pct,
                    st[k].before, st[k].after, st[k].p_value);
      }
      wb_str_add(b, "</table></div>");
    }
  } else if (o->db) {
    wb_str_add(b, "<p class=\"legend\">no history of this measurement in this environment</p>");
  }
  const json_t *fp = e ? e->fp : NULL;
  json_t *parsed = NULL;
  if (!fp && s) {
    json_error_t je;
    fp = parsed = json_loads(s->env, 0, &je);
  }
  if (fp) env_table(b, fp);
  json_decref(parsed);
  if (e && e->command) {
    wb_str_add(b, "<p>repeat it: <code>");
    esc(b, e->command);
    wb_str_add(b, "</code></p>");
  }
  wb_str_add(b, "</section>\n");
}

static int parse(int argc, char **argv, report_opts_t *o) {
  wb_optstate st;
  wb_opt_init(&st, argc, argv, "report");
  const char *arg;
  int id;
  if (!(o->files = calloc((size_t)argc + 1, sizeof *o->files)))
    return wb_usage_error("report", "out of memory");
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "-o") == 0) argv[i] = "--o"; /* the one other short option: everyone types it */
  while ((id = wb_opt_next(&st, report_opts, &arg)) != WB_OPT_END) {
    switch (id) {
    case WB_OPT_ERROR:
      return WB_EXIT_USAGE;
    case WB_OPT_POSITIONAL:
      o->files[o->nfiles++] = arg;
      break;
    case OPT_HELP:
      fputs(report_help, stdout);
      return WB_EXIT_OK;
    case OPT_DB:
      o->db = arg;
      break;
    case OPT_BASE:
      o->base = arg;
      break;
    case OPT_PAIR:
      o->pair = arg;
      break;
    case OPT_THRESHOLD:
      if (!wb_parse_double("report", "threshold", arg, 0, 1e6, &o->threshold)) return WB_EXIT_USAGE;
      break;
    case OPT_TITLE:
      o->title = arg;
      break;
    case OPT_OUTPUT:
      o->out = arg;
      break;
    }
  }
  if (!o->out) return wb_usage_error("report", "needs -o FILE");
  if (!o->db && o->nfiles == 0) return wb_usage_error("report", "needs RESULTS files or --db FILE");
  if (o->base && o->nfiles == 0) return wb_usage_error("report", "--base needs RESULTS files to judge");
#ifndef WEFT_BENCH_HAVE_SQLITE
  if (o->db) {
    fprintf(stderr, "weft-bench report: --db: not built: this weft-bench was built without SQLite (install "
                    "libsqlite3-dev, which scripts/deps.sh base installs, and configure again)\n");
    return WB_EXIT_UNAVAILABLE;
  }
#endif
  return -1;
}

static int read_results(const char *path, wb_cmp_entries *es) {
  char *text;
  size_t len;
  int rc = wb_cmp_slurp("report", path, &text, &len);
  if (rc != 0) return rc;
  rc = wb_cmp_read_text("report", path, text, len, es);
  free(text);
  return rc;
}

/* pair's --json-file: one object per measurement, kept by its label. */
static int read_pairs(const char *path, json_t **out) {
  char *text;
  size_t len;
  int rc = wb_cmp_slurp("report", path, &text, &len);
  if (rc != 0) return rc;
  json_t *all = json_object();
  size_t lineno = 0;
  for (size_t pos = 0; all && pos < len && rc == 0;) {
    const char *nl = memchr(text + pos, '\n', len - pos);
    size_t end = nl ? (size_t)(nl - text) : len;
    lineno++;
    if (end > pos) {
      json_t *rec = NULL;
      char err[160];
      const char *bench = NULL, *label = NULL;
      if (wb_json_parse(text + pos, end - pos, &rec, err, sizeof err) == 0) {
        bench = wb_json_get_str(rec, "bench");
        label = wb_json_get_str(rec, "measurement");
      }
      if (!rec || !bench || strcmp(bench, "pair") != 0 || !label) {
        fprintf(stderr, "weft-bench report: %s:%zu: not an object of weft-bench pair --json\n", path, lineno);
        rc = WB_EXIT_USAGE;
      } else if (json_object_set(all, label, rec) != 0) {
        rc = WB_EXIT_USAGE;
      }
      json_decref(rec);
    }
    pos = end + 1;
  }
  free(text);
  if (!all) rc = WB_EXIT_USAGE;
  if (rc != 0) {
    json_decref(all);
    return rc;
  }
  *out = all;
  return 0;
}

int wb_cmd_report(int argc, char **argv) {
  report_opts_t o = {.threshold = 10, .title = "weft-bench report"};
  wb_cmp_entries res = {0}, base = {0};
  wb_hseries *hs = NULL;
  size_t nhs = 0;
  wb_str b = {0};
  int rc = parse(argc, argv, &o);
  if (rc >= 0) goto out;
  rc = 0;
  for (size_t i = 0; i < o.nfiles && rc == 0; i++) rc = read_results(o.files[i], &res);
  if (rc == 0 && o.base) rc = read_results(o.base, &base);
  if (rc == 0 && o.pair) rc = read_pairs(o.pair, &o.pairs);
  if (rc != 0) goto out;
#ifdef WEFT_BENCH_HAVE_SQLITE
  if (o.db) {
    wb_hdb *db = NULL;
    char err[512];
    int r = wb_hdb_open(o.db, false, &db, err, sizeof err);
    if (r == 0) r = wb_hdb_series(db, &hs, &nhs, err, sizeof err);
    wb_hdb_close(db);
    if (r < 0) {
      fprintf(stderr, "weft-bench report: %s\n", err);
      rc = WB_EXIT_USAGE;
      goto out;
    }
  }
#endif
  char now[32];
  time_t t = time(NULL);
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(now, sizeof now, "%Y-%m-%d %H:%M UTC", &tm);
  wb_str_add(&b, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                 "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\"><title>");
  esc(&b, o.title);
  wb_str_addf(&b, "</title><style>%s</style></head><body><h1>", css);
  esc(&b, o.title);
  wb_str_addf(&b, "</h1><p class=\"legend\">written %s by weft-bench report", now);
  if (o.base) {
    wb_str_add(&b, "; verdicts against <code>");
    esc(&b, o.base);
    wb_str_addf(&b, "</code> by compare's rule (median past %g%% and the samples apart)", o.threshold);
  }
  wb_str_add(&b, "</p>\n");

  /* The sections: the results' measurements, or the history's series. */
  size_t nsec = o.nfiles ? res.n : nhs;
  wb_cp_opts co = WB_CP_OPTS_INIT;
  wb_str_add(&b, "<div class=\"wrap\"><table><tr><th>measurement</th><th>verdict</th><th>median</th></tr>");
  for (size_t i = 0; i < nsec; i++) {
    const wb_cmp_entry *e = o.nfiles ? &res.v[i] : NULL;
    const char *unit;
    unit_of(e, e ? NULL : &hs[i], &unit);
    wb_str_addf(&b, "<tr><td><a href=\"#m%zu\">", i);
    esc(&b, e ? e->label : hs[i].label);
    wb_str_add(&b, "</a></td><td>");
    const json_t *pv = e && o.pairs ? json_object_get(o.pairs, e->label) : NULL;
    if (pv) {
      const char *word = wb_json_get_str(pv, "verdict");
      wb_str_add(&b, "<span class=\"v ");
      esc(&b, word ? word : "?");
      wb_str_add(&b, "\">");
      esc(&b, word ? word : "?");
      wb_str_add(&b, "</span> (paired)");
    } else if (e && o.base) {
      const wb_cmp_entry *be = NULL;
      for (size_t j = 0; j < base.n && !be; j++)
        if (strcmp(base.v[j].key, e->key) == 0) be = &base.v[j];
      wb_cmp_verdict v = wb_cmp_judge(be, e, o.threshold);
      wb_str_addf(&b, "<span class=\"v %s\">%s</span>", v.word, v.word);
    } else {
      wb_str_add(&b, "-");
    }
    double med = e ? wb_median(e->samples, e->n) : hs[i].pts[hs[i].n - 1].value;
    wb_str_addf(&b, "</td><td>%.6g %s</td></tr>", med, unit);
  }
  wb_str_add(&b, "</table></div>\n");
  for (size_t i = 0; i < nsec && rc == 0; i++) {
    const wb_cmp_entry *e = o.nfiles ? &res.v[i] : NULL, *be = NULL;
    const wb_hseries *s = e ? NULL : &hs[i];
    for (size_t j = 0; e && j < base.n && !be; j++)
      if (strcmp(base.v[j].key, e->key) == 0) be = &base.v[j];
    if (e && nhs) {
      /* The history of this measurement in this very environment; unlike ones are other series. */
      char *env = wb_env_fingerprint_text(e->fp);
      for (size_t j = 0; env && j < nhs && !s; j++)
        if (strcmp(hs[j].key, e->key) == 0 && strcmp(hs[j].env, env) == 0) s = &hs[j];
      free(env);
    }
    wb_step *st = NULL;
    size_t ns = 0;
    if (s) {
      co.seed = wb_fnv1a(wb_fnv1a(WB_FNV_INIT, s->key, strlen(s->key)), s->env, strlen(s->env));
      if (wb_series_steps(s, &co, 0, &st, &ns) < 0) rc = WB_EXIT_FAIL;
    }
    section(&b, i, e, be, s, st, ns, &o);
    free(st);
  }
  wb_str_add(&b, "</body></html>\n");
  if (rc == 0 && !b.s) rc = WB_EXIT_FAIL;
  if (rc == 0) {
    FILE *f = fopen(o.out, "w");
    if (!f || fwrite(b.s, 1, b.len, f) != b.len || fclose(f) != 0) {
      fprintf(stderr, "weft-bench report: cannot write %s: %s\n", o.out, strerror(errno));
      rc = WB_EXIT_USAGE;
    } else {
      fprintf(stderr, "weft-bench report: %s: %zu measurement%s, %zu bytes\n", o.out, nsec,
              nsec == 1 ? "" : "s", b.len);
    }
  }
out:
  wb_str_free(&b);
  json_decref(o.pairs);
  free(o.files);
  wb_cmp_entries_free(&res);
  wb_cmp_entries_free(&base);
#ifdef WEFT_BENCH_HAVE_SQLITE
  wb_hseries_free(hs, nhs);
#endif
  return rc;
}
