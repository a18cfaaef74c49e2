/*
 * This file contains a carrier's io_uring: its wait point, and the path of
 * the fibers' I/O that the kernel completes as requests.
 *
 * Where the kernel allows it (Linux 5.19: COOP_TASKRUN; 6.1 adds
 * SINGLE_ISSUER and DEFER_TASKRUN, used where accepted), each carrier sets
 * up a ring of its own at its first request that wants one (a regular
 * file's, or with WEFT_IO_URING=2, the default, an owned socket's), on its
 * own thread, and from then on waits there instead of in epoll_wait: its epoll instance and its wake-up
 * eventfd are multishot polls on the ring, so descriptor waits and wake-ups
 * still end the wait, and everything else a fiber asks of the kernel on that
 * carrier is a request in the same ring, submitted in batches in the enter
 * that also waits (when the carrier has nothing else to run, or every BATCH
 * requests) and reaped from the shared completion ring without a system
 * call. The requests:
 *
 *  - regular-file reads and writes (epoll cannot wait on a regular file: it
 *    is always "ready", and a read that misses the page cache blocks);
 *  - a fiber's reads of an owned socket (weft_fd_read): a receive that the
 *    kernel tries at submission and otherwise completes when data comes, so
 *    a read costs no system call of its own, neither the read nor the one
 *    that would say EAGAIN;
 *  - a fiber's writes of an owned socket (weft_fd_write): a send, which the
 *    kernel does at submission when the socket has room (the usual case)
 *    and otherwise when room comes. The carrier submits the sends of all
 *    its fibers in one enter, so a busy carrier's round trips cost a
 *    fraction of a system call each.
 *
 * Only the carrier touches its ring (the fiber whose request is in flight
 * stays on it: weft__fiber_stay). Where io_uring is missing, refused
 * (seccomp, containers, an older kernel) or switched off (WEFT_IO_URING=0),
 * or weft was built without liburing (uring_none.c), the carrier waits in
 * epoll, weft__uring_run and weft__uring_recv return -ENOSYS, and io.c and
 * fd.c use the offload pool and epoll.
 */
#ifndef WEFT_IO_URING_H
#define WEFT_IO_URING_H

#include <sys/socket.h>
#include <sys/uio.h>

#include "owned.h"
#include "poller.h"

/* One request: a read or a write at the file's current position, as read(2) and write(2) do. */
typedef struct weft__uring_req {
  bool write;
  int fd;
  void *buf;
  size_t len;
} weft__uring_req;

/*
 * The carrier, on its own thread, at the first request that wants a ring (a
 * regular file's, or with WEFT_IO_URING=2 a socket's; again at the next such
 * request if it failed): set up p's ring and make it p's wait point. 0, or a
 * negative errno with p left waiting in epoll.
 */
int weft__uring_attach(weft__poller *p);

/* Is p's wait point its ring (weft__poller_wait then calls weft__uring_wait)? */
static inline bool weft__uring_waits(const weft__poller *p) { return p->uring != NULL; }
/* Are fibers' socket reads on p's carrier ring receives (WEFT_IO_URING=2, and the ring is there)? */
static inline bool weft__uring_reads(const weft__poller *p) { return p->uring != NULL && p->uring_mode >= 2; }

/*
 * The same, for a fiber about to read or write a socket on p's carrier (its
 * own thread): with WEFT_IO_URING=2 the ring is set up now if the carrier
 * has none yet, and is its wait point from then on. A carrier that never
 * touches an owned socket keeps waiting in epoll: sleeps, yields and raw
 * descriptors cost there what they always did.
 */
static inline bool weft__uring_sockets(weft__poller *p) {
  if (p->uring_mode < 2) return false;
  if (!p->uring) (void)weft__uring_attach(p);
  return p->uring != NULL;
}

/* The wait of weft__poller_wait on a ring: submit, wait until a completion or the deadline, deliver. */
int weft__uring_wait(weft__poller *p, int64_t deadline_ns);

/*
 * Run the request on the calling fiber's carrier and park until it is done.
 * Returns the operation's result (a count) or its
 * negative errno; -ETIMEDOUT when the deadline (absolute, > 0; -1: none)
 * came first and -ECANCELED when the calling future was cancelled (in both
 * cases the operation was cancelled in the kernel before the call returns,
 * since the kernel owns the buffer until then; an operation that completed
 * meanwhile gives its result); -ENOSYS when this carrier has no ring.
 */
int64_t weft__uring_run(weft__poller *p, const weft__uring_req *r, int64_t deadline_ns);

/*
 * One read of owned socket s into iov as a receive on the calling fiber's
 * carrier's ring, parked until it completes: a count, 0 at the end of the
 * stream, or a negative errno; -ETIMEDOUT and -ECANCELED as weft__uring_run,
 * -EBADF when weft_fd_close came first (it wakes the fiber, which takes the
 * request back). -ENOSYS when it cannot be a ring request (no ring, no
 * room, or another fiber's receive on s is in flight): the caller reads the
 * ordinary way.
 */
int64_t weft__uring_recv(weft__poller *p, weft__oslot *s, const struct iovec *iov, int iovcnt,
                         int64_t deadline_ns);

/*
 * Reads of an owned stream socket (s->stream) as a multishot receive: one
 * request, armed by the first read of a fiber on a carrier that reads
 * sockets through its ring (p, that fiber's poller; NULL for any other
 * caller), that stays in the kernel and receives whatever comes into
 * buffers the ring provides. The carrier that owns the ring hands each
 * completion's bytes to the reader waiting for them, copied into its
 * buffers, or keeps them in the slot for the next read (more than
 * RX_MAX kept ends the request until a read drains them: the kernel's
 * flow control again). A read takes what is kept, else the end of the
 * stream or the error the receive ended with, else waits; every caller of
 * a socket whose receive is armed or has kept bytes reads this way,
 * threads too. Returns a count, 0 at the end of the stream, -ETIMEDOUT,
 * -ECANCELED, -EBADF (closed), -EBUSY (another reader waits), or -ENOSYS
 * when the caller should read the ordinary way: no receive armed and none
 * to arm (a thread, no ring, a kernel without multishot receives or
 * provided buffers, a full submission queue), or a deadline of 0 with
 * nothing kept and nothing armed.
 */
int64_t weft__uring_rx_read(weft__poller *p, weft__oslot *s, const struct iovec *iov, int iovcnt,
                            int64_t deadline_ns);
/*
 * A read for weft_fd_read_lend: as weft__uring_rx_read, except that a
 * reader on the thread of the ring whose receive is armed, waiting when the
 * bytes come, may be lent the ring's buffer itself instead of a copy in
 * iov: then *lent points at the count of bytes returned, which stay the
 * caller's until weft__uring_rx_lend_done(s) (one at a time per slot; the
 * slot's last reference gives back one still held). Otherwise *lent is NULL and
 * the bytes were copied into iov, or, where the slot kept bytes and its
 * weft__lend (owned.h) holds none, its buffer and the slot's changed places:
 * the bytes are then the lend's kept ones (l->buf + l->head, l->len).
 */
int64_t weft__uring_rx_lend(weft__poller *p, weft__oslot *s, const struct iovec *iov, int iovcnt,
                            int64_t deadline_ns, const void **lent);
/* Give the buffer that weft__uring_rx_lend lent back to its ring, if one is lent (the caller is done with all
 * of its bytes; the slot's last reference gives back one still held). Not under the slot's lock; any
 * thread. */
void weft__uring_rx_lend_done(weft__oslot *s);
/* Tests: the buffers lent by every ring and not given back yet (WEFT_TESTING builds; else 0). */
long weft__uring_test_lent(void);
/* Has s bytes or an end kept by its multishot receive (weft_fd_poll: readable)? Takes the slot's lock. */
bool weft__uring_rx_ready(weft__oslot *s);
/* The slot is (re)used for a new descriptor: forget its receive and kept bytes. Under the slot's lock. */
void weft__uring_rx_reset(weft__oslot *s);
/*
 * The last reference of a closing slot, before close(): where a receive is
 * armed, shut the socket's read side down, which ends it (the ring's
 * request holds the file open, so without it the close would not reach the
 * peer).
 */
void weft__uring_rx_final(weft__oslot *s);

/*
 * The carrier, on its own thread as it leaves: end the multishot receives
 * armed on its ring and deliver what they had (kept in their slots), so
 * that no bytes go down with the ring.
 */
void weft__uring_quiesce(weft__poller *p);

/*
 * One write of owned socket s from iov as a send request (MSG_NOSIGNAL) on
 * the calling fiber's carrier's ring, parked until it completes: a count or
 * a negative errno, as weft__uring_recv (-EBADF when weft_fd_close came
 * first; -ENOSYS when it cannot be a ring request, or another fiber's send
 * on s is in flight: the caller writes the ordinary way). The request is
 * submitted with the carrier's next batch (uring.c), so sends of many
 * fibers cost one system call.
 */
int64_t weft__uring_send(weft__poller *p, weft__oslot *s, const struct iovec *iov, int iovcnt,
                         int64_t deadline_ns);

/*
 * Writes that go behind. A fiber's write of a TCP socket of at most
 * WEFT__WB_MAX bytes is copied into a buffer of the ring's and queued as a
 * send; weft__uring_send returns its count at once, without parking (one
 * switch and one trip through the ready queue fewer for each write). At
 * most one is in flight per socket: the next write of the socket, from any
 * carrier or thread, first waits for it to end (weft__uring_wb_wait), and
 * an error it ended with is the next write's result (weft__uring_wb_error).
 * weft__uring_send says -EINPROGRESS when a write of s is behind already.
 * A close has the ring submit it before the descriptor closes, or hands
 * the close to the ring's carrier (weft__uring_wb_final); the kernel's
 * request then holds the socket open until the bytes have gone into its
 * buffer, as close(2) leaves buffered bytes to go out after it.
 */
#define WEFT__WB_MAX 2048u
/* Is a write of s behind (queued or in flight)? */
bool weft__uring_wb_busy(weft__oslot *s);
/* Wait until no write of s is behind: 0, -EBADF (closed), -ETIMEDOUT, -ECANCELED, -EBUSY (another writer
 * waits already). Any context. */
int weft__uring_wb_wait(weft__oslot *s, int64_t deadline_ns);
/* Take the error that a write behind ended with: 0 or a negative errno. */
int weft__uring_wb_error(weft__oslot *s);
/* Before s's descriptor closes: the ring that holds its write behind must submit it first. On that ring's
 * thread it does so now; from another thread the ring's carrier takes the close over and closes the
 * descriptor after its next submission: then true, and the caller must not close it. */
bool weft__uring_wb_final(weft__oslot *s);

/*
 * The carrier's side. flush: submit queued requests, if `idle` (the carrier
 * has nothing else to run; completions that the kernel keeps for the
 * carrier's own enter are posted too) or enough are queued. reap: deliver
 * completions (no system call unless the completion ring overflowed).
 */
void weft__uring_flush(weft__poller *p, bool idle);
int weft__uring_reap(weft__poller *p);

/* Fibers' requests queued or in flight on p's ring. */
bool weft__uring_busy(const weft__poller *p);
/* Tear down p's ring (nothing is in flight: the carrier is leaving). p waits in epoll again only once
 * re-initialised (weft__poller_init): its wake-up eventfd has left the epoll instance. */
void weft__uring_fini(weft__poller *p);
/* True once a ring has been set up in this process (for weft_get_info). */
bool weft__uring_in_use(void);

/* weft_get_stats: io_uring_enter calls that submitted requests, waits of carriers in their rings (blocking
 * or a look), and owned-socket reads that were ring requests. All carriers. */
uint64_t weft__uring_submissions(void);
uint64_t weft__uring_ring_waits(void);
uint64_t weft__uring_recvs(void);
uint64_t weft__uring_sends(void);
uint64_t weft__uring_sends_behind(void);

#endif /* WEFT_IO_URING_H */
