# 22-learn.sh — NCCLSHIM_LAUNCH_BYTES=auto against the host NCCL, whose
# launch cost (HOSTNCCL_LAUNCH_US) and link rate (HOSTNCCL_LINK_GBPS) are
# known: each communicator times real launches of its first calls (plain
# calls, the ring's wire all-reduces, two-phase's all-gathers; nothing is
# forwarded only to be timed), every rank agrees the same fit, and from then
# on plans at it (shim/coll/learn.c).
#   - 1x4 and 2x2 (emulated nodes), 2 ms per launch, 1 Gb/s, an int8 sweep
#     of 64 KiB to 16 MiB (allreduce_perf, every result checked): 16 to 64
#     sampled launches; every rank's JSON log holds
#     the same learned values; the launch cost within [0.8, 2.5] x the host
#     NCCL's charge (its launch plus its per-step latency: the host's own
#     copies and reductions per call add to it on 2 shared cores, the
#     fit cannot tell them from the launch) and the rate within [0.7, 1.6] x
#     the link's (the same copies scale with the bytes); every call has the
#     plan the cost model makes at its price (ncclshim-model --set
#     NCCLSHIM_LAUNCH_BYTES=P), call for call: the unknown 4 MB before the
#     call that first read the agreement (the summary's fabric.call: the 4th
#     eligible call after the last sample, learn.c's LAG_ISSUE + LAG_APPLY),
#     the learned price from it on (no call forwarded to be measured);
#   - a slow rank (MPMD: rank 3's launches cost 3 times more): the four
#     ranks still agree one price, bit for bit, and every result is exact;
#   - calls of one size only: not learned, and every rank says why;
#   - a pinned NCCLSHIM_LAUNCH_BYTES: nothing measured, nothing said;
#   - ncclshim-report says what every rank learned.
# The tests' default NCCLSHIM_LAUNCH_BYTES=0 (tests/lib.sh) is unset here.
. "$(dirname "$0")/../lib.sh"
unset NCCLSHIM_LAUNCH_BYTES
P="$BIN/allreduce_perf"
M="$BIN/ncclshim_model"
export NCCLSHIM_COMPRESS=int8 NCCLSHIM_BANNER=0 NCCLSHIM_LOG=calls
LINK=(-x HOSTNCCL_LAUNCH_US=2000 -x HOSTNCCL_LINK_GBPS=1 -x HOSTNCCL_LINK_LATENCY_US=50)
SWEEP=(-b 64K -e 16M -f 4 -n 3 -w 1 -c 1)

# learned DIR NODES L: the JSON logs of one run; checks the agreement, the
# values against the host NCCL's charge, and the plans against the model.
learned() {
  local dir=$1 nodes=$2 L=$3 what="$2x$3"
  python3 - "$dir" "$nodes" "$L" "$M" <<'EOF'
import glob, json, subprocess, sys
d, nodes, L, model = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
n = nodes * L
fab, calls = [], []
for f in sorted(glob.glob(d + "/*.jsonl")):
    for line in open(f):
        r = json.loads(line)
        if r["kind"] == "summary":
            fab.append(r["fabric"])
        elif r["kind"] == "call" and r["rank"] == 0:
            calls.append(r)
bad = []
if len(fab) != n or any(x != fab[0] for x in fab):
    bad.append("the ranks' learned values differ or are missing: %s" % fab)
f = fab[0] if fab else None
if not f or not f.get("learned"):
    bad.append("not learned: %s" % f)
else:
    charge = 2000e3 + 50e3 * 2 * (n - 1)  # the launch, then 2(n-1) ring steps of 50 us
    if not 0.8 * charge <= f["launch_ns"] <= 2.5 * charge:
        bad.append("launch %d ns, the host NCCL charges %d" % (f["launch_ns"], charge))
    if not 0.7 * 8000 <= f["ps_per_byte"] <= 1.6 * 8000:  # the host's copies and sums on shared cores slow it
        bad.append("rate %d ps/B, the link 8000" % f["ps_per_byte"])
    if not 16 <= f["samples"] <= 64:  # after 2 warm-up ones, while the sizes are not 8 times apart
        bad.append("%d launches sampled, 16 to 64 wanted" % f["samples"])
    if any(c.get("why") == "measuring" for c in calls):
        bad.append("a call was forwarded to be measured")
    cache = {}
    before = [c for c in calls if c["call"] < f["call"]]
    for c in calls:  # the unknown price until the agreement was read, the learned one from there
        b, price = c["logical_bytes"], 4194304 if c["call"] < f["call"] else f["launch_bytes"]
        if (b, price) not in cache:
            out = subprocess.run([model, "--fabric", "host", "--nodes", str(nodes), "--ranks-per-node", str(L),
                                  "--bytes", str(b), "--compress", "int8", "--algo", "auto", "--set",
                                  "NCCLSHIM_LAUNCH_BYTES=%d" % price, "--json"],
                                 capture_output=True, text=True, check=True).stdout
            cache[b, price] = json.loads(out)["plan"]
        if c["algo"] != cache[b, price]:
            bad.append("call %d (%d bytes, priced at %d): the shim ran %s, the model plans %s" %
                       (c["call"], b, price, c["algo"], cache[b, price]))
            break
    print("learned %.0f us per launch, %d ps/B, price %d link bytes from %d launches; %d calls at 4 MB (plans %s), "
          "%d after (plans %s)" %
          (f["launch_ns"] / 1e3, f["ps_per_byte"], f["launch_bytes"], f["samples"], len(before),
           sorted(set(v for k, v in cache.items() if k[1] == 4194304)), len(calls) - len(before),
           sorted(set(v for k, v in cache.items() if k[1] != 4194304))))
print("\n".join("BAD " + b for b in bad))
EOF
}

run_learn() { # LAYOUT (1x4 or 2x2)
  local layout=$1 dir="$TMPD/l$1" out="$TMPD/l$1.out"
  mkdir -p "$dir"
  if [ "$layout" = 1x4 ]; then
    NCCLSHIM_LOG_FILE="$dir/" mpirun_shim 4 "${LINK[@]}" "$P" "${SWEEP[@]}" >"$out" 2>&1
  else
    NCCLSHIM_LOG_FILE="$dir/" mpirun_shim 2 "${LINK[@]}" -x NCCL_HOSTID=na "$P" "${SWEEP[@]}" : \
      -np 2 -x LD_LIBRARY_PATH="$HOSTNCCL_DIR" -x LD_PRELOAD="$SHIM${SAN_PRELOAD:+:$SAN_PRELOAD}" "${LINK[@]}" \
      -x NCCL_HOSTID=nb "$P" "${SWEEP[@]}" >"$out" 2>&1
  fi
  local rc=$? res
  res=$(learned "$dir" "${layout%x*}" "${layout#*x}")
  if [ $rc -eq 0 ] && grep -q '^learned' <<<"$res" && ! grep -q '^BAD' <<<"$res" &&
     grep -q "Out of bounds values : 0 OK" "$out" &&
     python3 "$ROOT/bench/ncclshim-report" "$dir" 2>&1 | grep -q "launch cost (every rank): learned from"; then
    ok "$layout, 2 ms per launch, 1 Gb/s, 50 us per step: $(head -n 1 <<<"$res")"
  else
    not_ok "$layout learner (exit $rc): $(tr '\n' ' ' <<<"$res")"; tail -n 5 "$out" | sed 's/^/#   /'
  fi
}
run_learn 1x4
run_learn 2x2

# A slow rank: every rank plans from the same agreed numbers.
mkdir -p "$TMPD/slow"
NCCLSHIM_LOG_FILE="$TMPD/slow/" mpirun_shim 3 "${LINK[@]}" "$P" "${SWEEP[@]}" : \
  -np 1 -x LD_LIBRARY_PATH="$HOSTNCCL_DIR" -x LD_PRELOAD="$SHIM${SAN_PRELOAD:+:$SAN_PRELOAD}" \
  -x HOSTNCCL_LAUNCH_US=6000 -x HOSTNCCL_LINK_GBPS=1 -x HOSTNCCL_LINK_LATENCY_US=50 "$P" "${SWEEP[@]}" \
  >"$TMPD/slow.out" 2>&1
rc=$?
vals=$(cat "$TMPD"/slow/*.jsonl | grep '"kind":"summary"' | grep -o '"fabric":{[^}]*}' | sort | uniq -c)
# Learned or not (4 ranks on 2 shared cores can time a 64 KiB call longer
# than a 256 KiB one: then no fit, on every rank alike), the four agree.
[ $rc -eq 0 ] && [ "$(wc -l <<<"$vals")" -eq 1 ] && grep -q '^ *4 "fabric"' <<<"$vals" &&
  grep -q "Out of bounds values : 0 OK" "$TMPD/slow.out" &&
  ok "a slow rank (its launches 6 ms, the others' 2 ms): the 4 ranks agree, bit for bit ($(grep -o '"text":"[^"]*' <<<"$vals" | cut -c9-)), every result exact" ||
  { not_ok "slow rank (exit $rc): $vals"; tail -n 5 "$TMPD/slow.out" | sed 's/^/#   /'; }

# One size only: nothing to fit. After NSC_FAB_MAX_CALLS (64) sampled launches
# every rank keeps the unknown price and says why.
mkdir -p "$TMPD/one"
NCCLSHIM_LOG_FILE="$TMPD/one/" mpirun_shim 2 "$P" -b 1M -e 1M -n 40 -w 0 -c 1 >"$TMPD/one.out" 2>&1
rc=$?
n=$(cat "$TMPD"/one/*.jsonl | grep '"kind":"summary"' |
      grep -cE '"fabric":\{"learned":false,"samples":64,"call":[0-9]+,"text":"not learned \(the sampled launches were not of sizes at least 8 times apart\): launches priced at 4194304 link bytes"\}')
[ $rc -eq 0 ] && [ "$n" -eq 2 ] && ok "calls of one size: not learned, both ranks say why (priced at 4 MiB)" ||
  { not_ok "one size (exit $rc): $n ranks said why"; grep "launch cost" "$TMPD/one.out" | sed 's/^/#   /'; }

# Pinned: nothing measured (its log in TMPD, not the working directory).
mkdir -p "$TMPD/pin"
NCCLSHIM_LAUNCH_BYTES=1M NCCLSHIM_LOG_FILE="$TMPD/pin/" mpirun_shim 2 "$P" -b 64K -e 16M -f 4 -n 3 -w 1 -c 1 >"$TMPD/pin.out" 2>&1
rc=$?
[ $rc -eq 0 ] && ! grep -q "# launch cost:\|measuring" "$TMPD/pin.out" && grep -q "left untouched" "$TMPD/pin.out" &&
  ok "NCCLSHIM_LAUNCH_BYTES=1M: nothing measured, no 'launch cost' line" ||
  { not_ok "pinned (exit $rc)"; grep "# launch cost:\|measuring" "$TMPD/pin.out" | head -3 | sed 's/^/#   /'; }
