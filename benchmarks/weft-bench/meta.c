/*
 * This file contains the environment fingerprint that goes with every
 * measurement: the machine (machine.c), what built it (the compilers of
 * weft-bench and of weft, the build's C flags and type, the OpenMP
 * versions and the runtime library loaded, weft's version, the git commit),
 * how weft's backend was set up (fibers, carriers, context switch, stack
 * size and guard), and the environment variables that change what weft,
 * OpenMP or Go do. `weft-bench compare` uses it to refuse to compare unlike
 * runs; the version, commit and set-up are for people (docs/weft-bench.md).
 */
/* dl_iterate_phdr is a GNU extension: Linux first. */
#define _GNU_SOURCE 1
#include "bench.h"

#include <errno.h>
#include <limits.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "weft.h"

/* CMake passes the commit it found at configure time, and the build's C flags and type; a build by hand has
 * none. */
#ifndef WEFT_BENCH_GIT_COMMIT
#define WEFT_BENCH_GIT_COMMIT "unknown"
#endif
#ifndef WEFT_BENCH_C_FLAGS
#define WEFT_BENCH_C_FLAGS "unknown"
#endif
#ifndef WEFT_BENCH_BUILD_TYPE
#define WEFT_BENCH_BUILD_TYPE "unknown"
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

/* The file of the OpenMP runtime this process loaded (libgomp, libomp, libiomp), resolved; false without. */
typedef struct omp_lib {
  char path[PATH_MAX];
  bool found;
} omp_lib;

static int find_omp(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  omp_lib *o = arg;
  const char *name = info->dlpi_name, *base = name ? strrchr(name, '/') : NULL;
  base = base ? base + 1 : name;
  if (!base || !(strncmp(base, "libgomp", 7) == 0 || strncmp(base, "libomp", 6) == 0 ||
                 strncmp(base, "libiomp", 7) == 0))
    return 0;
  /* The file the link points at names the version ("libgomp.so.1.0.0", "llvm-14/lib/libomp.so.5"). */
  if (!realpath(name, o->path)) snprintf(o->path, sizeof o->path, "%s", name);
  o->found = true;
  return 1;
}

static int add_env(json_t *rec) {
  json_t *env = json_object();
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
    rc = wb_json_set_str(env, name, eq + 1);
  }
  if (rc < 0) {
    json_decref(env);
    return rc;
  }
  return wb_json_set(rec, "env", env);
}

int wb_meta_add(json_t *rec) {
  char date[32];
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);

  /* May start weft's runtime: that is why metadata comes after the measurement. */
  bool fibers = weft_fibers_available();
  weft_info info;
  memset(&info, 0, sizeof info);
  bool have_info = weft_get_info(&info) == 0;
  omp_lib omp = {.found = false};
  dl_iterate_phdr(find_omp, &omp);

  int rc = wb_machine_add(rec);
  if (rc == 0) rc = wb_json_set_str(rec, "compiler", wb_compiler());
  if (rc == 0) rc = wb_json_set_str(rec, "compiler_flags", WEFT_BENCH_C_FLAGS);
  if (rc == 0) rc = wb_json_set_str(rec, "build_type", WEFT_BENCH_BUILD_TYPE);
  if (rc == 0) rc = wb_json_set_str(rec, "weft_compiler", have_info ? info.compiler : NULL);
#ifdef _OPENMP
  if (rc == 0) rc = wb_json_set_int(rec, "openmp", _OPENMP);
#else
  if (rc == 0) rc = wb_json_set_null(rec, "openmp");
#endif
  if (rc == 0) rc = wb_json_set_str(rec, "openmp_runtime", have_info ? info.openmp_runtime : NULL);
  if (rc == 0)
    rc = have_info && info.openmp ? wb_json_set_int(rec, "weft_openmp", info.openmp)
                                  : wb_json_set_null(rec, "weft_openmp");
  if (rc == 0) rc = wb_json_set_str(rec, "openmp_library", omp.found ? omp.path : NULL);
  if (rc == 0) rc = wb_json_set_str(rec, "weft_version", have_info ? info.version : NULL);
  if (rc == 0) rc = wb_json_set_str(rec, "weft_header_version", WEFT_VERSION_STRING);
  if (rc == 0) rc = wb_json_set_str(rec, "git_commit", WEFT_BENCH_GIT_COMMIT);
  if (rc == 0) rc = wb_json_set_str(rec, "date", date);
  if (rc == 0) rc = wb_json_set_bool(rec, "fibers", fibers);
  if (rc == 0) rc = wb_json_set_int(rec, "carriers", have_info ? (int64_t)info.carriers : 0);
  if (rc == 0) rc = wb_json_set_int(rec, "carriers_running", weft_carrier_count());
  if (rc == 0) rc = wb_json_set_str(rec, "context_switch", have_info ? info.context_switch : NULL);
  if (rc == 0) rc = wb_json_set_int(rec, "stack_size", have_info ? (int64_t)info.stack_size : 0);
  if (rc == 0) rc = wb_json_set_str(rec, "stack_guard", have_info ? info.stack_guard : NULL);
  if (rc == 0) rc = wb_json_set_bool(rec, "io_uring", have_info && info.io_uring);
  if (rc == 0) rc = add_env(rec);
  return rc;
}
