/*
 * This file contains the runtime's settings (settings.h): one table that
 * says, for every setting, its environment variable, its weft_config field
 * (or none: a diagnostic set only by the environment), its default, its
 * range and what it does. weft_config_init, weft_configure's checks, the
 * environment parser and docs/api.md's "Settings" table (scripts/apidoc.py
 * reads the rows below) all come from it.
 *
 * How a value is found: the weft_config field when weft_configure set it
 * (bool fields: -1 is unset; numbers: 0 is unset), else the environment
 * when its value parses and lies in range, else the default. Environment
 * values that do not parse or lie out of range are ignored, as if unset.
 */
#include "settings.h"

#include "places.h"
#include "process.h"

#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
  S_BOOL,  /* 1/on/true/yes, 0/off/false/no; weft_config: -1 unset, 0, 1 */
  S_COUNT, /* a positive whole number; weft_config: 0 unset */
  S_SIZE,  /* bytes, with an optional k, m or g suffix; weft_config: 0 unset */
  S_LEVEL, /* 0 to max, or a bool word (on is 1); environment only */
  S_MODE,  /* 0 to max, or a bool word (on is the default); weft_config: -1 unset, 0 to max */
  S_MS0,   /* milliseconds, where 0 is a value (off); environment only */
  S_TEXT,  /* a word that its owner parses (and warns about); weft_config: NULL unset (copied) */
};

#define NO_CFG SIZE_MAX
#define CFG(f) offsetof(weft_config, f)
#define OUT(f) offsetof(weft__settings, f)
#define KIB    1024ull
#define MIB    (1024ull * KIB)
#define GIB    (1024ull * MIB)

/*
 * The table. Columns: environment variable, kind, weft_config field, field
 * of weft__settings, default, least, most, what it does (docs/api.md). A
 * default of 0 for WEFT_CARRIERS means one per CPU of the affinity mask.
 * The least and most bound weft_configure (-EINVAL outside) and the
 * environment of sizes; counts from the environment take any value from 1
 * to UINT32_MAX (WEFT_CARRIERS is then capped at WEFT_MAX_CARRIERS).
 */
typedef struct setting {
  const char *env;
  unsigned kind;
  size_t cfg, out;
  unsigned long long dflt, least, most;
  const char *doc;
} setting;

static const setting table[] = {
    {"WEFT_FIBERS", S_BOOL, CFG(fibers), OUT(fibers), 1, 0, 1,
     "WEFT_BLOCKING work runs on fibers; 0: on the CPU path instead (the fallback)"},
    {"WEFT_CARRIERS", S_COUNT, CFG(carriers), OUT(carriers), 0, 0, 65536,
     "carrier threads that run fibers; default: one per CPU of the affinity mask, at most WEFT_MAX_CARRIERS"},
    {"WEFT_STACK_SIZE", S_SIZE, CFG(stack_size), OUT(stack_size), 256 * KIB, 16 * KIB, 1 * GIB,
     "bytes of stack per fiber (suffixes k, m, g); pages are touched only as the fiber uses them"},
    {"WEFT_PIN_THRESHOLD_MS", S_COUNT, CFG(pin_threshold_ms), OUT(pin_threshold_ms), 20, 0, UINT32_MAX,
     "a fiber that runs this long without parking pins its carrier: the monitor starts a compensation "
     "carrier"},
    {"WEFT_MAX_CARRIERS", S_COUNT, CFG(max_carriers), OUT(max_carriers), 256, 0, 65536,
     "carriers at most, compensation carriers included"},
    {"WEFT_TRACE_PINNED", S_BOOL, CFG(trace_pinned), OUT(trace_pinned), 0, 0, 1,
     "1: a line on stderr for every pinned carrier, naming the call site"},
    {"WEFT_IO_URING", S_MODE, CFG(io_uring), OUT(io_uring), 2, 0, 2,
     "io_uring where the kernel allows (5.19): 2, fibers' reads of owned stream sockets are a multishot "
     "receive (6.0) and their writes ring sends, submitted in batches, and regular-file I/O is ring "
     "requests, each carrier's ring its wait point from its first such request on (docs/benchmarks.md); "
     "1, only regular-file I/O, sockets through epoll; 0, epoll, and files on the offload pool"},
    {"WEFT_WRITE_BEHIND", S_BOOL, NO_CFG, OUT(write_behind), 1, 0, 1,
     "with WEFT_IO_URING=2: a fiber's write of at most 2 KiB to an owned TCP socket is copied and "
     "returns at once, its send going out with the carrier's next batch (an error it meets is the next "
     "write's); 0: the fiber waits for its send"},
    {"WEFT_OFFLOAD_MAX", S_COUNT, CFG(offload_max), OUT(offload_max), 64, 0, UINT32_MAX,
     "offload threads at most (weft_blocking, and file I/O without io_uring)"},
    {"WEFT_EXPLAIN", S_LEVEL, NO_CFG, OUT(explain), 0, 0, 2,
     "1 (or on): one line on stderr per CPU map call site and decision, saying why; 2: every call"},
    {"WEFT_DEADLOCK_MS", S_MS0, NO_CFG, OUT(deadlock_ms), 10000, 0, UINT32_MAX,
     "report fibers parked with nothing to wake them after this long without progress; 0: off"},
    {"WEFT_STACK_HOLD_MS", S_MS0, NO_CFG, OUT(stack_hold_ms), 1000, 0, UINT32_MAX,
     "an idle fiber runtime keeps the stacks of its last burst of fibers for this long (their pages stay "
     "committed: the next burst pays no page faults for them), then gives back those above its floor "
     "(64 MiB of stack) over four times as long; 0: gives them back after 100 ms without work"},
    {"WEFT_STACK_GUARD", S_TEXT, NO_CFG, OUT(stack_guard), 0, 0, 0,
     "madv, mprotect or none: how stack guard pages are made; default: madv where the kernel has "
     "MADV_GUARD_INSTALL, else mprotect"},
    {"WEFT_DUMP_SIGNAL", S_TEXT, NO_CFG, OUT(dump_signal), 0, 0, 0,
     "a signal (SIGUSR1, or a number) on which weft writes weft_dump's report to stderr and goes on; "
     "default: none"},
    {"WEFT_MIGRATE", S_BOOL, CFG(migrate), OUT(migrate), 0, 0, 1,
     "1: a woken fiber may resume on another carrier that is idle (work sharing), for programs whose "
     "fibers keep no address of errno or of a thread-local variable across a weft call that may park; "
     "default: a fiber stays on the carrier it started on; x86-64 only for now"},
    {"WEFT_PLACES", S_TEXT, CFG(places), OUT(places), 0, 0, 0,
     "cores: carrier k pinned to the k-th CPU of the affinity mask; or a CPU list (0,2,4-7): carrier k "
     "to its k-th CPU; default: carriers free in the mask"},
};
#define NSETTINGS (sizeof table / sizeof table[0])

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static weft_config configured = {.fibers = -1, .trace_pinned = -1, .io_uring = -1, .migrate = -1};
/* The configured text settings' own copies (configured's pointers point here). */
static char configured_text[NSETTINGS][WEFT__SETTING_TEXT];

/* Text from the environment or a configuration, into a weft__settings field; too long is never cut. */
static void store_text(char *dst, const char *src) {
  if (strlen(src) < WEFT__SETTING_TEXT)
    memcpy(dst, src, strlen(src) + 1);
  else
    snprintf(dst, WEFT__SETTING_TEXT, "%s", "<too long>"); /* which no owner's parser takes */
}

void weft__settings_config_init(weft_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  for (size_t i = 0; i < NSETTINGS; i++)
    if ((table[i].kind == S_BOOL || table[i].kind == S_MODE) && table[i].cfg != NO_CFG)
      *(int *)(void *)((char *)cfg + table[i].cfg) = -1;
}

/* The configured value of a setting, as a number; false when unset. */
static bool from_config(const setting *t, const weft_config *c, unsigned long long *v) {
  if (t->cfg == NO_CFG) return false;
  const char *p = (const char *)c + t->cfg;
  switch (t->kind) {
  case S_BOOL:
  case S_MODE: {
    int b = *(const int *)(const void *)p;
    *v = (unsigned long long)b;
    return b >= 0;
  }
  case S_SIZE:
    *v = *(const size_t *)(const void *)p;
    return *v != 0;
  default:
    *v = *(const unsigned *)(const void *)p;
    return *v != 0;
  }
}

/* The environment's value of a setting (not S_TEXT); false when unset or unusable. */
static bool from_env(const setting *t, unsigned long long *v) {
  size_t n;
  int b;
  switch (t->kind) {
  case S_BOOL:
    b = weft__env_bool(t->env);
    *v = (unsigned long long)b;
    return b >= 0;
  case S_SIZE:
    if (!weft__env_size(t->env, &n) || n < t->least || n > t->most) return false;
    *v = n;
    return true;
  case S_MODE:
    if (weft__env_size(t->env, &n)) {
      *v = n;
      return n <= t->most;
    }
    b = weft__env_bool(t->env);
    *v = b == 1 ? t->dflt : 0;
    return b >= 0;
  case S_LEVEL:
    if (weft__env_size(t->env, &n)) {
      *v = n > t->most ? t->most : n;
      return true;
    }
    b = weft__env_bool(t->env);
    *v = b == 1 ? 1 : 0;
    return b >= 0;
  case S_MS0:
    if (!weft__env_size(t->env, &n) || n > UINT32_MAX) return false;
    *v = n;
    return true;
  default: /* S_COUNT */
    if (!weft__env_size(t->env, &n) || n == 0 || n > UINT32_MAX) return false;
    *v = n;
    return true;
  }
}

static void store(const setting *t, weft__settings *s, unsigned long long v) {
  char *p = (char *)s + t->out;
  switch (t->kind) {
  case S_BOOL:
    *(bool *)(void *)p = v != 0;
    break;
  case S_SIZE:
    *(size_t *)(void *)p = (size_t)v;
    break;
  default:
    *(unsigned *)(void *)p = (unsigned)v;
    break;
  }
}

static const setting *find(const char *env) {
  for (size_t i = 0; i < NSETTINGS; i++)
    if (strcmp(table[i].env, env) == 0) return &table[i];
  return NULL;
}

/* A setting's value under configuration c: the configured one, else the environment's, else the default. */
static unsigned long long value(const setting *t, const weft_config *c) {
  unsigned long long v;
  if (from_config(t, c, &v) || from_env(t, &v)) return v;
  return t->dflt;
}

static void atfork_child(void) { pthread_mutex_init(&mu, NULL); }
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static void fork_register(void) { weft__on_fork(NULL, NULL, atfork_child); }

void weft__settings_get(weft__settings *s) {
  pthread_once(&fork_once, fork_register);
  pthread_mutex_lock(&mu);
  weft_config c = configured;
  pthread_mutex_unlock(&mu);
  memset(s, 0, sizeof *s);
  for (size_t i = 0; i < NSETTINGS; i++) {
    const setting *t = &table[i];
    if (t->kind == S_TEXT) {
      const char *v =
          t->cfg != NO_CFG ? *(const char *const *)(const void *)((const char *)&c + t->cfg) : NULL;
      if (!v) v = getenv(t->env);
      if (v) store_text((char *)s + t->out, v);
      continue;
    }
    store(t, s, value(t, &c));
  }
  if (!s->carriers) s->carriers = weft__cpu_count();
  if (s->carriers > s->max_carriers) s->carriers = s->max_carriers;
}

int weft__settings_configure(const weft_config *cfg, bool (*busy)(void)) {
  for (size_t i = 0; i < NSETTINGS; i++) {
    const setting *t = &table[i];
    if (t->cfg == NO_CFG) continue;
    const char *p = (const char *)cfg + t->cfg;
    if (t->kind == S_TEXT) {
      const char *text = *(const char *const *)(const void *)p;
      if (text && strlen(text) >= WEFT__SETTING_TEXT) return -EINVAL;
      continue;
    }
    bool flag = t->kind == S_BOOL || t->kind == S_MODE;
    long long v = flag                ? *(const int *)(const void *)p
                  : t->kind == S_SIZE ? (long long)*(const size_t *)(const void *)p
                                      : (long long)*(const unsigned *)(const void *)p;
    bool unset = flag ? v == -1 : v == 0;
    if (!unset && (v < (long long)t->least || (unsigned long long)v > t->most)) return -EINVAL;
  }
  /* More carriers than the bound that will apply (the given one, else the environment's or the default). */
  if (cfg->carriers > value(find("WEFT_MAX_CARRIERS"), cfg)) return -EINVAL;
  weft__places places;
  if (weft__places_parse(cfg->places, &places) < 0) return -EINVAL;
  pthread_once(&fork_once, fork_register);
  pthread_mutex_lock(&mu);
  int rc = 0;
  if (busy && busy())
    rc = -EBUSY;
  else {
    configured = *cfg;
    for (size_t i = 0; i < NSETTINGS; i++) {
      const setting *t = &table[i];
      if (t->kind != S_TEXT || t->cfg == NO_CFG) continue;
      const char **v = (const char **)(void *)((char *)&configured + t->cfg);
      if (*v) *v = memcpy(configured_text[i], *v, strlen(*v) + 1);
    }
  }
  pthread_mutex_unlock(&mu);
  return rc;
}
