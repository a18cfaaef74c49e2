/*
 * This file contains the work-stealing deque: a thread's own stack of jobs,
 * which it pushes and takes back at one end (the bottom, last in first out)
 * while any other thread may steal from the other end (the top, oldest
 * first). It is Chase and Lev's deque ("Dynamic circular work-stealing
 * deque", SPAA 2005) in the C11 form of Lê, Pop, Cohen and Zappa Nardelli
 * ("Correct and efficient work-stealing for weak memory models", PPoPP
 * 2013), with two changes:
 *
 *  - The array has a fixed capacity and never grows: a push into a full
 *    deque fails and the caller queues the job elsewhere (steal.c: the
 *    shared queue). So no thief ever reads an array that the owner has
 *    replaced, and nothing needs deferred freeing.
 *  - The two standalone fences of the paper (the owner's between lowering
 *    `bottom` and reading `top` in take, the thief's between reading `top`
 *    and `bottom` in steal) are folded into sequentially consistent
 *    accesses of those words: a seq_cst store followed by a seq_cst load
 *    cannot be reordered (C11's single total order of seq_cst operations),
 *    which is what the fence gave. ThreadSanitizer does not model
 *    standalone fences, and sees these. The owner's store is an exchange
 *    (weft__store_sc): on x86-64 it is the XCHG a seq_cst store is anyway;
 *    under QEMU's AArch64 emulation a plain STLR let the load of `top` pass
 *    it, and an item was handed out twice (steal/deque_race in CI).
 *
 * Why it is correct, in short. Only the owner writes `bottom` and the
 * array; `top` only grows, by CAS. An item at index i is handed out once:
 *  - while top < bottom - 1 after the owner lowered bottom, the owner and
 *    thieves work on different items: a thief's CAS of top from t to t + 1
 *    claims item t, and the owner's item b = bottom - 1 > t is not at stake;
 *  - for the last item (t == b) the owner and every thief race for the same
 *    CAS of top from t to t + 1; exactly one wins, and the owner restores
 *    bottom whatever the outcome;
 *  - a thief that read top = t and then bottom = b with t < b read the item
 *    at t before its CAS; if the owner has since taken or overwritten that
 *    slot, top has moved past t (a take of the last item moves top; a push
 *    that wraps onto slot t needs bottom - top < capacity, so top > t), and
 *    the thief's CAS fails: it drops what it read.
 * The owner's push stores the item before it publishes the new bottom with
 * release; a thief loads bottom with acquire (seq_cst) before it reads the
 * item, so it sees the job's contents as the owner wrote them.
 *
 * Items are weft__job pointers; the deque owns nothing. Capacity is a power
 * of two. Indices are signed 64-bit and never wrap in practice.
 */
#ifndef WEFT_CPU_DEQUE_H
#define WEFT_CPU_DEQUE_H

#include "../base/internal.h"

/* How many jobs a deque holds: deep recursions beyond it queue in the shared queue. */
#define WEFT__DEQUE_CAP 1024

struct weft__job;

typedef struct weft__deque {
  WEFT__ALIGNED_CL _Atomic int64_t top;    /* next item a thief takes; only grows (CAS) */
  WEFT__ALIGNED_CL _Atomic int64_t bottom; /* next free slot; written by the owner only */
  struct weft__job *_Atomic item[WEFT__DEQUE_CAP];
} weft__deque;

/* What a steal can return besides a job: nothing there, or a lost race (try again). */
#define WEFT__STEAL_EMPTY ((struct weft__job *)0)
#define WEFT__STEAL_LOST  ((struct weft__job *)1)

static inline void weft__deque_init(weft__deque *d) {
  atomic_init(&d->top, 0);
  atomic_init(&d->bottom, 0);
  for (size_t i = 0; i < WEFT__DEQUE_CAP; i++) atomic_init(&d->item[i], NULL);
}

/* Owner only. False when full (the job was not pushed). */
static inline bool weft__deque_push(weft__deque *d, struct weft__job *j) {
  int64_t b = weft__load_relaxed(&d->bottom);
  int64_t t = weft__load_acquire(&d->top);
  if (b - t >= WEFT__DEQUE_CAP) return false;
  weft__store_relaxed(&d->item[b & (WEFT__DEQUE_CAP - 1)], j);
  weft__store_release(&d->bottom, b + 1);
  return true;
}

/* Owner only: the newest job, or NULL when empty (or a thief took the last one). */
static inline struct weft__job *weft__deque_take(weft__deque *d) {
  int64_t b = weft__load_relaxed(&d->bottom) - 1;
  weft__store_sc(&d->bottom, b);
  int64_t t = atomic_load_explicit(&d->top, memory_order_seq_cst);
  if (t > b) { /* empty: put bottom back */
    weft__store_relaxed(&d->bottom, b + 1);
    return NULL;
  }
  struct weft__job *j = weft__load_relaxed(&d->item[b & (WEFT__DEQUE_CAP - 1)]);
  if (t == b) { /* the last item: race the thieves for it */
    if (!atomic_compare_exchange_strong_explicit(&d->top, &t, t + 1, memory_order_seq_cst,
                                                 memory_order_relaxed))
      j = NULL;
    weft__store_relaxed(&d->bottom, b + 1);
  }
  return j;
}

/*
 * Owner only: take the newest job if it is j (a join taking back the job it
 * pushed last); false when it is another job, or gone (stolen).
 */
static inline bool weft__deque_take_if(weft__deque *d, struct weft__job *j) {
  int64_t b = weft__load_relaxed(&d->bottom) - 1;
  if (b < weft__load_relaxed(&d->top) || weft__load_relaxed(&d->item[b & (WEFT__DEQUE_CAP - 1)]) != j)
    return false;
  return weft__deque_take(d) == j; /* NULL: a thief took it meanwhile */
}

/*
 * An item may carry a mark in its lowest bit (jobs are aligned): a job the
 * pusher would rather thieves took last (steal.c). The deque only hands the
 * mark on; a steal that is not for marked items too leaves such an item where
 * it is.
 */
#define WEFT__DEQUE_MARK ((uintptr_t)1)

/* Any thread: the oldest job; with !marked_too, an oldest job that carries the mark counts as none. */
static inline struct weft__job *weft__deque_steal_from(weft__deque *d, bool marked_too) {
  int64_t t = atomic_load_explicit(&d->top, memory_order_seq_cst);
  int64_t b = atomic_load_explicit(&d->bottom, memory_order_seq_cst);
  if (t >= b) return WEFT__STEAL_EMPTY;
  struct weft__job *j = weft__load_relaxed(&d->item[t & (WEFT__DEQUE_CAP - 1)]);
  if (!marked_too && ((uintptr_t)j & WEFT__DEQUE_MARK)) return WEFT__STEAL_EMPTY;
  if (!atomic_compare_exchange_strong_explicit(&d->top, &t, t + 1, memory_order_seq_cst,
                                               memory_order_relaxed))
    return WEFT__STEAL_LOST;
  return j;
}

/* Any thread: the oldest job, WEFT__STEAL_EMPTY, or WEFT__STEAL_LOST (another thread got it first). */
static inline struct weft__job *weft__deque_steal(weft__deque *d) { return weft__deque_steal_from(d, true); }

/* Any thread, a hint: true when the deque looked empty. */
static inline bool weft__deque_empty(weft__deque *d) {
  return weft__load_acquire(&d->top) >= weft__load_acquire(&d->bottom);
}

#endif /* WEFT_CPU_DEQUE_H */
