/*
 * This file contains what weft shows of itself while it runs: the fiber
 * dump (weft_dump; the work is in fiber/dump.c), the counters
 * (weft_get_stats), and the dump on a signal (WEFT_DUMP_SIGNAL).
 *
 * The signal: a handler may only do async-signal-safe things, and a dump
 * takes locks and allocates; so the handler writes one byte to a pipe, and
 * a thread of weft's, started at load time only when WEFT_DUMP_SIGNAL is
 * set, reads it and writes the dump to stderr. The handler keeps errno, and
 * the program goes on. A signal that arrives while a dump is being written
 * asks for one more after it (the pipe keeps the bytes; a burst of signals
 * coalesces into one dump per read).
 */
#include "../base/internal.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../fiber/fiber.h"
#include "../fiber/stack.h"
#include "../io/offload.h"
#include "../poll/uring.h"
#include "../sync/wait.h"
#include "../base/process.h"
#include "../base/settings.h"
#include "../base/sys.h"

/* --- weft_dump ------------------------------------------------------------------- */

typedef struct dump_args {
  int fd;
  bool stacks;
} dump_args;

static void *dump_offloaded(void *arg) {
  dump_args *a = arg;
  return (void *)(intptr_t)weft__fibers_dump(a->fd, a->stacks);
}

int weft_dump(int fd, unsigned flags) {
  if (fd < 0 || (flags & ~WEFT_DUMP_STACKS)) return -EINVAL;
  dump_args a = {fd, (flags & WEFT_DUMP_STACKS) != 0};
  if (weft__fiber_self()) {
    /* On a fiber: its carrier must be free to list its own fibers (fiber/dump.c). */
    void *r = NULL;
    int rc = weft_blocking(dump_offloaded, &a, &r);
    return rc < 0 ? rc : (int)(intptr_t)r;
  }
  return weft__fibers_dump(fd, a.stacks);
}

/* --- weft_get_stats ----------------------------------------------------------------- */

int weft_get_stats(weft_stats *out) {
  if (!out) return -EINVAL;
  memset(out, 0, sizeof *out);
  weft__fiber_stats f;
  weft__fiber_get_stats(&f);
  out->fibers_started = f.spawned;
  out->fibers_finished = f.finished;
  out->fibers_live = f.fibers;
  out->fibers_peak = f.fibers_peak > f.fibers ? f.fibers_peak : f.fibers;
  out->parks = f.parks;
  out->yields = f.yields;
  out->steals = f.steals;
  out->migrations = f.migrations;
  out->carrier_wakeups = f.sleeps;
  out->poller_waits = f.polls;
  out->extra_carriers = f.extra_started;
  weft__stack_stats s;
  weft__stack_get_stats(&s);
  out->stack_cache_hits = s.cache_hits;
  out->stack_cache_misses = s.cache_misses;
  out->stacks_carved = s.fresh;
  out->stacks_trimmed = s.trimmed;
  out->stack_bytes_mapped = (uint64_t)s.mapped * s.stride;
  out->stacks_refused = s.refused;
  weft__offload_stats o;
  weft__offload_get_stats(&o);
  out->offload_calls = o.calls;
  out->offload_threads = o.threads;
  out->uring_submissions = weft__uring_submissions();
  out->uring_waits = weft__uring_ring_waits();
  out->uring_recvs = weft__uring_recvs();
  out->uring_sends = weft__uring_sends();
  out->uring_sends_behind = weft__uring_sends_behind();
  return 0;
}

/* --- the dump on a signal ------------------------------------------------------------- */

static int sig_pipe[2] = {-1, -1};

static void on_dump_signal(int sig) {
  (void)sig;
  int saved = errno;
  char b = 1;
  ssize_t r = write(sig_pipe[1], &b, 1); /* full pipe: a dump is already asked for */
  (void)r;
  errno = saved;
}

static void *dump_thread(void *arg) {
  (void)arg;
  for (;;) {
    char buf[64];
    ssize_t r = read(sig_pipe[0], buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return NULL;
    weft__fibers_dump(2, true);
  }
}

/* "SIGUSR1", "USR1" or "10": the signal number, or 0 when it is not one. */
static int parse_signal(const char *s) {
  if (!s || !*s) return 0;
  char *end;
  long v = strtol(s, &end, 10);
  if (*end == '\0') return v > 0 && v < NSIG ? (int)v : 0;
  if (strncmp(s, "SIG", 3) == 0) s += 3;
  static const struct {
    const char *name;
    int sig;
  } names[] = {{"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"QUIT", SIGQUIT},   {"HUP", SIGHUP},
               {"INT", SIGINT},   {"TERM", SIGTERM}, {"WINCH", SIGWINCH}, {"PWR", SIGPWR}};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strcmp(s, names[i].name) == 0) return names[i].sig;
  return 0;
}

/*
 * At load time, only when WEFT_DUMP_SIGNAL is set (a diagnostic, read from
 * the environment once). Otherwise nothing runs and no thread is made.
 */
__attribute__((constructor)) static void dump_signal_init(void) {
  weft__settings s;
  weft__settings_get(&s);
  const char *env = s.dump_signal;
  if (!env || !*env) return;
  int sig = parse_signal(env);
  if (!sig || sig == SIGKILL || sig == SIGSTOP || sig == SIGSEGV || sig == SIGBUS) {
    weft__warn("WEFT_DUMP_SIGNAL=%s: not a signal weft can use (a name such as SIGUSR1, or a number)", env);
    return;
  }
  if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    weft__warn("WEFT_DUMP_SIGNAL: no pipe (%s); dumps on a signal are off", strerror(errno));
    return;
  }
  /* The reading end blocks: the thread sleeps in read(2). */
  fcntl(sig_pipe[0], F_SETFL, fcntl(sig_pipe[0], F_GETFL) & ~O_NONBLOCK);
  pthread_t t;
  int rc = weft__thread_start(&t, 256 * 1024, "weft-dump", dump_thread, NULL);
  if (rc < 0) {
    weft__warn("WEFT_DUMP_SIGNAL: no thread for the dumps (%s); dumps on a signal are off",
               weft_strerror(rc));
    close(sig_pipe[0]);
    close(sig_pipe[1]);
    return;
  }
  pthread_detach(t);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_dump_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(sig, &sa, NULL);
}
