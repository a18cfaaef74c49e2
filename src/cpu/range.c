/*
 * This file contains the range: the shared state of one parallel map (see
 * cpu.h), used by both backends and by the fiber path.
 */
#include "cpu.h"

#include "../sync/wait.h"

void weft__range_init(weft__range *r, size_t n, weft_index_fn fn, void *ctx, size_t grain,
                      size_t max_workers) {
  r->fn = fn;
  r->ctx = ctx;
  r->n = n;
  r->grain = grain;
  r->max_workers = max_workers;
  r->workers = 1;
  atomic_init(&r->next, 0);
  weft__lock_init(&r->err_lock);
  r->err_index = SIZE_MAX;
  r->err = 0;
  r->scope = weft__tctx_self()->scope;
  r->nslices = 0;
}

void weft__range_split(weft__range *r, size_t workers) {
  if (r->grain || workers < 2 || r->n < 2) return;
  size_t k = workers < WEFT__RANGE_SLICES ? workers : WEFT__RANGE_SLICES;
  if (k > r->n) k = r->n;
  /* Slice j is [j n / k, (j + 1) n / k), computed without overflow. */
  size_t q = r->n / k, rem = r->n % k, start = 0;
  for (size_t j = 0; j < k; j++) {
    size_t len = q + (j < rem);
    atomic_init(&r->slice[j].next, start);
    r->slice[j].end = start + len;
    start += len;
  }
  r->nslices = k;
}

/* Claim half of what is left of slice s (at least one index); 0 when it is empty. */
static size_t slice_claim(weft__slice *s, size_t *lo) {
  size_t cur = atomic_load_explicit(&s->next, memory_order_relaxed);
  for (;;) {
    if (cur >= s->end) return 0;
    size_t left = s->end - cur;
    size_t c = left > 1 ? left / 2 : 1;
    if (atomic_compare_exchange_weak_explicit(&s->next, &cur, cur + c, memory_order_relaxed,
                                              memory_order_relaxed)) {
      *lo = cur;
      return c;
    }
  }
}

void weft__range_fail(weft__range *r, size_t i, int rc) {
  weft__lock_acquire(&r->err_lock);
  if (i < r->err_index) {
    r->err_index = i;
    r->err = rc;
  }
  weft__lock_release(&r->err_lock);
}

static inline void run_chunk(weft__range *r, size_t lo, size_t c) {
  for (size_t i = lo; i < lo + c; i++) {
    int rc = r->fn(r->ctx, i);
    if (WEFT__UNLIKELY(rc != 0)) weft__range_fail(r, i, rc);
  }
}

void weft__range_drain_from(weft__range *r, size_t home) {
  /* The elements see the caller's scoped bindings, whatever thread runs them. */
  weft__tctx *tc = weft__tctx_self();
  struct weft__scope *saved = tc->scope;
  tc->scope = r->scope;
  size_t lo, c;
  if (r->nslices) {
    /* Our own slice, then the others' in turn. */
    size_t k = r->nslices;
    for (size_t j = 0; j < k; j++) {
      weft__slice *s = &r->slice[(home + j) % k];
      while ((c = slice_claim(s, &lo)) != 0) run_chunk(r, lo, c);
    }
  } else {
    while ((c = weft__range_claim(r, &lo)) != 0) run_chunk(r, lo, c);
  }
  tc->scope = saved;
}

void weft__range_drain(weft__range *r) { weft__range_drain_from(r, 0); }

int weft__range_result(weft__range *r) {
  weft__lock_acquire(&r->err_lock);
  int rc = r->err;
  weft__lock_release(&r->err_lock);
  return rc;
}
