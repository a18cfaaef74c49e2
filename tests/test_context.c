/*
 * This file contains the tests of the context switch primitive
 * (src/fiber/context.h), whichever implementation CMake picked: values
 * handed both ways, chains of contexts, callee-saved registers (checked from
 * assembly, so that no compiler can hide a missing save), floating-point
 * values and control state per context, libc on a small stack, the stack
 * alignment at entry, and the abort when an entry function returns.
 *
 * Contexts here run on stacks that the tests map themselves, with a guard
 * page below. Under AddressSanitizer and ThreadSanitizer every switch is
 * announced to the sanitizer (as weft's scheduler does); under Valgrind every
 * stack is registered.
 */
#include "harness.h"

#include <fenv.h>
#include <float.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fiber/context.h"

/* Which sanitizer runs: GCC says so with a macro, clang with __has_feature. */
#if defined(__SANITIZE_ADDRESS__)
#define TEST_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#define TEST_TSAN 1
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define TEST_TSAN 1
#endif
#endif

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define TEST_VALGRIND 1
#endif
#endif

/* The sanitizers' fiber interface (declared here: their headers live with each compiler). */
#ifdef TEST_ASAN
void __sanitizer_start_switch_fiber(void **fake_stack_save, const void *bottom, size_t size);
void __sanitizer_finish_switch_fiber(void *fake_stack_save, const void **bottom_old, size_t *size_old);
void __asan_unpoison_memory_region(const volatile void *addr, size_t size);
#endif
#ifdef TEST_TSAN
void *__tsan_get_current_fiber(void);
void *__tsan_create_fiber(unsigned flags);
void __tsan_destroy_fiber(void *fiber);
void __tsan_switch_to_fiber(void *fiber, unsigned flags);
#endif

/* ------------------------------------------------------------------------ */
/* Contexts for the tests                                                    */
/* ------------------------------------------------------------------------ */

typedef struct tctx {
  void *sp;         /* the saved stack pointer while suspended */
  void *map;        /* the mapping: a guard page, then the stack; NULL for main */
  size_t map_size;  /* its length */
  const void *lo;   /* the stack's lowest address (main: learned on the first switch away) */
  size_t size;      /* its usable bytes */
  void *asan_fake;  /* AddressSanitizer's fake stack while suspended */
  void *tsan_fiber; /* ThreadSanitizer's fiber */
  unsigned vg_id;   /* Valgrind's stack id */
} tctx;

static tctx main_ctx;
/* The context that made the last switch: its stack bounds are learned from the sanitizer. */
static tctx *last_from;

static size_t page_size(void) { return (size_t)sysconf(_SC_PAGESIZE); }

/* The main stack, as a context that switches away. */
static void ctx_main(tctx *c) {
  memset(c, 0, sizeof *c);
#ifdef TEST_TSAN
  c->tsan_fiber = __tsan_get_current_fiber();
#endif
}

/* Map a stack of `size` usable bytes (a multiple of the page size) above a guard page. */
static void ctx_stack(tctx *c, size_t size) {
  memset(c, 0, sizeof *c);
  size_t pg = page_size();
  c->map_size = size + pg;
  c->map = mmap(NULL, c->map_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CU_ASSERT_FATAL(c->map != MAP_FAILED);
  CU_ASSERT_FATAL(mprotect(c->map, pg, PROT_NONE) == 0);
  c->lo = (char *)c->map + pg;
  c->size = size;
#ifdef TEST_VALGRIND
  c->vg_id = VALGRIND_STACK_REGISTER(c->lo, (char *)c->lo + size);
#endif
#ifdef TEST_TSAN
  c->tsan_fiber = __tsan_create_fiber(0);
#endif
}

/* A fresh context on a new stack of `size` bytes that will call entry. */
static void ctx_make(tctx *c, size_t size, void (*entry)(void *)) {
  ctx_stack(c, size);
  c->sp = weft__ctx_make((void *)c->lo, c->size, entry);
  CU_ASSERT_FATAL(c->sp != NULL);
}

/* Release a context's stack: it must be suspended for good (or never started). */
static void ctx_free(tctx *c) {
  if (!c->map) return;
#ifdef TEST_VALGRIND
  VALGRIND_STACK_DEREGISTER(c->vg_id);
#endif
#ifdef TEST_ASAN
  /* Frames that never returned left poisoned shadow behind: clear it before the range is reused. */
  __asan_unpoison_memory_region(c->lo, c->size);
#endif
#ifdef TEST_TSAN
  __tsan_destroy_fiber(c->tsan_fiber);
#endif
  CU_ASSERT(munmap(c->map, c->map_size) == 0);
  c->map = NULL;
}

/* Before a switch from `from` to `to` (or before calling an assembly helper that switches). */
static void san_leave(tctx *from, tctx *to) {
  last_from = from;
#ifdef TEST_ASAN
  __sanitizer_start_switch_fiber(&from->asan_fake, to->lo, to->size);
#endif
#ifdef TEST_TSAN
  __tsan_switch_to_fiber(to->tsan_fiber, 0);
#endif
  (void)to;
}

/* After a context is resumed (or first entered): first thing. */
static void san_enter(tctx *self) {
#ifdef TEST_ASAN
  const void *lo;
  size_t size;
  __sanitizer_finish_switch_fiber(self->asan_fake, &lo, &size);
  if (last_from && !last_from->lo) {
    last_from->lo = lo;
    last_from->size = size;
  }
#endif
  (void)self;
}

/* Switch from `from` (the running context) to `to`, handing it arg; returns what resumes us. */
static void *sw(tctx *from, tctx *to, void *arg) {
  san_leave(from, to);
  void *r = weft__ctx_switch(&from->sp, to->sp, arg);
  san_enter(from);
  return r;
}

/* Iteration counts: smaller under qemu and Valgrind. */
static long scaled(long n) { return weft_test_slow_env() ? n / 20 + 1 : n; }

#define U2P(x) ((void *)(uintptr_t)(x))
#define P2U(p) ((uintptr_t)(p))

/* ------------------------------------------------------------------------ */
/* Assembly helpers: the registers as the switch sees them                   */
/* ------------------------------------------------------------------------ */

/*
 * regs_switch(from_sp, to_sp, arg, in, out): load in[] into every
 * callee-saved register, call weft__ctx_switch(from_sp, to_sp, arg), and
 * when it returns store those registers in out[]; then restore the caller's
 * own values and return what the switch returned. In C the compiler would
 * decide which registers hold what across the call; here every one of them
 * carries a known value through the switch.
 *
 * probe_entry: an entry function for weft__ctx_make that records the stack
 * pointer it was called with in probe_sp, then tail-calls probe_entry_c.
 */
#if defined(__CET__) && (__CET__ & 1)
#define TEST_ENDBR "endbr64\n"
#else
#define TEST_ENDBR ""
#endif
#if defined(__ARM_FEATURE_BTI_DEFAULT) && __ARM_FEATURE_BTI_DEFAULT == 1
#define TEST_BTI_C "bti c\n"
#else
#define TEST_BTI_C ""
#endif

#if defined(__x86_64__)
#define TEST_ASM_HELPERS 1
/* rbx, rbp, r12, r13, r14, r15 */
#define NREGS 6
__asm__(".text\n"
        ".globl weft_test_regs_switch\n"
        ".hidden weft_test_regs_switch\n"
        ".type weft_test_regs_switch, @function\n"
        "weft_test_regs_switch:\n" /* rdi from_sp, rsi to_sp, rdx arg, rcx in, r8 out */
        ".cfi_startproc\n" TEST_ENDBR "pushq %rbp\n"
        ".cfi_adjust_cfa_offset 8\n"
        "pushq %rbx\n"
        ".cfi_adjust_cfa_offset 8\n"
        "pushq %r12\n"
        ".cfi_adjust_cfa_offset 8\n"
        "pushq %r13\n"
        ".cfi_adjust_cfa_offset 8\n"
        "pushq %r14\n"
        ".cfi_adjust_cfa_offset 8\n"
        "pushq %r15\n"
        ".cfi_adjust_cfa_offset 8\n"
        "pushq %r8\n" /* out; also makes rsp 16-byte aligned for the call */
        ".cfi_adjust_cfa_offset 8\n"
        "movq 0x00(%rcx), %rbx\n"
        "movq 0x08(%rcx), %rbp\n"
        "movq 0x10(%rcx), %r12\n"
        "movq 0x18(%rcx), %r13\n"
        "movq 0x20(%rcx), %r14\n"
        "movq 0x28(%rcx), %r15\n"
        "call weft__ctx_switch@PLT\n"
        "movq (%rsp), %rcx\n" /* out */
        "movq %rbx, 0x00(%rcx)\n"
        "movq %rbp, 0x08(%rcx)\n"
        "movq %r12, 0x10(%rcx)\n"
        "movq %r13, 0x18(%rcx)\n"
        "movq %r14, 0x20(%rcx)\n"
        "movq %r15, 0x28(%rcx)\n"
        "addq $8, %rsp\n"
        ".cfi_adjust_cfa_offset -8\n"
        "popq %r15\n"
        ".cfi_adjust_cfa_offset -8\n"
        "popq %r14\n"
        ".cfi_adjust_cfa_offset -8\n"
        "popq %r13\n"
        ".cfi_adjust_cfa_offset -8\n"
        "popq %r12\n"
        ".cfi_adjust_cfa_offset -8\n"
        "popq %rbx\n"
        ".cfi_adjust_cfa_offset -8\n"
        "popq %rbp\n"
        ".cfi_adjust_cfa_offset -8\n"
        "ret\n"
        ".cfi_endproc\n"
        ".size weft_test_regs_switch, .-weft_test_regs_switch\n"

        ".globl weft_test_probe_entry\n"
        ".hidden weft_test_probe_entry\n"
        ".type weft_test_probe_entry, @function\n"
        "weft_test_probe_entry:\n" TEST_ENDBR "movq %rsp, weft_test_probe_sp(%rip)\n"
        "jmp weft_test_probe_entry_c\n"
        ".size weft_test_probe_entry, .-weft_test_probe_entry\n");
/* At a function's first instruction, rsp + 8 is 16-byte aligned (the call pushed 8 bytes). */
#define ENTRY_SP_MOD16 8

#elif defined(__aarch64__)
#define TEST_ASM_HELPERS 1
/* x19..x28, x29, d8..d15 */
#define NREGS            19
__asm__(".text\n"
        ".globl weft_test_regs_switch\n"
        ".hidden weft_test_regs_switch\n"
        ".type weft_test_regs_switch, %function\n"
        "weft_test_regs_switch:\n" /* x0 from_sp, x1 to_sp, x2 arg, x3 in, x4 out */
        ".cfi_startproc\n" TEST_BTI_C "stp x29, x30, [sp, #-0xb0]!\n"
        ".cfi_def_cfa_offset 0xb0\n"
        ".cfi_offset x29, -0xb0\n"
        ".cfi_offset x30, -0xa8\n"
        "stp x19, x20, [sp, #0x10]\n"
        "stp x21, x22, [sp, #0x20]\n"
        "stp x23, x24, [sp, #0x30]\n"
        "stp x25, x26, [sp, #0x40]\n"
        "stp x27, x28, [sp, #0x50]\n"
        "stp d8, d9, [sp, #0x60]\n"
        "stp d10, d11, [sp, #0x70]\n"
        "stp d12, d13, [sp, #0x80]\n"
        "stp d14, d15, [sp, #0x90]\n"
        "str x4, [sp, #0xa0]\n" /* out */
        "ldp x19, x20, [x3, #0]\n"
        "ldp x21, x22, [x3, #16]\n"
        "ldp x23, x24, [x3, #32]\n"
        "ldp x25, x26, [x3, #48]\n"
        "ldp x27, x28, [x3, #64]\n"
        "ldr x29, [x3, #80]\n"
        "ldp d8, d9, [x3, #88]\n"
        "ldp d10, d11, [x3, #104]\n"
        "ldp d12, d13, [x3, #120]\n"
        "ldp d14, d15, [x3, #136]\n"
        "bl weft__ctx_switch\n"
        "ldr x4, [sp, #0xa0]\n" /* out */
        "stp x19, x20, [x4, #0]\n"
        "stp x21, x22, [x4, #16]\n"
        "stp x23, x24, [x4, #32]\n"
        "stp x25, x26, [x4, #48]\n"
        "stp x27, x28, [x4, #64]\n"
        "str x29, [x4, #80]\n"
        "stp d8, d9, [x4, #88]\n"
        "stp d10, d11, [x4, #104]\n"
        "stp d12, d13, [x4, #120]\n"
        "stp d14, d15, [x4, #136]\n"
        "ldp x19, x20, [sp, #0x10]\n"
        "ldp x21, x22, [sp, #0x20]\n"
        "ldp x23, x24, [sp, #0x30]\n"
        "ldp x25, x26, [sp, #0x40]\n"
        "ldp x27, x28, [sp, #0x50]\n"
        "ldp d8, d9, [sp, #0x60]\n"
        "ldp d10, d11, [sp, #0x70]\n"
        "ldp d12, d13, [sp, #0x80]\n"
        "ldp d14, d15, [sp, #0x90]\n"
        "ldp x29, x30, [sp], #0xb0\n"
        ".cfi_def_cfa_offset 0\n"
        ".cfi_restore x29\n"
        ".cfi_restore x30\n"
        "ret\n"
        ".cfi_endproc\n"
        ".size weft_test_regs_switch, .-weft_test_regs_switch\n"

        ".globl weft_test_probe_entry\n"
        ".hidden weft_test_probe_entry\n"
        ".type weft_test_probe_entry, %function\n"
        "weft_test_probe_entry:\n" TEST_BTI_C "mov x9, sp\n"
        "adrp x10, weft_test_probe_sp\n"
        "str x9, [x10, :lo12:weft_test_probe_sp]\n"
        "b weft_test_probe_entry_c\n"
        ".size weft_test_probe_entry, .-weft_test_probe_entry\n");
/* sp is always 16-byte aligned on AArch64. */
#define ENTRY_SP_MOD16   0
#endif

#ifdef TEST_ASM_HELPERS
void *weft_test_regs_switch(void **from_sp, void *to_sp, void *arg, const uint64_t *in, uint64_t *out);
void weft_test_probe_entry(void *arg);
void weft_test_probe_entry_c(void *arg);
__attribute__((visibility("hidden"))) void *volatile weft_test_probe_sp;
#endif

/* ------------------------------------------------------------------------ */
/* The implementation's name                                                 */
/* ------------------------------------------------------------------------ */

static void test_impl_name(void) {
  const char *n = weft__ctx_impl_name;
  printf("[%s] ", n);
#if defined(__x86_64__)
  CU_ASSERT(strcmp(n, "asm-x86_64") == 0 || strcmp(n, "ucontext") == 0);
#elif defined(__aarch64__)
  CU_ASSERT(strcmp(n, "asm-aarch64") == 0 || strcmp(n, "ucontext") == 0);
#else
  CU_ASSERT(strcmp(n, "ucontext") == 0);
#endif
}

/* ------------------------------------------------------------------------ */
/* Handing values over                                                       */
/* ------------------------------------------------------------------------ */

static tctx ctx_a, ctx_b;

static void *first_arg_got;
static void first_arg_entry(void *arg) {
  san_enter(&ctx_a);
  first_arg_got = arg;
  void *r = sw(&ctx_a, &main_ctx, U2P(0xb0b));
  CU_ASSERT_PTR_EQUAL(r, U2P(0xc0c));
  sw(&ctx_a, &main_ctx, U2P(0xd0d));
  CU_FAIL("resumed after the last switch");
}

/* A fresh context receives the first switch's arg; each side gets what the other hands it. */
static void test_first_arg(void) {
  ctx_main(&main_ctx);
  ctx_make(&ctx_a, 64 * 1024, first_arg_entry);
  first_arg_got = NULL;
  void *r = sw(&main_ctx, &ctx_a, U2P(0xa0a));
  CU_ASSERT_PTR_EQUAL(first_arg_got, U2P(0xa0a));
  CU_ASSERT_PTR_EQUAL(r, U2P(0xb0b));
  r = sw(&main_ctx, &ctx_a, U2P(0xc0c));
  CU_ASSERT_PTR_EQUAL(r, U2P(0xd0d));
  ctx_free(&ctx_a);
}

static long pp_rounds;
static long pp_errors;

/* The value handed over in round i: all 64 (or 32) bits vary. */
static uintptr_t pp_key(long i) { return (uintptr_t)((uint64_t)(i + 1) * 0x9e3779b97f4a7c15u); }

static void ping_pong_entry(void *arg) {
  san_enter(&ctx_a);
  uintptr_t v = P2U(arg);
  for (long i = 0; i < pp_rounds; i++) {
    if (v != pp_key(i)) pp_errors++;
    v = P2U(sw(&ctx_a, &main_ctx, U2P(~pp_key(i))));
  }
  sw(&ctx_a, &main_ctx, U2P(v == 0 ? UINTPTR_MAX : 0));
  CU_FAIL("resumed after the last switch");
}

/* Many round trips between the main stack and one context, values checked both ways. */
static void test_ping_pong(void) {
  pp_rounds = scaled(200000);
  pp_errors = 0;
  ctx_main(&main_ctx);
  ctx_make(&ctx_a, 64 * 1024, ping_pong_entry);
  long bad = 0;
  for (long i = 0; i < pp_rounds; i++)
    if (P2U(sw(&main_ctx, &ctx_a, U2P(pp_key(i)))) != ~pp_key(i)) bad++;
  CU_ASSERT_EQUAL(P2U(sw(&main_ctx, &ctx_a, NULL)), UINTPTR_MAX);
  CU_ASSERT_EQUAL(bad, 0);
  CU_ASSERT_EQUAL(pp_errors, 0);
  ctx_free(&ctx_a);
}

#define CHAIN 8
static tctx chain[CHAIN];
static long chain_errors;

/*
 * Context k: started by main with k as its arg, it reports back; then it
 * adds k + 1 to each value and hands the sum to context k + 1 (the last one
 * to main). Its frames must be on its own stack.
 */
static void chain_entry(void *arg) {
  int k = (int)P2U(arg);
  tctx *self = &chain[k];
  san_enter(self);
  tctx *next = k + 1 < CHAIN ? &chain[k + 1] : &main_ctx;
  uintptr_t v = P2U(sw(self, &main_ctx, U2P(1000 + k)));
  for (;;) {
    const char *frame = __builtin_frame_address(0); /* the real frame, even under ASan */
    if (frame < (const char *)self->lo || frame >= (const char *)self->lo + self->size) chain_errors++;
    v = P2U(sw(self, next, U2P(v + (uintptr_t)k + 1)));
  }
}

/* main -> c0 -> c1 -> ... -> c7 -> main, round after round, switching from context to context. */
static void test_chain(void) {
  ctx_main(&main_ctx);
  chain_errors = 0;
  for (int k = 0; k < CHAIN; k++) {
    ctx_make(&chain[k], 64 * 1024, chain_entry);
    CU_ASSERT_EQUAL(P2U(sw(&main_ctx, &chain[k], U2P(k))), (uintptr_t)(1000 + k));
  }
  long rounds = scaled(20000), bad = 0;
  const uintptr_t sum = CHAIN * (CHAIN + 1) / 2;
  for (long i = 0; i < rounds; i++) {
    uintptr_t r = P2U(sw(&main_ctx, &chain[0], U2P(i)));
    if (r != (uintptr_t)i + sum) bad++;
  }
  CU_ASSERT_EQUAL(bad, 0);
  CU_ASSERT_EQUAL(chain_errors, 0);
  for (int k = 0; k < CHAIN; k++) ctx_free(&chain[k]);
}

/* ------------------------------------------------------------------------ */
/* Registers                                                                 */
/* ------------------------------------------------------------------------ */

#ifdef TEST_ASM_HELPERS
/* A distinct 64-bit value for register r of context `who` in round i (splitmix64). */
static uint64_t pattern(unsigned who, long i, int r) {
  uint64_t z = ((uint64_t)who << 56) ^ ((uint64_t)i << 8) ^ (uint64_t)r;
  z += 0x9e3779b97f4a7c15u;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}

static long regs_rounds, regs_errors;

/* Switch with every callee-saved register holding pattern(who, i, *); check them on return. */
static void *regs_switch_checked(tctx *from, tctx *to, unsigned who, long i, void *arg) {
  uint64_t in[NREGS], out[NREGS];
  for (int r = 0; r < NREGS; r++) in[r] = pattern(who, i, r), out[r] = 0;
  san_leave(from, to);
  void *ret = weft_test_regs_switch(&from->sp, to->sp, arg, in, out);
  san_enter(from);
  for (int r = 0; r < NREGS; r++)
    if (out[r] != in[r]) {
      if (regs_errors++ < 5)
        printf("\n  context %u round %ld: register %d is %#llx, not %#llx", who, i, r,
               (unsigned long long)out[r], (unsigned long long)in[r]);
    }
  return ret;
}

static void regs_entry_b(void *arg) {
  san_enter(&ctx_b);
  for (long i = 0;; i++) {
    if (P2U(arg) != (uintptr_t)i) regs_errors++;
    arg = regs_switch_checked(&ctx_b, &ctx_a, 2, i, U2P(i + 1));
  }
}

static void regs_entry_a(void *arg) {
  san_enter(&ctx_a);
  if (arg != U2P(7)) regs_errors++;
  for (long i = 0; i < regs_rounds; i++)
    if (P2U(regs_switch_checked(&ctx_a, &ctx_b, 1, i, U2P(i))) != (uintptr_t)i + 1) regs_errors++;
  sw(&ctx_a, &main_ctx, U2P(8));
  CU_FAIL("resumed after the last switch");
}
#endif

/*
 * Every callee-saved register (x86-64: rbx, rbp, r12-r15; AArch64: x19-x29
 * and d8-d15) keeps its value across a switch: main and two contexts each
 * switch with known values loaded in all of them, and A and B go back and
 * forth, so each switch also resumes a context whose registers differ.
 */
static void test_callee_saved(void) {
#ifdef TEST_ASM_HELPERS
  regs_rounds = scaled(20000);
  regs_errors = 0;
  ctx_main(&main_ctx);
  ctx_make(&ctx_a, 64 * 1024, regs_entry_a);
  ctx_make(&ctx_b, 64 * 1024, regs_entry_b);
  CU_ASSERT_EQUAL(P2U(regs_switch_checked(&main_ctx, &ctx_a, 0, 0, U2P(7))), 8);
  CU_ASSERT_EQUAL(regs_errors, 0);
  ctx_free(&ctx_a);
  ctx_free(&ctx_b);
#else
  printf("[no assembly helper for this architecture] ");
#endif
}

/* ------------------------------------------------------------------------ */
/* Floating point                                                            */
/* ------------------------------------------------------------------------ */

/*
 * Twelve doubles live across every call of between(): more than any ABI
 * keeps in registers, so some stay in callee-saved registers (d8-d15 on
 * AArch64) and some are spilled to the stack, across the switch.
 */
static void fp_kernel(double seed, long rounds, void (*between)(void), double out[12]) {
  double a0 = seed, a1 = seed * 2, a2 = seed * 3, a3 = seed * 5, a4 = seed * 7, a5 = seed * 11;
  double a6 = 1 / seed, a7 = 2 / seed, a8 = 3 / seed, a9 = 5 / seed, a10 = 7 / seed, a11 = 11 / seed;
  for (long i = 0; i < rounds; i++) {
    double t = (double)(i % 97) * 0.001;
    a0 = a0 * 0.999 + a1 * t;
    a1 = a1 * 0.998 + a2 * t;
    a2 = a2 * 0.997 + a3 * t;
    a3 = a3 * 0.996 + a4 * t;
    a4 = a4 * 0.995 + a5 * t;
    a5 = a5 * 0.994 + a6 * t;
    between();
    a6 = a6 * 0.993 + a7 * t;
    a7 = a7 * 0.992 + a8 * t;
    a8 = a8 * 0.991 + a9 * t;
    a9 = a9 * 0.990 + a10 * t;
    a10 = a10 * 0.989 + a11 * t;
    a11 = a11 * 0.988 + a0 * t;
  }
  out[0] = a0, out[1] = a1, out[2] = a2, out[3] = a3, out[4] = a4, out[5] = a5;
  out[6] = a6, out[7] = a7, out[8] = a8, out[9] = a9, out[10] = a10, out[11] = a11;
}

static long fp_rounds;
static double fp_out_a[12], fp_out_b[12];
static void fp_nothing(void) {}
static void fp_a_to_b(void) { sw(&ctx_a, &ctx_b, NULL); }
static void fp_b_to_a(void) { sw(&ctx_b, &ctx_a, NULL); }

static void fp_entry_a(void *arg) {
  (void)arg;
  san_enter(&ctx_a);
  fp_kernel(1.25, fp_rounds, fp_a_to_b, fp_out_a);
  sw(&ctx_a, &ctx_b, NULL); /* B is in its last between(): let it finish */
  CU_FAIL("resumed after the last switch");
}

static void fp_entry_b(void *arg) {
  (void)arg;
  san_enter(&ctx_b);
  fp_kernel(3.5, fp_rounds, fp_b_to_a, fp_out_b);
  sw(&ctx_b, &main_ctx, NULL);
  CU_FAIL("resumed after the last switch");
}

/* Doubles held across switches come back bit for bit: two contexts, checked against runs without switches. */
static void test_fp_values(void) {
  fp_rounds = scaled(50000);
  double want_a[12], want_b[12];
  fp_kernel(1.25, fp_rounds, fp_nothing, want_a);
  fp_kernel(3.5, fp_rounds, fp_nothing, want_b);
  ctx_main(&main_ctx);
  ctx_make(&ctx_a, 64 * 1024, fp_entry_a);
  ctx_make(&ctx_b, 64 * 1024, fp_entry_b);
  sw(&main_ctx, &ctx_a, NULL);
  CU_ASSERT(memcmp(fp_out_a, want_a, sizeof want_a) == 0);
  CU_ASSERT(memcmp(fp_out_b, want_b, sizeof want_b) == 0);
  ctx_free(&ctx_a);
  ctx_free(&ctx_b);
}

/* What a rounding mode does to a few operations, computed on the spot. */
typedef struct fp_probe {
  int round;          /* fegetround() */
  double third;       /* 1 / 3 */
  double mthird;      /* -1 / 3 */
  double sum;         /* 0.1 + 0.2: rounds up to nearest, down toward zero */
  long double lthird; /* 1 / 3 in long double: the x87 on x86-64, software on AArch64 */
  double tiny;        /* DBL_MIN / 4: 0 when flushing to zero */
  int ftz;            /* flush-to-zero bit of MXCSR / FPCR, -1 when unknown */
} fp_probe;

static volatile double fp_one = 1, fp_three = 3, fp_min = DBL_MIN, fp_four = 4, fp_tenth = 0.1,
                       fp_fifth = 0.2;
static volatile long double fp_lone = 1, fp_lthree = 3;

static int ftz_get(void) {
#if defined(__x86_64__)
  unsigned m;
  __asm__ __volatile__("stmxcsr %0" : "=m"(m));
  return (m >> 15) & 1;
#elif defined(__aarch64__)
  uint64_t c;
  __asm__ __volatile__("mrs %0, fpcr" : "=r"(c));
  return (int)((c >> 24) & 1);
#else
  return -1;
#endif
}

static void ftz_set(int on) {
#if defined(__x86_64__)
  unsigned m;
  __asm__ __volatile__("stmxcsr %0" : "=m"(m));
  m = on ? m | (1u << 15) : m & ~(1u << 15);
  __asm__ __volatile__("ldmxcsr %0" : : "m"(m));
#elif defined(__aarch64__)
  uint64_t c;
  __asm__ __volatile__("mrs %0, fpcr" : "=r"(c));
  c = on ? c | (1u << 24) : c & ~(uint64_t)(1u << 24);
  __asm__ __volatile__("msr fpcr, %0" : : "r"(c));
#else
  (void)on;
#endif
}

/*
 * The results go through a volatile object: without FENV_ACCESS a compiler
 * may move an operation across fesetround or a switch, but not past the
 * volatile store of its result.
 */
static fp_probe fp_probe_now(void) {
  volatile fp_probe v;
  v.round = fegetround();
  v.third = fp_one / fp_three;
  v.mthird = -fp_one / fp_three;
  v.sum = fp_tenth + fp_fifth;
  v.lthird = fp_lone / fp_lthree;
  v.tiny = fp_min / fp_four;
  v.ftz = ftz_get();
  fp_probe p = {v.round, v.third, v.mthird, v.sum, v.lthird, v.tiny, v.ftz};
  return p;
}

static bool fp_probe_eq(const fp_probe *a, const fp_probe *b) {
  return a->round == b->round && a->third == b->third && a->mthird == b->mthird && a->sum == b->sum &&
         a->lthird == b->lthird && a->tiny == b->tiny && a->ftz == b->ftz;
}

/*
 * Valgrind rounds its floating-point arithmetic to nearest whatever the mode,
 * and ignores flush-to-zero (it reads the bit back as 0): under it, only
 * fegetround tells the modes apart.
 */
static bool fp_modes_emulated(void) {
#ifdef TEST_VALGRIND
  if (RUNNING_ON_VALGRIND) return false;
#endif
  return true;
}

/* The state each context sets for itself. */
typedef struct fp_env {
  int round;
  int ftz;
} fp_env;

static const fp_env env_main = {FE_TONEAREST, 0}, env_a = {FE_UPWARD, 0}, env_b = {FE_TOWARDZERO, 1};
static fp_probe want_main, want_a, want_b;
static long fenv_rounds, fenv_errors;

static void fp_env_set(const fp_env *e) {
  fesetround(e->round);
  ftz_set(e->ftz);
}

/* The probe under env e, computed here (on the main stack) with the state set and put back. */
static fp_probe fp_probe_under(const fp_env *e) {
  fp_env_set(e);
  fp_probe p = fp_probe_now();
  fp_env_set(&env_main);
  return p;
}

static void fenv_check(const fp_probe *want) {
  fp_probe got = fp_probe_now();
  if (!fp_probe_eq(&got, want)) fenv_errors++;
}

/* main -> A -> B -> main, each with its own rounding mode (and B flushing to zero). */
static void fenv_entry_b(void *arg) {
  (void)arg;
  san_enter(&ctx_b);
  fp_env_set(&env_b);
  for (;;) {
    fenv_check(&want_b);
    sw(&ctx_b, &main_ctx, NULL);
  }
}

static void fenv_entry_a(void *arg) {
  (void)arg;
  san_enter(&ctx_a);
  fp_env_set(&env_a);
  for (;;) {
    fenv_check(&want_a);
    sw(&ctx_a, &ctx_b, NULL);
  }
}

/*
 * The floating-point control state belongs to each context: rounding mode
 * (MXCSR and the x87 control word, or FPCR), and flush-to-zero. Checked with
 * fegetround, the bit itself, and the results of divisions in double and
 * long double.
 */
static void test_fenv_per_context(void) {
  fenv_rounds = scaled(5000);
  fenv_errors = 0;
  want_main = fp_probe_under(&env_main);
  want_a = fp_probe_under(&env_a);
  want_b = fp_probe_under(&env_b);
  /* The modes must tell themselves apart, or the test proves nothing. */
  CU_ASSERT(want_main.round != want_a.round && want_a.round != want_b.round);
  if (fp_modes_emulated()) {
    CU_ASSERT(want_a.third != want_b.third);
    CU_ASSERT(want_a.lthird != want_b.lthird);
    CU_ASSERT(want_main.sum != want_b.sum);
    CU_ASSERT(want_b.tiny == 0 && want_a.tiny != 0 && want_b.ftz == 1);
  }
  ctx_main(&main_ctx);
  ctx_make(&ctx_a, 64 * 1024, fenv_entry_a);
  ctx_make(&ctx_b, 64 * 1024, fenv_entry_b);
  for (long i = 0; i < fenv_rounds; i++) {
    sw(&main_ctx, &ctx_a, NULL);
    fenv_check(&want_main);
  }
  CU_ASSERT_EQUAL(fenv_errors, 0);
  CU_ASSERT_EQUAL(fegetround(), FE_TONEAREST);
  ctx_free(&ctx_a);
  ctx_free(&ctx_b);
}

static fp_probe inherit_got;
static void inherit_entry(void *arg) {
  (void)arg;
  san_enter(&ctx_a);
  inherit_got = fp_probe_now();
  sw(&ctx_a, &main_ctx, NULL);
  CU_FAIL("resumed after the last switch");
}

/* A fresh context starts with the floating-point control state of the thread that made it. */
static void test_fenv_inherited(void) {
  const fp_env down = {FE_DOWNWARD, 0};
  fp_probe want = fp_probe_under(&down);
  ctx_main(&main_ctx);
  fp_env_set(&down);
  ctx_make(&ctx_a, 64 * 1024, inherit_entry);
  fp_env_set(&env_main);
  sw(&main_ctx, &ctx_a, NULL);
  CU_ASSERT_EQUAL(inherit_got.round, FE_DOWNWARD);
  CU_ASSERT(fp_probe_eq(&inherit_got, &want));
  CU_ASSERT_EQUAL(fegetround(), FE_TONEAREST);
  ctx_free(&ctx_a);
}

/* ------------------------------------------------------------------------ */
/* libc on a small stack                                                     */
/* ------------------------------------------------------------------------ */

static const double libc_values[] = {0.1, -2.5, 1e300, 3.0e-310, 6.02214076e23, -0.0, 1.0 / 3.0};
#define NVALUES (sizeof libc_values / sizeof libc_values[0])
static char libc_want[NVALUES][1024], libc_got[NVALUES][1024];
static unsigned char *libc_src, *libc_dst;
#define LIBC_BUF (1u << 20)
static long libc_errors;

static void libc_format(char *out, size_t cap, double v) {
  snprintf(out, cap, "%f %g %e %.17g %a %Lf", v, v, v, v, v, (long double)v * 3);
}

static void libc_entry(void *arg) {
  (void)arg;
  san_enter(&ctx_a);
  for (size_t i = 0; i < NVALUES; i++) libc_format(libc_got[i], sizeof libc_got[i], libc_values[i]);
  /* Big copies at every alignment of source and destination: the vector paths. */
  for (size_t so = 0; so < 64; so += 7)
    for (size_t d = 0; d < 64; d += 9) {
      size_t n = LIBC_BUF - 64 - (so * 64 + d) % 1000;
      memset(libc_dst, 0, LIBC_BUF);
      memcpy(libc_dst + d, libc_src + so, n);
      if (memcmp(libc_dst + d, libc_src + so, n) != 0) libc_errors++;
    }
  /* A buffer on this stack, unaligned copies in and out. */
  char local[16384];
  for (size_t o = 0; o < 32; o++) {
    memcpy(local + o, libc_src + 3 * o, sizeof local - 32);
    if (memcmp(local + o, libc_src + 3 * o, sizeof local - 32) != 0) libc_errors++;
    memmove(local + 1, local + o, 1000);
    if (memcmp(local + 1, libc_src + 3 * o, 1000) != 0) libc_errors++;
  }
  sw(&ctx_a, &main_ctx, NULL);
  CU_FAIL("resumed after the last switch");
}

/* snprintf of doubles and memcpy of big buffers work on a 64 KiB context stack. */
static void test_libc_small_stack(void) {
  libc_errors = 0;
  libc_src = malloc(LIBC_BUF);
  libc_dst = malloc(LIBC_BUF);
  CU_ASSERT_FATAL(libc_src && libc_dst);
  for (size_t i = 0; i < LIBC_BUF; i++) libc_src[i] = (unsigned char)(i * 131 + (i >> 11));
  for (size_t i = 0; i < NVALUES; i++) libc_format(libc_want[i], sizeof libc_want[i], libc_values[i]);
  ctx_main(&main_ctx);
  ctx_make(&ctx_a, 64 * 1024, libc_entry);
  sw(&main_ctx, &ctx_a, NULL);
  for (size_t i = 0; i < NVALUES; i++) CU_ASSERT_STRING_EQUAL(libc_got[i], libc_want[i]);
  CU_ASSERT_EQUAL(libc_errors, 0);
  ctx_free(&ctx_a);
  free(libc_src);
  free(libc_dst);
}

/* ------------------------------------------------------------------------ */
/* The stack                                                                 */
/* ------------------------------------------------------------------------ */

#ifdef TEST_ASM_HELPERS
static uintptr_t probe_got;
void weft_test_probe_entry_c(void *arg) {
  (void)arg;
  san_enter(&ctx_a);
  probe_got = P2U(weft_test_probe_sp);
  sw(&ctx_a, &main_ctx, NULL);
  CU_FAIL("resumed after the last switch");
}
#endif

/*
 * Whatever the alignment of base + size, entry is called with the stack
 * pointer aligned as the ABI asks at a function's entry, near the top (the
 * ucontext version keeps its record of a few KiB there), and nothing at or
 * above base + size is written.
 */
static void test_entry_alignment(void) {
#ifdef TEST_ASM_HELPERS
  ctx_main(&main_ctx);
  for (size_t mis = 0; mis < 32; mis++) {
    ctx_stack(&ctx_a, 64 * 1024);
    unsigned char *end = (unsigned char *)ctx_a.lo + ctx_a.size;
    unsigned char *top = end - 64 - mis; /* 64 canary bytes at least above the given top */
    memset(top, 0xa5, (size_t)(end - top));
    ctx_a.sp =
        weft__ctx_make((void *)ctx_a.lo, (size_t)(top - (unsigned char *)ctx_a.lo), weft_test_probe_entry);
    probe_got = 0;
    sw(&main_ctx, &ctx_a, NULL);
    CU_ASSERT_EQUAL(probe_got % 16, ENTRY_SP_MOD16);
    CU_ASSERT(probe_got <= P2U(top) && probe_got > P2U(top) - 8192);
    size_t dirty = 0;
    for (unsigned char *p = top; p < end; p++) dirty += *p != 0xa5;
    CU_ASSERT_EQUAL(dirty, 0);
    ctx_free(&ctx_a);
  }
#else
  printf("[no assembly helper for this architecture] ");
#endif
}

static void **slot_where;
static void slot_entry(void *arg) {
  san_enter(&ctx_a);
  void *my_sp; /* the slot lives on the stack it describes */
  slot_where = &my_sp;
  for (uintptr_t v = P2U(arg);;) {
    san_leave(&ctx_a, &main_ctx);
    v = P2U(weft__ctx_switch(&my_sp, main_ctx.sp, U2P(v + 1)));
    san_enter(&ctx_a);
  }
}

/* from_sp may point into the stack being left: the context keeps its own slot. */
static void test_slot_on_own_stack(void) {
  ctx_main(&main_ctx);
  ctx_make(&ctx_a, 64 * 1024, slot_entry);
  CU_ASSERT_EQUAL(P2U(sw(&main_ctx, &ctx_a, U2P(0))), 1);
  for (uintptr_t i = 10; i < 1000; i += 10) {
    san_leave(&main_ctx, &ctx_a);
    uintptr_t r = P2U(weft__ctx_switch(&main_ctx.sp, *slot_where, U2P(i)));
    san_enter(&main_ctx);
    CU_ASSERT_EQUAL(r, i + 1);
  }
  ctx_free(&ctx_a);
}

/* ------------------------------------------------------------------------ */
/* An entry function that returns                                            */
/* ------------------------------------------------------------------------ */

static void returning_entry(void *arg) {
  (void)arg;
  san_enter(&ctx_a);
}

static void child_returning_entry(void *arg) {
  (void)arg;
  ctx_main(&main_ctx);
  ctx_make(&ctx_a, 64 * 1024, returning_entry);
  sw(&main_ctx, &ctx_a, NULL);
  fprintf(stderr, "survived the return of an entry function\n");
}

/* When an entry function returns, the process aborts with a message. */
static void test_entry_return_aborts(void) {
  char err[4096];
  int st = weft_test_child(child_returning_entry, NULL, err, sizeof err);
  CU_ASSERT(WIFSIGNALED(st));
  if (WIFSIGNALED(st)) CU_ASSERT_EQUAL(WTERMSIG(st), SIGABRT);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "weft: fiber entry function returned"));
  if (!strstr(err, "weft: fiber entry function returned")) printf("\n  child's stderr: %s", err);
}

static const weft_test tests[] = {
    {"impl_name", test_impl_name},
    {"first_arg", test_first_arg},
    {"ping_pong", test_ping_pong},
    {"chain", test_chain},
    {"callee_saved", test_callee_saved},
    {"fp_values", test_fp_values},
    {"fenv_per_context", test_fenv_per_context},
    {"fenv_inherited", test_fenv_inherited},
    {"libc_small_stack", test_libc_small_stack},
    {"entry_alignment", test_entry_alignment},
    {"slot_on_own_stack", test_slot_on_own_stack},
    {"entry_return_aborts", test_entry_return_aborts},
    {NULL, NULL},
};

int main(int argc, char **argv) { return weft_test_run(argc, argv, "context", tests); }
