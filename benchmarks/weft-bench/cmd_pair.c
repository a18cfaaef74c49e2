/*
 * This file contains `weft-bench pair BASE NEW -- ARGS...`: paired
 * benchmarking, after tango-bench. On a shared 2-vCPU machine the same
 * build moves by up to 2x between runs an hour apart, so two separate runs
 * (compare) cannot tell a 5% regression from the weather. pair runs both
 * builds many times, interleaved, so that they share the machine's noise:
 *
 *   round 0: BASE ARGS --json, then NEW ARGS --json
 *   round 1: NEW, then BASE          (ABBA: neither side always goes first)
 *   ...
 *
 * each as a fresh process. A round gives each measurement one ratio: the
 * median of NEW's samples over the median of BASE's. The verdict comes from
 * those ratios (pairstats.c): the Hodges-Lehmann estimate of the ratio and
 * its Wilcoxon signed-rank interval at --confidence (95%):
 *
 *   SLOWER  the estimate is more than --threshold percent slower and the
 *           whole interval is above 1 (the slowdown is real, and large);
 *   faster  the mirror image;
 *   noise   past the threshold, but the interval holds 1;
 *   same    within the threshold;
 *   FAILED  the new side failed (a record with status "failed", or a run
 *           that exited nonzero with no record) where the base did not.
 *
 * The rest is compare's (compare.h): records are read and keyed by
 * wb_cmp_read_text, so a measurement is what compare calls one, with its
 * ns per operation where the record has one (spawn); the two sides'
 * environment fingerprints are held against each other by
 * wb_env_check_pair, and a difference refuses the comparison (exit 4)
 * unless --allow-different-env; the exit codes are compare's.
 *
 * --rounds auto runs at least 10 rounds and stops as soon as every
 * measurement's verdict is settled (its interval lies wholly above the
 * threshold, wholly within it, or wholly below minus it), or when the next
 * round would pass --budget seconds, or at --max-rounds. Looking after
 * every round is a sequential test: to keep its false alarms near the
 * level's, the early stop asks for the stricter interval (miss rate a fifth
 * of the level's: 99% for 95%), while the verdict at the stop is the
 * level's (docs/benchmarks.md has the measured rates).
 */
#define _POSIX_C_SOURCE 200809L
#include "regress.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char pair_help[] =
    "usage: weft-bench pair BASE NEW [--rounds N|auto] [--threshold PCT]\n"
    "                       [--confidence C] [--budget S] [--max-rounds N]\n"
    "                       [--json] [--junit FILE] [--allow-different-env]\n"
    "                       [--out-base FILE] [--out-new FILE] [--json-file FILE]\n"
    "                       -- ARGS...\n"
    "\n"
    "Paired runs: BASE and NEW are programs (a weft-bench of another build, or a\n"
    "wrapper that runs one). Each round runs `BASE ARGS --json` and `NEW ARGS --json`\n"
    "as fresh processes, in alternating order (ABBA), and takes for each measurement\n"
    "the ratio of NEW's median to BASE's. The verdict comes from those ratios: their\n"
    "Hodges-Lehmann estimate and Wilcoxon signed-rank confidence interval.\n"
    "\n"
    "  --rounds N|auto        rounds (default 10); auto: at least 10, then stop once\n"
    "                         every verdict is settled, or at the budget\n"
    "  --threshold PCT        a change that counts (default 3)\n"
    "  --confidence C         the interval's level (default 0.95)\n"
    "  --budget S             --rounds auto: stop before passing S seconds (default 60)\n"
    "  --max-rounds N         --rounds auto: at most N rounds (default 100)\n"
    "  --json                 one JSON object per measurement instead of the table\n"
    "  --junit FILE           also write the verdicts as JUnit XML\n"
    "  --allow-different-env  go on when the two sides' environments differ\n"
    "  --out-base FILE        write every record BASE printed to FILE (JSON Lines)\n"
    "  --out-new FILE         the same for NEW (for history add and report)\n"
    "  --json-file FILE       also write the --json objects to FILE (for report --pair)\n"
    "  --help                 this text\n"
    "\n"
    "Verdicts: same, faster, noise, SLOWER (estimate slower than PCT% and the whole\n"
    "interval above 1), FAILED (NEW failed where BASE did not), only-base, only-new.\n"
    "Exit codes: 0 nothing slower, 1 SLOWER or FAILED, 2 bad input (a program that\n"
    "cannot run, output that is not weft-bench records, a failing BASE), 4 the two\n"
    "sides' environments differ (without --allow-different-env).\n";

enum {
  OPT_HELP = 1,
  OPT_ROUNDS,
  OPT_THRESHOLD,
  OPT_CONFIDENCE,
  OPT_BUDGET,
  OPT_MAX_ROUNDS,
  OPT_JSON,
  OPT_JUNIT,
  OPT_ALLOW_ENV,
  OPT_OUT_BASE,
  OPT_OUT_NEW,
  OPT_JSON_FILE,
};

static const wb_opt pair_opts[] = {
    {"help", false, OPT_HELP},
    {"rounds", true, OPT_ROUNDS},
    {"threshold", true, OPT_THRESHOLD},
    {"confidence", true, OPT_CONFIDENCE},
    {"budget", true, OPT_BUDGET},
    {"max-rounds", true, OPT_MAX_ROUNDS},
    {"json", false, OPT_JSON},
    {"junit", true, OPT_JUNIT},
    {"allow-different-env", false, OPT_ALLOW_ENV},
    {"out-base", true, OPT_OUT_BASE},
    {"out-new", true, OPT_OUT_NEW},
    {"json-file", true, OPT_JSON_FILE},
    {NULL, false, 0},
};

#define MIN_AUTO_ROUNDS 10
#define MAX_ROUNDS      10000

typedef struct pair_opts_t {
  const char *prog[2]; /* BASE, NEW */
  char **args;         /* ARGS (pointers into argv) */
  size_t nargs;
  int64_t rounds; /* 0: auto */
  int64_t max_rounds;
  double threshold, confidence, budget_s;
  bool json, allow_env;
  const char *junit, *out[2], *json_file;
} pair_opts_t;

/* One measurement over the rounds. */
typedef struct pmeas {
  char *key, *label, *classname, *command;
  bool per_op;
  json_t *fp[2];   /* the first round's fingerprints */
  double *val[2];  /* per round: the median of that side's samples (NAN: absent or failed) */
  bool failed[2];  /* some round's record on that side failed */
  bool seen[2];    /* printed by that side at all */
  double *pool[2]; /* every sample of every round, per side: the table's medians */
  size_t npool[2];
} pmeas;

typedef struct pstate {
  pmeas *m;
  size_t n, cap;
  size_t rounds; /* rounds done */
  FILE *out[2];
} pstate;

static int parse(int argc, char **argv, pair_opts_t *o) {
  wb_optstate st;
  wb_opt_init(&st, argc, argv, "pair");
  const char *arg;
  int id, nprog = 0;
  o->args = calloc((size_t)argc + 1, sizeof *o->args);
  if (!o->args) return wb_usage_error("pair", "out of memory");
  while ((id = wb_opt_next(&st, pair_opts, &arg)) != WB_OPT_END) {
    switch (id) {
    case WB_OPT_ERROR:
      return WB_EXIT_USAGE;
    case WB_OPT_POSITIONAL:
      if (st.dashdash)
        o->args[o->nargs++] = (char *)arg;
      else if (nprog < 2)
        o->prog[nprog++] = arg;
      else
        return wb_usage_error("pair", "'%s': the benchmark's arguments go after '--'", arg);
      break;
    case OPT_HELP:
      fputs(pair_help, stdout);
      return WB_EXIT_OK;
    case OPT_ROUNDS:
      if (strcmp(arg, "auto") == 0)
        o->rounds = 0;
      else if (!wb_parse_i64("pair", "rounds", arg, 1, MAX_ROUNDS, &o->rounds))
        return WB_EXIT_USAGE;
      break;
    case OPT_THRESHOLD:
      if (!wb_parse_double("pair", "threshold", arg, 0, 1e6, &o->threshold)) return WB_EXIT_USAGE;
      break;
    case OPT_CONFIDENCE:
      if (!wb_parse_double("pair", "confidence", arg, 0.5, 0.9999, &o->confidence)) return WB_EXIT_USAGE;
      if (o->confidence <= 0.5) return wb_usage_error("pair", "--confidence: must be above 0.5");
      break;
    case OPT_BUDGET:
      if (!wb_parse_double("pair", "budget", arg, 0.001, 1e7, &o->budget_s)) return WB_EXIT_USAGE;
      break;
    case OPT_MAX_ROUNDS:
      if (!wb_parse_i64("pair", "max-rounds", arg, MIN_AUTO_ROUNDS, MAX_ROUNDS, &o->max_rounds))
        return WB_EXIT_USAGE;
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
    case OPT_OUT_BASE:
      o->out[0] = arg;
      break;
    case OPT_OUT_NEW:
      o->out[1] = arg;
      break;
    case OPT_JSON_FILE:
      o->json_file = arg;
      break;
    }
  }
  if (nprog != 2) return wb_usage_error("pair", "needs two programs: BASE NEW -- ARGS...");
  if (o->nargs == 0) return wb_usage_error("pair", "needs the benchmark to run after '--' (e.g. -- spawn)");
  return -1;
}

static void pstate_free(pstate *ps) {
  for (size_t i = 0; i < ps->n; i++) {
    pmeas *m = &ps->m[i];
    free(m->key);
    free(m->label);
    free(m->classname);
    free(m->command);
    for (int s = 0; s < 2; s++) {
      json_decref(m->fp[s]);
      free(m->val[s]);
      free(m->pool[s]);
    }
  }
  free(ps->m);
  for (int s = 0; s < 2; s++)
    if (ps->out[s]) fclose(ps->out[s]);
}

static pmeas *find_or_add(pstate *ps, const wb_cmp_entry *e, size_t max_rounds) {
  for (size_t i = 0; i < ps->n; i++)
    if (strcmp(ps->m[i].key, e->key) == 0) return &ps->m[i];
  if (ps->n == ps->cap) {
    size_t cap = ps->cap ? 2 * ps->cap : 8;
    pmeas *p = realloc(ps->m, cap * sizeof *p);
    if (!p) return NULL;
    ps->m = p;
    ps->cap = cap;
  }
  pmeas *m = &ps->m[ps->n];
  memset(m, 0, sizeof *m);
  m->key = strdup(e->key);
  m->label = strdup(e->label);
  m->classname = strdup(e->classname);
  m->per_op = e->per_op;
  for (int s = 0; s < 2; s++) {
    m->val[s] = malloc(max_rounds * sizeof *m->val[s]);
    for (size_t r = 0; m->val[s] && r < max_rounds; r++) m->val[s][r] = NAN;
  }
  if (!m->key || !m->label || !m->classname || !m->val[0] || !m->val[1]) {
    free(m->key);
    free(m->label);
    free(m->classname);
    free(m->val[0]);
    free(m->val[1]);
    return NULL;
  }
  ps->n++;
  return m;
}

/*
 * Run one side once: "PROG ARGS --json". Its records go into ps at round r.
 * Returns 0; WB_EXIT_USAGE after a message (cannot run, malformed output);
 * WB_EXIT_FAIL when it exited nonzero and printed no record (the side failed).
 */
static int run_side(const pair_opts_t *o, pstate *ps, int side, size_t r, size_t max_rounds) {
  static const char *const names[2] = {"BASE", "NEW"};
  char **argv = calloc(o->nargs + 3, sizeof *argv);
  if (!argv) return wb_usage_error("pair", "out of memory");
  argv[0] = (char *)o->prog[side];
  for (size_t i = 0; i < o->nargs; i++) argv[i + 1] = o->args[i];
  argv[o->nargs + 1] = "--json";
  char *text = NULL;
  size_t len = 0;
  int code;
  int rc = wb_run_capture(o->prog[side], argv, NULL, strchr(o->prog[side], '/') == NULL, &text, &len, &code);
  free(argv);
  if (rc < 0) {
    fprintf(stderr, "weft-bench pair: cannot run %s '%s': %s\n", names[side], o->prog[side], strerror(-rc));
    return WB_EXIT_USAGE;
  }
  if (ps->out[side] && len) fwrite(text, 1, len, ps->out[side]);
  size_t a = 0;
  while (a < len && (text[a] == '\n' || text[a] == ' ' || text[a] == '\r' || text[a] == '\t')) a++;
  if (a == len) {
    free(text);
    if (code == 0) {
      fprintf(stderr, "weft-bench pair: %s '%s' printed no record (round %zu, exit code 0)\n", names[side],
              o->prog[side], r + 1);
      return WB_EXIT_USAGE;
    }
    fprintf(stderr, "weft-bench pair: %s '%s' failed with exit code %d and printed no record (round %zu)\n",
            names[side], o->prog[side], code, r + 1);
    return WB_EXIT_FAIL;
  }
  char name[64];
  snprintf(name, sizeof name, "%s (round %zu)", names[side], r + 1);
  wb_cmp_entries es = {0};
  rc = wb_cmp_read_text("pair", name, text, len, &es);
  for (size_t i = 0; rc == 0 && i < es.n; i++) {
    wb_cmp_entry *e = &es.v[i];
    pmeas *m = find_or_add(ps, e, max_rounds);
    if (!m) {
      rc = wb_usage_error("pair", "out of memory");
      break;
    }
    m->seen[side] = true;
    if (!m->fp[side]) m->fp[side] = json_incref(e->fp);
    if (!m->command && side == 1 && e->command && !(m->command = strdup(e->command))) {
      rc = wb_usage_error("pair", "out of memory");
      break;
    }
    if (e->failed || !e->n) {
      m->failed[side] = true;
      continue;
    }
    m->val[side][r] = wb_median(e->samples, e->n);
    double *p = realloc(m->pool[side], (m->npool[side] + e->n) * sizeof *p);
    if (!p) {
      rc = wb_usage_error("pair", "out of memory");
      break;
    }
    memcpy(p + m->npool[side], e->samples, e->n * sizeof *p);
    m->pool[side] = p;
    m->npool[side] += e->n;
  }
  wb_cmp_entries_free(&es);
  free(text);
  return rc;
}

/* A measurement's verdict from its paired rounds. */
typedef struct pverdict {
  const char *word;
  bool regression, settled;
  wb_paired st;
  double change_pct;
} pverdict;

static pverdict judge_pair(const pmeas *m, size_t rounds, const pair_opts_t *o) {
  pverdict v = {"same", false, true, {0, NAN, NAN, -INFINITY, INFINITY, NAN, 1}, NAN};
  if (!m->seen[1]) return (pverdict){"only-base", false, true, v.st, NAN};
  if (!m->seen[0]) return (pverdict){"only-new", false, true, v.st, NAN};
  if (m->failed[1]) {
    v.word = m->failed[0] ? "failed-both" : "FAILED";
    v.regression = !m->failed[0];
    return v;
  }
  if (m->failed[0]) return (pverdict){"fixed", false, true, v.st, NAN};
  if (wb_paired_ratio(m->val[0], m->val[1], rounds, o->confidence, &v.st) < 0 || v.st.n == 0) {
    v.settled = false;
    return v;
  }
  double t = o->threshold / 100;
  v.change_pct = (v.st.ratio - 1) * 100;
  if (v.change_pct > o->threshold)
    v.word = v.st.low > 1 ? "SLOWER" : "noise";
  else if (v.change_pct < -o->threshold)
    v.word = v.st.high < 1 ? "faster" : "noise";
  v.regression = strcmp(v.word, "SLOWER") == 0;
  /*
   * Settled: more rounds could not move the interval across a boundary that changes the word.
   * Looking after every round is a sequential test, and a burst of noise on a shared machine can
   * make a few early rounds agree by chance; so stopping early asks for the stricter interval
   * whose miss rate is a fifth of the level's (99% for 95%), as Pocock's boundaries do.
   */
  wb_paired strict;
  if (wb_paired_ratio(m->val[0], m->val[1], rounds, 1 - (1 - o->confidence) / 5, &strict) < 0) strict = v.st;
  v.settled = strict.low > 1 + t || (strict.low > 1 - t && strict.high < 1 + t) || strict.high < 1 - t;
  return v;
}

static void print_env(const wb_env_check *ec, bool allowed, FILE *f) {
  wb_env_print(ec, allowed, false, "weft-bench pair: BASE and NEW ran in different environments", f);
}

static int json_row(const pmeas *m, const pverdict *v, size_t rounds, const pair_opts_t *o,
                    const wb_env_check *ec, FILE *f) {
  json_t *rec = json_object();
  int rc = rec ? 0 : -ENOMEM;
  if (rc == 0) rc = wb_json_set_int(rec, "schema", WB_SCHEMA);
  if (rc == 0) rc = wb_json_set_str(rec, "bench", "pair");
  if (rc == 0) rc = wb_json_set_str(rec, "measurement", m->label);
  if (rc == 0) rc = wb_json_set_str(rec, "unit", m->per_op ? "ns_per_op" : "ms");
  if (rc == 0) rc = wb_json_set_int(rec, "rounds", (int64_t)rounds);
  if (rc == 0) rc = wb_json_set_int(rec, "pairs", (int64_t)v->st.n);
  if (rc == 0) rc = wb_json_set_num(rec, "base", wb_median(m->pool[0], m->npool[0]));
  if (rc == 0) rc = wb_json_set_num(rec, "new", wb_median(m->pool[1], m->npool[1]));
  if (rc == 0) rc = wb_json_set_num(rec, "ratio", v->st.ratio);
  if (rc == 0) rc = wb_json_set_num(rec, "median_ratio", v->st.median_ratio);
  if (rc == 0) rc = wb_json_set_num(rec, "ratio_low", isfinite(v->st.low) ? v->st.low : NAN);
  if (rc == 0) rc = wb_json_set_num(rec, "ratio_high", isfinite(v->st.high) ? v->st.high : NAN);
  if (rc == 0) rc = wb_json_set_num(rec, "confidence", o->confidence);
  if (rc == 0) rc = wb_json_set_num(rec, "p_value", v->st.n ? v->st.p_value : NAN);
  if (rc == 0) rc = wb_json_set_num(rec, "change_pct", v->change_pct);
  if (rc == 0) rc = wb_json_set_num(rec, "threshold_pct", o->threshold);
  if (rc == 0) rc = wb_json_set_str(rec, "verdict", v->word);
  if (rc == 0) rc = wb_json_set_bool(rec, "regression", v->regression);
  if (rc == 0) rc = wb_json_set_str(rec, "environment", ec->ndiffs ? "different" : "same");
  if (rc == 0) {
    double *r = malloc((rounds ? rounds : 1) * sizeof *r);
    size_t k = r ? wb_ratios(m->val[1], rounds, m->val[0], rounds, r) : 0;
    rc = r ? wb_json_set_nums(rec, "ratio_samples", r, k) : -ENOMEM;
    free(r);
  }
  if (rc == 0) rc = wb_json_set_str(rec, "command", m->command);
  if (rc == 0) rc = wb_json_print_line(rec, f);
  json_decref(rec);
  return rc;
}

static wb_junit_case junit_case(const pmeas *m, const pverdict *v, const pair_opts_t *o) {
  wb_junit_case c = {m->classname, m->label, 0, NULL, NULL, NULL, NULL};
  wb_str msg = {0};
  wb_str_addf(&msg, "%s", v->word);
  if (!isnan(v->change_pct))
    wb_str_addf(&msg, ": %+.1f%% (ratio %.4f, %g%% interval [%.4f, %.4f] over %zu pairs; threshold %.3g%%)",
                v->change_pct, v->st.ratio, o->confidence * 100, v->st.low, v->st.high, v->st.n,
                o->threshold);
  if (v->regression) c.failure = v->word;
  if (strcmp(v->word, "only-base") == 0) c.skipped = "only BASE printed it";
  if (strcmp(v->word, "only-new") == 0) c.skipped = "only NEW printed it";
  if (strcmp(v->word, "failed-both") == 0) c.skipped = "failed on both sides";
  c.message = msg.s;
  if (m->command) {
    wb_str out = {0};
    wb_str_addf(&out, "command: %s", m->command);
    c.output = out.s;
  }
  return c;
}

static int write_junit(const pair_opts_t *o, const pmeas *ms, const pverdict *vs, size_t n,
                       const wb_env_check *ec, bool refused) {
  wb_junit_case *cases = calloc(n + 1, sizeof *cases);
  if (!cases) return -ENOMEM;
  wb_str em = {0};
  if (ec->ndiffs == 0)
    wb_str_addf(&em, "same environment over %zu pairs", ec->pairs);
  else
    for (size_t i = 0; i < ec->ndiffs; i++)
      wb_str_addf(&em, "%s%s (base %s, new %s)", i ? "; " : "", ec->diffs[i].field, ec->diffs[i].base,
                  ec->diffs[i].neu);
  cases[0] = (wb_junit_case){
      "weft-bench.pair", "environment", 0, refused ? "different-environment" : NULL, NULL, em.s, NULL};
  size_t k = 1;
  for (size_t i = 0; !refused && i < n; i++) cases[k++] = junit_case(&ms[i], &vs[i], o);
  char thr[32], conf[32];
  snprintf(thr, sizeof thr, "%g", o->threshold);
  snprintf(conf, sizeof conf, "%g", o->confidence);
  const char *props[] = {"base", o->prog[0],   "new", o->prog[1], "threshold_pct",
                         thr,    "confidence", conf,  NULL};
  int rc = wb_junit_write(o->junit, "weft-bench pair", props, cases, k);
  for (size_t i = 0; i < k; i++) {
    free(cases[i].message);
    free(cases[i].output);
  }
  free(cases);
  return rc;
}

static void print_interval(double low, double high) {
  if (isfinite(low) && isfinite(high))
    printf(" [%.4f, %.4f]", low, high);
  else
    printf(" %18s", "[needs 6 rounds]");
}

int wb_cmd_pair(int argc, char **argv) {
  pair_opts_t o = {.rounds = 10, .max_rounds = 100, .threshold = 3, .confidence = 0.95, .budget_s = 60};
  pstate ps;
  memset(&ps, 0, sizeof ps);
  wb_env_check ec;
  memset(&ec, 0, sizeof ec);
  pverdict *vs = NULL;
  int rc = parse(argc, argv, &o);
  if (rc >= 0) goto out;
  rc = 0;
  wb_progress_init(o.json);
  for (int s = 0; s < 2; s++) {
    if (o.out[s] && !(ps.out[s] = fopen(o.out[s], "w"))) {
      fprintf(stderr, "weft-bench pair: cannot write %s: %s\n", o.out[s], strerror(errno));
      rc = WB_EXIT_USAGE;
      goto out;
    }
  }
  size_t max_rounds = o.rounds ? (size_t)o.rounds : (size_t)o.max_rounds;
  int64_t t0 = wb_now_ns();
  bool new_failed = false;
  for (size_t r = 0; r < max_rounds; r++) {
    if (!o.rounds && r >= MIN_AUTO_ROUNDS) {
      /* Stop once every verdict is settled, or before the next round would pass the budget. */
      double spent = (double)(wb_now_ns() - t0) / 1e9, per_round = spent / (double)r;
      bool settled = true;
      for (size_t i = 0; i < ps.n && settled; i++) settled = judge_pair(&ps.m[i], r, &o).settled;
      if (settled || spent + per_round > o.budget_s) break;
    }
    if (!o.json) wb_progress(true, "pair: round %zu%s", r + 1, o.rounds ? "" : " (auto)");
    for (int k = 0; k < 2; k++) {
      int side = (int)(r % 2) ^ k; /* round 0: BASE then NEW; round 1: NEW then BASE */
      int src = run_side(&o, &ps, side, r, max_rounds);
      if (src == WB_EXIT_FAIL && side == 1) {
        new_failed = true;
      } else if (src == WB_EXIT_FAIL) {
        fprintf(stderr, "weft-bench pair: BASE must run for NEW to be judged against it\n");
        rc = WB_EXIT_USAGE;
        goto out;
      } else if (src != 0) {
        rc = src;
        goto out;
      }
    }
    ps.rounds = r + 1;
    if (new_failed) {
      /* NEW cannot run: every measurement it should have printed failed. */
      for (size_t i = 0; i < ps.n; i++) ps.m[i].failed[1] = ps.m[i].seen[1] = true;
      break;
    }
    /* The environment: every round's fingerprints, one pair per measurement (the first round's kept). */
    if (r == 0) {
      for (size_t i = 0; i < ps.n; i++)
        if (ps.m[i].fp[0] && ps.m[i].fp[1]) wb_env_check_pair(&ec, ps.m[i].fp[0], ps.m[i].fp[1]);
      if (ec.err) {
        rc = wb_usage_error("pair", "out of memory");
        goto out;
      }
      if (ec.ndiffs && !o.allow_env) {
        wb_progress_clear();
        print_env(&ec, false, stderr);
        fprintf(stderr,
                "weft-bench pair: refusing to compare unlike runs (exit %d); --allow-different-env compares "
                "them anyway\n",
                WB_EXIT_UNLIKE);
        if (o.junit) write_junit(&o, ps.m, NULL, 0, &ec, true);
        rc = WB_EXIT_UNLIKE;
        goto out;
      }
    }
  }
  wb_progress_clear();
  double spent = (double)(wb_now_ns() - t0) / 1e9;
  if (!(vs = calloc(ps.n + 1, sizeof *vs))) {
    rc = wb_usage_error("pair", "out of memory");
    goto out;
  }
  FILE *jf = NULL;
  if (o.json_file && !(jf = fopen(o.json_file, "w"))) {
    fprintf(stderr, "weft-bench pair: cannot write %s: %s\n", o.json_file, strerror(errno));
    rc = WB_EXIT_USAGE;
    goto out;
  }
  size_t regressions = 0, width = 11;
  for (size_t i = 0; i < ps.n; i++) {
    vs[i] = judge_pair(&ps.m[i], ps.rounds, &o);
    regressions += vs[i].regression;
    size_t l = strlen(ps.m[i].label);
    if (l > width) width = l;
  }
  if (!o.json) {
    print_env(&ec, true, stdout);
    printf("\n%-*s %12s %12s %8s %18s %9s  %s\n", (int)width, "measurement", "base", "new", "ratio",
           "interval", "change", "verdict");
  }
  for (size_t i = 0; i < ps.n; i++) {
    const pmeas *m = &ps.m[i];
    const pverdict *v = &vs[i];
    if (jf && json_row(m, v, ps.rounds, &o, &ec, jf) < 0) rc = WB_EXIT_USAGE;
    if (o.json) {
      if (json_row(m, v, ps.rounds, &o, &ec, stdout) < 0) rc = WB_EXIT_FAIL;
      continue;
    }
    printf("%-*s", (int)width, m->label);
    wb_print_cell(wb_median(m->pool[0], m->npool[0]), 12, 3);
    wb_print_cell(wb_median(m->pool[1], m->npool[1]), 12, 3);
    wb_print_cell(v->st.ratio, 8, 4);
    print_interval(v->st.low, v->st.high);
    if (isnan(v->change_pct))
      printf(" %9s", "-");
    else
      printf(" %+8.1f%%", v->change_pct);
    printf("  %s\n", v->word);
  }
  if (!o.json)
    printf(
        "\n%zu rounds (ABBA) in %.1f s; %zu regression%s (estimate slower than %.3g%% and the %g%% interval "
        "above 1); times in ms, [ns/op] rows in ns\n",
        ps.rounds, spent, regressions, regressions == 1 ? "" : "s", o.threshold, o.confidence * 100);
  if (jf && fclose(jf) != 0 && rc == 0) rc = WB_EXIT_USAGE;
  if (o.junit && write_junit(&o, ps.m, vs, ps.n, &ec, false) < 0 && rc == 0) rc = WB_EXIT_USAGE;
  if (rc == 0) rc = regressions ? WB_EXIT_FAIL : WB_EXIT_OK;
out:
  wb_progress_clear();
  free(vs);
  free(o.args);
  wb_env_check_free(&ec);
  pstate_free(&ps);
  return rc;
}
