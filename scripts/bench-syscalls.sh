#!/usr/bin/env bash
# System calls per echo round trip, both ends, from the kernel's own counter
# (perf's raw_syscalls:sys_enter tracepoint over the whole process):
#
#   scripts/bench-syscalls.sh WEFT_BENCH [CONNECTIONS [BACKENDS [REPEAT]]]
#
# Each backend (default: weft weft-epoll threads go) runs `weft-bench echo` twice,
# with M and 3M messages per connection, in fresh processes; the difference
# of the two counts over the 2M x CONNECTIONS extra round trips is what a
# round trip costs, without start-up, connecting, the warm-up and the
# teardown. Repetitions interleave the backends; the table gives the median
# and the spread, and one line per system call that the weft backend makes
# most (read, recvmsg, sendto, epoll_pwait2, io_uring_enter, ...). WEFT_BENCH_RAW_FD=1 in the
# environment measures weft's calls on raw descriptors instead of owned ones.
#
# Needs perf (Debian: linux-perf) with access to tracepoints (root, or
# kernel.perf_event_paranoid <= -1); without it the script says so and
# exits 0, as a missing baseline does.
set -euo pipefail

wb=${1:?usage: scripts/bench-syscalls.sh WEFT_BENCH [CONNECTIONS [BACKENDS [REPEAT]]]}
conns=${2:-1000}
backends=${3:-weft weft-epoll threads go}
repeat=${4:-3}
msgs=50

if ! command -v perf >/dev/null 2>&1; then
  echo "bench-syscalls: skipped: perf not found (Debian: apt-get install linux-perf)"
  exit 0
fi
if ! perf stat -x, -e raw_syscalls:sys_enter -- true >/dev/null 2>&1; then
  echo "bench-syscalls: skipped: perf cannot read the raw_syscalls tracepoint here (root, or perf_event_paranoid)"
  exit 0
fi
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

events="raw_syscalls:sys_enter,syscalls:sys_enter_read,syscalls:sys_enter_recvfrom,syscalls:sys_enter_recvmsg,syscalls:sys_enter_sendto"
events="$events,syscalls:sys_enter_write,syscalls:sys_enter_epoll_pwait2,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_epoll_pwait"
events="$events,syscalls:sys_enter_epoll_ctl,syscalls:sys_enter_futex,syscalls:sys_enter_poll,syscalls:sys_enter_io_uring_enter"

# count BACKEND MESSAGES: "event=count ..." for one run.
count() {
  perf stat -x, -e "$events" -- "$wb" echo --connections "$conns" --messages "$2" --backend "$1" \
    2>&1 >/dev/null | awk -F, '/sys_enter/ {printf "%s=%s ", $3, $1}'
}

declare -A per
for ((r = 0; r < repeat; r++)); do
  for b in $backends; do
    small=$(count "$b" "$msgs")
    big=$(count "$b" $((3 * msgs)))
    case "$small" in *raw_syscalls*) ;; *) echo "bench-syscalls: $b: skipped (no count: the backend did not run)"; continue ;; esac
    for kv in $big; do
      ev=${kv%%=*}
      v=${kv#*=}
      s=$(tr ' ' '\n' <<<"$small" | awk -F= -v e="$ev" '$1 == e {print $2}')
      per[$b:$ev]+="$(awk -v a="$v" -v b="${s:-0}" -v n=$((2 * msgs * conns)) 'BEGIN {printf "%.3f ", (a - b) / n}')"
    done
  done
done

med() { tr ' ' '\n' <<<"$1" | grep -v '^$' | sort -g | awk '{a[NR] = $1} END {if (NR) printf "%.2f (%.2f-%.2f)", a[int((NR + 1) / 2)], a[1], a[NR]}'; }

echo "system calls per round trip (both ends), echo, $conns connections, 64-byte messages; median (min-max) of $repeat"
printf "%-10s %-22s %-22s %-22s %-22s %-22s\n" backend all "reads (read, recv*)" "send+write" "epoll waits" "io_uring_enter"
for b in $backends; do
  [ -n "${per[$b:raw_syscalls:sys_enter]:-}" ] || continue
  rd=$(paste -d' ' <(tr ' ' '\n' <<<"${per[$b:syscalls:sys_enter_read]}") <(tr ' ' '\n' <<<"${per[$b:syscalls:sys_enter_recvfrom]}") <(tr ' ' '\n' <<<"${per[$b:syscalls:sys_enter_recvmsg]}") | awk 'NF == 3 {printf "%.3f ", $1 + $2 + $3}')
  wr=$(paste -d' ' <(tr ' ' '\n' <<<"${per[$b:syscalls:sys_enter_sendto]}") <(tr ' ' '\n' <<<"${per[$b:syscalls:sys_enter_write]}") | awk 'NF == 2 {printf "%.3f ", $1 + $2}')
  ep=$(paste -d' ' <(tr ' ' '\n' <<<"${per[$b:syscalls:sys_enter_epoll_pwait2]}") <(tr ' ' '\n' <<<"${per[$b:syscalls:sys_enter_epoll_wait]}") <(tr ' ' '\n' <<<"${per[$b:syscalls:sys_enter_epoll_pwait]}") | awk 'NF == 3 {printf "%.3f ", $1 + $2 + $3}')
  printf "%-10s %-22s %-22s %-22s %-22s %-22s\n" "$b" "$(med "${per[$b:raw_syscalls:sys_enter]}")" "$(med "$rd")" "$(med "$wr")" "$(med "$ep")" "$(med "${per[$b:syscalls:sys_enter_io_uring_enter]:-}")"
done
