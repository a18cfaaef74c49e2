/*
 * This file contains what the multi-rank suites share: a main that runs a
 * CUnit suite on every rank of MPI_COMM_WORLD (with tests/harness.h's
 * checks after each test) and makes every rank exit with the same status,
 * and collective helpers for assertions about all ranks at once.
 *
 * Every test of such a suite is collective: each rank runs the same tests
 * in the same order (argv[1], when given, selects one on every rank), so a
 * test may call MPI collectives. A rank's failed assertions fail its own
 * exit status; the status is agreed (MPI_MAX) before MPI_Finalize, so that
 * mpirun's exit status says the same on every rank.
 */
#ifndef WEFT_MPI_TEST_HARNESS_H
#define WEFT_MPI_TEST_HARNESS_H

#include <stdbool.h>

#include "harness.h"
#include "weft_mpi.h"

/* MPI_Init_thread(level), the suite, the agreed status, MPI_Finalize: the whole main. */
int weft_mpi_test_main(int argc, char **argv, const char *suite, const weft_test *tests, int level);

int weft_mpi_test_rank(void); /* in MPI_COMM_WORLD */
int weft_mpi_test_size(void);
int weft_mpi_test_level(void); /* what MPI_Init_thread provided */

/* True on every rank when `local` is true on every rank (collective). */
bool weft_mpi_test_all(bool local);

/* The sum over ranks (collective). */
long long weft_mpi_test_sum(long long local);

#endif /* WEFT_MPI_TEST_HARNESS_H */
