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
 * The fiber path is in pmap_fibers.c. All three share the range (cpu/range.c), which keeps the error of the
 * lowest failing index, so the result does not depend on the path or timing.
 */
#include "../internal.h"

#include <string.h>

#include "../cpu/cpu.h"
#include "../fiber/fiber.h"
#include "../sys.h"
#include "../sync/wait.h"
#include "pmap.h"

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

int weft__pmap_cpu(weft__range *r) {
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

/* --- the door --------------------------------------------------------------- */

int weft_pmap(size_t n, weft_index_fn fn, void *ctx, const weft_pmap_opts *opts) {
  weft_pmap_opts o = WEFT_PMAP_OPTS_INIT;
  if (opts) o = *opts;
  if (!fn || (o.kind != WEFT_CPU && o.kind != WEFT_BLOCKING) || o.flags != 0) return -EINVAL;
  if (n == 0) return 0;
  if (o.kind == WEFT_BLOCKING) {
    if (weft__fibers_start() == 0)
      return weft__pmap_fibers(n, fn, ctx, o.max_parallel, __builtin_return_address(0));
    /* The fallback: one element per claim, at most max_parallel at once. */
    weft__range r;
    weft__range_init(&r, n, fn, ctx, 1, o.max_parallel);
    return weft__pmap_cpu(&r);
  }
  weft__range r;
  weft__range_init(&r, n, fn, ctx, o.grain, 0);
  return weft__pmap_cpu(&r);
}
