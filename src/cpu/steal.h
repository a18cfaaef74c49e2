/*
 * This file contains the interface of work stealing on OpenMP's threads
 * (steal.c): the registry of work-stealing deques (deque.h), one per thread
 * that spawns CPU work, and what the threads of weft's OpenMP team (the
 * host, cpu_omp.c) and the threads that join CPU work do with them.
 *
 * Who has a deque: every thread of the host team while it runs the team's
 * loop, and any plain thread (never a fiber, never a thread inside a
 * program's own OpenMP region) that starts a CPU future or a map while the
 * team is open. A deque, once made, is never freed while the process runs:
 * a thread that exits gives its slot back with whatever jobs it still
 * holds, and thieves keep stealing from it, so a job pushed is never lost
 * and no thief ever reads freed memory.
 *
 * Only the OpenMP backend uses this (cpu_omp.c); the pool (cpu_pool.c) has
 * its own queue.
 */
#ifndef WEFT_CPU_STEAL_H
#define WEFT_CPU_STEAL_H

#include "cpu.h"
#include "deque.h"

/* Most deques at once: threads beyond it queue their jobs in the host's shared queue. */
#define WEFT__WS_SLOTS 256

/* The calling thread's deque, made and registered on first use; NULL when all slots are taken. */
weft__deque *weft__ws_own(void);

/* The calling thread's deque if it has one (no allocation). */
weft__deque *weft__ws_mine(void);

/* The calling thread's own newest job, or NULL. */
weft__job *weft__ws_find_own(weft__deque *own);

/* A job for the calling thread: its own newest, else the oldest of another deque; NULL when none was seen. */
weft__job *weft__ws_find(weft__deque *own);

/*
 * The oldest job of another deque than own; NULL when none was seen. Jobs
 * pushed with weft__ws_push_last are taken only when no deque's oldest job
 * is an ordinary one.
 */
weft__job *weft__ws_steal(weft__deque *own);

/*
 * Push j on own (the caller's deque) for thieves to take after every
 * ordinary job they can see: for blocking work on the CPU path (without
 * fibers), whose parts may wait on jobs queued before them (a producer
 * started as a CPU future, say), which must not be starved of the workers.
 * False when full.
 */
bool weft__ws_push_last(weft__deque *own, weft__job *j);

/* Take j back from own if it is the newest job there (pushed marked or not, as given). */
bool weft__ws_take_back(weft__deque *own, weft__job *j, bool marked);

/* True when every registered deque looked empty (a hint unless no thread pushes meanwhile). */
bool weft__ws_all_empty(void);

/* A job was pushed: wake one sleeping worker of the host team, if any sleeps. */
void weft__ws_notify(void);

/* An idle worker of the host team starts (true) or stops (false) looking for work while awake. */
void weft__ws_spinning(bool on);

/* Wake every sleeping worker (the team is closing, or shutting down). */
void weft__ws_notify_all(void);

/*
 * A worker of the host team with nothing to run sleeps until a push wakes
 * it or the absolute CLOCK_MONOTONIC deadline passes; returns at once when
 * work appeared after it announced itself asleep. Spurious returns happen:
 * the caller looks for work again.
 */
void weft__ws_sleep(int64_t deadline_ns);

/*
 * Join help: run other jobs (the caller's own newest first, then stolen
 * ones) until done(arg) is true; give up and return false after about
 * WEFT__WS_HELP_NS with nothing found to run, or when help is nested too
 * deep on this thread's stack. The caller then blocks. True when done.
 */
#define WEFT__WS_HELP_NS (50 * 1000LL)
bool weft__ws_help(bool (*done)(void *arg), void *arg);

/* The process forked: in the child only the calling thread exists; every deque but its own is emptied. */
void weft__ws_atfork_child(void);

#endif /* WEFT_CPU_STEAL_H */
