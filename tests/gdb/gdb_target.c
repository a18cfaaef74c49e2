/*
 * The program the gdb test (gdb_test.sh) debugs: fibers parked in known
 * places (two deep in a recursion on a semaphore, one asleep, the map's
 * caller), then it tells the test it is ready and waits to be looked at.
 */
#include <stdio.h>
#include <unistd.h>

#include "weft.h"

static weft_sem_t sem;

__attribute__((noinline)) static int gdb_target_deep(int d) {
  if (d == 0) return weft_sem_wait(&sem, -1);
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
  weft_sem_init(&sem, 0);
  weft_future *f;
  if (weft_future_start(WEFT_BLOCKING, mapper, NULL, &f) != 0) return 1;
  weft_sleep_ns(300 * 1000000LL); /* everyone parked */
  printf("ready\n");
  fflush(stdout);
  pause(); /* the test attaches, then kills us */
  return 0;
}
