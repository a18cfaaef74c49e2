/*
 * Suite "scale": fibers by the hundred thousand, seen through the public API
 * and the allocator's counters (no times are asserted): every element of a
 * big blocking map in flight at once, on one carrier and on all; the
 * spawning of a map spread over the carriers whoever calls it (a plain
 * thread, a fiber, an OpenMP task); memory given back after a burst; a
 * million fibers under the default limits, in a child. The overflow of a
 * reused stack is in the stack suite.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef WEFT_HAVE_OPENMP
#include <omp.h>
#endif

#include "fiber/fiber.h"
#include "fiber/stack.h"
#include "harness.h"

#define MS 1000000LL

static const weft_pmap_opts blocking = {WEFT_BLOCKING, 0, 0, 0};

static void set_carriers(unsigned n) {
  weft_shutdown();
  weft_config c;
  weft_config_init(&c);
  c.carriers = n;
  CU_ASSERT_EQUAL(weft_configure(&c), 0);
}

/* A big map, scaled down where everything is slow (Valgrind, TSan, qemu-user). */
static size_t big_n(void) { return weft_test_slow_env() ? 2000 : 100000; }

static long rss_kib(void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long v = -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "VmRSS: %ld kB", &v) == 1) break;
  fclose(f);
  return v;
}

/* --- every element in flight before the latch opens --------------------------------------------- */

typedef struct latch_map {
  weft_sem_t latch;
  atomic_size_t in_flight;
  atomic_size_t done;
  size_t n;
  int rc;
} latch_map;

static int latch_fn(void *ctx, size_t i) {
  (void)i;
  latch_map *m = ctx;
  atomic_fetch_add(&m->in_flight, 1);
  int rc = weft_sem_wait(&m->latch, -1);
  atomic_fetch_add(&m->done, 1);
  return rc;
}

static void *latch_caller(void *arg) {
  latch_map *m = arg;
  m->rc = weft_pmap(m->n, latch_fn, m, &blocking);
  return NULL;
}

/*
 * Start a map of n elements that wait on a semaphore, on a thread of its
 * own, and wait until every element is in flight. Returns whether they all
 * got there: a map that held some elements back until others finished never
 * would (the test gives up after a minute).
 */
static bool latch_fill(latch_map *m, size_t n, pthread_t *t) {
  memset(m, 0, sizeof *m);
  m->n = n;
  CU_ASSERT_EQUAL_FATAL(weft_sem_init(&m->latch, 0), 0);
  CU_ASSERT_EQUAL_FATAL(pthread_create(t, NULL, latch_caller, m), 0);
  int64_t give_up = weft_now_ns() + 60000 * MS;
  while (atomic_load(&m->in_flight) < n && weft_now_ns() < give_up) weft_test_sleep_ms(5);
  size_t seen = atomic_load(&m->in_flight);
  CU_ASSERT_EQUAL(seen, n);
  CU_ASSERT_EQUAL(atomic_load(&m->done), 0);
  if (seen != n) printf("\n  %zu of %zu elements in flight after a minute", seen, n);
  return seen == n;
}

/* Open the latch and wait for the map to return. */
static void latch_open(latch_map *m, pthread_t t) {
  for (size_t i = 0; i < m->n; i++) weft_sem_post(&m->latch);
  pthread_join(t, NULL);
  CU_ASSERT_EQUAL(m->rc, 0);
  CU_ASSERT_EQUAL(atomic_load(&m->done), m->n);
  weft_sem_destroy(&m->latch);
}

/* The map can finish only if every element is in flight at the same time. */
static void check_all_in_flight(unsigned carriers) {
  set_carriers(carriers);
  latch_map m;
  pthread_t t;
  if (!latch_fill(&m, big_n(), &t)) printf(" (%u carriers)", carriers);
  latch_open(&m, t);
}

static void test_all_in_flight_one_carrier(void) {
  if (!weft_test_fibers_expected()) return;
  check_all_in_flight(1);
  set_carriers(0);
}

static void test_all_in_flight_all_carriers(void) {
  if (!weft_test_fibers_expected()) return;
  check_all_in_flight(0);
}

/* --- spawning spread over the carriers ------------------------------------------------------------ */

typedef struct spread {
  atomic_size_t per_carrier[64];
} spread;

static int spread_fn(void *ctx, size_t i) {
  (void)i;
  spread *s = ctx;
  unsigned id = weft__fiber_carrier_id();
  if (id < 64) atomic_fetch_add(&s->per_carrier[id], 1);
  return weft_sleep_ns(5 * MS); /* parked: each element on a fiber of its own, all in flight */
}

static unsigned carriers_used(const spread *s) {
  unsigned used = 0;
  for (int i = 0; i < 64; i++) used += atomic_load(&s->per_carrier[i]) > 0;
  return used;
}

static int spread_map(spread *s) { return weft_pmap(256 * weft_test_cpus(), spread_fn, s, &blocking); }

static void *spread_on_fiber(void *arg) { return (void *)(intptr_t)spread_map(arg); }

enum { FROM_THREAD, FROM_FIBER, FROM_TASK };
static const char *const from_names[] = {"a plain thread", "a fiber", "an OpenMP task"};

/* One map started from `from`; the number of carriers its elements ran on (0 on an error). */
static unsigned spread_once(int from) {
  spread s;
  memset(&s, 0, sizeof s);
  int rc = -1;
  if (from == FROM_THREAD) {
    rc = spread_map(&s);
  } else if (from == FROM_FIBER) {
    /* A blocking future: the caller parks, its carrier joins in. */
    weft_future *f;
    if (weft_future_start(WEFT_BLOCKING, spread_on_fiber, &s, &f) != 0) return 0;
    void *r = (void *)1;
    if (weft_future_get(f, -1, &r) == 0) rc = (int)(intptr_t)r;
    weft_future_free(f);
  } else {
#ifdef WEFT_HAVE_OPENMP
#pragma omp parallel num_threads(2)
#pragma omp single
#pragma omp task shared(s, rc)
    rc = spread_map(&s);
#endif
  }
  CU_ASSERT_EQUAL(rc, 0);
  return rc == 0 ? carriers_used(&s) : 0;
}

/*
 * Each way of calling spreads the elements over the carriers. A carrier
 * that the kernel does not run for a few milliseconds (another process on
 * its CPU) has its share taken by the others, rightly, so one map alone can
 * end up on one carrier on a loaded machine (CI once saw five such maps in a
 * row). So each way tries again until a map spreads, for up to 30 s: a wait
 * for a state, which a map that starts everything on one carrier never
 * reaches.
 */
static void test_spread_from_everywhere(void) {
  if (!weft_test_fibers_expected() || weft_test_cpus() < 2) return;
  int ways = 2;
#ifdef WEFT_HAVE_OPENMP
  ways = 3;
#endif
  for (int from = 0; from < ways; from++) {
    unsigned best = 0, tries = 0;
    int64_t give_up = weft_now_ns() + 30000 * MS;
    while (best < 2 && (tries < 5 || weft_now_ns() < give_up)) {
      unsigned used = spread_once(from);
      tries++;
      if (used > best) best = used;
    }
    CU_ASSERT(best > 1);
    if (best <= 1)
      printf("\n  maps started from %s ran on %u carrier(s), %u times in 30 s", from_names[from], best,
             tries);
  }
}

/* --- memory back after a burst ------------------------------------------------------------------- */

static int warm_fn(void *ctx, size_t i) {
  (void)ctx;
  (void)i;
  return weft_sleep_ns(MS);
}

/*
 * Wait, for up to a minute, until the idle carriers have trimmed the pool
 * down to its high-water mark and have no chunk left to unmap. Returns
 * whether they did. A wait for a state, not a time: a trim that costs a
 * page-table walk per stack runs long on a loaded machine, and one that
 * never comes fails here.
 */
static bool pool_trimmed(weft__stack_stats *st) {
  int64_t give_up = weft_now_ns() + 60000 * MS;
  for (;;) {
    weft__stack_get_stats(st);
    if ((st->pooled_dirty <= st->pool_max && weft__stack_excess() == 0) || weft_now_ns() >= give_up)
      return st->pooled_dirty <= st->pool_max;
    weft_test_sleep_ms(10);
  }
}

/*
 * After a burst of 100,000 fibers, all in flight at once (each has touched
 * at least a page of its stack), the idle carriers give the memory of their
 * stacks back: the growth of RSS is at most what the allocator keeps on
 * purpose (the pool's high-water mark and the carriers' caches, a page or
 * two each, plus its records), documented in fiber/stack.c as
 * (pool_max + carriers x cache_max) stacks: bounded here by 32 MiB against
 * the ~400 MiB the burst touched. The baseline is taken once what earlier
 * tests left has been trimmed too.
 */
static void test_memory_returns(void) {
  if (!weft_test_fibers_expected() || weft_test_slow_env() || WEFT_TEST_ASAN) return;
  CU_ASSERT_EQUAL_FATAL(weft_pmap(64, warm_fn, NULL, &blocking), 0); /* the runtime, its carriers */
  weft__stack_stats st;
  CU_ASSERT(pool_trimmed(&st));
  uint64_t trimmed_before = st.trimmed;
  long before = rss_kib();
  latch_map m;
  pthread_t t;
  bool all = latch_fill(&m, big_n(), &t);
  long peak = rss_kib();
  latch_open(&m, t);
  CU_ASSERT(pool_trimmed(&st));
  long after = rss_kib();
  CU_ASSERT(st.trimmed > trimmed_before);
  if (!(st.pooled_dirty <= st.pool_max))
    printf("\n  %zu dirty stacks pooled a minute after the burst (the mark is %zu)", st.pooled_dirty,
           st.pool_max);
  if (all && before > 0 && after > 0) {
    CU_ASSERT(peak - before > 100 * 1024); /* the burst did touch its stacks */
    CU_ASSERT(after - before < 32 * 1024);
    if (peak - before <= 100 * 1024 || after - before >= 32 * 1024)
      printf("\n  RSS %ld KiB before, %ld with the burst in flight, %ld once trimmed", before, peak, after);
  }
}

/* --- a million fibers, under the default limits -------------------------------------------------- */

static atomic_size_t million_done;
static int million_fn(void *ctx, size_t i) {
  (void)ctx;
  (void)i;
  int rc = weft_sleep_ns(300 * MS);
  atomic_fetch_add(&million_done, 1);
  return rc;
}

static long map_count(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return -1;
  long n = 0;
  int c;
  while ((c = fgetc(f)) != EOF) n += c == '\n';
  fclose(f);
  return n;
}

static void million_child(void *arg) {
  (void)arg;
  alarm(240);
  size_t n = 1000000;
  int rc = weft_pmap(n, million_fn, NULL, &blocking);
  weft_info info;
  weft_get_info(&info);
  weft__stack_stats st;
  weft__stack_get_stats(&st);
  fprintf(stderr, "pmap %d, %zu done, guard %s, %zu stacks carved, %zu chunks, %ld mappings\n", rc,
          atomic_load(&million_done), info.stack_guard, (size_t)st.fresh, st.chunks, map_count());
  /* With guards as PTE markers, a million stacks take a few dozen mappings; with mprotect guards, stacks
   * beyond the budget come unguarded (one warning) rather than failing. Either way, every element ran. */
  _exit(rc == 0 && atomic_load(&million_done) == n ? 0 : 1);
}

static void test_million_in_child(void) {
  if (!weft_test_fibers_expected() || weft_test_slow_env() || WEFT_TEST_ASAN) return;
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0 && (double)pages * (double)page < 12e9) {
    printf("\n    skipped: a million fibers need about 5 GB of memory");
    return;
  }
  char err[2048];
  int st = weft_test_child(million_child, NULL, err, sizeof err);
  CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  printf("\n    %s", err);
}

int main(int argc, char **argv) {
  static const weft_test tests[] = {
      {"all_in_flight_one_carrier", test_all_in_flight_one_carrier},
      {"all_in_flight_all_carriers", test_all_in_flight_all_carriers},
      {"spread_from_everywhere", test_spread_from_everywhere},
      {"memory_returns", test_memory_returns},
      {"million_in_child", test_million_in_child},
      {NULL, NULL},
  };
  return weft_test_run(argc, argv, "scale", tests);
}
