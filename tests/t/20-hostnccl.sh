#!/usr/bin/env bash
# 20-hostnccl.sh — the host NCCL (tests/hostnccl/, build/lib/hostnccl/libnccl.so.2):
# exports, numeric conversions, every collective with exact expected values on
# 2, 3 and 4 ranks, API semantics (groups, communicators, split, threads,
# nonblocking protocol, fault injection, invalid arguments) and the emulated
# link lower bounds, over MPI and again over the socket transport
# (HOSTNCCL_TRANSPORT=socket); every entry point of nccl.h exported.
# Counts of 2^31+5 elements: 20-hostnccl-bigcount.sh.
# Must not: assert timings other than the lower bounds the emulation guarantees.
source "$(dirname "$0")/../lib.sh"
LIB="$HOSTNCCL_DIR/libnccl.so.2"
NCCL_HEADER=${NCCL_HEADER:-$(make -s -C "$ROOT" print-nccl-header 2>/dev/null)}
API="$TBIN/test_hostnccl_api"
COLL="$TBIN/test_hostnccl_coll"

# Library shape: SONAME, weak nccl* / strong pnccl* pairs, nothing else exported.
check "libnccl.so.2 has SONAME libnccl.so.2" bash -c "readelf -d '$LIB' | grep -q 'SONAME.*\[libnccl.so.2\]'"
nm -D --defined-only "$LIB" | awk '{print $2, $3}' >"$TMPD/syms"
check "exports only nccl*/pnccl*/hostnccl_* (plus version nodes)" \
  bash -c "! grep -Ev ' (nccl|pnccl|hostnccl_)' '$TMPD/syms' | grep -v ' A ' | grep -q ."
API_FUNCS="GetVersion GetUniqueId CommInitRank CommInitRankConfig CommSplit CommDestroy CommAbort
  CommFinalize CommCount CommUserRank CommCuDevice CommGetAsyncError GetErrorString GetLastError
  AllReduce ReduceScatter AllGather Broadcast Bcast Reduce Send Recv GroupStart GroupEnd
  RedOpCreatePreMulSum RedOpDestroy"
missing=""
for f in $API_FUNCS; do
  grep -qx "W nccl$f" "$TMPD/syms" && grep -qx "T pnccl$f" "$TMPD/syms" || missing="$missing $f"
done
if [ -z "$missing" ]; then ok "all 26 API functions exported as weak ncclX + strong pncclX"
else not_ok "weak ncclX / strong pncclX missing for:$missing"; fi
# Every entry point of the nccl.h it is built against exists (the ones not
# implemented answer ncclInvalidUsage), so programs linked to NCCL load.
hdr_missing=""
for f in $(grep -o 'pnccl[A-Za-z]*(' "$NCCL_HEADER" | tr -d '(' | sort -u); do
  grep -qx "T $f" "$TMPD/syms" && grep -qx "W ${f#p}" "$TMPD/syms" || hdr_missing="$hdr_missing $f"
done
if [ -z "$hdr_missing" ]; then ok "every pnccl* of $NCCL_HEADER exported (weak ncclX + strong pncclX)"
else not_ok "entry points of nccl.h not exported:$hdr_missing"; fi

# Numeric conversions and kernels (cmocka, TAP lines counted directly).
CMOCKA_MESSAGE_OUTPUT=TAP "$TBIN/test_hostnccl_numeric" || not_ok "test_hostnccl_numeric exited $?"

# Every collective, datatype and op, bit-exact; np=3 also with tiny MPI slices.
mpirun_host 2 "$COLL" || not_ok "collectives np=2 exited $?"
mpirun_host 3 -x HOSTNCCL_SLICE_BYTES=248 "$COLL" || not_ok "collectives np=3 (248-byte slices) exited $?"
mpirun_host 4 "$COLL" || not_ok "collectives np=4 exited $?"

# API semantics.
api() { local np=$1; shift; mpirun_host "$np" "$@" || not_ok "test_hostnccl_api np=$np ${*: -1} exited $?"; }
api 3 "$API" basic
api 2 -x HOSTNCCL_VERSION=20903 "$API" old
api 4 "$API" group
api 4 "$API" comms
api 2 "$API" threads single
api 3 "$API" threads multiple
api 3 "$API" nonblocking
api 3 -x HOSTNCCL_FAIL_CALL=3 "$API" failcall
api 2 -x HOSTNCCL_FAIL_GROUP_END=2 "$API" failgroup
api 2 "$API" abort
api 3 "$API" mismatch premul
# A call on a destroyed or aborted communicator: ncclInvalidUsage and one
# HOSTNCCL-ENDED line each (4 per rank), kept apart from the reports that
# fail a test; no line without such calls (the abort case above).
f="$TMPD/expected-ended.log"
HOSTNCCL_REPORT_FILE=$f timeout "${TEST_TIMEOUT:-180}" mpirun -np 2 -x LD_LIBRARY_PATH="$HOSTNCCL_DIR" "$API" ended >"$f.out" 2>&1
rc=$? n=$(grep -c 'HOSTNCCL-ENDED: .* on communicator 0x[0-9a-f]* after ncclCommDestroy or ncclCommAbort' "$f" 2>/dev/null)
[ $rc -eq 0 ] && [ "$n" = 8 ] && ok "calls on ended communicators: ncclInvalidUsage, each reported (8 HOSTNCCL-ENDED lines on 2 ranks)" \
  || { not_ok "calls on ended communicators: exit $rc, $n HOSTNCCL-ENDED lines (8 expected)"; tail -5 "$f.out" | sed 's/^/#   /'; }
# Mismatched collectives: real NCCL hangs or mixes data, so the host NCCL
# aborts the job with a HOSTNCCL-MISMATCH line naming both calls.
while read -r -u 3 np what a b; do
  expect_mismatch "mismatched $what on $np ranks: job aborted, both calls named" "$a" "$b" \
    -np "$np" -x LD_LIBRARY_PATH="$HOSTNCCL_DIR" "$API" mismatch "$what"
done 3<<'EOF'
3 count    rank.2:.ncclAllReduce\(count.8,.float32,.sum\)    rank.[01]:.ncclAllReduce\(count.16,.float32,.sum\)
2 datatype ncclAllReduce\(count.16,.float16,.sum\)              ncclAllReduce\(count.8,.float32,.sum\)
2 op       ncclAllReduce\(count.16,.float32,.max\)              ncclAllReduce\(count.16,.float32,.sum\)
2 root     ncclBroadcast\(count.16,.float32,.root.1\)           ncclBroadcast\(count.16,.float32,.root.0\)
2 kind     ncclAllGather\(count.4,.float32\)                    ncclReduceScatter\(count.4,.float32,.sum\)
2 count0   ncclAllReduce\(count.0,                               ncclAllReduce\(count.4,
EOF
api 3 "$API" selfinit "$TMPD/uid"
api 4 -x HOSTNCCL_LINK_LATENCY_US=20000 -x HOSTNCCL_LINK_GBPS=1 "$API" link

# The socket transport (what torchrun gets: no MPI) under the same programs,
# forced with HOSTNCCL_TRANSPORT=socket: the ids still travel over MPI, every
# byte of NCCL goes over loopback TCP. Same exact results, same emulated link
# bounds, same fault injection and argument checks.
mpirun_host 3 -x HOSTNCCL_TRANSPORT=socket -x HOSTNCCL_SLICE_BYTES=248 "$COLL" \
  || not_ok "sockets: collectives np=3 (248-byte slices) exited $?"
for c in group comms nonblocking abort; do api 3 -x HOSTNCCL_TRANSPORT=socket "$API" "$c"; done
api 3 -x HOSTNCCL_TRANSPORT=socket "$API" mismatch premul
expect_mismatch "sockets: mismatched count on 3 ranks: every rank reports, the job stops (exit 86)" \
  'rank.2:.ncclAllReduce\(count.8,.float32,.sum\)' 'rank.[01]:.ncclAllReduce\(count.16,.float32,.sum\)' \
  -np 3 -x LD_LIBRARY_PATH="$HOSTNCCL_DIR" -x HOSTNCCL_TRANSPORT=socket "$API" mismatch count
api 3 -x HOSTNCCL_TRANSPORT=socket "$API" threads multiple
api 3 -x HOSTNCCL_TRANSPORT=socket -x HOSTNCCL_FAIL_CALL=3 "$API" failcall
api 2 -x HOSTNCCL_TRANSPORT=socket -x HOSTNCCL_FAIL_GROUP_END=2 "$API" failgroup
api 4 -x HOSTNCCL_TRANSPORT=socket -x HOSTNCCL_LINK_LATENCY_US=20000 -x HOSTNCCL_LINK_GBPS=1 "$API" link
mpirun_host 2 -x HOSTNCCL_TRANSPORT=socket -x HOSTNCCL_LOG=1 "$API" basic >"$TMPD/sock.log" 2>&1
check_grep "HOSTNCCL_TRANSPORT=socket: communicators over sockets" "rank 1/2 created \(blocking, sockets\)" "$TMPD/sock.log"
mpirun_host 2 -x HOSTNCCL_TRANSPORT=tcp "$API" basic >"$TMPD/badtr.log" 2>&1
check_grep "HOSTNCCL_TRANSPORT=tcp is refused by name" "HOSTNCCL_TRANSPORT='tcp' is not auto, mpi or socket" "$TMPD/badtr.log"

# A malformed variable stops every call with a message naming it.
mpirun_host 2 -x HOSTNCCL_LINK_GBPS=fast "$API" basic >"$TMPD/badenv.log" 2>&1
check_grep "HOSTNCCL_LINK_GBPS=fast is refused by name" "HOSTNCCL_LINK_GBPS='fast' is not a number" "$TMPD/badenv.log"

# HOSTNCCL_LOG=1 prints each collective.
mpirun_host 2 -x HOSTNCCL_LOG=1 "$API" failgroup >"$TMPD/log.log" 2>&1
check_grep "HOSTNCCL_LOG=1 logs collectives" "rank 1/2 AllReduce float32 count 16" "$TMPD/log.log"

# A mismatch fails a test whatever the test expected: here a check that wants
# the run to fail (check_fails) still yields "not ok" from tests/lib.sh.
TMPD="$TMPD/meta" bash -c 'mkdir -p "$TMPD"; . "$0"; check_fails "expects failure" mpirun_host 2 "$1" mismatch count' \
  "$ROOT/tests/lib.sh" "$API" >"$TMPD/meta.log" 2>&1
check_grep "a mismatch inside check_fails still fails the script (tests/lib.sh)" \
  "^not ok - the host NCCL reported mismatched collectives" "$TMPD/meta.log"
