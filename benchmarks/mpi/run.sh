#!/usr/bin/env bash
# Run weft_mpi's benchmarks (weft-mpi-bench) as docs/benchmarks.md reports
# them, and write their JSON lines and a log into a results folder:
#
#   benchmarks/mpi/run.sh [BUILD_DIR [RESULTS_DIR]]   defaults: build/release, results
#
# Into RESULTS_DIR/mpi go math.jsonl (the GPars math kernel on 1, 2 and 4
# ranks), exchange.jsonl, late.jsonl and uneven.jsonl (4 ranks: waits, then computation), and run.log.
# benchmarks/mpi/plot.sh draws the scaling plot from them. About four
# minutes on 2 cores.
#
# Ranks share the machine's cores: each rank gets OMP_NUM_THREADS = cores /
# ranks (at least 1), for the baselines and weft alike (the exchange runs a
# second time with OpenMP's default, a thread per core in every rank), and is not bound to
# a core (so that weft has its carriers). Open MPI is told to oversubscribe,
# and to run as root where CI runs as root. MPI_OPTS adds launcher options.
set -euo pipefail

build=${1:-build/release}
results=${2:-results}
bench=$build/benchmarks/mpi/weft-mpi-bench
[ -x "$bench" ] || { echo "run.sh: no $bench (a build with MPI found: make release after scripts/deps.sh base)" >&2; exit 2; }
command -v mpiexec >/dev/null || { echo "run.sh: no mpiexec (apt-get install openmpi-bin)" >&2; exit 2; }
out=$results/mpi
mkdir -p "$out"
log=$out/run.log
: >"$log"

launcher=(mpiexec)
if mpiexec --version 2>&1 | grep -Eq 'Open MPI|OpenRTE'; then
  launcher+=(--oversubscribe --bind-to none)
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# shellcheck disable=SC2206
launcher+=(${MPI_OPTS:-})
cores=$(nproc)

run() { # ranks, output file, command and options... (THREADS=k overrides cores / ranks)
  local np=$1 file=$2
  shift 2
  local threads=${THREADS:-$((cores / np))}
  [ "$threads" -ge 1 ] || threads=1
  echo "== $np ranks, OMP_NUM_THREADS=$threads: $*" | tee -a "$log" >&2
  OMP_NUM_THREADS=$threads "${launcher[@]}" -n "$np" "$bench" "$@" >>"$out/$file" 2>>"$log"
  tail -n 4 "$log" >&2
}

rm -f "$out"/{math,exchange,late,uneven}.jsonl
for np in 1 2 4; do
  run "$np" math.jsonl math --n 4194304 --reps 15
done
run 4 exchange.jsonl exchange --n 1000 --reps 15
# The OpenMP default (a thread per core in every rank), as a program that sets nothing gets it.
THREADS=$cores run 4 exchange.jsonl exchange --n 1000 --reps 15
run 4 late.jsonl late --n 1000 --reps 3 --late-ms 2000
run 4 uneven.jsonl uneven --n 100 --reps 5 --unit-us 10 --lanes 1
# The same shape of work computed (WEFT_CPU), with DYNAMIC's default chunk beside a fixed chunk of 4.
run 4 uneven.jsonl uneven --n 200 --reps 5 --unit-us 1 --cpu 1 --chunk 4
echo "run.sh: results in $out (plot: benchmarks/mpi/plot.sh $results)" >&2
