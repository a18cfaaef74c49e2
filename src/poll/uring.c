/*
 * This file contains the io_uring path of a fiber's I/O (see uring.h),
 * built on liburing.
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
 * fiber whose wait ends otherwise (its future was cancelled) asks the
 * kernel to cancel the request and parks again until the completion has
 * arrived (`reaping`). Deadlines are linked timeouts (IORING_OP_LINK_TIMEOUT,
 * absolute on CLOCK_MONOTONIC): the kernel cancels the request at the
 * deadline and the completion says so; no weft timer is involved.
 *
 * The ring has a completion queue of CQ_ENTRIES (the kernel keeps overflow,
 * NODROP, 5.5). It is not set up with COOP_TASKRUN: that leaves completions
 * as task work until the carrier enters the kernel, and a carrier asleep in
 * epoll_wait would not be woken to post them.
 */
#include "uring.h"

#include <liburing.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "../base/clock.h"
#include "../base/sys.h"

#ifdef WEFT_HAVE_VALGRIND_H
#include <valgrind/memcheck.h>
#define MAKE_DEFINED(p, n) VALGRIND_MAKE_MEM_DEFINED((p), (n))
#else
#define MAKE_DEFINED(p, n) ((void)(p), (void)(n))
#endif

#define SQ_ENTRIES 256
#define CQ_ENTRIES 4096
/* Queued requests that make the carrier submit even while it has fibers to run. */
#define BATCH 32
/* user_data of requests whose completion nobody waits for (linked timeouts, cancels). */
#define TAG_NONE 1u

typedef struct ring {
  struct io_uring ring;
  int evfd;         /* completions signal it; it sits in the carrier's epoll */
  size_t in_flight; /* requests submitted or queued whose completion has not been reaped */
} ring;

typedef struct uop {
  weft__waiter w;              /* the fiber waits here for the completion */
  weft__waiter back;           /* after a cancelled wait: the fiber waits here for the kernel to let go */
  int32_t res;                 /* the completion's result */
  bool done;                   /* the completion was reaped */
  bool reaping;                /* the fiber's wait ended otherwise; it waits on back until done */
  struct __kernel_timespec ts; /* the deadline of the linked timeout: read by the kernel at submission */
} uop;

/* -1 unknown, 0 refused by the kernel (for the whole process), 1 a ring was set up. */
static atomic_int usable = -1;

bool weft__uring_in_use(void) { return atomic_load_explicit(&usable, memory_order_relaxed) == 1; }

/* io_uring_submit calls, for weft_get_stats: a relaxed add on a line that only submissions write. */
static atomic_uint_fast64_t submissions;
uint64_t weft__uring_submissions(void) { return atomic_load_explicit(&submissions, memory_order_relaxed); }

static void submit(ring *r) {
  atomic_fetch_add_explicit(&submissions, 1, memory_order_relaxed);
  io_uring_submit(&r->ring);
}

static int ring_setup(ring *r) {
  struct io_uring_params params;
  static const unsigned tries[] = {IORING_SETUP_CQSIZE, 0};
  int rc = -EINVAL;
  for (size_t i = 0; i < sizeof tries / sizeof tries[0] && rc == -EINVAL; i++) {
    memset(&params, 0, sizeof params);
    params.flags = tries[i];
    params.cq_entries = CQ_ENTRIES;
    rc = weft__fault(WEFT__F_URING) ? -ENOMEM : io_uring_queue_init_params(SQ_ENTRIES, &r->ring, &params);
  }
  /* Reads "at the current position" (offset -1) need IORING_FEAT_RW_CUR_POS (Linux 5.6). */
  if (rc == 0 && !(params.features & IORING_FEAT_RW_CUR_POS)) {
    io_uring_queue_exit(&r->ring);
    rc = -ENOSYS;
  }
  return rc;
}

static ring *ring_get(weft__poller *p) {
  if (p->uring) return p->uring;
  /* Switched off for this run of the runtime (WEFT_IO_URING=0, weft_configure). */
  if (!p->uring_allowed) return NULL;
  if (atomic_load_explicit(&usable, memory_order_relaxed) == 0) return NULL;
  ring *r = weft__calloc(1, sizeof *r);
  if (!r) return NULL;
  int rc = ring_setup(r);
  if (rc < 0) {
    weft__free(r);
    /* A refusal by the kernel holds for the process; a fault or no memory may pass. */
    if (rc == -ENOSYS || rc == -EPERM || rc == -EINVAL) atomic_store(&usable, 0);
    return NULL;
  }
  r->evfd = weft__eventfd();
  struct epoll_event e = {.events = EPOLLIN, .data.u64 = ((uint64_t)3 << 56)};
  if (r->evfd < 0 || io_uring_register_eventfd(&r->ring, r->evfd) != 0 ||
      weft__epoll_ctl(p->epfd, EPOLL_CTL_ADD, r->evfd, &e) != 0) {
    if (r->evfd >= 0) close(r->evfd);
    io_uring_queue_exit(&r->ring);
    weft__free(r);
    return NULL;
  }
  atomic_store(&usable, 1);
  p->uring = r;
  return r;
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

static void prep(struct io_uring_sqe *sqe, const weft__uring_req *q) {
  /* One transfer, like read(2): a length beyond 4 GiB gives a short count. */
  unsigned len = q->len > UINT32_MAX ? UINT32_MAX : (unsigned)q->len;
  if (q->write)
    io_uring_prep_write(sqe, q->fd, q->buf, len, (uint64_t)-1);
  else
    io_uring_prep_read(sqe, q->fd, q->buf, len, (uint64_t)-1);
}

int64_t weft__uring_run(weft__poller *p, const weft__uring_req *q, int64_t deadline_ns) {
  ring *r = ring_get(p);
  if (!r) return -ENOSYS;
  uop op;
  memset(&op, 0, sizeof op);
  weft__waiter_init(&op.w, true);
  weft__waiter_on(&op.w, WEFT__WAIT_FILE, NULL);
  /* Two SQEs when there is a deadline: make sure both fit before taking either. */
  if (io_uring_sq_space_left(&r->ring) < 2) submit(r);
  struct io_uring_sqe *sqe = sqe_get(r);
  if (!sqe) return -ENOSYS;
  prep(sqe, q);
  io_uring_sqe_set_data(sqe, &op);
  if (deadline_ns > 0) {
    op.ts.tv_sec = deadline_ns / 1000000000;
    op.ts.tv_nsec = deadline_ns % 1000000000;
    sqe->flags |= IOSQE_IO_LINK;
    struct io_uring_sqe *t = sqe_get(r);
    io_uring_prep_link_timeout(t, &op.ts, IORING_TIMEOUT_ABS);
    io_uring_sqe_set_data64(t, TAG_NONE);
  }
  r->in_flight++;
  /* The deadline is the kernel's; only the completion or a cancellation ends this wait. */
  uint32_t st = weft__waiter_wait(&op.w, -1);
  if (!op.done) {
    /* Cancelled while in flight: take the request back, and wait until the kernel lets go of it. */
    struct io_uring_sqe *c = sqe_get(r);
    if (c) {
      io_uring_prep_cancel(c, &op, 0);
      io_uring_sqe_set_data64(c, TAG_NONE);
    }
    weft__waiter_init(&op.back, false);
    weft__waiter_on(&op.back, WEFT__WAIT_FILE, NULL);
    op.reaping = true;
    weft__waiter_wait(&op.back, -1);
  }
  /* The kernel wrote the buffer behind Valgrind's back. */
  if (!q->write && op.res > 0) MAKE_DEFINED(q->buf, (size_t)op.res);
  if (op.res >= 0) return op.res; /* done before the cancellation took: the result stands */
  if (op.res == -ECANCELED) {
    if (st == WEFT__W_CANCELLED) return -ECANCELED;
    if (deadline_ns > 0 && weft__mono_ns() >= deadline_ns) return -ETIMEDOUT;
  }
  return op.res;
}

void weft__uring_flush(weft__poller *p, bool idle) {
  ring *r = p->uring;
  if (!r) return;
  unsigned queued = io_uring_sq_ready(&r->ring);
  if (queued && (idle || queued >= BATCH)) submit(r);
}

bool weft__uring_busy(const weft__poller *p) {
  const ring *r = p->uring;
  return r && r->in_flight > 0;
}

int weft__uring_reap(weft__poller *p) {
  ring *r = p->uring;
  if (!r || !r->in_flight) return 0;
  /* Completions that overflowed the queue wait in the kernel until we ask. */
  if (IO_URING_READ_ONCE(*r->ring.sq.kflags) & IORING_SQ_CQ_OVERFLOW) io_uring_get_events(&r->ring);
  int woken = 0;
  struct io_uring_cqe *cqe;
  while (io_uring_peek_cqe(&r->ring, &cqe) == 0) {
    uint64_t tag = io_uring_cqe_get_data64(cqe);
    int32_t res = cqe->res;
    io_uring_cqe_seen(&r->ring, cqe);
    if (tag == TAG_NONE) continue;
    uop *op = (uop *)(uintptr_t)tag;
    op->res = res;
    op->done = true;
    r->in_flight--;
    woken += weft__waiter_wake(op->reaping ? &op->back : &op->w);
  }
  return woken;
}

void weft__uring_fini(weft__poller *p) {
  ring *r = p->uring;
  if (!r) return;
  io_uring_queue_exit(&r->ring);
  close(r->evfd);
  weft__free(r);
  p->uring = NULL;
}
