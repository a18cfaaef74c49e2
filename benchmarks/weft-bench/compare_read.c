/*
 * This file contains how `weft-bench compare` reads a results file
 * (compare.h): each non-blank line one weft-bench record (jansson, strict),
 * checked, keyed by what was measured (the key fields below), and pooled
 * with the other records of the same measurement: their samples merged,
 * their informational figures too, the first one's environment fingerprint
 * kept. cmd_compare.c judges the measurements.
 */
#define _POSIX_C_SOURCE 200809L
#include "compare.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const wb_cmp_metric wb_cmp_metrics[WB_CMP_NMETRICS] = {
    {"peak_rss_kb", false, 256}, {"cpu_user_s", false, 0.01}, {"cpu_sys_s", false, 0.01},
    {"minflt", false, 100},      {"os_threads", false, 1},    {"in_flight_peak", true, 1},
};

/* What identifies a measurement: the same values in both files means the same experiment. */
static const char *const key_fields[] = {
    "bench",     "case",        "backend",  "jobs", "sleep_ms", "loops", "items",   "requests", "concurrency",
    "keepalive", "connections", "messages", "size", "batch",    "n",     "task_ns", "fibers"};
#define NKEYS (sizeof key_fields / sizeof key_fields[0])

void wb_cmp_entries_free(wb_cmp_entries *es) {
  for (size_t i = 0; i < es->n; i++) {
    free(es->v[i].key);
    free(es->v[i].label);
    free(es->v[i].classname);
    free(es->v[i].command);
    json_decref(es->v[i].fp);
    free(es->v[i].samples);
    for (size_t m = 0; m < WB_CMP_NMETRICS; m++) free(es->v[i].m[m].v);
  }
  free(es->v);
}

static int push_samples(wb_cmp_entry *e, const double *v, size_t n) {
  double *p = realloc(e->samples, (e->n + n) * sizeof *p);
  if (!p && e->n + n) return -ENOMEM;
  memcpy(p + e->n, v, n * sizeof *p);
  e->samples = p;
  e->n += n;
  return 0;
}

static int push_value(wb_figure_samples *s, double v) {
  double *p = realloc(s->v, (s->n + 1) * sizeof *p);
  if (!p) return -ENOMEM;
  p[s->n++] = v;
  s->v = p;
  return 0;
}

/* A record's samples of one figure: KEY_samples (numbers; nulls skipped), else KEY itself. */
static int add_metric(wb_figure_samples *s, const json_t *rec, const char *key) {
  char skey[64];
  snprintf(skey, sizeof skey, "%s_samples", key);
  const json_t *arr = json_object_get(rec, skey);
  int rc = 0;
  if (json_is_array(arr) && json_array_size(arr)) {
    for (size_t i = 0; i < json_array_size(arr) && rc == 0; i++)
      if (json_is_number(json_array_get(arr, i)))
        rc = push_value(s, json_number_value(json_array_get(arr, i)));
    return rc;
  }
  double v;
  return wb_json_get_num(rec, key, &v) ? push_value(s, v) : 0;
}

/* Build the key and the label of a record; NULL fields count as absent. */
static int make_key(const json_t *rec, char **key, char **label) {
  wb_str k = {0}, l = {0};
  int rc = 0;
  for (size_t i = 0; i < NKEYS && rc == 0; i++) {
    const json_t *v = json_object_get(rec, key_fields[i]);
    bool present = v && !json_is_null(v);
    char *text = present ? wb_json_key_text(v) : NULL;
    if (present && !text) rc = -ENOMEM;
    if (rc == 0)
      rc = wb_str_addf(&k, "%s%s\x1f", present && json_is_string(v) ? "s:" : "", text ? text : "null");
    if (rc == 0 && text) {
      if (json_is_string(v))
        rc = wb_str_addf(&l, "%s%s", l.len ? " " : "", text);
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

int wb_cmp_add_record(wb_cmp_entries *es, const json_t *rec, char *why, size_t whylen) {
  double schema;
  if (wb_json_get_num(rec, "schema", &schema) && schema != WB_SCHEMA) {
    snprintf(why, whylen, "schema %g, but this weft-bench reads schema %d", schema, WB_SCHEMA);
    return -EINVAL;
  }
  if (!wb_json_get_str(rec, "bench")) {
    snprintf(why, whylen, "no \"bench\" string: not a weft-bench record");
    return -EINVAL;
  }
  const char *status = wb_json_get_str(rec, "status");
  bool failed = status && strcmp(status, "ok") != 0;
  double elapsed = NAN;
  if (!wb_json_get_num(rec, "elapsed_ms", &elapsed) && !failed) {
    snprintf(why, whylen, "no \"elapsed_ms\" number");
    return -EINVAL;
  }
  if (!failed && !(elapsed >= 0)) {
    snprintf(why, whylen, "\"elapsed_ms\" is negative");
    return -EINVAL;
  }
  /* A time per operation, where the record has one, is what is compared (its samples and spread). */
  double per_op_v;
  bool per_op = !failed && wb_json_get_num(rec, "ns_per_op", &per_op_v) && per_op_v >= 0;
  const char *skey = per_op ? "ns_per_op_samples" : "samples_ms";
  const json_t *samples = json_object_get(rec, skey);
  if (samples && !json_is_array(samples)) {
    snprintf(why, whylen, "\"%s\" is not an array", skey);
    return -EINVAL;
  }
  size_t nsamples = json_array_size(samples);
  for (size_t i = 0; i < nsamples; i++) {
    const json_t *x = json_array_get(samples, i);
    if (!json_is_number(x) || json_number_value(x) < 0) {
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
  wb_cmp_entry *e = NULL;
  for (size_t i = 0; i < es->n && !e; i++)
    if (strcmp(es->v[i].key, key) == 0) e = &es->v[i];
  if (e) {
    free(key);
    free(label);
  } else {
    if (es->n == es->cap) {
      size_t cap = es->cap ? 2 * es->cap : 16;
      wb_cmp_entry *p = realloc(es->v, cap * sizeof *p);
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
    wb_str cls = {0};
    wb_str_addf(&cls, "weft-bench.%s", wb_json_get_str(rec, "bench"));
    e->classname = cls.s;
    e->fp = wb_env_fingerprint(rec);
    if (!e->classname || !e->fp) return -ENOMEM;
    const char *command = wb_json_get_str(rec, "command");
    if (command && !(e->command = strdup(command))) return -ENOMEM;
    e->min = INFINITY;
    e->max = -INFINITY;
    e->per_op = per_op;
  }
  if (failed) {
    e->failed = true;
    return 0;
  }
  for (size_t m = 0; m < WB_CMP_NMETRICS; m++)
    if ((rc = add_metric(&e->m[m], rec, wb_cmp_metrics[m].key)) < 0) return rc;
  if (nsamples) {
    for (size_t i = 0; i < nsamples; i++) {
      double v = json_number_value(json_array_get(samples, i));
      if ((rc = push_samples(e, &v, 1)) < 0) return rc;
    }
  } else {
    /* A record without samples: its median stands for it; its min and max, if given, for the spread. */
    double lo = elapsed, hi = elapsed;
    wb_json_get_num(rec, per_op ? "ns_per_op_min" : "elapsed_ms_min", &lo);
    wb_json_get_num(rec, per_op ? "ns_per_op_max" : "elapsed_ms_max", &hi);
    if (lo < e->min) e->min = lo;
    if (hi > e->max) e->max = hi;
    if ((rc = push_samples(e, &elapsed, 1)) < 0) return rc;
  }
  return 0;
}

int wb_cmp_slurp(const char *cmd, const char *path, char **text_out, size_t *len_out) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "weft-bench %s: cannot open %s: %s\n", cmd, path, strerror(errno));
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
        fprintf(stderr, "weft-bench %s: %s: out of memory\n", cmd, path);
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
    fprintf(stderr, "weft-bench %s: cannot read %s\n", cmd, path);
    return WB_EXIT_USAGE;
  }
  *text_out = text;
  *len_out = len;
  return 0;
}

int wb_cmp_read_text(const char *cmd, const char *name, const char *text, size_t len, wb_cmp_entries *es) {
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
      json_t *rec = NULL;
      char err[256], why[256];
      int rc = wb_json_parse(text + a, b - a, &rec, err, sizeof err);
      if (rc < 0) {
        fprintf(stderr, "weft-bench %s: %s:%zu: %s\n", cmd, name, lineno,
                rc == -ENOMEM ? "out of memory" : err);
        result = WB_EXIT_USAGE;
      } else if ((rc = wb_cmp_add_record(es, rec, why, sizeof why)) < 0) {
        fprintf(stderr, "weft-bench %s: %s:%zu: %s\n", cmd, name, lineno,
                rc == -ENOMEM ? "out of memory" : why);
        result = WB_EXIT_USAGE;
      } else {
        records++;
      }
      json_decref(rec);
    }
    pos = end + 1;
  }
  if (result == 0 && records == 0) {
    fprintf(stderr, "weft-bench %s: %s holds no records\n", cmd, name);
    result = WB_EXIT_USAGE;
  }
  return result;
}

/* Read a JSON Lines file into es. Returns 0, or WB_EXIT_USAGE after a message naming file:line. */
int wb_cmp_read(const char *path, wb_cmp_entries *es) {
  char *text;
  size_t len;
  int rc = wb_cmp_slurp("compare", path, &text, &len);
  if (rc != 0) return rc;
  rc = wb_cmp_read_text("compare", path, text, len, es);
  free(text);
  return rc;
}
