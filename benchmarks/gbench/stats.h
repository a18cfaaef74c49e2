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

#endif /* WEFT_BENCH_STATS_H */
