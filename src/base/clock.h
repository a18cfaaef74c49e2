/*
 * This file contains weft's one clock and its one way to wait on a
 * condition variable with a deadline. Every time in weft is CLOCK_MONOTONIC
 * nanoseconds (weft_now_ns returns this clock): it never jumps, so a deadline
 * means the same before and after the wall clock is set.
 */
#ifndef WEFT_BASE_CLOCK_H
#define WEFT_BASE_CLOCK_H

#include <pthread.h>
#include <time.h>

#include "internal.h"

static inline int64_t weft__mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline struct timespec weft__timespec(int64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
  return ts;
}

/* A condition variable whose timed waits read this clock. 0 or the pthread error. */
static inline int weft__cond_init(pthread_cond_t *cv) {
  pthread_condattr_t a;
  int rc = pthread_condattr_init(&a);
  if (rc != 0) return rc;
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  rc = pthread_cond_init(cv, &a);
  pthread_condattr_destroy(&a);
  return rc;
}

/*
 * Wait on cv (made by weft__cond_init), with mu held, until signalled or the
 * absolute deadline on this clock: 0, or ETIMEDOUT. Spurious wake-ups return
 * 0, as pthread_cond_timedwait's do: callers loop on their condition.
 */
static inline int weft__cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t deadline_ns) {
  struct timespec ts = weft__timespec(deadline_ns);
  return pthread_cond_timedwait(cv, mu, &ts);
}

#endif /* WEFT_BASE_CLOCK_H */
