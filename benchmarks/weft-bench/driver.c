/*
 * This file contains the driver that runs every measuring command of
 * weft-bench (driver.h has the design): the options they share, the pick
 * list, the command line that repeats a run, the warm-up, the interleaved
 * repetitions, the samples and their summaries, the records and the exit
 * code. A command is its table (wb_command) and the functions it names.
 */
#define _POSIX_C_SOURCE 200809L
#include "driver.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft.h"

enum { OPT_HELP = WB_OPT_DRIVER, OPT_JSON, OPT_REPEAT, OPT_PICK, OPT_STATS };

/* ------------------------------------------------------------------------ */
/* Helpers for the commands                                                  */
/* ------------------------------------------------------------------------ */

wb_run *wb_add_run(wb_driver *d, const char *name, int id) {
  wb_run *p = realloc(d->runs, (d->nruns + 1) * sizeof *p);
  if (!p) return NULL;
  d->runs = p;
  wb_run *r = &d->runs[d->nruns++];
  memset(r, 0, sizeof *r);
  r->name = name;
  r->id = id;
  return r;
}

const wb_choice *wb_picked(const wb_driver *d, size_t i) { return &d->cmd->choices[d->picked[i]]; }

void wb_skip(wb_driver *d, wb_run *r, const char *why) {
  r->skipped = true;
  snprintf(r->error, sizeof r->error, "%s", why);
  char msg[sizeof d->told[0]];
  snprintf(msg, sizeof msg, "%s: skipped: %s", r->family ? r->family : r->name, why);
  for (size_t i = 0; i < d->ntold; i++)
    if (strcmp(d->told[i], msg) == 0) return;
  if (d->ntold < sizeof d->told / sizeof d->told[0]) snprintf(d->told[d->ntold++], sizeof msg, "%s", msg);
  wb_progress_clear();
  /* Not a failure: a machine without Go still runs every other measurement. */
  fprintf(stderr, "weft-bench %s: %s\n", d->cmd->name, msg);
}

void wb_args_picked(const wb_driver *d, wb_args *a) {
  wb_str list = {0};
  for (size_t i = 0; i < d->npicked; i++) wb_str_addf(&list, "%s%s", i ? "," : "", wb_picked(d, i)->name);
  wb_args_addf(a, "--%s", d->cmd->pick);
  if (list.s)
    wb_args_add(a, list.s);
  else if (!a->err)
    a->err = -ENOMEM;
  wb_str_free(&list);
}

void wb_args_repeat(const wb_driver *d, wb_args *a) { wb_args_int(a, "--repeat", d->repeat); }

const wb_run *wb_find_run(const wb_driver *d, const char *name) {
  for (size_t i = 0; i < d->nruns; i++)
    if (strcmp(d->runs[i].name, name) == 0 && d->runs[i].n > 0) return &d->runs[i];
  return NULL;
}

wb_summary wb_run_ms(const wb_run *r) { return wb_summarize(r->ms, r->n); }

wb_summary wb_run_metric(const wb_run *r, size_t m) { return wb_summarize(r->m[m], r->n); }

const char *wb_run_label(const wb_run *r) { return r->label ? r->label : r->name; }

int wb_fail(wb_sample *s, int rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->error, sizeof s->error, fmt, ap);
  va_end(ap);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* Options and the pick list                                                 */
/* ------------------------------------------------------------------------ */

/* The command's options and the driver's, in one table (NULL-ended); NULL when out of memory. */
static wb_opt *option_table(const wb_command *cmd) {
  size_t n = 0;
  while (cmd->opts && cmd->opts[n].name) n++;
  wb_opt *t = calloc(n + 6, sizeof *t);
  if (!t) return NULL;
  if (n) memcpy(t, cmd->opts, n * sizeof *t);
  t[n++] = (wb_opt){"help", false, OPT_HELP};
  t[n++] = (wb_opt){"json", false, OPT_JSON};
  t[n++] = (wb_opt){"repeat", true, OPT_REPEAT};
  t[n++] = (wb_opt){"stats", false, OPT_STATS};
  if (cmd->pick) t[n++] = (wb_opt){cmd->pick, true, OPT_PICK};
  return t;
}

/* -1: go on; else the exit code (--help, a usage error, a choice this build lacks). */
static int parse_options(wb_driver *d, int argc, char **argv) {
  const wb_command *cmd = d->cmd;
  wb_opt *opts = option_table(cmd);
  if (!opts) {
    fprintf(stderr, "weft-bench %s: out of memory\n", cmd->name);
    return WB_EXIT_FAIL;
  }
  const char *list = cmd->pick_default;
  wb_optstate st;
  wb_opt_init(&st, argc, argv, cmd->name);
  const char *arg;
  int id, rc = -1;
  while (rc < 0 && (id = wb_opt_next(&st, opts, &arg)) != WB_OPT_END) {
    switch (id) {
    case WB_OPT_ERROR:
      rc = WB_EXIT_USAGE;
      break;
    case WB_OPT_POSITIONAL:
      rc = wb_usage_error(cmd->name, "unexpected argument '%s'", arg);
      break;
    case OPT_HELP:
      fputs(cmd->help, stdout);
      rc = WB_EXIT_OK;
      break;
    case OPT_JSON:
      d->json = true;
      break;
    case OPT_STATS:
      d->stats = true;
      break;
    case OPT_REPEAT:
      if (!wb_parse_i64(cmd->name, "repeat", arg, 1, cmd->max_repeat, &d->repeat)) rc = WB_EXIT_USAGE;
      break;
    case OPT_PICK:
      list = arg;
      break;
    default: {
      int orc = cmd->option ? cmd->option(d, id, arg) : WB_EXIT_USAGE;
      if (orc != 0) rc = orc;
    }
    }
  }
  free(opts);
  if (rc >= 0 || !cmd->pick) return rc;

  const char *names[WB_MAX_CHOICES];
  for (size_t i = 0; i < cmd->nchoices; i++) names[i] = cmd->choices[i].name;
  if (list) {
    if (!wb_parse_list(cmd->name, cmd->pick, list, names, cmd->nchoices, d->picked, &d->npicked))
      return WB_EXIT_USAGE;
  } else {
    for (size_t i = 0; i < cmd->nchoices; i++)
      if (!cmd->choices[i].unavailable) d->picked[d->npicked++] = i;
  }
  for (size_t i = 0; i < d->npicked; i++) {
    const wb_choice *c = wb_picked(d, i);
    if (!c->unavailable) continue;
    fprintf(stderr, "weft-bench %s: %s %s is not available: %s\n", cmd->name, cmd->pick, c->name,
            c->unavailable);
    return WB_EXIT_UNAVAILABLE;
  }
  return -1;
}

/* ------------------------------------------------------------------------ */
/* The command line                                                          */
/* ------------------------------------------------------------------------ */

static int make_command(wb_driver *d) {
  wb_args a = {0};
  wb_args_add(&a, d->cmd->name);
  int rc = d->cmd->args ? d->cmd->args(d, &a) : 0;
  if (d->json) wb_args_add(&a, "--json");
  if (rc == 0) rc = a.err;
  free(d->command);
  d->command = NULL;
  if (rc == 0) rc = wb_command_line(a.v, a.n, NULL, &d->command);
  wb_args_free(&a);
  if (rc < 0) {
    fprintf(stderr, "weft-bench %s: out of memory\n", d->cmd->name);
    return WB_EXIT_FAIL;
  }
  if (!d->json) {
    wb_progress_clear();
    fprintf(stderr, "command: %s\n", d->command);
  }
  return 0;
}

/* ------------------------------------------------------------------------ */
/* Repetitions                                                               */
/* ------------------------------------------------------------------------ */

static int alloc_samples(wb_driver *d) {
  size_t cap = (size_t)d->repeat;
  for (size_t i = 0; i < d->nruns; i++) {
    wb_run *r = &d->runs[i];
    if (!(r->ms = calloc(cap, sizeof *r->ms))) return -ENOMEM;
    for (size_t m = 0; m < d->cmd->nmetrics; m++)
      if (!(r->m[m] = calloc(cap, sizeof *r->m[m]))) return -ENOMEM;
  }
  return 0;
}

/* Keep the first failure's text; a measured failure's replaces a warm-up's. */
static void note_failure(wb_run *r, wb_phase phase, const char *error) {
  if (r->error[0] && !(r->warmup_error && phase == WB_MEASURE)) return;
  snprintf(r->error, sizeof r->error, "%s%s", phase == WB_WARMUP ? "warm-up: " : "",
           error[0] ? error : "failed");
  r->warmup_error = phase == WB_WARMUP;
}

/* ------------------------------------------------------------------------ */
/* weft's runtime counters (weft_get_stats)                                  */
/* ------------------------------------------------------------------------ */

/* Each field of weft_stats: its key, and whether it is a gauge (a level now, not a count since start). */
static const struct {
  const char *key;
  size_t off;
  bool gauge;
} stat_fields[] = {
#define F(name, gauge)                                                                                       \
  { #name, offsetof(weft_stats, name), gauge }
    F(fibers_started, false),
    F(fibers_finished, false),
    F(fibers_live, true),
    F(fibers_peak, true),
    F(parks, false),
    F(yields, false),
    F(steals, false),
    F(carrier_wakeups, false),
    F(poller_waits, false),
    F(stack_cache_hits, false),
    F(stack_cache_misses, false),
    F(stacks_carved, false),
    F(stacks_trimmed, false),
    F(stack_bytes_mapped, true),
    F(offload_calls, false),
    F(offload_threads, true),
    F(extra_carriers, false),
    F(uring_submissions, false),
    F(migrations, false),
#undef F
};
#define NSTAT (sizeof stat_fields / sizeof stat_fields[0])

static uint64_t *stat_at(weft_stats *s, size_t i) {
  return (uint64_t *)(void *)((char *)s + stat_fields[i].off);
}

/*
 * Runs of weft itself: a name or backend that starts with "weft" (weft,
 * weft-cpu, spawn's cases of backend weft), or fibers or offloaded calls
 * that the run started (the other backends never start any; carriers that
 * wake meanwhile to trim their stacks do not count).
 */
static bool is_weft_run(const wb_run *r, const char *backend) {
  if (!r->has_stats) return false;
  if (strncmp(r->name, "weft", 4) == 0 || (backend && strncmp(backend, "weft", 4) == 0)) return true;
  return r->stats.fibers_started || r->stats.offload_calls;
}

/* The backend the command writes on r's record ("backend"), in a record made for the question. */
static bool is_weft_run_asked(wb_driver *d, wb_run *r) {
  if (!r->has_stats) return false;
  json_t *tmp = d->cmd->record ? json_object() : NULL;
  if (tmp && d->cmd->record(d, r, tmp) != 0) json_object_clear(tmp);
  bool w = is_weft_run(r, tmp ? json_string_value(json_object_get(tmp, "backend")) : NULL);
  json_decref(tmp);
  return w;
}

/* Add one repetition's counters (after - before; gauges: after) to r. */
static void stats_add(wb_run *r, const weft_stats *before, const weft_stats *after) {
  for (size_t i = 0; i < NSTAT; i++) {
    uint64_t a = *stat_at((weft_stats *)after, i), b = *stat_at((weft_stats *)before, i);
    uint64_t *to = stat_at(&r->stats, i);
    *to = stat_fields[i].gauge ? a : *to + (a >= b ? a - b : 0);
  }
  r->has_stats = true;
}

/* A child's record carries its own "weft_stats" (its driver wrote them): add them to r. */
static void stats_add_child(wb_run *r, json_t *rec) {
  json_t *o = rec ? json_object_get(rec, "weft_stats") : NULL;
  if (!json_is_object(o)) return;
  weft_stats zero, c;
  memset(&zero, 0, sizeof zero);
  memset(&c, 0, sizeof c);
  for (size_t i = 0; i < NSTAT; i++) {
    json_t *v = json_object_get(o, stat_fields[i].key);
    if (json_is_integer(v) && json_integer_value(v) >= 0) *stat_at(&c, i) = (uint64_t)json_integer_value(v);
  }
  stats_add(r, &zero, &c);
}

static int stats_record(const wb_run *r, json_t *rec) {
  json_t *o = json_object();
  if (!o) return -ENOMEM;
  int rc = 0;
  for (size_t i = 0; i < NSTAT && rc == 0; i++)
    rc = wb_json_set_num(o, stat_fields[i].key, (double)*stat_at((weft_stats *)&r->stats, i));
  if (rc == 0) rc = wb_json_set_num(o, "repetitions", (double)r->n);
  if (rc == 0 && json_object_set_new(rec, "weft_stats", o) != 0) return -ENOMEM;
  if (rc != 0) json_decref(o);
  return rc;
}

/* --stats: each weft run's counters per measured repetition (gauges: after the last one). */
static void print_stats(wb_driver *d) {
  for (size_t k = 0; k < d->nruns; k++) {
    wb_run *r = &d->runs[k];
    if (r->skipped || r->n == 0 || !is_weft_run_asked(d, r)) continue;
    printf("\nweft's counters, %s (per repetition, over %zu; * a level after the last):\n", wb_run_label(r),
           r->n);
    for (size_t i = 0; i < NSTAT; i++) {
      uint64_t v = *stat_at((weft_stats *)&r->stats, i);
      if (stat_fields[i].gauge)
        printf("  %-20s %14llu *\n", stat_fields[i].key, (unsigned long long)v);
      else
        printf("  %-20s %16.1f\n", stat_fields[i].key, (double)v / (double)r->n);
    }
  }
}

/* Run one repetition of r and keep what it gave. */
static void repetition(wb_driver *d, wb_run *r, wb_phase phase) {
  wb_sample s;
  memset(&s, 0, sizeof s);
  for (size_t m = 0; m < WB_MAX_METRICS; m++) s.m[m] = NAN;
  s.ms = NAN;
  /* weft's counters around the run; a run in a child process brings the child's in its record. */
  weft_stats before, after;
  weft_get_stats(&before);
  int rc = d->cmd->run(d, r, phase, &s);
  weft_get_stats(&after);
  if (rc == WB_SKIP) {
    json_decref(s.rec);
    wb_skip(d, r, s.error[0] ? s.error : "not available here");
    return;
  }
  if (rc < 0) {
    json_decref(s.rec);
    if (!s.error[0]) snprintf(s.error, sizeof s.error, "%s", weft_strerror(rc));
    r->failed = r->stopped = true;
    note_failure(r, phase, s.error);
  } else if (s.failed) {
    r->failed = true;
    note_failure(r, phase, s.error);
  }
  if (rc < 0 || s.failed) {
    if (!s.quiet) {
      wb_progress_clear();
      fprintf(stderr, "weft-bench %s: %s: %s%s\n", d->cmd->name, r->name,
              phase == WB_WARMUP ? "warm-up: " : "", s.error[0] ? s.error : "failed");
    }
  }
  if (rc < 0) return;
  if (phase == WB_WARMUP) {
    if (!s.idle) r->warmups++;
    json_decref(s.rec);
    return;
  }
  r->ms[r->n] = s.ms;
  for (size_t m = 0; m < d->cmd->nmetrics; m++) r->m[m][r->n] = s.m[m];
  r->n++;
  if (s.rec)
    stats_add_child(r, s.rec);
  else
    stats_add(r, &before, &after);
  if (s.rec && !r->base)
    r->base = s.rec;
  else
    json_decref(s.rec);
}

static void repetitions(wb_driver *d) {
  size_t total = (size_t)d->repeat * d->nruns, done = 0;
  for (int64_t rep = 0; rep < d->repeat; rep++) {
    for (size_t k = 0; k < d->nruns; k++) {
      wb_run *r = &d->runs[wb_interleave((size_t)rep, k, d->nruns)];
      done++;
      if (r->skipped || r->stopped) continue;
      if (d->cmd->flags & WB_CMD_WARMUP_EACH) {
        wb_progress(true, "[%zu/%zu] %s (warm-up of repetition %lld of %lld)", done, total, wb_run_label(r),
                    (long long)rep + 1, (long long)d->repeat);
        repetition(d, r, WB_WARMUP);
        if (r->skipped || r->stopped) continue;
      }
      wb_progress(true, "[%zu/%zu] %s (repetition %lld of %lld)", done, total, wb_run_label(r),
                  (long long)rep + 1, (long long)d->repeat);
      repetition(d, r, WB_MEASURE);
    }
  }
  wb_progress_clear();
}

/* ------------------------------------------------------------------------ */
/* Records                                                                   */
/* ------------------------------------------------------------------------ */

static int add_metrics(const wb_driver *d, const wb_run *r, json_t *rec) {
  int rc = 0;
  for (size_t m = 0; m < d->cmd->nmetrics && rc == 0; m++) {
    const wb_metric *mt = &d->cmd->metrics[m];
    if (mt->flags & WB_METRIC_QUIET) continue;
    wb_summary s = wb_summarize(r->m[m], r->n);
    char key[96];
    rc = wb_json_set_num(rec, mt->key, wb_round_to(mt->flags & WB_METRIC_MAX ? s.max : s.median, mt->step));
    if (rc == 0 && (mt->flags & WB_METRIC_MINMAX)) {
      snprintf(key, sizeof key, "%s_min", mt->key);
      rc = wb_json_set_num(rec, key, wb_round_to(s.min, mt->step));
      snprintf(key, sizeof key, "%s_max", mt->key);
      if (rc == 0) rc = wb_json_set_num(rec, key, wb_round_to(s.max, mt->step));
    }
    if (rc == 0 && (mt->flags & WB_METRIC_SAMPLES)) {
      double small[64];
      double *v = r->n <= 64 ? small : malloc(r->n * sizeof *v);
      if (!v) return -ENOMEM;
      for (size_t i = 0; i < r->n; i++) v[i] = wb_round_to(r->m[m][i], mt->step);
      snprintf(key, sizeof key, "%s_samples", mt->key);
      rc = wb_json_set_nums(rec, key, v, r->n);
      if (v != small) free(v);
    }
  }
  return rc;
}

/*
 * A run's record: a child's record when the run was made in children (its
 * fingerprint is the child's process's), else a fresh one with this
 * process's fingerprint; then the command's keys, the status, the timing
 * keys and the figures over the repetitions, and the command line.
 */
static json_t *build_record(wb_driver *d, wb_run *r) {
  json_t *rec = r->base ? r->base : json_object();
  bool fresh = !r->base;
  r->base = NULL;
  if (!rec) return NULL;
  int rc = wb_json_set_int(rec, "schema", WB_SCHEMA);
  if (rc == 0) rc = wb_json_set_str(rec, "bench", d->cmd->name);
  if (rc == 0) rc = wb_json_set_str(rec, d->cmd->name_key ? d->cmd->name_key : "backend", r->name);
  if (rc == 0 && d->cmd->record) rc = d->cmd->record(d, r, rec);
  if (rc == 0) rc = wb_json_set_str(rec, "status", r->failed || r->n == 0 ? "failed" : "ok");
  if (rc == 0 && (r->failed || r->n == 0))
    rc = wb_json_set_str(rec, "error", r->error[0] ? r->error : "no repetition ran");
  if (rc == 0 && !r->failed && r->n) json_object_del(rec, "error");
  if (rc == 0 && r->n) rc = wb_add_timing(rec, r->ms, r->n);
  if (rc == 0 && (d->cmd->flags & WB_CMD_WARMUP))
    rc = wb_json_set_int(rec, "warmup_runs", (int64_t)r->warmups);
  if (rc == 0 && r->n) rc = add_metrics(d, r, rec);
  if (rc == 0 && fresh) rc = wb_meta_add(rec);
  if (rc == 0 && r->n && is_weft_run(r, json_string_value(json_object_get(rec, "backend"))))
    rc = stats_record(r, rec);
  if (rc == 0) rc = wb_json_set_str(rec, "command", d->command);
  if (rc < 0) {
    json_decref(rec);
    return NULL;
  }
  return rec;
}

static void print_records(wb_driver *d) {
  for (size_t i = 0; i < d->nruns; i++) {
    wb_run *r = &d->runs[i];
    if (r->skipped) continue;
    json_t *rec = build_record(d, r);
    if (!rec || wb_json_print_line(rec, stdout) < 0) {
      fprintf(stderr, "weft-bench %s: cannot write the record for %s\n", d->cmd->name, r->name);
      d->exit_code = WB_EXIT_FAIL;
    }
    json_decref(rec);
  }
}

/* ------------------------------------------------------------------------ */
/* The driver                                                                */
/* ------------------------------------------------------------------------ */

static void free_runs(wb_driver *d) {
  for (size_t i = 0; i < d->nruns; i++) {
    wb_run *r = &d->runs[i];
    free(r->ms);
    for (size_t m = 0; m < WB_MAX_METRICS; m++) free(r->m[m]);
    json_decref(r->base);
  }
  free(d->runs);
  d->runs = NULL;
  d->nruns = 0;
}

int wb_drive(const wb_command *cmd, void *ctx, int argc, char **argv) {
  wb_driver d;
  memset(&d, 0, sizeof d);
  d.cmd = cmd;
  d.ctx = ctx;
  d.repeat = 1;
  int rc = parse_options(&d, argc, argv);
  if (rc >= 0) return rc;
  rc = cmd->prepare ? cmd->prepare(&d) : 0;
  if (rc != 0) {
    if (cmd->teardown) cmd->teardown(&d);
    free_runs(&d);
    return rc;
  }
  /* The runs: one per picked choice, unless prepare made its own. */
  for (size_t i = 0, n = d.nruns ? 0 : d.npicked; i < n; i++) {
    const wb_choice *c = wb_picked(&d, i);
    wb_run *r = wb_add_run(&d, c->name, c->id);
    if (!r) break;
    r->label = c->label;
  }
  if ((d.nruns == 0 && d.npicked) || alloc_samples(&d) < 0) {
    fprintf(stderr, "weft-bench %s: out of memory\n", cmd->name);
    rc = WB_EXIT_FAIL;
    goto out;
  }
  wb_progress_init(d.json);
  if (!(cmd->flags & WB_CMD_ARGS_AFTER_WARMUP) && (rc = make_command(&d)) != 0) goto out;
  if (cmd->setup && (rc = cmd->setup(&d)) != 0) goto out;

  if (cmd->flags & WB_CMD_WARMUP) {
    /* Untimed, in order: the first call of a backend pays for its threads, stacks and caches once. */
    for (size_t i = 0; i < d.nruns; i++) {
      wb_run *r = &d.runs[i];
      if (r->skipped || r->stopped) continue;
      wb_progress(true, "warm-up: %s", wb_run_label(r));
      repetition(&d, r, WB_WARMUP);
    }
  }
  if ((cmd->flags & WB_CMD_ARGS_AFTER_WARMUP) && (rc = make_command(&d)) != 0) goto out;
  repetitions(&d);
  if (cmd->finish) cmd->finish(&d);

  if (d.json)
    print_records(&d);
  else if (cmd->report)
    cmd->report(&d);
  if (d.stats && !d.json) print_stats(&d);
  for (size_t i = 0; i < d.nruns; i++)
    if (!d.runs[i].skipped && (d.runs[i].failed || d.runs[i].n == 0)) d.exit_code = WB_EXIT_FAIL;
  rc = d.exit_code;
out:
  if (cmd->teardown) cmd->teardown(&d);
  free_runs(&d);
  free(d.command);
  return rc;
}
