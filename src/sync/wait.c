/*
 * This file contains the waiter and the context record (see wait.h): how a
 * fiber or a thread waits for one event, with a deadline and cancellation.
 */
#include "wait.h"

#include "../base/futex.h"
#include "park.h"

/* The record of a plain thread, and the one it is lent for a piece of work. */
static __thread weft__tctx tls_tctx;
static __thread weft__tctx *tls_cur;

void weft__tctx_init(weft__tctx *tc) {
  atomic_init(&tc->cancelled, false);
  weft__lock_init(&tc->lock, WEFT__LOCK_TCTX);
  tc->waiter = NULL;
  tc->scope = NULL;
  tc->locals = NULL;
}

weft__tctx *weft__tctx_self(void) {
  weft__tctx *t = weft__fiber_tctx_self();
  if (t) return t;
  return tls_cur ? tls_cur : &tls_tctx;
}

weft__tctx *weft__tctx_enter(weft__tctx *tc) {
  weft__tctx *prev = tls_cur;
  tls_cur = tc;
  return prev;
}

void weft__tctx_leave(weft__tctx *prev) { tls_cur = prev; }

bool weft__tctx_in_work(void) { return tls_cur != NULL; }

void weft__tctx_cancel(weft__tctx *tc) {
  /* Seen by a wait that starts later: it checks the flag under the lock. */
  atomic_store(&tc->cancelled, true);
  weft__lock_acquire(&tc->lock);
  if (tc->waiter) weft__waiter_resolve(tc->waiter, WEFT__W_CANCELLED);
  weft__lock_release(&tc->lock);
}

const char *const weft__wait_names[WEFT__WAIT_KINDS] = {
    "none", "other",     "sleep",     "read",   "write",      "file",    "mutex",   "cond",
    "sem",  "chan-send", "chan-recv", "future", "future-cpu", "offload", "cpu-map", "map"};

void weft__waiter_init(weft__waiter *w, bool cancellable) {
  w->kind = WEFT__WAIT_OTHER;
  w->obj = NULL;
  atomic_init(&w->state, WEFT__W_WAITING);
  w->cancellable = cancellable;
  w->queued = false;
  w->fiber = weft__parkable_self();
  w->next = w->prev = NULL;
  w->data = NULL;
  w->aux = 0;
}

bool weft__waiter_resolve(weft__waiter *w, uint32_t to) {
  /* Read before the CAS: once it succeeds the waiter may be gone. */
  struct weft__fiber *f = w->fiber;
  uint32_t expect = WEFT__W_WAITING;
  /* acq_rel: the waker's writes before (a result, a channel element) are
     seen by the waiter, which reads state with acquire. */
  if (!atomic_compare_exchange_strong_explicit(&w->state, &expect, to, memory_order_acq_rel,
                                               memory_order_acquire))
    return false;
  if (f)
    weft__fiber_ready(f);
  else
    weft__futex_wake(&w->state, 1);
  return true;
}

uint32_t weft__waiter_wait(weft__waiter *w, int64_t deadline_ns) {
  weft__tctx *tc = NULL;
  if (w->cancellable) {
    tc = weft__tctx_self();
    weft__lock_acquire(&tc->lock);
    tc->waiter = w;
    bool cancelled = atomic_load(&tc->cancelled);
    weft__lock_release(&tc->lock);
    if (cancelled) weft__waiter_resolve(w, WEFT__W_CANCELLED);
  }

  if (w->fiber) {
    /*
     * Exactly one resolve readies the fiber, so it parks exactly once, even
     * when the wait was resolved before it got here: that ready is already
     * on its way to the carrier's queue and must be consumed.
     */
    if (deadline_ns == 0) {
      /*
       * Try once: end the wait ourselves. A CAS, not weft__waiter_resolve,
       * which would ready this very fiber and leave that ready behind for its
       * next park. If someone else won, their ready is coming: consume it.
       */
      uint32_t expect = WEFT__W_WAITING;
      if (atomic_compare_exchange_strong_explicit(&w->state, &expect, WEFT__W_TIMEDOUT, memory_order_acq_rel,
                                                  memory_order_acquire))
        goto out;
      weft__fiber_park_wait(w->fiber, w->kind, w->obj, 0, NULL);
    } else {
      weft__fiber_park_wait(w->fiber, w->kind, w->obj, deadline_ns, deadline_ns > 0 ? w : NULL);
    }
  } else {
    while (atomic_load_explicit(&w->state, memory_order_acquire) == WEFT__W_WAITING) {
      if (deadline_ns == 0 || weft__futex_wait(&w->state, WEFT__W_WAITING, deadline_ns) == -ETIMEDOUT)
        weft__waiter_resolve(w, WEFT__W_TIMEDOUT);
    }
  }

out:
  if (tc) {
    weft__lock_acquire(&tc->lock);
    tc->waiter = NULL;
    weft__lock_release(&tc->lock);
  }
  return atomic_load_explicit(&w->state, memory_order_acquire);
}
