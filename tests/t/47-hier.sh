#!/usr/bin/env bash
# 47-hier.sh — NCCLSHIM_ALGO=hier (shim/exec/hier.c) on emulated nodes (one UTS
# namespace per node, mpirun_nodes): fp32 reduce-scatter inside each node,
# two-phase in the wire format between nodes, fp32 all-gather. Checked with
# tests/shim/shim_twophase (which finds the nodes by host name itself):
# exact inputs exact and identical on every rank for every format and node
# shape (2x2, 2x4, 4x2, 3x2; the count % L tail through one fp32 all-reduce),
# random inputs within the two-phase bound, pieces and error feedback giving
# the same bits at every piece size, values near FLT_MAX, a nonblocking
# communicator, grouped calls, a rank without staging (NaN in the elements its
# stage carried, on every rank, never a hang), a real call failing at each
# stage (the same result on every rank, no hang), hier being auto on uneven
# nodes and on one node, device buffers on the CUDA driver double, auto on
# nodes, and the staging limit refusing before any stage. About 30 s.
source "$(dirname "$0")/../lib.sh"
P="$TBIN/shim_twophase"
export NCCLSHIM_LOG=off NCCLSHIM_BANNER=0 NCCLSHIM_ALGO=hier NCCLSHIM_MIN_BYTES=0
unset NCCLSHIM_COMPRESS
LINK=(-x HOSTNCCL_LINK_GBPS=20 -x HOSTNCCL_NIC_PER=node)

# nodes N L FORMAT CMD [VAR=value ...]: shim_twophase CMD on N nodes of L ranks.
nodes() {
  local n=$1 l=$2 w=$3 cmd=$4 xs=()
  shift 4
  for kv in "$@"; do xs+=(-x "$kv"); done
  mpirun_nodes --shim "$n" "$l" "${LINK[@]}" -x NCCLSHIM_COMPRESS="$w" "${xs[@]}" -- "$P" $cmd
}

# 1. Exact inputs (sizes 1..300001, in and out of place, Sum and Avg).
for shape in 2x2:fp16 2x2:bf16 2x2:int8 2x2:fp8 2x2:fp16s 2x2:int4 2x4:fp16 2x4:int8 4x2:bf16 3x2:fp16; do
  nl=${shape%:*} w=${shape#*:}
  check "hier $w on ${nl/x/ nodes x } ranks: exact inputs exact and identical on every rank, only the fp32 tails reach NCCL's all-reduce" \
    nodes "${nl%x*}" "${nl#*x}" "$w" exact
done
check "hier, the check above can fail: with NCCLSHIM_ALGO=ring the ring's all-reduces reach NCCL" \
  check_fails nodes 2 2 fp16 exact NCCLSHIM_ALGO=ring

# 2. Random inputs: within the two-phase bound, identical on every rank.
for w in fp16 int8; do
  for nl in 2x2 2x4; do
    nodes "${nl%x*}" "${nl#*x}" $w "bound 2" >"$TMPD/b" 2>&1 && grep -q "^maxrel $w hier " "$TMPD/b" \
      && ok "hier $w, $nl: random inputs within the two-phase bound ($(grep maxrel "$TMPD/b" | cut -d' ' -f5,6))" \
      || { not_ok "hier $w, $nl: random inputs"; sed 's/^/#   /' "$TMPD/b" | tail -5; }
  done
done

# 3. Pieces and error feedback: the same bits at every piece size (three rounds of
# all-reduces, which run hier, and reduce-scatters, which run flat two-phase).
for ef in 0 1; do
  for pb in 0 16K 4096; do
    nodes 2 2 int8 digest NCCLSHIM_ERROR_FEEDBACK=$ef NCCLSHIM_TWOPHASE_PIECE_BYTES=$pb >"$TMPD/dg.$pb" 2>&1 \
      || echo "exit $?" >>"$TMPD/dg.$pb"
    grep '^digest' "$TMPD/dg.$pb" | sort >"$TMPD/dgd.$pb"
  done
  [ "$(wc -l <"$TMPD/dgd.0")" = 4 ] && cmp -s "$TMPD/dgd.0" "$TMPD/dgd.16K" && cmp -s "$TMPD/dgd.0" "$TMPD/dgd.4096" \
    && ok "hier int8, error feedback $ef, 2x2: one piece, 16 KiB and 4 KiB pieces give the same bits" \
    || { not_ok "hier int8, error feedback $ef: results differ between piece sizes"; tail -n 4 "$TMPD"/dg.* | sed 's/^/#   /'; }
done

# 4. Values near FLT_MAX with error feedback and 4 KiB pieces; special values.
for w in bf16 int8; do
  check "hier $w, 2x2, error feedback, 4 KiB pieces: values near FLT_MAX stay finite" \
    nodes 2 2 $w limits NCCLSHIM_ERROR_FEEDBACK=1 NCCLSHIM_TWOPHASE_PIECE_BYTES=4096
done
check "hier fp16, 2x2: Inf, -Inf, NaN propagate as in fp32, identical on every rank" nodes 2 2 fp16 special

# 5. A nonblocking communicator; grouped calls (fused, forwarded and integer members beside them).
check "hier int8, 2x2, nonblocking communicator: exact once the poll says success" nodes 2 2 int8 nonblocking
check "hier int8, 2x4, in a user's nested group (blocking): exact, identical" nodes 2 4 int8 group
check "hier fp16, 2x2, in a user's group on a nonblocking communicator: exact, identical" nodes 2 2 fp16 group-nb

# 6. A rank without staging (rank 1, on node 0): it returns ncclSystemError; the
# elements its stage between nodes carried are NaN on every rank, the others exact.
X=(-x LD_LIBRARY_PATH="$HOSTNCCL_DIR" -x LD_PRELOAD="$SHIM" -x NCCLSHIM_COMPRESS=int8 -x NCCLSHIM_MIN_BYTES=65536 "${LINK[@]}")
U='hostname "$0" && exec "$@"'
check "hier int8, 2x2, staging unusable on one rank (FAULT_STAGE=1): NaN where its stage went, on every rank; no hang; next call exact" \
  mpirun_checked -np 1 "${X[@]}" unshare --uts sh -c "$U" emunode0 "$P" poison : \
    -np 1 "${X[@]}" -x NCCLSHIM_FAULT_STAGE=1 unshare --uts sh -c "$U" emunode0 "$P" poison : \
    -np 2 "${X[@]}" unshare --uts sh -c "$U" emunode1 "$P" poison

# 7. A real call failing (HOSTNCCL_FAIL_CALL=N on every rank) at each stage of
# the all-reduce (1-4: the check, the hier agreement and their confirmations;
# then the reduce-scatter inside the node, the two-phase sends and receives,
# the all-gather, the tail) and in the reduce-scatter after it (its fp32
# reduce-scatters inside the node, its two-phase between nodes): every rank
# prints the same result line, nobody hangs.
for n in 5 6 7 9 10 11 12 13 14; do
  nodes 2 2 int8 fault HOSTNCCL_FAIL_CALL=$n >"$TMPD/fault.$n" 2>&1
  rc=$?
  lines=$(grep '^rc ' "$TMPD/fault.$n" | sort | uniq -c | wc -l)
  [ $rc -eq 0 ] && [ "$(grep -c '^rc ' "$TMPD/fault.$n")" -eq 4 ] && [ "$lines" -eq 1 ] \
    && ok "hier, real call $n fails: '$(grep -m1 '^rc ' "$TMPD/fault.$n")' on all 4 ranks, no hang" \
    || { not_ok "hier, real call $n fails: exit $rc"; tail -n 6 "$TMPD/fault.$n" | sed 's/^/#   /'; }
done

# 8. Where hier does not apply, it is auto (and rank 0 says why): the same bits
# as NCCLSHIM_ALGO=auto, on one node of 4 ranks and on uneven nodes.
for a in auto hier; do
  nodes 1 4 fp16 digest NCCLSHIM_ALGO=$a NCCLSHIM_BANNER=1 >"$TMPD/one.$a" 2>&1
  ctx=()
  for id in a a b; do
    [ ${#ctx[@]} -gt 0 ] && ctx+=(:)
    ctx+=(-np 1 -x LD_LIBRARY_PATH="$HOSTNCCL_DIR" -x LD_PRELOAD="$SHIM" -x NCCLSHIM_COMPRESS=fp16 -x NCCLSHIM_ALGO=$a
      -x NCCLSHIM_BANNER=1 -x NCCL_HOSTID=$id "$P" digest)
  done
  mpirun_checked "${ctx[@]}" >"$TMPD/uneven.$a" 2>&1
done
for w in one uneven; do
  grep '^digest' "$TMPD/$w.auto" | sort >"$TMPD/$w.auto.d"
  grep '^digest' "$TMPD/$w.hier" | sort >"$TMPD/$w.hier.d"
  [ -s "$TMPD/$w.auto.d" ] && cmp -s "$TMPD/$w.auto.d" "$TMPD/$w.hier.d" \
    && ok "hier where it does not apply ($w): the same bits as auto" \
    || { not_ok "hier ($w): differs from auto"; paste "$TMPD/$w.auto.d" "$TMPD/$w.hier.d" | sed 's/^/#   /'; }
done
check_grep "hier on one node: rank 0 says why" "ALGO=hier on communicator .*: the communicator is on one node; auto's choice" "$TMPD/one.hier"
check_grep "hier on uneven nodes: rank 0 says why" "its nodes hold different numbers of its ranks; auto's choice" "$TMPD/uneven.hier"

# 9. The CUDA backend (device buffers of the CUDA driver double, its stream
# audit on): the same bits as on host memory (all-reduces only).
for dev in 0 1; do
  xs=(-x TP_DIGEST_NO_RS=1)
  [ $dev = 1 ] && xs+=(-x SHIMTEST_DEVICE=1 -x SHIMTEST_SYNC_AUDIT=1 -x LD_LIBRARY_PATH="$HOSTNCCL_DIR:$BUILD/lib/cudadrv")
  mpirun_nodes --shim 2 2 -x NCCLSHIM_COMPRESS=int8 "${xs[@]}" -- "$P" digest 2>&1 | grep '^digest' | sort >"$TMPD/dev.$dev"
done
[ "$(wc -l <"$TMPD/dev.0")" = 4 ] && cmp -s "$TMPD/dev.0" "$TMPD/dev.1" \
  && ok "hier int8, 2x2, device buffers on the CUDA driver double: the same bits as host memory" \
  || { not_ok "hier on the CUDA backend: digests differ from host memory"; paste "$TMPD/dev.0" "$TMPD/dev.1" | sed 's/^/#   /'; }

# 10. auto from the node map (issue 21 part 4): hierarchical on N >= 2 nodes of
# L >= 2 ranks for calls from NCCLSHIM_HIER_MIN_BYTES (the digest's calls are
# 0.8 MiB: with the threshold at 0, the same bits as hier and not those of
# flat two-phase; at its default of 4M, flat two-phase's bits), flat two-phase
# when every rank is alone on its node (the same bits as twophase, no split).
for a in auto hier twophase; do
  nodes 2 2 int8 digest NCCLSHIM_ALGO=$a NCCLSHIM_BANNER=1 NCCLSHIM_HIER_MIN_BYTES=0 >"$TMPD/a22.$a" 2>&1
  grep '^digest' "$TMPD/a22.$a" | sort >"$TMPD/a22.$a.d"
  nodes 4 1 int8 digest NCCLSHIM_ALGO=$a NCCLSHIM_BANNER=1 >"$TMPD/a41.$a" 2>&1
  grep '^digest' "$TMPD/a41.$a" | sort >"$TMPD/a41.$a.d"
done
nodes 2 2 int8 digest NCCLSHIM_ALGO=auto NCCLSHIM_BANNER=1 >"$TMPD/a22.small" 2>&1
grep '^digest' "$TMPD/a22.small" | sort >"$TMPD/a22.small.d"
[ "$(wc -l <"$TMPD/a22.auto.d")" = 4 ] && cmp -s "$TMPD/a22.auto.d" "$TMPD/a22.hier.d" \
  && ! cmp -s "$TMPD/a22.auto.d" "$TMPD/a22.twophase.d" \
  && ok "auto int8 on 2 nodes x 2 ranks, HIER_MIN_BYTES=0: hierarchical (the bits of hier, not of flat two-phase)" \
  || { not_ok "auto int8 on 2x2 is not hier"; paste "$TMPD/a22.auto.d" "$TMPD/a22.hier.d" "$TMPD/a22.twophase.d" | sed 's/^/#   /'; }
[ "$(wc -l <"$TMPD/a22.small.d")" = 4 ] && cmp -s "$TMPD/a22.small.d" "$TMPD/a22.twophase.d" \
  && ok "auto int8 on 2x2, calls of 0.8 MiB below the default HIER_MIN_BYTES=4M: flat two-phase (its bits, not hier's)" \
  || { not_ok "auto int8 on 2x2 below HIER_MIN_BYTES is not flat two-phase"; paste "$TMPD/a22.small.d" "$TMPD/a22.twophase.d" | sed 's/^/#   /'; }
check_grep "auto on 2x2: rank 0 says it runs hierarchically" "ALGO=auto on communicator .*: 2 nodes x 2 ranks, hierarchical" "$TMPD/a22.auto"
[ "$(wc -l <"$TMPD/a41.auto.d")" = 4 ] && cmp -s "$TMPD/a41.auto.d" "$TMPD/a41.twophase.d" \
  && ! grep -q "hierarchical" "$TMPD/a41.auto" \
  && ok "auto int8 on 4 nodes of 1 rank: flat two-phase (its bits), no sub-communicators" \
  || { not_ok "auto int8 on 4x1 is not flat two-phase"; paste "$TMPD/a41.auto.d" "$TMPD/a41.twophase.d" | sed 's/^/#   /'; }

# 11. Stage b's staging beyond NCCLSHIM_MAX_STAGING_BYTES (fuzzer seed 43545):
# refused on every rank before any stage is issued, recvbuff intact, no hang.
for a in hier auto; do
  check "$a int8, 2x2, a call whose stage between nodes needs more than MAX_STAGING_BYTES=64K: ncclInvalidUsage on every rank, buffer intact" \
    mpirun_nodes --shim 2 2 -x NCCLSHIM_COMPRESS=int8 -x NCCLSHIM_ALGO=$a -x NCCLSHIM_MAX_STAGING_BYTES=64K -x NCCLSHIM_HIER_MIN_BYTES=0 -- \
      "$TBIN/shimfault_args" big 100000 f32 limit
done

# 12. Reduce-scatter (FSDP2, ZeRO) on nodes of consecutive ranks: an fp32
# reduce-scatter inside the node per node's blocks, two-phase between nodes.
# Exact inputs exact (in and out of place, Sum, and Avg on powers of two);
# int8 with error feedback: the bits of flat two-phase differ, fewer wire
# bytes, the same bits at every piece size; a map whose nodes are not
# consecutive ranks runs hierarchically too (a reduce per block inside the node).
for shape in 2x2:int8 2x4:fp16 4x2:bf16 2x2:fp16s 2x2:int4; do
  nl=${shape%:*} w=${shape#*:}
  check "hier reduce-scatter $w on ${nl/x/ nodes x } ranks: exact inputs exact, in and out of place, Sum/Avg" \
    nodes "${nl%x*}" "${nl#*x}" "$w" rs
done
for a in hier twophase; do
  for pb in 0 4096; do
    nodes 2 2 int8 digest NCCLSHIM_ALGO=$a NCCLSHIM_ERROR_FEEDBACK=1 NCCLSHIM_TWOPHASE_PIECE_BYTES=$pb \
      TP_DIGEST_RS_ONLY=1 >"$TMPD/rs.$a.$pb" 2>&1 || echo "exit $?" >>"$TMPD/rs.$a.$pb"
    grep '^digest' "$TMPD/rs.$a.$pb" | sort >"$TMPD/rsd.$a.$pb"
  done
done
wh=$(awk '$1 == "wirebytes" && $2 == 0 {print $3}' "$TMPD/rs.hier.0")
wf=$(awk '$1 == "wirebytes" && $2 == 0 {print $3}' "$TMPD/rs.twophase.0")
[ "$(wc -l <"$TMPD/rsd.hier.0")" = 4 ] && cmp -s "$TMPD/rsd.hier.0" "$TMPD/rsd.hier.4096" \
  && ! cmp -s "$TMPD/rsd.hier.0" "$TMPD/rsd.twophase.0" && [ -n "$wh" ] && [ -n "$wf" ] && [ "$wh" -lt "$wf" ] \
  && ok "hier reduce-scatter int8 + error feedback, 2x2: not flat two-phase's bits, $wh < $wf wire bytes on rank 0, the same bits in 4 KiB pieces" \
  || { not_ok "hier reduce-scatter is not hierarchical or differs between piece sizes ($wh, $wf)"; tail -n 3 "$TMPD"/rs.* | sed 's/^/#   /'; }
# Nodes of ranks 0,2 and 1,3 (not consecutive, as ncclCommSplit can make):
# node j's blocks do not lie together, so stage a is one ncclReduce per block
# to its local rank; exact inputs stay exact, the wire bytes are hier's.
strided() { # what [env...]: one process per rank, nodes a b a b by NCCL_HOSTID
  local what=$1 ctx=() id; shift
  for id in a b a b; do
    [ ${#ctx[@]} -gt 0 ] && ctx+=(:)
    ctx+=(-np 1 -x LD_LIBRARY_PATH="$HOSTNCCL_DIR" -x LD_PRELOAD="$SHIM" -x NCCLSHIM_COMPRESS=int8 -x NCCL_HOSTID=$id)
    for e in "$@"; do ctx+=(-x "$e"); done
    ctx+=("$P" "$what")
  done
  mpirun_checked "${ctx[@]}"
}
for a in hier twophase; do
  strided digest NCCLSHIM_ALGO=$a TP_DIGEST_RS_ONLY=1 >"$TMPD/strided.$a.out" 2>&1
  grep '^digest' "$TMPD/strided.$a.out" | sort >"$TMPD/strided.$a"
done
wh=$(awk '$1 == "wirebytes" && $2 == 0 {print $3}' "$TMPD/strided.hier.out")
wf=$(awk '$1 == "wirebytes" && $2 == 0 {print $3}' "$TMPD/strided.twophase.out")
[ "$(wc -l <"$TMPD/strided.hier")" = 4 ] && ! cmp -s "$TMPD/strided.hier" "$TMPD/strided.twophase" \
  && [ -n "$wh" ] && [ -n "$wf" ] && [ "$wh" -lt "$wf" ] \
  && ok "hier reduce-scatter on nodes of ranks 0,2 and 1,3 (not consecutive): hierarchical (not flat two-phase's bits; $wh < $wf wire bytes on rank 0)" \
  || { not_ok "hier reduce-scatter on a strided map is not hierarchical ($wh, $wf)"; paste "$TMPD/strided.hier" "$TMPD/strided.twophase" | sed 's/^/#   /'; }
check "hier reduce-scatter int8 on nodes of ranks 0,2 and 1,3: exact inputs exact, in and out of place, Sum/Avg" \
  strided rs NCCLSHIM_ALGO=hier
# A reduce-scatter whose staging one rank cannot use (NCCLSHIM_FAULT_STAGE:
# 1 = its TMP, 2 = its stage between nodes), on consecutive and on strided
# nodes, out of and in place: nothing wrong anywhere, that rank's shard NaN,
# the next calls exact.
rsp() { # FAULT_STAGE faulty-rank ids...
  local fs=$1 bad=$2 ctx=() k=0 id; shift 2
  for id in "$@"; do
    [ ${#ctx[@]} -gt 0 ] && ctx+=(:)
    ctx+=(-np 1 -x LD_LIBRARY_PATH="$HOSTNCCL_DIR" -x LD_PRELOAD="$SHIM" -x NCCLSHIM_COMPRESS=int8 -x NCCLSHIM_ALGO=hier
      -x NCCL_HOSTID=$id)
    [ $k = "$bad" ] && ctx+=(-x NCCLSHIM_FAULT_STAGE=$fs)
    ctx+=("$P" rspoison)
    k=$((k + 1))
  done
  mpirun_checked "${ctx[@]}"
}
check "hier reduce-scatter, 2x2, rank 1's TMP unusable: no element wrong, its shard NaN, next calls exact" rsp 1 1 a a b b
check "hier reduce-scatter, nodes a b a b, rank 0's TMP unusable: the same" rsp 1 0 a b a b
check "hier reduce-scatter, nodes a b a b, rank 3's stage between nodes unusable: the same" rsp 2 3 a b a b
check "hier reduce-scatter, nodes a b b a, rank 3's TMP unusable: the same" rsp 1 3 a b b a

# A real call failing at each of the strided reduce-scatter's calls (after
# the all-reduce's: its four reduces inside the node, then its two-phase):
# every rank prints the same result line, nobody hangs.
for n in 10 11 12 13 14 15; do
  strided fault NCCLSHIM_ALGO=hier HOSTNCCL_FAIL_CALL=$n >"$TMPD/sfault.$n" 2>&1
  rc=$?
  lines=$(grep '^rc ' "$TMPD/sfault.$n" | sort | uniq -c | wc -l)
  [ $rc -eq 0 ] && [ "$(grep -c '^rc ' "$TMPD/sfault.$n")" -eq 4 ] && [ "$lines" -eq 1 ] \
    && ok "hier on a strided map, real call $n fails: '$(grep -m1 '^rc ' "$TMPD/sfault.$n")' on all 4 ranks, no hang" \
    || { not_ok "hier on a strided map, real call $n fails: exit $rc"; tail -n 6 "$TMPD/sfault.$n" | sed 's/^/#   /'; }
done
