/*
 * This file contains the kernels that every benchmark gives to every
 * implementation, compiled once, each function aligned to 64 bytes, so that
 * weft, OpenMP, threads and the sequential loop run the same machine code.
 */
#ifndef WEFT_BENCH_KERNELS_H
#define WEFT_BENCH_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The GPars "math" kernel: sum over i = 1..100 of (i XOR x). */
int64_t weft_kernel_math(int64_t x);

/* out[i] = weft_kernel_math(in[i]) for i in [lo, hi). */
void weft_kernel_math_range(const int64_t *in, int64_t *out, size_t lo, size_t hi);

/* A deterministic input: in[i] for the math kernel (fixed seed). */
void weft_kernel_math_input(int64_t *in, size_t n, uint64_t seed);

/*
 * A spin of `iters` steps of a 64-bit linear congruential generator from
 * seed: one dependent multiply and add a step, no memory, nothing the
 * compiler can fold, so its time is iters times a constant (`weft-bench
 * grain` measures that constant and sizes its tasks by it). The result is
 * never 0.
 */
uint64_t weft_kernel_spin(uint64_t iters, uint64_t seed);

/* The dot product of x and y over [lo, hi), summed in index order (bm_reduce). */
double weft_kernel_dot(const double *x, const double *y, size_t lo, size_t hi);

/* w[i] = alpha x[i] + beta y[i] for i in [lo, hi): HPCCG's waxpby (bm_reduce). */
void weft_kernel_waxpby(double alpha, const double *x, double beta, const double *y, double *w, size_t lo,
                        size_t hi);

/* Keep the compiler from deleting a computation whose result is unused. */
void weft_kernel_sink(const void *p);

#ifdef __cplusplus
}
#endif
#endif
