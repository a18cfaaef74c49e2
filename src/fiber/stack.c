/*
 * This file contains the fiber stack allocator and the stack overflow
 * handler (the contract is in stack.h).
 *
 * One stack is one anonymous mapping:
 *
 *   map                      base = map + guard                 top = base + size
 *    |<------- guard -------->|<------------- usable --------------->|
 *    | MADV_GUARD_INSTALL     | MAP_NORESERVE: the kernel commits a   |
 *    | markers, or PROT_NONE, | page when the fiber first touches it; |
 *    | or (none) plain memory | the fiber's sp starts at top          |
 *
 * Both ends are page aligned, so a fiber that only touches its top page
 * costs one page of memory, and the top page is the fiber's own (the
 * scheduler keeps the fiber struct elsewhere). The bookkeeping record
 * (stack_rec, the cookie) is a small malloc'd struct, not a header in the
 * mapping, for the same reason.
 *
 * Guard size: 64 KiB (or one page where pages are larger). A guard only
 * catches a frame that does not step over it, and C code does declare
 * buffers of tens of KiB on the stack (PATH_MAX arrays, printf's internals,
 * a char buf[32768]); 64 KiB catches all but the rare giant frame, while
 * GCC's -fstack-clash-protection code is caught by any guard. It costs
 * nothing to speak of: the guard is never committed (PTE markers or
 * PROT_NONE), it only takes address space, 64 KiB per stack (6.4 GB for
 * 100,000 stacks, of the 128 TiB a 47-bit user space has).
 *
 * Guard methods, probed at init, overridable with WEFT_STACK_GUARD:
 *
 *  - "madv-guard": madvise(MADV_GUARD_INSTALL), Linux 6.13+. Installs PTE
 *    markers; the mapping stays one VMA and merges with its neighbours, so
 *    guards never spend vm.max_map_count. The probe checks that a guarded
 *    page really refuses access (an emulator may accept the advice and
 *    ignore it). If the call fails for one stack (mlockall'd memory, say),
 *    that stack falls back to mprotect.
 *  - "mprotect": mprotect(PROT_NONE) splits the mapping in two VMAs, so
 *    each stack spends up to two of the process's vm.max_map_count
 *    mappings (65530 by default: about 30,000 guarded stacks at most). The
 *    budget: at init, (max_map_count - mappings now - margin) / 2 stacks,
 *    the margin being max(4096, max_map_count / 8) mappings left for the
 *    program, its libraries and its malloc. Past the budget, or when
 *    mprotect fails, a stack comes without a guard and one warning (per
 *    init) says so: weaker protection beats failing the spawn. The
 *    estimate is made once per init (each runtime start); the program's own
 *    later mappings are what the margin is for.
 *  - "none": no protection. The guard region stays reserved as plain
 *    memory below the stack (a cushion), so an overflow of up to the guard
 *    size goes undetected but lands in the stack's own mapping, not in a
 *    neighbouring stack; a bigger one corrupts whatever lies below.
 *
 * Pooling. A freed stack goes to the freeing thread's cache: a LIFO list in
 * thread-local storage, touched only by its thread, so the common case of a
 * carrier that frees a stack and soon takes one is a few pointer writes, no
 * lock and no atomic read-modify-write (the most recently freed stack, whose
 * pages are committed and warm, is reused first). A cache holds at most
 * cache_max stacks (32 of 256 KiB: at most 8 MiB of stack per thread). When
 * it is full, the cold half goes to the global pool (one lock per batch);
 * when it is empty, the next allocation takes a batch back from the pool
 * (one lock per batch), and only when the pool is empty too is a fresh
 * stack mapped. The global pool keeps at most pool_max stacks (64 MiB of
 * stack: 256 of 256 KiB); a stack freed beyond that is unmapped at once
 * (outside the lock). So a burst of 100,000 fibers leaves at most
 * pool_max + cache_max per thread stacks mapped once it is over, and the
 * memory the pool can hold is bounded by stack bytes, not by the size of
 * the last burst. Pooled stacks keep the pages their last fibers touched:
 * releasing them (MADV_DONTNEED) on every free would cost a system call and
 * page faults on the hot path, and the byte bounds already cap the worst
 * case.
 *
 * Frees from another thread go to that thread's cache, which is as good as
 * any (all stacks are alike). A thread's cache is flushed to the pool when
 * the thread exits (a pthread key destructor), and fini empties every live
 * thread's cache through a registry of caches, so nothing is ever stranded.
 * A stack mapped under an earlier init (a different size, say) that comes
 * back after fini is unmapped instead of pooled: each init starts a new
 * generation.
 *
 * The in-use count is the sum of per-thread counters (each written only by
 * its thread, read by anyone), so that counting does not put a shared cache
 * line on the hot path.
 *
 * Valgrind: each stack is registered (VALGRIND_STACK_REGISTER) while it is
 * mapped, so that a switch onto it is not taken for a huge stack frame.
 * AddressSanitizer: a freed stack's usable range is unpoisoned, because the
 * frames of a fiber that switched away for good never return and leave
 * their redzones poisoned: the next fiber, or whatever memory the address
 * range holds after munmap, would get false reports.
 *
 * Overflow. A fiber that runs off its stack faults in the guard; its own
 * stack has no room for a signal frame, so each carrier has an alternate
 * signal stack (weft__stack_thread_init) and the SIGSEGV/SIGBUS handler runs
 * there (SA_ONSTACK). It asks the scheduler (weft__fiber_fault_info)
 * whether the fault address, or failing that the interrupted stack
 * pointer, lies in the guard of the fiber running on this thread. If so it
 * writes one line naming the fiber and its stack size, with write(2) and
 * its own number formatting (async-signal-safe), and aborts. Any other
 * fault is the program's business: the handler calls the action that was
 * in place before weft's, as the kernel would have (its mask, SA_SIGINFO,
 * SA_RESETHAND); for SIG_DFL, and for SIG_IGN of a real fault (which would
 * only fault again forever), it restores the default action and returns, so
 * the faulting instruction runs again and the process dies as it would
 * have without weft. A handler the program installs after weft's replaces
 * it, and overflows then look like plain crashes.
 */
#include "stack.h"

#include "../sys.h"
#include "fiber.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/utsname.h>
#include <ucontext.h>
#include <unistd.h>

#ifdef WEFT_HAVE_VALGRIND_H
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
#define POOL_BYTES    ((size_t)64 << 20) /* global pool: at most this much usable stack */
#define POOL_MIN      16
#define POOL_LIMIT    4096
/* The alternate signal stack: room for our handler (a few hundred bytes) and for the program's chained
 * handler, which may print a backtrace. Lazily committed like fiber stacks: only touched pages cost. */
#define ALT_BYTES ((size_t)256 * 1024)

enum { GUARD_NONE = 0, GUARD_MPROTECT = 1, GUARD_MADV = 2 };
static const char *const guard_names[] = {"none", "mprotect", "madv-guard"};

/* One stack. The cookie that weft__stack_alloc hands out. */
typedef struct stack_rec {
  struct stack_rec *next; /* free-list link: owned by whichever cache or pool holds the stack */
  char *map;              /* lowest address of the mapping: the guard region starts here */
  size_t guard;           /* bytes of guard region, from map */
  size_t size;            /* usable bytes, from map + guard */
  unsigned gen;           /* pool.gen when mapped: freed into a later generation, it is unmapped */
  uint8_t method;         /* GUARD_*: what actually protects this stack's guard region */
  unsigned vg_id;         /* Valgrind's registration of the usable range */
} stack_rec;

enum { TLS_NEW = 0, TLS_LIVE = 1, TLS_DEAD = 2 };

/* Per-thread state: the stack cache and the alternate signal stack. */
typedef struct tls_state {
  stack_rec *head;        /* cached stacks, most recently freed first; only this thread (or fini) */
  size_t n;               /* stacks in head */
  _Atomic int64_t delta;  /* allocations minus frees by this thread: written by it, summed by anyone */
  int state;              /* TLS_NEW until registered; TLS_DEAD once the key destructor ran */
  struct tls_state *prev; /* registry links: pool.lock */
  struct tls_state *next;
  char *alt_map;  /* the alternate signal stack's mapping (guard page + stack), or NULL */
  size_t alt_len; /* its length */
} tls_state;

static __thread tls_state tls;

/* The global pool, the registry of thread caches, and the configuration. */
static struct {
  pthread_mutex_t lock;         /* guards head, n, threads, exited_delta */
  stack_rec *head;              /* pooled stacks */
  size_t n;                     /* stacks in head */
  tls_state *threads;           /* registered thread caches (live threads) */
  int64_t exited_delta;         /* deltas of threads that have exited */
  _Atomic int64_t orphan_delta; /* deltas counted by threads without a registered cache */
  /* Configuration: written by init and fini only, while no other thread uses the allocator. */
  _Atomic unsigned gen;  /* generation: bumped by every init and fini */
  atomic_bool ready;     /* between init and fini */
  size_t size;           /* usable bytes per stack */
  size_t guard;          /* guard bytes per stack */
  size_t cache_max;      /* bound of each thread cache */
  size_t batch;          /* stacks moved per transfer between a cache and the pool */
  size_t pool_max;       /* what the global pool keeps once trimmed */
  char *reserve;         /* the next fresh stack in the current reserve (see carve): pool.lock */
  size_t reserve_left;   /* stacks left in the reserve: pool.lock */
  _Atomic size_t excess; /* pool.n - pool_max when positive: a hint for weft__stack_excess */
  int method;            /* GUARD_*: the method new stacks get */
  bool nohuge;           /* madvise(MADV_NOHUGEPAGE) each new stack (see thp_needs_nohuge) */
  /* Counters. */
  _Atomic size_t mapped;     /* stacks mapped now */
  _Atomic size_t n_mprotect; /* of which guarded by mprotect: each spends mappings */
  _Atomic size_t n_none;     /* of which unguarded */
  _Atomic size_t budget;     /* most mprotect-guarded stacks mapped at once */
  atomic_bool warned;        /* the "stacks come unguarded" warning was given (this init) */
  _Atomic uint64_t fresh;    /* stacks mapped since init */
  _Atomic uint64_t released; /* stacks unmapped since init */
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER};

static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_key_t tls_key; /* its destructor flushes an exiting thread's cache */
static bool tls_key_ok;
static size_t page = 4096;

static void tls_destructor(void *arg);

/* fork() while another thread holds pool.lock would leave the child's lock held for ever. */
static void atfork_prepare(void) { pthread_mutex_lock(&pool.lock); }
static void atfork_release(void) { pthread_mutex_unlock(&pool.lock); }

/*
 * The child has only the forking thread. The caches of the parent's other
 * threads belong to threads that do not exist here, and threads the child
 * creates may get the same thread-local addresses: registering one of them
 * again would put an entry in the list twice (a cycle, and fini would loop
 * for ever). So the child forgets them, and the stacks they held with them
 * (their memory stays mapped in the child, unused).
 */
static void atfork_child(void) {
  tls_state *self = tls.state == TLS_LIVE ? &tls : NULL;
  pool.threads = self;
  if (self) self->prev = self->next = NULL;
  pthread_mutex_unlock(&pool.lock);
}

static void once_init(void) {
  long p = sysconf(_SC_PAGESIZE);
  if (p > 0) page = (size_t)p;
  tls_key_ok = pthread_key_create(&tls_key, tls_destructor) == 0;
  pthread_atfork(atfork_prepare, atfork_release, atfork_child);
}

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

static size_t clamp_size(size_t v, size_t lo, size_t hi) { return v < lo ? lo : v > hi ? hi : v; }

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
/* Mapping and unmapping                                                     */
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

/* Protect [m, m + guard) with the pool's method, falling back to weaker ones; returns the method used. */
static int guard_install(char *m, size_t guard) {
  int want = pool.method;
  if (want == GUARD_MADV) {
    if (weft__madvise(m, guard, MADV_GUARD_INSTALL) == 0) return GUARD_MADV;
    want = GUARD_MPROTECT; /* this stack only: the next one tries madvise again */
  }
  if (want == GUARD_MPROTECT && budget_take()) {
    if (weft__mprotect(m, guard, PROT_NONE) == 0) return GUARD_MPROTECT;
    atomic_fetch_sub_explicit(&pool.n_mprotect, 1, memory_order_relaxed);
    warn_unguarded("mprotect failed");
  }
  return GUARD_NONE;
}

/* Map a fresh stack. 0 or -ENOMEM; on failure nothing is left mapped or allocated. */
/*
 * Fresh stacks are carved from a reserve of SLAB stacks mapped at once: one
 * mmap, and one take of the process's mmap write lock, per SLAB stacks
 * instead of per stack (two carriers mapping stacks at the same time
 * otherwise take turns on that lock). Each stack is still unmapped on its
 * own (munmap splits the reserve's mapping where it must). The uncarved rest
 * of a reserve is unmapped by fini.
 */
#define SLAB 16

static int carve(char **out) {
  size_t len = pool.guard + pool.size;
  pthread_mutex_lock(&pool.lock);
  if (pool.reserve_left == 0) {
    char *m = weft__mmap(NULL, len * SLAB, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (m == MAP_FAILED) {
      pthread_mutex_unlock(&pool.lock);
      return -ENOMEM;
    }
    pool.reserve = m;
    pool.reserve_left = SLAB;
  }
  *out = pool.reserve;
  pool.reserve += len;
  pool.reserve_left--;
  pthread_mutex_unlock(&pool.lock);
  return 0;
}

static int stack_map(stack_rec **out) {
  stack_rec *s = weft__malloc(sizeof *s);
  if (!s) return -ENOMEM;
  char *m;
  if (carve(&m) != 0) {
    weft__free(s);
    return -ENOMEM;
  }
  s->next = NULL;
  s->map = m;
  s->guard = pool.guard;
  s->size = pool.size;
  s->gen = atomic_load_explicit(&pool.gen, memory_order_relaxed);
  s->method = (uint8_t)guard_install(m, s->guard);
  /* Best effort: a huge page would commit 2 MiB where the fiber touches 4 KiB. */
  if (pool.nohuge) (void)weft__madvise(m + s->guard, s->size, MADV_NOHUGEPAGE);
#ifdef WEFT_HAVE_VALGRIND_H
  s->vg_id = VALGRIND_STACK_REGISTER(m + s->guard, m + s->guard + s->size);
#else
  s->vg_id = 0;
#endif
  if (s->method == GUARD_NONE) atomic_fetch_add_explicit(&pool.n_none, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&pool.mapped, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&pool.fresh, 1, memory_order_relaxed);
  *out = s;
  return 0;
}

/* Unmap a stack and free its record. Never under pool.lock: munmap may wait for TLB shootdowns. */
static void stack_unmap(stack_rec *s) {
#ifdef WEFT_HAVE_VALGRIND_H
  VALGRIND_STACK_DEREGISTER(s->vg_id);
#endif
  if (munmap(s->map, s->guard + s->size) != 0) {
    /* Only possible when splitting a merged mapping would pass vm.max_map_count: give the pages back at
     * least, and lose the address space. */
    static atomic_bool warned_unmap;
    if (!atomic_exchange_explicit(&warned_unmap, true, memory_order_relaxed))
      weft__warn("munmap of a fiber stack failed (errno %d); its address space is lost", errno);
    (void)weft__madvise(s->map + s->guard, s->size, MADV_DONTNEED);
  }
  if (s->method == GUARD_MPROTECT) atomic_fetch_sub_explicit(&pool.n_mprotect, 1, memory_order_relaxed);
  if (s->method == GUARD_NONE) atomic_fetch_sub_explicit(&pool.n_none, 1, memory_order_relaxed);
  atomic_fetch_sub_explicit(&pool.mapped, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&pool.released, 1, memory_order_relaxed);
  weft__free(s);
}

static void unmap_list(stack_rec *s) {
  while (s) {
    stack_rec *next = s->next;
    stack_unmap(s);
    s = next;
  }
}

/*
 * Put a list of stacks in the global pool, and unmap any of an earlier
 * generation. The pool may grow past pool_max here: unmapping costs a TLB
 * shootdown on every CPU that runs the process (about 15 µs each on a
 * virtual machine), and doing it as fibers end would slow the end of every
 * burst, the wake-ups of the fibers still sleeping included. The excess is
 * unmapped later by weft__stack_trim, which carriers call when they have
 * nothing else to do.
 */
static void pool_put(stack_rec *list) {
  stack_rec *stale = NULL;
  unsigned gen = atomic_load_explicit(&pool.gen, memory_order_relaxed);
  pthread_mutex_lock(&pool.lock);
  bool ready = atomic_load_explicit(&pool.ready, memory_order_relaxed);
  while (list) {
    stack_rec *s = list;
    list = s->next;
    if (ready && s->gen == gen) {
      s->next = pool.head;
      pool.head = s;
      pool.n++;
    } else {
      s->next = stale;
      stale = s;
    }
  }
  atomic_store_explicit(&pool.excess, pool.n > pool.pool_max ? pool.n - pool.pool_max : 0,
                        memory_order_relaxed);
  pthread_mutex_unlock(&pool.lock);
  unmap_list(stale);
}

size_t weft__stack_excess(void) { return atomic_load_explicit(&pool.excess, memory_order_relaxed); }

size_t weft__stack_trim(size_t max) {
  stack_rec *out = NULL;
  pthread_mutex_lock(&pool.lock);
  while (max-- > 0 && pool.n > pool.pool_max) {
    stack_rec *s = pool.head;
    pool.head = s->next;
    pool.n--;
    s->next = out;
    out = s;
  }
  size_t left = pool.n > pool.pool_max ? pool.n - pool.pool_max : 0;
  atomic_store_explicit(&pool.excess, left, memory_order_relaxed);
  pthread_mutex_unlock(&pool.lock);
  int saved = errno;
  unmap_list(out);
  errno = saved;
  return left;
}

/* ------------------------------------------------------------------------ */
/* Init, alloc, free                                                         */
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

/* Read a small text file into buf (NUL-terminated); the bytes read, or -1. */
static ssize_t read_small(const char *path, char *buf, size_t cap) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, cap - 1);
  close(fd);
  if (n < 0) return -1;
  buf[n] = '\0';
  return n;
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
  if (read_small("/proc/sys/vm/max_map_count", buf, sizeof buf) > 0) {
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
 * Transparent huge pages set to "always" may back a stack with a 2 MiB page
 * on its first touch when neighbouring stacks merge into a big VMA. Since
 * Linux 6.7, MAP_STACK implies VM_NOHUGEPAGE; before it, ask per stack.
 */
static bool thp_needs_nohuge(void) {
  char buf[128];
  if (read_small("/sys/kernel/mm/transparent_hugepage/enabled", buf, sizeof buf) <= 0) return false;
  if (!strstr(buf, "[always]")) return false;
  struct utsname u;
  if (uname(&u) != 0) return true;
  char *end;
  long major = strtol(u.release, &end, 10), minor = *end == '.' ? strtol(end + 1, NULL, 10) : 0;
  return major < 6 || (major == 6 && minor < 7);
}

/* The guard method for this init: WEFT_STACK_GUARD, else the probe. */
static int choose_method(void) {
  const char *env = getenv("WEFT_STACK_GUARD");
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

int weft__stack_init(size_t size) {
  pthread_once(&once, once_init);
  if (size == 0) size = STACK_DEFAULT;
  if (size > STACK_MAX) return -EINVAL;
  int saved = errno;
  weft__stack_fini(); /* a new configuration: drop what the previous one pooled */
  pool.size = round_up(size, page);
  pool.guard = round_up(GUARD_BYTES, page);
  pool.cache_max = clamp_size(CACHE_BYTES / pool.size, CACHE_MIN, CACHE_LIMIT);
  pool.batch = pool.cache_max / 2;
  pool.pool_max = clamp_size(POOL_BYTES / pool.size, POOL_MIN, POOL_LIMIT);
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
  atomic_store_explicit(&pool.ready, true, memory_order_relaxed);
  errno = saved;
  return 0;
}

void weft__stack_fini(void) {
  pthread_once(&once, once_init);
  int saved = errno;
  stack_rec *all = NULL;
  pthread_mutex_lock(&pool.lock);
  atomic_store_explicit(&pool.ready, false, memory_order_relaxed);
  atomic_fetch_add_explicit(&pool.gen, 1, memory_order_relaxed);
  while (pool.head) {
    stack_rec *s = pool.head;
    pool.head = s->next;
    s->next = all;
    all = s;
  }
  pool.n = 0;
  /* Other threads' caches too: the caller guarantees that no thread uses the allocator now. */
  for (tls_state *t = pool.threads; t; t = t->next) {
    while (t->head) {
      stack_rec *s = t->head;
      t->head = s->next;
      s->next = all;
      all = s;
    }
    t->n = 0;
  }
  /* The reserve's uncarved rest (of this generation's size: fini runs before a resize). */
  char *rest = pool.reserve;
  size_t rest_len = pool.reserve_left * (pool.guard + pool.size);
  pool.reserve = NULL;
  pool.reserve_left = 0;
  pthread_mutex_unlock(&pool.lock);
  if (rest_len) munmap(rest, rest_len);
  unmap_list(all);
  errno = saved;
}

/* The cache is empty: take a batch from the pool, or map a fresh stack. */
static int alloc_slow(tls_state *t, stack_rec **out) {
  if (!atomic_load_explicit(&pool.ready, memory_order_relaxed)) return -EINVAL;
  bool cache = tls_register(t);
  stack_rec *got = NULL;
  pthread_mutex_lock(&pool.lock);
  if (pool.head) {
    got = pool.head;
    pool.head = got->next;
    pool.n--;
    for (size_t i = 0; cache && i < pool.batch && pool.head; i++) {
      stack_rec *s = pool.head;
      pool.head = s->next;
      pool.n--;
      s->next = t->head;
      t->head = s;
      t->n++;
    }
  }
  pthread_mutex_unlock(&pool.lock);
  if (got) {
    *out = got;
    return 0;
  }
  int saved = errno; /* weft changes errno only where it reports an error through it: nowhere */
  int r = stack_map(out);
  errno = saved;
  return r;
}

int weft__stack_alloc(void **base, size_t *size, void **cookie) {
  tls_state *t = &tls;
  stack_rec *s = t->head;
  if (WEFT__LIKELY(s != NULL)) {
    t->head = s->next;
    t->n--;
  } else {
    int r = alloc_slow(t, &s);
    if (r != 0) return r;
  }
  count_in_use(t, 1);
  *base = s->map + s->guard;
  *size = s->size;
  *cookie = s;
  return 0;
}

/* The cache is full, or the thread has none, or the stack is of an earlier generation. */
static void free_slow(tls_state *t, stack_rec *s) {
  int saved = errno;
  if (s->gen != atomic_load_explicit(&pool.gen, memory_order_relaxed)) {
    stack_unmap(s);
    errno = saved;
    return;
  }
  s->next = NULL;
  if (tls_register(t)) {
    s->next = t->head;
    t->head = s;
    t->n++;
    if (t->n <= pool.cache_max) {
      errno = saved;
      return;
    }
    /* Full: keep the hot (most recently freed) part, send the cold tail to the pool. */
    size_t keep = t->n - pool.batch - 1; /* cache_max - batch: at least 2 */
    stack_rec *cut = t->head;
    for (size_t i = 1; i < keep; i++) cut = cut->next;
    s = cut->next;
    cut->next = NULL;
    t->n = keep;
  }
  pool_put(s);
  errno = saved;
}

void weft__stack_free(void *cookie) {
  stack_rec *s = cookie;
  if (!s) return;
#ifdef WEFT_ASAN
  __asan_unpoison_memory_region(s->map + s->guard, s->size);
#endif
  tls_state *t = &tls;
  count_in_use(t, -1);
  if (WEFT__LIKELY(t->state == TLS_LIVE && t->n < pool.cache_max &&
                   s->gen == atomic_load_explicit(&pool.gen, memory_order_relaxed))) {
    s->next = t->head;
    t->head = s;
    t->n++;
    return;
  }
  free_slow(t, s);
}

/* At thread exit: the cache goes to the pool, the count to the exited sum, the alternate stack away. */
static void alt_release(tls_state *t);
static void tls_destructor(void *arg) {
  tls_state *t = arg;
  alt_release(t);
  pthread_mutex_lock(&pool.lock);
  /* Under the lock, like fini's emptying of the caches: a thread may exit while fini runs. */
  stack_rec *list = t->head;
  t->head = NULL;
  t->n = 0;
  if (t->prev)
    t->prev->next = t->next;
  else
    pool.threads = t->next;
  if (t->next) t->next->prev = t->prev;
  pool.exited_delta += atomic_load_explicit(&t->delta, memory_order_relaxed);
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
  return cookie ? guard_names[((const stack_rec *)cookie)->method] : NULL;
}

size_t weft__stack_size(void) { return pool.size; }
size_t weft__stack_guard_size(void) { return pool.guard; }

bool weft__stack_guard_contains(const void *cookie, const void *addr) {
  const stack_rec *s = cookie;
  if (!s) return false;
  uintptr_t a = (uintptr_t)addr, lo = (uintptr_t)s->map;
  return a >= lo && a - lo < s->guard;
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
  out->pooled = pool.n;
  pthread_mutex_unlock(&pool.lock);
  out->cached = tls.n;
  out->mapped = atomic_load_explicit(&pool.mapped, memory_order_relaxed);
  out->cache_max = pool.cache_max;
  out->pool_max = pool.pool_max;
  out->guard_mprotect = atomic_load_explicit(&pool.n_mprotect, memory_order_relaxed);
  out->guard_none = atomic_load_explicit(&pool.n_none, memory_order_relaxed);
  out->map_budget = atomic_load_explicit(&pool.budget, memory_order_relaxed);
  out->fresh = atomic_load_explicit(&pool.fresh, memory_order_relaxed);
  out->released = atomic_load_explicit(&pool.released, memory_order_relaxed);
}

/* ------------------------------------------------------------------------ */
/* The overflow handler                                                      */
/* ------------------------------------------------------------------------ */

static pthread_mutex_t install_lock = PTHREAD_MUTEX_INITIALIZER; /* guards installed and the old actions */
static bool installed;
static struct sigaction old_segv; /* the actions before weft's: written once, before the handler can run */
static struct sigaction old_bus;

static size_t put_str(char *buf, size_t n, size_t cap, const char *s) {
  while (*s && n < cap) buf[n++] = *s++;
  return n;
}

static size_t put_u64(char *buf, size_t n, size_t cap, uint64_t v) {
  char digits[20];
  size_t k = 0;
  do {
    digits[k++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  while (k && n < cap) buf[n++] = digits[--k];
  return n;
}

static void write_all(const char *buf, size_t n) {
  while (n) {
    ssize_t w = write(2, buf, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    buf += w;
    n -= (size_t)w;
  }
}

static WEFT__NORETURN void report_overflow(uint64_t id, size_t size) {
  char buf[192];
  size_t n = 0, cap = sizeof buf;
  n = put_str(buf, n, cap, "weft: fiber ");
  n = put_u64(buf, n, cap, id);
  n = put_str(buf, n, cap, " overflowed its stack (");
  n = put_u64(buf, n, cap, size);
  n = put_str(buf, n, cap, " bytes); raise WEFT_STACK_SIZE or use less stack\n");
  write_all(buf, n);
  /* Die of SIGABRT even if the program handles it: its handler would run on a broken fiber. */
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(SIGABRT, &dfl, NULL);
  abort();
}

/* The interrupted context's stack pointer, or NULL where we do not know how to read it. */
static const void *fault_sp(void *uctx) {
  const ucontext_t *uc = uctx;
  if (!uc) return NULL;
#if defined(__x86_64__)
  return (const void *)uc->uc_mcontext.gregs[REG_RSP];
#elif defined(__aarch64__)
  return (const void *)uc->uc_mcontext.sp;
#else
  return NULL;
#endif
}

static void set_default(int sig) {
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, NULL);
}

/* Hand a fault that is not an overflow to the action that was there before weft's. */
static void chain(int sig, siginfo_t *si, void *uctx) {
  const struct sigaction *old = sig == SIGBUS ? &old_bus : &old_segv;
  /* si_code > 0: the kernel raised it for a fault; <= 0: kill(), sigqueue(), tgkill() sent it. */
  bool fault = si == NULL || si->si_code > 0;
  if (!(old->sa_flags & SA_SIGINFO) && old->sa_handler == SIG_IGN && !fault) return;
  if (!(old->sa_flags & SA_SIGINFO) && (old->sa_handler == SIG_DFL || old->sa_handler == SIG_IGN)) {
    /* A fault runs its instruction again on return and now dies of the default action; an ignored
     * fault would fault again for ever, which the kernel would not allow either. A sent signal is
     * raised again: it stays pending (blocked while we run) and kills on return. */
    set_default(sig);
    if (!fault) raise(sig);
    return;
  }
  /* The program's handler, called as the kernel would have called it. */
  sigset_t prev;
  pthread_sigmask(SIG_BLOCK, &old->sa_mask, &prev);
  if (old->sa_flags & SA_RESETHAND) set_default(sig);
  if (old->sa_flags & SA_SIGINFO)
    old->sa_sigaction(sig, si, uctx);
  else
    old->sa_handler(sig);
  pthread_sigmask(SIG_SETMASK, &prev, NULL);
}

static void on_fault(int sig, siginfo_t *si, void *uctx) {
  int saved = errno;
  if (si && si->si_code > 0) {
    uint64_t id = 0;
    size_t size = 0;
    /* The address first; then the stack pointer, for a frame that moved sp into the guard and faulted
     * writing somewhere else. */
    if (weft__fiber_fault_info(si->si_addr, &id, &size)) report_overflow(id, size);
    const void *sp = fault_sp(uctx);
    if (sp && weft__fiber_fault_info(sp, &id, &size)) report_overflow(id, size);
  }
  chain(sig, si, uctx);
  errno = saved;
}

int weft__stack_overflow_install(void) {
  pthread_mutex_lock(&install_lock);
  int r = 0;
  if (!installed) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGSEGV, &sa, &old_segv) != 0) {
      r = -errno;
    } else if (sigaction(SIGBUS, &sa, &old_bus) != 0) {
      r = -errno;
      sigaction(SIGSEGV, &old_segv, NULL);
    } else {
      installed = true;
    }
  }
  pthread_mutex_unlock(&install_lock);
  return r;
}

int weft__stack_thread_init(void) {
  tls_state *t = &tls;
  if (t->alt_map) return 0;
  pthread_once(&once, once_init);
  stack_t cur;
  /* A thread that has an alternate stack already (the program's, or a sanitizer's) keeps it. */
  if (sigaltstack(NULL, &cur) == 0 && !(cur.ss_flags & SS_DISABLE)) return 0;
  size_t size = ALT_BYTES;
  long min = sysconf(_SC_SIGSTKSZ);
  if (min > 0 && (size_t)min * 4 > size) size = (size_t)min * 4;
  size = round_up(size, page);
  size_t len = page + size;
  char *m = weft__mmap(NULL, len, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (m == MAP_FAILED) return -ENOMEM;
  /* A guard page, best effort: a handler that overflows the alternate stack then faults (and dies) instead
   * of writing over a neighbour. One mapping per carrier is affordable even with mprotect. */
  int saved = errno;
  if (weft__madvise(m, page, MADV_GUARD_INSTALL) != 0) (void)weft__mprotect(m, page, PROT_NONE);
  errno = saved;
  stack_t ss;
  memset(&ss, 0, sizeof ss);
  ss.ss_sp = m + page;
  ss.ss_size = size;
  int err = 0;
  if (weft__fault(WEFT__F_SIGALTSTACK))
    err = ENOMEM;
  else if (sigaltstack(&ss, NULL) != 0)
    err = errno;
  if (err) {
    munmap(m, len);
    return -err;
  }
  t->alt_map = m;
  t->alt_len = len;
  (void)tls_register(t); /* so that a thread that exits without fini still frees it */
  return 0;
}

/* Remove the thread's alternate stack if it is still weft's, and free it. */
static void alt_release(tls_state *t) {
  if (!t->alt_map) return;
  stack_t cur;
  if (sigaltstack(NULL, &cur) != 0) return;
  if (!(cur.ss_flags & SS_DISABLE) && cur.ss_sp == (void *)(t->alt_map + page)) {
    if (cur.ss_flags & SS_ONSTACK) return; /* running on it: cannot remove it now */
    stack_t off;
    memset(&off, 0, sizeof off);
    off.ss_flags = SS_DISABLE;
    if (sigaltstack(&off, NULL) != 0) return;
    munmap(t->alt_map, t->alt_len);
  }
  /* Otherwise the program installed another one since, and may have saved ours to restore it later: the
   * mapping stays (address space only; its touched pages are few). */
  t->alt_map = NULL;
  t->alt_len = 0;
}

void weft__stack_thread_fini(void) { alt_release(&tls); }

#ifdef WEFT_TESTING
void weft__stack_set_map_budget(size_t n) {
  atomic_store_explicit(&pool.budget, atomic_load(&pool.n_mprotect) + n, memory_order_relaxed);
  atomic_store_explicit(&pool.warned, false, memory_order_relaxed);
}

void weft__stack_overflow_reset(void) {
  pthread_mutex_lock(&install_lock);
  installed = false;
  pthread_mutex_unlock(&install_lock);
}
#endif
