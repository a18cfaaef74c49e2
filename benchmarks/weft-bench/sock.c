/*
 * This file contains weft-bench's client sockets (net.h): the descriptor
 * limit, addresses and name resolution, a connect that retries with
 * backoff, and transfers that run either on weft's fiber-aware calls or on
 * plain blocking sockets. The servers are server.c's.
 */
/* SOCK_CLOEXEC and SOCK_NONBLOCK are Linux's (Linux first, as proc.c). */
#define _GNU_SOURCE 1
#include "net.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "bench.h"
#include "weft.h"

/* ------------------------------------------------------------------------ */
/* Descriptors and addresses                                                 */
/* ------------------------------------------------------------------------ */

/* /proc/sys/fs/nr_open: the most RLIMIT_NOFILE may be when the hard limit is "unlimited". */
static uint64_t nr_open(void) {
  uint64_t v = 1048576;
  FILE *f = fopen("/proc/sys/fs/nr_open", "r");
  if (f) {
    unsigned long long x;
    if (fscanf(f, "%llu", &x) == 1 && x > 0) v = x;
    fclose(f);
  }
  return v;
}

int wb_net_fd_limit(const char *cmd, uint64_t need, uint64_t *limit) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
    int e = errno;
    fprintf(stderr, "weft-bench %s: getrlimit(RLIMIT_NOFILE): %s\n", cmd, weft_strerror(-e));
    return -e;
  }
  uint64_t hard = rl.rlim_max == RLIM_INFINITY ? nr_open() : (uint64_t)rl.rlim_max;
  if ((uint64_t)rl.rlim_cur < hard) {
    struct rlimit want = rl;
    want.rlim_cur = (rlim_t)hard;
    if (setrlimit(RLIMIT_NOFILE, &want) == 0) rl.rlim_cur = want.rlim_cur;
  }
  *limit = (uint64_t)rl.rlim_cur;
  if (need <= *limit) return 0;
  fprintf(stderr,
          "weft-bench %s: this run needs about %llu file descriptors (one per socket, both ends of each "
          "loopback connection), but the hard limit is %llu (ulimit -Hn). Raise the hard limit (as root: "
          "`ulimit -Hn %llu`, or LimitNOFILE= / limits.conf) or ask for fewer connections.\n",
          cmd, (unsigned long long)need, (unsigned long long)hard, (unsigned long long)need);
  return -EMFILE;
}

typedef struct resolve_req {
  const char *host, *port;
  struct addrinfo *res;
  int rc; /* getaddrinfo's result */
} resolve_req;

static void *resolve_run(void *arg) {
  resolve_req *r = arg;
  struct addrinfo hints;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_ADDRCONFIG;
  r->rc = getaddrinfo(r->host, r->port, &hints, &r->res);
  return NULL;
}

int wb_net_resolve(const char *host, const char *port, wb_addr *out, char *err, size_t errlen) {
  resolve_req r = {host, port, NULL, 0};
  int rc = weft_blocking(resolve_run, &r, NULL);
  if (rc < 0) {
    snprintf(err, errlen, "cannot resolve '%s': %s", host, weft_strerror(rc));
    return rc;
  }
  if (r.rc != 0) {
    snprintf(err, errlen, "cannot resolve '%s': %s", host, gai_strerror(r.rc));
    return -ENOENT;
  }
  /*
   * A name may give several addresses ("localhost": ::1 and 127.0.0.1) and
   * the server may listen on only one. A client tries them in turn; this one
   * resolves once per run, so it tries them once, here, and keeps the first
   * that accepts a connection (or the first, when none does: the run then
   * counts the failures).
   */
  struct addrinfo *pick = r.res;
  for (struct addrinfo *ai = r.res; ai && r.res->ai_next; ai = ai->ai_next) {
    int s = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) continue;
    int ok = weft_connect(s, ai->ai_addr, ai->ai_addrlen, wb_net_deadline(WB_CONNECT_ATTEMPT_NS));
    close(s);
    if (ok == 0) {
      pick = ai;
      break;
    }
  }
  memset(out, 0, sizeof *out);
  memcpy(&out->ss, pick->ai_addr, pick->ai_addrlen);
  out->len = pick->ai_addrlen;
  freeaddrinfo(r.res);
  return 0;
}

void wb_net_addr_str(const wb_addr *a, char *out, size_t len) {
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (getnameinfo((const struct sockaddr *)&a->ss, a->len, host, sizeof host, serv, sizeof serv,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    snprintf(out, len, "?");
    return;
  }
  snprintf(out, len, a->ss.ss_family == AF_INET6 ? "[%s]:%s" : "%s:%s", host, serv);
}

/* ------------------------------------------------------------------------ */
/* Client sockets                                                            */
/* ------------------------------------------------------------------------ */

int64_t wb_net_deadline(int64_t timeout_ns) { return weft_now_ns() + timeout_ns; }

/*
 * weft's owned descriptors (weft_fd), by descriptor number, so that the
 * clients and servers keep passing plain ints: an entry is set when
 * wb_net_adopt hands a socket to weft and cleared by wb_net_close. A number
 * beyond the table (larger than the hard descriptor limit at first use) is
 * driven with the calls on raw descriptors. WEFT_BENCH_RAW_FD=1 adopts
 * nothing, so the same build measures both paths.
 */
static _Atomic uint64_t *owned;
static size_t owned_cap;
static bool owned_off;
static pthread_once_t owned_once = PTHREAD_ONCE_INIT;

static void owned_init(void) {
  const char *raw = getenv("WEFT_BENCH_RAW_FD");
  owned_off = raw && *raw && strcmp(raw, "0") != 0;
  struct rlimit rl;
  size_t cap = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_max != RLIM_INFINITY ? (size_t)rl.rlim_max
                                                                                  : (size_t)nr_open();
  if (cap > (1u << 22)) cap = 1u << 22;
  if (!owned_off && (owned = calloc(cap, sizeof *owned))) owned_cap = cap;
}

static weft_fd owned_get(int fd) {
  weft_fd f = {0};
  if (fd >= 0 && (size_t)fd < owned_cap) f.id_ = atomic_load_explicit(&owned[fd], memory_order_relaxed);
  return f;
}

bool wb_net_owned_fds(void) {
  pthread_once(&owned_once, owned_init);
  return !owned_off;
}

int wb_net_adopt(wb_io io, int fd) {
  pthread_once(&owned_once, owned_init);
  if (io != WB_IO_WEFT || owned_off || fd < 0 || (size_t)fd >= owned_cap) return 0;
  weft_fd f;
  int rc = weft_fd_open(fd, &f);
  if (rc < 0) return rc;
  atomic_store_explicit(&owned[fd], f.id_, memory_order_relaxed);
  return 0;
}

int wb_net_accept(wb_io io, int lfd) {
  weft_fd l = owned_get(lfd);
  if (io != WB_IO_WEFT || l.id_ == 0) {
    if (io == WB_IO_WEFT) return weft_accept(lfd, NULL, NULL, -1);
    int c;
    do c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    while (c < 0 && (errno == EINTR || errno == ECONNABORTED));
    return c < 0 ? -errno : c;
  }
  weft_fd c;
  int rc = weft_fd_accept(l, NULL, NULL, &c, -1);
  if (rc < 0) return rc;
  int fd = weft_fd_native(c);
  if ((size_t)fd >= owned_cap) { /* cannot be found by number: give it back to raw calls */
    int d = dup(fd);
    weft_fd_close(c);
    return d < 0 ? -errno : d;
  }
  atomic_store_explicit(&owned[fd], c.id_, memory_order_relaxed);
  return fd;
}

int wb_net_close(int fd) {
  weft_fd f = owned_get(fd);
  if (f.id_ == 0) return close(fd) == 0 ? 0 : -errno;
  /* Cleared first: once weft closes it, the number may be handed out again (and adopted anew). */
  atomic_store_explicit(&owned[fd], 0, memory_order_relaxed);
  return weft_fd_close(f);
}

static void set_timeo(int fd, int opt, int64_t ns) {
  struct timeval tv = {.tv_sec = (time_t)(ns / 1000000000), .tv_usec = (suseconds_t)(ns % 1000000000 / 1000)};
  setsockopt(fd, SOL_SOCKET, opt, &tv, sizeof tv);
}

/* One connect attempt on a fresh socket: 0 with *fd, or a negative errno (the socket is closed then). */
static int connect_once(wb_io io, const wb_addr *a, bool nodelay, int64_t attempt_deadline,
                        int64_t io_timeout, int *fd) {
  /*
   * weft's calls never need a blocking socket, and weft_connect on a
   * blocking one flips O_NONBLOCK on and off around connect(2) (two fcntl
   * calls per connection): a program written for weft opens its sockets
   * non-blocking, so the weft client does.
   */
  int type = SOCK_STREAM | SOCK_CLOEXEC | (io == WB_IO_WEFT ? SOCK_NONBLOCK : 0);
  int s = socket(a->ss.ss_family, type, 0);
  if (s < 0) return -errno;
  if (nodelay) {
    int one = 1;
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  int rc;
  if (io == WB_IO_WEFT) {
    rc = wb_net_adopt(io, s);
    weft_fd f = owned_get(s);
    if (rc == 0)
      rc = f.id_ ? weft_fd_connect(f, (const struct sockaddr *)&a->ss, a->len, attempt_deadline)
                 : weft_connect(s, (const struct sockaddr *)&a->ss, a->len, attempt_deadline);
  } else {
    /*
     * A blocking connect is bounded by SO_SNDTIMEO (it then fails with
     * EINPROGRESS); the same value bounds each send, and SO_RCVTIMEO each
     * receive: a careful C program without weft sets both.
     */
    int64_t left = attempt_deadline - weft_now_ns();
    set_timeo(s, SO_SNDTIMEO, left > 1000 ? left : 1000);
    set_timeo(s, SO_RCVTIMEO, io_timeout);
    rc = connect(s, (const struct sockaddr *)&a->ss, a->len) == 0 ? 0 : -errno;
    if (rc == -EINPROGRESS) rc = -ETIMEDOUT;
    /* Interrupted: the connection goes on in the background; wait for it as a non-blocking connect would. */
    if (rc == -EINTR) {
      int w = weft_poll_fd(s, POLLOUT, attempt_deadline);
      if (w < 0) {
        rc = w;
      } else {
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        rc = getsockopt(s, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 ? -soerr : -errno;
      }
    }
  }
  if (rc < 0) {
    wb_net_close(s);
    return rc;
  }
  *fd = s;
  return 0;
}

int wb_net_connect(wb_io io, const wb_addr *a, bool nodelay, int64_t timeout_ns, int *fd, unsigned *retries) {
  int64_t deadline = wb_net_deadline(timeout_ns);
  int64_t backoff = 10 * 1000000LL;
  for (;;) {
    int64_t now = weft_now_ns();
    int64_t until = now + WB_CONNECT_ATTEMPT_NS < deadline ? now + WB_CONNECT_ATTEMPT_NS : deadline;
    int rc = connect_once(io, a, nodelay, until, timeout_ns, fd);
    if (rc == 0) return 0;
    /*
     * Retry what a busy loopback server causes: an attempt that timed out
     * (the accept queue was full and the SYN was dropped), or no free local
     * port or buffer for a moment. A refused connection means no server.
     */
    bool again = rc == -ETIMEDOUT || rc == -EAGAIN || rc == -EADDRNOTAVAIL || rc == -ENOBUFS;
    if (!again || weft_now_ns() + backoff >= deadline) return rc;
    if (retries) (*retries)++;
    if (io == WB_IO_WEFT)
      weft_sleep_ns(backoff);
    else
      wb_sleep_ns(backoff);
    if (backoff < 1000000000LL) backoff *= 2;
  }
}

ssize_t wb_net_read(wb_io io, int fd, void *buf, size_t len, int64_t deadline_ns) {
  if (io == WB_IO_WEFT) {
    weft_fd f = owned_get(fd);
    return f.id_ ? weft_fd_read(f, buf, len, deadline_ns) : weft_read(fd, buf, len, deadline_ns);
  }
  for (;;) {
    ssize_t r = recv(fd, buf, len, 0);
    if (r >= 0) return r;
    if (errno == EINTR) continue;
    /* SO_RCVTIMEO expired. */
    if (errno == EAGAIN || errno == EWOULDBLOCK) return -ETIMEDOUT;
    return -errno;
  }
}

ssize_t wb_net_read_lend(wb_io io, int fd, void *buf, size_t len, const void **data, int64_t deadline_ns) {
  if (io == WB_IO_WEFT) {
    weft_fd f = owned_get(fd);
    if (f.id_) return weft_fd_read_lend(f, data, deadline_ns);
  }
  *data = buf;
  return wb_net_read(io, fd, buf, len, deadline_ns);
}

void wb_net_read_done(wb_io io, int fd, size_t used) {
  if (io != WB_IO_WEFT) return;
  weft_fd f = owned_get(fd);
  if (f.id_) weft_fd_read_done(f, used);
}

int wb_net_write_all(wb_io io, int fd, const void *buf, size_t len, int64_t deadline_ns) {
  const char *p = buf;
  while (len > 0) {
    ssize_t r;
    if (io == WB_IO_WEFT) {
      weft_fd f = owned_get(fd);
      r = f.id_ ? weft_fd_write(f, p, len, deadline_ns) : weft_write(fd, p, len, deadline_ns);
    } else {
      r = send(fd, p, len, MSG_NOSIGNAL);
      if (r < 0) {
        if (errno == EINTR) continue;
        r = errno == EAGAIN || errno == EWOULDBLOCK ? -ETIMEDOUT : -errno;
      }
    }
    if (r < 0) return (int)r;
    p += r;
    len -= (size_t)r;
  }
  return 0;
}

int wb_net_read_full(wb_io io, int fd, void *buf, size_t len, int64_t deadline_ns) {
  char *p = buf;
  while (len > 0) {
    ssize_t r = wb_net_read(io, fd, p, len, deadline_ns);
    if (r < 0) return (int)r;
    if (r == 0) return -ENODATA;
    p += r;
    len -= (size_t)r;
  }
  return 0;
}
