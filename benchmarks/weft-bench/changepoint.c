/*
 * This file contains change-point detection over a history of runs
 * (regress.h): E-divisive means (Matteson and James, "A Nonparametric
 * Approach for Multiple Change Point Analysis of Multivariate Data", JASA
 * 2014), the method of Apache Otava (formerly Hunter, MongoDB's and
 * DataStax's regression finder) and of R's ecp.
 *
 * The statistic. Split a segment X into A = X[s, t) and B = X[t, e) with m
 * and k points. The energy distance between the two samples (with alpha =
 * 1, the absolute difference) is
 *
 *   E = 2/(mk) sum |a - b|  -  1/C(m,2) sum_{a<a'} |a - a'|  -  1/C(k,2) sum_{b<b'} |b - b'|
 *
 * and the split's score is q = mk/(m+k) E. It grows with any difference in
 * distribution (a step in the median, a change of spread) and is zero in
 * expectation without one. The best split of a segment maximises q over t;
 * with the pairwise distances D, the sums within A and within B for every t
 * follow by running sums, so one segment costs O(L^2). (Matteson and James
 * also search the end of B; with the hierarchical splitting below, ending
 * B at the segment's end finds the same steps in a history, where levels
 * hold between steps, and Otava does the same within its windows.)
 *
 * Hierarchy. Start with the whole series as one segment. At each step, find
 * the best split of every segment and take the segment whose best q is
 * largest; keep that split if it is significant, then go on with the two
 * new segments in place of the old one; stop at the first split that is not.
 *
 * Significance: the permutation test of ecp. Shuffle the points within each
 * current segment (under "no further change" every order is equally likely),
 * find the largest best-q over the segments, and count how often it reaches
 * the observed one: p = (count + 1) / (permutations + 1). The split is kept
 * when p < alpha. Otava's newer variant judges each candidate with a
 * Student t test of the two sides' means instead, which is faster but
 * assumes normal noise; the permutation test assumes nothing but
 * exchangeability, and at CI's sizes (tens to hundreds of runs) costs
 * milliseconds. The generator is seeded, so a history always gives the same
 * answer.
 */
#define _POSIX_C_SOURCE 200809L
#include "regress.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The work of one detection: the distances, a permutation, the running sums. */
typedef struct cp_ctx {
  const double *x;
  size_t n;
  size_t *perm; /* perm[i]: the point at position i (the identity, or a shuffle within segments) */
  double *wa;   /* wa[t - s]: the sum of |.| within [s, t) */
  double *wb;   /* wb[t - s]: the sum of |.| within [t, e) */
  size_t min_size;
} cp_ctx;

static double dist(const cp_ctx *c, size_t i, size_t j) { return fabs(c->x[c->perm[i]] - c->x[c->perm[j]]); }

/* The best split t of [s, e) under the current permutation: its q in *q_out; false when too short. */
static bool best_split(cp_ctx *c, size_t s, size_t e, size_t *t_out, double *q_out) {
  size_t L = e - s, ms = c->min_size;
  if (L < 2 * ms) return false;
  /* wa[j]: pairs within [s, s + j); wb[j]: pairs within [s + j, e). */
  c->wa[0] = 0;
  for (size_t j = 1; j <= L; j++) {
    double row = 0;
    for (size_t i = s; i < s + j - 1; i++) row += dist(c, i, s + j - 1);
    c->wa[j] = c->wa[j - 1] + row;
  }
  c->wb[L] = 0;
  for (size_t j = L; j-- > 0;) {
    double row = 0;
    for (size_t i = s + j + 1; i < e; i++) row += dist(c, s + j, i);
    c->wb[j] = c->wb[j + 1] + row;
  }
  double total = c->wa[L], best = -INFINITY;
  size_t bt = 0;
  for (size_t j = ms; j + ms <= L; j++) {
    double m = (double)j, k = (double)(L - j);
    double within_a = c->wa[j], within_b = c->wb[j], cross = total - within_a - within_b;
    double energy = 2 * cross / (m * k) - within_a / (m * (m - 1) / 2) - within_b / (k * (k - 1) / 2);
    double q = m * k / (m + k) * energy;
    if (q > best) {
      best = q;
      bt = s + j;
    }
  }
  *t_out = bt;
  *q_out = best;
  return true;
}

/* The best split over all segments (bounds[0..nb], increasing, bounds[0] = 0, bounds[nb] = n). */
static bool best_of_segments(cp_ctx *c, const size_t *bounds, size_t nb, size_t *t, double *q) {
  bool any = false;
  *q = -INFINITY;
  for (size_t i = 0; i < nb; i++) {
    size_t ti;
    double qi;
    if (best_split(c, bounds[i], bounds[i + 1], &ti, &qi) && qi > *q) {
      *q = qi;
      *t = ti;
      any = true;
    }
  }
  return any;
}

int wb_changepoints(const double *x, size_t n, const wb_cp_opts *o, wb_cp *cps, size_t max, size_t *found) {
  *found = 0;
  if (!o || !(o->alpha > 0 && o->alpha < 1) || o->permutations < 1 || o->min_size < 2) return -EINVAL;
  for (size_t i = 0; i < n; i++)
    if (!isfinite(x[i])) return -EINVAL;
  if (n < 2 * o->min_size) return 0;
  cp_ctx c = {x, n, NULL, NULL, NULL, o->min_size};
  size_t *bounds = malloc((n + 2) * sizeof *bounds);
  wb_cp *all = malloc(n * sizeof *all);
  c.perm = malloc(n * sizeof *c.perm);
  c.wa = malloc((n + 1) * sizeof *c.wa);
  c.wb = malloc((n + 1) * sizeof *c.wb);
  int rc = 0;
  if (!bounds || !all || !c.perm || !c.wa || !c.wb) {
    rc = -ENOMEM;
    goto out;
  }
  bounds[0] = 0;
  bounds[1] = n;
  size_t nb = 1, nall = 0;
  uint64_t rng = o->seed ? o->seed : 1;
  for (;;) {
    for (size_t i = 0; i < n; i++) c.perm[i] = i;
    size_t t;
    double q;
    if (!best_of_segments(&c, bounds, nb, &t, &q)) break;
    size_t reached = 0;
    for (size_t r = 0; r < o->permutations; r++) {
      /* Fisher-Yates within each segment: a change between segments is already accounted for. */
      for (size_t sgi = 0; sgi < nb; sgi++) {
        size_t s = bounds[sgi], e = bounds[sgi + 1];
        for (size_t i = e - 1; i > s; i--) {
          size_t j = s + (size_t)(wb_xorshift64s(&rng) % (uint64_t)(i - s + 1));
          size_t tmp = c.perm[i];
          c.perm[i] = c.perm[j];
          c.perm[j] = tmp;
        }
      }
      size_t tp;
      double qp;
      if (best_of_segments(&c, bounds, nb, &tp, &qp) && qp >= q) reached++;
    }
    double p = (double)(reached + 1) / (double)(o->permutations + 1);
    if (!(p < o->alpha)) break;
    all[nall++] = (wb_cp){t, q, p};
    /* Insert t into the bounds, kept in order. */
    size_t at = 1;
    while (bounds[at] < t) at++;
    memmove(&bounds[at + 1], &bounds[at], (nb + 1 - at) * sizeof *bounds);
    bounds[at] = t;
    nb++;
  }
  /* In index order, as a history is read. */
  for (size_t i = 1; i < nall; i++)
    for (size_t j = i; j > 0 && all[j - 1].index > all[j].index; j--) {
      wb_cp tmp = all[j];
      all[j] = all[j - 1];
      all[j - 1] = tmp;
    }
  for (size_t i = 0; i < nall && i < max; i++) cps[i] = all[i];
  *found = nall < max ? nall : max;
out:
  free(bounds);
  free(all);
  free(c.perm);
  free(c.wa);
  free(c.wb);
  return rc;
}
