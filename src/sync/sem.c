/*
 * This file contains weft_sem_t: a counting semaphore for fibers and
 * threads alike.
 *
 * ==== Fields and who owns them ================================================
 *
 *   value_   one 64-bit atomic word: the count of units (low 32 bits) and
 *            the number of queued waiters (high 32 bits). The count changes
 *            by CAS from anywhere; the waiter number changes only under
 *            lock_ (still by atomic read-modify-write, since the count beside
 *            it moves at the same time).
 *   lock_    the word lock (base/lock.h) that guards the list and the
 *            waiter number.
 *   head_,   the FIFO of waiters (weft__waiter on each waiter's stack).
 *   tail_
 *
 * ==== Protocol ================================================================
 *
 * Invariant: units and queued waiters never coexist. A waiter queues only
 * when its CAS under lock_ finds the count 0 (the same CAS counts it in); a
 * post adds to the count only when its CAS finds no queued waiter, and
 * otherwise hands its unit straight to the first waiter. Keeping both in
 * one word makes "look at the waiters, then add a unit" a single CAS, so a
 * wake-up cannot fall between the two and no fence pairing is needed.
 *
 * wait: CAS count -> count-1 while count > 0 (no lock: bargers may take a
 * unit ahead of no one, since a unit only exists when nobody is queued).
 * Else, under lock_, one CAS that takes a unit after all or counts the
 * caller in, and queue. A waiter that ends WOKEN owns a unit; one that ends
 * by deadline or cancellation unlinks itself if it is still queued.
 *
 * post: CAS count+1 when no one is queued. Else, under lock_, pop waiters
 * (counting each out) until one resolve succeeds: that waiter has the unit
 * (and is woken once lock_ is free: sync.h, "Waking after the lock").
 * A failed resolve is a waiter leaving on its own, and the unit goes on to
 * the next; when all were leaving, the post retries the CAS (the count
 * path). So a unit is never lost when a timeout races a post, and never
 * given twice.
 *
 * Destroying right after the last wait: a post's last touch of the
 * semaphore is either its count CAS (after which a barger may take the unit
 * and free the semaphore) or the release of lock_ after a hand-off, which
 * the woken waiter waits for before it returns (sync.h, "Settling"). This
 * is the glibc sem_post bug (a post that read the waiter count after its
 * increment), and why the two live in one word.
 */
#include "sync.h"

#include <string.h>

#define COUNT_MASK 0xffffffffull
#define ONE_WAITER (1ull << 32)

_Static_assert(offsetof(weft_sem_t, value_) % 8 == 0,
               "weft_sem_t.value_ must be 8-byte aligned for 64-bit atomics");

/* Take a unit when there is one, without the lock. */
static inline bool try_take(weft_sem_t *s) {
  uint64_t v = __atomic_load_n(&s->value_, __ATOMIC_RELAXED);
  while (v & COUNT_MASK) {
    /* Acquire: the post that made the unit happens before the wait returns. */
    if (__atomic_compare_exchange_n(&s->value_, &v, v - 1, true, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
      return true;
  }
  return false;
}

/* Count a waiter out (it is being popped or unlinks itself); under lock_. */
static inline void count_out(weft_sem_t *s) { __atomic_fetch_sub(&s->value_, ONE_WAITER, __ATOMIC_RELAXED); }

/* Contexts: any; value at most UINT32_MAX. There is no static initializer: init before use. */
int weft_sem_init(weft_sem_t *s, unsigned value) {
  if (!s) return -EINVAL;
  memset(s, 0, sizeof *s);
  __atomic_store_n(&s->value_, (uint64_t)value, __ATOMIC_RELAXED);
  return 0;
}

/*
 * Contexts: any. A fiber parks, a thread blocks. A cancellation point: a
 * cancelled blocking future gets -ECANCELED at the door (even with a unit
 * available) or while it waits, and no unit is taken then. Deadline 0 takes
 * a unit if one is there, else -ETIMEDOUT.
 */
int weft_sem_wait(weft_sem_t *s, int64_t deadline_ns) {
  if (!s || !weft__deadline_ok(deadline_ns)) return -EINVAL;
  if (weft__sync_cancelled()) return -ECANCELED;
  if (try_take(s)) return 0;
  if (deadline_ns == 0) return -ETIMEDOUT;

  weft__waiter w;
  weft__waiter_init(&w, true);
  weft__waiter_on(&w, WEFT__WAIT_SEM, s);
  weft__wordlock_acquire(&s->lock_);
  uint64_t v = __atomic_load_n(&s->value_, __ATOMIC_RELAXED);
  for (;;) {
    uint64_t want = (v & COUNT_MASK) ? v - 1 : v + ONE_WAITER;
    if (__atomic_compare_exchange_n(&s->value_, &v, want, true, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) break;
  }
  if (v & COUNT_MASK) { /* a unit came after all */
    weft__wordlock_release(&s->lock_);
    return 0;
  }
  weft__waitlist l = weft__sync_list_get(&s->head_, &s->tail_);
  weft__waitlist_add(&l, &w);
  weft__sync_list_put(&s->head_, &s->tail_, &l);
  weft__wordlock_release(&s->lock_);

  uint32_t ws = weft__waiter_wait(&w, deadline_ns);
  if (ws == WEFT__W_WOKEN) {
    weft__sync_settle_word(&s->lock_);
    return 0;
  }
  weft__wordlock_acquire(&s->lock_);
  if (w.queued) {
    l = weft__sync_list_get(&s->head_, &s->tail_);
    weft__waitlist_del(&l, &w);
    weft__sync_list_put(&s->head_, &s->tail_, &l);
    count_out(s);
  }
  weft__wordlock_release(&s->lock_);
  return weft__waiter_errno(ws);
}

/* Hand one unit to the first waiter still waiting; false when every queued one was leaving. */
static bool hand_off(weft_sem_t *s) {
  weft__sync_wakeup k = WEFT__SYNC_NO_WAKEUP;
  weft__wordlock_acquire(&s->lock_);
  weft__waitlist l = weft__sync_list_get(&s->head_, &s->tail_);
  weft__waiter *w;
  bool handed = false;
  while (!handed && (w = weft__waitlist_take(&l)) != NULL) {
    count_out(s);
    /* acq_rel in the claim: what the poster did before is seen by the waiter. */
    handed = weft__sync_claim(w, WEFT__W_WOKEN, &k);
  }
  weft__sync_list_put(&s->head_, &s->tail_, &l);
  weft__wordlock_release(&s->lock_);
  weft__sync_wake(&k);
  return handed;
}

/*
 * Contexts: any but a signal handler (it may take the short word lock);
 * never waits otherwise. -EOVERFLOW at UINT32_MAX units (nothing changes).
 */
int weft_sem_post(weft_sem_t *s) {
  if (!s) return -EINVAL;
  uint64_t v = __atomic_load_n(&s->value_, __ATOMIC_RELAXED);
  for (;;) {
    if (v >> 32) {
      if (hand_off(s)) return 0;
      v = __atomic_load_n(&s->value_, __ATOMIC_RELAXED);
      continue;
    }
    if ((v & COUNT_MASK) == COUNT_MASK) return -EOVERFLOW;
    /* Release: pairs with the acquire of whoever takes the unit. The last touch of s on this path. */
    if (__atomic_compare_exchange_n(&s->value_, &v, v + 1, true, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
      return 0;
  }
}

/* Contexts: any, once no one waits on s. Checking builds abort when someone does. NULL is ignored. */
void weft_sem_destroy(weft_sem_t *s) {
  if (!s) return;
#ifdef WEFT__SYNC_CHECKS
  if ((__atomic_load_n(&s->value_, __ATOMIC_RELAXED) >> 32) != 0 ||
      __atomic_load_n(&s->lock_, __ATOMIC_RELAXED) != 0)
    weft__die("weft_sem_destroy: %p has waiters", (void *)s);
#endif
}
