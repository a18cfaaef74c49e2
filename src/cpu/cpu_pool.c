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
 */
#include "cpu.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "../api/settings.h"
#include "../sys.h"

#define POOL_MAX_THREADS 1024

static struct {
  pthread_mutex_t mu;     /* guards everything below */
  pthread_cond_t work_cv; /* idle workers wait here */
  pthread_cond_t done_cv; /* maps wait here for their helpers */
  weft__job *head;        /* queued jobs, FIFO, doubly linked so a map can take its helpers back */
  weft__job *tail;
  unsigned started; /* worker threads running */
  unsigned idle;    /* workers waiting on work_cv */
  bool stopping;    /* shutdown: workers leave once the queue is empty */
  pthread_t threads[POOL_MAX_THREADS];
} pool = {.mu = PTHREAD_MUTEX_INITIALIZER,
          .work_cv = PTHREAD_COND_INITIALIZER,
          .done_cv = PTHREAD_COND_INITIALIZER};

static __thread bool tls_worker;

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
  j->next = NULL;
  j->prev = pool.tail;
  if (pool.tail)
    pool.tail->next = j;
  else
    pool.head = j;
  pool.tail = j;
  j->queued = true;
}

static void unlink_locked(weft__job *j) {
  if (j->prev)
    j->prev->next = j->next;
  else
    pool.head = j->next;
  if (j->next)
    j->next->prev = j->prev;
  else
    pool.tail = j->prev;
  j->next = j->prev = NULL;
  j->queued = false;
}

static void *worker_main(void *arg) {
  WEFT__UNUSED(arg);
  tls_worker = true;
  pthread_mutex_lock(&pool.mu);
  for (;;) {
    while (!pool.head && !pool.stopping) {
      pool.idle++;
      pthread_cond_wait(&pool.work_cv, &pool.mu);
      pool.idle--;
    }
    if (!pool.head) break; /* stopping, and nothing left */
    weft__job *j = pool.head;
    unlink_locked(j);
    pthread_mutex_unlock(&pool.mu);
    j->run(j);
    pthread_mutex_lock(&pool.mu);
  }
  pthread_mutex_unlock(&pool.mu);
  return NULL;
}

/* Queue j and make sure a worker will see it. Called with pool.mu held. */
static int submit_locked(weft__job *j) {
  if (pool.stopping) return -ESHUTDOWN;
  if (pool.idle == 0 && pool.started < weft__pool_threads()) {
    weft__atfork_init();
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
  size_t home;        /* its slice of r (weft__range_split) */
  unsigned *finished; /* helpers of this map that ran to the end: guarded by pool.mu */
} helper;

static void helper_run(weft__job *j) {
  helper *h = weft__container_of(j, helper, job);
  weft__range_drain_from(h->r, h->home);
  pthread_mutex_lock(&pool.mu);
  (*h->finished)++;
  pthread_cond_broadcast(&pool.done_cv);
  pthread_mutex_unlock(&pool.mu);
}

void weft__pool_run_range(weft__range *r) {
  size_t t = (size_t)weft__pool_threads() + (tls_worker ? 0 : 1); /* the caller claims too */
  if (r->max_workers && r->max_workers < t) t = r->max_workers;
  if (t > r->n) t = r->n;
  r->workers = t ? t : 1;
  if (t <= 1) {
    weft__range_drain(r);
    return;
  }
  size_t nh = t - 1;
  helper local[8];
  helper *h = nh <= 8 ? local : weft__malloc(nh * sizeof *h);
  if (!h) {
    /* No memory for helpers: the caller runs every index itself. */
    weft__range_drain(r);
    return;
  }
  unsigned finished = 0, started = 0;
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
  while (finished < started) pthread_cond_wait(&pool.done_cv, &pool.mu);
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

void weft__pool_atfork_child(void) {
  pthread_mutex_init(&pool.mu, NULL);
  pthread_cond_init(&pool.work_cv, NULL);
  pthread_cond_init(&pool.done_cv, NULL);
  pool.head = pool.tail = NULL;
  pool.started = 0;
  pool.idle = 0;
  pool.stopping = false;
}
