/*
 * This file contains work stealing on OpenMP's threads: the registry of
 * deques, the search for a job (one's own newest, else another's oldest),
 * the sleep and wake-up of idle workers, and the help a joining thread gives
 * while the job it waits for runs elsewhere (steal.h).
 *
 * Sleep and wake-up. An idle worker announces itself (sleepers + 1), looks
 * at every deque once more, and sleeps on a futex word; a push that sees a
 * sleeper bumps the word and wakes one. The push reads `sleepers` without a
 * fence, so a push and a worker falling asleep at the same instant can miss
 * each other: the worker then sleeps until its deadline (WAKE_POLL_NS at
 * most). A push wakes no one while a worker is awake and looking for work
 * (`spinners`): that worker finds it, and a join that takes its job back
 * at once (a future started and got straight away) costs no wake-up at
 * all. Nothing is lost by that, only parallelism for a moment: the job
 * stays in its deque, where its owner takes it back at its join. A fence on
 * every push would cost more than the rare miss (a push is a few
 * nanoseconds). One wake-up is in flight at a time (`waking`), so a burst
 * of pushes makes one system call, not one each.
 */
#include "steal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../base/clock.h"
#include "../base/futex.h"
#include "../base/sys.h"

/* The longest an idle worker sleeps before it looks again (bounds a missed wake-up). */
#define WAKE_POLL_NS (1000 * 1000LL)

/* Deepest nesting of join help on one thread's stack. */
#define HELP_DEPTH_MAX 64

static struct {
  weft__deque *_Atomic slot[WEFT__WS_SLOTS];  /* made deques, in order; never freed */
  atomic_bool owned[WEFT__WS_SLOTS];          /* a thread holds slot[i] */
  atomic_uint nslots;                         /* slots made so far */
  pthread_mutex_t mu;                         /* serialises making a slot */
  WEFT__ALIGNED_CL _Atomic uint32_t sleepers; /* workers asleep or falling asleep */
  _Atomic uint32_t spinners;                  /* idle workers still looking for work, awake */
  atomic_bool waking;                         /* a wake-up is being sent */
  WEFT__ALIGNED_CL _Atomic uint32_t seq;      /* the futex word sleepers wait on */
} ws = {.mu = PTHREAD_MUTEX_INITIALIZER};

static __thread weft__deque *tls_own;
static __thread unsigned tls_slot;
static __thread uint32_t tls_rand;
static __thread unsigned tls_help_depth;

static pthread_key_t exit_key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;

/* A thread with a deque exits: its slot is free for the next thread; its jobs stay there to be stolen. */
static void thread_exit(void *arg) {
  unsigned i = (unsigned)(uintptr_t)arg - 1;
  weft__deque *d = atomic_load(&ws.slot[i]);
  atomic_store(&ws.owned[i], false);
  if (tls_own == d) tls_own = NULL;
  if (d && !weft__deque_empty(d)) weft__cpu_kick(); /* someone must still run them */
}

static void key_init(void) {
  if (pthread_key_create(&exit_key, thread_exit) != 0) weft__die("pthread_key_create failed");
}

weft__deque *weft__ws_mine(void) { return tls_own; }

weft__deque *weft__ws_own(void) {
  if (WEFT__LIKELY(tls_own != NULL)) return tls_own;
  pthread_once(&key_once, key_init);
  unsigned n = atomic_load_explicit(&ws.nslots, memory_order_acquire);
  for (unsigned i = 0; i < n; i++) { /* adopt a deque that an exited thread gave back */
    bool expect = false;
    if (!atomic_load_explicit(&ws.owned[i], memory_order_relaxed) &&
        atomic_compare_exchange_strong(&ws.owned[i], &expect, true)) {
      tls_slot = i;
      tls_own = atomic_load(&ws.slot[i]);
      break;
    }
  }
  if (!tls_own) {
    pthread_mutex_lock(&ws.mu);
    n = atomic_load(&ws.nslots);
    weft__deque *d = n < WEFT__WS_SLOTS ? weft__malloc_aligned(WEFT__CACHELINE, sizeof *d) : NULL;
    if (d) {
      weft__deque_init(d);
      atomic_store(&ws.owned[n], true);
      atomic_store(&ws.slot[n], d);
      atomic_store_explicit(&ws.nslots, n + 1, memory_order_release);
      tls_slot = n;
      tls_own = d;
    }
    pthread_mutex_unlock(&ws.mu);
    if (!d) return NULL;
  }
  if (pthread_setspecific(exit_key, (void *)(uintptr_t)(tls_slot + 1)) != 0) {
    atomic_store(&ws.owned[tls_slot], false);
    tls_own = NULL;
    return NULL;
  }
  tls_rand = (uint32_t)(tls_slot * 0x9E3779B9u) | 1u;
  return tls_own;
}

static uint32_t next_rand(void) {
  uint32_t x = tls_rand ? tls_rand : 0x2545F491u;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  tls_rand = x;
  return x;
}

static weft__job *unmark(weft__job *j) { return (weft__job *)((uintptr_t)j & ~WEFT__DEQUE_MARK); }

weft__job *weft__ws_find_own(weft__deque *own) {
  weft__job *j = weft__deque_take(own);
  return j ? unmark(j) : NULL;
}

weft__job *weft__ws_find(weft__deque *own) {
  if (own) {
    weft__job *j = weft__deque_take(own);
    if (j) return unmark(j);
  }
  return weft__ws_steal(own);
}

/* One pass over the other deques from a random one; marked_too: take marked items as well. */
static weft__job *steal_pass(weft__deque *own, unsigned n, bool marked_too) {
  unsigned start = next_rand() % n;
  for (unsigned k = 0; k < n; k++) {
    unsigned i = start + k < n ? start + k : start + k - n;
    weft__deque *d = atomic_load_explicit(&ws.slot[i], memory_order_acquire);
    if (!d || d == own) continue;
    for (int tries = 0; tries < 8; tries++) {
      weft__job *j = weft__deque_steal_from(d, marked_too);
      if (j == WEFT__STEAL_EMPTY) break;
      if (j != WEFT__STEAL_LOST) return unmark(j);
      weft__cpu_relax();
    }
  }
  return NULL;
}

weft__job *weft__ws_steal(weft__deque *own) {
  unsigned n = atomic_load_explicit(&ws.nslots, memory_order_acquire);
  if (n == 0) return NULL;
  weft__job *j = steal_pass(own, n, false);
  return j ? j : steal_pass(own, n, true);
}

bool weft__ws_push_last(weft__deque *own, weft__job *j) {
  return weft__deque_push(own, (weft__job *)((uintptr_t)j | WEFT__DEQUE_MARK));
}

bool weft__ws_take_back(weft__deque *own, weft__job *j, bool marked) {
  return weft__deque_take_if(own, marked ? (weft__job *)((uintptr_t)j | WEFT__DEQUE_MARK) : j);
}

bool weft__ws_all_empty(void) {
  unsigned n = atomic_load_explicit(&ws.nslots, memory_order_acquire);
  for (unsigned i = 0; i < n; i++) {
    weft__deque *d = atomic_load_explicit(&ws.slot[i], memory_order_acquire);
    if (d && !weft__deque_empty(d)) return false;
  }
  return true;
}

void weft__ws_spinning(bool on) {
  if (on)
    atomic_fetch_add_explicit(&ws.spinners, 1, memory_order_relaxed);
  else
    atomic_fetch_sub_explicit(&ws.spinners, 1, memory_order_relaxed);
}

void weft__ws_notify(void) {
  /* A worker that is awake and looking will find the job: no one need be woken (Go's runtime does the same).
   */
  if (WEFT__LIKELY(weft__load_relaxed(&ws.sleepers) == 0) || weft__load_relaxed(&ws.spinners) != 0) return;
  if (atomic_exchange_explicit(&ws.waking, true, memory_order_acquire)) return;
  atomic_fetch_add_explicit(&ws.seq, 1, memory_order_release);
  weft__futex_wake(&ws.seq, 1);
  atomic_store_explicit(&ws.waking, false, memory_order_release);
}

void weft__ws_notify_all(void) {
  atomic_fetch_add_explicit(&ws.seq, 1, memory_order_release);
  weft__futex_wake(&ws.seq, INT32_MAX);
}

void weft__ws_sleep(int64_t deadline_ns) {
  uint32_t seq = atomic_load_explicit(&ws.seq, memory_order_acquire);
  atomic_fetch_add_explicit(&ws.sleepers, 1, memory_order_seq_cst);
  if (weft__ws_all_empty()) {
    int64_t poll = weft__mono_ns() + WAKE_POLL_NS;
    (void)weft__futex_wait(&ws.seq, seq, deadline_ns < poll ? deadline_ns : poll);
  }
  atomic_fetch_sub_explicit(&ws.sleepers, 1, memory_order_relaxed);
}

bool weft__ws_help(bool (*done)(void *arg), void *arg) {
  if (tls_help_depth >= HELP_DEPTH_MAX) return done(arg);
  weft__deque *own = tls_own;
  int64_t idle_since = 0;
  for (;;) {
    if (done(arg)) return true;
    weft__job *j = weft__ws_find(own);
    if (j) {
      tls_help_depth++;
      j->run(j);
      tls_help_depth--;
      idle_since = 0;
      continue;
    }
    int64_t now = weft__mono_ns();
    if (!idle_since)
      idle_since = now;
    else if (now - idle_since > WEFT__WS_HELP_NS)
      return done(arg);
    for (int i = 0; i < 32; i++) weft__cpu_relax();
  }
}

void weft__ws_atfork_child(void) {
  pthread_mutex_init(&ws.mu, NULL);
  unsigned n = atomic_load(&ws.nslots);
  for (unsigned i = 0; i < n; i++) {
    weft__deque *d = atomic_load(&ws.slot[i]);
    if (d == tls_own) continue; /* the forking thread's own jobs survive with it */
    atomic_store(&d->top, 0);
    atomic_store(&d->bottom, 0);
    atomic_store(&ws.owned[i], false);
  }
  atomic_store(&ws.sleepers, 0);
  atomic_store(&ws.spinners, 0);
  atomic_store(&ws.waking, false);
  tls_help_depth = 0;
}
