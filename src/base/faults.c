/*
 * This file contains the fault injector of test builds (see sys.h): it makes
 * the wrapped calls fail on demand, one at a time or at a random rate, so
 * that the tests can check every failure path: the right error comes back,
 * nothing leaks, and weft works again once the fault stops.
 */
#include "sys.h"

#include <pthread.h>

static atomic_uint armed_mask; /* sites that may fail; 0 when disarmed (the fast path) */
static pthread_mutex_t fault_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned long skip_left; /* calls to let through first: guarded by fault_mu */
static bool sticky;             /* keep failing after the first fault */
static const void *only_thread; /* when set, only this thread's calls may fail: guarded by fault_mu */

/*
 * The random-rate mode (weft__fault_arm_rate). No lock: the soak fails 1% of
 * calls at every site on every thread, and a mutex there would serialise
 * every allocation of the runtime. The decision for a call is a hash of the
 * seed and the call's number among the armed calls, so one thread making
 * the same calls sees the same faults; several threads share the counter,
 * and which of them takes which number is the machine's interleaving.
 */
static atomic_uint rate_ppm; /* faults per million calls, 0 when off: stored (release) after rate_seed */
static atomic_uint_fast64_t rate_seed;
static atomic_uint_fast64_t rate_calls; /* calls at armed sites since arming */

/* Faults injected per site since arming, in every mode (the total is what disarm returns). */
static atomic_ulong fired_at[WEFT__F_COUNT];

/* Its address names the calling thread while that thread lives. */
static _Thread_local char thread_mark;

/* splitmix64's finaliser: every bit of the seed and the counter reaches every bit of the result. */
static uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static bool rate_fault(enum weft__fault_site site, unsigned ppm) {
  uint64_t n = atomic_fetch_add_explicit(&rate_calls, 1, memory_order_relaxed);
  uint64_t h = mix(atomic_load_explicit(&rate_seed, memory_order_relaxed) + (n + 1) * 0x9E3779B97F4A7C15ull);
  if (h % 1000000u >= ppm) return false;
  atomic_fetch_add_explicit(&fired_at[site], 1, memory_order_relaxed);
  return true;
}

bool weft__fault(enum weft__fault_site site) {
  if (WEFT__LIKELY((atomic_load_explicit(&armed_mask, memory_order_relaxed) & (1u << site)) == 0))
    return false;
  /* Acquire: pairs with weft__fault_arm_rate's release, so the seed read next is the one armed with it. */
  unsigned ppm = atomic_load_explicit(&rate_ppm, memory_order_acquire);
  if (ppm != 0) return rate_fault(site, ppm);
  bool fail = false;
  pthread_mutex_lock(&fault_mu);
  if ((atomic_load_explicit(&armed_mask, memory_order_relaxed) & (1u << site)) &&
      atomic_load_explicit(&rate_ppm, memory_order_relaxed) == 0 &&
      (only_thread == NULL || only_thread == &thread_mark)) {
    if (skip_left > 0) {
      skip_left--;
    } else {
      fail = true;
      atomic_fetch_add_explicit(&fired_at[site], 1, memory_order_relaxed);
      if (!sticky) atomic_store(&armed_mask, 0);
    }
  }
  pthread_mutex_unlock(&fault_mu);
  return fail;
}

/* Under fault_mu: the counts start again from zero. */
static void reset_counts(void) {
  for (int s = 0; s < WEFT__F_COUNT; s++) atomic_store_explicit(&fired_at[s], 0, memory_order_relaxed);
}

static void arm(uint32_t mask, unsigned long skip, bool is_sticky, const void *thread) {
  pthread_mutex_lock(&fault_mu);
  atomic_store(&rate_ppm, 0);
  only_thread = thread;
  skip_left = skip;
  sticky = is_sticky;
  reset_counts();
  atomic_store(&armed_mask, mask);
  pthread_mutex_unlock(&fault_mu);
}

void weft__fault_arm(uint32_t mask, unsigned long skip, bool is_sticky) { arm(mask, skip, is_sticky, NULL); }

void weft__fault_arm_here(uint32_t mask, unsigned long skip, bool is_sticky) {
  arm(mask, skip, is_sticky, &thread_mark);
}

void weft__fault_arm_rate(uint32_t mask, uint32_t per_million, uint64_t seed) {
  pthread_mutex_lock(&fault_mu);
  atomic_store(&armed_mask, 0); /* no call decides with half of the new settings */
  reset_counts();
  only_thread = NULL;
  atomic_store_explicit(&rate_seed, seed, memory_order_relaxed);
  atomic_store_explicit(&rate_calls, 0, memory_order_relaxed);
  uint32_t ppm = per_million > 1000000u ? 1000000u : per_million;
  atomic_store_explicit(&rate_ppm, ppm, memory_order_release);
  atomic_store(&armed_mask, ppm ? mask : 0);
  pthread_mutex_unlock(&fault_mu);
}

unsigned long weft__fault_fired_at(enum weft__fault_site site) {
  if ((unsigned)site >= WEFT__F_COUNT) return 0;
  return atomic_load_explicit(&fired_at[site], memory_order_relaxed);
}

unsigned long weft__fault_disarm(void) {
  pthread_mutex_lock(&fault_mu);
  atomic_store(&armed_mask, 0);
  atomic_store(&rate_ppm, 0);
  unsigned long n = 0;
  for (int s = 0; s < WEFT__F_COUNT; s++) n += atomic_load_explicit(&fired_at[s], memory_order_relaxed);
  pthread_mutex_unlock(&fault_mu);
  return n;
}
