#!/usr/bin/env bash
# 31-model.sh — the cost model (bench/ncclshim-model, issue 22): its anchors,
# that it walks the shim's own plans (the plan it names is the one
# shim/plan chooses for the same call, settings and nodes), its JSON
# contract, and --from-log on a calls log this script makes with the shim.
# Must not: assert a predicted time against a measured one (bench/ratios.sh
# model does that, on a quiet machine).
source "$(dirname "$0")/../lib.sh"
M="$ROOT/bench/ncclshim-model"
export B
check "model --selftest: ring bus bandwidth = link rate, flat two-phase's L*w*(N-1)/N*n/(n-1) NIC bytes, hier's w times the cut bound (exact)" \
  "$M" --selftest
js() { "$M" "$@" --json | python3 -c 'import json, sys; d = json.load(sys.stdin); print(d["plan"], d["time_s"] > 0, d["modelled"])'; }
F=(--nic-gbps 0.5 --intra-gbps 50 --bytes 16M)
check_eq() { # description want cmd...: the command's output is want
  local what=$1 want=$2; shift 2
  local got; got=$("$@" 2>&1)
  [ "$got" = "$want" ] && ok "$what: $got" || not_ok "$what: got '$got', want '$want'"
}
check_eq "model, 2x4, --algo hier --compress int8: one JSON object, the hier plan, a positive modelled time" "hier True True" \
  js --nodes 2 --ranks-per-node 4 "${F[@]}" --algo hier --compress int8
check_eq "model, 1x4, --algo hier: one node, so the shim's plan is flat two-phase" "twophase True True" \
  js --nodes 1 --ranks-per-node 4 "${F[@]}" --algo hier --compress int8
check_eq "model, 4 nodes of 1 rank, --algo auto: flat two-phase" "twophase True True" \
  js --nodes 4 --ranks-per-node 1 "${F[@]}" --algo auto --compress int8
check_eq "model, --algo none: plain NCCL" "plain True True" js --nodes 2 --ranks-per-node 2 "${F[@]}" --algo none --compress fp16
check_eq "model, int8 below two-phase's size (4 bytes per rank): plain, as the shim forwards it" "plain True True" \
  js --nodes 2 --ranks-per-node 2 --bytes 16 --algo auto --compress int8
check_eq "model, a reduce-scatter on 2x2 under hier: the hier plan" "hier True True" \
  js --nodes 2 --ranks-per-node 2 "${F[@]}" --coll reducescatter --algo hier --compress fp16
# --group N: a user group planned as the shim plans one (plan/group.c): 16
# fp16 all-reduces of 1 MiB on the ring fused into one bucket (one launch),
# into 8 of 2 MiB with NCCLSHIM_FUSE_BYTES=2M; int8 calls are not fused (4
# two-phase plans of 2 launches); members below MIN_BYTES in all: forwarded.
grp() { "$M" --nodes 1 --ranks-per-node 4 --group "$@" --json |
  python3 -c 'import json, sys; d = json.load(sys.stdin); print(d["plan"], d["plans"], d["launches"])'; }
check_eq "model --group 16, fp16 ring, 1 MiB each: one fused bucket, one launch" "fuse 1 1" \
  grp 16 --bytes 1M --compress fp16 --algo ring
check_eq "model --group 16, FUSE_BYTES=2M: 8 buckets, 8 launches" "fuse 8 8" \
  grp 16 --bytes 1M --compress fp16 --algo ring --set NCCLSHIM_FUSE_BYTES=2M
check_eq "model --group 4, int8 two-phase: never fused, 4 plans of 2 launches" "twophase 4 8" \
  grp 4 --bytes 1M --compress int8 --algo twophase
check_eq "model --group 3 of 16 KiB, fp16: the bucket below MIN_BYTES, its members forwarded" "plain 1 3" \
  grp 3 --bytes 16K --compress fp16 --algo ring
# --from-log: 2 ranks, 5 sizes x 3 iterations + 2 warm-up of allreduce_perf, one calls log per rank
mkdir -p "$TMPD/logs"
with NCCLSHIM_COMPRESS=fp16 NCCLSHIM_LOG=calls NCCLSHIM_LOG_FILE="$TMPD/logs/" NCCLSHIM_BANNER=0 \
  mpirun_shim 2 "$BIN/allreduce_perf" -b 64K -e 1M -f 2 -n 3 -w 2 -c 0 >"$TMPD/ap.out" 2>&1
log=$(ls "$TMPD"/logs/*.jsonl 2>/dev/null | head -1)
n=$(python3 -c 'import json, sys
print(sum(1 for l in open(sys.argv[1]) if l.startswith("{") and json.loads(l).get("kind") == "call"
          and json.loads(l).get("dtype") == "float" and json.loads(l).get("action") != "skipped"))' "$log" 2>/dev/null)
"$M" --from-log "$log" --nodes 2 --ranks-per-node 1 "${F[@]}" >"$TMPD/fromlog.out" 2>&1
rc=$?
[ $rc -eq 0 ] && [ -n "$n" ] && [ "$n" -gt 0 ] && grep -q "): $n fp32 calls in 5 sizes" "$TMPD/fromlog.out" \
  && grep -q '^none  *off .* 1\.000x$' "$TMPD/fromlog.out" && grep -q "MODELLED" "$TMPD/fromlog.out" \
  && ok "model --from-log: the $n fp32 calls of rank 0's calls log in 5 sizes, a row per plan, plain NCCL 1.000x, labelled MODELLED" \
  || { not_ok "model --from-log (exit $rc, $n calls in $log)"; sed 's/^/#   /' "$TMPD/fromlog.out" | head -8; }
check_fails "model --from-log on a file without calls fails with a message" "$M" --from-log "$TMPD/ap.out"

# Issue 33: the model, with the rig's alpha per launch as a fabric parameter,
# predicts at least 8 of the 10 all-reduce and all-gather figures of the
# first GPU run within 20 % (bench/model/gpu-rig.sh; bench/README.md).
check "model: 8 or more of the H200 rig's 10 figures within 20 % (launches charged)" \
  bash "$ROOT/bench/model/gpu-rig.sh" --check

# Issue 46: the README's "what to expect" table is the model's output, and
# auto (at the price the learner would agree) is never modelled slower than
# plain NCCL over the presets' fabrics, 8-1024 GPUs, 64 KiB-256 MiB.
want=$(bash "$ROOT/bench/model/presets.sh" --readme 2>&1)
have=$(sed -n '/^| preset (fabric) | 8 GPUs | 64 GPUs | 512 GPUs |$/,/^$/p' "$ROOT/README.md" | sed '/^$/d')
[ -n "$have" ] && [ "$want" = "$have" ] && ok "README.md's 'what to expect' table is bench/model/presets.sh --readme's output" ||
  { not_ok "README.md's table differs from bench/model/presets.sh --readme (regenerate it)"; diff <(echo "$want") <(echo "$have") | sed 's/^/#   /'; }
out=$(bash "$ROOT/bench/model/auto-check.sh" 2>&1)
rc=$?
[ $rc -eq 0 ] && grep -q "^auto-check: 84 cases (modelled): 0 slower than plain" <<<"$out" &&
  ok "auto-check: $(tail -n 1 <<<"$out" | cut -d: -f2-)" ||
  { not_ok "auto-check (exit $rc)"; tail -n 15 <<<"$out" | sed 's/^/#   /'; }
