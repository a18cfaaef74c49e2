#!/usr/bin/env bash
# Install the Debian packages that a make target needs, and only those that
# are missing. As root it runs apt-get; otherwise it prints the one apt-get
# line that is needed and exits 1.
#
#   scripts/deps.sh base     build the library, tests and weft-bench (Open MPI and gfortran: weft_mpi, the Fortran
#                            module; libunwind and libdw: backtraces in weft_dump; gdb: the gdb extension's test;
#                            SQLite: weft-bench history)
#   scripts/deps.sh bench    + Google Benchmark's compare.py and its SciPy, the baselines' libraries (TBB, Boost.Context),
#                            Go (weft-bench's goroutine baselines), nginx-light and wrk (scripts/bench-net.sh)
#   scripts/deps.sh plots    + gnuplot and python3 (scripts/plots.sh)
#   scripts/deps.sh ci       + clang/libomp, Valgrind, aarch64 cross tools and qemu-user, MPICH (beside Open MPI,
#                            which stays the default: its alternatives have priority 50, MPICH's 40), Chromium
#                            (the weft-bench report's browser test, headless)
set -euo pipefail

base=(build-essential cmake pkg-config libcunit1-dev libbenchmark-dev liburing-dev libjansson-dev
      libunwind-dev libdw-dev gdb openmpi-bin libopenmpi-dev gfortran libsqlite3-dev)
# nginx-light: Debian starts its nginx service on install (port 80, where systemd or an init script runs
# it). This script manages no services and leaves it be; scripts/bench-net.sh never uses it: it runs its own
# nginx, from a configuration of its own on a free port, and stops it at exit.
bench=(libbenchmark-tools python3 python3-scipy libboost-context-dev libtbb-dev golang-go nginx-light wrk)
plots=(gnuplot-nox python3)
ci=(clang libomp-dev libclang-rt-dev valgrind qemu-user gcc-aarch64-linux-gnu g++-aarch64-linux-gnu
    libc6-dev-arm64-cross libcunit1-dev:arm64 clang-format python3
    mpich libmpich-dev chromium)

want=("${base[@]}")
for profile in "$@"; do
  case "$profile" in
    base) ;;
    bench) want+=("${bench[@]}") ;;
    plots) want+=("${plots[@]}") ;;
    ci) want+=("${ci[@]}") ;;
    *) echo "deps.sh: unknown profile '$profile'" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${want[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed'; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

need_arm64=0
for p in "${missing[@]}"; do case "$p" in *:arm64) need_arm64=1 ;; esac; done

if [ "$(id -u)" -ne 0 ]; then
  echo "weft needs these Debian packages; as root, run:" >&2
  [ $need_arm64 -eq 1 ] && echo "  dpkg --add-architecture arm64 &&" >&2
  echo "  apt-get update && apt-get install -y ${missing[*]}" >&2
  exit 1
fi

echo "deps.sh: installing ${missing[*]}"
if [ $need_arm64 -eq 1 ] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
  dpkg --add-architecture arm64
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
