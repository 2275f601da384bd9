#!/usr/bin/env bash
# bench/demo.sh — the README's main command (`make demo`).
#
# Without a GPU: 4 ranks over the host NCCL with an emulated slow link
# (DEMO_GBPS, default 1 Gb/s): allreduce_perf without the shim, with fp16 and
# with bf16, side by side for 1, 4 and 16 MiB (DEMO_MAX_BYTES, factor 4) with
# the ratio to no shim; then real PyTorch under torchrun (tests/torch/train.py:
# a small transformer, naive accumulation of 4 passes per step) without the
# shim, with fp16 and with fp16 + K=4: per optimizer step the time,
# communication time, wire bytes and loss; last, the shim's diagnosis of the
# runs it was loaded in (bench/ncclshim-report over their calls logs: why
# the steps took their time). With GPUs and a real libnccl, the allreduce_perf
# comparison on the real library (one rank per GPU, no emulation).
# Writes JSON, tables and PNG plots to $B/demo/. Host timings are emulation
# results, never GPU numbers.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=${B:-build}
BUILD="$ROOT/$B"
OUT="$BUILD/demo"
GBPS=${DEMO_GBPS:-1}
NP=${DEMO_RANKS:-4}
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
SHIM="$BUILD/lib/libncclshim.so"
# Emulation overheads that are not the link (the host NCCL's cross-rank
# argument check, busy-polling ranks on oversubscribed cores) are turned off
# for every variant alike.
export HOSTNCCL_CHECK=${HOSTNCCL_CHECK:-0} OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}

ngpu=0
if command -v nvidia-smi >/dev/null 2>&1; then ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU'); fi
if [ "$ngpu" -gt 0 ]; then
  NP=$ngpu
  where="real NCCL on $ngpu GPU(s)"
  LIBPATH=${LD_LIBRARY_PATH:-}
  unset HOSTNCCL_LINK_GBPS
else
  where="host NCCL (tests/hostnccl: over Open MPI under mpirun, loopback TCP under torchrun), emulated link ${GBPS} Gb/s, ${NP} ranks on $(nproc) cores: emulation, not GPU numbers"
  LIBPATH="$BUILD/lib/hostnccl${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export HOSTNCCL_LINK_GBPS=$GBPS
  # The emulated link charges nothing per launch (HOSTNCCL_LAUNCH_US unset):
  # the shim is told so, as a preset tells it its fabric's cost (issue 33).
  export NCCLSHIM_LAUNCH_BYTES=${NCCLSHIM_LAUNCH_BYTES:-0}
fi
export DEMO_NP=$NP # the plots name the rank count
echo "# ncclshim demo: $where"
echo "# outputs in $OUT"

# run KIND NAME [VAR=value...] -- program args...: one mpirun of a benchmark
# (the shim preloaded unless NAME is "plain"), output in $OUT/KIND-NAME.txt.
run() {
  local kind=$1 name=$2; shift 2
  local envs=() pre=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  [ "$name" != plain ] && pre=(-x LD_PRELOAD="$SHIM")
  env "${envs[@]}" timeout 600 mpirun -np "$NP" -x LD_LIBRARY_PATH="$LIBPATH" "${pre[@]}" "$@" \
    >"$OUT/$kind-$name.txt" 2>&1 \
    || { echo "demo: $kind ($name) failed, see $OUT/$kind-$name.txt" >&2; tail -5 "$OUT/$kind-$name.txt" >&2; exit 1; }
}
perf() {
  local name=$1; shift
  run ap "$name" "$@" -- "$BUILD/bin/allreduce_perf" -b 1M -e "${DEMO_MAX_BYTES:-16M}" -f 4 -n "${DEMO_ITERS:-2}" -w 1 \
    -J "$OUT/ap-$name.json"
}

echo "# running allreduce_perf: no shim, shim fp16, shim bf16 ..."
perf plain
perf fp16 NCCLSHIM_COMPRESS=fp16 NCCLSHIM_LOG=off
perf bf16 NCCLSHIM_COMPRESS=bf16 NCCLSHIM_LOG=off
grep -h "active on communicator" "$OUT/ap-fp16.txt" | head -1
echo "# allreduce_perf table with the shim (fp16), as allreduce_perf prints it:"
grep -vE '^ncclshim\[' "$OUT/ap-fp16.txt" | sed -n '/^#  *size/,$p' | head -8
python3 "$ROOT/bench/demo_report.py" perf "$OUT" || exit 1

echo
if [ "$ngpu" -gt 0 ]; then
  echo "# real PyTorch part: runs on the host NCCL only (on GPUs see make gpu-check's DDP comparison)"
  python3 "$ROOT/bench/demo_report.py" plots "$OUT"
  exit 0
fi
# Real PyTorch (the PyPI wheel on CPU, tests/torch/): torchrun trains a small
# transformer language model over the host NCCL's socket transport with the
# emulated link, three ways, the same naive accumulation loop (4 backward
# passes per optimizer step, no no_sync): no shim, shim fp16, shim fp16 +
# NCCLSHIM_ACCUM_STEPS=4. The shim's runs have the package's hook on
# PYTHONPATH as ncclshim-run puts it there (K checked against the optimizer's
# steps, docs/accumulation.md).
TORCH_VENV=${SHIMTEST_TORCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ncclshim/torch-venv}
MODEL=(--model transformer --width "${DEMO_WIDTH:-256}" --layers 4 --vocab 1024 --seq 32 --batch "${DEMO_BATCH:-2}"
       --micro 4 --steps "${DEMO_STEPS:-8}" --bucket-mb 4 --opt adam --lr 0.5)
echo "# torchrun --nproc_per_node=$NP tests/torch/train.py ${MODEL[*]}: no shim, fp16, fp16 + K=4 ..."
# The shim's runs keep a calls log (NCCLSHIM_LOG=calls: a few records per
# pass) in $OUT/diag-NAME/ for the diagnosis at the end.
train() {
  local name=$1; shift
  local pre=(NCCLSHIM_LOG=off)
  rm -rf "$OUT/diag-$name"
  [ "$name" != plain ] && mkdir -p "$OUT/diag-$name" &&
    pre=(LD_PRELOAD="$SHIM" PYTHONPATH="$ROOT/env/ncclshim/site" NCCLSHIM_LOG=calls
         NCCLSHIM_LOG_FILE="$OUT/diag-$name/l.%r.%p.jsonl")
  env "${pre[@]}" "$@" HOSTNCCL_LIB="$BUILD/lib/hostnccl/libnccl.so.2" OMP_NUM_THREADS=1 \
    timeout 600 "$TORCH_VENV/bin/torchrun" --standalone --nproc_per_node="$NP" "$ROOT/tests/torch/train.py" \
    "${MODEL[@]}" --case "$name" --out "$OUT/torch-$name.json" >"$OUT/torch-$name.txt" 2>&1 \
    || { echo "demo: torch ($name) failed, see $OUT/torch-$name.txt" >&2; tail -5 "$OUT/torch-$name.txt" >&2; exit 1; }
}
train plain
train fp16 NCCLSHIM_COMPRESS=fp16
train fp16-k4 NCCLSHIM_COMPRESS=fp16 NCCLSHIM_ACCUM_STEPS=4
# Steps 0 and 1 sync every pass (the shim learns the pass, then the hook a
# window of K passes): the medians start at step 2.
export TORCH_WARM=2
python3 "$ROOT/bench/demo_report.py" torch "$OUT" || exit 1
python3 "$ROOT/bench/demo_report.py" plots "$OUT"
echo
python3 "$ROOT/bench/demo_report.py" diag "$OUT" || exit 1
