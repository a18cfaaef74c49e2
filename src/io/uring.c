/*
 * This file contains the io_uring path for regular files (see uring.h),
 * built on liburing.
 *
 * Each carrier's ring is touched only by that carrier (fibers never move),
 * so no lock guards it: a fiber submits on its carrier and parks; the
 * carrier reaps completions when the ring's eventfd fires in its epoll (or
 * when it looks without sleeping) and wakes the fibers, whose waiters carry
 * the result. If the process cannot have a ring (no kernel support, seccomp,
 * RLIMIT_MEMLOCK on older kernels), the first failure switches the path off
 * for the whole process, once.
 */
#include "uring.h"

#include <liburing.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "../fiber/sched.h"
#include "../sys.h"

#define RING_ENTRIES 64

typedef struct ring {
  struct io_uring ring;
  int evfd;         /* completions signal it; it sits in the carrier's epoll */
  size_t in_flight; /* submitted and not yet reaped */
} ring;

/* -1 unknown, 0 refused by the kernel (for the whole process), 1 a ring was set up. */
static atomic_int usable = -1;

bool weft__uring_in_use(void) { return atomic_load_explicit(&usable, memory_order_relaxed) == 1; }

static ring *ring_get(weft__poller *p) {
  if (p->uring) return p->uring;
  /* Switched off for this run of the runtime (WEFT_IO_URING=0, weft_configure). */
  if (!weft__rt_state.settings.io_uring) return NULL;
  if (atomic_load_explicit(&usable, memory_order_relaxed) == 0) return NULL;
  ring *r = weft__calloc(1, sizeof *r);
  if (!r) return NULL;
  struct io_uring_params params = {0};
  int rc = weft__fault(WEFT__F_URING) ? -ENOMEM : io_uring_queue_init_params(RING_ENTRIES, &r->ring, &params);
  /* Reads "at the current position" (offset -1) need IORING_FEAT_RW_CUR_POS (Linux 5.6). */
  if (rc == 0 && !(params.features & IORING_FEAT_RW_CUR_POS)) {
    io_uring_queue_exit(&r->ring);
    rc = -ENOSYS;
  }
  if (rc < 0) {
    weft__free(r);
    /* A refusal by the kernel holds for the process; a fault or no memory may pass. */
    if (rc == -ENOSYS || rc == -EPERM || rc == -EINVAL) atomic_store(&usable, 0);
    return NULL;
  }
  r->evfd = weft__eventfd();
  struct epoll_event e = {.events = EPOLLIN, .data.u64 = ((uint64_t)3 << 32)};
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

ssize_t weft__uring_rw(weft__poller *p, int fd, void *buf, size_t len, bool write) {
  ring *r = ring_get(p);
  if (!r) return -ENOSYS;
  struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
  if (!sqe) {
    /* The ring is full of this carrier's operations: push them out and retry once. */
    io_uring_submit(&r->ring);
    sqe = io_uring_get_sqe(&r->ring);
    if (!sqe) return -ENOSYS;
  }
  if (len > UINT32_MAX) len = UINT32_MAX; /* one transfer, like read(2): a short count is allowed */
  if (write)
    io_uring_prep_write(sqe, fd, buf, (unsigned)len, (uint64_t)-1);
  else
    io_uring_prep_read(sqe, fd, buf, (unsigned)len, (uint64_t)-1);
  /* Not cancellable: the kernel owns buf until the completion arrives. */
  weft__waiter w;
  weft__waiter_init(&w, false);
  io_uring_sqe_set_data(sqe, &w);
  int rc = io_uring_submit(&r->ring);
  if (rc < 0) return -ENOSYS;
  r->in_flight++;
  weft__waiter_wait(&w, -1);
  return (ssize_t)(intptr_t)w.aux;
}

bool weft__uring_busy(const weft__poller *p) {
  const ring *r = p->uring;
  return r && r->in_flight > 0;
}

int weft__uring_reap(weft__poller *p) {
  ring *r = p->uring;
  if (!r) return 0;
  uint64_t v;
  ssize_t n = read(r->evfd, &v, sizeof v);
  WEFT__UNUSED(n);
  int woken = 0;
  struct io_uring_cqe *cqe;
  while (io_uring_peek_cqe(&r->ring, &cqe) == 0) {
    weft__waiter *w = io_uring_cqe_get_data(cqe);
    w->aux = (uintptr_t)(intptr_t)cqe->res;
    io_uring_cqe_seen(&r->ring, cqe);
    r->in_flight--;
    woken += weft__waiter_wake(w);
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
