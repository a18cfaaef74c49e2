/*
 * Suite "steal": work stealing on OpenMP's threads (issue 28). The deque on
 * its own: order, capacity, an owner and thieves racing for every item and
 * for the last one, and a join taking back the job a thief is stealing (each
 * item handed out exactly once). Then CPU futures through it: recursive
 * futures from the main thread, from a CPU future, from a fiber and inside a
 * program's parallel region; a recursion deeper than a deque holds; futures
 * left in the deque of a thread that exits; a map called inside a CPU future
 * (the deque's fork); shutdown with jobs still in a deque; after fork().
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef WEFT_HAVE_OPENMP
#include <omp.h>
#endif

#include "harness.h"

#include "cpu/deque.h"

/* --- the deque ------------------------------------------------------------------------- */

/* Items are addresses in this array: item k is &slots[k]. */
#define ITEMS 20000
static char slots[ITEMS];
static atomic_uchar got[ITEMS];

static struct weft__job *item(size_t k) { return (struct weft__job *)(void *)&slots[k]; }
static size_t index_of(struct weft__job *j) { return (size_t)((char *)(void *)j - slots); }

static void test_deque_order(void) {
  static weft__deque d;
  weft__deque_init(&d);
  CU_ASSERT_PTR_NULL(weft__deque_take(&d));
  CU_ASSERT_PTR_EQUAL(weft__deque_steal(&d), WEFT__STEAL_EMPTY);
  for (size_t k = 0; k < 4; k++) CU_ASSERT_TRUE(weft__deque_push(&d, item(k)));
  CU_ASSERT_PTR_EQUAL(weft__deque_steal(&d), item(0)); /* oldest first */
  CU_ASSERT_FALSE(weft__deque_take_if(&d, item(2)));   /* not the newest */
  CU_ASSERT_TRUE(weft__deque_take_if(&d, item(3)));    /* the newest */
  CU_ASSERT_PTR_EQUAL(weft__deque_take(&d), item(2));  /* newest first */
  CU_ASSERT_PTR_EQUAL(weft__deque_take(&d), item(1));
  CU_ASSERT_PTR_NULL(weft__deque_take(&d));
  CU_ASSERT_TRUE(weft__deque_empty(&d));
  /* A marked oldest item is left where it is by the first kind of steal, taken by the second. */
  struct weft__job *marked = (struct weft__job *)((uintptr_t)item(5) | WEFT__DEQUE_MARK);
  CU_ASSERT_TRUE(weft__deque_push(&d, marked));
  CU_ASSERT_TRUE(weft__deque_push(&d, item(6)));
  CU_ASSERT_PTR_EQUAL(weft__deque_steal_from(&d, false), WEFT__STEAL_EMPTY);
  CU_ASSERT_PTR_EQUAL(weft__deque_steal(&d), marked);
  CU_ASSERT_PTR_EQUAL(weft__deque_steal_from(&d, false), item(6));
  CU_ASSERT_TRUE(weft__deque_empty(&d));
  /* Full: a push fails and changes nothing; the indices wrap round the array. */
  for (int round = 0; round < 3; round++) {
    for (size_t k = 0; k < WEFT__DEQUE_CAP; k++) CU_ASSERT_TRUE(weft__deque_push(&d, item(k)));
    CU_ASSERT_FALSE(weft__deque_push(&d, item(WEFT__DEQUE_CAP)));
    CU_ASSERT_PTR_EQUAL(weft__deque_steal(&d), item(0));
    CU_ASSERT_TRUE(weft__deque_push(&d, item(WEFT__DEQUE_CAP)));
    CU_ASSERT_PTR_EQUAL(weft__deque_take(&d), item(WEFT__DEQUE_CAP));
    size_t n = 0;
    for (struct weft__job *j; (j = weft__deque_take(&d)) != NULL; n++)
      CU_ASSERT_PTR_EQUAL(j, item(WEFT__DEQUE_CAP - 1 - n));
    CU_ASSERT_EQUAL(n, WEFT__DEQUE_CAP - 1);
  }
}

typedef struct race {
  weft__deque d;
  atomic_bool stop;
  atomic_size_t stolen;
} race;

static void claim_item(struct weft__job *j) {
  size_t k = index_of(j);
  CU_ASSERT_TRUE_FATAL(k < ITEMS);
  atomic_fetch_add_explicit(&got[k], 1, memory_order_relaxed);
}

static void *thief(void *arg) {
  race *r = arg;
  while (!atomic_load_explicit(&r->stop, memory_order_acquire)) {
    struct weft__job *j = weft__deque_steal(&r->d);
    if (j == WEFT__STEAL_EMPTY || j == WEFT__STEAL_LOST) continue;
    claim_item(j);
    atomic_fetch_add_explicit(&r->stolen, 1, memory_order_relaxed);
  }
  return NULL;
}

/*
 * The owner pushes every item, in bursts, taking some back as it goes (and
 * the last of each burst with take_if, the join's way), while three thieves
 * steal: each item is handed out exactly once. Small bursts make the race
 * for the last item (owner's take against a thief's steal) the common case.
 */
static void deque_race_round(void) {
  static race r;
  weft__deque_init(&r.d);
  atomic_init(&r.stop, false);
  atomic_init(&r.stolen, 0);
  for (size_t k = 0; k < ITEMS; k++) atomic_init(&got[k], 0);
  enum { THIEVES = 3 };
  pthread_t t[THIEVES];
  for (int i = 0; i < THIEVES; i++) CU_ASSERT_EQUAL_FATAL(pthread_create(&t[i], NULL, thief, &r), 0);
  size_t k = 0, taken = 0, burst = 1;
  while (k < ITEMS) {
    size_t b = burst < ITEMS - k ? burst : ITEMS - k;
    for (size_t i = 0; i < b; i++) CU_ASSERT_TRUE_FATAL(weft__deque_push(&r.d, item(k + i)));
    struct weft__job *last = item(k + b - 1);
    k += b;
    if (weft__deque_take_if(&r.d, last)) {
      claim_item(last);
      taken++;
    }
    if (burst % 3 == 0) {
      struct weft__job *j;
      while ((j = weft__deque_take(&r.d)) != NULL) {
        claim_item(j);
        taken++;
      }
    }
    burst = burst % 7 + 1;
  }
  struct weft__job *j;
  while ((j = weft__deque_take(&r.d)) != NULL) {
    claim_item(j);
    taken++;
  }
  atomic_store(&r.stop, true);
  for (int i = 0; i < THIEVES; i++) pthread_join(t[i], NULL);
  size_t wrong = 0;
  for (size_t i = 0; i < ITEMS; i++) wrong += atomic_load(&got[i]) != 1;
  CU_ASSERT_EQUAL(wrong, 0);
  CU_ASSERT_EQUAL(taken + atomic_load(&r.stolen), ITEMS);
}

static void test_deque_race(void) {
  for (int round = 0; round < (weft_test_slow_env() ? 3 : 20); round++) deque_race_round();
}

/* --- CPU futures on the deques ----------------------------------------------------------- */

static long fib_seq(int n) { return n < 2 ? n : fib_seq(n - 1) + fib_seq(n - 2); }

static long fib_futures(int n, int cutoff);

typedef struct fib_arg {
  int n, cutoff;
  long result;
} fib_arg;

static void *fib_task(void *p) {
  fib_arg *a = p;
  a->result = fib_futures(a->n, a->cutoff);
  return p;
}

/* The shape every divide-and-conquer code has: start one child, compute the other, join. */
static long fib_futures(int n, int cutoff) {
  if (n <= cutoff) return fib_seq(n);
  fib_arg child = {n - 1, cutoff, 0};
  weft_future *f;
  int rc = weft_future_start(WEFT_CPU, fib_task, &child, &f);
  CU_ASSERT_EQUAL_FATAL(rc, 0);
  long y = fib_futures(n - 2, cutoff);
  void *res = NULL;
  CU_ASSERT_EQUAL(weft_future_get(f, -1, &res), 0);
  CU_ASSERT_PTR_EQUAL(res, &child);
  weft_future_free(f);
  return child.result + y;
}

static int fib_n(void) { return weft_test_slow_env() ? 16 : 22; }

static void test_recursive_main(void) {
  for (int cutoff = 1; cutoff <= 10; cutoff += 3)
    CU_ASSERT_EQUAL(fib_futures(fib_n(), cutoff), fib_seq(fib_n()));
}

static void *fib_root(void *arg) {
  WEFT__UNUSED(arg);
  return (void *)(intptr_t)fib_futures(fib_n(), 2);
}

static void test_recursive_in_future(void) {
  weft_kind kinds[] = {WEFT_CPU, WEFT_BLOCKING};
  for (int k = 0; k < 2; k++) {
    weft_future *f;
    CU_ASSERT_EQUAL_FATAL(weft_future_start(kinds[k], fib_root, NULL, &f), 0);
    void *res = NULL;
    CU_ASSERT_EQUAL(weft_future_get(f, -1, &res), 0);
    CU_ASSERT_EQUAL((long)(intptr_t)res, fib_seq(fib_n()));
    weft_future_free(f);
  }
}

#ifdef WEFT_HAVE_OPENMP
/* Inside a program's own region the futures are tasks of its team (no deques): the same answer. */
static void test_recursive_in_region(void) {
  long r = 0;
#pragma omp parallel num_threads(2)
#pragma omp single
  r = fib_futures(fib_n() - 4, 3);
  CU_ASSERT_EQUAL(r, fib_seq(fib_n() - 4));
}
#endif

static void *noop_task(void *p) { return p; }

/* Deeper than a deque holds: a chain of futures each started before the previous is joined. */
static void test_deeper_than_deque(void) {
  size_t n = 3 * WEFT__DEQUE_CAP;
  weft_future **fs = calloc(n, sizeof *fs);
  static int x;
  for (size_t i = 0; i < n; i++) CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_CPU, noop_task, &x, &fs[i]), 0);
  for (size_t i = n; i-- > 0;) { /* newest first, then oldest first below */
    if (i % 2) continue;
    void *res = NULL;
    CU_ASSERT_EQUAL(weft_future_get(fs[i], -1, &res), 0);
    CU_ASSERT_PTR_EQUAL(res, &x);
  }
  for (size_t i = 0; i < n; i++) {
    if (i % 2 == 0) continue;
    void *res = NULL;
    CU_ASSERT_EQUAL(weft_future_get(fs[i], -1, &res), 0);
    CU_ASSERT_PTR_EQUAL(res, &x);
  }
  for (size_t i = 0; i < n; i++) weft_future_free(fs[i]);
  free(fs);
}

/* --- a thread that exits with jobs in its deque ------------------------------------------- */

typedef struct counted {
  atomic_int *ran;
  int spin_ms;
} counted;

static void *count_task(void *p) {
  counted *c = p;
  if (c->spin_ms) weft_test_sleep_ms(c->spin_ms);
  atomic_fetch_add(c->ran, 1);
  return p;
}

#define ORPHANS 200
typedef struct orphan_maker {
  counted c;
  weft_future *fs[ORPHANS];
} orphan_maker;

static void *make_orphans(void *arg) {
  orphan_maker *m = arg;
  for (int i = 0; i < ORPHANS; i++)
    if (weft_future_start(WEFT_CPU, count_task, &m->c, &m->fs[i]) != 0) m->fs[i] = NULL;
  return NULL; /* exits without a join: its deque still holds most of them */
}

static void test_thread_exits(void) {
  atomic_int ran;
  atomic_init(&ran, 0);
  orphan_maker m = {.c = {&ran, 0}};
  pthread_t t;
  CU_ASSERT_EQUAL_FATAL(pthread_create(&t, NULL, make_orphans, &m), 0);
  pthread_join(t, NULL);
  for (int i = 0; i < ORPHANS; i++) {
    CU_ASSERT_PTR_NOT_NULL_FATAL(m.fs[i]);
    CU_ASSERT_EQUAL(weft_future_get(m.fs[i], -1, NULL), 0); /* another thread's: a worker must run it */
    weft_future_free(m.fs[i]);
  }
  CU_ASSERT_EQUAL(atomic_load(&ran), ORPHANS);
}

/* --- a map inside a CPU future: the deque's fork ------------------------------------------ */

typedef struct map_arg {
  size_t n;
  atomic_uchar *hit;
  atomic_int bad;
} map_arg;

static int hit_one(void *ctx, size_t i) {
  map_arg *m = ctx;
  if (i >= m->n)
    atomic_fetch_add(&m->bad, 1);
  else
    atomic_fetch_add_explicit(&m->hit[i], 1, memory_order_relaxed);
#ifdef WEFT_HAVE_OPENMP
  if (omp_get_thread_num() < 0) atomic_fetch_add(&m->bad, 1);
#endif
  return 0;
}

static void *map_in_future(void *arg) {
  map_arg *m = arg;
  static const size_t grains[] = {0, 1, 7, 64};
  for (size_t g = 0; g < 4; g++) {
    memset(m->hit, 0, m->n);
    weft_pmap_opts o = {.kind = WEFT_CPU, .grain = grains[g]};
    if (weft_pmap(m->n, hit_one, m, &o) != 0) atomic_fetch_add(&m->bad, 1);
    for (size_t i = 0; i < m->n; i++)
      if (atomic_load(&m->hit[i]) != 1) atomic_fetch_add(&m->bad, 1);
  }
  return NULL;
}

static void test_map_in_future(void) {
  static const size_t ns[] = {1, 2, 3, 100, 10000};
  for (size_t k = 0; k < 5; k++) {
    map_arg m[3]; /* three at once, so that maps meet other futures' jobs */
    weft_future *f[3];
    for (int i = 0; i < 3; i++) {
      m[i] = (map_arg){.n = ns[k], .hit = calloc(ns[k], 1)};
      atomic_init(&m[i].bad, 0);
      CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_CPU, map_in_future, &m[i], &f[i]), 0);
    }
    for (int i = 0; i < 3; i++) {
      CU_ASSERT_EQUAL(weft_future_get(f[i], -1, NULL), 0);
      weft_future_free(f[i]);
      CU_ASSERT_EQUAL(atomic_load(&m[i].bad), 0);
      free(m[i].hit);
    }
  }
}

/* --- shutdown with jobs still queued in a deque ------------------------------------------- */

static void test_shutdown_drains(void) {
  atomic_int ran;
  atomic_init(&ran, 0);
  counted c = {&ran, 1};
  enum { N = 50 };
  weft_future *fs[N];
  for (int i = 0; i < N; i++) CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_CPU, count_task, &c, &fs[i]), 0);
  weft_shutdown(); /* waits for every job, those in the caller's own deque too */
  CU_ASSERT_EQUAL(atomic_load(&ran), N);
  for (int i = 0; i < N; i++) {
    CU_ASSERT_TRUE(weft_future_done(fs[i]));
    weft_future_free(fs[i]);
  }
}

/* --- after fork() ---------------------------------------------------------------------- */

static void fib_in_child(void *arg) {
  WEFT__UNUSED(arg);
  if (fib_futures(16, 4) != fib_seq(16)) _exit(3);
}

static void test_after_fork(void) {
  if (!weft_test_can_fork()) return;
  CU_ASSERT_EQUAL(fib_futures(16, 4), fib_seq(16)); /* this thread's deque exists, and the team */
  /*
   * The team's shared queue may still hold jobs of futures that their getter
   * claimed and ran (a worker drops them when it comes to them): the child,
   * where no worker is left, would drop them with the queue and Valgrind would
   * count them lost in the child. Stopping first lets the workers drop them.
   */
  weft_shutdown();
  char err[256] = "";
  CU_ASSERT_EQUAL(weft_test_child(fib_in_child, NULL, err, sizeof err), 0);
}

int main(int argc, char **argv) {
  static const weft_test tests[] = {
      {"deque_order", test_deque_order},
      {"deque_race", test_deque_race},
      {"recursive_main", test_recursive_main},
      {"recursive_in_future", test_recursive_in_future},
#ifdef WEFT_HAVE_OPENMP
      {"recursive_in_region", test_recursive_in_region},
#endif
      {"deeper_than_deque", test_deeper_than_deque},
      {"thread_exits", test_thread_exits},
      {"map_in_future", test_map_in_future},
      {"shutdown_drains", test_shutdown_drains},
      {"after_fork", test_after_fork},
      {NULL, NULL},
  };
  return weft_test_run(argc, argv, "steal", tests);
}
