/*
 * This file contains weft's threads and the process's life (process.h):
 * starting a thread of weft's own, the fork hooks and the exit hooks.
 */
#include "process.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "sys.h"

/* --- fork ------------------------------------------------------------------------ */

static struct {
  pthread_mutex_t mu; /* registration; never held across a fork (prepare takes it, child re-inits) */
  atomic_uint n;      /* hooks published (release after the slot is written) */
  void (*prepare[WEFT__FORK_HOOKS])(void);
  void (*parent[WEFT__FORK_HOOKS])(void);
  void (*child[WEFT__FORK_HOOKS])(void);
} fork_hooks = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void fork_prepare(void) {
  pthread_mutex_lock(&fork_hooks.mu);
  for (unsigned i = atomic_load_explicit(&fork_hooks.n, memory_order_acquire); i-- > 0;)
    if (fork_hooks.prepare[i]) fork_hooks.prepare[i]();
}

static void fork_parent(void) {
  unsigned n = atomic_load_explicit(&fork_hooks.n, memory_order_acquire);
  for (unsigned i = 0; i < n; i++)
    if (fork_hooks.parent[i]) fork_hooks.parent[i]();
  pthread_mutex_unlock(&fork_hooks.mu);
}

static void fork_child(void) {
  pthread_mutex_init(&fork_hooks.mu, NULL);
  unsigned n = atomic_load_explicit(&fork_hooks.n, memory_order_acquire);
  for (unsigned i = 0; i < n; i++)
    if (fork_hooks.child[i]) fork_hooks.child[i]();
}

static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static void fork_register(void) { pthread_atfork(fork_prepare, fork_parent, fork_child); }

void weft__on_fork(void (*prepare)(void), void (*parent)(void), void (*child)(void)) {
  pthread_once(&fork_once, fork_register);
  pthread_mutex_lock(&fork_hooks.mu);
  unsigned n = atomic_load_explicit(&fork_hooks.n, memory_order_relaxed);
  if (n == WEFT__FORK_HOOKS) weft__die("internal: more than %d fork hooks", WEFT__FORK_HOOKS);
  fork_hooks.prepare[n] = prepare;
  fork_hooks.parent[n] = parent;
  fork_hooks.child[n] = child;
  atomic_store_explicit(&fork_hooks.n, n + 1, memory_order_release);
  pthread_mutex_unlock(&fork_hooks.mu);
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
  int64_t deadline = weft__mono_ns() + EXIT_WAIT_NS;
  for (unsigned i = 0; i < n; i++) exit_hooks.begin[i]();
  for (unsigned i = 0; i < n; i++) exit_hooks.wait[i](deadline);
}

/* weft's threads running now, for the tests' leak checks (names are inherited, so they cannot tell). */
static atomic_int live_threads;

int weft__threads_alive(void) { return atomic_load(&live_threads); }

static void threads_atfork_child(void) {
  atomic_store(&live_threads, 0);
  pthread_mutex_init(&exit_hooks.mu, NULL);
}

static pthread_once_t threads_once = PTHREAD_ONCE_INIT;
static void threads_register(void) { weft__on_fork(NULL, NULL, threads_atfork_child); }

typedef struct thread_start {
  void *(*fn)(void *);
  void *arg;
  char name[16]; /* the kernel keeps 15 characters; "" for none */
} thread_start;

static void *thread_trampoline(void *p) {
  thread_start ts = *(thread_start *)p;
  weft__free(p);
  /*
   * Named by itself (prctl, no descriptor): glibc 2.36 names another thread
   * by opening its /proc comm file without O_CLOEXEC, which a fork + exec in
   * another thread at that moment would leak into the new program.
   */
  if (ts.name[0]) pthread_setname_np(pthread_self(), ts.name);
  void *r = ts.fn(ts.arg);
  atomic_fetch_sub(&live_threads, 1);
  return r;
}

int weft__thread_start(pthread_t *t, size_t stack_size, const char *name, void *(*fn)(void *), void *arg) {
  return weft__thread_start_on(t, stack_size, -1, name, fn, arg);
}

int weft__thread_start_on(pthread_t *t, size_t stack_size, int cpu, const char *name, void *(*fn)(void *),
                          void *arg) {
  pthread_once(&threads_once, threads_register);
  thread_start *ts = weft__malloc(sizeof *ts);
  if (!ts) return -ENOMEM;
  ts->fn = fn;
  ts->arg = arg;
  snprintf(ts->name, sizeof ts->name, "%s", name ? name : "");
  pthread_attr_t attr;
  int rc = pthread_attr_init(&attr);
  if (rc != 0) {
    weft__free(ts);
    return -rc;
  }
  if (cpu >= 0 && cpu < CPU_SETSIZE) {
    /* Placed from its first instruction: the pages it touches first are its CPU's node's. */
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    rc = pthread_attr_setaffinity_np(&attr, sizeof set, &set);
    if (rc != 0) cpu = -2; /* started unplaced, and said so */
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
  if (rc == EINVAL && cpu >= 0) {
    /* The CPU is not one this process may use (glibc fails the create): start it unplaced. */
    pthread_attr_destroy(&attr);
    pthread_attr_init(&attr);
    if (stack_size) pthread_attr_setstacksize(&attr, stack_size);
    rc = weft__pthread_create(t, &attr, thread_trampoline, ts);
    cpu = -2;
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    atomic_fetch_sub(&live_threads, 1);
    weft__free(ts);
    return -rc;
  }
  return cpu == -2 ? 1 : 0;
}

ssize_t weft__read_small(const char *path, char *buf, size_t cap) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, cap - 1);
  close(fd);
  if (n < 0) return -1;
  buf[n] = '\0';
  return n;
}

size_t weft__as_room(size_t *limit) {
  struct rlimit rl;
  if (limit) *limit = SIZE_MAX;
  if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return SIZE_MAX;
  if (limit) *limit = rl.rlim_cur < SIZE_MAX ? (size_t)rl.rlim_cur : SIZE_MAX;
  char buf[4096];
  if (weft__read_small("/proc/self/status", buf, sizeof buf) <= 0) return SIZE_MAX;
  const char *v = strstr(buf, "VmSize:");
  uint64_t used = v ? (uint64_t)strtoull(v + 7, NULL, 10) * 1024 : 0, lim = rl.rlim_cur;
  return used < lim ? (size_t)(lim - used) : 0;
}

static bool read_u64(const char *dir, const char *file, uint64_t *out) {
  char path[512], buf[64];
  if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, file) >= sizeof path) return false;
  if (weft__read_small(path, buf, sizeof buf) <= 0 || buf[0] < '0' || buf[0] > '9')
    return false; /* "max": no limit */
  *out = strtoull(buf, NULL, 10);
  return true;
}

bool weft__mem_limit(uint64_t *limit, uint64_t *usage) {
  char cg[2048];
  if (weft__read_small("/proc/self/cgroup", cg, sizeof cg) <= 0) return false;
  /* v1: "N:memory:/path" (memory may share its line with other controllers); v2: "0::/path". */
  for (char *line = cg, *next; line && *line; line = next) {
    next = strchr(line, '\n');
    if (next) *next++ = '\0';
    char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c2) continue;
    *c2 = '\0';
    const char *ctrls = c1 + 1, *path = c2 + 1;
    char dir[1024];
    bool v2 = *ctrls == '\0';
    if (!v2) {
      bool mem = false;
      for (const char *p = ctrls; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        mem |= strncmp(p, "memory", 6) == 0 && (p[6] == ',' || p[6] == '\0');
      if (!mem) continue;
      if ((size_t)snprintf(dir, sizeof dir, "/sys/fs/cgroup/memory%s", path) >= sizeof dir) continue;
      if (read_u64(dir, "memory.limit_in_bytes", limit) && *limit < ((uint64_t)1 << 62) &&
          read_u64(dir, "memory.usage_in_bytes", usage))
        return true;
    } else {
      if ((size_t)snprintf(dir, sizeof dir, "/sys/fs/cgroup%s", path) >= sizeof dir) continue;
      if (read_u64(dir, "memory.max", limit) && read_u64(dir, "memory.current", usage)) return true;
    }
  }
  return false;
}
