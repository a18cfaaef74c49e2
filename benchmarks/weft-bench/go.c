/*
 * This file contains where weft-bench finds its Go baselines (benchmarks/go:
 * weft-go-sleep, weft-go-spawn, weft-go-echo, weft-go-httpget), or why it
 * has none. CMake builds them when it finds Go and writes their folder as
 * WB_GO_DIR into go_paths.h; without Go it writes the reason as WB_GO_SKIP. $WEFT_BENCH_GO_DIR overrides the
 * folder, for an installed weft-bench or baselines built elsewhere. A
 * missing baseline is never an error: the go case is skipped with the reason.
 */
#define _POSIX_C_SOURCE 200809L
#include "bench.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "go_paths.h"

int wb_go_find(const char *name, char *out, size_t len, char *why, size_t whylen) {
  const char *dir = getenv("WEFT_BENCH_GO_DIR");
  const char *from = "WEFT_BENCH_GO_DIR";
  if (!dir || !*dir) {
#ifdef WB_GO_DIR
    dir = WB_GO_DIR;
    from = NULL;
#else
#ifdef WB_GO_SKIP
    snprintf(why, whylen, "%s", WB_GO_SKIP);
#else
    snprintf(why, whylen, "Go not found; install golang-go");
#endif
    return -ENOENT;
#endif
  }
  int n = snprintf(out, len, "%s/%s", dir, name);
  if (n < 0 || (size_t)n >= len) {
    snprintf(why, whylen, "the path of %s is too long", name);
    return -ENOENT;
  }
  if (access(out, X_OK) != 0) {
    if (from)
      snprintf(why, whylen, "no program %s in %s=%.160s", name, from, dir);
    else
      snprintf(why, whylen, "%.160s is not built (build the weft_go_baselines target)", out);
    return -ENOENT;
  }
  return 0;
}
