#!/usr/bin/env bash
# bench/ratios.sh [compress|fusion|ddp|all] — the side-by-side comparisons
# behind the goals in bench/README.md, over the host NCCL (emulated links; not
# GPU numbers). Each variant runs in the same invocation, alternating, and the
# script prints ratios of medians:
#   compress  allreduce_perf 4 ranks, 4..64 MiB, HOSTNCCL_LINK_GBPS=1 and 10:
#             shim fp16 time / no-shim time per size (goal at 1 Gb/s: <= 0.55)
#   fusion    allreduce_perf -m 64, 16 KiB fp32, 4 ranks, HOSTNCCL_LINK_LATENCY_US=50:
#             fused (shim, default) / unfused (no shim; and shim FUSE_BYTES=0) (goal <= 0.1)
#   ddp       ddp_step 4 ranks, HOSTNCCL_LINK_GBPS=1 and 10: communication time per
#             optimizer step, shim fp16 + K=4 / plain DDP (goal at 1 Gb/s: <= 0.15)
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
  env "${envs[@]}" timeout 900 mpirun -np 4 -x LD_LIBRARY_PATH="$LIBP" "${px[@]}" "$@" >>"$TMP/$name.out" 2>&1 \
    || { echo "ratios: $name failed:" >&2; tail -5 "$TMP/$name.out" >&2; exit 1; }
}

# Median over rounds of allreduce_perf out-of-place time per size: "size time".
ap_times() {
  awk '/^ +[0-9]+ +[0-9]+ +float/ {print $1, $6}' "$TMP/$1.out" | sort -n -k1,1 -k2,2g |
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

ddp() {
  for g in ${GBPS_LIST:-1 10}; do
    rm -f "$TMP"/d-*.out
    for ((r = 0; r < ROUNDS; r++)); do
      run d-plain 0 HOSTNCCL_LINK_GBPS=$g -- "$BUILD/bin/ddp_step" --params 2M --accum 4 --warmup 1 --steps 2 --quiet
      run d-fp16 1 HOSTNCCL_LINK_GBPS=$g NCCLSHIM_COMPRESS=fp16 -- "$BUILD/bin/ddp_step" --params 2M --accum 4 --warmup 1 --steps 2 --quiet
      run d-k4 1 HOSTNCCL_LINK_GBPS=$g NCCLSHIM_COMPRESS=fp16 NCCLSHIM_ACCUM_STEPS=4 -- "$BUILD/bin/ddp_step" --params 2M --accum 4 --warmup 1 --steps 2 --quiet
    done
    echo "# ddp_step, 4 ranks, 2M parameters, K=4, HOSTNCCL_LINK_GBPS=$g: per optimizer step, median of $ROUNDS alternated runs"
    printf '%-18s %7s %11s %13s %10s %8s\n' variant calls real_calls wire_bytes comm_ms ratio
    local base=""
    for v in d-plain:plain_DDP d-fp16:shim_fp16 d-k4:shim_fp16+K=4; do
      local f=${v%%:*} label=${v#*:}
      grep -h '^summary:' "$TMP/$f.out" | tr ' ' '\n' | grep -E '^(calls|real_calls|wire_bytes|comm_ms)=' |
        awk -F= -v label="$label" -v base="$base" '
          {vals[$1] = vals[$1] " " $2}
          END {
            for (k in vals) { n = split(vals[k], v, " "); asort(v); m[k] = v[int((n + 1) / 2)] }
            if (base == "") base = m["comm_ms"]
            printf "%-18s %7d %11d %13d %10.1f %8.3f\n", label, m["calls"], m["real_calls"], m["wire_bytes"], m["comm_ms"], m["comm_ms"] / base
            print m["comm_ms"] > "/dev/stderr"
          }' 2>"$TMP/base"
      [ -z "$base" ] && base=$(cat "$TMP/base")
    done
  done
}

case "$WHAT" in
  compress) compress ;;
  fusion) fusion ;;
  ddp) ddp ;;
  all) compress; fusion; ddp ;;
  *) echo "usage: bench/ratios.sh [compress|fusion|ddp|all]" >&2; exit 2 ;;
esac
