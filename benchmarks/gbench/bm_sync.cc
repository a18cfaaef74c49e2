/*
 * This file contains the synchronisation suite: weft's channel and mutex,
 * each beside the pthread code a C programmer would otherwise write, in the
 * same binary. Every case reports wall time in ns per operation (the work
 * hops between threads and fibers, so the main thread's CPU time says
 * nothing).
 *
 *   ChanPingPongFibers/carriers:1   a round trip (send, then receive the reply)
 *                                   between two fibers over two unbuffered
 *                                   weft channels, both fibers on one carrier
 *   ChanPingPongFibers/carriers:2   the same, the fibers on two carriers
 *                                   (a wake-up crosses threads)
 *   ChanPingPongThreads             the same weft channels between two pthreads
 *   PthreadQueuePingPong            the baseline: two pthreads, two one-slot
 *                                   queues of pthread_mutex + pthread_cond
 *   MutexHandoffFibers              two fibers on two carriers, each taking a
 *                                   weft mutex around a counter increment in a
 *                                   loop: ns per lock+unlock
 *   MutexHandoffThreads             the same between two pthreads
 *   PthreadMutexHandoff             the baseline: pthread_mutex, two pthreads
 *   MutexCrowdFibers/hogs:H         1000 fibers of a map, each taking one weft
 *                                   mutex twice around 15 us of CPU and a 5 ms
 *                                   sleep, 20 times, beside H spinning threads:
 *                                   ms per map and the mutex's parks per lock
 *                                   (a convoy)
 *   MutexUncontended                lock+unlock of a weft mutex, one thread
 *   MutexUncontendedFiber           the same on a fiber
 *   PthreadMutexUncontended         the baseline: pthread_mutex, one thread
 *   SemPostWaitUncontended          post+wait of a weft semaphore, one thread
 *   ChanSendRecvUncontended         send+recv on a buffered channel, one thread
 *
 * Two-party cases run in batches of kBatch round trips (or of kBatch lock
 * pairs per contender) on a Duo: two fibers or threads started once per
 * case, which start each batch together at a barrier. Their time is
 * manual: from the barrier to the end of the batch, wall clock, so the
 * wake-ups that start a batch are left out (they would otherwise let one
 * party run alone). For two carriers the first fiber holds its carrier
 * until the second has started, which then starts on the other carrier.
 * Fiber cases are skipped when fibers are unavailable.
 *
 * Run with --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
 * and read the medians: on a small shared machine single runs vary by 2x.
 */
#include <benchmark/benchmark.h>

#include <pthread.h>

#include <atomic>
#include <cstdint>

#include "carriers.h"
#include "weft.h"

namespace {

constexpr int64_t kBatch = 4000;

using Party = void *(*)(void *);

/*
 * Two parties (two fibers, or two plain threads) that live for a whole case
 * and run one batch each time run() is called: both call their function
 * once, then report back. Starting them once keeps fiber start-up and
 * stealing out of the timings. With `spread` (fibers on two carriers), the
 * first party holds its carrier, without yielding, until the second has
 * started, so the second starts on the other carrier; fibers never move
 * afterwards. The parties wait for each batch on a weft semaphore.
 */
class Duo {
public:
  Duo(bool fibers, bool spread, Party a, Party b, void *arg) : fibers_(fibers), spread_(spread), arg_(arg) {
    weft_sem_init(&go_[0], 0);
    weft_sem_init(&go_[1], 0);
    weft_sem_init(&done_, 0);
    slots_[0] = {this, 0, a};
    slots_[1] = {this, 1, b};
    for (int i = 0; i < 2; i++) {
      bool ok = fibers ? weft_future_start(WEFT_BLOCKING, loop, &slots_[i], &f_[i]) == 0
                       : pthread_create(&t_[i], nullptr, loop, &slots_[i]) == 0;
      if (ok) started_++;
    }
    int64_t give_up = weft_now_ns() + 5000000000;
    while (started_ == 2 && up_.load() < 2 && weft_now_ns() < give_up) {
    }
  }

  bool ok() const { return started_ == 2 && up_.load() == 2; }

  /*
   * One batch: both parties run their function once, starting together.
   * Returns the seconds from the start (both parties have arrived) to the
   * end (both are done): the wake-ups that start a batch are left out.
   */
  double run() {
    arrived_.store(0);
    finished_.store(0);
    weft_sem_post(&go_[0]);
    weft_sem_post(&go_[1]);
    weft_sem_wait(&done_, -1);
    weft_sem_wait(&done_, -1);
    return static_cast<double>(t1_.load() - t0_.load()) * 1e-9;
  }

  ~Duo() {
    quit_.store(true);
    for (int i = 0; i < started_; i++) weft_sem_post(&go_[i]);
    for (int i = 0; i < started_; i++) {
      if (fibers_) {
        weft_future_get(f_[i], -1, nullptr);
        weft_future_free(f_[i]);
      } else {
        pthread_join(t_[i], nullptr);
      }
    }
    weft_sem_destroy(&go_[0]);
    weft_sem_destroy(&go_[1]);
    weft_sem_destroy(&done_);
  }

private:
  struct Slot {
    Duo *duo;
    int idx;
    Party fn;
  };

  static void *loop(void *p) {
    auto *s = static_cast<Slot *>(p);
    Duo *d = s->duo;
    d->up_.fetch_add(1);
    int64_t give_up = weft_now_ns() + 2000000000;
    while (d->spread_ && d->up_.load() < 2 && weft_now_ns() < give_up) {
    }
    for (;;) {
      weft_sem_wait(&d->go_[s->idx], -1);
      if (d->quit_.load()) break;
      /* A start barrier: a fiber yields while it waits (its partner may share its carrier). */
      if (d->arrived_.fetch_add(1) == 1) {
        d->t0_.store(weft_now_ns());
      } else {
        while (d->arrived_.load() < 2)
          if (d->fibers_) weft_yield();
      }
      s->fn(d->arg_);
      if (d->finished_.fetch_add(1) == 1) d->t1_.store(weft_now_ns());
      weft_sem_post(&d->done_);
    }
    return nullptr;
  }

  bool fibers_, spread_;
  void *arg_;
  weft_sem_t go_[2], done_;
  Slot slots_[2];
  weft_future *f_[2] = {nullptr, nullptr};
  pthread_t t_[2];
  int started_ = 0;
  std::atomic<int> up_{0};
  std::atomic<bool> quit_{false};
  std::atomic<int> arrived_{0}, finished_{0};
  std::atomic<int64_t> t0_{0}, t1_{0};
};

bool need_fibers(benchmark::State &state) {
  if (weft_fibers_available()) return true;
  state.SkipWithError("fibers unavailable (WEFT_FIBERS=0, or a build without them)");
  for (auto _ : state) {
  }
  return false;
}

/* --- channel ping-pong ------------------------------------------------------------------ */

struct PingPong {
  weft_chan_t *there = nullptr, *back = nullptr;
};

void *ping(void *arg) {
  auto *p = static_cast<PingPong *>(arg);
  for (int64_t i = 0; i < kBatch; i++) {
    int64_t v = i;
    weft_chan_send(p->there, &v, -1);
    weft_chan_recv(p->back, &v, -1);
    benchmark::DoNotOptimize(v);
  }
  return nullptr;
}

void *pong(void *arg) {
  auto *p = static_cast<PingPong *>(arg);
  for (int64_t i = 0; i < kBatch; i++) {
    int64_t v;
    weft_chan_recv(p->there, &v, -1);
    weft_chan_send(p->back, &v, -1);
  }
  return nullptr;
}

/* Run the case's batches on a Duo; `per_batch` operations each. */
void run_duo(benchmark::State &state, bool fibers, unsigned carriers, Party a, Party b, void *arg,
             int64_t per_batch) {
  if (fibers) {
    set_carriers(carriers);
    if (!need_fibers(state)) {
      set_carriers(0);
      return;
    }
  }
  {
    Duo duo(fibers, fibers && carriers > 1, a, b, arg);
    if (!duo.ok()) {
      state.SkipWithError("could not start the two parties");
    } else {
      while (state.KeepRunningBatch(per_batch)) state.SetIterationTime(duo.run());
    }
  }
  if (fibers) set_carriers(0);
}

void chan_ping_pong(benchmark::State &state, bool fibers, unsigned carriers) {
  PingPong p;
  weft_chan_create(0, sizeof(int64_t), &p.there);
  weft_chan_create(0, sizeof(int64_t), &p.back);
  run_duo(state, fibers, carriers, ping, pong, &p, kBatch);
  weft_chan_free(p.there);
  weft_chan_free(p.back);
}

void BM_ChanPingPongFibers(benchmark::State &state) {
  chan_ping_pong(state, true, static_cast<unsigned>(state.range(0)));
}
BENCHMARK(BM_ChanPingPongFibers)->Arg(1)->Arg(2)->ArgName("carriers")->UseManualTime();

void BM_ChanPingPongThreads(benchmark::State &state) { chan_ping_pong(state, false, 0); }
BENCHMARK(BM_ChanPingPongThreads)->UseManualTime();

/* The baseline: a one-slot queue of pthread_mutex + pthread_cond, as one would write it. */
struct PQueue {
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t not_empty = PTHREAD_COND_INITIALIZER;
  pthread_cond_t not_full = PTHREAD_COND_INITIALIZER;
  bool full = false;
  int64_t v = 0;

  void put(int64_t x) {
    pthread_mutex_lock(&mu);
    while (full) pthread_cond_wait(&not_full, &mu);
    v = x;
    full = true;
    pthread_cond_signal(&not_empty);
    pthread_mutex_unlock(&mu);
  }
  int64_t get() {
    pthread_mutex_lock(&mu);
    while (!full) pthread_cond_wait(&not_empty, &mu);
    int64_t x = v;
    full = false;
    pthread_cond_signal(&not_full);
    pthread_mutex_unlock(&mu);
    return x;
  }
};

struct PPing {
  PQueue there, back;
};

void *pq_ping(void *arg) {
  auto *p = static_cast<PPing *>(arg);
  for (int64_t i = 0; i < kBatch; i++) {
    p->there.put(i);
    benchmark::DoNotOptimize(p->back.get());
  }
  return nullptr;
}

void *pq_pong(void *arg) {
  auto *p = static_cast<PPing *>(arg);
  for (int64_t i = 0; i < kBatch; i++) p->back.put(p->there.get());
  return nullptr;
}

void BM_PthreadQueuePingPong(benchmark::State &state) {
  PPing p;
  run_duo(state, false, 0, pq_ping, pq_pong, &p, kBatch);
}
BENCHMARK(BM_PthreadQueuePingPong)->UseManualTime();

/* --- mutex hand-off: two contenders ------------------------------------------------------- */

struct Contend {
  weft_mutex_t m = WEFT_MUTEX_INITIALIZER;
  pthread_mutex_t pm = PTHREAD_MUTEX_INITIALIZER;
  int64_t counter = 0; /* under the mutex */
};

void *contend_weft(void *arg) {
  auto *c = static_cast<Contend *>(arg);
  for (int64_t i = 0; i < kBatch; i++) {
    weft_mutex_lock(&c->m);
    c->counter++;
    weft_mutex_unlock(&c->m);
  }
  return nullptr;
}

void *contend_pthread(void *arg) {
  auto *c = static_cast<Contend *>(arg);
  for (int64_t i = 0; i < kBatch; i++) {
    pthread_mutex_lock(&c->pm);
    c->counter++;
    pthread_mutex_unlock(&c->pm);
  }
  return nullptr;
}

void mutex_handoff(benchmark::State &state, bool fibers, Party party) {
  Contend c;
  run_duo(state, fibers, 2, party, party, &c, 2 * kBatch);
  if (c.counter != static_cast<int64_t>(state.iterations())) state.SkipWithError("lost increments");
}

void BM_MutexHandoffFibers(benchmark::State &state) { mutex_handoff(state, true, contend_weft); }
BENCHMARK(BM_MutexHandoffFibers)->UseManualTime();

void BM_MutexHandoffThreads(benchmark::State &state) { mutex_handoff(state, false, contend_weft); }
BENCHMARK(BM_MutexHandoffThreads)->UseManualTime();

void BM_PthreadMutexHandoff(benchmark::State &state) { mutex_handoff(state, false, contend_pthread); }
BENCHMARK(BM_PthreadMutexHandoff)->UseManualTime();

/* --- a crowd on one mutex: the HTTP client's pool -------------------------------------------- */

/*
 * kCrowd fibers of a BLOCKING map on all carriers, each kRounds times: take
 * the mutex for a counter increment, let it go, stay on the CPU for kWorkNs
 * (a request's own work), park for kIoNs (an I/O wait's stand-in), take it
 * again, let it go: the shape of weft-bench http's one keep-alive pool (take
 * a connection, wait for the response, give it back). With hogs:N, N plain
 * threads spin through the batch beside the carriers, as nginx's workers did,
 * and the kernel preempts carrier threads. Counters: mutex_parks_per_lock, the parks
 * beyond the kRounds sleeps of each fiber per lock taken (0 when nobody ever
 * waits; a convoy makes it near 1), and max_parks_per_lock, the worst batch.
 */
constexpr int kCrowd = 1000, kRounds = 20;
constexpr int64_t kIoNs = 5000000, kWorkNs = 15000;

/* Stay on the CPU for ns (a request's own work: its system calls, its parsing). */
void busy(int64_t ns) {
  int64_t end = weft_now_ns() + ns;
  while (weft_now_ns() < end) {
  }
}

struct Crowd {
  weft_mutex_t m = WEFT_MUTEX_INITIALIZER;
  int64_t counter = 0; /* under m */
};

int crowd_elem(void *ctx, size_t) {
  auto *c = static_cast<Crowd *>(ctx);
  for (int r = 0; r < kRounds; r++) {
    weft_mutex_lock(&c->m);
    c->counter++;
    weft_mutex_unlock(&c->m);
    busy(kWorkNs);
    weft_sleep_ns(kIoNs);
    weft_mutex_lock(&c->m);
    c->counter++;
    weft_mutex_unlock(&c->m);
  }
  return 0;
}

void *hog(void *arg) {
  auto *stop = static_cast<std::atomic<bool> *>(arg);
  while (!stop->load(std::memory_order_relaxed)) {
  }
  return nullptr;
}

void BM_MutexCrowdFibers(benchmark::State &state) {
  if (!weft_fibers_available()) {
    state.SkipWithError("fibers are not available");
    return;
  }
  int hogs = static_cast<int>(state.range(0));
  Crowd c;
  weft_pmap_opts o = WEFT_PMAP_OPTS_INIT;
  o.kind = WEFT_BLOCKING;
  o.max_parallel = kCrowd;
  double parks = 0, worst = 0;
  int64_t batches = 0;
  for (auto _ : state) {
    std::atomic<bool> stop{false};
    pthread_t t[8];
    int started = 0;
    for (int i = 0; i < hogs && i < 8; i++)
      if (pthread_create(&t[started], nullptr, hog, &stop) == 0) started++;
    weft_stats a, b;
    weft_get_stats(&a);
    int rc = weft_pmap(kCrowd, crowd_elem, &c, &o);
    weft_get_stats(&b);
    stop.store(true);
    for (int i = 0; i < started; i++) pthread_join(t[i], nullptr);
    if (rc != 0) {
      state.SkipWithError("weft_pmap failed");
      break;
    }
    double locks = 2.0 * kCrowd * kRounds;
    double p = (static_cast<double>(b.parks - a.parks) - static_cast<double>(kCrowd) * kRounds) / locks;
    parks += p;
    if (p > worst) worst = p;
    batches++;
  }
  if (c.counter != 2LL * kCrowd * kRounds * batches) state.SkipWithError("lost increments");
  state.counters["mutex_parks_per_lock"] = batches ? parks / static_cast<double>(batches) : 0;
  state.counters["max_parks_per_lock"] = worst;
  state.SetItemsProcessed(2 * kCrowd * kRounds * batches);
}
BENCHMARK(BM_MutexCrowdFibers)->Arg(0)->Arg(2)->ArgName("hogs")->UseRealTime()->Unit(benchmark::kMillisecond);

/* --- uncontended ------------------------------------------------------------------------------ */

void BM_MutexUncontended(benchmark::State &state) {
  weft_mutex_t m = WEFT_MUTEX_INITIALIZER;
  for (auto _ : state) {
    weft_mutex_lock(&m);
    benchmark::ClobberMemory();
    weft_mutex_unlock(&m);
  }
}
BENCHMARK(BM_MutexUncontended);

struct FiberRun {
  benchmark::State *state;
  void (*body)(benchmark::State &);
};

void *fiber_body(void *arg) {
  auto *r = static_cast<FiberRun *>(arg);
  r->body(*r->state);
  return nullptr;
}

void BM_MutexUncontendedFiber(benchmark::State &state) {
  if (!need_fibers(state)) return;
  FiberRun r{&state, BM_MutexUncontended};
  weft_future *f;
  if (weft_future_start(WEFT_BLOCKING, fiber_body, &r, &f) != 0) {
    state.SkipWithError("no future");
    return;
  }
  weft_future_get(f, -1, nullptr);
  weft_future_free(f);
}
BENCHMARK(BM_MutexUncontendedFiber)->UseRealTime();

void BM_PthreadMutexUncontended(benchmark::State &state) {
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  for (auto _ : state) {
    pthread_mutex_lock(&m);
    benchmark::ClobberMemory();
    pthread_mutex_unlock(&m);
  }
}
BENCHMARK(BM_PthreadMutexUncontended);

void BM_SemPostWaitUncontended(benchmark::State &state) {
  weft_sem_t s;
  weft_sem_init(&s, 0);
  for (auto _ : state) {
    weft_sem_post(&s);
    weft_sem_wait(&s, -1);
  }
  weft_sem_destroy(&s);
}
BENCHMARK(BM_SemPostWaitUncontended);

void BM_ChanSendRecvUncontended(benchmark::State &state) {
  weft_chan_t *ch;
  weft_chan_create(16, sizeof(int64_t), &ch);
  int64_t v = 1;
  for (auto _ : state) {
    weft_chan_send(ch, &v, -1);
    weft_chan_recv(ch, &v, -1);
    benchmark::DoNotOptimize(v);
  }
  weft_chan_free(ch);
}
BENCHMARK(BM_ChanSendRecvUncontended);

} // namespace

BENCHMARK_MAIN();
