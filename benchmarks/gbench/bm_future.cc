/*
 * This file contains the futures suite: what it costs to start a future and
 * get its result, of either kind, from a plain thread and from a fiber,
 * beside pthread_create + pthread_join in the same binary (the baseline a C
 * programmer would otherwise reach for). Each case reports ns per start+get
 * (wall time: the work hops between threads, so CPU time of the caller
 * would say nothing).
 *
 *   FutureCpu                 WEFT_CPU future started and got from the main thread
 *                             (the getter may run a not-yet-started future itself)
 *   FutureBlocking            WEFT_BLOCKING future from the main thread: a fiber on a
 *                             carrier, the main thread blocks on a futex
 *   FiberSpawnJoin            a trivial WEFT_BLOCKING future started and got from a
 *                             fiber: the loop itself runs inside a blocking future
 *   FiberSpawnJoinBatch/k     the same, k futures started, then all got: per future
 *   FutureCpuFromFiber        a WEFT_CPU future from a fiber (the fiber parks while
 *                             weft's OpenMP team runs it)
 *   PthreadCreateJoin         pthread_create + pthread_join, default attributes
 *
 * Recursive CPU futures (issue 28): divide and conquer as HPC codes write it
 * (BOTS: fib, nqueens), each variant on the same sequential kernel below its
 * cut-off, called from the main thread, on the runtime's default number of
 * threads (OMP_NUM_THREADS; TBB's default concurrency):
 *   Fib{Seq,Weft,OmpTask,Tbb}/38/c      fib(38): start a child for fib(n-1),
 *                             compute fib(n-2), join; n <= c runs the
 *                             sequential kernel. c = 24, 18, 12: about 1,000,
 *                             17,700 and 318,000 futures. Seq is the kernel
 *                             alone (no futures at all).
 *   Queens{Seq,Weft,OmpTask,Tbb}/n/d    the number of ways to place n queens,
 *                             a child per safe square of each of the first d
 *                             rows (BOTS nqueens' shape); deeper rows run the
 *                             sequential kernel.
 * Tbb is tbb::task_group (when TBB was found); OmpTask is `omp task` +
 * `taskwait` inside `omp parallel` + `single`; FibWeftInRegion is FibWeft
 * called inside `omp parallel` + `single`, where weft's futures are tasks of
 * the program's team rather than jobs on weft's deques.
 *
 * The parallel map's overhead against n and grain is in bm_pmap
 * (WeftPmapGrain, EmptyWeftPmap).
 */
#include <benchmark/benchmark.h>

#include <pthread.h>

#include <chrono>
#include <vector>

#include "kernels.h"
#include "weft.h"

#ifdef WEFT_BENCH_HAVE_TBB
#include <tbb/task_group.h>
#endif

namespace {

void *noop(void *arg) {
  weft_kernel_sink(arg);
  return arg;
}

/* One start + get + free; false (and the case skipped) on any error. */
bool start_get(benchmark::State &state, weft_kind kind, void *arg) {
  weft_future *f;
  int rc = weft_future_start(kind, noop, arg, &f);
  if (rc != 0) {
    state.SkipWithError(weft_strerror(rc));
    return false;
  }
  void *res = nullptr;
  rc = weft_future_get(f, -1, &res);
  weft_future_free(f);
  if (rc != 0 || res != arg) {
    state.SkipWithError(rc ? weft_strerror(rc) : "wrong result");
    return false;
  }
  return true;
}

/*
 * Run body(state) inside a WEFT_BLOCKING future, that is on a fiber, and
 * wait for it from the main thread. Google Benchmark's timing loop runs
 * entirely on the fiber. Without fibers (WEFT_FIBERS=0, or a build without
 * them) the case is skipped: there is no fiber to measure.
 */
struct FiberRun {
  benchmark::State *state;
  void (*body)(benchmark::State &);
};

void *fiber_main(void *arg) {
  FiberRun *r = static_cast<FiberRun *>(arg);
  if (!weft_in_fiber()) {
    r->state->SkipWithError("not on a fiber (fibers unavailable or WEFT_FIBERS=0)");
    for (auto _ : *r->state) {
    }
    return nullptr;
  }
  r->body(*r->state);
  return nullptr;
}

void in_fiber(benchmark::State &state, void (*body)(benchmark::State &)) {
  FiberRun r{&state, body};
  weft_future *f;
  int rc = weft_future_start(WEFT_BLOCKING, fiber_main, &r, &f);
  if (rc != 0) {
    state.SkipWithError(weft_strerror(rc));
    return;
  }
  rc = weft_future_get(f, -1, nullptr);
  weft_future_free(f);
  if (rc != 0) state.SkipWithError(weft_strerror(rc));
}

/* --- from the main thread ---------------------------------------------------- */

void BM_FutureCpu(benchmark::State &state) {
  int x = 0;
  for (auto _ : state)
    if (!start_get(state, WEFT_CPU, &x)) break;
}
BENCHMARK(BM_FutureCpu)->UseRealTime();

void BM_FutureBlocking(benchmark::State &state) {
  int x = 0;
  for (auto _ : state)
    if (!start_get(state, WEFT_BLOCKING, &x)) break;
  state.counters["fibers"] = weft_fibers_available() ? 1 : 0;
}
BENCHMARK(BM_FutureBlocking)->UseRealTime();

/* --- from a fiber -------------------------------------------------------------- */

void fiber_spawn_join(benchmark::State &state) {
  int x = 0;
  for (auto _ : state)
    if (!start_get(state, WEFT_BLOCKING, &x)) break;
}

void BM_FiberSpawnJoin(benchmark::State &state) { in_fiber(state, fiber_spawn_join); }
BENCHMARK(BM_FiberSpawnJoin)->UseRealTime();

void fiber_spawn_join_batch(benchmark::State &state) {
  const size_t k = static_cast<size_t>(state.range(0));
  std::vector<weft_future *> fs(k);
  int x = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    for (size_t i = 0; i < k; i++) {
      int rc = weft_future_start(WEFT_BLOCKING, noop, &x, &fs[i]);
      if (rc != 0) {
        for (size_t j = 0; j < i; j++) weft_future_free(fs[j]);
        state.SkipWithError(weft_strerror(rc));
        return;
      }
    }
    for (size_t i = 0; i < k; i++) {
      if (weft_future_get(fs[i], -1, nullptr) != 0) state.SkipWithError("weft_future_get failed");
      weft_future_free(fs[i]);
    }
  }
  double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
  double futures = static_cast<double>(state.iterations()) * static_cast<double>(k);
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(k));
  state.counters["ns_per_future"] = futures > 0 ? ns / futures : 0.0;
}

void BM_FiberSpawnJoinBatch(benchmark::State &state) { in_fiber(state, fiber_spawn_join_batch); }
BENCHMARK(BM_FiberSpawnJoinBatch)->Arg(100)->ArgName("k")->UseRealTime();

void fiber_cpu_future(benchmark::State &state) {
  int x = 0;
  for (auto _ : state)
    if (!start_get(state, WEFT_CPU, &x)) break;
}

void BM_FutureCpuFromFiber(benchmark::State &state) { in_fiber(state, fiber_cpu_future); }
BENCHMARK(BM_FutureCpuFromFiber)->UseRealTime();

/* --- the baseline: an OS thread per task ----------------------------------------- */

void BM_PthreadCreateJoin(benchmark::State &state) {
  int x = 0;
  for (auto _ : state) {
    pthread_t t;
    if (pthread_create(&t, nullptr, noop, &x) != 0) {
      state.SkipWithError("pthread_create failed");
      break;
    }
    void *res = nullptr;
    pthread_join(t, &res);
    benchmark::DoNotOptimize(res);
  }
}
BENCHMARK(BM_PthreadCreateJoin)->UseRealTime();

/* --- recursive CPU futures: fib and nqueens (issue 28) ----------------------------- */

__attribute__((noinline)) long fib_seq(int n) { return n < 2 ? n : fib_seq(n - 1) + fib_seq(n - 2); }

long fib_weft(int n, int cutoff);

struct FibArg {
  int n, cutoff;
  long result;
};

void *fib_task(void *p) {
  auto *a = static_cast<FibArg *>(p);
  a->result = fib_weft(a->n, a->cutoff);
  return nullptr;
}

long fib_weft(int n, int cutoff) {
  if (n <= cutoff) return fib_seq(n);
  FibArg child{n - 1, cutoff, 0};
  weft_future *f;
  if (weft_future_start(WEFT_CPU, fib_task, &child, &f) != 0)
    return fib_weft(n - 1, cutoff) + fib_weft(n - 2, cutoff);
  long y = fib_weft(n - 2, cutoff);
  if (weft_future_get(f, -1, nullptr) != 0) child.result = -1;
  weft_future_free(f);
  return child.result + y;
}

long fib_omp(int n, int cutoff) {
  if (n <= cutoff) return fib_seq(n);
  long x = 0;
#pragma omp task shared(x) firstprivate(n, cutoff)
  x = fib_omp(n - 1, cutoff);
  long y = fib_omp(n - 2, cutoff);
#pragma omp taskwait
  return x + y;
}

#ifdef WEFT_BENCH_HAVE_TBB
long fib_tbb(int n, int cutoff) {
  if (n <= cutoff) return fib_seq(n);
  long x = 0;
  tbb::task_group g;
  g.run([&] { x = fib_tbb(n - 1, cutoff); });
  long y = fib_tbb(n - 2, cutoff);
  g.wait();
  return x + y;
}
#endif

/* Every fib case checks its answer against the kernel's. */
void fib_check(benchmark::State &state, long got) {
  static long want[64];
  int n = static_cast<int>(state.range(0));
  if (!want[n]) want[n] = fib_seq(n);
  if (got != want[n]) state.SkipWithError("wrong result");
}

void BM_FibSeq(benchmark::State &state) {
  long r = 0;
  for (auto _ : state) r = fib_seq(static_cast<int>(state.range(0)));
  fib_check(state, r);
}

void BM_FibWeft(benchmark::State &state) {
  long r = 0;
  for (auto _ : state) r = fib_weft(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  fib_check(state, r);
}

/* fib from inside a program's own parallel region (one thread of it, as `single`), with fib = f. */
template <typename Fib> void fib_in_region(benchmark::State &state, Fib f) {
  long r = 0;
  for (auto _ : state) {
#pragma omp parallel
#pragma omp single
    r = f(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  }
  fib_check(state, r);
}

void BM_FibOmpTask(benchmark::State &state) { fib_in_region(state, fib_omp); }

/* weft's futures inside a program's own parallel region: OpenMP tasks of that team (weft.h). */
void BM_FibWeftInRegion(benchmark::State &state) { fib_in_region(state, fib_weft); }

#define FIB_ARGS                                                                                             \
  ->ArgNames({"n", "cutoff"})                                                                                \
      ->Args({38, 24})                                                                                       \
      ->Args({38, 18})                                                                                       \
      ->Args({38, 12})                                                                                       \
      ->UseRealTime()                                                                                        \
      ->Unit(benchmark::kMillisecond)
BENCHMARK(BM_FibSeq)->ArgNames({"n"})->Arg(38)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_FibWeft) FIB_ARGS;
BENCHMARK(BM_FibOmpTask) FIB_ARGS;
BENCHMARK(BM_FibWeftInRegion) FIB_ARGS;
#ifdef WEFT_BENCH_HAVE_TBB
void BM_FibTbb(benchmark::State &state) {
  long r = 0;
  for (auto _ : state) r = fib_tbb(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  fib_check(state, r);
}
BENCHMARK(BM_FibTbb) FIB_ARGS;
#endif

/* nqueens: rows placed so far as a bitmask of columns and of both diagonals. */
__attribute__((noinline)) long queens_seq(int n, unsigned cols, unsigned d1, unsigned d2) {
  unsigned all = (1u << n) - 1;
  if (cols == all) return 1;
  long count = 0;
  for (unsigned free = all & ~(cols | d1 | d2); free; free &= free - 1) {
    unsigned bit = free & -free;
    count += queens_seq(n, cols | bit, (d1 | bit) << 1, (d2 | bit) >> 1);
  }
  return count;
}

struct QueensArg {
  int n, depth;
  unsigned cols, d1, d2;
  long result;
};

long queens_weft(int n, int depth, unsigned cols, unsigned d1, unsigned d2);

void *queens_task(void *p) {
  auto *a = static_cast<QueensArg *>(p);
  a->result = queens_weft(a->n, a->depth, a->cols, a->d1, a->d2);
  return nullptr;
}

long queens_weft(int n, int depth, unsigned cols, unsigned d1, unsigned d2) {
  if (depth == 0) return queens_seq(n, cols, d1, d2);
  unsigned all = (1u << n) - 1;
  if (cols == all) return 1;
  QueensArg child[32];
  weft_future *f[32];
  int k = 0;
  long count = 0;
  for (unsigned free = all & ~(cols | d1 | d2); free; free &= free - 1) {
    unsigned bit = free & -free;
    child[k] = QueensArg{n, depth - 1, cols | bit, (d1 | bit) << 1, (d2 | bit) >> 1, 0};
    if (weft_future_start(WEFT_CPU, queens_task, &child[k], &f[k]) == 0)
      k++;
    else
      count += queens_weft(n, depth - 1, cols | bit, (d1 | bit) << 1, (d2 | bit) >> 1);
  }
  for (int i = k - 1; i >= 0; i--) { /* newest first: each join takes its child back unless stolen */
    if (weft_future_get(f[i], -1, nullptr) != 0) child[i].result = -1;
    weft_future_free(f[i]);
    count += child[i].result;
  }
  return count;
}

long queens_omp(int n, int depth, unsigned cols, unsigned d1, unsigned d2) {
  if (depth == 0) return queens_seq(n, cols, d1, d2);
  unsigned all = (1u << n) - 1;
  if (cols == all) return 1;
  long part[32] = {0};
  int k = 0;
  for (unsigned free = all & ~(cols | d1 | d2); free; free &= free - 1, k++) {
    unsigned bit = free & -free;
#pragma omp task shared(part) firstprivate(k, bit, n, depth, cols, d1, d2)
    part[k] = queens_omp(n, depth - 1, cols | bit, (d1 | bit) << 1, (d2 | bit) >> 1);
  }
#pragma omp taskwait
  long count = 0;
  for (int i = 0; i < k; i++) count += part[i];
  return count;
}

#ifdef WEFT_BENCH_HAVE_TBB
long queens_tbb(int n, int depth, unsigned cols, unsigned d1, unsigned d2) {
  if (depth == 0) return queens_seq(n, cols, d1, d2);
  unsigned all = (1u << n) - 1;
  if (cols == all) return 1;
  long part[32] = {0};
  int k = 0;
  tbb::task_group g;
  for (unsigned free = all & ~(cols | d1 | d2); free; free &= free - 1, k++) {
    unsigned bit = free & -free;
    g.run([=, &part] { part[k] = queens_tbb(n, depth - 1, cols | bit, (d1 | bit) << 1, (d2 | bit) >> 1); });
  }
  g.wait();
  long count = 0;
  for (int i = 0; i < k; i++) count += part[i];
  return count;
}
#endif

void queens_check(benchmark::State &state, long got) {
  static long want[32];
  int n = static_cast<int>(state.range(0));
  if (!want[n]) want[n] = queens_seq(n, 0, 0, 0);
  if (got != want[n]) state.SkipWithError("wrong result");
}

void BM_QueensSeq(benchmark::State &state) {
  long r = 0;
  for (auto _ : state) r = queens_seq(static_cast<int>(state.range(0)), 0, 0, 0);
  queens_check(state, r);
}

void BM_QueensWeft(benchmark::State &state) {
  long r = 0;
  for (auto _ : state)
    r = queens_weft(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)), 0, 0, 0);
  queens_check(state, r);
}

void BM_QueensOmpTask(benchmark::State &state) {
  long r = 0;
  for (auto _ : state) {
#pragma omp parallel
#pragma omp single
    r = queens_omp(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)), 0, 0, 0);
  }
  queens_check(state, r);
}

#define QUEENS_ARGS                                                                                          \
  ->ArgNames({"n", "depth"})->Args({13, 2})->Args({13, 4})->UseRealTime()->Unit(benchmark::kMillisecond)
BENCHMARK(BM_QueensSeq)->ArgNames({"n"})->Arg(13)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_QueensWeft) QUEENS_ARGS;
BENCHMARK(BM_QueensOmpTask) QUEENS_ARGS;
#ifdef WEFT_BENCH_HAVE_TBB
void BM_QueensTbb(benchmark::State &state) {
  long r = 0;
  for (auto _ : state)
    r = queens_tbb(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)), 0, 0, 0);
  queens_check(state, r);
}
BENCHMARK(BM_QueensTbb) QUEENS_ARGS;
#endif

} // namespace

BENCHMARK_MAIN();
