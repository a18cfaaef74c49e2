#!/usr/bin/env bash
# The network benchmarks against real outside programs: nginx as the server,
# wrk as the load generator (what `make bench-net` runs):
#
#   scripts/bench-net.sh [--out FILE] [--repeat K] [--requests R] [--connections C]
#                        [--duration S] [--wrk-threads T] [BUILD_DIR]      default: build/release
#
# It writes an nginx configuration into a fresh temporary folder (removed at
# exit, with the logs, the pid file and the page): nginx on 127.0.0.1 and a
# free port, one worker per CPU (nproc), sendfile, tcp_nopush, an open-file
# cache, keep-alive (1,000,000 requests, 60 s), no access log, serving one
# generated file `page` of 9216 bytes (the size of weft-bench's own page).
# nginx runs in the foreground of a background job (daemon off) and is killed
# at exit; the system's nginx service, if any, is neither used nor touched.
# That set-up is scripts/lib/nginx.sh, shared with scripts/bench-profile.sh.
#
# A, the client side: the same URL (nginx's /page), C connections (default
# 1000), kept alive, loaded by
#   weft-bench http --url URL --requests R --concurrency C --keepalive --backend weft,weft-epoll[,go] --json
#     (R default 20000; the go backend, Go's net/http client, when
#      `weft-bench http --help` lists it: weft-bench skips it with a message
#      when this build has no Go; weft-epoll is weft with WEFT_IO_URING=1:
#      sockets through epoll, where the default reads and writes them as io_uring requests)
#   wrk -tT -cC -dS --latency URL                     (T default 2, S default 10 s)
# K repetitions (default 3), interleaved: repetition r runs the clients in an
# order rotated by r. Reported: requests/s of each (median, min, max), and the
# ratios weft/go and weft/wrk (ratios of the medians).
#
# B, the server side: `weft-bench serve` (weft-bench's own HTTP/1.1 server, an
# acceptor fiber and a fiber per connection, the same 9216-byte page) on a
# free port, the same with WEFT_IO_URING=1 (sockets through epoll) on another, and nginx, each loaded by the same `wrk -tT -cC -dS --latency`,
# interleaved the same way. Reported: requests/s (median, min, max), wrk's
# latency percentiles and errors, and the ratio weft-serve/nginx.
#
# Each part is skipped with a message when what it needs is missing: nginx
# (Debian's nginx-light, /usr/sbin/nginx), wrk, or weft-bench (build it
# first: make release). `scripts/deps.sh bench` installs nginx-light and wrk.
# The soft descriptor limit is raised to the hard limit (1000 connections
# need about 2000 descriptors on each side of loopback).
#
# Output: a summary table on stdout (progress and messages on stderr), and
# with --out FILE one JSON object per line: one per measurement ("kind":
# "sample": tool, target, repetition, rps, latency, errors, the command; a
# weft-bench sample carries weft-bench's own record as "record") and one per
# figure of the table ("kind": "summary": median, min, max; "kind": "ratio").
#
# Time: about K x (3 x S + 5) seconds, under two minutes with the defaults.
# Exit status: 0 when every measurement that ran succeeded (skips included);
# 1 when one failed (the others still run); 2 on a usage error.
set -euo pipefail
# The private nginx (its folder, config and page), shared with scripts/bench-profile.sh.
# shellcheck source-path=SCRIPTDIR source=lib/nginx.sh
. "$(dirname "$0")/lib/nginx.sh"

usage() {
  echo "usage: scripts/bench-net.sh [--out FILE] [--repeat K] [--requests R] [--connections C]" \
    "[--duration S] [--wrk-threads T] [BUILD_DIR]" >&2
  exit 2
}
out=
repeat=3
requests=20000
conns=1000
duration=10
wrk_threads=2
build=
while [ $# -gt 0 ]; do
  case "$1" in
    --out) [ $# -ge 2 ] || usage; out=$2; shift 2 ;;
    --repeat) [ $# -ge 2 ] || usage; repeat=$2; shift 2 ;;
    --requests) [ $# -ge 2 ] || usage; requests=$2; shift 2 ;;
    --connections) [ $# -ge 2 ] || usage; conns=$2; shift 2 ;;
    --duration) [ $# -ge 2 ] || usage; duration=$2; shift 2 ;;
    --wrk-threads) [ $# -ge 2 ] || usage; wrk_threads=$2; shift 2 ;;
    -h | --help) usage ;;
    -*) echo "bench-net.sh: unknown option '$1'" >&2; usage ;;
    *) [ -z "$build" ] || usage; build=$1; shift ;;
  esac
done
build=${build:-build/release}
for v in "$repeat" "$requests" "$conns" "$duration" "$wrk_threads"; do
  case "$v" in '' | *[!0-9]* | 0) echo "bench-net.sh: '$v' is not a positive integer" >&2; usage ;; esac
done

nginx_bin=$(weft_nginx_bin)
wrk_bin=${WRK:-wrk}
wb=$build/benchmarks/weft-bench/weft-bench
have_nginx=1 have_wrk=1 have_wb=1
[ -x "$nginx_bin" ] || { have_nginx=0; echo "bench-net.sh: nginx not found ($nginx_bin): the nginx parts are skipped; install nginx-light (scripts/deps.sh bench)" >&2; }
command -v "$wrk_bin" >/dev/null || { have_wrk=0; echo "bench-net.sh: wrk not found: the wrk parts (client-side wrk, all of the server side) are skipped; install wrk (scripts/deps.sh bench)" >&2; }
[ -x "$wb" ] || { have_wb=0; echo "bench-net.sh: $wb not found: the weft-bench parts are skipped; build weft with benchmarks first (make release)" >&2; }

ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt $((2 * conns + 64)) ]; then
  echo "bench-net.sh: warning: the descriptor limit is $(ulimit -n), below the $((2 * conns + 64)) that $conns loopback connections need (raise ulimit -Hn)" >&2
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench-net.XXXXXX")
weft_nginx_pid= # set by weft_nginx_start
serve_pid=
epoll_pid=
# shellcheck disable=SC2317 # run by the trap
cleanup() {
  local p
  for p in $weft_nginx_pid $serve_pid $epoll_pid; do kill "$p" 2>/dev/null || true; done
  for p in $weft_nginx_pid $serve_pid $epoll_pid; do wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

[ -n "$out" ] && : >"$out"
rc=0
date_utc=$(date -u +%Y-%m-%dT%H:%M:%SZ)
wrk_version=none
[ $have_wrk = 0 ] || wrk_version=$("$wrk_bin" -v 2>&1 | awk 'NR == 1 { print $2 }' || true)
cpus=$(nproc)

# --- helpers ---------------------------------------------------------------------

# Does 127.0.0.1:$1 serve the 9216-byte page at /page? One HTTP/1.0 GET (the server then closes).
check_page() {
  local head
  head=$( (exec 3<>"/dev/tcp/127.0.0.1/$1" && printf 'GET /page HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3 &&
    timeout 5 cat <&3) 2>/dev/null | head -c 1024 | tr -d '\r') || true
  case "$head" in "HTTP/1."?" 200"*) ;; *) return 1 ;; esac
  grep -qix 'content-length: 9216' <<<"$head"
}

# The value of a numeric key of a compact JSON object ($1 the line, $2 the key), or null.
json_num() {
  local v
  v=$(printf '%s\n' "$1" | grep -o "\"$2\":[-0-9.eE+]*" | head -1 | cut -d: -f2)
  echo "${v:-null}"
}

# JSON string of $1.
json_str() {
  local s=${1//\\/\\\\}
  s=${s//\"/\\\"}
  printf '"%s"' "$s"
}

# Append one line to the JSON Lines file.
emit() { [ -z "$out" ] || printf '%s\n' "$1" >>"$out"; }

# Samples: a file per (part, tool) holding one req/s a line.
samples() { echo "$tmp/samples.$1"; }
add_sample() { echo "$2" >>"$(samples "$1")"; }

# min median max of the numbers in file $1 ("- - -" when none).
summary() {
  if [ ! -s "$1" ]; then
    echo "- - -"
    return
  fi
  sort -g "$1" | awk '{ v[NR] = $1 } END {
    m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "%.0f %.0f %.0f\n", v[1], m, v[NR] }'
}
median() { summary "$1" | awk '{ print $2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2f\n", a / b }'; }

# wrk: run it (args: label target url), print its summary on stderr, record its figures.
wrk_latency_ms() { # $1 wrk's output, $2 the percentile ("50%")
  printf '%s\n' "$1" | awk -v p="$2" '$1 == p {
    v = $2; u = v; sub(/[0-9.]+/, "", u); sub(/[a-z]+$/, "", v)
    f = u == "us" ? 0.001 : u == "ms" ? 1 : u == "s" ? 1000 : u == "m" ? 60000 : 0
    printf "%.3f\n", v * f; exit }'
}
run_wrk() {
  local part=$1 tool=$2 target=$3 url=$4 rep=$5
  local cmd=("$wrk_bin" "-t$wrk_threads" "-c$conns" "-d${duration}s" --latency "$url")
  local o
  if ! o=$("${cmd[@]}" 2>&1); then
    echo "bench-net.sh: failed: ${cmd[*]}: $o" >&2
    rc=1
    return
  fi
  local rps p50 p90 p99 errs non2xx
  rps=$(printf '%s\n' "$o" | awk '/^Requests\/sec:/ { print $2 }')
  p50=$(wrk_latency_ms "$o" 50%)
  p90=$(wrk_latency_ms "$o" 90%)
  p99=$(wrk_latency_ms "$o" 99%)
  errs=$(printf '%s\n' "$o" | awk '/Socket errors:/ { gsub(/,/, ""); print $4 + $6 + $8 + $10 }')
  non2xx=$(printf '%s\n' "$o" | awk '/Non-2xx or 3xx responses:/ { print $5 }')
  errs=$((${errs:-0} + ${non2xx:-0}))
  if [ -z "$rps" ]; then
    echo "bench-net.sh: failed: ${cmd[*]}: no Requests/sec in its output" >&2
    rc=1
    return
  fi
  printf '  %-10s -> %-10s rep %d: %10.0f req/s, p50 %s ms, p99 %s ms, %d errors\n' "$tool" "$target" "$rep" \
    "$rps" "${p50:-?}" "${p99:-?}" "$errs" >&2
  add_sample "$part.$tool.$target" "$rps"
  [ "$errs" -eq 0 ] || add_sample "$part.$tool.$target.errors" "$errs"
  emit "{\"schema\":1,\"bench\":\"net\",\"kind\":\"sample\",\"part\":\"$part\",\"tool\":\"$tool\",\"target\":\"$target\",\"rep\":$rep,\"rps\":$rps,\"latency_ms_p50\":${p50:-null},\"latency_ms_p90\":${p90:-null},\"latency_ms_p99\":${p99:-null},\"errors\":$errs,\"connections\":$conns,\"duration_s\":$duration,\"wrk_threads\":$wrk_threads,\"date\":\"$date_utc\",\"cpus\":$cpus,\"command\":$(json_str "${cmd[*]}")}"
}

# weft-bench http (args: url rep backends): one weft-bench run, a record per backend.
run_wb_http() {
  local url=$1 rep=$2 backends=$3
  local cmd=("$wb" http --url "$url" --requests "$requests" --concurrency "$conns" --keepalive
    --backend "$backends" --json)
  local o line backend rps errs
  if ! o=$("${cmd[@]}" 2>"$tmp/wb-http.err"); then
    echo "bench-net.sh: failed: ${cmd[*]}:" >&2
    cat "$tmp/wb-http.err" >&2
    rc=1
  fi
  grep -h 'skipped' "$tmp/wb-http.err" >&2 || true
  while IFS= read -r line; do
    [ -n "$line" ] || continue
    backend=$(printf '%s\n' "$line" | grep -o '"backend":"[a-z-]*"' | head -1 | cut -d'"' -f4)
    rps=$(json_num "$line" rps)
    errs=$(json_num "$line" errors)
    [ "$rps" != null ] || continue
    printf '  %-10s -> %-10s rep %d: %10.0f req/s, p50 %s ms, p99 %s ms, %s errors\n' "$backend" nginx "$rep" \
      "$rps" "$(json_num "$line" latency_ms_p50)" "$(json_num "$line" latency_ms_p99)" "$errs" >&2
    add_sample "client.$backend.nginx" "$rps"
    [ "$errs" = 0 ] || [ "$errs" = null ] || add_sample "client.$backend.nginx.errors" "$errs"
    emit "{\"schema\":1,\"bench\":\"net\",\"kind\":\"sample\",\"part\":\"client\",\"tool\":\"$backend\",\"target\":\"nginx\",\"rep\":$rep,\"rps\":$rps,\"latency_ms_p50\":$(json_num "$line" latency_ms_p50),\"latency_ms_p90\":$(json_num "$line" latency_ms_p90),\"latency_ms_p99\":$(json_num "$line" latency_ms_p99),\"errors\":$errs,\"connections\":$conns,\"requests\":$requests,\"date\":\"$date_utc\",\"cpus\":$cpus,\"command\":$(json_str "${cmd[*]}"),\"record\":$line}"
  done <<<"$o"
}

# --- nginx -------------------------------------------------------------------------

nginx_port=
nginx_version=
if [ $have_nginx = 1 ]; then
  nginx_version=$("$nginx_bin" -v 2>&1 | sed 's/^.*nginx\///')
  # The port: python3's pick, or without python3 a probed one.
  nginx_port=$(weft_nginx_free_port)
  weft_nginx_start "$nginx_bin" "$tmp" "$nginx_port" "$conns"
  if ! weft_nginx_wait_port "$nginx_port"; then
    echo "bench-net.sh: nginx did not start on 127.0.0.1:$nginx_port; the nginx parts are skipped:" >&2
    weft_nginx_logs "$tmp"
    have_nginx=0
    rc=1
  elif ! check_page "$nginx_port"; then
    echo "bench-net.sh: nginx on 127.0.0.1:$nginx_port does not serve the 9216-byte /page; the nginx parts are skipped" >&2
    have_nginx=0
    rc=1
  else
    echo "bench-net.sh: nginx $nginx_version on 127.0.0.1:$nginx_port, $cpus workers (config: $tmp/nginx.conf)" >&2
  fi
fi
url=http://127.0.0.1:$nginx_port/page

# --- A: the client side ----------------------------------------------------------------

clients=()
[ $have_nginx = 1 ] && [ $have_wb = 1 ] && clients+=(weft-bench)
[ $have_nginx = 1 ] && [ $have_wrk = 1 ] && clients+=(wrk)
backends=weft
wb_http_help=
[ $have_wb = 0 ] || wb_http_help=$("$wb" http --help)
# weft-epoll: weft with WEFT_IO_URING=1 (sockets through epoll), beside weft in the same run.
if [ $have_wb = 1 ] && grep -qE '^ +weft-epoll +' <<<"$wb_http_help"; then backends=weft,weft-epoll; fi
if [ $have_wb = 1 ] && grep -qE '^ +go +' <<<"$wb_http_help"; then
  backends=$backends,go
elif [ $have_wb = 1 ]; then
  echo "bench-net.sh: this weft-bench http has no go backend: the Go client is skipped" >&2
fi
[ $have_nginx = 1 ] || echo "bench-net.sh: A (client side) skipped: no nginx" >&2
if [ ${#clients[@]} -gt 0 ]; then
  echo "bench-net.sh: A, the client side: $url, $conns connections kept alive, $repeat repetition(s), interleaved" >&2
  for ((r = 0; r < repeat; r++)); do
    n=${#clients[@]}
    for ((j = 0; j < n; j++)); do
      case "${clients[$(((r + j) % n))]}" in
        weft-bench)
          # weft and go back to back, in turn first.
          b=$backends
          [ $((r % 2)) = 1 ] && b=$(tr ',' '\n' <<<"$backends" | tac | paste -sd,)
          run_wb_http "$url" "$((r + 1))" "$b"
          ;;
        wrk) run_wrk client wrk nginx "$url" "$((r + 1))" ;;
      esac
    done
  done
fi

# --- B: the server side ----------------------------------------------------------------

serve_port=
serve_pid=
epoll_port=
epoll_pid=
servers=()
# start_serve OUTFILE ERRFILE [ENV...]: weft-bench serve on a free port in the background; its pid in
# $started_pid, its port in $started_port (empty when it did not start).
start_serve() {
  local o=$1 e=$2
  shift 2
  # The file exists before the loop reads it, whether or not the job has opened it yet.
  : >"$o"
  env "$@" "$wb" serve --port 0 --backend weft >"$o" 2>"$e" &
  started_pid=$!
  started_port=
  for _ in $(seq 100); do
    started_port=$(sed -n 's/^listening .*:\([0-9]*\)$/\1/p' "$o")
    [ -n "$started_port" ] && break
    kill -0 "$started_pid" 2>/dev/null || break
    sleep 0.05
  done
}
if [ $have_wrk = 1 ] && [ $have_wb = 1 ]; then
  start_serve "$tmp/serve.out" "$tmp/serve.err"
  serve_pid=$started_pid
  serve_port=$started_port
  if [ -n "$serve_port" ] && ! check_page "$serve_port"; then
    echo "bench-net.sh: weft-bench serve on 127.0.0.1:$serve_port does not serve the 9216-byte /page; its part is skipped" >&2
    rc=1
  elif [ -n "$serve_port" ]; then
    servers+=(weft-serve)
    echo "bench-net.sh: weft-bench serve on 127.0.0.1:$serve_port" >&2
  else
    echo "bench-net.sh: weft-bench serve did not start; its part is skipped:" >&2
    cat "$tmp/serve.err" >&2
    rc=1
  fi
  # The same server with its sockets through epoll (WEFT_IO_URING=1), measured beside it.
  start_serve "$tmp/serve-epoll.out" "$tmp/serve-epoll.err" WEFT_IO_URING=1
  epoll_pid=$started_pid
  epoll_port=$started_port
  if [ -n "$epoll_port" ] && check_page "$epoll_port"; then
    servers+=(weft-serve-epoll)
    echo "bench-net.sh: weft-bench serve (WEFT_IO_URING=1) on 127.0.0.1:$epoll_port" >&2
  else
    echo "bench-net.sh: weft-bench serve with WEFT_IO_URING=1 did not serve; its part is skipped:" >&2
    cat "$tmp/serve-epoll.err" >&2
    rc=1
  fi
elif [ $have_wrk = 0 ]; then
  echo "bench-net.sh: B (server side) skipped: no wrk" >&2
fi
[ $have_wrk = 1 ] && [ $have_nginx = 1 ] && servers+=(nginx)
if [ ${#servers[@]} -gt 0 ]; then
  echo "bench-net.sh: B, the server side: wrk -t$wrk_threads -c$conns -d${duration}s --latency, $repeat repetition(s), interleaved" >&2
  for ((r = 0; r < repeat; r++)); do
    n=${#servers[@]}
    for ((j = 0; j < n; j++)); do
      case "${servers[$(((r + j) % n))]}" in
        weft-serve) run_wrk server wrk weft-serve "http://127.0.0.1:$serve_port/page" "$((r + 1))" ;;
        weft-serve-epoll) run_wrk server wrk weft-serve-epoll "http://127.0.0.1:$epoll_port/page" "$((r + 1))" ;;
        nginx) run_wrk server wrk nginx "$url" "$((r + 1))" ;;
      esac
    done
  done
fi
serve_report=
if [ -n "$serve_pid" ]; then
  kill -TERM "$serve_pid" 2>/dev/null || true
  if wait "$serve_pid"; then :; else
    echo "bench-net.sh: weft-bench serve exited with status $?:" >&2
    cat "$tmp/serve.err" >&2
    rc=1
  fi
  serve_pid=
  serve_report=$(grep '^served' "$tmp/serve.out" || true)
  if [ -n "$epoll_pid" ]; then
    kill -TERM "$epoll_pid" 2>/dev/null || true
    if wait "$epoll_pid"; then :; else
      echo "bench-net.sh: weft-bench serve (WEFT_IO_URING=1) exited with status $?:" >&2
      cat "$tmp/serve-epoll.err" >&2
      rc=1
    fi
    epoll_pid=
  fi
  [ -z "$serve_report" ] || emit "{\"schema\":1,\"bench\":\"net\",\"kind\":\"serve\",\"report\":$(json_str "$serve_report"),\"date\":\"$date_utc\",\"cpus\":$cpus}"
fi

# --- the summary ------------------------------------------------------------------------

row() { # label, samples key
  local s
  s=$(summary "$(samples "$2")")
  read -r mn md mx <<<"$s"
  if [ "$md" = - ]; then
    printf '%-44s %12s\n' "$1" "not run"
    return
  fi
  local e
  e=$(awk '{ t += $1 } END { print t + 0 }' "$(samples "$2.errors")" 2>/dev/null || echo 0)
  printf '%-44s %12s %12s %12s %8s\n' "$1" "$md" "$mn" "$mx" "$e"
  emit "{\"schema\":1,\"bench\":\"net\",\"kind\":\"summary\",\"key\":\"$2\",\"label\":$(json_str "$1"),\"rps\":$md,\"rps_min\":$mn,\"rps_max\":$mx,\"errors\":$e,\"repeat\":$repeat,\"date\":\"$date_utc\",\"cpus\":$cpus}"
}
ratio_line() { # label, numerator key, denominator key
  local v
  v=$(ratio "$(median "$(samples "$2")")" "$(median "$(samples "$3")")")
  if [ "$v" = - ]; then
    printf '  %s: n/a (not both measured)\n' "$1"
    return
  fi
  printf '  %s: %sx\n' "$1" "$v"
  emit "{\"schema\":1,\"bench\":\"net\",\"kind\":\"ratio\",\"key\":\"$1\",\"ratio\":$v,\"date\":\"$date_utc\",\"cpus\":$cpus}"
}

echo
echo "bench-net.sh: $date_utc, $cpus CPUs ($(uname -r)), nginx ${nginx_version:-none} ($cpus workers), wrk $wrk_version; medians of $repeat interleaved repetition(s)"
echo
if [ $have_nginx = 1 ]; then
  echo "A. client side: GET $url (nginx), $conns connections kept alive"
else
  echo "A. client side: skipped (no nginx)"
fi
printf '%-44s %12s %12s %12s %8s\n' "client" "req/s" "min" "max" "errors"
row "weft-bench http --backend weft (fibers)" client.weft.nginx
case "$backends" in *weft-epoll*) row "weft-bench http --backend weft-epoll" client.weft-epoll.nginx ;; esac
case "$backends" in *go*) row "weft-bench http --backend go (net/http)" client.go.nginx ;; esac
row "wrk -t$wrk_threads -c$conns -d${duration}s" client.wrk.nginx
ratio_line "weft/go" client.weft.nginx client.go.nginx
ratio_line "weft/wrk" client.weft.nginx client.wrk.nginx
case "$backends" in *weft-epoll*)
  ratio_line "weft-epoll/go" client.weft-epoll.nginx client.go.nginx
  ratio_line "weft-epoll/wrk" client.weft-epoll.nginx client.wrk.nginx
  ratio_line "weft/weft-epoll" client.weft.nginx client.weft-epoll.nginx
  ;;
esac
echo
echo "B. server side: wrk -t$wrk_threads -c$conns -d${duration}s --latency, GET /page"
printf '%-44s %12s %12s %12s %8s\n' "server" "req/s" "min" "max" "errors"
row "weft-bench serve --backend weft (fibers)" server.wrk.weft-serve
row "weft-bench serve, WEFT_IO_URING=1 (epoll)" server.wrk.weft-serve-epoll
row "nginx ($cpus workers)" server.wrk.nginx
ratio_line "weft-serve/nginx" server.wrk.weft-serve server.wrk.nginx
ratio_line "weft-serve-epoll/nginx" server.wrk.weft-serve-epoll server.wrk.nginx
[ -z "$serve_report" ] || echo "  weft-bench serve: $serve_report"
if [ -s "$tmp/error.log" ]; then
  echo "  nginx's error log: $(wc -l <"$tmp/error.log") lines; the first: $(head -1 "$tmp/error.log")"
fi
[ -z "$out" ] || echo "(JSON Lines: $out)"
exit $rc
