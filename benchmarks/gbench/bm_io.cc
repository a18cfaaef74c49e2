/*
 * This file contains the echo I/O suite: a round trip of a 64-byte message
 * (the client writes it, the server reads it and writes it back, the client
 * reads the echo) over AF_UNIX SOCK_STREAM socketpairs, with weft's
 * fiber-aware I/O on fibers beside plain blocking sockets on pthreads in the
 * same binary. Every case reports wall time in ns per round trip (counter
 * ns_per_rt, and the time per iteration: an iteration is one round trip) and
 * items_per_second (round trips per second).
 *
 *   EchoFibers/carriers:1         client and server are two fibers (WEFT_BLOCKING
 *                                 futures) with weft_write/weft_read, both on one
 *                                 carrier: a read that finds nothing parks the fiber
 *   EchoFibers/carriers:2         the same, the fibers on two carriers (a wake-up
 *                                 crosses threads through the poller)
 *   EchoThreads                   the baseline: two pthreads, plain blocking
 *                                 read()/write()
 *   EchoWeftOnThreads             weft_read/weft_write called from two pthreads
 *                                 (they block in poll(2), as read/write would)
 *   EchoManyFibers/pairs:100      100 connections at once, a fiber per side, on the
 *                                 default carriers: ns per round trip of all of them
 *                                 together (total round trips per second)
 *   EchoManyThreads/pairs:100     the same with a pthread per side and plain
 *                                 blocking read()/write()
 *
 * Every connection is a socketpair(2), blocking: weft's calls use
 * MSG_DONTWAIT on sockets, so the descriptor's flags do not matter to them.
 * Short reads and writes are looped over until the 64 bytes have gone; the
 * client checks that the echo carries its sequence number.
 *
 * As in bm_sync, each case starts its parties once (two fibers or threads,
 * or one per side of every connection), and they run batches of kBatch
 * round trips (kManyRounds per connection in the Many cases) from a barrier.
 * Their time is manual: from the barrier to the end of the batch, wall
 * clock. For two carriers the first fiber holds its carrier until the
 * second has started, which then starts on the other carrier. Fiber cases
 * report carriers_used (the carriers their fibers ran on) and max_share
 * (the busiest carrier's share of the fibers); they are skipped when fibers
 * are unavailable.
 *
 * Run with --benchmark_repetitions=5 --benchmark_display_aggregates_only=true
 * and read the medians: on a small shared machine single runs vary by 2x.
 */
#include <benchmark/benchmark.h>

#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "carriers.h"
#include "weft.h"

namespace {

constexpr size_t kMsg = 64;
constexpr int64_t kBatch = 4000;     /* round trips per batch, one connection */
constexpr int64_t kManyRounds = 100; /* round trips per connection per batch, Many cases */

/* A party runs one batch: nullptr when it went well, else what failed (its End). */
using Party = void *(*)(void *);

struct Member {
  Party fn;
  void *arg;
};

/*
 * bm_sync's Duo for any number of parties: fibers or plain threads that live
 * for a whole case and run one batch each time run() is called, starting
 * together at a barrier. With `spread` (two fibers on two carriers), the
 * first party holds its carrier, without yielding, until the second has
 * started. The parties wait for each batch on one weft semaphore: a party
 * takes one unit per batch, and none can finish a batch before all have
 * taken theirs.
 */
class Team {
public:
  Team(bool fibers, bool spread, const std::vector<Member> &members)
      : fibers_(fibers), spread_(spread), n_(static_cast<int>(members.size())), slots_(members.size()),
        f_(members.size(), nullptr), t_(members.size()) {
    weft_sem_init(&go_, 0);
    weft_sem_init(&done_, 0);
    for (int i = 0; i < n_; i++) {
      slots_[i].team = this;
      slots_[i].m = members[i];
      bool ok = fibers ? weft_future_start(WEFT_BLOCKING, loop, &slots_[i], &f_[i]) == 0
                       : pthread_create(&t_[i], nullptr, loop, &slots_[i]) == 0;
      if (!ok) break;
      started_++;
    }
    int64_t give_up = weft_now_ns() + 5000000000;
    while (started_ == n_ && up_.load() < n_ && weft_now_ns() < give_up) weft_yield();
  }

  bool ok() const { return started_ == n_ && up_.load() == n_; }

  /* One batch: the seconds from the barrier (all have arrived) to the end (all are done). */
  double run() {
    arrived_.store(0);
    finished_.store(0);
    for (int i = 0; i < n_; i++) weft_sem_post(&go_);
    for (int i = 0; i < n_; i++) weft_sem_wait(&done_, -1);
    return static_cast<double>(t1_.load() - t0_.load()) * 1e-9;
  }

  /* The first party's failure (its End), or nullptr. */
  void *failure() const { return fail_.load(); }

  /* Distinct threads the parties ran on, and the largest share of the parties on one. */
  int threads_used(double *max_share) const {
    int used = 0, most = 0;
    for (int i = 0; i < n_; i++) {
      bool first = true;
      int same = 0;
      for (int j = 0; j < n_; j++) {
        if (!pthread_equal(slots_[i].thread, slots_[j].thread)) continue;
        if (j < i) first = false;
        same++;
      }
      if (first) used++;
      if (same > most) most = same;
    }
    *max_share = n_ ? static_cast<double>(most) / n_ : 0.0;
    return used;
  }

  ~Team() {
    quit_.store(true);
    for (int i = 0; i < started_; i++) weft_sem_post(&go_);
    for (int i = 0; i < started_; i++) {
      if (fibers_) {
        weft_future_get(f_[i], -1, nullptr);
        weft_future_free(f_[i]);
      } else {
        pthread_join(t_[i], nullptr);
      }
    }
    weft_sem_destroy(&go_);
    weft_sem_destroy(&done_);
  }

private:
  struct Slot {
    Team *team;
    Member m;
    pthread_t thread; /* the OS thread it runs on: a fiber's carrier (fibers never move) */
  };

  static void *loop(void *p) {
    auto *s = static_cast<Slot *>(p);
    Team *t = s->team;
    s->thread = pthread_self();
    t->up_.fetch_add(1);
    int64_t give_up = weft_now_ns() + 2000000000;
    while (t->spread_ && t->up_.load() < t->n_ && weft_now_ns() < give_up) {
    }
    for (;;) {
      weft_sem_wait(&t->go_, -1);
      if (t->quit_.load()) break;
      /* A start barrier: fibers (which may share a carrier) and a crowd of threads yield while they wait. */
      if (t->arrived_.fetch_add(1) == t->n_ - 1) {
        t->t0_.store(weft_now_ns());
      } else {
        while (t->arrived_.load() < t->n_)
          if (t->fibers_ || t->n_ > 2) weft_yield();
      }
      void *failed = s->m.fn(s->m.arg);
      if (failed) {
        void *none = nullptr;
        t->fail_.compare_exchange_strong(none, failed);
      }
      if (t->finished_.fetch_add(1) == t->n_ - 1) t->t1_.store(weft_now_ns());
      weft_sem_post(&t->done_);
    }
    return nullptr;
  }

  bool fibers_, spread_;
  int n_;
  weft_sem_t go_, done_;
  std::vector<Slot> slots_;
  std::vector<weft_future *> f_;
  std::vector<pthread_t> t_;
  int started_ = 0;
  std::atomic<int> up_{0};
  std::atomic<bool> quit_{false};
  std::atomic<int> arrived_{0}, finished_{0};
  std::atomic<int64_t> t0_{0}, t1_{0};
  std::atomic<void *> fail_{nullptr};
};

bool need_fibers(benchmark::State &state) {
  if (weft_fibers_available()) return true;
  state.SkipWithError("fibers unavailable (WEFT_FIBERS=0, or a build without them)");
  for (auto _ : state) {
  }
  return false;
}

/* --- the echo ------------------------------------------------------------------------------ */

/* One side of a connection. */
struct End {
  int fd = -1;
  bool weft = false;          /* weft_read/weft_write, else read/write */
  int64_t rounds = 0;         /* round trips per batch */
  const char *what = nullptr; /* the call that failed */
  int err = 0;                /* its negative errno; 0: the peer closed its end */
};

ssize_t transfer(const End &e, bool rd, char *p, size_t len) {
  if (e.weft) return rd ? weft_read(e.fd, p, len, -1) : weft_write(e.fd, p, len, -1);
  ssize_t r;
  do r = rd ? read(e.fd, p, len) : write(e.fd, p, len);
  while (r < 0 && errno == EINTR);
  return r < 0 ? -errno : r;
}

/* Record a failure and shut the socket, so that the peer stops too (end of stream, or EPIPE). */
void *fail(End &e, const char *what, int err) {
  e.what = what;
  e.err = err;
  shutdown(e.fd, SHUT_RDWR);
  return &e;
}

/* Move all kMsg bytes, looping over short transfers; false once failed. */
bool full(End &e, bool rd, char *buf) {
  for (size_t done = 0; done < kMsg;) {
    ssize_t r = transfer(e, rd, buf + done, kMsg - done);
    if (r <= 0) {
      fail(e, e.weft ? (rd ? "weft_read" : "weft_write") : (rd ? "read" : "write"), static_cast<int>(r));
      return false;
    }
    done += static_cast<size_t>(r);
  }
  return true;
}

void *client(void *arg) {
  auto *e = static_cast<End *>(arg);
  char buf[kMsg];
  std::memset(buf, 'w', sizeof buf);
  for (int64_t i = 0; i < e->rounds; i++) {
    std::memcpy(buf, &i, sizeof i);
    if (!full(*e, false, buf) || !full(*e, true, buf)) return e;
    int64_t got;
    std::memcpy(&got, buf, sizeof got);
    if (got != i) return fail(*e, "echo (wrong sequence number)", -EPROTO);
  }
  return nullptr;
}

void *server(void *arg) {
  auto *e = static_cast<End *>(arg);
  char buf[kMsg];
  for (int64_t i = 0; i < e->rounds; i++)
    if (!full(*e, true, buf) || !full(*e, false, buf)) return e;
  return nullptr;
}

struct Conn {
  End client, server;
};

/* The connections of a case: open() makes the socketpairs; the destructor closes them all. */
struct Conns {
  std::vector<Conn> c;

  int open(size_t n, bool weft_io, int64_t rounds) {
    c.resize(n);
    for (Conn &k : c) {
      int fds[2];
      if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return -errno;
      k.client.fd = fds[0];
      k.server.fd = fds[1];
      k.client.weft = k.server.weft = weft_io;
      k.client.rounds = k.server.rounds = rounds;
    }
    return 0;
  }

  ~Conns() {
    for (Conn &k : c) {
      if (k.client.fd >= 0) close(k.client.fd);
      if (k.server.fd >= 0) close(k.server.fd);
    }
  }
};

void run_echo(benchmark::State &state, bool fibers, bool weft_io, unsigned carriers, size_t pairs,
              int64_t rounds) {
  /* A plain write() to a peer that failed and shut its end raises SIGPIPE: take EPIPE instead. */
  signal(SIGPIPE, SIG_IGN);
  if (fibers) {
    set_carriers(carriers);
    if (!need_fibers(state)) {
      set_carriers(0);
      return;
    }
  }
  {
    Conns conns; /* declared first: closed only after the parties are gone */
    int rc = conns.open(pairs, weft_io, rounds);
    std::vector<Member> members;
    for (Conn &k : conns.c) {
      members.push_back({client, &k.client});
      members.push_back({server, &k.server});
    }
    if (rc != 0) {
      state.SkipWithError((std::string("socketpair: ") + weft_strerror(rc)).c_str());
    } else {
      Team team(fibers, fibers && carriers > 1 && pairs == 1, members);
      if (!team.ok()) {
        state.SkipWithError("could not start the parties");
      } else {
        double seconds = 0;
        while (state.KeepRunningBatch(static_cast<int64_t>(pairs) * rounds)) {
          double s = team.run();
          if (auto *e = static_cast<End *>(team.failure())) {
            std::string msg =
                std::string(e->what) + ": " + (e->err ? weft_strerror(e->err) : "the peer closed its end");
            state.SkipWithError(msg.c_str());
            break;
          }
          state.SetIterationTime(s);
          seconds += s;
        }
        double trips = static_cast<double>(state.iterations());
        state.SetItemsProcessed(state.iterations());
        state.counters["ns_per_rt"] = trips > 0 ? seconds * 1e9 / trips : 0.0;
        if (pairs > 1) state.counters["pairs"] = static_cast<double>(pairs);
        if (fibers) {
          double share;
          state.counters["carriers_used"] = static_cast<double>(team.threads_used(&share));
          state.counters["max_share"] = share;
        }
      }
    }
  }
  if (fibers) set_carriers(0);
}

void BM_EchoFibers(benchmark::State &state) {
  run_echo(state, true, true, static_cast<unsigned>(state.range(0)), 1, kBatch);
}
BENCHMARK(BM_EchoFibers)->Arg(1)->Arg(2)->ArgName("carriers")->UseManualTime();

void BM_EchoThreads(benchmark::State &state) { run_echo(state, false, false, 0, 1, kBatch); }
BENCHMARK(BM_EchoThreads)->UseManualTime();

void BM_EchoWeftOnThreads(benchmark::State &state) { run_echo(state, false, true, 0, 1, kBatch); }
BENCHMARK(BM_EchoWeftOnThreads)->UseManualTime();

void BM_EchoManyFibers(benchmark::State &state) {
  run_echo(state, true, true, 0, static_cast<size_t>(state.range(0)), kManyRounds);
}
BENCHMARK(BM_EchoManyFibers)->Arg(100)->ArgName("pairs")->UseManualTime();

void BM_EchoManyThreads(benchmark::State &state) {
  run_echo(state, false, false, 0, static_cast<size_t>(state.range(0)), kManyRounds);
}
BENCHMARK(BM_EchoManyThreads)->Arg(100)->ArgName("pairs")->UseManualTime();

} // namespace

BENCHMARK_MAIN();
