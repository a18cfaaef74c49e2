/*
 * This file contains the private interface of fiber-local and scoped values
 * (key.c, scope.c): the key table's lookups, the per-context store of local
 * values, and the scope nodes that futures and maps share.
 *
 * Where values live. Every piece of weft work runs in a context record
 * (weft__tctx, sync/wait.h): a fiber's own, or an OS thread's. Both kinds of
 * value hang off it:
 *
 *   tc->locals   local values: a small array of (key, value) pairs, created
 *                by the first weft_local_set that stores a non-NULL value, so
 *                a context pays for the keys it actually set and nothing
 *                else (100,000 fibers that each set one key cost 100,000
 *                small arrays, not 100,000 tables of WEFT_KEYS_MAX slots).
 *   tc->scope    the innermost scoped binding: a chain of immutable nodes,
 *                each pointing at the binding it shadows or extends.
 *
 *      frame of weft_scope_run(k2)    future started inside it
 *               |                               |
 *               v                               v
 *      [k2 = v2, refs 2] ---parent--> [k1 = v1, refs 1] ---> NULL
 *
 * A node is never changed once published, so any number of threads read a
 * chain without locks; its reference count keeps it alive while a frame, a
 * future or a child node holds it. A parallel map does not take one: the
 * caller's frame outlives every element.
 */
#ifndef WEFT_LOCAL_LOCAL_H
#define WEFT_LOCAL_LOCAL_H

#include "../base/internal.h"
#include "../sync/wait.h"

/* One scoped binding. Immutable once published, except refs. */
struct weft__scope {
  atomic_uint refs;           /* holders: the weft_scope_run frame, futures, child nodes */
  weft_key_t key;             /* the full key (slot and generation): a stale key never matches */
  void *value;                /* the caller's: weft never frees it */
  struct weft__scope *parent; /* the binding that was current when this one was made; one reference held */
};

/* One local value. */
struct weft__local {
  weft_key_t key; /* the full key it was set with; may have been deleted since */
  void *value;    /* NULL: unset (the entry may be reused) */
};

/* The local values of one context: unsorted, scanned (a context sets a handful of keys). */
struct weft__locals {
  size_t len;             /* entries in use */
  size_t cap;             /* entries allocated */
  struct weft__local v[]; /* cap entries */
};

/* Take and drop a reference to a scope chain; NULL is ignored by both. */
void weft__scope_ref(struct weft__scope *s);
void weft__scope_unref(struct weft__scope *s);

/* True when key names a key that exists now (not deleted, not reused). */
bool weft__key_valid(weft_key_t key);

/*
 * Destroy the local values of tc, as pthread does at thread exit: for every
 * non-NULL value whose key still exists and has a destructor, clear it and
 * call the destructor with it; repeat while destructors set values again, at
 * most WEFT__LOCAL_ROUNDS rounds; then free the store (values still set
 * after the last round are dropped without a destructor). Called on the
 * fiber's own stack when its work has returned (sched.c, fiber_main), and by
 * a pthread key destructor when a thread that set values exits. Destructors
 * may call any weft function that the context may call.
 */
void weft__locals_release(weft__tctx *tc);

#define WEFT__LOCAL_ROUNDS 4 /* as glibc's PTHREAD_DESTRUCTOR_ITERATIONS */

/*
 * Make weft_local_get/set on this OS thread use tc's values (NULL: the
 * thread's or fiber's own again); returns the previous redirection. The
 * offload pool runs a parked fiber's call this way, so that fn sees the
 * fiber's local values as it would inline. Only on a thread that cannot
 * park while redirected (an offload thread), since the setting is the OS
 * thread's.
 */
weft__tctx *weft__locals_redirect(weft__tctx *tc);

#endif /* WEFT_LOCAL_LOCAL_H */
