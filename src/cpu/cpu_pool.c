/*
 * This file contains weft's own pool of CPU threads: the CPU backend when
 * weft is built without OpenMP, and in a child forked from a libgomp process
 * (see cpu_omp.c). It is deliberately plain: one queue under one mutex,
 * workers that sleep on a condition variable when there is nothing to do,
 * started lazily up to the pool's size and kept until weft_shutdown().
 *
 * A parallel map queues helper jobs (one per worker it wants) and claims
 * chunks on the calling thread as well. When the caller runs out of indices
 * it takes back the helpers that no worker has started, so a map never waits
 * for a helper stuck behind other work: that is what keeps nested maps from
 * deadlocking when every worker is itself inside a map.
 *
 * Waking a thread asleep on a condition variable costs 5-100 us on a
 * virtual machine, far more than a short map's work, so both sides spin a
 * little first, with a bound, and then sleep: a worker that has run a job
 * watches the queue for POOL_SPIN_NS before it waits on work_cv (maps called
 * in a loop then find it awake), and a map's caller watches its helpers'
 * count for JOIN_SPIN_NS before it waits on done_cv. Neither ever spins
 * longer, so an idle pool uses no CPU (the omp_env suite checks it).
 */
#include "cpu.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "../base/settings.h"
#include "../base/clock.h"
#include "../base/process.h"
#include "../base/sys.h"

#define POOL_MAX_THREADS 1024
#define POOL_SPIN_NS     50000 /* a worker that ran a job watches the queue this long before it sleeps */
#define JOIN_SPIN_NS     20000 /* a map's caller watches its helpers this long before it sleeps */

static struct {
  pthread_mutex_t mu;     /* guards everything below */
  pthread_cond_t work_cv; /* idle workers wait here */
  pthread_cond_t done_cv; /* maps wait here for their helpers */
  weft__joblist queue;    /* queued jobs, FIFO; a map takes its helpers back from the middle */
  unsigned started;       /* worker threads running */
  unsigned idle;          /* workers waiting on work_cv */
  atomic_uint queued;     /* jobs in the queue: written under mu, read by spinning workers without it */
  atomic_uint spinning;   /* workers watching `queued` before they sleep (they need no signal) */
  bool stopping;          /* shutdown: workers leave once the queue is empty */
  pthread_t threads[POOL_MAX_THREADS];
} pool = {.mu = PTHREAD_MUTEX_INITIALIZER,
          .work_cv = PTHREAD_COND_INITIALIZER,
          .done_cv = PTHREAD_COND_INITIALIZER};

static __thread bool tls_worker;

static void atfork_child(void);
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static void fork_register(void) { weft__on_fork(NULL, NULL, atfork_child); }

bool weft__pool_is_worker(void) { return tls_worker; }

unsigned weft__pool_threads(void) {
  static unsigned cached;
  unsigned n = __atomic_load_n(&cached, __ATOMIC_RELAXED);
  if (n) return n;
  /* Respect OMP_NUM_THREADS (its first level), as the OpenMP backend does. */
  size_t v;
  if (weft__env_size("OMP_NUM_THREADS", &v) && v > 0)
    n = v > POOL_MAX_THREADS ? POOL_MAX_THREADS : (unsigned)v;
  else
    n = weft__cpu_count();
  if (n > POOL_MAX_THREADS) n = POOL_MAX_THREADS;
  __atomic_store_n(&cached, n, __ATOMIC_RELAXED);
  return n;
}

static void enqueue_locked(weft__job *j) {
  weft__joblist_push(&pool.queue, j);
  j->queued = true;
  atomic_fetch_add_explicit(&pool.queued, 1, memory_order_release);
}

static void unlink_locked(weft__job *j) {
  weft__joblist_remove(&pool.queue, j);
  j->queued = false;
  atomic_fetch_sub_explicit(&pool.queued, 1, memory_order_relaxed);
}

/*
 * Spin, with the lock released, until *word reaches at_least or ns have
 * passed; true when it did. Acquire pairs with the release of whoever
 * raised it (enqueue_locked, helper_run).
 */
static bool spin_until(atomic_uint *word, unsigned at_least, int64_t ns) {
  int64_t end = weft__mono_ns() + ns;
  for (unsigned k = 1;; k++) {
    if (atomic_load_explicit(word, memory_order_acquire) >= at_least) return true;
    if (k % 64 == 0 && weft__mono_ns() >= end) return false;
    weft__cpu_relax();
  }
}

static void *worker_main(void *arg) {
  WEFT__UNUSED(arg);
  tls_worker = true;
  bool may_spin = false; /* once after each job */
  pthread_mutex_lock(&pool.mu);
  for (;;) {
    while (!pool.queue.head && !pool.stopping) {
      if (may_spin) {
        /* Maps called in a loop find the worker awake (see the top); never longer than POOL_SPIN_NS. */
        may_spin = false;
        atomic_fetch_add_explicit(&pool.spinning, 1, memory_order_relaxed);
        pthread_mutex_unlock(&pool.mu);
        spin_until(&pool.queued, 1, POOL_SPIN_NS);
        pthread_mutex_lock(&pool.mu);
        atomic_fetch_sub_explicit(&pool.spinning, 1, memory_order_relaxed);
        continue; /* the queue is checked again under the lock: no wake-up is lost */
      }
      pool.idle++;
      pthread_cond_wait(&pool.work_cv, &pool.mu);
      pool.idle--;
    }
    if (!pool.queue.head) break; /* stopping, and nothing left */
    weft__job *j = pool.queue.head;
    unlink_locked(j);
    pthread_mutex_unlock(&pool.mu);
    j->run(j);
    may_spin = true;
    pthread_mutex_lock(&pool.mu);
  }
  pthread_mutex_unlock(&pool.mu);
  return NULL;
}

/* Queue j and make sure a worker will see it. Called with pool.mu held. */
static int submit_locked(weft__job *j) {
  if (pool.stopping) return -ESHUTDOWN;
  /* Workers that will take it: the sleeping ones, and the spinning ones, less the jobs already queued. */
  unsigned ready = pool.idle + atomic_load_explicit(&pool.spinning, memory_order_relaxed);
  if (ready <= atomic_load_explicit(&pool.queued, memory_order_relaxed) &&
      pool.started < weft__pool_threads()) {
    pthread_once(&fork_once, fork_register);
    char name[32];
    snprintf(name, sizeof name, "weft-pool-%u", pool.started);
    int rc = weft__thread_start(&pool.threads[pool.started], 0, name, worker_main, NULL);
    if (rc < 0 && pool.started == 0) return rc; /* no worker at all */
    if (rc == 0) pool.started++;
  }
  enqueue_locked(j);
  if (pool.idle) pthread_cond_signal(&pool.work_cv);
  return 0;
}

int weft__pool_submit(weft__job *j) {
  pthread_mutex_lock(&pool.mu);
  int rc = submit_locked(j);
  pthread_mutex_unlock(&pool.mu);
  return rc;
}

/* A helper of one parallel map. */
typedef struct helper {
  weft__job job;
  weft__range *r;
  size_t home;           /* its slice of r (weft__range_split) */
  atomic_uint *finished; /* helpers of this map that ran to the end (the caller may read it unlocked) */
} helper;

static void helper_run(weft__job *j) {
  helper *h = weft__container_of(j, helper, job);
  weft__range_drain_from(h->r, h->home);
  pthread_mutex_lock(&pool.mu);
  /* Release pairs with the caller's acquire (spin_until, or under the lock): the elements' writes. */
  atomic_fetch_add_explicit(h->finished, 1, memory_order_release);
  pthread_cond_broadcast(&pool.done_cv);
  pthread_mutex_unlock(&pool.mu);
}

/* Workers a map gets here: the pool's threads, and the caller when it is not one of them. */
static size_t team_size(void) { return (size_t)weft__pool_threads() + (tls_worker ? 0 : 1); }

void weft__pool_team(weft__team *t) {
  t->kind = WEFT__TEAM_POOL;
  t->size = (unsigned)team_size();
  t->idle = t->size;
}

void weft__pool_run_range(weft__range *r) {
  size_t t = team_size();
  if (r->max_workers && r->max_workers < t) t = r->max_workers;
  if (t > r->n) t = r->n;
  if (t <= 1) {
    r->workers = 1;
    weft__range_drain(r);
    return;
  }
  weft__pool_fork(r, t);
}

void weft__pool_fork(weft__range *r, size_t t) {
  r->workers = t;
  size_t nh = t - 1;
  helper local[8];
  helper *h = nh <= 8 ? local : weft__malloc(nh * sizeof *h);
  if (!h) {
    /* No memory for helpers: the caller runs every index itself. */
    weft__range_drain(r);
    return;
  }
  atomic_uint finished;
  atomic_init(&finished, 0);
  unsigned started = 0;
  size_t queued = 0;
  weft__range_split(r, t);
  pthread_mutex_lock(&pool.mu);
  for (; queued < nh; queued++) {
    h[queued].job.run = helper_run;
    h[queued].r = r;
    h[queued].home = queued + 1; /* the caller's is 0 */
    h[queued].finished = &finished;
    if (submit_locked(&h[queued].job) != 0) break; /* fewer helpers: still correct */
  }
  pthread_mutex_unlock(&pool.mu);

  weft__range_drain(r);

  pthread_mutex_lock(&pool.mu);
  for (size_t k = 0; k < queued; k++) {
    if (h[k].job.queued)
      unlink_locked(&h[k].job); /* never started: take it back */
    else
      started++;
  }
  if (atomic_load_explicit(&finished, memory_order_acquire) < started) {
    /* Helpers still running: watch them a little before sleeping (see the top). */
    pthread_mutex_unlock(&pool.mu);
    bool done = spin_until(&finished, started, JOIN_SPIN_NS);
    pthread_mutex_lock(&pool.mu);
    if (!done)
      while (atomic_load_explicit(&finished, memory_order_acquire) < started)
        pthread_cond_wait(&pool.done_cv, &pool.mu);
  }
  pthread_mutex_unlock(&pool.mu);
  if (h != local) weft__free(h);
}

void weft__pool_shutdown(void) {
  pthread_mutex_lock(&pool.mu);
  unsigned n = pool.started;
  pool.stopping = true;
  pthread_cond_broadcast(&pool.work_cv);
  pthread_mutex_unlock(&pool.mu);
  for (unsigned i = 0; i < n; i++) pthread_join(pool.threads[i], NULL);
  pthread_mutex_lock(&pool.mu);
  pool.started = 0;
  pool.stopping = false;
  pthread_mutex_unlock(&pool.mu);
}

static void atfork_child(void) {
  pthread_mutex_init(&pool.mu, NULL);
  pthread_cond_init(&pool.work_cv, NULL);
  pthread_cond_init(&pool.done_cv, NULL);
  pool.queue.head = pool.queue.tail = NULL;
  pool.started = 0;
  pool.idle = 0;
  atomic_store(&pool.queued, 0);
  atomic_store(&pool.spinning, 0);
  pool.stopping = false;
}
