/*
 * This file contains the helpers that the reliability suites share (stress,
 * faults, bad_input, signals): a check that weft left nothing behind which
 * can run in the middle of a test (the harness checks only after each test),
 * a child process with a time limit (a hang becomes a failure that says so,
 * not a CTest timeout), and a seeded random number generator.
 *
 * Everything is static: each suite is one executable and includes this once.
 */
#ifndef WEFT_TEST_RELIABILITY_H
#define WEFT_TEST_RELIABILITY_H

#include <dirent.h>
#include <fcntl.h>
#include <execinfo.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "fiber/fiber.h"
#include "fiber/stack.h"
#include "io/offload.h"
#include "base/process.h"
#include "base/sys.h"
#include "cpu/cpu.h"

/* Sanitizer builds: address-space limits make no sense there, and some loops are scaled down. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define REL_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define REL_SANITIZED 1
#endif
#endif
#ifndef REL_SANITIZED
#define REL_SANITIZED 0
#endif

#if defined(__SANITIZE_ADDRESS__)
#define REL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define REL_ASAN 1
#endif
#endif
#ifndef REL_ASAN
#define REL_ASAN 0
#endif

#if defined(__SANITIZE_THREAD__)
#define REL_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define REL_TSAN 1
#endif
#endif
#ifndef REL_TSAN
#define REL_TSAN 0
#endif

#define REL_MS 1000000LL

/* --- a seeded generator (splitmix64): the same seed gives the same choices ------------------------- */

typedef struct rel_rng {
  uint64_t s;
} rel_rng;

static inline uint64_t rel_next(rel_rng *r) {
  uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* A value in [0, n) (n > 0). */
static inline uint64_t rel_below(rel_rng *r, uint64_t n) { return n ? rel_next(r) % n : 0; }

/* A generator for one purpose, derived from a seed and up to three numbers. */
static inline rel_rng rel_derive(uint64_t seed, uint64_t a, uint64_t b, uint64_t c) {
  rel_rng r = {seed ^ (a * 0xD1B54A32D192ED03ull)};
  r.s = rel_next(&r) ^ (b * 0xABC98388FB8FAC03ull);
  r.s = rel_next(&r) ^ (c * 0x8CB92BA72F3D8DD7ull);
  rel_next(&r);
  return r;
}

/* --- what weft leaves behind ----------------------------------------------------------------------- */

/*
 * weft's threads still running: weft counts the threads it starts (names
 * cannot tell: the threads an OpenMP runtime creates from a carrier inherit
 * its name), less the one it keeps on purpose (the host of its OpenMP team
 * under libomp, see cpu_omp.c).
 */
static inline int rel_weft_threads(void) { return weft__threads_alive() - weft__cpu_kept_threads(); }

/*
 * weft_shutdown(), then check that no fiber, stack, carrier, offload thread,
 * weft thread or descriptor is left (descriptors against `baseline_fds`, the
 * count before the test made any of its own). Returns 0, or -1 with what is
 * left written in why. Plain thread, outside any weft work.
 */
static inline int rel_check_clean(int baseline_fds, char *why, size_t cap) {
  weft_shutdown();
  weft__fiber_stats st;
  weft__fiber_get_stats(&st);
  weft__offload_stats os;
  weft__offload_get_stats(&os);
  int threads = rel_weft_threads();
  /* Exiting OpenMP threads open libgcc_s for a moment. */
  for (int i = 0; i < 400 && threads != 0; i++) {
    weft_test_sleep_ms(5);
    threads = rel_weft_threads();
  }
  int fds = weft_test_fd_count();
  for (int i = 0; i < 400 && baseline_fds >= 0 && fds != baseline_fds; i++) {
    weft_test_sleep_ms(5);
    fds = weft_test_fd_count();
  }
  if (st.live == 0 && st.stacks_in_use == 0 && weft_carrier_count() == 0 && os.threads == 0 && threads == 0 &&
      (baseline_fds < 0 || fds == baseline_fds))
    return 0;
  snprintf(why, cap,
           "left behind after weft_shutdown: %llu live fibers, %llu stacks in use, %u carriers, %u offload "
           "threads, %d weft threads, %d descriptors (baseline %d)",
           (unsigned long long)st.live, (unsigned long long)st.stacks_in_use, weft_carrier_count(),
           os.threads, threads, fds, baseline_fds);
  return -1;
}

/* --- children with a time limit -------------------------------------------------------------------- */

/*
 * False under qemu-user (WEFT_QEMU, the aarch64 job): qemu 7 aborts in a
 * child forked from a guest that has several threads ("qemu_plugin_vcpu_
 * init_hook: assertion failed"), before the child runs any of its code.
 * Tests that need a child are skipped there, and say so.
 */
static inline bool rel_can_fork(void) {
  const char *q = getenv("WEFT_QEMU");
  if (q && *q && strcmp(q, "0") != 0) {
    printf("\n    skipped: qemu-user cannot fork a multithreaded guest");
    return false;
  }
  return true;
}

typedef struct rel_guard {
  void (*fn)(void *);
  void *arg;
  unsigned secs;
} rel_guard;

/* What a child is doing, for the report of a child that timed out (set by the child; may stay NULL). */
static const char *volatile rel_stage;

/*
 * A child that times out says what it was doing and where (the thread that
 * takes SIGALRM is the child's own: weft's threads block it), then dies of
 * SIGALRM as before, so that the parent reports a timeout. Not
 * async-signal-safe (backtrace_symbols_fd may allocate the first time): the
 * child is hung and about to die anyway.
 */
static inline void rel_on_alarm(int sig) {
  static const char head[] = "\nchild timed out while: ";
  ssize_t w = write(2, head, sizeof head - 1);
  const char *st = rel_stage ? rel_stage : "(no stage set)";
  w = write(2, st, strlen(st));
  w = write(2, "\n", 1);
  (void)w;
  void *frames[48];
  int n = backtrace(frames, 48);
  backtrace_symbols_fd(frames, n, 2);
  signal(sig, SIG_DFL);
  raise(sig);
}

static inline void rel_guarded(void *p) {
  rel_guard *g = p;
  weft_test_child_no_leak_check(); /* its status is read with that in mind: rel_child_ok */
  /* A hang in the child ends by SIGALRM, which the parent reports (after the child said where it was). */
  signal(SIGALRM, rel_on_alarm);
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGALRM);
  pthread_sigmask(SIG_UNBLOCK, &s, NULL);
  alarm(g->secs);
  g->fn(g->arg);
}

/*
 * weft_test_child with a time limit: a child still running after `secs`
 * dies of SIGALRM. Returns the wait status; stderr in err.
 */
static inline int rel_child(void (*fn)(void *), void *arg, unsigned secs, char *err, size_t cap) {
  rel_guard g = {fn, arg, secs};
  return weft_test_child(rel_guarded, &g, err, cap);
}

/* "exit 0", "killed by SIGABRT", "timed out (SIGALRM)" for messages. */
static inline const char *rel_status(int st, char *buf, size_t cap) {
  if (WIFEXITED(st))
    snprintf(buf, cap, "exit %d", WEXITSTATUS(st));
  else if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM)
    snprintf(buf, cap, "timed out (killed by SIGALRM)");
  else if (WIFSIGNALED(st))
    snprintf(buf, cap, "killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
  else
    snprintf(buf, cap, "status 0x%x", st);
  return buf;
}

/*
 * A child says it succeeded by printing REL_OK on stderr as its last act.
 * Under Valgrind the exit status of a forked child cannot tell: the leak
 * check at its exit reports the parent's memory that the child inherited
 * and let go (weft's atfork handler forgets the parent's threads), and
 * --error-exitcode turns the status into 99. So the parent accepts 99 there
 * when the child printed REL_OK.
 */
#define REL_OK "rel-child-ok"

static inline void rel_ok_exit(void) {
  static const char ok[] = "\n" REL_OK "\n";
  ssize_t w = write(2, ok, sizeof ok - 1);
  (void)w;
  _exit(0);
}

static inline bool rel_child_ok(int st, const char *err) {
  if (!WIFEXITED(st) || !strstr(err, REL_OK)) return false;
  return WEXITSTATUS(st) == 0 || (WEXITSTATUS(st) == 99 && weft_test_slow_env());
}

/* Lines of s that start with "weft: " (weft's warnings and fatal messages). */
static inline int rel_weft_lines(const char *s) {
  int n = 0;
  for (const char *p = s; p && *p;) {
    if (strncmp(p, "weft: ", 6) == 0) n++;
    p = strchr(p, '\n');
    if (p) p++;
  }
  return n;
}

#endif /* WEFT_TEST_RELIABILITY_H */
