/*
 * This file contains the fiber path of weft_pmap: a BLOCKING map with the
 * fiber runtime running (the door and the CPU path are in pmap.c).
 *
 * A map is a fiber source (fiber/fiber.h), a "gang": nothing is allocated
 * per element, and no fiber exists before a carrier makes it.
 *
 *   - The indices are split into one slice per carrier (up to GANG_SLICES),
 *     each with its own claim counter on its own cache line. A fiber claims
 *     one index at a time from the slice of the carrier it runs on, then from
 *     the others' in turn: carriers meet only at the end.
 *   - A fiber runs element after element until none is left. When an element
 *     parks, its carrier makes the gang's next fiber at once and runs it
 *     first (fiber.h): so elements that block are all in flight after one
 *     pass, a fiber and a page each, while elements that never block run one
 *     after the other on one fiber per carrier, at the cost of a claim each.
 *   - Idle carriers make a fiber from the gang when they have nothing else to
 *     do, so every carrier joins in, whichever thread called the map: a
 *     plain thread, a fiber (which parks meanwhile, its carrier joining in
 *     too), or an OpenMP thread. The fiber made when one parks claims from
 *     its carrier's own slice only: the first carrier to arrive would
 *     otherwise start every element before the others have woken up, and
 *     started fibers never move. An idle carrier takes from any slice, so a
 *     carrier that is busy elsewhere does not hold its slice back.
 *
 * `live` counts places: fibers alive or being made. At most max_parallel; a
 * place is reserved before a fiber claims anything, so the count cannot
 * reach zero while a fiber could still start an element. A fiber ends only
 * when no index is left to claim, and the first to find none closes the
 * source (no carrier reaches the gang through the list after that); the last
 * place to go wakes the caller, whose frame holds the gang.
 *
 * The closed mark is a bit of the same word as the count (GANG_CLOSED), so
 * that "the last place went, and the gang is closed" is one atomic step, and
 * so is "a place is taken, and the gang is open". With two words a place
 * could go (count 0, still open: indices kept for a carrier on its way),
 * the arriving carrier take one and close the gang, and the first leaver,
 * reading the mark only then, finish the gang while the new fiber still ran:
 * the caller returned under a live fiber, and the gang finished twice (the
 * runtime's live count went below zero and weft_shutdown waited forever).
 *
 * When no stack can be had for a fiber (address space, memory, a mapping
 * limit), the gang is "starved": it stops making fibers and is closed, and
 * the fibers it has go on claiming indices after their elements block (they
 * would otherwise end, expecting a successor that can no longer be made), from
 * every slice (no carrier arrives through the list any more): the map runs
 * with as many elements in flight as it had stacks. A starved gang that had
 * no fiber left (every stack was taken by other work, or its last fiber ended
 * just before the failure) wakes the caller with indices left; the caller
 * then runs one of them itself, on its own thread or fiber, which needs no new
 * resource, and opens the gang again, so that the map goes on with fibers as
 * soon as a stack can be had and never stops making progress meanwhile. It
 * never falls back on the CPU path: that needs the OpenMP runtime's threads,
 * whose creation fails under the same limits, and libgomp then ends the
 * process. No element is lost and none runs twice.
 */
#include "../base/internal.h"

#include "../fiber/fiber.h"
#include "../sync/wait.h"
#include "pmap.h"

#define GANG_SLICES 32
#define GANG_CLOSED (~(SIZE_MAX >> 1)) /* the top bit of gang.live */

typedef struct gang_slice {
  WEFT__ALIGNED_CL atomic_size_t next; /* next unclaimed index of [.., end) */
  size_t end;
  atomic_bool attached; /* its carrier has arrived: others may take from it freely */
} gang_slice;

typedef struct gang {
  weft__source src;
  weft__range r;                       /* fn, ctx, the caller's scope, the lowest failing index */
  size_t max_live;                     /* max_parallel, or SIZE_MAX */
  weft__waiter *w;                     /* the caller's */
  size_t nslices;                      /* slice[0..nslices) */
  WEFT__ALIGNED_CL atomic_size_t live; /* places (fibers alive or being made), | GANG_CLOSED once no index is
                                          left (or starved) and the source is being closed */
  atomic_bool starved;                 /* a fiber could not get a stack */
  gang_slice slice[GANG_SLICES];
} gang;

/*
 * May a fiber on carrier `home` take from slice j? Its own slice, always.
 * Another carrier's once that carrier has arrived (it shares from then on),
 * or when it will not come soon (busy in a fiber, or gone): what a waking
 * carrier is about to start is not taken from under it.
 */
static bool slice_open_to(gang *g, size_t j, size_t home) {
  return j == home || atomic_load_explicit(&g->slice[j].attached, memory_order_relaxed) ||
         atomic_load_explicit(&g->starved, memory_order_relaxed) || !weft__carrier_may_arrive((unsigned)j);
}

static void attach(gang *g, size_t home) {
  if (!atomic_load_explicit(&g->slice[home].attached, memory_order_relaxed))
    atomic_store_explicit(&g->slice[home].attached, true, memory_order_relaxed);
}

/*
 * Claim one index, from slice `home` first, then from the others that are
 * open to it. Returns 1 with *out set, 0 when every slice is empty (they only
 * shrink), -1 when what is left is kept for carriers that are arriving.
 */
static int gang_claim(gang *g, size_t home, size_t *out) {
  int kept = 0;
  for (size_t k = 0; k < g->nslices; k++) {
    size_t j = (home + k) % g->nslices;
    gang_slice *s = &g->slice[j];
    /* Relaxed: the index is the only data; the elements' writes are ordered by the final wake. */
    size_t cur = atomic_load_explicit(&s->next, memory_order_relaxed);
    if (cur >= s->end) continue;
    if (!slice_open_to(g, j, home)) {
      kept = -1;
      continue;
    }
    while (cur < s->end)
      if (atomic_compare_exchange_weak_explicit(&s->next, &cur, cur + 1, memory_order_relaxed,
                                                memory_order_relaxed)) {
        *out = cur;
        return 1;
      }
  }
  return kept;
}

/* Could the calling carrier claim an index now: from its own slice, or (anywhere) from any open to it? */
static bool gang_has_work(gang *g, bool anywhere) {
  size_t home = weft__fiber_carrier_id() % g->nslices;
  for (size_t k = 0; k < (anywhere ? g->nslices : 1); k++) {
    size_t j = (home + k) % g->nslices;
    gang_slice *s = &g->slice[j];
    if (atomic_load_explicit(&s->next, memory_order_relaxed) < s->end && slice_open_to(g, j, home))
      return true;
  }
  return false;
}

/* Is every index claimed? (Slices only shrink.) */
static bool gang_drained(gang *g) {
  for (size_t j = 0; j < g->nslices; j++)
    if (atomic_load_explicit(&g->slice[j].next, memory_order_relaxed) < g->slice[j].end) return false;
  return true;
}

/*
 * Asked by a carrier before it sleeps, which attaches it: its slice is no
 * longer kept for it (it may have looked for work just before the gang
 * opened, so that the gang's wake-up missed it, and find the gang at its
 * bound now; asleep, it would never come for its slice). Asked by another
 * thread: is any index left to start, below the bound?
 */
static bool gang_wants(weft__source *src, bool carrier) {
  gang *g = weft__container_of(src, gang, src);
  size_t live = atomic_load_explicit(&g->live, memory_order_relaxed);
  if (live & GANG_CLOSED) return false;
  if (carrier) attach(g, weft__fiber_carrier_id() % g->nslices);
  return live < g->max_live && (carrier ? gang_has_work(g, true) : !gang_drained(g));
}

static bool gang_reserve(weft__source *src, bool idle) {
  gang *g = weft__container_of(src, gang, src);
  size_t cur = atomic_load_explicit(&g->live, memory_order_relaxed);
  if (cur & GANG_CLOSED) return false;
  attach(g, weft__fiber_carrier_id() % g->nslices); /* this carrier has arrived */
  if (!gang_has_work(g, idle)) return false;
  do {
    /* Closed (the bit set) is above every bound: no place is taken once the gang is closed. */
    if (cur >= g->max_live || (cur & GANG_CLOSED)) return false;
  } while (!atomic_compare_exchange_weak_explicit(&g->live, &cur, cur + 1, memory_order_relaxed,
                                                  memory_order_relaxed));
  return true;
}

/* The first to see the gang finished (or starved) takes it off the carriers' list. */
static void gang_close(gang *g) {
  /* The closer holds a place, so the count is not 0 here and only a later leave can finish the gang. */
  if (!(atomic_fetch_or_explicit(&g->live, GANG_CLOSED, memory_order_acq_rel) & GANG_CLOSED))
    weft__source_close(&g->src);
}

/*
 * A place is given up; true when that finished the gang (the last place, and
 * no index left), after waking the caller, who may free g at once. The last
 * place can go with indices left, kept for a carrier on its way: that
 * carrier makes the next fiber, and the gang stays open until then.
 */
#ifdef WEFT_TESTING
void (*weft__pmap_test_left_open)(void);
#endif

static bool gang_leave(gang *g) {
  /* acq_rel: the caller, woken by the last one, sees every element's writes. One step decides both: the last
   * place, and the gang closed (a place that goes while the gang is open leaves it to whoever comes next). */
  size_t was = atomic_fetch_sub_explicit(&g->live, 1, memory_order_acq_rel);
  if (was != (GANG_CLOSED | 1)) {
#ifdef WEFT_TESTING
    if (WEFT__UNLIKELY(was == 1 && weft__pmap_test_left_open != NULL)) weft__pmap_test_left_open();
#endif
    return false;
  }
  weft__waiter_wake(g->w);
  return true;
}

static bool gang_unreserve(weft__source *src) {
  gang *g = weft__container_of(src, gang, src);
  atomic_store_explicit(&g->starved, true, memory_order_relaxed);
  gang_close(g);
  return gang_leave(g);
}

/*
 * A fiber runs elements until none is left for it, or until one of them
 * blocked: the scheduler made the gang's next fiber when it did (fiber.h),
 * so this one ends and its stack, warm, goes to the next fiber made (as Go
 * reuses a finished goroutine's stack for the next one). A map of 10^6
 * elements that each sleep then needs fresh stacks only for the elements in
 * flight at once, not for all of them; a map whose elements never block
 * runs on one fiber per carrier.
 *
 * A bounded map (max_parallel) is different once it is full: an element
 * that blocks there has no fiber made after it (no place is free), and a
 * fiber that ended after it would only free a place for a carrier to make
 * a fiber again, at the cost of a stack from the cache, a first switch and
 * the source list's lock. So in a bounded map a fiber ends after a blocked
 * element only when a successor was made at one of its parks and the gang
 * is not full; otherwise it goes on to the next index. 100,000 elements
 * that each sleep 20 us, at most 1000 in flight, then run on about 15,000
 * fibers instead of 100,000, at a third of the CPU time (bm_sleep's
 * BoundedMap). An unbounded map keeps the rule above:
 * there, a fiber that went on would hold a stack while the successors its
 * parks made take the same indices.
 */
static bool gang_ends_after_block(gang *g, uint32_t flags) {
  if (!(flags & WEFT__FIBER_BLOCKED)) return false;
  /* Starved: no successor can be made, so this fiber is one of the few left to run the rest. */
  if (atomic_load_explicit(&g->starved, memory_order_relaxed)) return false;
  if (g->max_live == SIZE_MAX) return true;
  return (flags & WEFT__FIBER_SUCCEEDED) &&
         (atomic_load_explicit(&g->live, memory_order_relaxed) & ~GANG_CLOSED) < g->max_live;
}

static void gang_entry(weft__fiber *f) {
  gang *g = f->arg;
  /* The elements see the caller's scoped bindings. */
  f->tc.scope = g->r.scope;
  size_t i;
  int got;
  /* The carrier is read again for every claim: a fiber that parked may have moved (WEFT_MIGRATE). */
  while ((got = gang_claim(g, weft__fiber_carrier_id() % g->nslices, &i)) > 0) {
    f->flags &= ~(uint32_t)(WEFT__FIBER_BLOCKED | WEFT__FIBER_SUCCEEDED);
    atomic_store_explicit(&f->tag, i, memory_order_relaxed); /* for dumps: which element */
    int rc = g->r.fn(g->r.ctx, i);
    if (WEFT__UNLIKELY(rc != 0)) weft__range_fail(&g->r, i, rc);
    if (gang_ends_after_block(g, f->flags)) {
      got = gang_drained(g) ? 0 : -1;
      break;
    }
  }
  if (got == 0) gang_close(g); /* every index claimed (else another fiber, or a carrier, takes the rest) */
}

static void gang_done(weft__fiber *f) {
  /* After the last wake g may be gone; f is not in it (it lives on the fiber's stack, still mapped). */
  if (gang_leave(f->arg)) weft__source_finished(f);
}

static void gang_nostack(weft__fiber *f) { (void)f; /* never called: a clone exists only with a stack */ }

static const weft__fiber_ops gang_fiber_ops = {gang_entry, gang_done, gang_nostack, "pmap element"};
static const weft__source_ops gang_source_ops = {gang_reserve, gang_wants, gang_unreserve};

/*
 * The gang finished starved with indices left and no fiber: claim one index
 * from any slice (no fiber of the gang exists and none can start while it is
 * closed, but a claim is a claim: the same compare-and-swap). True with *out
 * set; false when every index was claimed.
 */
static bool gang_claim_any(gang *g, size_t *out) {
  for (size_t j = 0; j < g->nslices; j++) {
    gang_slice *s = &g->slice[j];
    size_t cur = atomic_load_explicit(&s->next, memory_order_relaxed);
    while (cur < s->end)
      if (atomic_compare_exchange_weak_explicit(&s->next, &cur, cur + 1, memory_order_relaxed,
                                                memory_order_relaxed)) {
        *out = cur;
        return true;
      }
  }
  return false;
}

/* Open g for (another) round of fibers: every place free, not starved. 0 or -ESHUTDOWN. */
static int gang_open(gang *g, unsigned want) {
  atomic_store_explicit(&g->live, 0, memory_order_relaxed);
  atomic_store_explicit(&g->starved, false, memory_order_relaxed);
  weft__waiter_init(g->w, false);
  weft__waiter_on(g->w, WEFT__WAIT_MAP, g);
  return weft__source_open(&g->src, want);
}

int weft__pmap_fibers(size_t n, weft_index_fn fn, void *ctx, size_t max_parallel, const void *site) {
  gang g;
  weft__range_init(&g.r, n, fn, ctx, 1, max_parallel);
  g.max_live = max_parallel ? max_parallel : SIZE_MAX;
  atomic_init(&g.live, 0);
  atomic_init(&g.starved, false);
  size_t k = weft_carrier_count();
  if (k == 0) k = 1;
  if (k > GANG_SLICES) k = GANG_SLICES;
  if (k > n) k = n;
  g.nslices = k;
  /* Slice j is [j n / k, (j + 1) n / k), computed without overflow. */
  size_t q = n / k, rem = n % k, start = 0;
  for (size_t j = 0; j < k; j++) {
    size_t len = q + (j < rem);
    atomic_init(&g.slice[j].attached, false);
    atomic_init(&g.slice[j].next, start);
    g.slice[j].end = start + len;
    start += len;
  }
  weft__waiter w;
  g.w = &w;
  g.src.ops = &gang_source_ops;
  g.src.fiber_ops = &gang_fiber_ops;
  g.src.arg = &g;
  g.src.spawn_site = site;
  int rc = gang_open(&g, (unsigned)k);
  if (rc < 0) return rc; /* nothing started */
  for (;;) {
    /* Not cancellable: the fibers use this frame until the last one has gone. */
    weft__waiter_wait(&w, -1);
    /* The last place went: every index was claimed, or the gang starved with some left (see the top). */
    size_t i;
    if (!atomic_load_explicit(&g.starved, memory_order_relaxed) || !gang_claim_any(&g, &i)) break;
    rc = fn(ctx, i); /* one element here: progress that needs no stack */
    if (WEFT__UNLIKELY(rc != 0)) weft__range_fail(&g.r, i, rc);
    if (gang_drained(&g)) break;
    if (gang_open(&g, (unsigned)k) < 0) {
      /* Shut down meanwhile (a misuse: weft.h): the rest here, one after the other, so that none is lost. */
      while (gang_claim_any(&g, &i))
        if ((rc = fn(ctx, i)) != 0) weft__range_fail(&g.r, i, rc);
      break;
    }
  }
  return weft__range_result(&g.r);
}
