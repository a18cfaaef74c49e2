/*
 * Suite "local": fiber-local and scoped values. Keys (create, delete, reuse,
 * stale keys, exhaustion), local values per fiber and per thread (not
 * inherited, destroyed with their fiber or thread, destructor rounds), scoped
 * bindings (shadowing, never leaking out, seen by every future and map
 * element started inside, even after the scope has ended), bad input and
 * allocation failures. The same tests run with fibers and on the fallback
 * (WEFT_FIBERS=0), where the values are each thread's.
 *
 * Checks made on weft's threads and fibers are collected in counters and
 * asserted on the main thread (CUnit is not thread-safe).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "local/local.h"
#include "base/sys.h"

#define MS   1000000LL
#define V(x) ((void *)(uintptr_t)(x))
#define U(p) ((uintptr_t)(p))

static const weft_kind kinds[] = {WEFT_CPU, WEFT_BLOCKING};

static void *ret_arg(void *arg) { return arg; }

/* Run fn(arg) in a BLOCKING future (a fiber when there are fibers) and return its result. */
static void *on_fiber(weft_task_fn fn, void *arg) {
  weft_future *f;
  void *r = V(0xdead);
  CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_BLOCKING, fn, arg, &f), 0);
  CU_ASSERT_EQUAL(weft_future_get(f, -1, &r), 0);
  weft_future_free(f);
  return r;
}

/* --- keys ----------------------------------------------------------------------------- */

static void test_keys(void) {
  weft_key_t k1, k2, k3;
  CU_ASSERT_EQUAL_FATAL(weft_key_create(&k1, NULL), 0);
  CU_ASSERT_NOT_EQUAL(k1, 0);
  CU_ASSERT_PTR_NULL(weft_local_get(k1));
  CU_ASSERT_EQUAL(weft_local_set(k1, V(1)), 0);
  CU_ASSERT_PTR_EQUAL(weft_local_get(k1), V(1));
  CU_ASSERT_EQUAL(weft_key_delete(k1), 0);

  /* A deleted key is rejected everywhere, by every copy of it. */
  void *v = V(7);
  CU_ASSERT_EQUAL(weft_key_delete(k1), -EINVAL);
  CU_ASSERT_PTR_NULL(weft_local_get(k1));
  CU_ASSERT_EQUAL(weft_local_set(k1, V(2)), -EINVAL);
  CU_ASSERT_EQUAL(weft_scope_run(k1, V(1), ret_arg, NULL, NULL), -EINVAL);
  CU_ASSERT_EQUAL(weft_scope_get(k1, &v), -EINVAL);
  CU_ASSERT_PTR_EQUAL(v, V(7));

  /* The slot is reused (lowest free first), under another generation: no aliasing. */
  CU_ASSERT_EQUAL_FATAL(weft_key_create(&k2, NULL), 0);
  CU_ASSERT_NOT_EQUAL(k1, k2);
  CU_ASSERT_EQUAL(k1 & 0xffff, k2 & 0xffff);
  CU_ASSERT_PTR_NULL(weft_local_get(k2)); /* the value set under k1 is not k2's */
  CU_ASSERT_EQUAL(weft_local_set(k2, V(3)), 0);
  CU_ASSERT_PTR_EQUAL(weft_local_get(k2), V(3));
  CU_ASSERT_PTR_NULL(weft_local_get(k1));

  /* Two live keys hold separate values; NULL unsets. */
  CU_ASSERT_EQUAL_FATAL(weft_key_create(&k3, NULL), 0);
  CU_ASSERT_NOT_EQUAL(k2, k3);
  CU_ASSERT_EQUAL(weft_local_set(k3, V(4)), 0);
  CU_ASSERT_PTR_EQUAL(weft_local_get(k2), V(3));
  CU_ASSERT_PTR_EQUAL(weft_local_get(k3), V(4));
  CU_ASSERT_EQUAL(weft_local_set(k2, NULL), 0);
  CU_ASSERT_PTR_NULL(weft_local_get(k2));
  CU_ASSERT_PTR_EQUAL(weft_local_get(k3), V(4));
  CU_ASSERT_EQUAL(weft_local_set(k3, NULL), 0);
  CU_ASSERT_EQUAL(weft_key_delete(k2), 0);
  CU_ASSERT_EQUAL(weft_key_delete(k3), 0);
}

static void test_bad_input(void) {
  CU_ASSERT_EQUAL(weft_key_create(NULL, NULL), -EINVAL);
  weft_key_t k;
  CU_ASSERT_EQUAL_FATAL(weft_key_create(&k, NULL), 0);
  /* Zero, a slot out of range, a free slot's (even) generation, a forged generation. */
  const weft_key_t bad[] = {0, (k & ~UINT64_C(0xffff)) | 0xffff, k + (UINT64_C(1) << 16),
                            k + (UINT64_C(2) << 16), UINT64_MAX};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    void *v = V(9);
    CU_ASSERT_EQUAL(weft_key_delete(bad[i]), -EINVAL);
    CU_ASSERT_PTR_NULL(weft_local_get(bad[i]));
    CU_ASSERT_EQUAL(weft_local_set(bad[i], V(1)), -EINVAL);
    CU_ASSERT_EQUAL(weft_scope_run(bad[i], V(1), ret_arg, NULL, &v), -EINVAL);
    CU_ASSERT_PTR_EQUAL(v, V(9)); /* nothing ran, nothing stored */
    CU_ASSERT_EQUAL(weft_scope_get(bad[i], &v), -EINVAL);
    CU_ASSERT_PTR_EQUAL(v, V(9));
  }
  void *v = V(9);
  CU_ASSERT_EQUAL(weft_scope_run(k, V(1), NULL, NULL, &v), -EINVAL);
  CU_ASSERT_PTR_EQUAL(v, V(9));
  /* A NULL value pointer only asks whether the key is bound. */
  CU_ASSERT_EQUAL(weft_scope_get(k, NULL), -ENOENT);
  CU_ASSERT_EQUAL(weft_scope_run(k, V(5), ret_arg, V(6), NULL), 0);
  CU_ASSERT_EQUAL(weft_key_delete(k), 0);
}

static void test_exhaustion(void) {
  weft_key_t *ks = calloc(WEFT_KEYS_MAX + 1, sizeof *ks);
  size_t n = 0;
  int rc;
  while ((rc = weft_key_create(&ks[n], NULL)) == 0) {
    n++;
    if (n > WEFT_KEYS_MAX) break;
  }
  CU_ASSERT_EQUAL(rc, -EAGAIN);
  CU_ASSERT(n > 0 && n <= WEFT_KEYS_MAX);
  weft_key_t extra = 0;
  CU_ASSERT_EQUAL(weft_key_create(&extra, NULL), -EAGAIN);
  CU_ASSERT_EQUAL(extra, 0); /* untouched on failure */
  /* Recovery: one key freed, one key to be had. */
  CU_ASSERT_EQUAL(weft_key_delete(ks[n / 2]), 0);
  CU_ASSERT_EQUAL(weft_key_create(&ks[n / 2], NULL), 0);
  CU_ASSERT_EQUAL(weft_local_set(ks[n / 2], V(1)), 0);
  CU_ASSERT_PTR_EQUAL(weft_local_get(ks[n / 2]), V(1));
  CU_ASSERT_EQUAL(weft_local_set(ks[n / 2], NULL), 0);
  for (size_t i = 0; i < n; i++) CU_ASSERT_EQUAL(weft_key_delete(ks[i]), 0);
  free(ks);
}

/* Keys created and deleted from many threads at once stay distinct. */
typedef struct churn {
  atomic_int bad;
} churn;

static void *churn_fn(void *arg) {
  churn *c = arg;
  for (int i = 0; i < 2000; i++) {
    weft_key_t k;
    if (weft_key_create(&k, NULL) != 0) continue;
    if (weft_local_set(k, V(i + 1)) != 0 || weft_local_get(k) != V(i + 1)) atomic_fetch_add(&c->bad, 1);
    weft_local_set(k, NULL);
    if (weft_key_delete(k) != 0) atomic_fetch_add(&c->bad, 1);
    if (weft_local_get(k) != NULL) atomic_fetch_add(&c->bad, 1);
  }
  return NULL;
}

static void test_key_churn(void) {
  churn c;
  atomic_init(&c.bad, 0);
  pthread_t t[4];
  for (int i = 0; i < 4; i++) CU_ASSERT_EQUAL_FATAL(pthread_create(&t[i], NULL, churn_fn, &c), 0);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  CU_ASSERT_EQUAL(atomic_load(&c.bad), 0);
}

/* --- local values ------------------------------------------------------------------------ */

typedef struct per_ctx {
  weft_key_t key;
  atomic_int bad;
  atomic_int dtor_calls;
  atomic_ullong dtor_sum;
} per_ctx;

static per_ctx *g_ctx; /* for destructors, which get only the value */

static void sum_dtor(void *v) {
  atomic_fetch_add(&g_ctx->dtor_calls, 1);
  atomic_fetch_add(&g_ctx->dtor_sum, U(v));
}

/* Each future sets its own value, parks, and finds it again. */
static void *own_value(void *arg) {
  uintptr_t i = U(arg);
  per_ctx *c = g_ctx;
  /* A fresh fiber has nothing set (a thread on the fallback may keep an earlier future's value). */
  if (weft_in_fiber() && weft_local_get(c->key) != NULL) atomic_fetch_add(&c->bad, 1);
  if (weft_local_set(c->key, V(i)) != 0) atomic_fetch_add(&c->bad, 1);
  weft_sleep_ns(1 * MS);
  if (weft_local_get(c->key) != V(i)) atomic_fetch_add(&c->bad, 1);
  weft_yield();
  if (weft_local_get(c->key) != V(i)) atomic_fetch_add(&c->bad, 1);
  return NULL;
}

static void test_per_fiber(void) {
  per_ctx c;
  memset(&c, 0, sizeof c);
  g_ctx = &c;
  CU_ASSERT_EQUAL_FATAL(weft_key_create(&c.key, sum_dtor), 0);
  enum { N = 1000 };
  weft_future **fs = calloc(N, sizeof *fs);
  for (uintptr_t i = 0; i < N; i++)
    CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_BLOCKING, own_value, V(i + 1), &fs[i]), 0);
  for (size_t i = 0; i < N; i++) {
    CU_ASSERT_EQUAL(weft_future_get(fs[i], -1, NULL), 0);
    weft_future_free(fs[i]);
  }
  free(fs);
  CU_ASSERT_EQUAL(atomic_load(&c.bad), 0);
  if (weft_test_fibers_expected()) {
    /* Each fiber's value was destroyed when it ended, with that value. */
    weft_shutdown();
    CU_ASSERT_EQUAL(atomic_load(&c.dtor_calls), N);
    CU_ASSERT_EQUAL(atomic_load(&c.dtor_sum), (unsigned long long)N * (N + 1) / 2);
  }
  CU_ASSERT_EQUAL(weft_key_delete(c.key), 0);
}

/* What a child sees of its parent's local value. */
typedef struct inherit {
  weft_key_t key;
  pthread_t parent;      /* the OS thread the parent ran on */
  atomic_int saw_parent; /* children on another thread or fiber that saw the parent's value */
  atomic_int same_thread_mismatch;
  atomic_int children;
} inherit;

static inherit *g_inh;

static void child_check(void) {
  inherit *h = g_inh;
  atomic_fetch_add(&h->children, 1);
  void *v = weft_local_get(h->key);
  /*
   * A child on a fiber never sees the parent's value; CPU work on the
   * parent's own OS thread (the fallback, where the parent is a thread)
   * sees the thread's values, as documented.
   */
  bool same = !weft_in_fiber() && pthread_equal(pthread_self(), g_inh->parent);
  if (same) {
    if (v != V(77)) atomic_fetch_add(&h->same_thread_mismatch, 1);
  } else if (v != NULL) {
    atomic_fetch_add(&h->saw_parent, 1);
  }
}

static void *child_future(void *arg) {
  (void)arg;
  child_check();
  return NULL;
}

static int child_elem(void *ctx, size_t i) {
  (void)ctx;
  (void)i;
  child_check();
  return 0;
}

static void *parent_fn(void *arg) {
  (void)arg;
  inherit *h = g_inh;
  h->parent = pthread_self();
  weft_local_set(h->key, V(77));
  for (int k = 0; k < 2; k++) {
    weft_future *f;
    if (weft_future_start(kinds[k], child_future, NULL, &f) == 0) {
      weft_future_get(f, -1, NULL);
      weft_future_free(f);
    }
    weft_pmap_opts o = {kinds[k], 1, 0, 0};
    weft_pmap(64, child_elem, NULL, &o);
  }
  void *mine = weft_local_get(h->key);
  weft_local_set(h->key, NULL);
  return mine;
}

static void test_not_inherited(void) {
  inherit h;
  memset(&h, 0, sizeof h);
  g_inh = &h;
  CU_ASSERT_EQUAL_FATAL(weft_key_create(&h.key, NULL), 0);
  /* The parent is a fiber (or, on the fallback, a CPU thread) ... */
  CU_ASSERT_PTR_EQUAL(on_fiber(parent_fn, NULL), V(77));
  CU_ASSERT_EQUAL(atomic_load(&h.children), 2 + 2 * 64);
  CU_ASSERT_EQUAL(atomic_load(&h.saw_parent), 0);
  CU_ASSERT_EQUAL(atomic_load(&h.same_thread_mismatch), 0);
  /* ... or the main thread. */
  memset(&h, 0, sizeof h);
  CU_ASSERT_EQUAL_FATAL(weft_key_create(&h.key, NULL), 0);
  CU_ASSERT_PTR_EQUAL(parent_fn(NULL), V(77));
  CU_ASSERT_EQUAL(atomic_load(&h.children), 2 + 2 * 64);
  CU_ASSERT_EQUAL(atomic_load(&h.saw_parent), 0);
  CU_ASSERT_EQUAL(atomic_load(&h.same_thread_mismatch), 0);
  CU_ASSERT_EQUAL(weft_key_delete(h.key), 0);
}

/* CPU work uses its OS thread's values: a per-worker cache set by the first element there. */
typedef struct cache_ctx {
  weft_key_t key;
  atomic_uint made;
  atomic_uint counts[256];
  atomic_int bad;
} cache_ctx;

static int cache_elem(void *ctx, size_t i) {
  (void)i;
  cache_ctx *c = ctx;
  atomic_uint *slot = weft_local_get(c->key);
  if (!slot) {
    unsigned n = atomic_fetch_add(&c->made, 1);
    if (n >= 256) {
      atomic_fetch_add(&c->bad, 1);
      return 0;
    }
    slot = &c->counts[n];
    if (weft_local_set(c->key, slot) != 0) atomic_fetch_add(&c->bad, 1);
  }
  atomic_fetch_add(slot, 1);
  return 0;
}

static void test_cpu_work_thread_values(void) {
  cache_ctx *c = calloc(1, sizeof *c);
  CU_ASSERT_EQUAL_FATAL(weft_key_create(&c->key, NULL), 0);
  weft_pmap_opts o = {WEFT_CPU, 1, 0, 0};
  enum { N = 10000 };
  CU_ASSERT_EQUAL(weft_pmap(N, cache_elem, c, &o), 0);
  unsigned made = atomic_load(&c->made);
  CU_ASSERT(made >= 1 && made <= 256);
  unsigned total = 0;
  for (unsigned i = 0; i < made && i < 256; i++) total += atomic_load(&c->counts[i]);
  CU_ASSERT_EQUAL(total, N);
  CU_ASSERT_EQUAL(atomic_load(&c->bad), 0);
  /* The values stay with the threads (a later map finds them), until the key goes. */
  CU_ASSERT_EQUAL(weft_pmap(N, cache_elem, c, &o), 0);
  CU_ASSERT(atomic_load(&c->made) <= made + weft_test_cpus());
  CU_ASSERT_EQUAL(weft_local_set(c->key, NULL), 0); /* the main thread took part */
  CU_ASSERT_EQUAL(weft_key_delete(c->key), 0);
  free(c);
}

/* Thread exit destroys the thread's values, on that thread, with the value. */
typedef struct exit_rec {
  atomic_int calls;
  void *value;
  pthread_t on;
} exit_rec;

static exit_rec g_exit;
static weft_key_t g_exit_key;

static void exit_dtor(void *v) {
  atomic_fetch_add(&g_exit.calls, 1);
  g_exit.value = v;
  g_exit.on = pthread_self();
}

static void *set_and_exit(void *arg) {
  weft_local_set(g_exit_key, arg);
  return NULL;
}

static void test_dtor_thread_exit(void) {
  memset(&g_exit, 0, sizeof g_exit);
  CU_ASSERT_EQUAL_FATAL(weft_key_create(&g_exit_key, exit_dtor), 0);
  pthread_t t;
  CU_ASSERT_EQUAL_FATAL(pthread_create(&t, NULL, set_and_exit, V(1234)), 0);
  pthread_join(t, NULL);
  CU_ASSERT_EQUAL(atomic_load(&g_exit.calls), 1);
  CU_ASSERT_PTR_EQUAL(g_exit.value, V(1234));
  CU_ASSERT_TRUE(pthread_equal(g_exit.on, t));
  /* A NULL value has nothing to destroy. */
  memset(&g_exit, 0, sizeof g_exit);
  CU_ASSERT_EQUAL_FATAL(pthread_create(&t, NULL, set_and_exit, NULL), 0);
  pthread_join(t, NULL);
  CU_ASSERT_EQUAL(atomic_load(&g_exit.calls), 0);
  /* A deleted key's values are not destroyed (as pthread_key_delete). */
  CU_ASSERT_EQUAL(weft_key_delete(g_exit_key), 0);
  CU_ASSERT_EQUAL_FATAL(pthread_create(&t, NULL, set_and_exit, V(1)), 0);
  pthread_join(t, NULL);
  CU_ASSERT_EQUAL(atomic_load(&g_exit.calls), 0);
}

/* The fiber's values are destroyed when its work returns, on the fiber, with the value. */
static void *set_value(void *arg) {
  weft_local_set(g_exit_key, arg);
  return NULL;
}

static void test_dtor_fiber_end(void) {
  if (!weft_test_fibers_expected()) return; /* the fallback's threads live on: see thread_exit */
  memset(&g_exit, 0, sizeof g_exit);
  CU_ASSERT_EQUAL_FATAL(weft_key_create(&g_exit_key, exit_dtor), 0);
  on_fiber(set_value, V(99));
  weft_shutdown(); /* the fiber has ended */
  CU_ASSERT_EQUAL(atomic_load(&g_exit.calls), 1);
  CU_ASSERT_PTR_EQUAL(g_exit.value, V(99));
  CU_ASSERT_EQUAL(weft_key_delete(g_exit_key), 0);
}

/* Destructor rounds: a destructor that sets a value again is called again, a bounded number of times. */
static weft_key_t g_round_key, g_round_key2;
static atomic_int g_round_calls, g_round_calls2;
static int g_round_limit;

static void round_dtor(void *v) {
  int n = atomic_fetch_add(&g_round_calls, 1) + 1;
  if (n < g_round_limit) weft_local_set(g_round_key, V(U(v) + 1));
  /* Also set a key not seen before: the store grows under the loop. */
  if (n == 1) weft_local_set(g_round_key2, V(5));
}

static void round_dtor2(void *v) {
  (void)v;
  atomic_fetch_add(&g_round_calls2, 1);
}

static void *set_round(void *arg) {
  weft_local_set(g_round_key, arg);
  return NULL;
}

static void check_rounds(bool fiber, int limit, int want_calls) {
  atomic_store(&g_round_calls, 0);
  atomic_store(&g_round_calls2, 0);
  g_round_limit = limit;
  if (fiber) {
    on_fiber(set_round, V(1));
    weft_shutdown();
  } else {
    pthread_t t;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&t, NULL, set_round, V(1)), 0);
    pthread_join(t, NULL);
  }
  CU_ASSERT_EQUAL(atomic_load(&g_round_calls), want_calls);
  CU_ASSERT_EQUAL(atomic_load(&g_round_calls2), 1);
}

static void test_dtor_rounds(void) {
  CU_ASSERT_EQUAL_FATAL(weft_key_create(&g_round_key, round_dtor), 0);
  CU_ASSERT_EQUAL_FATAL(weft_key_create(&g_round_key2, round_dtor2), 0);
  for (int fiber = 0; fiber < 2; fiber++) {
    if (fiber && !weft_test_fibers_expected()) continue;
    check_rounds(fiber, 3, 3);                     /* set again twice: three calls */
    check_rounds(fiber, 1000, WEFT__LOCAL_ROUNDS); /* sets forever: bounded */
  }
  CU_ASSERT_EQUAL(weft_key_delete(g_round_key), 0);
  CU_ASSERT_EQUAL(weft_key_delete(g_round_key2), 0);
}

/* Many fibers, each setting one key: cheap, and every value destroyed. */
static int one_key_elem(void *ctx, size_t i) {
  per_ctx *c = ctx;
  if (weft_local_set(c->key, V(i + 1)) != 0) atomic_fetch_add(&c->bad, 1);
  weft_yield();
  if (weft_local_get(c->key) != V(i + 1)) atomic_fetch_add(&c->bad, 1);
  return 0;
}

static void test_many_fibers_one_key(void) {
  per_ctx c;
  memset(&c, 0, sizeof c);
  g_ctx = &c;
  CU_ASSERT_EQUAL_FATAL(weft_key_create(&c.key, sum_dtor), 0);
  size_t n = weft_test_fibers_expected() && !weft_test_slow_env() ? 100000 : 2000;
  weft_pmap_opts o = {WEFT_BLOCKING, 0, 0, 0};
  CU_ASSERT_EQUAL(weft_pmap(n, one_key_elem, &c, &o), 0);
  CU_ASSERT_EQUAL(atomic_load(&c.bad), 0);
  if (weft_test_fibers_expected()) {
    /* Every map fiber that ran an element destroyed its last value before the map returned. */
    int calls = atomic_load(&c.dtor_calls);
    CU_ASSERT(calls >= 1 && (size_t)calls <= n);
  }
  CU_ASSERT_EQUAL(weft_local_set(c.key, NULL), 0);
  CU_ASSERT_EQUAL(weft_key_delete(c.key), 0);
}

/* --- scoped values ------------------------------------------------------------------------- */

static weft_key_t g_sk, g_sk2;

/* 1 + the bound value of g_sk, or 0 when unbound (so a binding of NULL is told apart). */
static uintptr_t seen(weft_key_t k) {
  void *v = V(0xbad);
  int rc = weft_scope_get(k, &v);
  return rc == 0 ? U(v) + 1 : rc == -ENOENT ? 0 : 0xffff;
}

static void *inner_fn(void *arg) {
  (void)arg;
  return V(seen(g_sk) * 1000 + seen(g_sk2));
}

static void *outer_fn(void *arg) {
  uintptr_t before = seen(g_sk);
  void *inner = NULL;
  if (weft_scope_run(g_sk, V(20), inner_fn, NULL, &inner) != 0) return V(1);
  uintptr_t after = seen(g_sk);
  /* inside: k = 20 shadows 10, k2 = 30 from outside; after: 10 again */
  return V(before == 11 && U(inner) == 21 * 1000 + 31 && after == 11 && U(arg) == 5 ? 0 : 2);
}

static void *bind_k2_then_outer(void *arg) {
  void *r = V(3);
  if (weft_scope_run(g_sk, V(10), outer_fn, arg, &r) != 0) return V(4);
  return r;
}

static void *scoped_main(void *arg) {
  (void)arg;
  if (seen(g_sk) != 0 || seen(g_sk2) != 0) return V(5);
  void *r = V(6);
  if (weft_scope_run(g_sk2, V(30), bind_k2_then_outer, V(5), &r) != 0) return V(7);
  if (seen(g_sk) != 0 || seen(g_sk2) != 0) return V(8); /* nothing leaked out */
  return r;
}

static void test_scope_basic(void) {
  CU_ASSERT_EQUAL_FATAL(weft_key_create(&g_sk, NULL), 0);
  CU_ASSERT_EQUAL_FATAL(weft_key_create(&g_sk2, NULL), 0);
  CU_ASSERT_EQUAL(U(scoped_main(NULL)), 0);           /* on the main thread */
  CU_ASSERT_EQUAL(U(on_fiber(scoped_main, NULL)), 0); /* on a fiber */
  /* A binding of NULL is a binding; scoped and local values do not mix. */
  void *r = NULL;
  CU_ASSERT_EQUAL(weft_scope_run(g_sk, NULL, inner_fn, NULL, &r), 0);
  CU_ASSERT_EQUAL(U(r), 1 * 1000 + 0);
  CU_ASSERT_PTR_NULL(weft_local_get(g_sk));
  CU_ASSERT_EQUAL(weft_local_set(g_sk, V(3)), 0);
  CU_ASSERT_EQUAL(seen(g_sk), 0);
  CU_ASSERT_EQUAL(weft_local_set(g_sk, NULL), 0);
  CU_ASSERT_EQUAL(weft_key_delete(g_sk), 0);
  CU_ASSERT_EQUAL(weft_key_delete(g_sk2), 0);
}

/* Everything started inside a scope sees it: futures and elements of both kinds, nested. */
typedef struct reach {
  atomic_int checks;
  atomic_int bad;
  uintptr_t want; /* seen(g_sk) expected */
} reach;

static reach *g_reach;

static void expect_binding(void) {
  atomic_fetch_add(&g_reach->checks, 1);
  if (seen(g_sk) != g_reach->want) atomic_fetch_add(&g_reach->bad, 1);
}

static void *leaf_future(void *arg) {
  (void)arg;
  expect_binding();
  return NULL;
}

static int leaf_elem(void *ctx, size_t i) {
  (void)ctx;
  (void)i;
  expect_binding();
  return 0;
}

/* An element that starts futures of both kinds and a map of the other kind. */
static int nesting_elem(void *ctx, size_t i) {
  (void)ctx;
  expect_binding();
  for (int k = 0; k < 2; k++) {
    weft_future *f;
    if (weft_future_start(kinds[k], leaf_future, NULL, &f) != 0) {
      atomic_fetch_add(&g_reach->bad, 1);
      continue;
    }
    weft_future_get(f, -1, NULL);
    weft_future_free(f);
  }
  weft_pmap_opts o = {kinds[(i + 1) % 2], 1, 0, 0};
  weft_pmap(4, leaf_elem, NULL, &o);
  return 0;
}

static void *nesting_future(void *arg) {
  (void)arg;
  expect_binding();
  return (void *)(intptr_t)nesting_elem(NULL, 0);
}

static void *reach_body(void *arg) {
  (void)arg;
  expect_binding();
  for (int k = 0; k < 2; k++) {
    weft_pmap_opts o = {kinds[k], 1, 0, 0};
    weft_pmap(32, leaf_elem, NULL, &o);
    weft_pmap(4, nesting_elem, NULL, &o);
    weft_future *f;
    if (weft_future_start(kinds[k], nesting_future, NULL, &f) == 0) {
      weft_future_get(f, -1, NULL);
      weft_future_free(f);
    }
  }
  return NULL;
}

static void *reach_in_scope(void *arg) {
  (void)arg;
  return V(weft_scope_run(g_sk, V(41), reach_body, NULL, NULL));
}

/* checks per reach_body: 1 + per kind (32 + 4 * (1 + 2 + 4) + (1 + 1 + 2 + 4)) */
#define REACH_CHECKS (1 + 2 * (32 + 4 * 7 + 8))

static void test_scope_reach(void) {
  CU_ASSERT_EQUAL_FATAL(weft_key_create(&g_sk, NULL), 0);
  reach r;
  memset(&r, 0, sizeof r);
  r.want = 42;
  g_reach = &r;
  CU_ASSERT_EQUAL(U(reach_in_scope(NULL)), 0); /* from the main thread */
  CU_ASSERT_EQUAL(atomic_load(&r.checks), REACH_CHECKS);
  CU_ASSERT_EQUAL(atomic_load(&r.bad), 0);
  atomic_store(&r.checks, 0);
  CU_ASSERT_EQUAL(U(on_fiber(reach_in_scope, NULL)), 0); /* from a fiber */
  CU_ASSERT_EQUAL(atomic_load(&r.checks), REACH_CHECKS);
  CU_ASSERT_EQUAL(atomic_load(&r.bad), 0);
  /* And outside any scope, the same work sees nothing (no binding left on any thread). */
  atomic_store(&r.checks, 0);
  r.want = 0;
  reach_body(NULL);
  CU_ASSERT_EQUAL(atomic_load(&r.checks), REACH_CHECKS);
  CU_ASSERT_EQUAL(atomic_load(&r.bad), 0);
  CU_ASSERT_EQUAL(weft_key_delete(g_sk), 0);
}

/* A future that outlives its scope still sees the binding it started with. */
typedef struct late {
  atomic_int go;
  weft_future *fs[4];
} late;

static void *late_reader(void *arg) {
  late *l = arg;
  while (!atomic_load(&l->go)) weft_sleep_ns(1 * MS);
  return V(seen(g_sk) * 100 + seen(g_sk2));
}

static void *start_late(void *arg) {
  late *l = arg;
  for (int k = 0; k < 2; k++)
    if (weft_future_start(kinds[k], late_reader, l, &l->fs[k]) != 0) return V(1);
  return NULL;
}

static void *start_late_nested(void *arg) {
  late *l = arg;
  /* Shadowed inside: these see the inner binding, and the outer second key. */
  for (int k = 0; k < 2; k++)
    if (weft_future_start(kinds[k], late_reader, l, &l->fs[2 + k]) != 0) return V(1);
  return NULL;
}

static void *late_outer(void *arg) {
  void *r = NULL;
  if (start_late(arg) != NULL) return V(1);
  if (weft_scope_run(g_sk, V(8), start_late_nested, arg, &r) != 0 || r != NULL) return V(2);
  return NULL;
}

static void *late_k2(void *arg) {
  void *r = V(1);
  if (weft_scope_run(g_sk, V(6), late_outer, arg, &r) != 0) return V(3);
  return r;
}

static void test_scope_outlived(void) {
  CU_ASSERT_EQUAL_FATAL(weft_key_create(&g_sk, NULL), 0);
  CU_ASSERT_EQUAL_FATAL(weft_key_create(&g_sk2, NULL), 0);
  late l;
  memset(&l, 0, sizeof l);
  void *r = V(1);
  CU_ASSERT_EQUAL(weft_scope_run(g_sk2, V(2), late_k2, &l, &r), 0);
  CU_ASSERT_PTR_NULL(r);
  /* The scopes are over while their futures still run: nothing leaked out. */
  CU_ASSERT_EQUAL(seen(g_sk), 0);
  CU_ASSERT_EQUAL(seen(g_sk2), 0);
  for (int i = 0; i < 4; i++) CU_ASSERT_FALSE(weft_future_done(l.fs[i]));
  atomic_store(&l.go, 1);
  static const uintptr_t want[4] = {7 * 100 + 3, 7 * 100 + 3, 9 * 100 + 3, 9 * 100 + 3};
  for (int i = 0; i < 4; i++) {
    void *v = NULL;
    CU_ASSERT_EQUAL(weft_future_get(l.fs[i], -1, &v), 0);
    CU_ASSERT_EQUAL(U(v), want[i]);
    weft_future_free(l.fs[i]);
  }
  CU_ASSERT_EQUAL(weft_key_delete(g_sk), 0);
  CU_ASSERT_EQUAL(weft_key_delete(g_sk2), 0);
}

/* A future freed before it ran drops its hold on the bindings too (Valgrind checks the rest). */
static void *freed_early(void *arg) {
  weft_future *f;
  for (int k = 0; k < 2; k++)
    if (weft_future_start(kinds[k], ret_arg, arg, &f) == 0) weft_future_free(f);
  return NULL;
}

static void test_scope_future_freed(void) {
  CU_ASSERT_EQUAL_FATAL(weft_key_create(&g_sk, NULL), 0);
  for (int i = 0; i < 100; i++) CU_ASSERT_EQUAL(weft_scope_run(g_sk, V(i), freed_early, NULL, NULL), 0);
  weft_shutdown();
  CU_ASSERT_EQUAL(seen(g_sk), 0);
  CU_ASSERT_EQUAL(weft_key_delete(g_sk), 0);
}

/* A deep nest: the chain is walked and freed without trouble. */
static void *deep(void *arg) {
  uintptr_t d = U(arg);
  if (seen(g_sk) != d) return V(1); /* the innermost binding is d - 1, so seen = d */
  if (d == 2000) return NULL;
  void *r = V(1);
  if (weft_scope_run(g_sk, V(d), deep, V(d + 1), &r) != 0) return V(1);
  return seen(g_sk) == d ? r : V(1);
}

static void test_scope_deep(void) {
  CU_ASSERT_EQUAL_FATAL(weft_key_create(&g_sk, NULL), 0);
  void *r = V(1);
  CU_ASSERT_EQUAL(weft_scope_run(g_sk, V(0), deep, V(1), &r), 0);
  CU_ASSERT_PTR_NULL(r);
  CU_ASSERT_EQUAL(weft_key_delete(g_sk), 0);
}

/* --- fork ------------------------------------------------------------------------------------- */

/* A child forked while other threads create and delete keys can still use keys (none stays locked). */
static void child_keys(void *arg) {
  (void)arg;
  alarm(20); /* a hang ends as SIGALRM, never as a stuck test */
  weft_key_t k;
  if (weft_key_create(&k, NULL) != 0) _exit(3);
  if (weft_local_set(k, V(8)) != 0 || weft_local_get(k) != V(8)) _exit(4);
  if (weft_scope_run(k, V(1), ret_arg, V(2), NULL) != 0) _exit(5);
  weft_local_set(k, NULL);
  if (weft_key_delete(k) != 0) _exit(6);
  static const char ok[] = "local-child-ok\n";
  ssize_t w = write(2, ok, sizeof ok - 1);
  (void)w;
  _exit(0);
}

typedef struct churner {
  atomic_int stop;
  churn c;
} churner;

static void *churn_until_stop(void *arg) {
  churner *ch = arg;
  while (!atomic_load(&ch->stop)) churn_fn(&ch->c);
  return NULL;
}

static void test_fork(void) {
  churner ch;
  memset(&ch, 0, sizeof ch);
  pthread_t t;
  CU_ASSERT_EQUAL_FATAL(pthread_create(&t, NULL, churn_until_stop, &ch), 0);
  for (int i = 0; i < 5; i++) {
    char err[256];
    int st = weft_test_child(child_keys, NULL, err, sizeof err);
    CU_ASSERT_TRUE(WIFEXITED(st));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "local-child-ok"));
  }
  atomic_store(&ch.stop, 1);
  pthread_join(t, NULL);
  CU_ASSERT_EQUAL(atomic_load(&ch.c.bad), 0);
}

/* --- allocation failures --------------------------------------------------------------------- */

#ifdef WEFT_TESTING
static atomic_int g_fn_runs;

static void *count_run(void *arg) {
  atomic_fetch_add(&g_fn_runs, 1);
  return V(seen(g_sk) + U(arg));
}

typedef struct fault_res {
  int bad;
  int faults; /* failing calls seen */
} fault_res;

/*
 * On a fresh thread (no store yet): set 10 keys, each call failed at its
 * k-th allocation for k = 0, 1, ... until it succeeds without a fault.
 */
static void *fault_locals(void *arg) {
  fault_res *fr = arg;
  weft_key_t ks[10];
  for (int j = 0; j < 10; j++)
    if (weft_key_create(&ks[j], NULL) != 0) fr->bad++;
  for (int j = 0; j < 10; j++) {
    for (unsigned long k = 0;; k++) {
      weft__fault_arm(1u << WEFT__F_MALLOC, k, false);
      int rc = weft_local_set(ks[j], V(j + 1));
      unsigned long fired = weft__fault_disarm();
      if (fired == 0) {
        if (rc != 0) fr->bad++;
        break;
      }
      fr->faults++;
      if (rc != -ENOMEM) fr->bad++;
      if (weft_local_get(ks[j]) != NULL) fr->bad++; /* nothing half-done */
      for (int i = 0; i < j; i++)
        if (weft_local_get(ks[i]) != V(i + 1)) fr->bad++;
      if (k > 10) {
        fr->bad++;
        break;
      }
    }
  }
  for (int j = 0; j < 10; j++)
    if (weft_local_get(ks[j]) != V(j + 1)) fr->bad++;
  for (int j = 0; j < 10; j++) weft_key_delete(ks[j]);
  return NULL;
}

static void scope_fault_loop(weft_key_t k, uintptr_t outside) {
  int faults = 0;
  for (unsigned long n = 0; n <= 10; n++) {
    atomic_store(&g_fn_runs, 0);
    void *r = V(0xbad);
    weft__fault_arm(1u << WEFT__F_MALLOC, n, false);
    int rc = weft_scope_run(k, V(4), count_run, V(10), &r);
    unsigned long fired = weft__fault_disarm();
    if (fired == 0) {
      CU_ASSERT_EQUAL(rc, 0);
      CU_ASSERT_EQUAL(U(r), 5 + 10);
      CU_ASSERT_EQUAL(atomic_load(&g_fn_runs), 1);
      break;
    }
    faults++;
    CU_ASSERT_EQUAL(rc, -ENOMEM);
    CU_ASSERT_EQUAL(atomic_load(&g_fn_runs), 0);
    CU_ASSERT_PTR_EQUAL(r, V(0xbad));
    CU_ASSERT_EQUAL(seen(k), outside);
  }
  CU_ASSERT_EQUAL(faults, 1); /* one allocation per call */
  CU_ASSERT_EQUAL(seen(k), outside);
}

static void *fault_inside(void *arg) {
  (void)arg;
  scope_fault_loop(g_sk, 2);
  return NULL;
}

static void test_faults(void) {
  /* weft_key_create allocates nothing. */
  weft_key_t k;
  weft__fault_arm(1u << WEFT__F_MALLOC, 0, true);
  int rc = weft_key_create(&k, NULL);
  CU_ASSERT_EQUAL(weft__fault_disarm(), 0);
  CU_ASSERT_EQUAL_FATAL(rc, 0);
  g_sk = k;

  /* weft_local_set: the first store and its growth. */
  fault_res fr = {0, 0};
  pthread_t t;
  CU_ASSERT_EQUAL_FATAL(pthread_create(&t, NULL, fault_locals, &fr), 0);
  pthread_join(t, NULL);
  CU_ASSERT_EQUAL(fr.bad, 0);
  CU_ASSERT(fr.faults >= 2); /* the first store, and at least one growth */

  /* weft_scope_run: a failing call runs nothing and binds nothing, outside or inside a scope. */
  scope_fault_loop(k, 0);
  CU_ASSERT_EQUAL(weft_scope_run(k, V(1), fault_inside, NULL, NULL), 0);
  CU_ASSERT_EQUAL(weft_key_delete(k), 0);
}
#endif

int main(int argc, char **argv) {
  static const weft_test tests[] = {{"keys", test_keys},
                                    {"bad_input", test_bad_input},
                                    {"exhaustion", test_exhaustion},
                                    {"key_churn", test_key_churn},
                                    {"per_fiber", test_per_fiber},
                                    {"not_inherited", test_not_inherited},
                                    {"cpu_work_thread_values", test_cpu_work_thread_values},
                                    {"dtor_thread_exit", test_dtor_thread_exit},
                                    {"dtor_fiber_end", test_dtor_fiber_end},
                                    {"dtor_rounds", test_dtor_rounds},
                                    {"many_fibers_one_key", test_many_fibers_one_key},
                                    {"scope_basic", test_scope_basic},
                                    {"scope_reach", test_scope_reach},
                                    {"scope_outlived", test_scope_outlived},
                                    {"scope_future_freed", test_scope_future_freed},
                                    {"scope_deep", test_scope_deep},
                                    {"fork", test_fork},
#ifdef WEFT_TESTING
                                    {"faults", test_faults},
#endif
                                    {NULL, NULL}};
  return weft_test_run(argc, argv, "local", tests);
}
