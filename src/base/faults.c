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

bool weft__fault(enum weft__fault_site site) {
  if (WEFT__LIKELY((atomic_load_explicit(&armed_mask, memory_order_relaxed) & (1u << site)) == 0))
    return false;
  bool fail = false;
  pthread_mutex_lock(&fault_mu);
  if (atomic_load_explicit(&armed_mask, memory_order_relaxed) & (1u << site)) {
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

void weft__fault_arm(uint32_t mask, unsigned long skip, bool is_sticky) {
  pthread_mutex_lock(&fault_mu);
  skip_left = skip;
  sticky = is_sticky;
  fired = 0;
  atomic_store(&armed_mask, mask);
  pthread_mutex_unlock(&fault_mu);
}

unsigned long weft__fault_disarm(void) {
  pthread_mutex_lock(&fault_mu);
  atomic_store(&armed_mask, 0);
  unsigned long n = fired;
  pthread_mutex_unlock(&fault_mu);
  return n;
}
