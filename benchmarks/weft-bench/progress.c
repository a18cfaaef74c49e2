/*
 * This file contains the progress line that long runs show on a terminal:
 * one line on stderr, rewritten in place, erased before results are
 * printed. It is off when stderr is not a terminal (a log or a pipe should
 * hold results, not carriage returns) and with --json.
 */
#define _POSIX_C_SOURCE 200809L
#include "bench.h"

#include <stdarg.h>
#include <unistd.h>

static bool enabled;    /* set once by wb_progress_init, before any thread starts */
static bool shown;      /* a line is on the screen */
static int64_t last_ns; /* when the line was last written */

void wb_progress_init(bool json) { enabled = !json && isatty(STDERR_FILENO); }

bool wb_progress_enabled(void) { return enabled; }

void wb_progress(bool force, const char *fmt, ...) {
  if (!enabled) return;
  int64_t now = wb_now_ns();
  /* A few updates a second: more is unreadable and costs the run time. */
  if (!force && shown && now - last_ns < 200000000) return;
  last_ns = now;
  va_list ap;
  va_start(ap, fmt);
  fputs("\r\033[K", stderr);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fflush(stderr);
  shown = true;
}

void wb_progress_clear(void) {
  if (!enabled || !shown) return;
  fputs("\r\033[K", stderr);
  fflush(stderr);
  shown = false;
}
