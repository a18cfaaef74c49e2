/*
 * This file contains the calls on owned descriptors (weft_fd_*, weft.h).
 * The slots, their readiness and their waits are the poller's
 * (poll/owned.h); here is the shape shared by every call:
 *
 *   take a reference on the handle (a closed one fails with -EBADF);
 *   loop: note the direction's edge counter; try the operation, unless the
 *         last try in this direction said EAGAIN and no edge came since;
 *         on EAGAIN wait, a fiber for the counter to move (its first wait
 *         registers the descriptor), a thread in poll(2);
 *   let go of the reference (the last one out of a closed slot closes it).
 *
 * A plain thread does not use the registration: it blocks in poll(2), in
 * slices of THREAD_SLICE_MS so that weft_fd_close and cancellation reach it.
 *
 * A fiber's read or write of a socket skips all that where its carrier
 * reads sockets through its io_uring (WEFT_IO_URING=2, the default): it is
 * one receive or send request on the ring (poll/uring.h), and falls back on
 * the loop above only where that cannot be (no ring, or another fiber's
 * request in the same direction already in flight on the socket).
 */
#include "../base/clock.h"
#include "../base/internal.h"

#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "../base/sys.h"
#include "../fiber/fiber.h"
#include "../poll/owned.h"
#include "../poll/uring.h"
#include "../sync/tctx.h"
#include "fd.h"

#define THREAD_SLICE_MS 20

/* --- waiting --------------------------------------------------------------------------------- */

/* A thread: poll(2) until ready, the deadline, close or cancellation. revents (> 0) or -errno. */
static int wait_thread(weft__oslot *s, short events, int64_t deadline_ns) {
  for (;;) {
    if (weft__owned_closing(s)) return -EBADF;
    if (weft__tctx_cancelled()) return -ECANCELED;
    int ms = THREAD_SLICE_MS;
    if (deadline_ns == 0) {
      ms = 0;
    } else if (deadline_ns > 0) {
      int64_t left = deadline_ns - weft__mono_ns();
      if (left <= 0) return -ETIMEDOUT;
      int64_t m = (left + 999999) / 1000000; /* never wake before the deadline */
      if (m < ms) ms = (int)m;
    }
    struct pollfd pfd = {.fd = s->fd, .events = events};
    int n = poll(&pfd, 1, ms);
    if (n > 0) return (pfd.revents & POLLNVAL) ? -EBADF : pfd.revents;
    if (n < 0 && errno != EINTR) return -errno;
    if (n == 0 && deadline_ns == 0) return -ETIMEDOUT;
  }
}

/*
 * Wait for direction `write` of s after a try that said EAGAIN with the edge
 * counter at `seen`. 0 (try again) or a negative errno.
 */
static int wait_dir(weft__oslot *s, bool write, unsigned seen, int64_t deadline_ns) {
  if (deadline_ns == 0) return -ETIMEDOUT;
  weft__fiber *self = weft__parkable_self();
  if (!self) {
    int w = wait_thread(s, write ? POLLOUT : POLLIN, deadline_ns);
    return w < 0 ? w : 0;
  }
  int rc = weft__owned_register(s, weft__fiber_lasting_poller(self), !write);
  if (rc < 0) return rc;
  return weft__owned_wait(s, write, seen, deadline_ns);
}

/* --- the transfer loop ------------------------------------------------------------------------ */

typedef ssize_t (*attempt_fn)(weft__oslot *s, void *ctx);

/*
 * Run `attempt` on direction `write` until it does not say EAGAIN. The
 * "known empty" skip: a fiber whose last try found nothing, with no edge
 * since, waits before trying. A thread always tries first (its wait is
 * poll(2), which looks at the descriptor itself).
 */
static ssize_t op_loop(weft__oslot *s, bool write, int64_t deadline_ns, attempt_fn attempt, void *ctx,
                       unsigned *seen_out) {
  weft__odir *d = write ? &s->wr : &s->rd;
  bool fiber = weft__parkable_self() != NULL;
  for (;;) {
    unsigned seen = atomic_load(&d->edges);
    if (!(fiber && deadline_ns != 0 && atomic_load_explicit(&d->empty, memory_order_relaxed) &&
          atomic_load_explicit(&d->empty_at, memory_order_relaxed) == seen)) {
      ssize_t r = attempt(s, ctx);
      if (r != -EAGAIN && r != -EWOULDBLOCK) {
        atomic_store_explicit(&d->empty, false, memory_order_relaxed);
        if (seen_out) *seen_out = seen;
        return r;
      }
      atomic_store_explicit(&d->empty_at, seen, memory_order_relaxed);
      atomic_store_explicit(&d->empty, true, memory_order_relaxed);
    }
    int w = wait_dir(s, write, seen, deadline_ns);
    if (w < 0) return w;
  }
}

static ssize_t neg(ssize_t r) { return r < 0 ? -errno : r; }

typedef struct rw_ctx {
  const struct iovec *iov;
  int iovcnt;
  int inq; /* after a read with TCP_INQ (s->inq): the bytes it left in the receive queue; else -1 */
} rw_ctx;

/*
 * A read of a TCP socket with TCP_INQ on: recvmsg, whose control message
 * says how much the read left behind (owned.h, weft__owned_drained). The
 * same one system call as read(2); it spares the read that would only say
 * EAGAIN after a read that filled its buffer.
 */
static ssize_t try_recv_inq(weft__oslot *s, rw_ctx *c) {
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int))];
  } ctl;
  struct msghdr m;
  ssize_t r;
  do {
    m = (struct msghdr){.msg_iov = (struct iovec *)c->iov,
                        .msg_iovlen = (size_t)c->iovcnt,
                        .msg_control = ctl.buf,
                        .msg_controllen = sizeof ctl.buf};
    r = recvmsg(s->fd, &m, 0);
  } while (r < 0 && errno == EINTR);
  c->inq = -1;
  if (r > 0)
    for (struct cmsghdr *h = CMSG_FIRSTHDR(&m); h; h = CMSG_NXTHDR(&m, h))
      if (h->cmsg_level == IPPROTO_TCP && h->cmsg_type == TCP_CM_INQ && h->cmsg_len >= CMSG_LEN(sizeof(int)))
        memcpy(&c->inq, CMSG_DATA(h), sizeof c->inq);
  return neg(r);
}

#ifdef WEFT_TESTING
static atomic_ulong test_reads, test_ring_lends;
#define TEST_READ()      atomic_fetch_add_explicit(&test_reads, 1, memory_order_relaxed)
#define TEST_RING_LEND() atomic_fetch_add_explicit(&test_ring_lends, 1, memory_order_relaxed)
#else
#define TEST_READ()      ((void)0)
#define TEST_RING_LEND() ((void)0)
#endif

long weft__fd_test_lent_buffers(void) { return weft__uring_test_lent(); }

unsigned long weft__fd_test_ring_lends(void) {
#ifdef WEFT_TESTING
  return atomic_load_explicit(&test_ring_lends, memory_order_relaxed);
#else
  return 0;
#endif
}

unsigned long weft__fd_test_reads(void) {
#ifdef WEFT_TESTING
  return atomic_load_explicit(&test_reads, memory_order_relaxed);
#else
  return 0;
#endif
}

static ssize_t try_read(weft__oslot *s, void *arg) {
  rw_ctx *c = arg;
  TEST_READ();
  if (s->inq) return try_recv_inq(s, c);
  ssize_t r;
  do
    r = c->iovcnt == 1 ? read(s->fd, c->iov[0].iov_base, c->iov[0].iov_len) : readv(s->fd, c->iov, c->iovcnt);
  while (r < 0 && errno == EINTR);
  return neg(r);
}

static ssize_t try_write(weft__oslot *s, void *arg) {
  rw_ctx *c = arg;
  ssize_t r;
  do {
    if (s->socket) {
      struct msghdr m = {.msg_iov = (struct iovec *)c->iov, .msg_iovlen = (size_t)c->iovcnt};
      r = c->iovcnt == 1 ? send(s->fd, c->iov[0].iov_base, c->iov[0].iov_len, MSG_NOSIGNAL)
                         : sendmsg(s->fd, &m, MSG_NOSIGNAL);
    } else {
      r = c->iovcnt == 1 ? write(s->fd, c->iov[0].iov_base, c->iov[0].iov_len)
                         : writev(s->fd, c->iov, c->iovcnt);
    }
  } while (r < 0 && errno == EINTR);
  return neg(r);
}

static bool iov_ok(const struct iovec *iov, int iovcnt, size_t *total) {
  if (!iov || iovcnt < 1 || iovcnt > IOV_MAX) return false;
  size_t sum = 0;
  for (int i = 0; i < iovcnt; i++) {
    if (!iov[i].iov_base && iov[i].iov_len) return false;
    if (iov[i].iov_len > SSIZE_MAX - sum) return false;
    sum += iov[i].iov_len;
  }
  *total = sum;
  return true;
}

/* Take a reference for a call, after the checks that need none. */
static weft__oslot *enter(weft_fd f, int64_t deadline_ns, int *err) {
  if (!weft__deadline_ok(deadline_ns)) {
    *err = -EINVAL;
    return NULL;
  }
  weft__oslot *s = weft__owned_acquire(f.id_);
  if (!s) {
    *err = -EBADF;
    return NULL;
  }
  if (weft__tctx_cancelled()) {
    weft__owned_release(s);
    *err = -ECANCELED;
    return NULL;
  }
  return s;
}

static void lend_give_back(weft__oslot *s, weft__lend *l);

/*
 * Bytes a lend left (weft__lend), when no lend is outstanding: copied into
 * iov; 0 when none. A ring's buffer whose bytes are all taken goes back.
 */
static size_t lend_take(weft__oslot *s, const struct iovec *iov, int iovcnt) {
  weft__lend *l = atomic_load_explicit(&s->lend, memory_order_acquire);
  if (!l) return 0;
  size_t n = 0;
  bool give = false;
  weft__lock_acquire(&s->lock);
  if (!l->lent && (l->len || l->ring_len)) {
    bool ring = l->ring_len != 0;
    const unsigned char *from = ring ? l->ring_at : l->buf + l->head;
    size_t have = ring ? l->ring_len : l->len;
    for (int i = 0; i < iovcnt && n < have; i++) {
      size_t c = iov[i].iov_len < have - n ? iov[i].iov_len : have - n;
      if (c) memcpy(iov[i].iov_base, from + n, c);
      n += c;
    }
    if (ring) {
      l->ring_at += n;
      l->ring_len -= n;
      /* All of it taken: the buffer goes back, marked lent until then (a lend meanwhile waits its turn). */
      if (!l->ring_len) {
        give = true;
        l->lent = SIZE_MAX;
      }
    } else {
      l->head += n;
      l->len -= n;
      if (!l->len) l->head = 0;
    }
  }
  weft__lock_release(&s->lock);
  if (give) lend_give_back(s, l);
  return n;
}

/*
 * A read of slot s (the caller holds a reference). With `lent` (a lend), a
 * ring's buffer may be lent instead of a copy in iov: *lent says where.
 */
static ssize_t read_slot(weft__oslot *s, const struct iovec *iov, int iovcnt, size_t total,
                         int64_t deadline_ns, const void **lent) {
  /*
   * A stream socket: its reads are a multishot receive on a carrier's ring
   * once a fiber on a carrier that reads sockets through its ring has read
   * it (uring.h): the kernel receives whatever comes, and a read takes it
   * from there, or waits for it. Every reader of such a socket, a thread
   * too, reads what that receive delivered.
   */
  if (s->stream) {
    weft__fiber *me = weft__parkable_self();
    weft__poller *p = me ? weft__fiber_poller(me) : NULL;
    int64_t rr = lent ? weft__uring_rx_lend(p, s, iov, iovcnt, deadline_ns, lent)
                      : weft__uring_rx_read(p, s, iov, iovcnt, deadline_ns);
    if (rr != -ENOSYS) return (ssize_t)rr;
  }
  /*
   * Another socket's read on a fiber (a datagram's): a receive on its
   * carrier's ring, where the carrier reads sockets there. The kernel tries
   * it when the carrier next enters the ring, and completes it when data
   * comes: no read of its own, no read that says EAGAIN, no wait for an edge.
   */
  weft__fiber *self = s->socket && deadline_ns != 0 ? weft__parkable_self() : NULL;
  if (self && weft__uring_sockets(weft__fiber_poller(self))) {
    weft__fiber_stay(self, true); /* the request is on this carrier's ring */
    int64_t rr = weft__uring_recv(weft__fiber_poller(self), s, iov, iovcnt, deadline_ns);
    weft__fiber_stay(self, false);
    if (rr != -ENOSYS) return (ssize_t)rr;
  }
  rw_ctx c = {iov, iovcnt, -1};
  unsigned seen = 0;
  ssize_t r = op_loop(s, false, deadline_ns, try_read, &c, &seen);
  /*
   * The read emptied a TCP socket's receive queue (the kernel's count, else
   * a short read): the next read waits for an edge before it tries (owned.h,
   * weft__owned_drained). In a request-reply exchange that saves the read
   * that would only say EAGAIN.
   */
  bool emptied = c.inq >= 0 ? c.inq == 0 : (size_t)r < total;
  if (r > 0 && emptied && weft__owned_drained(s)) {
    atomic_store_explicit(&s->rd.empty_at, seen, memory_order_relaxed);
    atomic_store_explicit(&s->rd.empty, true, memory_order_relaxed);
  }
  return r;
}

static ssize_t readv_owned(weft_fd f, const struct iovec *iov, int iovcnt, size_t total,
                           int64_t deadline_ns) {
  int err;
  weft__oslot *s = enter(f, deadline_ns, &err);
  if (!s) return err;
  /* What a lend's caller left comes first. */
  ssize_t r = total ? (ssize_t)lend_take(s, iov, iovcnt) : 0;
  if (r == 0) r = read_slot(s, iov, iovcnt, total, deadline_ns, NULL);
  weft__owned_release(s);
  return r;
}

/* Write every byte of iov (the caller's array is not changed: a copy advances). */
#define IOV_ON_STACK 8
static ssize_t writev_owned(weft_fd f, const struct iovec *iov, int iovcnt, size_t total,
                            int64_t deadline_ns) {
  int err;
  weft__oslot *s = enter(f, deadline_ns, &err);
  if (!s) return err;
  struct iovec local[IOV_ON_STACK], *v = local;
  if (iovcnt > IOV_ON_STACK) {
    v = weft__malloc((size_t)iovcnt * sizeof *v);
    if (!v) {
      weft__owned_release(s);
      return -ENOMEM;
    }
  }
  for (int i = 0; i < iovcnt; i++) v[i] = iov[i];
  rw_ctx c = {v, iovcnt, -1};
  size_t done = 0;
  ssize_t r = 0;
  /* A fiber's write of a socket: send requests on its carrier's ring, where its reads are receives there. */
  weft__fiber *self = s->socket && deadline_ns != 0 ? weft__parkable_self() : NULL;
  bool ring = self && weft__uring_sockets(weft__fiber_poller(self));
  while (done < total) {
    /* A write of this socket that went behind (uring.h) ends before the next bytes go, and its error is
     * this write's. */
    if (weft__uring_wb_busy(s)) {
      r = weft__uring_wb_wait(s, deadline_ns);
      if (r < 0) break;
    }
    r = weft__uring_wb_error(s);
    if (r < 0) break;
    r = -ENOSYS;
    if (ring) {
      weft__fiber_stay(self, true); /* the request is on this carrier's ring */
      r = (ssize_t)weft__uring_send(weft__fiber_poller(self), s, c.iov, c.iovcnt, deadline_ns);
      weft__fiber_stay(self, false);
      if (r == -EINPROGRESS) continue; /* another writer's went behind just now: wait for it */
      ring = r != -ENOSYS;
      if (r == -EAGAIN) r = -ENOSYS; /* the kernel did not wait for room: wait the ordinary way */
    }
    if (r == -ENOSYS) r = op_loop(s, true, deadline_ns, try_write, &c, NULL);
    if (r < 0) break;
    done += (size_t)r;
    /* Step over what went out. */
    size_t k = (size_t)r;
    while (c.iovcnt > 0 && k >= c.iov[0].iov_len) {
      k -= c.iov[0].iov_len;
      c.iov++;
      c.iovcnt--;
    }
    if (c.iovcnt > 0 && k) {
      struct iovec *first = (struct iovec *)c.iov;
      first->iov_base = (char *)first->iov_base + k;
      first->iov_len -= k;
    }
    /* Zero-length vectors left at the end: nothing more to write. */
    while (c.iovcnt > 0 && c.iov[0].iov_len == 0) {
      c.iov++;
      c.iovcnt--;
    }
    if (c.iovcnt == 0) break;
  }
  if (v != local) weft__free(v);
  weft__owned_release(s);
  if (r < 0 && done == 0) return r;
  return (ssize_t)done;
}

/* --- the calls ---------------------------------------------------------------------------------- */

/*
 * Make fd an owned descriptor. `inq`: INQ_TRY turns TCP_INQ on for a TCP
 * socket where the kernel allows (without it reads fall back on the
 * short-read rule: nothing is lost); an accepted connection passes its
 * listener's state instead (INQ_ON or INQ_OFF), which the kernel copied
 * into it with the rest of the listener's socket: no system call per
 * connection.
 */
enum { INQ_OFF, INQ_ON, INQ_TRY };
static int own(int fd, bool socket, bool tcp, bool stream, int inq, bool set_nonblock, int old_flags,
               weft_fd *out) {
  if (set_nonblock) {
    int rc = weft__setfl(fd, old_flags | O_NONBLOCK);
    if (rc < 0) return rc;
  }
  if (inq == INQ_TRY) inq = tcp && weft__tcp_inq_on(fd) == 0 ? INQ_ON : INQ_OFF;
  uint64_t id;
  int rc = weft__owned_new(fd, socket, tcp, inq == INQ_ON, stream, &id);
  if (rc < 0) {
    if (set_nonblock) fcntl(fd, F_SETFL, old_flags); /* as it was */
    return rc;
  }
  out->id_ = id;
  return 0;
}

/*
 * A socket's kind: a stream (SO_TYPE), whose ring reads may be a multishot
 * receive (poll/uring.h: bytes without boundaries can be kept for the next
 * read), and of those TCP (SO_PROTOCOL), whose short reads drain it
 * (poll/owned.h). A Unix stream socket is not counted as a stream here: its
 * reads are one-shot ring receives, as a datagram socket's. Linux 6.18's
 * multishot receive on an AF_UNIX stream delivers every byte but, once some
 * 33 completions have come in a row, never the end of the stream, so a
 * fiber that had read every byte waited for ever (found by the soak,
 * reproduced with liburing alone; test ownfd/unix_stream_end). TCP is not
 * affected.
 */
static void sock_kind(int fd, bool *tcp, bool *stream) {
  int proto = 0, type = 0, domain = 0;
  socklen_t l1 = sizeof proto, l2 = sizeof type, l3 = sizeof domain;
  *stream = getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &l2) == 0 && type == SOCK_STREAM &&
            !(getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &l3) == 0 && domain == AF_UNIX);
  *tcp = *stream && getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &l1) == 0 && proto == IPPROTO_TCP;
}

int weft_fd_open(int fd, weft_fd *out) {
  if (!out || fd < 0) return -EINVAL;
  struct stat st;
  if (fstat(fd, &st) != 0) return -errno;
  /* epoll refuses these (EPERM): they are always "ready", and a read may block on the disk. */
  if (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode) || S_ISDIR(st.st_mode)) return -EPERM;
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0) return -errno;
  bool sock = S_ISSOCK(st.st_mode), tcp = false, stream = false;
  if (sock) sock_kind(fd, &tcp, &stream);
  return own(fd, sock, tcp, stream, INQ_TRY, !(fl & O_NONBLOCK), fl, out);
}

int weft_fd_socket(int domain, int type, int protocol, weft_fd *out) {
  if (!out) return -EINVAL;
  int fd = weft__socket(domain, type | SOCK_NONBLOCK | SOCK_CLOEXEC, protocol);
  if (fd < 0) return fd;
  bool tcp, stream;
  sock_kind(fd, &tcp, &stream);
  int rc = own(fd, true, tcp, stream, INQ_TRY, false, 0, out);
  if (rc < 0) close(fd);
  return rc;
}

int weft_fd_close(weft_fd f) { return weft__owned_close(f.id_); }

int weft_fd_native(weft_fd f) {
  weft__oslot *s = weft__owned_acquire(f.id_);
  if (!s) return -EBADF;
  int fd = s->fd;
  weft__owned_release(s);
  return fd;
}

ssize_t weft_fd_read(weft_fd f, void *buf, size_t len, int64_t deadline_ns) {
  if ((!buf && len) || len > SSIZE_MAX) return -EINVAL;
  struct iovec v = {buf, len};
  return readv_owned(f, &v, 1, len, deadline_ns);
}

/*
 * Lending reads. A slot's weft__lend (poll/owned.h) keeps what a lend's
 * caller left: the rest of a ring's buffer, still held (ring_at, ring_len),
 * or bytes in its own buffer, which a lend fills where no ring buffer can be
 * lent, either by taking the bytes the slot's receive kept (the two buffers
 * change places: uring.h) or by reading into it (LEND_BUF bytes, made then:
 * a slot whose lends are all ring buffers never has one). A lend holds a
 * reference on the slot until weft_fd_read_done, so that a close meanwhile
 * leaves the lent bytes alone: the descriptor closes when the lend is done,
 * and a ring buffer still held then goes back with the slot (owned.c).
 */
#define LEND_BUF 16384

static weft__lend *lend_get(weft__oslot *s) {
  weft__lend *l = atomic_load_explicit(&s->lend, memory_order_acquire);
  if (l) return l;
  weft__lend *n = weft__calloc(1, sizeof *n);
  if (!n) return NULL;
  weft__lend *none = NULL;
  if (!atomic_compare_exchange_strong(&s->lend, &none, n)) weft__free(n);
  return atomic_load(&s->lend);
}

/* The ring buffer that l held goes back; l was marked lent (SIZE_MAX) by the caller, and is not after. */
static void lend_give_back(weft__oslot *s, weft__lend *l) {
  weft__uring_rx_lend_done(s);
  weft__lock_acquire(&s->lock);
  l->ring_at = NULL;
  l->ring_len = 0;
  l->lent = 0;
  l->lent_ring = false;
  weft__lock_release(&s->lock);
}

ssize_t weft_fd_read_lend(weft_fd f, const void **data, int64_t deadline_ns) {
  if (!data) return -EINVAL;
  int err;
  weft__oslot *s = enter(f, deadline_ns, &err);
  if (!s) return err;
  weft__lend *l = lend_get(s);
  if (!l) {
    weft__owned_release(s);
    return -ENOMEM;
  }
  weft__lock_acquire(&s->lock);
  if (l->lent) { /* one lend at a time */
    weft__lock_release(&s->lock);
    weft__owned_release(s);
    return -EBUSY;
  }
  /* What an earlier lend left comes first, where it is. */
  if (l->ring_len || l->len) {
    bool ring = l->ring_len != 0;
    l->lent = ring ? l->ring_len : l->len;
    l->lent_ring = ring;
    *data = ring ? l->ring_at : l->buf + l->head;
    ssize_t n = (ssize_t)l->lent;
    weft__lock_release(&s->lock);
    return n; /* the reference stays with the lend */
  }
  /* Marked lent while it reads, so that a second lend says -EBUSY and reads leave the lend alone. */
  l->lent = SIZE_MAX;
  l->head = 0;
  weft__lock_release(&s->lock);
  ssize_t r = -ENOSYS;
  const void *ring = NULL;
  if (s->stream) {
    /* No buffer of ours needed: a ring's buffer is lent, or the kept bytes change places with ours. */
    weft__fiber *me = weft__parkable_self();
    struct iovec none = {NULL, 0};
    r = (ssize_t)weft__uring_rx_lend(me ? weft__fiber_poller(me) : NULL, s, &none, 1, deadline_ns, &ring);
  }
  if (r == -ENOSYS && !l->buf) {
    l->buf = weft__malloc(LEND_BUF);
    if (l->buf) l->cap = LEND_BUF;
  }
  if (r == -ENOSYS) {
    if (l->buf) {
      struct iovec v = {l->buf, l->cap};
      r = read_slot(s, &v, 1, l->cap, deadline_ns, NULL);
    } else {
      r = -ENOMEM;
    }
  }
  weft__lock_acquire(&s->lock);
  if (r > 0 && ring) {
    l->ring_at = ring;
    l->ring_len = (size_t)r;
    l->lent_ring = true;
    *data = ring;
    TEST_RING_LEND();
  } else if (r > 0) {
    /* Read into our buffer, or our buffer and the slot's changed places (head and len set then). */
    if (!l->len) {
      l->head = 0;
      l->len = (size_t)r;
    }
    l->lent_ring = false;
    *data = l->buf + l->head;
  }
  l->lent = r > 0 ? (size_t)r : 0;
  weft__lock_release(&s->lock);
  if (r <= 0) weft__owned_release(s);
  return r;
}

void weft_fd_read_done(weft_fd f, size_t used) {
  /* The lend's reference keeps the slot (and its generation) even after a close: no acquire here. */
  uint32_t low = (uint32_t)f.id_;
  weft__oslot *s = low ? weft__owned_at(low - 1) : NULL;
  if (!s || atomic_load(&s->gen) != (unsigned)(f.id_ >> 32)) return;
  weft__lend *l = atomic_load_explicit(&s->lend, memory_order_acquire);
  if (!l) return;
  weft__lock_acquire(&s->lock);
  size_t n = l->lent;
  if (n == 0 || n == SIZE_MAX) { /* no lend outstanding (or one still reading): nothing to do */
    weft__lock_release(&s->lock);
    return;
  }
  if (used > n) used = n;
  bool give = false;
  if (l->lent_ring) {
    /* The rest stays in the ring's buffer, held for the next read; all of it used: the buffer goes back
     * (marked lent until then). */
    l->ring_at += used;
    l->ring_len -= used;
    give = l->ring_len == 0;
  } else {
    l->head += used;
    l->len -= used;
    if (!l->len) l->head = 0;
  }
  l->lent = give ? SIZE_MAX : 0;
  weft__lock_release(&s->lock);
  if (give) lend_give_back(s, l);
  weft__owned_release(s); /* the lend's reference: a close that came meanwhile closes now */
}

ssize_t weft_fd_readv(weft_fd f, const struct iovec *iov, int iovcnt, int64_t deadline_ns) {
  size_t total;
  if (!iov_ok(iov, iovcnt, &total)) return -EINVAL;
  return readv_owned(f, iov, iovcnt, total, deadline_ns);
}

ssize_t weft_fd_write(weft_fd f, const void *buf, size_t len, int64_t deadline_ns) {
  if ((!buf && len) || len > SSIZE_MAX) return -EINVAL;
  struct iovec v = {(void *)buf, len};
  return writev_owned(f, &v, 1, len, deadline_ns);
}

ssize_t weft_fd_writev(weft_fd f, const struct iovec *iov, int iovcnt, int64_t deadline_ns) {
  size_t total;
  if (!iov_ok(iov, iovcnt, &total)) return -EINVAL;
  return writev_owned(f, iov, iovcnt, total, deadline_ns);
}

typedef struct accept_ctx {
  struct sockaddr *addr;
  socklen_t *addrlen;
} accept_ctx;

static ssize_t try_accept(weft__oslot *s, void *arg) {
  accept_ctx *a = arg;
  for (;;) {
    int c = weft__accept4(s->fd, a->addr, a->addrlen, SOCK_NONBLOCK | SOCK_CLOEXEC);
    /* A connection reset before we took it is not the listener's failure: take the next. */
    if (c == -ECONNABORTED) continue;
    return c;
  }
}

int weft_fd_accept(weft_fd listener, struct sockaddr *addr, socklen_t *addrlen, weft_fd *out,
                   int64_t deadline_ns) {
  if (!out || (addr && !addrlen)) return -EINVAL;
  int err;
  weft__oslot *s = enter(listener, deadline_ns, &err);
  if (!s) return err;
  if (!s->socket) {
    weft__owned_release(s);
    return -ENOTSOCK;
  }
  /* A socket that does not listen would never be ready: say so instead of waiting forever. */
  int listening = 0;
  socklen_t sl = sizeof listening;
  if (getsockopt(s->fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &sl) != 0 || !listening) {
    weft__owned_release(s);
    return -EINVAL;
  }
  accept_ctx a = {addr, addrlen};
  ssize_t c = op_loop(s, false, deadline_ns, try_accept, &a, NULL);
  weft__owned_release(s);
  if (c < 0) return (int)c;
  /* A TCP listener's connections are TCP, and inherit its TCP_INQ (the kernel clones the listener's socket).
   */
  int rc = own((int)c, true, s->tcp, s->stream, s->inq ? INQ_ON : INQ_OFF, false, 0, out);
  if (rc < 0) close((int)c);
  return rc;
}

int weft_fd_connect(weft_fd f, const struct sockaddr *addr, socklen_t addrlen, int64_t deadline_ns) {
  if (!addr) return -EINVAL;
  int err;
  weft__oslot *s = enter(f, deadline_ns, &err);
  if (!s) return err;
  unsigned seen = atomic_load(&s->wr.edges);
  int rc = connect(s->fd, addr, addrlen);
  if (rc != 0) rc = -errno;
  /* EINTR: the connection goes on in the background, as with EINPROGRESS. */
  if (rc == -EINPROGRESS || rc == -EINTR) {
    rc = 0;
    for (;;) {
      struct pollfd p = {.fd = s->fd, .events = POLLOUT};
      if (poll(&p, 1, 0) > 0) break; /* connected, or failed: SO_ERROR says which */
      rc = wait_dir(s, true, seen, deadline_ns);
      if (rc < 0) break;
      seen = atomic_load(&s->wr.edges);
    }
    if (rc >= 0) {
      int soerr = 0;
      socklen_t sl = sizeof soerr;
      rc = getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0 ? -errno : -soerr;
    }
  }
  weft__owned_release(s);
  return rc;
}

/* Bytes that a lend's caller left, to be read (weft_fd_poll: readable)? */
static bool lend_ready(weft__oslot *s) {
  weft__lend *l = atomic_load_explicit(&s->lend, memory_order_acquire);
  if (!l) return false;
  weft__lock_acquire(&s->lock);
  bool ready = (l->len || l->ring_len) && !l->lent;
  weft__lock_release(&s->lock);
  return ready;
}

int weft_fd_poll(weft_fd f, short events, int64_t deadline_ns) {
  bool rd = events & POLLIN, wr = events & POLLOUT;
  if (rd == wr) return -EINVAL; /* exactly one direction */
  int err;
  weft__oslot *s = enter(f, deadline_ns, &err);
  if (!s) return err;
  int rc;
  for (;;) {
    unsigned seen = atomic_load(wr ? &s->wr.edges : &s->rd.edges);
    /* Bytes (or the end) that a multishot receive took from the socket are still to be read. */
    if (rd && (weft__uring_rx_ready(s) || lend_ready(s))) {
      rc = POLLIN;
      break;
    }
    struct pollfd p = {.fd = s->fd, .events = events};
    int n = poll(&p, 1, 0);
    if (n > 0) {
      rc = p.revents;
      break;
    }
    if (n < 0 && errno != EINTR) {
      rc = -errno;
      break;
    }
    rc = wait_dir(s, wr, seen, deadline_ns);
    if (rc < 0) break;
  }
  weft__owned_release(s);
  return rc;
}
