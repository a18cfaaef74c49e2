/*
 * This file contains the context switch primitive: the one piece of weft in
 * assembly. CMake picks one implementation per platform:
 *
 *   context_x86_64.S    System V AMD64 (Linux, ELF)
 *   context_aarch64.S   AAPCS64 (Linux, ELF)
 *   context_ucontext.c  another Linux architecture, through glibc's
 *                       makecontext/swapcontext (weft is Linux-only: the rest
 *                       of it needs epoll, futexes and /proc)
 *
 * and without any of them fibers are not built (fiber_none.c) and blocking
 * work falls back on the CPU path.
 *
 * A context is named by one pointer, its saved stack pointer: the registers
 * that the ABI makes callee-saved, and the floating-point control state
 * (MXCSR and the x87 control word; FPCR on aarch64), are saved on the
 * context's own stack, and nothing else needs saving because the switch is an
 * ordinary function call to the compiler.
 */
#ifndef WEFT_FIBER_CONTEXT_H
#define WEFT_FIBER_CONTEXT_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * weft__ctx_switch: suspend the calling context and resume the one whose
 * saved stack pointer is to_sp.
 *
 * The caller's registers are pushed on its own stack and its stack pointer is
 * stored in *from_sp, so that a later weft__ctx_switch(..., *from_sp, x)
 * resumes it, and this call then returns x. If `to_sp` is a fresh context
 * from weft__ctx_make, its entry function is called with `arg` as argument.
 * Otherwise the weft__ctx_switch call suspended in that context returns arg.
 *
 * from_sp may point into the stack being left (it is written before the
 * switch); to_sp must not be the running context.
 */
void *weft__ctx_switch(void **from_sp, void *to_sp, void *arg);

/*
 * weft__ctx_make: prepare a fresh context on the stack [base, base + size),
 * which needs no alignment beyond 16 bytes at base + size being reachable by
 * rounding down. Returns the context's initial stack pointer, for
 * weft__ctx_switch. When first resumed, the context calls entry(arg) with the
 * stack pointer aligned as the ABI requires at a call; entry must never
 * return (it switches away for good): if it does, the process aborts with a
 * message.
 */
void *weft__ctx_make(void *base, size_t size, void (*entry)(void *arg));

/* "asm-x86_64", "asm-aarch64", "ucontext" or "none". */
extern const char weft__ctx_impl_name[];

/*
 * Notes on what a fresh context inherits and costs:
 *  - weft__ctx_make uses the top of the stack for the first frame: 64 bytes
 *    (x86-64), 176 bytes (aarch64), about 1 KiB (x86-64) to 4.5 KiB
 *    (aarch64) for the ucontext record.
 *  - A fresh context starts with the floating-point control state of the
 *    context that first switches into it (the carrier's: round to nearest).
 *  - On x86-64 the MXCSR exception flags travel with the context that set
 *    them; on aarch64 FPSR (the flags) is not saved, only FPCR (the modes).
 */

#ifdef __cplusplus
}
#endif

#endif /* WEFT_FIBER_CONTEXT_H */
