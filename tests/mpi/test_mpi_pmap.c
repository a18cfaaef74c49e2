/*
 * Suite "mpi_pmap" (under mpirun -np 4): weft_mpi_pmap's results for n = 0,
 * 1, 7 and 10^6 with both kinds, both schedules and every kind of root;
 * every index run exactly once; the same error on every rank, from the
 * lowest failing index; -EINVAL on every rank when one rank's arguments
 * differ; DYNAMIC moving uneven work off the busiest rank; a map called on
 * fibers; two maps at once on two communicators; weft_mpi_pmap_range (every
 * global index once, the lowest failing lo) and weft_mpi_reduce (bitwise the
 * reference tree on every receiving rank, bad input); DYNAMIC's default
 * chunk on work that grows with the index.
 */
#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_harness.h"
#include "mpi_internal.h"

/* What one map's elements share. */
typedef struct mctx {
  atomic_uchar *runs;  /* runs[i]: how often this rank ran index i */
  const size_t *fails; /* indices whose fn returns fail_value(i) */
  size_t nfails;
  int fail_negative; /* fail with -ENOMEM instead of 100 + i */
  int64_t unit_ns;   /* uneven work: index i waits i * i * unit_ns */
} mctx;

static int fail_value(const mctx *c, size_t i) { return c->fail_negative ? -ENOMEM : (int)(100 + i); }

/* Element i's result: elem bytes that depend on i and on the byte's position. */
static unsigned char pattern(size_t i, size_t k) { return (unsigned char)(i * 131u + k * 7u + 1u); }

static int elem_fn(void *p, size_t i, void *out, size_t elem) {
  mctx *c = p;
  atomic_fetch_add_explicit(&c->runs[i], 1, memory_order_relaxed);
  if (c->unit_ns) weft_sleep_ns((int64_t)(i * i) * c->unit_ns);
  unsigned char *o = out;
  for (size_t k = 0; k < elem; k++) o[k] = pattern(i, k);
  for (size_t f = 0; f < c->nfails; f++)
    if (c->fails[f] == i) return fail_value(c, i);
  return 0;
}

static int fn8(void *p, size_t i, void *out) { return elem_fn(p, i, out, 8); }
static int fn3(void *p, size_t i, void *out) { return elem_fn(p, i, out, 3); }
static atomic_int out_not_null; /* an element of size 0 got an out pointer (CUnit is not for other threads) */

static int fn0(void *p, size_t i, void *out) {
  if (out) atomic_store(&out_not_null, 1);
  return elem_fn(p, i, NULL, 0);
}
static int fn_rank(void *p, size_t i, void *out) { /* the result is the rank that ran it */
  elem_fn(p, i, NULL, 0);
  *(int *)out = weft_mpi_test_rank();
  return 0;
}

static weft_mpi_fn fn_for(size_t elem) { return elem == 8 ? fn8 : elem == 3 ? fn3 : fn0; }

/* True on every rank when every index in [0, n) ran exactly once, over all ranks (collective). */
static bool ran_once(atomic_uchar *runs, size_t n) {
  unsigned char *sum = malloc(n ? n : 1);
  if (n) MPI_Allreduce((void *)runs, sum, (int)n, MPI_UNSIGNED_CHAR, MPI_SUM, MPI_COMM_WORLD);
  bool ok = true;
  for (size_t i = 0; i < n && ok; i++) ok = sum[i] == 1;
  free(sum);
  return weft_mpi_test_all(ok);
}

static bool nothing_ran(atomic_uchar *runs, size_t n) {
  bool ok = true;
  for (size_t i = 0; i < n && ok; i++) ok = atomic_load(&runs[i]) == 0;
  return weft_mpi_test_all(ok);
}

static bool results_ok(const unsigned char *res, size_t n, size_t elem) {
  for (size_t i = 0; i < n; i++)
    for (size_t k = 0; k < elem; k++)
      if (res[i * elem + k] != pattern(i, k)) {
        printf("\n  rank %d: result %zu byte %zu is %u, not %u\n", weft_mpi_test_rank(), i, k,
               res[i * elem + k], pattern(i, k));
        return false;
      }
  return true;
}

typedef struct one_case {
  size_t n, elem;
  weft_kind kind;
  int schedule, root;
  size_t chunk, max_parallel;
  const size_t *fails;
  size_t nfails;
  int expect;
} one_case;

/* Run one case on every rank and check it; true on every rank when it passed everywhere (collective). */
static bool run_case(const one_case *k) {
  int rank = weft_mpi_test_rank();
  size_t n = k->n;
  atomic_uchar *runs = calloc(n ? n : 1, 1);
  bool receives = k->root == WEFT_MPI_ALL || k->root == rank;
  size_t bytes = receives ? n * k->elem : 16;
  unsigned char *res = malloc(bytes ? bytes : 1);
  memset(res, 0xAB, bytes);
  mctx c = {.runs = runs, .fails = k->fails, .nfails = k->nfails};
  weft_mpi_pmap_opts o = WEFT_MPI_PMAP_OPTS_INIT;
  o.local.kind = k->kind;
  o.local.max_parallel = k->max_parallel;
  o.schedule = k->schedule;
  o.chunk = k->chunk;
  o.root = k->root;
  int rc = weft_mpi_pmap(MPI_COMM_WORLD, n, k->elem, fn_for(k->elem), &c, res, &o);
  bool ok = rc == k->expect;
  if (!ok)
    printf("\n  rank %d: n=%zu elem=%zu kind=%d schedule=%d root=%d: returned %d, expected %d\n", rank, n,
           k->elem, k->kind, k->schedule, k->root, rc, k->expect);
  bool once = ran_once(runs, n);
  if (!once)
    printf("\n  n=%zu schedule=%d kind=%d: not every index ran exactly once\n", n, k->schedule, k->kind);
  if (receives) {
    ok = ok && results_ok(res, n, k->elem);
  } else {
    for (size_t b = 0; b < bytes; b++) ok = ok && res[b] == 0xAB; /* left alone */
  }
  free(res);
  free(runs);
  return weft_mpi_test_all(ok && once);
}

static void test_results(void) {
  const size_t sizes[] = {0, 1, 7, 1000000};
  int last = weft_mpi_test_size() - 1;
  const int roots[] = {0, last, WEFT_MPI_ALL};
  for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
    for (int kind = 0; kind < 2; kind++)
      for (int sch = 0; sch < 2; sch++)
        for (size_t r = 0; r < 3; r++) {
          one_case k = {.n = sizes[s], .elem = 8, .kind = (weft_kind)kind, .schedule = sch, .root = roots[r]};
          CU_ASSERT_TRUE(run_case(&k));
        }
}

static void test_element_sizes(void) {
  const size_t sizes[] = {7, 1000, 20011};
  const size_t elems[] = {0, 3, 8};
  for (size_t s = 0; s < 3; s++)
    for (size_t e = 0; e < 3; e++)
      for (int sch = 0; sch < 2; sch++) {
        one_case k = {
            .n = sizes[s], .elem = elems[e], .kind = WEFT_CPU, .schedule = sch, .root = WEFT_MPI_ALL};
        CU_ASSERT_TRUE(run_case(&k));
        k.root = weft_mpi_test_size() / 2;
        CU_ASSERT_TRUE(run_case(&k));
      }
  CU_ASSERT_EQUAL(atomic_load(&out_not_null), 0);
}

/* DYNAMIC with chunks set by the caller: 1, 3, more than a block, more than n. */
static void test_dynamic_chunks(void) {
  const size_t chunks[] = {1, 3, 400, 100000};
  for (size_t c = 0; c < 4; c++)
    for (int kind = 0; kind < 2; kind++) {
      one_case k = {.n = 1000,
                    .elem = 8,
                    .kind = (weft_kind)kind,
                    .schedule = WEFT_MPI_DYNAMIC,
                    .root = 0,
                    .chunk = chunks[c]};
      CU_ASSERT_TRUE(run_case(&k));
      k.max_parallel = 3; /* the automatic chunk's floor for BLOCKING, when chunk is 0 */
      k.chunk = 0;
      CU_ASSERT_TRUE(run_case(&k));
    }
}

/* The lowest failing index's error, on every rank, wherever it ran; every element still runs. */
static void test_errors(void) {
  size_t n = 1000;
  const size_t two[] = {900, 5}, last[] = {999}, many[] = {998, 700, 300, 251};
  for (int kind = 0; kind < 2; kind++)
    for (int sch = 0; sch < 2; sch++) {
      one_case k = {.n = n,
                    .elem = 8,
                    .kind = (weft_kind)kind,
                    .schedule = sch,
                    .root = WEFT_MPI_ALL,
                    .fails = two,
                    .nfails = 2,
                    .expect = 105};
      CU_ASSERT_TRUE(run_case(&k));
      k.fails = last;
      k.nfails = 1;
      k.expect = 1099;
      k.root = 1;
      CU_ASSERT_TRUE(run_case(&k));
      k.fails = many;
      k.nfails = 4;
      k.expect = 351;
      CU_ASSERT_TRUE(run_case(&k));
    }
  /* An element's own negative value is passed on as it is. */
  atomic_uchar runs[16] = {0};
  const size_t at[] = {3};
  mctx c = {.runs = runs, .fails = at, .nfails = 1, .fail_negative = 1};
  int rc = weft_mpi_pmap(MPI_COMM_WORLD, 16, 0, fn0, &c, NULL, NULL);
  CU_ASSERT_TRUE(weft_mpi_test_all(rc == -ENOMEM));
}

/* One call on every rank whose arguments may differ by rank; returns what this rank got. */
typedef struct bad_args {
  size_t n, elem;
  weft_mpi_fn fn;
  bool null_results;
  weft_mpi_pmap_opts o;
  MPI_Comm comm;
} bad_args;

static bool all_get(const bad_args *a, int expect, size_t cap) {
  atomic_uchar *runs = calloc(cap, 1);
  unsigned char *res = malloc(cap * 8);
  mctx c = {.runs = runs};
  int rc = weft_mpi_pmap(a->comm, a->n, a->elem, a->fn, &c, a->null_results ? NULL : res, &a->o);
  if (rc != expect) printf("\n  rank %d: returned %d, expected %d\n", weft_mpi_test_rank(), rc, expect);
  bool ok = weft_mpi_test_all(rc == expect) && nothing_ran(runs, cap);
  free(runs);
  free(res);
  return ok;
}

static bad_args good_args(void) {
  bad_args a = {.n = 1000, .elem = 8, .fn = fn8, .comm = MPI_COMM_WORLD};
  a.o = (weft_mpi_pmap_opts)WEFT_MPI_PMAP_OPTS_INIT;
  return a;
}

static void test_mismatch(void) {
  int rank = weft_mpi_test_rank();
  bool odd = rank == 1;
  bad_args a;
  a = good_args(), a.n = odd ? 1001 : 1000;
  CU_ASSERT_TRUE(all_get(&a, -EINVAL, 1001));
  a = good_args(), a.elem = odd ? 4 : 8;
  CU_ASSERT_TRUE(all_get(&a, -EINVAL, 1000));
  a = good_args(), a.o.schedule = odd ? WEFT_MPI_DYNAMIC : WEFT_MPI_STATIC;
  CU_ASSERT_TRUE(all_get(&a, -EINVAL, 1000));
  a = good_args(), a.o.root = odd ? WEFT_MPI_ALL : 0;
  CU_ASSERT_TRUE(all_get(&a, -EINVAL, 1000));
  a = good_args(), a.o.local.kind = odd ? WEFT_BLOCKING : WEFT_CPU;
  CU_ASSERT_TRUE(all_get(&a, -EINVAL, 1000));
  a = good_args(), a.o.schedule = WEFT_MPI_DYNAMIC, a.o.chunk = odd ? 5 : 0;
  CU_ASSERT_TRUE(all_get(&a, -EINVAL, 1000));
  /* One rank's own arguments are invalid: every rank says so. */
  a = good_args(), a.fn = rank == 0 ? NULL : fn8;
  CU_ASSERT_TRUE(all_get(&a, -EINVAL, 1000));
  a = good_args(), a.null_results = true; /* on the root */
  CU_ASSERT_TRUE(all_get(&a, -EINVAL, 1000));
  a = good_args(), a.null_results = rank != 0; /* elsewhere results are not used: fine */
  atomic_uchar *runs = calloc(1000, 1);
  mctx c = {.runs = runs};
  unsigned char *res = rank == 0 ? malloc(8000) : NULL;
  CU_ASSERT_TRUE(weft_mpi_test_all(weft_mpi_pmap(MPI_COMM_WORLD, 1000, 8, fn8, &c, res, &a.o) == 0));
  CU_ASSERT_TRUE(ran_once(runs, 1000));
  free(res);
  free(runs);
  /* Invalid on every rank. */
  a = good_args(), a.o.root = weft_mpi_test_size();
  CU_ASSERT_TRUE(all_get(&a, -EINVAL, 1000));
  a = good_args(), a.o.root = -2;
  CU_ASSERT_TRUE(all_get(&a, -EINVAL, 1000));
  a = good_args(), a.o.schedule = 7;
  CU_ASSERT_TRUE(all_get(&a, -EINVAL, 1000));
  a = good_args(), a.o.local.kind = (weft_kind)5;
  CU_ASSERT_TRUE(all_get(&a, -EINVAL, 1000));
  a = good_args(), a.o.local.flags = 0x1u; /* a reserved bit: weft_pmap's own check */
  CU_ASSERT_TRUE(all_get(&a, -EINVAL, 1000));
  a = good_args(), a.n = (size_t)INT_MAX + 1; /* MPI-3 counts are int */
  CU_ASSERT_TRUE(all_get(&a, -EOVERFLOW, 1));
  a = good_args(), a.elem = (size_t)INT_MAX + 1, a.n = 2;
  CU_ASSERT_TRUE(all_get(&a, -EOVERFLOW, 2));
  a = good_args(), a.comm = MPI_COMM_NULL;
  CU_ASSERT_TRUE(all_get(&a, -EINVAL, 1000));
  /* After all that, the ranks still agree: a normal map. */
  one_case k = {.n = 1000, .elem = 8, .kind = WEFT_CPU, .schedule = WEFT_MPI_DYNAMIC, .root = WEFT_MPI_ALL};
  CU_ASSERT_TRUE(run_case(&k));
}

/*
 * Index i waits i * i units: the last rank's block holds 58% of the work.
 * With DYNAMIC the other ranks take part of it (they finish their own
 * blocks, at most 19% of the work, long before). (The speed-up itself is
 * measured by benchmarks/mpi, not asserted here.)
 */
static void test_uneven_dynamic(void) {
  int size = weft_mpi_test_size();
  size_t n = 100;
  atomic_uchar runs[100] = {0};
  int who[100];
  mctx c = {.runs = runs, .unit_ns = 5000};
  weft_mpi_pmap_opts o = WEFT_MPI_PMAP_OPTS_INIT;
  o.local.kind = WEFT_BLOCKING;
  o.local.max_parallel = 1;
  o.schedule = WEFT_MPI_DYNAMIC;
  o.root = WEFT_MPI_ALL;
  CU_ASSERT_TRUE(weft_mpi_test_all(weft_mpi_pmap(MPI_COMM_WORLD, n, sizeof(int), fn_rank, &c, who, &o) == 0));
  CU_ASSERT_TRUE(ran_once(runs, n));
  size_t lo = weft_mpi__block_lo(n, size, size - 1);
  int moved = 0;
  for (size_t i = lo; i < n; i++) moved += who[i] != size - 1;
  if (weft_mpi_test_rank() == 0)
    printf("\n  %d of the last block's %zu indices ran elsewhere\n", moved, n - lo);
  if (weft_mpi__rma_broken()) {
    /* This MPI's one-sided atomics failed weft_mpi's probe: DYNAMIC ran as STATIC (and said so on stderr). */
    printf("\n  (DYNAMIC ran as STATIC: this MPI library's one-sided atomics are broken)\n");
    return;
  }
  CU_ASSERT_TRUE(weft_mpi_test_all(size == 1 || moved > 0));
}

/* weft_mpi_pmap called on a fiber on every rank: its collectives park the fiber. */
typedef struct fiber_map {
  int schedule;
  int rc;
  unsigned char *res;
  atomic_uchar *runs;
} fiber_map;

static void *map_on_fiber(void *arg) {
  fiber_map *f = arg;
  mctx c = {.runs = f->runs};
  weft_mpi_pmap_opts o = WEFT_MPI_PMAP_OPTS_INIT;
  o.local.kind = WEFT_BLOCKING;
  o.schedule = f->schedule;
  o.root = WEFT_MPI_ALL;
  f->rc = weft_mpi_pmap(MPI_COMM_WORLD, 5000, 8, fn8, &c, f->res, &o);
  return NULL;
}

static void test_on_fiber(void) {
  for (int sch = 0; sch < 2; sch++) {
    weft_mpi__stats before, after;
    weft_mpi__get_stats(&before);
    fiber_map f = {.schedule = sch, .rc = -1, .res = malloc(5000 * 8), .runs = calloc(5000, 1)};
    weft_future *fut;
    CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_BLOCKING, map_on_fiber, &f, &fut), 0);
    CU_ASSERT_EQUAL(weft_future_get(fut, -1, NULL), 0);
    weft_future_free(fut);
    CU_ASSERT_TRUE(weft_mpi_test_all(f.rc == 0));
    CU_ASSERT_TRUE(ran_once(f.runs, 5000));
    CU_ASSERT_TRUE(weft_mpi_test_all(results_ok(f.res, 5000, 8)));
    weft_mpi__get_stats(&after);
    /* On fibers, with MPI_THREAD_MULTIPLE, the collectives' waits went through the engine (or were done at
     * once). */
    if (weft_test_fibers_expected() && weft_mpi_test_level() == MPI_THREAD_MULTIPLE)
      CU_ASSERT(after.parked + after.fast > before.parked + before.fast);
    free(f.res);
    free(f.runs);
  }
}

/* Two maps at once, on the even and the odd ranks' communicators. */
static void test_two_communicators(void) {
  MPI_Comm half;
  int rank = weft_mpi_test_rank();
  MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
  atomic_uchar *runs = calloc(3000, 1);
  unsigned char *res = malloc(3000 * 8);
  mctx c = {.runs = runs};
  weft_mpi_pmap_opts o = WEFT_MPI_PMAP_OPTS_INIT;
  o.schedule = rank % 2 ? WEFT_MPI_DYNAMIC : WEFT_MPI_STATIC; /* each half agrees within itself */
  o.root = WEFT_MPI_ALL;
  int rc = weft_mpi_pmap(half, 3000, 8, fn8, &c, res, &o);
  CU_ASSERT_EQUAL(rc, 0);
  CU_ASSERT_TRUE(results_ok(res, 3000, 8));
  unsigned char *sum = malloc(3000);
  MPI_Allreduce((void *)runs, sum, 3000, MPI_UNSIGNED_CHAR, MPI_SUM, half);
  bool once = true;
  for (size_t i = 0; i < 3000; i++) once = once && sum[i] == 1;
  CU_ASSERT_TRUE(once);
  free(sum);
  free(res);
  free(runs);
  MPI_Comm_free(&half);
}

/* --- weft_mpi_pmap_range and weft_mpi_reduce ------------------------------------------------ */

/* Counts every index of a sub-range; fails with 5 in the one holding index 500, 9 in the one holding 900. */
static int range_fn(void *p, size_t lo, size_t hi) {
  mctx *c = p;
  int rc = 0;
  for (size_t i = lo; i < hi; i++) {
    atomic_fetch_add_explicit(&c->runs[i], 1, memory_order_relaxed);
    if (c->nfails && i == 500) rc = 5;
    if (c->nfails && i == 900 && rc == 0) rc = 9;
  }
  return rc;
}

/* Every global index once over the ranks, both schedules, both kinds; the lowest failing lo's value. */
static void test_range(void) {
  const size_t sizes[] = {0, 1, 7, 1000, 100003};
  for (size_t s = 0; s < 5; s++)
    for (int kind = 0; kind < 2; kind++)
      for (int sch = 0; sch < 2; sch++)
        for (int fail = 0; fail < 2; fail++) {
          size_t n = sizes[s];
          atomic_uchar *runs = calloc(n ? n : 1, 1);
          mctx c = {.runs = runs, .nfails = (size_t)fail};
          weft_mpi_pmap_opts o = WEFT_MPI_PMAP_OPTS_INIT;
          o.local.kind = (weft_kind)kind;
          o.local.grain = 10; /* 500 and 900 never share a sub-range */
          o.schedule = sch;
          int rc = weft_mpi_pmap_range(MPI_COMM_WORLD, n, range_fn, &c, &o);
          int want = fail && n > 500 ? 5 : 0;
          if (rc != want) printf("\n  range n=%zu kind=%d schedule=%d: %d, not %d\n", n, kind, sch, rc, want);
          CU_ASSERT_TRUE(weft_mpi_test_all(rc == want));
          CU_ASSERT_TRUE(ran_once(runs, n));
          free(runs);
        }
  /* The automatic grain, and bad input on every rank. */
  atomic_uchar *runs = calloc(20011, 1);
  mctx c = {.runs = runs};
  CU_ASSERT_TRUE(weft_mpi_test_all(weft_mpi_pmap_range(MPI_COMM_WORLD, 20011, range_fn, &c, NULL) == 0));
  CU_ASSERT_TRUE(ran_once(runs, 20011));
  free(runs);
  CU_ASSERT_TRUE(weft_mpi_test_all(weft_mpi_pmap_range(MPI_COMM_WORLD, 10, NULL, NULL, NULL) == -EINVAL));
}

/*
 * DYNAMIC's smallest claim holds a chunk of the local grain per worker: a
 * claim of fewer indices forks the local team (an explicit grain always
 * does) for work that leaves workers idle. With claims of one index per
 * worker, test_range's grain-10 map of 10^5 indices made 12,500 claims a
 * rank, and under ASan with load beside it outlived CI's timeout.
 */
static void test_claim_min(void) {
  weft_pmap_opts o = WEFT_PMAP_OPTS_INIT;
  CU_ASSERT_EQUAL(weft_mpi__claim_min(&o, 2), 2); /* automatic grain: an index per worker */
  o.grain = 1;
  CU_ASSERT_EQUAL(weft_mpi__claim_min(&o, 2), 2);
  o.grain = 10;
  CU_ASSERT_EQUAL(weft_mpi__claim_min(&o, 2), 20);
  CU_ASSERT_EQUAL(weft_mpi__claim_min(&o, 16), 160);
  o.grain = SIZE_MAX / 2;
  CU_ASSERT_EQUAL(weft_mpi__claim_min(&o, 3), SIZE_MAX); /* saturates */
  o.kind = WEFT_BLOCKING; /* the grain is the CPU kind's: fibers take max_parallel, or one per worker */
  CU_ASSERT_EQUAL(weft_mpi__claim_min(&o, 2), 2);
  o.max_parallel = 7;
  CU_ASSERT_EQUAL(weft_mpi__claim_min(&o, 2), 7);
}

static const double *red_x;

static void red_leaf(void *ctx, size_t lo, size_t hi, void *acc) {
  (void)ctx;
  double s = *(double *)acc;
  for (size_t i = lo; i < hi; i++) s += red_x[i];
  *(double *)acc = s;
}

static void red_combine(void *ctx, void *acc, const void *other) {
  (void)ctx;
  *(double *)acc += *(const double *)other;
}

/* weft_reduce's tree over [lo, hi), leaves of at most g. */
static double red_tree(size_t lo, size_t hi, size_t g) {
  if (hi - lo <= g) {
    double s = 0.0;
    for (size_t i = lo; i < hi; i++) s += red_x[i];
    return s;
  }
  size_t mid = lo + (hi - lo) / 2;
  double l = red_tree(lo, mid, g);
  return l + red_tree(mid, hi, g);
}

/* The ranks' tree over their blocks' partial sums, as weft_mpi.h describes it. */
static double red_ranks(size_t n, int lo, int hi, size_t grain) {
  if (hi - lo == 1) {
    size_t b = weft_mpi__block_lo(n, weft_mpi_test_size(), lo),
           len = weft_mpi__block_len(n, weft_mpi_test_size(), lo);
    size_t g = grain ? grain : len / WEFT_REDUCE_LEAVES + (len % WEFT_REDUCE_LEAVES != 0);
    if (!grain && g < WEFT_REDUCE_GRAIN_MIN) g = WEFT_REDUCE_GRAIN_MIN;
    return len ? red_tree(b, b + len, g) : 0.0;
  }
  int mid = lo + (hi - lo) / 2;
  double l = red_ranks(n, lo, mid, grain);
  return l + red_ranks(n, mid, hi, grain);
}

/* A sum of mixed magnitudes, bitwise the reference on every receiving rank, over runs and thread counts. */
static void test_reduce(void) {
  const size_t n = 200003;
  double *x = malloc(n * sizeof *x);
  for (size_t i = 0; i < n; i++)
    x[i] = ((i % 5 == 0) ? 1e10 : (i % 3 == 0) ? 1e-7 : 1.0) * ((i % 2) ? -1.0 : 1.0) * (double)(i % 97);
  red_x = x;
  const double zero = 0.0;
  const size_t grains[] = {0, 1000};
  for (int g = 0; g < 2; g++)
    for (int rep = 0; rep < 4; rep++) {
      weft_mpi_pmap_opts o = WEFT_MPI_PMAP_OPTS_INIT;
      o.local.grain = grains[g];
      o.local.kind = rep == 3 ? WEFT_BLOCKING : WEFT_CPU;
      o.root = rep % 2 ? WEFT_MPI_ALL : 1 % weft_mpi_test_size();
      double got = -1.0, want = red_ranks(n, 0, weft_mpi_test_size(), grains[g]);
      int rc = weft_mpi_reduce(MPI_COMM_WORLD, n, red_leaf, red_combine, NULL, &zero, &got, sizeof got, &o);
      bool receives = o.root == WEFT_MPI_ALL || o.root == weft_mpi_test_rank();
      bool ok = rc == 0 && (receives ? memcmp(&got, &want, sizeof got) == 0 : got == -1.0);
      if (!ok)
        printf("\n  rank %d: reduce grain %zu rep %d: rc %d, %.17g, want %.17g\n", weft_mpi_test_rank(),
               grains[g], rep, rc, got, want);
      CU_ASSERT_TRUE(weft_mpi_test_all(ok));
    }
  /* n = 0: the identity (combined with itself over the ranks). */
  double got = -1.0;
  weft_mpi_pmap_opts all = WEFT_MPI_PMAP_OPTS_INIT;
  all.root = WEFT_MPI_ALL;
  CU_ASSERT_TRUE(weft_mpi_test_all(
      weft_mpi_reduce(MPI_COMM_WORLD, 0, red_leaf, red_combine, NULL, &zero, &got, sizeof got, &all) == 0 &&
      got == 0.0));
  /* Bad input, on every rank: DYNAMIC, size 0, a NULL combine on one rank only. */
  weft_mpi_pmap_opts dyn = all;
  dyn.schedule = WEFT_MPI_DYNAMIC;
  got = -1.0;
  CU_ASSERT_TRUE(weft_mpi_test_all(weft_mpi_reduce(MPI_COMM_WORLD, n, red_leaf, red_combine, NULL, &zero,
                                                   &got, sizeof got, &dyn) == -EINVAL));
  CU_ASSERT_TRUE(weft_mpi_test_all(
      weft_mpi_reduce(MPI_COMM_WORLD, n, red_leaf, red_combine, NULL, &zero, &got, 0, &all) == -EINVAL));
  weft_combine_fn comb = weft_mpi_test_rank() == 0 ? NULL : red_combine;
  CU_ASSERT_TRUE(weft_mpi_test_all(
      weft_mpi_reduce(MPI_COMM_WORLD, n, red_leaf, comb, NULL, &zero, &got, sizeof got, &all) == -EINVAL));
  CU_ASSERT_TRUE(weft_mpi_test_all(got == -1.0));
  free(x);
  red_x = NULL;
}

/*
 * DYNAMIC's default chunk on work that grows with the index, as a CPU map:
 * every index once over the ranks (the factoring cap and the restart at
 * each stolen block change which claims are made, never what runs).
 */
static int grow_fn(void *p, size_t i, void *out) {
  mctx *c = p;
  atomic_fetch_add_explicit(&c->runs[i], 1, memory_order_relaxed);
  volatile uint64_t x = i;
  for (size_t k = 0; k < (i / 64) * (i / 64); k++) x = x * 6364136223846793005ull + 1;
  *(int *)out = weft_mpi_test_rank();
  return 0;
}

static void test_dynamic_default_uneven(void) {
  const size_t n = 4001;
  atomic_uchar *runs = calloc(n, 1);
  int *who = malloc(n * sizeof *who);
  mctx c = {.runs = runs};
  weft_mpi_pmap_opts o = WEFT_MPI_PMAP_OPTS_INIT;
  o.schedule = WEFT_MPI_DYNAMIC;
  o.root = WEFT_MPI_ALL;
  CU_ASSERT_TRUE(weft_mpi_test_all(weft_mpi_pmap(MPI_COMM_WORLD, n, sizeof *who, grow_fn, &c, who, &o) == 0));
  CU_ASSERT_TRUE(ran_once(runs, n));
  bool valid = true;
  for (size_t i = 0; i < n; i++) valid = valid && who[i] >= 0 && who[i] < weft_mpi_test_size();
  CU_ASSERT_TRUE(weft_mpi_test_all(valid));
  free(who);
  free(runs);
}

int main(int argc, char **argv) {
  static const weft_test tests[] = {
      {"results", test_results},
      {"element_sizes", test_element_sizes},
      {"dynamic_chunks", test_dynamic_chunks},
      {"errors", test_errors},
      {"mismatch", test_mismatch},
      {"uneven_dynamic", test_uneven_dynamic},
      {"on_fiber", test_on_fiber},
      {"two_communicators", test_two_communicators},
      {"range", test_range},
      {"claim_min", test_claim_min},
      {"reduce", test_reduce},
      {"dynamic_default_uneven", test_dynamic_default_uneven},
      {NULL, NULL},
  };
  return weft_mpi_test_main(argc, argv, "mpi_pmap", tests, MPI_THREAD_MULTIPLE);
}
