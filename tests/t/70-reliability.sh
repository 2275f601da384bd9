# Reliability of the shim over the host NCCL: faults (the real call failing,
# group ends failing, ncclInProgress, staging allocation failing on one rank),
# arguments at the edges, threads and many communicators, abort and fork,
# special values, and a soak with logging on. Every MPI run is bounded by
# TEST_TIMEOUT, so a hang is a failed check. tests/README.md lists what each
# check proves and the limits accepted.
#
# RELIABILITY_QUICK=1 (set by 90-sanitizers.sh): soak of 10^5 calls and no
# multi-GiB buffers. RELIABILITY_BIG=1: also the 2^31+5-element fp32 case
# (12 GiB, about 30 s here).
. "$(dirname "$0")/../lib.sh"
shim_env_clean
export NCCLSHIM_LOG=off NCCLSHIM_BANNER=0 TEST_TIMEOUT=${TEST_TIMEOUT:-60}
F="$TBIN/shimfault" A="$TBIN/shimfault_args" L="$TBIN/shimfault_life" T="$TBIN/shim_threads"
QUICK=${RELIABILITY_QUICK:-0}
# Memory checks are skipped by the programs under ASan and valgrind (quarantines).
flat=$([ "$QUICK" = 1 ] && echo "memory not checked under sanitizers" || echo "VmRSS flat")
leak=$([ "$QUICK" = 1 ] && echo "leaks checked by the plain run" || echo "no staging leak")

# MPMD runs (settings on some ranks only): each context names the preload.
X="-x LD_PRELOAD=$SHIM${SAN_PRELOAD:+:$SAN_PRELOAD} -x LD_LIBRARY_PATH=$HOSTNCCL_DIR"
mpmd() { mpirun_checked "$@"; }

# ---- 1. Faults ---------------------------------------------------------------
# HOSTNCCL_FAIL_CALL=N fails the N-th real all-reduce of each process. With the
# shim, real calls 1 and 2 are its configuration check at the first call and
# the check's confirmation (every rank read the answer). Row: N, the
# user call K that fails, what the host NCCL accepts during K, what the shim
# attempts during K (one more: the failed attempt, never retried).
while read -r -u 3 n k hostd shimd what; do
  check "real call $n fails ($what): ncclSystemError unchanged, outputs untouched, no retry, later calls exact, $leak" \
    with HOSTNCCL_FAIL_CALL=$n mpirun_shim 2 "$F" failcall "$k" "$hostd" "$shimd"
done 3<<'EOF'
1 1 1 2 the configuration check at the first call (its confirmation still issued)
2 1 1 2 the check's confirmation
3 1 2 3 the first compressed call
4 2 0 1 a compressed out-of-place call
5 3 0 1 an int32 pass-through call
6 4 0 1 a compressed in-place call
7 5 0 1 a fused group of two
EOF
check "real call 7 fails (group, fusion off: queued cast-backs dropped)" \
  with HOSTNCCL_FAIL_CALL=7 NCCLSHIM_FUSE_BYTES=0 mpirun_shim 2 "$F" failcall 5 1 2
# Pipelined (CHUNK_BYTES=64K: 4 chunks a call; real calls: check 1-2, call 1 = 3-6,
# call 2 = 7-10, int32 = 11, in-place call = 12-15): no chunk after the failed
# one is issued; chunks before it may already be final (exact), nothing else.
check "real call 8 fails (chunk 2 of 4 of a pipelined call): error unchanged, no further chunk, no retry" \
  with HOSTNCCL_FAIL_CALL=8 NCCLSHIM_CHUNK_BYTES=64K mpirun_shim 2 "$F" failcall 2 1 2 chunked
check "real call 14 fails (chunk 3 of 4, in place): the same" \
  with HOSTNCCL_FAIL_CALL=14 NCCLSHIM_CHUNK_BYTES=64K mpirun_shim 2 "$F" failcall 4 2 3 chunked
check "control without the shim: the same program sees the same failure" \
  with HOSTNCCL_FAIL_CALL=2 mpirun_host 2 "$F" failcall 2 0 0
for fb in 64M 0; do
  check "ncclGroupEnd fails (FUSE_BYTES=$fb): ncclSystemError, no cast-back ran, next groups exact, $leak" \
    with HOSTNCCL_FAIL_GROUP_END=1 NCCLSHIM_FUSE_BYTES=$fb mpirun_shim 2 "$F" failgroup
  check "nonblocking communicator (FUSE_BYTES=$fb): results only after ncclCommGetAsyncError reports success" \
    with NCCLSHIM_FUSE_BYTES=$fb mpirun_shim 2 "$F" inprogress
done
check "control without the shim: the nonblocking program's results right once the poll reports success (plain NCCL may complete before it)" mpirun_host 2 "$F" inprogress
# Staging is allocated only at agreements (issue 23, defect 3): the first
# call's check (the initial block, NCCLSHIM_STAGING_BYTES) and the settle after
# a call or group that outgrew it. An allocation failing on one rank stops
# compression on every rank of the communicator: every call succeeds, exact,
# nothing compressed anywhere (the program compares the shim's counts).
S64="-x NCCLSHIM_STAGING_BYTES=64K"
check "the initial staging block fails on rank 0 of 2 (FAULT_ALLOC=1): compression stops on both, every call succeeds, exact" \
  mpmd -np 1 $X -x NCCLSHIM_FAULT_ALLOC=1 "$F" stagefail single : -np 1 $X "$F" stagefail single
check "the same on rank 1 of 3, grouped calls (fused)" \
  mpmd -np 1 $X "$F" stagefail group : -np 1 $X -x NCCLSHIM_FAULT_ALLOC=1 "$F" stagefail group : -np 1 $X "$F" stagefail group
check "calls outgrow the block (STAGING_BYTES=64K, 128 KiB on the wire): rounds 1-3 in fp32 (the agreement, then its confirmation, each read a round later), then compressed, alike on every rank" \
  with NCCLSHIM_STAGING_BYTES=64K mpirun_shim 2 "$F" stagefail single grow
for fb in 64M 0; do
  check "the same for groups of three (FUSE_BYTES=$fb: $([ $fb = 0 ] && echo "three calls' staging in one group" || echo fused))" \
    with NCCLSHIM_STAGING_BYTES=64K NCCLSHIM_FUSE_BYTES=$fb mpirun_shim 2 "$F" stagefail group grow
done
for fb in 64M 0; do
  check "growth fails on rank 1 of 3 (FAULT_ALLOC=2, FUSE_BYTES=$fb, grouped): compression stops on every rank, every call exact" \
    mpmd -np 1 $X $S64 -x NCCLSHIM_FUSE_BYTES=$fb "$F" stagefail group grow : -np 1 $X $S64 -x NCCLSHIM_FUSE_BYTES=$fb -x NCCLSHIM_FAULT_ALLOC=2 "$F" stagefail group grow : \
      -np 1 $X $S64 -x NCCLSHIM_FUSE_BYTES=$fb "$F" stagefail group grow
done
check "growth fails on rank 0 of 2 for pipelined calls (CHUNK_BYTES=64K): the same" \
  mpmd -np 1 $X $S64 -x NCCLSHIM_CHUNK_BYTES=64K -x NCCLSHIM_FAULT_ALLOC=2 "$F" stagefail single grow : -np 1 $X $S64 -x NCCLSHIM_CHUNK_BYTES=64K "$F" stagefail single grow
for fb in 64M 0; do
  check "nonblocking, 6 calls and 6 groups queued without a poll (FUSE_BYTES=$fb): fresh blocks two deep, then parked work run first; exact" \
    with NCCLSHIM_FUSE_BYTES=$fb mpirun_shim 2 "$F" nbqueue
done
check "the same, no fresh block on rank 1 of 2 (FAULT_ALLOC=2): its parked work is run first at once; exact on both" \
  mpmd -np 1 $X "$F" nbqueue : -np 1 $X -x NCCLSHIM_FAULT_ALLOC=2 "$F" nbqueue
# The block is agreed between ranks whatever the calls: shimtest's groups with
# the initial block failing on one rank: every grouped result exact, no hang.
TEST_TIMEOUT=60 mpmd -np 1 $X -x NCCLSHIM_FAULT_ALLOC=1 "$TBIN/shimtest" group : -np 1 $X "$TBIN/shimtest" group \
  >"$TMPD/fusefail.log" 2>&1
rc=$?
[ $rc -eq 0 ] && ok "the initial block fails on one rank of 2 under shimtest's groups: compression off on both, grouped results exact, no hang" \
  || { not_ok "the initial block fails on one rank: rc $rc"; tail -n 8 "$TMPD/fusefail.log" | sed 's/^/#   /'; }
check_grep "... the failing rank says why, once, naming the variable's bytes" "compression stopped on communicator .* this rank could not allocate its 33554432 bytes of staging" "$TMPD/fusefail.log"

# Every failure of our own after a decision still issues every collective the
# peers issue (the host NCCL aborts the job on any mismatch, see tests/lib.sh).
C64="-x NCCLSHIM_CHUNK_BYTES=64K"
check "cast of chunk 3 of 4 fails on rank 0 (FAULT_CAST=3): every chunk issued, chunks from it on NaN everywhere, rank 0 NaN, next call exact" \
  mpmd -np 1 $X $C64 -x NCCLSHIM_FAULT_CAST=3 "$F" faultalloc single : -np 1 $X $C64 "$F" faultalloc single
check "cast of an unpipelined call fails on rank 0 (FAULT_CAST=1): its collective still issued on NaN" \
  mpmd -np 1 $X -x NCCLSHIM_FAULT_CAST=1 "$F" faultalloc single : -np 1 $X "$F" faultalloc single
check "segmented cast of a fused group fails on rank 0 (FAULT_CAST=2): the fused collective still issued, every member NaN everywhere" \
  mpmd -np 1 $X -x NCCLSHIM_FAULT_CAST=2 "$F" faultalloc group : -np 1 $X "$F" faultalloc group
check "no exchange buffer for the configuration check on rank 0 (FAULT_OOB=1): it reduces poison, every rank fails that call with ncclSystemError, next call exact" \
  mpmd -np 1 $X -x NCCLSHIM_FAULT_OOB=1 "$F" faultoob : -np 1 $X "$F" faultoob

# Nothing local decides what is issued: ncclSuccess vs ncclInProgress, stream
# handles, grouping (fusion off), settings that are invalid on one rank.
check "blocking on rank 0, nonblocking on rank 1: grouped first call (deferred check), fusion growth, pipelined calls alike, exact" \
  with NCCLSHIM_FUSE_BYTES=256K NCCLSHIM_STAGING_BYTES=128K NCCLSHIM_CHUNK_BYTES=64K mpirun_shim 2 "$F" nbmix
check "group members on two streams on rank 0, one on rank 1: fused alike (one block per communicator, streams joined)" \
  mpirun_shim 2 "$F" streams
check "rank 0 groups what rank 1 issues one by one, FUSE_BYTES=0 (pipelined sizes too): supported, exact" \
  with NCCLSHIM_FUSE_BYTES=0 NCCLSHIM_CHUNK_BYTES=64K mpirun_shim 2 "$F" groupmix
expect_mismatch "... with fusion on it is not supported (docs/collectives.md): the host NCCL reports the mismatch" \
  'ncclAllReduce\(count 1000, int32' 'float16' -np 2 $X "$F" groupmix
while read -r -u 3 kv pat; do
  mpmd -np 1 $X "$F" badsetting : -np 1 $X -x "$kv" "$F" badsetting >"$TMPD/bad1.log" 2>&1
  rc=$?
  if [ $rc -eq 0 ] && grep -Eq -- "$pat" "$TMPD/bad1.log" && grep -q "setting is invalid on another rank" "$TMPD/bad1.log"; then
    ok "$kv on rank 1 only: every rank fails with ncclInvalidUsage (grouped first call, second communicator), nobody waits; rank 1 names it"
  else not_ok "$kv on rank 1 only: rc $rc"; tail -n 6 "$TMPD/bad1.log" | sed 's/^/#   /'; fi
done 3<<'EOF'
NCCLSHIM_COMPRESS=fp61 NCCLSHIM_COMPRESS='fp61' is invalid: expected one of off\|fp16\|bf16
NCCLSHIM_CHECK_CONFIG=0 unknown variable NCCLSHIM_CHECK_CONFIG
NCCLSHIM_PRESCALE=1e-40 NCCLSHIM_PRESCALE='1e-40' is invalid: expected a finite number > 1e-38
EOF
check "NCCLSHIM_COMPRESS=off: the shim adds exactly two real all-reduces per communicator (its configuration check and confirmation)" \
  with NCCLSHIM_COMPRESS=off mpirun_shim 2 "$F" offcalls

# ---- 2. Arguments ------------------------------------------------------------
mpirun_host 2 "$A" codes >"$TMPD/codes.plain" 2>"$TMPD/codes.plain.err"
rc_plain=$?
mpirun_shim 2 "$A" codes >"$TMPD/codes.shim" 2>"$TMPD/codes.shim.err"
rc_shim=$?
ncases=$(wc -l <"$TMPD/codes.shim")
[ $rc_plain -eq 0 ] && [ $rc_shim -eq 0 ] && [ "$ncases" -eq 34 ] \
  && ok "argument table ran with and without the shim ($ncases cases; the shim compressed exactly the expected ones)" \
  || { not_ok "argument table: rc $rc_plain/$rc_shim, $ncases cases"; tail -5 "$TMPD/codes.shim.err" | sed 's/^/#   /'; }
check "count 0/1/odd, threshold +-1, NULL buffers, op 99/-1, datatype 42/12/-1, NULL comm, PreMulSum, groups, unbalanced group end: same codes and buffers as plain NCCL" \
  cmp "$TMPD/codes.plain" "$TMPD/codes.shim"
[ "$(grep -c 'call 4 ' "$TMPD/codes.shim")" -eq 17 ] && ok "the 17 invalid calls all return ncclInvalidArgument (4)" \
  || not_ok "invalid calls: $(grep -c 'call 4 ' "$TMPD/codes.shim") of 17 return 4"
for w in fp16 bf16; do
  check "pointers offset by 0..3 elements, in/out of place, odd sizes ($w): exact, sendbuff unchanged, nothing written outside" \
    with NCCLSHIM_COMPRESS=$w mpirun_shim 2 "$A" misaligned
done
check "call above NCCLSHIM_MAX_STAGING_BYTES: ncclInvalidUsage on every rank, buffer intact, no hang" \
  with NCCLSHIM_MAX_STAGING_BYTES=64K mpirun_shim 2 "$A" big 100000 f32 limit
# The limit is decided from what every rank agrees on, never from streams or
# live regions (issue 26.2: rank 0 refused, rank 1 sent).
for m in group poll; do
  check "MAX_STAGING_BYTES=64K, a two-phase reduce-scatter and a ring all-reduce that fit alone ($m: $( [ $m = group ] && echo 'one group, streams differing between ranks' || echo 'nonblocking, polled on one rank only')): both succeed on every rank, exact" \
    with NCCLSHIM_MAX_STAGING_BYTES=64K NCCLSHIM_MIN_BYTES=0 NCCLSHIM_COMPRESS=fp16 NCCLSHIM_FUSE_BYTES=0 mpirun_shim 2 "$A" staging $m
done
check "MAX_STAGING_BYTES=64K, a group of two ring all-reduces that need more together, streams differing between ranks: the second refused on every rank, the first exact" \
  with NCCLSHIM_MAX_STAGING_BYTES=64K NCCLSHIM_MIN_BYTES=0 NCCLSHIM_COMPRESS=fp16 NCCLSHIM_FUSE_BYTES=0 mpirun_shim 2 "$A" staging sum
avail_gib=$(( $(awk '/MemAvailable/ {print $2}' /proc/meminfo) / 1048576 ))
big() { # need_gib description args...
  local need=$1 desc=$2; shift 2
  if [ "$QUICK" = 1 ]; then ok "$desc # SKIP RELIABILITY_QUICK"
  elif [ "$avail_gib" -lt "$need" ]; then ok "$desc # SKIP needs $need GiB, $avail_gib available"
  else check "$desc" with TEST_TIMEOUT=240 "$@"; fi
}
# (ALGO=ring: auto leaves a one-rank call untouched, it gains nothing there)
big 8 "fp32 Sum of 2^30+3 elements (4 GiB + 12 B, wire 2 GiB), 1 rank, STAGING_BYTES=3G, ALGO=ring: compressed at once, exact, 64-bit byte counts" \
  with NCCLSHIM_STAGING_BYTES=3G NCCLSHIM_ALGO=ring mpirun_shim 1 "$A" big 1073741827 f32 compressed
big 4 "int8 Sum of 2^31+5 elements, 1 rank: passed through untouched, exact" \
  mpirun_shim 1 "$A" big 2147483653 i8 passthrough
if [ "${RELIABILITY_BIG:-0}" = 1 ]; then
  big 14 "fp32 Sum of 2^31+5 elements (8 GiB, wire 4 GiB + 10 B), 1 rank, MAX_STAGING_BYTES=8G, STAGING_BYTES=5G: exact" \
    with NCCLSHIM_MAX_STAGING_BYTES=8G NCCLSHIM_STAGING_BYTES=5G NCCLSHIM_ALGO=ring mpirun_shim 1 "$A" big 2147483653 f32 compressed
fi

# ---- 3. Threads, communicators, abort, fork -----------------------------------
for w in fp16 bf16; do
  check "8 threads x own communicator (MPI_THREAD_MULTIPLE), $w: exact, counters add up" \
    with NCCLSHIM_COMPRESS=$w mpirun_shim 2 "$T" threads 8
done
for fb in 64M 0; do
  check "2 communicators x 2 interleaved streams, in/out of groups (FUSE_BYTES=$fb): exact, $flat" \
    with NCCLSHIM_FUSE_BYTES=$fb mpirun_shim 2 "$T" streams
done
NCCLSHIM_BANNER=1 mpirun_shim 2 "$L" churn 200 >"$TMPD/churn.out" 2>"$TMPD/churn.err"
rc=$?
want=$(awk '{for (i = 1; i < NF; i++) if ($i == "banners") s += $(i + 1)} END {print s + 0}' "$TMPD/churn.out")
got=$(grep -o "active on communicator" "$TMPD/churn.err" | wc -l) # -o: two ranks writing one pipe can join their lines
[ $rc -eq 0 ] && ok "200 communicators created/destroyed/aborted: exact, fresh state at reused addresses, fds and $flat ($(grep '^banners' "$TMPD/churn.out"))" \
  || { not_ok "churn: rc=$rc"; grep -v "active on" "$TMPD/churn.err" | tail -8 | sed 's/^/#   /'; }
[ "$want" -eq 300 ] && [ "$got" -eq "$want" ] && ok "a banner for every new communicator, reused addresses included ($got)" \
  || not_ok "banners: $got printed, $want expected (300)"
check "nonblocking communicator polled by a watchdog thread too: each result final when the caller's poll says done" \
  mpirun_shim 2 "$T" nbwatch 150
check "ncclCommAbort from a watchdog thread while a compressed call is blocked: error returned, no deadlock (5 rounds)" \
  with NCCLSHIM_MIN_BYTES=0 mpirun_shim 2 "$T" abort 5
# An abort that lands while the caller is blocked inside a real call of the
# shim's (tests/shim/shim_abort.c; the watchdog aborts once the host NCCL
# reports the process waiting on a peer): the call fails, and nothing more is
# issued on the aborted communicator or its sub-communicators (the host NCCL
# reports any such call, HOSTNCCL-ENDED; under ASan a use after free). Before
# the fix every two-phase, hierarchical and deferred-check row issued
# hundreds of sends and receives on the freed handle. Over the socket
# transport: an abort over MPI can leave a matched transfer touching the
# caller's buffers after ncclCommAbort returned (Open MPI cannot cancel a
# send; docs/emulation.md), which real NCCL never does.
AB="$TBIN/shim_abort"
while read -r -u 3 mode what; do
  read -r -u 3 settings
  # shellcheck disable=SC2086
  check "abort from a watchdog while blocked in $what: error returned, nothing issued on the aborted communicator" \
    with $settings HOSTNCCL_TRANSPORT=socket mpirun_shim 2 "$AB" "$mode"
done 3<<'EOF'
call the ring in chunks
NCCLSHIM_COMPRESS=fp16 NCCLSHIM_ALGO=ring NCCLSHIM_CHUNK_BYTES=65536
call int8 two-phase in 4 KiB pieces
NCCLSHIM_COMPRESS=int8 NCCLSHIM_ALGO=twophase NCCLSHIM_TWOPHASE_PIECE_BYTES=4096
group a group of fused fp16 members and a grouped two-phase call
NCCLSHIM_COMPRESS=fp16 NCCLSHIM_ALGO=twophase NCCLSHIM_TWOPHASE_PIECE_BYTES=4096
group a group of fused members on the ring
NCCLSHIM_COMPRESS=fp16 NCCLSHIM_ALGO=ring
first two communicators' first calls in one group (deferred checks)
NCCLSHIM_COMPRESS=int8
EOF
for mode in call group; do
  check "abort from a watchdog while blocked in a hierarchical $mode (int8, 2 nodes x 2): the same" \
    mpirun_nodes --shim 2 2 -x HOSTNCCL_TRANSPORT=socket -x NCCLSHIM_COMPRESS=int8 -x NCCLSHIM_ALGO=hier \
      -x NCCLSHIM_TWOPHASE_PIECE_BYTES=4096 -- "$AB" $mode
done
mkdir -p "$TMPD/fork"
NCCLSHIM_LOG=summary NCCLSHIM_LOG_FILE="$TMPD/fork/log.%p" mpirun_shim 2 "$L" fork "$TMPD/fork" \
  >"$TMPD/fork.out" 2>"$TMPD/fork.err"
rc=$?
[ $rc -eq 0 ] && ok "fork after init: child's calls untouched and uncounted, shim disabled there; parent exact after" \
  || { not_ok "fork: rc=$rc"; tail -8 "$TMPD/fork.err" | sed 's/^/#   /'; }
children=$(awk '/^child / {print $2}' "$TMPD/fork.out" | tr '\n' ' ')
leaked=""
for p in $children; do [ -e "$TMPD/fork/log.$p" ] && leaked+=" log.$p"; done
[ -n "$children" ] && [ -z "$leaked" ] && ! grep -q ncclshim "$TMPD"/fork/child-*.err \
  && ok "forked children wrote no log file and no shim line on stderr (children: $children)" \
  || not_ok "forked children: log files [$leaked], stderr: $(cat "$TMPD"/fork/child-*.err 2>/dev/null | head -3)"
grep -qs "summary" "$TMPD"/fork/log.* "$TMPD/fork.err" && ok "the parents still wrote their summaries (control)" \
  || not_ok "no parent summary found (log files: $(ls "$TMPD/fork"))"

# ---- 4. Values -----------------------------------------------------------------
for w in fp16 bf16; do
  for op in sum avg; do
    for np in 2 3; do
      check "Inf/NaN/-0/subnormals/overflow, $w $op, $np ranks: same bits everywhere, = NCCL on the wire type, counted" \
        with NCCLSHIM_COMPRESS=$w mpirun_shim $np "$A" special $op
    done
  done
done

# ---- 5. Soak ---------------------------------------------------------------------
soak=$([ "$QUICK" = 1 ] && echo 100000 || echo 1000000)
NCCLSHIM_MIN_BYTES=0 NCCLSHIM_LOG=calls NCCLSHIM_LOG_FILE="$TMPD/soak.%p.log" TEST_TIMEOUT=180 \
  mpirun_shim 2 "$L" soak $soak >"$TMPD/soak.out" 2>"$TMPD/soak.err"
rc=$?
[ $rc -eq 0 ] && ok "soak: $soak compressed calls with NCCLSHIM_LOG=calls, all exact, $flat ($(cat "$TMPD/soak.out"))" \
  || { not_ok "soak: rc=$rc"; grep -v '^ncclshim\[' "$TMPD/soak.err" | head -8 | sed 's/^/#   /'; }
files=$(ls "$TMPD"/soak.*.log 2>/dev/null | wc -l)
whole=$(grep -l "\"compressed\":{\"calls\":$soak," "$TMPD"/soak.*.log 2>/dev/null | wc -l)
detail=$(cat "$TMPD"/soak.*.log 2>/dev/null | grep -c '"kind":"call"')
# Every record is written as it comes; a file holding 16 x NCCLSHIM_LOG_RING
# records is renamed to <name>.1 and a new one begins: bounded disk.
[ "$files" -eq 2 ] && [ "$whole" -eq 2 ] && [ "$detail" -le $((2 * 17 * 4096)) ] \
  && ok "each rank's log file counts all $soak calls, $detail records in the current files (bounded: rotated every 16 x NCCLSHIM_LOG_RING)" \
  || not_ok "soak logs: $files files, $whole with $soak calls, $detail detail records"
