/*
 * This file contains the interface between `weft-bench gpars` (which times
 * a parallel map on each backend) and its cases (what one element does):
 * math, files and http, one file each.
 */
#ifndef WEFT_BENCH_GPARS_H
#define WEFT_BENCH_GPARS_H

#include <stddef.h>
#include <stdint.h>

typedef struct gpars_case {
  const char *name; /* the --case value */
  const char *what; /* one line for the report: what an element does */
  size_t default_items;
  /*
   * Prepare items elements from seed into *ctx. Returns 0; -ENOSYS when the
   * case is not in this build (err says why; the command exits 3); other
   * negative errno values with err filled. On failure nothing is left behind
   * (temporary files included).
   */
  int (*setup)(void **ctx, size_t items, uint64_t seed, char *err, size_t errlen);
  /* One element: the same machine code on every backend. Any context (thread, fiber, OpenMP task). */
  int (*element)(void *ctx, size_t i);
  /* Forget the last outputs (before a timed batch). */
  void (*reset)(void *ctx);
  /* Check every output against the sequential answer: 0, or -EIO with err filled. */
  int (*check)(void *ctx, char *err, size_t errlen);
  /* Release everything, temporary files included. NULL ctx is ignored. */
  void (*teardown)(void *ctx);
} gpars_case;

extern const gpars_case wb_gpars_math, wb_gpars_files, wb_gpars_http;

#endif /* WEFT_BENCH_GPARS_H */
