#!/usr/bin/env bash
# scripts/check-layers must pass on the tree as it is, and fail on a copy of
# src/ given each kind of wrong include: a lower layer reaching up, a
# side-by-side layer reaching across, a forbidden system header, a path that
# leaves src/, an include cycle inside one folder, and a folder the table
# does not know.
#   tests/layers_test.sh        exit 0 ok, 1 failed
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
check="$root/scripts/check-layers"
fail=0
if ! out=$(python3 "$check" --root "$root" 2>&1); then
  echo "FAIL: the tree does not pass:"; echo "$out"; fail=1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# case NAME FILE LINE WANT: add LINE to FILE in a fresh copy; check-layers must exit 1 and print WANT.
case_() {
  rm -rf "$tmp/t" && mkdir -p "$tmp/t/docs" && cp -r "$root/src" "$tmp/t/src" &&
    cp "$root/docs/architecture.md" "$tmp/t/docs/"
  mkdir -p "$(dirname "$tmp/t/src/$2")"
  printf '%s\n' "$3" >>"$tmp/t/src/$2"
  out=$(python3 "$check" --root "$tmp/t" 2>&1); rc=$?
  if [ "$rc" -ne 1 ] || ! grep -q -- "$4" <<<"$out"; then
    echo "FAIL: $1: exit $rc, want 1 and '$4'; printed:"; echo "$out"; fail=1
  else
    echo "ok: $1: $(head -1 <<<"$out")"
  fi
}
case_ "base reaches up"       base/util.c   '#include "../sync/wait.h"'  "'base/' may not include 'sync/'"
case_ "cpu reaches across"    cpu/range.c   '#include "../fiber/fiber.h"' "'cpu/' may not include 'fiber/'"
case_ "fiber reaches up"      fiber/sched.c '#include "../api/pmap.h"'   "'fiber/' may not include 'api/'"
case_ "forbidden header"      fiber/stack.c '#include <omp.h>'           "<omp.h> is not for 'fiber/'"
case_ "mpi uses internals"    mpi/pmap.c    '#include "../base/sys.h"'   "'mpi/' may not include 'base/'"
case_ "leaves src"            io/io.c       '#include "../../tests/harness.h"' "leaves src/"
case_ "include cycle"        base/internal.h '#include "sys.h"'         "include cycle"
case_ "unknown folder"        extra/new.c   '#include "../base/sys.h"'   "is not in the layer table"
# A table without the section is an error of its own (2), never a pass.
rm -rf "$tmp/t" && mkdir -p "$tmp/t/docs" && cp -r "$root/src" "$tmp/t/src" && echo "# no table" >"$tmp/t/docs/architecture.md"
python3 "$check" --root "$tmp/t" >/dev/null 2>&1; rc=$?
if [ "$rc" -eq 2 ]; then echo "ok: no table: exit $rc"; else echo "FAIL: no table: exit $rc"; fail=1; fi
exit $fail
