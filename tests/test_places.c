/*
 * Suite "places": carrier placement (WEFT_PLACES, weft_config.places). Bad
 * specs are refused by weft_configure and change nothing; weft_get_info
 * reports the placement; under "cores" each carrier's affinity mask is one
 * CPU, a different one per carrier; under a list, the listed CPUs in order
 * (wrapping); in a process restricted to one CPU (as `taskset -c 1` does),
 * every carrier stays on it, with or without "cores"; fibers run on their
 * carrier's CPU; a bad WEFT_PLACES is named in a warning and leaves the
 * carriers free. Carriers are found by name (weft-carrier-N) in /proc.
 */
#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>

#include "harness.h"

/* The configuration every test leaves behind: all defaults. */
static void configure_defaults(void) {
  weft_shutdown();
  weft_config c;
  weft_config_init(&c);
  CU_ASSERT_EQUAL(weft_configure(&c), 0);
}

static int configure_places(const char *places, unsigned carriers) {
  weft_config c;
  weft_config_init(&c);
  c.places = places;
  c.carriers = carriers;
  return weft_configure(&c);
}

static void info_places(char *buf, size_t cap) {
  weft_info info;
  CU_ASSERT_EQUAL(weft_get_info(&info), 0);
  snprintf(buf, cap, "%s", info.places);
}

typedef struct carriers {
  int n;
  int id[64];         /* N of weft-carrier-N */
  cpu_set_t mask[64]; /* its affinity */
} carriers;

/* Every running regular carrier (not the compensation ones) and its affinity mask, once named. */
static void find_carriers_now(carriers *out);
static void find_carriers(carriers *out) {
  /* A thread names itself as it starts: wait (at most 5 s) until every carrier has. */
  for (int i = 0; i < 1000; i++) {
    find_carriers_now(out);
    if (out->n >= (int)weft_carrier_count()) return;
    weft_test_sleep_ms(5);
  }
}

static void find_carriers_now(carriers *out) {
  out->n = 0;
  DIR *d = opendir("/proc/self/task");
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL && out->n < 64) {
    if (e->d_name[0] == '.') continue;
    char path[300], comm[32] = {0};
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    if (!fgets(comm, sizeof comm, f)) comm[0] = '\0';
    fclose(f);
    int id;
    if (sscanf(comm, "weft-carrier-%d", &id) != 1) continue;
    CPU_ZERO(&out->mask[out->n]);
    if (sched_getaffinity((pid_t)atoi(e->d_name), sizeof(cpu_set_t), &out->mask[out->n]) != 0) continue;
    out->id[out->n++] = id;
  }
  closedir(d);
}

/* The CPUs of the calling thread's mask, in order. */
static int mask_cpus(int *cpu, int cap) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
  int n = 0;
  for (int c = 0; c < CPU_SETSIZE && n < cap; c++)
    if (CPU_ISSET(c, &set)) cpu[n++] = c;
  return n;
}

static bool only_cpu(const cpu_set_t *s, int cpu) { return CPU_COUNT(s) == 1 && CPU_ISSET(cpu, s); }

static bool can_look(void) {
  if (!weft_test_fibers_expected()) return false;
  if (weft_test_qemu()) {
    printf("\n    skipped: qemu-user's /proc and affinity calls are the host's");
    return false;
  }
  return true;
}

/* --- specs --------------------------------------------------------------------------- */

static void test_bad_specs(void) {
  static const char *const bad[] = {"x",  "cores,1", "core",   "1-", "-1", "3-1", "1,,2", "1,",
                                    ",1", "1024",    "0-2000", " 1", "1 ", "1;2", "0x1",  "1-2-3"};
  char was[256], now[256];
  CU_ASSERT_EQUAL(configure_places("0", 0), 0);
  info_places(was, sizeof was);
  CU_ASSERT_STRING_EQUAL(was, "0");
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int rc = configure_places(bad[i], 0);
    CU_ASSERT_EQUAL(rc, -EINVAL);
    if (rc != -EINVAL) printf("\n  places \"%s\": %d, want -EINVAL", bad[i], rc);
  }
  char longer[400];
  memset(longer, 0, sizeof longer);
  for (size_t at = 0; at + 3 < sizeof longer - 1; at += 2) memcpy(longer + at, "1,", 2);
  longer[strlen(longer) - 1] = '\0';
  CU_ASSERT_EQUAL(configure_places(longer, 0), -EINVAL); /* over the 255 characters weft keeps */
  info_places(now, sizeof now);
  CU_ASSERT_STRING_EQUAL(now, was); /* nothing changed */
  configure_defaults();
}

static void test_info(void) {
  static const struct {
    const char *spec, *shown;
  } cases[] = {{NULL, "free"}, {"", "free"},       {"cores", "cores"}, {"0,2,4-7", "0,2,4-7"}, {"3,1", "3,1"},
               {"5-5", "5"},   {"0,1,2,3", "0-3"}, {"1023", "1023"},   {"7,0-2,9", "7,0-2,9"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    CU_ASSERT_EQUAL(configure_places(cases[i].spec, 0), 0);
    char got[256];
    info_places(got, sizeof got);
    CU_ASSERT_STRING_EQUAL(got, cases[i].shown);
  }
  configure_defaults();
}

/* --- placement --------------------------------------------------------------------------- */

static void test_cores(void) {
  if (!can_look()) return;
  int cpu[256];
  int ncpu = mask_cpus(cpu, 256);
  CU_ASSERT_EQUAL_FATAL(configure_places("cores", 0), 0);
  CU_ASSERT_TRUE_FATAL(weft_fibers_available());
  carriers c;
  find_carriers(&c);
  CU_ASSERT_EQUAL(c.n, (int)weft_carrier_count());
  CU_ASSERT(c.n >= 1);
  for (int i = 0; i < c.n; i++) {
    int want = cpu[c.id[i] % ncpu];
    CU_ASSERT_TRUE(only_cpu(&c.mask[i], want));
    if (!only_cpu(&c.mask[i], want))
      printf("\n  carrier %d: %d CPUs, want only %d", c.id[i], CPU_COUNT(&c.mask[i]), want);
    for (int j = 0; j < i && c.n <= ncpu; j++) CU_ASSERT_FALSE(CPU_EQUAL(&c.mask[i], &c.mask[j]));
  }
  char got[256], want[256];
  info_places(got, sizeof got);
  size_t at = 0;
  want[0] = '\0';
  for (int i = 0; i < ncpu; i++) {
    int j = i;
    while (j + 1 < ncpu && cpu[j + 1] == cpu[j] + 1) j++;
    at += (size_t)(j > i ? snprintf(want + at, sizeof want - at, "%s%d-%d", i ? "," : "", cpu[i], cpu[j])
                         : snprintf(want + at, sizeof want - at, "%s%d", i ? "," : "", cpu[i]));
    i = j;
  }
  CU_ASSERT_STRING_EQUAL(got, want); /* the mask's CPUs, resolved at start */
  configure_defaults();
}

static void test_list_wraps(void) {
  if (!can_look()) return;
  int cpu[256];
  int ncpu = mask_cpus(cpu, 256);
  char spec[32];
  int last = cpu[ncpu - 1], first = cpu[0];
  snprintf(spec, sizeof spec, "%d,%d", last, first);
  CU_ASSERT_EQUAL_FATAL(configure_places(spec, 3), 0);
  CU_ASSERT_TRUE_FATAL(weft_fibers_available());
  carriers c;
  find_carriers(&c);
  CU_ASSERT_EQUAL(c.n, 3);
  for (int i = 0; i < c.n; i++) CU_ASSERT_TRUE(only_cpu(&c.mask[i], c.id[i] % 2 == 0 ? last : first));
  configure_defaults();
}

typedef struct where {
  int cpu[64];
  int carrier[64];
} where;

static int note_cpu(void *ctx, size_t i) {
  where *w = ctx;
  weft_sleep_ns(1000000);
  w->cpu[i] = sched_getcpu();
  return 0;
}

/* Fibers run where their carrier is pinned: every element, after a sleep, is on one of the places. */
static void test_fibers_follow(void) {
  if (!can_look()) return;
  int cpu[256];
  int ncpu = mask_cpus(cpu, 256);
  char spec[16];
  snprintf(spec, sizeof spec, "%d", cpu[ncpu - 1]);
  CU_ASSERT_EQUAL_FATAL(configure_places(spec, 2), 0);
  static where w;
  weft_pmap_opts o = WEFT_PMAP_OPTS_INIT;
  o.kind = WEFT_BLOCKING;
  CU_ASSERT_EQUAL(weft_pmap(64, note_cpu, &w, &o), 0);
  int off = 0;
  for (int i = 0; i < 64; i++) off += w.cpu[i] != cpu[ncpu - 1];
  CU_ASSERT_EQUAL(off, 0);
  configure_defaults();
}

/* As `taskset -c N` does: the process may use one CPU; every carrier stays on it, placed or not. */
static void test_one_cpu_process(void) {
  if (!can_look()) return;
  cpu_set_t saved, one;
  CU_ASSERT_EQUAL_FATAL(sched_getaffinity(0, sizeof saved, &saved), 0);
  int cpu[256];
  int ncpu = mask_cpus(cpu, 256);
  int last = cpu[ncpu - 1];
  CPU_ZERO(&one);
  CPU_SET(last, &one);
  CU_ASSERT_EQUAL_FATAL(sched_setaffinity(0, sizeof one, &one), 0);
  for (int k = 0; k < 2; k++) {
    CU_ASSERT_EQUAL(configure_places(k ? "cores" : NULL, 0), 0);
    CU_ASSERT_TRUE(weft_fibers_available());
    carriers c;
    find_carriers(&c);
    CU_ASSERT_EQUAL(c.n, 1); /* one per CPU of the mask */
    for (int i = 0; i < c.n; i++) CU_ASSERT_TRUE(only_cpu(&c.mask[i], last));
    weft_shutdown();
  }
  CU_ASSERT_EQUAL(sched_setaffinity(0, sizeof saved, &saved), 0);
  configure_defaults();
}

/* --- the environment --------------------------------------------------------------------- */

static void env_child(void *arg) {
  setenv("WEFT_PLACES", (const char *)arg, 1);
  if (!weft_fibers_available()) _exit(3);
  carriers c;
  find_carriers(&c);
  cpu_set_t mine;
  sched_getaffinity(0, sizeof mine, &mine);
  int pinned = 0;
  for (int i = 0; i < c.n; i++) pinned += CPU_COUNT(&c.mask[i]) == 1 && CPU_COUNT(&mine) > 1;
  fprintf(stderr, "carriers=%d pinned=%d\n", c.n, pinned);
  weft_shutdown();
}

static void test_env(void) {
  if (!can_look()) return;
  if (weft_test_cpus() < 2) {
    printf("\n    skipped: one CPU, where pinned and free look the same");
    return;
  }
  char err[4096];
  int st = weft_test_child(env_child, (void *)"cores", err, sizeof err);
  CU_ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  int n = -1, pinned = -1;
  const char *line = strstr(err, "carriers=");
  CU_ASSERT_TRUE(line && sscanf(line, "carriers=%d pinned=%d", &n, &pinned) == 2);
  CU_ASSERT(n >= 2);
  CU_ASSERT_EQUAL(pinned, n);
  st = weft_test_child(env_child, (void *)"bogus", err, sizeof err);
  CU_ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "WEFT_PLACES=bogus"));
  line = strstr(err, "carriers=");
  CU_ASSERT_TRUE(line && sscanf(line, "carriers=%d pinned=%d", &n, &pinned) == 2);
  CU_ASSERT_EQUAL(pinned, 0);
  if (!strstr(err, "WEFT_PLACES=bogus")) printf("\n  stderr:\n%s\n", err);
  /* A CPU the process may not use: the carriers still start, unplaced, with one warning. */
  int cpu[256];
  if (mask_cpus(cpu, 256) < 256 && cpu[0] != 1023) {
    st = weft_test_child(env_child, (void *)"1023", err, sizeof err);
    CU_ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "could not be placed on CPU 1023"));
    line = strstr(err, "carriers=");
    CU_ASSERT_TRUE(line && sscanf(line, "carriers=%d pinned=%d", &n, &pinned) == 2);
    CU_ASSERT(n >= 2);
    CU_ASSERT_EQUAL(pinned, 0);
    int warnings = 0;
    for (const char *p = err; (p = strstr(p, "could not be placed")) != NULL; p++) warnings++;
    CU_ASSERT_EQUAL(warnings, 1);
    if (!strstr(err, "could not be placed on CPU 1023")) printf("\n  stderr:\n%s\n", err);
  }
}

int main(int argc, char **argv) {
  static const weft_test tests[] = {
      {"bad_specs", test_bad_specs},
      {"info", test_info},
      {"cores", test_cores},
      {"list_wraps", test_list_wraps},
      {"fibers_follow", test_fibers_follow},
      {"one_cpu_process", test_one_cpu_process},
      {"env", test_env},
      {NULL, NULL},
  };
  return weft_test_run(argc, argv, "places", tests);
}
