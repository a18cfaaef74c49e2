#!/usr/bin/env bash
# Run a command under ThreadSanitizer's settings for weft's TSan build
# (clang + LLVM libomp). libomp's own synchronisation is invisible to TSan
# unless an OMPT tool reports it: LLVM's "archer" does, so it is loaded
# through OMP_TOOL_LIBRARIES. libgomp has no such tool, which is why the
# TSan build uses clang and libomp (docs/reliability.md).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# LLVM keeps libomp and libarcher two levels above clang's resource directory.
libdir=$(cd "$(clang -print-resource-dir)/../.." && pwd)
archer="$libdir/libarcher.so"
if [ -f "$archer" ]; then
  export OMP_TOOL_LIBRARIES="$archer"
  # archer's own option: it reports nothing but races, and is told what is ignorable.
  export ARCHER_OPTIONS="${ARCHER_OPTIONS:-verbose=0}"
else
  echo "tsan-env.sh: no libarcher.so in $libdir; OpenMP synchronisation will be invisible to TSan" >&2
fi
# die_after_fork=0: the suites fork children that start threads (death tests, fork tests);
# TSan supports that only in this mode.
# ignore_noninstrumented_modules=1: what archer asks for (it warns on every start without it):
# accesses inside the uninstrumented OpenMP runtime are not reported; archer tells TSan its
# synchronisation instead.
# report_thread_leaks=0: the OpenMP runtime keeps its worker threads for the process's life
# and never joins them; weft's own threads are checked by every suite (weft__threads_alive).
export TSAN_OPTIONS="halt_on_error=1 ignore_noninstrumented_modules=1 second_deadlock_stack=1 history_size=4 die_after_fork=0 report_thread_leaks=0 suppressions=$here/tsan.supp ${TSAN_OPTIONS:-}"
exec "$@"
