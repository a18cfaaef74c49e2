/*
 * This file contains what weft's synchronisation primitives (mutex.c,
 * cond.c, sem.c, chan.c) share: who the caller is, the wait list kept in a
 * public struct's two pointer fields, the cancellation check at the door,
 * "settling" after a wake-up, and waking a waiter after the lock is let go.
 *
 * Settling. Every primitive hands its waiters over under its word lock: the
 * waker pops a waiter, resolves it WOKEN and may still write into it (a
 * channel element, a "you own the mutex now" flag) before it lets the lock
 * go. A waiter that ends WOKEN does not take the lock again (wait.h's rule),
 * so it could return, and its caller could destroy or free the primitive,
 * while the waker is still about to write the lock word: the glibc bug class
 * of an unlocker that touches a mutex someone has already freed. So a woken
 * waiter first waits until it sees the lock word free. The waker held the
 * lock continuously from before the resolve until its release, and the
 * waiter saw the resolve, so by coherence any 0 it reads is that release or
 * a later one: after it, the waker never touches the object again. The
 * acquire load also pairs with the waker's release, which publishes whatever
 * it wrote into the waiter after the resolve. The wait is nearly always
 * over before it starts: the wake-up proper comes only after the lock is
 * free (below, "Waking after the lock"), so a fiber, or a thread that was
 * asleep, finds it free. It matters for a thread that sees WOKEN before it
 * has gone to sleep, while the waker is still inside its critical section.
 */
#ifndef WEFT_SYNC_SYNC_H
#define WEFT_SYNC_SYNC_H

#include "../base/internal.h"

#include <sched.h>

#include "../base/futex.h"
#include "../base/lock.h"
#include "wait.h"

/*
 * Who holds a mutex: the running fiber, or else the OS thread (the address
 * of a thread-local byte, which no two live threads share and no fiber
 * record can equal). So a carrier thread is never mistaken for any of the
 * fibers it runs, nor they for each other. Like any address, an identity
 * can be reused once its fiber or thread has ended: ending while holding a
 * mutex is a bug that this cannot always catch.
 */
void *weft__sync_self(void);

/*
 * For weft_cond_wait (mutex.c): who holds m; take m as `self` (not a
 * cancellation point, never fails); let go of a mutex the caller holds.
 */
void *weft__mutex_owner(const weft_mutex_t *m);
void weft__mutex_lock_as(weft_mutex_t *m, void *self);
void weft__mutex_unlock_held(weft_mutex_t *m);

/* True when the caller's blocking future was cancelled: a cancellation point returns -ECANCELED at once. */
static inline bool weft__sync_cancelled(void) {
  /* Relaxed: weft__tctx_cancel also resolves any wait that starts later (checked under tc->lock). */
  return atomic_load_explicit(&weft__tctx_self()->cancelled, memory_order_relaxed);
}

/* Wait until the word lock *w is seen free (see "Settling" above). */
static inline void weft__sync_settle_word(const uint32_t *w) {
  unsigned spins = 0;
  /* Acquire: pairs with weft__wordlock_release by the waker. */
  while (__atomic_load_n(w, __ATOMIC_ACQUIRE) != 0) {
    if (++spins < 64)
      weft__cpu_relax();
    else
      sched_yield();
  }
}

/* The same for a weft__lock (the channel's). */
static inline void weft__sync_settle_lock(weft__lock *l) {
  unsigned spins = 0;
  /* Acquire: pairs with weft__lock_release by the waker. */
  while (atomic_load_explicit(&l->held, memory_order_acquire) != 0) {
    if (++spins < 64)
      weft__cpu_relax();
    else
      sched_yield();
  }
}

/*
 * The public structs keep their wait list in two `void *` fields (head_,
 * tail_) so that the header needs no internal type. These copy the list in
 * and out of a weft__waitlist; only ever under the object's word lock.
 */
static inline weft__waitlist weft__sync_list_get(void *const *head, void *const *tail) {
  weft__waitlist l = {(weft__waiter *)*head, (weft__waiter *)*tail};
  return l;
}

static inline void weft__sync_list_put(void **head, void **tail, const weft__waitlist *l) {
  *head = l->head;
  *tail = l->tail;
}

/* Put w at the front of l: a waiter that lost a race after a wake-up keeps its place. */
static inline void weft__sync_list_push_front(weft__waitlist *l, weft__waiter *w) {
  w->queued = true;
  w->prev = NULL;
  w->next = l->head;
  if (l->head)
    l->head->prev = w;
  else
    l->tail = w;
  l->head = w;
}

/*
 * Waking after the lock is let go. weft__waiter_resolve does the CAS and
 * the wake-up together, so a waker that resolves under the object's lock
 * also makes the wake-up's system call there (a futex wake for a thread, an
 * eventfd write to a sleeping carrier for a fiber): the lock is held across
 * a system call, and the woken waiter, which settles on that lock, waits
 * for the call to end. weft__sync_claim does only the CAS, the same one
 * with the same ordering, and notes whom to wake; weft__sync_wake, called
 * once the lock is free, wakes it. The waiter's own rules make this safe
 * (wait.h): a parked fiber cannot run before it is readied, so its record
 * is still there; a thread may already have seen WOKEN, settled and gone,
 * but a futex wake is only an address to the kernel. The hot paths (one
 * wake-up: unlock, signal, post, send, recv) use it; broadcast and close
 * resolve under the lock, since they wake any number of waiters and a
 * waiter's record may not be touched once the lock is free. On this
 * project's 2-vCPU test machine it halved the channel ping-pong between
 * threads (about 22-38 us to 10-17 us per round trip) and between fibers
 * on two carriers (35-47 us to 16-22 us). It mirrors weft__waiter_resolve
 * (wait.c): a claim/wake split there would replace these two.
 */
typedef struct weft__sync_wakeup {
  struct weft__fiber *fiber; /* the fiber to ready, or NULL */
  _Atomic uint32_t *word;    /* else the thread's futex word; NULL: nothing to wake */
} weft__sync_wakeup;

#define WEFT__SYNC_NO_WAKEUP                                                                                 \
  { NULL, NULL }

/* Move w from WAITING to `to`, as weft__waiter_resolve does, without waking it; false when someone else did
 * first. */
static inline bool weft__sync_claim(weft__waiter *w, uint32_t to, weft__sync_wakeup *k) {
  /* Read before the CAS: once it succeeds the waiter may be gone (a thread's). */
  struct weft__fiber *f = w->fiber;
  uint32_t expect = WEFT__W_WAITING;
  /* acq_rel: pairs with the waiter's acquire load of state, as in weft__waiter_resolve. */
  if (!atomic_compare_exchange_strong_explicit(&w->state, &expect, to, memory_order_acq_rel,
                                               memory_order_acquire))
    return false;
  k->fiber = f;
  k->word = f ? NULL : &w->state;
  return true;
}

/* Wake what weft__sync_claim noted, if anything; after the object's lock is let go. */
static inline void weft__sync_wake(const weft__sync_wakeup *k) {
  if (k->fiber)
    weft__fiber_ready(k->fiber);
  else if (k->word)
    weft__futex_wake(k->word, 1);
}

/* The same, a fiber ahead of those ready on its carrier (weft__fiber_ready_first). */
static inline void weft__sync_wake_first(const weft__sync_wakeup *k) {
  if (k->fiber)
    weft__fiber_ready_first(k->fiber);
  else if (k->word)
    weft__futex_wake(k->word, 1);
}

/* Debug checks for misuse that a void call cannot report (destroying a busy object). */
#if defined(WEFT_TESTING) || !defined(NDEBUG)
#define WEFT__SYNC_CHECKS 1
#endif

#endif /* WEFT_SYNC_SYNC_H */
