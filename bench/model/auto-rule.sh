#!/usr/bin/env bash
# bench/model/auto-rule.sh — the MODELLED evidence behind the thresholds of
# NCCLSHIM_ALGO=auto (shim/plan/plan.c, nsc_algo_choose and nsc_plan_hier_wanted; shim/exec/hier.c,
# nsc_hier_wanted), derived offline as issue 22 asks: the rule itself stays
# a rule over count, rank count, node map and settings inside the shim.
#   1. one node (NVLink, 3600 Gb/s per GPU): flat two-phase fp16 / the ring
#      in fp16, against ranks 2..8 and the call's size (auto: two-phase from
#      4 ranks and 64 KiB per rank);
#   2. nodes of 1 rank (Ethernet 25 Gb/s): flat two-phase / ring fp16 (auto:
#      two-phase, as on one node);
#   3. N >= 2 nodes of L >= 2 ranks (Ethernet 25 Gb/s per node, RoCE 200 Gb/s
#      per GPU): hier / flat two-phase / ring, fp16 (auto: hier).
# Each cell is a ratio of predicted times (--fabric gpu), never measured.
# Piece size: NCCLSHIM_TWOPHASE_PIECE_BYTES of the row (the default 1M, and
# 8M as the network presets set it).
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
M="$ROOT/bench/ncclshim-model"
t() { "$M" --fabric gpu --json "$@" | python3 -c 'import json, sys; print(json.load(sys.stdin)["time_s"])'; }
ratio() { python3 -c 'import sys; print("%.2f" % (float(sys.argv[1]) / float(sys.argv[2])))' "$1" "$2"; }
SIZES="64K 1M 4M 16M 64M"
echo "1. one node, NVLink: flat two-phase fp16 / ring fp16 (MODELLED; < 1: two-phase is faster)"
for pb in 1M 8M; do
  printf '%-22s' "ranks \\ size (pieces $pb)"; for b in $SIZES; do printf '%8s' "$b"; done; echo
  for L in 2 3 4 8; do
    printf '%-22s' "1x$L"
    for b in $SIZES; do
      f=(--nodes 1 --ranks-per-node "$L" --nic-gbps 3600 --intra-gbps 3600 --bytes "$b" --compress fp16 --set NCCLSHIM_TWOPHASE_PIECE_BYTES=$pb)
      printf '%8s' "$(ratio "$(t "${f[@]}" --algo twophase)" "$(t "${f[@]}" --algo ring)")"
    done
    echo
  done
done
echo
echo "2. nodes of one rank, Ethernet 25 Gb/s: flat two-phase fp16 / ring fp16 (pieces 8M)"
printf '%-22s' "nodes \\ size"; for b in $SIZES; do printf '%8s' "$b"; done; echo
for N in 2 4 8 32; do
  printf '%-22s' "${N}x1"
  for b in $SIZES; do
    f=(--nodes "$N" --ranks-per-node 1 --nic-gbps 25 --nic-per node --intra-gbps 3600 --bytes "$b" --compress fp16 --set NCCLSHIM_TWOPHASE_PIECE_BYTES=8M)
    printf '%8s' "$(ratio "$(t "${f[@]}" --algo twophase)" "$(t "${f[@]}" --algo ring)")"
  done
  echo
done
echo
echo "3. nodes of 8 ranks: hier fp16 / min(flat two-phase, ring) fp16 (pieces 8M)"
printf '%-28s' "fabric, nodes \\ size"; for b in $SIZES; do printf '%8s' "$b"; done; echo
for fab in "ethernet-25g:25:node" "roce:200:rank"; do
  IFS=: read -r name g per <<<"$fab"
  for N in 2 8 64; do
    printf '%-28s' "$name, ${N}x8"
    for b in $SIZES; do
      f=(--nodes "$N" --ranks-per-node 8 --nic-gbps "$g" --nic-per "$per" --intra-gbps 3600 --bytes "$b" --compress fp16 --set NCCLSHIM_TWOPHASE_PIECE_BYTES=8M)
      h=$(t "${f[@]}" --algo hier) fl=$(t "${f[@]}" --algo twophase) r=$(t "${f[@]}" --algo ring)
      printf '%8s' "$(python3 -c 'import sys; h, f, r = map(float, sys.argv[1:]); print("%.2f" % (h / min(f, r)))' "$h" "$fl" "$r")"
    done
    echo
  done
done
