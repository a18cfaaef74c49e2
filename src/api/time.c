/*
 * This file contains the public calls about time and the calling context:
 * the clock, sleeping, yielding, and the questions "am I on a fiber?" and
 * "was my future cancelled?".
 */
#include "../base/internal.h"

#include <sched.h>
#include <time.h>

#include "../base/clock.h"
#include "../fiber/fiber.h"
#include "../sync/wait.h"

int64_t weft_now_ns(void) { return weft__mono_ns(); }

int weft_sleep_until(int64_t deadline_ns) {
  if (deadline_ns < 0) return -EINVAL;
  weft__waiter w;
  weft__waiter_init(&w, true);
  weft__waiter_on(&w, WEFT__WAIT_SLEEP, NULL);
  /* Nobody wakes a sleeper: it ends by its deadline, or by cancellation. */
  uint32_t st = weft__waiter_wait(&w, deadline_ns);
  return st == WEFT__W_CANCELLED ? -ECANCELED : 0;
}

int weft_sleep_ns(int64_t ns) {
  if (ns < 0) return -EINVAL;
  if (ns == 0) return weft_yield();
  return weft_sleep_until(weft__add_sat(weft_now_ns(), ns));
}

int weft_yield(void) {
  weft__tctx *tc = weft__tctx_self();
  if (atomic_load_explicit(&tc->cancelled, memory_order_relaxed)) return -ECANCELED;
  if (weft__parkable_self())
    weft__fiber_yield();
  else
    sched_yield();
  return 0;
}

bool weft_in_fiber(void) { return weft__fiber_self() != NULL; }

bool weft_cancelled(void) { return weft__tctx_cancelled(); }
