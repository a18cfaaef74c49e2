/*
 * This file contains weft_mutex_t: a non-recursive sleeping lock that
 * fibers and plain threads take alike. A fiber that has to wait parks and
 * frees its carrier; a thread sleeps on its waiter's futex word.
 *
 * ==== Fields and who owns them ================================================
 *
 *   state_   LOCKED (bit 0): someone holds the mutex. WAITERS (bit 1): the wait
 *            list is not empty. Atomic. LOCKED is taken by CAS from anywhere
 *            (lock, trylock, the spin) and given up by the holder; WAITERS is
 *            set and cleared only under lock_, so "WAITERS set" always means
 *            "someone is on the list".
 *   lock_    the word lock (base/lock.h) that guards head_, tail_ and WAITERS.
 *   head_,   the FIFO of parked lockers (struct mwait), under lock_.
 *   tail_
 *   owner_   the holder's identity (weft__sync_self: its fiber or its thread).
 *            Atomic, relaxed: the holder writes it just after it takes LOCKED
 *            and clears it just before it lets LOCKED go, so a caller can only
 *            ever read its own identity there while it holds the mutex
 *            (coherence: it wrote it, and nobody writes it before the holder
 *            releases LOCKED). That is all owner_ is used for: -EPERM on an
 *            unlock by someone else, -EDEADLK on a relock.
 *
 * ==== Lock ====================================================================
 *
 * One CAS 0 -> LOCKED (acquire; pairs with the release that gave the mutex
 * up). When that fails: a short spin on LOCKED (below), then under lock_ one
 * CAS that either takes the mutex after all (it came free meanwhile) or sets
 * WAITERS; then queue a waiter, let lock_ go, and wait. Because taking
 * LOCKED and setting WAITERS are the same CAS under lock_, an unlocker either
 * sees WAITERS (and wakes someone) or leaves the mutex free for this locker:
 * a wake-up cannot be lost.
 *
 * ==== Unlock ==================================================================
 *
 * Without waiters: one CAS LOCKED -> 0 (release). With waiters: under lock_,
 * pop the first waiter and resolve it WOKEN (the wake-up itself after lock_
 * is let go: sync.h, "Waking after the lock"). A mutex waiter never leaves
 * on its own (lock has no deadline and is not a cancellation point), so the
 * resolve always succeeds. Then one of two policies:
 *
 *  - barging: state_ loses LOCKED; the woken waiter competes for it with
 *    everyone else (newcomers that spin win often, which keeps the lock busy:
 *    no convoy). A waiter that loses goes back to the FRONT of the list.
 *  - hand-off: state_ keeps LOCKED and the waiter owns the mutex when it
 *    wakes (fair, but every hand-off waits for a wake-up: while the new owner
 *    is being scheduled, nobody can hold the lock; a convoy).
 *
 * weft barges, and hands off only to a waiter that has waited for
 * HANDOFF_NS (1 ms) already (20 ms for a fiber of another carrier than the
 * unlocking fiber's: "Convoys" below): Go's sync.Mutex starvation mode, which bounds
 * how long a waiter can be overtaken while keeping barging's throughput.
 * Measured with bm_sync's mutex hand-off cases (two contenders taking the
 * mutex around a counter increment in a loop; ns per lock+unlock pair; the
 * pure policies built with -DWEFT__MUTEX_HANDOFF_NS=0 and =INT64_MAX; a
 * 2-vCPU VM shared with other jobs, load 7 to 34 during the runs: the median
 * of 5 rounds, each the median of 3 repetitions, rounds interleaved):
 *
 *     contenders      always hand-off   always barge   barge, hand-off after 1 ms
 *     2 fibers              729               47                 39
 *     2 threads             230               64                 76
 *     pthread_mutex between the same 2 threads, same runs: 35 to 77
 *
 * Hand-off loses by 3x (threads) to 15x (fibers), and its worst rounds
 * reached 7 us per pair: every pass of the lock waits for a wake-up. The
 * two barging variants are within the noise of each other; the 1 ms rule
 * costs nothing measurable and keeps a waiter from being overtaken for
 * ever (test_sync's mutex_no_starvation).
 *
 * ==== Spinning ================================================================
 *
 * A holder on another CPU usually lets go within a few hundred nanoseconds,
 * far sooner than a park and a wake-up (microseconds here, tens of them on
 * a busy VM), so a locker spins a little on LOCKED before it queues. A
 * fiber spins less than a thread: while it spins, no other fiber of its
 * carrier can run (the holder may be one of them, and cannot let go until
 * the spinner parks), and its own park is cheap (a switch, not a system
 * call). 64 iterations of pause (45 ns each on this machine's AMD EPYC:
 * about 3 us) for a thread, 16 for a fiber. On 2 cores the count hardly
 * matters in the hand-off case (same runs as above, ns per pair):
 *
 *     fiber spin 0 / 16 / 64:      38 / 39 / 40   (2 fibers)
 *     thread spin 16 / 64 / 256:   71 / 76 / 62   (2 threads)
 *
 * all within the noise, so the counts stay short: a long spin only takes
 * the CPU from the holder and from everyone else on a small machine.
 *
 * ==== Convoys, and the hand-off across carriers ================================
 *
 * Barging keeps two contenders out of a convoy, but not a crowd: bm_sync's
 * MutexCrowdFibers (1000 fibers of a map on both carriers, each taking the
 * mutex twice around a 15 us stay on the CPU and a 5 ms sleep, 20 times)
 * parks once per 2,000 to 10,000 locks in most maps, but in some maps most
 * locks parked (0.48 to 0.94 parks a lock over the whole map), above all
 * beside two spinning threads (hogs:2) that the kernel runs in the
 * carriers' place now and then. weft-bench http's single keep-alive pool
 * (docs/benchmarks.md, section 16) stayed in such a state for whole
 * 100,000-request repetitions. Counted in lock_slow, such a map is a
 * hand-off chain: 35,504 of 35,656 queued lockers were handed the mutex.
 * A waiter handed the mutex holds it before it runs; when it lives on
 * another carrier than the unlocker, it runs only once that carrier gets to
 * it (after the fiber running there, or after the kernel gives that
 * carrier's thread the CPU back), and everyone who comes to the mutex
 * meanwhile parks and in turn waits past HANDOFF_NS, so is handed it too.
 *
 * So a fiber that unlocks hands the mutex to a waiting fiber of another
 * carrier only once that one has waited HANDOFF_FAR_NS (20 ms); before
 * that, the far waiter is woken to compete, as under barging. A waiter of
 * the unlocker's own carrier is handed the mutex after HANDOFF_NS as
 * before (it runs at the unlocker's next switch: woken first, sync.h), and
 * so is any waiter that a thread unlocks for, and a thread waiter (it runs
 * as soon as the kernel wakes it). Over 27 repetitions of hogs:2 in two
 * runs, alternating builds, a repetition had a convoy map (over 0.48 parks
 * a lock) in 14 before and 1 after; the two-contender hand-off cases did
 * not move. Neither extreme does this: built never to hand off, or (Go's
 * order) letting LOCKED go before lock_ is taken in the slow unlock, the
 * mutex convoyed as often as the shipped one; waking every waiter at the
 * front of its carrier's queue did not help either. The price: a fiber can
 * be overtaken by the fibers of another carrier for up to 20 ms, not 1 ms
 * (test_sync's mutex_no_starvation_across_carriers).
 *
 * ==== Destroying right after the last unlock ==================================
 *
 * POSIX allows `lock; unlock; destroy; free` in one thread as soon as no one
 * else uses the mutex, and the glibc bug class is an unlocker that still
 * touches the mutex after the next owner has done just that. Here the
 * fast-path unlock's last touch is its CAS. The slow path holds lock_ from
 * before it changes state_ until after the resolve, and the woken waiter,
 * which is the only one that can legitimately end up destroying the mutex
 * (every other locker is behind it or has already gone through), waits
 * until it sees lock_ free before it returns (sync.h, "Settling"), so the
 * unlocker's last store has happened by then.
 */
#include "sync.h"

#include "../base/clock.h"

#include <string.h>

enum { LOCKED = 1u, WAITERS = 2u };

/*
 * Spin iterations (one pause and one load each) before a locker queues: a
 * thread, and a fiber (which holds up every other fiber of its carrier while
 * it spins, and whose park is cheap for itself). See "Spinning" above.
 */
#ifndef WEFT__MUTEX_SPIN_THREAD
#define WEFT__MUTEX_SPIN_THREAD 64
#endif
#ifndef WEFT__MUTEX_SPIN_FIBER
#define WEFT__MUTEX_SPIN_FIBER 16
#endif

/* A waiter queued this long gets the mutex handed to it. 0: always hand off; INT64_MAX: never. */
#ifndef WEFT__MUTEX_HANDOFF_NS
#define WEFT__MUTEX_HANDOFF_NS 1000000
#endif
/* ... and a fiber that a fiber of another carrier unlocks for, after this long ("Convoys" above). */
#ifndef WEFT__MUTEX_HANDOFF_FAR_NS
#define WEFT__MUTEX_HANDOFF_FAR_NS (20 * (int64_t)WEFT__MUTEX_HANDOFF_NS)
#endif

/* A parked locker. */
typedef struct mwait {
  weft__waiter w; /* on the wait list, under lock_ */
  int64_t since;  /* when it first queued (the hand-off rule); its own */
  bool handed;    /* written by the unlocker before the resolve: the mutex is ours already */
} mwait;

static __thread char tls_self;

void *weft__sync_self(void) {
  struct weft__fiber *f = weft__fiber_self();
  return f ? (void *)f : (void *)&tls_self;
}

static inline void *owner_of(const weft_mutex_t *m) { return __atomic_load_n(&m->owner_, __ATOMIC_RELAXED); }

static inline void set_owner(weft_mutex_t *m, void *who) {
  __atomic_store_n(&m->owner_, who, __ATOMIC_RELAXED);
}

/* Take LOCKED if it is free, keeping WAITERS as it is. */
static inline bool try_take(weft_mutex_t *m) {
  uint32_t s = __atomic_load_n(&m->state_, __ATOMIC_RELAXED);
  while (!(s & LOCKED)) {
    /* Acquire: pairs with the release that gave the mutex up. */
    if (__atomic_compare_exchange_n(&m->state_, &s, s | LOCKED, true, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
      return true;
  }
  return false;
}

/* Wait a little for the holder to let go; true when the mutex was taken. */
static bool spin(weft_mutex_t *m, unsigned n) {
  for (unsigned i = 0; i < n; i++) {
    weft__cpu_relax();
    /* Read before the CAS: a CAS on a held lock only steals the line from the holder. */
    if (!(__atomic_load_n(&m->state_, __ATOMIC_RELAXED) & LOCKED) && try_take(m)) return true;
  }
  return false;
}

/* The caller has failed the fast path; returns holding LOCKED. */
static void lock_slow(weft_mutex_t *m) {
  unsigned spins = weft__parkable_self() ? WEFT__MUTEX_SPIN_FIBER : WEFT__MUTEX_SPIN_THREAD;
  if (spin(m, spins)) return;
  mwait mw;
  mw.since = 0;
  bool front = false;
  for (;;) {
    weft__waiter_init(&mw.w, false);
    weft__waiter_on(&mw.w, WEFT__WAIT_MUTEX, m);
    mw.handed = false;
    weft__wordlock_acquire(&m->lock_);
    /* One CAS takes the mutex if it came free, or announces this waiter. */
    uint32_t s = __atomic_load_n(&m->state_, __ATOMIC_RELAXED);
    for (;;) {
      if (s == (LOCKED | WAITERS)) break;
      uint32_t want = (s & LOCKED) ? s | WAITERS : s | LOCKED;
      if (__atomic_compare_exchange_n(&m->state_, &s, want, true, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
        if (!(s & LOCKED)) {
          weft__wordlock_release(&m->lock_);
          return;
        }
        break;
      }
    }
    if (mw.since == 0) mw.since = WEFT__MUTEX_HANDOFF_NS > 0 ? weft__mono_ns() : 1;
    weft__waitlist l = weft__sync_list_get(&m->head_, &m->tail_);
    if (front)
      weft__sync_list_push_front(&l, &mw.w);
    else
      weft__waitlist_add(&l, &mw.w);
    weft__sync_list_put(&m->head_, &m->tail_, &l);
    weft__wordlock_release(&m->lock_);

    if (weft__waiter_wait(&mw.w, -1) != WEFT__W_WOKEN)
      weft__die("weft_mutex_lock: a wait ended without a wake-up");
    weft__sync_settle_word(&m->lock_);
    if (mw.handed) return;
    /* Barging: compete again; a loser keeps its place at the front. */
    if (try_take(m) || spin(m, spins)) return;
    front = true;
  }
}

/* The holder lets go; see "Unlock" above. */
static void unlock_slow(weft_mutex_t *m) {
  weft__wordlock_acquire(&m->lock_);
  weft__waitlist l = weft__sync_list_get(&m->head_, &m->tail_);
  weft__waiter *w =
      weft__waitlist_take(&l); /* never NULL: WAITERS was set, and only lock_ holders clear it */
  weft__sync_list_put(&m->head_, &m->tail_, &l);
  mwait *mw = weft__container_of(w, mwait, w);
  bool handoff = WEFT__MUTEX_HANDOFF_NS == 0;
  if (!handoff && WEFT__MUTEX_HANDOFF_NS < INT64_MAX) {
    int64_t waited = weft__mono_ns() - mw->since;
    /* Far: a fiber of another carrier than the unlocking fiber's (see "Convoys" above). */
    bool far = w->fiber && weft__fiber_self() && !weft__fiber_is_local(w->fiber);
    handoff = waited >= (far ? WEFT__MUTEX_HANDOFF_FAR_NS : WEFT__MUTEX_HANDOFF_NS);
  }
  /*
   * A plain store: nobody else can change state_ now (LOCKED is ours, and
   * WAITERS changes only under lock_). Release: a barger's acquire CAS sees
   * the critical section that ends here.
   */
  __atomic_store_n(&m->state_, (handoff ? LOCKED : 0u) | (l.head ? WAITERS : 0u), __ATOMIC_RELEASE);
  mw->handed = handoff;
  weft__sync_wakeup k = WEFT__SYNC_NO_WAKEUP;
  if (!weft__sync_claim(w, WEFT__W_WOKEN, &k))
    weft__die("weft_mutex_unlock: a mutex waiter left without the mutex");
  weft__wordlock_release(&m->lock_);
  /* Handed the mutex, it holds up every other locker until it runs: first in line on its carrier. */
  if (handoff)
    weft__sync_wake_first(&k);
  else
    weft__sync_wake(&k);
}

void *weft__mutex_owner(const weft_mutex_t *m) { return owner_of(m); }

void weft__mutex_lock_as(weft_mutex_t *m, void *self) {
  uint32_t expect = 0;
  if (!__atomic_compare_exchange_n(&m->state_, &expect, LOCKED, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
    lock_slow(m);
  set_owner(m, self);
}

void weft__mutex_unlock_held(weft_mutex_t *m) {
  set_owner(m, NULL);
  uint32_t expect = LOCKED;
  /* Release: pairs with the next locker's acquire CAS. The last touch of m on this path. */
  if (__atomic_compare_exchange_n(&m->state_, &expect, 0, false, __ATOMIC_RELEASE, __ATOMIC_RELAXED)) return;
  unlock_slow(m);
}

/* --- the public calls ---------------------------------------------------------------- */

/* Contexts: any. A mutex initialised by WEFT_MUTEX_INITIALIZER needs no call. */
int weft_mutex_init(weft_mutex_t *m) {
  if (!m) return -EINVAL;
  memset(m, 0, sizeof *m);
  return 0;
}

/*
 * Contexts: any. A fiber parks while it waits, a thread blocks. Not a
 * cancellation point: a cancelled fiber may still need the lock to put
 * shared state in order. -EDEADLK when the caller holds m already.
 */
int weft_mutex_lock(weft_mutex_t *m) {
  if (!m) return -EINVAL;
  void *self = weft__sync_self();
  uint32_t expect = 0;
  if (WEFT__LIKELY(__atomic_compare_exchange_n(&m->state_, &expect, LOCKED, false, __ATOMIC_ACQUIRE,
                                               __ATOMIC_RELAXED))) {
    set_owner(m, self);
    return 0;
  }
  if (owner_of(m) == self) return -EDEADLK;
  lock_slow(m);
  set_owner(m, self);
  return 0;
}

/* Contexts: any; never waits. -EBUSY when m is held, by the caller too. */
int weft_mutex_trylock(weft_mutex_t *m) {
  if (!m) return -EINVAL;
  if (!try_take(m)) return -EBUSY;
  set_owner(m, weft__sync_self());
  return 0;
}

/* Contexts: the fiber or thread that holds m; anyone else gets -EPERM (nothing changes). */
int weft_mutex_unlock(weft_mutex_t *m) {
  if (!m) return -EINVAL;
  if (owner_of(m) != weft__sync_self()) return -EPERM;
  weft__mutex_unlock_held(m);
  return 0;
}

/*
 * Contexts: any, once no one holds or waits for m (it may follow the last
 * unlock at once, even when that unlock woke someone who then unlocked).
 * Checking builds abort on a held mutex. NULL is ignored.
 */
void weft_mutex_destroy(weft_mutex_t *m) {
  if (!m) return;
#ifdef WEFT__SYNC_CHECKS
  if (__atomic_load_n(&m->state_, __ATOMIC_RELAXED) != 0 || __atomic_load_n(&m->lock_, __ATOMIC_RELAXED) != 0)
    weft__die("weft_mutex_destroy: %p is locked or has waiters", (void *)m);
#endif
  __atomic_store_n(&m->owner_, NULL, __ATOMIC_RELAXED);
}
