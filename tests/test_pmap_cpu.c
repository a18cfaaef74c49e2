/*
 * Suite "pmap_cpu": weft_pmap of the CPU kind: every index exactly once,
 * errors chosen deterministically, bad input, concurrent callers, and calls
 * inside OpenMP parallel regions and tasks (which must not open a nested
 * team); the per-worker slices of an automatic grain, and a worker that
 * never comes; where the cost model runs a map (issue 15): a map too small
 * to pay for the team on the caller's thread, a large one on every worker,
 * an explicit grain always on the team, an inner map of a busy outer one on
 * the caller, never in a nested team.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef WEFT_HAVE_OPENMP
#include <omp.h>
#endif

#include "harness.h"

#include "api/pmap.h"
#include "cpu/cpu.h"
#include "cpu/model.h"

static const weft_pmap_opts cpu_opts = WEFT_PMAP_OPTS_INIT;

static pid_t gettid_(void) { return (pid_t)syscall(SYS_gettid); }

/* --- every index exactly once ------------------------------------------------ */

typedef struct counts {
  atomic_uchar *hits; /* per index */
  atomic_size_t calls;
} counts;

static int count_fn(void *ctx, size_t i) {
  counts *c = ctx;
  atomic_fetch_add(&c->hits[i], 1);
  atomic_fetch_add(&c->calls, 1);
  return 0;
}

/* Indices of [0, n) that did not run exactly once. */
static size_t not_once(const counts *c, size_t n) {
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += atomic_load(&c->hits[i]) != 1;
  return bad;
}

static void check_once(size_t n, const weft_pmap_opts *o) {
  counts c;
  c.hits = calloc(n ? n : 1, sizeof *c.hits);
  atomic_init(&c.calls, 0);
  CU_ASSERT_EQUAL_FATAL(weft_pmap(n, count_fn, &c, o), 0);
  CU_ASSERT_EQUAL(atomic_load(&c.calls), n);
  CU_ASSERT_EQUAL(not_once(&c, n), 0);
  free(c.hits);
}

static void test_sizes(void) {
  check_once(0, &cpu_opts);
  check_once(0, NULL);
  check_once(1, NULL);
  check_once(2, NULL);
  check_once(3, &cpu_opts);
  check_once(1000, NULL);
  check_once(1000000, NULL);
}

static void test_grains(void) {
  static const size_t grains[] = {1, 2, 7, 64, 999, 1000, 1001, 1u << 20};
  for (size_t g = 0; g < sizeof grains / sizeof grains[0]; g++) {
    weft_pmap_opts o = WEFT_PMAP_OPTS_INIT;
    o.grain = grains[g];
    check_once(1000, &o);
    check_once(1, &o);
  }
}

/* --- primes: a real result, checked against a sieve --------------------------- */

typedef struct primes {
  unsigned char *is_prime;
} primes;

static int prime_fn(void *ctx, size_t i) {
  primes *p = ctx;
  bool prime = i >= 2;
  for (size_t d = 2; d * d <= i && prime; d++)
    if (i % d == 0) prime = false;
  p->is_prime[i] = prime;
  return 0;
}

static void test_primes(void) {
  const size_t n = 200000;
  primes p = {calloc(n, 1)};
  CU_ASSERT_EQUAL_FATAL(weft_pmap(n, prime_fn, &p, NULL), 0);
  unsigned char *sieve = malloc(n);
  memset(sieve, 1, n);
  sieve[0] = sieve[1] = 0;
  for (size_t i = 2; i * i < n; i++)
    if (sieve[i])
      for (size_t j = i * i; j < n; j += i) sieve[j] = 0;
  size_t count = 0, diff = 0;
  for (size_t i = 0; i < n; i++) {
    count += sieve[i];
    diff += sieve[i] != p.is_prime[i];
  }
  CU_ASSERT_EQUAL(diff, 0);
  CU_ASSERT_EQUAL(count, 17984); /* pi(200000) */
  free(sieve);
  free(p.is_prime);
}

/* --- errors ------------------------------------------------------------------------ */

typedef struct errs {
  atomic_size_t calls;
} errs;

static int err_fn(void *ctx, size_t i) {
  errs *e = ctx;
  atomic_fetch_add(&e->calls, 1);
  if (i == 900) return 1900;
  if (i == 7) return 107;
  if (i == 3) return -3; /* negative values pass through as they are */
  if (i == 500) return 1500;
  return 0;
}

static void test_errors(void) {
  for (int rep = 0; rep < 20; rep++) {
    errs e;
    atomic_init(&e.calls, 0);
    weft_pmap_opts o = WEFT_PMAP_OPTS_INIT;
    o.grain = (size_t)rep % 5; /* automatic and several fixed grains */
    CU_ASSERT_EQUAL(weft_pmap(1000, err_fn, &e, &o), -3);
    CU_ASSERT_EQUAL(atomic_load(&e.calls), 1000); /* no element skipped after an error */
  }
  errs e;
  atomic_init(&e.calls, 0);
  CU_ASSERT_EQUAL(weft_pmap(5, err_fn, &e, NULL), -3);
  atomic_init(&e.calls, 0);
  CU_ASSERT_EQUAL(weft_pmap(3, err_fn, &e, NULL), 0);
}

static int never_fn(void *ctx, size_t i) {
  (void)i;
  atomic_fetch_add((atomic_size_t *)ctx, 1);
  return 0;
}

static void test_bad_input(void) {
  atomic_size_t calls;
  atomic_init(&calls, 0);
  CU_ASSERT_EQUAL(weft_pmap(10, NULL, NULL, NULL), -EINVAL);
  weft_pmap_opts o = WEFT_PMAP_OPTS_INIT;
  o.kind = (weft_kind)7;
  CU_ASSERT_EQUAL(weft_pmap(10, never_fn, &calls, &o), -EINVAL);
  o.kind = (weft_kind)-1;
  CU_ASSERT_EQUAL(weft_pmap(10, never_fn, &calls, &o), -EINVAL);
  o.kind = WEFT_CPU;
  o.flags = 1; /* reserved */
  CU_ASSERT_EQUAL(weft_pmap(10, never_fn, &calls, &o), -EINVAL);
  o.flags = WEFT_PMAP_EXPLAIN | 0x100u;
  CU_ASSERT_EQUAL(weft_pmap(10, never_fn, &calls, &o), -EINVAL);
  CU_ASSERT_EQUAL(weft_pmap(0, NULL, NULL, NULL), -EINVAL);
  CU_ASSERT_EQUAL(atomic_load(&calls), 0);
  /* And weft still works after. */
  check_once(100, NULL);
}

/* --- concurrent callers ------------------------------------------------------------ */

static void *caller_thread(void *arg) {
  (void)arg;
  for (int r = 0; r < 20; r++) check_once(5000, NULL);
  return NULL;
}

static void test_concurrent_callers(void) {
  pthread_t t[4];
  for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, caller_thread, NULL);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
}

/* --- nesting --------------------------------------------------------------------- */

static int inner_fn(void *ctx, size_t i) {
  (void)i;
  atomic_fetch_add((atomic_size_t *)ctx, 1);
  return 0;
}

static int outer_fn(void *ctx, size_t i) {
  (void)i;
  return weft_pmap(100, inner_fn, ctx, NULL);
}

static void test_nested(void) {
  atomic_size_t calls;
  atomic_init(&calls, 0);
  CU_ASSERT_EQUAL(weft_pmap(50, outer_fn, &calls, NULL), 0);
  CU_ASSERT_EQUAL(atomic_load(&calls), 5000);
}

#ifdef WEFT_HAVE_OPENMP
/* --- inside OpenMP: tasks in the enclosing team, never a nested team ---------------- */

typedef struct team_check {
  int level;             /* omp_get_level() of the calling region */
  int team_size;         /* its team size */
  pid_t team_tids[64];   /* the OS threads of that team */
  atomic_int bad_level;  /* elements that ran at another nesting level */
  atomic_int bad_thread; /* elements that ran on a thread outside the team */
  atomic_size_t calls;
} team_check;

static int team_fn(void *ctx, size_t i) {
  (void)i;
  team_check *t = ctx;
  atomic_fetch_add(&t->calls, 1);
  if (omp_get_level() != t->level || omp_get_team_size(t->level) != t->team_size)
    atomic_fetch_add(&t->bad_level, 1);
  pid_t me = gettid_();
  bool found = false;
  for (int k = 0; k < t->team_size; k++) found |= t->team_tids[k] == me;
  if (!found) atomic_fetch_add(&t->bad_thread, 1);
  return 0;
}

static void test_inside_parallel_region(void) {
  team_check t;
  memset(&t, 0, sizeof t);
  int rc_all = 0;
#pragma omp parallel num_threads(2) reduction(| : rc_all)
  {
#pragma omp single
    {
      t.level = omp_get_level();
      t.team_size = omp_get_num_threads();
    }
    t.team_tids[omp_get_thread_num()] = gettid_();
#pragma omp barrier
    /* Every thread of the team calls weft_pmap at once. */
    rc_all |= weft_pmap(2000, team_fn, &t, NULL);
  }
  CU_ASSERT_EQUAL(rc_all, 0);
  CU_ASSERT_EQUAL(atomic_load(&t.calls), 2 * 2000);
  CU_ASSERT_EQUAL(atomic_load(&t.bad_level), 0);
  CU_ASSERT_EQUAL(atomic_load(&t.bad_thread), 0);
}

static void test_inside_task(void) {
  team_check t;
  memset(&t, 0, sizeof t);
  int rc = -1;
#pragma omp parallel num_threads(2)
  {
    t.team_tids[omp_get_thread_num()] = gettid_();
#pragma omp barrier
#pragma omp single
    {
      t.level = omp_get_level();
      t.team_size = omp_get_num_threads();
#pragma omp task shared(rc, t)
      rc = weft_pmap(3000, team_fn, &t, NULL);
#pragma omp taskwait
    }
  }
  CU_ASSERT_EQUAL(rc, 0);
  CU_ASSERT_EQUAL(atomic_load(&t.calls), 3000);
  CU_ASSERT_EQUAL(atomic_load(&t.bad_level), 0);
  CU_ASSERT_EQUAL(atomic_load(&t.bad_thread), 0);
}

/* Outside a region, at most omp_get_max_threads() threads run the elements. */
typedef struct tids {
  pthread_mutex_t mu;
  pid_t seen[256];
  int n;
} tids;

static int tid_fn(void *ctx, size_t i) {
  (void)i;
  tids *t = ctx;
  pid_t me = gettid_();
  pthread_mutex_lock(&t->mu);
  bool found = false;
  for (int k = 0; k < t->n; k++) found |= t->seen[k] == me;
  if (!found && t->n < 256) t->seen[t->n++] = me;
  pthread_mutex_unlock(&t->mu);
  for (volatile int k = 0; k < 2000; k++) {
  }
  return 0;
}

static void test_thread_bound(void) {
  tids t = {.mu = PTHREAD_MUTEX_INITIALIZER};
  CU_ASSERT_EQUAL(weft_pmap(20000, tid_fn, &t, NULL), 0);
  CU_ASSERT(t.n >= 1);
  CU_ASSERT(t.n <= omp_get_max_threads());
}
#endif

#ifdef WEFT_HAVE_OPENMP
/*
 * An automatic-grain map is split into a slice per worker (cpu.h,
 * weft__range_split). A worker that never comes must lose nothing: inside a
 * region of two threads whose other thread is busy and never reaches a
 * scheduling point, the caller's map has two slices and one worker, and the
 * caller must steal the other slice.
 */
static void test_absent_worker(void) {
  atomic_bool release;
  atomic_init(&release, false);
  counts c;
  size_t n = 5000;
  c.hits = calloc(n, sizeof *c.hits);
  atomic_init(&c.calls, 0);
  int rc = -1, team = 0;
#pragma omp parallel num_threads(2)
  {
#pragma omp single nowait
    team = omp_get_num_threads();
    if (omp_get_thread_num() == 0) {
      rc = weft_pmap(n, count_fn, &c, NULL);
      atomic_store(&release, true);
    } else {
      while (!atomic_load(&release)) {
      }
    }
  }
  CU_ASSERT_EQUAL(rc, 0);
  CU_ASSERT_EQUAL(atomic_load(&c.calls), n);
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += atomic_load(&c.hits[i]) != 1;
  CU_ASSERT_EQUAL(bad, 0);
  free(c.hits);
  CU_ASSERT(team >= 1);
}

/* In a balanced map each worker starts with the first index of its own slice. */
typedef struct firsts {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool meet; /* the first worker waits (5 s at most) until a second has taken its first index */
  pid_t tid[8];
  size_t first[8];
  int n;
} firsts;

static int first_fn(void *ctx, size_t i) {
  firsts *f = ctx;
  pid_t me = gettid_();
  pthread_mutex_lock(&f->mu);
  bool seen = false;
  for (int k = 0; k < f->n; k++) seen |= f->tid[k] == me;
  if (!seen && f->n < 8) {
    f->tid[f->n] = me;
    f->first[f->n++] = i;
    pthread_cond_broadcast(&f->cv);
  }
  if (f->meet && !seen && f->n == 1) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 5;
    while (f->n < 2 && pthread_cond_timedwait(&f->cv, &f->mu, &until) == 0) {
    }
  }
  pthread_mutex_unlock(&f->mu);
  for (volatile int k = 0; k < 20000; k++) {
  }
  return 0;
}

static void test_slices(void) {
  if (omp_get_max_threads() != 2) return; /* the slice bounds below are for two workers */
  /*
   * Two workers, each starting at its own slice: one at 0, the other at 500
   * (a shared counter would start the second at 1, a guided one at 250).
   * The first to start waits for the second to take its first index, so a
   * worker that the machine runs late (ctest runs suites side by side on two
   * cores) still finds its slice whole instead of stolen.
   */
  bool ok = false;
  /* A call at a new site first times a few elements on the caller (the cost model): not counted. */
  firsts warm = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
  CU_ASSERT_EQUAL_FATAL(weft_pmap(1000, first_fn, &warm, NULL), 0);
  for (int attempt = 0; attempt < 3 && !ok; attempt++) {
    firsts f = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .meet = true};
    CU_ASSERT_EQUAL_FATAL(weft_pmap(1000, first_fn, &f, NULL), 0);
    ok = f.n == 2 && f.first[0] + f.first[1] == 500 && (f.first[0] == 0 || f.first[1] == 0);
  }
  CU_ASSERT(ok);
}
#endif

/* --- fork after maps only ------------------------------------------------------------ */

static void child_maps(void *arg) {
  (void)arg;
  alarm(20); /* a hang (a region on libgomp's lost threads) ends as SIGALRM, not as a stuck test */
  unsigned before = CU_get_number_of_failures();
  check_once(100000, NULL);
  weft_pmap_opts o = WEFT_PMAP_OPTS_INIT;
  o.grain = 64;
  check_once(100000, &o);
  _exit(CU_get_number_of_failures() == before ? 0 : 3);
}

/*
 * A process that has used nothing of weft but CPU maps (so weft started no
 * thread of its own), then forks: the child's maps must still run (on
 * weft's pool under libgomp, whose threads did not survive the fork). Run
 * alone (its own CTest, pmap_cpu_fork) it is the first weft call of the
 * process; within the suite it checks the same after the other tests.
 */
static void test_fork_after_maps(void) {
  if (WEFT_TEST_TSAN || WEFT_TEST_ASAN || weft_test_qemu()) {
    /* As in omp_env: a sanitizer's or qemu-user's child of a threaded process cannot start threads. */
    printf("\n    skipped under a sanitizer or qemu-user");
    return;
  }
  check_once(100000, NULL); /* a large map: the runtime's team exists now */
  char err[512];
  int st = weft_test_child(child_maps, NULL, err, sizeof err);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) printf("\n  child: status 0x%x, stderr: %s\n", st, err);
  CU_ASSERT_TRUE(WIFEXITED(st));
  CU_ASSERT_EQUAL(WEXITSTATUS(st), 0);
  check_once(1000, NULL); /* and the parent goes on */
}

/* --- where the cost model runs a map ------------------------------------------------- */

/* Where one call's elements ran: off the caller's thread, or inside a parallel region. */
typedef struct where {
  pid_t caller;
  atomic_int off_caller;
  atomic_int in_region;
} where;

/* The calling thread's id, without a system call per element (the element must stay trivial). */
static pid_t my_tid(void) {
  static __thread pid_t tid;
  if (!tid) tid = gettid_();
  return tid;
}

static int where_fn(void *ctx, size_t i) {
  (void)i;
  where *w = ctx;
  if (my_tid() != w->caller) atomic_fetch_add(&w->off_caller, 1);
#ifdef WEFT_HAVE_OPENMP
  if (omp_get_level() != 0) atomic_fetch_add(&w->in_region, 1);
#endif
  return 0;
}

/*
 * A map far too small to pay for the team runs every element on the
 * caller's thread, outside any region. Preemption can make one timed call
 * look long and send the next one to the team once (the model corrects it
 * at once), so a few calls of 50 may leave the caller; a model that always
 * forked would leave it on all 50.
 */
static void test_small_on_caller(void) {
  weft__pmap_test_reset();
  int strays = 0;
  for (int k = 0; k < 50; k++) {
    where w = {.caller = my_tid()};
    CU_ASSERT_EQUAL_FATAL(weft_pmap(8, where_fn, &w, NULL), 0);
    strays += atomic_load(&w.off_caller) + atomic_load(&w.in_region) > 0;
  }
  /*
   * Under Valgrind, which runs one thread at a time, an element that makes a
   * system call (where_fn asks for its thread id) hands Valgrind's lock to
   * the spinning OpenMP workers and waits a whole time slice for it: the
   * model measures milliseconds per element there, and forks, rightly for
   * what it measured. The calls still run (for memcheck); where they run is
   * not this environment's to judge.
   */
  if (weft_test_slow_env()) {
    printf(
        "\n    where they ran not checked: under a slow tool elements cost its scheduling (%d of 50 forked)",
        strays);
  } else {
    if (strays > 3) printf("\n  %d of 50 small maps left the caller\n", strays);
    CU_ASSERT(strays <= 3);
  }
#ifdef WEFT_TESTING
  CU_ASSERT(weft__pmap_test_count(-1) + weft__pmap_test_count(WEFT__WHY_SMALL) > 0);
#endif
}

typedef struct tidset {
  pthread_mutex_t mu;
  pid_t seen[64];
  int n;
} tidset;

static int spin_tid_fn(void *ctx, size_t i) {
  (void)i;
  tidset *t = ctx;
  pid_t me = gettid_();
  pthread_mutex_lock(&t->mu);
  bool found = false;
  for (int k = 0; k < t->n; k++) found |= t->seen[k] == me;
  if (!found && t->n < 64) t->seen[t->n++] = me;
  pthread_mutex_unlock(&t->mu);
  int64_t end = weft_now_ns() + 500000; /* 0.5 ms of the wall clock, whatever the machine */
  while (weft_now_ns() < end) {
  }
  return 0;
}

/* A large map (32 ms of work) uses every worker of the team. */
static void test_large_on_every_worker(void) {
  weft__pmap_test_reset();
  weft__team team;
  weft__cpu_team(&team);
  for (int k = 0; k < 2; k++) { /* a new site (the probe), then a known one */
    tidset t = {.mu = PTHREAD_MUTEX_INITIALIZER};
    CU_ASSERT_EQUAL_FATAL(weft_pmap(64, spin_tid_fn, &t, NULL), 0);
    if (t.n != (int)team.size) printf("\n  %d threads ran the map, the team has %u\n", t.n, team.size);
    /* Valgrind runs one thread at a time and favours the running one: a worker may get no turn. */
    if (!weft_test_valgrind()) CU_ASSERT_EQUAL(t.n, (int)team.size);
  }
}

#ifdef WEFT_HAVE_OPENMP
/* An explicit grain is never overridden: even two trivial elements run in a team. */
typedef struct team_seen {
  int want;
  atomic_int outside; /* elements that ran outside a region, or in a team of another size */
} team_seen;

static int team_seen_fn(void *ctx, size_t i) {
  (void)i;
  team_seen *t = ctx;
  if (omp_get_level() != 1 || omp_get_num_threads() != t->want) atomic_fetch_add(&t->outside, 1);
  return 0;
}

static void test_grain_not_overridden(void) {
  weft__pmap_test_reset();
  team_seen t = {.want = omp_get_max_threads()};
  if (t.want < 2) return; /* a team of one runs on the caller, as before */
  unsigned long before = weft__pmap_test_count(-1);
  for (int k = 0; k < 50; k++) {
    weft_pmap_opts o = WEFT_PMAP_OPTS_INIT;
    o.grain = 1 + (size_t)k % 3;
    CU_ASSERT_EQUAL_FATAL(weft_pmap(2, team_seen_fn, &t, &o), 0);
  }
  CU_ASSERT_EQUAL(atomic_load(&t.outside), 0);
  CU_ASSERT_EQUAL(weft__pmap_test_count(-1), before); /* the model was never asked */
}

/*
 * A map inside another map whose workers are all busy runs on the caller
 * (the element's thread), even when it is large enough to pay for a team;
 * and no map ever opens a nested team.
 */
static int inner_spin_fn(void *ctx, size_t i) {
  (void)i;
  if (omp_get_level() > 1) atomic_fetch_add((atomic_int *)ctx, 1);
  int64_t end = weft_now_ns() + 20000;
  while (weft_now_ns() < end) {
  }
  return 0;
}

static int outer_spin_fn(void *ctx, size_t i) {
  (void)i;
  return weft_pmap(64, inner_spin_fn, ctx, NULL); /* 1.3 ms of work: it would pay, alone */
}

static void test_nested_busy(void) {
  weft__pmap_test_reset();
  if (omp_get_max_threads() < 2) return;
  atomic_int nested_team; /* inner elements that ran at a nesting level above 1 */
  atomic_init(&nested_team, 0);
  unsigned long busy = weft__pmap_test_count(WEFT__WHY_BUSY);
  for (int k = 0; k < 3; k++) CU_ASSERT_EQUAL_FATAL(weft_pmap(16, outer_spin_fn, &nested_team, NULL), 0);
#ifdef WEFT_TESTING
  CU_ASSERT(weft__pmap_test_count(WEFT__WHY_BUSY) > busy); /* the decisions are counted in test builds */
#else
  (void)busy;
#endif
  CU_ASSERT_EQUAL(atomic_load(&nested_team), 0);
}
#endif

#ifdef WEFT_HAVE_OPENMP
/*
 * A site whose timed call forked because the team pays for itself forks
 * the next calls of that size without asking the model (pmap.c,
 * cache_bounds): each index still runs exactly once, the lowest failing
 * index still wins, and the cached fork is not taken where the team is of
 * another kind (inside a program's region), which asks the model again.
 */
typedef struct once_ctx {
  atomic_int ran[32];
  atomic_int in_region; /* elements that ran at a nesting level above 0 (a region of its own) */
  bool fail;            /* indices 5 and 9 fail */
} once_ctx;

static int once_fn(void *ctx, size_t i) {
  once_ctx *c = ctx;
  atomic_fetch_add(&c->ran[i], 1);
  int64_t end = weft_now_ns() + 1500; /* 48 us a map: every share is a sample of the fork cost */
  while (weft_now_ns() < end) {
  }
  if (c->fail && (i == 5 || i == 9)) return -(int)(100 + i);
  return 0;
}

static int once_call(once_ctx *c, bool fail) {
  for (int i = 0; i < 32; i++) atomic_store(&c->ran[i], 0);
  c->fail = fail;
  int rc = weft_pmap(32, once_fn, c, NULL);
  for (int i = 0; i < 32; i++) CU_ASSERT_EQUAL(atomic_load(&c->ran[i]), 1);
  return rc;
}

/*
 * The checks from the calling context. Every call fails at indices 5 and 9,
 * so each, whatever path it took, must return index 5's error; false when
 * no call was a cached fork (a decision to fork is cached only after a
 * site's first timed calls, and only while a share is short: under a slow
 * tool an element costs its clock reads, and none may be).
 */
static bool cached_forks_here(once_ctx *c, const char *context, bool in_team) {
  bool seen = false;
  for (int k = 0; k < 800 && !seen; k++) {
    unsigned long forked = weft__pmap_test_count(WEFT__PMAP_TEST_FORKED);
    CU_ASSERT_EQUAL_FATAL(once_call(c, true), -105); /* the lowest failing index wins */
    seen = weft__pmap_test_count(WEFT__PMAP_TEST_FORKED) > forked;
  }
  if (!seen) {
    printf("\n    %s: no call was a cached fork (the team never paid, or its shares were long)", context);
    return false;
  }
  /*
   * Inside a program's region the team is another kind: the model decides,
   * no cached fork. Not on a worker of weft's team, where a region opened
   * inside an element changes nothing: the worker's maps still go on its
   * deque (cpu_omp.c, steal_deque), so a cached fork is right there (this
   * check once failed now and then in that context, when the cached fork
   * had been seen, and the future ran on a worker).
   */
  if (in_team) return true;
  unsigned long forked = weft__pmap_test_count(WEFT__PMAP_TEST_FORKED);
  int rc = 0;
#pragma omp parallel num_threads(2)
#pragma omp single
  rc = once_call(c, true);
  CU_ASSERT_EQUAL(rc, -105);
  CU_ASSERT_EQUAL(weft__pmap_test_count(WEFT__PMAP_TEST_FORKED), forked);
  return true;
}

static atomic_bool cached_task_started;

static void *cached_forks_task(void *arg) {
  atomic_store(&cached_task_started, true);
  weft__pmap_test_reset(); /* this worker's own sites */
  /* The future may run on a worker of weft's team, or on the thread that joins it (a plain thread). */
  cached_forks_here(arg, "in a CPU future", weft__cpu_team_kind() == WEFT__TEAM_STEAL);
  return NULL;
}

static void test_cached_forks(void) {
#ifndef WEFT_TESTING
  printf("\n    the decisions are counted in test builds only: not checked");
  return;
#endif
  weft__pmap_test_reset();
  if (omp_get_max_threads() < 2) return;
  static once_ctx c;
  /* On a plain thread (a region, or weft's team while it lingers), then on a worker of weft's team. */
  cached_forks_here(&c, "on a plain thread", false);
  weft_future *f;
  atomic_store(&cached_task_started, false);
  CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_CPU, cached_forks_task, &c, &f), 0);
  /* Joined at once, the future would be taken back and run here: let a worker take it first. */
  for (int ms = 0; ms < 5000 && !atomic_load(&cached_task_started); ms++) weft_test_sleep_ms(1);
  CU_ASSERT_EQUAL(weft_future_get(f, -1, NULL), 0);
  weft_future_free(f);
}
#endif

#ifdef WEFT_HAVE_OPENMP
/*
 * The runtime may give a region fewer threads than weft asks for
 * (OMP_THREAD_LIMIT, OMP_DYNAMIC): every index still runs exactly once, on
 * every path of a region (a static split, an explicit grain of one chunk
 * per thread, claims from slices). The CTest pmap_cpu_thread_limit runs
 * this with OMP_THREAD_LIMIT=1 and OMP_NUM_THREADS=2, where a region of two
 * gets one thread; OMP_DYNAMIC (set here) lets the runtime choose by load.
 */
static void fewer_threads_round(size_t n) {
  counts c;
  c.hits = calloc(n, sizeof *c.hits);
  for (int how = 0; how < 3; how++) {
    for (size_t i = 0; i < n; i++) atomic_store(&c.hits[i], 0);
    atomic_init(&c.calls, 0);
    weft__range r;
    weft__range_init(&r, n, count_fn, &c, how == 1 ? (n + 1) / 2 : 0, 0);
    r.static_ok = how == 0; /* 0: the static split; 1: a grain of two chunks; 2: claims */
    weft__cpu_fork(&r, 2);
    CU_ASSERT_EQUAL(weft__range_result(&r), 0);
    size_t bad = not_once(&c, n);
    CU_ASSERT_EQUAL(bad, 0);
    if (bad) printf("\n  n = %zu, path %d: %zu indices not run exactly once", n, how, bad);
  }
  free(c.hits);
  weft_pmap_opts o = WEFT_PMAP_OPTS_INIT;
  o.grain = 1;
  check_once(n < 4 ? n : 4, &o);
}

static void test_fewer_threads(void) {
  weft__pmap_test_reset();
  for (int dyn = 0; dyn < 2; dyn++) {
    omp_set_dynamic(dyn);
    for (size_t n = 2; n <= 40; n++) fewer_threads_round(n);
    fewer_threads_round(10000);
  }
  omp_set_dynamic(0);
}
#endif

int main(int argc, char **argv) {
  static const weft_test tests[] = {
      {"sizes", test_sizes},
      {"grains", test_grains},
      {"primes", test_primes},
      {"errors", test_errors},
      {"bad_input", test_bad_input},
      {"concurrent_callers", test_concurrent_callers},
      {"nested", test_nested},
#ifdef WEFT_HAVE_OPENMP
      {"inside_parallel_region", test_inside_parallel_region},
      {"inside_task", test_inside_task},
      {"thread_bound", test_thread_bound},
      {"absent_worker", test_absent_worker},
      {"slices", test_slices},
      {"grain_not_overridden", test_grain_not_overridden},
      {"nested_busy", test_nested_busy},
      {"cached_forks", test_cached_forks},
      {"fewer_threads", test_fewer_threads},
#endif
      {"fork_after_maps", test_fork_after_maps},
      {"small_on_caller", test_small_on_caller},
      {"large_on_every_worker", test_large_on_every_worker},
      {NULL, NULL},
  };
  return weft_test_run(argc, argv, "pmap_cpu", tests);
}
