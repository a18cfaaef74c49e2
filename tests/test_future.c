/*
 * Suite "future": futures of both kinds: they run asynchronously, deliver
 * their result to any number of getters, honour deadlines, cancellation and
 * free at any time, and reject bad input. The same tests run with fibers and
 * on the fallback (WEFT_FIBERS=0).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#ifdef WEFT_HAVE_OPENMP
#include <omp.h>
#endif

#include "harness.h"

#include <unistd.h>

static const weft_kind kinds[] = {WEFT_CPU, WEFT_BLOCKING};

/* --- asynchronous start ------------------------------------------------------------ */

static void *wait_flag(void *arg) {
  atomic_int *flag = arg;
  while (!atomic_load(flag)) weft_test_sleep_ms(1);
  return (void *)(intptr_t)42;
}

static void test_async_start(void) {
  for (int k = 0; k < 2; k++) {
    atomic_int flag;
    atomic_init(&flag, 0);
    weft_future *f = NULL;
    CU_ASSERT_EQUAL_FATAL(weft_future_start(kinds[k], wait_flag, &flag, &f), 0);
    /* fn cannot have run inside start: it would never have returned. */
    CU_ASSERT_FALSE(weft_future_done(f));
    atomic_store(&flag, 1);
    void *r = NULL;
    CU_ASSERT_EQUAL(weft_future_get(f, -1, &r), 0);
    CU_ASSERT_EQUAL((intptr_t)r, 42);
    CU_ASSERT_TRUE(weft_future_done(f));
    /* A result can be read again, and without a place to put it. */
    r = NULL;
    CU_ASSERT_EQUAL(weft_future_get(f, 0, &r), 0);
    CU_ASSERT_EQUAL((intptr_t)r, 42);
    CU_ASSERT_EQUAL(weft_future_get(f, -1, NULL), 0);
    weft_future_free(f);
  }
}

/* The runner finishes the future without the getter's help: it runs by itself. */
static void test_runs_without_get(void) {
  for (int k = 0; k < 2; k++) {
    atomic_int flag;
    atomic_init(&flag, 1);
    weft_future *f;
    CU_ASSERT_EQUAL_FATAL(weft_future_start(kinds[k], wait_flag, &flag, &f), 0);
    for (int i = 0; i < 5000 && !weft_future_done(f); i++) weft_test_sleep_ms(1);
    CU_ASSERT_TRUE(weft_future_done(f));
    weft_future_free(f);
  }
}

/* --- deadlines ---------------------------------------------------------------------- */

static void *sleep_200ms(void *arg) {
  (void)arg;
  weft_sleep_ns(200 * 1000000LL);
  return (void *)(intptr_t)7;
}

static void test_deadline(void) {
  for (int k = 0; k < 2; k++) {
    weft_future *f;
    CU_ASSERT_EQUAL_FATAL(weft_future_start(kinds[k], sleep_200ms, NULL, &f), 0);
    void *r = NULL;
    int64_t t0 = weft_now_ns();
    CU_ASSERT_EQUAL(weft_future_get(f, t0 + 10 * 1000000LL, &r), -ETIMEDOUT);
    CU_ASSERT(weft_now_ns() >= t0 + 10 * 1000000LL);
    CU_ASSERT_PTR_NULL(r);
    CU_ASSERT_EQUAL(weft_future_get(f, 0, &r), -ETIMEDOUT);
    CU_ASSERT_EQUAL(weft_future_get(f, -1, &r), 0);
    CU_ASSERT_EQUAL((intptr_t)r, 7);
    weft_future_free(f);
  }
}

/* --- cancellation ------------------------------------------------------------------- */

typedef struct gate {
  atomic_int open;
  atomic_int entered;
  atomic_int ran;
} gate;

static void *gate_fn(void *arg) {
  gate *g = arg;
  atomic_fetch_add(&g->entered, 1);
  while (!atomic_load(&g->open)) weft_test_sleep_ms(1);
  return NULL;
}

static void *mark_fn(void *arg) {
  atomic_fetch_add(&((gate *)arg)->ran, 1);
  return NULL;
}

/* Occupy every CPU worker so that a new CPU future stays queued. */
static weft_future **block_workers(gate *g, int *nout) {
  int n = 64;
  weft_future **b = calloc((size_t)n, sizeof *b);
  for (int i = 0; i < n; i++) CU_ASSERT_EQUAL(weft_future_start(WEFT_CPU, gate_fn, g, &b[i]), 0);
  *nout = n;
  return b;
}

static void test_cancel_pending(void) {
  gate g;
  memset(&g, 0, sizeof g);
  int nb;
  weft_future **b = block_workers(&g, &nb);
  /* Wait until the workers are busy; 64 blockers are more than there are workers. */
  while (atomic_load(&g.entered) == 0) weft_test_sleep_ms(1);
  weft_future *victim;
  CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_CPU, mark_fn, &g, &victim), 0);
  CU_ASSERT_EQUAL(weft_future_cancel(victim), 0);
  CU_ASSERT_TRUE(weft_future_done(victim));
  CU_ASSERT_EQUAL(weft_future_get(victim, -1, NULL), -ECANCELED);
  CU_ASSERT_EQUAL(weft_future_cancel(victim), -EALREADY);
  atomic_store(&g.open, 1);
  for (int i = 0; i < nb; i++) {
    CU_ASSERT_EQUAL(weft_future_get(b[i], -1, NULL), 0);
    weft_future_free(b[i]);
  }
  free(b);
  weft_shutdown(); /* every task has run, the cancelled one too */
  CU_ASSERT_EQUAL(atomic_load(&g.ran), 0);
  weft_future_free(victim);
}

static void *cancel_aware(void *arg) {
  gate *g = arg;
  atomic_fetch_add(&g->entered, 1);
  while (!weft_cancelled()) weft_test_sleep_ms(1);
  /* Once cancelled, weft's blocking calls say so. */
  int rc = weft_sleep_ns(1000000);
  return (void *)(intptr_t)(rc == -ECANCELED ? 1 : 2);
}

static void test_cancel_running(void) {
  for (int k = 0; k < 2; k++) {
    gate g;
    memset(&g, 0, sizeof g);
    weft_future *f;
    CU_ASSERT_EQUAL_FATAL(weft_future_start(kinds[k], cancel_aware, &g, &f), 0);
    while (atomic_load(&g.entered) == 0) weft_test_sleep_ms(1);
    CU_ASSERT_EQUAL(weft_future_cancel(f), -EBUSY);
    void *r = NULL;
    CU_ASSERT_EQUAL(weft_future_get(f, -1, &r), 0);
    CU_ASSERT_EQUAL((intptr_t)r, 1);
    CU_ASSERT_EQUAL(weft_future_cancel(f), -EALREADY);
    weft_future_free(f);
  }
}

/* A cancelled fiber parked in weft_sleep_ns wakes at once with -ECANCELED. */
static void *long_sleeper(void *arg) {
  gate *g = arg;
  atomic_fetch_add(&g->entered, 1);
  int rc = weft_sleep_ns(60LL * 1000000000);
  return (void *)(intptr_t)rc;
}

static void test_cancel_wakes_sleep(void) {
  for (int k = 0; k < 2; k++) {
    gate g;
    memset(&g, 0, sizeof g);
    weft_future *f;
    CU_ASSERT_EQUAL_FATAL(weft_future_start(kinds[k], long_sleeper, &g, &f), 0);
    while (atomic_load(&g.entered) == 0) weft_test_sleep_ms(1);
    weft_test_sleep_ms(5);
    CU_ASSERT_EQUAL(weft_future_cancel(f), -EBUSY);
    void *r = NULL;
    CU_ASSERT_EQUAL(weft_future_get(f, -1, &r), 0);
    CU_ASSERT_EQUAL((intptr_t)r, -ECANCELED);
    weft_future_free(f);
  }
}

/* --- free at any time ------------------------------------------------------------------ */

static void test_free_while_running(void) {
  for (int k = 0; k < 2; k++) {
    gate g;
    memset(&g, 0, sizeof g);
    weft_future *f;
    CU_ASSERT_EQUAL_FATAL(weft_future_start(kinds[k], gate_fn, &g, &f), 0);
    while (atomic_load(&g.entered) == 0) weft_test_sleep_ms(1);
    weft_future_free(f); /* detached: it finishes on its own */
    atomic_store(&g.open, 1);
    weft_shutdown(); /* waits for it; the harness then checks nothing leaked */
  }
}

static void test_free_before_start(void) {
  gate g;
  memset(&g, 0, sizeof g);
  int nb;
  weft_future **b = block_workers(&g, &nb);
  while (atomic_load(&g.entered) == 0) weft_test_sleep_ms(1);
  weft_future *victim;
  CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_CPU, mark_fn, &g, &victim), 0);
  weft_future_free(victim);
  atomic_store(&g.open, 1);
  for (int i = 0; i < nb; i++) weft_future_free(b[i]);
  free(b);
  weft_shutdown();
  CU_ASSERT_EQUAL(atomic_load(&g.ran), 0);
}

/* --- many at once, many getters ---------------------------------------------------------- */

static void *twice(void *arg) { return (void *)((intptr_t)arg * 2); }

static void test_many(void) {
  for (int k = 0; k < 2; k++) {
    enum { N = 10000 };
    weft_future **fs = calloc(N, sizeof *fs);
    for (intptr_t i = 0; i < N; i++)
      CU_ASSERT_EQUAL_FATAL(weft_future_start(kinds[k], twice, (void *)i, &fs[i]), 0);
    size_t bad = 0;
    for (intptr_t i = N - 1; i >= 0; i--) {
      void *r;
      if (weft_future_get(fs[i], -1, &r) != 0 || (intptr_t)r != 2 * i) bad++;
      weft_future_free(fs[i]);
    }
    CU_ASSERT_EQUAL(bad, 0);
    free(fs);
  }
}

typedef struct getter_arg {
  weft_future *f;
  atomic_int ok;
} getter_arg;

static void *getter(void *arg) {
  getter_arg *a = arg;
  void *r;
  if (weft_future_get(a->f, -1, &r) == 0 && (intptr_t)r == 42) atomic_fetch_add(&a->ok, 1);
  return NULL;
}

static void test_many_getters(void) {
  for (int k = 0; k < 2; k++) {
    atomic_int flag;
    atomic_init(&flag, 0);
    getter_arg a;
    atomic_init(&a.ok, 0);
    CU_ASSERT_EQUAL_FATAL(weft_future_start(kinds[k], wait_flag, &flag, &a.f), 0);
    pthread_t t[6];
    for (int i = 0; i < 6; i++) pthread_create(&t[i], NULL, getter, &a);
    weft_test_sleep_ms(20);
    atomic_store(&flag, 1);
    for (int i = 0; i < 6; i++) pthread_join(t[i], NULL);
    CU_ASSERT_EQUAL(atomic_load(&a.ok), 6);
    weft_future_free(a.f);
  }
}

/* --- futures waiting on futures (both kinds, both ways) -------------------------------- */

static void *inner_future(void *arg) {
  weft_kind kind = (weft_kind)(intptr_t)arg;
  weft_future *f;
  if (weft_future_start(kind, twice, (void *)21, &f) != 0) return NULL;
  void *r = NULL;
  weft_future_get(f, -1, &r);
  weft_future_free(f);
  return r;
}

static void test_nested_waits(void) {
  for (int outer = 0; outer < 2; outer++)
    for (int inner = 0; inner < 2; inner++) {
      weft_future *f;
      CU_ASSERT_EQUAL_FATAL(weft_future_start(kinds[outer], inner_future, (void *)(intptr_t)kinds[inner], &f),
                            0);
      void *r = NULL;
      CU_ASSERT_EQUAL(weft_future_get(f, -1, &r), 0);
      CU_ASSERT_EQUAL((intptr_t)r, 42);
      weft_future_free(f);
    }
}

#ifdef WEFT_HAVE_OPENMP
static void test_inside_parallel_region(void) {
  atomic_int ok;
  atomic_init(&ok, 0);
#pragma omp parallel num_threads(2)
  {
    for (int k = 0; k < 2; k++) {
      weft_future *f;
      if (weft_future_start(kinds[k], twice, (void *)(intptr_t)(omp_get_thread_num() + 1), &f) == 0) {
        void *r;
        if (weft_future_get(f, -1, &r) == 0 && (intptr_t)r == 2 * (omp_get_thread_num() + 1))
          atomic_fetch_add(&ok, 1);
        weft_future_free(f);
      }
    }
  }
  CU_ASSERT_EQUAL(atomic_load(&ok), 4);
}
#endif

/* --- bad input ------------------------------------------------------------------------ */

static void test_bad_input(void) {
  weft_future *f = (weft_future *)0x1;
  CU_ASSERT_EQUAL(weft_future_start(WEFT_CPU, NULL, NULL, &f), -EINVAL);
  CU_ASSERT_EQUAL(f, (weft_future *)0x1); /* untouched on error */
  CU_ASSERT_EQUAL(weft_future_start(WEFT_CPU, twice, NULL, NULL), -EINVAL);
  CU_ASSERT_EQUAL(weft_future_start((weft_kind)9, twice, NULL, &f), -EINVAL);
  CU_ASSERT_EQUAL(weft_future_get(NULL, -1, NULL), -EINVAL);
  CU_ASSERT_EQUAL(weft_future_cancel(NULL), -EINVAL);
  CU_ASSERT_FALSE(weft_future_done(NULL));
  weft_future_free(NULL);
  CU_ASSERT_EQUAL(weft_future_start(WEFT_CPU, twice, (void *)1, &f), 0);
  CU_ASSERT_EQUAL(weft_future_get(f, -2, NULL), -EINVAL);
  CU_ASSERT_EQUAL(weft_future_get(f, INT64_MIN, NULL), -EINVAL);
  void *r;
  CU_ASSERT_EQUAL(weft_future_get(f, -1, &r), 0);
  CU_ASSERT_EQUAL((intptr_t)r, 2);
  weft_future_free(f);
}

#ifdef WEFT_TESTING
static void double_free_child(void *arg) {
  (void)arg;
  weft_future *f;
  weft_future_start(WEFT_CPU, twice, NULL, &f);
  weft_future_get(f, -1, NULL);
  weft_future_free(f);
  weft_future_free(f);
}

static void test_double_free_caught(void) {
  if (weft_test_qemu()) { /* the suite's earlier tests started threads */
    printf("\n    skipped: qemu-user cannot fork a multithreaded guest");
    return;
  }
  char err[512];
  int st = weft_test_child(double_free_child, NULL, err, sizeof err);
  CU_ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "weft_future_free"));
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "freed twice"));
}
#endif

/*
 * fork() while another thread starts and frees futures: the child must be
 * able to start one. (A bug found by the signals suite's fork_busy: the
 * debug registry's mutex, taken by a future being freed on a carrier at the
 * moment of the fork, stayed held in the child, whose first future hung.)
 */
static atomic_bool churn_stop;
static void *churn_thread(void *arg) {
  (void)arg;
  while (!atomic_load(&churn_stop)) {
    weft_future *f[8];
    int n = 0;
    for (int i = 0; i < 8; i++)
      if (weft_future_start(i % 2 ? WEFT_BLOCKING : WEFT_CPU, twice, (void *)1, &f[n]) == 0) n++;
    while (n > 0) weft_future_free(f[--n]);
  }
  return NULL;
}

static void churn_child(void *arg) {
  (void)arg;
  alarm(20); /* a hang dies of SIGALRM instead */
  weft_future *f;
  void *r = NULL;
  if (weft_future_start(WEFT_CPU, twice, (void *)1, &f) != 0) _exit(2);
  if (weft_future_get(f, -1, &r) != 0 || r != (void *)2) _exit(3);
  weft_future_free(f);
  _exit(0);
}

static void test_fork_while_churning(void) {
  if (weft_test_qemu() || weft_test_slow_env() || WEFT_TEST_ASAN) {
    /* qemu-user cannot fork a threaded guest; TSan refuses threads in such a child; GCC's ASan allocator is
     * not fork-safe (docs/reliability.md). */
    printf("\n    skipped: this configuration cannot fork a busy threaded process");
    return;
  }
  atomic_store(&churn_stop, false);
  pthread_t t;
  CU_ASSERT_EQUAL_FATAL(pthread_create(&t, NULL, churn_thread, NULL), 0);
  int bad = 0;
  /* The window is a few instructions wide: each fork hits it about once in a hundred. */
  for (int k = 0; k < 300 && bad < 3; k++) {
    char err[512];
    int st = weft_test_child(churn_child, NULL, err, sizeof err);
    if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
      bad++;
      printf("\n    child %d: status %#x %s", k, st, err);
    }
  }
  atomic_store(&churn_stop, true);
  pthread_join(t, NULL);
  CU_ASSERT_EQUAL(bad, 0);
}

int main(int argc, char **argv) {
  static const weft_test tests[] = {
      {"async_start", test_async_start},
      {"runs_without_get", test_runs_without_get},
      {"deadline", test_deadline},
      {"cancel_pending", test_cancel_pending},
      {"cancel_running", test_cancel_running},
      {"cancel_wakes_sleep", test_cancel_wakes_sleep},
      {"free_while_running", test_free_while_running},
      {"free_before_start", test_free_before_start},
      {"many", test_many},
      {"many_getters", test_many_getters},
      {"nested_waits", test_nested_waits},
#ifdef WEFT_HAVE_OPENMP
      {"inside_parallel_region", test_inside_parallel_region},
#endif
      {"bad_input", test_bad_input},
      {"fork_while_churning", test_fork_while_churning},
#ifdef WEFT_TESTING
      {"double_free_caught", test_double_free_caught},
#endif
      {NULL, NULL},
  };
  return weft_test_run(argc, argv, "future", tests);
}
