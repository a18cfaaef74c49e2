/*
 * This file contains the interface of the CPU backend: where WEFT_CPU work
 * runs, and where WEFT_BLOCKING work falls back when there are no fibers.
 *
 * Implementations:
 *   cpu_omp.c    OpenMP: parallel regions on the runtime's pooled threads,
 *                tasks in an enclosing team, and a team of weft's own (the
 *                "host") for asynchronous work such as CPU futures.
 *   cpu_pool.c   weft's own pool of threads: used when weft is built without
 *                OpenMP (through cpu_noomp.c), and by cpu_omp.c in a child
 *                forked from a process whose libgomp threads did not survive
 *                the fork.
 *
 * The range that a map hands to it is range.h's.
 */
#ifndef WEFT_CPU_CPU_H
#define WEFT_CPU_CPU_H

#include "../base/queue.h"
#include "../base/internal.h"
#include "../base/lock.h"
#include "range.h"

/* A unit of asynchronous work for weft__cpu_submit. */
typedef struct weft__job {
  void (*run)(struct weft__job *j); /* runs once on a CPU worker; may free j */
  struct weft__job *next;           /* queue link, owned by the queue that holds the job */
  struct weft__job *prev;
  bool queued; /* in the pool's queue (cpu_pool.c): guarded by its lock */
} weft__job;

/* Queues of jobs: the host team's FIFO (cpu_omp.c), the pool's list, which a map takes helpers back from. */
WEFT__QUEUE(weft__jobq, weft__job, next);
WEFT__LIST(weft__joblist, weft__job, next, prev);

/*
 * Run every index of r, on as many workers as the backend gives (bounded by
 * r->max_workers), and return when all have run. The calling thread takes
 * part. Inside an OpenMP region or task this makes tasks in the enclosing
 * team. Not on a fiber outside an OpenMP region (the API layer hands such
 * calls to weft__cpu_submit and parks).
 */
void weft__cpu_run_range(weft__range *r);

/*
 * The kinds of team a CPU map can fork; each has its own fork-cost
 * estimates (model.h): a parallel region of the runtime's pooled threads,
 * tasks in an enclosing team, weft's pool, or jobs on the caller's
 * work-stealing deque for the workers of weft's own team (steal.h).
 */
enum { WEFT__TEAM_REGION = 0, WEFT__TEAM_TASKS, WEFT__TEAM_POOL, WEFT__TEAM_STEAL, WEFT__TEAM_KINDS };

/* What a map forked from the calling thread would get. */
typedef struct weft__team {
  unsigned kind; /* WEFT__TEAM_*: a parallel region, tasks in the enclosing team, weft's pool */
  unsigned size; /* workers a fork gets, the caller included */
  unsigned idle; /* of those, how many could start now, the caller included (size when unknown) */
} weft__team;

/* Describe the team a map forked here would get. Not on a fiber outside a region. */
void weft__cpu_team(weft__team *t);

/* The kind of weft__cpu_team only, cheaply (the model keeps its fork costs per kind). */
unsigned weft__cpu_team_kind(void);

/*
 * Run r's unclaimed indices on k workers of that team (2 <= k <= its size),
 * the caller taking part, split into a slice per worker; return when all
 * have run. r has an automatic grain and is not yet split. Where fewer
 * workers come, the caller and those that came run everything.
 */
void weft__cpu_fork(weft__range *r, size_t k);

/*
 * Run j->run(j) on a CPU worker, never on the calling thread before this
 * returns. Returns 0, -ESHUTDOWN while shutting down, or a negative errno
 * when no worker can be started (the caller reports or falls back).
 */
int weft__cpu_submit(weft__job *j);

/*
 * weft__cpu_submit for a plain thread that may join j itself (a CPU
 * future): where weft's team is open, j goes on the calling thread's
 * work-stealing deque (steal.h), from which an idle worker steals it or the
 * caller takes it back (weft__cpu_take). Never on a fiber: a fiber's
 * carrier does not run CPU work. Same results as weft__cpu_submit.
 */
int weft__cpu_spawn(weft__job *j);

/*
 * True when j is the newest job of the calling thread's deque and was taken
 * off it: the caller now owns the run and calls j->run(j) itself. False when
 * it is not there (stolen, queued elsewhere, or behind newer jobs).
 */
bool weft__cpu_take(weft__job *j);

/*
 * While waiting for done(arg), a plain thread runs other CPU jobs (its own
 * newest, then stolen ones). Returns true once done(arg); false when it
 * found nothing to run for a while, or may not help here: the caller then
 * blocks. Never on a fiber.
 */
bool weft__cpu_help(bool (*done)(void *arg), void *arg);

/* Make sure weft's team will run: a deque got a job while the team was closing (steal.c, cpu_omp.c). */
void weft__cpu_kick(void);

/* True inside an OpenMP parallel region or task (nesting level > 0). */
bool weft__cpu_in_region(void);

/* Workers that a new parallel map gets outside any region. */
unsigned weft__cpu_threads(void);

/* Wait for submitted jobs to finish, then stop the backend's own threads. */
void weft__cpu_shutdown(void);

/* True on a thread of weft's own OpenMP team (or pool) while it runs weft's work. */
bool weft__cpu_host_member(void);

/* 1 when the host thread of weft's OpenMP team is kept alive on purpose (libomp, cpu_omp.c), else 0. */
int weft__cpu_kept_threads(void);

/* "libgomp", "libomp", "pool" (which runtime CPU work uses in this process). */
const char *weft__cpu_runtime_name(void);

/* The pool backend (cpu_pool.c), also used by cpu_omp.c after fork. */
void weft__pool_run_range(weft__range *r);
void weft__pool_team(weft__team *t);
void weft__pool_fork(weft__range *r, size_t k);
int weft__pool_submit(weft__job *j);
unsigned weft__pool_threads(void);
void weft__pool_shutdown(void);
/* True when the calling thread is one of the pool's workers. */
bool weft__pool_is_worker(void);

#endif /* WEFT_CPU_CPU_H */
