/*
 * This file contains the program that test_exit runs: it uses weft the way a
 * program that never calls weft_shutdown does, then leaves with status 7 in
 * one of several ways (argv[1]). The suite checks that it exits with 7 and
 * writes nothing, in every configuration CI builds (issue 13).
 *
 *   return      CPU and blocking maps, a fiber parked for good, the host team
 *               open; return from main
 *   exit        the same, then exit() from main
 *   in-omp      the same, then exit() from inside the program's own OpenMP region
 *   from-fiber  exit() from a blocking future while other fibers are parked
 *   from-cpu    exit() from a CPU future (a task of weft's host team)
 *   busy        exit() while fibers sleep and wake by the hundred and CPU maps
 *               called from fibers keep the host team busy
 *   atexit      an atexit handler registered before any weft call uses weft
 *               (both kinds of map, a CPU future) and calls weft_shutdown,
 *               after main returns
 *
 * argv[2] "small" scales the work down (Valgrind, TSan, qemu).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft.h"

#ifdef WEFT_HAVE_OPENMP
#include <omp.h>
#endif

#define STATUS 7

static double squares[1 << 16];
static size_t n_squares = 1 << 16, n_naps = 100, n_churn = 512;

static int square(void *ctx, size_t i) {
  double *x = ctx;
  x[i] = (double)i * (double)i;
  return 0;
}

static int nap(void *ctx, size_t i) {
  (void)ctx;
  (void)i;
  return weft_sleep_ns(1000000);
}

static void *park_for_good(void *arg) {
  (void)arg;
  weft_sleep_ns(3600 * 1000000000LL);
  return NULL;
}

static void *identity(void *arg) { return arg; }

static void *exit_now(void *arg) {
  (void)arg;
  exit(STATUS);
}

/* What every mode does first: each part of weft used, nothing shut down. */
static void use_everything(void) {
  if (weft_pmap(n_squares, square, squares, NULL) != 0) abort();
  weft_pmap_opts o = WEFT_PMAP_OPTS_INIT;
  o.kind = WEFT_BLOCKING;
  if (weft_pmap(n_naps, nap, NULL, &o) != 0) abort();
  weft_future *parked;
  if (weft_future_start(WEFT_BLOCKING, park_for_good, NULL, &parked) != 0) abort();
  weft_future *g;
  if (weft_future_start(WEFT_CPU, identity, NULL, &g) != 0) abort();
  if (weft_future_get(g, -1, NULL) != 0) abort();
  weft_future_free(g);
}

/* busy: a fiber that maps on the CPU (through the host team) and sleeps, for ever. */
static int churn(void *ctx, size_t i) {
  (void)ctx;
  double x[1024];
  for (;;) {
    if (i % 16 == 0) {
      if (weft_pmap(1024, square, x, NULL) != 0) return -1;
    }
    if (weft_sleep_ns(200000) != 0) return -1;
  }
}

static void *churner(void *arg) {
  (void)arg;
  weft_pmap_opts o = WEFT_PMAP_OPTS_INIT;
  o.kind = WEFT_BLOCKING;
  weft_pmap(n_churn, churn, NULL, &o);
  return NULL;
}

/* atexit: weft still works in the program's own handlers, which run before weft's destructor. */
static void late_use(void) {
  weft_pmap_opts o = WEFT_PMAP_OPTS_INIT;
  o.kind = WEFT_BLOCKING;
  if (weft_pmap(n_naps, nap, NULL, &o) != 0) abort();
  if (weft_pmap(n_squares, square, squares, NULL) != 0) abort();
  weft_future *g;
  if (weft_future_start(WEFT_CPU, identity, NULL, &g) != 0) abort();
  if (weft_future_get(g, -1, NULL) != 0) abort();
  weft_future_free(g);
  weft_shutdown();
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "return";
  if (argc > 2 && strcmp(argv[2], "small") == 0) {
    n_squares = 4096;
    n_naps = 16;
    n_churn = 64;
  }
  if (strcmp(mode, "atexit") == 0) {
    atexit(late_use);
    weft_pmap_opts o = WEFT_PMAP_OPTS_INIT;
    o.kind = WEFT_BLOCKING;
    if (weft_pmap(n_naps, nap, NULL, &o) != 0) abort();
    if (weft_pmap(n_squares, square, squares, NULL) != 0) abort();
    return STATUS;
  }
  use_everything();
  if (strcmp(mode, "return") == 0) return STATUS;
  if (strcmp(mode, "exit") == 0) exit(STATUS);
  if (strcmp(mode, "in-omp") == 0) {
#ifdef WEFT_HAVE_OPENMP
#pragma omp parallel num_threads(2)
    {
      if (omp_get_thread_num() == 0) exit(STATUS);
    }
#endif
    exit(STATUS);
  }
  weft_future *f;
  if (strcmp(mode, "from-fiber") == 0 || strcmp(mode, "from-cpu") == 0) {
    weft_kind k = mode[5] == 'f' ? WEFT_BLOCKING : WEFT_CPU;
    if (weft_future_start(k, exit_now, NULL, &f) != 0) abort();
    weft_future_get(f, -1, NULL); /* exit() runs before this returns */
    abort();
  }
  if (strcmp(mode, "busy") == 0) {
    if (weft_future_start(WEFT_BLOCKING, churner, NULL, &f) != 0) abort();
    weft_sleep_ns(50 * 1000000LL);
    exit(STATUS);
  }
  fprintf(stderr, "exit_prog: unknown mode %s\n", mode);
  return 2;
}
