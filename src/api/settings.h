/*
 * This file contains the resolved runtime settings: what weft_configure set,
 * else the environment, else the default (config.c).
 */
#ifndef WEFT_API_SETTINGS_H
#define WEFT_API_SETTINGS_H

#include "../internal.h"

typedef struct weft__settings {
  bool fibers;               /* WEFT_FIBERS */
  unsigned carriers;         /* WEFT_CARRIERS */
  size_t stack_size;         /* WEFT_STACK_SIZE, bytes */
  unsigned pin_threshold_ms; /* WEFT_PIN_THRESHOLD_MS */
  unsigned max_carriers;     /* WEFT_MAX_CARRIERS */
  bool trace_pinned;         /* WEFT_TRACE_PINNED */
  bool io_uring;             /* WEFT_IO_URING */
  unsigned offload_max;      /* WEFT_OFFLOAD_MAX */
  unsigned explain; /* WEFT_EXPLAIN: 0 off, 1 once per CPU map call site and decision, 2 every call */
  unsigned deadlock_ms; /* WEFT_DEADLOCK_MS: report fibers parked with nothing to wake them; 0 off */
} weft__settings;

void weft__settings_get(weft__settings *s);

/* Register weft's pthread_atfork handler (once; called before weft starts any thread). */
void weft__atfork_init(void);

#endif
