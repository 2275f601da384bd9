# 48-onethread.sh — one thread drives several ranks (tests/shim/shim_onethread.c;
# issue 23 defect 1, issue 37): groups holding calls on every communicator the
# thread drives, the program's first call inside the first group, on device
# buffers of the CUDA driver test double and on host buffers, with
# ncclCommInitAll (one process, one node) and on 2 emulated nodes of 2 ranks
# per process (mpirun, one UTS namespace per node, the socket transport).
# Each layout first passes without the shim (NCCLSHIM_DISABLE=1), then under
# ring with fusion, two-phase int8, fp16s in pieces with error feedback,
# accumulation agreements (ACCUM_STEPS=2) and, on nodes, hier and auto.
# Before issue 37's fix every host-buffer run with the shim timed out at the
# first group end (both communicators' after-group work ran on the caller's
# thread, the first waiting for a peer the thread had not reached). The
# legacy (0) and per-thread (0x2) stream handles name a stream relative to
# the calling thread and its current context: each layout runs with them too
# (red team, defect 1: before the fix both hung at the first group end, even
# with compression off, and on device memory the fused casts ran on the last
# device made current). ~70 s.
. "$(dirname "$0")/../lib.sh"
shim_env_clean
P="$TBIN/shim_onethread"

# one MEM NRANKS STREAM settings...: ncclCommInitAll in this process
one() {
  local mem=$1 n=$2 st=$3; shift 3
  local a=(--stream "$st" "$n"); [ "$mem" = host ] && a=(--host "${a[@]}")
  with "$@" CUDADRV_DEVICES=$n LD_LIBRARY_PATH="$HOSTNCCL_DIR" LD_PRELOAD="$SHIM${SAN_PRELOAD:+:$SAN_PRELOAD}" \
    timeout "${TEST_TIMEOUT:-60}" "$P" "${a[@]}"
}
# nodes MEM STREAM settings...: 2 emulated nodes, one process of 2 ranks each
nodes() {
  local mem=$1 st=$2; shift 2
  local a=(--stream "$st" 2) xs=(-x HOSTNCCL_TRANSPORT=socket -x CUDADRV_DEVICES=2); [ "$mem" = host ] && a=(--host "${a[@]}")
  for kv in "$@"; do xs+=(-x "$kv"); done
  mpirun_nodes --shim 2 1 "${xs[@]}" -- "$P" "${a[@]}"
}
# logged FILE cmd...: cmd with its output in FILE (read by the next check_grep)
logged() { local f=$1; shift; "$@" >"$f" 2>&1; }

settings=(
  "NCCLSHIM_COMPRESS=fp16 NCCLSHIM_ALGO=ring"
  "NCCLSHIM_COMPRESS=int8 NCCLSHIM_ALGO=twophase"
  "NCCLSHIM_COMPRESS=fp16s NCCLSHIM_ALGO=twophase NCCLSHIM_ERROR_FEEDBACK=1 NCCLSHIM_TWOPHASE_PIECE_BYTES=65536"
  "NCCLSHIM_COMPRESS=fp16 NCCLSHIM_ACCUM_STEPS=2"
)
for mem in host device; do
  n=2; [ $mem = device ] && n=4
  check "$mem buffers, one thread, $n ranks (ncclCommInitAll), without the shim" one $mem $n created NCCLSHIM_DISABLE=1 NCCLSHIM_LOG=off
  for s in "${settings[@]}"; do
    # shellcheck disable=SC2086
    check "$mem buffers, one thread, $n ranks (ncclCommInitAll), $s: no hang, exact" one $mem $n created $s NCCLSHIM_LOG=off
  done
  check "$mem buffers, 2 nodes x 2 ranks per thread, without the shim" nodes $mem created NCCLSHIM_DISABLE=1 NCCLSHIM_LOG=off
  for s in "${settings[@]}" "NCCLSHIM_COMPRESS=fp16 NCCLSHIM_ALGO=hier" \
           "NCCLSHIM_COMPRESS=int8 NCCLSHIM_HIER_MIN_BYTES=0 NCCLSHIM_ERROR_FEEDBACK=1"; do
    out="$TMPD/nodes.$mem.$RANDOM"
    # shellcheck disable=SC2086
    check "$mem buffers, 2 nodes x 2 ranks per thread, $s: no hang, exact" logged "$out" nodes $mem created $s NCCLSHIM_LOG=summary
    case "$s" in
      *hier*|*HIER*) check_grep "$mem buffers, 2 nodes x 2 ranks per thread, $s: hierarchical" \
                       "on communicator .*: 2 nodes x 2 ranks, hierarchical" "$out" ;;
      *) check_grep "$mem buffers, 2 nodes x 2 ranks per thread, $s: calls compressed" \
           "^ncclshim.*  compressed +[1-9]" "$out" ;;
    esac
  done
  # The legacy and per-thread handles (host memory names no stream: only 0x2,
  # which the host backend must ignore), with compression off too.
  streams="legacy ptd"; [ $mem = host ] && streams=ptd
  for st in $streams; do
    check "$mem buffers, one thread, $n ranks, stream handle $st, without the shim" one $mem $n $st NCCLSHIM_DISABLE=1 NCCLSHIM_LOG=off
    for s in "NCCLSHIM_COMPRESS=off" "${settings[@]}"; do
      # shellcheck disable=SC2086
      check "$mem buffers, one thread, $n ranks, stream handle $st, $s: no hang, exact" one $mem $n $st $s NCCLSHIM_LOG=off
    done
    for s in "NCCLSHIM_COMPRESS=int8 NCCLSHIM_HIER_MIN_BYTES=0 NCCLSHIM_ERROR_FEEDBACK=1" "NCCLSHIM_COMPRESS=fp16 NCCLSHIM_ALGO=ring"; do
      # shellcheck disable=SC2086
      check "$mem buffers, 2 nodes x 2 ranks per thread, stream handle $st, $s: no hang, exact" nodes $mem $st $s NCCLSHIM_LOG=off
    done
  done
done
