/*
 * This file contains the fiber stack allocator and the stack overflow
 * handler.
 *
 * Stacks are anonymous mappings, reserved with MAP_NORESERVE and committed by
 * the kernel page by page as the fiber touches them, with a guard region
 * below the usable part. They are pooled: a freed stack goes to the freeing
 * thread's cache, then to a global pool, and is reused without a system call;
 * mmap and munmap stay off the spawn path.
 *
 * Guards: MADV_GUARD_INSTALL (Linux 6.13 and later) where the kernel has it,
 * which adds no mapping; otherwise mprotect(PROT_NONE), which splits the
 * mapping in two and so spends the process's vm.max_map_count; when that
 * budget runs short, stacks come without a guard (documented weaker
 * protection) instead of failing. WEFT_STACK_GUARD=madv|mprotect|none
 * overrides the probe.
 *
 * Overflow: a SIGSEGV/SIGBUS handler on an alternate signal stack recognises
 * a fault in the guard of the running fiber's stack and ends the process
 * with a message that names the fiber and its stack size; any other fault is
 * passed to the handler that was installed before weft's.
 */
#ifndef WEFT_FIBER_STACK_H
#define WEFT_FIBER_STACK_H

#include "../internal.h"

/*
 * Configure the pool for stacks of `size` usable bytes (rounded up to pages;
 * 0 means the default, 256 KiB), choose the guard method (WEFT_STACK_GUARD,
 * else the probe) and estimate the mapping budget. Calling it again starts
 * afresh: what the pool holds is released first (as by fini), and stacks
 * still taken are unmapped when they come back. Returns 0, or -EINVAL for a
 * size over 1 GiB (nothing changes then). Plain thread, runtime stopped.
 */
int weft__stack_init(size_t size);

/*
 * Release every pooled stack, those in every thread's cache included. Only
 * when no other thread uses the allocator (runtime stopped). A stack still
 * taken stays valid and is unmapped when it is given back.
 */
void weft__stack_fini(void);

/*
 * Take a stack: *base is its lowest usable address, *size its usable bytes
 * (the fiber's stack grows down from *base + *size, which is page aligned),
 * *cookie the handle for weft__stack_free. Returns 0 or -ENOMEM (out of
 * memory or address space: the caller then runs the work another way);
 * -EINVAL outside init..fini. Its contents are whatever the last fiber left.
 * Any thread; errno is preserved.
 */
int weft__stack_alloc(void **base, size_t *size, void **cookie);

/* Give a stack back (from any thread; NULL is ignored; errno is preserved). */
void weft__stack_free(void *cookie);

/*
 * Stacks pooled beyond what the pool keeps (a hint, no lock). A burst leaves
 * many; they are unmapped off the hot path, by weft__stack_trim.
 */
size_t weft__stack_excess(void);

/* Unmap up to max of the excess stacks; returns how many excess stacks are left. */
size_t weft__stack_trim(size_t max);

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
 * async-signal-safe: it reads two fields of the handle and nothing else. A
 * stack without a guard (method "none") still reserves that region, mapped
 * but unprotected, so an overflow there never faults; the answer is then
 * true for addresses that cannot fault, which is harmless. cookie must be a
 * handle from weft__stack_alloc that has not been given back; NULL gives
 * false.
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
  size_t mapped;         /* stacks mapped now: in use, in a thread cache or in the global pool */
  size_t pooled;         /* in the global pool */
  size_t cached;         /* in the calling thread's cache */
  size_t cache_max;      /* bound of each thread's cache */
  size_t pool_max;       /* bound of the global pool */
  size_t guard_mprotect; /* mapped stacks guarded with mprotect (each spends a mapping) */
  size_t guard_none;     /* mapped stacks without a guard */
  size_t map_budget;     /* most mprotect-guarded stacks before they come unguarded */
  uint64_t fresh;        /* stacks mapped since init */
  uint64_t released;     /* stacks unmapped since init (trimming and fini) */
} weft__stack_stats;
void weft__stack_get_stats(weft__stack_stats *out);

#ifdef WEFT_TESTING
/*
 * Test hooks. set_map_budget: allow n more mprotect-guarded stacks than are
 * mapped now (instead of the estimate from vm.max_map_count), and re-arm the
 * one warning. overflow_reset: forget that the handler was installed, so
 * that the next weft__stack_overflow_install saves the actions in place then
 * (tests run it in a child process, after installing a handler of their own).
 */
void weft__stack_set_map_budget(size_t n);
void weft__stack_overflow_reset(void);
#endif

/*
 * Install the overflow handler (once per process; later calls do nothing).
 * Returns 0 or -errno.
 */
int weft__stack_overflow_install(void);

/*
 * Give the calling thread an alternate signal stack for the handler
 * (carriers call it): 256 KiB, lazily committed, with a guard page. A thread
 * that has one already (the program's, or a sanitizer's) keeps it. Returns
 * 0 or -ENOMEM; again on the same thread, 0 and nothing changes. Without it
 * an overflow still ends the process, by SIGSEGV without the message.
 */
int weft__stack_thread_init(void);
/*
 * Remove and free the calling thread's alternate signal stack, if it is
 * still the one weft installed (otherwise it is left mapped: whoever
 * replaced it may restore it). A thread that exits without calling it has
 * it freed by a thread-exit destructor.
 */
void weft__stack_thread_fini(void);

#endif /* WEFT_FIBER_STACK_H */
