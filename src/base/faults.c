/*
 * This file contains the fault injector of test builds (see sys.h): it makes
 * the wrapped calls fail on demand, one at a time, so that the tests can
 * check every failure path: the right error comes back, nothing leaks, and
 * weft works again once the fault stops.
 */
#include "sys.h"

#include <pthread.h>

static atomic_uint armed_mask; /* sites that may fail; 0 when disarmed (the fast path) */
static pthread_mutex_t fault_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned long skip_left; /* calls to let through first: guarded by fault_mu */
static bool sticky;             /* keep failing after the first fault */
static unsigned long fired;     /* faults injected since arming */
static const void *only_thread; /* when set, only this thread's calls may fail: guarded by fault_mu */

/* Its address names the calling thread while that thread lives. */
static _Thread_local char thread_mark;

bool weft__fault(enum weft__fault_site site) {
  if (WEFT__LIKELY((atomic_load_explicit(&armed_mask, memory_order_relaxed) & (1u << site)) == 0))
    return false;
  bool fail = false;
  pthread_mutex_lock(&fault_mu);
  if ((atomic_load_explicit(&armed_mask, memory_order_relaxed) & (1u << site)) &&
      (only_thread == NULL || only_thread == &thread_mark)) {
    if (skip_left > 0) {
      skip_left--;
    } else {
      fail = true;
      fired++;
      if (!sticky) atomic_store(&armed_mask, 0);
    }
  }
  pthread_mutex_unlock(&fault_mu);
  return fail;
}

static void arm(uint32_t mask, unsigned long skip, bool is_sticky, const void *thread) {
  pthread_mutex_lock(&fault_mu);
  only_thread = thread;
  skip_left = skip;
  sticky = is_sticky;
  fired = 0;
  atomic_store(&armed_mask, mask);
  pthread_mutex_unlock(&fault_mu);
}

void weft__fault_arm(uint32_t mask, unsigned long skip, bool is_sticky) { arm(mask, skip, is_sticky, NULL); }

void weft__fault_arm_here(uint32_t mask, unsigned long skip, bool is_sticky) {
  arm(mask, skip, is_sticky, &thread_mark);
}

unsigned long weft__fault_disarm(void) {
  pthread_mutex_lock(&fault_mu);
  atomic_store(&armed_mask, 0);
  unsigned long n = fired;
  pthread_mutex_unlock(&fault_mu);
  return n;
}
