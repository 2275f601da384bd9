#!/usr/bin/env bash
# bench/accuracy16.sh [DT] — the accuracy of 16-bit all-reduces (issue 47):
# DT (bf16, default, or fp16) inputs at n = 2, 4, 8 and 16 ranks
# (oversubscribed), random and cancelling (tests/shim/shim_half.c's
# "bound": magnitudes over a range of exponents, one per window of 4096
# elements; cancel: signs alternating over the ranks), 65536 elements a
# rank, Sum, against the exact (fp64) sum of the 16-bit inputs, for
#   plain   the host NCCL's own 16-bit ring (NCCLSHIM_DISABLE=1), which rounds
#           its partial sum to the input type at every hop, as NCCL does;
#   own     the shim, the input's own wire, fp32 sums (NCCLSHIM_COMPRESS=DT,
#           ALGO=twophase);
#   int8, fp8, int4  the shim, block-scaled wires, fp32 sums.
# Prints a Markdown table: max and median |error| / sum|x| per element, and
# the share of elements that are not the exact sum rounded once to DT. The
# shim's rows are run with CHECK_BOUND=1: a run with an element beyond its
# documented bound (docs/collectives.md, "16-bit inputs") fails the script.
# Timings play no part. Environment: B (build dir), N (elements per rank),
# NLIST (rank counts).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=${B:-build}
BUILD="$ROOT/$B"
DT=${1:-bf16}
N=${N:-65536}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
export OMPI_MCA_mpi_yield_when_idle=1 NCCLSHIM_LOG=off NCCLSHIM_BANNER=0
# the launch price pinned (as ratios.sh): at auto a communicator's first calls
# are its measurement's plain samples, whatever the algorithm asked for
export NCCLSHIM_LAUNCH_BYTES=${NCCLSHIM_LAUNCH_BYTES:-0}
P="$BUILD/tests/shim_half"
[ -x "$P" ] || { echo "accuracy16: $P missing (make test-build)" >&2; exit 1; }

# one NAME KIND NP [VAR=VAL...]: the "acc" line of one run
one() {
  local name=$1 kind=$2 np=$3; shift 3
  local envs=() out
  for kv in "$@"; do envs+=(-x "$kv"); done
  out=$(timeout 600 mpirun -np "$np" -x LD_LIBRARY_PATH="$BUILD/lib/hostnccl" -x LD_PRELOAD="$BUILD/lib/libncclshim.so" \
    "${envs[@]}" "$P" bound "$DT" "$N" "$kind" 2>&1) || { echo "accuracy16: $name $kind n=$np failed:" >&2; echo "$out" | tail -5 >&2; exit 1; }
  echo "$out" | grep '^acc '
}

echo "# $DT all-reduce, $N elements a rank, Sum; |error| / sum|x| per element against the fp64 sum; 'off': share not correctly rounded"
echo
echo "| inputs | n | plain $DT ring max | median | off | shim $DT wire max | median | off | int8 max | median | fp8 max | median | int4 max | median |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for kind in random cancel; do
  for np in ${NLIST:-2 4 8 16}; do
    p=$(one plain $kind $np NCCLSHIM_DISABLE=1) || exit 1
    o=$(one own $kind $np NCCLSHIM_COMPRESS="$DT" NCCLSHIM_ALGO=twophase CHECK_BOUND=1) || exit 1
    row="| $kind | $np | $(echo "$p" | awk '{print $7 " | " $8 " | " $9}') | $(echo "$o" | awk '{print $7 " | " $8 " | " $9}')"
    for w in int8 fp8 int4; do
      x=$(one $w $kind $np NCCLSHIM_COMPRESS=$w NCCLSHIM_ALGO=twophase CHECK_BOUND=1) || exit 1
      row="$row | $(echo "$x" | awk '{print $7 " | " $8}')"
    done
    echo "$row |"
  done
done
