#!/usr/bin/env bash
# Compare two results folders written by scripts/bench.sh (what
# `make bench-compare` runs):
#
#   scripts/bench-compare.sh BASE_DIR NEW_DIR [THRESHOLD]    THRESHOLD in %, default 10
#
#  - every bm_<name>.json found in both, with Google Benchmark's own
#    compare.py (Debian's libbenchmark-tools; it needs python3-scipy, so it
#    runs under Debian's /usr/bin/python3) and its Mann-Whitney U test over
#    the repetitions;
#  - every weft-bench-*.jsonl found in both, with `weft-bench compare`
#    (its noise rule: every new sample slower than every base sample).
#
# A Google Benchmark case is a regression when its median wall time grew by
# more than THRESHOLD % AND the U test rejects "same distribution" (two-sided
# p < ALPHA, default 0.05; with 5 repetitions each the smallest p possible is
# 0.008). A weft-bench measurement is one when `weft-bench compare` calls it
# SLOWER or FAILED. The two machines (or runs) should be alike: meta.json in
# each folder says what each was, and `weft-bench compare` refuses files
# whose records' environment fingerprints differ (CPU, cores, kernel, THP,
# compiler and flags, OpenMP, ...: docs/weft-bench.md) unless
# ALLOW_DIFFERENT_ENV=1. JUNIT_DIR=DIR writes each weft-bench comparison as
# JUnit XML too (DIR/weft-bench-*.xml, one test case per measurement).
#
# Environment: ALPHA (U-test level), ALLOW_DIFFERENT_ENV, JUNIT_DIR, WEFT_BENCH (the weft-bench program;
# default $BUILD_DIR/benchmarks/weft-bench/weft-bench with BUILD_DIR
# defaulting to build/release), COMPARE_PY (default
# /usr/share/benchmark/compare.py), PYTHON (default /usr/bin/python3).
#
# Exit status: 0 no regression; 1 at least one regression; 2 usage error or
# missing tools or inputs; 4 a weft-bench file pair measured in different
# environments (and no regression elsewhere).
set -uo pipefail

usage() {
  echo "usage: scripts/bench-compare.sh BASE_DIR NEW_DIR [THRESHOLD_PERCENT]" >&2
  exit 2
}
[ $# -ge 2 ] && [ $# -le 3 ] || usage
base=$1
new=$2
threshold=${3:-10}
alpha=${ALPHA:-0.05}
compare_py=${COMPARE_PY:-/usr/share/benchmark/compare.py}
py=${PYTHON:-/usr/bin/python3}
wb=${WEFT_BENCH:-${BUILD_DIR:-build/release}/benchmarks/weft-bench/weft-bench}

for d in "$base" "$new"; do [ -d "$d" ] || { echo "bench-compare.sh: no folder '$d'" >&2; exit 2; }; done
case $threshold in '' | *[!0-9.]*) echo "bench-compare.sh: THRESHOLD must be a number of percent" >&2; exit 2 ;; esac

regressions=0
compared=0
shopt -s nullglob

# --- Google Benchmark: compare.py, U test -------------------------------------------

gb_pairs=()
for f in "$base"/bm_*.json; do
  n=$(basename "$f")
  [ -f "$new/$n" ] && gb_pairs+=("$n") || echo "bench-compare.sh: $n only in $base (skipped)" >&2
done
for f in "$new"/bm_*.json; do
  [ -f "$base/$(basename "$f")" ] || echo "bench-compare.sh: $(basename "$f") only in $new (skipped)" >&2
done

if [ ${#gb_pairs[@]} -gt 0 ]; then
  if [ ! -f "$compare_py" ] || ! "$py" -c 'import scipy' 2>/dev/null; then
    echo "bench-compare.sh: Google Benchmark's compare.py ($compare_py) under $py with SciPy is needed:" >&2
    echo "  scripts/deps.sh bench (libbenchmark-tools python3-scipy)" >&2
    exit 2
  fi
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  for n in "${gb_pairs[@]}"; do
    printf '\n== %s: %s -> %s (compare.py, U test)\n' "$n" "$base" "$new"
    if ! "$py" "$compare_py" --no-color -a --alpha "$alpha" -d "$tmp/$n.diff" benchmarks "$base/$n" "$new/$n"; then
      echo "bench-compare.sh: compare.py failed on $n" >&2
      exit 2
    fi
    # The verdict: median grew past the threshold and the U test says it is not noise.
    "$py" - "$tmp/$n.diff" "$threshold" "$alpha" <<'EOF'
import json, sys
diff, thr, alpha = json.load(open(sys.argv[1])), float(sys.argv[2]) / 100, float(sys.argv[3])
medians = {d["name"][: -len("_median")]: d for d in diff
           if d.get("run_type") == "aggregate" and d.get("aggregate_name") == "median"}
pvalue = {d["name"]: d["utest"].get("time_pvalue") for d in diff if d.get("utest")}
bad = n = 0
for name, d in medians.items():
    m = d["measurements"][0]
    change = m["time"]  # (new - base) / base, of the median real time
    p = pvalue.get(name)
    n += 1
    if change > thr and p is not None and p < alpha:
        bad += 1
        print("REGRESSION %-60s median %+.1f%%  (U test p = %.4f)" % (name, 100 * change, p))
    elif change > thr:
        print("noise      %-60s median %+.1f%%  (U test p = %s: not significant)" % (
            name, 100 * change, "n/a" if p is None else "%.4f" % p))
print("%d compared, %d regressions (median slower by more than %g%% and U-test p < %g)" % (
    n, bad, 100 * thr, alpha))
sys.exit(3 if bad else 0)
EOF
    rc=$?
    compared=$((compared + 1))
    case $rc in 0) ;; 3) regressions=$((regressions + 1)) ;; *) echo "bench-compare.sh: cannot read the diff of $n" >&2; exit 2 ;; esac
  done
fi

# --- weft-bench: its own compare ---------------------------------------------------------

wb_pairs=()
for f in "$base"/weft-bench-*.jsonl; do
  n=$(basename "$f")
  [ -f "$new/$n" ] && wb_pairs+=("$n") || echo "bench-compare.sh: $n only in $base (skipped)" >&2
done
unlike=0
if [ ${#wb_pairs[@]} -gt 0 ]; then
  [ -x "$wb" ] || { echo "bench-compare.sh: weft-bench not found at $wb (set WEFT_BENCH or BUILD_DIR)" >&2; exit 2; }
  extra=()
  [ "${ALLOW_DIFFERENT_ENV:-0}" = 1 ] && extra+=(--allow-different-env)
  [ -n "${JUNIT_DIR:-}" ] && { mkdir -p "$JUNIT_DIR" || exit 2; }
  for n in "${wb_pairs[@]}"; do
    printf '\n== %s: %s -> %s (weft-bench compare)\n' "$n" "$base" "$new"
    junit=()
    [ -n "${JUNIT_DIR:-}" ] && junit=(--junit "$JUNIT_DIR/${n%.jsonl}.xml")
    "$wb" compare "$base/$n" "$new/$n" --threshold "$threshold" "${extra[@]}" "${junit[@]}"
    rc=$?
    compared=$((compared + 1))
    case $rc in
      0) ;;
      1) regressions=$((regressions + 1)) ;;
      4) unlike=$((unlike + 1)) ;;
      *) echo "bench-compare.sh: weft-bench compare failed on $n" >&2; exit 2 ;;
    esac
  done
fi

if [ $compared -eq 0 ]; then
  echo "bench-compare.sh: no results file is in both $base and $new" >&2
  exit 2
fi
echo
if [ $regressions -gt 0 ]; then
  echo "bench-compare.sh: $regressions of $compared files show a regression beyond ${threshold}% and beyond noise"
  exit 1
fi
if [ $unlike -gt 0 ]; then
  echo "bench-compare.sh: $unlike of $compared weft-bench files were measured in different environments and not compared (ALLOW_DIFFERENT_ENV=1 compares them)"
  exit 4
fi
echo "bench-compare.sh: no regression beyond ${threshold}% and beyond noise in $compared files"
