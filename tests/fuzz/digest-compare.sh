#!/usr/bin/env bash
# tests/fuzz/digest-compare.sh BEFORE AFTER — compare two FUZZ_DIGEST_FILE
# runs of the same seeds (tests/fuzz/fuzz.sh), made by two builds: every
# program's per-rank result hashes must be equal, but for programs whose
# results legitimately depend on the shim's internal counting (a fault at the
# N-th staging or host allocation, exchange buffer or read-back of the
# shim's own: a refactor may count differently) or on stochastic rounding.
# Prints the seeds compared and every difference; exit 1 on one.
set -u
[ $# -eq 2 ] || { echo "usage: $0 BEFORE AFTER" >&2; exit 2; }
skip='alloc-one|host-alloc-one|oob-end-one|check0-one| sr( |$)|sr-twins'
key() { grep -Ev "$skip" "$1" | awk '{print $4, $6, $8, $9}' | sort; }
b=$(key "$1") a=$(key "$2")
nb=$(printf '%s\n' "$b" | awk 'NF {print $1}' | sort -u | wc -l)
na=$(printf '%s\n' "$a" | awk 'NF {print $1}' | sort -u | wc -l)
d=$(diff <(printf '%s\n' "$b") <(printf '%s\n' "$a"))
if [ -z "$d" ]; then
  echo "digests: $nb programs compared (nearest rounding, no shim-internal fault), every rank's results the same bits"
  exit 0
fi
echo "digests differ ($nb programs before, $na after):"
printf '%s\n' "$d" | head -40
exit 1
