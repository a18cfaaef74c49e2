/*
 * This file contains the metadata that goes with every measurement: what
 * machine ran it (CPU model, cores, kernel), what built it (the compilers of
 * weft-bench and of weft, the OpenMP versions, weft's version, the git
 * commit) and how weft's backend was set up (fibers, carriers, context
 * switch, stack size and guard), so that two results files can be told
 * apart long after the run.
 */
#define _POSIX_C_SOURCE 200809L
#include "bench.h"

#include <ctype.h>
#include <errno.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>

#include "weft.h"

#ifndef WEFT_BENCH_GIT_COMMIT
/* CMake passes the commit it found at configure time; a build by hand has none. */
#define WEFT_BENCH_GIT_COMMIT "unknown"
#endif

extern char **environ;

const char *wb_compiler(void) {
#if defined(__clang__)
  return __VERSION__; /* "Debian Clang 14.0.6": names itself */
#elif defined(__GNUC__)
  return "gcc " __VERSION__; /* "12.2.0": GCC gives the number alone */
#else
  return "unknown";
#endif
}

/* The first value of one of keys in /proc/cpuinfo ("model name" on x86, others on Arm). */
static void cpu_model(char *out, size_t len) {
  static const char *const keys[] = {"model name", "Hardware", "Processor", "cpu model", "uarch"};
  snprintf(out, len, "unknown");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[512];
  size_t best = sizeof keys / sizeof keys[0];
  while (fgets(line, sizeof line, f)) {
    char *colon = strchr(line, ':');
    if (!colon) continue;
    for (size_t k = 0; k < best; k++) {
      size_t kl = strlen(keys[k]);
      if (strncmp(line, keys[k], kl) != 0 || (line[kl] != ' ' && line[kl] != '\t' && line[kl] != ':'))
        continue;
      char *v = colon + 1;
      while (isspace((unsigned char)*v)) v++;
      size_t n = strlen(v);
      while (n && isspace((unsigned char)v[n - 1])) v[--n] = '\0';
      if (n) {
        snprintf(out, len, "%s", v);
        best = k; /* keep looking only for a better key */
      }
      break;
    }
    if (best == 0) break;
  }
  fclose(f);
}

static int add_env(json_value *rec) {
  json_value *env = json_new_object();
  if (!env) return -ENOMEM;
  int rc = 0;
  for (char **e = environ; *e && rc == 0; e++) {
    const char *eq = strchr(*e, '=');
    if (!eq || !wb_env_name_recorded(*e, (size_t)(eq - *e))) continue;
    char name[256];
    size_t n = (size_t)(eq - *e);
    if (n >= sizeof name) continue;
    memcpy(name, *e, n);
    name[n] = '\0';
    rc = json_set_str(env, name, eq + 1);
  }
  if (rc < 0) {
    json_free(env);
    return rc;
  }
  return json_set(rec, "env", env);
}

int wb_meta_add(json_value *rec) {
  char model[256], kernel[512], date[32];
  cpu_model(model, sizeof model);
  struct utsname u;
  if (uname(&u) == 0)
    snprintf(kernel, sizeof kernel, "%s %s %s", u.sysname, u.release, u.machine);
  else
    snprintf(kernel, sizeof kernel, "unknown");
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);

  /* May start weft's runtime: that is why metadata comes after the measurement. */
  bool fibers = weft_fibers_available();
  weft_info info;
  memset(&info, 0, sizeof info);
  bool have_info = weft_get_info(&info) == 0;

  int rc = json_set_int(rec, "cores", wb_cores());
  if (rc == 0) rc = json_set_str(rec, "cpu_model", model);
  if (rc == 0) rc = json_set_str(rec, "kernel", kernel);
  if (rc == 0) rc = json_set_str(rec, "compiler", wb_compiler());
  if (rc == 0) rc = json_set_str(rec, "weft_compiler", have_info ? info.compiler : NULL);
#ifdef _OPENMP
  if (rc == 0) rc = json_set_int(rec, "openmp", _OPENMP);
#else
  if (rc == 0) rc = json_set_null(rec, "openmp");
#endif
  if (rc == 0) rc = json_set_str(rec, "openmp_runtime", have_info ? info.openmp_runtime : NULL);
  if (rc == 0) {
    if (have_info && info.openmp)
      rc = json_set_int(rec, "weft_openmp", info.openmp);
    else
      rc = json_set_null(rec, "weft_openmp");
  }
  if (rc == 0) rc = json_set_str(rec, "weft_version", have_info ? info.version : NULL);
  if (rc == 0) rc = json_set_str(rec, "weft_header_version", WEFT_VERSION_STRING);
  if (rc == 0) rc = json_set_str(rec, "git_commit", WEFT_BENCH_GIT_COMMIT);
  if (rc == 0) rc = json_set_str(rec, "date", date);
  if (rc == 0) rc = json_set_bool(rec, "fibers", fibers);
  if (rc == 0) rc = json_set_int(rec, "carriers", have_info ? (int64_t)info.carriers : 0);
  if (rc == 0) rc = json_set_int(rec, "carriers_running", weft_carrier_count());
  if (rc == 0) rc = json_set_str(rec, "context_switch", have_info ? info.context_switch : NULL);
  if (rc == 0) rc = json_set_int(rec, "stack_size", have_info ? (int64_t)info.stack_size : 0);
  if (rc == 0) rc = json_set_str(rec, "stack_guard", have_info ? info.stack_guard : NULL);
  if (rc == 0) rc = json_set_bool(rec, "io_uring", have_info && info.io_uring);
  if (rc == 0) rc = add_env(rec);
  return rc;
}
