#!/usr/bin/env bash
# 80-torch.sh — real PyTorch (the PyPI wheel, on CPU) driving the NCCL API
# through the shim, launched by torchrun: DDP (default, find_unused_parameters,
# gradient_as_bucket_view, static_graph; SGD and Adam) and FSDP2 over the
# ncclpg backend (env/ncclshim/ncclpg.py) on the host NCCL's socket transport.
#   - the host NCCL has every NCCL symbol libtorch_cuda.so imports; under
#     torchrun (socket transport) its link model and fault injection hold;
#   - shim with NCCLSHIM_COMPRESS=off: parameters bit-identical to no shim;
#   - fp16 / bf16: loss per step within 2^-14 / 2^-11 (relative) of no shim
#     (a bound about 1/8 of the wire type's unit roundoff, for these 3-step
#     runs; measured about 4e-6 and 2e-5), and not bit-identical (it did
#     compress); FSDP2's reduce-scatter/all-gather pass through bit-identical;
#   - naive accumulation with NCCLSHIM_ACCUM_STEPS=4 (W=2 and 4): parameters
#     bit-identical to the learning-aware reference (--accum learning: every
#     pass of the learning phase — 4 passes, 5 with static_graph's two
#     whole-model passes — and every bucket below MIN_BYTES synced, the
#     others only on every 4th pass), within 1e-5 (max |diff| / max |p|) of
#     plain no_sync(); the call log shows 3 of 4 accumulable bucket
#     all-reduces skipped in the full cycles after learning; the same with
#     find_unused_parameters, gradient_as_bucket_view + Adam, a validation
#     metric all-reduced every 2 steps, and static_graph.
# Every launch runs several cases, each on a communicator of its own, so the
# torch start-up is paid once per launch; the accumulation cases interleave
# their passes (train.py --interleave), so that each communicator starts with
# the job. Budget: about 2 minutes on 2 cores.
# Must not: compare timings.
source "$(dirname "$0")/../lib.sh"
TRAIN="$ROOT/tests/torch/train.py"
CHECK=("$TORCH_VENV/bin/python" "$ROOT/tests/torch/check_runs.py")
if [ ! -x "$TORCH_VENV/bin/torchrun" ]; then
  not_ok "no torch in $TORCH_VENV (make deps installs it)"; exit 0
fi

# torch loads with the host NCCL as its libnccl.so.2: nothing it imports is missing.
TORCH_CUDA=$("$TORCH_VENV/bin/python" -c 'import os, importlib.util as u; print(os.path.join(os.path.dirname(u.find_spec("torch").origin), "lib", "libtorch_cuda.so"))')
nm -D --undefined-only "$TORCH_CUDA" | awk '$2 ~ /^nccl/ {print $2}' | sort -u >"$TMPD/torch-imports"
nm -D --defined-only "$HOSTNCCL_DIR/libnccl.so.2" | awk '{print $3}' | sort -u >"$TMPD/host-exports"
missing=$(comm -23 "$TMPD/torch-imports" "$TMPD/host-exports" | tr '\n' ' ')
if [ -s "$TMPD/torch-imports" ] && [ -z "$missing" ]; then
  ok "host NCCL defines all $(wc -l <"$TMPD/torch-imports") NCCL symbols libtorch_cuda.so imports"
else not_ok "NCCL symbols libtorch_cuda.so imports that the host NCCL lacks: $missing"; fi

# The cases. Basic ones: 3 optimizer steps of one pass. Accumulation ones:
# 4 steps of 4 passes, as the reference (learning) or plain no_sync(), and
# as the naive loop the shim accumulates (same case names).
CASES=(--case "sgd" --case "adam --opt adam" --case "unused --find-unused" --case "view --bucket-view --opt adam"
       --case "static --static-graph" --case "fsdp --fsdp")
NAMES="sgd adam unused view static fsdp"
A="--micro 4 --steps 4"
REFS=(--case "acc --accum learning $A" --case "acc-nosync --accum nosync $A"
      --case "acc-unused --accum learning --find-unused $A" --case "acc-view --accum learning --bucket-view --opt adam $A"
      --case "acc-metric --accum learning --metric-every 2 $A" --case "acc-static --accum learning --learn 5 --static-graph $A")
NAIVE=(--case "acc $A" --case "acc-unused --find-unused $A" --case "acc-view --bucket-view --opt adam $A"
       --case "acc-metric --metric-every 2 $A" --case "acc-static --static-graph $A")
# The accumulation redesign (issue 11, branch accum) is needed for these;
# until it is merged their checks are reported as skipped, not run.
PENDING=${TORCH_ACCUM_PENDING-""}
# launch OUT HOW N [VAR=value...] -- ARGS...: one torchrun of train.py (HOW:
# torchrun_host or torchrun_shim), records in $TMPD/OUT.json, a failing check
# if it fails.
launch() {
  local out=$1 how=$2 n=$3 envs=(); shift 3
  while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  with "${envs[@]}" "$how" "$n" "$TRAIN" --out "$TMPD/$out.json" --save "$TMPD/$out" --bucket-mb 0.1 --steps 3 "$@" \
    >"$TMPD/$out.log" 2>&1 || { not_ok "torchrun ($out) exited $?"; grep -v '^W1' "$TMPD/$out.log" | tail -n 20 | sed 's/^/#   /'; }
}
mkdir -p "$TMPD/log-k4" "$TMPD/log-k4w4"
pending() { [[ " $PENDING " == *" $1 "* ]]; }

K4=(NCCLSHIM_COMPRESS=off NCCLSHIM_ACCUM_STEPS=4 NCCLSHIM_LOG=calls)
launch plain torchrun_host 2 -- --interleave "${CASES[@]}" "${REFS[@]}"
launch off torchrun_shim 2 NCCLSHIM_COMPRESS=off -- "${CASES[@]}"
launch fp16 torchrun_shim 2 NCCLSHIM_COMPRESS=fp16 -- "${CASES[@]}"
launch bf16 torchrun_shim 2 NCCLSHIM_COMPRESS=bf16 -- "${CASES[@]}"
launch k4 torchrun_shim 2 "${K4[@]}" NCCLSHIM_LOG_FILE="$TMPD/log-k4/l.%r.%p.jsonl" -- --interleave "${NAIVE[@]}"
launch plain4 torchrun_host 4 -- --interleave --case "acc --accum learning $A" --case "acc-nosync --accum nosync $A"
launch k4w4 torchrun_shim 4 "${K4[@]}" NCCLSHIM_LOG_FILE="$TMPD/log-k4w4/l.%r.%p.jsonl" -- --case "acc $A"

# The host NCCL under torchrun (sockets, no mpirun): emulated link bound,
# injected failure, recovery.
with HOSTNCCL_LINK_GBPS=1 HOSTNCCL_FAIL_CALL=2 torchrun_host 2 "$ROOT/tests/torch/launcher_check.py" >"$TMPD/launcher.log" 2>&1 \
  || { not_ok "torchrun launcher_check.py exited $?"; tail -n 15 "$TMPD/launcher.log" | sed 's/^/#   /'; }
grep -E '^(ok|not ok) ' "$TMPD/launcher.log"

# The checkout's launcher runs --emulate as the wheel's does (issue 37: it
# answered "unknown option '--emulate'"): an unmodified DDP script on 2 CPU
# workers over the checkout's host NCCL, python3 being the torch venv's (an
# activated virtual environment), 3 steps, fp16 compressed.
(cd "$TMPD" && PATH="$TORCH_VENV/bin:$PATH" timeout 180 "$ROOT/env/ncclshim-run" --emulate --nproc 2 --link-gbps 10 \
  -- "$ROOT/tests/torch/plain_ddp.py" --steps 3) >"$TMPD/emulate.log" 2>&1
check "env/ncclshim-run --emulate --nproc 2 from the checkout: exit 0" test $? -eq 0
check "... the script ran its 3 steps" test "$(grep -c '^step [0-9] loss' "$TMPD/emulate.log")" -eq 3
check_grep "... its bucket all-reduces compressed to fp16" '^stats .*"compressed": 3,.*"wire": "fp16"' "$TMPD/emulate.log"

for r in plain off fp16 bf16 k4 plain4 k4w4; do "${CHECK[@]}" replicas "$TMPD/$r.json"; done
check_grep "the shim was active under torchrun" "ncclshim .* active on communicator" "$TMPD/off.log"
"${CHECK[@]}" same "$TMPD/plain.json" "$TMPD/off.json" $NAMES
"${CHECK[@]}" loss "$TMPD/plain.json" "$TMPD/fp16.json" 6.1e-5 $NAMES
"${CHECK[@]}" loss "$TMPD/plain.json" "$TMPD/bf16.json" 4.9e-4 $NAMES
"${CHECK[@]}" differs "$TMPD/plain.json" "$TMPD/fp16.json" sgd unused static
"${CHECK[@]}" differs "$TMPD/plain.json" "$TMPD/bf16.json" sgd
# FSDP2 reduces with reduce-scatter (compressed by the two-phase algorithm's
# first phase, fp32 accumulation) and gathers with all-gather (untouched):
# within the loss bound above, and really compressed (not bit-identical).
"${CHECK[@]}" differs "$TMPD/plain.json" "$TMPD/fp16.json" fsdp

# Accumulation, W=2: the bucket all-reduces of the naive loop are the
# communicators 0.. in case order (NAIVE), W=4: communicator 0.
seq=0
for c in acc acc-unused acc-view acc-metric acc-static; do
  if pending "$c"; then ok "$c # SKIP needs the accumulation redesign (issue 11)"; seq=$((seq + 1)); continue; fi
  "${CHECK[@]}" same "$TMPD/plain.json" "$TMPD/k4.json" "$c"
  "${CHECK[@]}" skips "$TMPD/log-k4" "$seq" 65536 4 "W=2 $c"
  seq=$((seq + 1))
done
"${CHECK[@]}" params "$TMPD/plain.acc-nosync.pt" "$TMPD/k4.acc.pt" 1e-5
"${CHECK[@]}" same "$TMPD/plain4.json" "$TMPD/k4w4.json" acc
"${CHECK[@]}" skips "$TMPD/log-k4w4" 0 65536 4 "W=4 acc"
"${CHECK[@]}" params "$TMPD/plain4.acc-nosync.pt" "$TMPD/k4w4.acc.pt" 1e-5
