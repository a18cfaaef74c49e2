/*
 * This file contains backtraces of suspended fibers, for weft_dump: unwind
 * from the registers a context saved (frame.h), and name each frame. One
 * file implements it, picked by CMake: backtrace_unwind.c (libunwind, with
 * libdw for file:line where Debian's libdw is there), or backtrace_none.c
 * (a dump then lists fibers without their stacks, and says why).
 */
#ifndef WEFT_FIBER_BACKTRACE_H
#define WEFT_FIBER_BACKTRACE_H

#include "../base/internal.h"
#include "frame.h"

/* A session of symbolization (opened once per dump: reading the process's modules costs). */
typedef struct weft__symbols weft__symbols;

/* NULL when backtraces are not built in; *why then says so. */
weft__symbols *weft__symbols_open(const char **why);
void weft__symbols_close(weft__symbols *s);

/*
 * Unwind from fr: up to max return addresses into pcs (the first is where
 * the context resumes). Returns how many. The stack must not change
 * meanwhile (the caller keeps the fiber from resuming).
 */
int weft__backtrace(const weft__frame *fr, uintptr_t *pcs, int max);

/* "function+0x1c (file.c:42, libweft.so)" for a return address, into buf. */
void weft__symbolize(weft__symbols *s, uintptr_t pc, char *buf, size_t cap);

#endif /* WEFT_FIBER_BACKTRACE_H */
