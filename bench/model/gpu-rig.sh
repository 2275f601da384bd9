#!/usr/bin/env bash
# bench/model/gpu-rig.sh [--check] — the cost model (--fabric gpu) against
# the ten all-reduce and all-gather figures of the first GPU run (one H200,
# NCCL 2.28.9, PyTorch 2.11, 2026-12-04; W ranks sharing the GPU, each its
# own NCCL_HOSTID, NCCL's NET/Socket between them; 64 MiB of fp32 per rank):
# predicted / measured, and how many lie within 20 %.
#
# The rig as a fabric (MODELLED; its parameters come from the run itself):
#   - W nodes of one rank (NCCL_HOSTID per rank);
#   - the link: the plain all-gather's bus bandwidth (W=2: 1.83 GB/s,
#     W=4: 1.07 GB/s: 64 MiB x (W-1)/W in 18.4 and 50.3 ms);
#   - alpha per launch: 2.3 ms (W=2), 6.9 ms (W=4), the issue's estimate from
#     the 1 MiB-piece runs (most likely the GPU time-slicing between the
#     ranks' processes), overlapping the transfers by --launch-overlap 0.5;
#   - the two-phase runs of that day: fp16, ALGO=twophase, the second phase
#     a group of sends and receives, pieces of 1 MiB, 8 MiB or one.
# --check: exit 1 when fewer than 8 of the 10 are within 20 % (31-model.sh).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
M="$ROOT/${B:-build}/bin/ncclshim_model"
[ -x "$M" ] || { echo "gpu-rig: $M is not built (make)" >&2; exit 2; }
check=0; [ "${1:-}" = --check ] && check=1
t() {
  "$M" --fabric gpu --ranks-per-node 1 --intra-gbps 400 --launch-overlap 0.5 --bytes 64M --json \
    --set NCCLSHIM_MIN_BYTES=0 --set NCCLSHIM_TWOPHASE_GATHER=sendrecv "$@" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["time_s"] * 1e3)'
}
rig() { # W: the fabric's options
  [ "$1" = 2 ] && echo "--nodes 2 --nic-gbps 14.64 --launch-us 2300" || echo "--nodes 4 --nic-gbps 8.56 --launch-us 6900"
}
# W, what, measured ms (a range's middle), model options
rows=(
  "2|plain all-reduce|36.95|--algo none"
  "2|ring fp16 (auto)|20.8|--algo ring --compress fp16"
  "2|two-phase, 1 MiB pieces|145|--algo twophase --compress fp16 --piece-bytes 1M"
  "2|two-phase, 8 MiB pieces|19.1|--algo twophase --compress fp16 --piece-bytes 8M"
  "2|two-phase, one piece|14.0|--algo twophase --compress fp16 --piece-bytes 0"
  "4|plain all-reduce|100.7|--algo none"
  "4|default then (two-phase, 1 MiB)|220|--algo twophase --compress fp16 --piece-bytes 1M"
  "4|two-phase, 8 MiB pieces|70.6|--algo twophase --compress fp16 --piece-bytes 8M"
  "2|plain all-gather|18.4|--coll allgather --algo none"
  "4|plain all-gather|50.3|--coll allgather --algo none"
)
echo "# the cost model against the H200 rig of 2026-12-04 (MODELLED / measured, 64 MiB fp32 per rank)"
printf '%-3s %-34s %10s %10s %8s\n' W case measured_ms model_ms ratio
within=0
for r in "${rows[@]}"; do
  IFS='|' read -r w what meas opts <<<"$r"
  # shellcheck disable=SC2046,SC2086
  p=$(t $(rig "$w") $opts)
  ratio=$(python3 -c "print('%.3f' % ($p / $meas))")
  in=$(python3 -c "print(1 if abs($p / $meas - 1) <= 0.2 else 0)")
  within=$((within + in))
  printf '%-3s %-34s %10.1f %10.1f %8s%s\n' "$w" "$what" "$meas" "$p" "$ratio" "$([ "$in" = 1 ] || echo '  (off by more than 20 %)')"
done
echo "# within 20 %: $within of ${#rows[@]}"
[ $check = 0 ] || [ $within -ge 8 ]
[ $check = 1 ] && exit 0
# Today's plans on the same rig (PREDICTED, nothing measured yet): the
# shim's planner at its defaults (LAUNCH_BYTES 4M, pieces and the second
# phase by the cost rule), against the plain all-reduce.
echo "# today's plans on the rig (PREDICTED): time and ratio to the plain all-reduce"
for w in 2 4; do
  # shellcheck disable=SC2046
  plain=$(t $(rig $w) --algo none)
  for v in "no settings|--algo auto --compress fp16" "int8|--algo auto --compress int8" "bf16|--algo auto --compress bf16"; do
    # shellcheck disable=SC2046,SC2086
    p=$("$M" --fabric gpu --ranks-per-node 1 --intra-gbps 400 --launch-overlap 0.5 --bytes 64M --json $(rig $w) ${v#*|} |
        python3 -c 'import json, sys; d = json.load(sys.stdin); print(d["time_s"] * 1e3, d["plan"], d["launches"])')
    set -- $p
    printf 'W=%s %-12s %-9s %2s launches %8.1f ms %6.3f\n' "$w" "${v%%|*}" "$2" "$3" "$1" "$(python3 -c "print($1 / $plain)")"
  done
done
