/*
 * This file contains the frame reader of a build whose context switch keeps
 * no frame of registers on the stack (ucontext), or has no fibers (frame.h):
 * parked fibers are listed without backtraces.
 */
#include "frame.h"

bool weft__frame_read(const void *saved_sp, weft__frame *out) {
  WEFT__UNUSED(saved_sp);
  WEFT__UNUSED(out);
  return false;
}

/* ucontext builds: not tested with migration. */
const bool weft__frame_may_migrate = false;
