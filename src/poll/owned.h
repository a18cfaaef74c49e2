/*
 * This file contains the poller's side of owned descriptors (weft_fd in
 * weft.h; the calls are in io/fd.c): a table of slots, one per descriptor
 * handed to weft, each registered once with one carrier's epoll,
 * edge-triggered for both directions, and each keeping what epoll said of
 * it since (Go's pollDesc).
 *
 * Per direction a slot keeps an edge counter and at most one waiter. The
 * carrier whose epoll reports an edge adds one to the counter and wakes the
 * waiter, if any, under the slot's lock. A caller notes the counter before
 * it tries the operation; when the operation says EAGAIN it keeps that value
 * (`empty_at`) and parks only while the counter still has it. No edge can
 * be lost: data that comes after the EAGAIN makes the kernel queue the
 * descriptor again (an edge-triggered item leaves epoll's ready list each
 * time it is reported), so the counter moves after it. And the next call in
 * that direction, seeing the counter still at `empty_at`, parks without
 * trying: in a request-reply exchange the read after a write then costs no
 * system call that only says EAGAIN. The counter is exact in one direction
 * only: an edge may be counted for data that an earlier read already took,
 * which costs one attempt more, never a missed wake-up.
 *
 * Slots are never freed (a carrier may handle an event for a slot that has
 * just been closed on another thread): closed ones go to the back of a free
 * list. A handle is the slot's index and its generation, and every event's
 * epoll data carries the generation too, so neither a stale handle nor a
 * stale event can reach the slot's next descriptor.
 *
 * A fiber's read or write may instead be a receive or a send on its
 * carrier's ring (uring.h); its waiter sits in the direction's `ring`, which
 * only a close wakes (edges say nothing to a request the kernel completes
 * by itself).
 *
 * Closing: a slot counts the calls that use it (refs); weft_fd_close marks
 * it closing, wakes every waiter (the ring receive's too), and the last call to leave (or close
 * itself, when none is inside) removes the registration, closes the
 * descriptor and frees the slot.
 */
#ifndef WEFT_POLL_OWNED_H
#define WEFT_POLL_OWNED_H

#include "../base/internal.h"
#include "../base/lock.h"
#include "../sync/wait.h"
#include "poller.h"

/* A slot's multishot receive (uring.c). */
typedef struct weft__urx weft__urx;

/* One direction of a slot. */
typedef struct weft__odir {
  atomic_uint edges;    /* edges reported by epoll for this direction (any carrier; under lock) */
  atomic_uint empty_at; /* edges when a call last saw EAGAIN (valid when `empty`); the callers' (relaxed) */
  atomic_bool empty;    /* a call saw EAGAIN (or drained a TCP socket) at empty_at: one reader at a time */
  weft__waiter *waiter; /* parked here, or NULL: under lock */
  weft__waiter *ring;   /* a fiber whose receive or send is a ring request (uring.c), or NULL: under lock */
  atomic_uint_fast32_t revents; /* the POLL* bits of the last edge, for weft_fd_poll */
} weft__odir;

/*
 * A read lent to its caller (weft_fd_read_lend, io/fd.c): the bytes lent,
 * and the bytes taken from the descriptor that no call has consumed yet,
 * which every read and lend of the slot takes first: the rest of a ring's
 * buffer still held (uring.h, weft__uring_rx_lend), or bytes in buf (what a
 * lend read there, or the receive's kept bytes, taken by exchanging
 * buffers). Made by the slot's first lend and kept with the slot; its fields
 * are under the slot's lock.
 */
typedef struct weft__lend {
  unsigned char *buf; /* kept bytes: buf[head, head + len); cap bytes (NULL until needed) */
  size_t head, len, cap;
  const unsigned char *ring_at; /* the held ring buffer's bytes not yet consumed: ring_len of them */
  size_t ring_len;
  size_t lent;    /* bytes lent now; 0 none; SIZE_MAX while a lend reads or a ring buffer goes back */
  bool lent_ring; /* the lent bytes are the ring buffer's (ring_at), else buf's (buf + head) */
} weft__lend;

typedef struct weft__oslot {
  weft__lock lock;                  /* guards the waiters (WEFT__LOCK_OBJECT) */
  atomic_uint gen;                  /* generation: bumped when the slot is freed */
  atomic_uint_fast64_t refs;        /* calls inside, plus the CLOSING and FINAL bits */
  int fd;                           /* the descriptor: set before the handle exists, until FINAL */
  bool socket;                      /* a socket: writes use send(MSG_NOSIGNAL) */
  bool tcp;                         /* a TCP socket: a read can drain it (see weft__owned_drained) */
  bool inq;                         /* TCP_INQ is on: a read (recvmsg) says what it left in the queue */
  bool stream;                      /* a stream socket: its ring reads may be a multishot receive (uring.h) */
  weft__urx *_Atomic rx;            /* that receive's state and the bytes it delivered early (uring.c) */
  weft__lend *_Atomic lend;         /* reads lent to the caller (io/fd.c), or NULL before the first */
  atomic_bool rd_odd;               /* an edge said urgent data, end of stream, hang-up or error: sticky */
  atomic_int reg_epfd;              /* the epoll it is registered with, -1 none (or registering: -2) */
  atomic_uint reg_epoch;            /* weft__owned_epoch() when it was registered */
  atomic_bool reg_rd;               /* registered for the read side too (else writes only: uring reads) */
  weft__poller *_Atomic reg_poller; /* the poller of reg_epfd (its carrier harvests the edges) */
  weft__odir rd, wr;
  /* A write that went behind (uring.c): the poller whose ring sends it, or NULL; the epoch it was queued in;
   * its error for the next write (0 none); a writer waiting for it to end. wb is read without the lock as a
   * hint, set and cleared under it; wb_err is taken by an exchange; wb_waiter is under the lock. */
  weft__poller *_Atomic wb;
  unsigned wb_epoch;
  atomic_int wb_err;
  weft__waiter *wb_waiter;
  uint32_t idx;       /* its index in the table (fixed) */
  uint32_t next_free; /* free list link: under the table's lock */
} weft__oslot;

#define WEFT__OREF_CLOSING (1ull << 62)
#define WEFT__OREF_FINAL   (1ull << 63)

/* Allocate a slot for fd (already non-blocking); *id gets the handle. 0 or -ENOMEM. */
int weft__owned_new(int fd, bool socket, bool tcp, bool inq, bool stream, uint64_t *id);

/* The slot at index idx (an event's or a request's tag), or NULL; its generation says whether it is still
 * the tagged descriptor's. */
weft__oslot *weft__owned_at(uint32_t idx);

/* The registrations' epoch (weft__owned_new_epoch): what a ring's request of a slot was armed under. */
unsigned weft__owned_epoch(void);

/*
 * After a read that found the receive queue empty when it ended, with the
 * read direction's edge counter at `seen` before it: may the next read park
 * without trying? Only for TCP, where data that comes later brings an edge
 * after `seen`. The read knows the queue was empty either from the kernel
 * (TCP_INQ: recvmsg's control message counts the bytes left, 0, and counts
 * a received FIN as 1 so that the end of the stream is read) or, without
 * it, because it returned less than it asked for (tcp_recvmsg takes every
 * segment there); a read that filled its buffer knows nothing without
 * TCP_INQ and leaves the next read to try. And only while no edge has
 * reported what stops a TCP read short with data left (urgent data, the end
 * of the stream, a hang-up, an error: rd_odd, set under the slot's lock with
 * the edge that reported it, so before `seen` could include it).
 */
static inline bool weft__owned_drained(weft__oslot *s) { return s->tcp && !atomic_load(&s->rd_odd); }

/*
 * Take a reference for a call on handle id: the slot, or NULL (stale or
 * closing handle: -EBADF). Every successful acquire is paired with one
 * weft__owned_release.
 */
weft__oslot *weft__owned_acquire(uint64_t id);
void weft__owned_release(weft__oslot *s);

/* Mark closing, wake both waiters; the descriptor closes with the last reference. 0 or -EBADF. */
int weft__owned_close(uint64_t id);

/* True once weft_fd_close has been called for the slot's handle. */
static inline bool weft__owned_closing(weft__oslot *s) { return atomic_load(&s->refs) & WEFT__OREF_CLOSING; }

/*
 * Make sure the slot is registered with an epoll that a running carrier
 * waits on: p's, unless it is registered already (with this runtime), and
 * for the read side when `read` (a wait for reading follows) or where reads
 * are not ring receives. 0 or the negative errno of epoll_ctl (the next wait
 * tries again).
 */
int weft__owned_register(weft__oslot *s, weft__poller *p, bool read);

/*
 * Park the caller (a fiber: the waiter's context) until the direction's edge
 * counter moves past `seen`, the deadline, cancellation or close. Returns 0
 * (look again), -ETIMEDOUT, -ECANCELED, -EBADF (closed), -EBUSY (another
 * waiter in this direction).
 */
int weft__owned_wait(weft__oslot *s, bool write, unsigned seen, int64_t deadline_ns);

/*
 * After a wait on w, published at *at under s's lock, ended with state st:
 * take w back unless a waker or a close did, and say what the caller is
 * told: 0 (woken), -EBADF (closed), -ETIMEDOUT or -ECANCELED.
 */
int weft__owned_wait_end(weft__oslot *s, weft__waiter **at, weft__waiter *w, uint32_t st);

/* An edge in direction d, under the slot's lock: count it and wake its waiter. Returns waiters woken. */
int weft__owned_edge(weft__odir *d);

/* The poller's side: an epoll event whose data is `tag` (owned kind). Returns waiters woken. */
int weft__owned_event(uint64_t tag, uint32_t events);

/*
 * Registrations belong to the runtime's pollers: when those close (shutdown)
 * or are not the process's own (a forked child), the epoch moves on and the
 * next wait registers again.
 */
void weft__owned_new_epoch(void);

/* The epoll data of a slot's registration (poll_epoll.c's tag format). */
#define WEFT__TAG_OWNED 4u

#endif /* WEFT_POLL_OWNED_H */
