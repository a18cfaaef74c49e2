/*
 * This file contains the statistics the Google Benchmark suites add to the
 * library's mean, median, standard deviation and cv over repetitions.
 */
#ifndef WEFT_BENCH_STATS_H
#define WEFT_BENCH_STATS_H

#include <algorithm>
#include <vector>

/*
 * The fastest repetition (an aggregate "_min"). On a shared machine a
 * repetition is only ever slowed, never sped up, by its neighbours, so
 * the min of interleaved repetitions is the estimate least moved by them;
 * quote it beside the median.
 */
inline double bench_min(const std::vector<double> &v) {
  return v.empty() ? 0.0 : *std::min_element(v.begin(), v.end());
}

/* The median of v (0 when empty): Dot_Paired and Waxpby_Paired report it over their rounds. */
inline double bench_median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

#endif /* WEFT_BENCH_STATS_H */
