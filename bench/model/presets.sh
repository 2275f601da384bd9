#!/usr/bin/env bash
# bench/model/presets.sh — the MODELLED table of bench/README.md ("Cost model:
# the presets' fabrics at scale"): for each preset of env/ (its NCCLSHIM_*
# settings) on the fabric it is written for, the predicted communication time
# of one optimizer step at 8, 64 and 512 GPUs (8 per node), no shim against
# the preset's own plan and the other compressed plans. Markdown on stdout.
#
# Assumptions (printed under the table too): 1 GiB of fp32 gradients per
# step, fused into 16 all-reduces of 64 MiB (the presets' NCCLSHIM_FUSE_BYTES);
# no overlap with compute; nominal link rates (no protocol overhead): H200
# NVLink 450 GB/s per GPU per direction (3600 Gb/s); InfiniBand NDR 400 Gb/s
# and RoCE 200 Gb/s, one NIC per GPU; Ethernet 25 and 1 Gb/s, one NIC per
# node; NCCL's tuning model (2.30.7) for its ring/tree; codec kernels at
# 0.85 x 4.8 TB/s (assumed: make gpu-check has not run on a GPU yet).
#
# --readme: only README.md's table ("What to expect on your cluster"): each
# preset's own plan relative to no shim at 8, 64 and 512 GPUs; tests/t/31-model.sh
# fails when README.md's copy differs.
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
README=0
[ "${1:-}" = --readme ] && README=1
M="$ROOT/bench/ncclshim-model"
STEP_CALLS=16 BYTES=64M
# preset  nic-gbps  nic-per  (intra 3600 Gb/s everywhere)
FABRICS="nvlink:400:rank infiniband:400:rank roce:200:rank ethernet-25g:25:node ethernet-1g:1:node"

t() { # preset nic per nodes algo compress -> ms per step
  "$M" --fabric gpu --preset "$1" --nic-gbps "$2" --nic-per "$3" --intra-gbps 3600 --nodes "$4" --ranks-per-node 8 \
    --bytes $BYTES --algo "$5" --compress "$6" --json |
    python3 -c "import json,sys; d=json.load(sys.stdin); print('%.4g %s' % (d['time_s'] * 1e3 * $STEP_CALLS, d['plan']))"
}

setting() { env -i bash -c ". '$ROOT/env/$1.env' >/dev/null 2>&1; echo \${$2:-$3}"; } # preset name default
at() { if [ "$1" = nvlink ]; then [ "$2" -eq 1 ]; else [ "$2" -gt 1 ]; fi; } # nvlink: one node; the others: several

if [ $README = 1 ]; then
  declare -A DESC=([nvlink]="one node; compression off" [infiniband]="400 Gb/s per GPU" [roce]="200 Gb/s per GPU"
                   [ethernet-25g]="25 Gb/s per node" [ethernet-1g]="1 Gb/s per node")
  echo "| preset (fabric) | 8 GPUs | 64 GPUs | 512 GPUs |"
  echo "|---|---|---|---|"
  for fb in $FABRICS; do
    IFS=: read -r p g per <<<"$fb"
    c=$(setting "$p" NCCLSHIM_COMPRESS fp16) a=$(setting "$p" NCCLSHIM_ALGO auto)
    row="| \`$p\` (${DESC[$p]})"
    for N in 1 8 64; do
      at "$p" $N || { row="$row | –"; continue; }
      read -r base _ <<<"$(t "$p" "$g" "$per" $N none off)"
      if [ "$c" = off ]; then own=$base; else read -r own _ <<<"$(t "$p" "$g" "$per" $N "$a" "$c")"; fi
      row="$row | $(awk -v a="$own" -v b="$base" 'BEGIN {printf "%.2f", a / b}')"
    done
    echo "$row |"
  done
  exit 0
fi
echo "| preset (fabric) | GPUs | no shim ms | preset's settings ms (plan) | ring fp16 | hier fp16 | hier int8 |"
echo "|---|---|---|---|---|---|---|"
for fb in $FABRICS; do
  IFS=: read -r p g per <<<"$fb"
  c=$(setting "$p" NCCLSHIM_COMPRESS fp16) a=$(setting "$p" NCCLSHIM_ALGO auto)
  for N in 1 8 64; do
    at "$p" $N || continue # nvlink: one node, what the preset is for
    read -r base _ <<<"$(t "$p" "$g" "$per" $N none off)"
    if [ "$c" = off ]; then own="$base" oplan="plain (compress off)"; else read -r own oplan <<<"$(t "$p" "$g" "$per" $N "$a" "$c")"; fi
    read -r r16 _ <<<"$(t "$p" "$g" "$per" $N ring fp16)"
    read -r h16 h16p <<<"$(t "$p" "$g" "$per" $N hier fp16)"
    read -r h8 h8p <<<"$(t "$p" "$g" "$per" $N hier int8)"
    ratio() { awk -v a="$1" -v b="$base" 'BEGIN {printf "%.3g (%.2fx)", a, a / b}'; }
    fab="$g Gb/s per $per"
    [ "$p" = nvlink ] && fab="one node, NVLink"
    printf '| %s (%s) | %d | %.3g | %s %s | %s | %s%s | %s%s |\n' "$p" "$fab" $((N * 8)) "$base" \
      "$(ratio "$own")" "($oplan)" "$(ratio "$r16")" "$(ratio "$h16")" "$([ "$h16p" = hier ] || echo " ($h16p)")" \
      "$(ratio "$h8")" "$([ "$h8p" = hier ] || echo " ($h8p)")"
  done
done
