/*
 * This file contains weft's fiber-aware I/O calls (weft_read, weft_write,
 * weft_recv, weft_send, weft_accept, weft_connect, weft_poll_fd).
 *
 * Every call has the same shape: try the operation without blocking; if the
 * descriptor is not ready, wait for it (a fiber parks in its carrier's
 * poller, a thread sleeps in poll(2)), then try again. How to try without
 * blocking, and without touching the caller's descriptor flags, depends on
 * what the descriptor is:
 *
 *   socket            recv/send with MSG_DONTWAIT (and MSG_NOSIGNAL: a closed
 *                     peer gives -EPIPE, never SIGPIPE);
 *   pipe, FIFO, tty   if the caller made it O_NONBLOCK, read/write; else wait
 *                     for readiness first, then one read (which then returns
 *                     what is there) or one write of at most PIPE_BUF bytes
 *                     (which POLLOUT guarantees to fit);
 *   regular file,     always "ready" for epoll, and a read that misses the
 *   block device      page cache blocks: on a fiber it goes to the carrier's
 *                     io_uring, else to the offload pool; on a thread it is a
 *                     plain read/write.
 *
 * weft_read and weft_write tell a socket by trying recv/send first (ENOTSOCK
 * costs one failed system call for the other kinds), then look at fstat.
 *
 * Regular files on a fiber go through the carrier's io_uring (uring.c)
 * where it has one. Sockets and pipes do not, by measurement: with carriers
 * that sleep in epoll_wait, each socket completion interrupts the carrier
 * (task work), and at 1,000 echo connections the ring path ran 10 times
 * slower than epoll on the 2-core VM of docs/benchmarks.md. A ring that is
 * the carriers' only waiting point (io_uring_enter instead of epoll_wait) is
 * the way to batch socket I/O; until then epoll serves them.
 */
#include "../base/clock.h"
#include "../base/internal.h"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../fiber/fiber.h"
#include "../sync/wait.h"
#include "offload.h"
#include "../poll/poller.h"
#include "../poll/uring.h"

/* --- waiting for a descriptor -------------------------------------------------------- */

/*
 * A plain thread: poll(2) until the deadline, absorbing EINTR. A thread that
 * runs a future (the fallback) polls in slices, so that a cancellation is
 * seen within CANCEL_SLICE_MS even though nothing can interrupt poll.
 */
#define CANCEL_SLICE_MS 20

static int wait_thread(int fd, short events, int64_t deadline_ns) {
  bool sliced = weft__tctx_in_work();
  for (;;) {
    if (weft__tctx_cancelled()) return -ECANCELED;
    int ms = -1;
    if (deadline_ns == 0) {
      ms = 0;
    } else if (deadline_ns > 0) {
      int64_t left = deadline_ns - weft__mono_ns();
      if (left <= 0) return -ETIMEDOUT;
      /* Round up: never wake before the deadline. Cap so a huge deadline cannot overflow. */
      int64_t m = (left + 999999) / 1000000;
      ms = m > INT_MAX ? INT_MAX : (int)m;
    }
    if (sliced && (ms < 0 || ms > CANCEL_SLICE_MS)) ms = CANCEL_SLICE_MS;
    struct pollfd pfd = {.fd = fd, .events = events};
    int n = poll(&pfd, 1, ms);
    if (n > 0) return (pfd.revents & POLLNVAL) ? -EBADF : pfd.revents;
    if (n == 0) {
      if (deadline_ns == 0 || (deadline_ns > 0 && weft__mono_ns() >= deadline_ns)) return -ETIMEDOUT;
      continue;
    }
    if (errno != EINTR) return -errno;
  }
}

/* Wait until fd is ready for `events`: returns revents (> 0) or a negative errno. */
static int wait_ready(int fd, short events, int64_t deadline_ns) {
  weft__fiber *self = weft__parkable_self();
  if (!self) return wait_thread(fd, events, deadline_ns);
  if (deadline_ns == 0) return wait_thread(fd, events, 0); /* just look */
  /* The wait lives in this carrier's poller table: the fiber resumes here (WEFT_MIGRATE or not). */
  weft__fiber_stay(self, true);
  int rc = weft__poller_wait_fd(weft__fiber_poller(self), fd, events, deadline_ns);
  weft__fiber_stay(self, false);
  /* A descriptor that epoll refuses (EPERM) can only be waited for by blocking the carrier. */
  if (rc == -EPERM) return wait_thread(fd, events, deadline_ns);
  return rc;
}

/* --- classifying a descriptor ------------------------------------------------------------ */

enum fdkind { K_SOCKET, K_STREAM_NB, K_STREAM_BLOCKING, K_FILE };

/* What fd is (not a socket: the caller has tried that). Negative errno on failure. */
static int classify(int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0) return -errno;
  if (S_ISSOCK(st.st_mode)) return K_SOCKET;
  if (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode)) return K_FILE;
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0) return -errno;
  return (fl & O_NONBLOCK) ? K_STREAM_NB : K_STREAM_BLOCKING;
}

/* --- regular files --------------------------------------------------------------------- */

typedef struct file_op {
  int fd;
  void *buf;
  size_t len;
  bool write;
} file_op;

static void *file_op_run(void *arg) {
  file_op *op = arg;
  ssize_t r;
  do r = op->write ? write(op->fd, op->buf, op->len) : read(op->fd, op->buf, op->len);
  while (r < 0 && errno == EINTR);
  return (void *)(intptr_t)(r < 0 ? -errno : r);
}

static ssize_t file_rw(int fd, void *buf, size_t len, bool write) {
  file_op op = {fd, buf, len, write};
  weft__fiber *self = weft__parkable_self();
  if (!self) return (ssize_t)(intptr_t)file_op_run(&op);
  weft__uring_req q = {.write = write, .fd = fd, .buf = buf, .len = len};
  weft__fiber_stay(self, true); /* the request is on this carrier's ring */
  int64_t r = weft__uring_run(weft__fiber_poller(self), &q, -1);
  weft__fiber_stay(self, false);
  if (r != -ENOSYS) return (ssize_t)r;
  void *res = NULL;
  int rc = weft__offload_run(file_op_run, &op, &res);
  return rc < 0 ? rc : (ssize_t)(intptr_t)res;
}

/* --- the transfer loop ------------------------------------------------------------------ */

enum op { OP_READ, OP_WRITE, OP_RECV, OP_SEND };

static ssize_t attempt(enum op op, int kind, int fd, void *buf, size_t len, int flags) {
  ssize_t r;
  do {
    switch (op) {
    case OP_RECV:
      r = recv(fd, buf, len, flags | MSG_DONTWAIT);
      break;
    case OP_SEND:
      r = send(fd, buf, len, flags | MSG_DONTWAIT | MSG_NOSIGNAL);
      break;
    case OP_READ:
      r = kind == K_SOCKET ? recv(fd, buf, len, MSG_DONTWAIT) : read(fd, buf, len);
      break;
    default:
      if (kind == K_SOCKET)
        r = send(fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
      else
        r = write(fd, buf, kind == K_STREAM_BLOCKING && len > PIPE_BUF ? PIPE_BUF : len);
      break;
    }
  } while (r < 0 && errno == EINTR);
  return r < 0 ? -errno : r;
}

static ssize_t transfer(enum op op, int fd, void *buf, size_t len, int flags, int64_t deadline_ns) {
  if (fd < 0) return -EBADF;
  if ((!buf && len) || !weft__deadline_ok(deadline_ns) || len > SSIZE_MAX) return -EINVAL;
  if (weft__tctx_cancelled()) return -ECANCELED;
  bool reading = op == OP_READ || op == OP_RECV;
  short ev = reading ? POLLIN : POLLOUT;
  int kind = K_SOCKET;
  /* A socket whose last reads found nothing: wait for it first (poller.h, the read hint). */
  weft__fiber *self = reading && deadline_ns != 0 ? weft__parkable_self() : NULL;
  if (self && weft__poller_read_hint(weft__fiber_poller(self), fd)) {
    int w = wait_ready(fd, ev, deadline_ns);
    if (w < 0) return w;
  }
  ssize_t r = attempt(op, kind, fd, buf, len, flags);
  if (self && (r == -EAGAIN || r == -EWOULDBLOCK)) weft__poller_note_dry(weft__fiber_poller(self), fd);
  if (r == -ENOTSOCK && (op == OP_READ || op == OP_WRITE)) {
    kind = classify(fd);
    if (kind < 0) return kind;
    if (kind == K_FILE) return file_rw(fd, buf, len, !reading);
    if (kind == K_STREAM_BLOCKING) {
      /* A blocking pipe or tty: only touch it once it is ready. */
      int w = wait_ready(fd, ev, deadline_ns);
      if (w < 0) return w;
    }
    r = attempt(op, kind, fd, buf, len, flags);
  }
  for (;;) {
    if (r != -EAGAIN && r != -EWOULDBLOCK) return r;
    int w = wait_ready(fd, ev, deadline_ns);
    if (w < 0) return w;
    r = attempt(op, kind, fd, buf, len, flags);
  }
}

ssize_t weft_read(int fd, void *buf, size_t len, int64_t deadline_ns) {
  return transfer(OP_READ, fd, buf, len, 0, deadline_ns);
}

ssize_t weft_write(int fd, const void *buf, size_t len, int64_t deadline_ns) {
  return transfer(OP_WRITE, fd, (void *)buf, len, 0, deadline_ns);
}

ssize_t weft_recv(int fd, void *buf, size_t len, int flags, int64_t deadline_ns) {
  return transfer(OP_RECV, fd, buf, len, flags, deadline_ns);
}

ssize_t weft_send(int fd, const void *buf, size_t len, int flags, int64_t deadline_ns) {
  return transfer(OP_SEND, fd, (void *)buf, len, flags, deadline_ns);
}

int weft_accept(int fd, struct sockaddr *addr, socklen_t *addrlen, int64_t deadline_ns) {
  if (fd < 0) return -EBADF;
  if ((addr && !addrlen) || !weft__deadline_ok(deadline_ns)) return -EINVAL;
  if (weft__tctx_cancelled()) return -ECANCELED;
  for (;;) {
    /*
     * Accept only once the listener is ready, so that a blocking listener
     * never blocks the carrier (unless another thread takes the connection
     * in between: one accepter per listener, as documented). A listener with
     * connections waiting is ready at once: one poll(2) tells, no park.
     */
    int w = wait_thread(fd, POLLIN, 0);
    if (w == -ETIMEDOUT && deadline_ns != 0) {
      /* Before waiting: a socket that does not listen would never be ready. */
      int listening = 0;
      socklen_t sl = sizeof listening;
      if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &sl) != 0) return -errno;
      if (!listening) return -EINVAL;
      w = wait_ready(fd, POLLIN, deadline_ns);
    }
    if (w < 0) return w;
    int c;
    do c = accept4(fd, addr, addrlen, SOCK_CLOEXEC);
    while (c < 0 && errno == EINTR);
    if (c >= 0) {
      weft__fiber *self = weft__parkable_self();
      if (self) weft__poller_fresh_fd(weft__fiber_poller(self), c);
      return c;
    }
    /* A connection that was reset before we took it is not the listener's failure. */
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ECONNABORTED) return -errno;
    if (deadline_ns == 0) return -ETIMEDOUT;
  }
}

int weft_connect(int fd, const struct sockaddr *addr, socklen_t addrlen, int64_t deadline_ns) {
  if (fd < 0) return -EBADF;
  if (!addr || !weft__deadline_ok(deadline_ns)) return -EINVAL;
  if (weft__tctx_cancelled()) return -ECANCELED;
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0) return -errno;
  weft__fiber *self = weft__parkable_self();
  if (self) weft__poller_fresh_fd(weft__fiber_poller(self), fd);
  /*
   * A blocking socket would block the carrier in connect(2). The one
   * exception to "weft leaves descriptor flags alone": O_NONBLOCK is set for
   * the duration of the connect call itself and put back at once.
   */
  if (!(fl & O_NONBLOCK) && fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0) return -errno;
  int r = connect(fd, addr, addrlen);
  int err = r == 0 ? 0 : errno;
  if (!(fl & O_NONBLOCK)) fcntl(fd, F_SETFL, fl);
  if (r == 0) return 0;
  /* EINTR: the connection goes on in the background, as with EINPROGRESS. */
  if (err != EINPROGRESS && err != EINTR) return -err;
  int w = wait_ready(fd, POLLOUT, deadline_ns);
  if (w < 0) return w;
  int soerr = 0;
  socklen_t sl = sizeof soerr;
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0) return -errno;
  return -soerr;
}

int weft_poll_fd(int fd, short events, int64_t deadline_ns) {
  if (fd < 0) return -EBADF;
  if (!(events & (POLLIN | POLLOUT | POLLPRI)) || !weft__deadline_ok(deadline_ns)) return -EINVAL;
  if (weft__tctx_cancelled()) return -ECANCELED;
  /* Ready already? One poll(2) answers, and works for regular files too. */
  int now = wait_thread(fd, events, 0);
  if (now != -ETIMEDOUT) return now;
  return wait_ready(fd, events, deadline_ns);
}
