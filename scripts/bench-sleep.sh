#!/usr/bin/env bash
# The sleep measurements behind the sleep plots; scripts/bench.sh runs it,
# and scripts/plots.sh when a results folder lacks them:
#
#   scripts/bench-sleep.sh WEFT_BENCH OUT_DIR [REPEAT [LOG]]
#
# Two parts, both by default (BENCH_SLEEP_PARTS="sleep sweep" chooses):
#
# sleep: the sweep behind the "elapsed time against jobs" and "OS threads
# against jobs" plots. Writes OUT_DIR/weft-bench-sleep.jsonl (fibers, thread
# per job, Go goroutines) and OUT_DIR/weft-bench-sleep-fallback.jsonl
# (WEFT_FIBERS=0). Two files, because `weft-bench compare` matches records by
# bench, backend, jobs and sleep, not by WEFT_FIBERS: in one file it would
# pool a fallback run with the fibers run of the same size. Jobs from cores
# to 1000 x cores (x 1, 3, 10, ... 1000). Fibers (WEFT_FIBERS=1), a thread
# per job and Go sleep 200 ms: long enough that 1000 x cores threads are all
# alive when they are counted, 100 ms in. The fallback (WEFT_FIBERS=0:
# rounds of one sleep per OpenMP thread) sleeps 200 ms up to 10 x cores
# jobs and 10 ms from 10 x cores up, or its 1000 x cores point alone would
# take 200 s a repetition; its time is rounds x sleep, so elapsed / sleep
# compares it with the others.
#
# sweep: the scaling sweep behind "elapsed time and peak RSS against jobs",
# the fibers-at-scale plot. Jobs = 2, 20, 200, 2000, 20000, 100000 and
# 1000000, each sleeping 1 s, on weft's fibers and on Go goroutines (one
# `weft-bench sleep --backend weft,go` per size, so that the two interleave
# and each repetition gets a fresh process) into OUT_DIR/weft-bench-sweep.jsonl,
# and the fallback (WEFT_FIBERS=0) into OUT_DIR/weft-bench-sweep-fallback.jsonl
# by the same rule as above: 1 s sleeps up to 10 x cores jobs, 10 ms from 10
# x cores up (the plot scales those by 100 and labels them an estimate), and
# only where one run, ceil(jobs / cores) rounds x sleep, takes at most
# SWEEP_FALLBACK_MAX_S seconds (default 60). SWEEP_MAX_JOBS (default
# 1000000) drops the larger sizes: SWEEP_MAX_JOBS=100000 skips the 10^6
# point, which takes several seconds and 1 to 2 GB per backend.
#
# SLEEP_FALLBACK_MAX_S (default: none) leaves out the sleep part's fallback
# points whose one run, ceil(jobs / cores) rounds x sleep, would take longer
# (the quick run of scripts/bench.sh sets it to 4: no 1000 x cores point).
#
# Without Go, weft-bench skips the go backend with a message (in LOG) and
# the rest runs as usual. Time on 2 cores: about 80 s with REPEAT 1, about
# four minutes with REPEAT 3 (the default). Exit 1 if a run failed (the
# others still run).
set -uo pipefail
[ $# -ge 2 ] && [ $# -le 4 ] || { echo "usage: scripts/bench-sleep.sh WEFT_BENCH OUT_DIR [REPEAT [LOG]]" >&2; exit 2; }
wb=$1
repeat=${3:-3}
log=${4:-/dev/stderr}
parts=${BENCH_SLEEP_PARTS:-sleep sweep}
max_jobs=${SWEEP_MAX_JOBS:-1000000}
fb_max_s=${SWEEP_FALLBACK_MAX_S:-60}
sleep_fb_max_s=${SLEEP_FALLBACK_MAX_S:-}
rc=0
want() { case " $parts " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

if want sleep; then
  out=$2/weft-bench-sleep.jsonl
  out_fb=$2/weft-bench-sleep-fallback.jsonl
  : >"$out"
  : >"$out_fb"
  for k in 1 3 10 30 100 300 1000; do
    printf 'weft-bench sleep --per-core %s: fibers, threads and Go (200 ms), fallback\n' "$k" >&2
    WEFT_FIBERS=1 "$wb" sleep --backend weft,threads,go --per-core "$k" --sleep-ms 200 --repeat "$repeat" --json \
      >>"$out" 2>>"$log" || { echo "bench-sleep.sh: failed: sleep --per-core $k (fibers, threads, go)" >&2; rc=1; }
    for ms in 200 10; do
      # The fallback at 200 ms only where it is affordable (N <= 10 x cores),
      # at 10 ms from 10 x cores up: the overlap shows the two agree.
      case "$ms:$k" in 200:30 | 200:100 | 200:300 | 200:1000 | 10:1 | 10:3) continue ;; esac
      # The jobs are k x cores, so a run is k rounds of one sleep.
      if [ -n "$sleep_fb_max_s" ] && [ $((k * ms)) -gt $((sleep_fb_max_s * 1000)) ]; then
        echo "bench-sleep.sh: fallback at --per-core $k --sleep-ms $ms left out: $k rounds x $ms ms > ${sleep_fb_max_s} s (SLEEP_FALLBACK_MAX_S)" >&2
        continue
      fi
      WEFT_FIBERS=0 "$wb" sleep --backend weft --per-core "$k" --sleep-ms "$ms" --repeat "$repeat" --json \
        >>"$out_fb" 2>>"$log" || { echo "bench-sleep.sh: failed: WEFT_FIBERS=0 sleep --per-core $k --sleep-ms $ms" >&2; rc=1; }
    done
  done
fi

if want sweep; then
  out=$2/weft-bench-sweep.jsonl
  out_fb=$2/weft-bench-sweep-fallback.jsonl
  : >"$out"
  : >"$out_fb"
  cores=$(nproc)
  for n in 2 20 200 2000 20000 100000 1000000; do
    [ "$n" -le "$max_jobs" ] || { echo "bench-sleep.sh: jobs = $n left out (SWEEP_MAX_JOBS=$max_jobs)" >&2; continue; }
    printf 'weft-bench sleep --jobs %s --sleep-ms 1000: fibers and Go\n' "$n" >&2
    WEFT_FIBERS=1 "$wb" sleep --backend weft,go --jobs "$n" --sleep-ms 1000 --repeat "$repeat" --json \
      >>"$out" 2>>"$log" || { echo "bench-sleep.sh: failed: sleep --jobs $n (fibers, go)" >&2; rc=1; }
    # The fallback: 1 s sleeps up to 10 x cores jobs, 10 ms from there, while affordable.
    rounds=$(((n + cores - 1) / cores))
    if [ "$rounds" -le 10 ]; then ms=1000; else ms=10; fi
    if [ $((rounds * ms)) -gt $((fb_max_s * 1000)) ]; then
      echo "bench-sleep.sh: fallback at jobs = $n left out: $rounds rounds x $ms ms > ${fb_max_s} s (SWEEP_FALLBACK_MAX_S)" >&2
      continue
    fi
    printf 'weft-bench sleep --jobs %s --sleep-ms %s: fallback (WEFT_FIBERS=0)\n' "$n" "$ms" >&2
    WEFT_FIBERS=0 "$wb" sleep --backend weft --jobs "$n" --sleep-ms "$ms" --repeat "$repeat" --json \
      >>"$out_fb" 2>>"$log" || { echo "bench-sleep.sh: failed: WEFT_FIBERS=0 sleep --jobs $n --sleep-ms $ms" >&2; rc=1; }
  done
fi
exit $rc
