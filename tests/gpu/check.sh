#!/usr/bin/env bash
# tests/gpu/check.sh — `make gpu-check`: everything that needs a real GPU, in
# one run of under 5 minutes on one GPU (e.g. an H200). Writes its outputs to
# build/gpu-check/ and prints a summary; exit 1 if any check failed.
#   1. kernels: every CUDA kernel bit for bit against the host reference
#      (all 2^32 fp32 inputs, 2^28 random values with scales, 2^31+5 counts,
#      graph capture), bandwidth against a device-to-device copy
#   2. allreduce_perf on the real libnccl (1 rank) without and with the shim:
#      zero #wrong, the shim's columns, a compressed 256 MiB all-reduce vs the
#      plain fp16 all-reduce of the same data (pipelining goal: <= 1.1x)
#   3. the shim never synchronises: no stream/context/event synchronize call
#      outside the private-stream configuration check (static count)
#   4. torchrun --nproc_per_node=1 DDP training of a small model, 50 steps,
#      without and with the shim (NCCLSHIM_LOG=calls): the shim intercepted the
#      bucket all-reduces, and the loss curves match within the stated tolerance
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=${B:-build}
OUT="$ROOT/$B/gpu-check"
mkdir -p "$OUT"
cd "$ROOT"
pass=0; fail=0
ok()     { echo "ok - $*"; pass=$((pass + 1)); }
not_ok() { echo "not ok - $*"; fail=$((fail + 1)); }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

echo "# gpu-check $(date -u +%Y-%m-%dT%H:%MZ) on $(nvidia-smi -L 2>/dev/null | head -1)"
SHIM="$ROOT/$B/lib/libncclshim.so"
# The real libnccl: the toolkit's, or the one PyTorch's wheel brings.
NCCL_DIR=$(dirname "$(ls "${NCCL_HOME:-/usr/local/cuda}"/lib*/libnccl.so.2 2>/dev/null | head -1)" 2>/dev/null)
PYNCCL=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
[ -n "$NCCL_DIR" ] || NCCL_DIR=$PYNCCL
echo "# real libnccl for allreduce_perf: $NCCL_DIR"

# 1. kernels
if timeout 180 "$ROOT/$B/tests/check_kernels" >"$OUT/kernels.txt" 2>&1; then ok "kernels bit-exact against the host reference"
else not_ok "kernels (see $OUT/kernels.txt)"; fi
grep -iE "GB/s|ratio|copy" "$OUT/kernels.txt" | head -20 | sed 's/^/#   /'

# 2. allreduce_perf on real NCCL, 1 rank (an MPI program: needs mpicc and mpirun;
#    a GPU image without them can carry Debian's openmpi packages, unpacked
#    with dpkg -x, as the device tool's README shows for other packages)
have_mpi=0
if command -v mpicc >/dev/null && command -v mpirun >/dev/null; then
  make -C "$ROOT" --no-print-directory B="$B" "$B/bin/allreduce_perf" >"$OUT/build-ap.log" 2>&1 && have_mpi=1
fi
if [ $have_mpi = 0 ]; then
  not_ok "allreduce_perf not built (no mpicc/mpirun here, or build failed: $OUT/build-ap.log): sections 2 skipped"
else
ap() { # name, then env assignments, then -- args
  local name=$1; shift; local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  env "${envs[@]}" LD_LIBRARY_PATH="$NCCL_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ALLREDUCE_PERF_MEM=cuda \
    timeout 120 mpirun -np 1 "$ROOT/$B/bin/allreduce_perf" "$@" >"$OUT/ap-$name.txt" 2>&1
}
ap plain -- -b 1M -e 256M -f 4 -n 20 -w 5 && ok "allreduce_perf, real NCCL, no shim" || not_ok "allreduce_perf no shim"
ap shim LD_PRELOAD="$SHIM" NCCLSHIM_LOG=summary -- -b 1M -e 256M -f 4 -n 20 -w 5 \
  && ok "allreduce_perf, real NCCL, shim fp16 (0 wrong)" || not_ok "allreduce_perf with shim"
grep -q "active on communicator" "$OUT/ap-shim.txt" && ok "shim banner on the real NCCL" || not_ok "no shim banner"
ap rand LD_PRELOAD="$SHIM" NCCLSHIM_LOG=off -- -b 64M -e 64M -n 10 -w 3 -R 1 \
  && ok "random inputs within the documented fp16 bound" || not_ok "random inputs"
# Pipelining: compressed 256 MiB fp32 vs plain fp16 all-reduce of 128 MiB (same elements).
ap wire -- -b 128M -e 128M -d half -n 30 -w 5
ap pipe LD_PRELOAD="$SHIM" NCCLSHIM_LOG=off -- -b 256M -e 256M -d float -n 30 -w 5
ap nopipe LD_PRELOAD="$SHIM" NCCLSHIM_LOG=off NCCLSHIM_CHUNK_BYTES=0 -- -b 256M -e 256M -d float -n 30 -w 5
t() { awk '/^ +[0-9]+ +[0-9]+ +(half|float)/ {print $6; exit}' "$OUT/ap-$1.txt"; }
w=$(t wire); p=$(t pipe); n=$(t nopipe)
if [ -n "$w" ] && [ -n "$p" ]; then
  r=$(awk -v p="$p" -v w="$w" 'BEGIN{printf "%.3f", p / w}'); rn=$(awk -v p="$n" -v w="$w" 'BEGIN{printf "%.3f", p / w}')
  echo "# 256 MiB fp32 compressed: pipelined $p us, not pipelined $n us; plain fp16 of the same data $w us; ratios $r / $rn (goal <= 1.1)"
  awk -v r="$r" 'BEGIN{exit !(r <= 1.1)}' && ok "pipelined compressed all-reduce <= 1.1x the plain wire-type one ($r)" \
    || not_ok "pipelined compressed all-reduce $r x the plain wire-type one (goal 1.1)"
else not_ok "pipelining measurement missing"; fi
fi

# 3. no synchronisation in the shim's call path (static: only the private-stream check may wait)
syncs=$(grep -nE "cu(Stream|Ctx|Event)Synchronize" shim/*.c shim/*/*.c compress/cu_*.c | grep -v "^\S*:[0-9]*: *\*\|//\|/\*" | wc -l)
grep -nE "cu(Stream|Ctx|Event)Synchronize" shim/*.c shim/*/*.c compress/cu_*.c >"$OUT/syncs.txt"
echo "# synchronize calls in the shim's sources: $syncs (see $OUT/syncs.txt; the private stream of oob_end is the one allowed)"

# 4. DDP training through torchrun, with and without the shim
if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  T="torchrun --standalone --nproc_per_node=1 $ROOT/tests/gpu/ddp_train.py --steps 50"
  NCCLSHIM_DISABLE=1 timeout 300 $T --out "$OUT/loss-plain.txt" >"$OUT/ddp-plain.log" 2>&1 \
    && ok "DDP training without the shim" || not_ok "DDP training without the shim"
  LD_PRELOAD="$SHIM" NCCLSHIM_LOG=calls NCCLSHIM_LOG_FILE="$OUT/ddp-calls.%r.jsonl" NCCLSHIM_MIN_BYTES=4096 \
    timeout 300 $T --out "$OUT/loss-shim.txt" >"$OUT/ddp-shim.log" 2>&1 \
    && ok "DDP training with the shim preloaded" || not_ok "DDP training with the shim"
  python3 "$ROOT/tests/gpu/ddp_compare.py" "$OUT" && ok "shim intercepted the bucket all-reduces; loss curves match" \
    || not_ok "DDP comparison (see above)"
else not_ok "python3 with a CUDA-enabled torch not found: DDP check not run"; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
