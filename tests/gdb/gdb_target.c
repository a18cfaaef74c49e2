/*
 * The program the gdb test (gdb_test.sh) debugs: fibers parked in known
 * places (two deep in a recursion on a semaphore, one asleep, the map's
 * caller), then it tells the test it is ready and waits to be looked at.
 * Told to by SIGUSR2, it wakes one of the fibers on the semaphore, which
 * then overflows its stack: the test's check that the guards are still in
 * place after weft-gcore (the overflow handler names the fiber and aborts).
 */
#define _POSIX_C_SOURCE 200809L /* sigaction under -std=c11 */

#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include "weft.h"

static weft_sem_t sem;
static volatile sig_atomic_t overflow_asked;

static void on_usr2(int sig) {
  (void)sig;
  overflow_asked = 1;
}

/* 4 KiB a frame until the guard stops it: bounded only so that no compiler calls it endless recursion. */
__attribute__((noinline)) static int gdb_target_overflow(int d) {
  volatile char pad[4096];
  pad[0] = (char)d;
  if (d > (1 << 20)) return pad[0];
  return gdb_target_overflow(d + 1) + pad[0];
}

__attribute__((noinline)) static int gdb_target_deep(int d) {
  if (d == 0) {
    int r = weft_sem_wait(&sem, -1);
    return r == 0 && overflow_asked ? gdb_target_overflow(0) : r;
  }
  int r = gdb_target_deep(d - 1);
  __asm__ volatile("" ::: "memory"); /* no tail call: every frame stays */
  return r;
}

static int elem(void *ctx, size_t i) {
  (void)ctx;
  if (i == 2) return weft_sleep_ns(600LL * 1000000000);
  return gdb_target_deep(3);
}

static void *mapper(void *arg) {
  weft_pmap_opts o = WEFT_PMAP_OPTS_INIT;
  o.kind = WEFT_BLOCKING;
  return (void *)(intptr_t)weft_pmap(3, elem, arg, &o);
}

int main(void) {
  if (!weft_fibers_available()) {
    printf("nofibers\n"); /* WEFT_FIBERS=0, or no fibers on this platform */
    return 0;
  }
  struct sigaction sa = {.sa_handler = on_usr2};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR2, &sa, NULL);
  weft_sem_init(&sem, 0);
  weft_future *f;
  if (weft_future_start(WEFT_BLOCKING, mapper, NULL, &f) != 0) return 1;
  weft_sleep_ns(300 * 1000000LL); /* everyone parked */
  printf("ready\n");
  fflush(stdout);
  /* The test attaches, then kills us or asks for the overflow. SIGUSR2 comes here: weft's threads block
   * asynchronous signals. */
  while (!overflow_asked) pause();
  weft_sem_post(&sem);
  pause();
  return 0;
}
