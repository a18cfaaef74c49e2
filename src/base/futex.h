/*
 * This file contains the futex calls that plain threads block on. Only the
 * process-private forms are used. A futex wait may return for no reason
 * (a signal, a stale wake): every caller re-checks its condition in a loop.
 */
#ifndef WEFT_SYNC_FUTEX_H
#define WEFT_SYNC_FUTEX_H

#include "internal.h"

/*
 * Sleep while *addr == expected, until woken or the absolute CLOCK_MONOTONIC
 * deadline (-1: none). Returns 0 when woken or the value differed (check
 * again), -ETIMEDOUT at the deadline. EINTR is absorbed: the caller loops.
 */
int weft__futex_wait(_Atomic uint32_t *addr, uint32_t expected, int64_t deadline_ns);

/* Wake at most n threads sleeping on addr (INT32_MAX: all). */
void weft__futex_wake(_Atomic uint32_t *addr, int n);

#endif /* WEFT_SYNC_FUTEX_H */
