#!/usr/bin/env bash
# Draw weft_mpi's scaling plot from benchmarks/mpi/run.sh's results:
#
#   benchmarks/mpi/plot.sh [RESULTS_DIR]      default: results
#
# RESULTS_DIR/plots/mpi-scaling.png: the GPars math kernel's throughput
# (indices per second, median of the interleaved repetitions) against the
# number of ranks, for weft_mpi_pmap STATIC and DYNAMIC and for hand-written
# MPI + omp parallel for, with and without the scatter. On a 2-core machine
# 4 ranks share the cores: the flat end of the curve is the machine, not the
# code. Needs gnuplot and python3 (scripts/deps.sh plots).
set -euo pipefail
results=${1:-results}
src=$results/mpi/math.jsonl
[ -s "$src" ] || { echo "plot.sh: no $src (benchmarks/mpi/run.sh writes it)" >&2; exit 2; }
command -v gnuplot >/dev/null || { echo "plot.sh: gnuplot is needed (scripts/deps.sh plots)" >&2; exit 2; }
plots=$results/plots
data=$plots/data
mkdir -p "$data"

# One data file per variant: ranks, indices per second (median), min and max.
python3 - "$src" "$data" <<'PY'
import json, sys, re
src, data = sys.argv[1], sys.argv[2]
series = {}
for line in open(src):
    line = line.strip()
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    series.setdefault(r["variant"], []).append((r["ranks"], r["n"] / r["median_s"], r["n"] / r["max_s"], r["n"] / r["min_s"]))
for name, rows in series.items():
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    with open(f"{data}/mpi-scaling-{slug}.dat", "w") as f:
        f.write(f"# {name}: ranks, indices/s (median, slowest, fastest)\n")
        for row in sorted(rows):
            f.write("%d %.1f %.1f %.1f\n" % row)
PY

lines=()
add() { # slug, title, colour, point type
  local f=$data/mpi-scaling-$1.dat
  [ -s "$f" ] && lines+=("'$f' using 1:(\$2/1e6):(\$3/1e6):(\$4/1e6) with yerrorlines lw 2 pt $4 lc rgb '$3' title '$2'")
  return 0
}
add weft-mpi-pmap-static 'weft_mpi_pmap STATIC' '#1f77b4' 7
add weft-mpi-pmap-dynamic 'weft_mpi_pmap DYNAMIC' '#2ca02c' 5
add mpi-omp 'MPI + omp parallel for (scatter, compute, gather)' '#d62728' 9
add mpi-omp-no-scatter 'MPI + omp parallel for (compute, gather)' '#ff7f0e' 11
[ ${#lines[@]} -gt 0 ] || { echo "plot.sh: no series in $src" >&2; exit 2; }

gnuplot <<GP
set terminal pngcairo size 1000,720 noenhanced font "DejaVu Sans,12"
set grid xtics ytics lc rgb "#dddddd" lw 1
set key below box
set border lw 1.2
set output '$plots/mpi-scaling.png'
set title "GPars math kernel across MPI ranks ($(nproc) cores; OMP_NUM_THREADS = cores / ranks)"
set xlabel "MPI ranks"
set ylabel "million indices per second (median; bars: slowest to fastest)"
set xtics (1, 2, 4)
set xrange [0.8:4.4]
set yrange [0:*]
plot $(IFS=,; echo "${lines[*]}")
GP
echo "plot.sh: $plots/mpi-scaling.png" >&2
