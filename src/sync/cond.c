/*
 * This file contains weft_cond_t: a condition variable for fibers and
 * threads alike, used with a weft_mutex_t.
 *
 * ==== Fields and who owns them ================================================
 *
 *   lock_      the word lock (base/lock.h) that guards the rest.
 *   head_,     the FIFO of waiters, each a weft__waiter on its waiter's stack.
 *   tail_
 *   waiters_   how many are on the list. Written only under lock_ (atomic
 *              stores), read without it by signal and broadcast to skip the
 *              lock when nobody waits (below).
 *
 * ==== Protocol ================================================================
 *
 * A waiter queues itself under lock_ while it still holds the mutex, then
 * unlocks the mutex and waits. A signal pops waiters under lock_ until one
 * resolve succeeds: a waiter whose deadline or cancellation won its CAS is
 * leaving on its own, and the signal goes to the next one instead of being
 * lost on it. A waiter is only ever woken by a signal or a broadcast that
 * found it on the list, so there are no spurious wake-ups: a waiter that
 * returns 0 was signalled (its predicate may still have been changed back
 * by someone who took the mutex first, as with any condition variable).
 *
 * The look at waiters_ without lock_ is enough in a correct program: the
 * waiter queued itself before it unlocked the mutex, and a signaller that
 * changed the predicate under the mutex took the mutex after that unlock,
 * so the increment happens before the signaller's relaxed load and is seen.
 * A signal sent without the mutex held may miss a waiter that is just
 * starting to wait, as POSIX allows (that waiter had not yet seen the
 * predicate change, or will see it when it re-checks).
 *
 * A woken waiter settles on lock_ (sync.h) before it re-takes the mutex, so
 * a cond on the stack can be destroyed as soon as its last waiter returns.
 *
 * Rejected: wait morphing (moving broadcast waiters straight onto the
 * mutex's wait list instead of waking them all to compete for it). It saves
 * the thundering herd after a broadcast, but ties the cond to one mutex's
 * internals and to its hand-off policy; broadcasts to many waiters are rare
 * in the workloads weft serves.
 */
#include "sync.h"

#include <string.h>

static inline void set_waiters(weft_cond_t *c, uint32_t n) {
  __atomic_store_n(&c->waiters_, n, __ATOMIC_RELAXED);
}
static inline uint32_t get_waiters(const weft_cond_t *c) {
  return __atomic_load_n(&c->waiters_, __ATOMIC_RELAXED);
}

/* Contexts: any. WEFT_COND_INITIALIZER needs no call. */
int weft_cond_init(weft_cond_t *c) {
  if (!c) return -EINVAL;
  memset(c, 0, sizeof *c);
  return 0;
}

/*
 * Contexts: any; the caller must hold m (-EPERM otherwise, and m is left
 * alone). A fiber parks, a thread blocks. A cancellation point: a cancelled
 * blocking future gets -ECANCELED, at the door or while it waits. Deadline
 * 0 returns -ETIMEDOUT without letting m go (no one could signal in between
 * anyway). Whatever the result, m is held again on return.
 */
int weft_cond_wait(weft_cond_t *c, weft_mutex_t *m, int64_t deadline_ns) {
  if (!c || !m || !weft__deadline_ok(deadline_ns)) return -EINVAL;
  void *self = weft__sync_self();
  if (weft__mutex_owner(m) != self) return -EPERM;
  if (weft__sync_cancelled()) return -ECANCELED;
  if (deadline_ns == 0) return -ETIMEDOUT;

  weft__waiter w;
  weft__waiter_init(&w, true);
  weft__waiter_on(&w, WEFT__WAIT_COND, c);
  weft__wordlock_acquire(&c->lock_);
  weft__waitlist l = weft__sync_list_get(&c->head_, &c->tail_);
  weft__waitlist_add(&l, &w);
  weft__sync_list_put(&c->head_, &c->tail_, &l);
  set_waiters(c, get_waiters(c) + 1);
  weft__wordlock_release(&c->lock_);

  weft__mutex_unlock_held(m);
  uint32_t ws = weft__waiter_wait(&w, deadline_ns);
  if (ws == WEFT__W_WOKEN) {
    weft__sync_settle_word(&c->lock_);
  } else {
    weft__wordlock_acquire(&c->lock_);
    if (w.queued) {
      l = weft__sync_list_get(&c->head_, &c->tail_);
      weft__waitlist_del(&l, &w);
      weft__sync_list_put(&c->head_, &c->tail_, &l);
      set_waiters(c, get_waiters(c) - 1);
    }
    weft__wordlock_release(&c->lock_);
  }
  weft__mutex_lock_as(m, self);
  return weft__waiter_errno(ws);
}

/*
 * Contexts: any; with or without the mutex held (see the protocol above).
 * Never waits. The wake-up happens once lock_ is free (sync.h, "Waking
 * after the lock").
 */
int weft_cond_signal(weft_cond_t *c) {
  if (!c) return -EINVAL;
  if (get_waiters(c) == 0) return 0;
  weft__sync_wakeup k = WEFT__SYNC_NO_WAKEUP;
  weft__wordlock_acquire(&c->lock_);
  weft__waitlist l = weft__sync_list_get(&c->head_, &c->tail_);
  uint32_t n = get_waiters(c);
  weft__waiter *w;
  while ((w = weft__waitlist_take(&l)) != NULL) {
    n--;
    /* A failed claim is a waiter leaving by deadline or cancellation: the signal goes to the next. */
    if (weft__sync_claim(w, WEFT__W_WOKEN, &k)) break;
  }
  weft__sync_list_put(&c->head_, &c->tail_, &l);
  set_waiters(c, n);
  weft__wordlock_release(&c->lock_);
  weft__sync_wake(&k);
  return 0;
}

/* Contexts: any; with or without the mutex held. Never waits. Resolves every waiter under lock_. */
int weft_cond_broadcast(weft_cond_t *c) {
  if (!c) return -EINVAL;
  if (get_waiters(c) == 0) return 0;
  weft__wordlock_acquire(&c->lock_);
  weft__waitlist l = weft__sync_list_get(&c->head_, &c->tail_);
  weft__waiter *w;
  while ((w = weft__waitlist_take(&l)) != NULL) weft__waiter_wake(w); /* failures are waiters leaving */
  weft__sync_list_put(&c->head_, &c->tail_, &l);
  set_waiters(c, 0);
  weft__wordlock_release(&c->lock_);
  return 0;
}

/* Contexts: any, once no one waits on c. Checking builds abort when someone does. NULL is ignored. */
void weft_cond_destroy(weft_cond_t *c) {
  if (!c) return;
#ifdef WEFT__SYNC_CHECKS
  if (get_waiters(c) != 0 || __atomic_load_n(&c->lock_, __ATOMIC_RELAXED) != 0)
    weft__die("weft_cond_destroy: %p has waiters", (void *)c);
#endif
}
