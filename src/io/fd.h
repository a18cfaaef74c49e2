/*
 * This file contains what the rest of weft and the tests see of the calls on
 * owned descriptors (fd.c); the calls themselves are public (weft.h).
 */
#ifndef WEFT_IO_FD_H
#define WEFT_IO_FD_H

/*
 * Tests only: the read attempts (read, readv, recvmsg) that the calls on
 * owned descriptors have made so far, all threads; counted in builds with
 * WEFT_TESTING, 0 in the others. A read that parks at once because its
 * descriptor is known empty makes none.
 */
unsigned long weft__fd_test_reads(void);
/* Lends (weft_fd_read_lend) that lent a ring's own buffer (WEFT_TESTING builds; else 0). */
unsigned long weft__fd_test_ring_lends(void);
/* Ring buffers lent and not given back yet, every ring (WEFT_TESTING builds; else 0). */
long weft__fd_test_lent_buffers(void);

#endif /* WEFT_IO_FD_H */
