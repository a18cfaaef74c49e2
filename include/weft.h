/*
 * weft: parallel map and futures for C.
 *
 * CPU-bound work runs as OpenMP tasks; blocking work runs on weft's own M:N
 * fiber scheduler (user-level threads on one carrier thread per core). Where
 * fibers are unavailable or disabled, blocking work falls back transparently
 * on the OpenMP path; without OpenMP, weft runs CPU work on a small pool of
 * its own threads.
 *
 * This is weft's public header; each optional component has its own
 * (weft_mpi.h, docs/mpi.md), with the same conventions. Conventions, which
 * hold for every call unless its comment says otherwise:
 *
 *  - Errors are return values: 0 (or a count) on success, a negative errno
 *    value on failure, as in libuv. weft never reports an error through
 *    errno (errno belongs to an OS thread, and a fiber is not one); what
 *    errno holds after a weft call is unspecified. weft_strerror() describes
 *    any value.
 *  - A call checks its arguments before it changes any state: when it fails
 *    with -EINVAL, nothing was scheduled and no callback will run.
 *  - Time limits are absolute deadlines in nanoseconds on CLOCK_MONOTONIC (see
 *    weft_now_ns()): -1 waits forever, 0 tries once without waiting; any other
 *    negative value is -EINVAL. Expiry gives -ETIMEDOUT. A wait never ends
 *    before its deadline; a fiber's may end up to 1/64 of its length after it
 *    (timer slack: 16 µs of a 1 ms wait, 0.47 s of 30 s).
 *  - A blocking call made on a fiber parks the fiber and frees its carrier for
 *    other fibers; made on a plain thread or in an OpenMP task it blocks the
 *    OS thread, with the same results.
 *  - "Contexts" in each comment name who may call: a plain thread (any thread
 *    that is not running a fiber, the main thread included), a fiber, an
 *    OpenMP task or parallel region (of the program's own or weft's).
 *  - When a resource runs out (memory, address space under RLIMIT_AS or a
 *    memory cgroup's limit, descriptors, threads), work is never lost: a
 *    call that allocates returns -ENOMEM before anything runs (a map's
 *    bookkeeping, a future's record, a channel, a scope, a local value);
 *    work that has started goes on with less (a blocking map with fewer
 *    elements in flight, a refused fiber's future on the CPU path, fewer
 *    carriers, a pinned carrier left uncompensated, an offloaded call run on
 *    its carrier, a timer kept off the heap); a call that needs a descriptor
 *    returns the system's error (-EMFILE, -ENFILE). weft_pmap and
 *    weft_future_start say what they do in detail; docs/reliability.md has
 *    the table of every resource and the test that shows it.
 *
 * Fibers do not move between carriers once they have started, so errno and
 * thread-local variables stay those of one OS thread for a fiber's whole life
 * (docs/architecture.md says why). Each fiber has its own errno value, as a
 * thread does (saved and restored across switches); other thread-local
 * variables are the carrier thread's, shared by the fibers that run on it:
 * use weft_local_get/set for per-fiber values.
 *
 * Platforms: Linux (epoll, futexes and /proc are used throughout), on
 * x86-64 and aarch64 with weft's own context switch, elsewhere with
 * ucontext; C11 and POSIX threads. Build and link: `pkg-config --cflags
 * --libs weft`, or CMake's `find_package(weft)` and the target `weft::weft`.
 */
#ifndef WEFT_H
#define WEFT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define WEFT_VERSION_MAJOR  0
#define WEFT_VERSION_MINOR  1
#define WEFT_VERSION_PATCH  0
#define WEFT_VERSION_STRING "0.1.0"

#if defined(__GNUC__)
#define WEFT_EXTERN __attribute__((visibility("default")))
#else
#define WEFT_EXTERN
#endif

/* ------------------------------------------------------------------------ */
/* Kinds, parallel map                                                       */
/* ------------------------------------------------------------------------ */

/* What a piece of work does, which decides where it runs. */
typedef enum weft_kind {
  WEFT_CPU = 0,     /* computes: runs as OpenMP tasks */
  WEFT_BLOCKING = 1 /* waits (sleep, I/O, locks): runs on fibers, or falls back on the CPU path */
} weft_kind;

/*
 * Options for weft_pmap(). Zero-initialise (or use WEFT_PMAP_OPTS_INIT) and
 * set what you need: more fields may be added at the end in later versions,
 * and zero will always mean the default, so code that starts from zero keeps
 * its meaning when it is recompiled.
 */
typedef struct weft_pmap_opts {
  weft_kind kind;      /* WEFT_CPU (default) or WEFT_BLOCKING */
  size_t grain;        /* CPU: indices per claim; 0 = automatic (the cost model picks the workers) */
  size_t max_parallel; /* BLOCKING: most elements in flight; 0 = no bound */
  unsigned flags;      /* 0, or WEFT_PMAP_EXPLAIN; other bits are reserved and must be 0 */
} weft_pmap_opts;

#define WEFT_PMAP_OPTS_INIT                                                                                  \
  { WEFT_CPU, 0, 0, 0 }

/*
 * opts->flags: print on stderr, after the call, one line that says where the
 * map ran and why, e.g. "weft: pmap n=100 at main+0x4c (app): 2.2 µs of work
 * estimated (100 x 22 ns), 4.1 µs to start 2 workers (0.8 µs if warm), 5.2 µs
 * on them: ran on the caller in 2.3 µs (less work than starting workers
 * costs)". The environment variable WEFT_EXPLAIN=1 does the same for every
 * map, once per call site and decision (again when the decision changes);
 * WEFT_EXPLAIN=2 for every call. Explained calls are always timed, so they
 * cost a few clock reads more. (Bit 0 stays reserved.)
 */
#define WEFT_PMAP_EXPLAIN 0x2u

/* One element of a parallel map: return 0, or any nonzero value as an error. */
typedef int (*weft_index_fn)(void *ctx, size_t i);

/*
 * weft_pmap: call fn(ctx, i) exactly once for every i in [0, n), in parallel,
 * and return when every call has returned (eager: results go wherever fn
 * writes them). Calls for different i may run at the same time on different
 * threads or fibers, in any order.
 *
 * Returns 0 when every call returned 0. Otherwise, the value returned by the
 * call with the LOWEST index among those that returned nonzero (so the result
 * does not depend on timing); every element still runs. weft's own errors:
 * -EINVAL when fn is NULL, opts->kind is not a weft_kind, or opts->flags has
 * a bit other than WEFT_PMAP_EXPLAIN (nothing runs); -ENOMEM when the
 * bookkeeping for the call cannot be allocated (nothing runs). Once elements
 * have started, weft never gives up on the rest.
 *
 * When resources run out (weft_stats.stacks_refused counts it): a BLOCKING
 * map that cannot get a fiber stack (address space, memory, mappings, or the
 * reserve weft keeps under RLIMIT_AS for the program and the OpenMP runtime)
 * goes on with the fibers it has, each taking the next index when its element
 * is done, so fewer elements are in flight; with no fiber left, the caller
 * runs the next element itself (needing nothing new) and tries fibers again
 * after it. Every element runs exactly once; the call returns -ENOMEM only
 * before any element has started. A CPU map needs no new resource per element
 * (the OpenMP runtime's threads, or the caller alone).
 *
 * WEFT_CPU: the elements run on OpenMP's threads. Outside any parallel
 * region, with the automatic grain, while weft's own OpenMP team is open
 * (CPU futures opened it: its workers are busy, or idle for less than 50
 * ms), the caller puts parts of the range on its work-stealing deque for the team's workers to steal and
 * runs the rest itself, waiting only for parts a worker took; otherwise the
 * call opens a parallel region on the runtime's pooled threads
 * (OMP_NUM_THREADS is respected). Inside a
 * program's parallel region or task it creates tasks in the enclosing team
 * and never a nested team; on a fiber it hands the work to weft's OpenMP
 * team and parks the fiber. Built without OpenMP, the elements
 * run on weft's own pool of threads, with the caller taking part.
 *
 * With the automatic grain (0), a map called outside a fiber first asks a
 * cost model how many workers pay for themselves: it measures, per element
 * function and calling thread, what an element costs (the first call at a
 * site times its first elements on the caller; later calls are sampled) and
 * what starting and joining the team costs right now (which depends on how
 * long ago the team last ran). A map too small to pay for the team runs
 * every element on the calling thread, in index order, without opening a
 * region or making a task (fn sees the caller's omp_get_level() and the
 * caller's thread-local values); a large one uses every worker; inside
 * another map whose workers are all busy it runs on the caller. An explicit
 * grain bypasses the model: the map always runs on the whole team, as asked.
 * WEFT_PMAP_EXPLAIN (or WEFT_EXPLAIN=1) shows each decision and its reason.
 *
 * WEFT_BLOCKING: each element runs on a fiber of its own (at most
 * max_parallel at a time when that is not 0), so elements may sleep or wait
 * on I/O, locks and futures without holding an OS thread. Without fibers it
 * runs on the CPU path with one element per claim. An element that parks
 * lets the map's next element start at once, but a BLOCKING future that was
 * started earlier and is not yet running starts first, in its place (one
 * queued on the element's carrier, else one of two or more queued on
 * another): work asked for earlier is admitted earlier, so a map of clients
 * beside a server that starts a future per accepted connection does not
 * start every client before those connections are served.
 *
 * Contexts: any (plain thread, fiber, OpenMP task or region, an element of
 * another weft_pmap); many threads may call at once. fn and ctx stay the
 * caller's: weft keeps no reference once the call returns.
 */
WEFT_EXTERN int weft_pmap(size_t n, weft_index_fn fn, void *ctx, const weft_pmap_opts *opts);

/* ------------------------------------------------------------------------ */
/* Ranges and deterministic reductions                                       */
/* ------------------------------------------------------------------------ */

/*
 * One sub-range of weft_pmap_range: handle every index of [lo, hi) (lo < hi)
 * and return 0, or any nonzero value as an error. The loop is fn's own, so
 * the compiler can inline and vectorise its body.
 */
typedef int (*weft_range_fn)(void *ctx, size_t lo, size_t hi);

/*
 * weft_pmap_range: call fn(ctx, lo, hi) on disjoint sub-ranges that cover
 * [0, n) exactly once, in parallel, and return when every call has
 * returned. For elements of a few nanoseconds, where weft_pmap's call per
 * index costs as much as the element.
 *
 * The sub-ranges: with opts->grain set, the CPU kind cuts [0, n) into
 * sub-ranges of exactly grain indices (the last one shorter), each one call;
 * with the automatic grain (0) they are whatever the workers claim: the
 * whole range in one call when the cost model (see weft_pmap) runs the map
 * on the caller (after, on a site's first calls, a few short sub-ranges that
 * it times), else halves of each worker's share, shrinking as the workers
 * meet. fn must not depend on where the cuts fall. WEFT_BLOCKING: one fiber
 * per sub-range in flight (at most max_parallel), each sub-range grain
 * indices (automatic: 1, as weft_pmap's fibers).
 *
 * Returns 0 when every call returned 0; otherwise the value returned by the
 * call with the LOWEST lo among those that returned nonzero (every
 * sub-range still runs; a nonzero return says nothing of the indices of
 * its sub-range). weft's own errors, nothing run: -EINVAL when fn is NULL
 * or opts is invalid as for weft_pmap; the others of weft_pmap (-ENOMEM,
 * -ESHUTDOWN) where its BLOCKING kind would return them. n = 0 returns 0
 * and calls nothing. The CPU kind allocates nothing (n = SIZE_MAX is
 * valid).
 *
 * Contexts: as weft_pmap (any: plain thread, fiber, OpenMP task or region,
 * an element of another map; in a child after fork()). fn and ctx stay the
 * caller's: weft keeps no reference once the call returns.
 */
WEFT_EXTERN int weft_pmap_range(size_t n, weft_range_fn fn, void *ctx, const weft_pmap_opts *opts);

/*
 * One leaf of weft_reduce: fold every index of [lo, hi) (lo < hi) into acc,
 * which holds a copy of the identity when the call starts (size bytes):
 * weft_reduce's result itself when the whole range is one leaf, else a copy
 * of weft's, aligned for any type and on a cache line of its own.
 */
typedef void (*weft_reduce_fn)(void *ctx, size_t lo, size_t hi, void *acc);

/* Combine two partial results: acc = acc (+) other, where other covers the indices right after acc's. */
typedef void (*weft_combine_fn)(void *ctx, void *acc, const void *other);

/*
 * weft_reduce's automatic grain: leaves of at most ceil(n / WEFT_REDUCE_LEAVES)
 * indices, never below WEFT_REDUCE_GRAIN_MIN.
 */
#define WEFT_REDUCE_LEAVES    1024
#define WEFT_REDUCE_GRAIN_MIN 1024

/*
 * weft_reduce: a deterministic parallel reduction of [0, n). The range is
 * split in halves, [lo, mid) and [mid, hi) with mid = lo + (hi - lo) / 2,
 * until a part has at most g indices: each such leaf is folded by
 * fn(ctx, lo, hi, acc) into its own copy of identity (size bytes), and the
 * two halves of every split are combined, combine(ctx, left, right), the
 * left one receiving the result, up to the whole range, whose result is
 * copied to result. g is opts->grain, or with the automatic grain (0)
 * max(WEFT_REDUCE_GRAIN_MIN, ceil(n / WEFT_REDUCE_LEAVES)): at most about
 * 2048 leaves, and a range of up to 1024 indices is a single leaf folded on
 * the caller with no copy and no combination (on a fiber, the CPU kind's
 * leaf goes to weft's team as any CPU map does). Elements that cost
 * microseconds each want a smaller grain (the automatic one is for
 * elements of nanoseconds).
 *
 * DETERMINISTIC: the tree of leaves and combinations depends only on n and
 * g, never on timing, the number of threads or where the work runs, so a
 * floating-point sum is bitwise the same in every run and at every thread
 * count (an OpenMP reduction's order is unspecified; TBB's parallel_reduce
 * is not deterministic). Whole subtrees run in parallel, on the CPU path
 * as weft_pmap's CPU kind (the cost model decides how many workers) or, with
 * WEFT_BLOCKING, on fibers; the subtrees' results are combined on the
 * caller.
 *
 * Returns 0 with *result written; or, with nothing run and result left
 * alone: -EINVAL when fn, combine, identity or result is NULL, size is 0
 * or above PTRDIFF_MAX, or opts is invalid as for weft_pmap; -ENOMEM when
 * the partial results cannot be allocated (a few cache lines per subtree
 * run in parallel; none for a single leaf, nor for a tree whose partial
 * results fit 2 KiB of weft_reduce's own frame, as the 16 subtrees of a
 * sum of doubles do on 2 threads); with WEFT_BLOCKING, the errors
 * of weft_pmap's fibers (-ENOMEM, -ESHUTDOWN) when none could start (result
 * then left alone too). n = 0 copies identity to result and returns 0; any n
 * up to SIZE_MAX is valid. identity and result must not overlap.
 *
 * Contexts: as weft_pmap. fn and combine may run on any thread (or fiber)
 * and at the same time as each other, on different partial results.
 * ctx, identity and result stay the caller's: weft keeps no reference once
 * the call returns.
 */
WEFT_EXTERN int weft_reduce(size_t n, weft_reduce_fn fn, weft_combine_fn combine, void *ctx,
                            const void *identity, void *result, size_t size, const weft_pmap_opts *opts);

/* ------------------------------------------------------------------------ */
/* Futures                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct weft_future weft_future;
typedef void *(*weft_task_fn)(void *arg);

/*
 * weft_future_start: run fn(arg) asynchronously and return at once with a
 * future for its result in *out. A WEFT_CPU future started inside a
 * program's parallel region is an OpenMP task of that team. Elsewhere it
 * runs on weft's own OpenMP team by work stealing: started from a plain
 * thread or from another CPU future, it goes on that thread's own deque,
 * where an idle worker of the team steals it (oldest first) or the starter
 * takes it back at weft_future_get (newest first); from a fiber it goes to
 * the team's shared queue. A WEFT_BLOCKING future runs on a fiber (or falls
 * back on the CPU path). fn never runs inside weft_future_start itself.
 *
 * Returns 0; -EINVAL for a NULL fn or out, or a bad kind; -ENOMEM;
 * -ESHUTDOWN while weft_shutdown() runs; -EAGAIN (or the system's error)
 * when no thread can be started to run it (a CPU future needs weft's OpenMP
 * team, or its own pool, to exist). On error *out is untouched and fn will
 * not run. The caller owns the future and must release it with
 * weft_future_free(). Contexts: any.
 *
 * When resources run out: no memory for the future's record gives -ENOMEM
 * here; a BLOCKING future whose fiber cannot get a stack runs on the CPU path
 * instead (weft's OpenMP team, where a fiber-aware wait blocks its thread),
 * and if that cannot take it either, weft_future_get says -ENOMEM and fn
 * never runs. A future is never lost: every get returns.
 */
WEFT_EXTERN int weft_future_start(weft_kind kind, weft_task_fn fn, void *arg, weft_future **out);

/*
 * weft_future_get: wait until the future has a result or the deadline passes.
 * Returns 0 and stores fn's return value in *result (when result is not
 * NULL); -ETIMEDOUT; -ECANCELED when the future was cancelled before it ran;
 * -ENOMEM when a blocking future could get neither a fiber stack nor a CPU
 * worker, so fn never ran; -EINVAL for a NULL future or a bad deadline. May be called any number of
 * times, from any number of threads and fibers at once.
 *
 * With deadline -1, a plain thread or OpenMP task that finds a WEFT_CPU future
 * not yet started runs it itself instead of waiting idle (a help-first
 * join), which also keeps a small OpenMP team from deadlocking when tasks
 * wait on futures queued behind them. If a worker has started it, the
 * thread runs other CPU futures and map parts meanwhile (its own newest,
 * then ones stolen from weft's team) and blocks only when it finds none for
 * about 50 µs, as TBB's and Cilk's joins do. So a get(-1) may run other
 * futures' fn on the calling thread: do not hold a lock that such an fn
 * takes. A fiber never runs a CPU future itself: it parks. Contexts: any.
 */
WEFT_EXTERN int weft_future_get(weft_future *f, int64_t deadline_ns, void **result);

/* True once the future has a result or was cancelled; false for NULL. Any context. */
WEFT_EXTERN bool weft_future_done(const weft_future *f);

/*
 * weft_future_cancel: ask the future not to run.
 * Returns 0 when the future had not started: it never will, and get returns
 * -ECANCELED. Returns -EBUSY when fn is already running: C cannot stop it, so
 * it runs to completion and get returns its result as usual; for a
 * WEFT_BLOCKING future the request is recorded, weft_cancelled() turns true in
 * the fiber, and every weft blocking call it makes from then on returns
 * -ECANCELED, so that fn can give up early. Returns -EALREADY when the future
 * had already finished or been cancelled; -EINVAL for NULL. Any context.
 */
WEFT_EXTERN int weft_future_cancel(weft_future *f);

/*
 * weft_future_free: release the caller's hold on the future. Safe at any
 * time: a future that has not started is cancelled; a running one is
 * detached and its result discarded when fn returns (if fn's result owns
 * memory, get it first). NULL is ignored. The future must not be used after,
 * nor freed twice (debug builds abort with a message on a double free); no
 * other thread may be in weft_future_get on it. Any context.
 */
WEFT_EXTERN void weft_future_free(weft_future *f);

/*
 * weft_cancelled: true when the running blocking future's cancellation was
 * requested (see weft_future_cancel); false everywhere else. Any context.
 */
WEFT_EXTERN bool weft_cancelled(void);

/* ------------------------------------------------------------------------ */
/* Time, fibers, the runtime                                                 */
/* ------------------------------------------------------------------------ */

/* Nanoseconds on CLOCK_MONOTONIC: the clock that every weft deadline uses. */
WEFT_EXTERN int64_t weft_now_ns(void);

/*
 * weft_sleep_ns: sleep for ns nanoseconds (0 just yields on a fiber). A fiber
 * parks; a plain thread or OpenMP task sleeps. Returns 0; -EINVAL when ns < 0;
 * -ECANCELED when the fiber's future was cancelled. Signals never cut a sleep
 * short. Any context.
 */
WEFT_EXTERN int weft_sleep_ns(int64_t ns);

/* weft_sleep_until: as weft_sleep_ns, until an absolute deadline (-1 is -EINVAL). */
WEFT_EXTERN int weft_sleep_until(int64_t deadline_ns);

/*
 * weft_yield: let other runnable fibers on this carrier run, then continue.
 * On a plain thread it calls sched_yield(). Returns 0, or -ECANCELED in a
 * cancelled blocking future. Any context.
 */
WEFT_EXTERN int weft_yield(void);

/* True when the caller runs on a fiber. Any context. */
WEFT_EXTERN bool weft_in_fiber(void);

/*
 * True when WEFT_BLOCKING work runs on fibers: fibers are built in for this
 * architecture, not disabled (WEFT_FIBERS=0 or weft_configure), and the
 * runtime started or can start. Starts the runtime if needed. Any context.
 */
WEFT_EXTERN bool weft_fibers_available(void);

/* Carrier threads now running (0 when the fiber runtime is not started). */
WEFT_EXTERN unsigned weft_carrier_count(void);

/*
 * weft_shutdown: wait for all of weft's work in flight (fibers, futures,
 * offloaded calls) to finish, then stop weft's threads and release its pools.
 * Futures not yet freed stay valid. The next call that needs the runtime
 * starts it again. Calls that start work while the shutdown runs get
 * -ESHUTDOWN. Contexts: a plain thread outside any weft work. Called from a
 * fiber, from weft's own OpenMP team or pool (a CPU future, a CPU map of a
 * fiber) or from an offloaded call, it would wait for itself, so it aborts
 * the process with a message instead. (An element of a CPU map that runs on
 * the map's caller, or on the program's own OpenMP threads, is not weft's
 * work in flight: there it returns, but the map's other elements may still
 * start weft work afterwards.)
 *
 * A program need not call it: it may return from main or call exit() (from
 * any thread, a fiber or a CPU future included) with work in flight, and it
 * ends with its own status. The program's atexit handlers may still use weft
 * and call weft_shutdown; after them weft's destructor stops its threads
 * between one piece of work and the next (waiting a second at most for the
 * running ones) so that the OpenMP runtime's own teardown finds none of them
 * inside it. Work not finished by then is abandoned, as a thread's is.
 */
WEFT_EXTERN void weft_shutdown(void);

/*
 * Runtime settings. Each field left at 0 (or -1 where noted) takes the value
 * of its environment variable, or the default. weft_config_init() fills a
 * struct with zeros; more fields may be added at the end.
 */
typedef struct weft_config {
  int fibers;                /* -1 env/default (WEFT_FIBERS, default on), 0 off, 1 on */
  unsigned carriers;         /* WEFT_CARRIERS: default one per CPU in the affinity mask */
  size_t stack_size;         /* WEFT_STACK_SIZE (bytes, k/m suffix): default 256 KiB */
  unsigned pin_threshold_ms; /* WEFT_PIN_THRESHOLD_MS: default 20 */
  unsigned max_carriers;     /* WEFT_MAX_CARRIERS: default 256, compensation included */
  int trace_pinned;          /* -1 env/default (WEFT_TRACE_PINNED, default off), 0, 1 */
  int io_uring;              /* -1 env/default (WEFT_IO_URING, default 2 where available), 0, 1, 2 */
  unsigned offload_max;      /* WEFT_OFFLOAD_MAX: most offload threads; default 64 */
  const char *places;        /* WEFT_PLACES: NULL env/default (carriers free in the affinity mask);
                                "cores": carrier k on the k-th CPU of the mask; or a CPU list, "0,2,4-7":
                                carrier k on its k-th CPU (both wrap); copied by weft_configure */
  int migrate;               /* -1 env/default (WEFT_MIGRATE, default off), 0, 1: a woken fiber may resume on
                                another, idle carrier; see "Carriers that share work" below */
} weft_config;

WEFT_EXTERN void weft_config_init(weft_config *cfg);

/*
 * weft_configure: set the runtime's settings. Only before the fiber runtime
 * starts (or after weft_shutdown): -EBUSY while it runs. -EINVAL for NULL or a
 * value out of range (stack size under 16 KiB or over 1 GiB, more carriers
 * than max_carriers, places that are neither "cores" nor a CPU list of
 * numbers below 1024); nothing changes then. Plain thread.
 */
WEFT_EXTERN int weft_configure(const weft_config *cfg);

/*
 * Carriers that share work (migrate = 1, WEFT_MIGRATE=1). By default a fiber
 * resumes on the carrier it started on, always: C code may keep the address
 * of errno (glibc's __errno_location is `const`) or of a thread-local
 * variable across a call, and after a move that address would name another
 * thread's. With migrate on, a woken fiber may resume on another carrier
 * that is idle, so that both cores work when either has work. Turn it on
 * only when the code that runs on fibers, and the libraries it calls, keep
 * no such address across a weft call that can park (a wait, a sleep, I/O, a
 * future's get): read errno right after the call that set it, and results
 * of weft's calls from their return values. Waits on raw descriptors
 * (weft_read and the others above) and file I/O through the ring always
 * resume where they parked. weft_stats.migrations counts the moves.
 * x86-64 only for now: elsewhere the setting is refused with one warning
 * (on AArch64 a test suite aborts with it; fiber/frame.h).
 */

/* What this build and process can do: for reports and benchmarks. */
typedef struct weft_info {
  const char *version;        /* WEFT_VERSION_STRING of the library */
  bool fibers;                /* weft_fibers_available() */
  const char *context_switch; /* "asm-x86_64", "asm-aarch64", "ucontext" or "none" */
  int openmp;                 /* _OPENMP of the build, or 0 without OpenMP */
  const char *openmp_runtime; /* "libgomp", "libomp", "none" */
  const char *stack_guard;    /* "madv-guard", "mprotect", "none" (after start) */
  size_t stack_size;          /* fiber stack size in bytes */
  unsigned carriers;          /* carriers configured (started or not) */
  bool io_uring;        /* a carrier set up an io_uring as its wait point (false before the first carrier) */
  const char *compiler; /* compiler that built weft */
  /*
   * Where the carriers run: "free" (anywhere in the affinity mask), or the
   * CPU of carrier 0, 1, ... in order as a list ("0,1"; for "cores" once
   * the runtime has started, "cores" before); "invalid" when WEFT_PLACES
   * cannot be parsed (carriers are then free, with a warning at start).
   */
  char places[256];
} weft_info;

/* Fill *out; starts nothing (fields that need a started runtime say so). -EINVAL for NULL. */
WEFT_EXTERN int weft_get_info(weft_info *out);

/*
 * weft_strerror: a message for any value a weft call returns: weft's own
 * errors and the system's (negative errno), "success" for 0. A positive value
 * (an element's own error code) gives "not a weft error". The string is
 * static: never free it. Any context, thread-safe.
 */
WEFT_EXTERN const char *weft_strerror(int err);

/* ------------------------------------------------------------------------ */
/* Seeing inside: dumps and counters                                         */
/* ------------------------------------------------------------------------ */

/* weft_dump flags. */
#define WEFT_DUMP_STACKS 0x1u /* a backtrace of every parked fiber (up to 64 per carrier) */

/*
 * weft_dump: write a description of every live fiber to fd: its id, its
 * state (running, runnable, parked), what a parked fiber waits for (sleep,
 * a descriptor and direction, a mutex, condition, semaphore, channel,
 * future, offloaded call, a map's elements) with the object's address or
 * descriptor, its deadline and for how long it has waited, its carrier, and
 * what started it (a future, or the element of a map and where the map was
 * called). With WEFT_DUMP_STACKS, each parked fiber's backtrace from the
 * registers it saved (function names from the symbol tables, file:line
 * where debug information exists: libunwind and libdw; without them, weft
 * says so and lists fibers only). Unstarted work is counted. A snapshot:
 * a fiber readied while the dump looks may show as parked.
 *
 * It never stops the runtime for long: each carrier lists its own fibers
 * between two of them (a few milliseconds at most), and a carrier that a
 * fiber holds is read without stacks after 200 ms. Returns 0, -EINVAL (fd
 * negative, an unknown flag), or -ENOMEM; a write that fails ends the dump
 * quietly (it is a diagnostic). Any context: a plain thread, a fiber (the
 * dump then runs on the offload pool), an OpenMP task. With the runtime not
 * running it says so.
 *
 * WEFT_DUMP_SIGNAL=<signal> (a name such as SIGUSR1 or USR1, or a number)
 * makes weft write the dump, with stacks, to stderr whenever the process
 * receives that signal, and go on: the handler only wakes a thread of
 * weft's, which writes the dump. Read at the start of the process.
 */
WEFT_EXTERN int weft_dump(int fd, unsigned flags);

/*
 * Counters since the process started (since weft_shutdown for the fiber
 * counts: a shutdown keeps them), always on: each is kept per carrier or
 * per thread and summed when read. A snapshot, exact when nothing runs.
 */
typedef struct weft_stats {
  uint64_t fibers_started;     /* fibers that got a stack and ran */
  uint64_t fibers_finished;    /* fibers that ended */
  uint64_t fibers_live;        /* started and not ended, plus unstarted ones queued */
  uint64_t fibers_peak;        /* most live at once, sampled every few ms and at each call */
  uint64_t parks;              /* fiber waits that switched away */
  uint64_t yields;             /* weft_yield calls that switched away */
  uint64_t steals;             /* unstarted fibers taken by one carrier from another */
  uint64_t carrier_wakeups;    /* times a carrier slept and was woken (or its timer came) */
  uint64_t poller_waits;       /* poller waits (in epoll or the ring), sleeping or not */
  uint64_t stack_cache_hits;   /* stacks taken from a thread's cache */
  uint64_t stack_cache_misses; /* stacks taken from the pool or carved fresh */
  uint64_t stacks_carved;      /* stacks newly carved (guards installed) */
  uint64_t stacks_trimmed;     /* stacks whose pages were given back */
  uint64_t stack_bytes_mapped; /* address space mapped for stacks now, guards included */
  uint64_t offload_calls;      /* weft_blocking calls (and file I/O without io_uring) run by the pool */
  uint64_t offload_threads;    /* offload threads alive now */
  uint64_t extra_carriers;     /* compensation carriers started for pinned carriers */
  uint64_t uring_submissions;  /* io_uring_enter calls that submitted requests */
  uint64_t migrations;         /* woken fibers resumed on another carrier than their last (WEFT_MIGRATE) */
  uint64_t uring_waits;        /* carriers' waits in their io_uring, sleeping or not (then not in epoll) */
  uint64_t uring_recvs;        /* fibers' reads of owned sockets done as io_uring receives */
  uint64_t uring_sends;        /* fibers' writes of owned sockets done as io_uring sends */
  uint64_t uring_sends_behind; /* of those, writes that went behind (returned before the send completed) */
  uint64_t stacks_refused;     /* fiber stacks that could not be had: the work ran with fewer in flight */
} weft_stats;

/*
 * Fill *out. Named weft_get_stats, as weft_get_info: a function cannot share
 * the name of its struct's typedef in C. 0, or -EINVAL for NULL. Any
 * context, thread-safe; it starts nothing.
 */
WEFT_EXTERN int weft_get_stats(weft_stats *out);

/* ------------------------------------------------------------------------ */
/* Fiber-aware I/O                                                           */
/* ------------------------------------------------------------------------ */

/*
 * Each call takes an absolute deadline (-1 forever, 0 try once) and returns a
 * count (or 0 / revents) or a negative errno: -ETIMEDOUT, -ECANCELED (the
 * calling blocking future was cancelled), -EINVAL (bad buffer, length or
 * deadline), or the system's error (-EBADF, -ECONNRESET, -EPIPE, ...). EINTR
 * never comes back: an interrupted call is resumed.
 *
 * On a fiber, a call that would block parks the fiber until the descriptor
 * is ready (epoll, edge-triggered); on a plain thread it blocks the thread
 * in poll(2), with the same results. Sockets, pipes and terminals work
 * directly. Regular files, which are always "ready" to epoll, are read and
 * written through the carrier's io_uring where the kernel allows it (WEFT_IO_URING=0 turns
 * it off), else on the offload pool (weft_blocking), so a slow disk parks the
 * fiber, not the carrier.
 *
 * Descriptor flags: weft never changes the caller's descriptor flags. The
 * calls use MSG_DONTWAIT for sockets, and for a blocking pipe or terminal
 * they wait for readiness first and then transfer at most what is ready, so
 * O_NONBLOCK is left as the caller set it. Each call transfers once (like
 * read(2)): a short count is possible, as with the system calls.
 *
 * One fiber or thread at a time may wait for reading, and one for writing,
 * on a descriptor (as with any epoll-based runtime); closing a descriptor
 * that another fiber waits on is undefined. Any context.
 */
WEFT_EXTERN ssize_t weft_read(int fd, void *buf, size_t len, int64_t deadline_ns);
WEFT_EXTERN ssize_t weft_write(int fd, const void *buf, size_t len, int64_t deadline_ns);
WEFT_EXTERN ssize_t weft_recv(int fd, void *buf, size_t len, int flags, int64_t deadline_ns);
WEFT_EXTERN ssize_t weft_send(int fd, const void *buf, size_t len, int flags, int64_t deadline_ns);
/* Returns the new descriptor (close-on-exec, blocking); -EINVAL when fd is not a listening socket. */
WEFT_EXTERN int weft_accept(int fd, struct sockaddr *addr, socklen_t *addrlen, int64_t deadline_ns);
/* Returns 0 once connected; the socket's flags are left as they were. */
WEFT_EXTERN int weft_connect(int fd, const struct sockaddr *addr, socklen_t addrlen, int64_t deadline_ns);
/* Wait until fd has one of `events` (POLLIN, POLLOUT): returns the revents (POLLHUP/POLLERR included). */
WEFT_EXTERN int weft_poll_fd(int fd, short events, int64_t deadline_ns);

/*
 * Owned descriptors. A socket, pipe, FIFO, terminal or eventfd handed to
 * weft once: weft makes it non-blocking, and on a fiber's first wait
 * registers it with its carrier's epoll for both directions, edge-triggered,
 * for the rest of its life. Readiness is kept per direction (Go's netpoller
 * does the same), so a wait is a park and a wake is a flag: no epoll_ctl per
 * wait, and a read that follows "nothing there" (EAGAIN) with no readiness
 * seen since parks at once instead of trying again. The calls on raw
 * descriptors above cost one epoll_ctl per wait and a read that finds
 * nothing per exchange; an owned descriptor costs one epoll_ctl in its life
 * (two with the removal at close).
 *
 * An owned TCP socket has TCP_INQ turned on (Linux 4.18; where refused,
 * nothing changes but the saving): its reads are recvmsg(2) calls whose
 * control message says how many bytes they left queued, so a read that
 * fills the buffer and empties the queue is known to have emptied it, and
 * the next read parks until data comes instead of trying first. A program
 * that calls recvmsg on weft_fd_native's descriptor with a control buffer
 * receives that message too (level IPPROTO_TCP, type TCP_CM_INQ).
 *
 * A weft_fd is a handle by value ({0} is none). It carries a generation:
 * once weft_fd_close has been called, every call with that handle fails with
 * -EBADF, even after the slot and the descriptor number have been reused, and
 * readiness of a reused descriptor number never reaches the old handle's
 * waiters.
 *
 * weft_fd_close wakes every fiber and thread waiting on the descriptor: their
 * calls return -EBADF (a fiber at once, a thread within 20 ms). The
 * descriptor itself is closed when the last call that uses it has returned,
 * so a call that is inside a system call when another closes the handle can
 * never act on a reused number.
 *
 * Reads and writes on a fiber: where the carriers wait in io_uring
 * (WEFT_IO_URING=2, the default, where the kernel allows it: weft_get_info's
 * io_uring), a fiber's write of an owned socket is a send request on its
 * carrier's ring (MSG_NOSIGNAL) that completes when the kernel has taken the
 * bytes, and the reads of a stream socket are one multishot receive on the
 * ring of the carrier whose fiber read it first (Linux 6.0; before, and for
 * other sockets, each read is a receive request): the kernel receives into
 * buffers the ring provides as data comes, and the carrier copies it into
 * the waiting reader's buffer, or keeps it in the descriptor's slot for the
 * next read. Every read of such a socket, a plain thread's too, takes the
 * kept bytes first, in order, and weft_fd_poll counts them as readable; a
 * read with a deadline of 0 returns what has been received so far. At most
 * 256 KiB are kept: then the receive ends until a read has taken them, so a
 * reader that stops reading still holds its writer back. The carrier submits
 * the requests of all its fibers in one io_uring_enter when it has nothing
 * else to run (or 32 are queued, or every 61 fibers it runs), which is also
 * where it waits: no read(2), send(2) or readiness wait of their own
 * (weft_get_stats: uring_recvs, uring_sends). Results, deadlines, close and
 * cancellation are as described here; weft_fd_close ends the receive before
 * the descriptor closes (bytes written after it stay for whoever else holds
 * the socket), and kept bytes nobody read go with the handle. Pipes,
 * terminals and eventfds, and calls on plain threads, go through the
 * registration above.
 *
 * Writes that go behind (WEFT_WRITE_BEHIND=1, the default, with the ring
 * sends above): a fiber's write of at most 2 KiB to an owned TCP socket is
 * copied into a buffer of weft's and returns its count at once; its send
 * goes out with the carrier's next batch, when the fiber or its neighbours
 * next park or yield (weft_get_stats: uring_sends_behind). One is behind at
 * a time per socket: the next write, from any fiber or thread, waits for it
 * first, so bytes keep their order. An error that send meets (a reset,
 * -EPIPE) is the result of the socket's next write, as TCP reports a reset
 * to a writer a write or more late in any case; weft_fd_close lets the bytes
 * out before the descriptor closes, as close(2) does for bytes in the
 * socket's buffer (from a thread other than the write's carrier, that
 * carrier closes the descriptor itself right after its next submission,
 * so the number may stay taken a moment after the call returns). A write
 * still behind when its carrier leaves (weft_shutdown) gets a second, then
 * is cancelled, and the socket's next write says -ECANCELED. A fiber that
 * blocks its carrier's thread right after a write (a plain read(2),
 * pthread_join, a long computation) holds those bytes back until it parks
 * or yields, as it holds back the batch of every fiber of its carrier: wrap
 * such calls in weft_blocking(), or set WEFT_WRITE_BEHIND=0 to have every
 * write wait for its send. Unix and datagram sockets, larger writes, and
 * writes on threads are never behind.
 *
 * Waits: a fiber parks; a plain thread (or a fiber inside an OpenMP region)
 * blocks in poll(2). One fiber per direction at a time: a second fiber
 * reading (or writing) that would wait while one waits gets -EBUSY; threads
 * are not counted (each polls for itself). Readiness is edge-triggered:
 * two callers reading one stream at once may each take what the other was
 * woken for, and then wait for the next data; read from one at a time. Deadlines, errors and
 * -ECANCELED are those of the calls on raw descriptors. Any context,
 * thread-safe; no weft_init needed.
 */
typedef struct weft_fd {
  uint64_t id_; /* private: 0 is no descriptor */
} weft_fd;

/*
 * Take ownership of fd: it must be pollable (a socket, pipe, FIFO, terminal,
 * eventfd; -EPERM for a regular file or a block device, which epoll cannot
 * watch: use weft_read). Sets O_NONBLOCK on it. On success weft owns fd: do
 * not close it (weft_fd_close does) or clear O_NONBLOCK. On failure fd is
 * left open and as it was. 0, -EINVAL (out NULL, fd < 0), -EBADF, -EPERM,
 * -ENOMEM.
 */
WEFT_EXTERN int weft_fd_open(int fd, weft_fd *out);
/* socket(2) with SOCK_NONBLOCK | SOCK_CLOEXEC, owned at once. 0 or -errno. */
WEFT_EXTERN int weft_fd_socket(int domain, int type, int protocol, weft_fd *out);
/*
 * Close: wakes every waiter with -EBADF and closes the descriptor once no
 * call uses it. 0, or -EBADF for a handle that is none or already closed.
 */
WEFT_EXTERN int weft_fd_close(weft_fd f);
/*
 * The descriptor, for setsockopt, bind, listen, getsockname and the like;
 * it stays weft's (do not close it). Do not read it directly: with the
 * default WEFT_IO_URING=2 a stream socket's bytes may already be in weft's
 * hands (see "Reads and writes on a fiber" above). -EBADF for a closed
 * handle.
 */
WEFT_EXTERN int weft_fd_native(weft_fd f);
/* One read (a short count is possible, 0 at end of file), as read(2). */
WEFT_EXTERN ssize_t weft_fd_read(weft_fd f, void *buf, size_t len, int64_t deadline_ns);
/*
 * Write all len bytes, waiting as needed (sockets: MSG_NOSIGNAL, so a closed
 * peer gives -EPIPE and no SIGPIPE). Returns len; when an error or the
 * deadline comes after some bytes went out, the count written (the next call
 * reports the error). A small write of a TCP socket on a fiber may go behind
 * (see "Writes that go behind" above): its count comes back at once, and a
 * later error of its send is the next write's.
 */
WEFT_EXTERN ssize_t weft_fd_write(weft_fd f, const void *buf, size_t len, int64_t deadline_ns);
/* One readv(2); all of the vectors for writev, as weft_fd_write. iovcnt 1 to IOV_MAX. */
WEFT_EXTERN ssize_t weft_fd_readv(weft_fd f, const struct iovec *iov, int iovcnt, int64_t deadline_ns);
/*
 * A read without a copy: one read, as weft_fd_read, whose bytes weft lends
 * instead of copying them into a buffer of the caller's. On success (n > 0)
 * *data points at n bytes of the stream, which stay valid and unchanged
 * until the caller calls weft_fd_read_done(f, used), exactly once: the first
 * `used` bytes (at most n) are consumed, and the rest are what the next read
 * or lend of f returns first. On a fiber whose carrier has the socket's
 * multishot receive (WEFT_IO_URING=2, the default, a TCP stream), the bytes
 * are the ring's own buffer when the fiber was waiting as they came; else
 * weft reads into a buffer of the descriptor's (16 KiB) and lends that, one
 * copy as weft_fd_read. Until weft_fd_read_done the descriptor stays open: a
 * weft_fd_close meanwhile wakes the waiters and returns, and the descriptor
 * closes at weft_fd_read_done (which is valid after the close). One lend at
 * a time per descriptor: another lend meanwhile gets -EBUSY, a read meanwhile
 * reads past the lent bytes. Returns n, 0 at end of file (nothing lent: no
 * weft_fd_read_done), or the errors of weft_fd_read, -EINVAL (data NULL),
 * -EBUSY, -ENOMEM. Any context, thread-safe.
 */
WEFT_EXTERN ssize_t weft_fd_read_lend(weft_fd f, const void **data, int64_t deadline_ns);
/*
 * The end of a lend (weft_fd_read_lend) of f: `used` bytes of it were
 * consumed (more than were lent counts as all of them). Does nothing where
 * no lend of f is outstanding. Any context; the thread or fiber that lent.
 */
WEFT_EXTERN void weft_fd_read_done(weft_fd f, size_t used);
WEFT_EXTERN ssize_t weft_fd_writev(weft_fd f, const struct iovec *iov, int iovcnt, int64_t deadline_ns);
/* Accept a connection as an owned descriptor (non-blocking, close-on-exec) in *out. 0 or -errno. */
WEFT_EXTERN int weft_fd_accept(weft_fd listener, struct sockaddr *addr, socklen_t *addrlen, weft_fd *out,
                               int64_t deadline_ns);
/* Connect; 0 once connected, or the connection's error (-ECONNREFUSED, ...). */
WEFT_EXTERN int weft_fd_connect(weft_fd f, const struct sockaddr *addr, socklen_t addrlen,
                                int64_t deadline_ns);
/* Wait until readable (POLLIN) or writable (POLLOUT): returns the revents seen. */
WEFT_EXTERN int weft_fd_poll(weft_fd f, short events, int64_t deadline_ns);

/* ------------------------------------------------------------------------ */
/* Offload                                                                   */
/* ------------------------------------------------------------------------ */

/*
 * weft_blocking: run fn(arg) where it may block an OS thread as long as it
 * likes (getaddrinfo, a database client, a library weft cannot make
 * fiber-aware). On a fiber, fn runs on weft's offload pool (elastic: at
 * most WEFT_OFFLOAD_MAX threads, idle ones retire) while the fiber parks; on
 * a plain thread fn simply runs on it. Stores fn's result in *result when
 * result is not NULL. Returns 0; -EINVAL for NULL fn; -ECANCELED when the
 * calling future was cancelled before fn started (fn then never runs; once
 * started, fn runs to the end and its result is delivered). fn sees the
 * caller's scoped bindings and local values; weft_cancelled() is false in
 * it, and it must not call weft_shutdown. Any context.
 */
WEFT_EXTERN int weft_blocking(weft_task_fn fn, void *arg, void **result);

/* ------------------------------------------------------------------------ */
/* Synchronisation                                                           */
/* ------------------------------------------------------------------------ */

/*
 * Each primitive works between fibers, between plain threads, and across
 * the two: a thread blocks, a fiber parks. The types are defined here so
 * that they can be static or embedded; their fields are private. A
 * primitive must not be copied or moved once used; destroy it only when no
 * one waits on it.
 *
 * Cancellation: weft_cond_wait, weft_sem_wait, weft_chan_send and
 * weft_chan_recv are cancellation points: in a cancelled blocking future
 * they return -ECANCELED at once, even when a unit or element is there.
 * weft_mutex_lock is not, as in POSIX: a cancelled fiber can still take a
 * lock to put shared state in order.
 *
 * A primitive may be destroyed as soon as its last call has returned (the
 * waker never touches it after the woken caller can see the wake). Test and
 * debug builds abort with a message when one is destroyed while in use.
 */
typedef struct weft_mutex_t {
  uint32_t state_; /* private */
  uint32_t lock_;  /* private */
  void *head_;     /* private */
  void *tail_;     /* private */
  void *owner_;    /* private */
} weft_mutex_t;

#define WEFT_MUTEX_INITIALIZER                                                                               \
  { 0, 0, NULL, NULL, NULL }

/* A mutex is not recursive; unlocking one that the caller does not hold is -EPERM. */
WEFT_EXTERN int weft_mutex_init(weft_mutex_t *m);
WEFT_EXTERN int weft_mutex_lock(weft_mutex_t *m);
WEFT_EXTERN int weft_mutex_trylock(weft_mutex_t *m); /* -EBUSY when held (by the caller too) */
WEFT_EXTERN int weft_mutex_unlock(weft_mutex_t *m);
WEFT_EXTERN void weft_mutex_destroy(weft_mutex_t *m);

typedef struct weft_cond_t {
  uint32_t lock_;    /* private */
  uint32_t waiters_; /* private */
  void *head_;       /* private */
  void *tail_;       /* private */
} weft_cond_t;

#define WEFT_COND_INITIALIZER                                                                                \
  { 0, 0, NULL, NULL }

WEFT_EXTERN int weft_cond_init(weft_cond_t *c);
/*
 * Wait with m held; m is held again on return, whatever the result (0,
 * -ETIMEDOUT, -ECANCELED). -EPERM when the caller does not hold m. With
 * deadline 0 it returns -ETIMEDOUT at once, without letting go of m.
 */
WEFT_EXTERN int weft_cond_wait(weft_cond_t *c, weft_mutex_t *m, int64_t deadline_ns);
WEFT_EXTERN int weft_cond_signal(weft_cond_t *c);
WEFT_EXTERN int weft_cond_broadcast(weft_cond_t *c);
WEFT_EXTERN void weft_cond_destroy(weft_cond_t *c);

typedef struct weft_sem_t {
  uint64_t value_; /* private */
  uint32_t lock_;  /* private */
  void *head_;     /* private */
  void *tail_;     /* private */
} weft_sem_t;

WEFT_EXTERN int weft_sem_init(weft_sem_t *s, unsigned value);
WEFT_EXTERN int weft_sem_wait(weft_sem_t *s, int64_t deadline_ns);
WEFT_EXTERN int weft_sem_post(weft_sem_t *s); /* -EOVERFLOW at UINT32_MAX */
WEFT_EXTERN void weft_sem_destroy(weft_sem_t *s);

/*
 * A bounded multi-producer multi-consumer channel of fixed-size elements,
 * copied in and out. capacity 0 makes an unbuffered channel: a send waits
 * for a receiver to take the element. After weft_chan_close, send gives
 * -EPIPE; recv drains what is buffered, then gives -EPIPE. Waiters blocked
 * in send or recv when the channel closes get -EPIPE. weft_chan_free
 * requires that no one uses the channel any more.
 */
typedef struct weft_chan weft_chan_t;

/* -EINVAL when capacity * elem_size overflows; elem_size 0 is allowed (then elem may be NULL). */
WEFT_EXTERN int weft_chan_create(size_t capacity, size_t elem_size, weft_chan_t **out);
WEFT_EXTERN int weft_chan_send(weft_chan_t *ch, const void *elem, int64_t deadline_ns);
WEFT_EXTERN int weft_chan_recv(weft_chan_t *ch, void *elem, int64_t deadline_ns);
WEFT_EXTERN int weft_chan_close(weft_chan_t *ch); /* -EPIPE when already closed */
WEFT_EXTERN void weft_chan_free(weft_chan_t *ch);

/* ------------------------------------------------------------------------ */
/* Fiber-local and scoped values                                             */
/* ------------------------------------------------------------------------ */

/*
 * One key type serves both kinds of value:
 *  - local values belong to one fiber (or one plain thread): not inherited,
 *    and destroyed with the destructor when the fiber (thread) ends;
 *  - scoped values (after Java's ScopedValue) are bound by weft_scope_run
 *    for the dynamic extent of fn, and seen by fn, by everything it calls,
 *    and by every future and pmap element started inside it, of either kind,
 *    wherever it runs; nested scopes shadow outer ones; a binding never
 *    leaks out of its scope (a future that outlives the scope still sees the
 *    binding it was started with).
 * Keys are process-wide, at most WEFT_KEYS_MAX at once. Without fibers, the
 * same calls work on each thread's own storage.
 *
 * Where local values live: on a fiber, the fiber's own; on any other thread
 * (the main thread, an OpenMP thread running CPU pmap elements or CPU
 * futures, the fallback's threads), that OS thread's own, like
 * thread-locals: a CPU element's value outlives the element and is destroyed
 * when the thread exits. The elements of one WEFT_BLOCKING pmap that run in
 * turn on one fiber share its values. A fiber's destructors run on the fiber
 * itself as it ends (they may call weft, and park); a thread's at its exit,
 * except the main thread's, which are never destroyed (as with pthread
 * keys). Destructors run in up to 4 rounds when they set values again.
 */
typedef uint64_t weft_key_t;

#define WEFT_KEYS_MAX 1024

/* -EAGAIN when all keys are in use. The destructor (may be NULL) runs for non-NULL local values. */
WEFT_EXTERN int weft_key_create(weft_key_t *key, void (*destructor)(void *));
/* Local values still set are not destroyed (as pthread_key_delete); -EINVAL for an unknown key. */
WEFT_EXTERN int weft_key_delete(weft_key_t key);
WEFT_EXTERN void *weft_local_get(weft_key_t key);            /* NULL when unset or unknown */
WEFT_EXTERN int weft_local_set(weft_key_t key, void *value); /* -EINVAL, -ENOMEM */
WEFT_EXTERN int weft_scope_run(weft_key_t key, void *value, weft_task_fn fn, void *arg, void **result);
/* 0 and the innermost binding in *value; -ENOENT when unbound. value may be NULL (is it bound?). */
WEFT_EXTERN int weft_scope_get(weft_key_t key, void **value);

#ifdef __cplusplus
}
#endif
#endif /* WEFT_H */
