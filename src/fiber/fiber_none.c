/*
 * This file contains the fiber backend of a platform without a context
 * switch (or a build with WEFT_CONTEXT=none): there are no fibers, so every
 * WEFT_BLOCKING call takes the CPU path, and the scheduler's entry points
 * that only a fiber could reach are never called.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "fiber.h"
#include "sched.h"
#include "stack.h"

void weft__fiber_prepare(weft__fiber *f, const weft__fiber_ops *ops, void *arg) {
  f->ops = ops;
  f->arg = arg;
}

int weft__fibers_start(const weft__fiber_hooks *h) {
  WEFT__UNUSED(h);
  return -ENOSYS;
}
bool weft__fibers_running(void) { return false; }
bool weft__fibers_places(weft__places *out) {
  WEFT__UNUSED(out);
  return false;
}
int weft__fiber_spawn(weft__fiber *f) {
  WEFT__UNUSED(f);
  return -ENOSYS;
}
int weft__fiber_spawn_array(weft__fiber *fs, size_t n) {
  WEFT__UNUSED(fs);
  WEFT__UNUSED(n);
  return -ENOSYS;
}
weft__fiber *weft__fiber_self(void) { return NULL; }
bool weft__fiber_is_local(const weft__fiber *f) {
  (void)f;
  return false;
}
void weft__fiber_park(void) { weft__die("weft__fiber_park without fibers"); }
void weft__fiber_ready(weft__fiber *f) {
  WEFT__UNUSED(f);
  weft__die("weft__fiber_ready without fibers");
}
void weft__fiber_ready_first(weft__fiber *f) {
  WEFT__UNUSED(f);
  weft__die("weft__fiber_ready_first without fibers");
}
void weft__fiber_yield(void) { weft__die("weft__fiber_yield without fibers"); }
weft__fiber *weft__parkable_self(void) { return NULL; }
weft__tctx *weft__fiber_tctx_self(void) { return NULL; }
void weft__fiber_park_wait(weft__fiber *f, unsigned kind, const void *obj, int64_t deadline_ns,
                           weft__waiter *w) {
  WEFT__UNUSED(f);
  WEFT__UNUSED(kind);
  WEFT__UNUSED(obj);
  WEFT__UNUSED(deadline_ns);
  WEFT__UNUSED(w);
  weft__die("weft__fiber_park_wait without fibers");
}
bool weft__fiber_fault_info(const void *addr, uint64_t *fiber_id, size_t *stack_size) {
  WEFT__UNUSED(addr);
  WEFT__UNUSED(fiber_id);
  WEFT__UNUSED(stack_size);
  return false;
}
void weft__fiber_get_stats(weft__fiber_stats *out) { memset(out, 0, sizeof *out); }
void weft__fibers_shutdown(void) {}
atomic_uint weft__outside_calls;
#ifdef WEFT_TESTING
void (*weft__test_before_sleep)(unsigned carrier); /* no carriers here: never called */
#endif
size_t weft__sources_open(void) { return 0; }
/* The scheduler's state, never started here: tests that look at it link, and find no carrier. */
weft__rt weft__rt_state;
/* No stacks without a context switch: weft_get_stats reports none. */
void weft__stack_get_stats(weft__stack_stats *out) { memset(out, 0, sizeof *out); }

struct weft__poller *weft__fiber_poller(const weft__fiber *f) {
  (void)f;
  return NULL;
}
unsigned weft_carrier_count(void) { return 0; }
const char *weft__stack_guard_name(void) { return "none"; }
weft__carrier *weft__carrier_self(void) { return NULL; }
int weft__source_open(weft__source *s, unsigned want) {
  WEFT__UNUSED(s);
  WEFT__UNUSED(want);
  return -ENOSYS;
}
bool weft__carrier_may_arrive(unsigned id) {
  WEFT__UNUSED(id);
  return false;
}
void weft__source_close(weft__source *s) { WEFT__UNUSED(s); }
void weft__source_finished(weft__fiber *f) { WEFT__UNUSED(f); }
unsigned weft__fiber_carrier_id(void) { return 0; }
bool weft__carrier_thread(void) { return false; }
int weft__fibers_dump(int fd, bool stacks) {
  WEFT__UNUSED(stacks);
  /* As dump.c says of a runtime that is not running: there are no fibers in this build. */
  static const char msg[] = "weft: fiber dump: the fiber runtime is not running (no fibers in this build)\n"
                            "weft: end of fiber dump\n";
  size_t at = 0;
  while (at < sizeof msg - 1) {
    ssize_t w = write(fd, msg + at, sizeof msg - 1 - at);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return w < 0 ? -errno : -EIO;
    at += (size_t)w;
  }
  return 0;
}
