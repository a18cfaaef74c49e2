/*
 * This file contains the pinning monitor.
 *
 * A fiber that blocks its carrier (a plain sleep(), a read() on a blocking
 * socket, a long computation) pins it: the carrier cannot run its other
 * fibers until that one parks. This is the C form of the pinning that JEP 444
 * describes for virtual threads inside `synchronized`. weft cannot take the
 * carrier back (no preemption), so it does what the JDK's ForkJoinPool does
 * for managed blocking: it notices, and compensates with another carrier.
 *
 * A thread of its own looks at every carrier every threshold/4 (the
 * threshold is WEFT_PIN_THRESHOLD_MS, 20 ms by default). A carrier whose
 * current fiber has run for longer than the threshold without switching is
 * pinned. As Go's sysmon does with a P's schedtick, the monitor reads a
 * counter that the carrier bumps on every switch (slice_seq) and notes when
 * it first saw each value, so that a switch reads no clock: a slice counts
 * as pinned once the same value has been seen for the threshold, that is
 * after between threshold and threshold + threshold/4 of running. Then:
 *  - the carrier is flagged; when the fiber finally switches back, the
 *    carrier itself reports it if WEFT_TRACE_PINNED=1 (fiber, how long, where
 *    it was started), since only it knows the exact duration;
 *  - if unstarted fibers are waiting, the monitor starts one extra carrier
 *    per pinned carrier (up to WEFT_MAX_CARRIERS in all). Extra carriers
 *    take only unstarted work, since started fibers never move; each extra
 *    carrier retires after it has been without fibers and without work for a
 *    while. Because a carrier counts as pinned only after the threshold, the
 *    number of extra carriers can at most double per threshold: 256 fibers
 *    that each call nanosleep(200 ms) on 2 carriers reach 256 carriers in
 *    about 7 thresholds.
 * An idle runtime must use no CPU: when no carrier has run a fiber for a
 * while, the monitor parks until a carrier starts running fibers again (the
 * carrier kicks it), or for at most PARK_NS.
 */
#include "../base/internal.h"

#include <pthread.h>
#include <time.h>

#include "../base/clock.h"
#include "../base/process.h"
#include "../base/sys.h"
#include "fiber.h"
#include "sched.h"

/* After this many looks at an idle runtime the monitor parks. */
#define IDLE_LOOKS 40
/* A parked monitor looks again after this long anyway (a kick may be missed). */
#define PARK_NS (250 * 1000000LL)

/*
 * The monitor's own state. It reads the scheduler only through sched.h's
 * functions (the carriers, the counts of unstarted work, compensation).
 */
static struct {
  pthread_t thread;
  bool running;       /* under the scheduler's lock (start and stop are called with it held) */
  pthread_mutex_t mu; /* guards stop and the parked monitor's wake-up */
  pthread_cond_t cv;  /* the monitor sleeps here between looks */
  bool stop;          /* under mu */
  int64_t threshold_ns, deadlock_ns;
} mon = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

WEFT__ALIGNED_CL atomic_bool weft__monitor_parked;

static void timed_wait(int64_t ns) { weft__cond_wait_until(&mon.cv, &mon.mu, weft__mono_ns() + ns); }

/*
 * The deadlock report (docs/debugging.md). Progress is the sum of the
 * carriers' switch counters; when it has not moved for WEFT_DEADLOCK_MS,
 * the monitor looks at every started fiber (under each carrier's reg_lock):
 * if all of them are parked on weft's own synchronisation with no deadline
 * (so no timer, descriptor, file operation, offloaded call or CPU future
 * can wake them), no work is queued and no offloaded call runs, it writes
 * one report and the dump, and goes on. It reports again only after
 * progress. Any doubt (a fiber running or runnable, a wait of another kind,
 * a deadline) means no report: never a false one for fibers waiting on
 * time, I/O or a thread of weft's.
 */
static struct {
  uint64_t progress; /* the switch counters' sum when the window started */
  int64_t since;     /* when it started */
  bool reported;     /* the report for this stall was written */
} dl;

static bool sync_wait(unsigned kind) {
  switch (kind) {
  case WEFT__WAIT_MUTEX:
  case WEFT__WAIT_COND:
  case WEFT__WAIT_SEM:
  case WEFT__WAIT_CHAN_SEND:
  case WEFT__WAIT_CHAN_RECV:
  case WEFT__WAIT_FUTURE:
  case WEFT__WAIT_MAP:
    return true;
  default:
    return false;
  }
}

/* How many fibers are stuck, or 0 when something could still move (see above). */
static size_t stuck_fibers(void) {
  /* Unstarted fibers, or a map that still has elements to start (an open source whose elements are all
   * claimed only waits for its fibers, which are looked at below). */
  if (weft__unstarted_count() > weft__sources_open() || weft__sources_want()) return 0;
  /* An offloaded call (io/offload.c counts them here) may release what the fibers wait for. */
  if (atomic_load_explicit(&weft__outside_calls, memory_order_acquire)) return 0;
  size_t n = 0;
  unsigned nc = weft__carriers_n();
  for (unsigned i = 0; i < nc; i++) {
    weft__carrier *c = weft__carrier_at(i);
    if (atomic_load_explicit(&c->status, memory_order_relaxed) != WEFT__C_RUNNING) continue;
    if (atomic_load_explicit(&c->slice_seq, memory_order_relaxed) & 1) return 0; /* a fiber runs */
    bool ok = true;
    weft__lock_acquire(&c->reg_lock);
    for (weft__fiber *f = c->reg_head; f && ok; f = f->reg_next) {
      ok = atomic_load_explicit(&f->state, memory_order_relaxed) == WEFT__FS_PARKED &&
           sync_wait(atomic_load_explicit(&f->wait_kind, memory_order_relaxed)) &&
           atomic_load_explicit(&f->wait_deadline, memory_order_relaxed) < 0;
      n++;
    }
    weft__lock_release(&c->reg_lock);
    if (!ok) return 0;
  }
  return n;
}

static void deadlock_check(int64_t now) {
  int64_t window = mon.deadlock_ns;
  if (window <= 0 || weft__fibers_live() == 0) {
    dl.since = 0;
    return;
  }
  uint64_t p = 0;
  unsigned nc = weft__carriers_n();
  for (unsigned i = 0; i < nc; i++)
    p += atomic_load_explicit(&weft__carrier_at(i)->slice_seq, memory_order_relaxed);
  if (p != dl.progress || dl.since == 0) {
    dl.progress = p;
    dl.since = now;
    dl.reported = false;
    return;
  }
  if (dl.reported || now - dl.since < window) return;
  size_t n = stuck_fibers();
  if (n == 0) {
    dl.since = now; /* not stuck, only quiet (waits on time or I/O): look again after another window */
    return;
  }
  dl.reported = true;
  weft__warn(
      "%zu fibers parked with nothing to wake them for %.1f s (a deadlock among fibers, unless a thread "
      "outside weft wakes them); the dump follows",
      n, (double)(now - dl.since) / 1e9);
  weft__fibers_dump(2, true);
}

/* One look at every carrier: flag pinned ones, compensate; returns whether any ran a fiber. */
static bool look(int64_t threshold_ns) {
  int64_t now = weft__mono_ns();
  atomic_store_explicit(&weft__coarse_now, now, memory_order_relaxed); /* for the waits dumps show */
  (void)weft__fibers_now();                                            /* samples the peak (weft_get_stats) */
  unsigned n = weft__carriers_n();
  size_t pinned = 0;
  bool busy = false, retired = false;
  for (unsigned i = 0; i < n; i++) {
    weft__carrier *c = weft__carrier_at(i);
    int st = atomic_load_explicit(&c->status, memory_order_relaxed);
    if (st == WEFT__C_RETIRED) retired = true;
    if (st != WEFT__C_RUNNING) continue;
    uint64_t seq = atomic_load_explicit(&c->slice_seq, memory_order_relaxed);
    if (seq != c->mon_seq) { /* a slice it has not seen yet, or none */
      c->mon_seq = seq;
      c->mon_since = now;
      busy = true;
      continue;
    }
    if (!(seq & 1)) continue; /* in the scheduler since the last look */
    busy = true;
    if (now - c->mon_since >= threshold_ns) {
      pinned++;
      if (!atomic_load_explicit(&c->pinned, memory_order_relaxed)) {
        atomic_store_explicit(&c->pin_seen, c->mon_since, memory_order_relaxed);
        atomic_store_explicit(&c->pinned, true, memory_order_release); /* pin_seen first */
      }
    }
  }
  deadlock_check(now);
  size_t waiting = pinned ? weft__unstarted_count() : 0;
  if ((pinned && waiting) || retired) weft__carriers_compensate(pinned < waiting ? pinned : waiting);
  return busy || weft__carriers_extra() > 0;
}

static void *monitor_main(void *arg) {
  WEFT__UNUSED(arg);
  int64_t period = mon.threshold_ns / 4 > 1000000 ? mon.threshold_ns / 4 : 1000000;
  unsigned idle = 0;
  pthread_mutex_lock(&mon.mu);
  while (!mon.stop) {
    if (idle >= IDLE_LOOKS) {
      atomic_store(&weft__monitor_parked, true);
      timed_wait(PARK_NS);
      atomic_store(&weft__monitor_parked, false);
      idle = 0;
    } else {
      timed_wait(period);
    }
    if (mon.stop) break;
    pthread_mutex_unlock(&mon.mu);
    idle = look(mon.threshold_ns) ? 0 : idle + 1;
    pthread_mutex_lock(&mon.mu);
  }
  pthread_mutex_unlock(&mon.mu);
  return NULL;
}

/* A child has no monitor thread; its lock may have been held by it. */
static void atfork_child(void) {
  pthread_mutex_init(&mon.mu, NULL);
  pthread_cond_init(&mon.cv, NULL);
  mon.running = false;
  mon.stop = false;
  atomic_store(&weft__monitor_parked, false);
}
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static void fork_register(void) { weft__on_fork(NULL, NULL, atfork_child); }

int weft__monitor_start(unsigned pin_threshold_ms, unsigned deadlock_ms) {
  pthread_once(&fork_once, fork_register);
  weft__cond_init(&mon.cv);
  mon.threshold_ns = (int64_t)pin_threshold_ms * 1000000;
  mon.deadlock_ns = (int64_t)deadlock_ms * 1000000;
  mon.stop = false;
  atomic_store(&weft__monitor_parked, false);
  /* 256 KiB: small, and above every architecture's PTHREAD_STACK_MIN (128 KiB on aarch64). */
  int rc = weft__thread_start(&mon.thread, 256 * 1024, "weft-monitor", monitor_main, NULL);
  mon.running = rc == 0;
  return rc;
}

void weft__monitor_stop(void) {
  if (!mon.running) return;
  pthread_mutex_lock(&mon.mu);
  mon.stop = true;
  pthread_cond_signal(&mon.cv);
  pthread_mutex_unlock(&mon.mu);
  pthread_join(mon.thread, NULL);
  mon.running = false;
}

void weft__monitor_kick(void) {
  /* The monitor slept: its clock for dumps is stale by as much. */
  atomic_store_explicit(&weft__coarse_now, weft__mono_ns(), memory_order_relaxed);
  pthread_mutex_lock(&mon.mu);
  if (atomic_load(&weft__monitor_parked)) pthread_cond_signal(&mon.cv);
  pthread_mutex_unlock(&mon.mu);
}
