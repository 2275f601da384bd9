#!/usr/bin/env bash
# 21-fabric.sh — the host NCCL's emulated multi-node fabric (tests/hostnccl/
# fabric.c): ranks grouped into nodes by host name, each emulated node's ranks
# in a UTS namespace of their own (mpirun_nodes), a NIC per rank or per node
# (HOSTNCCL_NIC_PER) at HOSTNCCL_LINK_GBPS and links inside a node at
# HOSTNCCL_INTRA_GBPS. Checked: each rank finds its node by its host name;
# a ring all-reduce and an all-to-all take at least what their bytes cost on
# the links they cross, by a model the test derives on its own from the host
# names (test_hostnccl_api fabric; how close they come is a benchmark's
# business: bench/ratios.sh fabric, numbers in bench/README.md); the socket
# transport (torchrun's) likewise; a bad HOSTNCCL_NIC_PER is refused by name.
# Then the shim's node map, agreed in its settings check: 2x2 emulated nodes,
# and NCCL_HOSTID (as in NCCL) naming nodes that are not node-contiguous or
# hold different numbers of ranks; torchrun's multi-node mode (one agent per
# emulated node) with real PyTorch DDP, without the shim and with hier fp16
# and int8 + error feedback, and FSDP2 without it and through the
# hierarchical reduce-scatter. About 70 s.
source "$(dirname "$0")/../lib.sh"
API="$TBIN/test_hostnccl_api"
FAB=(-x HOSTNCCL_LINK_GBPS=0.5 -x HOSTNCCL_INTRA_GBPS=50)

# nodes NAME N L [-x ...]: the fabric case on N nodes of L ranks, output in $TMPD/NAME.log
nodes() {
  local name=$1 n=$2 l=$3
  shift 3
  mpirun_nodes "$n" "$l" "$@" -- "$API" fabric 4 >"$TMPD/$name.log" 2>&1 \
    || { not_ok "fabric $name exited $?"; tail -n 15 "$TMPD/$name.log" | sed 's/^/#   /'; return; }
  sed -n 's/^\(ok\|not ok\) - /\1 - '"$name"': /p; s/^# fabric: .*measured.*/&/p' "$TMPD/$name.log" | sed 's/^# /#   /'
}

nodes 2x4-nic-node 2 4 "${FAB[@]}" -x HOSTNCCL_NIC_PER=node -x HOSTNCCL_LOG=1
for k in 0 1; do
  check "2x4: the ranks of emunode$k find their node by host name (index $k of 2, 4 ranks)" \
    test "$(grep -c "on node 'emunode$k' (index $k of 2)" "$TMPD/2x4-nic-node.log")" -eq 4
done
nodes 2x4-nic-rank 2 4 "${FAB[@]}" -x HOSTNCCL_NIC_PER=rank
nodes 4x2-nic-node 4 2 "${FAB[@]}" -x HOSTNCCL_NIC_PER=node
nodes 2x2-socket 2 2 "${FAB[@]}" -x HOSTNCCL_NIC_PER=node -x HOSTNCCL_TRANSPORT=socket -x HOSTNCCL_LOG=1
check "sockets: the ranks find 2 nodes" test "$(grep -c "index [01] of 2)" "$TMPD/2x2-socket.log")" -eq 4

# One host, no namespace: one node, today's flat link (20-hostnccl's link case).
mpirun_host 3 -x HOSTNCCL_LINK_GBPS=1 -x HOSTNCCL_LOG=1 "$API" fabric 1 >"$TMPD/flat.log" 2>&1
check "no namespaces: the 3 ranks share one node (the host's name)" \
  test "$(grep -c "(index 0 of 1)" "$TMPD/flat.log")" -eq 3
check_grep "no namespaces: the fabric case holds" "^ok - np=3 fabric: 1 nodes" "$TMPD/flat.log"

mpirun_host 2 -x HOSTNCCL_NIC_PER=switch "$API" basic >"$TMPD/badnic.log" 2>&1
check_grep "HOSTNCCL_NIC_PER=switch is refused by name" "HOSTNCCL_NIC_PER='switch' is not rank or node" "$TMPD/badnic.log"

# ---- the shim's node map, agreed at its settings check (shim/topo/) ----
export NCCLSHIM_COMPRESS=fp16 NCCLSHIM_ALGO=twophase NCCLSHIM_MIN_BYTES=0 NCCLSHIM_LOG=summary
mpirun_nodes --shim 2 2 -x HOSTNCCL_LINK_GBPS=10 -- "$TBIN/shim_twophase" exact >"$TMPD/shim2x2.log" 2>&1
check "shim on 2x2 emulated nodes: a two-phase all-reduce exact on every rank (exit $?)" test $? -eq 0
check_grep "shim on 2x2: rank 0 says the communicator spans 2 nodes x 2 ranks" \
  "active on communicator .* \(4 ranks, 2 nodes x 2 ranks\)" "$TMPD/shim2x2.log"
check_grep "shim on 2x2: its summary says where rank 0 is" "# nodes: 2 nodes x 2 ranks \(this rank 0 on its node\)" \
  "$TMPD/shim2x2.log"
# NCCL_HOSTID names the node, as in NCCL (no namespaces here): one context per rank.
hostid_run() { # NAME ID... : one rank per id
  local name=$1 ctx=() k=0 id
  shift
  for id in "$@"; do
    [ $k -gt 0 ] && ctx+=(:)
    ctx+=(-np 1 -x LD_LIBRARY_PATH="$HOSTNCCL_DIR" -x LD_PRELOAD="$SHIM" -x NCCL_HOSTID="$id" "$TBIN/shim_twophase" exact)
    k=$((k + 1))
  done
  mpirun_checked "${ctx[@]}" >"$TMPD/$name.log" 2>&1
}
check "NCCL_HOSTID a b a b: two-phase exact on every rank" hostid_run strided a b a b
check_grep "NCCL_HOSTID a b a b: 2 nodes x 2 ranks, not node-contiguous" \
  "\(4 ranks, 2 nodes x 2 ranks \(not node-contiguous\)\)" "$TMPD/strided.log"
check "NCCL_HOSTID a a b: two-phase exact on every rank" hostid_run uneven a a b
check_grep "NCCL_HOSTID a a b: 2 nodes of 1..2 ranks (uneven)" "\(3 ranks, 2 nodes of 1..2 ranks \(uneven\)\)" "$TMPD/uneven.log"

# ---- torchrun's multi-node mode: one agent per emulated node, each in its own
# UTS namespace, rendezvous on 127.0.0.1; real PyTorch DDP over the host NCCL
# (sockets) on 2 nodes x 2 ranks: no shim (the reference), the shim's
# hierarchical all-reduce in fp16, and in int8 with error feedback; FSDP2
# (reduce-scatters) without the shim and through the hierarchical
# reduce-scatter in fp16.
# torch_nodes NAME [VAR=value ...]: one such job (the shim preloaded when a
# variable is given; TCASE: train.py's case, default "a --steps 4"), its
# record in $TMPD/NAME.json, rank 0's output in NAME.log.
torch_nodes() {
  local name=$1 k pre=()
  shift
  [ $# -gt 0 ] && pre=(LD_PRELOAD="$SHIM")
  local port=$((29500 + RANDOM % 400))
  for k in 0 1; do
    with NCCLSHIM_LOG=summary HOSTNCCL_CHECK=0 HOSTNCCL_LINK_GBPS=1 HOSTNCCL_NIC_PER=node "${pre[@]}" "$@" \
      HOSTNCCL_LIB="$HOSTNCCL_DIR/libnccl.so.2" OMP_NUM_THREADS=1 \
      timeout "${TEST_TIMEOUT:-180}" unshare --uts sh -c 'hostname "$0" && exec "$@"' "emunode$k" \
      "$TORCH_VENV/bin/torchrun" --nnodes 2 --node-rank $k --nproc-per-node 2 --master-addr 127.0.0.1 \
      --master-port $port "$ROOT/tests/torch/train.py" --out "$TMPD/$name.json" --case "${TCASE:-a --steps 4}" \
      >"$TMPD/$name.$k.log" 2>&1 &
  done
  wait
  cp "$TMPD/$name.0.log" "$TMPD/$name.log"
}
unset NCCLSHIM_COMPRESS NCCLSHIM_ALGO NCCLSHIM_MIN_BYTES
torch_nodes tplain
torch_nodes thier16 NCCLSHIM_COMPRESS=fp16 NCCLSHIM_ALGO=hier NCCLSHIM_MIN_BYTES=4096
torch_nodes thier8 NCCLSHIM_COMPRESS=int8 NCCLSHIM_ALGO=hier NCCLSHIM_MIN_BYTES=4096 NCCLSHIM_ERROR_FEEDBACK=1
TCASE="a --steps 4 --fsdp" torch_nodes fplain
TCASE="a --steps 4 --fsdp" torch_nodes fhier16 NCCLSHIM_COMPRESS=fp16 NCCLSHIM_ALGO=hier NCCLSHIM_MIN_BYTES=4096
for t in tplain thier16 thier8 fplain fhier16; do
  check "torchrun on 2 emulated nodes ($t): trains 4 steps on 4 ranks (DDP; f*: FSDP2), replicas equal" \
    python3 -c 'import json,sys; a=json.load(open(sys.argv[1]))["a"]; sys.exit(not (a["replicas_equal"] and a["world"] == 4 and len(a["loss"]) == 4))' "$TMPD/$t.json"
done
for t in thier16 thier8 fhier16; do
  ref=tplain; [ $t = fhier16 ] && ref=fplain
  check_grep "$t: the shim finds 2 nodes x 2 ranks and runs hier" "ALGO=hier on communicator .*: 2 nodes x 2 ranks" "$TMPD/$t.log"
  d=$(python3 -c 'import json,sys; a=json.load(open(sys.argv[1]))["a"]["loss"]; b=json.load(open(sys.argv[2]))["a"]["loss"]
print("%.2e" % max(abs(x - y) / abs(y) for x, y in zip(a, b)))' "$TMPD/$t.json" "$TMPD/$ref.json" 2>/dev/null)
  check "$t: every step's loss within 1 % of the fp32 reference (max relative difference ${d:-none})" \
    python3 -c 'import sys; sys.exit(not (sys.argv[1] != "" and float(sys.argv[1]) <= 0.01))' "${d:-}"
done
# FSDP2's reduce-scatters went hierarchical: stage b's encoded input is N
# fp16 shards of count, a quarter of the logical 4 * count * n bytes at N = 2,
# n = 4 (flat two-phase: half).
lw=$(awk '$2 == "compressed" {print $5, $6; exit}' "$TMPD/fhier16.log")
check "fhier16: FSDP2's reduce-scatters hierarchical (summary logical, wire bytes: ${lw:-none}; wire = logical / 4)" \
  awk -v l="${lw% *}" -v w="${lw#* }" 'BEGIN { exit !(l > 0 && w * 4 == l) }'
