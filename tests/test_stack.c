/*
 * This file contains the tests of the fiber stack allocator
 * (src/fiber/stack.c) and of the stack overflow handler (overflow.c):
 * arenas, pooling and trimming, memory given back, the guard methods and
 * their faults, guards that survive a trim, the vm.max_map_count budget,
 * the RLIMIT_AS reserve under a burst of threads, fault injection, the
 * alternate signal stack, and how the handler reports an overflow (on
 * fresh, cached and trimmed stacks, for futures and map elements) or passes
 * other faults on. Each test initialises the pool itself and leaves it
 * finalised.
 */
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fiber/overflow.h"
#include "fiber/stack.h"
#include "base/sys.h"

/* AddressSanitizer and ThreadSanitizer: their own SIGSEGV handler, installed first, reports and exits. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TEST_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TEST_SANITIZER 1
#endif
#endif
#ifndef TEST_SANITIZER
#define TEST_SANITIZER 0
#endif

#define KIB ((size_t)1024)

static size_t page_size(void) { return (size_t)sysconf(_SC_PAGESIZE); }

/*
 * Lines of /proc/self/maps: the process's mappings. Under Valgrind and the
 * sanitizers (whose own allocators map memory as they go) and
 * qemu-user (which emulates the file) the count is not exact, and tests
 * compare it only where maps_exact().
 */
static bool maps_exact(void) { return !TEST_SANITIZER && !weft_test_slow_env(); }

static long maps_count(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return -1;
  long n = 0;
  int c;
  while ((c = fgetc(f)) != EOF) n += c == '\n';
  fclose(f);
  return n;
}

__attribute__((unused)) static size_t malloc_in_use(void) { return mallinfo2().uordblks; }

static weft__stack_stats stats(void) {
  weft__stack_stats st;
  weft__stack_get_stats(&st);
  return st;
}

/* Run one test body with WEFT_STACK_GUARD set to value (NULL: unset), then restore the outer setting. */
static char *outer_guard_env;
static void guard_env(const char *value) {
  if (value)
    setenv("WEFT_STACK_GUARD", value, 1);
  else if (outer_guard_env)
    setenv("WEFT_STACK_GUARD", outer_guard_env, 1);
  else
    unsetenv("WEFT_STACK_GUARD");
}

__attribute__((unused)) static int count_substr(const char *s, const char *needle) {
  int n = 0;
  for (const char *p = s; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
  return n;
}

/* A child that hit a fault nobody handles: SIGSEGV, or a sanitizer's report (its handler came first). */
static bool died_of_fault(int status, const char *err) {
  if (WIFSIGNALED(status) && (WTERMSIG(status) == SIGSEGV || WTERMSIG(status) == SIGBUS)) return true;
  return TEST_SANITIZER && WIFEXITED(status) && WEXITSTATUS(status) != 0 && strstr(err, "Sanitizer: SEGV");
}

/* ------------------------------------------------------------------------ */
/* Pooling                                                                   */
/* ------------------------------------------------------------------------ */

static void test_alloc_free_reuse(void) {
  CU_ASSERT_PTR_NULL(weft__stack_guard_name());
  CU_ASSERT_EQUAL_FATAL(weft__stack_init(0), 0);
  CU_ASSERT_EQUAL(weft__stack_size(), 256 * KIB);
  CU_ASSERT_PTR_NOT_NULL(weft__stack_guard_name());
  void *base, *cookie;
  size_t size;
  CU_ASSERT_EQUAL_FATAL(weft__stack_alloc(&base, &size, &cookie), 0);
  CU_ASSERT_EQUAL(size, 256 * KIB);
  CU_ASSERT_EQUAL(weft__stack_in_use(), 1);
  /* One arena was carved for it: its other stacks went to this thread's cache and the pool. */
  weft__stack_stats st = stats();
  CU_ASSERT(st.arena_stacks >= 1 && st.arena_stacks <= 64);
  CU_ASSERT_EQUAL(st.fresh, st.arena_stacks);
  CU_ASSERT_EQUAL(st.mapped, st.arena_stacks);
  CU_ASSERT_EQUAL(st.cached + st.pooled + 1, st.arena_stacks);
  CU_ASSERT(st.cached <= st.cache_max);
  CU_ASSERT_EQUAL(st.chunks, 1);
  size_t cached = st.cached;
  weft__stack_free(cookie);
  CU_ASSERT_EQUAL(weft__stack_in_use(), 0);
  CU_ASSERT_EQUAL(stats().cached, cached + 1);

  /* The freed stack comes back from the thread's cache, without a new mapping. */
  void *base2, *cookie2;
  size_t size2;
  CU_ASSERT_EQUAL_FATAL(weft__stack_alloc(&base2, &size2, &cookie2), 0);
  CU_ASSERT_PTR_EQUAL(base2, base);
  CU_ASSERT_PTR_EQUAL(cookie2, cookie);
  CU_ASSERT_EQUAL(stats().fresh, st.arena_stacks);
  CU_ASSERT_EQUAL(stats().mapped, st.arena_stacks);
  weft__stack_free(cookie2);
  weft__stack_free(NULL); /* ignored */
  weft__stack_fini();
  CU_ASSERT_EQUAL(stats().mapped, 0);
  CU_ASSERT_PTR_NULL(weft__stack_guard_name());
  /* Before init, or after fini, there is nothing to take. */
  CU_ASSERT_EQUAL(weft__stack_alloc(&base, &size, &cookie), -EINVAL);
}

static void test_sizes(void) {
  size_t pg = page_size();
  CU_ASSERT_EQUAL(weft__stack_init((size_t)2 << 30), -EINVAL);
  CU_ASSERT_EQUAL_FATAL(weft__stack_init(100 * KIB + 1), 0);
  CU_ASSERT_EQUAL(weft__stack_size(), (100 * KIB + 1 + pg - 1) / pg * pg);
  CU_ASSERT(weft__stack_guard_size() >= 64 * KIB);
  CU_ASSERT_EQUAL(weft__stack_guard_size() % pg, 0);
  void *base, *cookie;
  size_t size;
  CU_ASSERT_EQUAL_FATAL(weft__stack_alloc(&base, &size, &cookie), 0);
  CU_ASSERT_EQUAL(size, weft__stack_size());

  /* Re-init with another size: the stack taken under the old one stays valid, and is unmapped (not
   * pooled) when it comes back. */
  CU_ASSERT_EQUAL_FATAL(weft__stack_init(64 * KIB), 0);
  CU_ASSERT_EQUAL(weft__stack_size(), 64 * KIB);
  memset(base, 1, size);
  weft__stack_free(cookie);
  CU_ASSERT_EQUAL(stats().mapped, 0);
  CU_ASSERT_EQUAL_FATAL(weft__stack_alloc(&base, &size, &cookie), 0);
  CU_ASSERT_EQUAL(size, 64 * KIB);
  weft__stack_free(cookie);
  weft__stack_fini();
  CU_ASSERT_EQUAL(stats().mapped, 0);
}

static void test_top_aligned_writable(void) {
  size_t pg = page_size();
  CU_ASSERT_EQUAL_FATAL(weft__stack_init(0), 0);
  void *cookies[4];
  for (int i = 0; i < 4; i++) {
    void *base;
    size_t size;
    CU_ASSERT_EQUAL_FATAL(weft__stack_alloc(&base, &size, &cookies[i]), 0);
    char *b = base;
    CU_ASSERT_EQUAL((uintptr_t)b % pg, 0);
    CU_ASSERT_EQUAL((uintptr_t)(b + size) % pg, 0);
    memset(b, 0xa5, size);
    CU_ASSERT_EQUAL(b[0], (char)0xa5);
    CU_ASSERT_EQUAL(b[size - 1], (char)0xa5);
    /* The guard is right below the usable range, and no further. */
    CU_ASSERT_TRUE(weft__stack_guard_contains(cookies[i], b - 1));
    CU_ASSERT_TRUE(weft__stack_guard_contains(cookies[i], b - weft__stack_guard_size()));
    CU_ASSERT_FALSE(weft__stack_guard_contains(cookies[i], b - weft__stack_guard_size() - 1));
    CU_ASSERT_FALSE(weft__stack_guard_contains(cookies[i], b));
    CU_ASSERT_FALSE(weft__stack_guard_contains(cookies[i], b + size - 1));
  }
  CU_ASSERT_FALSE(weft__stack_guard_contains(NULL, cookies));
  for (int i = 0; i < 4; i++) weft__stack_free(cookies[i]);
  weft__stack_fini();
}

/* The process's resident memory (VmRSS), in KiB; -1 when /proc cannot tell. */
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

/*
 * 10,000 stacks taken (each touched at its top, as a fiber does) then given
 * back: freeing makes no system call; trimming gives the memory back a step
 * at a time, keeps pool_max dirty stacks for the next burst, and unmaps the
 * chunks left empty. What is kept comes back without a system call.
 */
static void test_many_trimmed(void) {
  enum { N = 10000 };
  long maps_before = maps_count();
  CU_ASSERT_EQUAL_FATAL(weft__stack_init(0), 0);
  void **cookies = calloc(N, sizeof *cookies);
  CU_ASSERT_PTR_NOT_NULL_FATAL(cookies);
  long rss0 = rss_kib();
  for (int i = 0; i < N; i++) {
    void *base;
    size_t size;
    int r = weft__stack_alloc(&base, &size, &cookies[i]);
    CU_ASSERT_EQUAL_FATAL(r, 0);
    ((char *)base)[size - 1] = 1; /* a fiber touches at least its top */
  }
  weft__stack_stats st = stats();
  CU_ASSERT_EQUAL(st.in_use, N);
  CU_ASSERT(st.mapped >= N && st.mapped < N + st.arena_stacks);
  /* Arenas are guarded a batch at a time: far fewer calls than stacks. */
  if (strcmp(weft__stack_guard_name(), "madv-guard") == 0 && !weft_test_slow_env())
    CU_ASSERT(st.guard_calls <= st.mapped / st.arena_stacks + 8);
  /* Few mappings for 10,000 stacks: chunks grow, 1, 2, 4 ... arenas. */
  CU_ASSERT(st.chunks < 16);
  long rss_full = rss_kib();
  for (int i = 0; i < N; i++) weft__stack_free(cookies[i]);
  st = stats();
  CU_ASSERT_EQUAL(st.in_use, 0);
  CU_ASSERT(st.cached <= st.cache_max);
  /* Freeing gave back nothing: the excess waits for a trim (idle carriers do it). */
  CU_ASSERT_EQUAL(st.released, 0);
  CU_ASSERT_EQUAL(st.trimmed, 0);
  CU_ASSERT(weft__stack_excess() > 0);
  CU_ASSERT(st.pooled_dirty > st.pool_max);
  weft__stack_cache_flush(); /* as an idle carrier does, so that the trim can empty whole chunks */
  CU_ASSERT_EQUAL(stats().cached, 0);
  size_t left = weft__stack_excess(), calls = 0;
  while (left) {
    left = weft__stack_trim(4, INT64_MAX, 0);
    CU_ASSERT_FATAL(++calls < 10000); /* progress at every call */
  }
  st = stats();
  CU_ASSERT(st.pooled_dirty <= st.pool_max);
  CU_ASSERT(st.trimmed > 0);
  CU_ASSERT(st.released > 0);
  CU_ASSERT_EQUAL(st.mapped, st.pooled + st.cached);
  CU_ASSERT_EQUAL(st.released, st.fresh - st.mapped);
  /* Kept: the first chunks, as many as hold the pool_max dirty stacks (1 + 2 + 4 + ... arenas). */
  CU_ASSERT(st.mapped <= 2 * st.pool_max + 2 * st.arena_stacks);
  /* The memory went back: RSS fell by most of what the burst had added. */
  long rss_after = rss_kib();
  if (rss0 > 0 && rss_full > rss0 + 20000 && !weft_test_slow_env() && !WEFT_TEST_ASAN) {
    CU_ASSERT(rss_after - rss0 < (rss_full - rss0) / 4);
    if (rss_after - rss0 >= (rss_full - rss0) / 4)
      printf("\n  RSS %ld KiB before, %ld full, %ld after the trim\n", rss0, rss_full, rss_after);
  }

  /* What is kept comes back without a system call. */
  uint64_t fresh = st.fresh;
  size_t kept = st.mapped;
  for (size_t i = 0; i < kept; i++) {
    void *base;
    size_t size;
    CU_ASSERT_EQUAL_FATAL(weft__stack_alloc(&base, &size, &cookies[i]), 0);
  }
  CU_ASSERT_EQUAL(stats().fresh, fresh);
  CU_ASSERT_EQUAL(stats().pooled, 0);
  for (size_t i = 0; i < kept; i++) weft__stack_free(cookies[i]);
  free(cookies);
  weft__stack_fini();
  CU_ASSERT_EQUAL(stats().mapped, 0);
  CU_ASSERT_EQUAL(stats().chunks, 0);
  if (maps_exact()) CU_ASSERT_EQUAL(maps_count(), maps_before);
}

/* Take n stacks, touch each at its top as a fiber does, give them all back, and flush the cache. */
static void burst(void **cookies, size_t n) {
  for (size_t i = 0; i < n; i++) {
    void *base;
    size_t size;
    CU_ASSERT_EQUAL_FATAL(weft__stack_alloc(&base, &size, &cookies[i]), 0);
    ((char *)base)[size - 1] = 1;
  }
  for (size_t i = 0; i < n; i++) weft__stack_free(cookies[i]);
  weft__stack_cache_flush();
}

/*
 * An idle pool keeps all that a burst left for the hold time of the caller's
 * idle time (a burst that follows soon reuses them warm, with no page
 * fault), then gives the part above its floor back in proportion to the
 * time, down to the floor WEFT__STACK_DECAY_PER_HOLD holds later; a burst
 * during the decay does not lower what is kept; once at the floor, the next
 * burst is held again from its own size. A hold of 0 (WEFT_STACK_HOLD_MS=0)
 * gives everything above the floor back at the first trim.
 */
static void test_held_then_decayed(void) {
  enum { N = 2000 };
  const int64_t hold = 1000 * 1000000LL, decay = WEFT__STACK_DECAY_PER_HOLD * hold;
  CU_ASSERT_EQUAL_FATAL(weft__stack_init(0), 0);
  void **cookies = calloc(N, sizeof *cookies);
  CU_ASSERT_PTR_NOT_NULL_FATAL(cookies);
  burst(cookies, N);
  weft__stack_stats st = stats();
  size_t floor = st.pool_max, peak = st.pooled_dirty, arena = st.arena_stacks;
  CU_ASSERT_FATAL(peak >= N - st.cache_max && peak > floor + 4 * arena);
  CU_ASSERT(weft__stack_excess() > 0); /* there is something to give back, in time */

  /* Held: nothing is due at the start of the idle time, nor at its end. */
  CU_ASSERT_EQUAL(weft__stack_trim(SIZE_MAX, 100 * 1000000LL, hold), 0);
  CU_ASSERT_EQUAL(weft__stack_trim(SIZE_MAX, hold, hold), 0);
  st = stats();
  CU_ASSERT_EQUAL(st.trimmed, 0);
  CU_ASSERT_EQUAL(st.pooled_dirty, peak);

  /* Half-way through the decay: about half of what lies above the floor (to an arena). */
  size_t half = floor + (peak - floor) / 2;
  CU_ASSERT_EQUAL(weft__stack_trim(SIZE_MAX, hold + decay / 2, hold), 0);
  st = stats();
  CU_ASSERT(st.pooled_dirty <= half + 1 && st.pooled_dirty + arena > half);
  CU_ASSERT(st.trimmed > 0);

  /* A burst during the decay: what is kept stays measured from the larger one. */
  burst(cookies, N / 4);
  CU_ASSERT_EQUAL(weft__stack_trim(SIZE_MAX, hold + decay / 2, hold), 0);
  st = stats();
  CU_ASSERT(st.pooled_dirty <= half + 1 && st.pooled_dirty + arena > half);

  /* The end of the decay: down to the floor. */
  size_t left = 1, calls = 0;
  while (left) {
    left = weft__stack_trim(4, hold + decay, hold);
    CU_ASSERT_FATAL(++calls < 10000);
  }
  st = stats();
  CU_ASSERT(st.pooled_dirty <= floor);
  CU_ASSERT_EQUAL(weft__stack_excess(), 0);

  /* A new burst is held again, from its own size. */
  burst(cookies, N / 2);
  size_t peak2 = stats().pooled_dirty;
  CU_ASSERT(peak2 > floor);
  CU_ASSERT_EQUAL(weft__stack_trim(SIZE_MAX, hold, hold), 0);
  CU_ASSERT_EQUAL(stats().pooled_dirty, peak2);
  while (weft__stack_trim(SIZE_MAX, INT64_MAX, hold)) {
  }
  CU_ASSERT(stats().pooled_dirty <= floor);

  /* No hold: the first trim, 100 ms into the idle time, takes it all down to the floor. */
  burst(cookies, N / 2);
  CU_ASSERT(stats().pooled_dirty > floor);
  calls = 0;
  while (weft__stack_trim(4, 100 * 1000000LL, 0)) CU_ASSERT_FATAL(++calls < 10000);
  CU_ASSERT(stats().pooled_dirty <= floor);
  free(cookies);
  weft__stack_fini();
}

/* A trimmed stack reads zeros, and its guard still faults: DONTNEED keeps guard markers and PROT_NONE. */
static void child_trimmed_guard(void *arg) {
  weft_test_child_no_leak_check();
  (void)arg;
  if (weft__stack_init(0) != 0) _exit(2);
  enum { N = 2000 };
  static void *cookies[N];
  char *bases[N];
  for (int i = 0; i < N; i++) {
    size_t size;
    void *b;
    if (weft__stack_alloc(&b, &size, &cookies[i]) != 0) _exit(3);
    bases[i] = b;
    memset(bases[i] + size - 4096, 0x5a, 4096);
  }
  for (int i = 0; i < N; i++) weft__stack_free(cookies[i]);
  weft__stack_cache_flush();
  while (weft__stack_trim(64, INT64_MAX, 0)) {
  }
  weft__stack_stats st = stats();
  if (st.trimmed == 0) _exit(4);
  /* Take stacks until one comes back trimmed (its top page reads zero): then write below its base. */
  for (int i = 0; i < N; i++) {
    void *b, *c;
    size_t size;
    if (weft__stack_alloc(&b, &size, &c) != 0) _exit(5);
    if (((volatile char *)b)[size - 1] == 0) {
      if (strcmp(weft__stack_guard_of(c), "none") == 0) _exit(0);
      ((volatile char *)b)[-1] = 1;
      _exit(6); /* no fault: the guard is gone */
    }
  }
  _exit(7);
}

static void test_trimmed_guard(void) {
  char err[4096];
  int status = weft_test_child(child_trimmed_guard, NULL, err, sizeof err);
  CU_ASSERT(died_of_fault(status, err) || (WIFEXITED(status) && WEXITSTATUS(status) == 0));
  if (!(died_of_fault(status, err) || (WIFEXITED(status) && WEXITSTATUS(status) == 0)))
    printf("\n  status %#x, %s\n", status, err);
}

/* Stacks taken on one thread and given back on another. */
typedef struct xfer {
  void **cookies;
  int n;
  bool take; /* take n stacks (true) or give them back */
} xfer;

static void *xfer_thread(void *arg) {
  xfer *x = arg;
  for (int i = 0; i < x->n; i++) {
    if (x->take) {
      void *base;
      size_t size;
      if (weft__stack_alloc(&base, &size, &x->cookies[i]) != 0) x->cookies[i] = NULL;
    } else {
      weft__stack_free(x->cookies[i]);
    }
  }
  return NULL;
}

static void test_cross_thread(void) {
  enum { N = 100 };
  CU_ASSERT_EQUAL_FATAL(weft__stack_init(0), 0);
  void *cookies[N];
  /* Taken by a thread that then exits: its cache (empty here) is flushed, the count survives it. */
  xfer x = {cookies, N, true};
  pthread_t t;
  CU_ASSERT_EQUAL_FATAL(pthread_create(&t, NULL, xfer_thread, &x), 0);
  pthread_join(t, NULL);
  for (int i = 0; i < N; i++) CU_ASSERT_PTR_NOT_NULL_FATAL(cookies[i]);
  CU_ASSERT_EQUAL(weft__stack_in_use(), N);
  /* Given back by another thread, which then exits: its cache goes to the global pool. */
  x.take = false;
  CU_ASSERT_EQUAL_FATAL(pthread_create(&t, NULL, xfer_thread, &x), 0);
  pthread_join(t, NULL);
  weft__stack_stats st = stats();
  CU_ASSERT_EQUAL(st.in_use, 0);
  CU_ASSERT_EQUAL(st.cached, 0);
  CU_ASSERT_EQUAL(st.mapped, st.pooled);
  CU_ASSERT(st.pooled > 0);
  /* This thread takes them from the pool: nothing new is carved. */
  uint64_t fresh = st.fresh;
  CU_ASSERT(fresh >= N && fresh < N + st.arena_stacks);
  void *base, *cookie;
  size_t size;
  CU_ASSERT_EQUAL_FATAL(weft__stack_alloc(&base, &size, &cookie), 0);
  CU_ASSERT_EQUAL(stats().fresh, fresh);
  weft__stack_free(cookie);
  weft__stack_fini();
  CU_ASSERT_EQUAL(stats().mapped, 0);
}

/* Threads that take and give back at once, some of it across threads. */
#define STRESS_THREADS 4
#define STRESS_SLOTS   64
static _Atomic(void *) stress_slots[STRESS_SLOTS];

static void *stress_thread(void *arg) {
  unsigned seed = (unsigned)(uintptr_t)arg;
  void *mine[40];
  int held = 0;
  for (int i = 0; i < 20000; i++) {
    seed = seed * 1103515245u + 12345u;
    unsigned r = seed >> 16;
    if (r % 3 != 0 && held < 40) {
      void *base;
      size_t size;
      if (weft__stack_alloc(&base, &size, &mine[held]) == 0) {
        ((volatile char *)base)[size - 1] = 1;
        held++;
      }
    } else if (held > 0) {
      void *c = mine[--held];
      /* Swap through a shared slot: whatever comes out was taken by some other thread. */
      c = atomic_exchange(&stress_slots[r % STRESS_SLOTS], c);
      if (c) weft__stack_free(c);
    }
  }
  while (held > 0) weft__stack_free(mine[--held]);
  return NULL;
}

static void test_threads_stress(void) {
  CU_ASSERT_EQUAL_FATAL(weft__stack_init(64 * KIB), 0);
  pthread_t t[STRESS_THREADS];
  for (int i = 0; i < STRESS_THREADS; i++)
    CU_ASSERT_EQUAL_FATAL(pthread_create(&t[i], NULL, stress_thread, (void *)(uintptr_t)(i + 1)), 0);
  for (int i = 0; i < STRESS_THREADS; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < STRESS_SLOTS; i++) {
    void *c = atomic_exchange(&stress_slots[i], NULL);
    if (c) weft__stack_free(c);
  }
  weft__stack_stats st = stats();
  CU_ASSERT_EQUAL(st.in_use, 0);
  CU_ASSERT_EQUAL(st.mapped, st.pooled + st.cached);
  while (weft__stack_trim(16, INT64_MAX, 0)) {
  }
  st = stats();
  CU_ASSERT(st.pooled_dirty <= st.pool_max);
  CU_ASSERT_EQUAL(st.mapped, st.pooled + st.cached);
  weft__stack_fini();
  CU_ASSERT_EQUAL(stats().mapped, 0);
}

/* ------------------------------------------------------------------------ */
/* Guards                                                                    */
/* ------------------------------------------------------------------------ */

/* Child: take a stack and write `below` bytes under its usable base. */
static void child_write_below(void *arg) {
  weft_test_child_no_leak_check();
  size_t below = *(size_t *)arg;
  if (weft__stack_init(0) != 0) _exit(3);
  if (weft__overflow_install() != 0) _exit(4);
  void *base, *cookie;
  size_t size;
  if (weft__stack_alloc(&base, &size, &cookie) != 0) _exit(5);
  ((volatile char *)base)[-(ptrdiff_t)below] = 1;
  _exit(0); /* no guard */
}

static void check_guard_faults(const char *expect) {
  char err[4096];
  size_t offsets[2] = {1, weft__stack_guard_size()};
  for (int i = 0; i < 2; i++) {
    int status = weft_test_child(child_write_below, &offsets[i], err, sizeof err);
    if (strcmp(expect, "none") == 0) {
      /* No guard: the region below is the stack's own cushion, mapped and writable. */
      CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    } else {
      /* No fiber runs, so the handler passes the fault on to the default action. */
      CU_ASSERT(died_of_fault(status, err));
      if (!died_of_fault(status, err))
        printf("\n  guard %s, %zu below: status %#x, %s\n", expect, offsets[i], status, err);
    }
  }
}

static void test_guard_faults(void) {
  CU_ASSERT_EQUAL_FATAL(weft__stack_init(0), 0);
  const char *name = weft__stack_guard_name();
  weft__stack_fini();
  check_guard_faults(name);
}

/* Map n stacks under the given guard method, check each and the mappings it spent, then release. */
static void check_method(const char *env, const char *expect) {
  enum { N = 200 };
  guard_env(env);
  CU_ASSERT_EQUAL_FATAL(weft__stack_init(0), 0);
  const char *name = weft__stack_guard_name();
  CU_ASSERT_STRING_EQUAL(name, expect);
  long before = maps_count();
  void *cookies[N];
  for (int i = 0; i < N; i++) {
    void *base;
    size_t size;
    CU_ASSERT_EQUAL_FATAL(weft__stack_alloc(&base, &size, &cookies[i]), 0);
    CU_ASSERT_STRING_EQUAL(weft__stack_guard_of(cookies[i]), expect);
  }
  long spent = maps_count() - before;
  weft__stack_stats st = stats();
  /* Whole arenas are carved, and guarded together. */
  CU_ASSERT(st.mapped >= N && st.mapped < N + st.arena_stacks);
  if (strcmp(expect, "mprotect") == 0) {
    /* A PROT_NONE guard splits each stack's mapping: at least one mapping per stack. */
    CU_ASSERT(spent >= N);
    CU_ASSERT_EQUAL(st.guard_mprotect, st.mapped);
    CU_ASSERT(st.map_budget >= st.mapped);
  } else {
    /* Guard markers (or no guard) leave the chunks' mappings whole. */
    CU_ASSERT(spent < N / 16);
    CU_ASSERT_EQUAL(st.guard_mprotect, 0);
  }
  CU_ASSERT_EQUAL(st.guard_none, strcmp(expect, "none") == 0 ? st.mapped : 0);
  for (int i = 0; i < N; i++) weft__stack_free(cookies[i]);
  weft__stack_fini();
  check_guard_faults(expect);
  guard_env(NULL);
}

static bool kernel_has_madv_guard(void) {
  guard_env(NULL);
  unsetenv("WEFT_STACK_GUARD");
  bool has = weft__stack_init(0) == 0 && strcmp(weft__stack_guard_name(), "madv-guard") == 0;
  weft__stack_fini();
  guard_env(NULL);
  return has;
}

static void test_guard_madv(void) {
  if (!kernel_has_madv_guard()) {
    printf("\n  skipped: no MADV_GUARD_INSTALL here (Linux 6.13+, not under qemu-user)\n");
    return;
  }
  check_method("madv", "madv-guard");
}

static void test_guard_mprotect(void) { check_method("mprotect", "mprotect"); }
static void test_guard_none(void) { check_method("none", "none"); }

/* ------------------------------------------------------------------------ */
/* The overflow handler                                                      */
/* ------------------------------------------------------------------------ */

static void test_altstack(void) {
  stack_t ss;
  CU_ASSERT_EQUAL_FATAL(sigaltstack(NULL, &ss), 0);
  if (!(ss.ss_flags & SS_DISABLE)) {
    printf("\n  skipped: this thread has an alternate signal stack already (a sanitizer's?)\n");
    return;
  }
  long before = maps_count();
  CU_ASSERT_EQUAL_FATAL(weft__overflow_thread_init(), 0);
  CU_ASSERT_EQUAL_FATAL(sigaltstack(NULL, &ss), 0);
  CU_ASSERT_FALSE(ss.ss_flags & SS_DISABLE);
  CU_ASSERT(ss.ss_size >= 64 * KIB);
  void *sp = ss.ss_sp;
  CU_ASSERT_EQUAL(weft__overflow_thread_init(), 0); /* again: nothing changes */
  CU_ASSERT_EQUAL(sigaltstack(NULL, &ss), 0);
  CU_ASSERT_PTR_EQUAL(ss.ss_sp, sp);
  weft__overflow_thread_fini();
  CU_ASSERT_EQUAL(sigaltstack(NULL, &ss), 0);
  CU_ASSERT_TRUE(ss.ss_flags & SS_DISABLE);
  weft__overflow_thread_fini(); /* again: nothing to do */
  if (maps_exact()) CU_ASSERT_EQUAL(maps_count(), before);

  /* A thread with an alternate stack of the program's keeps it, and fini leaves it alone. */
  size_t mine_size = 64 * KIB;
  void *mine = malloc(mine_size);
  stack_t own = {.ss_sp = mine, .ss_size = mine_size, .ss_flags = 0};
  CU_ASSERT_EQUAL_FATAL(sigaltstack(&own, NULL), 0);
  CU_ASSERT_EQUAL(weft__overflow_thread_init(), 0);
  CU_ASSERT_EQUAL(sigaltstack(NULL, &ss), 0);
  CU_ASSERT_PTR_EQUAL(ss.ss_sp, mine);
  weft__overflow_thread_fini();
  CU_ASSERT_EQUAL(sigaltstack(NULL, &ss), 0);
  CU_ASSERT_PTR_EQUAL(ss.ss_sp, mine);
  own.ss_flags = SS_DISABLE;
  CU_ASSERT_EQUAL(sigaltstack(&own, NULL), 0);
  free(mine);
}

/* A thread that exits without weft__overflow_thread_fini: the key destructor frees its alternate stack. */
static void *altstack_thread(void *arg) {
  (void)arg;
  return (void *)(intptr_t)weft__overflow_thread_init();
}

static void test_altstack_thread_exit(void) {
  /* glibc caches thread stacks: warm the cache with a first thread so that the mappings compare. */
  pthread_t t;
  void *r;
  CU_ASSERT_EQUAL_FATAL(pthread_create(&t, NULL, altstack_thread, NULL), 0);
  pthread_join(t, &r);
  long before = maps_count();
  CU_ASSERT_EQUAL_FATAL(pthread_create(&t, NULL, altstack_thread, NULL), 0);
  pthread_join(t, &r);
  CU_ASSERT_PTR_NULL(r);
  if (maps_exact()) CU_ASSERT_EQUAL(maps_count(), before);
}

#ifdef WEFT_TESTING
/* The program's own handlers, installed before weft's. */
static sigjmp_buf chain_jmp;
static volatile sig_atomic_t chain_sig;
static void *volatile chain_addr;

static void prog_handler_info(int sig, siginfo_t *si, void *uc) {
  (void)uc;
  chain_sig = sig;
  chain_addr = si->si_addr;
  siglongjmp(chain_jmp, 1);
}

static void prog_handler_plain(int sig) {
  chain_sig = sig;
  siglongjmp(chain_jmp, 1);
}

/* Child: install the program's handler, then weft's; fault on our own PROT_NONE page, then in a stack's
 * guard (no fiber runs): both must reach the program's handler. */
static void child_chain(void *arg) {
  weft_test_child_no_leak_check();
  bool siginfo = *(bool *)arg;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sigemptyset(&sa.sa_mask);
  if (siginfo) {
    sa.sa_sigaction = prog_handler_info;
    sa.sa_flags = SA_SIGINFO;
  } else {
    sa.sa_handler = prog_handler_plain;
  }
  if (sigaction(SIGSEGV, &sa, NULL) != 0) _exit(2);
  weft__overflow_reset();
  if (weft__overflow_install() != 0) _exit(3);
  struct sigaction cur;
  sigaction(SIGSEGV, NULL, &cur);
  if (cur.sa_sigaction == prog_handler_info || cur.sa_handler == prog_handler_plain) _exit(4);
  if (weft__overflow_thread_init() != 0) _exit(5);

  size_t pg = page_size();
  char *p = mmap(NULL, pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED || mprotect(p, pg, PROT_NONE) != 0) _exit(6);
  if (sigsetjmp(chain_jmp, 1) == 0) {
    *(volatile char *)p = 1;
    _exit(7);
  }
  if (chain_sig != SIGSEGV || (siginfo && chain_addr != p)) _exit(8);

  if (weft__stack_init(0) != 0) _exit(9);
  void *base, *cookie;
  size_t size;
  if (weft__stack_alloc(&base, &size, &cookie) != 0) _exit(10);
  chain_sig = 0;
  if (sigsetjmp(chain_jmp, 1) == 0) {
    ((volatile char *)base)[-1] = 1;
    /* Only a stack without a guard gets here. */
    if (strcmp(weft__stack_guard_of(cookie), "none") != 0) _exit(11);
    _exit(0);
  }
  if (chain_sig != SIGSEGV || (siginfo && chain_addr != (char *)base - 1)) _exit(12);
  _exit(0);
}

static void test_chain_handler(void) {
  char err[4096];
  bool variants[2] = {true, false};
  for (int i = 0; i < 2; i++) {
    int status = weft_test_child(child_chain, &variants[i], err, sizeof err);
    CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0))
      printf("\n  siginfo %d: status %#x, %s\n", (int)variants[i], status, err);
  }
}

/* Child: SIGSEGV was SIG_DFL or SIG_IGN before weft's handler; then a fault, or a SIGSEGV sent with kill. */
typedef struct chain_case {
  bool ignore; /* SIG_IGN before weft (else SIG_DFL) */
  bool sent;   /* kill() instead of a fault */
} chain_case;

static void child_chain_default(void *arg) {
  weft_test_child_no_leak_check();
  const chain_case *c = arg;
  alarm(20); /* a handler that loops on the fault dies of SIGALRM instead */
  signal(SIGSEGV, c->ignore ? SIG_IGN : SIG_DFL);
  weft__overflow_reset();
  if (weft__overflow_install() != 0) _exit(3);
  if (weft__overflow_thread_init() != 0) _exit(4);
  if (c->sent) {
    kill(getpid(), SIGSEGV);
    _exit(0);
  }
  size_t pg = page_size();
  char *p = mmap(NULL, pg, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  *(volatile char *)p = 1;
  _exit(5);
}

static void test_chain_default(void) {
  char err[4096];
  chain_case cases[4] = {{false, false}, {true, false}, {false, true}, {true, true}};
  for (int i = 0; i < 4; i++) {
    int status = weft_test_child(child_chain_default, &cases[i], err, sizeof err);
    if (cases[i].ignore && cases[i].sent) {
      CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0); /* the program ignores a sent SIGSEGV */
    } else {
      /* A fault dies as without weft, SIG_IGN or not (an ignored fault would fault for ever). */
      CU_ASSERT(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV);
    }
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0) &&
        !(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV))
      printf("\n  case %d: status %#x, %s\n", i, status, err);
  }
}
#endif /* WEFT_TESTING */

/* The overflow through the public API: a blocking future that recurses without bound. */
static volatile size_t recurse_limit = SIZE_MAX;

__attribute__((noinline)) static size_t recurse(size_t depth) {
  volatile char frame[512]; /* volatile: the compiler keeps every frame */
  frame[0] = (char)depth;
  frame[sizeof frame - 1] = 0;
  if (depth >= recurse_limit) return 0;
  return recurse(depth + 1) + (size_t)frame[depth % sizeof frame];
}

static void *overflow_fn(void *arg) {
  (void)arg;
  return (void *)recurse(0);
}

static void *nothing_fn(void *arg) { return arg; }

static int overflow_elem(void *ctx, size_t i) {
  (void)ctx;
  return (int)(i + recurse(0));
}

/*
 * Child: an overflow on a fiber, in one of three ways: a future on a fresh
 * stack (0); a future on a stack that earlier fibers used and gave back to
 * the cache (1); an element of a blocking map, whose fiber record lives at
 * the top of its own stack (2).
 */
static void child_overflow(void *arg) {
  weft_test_child_no_leak_check();
  int how = (int)(intptr_t)arg;
  if (!weft_fibers_available()) _exit(77);
  if (how == 1)
    for (int k = 0; k < 200; k++) {
      weft_future *g;
      if (weft_future_start(WEFT_BLOCKING, nothing_fn, NULL, &g) != 0) _exit(80);
      weft_future_get(g, -1, NULL);
      weft_future_free(g);
    }
  if (how == 2) {
    weft_pmap_opts o = WEFT_PMAP_OPTS_INIT;
    o.kind = WEFT_BLOCKING;
    weft_pmap(4, overflow_elem, NULL, &o);
    _exit(79);
  }
  weft_future *f;
  if (weft_future_start(WEFT_BLOCKING, overflow_fn, NULL, &f) != 0) _exit(78);
  void *r;
  weft_future_get(f, -1, &r);
  _exit(79);
}

static void test_overflow_api(void) {
  static const char *const ways[] = {"a fresh stack", "a reused stack", "a map element"};
  for (int how = 0; how < 3; how++) {
    char err[4096];
    int status = weft_test_child(child_overflow, (void *)(intptr_t)how, err, sizeof err);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 77) {
      printf("\n  skipped: fibers are not available (switched off, or not built)\n");
      return;
    }
    weft_info info;
    CU_ASSERT_EQUAL_FATAL(weft_get_info(&info), 0);
    /*
     * weft's handler prints the message and aborts. Under Valgrind, whose
     * signal delivery is its own, the child now and then dies of the SIGSEGV
     * instead, after the message (seen in CI: "status 0xb" with the message
     * on stderr): the message is the promise there.
     */
    bool died = WIFSIGNALED(status) &&
                (WTERMSIG(status) == SIGABRT || (weft_test_slow_env() && WTERMSIG(status) == SIGSEGV));
    CU_ASSERT(died);
    char expect[128];
    snprintf(expect, sizeof expect, " overflowed its stack (%zu bytes); raise WEFT_STACK_SIZE",
             info.stack_size);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, expect));
    const char *p = strstr(err, "weft: fiber ");
    CU_ASSERT_PTR_NOT_NULL(p);
    if (p) CU_ASSERT(p[12] >= '0' && p[12] <= '9');
    if (!died || !strstr(err, expect)) printf("\n  %s: status %#x, stderr: %s\n", ways[how], status, err);
  }
}

/* ------------------------------------------------------------------------ */
/* The vm.max_map_count budget, fault injection                              */
/* ------------------------------------------------------------------------ */

static void test_budget_estimate(void) {
  guard_env("mprotect");
  CU_ASSERT_EQUAL_FATAL(weft__stack_init(0), 0);
  weft__stack_stats st = stats();
  long max = 65530;
  FILE *f = fopen("/proc/sys/vm/max_map_count", "r");
  if (f) {
    if (fscanf(f, "%ld", &max) != 1) max = 65530;
    fclose(f);
  }
  /* (max - mappings now - margin) / 2: below max / 2, and well above zero in a small test process. */
  CU_ASSERT(st.map_budget < (size_t)max / 2);
  CU_ASSERT(st.map_budget > (size_t)max / 4);
  weft__stack_fini();
  guard_env(NULL);
}

#ifdef WEFT_TESTING
/* Child: a budget of 5 mprotect-guarded stacks, then 8 stacks. Exit status: 0, or which check failed. */
static void child_budget(void *arg) {
  (void)arg;
  setenv("WEFT_STACK_GUARD", "mprotect", 1);
  if (weft__stack_init(0) != 0) _exit(2);
  weft__stack_set_map_budget(5);
  void *cookies[8];
  for (int i = 0; i < 8; i++) {
    void *base;
    size_t size;
    if (weft__stack_alloc(&base, &size, &cookies[i]) != 0) _exit(3);
    memset(base, 0, size); /* unguarded stacks work all the same */
    if (strcmp(weft__stack_guard_of(cookies[i]), i < 5 ? "mprotect" : "none") != 0) _exit(10 + i);
  }
  /* The arena's other stacks are unguarded too: the budget is spent. */
  weft__stack_stats st = stats();
  if (st.guard_mprotect != 5 || st.guard_none != st.mapped - 5) _exit(4);
  for (int i = 0; i < 8; i++) weft__stack_free(cookies[i]);
  weft__stack_fini();
  /* Unmapping gave the budget back. */
  if (stats().guard_mprotect != 0 || stats().guard_none != 0) _exit(5);
  _exit(0);
}

static void test_budget(void) {
  char err[4096];
  int status = weft_test_child(child_budget, NULL, err, sizeof err);
  CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CU_ASSERT_EQUAL(count_substr(err, "weft:"), 1); /* one warning, not one per stack */
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "max_map_count"));
  if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0) || count_substr(err, "weft:") != 1)
    printf("\n  status %#x, stderr: %s\n", status, err);
}

/* ------------------------------------------------------------------------ */
/* RLIMIT_AS: the reserve under a burst                                      */
/* ------------------------------------------------------------------------ */

#define RACE_THREADS 4
#define RACE_MAX     2048
static pthread_barrier_t race_go;
static void *race_cookies[RACE_THREADS][RACE_MAX];

/* Take stacks until one is refused; the count. */
static void *race_taker(void *arg) {
  void **cookies = arg;
  size_t n = 0;
  pthread_barrier_wait(&race_go);
  while (n < RACE_MAX) {
    void *base;
    size_t size;
    if (weft__stack_alloc(&base, &size, &cookies[n]) != 0) break;
    n++;
  }
  return (void *)(uintptr_t)n;
}

/*
 * Child: four threads that find the pool empty at once take stacks until one
 * is refused, under an RLIMIT_AS that leaves the stacks room for one and a
 * half arenas beyond the reserve; then VmSize must still be the reserve
 * below the limit. Exit status: 0, or which step failed.
 */
static void child_as_race(void *arg) {
  (void)arg;
  mallopt(M_ARENA_MAX, 1); /* the takers' records come from one heap, not four 64 MiB arenas */
  if (weft__stack_init(0) != 0) _exit(2);
  weft__stack_stats st = stats();
  pthread_t t[RACE_THREADS];
  if (pthread_barrier_init(&race_go, NULL, RACE_THREADS + 1) != 0) _exit(3);
  for (int i = 0; i < RACE_THREADS; i++)
    if (pthread_create(&t[i], NULL, race_taker, race_cookies[i]) != 0) _exit(4);
  /* The threads exist (their stacks count in VmSize); the limit leaves `share` past the reserve. */
  size_t share = st.arena_stacks * st.stride * 3 / 2, vm = weft_test_vm_size(), lim = vm + share;
  if (vm == 0) _exit(5);
  while (lim - weft__stack_as_reserve(lim) < vm + share) lim += (size_t)1 << 20;
  struct rlimit rl = {lim, lim};
  if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(6);
  pthread_barrier_wait(&race_go);
  size_t taken = 0;
  for (int i = 0; i < RACE_THREADS; i++) {
    void *n;
    pthread_join(t[i], &n);
    taken += (uintptr_t)n;
  }
  size_t after = weft_test_vm_size(), reserve = weft__stack_as_reserve(lim);
  /* Slack: the arenas' records, from the main heap (a few pages). */
  bool kept = after + reserve <= lim + ((size_t)1 << 20);
  if (!kept || taken == 0)
    fprintf(stderr, "limit %zu MiB, reserve %zu MiB, VmSize %zu MiB before and %zu MiB after %zu stacks\n",
            lim >> 20, reserve >> 20, vm >> 20, after >> 20, taken);
  rl.rlim_cur = rl.rlim_max = RLIM_INFINITY;
  (void)setrlimit(RLIMIT_AS, &rl); /* raising a hard limit needs root: fini unmaps either way */
  for (int i = 0; i < RACE_THREADS; i++)
    for (size_t k = 0; k < RACE_MAX && race_cookies[i][k]; k++) weft__stack_free(race_cookies[i][k]);
  weft__stack_fini();
  _exit(!kept ? 10 : taken == 0 ? 11 : 0);
}

/*
 * Threads that find the pool empty at once (a burst's carriers and the
 * map's caller) must not together map more than the room RLIMIT_AS leaves
 * beyond the reserve. Before chunk mappings were one at a time, each read
 * the same room and mapped it, and the kernel's refusals had the later ones
 * halve their way into the reserve: libgomp, short of a page for a team of
 * one, ended the process (faults/rlimit_as at 1 GiB, once in CI). Eight
 * children, as the race need not bite in each.
 */
static void test_as_reserve_race(void) {
  if (TEST_SANITIZER || weft_test_slow_env()) {
    printf("\n    skipped: the sanitizers and Valgrind reserve more address space than any limit here");
    return;
  }
  for (int round = 0; round < 8; round++) {
    char err[4096];
    int status = weft_test_child(child_as_race, NULL, err, sizeof err);
    bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    CU_ASSERT(ok);
    if (!ok) {
      printf("\n  round %d: status %#x, stderr: %s\n", round, status, err);
      break;
    }
  }
}

#define FBIT(site) (1u << (site))

/*
 * Leak check: run the scenario until the heap is in a steady state, then
 * `runs` times more. A leaked record (one malloc per stack) on every run
 * (one malloc per arena or chunk) would grow the heap by `runs` chunks; glibc's per-thread cache
 * of freed chunks makes the count move by a few chunks at most. Mappings
 * must come back exactly.
 */
static void check_no_leak(void (*scenario)(void), int runs) {
  /* The warnings that failed guards give would fill the log: stderr goes to /dev/null meanwhile. */
  fflush(stderr);
  int saved_err = dup(2);
  int null = open("/dev/null", O_WRONLY);
  dup2(null, 2);
  close(null);
  scenario();
  scenario();
  long maps = maps_count();
  size_t heap = malloc_in_use();
  for (int i = 0; i < runs; i++) {
    scenario();
    CU_ASSERT_EQUAL(stats().mapped, 0);
    CU_ASSERT_EQUAL(weft__stack_in_use(), 0);
    if (maps_exact()) CU_ASSERT_EQUAL(maps_count(), maps);
  }
  long grown = (long)malloc_in_use() - (long)heap;
  dup2(saved_err, 2);
  close(saved_err);
  CU_ASSERT(grown < 512);
  if (grown >= 512) printf("\n  the heap grew by %ld bytes over %d runs\n", grown, runs);
}

/* With the pool initialised and empty: fail the next call at `sites`, expect `want` from alloc. */
static void *alloc_with_fault(uint32_t sites, bool sticky, int want) {
  void *base = NULL, *cookie = NULL;
  size_t size;
  weft__fault_arm(sites, 0, sticky);
  int r = weft__stack_alloc(&base, &size, &cookie);
  unsigned long fired = weft__fault_disarm();
  CU_ASSERT_EQUAL(r, want);
  CU_ASSERT(fired >= 1);
  if (r == 0) ((volatile char *)base)[size - 1] = 1;
  return r == 0 ? cookie : NULL;
}

/*
 * Afterwards allocation works again, and the next arena carved has the
 * pool's own guard (a fault weakens the guards of the arena it hit, not the
 * next one's); then give everything back.
 */
static void recover(void *cookie) {
  enum { MAX = 2 * 64 + 2 };
  void *taken[MAX];
  size_t n = 0;
  uint64_t fresh = stats().fresh;
  while (n < MAX) {
    void *base;
    size_t size;
    CU_ASSERT_EQUAL_FATAL(weft__stack_alloc(&base, &size, &taken[n]), 0);
    n++;
    if (stats().fresh != fresh) {
      CU_ASSERT_STRING_EQUAL(weft__stack_guard_of(taken[n - 1]), weft__stack_guard_name());
      break;
    }
  }
  CU_ASSERT(n < MAX);
  while (n > 0) weft__stack_free(taken[--n]);
  weft__stack_free(cookie);
  weft__stack_fini();
}

static void expect_guard(void *cookie, const char *name) {
  const char *got = weft__stack_guard_of(cookie);
  CU_ASSERT_PTR_NOT_NULL_FATAL(got);
  CU_ASSERT_STRING_EQUAL(got, name);
}

static void scenario_mmap(void) {
  CU_ASSERT_EQUAL_FATAL(weft__stack_init(0), 0);
  /* Every mapping fails: no stack, nothing left mapped. */
  alloc_with_fault(FBIT(WEFT__F_MMAP), true, -ENOMEM);
  CU_ASSERT_EQUAL(stats().mapped, 0);
  CU_ASSERT_EQUAL(weft__stack_in_use(), 0);
  /* One mapping fails: the chunk is asked for again at half the size, one arena of fewer stacks (what a
   * limit on the address space needs: stack.c's chunk_map). */
  void *cookie = alloc_with_fault(FBIT(WEFT__F_MMAP), false, 0);
  CU_ASSERT(stats().mapped > 0 && stats().mapped < stats().arena_stacks);
  recover(cookie);
}

static void test_fault_mmap(void) { check_no_leak(scenario_mmap, 32); }

static void scenario_malloc(void) {
  CU_ASSERT_EQUAL_FATAL(weft__stack_init(0), 0);
  alloc_with_fault(FBIT(WEFT__F_MALLOC), false, -ENOMEM);
  CU_ASSERT_EQUAL(stats().mapped, 0);
  CU_ASSERT_EQUAL(weft__stack_in_use(), 0);
  recover(NULL);
}

static void test_fault_malloc(void) { check_no_leak(scenario_malloc, 32); }

static void scenario_madvise(void) {
  guard_env("madv");
  /* One call fails: the arena's vector call (then each stack is guarded on its own), or, where the
   * kernel has no vector call for guards, the first stack's madvise (that stack gets mprotect). */
  CU_ASSERT_EQUAL_FATAL(weft__stack_init(0), 0);
  void *c = alloc_with_fault(FBIT(WEFT__F_MADVISE), false, 0);
  const char *g = weft__stack_guard_of(c);
  CU_ASSERT(strcmp(g, "madv-guard") == 0 || strcmp(g, "mprotect") == 0);
  CU_ASSERT(stats().guard_mprotect <= 1);
  CU_ASSERT_EQUAL(stats().guard_none, 0);
  recover(c);
  /* Every madvise fails: every stack of the arena gets an mprotect guard instead. */
  CU_ASSERT_EQUAL_FATAL(weft__stack_init(0), 0);
  c = alloc_with_fault(FBIT(WEFT__F_MADVISE), true, 0);
  expect_guard(c, "mprotect");
  CU_ASSERT_EQUAL(stats().guard_mprotect, stats().mapped);
  recover(c);
  /* Both fail: no guard. */
  CU_ASSERT_EQUAL_FATAL(weft__stack_init(0), 0);
  c = alloc_with_fault(FBIT(WEFT__F_MADVISE) | FBIT(WEFT__F_MPROTECT), true, 0);
  expect_guard(c, "none");
  CU_ASSERT_EQUAL(stats().guard_none, stats().mapped);
  recover(c);
  guard_env(NULL);
}

static void test_fault_madvise(void) {
  if (!kernel_has_madv_guard()) {
    printf("\n  skipped: no MADV_GUARD_INSTALL here\n");
    return;
  }
  check_no_leak(scenario_madvise, 32);
}

static void scenario_mprotect(void) {
  guard_env("mprotect");
  CU_ASSERT_EQUAL_FATAL(weft__stack_init(0), 0);
  /* The first stack's mprotect fails: that one has no guard, the rest of its arena have theirs. */
  void *c = alloc_with_fault(FBIT(WEFT__F_MPROTECT), false, 0);
  expect_guard(c, "none");
  CU_ASSERT_EQUAL(stats().guard_none, 1);
  CU_ASSERT_EQUAL(stats().guard_mprotect, stats().mapped - 1);
  recover(c);
  guard_env(NULL);
}

static void test_fault_mprotect(void) { check_no_leak(scenario_mprotect, 32); }

/* As Argobots' leak checks: a whole cycle (init, 8 stacks taken and given back, fini) with each of its
 * calls failed in turn. Stacks of 4 MiB make the thread cache hold only 4, so that the cycle spills to
 * the pool too. */
static void fault_each_cycle(void) {
  void *cookies[8];
  int n = 0;
  if (weft__stack_init((size_t)4 << 20) != 0) return;
  for (int i = 0; i < 8; i++) {
    void *base;
    size_t size;
    int r = weft__stack_alloc(&base, &size, &cookies[n]);
    CU_ASSERT(r == 0 || r == -ENOMEM);
    if (r == 0) {
      ((volatile char *)base)[size - 1] = 1;
      n++;
    }
  }
  while (n > 0) weft__stack_free(cookies[--n]);
  weft__stack_fini();
}

static const char *fault_each_mode;
static unsigned long fault_each_points;

static void scenario_each(void) {
  uint32_t sites = FBIT(WEFT__F_MALLOC) | FBIT(WEFT__F_MMAP) | FBIT(WEFT__F_MPROTECT) | FBIT(WEFT__F_MADVISE);
  guard_env(fault_each_mode);
  unsigned long skip = 0;
  for (;; skip++) {
    weft__fault_arm(sites, skip, false);
    fault_each_cycle();
    unsigned long fired = weft__fault_disarm();
    CU_ASSERT_EQUAL(stats().mapped, 0);
    CU_ASSERT_EQUAL(weft__stack_in_use(), 0);
    if (fired == 0) break; /* the whole cycle ran: every call in it has failed once */
    CU_ASSERT_FATAL(skip < 1000);
  }
  fault_each_points = skip;
  guard_env(NULL);
}

static void test_fault_each(void) {
  const char *modes[] = {"madv", "mprotect", "none"};
  for (int k = 0; k < 3; k++) {
    if (k == 0 && !kernel_has_madv_guard()) continue;
    fault_each_mode = modes[k];
    check_no_leak(scenario_each, weft_test_slow_env() ? 2 : 8);
    /* At least each chunk's record and mapping and each arena's records, for the two arenas. */
    CU_ASSERT(fault_each_points >= 5);
  }
}

static void test_fault_altstack(void) {
  stack_t ss;
  CU_ASSERT_EQUAL_FATAL(sigaltstack(NULL, &ss), 0);
  if (!(ss.ss_flags & SS_DISABLE)) {
    printf("\n  skipped: this thread has an alternate signal stack already\n");
    return;
  }
  long before = maps_count();
  weft__fault_arm(FBIT(WEFT__F_MMAP), 0, false);
  CU_ASSERT_EQUAL(weft__overflow_thread_init(), -ENOMEM);
  CU_ASSERT_EQUAL(weft__fault_disarm(), 1);
  weft__fault_arm(FBIT(WEFT__F_SIGALTSTACK), 0, false);
  CU_ASSERT_EQUAL(weft__overflow_thread_init(), -ENOMEM);
  CU_ASSERT_EQUAL(weft__fault_disarm(), 1);
  if (maps_exact()) CU_ASSERT_EQUAL(maps_count(), before);
  CU_ASSERT_EQUAL(sigaltstack(NULL, &ss), 0);
  CU_ASSERT_TRUE(ss.ss_flags & SS_DISABLE);
  CU_ASSERT_EQUAL(weft__overflow_thread_init(), 0);
  weft__overflow_thread_fini();
  if (maps_exact()) CU_ASSERT_EQUAL(maps_count(), before);
}
#endif /* WEFT_TESTING */

/* A stack returned twice would go to two fibers: debug builds end the process there (WEFT__ASSERT). */
static void freed_twice_child(void *arg) {
  (void)arg;
  void *base, *cookie;
  size_t size;
  if (weft__stack_init(64 * 1024) != 0 || weft__stack_alloc(&base, &size, &cookie) != 0) _exit(3);
  weft__stack_free(cookie);
  weft__stack_free(cookie);
  _exit(0);
}

static void test_freed_twice(void) {
  if (!weft_test_debug_checks() || !weft_test_can_fork()) return;
  char err[2048];
  int st = weft_test_child(freed_twice_child, NULL, err, sizeof err);
  CU_ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "assertion failed: s->taken"));
  if (!strstr(err, "assertion failed: s->taken")) printf("\n  status %#x:\n%s\n", st, err);
}

int main(int argc, char **argv) {
  const char *g = getenv("WEFT_STACK_GUARD");
  outer_guard_env = g ? strdup(g) : NULL;
  static const weft_test tests[] = {
      {"alloc_free_reuse", test_alloc_free_reuse},
      {"freed_twice", test_freed_twice},
      {"sizes", test_sizes},
      {"top_aligned_writable", test_top_aligned_writable},
      {"many_trimmed", test_many_trimmed},
      {"held_then_decayed", test_held_then_decayed},
      {"trimmed_guard", test_trimmed_guard},
      {"cross_thread", test_cross_thread},
      {"threads_stress", test_threads_stress},
      {"guard_faults", test_guard_faults},
      {"guard_madv", test_guard_madv},
      {"guard_mprotect", test_guard_mprotect},
      {"guard_none", test_guard_none},
      {"budget_estimate", test_budget_estimate},
      {"altstack", test_altstack},
      {"altstack_thread_exit", test_altstack_thread_exit},
#ifdef WEFT_TESTING
      {"chain_handler", test_chain_handler},
      {"chain_default", test_chain_default},
      {"budget", test_budget},
      {"as_reserve_race", test_as_reserve_race},
      {"fault_mmap", test_fault_mmap},
      {"fault_malloc", test_fault_malloc},
      {"fault_madvise", test_fault_madvise},
      {"fault_mprotect", test_fault_mprotect},
      {"fault_each", test_fault_each},
      {"fault_altstack", test_fault_altstack},
#endif
      {"overflow_api", test_overflow_api},
      {NULL, NULL},
  };
  int r = weft_test_run(argc, argv, "stack", tests);
  free(outer_guard_env);
  return r;
}
