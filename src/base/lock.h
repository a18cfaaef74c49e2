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

/*
 * The lock order (docs/architecture.md, "Lock order"): where two locks are
 * held at once, the one taken second has the higher level, and two leaves
 * are never held together. Debug builds check it at every acquire
 * (WEFT__ASSERT): each thread counts the locks it holds per level (fibers
 * never switch while holding one, so a carrier's count is its fiber's).
 */
enum {
  WEFT__LOCK_OBJECT =
      1, /* an object's lock: a future's, a channel's, a mutex/cond/sem word, the sources list */
  WEFT__LOCK_TCTX = 2, /* a thread context's (cancelling a running future takes it under the future's) */
  WEFT__LOCK_LEAF = 3, /* a carrier's inbox, spawn queue and registry, the global queue, a range's error */
  WEFT__LOCK_LEVELS = 4
};

typedef struct weft__lock {
  atomic_uint held; /* 0 free, 1 held */
  unsigned level;   /* WEFT__LOCK_*: read only by the debug checks */
} weft__lock;

#define WEFT__LOCK_INITIALIZER(lvl)                                                                          \
  { 0, (lvl) }

#if WEFT__CHECKS
/*
 * Out of line (base/util.c), on purpose: the counts are thread-locals, and a
 * function that takes a lock, parks and takes another could otherwise reuse
 * the thread-local address it computed before the park (aarch64 keeps it in a
 * register), and count on the thread a moved fiber left (WEFT_MIGRATE).
 */
void weft__lock_order_enter(unsigned level);
void weft__lock_order_leave(unsigned level);
#else
static inline void weft__lock_order_enter(unsigned level) { WEFT__UNUSED(level); }
static inline void weft__lock_order_leave(unsigned level) { WEFT__UNUSED(level); }
#endif

static inline void weft__lock_init(weft__lock *l, unsigned level) {
  WEFT__ASSERT(level >= WEFT__LOCK_OBJECT && level < WEFT__LOCK_LEVELS);
  atomic_init(&l->held, 0);
  l->level = level;
}

static inline bool weft__lock_try(weft__lock *l) {
  /* Acquire pairs with the release in weft__lock_release. */
  bool got = atomic_exchange_explicit(&l->held, 1, memory_order_acquire) == 0;
  if (got) weft__lock_order_enter(l->level);
  return got;
}

static inline void weft__lock_acquire(weft__lock *l) {
  unsigned spins = 0;
  while (atomic_exchange_explicit(&l->held, 1, memory_order_acquire) != 0) {
    while (weft__load_relaxed(&l->held) != 0) {
      if (++spins < 64)
        weft__cpu_relax();
      else
        sched_yield();
    }
  }
  weft__lock_order_enter(l->level);
}

static inline void weft__lock_release(weft__lock *l) {
  weft__lock_order_leave(l->level);
  weft__store_release(&l->held, 0);
}

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
  weft__lock_order_enter(WEFT__LOCK_OBJECT);
}

static inline void weft__wordlock_release(uint32_t *w) {
  weft__lock_order_leave(WEFT__LOCK_OBJECT);
  __atomic_store_n(w, 0u, __ATOMIC_RELEASE);
}

#endif /* WEFT_SYNC_LOCK_H */
