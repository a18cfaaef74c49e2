/*
 * This file contains the Linux poller (see poller.h): one epoll instance per
 * carrier, with an eventfd for wake-ups, epoll_pwait2 for nanosecond
 * timeouts where the kernel has it (Linux 5.11; else epoll_wait with the
 * timeout rounded up to the next millisecond, never early), and the
 * descriptor waits of the carrier's fibers.
 *
 * Once the carrier has set up its io_uring (uring.h), it waits there
 * instead: the ring polls this epoll instance, and weft__poller_harvest
 * collects its events without waiting.
 *
 * Descriptor waits are armed one shot at a time (EPOLLONESHOT): each wait
 * arms the descriptor for what its waiters want, and each event disarms it.
 * weft does not own the descriptors it is given: the program may close one
 * and open another under the same number at any moment, and a persistent
 * registration would then silently watch nothing. A one-shot registration
 * holds no state that can go stale, and arming it on a descriptor that is
 * already ready reports the readiness at once, so no edge is lost between
 * the failed attempt (EAGAIN) and the wait. The price is one epoll_ctl per
 * wait. An event for a descriptor that was closed and reused wakes its new
 * waiter for nothing; every I/O call retries after a wake, so that costs one
 * attempt, never a wrong result.
 */
#include "poller.h"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../base/clock.h"
#include "../base/sys.h"
#include "owned.h"
#include "uring.h"

/*
 * epoll_data.u64: the kind of source in the top byte, a descriptor in the low
 * half (an owned descriptor's slot: its index and generation, owned.c).
 */
enum { TAG_WAKE = 1, TAG_FD = 2, TAG_OWNED = WEFT__TAG_OWNED };
#define TAG(kind, fd) (((uint64_t)(kind) << 56) | (uint32_t)(fd))

int weft__poller_init(weft__poller *p, unsigned uring, bool write_behind) {
  p->epfd = p->wakefd = -1;
  /* Stores, not atomic_init: a reused carrier slot's poller is set up again while other
     threads scan every slot's `sleeping` (sched.c, wake_sleepers), so these are shared. */
  atomic_store_explicit(&p->sleeping, 0, memory_order_relaxed);
  p->fds = NULL;
  p->nfds = 0;
  p->waiting = 0;
  atomic_store_explicit(&p->owned_waiting, 0, memory_order_relaxed);
  p->uring = NULL;
  p->uring_mode = (uint8_t)uring;
  p->write_behind = write_behind;
  weft__lock_init(&p->rx_lock, WEFT__LOCK_LEAF);
  p->rx_cancels = NULL;
  atomic_store_explicit(&p->rx_pending, false, memory_order_relaxed);
  p->rx_closed = true; /* until its carrier has a ring (uring.c) */
  int ep = weft__epoll_create();
  if (ep < 0) return ep;
  int ev = weft__eventfd();
  if (ev < 0) {
    close(ep);
    return ev;
  }
  struct epoll_event e = {.events = EPOLLIN, .data.u64 = TAG(TAG_WAKE, 0)};
  int rc = weft__epoll_ctl(ep, EPOLL_CTL_ADD, ev, &e);
  if (rc < 0) {
    close(ev);
    close(ep);
    return rc;
  }
  p->epfd = ep;
  p->wakefd = ev;
  return 0;
}

void weft__poller_fini(weft__poller *p) {
  weft__uring_fini(p);
  if (p->wakefd >= 0) close(p->wakefd);
  if (p->epfd >= 0) close(p->epfd);
  p->epfd = p->wakefd = -1;
  weft__free(p->fds);
  p->fds = NULL;
  p->nfds = 0;
}

void weft__poller_prepare_sleep(weft__poller *p) {
  atomic_store(&p->sleeping, 1);
  /* Pairs with the fence in weft__poller_wake: either the waker sees
     sleeping == 1, or our next look for work sees what it pushed. */
  atomic_thread_fence(memory_order_seq_cst);
}

void weft__poller_cancel_sleep(weft__poller *p) {
  atomic_store_explicit(&p->sleeping, 0, memory_order_relaxed);
}

void weft__poller_wake(weft__poller *p) {
  atomic_thread_fence(memory_order_seq_cst);
  if (atomic_load_explicit(&p->sleeping, memory_order_relaxed) == 0) return;
  /* One write per sleep: whoever clears the flag writes. */
  if (atomic_exchange(&p->sleeping, 0) == 1) {
    uint64_t one = 1;
    ssize_t r = write(p->wakefd, &one, sizeof one);
    WEFT__UNUSED(r); /* EAGAIN: the counter is already non-zero, the owner will wake */
  }
}

bool weft__poller_busy(const weft__poller *p) {
  return p->waiting > 0 || atomic_load_explicit(&p->owned_waiting, memory_order_relaxed) > 0 ||
         weft__uring_busy(p);
}

/* --- descriptor waits ------------------------------------------------------------------ */

static weft__fdwait *slot(weft__poller *p, int fd) {
  if ((size_t)fd >= p->nfds) {
    size_t n = p->nfds ? p->nfds : 64;
    while (n <= (size_t)fd) n *= 2;
    weft__fdwait *t = weft__realloc(p->fds, n * sizeof *t);
    if (!t) return NULL;
    for (size_t i = p->nfds; i < n; i++) t[i] = (weft__fdwait){NULL, NULL, false, 0};
    p->fds = t;
    p->nfds = n;
  }
  return &p->fds[fd];
}

void weft__poller_fresh_fd(weft__poller *p, int fd) {
  if (fd >= 0 && (size_t)fd < p->nfds && !p->fds[fd].rd && !p->fds[fd].wr) {
    p->fds[fd].registered = false;
    p->fds[fd].dry = 0;
  }
}

bool weft__poller_read_hint(weft__poller *p, int fd) {
  if (fd < 0 || (size_t)fd >= p->nfds) return false;
  weft__fdwait *s = &p->fds[fd];
  if (s->dry == 0) return false;
  if (s->dry >= WEFT__DRY_PROBE) { /* time to try first again */
    s->dry = 0;
    return false;
  }
  s->dry++;
  return true;
}

void weft__poller_note_dry(weft__poller *p, int fd) {
  weft__fdwait *s = slot(p, fd);
  if (s && s->dry == 0) s->dry = 1;
}

/* Arm fd for what its waiters want now. */
static int arm(weft__poller *p, int fd, weft__fdwait *s) {
  struct epoll_event e = {.events = EPOLLONESHOT | EPOLLRDHUP, .data.u64 = TAG(TAG_FD, fd)};
  if (s->rd) e.events |= EPOLLIN;
  if (s->wr) e.events |= EPOLLOUT;
  int op = s->registered ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
  int rc = weft__epoll_ctl(p->epfd, op, fd, &e);
  /* The hint was stale: the descriptor was closed (and maybe reopened) since. */
  if (rc == -ENOENT && op == EPOLL_CTL_MOD)
    rc = weft__epoll_ctl(p->epfd, op = EPOLL_CTL_ADD, fd, &e);
  else if (rc == -EEXIST && op == EPOLL_CTL_ADD)
    rc = weft__epoll_ctl(p->epfd, op = EPOLL_CTL_MOD, fd, &e);
  s->registered = rc == 0;
  return rc;
}

int weft__poller_wait_fd(weft__poller *p, int fd, short events, int64_t deadline_ns) {
again:;
  weft__fdwait *s = slot(p, fd);
  if (!s) return -ENOMEM;
  bool want_rd = events & POLLIN, want_wr = events & POLLOUT;
  if ((want_rd && s->rd) || (want_wr && s->wr)) return -EBUSY;
  weft__waiter w;
  weft__waiter_init(&w, true);
  weft__waiter_on(&w, want_rd ? WEFT__WAIT_READ : WEFT__WAIT_WRITE, (const void *)(intptr_t)fd);
  if (want_rd) s->rd = &w;
  if (want_wr) s->wr = &w;
  int rc = arm(p, fd, s);
  if (rc < 0) {
    if (want_rd) s->rd = NULL;
    if (want_wr) s->wr = NULL;
    return rc;
  }
  p->waiting++;
  uint32_t st = weft__waiter_wait(&w, deadline_ns);
  p->waiting--;
  /*
   * The event handler clears the slot of a waiter it wakes. One that timed
   * out or was cancelled clears its own; the registration stays armed, and
   * an event that comes later finds no waiter and only re-arms for the
   * other direction, if someone waits there.
   */
  s = &p->fds[fd]; /* the table may have grown (and moved) while we waited */
  if (want_rd && s->rd == &w) s->rd = NULL;
  if (want_wr && s->wr == &w) s->wr = NULL;
  /* Woken with nothing to report: the descriptor could not be re-armed for us (see on_fd_event). */
  if (st == WEFT__W_WOKEN && w.aux == 0) goto again;
  if (st == WEFT__W_WOKEN) return (int)w.aux;
  return weft__waiter_errno(st);
}

/* An event for fd: wake whoever it satisfies, re-arm for whoever still waits. */
static int on_fd_event(weft__poller *p, int fd, uint32_t ev) {
  if ((size_t)fd >= p->nfds) return 0;
  weft__fdwait *s = &p->fds[fd];
  int woken = 0;
  short revents = (short)((ev & EPOLLIN ? POLLIN : 0) | (ev & EPOLLOUT ? POLLOUT : 0) |
                          (ev & EPOLLERR ? POLLERR : 0) | (ev & EPOLLHUP ? POLLHUP : 0) |
                          (ev & EPOLLRDHUP ? POLLRDHUP : 0) | (ev & EPOLLPRI ? POLLPRI : 0));
  bool rd_ready = ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR | EPOLLPRI);
  bool wr_ready = ev & (EPOLLOUT | EPOLLHUP | EPOLLERR);
  weft__waiter *r = s->rd, *w = s->wr;
  if (r && rd_ready) {
    s->rd = NULL;
    r->aux = (uintptr_t)(unsigned short)revents;
    woken += weft__waiter_wake(r);
  }
  if (w && wr_ready && w != r) {
    s->wr = NULL;
    w->aux = (uintptr_t)(unsigned short)revents;
    woken += weft__waiter_wake(w);
  } else if (w == r && r && rd_ready) {
    s->wr = NULL; /* one waiter for both directions: already woken */
  }
  /*
   * The shot is spent: arm again for a direction that still waits. If that
   * fails, the waiter would never hear of the descriptor again: wake it with
   * nothing to report, and it arms for itself (and gets the error if that
   * fails too).
   */
  if ((s->rd || s->wr) && arm(p, fd, s) < 0) {
    weft__waiter *r2 = s->rd, *w2 = s->wr;
    s->rd = s->wr = NULL;
    if (r2) {
      r2->aux = 0;
      woken += weft__waiter_wake(r2);
    }
    if (w2 && w2 != r2) {
      w2->aux = 0;
      woken += weft__waiter_wake(w2);
    }
  }
  return woken;
}

/* --- waiting --------------------------------------------------------------------------- */

/* epoll_pwait2 (Linux 5.11) takes a nanosecond timeout. Where the kernel, or a
 * tool such as Valgrind, lacks it the first ENOSYS switches the whole process
 * to epoll_wait with the timeout rounded up to a millisecond. */
static atomic_bool has_pwait2 = true;

/* Deliver n events. */
static int dispatch(weft__poller *p, const struct epoll_event *evs, int n) {
  int woken = 0;
  for (int i = 0; i < n; i++) {
    uint64_t tag = evs[i].data.u64;
    switch ((int)(tag >> 56)) {
    case TAG_WAKE: {
      uint64_t v;
      ssize_t r = read(p->wakefd, &v, sizeof v);
      WEFT__UNUSED(r);
      break;
    }
    case TAG_FD:
      woken += on_fd_event(p, (int)(uint32_t)tag, evs[i].events);
      break;
    case TAG_OWNED:
      woken += weft__owned_event(tag, evs[i].events);
      break;
    default:
      break;
    }
  }
  return woken;
}

#define EVENTS 128

int weft__poller_harvest(weft__poller *p) {
  struct epoll_event evs[EVENTS];
  int woken = 0, n;
  /* A full batch may leave more behind: the ring's poll of the epoll would not complete again for those. */
  do {
    do n = epoll_wait(p->epfd, evs, EVENTS, 0);
    while (n < 0 && errno == EINTR);
    if (n > 0) woken += dispatch(p, evs, n);
  } while (n == EVENTS);
  return woken;
}

int weft__poller_wait(weft__poller *p, int64_t deadline_ns) {
  if (weft__uring_waits(p)) return weft__uring_wait(p, deadline_ns);
  struct epoll_event evs[EVENTS];
  int n;
  for (;;) {
    int64_t left = -1;
    if (deadline_ns == 0) {
      left = 0;
    } else if (deadline_ns > 0) {
      left = deadline_ns - weft__mono_ns();
      if (left < 0) left = 0;
    }
    if (atomic_load_explicit(&has_pwait2, memory_order_relaxed)) {
      struct timespec ts = {(time_t)(left / 1000000000), (long)(left % 1000000000)};
      n = (int)syscall(SYS_epoll_pwait2, p->epfd, evs, EVENTS, left < 0 ? NULL : &ts, NULL, 0);
      if (n < 0 && errno == ENOSYS) {
        atomic_store_explicit(&has_pwait2, false, memory_order_relaxed);
        continue;
      }
    } else {
      int ms = left < 0 ? -1 : (int)((left + 999999) / 1000000);
      n = epoll_wait(p->epfd, evs, EVENTS, ms);
    }
    if (n >= 0 || errno != EINTR) break;
  }
  atomic_store_explicit(&p->sleeping, 0, memory_order_relaxed);
  return n > 0 ? dispatch(p, evs, n) : 0;
}
