/*
 * This file contains the scheduler's own structures: the carrier and the
 * runtime, shared by sched.c, the pinning monitor and the I/O layer. The
 * rest of weft uses fiber.h. Each field says who may touch it.
 */
#ifndef WEFT_FIBER_SCHED_H
#define WEFT_FIBER_SCHED_H

#include <pthread.h>

#include "../base/places.h"
#include "../base/settings.h"
#include "../poll/poller.h"
#include "../base/lock.h"
#include "../base/queue.h"
#include "fiber.h"

/* A FIFO of fibers (through weft__fiber.next). */
WEFT__QUEUE(weft__fq, weft__fiber, next);
/* The open fiber sources. */
WEFT__LIST(weft__srclist, weft__source, next, prev);

/* What a fiber asked for when it switched to the scheduler. */
enum { WEFT__AFTER_PARK = 0, WEFT__AFTER_YIELD, WEFT__AFTER_EXIT };

/*
 * A carrier's counters (weft_stats): each written only by its carrier, with
 * relaxed loads and stores (no read-modify-write), summed by readers.
 */
typedef struct weft__carrier_counters {
  atomic_uint_fast64_t started;  /* fibers started */
  atomic_uint_fast64_t finished; /* fibers ended */
  atomic_uint_fast64_t parks;    /* switches out to wait */
  atomic_uint_fast64_t yields;
  atomic_uint_fast64_t steals;     /* unstarted fibers taken from others */
  atomic_uint_fast64_t migrations; /* woken fibers taken from others' share queues (WEFT_MIGRATE) */
  atomic_uint_fast64_t sleeps;     /* times it slept in its poller (each ends in a wake-up) */
  atomic_uint_fast64_t polls;      /* poller waits, sleeping or not */
} weft__carrier_counters;

static inline void weft__count(atomic_uint_fast64_t *c, uint64_t n) {
  atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n, memory_order_relaxed);
}

typedef struct weft__carrier {
  /* --- owner only (the carrier thread) --- */
  void *sched_sp;       /* the scheduler's saved stack pointer while a fiber runs */
  weft__fiber *current; /* the running fiber, NULL in the scheduler; read by other threads
                           only through the pinning monitor's slice_seq */
  uint64_t slices;      /* slice_seq's value, kept here so that a switch writes and never reads it */
  weft__fq ready;       /* started fibers that may run */
  weft__fiber *runnext; /* runs after ready, before new work: the fiber a source made when one of its
                           fibers parked (find_runnable) */
  weft__fq yielded;     /* fibers that yielded: they run after everything else runnable */
  /*
   * Timers, in three homes (a fiber is in at most one, timer_slot says which):
   * tfifo, a list of non-decreasing deadlines (most sleeps are armed in
   * deadline order: O(1) to arm and to fire, no memory); heap, a min-heap for
   * the rest; toverflow, an unsorted list for a timer the heap had no memory
   * for.
   */
  weft__fiber *tfifo_head, *tfifo_tail;
  weft__fiber **heap;
  size_t heap_len, heap_cap;
  weft__fiber *toverflow;
  int after;                  /* WEFT__AFTER_* of the fiber that just switched back */
  uint64_t tick;              /* scheduling rounds, for fairness */
  uint64_t rand;              /* steal-victim choice */
  bool spin_found;            /* the idle spin saw work appear: look again before sleeping */
  uint64_t id_next, id_end;   /* fiber ids: a block taken from rt.next_id at a time */
  weft__carrier_counters cnt; /* what it did: written by the owner only, read by weft_stats */
  size_t homed;               /* started fibers whose home this is */
  void *asan_fake;            /* AddressSanitizer's fake stack of the scheduler, across a switch */
  void *native_bottom;        /* the carrier thread's own stack, for AddressSanitizer */
  size_t native_size;
  void *tsan_self; /* ThreadSanitizer's handle of the carrier thread */
  unsigned id;
  bool extra;         /* a compensation carrier (pinning): retires when idle with no fibers */
  int64_t idle_since; /* extra carriers: when the carrier last ran out of work, 0 when busy */
  int64_t trim_after; /* no stack trim before this time: the last one found nothing due yet */
  pthread_t thread;

  /* --- shared --- */
  struct weft__dump_req *_Atomic dump_req; /* a dump waiting for this carrier to list its fibers (dump.c) */
  WEFT__ALIGNED_CL weft__lock reg_lock;    /* guards reg_head: the owner links and unlinks, dumps walk */
  weft__fiber *reg_head;                   /* its started fibers, for dumps (fiber.h) */
  WEFT__ALIGNED_CL weft__lock spawn_lock;  /* guards spawn */
  weft__fq spawn;                          /* unstarted fibers: owner and thieves, under spawn_lock */
  atomic_size_t spawn_len;                 /* spawn.len, readable without the lock (a hint) */
  WEFT__ALIGNED_CL weft__lock share_lock;  /* guards share */
  weft__fq share;                          /* woken fibers offered to idle carriers (WEFT_MIGRATE): homeless
                                              until taken, by a thief or the owner, under share_lock */
  atomic_size_t share_len;                 /* share.len, readable without the lock (a hint) */
  WEFT__ALIGNED_CL weft__lock inbox_lock;  /* guards inbox and inbox_first */
  weft__fq inbox;                          /* fibers readied by other threads */
  weft__fq inbox_first;                    /* ... to run before the ready queue (weft__fiber_ready_first) */
  atomic_size_t inbox_len;              /* inbox.len + inbox_first.len, readable without the lock (a hint) */
  WEFT__ALIGNED_CL weft__poller poller; /* where the carrier sleeps */
  /*
   * The pinning monitor's view of the carrier, as Go's sysmon sees a P
   * through its schedtick: the owner adds one when a fiber is switched in
   * and one when it switches back (odd: a fiber runs), a plain store with no
   * clock read; the monitor notes when it first saw each odd value.
   */
  atomic_uint_fast64_t slice_seq;
  atomic_bool pinned;       /* set by the monitor when the slice passed the threshold; the owner
                               reports and clears it when the fiber switches back */
  _Atomic int64_t pin_seen; /* when the monitor first saw the pinning slice (the report's duration) */
  /* --- the monitor only --- */
  uint64_t mon_seq;  /* slice_seq at its last look */
  int64_t mon_since; /* when it first saw mon_seq */
  atomic_int status; /* WEFT__C_RUNNING, _RETIRED (thread ending, to be joined), _JOINED */
  atomic_bool still; /* the process is ending and this carrier runs nothing more (sched.c) */
} weft__carrier;

enum { WEFT__C_RUNNING = 0, WEFT__C_RETIRED = 1, WEFT__C_JOINED = 2 };

typedef struct weft__rt {
  pthread_mutex_t mu;                   /* guards start, stop and the carriers array's growth */
  pthread_cond_t quiesce_cv;            /* shutdown waits here for live == 0 */
  atomic_int state;                     /* RT_STOPPED, RT_RUNNING, RT_STOPPING (no new spawns) */
  atomic_bool exit;                     /* carriers leave their loop (shutdown, after live reached 0) */
  atomic_bool ending;                   /* the process is ending without shutdown: carriers stop (sched.c) */
  weft__settings settings;              /* resolved at start */
  weft__places places;                  /* where carrier k runs (WEFT_PLACES), resolved at start */
  weft__carrier **carriers;             /* cap slots; the first ncarriers are valid */
  unsigned cap;                         /* max_carriers */
  atomic_uint ncarriers;                /* carriers created (published with release) */
  atomic_uint nrunning;                 /* carriers running (weft_carrier_count) */
  atomic_uint nspinning;                /* carriers looking for work right now */
  WEFT__ALIGNED_CL weft__lock gq_lock;  /* guards gq */
  weft__fq gq;                          /* fibers spawned by threads that are not carriers */
  atomic_size_t gq_len;                 /* gq.len, readable without the lock */
  WEFT__ALIGNED_CL weft__lock src_lock; /* guards sources */
  weft__srclist sources;                /* open fiber sources (fiber.h), in the order carriers look at them */
  atomic_uint nsources;                 /* on the list, readable without the lock (a hint) */
  atomic_uint src_opens;                /* sources opened so far: what a spinning carrier watches */
  WEFT__ALIGNED_CL atomic_uint_fast64_t live; /* fibers spawned and not yet done, and open sources */
  atomic_bool quiesce_waiting;                /* shutdown waits for live == 0 */
  weft__carrier_counters gone;                /* the counters of carriers since freed (stats) */
  atomic_uint_fast64_t fibers_peak;           /* most fibers live at once, sampled (weft__fibers_now) */
  atomic_uint_fast64_t extra_started;         /* compensation carriers started (stats) */
  atomic_uint_fast64_t next_id;               /* fiber ids are handed out in blocks from here */
  atomic_uint nextra;                         /* compensation carriers running */
  bool warned_fewer;                          /* said once that fewer carriers started */
  bool warned_fallback;                       /* said once that fibers could not start */
  atomic_bool warned_pin;                     /* said once that a carrier could not be pinned */
} weft__rt;

/* The scheduler's state: sched.c's, and the gdb extension's layout table's (debug.c); nothing else reads it.
 */
extern weft__rt weft__rt_state;

/*
 * What the monitor and the dump read of the scheduler. Carriers are never
 * freed while the runtime runs: weft__carrier_at(i) for i below
 * weft__carriers_n() stays valid until weft_shutdown.
 */
unsigned weft__carriers_n(void);
weft__carrier *weft__carrier_at(unsigned i);
/* Compensation carriers running. */
unsigned weft__carriers_extra(void);
/* Join the retired carriers and start up to k compensation carriers (none while shutdown holds the lock). */
void weft__carriers_compensate(size_t k);
/* Open fiber sources (a hint, without the lock). */
size_t weft__sources_open(void);
/* Fibers spawned and not yet done, and open sources. */
uint64_t weft__fibers_live(void);

/* The carrier of the calling thread, or NULL. */
weft__carrier *weft__carrier_self(void);

/* Start one more carrier; `extra` marks a compensation carrier. Called with rt.mu held. 0 or -errno. */
int weft__carrier_start_locked(bool extra);

/* Join carriers that retired (their threads have ended). Called with rt.mu held. */
void weft__carriers_reap_locked(void);

/* Would an open source give an idle carrier a fiber now? (Takes the source lock.) */
bool weft__sources_want(void);

#ifdef WEFT_TESTING
/*
 * Test builds only: called by a carrier that found nothing to do, just before it
 * announces its sleep and looks for work once more (NULL: nothing). A test holds a carrier there to open the
 * window between its last look and its sleep. Set before the runtime starts.
 */
extern void (*weft__test_before_sleep)(unsigned carrier);
#endif

/* Fibers started and not ended plus unstarted ones queued; updates the sampled peak. */
uint64_t weft__fibers_now(void);

/* Unstarted fibers waiting anywhere (global queue and spawn queues), plus open sources. */
size_t weft__unstarted_count(void);

/* The layout table of the gdb extension (debug.c). */
extern const uint64_t weft__debug_layout[];

/* A dump's request to carrier c (dump.c): served by c between fibers. */
void weft__dump_serve(weft__carrier *c);

/* The pinning monitor (monitor.c): started and stopped with the runtime, under rt.mu. */
int weft__monitor_start(unsigned pin_threshold_ms, unsigned deadlock_ms);
void weft__monitor_stop(void);
/* A carrier starts running fibers again: wake the monitor if it parked for want of work. */
void weft__monitor_kick(void);
/* The monitor sleeps until a carrier runs a fiber (read by the carriers at each switch). */
extern atomic_bool weft__monitor_parked;

#endif /* WEFT_FIBER_SCHED_H */
