/*
 * This file contains weft_pmap: it checks the call, then sends it down one
 * of three paths.
 *
 *   CPU kind, or BLOCKING without fibers   the CPU backend (cpu/), on the
 *                                          calling thread's OpenMP team;
 *   the same, called on a fiber            handed to weft's OpenMP team as a
 *                                          job while the fiber parks (a
 *                                          fiber must not run OpenMP on its
 *                                          carrier thread);
 *   BLOCKING kind with fibers              one fiber per element in flight,
 *                                          each claiming indices from the
 *                                          shared range.
 *
 * All three share the range (cpu/range.c), which keeps the error of the
 * lowest failing index, so the result does not depend on the path or timing.
 */
#include "../internal.h"

#include <string.h>

#include "../cpu/cpu.h"
#include "../fiber/fiber.h"
#include "../sys.h"
#include "../sync/wait.h"

/* --- the CPU path ---------------------------------------------------------- */

/* A parallel map handed from a fiber to the CPU backend. */
typedef struct range_job {
  weft__job job;
  weft__range *r;
  weft__waiter w; /* the parked fiber */
} range_job;

static void range_job_run(weft__job *j) {
  range_job *rj = weft__container_of(j, range_job, job);
  weft__cpu_run_range(rj->r);
  /* Last touch of rj: the fiber may return and pop its frame at once. */
  weft__waiter_wake(&rj->w);
}

static int run_cpu(weft__range *r) {
  if (weft__parkable_self()) {
    range_job rj = {.r = r};
    rj.job.run = range_job_run;
    /* Not cancellable: the elements use this frame until the last one ends. */
    weft__waiter_init(&rj.w, false);
    if (weft__cpu_submit(&rj.job) == 0)
      weft__waiter_wait(&rj.w, -1);
    else
      weft__range_drain(r); /* no CPU workers at all: run here, blocking the carrier */
  } else {
    weft__cpu_run_range(r);
  }
  return weft__range_result(r);
}

/* --- the fiber path -------------------------------------------------------- */

typedef struct fiber_map {
  weft__range r;
  atomic_size_t live; /* fibers not yet done: the last one wakes the caller */
  weft__waiter *w;    /* the caller's waiter */
  size_t nfibers;
  weft__fiber fibers[];
} fiber_map;

static void fm_entry(weft__fiber *f) {
  fiber_map *m = f->arg;
  weft__range_drain(&m->r);
}

static void fm_done(weft__fiber *f) {
  fiber_map *m = f->arg;
  /* acq_rel: the caller, woken by the last one, sees every element's writes. */
  if (atomic_fetch_sub_explicit(&m->live, 1, memory_order_acq_rel) == 1) weft__waiter_wake(m->w);
}

static const weft__fiber_ops fm_ops = {fm_entry, fm_done, fm_done};

static int run_fibers(size_t n, weft_index_fn fn, void *ctx, size_t max_parallel, const void *site) {
  size_t k = max_parallel && max_parallel < n ? max_parallel : n;
  size_t bytes;
  if (__builtin_mul_overflow(k, sizeof(weft__fiber), &bytes) ||
      __builtin_add_overflow(bytes, sizeof(fiber_map), &bytes))
    return -ENOMEM;
  fiber_map *m = weft__malloc_aligned(WEFT__CACHELINE, bytes);
  if (!m) return -ENOMEM;
  weft__range_init(&m->r, n, fn, ctx, 1, 0);
  m->r.workers = k;
  atomic_init(&m->live, k);
  m->nfibers = k;
  weft__waiter w;
  weft__waiter_init(&w, false);
  m->w = &w;
  for (size_t i = 0; i < k; i++) {
    weft__fiber_prepare(&m->fibers[i], &fm_ops, m);
    m->fibers[i].spawn_site = site;
  }
  int rc = weft__fiber_spawn_array(m->fibers, k);
  if (rc < 0) {
    weft__free(m);
    return rc;
  }
  weft__waiter_wait(&w, -1);
  /*
   * Fibers that found no stack ended without running anything: whatever
   * indices they left goes down the CPU path now, so no element is lost.
   */
  if (weft__load_relaxed(&m->r.next) < n) {
    m->r.grain = 1;
    run_cpu(&m->r);
  }
  rc = weft__range_result(&m->r);
  weft__free(m);
  return rc;
}

/* --- the door --------------------------------------------------------------- */

int weft_pmap(size_t n, weft_index_fn fn, void *ctx, const weft_pmap_opts *opts) {
  weft_pmap_opts o = WEFT_PMAP_OPTS_INIT;
  if (opts) o = *opts;
  if (!fn || (o.kind != WEFT_CPU && o.kind != WEFT_BLOCKING) || o.flags != 0) return -EINVAL;
  if (n == 0) return 0;
  if (o.kind == WEFT_BLOCKING) {
    if (weft__fibers_start() == 0) return run_fibers(n, fn, ctx, o.max_parallel, __builtin_return_address(0));
    /* The fallback: one element per claim, at most max_parallel at once. */
    weft__range r;
    weft__range_init(&r, n, fn, ctx, 1, o.max_parallel);
    return run_cpu(&r);
  }
  weft__range r;
  weft__range_init(&r, n, fn, ctx, o.grain, 0);
  return run_cpu(&r);
}
