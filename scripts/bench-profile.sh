#!/usr/bin/env bash
# Weft's own share of a network round trip (issue 31, step 1): the three
# network workloads under perf, broken down per message:
#
#   scripts/bench-profile.sh [--only W[,W...]] [--top N] [--requests R] [--keep DIR] [BUILD_DIR]
#                                                              default: build/release
#
# The workloads (W: echo1000, echo9000, http; default all three):
#   echo1000  weft-bench echo --connections 1000 --messages 100 --backend weft --json, and then
#             weft-go-echo -connections 1000 -messages 100 -warmup-connections 1000 (weft-bench's Go
#             baseline, the same protocol with a goroutine per connection on both sides) as the
#             peer's baseline, where this build has it
#   echo9000  the same with 9000 connections of 20 messages
#   http      weft-bench http --url URL --requests R --concurrency 1000 --keepalive --backend weft --json
#             (R default 200000, about as many as wrk makes in its 3 s: weft-bench opens its 1000
#             connections anew for each warm-up and repetition, and with 60000 requests nginx's
#             set-up and teardown of them were charged to fewer requests than beside wrk)
#             against nginx serving a 9216-byte page as scripts/bench-net.sh sets it
#             up (nproc workers, sendfile, keep-alive), and then wrk -t2 -c1000 -d3s on the same URL as
#             the peer's baseline
#
# Each runs once under
#   perf record -e cpu-clock/period=100000/ -e context-switches/period=1/
# (system-wide, -a, for http, so that nginx and wrk are in it): a CPU
# sample per 100 us of a thread's CPU time and a record per context switch
# (the thread switched out: a sleep, or a preemption). Software events only:
# this VM has no hardware counters, so there are no cache-miss figures; a
# sample lands where the timer interrupt found the thread (with some skid).
#
# Reported per message (echo: a round trip, both ends in the one process,
# the untimed warm-ups' messages counted too, and connection set-up included;
# http: a request, warm-ups included; weft-bench warms up twice, once before
# all repetitions and once right before each, and says how often in its
# record's warmup_runs):
#   - the process's CPU (samples x 100 us): kernel, libweft, libc, the rest;
#   - libweft's top N functions (default 12): share of the process's samples, ns a message;
#   - context switches of weft's carriers (weft-carrier-*), of the process's
#     other threads, and of the peer (http: nginx's workers; beside wrk too);
#   - weft's own counters (weft-bench's weft_stats, which cover the timed
#     messages only, and are divided by those): carrier sleeps
#     (carrier_wakeups), poller waits, parks, ring submissions.
#
# Needs perf (Debian: linux-perf) allowed to sample (root, or
# kernel.perf_event_paranoid <= 0; -a needs -1), a build with weft-bench,
# and for http nginx and wrk (scripts/deps.sh bench); a part that lacks one
# is skipped with a message. --keep DIR keeps the perf.data files and the
# JSON records there. Time: about two minutes. Exit status: 0 (skips
# included), 1 when a run failed, 2 on a usage error.
set -euo pipefail
# The private nginx (its folder, config and page), shared with scripts/bench-net.sh.
# shellcheck source-path=SCRIPTDIR source=lib/nginx.sh
. "$(dirname "$0")/lib/nginx.sh"

usage() {
  echo "usage: scripts/bench-profile.sh [--only W[,W...]] [--top N] [--requests R] [--keep DIR] [BUILD_DIR]" >&2
  exit 2
}
only=echo1000,echo9000,http
top=12
requests=200000
keep=
build=
while [ $# -gt 0 ]; do
  case "$1" in
    --only) [ $# -ge 2 ] || usage; only=$2; shift 2 ;;
    --top) [ $# -ge 2 ] || usage; top=$2; shift 2 ;;
    --requests) [ $# -ge 2 ] || usage; requests=$2; shift 2 ;;
    --keep) [ $# -ge 2 ] || usage; keep=$2; shift 2 ;;
    -h | --help) usage ;;
    -*) echo "bench-profile.sh: unknown option '$1'" >&2; usage ;;
    *) [ -z "$build" ] || usage; build=$1; shift ;;
  esac
done
build=${build:-build/release}
for v in "$top" "$requests"; do
  case "$v" in '' | *[!0-9]* | 0) echo "bench-profile.sh: '$v' is not a positive integer" >&2; usage ;; esac
done
wb=$build/benchmarks/weft-bench/weft-bench
[ -x "$wb" ] || { echo "bench-profile.sh: $wb not found: build weft with benchmarks first (make release)" >&2; exit 1; }
if ! command -v perf >/dev/null 2>&1; then
  echo "bench-profile.sh: skipped: perf not found (Debian: apt-get install linux-perf)"
  exit 0
fi
if ! perf record -q -e cpu-clock -o /dev/null -- true >/dev/null 2>&1; then
  echo "bench-profile.sh: skipped: perf may not sample here (root, or kernel.perf_event_paranoid <= 0)"
  exit 0
fi
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench-profile.XXXXXX")
weft_nginx_pid= # set by weft_nginx_start
# shellcheck disable=SC2317 # run by the trap
cleanup() {
  weft_nginx_stop
  if [ -n "$keep" ]; then
    mkdir -p "$keep"
    cp "$tmp"/*.data "$tmp"/*.json "$keep"/ 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
rc=0
events=(-e cpu-clock/period=100000/ -e context-switches/period=1/)

# The value of a numeric key of a compact JSON object ($1 the line, $2 the key), or 0.
json_num() {
  local v
  v=$(printf '%s\n' "$1" | grep -o "\"$2\":[-0-9.eE+]*" | head -1 | cut -d: -f2)
  echo "${v:-0}"
}

# The samples of a perf.data, one line each: event comm pid dso sym.
samples() {
  perf script -i "$1" -F comm,pid,tid,event,ip,sym,dso 2>/dev/null | awk '{
    ev = ""; for (i = 1; i <= NF; i++) if ($i ~ /:$/) { ev = $i; break }
    if (ev == "") next
    comm = $1; for (j = 2; j < i - 1; j++) comm = comm "_" $j   # names with spaces
    pid = $(i - 1); sub(/\/.*/, "", pid)
    dso = $NF; gsub(/[()]/, "", dso); n = split(dso, parts, "/"); dso = parts[n]
    sym = ""; for (j = i + 2; j < NF; j++) sym = sym (sym == "" ? "" : "_") $j
    if (sym == "") sym = "[unknown]"
    print (ev ~ /cpu-clock/ ? "cpu" : "cs"), comm, pid, dso, sym
  }'
}

# The pid with the most records of threads named $2 in samples file $1 (a system-wide record may hold
# other processes of that name too).
busiest_pid() {
  awk -v c="$2" '$2 == c { n[$3]++ } END { for (p in n) if (n[p] > m) { m = n[p]; b = p }; print b }' "$1"
}

# Report one recorded run: $1 the samples file, $2 the label, $3 messages, $4 the weft pid ("" = the
# process of the weft-carrier threads), $5 the JSON record (weft_stats), $6 the peer's comm or "", $7 the
# messages weft_stats count (the timed ones).
report() {
  local f=$1 label=$2 msgs=$3 pid=$4 rec=$5 peer=$6 smsgs=${7:-$3}
  # The weft-bench process: the busiest of that name (a system-wide record may hold other programs' too).
  if [ -z "$pid" ]; then pid=$(busiest_pid "$f" weft-bench); fi
  echo
  echo "== $label: $msgs messages"
  awk -v pid="$pid" -v msgs="$msgs" -v top="$top" -v peer="$peer" '
    $1 == "cpu" && $3 == pid {
      n++
      if ($4 ~ /kernel/) k++
      else if ($4 ~ /^libweft/) { w++; fn[$5]++ }
      else if ($4 ~ /^libc/) c++
      else o++
    }
    $1 == "cs" && $3 == pid { if ($2 ~ /^weft-carrier/) csc++; else cso++ }
    $1 == "cs" && peer != "" && $2 == peer { csp++ }
    $1 == "cpu" && peer != "" && $2 == peer { pn++ }
    END {
      us = 100 / msgs  # one sample: 100 us of CPU
      printf "CPU a message (us): process %.2f = kernel %.2f + libweft %.2f + libc %.2f + other user %.2f\n",
        n * us, k * us, w * us, c * us, o * us
      printf "libweft: %.1f%% of the process'"'"'s samples (%d of %d)\n", n ? 100 * w / n : 0, w, n
      printf "context switches a message: weft carriers %.4f, the process'"'"'s other threads %.4f", csc / msgs, cso / msgs
      if (peer != "") printf ", %s %.4f (its CPU %.2f us a message)", peer, csp / msgs, pn * us
      printf "\n"
      printf "libweft by function (share of the process'"'"'s samples, ns a message):\n"
      for (s in fn) printf "%d %s\n", fn[s], s | "sort -rn | head -" top " | awk -v n=" n " -v m=" msgs " '"'"'{ printf \"  %-36s %5.2f%% %7.0f\\n\", $2, 100 * $1 / n, $1 * 100000 / m }'"'"'"
    }' "$f"
  if [ -n "$rec" ]; then
    local st
    st=$(printf '%s\n' "$rec" | grep -o '"weft_stats":{[^}]*}' || true)
    if [ -n "$st" ]; then
      awk -v m="$smsgs" -v s="$st" 'BEGIN {
        printf "weft_stats a timed message:"
        n = split("carrier_wakeups poller_waits parks steals uring_submissions", k, " ")
        for (i = 1; i <= n; i++) if (match(s, "\"" k[i] "\":[0-9]+")) {
          v = substr(s, RSTART + length(k[i]) + 3, RLENGTH - length(k[i]) - 3); printf " %s %.4f", k[i], v / m }
        printf "\n" }'
    fi
  fi
}

# One echo workload: $1 name, $2 connections, $3 messages.
run_echo() {
  local name=$1 conns=$2 m=$3
  local cmd=("$wb" echo --connections "$conns" --messages "$m" --backend weft --json)
  echo "bench-profile.sh: $name: perf record ${events[*]} -- ${cmd[*]}" >&2
  if ! perf record -q "${events[@]}" -o "$tmp/$name.data" -- "${cmd[@]}" >"$tmp/$name.json" 2>"$tmp/$name.err"; then
    echo "bench-profile.sh: $name failed:" >&2
    cat "$tmp/$name.err" >&2
    rc=1
    return
  fi
  local rec msgs timed
  rec=$(head -1 "$tmp/$name.json")
  timed=$(awk -v a="$(json_num "$rec" connections)" -v b="$(json_num "$rec" messages)" -v r="$(json_num "$rec" repeat)" \
    'BEGIN { print a * b * r }')
  msgs=$(awk -v t="$timed" -v c="$(json_num "$rec" warmup_connections)" -v d="$(json_num "$rec" warmup_messages)" \
    -v w="$(json_num "$rec" warmup_runs)" 'BEGIN { print t + c * d * w }')
  samples "$tmp/$name.data" >"$tmp/$name.samples"
  report "$tmp/$name.samples" "$name: echo $conns x $m x 64 B, weft (msgs/s $(json_num "$rec" msgs_per_s), CPU $(json_num "$rec" cpu_us_per_message) us a message by weft-bench's own count)" \
    "$msgs" "" "$rec" "" "$timed"
  run_go_echo "$name" "$conns" "$m"
}

# weft-bench's Go baseline of an echo workload, under the same record: $1 name, $2 connections, $3 messages.
run_go_echo() {
  local name=$1 conns=$2 m=$3 go=$build/benchmarks/go/weft-go-echo
  if [ ! -x "$go" ]; then
    echo "bench-profile.sh: $name: the Go baseline skipped: $go not found (a build with Go: scripts/deps.sh bench)" >&2
    return
  fi
  local cmd=("$go" -connections "$conns" -messages "$m" -warmup-connections "$conns")
  echo "bench-profile.sh: $name, the baseline: GOMAXPROCS=$(nproc) perf record ${events[*]} -- ${cmd[*]}" >&2
  if ! GOMAXPROCS=$(nproc) perf record -q "${events[@]}" -o "$tmp/$name-go.data" -- "${cmd[@]}" >"$tmp/$name-go.json" 2>"$tmp/$name-go.err"; then
    echo "bench-profile.sh: $name, the Go baseline failed:" >&2
    cat "$tmp/$name-go.err" >&2
    rc=1
    return
  fi
  local rec msgs
  rec=$(grep -m1 '"bench":"echo"' "$tmp/$name-go.json" || true)
  # Its one warm-up, in the same process, then the timed round trips.
  msgs=$(awk -v a="$(json_num "$rec" messages_ok)" -v c="$(json_num "$rec" warmup_connections)" \
    -v d="$(json_num "$rec" warmup_messages)" 'BEGIN { print a + c * d }')
  if [ "$msgs" = 0 ]; then
    echo "bench-profile.sh: $name, the Go baseline printed no record of its round trips:" >&2
    cat "$tmp/$name-go.json" "$tmp/$name-go.err" >&2
    rc=1
    return
  fi
  samples "$tmp/$name-go.data" >"$tmp/$name-go.samples"
  report "$tmp/$name-go.samples" "$name baseline: weft-go-echo, $conns x $m x 64 B, GOMAXPROCS $(nproc) (msgs/s $(awk -v n="$(json_num "$rec" messages_ok)" -v t="$(json_num "$rec" elapsed_ms)" 'BEGIN { if (t > 0) printf "%.0f", n * 1000 / t }')); its threads count as 'other threads'" \
    "$msgs" "$(busiest_pid "$tmp/$name-go.samples" weft-go-echo)" "" ""
}

# nginx as scripts/bench-net.sh sets it up (scripts/lib/nginx.sh), for 1000 connections; sets url,
# or returns 1.
start_nginx() {
  local nginx_bin port
  nginx_bin=$(weft_nginx_bin)
  [ -x "$nginx_bin" ] || { echo "bench-profile.sh: http skipped: nginx not found ($nginx_bin; scripts/deps.sh bench)" >&2; return 1; }
  # The port: python3's pick only, as this script has always taken it.
  port=$(weft_nginx_free_port --python3-only)
  weft_nginx_start "$nginx_bin" "$tmp" "$port" 1000
  if weft_nginx_wait_port "$port"; then
    url=http://127.0.0.1:$port/page
    return 0
  fi
  echo "bench-profile.sh: http skipped: nginx did not start:" >&2
  weft_nginx_logs "$tmp"
  return 1
}

run_http() {
  local url
  if ! start_nginx; then
    rc=1
    return
  fi
  local cmd=("$wb" http --url "$url" --requests "$requests" --concurrency 1000 --keepalive --backend weft --json)
  echo "bench-profile.sh: http: perf record -a ${events[*]} -- ${cmd[*]}" >&2
  if ! perf record -q -a "${events[@]}" -o "$tmp/http.data" -- "${cmd[@]}" >"$tmp/http.json" 2>"$tmp/http.err"; then
    echo "bench-profile.sh: http failed:" >&2
    cat "$tmp/http.err" >&2
    rc=1
  else
    local rec msgs timed
    rec=$(head -1 "$tmp/http.json")
    timed=$(awk -v a="$(json_num "$rec" requests)" -v r="$(json_num "$rec" repeat)" 'BEGIN { print a * r }')
    msgs=$(awk -v t="$timed" -v b="$(json_num "$rec" warmup_requests)" -v w="$(json_num "$rec" warmup_runs)" \
      'BEGIN { print t + b * w }')
    samples "$tmp/http.data" >"$tmp/http.samples"
    report "$tmp/http.samples" "http: weft-bench http against nginx, 1000 connections kept alive, weft (req/s $(json_num "$rec" rps))" \
      "$msgs" "" "$rec" nginx "$timed"
  fi
  if ! command -v "${WRK:-wrk}" >/dev/null; then
    echo "bench-profile.sh: the wrk baseline skipped: wrk not found" >&2
    return
  fi
  local wcmd=("${WRK:-wrk}" -t2 -c1000 -d3s "$url")
  echo "bench-profile.sh: http, the baseline: perf record -a ${events[*]} -- ${wcmd[*]}" >&2
  if ! perf record -q -a "${events[@]}" -o "$tmp/wrk.data" -- "${wcmd[@]}" >"$tmp/wrk.out" 2>&1; then
    echo "bench-profile.sh: wrk failed:" >&2
    cat "$tmp/wrk.out" >&2
    rc=1
    return
  fi
  local n
  n=$(awk '/requests in/ { print $1; exit }' "$tmp/wrk.out")
  samples "$tmp/wrk.data" >"$tmp/wrk.samples"
  report "$tmp/wrk.samples" "http baseline: wrk -t2 -c1000 -d3s against the same nginx (req/s $(awk '/^Requests\/sec:/ { print $2 }' "$tmp/wrk.out")); wrk's threads count as 'other threads'" \
    "${n:-1}" "$(busiest_pid "$tmp/wrk.samples" wrk)" "" nginx
}

echo "bench-profile.sh: $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) CPUs, $("$wb" echo --help >/dev/null 2>&1 && echo weft-bench ok), perf $(perf --version | awk '{ print $3 }')"
echo "(software events only: cpu-clock every 100 us of CPU, every context switch; no hardware counters here)"
for w in ${only//,/ }; do
  case "$w" in
    echo1000) run_echo echo1000 1000 100 ;;
    echo9000) run_echo echo9000 9000 20 ;;
    http) run_http ;;
    *) echo "bench-profile.sh: unknown workload '$w' (echo1000, echo9000, http)" >&2; usage ;;
  esac
done
exit $rc
