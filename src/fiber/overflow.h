/*
 * This file contains the interface of the stack overflow handler
 * (overflow.c): a SIGSEGV/SIGBUS handler on an alternate signal stack that
 * recognises a fault in the guard below the running fiber's stack and ends
 * the process with a message naming the fiber; any other fault goes to the
 * handler that was installed before weft's.
 */
#ifndef WEFT_FIBER_OVERFLOW_H
#define WEFT_FIBER_OVERFLOW_H

#include "../base/internal.h"

/* Install the handler (once per process; later calls do nothing). Returns 0 or -errno. */
int weft__overflow_install(void);

/*
 * Give the calling thread an alternate signal stack for the handler
 * (carriers call it): 256 KiB, lazily committed, with a guard page. A thread
 * that has one already (the program's, or a sanitizer's) keeps it. Returns
 * 0 or -ENOMEM; again on the same thread, 0 and nothing changes. Without it
 * an overflow still ends the process, by SIGSEGV without the message.
 */
int weft__overflow_thread_init(void);

/*
 * Remove and free the calling thread's alternate signal stack, if it is
 * still the one weft installed (otherwise it is left mapped: whoever
 * replaced it may restore it). A thread that exits without calling it has
 * it freed by a thread-exit destructor.
 */
void weft__overflow_thread_fini(void);

#ifdef WEFT_TESTING
/*
 * Forget that the handler was installed, so that the next install saves the
 * actions in place then (tests run it in a child process, after installing a
 * handler of their own).
 */
void weft__overflow_reset(void);
#endif

#endif /* WEFT_FIBER_OVERFLOW_H */
