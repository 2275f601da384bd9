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
# --dtype (issue 47): a bf16 or fp16 call is the call the shim plans (dtype,
# count = bytes / 2). Link-bound fabric (0.5 Gb/s per node, 2x2): the plain
# bf16 call of fp32's count moves exactly half its bytes in about half its
# time (the host NCCL's reductions stay under the link); two phases sum in
# fp32 on the wire asked for (fp16 or bf16: the input's own, which moves
# plain's bytes on one node); auto never takes the own wire (it cannot gain
# 10 %); a group's 16-bit calls are never fused.
jd() { "$M" --nodes 2 --ranks-per-node 2 --nic-gbps 0.5 --intra-gbps 50 "$@" --json; }
jf() { python3 -c 'import json, sys; d = json.load(sys.stdin); print(*(d[k] for k in sys.argv[1:]))' "$@"; }
check_eq "model --dtype bfloat16, plain: the JSON names it, plain sums in bf16 on its own wire" "bfloat16 plain bf16 bf16" \
  eval 'jd --dtype bfloat16 --bytes 8M --algo none | jf dtype plan wire sums'
check_eq "model --dtype fp16 (the wire's spelling): half" "half" eval 'jd --dtype fp16 --bytes 8M --algo none | jf dtype'
f32=$(jd --bytes 16M --algo none | jf nic_out_bytes time_s)
b16=$(jd --dtype bf16 --bytes 8M --algo none | jf nic_out_bytes time_s)
h16=$(jd --dtype half --bytes 8M --algo none | jf nic_out_bytes time_s)
python3 - "$f32" "$b16" "$h16" <<'PY' && ok "model --dtype: plain bf16 and fp16 of fp32's count: half its NIC bytes exactly, 0.45-0.55 of its time ($f32 / $b16 / $h16)" || not_ok "model --dtype: plain bf16/fp16 against fp32 of the same count: $f32 / $b16 / $h16"
import sys
(b, t), *rest = [map(float, a.split()) for a in sys.argv[1:]]
sys.exit(not all(x == b / 2 and 0.45 <= y / t <= 0.55 for x, y in rest))
PY
b32=$(jd --bytes 8M --algo none | jf nic_out_bytes)
check_eq "model --dtype bf16: the same buffer bytes as fp32 (twice the count), the same plain NIC bytes" "$b32" \
  eval 'jd --dtype bf16 --bytes 8M --algo none | jf nic_out_bytes'
check_eq "model --dtype bf16 --compress int8 --algo twophase: two phases, int8 wire, fp32 sums" "twophase int8 fp32" \
  eval 'jd --dtype bf16 --bytes 8M --compress int8 --algo twophase | jf plan wire sums'
check_eq "model --dtype bf16 --compress fp16 --algo twophase: the input's own wire (bf16), fp32 sums" "twophase bf16 fp32" \
  eval 'jd --dtype bf16 --bytes 8M --compress fp16 --algo twophase | jf plan wire sums'
one() { "$M" --nodes 1 --ranks-per-node 4 --nic-gbps 1 --intra-gbps 1 --bytes 64M --dtype bf16 "$@" --json | jf intra_out_bytes; }
check_eq "model --dtype bf16, 1x4: two phases on its own wire move plain's intra-node bytes" "$(one --algo none)" \
  one --compress bf16 --algo twophase
w32=$(one --dtype float --compress int8 --algo twophase)
check_eq "model --dtype bf16, 1x4, int8 two-phase: twice fp32's wire bytes at the same buffer bytes (twice the count)" \
  "$((2 * ${w32:-0}))" one --compress int8 --algo twophase
check_eq "model --dtype bf16 --compress fp16 --algo auto: plain (its own wire never gains 10 %), where fp32 compresses" \
  "plain no plan gains 10 % over NCCL at the launch cost (NCCLSHIM_LAUNCH_BYTES) / fp32: hier" \
  eval '{ jd --dtype bf16 --bytes 8M --compress fp16 --algo auto | jf plan why; echo /; jd --bytes 8M --compress fp16 --algo auto | jf plan; } | paste -sd" " | sed "s|/ |/ fp32: |"'
check_eq "model --group 16 of bf16, fp16 ring: 16-bit calls never fused, each its own plan (plain)" "plain 16 16" \
  grp 16 --bytes 1M --compress fp16 --algo ring --dtype bf16
check_eq "model --group 4 of bf16, int8 two-phase: 4 plans of 2 launches" "twophase 4 8" \
  grp 4 --bytes 1M --compress int8 --algo twophase --dtype bf16
check_fails "model --dtype double: refused" "$M" --dtype double
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
[ $rc -eq 0 ] && [ -n "$n" ] && [ "$n" -gt 0 ] && grep -q "): $n calls (float $n) in 5 sizes" "$TMPD/fromlog.out" \
  && grep -q '^none  *off .* 1\.000x$' "$TMPD/fromlog.out" && grep -q "MODELLED" "$TMPD/fromlog.out" \
  && ok "model --from-log: the $n fp32 calls of rank 0's calls log in 5 sizes, a row per plan, plain NCCL 1.000x, labelled MODELLED" \
  || { not_ok "model --from-log (exit $rc, $n calls in $log)"; sed 's/^/#   /' "$TMPD/fromlog.out" | head -8; }
check_fails "model --from-log on a file without calls fails with a message" "$M" --from-log "$TMPD/ap.out"
# ... and a bf16 job's (int8 in two phases): its calls modelled as bf16, the
# plan the shim ran beside the model's of the same dtype
mkdir -p "$TMPD/logs16"
with NCCLSHIM_COMPRESS=int8 NCCLSHIM_ALGO=twophase NCCLSHIM_LOG=calls NCCLSHIM_LOG_FILE="$TMPD/logs16/" NCCLSHIM_BANNER=0 \
  mpirun_shim 2 "$BIN/allreduce_perf" -d bfloat16 -b 64K -e 1M -f 2 -n 3 -w 2 -c 0 >"$TMPD/ap16.out" 2>&1
log=$(ls "$TMPD"/logs16/*.jsonl 2>/dev/null | head -1)
n=$(python3 -c 'import json, sys
print(sum(1 for l in open(sys.argv[1]) if l.startswith("{") and json.loads(l).get("kind") == "call"
          and json.loads(l).get("dtype") == "bfloat16" and json.loads(l).get("action") != "skipped"))' "$log" 2>/dev/null)
"$M" --from-log "$log" --nodes 2 --ranks-per-node 1 --nic-gbps 0.5 --intra-gbps 50 --compress int8 --algo twophase \
  >"$TMPD/fromlog16.out" 2>&1
rc=$?
[ $rc -eq 0 ] && [ -n "$n" ] && [ "$n" -gt 0 ] && grep -q "): $n calls (bfloat16 $n) in 5 sizes" "$TMPD/fromlog16.out" \
  && grep -Eq '^allreduce +1048576 bfloat16 +twophase +[0-9]+ +[0-9.]+ +[0-9.]+ ' "$TMPD/fromlog16.out" \
  && ok "model --from-log on a bf16 job's log: its $n bf16 calls in 5 sizes, measured two-phase beside the model's bf16 plan" \
  || { not_ok "model --from-log, bf16 (exit $rc, $n calls in $log)"; sed 's/^/#   /' "$TMPD/fromlog16.out" | head -20; }

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
