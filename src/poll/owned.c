/*
 * This file contains the slots of owned descriptors (see owned.h): the
 * table, handles, references and closing, the one registration, and the
 * epoll events' delivery.
 */
#include "owned.h"

#include <poll.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "../base/process.h"
#include "../base/sys.h"
#include "uring.h"

/*
 * The table: chunks of CHUNK slots, found through a fixed array of chunk
 * pointers (so a lookup never takes a lock and a chunk never moves).
 * MAX_CHUNKS * CHUNK = 4M descriptors, beyond any RLIMIT_NOFILE in use.
 */
#define CHUNK      1024u
#define MAX_CHUNKS 4096u
#define NONE       UINT32_MAX

static weft__oslot *_Atomic chunks[MAX_CHUNKS];
static pthread_mutex_t table_mu = PTHREAD_MUTEX_INITIALIZER; /* guards the free list and growth */
static uint32_t free_head = NONE, free_tail = NONE;
static uint32_t nslots; /* slots made so far: under table_mu */
static atomic_uint epoch = 1;

/* A handle: (generation << 32) | (index + 1), so that 0 is none. An event's tag carries 24 bits of the
 * generation. */
#define GEN_MASK_TAG 0xffffffu

static inline uint64_t handle(uint32_t idx, unsigned gen) { return ((uint64_t)gen << 32) | (idx + 1u); }

static weft__oslot *slot_at(uint32_t idx) {
  if (idx / CHUNK >= MAX_CHUNKS) return NULL;
  weft__oslot *c = atomic_load_explicit(&chunks[idx / CHUNK], memory_order_acquire);
  return c ? &c[idx % CHUNK] : NULL;
}

static void odir_reset(weft__odir *d) {
  atomic_store_explicit(&d->empty, false, memory_order_relaxed);
  atomic_store_explicit(&d->empty_at, 0, memory_order_relaxed);
  d->waiter = NULL;
  d->ring = NULL;
  atomic_store_explicit(&d->revents, 0, memory_order_relaxed);
}

/* A fork while another thread holds the table's lock must not leave the child's copy held. */
static void fork_prepare(void) { pthread_mutex_lock(&table_mu); }
static void fork_parent(void) { pthread_mutex_unlock(&table_mu); }
static void fork_child(void) { pthread_mutex_init(&table_mu, NULL); }
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static void fork_register(void) { weft__on_fork(fork_prepare, fork_parent, fork_child); }

weft__oslot *weft__owned_at(uint32_t idx) { return slot_at(idx); }

unsigned weft__owned_epoch(void) { return atomic_load(&epoch); }

int weft__owned_new(int fd, bool socket, bool tcp, bool inq, bool stream, uint64_t *id) {
  pthread_once(&fork_once, fork_register);
  pthread_mutex_lock(&table_mu);
  uint32_t idx = free_head;
  if (idx != NONE) {
    weft__oslot *s = slot_at(idx);
    free_head = s->next_free;
    if (free_head == NONE) free_tail = NONE;
  } else {
    if (nslots % CHUNK == 0) {
      if (nslots / CHUNK >= MAX_CHUNKS) {
        pthread_mutex_unlock(&table_mu);
        return -EMFILE;
      }
      weft__oslot *c = weft__calloc(CHUNK, sizeof *c);
      if (!c) {
        pthread_mutex_unlock(&table_mu);
        return -ENOMEM;
      }
      for (uint32_t i = 0; i < CHUNK; i++) {
        weft__lock_init(&c[i].lock, WEFT__LOCK_OBJECT);
        atomic_init(&c[i].gen, 1);
        atomic_init(&c[i].refs, 0);
        atomic_init(&c[i].reg_epfd, -1);
        atomic_init(&c[i].reg_epoch, 0);
        atomic_init(&c[i].rd.edges, 0);
        atomic_init(&c[i].wr.edges, 0);
        atomic_init(&c[i].rd.empty, false);
        atomic_init(&c[i].wr.empty, false);
        atomic_init(&c[i].rd.empty_at, 0);
        atomic_init(&c[i].wr.empty_at, 0);
        c[i].fd = -1;
        c[i].idx = nslots + i;
      }
      atomic_store_explicit(&chunks[nslots / CHUNK], c, memory_order_release);
    }
    idx = nslots++;
  }
  pthread_mutex_unlock(&table_mu);
  weft__oslot *s = slot_at(idx);
  /* Under the lock: a carrier may be delivering a late event of the slot's earlier descriptor. */
  weft__lock_acquire(&s->lock);
  s->fd = fd;
  s->socket = socket;
  s->tcp = tcp;
  s->inq = inq;
  s->stream = stream;
  weft__uring_rx_reset(s);
  weft__lend *l = atomic_load_explicit(&s->lend, memory_order_acquire);
  if (l) {
    l->head = l->len = 0;
    l->ring_at = NULL;
    l->ring_len = 0;
    l->lent = 0;
    l->lent_ring = false;
  }
  atomic_store(&s->wb, NULL);
  atomic_store(&s->wb_err, 0);
  s->wb_waiter = NULL;
  atomic_store(&s->rd_odd, false);
  atomic_store(&s->reg_epfd, -1);
  atomic_store(&s->reg_rd, false);
  odir_reset(&s->rd);
  odir_reset(&s->wr);
  weft__lock_release(&s->lock);
  /* The handle is published to the caller after these stores; other threads learn it from the caller. */
  *id = handle(idx, atomic_load(&s->gen));
  return 0;
}

weft__oslot *weft__owned_acquire(uint64_t id) {
  uint32_t low = (uint32_t)id;
  if (low == 0) return NULL;
  weft__oslot *s = slot_at(low - 1);
  if (!s) return NULL;
  /*
   * Count ourselves in first, then check: the freeing side bumps the
   * generation before it clears its bits (owned_final), so a reference taken
   * after the slot was freed sees the new generation, and one taken before
   * the last reference went keeps the slot from being freed.
   */
  uint64_t v = atomic_fetch_add(&s->refs, 1);
  if ((v & (WEFT__OREF_CLOSING | WEFT__OREF_FINAL)) || atomic_load(&s->gen) != (unsigned)(id >> 32)) {
    weft__owned_release(s);
    return NULL;
  }
  return s;
}

/* The last reference of a closing slot: unregister, close, free. */
static void owned_final(weft__oslot *s) {
  int ep = atomic_load(&s->reg_epfd);
  int fd = s->fd;
  /* Stale events and handles stop here: both carry the old generation (under the lock: see event). */
  weft__lock_acquire(&s->lock);
  atomic_fetch_add(&s->gen, 1);
  weft__lock_release(&s->lock);
  /*
   * Remove the registration before the close: a descriptor that another
   * process or a dup() still holds open would otherwise stay in the epoll
   * set and keep reporting edges for a slot that has moved on.
   */
  if (ep >= 0 && atomic_load(&s->reg_epoch) == atomic_load(&epoch))
    weft__epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
  /* A multishot receive in a ring holds the socket open: end it, or the peer never sees the close. */
  weft__uring_rx_final(s);
  /* A ring buffer that a lend's caller left bytes in (io/fd.c) goes back to its ring. */
  weft__uring_rx_lend_done(s);
  /* A write that went behind names the descriptor by number until its ring has submitted it: that ring's
   * carrier may take the close over. On Linux the descriptor is gone even when close reports EINTR or EIO:
   * nothing to retry. */
  if (!weft__uring_wb_final(s)) close(fd);
  s->fd = -1;
  atomic_store(&s->reg_epfd, -1);
  /* Clear the two bits, keeping any reference taken meanwhile by a stale handle (it leaves at once). */
  atomic_fetch_and(&s->refs, ~(WEFT__OREF_CLOSING | WEFT__OREF_FINAL));
  uint32_t idx = s->idx;
  /* To the back of the free list: a slot is reused as late as possible. */
  pthread_mutex_lock(&table_mu);
  s->next_free = NONE;
  if (free_tail == NONE)
    free_head = idx;
  else
    slot_at(free_tail)->next_free = idx;
  free_tail = idx;
  pthread_mutex_unlock(&table_mu);
}

void weft__owned_release(weft__oslot *s) {
  uint64_t v = atomic_fetch_sub(&s->refs, 1) - 1;
  if (v != WEFT__OREF_CLOSING) return;
  /* Closing and nobody inside: whoever sets FINAL frees the slot. */
  uint64_t want = WEFT__OREF_CLOSING;
  if (atomic_compare_exchange_strong(&s->refs, &want, WEFT__OREF_CLOSING | WEFT__OREF_FINAL)) owned_final(s);
}

static int wake_dir(weft__odir *d) {
  weft__waiter *w = d->waiter;
  if (!w) return 0;
  d->waiter = NULL;
  return weft__waiter_wake(w) ? 1 : 0;
}

int weft__owned_edge(weft__odir *d) {
  atomic_fetch_add(&d->edges, 1);
  return wake_dir(d);
}

int weft__owned_close(uint64_t id) {
  weft__oslot *s = weft__owned_acquire(id);
  if (!s) return -EBADF;
  uint64_t v = atomic_fetch_or(&s->refs, WEFT__OREF_CLOSING);
  if (v & WEFT__OREF_CLOSING) { /* another close got there first */
    weft__owned_release(s);
    return -EBADF;
  }
  /* Waiters see CLOSING when they wake (and one about to park sees it under the lock). */
  weft__lock_acquire(&s->lock);
  wake_dir(&s->rd);
  wake_dir(&s->wr);
  /* A receive or a send in a ring: its fiber takes the request back, then leaves (and lets go of the
   * slot). */
  if (s->rd.ring) {
    weft__waiter_wake(s->rd.ring);
    s->rd.ring = NULL;
  }
  if (s->wr.ring) {
    weft__waiter_wake(s->wr.ring);
    s->wr.ring = NULL;
  }
  if (s->wb_waiter) { /* a writer waiting for a write that went behind */
    weft__waiter_wake(s->wb_waiter);
    s->wb_waiter = NULL;
  }
  weft__lock_release(&s->lock);
  weft__owned_release(s); /* the last one out closes the descriptor */
  return 0;
}

/* The events of a registration; `rd`: the read side too. */
static struct epoll_event reg_event(weft__oslot *s, bool rd) {
  struct epoll_event e = {
      .events = EPOLLOUT | EPOLLET | (rd ? EPOLLIN | EPOLLRDHUP | EPOLLPRI : 0),
      .data.u64 = ((uint64_t)WEFT__TAG_OWNED << 56) |
                  ((uint64_t)(atomic_load(&s->gen) & GEN_MASK_TAG) << 32) | s->idx,
  };
  return e;
}

int weft__owned_register(weft__oslot *s, weft__poller *p, bool read) {
  unsigned now = atomic_load(&epoch);
  /*
   * Where the carriers read sockets through their rings, a socket's reads
   * need no edges: it is registered for writing only until a wait for
   * reading (a thread-less fallback, weft_fd_poll, accept) asks for more, so
   * that arriving data does not wake the epoll for nothing.
   */
  bool rd = read || !s->socket || !weft__uring_reads(p);
  for (;;) {
    int ep = atomic_load(&s->reg_epfd);
    if (ep >= 0 && atomic_load(&s->reg_epoch) == now && (!rd || atomic_load(&s->reg_rd))) return 0;
    if (ep == -2) { /* another caller is registering it right now: it takes a system call */
      sched_yield();
      continue;
    }
    if (!atomic_compare_exchange_strong(&s->reg_epfd, &ep, -2)) continue;
    if (ep >= 0 && atomic_load(&s->reg_epoch) == now) {
      /* Registered for writing: add the read side (a modification reports what is ready now, so no edge is
       * lost). */
      struct epoll_event e = reg_event(s, true);
      int rc = weft__epoll_ctl(ep, EPOLL_CTL_MOD, s->fd, &e);
      if (rc == 0) atomic_store(&s->reg_rd, true);
      atomic_store(&s->reg_epfd, ep);
      return rc;
    }
    struct epoll_event e = reg_event(s, rd);
    int rc = weft__epoll_ctl(p->epfd, EPOLL_CTL_ADD, s->fd, &e);
    /* Registered with an earlier runtime's epoll number that is now ours again: take it over. */
    if (rc == -EEXIST) rc = weft__epoll_ctl(p->epfd, EPOLL_CTL_MOD, s->fd, &e);
    if (rc < 0) {
      atomic_store(&s->reg_epfd, -1);
      return rc;
    }
    atomic_store(&s->reg_rd, rd);
    atomic_store(&s->reg_poller, p);
    atomic_store(&s->reg_epoch, now);
    atomic_store(&s->reg_epfd, p->epfd);
    return 0;
  }
}

int weft__owned_wait(weft__oslot *s, bool write, unsigned seen, int64_t deadline_ns) {
  weft__odir *d = write ? &s->wr : &s->rd;
  weft__waiter w;
  weft__waiter_init(&w, true);
  weft__waiter_on(&w, write ? WEFT__WAIT_WRITE : WEFT__WAIT_READ, (const void *)(intptr_t)s->fd);
  weft__lock_acquire(&s->lock);
  if (weft__owned_closing(s)) {
    weft__lock_release(&s->lock);
    return -EBADF;
  }
  if (atomic_load(&d->edges) != seen) { /* an edge came after the caller looked: try again */
    weft__lock_release(&s->lock);
    return 0;
  }
  if (d->waiter || d->ring) { /* one fiber per direction, whichever way it waits */
    weft__lock_release(&s->lock);
    return -EBUSY;
  }
  d->waiter = &w;
  weft__lock_release(&s->lock);
  /* Counted where the edges arrive, so that a busy carrier there still looks at its epoll now and then. */
  weft__poller *p = atomic_load(&s->reg_poller);
  atomic_fetch_add_explicit(&p->owned_waiting, 1, memory_order_relaxed);
  uint32_t st = weft__waiter_wait(&w, deadline_ns);
  atomic_fetch_sub_explicit(&p->owned_waiting, 1, memory_order_relaxed);
  return weft__owned_wait_end(s, &d->waiter, &w, st);
}

int weft__owned_wait_end(weft__oslot *s, weft__waiter **at, weft__waiter *w, uint32_t st) {
  if (st != WEFT__W_WOKEN) {
    /* Timed out or cancelled: take the waiter back unless a waker or a close took it already. */
    weft__lock_acquire(&s->lock);
    if (*at == w) *at = NULL;
    weft__lock_release(&s->lock);
  }
  if (weft__owned_closing(s)) return -EBADF;
  return st == WEFT__W_WOKEN ? 0 : weft__waiter_errno(st);
}

int weft__owned_event(uint64_t tag, uint32_t ev) {
  weft__oslot *s = slot_at((uint32_t)tag);
  if (!s) return 0;
  /* An event of a slot's earlier descriptor (closed since): nothing to do with its new one. */
  if ((atomic_load(&s->gen) & GEN_MASK_TAG) != ((tag >> 32) & GEN_MASK_TAG)) return 0;
  bool rd = ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR | EPOLLPRI);
  bool wr = ev & (EPOLLOUT | EPOLLHUP | EPOLLERR);
  uint32_t re = (ev & EPOLLIN ? POLLIN : 0) | (ev & EPOLLOUT ? POLLOUT : 0) | (ev & EPOLLERR ? POLLERR : 0) |
                (ev & EPOLLHUP ? POLLHUP : 0) | (ev & EPOLLRDHUP ? POLLRDHUP : 0) |
                (ev & EPOLLPRI ? POLLPRI : 0);
  int woken = 0;
  weft__lock_acquire(&s->lock);
  /* Checked again under the lock: a close and a reuse may have come in between. */
  if ((atomic_load(&s->gen) & GEN_MASK_TAG) == ((tag >> 32) & GEN_MASK_TAG)) {
    if (ev & (EPOLLPRI | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) atomic_store(&s->rd_odd, true);
    if (rd) {
      atomic_store_explicit(&s->rd.revents, re, memory_order_relaxed);
      woken += weft__owned_edge(&s->rd);
    }
    if (wr) {
      atomic_store_explicit(&s->wr.revents, re, memory_order_relaxed);
      woken += weft__owned_edge(&s->wr);
    }
  }
  weft__lock_release(&s->lock);
  return woken;
}

void weft__owned_new_epoch(void) { atomic_fetch_add(&epoch, 1); }
