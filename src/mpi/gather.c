/*
 * This file contains the gather of weft_mpi_pmap's DYNAMIC results: each
 * rank holds the results of the runs of indices it claimed, and the root
 * (the rank that receives, or rank 0 for WEFT_MPI_ALL) must end with all of
 * them in index order.
 *
 *   1. MPI_Igather    each rank's number of runs and of results, to the root
 *   2. MPI_Iallreduce whether everyone could allocate what comes next (MAX)
 *   3. MPI_Igatherv   the runs themselves, (first index, length) pairs
 *   4. MPI_Igatherv   the results, each rank's in its claim order, into a
 *                     staging buffer at the root: a rank that computed in
 *                     place (WEFT_MPI_ALL) sends its runs of results as an
 *                     hindexed type, the others their buffer
 *   5. at the root, each run copied from the staging buffer to its place
 *   6. MPI_Ibcast     for WEFT_MPI_ALL, the root's complete results to all
 *
 * Collectives only, never point-to-point messages on the caller's
 * communicator: those could match the program's own MPI_ANY_TAG receives,
 * and avoiding it would take an MPI_Comm_dup (a collective of its own, and
 * a communicator to keep somewhere) per call.
 *
 * Rejected: MPI_Ialltoallw with an hindexed receive type per rank, which
 * would put every result in place at the root with no staging buffer and no
 * copy. Open MPI 4.1's libnbc hangs the next nonblocking collective after an
 * MPI_Ialltoallw where only some ranks have data to move (reproduced with
 * n = 1 on 2 ranks); the blocking MPI_Alltoallw works, but cannot park a
 * fiber. The copy costs a memcpy of what the other ranks computed, about a
 * millisecond per 8 MB.
 *
 * At scale the data step is bound by the root's link: n * elem_size bytes
 * arrive there whatever the schedule (the same as STATIC's MPI_Gatherv);
 * steps 1 to 3 move 16 bytes per run. docs/mpi.md works it out for 1,000
 * ranks.
 */
#include "mpi_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int weft_mpi__dynamic_gather_begin(weft_mpi__map *m, MPI_Request *req) {
  size_t my_elems = 0;
  for (size_t c = 0; c < m->nchunks; c++) my_elems += (size_t)m->chunks[2 * c + 1];
  m->mine[0] = (int)m->nchunks;
  m->mine[1] = (int)my_elems;
  bool at_root = m->rank == m->gather_root;
  /* 1. */
  return MPI_Igather(m->mine, 2, MPI_INT, at_root ? m->a_counts : NULL, 2, MPI_INT, m->gather_root, m->comm,
                     req) == MPI_SUCCESS
             ? 0
             : -EIO;
}

int weft_mpi__dynamic_gather_finish(weft_mpi__map *m) {
  int P = m->size, root = m->gather_root;
  bool at_root = m->rank == root;
  bool typed_send = !at_root && m->receives; /* WEFT_MPI_ALL: computed in place, sent as its runs */
  const int *mine = m->mine;
  int *pairs = m->a_counts;                     /* 2P at the root: runs and results of each rank */
  int *counts = m->counts, *displs = m->displs; /* P each: the current Igatherv's */
  int rc = 0;
  MPI_Request req;

  /* 2. The root: everyone's runs, and room for what the others computed. A typed sender: its type's arrays.
   */
  size_t total_runs = 0, staged = 0;
  if (at_root)
    for (int r = 0; r < P; r++)
      if (r != root) {
        total_runs += (size_t)pairs[2 * r];
        staged += (size_t)pairs[2 * r + 1];
      }
  uint64_t *runs = NULL;
  char *staging = NULL;
  int *lens = NULL;
  MPI_Aint *disps = NULL;
  MPI_Datatype send_type = MPI_DATATYPE_NULL;
  int status = 0, agreed = 0;
  if (at_root && total_runs) {
    runs = malloc(2 * total_runs * sizeof *runs);
    staging = malloc(staged ? staged * m->elem : 1);
    if (!runs || !staging) status = ENOMEM;
  } else if (typed_send && m->nchunks) {
    lens = malloc(m->nchunks * sizeof *lens);
    disps = malloc(m->nchunks * sizeof *disps);
    if (!lens || !disps) status = ENOMEM;
  }
  if (MPI_Iallreduce(&status, &agreed, 1, MPI_INT, MPI_MAX, m->comm, &req) != MPI_SUCCESS ||
      weft_mpi__coll_wait(&req) != 0)
    agreed = EIO;
  if (agreed) {
    rc = -agreed;
    goto out;
  }

  /* 3. The root's own runs are in place already: it receives only the others'. */
  if (at_root) {
    int off = 0;
    for (int r = 0; r < P; r++) {
      counts[r] = r == root ? 0 : 2 * pairs[2 * r];
      displs[r] = off;
      off += counts[r];
    }
  }
  if (MPI_Igatherv(at_root ? MPI_IN_PLACE : m->chunks, at_root ? 0 : 2 * mine[0], MPI_UINT64_T, runs, counts,
                   displs, MPI_UINT64_T, root, m->comm, &req) != MPI_SUCCESS ||
      weft_mpi__coll_wait(&req) != 0) {
    rc = -EIO;
    goto out;
  }

  /* 4. */
  const void *sendbuf = m->buf;
  int sendcount = mine[1];
  MPI_Datatype sendtype = m->elem_type;
  if (at_root) {
    int off = 0;
    for (int r = 0; r < P; r++) {
      counts[r] = r == root ? 0 : pairs[2 * r + 1];
      displs[r] = off;
      off += counts[r];
    }
  } else if (typed_send && m->nchunks) {
    for (size_t c = 0; c < m->nchunks; c++) {
      disps[c] = (MPI_Aint)(m->chunks[2 * c] * m->elem);
      lens[c] = (int)m->chunks[2 * c + 1];
    }
    if (MPI_Type_create_hindexed((int)m->nchunks, lens, disps, m->elem_type, &send_type) != MPI_SUCCESS ||
        MPI_Type_commit(&send_type) != MPI_SUCCESS) {
      rc = -EIO; /* only under MPI_ERRORS_RETURN; sends nothing, so that the others are not left waiting */
      sendcount = 0;
    } else {
      sendbuf = m->results;
      sendcount = 1;
      sendtype = send_type;
    }
  }
  int grc = MPI_Igatherv(at_root ? MPI_IN_PLACE : sendbuf, at_root ? 0 : sendcount, sendtype, staging, counts,
                         displs, m->elem_type, root, m->comm, &req);
  if (grc != MPI_SUCCESS || weft_mpi__coll_wait(&req) != 0) rc = -EIO;
  if (rc != 0) goto out;

  /* 5. */
  if (at_root) {
    const uint64_t *run = runs;
    const char *from = staging;
    for (int r = 0; r < P; r++) {
      if (r == root) continue;
      for (int c = 0; c < pairs[2 * r]; c++, run += 2) {
        size_t bytes = (size_t)run[1] * m->elem;
        memcpy(m->results + run[0] * m->elem, from, bytes);
        from += bytes;
      }
    }
  }

  /* 6. */
  if (m->o.root == WEFT_MPI_ALL) {
    if (MPI_Ibcast(m->results, (int)m->n, m->elem_type, root, m->comm, &req) != MPI_SUCCESS ||
        weft_mpi__coll_wait(&req) != 0)
      rc = -EIO;
  }
out:
  if (send_type != MPI_DATATYPE_NULL) MPI_Type_free(&send_type);
  free(runs);
  free(staging);
  free(lens);
  free(disps);
  return rc;
}
