#!/usr/bin/env bash
# 82-loss.sh — the training loss of real PyTorch per wire format against fp32
# (tests/torch/loss_formats.py; the full runs and their numbers are in
# bench/README.md, "Training loss per wire format"): DDP and FSDP2 (whose
# reduce-scatters are compressed by the two-phase first phase) on the MLP of
# train.py, W=2, 60 optimizer steps of one seed, under the shim with
# NCCLSHIM_COMPRESS=int8 and int8 with NCCLSHIM_ERROR_FEEDBACK=1 (LOSS_FORMATS
# to choose others, e.g. fp16@twophase,bf16), against the same run over the
# host NCCL without the shim. Each: the final loss (mean of the last 30 steps) within
# B |fp32 final| of fp32's, B the documented max |error| / sum |x| of one
# compressed call in that format (loss_formats.py's header); every rank holds
# the same parameters; the parameters differ from fp32's (it did compress),
# and int8-ef's from int8's (the feedback acted).
# The full runs measured up to 10 % of that tolerance (int8 DDP), this short
# one about 1.5 %. Budget: 3 torchrun launches, about 60 s.
# Must not: compare timings.
source "$(dirname "$0")/../lib.sh"
if [ ! -x "$TORCH_VENV/bin/torchrun" ]; then
  not_ok "no torch in $TORCH_VENV (make deps installs it)"; exit 0
fi
mkdir -p "$TMPD/loss"
# FSDP2 passes fresh reduce-scatter buffers to every call: its buckets are
# told apart by their position in the learned sequence (shim/ef/ef.h), so
# its int8-ef run gets feedback too. LOSS_EF_SKIP=fsdp (or ddp) reports that
# family's "the feedback acted" check as skipped.
EF_SKIP=${LOSS_EF_SKIP-}
FORMATS=${LOSS_FORMATS:-int8,int8-ef}
SHIM="$SHIM" HOSTNCCL_DIR="$HOSTNCCL_DIR" timeout "${TEST_TIMEOUT:-300}" "$TORCH_VENV/bin/python" \
  "$ROOT/tests/torch/loss_formats.py" --world 2 --steps 60 --tail 30 --seeds 1 --fsdp --formats "$FORMATS" \
  --check --workdir "$TMPD/loss" --timeout "${TEST_TIMEOUT:-300}" --ef-skip "$EF_SKIP" >"$TMPD/loss.out" 2>&1
rc=$?
sed -n 's/^# /#   /p' "$TMPD/loss.out"   # the table, for the log
grep -E '^(ok|not ok) ' "$TMPD/loss.out"
n=$(grep -cE '^ok ' "$TMPD/loss.out")
nf=$(( $(tr -cd , <<<"$FORMATS" | wc -c) + 1 ))
# 3 checks per format and family (one more for an -ef format run with its base)
check "loss_formats.py exited 0 with at least $((nf * 6)) passing checks" test "$rc" -eq 0 -a "$n" -ge $((nf * 6))
