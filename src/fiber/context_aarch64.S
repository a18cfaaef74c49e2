/*
 * This file contains the context switch for AArch64 on the AAPCS64 (Linux,
 * ELF, GNU as): weft__ctx_switch, weft__ctx_make and the trampoline that
 * starts a fresh context. The interface and its contract are in context.h.
 *
 * The switch is an ordinary call to the compiler, so the caller has already
 * saved every register that the ABI lets a call clobber. What is left to save
 * is what a callee must preserve: x19-x28, the frame pointer x29, the link
 * register x30 (the address to resume at), the low halves d8-d15 of v8-v15,
 * sp, and FPCR (rounding mode, flush-to-zero, default NaN). They are stored
 * on the stack being left, in the frame below, and the stack pointer that
 * names that frame is the context.
 *
 *   offset  saved            in a fresh frame (weft__ctx_make)
 *   ------  ---------------  ----------------------------------------
 *   0x00    d8      d9       0
 *   0x10    d10     d11      0
 *   0x20    d12     d13      0
 *   0x30    d14     d15      0
 *   0x40    x19     x20      x19 = entry, for the trampoline; x20 = 0
 *   0x50    x21     x22      0
 *   0x60    x23     x24      0
 *   0x70    x25     x26      0
 *   0x80    x27     x28      0
 *   0x90    x29     x30      x29 = 0: ends the frame chain; x30 = trampoline
 *   0xa0    FPCR    padding  the maker's FPCR; 0
 *   0xb0    the caller's frame / the top of the stack, 16-byte aligned
 *
 * The saved stack pointer points at offset 0x00; it is 16-byte aligned, as
 * AArch64 requires of sp. FPSR (the cumulative exception flags) is not saved:
 * the ABI does not ask a callee to preserve it. A fresh context starts with
 * the FPCR of the thread that made it, as a new thread starts with its
 * creator's. Writing FPCR can be slow (on some cores it synchronises the
 * pipeline), so the switch writes it only when the two contexts' values
 * differ, which is rare.
 *
 * Resuming is a ret through the restored x30. Branch protection: with
 * -mbranch-protection=bti the two functions start with a "bti c" landing pad
 * and the file says so in its GNU property note; the trampoline needs none,
 * since ret is not checked. Return-address signing (pac-ret) needs nothing
 * here: the switch never signs or authenticates x30, it moves it unchanged,
 * and the functions that called it authenticate their own return addresses.
 */

#if defined(__ARM_FEATURE_BTI_DEFAULT) && __ARM_FEATURE_BTI_DEFAULT == 1
#define WEFT_BTI_C bti c /* landing pad for an indirect call (blr, PLT br) */
#define WEFT_PROP_BTI 1
#else
#define WEFT_BTI_C
#define WEFT_PROP_BTI 0
#endif
#if defined(__ARM_FEATURE_PAC_DEFAULT) && __ARM_FEATURE_PAC_DEFAULT != 0
#define WEFT_PROP_PAC 2
#else
#define WEFT_PROP_PAC 0
#endif

        .text

/*
 * void *weft__ctx_switch(void **from_sp, void *to_sp, void *arg)
 *   x0 = from_sp, x1 = to_sp, x2 = arg; returns, in x0, the arg of the
 *   switch that resumes this context.
 */
        .globl  weft__ctx_switch
        .hidden weft__ctx_switch
        .type   weft__ctx_switch, %function
        .p2align 4
weft__ctx_switch:
        .cfi_startproc
        WEFT_BTI_C
        sub     sp, sp, #0xb0           /* room for the frame */
        .cfi_def_cfa_offset 0xb0        /* the caller's frame is now 0xb0 above sp; and */
                                        /* each .cfi_offset says where a register now lives */
        stp     d8, d9, [sp, #0x00]     /* save d8, d9 */
        .cfi_offset d8, -0xb0
        .cfi_offset d9, -0xa8
        stp     d10, d11, [sp, #0x10]   /* save d10, d11 */
        .cfi_offset d10, -0xa0
        .cfi_offset d11, -0x98
        stp     d12, d13, [sp, #0x20]   /* save d12, d13 */
        .cfi_offset d12, -0x90
        .cfi_offset d13, -0x88
        stp     d14, d15, [sp, #0x30]   /* save d14, d15 */
        .cfi_offset d14, -0x80
        .cfi_offset d15, -0x78
        stp     x19, x20, [sp, #0x40]   /* save x19, x20 */
        .cfi_offset x19, -0x70
        .cfi_offset x20, -0x68
        stp     x21, x22, [sp, #0x50]   /* save x21, x22 */
        .cfi_offset x21, -0x60
        .cfi_offset x22, -0x58
        stp     x23, x24, [sp, #0x60]   /* save x23, x24 */
        .cfi_offset x23, -0x50
        .cfi_offset x24, -0x48
        stp     x25, x26, [sp, #0x70]   /* save x25, x26 */
        .cfi_offset x25, -0x40
        .cfi_offset x26, -0x38
        stp     x27, x28, [sp, #0x80]   /* save x27, x28 */
        .cfi_offset x27, -0x30
        .cfi_offset x28, -0x28
        stp     x29, x30, [sp, #0x90]   /* save the frame pointer and the return address */
        .cfi_offset x29, -0x20
        .cfi_offset x30, -0x18
        mrs     x9, fpcr                /* x9 = FPCR of the context being left */
        str     x9, [sp, #0xa0]         /* save it */
        mov     x10, sp                 /* sp cannot be stored directly: copy it */
        str     x10, [x0]               /* *from_sp = this frame: the context is now suspended */
        mov     sp, x1                  /* switch stacks: sp = the frame of the context to resume */
        /* The CFI above holds for this stack too: same frame, same offsets. */
        ldp     d8, d9, [sp, #0x00]     /* restore d8, d9 */
        ldp     d10, d11, [sp, #0x10]   /* restore d10, d11 */
        ldp     d12, d13, [sp, #0x20]   /* restore d12, d13 */
        ldp     d14, d15, [sp, #0x30]   /* restore d14, d15 */
        ldp     x19, x20, [sp, #0x40]   /* restore x19, x20 */
        ldp     x21, x22, [sp, #0x50]   /* restore x21, x22 */
        ldp     x23, x24, [sp, #0x60]   /* restore x23, x24 */
        ldp     x25, x26, [sp, #0x70]   /* restore x25, x26 */
        ldp     x27, x28, [sp, #0x80]   /* restore x27, x28 */
        ldp     x29, x30, [sp, #0x90]   /* restore the frame pointer and the address to resume at */
        ldr     x10, [sp, #0xa0]        /* x10 = FPCR of the context resumed */
        cmp     x9, x10                 /* the same as the one in force? */
        b.eq    1f                      /* then skip the write */
        msr     fpcr, x10               /* restore FPCR */
1:      add     sp, sp, #0xb0           /* pop the frame */
        .cfi_def_cfa_offset 0           /* the caller's frame starts at sp */
        .cfi_same_value d8              /* the callee-saved registers hold the */
        .cfi_same_value d9              /* resumed context's values again */
        .cfi_same_value d10
        .cfi_same_value d11
        .cfi_same_value d12
        .cfi_same_value d13
        .cfi_same_value d14
        .cfi_same_value d15
        .cfi_same_value x19
        .cfi_same_value x20
        .cfi_same_value x21
        .cfi_same_value x22
        .cfi_same_value x23
        .cfi_same_value x24
        .cfi_same_value x25
        .cfi_same_value x26
        .cfi_same_value x27
        .cfi_same_value x28
        .cfi_same_value x29
        .cfi_same_value x30
        mov     x0, x2                  /* return arg: the value handed to the resumed context */
        ret                             /* resume at x30: "return" from its own switch call */
        .cfi_endproc
        .size   weft__ctx_switch, .-weft__ctx_switch

/*
 * void *weft__ctx_make(void *base, size_t size, void (*entry)(void *arg))
 *   x0 = base, x1 = size, x2 = entry; returns the fresh context's saved stack
 *   pointer in x0. Writes only the frame, just below the top.
 */
        .globl  weft__ctx_make
        .hidden weft__ctx_make
        .type   weft__ctx_make, %function
        .p2align 4
weft__ctx_make:
        .cfi_startproc
        WEFT_BTI_C
        add     x0, x0, x1              /* x0 = base + size: the end of the stack */
        and     x0, x0, #~15            /* round the top down to 16 bytes */
        sub     x0, x0, #0xb0           /* the frame; the trampoline will run with sp = top */
        stp     xzr, xzr, [x0, #0x00]   /* d8, d9 = 0 */
        stp     xzr, xzr, [x0, #0x10]   /* d10, d11 = 0 */
        stp     xzr, xzr, [x0, #0x20]   /* d12, d13 = 0 */
        stp     xzr, xzr, [x0, #0x30]   /* d14, d15 = 0 */
        stp     x2, xzr, [x0, #0x40]    /* x19 = entry, which the trampoline calls; x20 = 0 */
        stp     xzr, xzr, [x0, #0x50]   /* x21, x22 = 0 */
        stp     xzr, xzr, [x0, #0x60]   /* x23, x24 = 0 */
        stp     xzr, xzr, [x0, #0x70]   /* x25, x26 = 0 */
        stp     xzr, xzr, [x0, #0x80]   /* x27, x28 = 0 */
        adr     x9, weft__ctx_trampoline /* where the first switch in "returns" */
        stp     xzr, x9, [x0, #0x90]    /* x29 = 0: the frame chain ends; x30 = the trampoline */
        mrs     x10, fpcr               /* the maker's FPCR */
        stp     x10, xzr, [x0, #0xa0]   /* ... for the fresh context; padding = 0 */
        ret                             /* return the frame: the context's stack pointer */
        .cfi_endproc
        .size   weft__ctx_make, .-weft__ctx_make

/*
 * The first code a fresh context runs, entered by weft__ctx_switch's ret
 * with sp = the top of the stack (16-byte aligned), x19 = entry, x0 = arg and
 * x29 = 0. It is the context's outermost frame: it has no caller, so it says
 * that the return address is undefined, which stops DWARF unwinders (gdb,
 * libunwind, perf) here, as x29 = 0 stops frame-pointer ones.
 */
        .type   weft__ctx_trampoline, %function
        .p2align 4
weft__ctx_trampoline:
        .cfi_startproc
        .cfi_undefined x30              /* no caller: the backtrace ends here */
        blr     x19                     /* entry(arg): x0 already holds arg */
        /* entry returned: a fiber must switch away for good instead. */
        adrp    x0, weft__ctx_returned_msg /* the message (no conversions)... */
        add     x0, x0, :lo12:weft__ctx_returned_msg /* ... its low 12 bits */
        bl      weft__die               /* print "weft: ..." and abort; never returns */
        brk     #0x3e8                  /* not reached */
        .cfi_endproc
        .size   weft__ctx_trampoline, .-weft__ctx_trampoline

        .section .rodata.str1.1,"aMS",%progbits,1
weft__ctx_returned_msg:
        .asciz  "fiber entry function returned (a fiber must switch away, never return)"

/* const char weft__ctx_impl_name[]: what weft_get_info reports. */
        .section .rodata
        .globl  weft__ctx_impl_name
        .hidden weft__ctx_impl_name
        .type   weft__ctx_impl_name, %object
weft__ctx_impl_name:
        .asciz  "asm-aarch64"
        .size   weft__ctx_impl_name, .-weft__ctx_impl_name

/*
 * With branch protection, the GNU property note that tells the linker (and
 * the loader) that this object has its landing pads (BTI) and is compatible
 * with return-address signing (PAC).
 */
#if WEFT_PROP_BTI || WEFT_PROP_PAC
        .section .note.gnu.property,"a"
        .p2align 3
        .word   4                       /* name size: "GNU\0" */
        .word   16                      /* descriptor size */
        .word   5                       /* NT_GNU_PROPERTY_TYPE_0 */
        .asciz  "GNU"                   /* the owner */
        .word   0xc0000000              /* GNU_PROPERTY_AARCH64_FEATURE_1_AND */
        .word   4                       /* its data size */
        .word   WEFT_PROP_BTI | WEFT_PROP_PAC /* the features this object has */
        .word   0                       /* padding to 8 bytes */
#endif

/* The stack is not executable. */
        .section .note.GNU-stack,"",%progbits
