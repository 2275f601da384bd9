# bf16 and fp16 all-reduces and reduce-scatters (issue 47) through two
# phases with fp32 sums over the host NCCL: exact inputs exact and identical
# on every rank for every wire (the input's own, the block-scaled ones), in
# and out of place, Sum and Avg; random and cancelling inputs within the
# documented bounds against an exact (fp64) sum; with no settings a 16-bit
# call is left to NCCL (its own wire moves plain's bytes, so it never gains).
. "$(dirname "$0")/../lib.sh"
P="$TBIN/shim_half"
export NCCLSHIM_LOG=off NCCLSHIM_BANNER=0
unset NCCLSHIM_COMPRESS NCCLSHIM_ALGO

# 1. Exact inputs, every wire, both input types, 2 to 4 ranks.
[ -n "$FORMATS" ] || not_ok "no formats from ncclshim-envdoc --names (not built?)"
for d in bf16 fp16; do
  for w in $FORMATS; do
    nps="2 3"; [ $w = int8 ] && nps="3 4"; [ $w = fp8 ] && nps=4; [ $w = int4 ] && nps="2 4"; [ $w = fp16s ] && nps=3
    for np in $nps; do
      check "$d input, COMPRESS=$w, $np ranks, two phases: exact on every rank (AR sizes 1..300001, RS 1..70001 per rank, in/out of place, Sum/Avg), no $d all-reduce reaching NCCL" \
        with NCCLSHIM_COMPRESS=$w NCCLSHIM_ALGO=twophase NCCLSHIM_MIN_BYTES=0 EXPECT_TP=1 mpirun_shim $np "$P" exact $d
    done
  done
done
check "the check can fail: COMPRESS=off sends the 16-bit all-reduces to NCCL" \
  check_fails with NCCLSHIM_COMPRESS=off EXPECT_TP=1 mpirun_shim 2 "$P" exact bf16
check "no settings (auto): results exact, the 16-bit calls left to NCCL" \
  with NCCLSHIM_MIN_BYTES=0 mpirun_shim 4 "$P" exact bf16
check "ALGO=twophase, 4 KiB pieces, prescale 4: still exact (bf16, 3 ranks)" \
  with NCCLSHIM_COMPRESS=bf16 NCCLSHIM_ALGO=twophase NCCLSHIM_MIN_BYTES=0 NCCLSHIM_TWOPHASE_PIECE_BYTES=4096 \
  NCCLSHIM_PRESCALE=4 EXPECT_TP=1 mpirun_shim 3 "$P" exact bf16
check "bf16 input, int8 wire, error feedback and stochastic rounding (fp32 residuals of the widened input): exact inputs stay exact, 3 ranks" \
  with NCCLSHIM_COMPRESS=int8 NCCLSHIM_ALGO=twophase NCCLSHIM_MIN_BYTES=0 NCCLSHIM_ERROR_FEEDBACK=1 \
  NCCLSHIM_ROUNDING=stochastic EXPECT_TP=1 mpirun_shim 3 "$P" exact bf16
for d in bf16 fp16; do
  check "$d in user groups (two all-reduces and a reduce-scatter, 6 rounds, 64 KiB of staging at first): exact whether forwarded for want of staging (in $d, not fp32: fuzzer seed 160056) or two-phase after the group end" \
    with NCCLSHIM_COMPRESS=int8 NCCLSHIM_ALGO=twophase NCCLSHIM_STAGING_BYTES=64K mpirun_shim 3 "$P" group $d
done
with NCCLSHIM_COMPRESS=bf16 NCCLSHIM_ALGO=twophase NCCLSHIM_LOG=summary mpirun_shim 2 "$P" bound bf16 65536 random >"$TMPD/sum" 2>&1
check_grep "the summary counts the 16-bit calls in two phases, on their own wire, and says what that costs" \
  "# 16-bit inputs: 1 bf16/fp16 call\(s\) in two phases with fp32 sums, 1 on their own wire \(plain's bytes; an all-reduce issues one launch more than plain\)" "$TMPD/sum"

# 2. Random and cancelling inputs: every element within its wire's bound.
for d in bf16 fp16; do
  for w in $d int8 fp8 int4; do # the input's own wire, then the block-scaled ones
    for kind in random cancel; do
      np=4; [ $w = $d ] && np=8
      with NCCLSHIM_COMPRESS=$w NCCLSHIM_ALGO=twophase CHECK_BOUND=1 mpirun_shim $np "$P" bound $d 65536 $kind \
        >"$TMPD/b" 2>&1 && grep -q "^acc $d $w twophase $np $kind " "$TMPD/b" \
        && ok "$d input, wire $w, $np ranks, $kind inputs: every element within the bound (max, median |error|/sum|x|, share not correctly rounded: $(grep '^acc' "$TMPD/b" | cut -d' ' -f7-9))" \
        || { not_ok "$d input, wire $w, $np ranks, $kind inputs"; sed 's/^/#   /' "$TMPD/b" | tail -5; }
    done
  done
done
# The input's own wire rounds once: every element is the exact sum rounded
# to the input type (the inputs' fp32 sum is exact here) at 16 ranks, where
# plain NCCL's ring, rounding at every hop, is not.
with NCCLSHIM_COMPRESS=bf16 NCCLSHIM_ALGO=twophase CHECK_BOUND=1 mpirun_shim 16 "$P" bound bf16 65536 random >"$TMPD/own" 2>&1
with NCCLSHIM_DISABLE=1 mpirun_shim 16 "$P" bound bf16 65536 random >"$TMPD/plain" 2>&1
own=$(grep '^acc' "$TMPD/own" | cut -d' ' -f9) plain=$(grep '^acc' "$TMPD/plain" | cut -d' ' -f9)
[ "$own" = 0 ] && [ -n "$plain" ] && [ "$plain" != 0 ] \
  && ok "16 ranks, bf16: the shim's bf16 wire gives the correctly rounded sum everywhere; plain NCCL's ring misses it in a share $plain" \
  || { not_ok "16 ranks, bf16: own wire off by $own, plain $plain"; tail -3 "$TMPD/own" "$TMPD/plain" | sed 's/^/#   /'; }

# 3. On device buffers of the CUDA driver double (tests/shim/devmirror.h: the
# all-reduces), the CUDA backend's casts and kernels: exact inputs exact, and
# random inputs the same bits as the host backend's.
XDEV="SHIMTEST_DEVICE=1 SHIMTEST_SYNC_AUDIT=1 LD_LIBRARY_PATH=$BUILD/lib/cudadrv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for w in bf16 int8 int4; do
  check "device buffers, bf16 input, COMPRESS=$w, 3 ranks: exact all-reduces exact, no synchronising driver call" \
    with $XDEV NCCLSHIM_COMPRESS=$w NCCLSHIM_ALGO=twophase NCCLSHIM_MIN_BYTES=0 EXPECT_TP=1 mpirun_shim 3 "$P" exact bf16
  with NCCLSHIM_COMPRESS=$w NCCLSHIM_ALGO=twophase mpirun_shim 4 "$P" bound fp16 65536 random >"$TMPD/h" 2>&1
  with $XDEV NCCLSHIM_COMPRESS=$w NCCLSHIM_ALGO=twophase mpirun_shim 4 "$P" bound fp16 65536 random >"$TMPD/d" 2>&1
  h=$(grep '^acc' "$TMPD/h" | cut -d' ' -f10) d=$(grep '^acc' "$TMPD/d" | cut -d' ' -f10)
  [ -n "$h" ] && [ "$h" = "$d" ] && ok "device buffers, fp16 input, COMPRESS=$w, 4 ranks, random inputs: the host backend's bits ($h)" \
    || { not_ok "device buffers, fp16 input, COMPRESS=$w: digest $d, host $h"; tail -3 "$TMPD/d" | sed 's/^/#   /'; }
done
