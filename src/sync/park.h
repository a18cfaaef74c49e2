/*
 * This file contains what a waiter needs from whatever runs fibers. The
 * synchronisation layer declares it; the fiber layer implements it
 * (fiber/sched.c, or fiber/fiber_none.c where there are no fibers), so that
 * sync/ never includes fiber/: the dependency of the code goes one way, and
 * this header is the whole of what the waiters know about the scheduler.
 */
#ifndef WEFT_SYNC_PARK_H
#define WEFT_SYNC_PARK_H

#include "../base/internal.h"

struct weft__fiber;
struct weft__tctx;
struct weft__waiter;

/* The running fiber, or NULL on a plain thread (whether or not it may park: identities, mutex.c). */
struct weft__fiber *weft__fiber_self(void);

/*
 * The calling fiber when it may park: NULL on a plain thread, and on a fiber
 * that is inside an OpenMP region of its own (it then blocks its carrier, as
 * a thread would: the OpenMP runtime's state belongs to the carrier thread).
 */
struct weft__fiber *weft__parkable_self(void);

/* The running fiber's context record, or NULL on a plain thread. */
struct weft__tctx *weft__fiber_tctx_self(void);

/*
 * Park the calling fiber f until weft__fiber_ready(f): the wait it records
 * for dumps is (kind, obj, deadline); with a deadline > 0 and w, w is
 * resolved TIMEDOUT at the deadline if nothing resolved it first. The
 * record is cleared when the fiber runs again.
 */
void weft__fiber_park_wait(struct weft__fiber *f, unsigned kind, const void *obj, int64_t deadline_ns,
                           struct weft__waiter *w);

/*
 * Does fiber f, parked, live on the calling thread's carrier (false on a
 * plain thread)? The caller must keep f parked meanwhile (a lock its waker
 * needs): its carrier changes only while it runs or is readied.
 */
bool weft__fiber_is_local(const struct weft__fiber *f);

/* Make a parked fiber runnable (any thread); exactly once per park. */
void weft__fiber_ready(struct weft__fiber *f);
/*
 * The same, but f runs before the fibers already ready on its carrier (not
 * before the one running there): for a fiber that nobody else can stand in
 * for until it runs, such as a waiter that was handed a mutex.
 */
void weft__fiber_ready_first(struct weft__fiber *f);

#endif /* WEFT_SYNC_PARK_H */
