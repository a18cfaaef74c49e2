/*
 * This file contains the failure counter that many fibers and threads add
 * to at once (wb_errors, bench.h): a count, and the first failure's text,
 * published once with release/acquire so that a reader never sees half of it.
 */
#define _POSIX_C_SOURCE 200809L
#include "bench.h"

#include <stdio.h>

#include "weft.h"

void wb_errors_init(wb_errors *e) {
  atomic_init(&e->count, 0);
  atomic_flag_clear(&e->first_taken);
  atomic_init(&e->first_ready, false);
  e->first[0] = '\0';
}

void wb_errors_add(wb_errors *e, const char *stage, int err, const char *detail) {
  atomic_fetch_add_explicit(&e->count, 1, memory_order_relaxed);
  if (atomic_flag_test_and_set(&e->first_taken)) return;
  snprintf(e->first, sizeof e->first, "%s: %s", stage, detail ? detail : weft_strerror(err));
  atomic_store_explicit(&e->first_ready, true, memory_order_release);
}

size_t wb_errors_count(wb_errors *e) { return atomic_load(&e->count); }

const char *wb_errors_first(wb_errors *e) {
  return atomic_load_explicit(&e->first_ready, memory_order_acquire) ? e->first : "";
}
