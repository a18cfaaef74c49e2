/*
 * This file contains the waiter: the one record through which every weft
 * blocking call waits, whether the caller is a fiber (which parks) or a plain
 * thread (which sleeps on a futex). The per-context record that carries a
 * future's cancellation request to whatever its fiber or thread waits on is
 * in tctx.h.
 *
 * Protocol. A waiter lives on the waiting context's stack. It starts in
 * WAITING; whoever ends the wait moves it out of WAITING with one
 * compare-and-swap (woken by the object, timed out by the deadline, cancelled
 * by weft_future_cancel). Only the CAS winner wakes the waiter, so a fiber is
 * made runnable exactly once per wait, and a primitive whose CAS fails knows
 * that this waiter is leaving on its own (a semaphore then offers its unit to
 * the next waiter). After winning, a waker must not touch the waiter again,
 * except for the futex wake of a thread waiter's state word, which is only an
 * address to the kernel and tolerates a waiter that has already gone.
 */
#ifndef WEFT_SYNC_WAIT_H
#define WEFT_SYNC_WAIT_H

#include "../base/internal.h"
#include "../base/lock.h"
#include "../base/queue.h"
#include "park.h"
#include "tctx.h"

struct weft__fiber;

enum {
  WEFT__W_WAITING = 0,
  WEFT__W_WOKEN = 1,
  WEFT__W_TIMEDOUT = 2,
  WEFT__W_CANCELLED = 3,
};

/*
 * What a wait is for, as a fiber dump shows it (weft_dump): set by the
 * primitive with weft__waiter_on before it waits, copied into the parked
 * fiber's record. The object is the primitive's address (or a descriptor
 * number for I/O), never dereferenced by the dump.
 */
enum {
  WEFT__WAIT_NONE = 0, /* running, or runnable */
  WEFT__WAIT_OTHER,
  WEFT__WAIT_SLEEP,      /* weft_sleep_ns / weft_sleep_until: until the deadline */
  WEFT__WAIT_READ,       /* a descriptor to become readable (arg: the descriptor) */
  WEFT__WAIT_WRITE,      /* ... writable */
  WEFT__WAIT_FILE,       /* a regular-file operation in the carrier's io_uring */
  WEFT__WAIT_MUTEX,      /* weft_mutex_lock */
  WEFT__WAIT_COND,       /* weft_cond_wait */
  WEFT__WAIT_SEM,        /* weft_sem_wait */
  WEFT__WAIT_CHAN_SEND,  /* weft_chan_send */
  WEFT__WAIT_CHAN_RECV,  /* weft_chan_recv */
  WEFT__WAIT_FUTURE,     /* weft_future_get of a BLOCKING future (its fiber wakes us) */
  WEFT__WAIT_FUTURE_CPU, /* weft_future_get of a future that runs on the CPU path (a thread wakes us) */
  WEFT__WAIT_OFFLOAD,    /* weft_blocking: a call running on the offload pool */
  WEFT__WAIT_CPU,        /* a CPU map handed to weft's OpenMP team */
  WEFT__WAIT_MAP,        /* a blocking map's caller, for its elements */
  WEFT__WAIT_KINDS
};

/* Their names in a dump ("sleep", "read", ...). */
extern const char *const weft__wait_names[WEFT__WAIT_KINDS];

struct weft__waiter {
  _Atomic uint32_t state;    /* WEFT__W_*: leaves WAITING once, by CAS; the futex word for threads */
  bool cancellable;          /* may weft_future_cancel end this wait? */
  bool queued;               /* on a wait list: owned by the object's lock */
  struct weft__fiber *fiber; /* the waiting fiber, or NULL for an OS thread */
  struct weft__waiter *next; /* wait-list links: owned by the object's lock */
  struct weft__waiter *prev;
  void *data;      /* for the primitive: a channel's element buffer, say */
  uintptr_t aux;   /* for the primitive: a count, a flag */
  uint8_t kind;    /* WEFT__WAIT_*: what it waits for (weft__waiter_on), for dumps */
  const void *obj; /* the object waited on, for dumps: an address, or a descriptor number */
};

/*
 * The rule for wait lists: a waker pops a waiter and resolves it while it
 * holds the object's lock (reading w->next before the resolve, never after);
 * a waiter whose wait did not end WOKEN takes the object's lock and unlinks
 * itself if it is still queued, before it returns. So no waiter leaves while
 * a waker can still reach it.
 */

/* Prepare a waiter for the calling context (fiber or thread). */
void weft__waiter_init(weft__waiter *w, bool cancellable);

/*
 * Wait until the waiter leaves WAITING or the deadline passes; returns the
 * final state (WOKEN, TIMEDOUT or CANCELLED). The caller must have published w
 * (put it on a wait list) before, and must take it off the list after when
 * the result is not WOKEN. deadline: -1 forever, 0 returns TIMEDOUT at once
 * unless already resolved, else absolute CLOCK_MONOTONIC nanoseconds.
 */
uint32_t weft__waiter_wait(weft__waiter *w, int64_t deadline_ns);

/* Move w from WAITING to `to` and wake it; false when someone else did first. */
bool weft__waiter_resolve(weft__waiter *w, uint32_t to);

static inline bool weft__waiter_wake(weft__waiter *w) { return weft__waiter_resolve(w, WEFT__W_WOKEN); }

/* Say what w waits for (after weft__waiter_init, before the wait): a fiber dump shows it. */
static inline void weft__waiter_on(weft__waiter *w, unsigned kind, const void *obj) {
  w->kind = (uint8_t)kind;
  w->obj = obj;
}

/* Map a final waiter state to weft's return value: 0, -ETIMEDOUT, -ECANCELED. */
static inline int weft__waiter_errno(uint32_t state) {
  return state == WEFT__W_WOKEN ? 0 : state == WEFT__W_TIMEDOUT ? -ETIMEDOUT : -ECANCELED;
}

/* A FIFO of waiters, guarded by its owner's lock; `queued` says whether a waiter is on one. */
WEFT__LIST(weft__waitlist, weft__waiter, next, prev);

static inline void weft__waitlist_add(weft__waitlist *l, weft__waiter *w) {
  w->queued = true;
  weft__waitlist_push(l, w);
}

/* Remove w, which must be on l. */
static inline void weft__waitlist_del(weft__waitlist *l, weft__waiter *w) {
  weft__waitlist_remove(l, w);
  w->queued = false;
}

static inline weft__waiter *weft__waitlist_take(weft__waitlist *l) {
  weft__waiter *w = weft__waitlist_pop(l);
  if (w) w->queued = false;
  return w;
}

#endif /* WEFT_SYNC_WAIT_H */
