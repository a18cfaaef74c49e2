/*
 * This file contains the reading of a suspended context's saved registers
 * (the frame weft__ctx_switch leaves on the stack it switches away from),
 * for backtraces of parked fibers: weft_dump, and the gdb extension, which
 * reads the same frame (share/weft/gdb/weft.py knows both layouts). One file
 * per architecture implements it, picked by CMake beside the context switch:
 * frame_x86_64.c, frame_aarch64.c, frame_none.c (ucontext, or no fibers).
 */
#ifndef WEFT_FIBER_FRAME_H
#define WEFT_FIBER_FRAME_H

#include "../base/internal.h"

/* Enough of a suspended context to unwind from it. */
typedef struct weft__frame {
  uintptr_t pc;         /* where it resumes */
  uintptr_t sp;         /* its stack pointer once resumed (above the saved frame) */
  uintptr_t fp;         /* its frame pointer */
  uintptr_t callee[12]; /* the other callee-saved integer registers, in the ABI's order */
  int ncallee;
} weft__frame;

/*
 * Decode the frame at `saved_sp` (a context's saved stack pointer, as
 * weft__ctx_switch stored it). False where this build cannot (ucontext).
 */
bool weft__frame_read(const void *saved_sp, weft__frame *out);

/*
 * May a fiber resume on another carrier than the one it parked on here
 * (WEFT_MIGRATE)? Per architecture: on x86-64 weft's code reads its
 * thread-locals through %fs at each access; on AArch64 the suite sync aborts
 * with migration on (seen under qemu-user in CI, cause not found: a
 * thread-local address kept in a register across a park is the suspect), so
 * the setting is refused there with a warning until that is understood.
 */
extern const bool weft__frame_may_migrate;

#endif /* WEFT_FIBER_FRAME_H */
