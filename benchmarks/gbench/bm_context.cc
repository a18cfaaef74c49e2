/*
 * This file contains the context-switch suite: what one switch between two
 * user-level contexts costs, weft's beside the alternatives, all in one
 * binary so that ratios come from one run:
 *
 *   Switch/Weft            weft__ctx_switch (the label names the
 *                          implementation: asm-x86_64, asm-aarch64, ucontext)
 *   Switch/Swapcontext     glibc's swapcontext, which also saves and
 *                          restores the signal mask (a system call)
 *   Switch/BoostFcontext   Boost.Context's jump_fcontext, when CMake found
 *                          Boost.Context (WEFT_BENCH_HAVE_BOOST_CONTEXT)
 *   FiberYieldPair         two WEFT_BLOCKING futures on one carrier, each
 *                          calling weft_yield() in a loop: the whole
 *                          hand-off through weft's scheduler
 *
 * The three raw cases have the same shape: the benchmark thread's stack and
 * one context on a 64 KiB stack ping-pong; each iteration is one round trip,
 * that is two switches, and the counter ns_per_switch divides by two. Each
 * partner is a loop that does nothing but switch back. The raw cases count
 * the thread's CPU time (a neighbour stealing the core does not count).
 * FiberYieldPair times, on the monotonic clock, from the moment both fibers
 * are running to the moment both are done; its ns_per_switch is per
 * weft_yield, that is per hand-off from one fiber to the other (two raw
 * switches, through the carrier's scheduler, plus its run queue).
 *
 * Run with --benchmark_repetitions=10 --benchmark_enable_random_interleaving
 * on a shared machine: the repetitions of different cases are then
 * interleaved, and each case reports its min and median. At the end, a
 * table gives each case's ns per switch (median when repeated) and its
 * ratio to swapcontext.
 */
#include <benchmark/benchmark.h>

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#ifdef WEFT_BENCH_HAVE_BOOST_CONTEXT
#include <boost/context/detail/fcontext.hpp>
#endif

extern "C" {
#include "fiber/context.h"
}
#include "weft.h"

namespace {

constexpr size_t kStackSize = 64 * 1024;

/* A stack of its own for each case, mapped and unmapped around it. */
struct Stack {
  void *base;
  Stack() {
    base = mmap(nullptr, kStackSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
      std::fprintf(stderr, "bm_context: mmap failed\n");
      std::abort();
    }
  }
  ~Stack() { munmap(base, kStackSize); }
  void *top() const { return static_cast<char *>(base) + kStackSize; }
};

/* Every case reports the same counter, and its min over repetitions beside the median. */
void report_switches(benchmark::State &state, double switches_per_iteration) {
  state.counters["ns_per_switch"] =
      benchmark::Counter(switches_per_iteration * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

double min_of(const std::vector<double> &v) { return v.empty() ? 0 : *std::min_element(v.begin(), v.end()); }

/* --- weft__ctx_switch ------------------------------------------------------------ */

struct WeftPair {
  void *main_sp;  /* the benchmark thread's stack while the partner runs */
  void *other_sp; /* the partner's while the benchmark thread runs */
};

void weft_partner(void *arg) {
  auto *p = static_cast<WeftPair *>(arg);
  for (;;) weft__ctx_switch(&p->other_sp, p->main_sp, nullptr);
}

void BM_Switch_Weft(benchmark::State &state) {
  Stack stack;
  WeftPair p{};
  p.other_sp = weft__ctx_make(stack.base, kStackSize, weft_partner);
  weft__ctx_switch(&p.main_sp, p.other_sp, &p); /* start it: it switches straight back */
  for (auto _ : state) {
    weft__ctx_switch(&p.main_sp, p.other_sp, nullptr); /* there and back */
  }
  report_switches(state, 2);
  state.SetLabel(weft__ctx_impl_name);
}
BENCHMARK(BM_Switch_Weft)->Name("Switch/Weft")->ComputeStatistics("min", min_of);

/* --- swapcontext ----------------------------------------------------------------- */

struct UcPair {
  ucontext_t main_uc;
  ucontext_t other_uc;
};
UcPair *uc_pair; /* makecontext passes ints only: the partner finds its pair here */

void uc_partner() {
  UcPair *p = uc_pair;
  for (;;) swapcontext(&p->other_uc, &p->main_uc);
}

void BM_Switch_Swapcontext(benchmark::State &state) {
  Stack stack;
  UcPair p{};
  uc_pair = &p;
  getcontext(&p.other_uc);
  p.other_uc.uc_stack.ss_sp = stack.base;
  p.other_uc.uc_stack.ss_size = kStackSize;
  p.other_uc.uc_link = nullptr;
  makecontext(&p.other_uc, uc_partner, 0);
  swapcontext(&p.main_uc, &p.other_uc); /* start it: it switches straight back */
  for (auto _ : state) {
    swapcontext(&p.main_uc, &p.other_uc); /* there and back */
  }
  report_switches(state, 2);
}
BENCHMARK(BM_Switch_Swapcontext)->Name("Switch/Swapcontext")->ComputeStatistics("min", min_of);

/* --- Boost.Context --------------------------------------------------------------- */

#ifdef WEFT_BENCH_HAVE_BOOST_CONTEXT
namespace bctx = boost::context::detail;

void boost_partner(bctx::transfer_t t) {
  for (;;) t = bctx::jump_fcontext(t.fctx, nullptr);
}

void BM_Switch_BoostFcontext(benchmark::State &state) {
  Stack stack;
  bctx::fcontext_t other = bctx::make_fcontext(stack.top(), kStackSize, boost_partner);
  other = bctx::jump_fcontext(other, nullptr).fctx; /* start it: it switches straight back */
  for (auto _ : state) {
    other = bctx::jump_fcontext(other, nullptr).fctx; /* there and back */
  }
  report_switches(state, 2);
}
BENCHMARK(BM_Switch_BoostFcontext)->Name("Switch/BoostFcontext")->ComputeStatistics("min", min_of);
#endif

/* --- two fibers yielding on one carrier ------------------------------------------- */

constexpr long kYields = 20000; /* per fiber, per iteration */

struct YieldPair {
  std::atomic<int> started{0};
  std::atomic<int> finished{0};
  int64_t t0 = 0, t1 = 0;
  bool on_fiber = true;
};

void *yielder(void *arg) {
  auto *y = static_cast<YieldPair *>(arg);
  if (!weft_in_fiber()) y->on_fiber = false;
  /* Wait for the other one, so that every timed yield hands over to it. */
  if (y->started.fetch_add(1) == 1) y->t0 = weft_now_ns();
  while (y->started.load() < 2) weft_yield();
  for (long i = 0; i < kYields; i++) weft_yield();
  if (y->finished.fetch_add(1) == 1) y->t1 = weft_now_ns();
  return nullptr;
}

void BM_FiberYieldPair(benchmark::State &state) {
  static int configured = [] {
    weft_config cfg;
    weft_config_init(&cfg);
    cfg.carriers = 1;
    return weft_configure(&cfg);
  }();
  if (configured != 0) {
    state.SkipWithError(weft_strerror(configured));
    return;
  }
  if (!weft_fibers_available()) {
    state.SkipWithError("fibers are not available in this build");
    return;
  }
  for (auto _ : state) {
    YieldPair y;
    weft_future *a = nullptr, *b = nullptr;
    if (weft_future_start(WEFT_BLOCKING, yielder, &y, &a) != 0 ||
        weft_future_start(WEFT_BLOCKING, yielder, &y, &b) != 0) {
      state.SkipWithError("weft_future_start failed");
      weft_future_free(a);
      break;
    }
    weft_future_get(a, -1, nullptr);
    weft_future_get(b, -1, nullptr);
    weft_future_free(a);
    weft_future_free(b);
    if (!y.on_fiber) {
      state.SkipWithError("the futures did not run on fibers");
      break;
    }
    state.SetIterationTime(static_cast<double>(y.t1 - y.t0) * 1e-9);
  }
  report_switches(state, 2.0 * kYields);
}
BENCHMARK(BM_FiberYieldPair)->Name("FiberYieldPair")->UseManualTime()->ComputeStatistics("min", min_of);

/* --- the ratio table --------------------------------------------------------------- */

/* The console output, then each case's ns per switch (the median when repeated) and its ratio to swapcontext.
 */
class RatioReporter : public benchmark::ConsoleReporter {
public:
  explicit RatioReporter(OutputOptions opts) : ConsoleReporter(opts) {}

  void ReportRuns(const std::vector<Run> &runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run &r : runs) {
      auto c = r.counters.find("ns_per_switch");
      if (c == r.counters.end() || r.error_occurred) continue;
      const std::string name = r.run_name.function_name;
      if (r.run_type == Run::RT_Aggregate) {
        if (r.aggregate_name == "median") median_[name] = c->second.value * 1e9;
      } else {
        single_[name].push_back(c->second.value * 1e9);
      }
    }
  }

  void Finalize() override {
    ConsoleReporter::Finalize();
    std::map<std::string, double> ns = median_; /* a median, where there are repetitions */
    for (auto &s : single_)
      if (!ns.count(s.first)) ns[s.first] = min_of(s.second);
    if (ns.empty()) return;
    auto base = ns.find("Switch/Swapcontext");
    std::printf("\n%-24s %14s %16s\n", "case", "ns/switch", "vs swapcontext");
    for (auto &e : ns) {
      if (base != ns.end() && base->second > 0)
        std::printf("%-24s %14.2f %15.3fx\n", e.first.c_str(), e.second, e.second / base->second);
      else
        std::printf("%-24s %14.2f %16s\n", e.first.c_str(), e.second, "-");
    }
  }

private:
  std::map<std::string, double> median_;
  std::map<std::string, std::vector<double>> single_;
};

/* The value of --name=value on the command line (the last one wins), or def. */
std::string flag(int argc, char **argv, const std::string &name, const std::string &def) {
  std::string v = def, prefix = "--" + name + "=";
  for (int i = 1; i < argc; i++)
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) v = argv[i] + prefix.size();
  return v;
}

} // namespace

/*
 * Google Benchmark's own main, with the ratio table after the console
 * output. The console options are read as Google Benchmark reads them
 * (--benchmark_color, --benchmark_counters_tabular); any other
 * --benchmark_format gets the library's own reporter and no table.
 */
int main(int argc, char **argv) {
  const std::string format = flag(argc, argv, "benchmark_format", "console");
  const std::string color = flag(argc, argv, "benchmark_color", "auto");
  const std::string tabular = flag(argc, argv, "benchmark_counters_tabular", "false");
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  if (format != "console") {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    const char *term = std::getenv("TERM");
    bool use_color = color == "true" || color == "yes" || color == "1" ||
                     (color == "auto" && isatty(STDOUT_FILENO) && term && std::strcmp(term, "dumb") != 0);
    bool use_tabular = tabular == "true" || tabular == "yes" || tabular == "1";
    int opts = (use_color ? benchmark::ConsoleReporter::OO_Color : 0) |
               (use_tabular ? benchmark::ConsoleReporter::OO_Tabular : 0);
    RatioReporter reporter(static_cast<benchmark::ConsoleReporter::OutputOptions>(opts));
    benchmark::RunSpecifiedBenchmarks(&reporter);
  }
  benchmark::Shutdown();
  weft_shutdown();
  return 0;
}
