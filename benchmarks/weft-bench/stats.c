/*
 * This file contains the statistics weft-bench reports over repetitions:
 * min, median and max (no mean: one descheduled repetition on a noisy
 * machine would move it, and the median is what `compare` compares), and
 * the order in which repetitions interleave the backends.
 */
#define _POSIX_C_SOURCE 200809L
#include "bench.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

wb_summary wb_summarize(const double *v, size_t n) {
  wb_summary s = {NAN, NAN, NAN};
  if (n == 0) return s;
  double small[64];
  double *tmp = n <= 64 ? small : malloc(n * sizeof *tmp);
  if (!tmp) {
    /* Out of memory for the copy: min and max need none, and the median falls back to the first sample. */
    s.min = s.max = s.median = v[0];
    for (size_t i = 1; i < n; i++) {
      if (v[i] < s.min) s.min = v[i];
      if (v[i] > s.max) s.max = v[i];
    }
    return s;
  }
  memcpy(tmp, v, n * sizeof *tmp);
  qsort(tmp, n, sizeof *tmp, cmp_double);
  s.min = tmp[0];
  s.max = tmp[n - 1];
  s.median = n % 2 ? tmp[n / 2] : (tmp[n / 2 - 1] + tmp[n / 2]) / 2;
  if (tmp != small) free(tmp);
  return s;
}

double wb_round_ms(double ms) { return round(ms * 1000.0) / 1000.0; }

int wb_add_timing(json_value *rec, const double *samples_ms, size_t n) {
  wb_summary s = wb_summarize(samples_ms, n);
  int rc = json_set_int(rec, "repeat", (int64_t)n);
  if (rc == 0) rc = json_set_num(rec, "elapsed_ms", wb_round_ms(s.median));
  if (rc == 0) rc = json_set_num(rec, "elapsed_ms_min", wb_round_ms(s.min));
  if (rc == 0) rc = json_set_num(rec, "elapsed_ms_max", wb_round_ms(s.max));
  if (rc == 0) {
    double small[64];
    double *r = n <= 64 ? small : malloc(n * sizeof *r);
    if (!r) return -ENOMEM;
    for (size_t i = 0; i < n; i++) r[i] = wb_round_ms(samples_ms[i]);
    rc = json_set_nums(rec, "samples_ms", r, n);
    if (r != small) free(r);
  }
  return rc;
}

size_t wb_interleave(size_t r, size_t k, size_t nb) { return (r + k) % nb; }
