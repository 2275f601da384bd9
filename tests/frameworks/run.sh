#!/usr/bin/env bash
# tests/frameworks/run.sh — `make test-frameworks`: the scripts of four
# frameworks, each written as its users write it (tests/frameworks/*.py:
# accelerate, the transformers Trainer, Lightning, DeepSpeed ZeRO-0 and
# ZeRO-2), run unmodified under `ncclshim-run --emulate` at RANKS ranks (default
# "2 4") on CPU over the host NCCL:
#   - plain: NCCLSHIM_DISABLE=1 (bit-identical to no shim), the reference;
#   - fp16 (the default) and int8 (two-phase, fp32 sums): the summary shows
#     compressed calls, every replica ends with the same parameters, and the
#     final loss is within 1e-2 (fp16) / 5e-2 (int8) of the plain run's,
#     relative (6 steps; rounding, not a bound on training quality).
# The frameworks are installed into the torch venv first (tests/install-deps.sh
# --frameworks). Prints TAP lines and ends with "N passed, N failed"; each
# run's output is kept under $B/test-logs/frameworks/. About 7.5 minutes at 2
# and 4 ranks on 2 cores, and the accumulation runs below about 4 minutes more. Must not: compare timings.
set -u
source "$(dirname "$0")/../lib.sh"
RUN="$ROOT/env/ncclshim-run"
LOGS="$BUILD/test-logs/frameworks"
mkdir -p "$LOGS"
export PATH="$TORCH_VENV/bin:$PATH" OMP_NUM_THREADS=1
T=${TEST_TIMEOUT:-300}
RANKS=${RANKS:-2 4}
D="$ROOT/tests/frameworks"
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok - $*"; }
not_ok() { fail=$((fail + 1)); echo "not ok - $*"; }

# name | script and its arguments (@N: the rank count)
CASES=(
  "accelerate|$D/accelerate_train.py"
  "trainer|$D/trainer_train.py"
  "lightning|$D/lightning_train.py --devices @N"
  "deepspeed-zero0|$D/deepspeed_train.py --zero 0"
  "deepspeed-zero2|$D/deepspeed_train.py --zero 2"
)

# The ranks' lines may share a line with a progress bar or another rank's
# output: matched anywhere in a line, one per rank.
final_loss() { grep -o 'final loss [-0-9.e+]*' "$1" | tail -n 1 | cut -d' ' -f3; }
replicas() { # file n: "same" when n ranks printed one and the same parameter hash
  local k
  k=$(grep -o 'rank [0-9]* params [0-9a-f]\{64\}' "$1" | sort -u | awk '{print $4}' | sort | uniq -c | awk '{print $1}')
  [ "$k" = "$2" ] && echo same || echo "differ ($(grep -o 'rank [0-9]* params [0-9a-f]\{12\}' "$1" | cut -d' ' -f2,4 | tr '\n' ' '))"
}
compressed() { awk '/ncclshim summary: communicator 0 /{s=1} s && $2 == "compressed" {print $3; exit}' "$1"; }
within() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b; exit !(a != "" && b != "" && d <= t * m) }'; }

for n in $RANKS; do
  for c in "${CASES[@]}"; do
    name=${c%%|*} cmd=${c#*|}
    read -r -a argv <<<"${cmd//@N/$n}"
    for mode in plain fp16 int8; do
      case $mode in
        plain) envs=(NCCLSHIM_DISABLE=1) ;;
        fp16) envs=() ;;
        int8) envs=(NCCLSHIM_COMPRESS=int8) ;;
      esac
      log="$LOGS/$name.$n.$mode.log"
      start=$(date +%s)
      (cd "$TMPD" && env "${envs[@]}" timeout "$T" "$RUN" --emulate --nproc "$n" -- "${argv[@]}") >"$log" 2>&1
      rc=$?
      secs=$(( $(date +%s) - start ))
      what="$name, $n ranks, $mode"
      if [ $rc -ne 0 ]; then not_ok "$what: exit $rc (${secs}s; $log)"; grep -E 'Error|error' "$log" | tail -n 5 | sed 's/^/#   /'; continue; fi
      r=$(replicas "$log" "$n")
      if [ "$mode" = plain ]; then
        [ "$r" = same ] && ok "$what: exit 0, replicas identical (${secs}s)" || not_ok "$what: replicas $r"
        continue
      fi
      k=$(compressed "$log")
      tol=1e-2; [ $mode = int8 ] && tol=5e-2
      lp=$(final_loss "$LOGS/$name.$n.plain.log") ls=$(final_loss "$log")
      if [ "$r" = same ] && [ "${k:-0}" -gt 0 ] && within "$ls" "$lp" "$tol"; then
        ok "$what: $k compressed calls on rank 0's communicator, replicas identical, final loss $ls vs plain $lp (${secs}s)"
      else
        not_ok "$what: compressed ${k:-0}, replicas $r, final loss '$ls' vs plain '$lp' (tolerance $tol relative)"
      fi
    done
  done
done
# Accumulation that knows the optimizer step (docs/accumulation.md), at 2
# ranks: each framework's own accumulation (4 micro-batches per step, one
# sync per step: no_sync), and accelerate in a plain loop of 4 passes per
# step, with NCCLSHIM_ACCUM_STEPS=4, auto and 2 (mismatched): replicas
# identical in every run, calls skipped only in the plain loop (never where
# the framework syncs once per step), a disagreeing K said (or, where the
# shim learned no pass, that it learned none).
skipped() { grep -o 'accumulation: [0-9]* synced, [0-9]* skipped' "$1" | awk '$4 > m {m = $4} END {print m + 0}'; }
ACC_CASES=(
  "accelerate-accumulate|$D/accelerate_train.py --accum 4 --steps 10|own"
  "accelerate-plain-loop|$D/accelerate_train.py --naive 4 --steps 8|plain"
  "trainer-accumulation|$D/trainer_train.py --accum 4 --steps 10|own"
  "lightning-accumulate|$D/lightning_train.py --devices 2 --accum 4 --steps 10|own"
)
for c in "${ACC_CASES[@]}"; do
  IFS='|' read -r name cmd kind <<<"$c"
  read -r -a argv <<<"$cmd"
  for k in 4 auto 2; do
    log="$LOGS/$name.accum$k.log"
    start=$(date +%s)
    (cd "$TMPD" && NCCLSHIM_ACCUM_STEPS=$k NCCLSHIM_LOG=summary timeout "$T" "$RUN" --emulate --nproc 2 -- "${argv[@]}") >"$log" 2>&1
    rc=$? secs=$(( $(date +%s) - start )) r=$(replicas "$log" 2) s=$(skipped "$log")
    what="$name, NCCLSHIM_ACCUM_STEPS=$k"
    # the plain loop skips where K fits it (4, auto); a framework's own accumulation never
    want=no; [ "$kind" = plain ] && [ "$k" != 2 ] && want=yes
    got=no; [ "$s" -gt 0 ] && got=yes
    # K's disagreement is said, or that no pass was learned (a one-bucket model: nothing to check K against)
    said=yes; [ "$k" != auto ] && [ "$want" = no ] && ! grep -q "NCCLSHIM_ACCUM_STEPS=$k, but the optimizer stepped" "$log" &&
      ! grep -q "# accumulation: no backward pass learned" "$log" && said=no
    if [ $rc -eq 0 ] && [ "$r" = same ] && [ "$got" = "$want" ] && [ "$said" = yes ]; then
      ok "$what: replicas identical, $s call(s) skipped (${secs}s)"
    else
      not_ok "$what: exit $rc, replicas $r, $s skipped (want skipping: $want), disagreement said: $said ($log)"
    fi
  done
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
