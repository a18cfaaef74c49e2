/* This file contains carrier placement: parsing WEFT_PLACES and pinning a carrier (places.h). */
#include "places.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

/* A CPU number at *s (decimal digits only); advances *s. -1 when there is none or it is too large. */
static long cpu_at(const char **s) {
  const char *p = *s;
  long v = 0;
  if (*p < '0' || *p > '9') return -1;
  while (*p >= '0' && *p <= '9') {
    v = v * 10 + (*p - '0');
    if (v >= WEFT__PLACES_MAX) return -1;
    p++;
  }
  *s = p;
  return v;
}

int weft__places_parse(const char *spec, weft__places *out) {
  out->n = 0;
  out->cores = false;
  if (!spec || !*spec) return 0;
  if (strcmp(spec, "cores") == 0) {
    out->cores = true;
    return 0;
  }
  const char *s = spec;
  for (;;) {
    long lo = cpu_at(&s), hi = lo;
    if (lo < 0) goto bad;
    if (*s == '-') {
      s++;
      hi = cpu_at(&s);
      if (hi < lo) goto bad;
    }
    for (long c = lo; c <= hi; c++) {
      if (out->n == WEFT__PLACES_MAX) goto bad;
      out->cpu[out->n++] = (uint16_t)c;
    }
    if (*s == '\0') break;
    if (*s++ != ',') goto bad;
  }
  return 0;
bad:
  out->n = 0;
  return -EINVAL;
}

int weft__places_resolve(weft__places *p) {
  if (!p->cores) return 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return -errno;
  p->n = 0;
  for (unsigned c = 0; c < WEFT__PLACES_MAX && c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &set)) p->cpu[p->n++] = (uint16_t)c;
  return p->n ? 0 : -EINVAL;
}

void weft__places_format(const weft__places *p, char *buf, size_t cap) {
  if (cap == 0) return;
  if (p->n == 0) {
    snprintf(buf, cap, "%s", p->cores ? "cores" : "free");
    return;
  }
  size_t at = 0;
  buf[0] = '\0';
  for (unsigned i = 0; i < p->n && at < cap; i++) {
    unsigned j = i;
    while (j + 1 < p->n && p->cpu[j + 1] == p->cpu[j] + 1) j++;
    int len = j > i ? snprintf(buf + at, cap - at, "%s%u-%u", i ? "," : "", p->cpu[i], p->cpu[j])
                    : snprintf(buf + at, cap - at, "%s%u", i ? "," : "", p->cpu[i]);
    at += len > 0 ? (size_t)len : 0;
    i = j;
  }
}
