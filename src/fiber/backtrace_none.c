/*
 * This file contains the backtraces of a build without libunwind, or of an
 * architecture whose saved frame backtrace_unwind.c does not map
 * (backtrace.h): dumps list parked fibers without their stacks.
 */
#include "backtrace.h"

weft__symbols *weft__symbols_open(const char **why) {
  *why = "weft was built without libunwind (install libunwind-dev and rebuild)";
  return NULL;
}

void weft__symbols_close(weft__symbols *s) { WEFT__UNUSED(s); }

int weft__backtrace(const weft__frame *fr, uintptr_t *pcs, int max) {
  WEFT__UNUSED(fr);
  WEFT__UNUSED(pcs);
  WEFT__UNUSED(max);
  return 0;
}

void weft__symbolize(weft__symbols *s, uintptr_t pc, char *buf, size_t cap) {
  WEFT__UNUSED(s);
  weft__describe_site((const void *)pc, buf, cap);
}
