#!/usr/bin/env bash
# 80-torch16.sh — real PyTorch (CPU wheel) reducing gradients in bf16 through
# the shim (issue 47), 2 ranks under torchrun over the ncclpg backend: DDP on
# a model cast to bf16 (its buckets are bf16 all-reduces) and FSDP2 with
# MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=bf16) (bf16
# reduce-scatters), 3 steps each:
#   - no settings: the 16-bit calls are left to NCCL, parameters bit-identical
#     to the run without the shim;
#   - NCCLSHIM_COMPRESS=bf16 ALGO=twophase (bf16 wire, fp32 sums): the calls
#     compressed (the shim's counters), parameters bit-identical to plain
#     NCCL's (at 2 ranks one rounding of the sum either way);
#   - NCCLSHIM_COMPRESS=int8 ALGO=twophase: compressed (parameters not plain's bits), the loss per step
#     within 5e-3 (relative) of plain's (measured: equal, the bf16 loss of
#     these 3-step runs does not see int8's rounding; the bound is int8's
#     unit of about 1/127 of a block's largest gradient, with room);
#   - every rank holds the same parameters in every run.
# Must not: compare timings.
source "$(dirname "$0")/../lib.sh"
TRAIN="$ROOT/tests/torch/train.py"
CHECK=("$TORCH_VENV/bin/python" "$ROOT/tests/torch/check_runs.py")
if [ ! -x "$TORCH_VENV/bin/torchrun" ]; then
  not_ok "no torch in $TORCH_VENV (make deps installs it)"; exit 0
fi
CASES=(--case "ddp-bf16 --dtype bf16" --case "fsdp-bf16 --fsdp --dtype bf16")
NAMES="ddp-bf16 fsdp-bf16"
launch() {
  local out=$1 how=$2 n=$3 envs=(); shift 3
  while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  with "${envs[@]}" "$how" "$n" "$TRAIN" --out "$TMPD/$out.json" --bucket-mb 0.1 --steps 3 "$@" \
    >"$TMPD/$out.log" 2>&1 || { not_ok "torchrun ($out) exited $?"; grep -v '^W1' "$TMPD/$out.log" | tail -n 20 | sed 's/^/#   /'; }
}
launch plain torchrun_host 2 -- "${CASES[@]}"
launch none torchrun_shim 2 -- "${CASES[@]}"
launch own torchrun_shim 2 NCCLSHIM_COMPRESS=bf16 NCCLSHIM_ALGO=twophase NCCLSHIM_MIN_BYTES=0 -- "${CASES[@]}"
launch int8 torchrun_shim 2 NCCLSHIM_COMPRESS=int8 NCCLSHIM_ALGO=twophase NCCLSHIM_MIN_BYTES=0 -- "${CASES[@]}"
for r in plain none own int8; do "${CHECK[@]}" replicas "$TMPD/$r.json"; done
"${CHECK[@]}" same "$TMPD/plain.json" "$TMPD/none.json" $NAMES
"${CHECK[@]}" same "$TMPD/plain.json" "$TMPD/own.json" $NAMES
"${CHECK[@]}" compressed "$TMPD/own.json" 3 $NAMES
"${CHECK[@]}" loss "$TMPD/plain.json" "$TMPD/int8.json" 5e-3 $NAMES
"${CHECK[@]}" compressed "$TMPD/int8.json" 3 $NAMES
"${CHECK[@]}" differs "$TMPD/plain.json" "$TMPD/int8.json" $NAMES
