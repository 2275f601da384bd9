# The two-phase compressed collectives (shim/exec/) over the host NCCL:
# exactness and identical bits on every rank for every wire format, reduce-
# scatter in and out of place, special values, documented bounds on random
# inputs (not growing with the rank count), a real call failing mid-way, and
# a rank without staging (poisoned, never a hang).
. "$(dirname "$0")/../lib.sh"
P="$TBIN/shim_twophase"
export NCCLSHIM_LOG=off NCCLSHIM_BANNER=0
unset NCCLSHIM_COMPRESS NCCLSHIM_ALGO

# 1. Exact inputs: every element exact, all ranks the same bits, no all-reduce reaches NCCL.
[ -n "$FORMATS" ] || not_ok "no formats from ncclshim-envdoc --names (not built?)"
for w in $FORMATS; do
  nps="2 3 4"; [ $w = bf16 ] && nps=4; [ $w = fp8 ] && nps="2 4"; [ $w = fp16s ] && nps=3; [ $w = int4 ] && nps="2 4"
  for np in $nps; do
    check "two-phase $w, $np ranks: exact inputs exact on every rank (sizes 1..300001, in/out of place, Sum/Avg)" \
      with NCCLSHIM_COMPRESS=$w NCCLSHIM_ALGO=twophase NCCLSHIM_MIN_BYTES=0 mpirun_shim $np "$P" exact
  done
done
check "int8 with blocks of 16 elements: exact, 3 ranks" \
  with NCCLSHIM_COMPRESS=int8 NCCLSHIM_BLOCK_ELEMS=16 NCCLSHIM_MIN_BYTES=0 mpirun_shim 3 "$P" exact
check "NCCLSHIM_ALGO=ring is not two-phase (the check above can fail: it sees the ring's all-reduces)" \
  check_fails with NCCLSHIM_COMPRESS=fp16 NCCLSHIM_ALGO=ring NCCLSHIM_MIN_BYTES=0 mpirun_shim 2 "$P" exact
check "NCCLSHIM_ALGO=twophase, prescale 4: still exact (3 ranks)" \
  with NCCLSHIM_COMPRESS=fp16 NCCLSHIM_ALGO=twophase NCCLSHIM_PRESCALE=4 NCCLSHIM_MIN_BYTES=0 mpirun_shim 3 "$P" exact

# 2. Reduce-scatter: the first phase, fp32 shard, in place and out of place.
for w in $FORMATS; do
  [ $w = bf16 ] && continue # fp16's shape
  nps="2 3"; [ $w = int8 ] && nps="3 4"; [ $w = fp8 ] && nps=4; [ $w = fp16s ] && nps=3; [ $w = int4 ] && nps=3
  for np in $nps; do
    check "reduce-scatter $w, $np ranks: exact, in and out of place (sendbuff untouched), Sum/Avg" \
      with NCCLSHIM_COMPRESS=$w NCCLSHIM_MIN_BYTES=0 mpirun_shim $np "$P" rs
  done
done

# 3. Inf, -Inf, NaN, Inf - Inf propagate as in fp32; identical on all ranks.
for w in $FORMATS; do
  check "special values, $w, 3 ranks" with NCCLSHIM_COMPRESS=$w NCCLSHIM_ALGO=twophase mpirun_shim 3 "$P" special
done

# 3b. The top of fp32's range (issue 26): Avg of 3e38 finite (scaled before
# the sum, as NCCL's Avg), 8-bit sums finite where the ranks' maxima add up
# to at most FLT_MAX, error feedback never turning a finite input into Inf;
# with 4 KiB pieces and a reduce-scatter inside. Stochastic rounding: two
# calls of one group round independently.
for w in $FORMATS; do
  check "values near FLT_MAX (fp16: 65519), $w, 3 ranks, error feedback, 4 KiB pieces: Avg finite, sums finite, no Inf from residuals" \
    with NCCLSHIM_COMPRESS=$w NCCLSHIM_ALGO=twophase NCCLSHIM_MIN_BYTES=0 NCCLSHIM_ERROR_FEEDBACK=1 NCCLSHIM_TWOPHASE_PIECE_BYTES=4096 mpirun_shim 3 "$P" limits
done
check "values near FLT_MAX, int8, 2 ranks, no error feedback: Avg finite, sums finite" \
  with NCCLSHIM_COMPRESS=int8 NCCLSHIM_ALGO=twophase NCCLSHIM_MIN_BYTES=0 mpirun_shim 2 "$P" limits
for w in bf16 fp8; do
  check "stochastic rounding, $w, 2 ranks: two grouped two-phase all-reduces of one input round independently (<= 90 % agree)" \
    with NCCLSHIM_COMPRESS=$w NCCLSHIM_ALGO=twophase NCCLSHIM_MIN_BYTES=0 NCCLSHIM_ROUNDING=stochastic mpirun_shim 2 "$P" srgroup
done

# 4. Random inputs over 2^-30..2^30: within the documented bound at 2 and 4 ranks.
: >"$TMPD/bounds"
# The summary's wire bytes: each format's bits per value (compress/formats.h,
# as env/ncclshim/formats.py) plus 2 bytes per block of 256, over fp32's 4.
for w in $FORMATS; do
  for np in 2 4; do
    with NCCLSHIM_COMPRESS=$w NCCLSHIM_ALGO=twophase NCCLSHIM_LOG=summary mpirun_shim $np "$P" bound 2 >"$TMPD/b" 2>&1 \
      && grep -q "^maxrel $w twophase $np " "$TMPD/b" \
      && ok "random inputs, two-phase $w, $np ranks: every element within the bound ($(grep maxrel "$TMPD/b" | cut -d' ' -f5))" \
      || { not_ok "random inputs, two-phase $w, $np ranks"; sed 's/^/#   /' "$TMPD/b" | tail -5; }
    grep maxrel "$TMPD/b" >>"$TMPD/bounds"
    [ $np = 4 ] || continue
    r=$(PYTHONPATH="$ROOT/env" python3 - "$w" "$TMPD/b" <<'PY'
import re, sys
from ncclshim import formats
w, path = sys.argv[1:3]
bits, blocked = formats.FORMATS[w]
want = (bits / 8 + (2 / 256 if blocked else 0)) / 4
rows = [l.split() for l in open(path) if re.search(r"ncclshim\[.*\]\s+compressed\s", l)]
logical, wire = int(rows[0][4]), int(rows[0][5])
print("%.4f %.4f %d" % (wire / logical, want, abs(wire / logical - want) <= 0.01 * want))
PY
)
    [ "${r##* }" = 1 ] && ok "summary, $w, 4 ranks: wire bytes $(echo $r | cut -d' ' -f1) of the logical ones (the format's $(echo $r | cut -d' ' -f2))" \
      || { not_ok "summary, $w: wire over logical bytes '$r'"; grep compressed "$TMPD/b" | head -3 | sed 's/^/#   /'; }
  done
done
# The error of two-phase does not grow with n: at 4 ranks at most 1.5x the 2-rank value.
awk -v want="$(( 2 * $(echo $FORMATS | wc -w) ))" '$1 == "maxrel" { e[$2 " " $4] = $5; k++ } END {
  bad = k != want; for (w in e) { split(w, a, " "); if (a[2] == 2 && e[a[1] " 4"] > 1.5 * e[w] + 1e-12) bad = 1 }
  exit bad }' "$TMPD/bounds" && ok "two-phase error at 4 ranks within 1.5x of 2 ranks, every format" \
  || { not_ok "two-phase error grows with n"; sed 's/^/#   /' "$TMPD/bounds"; }

# 5. A real call failing mid-way (HOSTNCCL_FAIL_CALL=N on every rank; real
# calls 1 and 2 are the configuration check and its confirmation; with 3
# ranks the all-reduce's sends and receives are calls 3-6 and 7-10 (host
# memory: auto's second phase is sends and receives), the reduce-scatter's
# 11-14): the failing collective returns ncclSystemError (2) on every rank,
# the other succeeds, nobody hangs.
for n in 2 3 8 10 14; do
  want="rc 2 0"; [ $n -ge 11 ] && want="rc 0 2"
  with HOSTNCCL_FAIL_CALL=$n NCCLSHIM_COMPRESS=int8 mpirun_shim 3 "$P" fault >"$TMPD/fault.$n" 2>&1
  rc=$?
  [ $rc -eq 0 ] && [ "$(grep -c "^$want\$" "$TMPD/fault.$n")" -eq 3 ] \
    && ok "real call $n fails: '$want' on all 3 ranks, no hang" \
    || { not_ok "real call $n fails: exit $rc"; sed 's/^/#   /' "$TMPD/fault.$n" | tail -5; }
done

# 6. One rank cannot use its staging (NCCLSHIM_FAULT_STAGE: its stream cannot
# wait for the block's earlier use): it still sends every message (0xff), fails
# with ncclSystemError; every rank's result is NaN throughout; the next call is exact.
X="-x LD_LIBRARY_PATH=$HOSTNCCL_DIR -x LD_PRELOAD=$SHIM"
for w in fp16 int8; do
  check "staging fails on rank 1 of 3 ($w): it returns ncclSystemError, all results NaN, no hang, next call exact" \
    with NCCLSHIM_COMPRESS=$w NCCLSHIM_ALGO=twophase timeout "${TEST_TIMEOUT:-180}" mpirun -np 1 $X "$P" poison : \
      -np 1 $X -x NCCLSHIM_FAULT_STAGE=1 "$P" poison : -np 1 $X "$P" poison
done

# 7. NCCLSHIM_ALGO and NCCLSHIM_BLOCK_ELEMS change the collectives, error
# feedback and rounding every rank's result (46-ef.sh): ranks that differ fail alike.
for kv in NCCLSHIM_ALGO=ring NCCLSHIM_BLOCK_ELEMS=128 NCCLSHIM_ERROR_FEEDBACK=1 NCCLSHIM_ROUNDING=stochastic; do
  name=${kv%%=*}
  NCCLSHIM_COMPRESS=int8 LD_LIBRARY_PATH="$HOSTNCCL_DIR" LD_PRELOAD="$SHIM" timeout 120 mpirun -np 1 -x "$kv" \
    "$TBIN/shimtest" once 5 : -np 1 "$TBIN/shimtest" once 5 >/dev/null 2>"$TMPD/mm.err"
  rc=$?
  [ $rc -eq 0 ] && [ "$(grep -c "WARN $name differs between the ranks" "$TMPD/mm.err")" -eq 2 ] \
    && [ "$(grep -c "ncclGetLastError: ncclshim: $name differs" "$TMPD/mm.err")" -eq 2 ] \
    && ok "$name differing between ranks: both fail with ncclInvalidUsage naming it" \
    || { not_ok "$name mismatch: rc=$rc"; sed 's/^/#   /' "$TMPD/mm.err" | head -5; }
done

# 8. A nonblocking communicator: exact once ncclCommGetAsyncError reports success.
check "nonblocking communicator, int8 two-phase all-reduce and reduce-scatter, 3 ranks: exact after the poll" \
  with NCCLSHIM_COMPRESS=int8 NCCLSHIM_ALGO=twophase mpirun_shim 3 "$P" nonblocking

# 9. The call log names each record's collective and algorithm: two-phase
# records say "algo":"twophase" and their wire format, pass-through ("plain")
# reduce-scatters are logged too. rs at 4 ranks: 16 reduce-scatters (Sum/Avg,
# in/out of place, 4 sizes), those of 1 and 100 elements per rank below
# MIN_BYTES; nonblocking at 3 ranks: 2 two-phase all-reduces, 1 reduce-scatter.
# count FILE WANT WIRE ACTION COLL ALGO: WANT records of that kind in FILE.
count() {
  local n; n=$(grep -c "\"wire_dtype\":\"$3\".*\"action\":\"$4\",\"members\":1,\"coll\":\"$5\",\"algo\":\"$6\"" "$1")
  [ "$n" = "$2" ] && ok "log $(basename "$1"): $2 $5 $6 $4 ($3) records" \
    || not_ok "log $(basename "$1"): $n $5 $6 $4 ($3) records, want $2"
}
mkdir -p "$TMPD/tplog"
for s in rs:4 nonblocking:3; do
  with NCCLSHIM_COMPRESS=int8 NCCLSHIM_ALGO=twophase NCCLSHIM_LOG=calls NCCLSHIM_LOG_FILE="$TMPD/tplog/${s%:*}.%r.jsonl" \
    mpirun_shim "${s#*:}" "$P" "${s%:*}" >/dev/null 2>&1 || not_ok "$s with NCCLSHIM_LOG=calls exited $?"
done
for r in 0 3; do
  f="$TMPD/tplog/rs.$r.jsonl"
  count "$f" 8 int8 compressed reducescatter twophase
  count "$f" 8 float passthrough reducescatter plain
  count "$f" 1 float passthrough allreduce plain
  check_grep "log rs.$r: the summary counts 9 pass-through and 8 compressed calls" \
    '"kind":"summary".*"actions":{"passthrough":{"calls":9,.*"compressed":{"calls":8,' "$f"
done
f="$TMPD/tplog/nonblocking.2.jsonl"
count "$f" 2 int8 compressed allreduce twophase
count "$f" 1 int8 compressed reducescatter twophase
check "log nonblocking.2: 3 call records in all" test "$(grep -c '"kind":"call"' "$f")" = 3

# 10. Pipelined pieces (NCCLSHIM_TWOPHASE_PIECE_BYTES, tp_plan.h): under
# nearest rounding the same bits as one piece, every format, with and without
# error feedback (3 ranks, 200003-element all-reduces and 70001-per-rank
# reduce-scatters, in and out of place, 3 rounds); more pieces make more real
# calls (so the pieces really happened: 16K gives ~17 pieces per chunk, 4096
# the 64-piece cap).
for w in $FORMATS; do
  for ef in 0 1; do
    for pb in 0 16K 4096; do
      with NCCLSHIM_COMPRESS=$w NCCLSHIM_ALGO=twophase NCCLSHIM_ERROR_FEEDBACK=$ef NCCLSHIM_TWOPHASE_PIECE_BYTES=$pb \
        mpirun_shim 3 "$P" digest >"$TMPD/dg.$pb" 2>&1 || echo "exit $?" >>"$TMPD/dg.$pb"
      grep '^digest' "$TMPD/dg.$pb" | sort >"$TMPD/dgd.$pb"
      awk '$1 == "realcalls" && $2 == 0 {print $3}' "$TMPD/dg.$pb" >"$TMPD/dgc.$pb"
    done
    if [ "$(wc -l <"$TMPD/dgd.0")" = 3 ] && cmp -s "$TMPD/dgd.0" "$TMPD/dgd.16K" && cmp -s "$TMPD/dgd.0" "$TMPD/dgd.4096" \
      && [ "$(cat "$TMPD/dgc.0")" -lt "$(cat "$TMPD/dgc.16K")" ] && [ "$(cat "$TMPD/dgc.16K")" -lt "$(cat "$TMPD/dgc.4096")" ]; then
      ok "pieces, $w, error feedback $ef: one piece, 16 KiB and 4 KiB pieces give the same bits ($(cat "$TMPD/dgc.0") < $(cat "$TMPD/dgc.16K") < $(cat "$TMPD/dgc.4096") real calls)"
    else
      not_ok "pieces, $w, error feedback $ef: results or call counts differ"
      for pb in 0 16K 4096; do sed "s/^/#   $pb: /" "$TMPD/dg.$pb" | tail -8; done
    fi
  done
done
# Stochastic rounding with pieces: every piece has its own random stream, so
# the bits differ from one piece, but every rank still holds the same bits
# and the bound holds (the program checks both).
check "pieces, int8, stochastic rounding: within the bound, identical on every rank (3 ranks)" \
  with NCCLSHIM_COMPRESS=int8 NCCLSHIM_ALGO=twophase NCCLSHIM_ROUNDING=stochastic NCCLSHIM_TWOPHASE_PIECE_BYTES=16K \
    mpirun_shim 3 "$P" bound 8
# The other modes with 4 KiB pieces: exact, reduce-scatter, nonblocking, groups.
for m in exact rs nonblocking group group-nb; do
  check "pieces of 4 KiB, int8, 3 ranks: $m" \
    with NCCLSHIM_COMPRESS=int8 NCCLSHIM_ALGO=twophase NCCLSHIM_MIN_BYTES=0 NCCLSHIM_TWOPHASE_PIECE_BYTES=4096 mpirun_shim 3 "$P" $m
done
# A real call failing among the pieces: fault's all-reduce of 65536 elements
# on 3 ranks has chunks of 21846 elements, 6 pieces of 4096 (16 KiB): phase 1
# is real calls 3-26, phase 2 (NCCLSHIM_TWOPHASE_GATHER=allgather) one
# all-gather per piece, 27-32; the reduce-scatter's 16 pieces 33-96 (97 is
# past both: the layout's count is exact).
for n in 3 20 27 30 32 33 70 96 97; do
  want="rc 2 0"; [ $n -ge 33 ] && want="rc 0 2"; [ $n -ge 97 ] && want="rc 0 0"
  with HOSTNCCL_FAIL_CALL=$n NCCLSHIM_COMPRESS=int8 NCCLSHIM_TWOPHASE_PIECE_BYTES=16K NCCLSHIM_TWOPHASE_GATHER=allgather \
    mpirun_shim 3 "$P" fault >"$TMPD/pfault.$n" 2>&1
  rc=$?
  [ $rc -eq 0 ] && [ "$(grep -c "^$want\$" "$TMPD/pfault.$n")" -eq 3 ] \
    && ok "pieces: real call $n fails: '$want' on all 3 ranks, no hang" \
    || { not_ok "pieces: real call $n fails: exit $rc"; sed 's/^/#   /' "$TMPD/pfault.$n" | tail -5; }
done
for w in fp16 int8; do
  check "pieces: staging unusable on rank 1 of 3 ($w): every piece's messages sent, all NaN, no hang, next call exact" \
    with NCCLSHIM_COMPRESS=$w NCCLSHIM_ALGO=twophase NCCLSHIM_TWOPHASE_PIECE_BYTES=4096 timeout "${TEST_TIMEOUT:-180}" \
      mpirun -np 1 $X "$P" poison : -np 1 $X -x NCCLSHIM_FAULT_STAGE=1 "$P" poison : -np 1 $X "$P" poison
done
check "NCCLSHIM_TWOPHASE_PIECE_BYTES differing between ranks: caught by the configuration check" \
  sh -c 'NCCLSHIM_COMPRESS=int8 LD_LIBRARY_PATH="$1" LD_PRELOAD="$2" timeout 120 mpirun -np 1 -x NCCLSHIM_TWOPHASE_PIECE_BYTES=4096 \
    "$3/shimtest" once 5 : -np 1 "$3/shimtest" once 5 2>&1 >/dev/null | grep -c "WARN NCCLSHIM_TWOPHASE_PIECE_BYTES differs between the ranks" | grep -qx 2' \
  _ "$HOSTNCCL_DIR" "$SHIM" "$TBIN"
