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
#                      against N, log-log, two panels
#   pmap-speedup.png   CPU parallel map: speed-up over the sequential loop against n
#   pmap-grain.png     weft_pmap's speed-up against a fixed grain, for each n, with
#                      the automatic grain and omp parallel for as flat lines
#   gpars.png          the GPars table: time per call of each backend, as bars
#   future.png         ns per future start+get, fiber spawn+join and pthread_create+join
#   grain.png          efficiency against task granularity (weft-bench grain), with
#                      each backend's minimum effective task granularity (METG)
#
# Every point is the median of interleaved repetitions, with the fastest and
# the slowest as error bars. A point whose repetitions are too far apart to
# trust, (max - min) / median above PLOT_SPREAD_MAX (default 0.5; for a
# ratio to a baseline, the larger of the two spreads), is circled in red on
# its plot, counted in a note on the plot, and named on stderr
# (bench_data.py writes the list, plots/data/warnings.tsv).
#
# When RESULTS_DIR (or part of what the plots need) is missing, this script
# first runs the quick benchmark for what is missing (scripts/bench.sh
# --quick: about four minutes on 2 cores for all of it), says so, and keeps
# the results in RESULTS_DIR for next time. It needs a build with weft-bench
# and the Google Benchmark suites in $BUILD_DIR (default build/release; `make
# plots` builds it first).
#
# Needs gnuplot (gnuplot-nox) and python3 (standard library only):
# scripts/deps.sh plots.
set -euo pipefail

[ $# -le 1 ] || { echo "usage: scripts/plots.sh [RESULTS_DIR]" >&2; exit 2; }
results=${1:-results}
here=$(cd "$(dirname "$0")" && pwd)
plots=$results/plots
data=$plots/data
build=${BUILD_DIR:-build/release}
spread_max=${PLOT_SPREAD_MAX:-0.5}
export PLOT_SPREAD_MAX=$spread_max

command -v gnuplot >/dev/null || { echo "plots.sh: gnuplot is needed (scripts/deps.sh plots)" >&2; exit 2; }
command -v python3 >/dev/null || { echo "plots.sh: python3 is needed (scripts/deps.sh plots)" >&2; exit 2; }

# --- what the plots need, measured when it is missing ----------------------------

steps=()
parts=()
[ -s "$results/weft-bench-sleep.jsonl" ] || parts+=(sleep)
[ -s "$results/weft-bench-sweep.jsonl" ] || parts+=(sweep)
[ ${#parts[@]} -eq 0 ] || steps+=(sleep)
[ -s "$results/weft-bench-gpars.jsonl" ] || steps+=(gpars)
[ -s "$results/weft-bench-grain.jsonl" ] || steps+=(grain)
{ [ -s "$results/bm_pmap.json" ] && [ -s "$results/bm_future.json" ]; } || steps+=(gbench)
if [ ${#steps[@]} -gt 0 ]; then
  if [ -d "$results" ]; then
    echo "plots.sh: $results has no results for: ${steps[*]}" >&2
  else
    echo "plots.sh: no results folder '$results'" >&2
  fi
  if [ -x "$build/benchmarks/weft-bench/weft-bench" ]; then
    echo "plots.sh: running the quick benchmark for them first (scripts/bench.sh --quick $build $results;" \
      "about four minutes on 2 cores for all of it; make bench measures everything)" >&2
    mkdir -p "$results"
    BENCH_ONLY="${steps[*]}" BENCH_SLEEP_PARTS="${parts[*]}" "$here/bench.sh" --quick "$build" "$results" ||
      echo "plots.sh: some measurements of the quick run failed (see the logs in $results); plotting what there is" >&2
  else
    echo "plots.sh: no weft-bench in $build (make release builds it; BUILD_DIR names another build):" \
      "the plots of ${steps[*]} are left out" >&2
  fi
fi
[ -d "$results" ] || { echo "plots.sh: nothing to plot" >&2; exit 2; }

mkdir -p "$data"
rm -f "$data"/*.dat "$data"/warnings.tsv
python3 "$here/bench_data.py" plots "$results" "$data" >/dev/null

# Common look: 1000x650 PNGs, a readable font, a light grid.
common='set terminal pngcairo size 1000,650 noenhanced font "DejaVu Sans,12"
set grid xtics ytics mxtics mytics lc rgb "#dddddd" lw 1
set key top left box opaque
set border lw 1.2'

made=()
have() { [ -s "$data/$1" ]; }

# --- points too widely spread to trust ----------------------------------------------

pct=$(python3 -c "import sys; print('%g' % (100 * float(sys.argv[1])))" "$spread_max")
wide_title="circled: spread (max - min) / median over $pct %: too wide to trust"
# How many points of plot $1 are too widely spread.
nwide() {
  local n
  n=$(grep -c "^$1	" "$data/warnings.tsv" 2>/dev/null) || true
  echo "${n:-0}"
}
# The gnuplot layer that circles the wide points of file $1: x is $2, y $3, the flag column $4.
# The first layer of a plot carries the key's entry ($5 = title), the others none.
circles() {
  local t="notitle"
  [ -n "${5:-}" ] && t="title '$5'"
  printf "'%s' using (%s):(column(%s) > 0 ? %s : 1/0) with points pt 6 ps 3.2 lw 2 lc rgb '#e41a1c' %s\n" \
    "$1" "$2" "$4" "$3" "$t"
}
# The note at the foot of plot $1 when it has wide points.
wide_note() {
  local n
  n=$(nwide "$1")
  [ "$n" -gt 0 ] || return 0
  printf "set label 1 \"%s point%s circled in red: the repetitions spread over %s %% of the median; do not trust %s\" at screen 0.5,0.025 center tc rgb '#e41a1c' font ',10'\nset bmargin 5\n" \
    "$n" "$([ "$n" -eq 1 ] || echo s)" "$pct" "$([ "$n" -eq 1 ] && echo it || echo them)"
}

# --- the sleep plots ----------------------------------------------------------------------

# One line per series and sleep length (files sleep-<series>-<ms>.dat).
sleep_lines() { # $1: y expression for gnuplot's "using"; $2: "err" for error bars; $3: the wide-flag column
  local f base series ms color pt label style first=1 rings=()
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
    if awk -v c="$3" '!/^#/ && $c > 0 { found = 1 } END { exit !found }' "$f"; then
      rings+=("$(circles "$f" '$1' "$1" "$3" "$([ $first -eq 1 ] && echo "$wide_title")")")
      first=0
    fi
  done
  # The circles last, so that their entry ends the key.
  [ ${#rings[@]} -eq 0 ] || printf '%s\n' "${rings[@]}"
}

if [ -s "$data/sleep-meta.dat" ]; then
  read -r cores < <(grep -v '^#' "$data/sleep-meta.dat")
  # y = elapsed / sleep: 1 when every job's sleep overlaps; ceil(N / cores)
  # for a pool of cores threads. Error bars: min and max of the repetitions.
  mapfile -t plot < <(sleep_lines '$2/$6' err 7)
  plot+=("1 with lines dt 2 lw 1.5 lc rgb '#555555' title 'ideal: every sleep overlaps (= 1)'")
  plot+=("ceil(x/$cores) with lines dt 3 lw 1.5 lc rgb '#d62728' title 'ceil(N / cores): a pool of $cores threads'")
  gnuplot <<EOF
$common
set output '$plots/sleep-elapsed.png'
$(wide_note sleep-elapsed.png)
set title "N jobs that each sleep, on $cores cores: wall time in units of one sleep\n(median of interleaved repetitions; bars: fastest to slowest)"
set logscale xy
set xlabel "jobs N (log scale; from cores = $cores to 1000 x cores)"
set ylabel "elapsed wall time / one job's sleep (log scale)"
set format y "%g"
set xrange [1.5:3000]
set yrange [0.8:*]
plot $(IFS=,; echo "${plot[*]}")
EOF
  made+=(sleep-elapsed.png)

  mapfile -t plot < <(sleep_lines '$5' no 8)
  plot+=("x with lines dt 2 lw 1.5 lc rgb '#555555' title 'one per job (= N)'")
  gnuplot <<EOF
$common
set output '$plots/sleep-threads.png'
$(wide_note sleep-threads.png)
set title "OS threads of the process while N jobs sleep, $cores cores\n(/proc/self/task, counted mid-run; median of interleaved repetitions)"
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
# an estimate, drawn dashed), 3 and 4 its min and max; 5, 6, 7 the peak RSS in
# MiB; 10 and 11 the wide flags of the time and the RSS.
sweep_lines() { # $1: "time" or "rss"
  local f base series ms color pt label dt first=1 col rings=()
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
      col=10
    else
      printf "'%s' using 1:5:6:7 with yerrorlines lw 2 pt %s ps 1.3 lc rgb '%s' title '%s'\n" "$f" "$pt" "$color" "$label"
      col=11
    fi
    if awk -v c="$col" '!/^#/ && $c > 0 { found = 1 } END { exit !found }' "$f"; then
      rings+=("$(circles "$f" '$1' "$([ "$1" = time ] && echo '$2' || echo '$5')" "$col" "$([ $first -eq 1 ] && echo "$wide_title")")")
      first=0
    fi
  done
  [ ${#rings[@]} -eq 0 ] || printf '%s\n' "${rings[@]}"
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
$(wide_note sleep-sweep.png)
set multiplot layout 1,2 title "Fibers at scale: N jobs that each sleep 1 s on $cores cores, each run in a fresh process\n(median of interleaved repetitions; bars: fastest to slowest)"
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
unset label 1
set ylabel "peak RSS of the process, MiB (VmHWM, log scale)"
set yrange [*:*]
plot $(IFS=,; echo "${rplot[*]}")
unset multiplot
EOF
  made+=(sleep-sweep.png)
fi

# --- the CPU map plots (bm_pmap) -----------------------------------------------------------

if have pmap-n-Seq.dat; then
  plot=()
  rings=()
  first=1
  # Each series a little apart on the log axis, so that the error bars do not overlap.
  for s in "OmpFor 0.85 5 #d62728 omp parallel for (static)" "OmpTaskloop 0.93 9 #9467bd omp taskloop" \
    "Tbb 1.07 13 #2ca02c tbb::parallel_for" "WeftPmap 1.16 7 #1f77b4 weft_pmap (automatic grain)"; do
    read -r impl shift pt color label <<<"$s"
    f=$data/pmap-n-$impl.dat
    have "pmap-n-$impl.dat" || continue
    plot+=("'$f' using (\$1*$shift):2:3:4 with yerrorlines lw $([ "$impl" = WeftPmap ] && echo 3 || echo 2) pt $pt lc rgb '$color' title '$label'")
    if awk '!/^#/ && $5 > 0 { found = 1 } END { exit !found }' "$f"; then
      rings+=("$(circles "$f" "\$1*$shift" '$2' 5 "$([ $first -eq 1 ] && echo "$wide_title")")")
      first=0
    fi
  done
  plot+=("1 with lines dt 2 lw 1.5 lc rgb '#555555' title 'sequential loop (= 1)'" "${rings[@]}")
  gnuplot <<EOF
$common
set output '$plots/pmap-speedup.png'
$(wide_note pmap-speedup.png)
set title "CPU parallel map of the GPars math kernel: throughput over the sequential loop\n(median of interleaved repetitions over the sequential median; bars: slowest to fastest repetition)"
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
  first=1
  rings=()
  for n in 100 10000 1000000; do
    c=${colors[$i]}
    i=$((i + 1))
    f=$data/pmap-grain-$n.dat
    have pmap-grain-$n.dat || continue
    case $n in 100) lab='n = 100' ;; 10000) lab='n = 10 000' ;; 1000000) lab='n = 1 000 000' ;; esac
    plot+=("'$f' using 1:2:5:6 with yerrorlines lw 2 pt 7 lc rgb '$c' title 'fixed grain, $lab'")
    plot+=("'$f' using 1:3 with lines dt 2 lw 2 lc rgb '$c' title 'automatic grain, $lab'")
    plot+=("'$f' using 1:4 with lines dt 3 lw 1.5 lc rgb '$c' title 'omp parallel for, $lab'")
    if awk '!/^#/ && $7 > 0 { found = 1 } END { exit !found }' "$f"; then
      rings+=("$(circles "$f" '$1' '$2' 7 "$([ $first -eq 1 ] && echo "circled: spread over $pct %")")")
      first=0
    fi
  done
  plot+=("${rings[@]}")
  gnuplot <<EOF
$common
set output '$plots/pmap-grain.png'
$(wide_note pmap-grain.png)
set title "weft_pmap with a fixed grain (indices per claim) against the automatic grain\n(median of interleaved repetitions; bars: slowest to fastest)"
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

# --- the GPars table and the futures, as bars ----------------------------------------------

if have gpars.dat; then
  ncases=$(grep -vc '^#' "$data/gpars-cases.dat")
  mapfile -t cases < <(grep -v '^#' "$data/gpars-cases.dat")
  plot=()
  colors=('#1f77b4' '#ff7f0e' '#2ca02c')
  gap=1
  for ((j = 0; j < ncases; j++)); do
    read -r cname citems cloops <<<"${cases[$j]}"
    col=$((3 * j + 2))
    if [ $j -eq 0 ]; then
      plot+=("'$data/gpars.dat' using $col:$((col + 1)):$((col + 2)):xtic(1) lc rgb '${colors[$j]}' title '$cname ($citems elements per call)'")
    else
      plot+=("'' using $col:$((col + 1)):$((col + 2)) lc rgb '${colors[$j]}' title '$cname ($citems elements per call)'")
    fi
  done
  # A wide bar's circle sits above its error bar: bar j of cluster i is at i + (j - (N - 1) / 2) / (N + gap).
  if grep -qv '^#' "$data/gpars-wide.dat" 2>/dev/null; then
    plot+=("'$data/gpars-wide.dat' using (\$1 + (\$2 - ($ncases - 1) / 2.0) / ($ncases + $gap)):(\$3 * 1.6) with points pt 6 ps 3 lw 2 lc rgb '#e41a1c' title '$wide_title'")
  fi
  gnuplot <<EOF
$common
set output '$plots/gpars.png'
$(wide_note gpars.png)
set title "The GPars question: time per call of a map, sequential and parallel\n(weft-bench gpars; median of interleaved repetitions, bars: fastest to slowest)"
set style data histogram
set style histogram errorbars gap $gap lw 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set logscale y
set yrange [1:*]
set offsets 0, 0, graph 0.12, 0
set ylabel "time per call (microseconds, log scale; lower is better)"
set xlabel "backend"
set xtics nomirror rotate by -20
set bmargin 7
set key top left
set format y "%g"
plot $(IFS=,; echo "${plot[*]}")
EOF
  made+=(gpars.png)
fi

if have future.dat; then
  # Horizontal bars, one per case (row i of the file at y = i), labels on the left; the whiskers are the
  # fastest and slowest repetition, a circle marks a case whose repetitions spread too far.
  extra=""
  if awk '!/^#/ && $NF > 0 { found = 1 } END { exit !found }' "$data/future.dat"; then
    extra=", '' using (\$6 > 0 ? \$2 : 1/0):0 with points pt 6 ps 3.5 lw 2 lc rgb '#e41a1c' title 'circled: spread over $pct %'"
  fi
  gnuplot <<EOF
$common
set terminal pngcairo size 1000,500 noenhanced font "DejaVu Sans,12"
set output '$plots/future.png'
$(wide_note future.png)
set title "Start a task and wait for it\n(bm_future, median of interleaved repetitions; whiskers: fastest to slowest)" offset -10,0
set logscale x
set xrange [10:1e8]
set xlabel "time per start + get (log scale; shorter is better)"
set xtics ("10 ns" 10, "100 ns" 100, "1 us" 1e3, "10 us" 1e4, "100 us" 1e5, "1 ms" 1e6, "10 ms" 1e7, "100 ms" 1e8)
set yrange [-0.6:*] reverse
set ytics nomirror
set grid noytics
set style fill solid 0.85 border -1
set key top right font ",10"
set lmargin 48
set bmargin 5
plot '$data/future.dat' using (sqrt(\$2*10)):0:(10):2:(\$0-0.35):(\$0+0.35):ytic(1) with boxxyerror lc rgb '#1f77b4' notitle, \\
     '' using 2:0:4:5 with xerrorbars pt -1 lw 1.5 lc rgb '#333333' notitle, \\
     '' using (\$5 * 1.15):0:3 with labels left notitle$extra
EOF
  made+=(future.png)
fi

# --- the granularity lesson (weft-bench grain) ----------------------------------------------

if have grain-metg.dat; then
  read -r workers iter_ns < <(grep -v '^#' "$data/grain-meta.dat")
  plot=()
  metg=()
  rings=()
  first=1
  colors=('#1f77b4' '#17becf' '#d62728' '#9467bd' '#ff7f0e')
  pts=(7 5 9 11 13)
  i=0
  while read -r b m bound; do
    f=$data/grain-$b.dat
    c=${colors[$((i % 5))]}
    pt=${pts[$((i % 5))]}
    i=$((i + 1))
    have "grain-$b.dat" || continue
    case $bound in
      interpolated) note=": METG $(python3 -c "import sys; v=float(sys.argv[1]); print('%.3g ns' % v if v < 1e3 else '%.3g us' % (v/1e3) if v < 1e6 else '%.3g ms' % (v/1e6))" "$m")" ;;
      at_most) note=": METG at most $(python3 -c "import sys; v=float(sys.argv[1]); print('%.3g ns' % v if v < 1e3 else '%.3g us' % (v/1e3) if v < 1e6 else '%.3g ms' % (v/1e6))" "$m")" ;;
      *) note=": 50 % not reached" ;;
    esac
    plot+=("'$f' using 1:2:3:4 with yerrorlines lw 2 pt $pt ps 1.2 lc rgb '$c' title '$b$note'")
    [ "$bound" = none ] || [ "$m" = NaN ] || metg+=("$m $c")
    if awk '!/^#/ && $6 > 0 { found = 1 } END { exit !found }' "$f"; then
      rings+=("$(circles "$f" '$1' '$2' 6 "$([ $first -eq 1 ] && echo "$wide_title")")")
      first=0
    fi
  done < <(grep -v '^#' "$data/grain-metg.dat")
  # Each METG as a diamond on the 50 % line.
  : >"$data/grain-metg-points.dat"
  for x in "${metg[@]}"; do echo "${x%% *} 0.5" >>"$data/grain-metg-points.dat"; done
  [ -s "$data/grain-metg-points.dat" ] &&
    plot+=("'$data/grain-metg-points.dat' using 1:2 with points pt 13 ps 2 lc rgb '#000000' title 'METG(50 %): where each crosses 50 %'")
  plot+=("0.5 with lines dt 2 lw 1.5 lc rgb '#555555' title '50 % efficiency'" "${rings[@]}")
  gnuplot <<EOF
$common
set terminal pngcairo size 1150,680 noenhanced font "DejaVu Sans,12"
set output '$plots/grain.png'
$(wide_note grain.png)
set title "How small a task may be: efficiency against task granularity, $workers workers (weft-bench grain)\n(median of interleaved repetitions; bars: lowest to highest; Task Bench's METG, SC'20)"
set logscale x
set xlabel "task granularity = elapsed x workers / tasks (log scale; the same kernel, $iter_ns ns an iteration)"
set ylabel "efficiency = useful work / (elapsed x workers)"
set xtics ("100 ns" 100, "1 us" 1e3, "10 us" 1e4, "100 us" 1e5, "1 ms" 1e6, "10 ms" 1e7, "100 ms" 1e8)
set yrange [0:1.25]
set ytics ("0%%" 0, "25%%" 0.25, "50%%" 0.5, "75%%" 0.75, "100%%" 1, "125%%" 1.25)
set key bottom right box opaque font ",10"
plot $(IFS=,; echo "${plot[*]}")
EOF
  made+=(grain.png)
fi

if [ ${#made[@]} -eq 0 ]; then
  echo "plots.sh: nothing to plot in $results (run make bench first)" >&2
  exit 1
fi

# Say on stderr what the plots circle.
if grep -qv '^#' "$data/warnings.tsv" 2>/dev/null; then
  while IFS=$'\t' read -r p point sp; do
    case $p in '#'*) continue ;; esac
    echo "plots.sh: warning: $p: $point: spread (max - min) / median = $sp > $spread_max: too wide to trust (circled)" >&2
  done <"$data/warnings.tsv"
fi
echo "plots.sh: wrote ${made[*]/#/$plots/}" >&2
