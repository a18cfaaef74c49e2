/*
 * This file contains what weft-bench measures about its own process: the
 * cores it may use (the affinity mask, not the machine's CPU count: under
 * taskset or a container's cpuset that is what weft sizes itself by), its
 * OS threads (/proc/self/task), its peak resident set (VmHWM), its CPU time
 * and minor page faults (getrusage), and the sampler thread that counts the
 * threads in the middle of a run.
 */
/* sched_getaffinity and CPU_COUNT are GNU extensions: Linux first. */
#define _GNU_SOURCE 1
#include "bench.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/*
 * The affinity mask, grown until the kernel's fits (a fixed cpu_set_t stops
 * at 1024 CPUs): the set with *ncpu CPUs' room, or NULL (CPU_FREE it).
 */
static cpu_set_t *affinity(size_t *ncpu) {
  for (size_t n = 1024; n <= (1u << 20); n *= 2) {
    cpu_set_t *set = CPU_ALLOC(n);
    if (!set) return NULL;
    size_t size = CPU_ALLOC_SIZE(n);
    CPU_ZERO_S(size, set);
    if (sched_getaffinity(0, size, set) == 0) {
      *ncpu = n;
      return set;
    }
    int err = errno;
    CPU_FREE(set);
    if (err != EINVAL) break;
  }
  return NULL;
}

unsigned wb_cores(void) {
  size_t ncpu;
  cpu_set_t *set = affinity(&ncpu);
  if (set) {
    int n = CPU_COUNT_S(CPU_ALLOC_SIZE(ncpu), set);
    CPU_FREE(set);
    if (n > 0) return (unsigned)n;
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (unsigned)n : 1;
}

void wb_affinity_list(char *out, size_t len) {
  size_t ncpu;
  cpu_set_t *set = affinity(&ncpu);
  snprintf(out, len, "unknown");
  if (!set) return;
  size_t size = CPU_ALLOC_SIZE(ncpu), used = 0;
  out[0] = '\0';
  for (size_t c = 0; c < ncpu; c++) {
    if (!CPU_ISSET_S(c, size, set)) continue;
    size_t end = c;
    while (end + 1 < ncpu && CPU_ISSET_S(end + 1, size, set)) end++;
    int n = end > c ? snprintf(out + used, len - used, "%s%zu-%zu", used ? "," : "", c, end)
                    : snprintf(out + used, len - used, "%s%zu", used ? "," : "", c);
    if (n < 0 || (size_t)n >= len - used) break; /* a list too long for out ends where it fits */
    used += (size_t)n;
    c = end;
  }
  CPU_FREE(set);
}

int wb_thread_count(void) {
  DIR *d = opendir("/proc/self/task");
  if (!d) return -errno;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

int64_t wb_peak_rss_kb(void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return -errno;
  char line[256];
  int64_t kb = -ENOENT;
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "VmHWM:", 6) == 0) {
      kb = strtoll(line + 6, NULL, 10);
      break;
    }
  }
  fclose(f);
  return kb;
}

wb_usage wb_usage_now(void) {
  wb_usage u = {0, 0, 0};
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0) return u;
  u.user_s = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6;
  u.sys_s = (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
  u.minflt = ru.ru_minflt;
  return u;
}

wb_usage wb_usage_since(wb_usage after, wb_usage before) {
  wb_usage d = {after.user_s - before.user_s, after.sys_s - before.sys_s, after.minflt - before.minflt};
  return d;
}

double wb_usage_cpu_ms(wb_usage u) { return (u.user_s + u.sys_s) * 1e3; }

int64_t wb_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void wb_sleep_ns(int64_t ns) {
  /* An absolute deadline: a signal that interrupts the sleep does not stretch it when it resumes. */
  int64_t until = wb_now_ns() + ns;
  struct timespec ts = {.tv_sec = until / 1000000000, .tv_nsec = until % 1000000000};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
  }
}

/* ------------------------------------------------------------------------ */
/* The sampler                                                               */
/* ------------------------------------------------------------------------ */

struct wb_sampler {
  pthread_t tid;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* on CLOCK_MONOTONIC, so that a clock change does not move the sample */
  bool stop;         /* protected by mu: the run ended before the delay */
  int64_t t0_ns;     /* when the run started (set before the thread) */
  int64_t delay_ns;
  int threads;   /* written by the sampler thread, read after the join */
  int64_t at_ns; /* when the count was taken, from t0 */
};

static void *sampler_main(void *arg) {
  wb_sampler *s = arg;
  int64_t deadline = s->t0_ns + s->delay_ns;
  struct timespec ts = {.tv_sec = deadline / 1000000000, .tv_nsec = deadline % 1000000000};
  pthread_mutex_lock(&s->mu);
  while (!s->stop && wb_now_ns() < deadline) pthread_cond_timedwait(&s->cv, &s->mu, &ts);
  pthread_mutex_unlock(&s->mu);
  int n = wb_thread_count();
  s->at_ns = wb_now_ns() - s->t0_ns;
  /* The sampler itself is one of the entries: it is not part of what is measured. */
  s->threads = n > 0 ? n - 1 : -1;
  return NULL;
}

int wb_sampler_start(wb_sampler **out, int64_t delay_ms) {
  wb_sampler *s = calloc(1, sizeof *s);
  if (!s) return -ENOMEM;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, &ca);
  pthread_condattr_destroy(&ca);
  s->threads = -1;
  s->delay_ns = delay_ms * 1000000;
  s->t0_ns = wb_now_ns();
  /* A small stack: the sampler only reads a directory, and its memory should not show in the peak RSS. */
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 128 * 1024);
  int rc = pthread_create(&s->tid, &attr, sampler_main, s);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
    return -rc;
  }
  *out = s;
  return 0;
}

void wb_sampler_stop(wb_sampler *s, int *threads, double *at_ms) {
  pthread_mutex_lock(&s->mu);
  s->stop = true;
  pthread_cond_signal(&s->cv);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->tid, NULL);
  *threads = s->threads;
  *at_ms = (double)s->at_ns / 1e6;
  pthread_cond_destroy(&s->cv);
  pthread_mutex_destroy(&s->mu);
  free(s);
}
