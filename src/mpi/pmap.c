/*
 * This file contains weft_mpi_pmap's door and its STATIC schedule: the
 * checks, the agreement among ranks on the arguments and on the outcome,
 * running a range of indices through the local weft_pmap, and the gather
 * of contiguous blocks. weft_mpi_pmap_range goes through the same door with
 * a range function and no results (its chunks run through the local
 * weft_pmap_range). DYNAMIC's claims are in claims.c, its gather in
 * gather.c.
 *
 * ==== One call, in collective steps ==========================================
 *
 *   1. local checks, and every allocation the call can need up front
 *   2. agree (one MPI_Iallreduce, MIN over each value and its complement):
 *      the same n, elem_size, schedule, chunk, root, kind, flags on every
 *      rank, and no rank with an error; else every rank returns the same
 *      error and nothing has run
 *   3. run: STATIC, the rank's block in one weft_pmap; DYNAMIC, claims
 *   4. agree on the outcome (one MPI_Iallreduce, MINLOC): the failure with
 *      the lowest global index, or weft's own error on the lowest rank
 *   5. gather the results, posted together with step 4 (one round of
 *      synchronisation after the elements, not two)
 *
 * Every collective is nonblocking, waited with weft_mpi__coll_wait: a fiber
 * parks on it, a thread waits in MPI_Wait. (A blocking collective on some
 * ranks and a nonblocking one on others never match, so the form cannot
 * depend on where each rank's caller runs.)
 *
 * Why MINLOC: its pairs are (value, location), and ties go to the lowest
 * location. Here the value is the global index that failed (or, for weft's
 * own errors, INT64_MIN + rank, below every index, so that they win) and the
 * location is what was returned: one reduction finds both the lowest
 * failing index and its error.
 */
#include "mpi_internal.h"

#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

size_t weft_mpi__block_lo(size_t n, int size, int r) {
  size_t q = n / (size_t)size, rem = n % (size_t)size, ur = (size_t)r;
  return q * ur + (ur < rem ? ur : rem);
}

size_t weft_mpi__block_len(size_t n, int size, int r) {
  return n / (size_t)size + ((size_t)r < n % (size_t)size ? 1 : 0);
}

int weft_mpi__coll_wait(MPI_Request *req) { return weft_mpi__wait(1, req, NULL, -1, 0); }

/* --- running indices through the local weft_pmap ------------------------------------ */

typedef struct run_ctx {
  weft_mpi_fn fn;
  void *ctx;
  size_t first; /* the global index of local index 0 */
  char *out;    /* where local index 0's result goes */
  size_t elem;
  atomic_size_t fail; /* the lowest local index whose fn failed, or SIZE_MAX */
} run_ctx;

static int run_one(void *p, size_t j) {
  run_ctx *r = p;
  int rc = r->fn(r->ctx, r->first + j, r->elem ? r->out + j * r->elem : NULL);
  if (rc != 0) {
    size_t cur = atomic_load_explicit(&r->fail, memory_order_relaxed);
    while (j < cur && !atomic_compare_exchange_weak_explicit(&r->fail, &cur, j, memory_order_relaxed,
                                                             memory_order_relaxed)) {
    }
  }
  return rc;
}

/* A sub-range of weft_mpi_pmap_range's: global indices, and the lowest failing local lo kept. */
typedef struct span_ctx {
  weft_range_fn fn;
  void *ctx;
  size_t first;
  atomic_size_t fail;
} span_ctx;

static int run_span(void *p, size_t lo, size_t hi) {
  span_ctx *r = p;
  int rc = r->fn(r->ctx, r->first + lo, r->first + hi);
  if (rc != 0) {
    size_t cur = atomic_load_explicit(&r->fail, memory_order_relaxed);
    while (lo < cur && !atomic_compare_exchange_weak_explicit(&r->fail, &cur, lo, memory_order_relaxed,
                                                              memory_order_relaxed)) {
    }
  }
  return rc;
}

void weft_mpi__run(weft_mpi__map *m, size_t first, size_t len, char *out) {
  int rc;
  size_t j;
  if (m->rfn) {
    span_ctx r = {m->rfn, m->ctx, first, SIZE_MAX};
    rc = weft_pmap_range(len, run_span, &r, &m->o.local);
    j = atomic_load(&r.fail);
  } else {
    run_ctx r = {m->fn, m->ctx, first, out, m->elem, SIZE_MAX};
    rc = weft_pmap(len, run_one, &r, &m->o.local);
    j = atomic_load(&r.fail);
  }
  if (rc == 0) return;
  if (j == SIZE_MAX) {
    /* weft_pmap's own error: no element of this range ran. */
    if (!m->weft_err) m->weft_err = rc;
  } else if ((int64_t)(first + j) < m->fail_index) {
    /* weft_pmap returns the lowest failing index's value, and j is that index. */
    m->fail_index = (int64_t)(first + j);
    m->fail_value = rc;
  }
}

/* --- agreement ---------------------------------------------------------------------- */

enum {
  AGREE_N,
  AGREE_ELEM,
  AGREE_SCHEDULE,
  AGREE_CHUNK,
  AGREE_ROOT,
  AGREE_KIND,
  AGREE_FLAGS,
  AGREE_ERR,
  AGREE_K
};

/* Step 2: 0 to go on; else the error every rank returns. local_err is a positive errno or 0. */
int weft_mpi__agree_args(const weft_mpi__map *m, int local_err) {
  uint64_t v[AGREE_K] = {
      [AGREE_N] = m->n,
      [AGREE_ELEM] = m->elem,
      [AGREE_SCHEDULE] = (uint64_t)(int64_t)m->o.schedule,
      [AGREE_CHUNK] = m->o.chunk,
      [AGREE_ROOT] = (uint64_t)(int64_t)m->o.root,
      [AGREE_KIND] = (uint64_t)m->o.local.kind,
      [AGREE_FLAGS] = m->o.local.flags,
      [AGREE_ERR] = (uint64_t)local_err,
  };
  if (m->size == 1) return local_err ? -local_err : 0;
  /* MIN of each value and MIN of its complement (= the complement of its MAX), in one reduction. */
  uint64_t in[2 * AGREE_K], out[2 * AGREE_K];
  for (int i = 0; i < AGREE_K; i++) {
    in[i] = v[i];
    in[AGREE_K + i] = ~v[i];
  }
  MPI_Request req;
  if (MPI_Iallreduce(in, out, 2 * AGREE_K, MPI_UINT64_T, MPI_MIN, m->comm, &req) != MPI_SUCCESS) return -EIO;
  if (weft_mpi__coll_wait(&req) != 0) return -EIO;
  for (int i = 0; i < AGREE_ERR; i++)
    if (out[i] != ~out[AGREE_K + i]) return -EINVAL;
  uint64_t max_err = ~out[AGREE_K + AGREE_ERR];
  return max_err ? -(int)max_err : 0;
}

/* Step 4's reduction: its operand and result. */
typedef struct outcome {
  struct {
    long v;
    int loc;
  } in, out;
} outcome;

/* Step 4, posted: the outcome's reduction is started (on one rank, simply done); its request in *req. */
static int outcome_post(const weft_mpi__map *m, outcome *oc, MPI_Request *req) {
  if (m->weft_err) {
    oc->in.v = LONG_MIN + m->rank;
    oc->in.loc = m->weft_err;
  } else if (m->fail_index != WEFT_MPI__NO_FAILURE) {
    oc->in.v = (long)m->fail_index;
    oc->in.loc = m->fail_value;
  } else {
    oc->in.v = LONG_MAX;
    oc->in.loc = 0;
  }
  *req = MPI_REQUEST_NULL;
  if (m->size == 1) {
    oc->out = oc->in;
    return 0;
  }
  return MPI_Iallreduce(&oc->in, &oc->out, 1, MPI_LONG_INT, MPI_MINLOC, m->comm, req) == MPI_SUCCESS ? 0
                                                                                                     : -EIO;
}

/* Step 4, done: the value every rank returns; *weft_failed says whether it is weft's own error. */
static int outcome_value(const outcome *oc, bool *weft_failed) {
  *weft_failed = oc->out.v < 0;
  return oc->out.v == LONG_MAX ? 0 : oc->out.loc;
}

/* --- STATIC ------------------------------------------------------------------------- */

/*
 * The outcome's reduction and the gather go out together and are waited
 * for together: one round of synchronisation after the elements, not two.
 * The gather does not depend on the outcome: elements' errors leave the
 * results to be gathered, and after weft's own error they are unspecified.
 */
static int static_run_and_gather(weft_mpi__map *m) {
  size_t lo = weft_mpi__block_lo(m->n, m->size, m->rank);
  size_t len = weft_mpi__block_len(m->n, m->size, m->rank);
  char *out = m->elem == 0 ? NULL : m->receives ? m->results + lo * m->elem : m->buf;
  if (len) weft_mpi__run(m, lo, len, out);
  outcome oc;
  MPI_Request req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  bool weft_failed = false;
  if (outcome_post(m, &oc, &req[0]) != 0) return -EIO;
  int mrc = MPI_SUCCESS;
  if (m->elem != 0 && m->size > 1) {
    for (int r = 0; m->counts && r < m->size; r++) { /* the receiving ranks' */
      m->counts[r] = (int)weft_mpi__block_len(m->n, m->size, r);
      m->displs[r] = (int)weft_mpi__block_lo(m->n, m->size, r);
    }
    if (m->o.root == WEFT_MPI_ALL)
      mrc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, m->results, m->counts, m->displs,
                            m->elem_type, m->comm, &req[1]);
    else if (m->rank == m->o.root)
      mrc = MPI_Igatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, m->results, m->counts, m->displs, m->elem_type,
                         m->o.root, m->comm, &req[1]);
    else
      mrc = MPI_Igatherv(m->buf, (int)len, m->elem_type, NULL, NULL, NULL, m->elem_type, m->o.root, m->comm,
                         &req[1]);
  }
  int wrc = weft_mpi__wait(2, req, NULL, -1, 0);
  if (mrc != MPI_SUCCESS || wrc != 0) return -EIO;
  return outcome_value(&oc, &weft_failed);
}

/* --- the door ----------------------------------------------------------------------- */

static int noop(void *ctx, size_t i) {
  (void)ctx;
  (void)i;
  return 0;
}

/* Step 1's allocations: what this rank will need, whatever happens later (0 or ENOMEM). */
static int allocate(weft_mpi__map *m) {
  size_t P = (size_t)m->size;
  bool dynamic = m->o.schedule == WEFT_MPI_DYNAMIC;
  if (m->n == 0 || m->size == 1) return 0;
  if (dynamic) {
    m->scan = malloc(P * sizeof *m->scan);
    m->empty = calloc(P, 1);
    if (!m->scan || !m->empty) return ENOMEM;
  }
  if (m->elem == 0) return 0;
  bool root_side =
      m->o.root == WEFT_MPI_ALL || m->rank == m->o.root || (dynamic && m->rank == m->gather_root);
  if (root_side || dynamic) {
    m->counts = malloc(2 * P * sizeof *m->counts);
    if (!m->counts) return ENOMEM;
    m->displs = m->counts + P;
  }
  if (!m->receives) {
    /* STATIC: this rank's block; DYNAMIC: its home block, grown if it steals. */
    size_t len = weft_mpi__block_len(m->n, m->size, m->rank);
    m->buf_cap = len ? len : 1;
    m->buf = malloc(m->buf_cap * m->elem);
    if (!m->buf) return ENOMEM;
  }
  if (dynamic) {
    m->a_counts = malloc(2 * P * sizeof *m->a_counts);
    m->chunks_cap = 64;
    m->chunks = malloc(2 * m->chunks_cap * sizeof *m->chunks);
    if (!m->a_counts || !m->chunks) return ENOMEM;
  }
  return 0;
}

static void release(weft_mpi__map *m) {
  free(m->counts);
  free(m->buf);
  free(m->a_counts);
  free(m->chunks);
  free(m->scan);
  free(m->empty);
  if (m->elem_type != MPI_DATATYPE_NULL) MPI_Type_free(&m->elem_type);
}

/* The checks of step 1 that every rank makes on its own arguments: 0 or a positive errno. */
static int check_local(const weft_mpi__map *m) {
  const weft_mpi_pmap_opts *o = &m->o;
  if (!m->fn && !m->rfn) return EINVAL;
  if (o->schedule != WEFT_MPI_STATIC && o->schedule != WEFT_MPI_DYNAMIC) return EINVAL;
  if (o->root != WEFT_MPI_ALL && (o->root < 0 || o->root >= m->size)) return EINVAL;
  if (weft_pmap(0, noop, NULL, &o->local) != 0) return EINVAL; /* weft_pmap's own checks of the options */
  if (m->n > (size_t)(INT64_MAX / 4)) return EOVERFLOW;        /* claims add chunks to int64 counters */
  if (m->elem > 0) {
    if (m->elem > (size_t)INT_MAX || m->n > (size_t)INT_MAX) return EOVERFLOW;
    if (m->n > SIZE_MAX / m->elem) return EINVAL;
    if (m->receives && m->n > 0 && !m->results) return EINVAL;
  }
  return 0;
}

/* weft_mpi_pmap and weft_mpi_pmap_range: one of fn and rfn is set (rfn with elem_size 0, results NULL). */
static int door(MPI_Comm comm, size_t n, size_t elem_size, weft_mpi_fn fn, weft_range_fn rfn, void *ctx,
                void *results, const weft_mpi_pmap_opts *opts) {
  int init = 0, fin = 0, inter = 0;
  MPI_Initialized(&init);
  if (init) MPI_Finalized(&fin);
  if (!init || fin || comm == MPI_COMM_NULL) return -EINVAL;
  if (MPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter) return -EINVAL;

  weft_mpi__map m = {.comm = comm,
                     .n = n,
                     .elem = elem_size,
                     .fn = fn,
                     .rfn = rfn,
                     .ctx = ctx,
                     .fail_index = WEFT_MPI__NO_FAILURE,
                     .elem_type = MPI_DATATYPE_NULL};
  weft_mpi_pmap_opts defaults = WEFT_MPI_PMAP_OPTS_INIT;
  m.o = opts ? *opts : defaults;
  MPI_Comm_rank(comm, &m.rank);
  MPI_Comm_size(comm, &m.size);
  m.receives = m.o.root == WEFT_MPI_ALL || m.o.root == m.rank;
  m.gather_root = m.o.root == WEFT_MPI_ALL ? 0 : m.o.root;
  m.results = m.receives ? results : NULL;

  int local_err = check_local(&m);
  if (local_err == 0) local_err = allocate(&m);
  if (local_err == 0 && elem_size > 0 && m.size > 1) {
    if (MPI_Type_contiguous((int)elem_size, MPI_BYTE, &m.elem_type) != MPI_SUCCESS ||
        MPI_Type_commit(&m.elem_type) != MPI_SUCCESS)
      local_err = ENOMEM;
  }
  int rc = weft_mpi__agree_args(&m, local_err);
  if (rc != 0 || n == 0) {
    release(&m);
    return rc;
  }

  if (m.o.schedule == WEFT_MPI_STATIC || m.size == 1) {
    rc = static_run_and_gather(&m);
  } else {
    MPI_Win win = MPI_WIN_NULL;
    weft_mpi__dynamic_run(&m, &win);
    /* The outcome and the gather's first step together, as STATIC does. */
    outcome oc;
    MPI_Request req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    bool weft_failed = false;
    int prc = outcome_post(&m, &oc, &req[0]);
    if (prc == 0 && elem_size > 0) prc = weft_mpi__dynamic_gather_begin(&m, &req[1]);
    if (prc != 0 || weft_mpi__wait(2, req, NULL, -1, 0) != 0) {
      rc = -EIO;
    } else {
      rc = outcome_value(&oc, &weft_failed);
    }
    /* Every rank has finished claiming once the outcome is agreed: the window can go. */
    if (win != MPI_WIN_NULL) MPI_Win_free(&win);
    if (prc == 0 && elem_size > 0) {
      int grc = weft_mpi__dynamic_gather_finish(&m);
      if (grc != 0 && !weft_failed) rc = grc;
    }
  }
  release(&m);
  return rc;
}

int weft_mpi_pmap(MPI_Comm comm, size_t n, size_t elem_size, weft_mpi_fn fn, void *ctx, void *results,
                  const weft_mpi_pmap_opts *opts) {
  return door(comm, n, elem_size, fn, NULL, ctx, results, opts);
}

int weft_mpi_pmap_range(MPI_Comm comm, size_t n, weft_range_fn fn, void *ctx,
                        const weft_mpi_pmap_opts *opts) {
  /* (A NULL fn leaves both functions NULL: the door's checks refuse it on this rank, and so on all.) */
  return door(comm, n, 0, NULL, fn, ctx, NULL, opts);
}

int weft_mpi_pmap_range_f(MPI_Fint comm, size_t n, weft_range_fn fn, void *ctx,
                          const weft_mpi_pmap_opts *opts) {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  if (init) MPI_Finalized(&fin);
  if (!init || fin) return -EINVAL;
  return weft_mpi_pmap_range(MPI_Comm_f2c(comm), n, fn, ctx, opts);
}

int weft_mpi_pmap_f(MPI_Fint comm, size_t n, size_t elem_size, weft_mpi_fn fn, void *ctx, void *results,
                    const weft_mpi_pmap_opts *opts) {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  if (init) MPI_Finalized(&fin);
  if (!init || fin) return -EINVAL;
  return weft_mpi_pmap(MPI_Comm_f2c(comm), n, elem_size, fn, ctx, results, opts);
}
