/*
 * This file contains the OpenMP backend: how WEFT_CPU work runs as OpenMP
 * tasks.
 *
 * A parallel map outside any parallel region opens one on the runtime's
 * pooled threads (num_threads from OMP_NUM_THREADS, as any region would);
 * the implicit task of each thread claims chunks of the range until none are
 * left. Inside a region or task it creates one explicit task per other thread
 * of the enclosing team, in a taskgroup, and claims chunks itself: never a
 * nested team, so never more threads than the program asked for.
 *
 * How many threads a map with the automatic grain gets, the caller alone
 * included, is the cost model's decision (model.h, asked by api/pmap.c):
 * weft__cpu_team says what a fork from here would get and weft__cpu_fork
 * forks exactly that many. An explicit grain gets every thread, as before.
 *
 * What a fork costs beyond the runtime's own region: in a region every
 * thread of the team is certain to run the region's body (its end waits for
 * them), so a short map (each share under STATIC_MAX_NS, api/pmap.c) or an
 * explicit grain with at most one chunk per thread is split statically
 * (weft__static_part, one cache line that a worker reads before its first
 * element: no claim, no steal, as schedule(static)); longer
 * maps keep the per-worker slices with stealing, which a preempted worker on
 * a shared machine needs. Tasks in an enclosing team, which may never run
 * until the taskgroup's end, always claim. No fork allocates: the range and
 * the slices live on the caller's stack, the team is the runtime's pool.
 *
 * Asynchronous work (CPU futures, and CPU maps called from fibers, which must
 * not run OpenMP on a carrier thread) goes to the "host": a thread of weft's
 * own that keeps an OpenMP team open while there is work. Every thread of
 * that team (OMP_NUM_THREADS of them, the host thread their master) runs
 * host_worker: work stealing on OpenMP's threads (steal.h, deque.h). A job
 * goes on the deque of the thread that makes it (a CPU future started by a
 * worker or by a plain thread, a map's parts), or, from a fiber, a carrier
 * or before the team is open, in the shared queue (host.queue, first in
 * first out). A worker runs its own newest job, else the shared queue's
 * first, else steals another deque's oldest; with nothing to run it spins
 * for SPIN_NS, yielding, then sleeps on a futex until a push wakes it. A
 * join (weft_future_get, the end of a map) takes back what no one stole and
 * runs other jobs while it waits: it never waits for a worker that has not
 * started. While the team is open (CPU futures opened it), a map from a
 * plain thread puts its parts on the caller's deque too (fork_steal),
 * instead of opening a region whose end waits for every thread. A map does
 * not open the team itself: while weft's team exists beside the caller's
 * own pool, libgomp has more threads than cores and throttles every
 * barrier's spin (to 1,000 rounds), so the program's own regions would wake
 * their threads from futexes: an `omp parallel for` of 10 elements measured
 * 59 µs instead of 1 (docs/benchmarks-journal.md). The team closes after LINGER_NS without work,
 * so an idle weft holds no running threads; the runtime's own spin-wait at
 * its barriers (libgomp's GOMP_SPINCOUNT, libomp's KMP_BLOCKTIME) is the
 * runtime's to set, and weft does not change it (docs/architecture.md).
 * Blocking work on the CPU path (no fibers) keeps first-in-first-out order
 * and regions of its own: its elements may wait on one another.
 *
 * Known OpenMP pitfalls and what weft does about them:
 *  - A task may run at once on the thread that creates it (libgomp does so
 *    when too many tasks are queued, and any runtime may): nothing here
 *    relies on deferral for correctness. Futures are claimed with a CAS, so
 *    whoever gets there first runs them, once.
 *  - libgomp's threads do not survive fork(): a child that opens a parallel
 *    region hangs. In a child forked from a libgomp process, weft runs CPU
 *    work on its own pool (cpu_pool.c) instead. LLVM's libomp re-creates its
 *    threads after fork, and weft keeps using it.
 *  - If the runtime gives the host team a single thread (OMP_THREAD_LIMIT=1,
 *    say), that thread runs every job itself.
 */
#include "cpu.h"
#include "steal.h"

#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>

#include "../base/settings.h"
#include "../base/clock.h"
#include "../base/process.h"
#include "../base/annotate.h"
#include "../base/sys.h"
#include "../base/futex.h"

/* How long the host keeps its team open without work. */
#define LINGER_NS (50 * 1000000LL)

/* How long an idle worker of the host team spins before it sleeps. */
#define SPIN_NS (50 * 1000LL)

/*
 * ThreadSanitizer and the OpenMP runtime's task memory: a task's private
 * copies (the firstprivate pointers) live in memory the runtime allocates and
 * reuses for a later task once the first has run, through its own allocator,
 * which TSan cannot see. Under clang the copies are written by the creating
 * function's own (instrumented) code, so a later task's creator writes where
 * an earlier task's executor read, with no edge TSan knows of between them
 * (reported as a race). No annotation placed in the source can sit between
 * the runtime's allocation and the copy, so the functions that create tasks
 * do nothing else and are not instrumented (WEFT__TSAN_UNSEEN): the copy into
 * runtime memory is the runtime's business, as it is under gcc, where libgomp
 * copies. The bodies the tasks run are instrumented as before.
 */

/* Present only when the runtime is LLVM's libomp. */
extern void __kmpc_fork_call(void *loc, int argc, void *microtask, ...) __attribute__((weak));

static struct {
  pthread_mutex_t mu;     /* guards the fields below, but `active` */
  pthread_cond_t cv;      /* the host thread and the dispatcher wait here */
  weft__jobq queue;       /* queued jobs */
  bool thread_started;    /* the host thread exists (until shutdown joins it) */
  bool stopping;          /* weft__cpu_shutdown is waiting for the queue to drain */
  bool flush;             /* libomp: shutdown wants the team closed now, the thread kept */
  bool idle;              /* the host thread waits for work with its team closed */
  bool exiting;           /* the process is exiting: no job starts, the team stays closed */
  bool waiting;           /* someone waits on cv: submit signals only then */
  pthread_cond_t idle_cv; /* shutdown waits here for idle (libomp) */
  bool cv_ready;          /* cv was initialised with CLOCK_MONOTONIC */
  bool kick;              /* a deque got a job while the team was closing: open it again */
  pthread_t thread;
  atomic_size_t queued;   /* jobs in `queue`: workers look without the lock */
  atomic_bool open;       /* the team runs host_worker: plain threads may push to their own deques */
  atomic_bool closing;    /* the master decided to close the team: workers leave once idle */
  atomic_bool stop_asked; /* stopping, flush or exiting: the master closes the team as soon as it is idle */
  atomic_uint busy;       /* team workers not idle */
} host = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* Set in a child forked from a libgomp process: OpenMP is unusable there. */
static bool omp_unusable;

static void atfork_child(void);
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static void fork_register(void) { weft__on_fork(NULL, NULL, atfork_child); }

/* True on the threads of the host team while they run its region. */
static __thread bool tls_in_host;

static bool runtime_is_libomp(void) { return __kmpc_fork_call != NULL; }

const char *weft__cpu_runtime_name(void) {
  if (omp_unusable) return "pool";
  return runtime_is_libomp() ? "libomp" : "libgomp";
}

bool weft__cpu_in_region(void) { return !omp_unusable && omp_get_level() > 0; }

unsigned weft__cpu_threads(void) {
  if (omp_unusable) return weft__pool_threads();
  int n = omp_get_max_threads();
  return n > 0 ? (unsigned)n : 1u;
}

/* --- parallel maps ------------------------------------------------------ */

static void range_task(weft__range *r, size_t home) { weft__range_drain_from(r, home); }

WEFT__TSAN_UNSEEN static void spawn_range_task(weft__range *r, size_t k) {
#pragma omp task firstprivate(r, k)
  range_task(r, k);
}

/* Inside a region or task: t - 1 tasks in the enclosing team, the caller claiming too. */
static void fork_tasks(weft__range *r, size_t t) {
  r->workers = t;
  weft__range_split(r, t);
#pragma omp taskgroup
  {
    for (size_t k = 1; k < t; k++) spawn_range_task(r, k);
    weft__range_drain_from(r, 0);
  }
}

/* Outside any region: a region of t threads from the runtime's pool, the caller its master. */
static void fork_region(weft__range *r, size_t t) {
  /* A child forked after this region must know that libgomp's threads are gone (atfork_child). */
  pthread_once(&fork_once, fork_register);
  r->workers = t;
  size_t left = r->n - weft__load_relaxed(&r->next);
  if (r->static_ok || (r->grain && left / r->grain + (left % r->grain != 0) <= t)) {
    /*
     * Every thread of a region comes (the region's end waits for it), so a
     * short map, or one chunk of an explicit grain per thread, needs no
     * claims: each thread runs its part (cpu.h, weft__static_part).
     */
    weft__static_part part;
    weft__range_static_part(r, t, &part);
    /*
     * The part goes by value, field by field: scalars firstprivate are
     * copied into the region's data block, which a worker reads anyway, so
     * its first element waits for that block alone, not the block and then
     * the part (an aggregate would go by its address: range.h,
     * weft__static_part).
     */
    weft_index_fn p_fn = part.f.fn;
    void *p_ctx = part.ctx;
    size_t p_base = part.base, p_n = part.n, p_grain = part.grain;
    struct weft__scope *p_scope = part.scope;
    weft__range *p_r = part.r;
    uint32_t p_k = part.k, p_is_range = part.is_range;
#pragma omp parallel num_threads((int)t)                                                                     \
    firstprivate(p_fn, p_ctx, p_base, p_n, p_grain, p_scope, p_r, p_k, p_is_range)
    {
      weft__static_part mine = {.f.fn = p_fn,
                                .ctx = p_ctx,
                                .base = p_base,
                                .n = p_n,
                                .grain = p_grain,
                                .scope = p_scope,
                                .r = p_r,
                                .k = p_k,
                                .is_range = p_is_range};
      /*
       * The runtime may give the region fewer threads than asked
       * (OMP_THREAD_LIMIT, OMP_DYNAMIC): the parts no thread has are run,
       * in turn, by the ones it gave. Nothing is lost either way.
       */
      size_t nt = (size_t)omp_get_num_threads();
      for (size_t h = (size_t)omp_get_thread_num(); h < mine.k; h += nt) weft__range_run_static(&mine, h);
    }
    return;
  }
  weft__range_split(r, t);
  /* Each thread drains its own slice, then the others': a smaller team than asked leaves none behind. */
#pragma omp parallel num_threads((int)t)
  weft__range_drain_from(r, (size_t)omp_get_thread_num());
}

/*
 * On a thread with a work-stealing deque (a worker of the host team, that
 * is a CPU future or a map called from a fiber): t - 1 jobs, each of which
 * drains the range from its own slice, go on the deque for idle workers to
 * steal; the caller drains from slice 0, then takes back the jobs nobody
 * stole (their slices it has drained itself by stealing within the range)
 * and waits only for the ones a worker took, running other jobs meanwhile.
 * So the map never waits for a worker that has not started, and an OpenMP
 * task made here would find the other workers busy in their own loops, not
 * at a barrier where tasks run.
 */
typedef struct range_job {
  weft__job job;
  weft__range *r;
  size_t home;
  _Atomic uint32_t *left; /* the caller's count of jobs not yet finished */
} range_job;

static void range_job_run(weft__job *j) {
  range_job *rj = weft__container_of(j, range_job, job);
  _Atomic uint32_t *left = rj->left;
  weft__range_drain_from(rj->r, rj->home);
  /* The caller's frame (rj, left) may be gone once left reaches 0: the wake is on a copy of the address. */
  if (atomic_fetch_sub_explicit(left, 1, memory_order_acq_rel) == 1) weft__futex_wake(left, 1);
}

static bool left_zero(void *arg) {
  return atomic_load_explicit((_Atomic uint32_t *)arg, memory_order_acquire) == 0;
}

static void fork_steal(weft__deque *own, weft__range *r, size_t t) {
  if (t > WEFT__RANGE_SLICES) t = WEFT__RANGE_SLICES;
  r->workers = t;
  weft__range_split(r, t);
  range_job rj[WEFT__RANGE_SLICES];
  _Atomic uint32_t left;
  atomic_init(&left, (uint32_t)(t - 1));
  size_t pushed = 0;
  for (size_t k = 1; k < t; k++, pushed++) {
    rj[k] = (range_job){.job = {.run = range_job_run}, .r = r, .home = k, .left = &left};
    if (!(r->blocking ? weft__ws_push_last(own, &rj[k].job) : weft__deque_push(own, &rj[k].job))) break;
  }
  if (pushed < t - 1) atomic_fetch_sub(&left, (uint32_t)(t - 1 - pushed));
  if (pushed) weft__ws_notify();
  weft__range_drain_from(r, 0);
  size_t back = 0;
  for (size_t k = pushed; k >= 1; k--, back++) {
    if (!weft__ws_take_back(own, &rj[k].job, r->blocking)) break; /* stolen, and every older one with it */
    atomic_fetch_sub_explicit(&left, 1, memory_order_relaxed);
  }
  r->stolen = pushed - back;
  for (;;) {
    uint32_t v = atomic_load_explicit(&left, memory_order_acquire);
    if (v == 0 || weft__ws_help(left_zero, &left)) break;
    weft__futex_wait(&left, v, -1);
  }
}

/* Workers for today's split (an explicit grain, or a model-less call): all of them, up to the bounds. */
static size_t all_workers(weft__range *r, size_t t) {
  if (r->max_workers && r->max_workers < t) t = r->max_workers;
  if (t > r->n) t = r->n;
  return t ? t : 1;
}

/*
 * The deque a map of r forked here would use: the caller's own on a worker of
 * weft's team; on a plain thread outside any region, its own (made on first
 * use) while the team is open, that is while weft's workers are awake or
 * lingering (LINGER_NS after their last job). NULL: fork a region or tasks.
 */
static weft__deque *steal_deque(const weft__range *r) {
  if (tls_in_host) return weft__ws_mine();
  /*
   * Blocking elements without fibers (elements that may wait on one
   * another) want every thread that can come at once, which a region gives:
   * on weft's team they would share its workers with the blocking futures
   * already there. On a worker of the team a region is no choice (tasks
   * there would find the other workers in their loops), so they go on its
   * deque as any map does.
   */
  if (r->blocking) return NULL;
  if (!atomic_load_explicit(&host.open, memory_order_relaxed) || omp_get_level() > 0) return NULL;
  return weft__ws_own();
}

void weft__cpu_run_range(weft__range *r) {
  if (WEFT__UNLIKELY(omp_unusable)) {
    weft__pool_run_range(r);
    return;
  }
  bool in_team = omp_get_level() > 0;
  size_t t = all_workers(r, in_team ? (size_t)omp_get_num_threads() : weft__cpu_threads());
  /*
   * An explicit grain (or a model-less call) asks for the team: every
   * thread that can come runs chunks at once, which a region guarantees and
   * a deque does not (no worker may steal, and the caller then runs it all,
   * one chunk after another: elements that wait on one another, or on
   * something they start, would run one at a time). So only a worker of
   * weft's team, where a region is no choice, forks onto its deque here.
   */
  weft__deque *d;
  if (t <= 1) {
    r->workers = 1;
    weft__range_drain(r);
  } else if (tls_in_host && (d = steal_deque(r)) != NULL) {
    fork_steal(d, r, t);
  } else if (in_team) {
    fork_tasks(r, t);
  } else {
    fork_region(r, t);
  }
}

unsigned weft__cpu_team_kind(void) {
  if (WEFT__UNLIKELY(omp_unusable)) return WEFT__TEAM_POOL;
  if (tls_in_host || (omp_get_level() == 0 && atomic_load_explicit(&host.open, memory_order_relaxed)))
    return WEFT__TEAM_STEAL;
  return omp_get_level() > 0 ? WEFT__TEAM_TASKS : WEFT__TEAM_REGION;
}

void weft__cpu_team(weft__team *t) {
  if (WEFT__UNLIKELY(omp_unusable)) {
    weft__pool_team(t);
    return;
  }
  t->kind = weft__cpu_team_kind();
  if (t->kind == WEFT__TEAM_STEAL) {
    /* Weft's team, or the caller and as many of its workers as a region would have. */
    t->size = tls_in_host ? (unsigned)omp_get_num_threads() : weft__cpu_threads();
  } else if (omp_get_level() > 0) {
    /* The enclosing team: whoever is idle in it runs a task; the runtime does not say who is. */
    t->kind = WEFT__TEAM_TASKS;
    t->size = (unsigned)omp_get_num_threads();
  } else {
    t->kind = WEFT__TEAM_REGION;
    t->size = weft__cpu_threads();
  }
  t->idle = t->size;
}

void weft__cpu_fork(weft__range *r, size_t k) {
  if (WEFT__UNLIKELY(omp_unusable)) {
    weft__pool_fork(r, k);
    return;
  }
  weft__deque *d = steal_deque(r);
  if (d)
    fork_steal(d, r, k);
  else if (omp_get_level() > 0)
    fork_tasks(r, k);
  else
    fork_region(r, k);
}

/* --- the host team -------------------------------------------------------- */

static void host_cv_init(void) {
  weft__cond_init(&host.cv);
  weft__cond_init(&host.idle_cv);
  host.cv_ready = true;
}

static weft__job *host_pop(void) {
  if (host.exiting) return NULL; /* queued jobs are dropped: no one is left to wait for them */
  weft__job *j = weft__jobq_pop(&host.queue);
  if (j) atomic_fetch_sub_explicit(&host.queued, 1, memory_order_relaxed);
  return j;
}

/* A job from the shared queue, without the lock when it looks empty. */
static weft__job *inject_pop(void) {
  if (weft__load_relaxed(&host.queued) == 0) return NULL;
  pthread_mutex_lock(&host.mu);
  weft__job *j = host_pop();
  pthread_mutex_unlock(&host.mu);
  return j;
}

/*
 * The master of the host team closes it: only when nothing is queued, no
 * deque holds a job and no worker is busy, with `open` cleared first, so
 * that a plain thread pushing to its own deque meanwhile sees it cleared
 * and kicks the host (weft__cpu_spawn). False when work turned up.
 */
static bool try_close(void) {
  weft__store_sc(&host.open, false); /* before the looks below; pairs with weft__cpu_spawn's fence */
  if (!weft__ws_all_empty() || atomic_load(&host.queued) != 0 || atomic_load(&host.busy) != 0) {
    atomic_store(&host.open, true);
    return false;
  }
  atomic_store(&host.closing, true);
  weft__ws_notify_all();
  return true;
}

/*
 * The loop every thread of the host team runs: its own deque's newest job,
 * else another deque's oldest, else the shared queue's first; with nothing
 * to run it spins for SPIN_NS (a burst of work then costs no wake-up), then
 * sleeps until a push wakes it. The master (thread 0) also decides when the
 * team closes: LINGER_NS after it last found work, or as soon as it is idle
 * while weft shuts down or the process exits. A worker leaves only when the
 * team is closing and it found nothing, its own deque included.
 */
static void host_worker(bool master) {
  weft__deque *own = weft__ws_own();      /* NULL when every slot is taken: the shared queue still works */
  int64_t idle_since = 0, spin_since = 0; /* idle since (the linger), looking since (the spin) */
  bool idle = false, spinning = false;
  atomic_fetch_add(&host.busy, 1);
  for (;;) {
    /*
     * Its own newest job first (the depth-first order that keeps a
     * recursion's memory small), then the shared queue, then the oldest job
     * of another deque: the shared queue holds jobs older than any a thief
     * would find (queued before the team opened, or by fibers), and jobs
     * that wait on one another (blocking work on the CPU path, without
     * fibers) must start in the order they were made.
     */
    weft__job *j = own ? weft__ws_find_own(own) : NULL;
    if (!j) j = inject_pop();
    if (!j) j = weft__ws_steal(own);
    if (j) {
      if (spinning) weft__ws_spinning(spinning = false);
      if (idle) {
        atomic_fetch_add(&host.busy, 1);
        idle = false;
      }
      j->run(j);
      continue;
    }
    int64_t now = weft__mono_ns();
    if (!idle) {
      atomic_fetch_sub(&host.busy, 1);
      idle = true;
      idle_since = spin_since = now;
    }
    if (atomic_load_explicit(&host.closing, memory_order_acquire)) break;
    if (master && (now - idle_since >= LINGER_NS || weft__load_relaxed(&host.stop_asked)) && try_close())
      break;
    if (now - spin_since < SPIN_NS) {
      if (!spinning) weft__ws_spinning(spinning = true);
      /* Give the core to a runnable thread, if any (a map's caller, a busy worker), between looks. */
      for (int i = 0; i < 16; i++) weft__cpu_relax();
      sched_yield();
      continue;
    }
    if (spinning) weft__ws_spinning(spinning = false);
    weft__ws_sleep(master ? idle_since + LINGER_NS : weft__mono_ns() + LINGER_NS);
    spin_since = weft__mono_ns(); /* woken: look (and spin) again before the next sleep */
  }
  if (spinning) weft__ws_spinning(false);
  if (!idle) atomic_fetch_sub(&host.busy, 1);
}

/*
 * How many threads a region of the host may have, of `want`: all of them,
 * unless RLIMIT_AS leaves too little address space for the threads libgomp
 * would have to create (a default-sized stack and 16 MiB of slack each, above
 * a margin of 32 MiB). libgomp ends the process when it cannot create a
 * region's thread ("Thread creation failed"), so a short address space must
 * mean a smaller team, never a region that asks for more. Threads the
 * runtime already keeps for this host from an earlier region cost nothing
 * new; counting them as new only makes the team smaller than it could be.
 */
static int host_team_size(int want) {
  size_t room = weft__as_room(NULL);
  if (room == SIZE_MAX || want <= 1) return want;
  size_t stack = (size_t)8 << 20;
  pthread_attr_t a;
  if (pthread_getattr_default_np(&a) == 0) {
    (void)pthread_attr_getstacksize(&a, &stack);
    pthread_attr_destroy(&a);
  }
  size_t per = stack + ((size_t)16 << 20), margin = (size_t)32 << 20;
  size_t fit = room > margin ? (room - margin) / per : 0;
  return fit + 1 < (size_t)want ? (int)fit + 1 : want;
}

static void *host_main(void *arg) {
  WEFT__UNUSED(arg);
  /*
   * The team: the runtime's default number of threads, each a worker. A
   * caller that joins (a map's caller, a future's getter) takes part too, so
   * up to one more thread than that runs CPU work at once; a team one
   * smaller, as TBB's arena is, would leave a CPU future that blocks (on a
   * blocking map whose elements wait for CPU maps, say) as the only worker,
   * with no one to run what it waits for. Idle workers yield while they
   * spin (host_worker), so the extra thread costs the others little.
   */
  int workers = omp_get_max_threads();
  pthread_mutex_lock(&host.mu);
  for (;;) {
    while (((!host.queue.head && !host.kick) || host.exiting) && !host.stopping) {
      host.idle = true;
      pthread_cond_broadcast(&host.idle_cv);
      host.waiting = true;
      pthread_cond_wait(&host.cv, &host.mu);
      host.waiting = false;
      host.idle = false;
    }
    if (((!host.queue.head && !host.kick) || host.exiting) && host.stopping && weft__ws_all_empty()) break;
    host.kick = false;
    atomic_store(&host.closing, false);
    atomic_store(&host.open, true);
    pthread_mutex_unlock(&host.mu);
    int team = host_team_size(workers);
#pragma omp parallel num_threads(team)
    {
      tls_in_host = true;
      host_worker(omp_get_thread_num() == 0);
      tls_in_host = false;
    }
    pthread_mutex_lock(&host.mu);
  }
  pthread_mutex_unlock(&host.mu);
  return NULL;
}

static int host_submit(weft__job *j);

/*
 * A process may end (return from main, exit) without weft_shutdown while the
 * host team lingers open (LINGER_NS) or runs. LLVM's libomp then fails in
 * its teardown, which finds a team of another root thread still open
 * ("Thread identifier invalid", a SIGSEGV or an assertion: always under
 * TSan, about once in 20-60 exits otherwise; a plain OpenMP program with a
 * region open on a second thread at exit fails the same way). So weft's
 * destructor, which runs before libomp's teardown (sys.h), stops new jobs
 * (queued ones are dropped, as every thread's work is at exit), lets the
 * dispatcher close the team as soon as the running tasks end, and waits for
 * that until the deadline. On a thread of the host team (a CPU future that
 * calls exit) it cannot wait for its own team: it only stops new jobs.
 */
static void exit_begin(void) {
  pthread_mutex_lock(&host.mu);
  host.exiting = true;
  atomic_store(&host.stop_asked, true);
  weft__ws_notify_all();
  pthread_cond_broadcast(&host.cv);
  pthread_mutex_unlock(&host.mu);
}

static void exit_wait(int64_t deadline) {
  if (tls_in_host) return;
  pthread_mutex_lock(&host.mu);
  while (host.thread_started && !host.idle)
    if (weft__cond_wait_until(&host.idle_cv, &host.mu, deadline) == ETIMEDOUT) break;
  pthread_mutex_unlock(&host.mu);
}

static pthread_once_t exit_once = PTHREAD_ONCE_INIT;
static void exit_register(void) { weft__on_exit(exit_begin, exit_wait); }

/* The job being handed to the runtime by this thread, to spot a task run at once. */
static __thread weft__job *tls_submitting;

static void region_task(weft__job *j) {
  if (tls_submitting == j) {
    /*
     * The runtime ran the task at once, inside weft__cpu_submit (task
     * throttling, or a final task): the job must not run on the caller, so
     * it goes to the host team instead; if even that fails, here after all.
     */
    if (host_submit(j) != 0) j->run(j);
    return;
  }
  j->run(j);
}

WEFT__TSAN_UNSEEN static void spawn_region_task(weft__job *j) {
#pragma omp task firstprivate(j)
  region_task(j);
}

/* Push j on the calling thread's deque and wake a sleeping worker; false when it has none or it is full. */
static bool push_own(weft__deque *d, weft__job *j) {
  if (!d || !weft__deque_push(d, j)) return false;
  weft__ws_notify();
  return true;
}

int weft__cpu_submit(weft__job *j) {
  if (WEFT__UNLIKELY(omp_unusable)) return weft__pool_submit(j);
  if (tls_in_host && push_own(weft__ws_mine(), j)) return 0;
  if (omp_get_level() > 0 && !tls_in_host) {
    /* Inside a region or task: a task of the enclosing team, no new threads. */
    weft__job *saved = tls_submitting;
    tls_submitting = j;
    spawn_region_task(j);
    tls_submitting = saved;
    return 0;
  }
  return host_submit(j);
}

int weft__cpu_spawn(weft__job *j) {
  if (WEFT__UNLIKELY(omp_unusable)) return weft__pool_submit(j);
  if (tls_in_host || omp_get_level() > 0 || !atomic_load_explicit(&host.open, memory_order_relaxed))
    return weft__cpu_submit(j);
  if (!push_own(weft__ws_own(), j)) return host_submit(j);
  /*
   * The team may have begun to close before the push (try_close clears
   * `open`, then looks at every deque): if it cleared it, it may not have
   * seen this job, so the host must open the team again. The fence orders
   * the push before the load, as try_close's seq_cst store orders its own.
   */
  atomic_thread_fence(memory_order_seq_cst);
  if (!atomic_load_explicit(&host.open, memory_order_relaxed)) weft__cpu_kick();
  return 0;
}

bool weft__cpu_take(weft__job *j) {
  weft__deque *d = weft__ws_mine();
  return d && weft__ws_take_back(d, j, false);
}

bool weft__cpu_help(bool (*done)(void *arg), void *arg) {
  if (WEFT__UNLIKELY(omp_unusable)) return done(arg);
  return weft__ws_help(done, arg);
}

/* Start the host thread if it is not running; called with host.mu held. */
static int host_start_locked(void) {
  if (!host.cv_ready) host_cv_init();
  if (host.thread_started) return 0;
  pthread_once(&fork_once, fork_register);
  int rc = weft__thread_start(&host.thread, 0, "weft-omp", host_main, NULL);
  if (rc < 0) return rc;
  host.thread_started = true;
  pthread_once(&exit_once, exit_register);
  return 0;
}

void weft__cpu_kick(void) {
  pthread_mutex_lock(&host.mu);
  if (!host.stopping && host_start_locked() == 0) {
    host.kick = true;
    if (host.waiting) pthread_cond_signal(&host.cv);
  }
  pthread_mutex_unlock(&host.mu);
}

static int host_submit(weft__job *j) {
  pthread_mutex_lock(&host.mu);
  if (host.stopping) {
    pthread_mutex_unlock(&host.mu);
    return -ESHUTDOWN;
  }
  int rc = host_start_locked();
  if (rc < 0) {
    pthread_mutex_unlock(&host.mu);
    return rc;
  }
  weft__jobq_push(&host.queue, j);
  atomic_fetch_add_explicit(&host.queued, 1, memory_order_relaxed);
  if (host.waiting) pthread_cond_signal(&host.cv);
  pthread_mutex_unlock(&host.mu);
  weft__ws_notify();
  return 0;
}

int weft__cpu_kept_threads(void) {
  pthread_mutex_lock(&host.mu);
  int n = host.thread_started && runtime_is_libomp() ? 1 : 0;
  pthread_mutex_unlock(&host.mu);
  return n;
}

bool weft__cpu_host_member(void) { return tls_in_host || weft__pool_is_worker(); }

void weft__cpu_shutdown(void) {
  pthread_mutex_lock(&host.mu);
  if (!host.thread_started) {
    pthread_mutex_unlock(&host.mu);
    weft__pool_shutdown();
    return;
  }
  if (runtime_is_libomp()) {
    /*
     * LLVM's libomp corrupts its task allocator when a thread that created
     * tasks as the master of a team exits and other threads go on using
     * OpenMP (kmp_alloc.cpp assertions, bus errors; reproduced with libomp
     * 14 and reported against later versions too). So under libomp the host
     * thread outlives weft_shutdown: its team closes, every job has run, and
     * the thread sleeps on a condition variable until weft needs it again.
     */
    host.flush = true;
    atomic_store(&host.stop_asked, true);
    pthread_cond_broadcast(&host.cv);
    weft__ws_notify_all();
    while (!(host.idle && ((!host.queue.head && !host.kick) || host.exiting)))
      pthread_cond_wait(&host.idle_cv, &host.mu);
    host.flush = false;
    atomic_store(&host.stop_asked, host.exiting);
    pthread_mutex_unlock(&host.mu);
    weft__pool_shutdown();
    return;
  }
  host.stopping = true;
  atomic_store(&host.stop_asked, true);
  pthread_cond_broadcast(&host.cv);
  weft__ws_notify_all();
  pthread_mutex_unlock(&host.mu);
  pthread_join(host.thread, NULL);
  pthread_mutex_lock(&host.mu);
  host.thread_started = false;
  host.stopping = false;
  atomic_store(&host.stop_asked, host.exiting);
  pthread_mutex_unlock(&host.mu);
  weft__pool_shutdown();
}

static void atfork_child(void) {
  /* The host thread and its team are gone; the queue's jobs with them. */
  pthread_mutex_init(&host.mu, NULL);
  host_cv_init();
  host.queue.head = host.queue.tail = NULL;
  host.queue.len = 0;
  host.thread_started = false;
  host.stopping = false;
  host.flush = false;
  host.idle = false;
  host.exiting = false;
  host.waiting = false;
  host.kick = false;
  atomic_store(&host.queued, 0);
  atomic_store(&host.open, false);
  atomic_store(&host.closing, false);
  atomic_store(&host.busy, 0);
  atomic_store(&host.stop_asked, false);
  tls_in_host = false;
  weft__ws_atfork_child();
  if (!runtime_is_libomp()) omp_unusable = true;
}
