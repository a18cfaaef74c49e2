/*
 * Suite "mpi_level" (under mpirun -np 2): MPI initialised with
 * MPI_THREAD_FUNNELED, below what fibers need to wait on MPI. A fiber's
 * weft_mpi_wait says so (-ENOTSUP, and one line on stderr), while the main
 * thread's waits and weft_mpi_pmap, which makes its MPI calls on the
 * caller's thread, work as they do under MPI_THREAD_MULTIPLE.
 */
#include <errno.h>
#include <stdlib.h>

#include "mpi_harness.h"

static void *wait_on_fiber(void *arg) {
  MPI_Request *r = arg;
  return (void *)(intptr_t)weft_mpi_wait(r, MPI_STATUS_IGNORE, 0);
}

static void test_fiber_refused(void) {
  if (!weft_test_fibers_expected()) return; /* the fallback runs it on a thread: not this case */
  CU_ASSERT(weft_mpi_test_level() < MPI_THREAD_MULTIPLE);
  int v = -1;
  MPI_Request r;
  MPI_Irecv(&v, 1, MPI_INT, MPI_ANY_SOURCE, 5, MPI_COMM_WORLD, &r); /* never sent */
  weft_future *f;
  CU_ASSERT_EQUAL_FATAL(weft_future_start(WEFT_BLOCKING, wait_on_fiber, &r, &f), 0);
  void *res = NULL;
  CU_ASSERT_EQUAL(weft_future_get(f, -1, &res), 0);
  weft_future_free(f);
  CU_ASSERT_EQUAL((int)(intptr_t)res, -ENOTSUP);
  CU_ASSERT(r != MPI_REQUEST_NULL); /* untouched */
  MPI_Cancel(&r);
  MPI_Wait(&r, MPI_STATUS_IGNORE);
}

static void test_thread_works(void) {
  int rank = weft_mpi_test_rank(), size = weft_mpi_test_size();
  int v = -1, out = rank;
  MPI_Request r[2];
  MPI_Irecv(&v, 1, MPI_INT, (rank + size - 1) % size, 6, MPI_COMM_WORLD, &r[0]);
  MPI_Isend(&out, 1, MPI_INT, (rank + 1) % size, 6, MPI_COMM_WORLD, &r[1]);
  CU_ASSERT_EQUAL(weft_mpi_waitall(2, r, MPI_STATUSES_IGNORE, weft_now_ns() + 60000000000LL), 0);
  CU_ASSERT_EQUAL(v, (rank + size - 1) % size);
}

static int square(void *ctx, size_t i, void *out) {
  (void)ctx;
  *(uint64_t *)out = (uint64_t)i * i;
  return 0;
}

static void test_pmap_from_main(void) {
  for (int sch = 0; sch < 2; sch++) {
    uint64_t *res = malloc(10000 * sizeof *res);
    weft_mpi_pmap_opts o = WEFT_MPI_PMAP_OPTS_INIT;
    o.schedule = sch;
    o.root = WEFT_MPI_ALL;
    CU_ASSERT_EQUAL(weft_mpi_pmap(MPI_COMM_WORLD, 10000, sizeof *res, square, NULL, res, &o), 0);
    bool ok = true;
    for (uint64_t i = 0; i < 10000; i++) ok = ok && res[i] == i * i;
    CU_ASSERT_TRUE(ok);
    free(res);
  }
}

int main(int argc, char **argv) {
  static const weft_test tests[] = {
      {"fiber_refused", test_fiber_refused},
      {"thread_works", test_thread_works},
      {"pmap_from_main", test_pmap_from_main},
      {NULL, NULL},
  };
  return weft_mpi_test_main(argc, argv, "mpi_level", tests, MPI_THREAD_FUNNELED);
}
