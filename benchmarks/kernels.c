/*
 * This file contains the shared benchmark kernels (see kernels.h).
 */
#include "kernels.h"

int64_t weft_kernel_math(int64_t x) {
  int64_t s = 0;
  for (int64_t i = 1; i <= 100; i++) s += i ^ x;
  return s;
}

void weft_kernel_math_range(const int64_t *in, int64_t *out, size_t lo, size_t hi) {
  for (size_t i = lo; i < hi; i++) out[i] = weft_kernel_math(in[i]);
}

void weft_kernel_math_input(int64_t *in, size_t n, uint64_t seed) {
  uint64_t s = seed ? seed : 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < n; i++) {
    /* xorshift64*: fixed, portable, fast */
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    in[i] = (int64_t)((s * 0x2545F4914F6CDD1Dull) >> 33);
  }
}

uint64_t weft_kernel_spin(uint64_t iters, uint64_t seed) {
  uint64_t x = seed;
  for (uint64_t i = 0; i < iters; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull; /* Knuth's MMIX constants */
    /* An empty asm that "changes" x: no closed form, no vectorising, the chain stays a chain. */
    __asm__ __volatile__("" : "+r"(x));
  }
  return x | 1;
}

double weft_kernel_dot(const double *x, const double *y, size_t lo, size_t hi) {
  double s = 0.0;
  for (size_t i = lo; i < hi; i++) s += x[i] * y[i];
  return s;
}

void weft_kernel_waxpby(double alpha, const double *x, double beta, const double *y, double *w, size_t lo,
                        size_t hi) {
  for (size_t i = lo; i < hi; i++) w[i] = alpha * x[i] + beta * y[i];
}

void weft_kernel_sink(const void *p) { __asm__ __volatile__("" : : "r"(p) : "memory"); }
