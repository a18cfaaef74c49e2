/*
 * This file contains the sleep suite: how late a sleeper wakes up.
 *
 *   SleepFiber/d         weft_sleep_ns(d) on a fiber (the loop runs inside a
 *                        WEFT_BLOCKING future): a timer on the carrier's heap,
 *                        the carrier sleeping in epoll_pwait2
 *   SleepThreadWeft/d    weft_sleep_ns(d) on the main thread (a plain thread)
 *   SleepThreadNanosleep/d  clock_nanosleep(CLOCK_MONOTONIC) on the main
 *                        thread: the baseline
 *
 * for d = 0, 10 us, 100 us and 1 ms. d = 0 is a yield for weft (to the
 * carrier's scheduler on a fiber, sched_yield on a thread) and a zero
 * clock_nanosleep for the baseline. Each iteration measures its own
 * lateness, (wake time - start) - d, on CLOCK_MONOTONIC; the counters are
 * the median, the 99th percentile and the mean of one repetition, in ns.
 * Linux's default timer slack (50 us for an ordinary thread) is part of
 * what every sleeper here sees; the suite leaves it as a program would find
 * it.
 *
 *   Pinned_*             4 x carriers blocking elements (a WEFT_BLOCKING
 *                        weft_pmap) that each sleep 100 ms:
 *     Pinned_weft        with weft_sleep_ns, which parks the fiber;
 *     Pinned_plain       with a plain clock_nanosleep, which holds the carrier
 *                        (the fiber is "pinned"): weft's pinning monitor
 *                        notices a carrier held past its threshold (20 ms by
 *                        default) and starts extra carriers for the waiting
 *                        fibers;
 *     Pinned_plain_256   256 elements, each a plain clock_nanosleep of 200 ms
 *                        (the pinning target: 25.6 s on 2 carriers without
 *                        compensation)
 *     Pinned_plain_nomonitor  the same with the threshold set out of reach
 *                        (weft_configure), which is what a runtime without
 *                        a monitor would do: each carrier runs its fibers one
 *                        after another.
 *                        Counter x_sleep is the elapsed time over one sleep:
 *                        about 1 when the sleeps overlap, 4 when every carrier
 *                        runs four in a row. carriers says how many were
 *                        configured, carriers_running how many ran at the end.
 *                        Each run starts from a fresh runtime (weft_shutdown,
 *                        untimed), so no extra carrier is left from the last.
 *
 *   BurstAfterIdle/hold_ms:H  a burst of 2,000 WEFT_BLOCKING elements (one
 *                        weft_pmap, max_parallel 2,000), each using 16 KiB of
 *                        its fiber's stack and sleeping 2 ms, after 500 ms in
 *                        which weft has nothing to do (untimed): what a
 *                        program that wakes for a burst now and then pays for
 *                        its fibers. H is WEFT_STACK_HOLD_MS, the runtime
 *                        restarted with it: 1000 (the default) keeps the
 *                        stacks of the last burst committed for 1 s of idle
 *                        time; 0 gives back all above the pool's floor 100 ms
 *                        into it (the policy before), so that each burst
 *                        carves and faults in most of its stacks again.
 *                        Counters: cpu_ms, the whole process's CPU time per
 *                        burst (getrusage), and carved, stacks carved per
 *                        burst. One warm-up burst first, untimed.
 *
 *   BoundedMap/max_parallel:P  one WEFT_BLOCKING weft_pmap of 100,000
 *                        elements that each sleep 20 us, at most P in flight
 *                        (0: no bound): what the runtime costs per element of
 *                        a map that is mostly waiting, as an HTTP client's
 *                        map of requests is. Counters: cpu_ns_per_elem (the
 *                        process's CPU time over the map, getrusage) and
 *                        fibers_per_elem (fibers started, weft_get_stats): at
 *                        a bound, an element that blocked goes on to the next
 *                        index on its own fiber, so a map of 100,000 runs on a
 *                        few fibers per place; without one, a fiber per
 *                        element in flight.
 */
#include <benchmark/benchmark.h>

#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <string>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <vector>

#include "weft.h"

namespace {

int64_t mono_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void nanosleep_rel(int64_t ns) {
  struct timespec ts;
  ts.tv_sec = static_cast<time_t>(ns / 1000000000);
  ts.tv_nsec = static_cast<long>(ns % 1000000000);
  while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) != 0) {
  }
}

/* Median, p99 and mean of the lateness of one repetition. */
void report(benchmark::State &state, std::vector<int64_t> &late) {
  if (late.empty()) return;
  std::sort(late.begin(), late.end());
  double sum = 0;
  for (int64_t v : late) sum += static_cast<double>(v);
  state.counters["lateness_ns"] = static_cast<double>(late[late.size() / 2]);
  state.counters["lateness_p99_ns"] = static_cast<double>(late[late.size() * 99 / 100]);
  state.counters["lateness_mean_ns"] = sum / static_cast<double>(late.size());
  state.counters["d_ns"] = static_cast<double>(state.range(0));
}

template <typename Sleep> void measure(benchmark::State &state, Sleep sleep) {
  const int64_t d = state.range(0);
  std::vector<int64_t> late;
  late.reserve(1 << 16);
  for (auto _ : state) {
    int64_t t0 = mono_ns();
    if (!sleep(d)) {
      state.SkipWithError("weft_sleep_ns failed");
      return;
    }
    late.push_back(mono_ns() - t0 - d);
  }
  report(state, late);
}

bool weft_sleep(int64_t d) { return weft_sleep_ns(d) == 0; }

bool plain_sleep(int64_t d) {
  nanosleep_rel(d);
  return true;
}

/* Run one case's timing loop on a fiber (see bm_future.cc). */
struct FiberRun {
  benchmark::State *state;
};

void *fiber_sleep(void *arg) {
  benchmark::State &state = *static_cast<FiberRun *>(arg)->state;
  if (!weft_in_fiber()) {
    state.SkipWithError("not on a fiber (fibers unavailable or WEFT_FIBERS=0)");
    for (auto _ : state) {
    }
    return nullptr;
  }
  measure(state, weft_sleep);
  state.counters["carriers_running"] = static_cast<double>(weft_carrier_count());
  return nullptr;
}

void BM_SleepFiber(benchmark::State &state) {
  FiberRun r{&state};
  weft_future *f;
  int rc = weft_future_start(WEFT_BLOCKING, fiber_sleep, &r, &f);
  if (rc != 0) {
    state.SkipWithError(weft_strerror(rc));
    return;
  }
  rc = weft_future_get(f, -1, nullptr);
  weft_future_free(f);
  if (rc != 0) state.SkipWithError(weft_strerror(rc));
}

void BM_SleepThreadWeft(benchmark::State &state) { measure(state, weft_sleep); }
void BM_SleepThreadNanosleep(benchmark::State &state) { measure(state, plain_sleep); }

void durations(benchmark::internal::Benchmark *b) {
  for (int64_t d : {0, 10000, 100000, 1000000}) b->Arg(d);
  b->ArgName("d_ns")->UseRealTime();
}

BENCHMARK(BM_SleepFiber)->Apply(durations);
BENCHMARK(BM_SleepThreadWeft)->Apply(durations);
BENCHMARK(BM_SleepThreadNanosleep)->Apply(durations);

/* --- pinning: a fiber that blocks its carrier ------------------------------------- */

constexpr int64_t kPinSleepNs = 100 * 1000000;

/* ctx points at the sleep, in ns. */
int pinned_elem(void *ctx, size_t i) {
  (void)i;
  nanosleep_rel(*static_cast<const int64_t *>(ctx));
  return 0;
}

int parked_elem(void *ctx, size_t i) {
  (void)i;
  return weft_sleep_ns(*static_cast<const int64_t *>(ctx));
}

/*
 * threshold_ms: the pinning monitor's threshold for this case; 0 keeps the
 * default. jobs: 0 for 4 x carriers. sleep_ns: each element's sleep.
 */
void pinned(benchmark::State &state, weft_index_fn fn, unsigned threshold_ms, size_t jobs = 0,
            int64_t sleep_ns = kPinSleepNs) {
  weft_shutdown();
  weft_config cfg;
  weft_config_init(&cfg);
  cfg.pin_threshold_ms = threshold_ms;
  if (weft_configure(&cfg) != 0 || !weft_fibers_available()) {
    weft_config_init(&cfg);
    weft_configure(&cfg);
    state.SkipWithError("fibers unavailable (or WEFT_FIBERS=0)");
    return;
  }
  /* The configured carriers, not those running now. */
  weft_info info;
  weft_get_info(&info);
  unsigned carriers = info.carriers ? info.carriers : 1;
  size_t n = jobs ? jobs : 4 * static_cast<size_t>(carriers);
  weft_pmap_opts o = WEFT_PMAP_OPTS_INIT;
  o.kind = WEFT_BLOCKING;
  int64_t total = 0, iters = 0;
  unsigned running = 0;
  for (auto _ : state) {
    /* Each run starts from the configured carriers: no compensation carrier
       left over from the run before. */
    state.PauseTiming();
    weft_shutdown();
    bool ok = weft_fibers_available();
    state.ResumeTiming();
    if (!ok) {
      state.SkipWithError("fibers did not restart");
      break;
    }
    int64_t t0 = mono_ns();
    int rc = weft_pmap(n, fn, &sleep_ns, &o);
    total += mono_ns() - t0;
    iters++;
    running = weft_carrier_count();
    if (rc != 0) {
      state.SkipWithError(weft_strerror(rc));
      break;
    }
  }
  /* Back to the defaults for the other cases. */
  weft_shutdown();
  weft_config_init(&cfg);
  weft_configure(&cfg);
  state.counters["jobs"] = static_cast<double>(n);
  state.counters["carriers"] = static_cast<double>(carriers);
  state.counters["carriers_running"] = static_cast<double>(running);
  state.counters["x_sleep"] =
      iters ? static_cast<double>(total) / static_cast<double>(iters) / static_cast<double>(sleep_ns) : 0.0;
}

void BM_Pinned_weft(benchmark::State &state) { pinned(state, parked_elem, 0); }
void BM_Pinned_plain(benchmark::State &state) { pinned(state, pinned_elem, 0); }
/* 1000 s: the monitor never finds a carrier held that long in this case. */
void BM_Pinned_plain_nomonitor(benchmark::State &state) { pinned(state, pinned_elem, 1000000); }
BENCHMARK(BM_Pinned_weft)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Pinned_plain)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Pinned_plain_nomonitor)->UseRealTime()->Unit(benchmark::kMillisecond);
/* Issue 4's case: 256 fibers that each call plain nanosleep for 200 ms (25.6 s on 2 carriers without the
 * monitor). */
void BM_Pinned_plain_256(benchmark::State &state) { pinned(state, pinned_elem, 0, 256, 200 * 1000000LL); }
BENCHMARK(BM_Pinned_plain_256)->UseRealTime()->Unit(benchmark::kMillisecond)->Iterations(2);

/* --- bursts after a pause: what keeping stacks committed saves --------------------- */

constexpr size_t kBurst = 2000;
constexpr int64_t kBurstGapNs = 500 * 1000000LL;

int burst_elem(void *ctx, size_t i) {
  (void)ctx;
  volatile char frame[16 * 1024]; /* what a fiber with a buffer on its stack touches */
  for (size_t k = 0; k < sizeof frame; k += 512) frame[k] = static_cast<char>(i + k);
  return weft_sleep_ns(2 * 1000000);
}

double cpu_ms_now() {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e3 +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e3;
}

void BM_BurstAfterIdle(benchmark::State &state) {
  weft_shutdown();
  std::string hold = std::to_string(state.range(0));
  setenv("WEFT_STACK_HOLD_MS", hold.c_str(), 1); /* read as the runtime starts */
  weft_pmap_opts o = WEFT_PMAP_OPTS_INIT;
  o.kind = WEFT_BLOCKING;
  o.max_parallel = kBurst;
  int rc = weft_fibers_available() ? weft_pmap(kBurst, burst_elem, nullptr, &o) : -ENOSYS;
  if (rc != 0) {
    state.SkipWithError(rc == -ENOSYS ? "fibers unavailable (or WEFT_FIBERS=0)" : weft_strerror(rc));
  } else {
    double cpu = 0;
    uint64_t carved = 0;
    for (auto _ : state) {
      state.PauseTiming();
      nanosleep_rel(kBurstGapNs);
      weft_stats s0, s1;
      weft_get_stats(&s0);
      double c0 = cpu_ms_now();
      state.ResumeTiming();
      rc = weft_pmap(kBurst, burst_elem, nullptr, &o);
      state.PauseTiming();
      cpu += cpu_ms_now() - c0;
      weft_get_stats(&s1);
      carved += s1.stacks_carved - s0.stacks_carved;
      state.ResumeTiming();
      if (rc != 0) {
        state.SkipWithError(weft_strerror(rc));
        break;
      }
    }
    double n = static_cast<double>(state.iterations() ? state.iterations() : 1);
    state.counters["cpu_ms"] = cpu / n;
    state.counters["carved"] = static_cast<double>(carved) / n;
  }
  weft_shutdown();
  unsetenv("WEFT_STACK_HOLD_MS");
}
BENCHMARK(BM_BurstAfterIdle)
    ->ArgName("hold_ms")
    ->Arg(0)
    ->Arg(1000)
    ->Iterations(6)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

constexpr size_t kBoundedElems = 100000;

int bounded_elem(void *ctx, size_t i) {
  (void)ctx;
  (void)i;
  return weft_sleep_ns(20 * 1000);
}

void BM_BoundedMap(benchmark::State &state) {
  weft_pmap_opts o = WEFT_PMAP_OPTS_INIT;
  o.kind = WEFT_BLOCKING;
  o.max_parallel = static_cast<size_t>(state.range(0));
  if (!weft_fibers_available()) {
    state.SkipWithError("fibers unavailable (or WEFT_FIBERS=0)");
    return;
  }
  int rc = weft_pmap(kBoundedElems / 10, bounded_elem, nullptr, &o); /* warm: stacks in the cache */
  double cpu = 0;
  uint64_t made = 0;
  for (auto _ : state) {
    if (rc != 0) break;
    weft_stats s0, s1;
    weft_get_stats(&s0);
    double c0 = cpu_ms_now();
    rc = weft_pmap(kBoundedElems, bounded_elem, nullptr, &o);
    cpu += cpu_ms_now() - c0;
    weft_get_stats(&s1);
    made += s1.fibers_started - s0.fibers_started;
  }
  if (rc != 0) {
    state.SkipWithError(weft_strerror(rc));
    return;
  }
  double elems = static_cast<double>(state.iterations()) * static_cast<double>(kBoundedElems);
  state.SetItemsProcessed(static_cast<int64_t>(elems));
  state.counters["cpu_ns_per_elem"] = cpu * 1e6 / elems;
  state.counters["fibers_per_elem"] = static_cast<double>(made) / elems;
}
BENCHMARK(BM_BoundedMap)
    ->ArgName("max_parallel")
    ->Arg(0)
    ->Arg(100)
    ->Arg(1000)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

} // namespace

BENCHMARK_MAIN();
