#!/usr/bin/env bash
# tests/gpu/run.sh — `make gpu-run`: the one command to run on a GPU machine:
# build, gpu-check (tests/gpu/check.sh) and the quick gpu-bench
# (tests/gpu/bench.sh, GPU_BENCH_MODE=quick), each run whatever the one
# before found (a correctness failure does not hide the numbers), and one
# summary file, $B/gpu-summary.txt: each step's time against its estimate,
# gpu-check's result and speed goals, its failures, the benchmark's table
# and goals. Exit 1 when the build, a gpu-check check or a benchmark run
# failed (speed below a goal is not a failure).
#
# Time on an H200 (estimated from the last GPU run, 2026-12-04; the summary
# prints the measured times beside these), 5 min 20 s in all:
#   build      60 s  make -j all + the kernel checkers (the fatbin for five
#                    architectures dominates: about 40 s)
#   gpu-check 190 s  181 s measured (kernels 45, torch 17, allreduce_perf
#                    60, DDP 57), and the checks added since (no new runs)
#   gpu-bench  70 s  quick: 5 runs at 2 ranks and 2 under MPS, 10 s each
# No step comes near the 10 minutes a command may take (each has its own
# timeouts).
#
# GPU_RUN_DOUBLE=1 (CI: tests/t/18-gpu-bench.sh) runs the same steps on the
# stand-ins (GPU_CHECK_DOUBLE=1, GPU_BENCH_DOUBLE=1): their times say
# nothing about a GPU. Knobs pass through (GPU_CHECK_*, GPU_BENCH_*).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=${B:-build}
SUM="$ROOT/$B/gpu-summary.txt"
LOGS="$ROOT/$B/gpu-run"
mkdir -p "$LOGS"
cd "$ROOT"
DOUBLE=${GPU_RUN_DOUBLE:-0}
rc=0
declare -A took
step() { # name, estimate (s), command...: runs it, its output to $LOGS/name.log and the terminal
  local name=$1 est=$2; shift 2
  local t0; t0=$(date +%s)
  echo "# ---- $name (about $est s on an H200)"
  "$@" 2>&1 | tee "$LOGS/$name.log"
  local r=${PIPESTATUS[0]}
  took[$name]="$(( $(date +%s) - t0 )) s (estimate $est s), exit $r"
  [ "$r" -eq 0 ] || rc=1
}
jobs_n=$(nproc 2>/dev/null || echo 2)
step build 60 make -j"$jobs_n" --no-print-directory B="$B" all "$B/tests/check_kernels" "$B/tests/gpu_ef_cuda" \
  "$B/bin/ncclshim-envdoc"
step gpu-check 190 env GPU_CHECK_DOUBLE="$DOUBLE" B="$B" bash tests/gpu/check.sh
step gpu-bench 70 env GPU_BENCH_DOUBLE="$DOUBLE" GPU_BENCH_MODE="${GPU_BENCH_MODE:-quick}" B="$B" bash tests/gpu/bench.sh
{
  echo "# ncclshim GPU run $(date -u +%Y-%m-%dT%H:%MZ) on $([ "$DOUBLE" = 1 ] && echo "the STAND-INS (not a GPU: times say nothing about one)" || nvidia-smi -L 2>/dev/null | head -1)"
  echo "# commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'); logs in $LOGS"
  for s in build gpu-check gpu-bench; do echo "step $s: ${took[$s]}"; done
  echo
  echo "## gpu-check"
  grep -E '^(not ok - |# speed: |[0-9]+ passed, [0-9]+ failed$)' "$LOGS/gpu-check.log"
  echo
  echo "## gpu-bench"
  sed -n '/^# \(shared\|mps\):/,$p' "$LOGS/gpu-bench.log" | grep -v '^# gpu-bench .* took'
  grep -E '^(not ok - |# skip - )' "$LOGS/gpu-bench.log"
  echo
  echo "result: $([ $rc -eq 0 ] && echo "every step passed" || echo "a step FAILED (see above)")"
} >"$SUM"
echo "# summary: $SUM"
exit $rc
