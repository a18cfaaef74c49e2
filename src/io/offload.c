/*
 * This file contains the offload pool: weft_blocking, and weft__offload_run
 * for the I/O layer. A fiber hands a call that would block its carrier (a
 * library weft cannot make fiber-aware, a regular file without io_uring) to
 * an OS thread of the pool and parks until the call is done; the carrier
 * runs other fibers meanwhile. Anywhere else (a plain thread, an OpenMP
 * task, a fiber inside an OpenMP region of its own, which cannot park) the
 * call simply runs on the caller.
 *
 * Policy.
 *  - Growth on demand: a call that finds more calls queued than threads
 *    idle starts a thread, up to offload_max (WEFT_OFFLOAD_MAX, default
 *    64, read when the pool starts); at the maximum, calls wait in a FIFO
 *    queue for the next free thread.
 *  - Retirement: a thread that has found no work for WEFT__OFFLOAD_IDLE_NS
 *    (10 s) exits, so an idle process keeps no offload threads for long. It
 *    does not detach: each exiting thread joins the one that exited before
 *    it and leaves itself to be joined by the next (or by shutdown), so at
 *    most one exited thread waits to be joined and weft__offload_shutdown
 *    can join them all.
 *  - Shutdown: the threads drain the queue, then exit at once instead of
 *    idling; weft__offload_shutdown waits for the last and joins it.
 *  - No thread at all: when a thread cannot be started and the pool has
 *    none left, every queued call goes back to its fiber, which runs it on
 *    its own carrier (blocking that carrier, as if weft_blocking were a
 *    plain call): degraded, but never lost or failed.
 *
 * Rejected: detached threads (shutdown could not tell when the last one is
 * really gone, and the harness, Valgrind and dlclose all need that); a
 * thread per call (a thread start per getaddrinfo); a fixed pool (a burst of
 * slow calls would queue behind a handful of threads, and an idle process
 * would keep them all).
 *
 * Cancellation. The fiber waits with a cancellable waiter. If its future is
 * cancelled while the call is still queued, the fiber takes the call out of
 * the queue and returns -ECANCELED: fn never runs. Once a thread has taken
 * the call, fn runs to the end whatever happens; the fiber then waits again,
 * not cancellable, for the result, which it returns.
 *
 * What fn sees. fn runs as if it ran on the fiber: weft_scope_get answers the
 * fiber's scoped bindings (lent for the call, no reference needed: the fiber
 * stays parked until fn returns) and weft_local_get/set use the fiber's local
 * values (local.h, weft__locals_redirect). weft_cancelled() is false in fn:
 * nothing can stop it once started. fn runs on a plain thread, so it may
 * call any weft function a plain thread may call (weft_blocking inside it
 * runs inline), except weft_shutdown, which would wait for fn itself.
 *
 * Locking: pool.mu (a mutex: idle threads sleep on a condition variable)
 * guards the queue, the counters and every call's state; a call lives on its
 * fiber's stack and is touched by a thread only under the mutex, or between
 * taking it and resolving its waiter (the fiber waits for that).
 */
#include "offload.h"

#include <pthread.h>
#include <time.h>

#include "../base/settings.h"
#include "../base/clock.h"
#include "../base/process.h"
#include "../base/queue.h"
#include "../fiber/fiber.h"
#include "../local/local.h"
#include "../sync/wait.h"
#include "../base/sys.h"

enum {
  C_QUEUED,   /* in the queue */
  C_RUNNING,  /* a thread runs fn */
  C_DONE,     /* result written; the waiter was resolved */
  C_RETURNED, /* handed back to the caller: no thread could be started */
};

/* One offloaded call, on the calling fiber's stack. */
typedef struct call {
  weft_task_fn fn;
  void *arg;
  void *result;              /* fn's return value: written before C_DONE, under pool.mu */
  weft__tctx *caller;        /* the parked fiber's record: fn uses its local values */
  struct weft__scope *scope; /* the fiber's bindings at the call: fn sees them */
  weft__waiter *w;           /* resolved when the call leaves a thread's hands: guarded by pool.mu */
  int state;                 /* C_*: guarded by pool.mu */
  struct call *next;         /* FIFO link: guarded by pool.mu */
} call;

WEFT__QUEUE(callq, call, next);

static struct {
  pthread_mutex_t mu;
  pthread_cond_t work; /* idle threads wait here (CLOCK_MONOTONIC) */
  pthread_cond_t gone; /* shutdown waits here for the last thread */
  /* --- guarded by mu --- */
  callq queue;      /* queued calls, oldest first */
  unsigned queued;  /* calls in the queue */
  unsigned threads; /* alive, counting those being started */
  unsigned idle;    /* waiting on `work` */
  unsigned running; /* calls in fn */
  unsigned max;     /* offload_max: valid while started */
  bool started;     /* max was read (after init, after each shutdown) */
  bool stopping;    /* shutdown: drain the queue, then exit instead of idling */
  bool have_zombie; /* `zombie` has exited and awaits a join */
  pthread_t zombie;
  int64_t idle_ns; /* how long an idle thread waits before it exits */
  unsigned peak_threads, peak_running;
  uint64_t calls, carrier_runs, create_failures;
} pool;

static pthread_once_t pool_once = PTHREAD_ONCE_INIT;
static bool pool_ready; /* pool_init ran (read by the atfork handler, in a single-threaded child) */
static atomic_bool warned_no_thread;
static __thread bool tls_worker; /* this thread is an offload thread */

static void atfork_child(void);

static void init_sync(void) {
  pthread_mutex_init(&pool.mu, NULL);
  weft__cond_init(&pool.work);
  weft__cond_init(&pool.gone);
}

static void pool_init(void) {
  init_sync();
  pool.idle_ns = WEFT__OFFLOAD_IDLE_NS;
  pool_ready = true;
  weft__on_fork(NULL, NULL, atfork_child);
}

static void ensure_init(void) { pthread_once(&pool_once, pool_init); }

/* --- the queue (pool.mu held) ----------------------------------------------------- */

/* What the fiber layer's deadlock report must know: calls queued or running (fiber.h). Under pool.mu. */
static void outside_update(void) {
  atomic_store_explicit(&weft__outside_calls, (unsigned)(pool.queued + pool.running), memory_order_release);
}

static void enqueue(call *c) {
  callq_push(&pool.queue, c);
  pool.queued++;
  outside_update();
}

static call *dequeue(void) {
  call *c = callq_pop(&pool.queue);
  if (!c) return NULL;
  pool.queued--;
  outside_update();
  return c;
}

/* Take c out of the queue, wherever it is (a cancelled caller; rare, so a scan). */
static void unlink_call(call *c) {
  if (!callq_remove(&pool.queue, c)) return;
  pool.queued--;
  outside_update();
}

/* --- the threads ------------------------------------------------------------------ */

/* Run a call taken from the queue; pool.mu is held on entry and on return, not during fn. */
static void run_taken(call *c) {
  c->state = C_RUNNING;
  if (++pool.running > pool.peak_running) pool.peak_running = pool.running;
  outside_update();
  pthread_mutex_unlock(&pool.mu);

  weft__tctx tc;
  weft__tctx_init(&tc);
  tc.scope = c->scope;
  weft__tctx *lent = weft__tctx_enter(&tc);
  weft__tctx *redirected = weft__locals_redirect(c->caller);
  void *r = c->fn(c->arg);
  weft__locals_redirect(redirected);
  weft__tctx_leave(lent);

  pthread_mutex_lock(&pool.mu);
  pool.running--;
  outside_update();
  pool.calls++;
  c->result = r;
  c->state = C_DONE;
  /* Last touch of c: the fiber may return and pop its frame once it has the mutex. */
  weft__waiter_wake(c->w);
}

static void *worker_main(void *unused) {
  WEFT__UNUSED(unused);
  tls_worker = true;
  pthread_mutex_lock(&pool.mu);
  int64_t idle_since = weft__mono_ns();
  for (;;) {
    call *c = dequeue();
    if (c) {
      run_taken(c);
      idle_since = weft__mono_ns();
      continue;
    }
    if (pool.stopping) break;
    /* Read each time round: weft__offload_set_idle_ns wakes idle threads to take a new value. */
    int64_t deadline = weft__add_sat(idle_since, pool.idle_ns);
    if (weft__mono_ns() >= deadline) break; /* retire */
    pool.idle++;
    weft__cond_wait_until(&pool.work, &pool.mu, deadline);
    pool.idle--;
  }
  /* Leave this thread to the next one out (or shutdown) to join; join the one before. */
  pool.threads--;
  bool join = pool.have_zombie;
  pthread_t prev = pool.zombie;
  pool.zombie = pthread_self();
  pool.have_zombie = true;
  if (pool.threads == 0) pthread_cond_broadcast(&pool.gone);
  pthread_mutex_unlock(&pool.mu);
  if (join) pthread_join(prev, NULL);
  return NULL;
}

/*
 * Start a thread for which the caller reserved a place (pool.threads++).
 * When none can be started and the pool has no thread left, hand every
 * queued call back to its fiber; returns true when mine was handed back.
 */
static bool start_thread(call *mine) {
  pthread_t t;
  int rc = weft__thread_start(&t, 0, "weft-offload", worker_main, NULL);
  if (rc == 0) return false; /* joinable: see worker_main's end */
  if (!atomic_exchange(&warned_no_thread, true))
    weft__warn("cannot start an offload thread (%s): blocking calls may run on their carriers",
               weft_strerror(rc));
  bool mine_back = false;
  pthread_mutex_lock(&pool.mu);
  pool.threads--;
  pool.create_failures++;
  if (pool.threads == 0) {
    /* Nobody else will run them: each fiber runs its own call on its carrier. */
    call *c;
    while ((c = dequeue()) != NULL) {
      c->state = C_RETURNED;
      pool.carrier_runs++;
      if (c == mine)
        mine_back = true; /* the caller has not parked yet: it looks for itself */
      else
        weft__waiter_wake(c->w); /* last touch of c */
    }
    pthread_cond_broadcast(&pool.gone);
  }
  pthread_mutex_unlock(&pool.mu);
  return mine_back;
}

/* --- the calls -------------------------------------------------------------------- */

static int run_here(weft_task_fn fn, void *arg, void **result) {
  void *r = fn(arg);
  if (result) *result = r;
  return 0;
}

int weft__offload_run(weft_task_fn fn, void *arg, void **result) {
  if (!fn) return -EINVAL;
  weft__tctx *tc = weft__tctx_self();
  if (atomic_load_explicit(&tc->cancelled, memory_order_relaxed)) return -ECANCELED;
  if (!weft__parkable_self()) return run_here(fn, arg, result);
  ensure_init();

  weft__waiter w;
  weft__waiter_init(&w, true); /* cancellable while queued; see the top of the file */
  weft__waiter_on(&w, WEFT__WAIT_OFFLOAD, (const void *)(uintptr_t)fn);
  call c = {.fn = fn, .arg = arg, .caller = tc, .scope = tc->scope, .w = &w, .state = C_QUEUED};

  pthread_mutex_lock(&pool.mu);
  if (!pool.started) {
    weft__settings s;
    weft__settings_get(&s);
    pool.max = s.offload_max ? s.offload_max : 1;
    pool.started = true;
  }
  enqueue(&c);
  /* Every idle thread is already promised to an earlier queued call when queued > idle. */
  bool spawn = pool.queued > pool.idle && pool.threads < pool.max;
  if (spawn && ++pool.threads > pool.peak_threads) pool.peak_threads = pool.threads;
  if (pool.idle) pthread_cond_signal(&pool.work);
  pthread_mutex_unlock(&pool.mu);
  if (spawn && start_thread(&c)) return run_here(fn, arg, result);

  uint32_t ws = weft__waiter_wait(&w, -1);
  pthread_mutex_lock(&pool.mu);
  while (c.state != C_DONE) {
    if (c.state == C_QUEUED) {
      /* Cancelled before any thread took it: take it back; fn never runs. */
      unlink_call(&c);
      pthread_mutex_unlock(&pool.mu);
      return -ECANCELED;
    }
    if (c.state == C_RETURNED) {
      pthread_mutex_unlock(&pool.mu);
      return ws == WEFT__W_CANCELLED ? -ECANCELED : run_here(fn, arg, result);
    }
    /* Running, and our wait was cancelled: fn runs to the end; wait for it, not cancellable. */
    weft__waiter w2;
    weft__waiter_init(&w2, false);
    weft__waiter_on(&w2, WEFT__WAIT_OFFLOAD, (const void *)(uintptr_t)fn);
    c.w = &w2;
    pthread_mutex_unlock(&pool.mu);
    ws = weft__waiter_wait(&w2, -1);
    pthread_mutex_lock(&pool.mu);
  }
  pthread_mutex_unlock(&pool.mu);
  if (result) *result = c.result;
  return 0;
}

int weft_blocking(weft_task_fn fn, void *arg, void **result) { return weft__offload_run(fn, arg, result); }

/* --- life cycle ------------------------------------------------------------------- */

bool weft__offload_is_worker(void) { return tls_worker; }

void weft__offload_shutdown(void) {
  if (tls_worker) weft__die("weft_shutdown called from an offloaded call: it would wait for itself");
  ensure_init();
  pthread_mutex_lock(&pool.mu);
  pool.stopping = true;
  pthread_cond_broadcast(&pool.work);
  /* A queued call always has a thread (or a starting one) to run it: waiting for threads is enough. */
  while (pool.threads > 0) pthread_cond_wait(&pool.gone, &pool.mu);
  bool join = pool.have_zombie;
  pthread_t last = pool.zombie;
  pool.have_zombie = false;
  pool.stopping = false;
  pool.started = false;
  pool.peak_threads = pool.peak_running = 0;
  pool.calls = pool.carrier_runs = pool.create_failures = 0;
  pthread_mutex_unlock(&pool.mu);
  /* The last thread out joined the one before it, and so on down the line. */
  if (join) pthread_join(last, NULL);
}

static void atfork_child(void) {
  /* Only the forking thread survives: no offload thread, no parked fiber to serve. */
  if (pool_ready) init_sync();
  pool.queue.head = pool.queue.tail = NULL;
  pool.queue.len = 0;
  pool.queued = pool.threads = pool.idle = pool.running = 0;
  pool.started = pool.stopping = pool.have_zombie = false;
  pool.peak_threads = pool.peak_running = 0;
  pool.calls = pool.carrier_runs = pool.create_failures = 0;
  tls_worker = false;
}

void weft__offload_set_idle_ns(int64_t ns) {
  ensure_init();
  pthread_mutex_lock(&pool.mu);
  pool.idle_ns = ns > 0 ? ns : WEFT__OFFLOAD_IDLE_NS;
  pthread_cond_broadcast(&pool.work);
  pthread_mutex_unlock(&pool.mu);
}

void weft__offload_get_stats(weft__offload_stats *out) {
  ensure_init();
  pthread_mutex_lock(&pool.mu);
  out->threads = pool.threads;
  out->idle = pool.idle;
  out->queued = pool.queued;
  out->running = pool.running;
  out->peak_threads = pool.peak_threads;
  out->peak_running = pool.peak_running;
  out->calls = pool.calls;
  out->carrier_runs = pool.carrier_runs;
  out->create_failures = pool.create_failures;
  pthread_mutex_unlock(&pool.mu);
}
