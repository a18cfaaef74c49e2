/*
 * This file contains the gpars "files" case: each element opens, reads and
 * closes one of 120 files of 1-4 KiB (sizes and bytes from the run's seed)
 * and checksums it. The files live in a folder made with mkdtemp under
 * $TMPDIR (or /tmp) and are removed at the end, on every error path, and on
 * SIGINT, SIGTERM and SIGHUP (a handler that only unlinks paths prepared in
 * advance, which is async-signal-safe).
 *
 * Reads use plain POSIX calls: weft.h has no file I/O yet. On a fiber such a
 * read blocks its carrier for the few microseconds a page-cache hit takes;
 * once weft's fiber-aware file I/O lands, the blocking backend should be
 * measured with it too (see docs/weft-bench.md).
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "gpars.h"

#define FILE_MIN 1024
#define FILE_MAX 4096

typedef struct files_ctx {
  size_t n;
  char dir[PATH_MAX];
  char **paths;     /* n paths, all allocated before any file exists (the signal handler reads them) */
  size_t created;   /* files that exist now */
  uint64_t *out;    /* checksum per element */
  uint64_t *expect; /* checksum of what was written */
} files_ctx;

/* The one context the signal handler cleans up: set while files exist. */
static files_ctx *volatile live;
static struct sigaction old_int, old_term, old_hup;

static void remove_files(files_ctx *c) {
  for (size_t i = 0; i < c->created; i++) unlink(c->paths[i]);
  rmdir(c->dir);
}

static void on_signal(int sig) {
  files_ctx *c = live;
  if (c) remove_files(c);
  /* Die of the same signal, so that the caller sees what happened. */
  signal(sig, SIG_DFL);
  raise(sig);
}

static void handlers_install(files_ctx *c) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  live = c;
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  sigaction(SIGHUP, &sa, &old_hup);
}

static void handlers_remove(void) {
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGTERM, &old_term, NULL);
  sigaction(SIGHUP, &old_hup, NULL);
  live = NULL;
}

static void files_teardown(void *p) {
  files_ctx *c = p;
  if (!c) return;
  if (live == c) handlers_remove();
  if (c->dir[0]) remove_files(c);
  if (c->paths)
    for (size_t i = 0; i < c->n; i++) free(c->paths[i]);
  free(c->paths);
  free(c->out);
  free(c->expect);
  free(c);
}

static int write_all(int fd, const unsigned char *p, size_t n) {
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return -errno;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

static int files_setup(void **out, size_t items, uint64_t seed, char *err, size_t errlen) {
  files_ctx *c = calloc(1, sizeof *c);
  if (!c) goto oom;
  c->n = items;
  c->paths = calloc(items, sizeof *c->paths);
  c->out = calloc(items, sizeof *c->out);
  c->expect = calloc(items, sizeof *c->expect);
  if (!c->paths || !c->out || !c->expect) goto oom;

  const char *tmp = getenv("TMPDIR");
  if (!tmp || !*tmp) tmp = "/tmp";
  if (snprintf(c->dir, sizeof c->dir, "%s/weft-bench-files.XXXXXX", tmp) >= (int)sizeof c->dir) {
    c->dir[0] = '\0';
    snprintf(err, errlen, "TMPDIR is too long");
    files_teardown(c);
    return -ENAMETOOLONG;
  }
  if (!mkdtemp(c->dir)) {
    int e = errno;
    snprintf(err, errlen, "cannot create a temporary folder under %s: %s", tmp, strerror(e));
    c->dir[0] = '\0';
    files_teardown(c);
    return -e;
  }
  for (size_t i = 0; i < items; i++) {
    size_t len = strlen(c->dir) + 32;
    if (!(c->paths[i] = malloc(len))) goto oom;
    snprintf(c->paths[i], len, "%s/f%05zu.dat", c->dir, i);
  }
  handlers_install(c);

  uint64_t s = seed ? seed : 1;
  unsigned char buf[FILE_MAX];
  for (size_t i = 0; i < items; i++) {
    size_t size = FILE_MIN + (size_t)(wb_xorshift64s(&s) % (FILE_MAX - FILE_MIN + 1));
    for (size_t k = 0; k < size; k++) buf[k] = (unsigned char)(wb_xorshift64s(&s) >> 56);
    int fd = open(c->paths[i], O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
      int e = errno;
      snprintf(err, errlen, "cannot create %s: %s", c->paths[i], strerror(e));
      files_teardown(c);
      return -e;
    }
    c->created = i + 1;
    int rc = write_all(fd, buf, size);
    if (close(fd) < 0 && rc == 0) rc = -errno;
    if (rc < 0) {
      snprintf(err, errlen, "cannot write %s: %s", c->paths[i], strerror(-rc));
      files_teardown(c);
      return rc;
    }
    c->expect[i] = wb_fnv1a(WB_FNV_INIT, buf, size);
  }
  *out = c;
  return 0;
oom:
  snprintf(err, errlen, "out of memory");
  files_teardown(c);
  return -ENOMEM;
}

static int files_element(void *p, size_t i) {
  files_ctx *c = p;
  unsigned char buf[FILE_MAX + 1];
  int fd = open(c->paths[i], O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  size_t len = 0;
  for (;;) {
    ssize_t r = read(fd, buf + len, sizeof buf - len);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      close(fd);
      return -e;
    }
    if (r == 0 || (len += (size_t)r) == sizeof buf) break;
  }
  close(fd);
  c->out[i] = wb_fnv1a(WB_FNV_INIT, buf, len);
  return 0;
}

static void files_reset(void *p) {
  files_ctx *c = p;
  for (size_t i = 0; i < c->n; i++) c->out[i] = ~c->expect[i];
}

static int files_check(void *p, char *err, size_t errlen) {
  files_ctx *c = p;
  for (size_t i = 0; i < c->n; i++) {
    if (c->out[i] != c->expect[i]) {
      snprintf(err, errlen, "file %zu read back a different checksum", i);
      return -EIO;
    }
  }
  return 0;
}

const gpars_case wb_gpars_files = {
    .name = "files",
    .what = "open, read and checksum one file of 1-4 KiB per element",
    .default_items = 120,
    .setup = files_setup,
    .element = files_element,
    .reset = files_reset,
    .check = files_check,
    .teardown = files_teardown,
};
