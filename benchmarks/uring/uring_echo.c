/*
 * This file contains weft-uring-echo, a microbenchmark of the mechanisms a
 * carrier could wait in for sockets: epoll readiness with read/send system
 * calls, io_uring completions (multishot receive into a provided buffer
 * ring, sends as requests), and io_uring as the wait point only (multishot
 * poll, then read/send system calls). It decides whether weft's carriers
 * should wait in io_uring instead of epoll for sockets. It measures the
 * mechanisms, not weft's scheduler: it does not link libweft.
 *
 * Workload: C connections (TCP over loopback, or AF_UNIX socketpairs), each
 * doing M round trips of B bytes: the client writes B bytes, the server
 * reads them and echoes them, the client reads them back and checks them,
 * then sends the next. Two threads, each one event loop: one runs every
 * client connection, the other every server connection. Connections are
 * made, and each loop registers them (epoll_ctl, io_uring_register_files,
 * the first multishot requests), before the clock starts; the clock covers
 * the round trips only. A "message" below is one round trip.
 *
 * Every repetition makes fresh connections: no mode inherits another's
 * socket state (a multishot request that a closing ring has not yet
 * cancelled, queued data). The modes run interleaved, the order rotating
 * every repetition, and the report gives medians over the repetitions.
 *
 * System calls are counted by the program, per call site: read, send,
 * epoll_wait, epoll_ctl, and io_uring_enter (each io_uring_submit and
 * io_uring_submit_and_wait is one: with SQPOLL off and a wait count of 1,
 * liburing always enters the kernel). getrusage(RUSAGE_THREAD) in each loop
 * thread gives the CPU time, user and system.
 *
 * An I/O failure ends its connection only: the failing side shuts the
 * socket down, the peer sees end of file on it, and both count an error.
 * A run that hangs regardless is ended by alarm() (the process dies with
 * SIGALRM): a benchmark has no better answer to a lost wake-up.
 */
#define _GNU_SOURCE 1
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { MODE_EPOLL, MODE_URING, MODE_URING_POLL, MODE_URING_RECV, MODE_COUNT };
static const char *const mode_names[MODE_COUNT] = {"epoll", "uring", "uring-poll", "uring-recv"};

#define EPOLL_EVENTS 256
/* Seconds a run may take before alarm() ends the process. */
#define RUN_ALARM_S 120
/* Largest message: each loop keeps 2 C provided buffers of this size. */
#define MAX_SIZE (64u << 10)
/* The kernel's limit on a provided buffer ring's entries. */
#define MAX_BUFS 32768u

/* user_data of a request: the connection in the high bits, the kind in the low byte. */
enum { OP_RECV = 1, OP_SEND = 2, OP_POLL_IN = 3, OP_POLL_OUT = 4 };
#define UDATA(id, op) (((uint64_t)(id) << 8) | (op))
#define UDATA_ID(u)   ((uint32_t)((u) >> 8))
#define UDATA_OP(u)   ((unsigned)((u)&0xff))
#define BUF_GROUP     0

typedef struct options {
  unsigned conns;        /* C */
  unsigned msgs;         /* M round trips per connection */
  size_t size;           /* B bytes per message */
  unsigned repeat;       /* K repetitions of every mode */
  bool mode[MODE_COUNT]; /* the modes to run */
  bool unix_sockets;     /* AF_UNIX socketpairs instead of loopback TCP */
  bool json;             /* one JSON object per mode per line instead of the table */
} options;

/* System calls made inside a timed loop, by kind. */
typedef struct counts {
  uint64_t read, send, epoll_wait, epoll_ctl, uring_enter;
} counts;

static uint64_t counts_total(const counts *c) {
  return c->read + c->send + c->epoll_wait + c->epoll_ctl + c->uring_enter;
}

typedef struct conn {
  int fd;
  uint32_t id;       /* index in its side's array: epoll data, fixed-file slot, user_data */
  unsigned done;     /* messages completed: echoes verified (client) or echoes sent (server) */
  size_t rx_len;     /* bytes of the message being received */
  size_t tx_off;     /* bytes of tx already sent */
  bool tx_busy;      /* tx is being sent: a send request is in flight, or a partial send waits */
  bool want_out;     /* waiting for writability after a partial send (EPOLLOUT or POLLOUT armed) */
  bool finished;     /* done with M messages, or failed */
  unsigned char *rx; /* B bytes: the message being received */
  unsigned char *tx; /* B bytes: the message being sent (the client checks the echo against it) */
} conn;

/* One event loop: the client's or the server's, one thread. */
typedef struct side {
  const options *o;
  int mode;
  bool client;
  unsigned ring_flags; /* io_uring setup flags (the probe's result) */
  conn *conns;
  unsigned left; /* connections not finished */
  counts sys;
  uint64_t errors;  /* mismatched echoes and failed connections */
  uint64_t enobufs; /* multishot receives ended by an empty buffer ring (re-armed) */
  int setup_rc;     /* 0, or the negative errno of the setup step named by setup_what */
  const char *setup_what;
  struct rusage ru0, ru1;
  struct timespec t0, t1;
  pthread_barrier_t *start;
  atomic_bool *setup_failed; /* either side failed to set up: neither runs */
  /* epoll */
  int epfd;
  /* io_uring */
  struct io_uring ring;
  bool ring_up;
  struct io_uring_buf_ring *br;
  size_t br_bytes;
  unsigned nbufs;
  size_t bufsz;
  unsigned char *bufs;
} side;

static atomic_uint errors_printed;

static void conn_fail(side *s, conn *c, const char *what, int err) {
  s->errors++;
  /* Both loops may fail at once: the count is only a limit on noise. */
  if (atomic_fetch_add_explicit(&errors_printed, 1, memory_order_relaxed) < 5)
    fprintf(stderr, "weft-uring-echo: %s %s conn %u: %s: %s\n", mode_names[s->mode],
            s->client ? "client" : "server", c->id, what, err ? strerror(err) : "unexpected end of file");
  if (!c->finished) {
    c->finished = true;
    s->left--;
  }
  /* The peer sees end of file and finishes its end too. */
  shutdown(c->fd, SHUT_RDWR);
}

static void conn_finish(side *s, conn *c) {
  if (!c->finished) {
    c->finished = true;
    s->left--;
  }
}

static void fill(unsigned char *p, size_t n, uint32_t id, unsigned seq) {
  uint32_t x = id * 2654435761u + seq * 40503u + 1;
  for (size_t i = 0; i < n; i++) {
    x = x * 1103515245u + 12345u;
    p[i] = (unsigned char)(x >> 16);
  }
}

static uint64_t ts_ns(const struct timespec *t) {
  return (uint64_t)t->tv_sec * 1000000000u + (uint64_t)t->tv_nsec;
}
static uint64_t tv_ns(const struct timeval *t) {
  return (uint64_t)t->tv_sec * 1000000000u + (uint64_t)t->tv_usec * 1000u;
}

/* ---------------------------------------------------------------------------
 * The protocol, common to every mode. start_send is the mode's way of sending.
 * ------------------------------------------------------------------------- */

static void start_send(side *s, conn *c);

/* A whole message is in rx and tx is free. */
static void on_message(side *s, conn *c) {
  size_t b = s->o->size;
  c->rx_len = 0;
  if (s->client) {
    if (memcmp(c->rx, c->tx, b) != 0) s->errors++;
    if (++c->done == s->o->msgs) {
      conn_finish(s, c);
      return;
    }
    fill(c->tx, b, c->id, c->done);
  } else {
    memcpy(c->tx, c->rx, b);
    c->done++;
  }
  start_send(s, c);
}

/* tx has gone out whole. */
static void on_sent(side *s, conn *c) {
  c->tx_busy = false;
  if (!s->client && c->done == s->o->msgs) {
    conn_finish(s, c);
    return;
  }
  /* A message that arrived before the send's completion was reaped waits in rx. */
  if (c->rx_len == s->o->size) on_message(s, c);
}

/* ---------------------------------------------------------------------------
 * System-call I/O: epoll and uring-poll. Sockets are non-blocking.
 * ------------------------------------------------------------------------- */

static void arm_out(side *s, conn *c);
static void disarm_out(side *s, conn *c);

/* Sends the rest of tx; on EAGAIN waits for writability (never in a ping-pong of small messages). */
static void send_some(side *s, conn *c) {
  size_t b = s->o->size;
  while (c->tx_off < b) {
    ssize_t n = send(c->fd, c->tx + c->tx_off, b - c->tx_off, MSG_NOSIGNAL);
    s->sys.send++;
    if (n > 0) {
      c->tx_off += (size_t)n;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!c->want_out) arm_out(s, c);
      return;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      conn_fail(s, c, "send", n < 0 ? errno : EIO);
      return;
    }
  }
  if (c->want_out) disarm_out(s, c);
  on_sent(s, c);
}

/* Reads until EAGAIN (edge-triggered readiness), handling each whole message. */
static void drain_read(side *s, conn *c) {
  size_t b = s->o->size;
  while (!c->finished) {
    if (c->rx_len == b) {
      /* A message waits for tx: the peer sends nothing more until it is echoed. */
      return;
    }
    ssize_t n = read(c->fd, c->rx + c->rx_len, b - c->rx_len);
    s->sys.read++;
    if (n > 0) {
      c->rx_len += (size_t)n;
      if (c->rx_len == b && !c->tx_busy) on_message(s, c);
    } else if (n == 0) {
      conn_fail(s, c, "read", 0);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return;
    } else if (errno != EINTR) {
      conn_fail(s, c, "read", errno);
    }
  }
}

/* ---------------------------------------------------------------------------
 * epoll
 * ------------------------------------------------------------------------- */

static void epoll_mod(side *s, conn *c, uint32_t events) {
  struct epoll_event e = {.events = events, .data.u32 = c->id};
  s->sys.epoll_ctl++;
  if (epoll_ctl(s->epfd, EPOLL_CTL_MOD, c->fd, &e) < 0) conn_fail(s, c, "epoll_ctl", errno);
}

static int epoll_setup(side *s) {
  s->epfd = epoll_create1(EPOLL_CLOEXEC);
  if (s->epfd < 0) return -errno;
  for (unsigned i = 0; i < s->o->conns; i++) {
    struct epoll_event e = {.events = EPOLLIN | EPOLLET, .data.u32 = i};
    if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->conns[i].fd, &e) < 0) return -errno;
  }
  return 0;
}

static void epoll_loop(side *s) {
  struct epoll_event ev[EPOLL_EVENTS];
  while (s->left > 0) {
    int n = epoll_wait(s->epfd, ev, EPOLL_EVENTS, -1);
    s->sys.epoll_wait++;
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      for (unsigned i = 0; i < s->o->conns; i++)
        if (!s->conns[i].finished) conn_fail(s, &s->conns[i], "epoll_wait", err);
      return;
    }
    for (int i = 0; i < n; i++) {
      conn *c = &s->conns[ev[i].data.u32];
      if (c->finished) continue;
      if ((ev[i].events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) && c->want_out) send_some(s, c);
      drain_read(s, c);
    }
  }
}

/* ---------------------------------------------------------------------------
 * io_uring: the ring, and the requests both io_uring modes make
 * ------------------------------------------------------------------------- */

static struct io_uring_sqe *sqe_get(side *s) {
  struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);
  while (sqe == NULL) {
    /* The submission queue is full: hand it to the kernel without waiting. */
    s->sys.uring_enter++;
    io_uring_submit(&s->ring);
    sqe = io_uring_get_sqe(&s->ring);
  }
  return sqe;
}

static unsigned pow2_at_least(unsigned n) {
  unsigned p = 1;
  while (p < n) p <<= 1;
  return p;
}

static int ring_init(struct io_uring *ring, unsigned conns, unsigned flags) {
  struct io_uring_params p;
  memset(&p, 0, sizeof p);
  /* CLAMP: 65536 connections ask for more completion entries than the kernel's maximum. */
  p.flags = flags | IORING_SETUP_CQSIZE | IORING_SETUP_CLAMP;
  /* Every connection may queue a send while the others queue theirs. */
  unsigned sq = pow2_at_least(conns < 64 ? 64 : conns);
  if (sq > 4096) sq = 4096;
  /* A receive and a send per connection per wait, with room: the kernel's overflow list is slow. */
  p.cq_entries = pow2_at_least(conns * 4 < 256 ? 256 : conns * 4);
  return io_uring_queue_init_params(sq, ring, &p);
}

/*
 * The provided buffer ring. liburing 2.3 (Debian 12, Ubuntu 24.04) has no
 * io_uring_setup_buf_ring (2.4), so the ring is mapped and registered here,
 * as that function does.
 */
static int buf_ring_setup(side *s) {
  s->nbufs = pow2_at_least(2 * s->o->conns);
  if (s->nbufs > MAX_BUFS) s->nbufs = MAX_BUFS;
  /* A receive takes at most one message: the peer sends nothing more until it is answered. */
  s->bufsz = (s->o->size + 63) & ~(size_t)63;
  s->br_bytes = s->nbufs * sizeof(struct io_uring_buf);
  void *m = mmap(NULL, s->br_bytes, PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
  if (m == MAP_FAILED) return -errno;
  s->br = m;
  s->bufs = malloc(s->nbufs * s->bufsz);
  if (s->bufs == NULL) return -ENOMEM;
  struct io_uring_buf_reg reg;
  memset(&reg, 0, sizeof reg);
  reg.ring_addr = (uint64_t)(uintptr_t)s->br;
  reg.ring_entries = s->nbufs;
  reg.bgid = BUF_GROUP;
  int rc = io_uring_register_buf_ring(&s->ring, &reg, 0);
  if (rc < 0) return rc;
  io_uring_buf_ring_init(s->br);
  int mask = io_uring_buf_ring_mask(s->nbufs);
  for (unsigned i = 0; i < s->nbufs; i++)
    io_uring_buf_ring_add(s->br, s->bufs + i * s->bufsz, (unsigned)s->bufsz, (unsigned short)i, mask, (int)i);
  io_uring_buf_ring_advance(s->br, (int)s->nbufs);
  return 0;
}

static void arm_recv(side *s, conn *c) {
  struct io_uring_sqe *sqe = sqe_get(s);
  io_uring_prep_recv_multishot(sqe, (int)c->id, NULL, 0, 0);
  sqe->flags |= IOSQE_FIXED_FILE | IOSQE_BUFFER_SELECT;
  sqe->buf_group = BUF_GROUP;
  io_uring_sqe_set_data64(sqe, UDATA(c->id, OP_RECV));
}

static void arm_poll(side *s, conn *c, unsigned op) {
  struct io_uring_sqe *sqe = sqe_get(s);
  if (op == OP_POLL_IN)
    io_uring_prep_poll_multishot(sqe, (int)c->id, POLLIN);
  else
    io_uring_prep_poll_add(sqe, (int)c->id, POLLOUT);
  sqe->flags |= IOSQE_FIXED_FILE;
  io_uring_sqe_set_data64(sqe, UDATA(c->id, op));
}

static void queue_send(side *s, conn *c) {
  struct io_uring_sqe *sqe = sqe_get(s);
  io_uring_prep_send(sqe, (int)c->id, c->tx + c->tx_off, s->o->size - c->tx_off, MSG_NOSIGNAL);
  sqe->flags |= IOSQE_FIXED_FILE;
  io_uring_sqe_set_data64(sqe, UDATA(c->id, OP_SEND));
}

static int uring_setup(side *s) {
  int rc = ring_init(&s->ring, s->o->conns, s->ring_flags);
  s->setup_what = "io_uring_queue_init_params";
  if (rc < 0) return rc;
  s->ring_up = true;
  /* A registered ring fd spares the kernel an fdget per enter; an old kernel lacks it (5.18), which costs
   * only that. */
  s->setup_what = "io_uring_register_ring_fd";
  rc = io_uring_register_ring_fd(&s->ring);
  if (rc < 0 && rc != -EINVAL) return rc;
  int *fds = malloc(s->o->conns * sizeof *fds);
  if (fds == NULL) return -ENOMEM;
  for (unsigned i = 0; i < s->o->conns; i++) fds[i] = s->conns[i].fd;
  s->setup_what = "io_uring_register_files";
  rc = io_uring_register_files(&s->ring, fds, s->o->conns);
  free(fds);
  if (rc < 0) return rc;
  if (s->mode == MODE_URING || s->mode == MODE_URING_RECV) {
    s->setup_what = "io_uring_register_buf_ring";
    rc = buf_ring_setup(s);
    if (rc < 0) return rc;
  }
  for (unsigned i = 0; i < s->o->conns; i++) {
    if (s->mode == MODE_URING || s->mode == MODE_URING_RECV)
      arm_recv(s, &s->conns[i]);
    else
      arm_poll(s, &s->conns[i], OP_POLL_IN);
  }
  s->setup_what = "io_uring_submit";
  rc = io_uring_submit(&s->ring);
  return rc < 0 ? rc : 0;
}

static void uring_teardown(side *s) {
  if (s->ring_up) io_uring_queue_exit(&s->ring);
  s->ring_up = false;
  if (s->br) munmap(s->br, s->br_bytes);
  s->br = NULL;
  free(s->bufs);
  s->bufs = NULL;
}

/* A receive completion (uring mode). *returned counts buffers given back, made visible after the batch. */
static void on_recv(side *s, conn *c, const struct io_uring_cqe *cqe, int *returned) {
  size_t b = s->o->size;
  bool more = cqe->flags & IORING_CQE_F_MORE;
  if (cqe->res > 0) {
    if (!(cqe->flags & IORING_CQE_F_BUFFER)) {
      conn_fail(s, c, "recv (no buffer)", EIO);
      return;
    }
    unsigned bid = cqe->flags >> IORING_CQE_BUFFER_SHIFT;
    unsigned char *p = s->bufs + (size_t)bid * s->bufsz;
    size_t n = (size_t)cqe->res;
    if (n > b - c->rx_len) {
      /* More than the message: the protocol allows none; keep the message, drop the rest. */
      s->errors++;
      n = b - c->rx_len;
    }
    memcpy(c->rx + c->rx_len, p, n);
    c->rx_len += n;
    io_uring_buf_ring_add(s->br, p, (unsigned)s->bufsz, (unsigned short)bid, io_uring_buf_ring_mask(s->nbufs),
                          (*returned)++);
    if (!c->finished && c->rx_len == b && !c->tx_busy) on_message(s, c);
  } else if (cqe->res == 0) {
    if (!c->finished) conn_fail(s, c, "recv", 0);
    return; /* end of file ends the multishot request: nothing to re-arm */
  } else if (cqe->res == -ENOBUFS) {
    s->enobufs++; /* re-armed below, once the batch's buffers are back */
  } else {
    if (!c->finished) conn_fail(s, c, "recv", -cqe->res);
    return;
  }
  if (!more && !c->finished) arm_recv(s, c);
}

static void on_send_cqe(side *s, conn *c, const struct io_uring_cqe *cqe) {
  if (c->finished) return;
  if (cqe->res < 0) {
    conn_fail(s, c, "send", -cqe->res);
    return;
  }
  c->tx_off += (size_t)cqe->res;
  if (c->tx_off < s->o->size) {
    if (cqe->res == 0) {
      conn_fail(s, c, "send (0 bytes)", EIO);
      return;
    }
    queue_send(s, c);
    return;
  }
  on_sent(s, c);
}

static void on_poll(side *s, conn *c, const struct io_uring_cqe *cqe, unsigned op) {
  if (c->finished) return;
  if (cqe->res < 0) {
    conn_fail(s, c, "poll", -cqe->res);
    return;
  }
  if (op == OP_POLL_OUT) {
    c->want_out = false; /* one-shot: disarmed by its completion */
    send_some(s, c);
    return;
  }
  if (!(cqe->flags & IORING_CQE_F_MORE)) arm_poll(s, c, OP_POLL_IN);
  drain_read(s, c);
}

static void uring_loop(side *s) {
  while (s->left > 0) {
    s->sys.uring_enter++;
    int rc = io_uring_submit_and_wait(&s->ring, 1);
    if (rc < 0 && rc != -EINTR && rc != -ETIME && rc != -EAGAIN && rc != -EBUSY) {
      for (unsigned i = 0; i < s->o->conns; i++)
        if (!s->conns[i].finished) conn_fail(s, &s->conns[i], "io_uring_submit_and_wait", -rc);
      return;
    }
    struct io_uring_cqe *cqe;
    unsigned head, seen = 0;
    int returned = 0;
    io_uring_for_each_cqe(&s->ring, head, cqe) {
      seen++;
      uint64_t u = io_uring_cqe_get_data64(cqe);
      conn *c = &s->conns[UDATA_ID(u)];
      switch (UDATA_OP(u)) {
      case OP_RECV:
        on_recv(s, c, cqe, &returned);
        break;
      case OP_SEND:
        on_send_cqe(s, c, cqe);
        break;
      default:
        on_poll(s, c, cqe, UDATA_OP(u));
        break;
      }
    }
    io_uring_cq_advance(&s->ring, seen);
    if (returned) io_uring_buf_ring_advance(s->br, returned);
  }
}

/* ---------------------------------------------------------------------------
 * The mode's hooks
 * ------------------------------------------------------------------------- */

static void start_send(side *s, conn *c) {
  c->tx_off = 0;
  c->tx_busy = true;
  if (s->mode == MODE_URING)
    queue_send(s, c);
  else
    send_some(s, c);
}

static void arm_out(side *s, conn *c) {
  c->want_out = true;
  if (s->mode == MODE_EPOLL)
    epoll_mod(s, c, EPOLLIN | EPOLLOUT | EPOLLET);
  else
    arm_poll(s, c, OP_POLL_OUT);
}

static void disarm_out(side *s, conn *c) {
  c->want_out = false;
  /* uring-poll's POLLOUT is one-shot: nothing to undo. */
  if (s->mode == MODE_EPOLL) epoll_mod(s, c, EPOLLIN | EPOLLET);
}

/* ---------------------------------------------------------------------------
 * One side's thread
 * ------------------------------------------------------------------------- */

static void *side_main(void *arg) {
  side *s = arg;
  s->setup_what = "epoll_ctl";
  s->setup_rc = s->mode == MODE_EPOLL ? epoll_setup(s) : uring_setup(s);
  if (s->setup_rc < 0) atomic_store(s->setup_failed, true);
  pthread_barrier_wait(s->start);
  if (!atomic_load(s->setup_failed)) {
    getrusage(RUSAGE_THREAD, &s->ru0);
    clock_gettime(CLOCK_MONOTONIC, &s->t0);
    if (s->client)
      for (unsigned i = 0; i < s->o->conns; i++) {
        fill(s->conns[i].tx, s->o->size, s->conns[i].id, 0);
        start_send(s, &s->conns[i]);
      }
    if (s->mode == MODE_EPOLL)
      epoll_loop(s);
    else
      uring_loop(s);
    clock_gettime(CLOCK_MONOTONIC, &s->t1);
    getrusage(RUSAGE_THREAD, &s->ru1);
  }
  if (s->mode == MODE_EPOLL) {
    if (s->epfd >= 0) close(s->epfd);
  } else {
    uring_teardown(s);
  }
  return NULL;
}

/* ---------------------------------------------------------------------------
 * Connections
 * ------------------------------------------------------------------------- */

static int set_nonblock(int fd) {
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) return -errno;
  return 0;
}

/* Makes n connected pairs: cfd[i] the client's end, sfd[i] the server's. Both non-blocking. */
static int make_pairs(const options *o, int *cfd, int *sfd) {
  unsigned n = o->conns;
  for (unsigned i = 0; i < n; i++) cfd[i] = sfd[i] = -1;
  if (o->unix_sockets) {
    for (unsigned i = 0; i < n; i++) {
      int sv[2];
      if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) < 0) return -errno;
      cfd[i] = sv[0];
      sfd[i] = sv[1];
    }
    return 0;
  }
  int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (l < 0) return -errno;
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t alen = sizeof a;
  int rc = 0;
  if (bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 128) < 0 ||
      getsockname(l, (struct sockaddr *)&a, &alen) < 0) {
    rc = -errno;
    goto out;
  }
  /* Connect, then accept, one at a time: the accept queue never outgrows its backlog. */
  for (unsigned i = 0; i < n; i++) {
    cfd[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (cfd[i] < 0 || connect(cfd[i], (struct sockaddr *)&a, sizeof a) < 0) {
      rc = -errno;
      goto out;
    }
    sfd[i] = accept4(l, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (sfd[i] < 0) {
      rc = -errno;
      goto out;
    }
    int one = 1;
    if (setsockopt(cfd[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) < 0 ||
        setsockopt(sfd[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) < 0) {
      rc = -errno;
      goto out;
    }
    rc = set_nonblock(cfd[i]);
    if (rc < 0) goto out;
  }
out:
  close(l);
  return rc;
}

static void close_all(int *fd, unsigned n) {
  for (unsigned i = 0; i < n; i++)
    if (fd[i] >= 0) close(fd[i]);
}

/* ---------------------------------------------------------------------------
 * Runs and the report
 * ------------------------------------------------------------------------- */

typedef struct sample {
  double msgs_per_s;
  double cpu_us_per_msg; /* both loops, user + system */
  double sys_us_per_msg; /* system part of it */
  double syscalls_per_rt;
  counts sys; /* both loops */
  uint64_t errors, enobufs;
} sample;

typedef struct result {
  bool skipped;
  char why[160];
  sample s[1000]; /* up to --repeat 1000 */
  unsigned n;
} result;

static uint64_t ru_cpu_ns(const struct rusage *a, const struct rusage *b, bool sys_only) {
  uint64_t s = tv_ns(&b->ru_stime) - tv_ns(&a->ru_stime);
  if (sys_only) return s;
  return s + tv_ns(&b->ru_utime) - tv_ns(&a->ru_utime);
}

/* One run of one mode. 0 with *out filled; -errno for a setup failure, described in why. */
static int run_once(const options *o, int mode, unsigned ring_flags, sample *out, char *why, size_t whylen) {
  unsigned n = o->conns;
  size_t b = o->size;
  int *cfd = malloc(n * sizeof *cfd), *sfd = malloc(n * sizeof *sfd);
  conn *cc = calloc(n, sizeof *cc), *sc = calloc(n, sizeof *sc);
  unsigned char *mem = malloc(4 * (size_t)n * b);
  int rc = -ENOMEM;
  if (!cfd || !sfd || !cc || !sc || !mem) {
    snprintf(why, whylen, "out of memory");
    goto out_free;
  }
  rc = make_pairs(o, cfd, sfd);
  if (rc < 0) {
    snprintf(why, whylen, "connections: %s", strerror(-rc));
    goto out_close;
  }
  for (unsigned i = 0; i < n; i++) {
    cc[i] =
        (conn){.fd = cfd[i], .id = i, .rx = mem + (4 * (size_t)i) * b, .tx = mem + (4 * (size_t)i + 1) * b};
    sc[i] = (conn){
        .fd = sfd[i], .id = i, .rx = mem + (4 * (size_t)i + 2) * b, .tx = mem + (4 * (size_t)i + 3) * b};
  }
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, 2);
  atomic_bool failed;
  atomic_init(&failed, false);
  side sides[2];
  for (int k = 0; k < 2; k++) {
    memset(&sides[k], 0, sizeof sides[k]);
    sides[k].o = o;
    sides[k].mode = mode;
    sides[k].client = k == 0;
    sides[k].ring_flags = ring_flags;
    sides[k].conns = k == 0 ? cc : sc;
    sides[k].left = n;
    sides[k].start = &start;
    sides[k].setup_failed = &failed;
    sides[k].epfd = -1;
  }
  alarm(RUN_ALARM_S);
  pthread_t th[2];
  for (int k = 0; k < 2; k++) {
    int e = pthread_create(&th[k], NULL, side_main, &sides[k]);
    if (e != 0) {
      fprintf(stderr, "weft-uring-echo: pthread_create: %s\n", strerror(e));
      exit(1);
    }
  }
  for (int k = 0; k < 2; k++) pthread_join(th[k], NULL);
  alarm(0);
  pthread_barrier_destroy(&start);
  rc = 0;
  for (int k = 0; k < 2; k++)
    if (sides[k].setup_rc < 0) {
      rc = sides[k].setup_rc;
      snprintf(why, whylen, "%s: %s", sides[k].setup_what, strerror(-rc));
    }
  if (rc == 0) {
    side *c = &sides[0], *sv = &sides[1];
    double msgs = (double)n * o->msgs;
    /* The client's loop starts first and ends last (it reads the last echo). */
    uint64_t wall = ts_ns(&c->t1) - ts_ns(&c->t0);
    uint64_t cpu = ru_cpu_ns(&c->ru0, &c->ru1, false) + ru_cpu_ns(&sv->ru0, &sv->ru1, false);
    uint64_t sys = ru_cpu_ns(&c->ru0, &c->ru1, true) + ru_cpu_ns(&sv->ru0, &sv->ru1, true);
    memset(out, 0, sizeof *out);
    out->msgs_per_s = msgs / ((double)wall / 1e9);
    out->cpu_us_per_msg = (double)cpu / 1e3 / msgs;
    out->sys_us_per_msg = (double)sys / 1e3 / msgs;
    out->sys.read = c->sys.read + sv->sys.read;
    out->sys.send = c->sys.send + sv->sys.send;
    out->sys.epoll_wait = c->sys.epoll_wait + sv->sys.epoll_wait;
    out->sys.epoll_ctl = c->sys.epoll_ctl + sv->sys.epoll_ctl;
    out->sys.uring_enter = c->sys.uring_enter + sv->sys.uring_enter;
    out->syscalls_per_rt = (double)counts_total(&out->sys) / msgs;
    out->errors = c->errors + sv->errors;
    out->enobufs = c->enobufs + sv->enobufs;
    /* A connection that stopped short is an error even if no call failed. */
    for (unsigned i = 0; i < n; i++)
      if (cc[i].done != o->msgs || sc[i].done != o->msgs) out->errors++;
  }
out_close:
  close_all(cfd, n);
  close_all(sfd, n);
out_free:
  free(cfd);
  free(sfd);
  free(cc);
  free(sc);
  free(mem);
  return rc;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, unsigned n) {
  qsort(v, n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void flags_str(unsigned f, char *buf, size_t len) {
  snprintf(buf, len, "%s%s%s%s", f & IORING_SETUP_SINGLE_ISSUER ? "SINGLE_ISSUER|" : "",
           f & IORING_SETUP_DEFER_TASKRUN ? "DEFER_TASKRUN|" : "",
           f & IORING_SETUP_COOP_TASKRUN ? "COOP_TASKRUN|" : "", f ? "" : "none");
  size_t n = strlen(buf);
  if (n && buf[n - 1] == '|') buf[n - 1] = '\0';
}

/* The io_uring setup flags the kernel takes, from the wanted set down. 0 with *flags, or -errno (no
 * io_uring). */
static int probe_uring(unsigned conns, unsigned *flags, char *refused, size_t rlen) {
  static const unsigned tries[] = {
      IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_COOP_TASKRUN,
      IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_COOP_TASKRUN,
      IORING_SETUP_COOP_TASKRUN,
      0,
  };
  refused[0] = '\0';
  int rc = -EINVAL;
  for (size_t i = 0; i < sizeof tries / sizeof tries[0]; i++) {
    struct io_uring ring;
    rc = ring_init(&ring, conns, tries[i]);
    if (rc == 0) {
      io_uring_queue_exit(&ring);
      *flags = tries[i];
      return 0;
    }
    if (rc != -EINVAL) return rc;
    size_t len = strlen(refused);
    char names[96];
    flags_str(tries[i], names, sizeof names);
    snprintf(refused + len, rlen - len, "%s%s", len ? "; " : "", names);
  }
  return rc;
}

static void usage(FILE *f) {
  fprintf(f, "usage: weft-uring-echo [--connections C] [--messages M] [--size B] [--repeat K]\n"
             "                       [--modes epoll,uring,uring-poll,uring-recv] [--unix] [--json]\n"
             "Echo round trips over C connections (default 1000), M per connection (100), of B bytes (64),\n"
             "each mode K times (5), interleaved; one client loop thread, one server loop thread.\n");
}

static bool parse_uint(const char *s, unsigned long lo, unsigned long hi, unsigned long *out) {
  char *end;
  errno = 0;
  unsigned long v = strtoul(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi || s[0] == '-') return false;
  *out = v;
  return true;
}

static bool parse_modes(const char *arg, bool *mode) {
  for (int m = 0; m < MODE_COUNT; m++) mode[m] = false;
  const char *p = arg;
  while (*p) {
    size_t len = strcspn(p, ",");
    int found = -1;
    for (int m = 0; m < MODE_COUNT; m++)
      if (strlen(mode_names[m]) == len && strncmp(p, mode_names[m], len) == 0) found = m;
    if (found < 0) return false;
    mode[found] = true;
    p += len;
    if (*p == ',') p++;
  }
  for (int m = 0; m < MODE_COUNT; m++)
    if (mode[m]) return true;
  return false;
}

static void raise_nofile(unsigned conns) {
  struct rlimit r;
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
  }
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur != RLIM_INFINITY && r.rlim_cur < 2 * (rlim_t)conns + 64)
    fprintf(stderr, "weft-uring-echo: warning: RLIMIT_NOFILE %llu is short of %u connections\n",
            (unsigned long long)r.rlim_cur, conns);
}

int main(int argc, char **argv) {
  options o = {.conns = 1000, .msgs = 100, .size = 64, .repeat = 5};
  for (int m = 0; m < MODE_COUNT; m++) o.mode[m] = true;
  static const struct option longopts[] = {
      {"connections", required_argument, NULL, 'c'},
      {"messages", required_argument, NULL, 'm'},
      {"size", required_argument, NULL, 'b'},
      {"repeat", required_argument, NULL, 'k'},
      {"modes", required_argument, NULL, 'M'},
      {"unix", no_argument, NULL, 'u'},
      {"json", no_argument, NULL, 'j'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  int ch;
  unsigned long v;
  while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
    switch (ch) {
    case 'c':
      if (!parse_uint(optarg, 1, 65536, &v)) goto bad;
      o.conns = (unsigned)v;
      break;
    case 'm':
      if (!parse_uint(optarg, 1, 100000000, &v)) goto bad;
      o.msgs = (unsigned)v;
      break;
    case 'b':
      if (!parse_uint(optarg, 1, MAX_SIZE, &v)) goto bad;
      o.size = v;
      break;
    case 'k':
      if (!parse_uint(optarg, 1, 1000, &v)) goto bad;
      o.repeat = (unsigned)v;
      break;
    case 'M':
      if (!parse_modes(optarg, o.mode)) goto bad;
      break;
    case 'u':
      o.unix_sockets = true;
      break;
    case 'j':
      o.json = true;
      break;
    case 'h':
      usage(stdout);
      return 0;
    default:
      goto bad;
    }
  }
  if (optind != argc) goto bad;
  raise_nofile(o.conns);

  unsigned ring_flags = 0;
  char refused[320], flagbuf[96], why[160];
  static result res[MODE_COUNT];
  if (o.mode[MODE_URING] || o.mode[MODE_URING_POLL] || o.mode[MODE_URING_RECV]) {
    int rc = probe_uring(o.conns, &ring_flags, refused, sizeof refused);
    if (rc < 0) {
      for (int m = MODE_URING; m <= MODE_URING_RECV; m++)
        if (o.mode[m]) {
          res[m].skipped = true;
          snprintf(res[m].why, sizeof res[m].why, "io_uring_queue_init_params: %s", strerror(-rc));
        }
    } else {
      flags_str(ring_flags, flagbuf, sizeof flagbuf);
      fprintf(o.json ? stderr : stdout, "uring: setup flags accepted: %s", flagbuf);
      if (refused[0]) fprintf(o.json ? stderr : stdout, " (refused with EINVAL: %s)", refused);
      fprintf(o.json ? stderr : stdout, "\n");
    }
  }
  flags_str(ring_flags, flagbuf, sizeof flagbuf);

  int order[MODE_COUNT], nmodes = 0;
  for (int m = 0; m < MODE_COUNT; m++)
    if (o.mode[m]) order[nmodes++] = m;
  for (unsigned r = 0; r < o.repeat; r++) {
    for (int i = 0; i < nmodes; i++) {
      int m = order[(r + (unsigned)i) % (unsigned)nmodes];
      if (res[m].skipped) continue;
      int rc = run_once(&o, m, ring_flags, &res[m].s[res[m].n], why, sizeof why);
      if (rc < 0) {
        res[m].skipped = true;
        snprintf(res[m].why, sizeof res[m].why, "%s", why);
        continue;
      }
      res[m].n++;
    }
  }

  const char *transport = o.unix_sockets ? "unix" : "tcp";
  double base = 0;
  if (!o.json)
    printf("%u connections x %u round trips x %zu bytes, %s, %u repetitions (medians)\n"
           "%-11s %10s %10s %10s %11s %11s %20s %7s %8s\n",
           o.conns, o.msgs, o.size, transport, o.repeat, "mode", "msgs/s", "min", "max", "CPU us/msg",
           "(sys us)", "syscalls/round-trip", "errors", "x epoll");
  for (int m = 0; m < MODE_COUNT; m++) {
    if (!o.mode[m]) continue;
    result *rs = &res[m];
    if (rs->skipped) {
      if (o.json)
        printf("{\"mode\":\"%s\",\"transport\":\"%s\",\"skipped\":\"%s\"}\n", mode_names[m], transport,
               rs->why);
      else
        printf("%s: skipped: %s\n", mode_names[m], rs->why);
      if (o.json) fprintf(stderr, "%s: skipped: %s\n", mode_names[m], rs->why);
      continue;
    }
    double rate[1000], cpu[1000], sysus[1000], calls[1000];
    double lo = 0, hi = 0;
    uint64_t errors = 0, enobufs = 0;
    counts tot = {0};
    for (unsigned i = 0; i < rs->n; i++) {
      const sample *x = &rs->s[i];
      rate[i] = x->msgs_per_s;
      cpu[i] = x->cpu_us_per_msg;
      sysus[i] = x->sys_us_per_msg;
      calls[i] = x->syscalls_per_rt;
      if (i == 0 || x->msgs_per_s < lo) lo = x->msgs_per_s;
      if (i == 0 || x->msgs_per_s > hi) hi = x->msgs_per_s;
      errors += x->errors;
      enobufs += x->enobufs;
      tot.read += x->sys.read;
      tot.send += x->sys.send;
      tot.epoll_wait += x->sys.epoll_wait;
      tot.epoll_ctl += x->sys.epoll_ctl;
      tot.uring_enter += x->sys.uring_enter;
    }
    double med = median(rate, rs->n), medcpu = median(cpu, rs->n), medsys = median(sysus, rs->n),
           medcalls = median(calls, rs->n);
    if (m == MODE_EPOLL) base = med;
    double rts = (double)rs->n * o.conns * o.msgs;
    if (o.json) {
      printf("{\"mode\":\"%s\",\"transport\":\"%s\",\"connections\":%u,\"messages\":%u,\"size\":%zu,"
             "\"repeat\":%u,\"msgs_per_s\":%.0f,\"msgs_per_s_min\":%.0f,\"msgs_per_s_max\":%.0f,"
             "\"cpu_us_per_msg\":%.3f,\"sys_us_per_msg\":%.3f,\"syscalls_per_round_trip\":%.3f,"
             "\"per_round_trip\":{\"read\":%.3f,\"send\":%.3f,\"epoll_wait\":%.3f,\"epoll_ctl\":%.3f,"
             "\"io_uring_enter\":%.3f},\"errors\":%llu,\"enobufs\":%llu,\"uring_flags\":\"%s\"",
             mode_names[m], transport, o.conns, o.msgs, o.size, rs->n, med, lo, hi, medcpu, medsys, medcalls,
             (double)tot.read / rts, (double)tot.send / rts, (double)tot.epoll_wait / rts,
             (double)tot.epoll_ctl / rts, (double)tot.uring_enter / rts, (unsigned long long)errors,
             (unsigned long long)enobufs, m == MODE_EPOLL ? "" : flagbuf);
      if (base > 0) printf(",\"ratio_vs_epoll\":%.3f", med / base);
      printf("}\n");
    } else {
      char ratio[16] = "-";
      if (base > 0) snprintf(ratio, sizeof ratio, "%.2f", med / base);
      printf("%-11s %10.0f %10.0f %10.0f %11.3f %11.3f %20.3f %7llu %8s\n", mode_names[m], med, lo, hi,
             medcpu, medsys, medcalls, (unsigned long long)errors, ratio);
    }
  }
  return 0;
bad:
  usage(stderr);
  return 2;
}
