/*
 * This file contains the stack overflow handler (the interface is in
 * overflow.h).
 *
 * A fiber that runs off its stack faults in the guard below it (stack.c);
 * its own stack has no room for a signal frame, so each carrier has an
 * alternate signal stack (weft__overflow_thread_init) and the SIGSEGV/SIGBUS
 * handler runs there (SA_ONSTACK). It asks the scheduler
 * (weft__fiber_fault_info) whether the fault address, or failing that the
 * interrupted stack pointer, lies in the guard of the fiber running on this
 * thread. If so it writes one line naming the fiber and its stack size, with
 * write(2) and its own number formatting (async-signal-safe), and aborts.
 * Any other fault is the program's business: the handler calls the action
 * that was in place before weft's, as the kernel would have (its mask,
 * SA_SIGINFO, SA_RESETHAND); for SIG_DFL, and for SIG_IGN of a real fault
 * (which would only fault again forever), it restores the default action and
 * returns, so the faulting instruction runs again and the process dies as it
 * would have without weft. A handler the program installs after weft's
 * replaces it, and overflows then look like plain crashes.
 */
#include "overflow.h"

#include "../base/sys.h"
#include "fiber.h"

#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102 /* Linux 6.13; older headers lack it */
#endif
#ifndef MAP_STACK
#define MAP_STACK 0
#endif
#ifndef MAP_NORESERVE
#define MAP_NORESERVE 0
#endif

/* The alternate signal stack: room for our handler (a few hundred bytes) and for the program's chained
 * handler, which may print a backtrace. Lazily committed like fiber stacks: only touched pages cost. */
#define ALT_BYTES ((size_t)256 * 1024)

/* The calling thread's alternate signal stack, when weft installed it. */
typedef struct alt_state {
  char *map;  /* the mapping (guard page + stack), or NULL */
  size_t len; /* its length */
  bool keyed; /* the thread-exit destructor is armed */
} alt_state;

static __thread alt_state alt;

static pthread_once_t alt_once = PTHREAD_ONCE_INIT;
static pthread_key_t alt_key; /* its destructor frees an exiting thread's alternate stack */
static bool alt_key_ok;
static size_t page = 4096;

static void alt_release(alt_state *t);
static void alt_destructor(void *arg) { alt_release(arg); }

static void alt_once_init(void) {
  long p = sysconf(_SC_PAGESIZE);
  if (p > 0) page = (size_t)p;
  alt_key_ok = pthread_key_create(&alt_key, alt_destructor) == 0;
}

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

static pthread_mutex_t install_lock = PTHREAD_MUTEX_INITIALIZER; /* guards installed and the old actions */
static bool installed;
static struct sigaction old_segv; /* the actions before weft's: written once, before the handler can run */
static struct sigaction old_bus;

static size_t put_str(char *buf, size_t n, size_t cap, const char *s) {
  while (*s && n < cap) buf[n++] = *s++;
  return n;
}

static size_t put_u64(char *buf, size_t n, size_t cap, uint64_t v) {
  char digits[20];
  size_t k = 0;
  do {
    digits[k++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  while (k && n < cap) buf[n++] = digits[--k];
  return n;
}

static void write_all(const char *buf, size_t n) {
  while (n) {
    ssize_t w = write(2, buf, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    buf += w;
    n -= (size_t)w;
  }
}

static WEFT__NORETURN void report_overflow(uint64_t id, size_t size) {
  char buf[192];
  size_t n = 0, cap = sizeof buf;
  n = put_str(buf, n, cap, "weft: fiber ");
  n = put_u64(buf, n, cap, id);
  n = put_str(buf, n, cap, " overflowed its stack (");
  n = put_u64(buf, n, cap, size);
  n = put_str(buf, n, cap, " bytes); raise WEFT_STACK_SIZE or use less stack\n");
  write_all(buf, n);
  /* Die of SIGABRT even if the program handles it: its handler would run on a broken fiber. */
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(SIGABRT, &dfl, NULL);
  abort();
}

/* The interrupted context's stack pointer, or NULL where we do not know how to read it. */
static const void *fault_sp(void *uctx) {
  const ucontext_t *uc = uctx;
  if (!uc) return NULL;
#if defined(__x86_64__)
  return (const void *)uc->uc_mcontext.gregs[REG_RSP];
#elif defined(__aarch64__)
  return (const void *)uc->uc_mcontext.sp;
#else
  return NULL;
#endif
}

static void set_default(int sig) {
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, NULL);
}

/* Hand a fault that is not an overflow to the action that was there before weft's. */
static void chain(int sig, siginfo_t *si, void *uctx) {
  const struct sigaction *old = sig == SIGBUS ? &old_bus : &old_segv;
  /* si_code > 0: the kernel raised it for a fault; <= 0: kill(), sigqueue(), tgkill() sent it. */
  bool fault = si == NULL || si->si_code > 0;
  if (!(old->sa_flags & SA_SIGINFO) && old->sa_handler == SIG_IGN && !fault) return;
  if (!(old->sa_flags & SA_SIGINFO) && (old->sa_handler == SIG_DFL || old->sa_handler == SIG_IGN)) {
    /* A fault runs its instruction again on return and now dies of the default action; an ignored
     * fault would fault again for ever, which the kernel would not allow either. A sent signal is
     * raised again: it stays pending (blocked while we run) and kills on return. */
    set_default(sig);
    if (!fault) raise(sig);
    return;
  }
  /* The program's handler, called as the kernel would have called it. */
  sigset_t prev;
  pthread_sigmask(SIG_BLOCK, &old->sa_mask, &prev);
  if (old->sa_flags & SA_RESETHAND) set_default(sig);
  if (old->sa_flags & SA_SIGINFO)
    old->sa_sigaction(sig, si, uctx);
  else
    old->sa_handler(sig);
  pthread_sigmask(SIG_SETMASK, &prev, NULL);
}

static void on_fault(int sig, siginfo_t *si, void *uctx) {
  int saved = errno;
  if (si && si->si_code > 0) {
    uint64_t id = 0;
    size_t size = 0;
    /* The address first; then the stack pointer, for a frame that moved sp into the guard and faulted
     * writing somewhere else. */
    if (weft__fiber_fault_info(si->si_addr, &id, &size)) report_overflow(id, size);
    const void *sp = fault_sp(uctx);
    if (sp && weft__fiber_fault_info(sp, &id, &size)) report_overflow(id, size);
  }
  chain(sig, si, uctx);
  errno = saved;
}

int weft__overflow_install(void) {
  pthread_mutex_lock(&install_lock);
  int r = 0;
  if (!installed) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGSEGV, &sa, &old_segv) != 0) {
      r = -errno;
    } else if (sigaction(SIGBUS, &sa, &old_bus) != 0) {
      r = -errno;
      sigaction(SIGSEGV, &old_segv, NULL);
    } else {
      installed = true;
    }
  }
  pthread_mutex_unlock(&install_lock);
  return r;
}

int weft__overflow_thread_init(void) {
  alt_state *t = &alt;
  if (t->map) return 0;
  pthread_once(&alt_once, alt_once_init);
  stack_t cur;
  /* A thread that has an alternate stack already (the program's, or a sanitizer's) keeps it. */
  if (sigaltstack(NULL, &cur) == 0 && !(cur.ss_flags & SS_DISABLE)) return 0;
  size_t size = ALT_BYTES;
  long min = sysconf(_SC_SIGSTKSZ);
  if (min > 0 && (size_t)min * 4 > size) size = (size_t)min * 4;
  size = round_up(size, page);
  size_t len = page + size;
  char *m = weft__mmap(NULL, len, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (m == MAP_FAILED) return -ENOMEM;
  /* A guard page, best effort: a handler that overflows the alternate stack then faults (and dies) instead
   * of writing over a neighbour. One mapping per carrier is affordable even with mprotect. */
  int saved = errno;
  if (weft__madvise(m, page, MADV_GUARD_INSTALL) != 0) (void)weft__mprotect(m, page, PROT_NONE);
  errno = saved;
  stack_t ss;
  memset(&ss, 0, sizeof ss);
  ss.ss_sp = m + page;
  ss.ss_size = size;
  int err = 0;
  if (weft__fault(WEFT__F_SIGALTSTACK))
    err = ENOMEM;
  else if (sigaltstack(&ss, NULL) != 0)
    err = errno;
  if (err) {
    munmap(m, len);
    return -err;
  }
  t->map = m;
  t->len = len;
  /* So that a thread that exits without fini still frees it. */
  if (!t->keyed && alt_key_ok && pthread_setspecific(alt_key, t) == 0) t->keyed = true;
  return 0;
}

/* Remove the thread's alternate stack if it is still weft's, and free it. */
static void alt_release(alt_state *t) {
  if (!t->map) return;
  stack_t cur;
  if (sigaltstack(NULL, &cur) != 0) return;
  if (!(cur.ss_flags & SS_DISABLE) && cur.ss_sp == (void *)(t->map + page)) {
    if (cur.ss_flags & SS_ONSTACK) return; /* running on it: cannot remove it now */
    stack_t off;
    memset(&off, 0, sizeof off);
    off.ss_flags = SS_DISABLE;
    if (sigaltstack(&off, NULL) != 0) return;
    munmap(t->map, t->len);
  }
  /* Otherwise the program installed another one since, and may have saved ours to restore it later: the
   * mapping stays (address space only; its touched pages are few). */
  t->map = NULL;
  t->len = 0;
}

void weft__overflow_thread_fini(void) { alt_release(&alt); }

#ifdef WEFT_TESTING
void weft__overflow_reset(void) {
  pthread_mutex_lock(&install_lock);
  installed = false;
  pthread_mutex_unlock(&install_lock);
}
#endif
