/*
 * This file contains what every weft source file shares: the feature-test
 * macros, small helpers, and the fatal-error path. Nothing here knows about
 * fibers or OpenMP.
 */
#ifndef WEFT_INTERNAL_H
#define WEFT_INTERNAL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "weft.h"

#define WEFT__LIKELY(x)    __builtin_expect(!!(x), 1)
#define WEFT__UNLIKELY(x)  __builtin_expect(!!(x), 0)
#define WEFT__NOINLINE     __attribute__((noinline))
#define WEFT__UNUSED(x)    ((void)(x))
#define WEFT__CACHELINE    64
#define WEFT__ALIGNED_CL   __attribute__((aligned(WEFT__CACHELINE)))
#define WEFT__NORETURN     __attribute__((noreturn))
#define WEFT__PRINTF(a, b) __attribute__((format(printf, a, b)))

#define weft__container_of(p, type, member) ((type *)(void *)((char *)(p)-offsetof(type, member)))

/* Relaxed and acquire/release shorthands: every use names its pairing in a comment. */
#define weft__load_relaxed(p)     atomic_load_explicit((p), memory_order_relaxed)
#define weft__load_acquire(p)     atomic_load_explicit((p), memory_order_acquire)
#define weft__store_relaxed(p, v) atomic_store_explicit((p), (v), memory_order_relaxed)
#define weft__store_release(p, v) atomic_store_explicit((p), (v), memory_order_release)

/*
 * A sequentially consistent store that a later load of another word cannot
 * pass (the store of a Dekker pair: "say I am going, then look"). C11's
 * seq_cst store already promises that, but QEMU's user-mode AArch64 (the CI's
 * aarch64 run) emulates STLR and LDAR as plain host moves, and an x86 host
 * then lets the load pass the buffered store. An exchange is a locked
 * read-modify-write there, and on x86-64 it is the XCHG a seq_cst store
 * compiles to anyway.
 */
#define weft__store_sc(p, v) ((void)atomic_exchange_explicit((p), (v), memory_order_seq_cst))

/* A CPU hint for spin loops. */
static inline void weft__cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield" ::: "memory");
#else
  __asm__ __volatile__("" ::: "memory");
#endif
}

/*
 * weft__die: print "weft: <message>" on stderr with write(2) and abort. For
 * misuse that cannot be reported as a return value (documented per call) and
 * for broken invariants. Async-signal-safe when fmt has no conversions.
 */
WEFT__NORETURN void weft__die(const char *fmt, ...) WEFT__PRINTF(1, 2);

/*
 * WEFT__ASSERT(cond): a debug check of an invariant that only a bug in weft
 * can break (the lock order, a fiber's state, a stack returned twice). When
 * it fails the process ends with the condition, file and line. Compiled in
 * test builds (WEFT_TESTING) and builds without NDEBUG; compiled out of
 * Release and RelWithDebInfo, where it costs nothing.
 */
#if defined(WEFT_TESTING) || !defined(NDEBUG)
#define WEFT__CHECKS 1
#define WEFT__ASSERT(c)                                                                                      \
  do {                                                                                                       \
    if (WEFT__UNLIKELY(!(c))) weft__die("assertion failed: %s (%s:%d)", #c, __FILE__, __LINE__);             \
  } while (0)
#else
#define WEFT__CHECKS    0
#define WEFT__ASSERT(c) ((void)0)
#endif

/* Print one "weft: ..." line on stderr (warnings: at most once per cause, by the caller). */
void weft__warn(const char *fmt, ...) WEFT__PRINTF(1, 2);

/* Saturating helpers for deadlines and sizes. */
static inline int64_t weft__add_sat(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return b > 0 ? INT64_MAX : INT64_MIN;
  return r;
}

/* A deadline is valid when it is -1 (forever), 0 (try once) or positive. */
static inline bool weft__deadline_ok(int64_t d) { return d >= -1; }

/* "function+0x1c (library)" for a code address, or its hex value when unknown. */
void weft__describe_site(const void *pc, char *buf, size_t cap);

/* Number of CPUs in this process's affinity mask (at least 1). */
unsigned weft__cpu_count(void);

/* Read an environment variable as an unsigned size with optional k/m/g suffix; false if unset or bad. */
bool weft__env_size(const char *name, size_t *out);
/* Read an environment variable as a boolean (0/1, off/on, false/true, no/yes); -1 when unset or bad. */
int weft__env_bool(const char *name);

#endif /* WEFT_INTERNAL_H */
