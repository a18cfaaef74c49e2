/*
 * This file contains the loopback test servers of weft-bench's network
 * measurements (server.h): per listener, an acceptor fiber with a fiber per
 * connection (WB_IO_WEFT), or an acceptor thread with a thread per
 * connection (WB_IO_PLAIN), both running the same handler.
 */
/* accept4 and SOCK_CLOEXEC are Linux's (Linux first, as proc.c). */
#define _GNU_SOURCE 1
#include "server.h"

#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "weft.h"

/*
 * One listening socket and its acceptor. A server has several when the
 * connections it expects at once exceed net.core.somaxconn: they share the
 * port (SO_REUSEPORT), the kernel spreads the handshakes over their accept
 * queues, and each has its own acceptor, so a burst of connects finds room
 * instead of overflowing one queue (a dropped handshake costs its client a
 * retransmission about a second later).
 */
typedef struct wb_listener {
  struct wb_server *s;
  int lfd; /* closed by wb_server_stop */
  /* WB_IO_WEFT: the acceptor and the connections' futures (touched by the acceptor only until it ends) */
  weft_future *acceptor;
  weft_future **conns;
  size_t nconns, cap;
  /*
   * WB_IO_PLAIN: the acceptor and the connections' threads (likewise). They
   * are joined at the stop, not before: this server is for runs whose
   * connections all live at once (echo), where that costs nothing.
   */
  bool thread_started;
  pthread_t acceptor_tid;
  pthread_t *tids;
  size_t ntids, tcap;
} wb_listener;

#define WB_LISTENERS_MAX 8

struct wb_server {
  wb_io io;
  wb_addr addr;
  int backlog;  /* each listener's */
  bool nodelay; /* TCP_NODELAY on accepted connections */
  wb_conn_fn fn;
  void *ctx;
  atomic_bool stop; /* set before the listeners are shut down: the acceptors' wake-up is not an error */
  atomic_size_t accepted;
  wb_errors errors;
  pthread_attr_t attr; /* WB_IO_PLAIN: the threads' */
  size_t nl;
  wb_listener l[WB_LISTENERS_MAX];
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
  wb_net_close(c->fd);
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
static bool accepted_one(wb_listener *l, int c) {
  wb_server *s = l->s;
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
    wb_net_close(c);
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
    wb_net_close(c);
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
    if (l->nconns == l->cap) {
      size_t k = 0;
      for (size_t i = 0; i < l->nconns; i++) {
        if (weft_future_done(l->conns[i]))
          weft_future_free(l->conns[i]);
        else
          l->conns[k++] = l->conns[i];
      }
      l->nconns = k;
      if (l->cap == 0 || k > l->cap / 2) {
        size_t ncap = l->cap ? l->cap * 2 : 256;
        weft_future **p = realloc(l->conns, ncap * sizeof *p);
        if (p) {
          l->conns = p;
          l->cap = ncap;
        }
      }
    }
    weft_future *f = NULL;
    rc = l->nconns < l->cap ? weft_future_start(WEFT_BLOCKING, conn_main, ca, &f) : -ENOMEM;
    if (rc == 0) l->conns[l->nconns++] = f;
  } else {
    if (l->ntids == l->tcap) {
      size_t ncap = l->tcap ? l->tcap * 2 : 256;
      pthread_t *p = realloc(l->tids, ncap * sizeof *p);
      if (p) {
        l->tids = p;
        l->tcap = ncap;
      }
    }
    rc = l->ntids < l->tcap ? -pthread_create(&l->tids[l->ntids], &s->attr, conn_main, ca) : -ENOMEM;
    if (rc == 0) l->ntids++;
  }
  if (rc < 0) {
    wb_errors_add(&s->errors, s->io == WB_IO_WEFT ? "server: weft_future_start" : "server: pthread_create",
                  rc, NULL);
    wb_net_close(c);
    free(ca);
  }
  return true;
}

static void *acceptor_main(void *arg) {
  wb_listener *l = arg;
  for (;;) {
    int c = wb_net_accept(l->s->io, l->lfd);
    if (!accepted_one(l, c)) break;
  }
  return NULL;
}

/* net.core.somaxconn: the kernel's cap on any listen backlog (-1 when unreadable). */
static int somaxconn(void) {
  int v = -1;
  FILE *f = fopen("/proc/sys/net/core/somaxconn", "r");
  if (f) {
    if (fscanf(f, "%d", &v) != 1) v = -1;
    fclose(f);
  }
  return v;
}

void wb_weft_io_uring(int want) {
  static int now = -1;
  if (want == now) return;
  weft_shutdown();
  weft_config cfg;
  weft_config_init(&cfg);
  cfg.io_uring = want;
  if (weft_configure(&cfg) == 0) now = want;
}

size_t wb_net_thread_stack(void) {
  weft_info info;
  size_t sz = weft_get_info(&info) == 0 && info.stack_size ? info.stack_size : 256 * 1024;
  if (sz < (size_t)PTHREAD_STACK_MIN) sz = (size_t)PTHREAD_STACK_MIN;
  return sz;
}

int wb_server_start(wb_io io, size_t backlog_hint, size_t thread_stack, bool nodelay, wb_conn_fn fn,
                    void *ctx, wb_server **out, char *err, size_t errlen) {
  wb_addr lo;
  memset(&lo, 0, sizeof lo);
  struct sockaddr_in *sin = (struct sockaddr_in *)&lo.ss;
  sin->sin_family = AF_INET;
  sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  lo.len = sizeof *sin;
  return wb_server_start_at(io, &lo, backlog_hint, thread_stack, nodelay, fn, ctx, out, err, errlen);
}

const wb_addr *wb_server_addr(const wb_server *s) { return &s->addr; }

int wb_server_backlog(const wb_server *s) { return s->backlog; }

int wb_server_listeners(const wb_server *s) { return (int)s->nl; }

/* Wait for l's acceptor, then for every connection it started; frees what it kept. */
static void listener_join(wb_server *s, wb_listener *l) {
  if (s->io == WB_IO_WEFT) {
    if (l->acceptor) {
      weft_future_get(l->acceptor, -1, NULL);
      weft_future_free(l->acceptor);
    }
    /* The acceptor has ended: its array is ours now (the future's get orders its writes before ours). */
    for (size_t i = 0; i < l->nconns; i++) {
      weft_future_get(l->conns[i], -1, NULL);
      weft_future_free(l->conns[i]);
    }
    free(l->conns);
  } else {
    if (l->thread_started) pthread_join(l->acceptor_tid, NULL);
    for (size_t i = 0; i < l->ntids; i++) pthread_join(l->tids[i], NULL);
    free(l->tids);
  }
  if (l->lfd >= 0) wb_net_close(l->lfd);
}

/* Stop the acceptors of listeners [0, n) and everything they started; frees s. */
static void server_end(wb_server *s, size_t n, wb_server_stats *st) {
  atomic_store(&s->stop, true);
  /* Wakes a fiber parked in weft_accept, or a thread in accept(2): both then fail with EINVAL. */
  for (size_t i = 0; i < n; i++)
    if (s->l[i].lfd >= 0) shutdown(s->l[i].lfd, SHUT_RDWR);
  for (size_t i = 0; i < n; i++) listener_join(s, &s->l[i]);
  if (s->io != WB_IO_WEFT) pthread_attr_destroy(&s->attr);
  if (st) {
    st->accepted = atomic_load(&s->accepted);
    st->errors = wb_errors_count(&s->errors);
    snprintf(st->first_error, sizeof st->first_error, "%s", wb_errors_first(&s->errors));
  }
  free(s);
}

void wb_server_stop(wb_server *s, wb_server_stats *st) { server_end(s, s->nl, st); }

/* Open listener l on `at` (SO_REUSEPORT when the server has several) and start its acceptor. */
static int listener_start(wb_server *s, wb_listener *l, const wb_addr *at, int backlog, bool reuseport,
                          const char **what) {
  l->s = s;
  *what = "socket";
  l->lfd = socket(at->ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (l->lfd < 0) return -errno;
  int one = 1;
  setsockopt(l->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  *what = "SO_REUSEPORT";
  if (reuseport && setsockopt(l->lfd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0) return -errno;
  *what = "bind";
  if (bind(l->lfd, (const struct sockaddr *)&at->ss, at->len) != 0) return -errno;
  *what = "listen";
  if (listen(l->lfd, backlog) != 0) return -errno;
  if (s->io == WB_IO_WEFT) {
    *what = "weft_fd_open";
    int rc = wb_net_adopt(s->io, l->lfd);
    if (rc < 0) return rc;
    *what = "weft_future_start";
    return weft_future_start(WEFT_BLOCKING, acceptor_main, l, &l->acceptor);
  }
  *what = "pthread_create";
  int rc = -pthread_create(&l->acceptor_tid, &s->attr, acceptor_main, l);
  l->thread_started = rc == 0;
  return rc;
}

/* The server on the address given (weft-bench serve); wb_server_start is this on 127.0.0.1, port 0. */
int wb_server_start_at(wb_io io, const wb_addr *at, size_t backlog_hint, size_t thread_stack, bool nodelay,
                       wb_conn_fn fn, void *ctx, wb_server **out, char *err, size_t errlen) {
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
  for (size_t i = 0; i < WB_LISTENERS_MAX; i++) s->l[i].lfd = -1;
  if (io != WB_IO_WEFT) {
    pthread_attr_init(&s->attr);
    pthread_attr_setstacksize(&s->attr, thread_stack);
  }
  size_t want = backlog_hint > SOMAXCONN ? backlog_hint : SOMAXCONN;
  if (want > INT_MAX) want = INT_MAX;
  int cap = somaxconn();
  s->backlog = cap > 0 && (size_t)cap < want ? cap : (int)want;
  /* Enough listeners that their queues together hold backlog_hint connects (WB_LISTENERS_MAX at most). */
  size_t nl = (backlog_hint + (size_t)s->backlog - 1) / (size_t)s->backlog;
  if (nl < 1) nl = 1;
  if (nl > WB_LISTENERS_MAX) nl = WB_LISTENERS_MAX;
  /* The first takes the port (0: the kernel picks one); the others bind to the same one. */
  wb_addr bound = *at;
  const char *what = "socket";
  int rc = 0;
  size_t started = 0;
  for (; started < nl && rc == 0; started++) {
    rc = listener_start(s, &s->l[started], &bound, (int)want, nl > 1, &what);
    if (rc == 0 && started == 0) {
      s->addr.len = sizeof s->addr.ss;
      what = "getsockname";
      rc = getsockname(s->l[0].lfd, (struct sockaddr *)&s->addr.ss, &s->addr.len) == 0 ? 0 : -errno;
      bound = s->addr;
    }
  }
  if (rc < 0) {
    char a[96];
    wb_net_addr_str(at, a, sizeof a);
    snprintf(err, errlen, "server on %s: %s: %s", a, what, weft_strerror(rc));
    server_end(s, started, NULL);
    return rc;
  }
  s->nl = nl;
  *out = s;
  return 0;
}
