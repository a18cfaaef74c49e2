/*
 * This file contains the reading of a suspended context's frame on AArch64
 * (frame.h); the layout is the table at the top of context_aarch64.S:
 * d8-d15 at 0x00-0x3f, x19-x28 at 0x40-0x8f, x29 (fp) and x30 (lr: where it
 * resumes) at 0x90, FPCR at 0xa0; the resumed context's sp is the saved one
 * plus 0xb0.
 */
#include "frame.h"

#include <string.h>

bool weft__frame_read(const void *saved_sp, weft__frame *out) {
  uintptr_t w[12];
  memcpy(w, (const char *)saved_sp + 0x40, sizeof w);
  memset(out, 0, sizeof *out);
  out->pc = w[11];
  out->sp = (uintptr_t)saved_sp + 0xb0;
  out->fp = w[10];
  for (int i = 0; i < 10; i++) out->callee[i] = w[i]; /* x19 .. x28 */
  out->ncallee = 10;
  return true;
}

/* AArch64: not yet (frame.h). */
const bool weft__frame_may_migrate = false;
