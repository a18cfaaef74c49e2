/*
 * This file contains the cost model of an automatic-grain CPU map: from what
 * a map can measure cheaply, on how many workers it should run. The model is
 * a pure function of its measured inputs (weft__model_decide), so that a test
 * can inject costs and check the decision; the measurements, and the state
 * kept per calling thread and per call site, are in api/pmap.c.
 *
 * The question
 * ------------
 * A parallel map pays only when its work is larger than what it costs to
 * start and join the workers. On the 2-core machine of docs/benchmarks.md a
 * libgomp region whose threads are still spinning from the last one costs
 * 0.6-1.3 us to open and close; once they have gone to sleep (a few ms
 * later) it costs 2.5-6 us, and 60-120 us once the kernel has descheduled
 * them for good (over ~10 ms). A map of 100 elements of 22 ns (the GPars
 * kernel) is 2.2 us of work: parallel in a tight loop, sequential when
 * called now and then. No constant cut-off ("n < 1000 runs sequentially")
 * is right for both, nor for elements of 1 ns and of 1 ms.
 *
 * What is measured
 * ----------------
 *  - The cost of one element, per call site (keyed by the element function):
 *    a site seen for the first time runs its first elements on the caller,
 *    doubling the count until about a microsecond has passed (the probe),
 *    then decides for the rest. Later calls are timed (all of a map on the
 *    caller, every 8th call, every 64th far below the cut-off; the caller's
 *    first chunk of a parallel map, every 4th parallel call) and the
 *    estimate follows as an average that moves a quarter of the way towards
 *    a longer sample, by at most 8x, and three quarters towards a shorter
 *    one (noise only ever makes a sample longer), so that one preempted
 *    sample cannot swing it and a real change is followed within a few
 *    samples. The probe leaves out its first element, which pays for cold
 *    caches and lazy binding.
 *  - The cost of a fork and join, per calling thread and per kind of team
 *    (a region of the runtime's pooled threads, tasks in an enclosing team,
 *    weft's own pool), in GAPS buckets of the time since that thread's last
 *    fork (under 16 us, then x4 per bucket: 64 us, 256 us, 1 ms, 4 ms, 16 ms,
 *    64 ms, more), because that time is what decides whether the workers
 *    are still spinning. A fork measures itself: its wall time less the work
 *    the model expected of it (n elements / k workers). A bucket's estimate
 *    is the median of its last five samples (a preempted worker makes one
 *    sample 1000x too long), optimistic while it has fewer than three; the
 *    stalls that the median leaves out are added back as an average over
 *    all forks (weft__fork_stall), since on a shared machine they are a
 *    real cost that only forks pay. Only maps whose shares are short
 *    (FORK_SAMPLE_MAX_NS) are samples: in a long map the wall time less the
 *    expected work is mostly how unevenly the workers ran. A bucket never
 *    measured takes the value of the buckets below it (a team cannot be
 *    cheaper to wake after a longer sleep), or a guess of 1 us: optimistic
 *    on purpose, so that a guess is tried, measured and corrected rather
 *    than believed forever. Samples age towards the guess (a half-life of
 *    half a second) rather than expire.
 *  - A thread's first two forks of a kind: they start the runtime's threads
 *    and wake them for the first time (8 ms each in a new process on the
 *    2-core VM, against 0.6 us for a warm fork), so they are taken to cost
 *    at least FIRST_FORK_NS (1 ms) whatever the buckets say: a short loop
 *    of small maps never pays them, and the ski rental below pays them once
 *    the time lost on the caller has reached a millisecond.
 *  - How many workers could take part: the team's size, and whether the
 *    caller is itself an element of a map that still has unclaimed indices
 *    in its own slice (then every other worker is busy with that map, and
 *    an inner map runs on the caller: the nested case).
 *
 * The decision
 * ------------
 * With W = n c the work (c the cost of an element), F the fork cost of the
 * full team of T workers at the current gap, and a fork of k workers taken
 * to cost F (k - 1) / (T - 1) (each woken worker costs its share), the map
 * takes on k workers
 *
 *     t(k) = F (k - 1) / (T - 1) + W / k,    best at k* = sqrt(W (T - 1) / F),
 *
 * and it runs on k* workers when t(k*) is below W by more than MARGIN
 * (1/32: when the two are that close, the caller alone has the smaller
 * spread), else on the caller alone. A site whose last decision forked
 * because the workers paid goes on forking while t(k*) is below W at all:
 * at the margin the estimate of an element moves by more than 1/32 from one
 * timed call to the next (21 to 28 ns for the same 24 ns kernel), and
 * without this hysteresis a map of 100 such elements flapped between the
 * team and the caller, each time on the wrong side for 7 calls. Not where
 * forks stall (weft__fork_stall, below, a nanosecond a fork or more: a
 * worker preempted within the last few seconds): there the margin stays,
 * since a fork kept at the margin then waits for a preempted worker now
 * and then (n = 300 with the other core busy: the upper quartile of the
 * calls 11.6 us against 8.3 without it).
 *
 * The trap: a map that runs on the caller lets the team fall asleep, so the
 * next call sees a cold team and runs on the caller again, even where a warm
 * team would have won every call (the GPars loop on a quiet machine). This
 * is the ski-rental problem, and the model answers it the way that is never
 * worse than twice the best choice in hindsight: each call that ran on the
 * caller while a warm team would have won adds what it lost (W - t_warm(k))
 * to the site's regret; once the regret reaches what waking the cold team
 * costs over the sequential call (t_now(k) - W), the map wakes the team
 * (WARM_UP). From then on the gap is short and the warm cost applies. The
 * warm cost is the best fork lately (weft__fork_cost_best) in the bucket of
 * the time between this site's calls; whether a fork pays at the current
 * gap is judged by the median. So a team whose steady forks win but whose
 * first ones after a wake-up do not is woken again whenever the regret has
 * paid for it, and a fork that then wins keeps it warm.
 *
 * After a warm-up the team is tried TRIALS times before it is judged (its
 * first forks after a wake-up are its slowest).
 *
 * A site whose elements change: the estimate of a site whose calls run on
 * the caller untimed (the hot path) may be far out of date when its
 * elements become dear (16 elements of 100 ns, then 16 of 10 ms: 160 ms on
 * the caller where two workers take 80). So a run on the caller that is
 * expected to take WATCH_MIN_NS or more times its first element (two clock
 * reads, at most 5% of such a call); when that element took over
 * WATCH_FACTOR times the estimate and the rest at its cost would be
 * WATCH_PAYS_NS or more, it times the next WATCH_CONFIRM (2) too (one or
 * two elements alone may just have been preempted: seen in the GPars loop,
 * a 69 us element among 30 ns ones, and under Valgrind, which runs one
 * thread at a time), and when all were dear the model decides again for
 * the rest with the new cost, once per call. The site's estimate moves towards
 * that cost by the usual bounded average, so a preempted pair cannot poison
 * it for the calls to come. Calls expected under WATCH_MIN_NS are not watched
 * (the reads would be a tenth of a 0.3 us map): they are corrected at their
 * next timed call, after at most 7 (or 255) calls.
 *
 * What it guarantees: the sequential choice costs the caller nothing but the
 * decision (a few ns at a known site: a table look-up and three compares;
 * the clock is read on one call in 8, or in 256 far below the cut-off); a
 * parallel call is chosen only when its estimate wins, or when the
 * accumulated regret pays for the waking, so over a loop the time lost to
 * wrong parallel calls is at most the regret, itself at most the time a
 * warm team would have saved. An explicit grain bypasses the model
 * entirely: the user decides.
 *
 * Rejected: a fixed n cut-off (wrong by 1000x across element costs); timing
 * every call (25 ns per clock read is 1% of a 2 us map, twice); a global
 * table of sites (a shared cache line written by every caller); asking the
 * runtime whether its threads spin (neither libgomp nor libomp says, and the
 * program's own regions change it: measuring the effect is the only honest
 * input).
 */
#ifndef WEFT_CPU_MODEL_H
#define WEFT_CPU_MODEL_H

#include "../base/internal.h"

#define WEFT__MODEL_GAPS           8           /* buckets of the time since a thread's last fork */
#define WEFT__MODEL_FORK_GUESS     1000.0      /* ns: the fork cost of a bucket never measured */
#define WEFT__MODEL_HALF_LIFE_NS   500000000LL /* a fork measurement's half-life: it ages towards the guess */
#define WEFT__MODEL_MARGIN         (1.0 / 32)  /* parallel must beat sequential by this share */
#define WEFT__MODEL_QUIET_STALL_NS 1.0         /* ns a fork of stalls below which the hysteresis holds */
#define WEFT__MODEL_PROBE_NS       1000.0      /* the probe of a new site runs about this long */
#define WEFT__MODEL_SAMPLE_EVERY   8           /* calls on the caller: one in this many is timed */
#define WEFT__MODEL_TRIALS         3         /* forks tried after a warm-up before the warm cost is judged */
#define WEFT__MODEL_FIRST_FORK_NS  1000000.0 /* the least a thread's first two forks are taken to cost */
#define WEFT__MODEL_WATCH_MIN_NS   1000.0 /* a run on the caller expected this long times its first element */
#define WEFT__MODEL_WATCH_FACTOR   16.0 /* ... and decides again when it took this many times the estimate */
#define WEFT__MODEL_WATCH_PAYS_NS  50000.0 /* ... and the rest at its cost would take this long */
#define WEFT__MODEL_WATCH_CONFIRM  2       /* ... and this many elements after it were dear too */

/* Why the map ran where it did (the EXPLAIN text says it in words). */
typedef enum weft__why {
  WEFT__WHY_GRAIN = 0,   /* an explicit grain: the model is not asked */
  WEFT__WHY_ONE,         /* one element */
  WEFT__WHY_TEAM_OF_ONE, /* the team has one thread (OMP_NUM_THREADS=1, a team of one) */
  WEFT__WHY_BUSY,        /* inside a map whose other workers are all busy */
  WEFT__WHY_SMALL,       /* the work is smaller than the cost of any team, warm or not */
  WEFT__WHY_COLD,        /* a warm team would win, a cold one would not: regret grows */
  WEFT__WHY_PAYS,        /* the team wins at the current gap */
  WEFT__WHY_WARM_UP,     /* the regret paid for waking a cold team */
  WEFT__WHY_PROBED_ALL,  /* a new site: timing its first elements on the caller ran them all */
  WEFT__WHY_TRIAL,       /* after a warm-up: the warm team is tried a few times before it is judged */
} weft__why;

/* The measured inputs of one decision. Times in ns. */
typedef struct weft__model_in {
  size_t n;            /* elements left to run */
  double elem_ns;      /* estimated cost of one element (> 0) */
  unsigned team;       /* workers a fork would have, the caller included (>= 1) */
  unsigned idle;       /* of those, how many could take part now, the caller included */
  double fork_ns;      /* fork-join cost of the full team at the current gap */
  double fork_warm_ns; /* the best lately at the gap between this site's calls (a warm team) */
  double regret_ns;    /* the site's regret so far (see the essay) */
  uint32_t calls;      /* calls this decision stands for (untimed calls since the last decision, + 1) */
  unsigned trials;     /* forks still to try after a warm-up (WEFT__MODEL_TRIALS, counting down) */
  bool paid;           /* the site's last decision forked because the workers paid: no MARGIN to stay */
  double stall_ns;     /* of fork_ns, the stalls' share (weft__fork_stall): no hysteresis while it shows */
} weft__model_in;

/* What the model decided. */
typedef struct weft__model_out {
  unsigned workers;  /* 1: on the caller; else a fork of this many, the caller included */
  weft__why why;     /* the reason, for EXPLAIN */
  double work_ns;    /* W: the estimated work */
  double par_ns;     /* estimated time on the best team at the current gap */
  double warm_ns;    /* estimated time on the best team if it were warm */
  unsigned best_k;   /* the team size that par_ns is for (1 when none can be formed) */
  double regret_ns;  /* the site's regret after this call */
  double switch_ns;  /* what waking the cold team would cost over running on the caller */
  double seq_max_ns; /* the largest work that runs on the caller whatever the gap (cache bound) */
  unsigned trials;   /* the site's trials left after this call */
} weft__model_out;

/* The bucket of a gap (ns since the thread's last fork): < 16 us, then x4 per bucket. */
static inline unsigned weft__model_gap_bucket(int64_t gap_ns) {
  if (gap_ns < 16000) return 0;
  uint64_t q = (uint64_t)gap_ns / 16000; /* >= 1 */
  unsigned b = 1 + (unsigned)(63 - __builtin_clzll(q)) / 2;
  return b < WEFT__MODEL_GAPS ? b : WEFT__MODEL_GAPS - 1;
}

/* t(k) of the essay: fork k of a team of `team` (k >= 2, team >= 2), plus W / k. */
static inline double weft__model_time(double work, double fork_ns, unsigned team, unsigned k) {
  return fork_ns * (double)(k - 1) / (double)(team - 1) + work / (double)k;
}

/* floor(sqrt(x)) for x >= 0, without libm (Newton's method on integers). */
static inline uint64_t weft__model_isqrt(double x) {
  if (!(x >= 1)) return 0;
  if (x >= 1.8e19) return UINT32_MAX;
  uint64_t v = (uint64_t)x, r = v, y = (r + 1) / 2;
  while (y < r) {
    r = y;
    y = (r + v / r) / 2;
  }
  return r;
}

/* The best team size for work W with fork cost F, among 2..kmax (kmax >= 2), and its time. */
static inline unsigned weft__model_best_k(double work, double fork_ns, unsigned team, unsigned kmax,
                                          double *t_out) {
  uint64_t ks = fork_ns > 0 ? weft__model_isqrt(work * (double)(team - 1) / fork_ns) : kmax;
  unsigned lo = ks < 2 ? 2 : ks > kmax ? kmax : (unsigned)ks;
  unsigned hi = lo < kmax ? lo + 1 : lo;
  double tl = weft__model_time(work, fork_ns, team, lo), th = weft__model_time(work, fork_ns, team, hi);
  /* Ties go to the smaller team: fewer threads woken for the same time. */
  if (th < tl) {
    *t_out = th;
    return hi;
  }
  *t_out = tl;
  return lo;
}

/*
 * Decide where a map runs, from measured inputs only: the same inputs always
 * give the same decision (a test injects them). See the essay.
 */
static inline void weft__model_decide(const weft__model_in *in, weft__model_out *out) {
  double w = (double)in->n * in->elem_ns;
  out->work_ns = w;
  out->par_ns = out->warm_ns = w;
  out->best_k = 1;
  out->workers = 1;
  out->regret_ns = in->regret_ns;
  out->switch_ns = 0;
  out->seq_max_ns = 0;
  out->trials = 0;
  unsigned team = in->team ? in->team : 1;
  unsigned kmax = team;
  if (in->idle < kmax) kmax = in->idle;
  if ((size_t)kmax > in->n) kmax = (unsigned)in->n;
  if (in->n < 2) {
    out->why = WEFT__WHY_ONE;
    return;
  }
  if (team < 2) {
    out->why = WEFT__WHY_TEAM_OF_ONE;
    return;
  }
  if (kmax < 2) {
    out->why = WEFT__WHY_BUSY;
    return;
  }
  /*
   * Below this much work no team wins at either gap (k = 2 is the best case
   * of t(k) < W (1 - MARGIN) for small W): the caller may skip the clock.
   */
  double margin = in->paid && in->stall_ns < WEFT__MODEL_QUIET_STALL_NS ? 0 : WEFT__MODEL_MARGIN;
  double fmin = in->fork_ns < in->fork_warm_ns ? in->fork_ns : in->fork_warm_ns;
  out->seq_max_ns = fmin / ((double)(team - 1) * (0.5 - margin));
  double goal = w * (1 - margin);
  double t_now, t_warm;
  unsigned k_now = weft__model_best_k(w, in->fork_ns, team, kmax, &t_now);
  unsigned k_warm = weft__model_best_k(w, in->fork_warm_ns, team, kmax, &t_warm);
  out->par_ns = t_now;
  out->warm_ns = t_warm;
  out->best_k = k_now;
  if (t_now < goal) {
    out->workers = k_now;
    out->why = WEFT__WHY_PAYS;
    out->regret_ns = 0;
    out->trials = in->trials ? in->trials - 1 : 0;
    return;
  }
  if (in->trials && t_warm < 2 * w) {
    /* Just woken: the first warm forks cost more than the ones that follow (model.h's essay). */
    out->workers = k_warm;
    out->best_k = k_warm;
    out->why = WEFT__WHY_TRIAL;
    out->regret_ns = 0;
    out->trials = in->trials - 1;
    return;
  }
  if (t_warm >= goal) {
    out->why = WEFT__WHY_SMALL;
    out->regret_ns = 0;
    return;
  }
  /* Ski rental: a warm team would win, waking the cold one costs switch_ns once. */
  double calls = in->calls ? (double)in->calls : 1;
  double regret = in->regret_ns + calls * (w - t_warm);
  out->switch_ns = t_now - w;
  if (regret >= out->switch_ns) {
    out->workers = k_warm;
    out->best_k = k_warm;
    out->why = WEFT__WHY_WARM_UP;
    out->regret_ns = 0;
    out->trials = WEFT__MODEL_TRIALS;
    return;
  }
  out->why = WEFT__WHY_COLD;
  out->regret_ns = regret;
}

/*
 * A running estimate. Timing noise is one-sided (a preemption, an interrupt,
 * a cold cache make a sample longer, never shorter), so a sample above the
 * estimate moves it a quarter of the way, by at most 8x, and one below moves
 * it three quarters of the way. 0 means none yet: the sample is taken.
 */
static inline double weft__model_average(double old, double sample) {
  if (!(sample > 0)) return old;
  if (!(old > 0)) return sample;
  if (sample < old) return old + (sample - old) * 3 / 4;
  if (sample > old * 8) sample = old * 8;
  return old + (sample - old) / 4;
}

/*
 * The fork-join costs that one thread measured for one kind of team, by gap
 * bucket: the last five samples of each, each with its time. A fork's cost
 * is a latency on a shared machine, where one preemption of a worker makes
 * one sample 1000x too long, and such preemptions come in bursts: the
 * estimate is the median of five, which two outliers in a row do not move
 * (the lower median of four, the median of three). With fewer than three it
 * is optimistic (a quarter of one sample, half the lower of two, never above
 * the guess): a thread's first forks are its slowest, and an outlier must
 * not be believed before it is confirmed.
 *
 * Samples age rather than expire: a sample's weight in the estimate decays
 * towards the guess with a half-life of HALF_LIFE_NS, so that a team that
 * was slow to wake a while ago is tried again once the memory has faded
 * (the machine may be quiet now), but not at once: a cold fork that took
 * 10 ms (seen here, with the other vCPU busy) is not retried a second later
 * as if it had cost 1 us.
 */
#define WEFT__MODEL_FORK_SAMPLES 5

typedef struct weft__fork_costs {
  double ns[WEFT__MODEL_GAPS][WEFT__MODEL_FORK_SAMPLES];  /* the last samples, newest first */
  int64_t at[WEFT__MODEL_GAPS][WEFT__MODEL_FORK_SAMPLES]; /* when each was taken (weft_now_ns) */
  unsigned seen[WEFT__MODEL_GAPS];                        /* how many there are */
  /*
   * The estimates of weft__fork_cost and weft__fork_cost_best, kept for
   * MEMO_NS: each is a sort of up to 40 aged samples (an exp2 each), about
   * 0.1 us of a forked call's decision, and aging moves them by 0.1% in a
   * millisecond (a half-life of 0.5 s). A new sample clears them.
   */
  double memo_cost[WEFT__MODEL_GAPS], memo_best[WEFT__MODEL_GAPS];
  int64_t memo_cost_at[WEFT__MODEL_GAPS], memo_best_at[WEFT__MODEL_GAPS]; /* 0: none */
  double stall_ns;  /* what stalled forks cost over their bucket's median, lately (decayed with time) */
  double forks;     /* forks lately, decayed the same way */
  int64_t stall_at; /* when the two were last decayed; 0: never */
} weft__fork_costs;

#define WEFT__MODEL_MEMO_NS 1000000LL

/* A memo of time `at` that still holds at `now`. */
static inline bool weft__model_memo_ok(int64_t at, int64_t now) {
  return at != 0 && now >= at && now - at < WEFT__MODEL_MEMO_NS;
}

/* Keep an estimate (the guess when there is none, v = 0) as the memo of time now; it. */
static inline double weft__model_memo_put(double *slot, int64_t *at, double v, int64_t now) {
  *slot = v > 0 ? v : WEFT__MODEL_FORK_GUESS;
  *at = now;
  return *slot;
}

/* 2^-x for x >= 0, without libm (exact at integers, within 1% between). */
static inline double weft__model_exp2_neg(double x) {
  if (!(x > 0)) return 1;
  if (x >= 60) return 0;
  unsigned k = (unsigned)x;
  double f = x - (double)k;
  double r = 1 - f * (0.6931 - f * (0.2402 - f * 0.0555)); /* 2^-f, f in [0, 1) */
  return r / (double)(1ull << k);
}

/* A sample of `ns` taken `age` ns ago, as it counts now: decayed towards the guess. */
static inline double weft__model_aged(double ns, int64_t age) {
  double w = weft__model_exp2_neg((double)age / (double)WEFT__MODEL_HALF_LIFE_NS);
  return WEFT__MODEL_FORK_GUESS + (ns - WEFT__MODEL_FORK_GUESS) * w;
}

/*
 * Stalls. The median keeps a preempted worker's 1000x sample out of the
 * estimate, but on a shared machine such stalls are a real cost, paid by
 * forks and never by the caller alone: a 2 ms stall once in 5000 forks of
 * 0.6 us adds 0.4 us to each, which is the whole gain of a 100-element map
 * on 2 cores. So each kind of team keeps the average excess of its stalled
 * forks (samples over STALL_FACTOR times their bucket's median, and over it
 * by STALL_MIN_NS at least) over all its forks of the last STALL_TAU_NS or
 * so, and the model adds it to every fork's cost. It ages like a sample
 * (towards 0), so that a team is tried again once the machine is quiet.
 */
#define WEFT__MODEL_STALL_FACTOR 4.0
#define WEFT__MODEL_STALL_MIN_NS 4000.0 /* and at least this much over it (medians near 0 are noise) */
#define WEFT__MODEL_STALL_TAU_NS 250000000.0

static inline double weft__fork_stall(const weft__fork_costs *c, int64_t now) {
  if (!c->stall_at || !(c->forks > 0)) return 0;
  return c->stall_ns / c->forks *
         weft__model_exp2_neg((double)(now - c->stall_at) / (double)WEFT__MODEL_HALF_LIFE_NS);
}

/* One bucket's estimate now (aged samples); 0 when it has none. */
static inline double weft__fork_bucket(const weft__fork_costs *c, unsigned b, int64_t now) {
  unsigned m = c->seen[b];
  if (m == 0) return 0;
  double v[WEFT__MODEL_FORK_SAMPLES];
  for (unsigned i = 0; i < m; i++) {
    /* Insertion sort of at most five. */
    double x = weft__model_aged(c->ns[b][i], now - c->at[b][i]);
    unsigned j = i;
    for (; j > 0 && v[j - 1] > x; j--) v[j] = v[j - 1];
    v[j] = x;
  }
  if (m >= 3) return v[(m - 1) / 2];
  /* Fewer than three: optimistic, never above the guess (a thread's first forks are its slowest). */
  double e = m == 1 ? v[0] / 4 : v[0] / 2;
  return e < WEFT__MODEL_FORK_GUESS ? e : WEFT__MODEL_FORK_GUESS;
}

/*
 * The estimate for gap bucket b at time now: a team cannot be cheaper to wake
 * after a longer sleep, so the largest estimate of the buckets up to b; the
 * guess when none has a sample.
 */
static inline double weft__fork_cost(weft__fork_costs *c, unsigned b, int64_t now) {
  if (b >= WEFT__MODEL_GAPS) b = WEFT__MODEL_GAPS - 1;
  if (weft__model_memo_ok(c->memo_cost_at[b], now)) return c->memo_cost[b];
  double v = 0;
  for (unsigned i = 0; i <= b; i++) {
    double e = weft__fork_bucket(c, i, now);
    if (e > v) v = e;
  }
  return weft__model_memo_put(&c->memo_cost[b], &c->memo_cost_at[b], v, now);
}

/*
 * The best a team has done lately at gap bucket b: the lowest aged sample
 * (with the same monotone fill). What a warm team can do, which is what the
 * ski rental weighs: the median, which fork_cost gives, includes the first
 * forks after a wake-up, which are slower than the steady ones, so a team
 * judged by it alone might never be given the run of forks that shows its
 * steady cost.
 */
static inline double weft__fork_cost_best(weft__fork_costs *c, unsigned b, int64_t now) {
  if (b >= WEFT__MODEL_GAPS) b = WEFT__MODEL_GAPS - 1;
  if (weft__model_memo_ok(c->memo_best_at[b], now)) return c->memo_best[b];
  double v = 0;
  for (unsigned i = 0; i <= b; i++) {
    if (c->seen[i] == 0) continue;
    double lo = weft__fork_bucket(c, i, now); /* optimistic already with fewer than three */
    for (unsigned j = 0; j < c->seen[i]; j++) {
      double x = weft__model_aged(c->ns[i][j], now - c->at[i][j]);
      if (x < lo) lo = x;
    }
    if (lo > v) v = lo;
  }
  return weft__model_memo_put(&c->memo_best[b], &c->memo_best_at[b], v, now);
}

/* Count one fork in the stall average, with what it stalled (0: none). */
static inline void weft__fork_stall_add(weft__fork_costs *c, double excess, int64_t now) {
  if (c->stall_at && now > c->stall_at) {
    double keep = WEFT__MODEL_STALL_TAU_NS / (WEFT__MODEL_STALL_TAU_NS + (double)(now - c->stall_at));
    c->stall_ns *= keep; /* a decay without libm */
    c->forks *= keep;
  }
  c->stall_ns += excess > 0 ? excess : 0;
  c->forks += 1;
  c->stall_at = now;
}

/*
 * A fork too long to be a sample of the fork cost (its wall time less the
 * expected work is mostly how unevenly the workers ran): what the caller
 * waited at the join after it had run out of indices to claim (`wait_ns`)
 * still says whether a worker stalled. With slices and stealing the caller
 * runs out only when every index is claimed, so a healthy join waits for the
 * last small chunks; a worker that the kernel preempted (a busy process on
 * the other core) makes the caller wait for it to come at all, or to finish
 * a chunk it holds: milliseconds, that running on the caller alone would not
 * have cost. Counted as a stall by the same rule as a short fork's sample,
 * against the bucket's median (or with none, against STALL_MIN_NS alone),
 * and only when it is over 1/WAIT_SHARE of a worker's share (`share_ns`):
 * the tail of a long healthy map (a worker finishing its last chunk, 5-20 us
 * at 10^5 elements here) is that map's own imbalance, not a cost that every
 * fork of the thread, short ones included, should be charged with.
 */
#define WEFT__MODEL_WAIT_SHARE 8.0

static inline void weft__fork_wait_record(weft__fork_costs *c, unsigned b, double wait_ns, double share_ns,
                                          int64_t now) {
  if (b >= WEFT__MODEL_GAPS) b = WEFT__MODEL_GAPS - 1;
  double med = c->seen[b] >= 3 ? weft__fork_bucket(c, b, now) : 0;
  double excess = wait_ns > WEFT__MODEL_STALL_FACTOR * med && wait_ns - med > WEFT__MODEL_STALL_MIN_NS &&
                          wait_ns > share_ns / WEFT__MODEL_WAIT_SHARE
                      ? wait_ns - med
                      : 0;
  weft__fork_stall_add(c, excess, now);
}

/* Record a measured fork-join cost (of the full team) at gap bucket b. */
static inline void weft__fork_cost_record(weft__fork_costs *c, unsigned b, double ns, int64_t now) {
  if (b >= WEFT__MODEL_GAPS) b = WEFT__MODEL_GAPS - 1;
  if (!(ns >= 50)) ns = 50; /* below what any fork costs: noise in the subtraction */
  /* A stall is judged against a real median (three samples or more), before this sample joins it. */
  double med = c->seen[b] >= 3 ? weft__fork_bucket(c, b, now) : 0;
  double excess =
      med > 0 && ns > WEFT__MODEL_STALL_FACTOR * med && ns - med > WEFT__MODEL_STALL_MIN_NS ? ns - med : 0;
  weft__fork_stall_add(c, excess, now);
  for (unsigned i = WEFT__MODEL_FORK_SAMPLES - 1; i > 0; i--) {
    c->ns[b][i] = c->ns[b][i - 1];
    c->at[b][i] = c->at[b][i - 1];
  }
  c->ns[b][0] = ns;
  c->at[b][0] = now;
  if (c->seen[b] < WEFT__MODEL_FORK_SAMPLES) c->seen[b]++;
  /* Every bucket from b on depends on this one. */
  for (unsigned i = b; i < WEFT__MODEL_GAPS; i++) c->memo_cost_at[i] = c->memo_best_at[i] = 0;
}

/* The reason in a few words, for EXPLAIN. */
static inline const char *weft__why_text(weft__why w) {
  switch (w) {
  case WEFT__WHY_GRAIN:
    return "explicit grain: the caller decides";
  case WEFT__WHY_ONE:
    return "one element";
  case WEFT__WHY_TEAM_OF_ONE:
    return "a team of one thread";
  case WEFT__WHY_BUSY:
    return "inside a map whose workers are all busy";
  case WEFT__WHY_SMALL:
    return "less work than starting workers costs";
  case WEFT__WHY_COLD:
    return "a warm team would win, but the team is cold";
  case WEFT__WHY_PAYS:
    return "the workers pay for themselves";
  case WEFT__WHY_WARM_UP:
    return "the time lost on the caller paid for waking the team";
  case WEFT__WHY_PROBED_ALL:
    return "timing the first elements ran them all";
  case WEFT__WHY_TRIAL:
    return "trying the team just woken before judging it";
  }
  return "?";
}

#endif /* WEFT_CPU_MODEL_H */
