/*
 * Suite "io": the fiber-aware I/O calls on sockets, pipes and regular files:
 * success, EOF, deadline expiry, EBADF, peer reset, cancellation, the
 * caller's descriptor flags left alone, and the same calls on a plain
 * thread. Each scenario runs on a fiber (a WEFT_BLOCKING future) and on the
 * main thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"

#define MS 1000000LL
/* The read hint's probe period (src/poll/poller.h, WEFT__DRY_PROBE). */
#define WEFT_TEST_DRY_PROBE 8

static int64_t in_ms(int ms) { return weft_now_ns() + ms * MS; }

/* Run fn(arg) on a fiber (a blocking future) and return its result as an int. */
static intptr_t on_fiber(void *(*fn)(void *), void *arg) {
  weft_future *f;
  if (weft_future_start(WEFT_BLOCKING, fn, arg, &f) != 0) return -9999;
  void *r = NULL;
  weft_future_get(f, -1, &r);
  weft_future_free(f);
  return (intptr_t)r;
}

/* Each scenario returns 0 on success, or the number of the check that failed. */
static void both_ways(void *(*fn)(void *), void *arg) {
  CU_ASSERT_EQUAL(on_fiber(fn, arg), 0);
  CU_ASSERT_EQUAL((intptr_t)fn(arg), 0);
}

#define CHECK(n, cond)                                                                                       \
  do {                                                                                                       \
    if (!(cond)) {                                                                                           \
      fprintf(stderr, "\n  check %d failed: %s\n", (n), #cond);                                              \
      return (void *)(intptr_t)(n);                                                                          \
    }                                                                                                        \
  } while (0)

/* --- sockets ---------------------------------------------------------------------------- */

static void *socketpair_basics(void *arg) {
  (void)arg;
  int sv[2];
  CHECK(1, socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  int fl = fcntl(sv[0], F_GETFL);
  CHECK(2, weft_write(sv[0], "hello", 5, -1) == 5);
  char buf[16] = {0};
  CHECK(3, weft_read(sv[1], buf, sizeof buf, in_ms(1000)) == 5 && memcmp(buf, "hello", 5) == 0);
  CHECK(4, weft_send(sv[1], "xy", 2, 0, -1) == 2);
  CHECK(5, weft_recv(sv[0], buf, 2, MSG_PEEK, -1) == 2);
  CHECK(6, weft_recv(sv[0], buf, sizeof buf, 0, 0) == 2 && memcmp(buf, "xy", 2) == 0);
  /* Nothing there: a deadline, then "try once". */
  int64_t t0 = weft_now_ns();
  CHECK(7, weft_read(sv[1], buf, sizeof buf, in_ms(20)) == -ETIMEDOUT);
  CHECK(8, weft_now_ns() - t0 >= 20 * MS);
  CHECK(9, weft_read(sv[1], buf, sizeof buf, 0) == -ETIMEDOUT);
  CHECK(10, weft_recv(sv[1], buf, sizeof buf, 0, 0) == -ETIMEDOUT);
  /* The caller's flags are as they were. */
  CHECK(11, fcntl(sv[0], F_GETFL) == fl);
  /* EOF. */
  close(sv[0]);
  CHECK(12, weft_read(sv[1], buf, sizeof buf, in_ms(1000)) == 0);
  /* Writing to a closed peer: -EPIPE, no SIGPIPE. */
  CHECK(13, weft_write(sv[1], "z", 1, -1) == -EPIPE);
  CHECK(14, weft_send(sv[1], "z", 1, 0, -1) == -EPIPE);
  close(sv[1]);
  return NULL;
}

static void test_socketpair(void) { both_ways(socketpair_basics, NULL); }

/*
 * The read hint (src/poll/poller.h): after reads of a socket found nothing, a
 * fiber waits for readiness before it reads. Data that is already there must
 * still be read at once, across the hint's periodic probe, and a descriptor
 * number that is closed and reused (as a socket, a pipe, a regular file)
 * must read what its new file holds.
 */
static void *read_hint(void *arg) {
  (void)arg;
  int sv[2];
  char buf[16];
  CHECK(1, socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  for (int k = 0; k < 3; k++) CHECK(2, weft_read(sv[1], buf, sizeof buf, in_ms(1)) == -ETIMEDOUT);
  /* Data there before each read, past several probes: each read returns it, in order. */
  for (int k = 0; k < 3 * WEFT_TEST_DRY_PROBE; k++) {
    char msg[2] = {(char)('a' + k % 26), (char)k};
    CHECK(3, weft_write(sv[0], msg, 2, -1) == 2);
    int64_t t0 = weft_now_ns();
    CHECK(4, weft_read(sv[1], buf, sizeof buf, in_ms(5000)) == 2 && memcmp(buf, msg, 2) == 0);
    CHECK(5, weft_now_ns() - t0 < 2000 * MS); /* not the deadline: the data was there */
  }
  /* Try once (deadline 0) on a hinted descriptor: it reads what is there, or says so. */
  CHECK(6, weft_read(sv[1], buf, sizeof buf, in_ms(1)) == -ETIMEDOUT);
  CHECK(7, weft_read(sv[1], buf, sizeof buf, 0) == -ETIMEDOUT);
  CHECK(8, weft_write(sv[0], "q", 1, -1) == 1);
  CHECK(9, weft_read(sv[1], buf, sizeof buf, 0) == 1 && buf[0] == 'q');
  /* The number reused by a new socket pair with data waiting. */
  int dry = sv[1];
  CHECK(10, weft_read(dry, buf, sizeof buf, in_ms(1)) == -ETIMEDOUT);
  close(sv[0]);
  close(sv[1]);
  int sw[2];
  CHECK(11, socketpair(AF_UNIX, SOCK_STREAM, 0, sw) == 0);
  int r = sw[0] == dry ? 0 : 1; /* read the end that has the old number, if either has */
  CHECK(12, write(sw[1 - r], "new", 3) == 3);
  CHECK(13, weft_read(sw[r], buf, sizeof buf, in_ms(5000)) == 3 && memcmp(buf, "new", 3) == 0);
  CHECK(14, weft_read(sw[r], buf, sizeof buf, in_ms(1)) == -ETIMEDOUT);
  dry = sw[r];
  close(sw[0]);
  close(sw[1]);
  /* ... by a pipe ... */
  int pp[2];
  CHECK(15, pipe(pp) == 0);
  CHECK(16, write(pp[1], "pipe", 4) == 4);
  int rd = pp[0];
  if (pp[1] == dry) { /* keep the reading end on the hinted number */
    rd = dup(pp[0]);
    CHECK(17, rd >= 0);
  }
  CHECK(18, weft_read(rd, buf, sizeof buf, in_ms(5000)) == 4 && memcmp(buf, "pipe", 4) == 0);
  if (rd != pp[0]) close(rd);
  close(pp[0]);
  close(pp[1]);
  /* ... and by a regular file. */
  char path[] = "/tmp/weft-io-hint-XXXXXX";
  int fd = mkstemp(path);
  CHECK(19, fd >= 0);
  unlink(path);
  CHECK(20, write(fd, "file", 4) == 4 && lseek(fd, 0, SEEK_SET) == 0);
  CHECK(21, weft_read(fd, buf, sizeof buf, in_ms(5000)) == 4 && memcmp(buf, "file", 4) == 0);
  close(fd);
  return NULL;
}

static void test_read_hint(void) { both_ways(read_hint, NULL); }

static void *bad_input(void *arg) {
  (void)arg;
  char buf[4];
  CHECK(1, weft_read(-1, buf, 4, -1) == -EBADF);
  CHECK(2, weft_write(-5, buf, 4, -1) == -EBADF);
  /*
   * A closed descriptor: a high number, since weft itself opens descriptors
   * lazily (a carrier's ring, an eventfd), and a low number that was just
   * closed may already be one of them.
   */
  int p[2];
  CHECK(3, pipe(p) == 0);
  int closed = dup2(p[0], 900);
  close(p[0]);
  close(p[1]);
  close(closed);
  CHECK(4, weft_read(closed, buf, 4, -1) == -EBADF);
  CHECK(5, weft_recv(closed, buf, 4, 0, -1) == -EBADF);
  CHECK(6, weft_read(0, NULL, 4, -1) == -EINVAL);
  CHECK(7, weft_read(0, buf, 4, -3) == -EINVAL);
  CHECK(8, weft_accept(-1, NULL, NULL, -1) == -EBADF);
  CHECK(9, weft_connect(3, NULL, 0, -1) == -EINVAL);
  CHECK(10, weft_poll_fd(-1, POLLIN, -1) == -EBADF);
  CHECK(11, weft_poll_fd(0, 0, -1) == -EINVAL);
  struct sockaddr_in a;
  CHECK(12, weft_accept(0, (struct sockaddr *)&a, NULL, -1) == -EINVAL);
  return NULL;
}

static void test_bad_input(void) { both_ways(bad_input, NULL); }

/* A loopback TCP listener on an ephemeral port. */
static int listener(struct sockaddr_in *addr) {
  int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  memset(addr, 0, sizeof *addr);
  addr->sin_family = AF_INET;
  addr->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof *addr;
  if (bind(l, (struct sockaddr *)addr, len) != 0 || listen(l, 64) != 0 ||
      getsockname(l, (struct sockaddr *)addr, &len) != 0) {
    close(l);
    return -1;
  }
  return l;
}

typedef struct tcp_args {
  int listener;
  struct sockaddr_in addr;
  atomic_int accepted;
} tcp_args;

static void *tcp_client(void *arg) {
  tcp_args *t = arg;
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0); /* blocking: weft must not block the carrier */
  int fl = fcntl(s, F_GETFL);
  CHECK(20, weft_connect(s, (struct sockaddr *)&t->addr, sizeof t->addr, in_ms(5000)) == 0);
  CHECK(21, fcntl(s, F_GETFL) == fl);
  char buf[64];
  CHECK(22, weft_write(s, "ping", 4, -1) == 4);
  CHECK(23, weft_read(s, buf, sizeof buf, in_ms(5000)) == 4 && memcmp(buf, "pong", 4) == 0);
  close(s);
  return NULL;
}

static void *tcp_server(void *arg) {
  tcp_args *t = arg;
  int c = weft_accept(t->listener, NULL, NULL, in_ms(5000));
  CHECK(30, c >= 0);
  CHECK(31, (fcntl(c, F_GETFD) & FD_CLOEXEC) != 0);
  char buf[64];
  CHECK(32, weft_read(c, buf, sizeof buf, in_ms(5000)) == 4 && memcmp(buf, "ping", 4) == 0);
  CHECK(33, weft_write(c, "pong", 4, -1) == 4);
  CHECK(34, weft_read(c, buf, sizeof buf, in_ms(5000)) == 0); /* the client closed */
  close(c);
  atomic_fetch_add(&t->accepted, 1);
  return NULL;
}

static void test_tcp_accept_connect(void) {
  tcp_args t;
  t.listener = listener(&t.addr);
  CU_ASSERT_FATAL(t.listener >= 0);
  atomic_init(&t.accepted, 0);
  /* Fiber server, fiber client; then fiber server, thread client; then thread server, fiber client. */
  for (int mode = 0; mode < 3; mode++) {
    weft_future *srv = NULL, *cli = NULL;
    void *rs = NULL, *rc = NULL;
    if (mode < 2) CU_ASSERT_EQUAL(weft_future_start(WEFT_BLOCKING, tcp_server, &t, &srv), 0);
    if (mode != 1) CU_ASSERT_EQUAL(weft_future_start(WEFT_BLOCKING, tcp_client, &t, &cli), 0);
    if (mode == 1) rc = tcp_client(&t);
    if (mode == 2) rs = tcp_server(&t);
    if (srv) {
      weft_future_get(srv, -1, &rs);
      weft_future_free(srv);
    }
    if (cli) {
      weft_future_get(cli, -1, &rc);
      weft_future_free(cli);
    }
    CU_ASSERT_PTR_NULL(rs);
    CU_ASSERT_PTR_NULL(rc);
  }
  CU_ASSERT_EQUAL(atomic_load(&t.accepted), 3);
  close(t.listener);
}

static void *accept_timeout(void *arg) {
  tcp_args *t = arg;
  CHECK(1, weft_accept(t->listener, NULL, NULL, in_ms(20)) == -ETIMEDOUT);
  CHECK(2, weft_accept(t->listener, NULL, NULL, 0) == -ETIMEDOUT);
  return NULL;
}

static void *connect_refused(void *arg) {
  tcp_args *t = arg;
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int rc = weft_connect(s, (struct sockaddr *)&t->addr, sizeof t->addr, in_ms(5000));
  close(s);
  CHECK(1, rc == -ECONNREFUSED);
  return NULL;
}

static void test_tcp_errors(void) {
  tcp_args t;
  t.listener = listener(&t.addr);
  CU_ASSERT_FATAL(t.listener >= 0);
  both_ways(accept_timeout, &t);
  close(t.listener); /* nobody listens on that port now */
  both_ways(connect_refused, &t);
}

/* Peer reset: the peer closes with SO_LINGER 0, which sends RST. */
static void *peer_reset(void *arg) {
  (void)arg;
  struct sockaddr_in addr;
  int l = listener(&addr);
  CHECK(1, l >= 0);
  int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  CHECK(2, weft_connect(c, (struct sockaddr *)&addr, sizeof addr, in_ms(5000)) == 0);
  int s = weft_accept(l, NULL, NULL, in_ms(5000));
  CHECK(3, s >= 0);
  struct linger lg = {1, 0};
  setsockopt(s, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  close(s);
  char buf[8];
  ssize_t r = weft_read(c, buf, sizeof buf, in_ms(5000));
  CHECK(4, r == -ECONNRESET);
  close(c);
  close(l);
  return NULL;
}

static void test_peer_reset(void) { both_ways(peer_reset, NULL); }

/* --- pipes ---------------------------------------------------------------------------- */

static void *pipe_writer(void *arg) {
  int fd = (int)(intptr_t)arg;
  weft_sleep_ns(10 * MS);
  weft_write(fd, "later", 5, -1);
  return NULL;
}

static void *pipes(void *arg) {
  bool nonblocking = arg != NULL;
  int p[2];
  CHECK(1, pipe(p) == 0);
  if (nonblocking) {
    fcntl(p[0], F_SETFL, fcntl(p[0], F_GETFL) | O_NONBLOCK);
    fcntl(p[1], F_SETFL, fcntl(p[1], F_GETFL) | O_NONBLOCK);
  }
  int fl0 = fcntl(p[0], F_GETFL), fl1 = fcntl(p[1], F_GETFL);
  char buf[8192];
  CHECK(2, weft_read(p[0], buf, sizeof buf, in_ms(10)) == -ETIMEDOUT);
  /* A writer on another context; the reader waits for it without blocking its carrier. */
  weft_future *w;
  CHECK(3, weft_future_start(WEFT_BLOCKING, pipe_writer, (void *)(intptr_t)p[1], &w) == 0);
  CHECK(4, weft_read(p[0], buf, sizeof buf, in_ms(5000)) == 5 && memcmp(buf, "later", 5) == 0);
  weft_future_get(w, -1, NULL);
  weft_future_free(w);
  /* A big write: one transfer, maybe short, never more than asked. */
  memset(buf, 'x', sizeof buf);
  ssize_t n = weft_write(p[1], buf, sizeof buf, in_ms(5000));
  CHECK(5, n > 0 && n <= (ssize_t)sizeof buf);
  ssize_t got = 0;
  while (got < n) {
    ssize_t r = weft_read(p[0], buf, sizeof buf, in_ms(5000));
    CHECK(6, r > 0);
    got += r;
  }
  CHECK(7, fcntl(p[0], F_GETFL) == fl0 && fcntl(p[1], F_GETFL) == fl1);
  CHECK(8, weft_poll_fd(p[1], POLLOUT, 0) & POLLOUT);
  CHECK(9, weft_poll_fd(p[0], POLLIN, in_ms(10)) == -ETIMEDOUT);
  close(p[1]);
  CHECK(10, weft_read(p[0], buf, sizeof buf, in_ms(5000)) == 0); /* EOF */
  CHECK(11, weft_poll_fd(p[0], POLLIN, -1) & POLLHUP);
  close(p[0]);
  return NULL;
}

static void test_pipes(void) {
  both_ways(pipes, NULL);
  both_ways(pipes, (void *)1);
}

/* --- regular files ---------------------------------------------------------------------- */

static void *files(void *arg) {
  (void)arg;
  char path[] = "/tmp/weft-io-XXXXXX";
  int fd = mkstemp(path);
  CHECK(1, fd >= 0);
  unlink(path);
  char data[10000];
  for (size_t i = 0; i < sizeof data; i++) data[i] = (char)('a' + i % 26);
  size_t done = 0;
  while (done < sizeof data) {
    ssize_t w = weft_write(fd, data + done, sizeof data - done, -1);
    CHECK(2, w > 0);
    done += (size_t)w;
  }
  CHECK(3, lseek(fd, 0, SEEK_SET) == 0);
  char back[sizeof data];
  done = 0;
  while (done < sizeof back) {
    ssize_t r = weft_read(fd, back + done, sizeof back - done, -1);
    CHECK(4, r > 0);
    done += (size_t)r;
  }
  CHECK(5, memcmp(data, back, sizeof data) == 0);
  /* The file position moved as read(2) moves it: EOF now. */
  CHECK(6, weft_read(fd, back, sizeof back, -1) == 0);
  CHECK(7, weft_poll_fd(fd, POLLIN, 0) & POLLIN);
  int closed = dup2(fd, 901); /* see bad_input: a high number nobody reuses */
  close(fd);
  close(closed);
  CHECK(8, weft_read(closed, back, 1, -1) == -EBADF);
  return NULL;
}

static void test_regular_files(void) {
  both_ways(files, NULL);
  /* And without io_uring: the offload pool. */
  weft_config c = weft_test_config();
  c.io_uring = 0;
  CU_ASSERT_EQUAL(weft_configure(&c), 0);
  both_ways(files, NULL);
  CU_ASSERT_EQUAL(weft_test_default_config(), 0);
}

/* --- cancellation ----------------------------------------------------------------------- */

typedef struct cancel_args {
  int fd;
  atomic_int entered;
} cancel_args;

static void *blocked_reader(void *arg) {
  cancel_args *a = arg;
  atomic_store(&a->entered, 1);
  char buf[8];
  return (void *)(intptr_t)weft_read(a->fd, buf, sizeof buf, -1);
}

static void test_cancel_read(void) {
  int sv[2];
  CU_ASSERT_FATAL(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  cancel_args a = {sv[0], 0};
  weft_future *f;
  CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_BLOCKING, blocked_reader, &a, &f), 0);
  while (!atomic_load(&a.entered)) weft_test_sleep_ms(1);
  weft_test_sleep_ms(20);
  CU_ASSERT_EQUAL(weft_future_cancel(f), -EBUSY);
  void *r = NULL;
  CU_ASSERT_EQUAL(weft_future_get(f, in_ms(10000), &r), 0);
  CU_ASSERT_EQUAL((intptr_t)r, -ECANCELED);
  weft_future_free(f);
  close(sv[0]);
  close(sv[1]);
}

/* --- many connections at once --------------------------------------------------------------- */

typedef struct echo {
  int fd;
  int rounds;
} echo;

static void *echo_peer(void *arg) {
  echo *e = arg;
  char buf[64];
  for (int i = 0; i < e->rounds; i++) {
    ssize_t r = weft_read(e->fd, buf, sizeof buf, in_ms(20000));
    if (r <= 0 || weft_write(e->fd, buf, (size_t)r, -1) != r) return (void *)1;
  }
  return NULL;
}

static int echo_client(void *ctx, size_t i) {
  echo *pairs = ctx;
  char msg[32], buf[64];
  for (int k = 0; k < pairs[i].rounds; k++) {
    int len = snprintf(msg, sizeof msg, "m%zu-%d", i, k);
    if (weft_write(pairs[i].fd, msg, (size_t)len, -1) != len) return 1;
    ssize_t got = 0;
    while (got < len) {
      ssize_t r = weft_read(pairs[i].fd, buf + got, sizeof buf - (size_t)got, in_ms(20000));
      if (r <= 0) return 2;
      got += r;
    }
    if (memcmp(buf, msg, (size_t)len) != 0) return 3;
  }
  return 0;
}

static void test_many_pairs(void) {
  size_t n = weft_test_slow_env() ? 50 : 500;
  echo *cli = calloc(n, sizeof *cli), *srv = calloc(n, sizeof *srv);
  weft_future **fs = calloc(n, sizeof *fs);
  for (size_t i = 0; i < n; i++) {
    int sv[2];
    CU_ASSERT_FATAL(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    cli[i] = (echo){sv[0], 20};
    srv[i] = (echo){sv[1], 20};
    CU_ASSERT_EQUAL(weft_future_start(WEFT_BLOCKING, echo_peer, &srv[i], &fs[i]), 0);
  }
  weft_pmap_opts o = WEFT_PMAP_OPTS_INIT;
  o.kind = WEFT_BLOCKING;
  CU_ASSERT_EQUAL(weft_pmap(n, echo_client, cli, &o), 0);
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    void *r = NULL;
    weft_future_get(fs[i], -1, &r);
    bad += r != NULL;
    weft_future_free(fs[i]);
    close(cli[i].fd);
    close(srv[i].fd);
  }
  CU_ASSERT_EQUAL(bad, 0);
  free(cli);
  free(srv);
  free(fs);
}

int main(int argc, char **argv) {
  static const weft_test tests[] = {
      {"socketpair", test_socketpair},
      {"read_hint", test_read_hint},
      {"bad_input", test_bad_input},
      {"tcp_accept_connect", test_tcp_accept_connect},
      {"tcp_errors", test_tcp_errors},
      {"peer_reset", test_peer_reset},
      {"pipes", test_pipes},
      {"regular_files", test_regular_files},
      {"cancel_read", test_cancel_read},
      {"many_pairs", test_many_pairs},
      {NULL, NULL},
  };
  return weft_test_run(argc, argv, "io", tests);
}
