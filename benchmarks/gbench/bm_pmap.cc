/*
 * This file contains the CPU parallel-map suite: weft_pmap of the WEFT_CPU
 * kind on the GPars "math" kernel, beside the baselines a C programmer would
 * otherwise write, all in one binary so that ratios come from one run:
 *
 *   Seq            a plain loop on the calling thread
 *   OmpFor         #pragma omp parallel for schedule(static)
 *   OmpTaskloop    #pragma omp taskloop (the runtime's default grainsize)
 *   Tbb            tbb::parallel_for (auto_partitioner), when TBB was found
 *   WeftPmap       weft_pmap, automatic (guided) grain
 *   WeftPmapGrain  weft_pmap with a fixed grain, swept in powers of 4, to show
 *                  how close the automatic grain comes to the best fixed one
 *
 * at n = 100, 10^4 and 10^6 elements. Every implementation computes
 * out[i] = weft_kernel_math(in[i]) with the same compiled, 64-byte-aligned
 * kernel (benchmarks/kernels.c), on the same buffers, so only the way the
 * indices are handed out differs. Items/s (SetItemsProcessed) makes the
 * throughput ratios direct. Outputs are checked against a sequential answer
 * after every case, outside the timed loop.
 *
 * Also: an empty map (n = one element per OpenMP thread, a body that does
 * nothing) against an empty omp parallel for, which is the fixed cost of one
 * call; and the GPars loop: a map over 100 elements called again and again,
 * reported as ns per call (the write-up's question).
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

void BM_WeftPmap(benchmark::State &state) {
  Data &d = data_for(static_cast<size_t>(state.range(0)));
  prepare(d);
  weft_pmap_opts o = WEFT_PMAP_OPTS_INIT; /* grain 0: automatic */
  for (auto _ : state) {
    int rc = weft_pmap(d.n, math_elem, &d, &o);
    if (rc != 0) {
      state.SkipWithError(weft_strerror(rc));
      break;
    }
  }
  finish(state, d);
}

void BM_WeftPmapGrain(benchmark::State &state) {
  Data &d = data_for(static_cast<size_t>(state.range(0)));
  prepare(d);
  weft_pmap_opts o = WEFT_PMAP_OPTS_INIT;
  o.grain = static_cast<size_t>(state.range(1));
  for (auto _ : state) {
    int rc = weft_pmap(d.n, math_elem, &d, &o);
    if (rc != 0) {
      state.SkipWithError(weft_strerror(rc));
      break;
    }
  }
  finish(state, d);
  state.counters["grain"] = static_cast<double>(o.grain);
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

const int64_t kSizes[] = {100, 10000, 1000000};

void sizes(benchmark::internal::Benchmark *b) {
  for (int64_t n : kSizes) b->Arg(n);
  b->ArgName("n")->UseRealTime();
}

/* Fixed grains 1, 4, 16, ... up to n/2 (a grain of n or more is one worker). */
void grains(benchmark::internal::Benchmark *b) {
  for (int64_t n : kSizes)
    for (int64_t g = 1; g <= n / 2; g *= 4) b->Args({n, g});
  b->ArgNames({"n", "grain"})->UseRealTime();
}

BENCHMARK(BM_Seq)->Apply(sizes);
#ifdef _OPENMP
BENCHMARK(BM_OmpFor)->Apply(sizes);
BENCHMARK(BM_OmpTaskloop)->Apply(sizes);
#endif
#ifdef WEFT_BENCH_HAVE_TBB
BENCHMARK(BM_Tbb)->Apply(sizes);
#endif
BENCHMARK(BM_WeftPmap)->Apply(sizes);
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

void BM_GparsLoop_Weft(benchmark::State &state) {
  gpars_loop(state, [](Data &d) {
    weft_pmap_opts o = WEFT_PMAP_OPTS_INIT;
    return weft_pmap(d.n, math_elem, &d, &o) == 0;
  });
}

BENCHMARK(BM_GparsLoop_Seq)->UseRealTime();
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

} // namespace

BENCHMARK_MAIN();
