/*
 * Suite "signals": signals and fork().
 *
 * EINTR never comes out of a weft blocking call. Handlers for SIGUSR1 and
 * SIGALRM are installed without SA_RESTART, so that every system call a
 * signal interrupts fails with EINTR; an interval timer sends SIGALRM to
 * the process and a thread sends SIGUSR1 to the process and to each
 * worker thread (tgkill), thousands of times a second, while plain threads
 * and fibers sleep, wait on futures, locks, semaphores, condition variables
 * and channels, do socket I/O, accept and connect, offload calls and run
 * parallel maps. Every call must return its normal result, and no sleep or
 * timed wait may end before its deadline. (weft's own threads block
 * asynchronous signals, so the calls that see them are those of plain
 * threads, OpenMP threads of the program and the fallback path.)
 *
 * fork(): docs/architecture.md ("Life cycle and fork"). A child forked
 * while fibers run and the OpenMP team is busy can use all of weft (maps and
 * futures of both kinds, I/O, synchronisation, offload) and exit cleanly;
 * the parent's work goes on unaffected; a child that only calls exec works,
 * and inherits none of weft's descriptors.
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "stress/reliability.h"
#include "fiber/sched.h"

static atomic_int failures;

#define CHECK(cond, ...)                                                                                     \
  do {                                                                                                       \
    if (!(cond)) {                                                                                           \
      atomic_fetch_add(&failures, 1);                                                                        \
      fprintf(stderr, "\n  %s:%d: %s: ", __FILE__, __LINE__, #cond);                                         \
      fprintf(stderr, __VA_ARGS__);                                                                          \
      fprintf(stderr, "\n");                                                                                 \
    }                                                                                                        \
  } while (0)

static const weft_pmap_opts blocking = {WEFT_BLOCKING, 0, 0, 0};

/* --- the bombardment ------------------------------------------------------------------------------- */

static atomic_long signals_seen;
static void on_signal(int sig) {
  (void)sig;
  atomic_fetch_add_explicit(&signals_seen, 1, memory_order_relaxed);
}

#define MAX_TARGETS 64
static atomic_int target_tids[MAX_TARGETS];
static atomic_int ntargets;
static atomic_bool bombard_stop;
static atomic_long signals_sent;

/* The calling thread wants signals of its own (tgkill). */
static void target_me(void) {
  int i = atomic_fetch_add(&ntargets, 1);
  if (i < MAX_TARGETS) atomic_store(&target_tids[i], (int)syscall(SYS_gettid));
}

static void *bombard_main(void *arg) {
  (void)arg;
  /* This thread takes none itself: process-directed signals go to the others. */
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGUSR1);
  sigaddset(&s, SIGALRM);
  pthread_sigmask(SIG_BLOCK, &s, NULL);
  pid_t pid = getpid();
  unsigned k = 0;
  while (!atomic_load(&bombard_stop)) {
    kill(pid, SIGUSR1);
    int n = atomic_load(&ntargets);
    if (n > MAX_TARGETS) n = MAX_TARGETS;
    for (int i = 0; i < n; i++) {
      int tid = atomic_load(&target_tids[(k + (unsigned)i) % (unsigned)n]);
      /* A thread that has exited: ESRCH, harmless. */
      if (tid) syscall(SYS_tgkill, pid, tid, SIGUSR1);
    }
    atomic_fetch_add(&signals_sent, 1 + n);
    k++;
    struct timespec ts = {0, 100000}; /* 100 µs: several thousand signals a second */
    nanosleep(&ts, NULL);
  }
  return NULL;
}

static pthread_t bombarder;
static struct sigaction old_usr1, old_alrm;

static void bombard_start(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sa.sa_flags = 0; /* no SA_RESTART: interrupted system calls fail with EINTR */
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, &old_usr1);
  sigaction(SIGALRM, &sa, &old_alrm);
  atomic_store(&signals_seen, 0);
  atomic_store(&signals_sent, 0);
  atomic_store(&ntargets, 0);
  atomic_store(&bombard_stop, false);
  target_me();
  struct itimerval it = {{0, 250}, {0, 250}}; /* SIGALRM every 250 µs */
  setitimer(ITIMER_REAL, &it, NULL);
  pthread_create(&bombarder, NULL, bombard_main, NULL);
}

static void bombard_stop_all(void) {
  struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(ITIMER_REAL, &off, NULL);
  atomic_store(&bombard_stop, true);
  pthread_join(bombarder, NULL);
  /* Signals still pending are taken by the handler; keep it (a default action would end the process). */
  weft_test_sleep_ms(5);
  printf("\n    %ld signals sent, %ld handled", atomic_load(&signals_sent), atomic_load(&signals_seen));
}

/* --- one round of every blocking call, on whatever context runs it --------------------------------- */

#define US 1000LL

static void *after_sleep_post(void *arg) {
  weft_sleep_ns(500 * US);
  weft_sem_post(arg);
  return NULL;
}

typedef struct cond_pair {
  weft_mutex_t m;
  weft_cond_t c;
  int ready;
} cond_pair;

static void *after_sleep_signal(void *arg) {
  cond_pair *p = arg;
  weft_sleep_ns(500 * US);
  weft_mutex_lock(&p->m);
  p->ready = 1;
  weft_cond_signal(&p->c);
  weft_mutex_unlock(&p->m);
  return NULL;
}

static weft_mutex_t held;
static void *hold_a_while(void *arg) {
  atomic_int *taken = arg;
  weft_mutex_lock(&held);
  atomic_store(taken, 1);
  weft_sleep_ns(500 * US);
  weft_mutex_unlock(&held);
  return NULL;
}

static void *after_sleep_send(void *arg) {
  weft_sleep_ns(500 * US);
  int v = 77;
  weft_chan_send(arg, &v, -1);
  return NULL;
}

static void *recv_one(void *arg) {
  weft_sleep_ns(300 * US);
  int v = 0;
  int rc = weft_chan_recv(arg, &v, -1);
  return (void *)(intptr_t)(rc == 0 ? v : rc);
}

static void *after_sleep_write(void *arg) {
  weft_sleep_ns(500 * US);
  ssize_t w = weft_write((int)(intptr_t)arg, "hello", 5, -1);
  return (void *)(intptr_t)w;
}

/* Read `len` bytes slowly, in small pieces, so that a large write waits for room many times. */
typedef struct drain {
  int fd;
  size_t len;
} drain;
static void *slow_drain(void *arg) {
  drain *d = arg;
  char buf[8192];
  size_t got = 0;
  while (got < d->len) {
    ssize_t r = weft_read(d->fd, buf, sizeof buf, -1);
    if (r <= 0) return (void *)(intptr_t)(r == 0 ? -1 : r);
    got += (size_t)r;
    weft_sleep_ns(20 * US);
  }
  return (void *)(intptr_t)got;
}

static void *after_sleep_connect(void *arg) {
  struct sockaddr_in *sa = arg;
  weft_sleep_ns(500 * US);
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int rc = weft_connect(s, (struct sockaddr *)sa, sizeof *sa, -1);
  weft_sleep_ns(200 * US);
  close(s);
  return (void *)(intptr_t)rc;
}

static void *offloaded(void *arg) {
  /* A plain blocking call that handles EINTR itself, as offloaded code must. */
  struct timespec ts = {0, 300000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
  return (void *)((intptr_t)arg + 1);
}

static void *future_sleep(void *arg) {
  weft_sleep_ns((int64_t)(intptr_t)arg * US);
  return (void *)(intptr_t)99;
}

static int elem_sleep(void *ctx, size_t i) {
  (void)ctx;
  int64_t d = weft_now_ns() + (int64_t)(50 + i % 7 * 20) * US;
  int rc = weft_sleep_until(d);
  return rc != 0 ? rc : weft_now_ns() < d ? -1 : 0;
}

static int elem_compute(void *ctx, size_t i) {
  (void)ctx;
  double x = (double)i;
  for (int k = 0; k < 200; k++) x = x * 1.0000001 + 1.0;
  if (x < 0) return -2; /* never: the result is used */
  if (i % 64 == 0) {
    int64_t d = weft_now_ns() + 30 * US;
    if (weft_sleep_until(d) != 0 || weft_now_ns() < d) return -1;
  }
  return 0;
}

static weft_future *start(weft_kind kind, weft_task_fn fn, void *arg) {
  weft_future *f = NULL;
  int rc = weft_future_start(kind, fn, arg, &f);
  CHECK(rc == 0, "weft_future_start: %d (%s)", rc, weft_strerror(rc));
  return rc == 0 ? f : NULL;
}

static void *get_free(weft_future *f) {
  void *r = (void *)(intptr_t)-12345;
  if (!f) return r;
  int rc = weft_future_get(f, -1, &r);
  CHECK(rc == 0, "weft_future_get: %d (%s)", rc, weft_strerror(rc));
  weft_future_free(f);
  return r;
}

static void one_round(const char *who) {
  /* Sleeps: 0, and never early. */
  for (int k = 0; k < 3; k++) {
    int64_t d = weft_now_ns() + 300 * US;
    int rc = weft_sleep_until(d);
    CHECK(rc == 0 && weft_now_ns() >= d, "%s: weft_sleep_until: %d (%s)", who, rc, weft_strerror(rc));
    int64_t t0 = weft_now_ns();
    rc = weft_sleep_ns(200 * US);
    CHECK(rc == 0 && weft_now_ns() - t0 >= 200 * US, "%s: weft_sleep_ns: %d", who, rc);
  }
  /* Futures of both kinds: a result with -1; -ETIMEDOUT only at the deadline, then the result. */
  weft_kind kinds[] = {WEFT_BLOCKING, WEFT_CPU};
  for (int k = 0; k < 2; k++) {
    void *r = get_free(start(kinds[k], future_sleep, (void *)(intptr_t)500));
    CHECK(r == (void *)99, "%s: future result %p", who, r);
    weft_future *f = start(kinds[k], future_sleep, (void *)(intptr_t)3000);
    if (f) {
      int64_t d = weft_now_ns() + 500 * US;
      int rc = weft_future_get(f, d, NULL);
      CHECK(rc == 0 || (rc == -ETIMEDOUT && weft_now_ns() >= d),
            "%s: weft_future_get with a deadline: %d (%s)", who, rc, weft_strerror(rc));
      CHECK(get_free(f) == (void *)99, "%s: future result after a timeout", who);
    }
  }
  /* Mutex held by a fiber for a while. */
  atomic_int taken;
  atomic_init(&taken, 0);
  weft_future *h = start(WEFT_BLOCKING, hold_a_while, &taken);
  while (h && !atomic_load(&taken)) weft_sleep_ns(50 * US);
  int rc = weft_mutex_lock(&held);
  CHECK(rc == 0, "%s: weft_mutex_lock: %d (%s)", who, rc, weft_strerror(rc));
  weft_mutex_unlock(&held);
  get_free(h);
  /* Semaphore posted later. */
  weft_sem_t s;
  weft_sem_init(&s, 0);
  h = start(WEFT_BLOCKING, after_sleep_post, &s);
  rc = weft_sem_wait(&s, -1);
  CHECK(rc == 0, "%s: weft_sem_wait: %d (%s)", who, rc, weft_strerror(rc));
  get_free(h);
  int64_t d = weft_now_ns() + 300 * US;
  rc = weft_sem_wait(&s, d);
  CHECK(rc == -ETIMEDOUT && weft_now_ns() >= d, "%s: weft_sem_wait with a deadline: %d (%s)", who, rc,
        weft_strerror(rc));
  weft_sem_destroy(&s);
  /* Condition variable signalled later. */
  cond_pair cp = {WEFT_MUTEX_INITIALIZER, WEFT_COND_INITIALIZER, 0};
  h = start(WEFT_BLOCKING, after_sleep_signal, &cp);
  weft_mutex_lock(&cp.m);
  while (!cp.ready) {
    rc = weft_cond_wait(&cp.c, &cp.m, -1);
    CHECK(rc == 0, "%s: weft_cond_wait: %d (%s)", who, rc, weft_strerror(rc));
    if (rc != 0) break;
  }
  d = weft_now_ns() + 300 * US;
  rc = weft_cond_wait(&cp.c, &cp.m, d);
  CHECK((rc == -ETIMEDOUT && weft_now_ns() >= d) || rc == 0, "%s: weft_cond_wait with a deadline: %d (%s)",
        who, rc, weft_strerror(rc));
  weft_mutex_unlock(&cp.m);
  get_free(h);
  /* Channels: a receive that waits for a sender, an unbuffered send that waits for a receiver. */
  weft_chan_t *ch = NULL;
  weft_chan_create(0, sizeof(int), &ch);
  h = start(WEFT_BLOCKING, after_sleep_send, ch);
  int v = 0;
  rc = weft_chan_recv(ch, &v, -1);
  CHECK(rc == 0 && v == 77, "%s: weft_chan_recv: %d (%s)", who, rc, weft_strerror(rc));
  get_free(h);
  h = start(WEFT_BLOCKING, recv_one, ch);
  v = 55;
  rc = weft_chan_send(ch, &v, -1);
  CHECK(rc == 0, "%s: weft_chan_send: %d (%s)", who, rc, weft_strerror(rc));
  CHECK(get_free(h) == (void *)55, "%s: the receiver got something else", who);
  weft_chan_free(ch);
  /* Socket I/O: a read that waits for data, a timed read, a poll, a large write that waits for room. */
  int sv[2];
  CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0, "socketpair");
  h = start(WEFT_BLOCKING, after_sleep_write, (void *)(intptr_t)sv[1]);
  char buf[16];
  ssize_t n = weft_read(sv[0], buf, sizeof buf, -1);
  CHECK(n == 5, "%s: weft_read: %zd (%s)", who, n, weft_strerror((int)n));
  CHECK(get_free(h) == (void *)5, "%s: weft_write", who);
  d = weft_now_ns() + 300 * US;
  n = weft_read(sv[0], buf, sizeof buf, d);
  CHECK(n == -ETIMEDOUT && weft_now_ns() >= d, "%s: timed weft_read: %zd (%s)", who, n,
        weft_strerror((int)n));
  h = start(WEFT_BLOCKING, after_sleep_write, (void *)(intptr_t)sv[1]);
  int pr = weft_poll_fd(sv[0], POLLIN, -1);
  CHECK(pr > 0 && (pr & POLLIN), "%s: weft_poll_fd: %d (%s)", who, pr, weft_strerror(pr));
  get_free(h);
  CHECK(weft_read(sv[0], buf, sizeof buf, -1) == 5, "%s: weft_read after poll", who);
  size_t big = 512 * 1024;
  char *out = malloc(big);
  memset(out, 'x', big);
  drain dr = {sv[1], big};
  h = start(WEFT_BLOCKING, slow_drain, &dr);
  size_t sent = 0;
  while (sent < big) {
    n = weft_write(sv[0], out + sent, big - sent, -1);
    CHECK(n > 0, "%s: weft_write: %zd (%s)", who, n, weft_strerror((int)n));
    if (n <= 0) break;
    sent += (size_t)n;
  }
  CHECK(get_free(h) == (void *)(intptr_t)big, "%s: the reader got a different count", who);
  free(out);
  close(sv[0]);
  close(sv[1]);
  /* accept and connect on loopback. */
  int lst = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t sl = sizeof sa;
  CHECK(bind(lst, (struct sockaddr *)&sa, sizeof sa) == 0 && listen(lst, 8) == 0 &&
            getsockname(lst, (struct sockaddr *)&sa, &sl) == 0,
        "listen");
  h = start(WEFT_BLOCKING, after_sleep_connect, &sa);
  int c = weft_accept(lst, NULL, NULL, -1);
  CHECK(c >= 0, "%s: weft_accept: %d (%s)", who, c, weft_strerror(c));
  if (c >= 0) close(c);
  CHECK(get_free(h) == (void *)0, "%s: weft_connect", who);
  int cs = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  rc = weft_connect(cs, (struct sockaddr *)&sa, sizeof sa, -1);
  CHECK(rc == 0, "%s: weft_connect: %d (%s)", who, rc, weft_strerror(rc));
  c = weft_accept(lst, NULL, NULL, -1);
  CHECK(c >= 0, "%s: weft_accept of a pending connection: %d", who, c);
  if (c >= 0) close(c);
  close(cs);
  close(lst);
  /* Offload. */
  void *r = NULL;
  rc = weft_blocking(offloaded, (void *)41, &r);
  CHECK(rc == 0 && r == (void *)42, "%s: weft_blocking: %d", who, rc);
  /* Parallel maps: blocking elements that sleep, CPU elements that compute and sleep now and then. */
  rc = weft_pmap(64, elem_sleep, NULL, &blocking);
  CHECK(rc == 0, "%s: weft_pmap(BLOCKING): %d (%s)", who, rc, weft_strerror(rc));
  rc = weft_pmap(4096, elem_compute, NULL, NULL);
  CHECK(rc == 0, "%s: weft_pmap(CPU): %d (%s)", who, rc, weft_strerror(rc));
}

static int rounds(void) { return weft_test_slow_env() ? 2 : REL_SANITIZED ? 6 : 15; }

static void *thread_rounds(void *arg) {
  target_me();
  char who[32];
  snprintf(who, sizeof who, "thread %d", (int)(intptr_t)arg);
  for (int k = 0; k < rounds(); k++) one_round(who);
  return NULL;
}

static void *fiber_rounds(void *arg) {
  (void)arg;
  for (int k = 0; k < rounds(); k++) one_round(weft_in_fiber() ? "fiber" : "blocking future (fallback)");
  return NULL;
}

/* OpenMP threads of the program take signals: run rounds in a CPU map's elements too. */
static int elem_rounds(void *ctx, size_t i) {
  (void)ctx;
  target_me();
  char who[48];
  snprintf(who, sizeof who, "CPU map element %zu", i);
  one_round(who);
  return 0;
}

static void test_eintr(void) {
  atomic_store(&failures, 0);
  weft_mutex_init(&held);
  bombard_start();
  pthread_t th[2];
  for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, thread_rounds, (void *)(intptr_t)i);
  weft_future *f = start(WEFT_BLOCKING, fiber_rounds, NULL);
  for (int k = 0; k < rounds(); k++) one_round("main thread");
  /*
   * Rounds inside CPU map elements, on the OpenMP threads of the program.
   * Only with fibers: without them the rounds' helper futures would be
   * tasks of this very team, which the elements, blocked, cannot run.
   */
  if (weft_fibers_available()) {
    weft_pmap_opts grain1 = {WEFT_CPU, 1, 0, 0};
    int rc = weft_pmap(2, elem_rounds, NULL, &grain1);
    CHECK(rc == 0, "the CPU map of rounds: %d", rc);
  }
  get_free(f);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  bombard_stop_all();
  CU_ASSERT(atomic_load(&signals_seen) > 0);
  CU_ASSERT_EQUAL(atomic_load(&failures), 0);
}

/* --- fork ------------------------------------------------------------------------------------------ */

/* Work that keeps the parent busy (fibers running, the OpenMP team busy, futures coming and going). */
static atomic_bool busy_stop;
static atomic_long busy_iters, busy_errors;

static int busy_elem(void *ctx, size_t i) {
  atomic_long *sum = ctx;
  if (i % 3 == 0) weft_sleep_ns(100 * US);
  if (i % 3 == 1) weft_yield();
  atomic_fetch_add(sum, (long)i);
  return 0;
}

static int busy_cpu_elem(void *ctx, size_t i) {
  atomic_long *sum = ctx;
  double x = 1.0;
  for (int k = 0; k < 100; k++) x = x * 1.0000001 + (double)k;
  atomic_fetch_add(sum, (long)i);
  return x < 0; /* never: the loop's result is used, so it is not optimised away */
}

static void *busy_maps(void *arg) {
  bool cpu = arg != NULL;
  while (!atomic_load(&busy_stop)) {
    atomic_long sum;
    atomic_init(&sum, 0);
    size_t n = cpu ? 20000 : 64;
    int rc = cpu ? weft_pmap(n, busy_cpu_elem, &sum, NULL) : weft_pmap(n, busy_elem, &sum, &blocking);
    if (rc != 0 || atomic_load(&sum) != (long)(n * (n - 1) / 2)) atomic_fetch_add(&busy_errors, 1);
    atomic_fetch_add(&busy_iters, 1);
  }
  return NULL;
}

static void *busy_futures(void *arg) {
  (void)arg;
  unsigned k = 0;
  while (!atomic_load(&busy_stop)) {
    weft_future *fs[8];
    for (int i = 0; i < 8; i++)
      if (weft_future_start(i % 2 ? WEFT_CPU : WEFT_BLOCKING, future_sleep, (void *)(intptr_t)(i * 50),
                            &fs[i]) != 0)
        fs[i] = NULL;
    for (int i = 0; i < 8; i++) {
      if (!fs[i]) {
        atomic_fetch_add(&busy_errors, 1);
        continue;
      }
      void *r = NULL;
      /* Some are freed while they may still run. */
      if ((k + (unsigned)i) % 5 == 0) {
        weft_future_free(fs[i]);
        continue;
      }
      if (weft_future_get(fs[i], -1, &r) != 0 || r != (void *)99) atomic_fetch_add(&busy_errors, 1);
      weft_future_free(fs[i]);
    }
    k++;
    atomic_fetch_add(&busy_iters, 1);
  }
  return NULL;
}

static void *busy_pingpong(void *arg) {
  int fd = (int)(intptr_t)arg;
  char c = 'p';
  while (!atomic_load(&busy_stop)) {
    if (weft_write(fd, &c, 1, -1) != 1) break;
    if (weft_read(fd, &c, 1, -1) != 1) break;
  }
  shutdown(fd, SHUT_WR);
  return NULL;
}

static void *busy_pong(void *arg) {
  int fd = (int)(intptr_t)arg;
  char c;
  while (weft_read(fd, &c, 1, -1) == 1)
    if (weft_write(fd, &c, 1, -1) != 1) break;
  return NULL;
}

typedef struct busy {
  pthread_t th[3];
  weft_future *ping, *pong; /* on fibers; without fibers, plain threads (below) */
  pthread_t tping, tpong;
  bool threads;
  int sv[2];
} busy;

static void busy_start(busy *b) {
  atomic_store(&busy_stop, false);
  atomic_store(&busy_iters, 0);
  atomic_store(&busy_errors, 0);
  pthread_create(&b->th[0], NULL, busy_maps, NULL);
  pthread_create(&b->th[1], NULL, busy_maps, (void *)1);
  pthread_create(&b->th[2], NULL, busy_futures, NULL);
  socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, b->sv);
  /*
   * Without fibers a blocking future would hold a thread of weft's OpenMP
   * team for the whole test; two of them could hold all of a small team.
   */
  b->threads = !weft_fibers_available();
  if (b->threads) {
    pthread_create(&b->tping, NULL, busy_pingpong, (void *)(intptr_t)b->sv[0]);
    pthread_create(&b->tpong, NULL, busy_pong, (void *)(intptr_t)b->sv[1]);
  } else {
    weft_future_start(WEFT_BLOCKING, busy_pingpong, (void *)(intptr_t)b->sv[0], &b->ping);
    weft_future_start(WEFT_BLOCKING, busy_pong, (void *)(intptr_t)b->sv[1], &b->pong);
  }
  while (atomic_load(&busy_iters) < 6) weft_test_sleep_ms(1);
}

static void busy_stop_all(busy *b) {
  atomic_store(&busy_stop, true);
  for (int i = 0; i < 3; i++) pthread_join(b->th[i], NULL);
  if (b->threads) {
    pthread_join(b->tping, NULL);
    pthread_join(b->tpong, NULL);
  } else {
    weft_future_get(b->ping, -1, NULL);
    weft_future_get(b->pong, -1, NULL);
    weft_future_free(b->ping);
    weft_future_free(b->pong);
  }
  close(b->sv[0]);
  close(b->sv[1]);
  printf("\n    the parent's work: %ld rounds, %ld errors", atomic_load(&busy_iters),
         atomic_load(&busy_errors));
  CU_ASSERT_EQUAL(atomic_load(&busy_errors), 0);
}

/* In the child: everything weft offers, then a clean exit. */
static int child_fails;
#define CHILD_CHECK(cond, what)                                                                              \
  do {                                                                                                       \
    rel_stage = what; /* named in the report if the child times out */                                       \
    if (!(cond)) {                                                                                           \
      child_fails++;                                                                                         \
      fprintf(stderr, "child: %s failed\n", what);                                                           \
    }                                                                                                        \
  } while (0)

static weft_mutex_t child_m = WEFT_MUTEX_INITIALIZER;
static long child_count;
static int child_lock_elem(void *ctx, size_t i) {
  (void)ctx;
  (void)i;
  weft_mutex_lock(&child_m);
  long c = child_count;
  weft_yield();
  child_count = c + 1;
  weft_mutex_unlock(&child_m);
  return 0;
}

static weft_chan_t *child_ch;
static int child_chan_elem(void *ctx, size_t i) {
  atomic_long *sum = ctx;
  if (i < 8) { /* producers */
    for (int k = 1; k <= 100; k++) {
      int v = k;
      if (weft_chan_send(child_ch, &v, -1) != 0) return 1;
    }
    return 0;
  }
  for (int k = 0; k < 100; k++) { /* consumers: as many receipts as sends */
    int v;
    if (weft_chan_recv(child_ch, &v, -1) != 0) return 2;
    atomic_fetch_add(sum, v);
  }
  return 0;
}

static void *child_io(void *arg) {
  (void)arg;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return NULL;
  weft_future *f = NULL;
  weft_future_start(WEFT_BLOCKING, after_sleep_write, (void *)(intptr_t)sv[1], &f);
  char buf[8];
  ssize_t n = weft_read(sv[0], buf, sizeof buf, -1);
  weft_future_get(f, -1, NULL);
  weft_future_free(f);
  close(sv[0]);
  close(sv[1]);
  void *r = NULL;
  int rc = weft_blocking(offloaded, (void *)1, &r);
  return (void *)(intptr_t)(n == 5 && rc == 0 && r == (void *)2);
}

static void child_workout(void *arg) {
  bool use_exit = arg != NULL;
  atomic_long sum;
  atomic_init(&sum, 0);
  CHILD_CHECK(weft_pmap(5000, busy_cpu_elem, &sum, NULL) == 0 && atomic_load(&sum) == 5000L * 4999 / 2,
              "a CPU map");
  atomic_store(&sum, 0);
  CHILD_CHECK(weft_pmap(300, busy_elem, &sum, &blocking) == 0 && atomic_load(&sum) == 300L * 299 / 2,
              "a blocking map");
  weft_future *f = NULL;
  void *r = NULL;
  CHILD_CHECK(weft_future_start(WEFT_CPU, future_sleep, (void *)(intptr_t)100, &f) == 0 &&
                  weft_future_get(f, -1, &r) == 0 && r == (void *)99,
              "a CPU future");
  weft_future_free(f);
  CHILD_CHECK(weft_future_start(WEFT_BLOCKING, child_io, NULL, &f) == 0 && weft_future_get(f, -1, &r) == 0 &&
                  r == (void *)1,
              "I/O and offload on a fiber");
  weft_future_free(f);
  child_count = 0;
  CHILD_CHECK(weft_pmap(100, child_lock_elem, NULL, &blocking) == 0 && child_count == 100,
              "mutual exclusion");
  atomic_store(&sum, 0);
  /*
   * Without fibers the elements run a few at a time, in index order: the
   * producers (lower indices) must never wait for consumers that have not
   * started, so the channel holds everything then.
   */
  weft_chan_create(weft_fibers_available() ? 4 : 1024, sizeof(int), &child_ch);
  CHILD_CHECK(weft_pmap(16, child_chan_elem, &sum, &blocking) == 0 && atomic_load(&sum) == 8L * 5050,
              "a channel");
  weft_chan_free(child_ch);
  weft_shutdown();
  CHILD_CHECK(rel_weft_threads() == 0, "shutdown");
  if (child_fails) _exit(1);
  static const char ok[] = "\n" REL_OK "\n";
  ssize_t w = write(2, ok, sizeof ok - 1);
  (void)w;
  /*
   * exit() runs atexit handlers and library destructors too, which must not
   * hang in the child. Not under the sanitizers: LeakSanitizer would count
   * the parent's memory that the child forgets on purpose (its carriers,
   * the OpenMP runtime's teams) as leaks.
   */
  if (use_exit && !REL_SANITIZED) exit(0);
  _exit(0);
}

static void test_fork_busy(void) {
  if (!rel_can_fork()) return;
  if (REL_ASAN) {
    /*
     * AddressSanitizer's allocator (GCC 12's libasan) is not fork-safe: a
     * child forked while another thread holds one of its locks deadlocks in
     * its first malloc (seen: a carrier's posix_memalign in the child,
     * waiting on SizeClassAllocator64's lock). glibc's malloc is.
     */
    printf("\n    skipped: AddressSanitizer's allocator is not fork-safe");
    return;
  }
  if (REL_TSAN) {
    /* ThreadSanitizer does not support a child of a multithreaded process that starts threads. */
    printf("\n    skipped: ThreadSanitizer does not support threads in a child of a threaded process");
    return;
  }
  busy b;
  busy_start(&b);
  int forks = weft_test_slow_env() ? 2 : REL_SANITIZED ? 6 : 20;
  int bad = 0;
  for (int k = 0; k < forks; k++) {
    char err[4096], st[64];
    int s = rel_child(child_workout, k % 2 ? (void *)1 : NULL, 60, err, sizeof err);
    if (!rel_child_ok(s, err)) {
      fprintf(stderr, "\n  child %d: %s:\n%s\n", k, rel_status(s, st, sizeof st), err);
      bad++;
      forks = k + 1; /* one is enough to report; the rest would take as long */
      break;
    }
    weft_test_sleep_ms(2);
  }
  busy_stop_all(&b);
  printf("\n    %d children forked while busy, %d failed", forks, bad);
  CU_ASSERT_EQUAL(bad, 0);
}

/* The descriptors open at the start, which the child may keep; weft's must all be close-on-exec. */
static char fds_before[4096];

static void exec_child(void *arg) {
  (void)arg;
  /* opendir allocates: under AddressSanitizer, whose allocator is not fork-safe, only exec. */
  DIR *d = REL_ASAN ? NULL : opendir("/proc/self/fd");
  struct dirent *e;
  int leaked = 0;
  int self = d ? dirfd(d) : -1;
  while (d && (e = readdir(d)) != NULL) {
    int fd = atoi(e->d_name);
    if (e->d_name[0] == '.' || fd <= 2 || fd == self || (fd < 4096 && fds_before[fd])) continue;
    int fl = fcntl(fd, F_GETFD);
    if (fl >= 0 && !(fl & FD_CLOEXEC)) {
      char path[64], target[256] = {0};
      snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
      ssize_t r = readlink(path, target, sizeof target - 1);
      (void)r;
      fprintf(stderr, "descriptor %d (%s) is not close-on-exec\n", fd, target);
      leaked++;
    }
  }
  if (d) closedir(d);
  if (leaked) _exit(2);
  execl("/bin/sh", "sh", "-c", "exit 7", (char *)NULL);
  _exit(3);
}

/*
 * A child forked while another thread holds the runtime's start lock (the
 * slow path of weft__fibers_start, which every blocking map takes while the
 * runtime is not running: always, under WEFT_FIBERS=0). The child's first
 * blocking map must not wait for a lock nobody in it will release: the fork
 * hook that re-initialises it must be in place before the lock is ever
 * taken, fibers or not. Before the fix, 1 run of 5 of fork_busy (20 forks
 * each) under WEFT_FIBERS=0 hung this way; this test makes it certain.
 */
static void rt_locked_child(void *arg) {
  (void)arg;
  atomic_long sum;
  atomic_init(&sum, 0);
  CHILD_CHECK(weft_pmap(50, busy_elem, &sum, &blocking) == 0 && atomic_load(&sum) == 50L * 49 / 2,
              "a blocking map in a child forked while the start lock was held");
  weft_shutdown();
  if (child_fails) _exit(1);
  rel_ok_exit();
}

static void test_fork_start_locked(void) {
  if (!rel_can_fork()) return;
  if (REL_TSAN) {
    printf("\n    skipped: ThreadSanitizer does not support threads in a child of a threaded process");
    return;
  }
  weft_shutdown();
  /* A first blocking map: whatever registration weft does on its first call has happened. */
  atomic_long sum;
  atomic_init(&sum, 0);
  CU_ASSERT_EQUAL(weft_pmap(10, busy_elem, &sum, &blocking), 0);
  weft_shutdown();
  pthread_mutex_lock(&weft__rt_state.mu); /* as another thread in weft__fibers_start would hold it */
  char err[4096], st[64];
  int s = rel_child(rt_locked_child, NULL, 30, err, sizeof err);
  pthread_mutex_unlock(&weft__rt_state.mu);
  if (!rel_child_ok(s, err)) fprintf(stderr, "\n  child: %s:\n%s\n", rel_status(s, st, sizeof st), err);
  CU_ASSERT(rel_child_ok(s, err));
}

static void test_fork_exec(void) {
  if (!rel_can_fork()) return;
  memset(fds_before, 0, sizeof fds_before);
  DIR *d = opendir("/proc/self/fd");
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) {
    int fd = atoi(e->d_name);
    if (e->d_name[0] != '.' && fd >= 0 && fd < 4096) fds_before[fd] = 1;
  }
  if (d) closedir(d);
  busy b;
  busy_start(&b);
  /*
   * I/O and offload on a fiber too, so that the carriers' descriptors
   * (epoll, eventfd, io_uring) exist. Not without fibers: there are no such
   * descriptors then.
   */
  if (weft_fibers_available()) {
    weft_future *f = NULL;
    weft_future_start(WEFT_BLOCKING, child_io, NULL, &f);
    weft_future_get(f, -1, NULL);
    weft_future_free(f);
  }
  int forks = weft_test_slow_env() ? 2 : 10;
  for (int k = 0; k < forks; k++) {
    char err[2048], st[64];
    int s = rel_child(exec_child, NULL, 30, err, sizeof err);
    if (!(WIFEXITED(s) && WEXITSTATUS(s) == 7))
      fprintf(stderr, "\n  exec child: %s:\n%s\n", rel_status(s, st, sizeof st), err);
    CU_ASSERT(WIFEXITED(s) && WEXITSTATUS(s) == 7);
  }
  busy_stop_all(&b);
}

int main(int argc, char **argv) {
  static const weft_test tests[] = {
      {"eintr", test_eintr},
      {"fork_busy", test_fork_busy},
      {"fork_exec", test_fork_exec},
      {"fork_start_locked", test_fork_start_locked},
      {NULL, NULL},
  };
  return weft_test_run(argc, argv, "signals", tests);
}
