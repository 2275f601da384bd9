#!/usr/bin/env bash
# tests/gpu/bench.sh — `make gpu-bench`: the numbers a user would ask for, on
# one GPU in a few minutes, right after `make gpu-check`, with only what such
# a machine has (python3 with torch, MPI, no network). W ranks share the GPU,
# each with its own NCCL_HOSTID (NCCL joins them over its network transport:
# a slow network beside a fast GPU), W = 2 and 4; the same again under MPS
# when nvidia-cuda-mps-control exists (no time slicing between the ranks'
# processes: closer to a GPU per rank); a daemon started here is always quit,
# on failure too.
#
# Each variant is one run of tests/gpu/bench.py (torchrun, W ranks): fp32
# all-reduces of GPU_BENCH_SIZES per rank (16M,64M,256M) and the step of a DDP
# model of GPU_BENCH_PARAMS parameters (64M), GPU_BENCH_ITERS calls and
# GPU_BENCH_STEPS steps timed, for
#   plain     no shim at all (the baseline of every ratio)
#   default   the shim with no settings
#   fp16 bf16 int8 fp8 fp16s int4   NCCLSHIM_COMPRESS=<format>, every row of
#             compress/formats.h (ncclshim-envdoc --names)
#   <preset>  each env/*.env
#   accum4    NCCLSHIM_ACCUM_STEPS=4 under a naive loop of 4 passes per step,
#             against plain NCCL under the same loop (plain-accum4)
# and prints one table: per row the ratio to plain of each all-reduce size
# and of the DDP step, the calls the shim compressed (its summary, read back
# in-process), and whether the replicas ended identical; then the goals, each
# PASS or MISS:
#   no settings <= 1.0x plain in every column and row count;
#   DDP step fp16 <= 0.60x, int8 <= 0.40x; all-reduce int8 <= 0.35x (the
#   largest size).
# Writes $B/gpu-bench/{table.txt,results.jsonl,*.log}; exit 1 when a run
# failed or replicas differed (a MISS is a result, not a failure).
#
# GPU_BENCH_DOUBLE=1 (CI: tests/t/18-gpu-bench.sh) runs the same script on
# the stand-ins: bench.py on the CPU under `ncclshim-run --emulate` (ncclpg
# over the host NCCL; torch cannot drive the CUDA driver double), small
# sizes and model, W=2 only, no MPS: its runs, parsing, table and goal lines
# are tested there, never its timings (CPU numbers say nothing about a GPU).
# GPU_BENCH_MODE: quick (the default, for the one GPU command tests/gpu/run.sh)
# or full.
#   quick  W = 2 only: plain, default, fp16, int8, int4 (5 runs), and under
#          MPS plain and int8 (2 runs): about 70 s on an H200 (10 s a run at
#          W = 2, the last GPU run's figure, 2026-12-04);
#   full   at W = 4 every variant (15 runs), at W = 2 plain, default and
#          int8 (3), under MPS (W = 4) plain, default and int8 (3): 21 runs,
#          about 5 to 6 minutes (10 s a start at W = 2, 15 s at W = 4).
# MPS rows are kept only when an MPS server really answered: the control
# daemon must answer a query after it started, and must list a server after
# each run (clients that find no server run without MPS: a row would be
# mislabelled); its pipe directory is a short one under /tmp (a socket path
# has at most 108 bytes). GPU_BENCH_MPS=1 on the stand-ins runs the MPS rows
# too, with whatever nvidia-cuda-mps-control is first on PATH (CI: a stand-in,
# tests/gpu/fake-mps). Knobs: GPU_BENCH_VARIANTS="plain default int8 ..."
# (only those, at every W; plain always), GPU_BENCH_WORLDS="2 4",
# GPU_BENCH_MPS_VARIANTS, GPU_BENCH_TIMEOUT (150 s a run).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=${B:-build}
OUT="$ROOT/$B/gpu-bench"
mkdir -p "$OUT"
rm -f "$OUT"/*.json "$OUT"/*.log "$OUT/results.jsonl"
cd "$ROOT"
PY=${PYTHON:-python3}
SHIM="$ROOT/$B/lib/libncclshim.so"
DOUBLE=${GPU_BENCH_DOUBLE:-0}
START=$(date +%s)
failed=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# the caller's settings must not leak into a variant
for v in $(env | grep -o '^NCCLSHIM_[A-Z_]*'); do unset "$v"; done
unset LD_PRELOAD

MODE=${GPU_BENCH_MODE:-quick}
case $MODE in quick|full) ;; *) echo "not ok - GPU_BENCH_MODE=$MODE: quick or full"; exit 1 ;; esac
if [ "$DOUBLE" = 1 ]; then
  SIZES=${GPU_BENCH_SIZES:-1M,4M}; PARAMS=${GPU_BENCH_PARAMS:-256K}; WS=${GPU_BENCH_WORLDS:-2}
  ITERS=${GPU_BENCH_ITERS:-3}; STEPS=${GPU_BENCH_STEPS:-2}
  echo "# gpu-bench $(date -u +%Y-%m-%dT%H:%MZ) on the STAND-INS (CPU, host NCCL): timings are not GPU numbers"
else
  SIZES=${GPU_BENCH_SIZES:-16M,64M,256M}; PARAMS=${GPU_BENCH_PARAMS:-64M}
  if [ "$MODE" = quick ]; then WS=${GPU_BENCH_WORLDS:-2}; else WS=${GPU_BENCH_WORLDS:-"2 4"}; fi
  ITERS=${GPU_BENCH_ITERS:-4}; STEPS=${GPU_BENCH_STEPS:-3}
  echo "# gpu-bench $(date -u +%Y-%m-%dT%H:%MZ) on $(nvidia-smi -L 2>/dev/null | head -1)"
fi
[ -f "$SHIM" ] || { echo "not ok - the shim is built ($SHIM missing)"; exit 1; }
T=${GPU_BENCH_TIMEOUT:-150} # seconds per run
PRESETS=$(cd env && ls *.env | sed 's/\.env$//' | tr '\n' ' ')
FORMATS=$("$ROOT/$B/bin/ncclshim-envdoc" --names | tr '\n' ' ')
[ -n "$FORMATS" ] || { echo "not ok - the formats ($B/bin/ncclshim-envdoc --names)"; exit 1; }
ALL="plain default $FORMATS $PRESETS plain-accum4 accum4"
# Every variant at the largest rank count; at the smaller ones the three that
# answer "does it pay": plain, no settings, int8. The time on a GPU,
# estimated (no GPU run of this script yet): 21 runs (15 at W = 4, 3 at
# W = 2, 3 under MPS) of about 10 s: torch's and NCCL's start ~6 s, and at
# W = 4 the timed calls ~4.5 s plain (6 rounds with the 2 warm-ups of
# 16+64+256 MiB at ~1.4 ms/MiB, 5 DDP steps of 256 MiB; plain-accum4's 4
# synced passes per step ~10 s; less with the shim): 3.5 minutes, 4 with the
# machine's start; the script prints its own time at the end.
variants_for() { # W
  local v=${GPU_BENCH_VARIANTS:-}
  if [ -z "$v" ] && [ "$MODE" = quick ]; then v="plain default fp16 int8 int4"
  elif [ -z "$v" ]; then
    if [ "$1" = "${WS##* }" ]; then v=$ALL; else v="plain default int8"; fi
  fi
  case " $v " in *" plain "*) ;; *) v="plain $v" ;; esac
  case " $v " in *" accum4 "*) case " $v " in *" plain-accum4 "*) ;; *) v="$v plain-accum4" ;; esac ;; esac
  echo "$v"
}

# The plain runs: torchrun without the shim (on the stand-ins, ncclshim.emulate
# over the host NCCL, as `ncclshim-run --emulate` does, without the preload).
plain_cmd() { # W, bench.py args...
  local w=$1; shift
  if [ "$DOUBLE" = 1 ]; then
    PYTHONPATH="$ROOT/env${PYTHONPATH:+:$PYTHONPATH}" HOSTNCCL_LIB="$ROOT/$B/lib/hostnccl/libnccl.so.2" \
      OMP_NUM_THREADS=1 timeout -k 10 "$T" "$PY" -m torch.distributed.run --standalone --nproc_per_node="$w" -m ncclshim.emulate \
      "$ROOT/tests/gpu/bench.py" "$@"
  else
    timeout -k 10 "$T" "$PY" -m torch.distributed.run --standalone --nproc_per_node="$w" "$ROOT/tests/gpu/bench.py" \
      "$@" --one-gpu
  fi
}
# The shim's runs: the one launcher (env/ncclshim-run: the preload, a preset).
shim_cmd() { # W, launcher options..., --, bench.py args...
  local w=$1 opts=(); shift
  while [ "$1" != -- ]; do opts+=("$1"); shift; done; shift
  if [ "$DOUBLE" = 1 ]; then
    timeout -k 10 "$T" "$ROOT/env/ncclshim-run" --lib "$SHIM" "${opts[@]}" --emulate --nproc "$w" --python "$PY" -- \
      "$ROOT/tests/gpu/bench.py" "$@"
  else
    timeout -k 10 "$T" "$ROOT/env/ncclshim-run" --lib "$SHIM" "${opts[@]}" -- "$PY" -m torch.distributed.run --standalone \
      --nproc_per_node="$w" "$ROOT/tests/gpu/bench.py" "$@" --one-gpu
  fi
}

# run VARIANT W MODE: one bench.py run; its JSON line appended to results.jsonl
run() {
  local var=$1 w=$2 mode=$3 tag="$1-w$2-$3" accum=1
  case $var in plain-accum4|accum4) accum=4 ;; esac
  local args=(--out "$OUT/$tag.json" --sizes "$SIZES" --iters "$ITERS" --ddp-params "$PARAMS" --steps "$STEPS"
              --accum "$accum")
  local t0=$(date +%s)
  case $var in
    plain|plain-accum4) plain_cmd "$w" "${args[@]}" ;;
    default) shim_cmd "$w" -- "${args[@]}" ;;
    accum4) NCCLSHIM_ACCUM_STEPS=4 shim_cmd "$w" -- "${args[@]}" ;;
    *) if [[ " $FORMATS " == *" $var "* ]]; then NCCLSHIM_COMPRESS=$var shim_cmd "$w" -- "${args[@]}"
       else shim_cmd "$w" --preset "$var" -- "${args[@]}"; fi ;;
  esac >"$OUT/$tag.log" 2>&1
  local rc=$? t1=$(date +%s)
  if [ $rc -ne 0 ] || [ ! -s "$OUT/$tag.json" ]; then
    echo "not ok - $tag: exit $rc (see $OUT/$tag.log)"; tail -n 5 "$OUT/$tag.log" | sed 's/^/#   /'
    failed=1
    return
  fi
  "$PY" -c 'import json, sys; d = json.load(open(sys.argv[1])); d.update(variant=sys.argv[2], w=int(sys.argv[3]),
mode=sys.argv[4], seconds=int(sys.argv[5])); print(json.dumps(d))' "$OUT/$tag.json" "$var" "$w" "$mode" $((t1 - t0)) \
    >>"$OUT/results.jsonl"
  echo "ok - $tag ($((t1 - t0)) s)"
}

for w in $WS; do
  for v in $(variants_for "$w"); do run "$v" "$w" shared; done
done

# MPS: the ranks' kernels run side by side instead of time-sliced. A row
# counts only when a server answered (see the header).
mps() { echo "$1" | timeout 10 nvidia-cuda-mps-control 2>/dev/null; }
if { [ "$DOUBLE" != 1 ] || [ "${GPU_BENCH_MPS:-0}" = 1 ]; } && command -v nvidia-cuda-mps-control >/dev/null; then
  mdir=$(mktemp -d /tmp/ncclshim-mps.XXXXXX)
  export CUDA_MPS_PIPE_DIRECTORY="$mdir/pipe" CUDA_MPS_LOG_DIRECTORY="$mdir/log"
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  trap 'mps quit >/dev/null; rm -rf "$mdir"' EXIT
  if nvidia-cuda-mps-control -d && sleep 1 && [ -n "$(mps get_default_active_thread_percentage)" ]; then
    w=${WS##* } # the largest rank count: where time slicing costs most
    if [ "$MODE" = quick ]; then mv_def="plain int8"; else mv_def="plain default int8"; fi
    for v in ${GPU_BENCH_MPS_VARIANTS:-$mv_def}; do
      run "$v" "$w" mps
      if [ -z "$(mps get_server_list)" ] && [ -f "$OUT/results.jsonl" ]; then
        # no server ran: the row was not under MPS; drop it
        grep -v "\"variant\": \"$v\", \"w\": $w, \"mode\": \"mps\"" "$OUT/results.jsonl" >"$OUT/results.tmp"
        mv "$OUT/results.tmp" "$OUT/results.jsonl"
        echo "# skip - $v-w$w-mps: no MPS server answered after the run (its clients ran without MPS): row dropped"
      fi
    done
  else
    echo "# skip - the MPS control daemon did not answer after nvidia-cuda-mps-control -d: no MPS rows"
  fi
  mps quit >/dev/null; rm -rf "$mdir"
  trap - EXIT
else
  echo "# skip - no MPS here$([ "$DOUBLE" = 1 ] && echo " (stand-ins; GPU_BENCH_MPS=1 runs them)"): no MPS rows"
fi

"$PY" "$ROOT/tests/gpu/bench_table.py" "$OUT/results.jsonl" | tee "$OUT/table.txt"
trc=${PIPESTATUS[0]}
echo "# gpu-bench ($MODE) took $(( $(date +%s) - START )) s; results in $OUT"
[ $failed -eq 0 ] && [ "$trc" -eq 0 ]
