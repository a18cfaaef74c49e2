/*
 * This file contains the fiber backend of a platform without a context
 * switch (or a build with WEFT_CONTEXT=none): there are no fibers, so every
 * WEFT_BLOCKING call takes the CPU path, and the scheduler's entry points
 * that only a fiber could reach are never called.
 */
#include <string.h>

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
void weft__fiber_park(void) { weft__die("weft__fiber_park without fibers"); }
void weft__fiber_ready(weft__fiber *f) {
  WEFT__UNUSED(f);
  weft__die("weft__fiber_ready without fibers");
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
int weft__fibers_dump(int fd, bool stacks) {
  WEFT__UNUSED(fd);
  WEFT__UNUSED(stacks);
  return 0;
}
