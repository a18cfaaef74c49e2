#!/usr/bin/env bash
# The gdb extension (share/weft/gdb/weft.py) in batch mode: against
# gdb_target, stopped with parked fibers, and against a core file of it.
# Checks that `info weft-fibers` lists each fiber with its wait and that
# `weft-bt` walks a parked fiber's stack to the function it parked in.
#
# The core comes from the kernel (SIGABRT with RLIMIT_CORE raised) when
# kernel.core_pattern names a plain file; gdb's gcore is no substitute here:
# it cannot read the guard pages inside the stacks' mappings and writes
# those mappings as zeros. Where the pattern is a pipe to a core collector
# (systemd-coredump, apport) or a folder elsewhere, the core part is skipped
# and says so.
#
#   gdb_test.sh GDB TARGET SCRIPT WORKDIR       exit 0 ok, 1 failed, 77 skipped
set -uo pipefail
gdb=$1 target=$2 script=$3 work=$4
if ! command -v "$gdb" >/dev/null 2>&1; then echo "skipped: no gdb (apt-get install gdb)"; exit 77; fi
mkdir -p "$work" && cd "$work" || exit 1
rm -f ready core core.*
pattern=$(cat /proc/sys/kernel/core_pattern 2>/dev/null || echo "|")
ulimit -c unlimited 2>/dev/null || pattern="|"
"$target" >ready &
pid=$!
trap 'kill -9 $pid 2>/dev/null' EXIT
for _ in $(seq 1 100); do grep -qE "ready|nofibers" ready 2>/dev/null && break; sleep 0.1; done
if grep -q nofibers ready; then echo "skipped: fibers are off (WEFT_FIBERS=0) or unavailable"; exit 77; fi
grep -q ready ready || { echo "the target did not start"; exit 1; }
# ptrace of a child of ours: allowed under the default yama scope (1); as root, always.
run() { "$gdb" -nx -batch -ex "set debuginfod enabled off" -ex "source $script" "$@" 2>&1; }
live=$(run -p "$pid" -ex "info weft-fibers" -ex "weft-bt 2")
kill -ABRT $pid 2>/dev/null
wait $pid 2>/dev/null
fail=0
check() { # what, where, pattern
  if ! grep -qE "$3" <<<"$2"; then echo "FAILED: $1: no /$3/"; fail=1; fi
}
echo "$live" | grep -E "^fiber|parked|^#|fibers$|weft:" | head -40
check "live: info weft-fibers" "$live" "parked +sem 0x[0-9a-f]+.*pmap element [01]"
check "live: info weft-fibers" "$live" "parked +sleep.*pmap element 2"
check "live: info weft-fibers" "$live" "parked +map 0x[0-9a-f]+.*future"
check "live: info weft-fibers" "$live" "^4 fibers"
case "$pattern" in
  \|* | */*) echo "core part skipped: kernel.core_pattern is $pattern (a pipe or another folder), or RLIMIT_CORE cannot be raised"; exit $fail ;;
esac
corefile=$(ls -t core core.* 2>/dev/null | head -1)
[ -n "$corefile" ] && [ -s "$corefile" ] || { echo "FAILED: no core file (core_pattern: $pattern)"; exit 1; }
ids=$(grep -oE "^[0-9]+ +[0-9]+x? +parked +sem" <<<"$live" | awk '{print $1}' | head -1)
core=$(run "$target" "$corefile" -ex "info weft-fibers" -ex "weft-bt ${ids:-2}")
rm -f "$corefile"
echo "$core" | grep -E "^fiber|parked|^#|fibers$|weft:" | head -40
check "core: info weft-fibers" "$core" "^4 fibers"
check "core: weft-bt of a fiber parked on the semaphore" "$core" "gdb_target_deep"
check "core: weft-bt reaches weft_sem_wait" "$core" "weft_sem_wait"
check "core: weft-bt reaches the trampoline" "$core" "ctx_trampoline"
exit $fail
