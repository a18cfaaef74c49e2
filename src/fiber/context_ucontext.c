/*
 * This file contains the portable context switch, on POSIX's getcontext,
 * makecontext and swapcontext: for the platforms that have no assembly
 * version, and for testing the rest of weft against a second implementation
 * (-DWEFT_CONTEXT=ucontext). The interface and its contract are in
 * context.h; this file keeps that contract, and differs from the assembly
 * versions in where a context lives, in cost, and in the signal mask:
 *
 *  - A context is a ucontext_t, not a frame of registers. A made context
 *    keeps its record (struct uctx below: about 1 KiB on x86-64, 4.5 KiB on
 *    AArch64) at the top of its own stack, so the "stack pointer" that names
 *    it is the address of that record, and it never moves. A stack that was not made here (a thread's own
 * stack, such as a carrier's scheduler loop) has nowhere of its own to keep a record: the first time it
 * switches away, it is saved in a record in thread-local storage, `native`, and later switches reuse that
 * record.
 *
 *  - swapcontext saves and restores the signal mask with a system call, so a
 *    switch costs far more than the assembly one, and the signal mask
 *    belongs to the context rather than to the thread. A fresh context starts
 *    with the signal mask and the floating-point environment of the thread
 *    that made it (getcontext in weft__ctx_make), as the assembly versions
 *    start with the maker's floating-point control state.
 *
 * Which record to save into. The contract lets a caller pass any slot as
 * from_sp, whatever it holds (it is only written), so the record of the
 * running context cannot be found through it. The thread keeps a pointer to
 * the record of the context it runs, `current`: NULL until the thread first
 * switches, which means "the thread's own stack, record `native`". Each
 * switch sets the thread's `current` to the record it resumes, before it
 * swaps, and the resumed context reads nothing thread-local once its
 * swapcontext returns: the value handed over travels in its own record.
 * So, as with the assembly versions, a context may be resumed on another
 * thread than the one it last ran on (weft itself never does that); a
 * thread's own stack, whose record lives in that thread's storage, must not
 * stay suspended past the thread's exit.
 */
#include <stdint.h>
#include <ucontext.h>

#include "../base/internal.h"
#include "context.h"

/* A context: what swapcontext saves, and what is handed to it. */
typedef struct uctx {
  ucontext_t uc;            /* registers, signal mask, floating-point state */
  void *arg;                /* written by the switch that resumes this context: its return value */
  void (*entry)(void *arg); /* made contexts: what the trampoline calls */
} uctx;
_Static_assert(_Alignof(uctx) <= 16, "weft__ctx_make places the record 16-byte aligned");

/* The record of this thread's own stack; used once the thread first switches away. */
static _Thread_local uctx native;
/* The record of the context running on this thread; NULL means `native`. */
static _Thread_local uctx *current;

const char weft__ctx_impl_name[] = "ucontext";

/*
 * The first function a made context runs. makecontext passes arguments as
 * ints only, so entry and its argument come from the context's record, found
 * through `current`: the switch that started this context set it, on this
 * thread, just before swapping in.
 */
static void trampoline(void) {
  uctx *self = current;
  self->entry(self->arg);
  weft__die("fiber entry function returned (a fiber must switch away, never return)");
}

void *weft__ctx_make(void *base, size_t size, void (*entry)(void *arg)) {
  /* The record goes at the top, 16-byte aligned; the stack proper is below it. */
  uintptr_t top = ((uintptr_t)base + size) & ~(uintptr_t)15;
  uintptr_t at = (top - sizeof(uctx)) & ~(uintptr_t)15;
  uctx *c = (uctx *)at;
  if (getcontext(&c->uc) != 0) weft__die("getcontext failed");
  c->uc.uc_stack.ss_sp = base;
  c->uc.uc_stack.ss_size = (size_t)(at - (uintptr_t)base);
  c->uc.uc_link = NULL; /* never used: the trampoline does not return */
  c->arg = NULL;
  c->entry = entry;
  makecontext(&c->uc, trampoline, 0);
  return c;
}

void *weft__ctx_switch(void **from_sp, void *to_sp, void *arg) {
  uctx *from = current ? current : &native;
  uctx *to = to_sp;
  *from_sp = from;
  to->arg = arg;
  current = to;
  if (swapcontext(&from->uc, &to->uc) != 0) weft__die("swapcontext failed");
  /* Resumed, maybe on another thread: `from` is a local, not thread-local state. */
  return from->arg;
}
