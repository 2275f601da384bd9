#!/usr/bin/env bash
# tests/t/55-diag.sh — the diagnosis (docs/diagnosis.md): the step detector,
# the per-step accounting and the verdict rules as pure functions (cmocka),
# then tests/shim/diagtest on 2 ranks over the host NCCL with a bottleneck
# built in: a sleep between passes (input), a slow emulated link
# (communication; fp32 and bf16 buckets, whose advice differs), CPU work and nothing else (compute), one rank with more
# work (its peer waits: communication there). Verdicts exact; shares against
# the built-in sleep as a share of the measured step within 0.15, the link's
# time as a lower bound (less 0.10), each step's exposed communication equal
# to the sum of its call lines' times (tests/diag/check_diag.py; never the
# times themselves). Also: with
# compression off and ACCUM_STEPS=1 the host NCCL sees exactly the calls of
# a run without the shim while the diagnosis runs (it issues nothing), and
# NCCLSHIM_DIAG=0 writes no step and no diagnosis. Device busy on a GPU from
# NVML: the CUDA backend on the CUDA driver double with the NVML test double
# (tests/nvml) scripted to 30 % busy, its fallback, and no NVML at all.
source "$(dirname "$0")/../lib.sh"

P="$TBIN/diagtest"
CHK="python3 $ROOT/tests/diag/check_diag.py"
shim_env_clean
export NCCLSHIM_BANNER=0 NCCLSHIM_COMPRESS=off
chk() { $CHK "$@" || not_ok "check_diag.py $* crashed"; }

# 0. Pure functions (cmocka, TAP lines).
out=$(CMOCKA_MESSAGE_OUTPUT=TAP "$TBIN/test_diag" 2>&1); rc=$?
echo "$out" | sed -n 's/^\(not ok\|ok\) [0-9]* - /\1 - test_diag: /p'
[ $rc -eq 0 ] && ok "test_diag exits 0" || { not_ok "test_diag exits 0 (exit $rc)"; echo "$out" | sed 's/^/#   /' | tail -n 20; }

run() { # NAME ARGS...: 2 ranks, calls log and a trace per rank, what was built in as NAME.json
  local name=$1; shift
  NCCLSHIM_LOG=calls NCCLSHIM_LOG_FILE="$TMPD/$name.%r.jsonl" NCCLSHIM_TRACE_FILE="$TMPD/$name.%r.trace.json" \
    mpirun_shim 2 "$P" -o "$TMPD/$name.json" "$@" >"$TMPD/$name.out" 2>&1
  check "diagtest $name passes (2 ranks, $*)" test $? -eq 0
}

# 1. Input-bound: 2 ms of CPU work per pass, 60 ms asleep between passes (30 ms read as
#    communication-bound at a load of 9 on 2 cores: the host collectives slow down with it).
run input -p 10 -c 500 -s 60000
for r in 0 1; do chk --label input --rank $r --verdict input-bound --input-from-sleep "$TMPD/input.json" "$TMPD/input.$r.jsonl"; done
check_grep "the summary table ends with the verdict and what to try" \
  "# diagnosis: input-bound: .*# try: DataLoader\(num_workers|# try: DataLoader\(num_workers" "$TMPD/input.out"

# 2. Communication-bound: a 0.2 Gb/s link (42 ms of link time per pass of 4 x 256 KiB), 2 ms of work.
HOSTNCCL_LINK_GBPS=0.2 run comm -p 10 -c 500
for r in 0 1; do chk --label comm --rank $r --verdict communication-bound --exposed-from-link 0.2 --bound 0.10 "$TMPD/comm.json" "$TMPD/comm.$r.jsonl"; done
check_grep "communication-bound: the suggestions name compression, accumulation and the presets" \
  "# try: NCCLSHIM_COMPRESS=bf16 or fp16.*NCCLSHIM_ACCUM_STEPS=K.*env/ethernet-1g.env" "$TMPD/comm.out"

# 2b. The same with bf16 buckets (-H; 0.1 Gb/s: the same link time for half the bytes): the advice
#    is for 16-bit gradients (int8 halves their bytes; a 16-bit wire would not cut any).
HOSTNCCL_LINK_GBPS=0.1 run comm16 -p 10 -c 500 -H
check_grep "communication-bound bf16 buckets: the suggestion is int8 for 16-bit gradients" \
  "# try: NCCLSHIM_COMPRESS=int8 \(half of the 16-bit gradients' bytes" "$TMPD/comm16.out"
for r in 0 1; do chk --label comm16 --rank $r --verdict communication-bound --max-input 0.15 "$TMPD/comm16.json" "$TMPD/comm16.$r.jsonl"; done

# 3. Compute-bound: 24 ms of CPU work per pass, an unlimited link, no sleep.
run compute -p 10 -c 6000
for r in 0 1; do chk --label compute --rank $r --verdict compute-bound --max-input 0.15 "$TMPD/compute.json" "$TMPD/compute.$r.jsonl"; done

# 4. One slow rank: rank 1 works 24 ms more per pass; rank 0 waits for it in the collectives.
run slow -p 10 -c 500 -r 1 -x 6000
chk --label "slow rank 1" --rank 0 --verdict communication-bound --max-input 0.15 "$TMPD/slow.json" "$TMPD/slow.0.jsonl"
chk --label "slow rank 1" --rank 1 --verdict compute-bound --max-input 0.15 "$TMPD/slow.json" "$TMPD/slow.1.jsonl"

# 4b. A slow rank whose extra work comes before DDP's buffer broadcast (BatchNorm): rank 1 works
#    24 ms more at the start of each pass; rank 0 waits for it inside the ncclBcast, which the shim
#    times as an observed call: communication there, not input (issue 24: it was "input-bound").
run bcast -p 10 -c 500 -B -r 1 -X 24000
chk --label "slow rank 1 before the broadcast" --rank 0 --verdict communication-bound --max-input 0.15 \
  "$TMPD/bcast.json" "$TMPD/bcast.0.jsonl"
chk --label "slow rank 1 before the broadcast" --rank 1 --verdict compute-bound --max-input 0.15 \
  "$TMPD/bcast.json" "$TMPD/bcast.1.jsonl"

# 5. The trace: valid JSON, the step slices on their own track, one after the other, nested in nothing.
python3 - "$TMPD"/input.0.trace.json <<'PY' && ok "trace: step slices on a steps track, consecutive, the breakdown in args" || not_ok "trace of the input run"
import json, sys
ev = json.load(open(sys.argv[1]))
tid = [e["tid"] for e in ev if e.get("ph") == "M" and e["name"] == "thread_name" and e["args"]["name"].endswith(" steps")]
assert len(tid) == 1, tid
st = sorted((e for e in ev if e.get("ph") == "X" and e["tid"] == tid[0]), key=lambda e: e["ts"])
assert [e["name"] for e in st] == ["step (pass %d)" % p for p in range(3, 9)], [e["name"] for e in st]
for a, b in zip(st, st[1:]):
    assert abs(a["ts"] + a["dur"] - b["ts"]) < 0.5, (a, b)  # epoch us as doubles: 0.25 us
other = [e for e in ev if e.get("ph") == "X" and e["tid"] != tid[0]]
assert other and all(st[0]["ts"] - 1e6 < e["ts"] for e in other)
for e in st:
    x = e["args"]
    assert abs(x["exposed_comm_share"] + x["input_share"] + x["compute_share"] - 1) < 0.002, x
    assert x["wall_us"] == e["dur"] and x["busy_source"] == "cpu-time", x
PY

# 6. Observe-only: compression off, ACCUM_STEPS=1: with the diagnosis on (calls log) the host NCCL sees
#    the very calls it sees with NCCLSHIM_DIAG=0 (kind, datatype, count, root, order per rank; pointers
#    aside): the diagnosis issues nothing. (Against no preload the shim's own configuration check at a
#    communicator's first call is the one difference; 40-shim checks that the results are bit-identical.)
seq_of() { for r in 0 1; do grep -E "comm 0x[0-9a-f]+ rank $r/2 " "$1" | sed -E 's/^hostnccl\[[0-9]+\] //; s/0x[0-9a-f]+|\(nil\)/P/g'; done; }
for dg in 0 1; do
  HOSTNCCL_LOG=1 NCCLSHIM_DIAG=$dg NCCLSHIM_LOG=calls NCCLSHIM_LOG_FILE="$TMPD/ident$dg.%r.jsonl" \
    mpirun_shim 2 "$P" -p 8 -c 100 -u -m -B >"$TMPD/ident$dg.log" 2>&1
  check "diagtest with NCCLSHIM_DIAG=$dg, host NCCL log on" test $? -eq 0
  seq_of "$TMPD/ident$dg.log" >"$TMPD/ident$dg.calls"
done
n=$(wc -l <"$TMPD/ident0.calls")
[ "$n" -ge 80 ] && cmp -s "$TMPD/ident0.calls" "$TMPD/ident1.calls" \
  && ok "observe-only: the host NCCL saw the same $n calls with the diagnosis on and off" \
  || not_ok "observe-only: calls differ ($n vs $(wc -l <"$TMPD/ident1.calls")): $(diff "$TMPD/ident0.calls" "$TMPD/ident1.calls" | head -n 3 | tr '\n' ' ')"
grep -q '"kind":"step"' "$TMPD/ident1.0.jsonl" && ! grep -q '"kind":"step"\|"diagnosis"' "$TMPD/ident0.0.jsonl" \
  && ! grep -q "# diagnosis" "$TMPD/ident0.log" \
  && ok "NCCLSHIM_DIAG=1 wrote step lines; NCCLSHIM_DIAG=0 no step line and no diagnosis (summary line, table)" \
  || not_ok "step lines with the diagnosis on, none with it off"

# 7. Device busy from NVML (CUDA backend on the CUDA driver double, device buffers; tests/nvml's
#    NVML double saying 30 % busy, samples every 20 ms): busy_source "nvml", input 0.70 and
#    compute + exposed 0.30 per step and in the summary (check_nvml.py), each rank's handle taken
#    by its own device's PCI bus id; the same through nvmlDeviceGetUtilizationRates where samples
#    are not supported. Without NVML (no library; a refused device) the output says why.
NV="python3 $ROOT/tests/diag/check_nvml.py"
gpu_run() { # NAME LIBDIRS ENV...: diagtest on 2 ranks with device buffers, calls log per rank
  local name=$1 dirs=$2; shift 2
  with SHIMTEST_DEVICE=1 LD_LIBRARY_PATH="$dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" NCCLSHIM_LOG=calls \
    NCCLSHIM_LOG_FILE="$TMPD/$name.%r.jsonl" "$@" mpirun_shim 2 "$P" -p 10 -c 500 -s 30000 >"$TMPD/$name.out" 2>&1
  check "diagtest $name passes (2 ranks, device buffers)" test $? -eq 0
}
CD="$BUILD/lib/cudadrv" FN="$BUILD/lib/fakenvml"
gpu_run nvml "$CD:$FN" FAKENVML_UTIL=30 FAKENVML_PERIOD_US=20000 FAKENVML_LOG="$TMPD/nvml.handles"
for r in 0 1; do $NV --label nvml --rank $r --util 30 "$TMPD/nvml.$r.jsonl" || not_ok "check_nvml.py crashed"; done
check "each rank's NVML handle by its device's PCI bus id (cuDeviceGetPCIBusId)" \
  test "$(sort "$TMPD/nvml.handles" | tr '\n' ' ')" = "handle 0000:01:00.0 handle 0000:02:00.0 "
check_grep "the summary says where busy came from" "# diagnosis: input-bound: .*busy from NVML GPU utilisation samples" \
  "$TMPD/nvml.out"
gpu_run rates "$CD:$FN" FAKENVML_UTIL=30 FAKENVML_FAIL=samples
for r in 0 1; do $NV --label "utilisation rates" --rank $r --util 30 "$TMPD/rates.$r.jsonl" || not_ok "check_nvml.py crashed"; done
gpu_run nonvml "$CD"
for r in 0 1; do $NV --label "no NVML" --rank $r --none libnvidia-ml.so.1 "$TMPD/nonvml.$r.jsonl" || not_ok "check_nvml.py crashed"; done
check_grep "... and the summary line says so" "device busy time unknown \(NVML not available: libnvidia-ml.so.1" "$TMPD/nonvml.out"
gpu_run noperm "$CD:$FN" FAKENVML_UTIL=30 FAKENVML_FAIL=perm
$NV --label "NVML refuses the device" --rank 0 --none "nvmlDeviceGetHandleByPciBusId_v2(0000:01:00.0) failed (Insufficient Permissions)" \
  "$TMPD/noperm.0.jsonl" || not_ok "check_nvml.py crashed"

# 8. Reduce-scatters (FSDP2, ZeRO): diagtest -R reduce-scatters its buckets; the passes are learned
#    from them alone (bf16: two-phase records, timed on the host), input-bound as in 1.
NCCLSHIM_COMPRESS=bf16 run rs -R -p 10 -c 500 -s 60000
for r in 0 1; do chk --label "reduce-scatter" --rank $r --verdict input-bound --input-from-sleep "$TMPD/rs.json" "$TMPD/rs.$r.jsonl"; done
