/*
 * This file contains carrier placement (WEFT_PLACES): which CPU each of the
 * fiber runtime's carriers is pinned to. A spec is one of
 *
 *   ""         free: a carrier runs anywhere in the affinity mask it inherits
 *              from the thread that started the runtime (the default);
 *   "cores"    carrier k on the k-th CPU of that mask (wrapping when there
 *              are more carriers than CPUs);
 *   a list     CPUs as taskset -c and cpusets write them, "0,2,4-7":
 *              carrier k on the k-th CPU of the list, in the order given.
 *
 * Compensation carriers (started while others are pinned by a blocking
 * call) are never pinned: they exist because a carrier's CPU is taken.
 */
#ifndef WEFT_BASE_PLACES_H
#define WEFT_BASE_PLACES_H

#include "internal.h"

/* CPU numbers are below this (glibc's CPU_SETSIZE); a list has at most this many entries. */
#define WEFT__PLACES_MAX 1024

typedef struct weft__places {
  unsigned n;                     /* CPUs in cpu[]; 0: free (or "cores" not resolved yet) */
  bool cores;                     /* the spec was "cores" */
  uint16_t cpu[WEFT__PLACES_MAX]; /* carrier k's CPU is cpu[k % n] */
} weft__places;

/*
 * Parse spec (NULL or "" is free) into *out. 0, or -EINVAL for anything else than the forms above: an empty
 * item, a reversed range, a CPU number of WEFT__PLACES_MAX or more, a list longer than that, or stray
 * characters. Any thread.
 */
int weft__places_parse(const char *spec, weft__places *out);

/*
 * For "cores": fill the list with the CPUs of the calling thread's affinity
 * mask, in increasing order. 0 (also for the other forms, which it leaves
 * alone), or a negative errno from sched_getaffinity.
 */
int weft__places_resolve(weft__places *p);

/*
 * The placement for people, into buf (cap bytes, cut to fit): "free",
 * "cores" before it is resolved, else the CPUs of carrier 0, 1, ... with
 * runs written as ranges ("0-3,8").
 */
void weft__places_format(const weft__places *p, char *buf, size_t cap);

#endif /* WEFT_BASE_PLACES_H */
