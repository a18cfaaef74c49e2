/*
 * This file contains the announcements that tools need around a stack
 * switch: AddressSanitizer (which stack is live), ThreadSanitizer (which
 * logical thread runs) and Valgrind (which memory is a stack; registered by
 * stack.c). Without the tools, every macro here is empty.
 */
#ifndef WEFT_FIBER_ANNOTATE_H
#define WEFT_FIBER_ANNOTATE_H

#include <stddef.h>

#ifdef WEFT_ASAN
#include <sanitizer/common_interface_defs.h>
/* Before a switch to the stack [bottom, bottom + size); save NULL when the current fiber ends for good. */
#define WEFT__ASAN_START(save, bottom, size) __sanitizer_start_switch_fiber((save), (bottom), (size))
/* After a switch, on the new stack, with what this stack saved when it was left (NULL the first time). */
#define WEFT__ASAN_FINISH(save) __sanitizer_finish_switch_fiber((save), NULL, NULL)
#else
#define WEFT__ASAN_START(save, bottom, size) ((void)(save), (void)(bottom), (void)(size))
#define WEFT__ASAN_FINISH(save)              ((void)(save))
#endif

#ifdef WEFT_TSAN
#include <sanitizer/tsan_interface.h>
/* A happens-before edge from every release to every later acquire of addr. */
#define WEFT__TSAN_RELEASE(addr) __tsan_release(addr)
#define WEFT__TSAN_ACQUIRE(addr) __tsan_acquire(addr)
#define WEFT__TSAN_CURRENT()     __tsan_get_current_fiber()
#define WEFT__TSAN_CREATE()      __tsan_create_fiber(0)
#define WEFT__TSAN_DESTROY(f)    __tsan_destroy_fiber(f)
/* Immediately before the switch; flags 0: the switch orders everything before it. */
#define WEFT__TSAN_SWITCH(f) __tsan_switch_to_fiber((f), 0)
/* A function whose own memory accesses ThreadSanitizer does not see (calls it makes are seen). */
#define WEFT__TSAN_UNSEEN __attribute__((no_sanitize("thread"), noinline))
#else
#define WEFT__TSAN_RELEASE(addr) ((void)(addr))
#define WEFT__TSAN_ACQUIRE(addr) ((void)(addr))
#define WEFT__TSAN_CURRENT()     NULL
#define WEFT__TSAN_CREATE()      NULL
#define WEFT__TSAN_DESTROY(f)    ((void)(f))
#define WEFT__TSAN_SWITCH(f)     ((void)(f))
#define WEFT__TSAN_UNSEEN
#endif

#endif /* WEFT_FIBER_ANNOTATE_H */
