#!/usr/bin/env bash
# bench/demo.sh — the README's main command (`make demo`).
#
# Without a GPU: 4 ranks over the host NCCL with an emulated slow link
# (DEMO_GBPS, default 1 Gb/s): allreduce_perf without the shim, with fp16 and
# with bf16, side by side for 1..64 MiB with the ratio to no shim; then
# ddp_step (plain DDP vs fp16 vs fp16 + K=4: calls, wire bytes and
# communication time per optimizer step). With GPUs and a real libnccl, the
# same comparison on the real library (one rank per GPU, no emulation).
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
  where="host NCCL (tests/hostnccl) over Open MPI, emulated link ${GBPS} Gb/s, 4 ranks on $(nproc) cores: emulation, not GPU numbers"
  LIBPATH="$BUILD/lib/hostnccl${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export HOSTNCCL_LINK_GBPS=$GBPS
fi
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
  run ap "$name" "$@" -- "$BUILD/bin/allreduce_perf" -b 1M -e 64M -f 2 -n "${DEMO_ITERS:-2}" -w 1 -J "$OUT/ap-$name.json"
}

echo "# running allreduce_perf: no shim, shim fp16, shim bf16 ..."
perf plain
perf fp16 NCCLSHIM_COMPRESS=fp16 NCCLSHIM_LOG=off
perf bf16 NCCLSHIM_COMPRESS=bf16 NCCLSHIM_LOG=off
grep -h "active on communicator" "$OUT/ap-fp16.txt" | head -1
echo "# allreduce_perf table with the shim (fp16), as allreduce_perf prints it:"
grep -vE '^ncclshim\[' "$OUT/ap-fp16.txt" | sed -n '/^#  *size/,$p' | head -14
python3 "$ROOT/bench/demo_report.py" perf "$OUT" || exit 1

echo
echo "# ddp_step: plain DDP vs shim fp16 vs shim fp16 + K=4 (per optimizer step)"
ddp() {
  local name=$1; shift
  run ddp "$name" "$@" -- "$BUILD/bin/ddp_step" --params "${DEMO_PARAMS:-2M}" --accum 4 --warmup 1 --steps 2
}
ddp plain
ddp fp16 NCCLSHIM_COMPRESS=fp16 NCCLSHIM_LOG=off
ddp fp16-k4 NCCLSHIM_COMPRESS=fp16 NCCLSHIM_ACCUM_STEPS=4 NCCLSHIM_LOG=off
python3 "$ROOT/bench/demo_report.py" ddp "$OUT" || exit 1
python3 "$ROOT/bench/demo_report.py" plots "$OUT"
