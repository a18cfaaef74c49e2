/*
 * This file contains weft_mpi_reduce: weft_reduce across the ranks of a
 * communicator, deterministic as weft_reduce is.
 *
 * The tree: rank r folds its STATIC block (pmap.c's weft_mpi__block_lo and
 * _len) with the local weft_reduce, whose tree depends only on the block's
 * length and the grain; the P partial results are then combined over the
 * ranks by the same rule, [lo, hi) of ranks split at lo + (hi - lo) / 2, on
 * every rank that receives the result. So the result depends on n, P and
 * the grain, never on timing or on the threads of any rank, and every
 * receiving rank computes the same bits (the same combinations of the same
 * bytes, with the same binary). DYNAMIC has no place here: where a chunk
 * runs would decide the tree.
 *
 * One call, in collective steps: the local checks and the buffers; the
 * agreement on the arguments (pmap.c's weft_mpi__agree_args, the same
 * reduction as weft_mpi_pmap's); the local reduction; then the partial
 * results' gather (MPI_Iallgather, or MPI_Igather to the root) and the
 * agreement on weft's own errors (MPI_Iallreduce, MIN), waited together.
 * The gathered bytes are copied to slots of whole cache lines before they
 * are combined: the user's combine may read them as any type.
 */
#include "mpi_internal.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define SLOT_ALIGN 64

/* A rank's block, folded with global indices: fn and combine see the caller's ctx. */
typedef struct shifted {
  weft_reduce_fn fn;
  weft_combine_fn combine;
  void *ctx;
  size_t first;
} shifted;

static void shifted_leaf(void *p, size_t lo, size_t hi, void *acc) {
  const shifted *s = p;
  s->fn(s->ctx, s->first + lo, s->first + hi, acc);
}

static void shifted_combine(void *p, void *acc, const void *other) {
  const shifted *s = p;
  s->combine(s->ctx, acc, other);
}

/* Combine the ranks' slots [lo, hi) in the fixed tree; the slot that holds the result. */
static int combine_ranks(const shifted *s, unsigned char *slots, size_t stride, int lo, int hi) {
  if (hi - lo == 1) return lo;
  int mid = lo + (hi - lo) / 2;
  int l = combine_ranks(s, slots, stride, lo, mid);
  int r = combine_ranks(s, slots, stride, mid, hi);
  s->combine(s->ctx, slots + (size_t)l * stride, slots + (size_t)r * stride);
  return l;
}

static int noop(void *ctx, size_t i) {
  (void)ctx;
  (void)i;
  return 0;
}

int weft_mpi_reduce(MPI_Comm comm, size_t n, weft_reduce_fn fn, weft_combine_fn combine, void *ctx,
                    const void *identity, void *result, size_t size, const weft_mpi_pmap_opts *opts) {
  int init = 0, fin = 0, inter = 0;
  MPI_Initialized(&init);
  if (init) MPI_Finalized(&fin);
  if (!init || fin || comm == MPI_COMM_NULL) return -EINVAL;
  if (MPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter) return -EINVAL;

  weft_mpi__map m = {.comm = comm, .n = n, .elem = size, .fail_index = WEFT_MPI__NO_FAILURE};
  weft_mpi_pmap_opts defaults = WEFT_MPI_PMAP_OPTS_INIT;
  m.o = opts ? *opts : defaults;
  MPI_Comm_rank(comm, &m.rank);
  MPI_Comm_size(comm, &m.size);
  m.receives = m.o.root == WEFT_MPI_ALL || m.o.root == m.rank;

  /* Step 1: this rank's own checks, and its buffers. */
  int local_err = 0;
  if (!fn || !combine || !identity || (m.receives && !result) || size == 0 ||
      m.o.schedule != WEFT_MPI_STATIC || (m.o.root != WEFT_MPI_ALL && (m.o.root < 0 || m.o.root >= m.size)) ||
      weft_pmap(0, noop, NULL, &m.o.local) != 0)
    local_err = EINVAL;
  else if (size > (size_t)INT_MAX)
    local_err = EOVERFLOW; /* MPI counts bytes in int */
  size_t stride = (size + SLOT_ALIGN - 1) / SLOT_ALIGN * SLOT_ALIGN;
  unsigned char *gathered = NULL, *slots = NULL, *mine = NULL;
  if (!local_err) {
    size_t p = m.receives ? (size_t)m.size : 1;
    gathered = m.receives ? malloc(p * size) : NULL;
    mine = aligned_alloc(SLOT_ALIGN, stride);
    slots = m.receives ? aligned_alloc(SLOT_ALIGN, p * stride) : NULL;
    if ((m.receives && (!gathered || !slots)) || !mine) local_err = ENOMEM;
  }
  int rc = weft_mpi__agree_args(&m, local_err);
  if (rc != 0) goto out;

  /* Step 3: this rank's block, by the local weft_reduce. */
  size_t lo = weft_mpi__block_lo(n, m.size, m.rank), len = weft_mpi__block_len(n, m.size, m.rank);
  shifted s = {fn, combine, ctx, lo};
  weft_pmap_opts local = m.o.local;
  int lrc = weft_reduce(len, shifted_leaf, shifted_combine, &s, identity, mine, size, &local), all_rc = lrc;

  /* Step 4: the partial results and weft's own errors, together. */
  MPI_Request req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  int mrc = MPI_SUCCESS;
  if (m.size > 1) {
    mrc = MPI_Iallreduce(&lrc, &all_rc, 1, MPI_INT, MPI_MIN, comm, &req[0]);
    if (mrc == MPI_SUCCESS) {
      if (m.o.root == WEFT_MPI_ALL)
        mrc = MPI_Iallgather(mine, (int)size, MPI_BYTE, gathered, (int)size, MPI_BYTE, comm, &req[1]);
      else
        mrc = MPI_Igather(mine, (int)size, MPI_BYTE, gathered, (int)size, MPI_BYTE, m.o.root, comm, &req[1]);
    }
  } else {
    memcpy(gathered, mine, size);
  }
  if (mrc != MPI_SUCCESS || (m.size > 1 && weft_mpi__wait(2, req, NULL, -1, 0) != 0)) {
    rc = -EIO;
    goto out;
  }
  if (all_rc != 0) {
    rc = all_rc;
    goto out;
  }
  if (m.receives) {
    for (int r = 0; r < m.size; r++) memcpy(slots + (size_t)r * stride, gathered + (size_t)r * size, size);
    int root = combine_ranks(&s, slots, stride, 0, m.size);
    memcpy(result, slots + (size_t)root * stride, size);
  }
out:
  free(gathered);
  free(slots);
  free(mine);
  return rc;
}

int weft_mpi_reduce_f(MPI_Fint comm, size_t n, weft_reduce_fn fn, weft_combine_fn combine, void *ctx,
                      const void *identity, void *result, size_t size, const weft_mpi_pmap_opts *opts) {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  if (init) MPI_Finalized(&fin);
  if (!init || fin) return -EINVAL;
  return weft_mpi_reduce(MPI_Comm_f2c(comm), n, fn, combine, ctx, identity, result, size, opts);
}
