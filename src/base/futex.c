/*
 * This file contains the futex wrappers that plain threads block on (see
 * futex.h).
 */
#include "futex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int weft__futex_wait(_Atomic uint32_t *addr, uint32_t expected, int64_t deadline_ns) {
  struct timespec ts, *tsp = NULL;
  if (deadline_ns >= 0) {
    ts.tv_sec = (time_t)(deadline_ns / 1000000000);
    ts.tv_nsec = (long)(deadline_ns % 1000000000);
    tsp = &ts;
  }
  /*
   * FUTEX_WAIT_BITSET takes an absolute time on CLOCK_MONOTONIC, the clock of
   * every weft deadline, so a wait cut short by a signal resumes with the
   * same deadline instead of drifting.
   */
  long r = syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG, expected, tsp, NULL,
                   FUTEX_BITSET_MATCH_ANY);
  if (r == -1 && errno == ETIMEDOUT) return -ETIMEDOUT;
  return 0; /* woken, value changed (EAGAIN) or interrupted (EINTR): the caller re-checks */
}

void weft__futex_wake(_Atomic uint32_t *addr, int n) {
  syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE | FUTEX_PRIVATE_FLAG, n, NULL, NULL, 0);
}
