/*
 * This file contains the fiber stack allocator (the contract is in stack.h).
 *
 * ==== What a fiber's stack costs, and where the cost went ===================
 *
 * A parked fiber needs at least one page of its own: its top frames. That
 * page is paid for once, by the first store into it (a page fault: ~0.2 µs
 * on bare metal, 2-17 µs under shadow paging, whose price this project's
 * machines pay). Everything else a stack needs is bookkeeping, and the first
 * version paid it per stack: an mmap for every 16 stacks (the address-space
 * lock taken for writing, which every page fault of the other carriers then
 * waited for: with two carriers creating fibers, each one's cost per stack
 * doubled), a madvise per guard, a malloc per record, and a munmap per stack
 * beyond the pool (a TLB shootdown each: 100,000 of them after a burst).
 * Now:
 *
 *   chunk   one mapping (MAP_NORESERVE: address space only) of many arenas,
 *           mapped when the last one is full; the first holds one arena, each
 *           next one twice as many, up to CHUNK_ARENAS_MAX (1.3 GB of address
 *           space at the default size). A burst of 100,000 fibers maps about
 *           30 of them; the mmap lock is taken that often, not per stack.
 *   arena   ARENA_BYTES of stacks side by side in a chunk (64 at the default
 *           size). It is carved when first needed: one malloc for the records
 *           of all its stacks, and its guards installed with one system call
 *           (process_madvise with a vector of ranges; madvise per stack where
 *           the kernel has no process_madvise for guards). It is also the
 *           unit in which memory goes back.
 *   stack   [guard | usable]: the guard below, the fiber's sp starting at the
 *           top. A fresh stack costs its page fault and nothing else.
 *
 *   chunk:  | arena 0                      | arena 1            | ...  (not carved yet)
 *   arena:  | guard | usable | guard | usable | ... 64 stacks ... |
 *                   ^base             ^base + size: sp starts here
 *
 * The records (stack_slot, the cookie) live in the arena's header, not in
 * the mapping, so that a fiber which touches only its top page costs one
 * page; the scheduler may place a fiber's own record in that page, above its
 * first frame.
 *
 * ==== Pooling ===============================================================
 *
 * A freed stack goes to the freeing thread's cache: a LIFO list in
 * thread-local storage, touched only by its thread, so that the common case
 * of a carrier that frees a stack and soon takes one is a few pointer writes,
 * no lock and no atomic read-modify-write (the most recently freed stack,
 * whose pages are committed and warm, is reused first). A cache holds at most
 * cache_max stacks (32 of 256 KiB: 8 MiB of stack per thread); when it is
 * full its cold half goes to the pool, and when it is empty it takes a batch
 * from the pool (one lock per batch). The pool is the arenas' own free lists:
 * a stack in the pool sits in its arena's list, and each chunk keeps a mask
 * of its arenas that have free stacks. A batch is taken from the oldest
 * chunk and lowest arena first, and a trim gives memory back from the newest
 * and highest first, so that what stays in use gathers in the first arenas
 * and the last (and largest) chunks empty out and can be unmapped whole.
 *
 * ==== Giving memory back ====================================================
 *
 * Freeing never makes a system call. Once a carrier has had nothing to do for
 * a while (sched.c: TRIM_IDLE_NS) it flushes its cache to the pool and calls
 * weft__stack_trim, a bounded step at a time, looking for work in between,
 * with how long it has been idle:
 *
 *  - Free stacks whose pages may be committed ("dirty": used since their last
 *    trim) beyond what the pool keeps at that idle age get MADV_DONTNEED. It
 *    keeps all that its last burst left (pool.recent, the most dirty stacks
 *    it held since it was last down to its floor) for WEFT_STACK_HOLD_MS
 *    (default 1 s) of idleness, then a straight line down to its floor,
 *    pool_max (64 MiB of stack, 256 stacks of 256 KiB), over four times as
 *    long. Any work ends the idle time, and a burst during the decay raises
 *    the mark again. Why hold at all: a burst that comes back finds its
 *    stacks committed. Given back at the first trim, 100 ms into the idle
 *    time (WEFT_STACK_HOLD_MS=0, the policy before), every burst of more than
 *    pool_max fibers after a pause paid again for its stacks: carved anew
 *    once their chunk was unmapped, and a page fault for every page a fiber
 *    touches (bm_sleep's BurstAfterIdle, 2,000 fibers each using 16 KiB of
 *    stack and sleeping 2 ms, a burst every 0.5 s: 30-35 ms of CPU a burst,
 *    against 20-21 ms with the hold; docs/benchmarks.md). The cost is memory
 *    that stays committed for seconds after a burst, as malloc
 *    implementations decay theirs (jemalloc's dirty_decay_ms, 10 s by
 *    default). Trimming is an arena at a time: one call over the whole arena
 *    when all its stacks are free, else one vector of ranges. Guards survive
 *    it (the kernel keeps guard markers across DONTNEED, and a PROT_NONE
 *    guard is its own mapping), so a trimmed stack is reused later without
 *    any system call but its page fault.
 *  - A chunk with no stack taken and nothing dirty left is unmapped whole
 *    (the first chunk stays), which returns its page tables too: guard
 *    markers keep a page-table page alive per 2 MiB of stacks (about 640
 *    bytes per stack at the default size) for as long as the chunk is mapped.
 *
 * So five holds after a burst (5 s by default) at most pool_max + cache_max
 * per carrier stacks keep their pages, and no fiber ever pays for a
 * shootdown: there is one per arena trimmed or chunk unmapped, off the hot
 * path.
 *
 * Pre-faulting (MADV_POPULATE_WRITE over the top pages of a fresh arena, one
 * call for all its stacks) was measured and lost: 2.79 µs against 2.70 µs a
 * stack on one thread, 3.83 against 2.93 on two (docs/benchmarks.md), since
 * the kernel then does the same work per page and adds the call. It is not
 * done.
 *
 * ==== Guards ================================================================
 *
 * Guard size: 64 KiB (or one page where pages are larger). A guard only
 * catches a frame that does not step over it, and C code does declare
 * buffers of tens of KiB on the stack (PATH_MAX arrays, printf's internals, a
 * char buf[32768]); 64 KiB catches all but the rare giant frame, while GCC's
 * -fstack-clash-protection code is caught by any guard. It costs no memory:
 * the guard is never committed (PTE markers or PROT_NONE), it only takes
 * address space, 64 KiB per stack (6.4 GB for 100,000 stacks, of the
 * 128 TiB a 47-bit user space has).
 *
 * Methods, probed at init, overridable with WEFT_STACK_GUARD:
 *
 *  - "madv-guard": MADV_GUARD_INSTALL (Linux 6.13+). Installs PTE markers;
 *    the chunk stays one VMA and merges with its neighbours, so guards never
 *    spend vm.max_map_count: a million stacks fit under the default limit.
 *    The probe checks that a guarded page really refuses access (an emulator
 *    may accept the advice and ignore it). If the call fails for one stack
 *    (mlockall'd memory, say), that stack falls back to mprotect.
 *  - "mprotect": mprotect(PROT_NONE) splits the chunk's mapping, so each
 *    stack spends up to two of the process's vm.max_map_count mappings
 *    (65530 by default: about 30,000 guarded stacks at most). The budget: at
 *    init, (max_map_count - mappings now - margin) / 2 stacks, the margin
 *    being max(4096, max_map_count / 8) mappings left for the program, its
 *    libraries and its malloc. Past the budget, or when mprotect fails, a
 *    stack comes without a guard and one warning (per init) says so: weaker
 *    protection beats failing the spawn.
 *  - "none": no protection. The guard region stays reserved as plain memory
 *    below the stack (a cushion), so an overflow of up to the guard size goes
 *    undetected but lands in the stack's own reservation, not in a
 *    neighbouring stack; a bigger one corrupts whatever lies below.
 *
 * ==== Running out ===========================================================
 *
 * An allocation fails (-ENOMEM, counted in `refused`) only when no stack is
 * pooled and no arena can be carved: the chunk's mapping, the arena's records
 * or (under RLIMIT_AS) the budget below. A failing chunk mapping is retried
 * at half the size down to one arena, so that a limit is met with one arena's
 * worth of room at most left unused, and the doubling starts again from what
 * was mapped. Under a finite RLIMIT_AS a chunk is mapped only while a reserve
 * of a sixteenth of the limit and 16 MiB per CPU stays free (as_room): the rest
 * is for the program and for the OpenMP runtime, which ends the process when
 * it cannot start a thread. The callers
 * absorb a refusal: a map goes on with the fibers it has, a future runs on
 * the CPU path (weft.h says what each call does).
 *
 * ==== The rest ==============================================================
 *
 * Frees from another thread go to that thread's cache, which is as good as
 * any (all stacks are alike). A thread's cache is flushed to the pool when
 * the thread exits (a pthread key destructor), and fini empties every live
 * thread's cache through a registry of caches, so nothing is ever stranded.
 * Each init starts a new generation: a stack of an earlier one that comes
 * back is not pooled, and its chunk is unmapped once nothing of it is taken.
 *
 * The in-use count is the sum of per-thread counters (each written only by
 * its thread, read by anyone), so that counting puts no shared cache line on
 * the hot path.
 *
 * Valgrind: each stack is registered (VALGRIND_STACK_REGISTER) while its
 * chunk is mapped, so that a switch onto it is not taken for a huge stack
 * frame, and marked addressable (undefined) when handed out again.
 * AddressSanitizer: a freed stack's usable range is unpoisoned,
 * because the frames of a fiber that switched away for good never return and
 * leave their redzones poisoned.
 *
 * Lock order: pool.map_lock, then pool.lock. pool.lock is a leaf; no other
 * lock is taken under it, and no system call that can wait for other threads
 * (munmap, madvise) runs under it. pool.map_lock is held only across a
 * chunk's room check and its mmap (chunk_map), never with pool.lock.
 */
#include "stack.h"

#include "../base/process.h"
#include "../base/settings.h"
#include "../base/sys.h"

#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/utsname.h>
#include <unistd.h>

#ifdef WEFT_HAVE_VALGRIND_H
#include <valgrind/memcheck.h>
#include <valgrind/valgrind.h>
#endif
#ifdef WEFT_ASAN
#include <sanitizer/asan_interface.h>
#endif

#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102 /* Linux 6.13; older headers lack it */
#endif
#ifndef MAP_STACK
#define MAP_STACK 0
#endif
#ifndef MAP_NORESERVE
#define MAP_NORESERVE 0
#endif

#define STACK_DEFAULT ((size_t)256 * 1024)
#define STACK_MAX     ((size_t)1 << 30)
#define GUARD_BYTES   ((size_t)64 * 1024)
#define CACHE_BYTES   ((size_t)8 << 20) /* per thread cache: at most this much usable stack */
#define CACHE_MIN     4
#define CACHE_LIMIT   32
#define POOL_BYTES    ((size_t)64 << 20) /* dirty stacks a trim keeps: at most this much usable stack */
#define POOL_MIN      16
#define POOL_LIMIT    4096
/* An arena: about this much address space, at most ARENA_LIMIT stacks (one 64-bit word of masks). */
#define ARENA_BYTES ((size_t)32 << 20)
#define ARENA_LIMIT 64
/* Arenas per chunk: 1, 2, 4, ... up to this. */
#define CHUNK_ARENAS_MAX 64

enum { GUARD_NONE = 0, GUARD_MPROTECT = 1, GUARD_MADV = 2 };
static const char *const guard_names[] = {"none", "mprotect", "madv-guard"};

struct arena;
struct chunk;

/* One stack: the cookie that weft__stack_alloc hands out. */
typedef struct stack_slot {
  struct stack_slot *next; /* free-list link: owned by whichever cache or arena list holds it */
  struct arena *arena;
  uint32_t index; /* in its arena */
  uint8_t method; /* GUARD_*: what actually protects this stack's guard region */
  uint8_t dirty;  /* may hold committed pages: set when taken, cleared by a trim (pool.lock when pooled) */
  uint8_t taken;  /* handed out and not yet freed: a second free is a bug (WEFT__ASSERT) */
  unsigned vg_id; /* Valgrind's registration of the usable range */
} stack_slot;

/* ARENA_LIMIT stacks side by side; its header is one malloc with the records. */
typedef struct arena {
  char *base;          /* the guard of stack 0; immutable */
  struct chunk *chunk; /* immutable */
  unsigned gen;        /* the chunk's generation (a copy, for the free path); immutable */
  uint32_t index;      /* in the chunk; immutable */
  uint32_t nstacks;    /* immutable */
  /* pool.lock: */
  stack_slot *free; /* pooled stacks of this arena */
  uint32_t nfree;   /* in free */
  uint32_t ndirty;  /* of which dirty */
  bool busy;        /* a trim works on it: its free list is detached, the masks do not show it */
  stack_slot slots[];
} arena;

/* One mapping, carved into arenas as they are needed. */
typedef struct chunk {
  char *map;                 /* immutable */
  size_t len;                /* immutable */
  unsigned gen;              /* pool.gen when mapped; immutable */
  uint32_t narenas;          /* capacity; immutable */
  uint32_t arena_stacks;     /* stacks per arena: the pool's, or fewer in a one-arena chunk cut short by a
                                limit (chunk_map); immutable */
  uint32_t ncarved;          /* arenas reserved for carving (arenas[i] may still be NULL: being carved) */
  uint32_t npublished;       /* arenas published in arenas[] */
  uint32_t nbusy;            /* arenas a trim works on */
  size_t taken;              /* stacks out of the pool: in use or in a thread's cache */
  size_t ndirty;             /* dirty pooled stacks in its arenas */
  uint64_t freemask;         /* bit a: arenas[a] has pooled stacks and is not busy */
  bool releasable;           /* counted in pool.nreleasable (see chunk_recount_locked) */
  uint64_t seq;              /* creation order: older chunks have smaller numbers */
  struct chunk *prev, *next; /* pool.chunks, oldest first (or pool.orphans) */
  arena *arenas[];           /* narenas */
} chunk;

enum { TLS_NEW = 0, TLS_LIVE = 1, TLS_DEAD = 2 };

/* Per-thread state: the stack cache. */
typedef struct tls_state {
  stack_slot *head;            /* cached stacks, most recently freed first; only this thread (or fini) */
  size_t n;                    /* stacks in head */
  _Atomic int64_t delta;       /* allocations minus frees by this thread: written by it, summed by anyone */
  atomic_uint_fast64_t hits;   /* allocations served by this cache: written by it, summed by anyone */
  atomic_uint_fast64_t misses; /* allocations that went to the pool or carved */
  int state;                   /* TLS_NEW until registered; TLS_DEAD once the key destructor ran */
  struct tls_state *prev;      /* registry links: pool.lock */
  struct tls_state *next;
} tls_state;

static __thread tls_state tls;

/* The pool, the registry of thread caches, and the configuration. Everything here is pool.lock's
 * unless it says otherwise. */
static struct {
  pthread_mutex_t lock;
  pthread_mutex_t map_lock;            /* one chunk mapping at a time (chunk_map); held alone */
  chunk *chunks;                       /* live chunks, oldest first: allocation prefers the old end */
  chunk *chunks_tail;                  /* the newest: trims start here */
  chunk *cur;                          /* the chunk arenas are carved from, or NULL when it is full */
  chunk *first_free;                   /* no chunk older than this has pooled stacks (a search start) */
  size_t nreleasable;                  /* chunks a trim would unmap (chunk_recount_locked) */
  chunk *orphans;                      /* chunks of earlier generations with stacks still taken */
  size_t nchunks;                      /* in chunks */
  size_t nfree;                        /* pooled stacks (in arenas' lists, busy arenas excluded) */
  size_t ndirty;                       /* of which dirty */
  size_t next_chunk_arenas;            /* capacity of the next chunk to map */
  uint64_t chunk_seq;                  /* numbers chunks in creation order */
  tls_state *threads;                  /* registered thread caches (live threads) */
  int64_t exited_delta;                /* deltas of threads that have exited */
  uint64_t exited_hits, exited_misses; /* their cache counts */
  _Atomic int64_t orphan_delta;        /* deltas counted by threads without a registered cache */
  /* Configuration: written by init and fini only, while no other thread uses the allocator. */
  _Atomic unsigned gen;  /* generation: bumped by every init and fini */
  atomic_bool ready;     /* between init and fini */
  size_t size;           /* usable bytes per stack */
  size_t guard;          /* guard bytes per stack */
  size_t stride;         /* guard + size */
  size_t arena_stacks;   /* stacks per arena */
  size_t cache_max;      /* bound of each thread cache */
  size_t batch;          /* stacks moved per transfer between a cache and the pool */
  size_t pool_max;       /* dirty pooled stacks a trim keeps for good (the floor) */
  size_t recent;         /* the most dirty pooled stacks since the pool was last trimmed to the floor */
  _Atomic size_t excess; /* a hint for weft__stack_excess, updated under the lock */
  int method;            /* GUARD_*: the method new stacks get */
  bool nohuge;           /* madvise(MADV_NOHUGEPAGE) each new chunk (see thp_needs_nohuge) */
  /* Counters (relaxed atomics: read without the lock). */
  _Atomic size_t mapped;        /* carved stacks in live or orphaned chunks */
  _Atomic size_t n_mprotect;    /* of which guarded by mprotect: each spends mappings */
  _Atomic size_t n_none;        /* of which unguarded */
  _Atomic size_t budget;        /* most mprotect-guarded stacks mapped at once */
  atomic_bool warned;           /* the "stacks come unguarded" warning was given (this init) */
  _Atomic size_t as_mapped;     /* bytes of address space in chunks (live and orphaned) */
  _Atomic uint64_t refused;     /* allocations that failed: no pooled stack and no arena could be carved */
  _Atomic uint64_t fresh;       /* stacks carved since init */
  _Atomic uint64_t released;    /* stacks unmapped since init */
  _Atomic uint64_t trimmed;     /* stacks trimmed since init */
  _Atomic uint64_t guard_calls; /* guard-installing system calls since init */
  /* process_madvise on ourselves: a pidfd of this process (reopened after fork), or -1. */
  int pidfd;
  pid_t pidfd_pid;
  /* 0 untried, 1 works, -1 refused (ENOSYS, EINVAL, EPERM), per advice: relaxed (a hint each thread may
   * learn for itself). */
  atomic_int vec_state;
  atomic_int vec_state_dontneed;
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER, .map_lock = PTHREAD_MUTEX_INITIALIZER, .pidfd = -1};

static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_key_t tls_key; /* its destructor flushes an exiting thread's cache */
static bool tls_key_ok;
static size_t page = 4096;

static void tls_destructor(void *arg);

/* fork() while another thread holds a pool lock would leave the child's lock held for ever. */
static void atfork_prepare(void) {
  pthread_mutex_lock(&pool.map_lock);
  pthread_mutex_lock(&pool.lock);
}
static void atfork_release(void) {
  pthread_mutex_unlock(&pool.lock);
  pthread_mutex_unlock(&pool.map_lock);
}

/*
 * The child has only the forking thread. The caches of the parent's other
 * threads belong to threads that do not exist here, and threads the child
 * creates may get the same thread-local addresses: registering one of them
 * again would put an entry in the list twice (a cycle, and fini would loop
 * for ever). So the child forgets them, and the stacks they held with them
 * (their memory stays mapped in the child, unused; the chunk's taken count
 * keeps them out of any unmap). The pidfd names the parent: it is reopened
 * at its next use (pidfd_pid no longer matches).
 */
static void atfork_child(void) {
  tls_state *self = tls.state == TLS_LIVE ? &tls : NULL;
  pool.threads = self;
  if (self) self->prev = self->next = NULL;
  pthread_mutex_unlock(&pool.lock);
  pthread_mutex_unlock(&pool.map_lock);
}

static void once_init(void) {
  long p = sysconf(_SC_PAGESIZE);
  if (p > 0) page = (size_t)p;
  tls_key_ok = pthread_key_create(&tls_key, tls_destructor) == 0;
  weft__on_fork(atfork_prepare, atfork_release, atfork_child);
}

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

static size_t clamp_size(size_t v, size_t lo, size_t hi) { return v < lo ? lo : v > hi ? hi : v; }

static inline char *slot_guard(const stack_slot *s) {
  return s->arena->base + (size_t)s->index * pool.stride;
}
static inline char *slot_base(const stack_slot *s) { return slot_guard(s) + pool.guard; }

/* ------------------------------------------------------------------------ */
/* Thread caches and counting                                                */
/* ------------------------------------------------------------------------ */

/*
 * Register the calling thread's cache, so that fini can empty it and the key
 * destructor flushes it at thread exit. False when the thread cannot have a
 * cache (the key could not be set, or its destructor already ran): its
 * stacks then go straight to the pool.
 */
static bool tls_register(tls_state *t) {
  if (WEFT__LIKELY(t->state == TLS_LIVE)) return true;
  if (t->state == TLS_DEAD) return false;
  pthread_once(&once, once_init);
  if (!tls_key_ok || pthread_setspecific(tls_key, t) != 0) {
    t->state = TLS_DEAD;
    return false;
  }
  pthread_mutex_lock(&pool.lock);
  t->prev = NULL;
  t->next = pool.threads;
  if (pool.threads) pool.threads->prev = t;
  pool.threads = t;
  t->state = TLS_LIVE;
  pthread_mutex_unlock(&pool.lock);
  return true;
}

/* Count d stacks taken (+) or given back (-) by the calling thread. */
static inline void count_in_use(tls_state *t, int64_t d) {
  if (WEFT__LIKELY(t->state == TLS_LIVE)) {
    /* Only this thread writes delta: a plain load and store, no read-modify-write. Relaxed: the sum is a
     * snapshot, exact once the threads are quiescent (joined, or synchronised by the test). */
    int64_t v = atomic_load_explicit(&t->delta, memory_order_relaxed);
    atomic_store_explicit(&t->delta, v + d, memory_order_relaxed);
  } else {
    atomic_fetch_add_explicit(&pool.orphan_delta, d, memory_order_relaxed);
  }
}

/* ------------------------------------------------------------------------ */
/* System calls over many ranges                                             */
/* ------------------------------------------------------------------------ */

/* A pidfd for process_madvise on ourselves: opened lazily, reopened in a forked child. pool.lock. */
static int self_pidfd_locked(void) {
  pid_t me = getpid();
  if (pool.pidfd >= 0 && pool.pidfd_pid == me) return pool.pidfd;
  if (pool.pidfd >= 0) close(pool.pidfd); /* the parent's, inherited across fork */
  pool.pidfd = -1;
#ifdef SYS_pidfd_open
  int fd = (int)syscall(SYS_pidfd_open, me, 0); /* close-on-exec by the kernel */
  if (fd >= 0) {
    pool.pidfd = fd;
    pool.pidfd_pid = me;
  }
#endif
  return pool.pidfd;
}

/*
 * Apply `advice` to n ranges with one process_madvise call where the kernel
 * takes it for this advice (6.13+ for guards on ourselves), else one madvise
 * per range. *state remembers which (per advice). Returns how many of the
 * ranges, from the first, were advised; the caller handles the rest one by
 * one. errno is preserved.
 */
static size_t advise_ranges(struct iovec *v, size_t n, int advice, atomic_int *state) {
  int saved = errno;
  size_t done = 0;
  if (atomic_load_explicit(state, memory_order_relaxed) < 0) return 0;
  pthread_mutex_lock(&pool.lock);
  int fd = self_pidfd_locked();
  pthread_mutex_unlock(&pool.lock);
#ifdef SYS_process_madvise
  while (fd >= 0 && done < n) {
    size_t k = n - done > 1024 ? 1024 : n - done; /* UIO_MAXIOV */
    long r;
    if (weft__fault(WEFT__F_MADVISE)) {
      errno = ENOMEM;
      r = -1;
    } else {
      r = syscall(SYS_process_madvise, fd, v + done, k, advice, 0u);
    }
    if (r < 0) {
      if (errno == ENOSYS || errno == EINVAL || errno == EPERM || errno == EBADF)
        atomic_store_explicit(state, -1, memory_order_relaxed);
      break;
    }
    atomic_store_explicit(state, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&pool.guard_calls, advice == MADV_GUARD_INSTALL, memory_order_relaxed);
    /* r bytes were advised, in vector order: count the whole ranges. */
    size_t bytes = (size_t)r, whole = 0;
    while (whole < k && bytes >= v[done + whole].iov_len) bytes -= v[done + whole++].iov_len;
    done += whole;
    if (whole < k) break; /* a range failed part-way: the caller retries the rest one by one */
  }
#else
  (void)fd;
#endif
  errno = saved;
  return done;
}

/* ------------------------------------------------------------------------ */
/* Guards                                                                    */
/* ------------------------------------------------------------------------ */

/* Warn once per init that stacks now come without a guard. */
static void warn_unguarded(const char *why) {
  if (atomic_exchange_explicit(&pool.warned, true, memory_order_relaxed)) return;
  weft__warn("%s: new fiber stacks come without a guard page, so a stack overflow may corrupt memory "
             "instead of stopping the process (raise vm.max_map_count, or run Linux 6.13+ for "
             "MADV_GUARD_INSTALL)",
             why);
}

/* Take one unit of the mprotect budget; false when it is spent. */
static bool budget_take(void) {
  size_t cur = atomic_load_explicit(&pool.n_mprotect, memory_order_relaxed);
  do {
    if (cur >= atomic_load_explicit(&pool.budget, memory_order_relaxed)) {
      warn_unguarded("the process is near vm.max_map_count");
      return false;
    }
  } while (!atomic_compare_exchange_weak_explicit(&pool.n_mprotect, &cur, cur + 1, memory_order_relaxed,
                                                  memory_order_relaxed));
  return true;
}

/* One stack's guard, by the method `want` or a weaker one; returns the method used. */
static int guard_one(char *g, int want) {
  if (want == GUARD_MADV) {
    atomic_fetch_add_explicit(&pool.guard_calls, 1, memory_order_relaxed);
    if (weft__madvise(g, pool.guard, MADV_GUARD_INSTALL) == 0) return GUARD_MADV;
    want = GUARD_MPROTECT; /* this stack only: the next one tries madvise again */
  }
  if (want == GUARD_MPROTECT && budget_take()) {
    atomic_fetch_add_explicit(&pool.guard_calls, 1, memory_order_relaxed);
    if (weft__mprotect(g, pool.guard, PROT_NONE) == 0) return GUARD_MPROTECT;
    atomic_fetch_sub_explicit(&pool.n_mprotect, 1, memory_order_relaxed);
    warn_unguarded("mprotect failed");
  }
  return GUARD_NONE;
}

/* Guard every stack of a freshly carved arena: one vector call where it works, else one call per stack. */
static void arena_guard(arena *a) {
  size_t n = a->nstacks, done = 0;
  if (pool.method == GUARD_MADV) {
    struct iovec v[ARENA_LIMIT];
    for (size_t i = 0; i < n; i++) {
      v[i].iov_base = a->base + i * pool.stride;
      v[i].iov_len = pool.guard;
    }
    done = advise_ranges(v, n, MADV_GUARD_INSTALL, &pool.vec_state);
    for (size_t i = 0; i < done; i++) a->slots[i].method = GUARD_MADV;
  }
  for (size_t i = done; i < n; i++)
    a->slots[i].method = (uint8_t)guard_one(a->base + i * pool.stride, pool.method);
  size_t none = 0;
  for (size_t i = 0; i < n; i++) none += a->slots[i].method == GUARD_NONE;
  if (none) atomic_fetch_add_explicit(&pool.n_none, none, memory_order_relaxed);
}

/* ------------------------------------------------------------------------ */
/* Chunks and arenas                                                         */
/* ------------------------------------------------------------------------ */

/* Append c to the live list (the newest). pool.lock. */
static void chunk_link_locked(chunk *c) {
  c->seq = ++pool.chunk_seq;
  c->next = NULL;
  c->prev = pool.chunks_tail;
  if (pool.chunks_tail)
    pool.chunks_tail->next = c;
  else
    pool.chunks = c;
  pool.chunks_tail = c;
  pool.nchunks++;
}

/*
 * Could a trim unmap c, losing nothing? Not the first chunk, nothing taken
 * (in use, cached, or reserved by a carve), nothing dirty, no arena being
 * trimmed or carved. Kept as a flag and a count, so that the excess hint is
 * exact and cheap: an idle carrier trims only while there is something to do.
 * pool.lock; called wherever one of those changes.
 */
static void chunk_recount_locked(chunk *c) {
  bool r = c != pool.chunks && c->taken == 0 && c->ndirty == 0 && c->nbusy == 0 && c->ncarved > 0 &&
           c->npublished == c->ncarved;
  if (r != c->releasable) {
    c->releasable = r;
    if (r)
      pool.nreleasable++;
    else
      pool.nreleasable--;
  }
}

static void chunk_unlink_locked(chunk *c) {
  if (c->releasable) {
    c->releasable = false;
    pool.nreleasable--;
  }
  if (pool.cur == c) pool.cur = NULL;
  if (pool.first_free == c) pool.first_free = c->next;
  chunk *first = pool.chunks;
  if (c->prev)
    c->prev->next = c->next;
  else
    pool.chunks = c->next;
  if (c->next)
    c->next->prev = c->prev;
  else
    pool.chunks_tail = c->prev;
  c->prev = c->next = NULL;
  pool.nchunks--;
  /* A new first chunk is never released. */
  if (c == first && pool.chunks) chunk_recount_locked(pool.chunks);
}

size_t weft__stack_as_reserve(size_t limit) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  return limit / 16 + ((size_t)16 << 20) * (size_t)(cpus > 0 ? cpus : 1);
}

/*
 * Under a finite RLIMIT_AS (ulimit -v), how many more bytes the stacks may
 * map now: what the limit leaves (the limit less the process's VmSize), less
 * a reserve of a sixteenth of the limit and 16 MiB per CPU, which stays for the
 * program and for the OpenMP runtime: libgomp ends the process when it cannot
 * create a team's thread (8 MiB of stack each, and a malloc arena of up to
 * 64 MiB of address space), so stacks that took every byte the limit allows
 * would turn a shortage of stacks, which weft absorbs (fewer fibers in
 * flight), into a crash it cannot catch. SIZE_MAX without a limit. Read at
 * each chunk mapping (a few dozen a burst), so that a limit set after init
 * counts too.
 */
static size_t as_room(void) {
  size_t limit, room = weft__as_room(&limit);
  if (room == SIZE_MAX) return SIZE_MAX;
  size_t reserve = weft__stack_as_reserve(limit);
  return room > reserve ? room - reserve : 0;
}

/*
 * Under a memory cgroup's limit (memory.max): how many more stacks may be
 * carved. A stack's address space costs nothing, but every fiber in flight
 * commits at least the page its frames and record are on, and the kernel's
 * OOM killer ends the process, which weft cannot absorb, where a refused
 * stack is absorbed (fewer fibers in flight). So new stacks stop while the
 * memory left, less a reserve of a quarter of the limit, would not hold two
 * pages for each (100,000 elements that each sleep took 54-60 MiB without
 * this bound, and were killed under 32 MiB). SIZE_MAX without a limit.
 */
static size_t mem_room_stacks(void) {
  uint64_t limit, usage;
  if (!weft__mem_limit(&limit, &usage)) return SIZE_MAX;
  uint64_t reserve = limit / 4;
  if (usage + reserve >= limit) return 0;
  return (size_t)((limit - usage - reserve) / (2 * page));
}

/*
 * Cap a chunk of *narenas arenas of *per stacks to what the limits leave room
 * for (RLIMIT_AS: as_room; a memory cgroup: mem_room_stacks): fewer arenas,
 * and then one arena of fewer stacks, down to one stack. False when not even
 * one fits.
 */
static bool chunk_fit(size_t *narenas, size_t *per) {
  size_t room = SIZE_MAX;
  size_t as = as_room(), fit = mem_room_stacks();
  if (as != SIZE_MAX) room = as / pool.stride;
  if (fit < room) room = fit;
  if (room == SIZE_MAX || room / *per >= *narenas) return true;
  *narenas = room / *per;
  if (*narenas == 0) {
    if (room == 0) return false;
    *narenas = 1;
    *per = room;
  }
  return true;
}

/*
 * Map a chunk of at most `narenas` arenas (address space only): fewer when a
 * limit leaves room for fewer (chunk_fit) or the kernel refuses that many,
 * halving down to one arena, and then one arena of fewer stacks, down to one
 * stack: under a limit the doubling would otherwise give up with a whole
 * chunk's worth of room left, and a map that gets no stack at all runs on
 * its caller one element at a time. NULL when not even one stack can be
 * mapped, or malloc fails.
 *
 * One mapping at a time (pool.map_lock), the room read again before each
 * try: threads that find the pool empty together (carriers and a map's
 * caller in a burst) would otherwise each read the same room and each map
 * it, and the kernel, refusing the later ones, would have them halve their
 * way into the reserve that as_room keeps for libgomp, which ends the
 * process when a region cannot allocate its team (seen once in CI, a
 * 1 GiB RLIMIT_AS: "Out of memory allocating 1568 bytes").
 */
static chunk *chunk_map(size_t narenas) {
  size_t per = pool.arena_stacks;
  char *m = MAP_FAILED;
  pthread_mutex_lock(&pool.map_lock);
  while (chunk_fit(&narenas, &per)) {
    m = weft__mmap(NULL, narenas * per * pool.stride, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (m != MAP_FAILED) break;
    if (narenas > 1)
      narenas /= 2;
    else if (per > 1)
      per /= 2;
    else
      break;
  }
  pthread_mutex_unlock(&pool.map_lock);
  if (m == MAP_FAILED) return NULL;
  size_t len = narenas * per * pool.stride;
  chunk *c = weft__calloc(1, sizeof *c + narenas * sizeof(arena *));
  if (!c) {
    munmap(m, len);
    return NULL;
  }
  atomic_fetch_add_explicit(&pool.as_mapped, len, memory_order_relaxed);
  /* Best effort: a huge page would commit 2 MiB where a fiber touches 4 KiB. */
  if (pool.nohuge) (void)weft__madvise(m, len, MADV_NOHUGEPAGE);
  c->map = m;
  c->len = len;
  c->gen = atomic_load_explicit(&pool.gen, memory_order_relaxed);
  c->narenas = (uint32_t)narenas;
  c->arena_stacks = (uint32_t)per;
  return c;
}

/* Unmap a chunk that holds no stack taken, with its arenas' records. Not under pool.lock. */
static void chunk_unmap(chunk *c) {
  size_t stacks = 0, mprot = 0, none = 0;
  for (uint32_t a = 0; a < c->narenas; a++) {
    arena *ar = c->arenas[a];
    if (!ar) continue;
    for (uint32_t i = 0; i < ar->nstacks; i++) {
#ifdef WEFT_HAVE_VALGRIND_H
      VALGRIND_STACK_DEREGISTER(ar->slots[i].vg_id);
#endif
      mprot += ar->slots[i].method == GUARD_MPROTECT;
      none += ar->slots[i].method == GUARD_NONE;
    }
    stacks += ar->nstacks;
    weft__free(ar);
  }
  int saved = errno;
  if (munmap(c->map, c->len) != 0) {
    /* Only possible when splitting a mapping would pass vm.max_map_count: give the pages back at least,
     * and lose the address space. */
    static atomic_bool warned_unmap;
    if (!atomic_exchange_explicit(&warned_unmap, true, memory_order_relaxed))
      weft__warn("munmap of fiber stacks failed (errno %d); their address space is lost", errno);
    (void)weft__madvise(c->map, c->len, MADV_DONTNEED);
  }
  errno = saved;
  atomic_fetch_sub_explicit(&pool.as_mapped, c->len, memory_order_relaxed);
  atomic_fetch_sub_explicit(&pool.n_mprotect, mprot, memory_order_relaxed);
  atomic_fetch_sub_explicit(&pool.n_none, none, memory_order_relaxed);
  atomic_fetch_sub_explicit(&pool.mapped, stacks, memory_order_relaxed);
  atomic_fetch_add_explicit(&pool.released, stacks, memory_order_relaxed);
  weft__free(c);
}

/* Put stack s into its arena's free list. pool.lock; s belongs to a live chunk (pool.gen). */
static void arena_put_locked(stack_slot *s) {
  arena *a = s->arena;
  chunk *c = a->chunk;
  s->next = a->free;
  a->free = s;
  a->nfree++;
  c->taken--;
  if (s->dirty) {
    a->ndirty++;
    c->ndirty++;
  }
  if (!a->busy) {
    pool.nfree++;
    pool.ndirty += s->dirty;
    c->freemask |= (uint64_t)1 << a->index;
    if (!pool.first_free || c->seq < pool.first_free->seq) pool.first_free = c;
  }
  if (c->taken == 0) chunk_recount_locked(c);
}

/* Take a stack from arena a (not busy, nfree > 0). pool.lock. */
static stack_slot *arena_take_locked(arena *a) {
  chunk *c = a->chunk;
  stack_slot *s = a->free;
  a->free = s->next;
  a->nfree--;
  c->taken++;
  pool.nfree--;
  if (s->dirty) {
    a->ndirty--;
    c->ndirty--;
    pool.ndirty--;
  }
  if (a->nfree == 0) c->freemask &= ~((uint64_t)1 << a->index);
  if (c->taken == 1) chunk_recount_locked(c);
  s->next = NULL;
  return s;
}

/*
 * A pooled stack from the oldest chunk and lowest arena that has one, or
 * NULL. pool.lock. The search starts at first_free, which only moves back
 * when a stack is pooled in an older chunk: during a burst every chunk but
 * the newest is full, and a walk from the first one would cost a cache miss
 * per chunk on every batch (250 chunks at a million fibers).
 */
static stack_slot *pool_take_locked(void) {
  chunk *c = pool.first_free;
  while (c && !c->freemask) c = c->next;
  pool.first_free = c;
  return c ? arena_take_locked(c->arenas[__builtin_ctzll(c->freemask)]) : NULL;
}

static void update_excess_locked(void);

/*
 * Carve the next arena: reserve its place (mapping a new chunk if the last
 * one is full), then, without the lock, allocate its records and install its
 * guards, then publish it. Returns the arena with all its stacks counted as
 * taken (the caller hands them out or pools them), or NULL (-ENOMEM).
 */
static arena *carve(void) {
  pthread_mutex_lock(&pool.lock);
  chunk *c = pool.cur;
  if (!c) {
    size_t na = pool.next_chunk_arenas;
    pthread_mutex_unlock(&pool.lock);
    chunk *fresh = chunk_map(na);
    if (!fresh) return NULL;
    pthread_mutex_lock(&pool.lock);
    chunk_link_locked(fresh);
    /* Doubling from what was mapped: after a chunk cut short by a limit, the next asks for little more. */
    pool.next_chunk_arenas =
        fresh->narenas < CHUNK_ARENAS_MAX ? (size_t)fresh->narenas * 2 : CHUNK_ARENAS_MAX;
    /* Another thread may have mapped one meanwhile: carve from that one first, this one is next. */
    if (!pool.cur) pool.cur = fresh;
    c = pool.cur;
  }
  uint32_t idx = c->ncarved++;
  if (c->ncarved == c->narenas) pool.cur = NULL;
  size_t n = c->arena_stacks;
  c->taken += n; /* reserved: no unmap while we carve without the lock */
  chunk_recount_locked(c);
  pthread_mutex_unlock(&pool.lock);

  arena *a = weft__malloc(sizeof *a + n * sizeof(stack_slot));
  if (!a) {
    pthread_mutex_lock(&pool.lock);
    /* Give the place back if nobody carved after it; else it stays a hole (address space only). */
    if (c->ncarved == idx + 1 && c->npublished == idx) {
      c->ncarved--;
      if (!pool.cur && c == pool.chunks_tail) pool.cur = c;
    }
    c->taken -= n;
    chunk_recount_locked(c);
    pthread_mutex_unlock(&pool.lock);
    return NULL;
  }
  memset(a, 0, sizeof *a);
  a->base = c->map + (size_t)idx * n * pool.stride;
  a->chunk = c;
  a->gen = c->gen;
  a->index = idx;
  a->nstacks = (uint32_t)n;
  for (size_t i = 0; i < n; i++) {
    stack_slot *s = &a->slots[i];
    s->next = NULL;
    s->arena = a;
    s->index = (uint32_t)i;
    s->dirty = 0; /* no page yet: its first touch commits one */
#ifdef WEFT_HAVE_VALGRIND_H
    char *b = a->base + i * pool.stride + pool.guard;
    s->vg_id = VALGRIND_STACK_REGISTER(b, b + pool.size);
#else
    s->vg_id = 0;
#endif
  }
  arena_guard(a);
  atomic_fetch_add_explicit(&pool.mapped, n, memory_order_relaxed);
  atomic_fetch_add_explicit(&pool.fresh, n, memory_order_relaxed);
  pthread_mutex_lock(&pool.lock);
  c->arenas[idx] = a;
  c->npublished++;
  chunk_recount_locked(c);
  pthread_mutex_unlock(&pool.lock);
  return a;
}

/* Put a list of stacks back (cache spill, thread exit, fini). Stacks of an earlier generation go to their
 * orphaned chunks, which are unmapped when nothing of them is taken any more. */
static void pool_put(stack_slot *list) {
  chunk *dead = NULL;
  unsigned gen = atomic_load_explicit(&pool.gen, memory_order_relaxed);
  pthread_mutex_lock(&pool.lock);
  while (list) {
    stack_slot *s = list;
    list = s->next;
    if (s->arena->gen == gen) {
      arena_put_locked(s);
      continue;
    }
    chunk *c = s->arena->chunk;
    if (--c->taken == 0) {
      /* Its last stack: off the orphans' list, then unmapped outside the lock. */
      if (c->prev)
        c->prev->next = c->next;
      else
        pool.orphans = c->next;
      if (c->next) c->next->prev = c->prev;
      c->next = dead;
      dead = c;
    }
  }
  update_excess_locked();
  pthread_mutex_unlock(&pool.lock);
  while (dead) {
    chunk *next = dead->next;
    chunk_unmap(dead);
    dead = next;
  }
}

/* ------------------------------------------------------------------------ */
/* Trimming                                                                  */
/* ------------------------------------------------------------------------ */

/* The hint: dirty stacks a trim would give back, plus chunks it would unmap. pool.lock. */
static void update_excess_locked(void) {
  if (pool.ndirty > pool.recent) pool.recent = pool.ndirty;
  size_t e = pool.ndirty > pool.pool_max ? pool.ndirty - pool.pool_max : 0;
  atomic_store_explicit(&pool.excess, e + pool.nreleasable, memory_order_relaxed);
}

size_t weft__stack_excess(void) { return atomic_load_explicit(&pool.excess, memory_order_relaxed); }

/* Give back the pages of arena a's dirty free stacks (detached, so nobody takes one meanwhile). */
static void arena_decommit(arena *a, stack_slot *list, uint32_t nfree) {
  int saved = errno;
  if (nfree == a->nstacks) {
    /* All free: one call over the whole arena (guard markers and PROT_NONE guards survive DONTNEED). */
    (void)weft__madvise(a->base, (size_t)a->nstacks * pool.stride, MADV_DONTNEED);
  } else {
    struct iovec v[ARENA_LIMIT];
    size_t n = 0;
    for (stack_slot *s = list; s; s = s->next)
      if (s->dirty) {
        v[n].iov_base = slot_base(s);
        v[n].iov_len = pool.size;
        n++;
      }
    size_t done = advise_ranges(v, n, MADV_DONTNEED, &pool.vec_state_dontneed);
    for (size_t i = done; i < n; i++) (void)weft__madvise(v[i].iov_base, v[i].iov_len, MADV_DONTNEED);
  }
  errno = saved;
}

/*
 * The dirty stacks a trim keeps for a caller idle for idle_ns: all that the
 * last burst left (pool.recent) for hold_ns, then fewer, in a straight line,
 * down to the floor (pool_max) WEFT__STACK_DECAY_PER_HOLD x hold_ns later.
 * pool.lock.
 */
static size_t keep_locked(int64_t idle_ns, int64_t hold) {
  if (hold <= 0) return pool.pool_max;
  if (hold > INT64_MAX / 16) hold = INT64_MAX / 16; /* so that hold + decay cannot overflow */
  int64_t decay = WEFT__STACK_DECAY_PER_HOLD * hold;
  if (idle_ns >= hold + decay || pool.recent <= pool.pool_max) return pool.pool_max;
  if (idle_ns <= hold) return pool.recent;
  double left = (double)(hold + decay - idle_ns) / (double)decay;
  return pool.pool_max + (size_t)((double)(pool.recent - pool.pool_max) * left);
}

size_t weft__stack_trim(size_t max, int64_t idle_ns, int64_t hold_ns) {
  pthread_once(&once, once_init);
  size_t work = 0;
  pthread_mutex_lock(&pool.lock);
  if (pool.ndirty > pool.recent) pool.recent = pool.ndirty;
  size_t keep = keep_locked(idle_ns, hold_ns);
  /* Dirty stacks beyond what this age keeps, from the highest addresses down. */
  for (chunk *c = pool.chunks_tail; c && work < max && pool.ndirty > keep;) {
    arena *a = NULL;
    if (c->ndirty)
      for (uint32_t i = c->ncarved; i-- > 0;)
        if (c->arenas[i] && !c->arenas[i]->busy && c->arenas[i]->ndirty) {
          a = c->arenas[i];
          break;
        }
    if (!a) {
      c = c->prev;
      continue;
    }
    /* Detach its free list: allocations skip it while the kernel works. */
    stack_slot *list = a->free;
    uint32_t nfree = a->nfree, ndirty = a->ndirty;
    a->busy = true;
    c->nbusy++;
    a->free = NULL;
    a->nfree = a->ndirty = 0;
    c->ndirty -= ndirty;
    c->freemask &= ~((uint64_t)1 << a->index);
    pool.nfree -= nfree;
    pool.ndirty -= ndirty;
    pthread_mutex_unlock(&pool.lock);
    arena_decommit(a, list, nfree);
    atomic_fetch_add_explicit(&pool.trimmed, ndirty, memory_order_relaxed);
    pthread_mutex_lock(&pool.lock);
    a->busy = false;
    c->nbusy--;
    /* Back into the pool, clean; stacks freed into the arena meanwhile (dirty) are already in it. */
    while (list) {
      stack_slot *s = list;
      list = s->next;
      s->dirty = 0;
      c->taken++; /* arena_put_locked counts it back */
      arena_put_locked(s);
    }
    if (a->nfree) {
      c->freemask |= (uint64_t)1 << a->index;
      if (!pool.first_free || c->seq < pool.first_free->seq) pool.first_free = c;
    }
    /* The arena's own stacks freed while busy were counted in a but not in the pool's totals. */
    pool.nfree += a->nfree - nfree;
    pool.ndirty += a->ndirty;
    chunk_recount_locked(c);
    work++;
  }
  /* Chunks with nothing taken and nothing dirty: unmapped whole, page tables and all. */
  for (chunk *c = pool.chunks_tail; c && work < max;) {
    chunk *prev = c->prev;
    if (c->releasable) {
      chunk_unlink_locked(c);
      for (uint32_t i = 0; i < c->ncarved; i++) pool.nfree -= c->arenas[i]->nfree;
      pthread_mutex_unlock(&pool.lock);
      chunk_unmap(c);
      pthread_mutex_lock(&pool.lock);
      work++;
      /* The list may have changed while unlocked: start again from the top. */
      prev = pool.chunks_tail;
    }
    c = prev;
  }
  update_excess_locked();
  if (pool.ndirty <= pool.pool_max) pool.recent = pool.ndirty; /* down to the floor: the burst is over */
  size_t left = (pool.ndirty > keep ? pool.ndirty - keep : 0) + pool.nreleasable;
  pthread_mutex_unlock(&pool.lock);
  return left;
}

/* ------------------------------------------------------------------------ */
/* Probes                                                                    */
/* ------------------------------------------------------------------------ */

/*
 * Does this kernel enforce MADV_GUARD_INSTALL? Installs a guard on a scratch
 * page and checks: 1 yes, 0 no, -1 unknown (no memory for the probe).
 */
static int probe_madv_guard(void) {
  int saved = errno;
  char *m =
      weft__mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return -1;
  bool ok = false;
  if (weft__madvise(m, page, MADV_GUARD_INSTALL) == 0) {
    /* An emulator (qemu-user) may accept the advice and ignore it. Let the kernel read the page for us:
     * write(2) to a pipe fails with EFAULT when the page is guarded. (Not a call that takes a string or a
     * signal set: Valgrind reads those itself, and would fault.) Without a pipe, trust madvise. */
    int p[2];
    ok = true;
    if (pipe2(p, O_CLOEXEC) == 0) {
      ok = write(p[1], m, 1) < 0 && errno == EFAULT;
      close(p[0]);
      close(p[1]);
    }
  }
  munmap(m, 2 * page);
  errno = saved;
  return ok;
}

/* The process's mappings now: the lines of /proc/self/maps; -1 when it cannot be read. */
static long count_mappings(void) {
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  long lines = 0;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0)
    for (ssize_t i = 0; i < n; i++) lines += buf[i] == '\n';
  close(fd);
  return lines;
}

/* How many more mprotect-guarded stacks the mapping limit leaves room for (see the file comment). */
static size_t estimate_budget(void) {
  char buf[64];
  long max = 65530; /* the kernel's default, when /proc cannot tell */
  if (weft__read_small("/proc/sys/vm/max_map_count", buf, sizeof buf) > 0) {
    long v = strtol(buf, NULL, 10);
    if (v > 0) max = v;
  }
  long now = count_mappings();
  if (now < 0) now = 1000; /* a guess for a process of ordinary size */
  long margin = max / 8 > 4096 ? max / 8 : 4096;
  long avail = max - now - margin;
  return avail > 0 ? (size_t)avail / 2 : 0;
}

/*
 * Transparent huge pages set to "always" may back stacks with a 2 MiB page
 * on the first touch in a big anonymous mapping. Since Linux 6.7, MAP_STACK
 * implies VM_NOHUGEPAGE; before it, ask per chunk.
 */
static bool thp_needs_nohuge(void) {
  char buf[128];
  if (weft__read_small("/sys/kernel/mm/transparent_hugepage/enabled", buf, sizeof buf) <= 0) return false;
  if (!strstr(buf, "[always]")) return false;
  struct utsname u;
  if (uname(&u) != 0) return true;
  char *end;
  long major = strtol(u.release, &end, 10), minor = *end == '.' ? strtol(end + 1, NULL, 10) : 0;
  return major < 6 || (major == 6 && minor < 7);
}

/* The guard method for this init: WEFT_STACK_GUARD, else the probe. */
static int choose_method(void) {
  weft__settings s;
  weft__settings_get(&s);
  const char *env = s.stack_guard;
  bool forced_madv = false;
  if (env && *env) {
    if (strcmp(env, "none") == 0) return GUARD_NONE;
    if (strcmp(env, "mprotect") == 0) return GUARD_MPROTECT;
    if (strcmp(env, "madv") == 0 || strcmp(env, "madv-guard") == 0)
      forced_madv = true;
    else
      weft__warn("WEFT_STACK_GUARD=%s: expected madv, mprotect or none; probing instead", env);
  }
  int has = probe_madv_guard();
  if (has > 0 || (has < 0 && forced_madv)) return GUARD_MADV; /* unknown: trust the user; stacks fall back */
  if (forced_madv)
    weft__warn("WEFT_STACK_GUARD=madv: this kernel has no MADV_GUARD_INSTALL (Linux 6.13+); using mprotect");
  return GUARD_MPROTECT;
}

/* ------------------------------------------------------------------------ */
/* Init, alloc, free                                                         */
/* ------------------------------------------------------------------------ */

int weft__stack_init(size_t size) {
  pthread_once(&once, once_init);
  if (size == 0) size = STACK_DEFAULT;
  if (size > STACK_MAX) return -EINVAL;
  int saved = errno;
  weft__stack_fini(); /* a new configuration: drop what the previous one pooled */
  pool.size = round_up(size, page);
  pool.guard = round_up(GUARD_BYTES, page);
  pool.stride = pool.guard + pool.size;
  pool.arena_stacks = clamp_size(ARENA_BYTES / pool.stride, 1, ARENA_LIMIT);
  pool.cache_max = clamp_size(CACHE_BYTES / pool.size, CACHE_MIN, CACHE_LIMIT);
  pool.batch = pool.cache_max / 2;
  pool.pool_max = clamp_size(POOL_BYTES / pool.size, POOL_MIN, POOL_LIMIT);
  pool.next_chunk_arenas = 1;
  pool.method = choose_method();
  pool.nohuge = thp_needs_nohuge();
  /* Estimated with madv-guard too, whose stacks fall back to mprotect one by one when madvise fails. The
   * stacks counted in n_mprotect (taken under an earlier init and still in use) are in the estimate's
   * count of mappings already. */
  size_t budget = pool.method == GUARD_NONE ? 0 : estimate_budget();
  atomic_store_explicit(&pool.budget, atomic_load(&pool.n_mprotect) + budget, memory_order_relaxed);
  atomic_store_explicit(&pool.warned, false, memory_order_relaxed);
  atomic_store_explicit(&pool.fresh, 0, memory_order_relaxed);
  atomic_store_explicit(&pool.released, 0, memory_order_relaxed);
  atomic_store_explicit(&pool.trimmed, 0, memory_order_relaxed);
  atomic_store_explicit(&pool.guard_calls, 0, memory_order_relaxed);
  atomic_store_explicit(&pool.refused, 0, memory_order_relaxed);
  atomic_store_explicit(&pool.ready, true, memory_order_relaxed);
  errno = saved;
  return 0;
}

void weft__stack_fini(void) {
  pthread_once(&once, once_init);
  int saved = errno;
  pthread_mutex_lock(&pool.lock);
  atomic_store_explicit(&pool.ready, false, memory_order_relaxed);
  /* Every thread's cache back into the pool first: the caller guarantees that no thread uses the
   * allocator now. Still this generation, so they land in their arenas. */
  for (tls_state *t = pool.threads; t; t = t->next) {
    while (t->head) {
      stack_slot *s = t->head;
      t->head = s->next;
      /* Caches hold stacks of this generation only: the free path pools older ones directly. */
      arena_put_locked(s);
    }
    t->n = 0;
  }
  atomic_fetch_add_explicit(&pool.gen, 1, memory_order_relaxed);
  /* Chunks with nothing taken go; the others become orphans until their last stack comes back. */
  chunk *dead = NULL;
  while (pool.chunks) {
    chunk *c = pool.chunks;
    chunk_unlink_locked(c);
    if (c->taken == 0) {
      c->next = dead;
      dead = c;
    } else {
      c->prev = NULL;
      c->next = pool.orphans;
      if (pool.orphans) pool.orphans->prev = c;
      pool.orphans = c;
    }
  }
  for (chunk *c = pool.orphans, *next; c; c = next) {
    next = c->next;
    if (c->taken == 0) {
      if (c->prev)
        c->prev->next = c->next;
      else
        pool.orphans = c->next;
      if (c->next) c->next->prev = c->prev;
      c->next = dead;
      dead = c;
    }
  }
  pool.nfree = pool.ndirty = 0;
  pool.recent = 0;
  atomic_store_explicit(&pool.excess, 0, memory_order_relaxed);
  /* The pidfd is reopened at the next use: a stopped runtime holds no descriptor. */
  if (pool.pidfd >= 0) close(pool.pidfd);
  pool.pidfd = -1;
  pthread_mutex_unlock(&pool.lock);
  while (dead) {
    chunk *next = dead->next;
    chunk_unmap(dead);
    dead = next;
  }
  errno = saved;
}

/* The cache is empty: take a batch from the pool, or carve a fresh arena. */
static int alloc_slow(tls_state *t, stack_slot **out) {
  if (!atomic_load_explicit(&pool.ready, memory_order_relaxed)) return -EINVAL;
  bool cache = tls_register(t);
  pthread_mutex_lock(&pool.lock);
  stack_slot *got = pool_take_locked();
  if (got && cache) {
    for (size_t i = 0; i < pool.batch; i++) {
      stack_slot *s = pool_take_locked();
      if (!s) break;
      s->next = t->head;
      t->head = s;
      t->n++;
    }
  }
  if (got) update_excess_locked();
  pthread_mutex_unlock(&pool.lock);
  if (got) {
    *out = got;
    return 0;
  }
  int saved = errno; /* weft changes errno only where it reports an error through it: nowhere */
  arena *a = carve();
  errno = saved;
  if (!a) {
    atomic_fetch_add_explicit(&pool.refused, 1, memory_order_relaxed);
    return -ENOMEM;
  }
  /* Slot 0 for the caller, the cache filled to half (room left for the stacks that come back), the rest
   * pooled. */
  *out = &a->slots[0];
  size_t i = 1;
  if (cache) {
    size_t room = t->n < pool.batch ? pool.batch - t->n : 0;
    size_t end = a->nstacks < 1 + room ? a->nstacks : 1 + room;
    for (size_t j = end; j-- > 1;) {
      a->slots[j].next = t->head;
      t->head = &a->slots[j];
      t->n++;
    }
    i = end;
  }
  if (i < a->nstacks) {
    pthread_mutex_lock(&pool.lock);
    for (size_t j = a->nstacks; j-- > i;) arena_put_locked(&a->slots[j]);
    update_excess_locked();
    pthread_mutex_unlock(&pool.lock);
  }
  return 0;
}

int weft__stack_alloc(void **base, size_t *size, void **cookie) {
  tls_state *t = &tls;
  stack_slot *s = t->head;
  if (WEFT__LIKELY(s != NULL)) {
    t->head = s->next;
    t->n--;
    atomic_store_explicit(&t->hits, atomic_load_explicit(&t->hits, memory_order_relaxed) + 1,
                          memory_order_relaxed);
  } else {
    int r = alloc_slow(t, &s);
    if (r != 0) return r;
    atomic_store_explicit(&t->misses, atomic_load_explicit(&t->misses, memory_order_relaxed) + 1,
                          memory_order_relaxed);
  }
  count_in_use(t, 1);
  s->dirty = 1;
  s->taken = 1;
#ifdef WEFT_HAVE_VALGRIND_H
  /* A stack handed out is addressable from its base to its top: the last fiber's frames were popped from
   * it (memcheck marks what lies below a stack pointer that moved up as no longer addressable), and the
   * scheduler may write a fiber's record and first frame anywhere near the top. */
  VALGRIND_MAKE_MEM_UNDEFINED(slot_base(s), pool.size);
#endif
  *base = slot_base(s);
  *size = pool.size;
  *cookie = s;
  return 0;
}

/* The cache is full, or the thread has none, or the stack is of an earlier generation. */
static void free_slow(tls_state *t, stack_slot *s) {
  int saved = errno;
  s->next = NULL;
  if (s->arena->gen == atomic_load_explicit(&pool.gen, memory_order_relaxed) && tls_register(t)) {
    s->next = t->head;
    t->head = s;
    t->n++;
    if (t->n <= pool.cache_max) {
      errno = saved;
      return;
    }
    /* Full: keep the hot (most recently freed) part, send the cold tail to the pool. */
    size_t keep = t->n - pool.batch - 1; /* cache_max - batch: at least 2 */
    stack_slot *cut = t->head;
    for (size_t i = 1; i < keep; i++) cut = cut->next;
    s = cut->next;
    cut->next = NULL;
    t->n = keep;
  }
  pool_put(s);
  errno = saved;
}

void weft__stack_free(void *cookie) {
  stack_slot *s = cookie;
  if (!s) return;
  WEFT__ASSERT(s->taken); /* a stack returned twice would be handed to two fibers */
  s->taken = 0;
#ifdef WEFT_ASAN
  __asan_unpoison_memory_region(slot_base(s), pool.size);
#endif
  tls_state *t = &tls;
  count_in_use(t, -1);
  if (WEFT__LIKELY(t->state == TLS_LIVE && t->n < pool.cache_max &&
                   s->arena->gen == atomic_load_explicit(&pool.gen, memory_order_relaxed))) {
    s->next = t->head;
    t->head = s;
    t->n++;
    return;
  }
  free_slow(t, s);
}

void weft__stack_cache_flush(void) {
  tls_state *t = &tls;
  if (!t->head) return;
  stack_slot *list = t->head;
  t->head = NULL;
  t->n = 0;
  pool_put(list);
}

/* At thread exit: the cache goes to the pool, the count to the exited sum. */
static void tls_destructor(void *arg) {
  tls_state *t = arg;
  pthread_mutex_lock(&pool.lock);
  /* Under the lock, like fini's emptying of the caches: a thread may exit while fini runs. */
  stack_slot *list = t->head;
  t->head = NULL;
  t->n = 0;
  if (t->prev)
    t->prev->next = t->next;
  else
    pool.threads = t->next;
  if (t->next) t->next->prev = t->prev;
  pool.exited_delta += atomic_load_explicit(&t->delta, memory_order_relaxed);
  pool.exited_hits += atomic_load_explicit(&t->hits, memory_order_relaxed);
  pool.exited_misses += atomic_load_explicit(&t->misses, memory_order_relaxed);
  atomic_store_explicit(&t->delta, 0, memory_order_relaxed);
  t->state = TLS_DEAD;
  pthread_mutex_unlock(&pool.lock);
  pool_put(list);
}

/* ------------------------------------------------------------------------ */
/* Queries                                                                   */
/* ------------------------------------------------------------------------ */

const char *weft__stack_guard_name(void) {
  return atomic_load_explicit(&pool.ready, memory_order_relaxed) ? guard_names[pool.method] : NULL;
}

const char *weft__stack_guard_of(const void *cookie) {
  return cookie ? guard_names[((const stack_slot *)cookie)->method] : NULL;
}

size_t weft__stack_size(void) { return pool.size; }
size_t weft__stack_guard_size(void) { return pool.guard; }

bool weft__stack_guard_contains(const void *cookie, const void *addr) {
  const stack_slot *s = cookie;
  if (!s) return false;
  uintptr_t a = (uintptr_t)addr, lo = (uintptr_t)slot_guard(s);
  return a >= lo && a - lo < pool.guard;
}

size_t weft__stack_in_use(void) {
  pthread_mutex_lock(&pool.lock);
  int64_t sum = pool.exited_delta + atomic_load_explicit(&pool.orphan_delta, memory_order_relaxed);
  for (tls_state *t = pool.threads; t; t = t->next)
    sum += atomic_load_explicit(&t->delta, memory_order_relaxed);
  pthread_mutex_unlock(&pool.lock);
  return sum > 0 ? (size_t)sum : 0;
}

void weft__stack_get_stats(weft__stack_stats *out) {
  out->in_use = weft__stack_in_use();
  pthread_mutex_lock(&pool.lock);
  out->cache_hits = pool.exited_hits;
  out->cache_misses = pool.exited_misses;
  for (tls_state *t = pool.threads; t; t = t->next) {
    out->cache_hits += atomic_load_explicit(&t->hits, memory_order_relaxed);
    out->cache_misses += atomic_load_explicit(&t->misses, memory_order_relaxed);
  }
  out->stride = pool.stride;
  out->pooled = pool.nfree;
  out->pooled_dirty = pool.ndirty;
  out->chunks = pool.nchunks;
  pthread_mutex_unlock(&pool.lock);
  out->cached = tls.n;
  out->mapped = atomic_load_explicit(&pool.mapped, memory_order_relaxed);
  out->cache_max = pool.cache_max;
  out->pool_max = pool.pool_max;
  out->arena_stacks = pool.arena_stacks;
  out->guard_mprotect = atomic_load_explicit(&pool.n_mprotect, memory_order_relaxed);
  out->guard_none = atomic_load_explicit(&pool.n_none, memory_order_relaxed);
  out->map_budget = atomic_load_explicit(&pool.budget, memory_order_relaxed);
  out->fresh = atomic_load_explicit(&pool.fresh, memory_order_relaxed);
  out->released = atomic_load_explicit(&pool.released, memory_order_relaxed);
  out->trimmed = atomic_load_explicit(&pool.trimmed, memory_order_relaxed);
  out->guard_calls = atomic_load_explicit(&pool.guard_calls, memory_order_relaxed);
  out->refused = atomic_load_explicit(&pool.refused, memory_order_relaxed);
  out->as_mapped = atomic_load_explicit(&pool.as_mapped, memory_order_relaxed);
}

#ifdef WEFT_TESTING
void weft__stack_set_map_budget(size_t n) {
  atomic_store_explicit(&pool.budget, atomic_load(&pool.n_mprotect) + n, memory_order_relaxed);
  atomic_store_explicit(&pool.warned, false, memory_order_relaxed);
}
#endif
