/*
 * This file contains futures.
 *
 * A future is claimed exactly once: whoever moves it from PENDING first wins,
 * be it the OpenMP task or fiber that was started for it (PENDING ->
 * RUNNING), a getter that runs a CPU future itself rather than wait idle
 * (PENDING -> RUNNING), or a cancel or free (PENDING -> CANCELLED). The loser
 * just lets go. So a task that the OpenMP runtime runs late, early or twice
 * over can never run fn twice, and nothing depends on when tasks are
 * deferred.
 *
 * Two references keep the memory alive: the caller's handle (dropped by
 * weft_future_free) and the runner's (dropped when the task or fiber that was
 * started for it is completely finished). A BLOCKING future embeds its fiber,
 * so one allocation serves each future.
 *
 *   PENDING --claim--> RUNNING --fn returns--> DONE
 *      |
 *      +--cancel/free--> CANCELLED
 *   (FAILED: a BLOCKING future that found no stack and no CPU worker either)
 */
#include "../base/internal.h"

#include <pthread.h>
#include <string.h>

#include "../cpu/cpu.h"
#include "../fiber/fiber.h"
#include "../local/local.h"
#include "../base/process.h"
#include "../base/sys.h"
#include "../sync/wait.h"
#include "lifecycle.h"

enum { F_PENDING, F_RUNNING, F_DONE, F_CANCELLED, F_FAILED };

struct weft_future {
  _Atomic uint32_t state; /* F_*: see the diagram above */
  atomic_uint refs;       /* the handle's and the runner's */
  atomic_bool on_cpu;     /* runs on the CPU path (a CPU future, or a BLOCKING one that fell back);
                             a hint for getters that may help: relaxed */
  bool cancel_requested;  /* weft_future_cancel on a running future: guarded by lock */
  weft_task_fn fn;
  void *arg;
  void *result;              /* fn's result: written before DONE is published */
  struct weft__scope *scope; /* the starter's scoped bindings, seen by fn: one reference, held until freed */
  weft__lock lock;           /* guards waiters, run_tc, cancel_requested */
  weft__waitlist waiters;    /* getters waiting for the result */
  weft__tctx *run_tc;        /* the running context's record, for cancellation; NULL when not running */
  weft__job job;             /* the CPU path's task */
  weft__fiber fiber;         /* the fiber path's fiber */
};

/* --- debug checks: a registry of live handles ------------------------------- */

#if defined(WEFT_TESTING) || !defined(NDEBUG)
#define WEFT_FUTURE_CHECKS 1
/* An open-addressing set of live handles: catches a double free or a stale handle. */
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static uintptr_t *reg_slots;
static size_t reg_cap, reg_len;

static size_t reg_hash(uintptr_t p, size_t cap) {
  return (size_t)((p >> 4) * 0x9E3779B97F4A7C15ull) & (cap - 1);
}

static bool reg_insert_locked(uintptr_t p);

static bool reg_grow_locked(void) {
  size_t cap = reg_cap ? reg_cap * 2 : 64;
  uintptr_t *old = reg_slots;
  size_t old_cap = reg_cap;
  uintptr_t *slots = weft__calloc(cap, sizeof *slots);
  if (!slots) return false;
  reg_slots = slots;
  reg_cap = cap;
  reg_len = 0;
  for (size_t i = 0; i < old_cap; i++)
    if (old[i] > 1) reg_insert_locked(old[i]);
  weft__free(old);
  return true;
}

/* Slots hold 0 (empty), 1 (deleted) or a handle. */
static bool reg_insert_locked(uintptr_t p) {
  if ((reg_len + 1) * 2 > reg_cap && !reg_grow_locked()) return false;
  size_t i = reg_hash(p, reg_cap);
  while (reg_slots[i] > 1) i = (i + 1) & (reg_cap - 1);
  reg_slots[i] = p;
  reg_len++;
  return true;
}

/*
 * fork() while another thread holds reg_mu (a carrier freeing a future, say)
 * would leave the child's copy held for ever: its first future would hang.
 * Held across fork instead, so that the child gets it free and the table
 * whole.
 */
static void reg_prepare(void) { pthread_mutex_lock(&reg_mu); }
static void reg_release(void) { pthread_mutex_unlock(&reg_mu); }
static pthread_once_t reg_once = PTHREAD_ONCE_INIT;
static void reg_once_init(void) { weft__on_fork(reg_prepare, reg_release, reg_release); }

static bool reg_add(const weft_future *f) {
  pthread_once(&reg_once, reg_once_init);
  pthread_mutex_lock(&reg_mu);
  bool ok = reg_insert_locked((uintptr_t)f);
  pthread_mutex_unlock(&reg_mu);
  return ok;
}

/* Remove (or just look up, when remove is false); false when f is not live. */
static bool reg_find(const weft_future *f, bool remove) {
  bool found = false;
  pthread_mutex_lock(&reg_mu);
  if (reg_cap) {
    size_t i = reg_hash((uintptr_t)f, reg_cap);
    for (size_t probes = 0; probes < reg_cap && reg_slots[i] != 0; probes++, i = (i + 1) & (reg_cap - 1)) {
      if (reg_slots[i] == (uintptr_t)f) {
        found = true;
        if (remove) {
          reg_slots[i] = 1;
          reg_len--;
        }
        break;
      }
    }
  }
  pthread_mutex_unlock(&reg_mu);
  return found;
}

#define CHECK_LIVE(f, who)                                                                                   \
  do {                                                                                                       \
    if (!reg_find((f), false))                                                                               \
      weft__die("%s: %p is not a live future (freed already?)", (who), (void *)(f));                         \
  } while (0)
#else
#define CHECK_LIVE(f, who) ((void)0)
#endif

/* --- running --------------------------------------------------------------- */

static void release(weft_future *f) {
  /* acq_rel: the last owner sees everything the other one did before. */
  if (atomic_fetch_sub_explicit(&f->refs, 1, memory_order_acq_rel) == 1) {
    weft__scope_unref(f->scope);
    weft__free(f);
  }
}

/* Wake every getter queued on f; called with f->lock held. */
static void wake_getters_locked(weft_future *f) {
  weft__waiter *w;
  while ((w = weft__waitlist_take(&f->waiters)) != NULL) weft__waiter_wake(w);
}

/*
 * Publish a final state and wake every getter. A getter checks the state
 * under the lock before it queues itself, so none is missed.
 */
static void finish(weft_future *f, uint32_t state) {
  weft__lock_acquire(&f->lock);
  f->run_tc = NULL;
  atomic_store_explicit(&f->state, state, memory_order_release); /* pairs with getters' acquire */
  wake_getters_locked(f);
  weft__lock_release(&f->lock);
}

/* Move a PENDING future to `to` (RUNNING to run it, CANCELLED to drop it); false if it was not PENDING. */
static bool claim_as(weft_future *f, uint32_t to) {
  uint32_t expect = F_PENDING;
  return atomic_compare_exchange_strong_explicit(&f->state, &expect, to, memory_order_acquire,
                                                 memory_order_relaxed);
}

static bool claim(weft_future *f) { return claim_as(f, F_RUNNING); }

/* A future that will never run: wake whoever waits for it. */
static void drop_pending(weft_future *f, uint32_t final_state) {
  if (claim_as(f, F_RUNNING)) finish(f, final_state);
}

/* Run fn in the context record tc (the fiber's, or a fresh one on a thread). */
static void run_claimed(weft_future *f, weft__tctx *tc) {
  tc->scope = f->scope;
  weft__lock_acquire(&f->lock);
  f->run_tc = tc;
  bool cancel = f->cancel_requested;
  weft__lock_release(&f->lock);
  if (cancel) atomic_store(&tc->cancelled, true);
  f->result = f->fn(f->arg);
  finish(f, F_DONE);
}

/* Run a claimed future on the calling thread. */
static void run_on_thread(weft_future *f) {
  weft__tctx tc;
  weft__tctx_init(&tc);
  weft__tctx *prev = weft__tctx_enter(&tc);
  run_claimed(f, &tc);
  weft__tctx_leave(prev);
}

static void job_run(weft__job *j) {
  weft_future *f = weft__container_of(j, weft_future, job);
  if (claim(f)) run_on_thread(f);
  release(f);
}

static void fiber_entry(weft__fiber *fb) {
  weft_future *f = fb->arg;
  if (claim(f)) run_claimed(f, &fb->tc);
}

static void fiber_done(weft__fiber *fb) { release(fb->arg); }

/* No stack for the fiber: run the future on the CPU path instead. */
static void fiber_nostack(weft__fiber *fb) {
  weft_future *f = fb->arg;
  atomic_store_explicit(&f->on_cpu, true, memory_order_relaxed);
  memset(&f->job, 0, sizeof f->job);
  f->job.run = job_run;
  /*
   * A thread already waiting for it waits no longer than it must: woken, it
   * finds the future on the CPU path and runs it itself if no worker has
   * started it (weft_future_get); the CPU workers may all be busy, with
   * blocking work that fell back as this did. Before the submit: once the
   * job is queued it may run and free the future.
   */
  weft__lock_acquire(&f->lock);
  wake_getters_locked(f);
  weft__lock_release(&f->lock);
  if (weft__cpu_submit(&f->job) == 0) return;
  drop_pending(f, F_FAILED);
  release(f);
}

static const weft__fiber_ops fiber_ops = {fiber_entry, fiber_done, fiber_nostack, "future"};

/* --- the public calls ------------------------------------------------------ */

int weft_future_start(weft_kind kind, weft_task_fn fn, void *arg, weft_future **out) {
  if (!fn || !out || (kind != WEFT_CPU && kind != WEFT_BLOCKING)) return -EINVAL;
  /*
   * Plain malloc, from glibc's per-thread cache: posix_memalign never comes
   * from it (a quarter of a spawn + join), and neither does calloc, which
   * the compiler makes of malloc + memset; so the fields are set one by one
   * and only the record of the path taken (fiber or job) is cleared.
   */
  weft_future *f = weft__malloc(sizeof *f);
  if (!f) return -ENOMEM;
  atomic_init(&f->state, F_PENDING);
  atomic_init(&f->refs, 2);
  atomic_init(&f->on_cpu, false);
  f->cancel_requested = false;
  f->result = NULL;
  f->waiters.head = f->waiters.tail = NULL;
  f->run_tc = NULL;
  f->fn = fn;
  f->arg = arg;
  f->scope = weft__tctx_self()->scope;
  weft__scope_ref(f->scope); /* the bindings outlive the scope while the future lives */
  weft__lock_init(&f->lock, WEFT__LOCK_OBJECT);
#ifdef WEFT_FUTURE_CHECKS
  if (!reg_add(f)) {
    weft__scope_unref(f->scope);
    weft__free(f);
    return -ENOMEM;
  }
#endif
  int rc;
  if (kind == WEFT_BLOCKING && weft__fibers_up() == 0) {
    weft__fiber_prepare(&f->fiber, &fiber_ops, f);
    f->fiber.spawn_site = __builtin_return_address(0);
    rc = weft__fiber_spawn(&f->fiber);
  } else {
    atomic_init(&f->on_cpu, true);
    memset(&f->job, 0, sizeof f->job);
    f->job.run = job_run;
    /*
     * A CPU future from a plain thread goes onto its own deque where weft's
     * team is open: a join may take it back. A BLOCKING one without fibers
     * goes to the team's shared queue, first in first out: such futures may
     * wait on one another (a server and its client), and must start in the
     * order they were made, which a deque (newest first for its owner, and
     * full at WEFT__DEQUE_CAP) does not keep.
     */
    rc = kind == WEFT_CPU && !weft__fiber_self() ? weft__cpu_spawn(&f->job) : weft__cpu_submit(&f->job);
  }
  if (rc < 0) {
#ifdef WEFT_FUTURE_CHECKS
    reg_find(f, true);
#endif
    weft__scope_unref(f->scope);
    weft__free(f);
    return rc;
  }
  *out = f;
  return 0;
}

static int result_of(weft_future *f, uint32_t s, void **result) {
  if (s == F_DONE) {
    if (result) *result = f->result;
    return 0;
  }
  return s == F_CANCELLED ? -ECANCELED : -ENOMEM;
}

static int wait_once(weft_future *f, int64_t deadline_ns, uint32_t *s_out);

static bool future_done(void *arg) {
  return atomic_load_explicit(&((weft_future *)arg)->state, memory_order_acquire) >= F_DONE;
}

int weft_future_get(weft_future *f, int64_t deadline_ns, void **result) {
  if (!f || !weft__deadline_ok(deadline_ns)) return -EINVAL;
  CHECK_LIVE(f, "weft_future_get");
  uint32_t s = atomic_load_explicit(&f->state, memory_order_acquire);
  if (s >= F_DONE) return result_of(f, s, result);

  /*
   * Help-first join: a plain thread that would only wait runs the future
   * itself if no one has started it: taken back from its own deque when it
   * is the newest job there (the job's record is then finished with here),
   * else claimed wherever it is queued. Once it runs elsewhere, the thread
   * runs other CPU work meanwhile (weft__cpu_help) and blocks only when it
   * finds none. A join never waits for a worker that has not started.
   */
  for (;;) {
    if (deadline_ns == -1 && atomic_load_explicit(&f->on_cpu, memory_order_relaxed) &&
        !weft__parkable_self()) {
      if (s == F_PENDING) {
        if (weft__cpu_take(&f->job)) {
          job_run(&f->job); /* claims it (a cancel may have won), runs it, drops the runner's reference */
          return result_of(f, atomic_load_explicit(&f->state, memory_order_acquire), result);
        }
        if (claim(f)) {
          run_on_thread(f);
          return result_of(f, F_DONE, result);
        }
      }
      if (weft__cpu_help(future_done, f))
        return result_of(f, atomic_load_explicit(&f->state, memory_order_acquire), result);
    }
    int rc = wait_once(f, deadline_ns, &s);
    if (rc != -EAGAIN) return rc == 0 ? result_of(f, s, result) : rc;
    /* Woken before the end: a BLOCKING future that found no stack went to the CPU path; look again. */
  }
}

/*
 * Wait for f once: 0 with its final state in *s; -EAGAIN when woken while
 * it is not final yet (fiber_nostack); else the wait's error (a deadline,
 * cancellation).
 */
static int wait_once(weft_future *f, int64_t deadline_ns, uint32_t *s_out) {
  uint32_t s;
  weft__waiter w;
  weft__waiter_init(&w, true);
  weft__waiter_on(
      &w, atomic_load_explicit(&f->on_cpu, memory_order_relaxed) ? WEFT__WAIT_FUTURE_CPU : WEFT__WAIT_FUTURE,
      f);
  weft__lock_acquire(&f->lock);
  s = atomic_load_explicit(&f->state, memory_order_acquire);
  if (s >= F_DONE) {
    weft__lock_release(&f->lock);
    *s_out = s;
    return 0;
  }
  weft__waitlist_add(&f->waiters, &w);
  weft__lock_release(&f->lock);

  uint32_t ws = weft__waiter_wait(&w, deadline_ns);
  if (ws != WEFT__W_WOKEN) {
    weft__lock_acquire(&f->lock);
    if (w.queued) weft__waitlist_del(&f->waiters, &w);
    weft__lock_release(&f->lock);
  }
  /* A result that arrived as the deadline passed still counts. */
  s = atomic_load_explicit(&f->state, memory_order_acquire);
  *s_out = s;
  if (s >= F_DONE) return 0;
  return ws == WEFT__W_WOKEN ? -EAGAIN : weft__waiter_errno(ws);
}

bool weft_future_done(const weft_future *f) {
  if (!f) return false;
  CHECK_LIVE(f, "weft_future_done");
  return atomic_load_explicit(&f->state, memory_order_acquire) >= F_DONE;
}

int weft_future_cancel(weft_future *f) {
  if (!f) return -EINVAL;
  CHECK_LIVE(f, "weft_future_cancel");
  if (claim_as(f, F_CANCELLED)) {
    /* It will never run; the task or fiber started for it lets go when it comes. */
    finish(f, F_CANCELLED);
    return 0;
  }
  weft__lock_acquire(&f->lock);
  int rc = -EALREADY;
  if (atomic_load(&f->state) == F_RUNNING) {
    f->cancel_requested = true;
    if (f->run_tc) weft__tctx_cancel(f->run_tc);
    rc = -EBUSY;
  }
  weft__lock_release(&f->lock);
  return rc;
}

void weft_future_free(weft_future *f) {
  if (!f) return;
#ifdef WEFT_FUTURE_CHECKS
  if (!reg_find(f, true)) weft__die("weft_future_free: %p is not a live future (freed twice?)", (void *)f);
#endif
  if (claim_as(f, F_CANCELLED)) finish(f, F_CANCELLED);
  release(f);
}
