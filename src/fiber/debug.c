/*
 * This file contains the layout table that the gdb extension
 * (share/weft/gdb/weft.py) reads, so that `info weft-fibers` and `weft-bt`
 * work on any build, Release builds without debug information included, on
 * a live process and on a core file: the addresses and field offsets it
 * needs, as 64-bit words at the symbol weft__debug_layout (in the symbol
 * table, not exported). A change to a structure below changes the table by
 * itself; a change to its order bumps VERSION, and the script says when it
 * meets a version it does not know.
 */
#include "../base/internal.h"

#include <stddef.h>

#include "fiber.h"
#include "sched.h"

#define VERSION 1

/* Used: the compiler must keep it although nothing in C reads it. */
/* Exported (default visibility) so that gdb finds it in a stripped library too. */
__attribute__((used, visibility("default"))) const uint64_t weft__debug_layout[] = {
    0x74666577u, /* 0: "weft" */
    VERSION,
    (uint64_t)(uintptr_t)&weft__rt_state,
    offsetof(weft__rt, carriers),
    offsetof(weft__rt, ncarriers), /* 4 bytes */
    offsetof(weft__carrier, id),   /* 4 bytes */
    offsetof(weft__carrier, reg_head),
    offsetof(weft__carrier, status), /* 4 bytes: 0 running */
    offsetof(weft__carrier, extra),  /* 1 byte */
    offsetof(weft__fiber, reg_next),
    offsetof(weft__fiber, id),        /* 10 */
    offsetof(weft__fiber, state),     /* 1 byte: WEFT__FS_* */
    offsetof(weft__fiber, wait_kind), /* 1 byte: index into the names below */
    offsetof(weft__fiber, wait_obj),
    offsetof(weft__fiber, wait_deadline),
    offsetof(weft__fiber, wait_since),
    offsetof(weft__fiber, sp),    /* the saved stack pointer: the switch frame is there */
    offsetof(weft__fiber, flags), /* 4 bytes */
    offsetof(weft__fiber, tag),
    offsetof(weft__fiber, ops),
    offsetof(weft__fiber_ops, what), /* 20 */
    offsetof(weft__fiber, arg),
    offsetof(weft__fiber, spawn_site),
    (uint64_t)(uintptr_t)&weft__wait_names[0],
    WEFT__WAIT_KINDS,
    offsetof(weft__rt, state), /* 4 bytes: 1 running */
    (uint64_t)(uintptr_t)&weft__coarse_now,
    WEFT__FIBER_CLONE,
    sizeof(void *),
};
