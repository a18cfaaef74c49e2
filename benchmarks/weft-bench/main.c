/*
 * This file contains weft-bench's entry point: the command table, the
 * top-level --help and --version, and the shutdown of weft's runtime at the
 * end (so that a run under Valgrind leaves nothing behind).
 */
#define _POSIX_C_SOURCE 200809L
#include "bench.h"

#include <string.h>

#include "weft.h"

const char *wb_argv0 = "weft-bench";

static const char main_help[] =
    "usage: weft-bench COMMAND [options]\n"
    "\n"
    "Reproducible benchmarks of weft (parallel map and futures for C).\n"
    "\n"
    "Commands:\n"
    "  sleep       N jobs that each sleep, on weft, OpenMP, one thread per job,\n"
    "              sequentially or on Go goroutines: wall time, OS threads, peak RSS,\n"
    "              jobs in flight, CPU time, page faults\n"
    "  embroidery  the embroidery write-up's experiment: jobs = cores and 1000 x cores\n"
    "              sleeping 1 s, weft with fibers against its fallback and Go\n"
    "  spawn       what starting an empty task and waiting for it costs: weft futures\n"
    "              (from a fiber and from a thread), an empty blocking pmap, goroutines\n"
    "  gpars       the GPars write-up's experiment: what a parallel map costs per call\n"
    "              (math, files, http) against sequential code\n"
    "  http        R HTTP GETs, C in flight, by one client on fibers, on OpenMP and on a\n"
    "              thread per request: requests/s, latency percentiles, errors\n"
    "  echo        a TCP echo over C loopback connections, a fiber per connection against\n"
    "              a thread per connection: messages/s, MB/s, latency percentiles\n"
    "  serve       weft-bench's own HTTP/1.1 keep-alive server (a fiber per connection)\n"
    "              on an address and port, for a load generator such as wrk\n"
    "  grain       the efficiency of a parallel map against the size of its tasks, on\n"
    "              weft (CPU and blocking), OpenMP (parallel for, tasks) and a thread\n"
    "              per task; each one's minimum effective task granularity (METG)\n"
    "  compare     compare two --json results files; exit 1 on a regression, 4 when\n"
    "              they were measured in different environments\n"
    "  pair        run two builds interleaved (ABBA) and judge their paired ratios:\n"
    "              a regression check that holds on a noisy machine\n"
    "  history     a history of results per commit in SQLite, and its change points\n"
    "  report      one self-contained HTML report: samples, history, verdicts\n"
    "\n"
    "Every measuring command takes --json (JSON Lines on stdout, with machine and\n"
    "build metadata and the command line that repeats the run) and --repeat R\n"
    "(min, median and max; backends interleaved). `weft-bench COMMAND --help`\n"
    "documents each command; docs/weft-bench.md is the manual.\n"
    "\n"
    "Exit codes: 0 ok, 1 a run failed or compare (pair) found a regression, 2 usage\n"
    "or bad input, 3 not available in this build, 4 compare, pair: unlike\n"
    "environments.\n";

static const struct {
  const char *name;
  int (*run)(int, char **);
  bool uses_weft; /* shut weft's runtime down afterwards */
} commands[] = {
    {"sleep", wb_cmd_sleep, true},      {"embroidery", wb_cmd_embroidery, false},
    {"gpars", wb_cmd_gpars, true},      {"spawn", wb_cmd_spawn, true},
    {"http", wb_cmd_http, true},        {"echo", wb_cmd_echo, true},
    {"grain", wb_cmd_grain, true},      {"compare", wb_cmd_compare, false},
    {"serve", wb_cmd_serve, false},     {"pair", wb_cmd_pair, false},
    {"history", wb_cmd_history, false}, {"report", wb_cmd_report, false},
};

int main(int argc, char **argv) {
  if (argc > 0 && argv[0] && argv[0][0]) wb_argv0 = argv[0];
  if (argc < 2) {
    fputs(main_help, stderr);
    return WB_EXIT_USAGE;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
    fputs(main_help, stdout);
    return WB_EXIT_OK;
  }
  if (strcmp(cmd, "--version") == 0) {
    weft_info info;
    const char *lib = weft_get_info(&info) == 0 ? info.version : "unknown";
    printf("weft-bench (weft.h %s, libweft %s, built by %s)\n", WEFT_VERSION_STRING, lib, wb_compiler());
    return WB_EXIT_OK;
  }
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
    if (strcmp(cmd, commands[i].name) != 0) continue;
    int rc = commands[i].run(argc - 1, argv + 1);
    if (commands[i].uses_weft) weft_shutdown();
    fflush(stdout);
    return rc;
  }
  return wb_usage_error(NULL, "unknown command '%s'", cmd);
}
