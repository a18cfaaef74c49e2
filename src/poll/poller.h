/*
 * This file contains the poller: the one place where a carrier sleeps in the
 * kernel, and where fibers wait for descriptors. Each carrier owns one
 * poller; it waits there when it has nothing to run, until a descriptor it
 * watches is ready, another thread wakes it (new work), or its next timer is
 * due. Busy carriers look at it now and then without waiting. The
 * implementation is per platform (poll_epoll.c on Linux); where io_uring
 * serves (uring.h), the carrier's ring is its wait point and polls the
 * epoll instance.
 *
 * Descriptor waits belong to the poller of the waiting fiber's carrier, and
 * only that carrier touches them: a fiber stays on its carrier while it
 * waits there (weft__fiber_stay), so its wait is armed, delivered, timed out
 * and taken back on one thread, with no lock.
 * Two fibers on two carriers may wait on one descriptor (a reader here, a
 * writer there): each carrier arms its own registration.
 */
#ifndef WEFT_IO_POLLER_H
#define WEFT_IO_POLLER_H

#include "../base/internal.h"
#include "../base/lock.h"
#include "../sync/wait.h"

/* The waiters of one descriptor on one carrier. */
typedef struct weft__fdwait {
  weft__waiter *rd; /* waiting to read (POLLIN), or NULL */
  weft__waiter *wr; /* waiting to write (POLLOUT), or NULL */
  bool registered;  /* added to this poller's epoll (a hint: close() removes it) */
  uint8_t dry;      /* read hint (weft__poller_read_hint): 0 none, else reads since a read found nothing */
} weft__fdwait;

typedef struct weft__poller {
  int epfd;                    /* the epoll instance */
  int wakefd;                  /* an eventfd that other threads write to wake the carrier */
  atomic_int sleeping;         /* 1 while the owner is in (or entering) its wait: wakers write only then */
  weft__fdwait *fds;           /* indexed by descriptor: owner only */
  size_t nfds;                 /* entries in fds */
  size_t waiting;              /* descriptor waits armed now: owner only */
  atomic_size_t owned_waiting; /* fibers parked on owned descriptors registered here (any carrier's) */
  void *uring;                 /* the carrier's io_uring (uring.c), its wait point once set up, or NULL */
  uint8_t uring_mode;          /* WEFT_IO_URING: 0 no ring, 1 a ring for files (on first use), 2 for all */
  bool write_behind;           /* WEFT_WRITE_BEHIND: small TCP writes on fibers go behind (uring.h) */
  /* Other threads' requests to end a multishot receive armed on this carrier's ring (uring.c). */
  weft__lock rx_lock;     /* guards rx_cancels and rx_closed (WEFT__LOCK_LEAF) */
  void *rx_cancels;       /* the requests, a list */
  atomic_bool rx_pending; /* rx_cancels is not empty: the owner looks at it when it reaps */
  bool rx_closed;         /* the owner has left its ring (weft__uring_quiesce): no request is taken */
} weft__poller;

/* Open the poller; `uring`: WEFT_IO_URING's mode for its carrier (uring.h), `write_behind`:
 * WEFT_WRITE_BEHIND. 0 or -errno (nothing is left open on failure). A poller is initialised again before a
 * new thread owns it (a compensation carrier's slot reused).
 */
int weft__poller_init(weft__poller *p, unsigned uring, bool write_behind);
void weft__poller_fini(weft__poller *p);

/* Collect the epoll instance's events without waiting and deliver them (the ring's wait point calls it when
 * its poll of the epoll completes). Owner only. Returns waiters woken. */
int weft__poller_harvest(weft__poller *p);

/*
 * The owner announces that it is about to sleep; it must then look for work
 * once more before calling weft__poller_wait (wakers that pushed work before
 * the announcement are seen by that look, later ones write the eventfd).
 */
void weft__poller_prepare_sleep(weft__poller *p);
/* The owner found work after all: cancel the announcement. */
void weft__poller_cancel_sleep(weft__poller *p);

/*
 * Wait until an event, a wake or the deadline (-1: none, 0: just look).
 * Ready descriptors wake their waiters. Returns how many waiters were woken.
 * Only the owner calls it.
 */
int weft__poller_wait(weft__poller *p, int64_t deadline_ns);

/* True when a non-blocking look could find something (descriptor waits or ring operations in flight). */
bool weft__poller_busy(const weft__poller *p);

/* Wake the owner if it sleeps or is about to (any thread). */
void weft__poller_wake(weft__poller *p);

/*
 * Wait on the calling fiber's carrier until fd has one of `events` (POLLIN,
 * POLLOUT), the deadline passes or the wait is cancelled. Returns the
 * revents (> 0), -ETIMEDOUT, -ECANCELED, or a negative errno from epoll
 * (-EPERM: a descriptor that epoll cannot watch, such as a regular file).
 * One reader and one writer per descriptor per carrier: a second waiter in
 * the same direction gets -EBUSY.
 */
int weft__poller_wait_fd(weft__poller *p, int fd, short events, int64_t deadline_ns);

/*
 * fd is a new descriptor (just accepted, or being connected): whatever this
 * poller remembers of an earlier descriptor with that number is stale, so the
 * next wait registers it afresh instead of trying to modify a registration
 * that close() removed.
 */
void weft__poller_fresh_fd(weft__poller *p, int fd);

/*
 * A hint for socket reads on a fiber, kept per descriptor and carrier. In a
 * request-reply exchange a read that follows a write finds nothing, every
 * time: trying it first costs a system call that only says EAGAIN. After a
 * read of fd found nothing (weft__poller_note_dry), weft__poller_read_hint
 * says "wait for readiness first" for the next reads, except every
 * WEFT__DRY_PROBE-th, which tries first again and so notices when data
 * has started to be there already. Only a hint: waiting first on a
 * descriptor that is ready costs a round through the poller, never a wrong
 * result, and a descriptor number that was closed and reused inherits at
 * most a few such rounds.
 */
#define WEFT__DRY_PROBE 8
bool weft__poller_read_hint(weft__poller *p, int fd);
void weft__poller_note_dry(weft__poller *p, int fd);

#endif /* WEFT_IO_POLLER_H */
