/*
 * Suite "range": weft_pmap_range and weft_reduce. Every index exactly once
 * for every n up to 10^4 with random grains; the reduction's tree (leaves
 * and combinations as weft.h describes them, in order, and nothing else);
 * a sum of 10^6 doubles of mixed magnitude bitwise the same at 1, 2 and 4
 * threads, over 20 runs and in every context; the lowest failing sub-range
 * wins; bad input; calls from a fiber, inside a program's parallel region,
 * from an element of another map, with the BLOCKING kind, after fork() in
 * the child, and with n = SIZE_MAX; out of memory (fault injection).
 */
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef WEFT_HAVE_OPENMP
#include <omp.h>
#endif

#include "harness.h"

#include "base/sys.h"

/* --- every index exactly once -------------------------------------------------------------- */

typedef struct hits {
  size_t n;
  atomic_uchar *hit;   /* per index */
  atomic_size_t calls; /* sub-ranges (or leaves) */
  atomic_int bad;      /* a call with lo >= hi or hi > n, or a combination of parts not side by side */
  size_t grain;        /* > 0: no sub-range may be longer (an explicit grain) */
} hits;

static void hits_init(hits *h, size_t n, size_t grain) {
  h->n = n;
  h->hit = calloc(n ? n : 1, sizeof *h->hit);
  atomic_init(&h->calls, 0);
  atomic_init(&h->bad, 0);
  h->grain = grain;
}

/* Every index once, nothing else; frees the counts. */
static bool hits_once(hits *h) {
  size_t wrong = 0;
  for (size_t i = 0; i < h->n; i++) wrong += atomic_load(&h->hit[i]) != 1;
  free(h->hit);
  return wrong == 0 && atomic_load(&h->bad) == 0;
}

static void mark(hits *h, size_t lo, size_t hi) {
  if (lo >= hi || hi > h->n || (h->grain && hi - lo > h->grain)) {
    atomic_fetch_add(&h->bad, 1);
    return;
  }
  atomic_fetch_add(&h->calls, 1);
  for (size_t i = lo; i < hi; i++) atomic_fetch_add_explicit(&h->hit[i], 1, memory_order_relaxed);
}

static int range_mark(void *ctx, size_t lo, size_t hi) {
  mark(ctx, lo, hi);
  return 0;
}

/* A partial result that says what it covers: leaves and combinations must tile [0, n) in order. */
typedef struct span {
  size_t lo, hi; /* covered, [lo, hi); lo = SIZE_MAX: the identity */
  size_t leaves; /* leaves folded in */
  size_t combines;
} span;

static const span span_identity = {SIZE_MAX, 0, 0, 0};

static void leaf_mark(void *ctx, size_t lo, size_t hi, void *acc) {
  hits *h = ctx;
  span *s = acc;
  if (s->lo != SIZE_MAX || ((uintptr_t)acc % sizeof(void *)) != 0) atomic_fetch_add(&h->bad, 1);
  mark(h, lo, hi);
  s->lo = lo;
  s->hi = hi;
  s->leaves = 1;
}

static void combine_spans(void *ctx, void *acc, const void *other) {
  hits *h = ctx;
  span *a = acc;
  const span *b = other;
  if (a->hi != b->lo || a->lo == SIZE_MAX) atomic_fetch_add(&h->bad, 1); /* side by side, left then right */
  a->hi = b->hi;
  a->leaves += b->leaves;
  a->combines += b->combines + 1;
}

/* The grain weft.h promises for the automatic choice. */
static size_t auto_grain(size_t n) {
  size_t g = n / WEFT_REDUCE_LEAVES + (n % WEFT_REDUCE_LEAVES != 0);
  return g < WEFT_REDUCE_GRAIN_MIN ? WEFT_REDUCE_GRAIN_MIN : g;
}

/* Leaves of weft.h's tree: halves until a part has at most g indices. */
static size_t tree_leaves(size_t len, size_t g) {
  if (len <= g) return 1;
  return tree_leaves(len / 2, g) + tree_leaves(len - len / 2, g);
}

/* Both calls over [0, n) with grain g (0: automatic), checked. */
static bool once_at(size_t n, size_t g, const weft_pmap_opts *base) {
  weft_pmap_opts o = base ? *base : (weft_pmap_opts)WEFT_PMAP_OPTS_INIT;
  o.grain = g;
  bool ok = true;
  hits h;
  hits_init(&h, n, o.kind == WEFT_CPU ? g : (g ? g : 1));
  int rc = weft_pmap_range(n, range_mark, &h, &o);
  if (rc != 0 || !hits_once(&h)) {
    fprintf(stderr, "\n  pmap_range n %zu grain %zu kind %d: rc %d\n", n, g, (int)o.kind, rc);
    ok = false;
  }
  size_t leaf = g ? g : auto_grain(n);
  hits_init(&h, n, leaf);
  span s = {7, 7, 7, 7};
  rc = weft_reduce(n, leaf_mark, combine_spans, &h, &span_identity, &s, sizeof s, &o);
  size_t want = n ? tree_leaves(n, leaf) : 0;
  bool tree_ok = n == 0 ? s.lo == SIZE_MAX && s.leaves == 0
                        : s.lo == 0 && s.hi == n && s.leaves == want && s.combines == want - 1;
  if (rc != 0 || !hits_once(&h) || !tree_ok) {
    fprintf(stderr, "\n  reduce n %zu grain %zu kind %d: rc %d, [%zu, %zu), %zu leaves (want %zu)\n", n, g,
            (int)o.kind, rc, s.lo, s.hi, s.leaves, want);
    ok = false;
  }
  return ok;
}

static uint64_t rng_state = 88172645463325252ull;
static uint64_t rng(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

/* A random grain for n: automatic, 1, small, near n, or past it. */
static size_t random_grain(size_t n) {
  switch (rng() % 6) {
  case 0:
    return 0;
  case 1:
    return 1;
  case 2:
    return 1 + rng() % 16;
  case 3:
    return 1 + rng() % (n + 1);
  case 4:
    return n + 1 + rng() % 4;
  default:
    return 1 + rng() % 1024;
  }
}

static void test_every_n(void) {
  size_t step = weft_test_slow_env() ? 97 : 1;
  size_t bad = 0;
  for (size_t n = 0; n <= 10000; n += step)
    if (!once_at(n, random_grain(n), NULL)) bad++;
  CU_ASSERT_EQUAL(bad, 0);
  /* Sizes around the automatic grain's edges, each with the automatic grain. */
  const size_t edges[] = {1023, 1024, 1025, 2048, 2049, 1024 * 1024, 1024 * 1024 + 1, 3000001};
  for (size_t k = 0; k < sizeof edges / sizeof edges[0]; k++) CU_ASSERT(once_at(edges[k], 0, NULL));
}

/* --- determinism ----------------------------------------------------------------------------- */

#define SUM_N 1000000

static double *sum_x;

/* Mixed magnitudes and signs: an order-dependent sum (cancellation, absorption). */
static void sum_fill(void) {
  sum_x = malloc(SUM_N * sizeof *sum_x);
  CU_ASSERT_PTR_NOT_NULL_FATAL(sum_x);
  for (size_t i = 0; i < SUM_N; i++) {
    double mag = (i % 7 == 0) ? 1e12 : (i % 3 == 0) ? 1e-9 : 1.0;
    sum_x[i] = mag * sin((double)i * 0.7);
  }
}

static void sum_leaf(void *ctx, size_t lo, size_t hi, void *acc) {
  const double *x = ctx;
  double s = *(double *)acc;
  for (size_t i = lo; i < hi; i++) s += x[i];
  *(double *)acc = s;
}

static void sum_combine(void *ctx, void *acc, const void *other) {
  (void)ctx;
  *(double *)acc += *(const double *)other;
}

/* The same tree, evaluated here, one way: what every run must give, bit for bit. */
static double ref_sum(const double *x, size_t lo, size_t hi, size_t g) {
  if (hi - lo <= g) {
    double s = 0.0;
    for (size_t i = lo; i < hi; i++) s += x[i];
    return s;
  }
  size_t mid = lo + (hi - lo) / 2;
  double l = ref_sum(x, lo, mid, g);
  return l + ref_sum(x, mid, hi, g);
}

static bool same_bits(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

/* One weft_reduce of the sum with grain g: bitwise the reference? */
static bool sum_matches(size_t g, const weft_pmap_opts *base) {
  weft_pmap_opts o = base ? *base : (weft_pmap_opts)WEFT_PMAP_OPTS_INIT;
  o.grain = g;
  const double zero = 0.0;
  double got = -1.0;
  int rc = weft_reduce(SUM_N, sum_leaf, sum_combine, sum_x, &zero, &got, sizeof got, &o);
  double want = ref_sum(sum_x, 0, SUM_N, g ? g : auto_grain(SUM_N));
  if (rc != 0 || !same_bits(got, want)) {
    fprintf(stderr, "\n  sum grain %zu: rc %d, %.17g, want %.17g\n", g, rc, got, want);
    return false;
  }
  return true;
}

static void test_deterministic(void) {
  sum_fill();
  /* The tree is not a left fold: the test would prove nothing if they agreed by accident. */
  double fold = 0.0;
  for (size_t i = 0; i < SUM_N; i++) fold += sum_x[i];
  CU_ASSERT(!same_bits(fold, ref_sum(sum_x, 0, SUM_N, auto_grain(SUM_N))));
  const size_t grains[] = {0, 1000, 77777};
#ifdef WEFT_HAVE_OPENMP
  int saved = omp_get_max_threads();
  const int threads[] = {1, 2, 4};
  for (int t = 0; t < 3; t++) {
    omp_set_num_threads(threads[t]);
    for (size_t g = 0; g < 3; g++) CU_ASSERT(sum_matches(grains[g], NULL));
  }
  omp_set_num_threads(saved);
#endif
  for (int run = 0; run < 20; run++) CU_ASSERT(sum_matches(grains[run % 3], NULL));
  weft_pmap_opts blocking = {WEFT_BLOCKING, 0, 0, 0};
  CU_ASSERT(sum_matches(0, &blocking));
  blocking.max_parallel = 3;
  CU_ASSERT(sum_matches(5000, &blocking));
  free(sum_x);
  sum_x = NULL;
}

/* --- errors ------------------------------------------------------------------------------------ */

/* Fails (1) in the sub-range that holds index 500, and (2) in the one that holds index 900. */
static int fail_fn(void *ctx, size_t lo, size_t hi) {
  mark(ctx, lo, hi);
  if (lo <= 900 && 900 < hi) return 2;
  if (lo <= 500 && 500 < hi) return 1;
  return 0;
}

/* Fails (-lo - 1) in every sub-range that starts at or above 300: the lowest lo must win. */
static int fail_from_fn(void *ctx, size_t lo, size_t hi) {
  mark(ctx, lo, hi);
  return lo >= 300 ? -(int)lo - 1 : 0;
}

static void test_errors(void) {
  const size_t grains[] = {0, 1, 7, 100, 450};
  for (size_t k = 0; k < sizeof grains / sizeof grains[0]; k++) {
    for (int rep = 0; rep < 20; rep++) {
      weft_pmap_opts o = {WEFT_CPU, grains[k], 0, 0};
      hits h;
      hits_init(&h, 1000, grains[k]);
      int rc = weft_pmap_range(1000, fail_fn, &h, &o);
      /* Index 500's sub-range fails with 1, and 900's with 2 unless one sub-range holds both. */
      CU_ASSERT(rc == 1 || (rc == 2 && grains[k] == 0));
      CU_ASSERT(hits_once(&h)); /* every sub-range still ran */
      if (grains[k]) {
        hits_init(&h, 1000, grains[k]);
        rc = weft_pmap_range(1000, fail_from_fn, &h, &o);
        size_t first = (300 + grains[k] - 1) / grains[k] * grains[k]; /* the first lo >= 300 */
        CU_ASSERT_EQUAL(rc, -(int)first - 1);
        CU_ASSERT(hits_once(&h));
      }
    }
  }
  weft_pmap_opts blocking = {WEFT_BLOCKING, 10, 0, 0};
  hits h;
  hits_init(&h, 1000, 10);
  CU_ASSERT_EQUAL(weft_pmap_range(1000, fail_from_fn, &h, &blocking), -301);
  CU_ASSERT(hits_once(&h));
}

/* --- bad input ----------------------------------------------------------------------------------- */

static int never_range(void *ctx, size_t lo, size_t hi) {
  (void)lo;
  (void)hi;
  atomic_fetch_add((atomic_int *)ctx, 1);
  return 0;
}

static void never_leaf(void *ctx, size_t lo, size_t hi, void *acc) {
  (void)lo;
  (void)hi;
  (void)acc;
  atomic_fetch_add((atomic_int *)ctx, 1);
}

static void never_combine(void *ctx, void *acc, const void *other) {
  (void)acc;
  (void)other;
  atomic_fetch_add((atomic_int *)ctx, 1);
}

static void test_bad_input(void) {
  atomic_int calls;
  atomic_init(&calls, 0);
  const double id = 0.0;
  double res = 42.0;
  weft_pmap_opts bad_kind = {(weft_kind)7, 0, 0, 0}, bad_flags = {WEFT_CPU, 0, 0, 0x1u};
  CU_ASSERT_EQUAL(weft_pmap_range(10, NULL, &calls, NULL), -EINVAL);
  CU_ASSERT_EQUAL(weft_pmap_range(0, NULL, &calls, NULL), -EINVAL);
  CU_ASSERT_EQUAL(weft_pmap_range(10, never_range, &calls, &bad_kind), -EINVAL);
  CU_ASSERT_EQUAL(weft_pmap_range(10, never_range, &calls, &bad_flags), -EINVAL);
  for (size_t n = 0; n <= 5000; n += 5000) {
    CU_ASSERT_EQUAL(weft_reduce(n, NULL, never_combine, &calls, &id, &res, sizeof res, NULL), -EINVAL);
    CU_ASSERT_EQUAL(weft_reduce(n, never_leaf, NULL, &calls, &id, &res, sizeof res, NULL), -EINVAL);
    CU_ASSERT_EQUAL(weft_reduce(n, never_leaf, never_combine, &calls, NULL, &res, sizeof res, NULL), -EINVAL);
    CU_ASSERT_EQUAL(weft_reduce(n, never_leaf, never_combine, &calls, &id, NULL, sizeof res, NULL), -EINVAL);
    CU_ASSERT_EQUAL(weft_reduce(n, never_leaf, never_combine, &calls, &id, &res, 0, NULL), -EINVAL);
    CU_ASSERT_EQUAL(weft_reduce(n, never_leaf, never_combine, &calls, &id, &res, SIZE_MAX, NULL), -EINVAL);
    CU_ASSERT_EQUAL(
        weft_reduce(n, never_leaf, never_combine, &calls, &id, &res, (size_t)PTRDIFF_MAX + 1, NULL), -EINVAL);
    CU_ASSERT_EQUAL(weft_reduce(n, never_leaf, never_combine, &calls, &id, &res, sizeof res, &bad_kind),
                    -EINVAL);
    CU_ASSERT_EQUAL(weft_reduce(n, never_leaf, never_combine, &calls, &id, &res, sizeof res, &bad_flags),
                    -EINVAL);
  }
  CU_ASSERT_EQUAL(atomic_load(&calls), 0);
  CU_ASSERT(res == 42.0); /* result left alone */
  /* n = 0: nothing runs; the reduction's result is the identity. */
  CU_ASSERT_EQUAL(weft_pmap_range(0, never_range, &calls, NULL), 0);
  const double seven = 7.0;
  CU_ASSERT_EQUAL(weft_reduce(0, never_leaf, never_combine, &calls, &seven, &res, sizeof res, NULL), 0);
  CU_ASSERT(res == 7.0);
  CU_ASSERT_EQUAL(atomic_load(&calls), 0);
  /* A partial result far larger than a cache line, of an odd size. */
  enum { BIG = 1000 };
  typedef struct big {
    unsigned char b[BIG - 1];
  } big;
  static big bid, bres;
  CU_ASSERT_EQUAL(weft_reduce(100000, never_leaf, never_combine, &calls, &bid, &bres, sizeof bid, NULL), 0);
  CU_ASSERT(atomic_load(&calls) > 0);
}

#ifdef WEFT_TESTING
/*
 * Out of memory: the partial results cannot be had: -ENOMEM, nothing run,
 * result left alone; a single leaf needs no memory, nor a tree small enough
 * for weft_reduce's frame; weft_pmap_range's CPU kind none at all.
 */
static void test_out_of_memory(void) {
  atomic_int calls;
  atomic_init(&calls, 0);
  const double id = 0.0;
  double res = 42.0;
  weft__fault_arm_here(1u << WEFT__F_MALLOC, 0, true);
  int rc = weft_reduce(100000, never_leaf, never_combine, &calls, &id, &res, sizeof res, NULL);
  bool untouched = res == 42.0;
  int one_leaf = weft_reduce(1000, never_leaf, never_combine, &calls, &id, &res, sizeof res, NULL);
  weft__fault_disarm();
  CU_ASSERT_EQUAL(rc, -ENOMEM);
  CU_ASSERT(untouched);
  CU_ASSERT_EQUAL(one_leaf, 0);
  CU_ASSERT_EQUAL(atomic_load(&calls), 1); /* the single leaf only */
  CU_ASSERT(res == 0.0);                   /* the single leaf's result: the identity */
  /* weft_pmap_range's CPU kind allocates nothing: it runs with every allocation failing. */
  hits h;
  hits_init(&h, 5000, 0);
  weft__fault_arm_here(1u << WEFT__F_MALLOC, 0, true);
  rc = weft_pmap_range(5000, range_mark, &h, NULL);
  weft__fault_disarm();
  CU_ASSERT_EQUAL(rc, 0);
  CU_ASSERT(hits_once(&h));
  /* A small tree's partial results live in weft_reduce's frame: no allocation, the same bits. */
  double *x = malloc(10000 * sizeof *x);
  CU_ASSERT_PTR_NOT_NULL_FATAL(x);
  for (size_t i = 0; i < 10000; i++) x[i] = (i % 7 == 0 ? 1e12 : 1.0) * sin((double)i * 0.7);
  double small = -1.0;
  weft__fault_arm_here(1u << WEFT__F_MALLOC, 0, true);
  rc = weft_reduce(10000, sum_leaf, sum_combine, x, &id, &small, sizeof small, NULL);
  weft__fault_disarm();
  CU_ASSERT_EQUAL(rc, 0);
  CU_ASSERT(same_bits(small, ref_sum(x, 0, 10000, auto_grain(10000))));
  free(x);
  /* And the reduction works again once memory is back. */
  CU_ASSERT_EQUAL(weft_reduce(100000, never_leaf, never_combine, &calls, &id, &res, sizeof res, NULL), 0);
}
#endif

/* n = SIZE_MAX: valid; the call starts running sub-ranges (checked in a child, which leaves from fn). */
static void huge_range_child_fn_check(size_t lo, size_t hi) { _exit(lo < hi ? 0 : 4); }

static int huge_range(void *ctx, size_t lo, size_t hi) {
  (void)ctx;
  huge_range_child_fn_check(lo, hi);
  return 0;
}

static void huge_leaf(void *ctx, size_t lo, size_t hi, void *acc) {
  (void)ctx;
  (void)acc;
  huge_range_child_fn_check(lo, hi);
}

static void huge_child(void *arg) {
  alarm(20);
  const double id = 0.0;
  double res;
  int rc = arg ? weft_reduce(SIZE_MAX, huge_leaf, sum_combine, NULL, &id, &res, sizeof res, NULL)
               : weft_pmap_range(SIZE_MAX, huge_range, NULL, NULL);
  fprintf(stderr, "returned %d without running anything\n", rc);
  _exit(1);
}

static void test_huge_n(void) {
  if (!weft_test_can_fork()) return;
  for (int k = 0; k < 2; k++) {
    char err[512];
    int st = weft_test_child(huge_child, k ? (void *)1 : NULL, err, sizeof err);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) printf("\n  child %d: status 0x%x: %s\n", k, st, err);
    CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
}

/* --- contexts ---------------------------------------------------------------------------------------- */

static void *on_fiber(void *arg) {
  (void)arg;
  intptr_t ok =
      once_at(5000, 0, NULL) && once_at(3000, 64, NULL) && sum_matches(0, NULL) && sum_matches(1000, NULL);
  weft_pmap_opts blocking = {WEFT_BLOCKING, 0, 4, 0};
  ok &= once_at(200, 16, &blocking);
  return (void *)ok;
}

static void test_from_fiber(void) {
  sum_fill();
  weft_future *f[4];
  for (int i = 0; i < 4; i++)
    CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_BLOCKING, on_fiber, NULL, &f[i]), 0);
  for (int i = 0; i < 4; i++) {
    void *r = NULL;
    CU_ASSERT_EQUAL(weft_future_get(f[i], -1, &r), 0);
    CU_ASSERT_EQUAL((intptr_t)r, 1);
    weft_future_free(f[i]);
  }
  free(sum_x);
  sum_x = NULL;
}

static void test_blocking(void) {
  weft_pmap_opts o = {WEFT_BLOCKING, 0, 0, 0};
  CU_ASSERT(once_at(300, 0, &o));
  CU_ASSERT(once_at(1000, 33, &o));
  o.max_parallel = 2;
  CU_ASSERT(once_at(1000, 7, &o));
}

#ifdef WEFT_HAVE_OPENMP
static void test_in_parallel_region(void) {
  sum_fill();
  atomic_int bad;
  atomic_init(&bad, 0);
#pragma omp parallel num_threads(2)
  {
    if (!once_at(4000, 0, NULL) || !once_at(4000, 50, NULL) || !sum_matches(0, NULL) ||
        !sum_matches(3000, NULL))
      atomic_fetch_add(&bad, 1);
#pragma omp single
    if (!sum_matches(0, NULL)) atomic_fetch_add(&bad, 1);
  }
  CU_ASSERT_EQUAL(atomic_load(&bad), 0);
  free(sum_x);
  sum_x = NULL;
}
#endif

static int outer_element(void *ctx, size_t i) {
  (void)i;
  atomic_int *bad = ctx;
  if (!once_at(3000, 0, NULL) || !sum_matches(i % 2 ? 0 : 20000, NULL)) atomic_fetch_add(bad, 1);
  return 0;
}

static void test_in_element(void) {
  sum_fill();
  atomic_int bad;
  atomic_init(&bad, 0);
  weft_pmap_opts grain1 = {WEFT_CPU, 1, 0, 0};
  CU_ASSERT_EQUAL(weft_pmap(6, outer_element, &bad, &grain1), 0);
  CU_ASSERT_EQUAL(weft_pmap(6, outer_element, &bad, NULL), 0);
  CU_ASSERT_EQUAL(atomic_load(&bad), 0);
  free(sum_x);
  sum_x = NULL;
}

static void fork_child(void *arg) {
  (void)arg;
  alarm(20); /* a hang (a region on libgomp's lost threads) ends as SIGALRM */
  bool ok = once_at(100000, 0, NULL) && once_at(100000, 64, NULL) && sum_matches(0, NULL);
  _exit(ok ? 0 : 3);
}

static void test_after_fork(void) {
  if (WEFT_TEST_TSAN || WEFT_TEST_ASAN || !weft_test_can_fork()) {
    printf("\n    skipped under a sanitizer or qemu-user");
    return;
  }
  sum_fill();
  CU_ASSERT(once_at(100000, 0, NULL) && sum_matches(0, NULL)); /* the runtime's team exists now */
  char err[512];
  int st = weft_test_child(fork_child, NULL, err, sizeof err);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) printf("\n  child: status 0x%x, stderr: %s\n", st, err);
  CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  CU_ASSERT(sum_matches(0, NULL)); /* and the parent goes on */
  free(sum_x);
  sum_x = NULL;
}

int main(int argc, char **argv) {
  static const weft_test tests[] = {
      {"every_n", test_every_n},
      {"deterministic", test_deterministic},
      {"errors", test_errors},
      {"bad_input", test_bad_input},
      {"huge_n", test_huge_n},
#ifdef WEFT_TESTING
      {"out_of_memory", test_out_of_memory},
#endif
      {"from_fiber", test_from_fiber},
      {"blocking", test_blocking},
#ifdef WEFT_HAVE_OPENMP
      {"in_parallel_region", test_in_parallel_region},
#endif
      {"in_element", test_in_element},
      {"after_fork", test_after_fork},
      {NULL, NULL},
  };
  return weft_test_run(argc, argv, "range", tests);
}
