/*
 * This file contains the public face of the runtime's settings
 * (weft_config_init, weft_configure: the table is base/settings.c) and what
 * weft tells about itself (weft_get_info).
 */
#include "../base/internal.h"

#include <stdio.h>
#include <string.h>

#include "../base/places.h"
#include "../base/settings.h"
#include "../base/sys.h"
#include "../cpu/cpu.h"
#include "../fiber/fiber.h"
#include "../fiber/stack.h"
#include "../poll/uring.h"

void weft_config_init(weft_config *cfg) {
  if (cfg) weft__settings_config_init(cfg);
}

int weft_configure(const weft_config *cfg) {
  if (!cfg) return -EINVAL;
  return weft__settings_configure(cfg, weft__fibers_running);
}

int weft_get_info(weft_info *out) {
  if (!out) return -EINVAL;
  weft__settings s;
  weft__settings_get(&s);
  memset(out, 0, sizeof *out);
  out->version = WEFT_VERSION_STRING;
  out->fibers = weft__fibers_running();
  out->context_switch = WEFT_CONTEXT_NAME;
#ifdef WEFT_HAVE_OPENMP
  out->openmp = _OPENMP;
#endif
  out->openmp_runtime = weft__cpu_runtime_name();
  const char *g = weft__stack_guard_name();
  out->stack_guard = g ? g : "not started";
  out->stack_size = s.stack_size;
  out->carriers = s.carriers;
  out->io_uring = weft__uring_in_use();
  out->compiler = WEFT_COMPILER_NAME;
  weft__places *p = weft__malloc(sizeof *p); /* 2 KiB: not on a fiber's stack */
  if (!p) {
    snprintf(out->places, sizeof out->places, "%s", "unknown");
    return 0;
  }
  if (weft__fibers_places(p) || weft__places_parse(s.places, p) == 0)
    weft__places_format(p, out->places, sizeof out->places);
  else
    snprintf(out->places, sizeof out->places, "%s", "invalid");
  weft__free(p);
  return 0;
}
