/*
 * This file contains small services that the rest of weft shares: the fatal
 * error path, warnings, the CPU count and environment parsing.
 */
#include "internal.h"
#include "lock.h"
#include "sys.h"

#include <ctype.h>
#include <dlfcn.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void vwrite_line(const char *fmt, va_list ap) {
  char buf[512];
  int n = snprintf(buf, sizeof buf, "weft: ");
  int m = vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
  size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
  if (len > sizeof buf - 2) len = sizeof buf - 2;
  buf[len++] = '\n';
  /* One write, so that lines from several threads do not interleave. */
  ssize_t w = write(STDERR_FILENO, buf, len);
  WEFT__UNUSED(w);
}

void weft__die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vwrite_line(fmt, ap);
  va_end(ap);
  abort();
}

void weft__warn(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vwrite_line(fmt, ap);
  va_end(ap);
}

void weft__describe_site(const void *pc, char *buf, size_t cap) {
  Dl_info info;
  if (pc && dladdr(pc, &info) && info.dli_fname) {
    const char *lib = strrchr(info.dli_fname, '/');
    lib = lib ? lib + 1 : info.dli_fname;
    if (info.dli_sname)
      snprintf(buf, cap, "%s+0x%zx (%s)", info.dli_sname,
               (size_t)((const char *)pc - (const char *)info.dli_saddr), lib);
    else
      snprintf(buf, cap, "%p (%s)", pc, lib);
  } else {
    snprintf(buf, cap, "%p", pc);
  }
}

unsigned weft__cpu_count(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return (unsigned)n;
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (unsigned)n : 1u;
}

bool weft__env_size(const char *name, size_t *out) {
  const char *s = getenv(name);
  if (!s || !*s) return false;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno != 0 || end == s || s[0] == '-') return false;
  unsigned shift = 0;
  switch (tolower((unsigned char)*end)) {
  case 'k':
    shift = 10;
    end++;
    break;
  case 'm':
    shift = 20;
    end++;
    break;
  case 'g':
    shift = 30;
    end++;
    break;
  default:
    break;
  }
  if (*end == 'b' || *end == 'B') end++;
  if (*end != '\0') return false;
  if (shift && v > (SIZE_MAX >> shift)) return false;
  *out = (size_t)(v << shift);
  return true;
}

int weft__env_bool(const char *name) {
  const char *s = getenv(name);
  if (!s || !*s) return -1;
  static const char *const yes[] = {"1", "on", "true", "yes"};
  static const char *const no[] = {"0", "off", "false", "no"};
  for (size_t i = 0; i < 4; i++) {
    if (strcasecmp(s, yes[i]) == 0) return 1;
    if (strcasecmp(s, no[i]) == 0) return 0;
  }
  return -1;
}

#if WEFT__CHECKS
static __thread unsigned weft__locks_held[WEFT__LOCK_LEVELS];

void weft__lock_order_enter(unsigned level) {
  for (unsigned k = level; k < WEFT__LOCK_LEVELS; k++)
    if (WEFT__UNLIKELY(weft__locks_held[k] != 0))
      weft__die("lock order: a level-%u lock taken while one of level %u is held (docs/architecture.md)",
                level, k);
  weft__locks_held[level]++;
}

void weft__lock_order_leave(unsigned level) {
  WEFT__ASSERT(weft__locks_held[level] > 0);
  weft__locks_held[level]--;
}
#endif
