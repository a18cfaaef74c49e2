/*
 * This file contains weft_mpi's waits for MPI requests: weft_mpi_wait,
 * weft_mpi_waitall, and the progress engine that lets a fiber park on a
 * request instead of blocking its carrier.
 *
 * ==== The problem ============================================================
 *
 * MPI_Wait blocks the calling OS thread, and most MPI libraries spin in it.
 * On a fiber that thread is a carrier: a thousand fibers each in MPI_Wait
 * hold every carrier, the pinning monitor adds carriers to run the rest, and
 * each of those spins too. MPI has no descriptor to hand to epoll either
 * (MPI_T events and generalized requests are no help for requests MPI makes
 * itself). What every MPI library does offer is MPI_Testsome: one
 * non-blocking call that advances communication and reports which of an
 * array of requests completed.
 *
 * ==== The design =============================================================
 *
 * One table per process holds every request some fiber waits for: an
 * array of MPI_Request (what MPI_Testsome takes), and beside each its owner,
 * a waiter on that fiber's stack and the request's position in the caller's
 * array. One fiber, the engine, polls the table:
 *
 *   waiting fiber                           engine (a WEFT_BLOCKING future)
 *   -------------                           -------------------------------
 *   MPI_Test each request (fast path)
 *   lock; append the incomplete ones;
 *     start the engine if there is none,
 *     or signal it if it idles; unlock
 *   weft_sem_wait(done, deadline) --park-> lock; MPI_Testsome(table)
 *                                          for each completed request:
 *                                            write it back to the caller's
 *                                            array, copy its status, remove
 *                                            it from the table; the owner's
 *                                            last one: weft_sem_post(done)
 *   <----------------------------- wake -- unlock; sleep (back-off); repeat
 *
 * The lock (a weft_mutex_t, so fibers park on it) is held across
 * MPI_Testsome. That is what makes a timeout safe: a waiter that gives up
 * takes the lock and removes its requests, and no poll can be completing
 * one of them at that moment; without it, a request freed by a poll in
 * flight would be handed back to the caller as "still active". Polls are
 * short (a test per request), so the lock is never held for long.
 *
 * Back-off: after a poll that completed something the engine yields (the
 * woken fibers run, and often post new requests) and polls again; after a
 * poll that found nothing it sleeps 1 µs, then 2, 4, ... up to 1 ms. So a
 * request that completes t after its wait began is seen by about 2t at
 * worst (and within 1 ms for long waits), and a process whose fibers all
 * wait for late messages polls a thousand times a second, using a few
 * percent of one core, never 100%. A fiber that registers while the engine
 * sleeps does not wake it (a burst of a thousand registrations would then
 * cost a thousand polls of a growing table); it resets the back-off
 * instead, and its own first test was done before it registered.
 *
 * Life cycle: the engine starts with the first wait that has to park, and
 * ends after LINGER_NS with an empty table, so that an idle process has no
 * engine (weft_shutdown() waits for fibers in flight, and would otherwise
 * wait for ever). Its future is freed by the next engine (or stays, one
 * record, until then); freeing it at once would cancel it before it runs.
 *
 * Memory ordering: the engine writes a waiter's requests and statuses, and
 * posts its semaphore, under the lock; the woken fiber reads them after
 * weft_sem_wait returns, which weft orders after the post. A waiter that
 * timed out reads them under the lock.
 *
 * ==== Where the engine cannot help ===========================================
 *
 *  - A plain thread or OpenMP task waits as MPI does (MPI_Wait), or, with a
 *    deadline, tests between sleeps (poll_loop below).
 *  - A fiber inside an OpenMP region of its own cannot park (weft's calls
 *    block its carrier there), and if the engine lived on that carrier it
 *    would never poll again: such a fiber polls by itself, as a thread does.
 *  - When the engine cannot start (weft_shutdown() in progress, no memory
 *    for a fiber) or the table cannot grow, the fiber polls by itself,
 *    sleeping between tests: slower, never wrong.
 *  - A cancelled fiber cannot park without weft.h's cancellation points
 *    returning -ECANCELED at once; weft_mpi_pmap's collectives, which must
 *    finish, then block the carrier in MPI_Wait (weft.h lacks an
 *    uncancellable park).
 *
 * ==== Alternatives rejected ==================================================
 *
 *  - Each waiting fiber polling its own request on a timer: a thousand
 *    waiters make a thousand wake-ups per poll interval, against one.
 *  - A dedicated OS thread polling (or in MPI_Waitany): a thread that
 *    spins, or that blocks in MPI where it cannot be woken for a new
 *    request; and one thread more than the fibers need.
 *  - Hooking the scheduler's idle loop (testing when a carrier polls its
 *    epoll): it would need an internal interface of the fiber runtime, and
 *    weft_mpi uses only weft.h. A hook for it is the smallest addition that
 *    would let the polls stop when the carriers are busy and be exact when
 *    they idle.
 *  - MPI_Grequest or MPI_T events: neither reports the completion of
 *    ordinary requests to a waiting party in any library we target.
 */
#include "mpi_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef WEFT_MPI_HAVE_OPENMP
#include <omp.h>
#endif

#define BACKOFF_MIN_NS 1000     /* the first sleep after a poll that found nothing */
#define BACKOFF_MAX_NS 1000000  /* the longest: at most 1,000 polls a second while requests wait */
#define LINGER_NS      20000000 /* an engine with an empty table ends after this */
#define INLINE_REQS    64       /* requests whose "still pending" flags live on the caller's stack */

/* One fiber's wait: on that fiber's stack, in the table while remaining > 0. */
typedef struct waiter {
  MPI_Request *reqs;    /* the caller's array: the engine writes completed entries back */
  MPI_Status *statuses; /* the caller's, or NULL for MPI_STATUS(ES)_IGNORE */
  int remaining;        /* its requests still in the table; under g.lock */
  int err;              /* -EIO once MPI reported an error for one of them; under g.lock */
  weft_sem_t done;      /* posted once, under g.lock, when remaining reaches 0 */
} waiter;

/* Who a table entry belongs to. */
typedef struct slot {
  waiter *w;
  int k; /* the request's index in w->reqs */
} slot;

/* A completion that MPI_Testsome reported: table index, and where its status is. */
typedef struct completion {
  int idx, j;
} completion;

static struct {
  weft_mutex_t lock; /* guards everything below, and every waiter in the table */
  weft_cond_t work;  /* the engine waits here while the table is empty */
  MPI_Request *reqs; /* the table, nslots entries in no order */
  slot *owner;       /* owner[i] of reqs[i] */
  int *idx;          /* MPI_Testsome's indices, cap entries */
  MPI_Status *st;    /* MPI_Testsome's statuses, cap entries */
  completion *done;  /* the completions of one poll, sorted */
  int nslots, cap;
  bool running;        /* an engine exists: set by the starter, cleared by the engine as it ends */
  bool idle;           /* the engine waits on `work` */
  int64_t backoff;     /* the engine's next sleep; 0: yield and poll again */
  weft_future *engine; /* the running engine's future until the engine frees (detaches) it */
  int table_max;       /* the most entries the table had */
} g = {.lock = WEFT_MUTEX_INITIALIZER, .work = WEFT_COND_INITIALIZER};

/* Counters for weft_mpi__get_stats, apart from the lock so that the fast path takes none. */
static struct { atomic_uint_fast64_t engines, polls, parked, fast, self_poll; } counters;

/* MPI's thread level, looked up once: 0 not yet, 1 MPI_THREAD_MULTIPLE, -1 less. */
static atomic_int level_state;
static atomic_flag level_warned = ATOMIC_FLAG_INIT;

static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

/* In a child forked while a thread held the lock, or with an engine that did not survive: start afresh. */
static void at_fork_child(void) {
  memset(&g, 0, sizeof g);
  weft_mutex_init(&g.lock);
  weft_cond_init(&g.work);
}

static void register_fork_hook(void) { pthread_atfork(NULL, NULL, at_fork_child); }

void weft_mpi__get_stats(weft_mpi__stats *out) {
  if (!out) return;
  out->engines = atomic_load(&counters.engines);
  out->polls = atomic_load(&counters.polls);
  out->parked = atomic_load(&counters.parked);
  out->fast = atomic_load(&counters.fast);
  out->self_poll = atomic_load(&counters.self_poll);
  weft_mutex_lock(&g.lock);
  out->table_max = g.table_max;
  out->table_now = g.nslots;
  out->running = g.running;
  weft_mutex_unlock(&g.lock);
}

static bool mpi_usable(void) {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin;
}

/* True when fibers may park on MPI requests: MPI_THREAD_MULTIPLE. */
static bool level_multiple(void) {
  int s = atomic_load_explicit(&level_state, memory_order_relaxed);
  if (s == 0) {
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    s = provided >= MPI_THREAD_MULTIPLE ? 1 : -1;
    atomic_store_explicit(&level_state, s, memory_order_relaxed);
  }
  return s > 0;
}

static void warn_level(void) {
  if (atomic_flag_test_and_set(&level_warned)) return;
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  const char *name = provided == MPI_THREAD_SINGLE       ? "MPI_THREAD_SINGLE"
                     : provided == MPI_THREAD_FUNNELED   ? "MPI_THREAD_FUNNELED"
                     : provided == MPI_THREAD_SERIALIZED ? "MPI_THREAD_SERIALIZED"
                                                         : "an unknown level";
  fprintf(stderr,
          "weft_mpi: weft_mpi_wait on a fiber needs MPI_THREAD_MULTIPLE, and MPI_Init_thread gave %s: "
          "call MPI_Init_thread(..., MPI_THREAD_MULTIPLE, &provided) (see weft_mpi.h)\n",
          name);
}

static bool in_omp_region(void) {
#ifdef WEFT_MPI_HAVE_OPENMP
  return omp_get_level() > 0;
#else
  return false;
#endif
}

static MPI_Status *status_at(MPI_Status *statuses, int k) {
  return statuses ? &statuses[k] : MPI_STATUS_IGNORE;
}

/* The sleep of a poll loop: parks a fiber, sleeps a thread; never cut short by cancellation. */
static void pause_ns(int64_t ns) {
  if (weft_sleep_ns(ns) == -ECANCELED) {
    struct timespec ts = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
    nanosleep(&ts, NULL);
  }
}

/*
 * Test the requests still marked pending until all are done or the
 * deadline passes: for threads with a deadline, fibers in an OpenMP region,
 * and fibers that the engine cannot serve.
 */
static int poll_loop(int count, MPI_Request *reqs, MPI_Status *statuses, unsigned char *pending,
                     int64_t deadline, unsigned flags) {
  int64_t backoff = BACKOFF_MIN_NS;
  int err = 0;
  for (;;) {
    bool all = true;
    for (int k = 0; k < count; k++) {
      if (!pending[k]) continue;
      int flag = 0;
      if (MPI_Test(&reqs[k], &flag, status_at(statuses, k)) != MPI_SUCCESS) err = -EIO;
      if (flag)
        pending[k] = 0;
      else
        all = false;
    }
    if (all) return err;
    if ((flags & WEFT_MPI__CANCELLABLE) && weft_cancelled()) return -ECANCELED;
    int64_t now = weft_now_ns();
    if (deadline >= 0 && now >= deadline) return -ETIMEDOUT;
    int64_t ns = backoff;
    if (deadline >= 0 && deadline - now < ns) ns = deadline - now;
    pause_ns(ns);
    if (backoff < BACKOFF_MAX_NS) backoff *= 2;
  }
}

/* --- the engine ------------------------------------------------------------------ */

static int cmp_completion_desc(const void *a, const void *b) {
  int x = ((const completion *)a)->idx, y = ((const completion *)b)->idx;
  return (x < y) - (x > y);
}

/* Remove table entry i (swap with the last). Under g.lock. */
static void table_remove(int i) {
  g.nslots--;
  g.reqs[i] = g.reqs[g.nslots];
  g.owner[i] = g.owner[g.nslots];
}

/* Every waiter in the table fails with err (MPI reported an error without saying for which request). */
static void fail_all(int err) {
  while (g.nslots > 0) {
    waiter *w = g.owner[g.nslots - 1].w;
    w->err = err;
    g.nslots--;
    if (--w->remaining == 0) weft_sem_post(&w->done);
  }
}

/* One MPI_Testsome over the table, and its completions. Under g.lock. */
static void poll_once(void) {
  int out = 0;
  int rc = MPI_Testsome(g.nslots, g.reqs, &out, g.idx, g.st);
  atomic_fetch_add_explicit(&counters.polls, 1, memory_order_relaxed);
  if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) {
    fail_all(-EIO);
    g.backoff = 0;
    return;
  }
  if (out == MPI_UNDEFINED || out <= 0) {
    g.backoff = g.backoff ? g.backoff * 2 : BACKOFF_MIN_NS;
    if (g.backoff > BACKOFF_MAX_NS) g.backoff = BACKOFF_MAX_NS;
    return;
  }
  /* Highest index first, so that each swap-removal moves an entry not yet handled. */
  for (int j = 0; j < out; j++) g.done[j] = (completion){g.idx[j], j};
  if (out > 1) qsort(g.done, (size_t)out, sizeof *g.done, cmp_completion_desc);
  for (int c = 0; c < out; c++) {
    int i = g.done[c].idx;
    const MPI_Status *st = &g.st[g.done[c].j];
    waiter *w = g.owner[i].w;
    int k = g.owner[i].k;
    w->reqs[k] = g.reqs[i]; /* MPI_REQUEST_NULL, or the persistent request, now inactive */
    if (w->statuses) w->statuses[k] = *st;
    if (rc == MPI_ERR_IN_STATUS && st->MPI_ERROR != MPI_SUCCESS) w->err = -EIO;
    table_remove(i);
    if (--w->remaining == 0) weft_sem_post(&w->done);
  }
  g.backoff = 0;
}

static void *engine_main(void *arg) {
  (void)arg;
  weft_mutex_lock(&g.lock);
  if (g.engine) {
    weft_future_free(g.engine); /* this engine's own future: running, so only detached */
    g.engine = NULL;
  }
  for (;;) {
    if (g.nslots == 0) {
      g.idle = true;
      int64_t until = weft_now_ns() + LINGER_NS;
      int rc = 0;
      while (g.nslots == 0 && rc != -ETIMEDOUT) rc = weft_cond_wait(&g.work, &g.lock, until);
      g.idle = false;
      if (g.nslots == 0) break;
      g.backoff = 0;
    }
    poll_once();
    int64_t b = g.backoff;
    weft_mutex_unlock(&g.lock);
    if (b == 0)
      weft_yield();
    else
      weft_sleep_ns(b);
    weft_mutex_lock(&g.lock);
  }
  g.running = false;
  weft_mutex_unlock(&g.lock);
  return NULL;
}

/* Make room for `more` table entries. Under g.lock. */
static int table_reserve(int more) {
  if (more > INT32_MAX - g.nslots) return -ENOMEM;
  int need = g.nslots + more;
  if (need <= g.cap) return 0;
  int cap = g.cap ? g.cap : 64;
  while (cap < need) cap = cap > INT32_MAX / 2 ? need : cap * 2;
  /* Each array is replaced only once all are allocated: a failure leaves the table as it was. */
  MPI_Request *reqs = malloc((size_t)cap * sizeof *reqs);
  slot *owner = malloc((size_t)cap * sizeof *owner);
  int *idx = malloc((size_t)cap * sizeof *idx);
  MPI_Status *st = malloc((size_t)cap * sizeof *st);
  completion *done = malloc((size_t)cap * sizeof *done);
  if (!reqs || !owner || !idx || !st || !done) {
    free(reqs);
    free(owner);
    free(idx);
    free(st);
    free(done);
    return -ENOMEM;
  }
  if (g.nslots) {
    memcpy(reqs, g.reqs, (size_t)g.nslots * sizeof *reqs);
    memcpy(owner, g.owner, (size_t)g.nslots * sizeof *owner);
  }
  free(g.reqs);
  free(g.owner);
  free(g.idx);
  free(g.st);
  free(g.done);
  g.reqs = reqs;
  g.owner = owner;
  g.idx = idx;
  g.st = st;
  g.done = done;
  g.cap = cap;
  return 0;
}

/* Put w's pending requests in the table (starting the engine if needed). 0, or an error: then poll alone. */
static int engine_join(waiter *w, int count, const unsigned char *pending, int npending) {
  pthread_once(&fork_once, register_fork_hook);
  weft_mutex_lock(&g.lock);
  int rc = table_reserve(npending);
  if (rc == 0 && !g.running) {
    weft_future *f = NULL;
    rc = weft_future_start(WEFT_BLOCKING, engine_main, NULL, &f);
    if (rc == 0) {
      if (g.engine) weft_future_free(g.engine); /* the previous engine's, long finished */
      g.engine = f;
      g.running = true;
      atomic_fetch_add_explicit(&counters.engines, 1, memory_order_relaxed);
    }
  }
  if (rc != 0) {
    weft_mutex_unlock(&g.lock);
    return rc;
  }
  for (int k = 0; k < count; k++) {
    if (!pending[k]) continue;
    g.reqs[g.nslots] = w->reqs[k];
    g.owner[g.nslots] = (slot){w, k};
    g.nslots++;
  }
  w->remaining = npending;
  if (g.nslots > g.table_max) g.table_max = g.nslots;
  atomic_fetch_add_explicit(&counters.parked, 1, memory_order_relaxed);
  g.backoff = 0;
  if (g.idle) weft_cond_signal(&g.work);
  weft_mutex_unlock(&g.lock);
  return 0;
}

/* Take w's requests out of the table after a timeout or cancellation. Returns true if any were there. */
static bool engine_leave(waiter *w) {
  weft_mutex_lock(&g.lock);
  bool was_there = w->remaining > 0;
  if (was_there) {
    for (int i = g.nslots - 1; i >= 0; i--)
      if (g.owner[i].w == w) table_remove(i);
    w->remaining = 0;
  }
  weft_mutex_unlock(&g.lock);
  return was_there;
}

/* A fiber's wait through the engine; the fast path has run and `pending` marks what is left. */
static int park(int count, MPI_Request *reqs, MPI_Status *statuses, unsigned char *pending, int npending,
                int64_t deadline, unsigned flags) {
  waiter w = {.reqs = reqs, .statuses = statuses};
  weft_sem_init(&w.done, 0);
  if (engine_join(&w, count, pending, npending) != 0) {
    weft_sem_destroy(&w.done);
    atomic_fetch_add_explicit(&counters.self_poll, 1, memory_order_relaxed);
    return poll_loop(count, reqs, statuses, pending, deadline, flags);
  }
  int rc = weft_sem_wait(&w.done, deadline);
  if (rc != 0 && engine_leave(&w)) {
    weft_sem_destroy(&w.done);
    if (rc == -ECANCELED && !(flags & WEFT_MPI__CANCELLABLE)) {
      /* Must finish (a collective of weft_mpi_pmap): the rest in MPI, blocking the carrier. */
      for (int k = 0; k < count; k++)
        if (pending[k] && reqs[k] != MPI_REQUEST_NULL &&
            MPI_Wait(&reqs[k], status_at(statuses, k)) != MPI_SUCCESS)
          return -EIO;
      return 0;
    }
    return rc;
  }
  /* Completed, possibly just as the wait gave up: the engine posted under the lock, and is done with w. */
  weft_sem_destroy(&w.done);
  return w.err;
}

/* --- the door ---------------------------------------------------------------------- */

int weft_mpi__wait(int count, MPI_Request *reqs, MPI_Status *statuses, int64_t deadline, unsigned flags) {
  if (count == 0) return 0;
  bool fiber = weft_in_fiber();
  if (fiber && (flags & WEFT_MPI__CANCELLABLE) && weft_cancelled()) return -ECANCELED;
  bool can_park = fiber && level_multiple();
  if (fiber && !can_park && (flags & WEFT_MPI__STRICT)) {
    warn_level();
    return -ENOTSUP;
  }
  if (!can_park && deadline == -1) {
    /* A thread, or a fiber that must not park: as MPI does. */
    int rc = count == 1 ? MPI_Wait(&reqs[0], status_at(statuses, 0))
                        : MPI_Waitall(count, reqs, statuses ? statuses : MPI_STATUSES_IGNORE);
    return rc == MPI_SUCCESS ? 0 : -EIO;
  }

  unsigned char inline_pending[INLINE_REQS];
  unsigned char *pending = inline_pending;
  if (count > INLINE_REQS && !(pending = malloc((size_t)count))) return -ENOMEM;

  /* The fast path: the requests that are already complete (or null, or inactive) need no wait. */
  int npending = 0, err = 0;
  for (int k = 0; k < count; k++) {
    int flag = 0;
    if (MPI_Test(&reqs[k], &flag, status_at(statuses, k)) != MPI_SUCCESS) err = -EIO;
    pending[k] = !flag;
    npending += !flag;
  }
  int rc;
  if (npending == 0) {
    rc = err;
    if (fiber) atomic_fetch_add_explicit(&counters.fast, 1, memory_order_relaxed);
  } else if (deadline == 0 || (deadline > 0 && weft_now_ns() >= deadline)) {
    rc = -ETIMEDOUT;
  } else if (!can_park || in_omp_region()) {
    if (fiber) atomic_fetch_add_explicit(&counters.self_poll, 1, memory_order_relaxed);
    rc = poll_loop(count, reqs, statuses, pending, deadline, flags);
  } else {
    rc = park(count, reqs, statuses, pending, npending, deadline, flags);
  }
  if (rc == 0) rc = err;
  if (pending != inline_pending) free(pending);
  return rc;
}

static bool deadline_ok(int64_t d) { return d >= -1; }

int weft_mpi_wait(MPI_Request *req, MPI_Status *status, int64_t deadline_ns) {
  if (!req || !deadline_ok(deadline_ns) || !mpi_usable()) return -EINVAL;
  return weft_mpi__wait(1, req, status == MPI_STATUS_IGNORE ? NULL : status, deadline_ns,
                        WEFT_MPI__CANCELLABLE | WEFT_MPI__STRICT);
}

int weft_mpi_waitall(int count, MPI_Request *reqs, MPI_Status *statuses, int64_t deadline_ns) {
  if (count < 0 || (count > 0 && !reqs) || !deadline_ok(deadline_ns)) return -EINVAL;
  if (count == 0) return 0;
  if (!mpi_usable()) return -EINVAL;
  return weft_mpi__wait(count, reqs, statuses == MPI_STATUSES_IGNORE ? NULL : statuses, deadline_ns,
                        WEFT_MPI__CANCELLABLE | WEFT_MPI__STRICT);
}
