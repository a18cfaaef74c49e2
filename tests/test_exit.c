/*
 * This file contains the clean-exit suite (issue 13): a program that never
 * calls weft_shutdown, with fibers parked, CPU maps used, the host team open,
 * leaves through return, exit() from main, exit() inside its own OpenMP
 * region, exit() from a fiber, exit() from a CPU future, and exit() while the
 * runtime is busy, and each time ends with its own status and writes nothing;
 * and the program's own atexit handlers may still use weft and shut it down.
 * The program (exit_prog.c) is built with this suite's flags, so each CI
 * configuration (sanitizers, clang + libomp, no OpenMP) checks its own exit;
 * under Valgrind the suite runs the program under Valgrind too, whose errors
 * (definite or indirect leaks included) make it exit with 99.
 *
 * A crash at exit was a race (about one run in 20-60 with clang + libomp):
 * each mode runs many times.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#ifndef WEFT_EXIT_PROG
#error "WEFT_EXIT_PROG names the exit_prog program (tests/CMakeLists.txt)"
#endif

static void run_prog(void *arg) {
  const char *mode = arg;
  char *size = weft_test_slow_env() ? "small" : "full";
  if (weft_test_valgrind()) {
    /* Valgrind's own report goes to stdout (the test's log): stderr is the program's alone. */
    char *av[] = {"valgrind",
                  "-q",
                  "--log-fd=1",
                  "--show-possibly-lost=no",
                  "--error-exitcode=99",
                  "--leak-check=full",
                  "--errors-for-leak-kinds=definite,indirect",
                  "--suppressions=" WEFT_SOURCE_DIR "/scripts/valgrind.supp",
                  WEFT_EXIT_PROG,
                  (char *)mode,
                  size,
                  NULL};
    execvp(av[0], av);
  } else {
    char *av[] = {WEFT_EXIT_PROG, (char *)mode, size, NULL};
    execv(av[0], av);
  }
  perror("exec");
  _exit(127);
}

static void check_mode(const char *mode) {
  if (weft_test_qemu()) {
    /* The emulated test cannot exec a target program where the host has no binfmt entry for it. */
    printf("\n    skipped: under qemu-user exit_prog cannot be executed from the test (no binfmt)");
    return;
  }
  int runs = weft_test_valgrind() ? 1 : weft_test_slow_env() ? 3 : 25;
  for (int i = 0; i < runs; i++) {
    char err[4096];
    int st = weft_test_child(run_prog, (void *)mode, err, sizeof err);
    bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 7 && err[0] == '\0';
    if (!ok) {
      fprintf(stderr, "exit_prog %s, run %d: %s %d, stderr:\n%s\n", mode, i,
              WIFEXITED(st) ? "exit status" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st), err);
      CU_FAIL("the program did not exit cleanly with its own status");
      return;
    }
  }
  CU_PASS("clean exits");
}

static void exit_return(void) { check_mode("return"); }
static void exit_exit(void) { check_mode("exit"); }
static void exit_in_omp(void) { check_mode("in-omp"); }
static void exit_from_fiber(void) { check_mode("from-fiber"); }
static void exit_from_cpu(void) { check_mode("from-cpu"); }
static void exit_busy(void) { check_mode("busy"); }
static void exit_atexit(void) { check_mode("atexit"); }

int main(int argc, char **argv) {
  static const weft_test tests[] = {{"return", exit_return},     {"exit", exit_exit},
                                    {"in_omp", exit_in_omp},     {"from_fiber", exit_from_fiber},
                                    {"from_cpu", exit_from_cpu}, {"busy", exit_busy},
                                    {"atexit", exit_atexit},     {NULL, NULL}};
  return weft_test_run(argc, argv, "exit", tests);
}
