/*
 * This file contains what the files of weft_mpi share: the wait that
 * weft_mpi_pmap's own collectives use, the state of one map, and the
 * progress engine's counters for the tests. Names are weft_mpi__*: internal
 * but not static (hidden in the shared library, reachable from the static
 * one that the tests link).
 */
#ifndef WEFT_MPI_INTERNAL_H
#define WEFT_MPI_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "weft_mpi.h"

/* --- waits (progress.c) ----------------------------------------------------------- */

/* weft_mpi__wait flags. */
#define WEFT_MPI__CANCELLABLE 0x1u /* a cancellation point: -ECANCELED in a cancelled blocking future */
#define WEFT_MPI__STRICT      0x2u /* on a fiber, -ENOTSUP below MPI_THREAD_MULTIPLE (else block the carrier) */

/*
 * Wait for count requests (weft_mpi_waitall's contract, arguments already
 * checked). Without WEFT_MPI__CANCELLABLE, a fiber in a cancelled future
 * still waits to the end (blocking its carrier: weft.h has no uncancellable
 * park); weft_mpi_pmap's collectives must finish whatever happens.
 */
int weft_mpi__wait(int count, MPI_Request *reqs, MPI_Status *statuses, int64_t deadline_ns, unsigned flags);

/* What the progress engine has done since the process started: for the tests and benchmarks. */
typedef struct weft_mpi__stats {
  uint64_t engines;   /* progress fibers started */
  uint64_t polls;     /* MPI_Testsome calls by them */
  uint64_t parked;    /* fiber waits that parked (their requests joined the table) */
  uint64_t fast;      /* fiber waits whose requests were complete at the first test */
  uint64_t self_poll; /* fiber waits that polled by themselves (no engine, or in an OpenMP region) */
  int table_max;      /* most requests in the table at once */
  int table_now;      /* requests in the table now */
  bool running;       /* an engine exists now */
} weft_mpi__stats;

void weft_mpi__get_stats(weft_mpi__stats *out);

/* --- one map (pmap.c, claims.c, gather.c) ------------------------------------------ */

/* A failure nobody has reported: the "index" that MINLOC finds largest. */
#define WEFT_MPI__NO_FAILURE INT64_MAX

typedef struct weft_mpi__map {
  MPI_Comm comm;
  int rank, size;
  size_t n, elem;
  weft_mpi_fn fn;
  weft_range_fn rfn; /* weft_mpi_pmap_range: set instead of fn (elem is 0); indices are global */
  void *ctx;
  char *results;          /* the caller's; NULL on a rank that does not receive */
  weft_mpi_pmap_opts o;   /* the options, defaults filled in */
  bool receives;          /* results gets all n results here (the root, or WEFT_MPI_ALL) */
  int gather_root;        /* where DYNAMIC's results are gathered first: root, or 0 for WEFT_MPI_ALL */
  MPI_Datatype elem_type; /* elem bytes, contiguous; MPI_DATATYPE_NULL when elem is 0 */

  /* The outcome on this rank, before the ranks agree on it. */
  int64_t fail_index; /* the lowest global index whose fn failed, or WEFT_MPI__NO_FAILURE */
  int fail_value;     /* what it returned */
  int weft_err;       /* weft's own error on this rank (a local weft_pmap's -ENOMEM ...), or 0 */

  /* Allocated before the ranks agree to start, so that running out of memory is agreed too. */
  int *counts, *displs; /* P each: STATIC's Gatherv/Allgatherv; DYNAMIC's list gather (root) */
  int *a_counts;        /* DYNAMIC: 2P ints, each rank's runs and results (the gather's first step) */
  char *buf;            /* a rank that does not receive: its results, in claim order */
  size_t buf_cap;       /* in elements */
  size_t buf_len;
  uint64_t *chunks; /* DYNAMIC: (first index, length) of each run of claimed indices, adjacent runs merged */
  size_t nchunks, chunks_cap;
  int mine[2];          /* DYNAMIC: this rank's runs and results, the gather's first message */
  bool steal_stopped;   /* DYNAMIC: no memory to record another steal: this rank took no more */
  int64_t *scan;        /* DYNAMIC: P, the other blocks' counters as last read */
  unsigned char *empty; /* DYNAMIC: P, blocks seen empty (counters only grow) */
} weft_mpi__map;

/* Rank r's STATIC block (also DYNAMIC's home block of r): [lo, lo + len). */
size_t weft_mpi__block_lo(size_t n, int size, int r);
size_t weft_mpi__block_len(size_t n, int size, int r);

/*
 * DYNAMIC's smallest automatic claim for a local map run with `local` on
 * `workers` workers (claims.c): one index per worker, a chunk of the grain
 * per worker for a CPU map with a grain, max_parallel for a bounded
 * WEFT_BLOCKING map. Saturates at SIZE_MAX.
 */
size_t weft_mpi__claim_min(const weft_pmap_opts *local, size_t workers);

/* Run fn over global indices [first, first + len) through the local weft_pmap, results to out. */
void weft_mpi__run(weft_mpi__map *m, size_t first, size_t len, char *out);

/*
 * Step 2 of a call (pmap.c): agree among the ranks on m's arguments and on
 * whether any rank failed its checks (local_err, a positive errno or 0): 0
 * to go on, else the error every rank returns. weft_mpi_reduce uses it too.
 */
int weft_mpi__agree_args(const weft_mpi__map *m, int local_err);

/* Wait for one of weft_mpi_pmap's own nonblocking collectives. */
int weft_mpi__coll_wait(MPI_Request *req);

/* DYNAMIC (claims.c): claim and run chunks until every block is taken. The window outlives the call. */
int weft_mpi__dynamic_run(weft_mpi__map *m, MPI_Win *win);

/* True once a DYNAMIC map ran as STATIC because the MPI library's one-sided atomics are broken (claims.c). */
bool weft_mpi__rma_broken(void);

/*
 * DYNAMIC (gather.c): gather the claimed chunks' results to the receiving
 * rank(s). begin posts the first collective (the counts, to the root) so
 * that it can be waited for together with the outcome's; finish, once that
 * request is complete, does the rest.
 */
int weft_mpi__dynamic_gather_begin(weft_mpi__map *m, MPI_Request *req);
int weft_mpi__dynamic_gather_finish(weft_mpi__map *m);

#endif /* WEFT_MPI_INTERNAL_H */
