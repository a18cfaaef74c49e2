#!/usr/bin/env bash
# Draw PNG plots from a results folder written by scripts/bench.sh (what
# `make plots` runs):
#
#   scripts/plots.sh [RESULTS_DIR]      default: results
#
# Into RESULTS_DIR/plots go:
#
#   sleep-elapsed.png  N jobs that each sleep: wall time against N, log-log, on
#                      fibers, on the fallback, with a thread per job and on Go
#   sleep-threads.png  the OS threads each of those used, against N
#   sleep-sweep.png    fibers at scale: 2 to 10^6 jobs sleeping 1 s on weft's fibers,
#                      on Go goroutines and on the fallback: wall time and peak RSS
#                      against N, log-log, two panels (median; bars: min to max)
#   pmap-speedup.png   CPU parallel map: speed-up over the sequential loop against n
#   pmap-grain.png     weft_pmap's speed-up against a fixed grain, for each n, with
#                      the automatic grain and omp parallel for as flat lines
#   gpars.png          the GPars table: time per call of each backend, as bars
#   future.png         ns per future start+get, fiber spawn+join and pthread_create+join
#
# Plots whose data the folder lacks are left out, except the sleep plots:
# when RESULTS_DIR has no weft-bench sleep results (or no sweep), this
# script measures them itself (scripts/bench-sleep.sh: modest sleeps, about
# two minutes on 2 cores; the sweep about three more), says so,
# and keeps them in RESULTS_DIR for next time.
# It finds weft-bench in $BUILD_DIR (default build/release) or as $WEFT_BENCH.
#
# Needs gnuplot (gnuplot-nox) and python3 (standard library only):
# scripts/deps.sh plots.
set -euo pipefail

[ $# -le 1 ] || { echo "usage: scripts/plots.sh [RESULTS_DIR]" >&2; exit 2; }
results=${1:-results}
here=$(cd "$(dirname "$0")" && pwd)
plots=$results/plots
data=$plots/data

command -v gnuplot >/dev/null || { echo "plots.sh: gnuplot is needed (scripts/deps.sh plots)" >&2; exit 2; }
command -v python3 >/dev/null || { echo "plots.sh: python3 is needed (scripts/deps.sh plots)" >&2; exit 2; }
[ -d "$results" ] || { echo "plots.sh: no results folder '$results' (make bench writes one)" >&2; exit 2; }

missing=()
[ -s "$results/weft-bench-sleep.jsonl" ] || missing+=(sleep)
[ -s "$results/weft-bench-sweep.jsonl" ] || missing+=(sweep)
if [ ${#missing[@]} -gt 0 ]; then
  wb=${WEFT_BENCH:-${BUILD_DIR:-build/release}/benchmarks/weft-bench/weft-bench}
  if [ -x "$wb" ]; then
    echo "plots.sh: $results has no weft-bench ${missing[*]} results: measuring them now with $wb" >&2
    echo "plots.sh: (scripts/bench-sleep.sh: 200 ms sleeps, 10 ms on the fallback; 1 s in the sweep)" >&2
    BENCH_SLEEP_PARTS="${missing[*]}" "$here/bench-sleep.sh" "$wb" "$results" 3 "$results/weft-bench-sleep.log" ||
      echo "plots.sh: some sleep measurements failed (see $results/weft-bench-sleep.log)" >&2
  else
    echo "plots.sh: no weft-bench ${missing[*]} results and no weft-bench at $wb: those plots left out" >&2
  fi
fi

mkdir -p "$data"
rm -f "$data"/*.dat
python3 "$here/bench_data.py" plots "$results" "$data" >/dev/null

# Common look: 1000x650 PNGs, a readable font, a light grid.
common='set terminal pngcairo size 1000,650 noenhanced font "DejaVu Sans,12"
set grid xtics ytics mxtics mytics lc rgb "#dddddd" lw 1
set key top left box opaque
set border lw 1.2'

made=()
have() { [ -s "$data/$1" ]; }

# One line per series and sleep length (files sleep-<series>-<ms>.dat).
sleep_lines() { # $1: y expression for gnuplot's "using"; $2: "err" for error bars
  local f base series ms color pt label style
  for f in "$data"/sleep-fallback-*.dat "$data"/sleep-threads-*.dat "$data"/sleep-go-*.dat "$data"/sleep-fibers-*.dat; do
    [ -s "$f" ] || continue
    base=$(basename "$f" .dat)
    series=${base#sleep-}
    ms=${series##*-}
    series=${series%-*}
    case $series in
      fibers) color='#1f77b4' pt=7 label="weft fibers, WEFT_FIBERS=1 ($ms ms sleeps)" ;;
      threads) color='#ff7f0e' pt=9 label="one pthread per job ($ms ms sleeps)" ;;
      go) color='#2ca02c' pt=13 label="Go goroutines ($ms ms sleeps)" ;;
      fallback) color='#d62728' label="fallback, WEFT_FIBERS=0: $cores OpenMP threads ($ms ms sleeps)"
        pt=5; [ "$ms" -lt 100 ] && pt=4 ;;
      *) continue ;;
    esac
    if [ "$2" = err ]; then style="using 1:($1):(\$3/\$6):(\$4/\$6) with yerrorlines"; else style="using 1:($1) with linespoints"; fi
    printf "'%s' %s lw 2 pt %s ps 1.3 lc rgb '%s' title '%s'\n" "$f" "$style" "$pt" "$color" "$label"
  done
}

if [ -s "$data/sleep-meta.dat" ]; then
  read -r cores < <(grep -v '^#' "$data/sleep-meta.dat")
  # y = elapsed / sleep: 1 when every job's sleep overlaps; ceil(N / cores)
  # for a pool of cores threads. Error bars: min and max of the repetitions.
  mapfile -t plot < <(sleep_lines '$2/$6' err)
  plot+=("1 with lines dt 2 lw 1.5 lc rgb '#555555' title 'ideal: every sleep overlaps (= 1)'")
  plot+=("ceil(x/$cores) with lines dt 3 lw 1.5 lc rgb '#d62728' title 'ceil(N / cores): a pool of $cores threads'")
  gnuplot <<EOF
$common
set output '$plots/sleep-elapsed.png'
set title "N jobs that each sleep, on $cores cores: wall time in units of one sleep (median; bars: min to max)"
set logscale xy
set xlabel "jobs N (log scale; from cores = $cores to 1000 x cores)"
set ylabel "elapsed wall time / one job's sleep (log scale)"
set format y "%g"
set xrange [1.5:3000]
set yrange [0.8:*]
plot $(IFS=,; echo "${plot[*]}")
EOF
  made+=(sleep-elapsed.png)

  mapfile -t plot < <(sleep_lines '$5' no)
  plot+=("x with lines dt 2 lw 1.5 lc rgb '#555555' title 'one per job (= N)'")
  gnuplot <<EOF
$common
set output '$plots/sleep-threads.png'
set title "OS threads of the process while N jobs sleep, $cores cores (/proc/self/task, counted mid-run)"
set logscale xy
set xlabel "jobs N (log scale)"
set ylabel "OS threads (log scale)"
set format y "%g"
set xrange [1.5:3000]
set yrange [1:5000]
plot $(IFS=,; echo "${plot[*]}")
EOF
  made+=(sleep-threads.png)
fi

# One line per series and sleep of the sweep (files sweep-<series>-<ms>.dat):
# column 2 is the wall time scaled to 1 s sleeps (a 10 ms fallback run x 100,
# an estimate, drawn dashed), 3 and 4 its min and max; 5, 6, 7 the peak RSS in MiB.
sweep_lines() { # $1: "time" or "rss"
  local f base series ms color pt label dt
  for f in "$data"/sweep-fallback-*.dat "$data"/sweep-go-*.dat "$data"/sweep-fibers-*.dat; do
    [ -s "$f" ] || continue
    base=$(basename "$f" .dat)
    series=${base#sweep-}
    ms=${series##*-}
    series=${series%-*}
    dt=1
    case $series in
      fibers) color='#1f77b4' pt=7 label="weft fibers (WEFT_FIBERS=1)" ;;
      go) color='#2ca02c' pt=13 label="Go goroutines" ;;
      fallback) color='#d62728' pt=5 label="fallback, WEFT_FIBERS=0: $cores OpenMP threads"
        if [ "$ms" -ne 1000 ]; then
          pt=4
          if [ "$1" = time ]; then dt=2 label="$label ($ms ms sleeps x $((1000 / ms)): estimate)"; else label="$label ($ms ms sleeps)"; fi
        fi ;;
      *) continue ;;
    esac
    if [ "$1" = time ]; then
      printf "'%s' using 1:2:3:4 with yerrorlines dt %s lw 2 pt %s ps 1.3 lc rgb '%s' title '%s'\n" "$f" "$dt" "$pt" "$color" "$label"
    else
      printf "'%s' using 1:5:6:7 with yerrorlines lw 2 pt %s ps 1.3 lc rgb '%s' title '%s'\n" "$f" "$pt" "$color" "$label"
    fi
  done
}

if [ -s "$data/sweep-meta.dat" ]; then
  read -r cores < <(grep -v '^#' "$data/sweep-meta.dat")
  mapfile -t tplot < <(sweep_lines time)
  tplot+=("1 with lines dt 3 lw 1.5 lc rgb '#555555' title 'one sleep (1 s): every sleep overlaps'")
  mapfile -t rplot < <(sweep_lines rss)
  gnuplot <<EOF
$common
set terminal pngcairo size 1500,700 noenhanced font "DejaVu Sans,12"
set output '$plots/sleep-sweep.png'
set multiplot layout 1,2 title "Fibers at scale: N jobs that each sleep 1 s on $cores cores, each run in a fresh process (median; bars: min to max)"
set logscale xy
set xtics ("2" 2, "20" 20, "200" 200, "2 000" 2000, "20 000" 20000, "100 000" 100000, "1 000 000" 1000000)
set xrange [1.4:1.6e6]
set xlabel "jobs N (log scale)"
set format y "%g"
# Room above the lines for the key: they reach every corner of the data.
set offsets 0, 0, graph 0.3, 0
set key top left box opaque font ",10"
set ylabel "elapsed wall time, s (log scale)"
set yrange [0.5:*]
plot $(IFS=,; echo "${tplot[*]}")
set ylabel "peak RSS of the process, MiB (VmHWM, log scale)"
set yrange [*:*]
plot $(IFS=,; echo "${rplot[*]}")
unset multiplot
EOF
  made+=(sleep-sweep.png)
fi

if have pmap-n-Seq.dat; then
  plot=()
  # Each series a little apart on the log axis, so that the error bars do not overlap.
  have pmap-n-OmpFor.dat && plot+=("'$data/pmap-n-OmpFor.dat' using (\$1*0.85):2:3:4 with yerrorlines lw 2 pt 5 lc rgb '#d62728' title 'omp parallel for (static)'")
  have pmap-n-OmpTaskloop.dat && plot+=("'$data/pmap-n-OmpTaskloop.dat' using (\$1*0.93):2:3:4 with yerrorlines lw 2 pt 9 lc rgb '#9467bd' title 'omp taskloop'")
  have pmap-n-Tbb.dat && plot+=("'$data/pmap-n-Tbb.dat' using (\$1*1.07):2:3:4 with yerrorlines lw 2 pt 13 lc rgb '#2ca02c' title 'tbb::parallel_for'")
  have pmap-n-WeftPmap.dat && plot+=("'$data/pmap-n-WeftPmap.dat' using (\$1*1.16):2:3:4 with yerrorlines lw 3 pt 7 lc rgb '#1f77b4' title 'weft_pmap (automatic grain)'")
  plot+=("1 with lines dt 2 lw 1.5 lc rgb '#555555' title 'sequential loop (= 1)'")
  gnuplot <<EOF
$common
set output '$plots/pmap-speedup.png'
set title "CPU parallel map of the GPars math kernel: throughput over the sequential loop\n(median of the repetitions; bars: slowest to fastest repetition)"
set logscale x
set logscale y
set xlabel "elements per call n (log scale)"
set ylabel "speed-up over sequential (items/s ratio, log scale)"
set xtics ("100" 100, "1 000" 1000, "10 000" 10000, "100 000" 100000, "1 000 000" 1000000)
set format y "%g"
set xrange [50:2000000]
set yrange [0.001:10]
set key bottom right
plot $(IFS=,; echo "${plot[*]}")
EOF
  made+=(pmap-speedup.png)
fi

if have pmap-grain-1000000.dat || have pmap-grain-10000.dat; then
  plot=()
  colors=('#1f77b4' '#2ca02c' '#d62728')
  i=0
  for n in 100 10000 1000000; do
    c=${colors[$i]}
    i=$((i + 1))
    have pmap-grain-$n.dat || continue
    case $n in 100) lab='n = 100' ;; 10000) lab='n = 10 000' ;; 1000000) lab='n = 1 000 000' ;; esac
    plot+=("'$data/pmap-grain-$n.dat' using 1:2 with linespoints lw 2 pt 7 lc rgb '$c' title 'fixed grain, $lab'")
    plot+=("'$data/pmap-grain-$n.dat' using 1:3 with lines dt 2 lw 2 lc rgb '$c' title 'automatic grain, $lab'")
    plot+=("'$data/pmap-grain-$n.dat' using 1:4 with lines dt 3 lw 1.5 lc rgb '$c' title 'omp parallel for, $lab'")
  done
  gnuplot <<EOF
$common
set output '$plots/pmap-grain.png'
set title "weft_pmap with a fixed grain (indices per claim) against the automatic grain (median of the repetitions)"
set logscale x 4
set logscale y
set xlabel "grain: indices claimed at a time (log scale)"
set ylabel "speed-up over sequential (log scale)"
set format x "%g"
set format y "%g"
set key outside right top vertical box
set terminal pngcairo size 1250,650 noenhanced font "DejaVu Sans,12"
plot $(IFS=,; echo "${plot[*]}")
EOF
  made+=(pmap-grain.png)
fi

if have gpars.dat; then
  ncases=$(grep -vc '^#' "$data/gpars-cases.dat")
  mapfile -t cases < <(grep -v '^#' "$data/gpars-cases.dat")
  plot=()
  colors=('#1f77b4' '#ff7f0e' '#2ca02c')
  for ((j = 0; j < ncases; j++)); do
    read -r cname citems cloops <<<"${cases[$j]}"
    col=$((j + 2))
    if [ $j -eq 0 ]; then
      plot+=("'$data/gpars.dat' using $col:xtic(1) lc rgb '${colors[$j]}' title '$cname ($citems elements per call)'")
    else
      plot+=("'' using $col lc rgb '${colors[$j]}' title '$cname ($citems elements per call)'")
    fi
  done
  gnuplot <<EOF
$common
set output '$plots/gpars.png'
set title "The GPars question: time per call of a map, sequential and parallel (weft-bench gpars, median)"
set style data histogram
set style histogram cluster gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set logscale y
set yrange [1:*]
set offsets 0, 0, graph 0.08, 0
set ylabel "time per call (microseconds, log scale; lower is better)"
set xlabel "backend"
set xtics nomirror rotate by -20
set bmargin 6
set key top left
set format y "%g"
plot $(IFS=,; echo "${plot[*]}")
EOF
  made+=(gpars.png)
fi

if have future.dat; then
  # Horizontal bars, one per case (row i of the file at y = i), labels on the left.
  gnuplot <<EOF
$common
set terminal pngcairo size 1000,500 noenhanced font "DejaVu Sans,12"
set output '$plots/future.png'
set title "Start a task and wait for it (bm_future, median)" offset -10,0
set logscale x
set xrange [10:1e8]
set xlabel "time per start + get (log scale; shorter is better)"
set xtics ("10 ns" 10, "100 ns" 100, "1 us" 1e3, "10 us" 1e4, "100 us" 1e5, "1 ms" 1e6, "10 ms" 1e7, "100 ms" 1e8)
set yrange [-0.6:*] reverse
set ytics nomirror
set grid noytics
set style fill solid 0.85 border -1
set key off
set lmargin 48
plot '$data/future.dat' using (sqrt(\$2*10)):0:(10):2:(\$0-0.35):(\$0+0.35):ytic(1) with boxxyerror lc rgb '#1f77b4', \\
     '' using 2:0:3 with labels left offset 0.8,0
EOF
  made+=(future.png)
fi

if [ ${#made[@]} -eq 0 ]; then
  echo "plots.sh: nothing to plot in $results (run make bench first)" >&2
  exit 1
fi
echo "plots.sh: wrote ${made[*]/#/$plots/}" >&2
