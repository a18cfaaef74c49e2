/*
 * This file contains the context record of whatever runs a piece of weft
 * work (weft__tctx): one per fiber, and one per OS thread (thread-local) for
 * work that runs on a thread. It carries a future's cancellation request to
 * the wait in progress (wait.h), the innermost scoped binding and the
 * fiber-local values. The functions are in wait.c.
 */
#ifndef WEFT_SYNC_TCTX_H
#define WEFT_SYNC_TCTX_H

#include "../base/internal.h"
#include "../base/lock.h"

typedef struct weft__waiter weft__waiter; /* wait.h */

typedef struct weft__tctx {
  atomic_bool cancelled;       /* set once by weft_future_cancel; never cleared while the work runs */
  weft__lock lock;             /* guards waiter */
  weft__waiter *waiter;        /* the cancellable wait in progress, or NULL */
  struct weft__scope *scope;   /* innermost scoped binding (owned by the weft_scope_run frame) */
  struct weft__locals *locals; /* fiber-local values; NULL until the first weft_local_set */
} weft__tctx;

/* Reset a context record for new work. */
void weft__tctx_init(weft__tctx *tc);
/* The caller's record: its fiber's, or its OS thread's. Never NULL. */
weft__tctx *weft__tctx_self(void);

/* Has the running future (or map element) of the calling context been cancelled? (weft_cancelled) */
static inline bool weft__tctx_cancelled(void) {
  return atomic_load_explicit(&weft__tctx_self()->cancelled, memory_order_relaxed);
}
/* Point this OS thread's record at tc for the duration of a piece of work; returns the old one. */
weft__tctx *weft__tctx_enter(weft__tctx *tc);
void weft__tctx_leave(weft__tctx *prev);
/* True when this OS thread runs a piece of weft work under a lent record (a future, say). */
bool weft__tctx_in_work(void);
/* Mark tc cancelled and end its cancellable wait, if any. */
void weft__tctx_cancel(weft__tctx *tc);

#endif /* WEFT_SYNC_TCTX_H */
