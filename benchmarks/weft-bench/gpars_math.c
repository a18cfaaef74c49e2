/*
 * This file contains the gpars "math" case: each element computes the
 * write-up's kernel, sum over i = 1..100 of (i XOR x), for one input of a
 * fixed data set (weft_kernel_math_input with the run's seed). The kernel
 * lives in the shared kernels library so that every backend runs the same
 * machine code.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpars.h"
#include "kernels.h"

typedef struct math_ctx {
  size_t n;
  int64_t *in;
  int64_t *out;
  int64_t *expect; /* the sequential answer, computed once at setup */
} math_ctx;

static void math_teardown(void *p) {
  math_ctx *c = p;
  if (!c) return;
  free(c->in);
  free(c->out);
  free(c->expect);
  free(c);
}

static int math_setup(void **out, size_t items, uint64_t seed, char *err, size_t errlen) {
  math_ctx *c = calloc(1, sizeof *c);
  if (c) {
    c->n = items;
    c->in = calloc(items, sizeof *c->in);
    c->out = calloc(items, sizeof *c->out);
    c->expect = calloc(items, sizeof *c->expect);
  }
  if (!c || !c->in || !c->out || !c->expect) {
    math_teardown(c);
    snprintf(err, errlen, "no memory for %zu elements", items);
    return -ENOMEM;
  }
  weft_kernel_math_input(c->in, items, seed);
  weft_kernel_math_range(c->in, c->expect, 0, items);
  *out = c;
  return 0;
}

static int math_element(void *p, size_t i) {
  math_ctx *c = p;
  c->out[i] = weft_kernel_math(c->in[i]);
  return 0;
}

static void math_reset(void *p) {
  math_ctx *c = p;
  /* ~expect: a value no element writes, so that a skipped element shows. */
  for (size_t i = 0; i < c->n; i++) c->out[i] = ~c->expect[i];
}

static int math_check(void *p, char *err, size_t errlen) {
  math_ctx *c = p;
  for (size_t i = 0; i < c->n; i++) {
    if (c->out[i] != c->expect[i]) {
      snprintf(err, errlen, "element %zu: got %lld, expected %lld", i, (long long)c->out[i],
               (long long)c->expect[i]);
      return -EIO;
    }
  }
  return 0;
}

const gpars_case wb_gpars_math = {
    .name = "math",
    .what = "sum over i = 1..100 of (i XOR x), one input per element",
    .default_items = 100,
    .setup = math_setup,
    .element = math_element,
    .reset = math_reset,
    .check = math_check,
    .teardown = math_teardown,
};
