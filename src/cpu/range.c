/*
 * This file contains the range: the shared state of one parallel map (see
 * cpu.h), used by both backends and by the fiber path.
 */
#include "range.h"

#include "cpu.h"

#include "../base/clock.h"
#include "../sync/tctx.h"

void weft__range_init(weft__range *r, size_t n, weft_index_fn fn, void *ctx, size_t grain,
                      size_t max_workers) {
  r->fn = fn;
  r->rfn = NULL;
  r->ctx = ctx;
  r->n = n;
  r->grain = grain;
  r->max_workers = max_workers;
  r->workers = 1;
  r->stolen = 0;
  atomic_init(&r->next, 0);
  weft__lock_init(&r->err_lock, WEFT__LOCK_LEAF);
  r->err_index = SIZE_MAX;
  r->err = 0;
  r->scope = weft__tctx_self()->scope;
  r->nslices = 0;
  r->time_first = false;
  r->static_ok = false;
  r->blocking = false;
  r->first_count = 0;
  r->first_ns = 0;
  r->time_done = false;
  r->done_at = 0;
}

void weft__range_split(weft__range *r, size_t workers) {
  /* Indices below next already ran (the model's probe, on the caller). */
  size_t base = weft__load_relaxed(&r->next);
  size_t len = r->n - base;
  if (r->grain || workers < 2 || len < 2) return;
  size_t k = workers < WEFT__RANGE_SLICES ? workers : WEFT__RANGE_SLICES;
  if (k > len) k = len;
  /* Slice j is [base + j len / k, base + (j + 1) len / k), computed without overflow. */
  size_t q = len / k, rem = len % k, start = base;
  for (size_t j = 0; j < k; j++) {
    size_t sl = q + (j < rem);
    atomic_init(&r->slice[j].next, start);
    r->slice[j].end = start + sl;
    start += sl;
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
  if (r->rfn) {
    /* A range map: the chunk is one sub-range; its lo stands for it among the errors. */
    int rc = r->rfn(r->ctx, lo, lo + c);
    if (WEFT__UNLIKELY(rc != 0)) weft__range_fail(r, lo, rc);
    return;
  }
  /* In registers: the calls could write *r for all the compiler knows, so r->fn would be read again. */
  weft_index_fn fn = r->fn;
  void *ctx = r->ctx;
  for (size_t i = lo, hi = lo + c; i < hi; i++) {
    int rc = fn(ctx, i);
    if (WEFT__UNLIKELY(rc != 0)) weft__range_fail(r, i, rc);
  }
}

/* The slice of a split map that this thread is running an element of (weft__range_caller_busy). */
static __thread weft__slice *tls_drain;

bool weft__range_caller_busy(void) {
  weft__slice *s = tls_drain;
  return s && weft__load_relaxed(&s->next) < s->end;
}

/* Run one chunk timed, for the model: home 0's first chunk, when the caller asked. */
static void run_chunk_timed(weft__range *r, size_t lo, size_t c) {
  int64_t t0 = weft__mono_ns();
  run_chunk(r, lo, c);
  r->first_ns = weft__mono_ns() - t0;
  r->first_count = c;
}

void weft__range_drain_from(weft__range *r, size_t home) {
  /* The elements see the caller's scoped bindings, whatever thread runs them. */
  weft__tctx *tc = weft__tctx_self();
  struct weft__scope *saved = tc->scope;
  tc->scope = r->scope;
  size_t lo, c;
  if (r->nslices) {
    /*
     * Only split maps are recorded: they run on OS threads (OpenMP's or the
     * pool's), whose drains nest last-in first-out. The fiber path's maps
     * are never split, and fibers interleave on one thread.
     */
    size_t k = r->nslices;
    weft__slice *saved_drain = tls_drain;
    tls_drain = &r->slice[home % k];
    /* Our own slice, then the others' in turn. */
    for (size_t j = 0; j < k; j++) {
      weft__slice *s = &r->slice[(home + j) % k];
      if (j == 0 && home == 0 && r->time_first && (c = slice_claim(s, &lo)) != 0) run_chunk_timed(r, lo, c);
      while ((c = slice_claim(s, &lo)) != 0) run_chunk(r, lo, c);
    }
    tls_drain = saved_drain;
  } else {
    while ((c = weft__range_claim(r, &lo)) != 0) run_chunk(r, lo, c);
  }
  if (home == 0 && r->time_done) r->done_at = weft__mono_ns();
  tc->scope = saved;
}

void weft__range_drain(weft__range *r) { weft__range_drain_from(r, 0); }

void weft__range_static_part(weft__range *r, size_t k, weft__static_part *out) {
  if (r->rfn)
    out->f.rfn = r->rfn;
  else
    out->f.fn = r->fn;
  out->is_range = r->rfn != NULL;
  out->ctx = r->ctx;
  out->base = weft__load_relaxed(&r->next);
  out->n = r->n;
  out->grain = r->grain;
  WEFT__ASSERT(k <= UINT32_MAX);
  out->k = (uint32_t)k;
  out->scope = r->scope;
  out->r = r;
}

void weft__range_run_static(const weft__static_part *p, size_t home) {
  size_t len = p->n - p->base, lo, hi;
  if (p->grain) {
    /* The home-th chunk of the grain (the caller made sure there are at most k). */
    size_t chunks = len / p->grain + (len % p->grain != 0);
    if (home >= chunks) return;
    lo = p->base + home * p->grain;
    hi = len - home * p->grain > p->grain ? lo + p->grain : p->n;
  } else {
    /* The home-th of k slices, as weft__range_split cuts them. */
    size_t q = len / p->k, rem = len % p->k;
    lo = p->base + home * q + (home < rem ? home : rem);
    hi = lo + q + (home < rem);
  }
  if (lo >= hi) return;
  weft__tctx *tc = weft__tctx_self();
  struct weft__scope *saved = tc->scope;
  tc->scope = p->scope;
  /* Thread-private: only this thread reads it (weft__range_caller_busy, from its elements). */
  weft__slice mine;
  atomic_init(&mine.next, lo);
  mine.end = hi;
  weft__slice *saved_drain = tls_drain;
  tls_drain = &mine;
  weft__range *r = p->r;
  bool timed = home == 0 && r->time_first;
  int64_t t0 = timed ? weft__mono_ns() : 0;
  if (p->is_range) {
    /* One sub-range; mine.next stays below its end while it runs (the part is still busy). */
    int rc = p->f.rfn(p->ctx, lo, hi);
    if (WEFT__UNLIKELY(rc != 0)) weft__range_fail(r, lo, rc);
  } else {
    weft_index_fn fn = p->f.fn;
    void *ctx = p->ctx;
    for (size_t i = lo; i < hi; i++) {
      weft__store_relaxed(&mine.next, i + 1);
      int rc = fn(ctx, i);
      if (WEFT__UNLIKELY(rc != 0)) weft__range_fail(r, i, rc);
    }
  }
  if (timed || (home == 0 && r->time_done)) {
    /* Home 0 is the caller: r is its own, and no other thread reads these. */
    int64_t t1 = weft__mono_ns();
    if (timed) {
      r->first_ns = t1 - t0;
      r->first_count = hi - lo;
    }
    if (r->time_done) r->done_at = t1;
  }
  tls_drain = saved_drain;
  tc->scope = saved;
}

int weft__range_result(weft__range *r) {
  weft__lock_acquire(&r->err_lock);
  int rc = r->err;
  weft__lock_release(&r->err_lock);
  return rc;
}
