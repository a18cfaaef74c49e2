/*
 * This file contains the context switch for x86-64 on the System V ABI
 * (Linux, ELF, GNU as): weft__ctx_switch, weft__ctx_make and the trampoline
 * that starts a fresh context. The interface and its contract are in
 * context.h.
 *
 * The switch is an ordinary call to the compiler, so the caller has already
 * saved every register that the ABI lets a call clobber. What is left to save
 * is what a callee must preserve: rbx, rbp, r12-r15, rsp, MXCSR and the x87
 * control word. They are stored on the stack being left, in the frame below,
 * and the stack pointer that names that frame is the context. The xmm
 * registers need nothing: none is callee-saved in this ABI.
 *
 *   offset  saved                    in a fresh frame (weft__ctx_make)
 *   ------  -----------------------  ----------------------------------------
 *   0x00    MXCSR          (4 bytes) the maker's MXCSR
 *   0x04    x87 control word (2)     the maker's x87 control word
 *   0x06    padding        (2)       0
 *   0x08    r12                      entry, for the trampoline
 *   0x10    r13                      0
 *   0x18    r14                      0
 *   0x20    r15                      0
 *   0x28    rbx                      0
 *   0x30    rbp                      0: ends the frame-pointer chain
 *   0x38    return address           weft__ctx_trampoline
 *   0x40    the caller's frame       the top of the stack, 16-byte aligned
 *
 * The saved stack pointer points at offset 0x00. A switch called with rsp
 * 16-byte aligned (as the ABI requires at a call) leaves the frame 16-byte
 * aligned too.
 *
 * MXCSR is saved whole, as Boost.Context does: its exception flags travel
 * with the context along with the rounding mode and FTZ/DAZ. A fresh context
 * starts with the floating-point control state of the thread that made it,
 * as a new thread starts with its creator's.
 *
 * Resuming jumps to the saved return address (jmp through r8) instead of
 * ret: a ret here never goes where the return-stack predictor expects, since
 * it returns into the other context's caller, while the indirect-branch
 * predictor learns a steady ping-pong (on an AMD EPYC VM, 6 ns per switch
 * against 14 ns with ret; Boost.Context jumps too). The cost is that the
 * resume point is not an endbr64 landing pad, which indirect-branch tracking
 * (CET IBT) would refuse: so this file marks itself neither IBT nor
 * shadow-stack compatible (no .note.gnu.property), and the linker then marks
 * a program that contains it as using neither. A shadow stack would also
 * need the switch to swap shadow stacks (rstorssp, saveprevssp); Linux
 * enables IBT for no user process today. endbr64 still starts each
 * function when the compiler asks for it (-fcf-protection), so that they
 * stay valid targets of indirect branches in any case.
 */

#if defined(__CET__) && (__CET__ & 1)
#define WEFT_ENDBR endbr64 /* an indirect call may land here under IBT */
#else
#define WEFT_ENDBR
#endif

        .text

/*
 * void *weft__ctx_switch(void **from_sp, void *to_sp, void *arg)
 *   rdi = from_sp, rsi = to_sp, rdx = arg; returns arg of the switch that
 *   resumes this context, in rax.
 */
        .globl  weft__ctx_switch
        .hidden weft__ctx_switch
        .type   weft__ctx_switch, @function
        .p2align 4
weft__ctx_switch:
        .cfi_startproc
        WEFT_ENDBR
        leaq    -0x38(%rsp), %rsp       /* room for the frame below the return address */
        .cfi_adjust_cfa_offset 0x38     /* the caller's frame is now 0x40 above rsp */
        stmxcsr (%rsp)                  /* save MXCSR (rounding, FTZ/DAZ, masks, flags) */
        fnstcw  0x04(%rsp)              /* save the x87 control word (precision, rounding) */
        movq    %r12, 0x08(%rsp)        /* save r12 */
        .cfi_rel_offset %r12, 0x08      /* tell unwinders where r12 now lives */
        movq    %r13, 0x10(%rsp)        /* save r13 */
        .cfi_rel_offset %r13, 0x10      /* ... and r13 */
        movq    %r14, 0x18(%rsp)        /* save r14 */
        .cfi_rel_offset %r14, 0x18      /* ... and r14 */
        movq    %r15, 0x20(%rsp)        /* save r15 */
        .cfi_rel_offset %r15, 0x20      /* ... and r15 */
        movq    %rbx, 0x28(%rsp)        /* save rbx */
        .cfi_rel_offset %rbx, 0x28      /* ... and rbx */
        movq    %rbp, 0x30(%rsp)        /* save rbp */
        .cfi_rel_offset %rbp, 0x30      /* ... and rbp */
        movq    %rsp, (%rdi)            /* *from_sp = this frame: the context is now suspended */
        movq    %rsi, %rsp              /* switch stacks: rsp = the frame of the context to resume */
        /* The CFI above holds for this stack too: same frame, same offsets. */
        movq    0x38(%rsp), %r8         /* the address to resume at (fresh: the trampoline) */
        ldmxcsr (%rsp)                  /* restore MXCSR */
        fldcw   0x04(%rsp)              /* restore the x87 control word */
        movq    0x08(%rsp), %r12        /* restore r12 */
        movq    0x10(%rsp), %r13        /* restore r13 */
        movq    0x18(%rsp), %r14        /* restore r14 */
        movq    0x20(%rsp), %r15        /* restore r15 */
        movq    0x28(%rsp), %rbx        /* restore rbx */
        movq    0x30(%rsp), %rbp        /* restore rbp */
        leaq    0x40(%rsp), %rsp        /* pop the frame and the return address */
        .cfi_def_cfa_offset 0           /* the caller's frame starts at rsp... */
        .cfi_register %rip, %r8         /* ...and the return address is in r8 */
        .cfi_same_value %r12            /* the callee-saved registers hold the */
        .cfi_same_value %r13            /* resumed context's values again */
        .cfi_same_value %r14
        .cfi_same_value %r15
        .cfi_same_value %rbx
        .cfi_same_value %rbp
        movq    %rdx, %rax              /* return arg: the value handed to the resumed context */
        jmp     *%r8                    /* resume: "return" from its own weft__ctx_switch call */
        .cfi_endproc
        .size   weft__ctx_switch, .-weft__ctx_switch

/*
 * void *weft__ctx_make(void *base, size_t size, void (*entry)(void *arg))
 *   rdi = base, rsi = size, rdx = entry; returns the fresh context's saved
 *   stack pointer in rax. Writes only the frame, just below the top.
 */
        .globl  weft__ctx_make
        .hidden weft__ctx_make
        .type   weft__ctx_make, @function
        .p2align 4
weft__ctx_make:
        .cfi_startproc
        WEFT_ENDBR
        leaq    (%rdi,%rsi), %rax       /* rax = base + size: the end of the stack */
        andq    $-16, %rax              /* round the top down to 16 bytes */
        subq    $0x40, %rax             /* the frame; the trampoline will run with rsp = top */
        movq    $0, (%rax)              /* clear the control-state slot, padding included */
        stmxcsr (%rax)                  /* the maker's MXCSR */
        fnstcw  0x04(%rax)              /* the maker's x87 control word */
        movq    %rdx, 0x08(%rax)        /* r12 = entry, which the trampoline calls */
        xorl    %ecx, %ecx              /* rcx = 0 */
        movq    %rcx, 0x10(%rax)        /* r13 = 0 */
        movq    %rcx, 0x18(%rax)        /* r14 = 0 */
        movq    %rcx, 0x20(%rax)        /* r15 = 0 */
        movq    %rcx, 0x28(%rax)        /* rbx = 0 */
        movq    %rcx, 0x30(%rax)        /* rbp = 0: frame-pointer unwinders stop at entry */
        leaq    weft__ctx_trampoline(%rip), %rcx /* where the first switch in "returns" */
        movq    %rcx, 0x38(%rax)        /* ... stored as the frame's return address */
        ret                             /* return the frame: the context's stack pointer */
        .cfi_endproc
        .size   weft__ctx_make, .-weft__ctx_make

/*
 * The first code a fresh context runs, entered by weft__ctx_switch's jmp
 * with rsp = the top of the stack (16-byte aligned), r12 = entry and
 * rax = arg. It is the context's outermost frame: it has no caller, so it
 * says that the return address is undefined, which stops DWARF unwinders
 * (gdb, libunwind, perf) here, as rbp = 0 stops frame-pointer ones.
 */
        .type   weft__ctx_trampoline, @function
        .p2align 4
weft__ctx_trampoline:
        .cfi_startproc
        .cfi_undefined %rip             /* no caller: the backtrace ends here */
        WEFT_ENDBR
        movq    %rax, %rdi              /* entry's argument: the arg of the first switch */
        call    *%r12                   /* entry(arg), with rsp 16-byte aligned at the call */
        /* entry returned: a fiber must switch away for good instead. */
        leaq    weft__ctx_returned_msg(%rip), %rdi /* the message (no conversions) */
        xorl    %eax, %eax              /* variadic call: no vector registers used */
        call    weft__die@PLT           /* print "weft: ..." and abort; never returns */
        ud2                             /* not reached */
        .cfi_endproc
        .size   weft__ctx_trampoline, .-weft__ctx_trampoline

        .section .rodata.str1.1,"aMS",@progbits,1
weft__ctx_returned_msg:
        .asciz  "fiber entry function returned (a fiber must switch away, never return)"

/* const char weft__ctx_impl_name[]: what weft_get_info reports. */
        .section .rodata
        .globl  weft__ctx_impl_name
        .hidden weft__ctx_impl_name
        .type   weft__ctx_impl_name, @object
weft__ctx_impl_name:
        .asciz  "asm-x86_64"
        .size   weft__ctx_impl_name, .-weft__ctx_impl_name

/* The stack is not executable. */
        .section .note.GNU-stack,"",@progbits
