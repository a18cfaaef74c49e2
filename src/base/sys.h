/*
 * This file contains weft's door to the C library and the kernel for every
 * call that can fail for want of a resource: memory, mappings, threads,
 * descriptors. weft calls these wrappers, never the functions directly, so
 * that test builds (WEFT_TESTING) can make any one of them fail on demand,
 * one at a time, as SQLite's os_unix.c does with its aSyscall table. In other
 * builds each wrapper is the plain call.
 */
#ifndef WEFT_SYS_H
#define WEFT_SYS_H

#include "internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <sys/mman.h>

/* The places where a fault can be injected. */
enum weft__fault_site {
  WEFT__F_MALLOC = 0,     /* malloc, calloc, realloc, posix_memalign */
  WEFT__F_MMAP,           /* mmap */
  WEFT__F_MPROTECT,       /* mprotect (stack guards) */
  WEFT__F_MADVISE,        /* madvise (MADV_GUARD_INSTALL) */
  WEFT__F_PTHREAD_CREATE, /* pthread_create */
  WEFT__F_EPOLL,          /* epoll_create1, epoll_ctl */
  WEFT__F_EVENTFD,        /* eventfd */
  WEFT__F_URING,          /* io_uring_queue_init */
  WEFT__F_SIGALTSTACK,    /* sigaltstack */
  WEFT__F_OWNFD,          /* what makes an owned descriptor: fcntl(O_NONBLOCK), socket, accept4, TCP_INQ */
  WEFT__F_COUNT
};

#ifdef WEFT_TESTING
/* True when the armed fault fires for this call: the wrapper must then fail. */
bool weft__fault(enum weft__fault_site site);

/*
 * Test control (tests link the static library). weft__fault_arm(mask, skip,
 * sticky): among calls at the sites in mask (bit i = site i), let `skip`
 * succeed, then fail the next one; and every later one too when sticky.
 * weft__fault_disarm() stops injecting and returns how many faults fired.
 */
void weft__fault_arm(uint32_t mask, unsigned long skip, bool sticky);
/*
 * The same, for the calling OS thread's calls only: other threads' calls at
 * those sites neither fail nor count. A fiber that arms it must not park
 * before the call it means (a parked fiber may resume on another carrier).
 */
void weft__fault_arm_here(uint32_t mask, unsigned long skip, bool sticky);
/*
 * The random-rate mode (the soak): each call at a site in mask fails with
 * probability per_million / 1,000,000, on every thread, until disarmed. The
 * choice is a hash of the seed and the call's number since arming (no
 * rand(), no lock), so one thread that makes the same calls sees the same
 * faults again; across threads the numbering is the interleaving's.
 */
void weft__fault_arm_rate(uint32_t mask, uint32_t per_million, uint64_t seed);
/* Faults injected at one site since the last arming, in any mode (0 for a site out of range). */
unsigned long weft__fault_fired_at(enum weft__fault_site site);
unsigned long weft__fault_disarm(void);
#else
static inline bool weft__fault(enum weft__fault_site site) {
  WEFT__UNUSED(site);
  return false;
}
#endif

static inline void *weft__malloc(size_t n) {
  if (weft__fault(WEFT__F_MALLOC)) return NULL;
  return malloc(n);
}

static inline void *weft__calloc(size_t n, size_t size) {
  if (weft__fault(WEFT__F_MALLOC)) return NULL;
  return calloc(n, size);
}

static inline void *weft__realloc(void *p, size_t n) {
  if (weft__fault(WEFT__F_MALLOC)) return NULL;
  return realloc(p, n);
}

/* Cache-line aligned allocation; release with weft__free. */
static inline void *weft__malloc_aligned(size_t align, size_t n) {
  void *p;
  if (weft__fault(WEFT__F_MALLOC)) return NULL;
  return posix_memalign(&p, align, n) == 0 ? p : NULL;
}

static inline void weft__free(void *p) { free(p); }

static inline void *weft__mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
  if (weft__fault(WEFT__F_MMAP)) {
    errno = ENOMEM;
    return MAP_FAILED;
  }
  return mmap(addr, len, prot, flags, fd, off);
}

static inline int weft__mprotect(void *addr, size_t len, int prot) {
  if (weft__fault(WEFT__F_MPROTECT)) {
    errno = ENOMEM;
    return -1;
  }
  return mprotect(addr, len, prot);
}

static inline int weft__madvise(void *addr, size_t len, int advice) {
  if (weft__fault(WEFT__F_MADVISE)) {
    errno = ENOMEM;
    return -1;
  }
  return madvise(addr, len, advice);
}

/* Returns 0 or a positive error number, as pthread_create does. */
static inline int weft__pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *),
                                       void *arg) {
  if (weft__fault(WEFT__F_PTHREAD_CREATE)) return EAGAIN;
  return pthread_create(t, a, fn, arg);
}

/* epoll_create1(EPOLL_CLOEXEC): a descriptor or a negative errno. */
static inline int weft__epoll_create(void) {
  if (weft__fault(WEFT__F_EPOLL)) return -ENOMEM;
  int fd = epoll_create1(EPOLL_CLOEXEC);
  return fd >= 0 ? fd : -errno;
}

/* epoll_ctl: 0 or a negative errno. */
static inline int weft__epoll_ctl(int ep, int op, int fd, struct epoll_event *ev) {
  if (weft__fault(WEFT__F_EPOLL)) return -ENOMEM;
  return epoll_ctl(ep, op, fd, ev) == 0 ? 0 : -errno;
}

/* A non-blocking, close-on-exec eventfd: a descriptor or a negative errno. */
static inline int weft__eventfd(void) {
  if (weft__fault(WEFT__F_EVENTFD)) return -EMFILE;
  int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  return fd >= 0 ? fd : -errno;
}

/* fcntl(fd, F_SETFL, flags) for an owned descriptor: 0 or a negative errno. */
static inline int weft__setfl(int fd, int flags) {
  if (weft__fault(WEFT__F_OWNFD)) return -EBADF;
  return fcntl(fd, F_SETFL, flags) == 0 ? 0 : -errno;
}

/* socket(2): a descriptor or a negative errno. */
static inline int weft__socket(int domain, int type, int protocol) {
  if (weft__fault(WEFT__F_OWNFD)) return -EMFILE;
  int fd = socket(domain, type, protocol);
  return fd >= 0 ? fd : -errno;
}

/*
 * setsockopt(TCP_INQ) on a TCP socket: its reads (recvmsg) then say how much
 * is left in the receive queue. 0 or a negative errno (a kernel before 4.18:
 * -ENOPROTOOPT).
 */
static inline int weft__tcp_inq_on(int fd) {
  if (weft__fault(WEFT__F_OWNFD)) return -ENOPROTOOPT;
  int one = 1;
  return setsockopt(fd, IPPROTO_TCP, TCP_INQ, &one, sizeof one) == 0 ? 0 : -errno;
}

/* accept4(2), EINTR absorbed: a descriptor or a negative errno. */
static inline int weft__accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags) {
  if (weft__fault(WEFT__F_OWNFD)) return -EMFILE;
  int c;
  do c = accept4(fd, addr, len, flags);
  while (c < 0 && errno == EINTR);
  return c >= 0 ? c : -errno;
}

#endif /* WEFT_SYS_H */
