#!/usr/bin/env bash
# The gdb extension (share/weft/gdb/weft.py) in batch mode: against
# gdb_target, stopped with parked fibers, and against core files of it.
# Checks that `info weft-fibers` lists each fiber with its wait and that
# `weft-bt` walks a parked fiber's stack to the function it parked in.
#
# Cores of two kinds:
#  - weft-gcore's, from the live target (its default guards, madv-guard where
#    the kernel has them, then WEFT_STACK_GUARD=mprotect): both commands must
#    read the fibers out of it, weft-gcore must refuse to run on it, and the
#    target's guards must still hold afterwards: told to (SIGUSR2), it
#    overflows a fiber's stack and must die with the overflow handler's
#    report. Plain gdb `gcore` fails this part: it cannot read past the first
#    guard inside a chunk of stacks and writes the whole chunk as zeros.
#  - the kernel's (SIGABRT with RLIMIT_CORE raised) when kernel.core_pattern
#    names a plain file. Where the pattern is a pipe to a core collector
#    (systemd-coredump, apport) or a folder elsewhere, that part is skipped and
#    says so.
#
#   gdb_test.sh GDB TARGET SCRIPT WORKDIR       exit 0 ok, 1 failed, 77 skipped
set -uo pipefail
gdb=$1 target=$2 script=$3 work=$4
if ! command -v "$gdb" >/dev/null 2>&1; then echo "skipped: no gdb (apt-get install gdb)"; exit 77; fi
mkdir -p "$work" && cd "$work" || exit 1
rm -f ready err core core.* gcore.core again.core
pattern=$(cat /proc/sys/kernel/core_pattern 2>/dev/null || echo "|")
ulimit -c unlimited 2>/dev/null || pattern="|"
pid=
trap '[ -n "$pid" ] && kill -9 $pid 2>/dev/null' EXIT

# start CORE [VAR=value ...]: the target in the background, with the environment given, ready to be looked
# at; sets pid. CORE 0: it leaves no core (the overflow's abort must not leave one for the kernel's part).
start() {
  local cores=$1
  shift
  rm -f ready err
  (if [ "$cores" = 0 ]; then ulimit -c 0; fi; exec env "$@" "$target" >ready 2>err) &
  pid=$!
  for _ in $(seq 1 100); do grep -qE "ready|nofibers" ready 2>/dev/null && break; sleep 0.1; done
  if grep -q nofibers ready; then echo "skipped: fibers are off (WEFT_FIBERS=0) or unavailable"; exit 77; fi
  grep -q ready ready || { echo "the target did not start"; cat err; exit 1; }
}
# ptrace of a child of ours: allowed under the default yama scope (1); as root, always.
run() { "$gdb" -nx -batch -ex "set debuginfod enabled off" -ex "source $script" "$@" 2>&1; }
fail=0
check() { # what, where, pattern
  if ! grep -qE "$3" <<<"$2"; then echo "FAILED: $1: no /$3/"; fail=1; fi
}
show() { grep -E "^fiber|parked|^#|fibers$|weft|Saved" <<<"$1" | head -40; }
# The id of a fiber parked on the semaphore, from `info weft-fibers` output.
sem_fiber() { grep -oE "^[0-9]+ +[0-9]+x? +parked +sem" <<<"$1" | awk '{print $1}' | head -1; }
# The fibers of a core file, read by both commands.
check_core() { # label, output of `info weft-fibers` and `weft-bt` on it
  check "$1: info weft-fibers" "$2" "parked +sem 0x[0-9a-f]+.*pmap element [01]"
  check "$1: info weft-fibers" "$2" "^4 fibers"
  check "$1: weft-bt of a fiber parked on the semaphore" "$2" "gdb_target_deep"
  check "$1: weft-bt reaches weft_sem_wait" "$2" "weft_sem_wait"
  check "$1: weft-bt reaches the trampoline" "$2" "ctx_trampoline"
}
# Whether process $1 still runs (a zombie, exited but not waited for, does not).
alive() { local st; st=$(ps -o stat= -p "$1" 2>/dev/null); [ -n "$st" ] && [ "${st#Z}" = "$st" ]; }

# weft-gcore on the live target (started by the caller), then the guards, then the core it wrote.
gcore_case() { # label
  local out core id rc
  out=$(run -p "$pid" -ex "info weft-fibers" -ex "weft-gcore $work/gcore.core")
  show "$out"
  check "$1: weft-gcore" "$out" "^weft-gcore: gcore stopped at the guard pages of [0-9]+ mapping"
  check "$1: weft-gcore checks the fibers' frames" "$out" "saved frames of all 4 parked or runnable fibers"
  id=$(sem_fiber "$out")
  kill -USR2 "$pid"
  for _ in $(seq 1 200); do alive "$pid" || break; sleep 0.1; done
  if alive "$pid"; then
    echo "FAILED: $1: the target still runs 20 s after it was told to overflow"
    fail=1
    kill -9 "$pid"
  fi
  wait "$pid" 2>/dev/null
  rc=$?
  pid=
  echo "$1: after SIGUSR2 the target exited with status $rc: $(head -c 200 err)"
  check "$1: a fiber stack's guard still holds after weft-gcore" "$(cat err)" "weft: fiber [0-9]+ overflowed its stack"
  [ "$rc" = 134 ] || { echo "FAILED: $1: the overflow did not end in abort (exit $rc, want 134)"; fail=1; }
  [ -s gcore.core ] || { echo "FAILED: $1: weft-gcore wrote no core"; fail=1; return; }
  core=$(run "$target" gcore.core -ex "info weft-fibers" -ex "weft-bt ${id:-2}" -ex "weft-gcore $work/again.core")
  show "$core"
  check_core "$1: weft-gcore's core" "$core"
  check "$1: weft-gcore refuses a core file" "$core" "weft-gcore: this is a core file, not a live process"
  [ ! -e again.core ] || { echo "FAILED: $1: weft-gcore wrote a core from a core file"; fail=1; }
  rm -f gcore.core again.core
}

start 0
live=$(run -p "$pid" -ex "info weft-fibers" -ex "weft-bt 2")
show "$live"
check "live: info weft-fibers" "$live" "parked +sem 0x[0-9a-f]+.*pmap element [01]"
check "live: info weft-fibers" "$live" "parked +sleep.*pmap element 2"
check "live: info weft-fibers" "$live" "parked +map 0x[0-9a-f]+.*future"
check "live: info weft-fibers" "$live" "^4 fibers"
gcore_case "default guards"
start 0 WEFT_STACK_GUARD=mprotect
gcore_case "mprotect guards"
none=$(run "$target" -ex "weft-gcore $work/again.core")
check "weft-gcore refuses a program that is not running" "$none" "weft-gcore: no live process"
[ ! -e again.core ] || { echo "FAILED: weft-gcore wrote a core without a process"; fail=1; }

case "$pattern" in
  \|* | */*) echo "kernel core part skipped: kernel.core_pattern is $pattern (a pipe or another folder), or RLIMIT_CORE cannot be raised"; exit $fail ;;
esac
start 1
kill -ABRT "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
pid=
corefile=$(ls -t core core.* 2>/dev/null | head -1)
[ -n "$corefile" ] && [ -s "$corefile" ] || { echo "FAILED: no core file (core_pattern: $pattern)"; exit 1; }
id=$(sem_fiber "$(run "$target" "$corefile" -ex "info weft-fibers")")
core=$(run "$target" "$corefile" -ex "info weft-fibers" -ex "weft-bt ${id:-2}")
rm -f "$corefile"
show "$core"
check_core "kernel's core" "$core"
exit $fail
