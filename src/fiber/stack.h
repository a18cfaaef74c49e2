/*
 * This file contains the fiber stack allocator's interface. The design
 * (arenas carved from large mappings, guards installed a batch at a time,
 * per-thread caches over an address-ordered pool, memory given back a batch
 * at a time when a carrier is idle) is explained at the top of stack.c; the
 * overflow handler that reads the guards is in overflow.h.
 *
 * Guards: MADV_GUARD_INSTALL (Linux 6.13 and later) where the kernel has it,
 * which adds no mapping; otherwise mprotect(PROT_NONE), which splits the
 * mapping and so spends the process's vm.max_map_count; when that budget runs
 * short, stacks come without a guard (documented weaker protection) instead
 * of failing. WEFT_STACK_GUARD=madv|mprotect|none overrides the probe.
 */
#ifndef WEFT_FIBER_STACK_H
#define WEFT_FIBER_STACK_H

#include "../base/internal.h"

/*
 * Configure the allocator for stacks of `size` usable bytes (rounded up to
 * pages; 0 means the default, 256 KiB), choose the guard method
 * (WEFT_STACK_GUARD, else the probe) and estimate the mapping budget.
 * Calling it again starts afresh: what the pool holds is released first (as
 * by fini), and stacks still taken stay valid until they come back. Returns
 * 0, or -EINVAL for a size over 1 GiB (nothing changes then). Plain thread,
 * runtime stopped.
 */
int weft__stack_init(size_t size);

/*
 * Release every pooled stack, those in every thread's cache included, and
 * every mapping that holds no stack still taken. Only when no other thread
 * uses the allocator (runtime stopped). A stack still taken stays valid; its
 * mapping goes once the last stack taken from it comes back.
 */
void weft__stack_fini(void);

/*
 * Take a stack: *base is its lowest usable address, *size its usable bytes
 * (the fiber's stack grows down from *base + *size, which is page aligned),
 * *cookie the handle for weft__stack_free. Returns 0 or -ENOMEM (out of
 * memory or address space: the caller then runs the work another way);
 * -EINVAL outside init..fini. Its contents are whatever the last fiber left,
 * or zeros after a trim. Any thread; errno is preserved. The common case is
 * a pop from the calling thread's cache: no lock, no system call.
 */
int weft__stack_alloc(void **base, size_t *size, void **cookie);

/* Give a stack back (from any thread; NULL is ignored; errno is preserved). */
void weft__stack_free(void *cookie);

/*
 * Trimming, for idle carriers. weft__stack_excess is a hint (no lock): how
 * much memory the pool holds beyond what it keeps for good (its floor), in
 * stacks whose pages may be committed, plus mappings that hold no stack at
 * all. weft__stack_trim is called by a caller that has been idle for
 * idle_ns: it gives back up to `max` arenas' worth of what the pool no
 * longer keeps at that age (MADV_DONTNEED over free stacks, munmap of
 * mappings left empty) and returns what is left beyond it, 0 when nothing
 * more is due now. The pool keeps all that its last burst used for hold_ns
 * of idle time, then lets the part above the floor go in proportion to the
 * time, over WEFT__STACK_DECAY_PER_HOLD x hold_ns (stack.c, "Giving memory
 * back"); hold_ns = 0 or idle_ns = INT64_MAX: down to the floor now.
 * Neither runs on a hot path; each arena is one system call.
 */
size_t weft__stack_excess(void);
size_t weft__stack_trim(size_t max, int64_t idle_ns, int64_t hold_ns);
/* After hold_ns (WEFT_STACK_HOLD_MS), the part above the floor goes back over this many times as long. */
#define WEFT__STACK_DECAY_PER_HOLD 4

/*
 * Move the calling thread's cache to the pool (a carrier that has been idle
 * for a while, so that the trim can reach those stacks too). Any thread.
 */
void weft__stack_cache_flush(void);

/*
 * The guard method new stacks get: "madv-guard", "mprotect" or "none"; NULL
 * outside init..fini. One stack can have a weaker guard than this (see
 * weft__stack_guard_of): when madvise fails for it, or the mapping budget is
 * spent.
 */
const char *weft__stack_guard_name(void);

/* Stacks now taken and not given back. */
size_t weft__stack_in_use(void);

/* Usable size of the stacks in the pool (after init). */
size_t weft__stack_size(void);

/*
 * weft__stack_guard_contains: true when addr lies in the guard region below
 * the stack whose handle is cookie: [*base - guard bytes, *base). For
 * weft__fiber_fault_info, which answers the overflow handler, so it is
 * async-signal-safe: it reads a few fields of the handle and its arena and
 * nothing else. A stack without a guard (method "none") still reserves that
 * region, mapped but unprotected, so an overflow there never faults; the
 * answer is then true for addresses that cannot fault, which is harmless.
 * cookie must be a handle from weft__stack_alloc that has not been given
 * back; NULL gives false.
 */
bool weft__stack_guard_contains(const void *cookie, const void *addr);

/* The guard method of one stack (it can be weaker than the pool's, see stack.c), like guard_name. */
const char *weft__stack_guard_of(const void *cookie);

/* Bytes of guard region below every stack (after init). */
size_t weft__stack_guard_size(void);

/*
 * Counters for tests and reports. A snapshot: exact only while no other
 * thread allocates or frees stacks.
 */
typedef struct weft__stack_stats {
  size_t in_use;         /* weft__stack_in_use() */
  size_t mapped;         /* stacks carved (guard installed) in live mappings: in use, cached or pooled */
  size_t pooled;         /* in the pool (not in any thread's cache, not in use) */
  size_t pooled_dirty;   /* of which may hold committed pages (not trimmed since last use) */
  size_t cached;         /* in the calling thread's cache */
  size_t cache_max;      /* bound of each thread's cache */
  size_t pool_max;       /* dirty pooled stacks that a trim keeps (the high-water mark) */
  size_t arena_stacks;   /* stacks per arena: the unit of carving, guarding and trimming */
  size_t chunks;         /* mappings that hold arenas */
  size_t guard_mprotect; /* mapped stacks guarded with mprotect (each spends mappings) */
  size_t guard_none;     /* mapped stacks without a guard */
  size_t map_budget;     /* most mprotect-guarded stacks before they come unguarded */
  uint64_t fresh;        /* stacks carved since init */
  uint64_t released;     /* stacks unmapped since init (with their mapping) */
  uint64_t trimmed;      /* stacks whose pages a trim gave back since init */
  uint64_t guard_calls;  /* system calls that installed guards since init */
  uint64_t cache_hits;   /* allocations served by a thread's cache (registered threads, ever) */
  uint64_t cache_misses; /* allocations that went to the pool or carved an arena */
  size_t stride;         /* address space per stack, guard included */
  uint64_t refused;      /* allocations refused since init: no pooled stack, and no arena could be carved */
  size_t as_mapped;      /* address space mapped for stacks now (chunks, guards included) */
} weft__stack_stats;
void weft__stack_get_stats(weft__stack_stats *out);

/*
 * Under an RLIMIT_AS of `limit` bytes, the address space that stacks leave
 * free for the program and the OpenMP runtime: a sixteenth of the limit and
 * 16 MiB per online CPU. New chunks are mapped only while VmSize stays at
 * least this far below the limit. Any thread.
 */
size_t weft__stack_as_reserve(size_t limit);

#ifdef WEFT_TESTING
/*
 * Test hook: allow n more mprotect-guarded stacks than are mapped now
 * (instead of the estimate from vm.max_map_count), and re-arm the one
 * warning.
 */
void weft__stack_set_map_budget(size_t n);
#endif

#endif /* WEFT_FIBER_STACK_H */
