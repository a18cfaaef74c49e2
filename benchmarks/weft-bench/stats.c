/*
 * This file contains the statistics weft-bench reports over repetitions:
 * min, median and max (no mean: one descheduled repetition on a noisy
 * machine would move it, and the median is what `compare` compares), the
 * spread that says when they are too far apart to trust, the ratios of two
 * cases measured in the same run, and the order in which repetitions
 * interleave the cases.
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
  wb_summary s = {NAN, NAN, NAN, 0};
  double small[64];
  double *tmp = n <= 64 ? small : malloc(n * sizeof *tmp);
  size_t k = 0;
  if (!tmp) {
    /* Out of memory for the copy: min and max need none, and the median falls back to the first number. */
    for (size_t i = 0; i < n; i++) {
      if (isnan(v[i])) continue;
      if (k++ == 0) s.min = s.max = s.median = v[i];
      if (v[i] < s.min) s.min = v[i];
      if (v[i] > s.max) s.max = v[i];
    }
    s.n = k;
    return s;
  }
  /* A repetition that gave no figure (NaN) is left out: it would make qsort's order meaningless. */
  for (size_t i = 0; i < n; i++)
    if (!isnan(v[i])) tmp[k++] = v[i];
  if (k) {
    qsort(tmp, k, sizeof *tmp, cmp_double);
    s.min = tmp[0];
    s.max = tmp[k - 1];
    s.median = k % 2 ? tmp[k / 2] : (tmp[k / 2 - 1] + tmp[k / 2]) / 2;
  }
  s.n = k;
  if (tmp != small) free(tmp);
  return s;
}

double wb_median(const double *v, size_t n) { return wb_summarize(v, n).median; }

double wb_max(const double *v, size_t n) { return wb_summarize(v, n).max; }

double wb_spread(wb_summary s) { return s.median > 0 ? (s.max - s.min) / s.median : NAN; }

double wb_round_ms(double ms) { return round(ms * 1000.0) / 1000.0; }

double wb_round_to(double v, double step) { return step > 0 && isfinite(v) ? round(v / step) * step : v; }

int wb_add_timing(json_t *rec, const double *samples_ms, size_t n) {
  wb_summary s = wb_summarize(samples_ms, n);
  int rc = wb_json_set_int(rec, "repeat", (int64_t)n);
  if (rc == 0) rc = wb_json_set_num(rec, "elapsed_ms", wb_round_ms(s.median));
  if (rc == 0) rc = wb_json_set_num(rec, "elapsed_ms_min", wb_round_ms(s.min));
  if (rc == 0) rc = wb_json_set_num(rec, "elapsed_ms_max", wb_round_ms(s.max));
  if (rc == 0) {
    double small[64];
    double *r = n <= 64 ? small : malloc(n * sizeof *r);
    if (!r) return -ENOMEM;
    for (size_t i = 0; i < n; i++) r[i] = wb_round_ms(samples_ms[i]);
    rc = wb_json_set_nums(rec, "samples_ms", r, n);
    if (r != small) free(r);
  }
  return rc;
}

size_t wb_interleave(size_t r, size_t k, size_t nb) { return (r + k) % nb; }

size_t wb_ratios(const double *a, size_t na, const double *b, size_t nb, double *out) {
  size_t n = na < nb ? na : nb, k = 0;
  for (size_t r = 0; r < n; r++)
    if (b[r] > 0 && !isnan(a[r])) out[k++] = round(a[r] / b[r] * 1e4) / 1e4;
  return k;
}

int wb_json_add_ratio(json_t *rec, const char *key, const double *a, size_t na, const double *b, size_t nb) {
  char skey[64];
  snprintf(skey, sizeof skey, "%s_samples", key);
  double mb = wb_median(b, nb), ma = wb_median(a, na);
  if (!(mb > 0) || isnan(ma)) {
    int rc = wb_json_set_null(rec, key);
    return rc ? rc : wb_json_set_null(rec, skey);
  }
  double *r = malloc((na ? na : 1) * sizeof *r);
  if (!r) return -ENOMEM;
  size_t k = wb_ratios(a, na, b, nb, r);
  int rc = wb_json_set_num(rec, key, round(ma / mb * 1e4) / 1e4);
  if (rc == 0) rc = wb_json_set_nums(rec, skey, r, k);
  free(r);
  return rc;
}
