# 49-launches.sh — NCCL launches per compressed call (issue 33), counted by
# the host NCCL (hostnccl_get_launches over every communicator of the
# process: a collective outside a group, or a group end, is one launch) and
# compared with what the planner says (shim/plan: plan.launches) and what the
# cost model predicts (bench/ncclshim-model --json "launches", the host
# fabric: host memory, as here). Host buffers (the host rule), at
# NCCLSHIM_LAUNCH_BYTES=4M (the price auto plans at until it measured one)
# unless a case sets it: a communicator's first calls at auto are its
# plain samples (tests/t/22-learn.sh). At 16ee431 the two-phase
# int8 call of 64 MiB on 4 ranks issued 32 launches (16 pieces of 1 MiB, a
# group per piece and phase): the first case fails there. Every result is
# also checked exact by the program. ~40 s.
. "$(dirname "$0")/../lib.sh"
for v in $(env | grep -o '^NCCLSHIM_[A-Z_]*'); do unset "$v"; done
P="$TBIN/shim_launches"
M="$BIN/ncclshim_model"
export NCCLSHIM_LOG=off NCCLSHIM_BANNER=0

# launches LAYOUT COUNT WANT WHY SETTINGS...: LAYOUT 1x4 (one node) or 2x2
# (two emulated nodes, NCCL_HOSTID); COUNT fp32 elements per rank.
launches() {
  local layout=$1 count=$2 want=$3 why=$4; shift 4
  local xs=() kv algo=auto comp=fp16 sets=()
  case " $* " in *" NCCLSHIM_LAUNCH_BYTES="*) ;; *) set -- "$@" NCCLSHIM_LAUNCH_BYTES=4M ;; esac
  for kv in "$@"; do
    xs+=(-x "$kv")
    case $kv in
      NCCLSHIM_ALGO=*) algo=${kv#*=} ;;
      NCCLSHIM_COMPRESS=*) comp=${kv#*=} ;;
      *) sets+=(--set "$kv") ;;
    esac
  done
  local out="$TMPD/l.$RANDOM" X=(-x LD_PRELOAD="$SHIM${SAN_PRELOAD:+:$SAN_PRELOAD}" -x LD_LIBRARY_PATH="$HOSTNCCL_DIR")
  if [ "$layout" = 1x4 ]; then
    mpirun_checked -np 4 "${X[@]}" "${xs[@]}" "$P" "$count" >"$out" 2>&1
  else
    mpirun_checked -np 2 "${X[@]}" "${xs[@]}" -x NCCL_HOSTID=na "$P" "$count" : \
                   -np 2 "${X[@]}" "${xs[@]}" -x NCCL_HOSTID=nb "$P" "$count" >"$out" 2>&1
  fi
  local rc=$? got model
  got=$(awk '/^launches/ {print $3}' "$out")
  model=$("$M" --nodes "${layout%x*}" --ranks-per-node "${layout#*x}" --bytes $((4 * count)) --algo "$algo" \
            --compress "$comp" "${sets[@]}" --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["launches"])')
  local what="$layout, $count floats, $*: $want launches ($why)"
  if [ $rc -eq 0 ] && [ "$got" = "$want" ] && [ "$model" = "$want" ]; then ok "$what"
  else not_ok "$what: the host NCCL counted ${got:-?} (exit $rc), the model says ${model:-?}"; tail -n 5 "$out" | sed 's/^/#   /'; fi
}

M64=16777216
launches 1x4 $M64 2 "one piece, two groups of sends and receives; 32 at 16ee431" NCCLSHIM_COMPRESS=int8 NCCLSHIM_ALGO=twophase
launches 1x4 $M64 2 "the second phase as one all-gather" NCCLSHIM_COMPRESS=int8 NCCLSHIM_ALGO=twophase NCCLSHIM_TWOPHASE_GATHER=allgather
launches 1x4 $M64 6 "3 pieces: the codec's 4M/k + 2 x 256K k is least at k = 3" NCCLSHIM_COMPRESS=int8 NCCLSHIM_ALGO=twophase NCCLSHIM_LAUNCH_BYTES=256K
launches 1x4 $M64 32 "free launches: the old 1 MiB pieces" NCCLSHIM_COMPRESS=int8 NCCLSHIM_ALGO=twophase NCCLSHIM_LAUNCH_BYTES=0
launches 1x4 $M64 2 "no settings: two-phase fp16 in one piece" NCCLSHIM_COMPRESS=fp16
launches 1x4 65536 1 "no settings, 256 KiB: no plan gains 10 %, the call untouched" NCCLSHIM_COMPRESS=fp16
launches 1x4 $M64 1 "the ring in one chunk: 4M + 4M against 2M + 8M" NCCLSHIM_ALGO=ring
launches 1x4 $M64 2 "the ring in two chunks of 32 MiB at 1 MiB per launch" NCCLSHIM_ALGO=ring NCCLSHIM_LAUNCH_BYTES=1M
launches 2x2 $M64 4 "hier: reduce-scatter, two-phase in one piece, all-gather" NCCLSHIM_COMPRESS=int8 NCCLSHIM_ALGO=hier
launches 2x2 $((M64 + 3)) 5 "hier with a 3-element tail: one more all-reduce" NCCLSHIM_COMPRESS=int8 NCCLSHIM_ALGO=hier
