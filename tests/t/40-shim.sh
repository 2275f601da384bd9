# The shim over the host NCCL: bit-identical pass-through, exact and
# quantized compression, groups and fusion, special values, the banner,
# bad and mismatched settings, and the library's exports.
. "$(dirname "$0")/../lib.sh"
P="$TBIN/shimtest"
unset NCCLSHIM_COMPRESS NCCLSHIM_LOG
export NCCLSHIM_LOG=off

# 1. Pass-through is bit-identical to plain NCCL.
mpirun_host 3 "$P" hash >"$TMPD/plain" 2>"$TMPD/plain.err"
NCCLSHIM_COMPRESS=off mpirun_shim 3 "$P" hash >"$TMPD/off" 2>"$TMPD/off.err"
NCCLSHIM_DISABLE=1 mpirun_shim 3 "$P" hash >"$TMPD/disabled" 2>"$TMPD/disabled.err"
mpirun_shim 3 "$P" hash >"$TMPD/default" 2>"$TMPD/default.err"
n=$(wc -l <"$TMPD/plain")
[ "$n" -eq $((12 * 5 * 8 * 2)) ] && ok "hash run covers 12 datatypes x 5 ops x 8 sizes x 2 placements ($n cases)" || not_ok "hash run printed $n cases"
check "NCCLSHIM_COMPRESS=off: every datatype and op bit-identical to no preload" cmp "$TMPD/plain" "$TMPD/off"
check "NCCLSHIM_DISABLE=1: bit-identical to no preload" cmp "$TMPD/plain" "$TMPD/disabled"
# With compression on, everything except fp32 (type 7) Sum/Avg at or above the threshold is untouched.
untouched() { awk '!($2 == 7 && ($4 == 0 || $4 == 4) && $6 >= 16384)' "$1"; }
check "default settings: every call not compressed is bit-identical to no preload" \
  cmp <(untouched "$TMPD/plain") <(untouched "$TMPD/default")
[ "$(untouched "$TMPD/plain" | wc -l)" -lt "$n" ] && ! cmp -s "$TMPD/plain" "$TMPD/default" \
  && ok "default settings do compress the fp32 Sum/Avg cases (results differ from fp32 there)" \
  || not_ok "default settings compressed nothing"
grep -q "ncclshim" "$TMPD/disabled.err" && not_ok "NCCLSHIM_DISABLE=1 printed something" || ok "NCCLSHIM_DISABLE=1 is silent"

# 2. Compression: wire-exact inputs come back exact; random inputs equal the quantizing reference.
for np in 2 3 4; do
  for w in fp16 bf16; do
    check "exact inputs bit-exact, $w, $np ranks (sizes 0..300001, threshold +-1, in/out of place, offsets)" \
      with NCCLSHIM_COMPRESS=$w mpirun_shim $np "$P" exact
    check "random inputs equal the fp32->$w->ring->fp32 reference, $np ranks (NCCLSHIM_ALGO=ring)" \
      with NCCLSHIM_COMPRESS=$w NCCLSHIM_ALGO=ring mpirun_shim $np "$P" quantized
  done
done
check "pipelined in 64 KiB chunks (NCCLSHIM_CHUNK_BYTES=64K): exact inputs bit-exact, 3 ranks" with NCCLSHIM_CHUNK_BYTES=64K mpirun_shim 3 "$P" exact
check "pipelined in 64 KiB chunks: random inputs equal the reference, 2 ranks" with NCCLSHIM_CHUNK_BYTES=64K mpirun_shim 2 "$P" quantized
check "NCCLSHIM_PRESCALE=4: exact inputs still exact (4 ranks)" with NCCLSHIM_PRESCALE=4 mpirun_shim 4 "$P" exact
check "NCCLSHIM_PRESCALE=1024: equals the reference that scales the same way (3 ranks)" with NCCLSHIM_PRESCALE=1024 mpirun_shim 3 "$P" quantized

# 3. Groups: cast-backs after the outermost end, fusion, mixed members, two communicators, nesting.
for np in 2 3 4; do
  check "grouped calls exact with fusion (default), $np ranks" mpirun_shim $np "$P" group
done
check "grouped calls exact, fusion split at FUSE_BYTES=4K" with NCCLSHIM_FUSE_BYTES=4K mpirun_shim 4 "$P" group
check "grouped calls exact, fusion off (cast-backs queued)" with NCCLSHIM_FUSE_BYTES=0 NCCLSHIM_MIN_BYTES=0 mpirun_shim 3 "$P" group
check "grouped calls exact, bf16 wire" with NCCLSHIM_COMPRESS=bf16 mpirun_shim 2 "$P" group

# 4. Inf, NaN, -0, subnormals: the same on every rank; fp16 overflow becomes Inf.
for w in fp16 bf16; do
  check "special values identical on all ranks and as documented, $w" with NCCLSHIM_COMPRESS=$w mpirun_shim 3 "$P" special
done

# 5. The banner: once per communicator, from its rank 0.
NCCLSHIM_LOG=off mpirun_shim 4 "$P" group 2>"$TMPD/banner.err" >/dev/null
b=$(grep -c "active on communicator" "$TMPD/banner.err")
[ "$b" -eq 2 ] && ok "banner printed once per communicator (2 communicators, 4 ranks)" || not_ok "banner printed $b times"
check_grep "banner names the NCCL version and how it was found" "NCCL 2\.[0-9]+\.[0-9]+ via pncclAllReduce from the loaded libnccl.so.2" "$TMPD/banner.err"

# 6. Bad settings stop the job at its first collective with ncclInvalidUsage (5).
for kv in NCCLSHIM_COMPRESS=fp4 NCCLSHIM_ALGO=tree NCCLSHIM_BLOCK_ELEMS=8 NCCLSHIM_MIN_BYTES=-3 NCCLSHIM_ACCUM_STEPS=abc NCCLSHIM_BOGUS=1 NCCLSHIM_PRESCALE= NCCLSHIM_PRESCALE=1e-40 NCCLSHIM_LOG_RING=1e9; do
  with "$kv" mpirun_shim 2 "$P" once 5 >"$TMPD/bad.out" 2>"$TMPD/bad.err"
  rc=$?
  name=${kv%%=*}
  if [ $rc -eq 0 ] && grep -q "$name" "$TMPD/bad.err" && [ "$(grep -c "ncclGetLastError: ncclshim: .*$name" "$TMPD/bad.err")" -eq 2 ]; then
    ok "$kv: ncclInvalidUsage and a message naming $name, also from ncclGetLastError on both ranks"
  else not_ok "$kv: rc=$rc"; sed 's/^/#   /' "$TMPD/bad.err" | head -5; fi
done
HOSTNCCL_VERSION=20903 NCCLSHIM_COMPRESS=bf16 mpirun_shim 2 "$P" once 5 >/dev/null 2>"$TMPD/old.err" \
  && grep -q "needs NCCL >= 2.10" "$TMPD/old.err" && ok "bf16 refused on NCCL 2.9 with a clear message" || not_ok "bf16 on NCCL 2.9 not refused"

# 7. Settings that differ between ranks: every rank fails the same call, naming the setting.
LD_LIBRARY_PATH="$HOSTNCCL_DIR" LD_PRELOAD="$SHIM" TEST_TIMEOUT=120 mpirun_checked -np 1 -x NCCLSHIM_MIN_BYTES=1024 "$P" once 5 : \
  -np 1 "$P" once 5 >"$TMPD/mm.out" 2>"$TMPD/mm.err"
rc=$?
m=$(grep -v ncclGetLastError "$TMPD/mm.err" | grep -c "NCCLSHIM_MIN_BYTES differs between the ranks")
[ $rc -eq 0 ] && [ "$m" -eq 2 ] && [ "$(grep -c 'ncclGetLastError: ncclshim: NCCLSHIM_MIN_BYTES differs' "$TMPD/mm.err")" -eq 2 ] \
  && ok "MIN_BYTES differing between ranks: both ranks fail with ncclInvalidUsage naming it (and ncclGetLastError says so)" \
  || { not_ok "mismatch: rc=$rc, $m messages"; sed 's/^/#   /' "$TMPD/mm.err" | head; }
# ... at 4 ranks, one odd: every rank names every value and the ranks that hold it.
LD_LIBRARY_PATH="$HOSTNCCL_DIR" LD_PRELOAD="$SHIM" TEST_TIMEOUT=120 mpirun_checked -np 3 "$P" once 5 : \
  -np 1 -x NCCLSHIM_COMPRESS=int8 "$P" once 5 >"$TMPD/mm4.out" 2>"$TMPD/mm4.err"
rc=$? m=$(grep -c "WARN NCCLSHIM_COMPRESS differs between the ranks of communicator [0-9a-fx]*: 'fp16' on ranks 0-2, 'int8' on rank 3 (this rank: [0-3])" "$TMPD/mm4.err")
[ $rc -eq 0 ] && [ "$m" -eq 4 ] && ok "COMPRESS=int8 on rank 3 of 4: every rank fails naming each value and its ranks ('fp16' on ranks 0-2, 'int8' on rank 3)" \
  || { not_ok "4-rank mismatch: rc=$rc, $m messages naming the ranks"; grep WARN "$TMPD/mm4.err" | head -3 | sed 's/^/#   /'; }
# A rank without the shim (NCCLSHIM_DISABLE=1) whose first two collectives
# match the check's and its confirmation's sizes (an int64 Max of the check's
# slots: 2 per setting, 6 more, one per rank; then 1): where NCCL completes
# such a pair the rank with the shim says a rank runs without it (elsewhere
# real NCCL hangs: docs/usage.md, every rank preloads the same way).
rows=$("$BIN/ncclshim-envdoc" | grep -c '^| `NCCLSHIM_')
LD_LIBRARY_PATH="$HOSTNCCL_DIR" TEST_TIMEOUT=120 mpirun_checked -np 1 -x LD_PRELOAD="$SHIM" "$P" once 5 : \
  -np 1 -x LD_PRELOAD="$SHIM" -x NCCLSHIM_DISABLE=1 "$P" pairs $((2 * rows + 6 + 2)) >"$TMPD/pair.out" 2>"$TMPD/pair.err"
rc=$?
[ $rc -eq 0 ] && grep -q "ncclGetLastError: ncclshim: the settings check of communicator .* was paired with another collective: a rank runs without the shim" "$TMPD/pair.err" \
  && ok "a rank with NCCLSHIM_DISABLE=1 whose first calls pair with the settings check: the rank with the shim fails naming that cause, not a setting" \
  || { not_ok "a disabled rank paired with the check: rc=$rc"; grep -E "WARN|result" "$TMPD/pair.err" "$TMPD/pair.out" | head -3 | sed 's/^/#   /'; }
# ... and with NCCLSHIM_LOG=calls to a directory, every rank's log says so
# (issue 24: no file at all was written), and so does the report.
mkdir -p "$TMPD/mmlog"
LD_LIBRARY_PATH="$HOSTNCCL_DIR" LD_PRELOAD="$SHIM" TEST_TIMEOUT=120 mpirun_checked \
  -np 1 -x NCCLSHIM_MIN_BYTES=1024 -x NCCLSHIM_LOG=calls -x NCCLSHIM_LOG_FILE="$TMPD/mmlog/" "$P" once 5 : \
  -np 1 -x NCCLSHIM_LOG=calls -x NCCLSHIM_LOG_FILE="$TMPD/mmlog/" "$P" once 5 >/dev/null 2>&1
n=$(cat "$TMPD"/mmlog/*.jsonl 2>/dev/null | grep -c '"kind":"summary".*"failed":"NCCLSHIM_MIN_BYTES differs')
python3 "$ROOT/bench/ncclshim-report" "$TMPD/mmlog" >"$TMPD/mmlog.txt" 2>&1
[ "$n" -eq 2 ] && [ "$(grep -c 'FAILED its settings check on rank [01]: NCCLSHIM_MIN_BYTES differs' "$TMPD/mmlog.txt")" -eq 2 ] \
  && ok "the same with NCCLSHIM_LOG=calls to a directory: each rank's log has its summary saying why, the report too" \
  || { not_ok "mismatch with LOG=calls to a directory: $n summaries"; ls "$TMPD/mmlog" | sed 's/^/#   /'; head -5 "$TMPD/mmlog.txt" | sed 's/^/#   /'; }
LD_LIBRARY_PATH="$HOSTNCCL_DIR" LD_PRELOAD="$SHIM" TEST_TIMEOUT=120 mpirun_checked -np 1 -x NCCLSHIM_COMPRESS=bf16 "$P" once 5 : \
  -np 2 "$P" once 5 >/dev/null 2>"$TMPD/mm2.err" && [ "$(grep -v ncclGetLastError "$TMPD/mm2.err" | grep -c 'NCCLSHIM_COMPRESS differs')" -eq 3 ] \
  && ok "COMPRESS differing on 1 of 3 ranks: all 3 fail naming it" || not_ok "COMPRESS mismatch not detected on every rank"

# 8. The library: exports, no link to NCCL or the CUDA runtime, inert outside NCCL programs.
exports=$(nm -D --defined-only "$SHIM" | awk '$2 ~ /[TW]/ {print $3}' | sort | tr '\n' ' ')
want="ncclAllGather ncclAllReduce ncclAlltoAll ncclBcast ncclBroadcast ncclCommAbort ncclCommDestroy ncclCommFinalize ncclCommGetAsyncError ncclCommInitAll ncclCommInitRank ncclCommInitRankConfig ncclCommInitRankScalable ncclCommSplit ncclGather ncclGetLastError ncclGroupEnd ncclGroupStart ncclRecv ncclReduce ncclReduceScatter ncclScatter ncclSend ncclshim_catchup ncclshim_get_stats ncclshim_optimizer_step ncclshim_setting ncclshim_version ncclshim_watch_steps "
[ "$exports" = "$want" ] && ok "exports exactly the hooked nccl* functions and ncclshim_*" || not_ok "exports: $exports"
readelf -d "$SHIM" | grep -Eq 'NEEDED.*(libnccl|libcudart|libcuda)' && not_ok "DT_NEEDED on NCCL or CUDA" \
  || ok "no DT_NEEDED on libnccl, libcudart or libcuda"
out=$(LD_PRELOAD="$SHIM" /bin/echo inert 2>&1; LD_PRELOAD="$SHIM" python3 -c 'print("inert")' 2>&1)
[ "$out" = "inert
inert" ] && ok "inert in programs that never call NCCL (echo, python3)" || not_ok "not inert: $out"

# 9. What the casts lost is counted: the 'special' run has 2500 values beyond
# fp16's range and 2500 fp32 subnormals per rank (20000 elements, i % 8 == 5 and 3).
with NCCLSHIM_LOG=summary mpirun_shim 2 "$P" special >/dev/null 2>"$TMPD/counts.err"
check_grep "summary counts 2500 values overflowed to Inf and 2500 flushed to zero (rank 0)" \
  "casts to fp16 in this process: 2500 values overflowed to \+-Inf, 2500 non-zero values flushed to zero" "$TMPD/counts.err"
check_grep "... with advice for the flushed values (bf16, or a prescale below 1)" \
  "advice: fp16 flushes .*NCCLSHIM_COMPRESS=bf16.*NCCLSHIM_PRESCALE=F with F a power of two below 1" "$TMPD/counts.err"
check_grep "... and for the overflowed ones (GradScaler, bf16, a prescale above 1)" \
  "advice: fp16 overflows beyond 65504.*GradScaler.*above 1" "$TMPD/counts.err"
# int8 (two-phase) counts the values its blocks flush to zero too (issue 24: it never did): at
# least the 2500 fp32 subnormals per rank (2^100 and more below their block's largest value).
with NCCLSHIM_LOG=summary NCCLSHIM_COMPRESS=int8 NCCLSHIM_ALGO=twophase mpirun_shim 2 "$P" special >/dev/null 2>"$TMPD/c8.err"
n8=$(sed -n 's/.*casts to int8 in this process: [0-9]* values overflowed to +-Inf, \([0-9]*\) non-zero values flushed to zero.*/\1/p' "$TMPD/c8.err" | head -n 1)
[ -n "$n8" ] && [ "$n8" -ge 2500 ] && grep -q "advice: int8 blocks share one scale.*NCCLSHIM_ERROR_FEEDBACK=1" "$TMPD/c8.err" \
  && ok "int8 counts values flushed to zero ($n8 >= 2500 on rank 0), with advice (error feedback, smaller blocks, bf16)" \
  || not_ok "int8 flush count: '${n8:-none}'; $(grep 'casts to\|advice' "$TMPD/c8.err" | head -n 3 | tr '\n' ' ')"

# 10. Fusion together with accumulation: fused groups as backward passes.
# The first group (communicator not yet checked) counts as pass 0 too.
for K in 2 3; do
  for np in 2 3; do
    check "fused groups + NCCLSHIM_ACCUM_STEPS=$K, $np ranks: synced passes exact sums, skipped ones W*x" \
      with NCCLSHIM_ACCUM_STEPS=$K mpirun_shim $np "$P" accumgroup $K
  done
done
with NCCLSHIM_ACCUM_STEPS=2 NCCLSHIM_LOG=summary mpirun_shim 2 "$P" accumgroup 2 >/dev/null 2>"$TMPD/accfuse.err"
check_grep "... and the synced passes were fused (summary has a fused row)" "^ncclshim\[[^]]*\] +fused +[1-9]" "$TMPD/accfuse.err"
check_grep "... and the others skipped (summary has a skipped row)" "^ncclshim\[[^]]*\] +skipped +[1-9]" "$TMPD/accfuse.err"
