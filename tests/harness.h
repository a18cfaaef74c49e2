/*
 * This file contains the helpers that every weft test suite shares: running
 * a CUnit suite with one call, counting the process's threads and
 * descriptors, checking that weft left nothing behind, and running a piece of
 * code in a child process to check how it dies.
 */
#ifndef WEFT_TEST_HARNESS_H
#define WEFT_TEST_HARNESS_H

#include <CUnit/CUnit.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "weft.h"

typedef struct weft_test {
  const char *name;
  void (*fn)(void);
} weft_test;

/*
 * Run the NULL-terminated list of tests as one CUnit suite named `suite`
 * and return the process exit status (0 only when all passed). Before the
 * first test it records the thread and descriptor counts; after each test it
 * calls weft_shutdown() and checks that no fiber, stack, weft thread or
 * descriptor was left behind. argv[1], when given, runs only the test of that
 * name.
 */
int weft_test_run(int argc, char **argv, const char *suite, const weft_test *tests);

/* OS threads of this process now (from /proc/self/task). */
int weft_test_thread_count(void);
/* Open descriptors of this process now (from /proc/self/fd). */
int weft_test_fd_count(void);
/* This process's user+system CPU time in nanoseconds. */
int64_t weft_test_cpu_ns(void);

/* The number of CPUs weft will use by default. */
unsigned weft_test_cpus(void);

/*
 * Run fn(arg) in a forked child with stderr captured. Returns the child's
 * wait status; its stderr (up to cap-1 bytes, NUL-terminated) goes in err.
 * The child ends with _exit(0) when fn returns.
 */
int weft_test_child(void (*fn)(void *), void *arg, char *err, size_t cap);

/*
 * Called first in a child whose leak check tells nothing: one meant to end
 * by a fault or a signal, or one that leaves holding memory it inherited from
 * the parent (stress/reliability.h). Under Valgrind it turns the leak check
 * off for that child, which would otherwise read every page the child has
 * mapped (hundreds of MB of fiber stacks, most never touched: a minute on a
 * machine where a first touch costs 15 µs). Elsewhere it does nothing.
 */
void weft_test_child_no_leak_check(void);

/*
 * True under qemu-user (WEFT_QEMU set, the aarch64 job). qemu 7 aborts in a
 * child forked from a guest that already has several threads, before the
 * child runs any of its code: a test that forks after the suite has started
 * threads skips there, and says so.
 */
bool weft_test_qemu(void);

/* Which sanitizer this suite was built with: GCC says so with a macro, clang with __has_feature. */
#if defined(__SANITIZE_THREAD__)
#define WEFT_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define WEFT_TEST_TSAN 1
#endif
#endif
#ifndef WEFT_TEST_TSAN
#define WEFT_TEST_TSAN 0
#endif
#if defined(__SANITIZE_ADDRESS__)
#define WEFT_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define WEFT_TEST_ASAN 1
#endif
#endif
#ifndef WEFT_TEST_ASAN
#define WEFT_TEST_ASAN 0
#endif

/*
 * True when the run is under Valgrind, qemu-user or ThreadSanitizer, where
 * everything is much slower (and TSan keeps megabytes per fiber): suites
 * scale their work down.
 */
bool weft_test_slow_env(void);

/* The process's address space now (VmSize of /proc/self/status), in bytes; 0 when it cannot be read. */
size_t weft_test_vm_size(void);

/*
 * True under Valgrind, which runs one thread at a time and lets the running
 * one keep going: a test of how threads share work cannot expect it there.
 */
bool weft_test_valgrind(void);

/*
 * True when WEFT_BLOCKING work should run on fibers here: the build has a
 * context switch and WEFT_FIBERS is not 0 (CI runs every suite both ways).
 */
bool weft_test_fibers_expected(void);

/*
 * True when a crash path that forks a child of this (threaded) test can run
 * here; false under qemu-user, which cannot fork a threaded guest, after
 * printing that the test is skipped.
 */
bool weft_test_can_fork(void);

/*
 * True when weft was built with its debug checks (WEFT__ASSERT: test builds
 * and builds without NDEBUG); false, after printing that the test is skipped,
 * in a Release build.
 */
bool weft_test_debug_checks(void);

/*
 * Shut weft down and return the default configuration, for a test that
 * changes a field or two and passes it to weft_configure:
 *   weft_config c = weft_test_config(); c.carriers = 1; weft_configure(&c);
 * weft_test_default_config() puts the defaults back afterwards (0, or
 * weft_configure's error).
 */
weft_config weft_test_config(void);
int weft_test_default_config(void);

/* Sleep the calling OS thread (never parks). */
void weft_test_sleep_ms(int ms);

/* Keep the calling thread busy for about ns of wall time, without parking or sleeping. */
void weft_test_busy_ns(int64_t ns);

#endif /* WEFT_TEST_HARNESS_H */
