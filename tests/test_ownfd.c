/*
 * Suite "ownfd": owned descriptors (weft_fd_*): transfers, deadlines, EOF
 * and EPIPE on fibers and threads and between the two; close while fibers
 * and threads wait (every waiter gets -EBADF, the descriptor is closed
 * after); handles and descriptor numbers reused after close; one waiter per
 * direction; cancellation; TCP accept and connect; 5,000 connections on one
 * carrier; a fiber's socket reads as io_uring receives where the carriers
 * wait in their rings, and a read wait after a registration for writing
 * only; lending reads (weft_fd_read_lend) and a close during one; faults
 * injected in the calls that make an owned descriptor, in its registration
 * and in the ring's receive.
 */
#include "base/sys.h"
#include "harness.h"
#include "io/fd.h"

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
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define MS 1000000LL

static int64_t in_ms(int ms) { return weft_now_ns() + ms * MS; }

static intptr_t on_fiber(void *(*fn)(void *), void *arg) {
  weft_future *f;
  if (weft_future_start(WEFT_BLOCKING, fn, arg, &f) != 0) return -9999;
  void *r = NULL;
  weft_future_get(f, -1, &r);
  weft_future_free(f);
  return (intptr_t)r;
}

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

#define FBIT(site) (1u << (site))

static int owned_pair(weft_fd out[2]) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return -errno;
  int rc = weft_fd_open(sv[0], &out[0]);
  if (rc == 0) rc = weft_fd_open(sv[1], &out[1]);
  return rc;
}

/* --- transfers ----------------------------------------------------------------------------------- */

static void *basics(void *arg) {
  (void)arg;
  weft_fd p[2];
  CHECK(1, owned_pair(p) == 0);
  int fd0 = weft_fd_native(p[0]);
  CHECK(2, fd0 >= 0 && (fcntl(fd0, F_GETFL) & O_NONBLOCK));
  CHECK(3, weft_fd_write(p[0], "hello", 5, -1) == 5);
  char buf[64] = {0};
  CHECK(4, weft_fd_read(p[1], buf, sizeof buf, in_ms(1000)) == 5 && memcmp(buf, "hello", 5) == 0);
  /* Nothing there: a deadline, then "try once"; twice, so that the second wait starts from "known empty". */
  for (int k = 0; k < 2; k++) {
    int64_t t0 = weft_now_ns();
    CHECK(5, weft_fd_read(p[1], buf, sizeof buf, in_ms(20)) == -ETIMEDOUT);
    CHECK(6, weft_now_ns() - t0 >= 20 * MS);
    CHECK(7, weft_fd_read(p[1], buf, sizeof buf, 0) == -ETIMEDOUT);
  }
  /* Data that comes after a read found nothing is read (the edge is not lost). */
  CHECK(8, weft_fd_write(p[0], "a", 1, -1) == 1);
  CHECK(9, weft_fd_read(p[1], buf, sizeof buf, in_ms(5000)) == 1 && buf[0] == 'a');
  /* Vectors, both ways. */
  struct iovec out[3] = {{"ab", 2}, {"", 0}, {"cde", 3}};
  CHECK(10, weft_fd_writev(p[0], out, 3, -1) == 5);
  char x[2], y[8];
  struct iovec in[2] = {{x, 2}, {y, sizeof y}};
  CHECK(11,
        weft_fd_readv(p[1], in, 2, in_ms(1000)) == 5 && memcmp(x, "ab", 2) == 0 && memcmp(y, "cde", 3) == 0);
  /* A write bigger than the socket buffer: all of it goes, while the other side reads. */
  CHECK(12, weft_fd_close(p[0]) == 0);
  CHECK(13, weft_fd_read(p[1], buf, sizeof buf, in_ms(1000)) == 0); /* EOF */
  CHECK(14, weft_fd_write(p[1], "z", 1, -1) == -EPIPE);             /* no SIGPIPE */
  CHECK(15, weft_fd_close(p[1]) == 0);
  /* A closed handle: every call says so, and a second close too. */
  CHECK(16, weft_fd_read(p[1], buf, 1, 0) == -EBADF && weft_fd_write(p[1], "z", 1, 0) == -EBADF);
  CHECK(17, weft_fd_close(p[1]) == -EBADF && weft_fd_native(p[1]) == -EBADF);
  CHECK(18, fcntl(fd0, F_GETFD) == -1 || fd0 != weft_fd_native(p[0])); /* closed (or reused since) */
  return NULL;
}

static void test_basics(void) { both_ways(basics, NULL); }

/* A big write (1 MiB, beyond any socket buffer) from one side while the other reads it all. */
typedef struct bulk {
  weft_fd fd;
  size_t len;
} bulk;

static void *bulk_reader(void *arg) {
  bulk *b = arg;
  char buf[4096];
  size_t got = 0;
  while (got < b->len) {
    ssize_t r = weft_fd_read(b->fd, buf, sizeof buf, in_ms(20000));
    if (r <= 0) return (void *)(intptr_t)1;
    for (ssize_t i = 0; i < r; i++)
      if (buf[i] != (char)((got + (size_t)i) % 251)) return (void *)(intptr_t)2;
    got += (size_t)r;
  }
  return NULL;
}

static void run_bulk(bool reader_fiber) {
  /* Plain asserts only: this may run on a fiber, where a FATAL assert's longjmp must not go. */
  weft_fd p[2];
  int rc = owned_pair(p);
  CU_ASSERT_EQUAL(rc, 0);
  if (rc != 0) return;
  size_t len = 1u << 20;
  char *data = malloc(len);
  for (size_t i = 0; i < len; i++) data[i] = (char)(i % 251);
  bulk b = {p[1], len};
  weft_future *rf = NULL;
  pthread_t rt;
  rc = reader_fiber ? weft_future_start(WEFT_BLOCKING, bulk_reader, &b, &rf)
                    : -pthread_create(&rt, NULL, bulk_reader, &b);
  CU_ASSERT_EQUAL(rc, 0);
  if (rc != 0) return;
  /* The writer is the caller: the main thread, or a fiber (bulk_on_fiber). */
  ssize_t w = weft_fd_write(p[0], data, len, in_ms(20000));
  CU_ASSERT_EQUAL(w, (ssize_t)len);
  void *r = NULL;
  if (reader_fiber) {
    weft_future_get(rf, -1, &r);
    weft_future_free(rf);
  } else {
    pthread_join(rt, &r);
  }
  CU_ASSERT_PTR_NULL(r);
  weft_fd_close(p[0]);
  weft_fd_close(p[1]);
  free(data);
}

/* Writer on a fiber: the same bulk run, started as a future. */
typedef struct bulk_job {
  bool reader_fiber;
} bulk_job;

static void *bulk_on_fiber(void *arg) {
  run_bulk(((bulk_job *)arg)->reader_fiber);
  return NULL;
}

static void test_fibers_and_threads(void) {
  /* thread writes, fiber reads; thread writes, thread reads; fiber writes, fiber reads; fiber writes, thread
   * reads */
  run_bulk(true);
  run_bulk(false);
  bulk_job a = {true}, b = {false};
  on_fiber(bulk_on_fiber, &a);
  on_fiber(bulk_on_fiber, &b);
}

/* --- close while waiting ----------------------------------------------------------------------------- */

typedef struct waiter_args {
  weft_fd fd;
  bool write;
  atomic_int entered;
} waiter_args;

static void *blocked_call(void *arg) {
  waiter_args *a = arg;
  atomic_store(&a->entered, 1);
  if (a->write) {
    /* Fill the socket buffer, then wait for room that never comes. A write cut short by the close
     * returns what it wrote; the next one says why. */
    static char chunk[65536];
    for (;;) {
      ssize_t r = weft_fd_write(a->fd, chunk, sizeof chunk, -1);
      if (r < 0) return (void *)(intptr_t)r;
    }
  }
  char buf[8];
  return (void *)(intptr_t)weft_fd_read(a->fd, buf, sizeof buf, -1);
}

static void test_close_wakes_waiters(void) {
  /* A fiber reading, a fiber writing, a thread reading: one close each, from the main thread. */
  weft_fd a[2], b[2], c[2];
  CU_ASSERT_EQUAL_FATAL(owned_pair(a), 0);
  CU_ASSERT_EQUAL_FATAL(owned_pair(b), 0);
  CU_ASSERT_EQUAL_FATAL(owned_pair(c), 0);
  int native_a = weft_fd_native(a[0]);
  waiter_args ra = {a[0], false, 0}, wb = {b[0], true, 0}, tc = {c[0], false, 0};
  weft_future *f1, *f2;
  pthread_t t3;
  CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_BLOCKING, blocked_call, &ra, &f1), 0);
  CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_BLOCKING, blocked_call, &wb, &f2), 0);
  CU_ASSERT_EQUAL_FATAL(pthread_create(&t3, NULL, blocked_call, &tc), 0);
  while (!atomic_load(&ra.entered) || !atomic_load(&wb.entered) || !atomic_load(&tc.entered))
    weft_test_sleep_ms(1);
  weft_test_sleep_ms(50); /* let them reach their waits */
  CU_ASSERT_EQUAL(weft_fd_close(a[0]), 0);
  CU_ASSERT_EQUAL(weft_fd_close(b[0]), 0);
  CU_ASSERT_EQUAL(weft_fd_close(c[0]), 0);
  void *r1 = NULL, *r2 = NULL, *r3 = NULL;
  CU_ASSERT_EQUAL(weft_future_get(f1, in_ms(10000), &r1), 0);
  CU_ASSERT_EQUAL(weft_future_get(f2, in_ms(10000), &r2), 0);
  pthread_join(t3, &r3);
  CU_ASSERT_EQUAL((intptr_t)r1, -EBADF);
  CU_ASSERT_EQUAL((intptr_t)r2, -EBADF);
  CU_ASSERT_EQUAL((intptr_t)r3, -EBADF);
  weft_future_free(f1);
  weft_future_free(f2);
  /* Every call has left: the descriptor is closed (its peer sees EOF). */
  char buf[4];
  CU_ASSERT_EQUAL(weft_fd_read(a[1], buf, sizeof buf, in_ms(5000)), 0);
  CU_ASSERT_TRUE(fcntl(native_a, F_GETFD) == -1 || native_a == weft_fd_native(a[1]));
  weft_fd_close(a[1]);
  weft_fd_close(b[1]);
  weft_fd_close(c[1]);
}

/*
 * A descriptor number reused after close: the old file lives on (a dup the
 * test keeps), and its peer becomes readable; a fiber waiting on the new
 * descriptor with that number must see nothing of it, and the old handle
 * stays closed.
 */
static void *reuse_scenario(void *arg) {
  (void)arg;
  weft_fd old[2];
  CHECK(1, owned_pair(old) == 0);
  char buf[16];
  CHECK(2, weft_fd_read(old[0], buf, sizeof buf, in_ms(5)) == -ETIMEDOUT); /* registered now (on a fiber) */
  int num = weft_fd_native(old[0]);
  int keep = dup(num); /* the old file outlives the close */
  CHECK(3, keep >= 0);
  CHECK(4, weft_fd_close(old[0]) == 0);
  /* Take the number again (the lowest free one: num). */
  int sv[2];
  CHECK(5, socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  int mine = sv[0] == num ? 0 : sv[1] == num ? 1 : -1;
  weft_fd nw[2];
  CHECK(6, weft_fd_open(sv[0], &nw[0]) == 0 && weft_fd_open(sv[1], &nw[1]) == 0);
  /* The old file becomes readable. */
  CHECK(7, weft_fd_write(old[1], "old", 3, -1) == 3);
  /* The old handle: closed, whatever the number now holds. */
  CHECK(8, weft_fd_read(old[0], buf, sizeof buf, 0) == -EBADF);
  /* The new descriptor (the reused number if we got it): nothing to read, no wake with the old data. */
  weft_fd probe = nw[mine < 0 ? 0 : mine];
  CHECK(9, weft_fd_read(probe, buf, sizeof buf, in_ms(100)) == -ETIMEDOUT);
  /* And what its own peer sends arrives. */
  CHECK(10, weft_fd_write(nw[mine < 0 ? 1 : 1 - mine], "new", 3, -1) == 3);
  CHECK(11, weft_fd_read(probe, buf, sizeof buf, in_ms(5000)) == 3 && memcmp(buf, "new", 3) == 0);
  /* The old data is still where it belongs. */
  CHECK(12, read(keep, buf, sizeof buf) == 3 && memcmp(buf, "old", 3) == 0);
  close(keep);
  weft_fd_close(old[1]);
  weft_fd_close(nw[0]);
  weft_fd_close(nw[1]);
  return NULL;
}

static void test_reuse(void) { both_ways(reuse_scenario, NULL); }

/* --- waiters, cancellation, bad input ------------------------------------------------------------------ */

static void *second_reader(void *arg) {
  weft_fd fd = *(weft_fd *)arg;
  char b[4];
  return (void *)(intptr_t)weft_fd_read(fd, b, sizeof b, in_ms(2000));
}

static void test_one_waiter_per_direction(void) {
  weft_fd p[2];
  CU_ASSERT_EQUAL_FATAL(owned_pair(p), 0);
  waiter_args a = {p[0], false, 0};
  weft_future *f1, *f2;
  CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_BLOCKING, blocked_call, &a, &f1), 0);
  while (!atomic_load(&a.entered)) weft_test_sleep_ms(1);
  weft_test_sleep_ms(50);
  CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_BLOCKING, second_reader, &p[0], &f2), 0);
  void *r = NULL;
  weft_future_get(f2, -1, &r);
  /* Fibers: one waiter per direction. Futures on threads (no fibers) both poll(2), and the second one's
   * deadline passes. */
  CU_ASSERT_EQUAL((intptr_t)r, weft_test_fibers_expected() ? -EBUSY : -ETIMEDOUT);
  weft_future_free(f2);
  /* The first waiter still gets its data. */
  CU_ASSERT_EQUAL(weft_fd_write(p[1], "abc", 3, -1), 3);
  weft_future_get(f1, -1, &r);
  CU_ASSERT_EQUAL((intptr_t)r, 3);
  weft_future_free(f1);
  weft_fd_close(p[0]);
  weft_fd_close(p[1]);
}

static void test_cancel(void) {
  weft_fd p[2];
  CU_ASSERT_EQUAL_FATAL(owned_pair(p), 0);
  waiter_args a = {p[0], false, 0};
  weft_future *f;
  CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_BLOCKING, blocked_call, &a, &f), 0);
  while (!atomic_load(&a.entered)) weft_test_sleep_ms(1);
  weft_test_sleep_ms(20);
  CU_ASSERT_EQUAL(weft_future_cancel(f), -EBUSY);
  void *r = NULL;
  CU_ASSERT_EQUAL(weft_future_get(f, in_ms(10000), &r), 0);
  CU_ASSERT_EQUAL((intptr_t)r, -ECANCELED);
  weft_future_free(f);
  /* The descriptor works on after the cancelled wait. */
  char b[4];
  CU_ASSERT_EQUAL(weft_fd_write(p[1], "x", 1, -1), 1);
  CU_ASSERT_EQUAL(weft_fd_read(p[0], b, sizeof b, in_ms(5000)), 1);
  weft_fd_close(p[0]);
  weft_fd_close(p[1]);
}

static void test_bad_input(void) {
  weft_fd none = {0}, f;
  char b[4];
  CU_ASSERT_EQUAL(weft_fd_open(-1, &f), -EINVAL);
  CU_ASSERT_EQUAL(weft_fd_open(0, NULL), -EINVAL);
  int dead = dup(0);
  close(dead);
  CU_ASSERT_EQUAL(weft_fd_open(dead, &f), -EBADF);
  /* A regular file: epoll cannot watch it; it is left as it was. */
  char path[] = "/tmp/weft-ownfd-XXXXXX";
  int rf = mkstemp(path);
  CU_ASSERT_FATAL(rf >= 0);
  unlink(path);
  int fl = fcntl(rf, F_GETFL);
  CU_ASSERT_EQUAL(weft_fd_open(rf, &f), -EPERM);
  CU_ASSERT_EQUAL(fcntl(rf, F_GETFL), fl);
  close(rf);
  CU_ASSERT_EQUAL(weft_fd_read(none, b, 1, -1), -EBADF);
  CU_ASSERT_EQUAL(weft_fd_close(none), -EBADF);
  weft_fd forged = {0xdeadbeef00000001ull};
  CU_ASSERT_EQUAL(weft_fd_write(forged, b, 1, -1), -EBADF);
  weft_fd huge = {((uint64_t)1 << 32) | 0xffffffffu};
  CU_ASSERT_EQUAL(weft_fd_read(huge, b, 1, -1), -EBADF);
  weft_fd p[2];
  CU_ASSERT_EQUAL_FATAL(owned_pair(p), 0);
  CU_ASSERT_EQUAL(weft_fd_read(p[0], NULL, 1, -1), -EINVAL);
  CU_ASSERT_EQUAL(weft_fd_read(p[0], b, 1, -2), -EINVAL);
  CU_ASSERT_EQUAL(weft_fd_readv(p[0], NULL, 1, -1), -EINVAL);
  struct iovec v = {b, 1};
  CU_ASSERT_EQUAL(weft_fd_writev(p[0], &v, 0, -1), -EINVAL);
  CU_ASSERT_EQUAL(weft_fd_poll(p[0], POLLIN | POLLOUT, -1), -EINVAL);
  CU_ASSERT_EQUAL(weft_fd_poll(p[0], 0, -1), -EINVAL);
  CU_ASSERT_EQUAL(weft_fd_accept(p[0], NULL, NULL, &f, 0), -EINVAL); /* not listening */
  CU_ASSERT_EQUAL(weft_fd_accept(p[0], NULL, NULL, NULL, 0), -EINVAL);
  CU_ASSERT_EQUAL(weft_fd_connect(p[0], NULL, 0, -1), -EINVAL);
  /* After all that, the pair works. */
  CU_ASSERT_EQUAL(weft_fd_poll(p[0], POLLOUT, -1) & POLLOUT, POLLOUT);
  CU_ASSERT_EQUAL(weft_fd_write(p[0], "ok", 2, -1), 2);
  CU_ASSERT_EQUAL(weft_fd_poll(p[1], POLLIN, in_ms(5000)) & POLLIN, POLLIN);
  CU_ASSERT_EQUAL(weft_fd_read(p[1], b, sizeof b, -1), 2);
  weft_fd_close(p[0]);
  weft_fd_close(p[1]);
}

/* --- TCP ------------------------------------------------------------------------------------------------ */

static int listen_any(weft_fd *l, struct sockaddr_in *addr) {
  int rc = weft_fd_socket(AF_INET, SOCK_STREAM, 0, l);
  if (rc < 0) return rc;
  int fd = weft_fd_native(*l);
  *addr = (struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof *addr;
  if (bind(fd, (struct sockaddr *)addr, len) != 0 || listen(fd, 4096) != 0 ||
      getsockname(fd, (struct sockaddr *)addr, &len) != 0)
    return -errno;
  return 0;
}

typedef struct tcp_srv {
  weft_fd l;
  int n;
} tcp_srv;

static void *tcp_server(void *arg) {
  tcp_srv *s = arg;
  for (int i = 0; i < s->n; i++) {
    weft_fd c;
    int rc = weft_fd_accept(s->l, NULL, NULL, &c, in_ms(20000));
    if (rc < 0) return (void *)(intptr_t)rc;
    char buf[64];
    ssize_t r = weft_fd_read(c, buf, sizeof buf, in_ms(20000));
    if (r > 0) r = weft_fd_write(c, buf, (size_t)r, -1);
    weft_fd_close(c);
    if (r <= 0) return (void *)(intptr_t)-1000;
  }
  return NULL;
}

static void *tcp_scenario(void *arg) {
  (void)arg;
  weft_fd l;
  struct sockaddr_in addr;
  CHECK(1, listen_any(&l, &addr) == 0);
  tcp_srv s = {l, 3};
  weft_future *sf;
  CHECK(2, weft_future_start(WEFT_BLOCKING, tcp_server, &s, &sf) == 0);
  for (int i = 0; i < 3; i++) {
    weft_fd c;
    CHECK(3, weft_fd_socket(AF_INET, SOCK_STREAM, 0, &c) == 0);
    CHECK(4, weft_fd_connect(c, (struct sockaddr *)&addr, sizeof addr, in_ms(10000)) == 0);
    CHECK(5, weft_fd_write(c, "ping", 4, -1) == 4);
    char buf[8];
    CHECK(6, weft_fd_read(c, buf, sizeof buf, in_ms(10000)) == 4 && memcmp(buf, "ping", 4) == 0);
    CHECK(7, weft_fd_read(c, buf, sizeof buf, in_ms(10000)) == 0);
    weft_fd_close(c);
  }
  void *r = NULL;
  weft_future_get(sf, -1, &r);
  weft_future_free(sf);
  CHECK(8, r == NULL);
  /* Nobody listens any more: refused. */
  weft_fd_close(l);
  weft_fd c;
  CHECK(9, weft_fd_socket(AF_INET, SOCK_STREAM, 0, &c) == 0);
  CHECK(10, weft_fd_connect(c, (struct sockaddr *)&addr, sizeof addr, in_ms(10000)) == -ECONNREFUSED);
  weft_fd_close(c);
  /* An accept with a deadline and no connection. */
  CHECK(11, listen_any(&l, &addr) == 0);
  weft_fd got;
  CHECK(12, weft_fd_accept(l, NULL, NULL, &got, in_ms(20)) == -ETIMEDOUT);
  CHECK(13, weft_fd_accept(l, NULL, NULL, &got, 0) == -ETIMEDOUT);
  weft_fd_close(l);
  return NULL;
}

static void test_tcp(void) { both_ways(tcp_scenario, NULL); }

/*
 * A short read of a TCP socket lets the next read wait for an edge without
 * trying (poll/owned.h). What stops a TCP read short with data still there
 * must not strand a reader: the end of the stream right behind the data,
 * urgent data (MSG_OOB) in the middle, and data split over many writes.
 */
static int tcp_pair(weft_fd *srv_side, int *plain_peer) {
  weft_fd l;
  struct sockaddr_in addr;
  int rc = listen_any(&l, &addr);
  if (rc < 0) return rc;
  int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (c < 0 || connect(c, (struct sockaddr *)&addr, sizeof addr) != 0) return -errno;
  rc = weft_fd_accept(l, NULL, NULL, srv_side, in_ms(5000));
  weft_fd_close(l);
  *plain_peer = c;
  return rc;
}

static void *tcp_short_reads(void *arg) {
  (void)arg;
  char buf[64];
  for (int k = 0; k < 50; k++) {
    weft_fd r;
    int peer;
    CHECK(1, tcp_pair(&r, &peer) == 0);
    /* A message, a short read, then the end of the stream: the next read says 0, at once. */
    CHECK(2, weft_fd_read(r, buf, sizeof buf, in_ms(20)) == -ETIMEDOUT); /* registered, known empty */
    CHECK(3, write(peer, "abc", 3) == 3);
    size_t got = 0;
    while (got < 3) {
      ssize_t n = weft_fd_read(r, buf + got, sizeof buf - got, in_ms(5000));
      CHECK(4, n > 0);
      got += (size_t)n;
    }
    CHECK(5, shutdown(peer, SHUT_WR) == 0);
    CHECK(6, weft_fd_read(r, buf, sizeof buf, in_ms(5000)) == 0);
    close(peer);
    weft_fd_close(r);
    /* Urgent data between two writes: the reader gets everything else, and never waits for ever. */
    CHECK(7, tcp_pair(&r, &peer) == 0);
    CHECK(8, write(peer, "hello", 5) == 5);
    CHECK(9, send(peer, "!", 1, MSG_OOB) == 1);
    CHECK(10, write(peer, "world", 5) == 5);
    close(peer);
    got = 0;
    for (;;) {
      ssize_t n = weft_fd_read(r, buf + got, sizeof buf - got, in_ms(5000));
      CHECK(11, n >= 0); /* never the deadline */
      if (n == 0) break;
      got += (size_t)n;
    }
    CHECK(12, got == 10 && memcmp(buf, "helloworld", 10) == 0);
    weft_fd_close(r);
  }
  /* Many small writes, each read short: every byte arrives. */
  weft_fd r;
  int peer;
  CHECK(13, tcp_pair(&r, &peer) == 0);
  size_t total = 0;
  for (int i = 0; i < 2000; i++) {
    CHECK(14, write(peer, "0123456789", 10) == 10);
    while (total < (size_t)(i + 1) * 10) {
      ssize_t n = weft_fd_read(r, buf, sizeof buf, in_ms(5000));
      CHECK(15, n > 0);
      total += (size_t)n;
    }
  }
  close(peer);
  weft_fd_close(r);
  return NULL;
}

static void test_tcp_short_reads(void) { both_ways(tcp_short_reads, NULL); }

/* --- full reads: what TCP_INQ tells ----------------------------------------------------------------- */

/* TCP_INQ on the owned socket's descriptor: 1, 0, or a negative errno. */
static int inq_of(weft_fd f) {
  int v = -1;
  socklen_t l = sizeof v;
  return getsockopt(weft_fd_native(f), IPPROTO_TCP, TCP_INQ, &v, &l) == 0 ? v : -errno;
}

/* Until n bytes wait in f's receive queue (loopback delivers them at once, nearly). */
static bool queued(weft_fd f, int n) {
  for (int i = 0; i < 5000; i++) {
    int q = 0;
    if (ioctl(weft_fd_native(f), FIONREAD, &q) == 0 && q >= n) return true;
    weft_test_sleep_ms(1);
  }
  return false;
}

/*
 * One read of f, counting the read attempts it made (weft__fd_test_reads)
 * and whether it was a ring receive (WEFT_IO_URING=2 on a fiber), where no
 * attempt is counted and the counts say nothing.
 */
static ssize_t counted_read(weft_fd f, char *buf, size_t len, int64_t deadline, unsigned long *reads,
                            bool *ring) {
  weft_stats a, b;
  weft_get_stats(&a);
  unsigned long r0 = weft__fd_test_reads();
  ssize_t n = weft_fd_read(f, buf, len, deadline);
  *reads = weft__fd_test_reads() - r0;
  weft_get_stats(&b);
  *ring = b.uring_recvs != a.uring_recvs;
  return n;
}

/*
 * A read that fills its buffer says nothing about what is left, unless the
 * kernel says it (TCP_INQ, on for every owned TCP socket where the kernel
 * has it). `*arg`: TCP_INQ was refused (an injected fault), so the reads
 * fall back on the short-read rule. Either way: data left behind a full read
 * is read at once, a full read that emptied the queue wakes for the next
 * data, and the end of the stream after a full read is read at once. With
 * TCP_INQ, a fiber's read after a full read that emptied the queue parks
 * without a read attempt (the one that would say EAGAIN); without it, it
 * tries first.
 */
/* The listener owned without TCP_INQ (test_tcp_full_reads), and its address. */
static weft_fd refused_listener;
static struct sockaddr_in refused_addr;

/* A connection accepted from refused_listener, as tcp_pair. */
static int refused_pair(weft_fd *srv_side, int *plain_peer) {
  int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (c < 0 || connect(c, (struct sockaddr *)&refused_addr, sizeof refused_addr) != 0) return -errno;
  *plain_peer = c;
  return weft_fd_accept(refused_listener, NULL, NULL, srv_side, in_ms(5000));
}

static void *tcp_full_reads(void *arg) {
  bool refused = *(bool *)arg;
  bool fiber = weft_in_fiber();
  char buf[64], big[128];
  memset(big, 'x', sizeof big);
  unsigned long reads;
  bool ring;
  for (int k = 0; k < 20; k++) {
    weft_fd r;
    int peer;
    CHECK(1, (refused ? refused_pair(&r, &peer) : tcp_pair(&r, &peer)) == 0);
    CHECK(2, inq_of(r) == (refused ? 0 : 1)); /* an accepted connection inherits its listener's */
    /* Two messages in the queue: the first full read leaves the second, which is read at once. */
    CHECK(3, write(peer, big, sizeof big) == (ssize_t)sizeof big);
    CHECK(4, queued(r, (int)sizeof big));
    CHECK(5, weft_fd_read(r, buf, sizeof buf, in_ms(5000)) == (ssize_t)sizeof buf);
    CHECK(6, counted_read(r, buf, sizeof buf, in_ms(5000), &reads, &ring) == (ssize_t)sizeof buf);
    /* That read emptied the queue: nothing more comes, and a fiber knew it without trying. */
    CHECK(7, counted_read(r, buf, sizeof buf, in_ms(20), &reads, &ring) == -ETIMEDOUT);
    if (!ring) CHECK(8, reads == (fiber && !refused ? 0u : 1u));
    /* Data that comes later wakes the reader. */
    CHECK(9, write(peer, big, sizeof buf) == (ssize_t)sizeof buf);
    CHECK(10, weft_fd_read(r, buf, sizeof buf, in_ms(5000)) == (ssize_t)sizeof buf);
    /* A full read, then the end of the stream: the next read says 0 at once. */
    CHECK(11, write(peer, big, sizeof buf) == (ssize_t)sizeof buf);
    CHECK(12, shutdown(peer, SHUT_WR) == 0);
    CHECK(13, queued(r, (int)sizeof buf));
    CHECK(14, weft_fd_read(r, buf, sizeof buf, in_ms(5000)) == (ssize_t)sizeof buf);
    CHECK(15, weft_fd_read(r, buf, sizeof buf, in_ms(5000)) == 0);
    close(peer);
    weft_fd_close(r);
  }
  return NULL;
}

static void test_tcp_full_reads(void) {
  bool refused = false;
  both_ways(tcp_full_reads, &refused);
  /* Every way a TCP socket becomes owned turns TCP_INQ on. */
  weft_fd s;
  CU_ASSERT_EQUAL_FATAL(weft_fd_socket(AF_INET, SOCK_STREAM, 0, &s), 0);
  CU_ASSERT_EQUAL(inq_of(s), 1);
  weft_fd_close(s);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  CU_ASSERT_FATAL(fd >= 0);
  CU_ASSERT_EQUAL_FATAL(weft_fd_open(fd, &s), 0);
  CU_ASSERT_EQUAL(inq_of(s), 1);
  weft_fd_close(s);
  /*
   * TCP_INQ refused (a kernel before 4.18): the listener is owned without
   * it (the socket is non-blocking already, so the option is the first
   * system call that the fault can hit), and so are its connections.
   */
  refused = true;
  weft_fd l;
  struct sockaddr_in addr;
  fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  CU_ASSERT_FATAL(fd >= 0);
  addr = (struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof addr;
  CU_ASSERT_FATAL(bind(fd, (struct sockaddr *)&addr, len) == 0 && listen(fd, 64) == 0 &&
                  getsockname(fd, (struct sockaddr *)&addr, &len) == 0);
  weft__fault_arm(FBIT(WEFT__F_OWNFD), 0, false);
  CU_ASSERT_EQUAL(weft_fd_open(fd, &l), 0);
  CU_ASSERT_EQUAL(weft__fault_disarm(), 1);
  CU_ASSERT_EQUAL(inq_of(l), 0);
  refused_listener = l;
  refused_addr = addr;
  both_ways(tcp_full_reads, &refused);
  refused_listener = (weft_fd){0};
  weft_fd_close(l);
}

/* --- reads as ring receives ------------------------------------------------------------------------ */

/*
 * With WEFT_IO_URING=2 (ownfd_uring) and a kernel that takes it
 * (weft_get_info says so), a fiber's read of an owned socket is a receive on
 * its carrier's ring (weft_get_stats' uring_recvs counts it) with the
 * results of read(2): data that comes later, several vectors, a deadline,
 * the end of the stream; a pipe is read the ordinary way. Otherwise
 * (ownfd, ownfd_epoll) nothing is counted.
 */
static void *ring_reads(void *arg) {
  bool ring = *(bool *)arg;
  weft_fd p[2];
  CHECK(1, owned_pair(p) == 0);
  weft_stats a, b;
  CHECK(2, weft_get_stats(&a) == 0);
  char buf[16] = {0};
  /* Nothing there yet: the receive waits in the kernel, and a writer on a thread ends it. */
  CHECK(3, weft_fd_read(p[1], buf, sizeof buf, in_ms(20)) == -ETIMEDOUT);
  CHECK(4, weft_fd_write(p[0], "abcdefgh", 8, -1) == 8);
  char x[3] = {0}, y[8] = {0};
  struct iovec v[2] = {{x, sizeof x}, {y, sizeof y}};
  CHECK(5, weft_fd_readv(p[1], v, 2, in_ms(1000)) == 8);
  CHECK(6, memcmp(x, "abc", 3) == 0 && memcmp(y, "defgh", 5) == 0);
  CHECK(7, weft_fd_write(p[0], "z", 1, -1) == 1);
  CHECK(8, weft_fd_read(p[1], buf, sizeof buf, -1) == 1 && buf[0] == 'z');
  CHECK(9, weft_fd_close(p[0]) == 0);
  CHECK(10, weft_fd_read(p[1], buf, sizeof buf, in_ms(1000)) == 0); /* end of stream */
  CHECK(11, weft_get_stats(&b) == 0);
  uint64_t recvs = b.uring_recvs - a.uring_recvs;
  if (ring) CHECK(12, recvs >= 4);
  if (!ring) CHECK(13, recvs == 0);
  /* A pipe is not a socket: read(2), whatever the carrier waits in. */
  int pp[2];
  CHECK(14, pipe(pp) == 0);
  weft_fd r;
  CHECK(15, weft_fd_open(pp[0], &r) == 0);
  CHECK(16, write(pp[1], "q", 1) == 1);
  CHECK(17, weft_get_stats(&a) == 0);
  CHECK(18, weft_fd_read(r, buf, sizeof buf, in_ms(1000)) == 1 && buf[0] == 'q');
  CHECK(19, weft_get_stats(&b) == 0 && b.uring_recvs == a.uring_recvs);
  weft_fd_close(r);
  close(pp[1]);
  weft_fd_close(p[1]);
  return NULL;
}

/*
 * Writes as ring sends (the default, WEFT_IO_URING=2, where the kernel takes
 * it): a fiber's write of an owned socket is a send request on its carrier's
 * ring (weft_get_stats' uring_sends counts it) with the results of write(2)
 * as weft_fd_write gives them: every byte, in order, of one buffer or of
 * several vectors; a write that waits in the kernel for room until its
 * deadline returns what it wrote, and the next one -ETIMEDOUT; a cancelled
 * one -ECANCELED; the socket works on after both. Elsewhere (a thread,
 * WEFT_IO_URING=0 or 1) nothing is counted.
 */
static void *ring_writes(void *arg) {
  bool ring = *(bool *)arg;
  weft_fd p[2];
  CHECK(1, owned_pair(p) == 0);
  weft_stats a, b;
  CHECK(2, weft_get_stats(&a) == 0);
  CHECK(3, weft_fd_write(p[0], "abcdefgh", 8, -1) == 8);
  char buf[64] = {0};
  CHECK(4, weft_fd_read(p[1], buf, sizeof buf, in_ms(5000)) == 8 && memcmp(buf, "abcdefgh", 8) == 0);
  struct iovec v[3] = {{"xy", 2}, {"", 0}, {"zuvw", 4}};
  CHECK(5, weft_fd_writev(p[0], v, 3, -1) == 6);
  CHECK(6, weft_fd_read(p[1], buf, sizeof buf, in_ms(5000)) == 6 && memcmp(buf, "xyzuvw", 6) == 0);
  /* Nobody reads: the sends fill the socket's buffer, and the one that finds no room waits until its
   * deadline; what it wrote before comes back, then -ETIMEDOUT. */
  static char chunk[65536];
  ssize_t w;
  size_t total = 0;
  int64_t dl = in_ms(100);
  while ((w = weft_fd_write(p[0], chunk, sizeof chunk, dl)) > 0) total += (size_t)w;
  CHECK(7, w == -ETIMEDOUT && total > 0);
  /* The reader drains it all, and the socket writes on. */
  size_t got = 0;
  while (got < total) {
    ssize_t r = weft_fd_read(p[1], chunk, sizeof chunk, in_ms(5000));
    CHECK(8, r > 0);
    got += (size_t)r;
  }
  CHECK(9, got == total);
  CHECK(10, weft_fd_write(p[0], "q", 1, -1) == 1);
  CHECK(11, weft_fd_read(p[1], buf, sizeof buf, in_ms(5000)) == 1 && buf[0] == 'q');
  CHECK(12, weft_get_stats(&b) == 0);
  uint64_t sends = b.uring_sends - a.uring_sends;
  if (ring) CHECK(13, sends >= 4);
  if (!ring) CHECK(14, sends == 0);
  /* A pipe is not a socket: write(2), whatever the carrier waits in. */
  int pp[2];
  CHECK(15, pipe(pp) == 0);
  weft_fd wfd;
  CHECK(16, weft_fd_open(pp[1], &wfd) == 0);
  CHECK(17, weft_get_stats(&a) == 0);
  CHECK(18, weft_fd_write(wfd, "p", 1, -1) == 1);
  CHECK(19, weft_get_stats(&b) == 0 && b.uring_sends == a.uring_sends);
  CHECK(20, read(pp[0], buf, 1) == 1 && buf[0] == 'p');
  weft_fd_close(wfd);
  close(pp[0]);
  weft_fd_close(p[0]);
  weft_fd_close(p[1]);
  return NULL;
}

/*
 * A stream socket's reads as one multishot receive (the default where the
 * kernel has it): the kernel delivers what comes, and what a read had no
 * room for is kept for the next read, whoever makes it (a thread too), in
 * order; weft_fd_poll sees kept bytes as readable. A reader that stops
 * reading still pushes back on the writer: the receive keeps at most a few
 * hundred KiB and then ends, so the socket's buffers fill and the write
 * waits (without that limit it would have taken all 8 MiB).
 */
typedef struct kept_ctx {
  weft_fd fd;
  ssize_t got;
} kept_ctx;

static void *thread_read_kept(void *arg) {
  kept_ctx *k = arg;
  char b[16] = {0};
  k->got = weft_fd_read(k->fd, b, sizeof b, in_ms(5000));
  if (k->got == 5 && memcmp(b, "fghij", 5) != 0) k->got = -1000;
  return NULL;
}

typedef struct big_writer {
  weft_fd fd;
  size_t len;
  atomic_size_t done;
} big_writer;

static void *write_big(void *arg) {
  big_writer *w = arg;
  static char chunk[65536];
  size_t off = 0;
  while (off < w->len) {
    for (size_t i = 0; i < sizeof chunk; i++) chunk[i] = (char)((off + i) % 253);
    ssize_t r = weft_fd_write(w->fd, chunk, sizeof chunk, in_ms(20000));
    if (r <= 0) break;
    off += (size_t)r;
    atomic_store(&w->done, off);
  }
  return NULL;
}

static void *ring_kept(void *arg) {
  bool ring = *(bool *)arg;
  weft_fd p[2];
  CHECK(1, owned_pair(p) == 0);
  char b[4] = {0};
  /* The first read arms the receive; then 10 bytes come, and a 3-byte read takes the first 3. */
  CHECK(2, weft_fd_read(p[1], b, sizeof b, in_ms(10)) == -ETIMEDOUT);
  CHECK(3, weft_fd_write(p[0], "abcdefghij", 10, -1) == 10);
  CHECK(4, weft_fd_read(p[1], b, 3, in_ms(5000)) == 3 && memcmp(b, "abc", 3) == 0);
  /* The rest waits in the socket or in the slot: readable either way, and read in order. */
  CHECK(5, weft_fd_poll(p[1], POLLIN, in_ms(5000)) & POLLIN);
  CHECK(6, weft_fd_read(p[1], b, 2, in_ms(5000)) == 2 && memcmp(b, "de", 2) == 0);
  /* A thread reads the next bytes, wherever they are. */
  kept_ctx k = {p[1], 0};
  pthread_t t;
  CHECK(7, pthread_create(&t, NULL, thread_read_kept, &k) == 0);
  pthread_join(t, NULL);
  CHECK(8, k.got == 5);
  /* Flow control: nobody reads p[1] now, and a writer of 8 MiB on a thread must stall. */
  big_writer w = {p[0], 8u << 20, 0};
  CHECK(9, weft_fd_read(p[1], b, 1, in_ms(10)) == -ETIMEDOUT); /* armed again, if it had ended */
  CHECK(10, pthread_create(&t, NULL, write_big, &w) == 0);
  weft_sleep_ns(300 * MS); /* parked: the carrier goes on receiving meanwhile */
  size_t stalled = atomic_load(&w.done);
  CHECK(11, stalled < w.len);
  (void)ring;
  /* Then every byte arrives, in order. */
  static char in[65536];
  size_t got = 0;
  while (got < w.len) {
    ssize_t r = weft_fd_read(p[1], in, sizeof in, in_ms(20000));
    if (r <= 0) break;
    for (ssize_t i = 0; i < r; i++)
      if (in[i] != (char)((got + (size_t)i) % 253)) {
        pthread_join(t, NULL);
        CHECK(12, false);
      }
    got += (size_t)r;
  }
  pthread_join(t, NULL);
  CHECK(13, got == w.len);
  weft_fd_close(p[0]);
  weft_fd_close(p[1]);
  return NULL;
}

/* A write that waits for room (nobody reads the peer) until its future is cancelled. */
static void *blocked_writer(void *arg) {
  weft_fd fd = *(weft_fd *)arg;
  static char chunk[65536];
  for (;;) {
    ssize_t r = weft_fd_write(fd, chunk, sizeof chunk, -1);
    if (r < 0) return (void *)(intptr_t)r;
  }
}

/* A thread that writes one byte to fd after 50 ms. */
static void *late_byte(void *arg) {
  weft_test_sleep_ms(50);
  ssize_t w = write(*(int *)arg, "r", 1);
  return (void *)(intptr_t)(w == 1 ? 0 : 1);
}

/*
 * A wait for reading after the descriptor was registered for writing only
 * (with WEFT_IO_URING=2 a socket is, until a read wait asks for more): the
 * registration gains the read side, and data that comes later wakes it.
 * Passes the same way in every mode.
 */
static void *read_wait_after_write_wait(void *arg) {
  (void)arg;
  weft_fd p[2];
  CHECK(1, owned_pair(p) == 0);
  /* A write that fills the buffer and times out: the first wait, for writing. */
  size_t big = 8u << 20;
  char *junk = calloc(1, big);
  CHECK(2, junk != NULL);
  ssize_t w = weft_fd_write(p[0], junk, big, in_ms(50));
  free(junk);
  CHECK(3, w > 0 && (size_t)w < big);
  /* A thread writes a byte to p[0] while the fiber waits to read it: the read side must be watched now. */
  int peer = weft_fd_native(p[1]);
  pthread_t t;
  CHECK(4, pthread_create(&t, NULL, late_byte, &peer) == 0);
  int rv = weft_fd_poll(p[0], POLLIN, in_ms(5000));
  void *tr;
  pthread_join(t, &tr);
  CHECK(5, tr == NULL);
  CHECK(6, rv > 0 && (rv & POLLIN));
  char b;
  CHECK(7, weft_fd_read(p[0], &b, 1, in_ms(1000)) == 1 && b == 'r');
  weft_fd_close(p[0]);
  weft_fd_close(p[1]);
  return NULL;
}

static void test_read_wait_after_write_wait(void) {
  CU_ASSERT_EQUAL(on_fiber(read_wait_after_write_wait, NULL), 0);
}

/* One byte there and back over an owned pair. */
static void *one_round(void *arg) {
  weft_fd p[2];
  CHECK(1, owned_pair(p) == 0);
  char b = 0;
  CHECK(2, weft_fd_write(p[0], "1", 1, -1) == 1 && weft_fd_read(p[1], &b, 1, in_ms(5000)) == 1 && b == '1');
  weft_fd_close(p[0]);
  weft_fd_close(p[1]);
  return arg;
}

/*
 * Writes that go behind (TCP, where a fiber's writes are ring sends): a
 * small write returns its count at once while its send is still on the
 * carrier's ring (weft_get_stats' uring_sends_behind counts it). The stream
 * stays a stream: every byte in order over many writes, a thread's write
 * right after a fiber's comes after it, a close right after a write lets
 * the write's bytes out first (from the fiber, or from a thread while the
 * fiber holds its carrier), a writer ahead of a reader that stopped waits
 * at its deadline with nothing lost, and a reset reaches the writer as the
 * error of a later write.
 */
typedef struct behind_thread {
  weft_fd fd;
  ssize_t rc;
  atomic_bool done;
} behind_thread;

static void *thread_write_b(void *arg) {
  behind_thread *t = arg;
  t->rc = weft_fd_write(t->fd, "B", 1, in_ms(5000));
  atomic_store(&t->done, true);
  return NULL;
}

static void *thread_close(void *arg) {
  behind_thread *t = arg;
  t->rc = weft_fd_close(t->fd);
  atomic_store(&t->done, true);
  return NULL;
}

/* Run fn on a thread, and wait for it the way a fiber should (parking), so that its carrier goes on. */
static bool on_thread(void *(*fn)(void *), behind_thread *t) {
  pthread_t th;
  atomic_store(&t->done, false);
  if (pthread_create(&th, NULL, fn, t) != 0) return false;
  while (!atomic_load(&t->done)) weft_sleep_ns(100000);
  pthread_join(th, NULL);
  return true;
}

/* Read exactly n bytes (5 s at most). */
static bool peer_read(weft_fd fd, void *buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = weft_fd_read(fd, (char *)buf + got, n - got, in_ms(5000));
    if (r <= 0) return false;
    got += (size_t)r;
  }
  return true;
}

static bool peer_eof(weft_fd fd) {
  char c;
  return weft_fd_read(fd, &c, 1, in_ms(5000)) == 0;
}

/* A TCP connection, both ends owned. */
static int tcp_owned_pair(weft_fd *w, weft_fd *peer) {
  int plain;
  int rc = tcp_pair(w, &plain);
  if (rc == 0) rc = weft_fd_open(plain, peer);
  return rc;
}

static void *writes_behind(void *arg) {
  bool ring = *(bool *)arg;
  weft_fd w, peer;
  char buf[4096];
  /* Many small writes: all of it, in order; counted as writes behind where the ring sends. */
  CHECK(1, tcp_owned_pair(&w, &peer) == 0);
  weft_stats a, b;
  CHECK(2, weft_get_stats(&a) == 0);
  static char sent[20000], got[20000];
  for (size_t i = 0; i < sizeof sent; i++) sent[i] = (char)(i % 251);
  for (size_t off = 0; off < sizeof sent; off += 100)
    CHECK(3, weft_fd_write(w, sent + off, 100, in_ms(5000)) == 100);
  CHECK(4, peer_read(peer, got, sizeof got) && memcmp(sent, got, sizeof got) == 0);
  CHECK(5, weft_get_stats(&b) == 0);
  uint64_t behind = b.uring_sends_behind - a.uring_sends_behind;
  const char *env = getenv("WEFT_WRITE_BEHIND");
  bool wb = ring && !(env && strcmp(env, "0") == 0);
  if (wb) CHECK(6, behind > 0);
  if (!wb) CHECK(7, behind == 0);
  /* A thread's write right after the fiber's: after it. */
  for (int k = 0; k < 20; k++) {
    CHECK(8, weft_fd_write(w, "A", 1, in_ms(5000)) == 1);
    behind_thread bt = {.fd = w};
    CHECK(9, on_thread(thread_write_b, &bt));
    CHECK(10, bt.rc == 1);
    CHECK(11, peer_read(peer, buf, 2) && memcmp(buf, "AB", 2) == 0);
  }
  /* Ahead of a reader that stopped: a write waits at its deadline; what was counted all arrives. */
  size_t total = 0;
  ssize_t n;
  unsigned char pat[1000];
  int64_t dl = in_ms(200);
  for (;;) {
    for (size_t i = 0; i < sizeof pat; i++) pat[i] = (unsigned char)((total + i) % 253);
    if ((n = weft_fd_write(w, pat, sizeof pat, dl)) <= 0) break;
    total += (size_t)n;
  }
  CHECK(12, n == -ETIMEDOUT && total > 0);
  for (size_t at = 0; at < total;) {
    size_t want = total - at < sizeof buf ? total - at : sizeof buf;
    CHECK(13, peer_read(peer, buf, want));
    for (size_t i = 0; i < want; i++) CHECK(14, (unsigned char)buf[i] == (unsigned char)((at + i) % 253));
    at += want;
  }
  CHECK(15, weft_fd_write(w, "z", 1, in_ms(5000)) == 1);
  CHECK(16, peer_read(peer, buf, 1) && buf[0] == 'z');
  /* A close right after a write: the bytes, then the end of the stream. */
  CHECK(17, weft_fd_write(w, "last", 4, in_ms(5000)) == 4);
  CHECK(18, weft_fd_close(w) == 0);
  CHECK(19, peer_read(peer, buf, 4) && memcmp(buf, "last", 4) == 0 && peer_eof(peer));
  weft_fd_close(peer);
  /* The same with the close on a thread; and on a thread that this fiber joins while it holds its
   * carrier (a carrier's thread is blocked: the close is handed to it, not waited for). */
  for (int k = 0; k < 2; k++) {
    CHECK(20, tcp_owned_pair(&w, &peer) == 0);
    CHECK(21, weft_fd_write(w, "tail", 4, in_ms(5000)) == 4);
    behind_thread bc = {.fd = w, .rc = -1};
    if (k == 0) {
      CHECK(22, on_thread(thread_close, &bc));
    } else {
      pthread_t t;
      CHECK(22, pthread_create(&t, NULL, thread_close, &bc) == 0);
      pthread_join(t, NULL);
    }
    CHECK(23, bc.rc == 0);
    CHECK(24, peer_read(peer, buf, 4) && memcmp(buf, "tail", 4) == 0 && peer_eof(peer));
    weft_fd_close(peer);
  }
  /* A reset: the writes that follow fail, within a few, with the connection's error. */
  int plain;
  CHECK(25, tcp_pair(&w, &plain) == 0);
  struct linger lg = {1, 0};
  CHECK(26, setsockopt(plain, SOL_SOCKET, SO_LINGER, &lg, sizeof lg) == 0);
  close(plain); /* sends a reset */
  int err = 0;
  for (int k = 0; k < 200 && !err; k++) {
    ssize_t r = weft_fd_write(w, "x", 1, in_ms(5000));
    if (r < 0)
      err = (int)r;
    else
      weft_sleep_ns(1000000);
  }
  CHECK(27, err == -ECONNRESET || err == -EPIPE);
  /* The error was reported once; the socket stays broken, and says so again. */
  ssize_t again = weft_fd_write(w, "x", 1, in_ms(5000));
  if (again > 0) again = weft_fd_write(w, "x", 1, in_ms(5000));
  CHECK(28, again == -EPIPE || again == -ECONNRESET);
  CHECK(29, weft_fd_close(w) == 0);
  return NULL;
}

static void test_ring_reads(void) {
  if (!weft_test_fibers_expected()) return;
  /* A carrier sets up its ring at its first socket request (with 2; a file's with 1). */
  CU_ASSERT_EQUAL(on_fiber(one_round, NULL), 0);
  weft_info info;
  CU_ASSERT_EQUAL_FATAL(weft_get_info(&info), 0);
  /* The default, 2 (or on), reads and writes sockets as ring requests; 1 only files; 0 none. */
  const char *env = getenv("WEFT_IO_URING");
  bool off = env && (strcmp(env, "0") == 0 || strcmp(env, "off") == 0);
  bool all = !env || strcmp(env, "2") == 0 || strcmp(env, "on") == 0;
  if (off) CU_ASSERT_FALSE(info.io_uring);
  bool ring = info.io_uring && all;
  CU_ASSERT_EQUAL(on_fiber(ring_reads, &ring), 0);
  CU_ASSERT_EQUAL(on_fiber(ring_writes, &ring), 0);
  CU_ASSERT_EQUAL(on_fiber(ring_kept, &ring), 0);
  CU_ASSERT_EQUAL(on_fiber(writes_behind, &ring), 0);
  /* On a thread: poll(2), read(2) and send(2), never the ring. */
  bool none = false;
  CU_ASSERT_EQUAL((intptr_t)ring_reads(&none), 0);
  CU_ASSERT_EQUAL((intptr_t)ring_writes(&none), 0);
  CU_ASSERT_EQUAL((intptr_t)writes_behind(&none), 0);
  /* A write waiting in the ring for room, cancelled: -ECANCELED, and the socket writes on. */
  weft_fd p[2];
  CU_ASSERT_EQUAL_FATAL(owned_pair(p), 0);
  weft_future *f;
  CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_BLOCKING, blocked_writer, &p[0], &f), 0);
  weft_test_sleep_ms(50);
  CU_ASSERT_EQUAL(weft_future_cancel(f), -EBUSY);
  void *r = NULL;
  CU_ASSERT_EQUAL(weft_future_get(f, in_ms(10000), &r), 0);
  CU_ASSERT_EQUAL((intptr_t)r, -ECANCELED);
  weft_future_free(f);
  static char drain[65536];
  while (weft_fd_read(p[1], drain, sizeof drain, 0) > 0) {
  }
  CU_ASSERT_EQUAL(weft_fd_write(p[0], "x", 1, in_ms(5000)), 1);
  char c = 0;
  ssize_t got;
  while ((got = weft_fd_read(p[1], &c, 1, in_ms(5000))) == 1 && c != 'x') {
  }
  CU_ASSERT_EQUAL(got, 1);
  weft_fd_close(p[0]);
  weft_fd_close(p[1]);
  weft_stats st;
  CU_ASSERT_EQUAL(weft_get_stats(&st), 0);
  if (ring) CU_ASSERT(st.uring_waits > 0); /* the carriers slept in their rings */
  if (off) CU_ASSERT_EQUAL(st.uring_waits, 0);
}

/* --- lending reads (weft_fd_read_lend) ------------------------------------------------------------------ */

#define LEND_BYTES 30000
static unsigned char lend_byte(size_t i) { return (unsigned char)(i * 7 + i / 251); }

/* The writer of a lend test: LEND_BYTES patterned bytes in chunks of 700, 2 ms apart (the reader waits for
 * most of them, so that a ring's buffer can be lent). */
static void *lend_writer(void *arg) {
  weft_fd w = *(weft_fd *)arg;
  static unsigned char out[LEND_BYTES];
  for (size_t i = 0; i < sizeof out; i++) out[i] = lend_byte(i);
  for (size_t off = 0; off < sizeof out; off += 700) {
    size_t n = sizeof out - off < 700 ? sizeof out - off : 700;
    if (weft_fd_write(w, out + off, n, in_ms(5000)) != (ssize_t)n) return (void *)1;
    weft_sleep_ns(2 * MS);
  }
  return NULL;
}

static void *lend_scenario(void *arg) {
  bool *ring_lent = arg;
  weft_fd w, r;
  CHECK(1, tcp_owned_pair(&w, &r) == 0);
  const void *d = NULL;
  CHECK(2, weft_fd_read_lend(r, NULL, in_ms(10)) == -EINVAL);
  CHECK(3, weft_fd_read_lend(r, &d, 0) == -ETIMEDOUT);
  weft_fd_read_done(r, 5); /* no lend outstanding: nothing happens */
  unsigned long lends0 = weft__fd_test_ring_lends();
  /* Every byte, in order, through lends that consume all, a part or none of what they got, mixed with
   * plain reads, which take what a lend left first. */
  weft_future *fw;
  CHECK(4, weft_future_start(WEFT_BLOCKING, lend_writer, &w, &fw) == 0);
  size_t off = 0;
  for (int k = 0; off < LEND_BYTES; k++) {
    if (k % 5 == 4) {
      unsigned char buf[300];
      ssize_t n = weft_fd_read(r, buf, sizeof buf, in_ms(5000));
      CHECK(5, n > 0);
      for (ssize_t i = 0; i < n; i++) CHECK(6, buf[i] == lend_byte(off + (size_t)i));
      off += (size_t)n;
      continue;
    }
    ssize_t n = weft_fd_read_lend(r, &d, in_ms(5000));
    CHECK(7, n > 0 && d != NULL);
    const unsigned char *b = d;
    for (ssize_t i = 0; i < n; i++) CHECK(8, b[i] == lend_byte(off + (size_t)i));
    /* One lend at a time. */
    if (k % 7 == 1) CHECK(9, weft_fd_read_lend(r, &d, 0) == -EBUSY);
    size_t used = k % 3 == 0 ? (size_t)n : k % 3 == 1 ? (size_t)n / 2 : 0;
    weft_fd_read_done(r, used);
    off += used;
  }
  void *wr = (void *)1;
  CHECK(10, weft_future_get(fw, in_ms(10000), &wr) == 0 && wr == NULL);
  weft_future_free(fw);
  *ring_lent = weft__fd_test_ring_lends() > lends0;
  /* A close while a lend is outstanding: it returns, the lent bytes stay, the descriptor closes at the
   * lend's end (the peer sees the end of the stream only then). */
  CHECK(11, weft_fd_write(w, "tail", 4, in_ms(5000)) == 4);
  ssize_t n = weft_fd_read_lend(r, &d, in_ms(5000));
  CHECK(12, n > 0 && n <= 4 && memcmp(d, "tail", (size_t)n) == 0);
  CHECK(13, weft_fd_close(r) == 0);
  CHECK(14, weft_fd_read_lend(r, &d, 0) == -EBADF);
  CHECK(15, memcmp(d, "tail", (size_t)n) == 0);
  char c;
  CHECK(16, weft_fd_read(w, &c, 1, in_ms(50)) == -ETIMEDOUT); /* still open */
  weft_fd_read_done(r, (size_t)n);
  CHECK(17, weft_fd_read(w, &c, 1, in_ms(5000)) == 0); /* closed now */
  weft_fd_read_done(r, 1);                             /* after the close and the end: nothing */
  /* The end of the stream: 0, nothing lent. */
  weft_fd w2, r2;
  CHECK(18, tcp_owned_pair(&w2, &r2) == 0);
  CHECK(19, weft_fd_write(w2, "ab", 2, in_ms(5000)) == 2);
  CHECK(20, weft_fd_close(w2) == 0);
  n = weft_fd_read_lend(r2, &d, in_ms(5000));
  CHECK(21, n >= 1 && memcmp(d, "ab", (size_t)n) == 0);
  weft_fd_read_done(r2, 1);
  /* What is left goes to poll and to the next read. */
  CHECK(22, weft_fd_poll(r2, POLLIN, 0) & POLLIN);
  CHECK(23, weft_fd_read(r2, &c, 1, in_ms(5000)) == 1 && c == 'b');
  CHECK(24, weft_fd_read_lend(r2, &d, in_ms(5000)) == 0);
  CHECK(25, weft_fd_close(r2) == 0);
  CHECK(26, weft_fd_close(w) == 0);
  /* A close while the rest of a lent ring buffer is held (no lend outstanding): the buffer goes back with
   * the slot, and the peer sees the close. */
  CHECK(27, tcp_owned_pair(&w2, &r2) == 0);
  CHECK(28, weft_fd_read_lend(r2, &d, 0) == -ETIMEDOUT); /* nothing yet */
  weft_future *fw2;
  CHECK(29, weft_future_start(WEFT_BLOCKING, lend_writer, &w2, &fw2) == 0);
  n = weft_fd_read_lend(r2, &d, in_ms(5000));
  CHECK(30, n > 1 && ((const unsigned char *)d)[0] == lend_byte(0));
  weft_fd_read_done(r2, 1);
  CHECK(31, weft_fd_close(r2) == 0);
  wr = (void *)1;
  CHECK(32, weft_future_get(fw2, in_ms(10000), &wr) == 0); /* the writer ends (all written, or EPIPE) */
  weft_future_free(fw2);
  CHECK(33, weft_fd_close(w2) == 0);
  return NULL;
}

static void test_lend(void) {
  bool ring_lent = false;
  CU_ASSERT_EQUAL(on_fiber(lend_scenario, &ring_lent), 0);
  /* On a fiber with the multishot receives (the default), the ring's own buffers were lent. */
  weft_info info;
  CU_ASSERT_EQUAL_FATAL(weft_get_info(&info), 0);
  const char *env = getenv("WEFT_IO_URING");
  bool all = !env || strcmp(env, "2") == 0 || strcmp(env, "on") == 0;
#ifdef WEFT_TESTING
  if (weft_test_fibers_expected() && info.io_uring && all && !getenv("WEFT_MIGRATE")) CU_ASSERT(ring_lent);
#endif
  /* On a thread: the descriptor's own buffer, lent after a copy. */
  CU_ASSERT_EQUAL((intptr_t)lend_scenario(&ring_lent), 0);
  /* Every ring buffer lent went back (from another thread through its ring's owner: give it a moment). */
  for (int i = 0; i < 200 && weft__fd_test_lent_buffers() != 0; i++) weft_test_sleep_ms(5);
  CU_ASSERT_EQUAL(weft__fd_test_lent_buffers(), 0);
}

/* --- many connections on one carrier ------------------------------------------------------------------- */

typedef struct conn {
  weft_fd fd;
  int rounds;
} conn;

static void *echo_side(void *arg) {
  conn *c = arg;
  char buf[64];
  for (int i = 0; i < c->rounds; i++) {
    ssize_t r = weft_fd_read(c->fd, buf, sizeof buf, in_ms(60000));
    if (r <= 0 || weft_fd_write(c->fd, buf, (size_t)r, -1) != r) return (void *)1;
  }
  return NULL;
}

static int client_side(void *ctx, size_t i) {
  conn *cs = ctx;
  char msg[32], buf[64];
  for (int k = 0; k < cs[i].rounds; k++) {
    int len = snprintf(msg, sizeof msg, "m%zu-%d", i, k);
    if (weft_fd_write(cs[i].fd, msg, (size_t)len, -1) != len) return 1;
    ssize_t got = 0;
    while (got < len) {
      ssize_t r = weft_fd_read(cs[i].fd, buf + got, sizeof buf - (size_t)got, in_ms(60000));
      if (r <= 0) return 2;
      got += r;
    }
    if (memcmp(buf, msg, (size_t)len) != 0) return 3;
  }
  return 0;
}

/*
 * The end of a Unix stream, read on a fiber (found by issue 29's soak):
 * Linux 6.18's io_uring delivers every byte of an AF_UNIX stream through a
 * multishot receive but, once some 33 completions have come in a row, never
 * its end, so a reader that had all the bytes waited for ever (reproduced
 * with liburing alone). weft reads Unix stream sockets with one-shot
 * receives (fd.c's sock_kind). The main thread writes 96 KiB in chunks of
 * 1 to 8192 bytes, then shuts its end: the fiber must read every byte, then 0.
 */
#define UNIX_EOF_BYTES (96 * 1024)
typedef struct unix_eof {
  weft_fd fd;
  ssize_t total, last;
} unix_eof;

static void *unix_eof_reader(void *arg) {
  unix_eof *u = arg;
  char buf[6000];
  int64_t d = weft_now_ns() + 10000000000LL;
  for (;;) {
    ssize_t r = weft_fd_read(u->fd, buf, sizeof buf, d);
    u->last = r;
    if (r <= 0) break;
    u->total += r;
  }
  return NULL;
}

static void test_unix_stream_end(void) {
  for (int round = 0; round < 8; round++) {
    int sv[2];
    CU_ASSERT_EQUAL_FATAL(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    unix_eof rd = {{0}, 0, 0};
    weft_fd wr;
    CU_ASSERT_EQUAL_FATAL(weft_fd_open(sv[0], &rd.fd), 0);
    CU_ASSERT_EQUAL_FATAL(weft_fd_open(sv[1], &wr), 0);
    weft_future *fr;
    CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_BLOCKING, unix_eof_reader, &rd, &fr), 0);
    static char buf[8192];
    uint64_t x = 88172645463325252ull + (uint64_t)round;
    size_t put = 0;
    while (put < UNIX_EOF_BYTES) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      size_t chunk = 1 + (size_t)(x % sizeof buf);
      if (chunk > UNIX_EOF_BYTES - put) chunk = UNIX_EOF_BYTES - put;
      ssize_t w = weft_fd_write(wr, buf, chunk, weft_now_ns() + 10000000000LL);
      CU_ASSERT_EQUAL_FATAL(w, (ssize_t)chunk);
      put += chunk;
    }
    shutdown(weft_fd_native(wr), SHUT_WR);
    CU_ASSERT_EQUAL(weft_future_get(fr, -1, NULL), 0);
    CU_ASSERT_EQUAL(rd.total, UNIX_EOF_BYTES);
    CU_ASSERT_EQUAL(rd.last, 0);
    if (rd.last != 0)
      fprintf(stderr, "\n  round %d: the reader's last read returned %zd after %zd bytes\n", round, rd.last,
              rd.total);
    weft_future_free(fr);
    weft_fd_close(rd.fd);
    weft_fd_close(wr);
  }
}

static void test_many_on_one_carrier(void) {
  size_t n = weft_test_slow_env() ? 300 : 5000;
  struct rlimit rl;
  getrlimit(RLIMIT_NOFILE, &rl);
  rlim_t need = 2 * n + 200;
  if (rl.rlim_cur < need) {
    rl.rlim_cur = rl.rlim_max < need ? rl.rlim_max : need;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  if (rl.rlim_cur < need) {
    n = (rl.rlim_cur - 200) / 2;
    printf("\n  (descriptor limit %llu: %zu connections)\n", (unsigned long long)rl.rlim_cur, n);
  }
  weft_shutdown();
  weft_config cfg;
  weft_config_init(&cfg);
  cfg.carriers = 1;
  CU_ASSERT_EQUAL_FATAL(weft_configure(&cfg), 0);
  weft_stats st0;
  CU_ASSERT_EQUAL(weft_get_stats(&st0), 0);
  conn *cli = calloc(n, sizeof *cli), *srv = calloc(n, sizeof *srv);
  weft_future **fs = calloc(n, sizeof *fs);
  for (size_t i = 0; i < n; i++) {
    weft_fd p[2];
    CU_ASSERT_EQUAL_FATAL(owned_pair(p), 0);
    cli[i] = (conn){p[0], 10};
    srv[i] = (conn){p[1], 10};
    CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_BLOCKING, echo_side, &srv[i], &fs[i]), 0);
  }
  weft_pmap_opts o = WEFT_PMAP_OPTS_INIT;
  o.kind = WEFT_BLOCKING;
  CU_ASSERT_EQUAL(weft_pmap(n, client_side, cli, &o), 0);
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    void *r = NULL;
    weft_future_get(fs[i], -1, &r);
    bad += r != NULL;
    weft_future_free(fs[i]);
    weft_fd_close(cli[i].fd);
    weft_fd_close(srv[i].fd);
  }
  CU_ASSERT_EQUAL(bad, 0);
  /* One carrier, and any other a compensation carrier that the pinning monitor started (a slow slice on a
   * busy machine). */
  weft_stats st;
  CU_ASSERT_EQUAL(weft_get_stats(&st), 0);
  if (weft_test_fibers_expected())
    CU_ASSERT_TRUE(weft_carrier_count() <= 1 + st.extra_carriers - st0.extra_carriers);
  free(cli);
  free(srv);
  free(fs);
  weft_shutdown();
  weft_config_init(&cfg);
  weft_configure(&cfg);
}

/*
 * A write behind that the kernel still holds (the peer reads nothing) when
 * weft_shutdown stops its carrier: the carrier gives it a second, then
 * cancels it, and the socket's next write, in the next runtime, says
 * -ECANCELED rather than going on as if those bytes had gone.
 */
typedef struct stuck_ctx {
  weft_fd w;
  bool behind; /* the small write went behind (counted) */
} stuck_ctx;

static void *fill_then_behind(void *arg) {
  stuck_ctx *k = arg;
  static char chunk[65536];
  ssize_t n;
  int64_t dl = in_ms(200);
  while ((n = weft_fd_write(k->w, chunk, sizeof chunk, dl)) > 0) {
  }
  if (n != -ETIMEDOUT) return (void *)1;
  weft_stats a, b;
  weft_get_stats(&a);
  /* The socket is full: behind, this send waits in the kernel while the write has returned; else the write
   * waits, and times out. */
  n = weft_fd_write(k->w, "x", 1, in_ms(200));
  if (n != 1 && n != -ETIMEDOUT) return (void *)2;
  weft_get_stats(&b);
  k->behind = b.uring_sends_behind > a.uring_sends_behind;
  return NULL;
}

static void *write_one(void *arg) {
  return (void *)(intptr_t)weft_fd_write(*(weft_fd *)arg, "y", 1, in_ms(200));
}

static void test_behind_across_restart(void) {
  weft_fd w;
  int peer;
  CU_ASSERT_EQUAL_FATAL(tcp_pair(&w, &peer), 0);
  stuck_ctx k = {w, false};
  CU_ASSERT_EQUAL(on_fiber(fill_then_behind, &k), 0);
  weft_shutdown();
  intptr_t r = on_fiber(write_one, &w);
  if (k.behind) {
    CU_ASSERT_EQUAL(r, -ECANCELED);
  } else {
    CU_ASSERT(r == 1 || r == -ETIMEDOUT); /* no writes behind here: the socket is just full */
  }
  close(peer);
  weft_fd_close(w);
}

/* A runtime stopped and started again: descriptors owned across it register with the new pollers. */
static void test_across_restart(void) {
  weft_fd p[2];
  CU_ASSERT_EQUAL_FATAL(owned_pair(p), 0);
  waiter_args a = {p[0], false, 0};
  CU_ASSERT_EQUAL(on_fiber(second_reader, &a.fd), -ETIMEDOUT); /* registered with this runtime */
  weft_shutdown();
  weft_future *f;
  CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_BLOCKING, blocked_call, &a, &f), 0);
  while (!atomic_load(&a.entered)) weft_test_sleep_ms(1);
  weft_test_sleep_ms(20);
  CU_ASSERT_EQUAL(weft_fd_write(p[1], "hi", 2, -1), 2);
  void *r = NULL;
  CU_ASSERT_EQUAL(weft_future_get(f, in_ms(10000), &r), 0);
  CU_ASSERT_EQUAL((intptr_t)r, 2);
  weft_future_free(f);
  weft_fd_close(p[0]);
  weft_fd_close(p[1]);
}

#ifdef WEFT_TESTING /* the fault injector is in test builds only */
/* --- faults ------------------------------------------------------------------------------------------- */

static void *fault_wait(void *arg) {
  weft_fd fd = *(weft_fd *)arg;
  /*
   * The registration (epoll_ctl) fails once: the error comes back, and the
   * next wait registers. The fault is armed for this carrier only (the
   * registration runs here, before the fiber parks), so that no other
   * carrier's own epoll_ctl can take it.
   */
  if (weft_in_fiber()) { /* a thread (WEFT_FIBERS=0) waits with poll(2): no registration to fail */
    weft__fault_arm_here(FBIT(WEFT__F_EPOLL), 0, false);
    int r = weft_fd_poll(fd, POLLIN, in_ms(50));
    unsigned long fired = weft__fault_disarm();
    if (fired != 1 || r != -ENOMEM) return (void *)1;
  }
  if (weft_fd_poll(fd, POLLIN, in_ms(20)) != -ETIMEDOUT) return (void *)2;
  /* A read that cannot be a ring request reads the ordinary way, with the same results. */
  char b[4];
  weft__fault_arm_here(FBIT(WEFT__F_URING), 0, false);
  ssize_t n = weft_fd_read(fd, b, sizeof b, in_ms(20));
  weft__fault_disarm();
  if (n != -ETIMEDOUT) return (void *)3;
  /* The same for a write that cannot be a ring send. */
  weft__fault_arm_here(FBIT(WEFT__F_URING), 0, false);
  ssize_t m = weft_fd_write(fd, "w", 1, in_ms(1000));
  weft__fault_disarm();
  if (m != 1) return (void *)4;
  return NULL;
}

/* Writes behind without memory: the write waits for its send instead; a close from a thread that cannot
 * hand the close over waits for the ring to submit the write first. Both lose nothing. */
static void *thread_close_nomem(void *arg) {
  behind_thread *t = arg;
  weft__fault_arm_here(FBIT(WEFT__F_MALLOC), 0, true);
  t->rc = weft_fd_close(t->fd);
  weft__fault_disarm();
  atomic_store(&t->done, true);
  return NULL;
}

static void *fault_behind(void *arg) {
  (void)arg;
  weft_fd w, peer;
  char buf[8];
  CHECK(1, tcp_owned_pair(&w, &peer) == 0);
  weft_stats a, b;
  CHECK(2, weft_get_stats(&a) == 0);
  weft__fault_arm_here(FBIT(WEFT__F_MALLOC), 0, true);
  ssize_t n = weft_fd_write(w, "nomem", 5, in_ms(5000));
  weft__fault_disarm();
  CHECK(3, n == 5 && weft_get_stats(&b) == 0);
  CHECK(4, b.uring_sends_behind == a.uring_sends_behind);
  CHECK(5, peer_read(peer, buf, 5) && memcmp(buf, "nomem", 5) == 0);
  CHECK(6, weft_fd_write(w, "tail", 4, in_ms(5000)) == 4);
  behind_thread bt = {.fd = w, .rc = -1};
  CHECK(7, on_thread(thread_close_nomem, &bt) && bt.rc == 0);
  CHECK(8, peer_read(peer, buf, 4) && memcmp(buf, "tail", 4) == 0 && peer_eof(peer));
  weft_fd_close(peer);
  return NULL;
}

static void test_faults(void) {
  int sv[2];
  CU_ASSERT_FATAL(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  int fl = fcntl(sv[0], F_GETFL);
  weft_fd f = {0};
  weft__fault_arm(FBIT(WEFT__F_OWNFD), 0, false);
  CU_ASSERT_EQUAL(weft_fd_open(sv[0], &f), -EBADF);
  weft__fault_disarm();
  CU_ASSERT_EQUAL(fcntl(sv[0], F_GETFL), fl); /* left as it was */
  CU_ASSERT_EQUAL(f.id_, 0);
  weft__fault_arm(FBIT(WEFT__F_OWNFD), 0, false);
  CU_ASSERT_EQUAL(weft_fd_socket(AF_INET, SOCK_STREAM, 0, &f), -EMFILE);
  weft__fault_disarm();
  /* Accept: the connection waits in the queue and is taken by the next call. */
  weft_fd l;
  struct sockaddr_in addr;
  CU_ASSERT_EQUAL_FATAL(listen_any(&l, &addr), 0);
  int c = socket(AF_INET, SOCK_STREAM, 0);
  CU_ASSERT_EQUAL(connect(c, (struct sockaddr *)&addr, sizeof addr), 0);
  weft_fd got;
  weft__fault_arm(FBIT(WEFT__F_OWNFD), 0, false);
  CU_ASSERT_EQUAL(weft_fd_accept(l, NULL, NULL, &got, in_ms(5000)), -EMFILE);
  weft__fault_disarm();
  CU_ASSERT_EQUAL(weft_fd_accept(l, NULL, NULL, &got, in_ms(5000)), 0);
  weft_fd_close(got);
  close(c);
  weft_fd_close(l);
  /* The registration, on a fiber. */
  CU_ASSERT_EQUAL_FATAL(weft_fd_open(sv[0], &f), 0);
  intptr_t bad = on_fiber(fault_wait, &f);
  if (bad) printf("\n  fault_wait: step %d failed\n", (int)bad);
  CU_ASSERT_EQUAL(bad, 0);
  CU_ASSERT_EQUAL(on_fiber(fault_behind, NULL), 0);
  weft_fd_close(f);
  close(sv[1]);
}

#endif /* WEFT_TESTING */

int main(int argc, char **argv) {
  static const weft_test tests[] = {
      {"basics", test_basics},
      {"fibers_and_threads", test_fibers_and_threads},
      {"close_wakes_waiters", test_close_wakes_waiters},
      {"reuse", test_reuse},
      {"one_waiter_per_direction", test_one_waiter_per_direction},
      {"cancel", test_cancel},
      {"bad_input", test_bad_input},
      {"tcp", test_tcp},
      {"tcp_short_reads", test_tcp_short_reads},
      {"tcp_full_reads", test_tcp_full_reads},
      {"ring_reads", test_ring_reads},
      {"read_wait_after_write_wait", test_read_wait_after_write_wait},
      {"many_on_one_carrier", test_many_on_one_carrier},
      {"unix_stream_end", test_unix_stream_end},
      {"lend", test_lend},
      {"across_restart", test_across_restart},
      {"behind_across_restart", test_behind_across_restart},
#ifdef WEFT_TESTING
      {"faults", test_faults},
#endif
      {NULL, NULL},
  };
  return weft_test_run(argc, argv, "ownfd", tests);
}
