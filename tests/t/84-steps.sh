#!/usr/bin/env bash
# 84-steps.sh — accumulation that knows the optimizer step (docs/accumulation.md),
# on real PyTorch on CPU over the host NCCL, 2 ranks, the in-worker hook on
# PYTHONPATH as ncclshim-run puts it (ncclshim.steps):
#   - a naive loop of 4 backward passes per step with NCCLSHIM_ACCUM_STEPS=4,
#     and =auto: calls skipped, replicas identical;
#   - a loop that steps every 2 passes with K=4 (before: the replicas diverged,
#     no word): every pass syncs, rank 0 says K disagrees, replicas identical;
#   - windows cut short (every 3rd step has 2 passes, K=4): the step after a
#     skipped pass averages the DDP gradients first (said once), replicas
#     identical, calls still skipped elsewhere;
#   - a planted divergence (rank 1 nudges a parameter after step 3) with
#     NCCLSHIM_REPLICA_CHECK=2: every rank reports it within 2 steps;
#   - an unmodified accelerate script under ncclshim-run --emulate: its own
#     accumulate() (4 micro-batches, one sync per step) with K=4: nothing
#     skipped, K's disagreement said, replicas identical.
# accelerate in a plain loop with auto, the Trainer and Lightning with their
# own accumulation: make test-frameworks (tests/frameworks/run.sh).
# About 80 s on 2 cores (torch's start-up is most of it).
# Must not: compare timings.
source "$(dirname "$0")/../lib.sh"
if [ ! -x "$TORCH_VENV/bin/python" ]; then
  not_ok "no torch in $TORCH_VENV (make deps installs it)"; exit 0
fi
shim_env_clean
export NCCLSHIM_LOG=summary OMP_NUM_THREADS=1
T="$ROOT/tests/torch/train.py"

# run NAME K ARGS...: train.py under the shim with the hook, K accumulation steps
run() {
  local name=$1 k=$2; shift 2
  (cd "$TMPD" && NCCLSHIM_ACCUM_STEPS=$k torchrun_hooked 2 "$T" --out "$TMPD/$name.json" "$@") >"$TMPD/$name.log" 2>&1
}
# equal NAME [CASE]: every rank's parameters the same bits at the end
equal() { "$TORCH_VENV/bin/python" -c 'import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if r[sys.argv[2]]["replicas_equal"] else 1)' \
            "$TMPD/$1.json" "${2:-run}"; }
# skipped NAME: calls answered locally on the communicator that skipped most (rank 0's summaries)
skipped() { grep -o 'accumulation: [0-9]* synced, [0-9]* skipped' "$TMPD/$1.log" | awk '$4 > m {m = $4} END {print m + 0}'; }

NCCLSHIM_REPLICA_CHECK=2 run naive 4 --steps 8 --micro 4 --case "run --micro 4" --case "nudge --micro 4 --nudge 3"
rc=$?
ran() { [ "$1" -eq 0 ] && equal "$2" "${3:-run}"; }
check "K=4, a naive loop of 4 passes per step: exit 0, replicas identical" ran $rc naive
n=$(skipped naive)
checked() { [ "${n:-0}" -gt 0 ] && grep -q "the optimizer's steps decide which passes sync (K checked" "$TMPD/naive.log" &&
            ! grep -q unchecked "$TMPD/naive.log"; }
check "... calls skipped ($n), checked against the steps (no 'unchecked')" checked
# the nudge case comes after the first in the same process: steps 9..16 of the
# process, the nudge after its step 3 (the process's 12th), checked every 2
check_grep "a planted divergence after step 3 is reported on rank 0 within 2 steps, naming both ranks" \
  "ncclshim\\[rank 0\\]: the replicas of DDP module 0 differ after optimizer step 1[24]: rank 0 alone; rank 1 alone" "$TMPD/naive.log"
check_grep "... and on rank 1" "ncclshim\\[rank 1\\]: the replicas of DDP module 0 differ after optimizer step 1[24]" "$TMPD/naive.log"
check_fails "... and not before it (the first case's checks, every 2 steps, found none)" \
  grep -E 'differ after optimizer step ([0-9]|10):' "$TMPD/naive.log"

run k2 4 --steps 8 --micro 2
rc=$?
check "K=4 but the optimizer steps every 2 passes: exit 0, replicas identical (diverged before)" ran $rc k2
check "... nothing skipped ($(skipped k2))" test "$(skipped k2)" = 0
check_grep "... rank 0 says K disagrees with the steps" \
  "NCCLSHIM_ACCUM_STEPS=4, but the optimizer stepped after 2 backward pass\\(es\\) twice in a row: every pass syncs" "$TMPD/k2.log"

run short 4 --steps 9 --micro 4 --short-every 3 --short 2
rc=$?
check "K=4, every 3rd step after 2 passes: exit 0, replicas identical" ran $rc short
check_grep "... the step after a skipped pass averaged the DDP gradients first (said once)" \
  "ncclshim\\[rank 0\\]: the optimizer stepped before accumulation.s window ended" "$TMPD/short.log"
check "... and calls were still skipped ($(skipped short))" test "$(skipped short)" -gt 0

run auto auto --steps 8 --micro 4
rc=$?
check "ACCUM_STEPS=auto, 4 passes per step: exit 0, replicas identical" ran $rc auto
check_grep "... it learned 4 passes per step" "NCCLSHIM_ACCUM_STEPS=auto: the optimizer steps after every 4 backward passes" "$TMPD/auto.log"
check "... and skipped calls ($(skipped auto))" test "$(skipped auto)" -gt 0

# accelerate, unmodified, through the launcher (which installs the hook)
export PATH="$TORCH_VENV/bin:$PATH"
acc() { # NAME SETTINGS... -- ARGS...
  local name=$1 kv=(); shift
  while [ "$1" != -- ]; do kv+=("$1"); shift; done
  shift
  (cd "$TMPD" && env "${kv[@]}" timeout "${TEST_TIMEOUT:-180}" "$ROOT/env/ncclshim-run" --emulate --nproc 2 -- \
     "$ROOT/tests/frameworks/accelerate_train.py" "$@") >"$TMPD/$name.log" 2>&1
}
same_params() { [ "$1" -eq 0 ] &&
                [ "$(grep -o 'rank [01] params [0-9a-f]\{64\}' "$TMPD/$2.log" | sort -u | awk '{print $4}' | sort -u | wc -l)" -eq 1 ] &&
                [ "$(grep -o 'rank [01] params' "$TMPD/$2.log" | sort -u | wc -l)" -eq 2 ]; }
acc acc4 NCCLSHIM_ACCUM_STEPS=4 -- --accum 4 --steps 10
rc=$?
check "accelerate's accumulate() (4 micro-batches) with K=4: exit 0, replicas identical" same_params $rc acc4
check "... nothing skipped: its loop syncs once per step ($(skipped acc4))" test "$(skipped acc4)" = 0
check_grep "... and K's disagreement is said" "NCCLSHIM_ACCUM_STEPS=4, but the optimizer stepped after 1 backward pass" "$TMPD/acc4.log"
