/*
 * This file contains the fiber scheduler's interface to the rest of weft:
 * what the API layer, the waiters and the I/O layer may ask of it. The
 * scheduler itself, and the essay that explains it, are in sched.c.
 */
#ifndef WEFT_FIBER_FIBER_H
#define WEFT_FIBER_FIBER_H

#include "../base/internal.h"
#include "../base/places.h"
#include "../sync/wait.h"

struct weft__fiber;
struct weft__carrier;
struct weft__source;

/*
 * What a fiber runs. entry(f) runs on the fiber's own stack; when it returns
 * the fiber ends and done(f) runs on the carrier's scheduler stack after the
 * fiber's stack is released (done may free the memory that holds f).
 * nostack(f) runs instead of entry when no stack can be had: the owner then
 * completes the work another way (the CPU path) or drops it.
 */
typedef struct weft__fiber_ops {
  void (*entry)(struct weft__fiber *f);
  void (*done)(struct weft__fiber *f);
  void (*nostack)(struct weft__fiber *f);
  const char *what; /* what started it, for dumps: "future", "pmap element" */
} weft__fiber_ops;

/*
 * A fiber. The owner (a future, a pmap call) embeds or allocates it, fills
 * ops and arg through weft__fiber_prepare, and hands it to weft__fiber_spawn.
 * Fields below `arg` belong to the scheduler.
 */
typedef struct weft__fiber {
  const weft__fiber_ops *ops;
  void *arg;                   /* the owner's: the future, or the source's arg */
  struct weft__source *source; /* the source that made it (a clone), else NULL */
  /* --- scheduler-owned --- */
  void *sp;                   /* saved stack pointer while switched out (context.h) */
  struct weft__carrier *home; /* carrier it runs on: where it started, or (WEFT_MIGRATE) the one that took it
                                 off a share queue; changed only while the fiber is on no queue but that */
  struct weft__fiber *next;   /* run-queue link: owned by whichever queue holds the fiber */
  void *stack_base;           /* lowest usable address; NULL until the first run */
  size_t stack_size;          /* usable bytes */
  void *stack_cookie;         /* the stack allocator's handle */
  uint64_t id;                /* for messages: stack overflow, pinning trace; given when it starts */
  const void *spawn_site;     /* return address in the code that started it (pinning trace) */
  int64_t timer_deadline;     /* armed timer, or 0 */
  size_t timer_slot;          /* index in home's timer heap while armed; SIZE_MAX: in the overflow list */
  struct weft__fiber *tnext;  /* overflow list links (a timer the heap had no memory for) */
  struct weft__fiber *tprev;
  weft__waiter *timer_waiter; /* resolved TIMEDOUT when the timer fires */
  uint32_t flags;             /* WEFT__FIBER_* */
  uint32_t stay;              /* weft__fiber_stay depth: while > 0 it resumes on its carrier (WEFT_MIGRATE) */
  /*
   * For dumps (weft_dump, the gdb extension): written by the fiber or its
   * carrier with relaxed stores, read by a dumping thread with relaxed
   * loads (a snapshot: a value may be a moment old).
   */
  struct weft__fiber *reg_next; /* the home carrier's list of its started fibers: its reg_lock */
  struct weft__fiber *reg_prev;
  _Atomic uint8_t state;          /* WEFT__FS_* */
  _Atomic uint8_t wait_kind;      /* WEFT__WAIT_* (sync/wait.h) while parked, else NONE */
  _Atomic(const void *) wait_obj; /* the object waited on */
  _Atomic int64_t wait_deadline;  /* its deadline: -1 none */
  _Atomic int64_t wait_since;     /* when the wait began (the coarse clock) */
  _Atomic uint64_t tag;           /* the owner's: the index of the map element it runs */
  void *san_fake_stack;           /* AddressSanitizer's fake-stack handle across a switch */
  void *san_tsan_fiber;           /* ThreadSanitizer's fiber handle */
  weft__tctx tc;                  /* cancellation, scope and locals of the work it runs */
} weft__fiber;

/* A fiber's state, as a dump shows it. */
enum {
  WEFT__FS_QUEUED = 0, /* not started: no stack yet */
  WEFT__FS_RUNNABLE,   /* started, in a run queue */
  WEFT__FS_RUNNING,    /* on its carrier now */
  WEFT__FS_PARKED,     /* waiting (wait_kind says for what) */
};

enum {
  WEFT__FIBER_STARTED = 1u << 0,     /* has a stack and a home; may no longer move */
  WEFT__FIBER_CLONE = 1u << 1,       /* made by a source: its record lives at the top of its own stack */
  WEFT__FIBER_SOURCE_DONE = 1u << 2, /* a clone's done() said it was its source's last fiber */
  WEFT__FIBER_BLOCKED = 1u << 3,   /* a clone parked or yielded: set by the scheduler, cleared by its owner */
  WEFT__FIBER_SUCCEEDED = 1u << 4, /* ... and the scheduler made the source's next fiber then (same owner) */
};

/*
 * A fiber source: work that needs many fibers, each created by a carrier
 * when one is wanted rather than all queued up front (a BLOCKING pmap, in
 * api/pmap_fibers.c). A carrier makes a fiber from an open source when it
 * has nothing else to run, and, when a fiber of the source parks, makes the
 * next one at once and runs it before anything else that is queued: so a
 * source whose fibers all block keeps one fiber per element in flight, one
 * page each, created on every carrier in parallel, while a source whose
 * fibers never block runs on one fiber per carrier. Each fiber's record
 * (weft__fiber) sits at the top of its own stack, on the page its first
 * frame touches anyway: a fiber of a source costs no allocation and one page
 * fault.
 *
 * The owner fills ops, fiber_ops, arg and spawn_site, and calls
 * weft__source_open; the source holds one count of the runtime's live
 * fibers from open until its last fiber has ended, so shutdown waits for it.
 */
typedef struct weft__source_ops {
  /*
   * Take a place for one more fiber: true when the source wants one (work
   * left and below its limit). `idle`: the carrier has nothing else to run
   * and may take work meant for other carriers; otherwise (one of the
   * source's fibers just parked on it) only work meant for this carrier, so
   * that a carrier which got there first does not start everything while
   * the others are waking up. Called by carriers, from the scheduler's
   * stack, possibly at the same time on several; never after close has
   * returned, except from a fiber of the source (which keeps it alive).
   */
  bool (*reserve)(struct weft__source *s, bool idle);
  /*
   * Would reserve(s, true) succeed now? A carrier asks it (`carrier` true),
   * under the source lock, before it sleeps: a source it cannot serve (at
   * its limit, or with work only for other carriers) must not keep it awake.
   * A source that keeps work for carriers on their way must count the asking
   * carrier as arrived then (it is about to sleep, and the source's wake-up
   * may have missed it). Another thread (the deadlock monitor, `carrier`
   * false) asks whether any work is left to start; no side effect then.
   */
  bool (*wants)(struct weft__source *s, bool carrier);
  /*
   * The place reserved was not used (no stack could be had). Returns true
   * when that made the source finished (its last place given back with
   * nothing else running): the scheduler then drops the source's live count.
   */
  bool (*unreserve)(struct weft__source *s);
} weft__source_ops;

typedef struct weft__source {
  const weft__source_ops *ops;
  const weft__fiber_ops *fiber_ops; /* for its fibers; done(f) returns through source_done below */
  void *arg;                        /* each fiber's arg */
  const void *spawn_site;           /* for the pinning trace */
  /* --- scheduler-owned --- */
  struct weft__source *next, *prev; /* the open sources: under the runtime's source lock */
  bool open;                        /* on that list */
} weft__source;

/*
 * Make s available to the carriers and wake up to `want` sleeping ones (a
 * source that gives each carrier its own share wakes that many). Returns 0,
 * or -ESHUTDOWN while weft_shutdown runs (nothing was started then).
 */
int weft__source_open(weft__source *s, unsigned want);

/*
 * Take s off the list: no carrier reserves a place through the list after
 * this returns (a fiber of the source may still, when it parks). Idempotent;
 * any thread or fiber.
 */
void weft__source_close(weft__source *s);

/*
 * For a fiber of a source, called by its fiber_ops->done: tells the
 * scheduler whether that was the source's last fiber (done returned it
 * finished), in which case the source's live count is dropped after done
 * returns. Set by done through this call rather than a return value so that
 * weft__fiber_ops stays one shape for every fiber.
 */
void weft__source_finished(struct weft__fiber *f);

/* Fill in a fiber for spawning. */
void weft__fiber_prepare(weft__fiber *f, const weft__fiber_ops *ops, void *arg);

/* What the fiber layer asks of the layers above it: given at each start (api/lifecycle.c). */
typedef struct weft__fiber_hooks {
  /* Is the calling thread inside an OpenMP region? A fiber must not park there (weft__parkable_self);
   * also asked once by each carrier before its first fiber, so that the runtime registers the thread. */
  bool (*in_region)(void);
} weft__fiber_hooks;

/*
 * Start the fiber runtime if needed (lazily, once; again after shutdown).
 * Returns 0, or a negative errno when fibers cannot run (disabled, no context
 * switch, threads refused): the caller falls back on the CPU path.
 */
int weft__fibers_start(const weft__fiber_hooks *h);

/* True when the runtime is running (no start attempt). */
bool weft__fibers_running(void);

/* Where the carriers run (base/places.h), into *out: true while the runtime runs, else false. */
bool weft__fibers_places(weft__places *out);

/*
 * Queue fibers to run. From a carrier they go on its own queue (others steal
 * the ones not yet started); from any other thread, on the global queue.
 * Returns 0, or -ESHUTDOWN while weft_shutdown runs.
 */
int weft__fiber_spawn(weft__fiber *f);
/* Queue n fibers stored side by side (one lock for the whole batch). */
int weft__fiber_spawn_array(weft__fiber *fs, size_t n);

/* The index of the calling thread's carrier (0, 1, ...), or 0 on any other thread. */
unsigned weft__fiber_carrier_id(void);
/*
 * Is the calling thread a carrier? Fixed for the thread's life (carriers
 * are threads weft starts as such), except that a child of fork() has none:
 * a caller may cache `false` per thread (api/pmap.c does, to skip asking
 * for the current fiber on every map), never `true`.
 */
bool weft__carrier_thread(void);

/*
 * Will carrier `id` look for work soon? True when it exists, is running and
 * is not running a fiber right now (it is asleep, woken, or in its scheduler
 * loop); false when it is busy in a fiber or gone. A hint (no lock): for a
 * source that keeps a share of its work for that carrier.
 */
bool weft__carrier_may_arrive(unsigned id);

/* weft__fiber_self, weft__parkable_self, weft__fiber_park_wait, weft__fiber_ready: sync/park.h. */

/* Switch away from the calling fiber until weft__fiber_ready() is called for it. */
void weft__fiber_park(void);

/* Make a parked fiber runnable again; from any thread, exactly once per park. */
void weft__fiber_ready(weft__fiber *f);

/*
 * A clock for dumps, updated every few milliseconds while carriers run (by
 * the pinning monitor), so that a park does not read the time.
 */
extern _Atomic int64_t weft__coarse_now;

/* The calling fiber f is about to wait for (kind, obj) until deadline, or is done waiting (NONE). */
static inline void weft__fiber_waits(weft__fiber *f, unsigned kind, const void *obj, int64_t deadline) {
  atomic_store_explicit(&f->wait_kind, (uint8_t)kind, memory_order_relaxed);
  if (kind == 0) return;
  atomic_store_explicit(&f->wait_obj, obj, memory_order_relaxed);
  atomic_store_explicit(&f->wait_deadline, deadline, memory_order_relaxed);
  atomic_store_explicit(&f->wait_since, atomic_load_explicit(&weft__coarse_now, memory_order_relaxed),
                        memory_order_relaxed);
  atomic_store_explicit(&f->state, WEFT__FS_PARKED, memory_order_relaxed);
}

/* Put the calling fiber at the back of its carrier's queue and switch away. */
void weft__fiber_yield(void);

/* Called by weft__stack's SIGSEGV handler: is addr in the guard of this thread's running fiber? */
bool weft__fiber_fault_info(const void *addr, uint64_t *fiber_id, size_t *stack_size);

/* Counters for tests and reports. */
typedef struct weft__fiber_stats {
  uint64_t live;          /* fibers spawned and not yet done, and open sources (shutdown waits for these) */
  uint64_t spawned;       /* fibers started, since the process started */
  uint64_t stacks_in_use; /* stacks held by fibers */
  uint64_t steals;        /* fibers taken from another carrier */
  uint64_t migrations;    /* woken fibers resumed on another carrier (WEFT_MIGRATE) */
  uint64_t finished;      /* fibers ended */
  uint64_t parks, yields;
  uint64_t sleeps;        /* carrier sleeps in the poller (each ends in a wake-up) */
  uint64_t polls;         /* poller waits */
  uint64_t fibers;        /* started and not ended, plus unstarted ones queued */
  uint64_t fibers_peak;   /* most of those at once (sampled: the monitor's looks and every call) */
  uint64_t extra_started; /* compensation carriers started */
} weft__fiber_stats;
void weft__fiber_get_stats(weft__fiber_stats *out);

/*
 * Write the fiber dump to fd (fiber/dump.c): every started fiber of every
 * carrier, with the stacks of parked ones when `stacks`. A plain thread
 * only (a fiber's dump goes through the offload pool: its carrier must be
 * free to answer). Returns 0 or -ENOMEM.
 */
int weft__fibers_dump(int fd, bool stacks);

/* Stop the runtime: wait for every fiber to end, join the carriers. */
void weft__fibers_shutdown(void);

/*
 * Calls running outside the runtime on a fiber's behalf (the offload pool's,
 * io/offload.c): while any runs, the deadlock report stays silent, since
 * such a call may release what the parked fibers wait for.
 */
extern atomic_uint weft__outside_calls;

/* The poller of the carrier that f runs on (fibers never move): where its descriptor and file waits go. */
struct weft__poller *weft__fiber_poller(const weft__fiber *f);
/*
 * The running fiber f is about to park in a wait that keeps state of its
 * carrier (a raw descriptor's slot in its poller, a request on its ring, a
 * thread-local of its carrier thread): on, it resumes on this carrier
 * whatever WEFT_MIGRATE says, until the matching off (they nest). Only f
 * itself calls it.
 */
static inline void weft__fiber_stay(weft__fiber *f, bool on) {
  if (on)
    f->stay++;
  else
    f->stay--;
}
/* A poller that lasts as long as the runtime (the home's, unless that is a compensation carrier), for
 * registrations that outlive one wait (owned descriptors). */
struct weft__poller *weft__fiber_lasting_poller(const weft__fiber *f);

#endif /* WEFT_FIBER_FIBER_H */
