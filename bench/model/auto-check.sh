#!/usr/bin/env bash
# bench/model/auto-check.sh — does `auto` choose what the cost model prices
# best? For every preset of env/ on the fabric it is written for (as
# bench/model/presets.sh), 1 to 128 nodes of 8 GPUs (one node for nvlink),
# fp32 all-reduces of 64 KiB to 256 MiB, the plan NCCLSHIM_ALGO=auto makes
# with the preset's other settings (ethernet-1g's own ALGO=hier is what its
# user asked for, not auto's choice) and NCCLSHIM_LAUNCH_BYTES=auto (the
# model simulates the learner: the price it would agree from its own plain
# calls) is compared with plain
# NCCL and with every other plan of the preset's format (ring, two phases,
# hier). A violation: auto's plan modelled slower than plain, or more than
# 10 % slower than the best candidate. MODELLED, not measured.
#
# Prints one line per violation and the counts; exit 1 when auto is
# modelled slower than plain anywhere (--strict: on any violation). The rule
# cannot see a node's NICs or its links' rates, so it prices a shared NIC
# and intra-node bytes at fixed ratios (shim/plan/cost.h): where the
# fabric's differ, auto may miss a cheaper plan (docs/collectives.md).
# --table: also every row (preset, GPUs, size, auto's plan and ratios).
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
M="$ROOT/bench/ncclshim-model"
table=0 strict=0
for a in "$@"; do
  case $a in --table) table=1 ;; --strict) strict=1 ;; *) echo "usage: $0 [--table] [--strict]" >&2; exit 2 ;; esac
done
FABRICS="nvlink:400:rank infiniband:400:rank roce:200:rank ethernet-25g:25:node ethernet-1g:1:node"
SIZES="64K 1M 16M 256M"
rows=$(mktemp)
trap 'rm -f "$rows"' EXIT
for fb in $FABRICS; do
  IFS=: read -r p g per <<<"$fb"
  sets=$(env -i bash -c ". '$ROOT/env/$p.env' >/dev/null 2>&1; env" | grep '^NCCLSHIM_' | grep -v '^NCCLSHIM_COMPRESS=' |
           sed 's/^/--set /' | tr '\n' ' ')
  c=$(env -i bash -c ". '$ROOT/env/$p.env' >/dev/null 2>&1; echo \${NCCLSHIM_COMPRESS:-fp16}")
  a=auto
  [ "$c" = off ] && c=fp16 # nvlink: what auto does once a user turns compression on
  for N in 1 2 8 16 64 128; do
    [ "$p" = nvlink ] && [ $N -gt 1 ] && continue
    [ "$p" != nvlink ] && [ $N -eq 1 ] && continue
    for S in $SIZES; do
      # shellcheck disable=SC2086
      "$M" --fabric gpu --nic-gbps "$g" --nic-per "$per" --intra-gbps 3600 --nodes $N --ranks-per-node 8 \
        --bytes "$S" --compress "$c" $sets --json |
        python3 -c '
import json, sys
p, N, S, a = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
d = json.load(sys.stdin)["plans"]
t = {r["algo"] + ("/1" if r["piece_bytes"] == 0 else ""): r for r in d}
auto, none = t[a], t["none"]
cands = [r for k, r in t.items() if k != "auto"]
best = min(cands, key=lambda r: r["time_s"])
bad = []
if auto["time_s"] > none["time_s"] * 1.0000001: bad.append("slower than plain")
if auto["time_s"] > best["time_s"] * 1.10: bad.append("over 1.1x the best (%s)" % best["plan"])
print("%s\t%d\t%s\t%s\t%.3f\t%.3f\t%s\t%d\t%s" % (p, N * 8, S, auto["plan"], auto["time_s"] / none["time_s"],
      auto["time_s"] / best["time_s"], best["plan"], auto["launch_bytes"], "; ".join(bad)))
' "$p" $N "$S" "$a" >>"$rows"
    done
  done
done
if [ $table = 1 ]; then
  echo "| preset | GPUs | size | auto's plan | / plain | / best | best | launch price (B) |"
  echo "|---|---|---|---|---|---|---|---|"
  awk -F'\t' '{printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7, $8}' "$rows"
fi
nbad=$(awk -F'\t' '$9 != ""' "$rows" | wc -l)
nslow=$(awk -F'\t' '$9 ~ /slower than plain/' "$rows" | wc -l)
awk -F'\t' '$9 != "" {printf "violation: %s, %s GPUs, %s: auto %s (%sx plain, %sx best %s): %s\n", $1, $2, $3, $4, $5, $6, $7, $9}' "$rows"
echo "auto-check: $(wc -l <"$rows") cases (modelled): $nslow slower than plain, $((nbad - nslow)) more than 10 % above the best plan only"
[ "$nslow" -eq 0 ] && { [ $strict = 0 ] || [ "$nbad" -eq 0 ]; }
