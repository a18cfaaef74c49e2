#!/usr/bin/env bash
# The sleep sweep behind the "elapsed time against jobs" and "OS threads
# against jobs" plots; scripts/bench.sh runs it, and scripts/plots.sh when a
# results folder lacks it:
#
#   scripts/bench-sleep.sh WEFT_BENCH OUT_DIR [REPEAT [LOG]]
#
# writes OUT_DIR/weft-bench-sleep.jsonl (fibers, thread per job) and
# OUT_DIR/weft-bench-sleep-fallback.jsonl (WEFT_FIBERS=0). Two files,
# because `weft-bench compare` matches records by bench, backend, jobs and
# sleep, not by WEFT_FIBERS: in one file it would pool a fallback run with
# the fibers run of the same size.
#
# Jobs from cores to 1000 x cores (x 1, 3, 10, ... 1000). Fibers
# (WEFT_FIBERS=1) and a thread per job sleep 200 ms: long enough that
# 1000 x cores threads are all alive when they are counted, 100 ms in. The
# fallback (WEFT_FIBERS=0: rounds of one sleep per OpenMP thread) sleeps
# 200 ms up to 10 x cores jobs and 10 ms from 10 x cores up, or its
# 1000 x cores point alone would take 200 s a repetition; its time is
# rounds x sleep, so elapsed / sleep compares it with the others. About
# 90 s on 2 cores with REPEAT 3 (the default). Exit 1 if a run failed
# (the others still run).
set -uo pipefail
[ $# -ge 2 ] && [ $# -le 4 ] || { echo "usage: scripts/bench-sleep.sh WEFT_BENCH OUT_DIR [REPEAT [LOG]]" >&2; exit 2; }
wb=$1
out=$2/weft-bench-sleep.jsonl
out_fb=$2/weft-bench-sleep-fallback.jsonl
repeat=${3:-3}
log=${4:-/dev/stderr}
rc=0
: >"$out"
: >"$out_fb"
for k in 1 3 10 30 100 300 1000; do
  printf 'weft-bench sleep --per-core %s: fibers and threads (200 ms), fallback\n' "$k" >&2
  WEFT_FIBERS=1 "$wb" sleep --backend weft,threads --per-core "$k" --sleep-ms 200 --repeat "$repeat" --json \
    >>"$out" 2>>"$log" || { echo "bench-sleep.sh: failed: sleep --per-core $k (fibers, threads)" >&2; rc=1; }
  for ms in 200 10; do
    # The fallback at 200 ms only where it is affordable (N <= 10 x cores),
    # at 10 ms from 10 x cores up: the overlap shows the two agree.
    case "$ms:$k" in 200:30 | 200:100 | 200:300 | 200:1000 | 10:1 | 10:3) continue ;; esac
    WEFT_FIBERS=0 "$wb" sleep --backend weft --per-core "$k" --sleep-ms "$ms" --repeat "$repeat" --json \
      >>"$out_fb" 2>>"$log" || { echo "bench-sleep.sh: failed: WEFT_FIBERS=0 sleep --per-core $k --sleep-ms $ms" >&2; rc=1; }
  done
done
exit $rc
