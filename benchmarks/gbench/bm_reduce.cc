/*
 * This file contains the range and reduction suite: elements of a few
 * nanoseconds, where a call per index costs as much as the element. Two
 * kernels of HPCCG (Mantevo's conjugate-gradient mini-app), each beside the
 * baselines a C programmer would write, in one binary so that ratios come
 * from one run:
 *
 *   Dot_Seq          weft_kernel_dot(x, y, 0, n) on the calling thread
 *   Dot_OmpFor       #pragma omp parallel for reduction(+:s) schedule(static),
 *                    one block of the same kernel per thread
 *   Dot_OmpForInline the same with the loop written inline (what HPCCG does)
 *   Dot_WeftReduce   weft_reduce, automatic grain (deterministic)
 *   Dot_Tbb          tbb::parallel_reduce (auto partitioner; not deterministic)
 *   Dot_TbbDet       tbb::parallel_deterministic_reduce, grain as weft's
 *                    automatic one (both when TBB was found)
 *   Waxpby_Seq       weft_kernel_waxpby(..., 0, n)
 *   Waxpby_OmpFor    #pragma omp parallel for schedule(static), a block each
 *   Waxpby_OmpForInline  the loop inline
 *   Waxpby_WeftRange weft_pmap_range, automatic grain
 *   Waxpby_WeftPmap  weft_pmap, one call per index (what ranges save)
 *   Waxpby_Tbb       tbb::parallel_for over a blocked_range
 *   Dot_Paired, Waxpby_Paired  the sequential kernel, both parallel fors
 *                    and weft in turn, call by call: issue 28's target 3
 *                    as paired ratios (at n = 1000 and 10^7 only)
 *
 * at n = 1000, 10^4, 10^5, 10^6 and 10^7 doubles. The kernels are compiled
 * once (benchmarks/kernels.c, 64-byte aligned) and called by every
 * implementation but the inline ones; the buffers are 64-byte aligned and
 * shared. Items/s make the ratios direct. A dot product's answer is checked
 * against the sequential one (to a relative 1e-9: the orders of summation
 * differ), waxpby's exactly.
 *
 * Run with --benchmark_repetitions=5 --benchmark_enable_random_interleaving
 * and compare medians (docs/benchmarks.md).
 */
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef WEFT_BENCH_HAVE_TBB
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_reduce.h>
#endif

#include "kernels.h"
#include "stats.h"
#include "weft.h"

namespace {

struct Vecs {
  size_t n;
  double *x, *y, *w;
  double dot; /* the sequential answer */
};

double *alloc64(size_t n) {
  size_t bytes = (n * sizeof(double) + 63) / 64 * 64;
  void *p = std::aligned_alloc(64, bytes ? bytes : 64);
  if (!p) {
    std::fprintf(stderr, "bm_reduce: out of memory\n");
    std::abort();
  }
  return static_cast<double *>(p);
}

Vecs &vecs_for(size_t n) {
  static std::map<size_t, Vecs> all;
  auto it = all.find(n);
  if (it != all.end()) return it->second;
  Vecs v{n, alloc64(n), alloc64(n), alloc64(n), 0.0};
  for (size_t i = 0; i < n; i++) {
    v.x[i] = 1.0 + static_cast<double>(i % 1000) * 1e-3;
    v.y[i] = 2.0 - static_cast<double>(i % 777) * 1e-3;
    v.w[i] = 0.0;
  }
  v.dot = weft_kernel_dot(v.x, v.y, 0, n);
  return all.emplace(n, v).first->second;
}

const double kAlpha = 1.5, kBeta = -0.25;

void dot_done(benchmark::State &state, const Vecs &v, double got) {
  if (std::fabs(got - v.dot) > 1e-9 * std::fabs(v.dot)) state.SkipWithError("wrong dot product");
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(v.n));
  state.counters["n"] = static_cast<double>(v.n);
}

void waxpby_done(benchmark::State &state, const Vecs &v) {
  for (size_t i = 0; i < v.n; i++)
    if (v.w[i] != kAlpha * v.x[i] + kBeta * v.y[i]) {
      state.SkipWithError("wrong waxpby");
      break;
    }
  std::memset(v.w, 0, v.n * sizeof(double));
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(v.n));
  state.counters["n"] = static_cast<double>(v.n);
}

/* Thread t's block of [0, n) in a team of k, as schedule(static) cuts it. */
void block(size_t n, size_t k, size_t t, size_t *lo, size_t *hi) {
  size_t q = n / k, r = n % k;
  *lo = t * q + (t < r ? t : r);
  *hi = *lo + q + (t < r);
}

/* --- dot product ------------------------------------------------------------------- */

void BM_Dot_Seq(benchmark::State &state) {
  Vecs &v = vecs_for(static_cast<size_t>(state.range(0)));
  double s = 0;
  for (auto _ : state) {
    s = weft_kernel_dot(v.x, v.y, 0, v.n);
    benchmark::DoNotOptimize(s);
  }
  dot_done(state, v, s);
}

#ifdef _OPENMP
/*
 * The reductions live in functions of their own: gcc 12 returns garbage
 * from an `omp parallel for reduction` written directly inside Google
 * Benchmark's `for (auto _ : state)` loop (a minimal program reproduces it).
 */
__attribute__((noinline)) double omp_dot_blocks(const double *x, const double *y, size_t n, long k) {
  double sum = 0;
#pragma omp parallel for reduction(+ : sum) schedule(static)
  for (long t = 0; t < k; t++) {
    size_t lo, hi;
    block(n, static_cast<size_t>(k), static_cast<size_t>(t), &lo, &hi);
    sum += weft_kernel_dot(x, y, lo, hi);
  }
  return sum;
}

__attribute__((noinline)) double omp_dot_inline(const double *x, const double *y, long n) {
  double sum = 0;
#pragma omp parallel for reduction(+ : sum) schedule(static)
  for (long i = 0; i < n; i++) sum += x[i] * y[i];
  return sum;
}

void BM_Dot_OmpFor(benchmark::State &state) {
  Vecs &v = vecs_for(static_cast<size_t>(state.range(0)));
  double s = 0;
  const long k = omp_get_max_threads();
  const double *x = v.x, *y = v.y;
  const size_t n = v.n;
  for (auto _ : state) {
    s = omp_dot_blocks(x, y, n, k);
    benchmark::DoNotOptimize(s);
  }
  dot_done(state, v, s);
}

void BM_Dot_OmpForInline(benchmark::State &state) {
  Vecs &v = vecs_for(static_cast<size_t>(state.range(0)));
  const double *x = v.x, *y = v.y;
  const long n = static_cast<long>(v.n);
  double s = 0;
  for (auto _ : state) {
    s = omp_dot_inline(x, y, n);
    benchmark::DoNotOptimize(s);
  }
  dot_done(state, v, s);
}
#endif

struct DotCtx {
  const double *x, *y;
};

void dot_leaf(void *ctx, size_t lo, size_t hi, void *acc) {
  const DotCtx *c = static_cast<const DotCtx *>(ctx);
  *static_cast<double *>(acc) += weft_kernel_dot(c->x, c->y, lo, hi);
}

void dot_combine(void *ctx, void *acc, const void *other) {
  (void)ctx;
  *static_cast<double *>(acc) += *static_cast<const double *>(other);
}

void BM_Dot_WeftReduce(benchmark::State &state) {
  Vecs &v = vecs_for(static_cast<size_t>(state.range(0)));
  DotCtx c{v.x, v.y};
  const double zero = 0.0;
  double s = 0;
  for (auto _ : state) {
    int rc = weft_reduce(v.n, dot_leaf, dot_combine, &c, &zero, &s, sizeof s, nullptr);
    if (rc != 0) {
      state.SkipWithError(weft_strerror(rc));
      break;
    }
    benchmark::DoNotOptimize(s);
  }
  dot_done(state, v, s);
}

#ifdef WEFT_BENCH_HAVE_TBB
/* In functions of their own, as the OpenMP ones (the same gcc 12 trouble inside the state loop). */
__attribute__((noinline)) double tbb_dot(const double *x, const double *y, size_t n) {
  return tbb::parallel_reduce(
      tbb::blocked_range<size_t>(0, n), 0.0,
      [=](const tbb::blocked_range<size_t> &r, double acc) {
        return acc + weft_kernel_dot(x, y, r.begin(), r.end());
      },
      [](double a, double b) { return a + b; });
}

__attribute__((noinline)) double tbb_dot_det(const double *x, const double *y, size_t n, size_t g) {
  return tbb::parallel_deterministic_reduce(
      tbb::blocked_range<size_t>(0, n, g), 0.0,
      [=](const tbb::blocked_range<size_t> &r, double acc) {
        return acc + weft_kernel_dot(x, y, r.begin(), r.end());
      },
      [](double a, double b) { return a + b; });
}

void BM_Dot_Tbb(benchmark::State &state) {
  Vecs &v = vecs_for(static_cast<size_t>(state.range(0)));
  double s = 0;
  for (auto _ : state) {
    s = tbb_dot(v.x, v.y, v.n);
    benchmark::DoNotOptimize(s);
  }
  dot_done(state, v, s);
}

void BM_Dot_TbbDet(benchmark::State &state) {
  Vecs &v = vecs_for(static_cast<size_t>(state.range(0)));
  /* The leaves weft's automatic grain makes: max(1024, ceil(n / 1024)). */
  size_t g = v.n / WEFT_REDUCE_LEAVES + (v.n % WEFT_REDUCE_LEAVES != 0);
  if (g < WEFT_REDUCE_GRAIN_MIN) g = WEFT_REDUCE_GRAIN_MIN;
  double s = 0;
  for (auto _ : state) {
    s = tbb_dot_det(v.x, v.y, v.n, g);
    benchmark::DoNotOptimize(s);
  }
  dot_done(state, v, s);
}
#endif

/* --- waxpby -------------------------------------------------------------------------- */

void BM_Waxpby_Seq(benchmark::State &state) {
  Vecs &v = vecs_for(static_cast<size_t>(state.range(0)));
  for (auto _ : state) {
    weft_kernel_waxpby(kAlpha, v.x, kBeta, v.y, v.w, 0, v.n);
    benchmark::ClobberMemory();
  }
  waxpby_done(state, v);
}

#ifdef _OPENMP
/* In functions of their own, as the dot product's (and called by Waxpby_Paired too). */
__attribute__((noinline)) double omp_waxpby_blocks(const Vecs &v) {
  const long k = omp_get_max_threads();
#pragma omp parallel for schedule(static)
  for (long t = 0; t < k; t++) {
    size_t lo, hi;
    block(v.n, static_cast<size_t>(k), static_cast<size_t>(t), &lo, &hi);
    weft_kernel_waxpby(kAlpha, v.x, kBeta, v.y, v.w, lo, hi);
  }
  return 0;
}

__attribute__((noinline)) double omp_waxpby_inline(const Vecs &v) {
  const double *x = v.x, *y = v.y;
  double *w = v.w;
  const long n = static_cast<long>(v.n);
#pragma omp parallel for schedule(static)
  for (long i = 0; i < n; i++) w[i] = kAlpha * x[i] + kBeta * y[i];
  return 0;
}

void BM_Waxpby_OmpFor(benchmark::State &state) {
  Vecs &v = vecs_for(static_cast<size_t>(state.range(0)));
  for (auto _ : state) {
    omp_waxpby_blocks(v);
    benchmark::ClobberMemory();
  }
  waxpby_done(state, v);
}

void BM_Waxpby_OmpForInline(benchmark::State &state) {
  Vecs &v = vecs_for(static_cast<size_t>(state.range(0)));
  for (auto _ : state) {
    omp_waxpby_inline(v);
    benchmark::ClobberMemory();
  }
  waxpby_done(state, v);
}
#endif

int waxpby_range(void *ctx, size_t lo, size_t hi) {
  Vecs *v = static_cast<Vecs *>(ctx);
  weft_kernel_waxpby(kAlpha, v->x, kBeta, v->y, v->w, lo, hi);
  return 0;
}

int waxpby_elem(void *ctx, size_t i) {
  Vecs *v = static_cast<Vecs *>(ctx);
  weft_kernel_waxpby(kAlpha, v->x, kBeta, v->y, v->w, i, i + 1);
  return 0;
}

void BM_Waxpby_WeftRange(benchmark::State &state) {
  Vecs &v = vecs_for(static_cast<size_t>(state.range(0)));
  for (auto _ : state) {
    int rc = weft_pmap_range(v.n, waxpby_range, &v, nullptr);
    if (rc != 0) {
      state.SkipWithError(weft_strerror(rc));
      break;
    }
    benchmark::ClobberMemory();
  }
  waxpby_done(state, v);
}

void BM_Waxpby_WeftPmap(benchmark::State &state) {
  Vecs &v = vecs_for(static_cast<size_t>(state.range(0)));
  for (auto _ : state) {
    int rc = weft_pmap(v.n, waxpby_elem, &v, nullptr);
    if (rc != 0) {
      state.SkipWithError(weft_strerror(rc));
      break;
    }
    benchmark::ClobberMemory();
  }
  waxpby_done(state, v);
}

#ifdef WEFT_BENCH_HAVE_TBB
void BM_Waxpby_Tbb(benchmark::State &state) {
  Vecs &v = vecs_for(static_cast<size_t>(state.range(0)));
  const double *x = v.x, *y = v.y;
  double *w = v.w;
  for (auto _ : state) {
    tbb::parallel_for(tbb::blocked_range<size_t>(0, v.n), [=](const tbb::blocked_range<size_t> &r) {
      weft_kernel_waxpby(kAlpha, x, kBeta, y, w, r.begin(), r.end());
    });
    benchmark::ClobberMemory();
  }
  waxpby_done(state, v);
}
#endif

/* --- target 3's ratios, call by call ------------------------------------------------ */

#ifdef _OPENMP
/*
 * Dot_Paired and Waxpby_Paired run the sequential kernel, omp parallel for
 * (a block of the kernel per thread, and the loop inline) and weft in turn
 * inside one timed loop: a round times a batch of calls of each, in an
 * order that rotates every round (batches of about 200,000 indices, so
 * that a batch is long enough to time and a clock read is a small part of
 * it). On a machine whose second vCPU comes and goes, separate repetitions
 * of separate cases compare different seconds; rounds a few milliseconds
 * apart compare the same ones. Counters: each implementation's median ns a
 * call over the rounds, and the medians over the rounds of the paired
 * ratios, the better parallel for ÷ weft (`par_ratio`) and the best of
 * the three peers ÷ weft (`best_ratio`): above 1, weft was faster.
 */
enum { kPeerSeq, kPeerOmp, kPeerInline, kWeft, kImpls };
const char *const kImplName[kImpls] = {"seq_ns", "omp_ns", "inline_ns", "weft_ns"};

double dot_call(int impl, Vecs &v, int *err) {
  DotCtx c{v.x, v.y};
  const double zero = 0.0;
  double s = 0;
  switch (impl) {
  case kPeerSeq:
    return weft_kernel_dot(v.x, v.y, 0, v.n);
  case kPeerOmp:
    return omp_dot_blocks(v.x, v.y, v.n, omp_get_max_threads());
  case kPeerInline:
    return omp_dot_inline(v.x, v.y, static_cast<long>(v.n));
  default:
    *err = weft_reduce(v.n, dot_leaf, dot_combine, &c, &zero, &s, sizeof s, nullptr);
    return s;
  }
}

double waxpby_call(int impl, Vecs &v, int *err) {
  switch (impl) {
  case kPeerSeq:
    weft_kernel_waxpby(kAlpha, v.x, kBeta, v.y, v.w, 0, v.n);
    return 0;
  case kPeerOmp:
    return omp_waxpby_blocks(v);
  case kPeerInline:
    return omp_waxpby_inline(v);
  default:
    *err = weft_pmap_range(v.n, waxpby_range, &v, nullptr);
    return 0;
  }
}

/* The rounds; `call` makes one call of an implementation and returns its result (a dot product, or 0). */
void paired(benchmark::State &state, Vecs &v, double (*call)(int, Vecs &, int *), bool is_dot) {
  const size_t batch = v.n >= 200000 ? 1 : 200000 / v.n;
  std::vector<double> t[kImpls], par, best;
  double last[kImpls] = {0, 0, 0, 0};
  int err = 0;
  size_t round = 0;
  for (auto _ : state) {
    double ns[kImpls];
    for (int j = 0; j < kImpls; j++) {
      int impl = static_cast<int>((round + static_cast<size_t>(j)) % kImpls);
      auto t0 = std::chrono::steady_clock::now();
      for (size_t b = 0; b < batch; b++) {
        last[impl] = call(impl, v, &err);
        benchmark::DoNotOptimize(last[impl]);
        benchmark::ClobberMemory();
      }
      auto t1 = std::chrono::steady_clock::now();
      ns[impl] = std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(batch);
    }
    if (err != 0) {
      state.SkipWithError(weft_strerror(err));
      return;
    }
    for (int i = 0; i < kImpls; i++) t[i].push_back(ns[i]);
    double p = std::min(ns[kPeerOmp], ns[kPeerInline]);
    par.push_back(p / ns[kWeft]);
    best.push_back(std::min(p, ns[kPeerSeq]) / ns[kWeft]);
    round++;
  }
  if (is_dot) {
    for (int i = 0; i < kImpls; i++)
      if (std::fabs(last[i] - v.dot) > 1e-9 * std::fabs(v.dot)) state.SkipWithError("wrong dot product");
  } else {
    for (size_t i = 0; i < v.n; i++)
      if (v.w[i] != kAlpha * v.x[i] + kBeta * v.y[i]) {
        state.SkipWithError("wrong waxpby");
        break;
      }
    std::memset(v.w, 0, v.n * sizeof(double));
  }
  for (int i = 0; i < kImpls; i++) state.counters[kImplName[i]] = bench_median(t[i]);
  state.counters["par_ratio"] = bench_median(par);
  state.counters["best_ratio"] = bench_median(best);
  state.counters["n"] = static_cast<double>(v.n);
}

void BM_Dot_Paired(benchmark::State &state) {
  paired(state, vecs_for(static_cast<size_t>(state.range(0))), dot_call, true);
}

void BM_Waxpby_Paired(benchmark::State &state) {
  paired(state, vecs_for(static_cast<size_t>(state.range(0))), waxpby_call, false);
}
#endif

void sizes(benchmark::internal::Benchmark *b) {
  for (int64_t n : {1000, 10000, 100000, 1000000, 10000000}) b->Arg(n);
  b->ArgName("n")->UseRealTime()->ComputeStatistics("min", bench_min);
}

BENCHMARK(BM_Dot_Seq)->Apply(sizes);
#ifdef _OPENMP
BENCHMARK(BM_Dot_OmpFor)->Apply(sizes);
BENCHMARK(BM_Dot_OmpForInline)->Apply(sizes);
#endif
BENCHMARK(BM_Dot_WeftReduce)->Apply(sizes);
#ifdef WEFT_BENCH_HAVE_TBB
BENCHMARK(BM_Dot_Tbb)->Apply(sizes);
BENCHMARK(BM_Dot_TbbDet)->Apply(sizes);
#endif
BENCHMARK(BM_Waxpby_Seq)->Apply(sizes);
#ifdef _OPENMP
BENCHMARK(BM_Waxpby_OmpFor)->Apply(sizes);
BENCHMARK(BM_Waxpby_OmpForInline)->Apply(sizes);
#endif
BENCHMARK(BM_Waxpby_WeftRange)->Apply(sizes);
BENCHMARK(BM_Waxpby_WeftPmap)->Apply(sizes);
#ifdef WEFT_BENCH_HAVE_TBB
BENCHMARK(BM_Waxpby_Tbb)->Apply(sizes);
#endif
#ifdef _OPENMP
/* Target 3's sizes; the ratios are counters (see above), so repetitions add little. */
BENCHMARK(BM_Dot_Paired)->ArgName("n")->Arg(1000)->Arg(10000000)->UseRealTime();
BENCHMARK(BM_Waxpby_Paired)->ArgName("n")->Arg(1000)->Arg(10000000)->UseRealTime();
#endif

} // namespace

BENCHMARK_MAIN();
