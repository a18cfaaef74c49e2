/*
 * This file contains a carrier's io_uring (see uring.h), built on liburing.
 *
 * A request's record (struct uop) lives on the waiting fiber's stack, and
 * its address is the request's user_data. Protocol, all on the carrier's
 * thread (the fiber when it runs, the scheduler when it reaps):
 *
 *   fiber                                  carrier
 *   prepares the SQE (+ a linked timeout)
 *   parks on uop.w ------------------->    submits the batch
 *                                          reaps the CQE: res, done,
 *   <----------------------------------    resolves uop.w (or readies the
 *                                          fiber if it waits for `done`)
 *
 * The kernel owns the caller's buffer until the request's completion, so a
 * fiber whose wait ends otherwise (its future was cancelled, its owned
 * descriptor closed) asks the kernel to cancel the request and parks again
 * until the completion has arrived (`reaping`). Deadlines are linked
 * timeouts (IORING_OP_LINK_TIMEOUT, absolute on CLOCK_MONOTONIC): the kernel
 * cancels the request at the deadline and the completion says so; no weft
 * timer is involved.
 *
 * The wait point. Two multishot polls stay armed on the ring: one on the
 * carrier's epoll instance (whose descriptor waits and owned registrations
 * are unchanged: a completion of that poll makes the carrier collect the
 * epoll's events without waiting, weft__poller_harvest) and one on its
 * wake-up eventfd, which leaves the epoll set when the ring takes over. The
 * eventfd is never read: a multishot poll completes on every write, and
 * wakers write once per sleep (poller.h), so its counter cannot reach its
 * limit. With DEFER_TASKRUN the kernel runs the ring's completion work only
 * inside the carrier's own io_uring_enter, which is why the carrier must
 * wait there and nowhere else once it has a ring, and why an idle flush
 * asks for events as well as submitting.
 *
 * The ring has a completion queue of CQ_ENTRIES (the kernel keeps overflow,
 * NODROP, 5.5).
 */
#include "uring.h"

#include <liburing.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "../base/clock.h"
#include "../base/process.h"
#include "../base/sys.h"

#ifdef WEFT_HAVE_VALGRIND_H
#include <valgrind/memcheck.h>
#define MAKE_DEFINED(p, n) VALGRIND_MAKE_MEM_DEFINED((p), (n))
#define ON_VALGRIND()      (RUNNING_ON_VALGRIND != 0)
#else
#define MAKE_DEFINED(p, n) ((void)(p), (void)(n))
#define ON_VALGRIND()      false
#endif

#define SQ_ENTRIES 256
#define CQ_ENTRIES 4096
/* Queued requests that make the carrier submit even while it has fibers to run. */
#define BATCH 32
/* user_data of the ring's own requests (a uop's address is aligned, so never one of these). */
#define TAG_NONE  1u /* linked timeouts, cancels: nobody waits for their completion */
#define TAG_EPOLL 2u /* the multishot poll on the carrier's epoll instance */
#define TAG_WAKE  3u /* the multishot poll on its wake-up eventfd */

typedef struct ring {
  struct io_uring ring;
  size_t in_flight; /* fibers' requests submitted or queued whose completion has not been reaped */
  bool epoll_armed; /* the poll on the epoll instance is in place (or queued) */
  bool wake_armed;  /* the poll on the wake-up eventfd */
  unsigned setup;   /* the setup flags the kernel accepted */
} ring;

typedef struct uop {
  weft__waiter w;    /* the fiber waits here for the completion */
  weft__waiter back; /* after a wait ended otherwise: the fiber waits here for the kernel to let go */
  int32_t res;       /* the completion's result */
  bool done;         /* the completion was reaped */
  bool reaping;      /* the fiber's wait ended otherwise; it waits on back until done */
  struct __kernel_timespec ts; /* the deadline of the linked timeout: read by the kernel at submission */
} uop;

/* -1 unknown, 0 refused by the kernel (for the whole process), 1 a ring was set up. */
static atomic_int usable = -1;

bool weft__uring_in_use(void) { return atomic_load_explicit(&usable, memory_order_relaxed) == 1; }

/* For weft_get_stats: relaxed adds on lines that only these paths write. */
static atomic_uint_fast64_t submissions, ring_waits, recvs, sends;
uint64_t weft__uring_submissions(void) { return atomic_load_explicit(&submissions, memory_order_relaxed); }
uint64_t weft__uring_ring_waits(void) { return atomic_load_explicit(&ring_waits, memory_order_relaxed); }
uint64_t weft__uring_recvs(void) { return atomic_load_explicit(&recvs, memory_order_relaxed); }
uint64_t weft__uring_sends(void) { return atomic_load_explicit(&sends, memory_order_relaxed); }

static void count_submit(ring *r) {
  if (io_uring_sq_ready(&r->ring)) atomic_fetch_add_explicit(&submissions, 1, memory_order_relaxed);
}

static void submit(ring *r) {
  count_submit(r);
  io_uring_submit(&r->ring);
}

/*
 * The setups tried, best first. COOP_TASKRUN at least (5.19): without it the
 * kernel interrupts the carrier to post completions, and a ring that is not
 * the carrier's wait point is not worth having.
 */
static const unsigned setups[] = {
    IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
    IORING_SETUP_COOP_TASKRUN,
};

static int ring_setup(ring *r) {
  struct io_uring_params params;
  int rc = -EINVAL;
  for (size_t i = 0; i < sizeof setups / sizeof setups[0] && rc == -EINVAL; i++) {
    memset(&params, 0, sizeof params);
    params.flags = setups[i] | IORING_SETUP_CQSIZE | IORING_SETUP_SUBMIT_ALL;
    params.cq_entries = CQ_ENTRIES;
    rc = weft__fault(WEFT__F_URING) ? -ENOMEM : io_uring_queue_init_params(SQ_ENTRIES, &r->ring, &params);
  }
  /* Reads "at the current position" (offset -1) need IORING_FEAT_RW_CUR_POS (5.6), timed waits EXT_ARG. */
  if (rc == 0 && (!(params.features & IORING_FEAT_RW_CUR_POS) || !(params.features & IORING_FEAT_EXT_ARG))) {
    io_uring_queue_exit(&r->ring);
    rc = -ENOSYS;
  }
  return rc;
}

/* A free SQE, submitting what is queued if the queue is full. */
static struct io_uring_sqe *sqe_get(ring *r) {
  struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
  if (!sqe) {
    submit(r);
    sqe = io_uring_get_sqe(&r->ring);
  }
  return sqe;
}

/* Queue the polls that make the ring the wait point, where one has ended (its completion lacked F_MORE). */
static void arm_polls(weft__poller *p, ring *r) {
  if (!r->epoll_armed) {
    struct io_uring_sqe *sqe = sqe_get(r);
    if (sqe) {
      io_uring_prep_poll_multishot(sqe, p->epfd, POLLIN);
      io_uring_sqe_set_data64(sqe, TAG_EPOLL);
      r->epoll_armed = true;
    }
  }
  if (!r->wake_armed) {
    struct io_uring_sqe *sqe = sqe_get(r);
    if (sqe) {
      io_uring_prep_poll_multishot(sqe, p->wakefd, POLLIN);
      io_uring_sqe_set_data64(sqe, TAG_WAKE);
      r->wake_armed = true;
    }
  }
}

/*
 * Rings are set up and torn down under one lock. liburing maps and unmaps a
 * ring with raw system calls, so ThreadSanitizer never sees a ring's memory
 * freed: a ring torn down on one carrier and the next one mapped at the same
 * address on another would look like a race on the SQEs. The lock orders the
 * teardown before the next setup (once per carrier: off every hot path).
 */
static pthread_mutex_t setup_mu = PTHREAD_MUTEX_INITIALIZER;

/* A fork while a carrier sets up its ring must not leave the child's copy of the lock held. */
static void fork_prepare(void) { pthread_mutex_lock(&setup_mu); }
static void fork_parent(void) { pthread_mutex_unlock(&setup_mu); }
static void fork_child(void) { pthread_mutex_init(&setup_mu, NULL); }
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static void fork_register(void) { weft__on_fork(fork_prepare, fork_parent, fork_child); }

static int attach_locked(weft__poller *p);

int weft__uring_attach(weft__poller *p) {
  if (p->uring) return 0;
  pthread_once(&fork_once, fork_register);
  pthread_mutex_lock(&setup_mu);
  int rc = attach_locked(p);
  pthread_mutex_unlock(&setup_mu);
  return rc;
}

static int attach_locked(weft__poller *p) {
  /* Switched off for this run of the runtime (WEFT_IO_URING=0, weft_configure). */
  if (!p->uring_mode) return -ENOSYS;
  if (atomic_load_explicit(&usable, memory_order_relaxed) == 0) return -ENOSYS;
  /*
   * Valgrind (3.19) keeps its one lock while a thread is in io_uring_enter,
   * so a carrier waiting in its ring stops every other thread: under it the
   * carriers wait in epoll (ASan and TSan see the ring paths).
   */
  if (ON_VALGRIND()) {
    atomic_store(&usable, 0);
    return -ENOSYS;
  }
  ring *r = weft__calloc(1, sizeof *r);
  if (!r) return -ENOMEM;
  int rc = ring_setup(r);
  if (rc < 0) {
    weft__free(r);
    /* A refusal by the kernel holds for the process; a fault or no memory may pass. */
    if (rc == -ENOSYS || rc == -EPERM || rc == -EINVAL) atomic_store(&usable, 0);
    return rc;
  }
  /* Both polls in the kernel before the eventfd leaves epoll: no wake-up can fall between the two. */
  arm_polls(p, r);
  count_submit(r);
  rc = io_uring_submit(&r->ring);
  if (rc == 2)
    rc = weft__epoll_ctl(p->epfd, EPOLL_CTL_DEL, p->wakefd, NULL);
  else if (rc >= 0)
    rc = -ENOMEM;
  if (rc < 0) {
    io_uring_queue_exit(&r->ring);
    weft__free(r);
    return rc;
  }
  atomic_store(&usable, 1);
  p->uring = r;
  return 0;
}

/* The ring of the calling fiber's carrier, set up now if the carrier started without one. */
static ring *ring_get(weft__poller *p) {
  if (!p->uring) (void)weft__uring_attach(p);
  return p->uring;
}

/* Room in the submission queue for a request and, when deadline_ns > 0, its linked timeout. */
static bool op_room(ring *r, int64_t deadline_ns) {
  unsigned need = deadline_ns > 0 ? 2 : 1;
  if (io_uring_sq_space_left(&r->ring) < need) submit(r);
  return io_uring_sq_space_left(&r->ring) >= need;
}

/* After the caller prepared sqe: link the deadline to it, count the request in flight. */
static void op_queued(ring *r, uop *op, struct io_uring_sqe *sqe, int64_t deadline_ns) {
  if (deadline_ns > 0) {
    op->ts.tv_sec = deadline_ns / 1000000000;
    op->ts.tv_nsec = deadline_ns % 1000000000;
    sqe->flags |= IOSQE_IO_LINK;
    struct io_uring_sqe *t = io_uring_get_sqe(&r->ring); /* room checked by op_room */
    io_uring_prep_link_timeout(t, &op->ts, IORING_TIMEOUT_ABS);
    io_uring_sqe_set_data64(t, TAG_NONE);
  }
  r->in_flight++;
}

/*
 * Park until op's completion. The deadline is the kernel's; the wait ends
 * otherwise only by a cancellation or a wake by someone else (a close):
 * then the request is taken back, and the fiber waits until the kernel has
 * let go of it. Returns the wait's status (WEFT__W_*).
 */
static uint32_t op_wait(ring *r, uop *op) {
  uint32_t st = weft__waiter_wait(&op->w, -1);
  if (!op->done) {
    struct io_uring_sqe *c = sqe_get(r);
    if (c) {
      io_uring_prep_cancel(c, op, 0);
      io_uring_sqe_set_data64(c, TAG_NONE);
    }
    weft__waiter_init(&op->back, false);
    weft__waiter_on(&op->back, op->w.kind, op->w.obj);
    op->reaping = true;
    weft__waiter_wait(&op->back, -1);
  }
  return st;
}

/* A result cut short by the kernel's cancellation: what the caller is told. */
static int64_t op_result(const uop *op, uint32_t st, int64_t deadline_ns) {
  if (op->res >= 0) return op->res; /* done before the cancellation took: the result stands */
  if (op->res == -ECANCELED) {
    if (st == WEFT__W_CANCELLED) return -ECANCELED;
    if (deadline_ns > 0 && weft__mono_ns() >= deadline_ns) return -ETIMEDOUT;
  }
  return op->res;
}

static void op_init(uop *op, unsigned kind, const void *obj) {
  memset(op, 0, sizeof *op);
  weft__waiter_init(&op->w, true);
  weft__waiter_on(&op->w, kind, obj);
}

int64_t weft__uring_run(weft__poller *p, const weft__uring_req *q, int64_t deadline_ns) {
  ring *r = ring_get(p);
  if (!r) return -ENOSYS;
  uop op;
  op_init(&op, WEFT__WAIT_FILE, NULL);
  if (!op_room(r, deadline_ns)) return -ENOSYS;
  struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
  /* One transfer, like read(2): a length beyond 4 GiB gives a short count. */
  unsigned len = q->len > UINT32_MAX ? UINT32_MAX : (unsigned)q->len;
  if (q->write)
    io_uring_prep_write(sqe, q->fd, q->buf, len, (uint64_t)-1);
  else
    io_uring_prep_read(sqe, q->fd, q->buf, len, (uint64_t)-1);
  io_uring_sqe_set_data(sqe, &op);
  op_queued(r, &op, sqe, deadline_ns);
  uint32_t st = op_wait(r, &op);
  /* The kernel wrote the buffer behind Valgrind's back. */
  if (!q->write && op.res > 0) MAKE_DEFINED(q->buf, (size_t)op.res);
  return op_result(&op, st, deadline_ns);
}

int64_t weft__uring_recv(weft__poller *p, weft__oslot *s, const struct iovec *iov, int iovcnt,
                         int64_t deadline_ns) {
  if (!weft__uring_reads(p) || weft__fault(WEFT__F_URING)) return -ENOSYS;
  ring *r = p->uring;
  uop op;
  op_init(&op, WEFT__WAIT_READ, (const void *)(intptr_t)s->fd);
  if (!op_room(r, deadline_ns)) return -ENOSYS;
  /* Closing wakes the receive's waiter (owned.c); a second fiber's receive reads the ordinary way. */
  weft__lock_acquire(&s->lock);
  bool closing = weft__owned_closing(s), taken = s->rd.ring != NULL;
  if (!closing && !taken) s->rd.ring = &op.w;
  weft__lock_release(&s->lock);
  if (closing) return -EBADF;
  if (taken) return -ENOSYS;
  struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring); /* room checked: only this thread fills the queue */
  if (iovcnt == 1) {
    io_uring_prep_recv(sqe, s->fd, iov[0].iov_base, iov[0].iov_len > UINT32_MAX ? UINT32_MAX : iov[0].iov_len,
                       0);
  } else
    io_uring_prep_readv(sqe, s->fd, iov, (unsigned)iovcnt, 0);
  io_uring_sqe_set_data(sqe, &op);
  op_queued(r, &op, sqe, deadline_ns);
  atomic_fetch_add_explicit(&recvs, 1, memory_order_relaxed);
  uint32_t st = op_wait(r, &op);
  weft__lock_acquire(&s->lock);
  if (s->rd.ring == &op.w) s->rd.ring = NULL; /* else a close took it */
  weft__lock_release(&s->lock);
  if (op.res > 0) {
    /* The kernel wrote the buffers behind Valgrind's back. */
    size_t left = (size_t)op.res;
    for (int i = 0; i < iovcnt && left; i++) {
      size_t n = iov[i].iov_len < left ? iov[i].iov_len : left;
      MAKE_DEFINED(iov[i].iov_base, n);
      left -= n;
    }
  }
  if (weft__owned_closing(s) && !op.done) return -EBADF;
  if (weft__owned_closing(s) && op.res == -ECANCELED) return -EBADF;
  return op_result(&op, st, deadline_ns);
}

int64_t weft__uring_send(weft__poller *p, weft__oslot *s, const struct iovec *iov, int iovcnt,
                         int64_t deadline_ns) {
  if (!weft__uring_reads(p) || weft__fault(WEFT__F_URING)) return -ENOSYS;
  ring *r = p->uring;
  uop op;
  op_init(&op, WEFT__WAIT_WRITE, (const void *)(intptr_t)s->fd);
  if (!op_room(r, deadline_ns)) return -ENOSYS;
  /* As a receive: closing wakes the send's waiter; a second fiber's send writes the ordinary way. */
  weft__lock_acquire(&s->lock);
  bool closing = weft__owned_closing(s), taken = s->wr.ring != NULL;
  if (!closing && !taken) s->wr.ring = &op.w;
  weft__lock_release(&s->lock);
  if (closing) return -EBADF;
  if (taken) return -ENOSYS;
  struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring); /* room checked: only this thread fills the queue */
  struct msghdr m = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt};
  if (iovcnt == 1)
    io_uring_prep_send(sqe, s->fd, iov[0].iov_base, iov[0].iov_len > UINT32_MAX ? UINT32_MAX : iov[0].iov_len,
                       MSG_NOSIGNAL);
  else
    io_uring_prep_sendmsg(sqe, s->fd, &m, MSG_NOSIGNAL); /* m is read at submission, on this stack */
  io_uring_sqe_set_data(sqe, &op);
  op_queued(r, &op, sqe, deadline_ns);
  atomic_fetch_add_explicit(&sends, 1, memory_order_relaxed);
  uint32_t st = op_wait(r, &op);
  weft__lock_acquire(&s->lock);
  if (s->wr.ring == &op.w) s->wr.ring = NULL; /* else a close took it */
  weft__lock_release(&s->lock);
  if (weft__owned_closing(s) && !op.done) return -EBADF;
  if (weft__owned_closing(s) && op.res == -ECANCELED) return -EBADF;
  return op_result(&op, st, deadline_ns);
}

void weft__uring_flush(weft__poller *p, bool idle) {
  ring *r = p->uring;
  if (!r) return;
  unsigned queued = io_uring_sq_ready(&r->ring);
  if (idle && (queued || r->in_flight)) {
    /* Submit, and post what the kernel keeps for our own enter (DEFER_TASKRUN). */
    count_submit(r);
    io_uring_submit_and_get_events(&r->ring);
  } else if (queued >= BATCH) {
    submit(r);
  }
}

bool weft__uring_busy(const weft__poller *p) {
  const ring *r = p->uring;
  return r && r->in_flight > 0;
}

int weft__uring_reap(weft__poller *p) {
  ring *r = p->uring;
  if (!r) return 0;
  /* Completions that overflowed the queue wait in the kernel until we ask. */
  if (IO_URING_READ_ONCE(*r->ring.sq.kflags) & IORING_SQ_CQ_OVERFLOW) io_uring_get_events(&r->ring);
  int woken = 0;
  bool harvest = false;
  struct io_uring_cqe *cqe;
  while (io_uring_peek_cqe(&r->ring, &cqe) == 0) {
    uint64_t tag = io_uring_cqe_get_data64(cqe);
    int32_t res = cqe->res;
    bool more = cqe->flags & IORING_CQE_F_MORE;
    io_uring_cqe_seen(&r->ring, cqe);
    if (tag == TAG_NONE) continue;
    if (tag == TAG_EPOLL) {
      if (!more) r->epoll_armed = false; /* armed again before the next wait */
      harvest |= res > 0;
      continue;
    }
    if (tag == TAG_WAKE) {
      if (!more) r->wake_armed = false;
      continue; /* the wait is over: that is all a wake-up asks */
    }
    uop *op = (uop *)(uintptr_t)tag;
    op->res = res;
    op->done = true;
    r->in_flight--;
    woken += weft__waiter_wake(op->reaping ? &op->back : &op->w);
  }
  /* The epoll instance has events: collect them without waiting (and before the poll is armed again). */
  if (harvest || !r->epoll_armed) woken += weft__poller_harvest(p);
  return woken;
}

int weft__uring_wait(weft__poller *p, int64_t deadline_ns) {
  ring *r = p->uring;
  arm_polls(p, r);
  count_submit(r);
  atomic_fetch_add_explicit(&ring_waits, 1, memory_order_relaxed);
  int64_t left = deadline_ns;
  if (deadline_ns > 0) {
    left = deadline_ns - weft__mono_ns();
    if (left <= 0) left = 0;
  }
  if (left == 0) {
    io_uring_submit_and_get_events(&r->ring);
  } else {
    struct io_uring_cqe *cqe;
    struct __kernel_timespec ts = {left / 1000000000, left % 1000000000};
    /* -ETIME at the deadline, -EINTR on a signal: either way the wait is over. */
    (void)io_uring_submit_and_wait_timeout(&r->ring, &cqe, 1, left < 0 ? NULL : &ts, NULL);
  }
  atomic_store_explicit(&p->sleeping, 0, memory_order_relaxed);
  return weft__uring_reap(p);
}

void weft__uring_fini(weft__poller *p) {
  ring *r = p->uring;
  if (!r) return;
  pthread_mutex_lock(&setup_mu);
  io_uring_queue_exit(&r->ring);
  pthread_mutex_unlock(&setup_mu);
  weft__free(r);
  p->uring = NULL;
}
