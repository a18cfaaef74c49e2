#!/usr/bin/env bash
# A short paired check of this commit against its parent (what `make bench-ci` runs):
#
#   scripts/bench-ci.sh
#
#  1. builds weft-bench of the working tree in $BUILD/bench-ci/this and of the
#     parent commit (HEAD^, or $BASE_REF) in $BUILD/bench-ci/parent, from a git
#     worktree at $BUILD/bench-ci/parent-src; both Release, with the same
#     options, so that their environment fingerprints match; a parent already
#     built at that commit is reused, and a rebuild is incremental;
#  2. runs `weft-bench pair PARENT THIS --rounds auto` on three cases, each
#     within its share of the time budget: spawn (a future from a fiber, and
#     a batch from a thread: ns per task), gpars math (weft-cpu: a parallel
#     map per call), echo (loopback connections on fibers);
#  3. writes $BUILD/bench-ci/report.html (weft-bench report of THIS against
#     the parent, with pair's verdicts), and the JUnit XML of each case next to it;
#  4. prints each case's table.
#
# Exit status: 0 nothing slower; 1 a case SLOWER or FAILED; 2 a build or a run
# that could not be made; 4 the two builds' environments differ.
#
# Environment: BUILD (default build), BASE_REF (default HEAD^), BUDGET
# (seconds for the three pairs together, default 105: with reused builds the
# whole check stays within 150 s on a 2-vCPU machine), JOBS (build jobs,
# default nproc), THRESHOLD (pair's, default 3).
set -euo pipefail

cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
OUT=$BUILD/bench-ci
BASE_REF=${BASE_REF:-HEAD^}
BUDGET=${BUDGET:-105}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
THRESHOLD=${THRESHOLD:-3}
GEN=()
command -v ninja >/dev/null 2>&1 && GEN=(-G Ninja)
# The options of both builds: equal, so that pair holds their fingerprints equal; nothing that
# weft-bench does not need (tests, Go baselines, MPI, Fortran).
OPTS=(-DCMAKE_BUILD_TYPE=Release -DWEFT_BUILD_TESTS=OFF -DWEFT_BENCH_GO=OFF -DWEFT_MPI=OFF -DWEFT_FORTRAN=OFF)

start=$(date +%s)
mkdir -p "$OUT"

build() { # build SRC DIR
  if [ ! -f "$2/CMakeCache.txt" ]; then
    cmake -S "$1" -B "$2" "${GEN[@]}" "${OPTS[@]}" >"$2.configure.log" 2>&1 || { cat "$2.configure.log"; exit 2; }
  else
    # Configure again: the commit that goes into every record is read at configure time.
    cmake -S "$1" -B "$2" >"$2.configure.log" 2>&1 || { cat "$2.configure.log"; exit 2; }
  fi
  cmake --build "$2" -j "$JOBS" --target weft-bench >"$2.build.log" 2>&1 || { tail -50 "$2.build.log"; exit 2; }
}

parent=$(git rev-parse --verify "$BASE_REF^{commit}") || { echo "bench-ci: no commit $BASE_REF" >&2; exit 2; }
src=$OUT/parent-src
if [ -d "$src" ] && [ "$(git -C "$src" rev-parse HEAD 2>/dev/null)" = "$parent" ]; then
  :
elif [ -d "$src" ]; then
  git -C "$src" checkout -q --detach "$parent"
else
  git worktree prune
  git worktree add -q --detach "$src" "$parent"
fi
echo "bench-ci: parent $(git rev-parse --short "$parent"), this $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- || echo ' (with uncommitted changes)')"
build "$src" "$OUT/parent"
build . "$OUT/this"
PARENT_BENCH=$OUT/parent/benchmarks/weft-bench/weft-bench
THIS_BENCH=$OUT/this/benchmarks/weft-bench/weft-bench
echo "bench-ci: built in $(( $(date +%s) - start )) s"

cases=(
  "spawn:spawn --case future-fiber,future-thread-batch --count 100000 --repeat 3"
  "gpars:gpars --case math --loops 5000 --backend weft-cpu --repeat 3"
  "echo:echo --connections 50 --messages 200 --backend weft --repeat 3"
)
: >"$OUT/base.jsonl"
: >"$OUT/new.jsonl"
: >"$OUT/pair.jsonl"
worst=0
for i in "${!cases[@]}"; do
  name=${cases[$i]%%:*}
  args=${cases[$i]#*:}
  left=$(( BUDGET - ($(date +%s) - start) ))
  # Each case gets an equal share of what is left of the budget; at least 8 s.
  share=$(( left / (${#cases[@]} - i) ))
  [ "$share" -lt 8 ] && share=8
  echo
  echo "== $name: weft-bench $args (up to $share s)"
  rc=0
  # shellcheck disable=SC2086 # args is a list of words
  "$THIS_BENCH" pair "$PARENT_BENCH" "$THIS_BENCH" --rounds auto --budget "$share" --threshold "$THRESHOLD" \
    --junit "$OUT/pair-$name.xml" --out-base "$OUT/base-$name.jsonl" --out-new "$OUT/new-$name.jsonl" \
    --json-file "$OUT/pair-$name.json" \
    -- $args || rc=$?
  cat "$OUT/base-$name.jsonl" >>"$OUT/base.jsonl"
  cat "$OUT/new-$name.jsonl" >>"$OUT/new.jsonl"
  cat "$OUT/pair-$name.json" >>"$OUT/pair.jsonl" 2>/dev/null || true
  case $rc in
    0) ;;
    1) [ "$worst" -eq 0 ] && worst=1 ;;
    *) worst=$rc ;;
  esac
done
echo
"$THIS_BENCH" report "$OUT/new.jsonl" --base "$OUT/base.jsonl" --pair "$OUT/pair.jsonl" --title "weft-bench: $(git rev-parse --short HEAD) against its parent" \
  -o "$OUT/report.html" || worst=2
echo "bench-ci: $OUT/report.html; $(( $(date +%s) - start )) s in all; exit $worst"
exit "$worst"
