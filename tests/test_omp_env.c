/*
 * Suite "omp_env": how weft lives with the OpenMP runtime and the process:
 * an idle weft uses no CPU after a burst of work, and a child forked after
 * OpenMP (and fibers) were used can still use weft.
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static int work_fn(void *ctx, size_t i) {
  int64_t *out = ctx;
  int64_t s = 0;
  for (int64_t k = 1; k <= 200; k++) s += k ^ (int64_t)i;
  out[i] = s;
  return 0;
}

static void *future_fn(void *arg) { return arg; }

static void *sleepy(void *arg) {
  weft_sleep_ns(1000000);
  return arg;
}

static void burst(void) {
  enum { N = 100000 };
  int64_t *out = malloc(N * sizeof *out);
  for (int r = 0; r < 20; r++) weft_pmap(N, work_fn, out, NULL);
  free(out);
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < 200; i++) {
      weft_future *f;
      if (weft_future_start(k ? WEFT_BLOCKING : WEFT_CPU, k ? sleepy : future_fn, NULL, &f) == 0) {
        weft_future_get(f, -1, NULL);
        weft_future_free(f);
      }
    }
}

/*
 * After a burst, an idle weft must not keep a core busy. The OpenMP runtime
 * spins a while at its barriers before it sleeps (libgomp: GOMP_SPINCOUNT;
 * libomp: KMP_BLOCKTIME, 200 ms by default): that is the runtime's setting,
 * which weft leaves alone, so the measurement starts after it has passed.
 */
static void test_idle_uses_no_cpu(void) {
  burst();
  weft_test_sleep_ms(400);
  int64_t c0 = weft_test_cpu_ns();
  int64_t t0 = weft_now_ns();
  weft_test_sleep_ms(1000);
  int64_t cpu = weft_test_cpu_ns() - c0;
  int64_t wall = weft_now_ns() - t0;
  /* A busy-waiting thread would show up as about `wall` of CPU time. */
  if (cpu >= wall / 20) printf("\n  idle CPU %lld ns over %lld ns\n", (long long)cpu, (long long)wall);
  CU_ASSERT(cpu < wall / 20);
}

static void child_uses_weft(void *arg) {
  (void)arg;
  alarm(20); /* a hang ends as SIGALRM, never as a stuck test */
  enum { N = 10000 };
  int64_t *out = malloc(N * sizeof *out);
  int rc = weft_pmap(N, work_fn, out, NULL);
  int64_t s = 0;
  for (int k = 1; k <= 200; k++) s += k ^ (int64_t)(N - 1);
  if (rc != 0 || out[N - 1] != s) _exit(3);
  free(out);
  for (int k = 0; k < 2; k++) {
    weft_future *f;
    void *r = NULL;
    if (weft_future_start(k ? WEFT_BLOCKING : WEFT_CPU, k ? sleepy : future_fn, (void *)5, &f) != 0) _exit(4);
    if (weft_future_get(f, -1, &r) != 0 || r != (void *)5) _exit(5);
    weft_future_free(f);
  }
  weft_shutdown();
  _exit(0);
}

static void test_fork_after_use(void) {
  if (WEFT_TEST_TSAN || WEFT_TEST_ASAN) {
    /*
     * ThreadSanitizer does not support a child of a multithreaded process
     * that starts threads, and AddressSanitizer's allocator is not
     * fork-safe (a child forked while another thread holds its lock
     * deadlocks in its first malloc). The other configurations run it.
     */
    printf("\n    skipped under a sanitizer");
    return;
  }
  const char *q = getenv("WEFT_QEMU");
  if (q && *q && strcmp(q, "0") != 0) {
    printf("\n    skipped: qemu-user cannot fork a multithreaded guest");
    return;
  }
  burst(); /* the OpenMP pool, weft's team and the carriers all exist now */
  char err[512];
  int st = weft_test_child(child_uses_weft, NULL, err, sizeof err);
  if (!WIFEXITED(st)) printf("\n  child: status 0x%x, stderr: %s\n", st, err);
  CU_ASSERT_TRUE(WIFEXITED(st));
  CU_ASSERT_EQUAL(WEXITSTATUS(st), 0);
  /* The parent goes on as before. */
  burst();
}

int main(int argc, char **argv) {
  static const weft_test tests[] = {
      {"idle_uses_no_cpu", test_idle_uses_no_cpu},
      {"fork_after_use", test_fork_after_use},
      {NULL, NULL},
  };
  return weft_test_run(argc, argv, "omp_env", tests);
}
