/*
 * This file contains the io_uring path of a build without liburing: there
 * is none, and regular files go to the offload pool (see uring.h).
 */
#include "uring.h"

ssize_t weft__uring_rw(weft__poller *p, int fd, void *buf, size_t len, bool write) {
  WEFT__UNUSED(p);
  WEFT__UNUSED(fd);
  WEFT__UNUSED(buf);
  WEFT__UNUSED(len);
  WEFT__UNUSED(write);
  return -ENOSYS;
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
