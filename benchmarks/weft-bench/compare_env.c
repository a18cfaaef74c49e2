/*
 * This file contains compare's environment check: two runs are comparable
 * only when they were measured on the same kind of machine with the same
 * build, so compare holds each matched measurement's fingerprint (meta.c,
 * machine.c) against the other side's and lists every field that differs.
 *
 * What must be equal: the machine (cpu_model, cores, affinity, cpus_online,
 * kernel, thp, thp_defrag, virtualization, container, cpu_quota), the
 * toolchain and build (compiler, compiler_flags, build_type, weft_compiler,
 * openmp, openmp_runtime, weft_openmp, openmp_library) and the recorded
 * environment variables (env: WEFT_*, OMP_*, ...). What may differ, and is
 * only reported: weft's version and commit (comparing two commits is what
 * compare is for), weft's own set-up (stack size, context switch: a change
 * of weft may change them), the date.
 *
 * A field that one side did not record (an older weft-bench, a record
 * written by hand) is not a difference: it is left out of the check, and
 * the "same environment" line names only the fields compared.
 */
#define _POSIX_C_SOURCE 200809L
#include "compare.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const char *const env_fields[] = {
    "cpu_model",  "cores",          "affinity",  "cpus_online",    "kernel",      "thp",
    "thp_defrag", "virtualization", "container", "cpu_quota",      "compiler",    "compiler_flags",
    "build_type", "weft_compiler",  "openmp",    "openmp_runtime", "weft_openmp", "openmp_library",
    "env",
};
#define NFIELDS (sizeof env_fields / sizeof env_fields[0])

json_t *wb_env_fingerprint(const json_t *rec) {
  json_t *fp = json_object();
  if (!fp) return NULL;
  static const char *const info[] = {"weft_version", "git_commit"};
  for (size_t i = 0; i < NFIELDS + 2; i++) {
    const char *k = i < NFIELDS ? env_fields[i] : info[i - NFIELDS];
    json_t *v = json_object_get(rec, k);
    if (v && json_object_set(fp, k, v) != 0) {
      json_decref(fp);
      return NULL;
    }
  }
  return fp;
}

char *wb_env_fingerprint_text(const json_t *fp) {
  json_t *c = json_deep_copy(fp);
  if (!c) return NULL;
  json_object_del(c, "weft_version");
  json_object_del(c, "git_commit");
  char *t = json_dumps(c, JSON_COMPACT | JSON_SORT_KEYS);
  json_decref(c);
  return t;
}

static char *text_of(const json_t *v) {
  if (!v) return strdup("(not set)");
  return json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_SORT_KEYS);
}

static void add_diff(wb_env_check *c, const char *field, const json_t *b, const json_t *n) {
  char *bt = text_of(b), *nt = text_of(n);
  if (!bt || !nt) goto oom;
  for (size_t i = 0; i < c->ndiffs; i++) {
    wb_env_diff *d = &c->diffs[i];
    if (strcmp(d->field, field) == 0 && strcmp(d->base, bt) == 0 && strcmp(d->neu, nt) == 0) {
      d->pairs++;
      free(bt);
      free(nt);
      return;
    }
  }
  if (c->ndiffs == c->cap) {
    size_t cap = c->cap ? 2 * c->cap : 8;
    wb_env_diff *p = realloc(c->diffs, cap * sizeof *p);
    if (!p) goto oom;
    c->diffs = p;
    c->cap = cap;
  }
  char *f = strdup(field);
  if (!f) goto oom;
  c->diffs[c->ndiffs++] = (wb_env_diff){f, bt, nt, 1};
  return;
oom:
  free(bt);
  free(nt);
  c->err = -ENOMEM;
}

/* The recorded environment variables, one by one: a variable set on one side only is a difference. */
static void check_env(wb_env_check *c, const json_t *b, const json_t *n) {
  const char *k;
  json_t *v;
  char field[320];
  json_object_foreach((json_t *)b, k, v) {
    json_t *w = json_object_get(n, k);
    if (w && json_equal(v, w)) continue;
    snprintf(field, sizeof field, "env.%s", k);
    add_diff(c, field, v, w);
  }
  json_object_foreach((json_t *)n, k, v) {
    if (json_object_get(b, k)) continue;
    snprintf(field, sizeof field, "env.%s", k);
    add_diff(c, field, NULL, v);
  }
}

static char *weft_of(const json_t *fp) {
  wb_str s = {0};
  const char *v = wb_json_get_str(fp, "weft_version"), *g = wb_json_get_str(fp, "git_commit");
  wb_str_addf(&s, "%s (%s)", v ? v : "?", g ? g : "?");
  return s.s;
}

void wb_env_check_pair(wb_env_check *c, const json_t *base_fp, const json_t *new_fp) {
  c->pairs++;
  if (!c->base_weft) {
    c->base_weft = weft_of(base_fp);
    c->new_weft = weft_of(new_fp);
  }
  for (size_t f = 0; f < NFIELDS; f++) {
    const json_t *b = json_object_get(base_fp, env_fields[f]), *n = json_object_get(new_fp, env_fields[f]);
    if (!b || !n) continue; /* not recorded on one side: nothing to hold against */
    c->fields |= 1u << f;
    if (json_is_object(b) && json_is_object(n))
      check_env(c, b, n);
    else if (!json_equal(b, n))
      add_diff(c, env_fields[f], b, n);
  }
}

int wb_env_checked_fields(const wb_env_check *c, wb_str *b) {
  int rc = 0;
  bool any = false;
  for (size_t f = 0; f < NFIELDS && rc == 0; f++) {
    if (!(c->fields & (1u << f))) continue;
    rc = wb_str_addf(b, "%s%s", any ? ", " : "", env_fields[f]);
    any = true;
  }
  if (rc == 0 && !any) rc = wb_str_add(b, "no field recorded on both sides");
  return rc;
}

void wb_env_print(const wb_env_check *ec, bool allowed, bool counts, const char *refused, FILE *f) {
  wb_str fields = {0};
  wb_env_checked_fields(ec, &fields);
  if (ec->ndiffs == 0) {
    fprintf(f, "same environment (%s); weft %s -> %s\n", fields.s ? fields.s : "",
            ec->base_weft ? ec->base_weft : "?", ec->new_weft ? ec->new_weft : "?");
  } else {
    fprintf(f, "%s:\n", allowed ? "different environment (compared anyway: --allow-different-env)" : refused);
    for (size_t i = 0; i < ec->ndiffs; i++) {
      fprintf(f, "  %s: base %s, new %s", ec->diffs[i].field, ec->diffs[i].base, ec->diffs[i].neu);
      if (counts) fprintf(f, " (%zu measurement%s)", ec->diffs[i].pairs, ec->diffs[i].pairs == 1 ? "" : "s");
      fputc('\n', f);
    }
  }
  wb_str_free(&fields);
}

void wb_env_check_free(wb_env_check *c) {
  for (size_t i = 0; i < c->ndiffs; i++) {
    free(c->diffs[i].field);
    free(c->diffs[i].base);
    free(c->diffs[i].neu);
  }
  free(c->diffs);
  free(c->base_weft);
  free(c->new_weft);
  memset(c, 0, sizeof *c);
}
