/*
 * This file contains weft_mpi_pmap's DYNAMIC schedule: how the ranks claim
 * indices from each other at run time.
 *
 * ==== Counters that live with their blocks ====================================
 *
 * The indices are cut into the same blocks as STATIC's, one per rank, and
 * each block has a counter of the indices taken from it, an int64 in an
 * MPI-3 window on the rank that owns the block. A claim is one
 * MPI_Fetch_and_op(MPI_SUM) of the chunk's size on a block's counter: the
 * value it returns is where the chunk starts, and a value at or past the
 * block's end says the block is empty (counters only grow, so an empty
 * block stays empty). A rank claims from its own block first. Then it reads
 * every other block's counter at once (MPI_NO_OP fetches, one
 * MPI_Win_flush_all: one round trip, not one per rank), takes from the
 * block with the most left until it is empty, and reads again, skipping the
 * blocks it has seen empty; it stops when every block is.
 *
 * So no rank serves everyone's claims. While blocks last, a rank's claims
 * go to its own counter: atomics on memory it owns (in shared memory for
 * ranks of one node). Only the end of the map, when blocks run out at
 * different times, sends claims across ranks, and those spread over the
 * ranks that still have work. A single counter on rank 0 (the textbook
 * MPI-3 shared counter) would put every claim of every rank on one target:
 * at a thousand ranks with chunks of a millisecond, a million claims a
 * second on one NIC. docs/mpi.md has the arithmetic, and the simulation.
 *
 * ==== How much a claim takes ==================================================
 *
 * Each claim runs as one weft_pmap of the chunk on this rank (with the
 * caller's local options), so a claim costs a map's start and join plus an
 * atomic: a few microseconds. The automatic size aims at TARGET_NS of work
 * per claim, from the time the last chunks took: it starts at cmin (one
 * index per worker of the local map, the OpenMP team's size, so that even a
 * claim of slow elements keeps every worker busy; a chunk of the local grain
 * per worker where the caller set one, since a claim of fewer indices than
 * that leaves workers idle and still pays their fork (an explicit grain
 * always forks the team): with a grain of 10 and claims of 2, a CPU map of
 * 10^5 fast indices on 4 ranks made 12,500 claims a rank, each a fork, and
 * under ASan on oversubscribed cores a fork took up to 100 ms, so the claims
 * never grew (docs/mpi.md); for WEFT_BLOCKING with
 * max_parallel, that many), grows at most twofold per claim, shrinks at once
 * when elements turn out slower, and never takes more than half of what it
 * believes is left of its own block, or 1 / (2 P) of what is left of
 * another rank's, P the number of ranks. That is factoring (a round of P
 * claims takes about half of what is left) with the remaining work
 * estimated per block: while every rank works on its own block, P blocks
 * drain together and half of one is 1 / (2 P) of all that is left; a block
 * that others steal from is among the last, and is then shared among all
 * the ranks, so its pieces shrink P times faster. A rank that moves on to
 * another rank's block also starts again from cmin: what its own elements
 * cost says nothing of another block's (with work that grows with the
 * index, a rank whose cheap block taught it large claims would otherwise
 * take a run of the dearest elements of the last block in one claim, and
 * finish last). The first default kept the size learned at home and took up
 * to half of what was left of any block (issue 28 reported it at 1.55-1.90 s
 * against STATIC's 0.95 s on 4 ranks with index i costing i * i units;
 * docs/mpi.md has what was measured here before and after). Capping the
 * home block at 1 / (2 P) as well was tried and rejected: at a thousand
 * ranks its claims would shrink to a few hundred indices long before any
 * rank came to help, thousands of claims (each a local map's fork and
 * join) where a few dozen do. A WEFT_BLOCKING map without
 * max_parallel runs a chunk's elements all at once, so a chunk takes as long
 * as its slowest element whatever its size: there the size is simply half of
 * what is left (of what the last reading of the counter said was left, for
 * another rank's block).
 *
 * Progress: a claim needs nothing from the block's owner where the MPI
 * library does atomics in shared memory or in the network (Open MPI's osc
 * sm, rdma and ucx components; MPICH's ch4). Where it emulates them with
 * messages (Open MPI's osc pt2pt over TCP), a claim on a busy rank waits
 * until that rank next calls MPI, at its next claim at the latest: about
 * TARGET_NS.
 *
 * ==== Memory ==================================================================
 *
 * Where this rank receives the results, elements write them in place. Else
 * they go to m->buf in claim order: the home block fits in what the door
 * allocated; each steal first makes room, and a rank that cannot stops
 * stealing (the others take the rest; nothing is lost). The runs of indices
 * claimed are kept for the gather, adjacent ones merged.
 */
#include "mpi_internal.h"

#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef WEFT_MPI_HAVE_OPENMP
#include <omp.h>
#endif

#define TARGET_NS 1000000 /* a claim's aim: about 1 ms of work */

static atomic_flag rma_warned = ATOMIC_FLAG_INIT; /* the broken-atomics line is printed once per process */
static atomic_bool rma_broken;                    /* a DYNAMIC map ran as STATIC for that reason */

bool weft_mpi__rma_broken(void) { return atomic_load(&rma_broken); }

typedef struct chunker {
  size_t fixed;  /* opts.chunk, or 0 for automatic */
  size_t ranks;  /* P: an automatic claim on another rank's block takes at most 1 / (2 P) of what is left */
  bool stealing; /* the block being taken is another rank's */
  size_t cmin;   /* the smallest automatic claim: one index (or chunk of the grain) per local worker */
  bool guided;   /* WEFT_BLOCKING without max_parallel: half of what is left, always */
  size_t c;      /* the next automatic claim, from the time the last ones took */
} chunker;

static size_t chunk_size(const chunker *k, size_t left) {
  size_t c;
  if (k->fixed) {
    c = k->fixed;
  } else {
    size_t half = left / 2 + (left & 1);
    size_t d = k->stealing ? 2 * k->ranks : 2; /* factoring's share, P times smaller on a shared block */
    size_t share = left / d + (left % d != 0);
    c = k->guided ? half : k->c > share ? share : k->c;
    if (c < k->cmin) c = k->cmin;
  }
  return c < left ? c : left;
}

static void chunk_measured(chunker *k, size_t took, int64_t ns) {
  if (k->fixed || k->guided || took == 0) return;
  if (ns < 1) ns = 1;
  double next = (double)took * (double)TARGET_NS / (double)ns;
  size_t cap = k->c > SIZE_MAX / 2 ? SIZE_MAX : 2 * k->c;
  size_t c = next >= (double)cap ? cap : (size_t)next;
  k->c = c < k->cmin ? k->cmin : c;
}

/* Room for one more run and c more results, before the claim: false when there is none. */
static bool reserve(weft_mpi__map *m, size_t c) {
  if (m->elem == 0) return true;
  if (m->nchunks == m->chunks_cap) {
    size_t cap = 2 * m->chunks_cap;
    uint64_t *p = realloc(m->chunks, 2 * cap * sizeof *p);
    if (!p) return false;
    m->chunks = p;
    m->chunks_cap = cap;
  }
  if (!m->receives && m->buf_len + c > m->buf_cap) {
    size_t cap = 2 * m->buf_cap;
    if (cap < m->buf_len + c) cap = m->buf_len + c;
    char *p = realloc(m->buf, cap * m->elem);
    if (!p) return false;
    m->buf = p;
    m->buf_cap = cap;
  }
  return true;
}

static void record(weft_mpi__map *m, size_t first, size_t len) {
  if (m->elem == 0) return;
  uint64_t *last = m->nchunks ? &m->chunks[2 * (m->nchunks - 1)] : NULL;
  if (last && last[0] + last[1] == first) {
    last[1] += len; /* the previous claim, and adjacent: one run (in m->buf too) */
    return;
  }
  m->chunks[2 * m->nchunks] = first;
  m->chunks[2 * m->nchunks + 1] = len;
  m->nchunks++;
}

/* How many workers a CPU weft_pmap of this rank runs on: the OpenMP team's size (OMP_NUM_THREADS), or the
 * CPUs. */
static size_t cpu_workers(void) {
#ifdef WEFT_MPI_HAVE_OPENMP
  int t = omp_get_max_threads();
  return t > 0 ? (size_t)t : 1;
#else
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return (size_t)CPU_COUNT(&set);
  long c = sysconf(_SC_NPROCESSORS_ONLN);
  return c > 0 ? (size_t)c : 1;
#endif
}

size_t weft_mpi__claim_min(const weft_pmap_opts *local, size_t workers) {
  if (local->kind == WEFT_BLOCKING) return local->max_parallel ? local->max_parallel : workers;
  size_t g = local->grain > 1 ? local->grain : 1;
  return workers > SIZE_MAX / g ? SIZE_MAX : workers * g; /* a chunk of the grain per worker */
}

/*
 * Claim and run chunks of v's block until it is empty, knowing that `seen`
 * of it was taken. Returns true when this rank must stop claiming: no room
 * for more results, or weft's own error.
 */
static bool take_block(weft_mpi__map *m, MPI_Win win, chunker *k, int v, size_t seen) {
  size_t lo = weft_mpi__block_lo(m->n, m->size, v), len = weft_mpi__block_len(m->n, m->size, v);
  k->c = k->cmin; /* another block's elements may cost anything: learn them again */
  k->stealing = v != m->rank;
  while (seen < len) {
    size_t c = chunk_size(k, len - seen);
    if (!reserve(m, c)) {
      /* No room: stop here. Others take the rest; only the home block's owner must report it. */
      if (v == m->rank) m->weft_err = -ENOMEM;
      m->steal_stopped = true;
      return true;
    }
    int64_t add = (int64_t)c, old = 0;
    MPI_Fetch_and_op(&add, &old, MPI_INT64_T, v, 0, MPI_SUM, win);
    MPI_Win_flush(v, win);
    if (old < 0 || (size_t)old >= len) break;
    size_t first = lo + (size_t)old, take = c < len - (size_t)old ? c : len - (size_t)old;
    char *out = m->elem == 0  ? NULL
                : m->receives ? m->results + first * m->elem
                              : m->buf + m->buf_len * m->elem;
    int64_t t0 = weft_now_ns();
    weft_mpi__run(m, first, take, out);
    chunk_measured(k, take, weft_now_ns() - t0);
    record(m, first, take);
    if (!m->receives) m->buf_len += take;
    seen = (size_t)old + take;
    if (m->weft_err)
      return true; /* weft itself failed (the chunk did not run): the outcome is that error anyway */
  }
  if (v != m->rank) m->empty[v] = 1;
  return false;
}

int weft_mpi__dynamic_run(weft_mpi__map *m, MPI_Win *win_out) {
  int64_t *counter = NULL;
  MPI_Win win = MPI_WIN_NULL;
  if (MPI_Win_allocate((MPI_Aint)sizeof(int64_t), (int)sizeof(int64_t), MPI_INFO_NULL, m->comm, &counter,
                       &win) != MPI_SUCCESS) {
    m->weft_err = -EIO;
    return -EIO;
  }
  *win_out = win;
  /*
   * The counter starts at 0 before anyone claims: a local store in an
   * exclusive epoch, then a reduction that is also the barrier. Before the
   * store, a probe: one MPI_Fetch_and_op on the fresh counter, which must
   * return 0 and leave 1. The probe is there because an MPI library's
   * one-sided atomics can be broken where its transport is (Debian 12's
   * MPICH 4.0.2 on ch4:ucx, in a container: MPI_Get returns 0 and
   * MPI_Fetch_and_op changes nothing): then every rank takes its own block,
   * as STATIC does, rather than return wrong results.
   */
  static const int64_t none = 0, one = 1; /* operands: they must stay valid until the flush */
  int64_t probe = -1;
  MPI_Win_lock(MPI_LOCK_EXCLUSIVE, m->rank, 0, win);
  *counter = 0;
  MPI_Win_sync(win);
  MPI_Fetch_and_op(&one, &probe, MPI_INT64_T, m->rank, 0, MPI_SUM, win);
  MPI_Win_flush(m->rank, win);
  MPI_Win_sync(win);
  bool counted = *counter == 1;
  *counter = 0;
  MPI_Win_unlock(m->rank, win);
  int ok = probe == 0 && counted, all_ok = 0;
  MPI_Request req;
  if (MPI_Iallreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, m->comm, &req) != MPI_SUCCESS ||
      weft_mpi__coll_wait(&req) != 0) {
    m->weft_err = -EIO;
    return -EIO;
  }

  chunker k = {.fixed = m->o.chunk,
               .ranks = (size_t)m->size,
               .cmin = weft_mpi__claim_min(&m->o.local, cpu_workers()),
               .guided = m->o.local.kind == WEFT_BLOCKING && !m->o.local.max_parallel};
  k.c = k.cmin;

  if (!all_ok) {
    atomic_store(&rma_broken, true);
    if (m->rank == 0 && !atomic_flag_test_and_set(&rma_warned))
      fprintf(
          stderr,
          "weft_mpi: this MPI library's one-sided atomics gave a wrong value (MPI_Fetch_and_op on a fresh "
          "window): WEFT_MPI_DYNAMIC runs as WEFT_MPI_STATIC\n");
    size_t lo = weft_mpi__block_lo(m->n, m->size, m->rank), len = weft_mpi__block_len(m->n, m->size, m->rank);
    if (len && reserve(m, len)) {
      weft_mpi__run(m, lo, len, m->elem == 0 ? NULL : m->receives ? m->results + lo * m->elem : m->buf);
      record(m, lo, len);
      if (!m->receives) m->buf_len += len;
    } else if (len) {
      m->weft_err = -ENOMEM;
    }
    return 0;
  }
  MPI_Win_lock_all(MPI_MODE_NOCHECK, win);

  /* The home block first, then the others', the one with the most left first, until none has any. */
  bool stop = take_block(m, win, &k, m->rank, 0);
  while (!stop) {
    int best = -1;
    size_t best_left = 0;
    for (int v = 0; v < m->size; v++)
      if (v != m->rank && !m->empty[v])
        MPI_Fetch_and_op(&none, &m->scan[v], MPI_INT64_T, v, 0, MPI_NO_OP, win);
    MPI_Win_flush_all(win);
    for (int v = 0; v < m->size; v++) {
      if (v == m->rank || m->empty[v]) continue;
      size_t len = weft_mpi__block_len(m->n, m->size, v);
      size_t taken = m->scan[v] < 0 ? len : (size_t)m->scan[v];
      if (taken >= len) {
        m->empty[v] = 1; /* counters only grow: never read again */
        continue;
      }
      if (len - taken > best_left) {
        best = v;
        best_left = len - taken;
      }
    }
    if (best < 0) break;
    stop = take_block(m, win, &k, best, weft_mpi__block_len(m->n, m->size, best) - best_left);
  }
  MPI_Win_unlock_all(win);
  return 0;
}
