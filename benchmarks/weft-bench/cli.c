/*
 * This file contains weft-bench's command-line plumbing: the option parser
 * every command uses (long options only, "--name V" or "--name=V"), strict
 * number and list parsing, a growable string, the words of a command line,
 * and the shell-quoted command line that repeats a measurement.
 *
 * A hand-written parser rather than getopt_long: getopt_long is a GNU
 * extension, it permutes argv and prints its own messages, and each command
 * here wants one message format ("weft-bench CMD: ...") and exit code 2.
 */
#define _POSIX_C_SOURCE 200809L
#include "bench.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

void wb_opt_init(wb_optstate *st, int argc, char **argv, const char *cmd) {
  st->argc = argc;
  st->argv = argv;
  st->i = 1;
  st->cmd = cmd;
  st->dashdash = false;
}

int wb_usage_error(const char *cmd, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "weft-bench%s%s: ", cmd ? " " : "", cmd ? cmd : "");
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, " (see weft-bench%s%s --help)\n", cmd ? " " : "", cmd ? cmd : "");
  return WB_EXIT_USAGE;
}

int wb_opt_next(wb_optstate *st, const wb_opt *opts, const char **arg) {
  if (st->i >= st->argc) return WB_OPT_END;
  const char *a = st->argv[st->i++];
  if (st->dashdash || a[0] != '-' || a[1] == '\0') {
    *arg = a;
    return WB_OPT_POSITIONAL;
  }
  if (strcmp(a, "--") == 0) {
    st->dashdash = true;
    return wb_opt_next(st, opts, arg);
  }
  if (a[1] != '-') {
    /* -h is the one short option, because everyone types it. */
    if (strcmp(a, "-h") == 0)
      a = "--help";
    else {
      wb_usage_error(st->cmd, "unknown option '%s' (options are long: --name)", a);
      return WB_OPT_ERROR;
    }
  }
  const char *name = a + 2;
  const char *eq = strchr(name, '=');
  size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
  for (const wb_opt *o = opts; o->name; o++) {
    if (strlen(o->name) != nlen || strncmp(o->name, name, nlen) != 0) continue;
    if (!o->has_arg) {
      if (eq) {
        wb_usage_error(st->cmd, "option '--%s' takes no value", o->name);
        return WB_OPT_ERROR;
      }
      *arg = NULL;
      return o->id;
    }
    if (eq) {
      *arg = eq + 1;
    } else if (st->i < st->argc) {
      *arg = st->argv[st->i++];
    } else {
      wb_usage_error(st->cmd, "option '--%s' needs a value", o->name);
      return WB_OPT_ERROR;
    }
    return o->id;
  }
  wb_usage_error(st->cmd, "unknown option '--%.*s'", (int)nlen, name);
  return WB_OPT_ERROR;
}

bool wb_parse_i64(const char *cmd, const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  /* strtoll skips leading blanks and accepts a '+': neither is a number a user meant to type here. */
  if (*s == '\0' || *s == ' ' || *s == '+' || *end != '\0' || errno == ERANGE) {
    wb_usage_error(cmd, "--%s: '%s' is not an integer", opt, s);
    return false;
  }
  if (v < lo || v > hi) {
    wb_usage_error(cmd, "--%s: %lld is out of range [%lld, %lld]", opt, v, (long long)lo, (long long)hi);
    return false;
  }
  *out = v;
  return true;
}

bool wb_parse_double(const char *cmd, const char *opt, const char *s, double lo, double hi, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (*s == '\0' || *s == ' ' || *end != '\0' || errno == ERANGE || !isfinite(v)) {
    wb_usage_error(cmd, "--%s: '%s' is not a number", opt, s);
    return false;
  }
  if (v < lo || v > hi) {
    wb_usage_error(cmd, "--%s: %g is out of range [%g, %g]", opt, v, lo, hi);
    return false;
  }
  *out = v;
  return true;
}

bool wb_parse_list(const char *cmd, const char *opt, const char *list, const char *const *names,
                   size_t nnames, size_t *chosen, size_t *nchosen) {
  *nchosen = 0;
  for (const char *p = list;;) {
    size_t len = strcspn(p, ",");
    size_t b = 0;
    while (b < nnames && !(strlen(names[b]) == len && strncmp(names[b], p, len) == 0)) b++;
    if (b == nnames) {
      wb_str all = {0};
      for (size_t i = 0; i < nnames; i++) wb_str_addf(&all, "%s%s", i ? ", " : "", names[i]);
      wb_usage_error(cmd, "--%s: unknown %s '%.*s' (%s)", opt, opt, (int)len, p, all.s ? all.s : "");
      wb_str_free(&all);
      return false;
    }
    for (size_t j = 0; j < *nchosen; j++) {
      if (chosen[j] == b) {
        wb_usage_error(cmd, "--%s: '%s' given twice", opt, names[b]);
        return false;
      }
    }
    chosen[(*nchosen)++] = b;
    if (p[len] == '\0') break;
    p += len + 1;
  }
  return true;
}

/* ------------------------------------------------------------------------ */
/* Strings                                                                   */
/* ------------------------------------------------------------------------ */

int wb_str_addn(wb_str *b, const char *s, size_t n) {
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 128;
    while (cap < b->len + n + 1) cap *= 2;
    char *p = realloc(b->s, cap);
    if (!p) return -ENOMEM;
    b->s = p;
    b->cap = cap;
  }
  memcpy(b->s + b->len, s, n);
  b->len += n;
  b->s[b->len] = '\0';
  return 0;
}

int wb_str_add(wb_str *b, const char *s) { return wb_str_addn(b, s, strlen(s)); }

int wb_str_addf(wb_str *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) return -EINVAL;
  char *tmp = malloc((size_t)n + 1);
  if (!tmp) return -ENOMEM;
  va_start(ap, fmt);
  vsnprintf(tmp, (size_t)n + 1, fmt, ap);
  va_end(ap);
  int rc = wb_str_addn(b, tmp, (size_t)n);
  free(tmp);
  return rc;
}

void wb_str_free(wb_str *b) {
  free(b->s);
  b->s = NULL;
  b->len = b->cap = 0;
}

int wb_str_add_shell_word(wb_str *b, const char *s) {
  bool bare = *s != '\0';
  for (const char *p = s; *p && bare; p++)
    bare = strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./=:,+-@%", *p) != NULL;
  if (bare) return wb_str_add(b, s);
  /* Single quotes keep everything but a single quote, which becomes '\''. */
  int rc = wb_str_add(b, "'");
  for (const char *p = s; *p && rc == 0; p++) rc = *p == '\'' ? wb_str_add(b, "'\\''") : wb_str_addn(b, p, 1);
  return rc ? rc : wb_str_add(b, "'");
}

/* ------------------------------------------------------------------------ */
/* The words of a command line                                               */
/* ------------------------------------------------------------------------ */

void wb_args_add(wb_args *a, const char *word) {
  if (a->err) return;
  if (a->n + 2 > a->cap) {
    size_t cap = a->cap ? 2 * a->cap : 16;
    char **p = realloc(a->v, cap * sizeof *p);
    if (!p) {
      a->err = -ENOMEM;
      return;
    }
    a->v = p;
    a->cap = cap;
  }
  if (!(a->v[a->n] = strdup(word))) {
    a->err = -ENOMEM;
    return;
  }
  a->v[++a->n] = NULL;
}

void wb_args_addf(wb_args *a, const char *fmt, ...) {
  char tmp[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= sizeof tmp) {
    if (!a->err) a->err = -EINVAL;
    return;
  }
  wb_args_add(a, tmp);
}

void wb_args_int(wb_args *a, const char *opt, int64_t v) {
  wb_args_add(a, opt);
  wb_args_addf(a, "%lld", (long long)v);
}

void wb_args_free(wb_args *a) {
  for (size_t i = 0; i < a->n; i++) free(a->v[i]);
  free(a->v);
  a->v = NULL;
  a->n = a->cap = 0;
}

bool wb_env_name_recorded(const char *name, size_t len) {
  static const char *const prefixes[] = {"WEFT_", "OMP_", "GOMP_", "KMP_"};
  /* What changes Go's scheduler and collector in the go backends; not GOPATH and the like. */
  static const char *const go_names[] = {"GOMAXPROCS", "GOGC", "GODEBUG", "GOMEMLIMIT"};
  for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
    size_t pl = strlen(prefixes[i]);
    if (len > pl && strncmp(name, prefixes[i], pl) == 0) return true;
  }
  for (size_t i = 0; i < sizeof go_names / sizeof go_names[0]; i++)
    if (len == strlen(go_names[i]) && strncmp(name, go_names[i], len) == 0) return true;
  return false;
}

int wb_command_line(char *const *args, size_t nargs, char *const *env, char **out) {
  wb_str b = {0};
  int rc = 0;
  if (!env) env = environ;
  for (char *const *e = env; *e && rc == 0; e++) {
    const char *eq = strchr(*e, '=');
    if (!eq || !wb_env_name_recorded(*e, (size_t)(eq - *e))) continue;
    /* NAME=value: the name is bare by construction; quote the value alone. */
    rc = wb_str_addn(&b, *e, (size_t)(eq - *e) + 1);
    if (rc == 0) rc = wb_str_add_shell_word(&b, eq + 1);
    if (rc == 0) rc = wb_str_add(&b, " ");
  }
  if (rc == 0) rc = wb_str_add_shell_word(&b, wb_argv0);
  for (size_t i = 0; i < nargs && rc == 0; i++) {
    rc = wb_str_add(&b, " ");
    if (rc == 0) rc = wb_str_add_shell_word(&b, args[i]);
  }
  if (rc < 0) {
    wb_str_free(&b);
    return rc;
  }
  *out = b.s;
  return 0;
}
