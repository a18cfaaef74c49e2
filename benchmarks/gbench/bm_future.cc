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
 * The parallel map's overhead against n and grain is in bm_pmap
 * (WeftPmapGrain, EmptyWeftPmap).
 */
#include <benchmark/benchmark.h>

#include <pthread.h>

#include <chrono>
#include <vector>

#include "kernels.h"
#include "weft.h"

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

} // namespace

BENCHMARK_MAIN();
