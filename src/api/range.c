/*
 * This file contains weft_reduce, a reduction whose result does not depend
 * on timing or the number of threads, and the BLOCKING kind of
 * weft_pmap_range: maps whose calls each take a sub-range, for elements of
 * a few nanoseconds.
 *
 * weft_pmap_range (its door is in pmap.c, beside weft_pmap's) is weft_pmap
 * with a range function: its CPU kind goes
 * down weft_pmap's own path (pmap.c, with the cost model keyed by fn), where
 * every chunk a worker claims is one call fn(ctx, lo, hi) (cpu/range.c); a
 * map run on the caller is one call for the whole range. Its BLOCKING kind
 * is an element map over sub-ranges of `grain` indices, so that each
 * sub-range gets a fiber, as an element of weft_pmap does (pmap_fibers.c).
 *
 * weft_reduce. The result must be bitwise the same whatever runs it, so the
 * tree is fixed by n and the grain g alone: [lo, hi) splits at
 * mid = lo + (hi - lo) / 2 until a part has at most g indices (a leaf). Any
 * schedule that evaluates that tree gives the same bits; what may depend on
 * the machine is only which subtrees run in parallel. So the tree is cut at
 * a depth D chosen from the number of workers (about 8 subtrees per worker,
 * at most 256): the nodes at depth D, and the leaves above it, are the
 * "units", contiguous and in index order. The units run as a CPU map (or on
 * fibers), each one evaluated depth-first on one thread:
 *
 *     eval(node, acc):  leaf: acc = identity; fn(lo, hi, acc)
 *                       else: eval(left, acc); eval(right, tmp); combine(acc, tmp)
 *
 * where tmp is the scratch buffer of the node's level below the unit's root:
 * the left subtree has finished with the levels below before the right one
 * starts, so a unit of height h needs h scratch buffers, and its own result
 * slot. Then the caller combines the units' results over the top D levels
 * of the same tree, in the same recursion. Rejected: a slot per leaf
 * (memory in n / g, unbounded with an explicit grain); a left fold of the
 * leaves per worker, or a per-thread accumulator as an OpenMP reduction
 * keeps (the order would depend on who ran what).
 *
 * Memory: U * (1 + h) slots of a whole number of cache lines each (no two
 * threads write one line), plus the units' bounds, in the caller's frame
 * when they fit REDUCE_LOCAL_BYTES (an allocation and its free took 0.3 us
 * of a 4 us sum of 10^4 doubles), else one allocation per call; nothing
 * when the whole range is one leaf on the caller.
 */
#include "../base/internal.h"

#include <string.h>

#include "../base/sys.h"
#include "../cpu/cpu.h"
#include "../fiber/fiber.h"
#include "pmap.h"

#define UNITS_PER_WORKER 8
#define UNITS_MAX_DEPTH  8 /* at most 256 units */
/* A tree whose blocks fit this many bytes keeps them in weft_reduce's frame (16 units of 64 bytes do). */
#define REDUCE_LOCAL_BYTES 2048

/* --- weft_pmap_range, BLOCKING --------------------------------------------------------- */

/* A BLOCKING range map: element k is the sub-range [k grain, min(n, (k + 1) grain)). */
typedef struct spans {
  weft_range_fn fn;
  void *ctx;
  size_t n;
  size_t grain;
} spans;

static int span_one(void *p, size_t k) {
  const spans *s = p;
  size_t lo = k * s->grain; /* k < ceil(n / grain), so no overflow */
  size_t hi = s->n - lo > s->grain ? lo + s->grain : s->n;
  return s->fn(s->ctx, lo, hi);
}

int weft__pmap_range_blocking(size_t n, weft_range_fn fn, void *ctx, const weft_pmap_opts *opts,
                              const void *pc) {
  spans s = {fn, ctx, n, opts->grain ? opts->grain : 1};
  size_t count = n / s.grain + (n % s.grain != 0);
  /* The lowest failing element is the sub-range with the lowest lo. */
  return weft__pmap_run(count, span_one, NULL, &s, opts, (weft__site_key)fn, pc);
}

/* --- weft_reduce ------------------------------------------------------------------------ */

typedef struct tree {
  weft_reduce_fn fn;
  weft_combine_fn combine;
  void *ctx;
  const void *identity;
  size_t size;   /* bytes of a partial result */
  size_t grain;  /* a node of at most this many indices is a leaf */
  unsigned cut;  /* D: the depth at which the tree is cut into units */
  size_t stride; /* bytes between two slots: size rounded up to cache lines */
  size_t blk;    /* bytes of a unit's block: its result slot, then its scratch */
  size_t units;  /* U */
  size_t *bound; /* unit k is [bound[k], bound[k + 1]) */
  unsigned char *mem;
} tree;

/* The height of a node of len indices: 0 for a leaf, else one more than its larger half's. */
static unsigned height(size_t len, size_t grain) {
  unsigned h = 0;
  while (len > grain) {
    len -= len / 2;
    h++;
  }
  return h;
}

/* Evaluate the node [lo, hi) into acc; scr: one scratch slot per level below it. */
static void eval(const tree *t, size_t lo, size_t hi, unsigned char *acc, unsigned char *scr) {
  if (hi - lo <= t->grain) {
    memcpy(acc, t->identity, t->size);
    t->fn(t->ctx, lo, hi, acc);
    return;
  }
  size_t mid = lo + (hi - lo) / 2;
  eval(t, lo, mid, acc, scr + t->stride);
  eval(t, mid, hi, scr, scr + t->stride);
  t->combine(t->ctx, acc, scr);
}

static inline unsigned char *unit_slot(const tree *t, size_t k) { return t->mem + k * t->blk; }

/* The units map's range function: units [a, b), each into its own slot. */
static int units_run(void *p, size_t a, size_t b) {
  const tree *t = p;
  for (size_t k = a; k < b; k++) {
    unsigned char *slot = unit_slot(t, k);
    eval(t, t->bound[k], t->bound[k + 1], slot, slot + t->stride);
  }
  return 0;
}

static int unit_one(void *p, size_t k) { return units_run(p, k, k + 1); }

/* Walk the top of the tree down to the units; with bound set, record each unit's start. Returns the count. */
static size_t cut_units(const tree *t, size_t lo, size_t hi, unsigned depth, size_t *bound, size_t k,
                        unsigned *hmax) {
  if (hi - lo <= t->grain || depth == t->cut) {
    if (bound) bound[k] = lo;
    unsigned h = height(hi - lo, t->grain);
    if (h > *hmax) *hmax = h;
    return k + 1;
  }
  size_t mid = lo + (hi - lo) / 2;
  k = cut_units(t, lo, mid, depth + 1, bound, k, hmax);
  return cut_units(t, mid, hi, depth + 1, bound, k, hmax);
}

/* Combine the units' results over the top of the tree, in its order; the slot holding [lo, hi)'s result. */
static size_t combine_top(const tree *t, size_t lo, size_t hi, unsigned depth, size_t *next) {
  if (hi - lo <= t->grain || depth == t->cut) return (*next)++;
  size_t mid = lo + (hi - lo) / 2;
  size_t l = combine_top(t, lo, mid, depth + 1, next);
  size_t r = combine_top(t, mid, hi, depth + 1, next);
  t->combine(t->ctx, unit_slot(t, l), unit_slot(t, r));
  return l;
}

/* Workers that may run units at once here: the cut gives each about UNITS_PER_WORKER subtrees. */
static size_t reduce_workers(const weft_pmap_opts *o, bool on_fiber) {
  if (o->kind == WEFT_BLOCKING) {
    unsigned c = weft_carrier_count();
    size_t w = c ? c : weft__cpu_threads();
    return o->max_parallel && o->max_parallel < w ? o->max_parallel : w;
  }
  if (on_fiber) return weft__cpu_threads();
  weft__team team;
  weft__cpu_team(&team);
  return team.size;
}

int weft_reduce(size_t n, weft_reduce_fn fn, weft_combine_fn combine, void *ctx, const void *identity,
                void *result, size_t size, const weft_pmap_opts *opts) {
  weft_pmap_opts o = WEFT_PMAP_OPTS_INIT;
  if (opts) o = *opts;
  if (!fn || !combine || !identity || !result || size == 0 || size > PTRDIFF_MAX || !weft__pmap_opts_ok(&o))
    return -EINVAL;
  size_t grain = o.grain;
  if (grain == 0) {
    grain = n / WEFT_REDUCE_LEAVES + (n % WEFT_REDUCE_LEAVES != 0);
    if (grain < WEFT_REDUCE_GRAIN_MIN) grain = WEFT_REDUCE_GRAIN_MIN;
  }
  /* A fiber hands CPU work to weft's team (pmap.c); BLOCKING work may run on it. */
  bool on_fiber = o.kind == WEFT_CPU && weft__fiber_self() && weft__parkable_self();
  if (n == 0 || (n <= grain && !on_fiber)) {
    /* One leaf (or none): folded on the caller, straight into result. */
    memcpy(result, identity, size);
    if (n) fn(ctx, 0, n, result);
    return 0;
  }

  tree t = {fn, combine, ctx, identity, size, grain, 0, 0, 0, 0, NULL, NULL};
  size_t workers = reduce_workers(&o, on_fiber);
  size_t want = workers > 1 ? UNITS_PER_WORKER * workers : 1;
  while (t.cut < UNITS_MAX_DEPTH && ((size_t)1 << t.cut) < want) t.cut++;
  unsigned hmax = 0;
  t.units = cut_units(&t, 0, n, 0, NULL, 0, &hmax);

  /* The block of each unit: its slot and hmax scratch slots, whole cache lines each. */
  t.stride = (size + WEFT__CACHELINE - 1) / WEFT__CACHELINE * WEFT__CACHELINE;
  if (t.stride > SIZE_MAX / (1 + (size_t)hmax)) return -ENOMEM;
  t.blk = t.stride * (1 + hmax);
  if (t.blk > (SIZE_MAX - (t.units + 1) * sizeof(size_t)) / t.units) return -ENOMEM;
  /* A small tree's blocks live in this frame: an allocation and its free cost more than its units' set-up. */
  _Alignas(WEFT__CACHELINE) unsigned char local[REDUCE_LOCAL_BYTES];
  size_t need = t.blk * t.units + (t.units + 1) * sizeof(size_t);
  t.mem = need <= sizeof local ? local : weft__malloc_aligned(WEFT__CACHELINE, need);
  if (!t.mem) return -ENOMEM;
  t.bound = (size_t *)(void *)(t.mem + t.blk * t.units);
  cut_units(&t, 0, n, 0, t.bound, 0, &hmax);
  t.bound[t.units] = n;

  /* The units, in parallel: the model learns the cost of one unit at this site (keyed by fn). */
  weft_pmap_opts uo = o;
  uo.grain = 0;
  int rc;
  if (o.kind == WEFT_BLOCKING)
    rc = weft__pmap_run(t.units, unit_one, NULL, &t, &uo, (weft__site_key)fn, __builtin_return_address(0));
  else
    rc = weft__pmap_run(t.units, NULL, units_run, &t, &uo, (weft__site_key)fn, __builtin_return_address(0));
  if (rc == 0) {
    size_t next = 0;
    size_t root = combine_top(&t, 0, n, 0, &next);
    memcpy(result, unit_slot(&t, root), size);
  }
  if (t.mem != local) weft__free(t.mem);
  /* The units never fail: a nonzero rc is weft's own (no fibers could start: -ENOMEM, -ESHUTDOWN). */
  return rc;
}
