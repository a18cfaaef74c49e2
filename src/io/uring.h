/*
 * This file contains the io_uring path for regular files: epoll cannot wait
 * on a regular file (it is always "ready", and a read that misses the page
 * cache blocks), so a fiber's read or write of one goes to its carrier's
 * ring, and the fiber parks until the completion. Each carrier has its own
 * ring, created on first use; the ring's eventfd sits in the carrier's epoll.
 * Where io_uring is missing, refused (seccomp, containers) or switched off
 * (WEFT_IO_URING=0), or weft was built without liburing (uring_none.c),
 * weft__uring_rw returns -ENOSYS and the caller uses the offload pool.
 */
#ifndef WEFT_IO_URING_H
#define WEFT_IO_URING_H

#include "poller.h"

/*
 * Read (write when `write`) at the file's current position, as read(2) and
 * write(2) do, on the calling fiber's carrier, parking until the kernel
 * completes it. The operation cannot be abandoned once submitted (the kernel
 * owns the buffer until then), so it has no deadline. Returns the count, a
 * negative errno, or -ENOSYS when there is no usable ring.
 */
ssize_t weft__uring_rw(weft__poller *p, int fd, void *buf, size_t len, bool write);

/* Operations in flight on p's ring. */
bool weft__uring_busy(const weft__poller *p);
/* Deliver finished operations to their fibers; returns how many were woken. */
int weft__uring_reap(weft__poller *p);
/* Tear down p's ring (its operations have all completed: the runtime is stopping). */
void weft__uring_fini(weft__poller *p);
/* True once a ring has been set up in this process (for weft_get_info). */
bool weft__uring_in_use(void);

#endif /* WEFT_IO_URING_H */
