/*
 * This file contains scoped values (weft_scope_run, weft_scope_get), after
 * Java's ScopedValue: a binding lasts for the dynamic extent of a call and
 * is inherited by the work started inside it.
 *
 * A binding is a node pushed on the caller's context record (tc->scope) for
 * the length of fn and popped after, so it never leaks out of its scope.
 * Nodes are immutable and reference-counted (local.h): a future captures the
 * chain that is current when it starts and holds a reference until its
 * memory is released (api/future.c), so it sees its bindings even when it
 * outlives the scope; a parallel map lends the caller's chain to every
 * element for the map's length (cpu/range.c); the offload pool lends the
 * parked fiber's chain to fn (io/offload.c). A lookup walks the chain from
 * the innermost binding out, so a nested binding of the same key shadows
 * the outer one. Scoped values have no destructor: the value stays the
 * caller's.
 *
 * Rejected: copying the bindings into each future (a map of every key; a
 * start would cost O(bindings) instead of one increment), and nodes on the
 * caller's stack (a future that outlives the scope would need a deep copy
 * made at the moment of capture, which is the same allocation, taken later
 * and by whoever starts work).
 */
#include "local.h"

#include "../base/sys.h"

void weft__scope_ref(struct weft__scope *s) {
  /* Relaxed: the holder already has a reference, which keeps s alive. */
  if (s) atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
}

void weft__scope_unref(struct weft__scope *s) {
  /* A loop, not recursion: a deep chain is freed without a deep stack. */
  while (s) {
    /* acq_rel: the last holder sees the node as its maker wrote it. */
    if (atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) != 1) return;
    struct weft__scope *parent = s->parent;
    weft__free(s);
    s = parent;
  }
}

int weft_scope_run(weft_key_t key, void *value, weft_task_fn fn, void *arg, void **result) {
  if (!fn || !weft__key_valid(key)) return -EINVAL;
  struct weft__scope *s = weft__malloc(sizeof *s);
  if (!s) return -ENOMEM;
  weft__tctx *tc = weft__tctx_self();
  struct weft__scope *outer = tc->scope;
  atomic_init(&s->refs, 1); /* this frame's */
  s->key = key;
  s->value = value;
  s->parent = outer;
  weft__scope_ref(outer);
  tc->scope = s;
  void *r = fn(arg);
  /* The same record: fn runs on this fiber or thread, and whatever it lent the thread it took back. */
  tc->scope = outer;
  weft__scope_unref(s);
  if (result) *result = r;
  return 0;
}

int weft_scope_get(weft_key_t key, void **value) {
  if (!weft__key_valid(key)) return -EINVAL;
  for (const struct weft__scope *s = weft__tctx_self()->scope; s; s = s->parent) {
    if (s->key == key) {
      if (value) *value = s->value;
      return 0;
    }
  }
  return -ENOENT;
}
