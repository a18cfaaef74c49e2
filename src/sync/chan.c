/*
 * This file contains weft_chan_t: a bounded multi-producer multi-consumer
 * channel of fixed-size elements, copied in and out, for fibers and threads
 * alike. Capacity 0 makes it unbuffered: a send completes only when a
 * receiver has taken its element (a rendezvous).
 *
 * ==== Layout ==================================================================
 *
 *   +-------------------------------+
 *   | lock  closed  cap  esize      |  one allocation; everything below the
 *   | head  len                     |  lock is guarded by it
 *   | sendq: waiting senders        |  w->data: the sender's element
 *   | recvq: waiting receivers      |  w->data: the receiver's buffer
 *   +-------------------------------+
 *   | ring: cap slots of esize      |  len elements from slot head, FIFO
 *   +-------------------------------+
 *
 * ==== Protocol ================================================================
 *
 * Everything happens under the channel's lock, as in Go: a channel
 * operation copies a few bytes and moves a pointer or two, so a lock-free
 * ring would save little and could not hand an element straight to a parked
 * waiter. Invariants: receivers wait only when the ring is empty, and
 * senders only when it is full (or always, unbuffered), so the two queues
 * are never both non-empty, and an element in the ring is never overtaken
 * by a waiting sender's.
 *
 * Hand-over to a waiter: pop it and resolve it WOKEN first, and copy the
 * element (into a receiver's buffer, or out of a sender's) only once the
 * resolve has succeeded, still under the lock; the wake-up itself comes
 * after the lock is let go (sync.h, "Waking after the lock"). A failed resolve is a waiter
 * leaving by deadline or cancellation (it will unlink itself, or find
 * itself already unlinked, under the lock): its buffer is left untouched,
 * and the element goes to the next waiter or the ring. So no element is
 * lost or delivered twice when a timeout races a hand-over, and a recv that
 * fails leaves the caller's buffer alone. The woken waiter reads its result
 * (w->aux: DELIVERED or CLOSED) and its buffer only after it has seen the
 * lock free (sync.h, "Settling"), which also lets the last user free the
 * channel as soon as its call returns.
 *
 * Close: sets `closed`, and resolves every waiter with CLOSED: blocked
 * senders give up their element (-EPIPE), blocked receivers (the ring was
 * empty) get -EPIPE. Receivers still drain what the ring holds, then get
 * -EPIPE.
 */
#include "sync.h"

#include <string.h>

#include "../base/sys.h"

enum { DELIVERED = 0, CLOSED = 1 };

struct weft_chan {
  weft__lock lock;      /* guards every field below */
  bool closed;          /* set once by weft_chan_close */
  size_t cap;           /* ring slots; 0: unbuffered. Immutable */
  size_t esize;         /* bytes per element (0 allowed). Immutable */
  size_t head;          /* slot of the oldest buffered element */
  size_t len;           /* buffered elements */
  weft__waitlist sendq; /* senders waiting for room or a receiver */
  weft__waitlist recvq; /* receivers waiting for an element */
  unsigned char ring[]; /* cap * esize bytes */
};

static inline unsigned char *slot(weft_chan_t *ch, size_t i) { return ch->ring + (i % ch->cap) * ch->esize; }

/*
 * Pop waiters until one claim succeeds; that waiter is ours to complete
 * under the lock, and to wake (through k) once the lock is let go. NULL:
 * none was waiting.
 */
static weft__waiter *claim(weft__waitlist *q, weft__sync_wakeup *k) {
  weft__waiter *w;
  while ((w = weft__waitlist_take(q)) != NULL) {
    w->aux = DELIVERED;
    if (weft__sync_claim(w, WEFT__W_WOKEN, k)) return w;
  }
  return NULL;
}

/* Close: resolve every waiter of q with CLOSED, under the lock (any number of them). */
static void close_all(weft__waitlist *q) {
  weft__waiter *w;
  while ((w = weft__waitlist_take(q)) != NULL) {
    w->aux = CLOSED;
    weft__waiter_wake(w); /* a failure is a waiter leaving on its own */
  }
}

/* Wait as a queued sender or receiver; the caller has queued w and let the lock go. */
static int wait_queued(weft_chan_t *ch, weft__waitlist *q, weft__waiter *w, int64_t deadline_ns) {
  uint32_t ws = weft__waiter_wait(w, deadline_ns);
  if (ws == WEFT__W_WOKEN) {
    weft__sync_settle_lock(&ch->lock);
    return w->aux == CLOSED ? -EPIPE : 0;
  }
  weft__lock_acquire(&ch->lock);
  if (w->queued) weft__waitlist_del(q, w);
  weft__lock_release(&ch->lock);
  return weft__waiter_errno(ws);
}

/*
 * Contexts: any. -EINVAL for a NULL out, or when capacity * elem_size (plus
 * the channel's own bytes) overflows; -ENOMEM. elem_size may be 0 (a channel
 * of signals; elements may then be NULL). Release with weft_chan_free.
 */
int weft_chan_create(size_t capacity, size_t elem_size, weft_chan_t **out) {
  if (!out) return -EINVAL;
  size_t bytes, total;
  if (__builtin_mul_overflow(capacity, elem_size, &bytes) ||
      __builtin_add_overflow(bytes, sizeof(struct weft_chan), &total))
    return -EINVAL;
  weft_chan_t *ch = weft__malloc(total);
  if (!ch) return -ENOMEM;
  memset(ch, 0, sizeof *ch);
  weft__lock_init(&ch->lock, WEFT__LOCK_OBJECT);
  ch->cap = capacity;
  ch->esize = elem_size;
  *out = ch;
  return 0;
}

/*
 * Contexts: any. Copies elem_size bytes from elem. Waits while the ring is
 * full (unbuffered: until a receiver takes the element): a fiber parks, a
 * thread blocks. Returns 0 once the element is in the ring or with a
 * receiver; -EPIPE when the channel is closed (before or while waiting: the
 * element was not sent); -ETIMEDOUT; -ECANCELED (a cancellation point: also
 * at the door). On every error the element was not sent. elem may be NULL
 * only when elem_size is 0.
 */
int weft_chan_send(weft_chan_t *ch, const void *elem, int64_t deadline_ns) {
  if (!ch || (!elem && ch->esize) || !weft__deadline_ok(deadline_ns)) return -EINVAL;
  if (weft__sync_cancelled()) return -ECANCELED;

  weft__lock_acquire(&ch->lock);
  if (ch->closed) {
    weft__lock_release(&ch->lock);
    return -EPIPE;
  }
  weft__sync_wakeup k = WEFT__SYNC_NO_WAKEUP;
  weft__waiter *r = claim(&ch->recvq, &k);
  if (r) {
    if (ch->esize) memcpy(r->data, elem, ch->esize);
    weft__lock_release(&ch->lock);
    weft__sync_wake(&k);
    return 0;
  }
  if (ch->len < ch->cap) {
    if (ch->esize) memcpy(slot(ch, ch->head + ch->len), elem, ch->esize);
    ch->len++;
    weft__lock_release(&ch->lock);
    return 0;
  }
  if (deadline_ns == 0) {
    weft__lock_release(&ch->lock);
    return -ETIMEDOUT;
  }
  weft__waiter w;
  weft__waiter_init(&w, true);
  weft__waiter_on(&w, WEFT__WAIT_CHAN_SEND, ch);
  w.data = (void *)(uintptr_t)elem; /* only read, by the receiver that claims w */
  weft__waitlist_add(&ch->sendq, &w);
  weft__lock_release(&ch->lock);
  return wait_queued(ch, &ch->sendq, &w, deadline_ns);
}

/*
 * Contexts: any. Copies the oldest element into elem (elem_size bytes).
 * Waits while there is none: a fiber parks, a thread blocks. Returns 0;
 * -EPIPE once the channel is closed and drained; -ETIMEDOUT; -ECANCELED (a
 * cancellation point: also at the door). On error elem is untouched and no
 * element was taken. elem may be NULL only when elem_size is 0.
 */
int weft_chan_recv(weft_chan_t *ch, void *elem, int64_t deadline_ns) {
  if (!ch || (!elem && ch->esize) || !weft__deadline_ok(deadline_ns)) return -EINVAL;
  if (weft__sync_cancelled()) return -ECANCELED;

  weft__sync_wakeup k = WEFT__SYNC_NO_WAKEUP;
  weft__lock_acquire(&ch->lock);
  if (ch->len > 0) {
    if (ch->esize) memcpy(elem, slot(ch, ch->head), ch->esize);
    ch->head = (ch->head + 1) % ch->cap;
    ch->len--;
    /* Room now: the first waiting sender's element moves into the ring behind the others. */
    weft__waiter *s = claim(&ch->sendq, &k);
    if (s) {
      if (ch->esize) memcpy(slot(ch, ch->head + ch->len), s->data, ch->esize);
      ch->len++;
    }
    weft__lock_release(&ch->lock);
    weft__sync_wake(&k);
    return 0;
  }
  weft__waiter *s = claim(&ch->sendq, &k); /* unbuffered: take it straight from a sender */
  if (s) {
    if (ch->esize) memcpy(elem, s->data, ch->esize);
    weft__lock_release(&ch->lock);
    weft__sync_wake(&k);
    return 0;
  }
  if (ch->closed) {
    weft__lock_release(&ch->lock);
    return -EPIPE;
  }
  if (deadline_ns == 0) {
    weft__lock_release(&ch->lock);
    return -ETIMEDOUT;
  }
  weft__waiter w;
  weft__waiter_init(&w, true);
  weft__waiter_on(&w, WEFT__WAIT_CHAN_RECV, ch);
  w.data = elem;
  weft__waitlist_add(&ch->recvq, &w);
  weft__lock_release(&ch->lock);
  return wait_queued(ch, &ch->recvq, &w, deadline_ns);
}

/*
 * Contexts: any; never waits. Wakes every blocked sender and receiver with
 * -EPIPE. -EPIPE when the channel was closed already.
 */
int weft_chan_close(weft_chan_t *ch) {
  if (!ch) return -EINVAL;
  weft__lock_acquire(&ch->lock);
  if (ch->closed) {
    weft__lock_release(&ch->lock);
    return -EPIPE;
  }
  ch->closed = true;
  close_all(&ch->recvq);
  close_all(&ch->sendq);
  weft__lock_release(&ch->lock);
  return 0;
}

/*
 * Contexts: any, once no one uses the channel (buffered elements are
 * dropped). Checking builds abort when someone still waits on it. NULL is
 * ignored.
 */
void weft_chan_free(weft_chan_t *ch) {
  if (!ch) return;
#ifdef WEFT__SYNC_CHECKS
  /* Without taking the lock: a held lock here is a call still in progress (sync.h, "Settling"). */
  if (atomic_load_explicit(&ch->lock.held, memory_order_relaxed) != 0 || ch->sendq.head || ch->recvq.head)
    weft__die("weft_chan_free: %p is still in use", (void *)ch);
#endif
  weft__free(ch);
}
