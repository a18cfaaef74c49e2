/*
 * This file contains the child runner: a measurement that reports OS
 * threads and peak RSS must own its process, since weft's carriers, the
 * OpenMP pool and the high-water mark of memory all outlive the run that
 * caused them. So `embroidery`, and `sleep` with more than one measurement,
 * re-run this very program as `weft-bench sleep ... --json` with the
 * environment the measurement needs, and read back the one JSON object it
 * prints. The Go baselines (go.c) run through the same reader.
 *
 * "This very program" is the file /proc/self/exe names, read with readlink
 * rather than exec'd through the link itself: under Valgrind, exec of
 * /proc/self/exe starts Valgrind's tool, while readlink gives the program
 * (Valgrind emulates it). When the file has been replaced since it started
 * (the link ends in " (deleted)"), the link itself is exec'd: the kernel
 * still reaches the running binary through it.
 */
#define _POSIX_C_SOURCE 200809L
#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

void wb_free_strv(char **v) {
  if (!v) return;
  for (char **p = v; *p; p++) free(*p);
  free(v);
}

/* True when entry "NAME=..." sets the variable that set_entry "NAME=..." sets. */
static bool same_name(const char *entry, const char *set_entry) {
  const char *eq = strchr(set_entry, '=');
  size_t n = eq ? (size_t)(eq - set_entry) : strlen(set_entry);
  return strncmp(entry, set_entry, n) == 0 && entry[n] == '=';
}

int wb_child_env(const char *const *set, char ***out) {
  size_t n = 0, ns = 0;
  while (environ[n]) n++;
  while (set && set[ns]) ns++;
  char **env = calloc(n + ns + 1, sizeof *env);
  if (!env) return -ENOMEM;
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    bool replaced = false;
    for (size_t j = 0; j < ns && !replaced; j++) replaced = same_name(environ[i], set[j]);
    if (replaced) continue;
    if (!(env[k++] = strdup(environ[i]))) goto oom;
  }
  for (size_t j = 0; j < ns; j++)
    if (!(env[k++] = strdup(set[j]))) goto oom;
  *out = env;
  return 0;
oom:
  wb_free_strv(env);
  return -ENOMEM;
}

/* The path to exec: see the comment at the top. */
static void self_path(char *out, size_t len) {
  static const char deleted[] = " (deleted)";
  ssize_t n = readlink("/proc/self/exe", out, len - 1);
  size_t dl = sizeof deleted - 1;
  if (n <= 0 || (size_t)n >= len - 1 || ((size_t)n > dl && memcmp(out + n - dl, deleted, dl) == 0)) {
    snprintf(out, len, "/proc/self/exe");
    return;
  }
  out[n] = '\0';
}

int wb_child_run(char *const *args, const char *const *set, json_t **rec, int *exit_code) {
  size_t nargs = 0;
  while (args[nargs]) nargs++;
  char **argv = calloc(nargs + 2, sizeof *argv);
  *exit_code = -1;
  if (!argv) return -ENOMEM;
  /* The child is called by the name we were called by, so that its "command" key reads the same. */
  argv[0] = (char *)wb_argv0;
  for (size_t i = 0; i < nargs; i++) argv[i + 1] = args[i];
  char self[PATH_MAX];
  self_path(self, sizeof self);
  int rc = wb_run_json(self, argv, set, rec, exit_code);
  free(argv);
  return rc;
}

int wb_run_capture(const char *path, char *const *argv, const char *const *set, bool search, char **text,
                   size_t *textlen, int *exit_code) {
  char **env = NULL;
  int fds[2] = {-1, -1};
  char *out = NULL;
  size_t len = 0, cap = 0;
  int rc;
  *exit_code = -1;
  *text = NULL;
  *textlen = 0;
  if ((rc = wb_child_env(set, &env)) < 0) goto done;
  if (pipe(fds) < 0) {
    rc = -errno;
    goto done;
  }
  /* Only the child's copy of the write end (dup2'd to 1) may stay open in it, or EOF never comes. */
  fcntl(fds[0], F_SETFD, FD_CLOEXEC);
  fcntl(fds[1], F_SETFD, FD_CLOEXEC);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
  pid_t pid;
  rc =
      search ? posix_spawnp(&pid, path, &fa, NULL, argv, env) : posix_spawn(&pid, path, &fa, NULL, argv, env);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  fds[1] = -1;
  if (rc != 0) {
    rc = -rc;
    goto done;
  }

  for (;;) {
    if (len + 4096 > cap) {
      size_t ncap = cap ? 2 * cap : 8192;
      char *p = realloc(out, ncap);
      if (!p) {
        rc = -ENOMEM;
        break;
      }
      out = p;
      cap = ncap;
    }
    ssize_t r = read(fds[0], out + len, cap - len - 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    len += (size_t)r;
  }
  int status;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  if (rc == 0 && out) {
    out[len] = '\0';
    *text = out;
    *textlen = len;
    out = NULL;
  }
done:
  if (fds[0] >= 0) close(fds[0]);
  if (fds[1] >= 0) close(fds[1]);
  free(out);
  wb_free_strv(env);
  return rc;
}

int wb_run_json(const char *path, char *const *argv, const char *const *set, json_t **rec, int *exit_code) {
  char *out;
  size_t len;
  int rc = wb_run_capture(path, argv, set, false, &out, &len, exit_code);
  if (rc < 0) {
    if (rc != -ENOMEM)
      fprintf(stderr, "weft-bench: cannot start a child run (%s): %s\n", path, strerror(-rc));
    return rc;
  }

  /* Exactly one line of JSON: anything else means the child broke, and its stderr said how. */
  while (len && (out[len - 1] == '\n' || out[len - 1] == '\r')) len--;
  char err[160];
  if (len == 0 || memchr(out, '\n', len) != NULL) {
    fprintf(stderr, "weft-bench: the child run '%s %s ...' printed %s on stdout (exit code %d)\n", argv[0],
            argv[1] ? argv[1] : "", len ? "more than one line" : "nothing", *exit_code);
    rc = -ECHILD;
  } else if ((rc = wb_json_parse(out, len, rec, err, sizeof err)) < 0) {
    fprintf(stderr, "weft-bench: the child run printed bad JSON: %s\n",
            rc == -ENOMEM ? "out of memory" : err);
    rc = -ECHILD;
  }
  free(out);
  return rc;
}
