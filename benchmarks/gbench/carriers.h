/*
 * This file contains what the Google Benchmark suites share about weft's
 * configuration between cases.
 */
#ifndef WEFT_BENCH_CARRIERS_H
#define WEFT_BENCH_CARRIERS_H

#include "weft.h"

/* Give the fiber runtime `n` carriers (0: the default) from the next start on. */
inline void set_carriers(unsigned n) {
  weft_shutdown();
  weft_config c;
  weft_config_init(&c);
  c.carriers = n;
  weft_configure(&c);
}

#endif /* WEFT_BENCH_CARRIERS_H */
