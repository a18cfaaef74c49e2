/*
 * This file contains the key table (weft_key_create, weft_key_delete) and
 * local values (weft_local_get, weft_local_set, and their destruction when a
 * fiber or thread ends). Scoped values are in scope.c; local.h draws the
 * picture.
 *
 * Keys. A process-wide table of WEFT_KEYS_MAX slots. Each slot has a
 * sequence number that is odd while the slot holds a key and even while it is
 * free, bumped by every create and every delete. A key is the pair
 *
 *      63                               16 15              0
 *     +-----------------------------------+-----------------+
 *     |  sequence number (48 bits, odd)   |    slot + 1     |
 *     +-----------------------------------+-----------------+
 *
 * so a key is valid exactly while its slot's sequence number is the one it
 * carries: a deleted key, and every copy of it, stops matching at the
 * delete, and a later key in the same slot carries another number (the
 * sequence wraps after 2^47 reuses of one slot, far beyond any program's
 * life). Zero is never a key (slot + 1 is never 0), so a zeroed weft_key_t
 * is rejected. Create and delete take a mutex; lookups are lock-free: a
 * sequence-number load, and for the destructor a second one (a seqlock read).
 *
 * Local values. Each context record (a fiber's, or an OS thread's base
 * record) has its own store (local.h), found through weft__tctx:
 *
 *  - on a fiber: the fiber's own record;
 *  - on any other thread: the thread's base record, never the temporary one
 *    that a CPU future's run lends the thread (weft__tctx_enter). So work
 *    that runs on OS threads (CPU futures, CPU map elements, BLOCKING work
 *    on the fallback) reads and writes the values of the OS thread it runs
 *    on, as a thread-local variable would: a value set there outlives the
 *    future, is seen by later work on the same thread, and is destroyed
 *    when the thread exits. That is what per-worker state needs (a scratch
 *    buffer per OpenMP thread, set lazily by the first element that runs
 *    there); per-task state belongs in the task's argument. A temporary
 *    store per CPU task would instead destroy such a cache after every
 *    future and hide values set by the thread's own code.
 *
 * A BLOCKING map runs several elements in turn on each of its fibers, so an
 * element sees values set by an earlier element on the same fiber, until the
 * map's fibers end.
 *
 * Destruction. The fiber scheduler calls weft__locals_release when a fiber's
 * work returns; for an OS thread, the first value it stores registers a
 * pthread key whose destructor does the same when the thread exits. The
 * main thread's values are never destroyed at exit (POSIX runs no key
 * destructors for it), as with pthread keys.
 */
#include "local.h"

#include <pthread.h>
#include <string.h>

#include "../base/process.h"
#include "../base/sys.h"

#define SLOT_BITS   16
#define SLOT_MASK   ((UINT64_C(1) << SLOT_BITS) - 1)
#define SEQ_MASK    ((UINT64_C(1) << (64 - SLOT_BITS)) - 1)
#define INITIAL_CAP 4

_Static_assert(WEFT_KEYS_MAX < (1 << SLOT_BITS), "slot + 1 must fit the key's slot field");

typedef void (*dtor_fn)(void *);

/* One slot of the key table. */
struct key_slot {
  _Atomic uint64_t seq;  /* odd: holds a key; even: free. Written under keys_mu, read without it */
  _Atomic(dtor_fn) dtor; /* the key's destructor; written before seq is published (release) */
};

static struct key_slot keys[WEFT_KEYS_MAX];
static pthread_mutex_t keys_mu = PTHREAD_MUTEX_INITIALIZER; /* serialises create and delete */
static pthread_once_t keys_once = PTHREAD_ONCE_INIT;

/* A fork while another thread holds keys_mu would leave the child's copy held for ever. */
static void keys_atfork_prepare(void) { pthread_mutex_lock(&keys_mu); }
static void keys_atfork_release(void) { pthread_mutex_unlock(&keys_mu); }
static void keys_init(void) { weft__on_fork(keys_atfork_prepare, keys_atfork_release, keys_atfork_release); }

/* Split a key; false when its slot is out of range or its sequence number is not a live one. */
static bool key_split(weft_key_t key, struct key_slot **slot, uint64_t *seq) {
  uint64_t s1 = key & SLOT_MASK;
  if (s1 == 0 || s1 > WEFT_KEYS_MAX) return false;
  *slot = &keys[s1 - 1];
  *seq = key >> SLOT_BITS;
  return (*seq & 1) != 0;
}

bool weft__key_valid(weft_key_t key) {
  struct key_slot *s;
  uint64_t seq;
  /* Acquire pairs with the release in weft_key_create (the destructor is seen with the key). */
  return key_split(key, &s, &seq) && atomic_load_explicit(&s->seq, memory_order_acquire) == seq;
}

/* The destructor of a key that exists now, or NULL (no destructor, or the key is gone). */
static dtor_fn key_dtor(weft_key_t key) {
  struct key_slot *s;
  uint64_t seq;
  if (!key_split(key, &s, &seq) || atomic_load_explicit(&s->seq, memory_order_acquire) != seq) return NULL;
  dtor_fn d = atomic_load_explicit(&s->dtor, memory_order_acquire);
  /* A seqlock read: a delete and create in between would have moved seq on. */
  if (atomic_load_explicit(&s->seq, memory_order_relaxed) != seq) return NULL;
  return d;
}

int weft_key_create(weft_key_t *key, void (*destructor)(void *)) {
  if (!key) return -EINVAL;
  pthread_once(&keys_once, keys_init);
  int rc = -EAGAIN;
  pthread_mutex_lock(&keys_mu);
  for (size_t i = 0; i < WEFT_KEYS_MAX; i++) {
    uint64_t seq = atomic_load_explicit(&keys[i].seq, memory_order_relaxed);
    if (seq & 1) continue;
    seq = (seq + 1) & SEQ_MASK; /* odd: SEQ_MASK + 1 is even, so parity survives the wrap */
    atomic_store_explicit(&keys[i].dtor, destructor, memory_order_relaxed);
    /* Release: whoever sees the new seq sees the destructor. */
    atomic_store_explicit(&keys[i].seq, seq, memory_order_release);
    *key = (seq << SLOT_BITS) | (uint64_t)(i + 1);
    rc = 0;
    break;
  }
  pthread_mutex_unlock(&keys_mu);
  return rc;
}

int weft_key_delete(weft_key_t key) {
  struct key_slot *s;
  uint64_t seq;
  if (!key_split(key, &s, &seq)) return -EINVAL;
  pthread_once(&keys_once, keys_init);
  int rc = -EINVAL;
  pthread_mutex_lock(&keys_mu);
  if (atomic_load_explicit(&s->seq, memory_order_relaxed) == seq) {
    atomic_store_explicit(&s->seq, (seq + 1) & SEQ_MASK, memory_order_release);
    atomic_store_explicit(&s->dtor, NULL, memory_order_relaxed);
    rc = 0;
  }
  pthread_mutex_unlock(&keys_mu);
  return rc;
}

/* --- whose values ---------------------------------------------------------------- */

static __thread weft__tctx *tls_redirect; /* weft__locals_redirect: the offload pool's caller */
static __thread bool tls_registered;      /* this thread's exit destructor is armed */

static pthread_key_t exit_key;
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;
static int exit_key_rc; /* pthread_key_create's result */

static void thread_exit(void *p) {
  weft__tctx *tc = p;
  /* A destructor of another library that runs after this one may set values again: re-arm then. */
  tls_registered = false;
  weft__locals_release(tc);
}

static void exit_key_init(void) { exit_key_rc = pthread_key_create(&exit_key, thread_exit); }

weft__tctx *weft__locals_redirect(weft__tctx *tc) {
  weft__tctx *prev = tls_redirect;
  tls_redirect = tc;
  return prev;
}

/*
 * The record whose values the caller reads and writes (see the top of the
 * file); *thread tells whether it is an OS thread's base record.
 */
static weft__tctx *owner(bool *thread) {
  *thread = false;
  if (tls_redirect) return tls_redirect;
  weft__tctx *f = weft__fiber_tctx_self();
  if (f) return f;
  *thread = true;
  /*
   * The thread's base record: weft__tctx_self() answers it when no record is
   * lent, so lend none for the moment of the call. (A weft__tctx_base()
   * accessor in wait.c would say this directly.)
   */
  weft__tctx *lent = weft__tctx_enter(NULL);
  weft__tctx *base = weft__tctx_self();
  weft__tctx_leave(lent);
  return base;
}

/* --- local values ----------------------------------------------------------------- */

static struct weft__local *find(struct weft__locals *l, weft_key_t key) {
  if (!l) return NULL;
  for (size_t i = 0; i < l->len; i++)
    if (l->v[i].key == key) return &l->v[i];
  return NULL;
}

void *weft_local_get(weft_key_t key) {
  if (!weft__key_valid(key)) return NULL;
  bool thread;
  struct weft__local *e = find(owner(&thread)->locals, key);
  return e ? e->value : NULL;
}

/* Drop entries that hold nothing (unset, or their key is gone); keeps the order of the rest. */
static void compact(struct weft__locals *l) {
  size_t j = 0;
  for (size_t i = 0; i < l->len; i++)
    if (l->v[i].value && weft__key_valid(l->v[i].key)) l->v[j++] = l->v[i];
  l->len = j;
}

int weft_local_set(weft_key_t key, void *value) {
  if (!weft__key_valid(key)) return -EINVAL;
  bool thread;
  weft__tctx *tc = owner(&thread);
  struct weft__locals *l = tc->locals;
  struct weft__local *e = find(l, key);
  if (e) {
    e->value = value;
    return 0;
  }
  if (!value) return 0; /* unset already: nothing to store */

  if (!l) {
    if (thread && !tls_registered) {
      pthread_once(&exit_once, exit_key_init);
      if (exit_key_rc != 0) return -exit_key_rc;
    }
    l = weft__malloc(sizeof *l + INITIAL_CAP * sizeof l->v[0]);
    if (!l) return -ENOMEM;
    if (thread && !tls_registered) {
      /* The store exists only while the thread's exit destructor is armed. */
      if (pthread_setspecific(exit_key, tc) != 0) {
        weft__free(l);
        return -ENOMEM;
      }
      tls_registered = true;
    }
    l->len = 0;
    l->cap = INITIAL_CAP;
    tc->locals = l;
  } else if (l->len == l->cap) {
    compact(l);
    if (l->len == l->cap) {
      size_t cap = l->cap * 2; /* at most 2 * WEFT_KEYS_MAX entries: no overflow */
      struct weft__locals *n = weft__realloc(l, sizeof *l + cap * sizeof l->v[0]);
      if (!n) return -ENOMEM; /* l is untouched (compact only dropped empty entries) */
      n->cap = cap;
      tc->locals = l = n;
    }
  }
  l->v[l->len].key = key;
  l->v[l->len].value = value;
  l->len++;
  return 0;
}

void weft__locals_release(weft__tctx *tc) {
  for (int round = 0; round < WEFT__LOCAL_ROUNDS && tc->locals; round++) {
    bool ran = false;
    /*
     * Index, not pointer: a destructor may set values, which can move the
     * store (realloc) or compact it; an entry skipped that way is seen by
     * the next round, which the destructor's run guarantees.
     */
    for (size_t i = 0; tc->locals && i < tc->locals->len; i++) {
      struct weft__local *e = &tc->locals->v[i];
      if (!e->value) continue;
      dtor_fn d = key_dtor(e->key);
      if (!d) continue; /* no destructor, or the key was deleted: the value stays the caller's */
      void *v = e->value;
      e->value = NULL;
      d(v);
      ran = true;
    }
    if (!ran) break;
  }
  weft__free(tc->locals);
  tc->locals = NULL;
}
