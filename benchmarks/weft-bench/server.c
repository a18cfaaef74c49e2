/*
 * This file contains the loopback test servers of weft-bench's network
 * measurements (server.h): an acceptor fiber with a fiber per connection
 * (WB_IO_WEFT), or an acceptor thread with a thread per connection
 * (WB_IO_PLAIN), both running the same handler.
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
    wb_net_close(c);
    free(ca);
  }
  return true;
}

static void *acceptor_main(void *arg) {
  wb_server *s = arg;
  for (;;) {
    int c = wb_net_accept(s->io, s->lfd);
    if (!accepted_one(s, c)) break;
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
  wb_net_close(s->lfd);
  if (st) {
    st->accepted = atomic_load(&s->accepted);
    st->errors = wb_errors_count(&s->errors);
    snprintf(st->first_error, sizeof st->first_error, "%s", wb_errors_first(&s->errors));
  }
  free(s);
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
  s->lfd = socket(at->ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int rc = s->lfd < 0 ? -errno : 0;
  const char *what = "socket";
  if (rc == 0) {
    int one = 1;
    setsockopt(s->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    what = "bind";
    rc = bind(s->lfd, (const struct sockaddr *)&at->ss, at->len) == 0 ? 0 : -errno;
  }
  if (rc == 0) {
    size_t want = backlog_hint > SOMAXCONN ? backlog_hint : SOMAXCONN;
    if (want > INT_MAX) want = INT_MAX;
    int cap = somaxconn();
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
    what = "weft_fd_open";
    rc = wb_net_adopt(io, s->lfd);
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
    char a[96];
    wb_net_addr_str(at, a, sizeof a);
    snprintf(err, errlen, "server on %s: %s: %s", a, what, weft_strerror(rc));
    if (s->lfd >= 0) wb_net_close(s->lfd);
    free(s);
    return rc;
  }
  *out = s;
  return 0;
}
