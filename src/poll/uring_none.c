/*
 * This file contains the io_uring path of a build without liburing (or
 * without fibers): there is none, carriers wait in epoll, and fibers' I/O
 * goes through epoll and the offload pool (see uring.h).
 */
#include "uring.h"

int64_t weft__uring_run(weft__poller *p, const weft__uring_req *r, int64_t deadline_ns) {
  WEFT__UNUSED(p);
  WEFT__UNUSED(r);
  WEFT__UNUSED(deadline_ns);
  return -ENOSYS;
}
int64_t weft__uring_recv(weft__poller *p, weft__oslot *s, const struct iovec *iov, int iovcnt,
                         int64_t deadline_ns) {
  WEFT__UNUSED(p);
  WEFT__UNUSED(s);
  WEFT__UNUSED(iov);
  WEFT__UNUSED(iovcnt);
  WEFT__UNUSED(deadline_ns);
  return -ENOSYS;
}

int64_t weft__uring_send(weft__poller *p, weft__oslot *s, const struct iovec *iov, int iovcnt,
                         int64_t deadline_ns) {
  WEFT__UNUSED(p);
  WEFT__UNUSED(s);
  WEFT__UNUSED(iov);
  WEFT__UNUSED(iovcnt);
  WEFT__UNUSED(deadline_ns);
  return -ENOSYS;
}
int weft__uring_attach(weft__poller *p) {
  WEFT__UNUSED(p);
  return -ENOSYS;
}
int weft__uring_wait(weft__poller *p, int64_t deadline_ns) {
  WEFT__UNUSED(p);
  WEFT__UNUSED(deadline_ns);
  return 0;
}
void weft__uring_flush(weft__poller *p, bool idle) {
  WEFT__UNUSED(p);
  WEFT__UNUSED(idle);
}
bool weft__uring_busy(const weft__poller *p) {
  WEFT__UNUSED(p);
  return false;
}
int weft__uring_reap(weft__poller *p) {
  WEFT__UNUSED(p);
  return 0;
}
void weft__uring_fini(weft__poller *p) { WEFT__UNUSED(p); }
bool weft__uring_in_use(void) { return false; }
uint64_t weft__uring_submissions(void) { return 0; }
uint64_t weft__uring_ring_waits(void) { return 0; }
uint64_t weft__uring_recvs(void) { return 0; }
uint64_t weft__uring_sends(void) { return 0; }
uint64_t weft__uring_sends_behind(void) { return 0; }

int64_t weft__uring_rx_read(weft__poller *p, weft__oslot *s, const struct iovec *iov, int iovcnt,
                            int64_t deadline_ns) {
  WEFT__UNUSED(p);
  WEFT__UNUSED(s);
  WEFT__UNUSED(iov);
  WEFT__UNUSED(iovcnt);
  WEFT__UNUSED(deadline_ns);
  return -ENOSYS;
}
int64_t weft__uring_rx_lend(weft__poller *p, weft__oslot *s, const struct iovec *iov, int iovcnt,
                            int64_t deadline_ns, const void **lent) {
  *lent = NULL;
  return weft__uring_rx_read(p, s, iov, iovcnt, deadline_ns);
}
void weft__uring_rx_lend_done(weft__oslot *s) { WEFT__UNUSED(s); }
long weft__uring_test_lent(void) { return 0; }
bool weft__uring_rx_ready(weft__oslot *s) {
  WEFT__UNUSED(s);
  return false;
}
void weft__uring_rx_reset(weft__oslot *s) { WEFT__UNUSED(s); }
void weft__uring_rx_final(weft__oslot *s) { WEFT__UNUSED(s); }
void weft__uring_quiesce(weft__poller *p) { WEFT__UNUSED(p); }

bool weft__uring_wb_busy(weft__oslot *s) {
  WEFT__UNUSED(s);
  return false;
}
int weft__uring_wb_wait(weft__oslot *s, int64_t deadline_ns) {
  WEFT__UNUSED(s);
  WEFT__UNUSED(deadline_ns);
  return 0;
}
int weft__uring_wb_error(weft__oslot *s) {
  WEFT__UNUSED(s);
  return 0;
}
bool weft__uring_wb_final(weft__oslot *s) {
  WEFT__UNUSED(s);
  return false;
}
