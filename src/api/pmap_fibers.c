/*
 * This file contains the fiber path of weft_pmap: a BLOCKING map with the
 * fiber runtime running (the door and the CPU path are in pmap.c).
 */
#include "../internal.h"

#include "../fiber/fiber.h"
#include "../sys.h"
#include "../sync/wait.h"
#include "pmap.h"

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

int weft__pmap_fibers(size_t n, weft_index_fn fn, void *ctx, size_t max_parallel, const void *site) {
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
    weft__pmap_cpu(&m->r);
  }
  rc = weft__range_result(&m->r);
  weft__free(m);
  return rc;
}
