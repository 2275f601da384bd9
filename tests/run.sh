#!/usr/bin/env bash
# tests/run.sh [PATTERN] — run every tests/t/*.sh (or those matching PATTERN),
# print their check lines, keep each script's full output under $B/test-logs/,
# and end with the line "N passed, N failed". Exit 1 if anything failed.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=${B:-build}
export ROOT B
logs="$ROOT/$B/test-logs"; mkdir -p "$logs"
pass=0; fail=0
for t in "$ROOT"/tests/t/*.sh; do
  name=$(basename "$t" .sh)
  [ -n "${1:-}" ] && [[ "$name" != *$1* ]] && continue
  echo "# $name"
  start=$(date +%s)
  TMPD=$(mktemp -d "${TMPDIR:-/tmp}/ncclshim-$name.XXXXXX") bash "$t" >"$logs/$name.log" 2>&1
  rc=$?
  p=$(grep -c '^ok ' "$logs/$name.log"); f=$(grep -c '^not ok ' "$logs/$name.log")
  grep -E '^(ok|not ok) |^#   ' "$logs/$name.log" | sed 's/^/  /'
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    echo "  not ok - $name exited $rc without a failing check"; tail -n 20 "$logs/$name.log" | sed 's/^/  #   /'; f=$((f + 1))
  fi
  if [ "$p" -eq 0 ] && [ "$f" -eq 0 ]; then echo "  not ok - $name ran no check"; f=1; fi
  echo "#   $name: $p passed, $f failed ($(( $(date +%s) - start )) s)"
  pass=$((pass + p)); fail=$((fail + f))
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
