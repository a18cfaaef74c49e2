#!/usr/bin/env bash
# Run weft's whole benchmark suite and write every result into one folder
# (what `make bench` runs):
#
#   scripts/bench.sh [--quick] [BUILD_DIR [RESULTS_DIR]]    defaults: build/release results
#
# BUILD_DIR is a CMake build of weft with benchmarks (Release, please). Into
# RESULTS_DIR go:
#
#   meta.json                  the machine, the build and the load, before and after
#   weft-bench-embroidery.jsonl  weft-bench embroidery --json --repeat K
#   weft-bench-sleep.jsonl     weft-bench sleep, cores .. 1000 x cores jobs, on fibers,
#                              a thread per job and Go goroutines (scripts/bench-sleep.sh)
#   weft-bench-sleep-fallback.jsonl  the same on the fallback (WEFT_FIBERS=0)
#   weft-bench-sweep.jsonl     the scaling sweep: 2 .. 10^6 jobs sleeping 1 s, fibers and Go
#   weft-bench-sweep-fallback.jsonl  the same on the fallback, where affordable
#   weft-bench-spawn.jsonl     weft-bench spawn: ns per empty future, pmap element, goroutine
#   weft-bench-gpars.jsonl     weft-bench gpars --case math (5000 calls) and --case files (500)
#   weft-bench-grain.jsonl     weft-bench grain: efficiency against task size, each backend's METG
#   bm_<name>.json             each Google Benchmark binary, 5 repetitions, interleaved
#   *.log, bm_<name>.txt       what each program printed for people
#   summary.txt                the headline ratios (scripts/bench_data.py summary)
#
# Every measurement repeats (weft-bench --repeat, gbench --benchmark_repetitions)
# with the repetitions of different cases interleaved, so that a slow minute
# of a shared machine spreads over all of them; read medians, and ratios
# against the baselines of the same run (docs/benchmarks.md).
#
# Environment: BENCH_REPEAT (weft-bench repetitions, default 3), GBENCH_REPS
# (default 5), GBENCH_MIN_TIME (seconds per gbench repetition, default 0.2),
# BENCH_ONLY (space-separated subset of: embroidery sleep spawn gpars grain
# gbench); scripts/bench-sleep.sh reads BENCH_SLEEP_PARTS, SWEEP_MAX_JOBS
# (SWEEP_MAX_JOBS=100000 skips the 10^6-job point), SWEEP_FALLBACK_MAX_S and
# SLEEP_FALLBACK_MAX_S. The Go baselines run where the build found Go
# (scripts/deps.sh bench installs it) and are skipped with a message
# elsewhere. The whole run takes about twelve minutes on an idle 2-core
# machine, more on a busy one.
#
# --quick (or BENCH_QUICK=1) is the short run that `make plots` makes when it
# has no results: only what the plots draw (BENCH_ONLY "sleep gpars grain
# gbench"; bm_pmap and bm_future alone, filtered to the cases plotted), the
# same medians of 3 interleaved repetitions (gbench 5), but shorter: gbench
# 0.05 s a repetition, gpars 2000 and 200 calls, grain 20 ms of work a call,
# the sweep to 10^5 jobs, the fallback's sleeps only where one run takes at
# most a few seconds. About four minutes on 2 cores. meta.json says
# "profile": "quick". Variables set in the environment win over these.
#
# Exit status: 0 when every program succeeded; 1 when one failed (the others
# still run, and the failures are listed at the end); 2 on a usage error.
set -uo pipefail

usage() {
  echo "usage: scripts/bench.sh [--quick] [BUILD_DIR [RESULTS_DIR]]" >&2
  exit 2
}
quick=${BENCH_QUICK:-0}
case "${1:-}" in -h | --help) usage ;; --quick) quick=1; shift ;; esac
[ $# -le 2 ] || usage
profile=full
if [ "$quick" = 1 ]; then
  profile=quick
  : "${BENCH_ONLY:=sleep gpars grain gbench}"
  : "${GBENCH_MIN_TIME:=0.05}"
  : "${SWEEP_MAX_JOBS:=100000}"
  : "${SWEEP_FALLBACK_MAX_S:=2}"
  : "${SLEEP_FALLBACK_MAX_S:=4}"
  export SWEEP_MAX_JOBS SWEEP_FALLBACK_MAX_S SLEEP_FALLBACK_MAX_S
fi

build=${1:-build/release}
results=${2:-results}
repeat=${BENCH_REPEAT:-3}
reps=${GBENCH_REPS:-5}
min_time=${GBENCH_MIN_TIME:-0.2}
only=${BENCH_ONLY:-embroidery sleep spawn gpars grain gbench}
here=$(cd "$(dirname "$0")" && pwd)

wb=$build/benchmarks/weft-bench/weft-bench
if [ ! -x "$wb" ]; then
  echo "bench.sh: $wb not found: build weft with benchmarks first (make release)" >&2
  exit 2
fi
command -v python3 >/dev/null || { echo "bench.sh: python3 is needed (scripts/deps.sh bench)" >&2; exit 2; }
mkdir -p "$results" || exit 2

# `make bench` builds before it installs the bench packages, so on a fresh
# machine the build was configured before TBB was there: reconfigure once,
# so that bm_pmap gets its TBB baseline.
if grep -q '^TBB_DIR:PATH=TBB_DIR-NOTFOUND' "$build/CMakeCache.txt" 2>/dev/null &&
  compgen -G '/usr/lib/*/cmake/TBB/TBBConfig.cmake' >/dev/null; then
  echo "bench.sh: TBB is installed now; reconfiguring $build for bm_pmap's TBB baseline" >&2
  cmake "$build" >/dev/null && cmake --build "$build" -j "$(nproc)" >/dev/null ||
    echo "bench.sh: reconfiguring failed; bm_pmap runs without TBB" >&2
fi
# The same for Go and weft-bench's Go baselines (the cache remembers a failed find_program).
if grep -q '^GO_EXECUTABLE:FILEPATH=GO_EXECUTABLE-NOTFOUND' "$build/CMakeCache.txt" 2>/dev/null &&
  command -v go >/dev/null; then
  echo "bench.sh: Go is installed now; reconfiguring $build for weft-bench's Go baselines" >&2
  cmake -U GO_EXECUTABLE "$build" >/dev/null && cmake --build "$build" -j "$(nproc)" >/dev/null ||
    echo "bench.sh: reconfiguring failed; weft-bench skips its Go cases" >&2
fi

failed=()
want() { case " $only " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
step() { printf '\n== [%4d s] %s\n' "$SECONDS" "$*" >&2; }

[ "$quick" = 1 ] && echo "bench.sh: the quick run ($only) into $results" >&2
python3 "$here/bench_data.py" meta "$build" "$profile" >"$results/meta.json.tmp" || failed+=("meta")

# --- weft-bench ---------------------------------------------------------------

if want embroidery; then
  step "weft-bench embroidery --repeat $repeat"
  "$wb" embroidery --json --repeat "$repeat" >"$results/weft-bench-embroidery.jsonl" \
    2>"$results/weft-bench-embroidery.log" || failed+=("weft-bench embroidery")
fi

if want sleep; then
  step "weft-bench sleep: jobs = cores .. 1000 x cores, and the sweep to 10^6 (scripts/bench-sleep.sh)"
  "$here/bench-sleep.sh" "$wb" "$results" "$repeat" "$results/weft-bench-sleep.log" ||
    failed+=("weft-bench sleep")
fi

if want spawn; then
  step "weft-bench spawn --repeat $repeat"
  "$wb" spawn --json --repeat "$repeat" >"$results/weft-bench-spawn.jsonl" \
    2>"$results/weft-bench-spawn.log" || failed+=("weft-bench spawn")
fi

if want gpars; then
  out=$results/weft-bench-gpars.jsonl
  : >"$out"
  # math: the write-up's 5000 calls; files: 500 calls (a call reads 120
  # files, so 5000 would take minutes per backend on a busy machine).
  cases="math:5000 files:500"
  [ "$quick" = 1 ] && cases="math:2000 files:200"
  for c in $cases; do
    step "weft-bench gpars --case ${c%:*} --loops ${c#*:} --repeat $repeat"
    "$wb" gpars --case "${c%:*}" --loops "${c#*:}" --repeat "$repeat" --json >>"$out" \
      2>>"$results/weft-bench-gpars.log" || failed+=("weft-bench gpars --case ${c%:*}")
  done
fi

if want grain; then
  work=50
  [ "$quick" = 1 ] && work=20
  step "weft-bench grain --work-ms $work --repeat $repeat"
  "$wb" grain --work-ms "$work" --repeat "$repeat" --json >"$results/weft-bench-grain.jsonl" \
    2>"$results/weft-bench-grain.log" || failed+=("weft-bench grain")
fi

# --- Google Benchmark suites -----------------------------------------------------

# The quick run measures only the cases the plots draw (bench_data.py's PMAP_SIZES, grains and FUTURE_CASES).
gbench_filter() {
  case $1 in
    bm_pmap) echo '^BM_(Seq|OmpFor|OmpTaskloop|Tbb|WeftPmap)/n:(100|10000|1000000)/|^BM_WeftPmapGrain/' ;;
    bm_future) echo '^BM_(FutureCpu|FutureBlocking|FiberSpawnJoin|FutureCpuFromFiber|PthreadCreateJoin)/|^BM_FiberSpawnJoinBatch/k:100/' ;;
    *) return 1 ;;
  esac
}

if want gbench; then
  shopt -s nullglob
  bms=("$build"/benchmarks/gbench/bm_*)
  [ ${#bms[@]} -gt 0 ] || echo "bench.sh: no bm_* binaries in $build/benchmarks/gbench (Google Benchmark missing?)" >&2
  for b in "${bms[@]}"; do
    [ -x "$b" ] && [ -f "$b" ] || continue
    name=$(basename "$b")
    filter=()
    if [ "$quick" = 1 ]; then
      f=$(gbench_filter "$name") || continue
      filter=(--benchmark_filter="$f")
    fi
    step "$name x $reps repetitions"
    "$b" --benchmark_out="$results/$name.json" --benchmark_out_format=json \
      --benchmark_repetitions="$reps" --benchmark_enable_random_interleaving=true \
      --benchmark_min_time="$min_time" --benchmark_display_aggregates_only=true "${filter[@]}" \
      >"$results/$name.txt" 2>&1 || failed+=("$name")
    grep -E '_median|^-|^Benchmark' "$results/$name.txt" >&2 || true
  done
fi

# --- the machine after, and the headline ratios ------------------------------------

if [ -f "$results/meta.json.tmp" ]; then
  python3 "$here/bench_data.py" meta-finish "$results/meta.json.tmp" >"$results/meta.json" && rm -f "$results/meta.json.tmp"
fi
python3 "$here/bench_data.py" summary "$results" >"$results/summary.txt" || failed+=("summary")
cat "$results/summary.txt" >&2

if [ ${#failed[@]} -gt 0 ]; then
  printf '\nbench.sh: failed: %s\n' "${failed[@]}" >&2
  exit 1
fi
printf '\nbench.sh: results in %s (%d s)\n' "$results" "$SECONDS" >&2
