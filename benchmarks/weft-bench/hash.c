/*
 * This file contains the checksum and the generator that weft-bench's cases
 * share: FNV-1a over the bytes an element read (files, http bodies), and
 * xorshift64*, the generator of benchmarks/kernels.c's inputs, for file
 * sizes, file bytes and the http page, so that a seed fixes every input.
 */
#define _POSIX_C_SOURCE 200809L
#include "bench.h"

uint64_t wb_fnv1a(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

uint64_t wb_xorshift64s(uint64_t *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 0x2545F4914F6CDD1Dull;
}
