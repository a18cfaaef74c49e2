/*
 * This file contains weft__lock, the small spin lock that guards weft's
 * internal wait lists and queues. It is held for a handful of pointer writes,
 * never across a park or a system call, so a spin lock beats a mutex there;
 * after a short spin it yields the CPU, so that a holder preempted on a busy
 * machine (two cores, shared) gets to run.
 */
#ifndef WEFT_SYNC_LOCK_H
#define WEFT_SYNC_LOCK_H

#include "internal.h"

#include <sched.h>

typedef struct weft__lock {
  atomic_uint held; /* 0 free, 1 held */
} weft__lock;

static inline void weft__lock_init(weft__lock *l) { atomic_init(&l->held, 0); }

static inline bool weft__lock_try(weft__lock *l) {
  /* Acquire pairs with the release in weft__lock_release. */
  return atomic_exchange_explicit(&l->held, 1, memory_order_acquire) == 0;
}

static inline void weft__lock_acquire(weft__lock *l) {
  unsigned spins = 0;
  while (!weft__lock_try(l)) {
    while (weft__load_relaxed(&l->held) != 0) {
      if (++spins < 64)
        weft__cpu_relax();
      else
        sched_yield();
    }
  }
}

static inline void weft__lock_release(weft__lock *l) { weft__store_release(&l->held, 0); }

/*
 * Versions of the same lock for the few words that live inside public
 * structs (weft_mutex_t and friends), which are plain integers in the header
 * so that C++ can include it: accessed only through the __atomic builtins.
 */
static inline void weft__wordlock_acquire(uint32_t *w) {
  unsigned spins = 0;
  while (__atomic_exchange_n(w, 1u, __ATOMIC_ACQUIRE) != 0) {
    while (__atomic_load_n(w, __ATOMIC_RELAXED) != 0) {
      if (++spins < 64)
        weft__cpu_relax();
      else
        sched_yield();
    }
  }
}

static inline void weft__wordlock_release(uint32_t *w) { __atomic_store_n(w, 0u, __ATOMIC_RELEASE); }

#endif /* WEFT_SYNC_LOCK_H */
