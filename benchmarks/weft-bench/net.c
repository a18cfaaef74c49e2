/*
 * This file contains the network plumbing of weft-bench's http, echo and
 * gpars-http measurements (net.h): descriptor limits, addresses, client
 * connects with retries, transfers on weft or on plain blocking sockets,
 * the fiber-per-connection and thread-per-connection servers, error
 * counting and latency percentiles.
 */
/* accept4 and SOCK_CLOEXEC are Linux's (Linux first, as proc.c). */
#define _GNU_SOURCE 1
#include "net.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
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

int wb_net_somaxconn(void) {
  int v = -1;
  FILE *f = fopen("/proc/sys/net/core/somaxconn", "r");
  if (f) {
    if (fscanf(f, "%d", &v) != 1) v = -1;
    fclose(f);
  }
  return v;
}

/* ------------------------------------------------------------------------ */
/* Client sockets                                                            */
/* ------------------------------------------------------------------------ */

int64_t wb_net_deadline(int64_t timeout_ns) { return weft_now_ns() + timeout_ns; }

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
    rc = weft_connect(s, (const struct sockaddr *)&a->ss, a->len, attempt_deadline);
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
    close(s);
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
  if (io == WB_IO_WEFT) return weft_read(fd, buf, len, deadline_ns);
  for (;;) {
    ssize_t r = recv(fd, buf, len, 0);
    if (r >= 0) return r;
    if (errno == EINTR) continue;
    /* SO_RCVTIMEO expired. */
    if (errno == EAGAIN || errno == EWOULDBLOCK) return -ETIMEDOUT;
    return -errno;
  }
}

int wb_net_write_all(wb_io io, int fd, const void *buf, size_t len, int64_t deadline_ns) {
  const char *p = buf;
  while (len > 0) {
    ssize_t r;
    if (io == WB_IO_WEFT) {
      r = weft_write(fd, p, len, deadline_ns);
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

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */
/* ------------------------------------------------------------------------ */

void wb_errors_init(wb_errors *e) {
  atomic_init(&e->count, 0);
  atomic_flag_clear(&e->first_taken);
  atomic_init(&e->first_ready, false);
  e->first[0] = '\0';
}

void wb_errors_add(wb_errors *e, const char *stage, int err, const char *detail) {
  atomic_fetch_add_explicit(&e->count, 1, memory_order_relaxed);
  if (atomic_flag_test_and_set(&e->first_taken)) return;
  snprintf(e->first, sizeof e->first, "%s: %s", stage, detail ? detail : weft_strerror(err));
  atomic_store_explicit(&e->first_ready, true, memory_order_release);
}

size_t wb_errors_count(wb_errors *e) { return atomic_load(&e->count); }

const char *wb_errors_first(wb_errors *e) {
  return atomic_load_explicit(&e->first_ready, memory_order_acquire) ? e->first : "";
}

/* ------------------------------------------------------------------------ */
/* Servers                                                                   */
/* ------------------------------------------------------------------------ */

struct wb_server {
  wb_io io;
  int lfd; /* the listener; closed by wb_server_stop */
  wb_addr addr;
  int backlog;
  bool nodelay; /* TCP_NODELAY on accepted connections */
  wb_conn_fn fn;
  void *ctx;
  atomic_bool stop; /* set before the listener is shut down: the acceptor's wake-up is not an error */
  atomic_size_t accepted;
  wb_errors errors;
  /* WB_IO_WEFT: the acceptor and the connections' futures (touched by the acceptor only until it ends) */
  weft_future *acceptor;
  weft_future **conns;
  size_t nconns, cap;
  /*
   * WB_IO_PLAIN: the acceptor and the connections' threads (likewise). They
   * are joined at the stop, not before: this server is for runs whose
   * connections all live at once (echo), where that costs nothing.
   */
  pthread_t acceptor_tid;
  pthread_attr_t attr;
  pthread_t *tids;
  size_t ntids, tcap;
};

typedef struct conn_arg {
  wb_server *s;
  int fd;
} conn_arg;

/* One connection, on its own fiber or thread: the handler, then the close. */
static void *conn_main(void *arg) {
  conn_arg *c = arg;
  wb_server *s = c->s;
  int rc = s->fn(s->ctx, c->fd, s->io);
  if (rc < 0) wb_errors_add(&s->errors, "server", rc, NULL);
  close(c->fd);
  free(c);
  return NULL;
}

/* Pause after an accept error that says "out of something": it may pass once connections close. */
static void accept_backoff(wb_server *s) {
  if (s->io == WB_IO_WEFT)
    weft_sleep_ns(10 * 1000000LL);
  else
    wb_sleep_ns(10 * 1000000LL);
}

/* Handle one accept result; false when the acceptor should stop. */
static bool accepted_one(wb_server *s, int c) {
  if (c < 0) {
    if (atomic_load(&s->stop)) return false;
    wb_errors_add(&s->errors, "accept", c, NULL);
    if (c == -EMFILE || c == -ENFILE || c == -ENOBUFS || c == -ENOMEM || c == -EPERM) {
      accept_backoff(s);
      return true;
    }
    return false;
  }
  if (atomic_load(&s->stop)) {
    close(c);
    return false;
  }
  atomic_fetch_add_explicit(&s->accepted, 1, memory_order_relaxed);
  if (s->nodelay) {
    int one = 1;
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  conn_arg *ca = malloc(sizeof *ca);
  if (!ca) {
    wb_errors_add(&s->errors, "server", -ENOMEM, NULL);
    close(c);
    return true;
  }
  ca->s = s;
  ca->fd = c;
  int rc;
  if (s->io == WB_IO_WEFT) {
    /*
     * The futures are kept, not freed at once: freeing a future that has not
     * started cancels it. Finished ones are swept out whenever the array is
     * full, so it holds about as many as are running.
     */
    if (s->nconns == s->cap) {
      size_t k = 0;
      for (size_t i = 0; i < s->nconns; i++) {
        if (weft_future_done(s->conns[i]))
          weft_future_free(s->conns[i]);
        else
          s->conns[k++] = s->conns[i];
      }
      s->nconns = k;
      if (s->cap == 0 || k > s->cap / 2) {
        size_t ncap = s->cap ? s->cap * 2 : 256;
        weft_future **p = realloc(s->conns, ncap * sizeof *p);
        if (p) {
          s->conns = p;
          s->cap = ncap;
        }
      }
    }
    weft_future *f = NULL;
    rc = s->nconns < s->cap ? weft_future_start(WEFT_BLOCKING, conn_main, ca, &f) : -ENOMEM;
    if (rc == 0) s->conns[s->nconns++] = f;
  } else {
    if (s->ntids == s->tcap) {
      size_t ncap = s->tcap ? s->tcap * 2 : 256;
      pthread_t *p = realloc(s->tids, ncap * sizeof *p);
      if (p) {
        s->tids = p;
        s->tcap = ncap;
      }
    }
    rc = s->ntids < s->tcap ? -pthread_create(&s->tids[s->ntids], &s->attr, conn_main, ca) : -ENOMEM;
    if (rc == 0) s->ntids++;
  }
  if (rc < 0) {
    wb_errors_add(&s->errors, s->io == WB_IO_WEFT ? "server: weft_future_start" : "server: pthread_create",
                  rc, NULL);
    close(c);
    free(ca);
  }
  return true;
}

static void *acceptor_main(void *arg) {
  wb_server *s = arg;
  for (;;) {
    int c;
    if (s->io == WB_IO_WEFT) {
      c = weft_accept(s->lfd, NULL, NULL, -1);
    } else {
      c = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
      if (c < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        c = -errno;
      }
    }
    if (!accepted_one(s, c)) break;
  }
  return NULL;
}

size_t wb_net_thread_stack(void) {
  weft_info info;
  size_t sz = weft_get_info(&info) == 0 && info.stack_size ? info.stack_size : 256 * 1024;
  if (sz < (size_t)PTHREAD_STACK_MIN) sz = (size_t)PTHREAD_STACK_MIN;
  return sz;
}

int wb_server_start(wb_io io, size_t backlog_hint, size_t thread_stack, bool nodelay, wb_conn_fn fn,
                    void *ctx, wb_server **out, char *err, size_t errlen) {
  wb_server *s = calloc(1, sizeof *s);
  if (!s) {
    snprintf(err, errlen, "out of memory");
    return -ENOMEM;
  }
  s->io = io;
  s->nodelay = nodelay;
  s->fn = fn;
  s->ctx = ctx;
  atomic_init(&s->stop, false);
  atomic_init(&s->accepted, 0);
  wb_errors_init(&s->errors);
  s->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int rc = s->lfd < 0 ? -errno : 0;
  const char *what = "socket";
  if (rc == 0) {
    int one = 1;
    setsockopt(s->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sin;
    memset(&sin, 0, sizeof sin);
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    what = "bind";
    rc = bind(s->lfd, (struct sockaddr *)&sin, sizeof sin) == 0 ? 0 : -errno;
  }
  if (rc == 0) {
    /* The kernel silently caps the backlog at net.core.somaxconn; ask for what the run needs. */
    size_t want = backlog_hint > SOMAXCONN ? backlog_hint : SOMAXCONN;
    if (want > INT_MAX) want = INT_MAX;
    int cap = wb_net_somaxconn();
    s->backlog = cap > 0 && (size_t)cap < want ? cap : (int)want;
    what = "listen";
    rc = listen(s->lfd, (int)want) == 0 ? 0 : -errno;
  }
  if (rc == 0) {
    s->addr.len = sizeof s->addr.ss;
    what = "getsockname";
    rc = getsockname(s->lfd, (struct sockaddr *)&s->addr.ss, &s->addr.len) == 0 ? 0 : -errno;
  }
  if (rc == 0 && io == WB_IO_WEFT) {
    what = "weft_future_start";
    rc = weft_future_start(WEFT_BLOCKING, acceptor_main, s, &s->acceptor);
  } else if (rc == 0) {
    pthread_attr_init(&s->attr);
    pthread_attr_setstacksize(&s->attr, thread_stack);
    what = "pthread_create";
    rc = -pthread_create(&s->acceptor_tid, &s->attr, acceptor_main, s);
    if (rc < 0) pthread_attr_destroy(&s->attr);
  }
  if (rc < 0) {
    snprintf(err, errlen, "loopback server: %s: %s", what, weft_strerror(rc));
    if (s->lfd >= 0) close(s->lfd);
    free(s);
    return rc;
  }
  *out = s;
  return 0;
}

const wb_addr *wb_server_addr(const wb_server *s) { return &s->addr; }

int wb_server_backlog(const wb_server *s) { return s->backlog; }

void wb_server_stop(wb_server *s, wb_server_stats *st) {
  atomic_store(&s->stop, true);
  /* Wakes a fiber parked in weft_accept, or a thread in accept(2): both then fail with EINVAL. */
  shutdown(s->lfd, SHUT_RDWR);
  if (s->io == WB_IO_WEFT) {
    weft_future_get(s->acceptor, -1, NULL);
    weft_future_free(s->acceptor);
    /* The acceptor has ended: its array is ours now (the future's get orders its writes before ours). */
    for (size_t i = 0; i < s->nconns; i++) {
      weft_future_get(s->conns[i], -1, NULL);
      weft_future_free(s->conns[i]);
    }
    free(s->conns);
  } else {
    pthread_join(s->acceptor_tid, NULL);
    for (size_t i = 0; i < s->ntids; i++) pthread_join(s->tids[i], NULL);
    free(s->tids);
    pthread_attr_destroy(&s->attr);
  }
  close(s->lfd);
  if (st) {
    st->accepted = atomic_load(&s->accepted);
    st->errors = wb_errors_count(&s->errors);
    snprintf(st->first_error, sizeof st->first_error, "%s", wb_errors_first(&s->errors));
  }
  free(s);
}

/* ------------------------------------------------------------------------ */
/* Latency                                                                   */
/* ------------------------------------------------------------------------ */

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* Nearest rank: the smallest sample with at least p% of the samples at or below it. */
static double rank(const float *v, size_t n, double p) {
  size_t k = (size_t)ceil(p / 100.0 * (double)n);
  if (k < 1) k = 1;
  return v[k - 1] / 1000.0;
}

wb_latency wb_latency_summary(float *us, size_t n) {
  wb_latency l = {NAN, NAN, NAN, NAN, 0};
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (!isnan(us[i])) us[k++] = us[i];
  if (k == 0) return l;
  qsort(us, k, sizeof *us, cmp_float);
  l.n = k;
  l.p50 = rank(us, k, 50);
  l.p90 = rank(us, k, 90);
  l.p99 = rank(us, k, 99);
  l.max = us[k - 1] / 1000.0;
  return l;
}

/* ------------------------------------------------------------------------ */
/* Reports                                                                   */
/* ------------------------------------------------------------------------ */

double wb_cpu_ms(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0) return NAN;
  return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
         (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

double wb_median(const double *v, size_t n) { return n ? wb_summarize(v, n).median : NAN; }

double wb_max(const double *v, size_t n) { return n ? wb_summarize(v, n).max : NAN; }

int wb_json_num_or_null(json_value *rec, const char *key, double v) {
  return isnan(v) ? json_set_null(rec, key) : json_set_num(rec, key, v);
}

size_t wb_ratios(const double *a, size_t na, const double *b, size_t nb, double *out) {
  size_t n = na < nb ? na : nb, k = 0;
  for (size_t r = 0; r < n; r++)
    if (b[r] > 0) out[k++] = round(a[r] / b[r] * 1e4) / 1e4;
  return k;
}

int wb_json_add_ratio(json_value *rec, const char *key, const double *a, size_t na, const double *b,
                      size_t nb) {
  char skey[64];
  snprintf(skey, sizeof skey, "%s_samples", key);
  double mb = wb_median(b, nb), ma = wb_median(a, na);
  if (!(mb > 0) || isnan(ma)) {
    int rc = json_set_null(rec, key);
    return rc ? rc : json_set_null(rec, skey);
  }
  double *r = malloc((na ? na : 1) * sizeof *r);
  if (!r) return -ENOMEM;
  size_t k = wb_ratios(a, na, b, nb, r);
  int rc = json_set_num(rec, key, round(ma / mb * 1e4) / 1e4);
  if (rc == 0) rc = json_set_nums(rec, skey, r, k);
  free(r);
  return rc;
}

void wb_print_cell(double v, int width, int prec) {
  if (isnan(v))
    printf(" %*s", width, "-");
  else
    printf(" %*.*f", width, prec, v);
}

void wb_print_ratio(const char *name, const double *a, size_t na, const double *b, size_t nb) {
  double mb = wb_median(b, nb), ma = wb_median(a, na);
  if (!(mb > 0) || isnan(ma)) return;
  printf("  %s: %.2fx", name, ma / mb);
  double *r = malloc((na ? na : 1) * sizeof *r);
  size_t k = r ? wb_ratios(a, na, b, nb, r) : 0;
  if (k > 1) {
    wb_summary s = wb_summarize(r, k);
    printf(" (per repetition: median %.2fx, min %.2fx, max %.2fx)", s.median, s.min, s.max);
  }
  free(r);
  printf("\n");
}

/* ------------------------------------------------------------------------ */
/* Options                                                                   */
/* ------------------------------------------------------------------------ */

bool wb_net_parse_backends(const char *cmd, const char *list, const char *const *names, size_t nnames,
                           size_t *chosen, size_t *nchosen) {
  *nchosen = 0;
  for (const char *p = list;;) {
    size_t len = strcspn(p, ",");
    size_t b = 0;
    while (b < nnames && !(strlen(names[b]) == len && strncmp(names[b], p, len) == 0)) b++;
    if (b == nnames) {
      wb_str all = {0};
      for (size_t i = 0; i < nnames; i++) {
        if (i) wb_str_add(&all, ", ");
        wb_str_add(&all, names[i]);
      }
      wb_usage_error(cmd, "--backend: unknown backend '%.*s' (%s)", (int)len, p, all.s ? all.s : "");
      wb_str_free(&all);
      return false;
    }
    for (size_t j = 0; j < *nchosen; j++) {
      if (chosen[j] == b) {
        wb_usage_error(cmd, "--backend: '%s' given twice", names[b]);
        return false;
      }
    }
    chosen[(*nchosen)++] = b;
    if (p[len] == '\0') break;
    p += len + 1;
  }
  return true;
}
