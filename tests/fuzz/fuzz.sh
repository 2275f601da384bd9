#!/usr/bin/env bash
# tests/fuzz/fuzz.sh — run drawn programs of the collectives fuzzer
# (tests/fuzz/README.md), each once without and once with the shim in one
# MPI job, and say which seeds failed and why.
#
#   fuzz.sh --seed N                 one program (replay); prints its description on failure
#   fuzz.sh --seeds "1 5 9"          these programs; one TAP line each ("ok - fuzz seed N ...")
#   fuzz.sh --seconds S [--first N]  seeds N, N+1, ... for S seconds; a summary at the end
#   --describe                       with --seed: also print the program when it passes
#
# A run fails when the job exits non-zero (a FUZZ FAIL line, a FUZZ HANG
# line, a crash) or when the host NCCL reported a mismatch (HOSTNCCL_LOG
# line "called different collectives"; with the aborting host NCCL a
# HOSTNCCL-MISMATCH line, also in HOSTNCCL_REPORT_FILE), whatever the
# program itself saw.
# FUZZ_OFF=class,... keeps those classes out of every program (names as in
# the features line: nb, nb-mixed, streams-mixed, accum, ddp-foreign,
# ddp-short-pass, ddp-long-pass, ddp-two-models, ddp-rewrap, accum-other-comm,
# alloc-one+chunk, and the faults fail-call, fail-group-end,
# alloc-one, check0-one, bad-one, diff-one, prescale-bad, host-alloc-one, oob-end-one;
# seeds >= 1000 also draw int8, fp8, algo-twophase, algo-ring).
# FUZZ_DIGEST_FILE=F appends every program's per-rank result hashes to F
# ("FUZZ DIGEST seed S half H rank R HEX | features"): two builds that issue
# the same collectives and compute the same bits write the same lines
# (issue 35: tests/fuzz/digest-compare.sh).
# FUZZ_SHIM_EXTRA='NAME=value ...' adds variables to the shim's ranks (debugging:
# NCCLSHIM_LOG=calls NCCLSHIM_LOG_FILE=/tmp/fz.%p.jsonl).
# FUZZ_TIMEOUT (default 30 s) bounds each program; the program's own alarm
# fires 5 s before and names the step every rank is in.
# Must not: forward NCCLSHIM_* or HOSTNCCL_* variables of the caller's
# environment (mpirun passes the environment on), or leave processes behind.
set -u
for v in $(env | grep -o '^\(NCCLSHIM\|HOSTNCCL\)_[A-Z_]*'); do unset "$v"; done
unset LD_PRELOAD
. "$(dirname "$0")/../lib.sh"
# lib.sh pins NCCLSHIM_LAUNCH_BYTES=0 for the tests; a program sets it when it
# draws a number, and "launch-default" means the default (auto: the learner).
unset NCCLSHIM_LAUNCH_BYTES
FZ="$TBIN/fuzz_coll"
T=${FUZZ_TIMEOUT:-30}
OFF=${FUZZ_OFF:-}
# FUZZ_ONLY=class,...: every other class of CLASSES is off (to tell which
# class a failing seed needs).
CLASSES="nb-mixed streams-mixed check0-one bad-one diff-one alloc-one alloc-one+chunk prescale-bad fail-call fail-group-end host-alloc-one oob-end-one ddp-foreign ddp-short-pass ddp-long-pass ddp-two-models ddp-rewrap accum-other-comm"
if [ -n "${FUZZ_ONLY:-}" ]; then
  for c in $CLASSES; do [[ ",$FUZZ_ONLY," == *",$c,"* ]] || OFF="${OFF:+$OFF,}$c"; done
fi
mode="" seeds="" seconds=0 first=1 show=0
while [ $# -gt 0 ]; do
  case "$1" in
  --seed) mode=one seeds=$2; shift ;;
  --seeds) mode=list seeds=$2; shift ;;
  --seconds) mode=time seconds=$2; shift ;;
  --first) first=$2; shift ;;
  --describe) show=1 ;;
  *) echo "usage: $0 --seed N | --seeds \"N...\" | --seconds S [--first N] [--describe]" >&2; exit 2 ;;
  esac
  shift
done
[ -x "$FZ" ] || { echo "not ok - $FZ is not built (make test-build)"; exit 1; }
mkdir -p "$TMPD"

# run_seed N: 0 when the program passed; leaves $TMPD/fz.N.{out,err}.
run_seed() {
  local s=$1 ctx=() r v
  eval "$("$FZ" --seed "$s" --off "$OFF" --plan)"
  for ((r = 0; r < FZ_NP; r++)); do
    ctx+=(-np 1 -x HOSTNCCL_LOG=1)
    for v in ${FZ_BOTH_ENV:-}; do ctx+=(-x "$v"); done
    ctx+=("$FZ" --seed "$s" --off "$OFF" --timeout $((T - 5)) :)
  done
  for ((r = 0; r < FZ_NP; r++)); do
    ctx+=(-np 1 -x LD_PRELOAD="$SHIM${SAN_PRELOAD:+:$SAN_PRELOAD}" -x HOSTNCCL_LOG=1 -x NCCLSHIM_LOG=off -x NCCLSHIM_BANNER=0)
    eval "local renv=\${FZ_RANK_ENV_$r}"
    for v in $FZ_SHIM_ENV $FZ_HOST_ENV ${FZ_BOTH_ENV:-} $renv ${FUZZ_SHIM_EXTRA:-}; do ctx+=(-x "$v"); done
    ctx+=("$FZ" --seed "$s" --off "$OFF" --timeout $((T - 5)) :)
  done
  unset 'ctx[${#ctx[@]}-1]'
  : >"$TMPD/fz.$s.report"
  HOSTNCCL_REPORT_FILE="$TMPD/fz.$s.report" LD_LIBRARY_PATH="$HOSTNCCL_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout -k 5 "$T" mpirun "${ctx[@]}" \
    >"$TMPD/fz.$s.out" 2>"$TMPD/fz.$s.err"
  local rc=$?
  FZ_RC=$rc
  FZ_WHY=""
  if grep -q -E "called different collectives|HOSTNCCL-MISMATCH" "$TMPD/fz.$s.err" "$TMPD/fz.$s.report"; then FZ_WHY="host NCCL mismatch"; fi
  if grep -q "HOSTNCCL-ENDED" "$TMPD/fz.$s.err" "$TMPD/fz.$s.report"; then FZ_WHY="${FZ_WHY:+$FZ_WHY, }a call on an ended communicator"; fi
  if grep -q "^FUZZ HANG" "$TMPD/fz.$s.err" || [ $rc -eq 124 ]; then FZ_WHY="${FZ_WHY:+$FZ_WHY, }hang"; fi
  if grep -q "^FUZZ FAIL" "$TMPD/fz.$s.err"; then FZ_WHY="${FZ_WHY:+$FZ_WHY, }wrong result or code"; fi
  [ $rc -ne 0 ] && [ -z "$FZ_WHY" ] && FZ_WHY="exit $rc"
  if [ -n "${FUZZ_DIGEST_FILE:-}" ]; then # per-rank result hashes, sorted, with the program's features
    grep "^FUZZ DIGEST" "$TMPD/fz.$s.out" | sort | sed "s/\$/ | ${FZ_FEATURES//\//_}/" >>"$FUZZ_DIGEST_FILE"
  fi
  [ -z "$FZ_WHY" ]
}

# Why seed N failed, in a few lines (the first failure of each rank, the mismatch, the hang).
explain() {
  local s=$1
  { grep -m 6 -E "^FUZZ (FAIL|HANG)" "$TMPD/fz.$s.err"
    grep -h -m 2 -E "called different collectives|HOSTNCCL-MISMATCH|HOSTNCCL-ENDED" "$TMPD/fz.$s.report" "$TMPD/fz.$s.err"
    grep -v -E "^hostnccl|^FUZZ" "$TMPD/fz.$s.err" | grep -m 4 -i -E "error|abort|signal|ncclshim" ; } | cut -c1-400
}

case $mode in
one)
  if run_seed "$seeds"; then
    echo "ok - fuzz seed $seeds ($FZ_FEATURES)"; cat "$TMPD/fz.$seeds.out"
    [ $show = 1 ] && "$FZ" --seed "$seeds" --off "$OFF" --describe
    exit 0
  fi
  echo "not ok - fuzz seed $seeds: $FZ_WHY"
  explain "$seeds" | sed 's/^/#   /'
  "$FZ" --seed "$seeds" --off "$OFF" --describe | sed 's/^/#   /'
  echo "#   replay: tests/fuzz/fuzz.sh --seed $seeds   (logs: $TMPD/fz.$seeds.err)"
  exit 1 ;;
list)
  bad=0
  for s in $seeds; do
    if run_seed "$s"; then echo "ok - fuzz seed $s: $FZ_FEATURES"
    else
      echo "not ok - fuzz seed $s: $FZ_WHY ($FZ_FEATURES)"; explain "$s" | sed 's/^/#   /'
      echo "#   replay: tests/fuzz/fuzz.sh --seed $s"; bad=1
    fi
  done
  exit $bad ;;
time)
  end=$(( $(date +%s) + seconds )) s=$first n=0 nf=0 start=$(date +%s)
  : >"$TMPD/failed"
  while [ "$(date +%s)" -lt $end ]; do
    if ! run_seed $s; then
      nf=$((nf + 1))
      echo "FAILED seed $s: $FZ_WHY | $FZ_FEATURES" | tee -a "$TMPD/failed"
      explain "$s" | head -3 | sed 's/^/    /' | tee -a "$TMPD/failed"
    fi
    n=$((n + 1)) s=$((s + 1))
  done
  echo "fuzz-collectives: $n programs (seeds $first..$((s - 1))) in $(( $(date +%s) - start )) s, $nf failed"
  echo "(failures listed in $TMPD/failed; replay one with tests/fuzz/fuzz.sh --seed N)"
  [ $nf -eq 0 ] ;;
*) echo "usage: $0 --seed N | --seeds \"N...\" | --seconds S [--first N]" >&2; exit 2 ;;
esac
