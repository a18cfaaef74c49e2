/*
 * This file contains the fiber dump (weft_dump): every live fiber, its state,
 * what a parked one waits for and since when, its carrier and what started
 * it; with WEFT_DUMP_STACKS, the backtrace of each parked fiber from the
 * registers it saved when it switched away.
 *
 * It runs while the runtime runs and never stops it for long. A fiber's
 * stack can be read only while nothing runs on it, and only its carrier
 * knows when that is: so the dump asks each carrier (its dump_req) and
 * wakes it, and the carrier, at its next pass through the scheduler loop,
 * between two fibers, writes its own fibers' lines (and the stacks of up to
 * STACKS_PER_CARRIER parked ones) into the request and says it is done. No
 * check is added to a switch; a carrier that does not answer within
 * ANSWER_NS (a fiber holds it: the pinning monitor's case) has its list read
 * by the dump itself under the carrier's reg_lock, which the carrier takes
 * only to link a starting fiber or unlink an ending one, and without stacks.
 * A dump called on a fiber runs on weft's offload pool, so that its carrier
 * is free to answer (and libdw's reading of the modules is not on a fiber
 * stack).
 *
 * Fibers not started yet have no stack or state: they are counted (global
 * queue, spawn queues, open sources). What is read is a snapshot: a fiber
 * that is readied while the dump looks may show as parked.
 */
#include "../base/clock.h"
#include "../base/internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../base/futex.h"
#include "../base/sys.h"
#include "backtrace.h"
#include "fiber.h"
#include "frame.h"
#include "sched.h"

/* Stacks unwound per carrier in one dump (see above): bounds how long a carrier stops. */
#define STACKS_PER_CARRIER 64
#define FRAMES_MAX         48
/* How long a dump waits for a carrier to answer before it reads the carrier's list itself. */
#define ANSWER_NS (200 * 1000000LL)

/* A growing text buffer: on failure, it keeps what it has and marks itself truncated. */
typedef struct out {
  char *buf;
  size_t len, cap;
  bool truncated;
} out;

WEFT__PRINTF(2, 3) static void put(out *o, const char *fmt, ...) {
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    size_t room = o->cap - o->len;
    int n = o->buf ? vsnprintf(o->buf + o->len, room, fmt, ap) : -1;
    va_end(ap);
    if (n >= 0 && (size_t)n < room) {
      o->len += (size_t)n;
      return;
    }
    size_t cap = o->cap ? o->cap * 2 : 64 * 1024;
    if (n > 0 && cap < o->len + (size_t)n + 1) cap = o->len + (size_t)n + 1;
    char *b = weft__realloc(o->buf, cap);
    if (!b) {
      o->truncated = true;
      return;
    }
    o->buf = b;
    o->cap = cap;
  }
}

static void put_duration(out *o, int64_t ns) {
  if (ns < 0) ns = 0;
  if (ns < 1000000)
    put(o, "%lld us", (long long)(ns / 1000));
  else if (ns < 10000000000LL)
    put(o, "%.1f ms", (double)ns / 1e6);
  else
    put(o, "%.1f s", (double)ns / 1e9);
}

static const char *state_name(unsigned s) {
  switch (s) {
  case WEFT__FS_RUNNABLE:
    return "runnable";
  case WEFT__FS_RUNNING:
    return "running";
  case WEFT__FS_PARKED:
    return "parked";
  default:
    return "queued";
  }
}

/* One fiber's line (under its carrier's reg_lock: the record is alive). */
static void put_fiber(out *o, weft__fiber *f, int64_t now) {
  unsigned st = atomic_load_explicit(&f->state, memory_order_relaxed);
  put(o, "  fiber %-8llu %-8s", (unsigned long long)f->id, state_name(st));
  unsigned kind = atomic_load_explicit(&f->wait_kind, memory_order_relaxed);
  if (st == WEFT__FS_PARKED && kind != WEFT__WAIT_NONE && kind < WEFT__WAIT_KINDS) {
    const void *obj = atomic_load_explicit(&f->wait_obj, memory_order_relaxed);
    int64_t deadline = atomic_load_explicit(&f->wait_deadline, memory_order_relaxed);
    int64_t since = atomic_load_explicit(&f->wait_since, memory_order_relaxed);
    put(o, " %s", weft__wait_names[kind]);
    if (kind == WEFT__WAIT_READ || kind == WEFT__WAIT_WRITE)
      put(o, " fd %d", (int)(intptr_t)obj);
    else if (kind == WEFT__WAIT_OFFLOAD)
      put(o, " %p", obj);
    else if (kind != WEFT__WAIT_SLEEP && obj)
      put(o, " %p", obj);
    if (deadline > 0) {
      put(o, ", deadline in ");
      put_duration(o, deadline - now);
    } else if (deadline == 0) {
      put(o, ", try once");
    }
    if (since > 0) {
      put(o, ", for ");
      put_duration(o, now - since);
    }
  }
  const char *what = f->ops && f->ops->what ? f->ops->what : "fiber";
  /* The site is named when the answers are merged (merge: "\x02" address "\x03"), on the dump's thread. */
  if (f->flags & WEFT__FIBER_CLONE)
    put(o, "  [%s %llu, map started at \x02%llx\x03]\n", what, (unsigned long long)atomic_load(&f->tag),
        (unsigned long long)(uintptr_t)f->spawn_site);
  else
    put(o, "  [%s %p, started at \x02%llx\x03]\n", what, f->arg,
        (unsigned long long)(uintptr_t)f->spawn_site);
}

/*
 * A parked fiber's backtrace (on its own carrier, between fibers: the stack
 * is still), as return addresses only: the line gets a marker, "\x01" and
 * the first frame's index into the request's pcs (0-terminated runs), and
 * the dump names the frames when it merges the carriers' answers. Naming
 * stays on one thread: libdw's sessions are not thread-safe.
 */
typedef struct pcs_buf {
  uintptr_t *v;
  size_t len, cap;
} pcs_buf;

static bool pcs_push(pcs_buf *b, uintptr_t pc) {
  if (b->len == b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 1024;
    uintptr_t *v = weft__realloc(b->v, cap * sizeof *v);
    if (!v) return false;
    b->v = v;
    b->cap = cap;
  }
  b->v[b->len++] = pc;
  return true;
}

static void put_stack(out *o, pcs_buf *b, weft__fiber *f) {
  weft__frame fr;
  if (!weft__frame_read(f->sp, &fr)) return;
  uintptr_t pcs[FRAMES_MAX];
  int n = weft__backtrace(&fr, pcs, FRAMES_MAX);
  if (n == 0) {
    put(o, "      (no frames: the unwinder could not start from the saved registers)\n");
    return;
  }
  size_t first = b->len;
  for (int i = 0; i < n; i++)
    if (!pcs_push(b, pcs[i])) return;
  if (!pcs_push(b, 0)) return;
  put(o, "\x01%zu\n", first);
}

/* Copy a carrier's answer into the dump, naming the frames of each marked stack. */
static void merge(out *o, const out *a, const pcs_buf *b, weft__symbols *syms) {
  for (size_t i = 0; i < a->len;) {
    const char *p = a->buf + i, *e = memchr(p, '\n', a->len - i);
    size_t len = e ? (size_t)(e - p) + 1 : a->len - i;
    if (p[0] == '\x01') {
      size_t k = strtoull(p + 1, NULL, 10);
      for (int d = 0; k < b->len && b->v[k]; k++, d++) {
        char name[512];
        weft__symbolize(syms, b->v[k], name, sizeof name);
        put(o, "      #%-2d %s\n", d, name);
      }
    } else {
      /* Copy the line, naming the code address of each "\x02<hex>\x03" (a spawn site: a return address). */
      const char *q = p, *end = p + len;
      while (q < end) {
        const char *m = memchr(q, '\x02', (size_t)(end - q));
        if (!m) {
          put(o, "%.*s", (int)(end - q), q);
          break;
        }
        put(o, "%.*s", (int)(m - q), q);
        char *after;
        uintptr_t pc = (uintptr_t)strtoull(m + 1, &after, 16);
        char name[512];
        weft__symbolize(syms, pc, name, sizeof name);
        put(o, "%s", name);
        q = after < end && *after == '\x03' ? after + 1 : after;
      }
    }
    i += len;
  }
}

static void flush(int fd, out *o) {
  size_t off = 0;
  while (off < o->len) {
    ssize_t w = write(fd, o->buf + off, o->len - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    off += (size_t)w;
  }
  o->len = 0;
}

/* A request of one dump to one carrier. */
typedef struct weft__dump_req {
  _Atomic int state;     /* REQ_* */
  atomic_int refs;       /* the dump's and, once it took the request, the carrier's: the last frees it */
  _Atomic uint32_t done; /* futex word: 1 once the carrier has answered */
  bool stacks;
  int64_t now;
  out o;       /* the carrier's lines */
  pcs_buf pcs; /* its stacks' return addresses */
} weft__dump_req;

enum { REQ_PENDING = 0, REQ_SERVING, REQ_ANSWERED, REQ_ABANDONED };

/* The lines of c's started fibers (the caller holds c's reg_lock, or is c). */
static void list_fibers(weft__carrier *c, out *o, pcs_buf *stacks, int64_t now) {
  int unwound = 0;
  for (weft__fiber *f = c->reg_head; f; f = f->reg_next) {
    put_fiber(o, f, now);
    if (!stacks || atomic_load_explicit(&f->state, memory_order_relaxed) != WEFT__FS_PARKED) continue;
    if (unwound < STACKS_PER_CARRIER)
      put_stack(o, stacks, f);
    else if (unwound == STACKS_PER_CARRIER)
      put(o, "      (this carrier's other stacks are not unwound: gdb's weft-bt reaches any fiber)\n");
    unwound++;
  }
}

static void req_unref(weft__dump_req *r) {
  if (atomic_fetch_sub(&r->refs, 1) != 1) return;
  weft__free(r->o.buf);
  weft__free(r->pcs.v);
  weft__free(r);
}

void weft__dump_serve(weft__carrier *c) {
  /* Taking the request takes a reference: the dump may give up meanwhile, but not free it under us. */
  weft__dump_req *r = atomic_exchange_explicit(&c->dump_req, NULL, memory_order_acquire);
  if (!r) return;
  int expect = REQ_PENDING;
  if (!atomic_compare_exchange_strong(&r->state, &expect, REQ_SERVING)) {
    req_unref(r); /* the dump gave up on us */
    return;
  }
  /* Between fibers on this carrier: nothing runs on their stacks. The lock only orders us with a dump that
   * reads the list itself. */
  weft__lock_acquire(&c->reg_lock);
  list_fibers(c, &r->o, r->stacks ? &r->pcs : NULL, r->now);
  weft__lock_release(&c->reg_lock);
  atomic_store(&r->state, REQ_ANSWERED);
  atomic_store_explicit(&r->done, 1, memory_order_release);
  weft__futex_wake(&r->done, 1);
  req_unref(r);
}

static const char *carrier_doing(weft__carrier *c) {
  if (atomic_load_explicit(&c->status, memory_order_relaxed) != WEFT__C_RUNNING) return "retired";
  if (atomic_load_explicit(&c->slice_seq, memory_order_relaxed) & 1) return "running a fiber";
  return atomic_load_explicit(&c->poller.sleeping, memory_order_relaxed) ? "sleeping" : "scheduling";
}

int weft__fibers_dump(int fd, bool stacks) {
  out o = {NULL, 0, 0, false};
  int64_t now = weft__mono_ns();
  if (!weft__fibers_running()) {
    put(&o, "weft: fiber dump: the fiber runtime is not running\nweft: end of fiber dump\n");
    flush(fd, &o);
    weft__free(o.buf);
    return 0;
  }
  const char *why = NULL;
  weft__symbols *syms = stacks ? weft__symbols_open(&why) : NULL;
  unsigned n = weft__carriers_n();
  weft__dump_req **reqs = weft__calloc(n ? n : 1, sizeof *reqs);
  for (unsigned i = 0; reqs && i < n; i++) {
    reqs[i] = weft__calloc(1, sizeof **reqs);
    if (!reqs[i]) {
      while (i > 0) weft__free(reqs[--i]);
      weft__free(reqs);
      reqs = NULL;
    }
  }
  if (!reqs) {
    weft__symbols_close(syms);
    return -ENOMEM;
  }
  /* Ask every running carrier at once, then collect. */
  for (unsigned i = 0; i < n; i++) {
    weft__carrier *c = weft__carrier_at(i);
    weft__dump_req *r = reqs[i];
    atomic_init(&r->refs, 2);
    r->stacks = syms != NULL;
    r->now = now;
    if (atomic_load_explicit(&c->status, memory_order_relaxed) != WEFT__C_RUNNING) {
      atomic_store(&r->state, REQ_ABANDONED);
      atomic_store(&r->refs, 1);
      continue;
    }
    atomic_store_explicit(&c->dump_req, r, memory_order_release);
    weft__poller_wake(&c->poller);
  }
  put(&o,
      "weft: fiber dump: %u carriers, %llu fibers (started or queued), %zu queued or maps still starting\n",
      n, (unsigned long long)weft__fibers_now(), weft__unstarted_count());
  if (stacks && !syms) put(&o, "weft: no stacks: %s\n", why ? why : "unknown");
  for (unsigned i = 0; i < n; i++) {
    weft__carrier *c = weft__carrier_at(i);
    weft__dump_req *r = reqs[i];
    int64_t give_up = weft__mono_ns() + ANSWER_NS;
    while (atomic_load_explicit(&r->state, memory_order_acquire) == REQ_PENDING ||
           atomic_load_explicit(&r->state, memory_order_acquire) == REQ_SERVING) {
      if (atomic_load_explicit(&r->state, memory_order_acquire) == REQ_PENDING &&
          weft__mono_ns() >= give_up) {
        int expect = REQ_PENDING;
        if (atomic_compare_exchange_strong(&r->state, &expect, REQ_ABANDONED)) break;
      }
      weft__futex_wait(&r->done, 0, weft__mono_ns() + 5000000);
    }
    put(&o, "carrier %u%s: %s\n", c->id, c->extra ? " (extra)" : "", carrier_doing(c));
    if (atomic_load(&r->state) == REQ_ANSWERED) {
      merge(&o, &r->o, &r->pcs, syms);
    } else if (atomic_load_explicit(&c->status, memory_order_relaxed) == WEFT__C_RUNNING) {
      /* It did not answer: a fiber holds it. Take the request back if it is still there (else the carrier
       * holds its reference and drops it when it comes); its list, read under its lock, without stacks. */
      weft__dump_req *mine = r;
      if (atomic_compare_exchange_strong(&c->dump_req, &mine, NULL)) atomic_fetch_sub(&r->refs, 1);
      put(&o, "  (no answer in %lld ms: stacks not unwound)\n", (long long)(ANSWER_NS / 1000000));
      out mine_o = {NULL, 0, 0, false};
      weft__lock_acquire(&c->reg_lock);
      list_fibers(c, &mine_o, NULL, now);
      weft__lock_release(&c->reg_lock);
      merge(&o, &mine_o, &(pcs_buf){NULL, 0, 0}, syms);
      weft__free(mine_o.buf);
    }
    req_unref(r);
    if (o.len > (1u << 20)) flush(fd, &o);
  }
  if (o.truncated) put(&o, "weft: (out of memory: the dump is cut short)\n");
  put(&o, "weft: end of fiber dump\n");
  flush(fd, &o);
  weft__free(o.buf);
  weft__free(reqs);
  weft__symbols_close(syms);
  return 0;
}
