/*
 * This file contains the interface between weft_pmap's door (pmap.c) and
 * its paths: the CPU path (pmap.c) and the fiber path (pmap_fibers.c).
 */
#ifndef WEFT_API_PMAP_H
#define WEFT_API_PMAP_H

#include "../cpu/cpu.h"

/*
 * Run every index of r on the CPU backend and return the map's result. On a
 * fiber the work is handed to weft's OpenMP team while the fiber parks.
 */
int weft__pmap_cpu(weft__range *r);

/* The key of a call site in the cost model's table: the caller's own function (of whatever type). */
typedef void (*weft__site_key)(void);

/* True when weft_pmap would accept opts (the kind and the flags; the grain and bound are free). */
static inline bool weft__pmap_opts_ok(const weft_pmap_opts *o) {
  return (o->kind == WEFT_CPU || o->kind == WEFT_BLOCKING) && (o->flags & ~WEFT_PMAP_EXPLAIN) == 0;
}

/*
 * weft_pmap past its checks (n > 0, *opts valid), for weft_pmap and
 * weft_pmap_range/weft_reduce (range.c): with rfn set (fn NULL) each chunk is
 * one call rfn(ctx, lo, hi), and only the CPU kind is allowed (range.c turns
 * a BLOCKING range map into an element map over its sub-ranges). key names
 * the call site in the cost model (the caller's function), pc is the return
 * address that EXPLAIN describes.
 */
int weft__pmap_run(size_t n, weft_index_fn fn, weft_range_fn rfn, void *ctx, const weft_pmap_opts *opts,
                   weft__site_key key, const void *pc);

/*
 * weft_pmap_range's BLOCKING kind past its checks (range.c): an element map
 * over sub-ranges of opts->grain indices (1 when 0), one fiber each.
 */
int weft__pmap_range_blocking(size_t n, weft_range_fn fn, void *ctx, const weft_pmap_opts *opts,
                              const void *pc);

/*
 * Run a BLOCKING map on fibers: at most max_parallel elements in flight (0:
 * no bound). The runtime must be running. Returns the map's result, or a
 * negative errno when nothing was started (-ENOMEM, -ESHUTDOWN).
 */
int weft__pmap_fibers(size_t n, weft_index_fn fn, void *ctx, size_t max_parallel, const void *site);

/*
 * Test control (tests link the static library): forget the calling thread's
 * model state (every site and fork cost), which pairs were explained, and
 * the cached WEFT_EXPLAIN, so that a test starts from a new process's state.
 */
void weft__pmap_test_reset(void);
/*
 * Test control: the calling thread's sites keep what they measured (element
 * costs, fork costs) but forget the ski rental's regret, the trials left
 * after a warm-up, the untimed calls since the last timed one and a cached
 * fork, so that the next call is decided on its own cost alone.
 */
void weft__pmap_test_forget_regret(void);
/*
 * Automatic-grain CPU maps so far, by the model's reason (model.h's
 * weft__why); why = -1: the ones run on the caller by a cached decision;
 * WEFT__PMAP_TEST_FORKED: the ones forked by a cached decision. Counted in
 * test builds (WEFT_TESTING) only: 0 in the others.
 */
#define WEFT__PMAP_TEST_FORKED (-2)
unsigned long weft__pmap_test_count(int why);
#ifdef WEFT_TESTING
/*
 * Test builds only: called by a fiber map's last place as it goes while the map is
 * still open (indices kept for a carrier on its way), after that place's
 * one atomic step; NULL: nothing. A test holds the leaver here while the
 * arriving carrier finishes the map. Set before the map opens.
 */
extern void (*weft__pmap_test_left_open)(void);
#endif

#endif /* WEFT_API_PMAP_H */
