#!/usr/bin/env bash
# bench/ratios.sh [compress|fusion|torch|replica|twophase|errors|link|fabric|hier|hier-errors|model|launch|learn|all] — the side-by-side comparisons
# behind the goals in bench/README.md, over the host NCCL (emulated links; not
# GPU numbers). Each variant runs in the same invocation, alternating, and the
# script prints ratios of medians:
#   compress  allreduce_perf 4 ranks, 4..64 MiB, HOSTNCCL_LINK_GBPS=1 and 10:
#             shim fp16 time / no-shim time per size (goal at 1 Gb/s: <= 0.55)
#   fusion    allreduce_perf -m 64, 16 KiB fp32, 4 ranks, HOSTNCCL_LINK_LATENCY_US=50:
#             fused (shim, default) / unfused (no shim; and shim FUSE_BYTES=0) (goal <= 0.1)
#   torch     real PyTorch DDP under torchrun, 4 ranks, HOSTNCCL_LINK_GBPS=1:
#             communication time per optimizer step, shim fp16 + K=4 / no shim
#             (goal <= 0.15), step time and its compute/communication split,
#             for a communication-heavy and a compute-heavy job; the shim's
#             runs with the step hook, K=4 and ACCUM_STEPS=auto (goal: step
#             <= 0.5x no shim, communication-heavy)
#   replica   the replica check's cost: seconds per check against the step
#             time, at the default NCCLSHIM_REPLICA_CHECK=1000 (goal <= 0.1 %)
#   twophase  allreduce_perf 4 ranks, 4..64 MiB, HOSTNCCL_LINK_GBPS=1: no shim (fp32),
#             ring fp16, two-phase in every wire format (compress/formats.h;
#             default pieces), and
#             fp16/int8 in one piece, time / fp32 per size
#             (goals: two-phase fp16 <= 0.55, int8 <= 0.30)
#   errors    max |error| / sum |x| of random inputs over 2^-30..2^30 against
#             the rank count n = 2, 3, 4, 8 (oversubscribed), ring fp16/bf16 and
#             two-phase in every wire format, with each documented bound
#   link      twophase_link: fp32 two-phase over send/recv / fp32 ring, same
#             bytes, HOSTNCCL_LINK_GBPS=1 (goal: within 10 %)
#   fabric    the emulated multi-node fabric's honesty: a ring all-reduce and an
#             all-to-all on 2x2, 2x4 and 4x2 emulated nodes (UTS namespaces),
#             a 0.5 Gb/s NIC per node or per rank, 50 Gb/s inside a node,
#             16 and 64 MiB: measured / modelled time (what the bytes cost on
#             the links they cross; goal: within 10 %)
#   hier      allreduce_perf on 2 emulated nodes x 4 ranks (and 4 x 2), a 0.5 Gb/s
#             NIC per node (or per rank), 50 Gb/s inside a node, 16 and 64 MiB: no
#             shim (the host NCCL's fp32 ring), flat two-phase fp16, hier fp16
#             and int8, and auto fp16 (the default: hier on these nodes), each
#             time / t_bound = 2(N-1)/N * S / NIC rate, with the
#             bytes through the busiest NIC per call (modelled from the algorithm;
#             goals: hier fp16 <= 0.55, int8 <= 0.30)
#   hier-errors  max |error| / sum |x| of random inputs (as errors) with hier on
#             2x2, 2x4 and 4x2 emulated nodes against flat two-phase on the same
#             rank count, every wire format, with each documented bound
#   model     the cost model (bench/ncclshim-model, issue 22) against the emulator:
#             allreduce_perf on 1x4, 2x2, 2x4 and 4x2 emulated nodes x ranks, a 0.5 Gb/s
#             NIC per node and per rank, 50 Gb/s inside a node, 4/16/64 MiB: no shim,
#             ring fp16, flat two-phase fp16, hier fp16 and int8; predicted / measured
#             out-of-place time per case, 3 warm-up calls at 64 MiB first (the model is
#             of the steady state: staging grown, pages touched); goal: within 20 %;
#             MODEL_SHAPES, MODEL_ROUNDS
#   half      bf16 all-reduces of 64 MiB, 4 ranks, 1 Gb/s (issue 47): plain bf16, the
#             shim's bf16 wire with fp32 sums, int8, int4: time / plain (goals: <= 1.05,
#             0.62, 0.40); with a launch costing 1 MB, no settings / plain, 4..64 MiB
#             (goal <= 1.0)
#   half-hier bf16 on 2 emulated nodes x 2 ranks (issue 47): plain, int8 (flat two
#             phases: hier's node stages are fp32 steps), and fp32 int8 of the same
#             elements flat and hierarchical: what running 16-bit calls flat forgoes
#   launch    a launch cost per launch (HOSTNCCL_LAUNCH_US = 1 MB and 4 MB at the
#             1 Gb/s link) on 1x4, 4x1, 2x2 and 2x4: no shim, the shim with no
#             settings, int8 (two phases, hierarchical on nodes); time / no
#             shim (goals: no settings <= 1.0 everywhere, int8 <= 0.40 at 64 MiB)
# Environment: B (build dir), ROUNDS (alternations, default 3), GBPS_LIST.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=${B:-build}
BUILD="$ROOT/$B"
ROUNDS=${ROUNDS:-3}
WHAT=${1:-all}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
export NCCLSHIM_LOG=off
# The emulated links charge nothing per launch (HOSTNCCL_LAUNCH_US unset),
# and the shim is told so, as a preset tells it its fabric's cost (issue 33).
# The launch section instead charges launches and leaves the shim's default.
export NCCLSHIM_LAUNCH_BYTES=${NCCLSHIM_LAUNCH_BYTES:-0}
# Emulation overheads that are not the link: the host NCCL's cross-rank argument
# check (extra messages per collective) and busy-polling MPI ranks on
# oversubscribed cores. Both hit every variant alike.
export HOSTNCCL_CHECK=${HOSTNCCL_CHECK:-0} OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}
SHIM="$BUILD/lib/libncclshim.so"
LIBP="$BUILD/lib/hostnccl"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ncclshim-ratios.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

# run NAME PRELOAD(0|1) [VAR=VAL...] -- program args...
run() {
  local name=$1 pre=$2; shift 2
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local px=()
  [ "$pre" = 1 ] && px=(-x LD_PRELOAD="$SHIM")
  env "${envs[@]}" timeout 900 mpirun -np "${NP:-4}" -x LD_LIBRARY_PATH="$LIBP" "${px[@]}" "$@" >>"$TMP/$name.out" 2>&1 \
    || { echo "ratios: $name failed:" >&2; tail -5 "$TMP/$name.out" >&2; exit 1; }
}

# Median over rounds of allreduce_perf out-of-place time per size: "size time"
# (of datatype $2, float by default).
ap_times() {
  awk -v t="${2:-float}" '$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ && $3 == t {print $1, $6}' "$TMP/$1.out" | sort -n -k1,1 -k2,2g |
    awk '{t[$1] = t[$1] " " $2} END {for (s in t) {n = split(t[s], v, " "); print s, v[int((n + 1) / 2)]}}' | sort -n
}

compress() {
  for g in ${GBPS_LIST:-1 10}; do
    rm -f "$TMP"/c-*.out
    for ((r = 0; r < ROUNDS; r++)); do
      run c-plain 0 HOSTNCCL_LINK_GBPS=$g -- "$BUILD/bin/allreduce_perf" -b 4M -e 64M -f 2 -n 1 -w 1 -c 0
      run c-fp16 1 HOSTNCCL_LINK_GBPS=$g NCCLSHIM_COMPRESS=fp16 -- "$BUILD/bin/allreduce_perf" -b 4M -e 64M -f 2 -n 1 -w 1 -c 0
    done
    echo "# compression, 4 ranks, HOSTNCCL_LINK_GBPS=$g, out-of-place time (us), median of $ROUNDS alternated runs"
    printf '%12s %12s %12s %8s\n' size no_shim shim_fp16 ratio
    join <(ap_times c-plain) <(ap_times c-fp16) | awk '{printf "%12d %12.0f %12.0f %8.3f\n", $1, $2, $3, $3 / $2}'
  done
}

fusion() {
  rm -f "$TMP"/f-*.out
  local args=(-b 16K -e 16K -m 64 -n 5 -w 2 -c 1)
  for ((r = 0; r < ROUNDS; r++)); do
    run f-plain 0 HOSTNCCL_LINK_LATENCY_US=50 -- "$BUILD/bin/allreduce_perf" "${args[@]}"
    run f-nofuse 1 HOSTNCCL_LINK_LATENCY_US=50 NCCLSHIM_FUSE_BYTES=0 -- "$BUILD/bin/allreduce_perf" "${args[@]}"
    run f-fused 1 HOSTNCCL_LINK_LATENCY_US=50 -- "$BUILD/bin/allreduce_perf" "${args[@]}"
  done
  echo "# fusion: allreduce_perf -m 64, 16 KiB fp32 each, 4 ranks, HOSTNCCL_LINK_LATENCY_US=50; time per group of 64 (us)"
  local p n f
  p=$(ap_times f-plain | awk '{print $2}'); n=$(ap_times f-nofuse | awk '{print $2}'); f=$(ap_times f-fused | awk '{print $2}')
  printf '%-34s %12s %8s\n' variant time ratio
  printf '%-34s %12.0f %8.3f\n' "no shim (unfused)" "$p" 1 "shim, NCCLSHIM_FUSE_BYTES=0" "$n" "$(awk -v a="$n" -v b="$p" 'BEGIN{print a/b}')" \
    "shim, fused (default)" "$f" "$(awk -v a="$f" -v b="$p" 'BEGIN{print a/b}')"
  grep -h "Out of bounds" "$TMP"/f-*.out | sort | uniq -c
}

# Real PyTorch under torchrun (tests/torch/train.py, a 3.7M-parameter
# transformer, naive accumulation of 4 passes per optimizer step): no shim,
# shim fp16, shim fp16 + K=4, shim fp16 + ACCUM_STEPS=auto, alternated, for a
# communication-heavy (batch 1) and a compute-heavy (batch 16) job. The
# shim's runs have the package's hook on PYTHONPATH (as ncclshim-run does):
# K is checked against the optimizer's steps. Per optimizer step after step 2
# (steps 0-2 sync every pass: the shim learns the pass, the hook sees the
# window, auto twice): step time, time inside NCCL calls, compute = the rest.
TORCH_VENV=${SHIMTEST_TORCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ncclshim/torch-venv}
TORCH_MODEL=(--model transformer --width 256 --layers 4 --vocab 1024 --seq 32 --bucket-mb 4 --opt adam --lr 0.5)
torch_run() { # NAME OUT ENV... -- TRAIN_ARGS...: one torchrun of 4 ranks
  local name=$1 out=$2; shift 2
  local envs=(HOSTNCCL_LIB="$LIBP/libnccl.so.2" OMP_NUM_THREADS=1)
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" timeout 900 "$TORCH_VENV/bin/torchrun" --standalone --nproc_per_node=4 \
    "$ROOT/tests/torch/train.py" "${TORCH_MODEL[@]}" --case "$name" --out "$out" "$@" >>"${out%.json}.out" 2>&1 \
    || { echo "ratios: torch $name failed:" >&2; tail -5 "${out%.json}.out" >&2; exit 1; }
}
torch_ddp() {
  local hooked=(LD_PRELOAD="$SHIM" PYTHONPATH="$ROOT/env/ncclshim/site" NCCLSHIM_COMPRESS=fp16)
  for g in ${GBPS_LIST:-1}; do
    for batch in ${TORCH_BATCHES:-1 16}; do
      rm -f "$TMP"/torch-*
      for ((r = 0; r < ROUNDS; r++)); do
        for v in plain fp16 fp16-k4 fp16-auto; do
          local envs=(HOSTNCCL_LINK_GBPS=$g)
          [ $v != plain ] && envs+=("${hooked[@]}")
          [ $v = fp16-k4 ] && envs+=(NCCLSHIM_ACCUM_STEPS=4)
          [ $v = fp16-auto ] && envs+=(NCCLSHIM_ACCUM_STEPS=auto)
          torch_run $v "$TMP/torch-$v.$r.json" "${envs[@]}" -- --batch "$batch" --micro 4 --steps "${TORCH_STEPS:-7}"
        done
      done
      echo "# real PyTorch DDP (torchrun), 4 ranks, batch $batch x 32 tokens per pass, 4 passes per step, HOSTNCCL_LINK_GBPS=$g"
      TORCH_WARM=3 python3 "$ROOT/bench/demo_report.py" torch "$TMP" | sed -n '/^variant/,$p'
    done
  done
}

# The replica check's cost (NCCLSHIM_REPLICA_CHECK): the same DDP job with the
# hook checking after every optimizer step; the hook's own clock gives the
# seconds per check, train.py the step time; the cost at the default N=1000
# is (seconds per check) / (1000 x step).
replica() {
  rm -f "$TMP"/rc-*
  torch_run rc "$TMP/rc-0.json" HOSTNCCL_LINK_GBPS=${GBPS_LIST:-1} LD_PRELOAD="$SHIM" \
    PYTHONPATH="$ROOT/env/ncclshim/site" NCCLSHIM_REPLICA_CHECK=1 -- --batch "${TORCH_BATCHES:-1}" --steps "${TORCH_STEPS:-7}"
  python3 - "$TMP/rc-0.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["rc"]
checks, secs = r["replica_check"]
steps = sorted(r["step_s"][1:])
step = (steps[len(steps) // 2] + steps[(len(steps) - 1) // 2]) / 2
per = secs / checks
print(f"# replica check, 4 ranks, {r['nparams'] / 1e6:.2f} M parameters, rank 0: {checks} checks")
print(f"seconds per check {per:.4f}, median step {step:.3f} s, one check = {per / step:.2%} of a step;"
      f" at NCCLSHIM_REPLICA_CHECK=1000: {per / (1000 * step):.4%} of step time")
PY
}

twophase() {
  rm -f "$TMP"/t-*.out
  local ap=("$BUILD/bin/allreduce_perf" -b 4M -e 64M -f 2 -n 1 -w 1 -c 0)
  # every wire format of compress/formats.h (ncclshim-envdoc --names)
  local fmts; fmts=$("$BUILD/bin/ncclshim-envdoc" --names) || { echo "ratios: ncclshim-envdoc is not built" >&2; exit 1; }
  for ((r = 0; r < ROUNDS; r++)); do
    run t-fp32 0 HOSTNCCL_LINK_GBPS=${TP_GBPS:-1} -- "${ap[@]}"
    run t-ring16 1 HOSTNCCL_LINK_GBPS=${TP_GBPS:-1} NCCLSHIM_COMPRESS=fp16 NCCLSHIM_ALGO=ring -- "${ap[@]}"
    for w in $fmts; do
      run t-2p$w 1 HOSTNCCL_LINK_GBPS=${TP_GBPS:-1} NCCLSHIM_COMPRESS=$w NCCLSHIM_ALGO=twophase -- "${ap[@]}"
    done
    for w in fp16 int8; do # the same without pieces: what the pipeline buys
      run t-1p$w 1 HOSTNCCL_LINK_GBPS=${TP_GBPS:-1} NCCLSHIM_COMPRESS=$w NCCLSHIM_ALGO=twophase \
        NCCLSHIM_TWOPHASE_PIECE_BYTES=0 -- "${ap[@]}"
    done
  done
  echo "# two-phase, 4 ranks, HOSTNCCL_LINK_GBPS=${TP_GBPS:-1}, out-of-place time (us) and ratio to fp32, median of $ROUNDS alternated runs"
  echo "# (2p: default pieces, NCCLSHIM_TWOPHASE_PIECE_BYTES=auto; 1p: one piece, =0)"
  local cols=(ring16) heads=(ring_fp16) t
  for w in $fmts; do cols+=(2p$w); heads+=(2p_$w); done
  cols+=(1pfp16 1pint8) heads+=(1p_fp16 1p_int8)
  printf '%10s %10s' size fp32; printf ' %16s' "${heads[@]}"; echo
  t=$(ap_times t-fp32)
  for c in "${cols[@]}"; do t=$(join <(printf '%s\n' "$t") <(ap_times t-$c)); done
  printf '%s\n' "$t" | awk '{printf "%10d %10.0f", $1, $2; for (i = 3; i <= NF; i++) printf " %9.0f (%.3f)", $i, $i / $2; print ""}'
}

errors() {
  local P="$BUILD/tests/shim_twophase" out="$TMP/e.out"
  : >"$out"
  for np in 2 3 4 8; do
    for v in ring:fp16 ring:bf16 $(for w in $("$BUILD/bin/ncclshim-envdoc" --names); do echo twophase:$w; done); do
      NP=$np run e-$np 1 NCCLSHIM_ALGO=${v%%:*} NCCLSHIM_COMPRESS=${v#*:} NCCLSHIM_MIN_BYTES=0 NCCLSHIM_BANNER=0 -- "$P" bound 8
    done
    grep -h '^maxrel' "$TMP/e-$np.out" >>"$out"
  done
  echo "# max |error| / sum |x|, random inputs (one exponent per 4096 elements in 2^-30..2^30, fp16: 2^-12..2^12), 8*4096*n elements"
  awk '{k = $3 " " $2; e[k, $4] = $5; b[k, $4] = $6; keys[k] = 1}
       END {printf "%-15s %22s %22s %22s %22s\n", "algo format", "n=2 (bound)", "n=3 (bound)", "n=4 (bound)", "n=8 (bound)";
            for (k in keys) {printf "%-15s", k; for (n = 2; n <= 8; n++) if ((k, n) in e) printf " %10.3g (%9.3g)", e[k, n], b[k, n]; print ""}}' "$out" | sort
}

link() {
  rm -f "$TMP"/l-*.out
  for mib in 16 64; do
    run l-$mib 0 HOSTNCCL_LINK_GBPS=${TP_GBPS:-1} -- "$BUILD/bin/twophase_link" $mib 3
    echo "# fp32 two-phase over send/recv vs fp32 ring, 4 ranks, HOSTNCCL_LINK_GBPS=${TP_GBPS:-1}, $mib MiB"
    cat "$TMP/l-$mib.out"
  done
}

fabric() {
  local API="$BUILD/tests/test_hostnccl_api" n l per mib k ctx
  echo "# nodes x ranks, NIC per, MiB: ring all-reduce and all-to-all, measured / modelled (median of 3)"
  for nl in 2x2 2x4 4x2; do
    n=${nl%x*} l=${nl#*x}
    for per in node rank; do
      for mib in 16 64; do
        ctx=()
        for ((k = 0; k < n; k++)); do
          [ $k -gt 0 ] && ctx+=(:)
          ctx+=(-np "$l" -x LD_LIBRARY_PATH="$LIBP" -x HOSTNCCL_LINK_GBPS=0.5 -x HOSTNCCL_INTRA_GBPS=50
            -x HOSTNCCL_NIC_PER=$per unshare --uts sh -c 'hostname "$0" && exec "$@"' "emunode$k" "$API" fabric "$mib")
        done
        timeout 900 mpirun "${ctx[@]}" >"$TMP/f.out" 2>&1 || { echo "ratios: fabric $nl $per $mib failed" >&2; tail -5 "$TMP/f.out" >&2; exit 1; }
        awk -v c="$nl $per $mib" '/measured\/modelled/ {r[++k] = $NF; m[k] = $(NF-3)} END {
          printf "%-18s ring %6.3f (model %7.1f ms)   all-to-all %6.3f (model %7.1f ms)\n", c, r[1], m[1], r[2], m[2]}' "$TMP/f.out"
      done
    done
  done
}

# ctx_nodes N L VAR=value...: mpirun app contexts for N emulated nodes of L ranks
# (UTS namespaces), the settings on each; then the program (global CTX).
ctx_nodes() {
  local n=$1 l=$2 k xs=()
  shift 2
  while [ $# -gt 0 ] && [ "$1" != -- ]; do xs+=(-x "$1"); shift; done
  shift
  CTX=()
  for ((k = 0; k < n; k++)); do
    [ $k -gt 0 ] && CTX+=(:)
    CTX+=(-np "$l" -x LD_LIBRARY_PATH="$LIBP" "${xs[@]}" unshare --uts sh -c 'hostname "$0" && exec "$@"' "emunode$k" "$@")
  done
}

hier() {
  local AP="$BUILD/bin/allreduce_perf" v shape n l per
  for shape in 2x4:node 2x4:rank 4x2:node; do
    n=${shape%%x*} l=${shape#*x} l=${l%%:*} per=${shape#*:}
    rm -f "$TMP"/h-*.out
    for ((r = 0; r < ROUNDS; r++)); do
      for v in plain:0:off:none flat:1:fp16:twophase hier16:1:fp16:hier hier8:1:int8:hier auto16:1:fp16:auto; do
        IFS=: read -r name pre fmt algo <<<"$v"
        local px=()
        [ "$pre" = 1 ] && px=(LD_PRELOAD="$SHIM" NCCLSHIM_COMPRESS=$fmt NCCLSHIM_ALGO=$algo)
        ctx_nodes "$n" "$l" HOSTNCCL_LINK_GBPS=0.5 HOSTNCCL_INTRA_GBPS=50 HOSTNCCL_NIC_PER=$per "${px[@]}" \
          -- "$AP" -b 16M -e 64M -f 4 -n 1 -w 1 -c 0
        timeout 900 mpirun "${CTX[@]}" >>"$TMP/h-$name.out" 2>&1 || { echo "ratios: hier $name failed" >&2; tail -5 "$TMP/h-$name.out" >&2; exit 1; }
      done
    done
    echo "# $n nodes x $l ranks, NIC per $per at 0.5 Gb/s, 50 Gb/s inside: out-of-place time / t_bound (t_bound = 2(N-1)/N*S/NIC), median of $ROUNDS alternated runs; MiB through the busiest NIC per call (modelled)"
    printf '%10s %18s %18s %18s %18s %10s\n' size "no shim (ring)" "flat fp16" "hier fp16" "hier int8" "auto fp16"
    join <(ap_times h-plain) <(ap_times h-flat) | join - <(ap_times h-hier16) | join - <(ap_times h-hier8) |
      join - <(ap_times h-auto16) |
      awk -v N="$n" -v L="$l" -v per="$per" '{
        S = $1; k = per == "node" ? 1 : L; n = N * L;   # k: NICs per node, of 0.5 Gb/s each
        tb = 2 * (N - 1) / N * S * 8 / (0.5e9 * k) * 1e6; # through the node NICs together, in us
        ring = 2 * (n - 1) / n * S;  # rank-order ring: one rank per node crosses, 2(n-1) steps of S/n
        flat = 2 * L * (N - 1) / N * S * 0.5 / k; h16 = 2 * (N - 1) / N * S * 0.5 / k; h8 = 2 * (N - 1) / N * S * (0.25 + 0.5 / 256) / k
        printf "%10d %9.3f %6.1fMiB %9.3f %6.1fMiB %9.3f %6.1fMiB %9.3f %6.1fMiB %10.3f\n", S, $2 / tb, ring / 1048576, $3 / tb,
               flat / 1048576, $4 / tb, h16 / 1048576, $5 / tb, h8 / 1048576, $6 / tb }'
  done
}

# Launches cost (issue 33): the host NCCL charges HOSTNCCL_LAUNCH_US per
# launch, 1 MB and 4 MB of the link's time (1 Gb/s per rank on one node or
# on nodes of one rank; one 1 Gb/s NIC per node and 50 Gb/s inside on nodes of
# several ranks): no shim, the shim with no settings at all, and int8
# (always two phases: flat on one node or on nodes of one rank, hierarchical
# on nodes of several), 4, 16 and 64 MiB; time / no shim.
# LAUNCH_SHAPES (default "1x4 4x1 2x2 2x4") and LAUNCH_MB ("1 4") select.
# The shim's launch price is pinned at 4M, what auto plans at before it has
# measured one (these runs are too short to measure: `learn` below measures).
launch() {
  local AP="$BUILD/bin/allreduce_perf" shape n l mb us v
  for shape in ${LAUNCH_SHAPES:-1x4 4x1 2x2 2x4}; do
    n=${shape%x*} l=${shape#*x}
    local links=(HOSTNCCL_LINK_GBPS=1)
    [ "$l" -gt 1 ] && [ "$n" -gt 1 ] && links=(HOSTNCCL_LINK_GBPS=1 HOSTNCCL_INTRA_GBPS=50 HOSTNCCL_NIC_PER=node)
    for mb in ${LAUNCH_MB:-1 4}; do
      us=$((mb * 8000)) # mb MB at 1 Gb/s (125 MB/s)
      rm -f "$TMP"/u-*.out
      for ((r = 0; r < ROUNDS; r++)); do
        for v in plain:0 none:1 int8:1; do
          local px=()
          [ "${v#*:}" = 1 ] && px=(LD_PRELOAD="$SHIM")
          [ "${v%:*}" = int8 ] && px+=(NCCLSHIM_COMPRESS=int8)
          ctx_nodes "$n" "$l" "${links[@]}" HOSTNCCL_LAUNCH_US=$us "${px[@]}" -- "$AP" -b 4M -e 64M -f 4 -n 1 -w 1 -c 0
          NCCLSHIM_LAUNCH_BYTES=4M timeout 900 mpirun "${CTX[@]}" >>"$TMP/u-${v%:*}.out" 2>&1 ||
            { echo "ratios: launch $shape $v failed" >&2; tail -5 "$TMP/u-${v%:*}.out" >&2; exit 1; }
        done
      done
      echo "# $shape, HOSTNCCL_LAUNCH_US=$us ($mb MB at 1 Gb/s), out-of-place time (us) and ratio to no shim, median of $ROUNDS alternated runs"
      printf '%10s %10s %18s %18s
' size no_shim "no settings" "int8"
      join <(ap_times u-plain) <(ap_times u-none) | join - <(ap_times u-int8) |
        awk '{printf "%10d %10.0f %9.0f (%.3f) %9.0f (%.3f)\n", $1, $2, $3, $3 / $2, $4, $4 / $2}'
    done
  done
}

# learn: NCCLSHIM_LAUNCH_BYTES=auto, the default, against known emulated
# costs. Per shape (1x4; 2x2 emulated nodes, a 50 Gb/s intra link and one
# NIC per node) and launch cost (LEARN_MB: MB of link time at 1 Gb/s), three
# runs of allreduce_perf 64 KiB..64 MiB by factors of 2 with the calls log:
# plain (NCCLSHIM_COMPRESS=off: every call forwarded), the default (no
# settings) and int8 alone. Per size, the median time of the calls made after
# the price was agreed (the log's coll_us; the calls before the summary's
# fabric.call, planned at the unknown price, left out) and its ratio to
# plain; the plan the shim ran beside the plan the cost model makes for the
# emulated costs (ncclshim-model --fabric host, its own simulated learner);
# and the learned launch cost beside what the host NCCL charges per call
# (its launch plus 2(n-1) ring steps of HOSTNCCL_LINK_LATENCY_US).
learn() {
  local AP="$BUILD/bin/allreduce_perf" shape n l mb us v
  for shape in ${LEARN_SHAPES:-1x4 2x2}; do
    n=${shape%x*} l=${shape#*x}
    local links=(HOSTNCCL_LINK_GBPS=1 HOSTNCCL_LINK_LATENCY_US=50) per=rank
    [ "$n" -gt 1 ] && links+=(HOSTNCCL_INTRA_GBPS=50 HOSTNCCL_NIC_PER=node) per=node
    for mb in ${LEARN_MB:-0 0.25 1 4 16}; do
      us=$(awk -v m="$mb" 'BEGIN {printf "%d", m * 8000}')
      for v in off default int8; do
        local px=(LD_PRELOAD="$SHIM" NCCLSHIM_LOG=calls NCCLSHIM_LOG_FILE="$TMP/lj-$v/" NCCLSHIM_BANNER=0)
        [ $v = off ] && px+=(NCCLSHIM_COMPRESS=off)
        [ $v = int8 ] && px+=(NCCLSHIM_COMPRESS=int8)
        rm -rf "$TMP/lj-$v"; mkdir -p "$TMP/lj-$v"
        ctx_nodes "$n" "$l" "${links[@]}" HOSTNCCL_LAUNCH_US=$us "${px[@]}" -- "$AP" -b 64K -e 64M -f 2 -n 3 -w 1 -c 0
        env -u NCCLSHIM_LAUNCH_BYTES -u NCCLSHIM_COMPRESS timeout 900 mpirun "${CTX[@]}" >"$TMP/lj-$v.out" 2>&1 ||
          { echo "ratios: learn $shape $v failed" >&2; tail -5 "$TMP/lj-$v.out" >&2; exit 1; }
      done
      echo "# $shape, HOSTNCCL_LAUNCH_US=$us ($mb MB at 1 Gb/s), 50 us per step: median call time (ms) after the agreement, ratio to plain; plan ran / MODELLED plan"
      python3 "$ROOT/bench/learn_table.py" "$TMP" "$n" "$l" "$us" "$per" "$BUILD/bin/ncclshim_model"
    done
  done
}

# 16-bit inputs (issue 47): bf16 all-reduces of 64 MiB a rank, 4 ranks, 1 Gb/s:
# plain bf16 (the host NCCL's ring), and the shim's two phases with fp32 sums
# on the bf16 wire (NCCLSHIM_COMPRESS=bf16 ALGO=twophase), int8 and int4;
# then, with a launch costing 1 MB of link time (HOSTNCCL_LAUNCH_US=8000)
# and the shim's launch price pinned at 4M (the price auto plans at before
# it has measured: these runs are too short to measure), no settings against
# plain, 4..64 MiB.
half() {
  local AP="$BUILD/bin/allreduce_perf" v
  rm -f "$TMP"/h-*.out
  for ((r = 0; r < ROUNDS; r++)); do
    run h-plain 0 HOSTNCCL_LINK_GBPS=1 -- "$AP" -d bfloat16 -b 64M -e 64M -n 1 -w 3 -c 0
    for v in bf16 int8 int4; do
      run h-$v 1 HOSTNCCL_LINK_GBPS=1 NCCLSHIM_COMPRESS=$v NCCLSHIM_ALGO=twophase -- "$AP" -d bfloat16 -b 64M -e 64M -n 1 -w 3 -c 0
    done
  done
  echo "# bf16 all-reduce, 64 MiB a rank, 4 ranks, HOSTNCCL_LINK_GBPS=1: out-of-place time (us), ratio to plain bf16, median of $ROUNDS alternated runs"
  printf '%10s %10s %18s %18s %18s\n' size plain bf16_fp32sums int8 int4
  join <(ap_times h-plain bfloat16) <(ap_times h-bf16 bfloat16) | join - <(ap_times h-int8 bfloat16) |
    join - <(ap_times h-int4 bfloat16) |
    awk '{printf "%10d %10.0f %9.0f (%.3f) %9.0f (%.3f) %9.0f (%.3f)\n", $1, $2, $3, $3 / $2, $4, $4 / $2, $5, $5 / $2}'
  rm -f "$TMP"/hl-*.out
  for ((r = 0; r < ROUNDS; r++)); do
    for v in plain:0 none:1; do
      NCCLSHIM_LAUNCH_BYTES=4M HOSTNCCL_LINK_GBPS=1 HOSTNCCL_LAUNCH_US=8000 timeout 900 mpirun -np 4 \
        -x LD_LIBRARY_PATH="$LIBP" $([ "${v#*:}" = 1 ] && echo "-x LD_PRELOAD=$SHIM") \
        "$AP" -d bfloat16 -b 4M -e 64M -f 4 -n 1 -w 1 -c 0 >>"$TMP/hl-${v%:*}.out" 2>&1 ||
        { echo "ratios: half launch $v failed" >&2; tail -5 "$TMP/hl-${v%:*}.out" >&2; exit 1; }
    done
  done
  echo "# bf16 all-reduce, 4 ranks, HOSTNCCL_LINK_GBPS=1, HOSTNCCL_LAUNCH_US=8000 (1 MB at 1 Gb/s), the shim with no settings: time (us), ratio to plain"
  printf '%10s %10s %18s\n' size plain "no settings"
  join <(ap_times hl-plain bfloat16) <(ap_times hl-none bfloat16) | awk '{printf "%10d %10.0f %9.0f (%.3f)\n", $1, $2, $3, $3 / $2}'
}

# 16-bit inputs on nodes (issue 47): 2 emulated nodes x 2 ranks, a 0.5 Gb/s
# NIC per node, 50 Gb/s inside. A bf16 call runs flat two phases even where
# hier is asked (hier's node stages are fp32 steps: docs/collectives.md,
# "16-bit inputs"); what that forgoes is what hier saves on fp32 of the same
# elements and the same int8 wire: bf16 64 MiB plain and int8 (ALGO=hier,
# run flat), fp32 128 MiB int8 flat (ALGO=twophase) and hierarchical
# (ALGO=hier); time / the plain bf16 call.
half_hier() {
  local AP="$BUILD/bin/allreduce_perf" v name pre dt bytes fmt algo
  rm -f "$TMP"/hh-*.out
  for ((r = 0; r < ROUNDS; r++)); do
    for v in plain:0:bfloat16:64M:off:none bf16i8:1:bfloat16:64M:int8:hier f32flat:1:float:128M:int8:twophase \
             f32hier:1:float:128M:int8:hier; do
      IFS=: read -r name pre dt bytes fmt algo <<<"$v"
      local px=()
      [ "$pre" = 1 ] && px=(LD_PRELOAD="$SHIM" NCCLSHIM_COMPRESS=$fmt NCCLSHIM_ALGO=$algo NCCLSHIM_LAUNCH_BYTES=0)
      ctx_nodes 2 2 HOSTNCCL_LINK_GBPS=0.5 HOSTNCCL_INTRA_GBPS=50 HOSTNCCL_NIC_PER=node "${px[@]}" \
        -- "$AP" -d "$dt" -b "$bytes" -e "$bytes" -n 1 -w 2 -c 0
      timeout 900 mpirun "${CTX[@]}" >>"$TMP/hh-$name.out" 2>&1 ||
        { echo "ratios: half-hier $name failed" >&2; tail -5 "$TMP/hh-$name.out" >&2; exit 1; }
    done
  done
  local p b f h
  p=$(ap_times hh-plain bfloat16 | awk '{print $2}'); b=$(ap_times hh-bf16i8 bfloat16 | awk '{print $2}')
  f=$(ap_times hh-f32flat | awk '{print $2}'); h=$(ap_times hh-f32hier | awk '{print $2}')
  echo "# 2 nodes x 2 ranks, a 0.5 Gb/s NIC per node, 50 Gb/s inside; 32 Mi elements a rank; out-of-place time (ms), / plain bf16; median of $ROUNDS alternated runs"
  awk -v p="$p" -v b="$b" -v f="$f" -v h="$h" 'BEGIN {
    printf "%-44s %10.1f %8.3f\n", "plain bf16 (host NCCL ring)", p / 1e3, 1
    printf "%-44s %10.1f %8.3f\n", "bf16, int8, ALGO=hier (runs flat two phases)", b / 1e3, b / p
    printf "%-44s %10.1f %8.3f\n", "fp32, int8, flat two phases", f / 1e3, f / p
    printf "%-44s %10.1f %8.3f\n", "fp32, int8, hierarchical", h / 1e3, h / p
    printf "# what flat forgoes on this fabric: hier / flat on the same elements and wire = %.3f\n", h / f }'
}

hier_errors() {
  local P="$BUILD/tests/shim_twophase" out="$TMP/he.out" shape n l w a
  : >"$out"
  for shape in 2x2 2x4 4x2; do
    n=${shape%x*} l=${shape#*x}
    for w in $("$BUILD/bin/ncclshim-envdoc" --names); do
      for a in twophase hier; do
        ctx_nodes "$n" "$l" LD_PRELOAD="$SHIM" NCCLSHIM_ALGO=$a NCCLSHIM_COMPRESS=$w NCCLSHIM_MIN_BYTES=0 NCCLSHIM_BANNER=0 \
          -- "$P" bound 8
        timeout 900 mpirun "${CTX[@]}" 2>&1 | grep '^maxrel' | sed "s/^/$shape /" >>"$out"
      done
    done
  done
  echo "# max |error| / sum |x| (bound), random inputs over 2^-30..2^30 (fp16: 2^-12..2^12), 8*4096*n elements, emulated nodes"
  awk '{k = $1 " " $3; v[k, $4] = sprintf("%.3g (%.3g)", $6, $7); keys[k] = 1}
       END {printf "%-12s %24s %24s\n", "shape format", "flat two-phase", "hier";
            for (k in keys) printf "%-12s %24s %24s\n", k, v[k, "twophase"], v[k, "hier"]}' "$out" | sort
}

# The cost model against the emulator: per case the model's prediction (its
# own rates file: build/model-rates.txt from `bench/ncclshim-model --calibrate`,
# else bench/model/rates-default.txt) over the measured median.
model() {
  local AP="$BUILD/bin/allreduce_perf" MODEL="$ROOT/bench/ncclshim-model" shape n l per v name pre fmt algo mib
  local shapes=${MODEL_SHAPES:-"1x4:node 2x2:node 2x2:rank 2x4:node 2x4:rank 4x2:node 4x2:rank"}
  local vars="plain:0:off:none ring16:1:fp16:ring flat16:1:fp16:twophase hier16:1:fp16:hier hier8:1:int8:hier"
  local out="$TMP/model.tsv"
  : >"$out"
  echo "# model: predicted (bench/ncclshim-model, host fabric) / measured (allreduce_perf out of place, median of ${MODEL_ROUNDS:-1})"
  echo "# emulated nodes, NIC 0.5 Gb/s per node or rank, 50 Gb/s inside; not GPU numbers"
  printf '%-10s %5s %-8s %12s %12s %8s %-10s\n' shape MiB variant "pred ms" "meas ms" pred/meas "bound"
  for shape in $shapes; do
    n=${shape%%x*} l=${shape#*x} l=${l%%:*} per=${shape#*:}
    rm -f "$TMP"/m-*.out
    for ((r = 0; r < ${MODEL_ROUNDS:-1}; r++)); do
      for v in $vars; do
        IFS=: read -r name pre fmt algo <<<"$v"
        local px=()
        [ "$pre" = 1 ] && px=(LD_PRELOAD="$SHIM" NCCLSHIM_COMPRESS=$fmt NCCLSHIM_ALGO=$algo NCCLSHIM_BANNER=0)
        ctx_nodes "$n" "$l" HOSTNCCL_LINK_GBPS=0.5 HOSTNCCL_INTRA_GBPS=50 HOSTNCCL_NIC_PER=$per "${px[@]}" \
          -- "$AP" -b 4M -e 64M -f 4 -n 2 -w 3 -c 0
        timeout 900 mpirun "${CTX[@]}" >>"$TMP/m-$name.out" 2>&1 || { echo "ratios: model $shape $name failed" >&2; tail -5 "$TMP/m-$name.out" >&2; exit 1; }
      done
    done
    for v in $vars; do
      IFS=: read -r name pre fmt algo <<<"$v"
      ap_times "m-$name" | while read -r size us; do
        local js pred bound
        js=$("$MODEL" --fabric host --nodes "$n" --ranks-per-node "$l" --nic-gbps 0.5 --nic-per "$per" --intra-gbps 50 \
          --bytes "$size" --algo "$algo" --compress "$fmt" --json)
        pred=$(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(d["time_s"] * 1e3, d["bound"], d["plan"])' "$js")
        read -r pred bound plan <<<"$pred"
        printf '%-10s %5d %-8s %12.1f %12.1f %8.3f %-10s\n' "$n""x$l:$per" $((size >> 20)) "$name" "$pred" "$(awk -v u="$us" 'BEGIN {print u / 1e3}')" \
          "$(awk -v p="$pred" -v u="$us" 'BEGIN {print p / (u / 1e3)}')" "$bound/$plan"
        echo "$shape $size $name $pred $us" >>"$out"
      done
    done
  done
  awk '{r = $4 / ($5 / 1e3); e = r > 1 ? r - 1 : 1 - r; s += e; if (e > m) m = e; if (e <= 0.2) k++; c++}
       END {if (c) printf "# %d cases: %d within 20 %%, mean |error| %.1f %%, worst %.1f %%\n", c, k, 100 * s / c, 100 * m}' "$out"
}

case "$WHAT" in
  compress) compress ;;
  fusion) fusion ;;
  torch) torch_ddp ;;
  replica) replica ;;
  twophase) twophase ;;
  errors) errors ;;
  link) link ;;
  fabric) fabric ;;
  hier) hier ;;
  hier-errors) hier_errors ;;
  launch) launch ;;
  learn) learn ;;
  half) half ;;
  half-hier) half_hier ;;
  model) model ;;
  all) compress; fusion; torch_ddp; twophase; errors; link; fabric; hier; hier_errors; launch ;;
  *) echo "usage: bench/ratios.sh [compress|fusion|torch|twophase|errors|link|fabric|hier|hier-errors|model|launch|learn|half|half-hier|all]" >&2; exit 2 ;;
esac
