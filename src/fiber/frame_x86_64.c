/*
 * This file contains the reading of a suspended context's frame on x86-64
 * (frame.h); the layout is the table at the top of context_x86_64.S:
 * 0x00 MXCSR and x87 control word, 0x08 r12, 0x10 r13, 0x18 r14, 0x20 r15,
 * 0x28 rbx, 0x30 rbp, 0x38 the return address; the resumed context's rsp is
 * the saved one plus 0x40.
 */
#include "frame.h"

#include <string.h>

bool weft__frame_read(const void *saved_sp, weft__frame *out) {
  uintptr_t w[8];
  memcpy(w, saved_sp, sizeof w);
  memset(out, 0, sizeof *out);
  out->pc = w[7];
  out->sp = (uintptr_t)saved_sp + 0x40;
  out->fp = w[6];
  /* rbx, r12, r13, r14, r15 */
  out->callee[0] = w[5];
  out->callee[1] = w[1];
  out->callee[2] = w[2];
  out->callee[3] = w[3];
  out->callee[4] = w[4];
  out->ncallee = 5;
  return true;
}

/* x86-64: thread-locals are read through %fs at each access. */
const bool weft__frame_may_migrate = true;
