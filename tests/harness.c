/*
 * This file contains the shared test harness (see harness.h).
 */
#include "harness.h"

#include <CUnit/Basic.h>
#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef WEFT_HAVE_VALGRIND_H
#include <valgrind/valgrind.h>
#endif

#include "fiber/fiber.h"
#include "fiber/stack.h"
#include "base/process.h"
#include "base/sys.h"
#include "cpu/cpu.h"

static int baseline_fds = -1;

int weft_test_thread_count(void) {
  DIR *d = opendir("/proc/self/task");
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

/* Threads whose name starts with "weft-": weft's own (carriers, OpenMP host, offload, monitor). */
static int weft_thread_count(void) {
  DIR *d = opendir("/proc/self/task");
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char path[300], comm[32] = {0};
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    int fd = open(path, O_RDONLY);
    if (fd < 0) continue;
    ssize_t r = read(fd, comm, sizeof comm - 1);
    close(fd);
    /*
     * "weft-omp" names the host of weft's OpenMP team and the threads the
     * runtime made from it, which LLVM's libomp keeps in its own pool after
     * the host has gone: they are the runtime's, not weft's.
     */
    if (r > 0 && strncmp(comm, "weft-", 5) == 0 && strncmp(comm, "weft-omp", 8) != 0) n++;
  }
  closedir(d);
  return n;
}

int weft_test_fd_count(void) {
  DIR *d = opendir("/proc/self/fd");
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n - 1; /* the DIR's own descriptor */
}

int64_t weft_test_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

unsigned weft_test_cpus(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return (unsigned)n;
  }
  return 1;
}

bool weft_test_qemu(void) {
  const char *q = getenv("WEFT_QEMU");
  return q && *q && strcmp(q, "0") != 0;
}

bool weft_test_valgrind(void) {
#ifdef WEFT_HAVE_VALGRIND_H
  if (RUNNING_ON_VALGRIND) return true;
#endif
  return false;
}

void weft_test_child_no_leak_check(void) {
#if defined(WEFT_HAVE_VALGRIND_H) && defined(VALGRIND_CLO_CHANGE)
  if (RUNNING_ON_VALGRIND) VALGRIND_CLO_CHANGE("--leak-check=no");
#endif
}

bool weft_test_slow_env(void) {
  if (WEFT_TEST_TSAN || weft_test_valgrind() || weft_test_qemu()) return true;
  const char *pre = getenv("LD_PRELOAD");
  return pre && strstr(pre, "vgpreload") != NULL;
}

bool weft_test_can_fork(void) {
  if (!weft_test_qemu()) return true;
  printf("\n    skipped: qemu-user cannot fork a threaded guest");
  return false;
}

bool weft_test_debug_checks(void) {
  if (WEFT__CHECKS) return true;
  printf("\n    skipped: a Release build has no debug checks");
  return false;
}

bool weft_test_fibers_expected(void) {
  const char *e = getenv("WEFT_FIBERS");
  if (e && strcmp(e, "0") == 0) return false;
  weft_info i;
  weft_get_info(&i);
  return strcmp(i.context_switch, "none") != 0;
}

weft_config weft_test_config(void) {
  weft_shutdown();
  weft_config c;
  weft_config_init(&c);
  return c;
}

int weft_test_default_config(void) {
  weft_config c = weft_test_config();
  return weft_configure(&c);
}

void weft_test_sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

void weft_test_busy_ns(int64_t ns) {
  int64_t end = weft_now_ns() + ns;
  while (weft_now_ns() < end) {
  }
}

int weft_test_child(void (*fn)(void *), void *arg, char *err, size_t cap) {
  int p[2];
  if (pipe(p) != 0) return -1;
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    close(p[0]);
    close(p[1]);
    return -1;
  }
  if (pid == 0) {
    close(p[0]);
    dup2(p[1], 2);
    close(p[1]);
    /* Keep a crashing child from writing a core file. */
    struct rlimit rl = {0, 0};
    setrlimit(RLIMIT_CORE, &rl);
    fn(arg);
    _exit(0);
  }
  close(p[1]);
  size_t len = 0;
  for (;;) {
    char buf[512];
    ssize_t r = read(p[0], buf, sizeof buf);
    if (r <= 0) break;
    for (ssize_t i = 0; i < r && len + 1 < cap; i++) err[len++] = buf[i];
  }
  if (cap) err[len] = '\0';
  close(p[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
  }
  return status;
}

/* After each test: weft shut down, nothing of weft's left. */
static void check_clean(void) {
  weft_shutdown();
  weft__fiber_stats st;
  weft__fiber_get_stats(&st);
  CU_ASSERT_EQUAL(st.live, 0);
  CU_ASSERT_EQUAL(st.stacks_in_use, 0);
  CU_ASSERT_EQUAL(weft_carrier_count(), 0);
  /*
   * weft counts its own threads (names are inherited by the threads that an
   * OpenMP runtime creates from them, so names cannot tell); the one kept on
   * purpose (the host of weft's team under libomp) aside.
   */
  int threads = weft__threads_alive() - weft__cpu_kept_threads();
  if (threads != 0)
    fprintf(stderr, "\n  weft threads still running: %d (%d named weft-*)\n", threads, weft_thread_count());
  CU_ASSERT_EQUAL(threads, 0);
  /* Exiting threads (the OpenMP runtime's too) open libgcc_s for a moment: let them finish. */
  int fds = weft_test_fd_count();
  for (int i = 0; i < 200 && fds != baseline_fds; i++) {
    weft_test_sleep_ms(5);
    fds = weft_test_fd_count();
  }
  if (fds != baseline_fds) {
    fprintf(stderr, "\n  descriptors: %d before, %d after:", baseline_fds, fds);
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
      char path[300], target[256] = {0};
      snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
      if (e->d_name[0] != '.' && readlink(path, target, sizeof target - 1) > 0)
        fprintf(stderr, " %s=%s", e->d_name, target);
    }
    if (d) closedir(d);
    fprintf(stderr, "\n");
  }
  CU_ASSERT_EQUAL(fds, baseline_fds);
}

/*
 * The descriptors open once the threads that a suite's set-up ended have
 * gone: an exiting thread (weft's, or one its OpenMP runtime made) opens
 * libgcc_s for a moment to unwind, so a count taken at once can hold one
 * that is not there a moment later (seen under WEFT_FIBERS=0 in CI). The
 * lowest count that holds for 25 ms, within a second.
 */
static int settled_fd_count(void) {
  int best = weft_test_fd_count(), same = 0;
  for (int i = 0; i < 200 && same < 5; i++) {
    weft_test_sleep_ms(5);
    int n = weft_test_fd_count();
    if (n < best) {
      best = n;
      same = 0;
    } else if (n == best) {
      same++;
    }
  }
  return best;
}

static void (*wrapped[64])(void);
static void run_wrapped(size_t i) {
  wrapped[i]();
  check_clean();
}
/* CUnit takes plain function pointers: one trampoline per test slot, slot = 8 * a + b. */
// clang-format off
#define W(a, b) static void wrap_##a##b(void) { run_wrapped(8 * a + b); }
#define W8(a) W(a, 0) W(a, 1) W(a, 2) W(a, 3) W(a, 4) W(a, 5) W(a, 6) W(a, 7)
W8(0) W8(1) W8(2) W8(3) W8(4) W8(5) W8(6) W8(7)
#undef W
#define W(a, b) wrap_##a##b,
static void (*const wraps[64])(void) = {W8(0) W8(1) W8(2) W8(3) W8(4) W8(5) W8(6) W8(7)};
#undef W
#undef W8
// clang-format on

int weft_test_run(int argc, char **argv, const char *suite, const weft_test *tests) {
  const char *only = argc > 1 ? argv[1] : NULL;
  setvbuf(stdout, NULL, _IONBF, 0);
  baseline_fds = settled_fd_count();
  if (CU_initialize_registry() != CUE_SUCCESS) return 2;
  CU_pSuite s = CU_add_suite(suite, NULL, NULL);
  if (!s) return 2;
  size_t n = 0;
  for (size_t i = 0; tests[i].name; i++) {
    if (only && strcmp(only, tests[i].name) != 0) continue;
    if (n == 64) {
      fprintf(stderr, "harness: more than 64 tests in one suite\n");
      return 2;
    }
    wrapped[n] = tests[i].fn;
    CU_add_test(s, tests[i].name, wraps[n]);
    n++;
  }
  if (n == 0) {
    fprintf(stderr, "harness: no test named '%s'\n", only ? only : "");
    CU_cleanup_registry();
    return 2;
  }
  CU_basic_set_mode(CU_BRM_VERBOSE);
  CU_basic_run_tests();
  unsigned failed = CU_get_number_of_tests_failed();
  unsigned asserts_failed = CU_get_number_of_failures();
  CU_cleanup_registry();
  return (failed || asserts_failed) ? 1 : 0;
}

size_t weft_test_vm_size(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  unsigned long kb = 0;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmSize: %lu kB", &kb) == 1) break;
  if (f) fclose(f);
  return (size_t)kb << 10;
}
