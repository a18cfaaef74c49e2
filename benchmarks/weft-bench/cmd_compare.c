/*
 * This file contains `weft-bench compare BASE.json NEW.json`: it reads two
 * JSON Lines files that weft-bench wrote, matches measurements by what was
 * measured (bench, case, backend, jobs, sleep_ms, loops, items, and the
 * http/echo parameters: requests, concurrency, keepalive, connections,
 * messages, size; spawn's batch and n; grain's task_ns; and whether fibers
 * ran), and says for each whether the median wall time changed. A record
 * that gives a time per operation (ns_per_op: spawn's) is compared by that
 * instead, so that runs that made different numbers of operations (spawn's
 * --count, or the pmap calls its warm-up chose) still compare.
 *
 * First it checks that the two runs are comparable: every matched
 * measurement's environment fingerprint (compare_env.c) must be the same on
 * both sides. When a field differs, compare names it and refuses (exit 4),
 * unless --allow-different-env says to compare anyway.
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
 *
 * --junit FILE writes the verdicts as JUnit XML as well (junit.c).
 */
#define _POSIX_C_SOURCE 200809L
#include "compare.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char compare_help[] =
    "usage: weft-bench compare BASE.json NEW.json [--threshold PCT] [--json]\n"
    "                          [--junit FILE] [--allow-different-env]\n"
    "\n"
    "Compare two JSON Lines files written by weft-bench --json. Measurements are\n"
    "matched by bench, case, backend, jobs, sleep_ms, loops, items, requests,\n"
    "concurrency, keepalive, connections, messages, size, batch, n, task_ns and\n"
    "fibers; records of one measurement that repeat within a file are pooled.\n"
    "Records with ns_per_op (spawn) are compared by their ns per operation, marked\n"
    "[ns/op].\n"
    "\n"
    "  --threshold PCT        slowdown of the median that counts (default 10)\n"
    "  --json                 one JSON object per measurement instead of the table\n"
    "  --junit FILE           also write the verdicts as JUnit XML, one test case per\n"
    "                         measurement (a regression is a failed test)\n"
    "  --allow-different-env  compare runs whose environments differ (and say how)\n"
    "  --help                 this text\n"
    "\n"
    "The environment: every record carries the machine's and the build's\n"
    "fingerprint (CPU model, cores and affinity, kernel, transparent huge pages,\n"
    "virtualisation, container, CPU quota, compilers and flags, OpenMP runtime and\n"
    "version, recorded environment variables). When a matched measurement's\n"
    "fingerprint differs between the files, compare names the fields and refuses\n"
    "(exit 4) unless --allow-different-env is given. weft's version and commit may\n"
    "differ: they are reported, not held against the runs.\n"
    "\n"
    "Verdicts: same, faster, noise (past the threshold but the samples overlap),\n"
    "SLOWER (median slower by more than PCT% and every new sample slower than\n"
    "every base sample), FAILED (the new run failed), only-base, only-new.\n"
    "Peak RSS, CPU time, page faults, OS threads and jobs in flight, where records\n"
    "have them, are judged alike (worse, better, noise, same) for information only.\n"
    "Exit codes: 0 no regression, 1 at least one SLOWER or FAILED, 2 bad input\n"
    "(unreadable file, a line that is not a weft-bench record), 4 the environments\n"
    "differ (without --allow-different-env).\n";

enum { OPT_HELP = 1, OPT_THRESHOLD, OPT_JSON, OPT_JUNIT, OPT_ALLOW_ENV };

static const wb_opt compare_opts[] = {
    {"help", false, OPT_HELP},
    {"threshold", true, OPT_THRESHOLD},
    {"json", false, OPT_JSON},
    {"junit", true, OPT_JUNIT},
    {"allow-different-env", false, OPT_ALLOW_ENV},
    {NULL, false, 0},
};

typedef wb_cmp_verdict verdict;

static void spread(const wb_cmp_entry *e, wb_summary *s) {
  *s = wb_summarize(e->samples, e->n);
  /* Records without samples told their own min and max: take the wider. */
  if (e->min < s->min) s->min = e->min;
  if (e->max > s->max) s->max = e->max;
}

verdict wb_cmp_judge(const wb_cmp_entry *base, const wb_cmp_entry *neu, double threshold) {
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
 * Judge figure m of a matched measurement as wb_cmp_judge() judges the time: past
 * the threshold with the samples apart is a change, with them overlapping
 * noise. False when either side lacks the figure.
 */
static bool judge_metric(const wb_cmp_entry *b, const wb_cmp_entry *n, size_t m, double threshold,
                         metric_verdict *v) {
  const wb_figure_samples *bs = &b->m[m], *ns = &n->m[m];
  if (!bs->n || !ns->n || b->failed || n->failed) return false;
  wb_summary x = wb_summarize(bs->v, bs->n), y = wb_summarize(ns->v, ns->n);
  double diff = y.median - x.median;
  v->base_med = x.median;
  v->new_med = y.median;
  v->change_pct = x.median != 0 ? diff / fabs(x.median) * 100.0 : NAN;
  v->word = "same";
  if (fabs(diff) < wb_cmp_metrics[m].min_change) return true;
  /* From zero any change is past the threshold. */
  double pct = isnan(v->change_pct) ? (diff > 0 ? INFINITY : -INFINITY) : v->change_pct;
  if (fabs(pct) <= threshold) return true;
  bool apart = diff > 0 ? y.min > x.max : y.max < x.min;
  bool up_is_bad = !wb_cmp_metrics[m].higher_better;
  if (!apart)
    v->word = "noise";
  else
    v->word = (diff > 0) == up_is_bad ? "worse" : "better";
  return true;
}

/* The "metrics" object of a compare record: every figure both sides have, with its verdict. */
static int add_metrics_json(json_t *rec, const wb_cmp_entry *b, const wb_cmp_entry *n, double threshold) {
  json_t *obj = json_object();
  int rc = obj ? 0 : -ENOMEM;
  for (size_t m = 0; m < WB_CMP_NMETRICS && rc == 0; m++) {
    metric_verdict v;
    if (!judge_metric(b, n, m, threshold, &v)) continue;
    json_t *one = json_object();
    rc = one ? 0 : -ENOMEM;
    if (rc == 0) rc = wb_json_set_num(one, "base", v.base_med);
    if (rc == 0) rc = wb_json_set_num(one, "new", v.new_med);
    if (rc == 0) rc = wb_json_set_num(one, "change_pct", v.change_pct);
    if (rc == 0) rc = wb_json_set_str(one, "verdict", v.word);
    if (rc == 0)
      rc = wb_json_set(obj, wb_cmp_metrics[m].key, one);
    else
      json_decref(one);
  }
  if (rc == 0) return wb_json_set(rec, "metrics", obj);
  json_decref(obj);
  return rc;
}

/* Under a measurement's row: the figures that moved (worse, better or noise), one line each. */
static void print_metrics(const wb_cmp_entry *b, const wb_cmp_entry *n, double threshold) {
  for (size_t m = 0; m < WB_CMP_NMETRICS; m++) {
    metric_verdict v;
    if (!judge_metric(b, n, m, threshold, &v) || strcmp(v.word, "same") == 0) continue;
    printf("    %-16s %12.6g %12.6g", wb_cmp_metrics[m].key, v.base_med, v.new_med);
    if (isnan(v.change_pct))
      printf(" %9s", "-");
    else
      printf(" %+8.1f%%", v.change_pct);
    printf("  %s (information)\n", v.word);
  }
}

/* ------------------------------------------------------------------------ */
/* The command                                                               */
/* ------------------------------------------------------------------------ */

/* A measurement in one file or both, in the order of the report: the base file's first. */
typedef struct pair {
  wb_cmp_entry *b, *n;
} pair;

typedef struct compare_opts_t {
  const char *files[2];
  double threshold;
  bool json, allow_env;
  const char *junit;
} compare_opts_t;

/* The environment's verdict as one line: "same environment: ..." or the fields that differ. */
static void print_env(const wb_env_check *ec, bool allowed, FILE *f) {
  wb_env_print(ec, allowed, true, "weft-bench compare: the runs were measured in different environments", f);
}

/* The differing fields as a JSON object {field: {base, new}}. */
static json_t *env_diff_json(const wb_env_check *ec) {
  json_t *o = json_object();
  for (size_t i = 0; o && i < ec->ndiffs; i++) {
    json_t *one = json_object();
    json_error_t e;
    json_t *b = json_loads(ec->diffs[i].base, JSON_DECODE_ANY, &e),
           *n = json_loads(ec->diffs[i].neu, JSON_DECODE_ANY, &e);
    int rc = one ? 0 : -ENOMEM;
    if (rc == 0)
      rc = wb_json_set(one, "base", b ? b : json_null());
    else
      json_decref(b);
    if (rc == 0)
      rc = wb_json_set(one, "new", n ? n : json_null());
    else
      json_decref(n);
    if (rc == 0)
      rc = wb_json_set(o, ec->diffs[i].field, one);
    else
      json_decref(one);
    if (rc < 0) {
      json_decref(o);
      return NULL;
    }
  }
  return o;
}

/* The JUnit case of the environment check: failed when the check refused the comparison. */
static wb_junit_case env_case(const wb_env_check *ec, bool refused) {
  wb_junit_case c = {
      "weft-bench.compare", "environment", 0, refused ? "different-environment" : NULL, NULL, NULL, NULL};
  wb_str m = {0}, o = {0};
  wb_env_checked_fields(ec, &o);
  if (ec->ndiffs == 0) {
    wb_str_addf(&m, "same environment over %zu measurements", ec->pairs);
  } else {
    wb_str_addf(&m, "%zu field%s differ%s%s:", ec->ndiffs, ec->ndiffs == 1 ? "" : "s",
                ec->ndiffs == 1 ? "s" : "", refused ? "" : " (compared anyway: --allow-different-env)");
    for (size_t i = 0; i < ec->ndiffs; i++)
      wb_str_addf(&m, " %s (base %s, new %s)%s", ec->diffs[i].field, ec->diffs[i].base, ec->diffs[i].neu,
                  i + 1 < ec->ndiffs ? ";" : "");
  }
  wb_str_addf(&o, "\nweft %s -> %s", ec->base_weft ? ec->base_weft : "?", ec->new_weft ? ec->new_weft : "?");
  c.message = m.s;
  c.output = o.s;
  return c;
}

/* A measurement's JUnit case. */
static wb_junit_case verdict_case(const wb_cmp_entry *b, const wb_cmp_entry *n, const verdict *v,
                                  double threshold) {
  const wb_cmp_entry *e = b ? b : n;
  wb_junit_case c = {e->classname, e->label, 0, NULL, NULL, NULL, NULL};
  wb_str m = {0}, o = {0};
  const char *unit = e->per_op ? "ns/op" : "ms";
  if (!isnan(v->new_med) && !e->per_op) c.time_s = v->new_med / 1000.0;
  wb_str_addf(&m, "%s", v->word);
  if (!isnan(v->change_pct)) wb_str_addf(&m, ": %+.1f%%", v->change_pct);
  if (!isnan(v->base_med) || !isnan(v->new_med))
    wb_str_addf(&m, " (base %.6g %s, new %.6g %s; threshold %.3g%%)", v->base_med, unit, v->new_med, unit,
                threshold);
  if (v->regression) c.failure = v->word;
  if (strcmp(v->word, "only-base") == 0) c.skipped = "only in the base file";
  if (strcmp(v->word, "only-new") == 0) c.skipped = "only in the new file";
  if (strcmp(v->word, "failed-both") == 0) c.skipped = "failed in both runs";
  for (size_t mi = 0; b && n && mi < WB_CMP_NMETRICS; mi++) {
    metric_verdict mv;
    if (!judge_metric(b, n, mi, threshold, &mv)) continue;
    wb_str_addf(&o, "%s%s: base %.6g, new %.6g, %s (information)", o.len ? "\n" : "", wb_cmp_metrics[mi].key,
                mv.base_med, mv.new_med, mv.word);
  }
  c.message = m.s;
  c.output = o.s;
  return c;
}

static int write_junit(const compare_opts_t *o, const wb_junit_case *cases, size_t n) {
  char thr[32];
  snprintf(thr, sizeof thr, "%g", o->threshold);
  const char *props[] = {"base", o->files[0], "new", o->files[1], "threshold_pct", thr, NULL};
  return wb_junit_write(o->junit, "weft-bench compare", props, cases, n);
}

static void free_cases(wb_junit_case *cases, size_t n) {
  for (size_t i = 0; i < n; i++) {
    free(cases[i].message);
    free(cases[i].output);
  }
  free(cases);
}

static void print_ms(double v) {
  if (isnan(v))
    printf(" %12s", "-");
  else
    printf(" %12.3f", v);
}

static int parse(int argc, char **argv, compare_opts_t *o) {
  int nfiles = 0;
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
      o->files[nfiles++] = arg;
      break;
    case OPT_HELP:
      fputs(compare_help, stdout);
      return WB_EXIT_OK;
    case OPT_THRESHOLD:
      if (!wb_parse_double("compare", "threshold", arg, 0, 1e6, &o->threshold)) return WB_EXIT_USAGE;
      break;
    case OPT_JSON:
      o->json = true;
      break;
    case OPT_JUNIT:
      o->junit = arg;
      break;
    case OPT_ALLOW_ENV:
      o->allow_env = true;
      break;
    }
  }
  if (nfiles != 2) return wb_usage_error("compare", "needs two files: BASE.json NEW.json");
  return -1;
}

/* The matched and unmatched measurements, in the report's order. */
static pair *match(wb_cmp_entries *base, wb_cmp_entries *neu, size_t *npairs) {
  pair *ps = calloc(base->n + neu->n + 1, sizeof *ps);
  if (!ps) return NULL;
  size_t k = 0;
  for (size_t i = 0; i < base->n; i++) {
    wb_cmp_entry *b = &base->v[i], *n = NULL;
    for (size_t j = 0; j < neu->n && !n; j++)
      if (strcmp(neu->v[j].key, b->key) == 0) n = &neu->v[j];
    if (n) n->matched = true;
    ps[k++] = (pair){b, n};
  }
  for (size_t j = 0; j < neu->n; j++)
    if (!neu->v[j].matched) ps[k++] = (pair){NULL, &neu->v[j]};
  *npairs = k;
  return ps;
}

static int json_row(const wb_cmp_entry *b, const wb_cmp_entry *n, const verdict *v, double threshold,
                    const wb_env_check *ec) {
  json_t *rec = json_object();
  const char *label = b ? b->label : n->label;
  int rc = rec ? 0 : -ENOMEM;
  if (rc == 0) rc = wb_json_set_int(rec, "schema", WB_SCHEMA);
  if (rc == 0) rc = wb_json_set_str(rec, "bench", "compare");
  if (rc == 0) rc = wb_json_set_str(rec, "measurement", label);
  if (rc == 0) rc = wb_json_set_num(rec, "base_ms", v->base_med);
  if (rc == 0) rc = wb_json_set_num(rec, "new_ms", v->new_med);
  if (rc == 0) rc = wb_json_set_str(rec, "unit", (b ? b : n)->per_op ? "ns_per_op" : "ms");
  if (rc == 0) rc = wb_json_set_num(rec, "change_pct", isfinite(v->change_pct) ? v->change_pct : NAN);
  if (rc == 0) rc = wb_json_set_num(rec, "threshold_pct", threshold);
  if (rc == 0) rc = wb_json_set_str(rec, "verdict", v->word);
  if (rc == 0) rc = wb_json_set_bool(rec, "regression", v->regression);
  if (rc == 0) rc = wb_json_set_str(rec, "environment", ec->ndiffs ? "different" : "same");
  if (rc == 0 && ec->ndiffs) rc = wb_json_set(rec, "environment_diff", env_diff_json(ec));
  if (rc == 0 && b && n) rc = add_metrics_json(rec, b, n, threshold);
  if (rc == 0) rc = wb_json_print_line(rec, stdout);
  json_decref(rec);
  return rc;
}

/* The comparison refused: say why, on stderr, in the JSON and in the JUnit file. */
static int refuse(const compare_opts_t *o, const wb_env_check *ec) {
  print_env(ec, false, stderr);
  fprintf(
      stderr,
      "weft-bench compare: refusing to compare unlike runs (exit %d); --allow-different-env compares them "
      "anyway\n",
      WB_EXIT_UNLIKE);
  if (o->json) {
    json_t *rec = json_object();
    int rc = rec ? 0 : -ENOMEM;
    if (rc == 0) rc = wb_json_set_int(rec, "schema", WB_SCHEMA);
    if (rc == 0) rc = wb_json_set_str(rec, "bench", "compare");
    if (rc == 0) rc = wb_json_set_str(rec, "verdict", "different-environment");
    if (rc == 0) rc = wb_json_set_str(rec, "environment", "different");
    if (rc == 0) rc = wb_json_set(rec, "environment_diff", env_diff_json(ec));
    if (rc == 0) wb_json_print_line(rec, stdout);
    json_decref(rec);
  }
  if (o->junit) {
    wb_junit_case c = env_case(ec, true);
    int rc = write_junit(o, &c, 1);
    free(c.message);
    free(c.output);
    if (rc < 0) return WB_EXIT_USAGE;
  }
  return WB_EXIT_UNLIKE;
}

int wb_cmd_compare(int argc, char **argv) {
  compare_opts_t o = {.threshold = 10};
  int rc = parse(argc, argv, &o);
  if (rc >= 0) return rc;

  wb_cmp_entries base = {0}, neu = {0};
  wb_env_check ec;
  memset(&ec, 0, sizeof ec);
  pair *ps = NULL;
  wb_junit_case *cases = NULL;
  size_t npairs = 0, ncases = 0;
  rc = wb_cmp_read(o.files[0], &base);
  if (rc == 0) rc = wb_cmp_read(o.files[1], &neu);
  if (rc != 0) goto out;
  if (!(ps = match(&base, &neu, &npairs)) || !(cases = calloc(npairs + 1, sizeof *cases))) {
    fprintf(stderr, "weft-bench compare: out of memory\n");
    rc = WB_EXIT_USAGE;
    goto out;
  }
  for (size_t i = 0; i < npairs; i++)
    if (ps[i].b && ps[i].n) wb_env_check_pair(&ec, ps[i].b->fp, ps[i].n->fp);
  if (ec.err) {
    fprintf(stderr, "weft-bench compare: out of memory\n");
    rc = WB_EXIT_USAGE;
    goto out;
  }
  if (ec.ndiffs && !o.allow_env) {
    rc = refuse(&o, &ec);
    goto out;
  }

  size_t width = 11;
  for (size_t i = 0; i < npairs; i++) {
    const wb_cmp_entry *e = ps[i].b ? ps[i].b : ps[i].n;
    if (strlen(e->label) > width) width = strlen(e->label);
  }
  if (!o.json) {
    print_env(&ec, true, stdout);
    printf("\n%-*s %12s %12s %9s  %s\n", (int)width, "measurement", "base ms", "new ms", "change", "verdict");
  }
  cases[ncases++] = env_case(&ec, false);
  size_t regressions = 0, compared = 0;
  for (size_t i = 0; i < npairs; i++) {
    wb_cmp_entry *b = ps[i].b, *n = ps[i].n;
    verdict v = wb_cmp_judge(b, n, o.threshold);
    regressions += v.regression;
    compared += b && n;
    cases[ncases++] = verdict_case(b, n, &v, o.threshold);
    if (o.json) {
      if (json_row(b, n, &v, o.threshold, &ec) < 0) rc = WB_EXIT_FAIL;
      continue;
    }
    printf("%-*s", (int)width, b ? b->label : n->label);
    print_ms(v.base_med);
    print_ms(v.new_med);
    if (isnan(v.change_pct))
      printf(" %9s", "-");
    else
      printf(" %+8.1f%%", v.change_pct);
    printf("  %s\n", v.word);
    if (b && n) print_metrics(b, n, o.threshold);
  }
  if (!o.json)
    printf(
        "\n%zu compared, %zu regression%s (threshold %.3g%%, and the new minimum above the base maximum)\n",
        compared, regressions, regressions == 1 ? "" : "s", o.threshold);
  if (o.junit && write_junit(&o, cases, ncases) < 0 && rc == 0) rc = WB_EXIT_USAGE;
  if (rc == 0) rc = regressions ? WB_EXIT_FAIL : WB_EXIT_OK;
out:
  free_cases(cases, ncases);
  free(ps);
  wb_env_check_free(&ec);
  wb_cmp_entries_free(&base);
  wb_cmp_entries_free(&neu);
  return rc;
}
