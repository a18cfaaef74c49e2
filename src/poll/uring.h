/*
 * This file contains the io_uring path of a fiber's regular-file I/O. epoll
 * cannot wait on a regular file (it is always "ready", and a read that
 * misses the page cache blocks), so a fiber's read or write of one becomes a
 * request on its carrier's ring, and the fiber parks until the completion.
 * Each carrier has a ring of its own, created on first use, that only the
 * carrier touches (fibers never move); the carrier submits queued requests
 * in batches (when it has nothing else to run, or every BATCH requests) and
 * reaps completions from the shared completion ring without a system call.
 *
 * Where io_uring is missing, refused (seccomp, containers) or switched off
 * (WEFT_IO_URING=0), or weft was built without liburing (uring_none.c),
 * weft__uring_run returns -ENOSYS and io.c uses the offload pool.
 */
#ifndef WEFT_IO_URING_H
#define WEFT_IO_URING_H

#include <sys/socket.h>

#include "poller.h"

/* One request: a read or a write at the file's current position, as read(2) and write(2) do. */
typedef struct weft__uring_req {
  bool write;
  int fd;
  void *buf;
  size_t len;
} weft__uring_req;

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
 * The carrier's side. flush: submit queued requests, if `idle` (the carrier
 * has nothing else to run) or enough are queued. reap: deliver completions
 * (no system call unless the kernel has completions waiting to be posted).
 */
void weft__uring_flush(weft__poller *p, bool idle);
int weft__uring_reap(weft__poller *p);

/* Requests queued or in flight on p's ring. */
bool weft__uring_busy(const weft__poller *p);
/* Tear down p's ring (nothing is in flight: the runtime is stopping). */
void weft__uring_fini(weft__poller *p);
/* True once a ring has been set up in this process (for weft_get_info). */
bool weft__uring_in_use(void);

/* io_uring_submit calls so far, all carriers (weft_get_stats). */
uint64_t weft__uring_submissions(void);

#endif /* WEFT_IO_URING_H */
