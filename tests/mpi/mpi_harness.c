/*
 * This file contains the multi-rank suites' main and helpers (see mpi_harness.h).
 */
#include "mpi_harness.h"

#include <stdio.h>

static int rank, size, provided;

int weft_mpi_test_rank(void) { return rank; }
int weft_mpi_test_size(void) { return size; }
int weft_mpi_test_level(void) { return provided; }

bool weft_mpi_test_all(bool local) {
  int in = local ? 1 : 0, out = 0;
  MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  return out != 0;
}

long long weft_mpi_test_sum(long long local) {
  long long out = 0;
  MPI_Allreduce(&local, &out, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  return out;
}

int weft_mpi_test_main(int argc, char **argv, const char *suite, const weft_test *tests, int level) {
  if (MPI_Init_thread(&argc, &argv, level, &provided) != MPI_SUCCESS) {
    fprintf(stderr, "%s: MPI_Init_thread failed\n", suite);
    return 2;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int status = weft_test_run(argc, argv, suite, tests);
  int agreed = status;
  MPI_Allreduce(&status, &agreed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (agreed != 0 && status == 0) printf("%s: rank %d passed, another rank failed\n", suite, rank);
  MPI_Finalize();
  return agreed;
}
