/*
 * This file contains the CPU parallel-map suite: weft_pmap of the WEFT_CPU
 * kind on the GPars "math" kernel, beside the baselines a C programmer would
 * otherwise write, all in one binary so that ratios come from one run:
 *
 *   Seq            a plain loop on the calling thread
 *   SeqFn          the same loop through the element's function pointer (what
 *                  weft's interface costs by itself; not a competitor)
 *   OmpFor         #pragma omp parallel for schedule(static)
 *   OmpTaskloop    #pragma omp taskloop (the runtime's default grainsize)
 *   Tbb            tbb::parallel_for (auto_partitioner), when TBB was found
 *   WeftPmap       weft_pmap, automatic (guided) grain
 *   WeftPmapGrain  weft_pmap with a fixed grain, swept in powers of 4, to show
 *                  how close the automatic grain comes to the best fixed one
 *
 * at n = 10, 100, 300, 1000, 10^4, 10^5 and 10^6 elements (the grain sweep
 * at 100, 10^4 and 10^6; n = 300, about 7 us of work, is where a map is
 * forked by the site's cached decision and the model's own cost shows).
 * Every implementation computes out[i] = weft_kernel_math(in[i]) with the same compiled, 64-byte-aligned
 * kernel (benchmarks/kernels.c), on the same buffers, so only the way the
 * indices are handed out differs. Items/s (SetItemsProcessed) makes the
 * throughput ratios direct. Outputs are checked against a sequential answer
 * after every case, outside the timed loop.
 *
 * Also: an empty map (n = one element per OpenMP thread, a body that does
 * nothing) against an empty omp parallel for, which is the fixed cost of one
 * call, both with the automatic grain (where the cost model runs it on the
 * caller) and forced onto the team (grain 1: the fork and join themselves);
 * the GPars loop: a map over 100 elements called again and again, reported
 * as ns per call (the write-up's question); and EPCC's overhead method
 * (J. M. Bull, "Measuring synchronisation and scheduling overheads in
 * OpenMP", EWOMP 1999, and the EPCC OpenMP micro-benchmark suite): the
 * construct run around a delay of about 0.1 us per thread, minus the delay
 * alone, so that weft's per-call overhead is in the units of the published
 * OpenMP figures (counter overhead_ns).
 *
 * Run with --benchmark_repetitions=5 --benchmark_enable_random_interleaving
 * (scripts/bench.sh does): the repetitions of different cases are then
 * interleaved, so a slow second of a shared machine spreads over all of
 * them; compare medians.
 */
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>

#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef WEFT_BENCH_HAVE_TBB
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#endif

#include "kernels.h"
#include "stats.h"
#include "weft.h"

namespace {

/* --- data: one pair of 64-byte-aligned buffers per n, with its answer ------- */

struct Data {
  size_t n;
  int64_t *in;
  int64_t *out;
  int64_t *want;
};

void *alloc64(size_t n) {
  size_t bytes = (n * sizeof(int64_t) + 63) / 64 * 64;
  void *p = std::aligned_alloc(64, bytes ? bytes : 64);
  if (!p) {
    std::fprintf(stderr, "bm_pmap: out of memory\n");
    std::abort();
  }
  return p;
}

Data &data_for(size_t n) {
  static std::map<size_t, Data> cache;
  auto it = cache.find(n);
  if (it != cache.end()) return it->second;
  Data d{n, static_cast<int64_t *>(alloc64(n)), static_cast<int64_t *>(alloc64(n)),
         static_cast<int64_t *>(alloc64(n))};
  weft_kernel_math_input(d.in, n, 42);
  for (size_t i = 0; i < n; i++) d.want[i] = weft_kernel_math(d.in[i]);
  return cache.emplace(n, d).first->second;
}

/* Clear out before a case, check it after: a wrong answer fails the case. */
void prepare(Data &d) { std::memset(d.out, 0, d.n * sizeof(int64_t)); }

void check(benchmark::State &state, const Data &d) {
  if (std::memcmp(d.out, d.want, d.n * sizeof(int64_t)) != 0) state.SkipWithError("wrong answer");
}

void finish(benchmark::State &state, const Data &d) {
  check(state, d);
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(d.n));
  state.counters["n"] = static_cast<double>(d.n);
}

/* The element function every weft case calls: the same kernel as everyone. */
int math_elem(void *ctx, size_t i) {
  Data *d = static_cast<Data *>(ctx);
  d->out[i] = weft_kernel_math(d->in[i]);
  return 0;
}

int empty_elem(void *ctx, size_t i) {
  (void)i;
  weft_kernel_sink(ctx);
  return 0;
}

unsigned omp_threads() {
#ifdef _OPENMP
  return static_cast<unsigned>(omp_get_max_threads());
#else
  return 1;
#endif
}

/* --- the math kernel at n = 100, 10^4, 10^6 -------------------------------- */

void BM_Seq(benchmark::State &state) {
  Data &d = data_for(static_cast<size_t>(state.range(0)));
  prepare(d);
  for (auto _ : state) {
    for (size_t i = 0; i < d.n; i++) d.out[i] = weft_kernel_math(d.in[i]);
    benchmark::ClobberMemory();
  }
  finish(state, d);
}

/*
 * The sequential loop through the element function's pointer, as weft calls
 * it: what the weft_index_fn interface costs by itself (an indirect call per
 * element), before any decision or thread. Not a competitor: the part of
 * weft's time at small n that no scheduler can remove.
 */
weft_index_fn volatile seq_fn_ptr = math_elem;

void BM_SeqFn(benchmark::State &state) {
  Data &d = data_for(static_cast<size_t>(state.range(0)));
  prepare(d);
  for (auto _ : state) {
    weft_index_fn fn = seq_fn_ptr;
    int err = 0;
    for (size_t i = 0; i < d.n; i++) err |= fn(&d, i);
    benchmark::DoNotOptimize(err);
  }
  finish(state, d);
}

/* A weft map of the math kernel at n = range(0), timed call by call; call(d, opts) makes one map. */
template <typename Call> void weft_map_case(benchmark::State &state, size_t grain, Call call) {
  Data &d = data_for(static_cast<size_t>(state.range(0)));
  prepare(d);
  weft_pmap_opts o = WEFT_PMAP_OPTS_INIT; /* grain 0: automatic */
  o.grain = grain;
  for (auto _ : state) {
    int rc = call(d, o);
    if (rc != 0) {
      state.SkipWithError(weft_strerror(rc));
      break;
    }
  }
  finish(state, d);
}

void BM_WeftPmap(benchmark::State &state) {
  weft_map_case(state, 0, [](Data &d, const weft_pmap_opts &o) { return weft_pmap(d.n, math_elem, &d, &o); });
}

/*
 * The same map as a range map: weft hands out sub-ranges and the loop over
 * each is the caller's own, with the kernel called directly as the
 * sequential loop, omp for and TBB call it. What weft's scheduling costs
 * with no indirect call per element (weft_pmap's interface, BM_SeqFn).
 */
int math_range(void *ctx, size_t lo, size_t hi) {
  Data *d = static_cast<Data *>(ctx);
  int64_t *in = d->in, *out = d->out;
  for (size_t i = lo; i < hi; i++) out[i] = weft_kernel_math(in[i]);
  return 0;
}

void BM_WeftPmapRange(benchmark::State &state) {
  weft_map_case(state, 0,
                [](Data &d, const weft_pmap_opts &o) { return weft_pmap_range(d.n, math_range, &d, &o); });
}

void BM_WeftPmapGrain(benchmark::State &state) {
  size_t grain = static_cast<size_t>(state.range(1));
  weft_map_case(state, grain,
                [](Data &d, const weft_pmap_opts &o) { return weft_pmap(d.n, math_elem, &d, &o); });
  state.counters["grain"] = static_cast<double>(grain);
}

#ifdef _OPENMP
void BM_OmpFor(benchmark::State &state) {
  Data &d = data_for(static_cast<size_t>(state.range(0)));
  prepare(d);
  const long n = static_cast<long>(d.n);
  int64_t *in = d.in, *out = d.out;
  for (auto _ : state) {
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) out[i] = weft_kernel_math(in[i]);
  }
  finish(state, d);
}

/* omp for through the element function's pointer: weft_pmap's interface cost, as BM_SeqFn's. */
void BM_OmpForFn(benchmark::State &state) {
  Data &d = data_for(static_cast<size_t>(state.range(0)));
  prepare(d);
  const long n = static_cast<long>(d.n);
  for (auto _ : state) {
    weft_index_fn fn = seq_fn_ptr;
    int err = 0;
#pragma omp parallel for schedule(static) reduction(| : err)
    for (long i = 0; i < n; i++) err |= fn(&d, static_cast<size_t>(i));
    benchmark::DoNotOptimize(err);
  }
  finish(state, d);
}

void BM_OmpTaskloop(benchmark::State &state) {
  Data &d = data_for(static_cast<size_t>(state.range(0)));
  prepare(d);
  /* size_t: clang's taskloop compares the bound as unsigned (-Wsign-compare with long). */
  const size_t n = d.n;
  int64_t *in = d.in, *out = d.out;
  for (auto _ : state) {
#pragma omp parallel
#pragma omp single
#pragma omp taskloop
    for (size_t i = 0; i < n; i++) out[i] = weft_kernel_math(in[i]);
  }
  finish(state, d);
}
#endif

#ifdef WEFT_BENCH_HAVE_TBB
void BM_Tbb(benchmark::State &state) {
  Data &d = data_for(static_cast<size_t>(state.range(0)));
  prepare(d);
  int64_t *in = d.in, *out = d.out;
  for (auto _ : state) {
    tbb::parallel_for(tbb::blocked_range<size_t>(0, d.n), [=](const tbb::blocked_range<size_t> &r) {
      for (size_t i = r.begin(); i < r.end(); i++) out[i] = weft_kernel_math(in[i]);
    });
  }
  finish(state, d);
}
#endif

const int64_t kSizes[] = {10, 100, 300, 1000, 10000, 100000, 1000000};
const int64_t kGrainSizes[] = {100, 10000, 1000000};

void sizes(benchmark::internal::Benchmark *b) {
  for (int64_t n : kSizes) b->Arg(n);
  b->ArgName("n")->UseRealTime()->ComputeStatistics("min", bench_min);
}

/* Fixed grains 1, 4, 16, ... up to n/2 (a grain of n or more is one worker). */
void grains(benchmark::internal::Benchmark *b) {
  for (int64_t n : kGrainSizes)
    for (int64_t g = 1; g <= n / 2; g *= 4) b->Args({n, g});
  b->ArgNames({"n", "grain"})->UseRealTime();
}

BENCHMARK(BM_Seq)->Apply(sizes);
BENCHMARK(BM_SeqFn)->Apply(sizes);
#ifdef _OPENMP
BENCHMARK(BM_OmpFor)->Apply(sizes);
BENCHMARK(BM_OmpForFn)->Apply(sizes);
BENCHMARK(BM_OmpTaskloop)->Apply(sizes);
#endif
#ifdef WEFT_BENCH_HAVE_TBB
BENCHMARK(BM_Tbb)->Apply(sizes);
#endif
BENCHMARK(BM_WeftPmap)->Apply(sizes);
BENCHMARK(BM_WeftPmapRange)->Apply(sizes);
BENCHMARK(BM_WeftPmapGrain)->Apply(grains);

/* --- an empty call: the fixed cost of fork and join ------------------------ */

void BM_EmptyWeftPmap(benchmark::State &state) {
  size_t n = omp_threads();
  weft_pmap_opts o = WEFT_PMAP_OPTS_INIT;
  int sink = 0;
  for (auto _ : state) {
    int rc = weft_pmap(n, empty_elem, &sink, &o);
    if (rc != 0) {
      state.SkipWithError(weft_strerror(rc));
      break;
    }
  }
  state.counters["n"] = static_cast<double>(n);
}
BENCHMARK(BM_EmptyWeftPmap)->UseRealTime();

/* The same call forced onto the team (an explicit grain: the model is not asked): fork and join. */
void BM_EmptyWeftPmapTeam(benchmark::State &state) {
  size_t n = omp_threads();
  weft_pmap_opts o = WEFT_PMAP_OPTS_INIT;
  o.grain = 1;
  int sink = 0;
  for (auto _ : state) {
    int rc = weft_pmap(n, empty_elem, &sink, &o);
    if (rc != 0) {
      state.SkipWithError(weft_strerror(rc));
      break;
    }
  }
  state.counters["n"] = static_cast<double>(n);
}
BENCHMARK(BM_EmptyWeftPmapTeam)->UseRealTime();

#ifdef _OPENMP
void BM_EmptyOmpFor(benchmark::State &state) {
  const long n = static_cast<long>(omp_threads());
  int sink = 0;
  for (auto _ : state) {
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) weft_kernel_sink(&sink);
  }
  state.counters["n"] = static_cast<double>(n);
}
BENCHMARK(BM_EmptyOmpFor)->UseRealTime();
#endif

/* --- the GPars loop: a map over 100 elements, called again and again -------- */

/*
 * Each benchmark iteration is a batch of kBatch consecutive calls, as in the
 * write-up's loop of 5000 calls (a runtime's pool stays warm between calls),
 * and the counter ns_per_call is the wall time of all batches over all calls.
 */
constexpr int kBatch = 100;
constexpr size_t kGparsN = 100;

template <typename Call> void gpars_loop(benchmark::State &state, Call call) {
  Data &d = data_for(kGparsN);
  prepare(d);
  int64_t calls = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    for (int k = 0; k < kBatch; k++) {
      if (!call(d)) {
        state.SkipWithError("weft_pmap failed");
        return;
      }
    }
    calls += kBatch;
  }
  auto ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
  check(state, d);
  state.SetItemsProcessed(calls * static_cast<int64_t>(d.n));
  state.counters["ns_per_call"] = calls ? ns / static_cast<double>(calls) : 0.0;
  state.counters["n"] = static_cast<double>(d.n);
}

void BM_GparsLoop_Seq(benchmark::State &state) {
  gpars_loop(state, [](Data &d) {
    for (size_t i = 0; i < d.n; i++) d.out[i] = weft_kernel_math(d.in[i]);
    benchmark::ClobberMemory();
    return true;
  });
}

/*
 * The same loop calling the element through a function pointer, as weft
 * does (and as weft-bench's sequential backend does): what the weft_index_fn
 * interface itself costs, before any decision or thread.
 */
void BM_GparsLoop_SeqFn(benchmark::State &state) {
  gpars_loop(state, [](Data &d) {
    weft_index_fn fn = seq_fn_ptr;
    int err = 0;
    for (size_t i = 0; i < d.n; i++) err |= fn(&d, i);
    return err == 0;
  });
}

void BM_GparsLoop_Weft(benchmark::State &state) {
  gpars_loop(state, [](Data &d) {
    weft_pmap_opts o = WEFT_PMAP_OPTS_INIT;
    return weft_pmap(d.n, math_elem, &d, &o) == 0;
  });
}

BENCHMARK(BM_GparsLoop_Seq)->UseRealTime();
BENCHMARK(BM_GparsLoop_SeqFn)->UseRealTime();
BENCHMARK(BM_GparsLoop_Weft)->UseRealTime();

#ifdef _OPENMP
void BM_GparsLoop_OmpFor(benchmark::State &state) {
  gpars_loop(state, [](Data &d) {
    const long n = static_cast<long>(d.n);
    int64_t *in = d.in, *out = d.out;
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) out[i] = weft_kernel_math(in[i]);
    return true;
  });
}
BENCHMARK(BM_GparsLoop_OmpFor)->UseRealTime();
#endif

#ifdef _OPENMP
void BM_GparsLoop_Taskloop(benchmark::State &state) {
  gpars_loop(state, [](Data &d) {
    const size_t n = d.n;
    int64_t *in = d.in, *out = d.out;
#pragma omp parallel
#pragma omp single
#pragma omp taskloop
    for (size_t i = 0; i < n; i++) out[i] = weft_kernel_math(in[i]);
    return true;
  });
}
BENCHMARK(BM_GparsLoop_Taskloop)->UseRealTime();
#endif

/* --- EPCC's overhead method ------------------------------------------------------ */

/*
 * EPCC's delay: a loop of delay_reps additions, calibrated once to about
 * 0.1 us (the suite's default delay time). Each case runs its construct
 * around the delay, then (outside the timed loop, right after it, so in the
 * same conditions) the delays alone, the same number of times on one
 * thread: overhead_ns = (construct time - delay time) / repetitions, as
 * EPCC's syncbench and taskbench compute it.
 */
long delay_reps;

__attribute__((noinline)) void delay(long reps) {
  volatile long a = 0;
  for (long i = 0; i < reps; i++) a = a + i;
  if (a < 0) std::printf("%ld\n", static_cast<long>(a));
}

/* ns per delay(reps): the fastest of 9 runs of 1000 (a shared machine only ever slows a run down). */
double delay_cost(long reps) {
  double best = 1e30;
  for (int t = 0; t < 9; t++) {
    auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < 1000; k++) delay(reps);
    double ns =
        std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / 1000;
    if (ns < best) best = ns;
  }
  return best;
}

long calibrated_delay() {
  if (delay_reps) return delay_reps;
  long reps = 16;
  double ns;
  while ((ns = delay_cost(reps)) < 100 && reps < (1L << 24)) reps *= 2;
  delay_reps = static_cast<long>(static_cast<double>(reps) * 100 / ns);
  if (delay_reps < 1) delay_reps = 1;
  return delay_reps;
}

/* Time `reps` delays on this thread (the reference). */
double delays_ns(int64_t reps) {
  long r = calibrated_delay();
  auto t0 = std::chrono::steady_clock::now();
  for (int64_t k = 0; k < reps; k++) delay(r);
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
}

/* Runs body() once per iteration, each body() doing `per_iter` delays on each thread at best. */
template <typename Body> void epcc(benchmark::State &state, int64_t per_iter, Body body) {
  calibrated_delay();
  int64_t iters = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    if (!body()) {
      state.SkipWithError("weft call failed");
      return;
    }
    iters++;
  }
  double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
  double ref = delays_ns(iters * per_iter);
  double reps = static_cast<double>(iters * per_iter);
  state.counters["overhead_ns"] = reps > 0 ? (ns - ref) / reps : 0;
  state.counters["delay_ns"] = reps > 0 ? ref / reps : 0;
}

int delay_elem(void *ctx, size_t i) {
  (void)ctx;
  (void)i;
  delay(delay_reps);
  return 0;
}

void *delay_task(void *arg) {
  delay(delay_reps);
  return arg;
}

#ifdef _OPENMP
/* EPCC PARALLEL FOR: one iteration of delay per thread, per construct. */
void BM_Epcc_ParallelFor_Omp(benchmark::State &state) {
  const int nt = static_cast<int>(omp_threads());
  epcc(state, 1, [nt] {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < nt; i++) delay(delay_reps);
    return true;
  });
}
BENCHMARK(BM_Epcc_ParallelFor_Omp)->UseRealTime();
#endif

/* The same with weft_pmap forced onto the team (grain 1): weft's fork and join. */
void BM_Epcc_ParallelFor_Weft(benchmark::State &state) {
  const size_t nt = omp_threads();
  epcc(state, 1, [nt] {
    weft_pmap_opts o = WEFT_PMAP_OPTS_INIT;
    o.grain = 1;
    return weft_pmap(nt, delay_elem, nullptr, &o) == 0;
  });
}
BENCHMARK(BM_Epcc_ParallelFor_Weft)->UseRealTime();

/* And with the automatic grain: what the cost model makes of 0.1 us per element. */
void BM_Epcc_ParallelFor_WeftAuto(benchmark::State &state) {
  const size_t nt = omp_threads();
  epcc(state, 1, [nt] { return weft_pmap(nt, delay_elem, nullptr, nullptr) == 0; });
}
BENCHMARK(BM_Epcc_ParallelFor_WeftAuto)->UseRealTime();

constexpr int kTaskReps = 64; /* tasks per thread per construct (EPCC: innerreps) */

#ifdef _OPENMP
/* EPCC PARALLEL TASK: every thread of a region creates kTaskReps tasks of one delay. */
void BM_Epcc_Task_Omp(benchmark::State &state) {
  epcc(state, kTaskReps, [] {
#pragma omp parallel
    {
      for (int j = 0; j < kTaskReps; j++) {
#pragma omp task
        delay(delay_reps);
      }
    }
    return true;
  });
}
BENCHMARK(BM_Epcc_Task_Omp)->UseRealTime();

/* EPCC MASTER TASK: one thread creates all the tasks, the team runs them. */
void BM_Epcc_MasterTask_Omp(benchmark::State &state) {
  const int nt = static_cast<int>(omp_threads());
  epcc(state, kTaskReps, [nt] {
#pragma omp parallel
    {
#pragma omp master
      for (int j = 0; j < kTaskReps * nt; j++) {
#pragma omp task
        delay(delay_reps);
      }
    }
    return true;
  });
}
BENCHMARK(BM_Epcc_MasterTask_Omp)->UseRealTime();

/*
 * weft's counterpart of a task made inside a region: every thread of a region
 * calls weft_pmap over one delay per thread (grain 1, so onto the team: one
 * task per other thread), kTaskReps times; per map.
 */
void BM_Epcc_TaskMap_Weft(benchmark::State &state) {
  const size_t nt = omp_threads();
  epcc(state, kTaskReps, [nt] {
    int bad = 0;
#pragma omp parallel reduction(+ : bad)
    {
      weft_pmap_opts o = WEFT_PMAP_OPTS_INIT;
      o.grain = 1;
      for (int j = 0; j < kTaskReps; j++) bad += weft_pmap(nt, delay_elem, nullptr, &o) != 0;
    }
    return bad == 0;
  });
}
BENCHMARK(BM_Epcc_TaskMap_Weft)->UseRealTime();
#endif

/* weft's MASTER TASK: the main thread starts kTaskReps CPU futures per thread, then gets them all. */
void BM_Epcc_MasterTask_WeftFuture(benchmark::State &state) {
  const size_t nt = omp_threads();
  const size_t m = kTaskReps * nt;
  std::unique_ptr<weft_future *[]> fs(new weft_future *[m]);
  epcc(state, kTaskReps, [&fs, m] {
    for (size_t j = 0; j < m; j++)
      if (weft_future_start(WEFT_CPU, delay_task, nullptr, &fs[j]) != 0) return false;
    bool ok = true;
    for (size_t j = 0; j < m; j++) {
      ok = ok && weft_future_get(fs[j], -1, nullptr) == 0;
      weft_future_free(fs[j]);
    }
    return ok;
  });
}
BENCHMARK(BM_Epcc_MasterTask_WeftFuture)->UseRealTime();

} // namespace

BENCHMARK_MAIN();
