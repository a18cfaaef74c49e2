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
}

void weft__range_fail(weft__range *r, size_t i, int rc) {
  weft__lock_acquire(&r->err_lock);
  if (i < r->err_index) {
    r->err_index = i;
    r->err = rc;
  }
  weft__lock_release(&r->err_lock);
}

void weft__range_drain(weft__range *r) {
  /* The elements see the caller's scoped bindings, whatever thread runs them. */
  weft__tctx *tc = weft__tctx_self();
  struct weft__scope *saved = tc->scope;
  tc->scope = r->scope;
  size_t lo, c;
  while ((c = weft__range_claim(r, &lo)) != 0) {
    for (size_t i = lo; i < lo + c; i++) {
      int rc = r->fn(r->ctx, i);
      if (WEFT__UNLIKELY(rc != 0)) weft__range_fail(r, i, rc);
    }
  }
  tc->scope = saved;
}

int weft__range_result(weft__range *r) {
  weft__lock_acquire(&r->err_lock);
  int rc = r->err;
  weft__lock_release(&r->err_lock);
  return rc;
}
