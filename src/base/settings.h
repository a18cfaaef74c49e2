/*
 * This file contains the runtime's settings: what weft_configure set, else
 * the environment, else the default, resolved from one table (settings.c)
 * that weft_config_init, weft_configure, the environment parser and the
 * generated docs/api.md ("Settings") all read. Each part of weft reads them
 * when it starts (weft__settings_get) and keeps its copy for the run.
 */
#ifndef WEFT_BASE_SETTINGS_H
#define WEFT_BASE_SETTINGS_H

#include "internal.h"

/* Room for a word-valued setting (longer values are cut). */
#define WEFT__SETTING_TEXT 256

typedef struct weft__settings {
  bool fibers;               /* WEFT_FIBERS */
  unsigned carriers;         /* WEFT_CARRIERS */
  size_t stack_size;         /* WEFT_STACK_SIZE, bytes */
  unsigned pin_threshold_ms; /* WEFT_PIN_THRESHOLD_MS */
  unsigned max_carriers;     /* WEFT_MAX_CARRIERS */
  bool trace_pinned;         /* WEFT_TRACE_PINNED */
  unsigned io_uring;         /* WEFT_IO_URING: 0 off, 1 files (the ring the wait point from then on), 2 all */
  bool write_behind;      /* WEFT_WRITE_BEHIND: 1, a fiber's small TCP write returns before its ring send */
  bool migrate;           /* WEFT_MIGRATE */
  unsigned offload_max;   /* WEFT_OFFLOAD_MAX */
  unsigned explain;       /* WEFT_EXPLAIN: 0 off, 1 once per CPU map call site and decision, 2 every call */
  unsigned deadlock_ms;   /* WEFT_DEADLOCK_MS: report fibers parked with nothing to wake them; 0 off */
  unsigned stack_hold_ms; /* WEFT_STACK_HOLD_MS: an idle runtime keeps a burst's stacks this long */
  char stack_guard[WEFT__SETTING_TEXT]; /* WEFT_STACK_GUARD as given ("" unset): fiber/stack.c parses it */
  char dump_signal[WEFT__SETTING_TEXT]; /* WEFT_DUMP_SIGNAL as given ("" unset): api/inspect.c parses it */
  char places[WEFT__SETTING_TEXT];      /* WEFT_PLACES as given ("" unset): base/places.c parses it */
} weft__settings;

/* The settings in force now. Any thread. */
void weft__settings_get(weft__settings *s);

/* weft_config_init: every field "unset" (the environment or the default). */
void weft__settings_config_init(weft_config *cfg);

/*
 * weft_configure: -EINVAL when a field is out of range (nothing changes);
 * else, unless busy() (then -EBUSY), keep cfg for the settings to come.
 * busy is asked under the settings' lock.
 */
int weft__settings_configure(const weft_config *cfg, bool (*busy)(void));

#endif /* WEFT_BASE_SETTINGS_H */
