/*
 * This file contains the synchronisation suite: weft's channel and mutex,
 * each beside the pthread code a C programmer would otherwise write, in the
 * same binary. Every case reports wall time per operation (the work hops
 * between threads and fibers, so the main thread's CPU time says nothing).
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
 *   MutexUncontended                lock+unlock of a weft mutex, one thread
 *   MutexUncontendedFiber           the same on a fiber
 *   PthreadMutexUncontended         the baseline: pthread_mutex, one thread
 *   SemPostWaitUncontended          post+wait of a weft semaphore, one thread
 *   ChanSendRecvUncontended         send+recv on a buffered channel, one thread
 *
 * Two-party cases run in batches (KeepRunningBatch): each batch starts its
 * two fibers or threads, which do the whole batch, and joins them; the
 * start-up is a few microseconds against a batch of thousands of
 * operations. For two carriers, the first fiber spins without yielding
 * until the second has started, so the second starts on the other carrier.
 * Fiber cases are skipped when fibers are unavailable.
 */
#include <benchmark/benchmark.h>

#include <pthread.h>

#include <atomic>
#include <cstdint>

#include "weft.h"

namespace {

constexpr int64_t kBatch = 4000;

/* Give the fiber runtime `n` carriers (0: the default) from the next start on. */
void set_carriers(unsigned n) {
  weft_shutdown();
  weft_config c;
  weft_config_init(&c);
  c.carriers = n;
  weft_configure(&c);
}

/* The start of a two-party batch: with `spread`, the first party holds its carrier until the second runs. */
struct Pair {
  std::atomic<int> started{0};
  bool spread = false;
  void arrive() {
    started.fetch_add(1);
    if (!spread) return;
    int64_t give_up = weft_now_ns() + 2000000000;
    while (started.load() < 2 && weft_now_ns() < give_up) {
    }
  }
};

using Party = void *(*)(void *);

/* Run a(arg) and b(arg) as two blocking futures (fibers) and wait for both; false when they could not run. */
bool run_fibers(Party a, Party b, void *arg) {
  weft_future *fa, *fb;
  if (weft_future_start(WEFT_BLOCKING, a, arg, &fa) != 0) return false;
  if (weft_future_start(WEFT_BLOCKING, b, arg, &fb) != 0) {
    weft_future_get(fa, -1, nullptr);
    weft_future_free(fa);
    return false;
  }
  bool ok = weft_future_get(fa, -1, nullptr) == 0 && weft_future_get(fb, -1, nullptr) == 0;
  weft_future_free(fa);
  weft_future_free(fb);
  return ok;
}

bool run_threads(Party a, Party b, void *arg) {
  pthread_t ta, tb;
  if (pthread_create(&ta, nullptr, a, arg) != 0) return false;
  if (pthread_create(&tb, nullptr, b, arg) != 0) {
    pthread_join(ta, nullptr);
    return false;
  }
  pthread_join(ta, nullptr);
  pthread_join(tb, nullptr);
  return true;
}

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
  int64_t n = 0;
  Pair pair;
};

void *ping(void *arg) {
  auto *p = static_cast<PingPong *>(arg);
  p->pair.arrive();
  for (int64_t i = 0; i < p->n; i++) {
    int64_t v = i;
    weft_chan_send(p->there, &v, -1);
    weft_chan_recv(p->back, &v, -1);
    benchmark::DoNotOptimize(v);
  }
  return nullptr;
}

void *pong(void *arg) {
  auto *p = static_cast<PingPong *>(arg);
  p->pair.arrive();
  for (int64_t i = 0; i < p->n; i++) {
    int64_t v;
    weft_chan_recv(p->there, &v, -1);
    weft_chan_send(p->back, &v, -1);
  }
  return nullptr;
}

void chan_ping_pong(benchmark::State &state, bool fibers, unsigned carriers) {
  if (fibers) {
    set_carriers(carriers);
    if (!need_fibers(state)) return;
  }
  weft_chan_t *there, *back;
  weft_chan_create(0, sizeof(int64_t), &there);
  weft_chan_create(0, sizeof(int64_t), &back);
  while (state.KeepRunningBatch(kBatch)) {
    PingPong p;
    p.there = there;
    p.back = back;
    p.n = kBatch;
    p.pair.spread = fibers && carriers > 1;
    if (!(fibers ? run_fibers(ping, pong, &p) : run_threads(ping, pong, &p))) {
      state.SkipWithError("could not start the two parties");
      break;
    }
  }
  weft_chan_free(there);
  weft_chan_free(back);
  if (fibers) set_carriers(0);
}

void BM_ChanPingPongFibers(benchmark::State &state) {
  chan_ping_pong(state, true, static_cast<unsigned>(state.range(0)));
}
BENCHMARK(BM_ChanPingPongFibers)->Arg(1)->Arg(2)->ArgName("carriers")->UseRealTime();

void BM_ChanPingPongThreads(benchmark::State &state) { chan_ping_pong(state, false, 0); }
BENCHMARK(BM_ChanPingPongThreads)->UseRealTime();

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
  int64_t n = 0;
};

void *pq_ping(void *arg) {
  auto *p = static_cast<PPing *>(arg);
  for (int64_t i = 0; i < p->n; i++) {
    p->there.put(i);
    benchmark::DoNotOptimize(p->back.get());
  }
  return nullptr;
}

void *pq_pong(void *arg) {
  auto *p = static_cast<PPing *>(arg);
  for (int64_t i = 0; i < p->n; i++) p->back.put(p->there.get());
  return nullptr;
}

void BM_PthreadQueuePingPong(benchmark::State &state) {
  while (state.KeepRunningBatch(kBatch)) {
    PPing p;
    p.n = kBatch;
    run_threads(pq_ping, pq_pong, &p);
  }
}
BENCHMARK(BM_PthreadQueuePingPong)->UseRealTime();

/* --- mutex hand-off: two contenders ------------------------------------------------------- */

struct Contend {
  weft_mutex_t m = WEFT_MUTEX_INITIALIZER;
  pthread_mutex_t pm = PTHREAD_MUTEX_INITIALIZER;
  int64_t n = 0;       /* lock+unlock pairs per contender */
  int64_t counter = 0; /* under the mutex */
  Pair pair;
};

void *contend_weft(void *arg) {
  auto *c = static_cast<Contend *>(arg);
  c->pair.arrive();
  for (int64_t i = 0; i < c->n; i++) {
    weft_mutex_lock(&c->m);
    c->counter++;
    weft_mutex_unlock(&c->m);
  }
  return nullptr;
}

void *contend_pthread(void *arg) {
  auto *c = static_cast<Contend *>(arg);
  c->pair.arrive();
  for (int64_t i = 0; i < c->n; i++) {
    pthread_mutex_lock(&c->pm);
    c->counter++;
    pthread_mutex_unlock(&c->pm);
  }
  return nullptr;
}

void mutex_handoff(benchmark::State &state, bool fibers, Party party) {
  if (fibers) {
    set_carriers(2);
    if (!need_fibers(state)) return;
  }
  while (state.KeepRunningBatch(2 * kBatch)) {
    Contend c;
    c.n = kBatch;
    c.pair.spread = fibers;
    if (!(fibers ? run_fibers(party, party, &c) : run_threads(party, party, &c)) || c.counter != 2 * kBatch) {
      state.SkipWithError("lost increments, or the contenders could not start");
      break;
    }
  }
  if (fibers) set_carriers(0);
}

void BM_MutexHandoffFibers(benchmark::State &state) { mutex_handoff(state, true, contend_weft); }
BENCHMARK(BM_MutexHandoffFibers)->UseRealTime();

void BM_MutexHandoffThreads(benchmark::State &state) { mutex_handoff(state, false, contend_weft); }
BENCHMARK(BM_MutexHandoffThreads)->UseRealTime();

void BM_PthreadMutexHandoff(benchmark::State &state) { mutex_handoff(state, false, contend_pthread); }
BENCHMARK(BM_PthreadMutexHandoff)->UseRealTime();

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
