#!/usr/bin/env bash
# bench/ddp_compare.sh — plain DDP, shim fp16 and shim fp16 + K-step
# accumulation side by side in one run of bench/ddp_step (plus the manual
# no_sync loop for reference), over the host NCCL with an emulated link.
#
#   bench/ddp_compare.sh [--gbps G] [--ranks N] [--rounds R] [-- ddp_step options]
#
# Every variant runs the same naive loop (backward K times, step once); the
# rounds interleave the variants and each number is the median over rounds of
# ddp_step's per-optimizer-step medians (measured after its warm-up steps, so
# the shim has learned the pass). Prints calls, real calls, wire bytes and the time
# inside ncclAllReduce per optimizer step with ratios to plain, and checks
# that every variant ends with the same parameters (the inputs are exact in
# fp16, so they must). Exit 1 on a failed run or differing parameters; the
# timings themselves are reported, never asserted.
# Must not: leave processes behind (each mpirun runs under timeout).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=${B:-build}
BUILD="$ROOT/$B"
GBPS=1 NP=4 ROUNDS=1
while [ $# -gt 0 ]; do
  case $1 in
    --gbps) GBPS=$2; shift 2 ;;
    --ranks) NP=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "ddp_compare: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
ARGS=(--params 4M --first-cap 1M --cap 4M --accum 4 --warmup 2 --steps 2 --quiet "$@")
K=4
for ((i = 0; i < ${#ARGS[@]}; i++)); do [ "${ARGS[i]}" = --accum ] && K=${ARGS[i + 1]}; done

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
export HOSTNCCL_LINK_GBPS=$GBPS
LIBPATH="$BUILD/lib/hostnccl${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
SHIM="$BUILD/lib/libncclshim.so"
for f in "$BUILD/bin/ddp_step" "$SHIM" "$BUILD/lib/hostnccl/libnccl.so.2"; do
  [ -e "$f" ] || { echo "ddp_compare: $f missing (make $B/bin/ddp_step $B/lib/libncclshim.so)" >&2; exit 2; }
done
OUT=$(mktemp -d "${TMPDIR:-/tmp}/ddp_compare.XXXXXX")
trap 'rm -rf "$OUT"' EXIT

NAMES=(plain fp16 fp16_k nosync)
LABELS=("plain DDP (no shim)" "shim fp16" "shim fp16 + K=$K" "manual no_sync (no shim)")
# run NAME ROUND: one ddp_step run; the summary line and hash go to $OUT/NAME.R.
run() {
  local name=$1 r=$2 pre=() env=() extra=()
  case $name in
    fp16) pre=(-x LD_PRELOAD="$SHIM"); env=(NCCLSHIM_COMPRESS=fp16 NCCLSHIM_LOG=off) ;;
    fp16_k) pre=(-x LD_PRELOAD="$SHIM"); env=(NCCLSHIM_COMPRESS=fp16 NCCLSHIM_ACCUM_STEPS=$K NCCLSHIM_LOG=off) ;;
    nosync) extra=(--nosync) ;;
  esac
  if ! env "${env[@]}" timeout 300 mpirun -np "$NP" -x LD_LIBRARY_PATH="$LIBPATH" "${pre[@]}" \
      "$BUILD/bin/ddp_step" "${ARGS[@]}" "${extra[@]}" >"$OUT/$name.$r.log" 2>&1; then
    echo "ddp_compare: $name failed:" >&2; tail -n 15 "$OUT/$name.$r.log" >&2; exit 1
  fi
}

for ((r = 0; r < ROUNDS; r++)); do for n in "${NAMES[@]}"; do run "$n" "$r"; done; done

# median NAME KEY: median over rounds of KEY=value from the summary lines.
median() {
  grep -h '^summary:' "$OUT/$1".*.log | tr ' ' '\n' | sed -n "s/^$2=//p" | sort -g |
    awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}

head -n 1 "$OUT/plain.0.log"
echo "# ddp_compare: $NP ranks over the host NCCL, emulated link $GBPS Gb/s, $ROUNDS round(s), $(nproc) cores:"
echo "# emulation, not GPU numbers. Per optimizer step ($K micro-steps); comm = wall time inside ncclAllReduce"
echo "# (mean over ranks; bucket = gradient buckets only), medians after warm-up; ratio = to plain DDP."
printf "%-26s %6s %6s %8s %12s %10s %7s %10s %7s %7s\n" variant calls real skipped wire_B comm_ms ratio bucket_ms ratio wire
declare -A T B W
for i in "${!NAMES[@]}"; do
  n=${NAMES[i]}
  T[$n]=$(median "$n" comm_ms); B[$n]=$(median "$n" bucket_comm_ms); W[$n]=$(median "$n" wire_bytes)
  awk -v l="${LABELS[i]}" -v c="$(median "$n" calls)" -v rc="$(median "$n" real_calls)" -v s="$(median "$n" skipped)" \
      -v w="${W[$n]}" -v t="${T[$n]}" -v b="${B[$n]}" -v t0="${T[plain]}" -v b0="${B[plain]}" -v w0="${W[plain]}" \
      'BEGIN {printf "%-26s %6d %6d %8d %12d %10.2f %7.3f %10.2f %7.3f %7.3f\n", l, c, rc, s, w, t, t / t0, b, b / b0, w / w0}'
done
awk -v t="${T[fp16_k]}" -v t0="${T[plain]}" -v k="$K" -v g="$GBPS" \
  'BEGIN {printf "# shim fp16 + K=%d needs %.3fx the communication time of plain DDP per optimizer step at %s Gb/s\n", k, t / t0, g}'

hashes=$(grep -h '^params_hash=' "$OUT"/*.log | sed 's/ .*//' | sort -u)
if [ "$(echo "$hashes" | wc -l)" -eq 1 ] && ! grep -qh 'replicas_identical=0' "$OUT"/*.log; then
  echo "# final parameters: identical in every variant and on every rank ($hashes)"
else
  echo "ddp_compare: final parameters differ between variants:" >&2
  grep -H '^params_hash=' "$OUT"/*.log >&2
  exit 1
fi
