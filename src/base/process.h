/*
 * This file contains what weft does with the process as a whole: starting
 * its own threads, what each part does when the process forks (one
 * pthread_atfork for all of weft) and when it ends without weft_shutdown
 * (one destructor for all of weft).
 */
#ifndef WEFT_BASE_PROCESS_H
#define WEFT_BASE_PROCESS_H

#include <pthread.h>

#include "internal.h"

/*
 * Start a thread for weft's own use: all signals blocked (weft's threads never
 * run the program's signal handlers, except the synchronous faults that the
 * kernel delivers to the faulting thread), a stack of `stack_size` bytes
 * (0: the default) and a name for debuggers (at most 15 characters), which
 * the thread gives itself as it starts.
 * Returns 0 or a negative errno.
 */
int weft__thread_start(pthread_t *t, size_t stack_size, const char *name, void *(*fn)(void *), void *arg);

/*
 * The same, with the new thread's affinity set to the one CPU `cpu` from its
 * start (cpu < 0: inherited, as weft__thread_start). Returns 0, 1 when the
 * thread started but not on that CPU (one the process may not use: it then
 * has the inherited mask), or a negative errno.
 */
int weft__thread_start_on(pthread_t *t, size_t stack_size, int cpu, const char *name, void *(*fn)(void *),
                          void *arg);

/*
 * Threads started by weft__thread_start whose function has not returned yet
 * (tests check that weft_shutdown leaves none, but the one that is kept on
 * purpose: the host of weft's OpenMP team under libomp, see cpu_omp.c).
 */
int weft__threads_alive(void);

/* A small text file (/proc, /sys) into buf, NUL-terminated: the bytes read, or -1. */
ssize_t weft__read_small(const char *path, char *buf, size_t cap);

/*
 * Under a finite RLIMIT_AS (ulimit -v): the bytes of address space the limit
 * leaves the process now (the limit less its VmSize; 0 when it is over).
 * SIZE_MAX when there is no limit. The limit goes to *limit when limit is
 * not NULL (SIZE_MAX without one). A system call and a read of
 * /proc/self/status: for decisions that are rare (a chunk of stacks, a team).
 */
size_t weft__as_room(size_t *limit);

/*
 * The memory cgroup's limit on the process and its usage now, in bytes
 * (cgroup v2's memory.max and memory.current, or v1's memory.limit_in_bytes
 * and memory.usage_in_bytes). True when a limit is set; false when there is
 * none, no memory controller, or nothing readable. Reads a few files: for
 * rare decisions.
 */
bool weft__mem_limit(uint64_t *limit, uint64_t *usage);

/*
 * What a part of weft does around fork(): prepare runs in the forking
 * thread before the fork (take the locks that the child must find free),
 * parent and child after it, each in its process. Any may be NULL. As with
 * pthread_atfork, prepare hooks run in the reverse order of registration and
 * the others in order. A child has only the forking thread: its hook forgets
 * the parent's threads and re-initialises the locks they might have held.
 * Register each part once (pthread_once), before it starts a thread or
 * takes a lock a fork could catch; at most WEFT__FORK_HOOKS.
 */
#define WEFT__FORK_HOOKS 16
void weft__on_fork(void (*prepare)(void), void (*parent)(void), void (*child)(void));

/*
 * What a part of weft does when the process ends without weft_shutdown
 * (return from main or exit() with work in flight). weft's destructor runs
 * after the program's atexit handlers (so a handler may still use weft, or
 * call weft_shutdown) and before the OpenMP runtime's own teardown, which
 * fails when one of weft's threads is inside a region or calls into it then
 * (cpu_omp.c). It calls every begin, which stops new work and returns at
 * once, then every wait, which waits until `deadline` (CLOCK_MONOTONIC
 * nanoseconds) at most for that part's threads to be still. Nothing is
 * freed: the process is ending. Register each part once, from its start
 * (at most WEFT__EXIT_HOOKS).
 */
#define WEFT__EXIT_HOOKS 4
void weft__on_exit(void (*begin)(void), void (*wait)(int64_t deadline));

#endif /* WEFT_BASE_PROCESS_H */
