/*
 * Suite "inspect": what weft shows of itself while it runs. The fiber dump
 * (weft_dump) names every kind of wait with its object, names a known
 * function in a parked fiber's backtrace, keeps working while fibers come
 * and go, works from a fiber and with no runtime, and is written on a
 * signal (WEFT_DUMP_SIGNAL) while the program goes on; the counters
 * (weft_get_stats) add up after a known workload.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define MS 1000000LL

static const weft_pmap_opts blocking = {WEFT_BLOCKING, 0, 0, 0};

/* The dump as a string (malloc'd): written to a temporary file, read back; weft_dump's result in *rc. */
static char *dump_text_rc(unsigned flags, int *rc) {
  FILE *f = tmpfile();
  if (!f) return NULL;
  *rc = weft_dump(fileno(f), flags);
  long n = lseek(fileno(f), 0, SEEK_END);
  char *s = calloc(1, n > 0 ? (size_t)n + 1 : 1);
  if (s && n > 0 && pread(fileno(f), s, (size_t)n, 0) != n) s[0] = '\0';
  fclose(f);
  return s;
}

static char *dump_text(unsigned flags) {
  int rc = -1;
  char *s = dump_text_rc(flags, &rc);
  CU_ASSERT_EQUAL(rc, 0);
  return s;
}

/* The dump has a line with all of the given words (NULL-terminated) on it. */
static bool has_line(const char *text, const char *a, const char *b, const char *c) {
  for (const char *p = text; p && *p;) {
    const char *e = strchr(p, '\n');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    char line[1024];
    size_t k = len < sizeof line - 1 ? len : sizeof line - 1;
    memcpy(line, p, k);
    line[k] = '\0';
    if (strstr(line, a) && (!b || strstr(line, b)) && (!c || strstr(line, c))) return true;
    p = e ? e + 1 : NULL;
  }
  return false;
}

/* --- every kind of wait ------------------------------------------------------------------------ */

typedef struct waits {
  int pipe_fd[2];
  weft_mutex_t mu;
  weft_mutex_t cond_mu;
  weft_cond_t cond;
  weft_sem_t sem;
  weft_sem_t sem_for_future;
  weft_chan_t *chan;
  weft_future *inner; /* a future that waits on sem_for_future; another fiber waits for it */
  atomic_bool release_offload;
  atomic_bool stop;
  atomic_int parked;
} waits;

static void *inner_fn(void *arg) {
  waits *w = arg;
  weft_sem_wait(&w->sem_for_future, -1);
  return NULL;
}

static void *offloaded(void *arg) {
  waits *w = arg;
  while (!atomic_load(&w->release_offload)) weft_test_sleep_ms(1);
  return NULL;
}

static int wait_elem(void *ctx, size_t i) {
  waits *w = ctx;
  atomic_fetch_add(&w->parked, 1);
  char b;
  int v;
  switch (i) {
  case 0:
    while (!atomic_load(&w->stop)) weft_sleep_ns(50 * MS); /* parked on "sleep" nearly all the time */
    return 0;
  case 1:
    return weft_read(w->pipe_fd[0], &b, 1, -1) == 1 ? 0 : 1;
  case 2:
    weft_mutex_lock(&w->mu);
    weft_mutex_unlock(&w->mu);
    return 0;
  case 3:
    weft_mutex_lock(&w->cond_mu);
    while (!atomic_load(&w->stop)) weft_cond_wait(&w->cond, &w->cond_mu, -1);
    weft_mutex_unlock(&w->cond_mu);
    return 0;
  case 4:
    return weft_sem_wait(&w->sem, -1);
  case 5:
    return weft_chan_recv(w->chan, &v, -1);
  case 6:
    return weft_future_get(w->inner, -1, NULL);
  case 7:
    return weft_blocking(offloaded, w, NULL);
  default:
    return 0;
  }
}

static void *map_caller(void *arg) { return (void *)(intptr_t)weft_pmap(8, wait_elem, arg, &blocking); }

static void test_dump_waits(void) {
  if (!weft_test_fibers_expected()) return;
  waits w;
  memset(&w, 0, sizeof w);
  CU_ASSERT_EQUAL_FATAL(pipe(w.pipe_fd), 0);
  weft_mutex_init(&w.mu);
  weft_mutex_init(&w.cond_mu);
  weft_cond_init(&w.cond);
  weft_sem_init(&w.sem, 0);
  weft_sem_init(&w.sem_for_future, 0);
  CU_ASSERT_EQUAL_FATAL(weft_chan_create(0, sizeof(int), &w.chan), 0);
  CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_BLOCKING, inner_fn, &w, &w.inner), 0);
  weft_mutex_lock(&w.mu); /* held by this plain thread: element 2 parks on it */
  /* Eight elements, each parked on another kind of wait; the map's caller, a future, parks on "map". */
  weft_future *mapf;
  CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_BLOCKING, map_caller, &w, &mapf), 0);
  while (atomic_load(&w.parked) < 8) weft_test_sleep_ms(2);
  weft_test_sleep_ms(30); /* they have parked */

  char *d = dump_text(0);
  CU_ASSERT_PTR_NOT_NULL_FATAL(d);
  char addr[64];
  CU_ASSERT(strstr(d, "weft: fiber dump:") != NULL);
  CU_ASSERT(has_line(d, "parked", "sleep", "pmap element 0"));
  snprintf(addr, sizeof addr, "read fd %d", w.pipe_fd[0]);
  CU_ASSERT(has_line(d, "parked", addr, "pmap element 1"));
  snprintf(addr, sizeof addr, "mutex %p", (void *)&w.mu);
  CU_ASSERT(has_line(d, "parked", addr, "pmap element 2"));
  snprintf(addr, sizeof addr, "cond %p", (void *)&w.cond);
  CU_ASSERT(has_line(d, "parked", addr, "pmap element 3"));
  snprintf(addr, sizeof addr, "sem %p", (void *)&w.sem);
  CU_ASSERT(has_line(d, "parked", addr, "pmap element 4"));
  snprintf(addr, sizeof addr, "chan-recv %p", (void *)w.chan);
  CU_ASSERT(has_line(d, "parked", addr, "pmap element 5"));
  snprintf(addr, sizeof addr, "future %p", (void *)w.inner);
  CU_ASSERT(has_line(d, "parked", addr, "pmap element 6"));
  CU_ASSERT(has_line(d, "parked", "offload", "pmap element 7"));
  CU_ASSERT(has_line(d, "parked", "map ", "future"));
  /* The inner future itself waits on its semaphore, and says it is a future. */
  snprintf(addr, sizeof addr, "sem %p", (void *)&w.sem_for_future);
  CU_ASSERT(has_line(d, "parked", addr, "[future"));
  CU_ASSERT(strstr(d, "weft: end of fiber dump") != NULL);
  if (!strstr(d, "end of fiber dump")) printf("\n%s\n", d);
  free(d);

  /* Let everything go. */
  char b = 1;
  CU_ASSERT_EQUAL(write(w.pipe_fd[1], &b, 1), 1);
  weft_mutex_unlock(&w.mu);
  weft_mutex_lock(&w.cond_mu);
  atomic_store(&w.stop, true);
  weft_cond_broadcast(&w.cond);
  weft_mutex_unlock(&w.cond_mu);
  weft_sem_post(&w.sem);
  int v = 7;
  weft_chan_send(w.chan, &v, -1);
  weft_sem_post(&w.sem_for_future);
  atomic_store(&w.release_offload, true);
  void *r = (void *)1;
  CU_ASSERT_EQUAL(weft_future_get(mapf, -1, &r), 0);
  CU_ASSERT(r == NULL); /* the map's result: every element returned 0 */
  weft_future_free(mapf);
  weft_future_get(w.inner, -1, NULL);
  weft_future_free(w.inner);
  weft_chan_free(w.chan);
  weft_sem_destroy(&w.sem);
  weft_sem_destroy(&w.sem_for_future);
  weft_cond_destroy(&w.cond);
  close(w.pipe_fd[0]);
  close(w.pipe_fd[1]);
}

/* --- a known function in a backtrace ---------------------------------------------------------------- */

static weft_sem_t bt_sem;
static atomic_bool bt_parked;

__attribute__((noinline)) static int weft_test_known_frame(void) {
  atomic_store(&bt_parked, true);
  int rc = weft_sem_wait(&bt_sem, -1);
  __asm__ volatile("" ::: "memory"); /* no tail call: the frame stays */
  return rc;
}

static void *bt_fn(void *arg) {
  (void)arg;
  return (void *)(intptr_t)weft_test_known_frame();
}

static void test_dump_stacks(void) {
  if (!weft_test_fibers_expected()) return;
  weft_sem_init(&bt_sem, 0);
  atomic_store(&bt_parked, false);
  weft_future *f;
  CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_BLOCKING, bt_fn, NULL, &f), 0);
  while (!atomic_load(&bt_parked)) weft_test_sleep_ms(1);
  weft_test_sleep_ms(20);
  char *d = dump_text(WEFT_DUMP_STACKS);
  CU_ASSERT_PTR_NOT_NULL_FATAL(d);
  if (strstr(d, "weft: no stacks:")) {
    printf("\n    no backtraces in this build: %s", strstr(d, "no stacks:"));
  } else {
    CU_ASSERT(strstr(d, "weft_test_known_frame") != NULL);
    CU_ASSERT(strstr(d, "weft_sem_wait") != NULL);
    if (!strstr(d, "weft_test_known_frame")) printf("\n%s\n", d);
  }
  free(d);
  weft_sem_post(&bt_sem);
  weft_future_get(f, -1, NULL);
  weft_future_free(f);
  weft_sem_destroy(&bt_sem);
}

/* --- dumps while fibers come and go ------------------------------------------------------------------ */

static atomic_bool churn_stop;
static int churn_elem(void *ctx, size_t i) {
  (void)ctx;
  return weft_sleep_ns((int64_t)(i % 3) * 100000);
}

static void *churner(void *arg) {
  (void)arg;
  while (!atomic_load(&churn_stop)) weft_pmap(300, churn_elem, NULL, &blocking);
  return NULL;
}

static void *dump_on_fiber(void *arg) {
  (void)arg;
  char *d = dump_text(WEFT_DUMP_STACKS);
  bool ok = d && strstr(d, "weft: end of fiber dump");
  free(d);
  return (void *)(intptr_t)ok;
}

static void test_dump_stress(void) {
  if (!weft_test_fibers_expected()) return;
  atomic_store(&churn_stop, false);
  pthread_t t[2];
  for (int i = 0; i < 2; i++) CU_ASSERT_EQUAL_FATAL(pthread_create(&t[i], NULL, churner, NULL), 0);
  int rounds = weft_test_slow_env() ? 3 : 30;
  for (int k = 0; k < rounds; k++) {
    char *d = dump_text(k % 2 ? WEFT_DUMP_STACKS : 0);
    CU_ASSERT(d && strstr(d, "weft: end of fiber dump"));
    if (d && !strstr(d, "weft: end of fiber dump")) printf("\n  dump %d:\n%.3000s\n", k, d);
    free(d);
    /* And from a fiber: the dump goes through the offload pool. */
    weft_future *f;
    if (weft_future_start(WEFT_BLOCKING, dump_on_fiber, NULL, &f) == 0) {
      void *ok = NULL;
      CU_ASSERT_EQUAL(weft_future_get(f, -1, &ok), 0);
      CU_ASSERT(ok == (void *)1);
      weft_future_free(f);
    }
  }
  atomic_store(&churn_stop, true);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
}

static void test_dump_bad_input(void) {
  CU_ASSERT_EQUAL(weft_dump(-1, 0), -EINVAL);
  CU_ASSERT_EQUAL(weft_dump(1, 0x80), -EINVAL);
  CU_ASSERT_EQUAL(weft_get_stats(NULL), -EINVAL);
  weft_shutdown();
  char *d = dump_text(0); /* no runtime: it says so */
  CU_ASSERT(d && strstr(d, "not running"));
  free(d);
}

/* --- the dump on a signal -------------------------------------------------------------------------- */

/* The child (this program again, with WEFT_DUMP_SIGNAL set before it starts): parks fibers, sends itself
 * the signal, waits for the dump, and goes on to finish its work. */
static void *sem_waiter(void *arg) { return (void *)(intptr_t)weft_sem_wait(arg, -1); }

static int signal_child_main(void) {
  weft_sem_t s;
  weft_sem_init(&s, 0);
  weft_future *f[3];
  for (int i = 0; i < 3; i++)
    if (weft_future_start(WEFT_BLOCKING, sem_waiter, &s, &f[i]) != 0) return 2;
  weft_test_sleep_ms(50);
  raise(SIGUSR1);
  weft_test_sleep_ms(300); /* the dump thread writes meanwhile */
  for (int i = 0; i < 3; i++) weft_sem_post(&s);
  for (int i = 0; i < 3; i++) {
    weft_future_get(f[i], -1, NULL);
    weft_future_free(f[i]);
  }
  fprintf(stderr, "child: went on after the dump\n");
  return 0;
}

static char self_path[4096] = "/proc/self/exe"; /* main: argv[0], resolved */

static void exec_child(void *arg) {
  (void)arg;
  setenv("WEFT_DUMP_SIGNAL", "SIGUSR1", 1);
  setenv("WEFT_INSPECT_CHILD", "1", 1);
  /* This program by its own path: under Valgrind /proc/self/exe is Valgrind's tool. */
  execl(self_path, "test_inspect", "signal_child", (char *)NULL);
  _exit(99);
}

static void test_dump_signal(void) {
  if (!weft_test_fibers_expected() || weft_test_qemu()) return;
  char err[16384];
  int st = weft_test_child(exec_child, NULL, err, sizeof err);
  CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  CU_ASSERT(strstr(err, "weft: fiber dump:") != NULL);
  CU_ASSERT(has_line(err, "parked", "sem", "[future"));
  CU_ASSERT(strstr(err, "child: went on after the dump") != NULL);
  if (!strstr(err, "weft: fiber dump:")) printf("\n  status %#x:\n%s\n", st, err);
}

/* --- the deadlock report ------------------------------------------------------------------------------ */

static weft_mutex_t dl_m1, dl_m2;
static atomic_int dl_holding;

/* Two elements, each holding one mutex and wanting the other's: a true cycle. */
static int cycle_elem(void *ctx, size_t i) {
  (void)ctx;
  weft_mutex_t *mine = i ? &dl_m2 : &dl_m1, *theirs = i ? &dl_m1 : &dl_m2;
  weft_mutex_lock(mine);
  atomic_fetch_add(&dl_holding, 1);
  while (atomic_load(&dl_holding) < 2) weft_sleep_ns(1 * MS);
  weft_mutex_lock(theirs); /* never */
  return 0;
}

static void *cycle_thread(void *arg) {
  (void)arg;
  weft_pmap(2, cycle_elem, NULL, &blocking);
  return NULL;
}

/* Waits that something will end: sleeps, a pipe a thread writes, a CPU future, an offloaded call. */
static int dl_pipe[2];
static int quiet_elem(void *ctx, size_t i) {
  (void)ctx;
  char b;
  switch (i) {
  case 0:
    return weft_sleep_ns(1300 * MS);
  case 1:
    return weft_read(dl_pipe[0], &b, 1, -1) == 1 ? 0 : 1;
  default:
    return 0;
  }
}

static void *cpu_busy(void *arg) {
  (void)arg;
  int64_t t0 = weft_now_ns();
  volatile uint64_t x = 0;
  while (weft_now_ns() - t0 < 1300 * MS) x++;
  return NULL;
}

static void *offload_sleep(void *arg) {
  (void)arg;
  weft_test_sleep_ms(1300);
  return NULL;
}

static void *wait_cpu_future(void *arg) {
  (void)arg;
  weft_future *f;
  if (weft_future_start(WEFT_CPU, cpu_busy, NULL, &f) != 0) return NULL;
  weft_future_get(f, -1, NULL);
  weft_future_free(f);
  return NULL;
}

static void *wait_offload(void *arg) {
  (void)arg;
  weft_blocking(offload_sleep, NULL, NULL);
  return NULL;
}

static void *quiet_map(void *arg) {
  (void)arg;
  return (void *)(intptr_t)weft_pmap(2, quiet_elem, NULL, &blocking);
}

static void *late_writer(void *arg) {
  (void)arg;
  weft_test_sleep_ms(1200);
  char b = 1;
  ssize_t w = write(dl_pipe[1], &b, 1);
  (void)w;
  return NULL;
}

/* Child 0: the cycle, never broken. Child 1: fibers that a timer, a descriptor, a CPU future and an
 * offloaded call wake after 1.2-1.3 s, four times the report's 300 ms. */
static void deadlock_child(void *arg) {
  int which = (int)(intptr_t)arg;
  setenv("WEFT_DEADLOCK_MS", "300", 1);
  alarm(20);
  pthread_t t;
  if (which == 0) {
    weft_mutex_init(&dl_m1);
    weft_mutex_init(&dl_m2);
    pthread_create(&t, NULL, cycle_thread, NULL);
    weft_test_sleep_ms(1500);
    _exit(0); /* the cycle is never broken: the report must have come meanwhile */
  }
  if (pipe(dl_pipe) != 0) _exit(2);
  weft_future *a, *b, *m;
  if (weft_future_start(WEFT_BLOCKING, wait_cpu_future, NULL, &a) != 0 ||
      weft_future_start(WEFT_BLOCKING, wait_offload, NULL, &b) != 0 ||
      weft_future_start(WEFT_BLOCKING, quiet_map, NULL, &m) != 0)
    _exit(3);
  pthread_create(&t, NULL, late_writer, NULL);
  void *r = (void *)1;
  if (weft_future_get(a, -1, NULL) != 0 || weft_future_get(b, -1, NULL) != 0 ||
      weft_future_get(m, -1, &r) != 0 || r != NULL)
    _exit(4);
  pthread_join(t, NULL);
  _exit(0);
}

/* The true cycle is reported, with the dump; nothing is reported for fibers that something will wake. */
static void test_deadlock_report(void) {
  if (!weft_test_fibers_expected() || weft_test_qemu()) return;
  char err[16384];
  int st = weft_test_child(deadlock_child, (void *)(intptr_t)0, err, sizeof err);
  CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  CU_ASSERT(strstr(err, "2 fibers parked with nothing to wake them") != NULL);
  CU_ASSERT(has_line(err, "parked", "mutex", "pmap element"));
  if (!strstr(err, "parked with nothing to wake them")) printf("\n  the cycle, status %#x:\n%s\n", st, err);
  st = weft_test_child(deadlock_child, (void *)(intptr_t)1, err, sizeof err);
  CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  CU_ASSERT(strstr(err, "nothing to wake them") == NULL);
  if (strstr(err, "nothing to wake them") || !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
    printf("\n  waits that end, status %#x:\n%s\n", st, err);
}

/* --- counters ---------------------------------------------------------------------------------------- */

static int stats_elem(void *ctx, size_t i) {
  (void)ctx;
  (void)i;
  return weft_sleep_ns(60 *
                       MS); /* all in flight for longer than a look of the monitor (the peak is sampled) */
}

static void *nothing(void *arg) { return arg; }

static void test_stats_add_up(void) {
  weft_stats a, b;
  CU_ASSERT_EQUAL_FATAL(weft_get_stats(&a), 0);
  enum { N = 500, K = 20 };
  CU_ASSERT_EQUAL(weft_pmap(N, stats_elem, NULL, &blocking), 0);
  for (int k = 0; k < K; k++) CU_ASSERT_EQUAL(weft_blocking(nothing, NULL, NULL), 0);
  CU_ASSERT_EQUAL_FATAL(weft_get_stats(&b), 0);
  if (weft_test_fibers_expected()) {
    /* Every element sleeps once: a park each, and a fiber each that started and ended. */
    CU_ASSERT(b.parks - a.parks >= N);
    CU_ASSERT(b.fibers_started - a.fibers_started >= N);
    CU_ASSERT_EQUAL(b.fibers_started - a.fibers_started, b.fibers_finished - a.fibers_finished);
    CU_ASSERT(b.fibers_peak >= N / 2);
    CU_ASSERT(b.stacks_carved > 0);
    CU_ASSERT(b.stack_bytes_mapped > 0);
    CU_ASSERT(b.stack_cache_hits + b.stack_cache_misses >= b.fibers_started);
    CU_ASSERT(b.carrier_wakeups > a.carrier_wakeups);
    CU_ASSERT(b.poller_waits >= b.carrier_wakeups);
  }
  /* weft_blocking from a plain thread runs on the caller, as documented: no offloaded call counted. */
  CU_ASSERT_EQUAL(b.offload_calls, a.offload_calls);
  weft_shutdown();
  weft_stats c;
  CU_ASSERT_EQUAL(weft_get_stats(&c), 0);
  CU_ASSERT_EQUAL(c.fibers_live, 0); /* nothing left after a shutdown; the counts are kept */
  CU_ASSERT(c.fibers_started >= b.fibers_started);
}

static weft_sem_t warm_sem;
static atomic_bool warm_parked;

static void *warm_fn(void *arg) {
  (void)arg;
  atomic_store(&warm_parked, true);
  return (void *)(intptr_t)weft_sem_wait(&warm_sem, -1);
}

int main(int argc, char **argv) {
  if (argc > 0 && !realpath(argv[0], self_path))
    snprintf(self_path, sizeof self_path, "%s", "/proc/self/exe");
  if (getenv("WEFT_INSPECT_CHILD") && argc > 1 && strcmp(argv[1], "signal_child") == 0)
    return signal_child_main();
  /*
   * libunwind keeps a pipe for the process's life once it has unwound (it checks addresses through it): a
   * first dump of a parked fiber's stack before the suite counts its descriptors, so that the pipe is not
   * taken for a leak. The dump is repeated until it holds the fiber's backtrace: a fixed wait was too
   * short under Valgrind (the fiber had not parked yet, nothing was unwound, and dump_stacks then saw
   * the pipe appear).
   */
  if (weft_test_fibers_expected() && weft_sem_init(&warm_sem, 0) == 0) {
    weft_future *warm;
    if (weft_future_start(WEFT_BLOCKING, warm_fn, NULL, &warm) == 0) {
      while (!atomic_load(&warm_parked)) weft_test_sleep_ms(1);
      for (int tries = 0; tries < 500; tries++) {
        int rc = -1;
        char *d = dump_text_rc(WEFT_DUMP_STACKS, &rc);
        bool unwound = rc != 0 || (d && (strstr(d, "weft_sem_wait") || strstr(d, "weft: no stacks:")));
        free(d);
        if (unwound) break;
        weft_test_sleep_ms(10);
      }
      weft_sem_post(&warm_sem);
      weft_future_get(warm, -1, NULL);
      weft_future_free(warm);
    }
    weft_sem_destroy(&warm_sem);
  }
  weft_shutdown();
  static const weft_test tests[] = {
      {"dump_waits", test_dump_waits},     {"dump_stacks", test_dump_stacks},
      {"dump_stress", test_dump_stress},   {"dump_bad_input", test_dump_bad_input},
      {"dump_signal", test_dump_signal},   {"deadlock_report", test_deadlock_report},
      {"stats_add_up", test_stats_add_up}, {NULL, NULL},
  };
  return weft_test_run(argc, argv, "inspect", tests);
}
