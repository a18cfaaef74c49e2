/*
 * Suite "sync": weft's mutex, condition variable, semaphore and channel,
 * between fibers, between plain threads and across the two: exact counts
 * under contention, the error contract of every entry, deadlines (state
 * intact after), cancellation, channel close and rendezvous, and freeing a
 * primitive as soon as the last call on it returns. The tests that depend
 * on where blocking work runs are run twice: with fibers, and with fibers
 * turned off (the fallback on threads), as CI also runs the whole suite
 * with WEFT_FIBERS=0.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <signal.h>

#include "harness.h"
#include "base/lock.h"
#include "base/sys.h"

#define MS 1000000LL

static const weft_pmap_opts blocking = {WEFT_BLOCKING, 0, 0, 0};

static int64_t in_ms(int64_t ms) { return weft_now_ns() + ms * MS; }

/* Divide a loop count under valgrind or qemu, where everything runs many times slower. */
static size_t scaled(size_t n, size_t slow_div) {
  size_t r = weft_test_slow_env() ? n / slow_div : n;
  return r ? r : 1;
}

/* Switch blocking work between fibers (fibers = 1: as the environment says) and the thread fallback. */
static void use_fibers(bool on) {
  weft_config c = weft_test_config();
  if (!on) c.fibers = 0;
  CU_ASSERT_EQUAL(weft_configure(&c), 0);
}

/* Run body once with fibers (where the build and environment have them) and once on the fallback. */
static void both_modes(void (*body)(void)) {
  use_fibers(true);
  body();
  use_fibers(false);
  CU_ASSERT_FALSE(weft_fibers_available());
  body();
  use_fibers(true);
}

/* Blocking futures that may all wait at once: on the fallback they hold CPU workers, which are few. */
static int concurrent_futures(int want) { return weft_fibers_available() ? want : 1; }

/* --- running one role on fibers and threads at once -------------------------------------- */

typedef int (*role_fn)(void *ctx, size_t i);

typedef struct thr_arg {
  role_fn fn;
  void *ctx;
  size_t i;
  int rc;
} thr_arg;

static void *thr_main(void *arg) {
  thr_arg *t = arg;
  t->rc = t->fn(t->ctx, t->i);
  return NULL;
}

typedef struct pmap_arg {
  role_fn fn;
  void *ctx;
  size_t n;
  int rc;
} pmap_arg;

static void *pmap_main(void *arg) {
  pmap_arg *p = arg;
  p->rc = weft_pmap(p->n, p->fn, p->ctx, &blocking);
  return NULL;
}

/*
 * fn(ctx, i) for i in [0, nfib) as the elements of one blocking weft_pmap
 * (fibers, or the fallback), and for i in [nfib, nfib + nthr) on plain
 * threads, all at once. The pmap runs on a thread of its own so that two
 * groups can run side by side (producers and consumers).
 */
typedef struct mixed {
  pthread_t pm;
  pmap_arg pa;
  size_t nthr;
  pthread_t *th;
  thr_arg *ta;
} mixed;

static void mixed_start(mixed *m, size_t nfib, size_t nthr, role_fn fn, void *ctx) {
  m->nthr = nthr;
  m->th = calloc(nthr ? nthr : 1, sizeof *m->th);
  m->ta = calloc(nthr ? nthr : 1, sizeof *m->ta);
  for (size_t k = 0; k < nthr; k++) {
    m->ta[k] = (thr_arg){fn, ctx, nfib + k, 0};
    CU_ASSERT_EQUAL_FATAL(pthread_create(&m->th[k], NULL, thr_main, &m->ta[k]), 0);
  }
  m->pa = (pmap_arg){fn, ctx, nfib, 0};
  CU_ASSERT_EQUAL_FATAL(pthread_create(&m->pm, NULL, pmap_main, &m->pa), 0);
}

/* Join everything; returns the pmap's result, or the first thread's nonzero result. */
static int mixed_join(mixed *m) {
  pthread_join(m->pm, NULL);
  int rc = m->pa.rc;
  for (size_t k = 0; k < m->nthr; k++) {
    pthread_join(m->th[k], NULL);
    if (rc == 0) rc = m->ta[k].rc;
  }
  free(m->th);
  free(m->ta);
  return rc;
}

static int run_mixed(size_t nfib, size_t nthr, role_fn fn, void *ctx) {
  mixed m;
  mixed_start(&m, nfib, nthr, fn, ctx);
  return mixed_join(&m);
}

/* Run fn on a plain thread, or as a blocking future; join_any waits for either. */
typedef struct runner {
  bool is_thread;
  pthread_t t;
  weft_future *f;
  void *(*fn)(void *);
  void *arg;
  void *result;
} runner;

static void *runner_thread(void *arg) {
  runner *r = arg;
  r->result = r->fn(r->arg);
  return NULL;
}

static void start_any(runner *r, bool thread, void *(*fn)(void *), void *arg) {
  r->is_thread = thread;
  r->fn = fn;
  r->arg = arg;
  r->result = NULL;
  if (thread) {
    CU_ASSERT_EQUAL_FATAL(pthread_create(&r->t, NULL, runner_thread, r), 0);
  } else {
    CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_BLOCKING, fn, arg, &r->f), 0);
  }
}

static void *join_any(runner *r) {
  if (r->is_thread) {
    pthread_join(r->t, NULL);
  } else {
    /* With a deadline: a plain thread's get(-1) would run a fallback future itself, as the main thread. */
    int rc;
    while ((rc = weft_future_get(r->f, in_ms(1000), &r->result)) == -ETIMEDOUT) {
    }
    CU_ASSERT_EQUAL(rc, 0);
    weft_future_free(r->f);
  }
  return r->result;
}

/* Poll cond_fn until it holds, for at most 10 s; false on timeout. */
static bool eventually(bool (*cond_fn)(void *), void *arg) {
  int64_t end = in_ms(10000);
  while (!cond_fn(arg)) {
    if (weft_now_ns() > end) return false;
    weft_test_sleep_ms(1);
  }
  return true;
}

/* ======================================================================================= */
/* Mutex                                                                                   */
/* ======================================================================================= */

static void test_mutex_errors(void) {
  weft_mutex_t m = WEFT_MUTEX_INITIALIZER;
  CU_ASSERT_EQUAL(weft_mutex_init(NULL), -EINVAL);
  CU_ASSERT_EQUAL(weft_mutex_lock(NULL), -EINVAL);
  CU_ASSERT_EQUAL(weft_mutex_trylock(NULL), -EINVAL);
  CU_ASSERT_EQUAL(weft_mutex_unlock(NULL), -EINVAL);
  weft_mutex_destroy(NULL);

  CU_ASSERT_EQUAL(weft_mutex_unlock(&m), -EPERM); /* not held at all */
  CU_ASSERT_EQUAL(weft_mutex_lock(&m), 0);
  CU_ASSERT_EQUAL(weft_mutex_lock(&m), -EDEADLK);
  CU_ASSERT_EQUAL(weft_mutex_trylock(&m), -EBUSY);
  CU_ASSERT_EQUAL(weft_mutex_unlock(&m), 0);
  CU_ASSERT_EQUAL(weft_mutex_unlock(&m), -EPERM);
  CU_ASSERT_EQUAL(weft_mutex_trylock(&m), 0);
  CU_ASSERT_EQUAL(weft_mutex_unlock(&m), 0);
  weft_mutex_destroy(&m);

  CU_ASSERT_EQUAL(weft_mutex_init(&m), 0);
  CU_ASSERT_EQUAL(weft_mutex_lock(&m), 0);
  CU_ASSERT_EQUAL(weft_mutex_unlock(&m), 0);
  weft_mutex_destroy(&m);
}

/* What another context sees of a mutex the test holds (or held). */
typedef struct probe {
  weft_mutex_t *m;
  int trylock_rc;
  int unlock_rc;
} probe;

static void *probe_fn(void *arg) {
  probe *p = arg;
  p->trylock_rc = weft_mutex_trylock(p->m);
  p->unlock_rc = weft_mutex_unlock(p->m);
  return NULL;
}

/* Take the mutex and keep it until told to let go. */
typedef struct holder {
  weft_mutex_t *m;
  atomic_int held;
  atomic_int release;
} holder;

static void *lock_and_hold(void *arg) {
  holder *h = arg;
  int rc = weft_mutex_lock(h->m);
  atomic_store(&h->held, 1);
  while (!atomic_load(&h->release)) weft_sleep_ns(MS);
  if (rc == 0) rc = weft_mutex_unlock(h->m);
  return (void *)(intptr_t)rc;
}

static void test_mutex_owner(void) {
  for (int mode = 0; mode < 2; mode++) {
    bool thread = mode == 1;
    weft_mutex_t m = WEFT_MUTEX_INITIALIZER;
    /* Held by the main thread: a fiber or another thread can neither take it nor unlock it. */
    CU_ASSERT_EQUAL(weft_mutex_lock(&m), 0);
    probe p = {&m, 0, 0};
    runner r;
    start_any(&r, thread, probe_fn, &p);
    join_any(&r);
    CU_ASSERT_EQUAL(p.trylock_rc, -EBUSY);
    CU_ASSERT_EQUAL(p.unlock_rc, -EPERM);
    CU_ASSERT_EQUAL(weft_mutex_unlock(&m), 0);

    /* Held by a fiber (or a thread): no other fiber or thread, nor the main thread, is its owner. */
    holder h = {&m, 0, 0};
    runner hr;
    start_any(&hr, thread, lock_and_hold, &h);
    while (!atomic_load(&h.held)) weft_test_sleep_ms(1);
    CU_ASSERT_EQUAL(weft_mutex_unlock(&m), -EPERM);
    CU_ASSERT_EQUAL(weft_mutex_trylock(&m), -EBUSY);
    for (int k = 0; k < 2; k++) {
      p = (probe){&m, 0, 0};
      start_any(&r, k == 0, probe_fn, &p);
      join_any(&r);
      CU_ASSERT_EQUAL(p.trylock_rc, -EBUSY);
      CU_ASSERT_EQUAL(p.unlock_rc, -EPERM);
    }
    atomic_store(&h.release, 1);
    CU_ASSERT_EQUAL((intptr_t)join_any(&hr), 0); /* its own unlock worked */
    weft_mutex_destroy(&m);
  }
}

typedef struct counter {
  weft_mutex_t m;
  long value;        /* only under m: a plain variable, so that a broken lock loses increments */
  atomic_int inside; /* how many are inside the critical section: must be 1 there */
  atomic_int broken;
  size_t fiber_rounds;
  size_t thread_rounds;
  size_t nfib;
} counter;

static int count_fn(void *ctx, size_t i) {
  counter *c = ctx;
  size_t rounds = i < c->nfib ? c->fiber_rounds : c->thread_rounds;
  for (size_t k = 0; k < rounds; k++) {
    if (weft_mutex_lock(&c->m) != 0) return 1;
    if (atomic_fetch_add(&c->inside, 1) != 0) atomic_store(&c->broken, 1);
    long v = c->value;
    /* Now and then stay inside across a switch, so that others park on the mutex. */
    if ((k & 15) == 0 && i < c->nfib) weft_yield();
    c->value = v + 1;
    atomic_fetch_sub(&c->inside, 1);
    if (weft_mutex_unlock(&c->m) != 0) return 2;
  }
  return 0;
}

static void mutex_contention_body(void) {
  counter c;
  memset(&c, 0, sizeof c);
  weft_mutex_init(&c.m);
  c.nfib = scaled(1000, 10);
  c.fiber_rounds = scaled(200, 4);
  c.thread_rounds = scaled(5000, 20);
  size_t nthr = 8;
  CU_ASSERT_EQUAL(run_mixed(c.nfib, nthr, count_fn, &c), 0);
  CU_ASSERT_EQUAL(c.value, (long)(c.nfib * c.fiber_rounds + nthr * c.thread_rounds));
  CU_ASSERT_EQUAL(atomic_load(&c.broken), 0);
  CU_ASSERT_EQUAL(weft_mutex_trylock(&c.m), 0); /* free, and consistent, after the storm */
  CU_ASSERT_EQUAL(weft_mutex_unlock(&c.m), 0);
  weft_mutex_destroy(&c.m);
}

static void test_mutex_contention(void) { both_modes(mutex_contention_body); }

/* A waiter that is not served for long gets the mutex handed to it: nobody starves behind bargers. */
typedef struct hog {
  weft_mutex_t m;
  atomic_int stop;
  atomic_int got;
} hog;

static void *hog_fn(void *arg) {
  hog *h = arg;
  while (!atomic_load(&h->stop)) {
    weft_mutex_lock(&h->m);
    for (volatile int k = 0; k < 200; k++) {
    }
    weft_mutex_unlock(&h->m);
  }
  return NULL;
}

static void *victim_fn(void *arg) {
  hog *h = arg;
  for (int k = 0; k < 20; k++) {
    weft_mutex_lock(&h->m);
    weft_mutex_unlock(&h->m);
    atomic_fetch_add(&h->got, 1);
  }
  return NULL;
}

/*
 * The same across carriers: the hogs are fibers that never give up their
 * carriers, so the victim, a fiber, runs on another carrier (an extra one
 * that the pinning monitor starts), and a fiber's unlock hands the mutex to
 * a fiber of another carrier only after HANDOFF_FAR_NS (20 ms), not 1 ms
 * (mutex.c, "Convoys"). Liveness: the victim gets the mutex its 20 times.
 * (On two cores it mostly gets through by barging before the 20 ms are up,
 * so this does not measure the bound itself.)
 */
static void test_mutex_no_starvation_across_carriers(void) {
  if (!weft_test_fibers_expected()) return;
  hog h;
  memset(&h, 0, sizeof h);
  weft_mutex_init(&h.m);
  runner hogs[2], v;
  start_any(&hogs[0], false, hog_fn, &h);
  start_any(&hogs[1], false, hog_fn, &h);
  int64_t t0 = weft_now_ns();
  start_any(&v, false, victim_fn, &h);
  join_any(&v);
  int64_t took = weft_now_ns() - t0;
  atomic_store(&h.stop, 1);
  join_any(&hogs[0]);
  join_any(&hogs[1]);
  CU_ASSERT_EQUAL(atomic_load(&h.got), 20);
  if (!weft_test_slow_env()) CU_ASSERT(took < 5000 * MS);
  weft_mutex_destroy(&h.m);
}

static void test_mutex_no_starvation(void) {
  hog h;
  memset(&h, 0, sizeof h);
  weft_mutex_init(&h.m);
  runner hogs[2], v;
  start_any(&hogs[0], true, hog_fn, &h);
  start_any(&hogs[1], true, hog_fn, &h);
  int64_t t0 = weft_now_ns();
  start_any(&v, false, victim_fn, &h);
  join_any(&v);
  int64_t took = weft_now_ns() - t0;
  atomic_store(&h.stop, 1);
  join_any(&hogs[0]);
  join_any(&hogs[1]);
  CU_ASSERT_EQUAL(atomic_load(&h.got), 20);
  if (!weft_test_slow_env()) CU_ASSERT(took < 5000 * MS);
  weft_mutex_destroy(&h.m);
}

/* --- freeing a mutex as soon as the last unlock returns ------------------------------- */

typedef struct heap_mu {
  weft_mutex_t m;
  int data;
} heap_mu;

static void *mu_last_user(void *arg) {
  heap_mu *h = arg;
  weft_mutex_lock(&h->m);
  int d = h->data;
  weft_mutex_unlock(&h->m);
  weft_mutex_destroy(&h->m);
  free(h);
  return (void *)(intptr_t)d;
}

static bool mu_has_waiter(void *arg) {
  return __atomic_load_n(&((heap_mu *)arg)->m.state_, __ATOMIC_RELAXED) == 3u; /* LOCKED | WAITERS */
}

static void test_mutex_free_after_unlock(void) {
  size_t rounds = scaled(300, 10);
  for (size_t r = 0; r < rounds; r++) {
    heap_mu *h = malloc(sizeof *h);
    weft_mutex_init(&h->m);
    h->data = 0;
    weft_mutex_lock(&h->m);
    runner u;
    start_any(&u, (r & 1) != 0, mu_last_user, h);
    /* Let it queue (the unlock then takes its slow path); the other rounds race. */
    if ((r & 2) == 0) CU_ASSERT_TRUE(eventually(mu_has_waiter, h));
    h->data = 7;
    weft_mutex_unlock(&h->m); /* h may be freed from here on */
    CU_ASSERT_EQUAL((intptr_t)join_any(&u), 7);
  }
}

/* ======================================================================================= */
/* Condition variable                                                                      */
/* ======================================================================================= */

static weft_mutex_t g_mu = WEFT_MUTEX_INITIALIZER;
static weft_cond_t g_cv = WEFT_COND_INITIALIZER;

/* --- a waiter handed the mutex runs first ------------------------------------------------- */

/*
 * A waiter that is handed the mutex (it has waited HANDOFF_NS, 1 ms) holds
 * it from then on, so it must run before the fibers already ready on its
 * carrier, or every one of them that comes to the mutex finds it held and
 * parks behind it (a convoy). On one carrier, elements: W waits for the
 * mutex, R_1..R_K for a semaphore; the holder posts the semaphore K times
 * (the R's ready first) and then unlocks (W handed the mutex): W must run
 * before every R. Once with a fiber as the holder (W goes to the front of
 * its carrier's own ready queue), once with a plain thread (W goes through
 * the carrier's inbox, ahead of the R's readied there first).
 */
enum { FIRST_K = 8 };

typedef struct first_run {
  weft_mutex_t m;
  weft_sem_t sem, go;
  atomic_int order, b_running, released;
  int seq[FIRST_K + 3];
  bool
      fiber_holder; /* element 0 holds the mutex (else the test's thread does, and the last element blocks) */
  size_t w;         /* W's element: 1 after a fiber holder, else 0 */
} first_run;

static int first_elem(void *ctx, size_t i) {
  first_run *t = ctx;
  if (t->fiber_holder && i == 0) {
    weft_mutex_lock(&t->m);
    weft_sleep_ns(5 * MS); /* W and the R's park meanwhile; W waits past HANDOFF_NS */
    for (int k = 0; k < FIRST_K; k++) weft_sem_post(&t->sem);
    weft_mutex_unlock(&t->m);
    return 0;
  }
  if (!t->fiber_holder && i == FIRST_K + 1) {
    /* The blocker: keeps the one carrier busy while the thread readies the others. */
    weft_sem_wait(&t->go, in_ms(10000));
    atomic_store(&t->b_running, 1);
    while (!atomic_load(&t->released)) {
    }
    return 0;
  }
  if (i == t->w) {
    weft_mutex_lock(&t->m);
    t->seq[i] = atomic_fetch_add(&t->order, 1);
    weft_mutex_unlock(&t->m);
    return 0;
  }
  if (weft_sem_wait(&t->sem, in_ms(10000)) != 0) return -1;
  t->seq[i] = atomic_fetch_add(&t->order, 1);
  return 0;
}

static void first_case(bool fiber_holder) {
  first_run t;
  memset(&t, 0, sizeof t);
  weft_mutex_init(&t.m);
  weft_sem_init(&t.sem, 0);
  weft_sem_init(&t.go, 0);
  t.fiber_holder = fiber_holder;
  t.w = fiber_holder ? 1 : 0;
  size_t n = FIRST_K + 2; /* the holder (or the blocker), W, the K R's */
  if (fiber_holder) {
    CU_ASSERT_EQUAL(weft_pmap(n, first_elem, &t, &blocking), 0);
  } else {
    weft_mutex_lock(&t.m);
    pthread_t pm;
    pmap_arg pa = {first_elem, &t, n, 0};
    CU_ASSERT_EQUAL_FATAL(pthread_create(&pm, NULL, pmap_main, &pa), 0);
    while (!mu_has_waiter(&t.m)) weft_test_sleep_ms(1);
    weft_test_sleep_ms(5); /* W waits past HANDOFF_NS; the R's park (they run before the blocker) */
    weft_sem_post(&t.go);
    while (!atomic_load(&t.b_running)) {
    }
    for (int k = 0; k < FIRST_K; k++) weft_sem_post(&t.sem);
    weft_mutex_unlock(&t.m); /* hand-off to W, through the carrier's inbox */
    atomic_store(&t.released, 1);
    pthread_join(pm, NULL);
    CU_ASSERT_EQUAL(pa.rc, 0);
  }
  CU_ASSERT_EQUAL(t.seq[t.w], 0);
  if (t.seq[t.w] != 0)
    printf("\n  %s holder: the handed waiter ran %d-th of %d", fiber_holder ? "fiber" : "thread",
           t.seq[t.w] + 1, FIRST_K + 1);
  weft_mutex_destroy(&t.m);
  weft_sem_destroy(&t.sem);
  weft_sem_destroy(&t.go);
}

static void test_mutex_handoff_runs_first(void) {
  if (!weft_test_fibers_expected()) return;
  weft_config c = weft_test_config();
  c.carriers = 1;
  CU_ASSERT_EQUAL_FATAL(weft_configure(&c), 0);
  first_case(true);
  first_case(false);
  CU_ASSERT_EQUAL(weft_test_default_config(), 0);
}

static void test_cond_errors(void) {
  weft_mutex_t m = WEFT_MUTEX_INITIALIZER;
  weft_cond_t c = WEFT_COND_INITIALIZER;
  CU_ASSERT_EQUAL(weft_cond_init(NULL), -EINVAL);
  CU_ASSERT_EQUAL(weft_cond_wait(NULL, &m, -1), -EINVAL);
  CU_ASSERT_EQUAL(weft_cond_wait(&c, NULL, -1), -EINVAL);
  CU_ASSERT_EQUAL(weft_cond_signal(NULL), -EINVAL);
  CU_ASSERT_EQUAL(weft_cond_broadcast(NULL), -EINVAL);
  weft_cond_destroy(NULL);
  CU_ASSERT_EQUAL(weft_cond_wait(&c, &m, -1), -EPERM); /* m not held */
  CU_ASSERT_EQUAL(weft_mutex_lock(&m), 0);
  CU_ASSERT_EQUAL(weft_cond_wait(&c, &m, -2), -EINVAL);
  CU_ASSERT_EQUAL(weft_cond_wait(&c, &m, INT64_MIN), -EINVAL);
  CU_ASSERT_EQUAL(weft_mutex_unlock(&m), 0); /* still held after the refusals */
  /* Signals with nobody waiting are not remembered. */
  CU_ASSERT_EQUAL(weft_cond_signal(&c), 0);
  CU_ASSERT_EQUAL(weft_cond_broadcast(&c), 0);
  CU_ASSERT_EQUAL(weft_mutex_lock(&m), 0);
  CU_ASSERT_EQUAL(weft_cond_wait(&c, &m, 0), -ETIMEDOUT);
  CU_ASSERT_EQUAL(weft_mutex_unlock(&m), 0);
  CU_ASSERT_EQUAL(weft_cond_init(&c), 0);
  weft_cond_destroy(&c);
  weft_mutex_destroy(&m);
}

/* Waiters that count themselves in under the mutex: once the count is complete, all are queued. */
typedef struct gate {
  weft_mutex_t *m;
  weft_cond_t *c;
  int ready; /* under m */
  int woken; /* under m */
  int rc_bad;
} gate;

static void *gate_waiter(void *arg) {
  gate *g = arg;
  weft_mutex_lock(g->m);
  g->ready++;
  /* One wait, no loop: there are no spurious wake-ups, so it returns only when signalled. */
  int rc = weft_cond_wait(g->c, g->m, -1);
  if (rc != 0) g->rc_bad++;
  g->woken++;
  if (weft_mutex_unlock(g->m) != 0) g->rc_bad++; /* held again on return */
  return NULL;
}

static int gate_count(gate *g, bool woken) {
  weft_mutex_lock(g->m);
  int n = woken ? g->woken : g->ready;
  weft_mutex_unlock(g->m);
  return n;
}

typedef struct gate_wait {
  gate *g;
  bool woken;
  int n;
} gate_wait;

static bool gate_reached(void *arg) {
  gate_wait *w = arg;
  return gate_count(w->g, w->woken) >= w->n;
}

static void cond_signal_body(void) {
  gate g = {&g_mu, &g_cv, 0, 0, 0};
  int nthr = 4, nfut = concurrent_futures(4), n = nthr + nfut;
  runner r[8];
  for (int i = 0; i < n; i++) start_any(&r[i], i < nthr, gate_waiter, &g);
  gate_wait all_ready = {&g, false, n};
  CU_ASSERT_TRUE_FATAL(eventually(gate_reached, &all_ready));
  /* One signal wakes exactly one. */
  CU_ASSERT_EQUAL(weft_cond_signal(&g_cv), 0);
  gate_wait one = {&g, true, 1};
  CU_ASSERT_TRUE(eventually(gate_reached, &one));
  weft_test_sleep_ms(20);
  CU_ASSERT_EQUAL(gate_count(&g, true), 1);
  /* Two more, one at a time, with the mutex held (the usual way). */
  weft_mutex_lock(&g_mu);
  CU_ASSERT_EQUAL(weft_cond_signal(&g_cv), 0);
  CU_ASSERT_EQUAL(weft_cond_signal(&g_cv), 0);
  weft_mutex_unlock(&g_mu);
  gate_wait three = {&g, true, 3};
  CU_ASSERT_TRUE(eventually(gate_reached, &three));
  weft_test_sleep_ms(10);
  CU_ASSERT_EQUAL(gate_count(&g, true), 3);
  /* A broadcast wakes the rest. */
  CU_ASSERT_EQUAL(weft_cond_broadcast(&g_cv), 0);
  for (int i = 0; i < n; i++) join_any(&r[i]);
  CU_ASSERT_EQUAL(g.woken, n);
  CU_ASSERT_EQUAL(g.rc_bad, 0);
  CU_ASSERT_EQUAL(__atomic_load_n(&g_cv.waiters_, __ATOMIC_RELAXED), 0);
}

static void test_cond_signal(void) { both_modes(cond_signal_body); }

/* Broadcast wakes every waiter, fibers and threads, in one call. */
static int bcast_fn(void *ctx, size_t i) {
  (void)i;
  gate_waiter(ctx);
  return 0;
}

static void cond_broadcast_body(void) {
  weft_mutex_t m = WEFT_MUTEX_INITIALIZER;
  weft_cond_t c = WEFT_COND_INITIALIZER;
  gate g = {&m, &c, 0, 0, 0};
  size_t nthr = 8, nfib = weft_fibers_available() ? scaled(200, 4) : 0;
  mixed mx;
  mixed_start(&mx, nfib, nthr, bcast_fn, &g);
  gate_wait all_ready = {&g, false, (int)(nfib + nthr)};
  CU_ASSERT_TRUE_FATAL(eventually(gate_reached, &all_ready));
  CU_ASSERT_EQUAL(weft_cond_broadcast(&c), 0);
  CU_ASSERT_EQUAL(mixed_join(&mx), 0);
  CU_ASSERT_EQUAL(g.woken, (int)(nfib + nthr));
  CU_ASSERT_EQUAL(g.rc_bad, 0);
  weft_cond_destroy(&c);
  weft_mutex_destroy(&m);
}

static void test_cond_broadcast(void) { both_modes(cond_broadcast_body); }

/* A timed-out wait holds the mutex again, and leaves the cond as it was. */
static void *cond_deadline_fn(void *arg) {
  (void)arg;
  weft_mutex_t m = WEFT_MUTEX_INITIALIZER;
  weft_cond_t c = WEFT_COND_INITIALIZER;
  int bad = 0;
  weft_mutex_lock(&m);
  int64_t t0 = weft_now_ns();
  if (weft_cond_wait(&c, &m, in_ms(20)) != -ETIMEDOUT) bad |= 1;
  if (weft_now_ns() - t0 < 20 * MS) bad |= 2;
  if (weft_mutex_lock(&m) != -EDEADLK) bad |= 4; /* held again */
  if (weft_cond_wait(&c, &m, 0) != -ETIMEDOUT) bad |= 8;
  if (weft_cond_wait(&c, &m, 1) != -ETIMEDOUT) bad |= 16; /* long past */
  if (c.waiters_ != 0 || c.head_ != NULL) bad |= 32;
  if (weft_mutex_unlock(&m) != 0) bad |= 64;
  weft_cond_destroy(&c);
  weft_mutex_destroy(&m);
  return (void *)(intptr_t)bad;
}

static void test_cond_deadline(void) {
  runner r;
  start_any(&r, true, cond_deadline_fn, NULL);
  CU_ASSERT_EQUAL((intptr_t)join_any(&r), 0);
  start_any(&r, false, cond_deadline_fn, NULL);
  CU_ASSERT_EQUAL((intptr_t)join_any(&r), 0);
}

/*
 * Many waiters with deadlines of 1 to 3 ms race a stream of signals: every
 * token is taken, the timed-out waiters leave the cond consistent (no
 * waiter counted that is not on the list), and the mutex is always held
 * again after a wait, timed out or not.
 */
typedef struct cond_race {
  weft_mutex_t m;
  weft_cond_t c;
  int tokens; /* under m: signalled work not yet taken */
  int taken;  /* under m */
  int total;
} cond_race;

static int cond_race_fn(void *ctx, size_t i) {
  cond_race *cr = ctx;
  weft_mutex_lock(&cr->m);
  for (;;) {
    if (cr->tokens > 0) {
      cr->tokens--;
      cr->taken++;
    } else if (cr->taken == cr->total) {
      break;
    } else {
      int rc = weft_cond_wait(&cr->c, &cr->m, in_ms((int64_t)(1 + i % 3)));
      if (rc != 0 && rc != -ETIMEDOUT) {
        weft_mutex_unlock(&cr->m);
        return 1;
      }
    }
  }
  weft_mutex_unlock(&cr->m);
  weft_cond_broadcast(&cr->c); /* let the others see the end */
  return 0;
}

static int cond_race_post(void *ctx, size_t i) {
  cond_race *cr = ctx;
  (void)i;
  for (int k = 0; k < 1000 && k < cr->total; k++) {
    weft_mutex_lock(&cr->m);
    cr->tokens++;
    weft_cond_signal(&cr->c);
    weft_mutex_unlock(&cr->m);
    if ((k & 7) == 0) weft_yield();
  }
  return 0;
}

static void cond_race_body(void) {
  cond_race cr;
  memset(&cr, 0, sizeof cr);
  weft_mutex_init(&cr.m);
  weft_cond_init(&cr.c);
  cr.total = (int)scaled(1000, 10);
  mixed waiters;
  mixed_start(&waiters, weft_fibers_available() ? 16 : 0, 4, cond_race_fn, &cr);
  CU_ASSERT_EQUAL(run_mixed(0, 1, cond_race_post, &cr), 0);
  CU_ASSERT_EQUAL(mixed_join(&waiters), 0);
  CU_ASSERT_EQUAL(cr.taken, cr.total);
  CU_ASSERT_EQUAL(cr.tokens, 0);
  CU_ASSERT_EQUAL(cr.c.waiters_, 0);
  weft_cond_destroy(&cr.c);
  weft_mutex_destroy(&cr.m);
}

static void test_cond_timeout_race(void) { both_modes(cond_race_body); }

/*
 * Signals racing waiters whose deadlines keep firing: "noise" waiters wait
 * with deadlines of tens of microseconds, over and over, and pass on any
 * signal they get; each consumer needs one signal for its token (it gives
 * up after 10 s: a lost signal fails the test). A stress test; the next one
 * makes the race with a leaving waiter deterministic.
 */
typedef struct relay {
  weft_mutex_t m;
  weft_cond_t c;
  int tokens;  /* under m */
  int arrived; /* consumers that have started: under m */
  atomic_int stop;
  atomic_int lost;
} relay;

static int relay_noise(void *ctx, size_t i) {
  relay *rl = ctx;
  weft_mutex_lock(&rl->m);
  while (!atomic_load(&rl->stop)) {
    int rc = weft_cond_wait(&rl->c, &rl->m, weft_now_ns() + (int64_t)(1 + i % 4) * 20000);
    if (rc == 0) weft_cond_signal(&rl->c); /* not for us: pass it on */
  }
  weft_mutex_unlock(&rl->m);
  return 0;
}

static int relay_consume(void *ctx, size_t i) {
  relay *rl = ctx;
  (void)i;
  weft_mutex_lock(&rl->m);
  rl->arrived++;
  while (rl->tokens == 0) {
    if (weft_cond_wait(&rl->c, &rl->m, in_ms(10000)) == -ETIMEDOUT) {
      atomic_store(&rl->lost, 1);
      break;
    }
  }
  if (rl->tokens > 0) rl->tokens--;
  weft_mutex_unlock(&rl->m);
  return 0;
}

static void cond_relay_body(void) {
  relay rl;
  memset(&rl, 0, sizeof rl);
  weft_mutex_init(&rl.m);
  weft_cond_init(&rl.c);
  bool fibers = weft_fibers_available();
  size_t cfib = fibers ? scaled(300, 6) : 0, cthr = 4;
  int total = (int)(cfib + cthr);
  mixed noise, consumers;
  mixed_start(&noise, fibers ? 6 : 0, 2, relay_noise, &rl);
  mixed_start(&consumers, cfib, cthr, relay_consume, &rl);
  int64_t end = in_ms(10000);
  for (;;) {
    weft_mutex_lock(&rl.m);
    int arrived = rl.arrived;
    weft_mutex_unlock(&rl.m);
    if (arrived == total || weft_now_ns() > end) break;
    weft_test_sleep_ms(1);
  }
  for (int k = 0; k < total; k++) {
    weft_mutex_lock(&rl.m);
    rl.tokens++;
    weft_cond_signal(&rl.c);
    weft_mutex_unlock(&rl.m);
    sched_yield();
  }
  CU_ASSERT_EQUAL(mixed_join(&consumers), 0);
  atomic_store(&rl.stop, 1);
  CU_ASSERT_EQUAL(mixed_join(&noise), 0);
  CU_ASSERT_EQUAL(atomic_load(&rl.lost), 0);
  CU_ASSERT_EQUAL(rl.tokens, 0);
  weft_cond_destroy(&rl.c);
  weft_mutex_destroy(&rl.m);
}

static void test_cond_signal_not_lost(void) { both_modes(cond_relay_body); }

/*
 * The same, made likely on purpose: the first waiter is cancelled and the
 * signal comes at once, while the cancelled one has not yet run to unlink
 * itself. The signal must go on to the second waiter (which otherwise times
 * out after 2 s).
 */
typedef struct leaver {
  weft_mutex_t m;
  weft_cond_t c;
} leaver;

static void *leaver_wait(void *arg) {
  leaver *lv = arg;
  weft_mutex_lock(&lv->m);
  int rc = weft_cond_wait(&lv->c, &lv->m, in_ms(2000));
  weft_mutex_unlock(&lv->m);
  return (void *)(intptr_t)rc;
}

static bool cond_one_waiter(void *arg) {
  return __atomic_load_n(&((weft_cond_t *)arg)->waiters_, __ATOMIC_RELAXED) == 1;
}
static bool cond_two_waiters(void *arg) {
  return __atomic_load_n(&((weft_cond_t *)arg)->waiters_, __ATOMIC_RELAXED) == 2;
}

static void cond_skips_leaver_body(void) {
  leaver lv;
  weft_mutex_init(&lv.m);
  weft_cond_init(&lv.c);
  size_t rounds = scaled(20, 4);
  for (size_t k = 0; k < rounds; k++) {
    weft_future *first;
    CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_BLOCKING, leaver_wait, &lv, &first), 0);
    CU_ASSERT_TRUE_FATAL(eventually(cond_one_waiter, &lv.c));
    runner second;
    start_any(&second, true, leaver_wait, &lv);
    CU_ASSERT_TRUE_FATAL(eventually(cond_two_waiters, &lv.c));
    weft_future_cancel(first);
    weft_cond_signal(&lv.c);
    CU_ASSERT_EQUAL((intptr_t)join_any(&second), 0);
    void *r = NULL;
    CU_ASSERT_EQUAL(weft_future_get(first, -1, &r), 0);
    CU_ASSERT_EQUAL((intptr_t)r, -ECANCELED);
    weft_future_free(first);
  }
  weft_cond_destroy(&lv.c);
  weft_mutex_destroy(&lv.m);
}

static void test_cond_signal_skips_leaver(void) { both_modes(cond_skips_leaver_body); }

/* A blocking future parked in cond_wait is woken by cancellation, with the mutex held again. */
typedef struct cancel_ctx {
  weft_mutex_t m;
  weft_cond_t c;
  weft_sem_t s;
  weft_chan_t *ch;
  atomic_int entered;
  int ready; /* under m */
} cancel_ctx;

static void *cond_cancel_fn(void *arg) {
  cancel_ctx *cc = arg;
  weft_mutex_lock(&cc->m);
  cc->ready = 1;
  int rc = weft_cond_wait(&cc->c, &cc->m, -1);
  if (weft_mutex_unlock(&cc->m) != 0) return (void *)(intptr_t)-1000; /* not held again */
  /* Once cancelled, every cancellation point says so at once. */
  weft_mutex_lock(&cc->m);
  int again = weft_cond_wait(&cc->c, &cc->m, in_ms(10000));
  weft_mutex_unlock(&cc->m);
  return (void *)(intptr_t)(again == -ECANCELED ? rc : -2000);
}

static bool cancel_ready(void *arg) {
  cancel_ctx *cc = arg;
  weft_mutex_lock(&cc->m);
  int r = cc->ready;
  weft_mutex_unlock(&cc->m);
  return r != 0;
}

static void cond_cancel_body(void) {
  cancel_ctx cc;
  memset(&cc, 0, sizeof cc);
  weft_mutex_init(&cc.m);
  weft_cond_init(&cc.c);
  weft_future *f;
  CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_BLOCKING, cond_cancel_fn, &cc, &f), 0);
  CU_ASSERT_TRUE_FATAL(eventually(cancel_ready, &cc)); /* it is queued: it set ready under m */
  CU_ASSERT_EQUAL(weft_future_cancel(f), -EBUSY);
  void *r = NULL;
  CU_ASSERT_EQUAL(weft_future_get(f, -1, &r), 0);
  CU_ASSERT_EQUAL((intptr_t)r, -ECANCELED);
  weft_future_free(f);
  CU_ASSERT_EQUAL(cc.c.waiters_, 0);
  CU_ASSERT_EQUAL(weft_mutex_trylock(&cc.m), 0);
  CU_ASSERT_EQUAL(weft_mutex_unlock(&cc.m), 0);
  weft_cond_destroy(&cc.c);
  weft_mutex_destroy(&cc.m);
}

static void test_cond_cancel(void) { both_modes(cond_cancel_body); }

/* The waiter frees the cond and mutex as soon as it is through; the signaller is still unlocking. */
typedef struct heap_cv {
  weft_mutex_t m;
  weft_cond_t c;
  int flag;
} heap_cv;

static void *cv_last_user(void *arg) {
  heap_cv *h = arg;
  weft_mutex_lock(&h->m);
  while (!h->flag) weft_cond_wait(&h->c, &h->m, -1);
  weft_mutex_unlock(&h->m);
  weft_cond_destroy(&h->c);
  weft_mutex_destroy(&h->m);
  free(h);
  return NULL;
}

static bool cv_has_waiter(void *arg) {
  return __atomic_load_n(&((heap_cv *)arg)->c.waiters_, __ATOMIC_RELAXED) == 1;
}

static void test_cond_free_after_wake(void) {
  size_t rounds = scaled(300, 10);
  for (size_t r = 0; r < rounds; r++) {
    heap_cv *h = calloc(1, sizeof *h);
    runner u;
    start_any(&u, (r & 1) != 0, cv_last_user, h);
    if ((r & 2) == 0) CU_ASSERT_TRUE(eventually(cv_has_waiter, h));
    weft_mutex_lock(&h->m);
    h->flag = 1;
    weft_cond_signal(&h->c);
    weft_mutex_unlock(&h->m); /* h may be freed from here on */
    join_any(&u);
  }
}

/* ======================================================================================= */
/* Semaphore                                                                               */
/* ======================================================================================= */

static uint32_t sem_waiters(weft_sem_t *s) {
  return (uint32_t)(__atomic_load_n(&s->value_, __ATOMIC_RELAXED) >> 32);
}
static uint32_t sem_units(weft_sem_t *s) { return (uint32_t)__atomic_load_n(&s->value_, __ATOMIC_RELAXED); }

static void test_sem_errors(void) {
  weft_sem_t s;
  CU_ASSERT_EQUAL(weft_sem_init(NULL, 1), -EINVAL);
  CU_ASSERT_EQUAL(weft_sem_wait(NULL, -1), -EINVAL);
  CU_ASSERT_EQUAL(weft_sem_post(NULL), -EINVAL);
  weft_sem_destroy(NULL);
  CU_ASSERT_EQUAL(weft_sem_init(&s, 1), 0);
  CU_ASSERT_EQUAL(weft_sem_wait(&s, -2), -EINVAL);
  CU_ASSERT_EQUAL(weft_sem_wait(&s, INT64_MIN), -EINVAL);
  CU_ASSERT_EQUAL(sem_units(&s), 1); /* refusals took nothing */
  CU_ASSERT_EQUAL(weft_sem_wait(&s, 0), 0);
  CU_ASSERT_EQUAL(weft_sem_wait(&s, 0), -ETIMEDOUT);
  CU_ASSERT_EQUAL(weft_sem_post(&s), 0);
  CU_ASSERT_EQUAL(weft_sem_wait(&s, -1), 0);
  weft_sem_destroy(&s);

  /* The count tops out at UINT32_MAX, and a refused post changes nothing. */
  CU_ASSERT_EQUAL(weft_sem_init(&s, UINT32_MAX), 0);
  CU_ASSERT_EQUAL(weft_sem_post(&s), -EOVERFLOW);
  CU_ASSERT_EQUAL(sem_units(&s), UINT32_MAX);
  CU_ASSERT_EQUAL(weft_sem_wait(&s, 0), 0);
  CU_ASSERT_EQUAL(weft_sem_post(&s), 0);
  CU_ASSERT_EQUAL(weft_sem_post(&s), -EOVERFLOW);
  CU_ASSERT_EQUAL(sem_waiters(&s), 0);
  weft_sem_destroy(&s);
}

static void *sem_deadline_fn(void *arg) {
  (void)arg;
  weft_sem_t s;
  weft_sem_init(&s, 0);
  int bad = 0;
  int64_t t0 = weft_now_ns();
  if (weft_sem_wait(&s, in_ms(20)) != -ETIMEDOUT) bad |= 1;
  if (weft_now_ns() - t0 < 20 * MS) bad |= 2;
  if (weft_sem_wait(&s, 0) != -ETIMEDOUT) bad |= 4;
  if (weft_sem_wait(&s, 1) != -ETIMEDOUT) bad |= 8;
  if (s.value_ != 0 || s.head_ != NULL) bad |= 16; /* nothing counted, nobody queued */
  weft_sem_post(&s);
  if (weft_sem_wait(&s, in_ms(20)) != 0) bad |= 32;
  if (weft_sem_wait(&s, 0) != -ETIMEDOUT) bad |= 64;
  weft_sem_destroy(&s);
  return (void *)(intptr_t)bad;
}

static void test_sem_deadline(void) {
  runner r;
  start_any(&r, true, sem_deadline_fn, NULL);
  CU_ASSERT_EQUAL((intptr_t)join_any(&r), 0);
  start_any(&r, false, sem_deadline_fn, NULL);
  CU_ASSERT_EQUAL((intptr_t)join_any(&r), 0);
}

/* A semaphore as a bounded resource: never more than N holders at once. */
#define SEM_N 3

typedef struct bounded {
  weft_sem_t s;
  atomic_int holders;
  atomic_int peak;
  size_t rounds;
} bounded;

static int bounded_fn(void *ctx, size_t i) {
  bounded *b = ctx;
  for (size_t k = 0; k < b->rounds; k++) {
    if (weft_sem_wait(&b->s, -1) != 0) return 1;
    int h = atomic_fetch_add(&b->holders, 1) + 1;
    int p = atomic_load(&b->peak);
    while (h > p && !atomic_compare_exchange_weak(&b->peak, &p, h)) {
    }
    if (((k + i) & 3) == 0) weft_yield();
    atomic_fetch_sub(&b->holders, 1);
    if (weft_sem_post(&b->s) != 0) return 2;
  }
  return 0;
}

static void sem_bounded_body(void) {
  bounded b;
  memset(&b, 0, sizeof b);
  weft_sem_init(&b.s, SEM_N);
  b.rounds = scaled(50, 5);
  CU_ASSERT_EQUAL(run_mixed(scaled(500, 10), 8, bounded_fn, &b), 0);
  CU_ASSERT(atomic_load(&b.peak) <= SEM_N);
  CU_ASSERT(atomic_load(&b.peak) >= 1);
  /* Exactly the N units are back. */
  CU_ASSERT_EQUAL(sem_waiters(&b.s), 0);
  for (int k = 0; k < SEM_N; k++) CU_ASSERT_EQUAL(weft_sem_wait(&b.s, 0), 0);
  CU_ASSERT_EQUAL(weft_sem_wait(&b.s, 0), -ETIMEDOUT);
  weft_sem_destroy(&b.s);
}

static void test_sem_bounded(void) { both_modes(sem_bounded_body); }

/* Waiters with short deadlines race posts: every unit is taken exactly once or is still there. */
typedef struct sem_race {
  weft_sem_t s;
  atomic_int done;
  atomic_long got;
  long posts;
} sem_race;

static int sem_race_wait(void *ctx, size_t i) {
  sem_race *sr = ctx;
  while (!atomic_load(&sr->done)) {
    int rc = weft_sem_wait(&sr->s, weft_now_ns() + (int64_t)(1 + i % 4) * 100000);
    if (rc == 0)
      atomic_fetch_add(&sr->got, 1);
    else if (rc != -ETIMEDOUT)
      return 1;
  }
  return 0;
}

static int sem_race_post(void *ctx, size_t i) {
  sem_race *sr = ctx;
  for (long k = 0; k < sr->posts; k++) {
    if (weft_sem_post(&sr->s) != 0) return 1;
    if (((size_t)k + i) % 16 == 0) weft_test_sleep_ms(1);
  }
  return 0;
}

static void sem_race_body(void) {
  sem_race sr;
  memset(&sr, 0, sizeof sr);
  weft_sem_init(&sr.s, 0);
  sr.posts = (long)scaled(2000, 10);
  mixed waiters;
  mixed_start(&waiters, weft_fibers_available() ? 32 : 0, 4, sem_race_wait, &sr);
  CU_ASSERT_EQUAL(run_mixed(0, 2, sem_race_post, &sr), 0);
  weft_test_sleep_ms(5);
  atomic_store(&sr.done, 1);
  CU_ASSERT_EQUAL(mixed_join(&waiters), 0);
  long left = 0;
  while (weft_sem_wait(&sr.s, 0) == 0) left++;
  CU_ASSERT_EQUAL(atomic_load(&sr.got) + left, 2 * sr.posts);
  CU_ASSERT_EQUAL(sem_waiters(&sr.s), 0);
  weft_sem_destroy(&sr.s);
}

static void test_sem_timeout_race(void) { both_modes(sem_race_body); }

static void *sem_cancel_fn(void *arg) {
  cancel_ctx *cc = arg;
  atomic_store(&cc->entered, 1);
  int rc = weft_sem_wait(&cc->s, -1);
  if (rc == 0) return (void *)(intptr_t)0;
  /* Once cancelled, a wait gives -ECANCELED at once, units or not. */
  int again = weft_sem_wait(&cc->s, in_ms(10000));
  return (void *)(intptr_t)(again == -ECANCELED ? rc : -2000);
}

static bool sem_has_waiter(void *arg) { return sem_waiters(arg) == 1; }

static void sem_cancel_body(void) {
  cancel_ctx cc;
  memset(&cc, 0, sizeof cc);
  weft_sem_init(&cc.s, 0);
  weft_future *f;
  CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_BLOCKING, sem_cancel_fn, &cc, &f), 0);
  CU_ASSERT_TRUE_FATAL(eventually(sem_has_waiter, &cc.s));
  CU_ASSERT_EQUAL(weft_future_cancel(f), -EBUSY);
  void *r = NULL;
  CU_ASSERT_EQUAL(weft_future_get(f, -1, &r), 0);
  CU_ASSERT_EQUAL((intptr_t)r, -ECANCELED);
  weft_future_free(f);
  CU_ASSERT_EQUAL(cc.s.value_, 0); /* nobody queued, no unit made or lost */
  CU_ASSERT_EQUAL(weft_sem_post(&cc.s), 0);
  CU_ASSERT_EQUAL(weft_sem_wait(&cc.s, 0), 0);

  /* A post racing the cancellation: the unit ends with the waiter or stays, never both or neither. */
  size_t rounds = scaled(40, 4);
  for (size_t k = 0; k < rounds; k++) {
    CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_BLOCKING, sem_cancel_fn, &cc, &f), 0);
    CU_ASSERT_TRUE_FATAL(eventually(sem_has_waiter, &cc.s));
    if (k & 1) {
      weft_future_cancel(f);
      weft_sem_post(&cc.s);
    } else {
      weft_sem_post(&cc.s);
      weft_future_cancel(f);
    }
    CU_ASSERT_EQUAL(weft_future_get(f, -1, &r), 0);
    weft_future_free(f);
    int left = weft_sem_wait(&cc.s, 0) == 0;
    CU_ASSERT_TRUE(((intptr_t)r == 0 && !left) || ((intptr_t)r == -ECANCELED && left));
    CU_ASSERT_EQUAL(cc.s.value_, 0);
  }
  weft_sem_destroy(&cc.s);
}

static void test_sem_cancel(void) { both_modes(sem_cancel_body); }

/* A semaphore as a completion: the waiter frees it as soon as its wait returns. */
static void *sem_last_user(void *arg) {
  weft_sem_t *s = arg;
  int rc = weft_sem_wait(s, -1);
  weft_sem_destroy(s);
  free(s);
  return (void *)(intptr_t)rc;
}

static void test_sem_free_after_post(void) {
  size_t rounds = scaled(300, 10);
  for (size_t r = 0; r < rounds; r++) {
    weft_sem_t *s = malloc(sizeof *s);
    weft_sem_init(s, 0);
    runner u;
    start_any(&u, (r & 1) != 0, sem_last_user, s);
    if ((r & 2) == 0) CU_ASSERT_TRUE(eventually(sem_has_waiter, s));
    weft_sem_post(s); /* s may be freed from here on */
    CU_ASSERT_EQUAL((intptr_t)join_any(&u), 0);
  }
}

/* ======================================================================================= */
/* Channel                                                                                 */
/* ======================================================================================= */

static void test_chan_errors(void) {
  weft_chan_t *ch = (weft_chan_t *)0x1;
  uint64_t v = 5;
  CU_ASSERT_EQUAL(weft_chan_create(1, 8, NULL), -EINVAL);
  CU_ASSERT_EQUAL(weft_chan_create(SIZE_MAX, 2, &ch), -EINVAL);
  CU_ASSERT_EQUAL(weft_chan_create(SIZE_MAX / 8, 8, &ch), -EINVAL);
  CU_ASSERT_EQUAL(ch, (weft_chan_t *)0x1); /* untouched on error */
#ifdef WEFT_TESTING
  weft__fault_arm(1u << WEFT__F_MALLOC, 0, false);
  CU_ASSERT_EQUAL(weft_chan_create(1, 8, &ch), -ENOMEM);
  weft__fault_disarm();
  CU_ASSERT_EQUAL(ch, (weft_chan_t *)0x1);
#endif
  CU_ASSERT_EQUAL_FATAL(weft_chan_create(2, 8, &ch), 0);
  CU_ASSERT_EQUAL(weft_chan_send(NULL, &v, -1), -EINVAL);
  CU_ASSERT_EQUAL(weft_chan_send(ch, NULL, -1), -EINVAL);
  CU_ASSERT_EQUAL(weft_chan_send(ch, &v, -2), -EINVAL);
  CU_ASSERT_EQUAL(weft_chan_send(ch, &v, INT64_MIN), -EINVAL);
  CU_ASSERT_EQUAL(weft_chan_recv(NULL, &v, -1), -EINVAL);
  CU_ASSERT_EQUAL(weft_chan_recv(ch, NULL, -1), -EINVAL);
  CU_ASSERT_EQUAL(weft_chan_recv(ch, &v, -2), -EINVAL);
  CU_ASSERT_EQUAL(weft_chan_close(NULL), -EINVAL);
  weft_chan_free(NULL);
  CU_ASSERT_EQUAL(weft_chan_recv(ch, &v, 0), -ETIMEDOUT); /* nothing was sent by the refusals */
  CU_ASSERT_EQUAL(v, 5);
  weft_chan_free(ch);

  /* Zero-size elements: a channel of signals; NULL elements are fine then. */
  CU_ASSERT_EQUAL_FATAL(weft_chan_create(1, 0, &ch), 0);
  CU_ASSERT_EQUAL(weft_chan_send(ch, NULL, 0), 0);
  CU_ASSERT_EQUAL(weft_chan_send(ch, NULL, 0), -ETIMEDOUT);
  CU_ASSERT_EQUAL(weft_chan_recv(ch, NULL, 0), 0);
  CU_ASSERT_EQUAL(weft_chan_recv(ch, NULL, 0), -ETIMEDOUT);
  weft_chan_free(ch);
  /* A huge unbuffered channel is small. */
  CU_ASSERT_EQUAL_FATAL(weft_chan_create(0, SIZE_MAX / 2, &ch), 0);
  weft_chan_free(ch);
}

/* Every value of every producer is received exactly once, fibers and threads on both sides. */
typedef struct mpmc {
  weft_chan_t *ch;
  size_t per; /* values per producer */
  size_t total;
  atomic_size_t producers_left;
  atomic_uchar *seen;
  atomic_ullong sum;
  atomic_size_t received;
  atomic_int dup;
} mpmc;

static int mpmc_produce(void *ctx, size_t i) {
  mpmc *m = ctx;
  int rc = 0;
  for (size_t k = 0; k < m->per && rc == 0; k++) {
    uint64_t v = i * m->per + k;
    if (weft_chan_send(m->ch, &v, -1) != 0) rc = 1;
  }
  if (atomic_fetch_sub(&m->producers_left, 1) == 1 && weft_chan_close(m->ch) != 0) rc = 2;
  return rc;
}

static int mpmc_consume(void *ctx, size_t i) {
  mpmc *m = ctx;
  (void)i;
  for (;;) {
    uint64_t v;
    int rc = weft_chan_recv(m->ch, &v, -1);
    if (rc == -EPIPE) return 0;
    if (rc != 0) return 1;
    if (v >= m->total) return 2;
    if (atomic_fetch_add(&m->seen[v], 1) != 0) atomic_store(&m->dup, 1);
    atomic_fetch_add(&m->sum, v);
    atomic_fetch_add(&m->received, 1);
  }
}

static void chan_mpmc_body(void) {
  static const size_t caps[] = {0, 1, 16};
  bool fibers = weft_fibers_available();
  for (size_t c = 0; c < 3; c++) {
    mpmc m;
    memset(&m, 0, sizeof m);
    CU_ASSERT_EQUAL_FATAL(weft_chan_create(caps[c], sizeof(uint64_t), &m.ch), 0);
    size_t pfib = fibers ? scaled(200, 10) : 8, pthr = 4, cfib = fibers ? scaled(200, 10) : 8, cthr = 4;
    m.per = scaled(20, 2);
    m.total = (pfib + pthr) * m.per;
    atomic_init(&m.producers_left, pfib + pthr);
    m.seen = calloc(m.total, sizeof *m.seen);
    mixed prod, cons;
    mixed_start(&cons, cfib, cthr, mpmc_consume, &m);
    mixed_start(&prod, pfib, pthr, mpmc_produce, &m);
    CU_ASSERT_EQUAL(mixed_join(&prod), 0);
    CU_ASSERT_EQUAL(mixed_join(&cons), 0);
    CU_ASSERT_EQUAL(atomic_load(&m.received), m.total);
    CU_ASSERT_EQUAL(atomic_load(&m.dup), 0);
    CU_ASSERT_EQUAL(atomic_load(&m.sum), (unsigned long long)m.total * (m.total - 1) / 2);
    size_t missing = 0;
    for (size_t v = 0; v < m.total; v++) missing += atomic_load(&m.seen[v]) != 1;
    CU_ASSERT_EQUAL(missing, 0);
    free(m.seen);
    weft_chan_free(m.ch);
  }
}

static void test_chan_mpmc(void) { both_modes(chan_mpmc_body); }

/* One producer, one consumer: the channel is FIFO, across a fiber and a thread each way. */
typedef struct fifo {
  weft_chan_t *ch;
  uint32_t n;
} fifo;

static void *fifo_send(void *arg) {
  fifo *f = arg;
  for (uint32_t k = 0; k < f->n; k++)
    if (weft_chan_send(f->ch, &k, -1) != 0) return (void *)1;
  return NULL;
}

static void *fifo_recv(void *arg) {
  fifo *f = arg;
  for (uint32_t k = 0; k < f->n; k++) {
    uint32_t v;
    if (weft_chan_recv(f->ch, &v, -1) != 0 || v != k) return (void *)1;
  }
  return NULL;
}

static void test_chan_fifo(void) {
  for (int dir = 0; dir < 2; dir++) {
    fifo f = {NULL, (uint32_t)scaled(20000, 20)};
    CU_ASSERT_EQUAL_FATAL(weft_chan_create(4, sizeof(uint32_t), &f.ch), 0);
    runner s, r;
    start_any(&r, dir == 0, fifo_recv, &f);
    start_any(&s, dir != 0, fifo_send, &f);
    CU_ASSERT_PTR_NULL(join_any(&s));
    CU_ASSERT_PTR_NULL(join_any(&r));
    weft_chan_free(f.ch);
  }
}

typedef struct blocked {
  weft_chan_t *ch;
  atomic_int entered;
} blocked;

static void *blocked_recv(void *arg) {
  blocked *b = arg;
  uint64_t v = 77;
  atomic_fetch_add(&b->entered, 1);
  int rc = weft_chan_recv(b->ch, &v, -1);
  return (void *)(intptr_t)(v == 77 ? rc : -1000); /* untouched on error */
}

static void *blocked_send(void *arg) {
  blocked *b = arg;
  uint64_t v = 99;
  atomic_fetch_add(&b->entered, 1);
  return (void *)(intptr_t)weft_chan_send(b->ch, &v, -1);
}

/* Start n blocked callers (threads and futures), let them park, close, and check they all got -EPIPE. */
static void close_wakes(weft_chan_t *ch, void *(*fn)(void *)) {
  blocked b = {ch, 0};
  int nthr = 3, nfut = concurrent_futures(3), n = nthr + nfut;
  runner r[6];
  for (int i = 0; i < n; i++) start_any(&r[i], i < nthr, fn, &b);
  while (atomic_load(&b.entered) < n) weft_test_sleep_ms(1);
  weft_test_sleep_ms(20); /* let them park (if they have not, they get -EPIPE at once all the same) */
  CU_ASSERT_EQUAL(weft_chan_close(ch), 0);
  for (int i = 0; i < n; i++) CU_ASSERT_EQUAL((intptr_t)join_any(&r[i]), -EPIPE);
}

static void chan_close_body(void) {
  weft_chan_t *ch;
  uint64_t v;
  CU_ASSERT_EQUAL_FATAL(weft_chan_create(2, sizeof v, &ch), 0);
  v = 1;
  CU_ASSERT_EQUAL(weft_chan_send(ch, &v, -1), 0);
  v = 2;
  CU_ASSERT_EQUAL(weft_chan_send(ch, &v, -1), 0);
  CU_ASSERT_EQUAL(weft_chan_close(ch), 0);
  CU_ASSERT_EQUAL(weft_chan_close(ch), -EPIPE);
  v = 3;
  CU_ASSERT_EQUAL(weft_chan_send(ch, &v, -1), -EPIPE);
  CU_ASSERT_EQUAL(weft_chan_send(ch, &v, 0), -EPIPE);
  CU_ASSERT_EQUAL(weft_chan_recv(ch, &v, -1), 0); /* drains first */
  CU_ASSERT_EQUAL(v, 1);
  CU_ASSERT_EQUAL(weft_chan_recv(ch, &v, 0), 0);
  CU_ASSERT_EQUAL(v, 2);
  CU_ASSERT_EQUAL(weft_chan_recv(ch, &v, -1), -EPIPE);
  CU_ASSERT_EQUAL(weft_chan_recv(ch, &v, 0), -EPIPE);
  CU_ASSERT_EQUAL(v, 2);
  weft_chan_free(ch);

  /* Receivers blocked on an empty channel wake with -EPIPE. */
  CU_ASSERT_EQUAL_FATAL(weft_chan_create(0, sizeof v, &ch), 0);
  close_wakes(ch, blocked_recv);
  weft_chan_free(ch);
  CU_ASSERT_EQUAL_FATAL(weft_chan_create(4, sizeof v, &ch), 0);
  close_wakes(ch, blocked_recv);
  weft_chan_free(ch);

  /* Senders blocked on a full (or unbuffered) channel wake with -EPIPE; what was buffered stays. */
  CU_ASSERT_EQUAL_FATAL(weft_chan_create(0, sizeof v, &ch), 0);
  close_wakes(ch, blocked_send);
  CU_ASSERT_EQUAL(weft_chan_recv(ch, &v, 0), -EPIPE);
  weft_chan_free(ch);
  CU_ASSERT_EQUAL_FATAL(weft_chan_create(1, sizeof v, &ch), 0);
  v = 5;
  CU_ASSERT_EQUAL(weft_chan_send(ch, &v, 0), 0);
  close_wakes(ch, blocked_send);
  CU_ASSERT_EQUAL(weft_chan_recv(ch, &v, 0), 0);
  CU_ASSERT_EQUAL(v, 5);
  CU_ASSERT_EQUAL(weft_chan_recv(ch, &v, -1), -EPIPE);
  weft_chan_free(ch);
}

static void test_chan_close(void) { both_modes(chan_close_body); }

/* Unbuffered: a send returns only once a receiver has taken the element. */
typedef struct rendezvous {
  weft_chan_t *ch;
  atomic_int sent;
} rendezvous;

static void *rv_send(void *arg) {
  rendezvous *rv = arg;
  uint64_t v = 42;
  int rc = weft_chan_send(rv->ch, &v, -1);
  atomic_store(&rv->sent, 1);
  return (void *)(intptr_t)rc;
}

static void *rv_recv(void *arg) {
  rendezvous *rv = arg;
  uint64_t v = 0;
  int rc = weft_chan_recv(rv->ch, &v, -1);
  return (void *)(intptr_t)(rc == 0 ? (int)v : rc);
}

static void test_chan_unbuffered(void) {
  for (int mode = 0; mode < 2; mode++) {
    rendezvous rv = {NULL, 0};
    uint64_t v = 0;
    CU_ASSERT_EQUAL_FATAL(weft_chan_create(0, sizeof v, &rv.ch), 0);
    CU_ASSERT_EQUAL(weft_chan_send(rv.ch, &v, 0), -ETIMEDOUT); /* nobody to take it */
    CU_ASSERT_EQUAL(weft_chan_recv(rv.ch, &v, 0), -ETIMEDOUT);
    runner r;
    start_any(&r, mode == 0, rv_send, &rv);
    weft_test_sleep_ms(30);
    CU_ASSERT_EQUAL(atomic_load(&rv.sent), 0); /* still waiting for a receiver */
    CU_ASSERT_EQUAL(weft_chan_recv(rv.ch, &v, in_ms(10000)), 0);
    CU_ASSERT_EQUAL(v, 42);
    CU_ASSERT_EQUAL((intptr_t)join_any(&r), 0);
    CU_ASSERT_EQUAL(atomic_load(&rv.sent), 1);

    /* With a receiver parked, a send with deadline 0 goes through. */
    start_any(&r, mode != 0, rv_recv, &rv);
    v = 43;
    int rc;
    int64_t end = in_ms(10000);
    while ((rc = weft_chan_send(rv.ch, &v, 0)) == -ETIMEDOUT && weft_now_ns() < end) weft_test_sleep_ms(1);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_EQUAL((intptr_t)join_any(&r), 43);
    weft_chan_free(rv.ch);
  }
}

static void *chan_deadline_fn(void *arg) {
  (void)arg;
  weft_chan_t *ch;
  int bad = 0;
  uint64_t v = 0x5555;
  if (weft_chan_create(1, sizeof v, &ch) != 0) return (void *)(intptr_t)-1;
  int64_t t0 = weft_now_ns();
  if (weft_chan_recv(ch, &v, in_ms(20)) != -ETIMEDOUT) bad |= 1;
  if (weft_now_ns() - t0 < 20 * MS) bad |= 2;
  if (v != 0x5555) bad |= 4; /* untouched */
  v = 1;
  if (weft_chan_send(ch, &v, in_ms(20)) != 0) bad |= 8;
  v = 2;
  if (weft_chan_send(ch, &v, in_ms(20)) != -ETIMEDOUT) bad |= 16;
  v = 3;
  if (weft_chan_send(ch, &v, 0) != -ETIMEDOUT) bad |= 32;
  if (weft_chan_send(ch, &v, 1) != -ETIMEDOUT) bad |= 32;
  if (weft_chan_recv(ch, &v, 0) != 0 || v != 1) bad |= 64;
  if (weft_chan_recv(ch, &v, 0) != -ETIMEDOUT) bad |= 128; /* 2 and 3 were never sent */
  weft_chan_free(ch);
  if (weft_chan_create(0, sizeof v, &ch) != 0) return (void *)(intptr_t)-1;
  if (weft_chan_send(ch, &v, in_ms(10)) != -ETIMEDOUT) bad |= 256;
  if (weft_chan_recv(ch, &v, 0) != -ETIMEDOUT) bad |= 512;
  weft_chan_free(ch);
  return (void *)(intptr_t)bad;
}

static void test_chan_deadline(void) {
  runner r;
  start_any(&r, true, chan_deadline_fn, NULL);
  CU_ASSERT_EQUAL((intptr_t)join_any(&r), 0);
  start_any(&r, false, chan_deadline_fn, NULL);
  CU_ASSERT_EQUAL((intptr_t)join_any(&r), 0);
}

/* Senders and receivers with short deadlines: what a send reports sent is received once; nothing else is. */
typedef struct chan_race {
  weft_chan_t *ch;
  size_t per;
  size_t total;
  atomic_size_t senders_left;
  atomic_uchar *sent;
  atomic_uchar *got;
} chan_race;

static int race_send(void *ctx, size_t i) {
  chan_race *cr = ctx;
  for (size_t k = 0; k < cr->per; k++) {
    uint64_t v = i * cr->per + k;
    int rc = weft_chan_send(cr->ch, &v, weft_now_ns() + (int64_t)((i + k) % 3) * 200000);
    if (rc == 0)
      atomic_store(&cr->sent[v], 1);
    else if (rc != -ETIMEDOUT)
      return 1;
  }
  if (atomic_fetch_sub(&cr->senders_left, 1) == 1) weft_chan_close(cr->ch);
  return 0;
}

static int race_recv(void *ctx, size_t i) {
  chan_race *cr = ctx;
  for (size_t k = 0;; k++) {
    uint64_t v;
    int rc = weft_chan_recv(cr->ch, &v, weft_now_ns() + (int64_t)((i + k) % 3) * 150000);
    if (rc == -EPIPE) return 0;
    if (rc == -ETIMEDOUT) continue;
    if (rc != 0 || v >= cr->total) return 1;
    atomic_fetch_add(&cr->got[v], 1);
  }
}

static void chan_race_body(void) {
  bool fibers = weft_fibers_available();
  for (size_t cap = 0; cap < 3; cap += 2) {
    chan_race cr;
    memset(&cr, 0, sizeof cr);
    CU_ASSERT_EQUAL_FATAL(weft_chan_create(cap, sizeof(uint64_t), &cr.ch), 0);
    size_t sfib = fibers ? 16 : 0, sthr = 3, rfib = fibers ? 16 : 0, rthr = 3;
    cr.per = scaled(200, 10);
    cr.total = (sfib + sthr) * cr.per;
    atomic_init(&cr.senders_left, sfib + sthr);
    cr.sent = calloc(cr.total, 1);
    cr.got = calloc(cr.total, 1);
    mixed s, r;
    mixed_start(&r, rfib, rthr, race_recv, &cr);
    mixed_start(&s, sfib, sthr, race_send, &cr);
    CU_ASSERT_EQUAL(mixed_join(&s), 0);
    CU_ASSERT_EQUAL(mixed_join(&r), 0);
    size_t bad = 0, delivered = 0;
    for (size_t v = 0; v < cr.total; v++) {
      bad += atomic_load(&cr.got[v]) != atomic_load(&cr.sent[v]);
      delivered += atomic_load(&cr.sent[v]);
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(delivered > 0);
    free(cr.sent);
    free(cr.got);
    weft_chan_free(cr.ch);
  }
}

static void test_chan_timeout_race(void) { both_modes(chan_race_body); }

/* A blocking future parked in recv or send wakes with -ECANCELED; no element is lost or made up. */
static void *chan_cancel_recv(void *arg) {
  cancel_ctx *cc = arg;
  uint64_t v = 0;
  atomic_store(&cc->entered, 1);
  int rc = weft_chan_recv(cc->ch, &v, -1);
  if (rc == 0) return (void *)(intptr_t)(v == 11 ? 0 : -3000);
  int again = weft_chan_recv(cc->ch, &v, in_ms(10000));
  return (void *)(intptr_t)(again == -ECANCELED ? rc : -2000);
}

static void *chan_cancel_send(void *arg) {
  cancel_ctx *cc = arg;
  uint64_t v = 12;
  atomic_store(&cc->entered, 1);
  int rc = weft_chan_send(cc->ch, &v, -1);
  int again = weft_chan_send(cc->ch, &v, 0);
  return (void *)(intptr_t)(again == -ECANCELED ? rc : -2000);
}

static void *send_11_within(void *arg) {
  cancel_ctx *cc = arg;
  uint64_t v = 11;
  return (void *)(intptr_t)weft_chan_send(cc->ch, &v, in_ms(50));
}

static void cancel_parked(cancel_ctx *cc, void *(*fn)(void *)) {
  weft_future *f;
  atomic_store(&cc->entered, 0);
  CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_BLOCKING, fn, cc, &f), 0);
  while (!atomic_load(&cc->entered)) weft_test_sleep_ms(1);
  weft_test_sleep_ms(20);
  CU_ASSERT_EQUAL(weft_future_cancel(f), -EBUSY);
  void *r = NULL;
  CU_ASSERT_EQUAL(weft_future_get(f, -1, &r), 0);
  CU_ASSERT_EQUAL((intptr_t)r, -ECANCELED);
  weft_future_free(f);
}

static void chan_cancel_body(void) {
  cancel_ctx cc;
  memset(&cc, 0, sizeof cc);
  uint64_t v;
  CU_ASSERT_EQUAL_FATAL(weft_chan_create(0, sizeof v, &cc.ch), 0);
  cancel_parked(&cc, chan_cancel_recv);
  cancel_parked(&cc, chan_cancel_send);
  CU_ASSERT_EQUAL(weft_chan_recv(cc.ch, &v, 0), -ETIMEDOUT); /* the cancelled send left nothing */

  /* A send racing the cancellation of a receiver: the element is received once, or the send times out. */
  size_t rounds = scaled(12, 3);
  for (size_t k = 0; k < rounds; k++) {
    weft_future *f;
    atomic_store(&cc.entered, 0);
    CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_BLOCKING, chan_cancel_recv, &cc, &f), 0);
    while (!atomic_load(&cc.entered)) sched_yield();
    runner s;
    start_any(&s, true, send_11_within, &cc);
    weft_future_cancel(f);
    void *r = NULL;
    CU_ASSERT_EQUAL(weft_future_get(f, -1, &r), 0);
    weft_future_free(f);
    intptr_t src = (intptr_t)join_any(&s);
    CU_ASSERT_TRUE(((intptr_t)r == 0 && src == 0) || ((intptr_t)r == -ECANCELED && src == -ETIMEDOUT));
  }
  weft_chan_free(cc.ch);
}

static void test_chan_cancel(void) { both_modes(chan_cancel_body); }

/* The receiver frees the channel as soon as its recv returns; the sender is still on its way out. */
static void *ch_last_user(void *arg) {
  weft_chan_t *ch = arg;
  uint64_t v = 0;
  int rc = weft_chan_recv(ch, &v, -1);
  weft_chan_free(ch);
  return (void *)(intptr_t)(rc == 0 ? (int)v : rc);
}

static void test_chan_free_after_recv(void) {
  size_t rounds = scaled(300, 10);
  for (size_t r = 0; r < rounds; r++) {
    weft_chan_t *ch;
    CU_ASSERT_EQUAL_FATAL(weft_chan_create(r & 2 ? 1 : 0, sizeof(uint64_t), &ch), 0);
    runner u;
    start_any(&u, (r & 1) != 0, ch_last_user, ch);
    uint64_t v = 9;
    if (r & 2) {
      CU_ASSERT_EQUAL(weft_chan_send(ch, &v, -1), 0); /* buffered or handed to a parked receiver */
    } else {
      /* Unbuffered, deadline 0: goes through only once the receiver is parked; it then frees ch. */
      int rc;
      while ((rc = weft_chan_send(ch, &v, 0)) == -ETIMEDOUT) sched_yield();
      CU_ASSERT_EQUAL(rc, 0);
    }
    CU_ASSERT_EQUAL((intptr_t)join_any(&u), 9);
  }
}

/* ======================================================================================= */
/* Static initializers, and a mix of everything                                            */
/* ======================================================================================= */

static weft_mutex_t s_mu = WEFT_MUTEX_INITIALIZER;
static weft_cond_t s_cv = WEFT_COND_INITIALIZER;
static long s_items; /* under s_mu */
static long s_taken; /* under s_mu */
static long s_target;

/* Even callers produce, odd ones consume, through the statically initialised mutex and cond. */
static int static_fn(void *ctx, size_t i) {
  (void)ctx;
  long per = s_target;
  if (i % 2 == 0) {
    for (long k = 0; k < per; k++) {
      weft_mutex_lock(&s_mu);
      s_items++;
      weft_cond_signal(&s_cv);
      weft_mutex_unlock(&s_mu);
    }
  } else {
    for (long k = 0; k < per; k++) {
      weft_mutex_lock(&s_mu);
      while (s_items == 0)
        if (weft_cond_wait(&s_cv, &s_mu, -1) != 0) {
          weft_mutex_unlock(&s_mu);
          return 1;
        }
      s_items--;
      s_taken++;
      weft_mutex_unlock(&s_mu);
    }
  }
  return 0;
}

static void static_init_body(void) {
  s_items = s_taken = 0;
  s_target = (long)scaled(200, 10);
  /* On the fallback, threads only: a consumer element could hold every CPU worker while producers wait. */
  size_t nfib = weft_fibers_available() ? scaled(100, 5) * 2 : 0;
  CU_ASSERT_EQUAL(run_mixed(nfib, 8, static_fn, NULL), 0);
  CU_ASSERT_EQUAL(s_taken, (long)(nfib + 8) / 2 * s_target);
  CU_ASSERT_EQUAL(s_items, 0);
}

static void test_static_init(void) { both_modes(static_init_body); }

/* --- the lock order, checked in debug builds (WEFT__ASSERT; a stack freed twice: the stack suite) --- */

/* Take a lock of level levels[0], then one of levels[1] under it: against the order, this must not return. */
static void two_locks(void *arg) {
  const unsigned *levels = arg;
  static weft__lock first, second;
  weft__lock_init(&first, levels[0]);
  weft__lock_init(&second, levels[1]);
  weft__lock_acquire(&first);
  weft__lock_acquire(&second);
  _exit(0);
}

static void in_order(void *arg) {
  (void)arg;
  static weft__lock object, tctx, leaf;
  weft__lock_init(&object, WEFT__LOCK_OBJECT);
  weft__lock_init(&tctx, WEFT__LOCK_TCTX);
  weft__lock_init(&leaf, WEFT__LOCK_LEAF);
  for (int k = 0; k < 3; k++) {
    weft__lock_acquire(&object);
    weft__lock_acquire(&tctx);
    weft__lock_acquire(&leaf);
    weft__lock_release(&leaf);
    weft__lock_release(&tctx);
    weft__lock_release(&object);
  }
  fprintf(stderr, "in-order-ok\n");
}

static void test_debug_checks(void) {
  if (!weft_test_debug_checks() || !weft_test_can_fork()) return;
  static const struct {
    unsigned levels[2];
    const char *want;
  } cases[] = {
      {{WEFT__LOCK_LEAF, WEFT__LOCK_LEAF}, "lock order: a level-3 lock taken while one of level 3 is held"},
      {{WEFT__LOCK_LEAF, WEFT__LOCK_OBJECT},
       "lock order: a level-1 lock taken while one of level 3 is held"}};
  char err[2048];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int st = weft_test_child(two_locks, (void *)cases[i].levels, err, sizeof err);
    CU_ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, cases[i].want));
    if (!strstr(err, cases[i].want)) printf("\n  case %zu, status %#x:\n%s\n", i, st, err);
  }
  int st = weft_test_child(in_order, NULL, err, sizeof err);
  CU_ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "in-order-ok"));
}

int main(int argc, char **argv) {
  static const weft_test tests[] = {
      {"mutex_errors", test_mutex_errors},
      {"mutex_owner", test_mutex_owner},
      {"mutex_contention", test_mutex_contention},
      {"mutex_no_starvation", test_mutex_no_starvation},
      {"mutex_no_starvation_across_carriers", test_mutex_no_starvation_across_carriers},
      {"mutex_free_after_unlock", test_mutex_free_after_unlock},
      {"mutex_handoff_runs_first", test_mutex_handoff_runs_first},
      {"cond_errors", test_cond_errors},
      {"cond_signal", test_cond_signal},
      {"cond_broadcast", test_cond_broadcast},
      {"cond_deadline", test_cond_deadline},
      {"cond_timeout_race", test_cond_timeout_race},
      {"cond_signal_not_lost", test_cond_signal_not_lost},
      {"cond_signal_skips_leaver", test_cond_signal_skips_leaver},
      {"cond_cancel", test_cond_cancel},
      {"cond_free_after_wake", test_cond_free_after_wake},
      {"sem_errors", test_sem_errors},
      {"sem_deadline", test_sem_deadline},
      {"sem_bounded", test_sem_bounded},
      {"sem_timeout_race", test_sem_timeout_race},
      {"sem_cancel", test_sem_cancel},
      {"sem_free_after_post", test_sem_free_after_post},
      {"chan_errors", test_chan_errors},
      {"chan_mpmc", test_chan_mpmc},
      {"chan_fifo", test_chan_fifo},
      {"chan_close", test_chan_close},
      {"chan_unbuffered", test_chan_unbuffered},
      {"chan_deadline", test_chan_deadline},
      {"chan_timeout_race", test_chan_timeout_race},
      {"chan_cancel", test_chan_cancel},
      {"chan_free_after_recv", test_chan_free_after_recv},
      {"static_init", test_static_init},
      {"debug_checks", test_debug_checks},
      {NULL, NULL},
  };
  return weft_test_run(argc, argv, "sync", tests);
}
