/*
 * This file contains the latency percentiles of the network measurements
 * (wb_latency, bench.h): nearest rank over the samples that counted.
 */
#define _POSIX_C_SOURCE 200809L
#include "bench.h"

#include <math.h>
#include <stdlib.h>

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* Nearest rank: the smallest sample with at least p% of the samples at or below it. */
static double rank(const float *v, size_t n, double p) {
  size_t k = (size_t)ceil(p / 100.0 * (double)n);
  if (k < 1) k = 1;
  return v[k - 1] / 1000.0;
}

wb_latency wb_latency_summary(float *us, size_t n) {
  wb_latency l = {NAN, NAN, NAN, NAN, 0};
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (!isnan(us[i])) us[k++] = us[i];
  if (k == 0) return l;
  qsort(us, k, sizeof *us, cmp_float);
  l.n = k;
  l.p50 = rank(us, k, 50);
  l.p90 = rank(us, k, 90);
  l.p99 = rank(us, k, 99);
  l.max = us[k - 1] / 1000.0;
  return l;
}
