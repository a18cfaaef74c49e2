/*
 * This file contains weft's M:N fiber scheduler.
 *
 * ==== Concepts ===============================================================
 *
 * A fiber is a function with a stack of its own, run by a carrier: an OS
 * thread of weft's, one per CPU in the process's affinity mask by default
 * (WEFT_CARRIERS). Fibers switch only at weft's calls (park, yield, end), by
 * the hand-written context switch in context_<arch>.S, never by preemption.
 * Each carrier has:
 *
 *   ready   the started fibers that may run now, FIFO (but a waiter handed a
 *           mutex, which goes first: weft__fiber_ready_first). Only the
 *           carrier itself touches it (no lock).
 *   runnext the fiber a source made when one of its fibers parked (below):
 *           it runs once ready is empty, before new work.
 *   spawn   fibers not yet started, FIFO, under a small lock, because idle
 *           carriers steal from it.
 *   inbox   fibers made runnable by other threads, under a lock; the carrier
 *           moves them to `ready` (inbox_first: to its front).
 *   timers  a FIFO of deadlines armed in order (O(1) both ways: a burst of
 *           equal sleeps never touches the heap), a binary min-heap for the
 *           rest; only the carrier touches them.
 *   poller  an epoll instance (poll/poll_epoll.c) where the carrier sleeps when
 *           it has nothing to run, until a descriptor is ready, a timer is
 *           due, or another thread writes its eventfd.
 *
 * Fibers spawned by a thread that is not a carrier (a future's, whose record
 * lives in the future) go to one global queue; carriers take batches from
 * it. A fiber gets its stack only when a carrier first runs it.
 *
 * A fiber source (fiber.h) is work that wants many fibers: a BLOCKING pmap.
 * Nothing of it is queued per element. An idle carrier makes a fiber from an
 * open source, its record at the top of a stack from the carrier's cache (a
 * "clone", on the page its first frame touches anyway: no allocation, one
 * page fault when the stack is fresh); when a clone parks or yields, its
 * carrier makes the source's next fiber at once (runnext). So a map of
 * 100,000 sleeping elements puts them all in flight, each carrier creating
 * its own share in parallel, while a map whose elements never block runs on
 * one fiber per carrier at a few nanoseconds an element. The source keeps
 * one count of the live fibers (so shutdown waits for it) from open to its
 * last fiber's end; its clones count nothing each.
 *
 * A fiber already spawned and not yet started takes the place of the source's
 * next one at such a park (admit_spawned: the parking carrier's own spawn
 * queue first, else one from another's): work asked for earlier is admitted
 * earlier. Without it a map of clients beside a server that spawns a fiber
 * per accepted connection starts every client before the connections it
 * made are served (echo, 9000 connections: first round trips at 0.5-0.7 s
 * at p99, against 0.22-0.34 s with it).
 *
 * Readied fibers run before runnext: woken fibers then end on time and give
 * their warm stacks to the fibers made next. (Letting the new fiber go first,
 * as Go's runnext does for a new goroutine, was measured on a million
 * sleeping elements: most wake-ups seconds late and every element on a fresh
 * stack, 5.6 s against 3.5 s.)
 *
 * The scheduler loop of a carrier runs on the carrier's own thread stack. A
 * fiber that parks, yields or ends switches to it, and it picks the next
 * fiber: two switches per hand-off, as Go does through g0, which keeps the
 * scheduler's frames off fiber stacks (100,000 parked fibers each touch one
 * page) and gives one place to act after a fiber has left its stack (ending
 * it, or queueing it after a yield).
 *
 * ==== Park and unpark ========================================================
 *
 * Every wait goes through a waiter (sync/wait.h) that leaves its WAITING
 * state exactly once, by CAS; only the winner calls weft__fiber_ready. So a
 * fiber is readied exactly once per park, and always parks exactly once per
 * wait, even when the wake came before it got to park (that ready is already
 * in the carrier's inbox and is consumed by the park).
 *
 * "Park = switch, then publish" (Go's rule) matters when a fiber can be
 * resumed on another thread before its registers are saved. Here it cannot:
 * a fiber is resumed only by its home carrier, and that carrier is busy
 * switching the fiber out until it is done. So a fiber may publish itself
 * (put its waiter on a wait list, arm a timer) before it switches, and a
 * waker on another thread may ready it at once: the fiber lands in the
 * inbox and runs after the switch has finished. Orderings: the inbox lock
 * (acquire/release) orders the waker's writes before the fiber's resumption;
 * the waiter's CAS is acq_rel; the sleep of a carrier pairs a seq_cst fence
 * after "I am going to sleep" with one after "I pushed work" (Dekker), so a
 * wake is never lost between the last look for work and epoll_wait.
 *
 * ==== Why a started fiber does not move to another carrier (by default) =======
 *
 * C code caches the address of thread-local variables. errno is one:
 * glibc declares __errno_location() `const`, so a compiler may compute &errno
 * once and reuse it after a call that parked the fiber and resumed it on
 * another carrier, and would then write another thread's errno. Any
 * `__thread` variable of the program, or of a library it calls, has the same
 * problem. weft cannot check a program for it, so by default weft never
 * resumes a fiber on a thread other than the one it started on: errno and
 * thread-locals stay those of one OS thread for the fiber's life.
 *
 * WEFT_MIGRATE=1 is the program's promise that its fibers keep no such
 * address across a weft call that may park (code that reads results from
 * weft's return values, as weft's I/O returns -errno, keeps it; Boost.Fiber's
 * work-stealing scheduler asks the same of its users). Then a woken fiber may
 * resume on another carrier that is idle ("Carriers that share work", at
 * maybe_share): only at a park, only once its carrier has switched it out
 * completely (it comes from the carrier's own ready queue, never from the
 * inbox that wakers fill while a fiber may still be switching out), with no
 * armed timer (its carrier disarms it: the fiber was woken), and never from a
 * wait that holds carrier state (a raw descriptor's slot in the carrier's
 * poller, a request on its ring: weft__fiber_stay). weft's own code keeps the
 * promise too: errno is restored after a switch through a function the
 * compiler cannot see into, and the carrier is read afresh after every park.
 * Default off, it costs nothing: one branch where a carrier pops a woken fiber.
 *
 * Load balance comes from where fibers start rather than from moving them:
 * unstarted fibers (which have no stack and no state) are stolen by idle
 * carriers, half a victim's queue at a time, and a carrier that finds work
 * wakes another idle one, so a burst spreads over all carriers before its
 * fibers start. A victim's only unstarted fiber is left to it for a few
 * microseconds: it is most likely the future its starter is about to wait
 * for. A source opens by waking as many carriers as it has shares (a
 * pmap's slices, one per carrier), and a carrier takes from another's share
 * only once that carrier has arrived or is busy: the first one awake would
 * otherwise start every element before the others get there. Blocking work
 * spends its life parked, and a parked fiber costs its carrier nothing.
 *
 * An idle carrier spins for about 20 us before it sleeps (longer while it
 * sees work come and go, as Go's spinning M does), and wakers skip the
 * eventfd while one spins: a fiber that starts a future and waits for it,
 * in a loop, then costs no system call and no thread wake-up per future.
 * A carrier watching descriptors does not spin (their readiness arrives
 * through epoll only); an idle runtime spins once, then sleeps. What this cannot fix is a carrier whose
 * started fibers all want the CPU at once: they share that carrier. A carrier that a fiber blocks for long (a
 * plain sleep(), a blocking read) is detected by the pinning monitor (monitor.c), which starts a temporary
 * extra carrier that takes the unstarted work.
 *
 * ==== OpenMP and fibers ======================================================
 *
 * OpenMP keeps per-thread state (team, task, nesting level) in thread-local
 * storage of the carrier thread. If a fiber parked inside an OpenMP region,
 * another fiber on the same carrier could enter a region of its own on top
 * of that state. So:
 *  - a fiber's CPU parallel map (or CPU future) never runs OpenMP on the
 *    carrier: it goes to weft's OpenMP team as a job, and the fiber parks
 *    until the job wakes it (api/pmap.c, cpu/cpu_omp.c);
 *  - a fiber that enters an OpenMP region itself does not park inside it:
 *    weft's blocking calls see omp_get_level() > 0 and block the carrier like
 *    a plain thread (sync/wait.c);
 *  - an OpenMP task that waits on a fiber's future blocks its OpenMP thread
 *    on a futex; the fiber runs on a carrier, so it always makes progress;
 *  - a fiber that waits on a CPU future parks; the task that completes the
 *    future readies the fiber through its carrier's inbox.
 *
 * ==== Alternatives rejected ==================================================
 *
 *  - Migrating fibers freely (Go's model): unsafe for C's errno and
 *    thread-locals, above; opt-in and only at parks (WEFT_MIGRATE).
 *  - Thieves taking fibers from a busy carrier's inbox or run queue: a fiber
 *    in the inbox may still be switching out on its carrier, and its timer
 *    lives in that carrier's heap; the owner offers what it has switched out
 *    instead. The cost: a carrier held by a fiber that never parks or
 *    yields keeps the fibers woken behind it until it does.
 *  - One global run queue: one lock for every switch of every carrier.
 *  - Switching from fiber to fiber directly: one switch fewer per hand-off,
 *    but the scheduler's frames would land on every fiber's stack, and
 *    ending a fiber would need a stack to run on after it has let go of its
 *    own.
 *  - Spinning idle carriers without bound: an idle runtime must use no CPU.
 *    Carriers spin for tens of microseconds at most, then sleep in
 *    epoll_wait, and pay a wake-up (an eventfd write) only when they are
 *    asleep; a busy carrier is never written to.
 *  - Queueing a record per element of a blocking map up front (the first
 *    version): 100,000 records allocated and queued before any ran, a
 *    fresh stack for every element even when elements end before others
 *    start, and a map of SIZE_MAX elements refused for want of memory.
 *  - Preemption by signals: a fiber interrupted at an arbitrary point could
 *    hold a libc lock; the pinning monitor compensates instead.
 */
#include "../base/clock.h"
#include "../base/internal.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../base/settings.h"
#include "../base/process.h"
#include "../poll/poller.h"
#include "../poll/uring.h"
#include "../local/local.h"
#include "../base/sys.h"
#include "../base/annotate.h"
#include "context.h"
#include "fiber.h"
#include "frame.h"
#include "overflow.h"
#include "sched.h"
#include "../poll/owned.h"
#include "stack.h"

/* --- queues ---------------------------------------------------------------------- */

/* Move the first k fibers of src to a new queue. */
static inline weft__fq fq_take(weft__fq *src, size_t k) {
  weft__fq out = {NULL, NULL, 0};
  while (k-- > 0) {
    weft__fiber *f = weft__fq_pop(src);
    if (!f) break;
    weft__fq_push(&out, f);
  }
  return out;
}

/* --- the runtime ------------------------------------------------------------------- */

enum { RT_STOPPED = 0, RT_RUNNING = 1, RT_STOPPING = 2 };

/* Arenas an idle carrier trims at a time (about 20 µs each) before it looks for work again. */
#define TRIM_BATCH 4
/* How long a carrier stays without work before it gives stacks back (stack.c decides how many, by the
 * carrier's idle time), and how long it waits to look again when none were due. */
#define TRIM_IDLE_NS (100 * 1000000LL)
#define TRIM_STEP_NS (250 * 1000000LL)

/* How long a compensation carrier stays without work before it retires. */
#define RETIRE_NS (200 * 1000000LL)

weft__rt weft__rt_state = {.mu = PTHREAD_MUTEX_INITIALIZER,
                           .quiesce_cv = PTHREAD_COND_INITIALIZER,
                           .gq_lock = WEFT__LOCK_INITIALIZER(WEFT__LOCK_LEAF),
                           .src_lock = WEFT__LOCK_INITIALIZER(WEFT__LOCK_OBJECT)};
#define rt weft__rt_state

atomic_uint weft__outside_calls;
#ifdef WEFT_TESTING
void (*weft__test_before_sleep)(unsigned carrier);
#endif

struct weft__poller *weft__fiber_poller(const weft__fiber *f) {
  return &f->home->poller;
}

struct weft__poller *weft__fiber_lasting_poller(const weft__fiber *f) {
  /* A compensation carrier retires, and its epoll with it; the first carrier lives as long as the runtime. */
  return f->home->extra ? &rt.carriers[0]->poller : &f->home->poller;
}

unsigned weft__carriers_n(void) { return atomic_load_explicit(&rt.ncarriers, memory_order_acquire); }
weft__carrier *weft__carrier_at(unsigned i) { return rt.carriers[i]; }
unsigned weft__carriers_extra(void) { return atomic_load_explicit(&rt.nextra, memory_order_relaxed); }
size_t weft__sources_open(void) { return atomic_load_explicit(&rt.nsources, memory_order_relaxed); }
uint64_t weft__fibers_live(void) { return atomic_load(&rt.live); }

void weft__carriers_compensate(size_t k) {
  /* trylock: shutdown holds rt.mu while it stops the monitor, which calls this. */
  if (pthread_mutex_trylock(&rt.mu) != 0) return;
  weft__carriers_reap_locked();
  while (k-- > 0 && atomic_load(&rt.nrunning) < rt.cap)
    if (weft__carrier_start_locked(true) != 0) break;
  pthread_mutex_unlock(&rt.mu);
}

static __thread weft__carrier *tls_carrier;

weft__carrier *weft__carrier_self(void) { return tls_carrier; }

bool weft__fiber_is_local(const weft__fiber *f) { return tls_carrier != NULL && f->home == tls_carrier; }

unsigned weft__fiber_carrier_id(void) {
  weft__carrier *c = tls_carrier;
  return c ? c->id : 0;
}

bool weft__carrier_thread(void) { return tls_carrier != NULL; }

weft__fiber *weft__fiber_self(void) {
  weft__carrier *c = tls_carrier;
  return c ? c->current : NULL;
}

bool weft__fibers_running(void) {
  return atomic_load_explicit(&rt.state, memory_order_acquire) == RT_RUNNING;
}

bool weft__fibers_places(weft__places *out) {
  pthread_mutex_lock(&rt.mu);
  bool running = atomic_load(&rt.state) == RT_RUNNING;
  if (running) *out = rt.places;
  pthread_mutex_unlock(&rt.mu);
  return running;
}

unsigned weft_carrier_count(void) {
  return weft__fibers_running() ? atomic_load_explicit(&rt.nrunning, memory_order_relaxed) : 0;
}

void weft__fiber_prepare(weft__fiber *f, const weft__fiber_ops *ops, void *arg) {
  memset(f, 0, sizeof *f);
  f->ops = ops;
  f->arg = arg;
  weft__tctx_init(&f->tc);
}

_Atomic int64_t weft__coarse_now;

static void counters_add(weft__carrier_counters *to, const weft__carrier_counters *c) {
#define ADD(f) weft__count(&to->f, atomic_load_explicit(&c->f, memory_order_relaxed))
  ADD(started);
  ADD(finished);
  ADD(parks);
  ADD(yields);
  ADD(steals);
  ADD(migrations);
  ADD(sleeps);
  ADD(polls);
#undef ADD
}

/* Sum of every carrier's counters, those of carriers already freed included. Under no lock: a snapshot. */
static void counters_sum(weft__carrier_counters *out) {
  memset(out, 0, sizeof *out);
  counters_add(out, &rt.gone);
  unsigned n = weft__fibers_running() ? atomic_load_explicit(&rt.ncarriers, memory_order_acquire) : 0;
  for (unsigned i = 0; i < n; i++) counters_add(out, &rt.carriers[i]->cnt);
}

/* Fibers started and not ended, plus those queued unstarted; and the peak of that, kept as a max. */
uint64_t weft__fibers_now(void) {
  weft__carrier_counters s;
  counters_sum(&s);
  uint64_t started = atomic_load_explicit(&s.started, memory_order_relaxed);
  uint64_t finished = atomic_load_explicit(&s.finished, memory_order_relaxed);
  uint64_t now = (started > finished ? started - finished : 0) + weft__unstarted_count();
  uint64_t peak = atomic_load_explicit(&rt.fibers_peak, memory_order_relaxed);
  while (now > peak && !atomic_compare_exchange_weak_explicit(&rt.fibers_peak, &peak, now,
                                                              memory_order_relaxed, memory_order_relaxed)) {
  }
  return now;
}

void weft__fiber_get_stats(weft__fiber_stats *out) {
  weft__carrier_counters s;
  counters_sum(&s);
#define GET(f) atomic_load_explicit(&s.f, memory_order_relaxed)
  out->live = atomic_load(&rt.live);
  out->spawned = GET(started);
  out->finished = GET(finished);
  out->parks = GET(parks);
  out->yields = GET(yields);
  out->sleeps = GET(sleeps);
  out->polls = GET(polls);
  out->steals = GET(steals);
  out->migrations = GET(migrations);
#undef GET
  out->stacks_in_use = weft__stack_in_use();
  out->fibers = weft__fibers_running() ? weft__fibers_now() : 0;
  out->fibers_peak = atomic_load_explicit(&rt.fibers_peak, memory_order_relaxed);
  out->extra_started = atomic_load_explicit(&rt.extra_started, memory_order_relaxed);
}

/* --- waking idle carriers ------------------------------------------------------ */

/* Wake one sleeping carrier (other than `except`), unless one is already looking for work. */
static void wake_idle(weft__carrier *except) {
  if (atomic_load(&rt.nspinning) != 0) return;
  unsigned n = atomic_load_explicit(&rt.ncarriers, memory_order_acquire);
  for (unsigned i = 0; i < n; i++) {
    weft__carrier *c = rt.carriers[i];
    if (c == except) continue;
    if (atomic_load_explicit(&c->poller.sleeping, memory_order_relaxed)) {
      weft__poller_wake(&c->poller);
      return;
    }
  }
}

/* Wake up to n sleeping carriers other than `except`, whether or not one is looking for work. */
static void wake_sleepers(weft__carrier *except, unsigned n) {
  unsigned k = atomic_load_explicit(&rt.ncarriers, memory_order_acquire);
  for (unsigned i = 0; i < k && n > 0; i++) {
    weft__carrier *c = rt.carriers[i];
    if (c == except || !atomic_load_explicit(&c->poller.sleeping, memory_order_relaxed)) continue;
    weft__poller_wake(&c->poller);
    n--;
  }
}

bool weft__carrier_may_arrive(unsigned id) {
  if (id >= atomic_load_explicit(&rt.ncarriers, memory_order_acquire)) return false;
  weft__carrier *c = rt.carriers[id];
  if (atomic_load_explicit(&c->status, memory_order_relaxed) != WEFT__C_RUNNING) return false;
  /* slice_seq is odd while a fiber runs (sched.h). */
  return (atomic_load_explicit(&c->slice_seq, memory_order_relaxed) & 1) == 0;
}

/* --- spawning ---------------------------------------------------------------------- */

static void live_dec(size_t n);

static int spawn_chain(weft__fq *chain) {
  /*
   * Count first, then check the state (both seq_cst): shutdown stores
   * RT_STOPPING and then reads live, so either it sees these fibers and
   * waits for them, or this call sees RT_STOPPING and backs out.
   */
  size_t n = chain->len;
  atomic_fetch_add(&rt.live, n);
  if (atomic_load(&rt.state) != RT_RUNNING) {
    live_dec(n);
    return -ESHUTDOWN;
  }
  weft__carrier *c = tls_carrier;
  if (c) {
    weft__lock_acquire(&c->spawn_lock);
    weft__fq_splice(&c->spawn, chain);
    atomic_store_explicit(&c->spawn_len, c->spawn.len, memory_order_relaxed);
    weft__lock_release(&c->spawn_lock);
    atomic_thread_fence(memory_order_seq_cst); /* pairs with the sleeping carrier's fence */
    wake_idle(c);
  } else {
    weft__lock_acquire(&rt.gq_lock);
    weft__fq_splice(&rt.gq, chain);
    atomic_store_explicit(&rt.gq_len, rt.gq.len, memory_order_relaxed);
    weft__lock_release(&rt.gq_lock);
    atomic_thread_fence(memory_order_seq_cst);
    wake_idle(NULL);
  }
  return 0;
}

int weft__fiber_spawn(weft__fiber *f) { return weft__fiber_spawn_array(f, 1); }

int weft__fiber_spawn_array(weft__fiber *fs, size_t n) {
  if (n == 0) return 0;
  weft__fq chain = {NULL, NULL, 0};
  for (size_t i = 0; i < n; i++) weft__fq_push(&chain, &fs[i]);
  return spawn_chain(&chain);
}

/* --- fiber sources (fiber.h) ------------------------------------------------------ */

int weft__source_open(weft__source *s, unsigned want) {
  /* As spawn_chain: counted first, then the state checked, so shutdown waits for the source or we back out.
   */
  atomic_fetch_add(&rt.live, 1);
  if (atomic_load(&rt.state) != RT_RUNNING) {
    live_dec(1);
    return -ESHUTDOWN;
  }
  weft__lock_acquire(&rt.src_lock);
  weft__srclist_push(&rt.sources, s);
  s->open = true;
  atomic_store_explicit(&rt.nsources, atomic_load_explicit(&rt.nsources, memory_order_relaxed) + 1,
                        memory_order_relaxed);
  atomic_store_explicit(&rt.src_opens, atomic_load_explicit(&rt.src_opens, memory_order_relaxed) + 1,
                        memory_order_relaxed);
  weft__lock_release(&rt.src_lock);
  atomic_thread_fence(memory_order_seq_cst); /* pairs with the sleeping carrier's fence */
  wake_sleepers(tls_carrier, want);
  return 0;
}

/* Does any open source want a fiber from an idle carrier? (Before it sleeps: see work_visible.) */
bool weft__sources_want(void) {
  if (atomic_load(&rt.nsources) == 0) return false;
  bool w = false, carrier = tls_carrier != NULL;
  weft__lock_acquire(&rt.src_lock);
  for (weft__source *s = rt.sources.head; s && !w; s = s->next) w = s->ops->wants(s, carrier);
  weft__lock_release(&rt.src_lock);
  return w;
}

static void source_unlink_locked(weft__source *s) { weft__srclist_remove(&rt.sources, s); }

void weft__source_close(weft__source *s) {
  weft__lock_acquire(&rt.src_lock);
  if (s->open) {
    source_unlink_locked(s);
    s->open = false;
    atomic_store_explicit(&rt.nsources, atomic_load_explicit(&rt.nsources, memory_order_relaxed) - 1,
                          memory_order_relaxed);
  }
  weft__lock_release(&rt.src_lock);
}

static weft__fiber *clone_make(weft__carrier *c, weft__source *s);

/*
 * An idle carrier makes a fiber from the first open source that wants one,
 * and moves that source to the back of the list (several maps at once share
 * the carriers in turn). The place is reserved under the lock, so the source
 * is alive until the fiber exists or the place is given back.
 */
static weft__fiber *pull_source(weft__carrier *c, bool idle) {
  if (atomic_load_explicit(&rt.nsources, memory_order_relaxed) == 0) return NULL;
  weft__lock_acquire(&rt.src_lock);
  weft__source *s = rt.sources.head;
  while (s && !s->ops->reserve(s, idle)) s = s->next;
  if (s && s != rt.sources.tail) {
    /* To the back: the carriers take from the sources in turn. */
    weft__srclist_remove(&rt.sources, s);
    weft__srclist_push(&rt.sources, s);
  }
  weft__lock_release(&rt.src_lock);
  if (!s) return NULL;
  weft__fiber *f = clone_make(c, s);
  if (!f && s->ops->unreserve(s)) live_dec(1);
  return f;
}

/* --- timers: per carrier, owned by the carrier ---------------------------------- */

/*
 * Three homes (sched.h): the FIFO of non-decreasing deadlines takes every
 * timer armed no earlier than its tail, which is what a burst of sleeps of
 * one length does (100,000 fibers parked for a second each: a heap would
 * sift each one through 17 levels of cache misses as it fires); the heap
 * takes the rest; the overflow list the rare timer the heap had no memory
 * for. timer_slot: an index in the heap, or one of these two.
 */
#define TSLOT_OVERFLOW SIZE_MAX
#define TSLOT_FIFO     (SIZE_MAX - 1)

static void heap_set(weft__carrier *c, size_t i, weft__fiber *f) {
  c->heap[i] = f;
  f->timer_slot = i;
}

static void heap_up(weft__carrier *c, size_t i) {
  weft__fiber *f = c->heap[i];
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (c->heap[p]->timer_deadline <= f->timer_deadline) break;
    heap_set(c, i, c->heap[p]);
    i = p;
  }
  heap_set(c, i, f);
}

static void heap_down(weft__carrier *c, size_t i) {
  weft__fiber *f = c->heap[i];
  size_t n = c->heap_len;
  for (;;) {
    size_t l = 2 * i + 1, m = i;
    int64_t best = f->timer_deadline;
    if (l < n && c->heap[l]->timer_deadline < best) {
      m = l;
      best = c->heap[l]->timer_deadline;
    }
    if (l + 1 < n && c->heap[l + 1]->timer_deadline < best) m = l + 1;
    if (m == i) break;
    heap_set(c, i, c->heap[m]);
    i = m;
  }
  heap_set(c, i, f);
}

static void heap_remove(weft__carrier *c, size_t i) {
  weft__fiber *last = c->heap[--c->heap_len];
  if (i == c->heap_len) return;
  heap_set(c, i, last);
  if (i > 0 && c->heap[(i - 1) / 2]->timer_deadline > last->timer_deadline)
    heap_up(c, i);
  else
    heap_down(c, i);
}

/*
 * A timer for which the heap cannot grow (no memory) goes on an unsorted
 * list that run_timers scans: slower, but the wait still ends at its
 * deadline and not before. The list is empty but in that rare case.
 */
static void overflow_push(weft__carrier *c, weft__fiber *f) {
  f->timer_slot = TSLOT_OVERFLOW;
  f->tprev = NULL;
  f->tnext = c->toverflow;
  if (c->toverflow) c->toverflow->tprev = f;
  c->toverflow = f;
}

static void overflow_remove(weft__carrier *c, weft__fiber *f) {
  if (f->tprev)
    f->tprev->tnext = f->tnext;
  else
    c->toverflow = f->tnext;
  if (f->tnext) f->tnext->tprev = f->tprev;
  f->tnext = f->tprev = NULL;
}

static void fifo_append(weft__carrier *c, weft__fiber *f) {
  f->timer_slot = TSLOT_FIFO;
  f->tnext = NULL;
  f->tprev = c->tfifo_tail;
  if (c->tfifo_tail)
    c->tfifo_tail->tnext = f;
  else
    c->tfifo_head = f;
  c->tfifo_tail = f;
}

static void fifo_remove(weft__carrier *c, weft__fiber *f) {
  if (f->tprev)
    f->tprev->tnext = f->tnext;
  else
    c->tfifo_head = f->tnext;
  if (f->tnext)
    f->tnext->tprev = f->tprev;
  else
    c->tfifo_tail = f->tprev;
  f->tnext = f->tprev = NULL;
}

/*
 * Timer slack: a deadline a little before the FIFO's tail joins the FIFO at
 * the tail's deadline, when that is at most 1/2^SLACK_SHIFT of the wait
 * later (1/64: 0.47 s of a 30 s limit, 16 µs of a 1 ms sleep). Fibers that
 * compute a deadline and then wait for something else first (a round trip's
 * limit, taken before its send, kept for its read) arm it a little out of
 * order; at 9000 connections such reads sent every second timer through the
 * heap's levels of cache misses (heap_down was 4% of the process's CPU).
 * The wait still never ends before its deadline; it ends at most that much
 * after it, where Linux's own timer wheel coarsens long timeouts by up to
 * 1/8. Timers that fire in one pass may wake in FIFO order, not deadline
 * order, within the slack.
 */
#define SLACK_SHIFT 6

static void timer_arm(weft__fiber *self, int64_t deadline_ns, weft__waiter *w) {
  weft__carrier *c = self->home;
  self->timer_deadline = deadline_ns > 0 ? deadline_ns : 1;
  self->timer_waiter = w;
  if (!c->tfifo_tail || c->tfifo_tail->timer_deadline <= self->timer_deadline) {
    fifo_append(c, self);
    return;
  }
  int64_t tail = c->tfifo_tail->timer_deadline;
  if (tail - self->timer_deadline <= (self->timer_deadline - weft__mono_ns()) >> SLACK_SHIFT) {
    self->timer_deadline = tail;
    fifo_append(c, self);
    return;
  }
  if (c->heap_len == c->heap_cap) {
    size_t cap = c->heap_cap ? c->heap_cap * 2 : 256;
    weft__fiber **h = weft__realloc(c->heap, cap * sizeof *h);
    if (!h) {
      overflow_push(c, self);
      return;
    }
    c->heap = h;
    c->heap_cap = cap;
  }
  c->heap[c->heap_len++] = self;
  heap_up(c, c->heap_len - 1);
}

static void timer_disarm(weft__fiber *self) {
  if (!self->timer_deadline) return;
  if (self->timer_slot == TSLOT_FIFO)
    fifo_remove(self->home, self);
  else if (self->timer_slot == TSLOT_OVERFLOW)
    overflow_remove(self->home, self);
  else
    heap_remove(self->home, self->timer_slot);
  self->timer_deadline = 0;
  self->timer_waiter = NULL;
}

static void fire(weft__fiber *f) {
  weft__waiter *w = f->timer_waiter;
  f->timer_deadline = 0;
  f->timer_waiter = NULL;
  weft__waiter_resolve(w, WEFT__W_TIMEDOUT);
}

/* Fire the due timers; returns the next deadline, or -1 when none is armed. */
static int64_t run_timers(weft__carrier *c) {
  if (c->heap_len == 0 && !c->toverflow && !c->tfifo_head) return -1;
  int64_t now = weft__mono_ns();
  while (c->tfifo_head && c->tfifo_head->timer_deadline <= now) {
    weft__fiber *f = c->tfifo_head;
    fifo_remove(c, f);
    fire(f);
  }
  while (c->heap_len > 0 && c->heap[0]->timer_deadline <= now) {
    weft__fiber *f = c->heap[0];
    heap_remove(c, 0);
    fire(f);
  }
  int64_t next = c->heap_len ? c->heap[0]->timer_deadline : -1;
  if (c->tfifo_head && (next < 0 || c->tfifo_head->timer_deadline < next))
    next = c->tfifo_head->timer_deadline;
  for (weft__fiber *f = c->toverflow, *n; f; f = n) {
    n = f->tnext;
    if (f->timer_deadline <= now) {
      overflow_remove(c, f);
      fire(f);
    } else if (next < 0 || f->timer_deadline < next) {
      next = f->timer_deadline;
    }
  }
  return next;
}

/* --- switching --------------------------------------------------------------------- */

/* The fiber's first frame: run its entry, then leave for good. */
static void fiber_main(void *arg) {
  weft__fiber *f = arg;
  WEFT__ASAN_FINISH(NULL);
  f->ops->entry(f);
  /* The fiber's local values die with it; destructors run on its own stack (they may park). */
  weft__locals_release(&f->tc);
  weft__carrier *c = f->home;
  c->after = WEFT__AFTER_EXIT;
  WEFT__ASAN_START(NULL, c->native_bottom, c->native_size);
  WEFT__TSAN_SWITCH(c->tsan_self);
  weft__ctx_switch(&f->sp, c->sched_sp, NULL);
  weft__die("an ended fiber was resumed");
}

/* The monitor flagged this slice as pinning the carrier: say so, with how long and where. */
static void report_pinned(weft__carrier *c, weft__fiber *f) {
  atomic_thread_fence(memory_order_acquire); /* pairs with the monitor's release: its pin_seen */
  atomic_store_explicit(&c->pinned, false, memory_order_relaxed);
  if (!rt.settings.trace_pinned) return;
  char where[160];
  weft__describe_site(f->spawn_site, where, sizeof where);
  int64_t since = atomic_load_explicit(&c->pin_seen, memory_order_relaxed);
  weft__warn("fiber %llu held carrier %u for at least %lld ms without parking (blocking call or long "
             "computation; started at %s)",
             (unsigned long long)f->id, c->id, (long long)((weft__mono_ns() - since) / 1000000), where);
}

/* From the scheduler into fiber f, until it switches back. */
static void run_fiber(weft__carrier *c, weft__fiber *f) {
  /* A started fiber runs only on its home carrier (fibers never migrate), and never twice at once. */
  WEFT__ASSERT(f->home == c && (f->flags & WEFT__FIBER_STARTED));
  WEFT__ASSERT(atomic_load_explicit(&f->state, memory_order_relaxed) != WEFT__FS_RUNNING);
  atomic_store_explicit(&f->state, WEFT__FS_RUNNING, memory_order_relaxed);
  c->current = f;
  atomic_store_explicit(&c->slice_seq, ++c->slices, memory_order_relaxed);
  if (WEFT__UNLIKELY(atomic_load_explicit(&weft__monitor_parked, memory_order_relaxed))) weft__monitor_kick();
  WEFT__ASAN_START(&c->asan_fake, f->stack_base, f->stack_size);
  WEFT__TSAN_SWITCH(f->san_tsan_fiber);
  weft__ctx_switch(&c->sched_sp, f->sp, f);
  WEFT__ASAN_FINISH(c->asan_fake);
  atomic_store_explicit(&c->slice_seq, ++c->slices, memory_order_relaxed);
  if (WEFT__UNLIKELY(atomic_load_explicit(&c->pinned, memory_order_relaxed))) report_pinned(c, f);
  c->current = NULL;
}

/*
 * From the running fiber back to its carrier's scheduler. errno is saved and
 * restored around the switch, so each fiber has its own, as each thread
 * does: other fibers of the carrier run in between and set it.
 */
/*
 * errno is restored through a function the compiler cannot see into: glibc's
 * __errno_location is `const`, so an address computed before the switch
 * could be reused after it, and a fiber that moved (WEFT_MIGRATE) would then
 * write the errno of the thread it left.
 */
static WEFT__NOINLINE void errno_put(int v) { errno = v; }

static void to_scheduler(weft__carrier *c, weft__fiber *f, int after) {
  int saved_errno = errno;
  c->after = after;
  WEFT__ASAN_START(&f->san_fake_stack, c->native_bottom, c->native_size);
  WEFT__TSAN_SWITCH(c->tsan_self);
  weft__ctx_switch(&f->sp, c->sched_sp, NULL);
  WEFT__ASAN_FINISH(f->san_fake_stack);
  errno_put(saved_errno);
}

void weft__fiber_park(void) {
  weft__carrier *c = tls_carrier;
  to_scheduler(c, c->current, WEFT__AFTER_PARK);
}

void weft__fiber_park_wait(weft__fiber *f, unsigned kind, const void *obj, int64_t deadline_ns,
                           weft__waiter *w) {
  weft__fiber_waits(f, kind, obj, deadline_ns);
  if (w) timer_arm(f, deadline_ns, w);
  weft__fiber_park();
  if (w) timer_disarm(f);
  weft__fiber_waits(f, WEFT__WAIT_NONE, NULL, 0);
}

weft__tctx *weft__fiber_tctx_self(void) {
  weft__carrier *c = tls_carrier;
  return c && c->current ? &c->current->tc : NULL;
}

/* What the layers above gave at start (weft__fibers_start): read by the carriers, set before they start. */
static weft__fiber_hooks hooks;

weft__fiber *weft__parkable_self(void) {
  weft__fiber *f = weft__fiber_self();
  if (f && hooks.in_region && WEFT__UNLIKELY(hooks.in_region())) return NULL;
  return f;
}

void weft__fiber_yield(void) {
  weft__carrier *c = tls_carrier;
  to_scheduler(c, c->current, WEFT__AFTER_YIELD);
}

static void ready_on_home(weft__fiber *f, bool first) {
  weft__carrier *home = f->home;
  WEFT__ASSERT(home != NULL); /* only a started fiber parks (flags are its carrier's: not read here) */
  atomic_store_explicit(&f->state, WEFT__FS_RUNNABLE, memory_order_relaxed);
  if (home == tls_carrier) {
    /* The owner itself: no lock. */
    if (first)
      weft__fq_push_front(&home->ready, f);
    else
      weft__fq_push(&home->ready, f);
    return;
  }
  weft__lock_acquire(&home->inbox_lock);
  weft__fq_push(first ? &home->inbox_first : &home->inbox, f);
  atomic_store_explicit(&home->inbox_len, home->inbox.len + home->inbox_first.len, memory_order_relaxed);
  /*
   * Wake the carrier before letting go of the lock: once it is released the
   * carrier may run f, f may end, and weft_shutdown may free the carrier and
   * close its eventfd, which a late wake would then write to.
   */
  weft__poller_wake(&home->poller);
  weft__lock_release(&home->inbox_lock);
}

void weft__fiber_ready(weft__fiber *f) { ready_on_home(f, false); }

/*
 * First in line: a waiter handed a mutex (sync/mutex.c) holds it from the
 * hand-off on, so every other locker waits until it has run. At the back
 * of a busy carrier's ready queue, that is a queue's worth of fibers later,
 * each of which may come to the mutex, find it held, and park behind it: a
 * convoy that feeds itself (seen as a bistable slowdown of weft-bench http's
 * client, whose connection pool is one weft_mutex: docs/benchmarks.md).
 */
void weft__fiber_ready_first(weft__fiber *f) { ready_on_home(f, true); }

/* A fiber id: unique for the runtime's life, from a block of the carrier's own (one atomic per block). */
#define ID_BLOCK 1024
static uint64_t next_fiber_id(weft__carrier *c) {
  if (WEFT__UNLIKELY(c->id_next == c->id_end)) {
    c->id_next = atomic_fetch_add_explicit(&rt.next_id, ID_BLOCK, memory_order_relaxed) + 1;
    c->id_end = c->id_next + ID_BLOCK;
  }
  return c->id_next++;
}

/* On c's list for dumps; only c writes it, a dump takes the lock to walk it. */
static void register_on(weft__carrier *c, weft__fiber *f) {
  weft__lock_acquire(&c->reg_lock);
  f->reg_prev = NULL;
  f->reg_next = c->reg_head;
  if (c->reg_head) c->reg_head->reg_prev = f;
  c->reg_head = f;
  weft__lock_release(&c->reg_lock);
}

/* Make f, which has a stack of `usable` bytes for frames from base, a fresh context homed on c. */
static void start_on(weft__carrier *c, weft__fiber *f, void *base, size_t usable, void *cookie) {
  f->stack_base = base;
  f->stack_size = usable;
  f->stack_cookie = cookie;
  f->home = c;
  f->id = next_fiber_id(c);
  f->flags |= WEFT__FIBER_STARTED;
  f->san_tsan_fiber = WEFT__TSAN_CREATE();
  f->sp = weft__ctx_make(base, usable, fiber_main);
  c->homed++;
  weft__count(&c->cnt.started, 1);
  atomic_store_explicit(&f->state, WEFT__FS_RUNNABLE, memory_order_relaxed);
  register_on(c, f);
}

static void unregister(weft__carrier *c, weft__fiber *f) {
  weft__lock_acquire(&c->reg_lock);
  if (f->reg_prev)
    f->reg_prev->reg_next = f->reg_next;
  else
    c->reg_head = f->reg_next;
  if (f->reg_next) f->reg_next->reg_prev = f->reg_prev;
  weft__lock_release(&c->reg_lock);
}

/* Give f a stack and a context; false (after nostack) when there is no stack to be had. */
static bool start_fiber(weft__carrier *c, weft__fiber *f) {
  void *base, *cookie;
  size_t size;
  if (weft__stack_alloc(&base, &size, &cookie) != 0) {
    f->ops->nostack(f);
    live_dec(1);
    return false;
  }
  start_on(c, f, base, size, cookie);
  return true;
}

/* Bytes at the top of a clone's stack that hold its record (a whole number of cache lines). */
#define CLONE_RECORD ((sizeof(weft__fiber) + WEFT__CACHELINE - 1) / WEFT__CACHELINE * WEFT__CACHELINE)

/*
 * A fiber of source s, ready to run on c: its record at the top of a fresh
 * stack, its first frame just below, on the same page. NULL when no stack
 * can be had. The caller has reserved its place in s.
 */
static weft__fiber *clone_make(weft__carrier *c, weft__source *s) {
  void *base, *cookie;
  size_t size;
  if (weft__stack_alloc(&base, &size, &cookie) != 0) return NULL;
  weft__fiber *f = (weft__fiber *)(void *)((char *)base + size - CLONE_RECORD);
  weft__fiber_prepare(f, s->fiber_ops, s->arg);
  f->source = s;
  f->spawn_site = s->spawn_site;
  f->flags = WEFT__FIBER_CLONE;
  start_on(c, f, base, size - CLONE_RECORD, cookie);
  return f;
}

/* n fibers are done (or never were): the last one lets a waiting shutdown go on. */
static void live_dec(size_t n) {
  /* seq_cst: pairs with weft__fibers_shutdown's store of quiesce_waiting. */
  if (atomic_fetch_sub(&rt.live, n) == n && atomic_load(&rt.quiesce_waiting)) {
    pthread_mutex_lock(&rt.mu);
    pthread_cond_broadcast(&rt.quiesce_cv);
    pthread_mutex_unlock(&rt.mu);
  }
}

void weft__source_finished(weft__fiber *f) { f->flags |= WEFT__FIBER_SOURCE_DONE; }

/* Put f where it runs before anything queued: the runnext slot (an earlier occupant moves to ready). */
static void set_runnext(weft__carrier *c, weft__fiber *f) {
  if (c->runnext) weft__fq_push(&c->ready, c->runnext);
  c->runnext = f;
}

static weft__fiber *admit_spawned(weft__carrier *c);

/*
 * A fiber of source s parked on c: make the next one now, so that the source's work keeps flowing. But a
 * fiber already spawned and not yet started (admit_spawned) goes first, in the new one's place: work that
 * was asked for before the source's next element is admitted before it. (A map of clients beside a server
 * whose acceptor spawns a fiber per connection: otherwise every client parks into a new client until the map
 * is exhausted, and the accepted connections start only when the carrier runs dry or every 61st pick.) The
 * source is not lost: this parked fiber ends or goes on as in any park that made no successor (pmap), and
 * the next park, or an idle carrier, makes the source's fiber.
 */
static void source_next(weft__carrier *c, weft__fiber *parked, weft__source *s) {
  parked->flags |= WEFT__FIBER_BLOCKED;
  weft__fiber *spawned = admit_spawned(c);
  if (spawned) {
    set_runnext(c, spawned);
    return;
  }
  if (!s->ops->reserve(s, false)) return;
  weft__fiber *g = clone_make(c, s);
  if (g) {
    parked->flags |= WEFT__FIBER_SUCCEEDED;
    set_runnext(c, g);
  } else if (s->ops->unreserve(s)) {
    live_dec(1);
  }
}

/* After f switched back to the scheduler: what it asked for. */
static void after_switch(weft__carrier *c, weft__fiber *f) {
  switch (c->after) {
  case WEFT__AFTER_YIELD:
    /* Behind everything runnable, new work included (Go puts it on the global queue). */
    weft__count(&c->cnt.yields, 1);
    atomic_store_explicit(&f->state, WEFT__FS_RUNNABLE, memory_order_relaxed);
    weft__fq_push(&c->yielded, f);
    /* A fiber of a source that gives up the carrier lets the source's next element start, as a park does. */
    if (f->source) source_next(c, f, f->source);
    break;
  case WEFT__AFTER_EXIT: {
    WEFT__TSAN_DESTROY(f->san_tsan_fiber);
    unregister(c, f);
    weft__count(&c->cnt.finished, 1);
    c->homed--;
    void *cookie = f->stack_cookie;
    if (f->flags & WEFT__FIBER_CLONE) {
      /* The record is on the stack: done first, then the stack; the source's count last. */
      f->ops->done(f);
      bool last = f->flags & WEFT__FIBER_SOURCE_DONE;
      weft__stack_free(cookie);
      if (last) live_dec(1);
    } else {
      weft__stack_free(cookie);
      f->ops->done(f); /* may free f */
      live_dec(1);
    }
    break;
  }
  default: /* parked: whoever resolves its waiter readies it */
    weft__count(&c->cnt.parks, 1);
    if (f->source) source_next(c, f, f->source);
    break;
  }
}

/* --- finding work ---------------------------------------------------------------- */

static void drain_inbox(weft__carrier *c) {
  if (atomic_load_explicit(&c->inbox_len, memory_order_relaxed) == 0) return;
  weft__lock_acquire(&c->inbox_lock);
  weft__fq_splice(&c->ready, &c->inbox);
  if (c->inbox_first.head) {
    /* Before what is ready, in the order they came. */
    weft__fq_splice(&c->inbox_first, &c->ready);
    weft__fq_splice(&c->ready, &c->inbox_first);
  }
  atomic_store_explicit(&c->inbox_len, 0, memory_order_relaxed);
  weft__lock_release(&c->inbox_lock);
}

/* One of v's unstarted fibers, the oldest, if it has at least `min` (taken under its lock); else NULL. */
static weft__fiber *pop_spawn_of(weft__carrier *v, size_t min) {
  if (atomic_load_explicit(&v->spawn_len, memory_order_relaxed) < min) return NULL;
  weft__lock_acquire(&v->spawn_lock);
  weft__fiber *f = v->spawn.len >= min ? weft__fq_pop(&v->spawn) : NULL;
  atomic_store_explicit(&v->spawn_len, v->spawn.len, memory_order_relaxed);
  weft__lock_release(&v->spawn_lock);
  return f;
}

static weft__fiber *pop_spawn(weft__carrier *c) { return pop_spawn_of(c, 1); }

/*
 * A pseudo-random index below n (n >= 1) from the carrier's LCG: for picking victims, nothing more. The
 * high bits: an LCG's low bits repeat with short periods (the lowest alternates).
 */
static unsigned carrier_pick(weft__carrier *c, unsigned n) {
  c->rand = c->rand * 6364136223846793005ull + 1442695040888963407ull;
  return (unsigned)(c->rand >> 33) % n;
}

/* Move a batch from the global queue to c's spawn queue; return one to run. */
static weft__fiber *take_global(weft__carrier *c) {
  if (atomic_load_explicit(&rt.gq_len, memory_order_relaxed) == 0) return NULL;
  weft__lock_acquire(&rt.gq_lock);
  size_t n = atomic_load_explicit(&rt.ncarriers, memory_order_relaxed);
  size_t k = rt.gq.len / (n ? n : 1) + 1;
  if (k > 256) k = 256;
  weft__fq batch = fq_take(&rt.gq, k);
  atomic_store_explicit(&rt.gq_len, rt.gq.len, memory_order_relaxed);
  weft__lock_release(&rt.gq_lock);
  weft__fiber *f = weft__fq_pop(&batch);
  if (batch.len) {
    weft__lock_acquire(&c->spawn_lock);
    weft__fq_splice(&c->spawn, &batch);
    atomic_store_explicit(&c->spawn_len, c->spawn.len, memory_order_relaxed);
    weft__lock_release(&c->spawn_lock);
  }
  return f;
}

/*
 * An unstarted fiber for a parked source fiber's place (source_next): c's own first, else one from another
 * carrier's spawn queue that holds at least two (the lone one is left, as in steal below). One other
 * carrier, chosen at random, is looked at: a park pays O(1). Taking from the others too spreads the fibers
 * that one carrier spawns (an acceptor's connections) over the carriers whose source fibers park, in
 * proportion to their parks; a started fiber stays where it started, so taking only c's own would leave
 * every connection on the acceptor's carrier (echo 1000 x 100: 9% fewer messages a second).
 */
static weft__fiber *admit_spawned(weft__carrier *c) {
  weft__fiber *f = pop_spawn(c);
  unsigned n = atomic_load_explicit(&rt.ncarriers, memory_order_acquire);
  if (f || n < 2) return f;
  weft__carrier *v = rt.carriers[carrier_pick(c, n - 1)];
  if (v == c) v = rt.carriers[n - 1]; /* one of the n - 1 others, each as likely */
  if ((f = pop_spawn_of(v, 2))) weft__count(&c->cnt.steals, 1);
  return f;
}

/* Take half of another carrier's unstarted fibers. */
/*
 * Take half of another carrier's unstarted fibers. A victim's only unstarted
 * fiber is left alone unless `lone` is set: it is most likely the future
 * that the fiber which started it is about to wait for, which its own
 * carrier then runs at once, with no cache line crossing (Go's runqgrab
 * waits a few microseconds before it steals a running P's runnext, for the
 * same reason). The spin below comes back for it after SPIN_LONE_NS, so a
 * fiber that starts a future and goes on computing still gets it started
 * elsewhere. (A carrier never sleeps with fibers on its own spawn queue.)
 */
static weft__fiber *steal(weft__carrier *c, bool lone) {
  unsigned n = atomic_load_explicit(&rt.ncarriers, memory_order_acquire);
  unsigned start = carrier_pick(c, n ? n : 1);
  for (unsigned k = 0; k < n; k++) {
    weft__carrier *v = rt.carriers[(start + k) % n];
    size_t len = v == c ? 0 : atomic_load_explicit(&v->spawn_len, memory_order_relaxed);
    if (len == 0) continue;
    if (len == 1 && !lone) continue;
    weft__lock_acquire(&v->spawn_lock);
    weft__fq got = fq_take(&v->spawn, (v->spawn.len + 1) / 2);
    atomic_store_explicit(&v->spawn_len, v->spawn.len, memory_order_relaxed);
    weft__lock_release(&v->spawn_lock);
    weft__fiber *f = weft__fq_pop(&got);
    if (!f) continue;
    weft__count(&c->cnt.steals, 1 + got.len);
    if (got.len) {
      weft__lock_acquire(&c->spawn_lock);
      weft__fq_splice(&c->spawn, &got);
      atomic_store_explicit(&c->spawn_len, c->spawn.len, memory_order_relaxed);
      weft__lock_release(&c->spawn_lock);
    }
    return f;
  }
  return NULL;
}

/*
 * Work sharing of woken fibers (WEFT_MIGRATE; the essay's "Carriers that
 * share work"). A carrier that is about to run one of several woken fibers
 * while another carrier sleeps or spins offers half of the rest on its share
 * queue and wakes one idle carrier. What it offers has no state of the
 * carrier left: no armed timer (disarmed here: the fiber was woken, its
 * deadline no longer matters), not on the dump list, not counted as homed,
 * and not parked in a wait that keeps carrier state (weft__fiber_stay).
 * Whoever takes a fiber off a share queue, a thief or the owner itself,
 * makes it its own: home, dump list, count. A busy runtime keeps every
 * fiber where it woke: the offer needs an idle carrier.
 */
#define SHARE_MAX 64 /* fibers offered at a time */

/* Is a carrier other than c idle (spinning for work, or asleep in its poller)? */
static bool idle_carrier(weft__carrier *c) {
  if (atomic_load_explicit(&rt.nspinning, memory_order_relaxed) > 0) return true;
  unsigned n = atomic_load_explicit(&rt.ncarriers, memory_order_acquire);
  for (unsigned i = 0; i < n; i++) {
    weft__carrier *v = rt.carriers[i];
    if (v != c && atomic_load_explicit(&v->poller.sleeping, memory_order_relaxed)) return true;
  }
  return false;
}

static bool movable(const weft__fiber *f) { return (f->flags & WEFT__FIBER_STARTED) && f->stay == 0; }

static void maybe_share(weft__carrier *c) {
  if (!rt.settings.migrate || c->ready.len == 0 || !idle_carrier(c)) return;
  size_t k = (c->ready.len + 1) / 2;
  if (k > SHARE_MAX) k = SHARE_MAX;
  /*
   * The newest k: the fibers at the head have waited longest and run here
   * next; what goes may wait for the thief to wake.
   */
  size_t keep_n = c->ready.len - k;
  weft__fq rest = c->ready;
  if (keep_n == 0) {
    c->ready = (weft__fq){0};
  } else {
    weft__fiber *p = c->ready.head;
    for (size_t i = 1; i < keep_n; i++) p = p->next;
    rest.head = p->next;
    rest.len = k;
    p->next = NULL;
    c->ready.tail = p;
    c->ready.len = keep_n;
  }
  weft__fq offer = {0};
  for (weft__fiber *f; (f = weft__fq_pop(&rest));) {
    if (!movable(f)) {
      weft__fq_push(&c->ready, f);
      continue;
    }
    timer_disarm(f);
    unregister(c, f);
    c->homed--;
    weft__fq_push(&offer, f);
  }
  if (!offer.len) return;
  weft__lock_acquire(&c->share_lock);
  weft__fq_splice(&c->share, &offer);
  atomic_store_explicit(&c->share_len, c->share.len, memory_order_relaxed);
  weft__lock_release(&c->share_lock);
  /* As for a spawn: a spinning carrier sees share_len, else one that sleeps is woken. */
  wake_idle(c);
}

/* Make a fiber taken off a share queue c's own. */
static void adopt_shared(weft__carrier *c, weft__fiber *f, bool moved) {
  f->home = c;
  c->homed++;
  register_on(c, f);
  if (moved) weft__count(&c->cnt.migrations, 1);
}

/* Take half of v's share queue (all of it when v == c) into c's ready queue; one to run, or NULL. */
static weft__fiber *take_shared(weft__carrier *c, weft__carrier *v) {
  if (atomic_load_explicit(&v->share_len, memory_order_relaxed) == 0) return NULL;
  weft__lock_acquire(&v->share_lock);
  weft__fq got = fq_take(&v->share, v == c ? v->share.len : (v->share.len + 1) / 2);
  atomic_store_explicit(&v->share_len, v->share.len, memory_order_relaxed);
  weft__lock_release(&v->share_lock);
  weft__fiber *first = NULL;
  for (weft__fiber *f; (f = weft__fq_pop(&got));) {
    adopt_shared(c, f, v != c);
    if (!first)
      first = f;
    else
      weft__fq_push(&c->ready, f);
  }
  return first;
}

static weft__fiber *steal_shared(weft__carrier *c) {
  if (!rt.settings.migrate) return NULL;
  unsigned n = atomic_load_explicit(&rt.ncarriers, memory_order_acquire);
  unsigned start = carrier_pick(c, n ? n : 1);
  for (unsigned k = 0; k < n; k++) {
    weft__carrier *v = rt.carriers[(start + k) % n];
    if (v == c) continue;
    weft__fiber *f = take_shared(c, v);
    if (f) return f;
  }
  return NULL;
}

/*
 * Before a carrier that found no work sleeps, it spins for SPIN_NS, longer
 * while it sees work come and go (Go's spinning M). A waker skips the
 * eventfd write while a carrier spins (wake_idle), so a program that starts
 * a fiber and waits for it, again and again, pays no system call and no
 * thread wake-up per fiber; one that goes idle pays SPIN_NS of CPU once. A
 * carrier with descriptors to watch does not spin: readiness reaches it
 * only through epoll.
 */
#define SPIN_NS      (20 * 1000)
#define SPIN_LONE_NS (3 * 1000) /* how long a victim's only fiber is left to its own carrier (steal) */

/*
 * Work the spinning carrier could take. A source counts only when one opens
 * after the spin began (`opens`, taken then): the carrier has just asked
 * every open one, and one that refused (at its bound, its indices kept for
 * a carrier on its way) would otherwise end the spin at once, again and
 * again, and keep the carrier at 100% CPU while the fibers it bounds sleep.
 * A source that wants fibers again (a place given up) gets them from the
 * carrier whose fiber gave it up, which is awake.
 */
static bool spin_sees_work(weft__carrier *c, unsigned opens) {
  if (atomic_load_explicit(&c->inbox_len, memory_order_relaxed) ||
      atomic_load_explicit(&c->spawn_len, memory_order_relaxed) ||
      atomic_load_explicit(&rt.gq_len, memory_order_relaxed) ||
      atomic_load_explicit(&rt.src_opens, memory_order_relaxed) != opens)
    return true;
  unsigned n = atomic_load_explicit(&rt.ncarriers, memory_order_acquire);
  for (unsigned i = 0; i < n; i++) {
    if (rt.carriers[i] == c) continue;
    if (atomic_load_explicit(&rt.carriers[i]->spawn_len, memory_order_relaxed) > 1 ||
        atomic_load_explicit(&rt.carriers[i]->share_len, memory_order_relaxed))
      return true;
  }
  return false;
}

/* Is there a victim with only one unstarted fiber? (steal leaves those alone at first.) */
static bool spin_sees_lone(weft__carrier *c) {
  unsigned n = atomic_load_explicit(&rt.ncarriers, memory_order_acquire);
  for (unsigned i = 0; i < n; i++)
    if (rt.carriers[i] != c && atomic_load_explicit(&rt.carriers[i]->spawn_len, memory_order_relaxed) == 1)
      return true;
  return false;
}

/* Spin for work; returns a stolen lone fiber, or NULL (the caller looks again, or sleeps). */
static weft__fiber *spin(weft__carrier *c, int64_t next_timer) {
  if (weft__poller_busy(&c->poller) || weft__uring_busy(&c->poller)) return NULL;
  int64_t now = weft__mono_ns(), until = now + SPIN_NS, lone_since = 0;
  unsigned opens = atomic_load_explicit(&rt.src_opens, memory_order_relaxed);
  if (next_timer >= 0 && next_timer < until) until = next_timer;
  while (now < until) {
    for (int i = 0; i < 32; i++) weft__cpu_relax();
    if (spin_sees_work(c, opens)) {
      c->spin_found = true;
      return NULL;
    }
    now = weft__mono_ns();
    if (spin_sees_lone(c)) {
      if (!lone_since) lone_since = now;
      if (now - lone_since >= SPIN_LONE_NS) {
        weft__fiber *f = steal(c, true);
        if (f) return f;
        lone_since = 0;
      }
      until = now + SPIN_NS; /* activity: keep spinning */
    } else {
      lone_since = 0;
    }
    if (atomic_load(&rt.exit)) return NULL;
  }
  return NULL;
}

/* Unstarted fibers in the global queue or on another carrier's spawn queue? */
static bool other_work_hint(weft__carrier *c) {
  if (atomic_load_explicit(&rt.gq_len, memory_order_relaxed)) return true;
  unsigned n = atomic_load_explicit(&rt.ncarriers, memory_order_acquire);
  for (unsigned i = 0; i < n; i++) {
    weft__carrier *v = rt.carriers[i];
    if (v != c && atomic_load_explicit(&v->spawn_len, memory_order_relaxed)) return true;
  }
  return false;
}

/* Is there any work that c could take, anywhere? (Before it sleeps.) */
static bool work_visible(weft__carrier *c) {
  if (atomic_load(&c->inbox_len) || atomic_load(&c->spawn_len) || atomic_load(&rt.gq_len)) return true;
  unsigned n = atomic_load_explicit(&rt.ncarriers, memory_order_acquire);
  for (unsigned i = 0; i < n; i++)
    if (atomic_load(&rt.carriers[i]->spawn_len) || atomic_load(&rt.carriers[i]->share_len)) return true;
  /* A source counts only if it would give this carrier a fiber: one at its limit must not keep it awake. */
  return weft__sources_want();
}

/* The next fiber to run, sleeping when there is none; NULL when the runtime stops. */
/* --- the end of the process without weft_shutdown (sys.h) ------------------------- */

/*
 * The carriers stop between fibers and stay still until the process is gone:
 * the fibers that run on, park, wake and start call into the OpenMP runtime
 * (weft__parkable_self asks it whether they are in a region of their own),
 * whose teardown follows weft's destructor and fails when a root thread
 * calls it meanwhile. A running fiber finishes its slice first; one that
 * never switches (a blocked system call, a loop) holds its carrier past the
 * deadline, and the process ends anyway.
 */
static void carrier_be_still(weft__carrier *c) {
  atomic_store_explicit(&c->still, true, memory_order_release);
  for (;;) pause();
}

static void exit_begin(void) {
  if (atomic_load_explicit(&rt.state, memory_order_acquire) != RT_RUNNING) return;
  atomic_store(&rt.ending, true); /* seq_cst: pairs with the carriers' sleep announcement */
  unsigned n = atomic_load_explicit(&rt.ncarriers, memory_order_acquire);
  for (unsigned i = 0; i < n; i++) weft__poller_wake(&rt.carriers[i]->poller);
}

static void exit_wait(int64_t deadline) {
  if (!atomic_load(&rt.ending)) return;
  for (;;) {
    bool all = true;
    unsigned n = atomic_load_explicit(&rt.ncarriers, memory_order_acquire);
    for (unsigned i = 0; i < n && all; i++) {
      weft__carrier *c = rt.carriers[i];
      /* The carrier that runs this (exit from a fiber) cannot be still: it is the one exiting. */
      all = c == tls_carrier || atomic_load_explicit(&c->status, memory_order_acquire) != WEFT__C_RUNNING ||
            atomic_load_explicit(&c->still, memory_order_acquire);
    }
    if (all || weft__mono_ns() >= deadline) return;
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
  }
}

static void atfork_child(void);
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;
/* Once, before the first carrier starts: what the process's end does to the runtime. */
static void exit_register(void) { weft__on_exit(exit_begin, exit_wait); }
/*
 * Once, before rt.mu is first taken: what a fork does to the runtime. Not
 * with the exit hooks: with fibers switched off (WEFT_FIBERS=0) no carrier
 * ever starts, yet every blocking map still takes rt.mu in
 * weft__fibers_start to find that out, and a child forked while another
 * thread held it inherited it held, with no hook to set it free: its first
 * blocking map waited for ever (signals/fork_busy under WEFT_FIBERS=0, about
 * one run in five of twenty forks each).
 */
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static void fork_register(void) { weft__on_fork(NULL, NULL, atfork_child); }

static weft__fiber *find_runnable(weft__carrier *c) {
  for (;;) {
    if (WEFT__UNLIKELY(atomic_load_explicit(&rt.ending, memory_order_relaxed))) carrier_be_still(c);
    c->tick++;
    /* A dump asked for this carrier's fibers (fiber/dump.c): only here, between fibers, are their stacks
     * still. */
    if (WEFT__UNLIKELY(atomic_load_explicit(&c->dump_req, memory_order_acquire) != NULL)) weft__dump_serve(c);
    int64_t next_timer = run_timers(c);
    drain_inbox(c);
    /* The ring's completions (a memory read when nothing is there) and a batch of requests. */
    weft__uring_reap(&c->poller);
    weft__uring_flush(&c->poller, false);
    weft__fiber *f;
    /*
     * Now and then, new work and yielded fibers first, so that neither can
     * be starved by fibers that keep waking each other.
     */
    if (c->tick % 61 == 0) {
      /* Descriptors and ring completions of a busy carrier: look without waiting. */
      if (weft__poller_busy(&c->poller)) {
        weft__count(&c->cnt.polls, 1);
        weft__poller_wait(&c->poller, 0);
      }
      weft__fq_splice(&c->ready, &c->yielded);
      /* A busy carrier looks at the sources too, for its own share of a map (not others'). */
      if ((f = pop_spawn(c)) || (f = take_global(c)) || (f = pull_source(c, false))) return f;
    }
    /*
     * Readied fibers first, then a source's next fiber (the one made when
     * its last one parked), then new work. Woken fibers going first keeps
     * their wake-ups on time while a map is still starting elements, and
     * lets them finish and give their warm stacks to the fibers made next:
     * measured on a million sleeping elements, letting the new fiber go
     * first (Go's runnext) instead left most wake-ups seconds late and every
     * element on a fresh stack (5.6 s against 3.5 s, twice the page faults).
     */
    if ((f = weft__fq_pop(&c->ready))) {
      maybe_share(c);
      return f;
    }
    /* What we offered and nobody took: ours again. */
    if ((f = take_shared(c, c))) return f;
    if ((f = c->runnext)) {
      c->runnext = NULL;
      return f;
    }
    if ((f = pop_spawn(c))) return f;

    /* Nothing of our own to run: submit what the fibers queued, and see what is done. */
    if (weft__uring_busy(&c->poller)) {
      weft__uring_flush(&c->poller, true);
      if (weft__uring_reap(&c->poller) > 0) continue;
    }

    /*
     * Only yielded fibers of our own: run them again at once unless some
     * other work is in sight (the loads are plain reads of counters that
     * their owners write), which goes first so that a yielding fiber cannot
     * starve it. Otherwise a yield would pay for the whole search below.
     */
    if (c->yielded.head && !other_work_hint(c)) {
      weft__fq_splice(&c->ready, &c->yielded);
      return weft__fq_pop(&c->ready);
    }

    atomic_fetch_add(&rt.nspinning, 1);
    f = pull_source(c, true);
    if (!f) f = take_global(c);
    if (!f) f = steal(c, false);
    if (!f) f = steal_shared(c);
    if (!f && !atomic_load(&rt.exit)) f = spin(c, next_timer);
    atomic_fetch_sub(&rt.nspinning, 1);
    if (f) {
      /* There may be more where this came from: let another idle carrier look. */
      if (atomic_load_explicit(&rt.gq_len, memory_order_relaxed) || c->spawn_len) wake_idle(c);
      return f;
    }
    if (c->spin_found) {
      c->spin_found = false;
      continue;
    }
    if (c->yielded.head) {
      weft__fq_splice(&c->ready, &c->yielded);
      continue;
    }
    /* Shutdown sets exit only once no fiber is left anywhere. */
    if (atomic_load(&rt.exit)) return NULL;

    /*
     * A compensation carrier with no fiber of its own left retires after
     * RETIRE_NS without work: the pinned carriers it stood in for have come
     * back, or the burst is over.
     */
    int64_t wake_at = next_timer;
    if (c->extra && c->homed == 0 && c->heap_len == 0 && !c->toverflow && !c->tfifo_head &&
        !weft__poller_busy(&c->poller)) {
      int64_t t = weft__mono_ns();
      if (!c->idle_since) c->idle_since = t;
      if (t - c->idle_since >= RETIRE_NS) return NULL;
      wake_at = c->idle_since + RETIRE_NS;
    }

    /*
     * Nothing to run. Once that has lasted TRIM_IDLE_NS, give stacks back, a
     * batch at a time, looking for work in between: sooner, and a burst that
     * follows a burst would map again what the first one just let go. How
     * many are due depends on how long the carrier has been idle (stack.c
     * keeps a burst's stacks for a while, then lets them go over seconds);
     * when none are due yet, it looks again TRIM_STEP_NS later.
     */
    int64_t now = weft__mono_ns();
    if (!c->idle_since) c->idle_since = now;
    if (weft__stack_excess()) {
      int64_t trim_at = c->idle_since + TRIM_IDLE_NS;
      if (trim_at < c->trim_after) trim_at = c->trim_after;
      if (now >= trim_at) {
        /* Our cache too, so that the trim can empty whole chunks (it refills from the pool later). */
        weft__stack_cache_flush();
        int64_t hold = (int64_t)rt.settings.stack_hold_ms * 1000000;
        if (weft__stack_trim(TRIM_BATCH, now - c->idle_since, hold) == 0) c->trim_after = now + TRIM_STEP_NS;
        continue;
      }
      if (wake_at < 0 || trim_at < wake_at) wake_at = trim_at;
    }

#ifdef WEFT_TESTING
    if (WEFT__UNLIKELY(weft__test_before_sleep != NULL)) weft__test_before_sleep(c->id);
#endif
    /* Announce the sleep, then look once more (the Dekker pair with wakers). */
    weft__poller_prepare_sleep(&c->poller);
    if (work_visible(c) || atomic_load(&rt.exit) || atomic_load(&rt.ending)) {
      weft__poller_cancel_sleep(&c->poller);
      continue;
    }
    weft__count(&c->cnt.polls, 1);
    weft__count(&c->cnt.sleeps, 1);
    weft__poller_wait(&c->poller, wake_at);
  }
}

static void sched_loop(weft__carrier *c) {
  weft__fiber *f;
  while ((f = find_runnable(c)) != NULL) {
    c->idle_since = 0;
    if (!(f->flags & WEFT__FIBER_STARTED) && !start_fiber(c, f)) continue;
    run_fiber(c, f);
    after_switch(c, f);
  }
}

/* --- carriers ---------------------------------------------------------------------- */

static void native_stack_bounds(weft__carrier *c) {
  pthread_attr_t a;
  if (pthread_getattr_np(pthread_self(), &a) == 0) {
    pthread_attr_getstack(&a, &c->native_bottom, &c->native_size);
    pthread_attr_destroy(&a);
  }
}

static void *carrier_main(void *arg) {
  weft__carrier *c = arg;
  tls_carrier = c;
  native_stack_bounds(c);
  c->tsan_self = WEFT__TSAN_CURRENT();
  /*
   * Ask the OpenMP runtime once from the carrier's own context, before any
   * fiber runs: LLVM's libomp registers a thread on its first call, and a
   * registration made on a fiber stack confuses the ThreadSanitizer support
   * (archer) when the thread exits.
   */
  if (hooks.in_region) (void)hooks.in_region();
  weft__overflow_thread_init(); /* without it an overflow still ends the process, just with no message */
  /* The carrier waits in epoll until its first file request (or, with WEFT_IO_URING=2, socket request)
   * sets up its io_uring on this thread (SINGLE_ISSUER): poll/uring.h. */
  sched_loop(c);
  /* Receives armed on the ring end here, on its own thread, with what they hold delivered. */
  weft__uring_quiesce(&c->poller);
  weft__overflow_thread_fini();
  tls_carrier = NULL;
  if (c->extra) atomic_fetch_sub(&rt.nextra, 1);
  atomic_fetch_sub(&rt.nrunning, 1);
  /* Release: whoever joins the thread sees the carrier's final state. */
  atomic_store_explicit(&c->status, WEFT__C_RETIRED, memory_order_release);
  return NULL;
}

static void carrier_free(weft__carrier *c) {
  weft__poller_fini(&c->poller);
  weft__free(c->heap);
  weft__free(c);
}

static int carrier_new(unsigned id, weft__carrier **out) {
  weft__carrier *c = weft__malloc_aligned(WEFT__CACHELINE, sizeof *c);
  if (!c) return -ENOMEM;
  memset(c, 0, sizeof *c);
  c->id = id;
  c->rand = 0x9E3779B97F4A7C15ull * (id + 1);
  weft__lock_init(&c->reg_lock, WEFT__LOCK_LEAF);
  weft__lock_init(&c->spawn_lock, WEFT__LOCK_LEAF);
  weft__lock_init(&c->inbox_lock, WEFT__LOCK_LEAF);
  weft__lock_init(&c->share_lock, WEFT__LOCK_LEAF);
  int rc = weft__poller_init(&c->poller, rt.settings.io_uring, rt.settings.write_behind);
  if (rc < 0) {
    weft__free(c);
    return rc;
  }
  *out = c;
  return 0;
}

int weft__carrier_start_locked(bool extra) {
  /* A slot whose thread has been joined is reused: carriers are never freed while running. */
  unsigned n = atomic_load(&rt.ncarriers), id = n;
  for (unsigned i = 0; i < n; i++)
    if (atomic_load(&rt.carriers[i]->status) == WEFT__C_JOINED) {
      id = i;
      break;
    }
  weft__carrier *c;
  if (id < n) {
    c = rt.carriers[id];
    /* Its poller belonged to the thread that left (its ring, if any, with it): a fresh one for the next. */
    weft__poller_fini(&c->poller);
    int rc = weft__poller_init(&c->poller, rt.settings.io_uring, rt.settings.write_behind);
    if (rc < 0) return rc; /* the slot stays joined, its poller closed: the next reuse tries again */
  } else {
    if (id >= rt.cap) return -EAGAIN;
    int rc = carrier_new(id, &c);
    if (rc < 0) return rc;
    rt.carriers[id] = c;
  }
  c->extra = extra;
  c->idle_since = 0;
  char name[32];
  snprintf(name, sizeof name, extra ? "weft-extra-%u" : "weft-carrier-%u", id);
  atomic_store(&c->status, WEFT__C_RUNNING);
  /* A regular carrier starts on its place (WEFT_PLACES); compensation carriers are never placed. */
  int cpu = !extra && rt.places.n ? (int)rt.places.cpu[id % rt.places.n] : -1;
  int rc = weft__thread_start_on(&c->thread, 0, cpu, name, carrier_main, c);
  if (rc == 1) {
    if (!atomic_exchange(&rt.warned_pin, true))
      weft__warn(
          "WEFT_PLACES: carrier %u could not be placed on CPU %d (not in the process's affinity mask); "
          "it runs unplaced",
          id, cpu);
    rc = 0;
  }
  if (rc < 0) {
    atomic_store(&c->status, WEFT__C_JOINED);
    if (id == n) {
      rt.carriers[id] = NULL;
      carrier_free(c);
    }
    return rc;
  }
  atomic_fetch_add(&rt.nrunning, 1);
  if (extra) {
    atomic_fetch_add(&rt.nextra, 1);
    atomic_fetch_add_explicit(&rt.extra_started, 1, memory_order_relaxed);
  }
  /* Release: stealers that see the new count see the carrier's fields. */
  if (id == n) atomic_store_explicit(&rt.ncarriers, n + 1, memory_order_release);
  return 0;
}

void weft__carriers_reap_locked(void) {
  unsigned n = atomic_load(&rt.ncarriers);
  for (unsigned i = 0; i < n; i++) {
    weft__carrier *c = rt.carriers[i];
    if (atomic_load_explicit(&c->status, memory_order_acquire) == WEFT__C_RETIRED) {
      pthread_join(c->thread, NULL);
      atomic_store(&c->status, WEFT__C_JOINED);
    }
  }
}

size_t weft__unstarted_count(void) {
  size_t u = atomic_load_explicit(&rt.gq_len, memory_order_relaxed) +
             atomic_load_explicit(&rt.nsources, memory_order_relaxed);
  unsigned n = atomic_load_explicit(&rt.ncarriers, memory_order_acquire);
  for (unsigned i = 0; i < n; i++)
    u += atomic_load_explicit(&rt.carriers[i]->spawn_len, memory_order_relaxed);
  return u;
}

/* With live == 0 and RT_STOPPING set: let the carriers go and release everything. */
static void stop_carriers_locked(void) {
  unsigned n = atomic_load(&rt.ncarriers);
  atomic_store(&rt.exit, true); /* seq_cst: pairs with the carriers' sleep announcement */
  for (unsigned i = 0; i < n; i++) weft__poller_wake(&rt.carriers[i]->poller);
  pthread_mutex_unlock(&rt.mu);
  for (unsigned i = 0; i < n; i++)
    if (atomic_load(&rt.carriers[i]->status) != WEFT__C_JOINED) pthread_join(rt.carriers[i]->thread, NULL);
  pthread_mutex_lock(&rt.mu);
  atomic_store(&rt.exit, false);
  for (unsigned i = 0; i < n; i++) {
    counters_add(&rt.gone, &rt.carriers[i]->cnt);
    carrier_free(rt.carriers[i]);
    rt.carriers[i] = NULL;
  }
  atomic_store(&rt.ncarriers, 0);
  atomic_store(&rt.nrunning, 0);
  atomic_store(&rt.nextra, 0);
  weft__free(rt.carriers);
  rt.carriers = NULL;
  rt.cap = 0;
  weft__stack_fini();
  atomic_store_explicit(&rt.state, RT_STOPPED, memory_order_release);
}

int weft__fibers_start(const weft__fiber_hooks *h) {
  if (WEFT__LIKELY(atomic_load_explicit(&rt.state, memory_order_acquire) == RT_RUNNING)) return 0;
  pthread_once(&fork_once, fork_register);
  pthread_mutex_lock(&rt.mu);
  int rc = 0;
  int st = atomic_load(&rt.state);
  if (st == RT_RUNNING) goto out;
  if (st == RT_STOPPING) {
    rc = -ESHUTDOWN;
    goto out;
  }
  weft__settings s;
  weft__settings_get(&s);
  if (!s.fibers) {
    rc = -ENOSYS; /* switched off: the caller falls back, quietly */
    goto out;
  }
  pthread_once(&exit_once, exit_register);
  hooks = *h; /* no carrier runs now (the runtime is stopped) */
  rc = weft__stack_init(s.stack_size);
  if (rc < 0) goto fail;
  weft__overflow_install();
  rt.cap = s.max_carriers;
  rt.carriers = weft__calloc(rt.cap, sizeof *rt.carriers);
  if (!rt.carriers) {
    rc = -ENOMEM;
    weft__stack_fini();
    goto fail;
  }
  rt.settings = s;
  static bool warned_migrate; /* once per process: under rt.mu */
  if (s.migrate && !weft__frame_may_migrate) {
    if (!warned_migrate)
      weft__warn("WEFT_MIGRATE=1 is not supported on this architecture yet: fibers stay put");
    warned_migrate = true;
    rt.settings.migrate = false;
  }
  static bool warned_places; /* once per process: under rt.mu */
  if (weft__places_parse(s.places, &rt.places) < 0 || weft__places_resolve(&rt.places) < 0) {
    if (!warned_places)
      weft__warn("WEFT_PLACES=%s: neither 'cores' nor a CPU list such as 0,2,4-7; carriers are not pinned",
                 s.places);
    warned_places = true;
    rt.places.n = 0;
    rt.places.cores = false;
  }
  atomic_store(&rt.warned_pin, false);
  /* Keep the gdb extension's table (debug.c) in a static link too: this is its one reference. */
  __asm__ volatile("" : : "r"(weft__debug_layout) : "memory");
  atomic_store_explicit(&weft__coarse_now, weft__mono_ns(),
                        memory_order_relaxed); /* before the monitor's first look */
  for (unsigned i = 0; i < s.carriers; i++) {
    rc = weft__carrier_start_locked(false);
    if (rc < 0) break;
  }
  unsigned started = atomic_load(&rt.ncarriers);
  if (started == 0) {
    weft__free(rt.carriers);
    rt.carriers = NULL;
    rt.cap = 0;
    weft__stack_fini();
    goto fail;
  }
  /*
   * RUNNING only once a carrier runs: a caller that saw it earlier took the
   * fast path above, and a start that then failed for want of threads left
   * the map source or fibers it had queued with no carrier to run them (a
   * map that never returned, or -ESHUTDOWN; found by the soak).
   */
  atomic_store(&rt.state, RT_RUNNING);
  /*
   * Without its monitor the runtime still works; it just cannot compensate
   * for pinned carriers. One warning line at most, once, for both shortfalls.
   */
  int mrc = weft__monitor_start(s.pin_threshold_ms, s.deadlock_ms);
  if ((started < s.carriers || mrc < 0) && !rt.warned_fewer) {
    rt.warned_fewer = true;
    if (started < s.carriers)
      weft__warn("started %u of %u carrier threads (%s); fibers run on fewer%s", started, s.carriers,
                 weft_strerror(rc), mrc < 0 ? ", without the pinning monitor" : "");
    else
      weft__warn("the pinning monitor could not start (%s); pinned carriers are not compensated",
                 weft_strerror(mrc));
  }
  rc = 0;
  goto out;
fail:
  if (!rt.warned_fallback) {
    rt.warned_fallback = true;
    weft__warn("the fiber runtime could not start (%s); blocking work runs on the CPU path",
               weft_strerror(rc));
  }
out:
  pthread_mutex_unlock(&rt.mu);
  return rc;
}

void weft__fibers_shutdown(void) {
  pthread_mutex_lock(&rt.mu);
  if (atomic_load(&rt.state) != RT_RUNNING) {
    pthread_mutex_unlock(&rt.mu);
    return;
  }
  /* Wait for every fiber to end; the last one signals (after_switch). */
  weft__store_sc(&rt.quiesce_waiting, true); /* before the look at live: pairs with live_dec */
  for (;;) {
    while (atomic_load(&rt.live) != 0) pthread_cond_wait(&rt.quiesce_cv, &rt.mu);
    /* Close the door, then look again: a spawn may have counted itself in between. */
    weft__store_sc(&rt.state, RT_STOPPING); /* before the look at live: pairs with spawn_chain */
    if (atomic_load(&rt.live) == 0) break;
    atomic_store(&rt.state, RT_RUNNING);
  }
  atomic_store(&rt.quiesce_waiting, false);
  weft__monitor_stop();
  weft__carriers_reap_locked();
  stop_carriers_locked();
  /* Owned descriptors registered with the pollers just closed register again with the next runtime's. */
  weft__owned_new_epoch();
  pthread_mutex_unlock(&rt.mu);
}

static void atfork_child(void) {
  /* The carriers did not come along; their memory is the parent's business. Their epolls are shared with
   * the parent: owned descriptors register with the child's own. */
  weft__owned_new_epoch();
  pthread_mutex_init(&rt.mu, NULL);
  pthread_cond_init(&rt.quiesce_cv, NULL);
  atomic_store(&rt.state, RT_STOPPED);
  atomic_store(&rt.ending, false);
  atomic_store(&rt.ncarriers, 0);
  atomic_store(&rt.nrunning, 0);
  atomic_store(&rt.nspinning, 0);
  atomic_store(&rt.live, 0);
  atomic_store(&rt.gq_len, 0);
  rt.gq.head = rt.gq.tail = NULL;
  rt.gq.len = 0;
  weft__lock_init(&rt.gq_lock, WEFT__LOCK_LEAF);
  weft__lock_init(&rt.src_lock, WEFT__LOCK_OBJECT);
  rt.sources.head = rt.sources.tail = NULL;
  atomic_store(&rt.nsources, 0);
  atomic_store(&rt.nextra, 0);
  atomic_store(&rt.quiesce_waiting, false);
  atomic_store(&weft__outside_calls, 0);
  rt.carriers = NULL;
  rt.cap = 0;
  tls_carrier = NULL;
}

bool weft__fiber_fault_info(const void *addr, uint64_t *fiber_id, size_t *stack_size) {
  weft__carrier *c = tls_carrier;
  if (!c || !c->current) return false;
  weft__fiber *f = c->current;
  if (!weft__stack_guard_contains(f->stack_cookie, addr)) return false;
  *fiber_id = f->id;
  *stack_size = f->stack_size + (f->flags & WEFT__FIBER_CLONE ? CLONE_RECORD : 0);
  return true;
}
