/*
 * This file contains weft_pmap: it checks the call, then sends it down one
 * of four paths.
 *
 *   CPU kind, automatic grain, not on a   the cost model (cpu/model.h) picks
 *   fiber                                 the workers: the caller alone, or a
 *                                         fork of some or all of the team;
 *   CPU kind with an explicit grain, or   the CPU backend (cpu/), on the
 *   BLOCKING without fibers               calling thread's OpenMP team, every
 *                                         worker taking part;
 *   the same, called on a fiber           handed to weft's OpenMP team as a
 *                                         job while the fiber parks (a
 *                                         fiber must not run OpenMP on its
 *                                         carrier thread);
 *   BLOCKING kind with fibers             one fiber per element in flight,
 *                                         each claiming indices from the
 *                                         shared range.
 *
 * A range map (weft_pmap_range, and weft_reduce's subtrees: range.c) takes
 * the CPU paths with a range function in place of the element function:
 * every chunk is one call fn(ctx, lo, hi), and the model keys its site by
 * that function. Its first elements are not watched one by one (model.h,
 * "a site whose elements change"): an index timed alone is a call of its
 * own, whose fixed cost (tens of nanoseconds, with the clock) would pass
 * for a dear element where an index costs a nanosecond; the sampled calls
 * still follow a change. (range.c makes a BLOCKING range map an element map
 * over its sub-ranges before it comes here.)
 *
 * The fiber path is in pmap_fibers.c. All share the range (cpu/range.c), or
 * run the indices in order on the caller, and keep the error of the lowest
 * failing index, so the result does not depend on the path or timing.
 *
 * The model's measurements live here, per calling thread (no cache line is
 * shared between callers): a small two-way set-associative table of call
 * sites keyed by the element function, each with its element cost, its regret and how
 * often it is timed, and the fork-join costs of each kind of team by gap
 * (model.h says what they mean). A known site whose last timed decision ran
 * on the caller runs the next calls of at most that size on the caller
 * without reading the clock, for WEFT__MODEL_SAMPLE_EVERY - 1 calls (255 when
 * the map is under a quarter of what could ever pay for a team): the hot
 * path of a small map is a look-up, three compares and the loop. A site
 * whose last timed decision forked because the team pays forks the next
 * calls of at least that size the same way, untimed (cache_bounds).
 */
#include "../base/internal.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "../cpu/cpu.h"
#include "../cpu/model.h"
#include "../fiber/fiber.h"
#include "../base/settings.h"
#include "../base/sys.h"
#include "../sync/wait.h"
#include "lifecycle.h"
#include "pmap.h"

/* --- the CPU path ---------------------------------------------------------- */

/* A parallel map handed from a fiber to the CPU backend. */
typedef struct range_job {
  weft__job job;
  weft__range *r;
  weft__waiter w; /* the parked fiber */
} range_job;

static void range_job_run(weft__job *j) {
  range_job *rj = weft__container_of(j, range_job, job);
  weft__cpu_run_range(rj->r);
  /* Last touch of rj: the fiber may return and pop its frame at once. */
  weft__waiter_wake(&rj->w);
}

int weft__pmap_cpu(weft__range *r) {
  if (weft__parkable_self()) {
    range_job rj = {.r = r};
    rj.job.run = range_job_run;
    /* Not cancellable: the elements use this frame until the last one ends. */
    weft__waiter_init(&rj.w, false);
    weft__waiter_on(&rj.w, WEFT__WAIT_CPU, r);
    if (weft__cpu_submit(&rj.job) == 0) {
      weft__waiter_wait(&rj.w, -1);
    } else {
      /* No CPU workers at all: run here, blocking the carrier; the drain keeps a thread-local of it. */
      weft__fiber *self = weft__fiber_self();
      weft__fiber_stay(self, true);
      weft__range_drain(r);
      weft__fiber_stay(self, false);
    }
  } else {
    weft__cpu_run_range(r);
  }
  return weft__range_result(r);
}

/* --- the model's state, per calling thread ------------------------------------ */

#define SITES              32      /* call sites per thread (element functions), in sets of two */
#define SITE_TIMED_FIRST   4       /* a new site's first calls are all timed */
#define FIRST_CHUNK_EVERY  4       /* a parallel call times the caller's first chunk once in this many */
#define STATIC_MAX_NS      20000.0 /* a region splits a map statically when each share is this short */
#define FORK_SAMPLE_MAX_NS 50000.0 /* a fork is a sample of the fork cost when each share is this short */
#define FAR_SAMPLE_EVERY   256     /* one call in this many is timed when the map is far too small */

/*
 * What a map runs: an element function, or a range function (weft_pmap_range,
 * weft_reduce's units), whose calls each take a whole sub-range.
 */
typedef struct body {
  weft_index_fn fn;  /* NULL when rfn is set */
  weft_range_fn rfn; /* NULL for weft_pmap */
  void *ctx;
} body;

typedef struct cpu_site {
  weft__site_key fn; /* the key (the caller's function); NULL: free */
  double elem_ns;    /* estimated cost of one element; 0: not measured yet */
  double regret_ns;  /* the ski rental's regret (model.h) */
  double between_ns; /* estimated time from the end of one call to the next's start */
  int64_t last_end;  /* when the last timed call ended; 0: none */
  size_t seq_n;      /* maps of at most this many run on the caller untimed (any kind) */
  size_t watch_n;    /* ... and those of at least this many time their first element (model.h) */
  uint32_t period;   /* untimed calls allowed between two timed ones (7 or 255) */
  uint32_t untimed;  /* calls since the last timed one */
  uint32_t ran_here; /* ... of which on the caller, untimed, since last_end */
  size_t par_lo;     /* maps of par_lo..par_hi elements fork par_k workers untimed (par_hi 0: none) */
  size_t par_hi;
  unsigned par_k;
  unsigned par_kind; /* ... while the team is of this kind (weft__cpu_team_kind) */
  bool paid;         /* the last timed call forked because the workers paid (the model's hysteresis) */
  uint32_t timed;    /* timed calls so far (saturates) */
  uint32_t forks;    /* parallel calls so far (wraps): first-chunk sampling */
  unsigned trials;   /* forks left to try after a warm-up (model.h) */
} cpu_site;

typedef struct cpu_model {
  cpu_site site[SITES];
  weft__fork_costs fork[WEFT__TEAM_KINDS]; /* measured fork-join costs of the full team, by gap */
  int64_t last_join[WEFT__TEAM_KINDS];     /* when this thread's last fork of each kind ended */
  unsigned forked[WEFT__TEAM_KINDS];       /* forks of each kind so far (saturates at 2) */
  unsigned char thread;                    /* THREAD_*: may this thread run fibers? (on_parkable_fiber) */
} cpu_model;

enum { THREAD_UNKNOWN, THREAD_PLAIN, THREAD_CARRIER };

static __thread cpu_model tls_model;

/*
 * The thread's model through a pointer in the static TLS block (initial
 * exec): in the shared library a look-up of tls_model itself is a call to
 * __tls_get_addr, two of them on a small map's hot path (gcc repeats it
 * rather than keep the address): a map of 10 elements cost 16.4 ns over its
 * loop through libweft.so, 12.6 with this pointer (3.5 linked statically).
 * The pointer is 8 bytes of the static block that the C library keeps
 * spare for such variables of libraries opened later.
 */
static __thread cpu_model *tls_model_ref __attribute__((tls_model("initial-exec")));

static inline cpu_model *model_self(void) {
  cpu_model *m = tls_model_ref;
  if (WEFT__UNLIKELY(!m)) m = tls_model_ref = &tls_model;
  return m;
}

/*
 * The site of fn: two-way set-associative, so that two element functions
 * whose addresses collide do not evict each other at every call; a miss
 * takes the way that has been timed less (the newer site), its record
 * starting afresh in cpu_auto_slow.
 */
static inline cpu_site *site_of(cpu_model *m, weft__site_key fn) {
  uintptr_t h = (uintptr_t)fn;
  h ^= h >> 5;
  h ^= h >> 11;
  cpu_site *a = &m->site[(h % (SITES / 2)) * 2], *b = a + 1;
  if (WEFT__LIKELY(a->fn == fn)) return a;
  if (b->fn == fn) return b;
  return a->timed <= b->timed ? a : b;
}

/* Run [lo, hi) on the caller, in order; the first (lowest) nonzero result, or 0. Every element runs. */
static inline int run_here(const body *b, size_t lo, size_t hi) {
  if (b->rfn) return lo < hi ? b->rfn(b->ctx, lo, hi) : 0; /* one sub-range */
  weft_index_fn fn = b->fn;
  void *ctx = b->ctx;
  int err = 0;
  for (size_t i = lo; i < hi; i++) {
    int rc = fn(ctx, i);
    if (WEFT__UNLIKELY(rc != 0) && err == 0) err = rc;
  }
  return err;
}

/* Run element i on the caller; its wall time. */
static int64_t run_timed(const body *b, size_t i, int *err) {
  int64_t a = weft_now_ns();
  int rc = b->rfn ? b->rfn(b->ctx, i, i + 1) : b->fn(b->ctx, i);
  if (WEFT__UNLIKELY(rc != 0) && *err == 0) *err = rc;
  return weft_now_ns() - a;
}

/*
 * Run the first elements of [i, n) on the caller, timed (model.h, "a site
 * whose elements change"): true when they took so much more than the
 * estimate elem_ns that the rest deserves a new decision. The first element
 * decides whether to look further; only when it and the WATCH_CONFIRM
 * elements after it were all dear (one or two alone may have been
 * preempted) is it true, with *took the shortest of them. *ran: how many ran.
 */
static bool first_was_dear(const body *b, size_t i, size_t n, double elem_ns, int *err, int64_t *took,
                           size_t *ran) {
  double bar = WEFT__MODEL_WATCH_FACTOR * elem_ns;
  int64_t t = run_timed(b, i, err);
  *ran = 1;
  if (!((double)t > bar && (double)t * (double)(n - i - 1) >= WEFT__MODEL_WATCH_PAYS_NS)) return false;
  for (size_t k = 1; k <= WEFT__MODEL_WATCH_CONFIRM && i + k + 1 < n; k++) {
    int64_t tk = run_timed(b, i + k, err);
    *ran = k + 1;
    if (!((double)tk > bar)) return false;
    if (tk < t) t = tk;
  }
  *took = t;
  return true;
}

/* --- EXPLAIN ------------------------------------------------------------------------ */

/* WEFT_EXPLAIN, read once: 0 off, 1 once per site and decision, 2 every call. */
static atomic_int explain_env = -1;

static int explain_setting(void) {
  int v = weft__load_relaxed(&explain_env);
  if (WEFT__LIKELY(v >= 0)) return v;
  weft__settings s;
  weft__settings_get(&s);
  weft__store_relaxed(&explain_env, (int)s.explain);
  return (int)s.explain;
}

/* Which (site, decision) pairs were explained already (WEFT_EXPLAIN=1). */
static pthread_mutex_t explained_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
  const void *pc;
  unsigned workers;
  unsigned why;
} explained[256];
static unsigned explained_n;

static bool explain_first_time(const void *pc, unsigned workers, unsigned why) {
  bool first = true;
  pthread_mutex_lock(&explained_mu);
  for (unsigned i = 0; i < explained_n && first; i++)
    first = !(explained[i].pc == pc && explained[i].workers == workers && explained[i].why == why);
  if (first && explained_n < sizeof explained / sizeof explained[0]) {
    explained[explained_n].pc = pc;
    explained[explained_n].workers = workers;
    explained[explained_n].why = why;
    explained_n++;
  }
  pthread_mutex_unlock(&explained_mu);
  return first;
}

/* A duration for people: "23 ns", "2.3 µs", "4.1 ms", "1.2 s". */
static const char *fmt_ns(char *buf, size_t cap, double ns) {
  if (ns < 0) ns = 0;
  if (ns < 1000)
    snprintf(buf, cap, "%.3g ns", ns);
  else if (ns < 1e6)
    snprintf(buf, cap, "%.3g µs", ns / 1e3);
  else if (ns < 1e9)
    snprintf(buf, cap, "%.3g ms", ns / 1e6);
  else
    snprintf(buf, cap, "%.3g s", ns / 1e9);
  return buf;
}

/* What one call did, for EXPLAIN. */
typedef struct explain_rec {
  const void *pc;
  size_t n;
  size_t probed; /* elements the probe timed on the caller (a new site) */
  weft__model_in in;
  weft__model_out out;
  double took_ns;  /* measured wall time of the call */
  double stall_ns; /* the stalls' share in the fork costs */
  double dear_ns;  /* > 0: the first elements on the caller took this long, and the rest was decided again */
  double was_ns;   /* ... where the estimate had been this */
  bool stealing;   /* forked onto the caller's work-stealing deque (WEFT__TEAM_STEAL) */
  size_t stolen;   /* ... and how many workers took a part */
} explain_rec;

static void explain_print(const explain_rec *e) {
  char site[192], a[32], b[32], c[32], d[32], line[640];
  weft__describe_site(e->pc, site, sizeof site);
  const weft__model_in *in = &e->in;
  const weft__model_out *o = &e->out;
  size_t at = 0;
#define EMIT(...)                                                                                            \
  do {                                                                                                       \
    if (at < sizeof line) {                                                                                  \
      int len_ = snprintf(line + at, sizeof line - at, __VA_ARGS__);                                         \
      at += len_ > 0 ? (size_t)len_ : 0;                                                                     \
    }                                                                                                        \
  } while (0)
  EMIT("pmap n=%zu at %s: ", e->n, site);
  if (o->why != WEFT__WHY_ONE && o->why != WEFT__WHY_TEAM_OF_ONE) {
    EMIT("%s of work estimated (%zu x %s%s)", fmt_ns(a, sizeof a, (double)e->n * in->elem_ns), e->n,
         fmt_ns(b, sizeof b, in->elem_ns), e->probed ? ", timed on the first elements" : "");
    if (o->why != WEFT__WHY_BUSY && o->why != WEFT__WHY_PROBED_ALL && in->team > 1) {
      unsigned k = o->best_k > 1 ? o->best_k : 2;
      double share = (double)(k - 1) / (double)(in->team - 1);
      EMIT(", %s to start %u workers (%s if warm", fmt_ns(a, sizeof a, in->fork_ns * share), k,
           fmt_ns(b, sizeof b, in->fork_warm_ns * share));
      if (e->stall_ns > 0) EMIT("; %s of it stalls", fmt_ns(a, sizeof a, e->stall_ns * share));
      EMIT("), %s on them", fmt_ns(c, sizeof c, o->why == WEFT__WHY_WARM_UP ? o->warm_ns : o->par_ns));
    }
    EMIT(": ");
  }
  if (e->dear_ns > 0)
    EMIT("the first elements took %s each, not %s: decided again for the rest: ",
         fmt_ns(a, sizeof a, e->dear_ns), fmt_ns(b, sizeof b, e->was_ns));
  if (o->workers > 1 && e->stealing)
    EMIT("ran on the caller and %zu of the %u worker%s it offered parts to by work stealing, in %s (%s)",
         e->stolen, o->workers - 1, o->workers > 2 ? "s" : "", fmt_ns(d, sizeof d, e->took_ns),
         weft__why_text(o->why));
  else if (o->workers > 1)
    EMIT("ran on %u workers in %s (%s)", o->workers, fmt_ns(d, sizeof d, e->took_ns), weft__why_text(o->why));
  else if (o->why == WEFT__WHY_COLD)
    EMIT("ran on the caller in %s (%s; lost so far %s of the %s that waking it costs)",
         fmt_ns(d, sizeof d, e->took_ns), weft__why_text(o->why), fmt_ns(a, sizeof a, o->regret_ns),
         fmt_ns(b, sizeof b, o->switch_ns));
  else
    EMIT("ran on the caller in %s (%s)", fmt_ns(d, sizeof d, e->took_ns), weft__why_text(o->why));
#undef EMIT
  weft__warn("%s", line);
}

static void explain_maybe(int mode, const explain_rec *e) {
  if (mode == 1 && !explain_first_time(e->pc, e->out.workers, e->out.why)) return;
  explain_print(e);
}

/* --- test control ------------------------------------------------------------------------ */

#ifdef WEFT_TESTING
static atomic_ulong test_counts[WEFT__WHY_TRIAL + 3]; /* [0]: cached on the caller; [1 + why]; then forks */
#define TEST_SLOT(w)  ((w) == WEFT__PMAP_TEST_FORKED ? WEFT__WHY_TRIAL + 2 : (w) + 1)
#define TEST_COUNT(w) atomic_fetch_add_explicit(&test_counts[TEST_SLOT(w)], 1, memory_order_relaxed)
#else
#define TEST_COUNT(w) ((void)0)
#endif

void weft__pmap_test_reset(void) {
  memset(&tls_model, 0, sizeof tls_model);
  pthread_mutex_lock(&explained_mu);
  explained_n = 0;
  pthread_mutex_unlock(&explained_mu);
  weft__store_relaxed(&explain_env, -1);
}

void weft__pmap_test_forget_regret(void) {
  for (int i = 0; i < SITES; i++) {
    tls_model.site[i].regret_ns = 0;
    tls_model.site[i].trials = 0;
    tls_model.site[i].untimed = 0;
    tls_model.site[i].par_hi = 0;   /* no cached fork either: the next call is decided */
    tls_model.site[i].paid = false; /* ... with the margin of a site that has not forked */
  }
}

unsigned long weft__pmap_test_count(int why) {
#ifdef WEFT_TESTING
  if (why >= WEFT__PMAP_TEST_FORKED && why <= WEFT__WHY_TRIAL)
    return atomic_load(&test_counts[TEST_SLOT(why)]);
#else
  WEFT__UNUSED(why);
#endif
  return 0;
}

/* --- the automatic-grain CPU path ------------------------------------------------------ */

/*
 * Remember, for the untimed calls to come, how large a map runs on the
 * caller (see the top), and which maps fork without asking the model: a
 * decision to fork k workers because they pay for themselves (not a trial
 * or a warm-up, which are judged by their timing) holds for maps no smaller,
 * on a team of the same kind, up to the largest whose shares are still
 * samples of the fork cost (a longer map's timing says whether a worker
 * stalled, and is cheap beside its work); when k is less than the team, for
 * that size only, since a larger map may want more workers.
 */
static void cache_bounds(cpu_site *s, size_t n, const weft__model_out *o, unsigned kind, unsigned team) {
  double sure = s->elem_ns > 0 ? o->seq_max_ns / s->elem_ns : 0;
  size_t bound = sure >= (double)SIZE_MAX ? SIZE_MAX : (size_t)sure;
  /* The decision just made holds for maps no larger, until the next timed call. */
  if (o->workers == 1 && o->why != WEFT__WHY_BUSY && o->why != WEFT__WHY_PROBED_ALL && n > bound) bound = n;
  if (o->why == WEFT__WHY_TEAM_OF_ONE) bound = SIZE_MAX;
  s->seq_n = bound;
  /* Runs on the caller expected to take WATCH_MIN_NS or more time their first element. */
  double watch = s->elem_ns > 0 ? WEFT__MODEL_WATCH_MIN_NS / s->elem_ns + 1 : 2;
  s->watch_n = o->why == WEFT__WHY_TEAM_OF_ONE || watch >= (double)SIZE_MAX ? SIZE_MAX
               : watch < 2                                                  ? 2
                                                                            : (size_t)watch;
  /*
   * Far below the bound no plausible change flips the decision soon: time
   * one call in 256, not 8. A timed call costs about 100 ns (two clock reads
   * and the decision); at one in 64 that was 1.5 ns of every call of
   * weft_pmap_range over 1000 doubles (190 ns of work).
   */
  s->period = sure >= 4.0 * (double)n ? FAR_SAMPLE_EVERY - 1 : WEFT__MODEL_SAMPLE_EVERY - 1;
  s->par_hi = 0;
  if (o->workers > 1 && o->why == WEFT__WHY_PAYS && s->elem_ns > 0) {
    double most = FORK_SAMPLE_MAX_NS * (double)o->workers / s->elem_ns;
    size_t hi = o->workers < team ? n : most >= (double)SIZE_MAX ? SIZE_MAX : (size_t)most;
    if (hi >= n) {
      s->par_lo = n;
      s->par_hi = hi;
      s->par_k = o->workers;
      s->par_kind = kind;
    }
  }
}

/* The range of an automatic-grain map about to fork, each worker's share about share_ns long. */
static void fork_range(weft__range *r, size_t n, const body *b, double share_ns) {
  weft__range_init(r, n, b->fn, b->ctx, 0, 0);
  r->rfn = b->rfn;
  /* Short shares need no claims or steals in a region (cpu.h, weft__static_part). */
  r->static_ok = share_ns <= STATIC_MAX_NS;
}

/*
 * done0 elements (the lowest) ran on the caller already, with result err0:
 * the hot path's watched first elements, dear_ns long each, where the
 * estimate was was_ns (model.h); 0, 0, 0, 0 for a whole call.
 */
static int cpu_auto_slow(cpu_model *m, cpu_site *s, size_t n, const body *b, weft__site_key fn, int explain,
                         const void *pc, size_t done0, int err0, double dear_ns, double was_ns) {
  unsigned kind = weft__cpu_team_kind();
  if (s->fn != fn) {
    memset(s, 0, sizeof *s);
    s->fn = fn;
  }
  weft__team team;
  weft__cpu_team(&team);
  if (kind != WEFT__TEAM_REGION && weft__range_caller_busy()) team.idle = 1;
  /* After the team's description: its first call reads the environment, which is no element's cost. */
  int64_t t0 = weft_now_ns();
  unsigned calls = s->ran_here + 1;
  if (s->last_end && s->elem_ns > 0) {
    /* The time between calls, spread over the calls run on the caller untimed since the last end noted. */
    double span = (double)(t0 - s->last_end) - (double)s->ran_here * (double)n * s->elem_ns;
    s->between_ns = weft__model_average(s->between_ns, span > 0 ? span / calls : 1);
  }
  int64_t gap = m->last_join[kind] ? t0 - m->last_join[kind] : INT64_MAX;
  unsigned bucket = weft__model_gap_bucket(gap);
  double stall_ns = weft__fork_stall(&m->fork[kind], t0);
  double fork_ns = weft__fork_cost(&m->fork[kind], bucket, t0) + stall_ns;
  /*
   * A thread's first forks start the runtime's threads and wake them for the
   * first time (8 ms each for the first two regions of a process on the
   * 2-core VM): no map that a fork of 1 us would not pay for should pay that.
   */
  if (m->forked[kind] < 2 && fork_ns < WEFT__MODEL_FIRST_FORK_NS) fork_ns = WEFT__MODEL_FIRST_FORK_NS;

  /* A new site: time its first elements on the caller, doubling, for about PROBE_NS. */
  size_t done = done0;
  int err = err0;
  int64_t t_rest = t0;
  if (!(s->elem_ns > 0) && n > 1 && team.size > 1) {
    /* The estimate leaves out the first element (cold caches, lazy binding) unless it was long. */
    size_t c = 1, mark = 0;
    int64_t t_mark = t0;
    do {
      size_t hi = n - done < c ? n : done + c;
      int rc = run_here(b, done, hi);
      if (rc && !err) err = rc;
      done = hi;
      t_rest = weft_now_ns();
      if (c == 1 && done < n && (double)(t_rest - t0) < 10 * WEFT__MODEL_PROBE_NS) {
        mark = done;
        t_mark = t_rest;
      }
      c *= 2;
    } while (done < n && (double)(t_rest - t_mark) < WEFT__MODEL_PROBE_NS);
    s->elem_ns = done > mark ? (double)(t_rest - t_mark) / (double)(done - mark) : (double)(t_rest - t0);
  }
  size_t probed = done0 ? 0 : done;

decide:;
  weft__model_in in = {
      .n = n - done,
      .elem_ns = dear_ns > 0      ? dear_ns
                 : s->elem_ns > 0 ? s->elem_ns
                                  : 1, /* this call's own cost first */
      .team = team.size,
      .idle = team.idle,
      .fork_ns = fork_ns,
      .fork_warm_ns =
          weft__fork_cost_best(&m->fork[kind], weft__model_gap_bucket((int64_t)s->between_ns), t0) + stall_ns,
      .regret_ns = s->regret_ns,
      .calls = calls,
      .trials = s->trials,
      .paid = s->paid,
      .stall_ns = stall_ns,
  };
  weft__model_out out;
  if (done == n) {
    /* The probe ran it all: what the model would say of the whole, for the cache and EXPLAIN. */
    in.n = n;
    weft__model_decide(&in, &out);
    out.workers = 1;
    out.why = WEFT__WHY_PROBED_ALL;
    out.regret_ns = s->regret_ns;
  } else {
    weft__model_decide(&in, &out);
  }
  s->regret_ns = out.regret_ns;
  s->trials = out.trials;
  s->paid = out.why == WEFT__WHY_PAYS;
  TEST_COUNT((int)out.why);

  int64_t t1;
  bool stealing = false;
  size_t stolen = 0;
  if (out.workers <= 1 || done == n) {
    out.workers = 1;
    size_t from = done;
    if (dear_ns == 0 && !b->rfn && done + 1 < n && team.size > 1 && out.why != WEFT__WHY_BUSY &&
        (double)(n - done) * in.elem_ns >= WEFT__MODEL_WATCH_MIN_NS) {
      int64_t took;
      size_t ran;
      bool dear = first_was_dear(b, done, n, in.elem_ns, &err, &took, &ran);
      done += ran;
      if (dear) {
        was_ns = in.elem_ns;
        dear_ns = (double)took;
        /* The decision takes this call's cost; the estimate moves as for any sample (bounded). */
        s->elem_ns = weft__model_average(s->elem_ns, dear_ns);
        t_rest = weft_now_ns();
        goto decide;
      }
    }
    int rc = run_here(b, done, n);
    if (rc && !err) err = rc;
    t1 = weft_now_ns();
    if (from < n && team.size > 1)
      s->elem_ns = weft__model_average(s->elem_ns, (double)(t1 - t_rest) / (double)(n - from));
  } else {
    /* The fork's sample starts here: the decision above is this call's cost, not a fork's. */
    int64_t t_fork = weft_now_ns();
    weft__range r;
    fork_range(&r, n, b, out.work_ns / (double)out.workers);
    atomic_store_explicit(&r.next, done, memory_order_relaxed);
    r.time_first = s->timed < SITE_TIMED_FIRST || s->forks % FIRST_CHUNK_EVERY == 0;
    bool sample = out.work_ns / (double)out.workers <= FORK_SAMPLE_MAX_NS;
    r.time_done = !sample;
    s->forks++;
    weft__cpu_fork(&r, out.workers);
    t1 = weft_now_ns();
    stealing = kind == WEFT__TEAM_STEAL;
    stolen = r.stolen;
    if (r.first_count)
      s->elem_ns = weft__model_average(s->elem_ns, (double)r.first_ns / (double)r.first_count);
    /* What the fork cost: the wall time less the share of the work the model expected of each worker. */
    double f = (double)(t1 - t_fork) - (double)(n - done) * s->elem_ns / (double)out.workers;
    f = f * (double)(team.size - 1) / (double)(out.workers - 1); /* as the full team's cost */
    /*
     * A thread's first fork also starts the runtime's threads: a cost paid
     * once, not a fork's. And a long map says little about the fork: its
     * wall time less the expected work is mostly how unevenly the workers
     * ran. Only short maps are samples; a long one still says, by how long
     * the caller waited at the join once it had nothing left to claim,
     * whether a worker stalled (model.h, weft__fork_wait_record).
     */
    if (m->last_join[kind] && sample)
      weft__fork_cost_record(&m->fork[kind], bucket, f, t1);
    else if (m->last_join[kind] && r.done_at)
      weft__fork_wait_record(&m->fork[kind], bucket, (double)(t1 - r.done_at),
                             out.work_ns / (double)out.workers, t1);
    m->last_join[kind] = t1;
    if (m->forked[kind] < 2) m->forked[kind]++;
    int rc = weft__range_result(&r);
    if (rc && !err) err = rc; /* the probe's elements have the lower indices */
  }
  s->last_end = t1;
  s->untimed = 0;
  s->ran_here = 0;
  if (s->timed < UINT32_MAX) s->timed++;
  if (s->timed < SITE_TIMED_FIRST) {
    s->seq_n = 0; /* a new site's first calls are all timed */
    s->par_hi = 0;
  } else
    cache_bounds(s, n, &out, kind, team.size);
  if (explain) {
    in.n = n;
    explain_rec e = {pc, n, probed, in, out, (double)(t1 - t0), stall_ns, dear_ns, was_ns, stealing, stolen};
    explain_maybe(explain, &e);
  }
  return err;
}

/*
 * A map the site's last timed call says to fork (cache_bounds): the fork
 * alone, with no clock but the end's (the next timed call's gap and time
 * between calls start there), no sample and no decision.
 */
static __attribute__((noinline)) int cpu_fork_untimed(cpu_model *m, cpu_site *s, size_t n, const body *b,
                                                      unsigned kind) {
  s->untimed++;
  TEST_COUNT(WEFT__PMAP_TEST_FORKED);
  weft__range r;
  fork_range(&r, n, b, (double)n * s->elem_ns / (double)s->par_k);
  weft__cpu_fork(&r, s->par_k);
  int64_t t1 = weft_now_ns();
  m->last_join[kind] = t1;
  s->last_end = t1;
  s->ran_here = 0;
  return weft__range_result(&r);
}

/*
 * An automatic-grain CPU map, not on a fiber. The hot path asks nothing of
 * the backend, not even the kind of team: the bound it checks was set by the
 * last timed call, whatever its kind, and a map run on the caller is right
 * in any context (at worst it misses a fork for the 7 calls to the next one).
 */
static inline __attribute__((always_inline)) int cpu_auto(cpu_model *m, size_t n, const body *b,
                                                          weft__site_key fn, unsigned flags, const void *pc) {
  cpu_site *s = site_of(m, fn);
  int explain = (flags & WEFT_PMAP_EXPLAIN) ? 2 : explain_setting();
  /* The hot path: a small map at a site whose last timed call ran on the caller. */
  bool known = s->fn == fn && s->untimed < s->period && !explain;
  if (WEFT__LIKELY(known && n <= s->seq_n)) {
    s->untimed++;
    s->ran_here++;
    TEST_COUNT(-1);
    /* A range map is never watched: one index timed alone is one call, whose overhead is not its cost. */
    if (WEFT__LIKELY(n < s->watch_n || b->rfn)) return run_here(b, 0, n);
    int err = 0;
    int64_t took;
    size_t ran;
    if (WEFT__LIKELY(!first_was_dear(b, 0, n, s->elem_ns, &err, &took, &ran))) {
      int rc = run_here(b, ran, n);
      return err ? err : rc;
    }
    double was = s->elem_ns;
    s->elem_ns = weft__model_average(s->elem_ns, (double)took);
    return cpu_auto_slow(m, s, n, b, fn, explain, pc, ran, err, (double)took, was);
  }
  /* A map the last timed call forked for: the same fork, on a team of the same kind with room. */
  if (known && n >= s->par_lo && n <= s->par_hi) {
    unsigned kind = weft__cpu_team_kind();
    if (kind == s->par_kind && (kind == WEFT__TEAM_REGION || !weft__range_caller_busy()))
      return cpu_fork_untimed(m, s, n, b, kind);
  }
  return cpu_auto_slow(m, s, n, b, fn, explain, pc, 0, 0, 0, 0);
}

/* --- the door --------------------------------------------------------------- */

/* EXPLAIN for the paths the model does not decide: an explicit grain, or BLOCKING work. */
static void explain_fixed(const void *pc, size_t n, const weft_pmap_opts *o, bool fibers, int mode) {
  weft__team team = {0, 1, 1};
  if (!fibers && !weft__parkable_self()) weft__cpu_team(&team);
  weft__model_out out = {.workers = team.size, .why = WEFT__WHY_GRAIN};
  if (mode == 1 && !explain_first_time(pc, out.workers, out.why + 16u * (unsigned)o->kind)) return;
  char site[192];
  weft__describe_site(pc, site, sizeof site);
  if (o->kind == WEFT_BLOCKING && fibers)
    weft__warn("pmap n=%zu at %s: BLOCKING: a fiber per element in flight (at most %zu): ran on fibers", n,
               site, o->max_parallel ? o->max_parallel : n);
  else if (o->kind == WEFT_BLOCKING)
    weft__warn("pmap n=%zu at %s: BLOCKING without fibers: one element per claim: ran on up to %u workers", n,
               site, team.size);
  else if (weft__parkable_self())
    weft__warn("pmap n=%zu at %s: on a fiber: handed to weft's OpenMP team", n, site);
  else
    weft__warn("pmap n=%zu at %s: grain %zu set by the caller: ran on up to %u workers (%s)", n, site,
               o->grain, team.size, weft__why_text(WEFT__WHY_GRAIN));
}

/*
 * The paths the model does not decide: an explicit grain, BLOCKING work, or
 * a call on a fiber. Out of line, so that the hot path's frame holds no
 * range (cache-line aligned, 2.5 KB).
 */
static __attribute__((noinline)) int pmap_run_fixed(size_t n, weft_index_fn fn, weft_range_fn rfn, void *ctx,
                                                    const weft_pmap_opts *opts, const void *pc) {
  weft_pmap_opts o = *opts;
  int explain = (o.flags & WEFT_PMAP_EXPLAIN) ? 2 : explain_setting();
  if (o.kind == WEFT_BLOCKING) {
    if (weft__fibers_up() == 0) {
      if (explain) explain_fixed(pc, n, &o, true, explain);
      return weft__pmap_fibers(n, fn, ctx, o.max_parallel, pc);
    }
    /* The fallback: one element per claim, at most max_parallel at once. */
    if (explain) explain_fixed(pc, n, &o, false, explain);
    weft__range r;
    weft__range_init(&r, n, fn, ctx, 1, o.max_parallel);
    r.blocking = true;
    return weft__pmap_cpu(&r);
  }
  if (explain) explain_fixed(pc, n, &o, false, explain);
  weft__range r;
  weft__range_init(&r, n, fn, ctx, o.grain, 0);
  r.rfn = rfn;
  return weft__pmap_cpu(&r);
}

/*
 * Is the caller a fiber that may park? A thread that is not a carrier never
 * runs a fiber, and stays one (fiber.h), so it is asked once per thread:
 * weft__fiber_self is a call into the fiber layer that a small map's hot
 * path would otherwise pay every time.
 */
static inline bool on_parkable_fiber(cpu_model *m) {
  if (WEFT__LIKELY(m->thread == THREAD_PLAIN)) return false;
  if (m->thread == THREAD_UNKNOWN) {
    m->thread = weft__carrier_thread() ? THREAD_CARRIER : THREAD_PLAIN;
    if (m->thread == THREAD_PLAIN) return false;
  }
  return weft__fiber_self() && weft__parkable_self();
}

/*
 * The door past the checks. Always inlined: weft_pmap's copy sees rfn NULL
 * and keeps the element loop of its hot path as it was, with no call more.
 */
static inline __attribute__((always_inline)) int pmap_run(size_t n, weft_index_fn fn, weft_range_fn rfn,
                                                          void *ctx, const weft_pmap_opts *opts,
                                                          weft__site_key key, const void *pc) {
  body b = {fn, rfn, ctx};
  WEFT__ASSERT(!rfn || opts->kind == WEFT_CPU); /* range.c turns a BLOCKING range map into an element map */
  /* (A fiber inside an OpenMP region of its own is not parkable: it runs maps as a thread would.) */
  cpu_model *m = model_self();
  if (opts->kind == WEFT_CPU && opts->grain == 0 && !on_parkable_fiber(m))
    return cpu_auto(m, n, &b, key, opts->flags, pc);
  return pmap_run_fixed(n, fn, rfn, ctx, opts, pc);
}

int weft__pmap_run(size_t n, weft_index_fn fn, weft_range_fn rfn, void *ctx, const weft_pmap_opts *opts,
                   weft__site_key key, const void *pc) {
  return pmap_run(n, fn, rfn, ctx, opts, key, pc);
}

/* The door's checks: *o is *opts or the defaults; false when they are not valid. */
static inline bool door_opts(const weft_pmap_opts *opts, weft_pmap_opts *o) {
  *o = opts ? *opts : (weft_pmap_opts)WEFT_PMAP_OPTS_INIT;
  return weft__pmap_opts_ok(o);
}

int weft_pmap(size_t n, weft_index_fn fn, void *ctx, const weft_pmap_opts *opts) {
  weft_pmap_opts o;
  if (!fn || !door_opts(opts, &o)) return -EINVAL;
  if (n == 0) return 0;
  return pmap_run(n, fn, NULL, ctx, &o, (weft__site_key)fn, __builtin_return_address(0));
}

/* Here rather than in range.c with weft_reduce: the door inlines pmap_run, as weft_pmap's does. */
int weft_pmap_range(size_t n, weft_range_fn fn, void *ctx, const weft_pmap_opts *opts) {
  weft_pmap_opts o;
  if (!fn || !door_opts(opts, &o)) return -EINVAL;
  if (n == 0) return 0;
  const void *pc = __builtin_return_address(0);
  if (o.kind == WEFT_BLOCKING) return weft__pmap_range_blocking(n, fn, ctx, &o, pc);
  return pmap_run(n, NULL, fn, ctx, &o, (weft__site_key)fn, pc);
}
