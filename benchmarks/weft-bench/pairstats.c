/*
 * This file contains the statistics of paired runs (regress.h): the
 * Hodges-Lehmann estimate of a ratio from pairs of runs and the Wilcoxon
 * signed-rank interval and test that go with it.
 *
 * Why these. `pair` runs BASE and NEW back to back, many times; the log of
 * each round's ratio NEW/BASE is one observation d_i, from which the
 * machine's slow minutes have cancelled. The question is where the centre
 * of the d_i lies. A t interval assumes normal noise, and a run that was
 * descheduled is far from normal; the sign test assumes nothing but wastes
 * most of the data (its interval is wide); the signed-rank procedure
 * assumes only that the d_i are symmetric about their centre, which holds
 * when the two sides' noise is alike (the same machine, interleaved), and
 * is nearly as efficient as the t interval on normal data (0.955). A
 * bootstrap would need resampling choices and gives no exact coverage at
 * the small n (6 to 20 rounds) that CI can afford.
 *
 * The interval: with the M = n(n+1)/2 Walsh averages (d_i + d_j) / 2,
 * i <= j, sorted, [W_(k), W_(M+1-k)] covers the centre with probability
 * 1 - 2 P(T+ <= k - 1), T+ the signed-rank statistic under no change
 * (Hollander and Wolfe, Nonparametric Statistical Methods, 3.2). k is the
 * largest that keeps the coverage at least the level asked for. P(T+ <= t)
 * is exact for n <= 60 (the counts of the 2^n sign patterns, by dynamic
 * programming over the ranks, kept as probabilities so that nothing
 * overflows) and the normal approximation with continuity correction
 * beyond. For n < 6 no interval reaches 95%: it is reported as unbounded.
 */
#define _POSIX_C_SOURCE 200809L
#include "regress.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define EXACT_MAX 60

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The probabilities of T+ = 0..n(n+1)/2 for n untied ranks into p (n(n+1)/2 + 1 long). */
static void signrank_pmf(size_t n, double *p) {
  size_t max = n * (n + 1) / 2;
  memset(p, 0, (max + 1) * sizeof *p);
  p[0] = 1;
  /* Adding rank r: T+ keeps its value (r negative) or grows by r (r positive), each with probability 1/2. */
  for (size_t r = 1, top = 0; r <= n; r++) {
    top += r;
    for (size_t t = top; t >= r; t--) p[t] = (p[t] + p[t - r]) / 2;
    for (size_t t = r; t-- > 0;) p[t] /= 2;
  }
}

/* The standard normal distribution function. */
static double norm_cdf(double z) { return 0.5 * erfc(-z / sqrt(2.0)); }

double wb_signrank_cdf(size_t n, double t) {
  double max = (double)n * (double)(n + 1) / 2;
  if (t < 0) return 0;
  if (t >= max) return 1;
  if (n > EXACT_MAX) {
    double mean = max / 2, sd = sqrt((double)n * (double)(n + 1) * (double)(2 * n + 1) / 24);
    return norm_cdf((floor(t) + 0.5 - mean) / sd);
  }
  double p[EXACT_MAX * (EXACT_MAX + 1) / 2 + 1];
  signrank_pmf(n, p);
  double c = 0;
  for (size_t i = 0; i <= (size_t)floor(t); i++) c += p[i];
  return c > 1 ? 1 : c;
}

/* T+ of d[0..n) with ties of |d| given their average rank; zeros left out (*used gets the rest). */
static double signrank_stat(const double *d, size_t n, size_t *used) {
  double *a = malloc((n ? n : 1) * sizeof *a);
  if (!a) return NAN;
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (d[i] != 0) a[k++] = fabs(d[i]);
  qsort(a, k, sizeof *a, cmp_double);
  double t = 0;
  for (size_t i = 0; i < n; i++) {
    if (d[i] <= 0) continue;
    /* The average rank of |d_i| among the nonzero |d|: ranks lo+1 .. hi of its ties. */
    size_t lo = 0, hi = 0;
    while (lo < k && a[lo] < d[i]) lo++;
    hi = lo;
    while (hi < k && a[hi] == d[i]) hi++;
    t += ((double)lo + 1 + (double)hi) / 2;
  }
  free(a);
  *used = k;
  return t;
}

int wb_paired_ratio(const double *base, const double *neu, size_t n, double level, wb_paired *out) {
  wb_paired r = {0, NAN, NAN, -INFINITY, INFINITY, NAN, 1};
  if (!(level > 0.5 && level < 1)) return -EINVAL;
  double *d = malloc((n ? n : 1) * sizeof *d), *ratios = malloc((n ? n : 1) * sizeof *ratios);
  if (!d || !ratios) {
    free(d);
    free(ratios);
    return -ENOMEM;
  }
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    if (!(base[i] > 0) || !(neu[i] > 0) || !isfinite(base[i]) || !isfinite(neu[i])) continue;
    ratios[k] = neu[i] / base[i];
    d[k++] = log(neu[i] / base[i]);
  }
  r.n = k;
  if (k == 0) {
    free(d);
    free(ratios);
    *out = r;
    return 0;
  }
  r.median_ratio = wb_median(ratios, k);
  free(ratios);

  size_t m = k * (k + 1) / 2;
  double *w = malloc(m * sizeof *w);
  if (!w) {
    free(d);
    return -ENOMEM;
  }
  for (size_t i = 0, j = 0; i < k; i++)
    for (size_t l = i; l < k; l++) w[j++] = (d[i] + d[l]) / 2;
  qsort(w, m, sizeof *w, cmp_double);
  r.ratio = exp(m % 2 ? w[m / 2] : (w[m / 2 - 1] + w[m / 2]) / 2);

  /* The largest c with P(T+ <= c) <= (1 - level) / 2; the interval is [W_(c+1), W_(M-c)]. */
  double tail = (1 - level) / 2, cdf = 0, pmf[EXACT_MAX * (EXACT_MAX + 1) / 2 + 1];
  if (k <= EXACT_MAX) signrank_pmf(k, pmf);
  size_t c = 0;
  bool any = false;
  for (; c < m / 2; c++) {
    double next = k <= EXACT_MAX ? cdf + pmf[c] : wb_signrank_cdf(k, (double)c);
    if (next > tail) break;
    cdf = next;
    any = true;
  }
  if (any) {
    c--;
    r.low = exp(w[c]);
    r.high = exp(w[m - 1 - c]);
    r.coverage = 1 - 2 * cdf;
  }
  free(w);

  size_t used;
  double t = signrank_stat(d, k, &used);
  free(d);
  if (isnan(t)) return -ENOMEM;
  if (used > 0) {
    /* Two-sided: twice the smaller tail at the observed T+ (T+ and its mirror M' - T+ are alike). */
    double lower = wb_signrank_cdf(used, t), upper = 1 - wb_signrank_cdf(used, ceil(t) - 1);
    double p = 2 * (lower < upper ? lower : upper);
    r.p_value = p > 1 ? 1 : p;
  }
  *out = r;
  return 0;
}

/* ------------------------------------------------------------------------ */
/* Levels and steps of a series (the change points' sizes)                   */
/* ------------------------------------------------------------------------ */

/* The median of s's values in [a, b). */
static double level_of(const wb_hseries *s, size_t a, size_t b) {
  if (b <= a) return NAN;
  double small[256] = {0};
  double *v = b - a <= 256 ? small : malloc((b - a) * sizeof *v);
  if (!v) return NAN;
  for (size_t i = a; i < b; i++) v[i - a] = s->pts[i].value;
  double m = wb_median(v, b - a);
  if (v != small) free(v);
  return m;
}

int wb_series_steps(const wb_hseries *s, const wb_cp_opts *o, double min_change, wb_step **steps,
                    size_t *nsteps) {
  *steps = NULL;
  *nsteps = 0;
  if (s->n == 0) return 0;
  double *x = malloc(s->n * sizeof *x);
  wb_cp *cps = malloc(s->n * sizeof *cps);
  wb_step *st = malloc(s->n * sizeof *st);
  if (!x || !cps || !st) {
    free(x);
    free(cps);
    free(st);
    return -ENOMEM;
  }
  for (size_t i = 0; i < s->n; i++) x[i] = s->pts[i].value;
  size_t found = 0;
  int rc = wb_changepoints(x, s->n, o, cps, s->n, &found);
  free(x);
  if (rc < 0) {
    free(cps);
    free(st);
    return rc;
  }
  /* Drop the weakest step below min_change, then measure the levels again without it, until none is. */
  for (;;) {
    size_t weakest = found;
    double weakest_pct = INFINITY;
    for (size_t i = 0; i < found; i++) {
      size_t a = i ? cps[i - 1].index : 0, b = i + 1 < found ? cps[i + 1].index : s->n;
      st[i].index = cps[i].index;
      st[i].p_value = cps[i].p_value;
      st[i].before = level_of(s, a, cps[i].index);
      st[i].after = level_of(s, cps[i].index, b);
      st[i].change_pct = st[i].before != 0 ? (st[i].after - st[i].before) / fabs(st[i].before) * 100 : NAN;
      double mag = isnan(st[i].change_pct) ? INFINITY : fabs(st[i].change_pct);
      if (mag < min_change && mag < weakest_pct) {
        weakest = i;
        weakest_pct = mag;
      }
    }
    if (weakest == found) break;
    memmove(&cps[weakest], &cps[weakest + 1], (found - weakest - 1) * sizeof *cps);
    found--;
  }
  free(cps);
  *steps = st;
  *nsteps = found;
  return 0;
}
