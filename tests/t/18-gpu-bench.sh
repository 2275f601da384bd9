#!/usr/bin/env bash
# 18-gpu-bench.sh — the one GPU command (tests/gpu/run.sh: build,
# gpu-check, gpu-bench, one summary file) and `make gpu-bench`'s own script
# (tests/gpu/bench.sh), which only a GPU machine runs for real, run here end
# to end on the stand-ins (GPU_RUN_DOUBLE=1: tests/gpu/bench.py on the CPU
# under ncclshim-run --emulate, over the host NCCL; gpu-check's cheap
# sections, 17-gpu-check runs them all; a stand-in nvidia-cuda-mps-control,
# tests/gpu/fake-mps): its runs, the table and the goal lines, the replicas'
# check, the summary read back, the MPS rows kept only where a server
# answered; never its timings (CPU numbers say nothing about a GPU). Four of
# its variants here (plain, no settings, a preset, accumulation and its plain
# twin) and one under MPS, to keep CI short; the table's logic on every kind
# of row on made-up results (tests/gpu/bench_table.py).
source "$(dirname "$0")/../lib.sh"
[ -x "$TORCH_VENV/bin/python3" ] || { not_ok "no PyTorch in $TORCH_VENV (make deps)"; exit 0; }
# MPS: a server answers after the first run (plain: its row is kept) and
# none after the second (int8: its clients ran without MPS, the row dropped).
PATH="$ROOT/tests/gpu/fake-mps:$PATH" FAKEMPS=once PYTHON="$TORCH_VENV/bin/python3" GPU_RUN_DOUBLE=1 \
  GPU_CHECK_SECTIONS="0 4" GPU_BENCH_MPS=1 GPU_BENCH_MPS_VARIANTS="plain int8" \
  GPU_BENCH_VARIANTS="plain default ethernet-1g accum4" B="$B" \
  timeout 500 bash "$ROOT/tests/gpu/run.sh" >"$TMPD/run.out" 2>&1
rc=$?
cp "$ROOT/$B/gpu-run/gpu-bench.log" "$TMPD/bench.out" 2>/dev/null
S="$ROOT/$B/gpu-summary.txt"
[ $rc -eq 0 ] && ok "the one GPU command (tests/gpu/run.sh) on the stand-ins: exit 0" \
  || { not_ok "tests/gpu/run.sh on the stand-ins: exit $rc"; tail -n 20 "$TMPD/run.out" | sed 's/^/#   /'; }
for st in build gpu-check gpu-bench; do
  check_grep "... the summary times the step $st against its estimate, exit 0" \
    "^step $st: [0-9]+ s \\(estimate [0-9]+ s\\), exit 0$" "$S"
done
check_grep "... the summary holds gpu-check's result" '^[0-9]+ passed, 0 failed$' "$S"
check_grep "... and the benchmark's goals" '^goal int8 largest <= 0.35x: ' "$S"
check_grep "... and its verdict" '^result: every step passed$' "$S"
check_grep "... an MPS row where the (stand-in) server answered" '^# mps: 2 ranks' "$S"
R="$ROOT/$B/gpu-bench/results.jsonl"
for v in plain default ethernet-1g accum4 plain-accum4; do
  check_grep "... the run $v (2 ranks) finished" "^ok - $v-w2-shared " "$TMPD/bench.out"
done
check_grep "... the table has a row per variant, with ratios to plain" \
  '^\| default \| [0-9.]+x \| [0-9.]+x \| [0-9.]+x \| [0-9]+ of [0-9]+ \| yes \|$' "$TMPD/bench.out"
check_grep "... accumulation is compared with plain NCCL under the same 4-pass loop" \
  '^\| accum4 \(vs plain-accum4\) \| - \| - \| [0-9.]+x \| [0-9]+ of [0-9]+ \| yes \|$' "$TMPD/bench.out"
n=$(grep -c '^| .* | yes |$' "$TMPD/bench.out")
[ "$n" -eq 6 ] && ok "... every row's replicas ended identical (5 rows, and plain under MPS)" || not_ok "... $n rows say identical, want 6"
check_grep "... a goal line per goal (PASS, MISS or not measured: never judged here)" \
  '^goal int8 largest <= 0.35x: not measured$' "$TMPD/bench.out"
check_grep "... the no-settings goal is computed" '^goal default every <= 1.00x: (PASS|MISS) \(worst ' "$TMPD/bench.out"
out=$(python3 - "$R" <<'PY'
import json, sys
rows = {json.loads(l)["variant"]: json.loads(l) for l in open(sys.argv[1]) if json.loads(l)["mode"] == "shared"}
# the summary read back: None without the shim, the shim's counts with it
print(int(rows["plain"]["stats"] is None), int(rows["default"]["stats"]["calls"] > 0),
      int(rows["accum4"]["stats"]["skipped"] > 0), int(rows["ethernet-1g"]["stats"]["wire"] == "fp16"))
PY
)
[ "$out" = "1 1 1 1" ] && ok "... the shim's summary read back in-process: none without it; calls seen, accumulation skipped passes, the preset's format" \
  || not_ok "... the summary read back: got '$out' (want 1 1 1 1)"

grep -q '^# skip - int8-w2-mps: no MPS server answered after the run' "$TMPD/bench.out" && \
  ! grep -q '"variant": "int8", "w": 2, "mode": "mps"' "$R" \
  && ok "gpu-bench: an MPS run after which no server answered is dropped (no int8 mps row), with a line saying so" \
  || { not_ok "gpu-bench with an MPS daemon whose server went away"; grep mps "$TMPD/bench.out" | sed 's/^/#   /'; }

# The table on made-up results: each goal PASS and MISS, differing replicas fail.
T="$ROOT/tests/gpu/bench_table.py"
mk() { # variant w ar-ms... ddp-ms identical
  python3 -c 'import json, sys; v, w, a, b, d, i = sys.argv[1:7]
print(json.dumps({"variant": v, "w": int(w), "mode": "shared", "allreduce": {"16M": float(a), "256M": float(b)},
                  "ddp": float(d), "identical": i == "1", "stats": None if v.startswith("plain") else
                  {"calls": 10, "compressed": 4, "fused": 2, "wire": "fp16"}}))' "$@"
}
{ mk plain 2 10 100 50 1; mk default 2 9 90 49 1; mk fp16 2 6 55 29 1; mk int8 2 5 30 19 1; } >"$TMPD/good.jsonl"
python3 "$T" "$TMPD/good.jsonl" >"$TMPD/good.out"; rc=$?
[ $rc -eq 0 ] && [ "$(grep -c ': PASS ' "$TMPD/good.out")" -eq 4 ] \
  && ok "bench_table: every goal met on made-up results: 4 PASS, exit 0" \
  || { not_ok "bench_table on good results: exit $rc"; sed 's/^/#   /' "$TMPD/good.out"; }
check_grep "bench_table: 6 of 10 compressed (fused members counted)" '^\| fp16 \| .* \| 6 of 10 \| yes \|$' "$TMPD/good.out"
{ mk plain 2 10 100 50 1; mk default 2 11 90 49 1; mk fp16 2 6 55 31 1; mk int8 2 5 36 21 0; } >"$TMPD/bad.jsonl"
python3 "$T" "$TMPD/bad.jsonl" >"$TMPD/bad.out"; rc=$?
[ $rc -eq 1 ] && [ "$(grep -c ': MISS ' "$TMPD/bad.out")" -eq 4 ] && grep -q '^| int8 | .* | NO |$' "$TMPD/bad.out" \
  && ok "bench_table: each goal missed on made-up results (4 MISS); replicas that differ fail the run" \
  || { not_ok "bench_table on bad results: exit $rc"; sed 's/^/#   /' "$TMPD/bad.out"; }
