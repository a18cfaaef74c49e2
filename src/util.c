/*
 * This file contains small services that the rest of weft shares: the fatal
 * error path, warnings, the CPU count, environment parsing, and starting
 * weft's own threads.
 */
#include "internal.h"
#include "sys.h"

#include <ctype.h>
#include <dlfcn.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void vwrite_line(const char *fmt, va_list ap) {
  char buf[512];
  int n = snprintf(buf, sizeof buf, "weft: ");
  int m = vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
  size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
  if (len > sizeof buf - 2) len = sizeof buf - 2;
  buf[len++] = '\n';
  /* One write, so that lines from several threads do not interleave. */
  ssize_t w = write(STDERR_FILENO, buf, len);
  WEFT__UNUSED(w);
}

void weft__die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vwrite_line(fmt, ap);
  va_end(ap);
  abort();
}

void weft__warn(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vwrite_line(fmt, ap);
  va_end(ap);
}

void weft__describe_site(const void *pc, char *buf, size_t cap) {
  Dl_info info;
  if (pc && dladdr(pc, &info) && info.dli_fname) {
    const char *lib = strrchr(info.dli_fname, '/');
    lib = lib ? lib + 1 : info.dli_fname;
    if (info.dli_sname)
      snprintf(buf, cap, "%s+0x%zx (%s)", info.dli_sname,
               (size_t)((const char *)pc - (const char *)info.dli_saddr), lib);
    else
      snprintf(buf, cap, "%p (%s)", pc, lib);
  } else {
    snprintf(buf, cap, "%p", pc);
  }
}

unsigned weft__cpu_count(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return (unsigned)n;
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (unsigned)n : 1u;
}

bool weft__env_size(const char *name, size_t *out) {
  const char *s = getenv(name);
  if (!s || !*s) return false;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno != 0 || end == s || s[0] == '-') return false;
  unsigned shift = 0;
  switch (tolower((unsigned char)*end)) {
  case 'k':
    shift = 10;
    end++;
    break;
  case 'm':
    shift = 20;
    end++;
    break;
  case 'g':
    shift = 30;
    end++;
    break;
  default:
    break;
  }
  if (*end == 'b' || *end == 'B') end++;
  if (*end != '\0') return false;
  if (shift && v > (SIZE_MAX >> shift)) return false;
  *out = (size_t)(v << shift);
  return true;
}

int weft__env_bool(const char *name) {
  const char *s = getenv(name);
  if (!s || !*s) return -1;
  static const char *const yes[] = {"1", "on", "true", "yes"};
  static const char *const no[] = {"0", "off", "false", "no"};
  for (size_t i = 0; i < 4; i++) {
    if (strcasecmp(s, yes[i]) == 0) return 1;
    if (strcasecmp(s, no[i]) == 0) return 0;
  }
  return -1;
}

/* --- the end of the process --------------------------------------------------- */

/* How long the destructor waits, in all, for weft's threads to be still. */
#define EXIT_WAIT_NS (1000 * 1000000LL)

static struct {
  pthread_mutex_t mu;
  unsigned n;
  void (*begin[WEFT__EXIT_HOOKS])(void);
  void (*wait[WEFT__EXIT_HOOKS])(int64_t deadline);
} exit_hooks = {.mu = PTHREAD_MUTEX_INITIALIZER};

void weft__on_exit(void (*begin)(void), void (*wait)(int64_t deadline)) {
  pthread_mutex_lock(&exit_hooks.mu);
  if (exit_hooks.n == WEFT__EXIT_HOOKS) weft__die("internal: more than %d exit hooks", WEFT__EXIT_HOOKS);
  exit_hooks.begin[exit_hooks.n] = begin;
  exit_hooks.wait[exit_hooks.n] = wait;
  exit_hooks.n++;
  pthread_mutex_unlock(&exit_hooks.mu);
}

/*
 * A destructor, not an atexit handler: it runs after every atexit handler of
 * the program, and a library's destructors run before those of the libraries
 * it depends on (the OpenMP runtime's), as the executable's run before all.
 */
__attribute__((destructor)) static void weft_at_exit(void) {
  pthread_mutex_lock(&exit_hooks.mu);
  unsigned n = exit_hooks.n;
  pthread_mutex_unlock(&exit_hooks.mu);
  if (n == 0) return;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  int64_t deadline = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec + EXIT_WAIT_NS;
  for (unsigned i = 0; i < n; i++) exit_hooks.begin[i]();
  for (unsigned i = 0; i < n; i++) exit_hooks.wait[i](deadline);
}

/* weft's threads running now, for the tests' leak checks (names are inherited, so they cannot tell). */
static atomic_int live_threads;

int weft__threads_alive(void) { return atomic_load(&live_threads); }

void weft__threads_atfork_child(void) {
  atomic_store(&live_threads, 0);
  pthread_mutex_init(&exit_hooks.mu, NULL);
}

typedef struct thread_start {
  void *(*fn)(void *);
  void *arg;
} thread_start;

static void *thread_trampoline(void *p) {
  thread_start ts = *(thread_start *)p;
  weft__free(p);
  void *r = ts.fn(ts.arg);
  atomic_fetch_sub(&live_threads, 1);
  return r;
}

int weft__thread_start(pthread_t *t, size_t stack_size, const char *name, void *(*fn)(void *), void *arg) {
  thread_start *ts = weft__malloc(sizeof *ts);
  if (!ts) return -ENOMEM;
  ts->fn = fn;
  ts->arg = arg;
  pthread_attr_t attr;
  int rc = pthread_attr_init(&attr);
  if (rc != 0) {
    weft__free(ts);
    return -rc;
  }
  if (stack_size) {
    rc = pthread_attr_setstacksize(&attr, stack_size);
    if (rc != 0) {
      pthread_attr_destroy(&attr);
      weft__free(ts);
      return -rc;
    }
  }
  /*
   * The new thread inherits this mask: block every asynchronous signal, so
   * that the program's handlers run on its own threads. Faults stay
   * unblocked: the kernel kills a thread that faults with them blocked,
   * without running the stack-overflow handler.
   */
  sigset_t all, old;
  sigfillset(&all);
  static const int sync_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS};
  for (size_t i = 0; i < sizeof sync_signals / sizeof sync_signals[0]; i++) sigdelset(&all, sync_signals[i]);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  atomic_fetch_add(&live_threads, 1);
  rc = weft__pthread_create(t, &attr, thread_trampoline, ts);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    atomic_fetch_sub(&live_threads, 1);
    weft__free(ts);
    return -rc;
  }
  if (name) {
    char n16[16]; /* the kernel keeps 15 characters */
    snprintf(n16, sizeof n16, "%s", name);
    pthread_setname_np(*t, n16);
  }
  return 0;
}
