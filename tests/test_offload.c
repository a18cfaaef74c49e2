/*
 * Suite "offload": weft_blocking. From a fiber the call runs on an offload
 * thread while the fiber parks and its carrier runs other fibers; from a
 * plain thread (and a fiber inside an OpenMP region) it runs inline. The pool
 * grows on demand up to offload_max, queues beyond it, retires idle threads,
 * takes back a queued call whose future is cancelled, delivers the result of
 * one that had started, and still runs calls when no thread can be created.
 * On the fallback (WEFT_FIBERS=0) every call runs inline.
 *
 * Each test ends with weft__offload_shutdown() so that the harness finds no
 * offload thread left.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef WEFT_HAVE_OPENMP
#include <omp.h>
#endif

#include "harness.h"
#include "io/offload.h"
#include "base/sys.h"

#define MS   1000000LL
#define V(x) ((void *)(uintptr_t)(x))
#define U(p) ((uintptr_t)(p))

static const weft_pmap_opts blocking = {WEFT_BLOCKING, 0, 0, 0};

/* Start every test from a stopped runtime and an empty pool, with these settings (0: default). */
static void setup(unsigned offload_max, unsigned carriers) {
  weft_shutdown();
  weft__offload_shutdown();
  weft_config c;
  weft_config_init(&c);
  c.offload_max = offload_max;
  c.carriers = carriers;
  CU_ASSERT_EQUAL(weft_configure(&c), 0);
}

static void teardown(void) {
  weft_shutdown();
  weft__offload_shutdown();
  weft__offload_set_idle_ns(0);
  weft_config c;
  weft_config_init(&c);
  CU_ASSERT_EQUAL(weft_configure(&c), 0);
}

static weft__offload_stats stats(void) {
  weft__offload_stats s;
  weft__offload_get_stats(&s);
  return s;
}

/* Run fn(arg) in a BLOCKING future (on a fiber when there are fibers) and return its result. */
static void *on_fiber(weft_task_fn fn, void *arg) {
  weft_future *f;
  void *r = V(0xdead);
  CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_BLOCKING, fn, arg, &f), 0);
  CU_ASSERT_EQUAL(weft_future_get(f, -1, &r), 0);
  weft_future_free(f);
  return r;
}

/* --- where fn runs ------------------------------------------------------------------------- */

typedef struct where {
  pthread_t caller; /* the thread the caller ran on */
  pthread_t ran_on; /* the thread fn ran on */
  int caller_fiber; /* weft_in_fiber() of the caller */
  int fn_fiber;     /* weft_in_fiber() in fn */
  int fn_local;     /* weft_local_get in fn (the caller's value) */
  int fn_scope;     /* weft_scope_get in fn (the caller's binding) */
  int fn_cancelled; /* weft_cancelled() in fn */
  int after_local;  /* the caller's value after fn set it */
  int rc;
  void *result;
} where;

static weft_key_t g_key, g_skey;

static void *record(void *arg) {
  where *w = arg;
  w->ran_on = pthread_self();
  w->fn_fiber = weft_in_fiber();
  w->fn_local = (int)U(weft_local_get(g_key));
  void *v = NULL;
  w->fn_scope = weft_scope_get(g_skey, &v) == 0 ? (int)U(v) : -1;
  w->fn_cancelled = weft_cancelled();
  weft_local_set(g_key, V(66)); /* the caller's, as if fn ran inline */
  return V(1234);
}

static void *call_record(void *arg) {
  where *w = arg;
  w->caller = pthread_self();
  w->caller_fiber = weft_in_fiber();
  w->rc = weft_blocking(record, w, &w->result);
  w->after_local = (int)U(weft_local_get(g_key));
  return NULL;
}

static void *caller_main(void *arg) {
  weft_local_set(g_key, V(55));
  void *r = NULL;
  weft_scope_run(g_skey, V(44), call_record, arg, &r);
  weft_local_set(g_key, NULL);
  return r;
}

static void test_from_fiber(void) {
  setup(0, 0);
  CU_ASSERT_EQUAL_FATAL(weft_key_create(&g_key, NULL), 0);
  CU_ASSERT_EQUAL_FATAL(weft_key_create(&g_skey, NULL), 0);
  where w;
  memset(&w, 0, sizeof w);
  on_fiber(caller_main, &w);
  CU_ASSERT_EQUAL(w.rc, 0);
  CU_ASSERT_PTR_EQUAL(w.result, V(1234));
  /* fn sees the caller's scoped and local values wherever it runs. */
  CU_ASSERT_EQUAL(w.fn_local, 55);
  CU_ASSERT_EQUAL(w.fn_scope, 44);
  CU_ASSERT_EQUAL(w.after_local, 66);
  CU_ASSERT_EQUAL(w.fn_cancelled, 0);
  CU_ASSERT_EQUAL(w.fn_fiber, 0);
  weft__offload_stats s = stats();
  if (weft_test_fibers_expected()) {
    CU_ASSERT_TRUE(w.caller_fiber);
    CU_ASSERT_FALSE(pthread_equal(w.caller, w.ran_on)); /* not on the carrier */
    CU_ASSERT_EQUAL(s.calls, 1);
    CU_ASSERT_EQUAL(s.peak_threads, 1);
  } else {
    CU_ASSERT_TRUE(pthread_equal(w.caller, w.ran_on)); /* the fallback runs it inline */
    CU_ASSERT_EQUAL(s.calls, 0);
  }
  CU_ASSERT_EQUAL(weft_key_delete(g_key), 0);
  CU_ASSERT_EQUAL(weft_key_delete(g_skey), 0);
  teardown();
}

static void test_plain_thread_inline(void) {
  setup(0, 0);
  CU_ASSERT_EQUAL_FATAL(weft_key_create(&g_key, NULL), 0);
  CU_ASSERT_EQUAL_FATAL(weft_key_create(&g_skey, NULL), 0);
  where w;
  memset(&w, 0, sizeof w);
  caller_main(&w);
  CU_ASSERT_EQUAL(w.rc, 0);
  CU_ASSERT_PTR_EQUAL(w.result, V(1234));
  CU_ASSERT_TRUE(pthread_equal(w.ran_on, pthread_self()));
  CU_ASSERT_EQUAL(w.fn_local, 55);
  CU_ASSERT_EQUAL(w.fn_scope, 44);
  CU_ASSERT_EQUAL(w.after_local, 66);
  weft__offload_stats s = stats();
  CU_ASSERT_EQUAL(s.calls, 0);
  CU_ASSERT_EQUAL(s.threads, 0);
  /* From a CPU future (an OpenMP task): inline too. */
  memset(&w, 0, sizeof w);
  weft_future *f;
  CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_CPU, call_record, &w, &f), 0);
  CU_ASSERT_EQUAL(weft_future_get(f, -1, NULL), 0);
  weft_future_free(f);
  CU_ASSERT_EQUAL(w.rc, 0);
  CU_ASSERT_TRUE(pthread_equal(w.ran_on, w.caller));
  CU_ASSERT_EQUAL(stats().calls, 0);
  weft_local_set(g_key, NULL);
  CU_ASSERT_EQUAL(weft_key_delete(g_key), 0);
  CU_ASSERT_EQUAL(weft_key_delete(g_skey), 0);
  teardown();
}

static void *nested_inner(void *arg) {
  *(pthread_t *)arg = pthread_self();
  return V(5);
}

static void *nested_outer(void *arg) {
  pthread_t *ts = arg;
  ts[0] = pthread_self();
  void *r = NULL;
  /* On an offload thread (a plain thread): inline. */
  int rc = weft_blocking(nested_inner, &ts[1], &r);
  return V(rc == 0 && U(r) == 5 ? 7 : 0);
}

static void *call_nested(void *arg) {
  void *r = NULL;
  if (weft_blocking(nested_outer, arg, &r) != 0) return NULL;
  return r;
}

static void test_nested_inline(void) {
  setup(0, 0);
  pthread_t ts[2];
  CU_ASSERT_EQUAL(U(on_fiber(call_nested, ts)), 7);
  CU_ASSERT_TRUE(pthread_equal(ts[0], ts[1]));
  teardown();
}

static void *null_fn_call(void *arg) {
  (void)arg;
  void *r = V(3);
  int rc = weft_blocking(NULL, NULL, &r);
  return V(rc == -EINVAL && r == V(3) ? 1 : 0);
}

static void test_bad_input(void) {
  setup(0, 0);
  void *r = V(3);
  CU_ASSERT_EQUAL(weft_blocking(NULL, NULL, &r), -EINVAL);
  CU_ASSERT_EQUAL(weft__offload_run(NULL, NULL, &r), -EINVAL);
  CU_ASSERT_PTR_EQUAL(r, V(3));
  CU_ASSERT_EQUAL(U(on_fiber(null_fn_call, NULL)), 1);
  /* A NULL result pointer is fine. */
  CU_ASSERT_EQUAL(weft_blocking(nested_inner, &(pthread_t){0}, NULL), 0);
  teardown();
}

/* --- the pool ------------------------------------------------------------------------------- */

typedef struct sleepy {
  int ms;
  atomic_int done;
} sleepy;

static void *plain_sleep(void *arg) {
  sleepy *s = arg;
  usleep((useconds_t)s->ms * 1000);
  atomic_fetch_add(&s->done, 1);
  return V(s->ms);
}

static int offload_sleep_elem(void *ctx, size_t i) {
  (void)i;
  sleepy *s = ctx;
  void *r = NULL;
  if (weft_blocking(plain_sleep, s, &r) != 0) return 1;
  return U(r) == (uintptr_t)s->ms ? 0 : 2;
}

/* 50 fibers on 2 carriers, each offloading 100 ms: the carriers keep running fibers meanwhile. */
static void test_overlap(void) {
  setup(0, 2);
  sleepy s = {.ms = 100};
  atomic_init(&s.done, 0);
  CU_ASSERT_EQUAL(weft_pmap(50, offload_sleep_elem, &s, &blocking), 0);
  CU_ASSERT_EQUAL(atomic_load(&s.done), 50);
  weft__offload_stats st = stats();
  if (weft_test_fibers_expected()) {
    CU_ASSERT_EQUAL(st.calls, 50);
    CU_ASSERT(st.peak_running > 2); /* more calls at once than carriers */
    CU_ASSERT(st.peak_threads <= 64);
  } else {
    CU_ASSERT_EQUAL(st.calls, 0);
  }
  teardown();
}

static void test_max_bound(void) {
  setup(3, 0);
  sleepy s = {.ms = 20};
  atomic_init(&s.done, 0);
  CU_ASSERT_EQUAL(weft_pmap(20, offload_sleep_elem, &s, &blocking), 0);
  CU_ASSERT_EQUAL(atomic_load(&s.done), 20);
  weft__offload_stats st = stats();
  if (weft_test_fibers_expected()) {
    CU_ASSERT_EQUAL(st.calls, 20);
    CU_ASSERT_EQUAL(st.peak_threads, 3); /* grew to the maximum, never beyond */
    CU_ASSERT(st.peak_running <= 3);
  }
  teardown();
}

static int offload_many_elem(void *ctx, size_t i) {
  (void)ctx;
  (void)i;
  void *r = NULL;
  if (weft_blocking(nested_inner, &(pthread_t){0}, &r) != 0 || U(r) != 5) return 1;
  return 0;
}

static void test_idle_retire(void) {
  setup(0, 0);
  weft__offload_set_idle_ns(50 * MS);
  sleepy s = {.ms = 10};
  atomic_init(&s.done, 0);
  CU_ASSERT_EQUAL(weft_pmap(8, offload_sleep_elem, &s, &blocking), 0);
  if (weft_test_fibers_expected()) {
    CU_ASSERT(stats().peak_threads >= 1);
    int64_t t0 = weft_now_ns();
    while (stats().threads != 0 && weft_now_ns() - t0 < 10000 * MS) weft_test_sleep_ms(5);
    CU_ASSERT_EQUAL(stats().threads, 0);
    /* The pool starts again on demand. */
    CU_ASSERT_EQUAL(weft_pmap(100, offload_many_elem, NULL, &blocking), 0);
    CU_ASSERT(stats().calls >= 101);
    while (stats().threads != 0 && weft_now_ns() - t0 < 20000 * MS) weft_test_sleep_ms(5);
    CU_ASSERT_EQUAL(stats().threads, 0);
  }
  teardown();
}

/* --- cancellation ---------------------------------------------------------------------------- */

typedef struct gate {
  atomic_int open;
  atomic_int entered;
  atomic_int marks;
} gate;

static void *gate_wait(void *arg) {
  gate *g = arg;
  atomic_fetch_add(&g->entered, 1);
  while (!atomic_load(&g->open)) weft_test_sleep_ms(1);
  return V(11);
}

static void *mark(void *arg) {
  gate *g = arg;
  atomic_fetch_add(&g->marks, 1);
  weft_test_sleep_ms(30);
  return V(22);
}

static void *call_gate(void *arg) {
  void *r = NULL;
  int rc = weft_blocking(gate_wait, arg, &r);
  return rc == 0 ? r : V(1);
}

/* Returns weft_blocking's result code, or the result when 0. */
static void *call_mark(void *arg) {
  void *r = NULL;
  int rc = weft_blocking(mark, arg, &r);
  return rc == 0 ? r : (void *)(intptr_t)rc;
}

static void test_cancel_queued(void) {
  if (!weft_test_fibers_expected()) return; /* inline calls are never queued */
  setup(1, 0);
  gate g;
  memset(&g, 0, sizeof g);
  weft_future *a, *b;
  CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_BLOCKING, call_gate, &g, &a), 0);
  while (stats().running != 1) weft_test_sleep_ms(1); /* the only thread is busy */
  CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_BLOCKING, call_mark, &g, &b), 0);
  while (stats().queued != 1) weft_test_sleep_ms(1);
  CU_ASSERT_EQUAL(weft_future_cancel(b), -EBUSY); /* the fiber runs; its queued call is taken back */
  void *r = NULL;
  CU_ASSERT_EQUAL(weft_future_get(b, -1, &r), 0);
  CU_ASSERT_EQUAL((intptr_t)r, -ECANCELED);
  CU_ASSERT_EQUAL(stats().queued, 0);
  atomic_store(&g.open, 1);
  CU_ASSERT_EQUAL(weft_future_get(a, -1, &r), 0);
  CU_ASSERT_PTR_EQUAL(r, V(11));
  weft_future_free(a);
  weft_future_free(b);
  weft__offload_stats st = stats();
  weft__offload_shutdown();
  CU_ASSERT_EQUAL(atomic_load(&g.marks), 0); /* never ran */
  CU_ASSERT_EQUAL(st.calls, 1);
  teardown();
}

/* Cancelled once running: fn runs to the end and its result is delivered. */
static void test_cancel_running(void) {
  setup(0, 0);
  gate g;
  memset(&g, 0, sizeof g);
  weft_future *f;
  CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_BLOCKING, call_gate, &g, &f), 0);
  while (atomic_load(&g.entered) == 0) weft_test_sleep_ms(1);
  CU_ASSERT_EQUAL(weft_future_cancel(f), -EBUSY);
  weft_test_sleep_ms(20);
  CU_ASSERT_FALSE(weft_future_done(f)); /* still waiting for fn */
  atomic_store(&g.open, 1);
  void *r = NULL;
  CU_ASSERT_EQUAL(weft_future_get(f, -1, &r), 0);
  CU_ASSERT_PTR_EQUAL(r, V(11));
  weft_future_free(f);
  teardown();
}

/* Cancelled before the call: -ECANCELED, fn never runs (fibers and fallback alike). */
static void *wait_cancel_then_call(void *arg) {
  gate *g = arg;
  atomic_fetch_add(&g->entered, 1);
  while (!weft_cancelled()) weft_test_sleep_ms(1);
  return call_mark(g);
}

static void test_cancel_before(void) {
  setup(0, 0);
  gate g;
  memset(&g, 0, sizeof g);
  weft_future *f;
  CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_BLOCKING, wait_cancel_then_call, &g, &f), 0);
  while (atomic_load(&g.entered) == 0) weft_test_sleep_ms(1);
  CU_ASSERT_EQUAL(weft_future_cancel(f), -EBUSY);
  void *r = NULL;
  CU_ASSERT_EQUAL(weft_future_get(f, -1, &r), 0);
  CU_ASSERT_EQUAL((intptr_t)r, -ECANCELED);
  CU_ASSERT_EQUAL(atomic_load(&g.marks), 0);
  weft_future_free(f);
  teardown();
}

/* --- results, fibers in OpenMP regions, thread failures ------------------------------------- */

static void *twice(void *arg) { return V(U(arg) * 2); }

static int results_elem(void *ctx, size_t i) {
  (void)ctx;
  void *r = NULL;
  if (weft_blocking(twice, V(i), &r) != 0) return 1;
  return U(r) == 2 * i ? 0 : 2;
}

static void test_results(void) {
  setup(4, 0);
  CU_ASSERT_EQUAL(weft_pmap(500, results_elem, NULL, &blocking), 0);
  if (weft_test_fibers_expected()) {
    CU_ASSERT_EQUAL(stats().calls, 500);
    CU_ASSERT(stats().peak_threads <= 4);
  }
  teardown();
}

#ifdef WEFT_HAVE_OPENMP
/* A fiber inside an OpenMP region of its own cannot park: the call runs on its thread. */
static void *region_caller(void *arg) {
  atomic_int *bad = arg;
#pragma omp parallel num_threads(2)
  {
    pthread_t self = pthread_self();
    pthread_t ran;
    void *r = NULL;
    if (weft_blocking(nested_inner, &ran, &r) != 0 || U(r) != 5 || !pthread_equal(self, ran))
      atomic_fetch_add(bad, 1);
  }
  return NULL;
}

static void test_fiber_in_region(void) {
  setup(0, 0);
  atomic_int bad;
  atomic_init(&bad, 0);
  on_fiber(region_caller, &bad);
  CU_ASSERT_EQUAL(atomic_load(&bad), 0);
  CU_ASSERT_EQUAL(stats().calls, 0);
  teardown();
}
#endif

#ifdef WEFT_TESTING
typedef struct fault_call {
  atomic_int go;
  where w;
} fault_call;

static void *wait_go_then_call(void *arg) {
  fault_call *fc = arg;
  while (!atomic_load(&fc->go)) weft_sleep_ns(1 * MS);
  return call_record(&fc->w);
}

/* No offload thread can be created: the call runs on the fiber's carrier, and works. */
static void test_thread_fault(void) {
  if (!weft_test_fibers_expected()) return;
  setup(0, 0);
  CU_ASSERT_EQUAL_FATAL(weft_key_create(&g_key, NULL), 0);
  CU_ASSERT_EQUAL_FATAL(weft_key_create(&g_skey, NULL), 0);
  CU_ASSERT_TRUE_FATAL(weft_fibers_available()); /* carriers first: they need threads too */
  fault_call fc;
  memset(&fc, 0, sizeof fc);
  weft_future *f;
  CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_BLOCKING, wait_go_then_call, &fc, &f), 0);
  weft__fault_arm(1u << WEFT__F_PTHREAD_CREATE, 0, true);
  atomic_store(&fc.go, 1);
  CU_ASSERT_EQUAL(weft_future_get(f, -1, NULL), 0);
  unsigned long fired = weft__fault_disarm();
  weft_future_free(f);
  CU_ASSERT(fired >= 1);
  CU_ASSERT_EQUAL(fc.w.rc, 0);
  CU_ASSERT_PTR_EQUAL(fc.w.result, V(1234));
  CU_ASSERT_TRUE(pthread_equal(fc.w.caller, fc.w.ran_on)); /* on the carrier */
  weft__offload_stats st = stats();
  CU_ASSERT_EQUAL(st.carrier_runs, 1);
  CU_ASSERT(st.create_failures >= 1);
  CU_ASSERT_EQUAL(st.threads, 0);
  CU_ASSERT_EQUAL(st.calls, 0);

  /* Many fibers at once, none able to start a thread: every call comes back and runs. */
  sleepy s = {.ms = 5};
  atomic_init(&s.done, 0);
  CU_ASSERT_TRUE_FATAL(weft_fibers_available());
  weft_pmap_opts o = {WEFT_BLOCKING, 0, 0, 0};
  weft__fault_arm(1u << WEFT__F_PTHREAD_CREATE, 0, true);
  int rc = weft_pmap(16, offload_sleep_elem, &s, &o);
  weft__fault_disarm();
  CU_ASSERT_EQUAL(rc, 0);
  CU_ASSERT_EQUAL(atomic_load(&s.done), 16);
  st = stats();
  CU_ASSERT_EQUAL(st.carrier_runs, 1 + 16);
  CU_ASSERT_EQUAL(st.threads, 0);

  /* Once threads can be had again, the pool is back. */
  memset(&fc, 0, sizeof fc);
  fc.go = 1;
  on_fiber(wait_go_then_call, &fc);
  CU_ASSERT_EQUAL(fc.w.rc, 0);
  CU_ASSERT_FALSE(pthread_equal(fc.w.caller, fc.w.ran_on));
  CU_ASSERT_EQUAL(stats().calls, 1);
  CU_ASSERT_EQUAL(weft_key_delete(g_key), 0);
  CU_ASSERT_EQUAL(weft_key_delete(g_skey), 0);
  teardown();
}
#endif

/*
 * A fork child finds an empty pool: the parent's busy thread did not come
 * along, so shutdown there does not wait for it, and calls still run.
 */
static void child_offloads(void *arg) {
  (void)arg;
  weft__offload_stats s;
  weft__offload_get_stats(&s);
  if (s.threads != 0 || s.queued != 0 || s.running != 0) _exit(3);
  void *r = NULL;
  if (weft_blocking(twice, V(21), &r) != 0 || U(r) != 42) _exit(4);
  weft__offload_shutdown(); /* returns: nothing of the parent's to wait for */
  /* Said on stderr too: under Valgrind the child's exit status reports the parent's memory it forgot. */
  static const char ok[] = "offload-child-ok\n";
  ssize_t w = write(2, ok, sizeof ok - 1);
  (void)w;
  _exit(0);
}

static void test_fork(void) {
  setup(0, 0);
  gate g;
  memset(&g, 0, sizeof g);
  weft_future *f = NULL;
  if (weft_test_fibers_expected()) {
    /* A thread of the parent's pool is busy at the fork. */
    CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_BLOCKING, call_gate, &g, &f), 0);
    while (stats().running != 1) weft_test_sleep_ms(1);
  }
  char err[512];
  int st = weft_test_child(child_offloads, NULL, err, sizeof err);
  CU_ASSERT_TRUE(WIFEXITED(st));
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "offload-child-ok"));
  if (!weft_test_slow_env()) CU_ASSERT_EQUAL(WEXITSTATUS(st), 0);
  atomic_store(&g.open, 1);
  if (f) {
    CU_ASSERT_EQUAL(weft_future_get(f, -1, NULL), 0);
    weft_future_free(f);
  }
  teardown();
}

/*
 * A fork while both the offload pool and the pinning monitor are busy: a
 * thread of the pool is inside a call, and fibers hold every carrier in a
 * plain nanosleep, with one more waiting, for which the monitor has started
 * a compensation carrier. The child finds neither (only the forking thread survives), and
 * both work there: an offloaded call returns, and fibers that pin their
 * carriers get compensation carriers of the child's own.
 */
typedef struct pin_gate {
  atomic_int open;
} pin_gate;

static void *pin_until_open(void *arg) {
  pin_gate *g = arg;
  while (!atomic_load(&g->open)) {
    struct timespec ts = {0, 5 * 1000 * 1000};
    nanosleep(&ts, NULL); /* plain: holds the carrier */
  }
  return NULL;
}

static int pin_50ms(void *ctx, size_t i) {
  (void)ctx;
  (void)i;
  struct timespec ts = {0, 50 * 1000 * 1000};
  nanosleep(&ts, NULL);
  return 0;
}

static void child_monitor_offload(void *arg) {
  (void)arg;
  void *r = NULL;
  if (weft_blocking(twice, V(21), &r) != 0 || U(r) != 42) _exit(4);
  weft_stats before, after;
  if (weft_get_stats(&before) != 0) _exit(5);
  weft_pmap_opts o = WEFT_PMAP_OPTS_INIT;
  o.kind = WEFT_BLOCKING;
  if (weft_pmap(4 * weft_test_cpus(), pin_50ms, NULL, &o) != 0) _exit(6);
  if (weft_get_stats(&after) != 0) _exit(7);
  if (after.extra_carriers <= before.extra_carriers) _exit(8); /* the child's monitor compensated */
  static const char ok[] = "monitor-offload-child-ok\n";
  ssize_t w = write(2, ok, sizeof ok - 1);
  (void)w;
  _exit(0);
}

static void test_fork_monitor_busy(void) {
  if (!weft_test_fibers_expected()) return;
  if (!weft_test_can_fork()) return;
  setup(0, 0);
  gate g;
  memset(&g, 0, sizeof g);
  pin_gate pg = {0};
  weft_future *f = NULL, *p[65] = {NULL};
  unsigned np = weft_test_cpus() + 1; /* more pinning fibers than carriers: one waits, unstarted */
  if (np > 65) np = 65;
  weft_stats st0;
  CU_ASSERT_EQUAL_FATAL(weft_get_stats(&st0), 0);
  CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_BLOCKING, call_gate, &g, &f), 0);
  for (unsigned i = 0; i < np; i++)
    CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_BLOCKING, pin_until_open, &pg, &p[i]), 0);
  while (stats().running != 1) weft_test_sleep_ms(1); /* the pool is busy */
  weft_stats st;
  for (int i = 0; i < 2000; i++) { /* the monitor has compensated (20 ms threshold) */
    CU_ASSERT_EQUAL_FATAL(weft_get_stats(&st), 0);
    if (st.extra_carriers > st0.extra_carriers) break;
    weft_test_sleep_ms(1);
  }
  CU_ASSERT(st.extra_carriers > st0.extra_carriers);
  char err[1024];
  int s = weft_test_child(child_monitor_offload, NULL, err, sizeof err);
  CU_ASSERT_TRUE(WIFEXITED(s));
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "monitor-offload-child-ok"));
  if (!weft_test_slow_env()) CU_ASSERT_EQUAL(WEXITSTATUS(s), 0);
  if (!strstr(err, "monitor-offload-child-ok")) printf("\n  child status %#x:\n%s\n", s, err);
  atomic_store(&g.open, 1);
  atomic_store(&pg.open, 1);
  CU_ASSERT_EQUAL(weft_future_get(f, -1, NULL), 0);
  for (unsigned i = 0; i < np; i++) {
    CU_ASSERT_EQUAL(weft_future_get(p[i], -1, NULL), 0);
    weft_future_free(p[i]);
  }
  weft_future_free(f);
  teardown();
}

int main(int argc, char **argv) {
  static const weft_test tests[] = {{"from_fiber", test_from_fiber},
                                    {"plain_thread_inline", test_plain_thread_inline},
                                    {"nested_inline", test_nested_inline},
                                    {"bad_input", test_bad_input},
                                    {"overlap", test_overlap},
                                    {"max_bound", test_max_bound},
                                    {"idle_retire", test_idle_retire},
                                    {"cancel_queued", test_cancel_queued},
                                    {"cancel_running", test_cancel_running},
                                    {"cancel_before", test_cancel_before},
                                    {"results", test_results},
#ifdef WEFT_HAVE_OPENMP
                                    {"fiber_in_region", test_fiber_in_region},
#endif
#ifdef WEFT_TESTING
                                    {"thread_fault", test_thread_fault},
#endif
                                    {"fork", test_fork},
                                    {"fork_monitor_busy", test_fork_monitor_busy},
                                    {NULL, NULL}};
  return weft_test_run(argc, argv, "offload", tests);
}
