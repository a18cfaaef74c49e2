/*
 * Suite "stress": a seeded random workload that mixes everything weft does,
 * from every kind of context at once, and checks the invariants that a
 * program running for days relies on:
 *
 *  - every element of a parallel map runs exactly once, and the map returns
 *    the error of the lowest failing index;
 *  - every future resolves exactly once, to its result, -ECANCELED (only
 *    when weft_future_cancel said 0) or -ETIMEDOUT (only at its deadline);
 *    its fn never runs twice, and never after a successful cancel;
 *  - channel elements are never lost or duplicated (each one is marked when
 *    sent and when received);
 *  - mutual exclusion holds (mutexes, semaphores with k units);
 *  - sleeps and timed waits never end before their deadline;
 *  - scoped values seen inside maps, futures and offloaded calls are the
 *    bound ones; local values stay a fiber's own;
 *  - after every round, weft_shutdown leaves no fiber, stack, carrier,
 *    offload thread, weft thread or descriptor behind (and the harness
 *    checks again after the test).
 *
 * Structure. The run is a series of rounds until WEFT_STRESS_SECONDS
 * (default 20) have passed. In each round several agents run a sequence of
 * random operations at once: the main thread, plain threads, fibers (blocking
 * futures), a CPU future on weft's OpenMP team, and the threads of a
 * parallel region of the program's own. Each operation is self-contained
 * (it makes its own maps, futures, sockets and primitives), except for a
 * mutex, a channel and a semaphore that all agents of the round share.
 *
 * Replay. The seed is printed first. Each agent's choices come from a
 * generator derived from (seed, round, agent), so WEFT_STRESS_SEED=s gives
 * the same operations again (the interleaving is the machine's), and
 * WEFT_STRESS_ROUND=r runs only round r of that seed. WEFT_STRESS_SKIP=a,b
 * leaves operations out by name (to narrow a failure down). A failure prints
 * the seed, round, agent, operation and iteration; a round that makes no
 * progress for WEFT_STRESS_WATCHDOG seconds (default 120) prints what every
 * agent is doing and aborts, so that a hang leaves a core and a backtrace
 * instead of a CTest timeout.
 *
 * Waits that depend on another agent or element use -1 (forever) when
 * fibers are available: every blocking element and future is then in
 * flight at once, so a lost wake-up is a hang that the watchdog reports.
 * Without fibers (WEFT_FIBERS=0) blocking work shares the OpenMP threads and
 * only a few elements run at once, which the header documents; those waits
 * then have deadlines, and the accounting stays exact either way.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifdef WEFT_HAVE_OPENMP
#include <omp.h>
#endif

#include "harness.h"
#include "reliability.h"

#define US 1000LL
#define MS 1000000LL

/* --- run settings ---------------------------------------------------------------------------------- */

static uint64_t g_seed;
static double g_seconds = 20;
static long g_only_round = -1;
static unsigned g_watchdog_s = 120;
static char g_skip[512];
static unsigned g_scale = 1; /* divide sizes by this (slow environments, sanitizers) */
static bool g_fibers;        /* this round: blocking work runs on fibers */
static weft_key_t g_key;     /* the scoped and local key every check uses */
static int g_baseline_fds;

static const weft_pmap_opts blocking = {WEFT_BLOCKING, 0, 0, 0};

/* Sizes, scaled down where everything is slower. */
static size_t sz(size_t n) {
  size_t r = n / g_scale;
  return r ? r : 1;
}

static bool skipped(const char *name);

/* A deadline for a wait on another agent or element: none with fibers (see the top of the file). */
static int64_t dep_deadline(int64_t ms) { return g_fibers ? -1 : weft_now_ns() + ms * MS; }

/* --- agents and failures --------------------------------------------------------------------------- */

typedef enum { AG_MAIN, AG_THREAD, AG_FIBER, AG_CPU, AG_OMP } ag_kind;
static const char *const ag_kind_names[] = {"main thread", "thread", "fiber", "CPU future", "OpenMP thread"};

#define MAX_AGENTS 16

typedef struct agent {
  int id;
  ag_kind kind;
  char name[32];
  rel_rng rng;
  unsigned nops;              /* operations to run this round */
  _Atomic(const char *) op;   /* the operation now running (for the watchdog) */
  atomic_uint iter;           /* its number in this agent's sequence */
  atomic_uint progress;       /* bumped often: the watchdog looks for change */
  void *scope;                /* the scoped binding this agent has now (NULL: none) */
  unsigned long locks;        /* shared mutex: times this agent took it */
  long chan_sent, chan_recvd; /* shared channel: sums of values sent and received */
  bool done;
} agent;

static agent g_agents[MAX_AGENTS];
static atomic_int g_nagents;
static atomic_uint g_round;
static atomic_int g_failures;
static atomic_long g_ops_run, g_elems_run, g_futures_run, g_bytes_moved, g_chan_elems, g_timeouts;

static void fail(agent *a, const char *fmt, ...) WEFT__PRINTF(2, 3);
static void fail(agent *a, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  atomic_fetch_add(&g_failures, 1);
  fprintf(stderr,
          "\nstress FAILED: seed=%llu round=%u agent=%s op=%s iteration=%u: %s\n"
          "  replay: WEFT_STRESS_SEED=%llu WEFT_STRESS_ROUND=%u\n",
          (unsigned long long)g_seed, atomic_load(&g_round), a ? a->name : "-", a ? atomic_load(&a->op) : "-",
          a ? atomic_load(&a->iter) : 0, msg, (unsigned long long)g_seed, atomic_load(&g_round));
}

static inline void tick(agent *a) { atomic_fetch_add_explicit(&a->progress, 1, memory_order_relaxed); }

/* The scope check every callback makes: it sees the binding that was current where it was started. */
static bool scope_is(void *want) {
  void *v = NULL;
  int rc = weft_scope_get(g_key, &v);
  return want ? (rc == 0 && v == want) : rc == -ENOENT;
}

static atomic_uintptr_t g_scope_seq;
static void *new_scope_value(void) { return (void *)(atomic_fetch_add(&g_scope_seq, 1) * 16 + 0x1008); }

/* --- shared state of a round ----------------------------------------------------------------------- */

static weft_mutex_t g_mu;
static long g_mu_count;        /* guarded by g_mu (no atomics: a race shows as a wrong count) */
static atomic_int g_mu_inside; /* how many hold g_mu: never more than 1 */
static weft_chan_t *g_chan;    /* everyone sends and receives, without waiting on anyone */
static weft_sem_t g_sem;       /* SEM_UNITS units */
static atomic_int g_sem_inside;
#define SEM_UNITS 3

/* --- futures whose fate is checked after the round (when all work has ended) ----------------------- */

typedef struct fut_rec {
  atomic_int ran;     /* fn's runs */
  atomic_int entered; /* fn has started */
  atomic_int gate;    /* fn waits until it is set (free while running) */
  atomic_int bad;     /* fn's own checks that failed (scope, cancellation) */
  int must;           /* -1: unknown; 0: must never run (cancel said 0); 1: must have run once */
  /* fn's argument: lives here, so that a future freed while it runs can still read it */
  int behaviour;
  void *tag;   /* the result */
  void *scope; /* the binding where it was started */
  agent *owner;
  unsigned iter;
  const char *what;
} fut_rec;

#define MAX_RECS 8192
static fut_rec *g_recs;
static atomic_int g_nrecs;

static fut_rec *rec_new(agent *a, const char *what) {
  int i = atomic_fetch_add(&g_nrecs, 1);
  if (i >= MAX_RECS) return NULL;
  fut_rec *r = &g_recs[i];
  atomic_init(&r->ran, 0);
  atomic_init(&r->entered, 0);
  atomic_init(&r->gate, 0);
  atomic_init(&r->bad, 0);
  r->must = -1;
  r->owner = a;
  r->iter = atomic_load(&a->iter);
  r->what = what;
  return r;
}

/* --- operations ------------------------------------------------------------------------------------ */

typedef void (*op_fn)(agent *a);

/* Parallel maps -------------------------------------------------------------------------------------------
 */

typedef struct map_ctx {
  agent *a;
  size_t n;
  atomic_uchar *hits;
  size_t fail_every; /* elements i with i % fail_every == fail_at return i % 89 + 1; 0: none fail */
  size_t fail_at;
  void *scope;
  int action; /* blocking elements: what each one does */
  atomic_int bad_scope, bad_sleep, bad_local;
  weft_pmap_opts inner; /* nested maps: the kind of the inner map */
  size_t inner_n;
} map_ctx;

static int expected_rc(const map_ctx *m) {
  if (!m->fail_every) return 0;
  for (size_t i = 0; i < m->n; i++)
    if (i % m->fail_every == m->fail_at) return (int)(i % 89 + 1);
  return 0;
}

static void *offload_check(void *arg) {
  map_ctx *m = arg;
  struct timespec ts = {0, 20000};
  while (nanosleep(&ts, &ts) != 0) {
  }
  if (!scope_is(m->scope)) atomic_fetch_add(&m->bad_scope, 1);
  return arg;
}

/* What a blocking element does: sleep, yield, offload, a local value, or nothing. */
static void blocking_action(map_ctx *m, size_t i) {
  switch ((i * 2654435761u + (size_t)m->action) % 8) {
  case 0:
  case 1: {
    int64_t d = weft_now_ns() + (int64_t)(i % 5) * 40 * US;
    if (weft_sleep_until(d) != 0 || weft_now_ns() < d) atomic_fetch_add(&m->bad_sleep, 1);
    break;
  }
  case 2:
    weft_yield();
    break;
  case 3: {
    void *r = NULL;
    if (weft_blocking(offload_check, m, &r) != 0 || r != m) atomic_fetch_add(&m->bad_sleep, 1);
    break;
  }
  case 4:
    if (weft_in_fiber()) {
      /* A fiber's local value is its own across a park. */
      void *mine = (void *)(uintptr_t)(i * 16 + 0x2008);
      weft_local_set(g_key, mine);
      weft_sleep_ns((int64_t)(i % 3) * 20 * US);
      if (weft_local_get(g_key) != mine) atomic_fetch_add(&m->bad_local, 1);
      weft_local_set(g_key, NULL);
    }
    break;
  default:
    break;
  }
}

static int map_elem(void *ctx, size_t i) {
  map_ctx *m = ctx;
  if (m->action >= 0) blocking_action(m, i);
  if (!scope_is(m->scope)) atomic_fetch_add(&m->bad_scope, 1);
  atomic_fetch_add_explicit(&m->hits[i], 1, memory_order_relaxed);
  if (m->fail_every && i % m->fail_every == m->fail_at) return (int)(i % 89 + 1);
  return 0;
}

/* Check a map: the lowest failing index's error, every element once, the callbacks' own checks. */
static void map_check(agent *a, const char *what, map_ctx *m, int rc) {
  int want = expected_rc(m);
  if (rc != want)
    fail(a, "%s of %zu: returned %d (%s), expected %d", what, m->n, rc, weft_strerror(rc), want);
  size_t zero = 0, many = 0, first_bad = SIZE_MAX;
  for (size_t i = 0; i < m->n; i++) {
    unsigned h = atomic_load(&m->hits[i]);
    if (h != 1 && first_bad == SIZE_MAX) first_bad = i;
    zero += h == 0;
    many += h > 1;
  }
  if (zero || many)
    fail(a, "%s of %zu: %zu elements never ran, %zu ran more than once (first: index %zu)", what, m->n, zero,
         many, first_bad);
  if (atomic_load(&m->bad_scope))
    fail(a, "%s: %d callbacks saw the wrong scoped value", what, atomic_load(&m->bad_scope));
  if (atomic_load(&m->bad_sleep))
    fail(a, "%s: %d sleeps ended early or offloaded calls failed", what, atomic_load(&m->bad_sleep));
  if (atomic_load(&m->bad_local))
    fail(a, "%s: %d fibers saw another's local value", what, atomic_load(&m->bad_local));
  atomic_fetch_add(&g_elems_run, (long)m->n);
}

static void map_init(map_ctx *m, agent *a, size_t n, int action) {
  memset(m, 0, sizeof *m);
  m->a = a;
  m->n = n;
  m->hits = calloc(n ? n : 1, 1);
  m->scope = a->scope;
  m->action = action;
  if (rel_below(&a->rng, 4) == 0) {
    m->fail_every = 1 + rel_below(&a->rng, 50);
    m->fail_at = rel_below(&a->rng, m->fail_every);
  }
}

static void op_pmap_cpu(agent *a) {
  map_ctx m;
  map_init(&m, a, rel_below(&a->rng, sz(4000)), -1);
  static const size_t grains[] = {0, 0, 1, 3, 64, 1000};
  weft_pmap_opts o = {WEFT_CPU, grains[rel_below(&a->rng, 6)], 0, 0};
  int rc = weft_pmap(m.n, map_elem, &m, &o);
  map_check(a, "weft_pmap(CPU)", &m, rc);
  free(m.hits);
}

static void op_pmap_blocking(agent *a) {
  map_ctx m;
  map_init(&m, a, rel_below(&a->rng, sz(800)), (int)rel_below(&a->rng, 1000));
  static const size_t bounds[] = {0, 0, 0, 1, 4, 32};
  weft_pmap_opts o = {WEFT_BLOCKING, 0, bounds[rel_below(&a->rng, 6)], 0};
  int rc = weft_pmap(m.n, map_elem, &m, &o);
  map_check(a, "weft_pmap(BLOCKING)", &m, rc);
  free(m.hits);
}

/* Nested: each outer element runs a map of the other kind, with its own hits. */
typedef struct nest_ctx {
  map_ctx *inner; /* one per outer element */
  weft_pmap_opts inner_opts;
  atomic_uchar *outer_hits;
  void *scope;
  atomic_int bad;
} nest_ctx;

static int nest_elem(void *ctx, size_t i) {
  nest_ctx *n = ctx;
  atomic_fetch_add(&n->outer_hits[i], 1);
  if (!scope_is(n->scope)) atomic_fetch_add(&n->bad, 1);
  int rc = weft_pmap(n->inner[i].n, map_elem, &n->inner[i], &n->inner_opts);
  return rc == expected_rc(&n->inner[i]) ? 0 : 1000;
}

static void op_nested(agent *a) {
  bool blocking_outer = rel_below(&a->rng, 2);
  size_t outer = 1 + rel_below(&a->rng, blocking_outer ? sz(16) : sz(8));
  nest_ctx n;
  memset(&n, 0, sizeof n);
  n.inner = calloc(outer, sizeof *n.inner);
  n.outer_hits = calloc(outer, 1);
  n.scope = a->scope;
  n.inner_opts = (weft_pmap_opts){blocking_outer ? WEFT_CPU : WEFT_BLOCKING, 0, 0, 0};
  for (size_t i = 0; i < outer; i++)
    map_init(&n.inner[i], a, rel_below(&a->rng, blocking_outer ? sz(300) : sz(40)),
             blocking_outer ? -1 : (int)rel_below(&a->rng, 1000));
  weft_pmap_opts o = {blocking_outer ? WEFT_BLOCKING : WEFT_CPU, blocking_outer ? 0 : 1, 0, 0};
  int rc = weft_pmap(outer, nest_elem, &n, &o);
  const char *what = blocking_outer ? "a blocking map of CPU maps" : "a CPU map of blocking maps";
  if (rc != 0) fail(a, "%s returned %d (an inner map returned something unexpected)", what, rc);
  for (size_t i = 0; i < outer; i++) {
    if (atomic_load(&n.outer_hits[i]) != 1)
      fail(a, "%s: outer element %zu ran %u times", what, i, atomic_load(&n.outer_hits[i]));
    map_check(a, what, &n.inner[i], expected_rc(&n.inner[i]));
    free(n.inner[i].hits);
  }
  if (atomic_load(&n.bad)) fail(a, "%s: outer elements saw the wrong scoped value", what);
  free(n.inner);
  free(n.outer_hits);
}

/* Futures -------------------------------------------------------------------------------------------------
 */

enum { FB_QUICK, FB_SLEEP, FB_GATE, FB_CANCELLABLE };
#define CANCELLED_TAG ((void *)(intptr_t)0x5ca1ab1e)

static void *fut_fn(void *p) {
  fut_rec *r = p;
  atomic_store(&r->entered, 1);
  atomic_fetch_add(&r->ran, 1); /* checked after the round */
  if (!scope_is(r->scope)) atomic_fetch_add(&r->bad, 1);
  void *res = r->tag;
  switch (r->behaviour) {
  case FB_SLEEP:
    weft_sleep_ns((int64_t)((uintptr_t)r->tag % 300) * US);
    break;
  case FB_GATE:
    while (!atomic_load(&r->gate)) weft_sleep_ns(50 * US);
    break;
  case FB_CANCELLABLE:
    for (int k = 0; k < 2000; k++) {
      int rc = weft_sleep_ns(100 * US);
      if (weft_cancelled()) {
        /* From now on every weft blocking call returns -ECANCELED. */
        if (rc != -ECANCELED && rc != 0) atomic_fetch_add(&r->bad, 1);
        if (weft_sleep_ns(10 * US) != -ECANCELED || weft_yield() != -ECANCELED) atomic_fetch_add(&r->bad, 1);
        res = CANCELLED_TAG;
        break;
      }
    }
    break;
  default:
    break;
  }
  return res;
}

typedef struct getter_ctx {
  weft_future *f;
  void *want;
  atomic_int bad;
} getter_ctx;

static int getter_elem(void *ctx, size_t i) {
  (void)i;
  getter_ctx *g = ctx;
  void *r = NULL;
  int rc = weft_future_get(g->f, -1, &r);
  if (rc != 0 || r != g->want) atomic_fetch_add(&g->bad, 1);
  return 0;
}

/* Wait a little for fn to start (bounded: without fibers it may be queued behind this very agent). */
static bool wait_entered(agent *a, fut_rec *r) {
  for (int k = 0; k < 400 && !atomic_load(&r->entered); k++) {
    weft_sleep_ns(250 * US);
    tick(a);
  }
  return atomic_load(&r->entered);
}

static void op_futures(agent *a) {
  int k = 1 + (int)rel_below(&a->rng, 10);
  for (int i = 0; i < k; i++) {
    fut_rec *r = rec_new(a, "future");
    if (!r) return;
    weft_kind kind = rel_below(&a->rng, 2) ? WEFT_BLOCKING : WEFT_CPU;
    int action = (int)rel_below(&a->rng, 9);
    if (action == 3 && skipped("futures.get0")) action = 0;
    int behaviour = rel_below(&a->rng, 2) ? FB_QUICK : FB_SLEEP;
    if (action == 7) behaviour = FB_GATE;                                           /* free while running */
    if (action == 8) behaviour = kind == WEFT_BLOCKING ? FB_CANCELLABLE : FB_SLEEP; /* cancel while running */
    r->behaviour = behaviour;
    r->tag = (void *)(uintptr_t)(rel_below(&a->rng, 1u << 20) * 8 + 8);
    r->scope = a->scope;
    fut_rec *fa = r;
    weft_future *f = NULL;
    int rc = weft_future_start(kind, fut_fn, r, &f);
    if (rc != 0) {
      fail(a, "weft_future_start(%s) returned %d (%s)", kind ? "BLOCKING" : "CPU", rc, weft_strerror(rc));
      r->must = 0;
      continue;
    }
    atomic_fetch_add(&g_futures_run, 1);
    void *res = NULL;
    switch (action) {
    case 0:
    case 1: /* get, forever */
      r->what = "get(-1)";
      rc = weft_future_get(f, -1, &res);
      if (rc != 0 || res != fa->tag)
        fail(a, "weft_future_get(-1) returned %d, result %p (expected %p)", rc, res, fa->tag);
      r->must = 1;
      break;
    case 2: { /* get with a deadline, then forever */
      r->what = "get(deadline)";
      int64_t d = weft_now_ns() + (int64_t)rel_below(&a->rng, 400) * US;
      rc = weft_future_get(f, d, &res);
      if (rc == -ETIMEDOUT) {
        atomic_fetch_add(&g_timeouts, 1);
        if (weft_now_ns() < d)
          fail(a, "weft_future_get(deadline) gave -ETIMEDOUT %lld ns early", (long long)(d - weft_now_ns()));
      } else if (rc != 0 || res != fa->tag) {
        fail(a, "weft_future_get(deadline) returned %d (%s)", rc, weft_strerror(rc));
      }
      rc = weft_future_get(f, -1, &res);
      if (rc != 0 || res != fa->tag) fail(a, "weft_future_get(-1) after a deadline returned %d", rc);
      r->must = 1;
      break;
    }
    case 3: { /* polling with deadline 0, then forever */
      r->what = "get(0)";
      for (int p = 0; p < 20; p++) {
        rc = weft_future_get(f, 0, &res);
        if (rc == 0) break;
        if (rc != -ETIMEDOUT) fail(a, "weft_future_get(0) returned %d (%s)", rc, weft_strerror(rc));
        weft_yield();
      }
      /* A fiber that polled must still wait properly afterwards. */
      int64_t d = weft_now_ns() + 50 * US;
      int s = weft_sleep_until(d);
      if (s != 0 || weft_now_ns() < d)
        fail(a, "a sleep after weft_future_get(0) returned %d, %lld ns early", s,
             (long long)(d - weft_now_ns()));
      rc = weft_future_get(f, -1, &res);
      if (rc != 0 || res != fa->tag) fail(a, "weft_future_get(-1) after polling returned %d", rc);
      r->must = 1;
      break;
    }
    case 4: /* cancel at once */
    case 5: {
      r->what = "cancel";
      int c = weft_future_cancel(f);
      rc = weft_future_get(f, -1, &res);
      if (c == 0) {
        r->must = 0;
        if (rc != -ECANCELED) fail(a, "cancel said 0, then weft_future_get returned %d", rc);
      } else if (c == -EBUSY || c == -EALREADY) {
        r->must = 1;
        if (rc != 0 || res != fa->tag)
          fail(a, "cancel said %d, then weft_future_get returned %d, %p", c, rc, res);
      } else {
        fail(a, "weft_future_cancel returned %d (%s)", c, weft_strerror(c));
      }
      if (weft_future_cancel(f) != -EALREADY) fail(a, "a second cancel did not say -EALREADY");
      break;
    }
    case 6: /* free before anyone looks: pending ones are cancelled, running ones detached */
      r->what = "free at once";
      weft_future_free(f);
      f = NULL;
      break;
    case 7: /* free while running, then let it finish */
      r->what = "free while running";
      if (wait_entered(a, r)) r->must = 1;
      weft_future_free(f);
      f = NULL;
      atomic_store(&r->gate, 1);
      break;
    case 8: { /* cancel once it runs: a blocking future sees it and gives up */
      r->what = "cancel while running";
      bool entered = wait_entered(a, r);
      int c = weft_future_cancel(f);
      rc = weft_future_get(f, -1, &res);
      if (c == 0) {
        r->must = 0;
        if (entered) fail(a, "cancel said 0 for a future that had started");
        if (rc != -ECANCELED) fail(a, "cancel said 0, then weft_future_get returned %d", rc);
      } else {
        r->must = 1;
        bool ok = rc == 0 &&
                  (res == fa->tag || (c == -EBUSY && behaviour == FB_CANCELLABLE && res == CANCELLED_TAG));
        if (!ok) fail(a, "cancel said %d, then weft_future_get returned %d, %p", c, rc, res);
        if (c == -EBUSY && behaviour == FB_CANCELLABLE && res != CANCELLED_TAG)
          fail(a, "a running blocking future was cancelled but never saw weft_cancelled()");
      }
      break;
    }
    default:
      break;
    }
    /* Several getters at once, of another context. */
    if (f && rel_below(&a->rng, 4) == 0) {
      getter_ctx g = {f, NULL, 0};
      int s = weft_future_get(f, 0, &g.want);
      if (s == 0) {
        weft_pmap(3, getter_elem, &g, &blocking);
        if (atomic_load(&g.bad)) fail(a, "concurrent getters saw different results");
      }
    }
    if (f) weft_future_free(f);
    tick(a);
  }
}

/* Sleeps and yields ----------------------------------------------------------------------------------------
 */

static void op_sleep(agent *a) {
  for (int k = 0; k < 4; k++) {
    int64_t d = weft_now_ns() + (int64_t)rel_below(&a->rng, 300) * US;
    int rc = weft_sleep_until(d);
    int64_t now = weft_now_ns();
    if (rc != 0 || now < d)
      fail(a, "weft_sleep_until returned %d, %lld ns before its deadline", rc, (long long)(d - now));
    if (weft_sleep_ns(0) != 0 || weft_yield() != 0) fail(a, "weft_sleep_ns(0) or weft_yield failed");
  }
}

/* Socket I/O ------------------------------------------------------------------------------------------------
 */

typedef struct stream {
  int fd;
  size_t len;
  uint64_t seed; /* the bytes are a function of the seed and the position */
  size_t done;
  int err;
  bool use_recv;
} stream;

static unsigned char byte_at(uint64_t seed, size_t i) {
  return (unsigned char)((seed >> (i % 56)) ^ (i * 131));
}

static void *stream_read(void *arg) {
  stream *s = arg;
  unsigned char buf[8192];
  for (;;) {
    ssize_t n =
        s->use_recv ? weft_recv(s->fd, buf, sizeof buf, 0, -1) : weft_read(s->fd, buf, sizeof buf, -1);
    if (n == 0) break;
    if (n < 0) {
      s->err = (int)n;
      break;
    }
    for (ssize_t i = 0; i < n; i++)
      if (buf[i] != byte_at(s->seed, s->done + (size_t)i) && !s->err) s->err = -1000;
    s->done += (size_t)n;
  }
  return NULL;
}

static void *stream_write(void *arg) {
  stream *s = arg;
  unsigned char buf[8192];
  rel_rng r = {s->seed};
  while (s->done < s->len) {
    size_t chunk = 512 + rel_below(&r, sizeof buf - 512);
    if (chunk > s->len - s->done) chunk = s->len - s->done;
    for (size_t i = 0; i < chunk; i++) buf[i] = byte_at(s->seed, s->done + i);
    ssize_t n = s->use_recv ? weft_send(s->fd, buf, chunk, 0, -1) : weft_write(s->fd, buf, chunk, -1);
    if (n <= 0) {
      s->err = (int)n;
      break;
    }
    s->done += (size_t)n;
  }
  shutdown(s->fd, SHUT_WR);
  return NULL;
}

static void op_io(agent *a) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    fail(a, "socketpair: %s", strerror(errno));
    return;
  }
  /* Both ends on their own fibers (large), or a reader future and this agent writing (small: never blocks).
   */
  bool both = g_fibers && rel_below(&a->rng, 2);
  size_t len = both ? sz(64 * 1024) + rel_below(&a->rng, sz(1 << 20)) : 1 + rel_below(&a->rng, 48 * 1024);
  uint64_t seed = rel_next(&a->rng);
  bool rv = rel_below(&a->rng, 2);
  stream rd = {sv[0], len, seed, 0, 0, rv}, wr = {sv[1], len, seed, 0, 0, rv};
  char c;
  if (weft_read(sv[0], &c, 1, 0) != -ETIMEDOUT)
    fail(a, "weft_read with deadline 0 on an empty socket did not time out");
  int pr = weft_poll_fd(sv[1], POLLOUT, 0);
  if (pr <= 0 || !(pr & POLLOUT)) fail(a, "weft_poll_fd(POLLOUT, 0) on a fresh socket returned %d", pr);
  weft_future *fr = NULL, *fw = NULL;
  if (weft_future_start(WEFT_BLOCKING, stream_read, &rd, &fr) != 0)
    fail(a, "weft_future_start (reader) failed");
  if (both) {
    if (weft_future_start(WEFT_BLOCKING, stream_write, &wr, &fw) != 0)
      fail(a, "weft_future_start (writer) failed");
  } else {
    stream_write(&wr);
  }
  if (fw) weft_future_get(fw, -1, NULL);
  if (fr) weft_future_get(fr, -1, NULL);
  weft_future_free(fr);
  weft_future_free(fw);
  close(sv[0]);
  close(sv[1]);
  if (wr.err || wr.done != len)
    fail(a, "the writer stopped at %zu of %zu bytes: %d (%s)", wr.done, len, wr.err, weft_strerror(wr.err));
  if (rd.err || rd.done != len)
    fail(a, "the reader got %zu of %zu bytes: %d (%s)", rd.done, len, rd.err,
         rd.err == -1000 ? "wrong bytes" : weft_strerror(rd.err));
  atomic_fetch_add(&g_bytes_moved, (long)len);
}

/* Mutex, condition variable, semaphore: contention inside one operation -------------------------------------
 */

typedef struct lock_ctx {
  weft_mutex_t m;
  long count; /* guarded by m */
  atomic_int inside;
  atomic_int bad;
  int iters;
} lock_ctx;

static int lock_elem(void *ctx, size_t i) {
  lock_ctx *l = ctx;
  for (int k = 0; k < l->iters; k++) {
    int rc = (i + (size_t)k) % 5 == 0 ? weft_mutex_trylock(&l->m) : weft_mutex_lock(&l->m);
    if (rc == -EBUSY) continue;
    if (rc != 0) {
      atomic_fetch_add(&l->bad, 1);
      continue;
    }
    if (atomic_fetch_add(&l->inside, 1) != 0) atomic_fetch_add(&l->bad, 1);
    long c = l->count;
    if ((i + (size_t)k) % 3 == 0) weft_yield(); /* hold it across a switch */
    l->count = c + 1;
    atomic_fetch_sub(&l->inside, 1);
    if (weft_mutex_unlock(&l->m) != 0) atomic_fetch_add(&l->bad, 1);
  }
  return 0;
}

static void op_mutex(agent *a) {
  lock_ctx l;
  memset(&l, 0, sizeof l);
  weft_mutex_init(&l.m);
  size_t n = 2 + rel_below(&a->rng, sz(24));
  l.iters = 1 + (int)rel_below(&a->rng, 40);
  int rc = weft_pmap(n, lock_elem, &l, &blocking);
  /* trylock may miss: the count is at most n * iters and at least the plain locks. */
  long plain = 0;
  for (size_t i = 0; i < n; i++)
    for (int k = 0; k < l.iters; k++) plain += (i + (size_t)k) % 5 != 0;
  if (rc != 0 || atomic_load(&l.bad) || l.count < plain || l.count > (long)n * l.iters)
    fail(a, "mutex: %zu elements x %d: count %ld (at least %ld), %d exclusion or unlock failures", n, l.iters,
         l.count, plain, atomic_load(&l.bad));
  weft_mutex_destroy(&l.m);
}

/* A bounded queue with a mutex and two condition variables: producers and consumers. */
#define Q_CAP 4
typedef struct cq {
  weft_mutex_t m;
  weft_cond_t not_empty, not_full;
  long q[Q_CAP];
  int head, len;
  int producers_left;
  long pushed_sum, popped_sum, pushed, popped; /* guarded by m */
  size_t nprod;
  int per;
  atomic_int bad;
} cq;

static int cq_elem(void *ctx, size_t i) {
  cq *c = ctx;
  if (i < c->nprod) {
    for (int k = 0; k < c->per; k++) {
      long v = (long)(i * 100000 + (size_t)k + 1);
      weft_mutex_lock(&c->m);
      bool gave_up = false;
      while (c->len == Q_CAP) {
        int rc = weft_cond_wait(&c->not_full, &c->m, dep_deadline(20));
        if (rc == -ETIMEDOUT) {
          gave_up = true; /* without fibers the consumers may not run yet: stop producing */
          break;
        }
        if (rc != 0) atomic_fetch_add(&c->bad, 1);
      }
      if (gave_up) {
        weft_mutex_unlock(&c->m);
        break;
      }
      c->q[(c->head + c->len) % Q_CAP] = v;
      c->len++;
      c->pushed++;
      c->pushed_sum += v;
      weft_cond_signal(&c->not_empty);
      weft_mutex_unlock(&c->m);
    }
    weft_mutex_lock(&c->m);
    c->producers_left--;
    weft_cond_broadcast(&c->not_empty);
    weft_mutex_unlock(&c->m);
    return 0;
  }
  int idle = 0;
  weft_mutex_lock(&c->m);
  for (;;) {
    if (c->len > 0) {
      long v = c->q[c->head];
      c->head = (c->head + 1) % Q_CAP;
      c->len--;
      c->popped++;
      c->popped_sum += v;
      weft_cond_signal(&c->not_full);
      idle = 0;
      continue;
    }
    if (c->producers_left == 0) break;
    int rc = weft_cond_wait(&c->not_empty, &c->m, dep_deadline(20));
    if (rc == -ETIMEDOUT && ++idle > 3) break; /* without fibers: the agent drains what is left */
    if (rc != 0 && rc != -ETIMEDOUT) atomic_fetch_add(&c->bad, 1);
  }
  weft_mutex_unlock(&c->m);
  return 0;
}

static void op_cond(agent *a) {
  cq c;
  memset(&c, 0, sizeof c);
  weft_mutex_init(&c.m);
  weft_cond_init(&c.not_empty);
  weft_cond_init(&c.not_full);
  c.nprod = 1 + rel_below(&a->rng, 6);
  size_t ncons = 1 + rel_below(&a->rng, 6);
  c.per = 1 + (int)rel_below(&a->rng, sz(200));
  c.producers_left = (int)c.nprod;
  int rc = weft_pmap(c.nprod + ncons, cq_elem, &c, &blocking);
  /* What the consumers left (only without fibers). */
  while (c.len > 0) {
    c.popped_sum += c.q[c.head];
    c.popped++;
    c.head = (c.head + 1) % Q_CAP;
    c.len--;
  }
  if (g_fibers && c.pushed != (long)(c.nprod * (size_t)c.per))
    fail(a, "cond queue: %ld of %zu items pushed", c.pushed, c.nprod * (size_t)c.per);
  if (rc != 0 || atomic_load(&c.bad) || c.pushed != c.popped || c.pushed_sum != c.popped_sum)
    fail(a, "cond queue: pushed %ld (sum %ld), popped %ld (sum %ld), %d wait errors", c.pushed, c.pushed_sum,
         c.popped, c.popped_sum, atomic_load(&c.bad));
  weft_cond_destroy(&c.not_empty);
  weft_cond_destroy(&c.not_full);
  weft_mutex_destroy(&c.m);
}

typedef struct sem_ctx {
  weft_sem_t s;
  int units;
  atomic_int inside, peak, bad;
} sem_ctx;

static int sem_elem(void *ctx, size_t i) {
  sem_ctx *s = ctx;
  int rc = i % 4 == 0 ? weft_sem_wait(&s->s, 0) : weft_sem_wait(&s->s, -1);
  if (rc == -ETIMEDOUT) return 0;
  if (rc != 0) {
    atomic_fetch_add(&s->bad, 1);
    return 0;
  }
  int now = atomic_fetch_add(&s->inside, 1) + 1;
  if (now > s->units) atomic_fetch_add(&s->bad, 1);
  int p = atomic_load(&s->peak);
  while (now > p && !atomic_compare_exchange_weak(&s->peak, &p, now)) {
  }
  if (i % 2) weft_sleep_ns(30 * US);
  atomic_fetch_sub(&s->inside, 1);
  if (weft_sem_post(&s->s) != 0) atomic_fetch_add(&s->bad, 1);
  return 0;
}

static void op_sem(agent *a) {
  sem_ctx s;
  memset(&s, 0, sizeof s);
  s.units = 1 + (int)rel_below(&a->rng, 4);
  weft_sem_init(&s.s, (unsigned)s.units);
  size_t n = 1 + rel_below(&a->rng, sz(64));
  int rc = weft_pmap(n, sem_elem, &s, &blocking);
  /* Every unit came back. */
  int back = 0;
  while (weft_sem_wait(&s.s, 0) == 0) back++;
  if (rc != 0 || atomic_load(&s.bad) || back != s.units)
    fail(a, "semaphore of %d units, %zu users: %d errors, peak %d inside, %d units back", s.units, n,
         atomic_load(&s.bad), atomic_load(&s.peak), back);
  weft_sem_destroy(&s.s);
}

/* Channel: producers and consumers of one operation; each element is marked when sent and when received. */
typedef struct ch_ctx {
  weft_chan_t *ch;
  size_t nprod, ncons;
  int per;
  atomic_uchar *sent, *recvd; /* by element id: producer * per + k */
  atomic_int producers_left, bad;
  atomic_long sum_sent, sum_recvd;
} ch_ctx;

static int ch_elem(void *ctx, size_t i) {
  ch_ctx *c = ctx;
  if (i < c->nprod) {
    for (int k = 0; k < c->per; k++) {
      int id = (int)i * c->per + k;
      int rc = weft_chan_send(c->ch, &id, dep_deadline(20));
      if (rc == -ETIMEDOUT) break; /* not sent: without fibers no consumer may be running */
      if (rc != 0) {
        atomic_fetch_add(&c->bad, 1);
        break;
      }
      atomic_fetch_add(&c->sent[id], 1);
      atomic_fetch_add(&c->sum_sent, id);
    }
    if (atomic_fetch_sub(&c->producers_left, 1) == 1) weft_chan_close(c->ch); /* the last producer closes */
    return 0;
  }
  int idle = 0;
  for (;;) {
    int id = -1;
    int rc = weft_chan_recv(c->ch, &id, dep_deadline(20));
    if (rc == -EPIPE) break;
    if (rc == -ETIMEDOUT) {
      if (++idle > 3) break; /* the agent drains what is left */
      continue;
    }
    if (rc != 0 || id < 0 || id >= (int)c->nprod * c->per) {
      atomic_fetch_add(&c->bad, 1);
      break;
    }
    idle = 0;
    atomic_fetch_add(&c->recvd[id], 1);
    atomic_fetch_add(&c->sum_recvd, id);
  }
  return 0;
}

static void op_chan(agent *a) {
  ch_ctx c;
  memset(&c, 0, sizeof c);
  static const size_t caps[] = {0, 1, 4, 64};
  size_t cap = caps[rel_below(&a->rng, 4)];
  if (weft_chan_create(cap, sizeof(int), &c.ch) != 0) {
    fail(a, "weft_chan_create failed");
    return;
  }
  c.nprod = 1 + rel_below(&a->rng, 5);
  c.ncons = 1 + rel_below(&a->rng, 5);
  c.per = 1 + (int)rel_below(&a->rng, sz(300));
  size_t total = c.nprod * (size_t)c.per;
  c.sent = calloc(total, 1);
  c.recvd = calloc(total, 1);
  atomic_init(&c.producers_left, (int)c.nprod);
  int rc = weft_pmap(c.nprod + c.ncons, ch_elem, &c, &blocking);
  for (;;) { /* what the consumers left */
    int id;
    int r = weft_chan_recv(c.ch, &id, 0);
    if (r != 0) {
      if (r != -EPIPE)
        fail(a, "draining a closed channel gave %d (%s), expected -EPIPE at the end", r, weft_strerror(r));
      break;
    }
    if (id >= 0 && id < (int)total) {
      atomic_fetch_add(&c.recvd[id], 1);
      atomic_fetch_add(&c.sum_recvd, id);
    }
  }
  size_t lost = 0, dup = 0, ghost = 0, nsent = 0;
  for (size_t i = 0; i < total; i++) {
    unsigned s = atomic_load(&c.sent[i]), r = atomic_load(&c.recvd[i]);
    nsent += s;
    lost += s == 1 && r == 0;
    dup += r > 1 || s > 1;
    ghost += s == 0 && r > 0;
  }
  if (g_fibers && nsent != total)
    fail(a, "channel (capacity %zu): %zu of %zu sent with no deadline", cap, nsent, total);
  if (rc != 0 || atomic_load(&c.bad) || lost || dup || ghost ||
      atomic_load(&c.sum_sent) != atomic_load(&c.sum_recvd))
    fail(a,
         "channel (capacity %zu, %zu producers, %zu consumers): %zu lost, %zu duplicated, %zu received "
         "unsent, %d errors",
         cap, c.nprod, c.ncons, lost, dup, ghost, atomic_load(&c.bad));
  atomic_fetch_add(&g_chan_elems, (long)nsent);
  weft_chan_free(c.ch);
  free(c.sent);
  free(c.recvd);
}

/* The round's shared primitives: every agent, every context, none waiting on another -----------------------
 */

static void op_shared(agent *a) {
  for (int k = 0; k < 8; k++) {
    switch (rel_below(&a->rng, 3)) {
    case 0: {
      int rc = weft_mutex_lock(&g_mu);
      if (rc != 0) {
        fail(a, "weft_mutex_lock(shared) returned %d (%s)", rc, weft_strerror(rc));
        break;
      }
      if (atomic_fetch_add(&g_mu_inside, 1) != 0) fail(a, "two holders of the shared mutex at once");
      long c = g_mu_count;
      if (k % 2) weft_yield();
      g_mu_count = c + 1;
      atomic_fetch_sub(&g_mu_inside, 1);
      a->locks++;
      weft_mutex_unlock(&g_mu);
      break;
    }
    case 1: { /* send or receive without waiting long for anyone */
      int64_t d = rel_below(&a->rng, 2) ? 0 : weft_now_ns() + 50 * US;
      int v = (int)rel_below(&a->rng, 1000) + 1;
      if (rel_below(&a->rng, 2)) {
        int rc = weft_chan_send(g_chan, &v, d);
        if (rc == 0)
          a->chan_sent += v;
        else if (rc != -ETIMEDOUT)
          fail(a, "weft_chan_send(shared) returned %d", rc);
        else if (d && weft_now_ns() < d)
          fail(a, "weft_chan_send(shared) timed out early");
      } else {
        int rc = weft_chan_recv(g_chan, &v, d);
        if (rc == 0)
          a->chan_recvd += v;
        else if (rc != -ETIMEDOUT)
          fail(a, "weft_chan_recv(shared) returned %d", rc);
        else if (d && weft_now_ns() < d)
          fail(a, "weft_chan_recv(shared) timed out early");
      }
      break;
    }
    default: {
      int64_t d = rel_below(&a->rng, 2) ? 0 : weft_now_ns() + 100 * US;
      int rc = weft_sem_wait(&g_sem, d);
      if (rc == 0) {
        if (atomic_fetch_add(&g_sem_inside, 1) >= SEM_UNITS)
          fail(a, "more than %d holders of the shared semaphore", SEM_UNITS);
        weft_yield();
        atomic_fetch_sub(&g_sem_inside, 1);
        weft_sem_post(&g_sem);
      } else if (rc != -ETIMEDOUT) {
        fail(a, "weft_sem_wait(shared) returned %d", rc);
      } else if (d && weft_now_ns() < d) {
        fail(a, "weft_sem_wait(shared) timed out %lld ns early", (long long)(d - weft_now_ns()));
      }
      break;
    }
    }
  }
}

/* Offload: the call sees the caller's scope; its result comes back ---------------------------------- */

static void op_offload(agent *a) {
  map_ctx m;
  memset(&m, 0, sizeof m);
  m.scope = a->scope;
  for (int k = 0; k < 3; k++) {
    void *r = NULL;
    int rc = weft_blocking(offload_check, &m, &r);
    if (rc != 0 || r != &m) fail(a, "weft_blocking returned %d, %p", rc, r);
  }
  if (atomic_load(&m.bad_scope)) fail(a, "an offloaded call saw the wrong scoped value");
}

/* Scoped values: a nested operation under a new binding, which must not leak out -------------------- */

static const op_fn *g_ops;
static size_t g_nops_enabled;
static void run_op(agent *a, op_fn fn, const char *name);

typedef struct scope_arg {
  agent *a;
  int depth;
} scope_arg;

static void *scope_body(void *p) {
  scope_arg *s = p;
  agent *a = s->a;
  if (!scope_is(a->scope)) fail(a, "weft_scope_run's fn does not see its own binding");
  /* Anything but another scope (bounded depth), run under the binding. */
  size_t pick = rel_below(&a->rng, g_nops_enabled);
  g_ops[pick](a);
  return (void *)1;
}

static void op_scope(agent *a) {
  void *outer = a->scope;
  void *mine = new_scope_value();
  a->scope = mine;
  scope_arg s = {a, 0};
  void *r = NULL;
  int rc = weft_scope_run(g_key, mine, scope_body, &s, &r);
  a->scope = outer;
  if (rc != 0 || r != (void *)1) fail(a, "weft_scope_run returned %d", rc);
  if (!scope_is(outer)) fail(a, "a scoped binding leaked out of weft_scope_run");
}

/* The operation table ------------------------------------------------------------------------------- */

typedef struct op_def {
  const char *name;
  op_fn fn;
  unsigned weight;
} op_def;

static const op_def all_ops[] = {
    {"pmap_cpu", op_pmap_cpu, 3}, {"pmap_blocking", op_pmap_blocking, 3},
    {"nested", op_nested, 2},     {"futures", op_futures, 4},
    {"sleep", op_sleep, 1},       {"io", op_io, 2},
    {"mutex", op_mutex, 2},       {"cond", op_cond, 2},
    {"sem", op_sem, 2},           {"chan", op_chan, 2},
    {"shared", op_shared, 3},     {"offload", op_offload, 1},
    {"scope", op_scope, 2},
};
#define NOPS (sizeof all_ops / sizeof all_ops[0])

static op_fn enabled_fns[64];
static const char *enabled_names[64];
static size_t nenabled;         /* in the weighted table */
static op_fn scope_inner[NOPS]; /* ops a scope may nest (not scope itself) */

static bool skipped(const char *name) {
  if (!g_skip[0]) return false;
  char buf[sizeof g_skip + 2];
  snprintf(buf, sizeof buf, ",%s,", g_skip);
  char pat[64];
  snprintf(pat, sizeof pat, ",%s,", name);
  return strstr(buf, pat) != NULL;
}

static void build_op_table(void) {
  nenabled = 0;
  g_nops_enabled = 0;
  for (size_t i = 0; i < NOPS; i++) {
    if (skipped(all_ops[i].name)) continue;
    for (unsigned w = 0; w < all_ops[i].weight && nenabled < 64; w++) {
      enabled_fns[nenabled] = all_ops[i].fn;
      enabled_names[nenabled++] = all_ops[i].name;
    }
    if (all_ops[i].fn != op_scope) scope_inner[g_nops_enabled++] = all_ops[i].fn;
  }
  g_ops = scope_inner;
}

static void run_op(agent *a, op_fn fn, const char *name) {
  atomic_store(&a->op, name);
  fn(a);
  atomic_fetch_add(&g_ops_run, 1);
  tick(a);
}

static void agent_run(agent *a) {
  for (unsigned k = 0; k < a->nops && nenabled; k++) {
    atomic_store(&a->iter, k);
    size_t pick = rel_below(&a->rng, nenabled);
    run_op(a, enabled_fns[pick], enabled_names[pick]);
  }
  atomic_store(&a->op, "done");
  a->done = true;
}

/*
 * The program's own threads live for the whole run and take an agent (or,
 * for the region host, the two agents of a parallel region) each round,
 * as the threads of an HPC code do. Threads that are masters of OpenMP
 * regions with tasks and then exit corrupt LLVM libomp's task allocator
 * (libomp 14: "Assertion failure at kmp_alloc.cpp"; reproduced without
 * weft), so a round must not start and end threads of its own.
 */
typedef struct prog_thread {
  pthread_t t;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  unsigned gen, done_gen; /* a round is given by gen++, finished when done_gen == gen */
  bool region;            /* runs a parallel region of two agents */
  agent *a[2];            /* this round's agents; a[0] NULL: idle this round */
  bool quit;
} prog_thread;

static void run_assignment(prog_thread *pt);

static void *prog_thread_main(void *p) {
  prog_thread *pt = p;
  pthread_mutex_lock(&pt->mu);
  for (;;) {
    while (pt->gen == pt->done_gen && !pt->quit) pthread_cond_wait(&pt->cv, &pt->mu);
    if (pt->quit) break;
    pthread_mutex_unlock(&pt->mu);
    if (pt->a[0]) run_assignment(pt);
    pthread_mutex_lock(&pt->mu);
    pt->done_gen = pt->gen;
    pthread_cond_broadcast(&pt->cv);
  }
  pthread_mutex_unlock(&pt->mu);
  return NULL;
}

static void prog_thread_start(prog_thread *pt, bool region) {
  memset(pt, 0, sizeof *pt);
  pt->region = region;
  pthread_mutex_init(&pt->mu, NULL);
  pthread_cond_init(&pt->cv, NULL);
  pthread_create(&pt->t, NULL, prog_thread_main, pt);
}

static void prog_thread_give(prog_thread *pt, agent *a0, agent *a1) {
  pthread_mutex_lock(&pt->mu);
  pt->a[0] = a0;
  pt->a[1] = a1;
  pt->gen++;
  pthread_cond_broadcast(&pt->cv);
  pthread_mutex_unlock(&pt->mu);
}

static void prog_thread_wait(prog_thread *pt) {
  pthread_mutex_lock(&pt->mu);
  while (pt->done_gen != pt->gen) pthread_cond_wait(&pt->cv, &pt->mu);
  pthread_mutex_unlock(&pt->mu);
}

static void prog_thread_stop(prog_thread *pt) {
  pthread_mutex_lock(&pt->mu);
  pt->quit = true;
  pthread_cond_broadcast(&pt->cv);
  pthread_mutex_unlock(&pt->mu);
  pthread_join(pt->t, NULL);
  pthread_mutex_destroy(&pt->mu);
  pthread_cond_destroy(&pt->cv);
}

#define NPROG 3 /* two plain threads and the host of a parallel region */
static prog_thread g_prog[NPROG];

static void *agent_future(void *p) {
  agent_run(p);
  return p;
}

static void run_assignment(prog_thread *pt) {
  if (!pt->region) {
    agent_run(pt->a[0]);
    return;
  }
#ifdef WEFT_HAVE_OPENMP
  /* A parallel region of the program's own: each of its threads is an agent. */
#pragma omp parallel num_threads(2)
  {
    int t = omp_get_thread_num();
    if (t < 2) agent_run(pt->a[t]);
  }
#endif
  /* A thread the runtime did not give (or no OpenMP): its agent runs here, after. */
  for (int t = 0; t < 2; t++)
    if (!pt->a[t]->done) agent_run(pt->a[t]);
}

/* --- the watchdog ---------------------------------------------------------------------------------- */

static atomic_bool wd_stop;
static pthread_mutex_t wd_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wd_cv = PTHREAD_COND_INITIALIZER;

static unsigned long progress_sum(void) {
  unsigned long s = 0;
  int n = atomic_load(&g_nagents);
  for (int i = 0; i < n; i++) s += atomic_load(&g_agents[i].progress);
  return s + (unsigned long)atomic_load(&g_ops_run);
}

/*
 * Two ways a round can fail to end: no progress at all for g_watchdog_s
 * (a lost wake-up), or progress that never finishes the round (a livelock:
 * waits with short deadlines retried for ever keep the counters moving).
 * The second is a round older than twice g_watchdog_s (240 s by default,
 * within the suite's CTest limit of 300 s); CI once saw the
 * stress suite under ThreadSanitizer run into its CTest timeout with the
 * first watchdog silent (issue 29), and a report beats a timeout.
 */
static void *watchdog_main(void *p) {
  (void)p;
  unsigned long last = 0;
  unsigned last_round = (unsigned)-1;
  int64_t since = weft_now_ns(), round_since = since;
  pthread_mutex_lock(&wd_mu);
  while (!atomic_load(&wd_stop)) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 1;
    pthread_cond_timedwait(&wd_cv, &wd_mu, &ts);
    unsigned long now = progress_sum();
    unsigned r = atomic_load(&g_round);
    int64_t t = weft_now_ns();
    if (r != last_round) round_since = t;
    bool livelock = t - round_since >= 2 * (int64_t)g_watchdog_s * 1000 * MS;
    if (!livelock && (now != last || r != last_round)) {
      last = now;
      last_round = r;
      since = t;
      continue;
    }
    if (!livelock && t - since < (int64_t)g_watchdog_s * 1000 * MS) continue;
    weft__fiber_stats fs;
    weft__fiber_get_stats(&fs);
    weft__offload_stats os;
    weft__offload_get_stats(&os);
    if (livelock)
      fprintf(stderr, "\nstress: round %u still running after %u s, with progress (a livelock?)", r,
              2 * g_watchdog_s);
    else
      fprintf(stderr, "\nstress: no progress for %u s", g_watchdog_s);
    fprintf(stderr,
            ": seed=%llu round=%u (replay: WEFT_STRESS_SEED=%llu WEFT_STRESS_ROUND=%u)\n"
            "  fibers live %llu, carriers %u, offload threads %u (%u running, %u queued)\n",
            (unsigned long long)g_seed, r, (unsigned long long)g_seed, r, (unsigned long long)fs.live,
            weft_carrier_count(), os.threads, os.running, os.queued);
    int n = atomic_load(&g_nagents);
    for (int i = 0; i < n; i++)
      fprintf(stderr, "  agent %-18s op %-14s iteration %u\n", g_agents[i].name, atomic_load(&g_agents[i].op),
              atomic_load(&g_agents[i].iter));
    fflush(stderr);
    abort();
  }
  pthread_mutex_unlock(&wd_mu);
  return NULL;
}

/* --- a round --------------------------------------------------------------------------------------- */

static agent *agent_new(ag_kind kind, rel_rng *round_rng, unsigned round, unsigned max_ops) {
  int i = atomic_load(&g_nagents);
  if (i >= MAX_AGENTS) return NULL;
  agent *a = &g_agents[i];
  /* The watchdog reads the slots' progress under wd_mu: a slot of the last round is reset under it too
   * (ThreadSanitizer saw the reset race with a read of a stale count). */
  pthread_mutex_lock(&wd_mu);
  memset(a, 0, sizeof *a);
  pthread_mutex_unlock(&wd_mu);
  a->id = i;
  a->kind = kind;
  snprintf(a->name, sizeof a->name, "%s#%d", ag_kind_names[kind], i);
  a->rng = rel_derive(g_seed, round, (uint64_t)i + 1, 0);
  a->nops = 2 + (unsigned)rel_below(round_rng, max_ops);
  atomic_init(&a->op, "starting");
  atomic_store(&g_nagents, i + 1);
  return a;
}

/* Run one round; false when it failed. */
static bool run_round(unsigned round) {
  atomic_store(&g_round, round);
  rel_rng rr = rel_derive(g_seed, round, 0, 0);
  atomic_store(&g_nagents, 0);
  atomic_store(&g_nrecs, 0);
  /*
   * The runtime is stopped between rounds: each round has settings of its
   * own (one carrier or several; the carriers waiting in epoll, with files on
   * their rings from the first file I/O on, WEFT_IO_URING=1; in their rings
   * from the start, 2; or io_uring off, 0), unless the environment fixes them.
   */
  weft_config cfg;
  weft_config_init(&cfg);
  static const unsigned carriers[] = {0, 0, 1, 2, 3};
  cfg.carriers = carriers[rel_below(&rr, 5)];
  static const int uring[] = {0, 2, -1};
  cfg.io_uring = uring[rel_below(&rr, 3)];
  if (weft_configure(&cfg) != 0) fail(NULL, "weft_configure refused the round's settings");
  g_fibers = weft_fibers_available();
  int failures_before = atomic_load(&g_failures);

  weft_mutex_init(&g_mu);
  g_mu_count = 0;
  atomic_store(&g_mu_inside, 0);
  weft_sem_init(&g_sem, SEM_UNITS);
  atomic_store(&g_sem_inside, 0);
  weft_chan_create(rel_below(&rr, 2) ? 0 : 16, sizeof(int), &g_chan);

  unsigned max_ops = (unsigned)sz(12);
  agent *main_agent = agent_new(AG_MAIN, &rr, round, max_ops);
  unsigned nthreads = (unsigned)rel_below(&rr, 3), nfibers = 1 + (unsigned)rel_below(&rr, 3);
  unsigned ncpu = (unsigned)rel_below(&rr, 2);
  bool omp = false;
#ifdef WEFT_HAVE_OPENMP
  omp = rel_below(&rr, 2);
#endif
  agent *thr_agents[2] = {NULL, NULL};
  for (unsigned i = 0; i < nthreads; i++) thr_agents[i] = agent_new(AG_THREAD, &rr, round, max_ops);
  weft_future *fut[8];
  agent *fut_agents[8];
  unsigned nfut = 0;
  for (unsigned i = 0; i < nfibers; i++) fut_agents[nfut++] = agent_new(AG_FIBER, &rr, round, max_ops);
  for (unsigned i = 0; i < ncpu; i++) fut_agents[nfut++] = agent_new(AG_CPU, &rr, round, max_ops);
  agent *omp_agents[2] = {NULL, NULL};
  if (omp) {
    omp_agents[0] = agent_new(AG_OMP, &rr, round, max_ops);
    omp_agents[1] = agent_new(AG_OMP, &rr, round, max_ops);
  }
  /* Everyone starts. */
  for (unsigned i = 0; i < 2; i++) prog_thread_give(&g_prog[i], thr_agents[i], NULL);
  prog_thread_give(&g_prog[2], omp_agents[0], omp_agents[1]);
  for (unsigned i = 0; i < nfut; i++) {
    weft_kind k = fut_agents[i]->kind == AG_CPU ? WEFT_CPU : WEFT_BLOCKING;
    if (weft_future_start(k, agent_future, fut_agents[i], &fut[i]) != 0) {
      fail(fut_agents[i], "could not start the agent's future");
      fut[i] = NULL;
    }
  }
  agent_run(main_agent);
  /* Everyone ends. */
  for (unsigned i = 0; i < NPROG; i++) prog_thread_wait(&g_prog[i]);
  for (unsigned i = 0; i < nfut; i++) {
    if (!fut[i]) continue;
    void *r = NULL;
    int rc = weft_future_get(fut[i], -1, &r);
    if (rc != 0 || r != fut_agents[i]) fail(fut_agents[i], "the agent's future returned %d", rc);
    weft_future_free(fut[i]);
  }
  /* The shared primitives' accounts. */
  unsigned long locks = 0;
  long sent = 0, recvd = 0;
  int n = atomic_load(&g_nagents);
  for (int i = 0; i < n; i++) {
    locks += g_agents[i].locks;
    sent += g_agents[i].chan_sent;
    recvd += g_agents[i].chan_recvd;
  }
  if ((unsigned long)g_mu_count != locks)
    fail(NULL, "the shared mutex: counter %ld after %lu locks", g_mu_count, locks);
  int v;
  while (weft_chan_recv(g_chan, &v, 0) == 0) recvd += v;
  if (sent != recvd) fail(NULL, "the shared channel: %ld sent, %ld received", sent, recvd);
  int units = 0;
  while (weft_sem_wait(&g_sem, 0) == 0) units++;
  if (units != SEM_UNITS) fail(NULL, "the shared semaphore: %d of %d units came back", units, SEM_UNITS);
  weft_chan_free(g_chan);
  weft_sem_destroy(&g_sem);
  weft_mutex_destroy(&g_mu);

  /* Everything has ended once weft_shutdown returns: detached futures too. Then their records. */
  char why[512];
  if (rel_check_clean(g_baseline_fds, why, sizeof why) != 0) fail(NULL, "%s", why);
  int nr = atomic_load(&g_nrecs);
  if (nr > MAX_RECS) nr = MAX_RECS;
  for (int i = 0; i < nr; i++) {
    fut_rec *r = &g_recs[i];
    int ran = atomic_load(&r->ran);
    if (ran > 1 || (r->must == 0 && ran != 0) || (r->must == 1 && ran != 1)) {
      atomic_store(&r->owner->iter, r->iter);
      fail(r->owner, "a future (%s) ran %d times, expected %s", r->what, ran,
           r->must == 0   ? "never"
           : r->must == 1 ? "once"
                          : "at most once");
    }
    if (atomic_load(&r->bad)) {
      atomic_store(&r->owner->iter, r->iter);
      fail(r->owner, "a future's body (%s) saw the wrong scoped value, or missed its cancellation", r->what);
    }
  }
  return atomic_load(&g_failures) == failures_before;
}

/* --- the test -------------------------------------------------------------------------------------- */

static uint64_t fresh_seed(void) {
  uint64_t s = 0;
  FILE *f = fopen("/dev/urandom", "rb");
  if (!f || fread(&s, sizeof s, 1, f) != 1) s = (uint64_t)weft_now_ns() ^ ((uint64_t)getpid() << 32);
  if (f) fclose(f);
  return s;
}

static void read_settings(void) {
  const char *e = getenv("WEFT_STRESS_SEED");
  g_seed = e && *e ? strtoull(e, NULL, 0) : fresh_seed();
  e = getenv("WEFT_STRESS_SECONDS");
  if (e && *e) g_seconds = strtod(e, NULL);
  e = getenv("WEFT_STRESS_ROUND");
  if (e && *e) g_only_round = strtol(e, NULL, 0);
  e = getenv("WEFT_STRESS_WATCHDOG");
  if (e && *e) g_watchdog_s = (unsigned)strtoul(e, NULL, 0);
  e = getenv("WEFT_STRESS_SKIP");
  snprintf(g_skip, sizeof g_skip, "%s", e ? e : "");
  /* Valgrind and qemu run everything tens of times slower; the sanitizers several times. */
  g_scale = weft_test_slow_env() ? 10 : REL_TSAN ? 4 : REL_SANITIZED ? 2 : 1;
  if (weft_test_slow_env() && g_watchdog_s < 600) g_watchdog_s = 600;
}

static void test_random_workload(void) {
  read_settings();
  printf("\n    seed %llu, %.0f s, scale 1/%u%s%s (replay: WEFT_STRESS_SEED=%llu)",
         (unsigned long long)g_seed, g_seconds, g_scale, g_skip[0] ? ", skipping " : "", g_skip,
         (unsigned long long)g_seed);
  fflush(stdout);
  build_op_table();
  g_recs = calloc(MAX_RECS, sizeof *g_recs);
  CU_ASSERT_EQUAL_FATAL(weft_key_create(&g_key, NULL), 0);
  g_baseline_fds = weft_test_fd_count();
  atomic_store(&wd_stop, false);
  pthread_t wd;
  pthread_create(&wd, NULL, watchdog_main, NULL);
  for (int i = 0; i < NPROG; i++) prog_thread_start(&g_prog[i], i == NPROG - 1);

  int64_t t0 = weft_now_ns(), end = t0 + (int64_t)(g_seconds * 1e9);
  unsigned rounds = 0, failed_round = 0;
  bool ok = true;
  int64_t next_report = t0 + 5000 * MS;
  for (unsigned r = g_only_round >= 0 ? (unsigned)g_only_round : 0;; r++) {
    ok = run_round(r);
    rounds++;
    if (!ok) {
      failed_round = r;
      break;
    }
    if (g_only_round >= 0 || weft_now_ns() >= end) break;
    if (weft_now_ns() >= next_report) {
      printf("\n    %u rounds, %ld operations so far", rounds, atomic_load(&g_ops_run));
      fflush(stdout);
      next_report += 5000 * MS;
    }
  }
  for (int i = 0; i < NPROG; i++) prog_thread_stop(&g_prog[i]);
  atomic_store(&wd_stop, true);
  pthread_mutex_lock(&wd_mu);
  pthread_cond_signal(&wd_cv);
  pthread_mutex_unlock(&wd_mu);
  pthread_join(wd, NULL);
  weft_key_delete(g_key);
  free(g_recs);
  weft_config dflt;
  weft_config_init(&dflt);
  weft_configure(&dflt);
  double secs = (double)(weft_now_ns() - t0) / 1e9;
  printf(
      "\n    %u rounds in %.1f s (%s): %ld operations, %ld map elements, %ld futures, %ld channel elements, "
      "%ld bytes through sockets, %ld deadlines passed",
      rounds, secs, g_fibers ? "fibers" : "no fibers", atomic_load(&g_ops_run), atomic_load(&g_elems_run),
      atomic_load(&g_futures_run), atomic_load(&g_chan_elems), atomic_load(&g_bytes_moved),
      atomic_load(&g_timeouts));
  if (!ok)
    printf("\n    FAILED in round %u: replay with WEFT_STRESS_SEED=%llu WEFT_STRESS_ROUND=%u", failed_round,
           (unsigned long long)g_seed, failed_round);
  CU_ASSERT_EQUAL(atomic_load(&g_failures), 0);
}

/*
 * A fiber woken by a thread that is not a carrier (here: the OpenMP thread
 * that ran the fiber's CPU map) can run to its end, and the program can
 * call weft_shutdown, while the waker is still inside weft__fiber_ready:
 * after it has queued the fiber, it still wakes the carrier's poller (reads
 * the carrier, writes its eventfd). Shutdown must not free the carrier (or
 * close that eventfd, whose number the program may reuse) under it.
 * ThreadSanitizer sees the race on every run; natively the window is a few
 * instructions wide.
 */
static int wake_elem(void *ctx, size_t i) {
  (void)ctx;
  (void)i;
  return 0;
}

static void *cpu_map_on_fiber(void *arg) {
  (void)arg;
  return (void *)(intptr_t)weft_pmap(64, wake_elem, NULL, NULL);
}

static void test_wake_then_shutdown(void) {
  int n = weft_test_slow_env() ? 10 : REL_SANITIZED ? 50 : 200;
  for (int k = 0; k < n; k++) {
    weft_future *f = NULL;
    CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_BLOCKING, cpu_map_on_fiber, NULL, &f), 0);
    void *r = (void *)1;
    CU_ASSERT_EQUAL(weft_future_get(f, -1, &r), 0);
    CU_ASSERT(r == NULL);
    weft_future_free(f);
    weft_shutdown(); /* at once: the waker may still be on its way out */
  }
}

int main(int argc, char **argv) {
  static const weft_test tests[] = {
      {"wake_then_shutdown", test_wake_then_shutdown},
      {"random_workload", test_random_workload},
      {NULL, NULL},
  };
  return weft_test_run(argc, argv, "stress", tests);
}
