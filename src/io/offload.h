/*
 * This file contains the interface of the offload pool (offload.c): where a
 * fiber sends a call that would block its carrier (weft_blocking, and the
 * I/O layer's regular-file calls when io_uring is unavailable).
 */
#ifndef WEFT_IO_OFFLOAD_H
#define WEFT_IO_OFFLOAD_H

#include "../base/internal.h"

/*
 * Run fn(arg) where it may block an OS thread, with weft_blocking's
 * semantics: on a fiber that may park, on an offload thread while the fiber
 * parks; anywhere else, on the caller. Returns 0 and fn's result in *result
 * (when result is not NULL); -EINVAL for NULL fn; -ECANCELED when the
 * caller's future was cancelled before fn started (fn then never runs).
 */
int weft__offload_run(weft_task_fn fn, void *arg, void **result);

/*
 * Wait for queued and running calls, then join every offload thread and
 * reset the statistics. The next call starts the pool again (and reads
 * offload_max again). Plain thread; not from an offload thread (it would
 * wait for itself: it aborts with a message).
 */
void weft__offload_shutdown(void);

/* True on an offload thread (while it runs a call, or idles). */
bool weft__offload_is_worker(void);

/* How long an idle offload thread waits for work before it exits. */
#define WEFT__OFFLOAD_IDLE_NS (10 * 1000000000LL)

/* Tests: set the idle time (ns <= 0: back to WEFT__OFFLOAD_IDLE_NS); idle threads take it at once. */
void weft__offload_set_idle_ns(int64_t ns);

/* Counters for tests and reports; peaks and counts run from the last shutdown. */
typedef struct weft__offload_stats {
  unsigned threads;         /* alive, or being started */
  unsigned idle;            /* waiting for work */
  unsigned queued;          /* calls waiting for a thread */
  unsigned running;         /* calls running on offload threads */
  unsigned peak_threads;    /* most threads alive at once */
  unsigned peak_running;    /* most calls running at once */
  uint64_t calls;           /* calls run by offload threads */
  uint64_t carrier_runs;    /* calls run on the caller's carrier because no thread could start */
  uint64_t create_failures; /* thread starts that failed */
} weft__offload_stats;

void weft__offload_get_stats(weft__offload_stats *out);

#endif /* WEFT_IO_OFFLOAD_H */
