/*
 * weft_mpi: weft across the ranks of an MPI job.
 *
 * Two things, on top of weft.h: a parallel map whose indices are shared out
 * among the ranks of a communicator (weft_mpi_pmap), each rank running its
 * share through its own weft_pmap; and waits for MPI requests that park a
 * fiber instead of blocking its carrier (weft_mpi_wait, weft_mpi_waitall),
 * with any MPI library as the distribution builds it (Open MPI and MPICH
 * from Debian are tested; no special build, no async-progress thread).
 *
 * An optional component: its own library, built when CMake finds MPI.
 * Build and link: `pkg-config --cflags --libs weft-mpi`, or CMake's
 * `find_package(weft)` and the target `weft::mpi`. The core library never
 * links MPI. weft_mpi uses only weft.h's public calls.
 *
 * weft.h's conventions hold here too: errors are 0 or a negative errno value
 * (never errno, never an MPI error code; weft_strerror() describes them); a
 * call checks its arguments before it changes any state; time limits are
 * absolute deadlines on weft_now_ns()'s clock (-1 forever, 0 try once);
 * "contexts" name who may call. MPI's own errors: weft_mpi calls MPI with the
 * communicator's error handler as the program set it. Under the default,
 * MPI_ERRORS_ARE_FATAL, an MPI error ends the job inside MPI; under
 * MPI_ERRORS_RETURN, weft_mpi returns -EIO (and a status's MPI_ERROR field
 * holds MPI's code where MPI put one there).
 *
 * MPI's thread level. weft runs code on several OS threads (carriers,
 * OpenMP threads), so which MPI calls are allowed where follows the level
 * that MPI_Init_thread gave the program:
 *  - weft_mpi_pmap makes its own MPI calls on the calling thread only, so it
 *    needs no more than that thread may already do (MPI_THREAD_FUNNELED from
 *    the main thread). Elements that call MPI themselves run on other
 *    threads and need MPI_THREAD_MULTIPLE, as any MPI call from several
 *    threads does.
 *  - weft_mpi_wait and weft_mpi_waitall on a fiber need MPI_THREAD_MULTIPLE:
 *    the requests are tested by weft_mpi's progress fiber (below) on
 *    whatever carrier it runs on, while other fibers call MPI on theirs.
 *    The first such call checks the level (MPI_Query_thread); below
 *    MPI_THREAD_MULTIPLE it returns -ENOTSUP and prints one line on stderr
 *    saying so, once per process. On a plain thread they need no more than
 *    the thread may already do.
 *
 * How a fiber waits. A fiber whose request is incomplete parks on a
 * semaphore of its own, and its requests join one table per process. One
 * progress fiber calls MPI_Testsome over the whole table, wakes the fibers
 * whose requests completed, and sleeps between polls with an exponential
 * back-off (from 1 µs to 1 ms; reset by every completion), so that a
 * request is seen at most about as late again as it took to complete, no
 * carrier ever blocks in MPI, and a process whose fibers all wait for late
 * messages polls at most a thousand times a second. With no request
 * pending the progress fiber waits on a condition variable, and ends after
 * 20 ms without work: an idle weft_mpi uses no CPU and holds no fiber, and
 * weft_shutdown() does not wait for it for longer than that. The progress
 * fiber is an ordinary fiber: a carrier held by a call that blocks its
 * thread (a plain MPI_Wait, sleep(); WEFT_TRACE_PINNED=1 reports them)
 * delays every fiber's MPI wait of the process while the progress fiber
 * happens to live on that carrier.
 */
#ifndef WEFT_MPI_H
#define WEFT_MPI_H

#include <mpi.h>

#include "weft.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* A parallel map across ranks                                               */
/* ------------------------------------------------------------------------ */

/*
 * One element of weft_mpi_pmap: compute element i and write its result,
 * elem_size bytes, to out (NULL when elem_size is 0). Return 0, or any
 * nonzero value as an error, as weft_index_fn does.
 */
typedef int (*weft_mpi_fn)(void *ctx, size_t i, void *out);

/* weft_mpi_pmap_opts.schedule: how the global indices are shared out among the ranks. */
#define WEFT_MPI_STATIC  0 /* contiguous blocks, one per rank, in rank order (the default) */
#define WEFT_MPI_DYNAMIC 1 /* claimed at run time, so that uneven work is balanced */

/* weft_mpi_pmap_opts.root: every rank receives all the results. */
#define WEFT_MPI_ALL (-1)

/*
 * Options for weft_mpi_pmap(). Zero-initialise (or use
 * WEFT_MPI_PMAP_OPTS_INIT) and set what you need; zero always means the
 * default, and more fields may be added at the end in later versions.
 */
typedef struct weft_mpi_pmap_opts {
  weft_pmap_opts local; /* each rank's weft_pmap: kind, grain, max_parallel, flags */
  int schedule;         /* WEFT_MPI_STATIC (default) or WEFT_MPI_DYNAMIC */
  size_t chunk;         /* DYNAMIC: indices per claim; 0 = automatic (sized to about 1 ms of work) */
  int root;             /* rank that receives the results (default 0), or WEFT_MPI_ALL */
} weft_mpi_pmap_opts;

#define WEFT_MPI_PMAP_OPTS_INIT                                                                              \
  { WEFT_PMAP_OPTS_INIT, WEFT_MPI_STATIC, 0, 0 }

/*
 * weft_mpi_pmap: call fn(ctx, i, out) exactly once for every global index i
 * in [0, n), on some rank of comm, and gather the results: on the root (or
 * on every rank with WEFT_MPI_ALL), results receives all n of them, element
 * i at results + i * elem_size. A collective call: every rank of comm calls
 * it, in the same order relative to its other collective calls on comm, with
 * the same n, elem_size and options (opts->local.grain and
 * opts->local.max_parallel may differ between ranks: they tune each rank's
 * own map). fn and ctx are each rank's own: fn runs in the rank that claimed
 * the index, with that rank's ctx, so every rank must be able to compute any
 * index (the data it needs is there, or fn fetches it).
 *
 * Each rank runs its indices through weft_pmap() with opts->local, so the
 * elements run as weft_pmap runs them: WEFT_CPU as OpenMP tasks, WEFT_BLOCKING
 * on fibers (where fn may wait, e.g. with weft_mpi_wait). out is where the
 * element's result goes: on a rank that receives the results, straight into
 * results; elsewhere into a buffer of weft_mpi's, sent when the map is done.
 *
 * WEFT_MPI_STATIC: rank r takes the r-th of size contiguous blocks (sizes
 * differ by at most one), in one weft_pmap; the results are gathered with
 * MPI_Gatherv (MPI_Allgatherv). WEFT_MPI_DYNAMIC: each rank's block has a
 * counter that lives on that rank (an MPI-3 window, MPI_Fetch_and_op); a
 * rank claims chunks of its own block, then of the block with the most
 * left (it reads all the counters at once), until every block is taken,
 * running one weft_pmap per chunk. With chunk 0 a claim starts at one index
 * per worker of the local map (OMP_NUM_THREADS; for WEFT_BLOCKING,
 * max_parallel) and grows, at most twofold, until one takes about 1 ms,
 * never taking more than half of what is left of the rank's own block, or
 * 1 / (2 size) of what is left of another rank's (factoring: the chunks
 * decrease, so that the last blocks are shared out among all the ranks in
 * small pieces); on each other rank's block it starts again from one index
 * per worker (its elements may cost more). A WEFT_BLOCKING map without
 * max_parallel takes half of what is left each time. No rank
 * serves everyone's claims: most are on the claimer's own counter, the rest
 * spread over the ranks still busy. Each call creates its window (a
 * collective MPI_Win_allocate) and first checks that the MPI library's
 * atomics work on it; where they do not (the call then prints one line on
 * stderr, once per process), DYNAMIC runs as STATIC, with the same results.
 *
 * Returns the same value on every rank: 0 when every call returned 0;
 * otherwise the value returned by the call with the LOWEST global index
 * among those that returned nonzero (every element still runs and the
 * results are still gathered, as with weft_pmap), or weft's own error:
 *  - -EINVAL on every rank when a rank passes arguments different from the
 *    others' (n, elem_size, opts->schedule, chunk, root, local.kind or
 *    local.flags), or when any rank's own are invalid: fn NULL, results
 *    NULL on a rank that receives them while n and elem_size are not 0,
 *    n * elem_size overflowing, a schedule or root out of range, local
 *    options that weft_pmap would refuse. Nothing runs. What cannot be told
 *    apart from a collective that was not called (a rank that passes
 *    another communicator, or never calls) hangs as any MPI collective does;
 *    a rank whose comm is MPI_COMM_NULL, an intercommunicator, or that calls
 *    outside MPI_Init..MPI_Finalize, gets -EINVAL alone (the others then
 *    wait for it, as for any rank that does not call).
 *  - -EOVERFLOW when n exceeds INT_MAX while elem_size is not 0, or
 *    elem_size exceeds INT_MAX: MPI-3 counts elements in int. Nothing runs.
 *  - -ENOMEM when a rank cannot allocate its bookkeeping: on every rank;
 *    nothing runs when this happens before the elements start, and the
 *    results are unspecified when it happens after (DYNAMIC).
 * The results of indices not computed are unspecified only in that last
 * case; results on ranks that do not receive them are left alone.
 *
 * Contexts: a plain thread, an OpenMP task, or a fiber (where its waits
 * park the fiber when MPI_THREAD_MULTIPLE is there, and block the carrier
 * otherwise). It is not a cancellation point: a collective cannot be left
 * half done, so a cancelled blocking future that calls it runs it to the
 * end. Several threads may call it at once on different communicators when
 * MPI allows it (MPI_THREAD_MULTIPLE); calls on one communicator must be
 * ordered by the program, as for any MPI collective. fn, ctx and results
 * stay the caller's: weft_mpi keeps no reference once the call returns.
 */
WEFT_EXTERN int weft_mpi_pmap(MPI_Comm comm, size_t n, size_t elem_size, weft_mpi_fn fn, void *ctx,
                              void *results, const weft_mpi_pmap_opts *opts);

/*
 * weft_mpi_pmap_f: weft_mpi_pmap with the communicator as a Fortran handle
 * (the INTEGER of `use mpi`, or comm%MPI_VAL of `use mpi_f08`), converted
 * with MPI_Comm_f2c. It is what the Fortran module's weft_mpi_pmap calls;
 * the same contract otherwise.
 */
WEFT_EXTERN int weft_mpi_pmap_f(MPI_Fint comm, size_t n, size_t elem_size, weft_mpi_fn fn, void *ctx,
                                void *results, const weft_mpi_pmap_opts *opts);

/*
 * weft_mpi_pmap_range: weft_pmap_range across the ranks of comm. Call
 * fn(ctx, lo, hi) on disjoint sub-ranges of GLOBAL indices that cover
 * [0, n) exactly once over all the ranks; each rank runs its share (STATIC:
 * its block; DYNAMIC: the chunks it claims, as weft_mpi_pmap does) through
 * its own weft_pmap_range with opts->local, so a sub-range never crosses a
 * block or chunk boundary. Nothing is gathered: fn writes wherever its
 * results go (each rank's own memory). A collective call, with the rules of
 * weft_mpi_pmap (same n and options on every rank, elem_size 0, no root:
 * opts->root is checked and agreed but unused).
 *
 * Returns the same value on every rank: 0 when every call returned 0; else
 * the value returned by the call with the LOWEST lo among those that
 * returned nonzero, on whatever rank it ran; or weft's own errors as
 * weft_mpi_pmap's (-EINVAL when fn is NULL on any rank, nothing run).
 * Contexts: as weft_mpi_pmap. fn and ctx stay the caller's.
 */
WEFT_EXTERN int weft_mpi_pmap_range(MPI_Comm comm, size_t n, weft_range_fn fn, void *ctx,
                                    const weft_mpi_pmap_opts *opts);

/*
 * weft_mpi_reduce: weft_reduce across the ranks of comm, deterministic.
 * Rank r folds its STATIC block of GLOBAL indices (the r-th of P
 * contiguous blocks, sizes differing by at most one) with weft_reduce and
 * opts->local (its grain is the leaves' size, within each block), then the
 * P partial results are combined over the ranks by weft_reduce's rule (the
 * ranks [lo, hi) split at lo + (hi - lo) / 2, left receiving), and the
 * result is written to result on the root, or on every rank with
 * WEFT_MPI_ALL. The tree depends only on n, P and the grain: the result is
 * bitwise the same in every run, whatever the threads of each rank, and
 * the same on every rank that receives it. fn and combine see global
 * indices and the calling rank's ctx.
 *
 * A collective call: every rank passes the same n, size and options.
 * Returns the same value on every rank: 0; or, nothing written to result:
 * -EINVAL when a rank passes arguments different from the others', or its
 * own are invalid (fn, combine or identity NULL, result NULL on a rank
 * that receives, size 0, opts->schedule other than WEFT_MPI_STATIC, a root
 * out of range, local options that weft_reduce would refuse); -EOVERFLOW
 * when size exceeds INT_MAX (MPI counts bytes in int); -ENOMEM when a rank
 * cannot allocate the partial results (about P * size bytes on a rank that
 * receives, size on the others), or its local weft_reduce could not; -EIO
 * when MPI failed (under MPI_ERRORS_RETURN). Contexts: as weft_mpi_pmap.
 * ctx, identity and result stay the caller's.
 */
WEFT_EXTERN int weft_mpi_reduce(MPI_Comm comm, size_t n, weft_reduce_fn fn, weft_combine_fn combine,
                                void *ctx, const void *identity, void *result, size_t size,
                                const weft_mpi_pmap_opts *opts);

/*
 * weft_mpi_pmap_range_f and weft_mpi_reduce_f: the same two calls with the
 * communicator as a Fortran handle (MPI_Comm_f2c), for the Fortran module.
 */
WEFT_EXTERN int weft_mpi_pmap_range_f(MPI_Fint comm, size_t n, weft_range_fn fn, void *ctx,
                                      const weft_mpi_pmap_opts *opts);
WEFT_EXTERN int weft_mpi_reduce_f(MPI_Fint comm, size_t n, weft_reduce_fn fn, weft_combine_fn combine,
                                  void *ctx, const void *identity, void *result, size_t size,
                                  const weft_mpi_pmap_opts *opts);

/* ------------------------------------------------------------------------ */
/* Waiting for MPI requests                                                  */
/* ------------------------------------------------------------------------ */

/*
 * weft_mpi_wait: wait until *req completes or the deadline passes, as
 * MPI_Wait does: a completed request is freed and *req set to
 * MPI_REQUEST_NULL (a persistent one is made inactive); *status receives
 * its status unless status is MPI_STATUS_IGNORE (or NULL). A null or
 * inactive request returns 0 at once with an empty status.
 *
 * On a fiber the fiber parks while the request is incomplete (see "How a
 * fiber waits" above); on a plain thread or in an OpenMP task it waits as
 * MPI does: MPI_Wait with deadline -1, else MPI_Test between sleeps of up
 * to 1 ms until the deadline. A fiber inside an OpenMP region of its own
 * polls in the same way, blocking its carrier as weft's other calls do
 * there.
 *
 * Returns 0; -ETIMEDOUT when the deadline passed first (the request is
 * left active and the caller's: wait again, or MPI_Cancel it and wait);
 * -ECANCELED in a cancelled blocking future (a cancellation point, as
 * weft_sem_wait: at once, even when the request is complete; the request
 * is left active); -EINVAL for a NULL req or a bad deadline, or when MPI is
 * not initialised (or already finalised); -ENOTSUP on a fiber when MPI was
 * not initialised with MPI_THREAD_MULTIPLE (above); -EIO when MPI reported
 * an error for the request (under MPI_ERRORS_RETURN).
 *
 * The request must not be used by anyone else (waited, tested, freed)
 * while the call runs. Contexts: any (plain thread, fiber, OpenMP task);
 * many fibers and threads may wait at once, each on its own requests.
 */
WEFT_EXTERN int weft_mpi_wait(MPI_Request *req, MPI_Status *status, int64_t deadline_ns);

/*
 * weft_mpi_waitall: weft_mpi_wait for count requests at once, as
 * MPI_Waitall: returns 0 once all have completed, each freed (or made
 * inactive) and its status in statuses[i] unless statuses is
 * MPI_STATUSES_IGNORE (or NULL). With -ETIMEDOUT or -ECANCELED, the
 * requests that had completed are done as MPI_Testsome does them (set to
 * MPI_REQUEST_NULL, status stored) and the others are left active. -EIO
 * when MPI reported an error for any of them: the MPI_ERROR field of each
 * request's status says which. -EINVAL also for count < 0, or reqs NULL
 * while count > 0; count 0 returns 0. -ENOMEM when more than 64 requests
 * are waited for at once and the call cannot allocate its bookkeeping
 * (nothing was tested then). Contexts: as weft_mpi_wait.
 */
WEFT_EXTERN int weft_mpi_waitall(int count, MPI_Request *reqs, MPI_Status *statuses, int64_t deadline_ns);

#ifdef __cplusplus
}
#endif
#endif /* WEFT_MPI_H */
