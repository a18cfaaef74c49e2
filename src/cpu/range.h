/*
 * This file contains the range: the shared state of one parallel map, which
 * hands out indices in chunks (from per-worker slices, with stealing, or as
 * static parts) and keeps the error of the lowest failing index (range.c).
 * Every CPU backend runs maps through it.
 */
#ifndef WEFT_CPU_RANGE_H
#define WEFT_CPU_RANGE_H

#include "../base/internal.h"
#include "../base/lock.h"

/*
 * Most slices a range is split into (see weft__range_split): one per worker
 * up to this many, then workers share them.
 */
#define WEFT__RANGE_SLICES 32

/* A contiguous part of a range with its own claim counter, on its own line. */
typedef struct weft__slice {
  WEFT__ALIGNED_CL atomic_size_t next; /* next unclaimed index of [start, end) */
  size_t end;
} weft__slice;

/* The state of one parallel map, shared by everything that runs its indices. */
typedef struct weft__range {
  weft_index_fn fn;
  weft_range_fn rfn; /* set (fn NULL): a chunk is one call rfn(ctx, lo, hi) (weft_pmap_range) */
  void *ctx;
  size_t n;                             /* indices are [0, n) */
  size_t grain;                         /* indices per claim; 0: guided (shrinking chunks) */
  size_t max_workers;                   /* most contexts running indices at once; 0: no bound */
  size_t workers;                       /* contexts expected to claim, for guided chunk sizes */
  size_t stolen;                        /* fork_steal (cpu_omp.c): slices' jobs that workers stole; else 0 */
  WEFT__ALIGNED_CL atomic_size_t next;  /* next unclaimed index: contended, on its own line */
  WEFT__ALIGNED_CL weft__lock err_lock; /* guards err_index and err */
  size_t err_index;                     /* lowest index whose call failed, or SIZE_MAX */
  int err;                              /* what that call returned */
  struct weft__scope *scope;            /* the caller's innermost scoped binding: every element sees it */
  size_t nslices;                       /* 0: one shared counter (next); else slice[0..nslices) */
  bool time_first;                      /* home 0 times its first chunk (the model's sample) */
  bool static_ok;                       /* a region may split it statically (weft__range_run_static) */
  bool blocking;      /* BLOCKING work without fibers: wants threads, not stealing (cpu_omp.c) */
  size_t first_count; /* indices of that chunk; 0: none; written by home 0 only */
  int64_t first_ns;   /* how long it took */
  bool time_done;     /* home 0 notes when it has run out of indices to claim (the model's join wait) */
  int64_t done_at;    /* when it did (weft__mono_ns); 0: not noted; written by home 0 only */
  weft__slice slice[WEFT__RANGE_SLICES];
} weft__range;

void weft__range_init(weft__range *r, size_t n, weft_index_fn fn, void *ctx, size_t grain,
                      size_t max_workers);

/*
 * Claim the next chunk: returns how many indices were claimed (0 when none
 * are left) and the first in *lo.
 */
static inline size_t weft__range_claim(weft__range *r, size_t *lo) {
  /*
   * A CAS loop rather than fetch_add: the counter never passes n, so it
   * cannot wrap around SIZE_MAX whatever n and the grain are. Relaxed: the
   * index is the only data; the elements' own writes are ordered by whatever
   * the caller waits on at the end.
   */
  size_t cur = weft__load_relaxed(&r->next);
  for (;;) {
    if (cur >= r->n) return 0;
    size_t left = r->n - cur;
    /* Fixed grain, or guided: a share of what is left, so that the tail is fine-grained. */
    size_t c = r->grain ? r->grain : left / (2 * r->workers);
    if (c == 0) c = 1;
    if (c > left) c = left;
    if (atomic_compare_exchange_weak_explicit(&r->next, &cur, cur + c, memory_order_relaxed,
                                              memory_order_relaxed)) {
      *lo = cur;
      return c;
    }
  }
}

/* Record that fn(ctx, i) returned rc != 0: keeps the lowest index's error. */
void weft__range_fail(weft__range *r, size_t i, int rc);

/*
 * Split an automatic-grain range into one slice per worker (up to
 * WEFT__RANGE_SLICES), before any worker claims. A worker claims from its
 * own slice first, halving what is left there, on a cache line that no other
 * worker touches until it has finished its own and steals: with uniform
 * elements the workers meet only at the end, where a single shared counter
 * makes every claim a cache-line transfer between cores (about 100-500 ns
 * each on the 2-core VM, a few microseconds for a map of 100 cheap
 * elements). A worker that never shows up loses nothing: the others steal
 * its slice. A fixed grain keeps the shared counter.
 */
void weft__range_split(weft__range *r, size_t workers);
/* (The slices cover [next, n): indices that the caller ran before the split are left out.) */

/* Claim and run chunks until none are left. */
void weft__range_drain(weft__range *r);

/* The same, starting from worker `home`'s slice (any value: taken modulo the slices). */
void weft__range_drain_from(weft__range *r, size_t home);

/* The map's result: 0, or the error of the lowest failing index. */
int weft__range_result(weft__range *r);

/*
 * A static split of a range, for a parallel region of the runtime's own
 * team, where every thread of the team is certain to come: part `home` of
 * [base, n) is run by its thread with no claim and no steal, as OpenMP's
 * schedule(static) does (a region given fewer threads than k runs the
 * parts no thread has on the ones it has, cpu_omp.c). With an automatic
 * grain the parts are k equal slices; with a grain, part j is the j-th
 * chunk of that grain (used only
 * when there are at most k chunks). Used for short maps (the caller says so
 * in static_ok), where a claim or a steal costs a cache-line transfer
 * between cores (100-500 ns on the 2-core VM) and there is little to
 * balance. The part is one cache line. A region passes its fields to the
 * workers as firstprivate scalars (cpu_omp.c, fork_region), which gcc
 * copies into the region's data block itself: a worker reads that one
 * block before its first element, as the static split of an `omp for`
 * reads its own. (Passed as the struct, shared or firstprivate, gcc hands
 * the workers its address: the block, then the part, two lines from the
 * caller's core, and EmptyWeftPmapTeam 1.17-1.23x EmptyOmpFor against
 * 0.95-1.10x by value.)
 */
typedef struct WEFT__ALIGNED_CL weft__static_part {
  union {
    weft_index_fn fn;
    weft_range_fn rfn; /* as weft__range's, when is_range */
  } f;
  void *ctx;
  size_t base; /* first index of the split (the probe ran the ones below) */
  size_t n;
  size_t grain; /* 0: k equal slices */
  struct weft__scope *scope;
  weft__range *r;    /* where errors go, and home 0's timing */
  uint32_t k;        /* parts (threads of the region; at most a team's size) */
  uint32_t is_range; /* f.rfn, else f.fn */
} weft__static_part;
_Static_assert(sizeof(weft__static_part) == WEFT__CACHELINE, "a static part is one cache line");

void weft__range_static_part(weft__range *r, size_t k, weft__static_part *out);
void weft__range_run_static(const weft__static_part *p, size_t home);

/*
 * True when the calling thread is running an element of a split map whose
 * own slice still has unclaimed indices: every other worker of that map is
 * then busy with it too, and a map started by the element would find no
 * idle worker (the model's nested case).
 */
bool weft__range_caller_busy(void);

#endif /* WEFT_CPU_RANGE_H */
