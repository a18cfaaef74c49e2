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
 *
 * Multishot receives (WEFT_IO_URING=2). A stream socket's reads are one
 * request for the socket's life, armed on the ring of the carrier whose
 * fiber read it first, with IOSQE_BUFFER_SELECT from the ring's provided
 * buffers (NBUFS of BUFSZ, a buffer ring registered at setup). Each
 * completion carries a buffer; the carrier, under the slot's lock, copies
 * its bytes into the vectors of the reader waiting (rx_reader, registered in
 * the slot like a ring receive's waiter; a reader already woken and not yet
 * run is still filled) or keeps them in the slot (struct weft__urx), wakes
 * the reader, and gives the buffer back at the end of the reap. A reader may
 * run on any carrier, or be a thread: the bytes come to it, so it does not
 * stay on the ring's carrier. The request ends (a completion without F_MORE)
 * at the end of the stream, on an error, when the buffers ran out (ENOBUFS:
 * the next read arms it again), or when we cancel it: more than RX_MAX kept,
 * a close, or the carrier leaving.
 *
 * Lends (weft_fd_read_lend, io/fd.c). A reader that borrows, waiting on the
 * ring's own thread when the bytes come, is lent the completion's buffer
 * itself: the carrier leaves it out of the ring (r->lent counts it), the
 * slot records it (x->lent), and weft_fd_read_done gives it back, at once on
 * the owner's thread, else (a fiber that moved) through the owner's queue of
 * requests (`gives`). What comes after it is kept in the slot as before, and
 * a lend takes kept bytes by exchanging the slot's buffer with the lend's,
 * so a response larger than a buffer is copied once, by the carrier, and
 * never into the reader's own memory. A ring that goes while one of its
 * buffers is lent leaves its buffers mapped.
 *
 * Writes behind (WEFT_WRITE_BEHIND, uring.h). A fiber's small write of a
 * TCP socket is copied into a wbuf and queued as a send with MSG_WAITALL
 * (every byte or an error), tagged TAG_WB | the wbuf's address, and the
 * write returns. The slot records the poller whose ring has it (s->wb):
 * the next write of the socket waits on s->wb_waiter until the carrier
 * reaps the send, which clears s->wb, leaves an error in s->wb_err for that
 * write, and frees the wbuf (a send of a slot closed since concerns
 * nobody). Until the ring submits it the send names the descriptor by
 * number, so a close must not come first: on the owner's thread the close
 * submits; from another thread the owner takes the close over (an rx_cancel
 * that `closes`, run right after the submission in cancels_take), because
 * the owner may be a carrier whose fiber waits for the closing thread.
 *
 * Only the ring's owner may submit (SINGLE_ISSUER; io_uring_register's sync
 * cancel refuses other threads too), yet a close may come from anywhere and
 * must not return while the request still takes bytes (a dup of the socket
 * would lose what comes next). So weft__uring_rx_final queues an rx_cancel
 * on the owner's poller and wakes it as new work is woken; the owner takes
 * the queue when it reaps and when it is about to wait (after announcing
 * its sleep: the requester's store and the owner's look are both
 * sequentially consistent, so one of them sees the other), submits the
 * cancels, and wakes each requester when its cancel completes. On the
 * owner's own thread the cancel is submitted and reaped in place. A carrier
 * that leaves cancels every request of its ring, reaps until its receives
 * have ended (their bytes kept in their slots), and closes its queue.
 */
#include "uring.h"

#include <liburing.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
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
/* A slot's multishot receive: TAG_RX | the slot's generation (24 bits) << 32 | its index. */
#define TAG_RX (1ull << 63)
/* The cancel of one (TAG_CANCEL | the address of its rx_cancel). */
#define TAG_CANCEL   (1ull << 62)
#define TAG_GEN_MASK 0xffffffu
/* A write that went behind (TAG_WB | the address of its wbuf). */
#define TAG_WB (1ull << 61)
/*
 * Provided buffers of a ring, for the multishot receives: NBUFS of BUFSZ
 * bytes, group BGID. A completion carries at most one buffer, so BUFSZ
 * sets how many completions (each a reap step, a slot lock, an edge and a
 * wake-up) a larger message costs: at 2 KiB a 9 KiB HTTP response took
 * five, and weft's own CPU a request was about twice what one takes
 * (docs/benchmarks.md, section 19). The pages are touched only as far as
 * bytes land in them: a 64-byte message uses one line of its buffer.
 */
#define NBUFS 1024u
#define BUFSZ 16384u
#define BGID  0
/*
 * Buffers a ring lends at most (weft__uring_rx_lend). A buffer stays lent
 * until its reader runs, and thousands of readers may be woken before the
 * first of them runs: lending every buffer would empty the ring (its
 * receives then end with ENOBUFS, measured: 1.5 million of them in an echo
 * of 9,000 connections). Beyond this the bytes are kept as for any reader.
 */
#define LEND_MAX (NBUFS / 4)
/* Bytes a slot keeps for its next read before its receive is ended (and armed again by a read). */
#define RX_MAX (256u * 1024u)

typedef struct ring {
  struct io_uring ring;
  size_t in_flight; /* fibers' requests submitted or queued whose completion has not been reaped */
  bool epoll_armed; /* the poll on the epoll instance is in place (or queued) */
  bool wake_armed;  /* the poll on the wake-up eventfd */
  unsigned setup;   /* the setup flags the kernel accepted */
  /* Multishot receives (WEFT_IO_URING=2, where the kernel has provided-buffer rings: 5.19, and 6.0's
   * multishot receive, found out by the first one armed). */
  struct io_uring_buf_ring *br; /* the provided buffers' ring, or NULL: no multishot receives here */
  unsigned char *bufs;          /* NBUFS buffers of BUFSZ */
  int returned;                 /* buffers given back in this reap, made visible at its end */
  size_t rx_armed;              /* multishot receives armed here whose last completion has not come */
  size_t lent;                  /* buffers lent to readers (weft__uring_rx_lend), not yet given back */
  size_t wb_armed;              /* writes behind queued or in flight here */
  bool quiescing;               /* the carrier is leaving (weft__uring_quiesce): its epoll is not looked at */
  bool rx_off;                  /* the kernel refused a multishot receive: none is armed here again */
  /* The deadlines of linked timeouts, by the index of their SQE: the kernel reads one when it takes
   * the SQE (at submission), so it lives exactly as long as its SQE, in memory the carrier keeps hot.
   * In the waiting fiber's record, 9000 connections' worth of cold stack pages made the kernel's copy
   * of it 3% of the process's CPU. */
  struct __kernel_timespec ts[SQ_ENTRIES];
} ring;

/* A request to the ring's owner from another thread: end a multishot receive (weft__uring_rx_final: the
 * owner cancels it), or for a write behind (weft__uring_wb_final) a flush (tag 0: a no-op behind the send)
 * or a close of the descriptor after the owner's next submission (`closes`, on the heap). */
typedef struct rx_cancel {
  weft__waiter w; /* the requester waits here (when `waits`) */
  uint64_t tag;   /* the receive's user_data (0: a flush, weft__uring_wb_final) */
  bool waits;     /* another thread: it waits on w, else it looks at `done` */
  bool done;      /* the cancel completed: the receive takes no more bytes */
  bool closes;    /* not a cancel: close fd once what is queued went in, then free this (heap) */
  bool gives;     /* not a cancel: give buffer `bid` back to the ring (a lend done elsewhere), free this */
  unsigned short bid;
  int fd;
  struct rx_cancel *next; /* in the poller's list */
} rx_cancel;

/* The carrier whose thread this is, once it has a ring (its own requests need no hand-over). */
static _Thread_local const weft__poller *tls_owner;

/* A write that went behind: its bytes, and the slot (index and generation) it is of. */
typedef struct wbuf {
  uint32_t idx, gen, len;
  unsigned char data[];
} wbuf;

/* A reader waiting for a multishot receive's bytes: the carrier copies them into its vectors. */
typedef struct rx_reader {
  weft__waiter w;
  const struct iovec *iov;
  int iovcnt;
  size_t got;         /* bytes copied in, or lent */
  bool woken;         /* woken already: until it runs (and leaves x->reader) the carrier goes on filling it */
  weft__poller *lend; /* it may be lent a buffer of this poller's ring (weft__uring_rx_lend), or NULL */
  const unsigned char *ring_data; /* the buffer lent to it (got bytes), or NULL */
  unsigned short bid;             /* that buffer's id */
} rx_reader;

/* A slot's multishot receive (owned.h: s->rx), under the slot's lock. */
struct weft__urx {
  weft__poller *on;   /* the poller whose ring has the receive armed, or NULL */
  uint64_t tag;       /* its user_data */
  unsigned epoch;     /* weft__owned_epoch() when armed (a shutdown or a fork ends every ring) */
  bool cancelling;    /* asked to end (too many bytes kept) */
  int end;            /* 0; 1 the end of the stream; or the negative errno the receive ended with */
  rx_reader *reader;  /* the reader waiting, or NULL */
  unsigned char *buf; /* kept bytes: buf[head, head + len) */
  size_t head, len, cap;
  /* A ring buffer lent to the caller of a lend (weft__uring_rx_lend) until weft__uring_rx_lend_done: its
   * bytes (NULL: none), its id, the ring's poller and the epoch it was lent in. */
  const unsigned char *lent;
  unsigned short lent_bid;
  weft__poller *lent_on;
  unsigned lent_epoch;
};

typedef struct uop {
  weft__waiter w;    /* the fiber waits here for the completion */
  weft__waiter back; /* after a wait ended otherwise: the fiber waits here for the kernel to let go */
  int32_t res;       /* the completion's result */
  bool done;         /* the completion was reaped */
  bool reaping;      /* the fiber's wait ended otherwise; it waits on back until done */
} uop;

/* -1 unknown, 0 refused by the kernel (for the whole process), 1 a ring was set up. */
static atomic_int usable = -1;

bool weft__uring_in_use(void) { return atomic_load_explicit(&usable, memory_order_relaxed) == 1; }

/* For weft_get_stats: relaxed adds on lines that only these paths write. */
static atomic_uint_fast64_t submissions, ring_waits, recvs, sends, behind;
uint64_t weft__uring_submissions(void) { return atomic_load_explicit(&submissions, memory_order_relaxed); }
uint64_t weft__uring_ring_waits(void) { return atomic_load_explicit(&ring_waits, memory_order_relaxed); }
uint64_t weft__uring_recvs(void) { return atomic_load_explicit(&recvs, memory_order_relaxed); }
uint64_t weft__uring_sends(void) { return atomic_load_explicit(&sends, memory_order_relaxed); }
uint64_t weft__uring_sends_behind(void) { return atomic_load_explicit(&behind, memory_order_relaxed); }

#ifdef WEFT_TESTING
static atomic_long test_lent; /* buffers lent by every ring, not given back yet */
#define TEST_LENT(d) atomic_fetch_add_explicit(&test_lent, (d), memory_order_relaxed)
#else
#define TEST_LENT(d) ((void)0)
#endif

long weft__uring_test_lent(void) {
#ifdef WEFT_TESTING
  return atomic_load_explicit(&test_lent, memory_order_relaxed);
#else
  return 0;
#endif
}

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

/* The provided buffers of the multishot receives: r->br stays NULL where the kernel has none (before 5.19).
 */
static void br_setup(ring *r) {
  size_t ring_bytes = NBUFS * sizeof(struct io_uring_buf);
  void *m = mmap(NULL, ring_bytes, PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
  if (m == MAP_FAILED) return;
  void *b = mmap(NULL, (size_t)NBUFS * BUFSZ, PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
  if (b == MAP_FAILED) {
    munmap(m, ring_bytes);
    return;
  }
  struct io_uring_buf_reg reg;
  memset(&reg, 0, sizeof reg);
  reg.ring_addr = (uint64_t)(uintptr_t)m;
  reg.ring_entries = NBUFS;
  reg.bgid = BGID;
  if (weft__fault(WEFT__F_URING) || io_uring_register_buf_ring(&r->ring, &reg, 0) != 0) {
    munmap(m, ring_bytes);
    munmap(b, (size_t)NBUFS * BUFSZ);
    return;
  }
  r->br = m;
  r->bufs = b;
  io_uring_buf_ring_init(r->br);
  int mask = io_uring_buf_ring_mask(NBUFS);
  for (unsigned i = 0; i < NBUFS; i++)
    io_uring_buf_ring_add(r->br, r->bufs + (size_t)i * BUFSZ, BUFSZ, (unsigned short)i, mask, (int)i);
  io_uring_buf_ring_advance(r->br, (int)NBUFS);
}

static void br_free(ring *r) {
  if (!r->br) return;
  munmap(r->br, NBUFS * sizeof(struct io_uring_buf));
  /* A buffer still lent (a fiber that moved to another carrier, or one that never said it was done) stays
   * readable: the buffers are left mapped. */
  if (!r->lent) munmap(r->bufs, (size_t)NBUFS * BUFSZ);
  r->br = NULL;
  r->bufs = NULL;
}

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
  /* Where fibers' socket reads are ring requests: buffers for the multishot receives (else one-shot ones). */
  if (p->uring_mode >= 2) br_setup(r);
  p->uring = r;
  tls_owner = p;
  weft__lock_acquire(&p->rx_lock);
  p->rx_closed = false; /* requests to end a receive are taken from now on */
  weft__lock_release(&p->rx_lock);
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
static void op_queued(ring *r, struct io_uring_sqe *sqe, int64_t deadline_ns) {
  if (deadline_ns > 0) {
    sqe->flags |= IOSQE_IO_LINK;
    struct io_uring_sqe *t = io_uring_get_sqe(&r->ring); /* room checked by op_room */
    struct __kernel_timespec *ts = &r->ts[(size_t)(t - r->ring.sq.sqes) % SQ_ENTRIES];
    ts->tv_sec = deadline_ns / 1000000000;
    ts->tv_nsec = deadline_ns % 1000000000;
    io_uring_prep_link_timeout(t, ts, IORING_TIMEOUT_ABS);
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
  op_queued(r, sqe, deadline_ns);
  uint32_t st = op_wait(r, &op);
  /* The kernel wrote the buffer behind Valgrind's back. */
  if (!q->write && op.res > 0) MAKE_DEFINED(q->buf, (size_t)op.res);
  return op_result(&op, st, deadline_ns);
}

/*
 * A socket request of a fiber, in direction d of slot s: its waiter goes in
 * d->ring, where weft_fd_close wakes it (owned.c). 0; -EBADF when the slot
 * is closing; -ENOSYS when another fiber's request in that direction is in
 * flight (the caller goes the ordinary way).
 */
static int dir_claim(weft__oslot *s, weft__odir *d, uop *op) {
  weft__lock_acquire(&s->lock);
  bool closing = weft__owned_closing(s), taken = d->ring != NULL;
  if (!closing && !taken) d->ring = &op->w;
  weft__lock_release(&s->lock);
  return closing ? -EBADF : taken ? -ENOSYS : 0;
}

/* After op_wait: take the waiter back (unless a close took it) and say what the caller is told. */
static int64_t dir_release(weft__oslot *s, weft__odir *d, const uop *op, uint32_t st, int64_t deadline_ns) {
  weft__lock_acquire(&s->lock);
  if (d->ring == &op->w) d->ring = NULL;
  weft__lock_release(&s->lock);
  if (weft__owned_closing(s) && (!op->done || op->res == -ECANCELED)) return -EBADF;
  return op_result(op, st, deadline_ns);
}

int64_t weft__uring_recv(weft__poller *p, weft__oslot *s, const struct iovec *iov, int iovcnt,
                         int64_t deadline_ns) {
  if (!weft__uring_reads(p) || weft__fault(WEFT__F_URING)) return -ENOSYS;
  ring *r = p->uring;
  uop op;
  op_init(&op, WEFT__WAIT_READ, (const void *)(intptr_t)s->fd);
  if (!op_room(r, deadline_ns)) return -ENOSYS;
  int claimed = dir_claim(s, &s->rd, &op);
  if (claimed < 0) return claimed;
  struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring); /* room checked: only this thread fills the queue */
  if (iovcnt == 1) {
    io_uring_prep_recv(sqe, s->fd, iov[0].iov_base, iov[0].iov_len > UINT32_MAX ? UINT32_MAX : iov[0].iov_len,
                       0);
  } else
    io_uring_prep_readv(sqe, s->fd, iov, (unsigned)iovcnt, 0);
  io_uring_sqe_set_data(sqe, &op);
  op_queued(r, sqe, deadline_ns);
  atomic_fetch_add_explicit(&recvs, 1, memory_order_relaxed);
  uint32_t st = op_wait(r, &op);
  if (op.res > 0) {
    /* The kernel wrote the buffers behind Valgrind's back. */
    size_t left = (size_t)op.res;
    for (int i = 0; i < iovcnt && left; i++) {
      size_t n = iov[i].iov_len < left ? iov[i].iov_len : left;
      MAKE_DEFINED(iov[i].iov_base, n);
      left -= n;
    }
  }
  return dir_release(s, &s->rd, &op, st, deadline_ns);
}

/* Queue b's unsent bytes as a send on r. */
static void wb_queue(ring *r, weft__oslot *s, wbuf *b) {
  struct io_uring_sqe *sqe = sqe_get(r); /* cannot fail: sqe_get submits a full queue */
  /* MSG_WAITALL: the kernel sends every byte (waiting for room as it must) or fails (5.19). */
  io_uring_prep_send(sqe, s->fd, b->data, b->len, MSG_NOSIGNAL | MSG_WAITALL);
  io_uring_sqe_set_data64(sqe, TAG_WB | (uint64_t)(uintptr_t)b);
}

static bool wb_busy_locked(weft__oslot *s) {
  return atomic_load_explicit(&s->wb, memory_order_relaxed) && s->wb_epoch == weft__owned_epoch();
}

/* A write of s that goes behind (weft__uring_wb_*): its count, -EINPROGRESS when one is behind already,
 * -EBADF, or -ENOSYS (no memory: the caller waits for its send). */
static int64_t wb_send(weft__poller *p, ring *r, weft__oslot *s, const struct iovec *iov, int iovcnt,
                       size_t total) {
  wbuf *b = weft__malloc(sizeof *b + total);
  if (!b) return -ENOSYS;
  weft__lock_acquire(&s->lock);
  int rc = weft__owned_closing(s) ? -EBADF : wb_busy_locked(s) ? -EINPROGRESS : 0;
  if (rc == 0) {
    atomic_store_explicit(&s->wb, p, memory_order_relaxed);
    s->wb_epoch = weft__owned_epoch();
    b->idx = s->idx;
    b->gen = atomic_load(&s->gen) & TAG_GEN_MASK;
  }
  weft__lock_release(&s->lock);
  if (rc < 0) {
    weft__free(b);
    return rc;
  }
  b->len = (uint32_t)total;
  for (int i = 0, at = 0; i < iovcnt; i++) {
    if (iov[i].iov_len) memcpy(b->data + at, iov[i].iov_base, iov[i].iov_len);
    at += (int)iov[i].iov_len;
  }
  wb_queue(r, s, b);
  r->wb_armed++;
  atomic_fetch_add_explicit(&sends, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&behind, 1, memory_order_relaxed);
  return (int64_t)total;
}

int64_t weft__uring_send(weft__poller *p, weft__oslot *s, const struct iovec *iov, int iovcnt,
                         int64_t deadline_ns) {
  if (!weft__uring_reads(p) || weft__fault(WEFT__F_URING)) return -ENOSYS;
  ring *r = p->uring;
  /* TCP only: there a write's success never meant more than bytes in the socket's buffer, and the
   * peer's reset reaches the writer a write or more later in any case (a Unix socket's EPIPE is
   * immediate, and a datagram's error is its own). */
  if (s->tcp && p->write_behind) {
    size_t total = 0;
    for (int i = 0; i < iovcnt && total <= WEFT__WB_MAX; i++) total += iov[i].iov_len;
    if (total > 0 && total <= WEFT__WB_MAX) {
      int64_t n = wb_send(p, r, s, iov, iovcnt, total);
      if (n != -ENOSYS) return n;
    }
  }
  uop op;
  op_init(&op, WEFT__WAIT_WRITE, (const void *)(intptr_t)s->fd);
  if (!op_room(r, deadline_ns)) return -ENOSYS;
  int claimed = dir_claim(s, &s->wr, &op);
  if (claimed < 0) return claimed;
  struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring); /* room checked: only this thread fills the queue */
  struct msghdr m = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt};
  if (iovcnt == 1)
    io_uring_prep_send(sqe, s->fd, iov[0].iov_base, iov[0].iov_len > UINT32_MAX ? UINT32_MAX : iov[0].iov_len,
                       MSG_NOSIGNAL);
  else
    io_uring_prep_sendmsg(sqe, s->fd, &m, MSG_NOSIGNAL); /* m is read at submission, on this stack */
  io_uring_sqe_set_data(sqe, &op);
  op_queued(r, sqe, deadline_ns);
  atomic_fetch_add_explicit(&sends, 1, memory_order_relaxed);
  uint32_t st = op_wait(r, &op);
  return dir_release(s, &s->wr, &op, st, deadline_ns);
}

/* --- multishot receives ------------------------------------------------------------------------ */

/* Copy n bytes from src into the vectors, from byte `at` of them on; returns how many fitted. */
static size_t iov_put(const struct iovec *iov, int iovcnt, size_t at, const unsigned char *src, size_t n) {
  size_t done = 0;
  for (int i = 0; i < iovcnt && done < n; i++) {
    size_t l = iov[i].iov_len;
    if (at >= l) {
      at -= l;
      continue;
    }
    size_t c = l - at < n - done ? l - at : n - done;
    memcpy((unsigned char *)iov[i].iov_base + at, src + done, c);
    done += c;
    at = 0;
  }
  return done;
}

/* Keep n bytes for the next read. 0 or -ENOMEM. */
static int rx_keep(weft__urx *x, const unsigned char *src, size_t n) {
  if (x->head + x->len + n > x->cap) {
    if (x->head) {
      memmove(x->buf, x->buf + x->head, x->len);
      x->head = 0;
    }
    if (x->len + n > x->cap) {
      size_t cap = x->cap ? 2 * x->cap : 4096;
      while (cap < x->len + n) cap *= 2;
      unsigned char *b = weft__realloc(x->buf, cap);
      if (!b) return -ENOMEM;
      x->buf = b;
      x->cap = cap;
    }
  }
  memcpy(x->buf + x->head + x->len, src, n);
  x->len += n;
  return 0;
}

/* A completion of s's receive on p's ring, delivered under the slot's lock. Returns waiters woken. */
static int rx_deliver(ring *r, weft__oslot *s, weft__urx *x, int32_t res, bool more,
                      const unsigned char *data, unsigned bid, uint64_t tag, bool *held) {
  /*
   * Once the stream has ended or broken (bytes that could not be kept:
   * -ENOMEM), nothing that comes after may reach a reader: it would follow
   * the hole as if it were the next bytes (found by the soak).
   */
  if (res > 0 && data && !x->end) {
    size_t n = (size_t)res, off = 0;
    rx_reader *rd = x->reader;
    /* Straight into the waiting reader's buffers: nothing is kept before it (it took what was). A reader
     * that borrows (a lend) is lent the buffer itself, when it is the first bytes it gets; what comes
     * after that buffer is kept. */
    if (rd && x->len == 0 && !rd->ring_data) {
      if (rd->lend && rd->got == 0 && r->lent < LEND_MAX) {
        rd->ring_data = data;
        rd->bid = (unsigned short)bid;
        off = n;
        rd->got = n;
        *held = true;
        r->lent++;
        TEST_LENT(1);
      } else {
        off = iov_put(rd->iov, rd->iovcnt, rd->got, data, n);
        rd->got += off;
      }
    }
    if (off < n && rx_keep(x, data + off, n - off) < 0 && !x->end) x->end = -ENOMEM;
  } else if (res == 0) {
    if (!x->end) x->end = 1; /* an error not yet read stays the reader's to see */
  } else if (res == -EINVAL || res == -EOPNOTSUPP) {
    /* No multishot receive in this kernel (before 6.0): reads go the ordinary way from now on. */
    r->rx_off = true;
  } else if (res < 0 && res != -ENOBUFS && res != -ECANCELED && !x->end) {
    x->end = res; /* ENOBUFS and our own cancel only end the request: the next read arms it again */
  }
  if (!more) {
    x->on = NULL;
    x->cancelling = false;
  } else if (x->len > RX_MAX && !x->cancelling) {
    /* The reader does not keep up: end the request, and the socket's buffer does the waiting. */
    struct io_uring_sqe *c = sqe_get(r);
    if (c) {
      io_uring_prep_cancel64(c, tag, 0);
      io_uring_sqe_set_data64(c, TAG_NONE);
      x->cancelling = true;
    }
  }
  /*
   * The reader is woken once; it stays in x->reader until it runs and takes
   * the lock again, so that the completions reaped before then (the rest of
   * a response larger than a buffer) go straight into its vectors too, and
   * not through the slot's kept bytes: one copy, not two.
   */
  int woken = 0;
  rx_reader *rd = x->reader;
  if (rd && !rd->woken && (rd->got || x->len || x->end || !x->on)) {
    rd->woken = true;
    if (s->rd.ring == &rd->w) s->rd.ring = NULL;
    woken += weft__waiter_wake(&rd->w) ? 1 : 0;
  }
  /* weft_fd_poll's waiters see the bytes as an edge. */
  return woken + weft__owned_edge(&s->rd);
}

/* The carrier: a completion tagged TAG_RX. Returns waiters woken. */
static int rx_event(weft__poller *p, ring *r, uint64_t tag, int32_t res, uint32_t flags) {
  bool more = flags & IORING_CQE_F_MORE;
  const unsigned char *data = NULL;
  unsigned bid = 0;
  if (flags & IORING_CQE_F_BUFFER) {
    bid = flags >> IORING_CQE_BUFFER_SHIFT;
    data = r->bufs + (size_t)bid * BUFSZ;
    if (res > 0) MAKE_DEFINED(data, (size_t)res);
  }
  if (!more) r->rx_armed--;
  int woken = 0;
  bool held = false;
  weft__oslot *s = weft__owned_at((uint32_t)tag);
  if (s) {
    weft__lock_acquire(&s->lock);
    weft__urx *x = atomic_load_explicit(&s->rx, memory_order_acquire);
    /* A completion of the slot's earlier descriptor (closed since) concerns nobody. */
    if (x && x->on == p && (atomic_load(&s->gen) & TAG_GEN_MASK) == ((tag >> 32) & TAG_GEN_MASK))
      woken = rx_deliver(r, s, x, res, more, data, bid, tag, &held);
    weft__lock_release(&s->lock);
  }
  /* The buffer goes back to the kernel (visible at the end of the reap), unless it was lent. */
  if (data && r->br && !held)
    io_uring_buf_ring_add(r->br, (void *)data, BUFSZ, (unsigned short)bid, io_uring_buf_ring_mask(NBUFS),
                          r->returned++);
  return woken;
}

/* Arm s's receive on p's ring (the calling fiber's carrier). Under the slot's lock. */
static bool rx_arm(weft__poller *p, ring *r, weft__oslot *s, weft__urx *x, unsigned epoch) {
  struct io_uring_sqe *sqe = sqe_get(r);
  if (!sqe) return false;
  io_uring_prep_recv_multishot(sqe, s->fd, NULL, 0, 0);
  sqe->flags |= IOSQE_BUFFER_SELECT;
  sqe->buf_group = BGID;
  x->tag = TAG_RX | ((uint64_t)(atomic_load(&s->gen) & TAG_GEN_MASK) << 32) | s->idx;
  io_uring_sqe_set_data64(sqe, x->tag);
  x->on = p;
  x->epoch = epoch;
  x->cancelling = false;
  r->rx_armed++;
  return true;
}

/* Move kept bytes into the vectors. */
static size_t rx_take(weft__urx *x, const struct iovec *iov, int iovcnt) {
  size_t n = 0;
  for (int i = 0; i < iovcnt && x->len; i++) {
    size_t c = iov[i].iov_len < x->len ? iov[i].iov_len : x->len;
    memcpy(iov[i].iov_base, x->buf + x->head, c);
    x->head += c;
    x->len -= c;
    n += c;
  }
  if (!x->len) x->head = 0;
  return n;
}

/* weft__uring_rx_read, and with `lent` weft__uring_rx_lend. */
static int64_t rx_read(weft__poller *p, weft__oslot *s, const struct iovec *iov, int iovcnt,
                       int64_t deadline_ns, const void **lent) {
  ring *r = p && weft__uring_sockets(p) ? p->uring : NULL;
  if (r && (!r->br || r->rx_off || weft__fault(WEFT__F_URING))) r = NULL;
  /* Made once per slot, by the first reader that can arm a receive, and kept with the slot. */
  weft__urx *x = atomic_load_explicit(&s->rx, memory_order_acquire);
  if (!x) {
    if (!r) return -ENOSYS; /* the ordinary read, without a lock */
    weft__urx *n = weft__calloc(1, sizeof *n);
    if (!n) return -ENOSYS;
    weft__urx *none = NULL;
    if (!atomic_compare_exchange_strong(&s->rx, &none, n)) weft__free(n);
    x = atomic_load(&s->rx);
  }
  weft__lock_acquire(&s->lock);
  unsigned epoch = weft__owned_epoch();
  int64_t res;
  for (;;) {
    if (weft__owned_closing(s)) {
      res = -EBADF;
      break;
    }
    if (x->len) {
      /* A lend takes the kept bytes whole: the slot's buffer and the lend's change places (no copy). */
      weft__lend *l = lent ? atomic_load_explicit(&s->lend, memory_order_acquire) : NULL;
      if (l && !l->len) {
        unsigned char *b = l->buf;
        size_t cap = l->cap;
        l->buf = x->buf;
        l->cap = x->cap;
        l->head = x->head;
        l->len = x->len;
        x->buf = b;
        x->cap = cap;
        x->head = x->len = 0;
        res = (int64_t)l->len;
        break;
      }
      res = (int64_t)rx_take(x, iov, iovcnt);
      break;
    }
    if (x->end) {
      /* An error is said once; after it, as after the end, reads see the end. */
      res = x->end > 0 ? 0 : x->end;
      x->end = 1;
      break;
    }
    if (!(x->on && x->epoch == epoch)) {
      /* Nothing armed (or armed by a ring gone with an earlier runtime): arm it here, or read elsewise. */
      if (!r || deadline_ns == 0 || r->rx_off || !rx_arm(p, r, s, x, epoch)) {
        res = -ENOSYS;
        break;
      }
    }
    if (deadline_ns == 0) {
      res = -ETIMEDOUT;
      break;
    }
    if (x->reader || s->rd.ring || s->rd.waiter) { /* one reader at a time, whichever way it waits */
      res = -EBUSY;
      break;
    }
    /* Lent a ring's buffer only on the ring's own thread, where it is given back without a hand-over. */
    rx_reader rd = {.iov = iov, .iovcnt = iovcnt, .lend = lent && tls_owner == x->on ? x->on : NULL};
    weft__waiter_init(&rd.w, true);
    weft__waiter_on(&rd.w, WEFT__WAIT_READ, (const void *)(intptr_t)s->fd);
    x->reader = &rd;
    s->rd.ring = &rd.w; /* weft_fd_close wakes it there */
    weft__lock_release(&s->lock);
    uint32_t st = weft__waiter_wait(&rd.w, deadline_ns);
    weft__lock_acquire(&s->lock);
    if (x->reader == &rd) x->reader = NULL;
    if (s->rd.ring == &rd.w) s->rd.ring = NULL;
    /* Bytes handed over before the wait ended otherwise are the read's result. */
    if (rd.got) {
      res = (int64_t)rd.got;
      if (rd.ring_data) {
        x->lent = rd.ring_data;
        x->lent_bid = rd.bid;
        x->lent_on = rd.lend;
        x->lent_epoch = epoch;
        *lent = rd.ring_data;
      }
      break;
    }
    if (st != WEFT__W_WOKEN) {
      res = weft__owned_closing(s) ? -EBADF : weft__waiter_errno(st);
      break;
    }
  }
  weft__lock_release(&s->lock);
  if (res != -ENOSYS) atomic_fetch_add_explicit(&recvs, 1, memory_order_relaxed);
  return res;
}

int64_t weft__uring_rx_read(weft__poller *p, weft__oslot *s, const struct iovec *iov, int iovcnt,
                            int64_t deadline_ns) {
  return rx_read(p, s, iov, iovcnt, deadline_ns, NULL);
}

int64_t weft__uring_rx_lend(weft__poller *p, weft__oslot *s, const struct iovec *iov, int iovcnt,
                            int64_t deadline_ns, const void **lent) {
  *lent = NULL;
  return rx_read(p, s, iov, iovcnt, deadline_ns, lent);
}

/* The owner: buffer bid goes back to the ring now. Not inside a reap (whose additions are counted in
 * r->returned and made visible at its end). */
static void give_back(ring *r, unsigned short bid) {
  io_uring_buf_ring_add(r->br, r->bufs + (size_t)bid * BUFSZ, BUFSZ, bid, io_uring_buf_ring_mask(NBUFS), 0);
  io_uring_buf_ring_advance(r->br, 1);
  r->lent--;
  TEST_LENT(-1);
}

static bool owner_queue(weft__poller *p, rx_cancel *c);

void weft__uring_rx_lend_done(weft__oslot *s) {
  weft__urx *x = atomic_load_explicit(&s->rx, memory_order_acquire);
  if (!x) return;
  weft__lock_acquire(&s->lock);
  weft__poller *p = x->lent && x->lent_epoch == weft__owned_epoch() ? x->lent_on : NULL;
  unsigned short bid = x->lent_bid;
  x->lent = NULL;
  x->lent_on = NULL;
  weft__lock_release(&s->lock);
  if (!p) return; /* nothing lent, or lent by a ring gone with an earlier runtime (a fork's parent's) */
  if (tls_owner == p) {
    give_back(p->uring, bid);
    return;
  }
  /* Another thread (the fiber moved, WEFT_MIGRATE): the owner gives it back when it next reaps. Without
   * memory for the request, or with the ring gone, the buffer stays out (the ring has one fewer). */
  rx_cancel *c = weft__malloc(sizeof *c);
  if (!c) return;
  *c = (rx_cancel){.gives = true, .bid = bid};
  if (!owner_queue(p, c)) weft__free(c);
}

bool weft__uring_rx_ready(weft__oslot *s) {
  const weft__urx *x = atomic_load_explicit(&s->rx, memory_order_acquire);
  if (!x) return false;
  weft__lock_acquire(&s->lock);
  bool ready = x->len || x->end;
  weft__lock_release(&s->lock);
  return ready;
}

void weft__uring_rx_reset(weft__oslot *s) {
  weft__urx *x = atomic_load_explicit(&s->rx, memory_order_acquire);
  if (!x) return;
  x->on = NULL;
  x->cancelling = false;
  x->end = 0;
  x->reader = NULL;
  x->lent = NULL;
  x->lent_on = NULL;
  x->head = x->len = 0;
  if (x->cap > RX_MAX) { /* a big one is not kept for the next descriptor */
    weft__free(x->buf);
    x->buf = NULL;
    x->cap = 0;
  }
}

/* Queue the cancel of c->tag on r (its owner's thread). */
static void cancel_queue(ring *r, rx_cancel *c) {
  struct io_uring_sqe *sqe = sqe_get(r);
  if (!sqe) return; /* cannot be: sqe_get submits a full queue */
  if (c->tag)
    io_uring_prep_cancel64(sqe, c->tag, 0);
  else
    io_uring_prep_nop(sqe); /* a flush (weft__uring_wb_final): done once what was queued before it went in */
  io_uring_sqe_set_data64(sqe, TAG_CANCEL | (uint64_t)(uintptr_t)c);
}

/* The owner: close the descriptors handed over by weft__uring_wb_final, after their sends went in. */
static void closes_run(rx_cancel *c) {
  for (rx_cancel *next; c; c = next) {
    next = c->next;
    close(c->fd);
    weft__free(c);
  }
}

/* The owner: the cancels other threads asked for. */
static void cancels_take(weft__poller *p, ring *r) {
  /* Sequentially consistent, as the requester's store: a carrier about to sleep has announced it
   * (weft__poller_prepare_sleep) before it looks, so either it sees the request or the requester sees it
   * sleeping and wakes it. */
  if (!atomic_load(&p->rx_pending)) return;
  weft__lock_acquire(&p->rx_lock);
  rx_cancel *c = p->rx_cancels;
  p->rx_cancels = NULL;
  atomic_store_explicit(&p->rx_pending, false, memory_order_relaxed);
  weft__lock_release(&p->rx_lock);
  rx_cancel *closes = NULL;
  for (rx_cancel *next; c; c = next) {
    next = c->next;
    if (c->gives) {
      give_back(r, c->bid);
      weft__free(c);
    } else if (c->closes) {
      c->next = closes;
      closes = c;
    } else {
      cancel_queue(r, c);
    }
  }
  submit(r);
  closes_run(closes);
}

/* The owner: a cancel's completion. */
static int cancel_done(ring *r, rx_cancel *c, int32_t res) {
  if (res == -EALREADY) { /* the receive was running just then: ask again */
    cancel_queue(r, c);
    return 0;
  }
  c->done = true;
  return c->waits && weft__waiter_wake(&c->w) ? 1 : 0;
}

/* From another thread than p's: queue c for p's owner and wake it. False when the owner has left its ring
 * (or has none): then every request of it has ended or gone in, and c is not queued. */
static bool owner_queue(weft__poller *p, rx_cancel *c) {
  weft__lock_acquire(&p->rx_lock);
  bool closed = p->rx_closed;
  if (!closed) {
    c->next = p->rx_cancels;
    p->rx_cancels = c;
    atomic_store(&p->rx_pending, true); /* before the look at `sleeping` in weft__poller_wake */
  }
  weft__lock_release(&p->rx_lock);
  if (!closed) weft__poller_wake(p);
  return !closed;
}

/* From another thread than p's: have p's owner take c (a cancel, or a flush when c->tag is 0), and wait
 * until it is done. */
static void owner_ask(weft__poller *p, rx_cancel *c, unsigned kind, int fd) {
  c->waits = true;
  weft__waiter_init(&c->w, false);
  weft__waiter_on(&c->w, kind, (const void *)(intptr_t)fd);
  if (owner_queue(p, c)) weft__waiter_wait(&c->w, -1);
}

void weft__uring_rx_final(weft__oslot *s) {
  const weft__urx *x = atomic_load_explicit(&s->rx, memory_order_acquire);
  if (!x) return;
  weft__lock_acquire(&s->lock);
  weft__poller *p = x->epoch == weft__owned_epoch() ? x->on : NULL;
  rx_cancel c = {.tag = x->tag};
  weft__lock_release(&s->lock);
  if (!p) return;
  /*
   * The receive holds the socket open and would take bytes that a dup of it
   * (or another process's copy) is to read: end it before the descriptor
   * closes, and wait until the kernel has. Only the ring's owner may ask.
   */
  if (tls_owner == p) {
    /* On the owner's thread (a fiber of that carrier): ask, and reap until done. */
    ring *r = p->uring;
    cancel_queue(r, &c);
    for (int i = 0; i < 5000 && !c.done; i++) {
      struct io_uring_cqe *cqe;
      struct __kernel_timespec ts = {0, 1000000};
      (void)io_uring_submit_and_wait_timeout(&r->ring, &cqe, 1, &ts, NULL);
      weft__uring_reap(p);
    }
    return;
  }
  owner_ask(p, &c, WEFT__WAIT_READ, s->fd);
}

bool weft__uring_wb_final(weft__oslot *s) {
  if (!weft__uring_wb_busy(s)) return false;
  weft__lock_acquire(&s->lock);
  weft__poller *p = wb_busy_locked(s) ? atomic_load_explicit(&s->wb, memory_order_relaxed) : NULL;
  weft__lock_release(&s->lock);
  if (!p) return false;
  /* The send names s->fd, which the kernel looks up when it takes the request: not after the close. */
  if (tls_owner == p) {
    submit(p->uring);
    return false;
  }
  /* Another thread: the owner closes the descriptor right after its next submission. Not waiting for
   * it: the owner may be a carrier that its fiber holds (in a join of the very thread that closes). */
  rx_cancel *c = weft__malloc(sizeof *c);
  if (c) {
    *c = (rx_cancel){.closes = true, .fd = s->fd};
    if (owner_queue(p, c)) return true;
    weft__free(c);
    return false;
  }
  /* No memory: wait for the owner to submit (a no-op behind the send completes once it went in). */
  rx_cancel f = {.tag = 0};
  owner_ask(p, &f, WEFT__WAIT_WRITE, s->fd);
  return false;
}

/* A leaving carrier: submit and reap, for a second at most, until its writes behind (and with `rx` its
 * receives) have ended. */
static void quiesce_reap(weft__poller *p, ring *r, bool rx) {
  for (int i = 0; i < 500 && (r->wb_armed || (rx && r->rx_armed)); i++) {
    struct io_uring_cqe *cqe;
    struct __kernel_timespec ts = {0, 2000000};
    (void)io_uring_submit_and_wait_timeout(&r->ring, &cqe, 1, &ts, NULL);
    weft__uring_reap(p);
  }
}

void weft__uring_quiesce(weft__poller *p) {
  ring *r = p->uring;
  if (!r) return;
  r->quiescing = true;
  /* Writes behind go out first: their sockets' buffers have room unless a peer stopped reading, so
   * give them up to a second; one that still waits then is cancelled, and its socket's next write says
   * -ECANCELED. */
  quiesce_reap(p, r, false);
  /* Every request of the ring ends (nothing else is in flight as the carrier leaves); the receives
   * deliver what they hold first. */
  struct io_uring_sqe *c = r->rx_armed || r->wb_armed ? sqe_get(r) : NULL;
  if (c) {
    io_uring_prep_cancel64(c, 0, IORING_ASYNC_CANCEL_ANY);
    io_uring_sqe_set_data64(c, TAG_NONE);
  }
  quiesce_reap(p, r, true);
  /* No request is taken from now on; those already asked are answered: nothing is armed any more. */
  weft__lock_acquire(&p->rx_lock);
  p->rx_closed = true;
  rx_cancel *q = p->rx_cancels;
  p->rx_cancels = NULL;
  weft__lock_release(&p->rx_lock);
  for (rx_cancel *next; q; q = next) {
    next = q->next;
    if (q->gives) { /* the ring goes: nothing to give back to */
      weft__free(q);
      continue;
    }
    if (q->closes) {
      q->next = NULL;
      closes_run(q);
      continue;
    }
    q->done = true;
    weft__waiter_wake(&q->w);
  }
  tls_owner = NULL;
}

void weft__uring_flush(weft__poller *p, bool idle) {
  ring *r = p->uring;
  if (!r) return;
  unsigned queued = io_uring_sq_ready(&r->ring);
  if (idle && (queued || r->in_flight || r->wb_armed)) {
    /* Submit, and post what the kernel keeps for our own enter (DEFER_TASKRUN). */
    count_submit(r);
    io_uring_submit_and_get_events(&r->ring);
  } else if (queued >= BATCH) {
    submit(r);
  }
}

bool weft__uring_busy(const weft__poller *p) {
  const ring *r = p->uring;
  /* Armed receives too: their completions are posted only in the carrier's own enter (DEFER_TASKRUN). */
  return r && (r->in_flight > 0 || r->rx_armed > 0 || r->wb_armed > 0);
}

/* The carrier: a write behind ended. Returns waiters woken. */
static int wb_event(ring *r, wbuf *b, int32_t res) {
  r->wb_armed--;
  /* Short only on a kernel without MSG_WAITALL for sends (before 5.19): the stream lost bytes. */
  int err = res < 0 ? res : (uint32_t)res < b->len ? -EIO : 0;
  int woken = 0;
  weft__oslot *s = weft__owned_at(b->idx);
  if (s) {
    weft__lock_acquire(&s->lock);
    /* Of the slot's descriptor still (not of a later one after a close), and of this epoch's rings. */
    if ((atomic_load(&s->gen) & TAG_GEN_MASK) == b->gen && wb_busy_locked(s)) {
      atomic_store_explicit(&s->wb, NULL, memory_order_relaxed);
      if (err) atomic_store(&s->wb_err, err);
      if (s->wb_waiter) {
        woken += weft__waiter_wake(s->wb_waiter) ? 1 : 0;
        s->wb_waiter = NULL;
      }
    }
    weft__lock_release(&s->lock);
  }
  weft__free(b);
  return woken;
}

bool weft__uring_wb_busy(weft__oslot *s) {
  return atomic_load_explicit(&s->wb, memory_order_relaxed) != NULL;
}

int weft__uring_wb_error(weft__oslot *s) {
  if (!atomic_load_explicit(&s->wb_err, memory_order_relaxed)) return 0;
  return atomic_exchange(&s->wb_err, 0);
}

int weft__uring_wb_wait(weft__oslot *s, int64_t deadline_ns) {
  weft__waiter w;
  weft__waiter_init(&w, true);
  weft__waiter_on(&w, WEFT__WAIT_WRITE, (const void *)(intptr_t)s->fd);
  weft__lock_acquire(&s->lock);
  int rc = 1;
  if (weft__owned_closing(s))
    rc = -EBADF;
  else if (!wb_busy_locked(s)) {
    atomic_store_explicit(&s->wb, NULL, memory_order_relaxed); /* of an earlier epoch: its ring is gone */
    rc = 0;
  } else if (s->wb_waiter)
    rc = -EBUSY; /* one writer waits at a time, as for the other waits of a direction */
  else
    s->wb_waiter = &w;
  weft__lock_release(&s->lock);
  if (rc <= 0) return rc;
  return weft__owned_wait_end(s, &s->wb_waiter, &w, weft__waiter_wait(&w, deadline_ns));
}

int weft__uring_reap(weft__poller *p) {
  ring *r = p->uring;
  if (!r) return 0;
  cancels_take(p, r);
  /* Completions that overflowed the queue wait in the kernel until we ask. */
  if (IO_URING_READ_ONCE(*r->ring.sq.kflags) & IORING_SQ_CQ_OVERFLOW) io_uring_get_events(&r->ring);
  int woken = 0;
  bool harvest = false;
  struct io_uring_cqe *cqe;
  while (io_uring_peek_cqe(&r->ring, &cqe) == 0) {
    uint64_t tag = io_uring_cqe_get_data64(cqe);
    int32_t res = cqe->res;
    uint32_t flags = cqe->flags;
    bool more = flags & IORING_CQE_F_MORE;
    io_uring_cqe_seen(&r->ring, cqe);
    if (tag == TAG_NONE) continue;
    if (tag & TAG_RX) {
      woken += rx_event(p, r, tag, res, flags);
      continue;
    }
    if (tag & TAG_WB) {
      woken += wb_event(r, (wbuf *)(uintptr_t)(tag & ~TAG_WB), res);
      continue;
    }
    if (tag & TAG_CANCEL) {
      woken += cancel_done(r, (rx_cancel *)(uintptr_t)(tag & ~TAG_CANCEL), res);
      continue;
    }
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
  if (r->returned) {
    io_uring_buf_ring_advance(r->br, r->returned);
    r->returned = 0;
  }
  /* The epoll instance has events: collect them without waiting (and before the poll is armed again). */
  if ((harvest || !r->epoll_armed) && !r->quiescing) woken += weft__poller_harvest(p);
  return woken;
}

int weft__uring_wait(weft__poller *p, int64_t deadline_ns) {
  ring *r = p->uring;
  cancels_take(p, r); /* asked for before the carrier announced its sleep: the requester did not wake it */
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
  br_free(r);
  weft__free(r);
  p->uring = NULL;
}
