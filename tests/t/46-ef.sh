# Error feedback and stochastic rounding of the two-phase collectives
# (shim/algo/ef.c, compress/wire_bits.h) over the host NCCL: the running mean
# of a repeated bucket converges to the fp32 sum with error feedback (N*|err|
# within the documented bound) and keeps its bias without; a changed call
# sequence drops a bucket's state; stochastic rounding keeps every rank's
# result identical; settings that differ between ranks fail alike.
. "$(dirname "$0")/../lib.sh"
P="$TBIN/shim_ef"
export NCCLSHIM_LOG=off NCCLSHIM_BANNER=0 NCCLSHIM_ALGO=twophase NCCLSHIM_MIN_BYTES=0
unset NCCLSHIM_COMPRESS NCCLSHIM_ERROR_FEEDBACK NCCLSHIM_ROUNDING

# 1. Convergence of the running mean (N = 64 calls of one bucket, 3 ranks).
for w in fp16 int8 fp8; do
  check "$w, 3 ranks, error feedback: N*|mean - fp32 sum| <= B after 64 calls, identical on every rank" \
    with NCCLSHIM_COMPRESS=$w NCCLSHIM_ERROR_FEEDBACK=1 mpirun_shim 3 "$P" converge 64 ef
done
check "int8, 3 ranks, no error feedback: the bias stays (N*|mean - sum| > B: the check above can fail)" \
  with NCCLSHIM_COMPRESS=int8 mpirun_shim 3 "$P" converge 64
check "bf16, 2 ranks, error feedback with stochastic rounding: converges too, identical on every rank" \
  with NCCLSHIM_COMPRESS=bf16 NCCLSHIM_ERROR_FEEDBACK=1 NCCLSHIM_ROUNDING=stochastic mpirun_shim 2 "$P" converge 64 ef

# 2. A changed sequence drops the bucket's state; a reduce-scatter carries its residual.
check "int8, 2 ranks: B's residual carried, dropped when C took its position, reduce-scatter carried" \
  with NCCLSHIM_COMPRESS=int8 NCCLSHIM_ERROR_FEEDBACK=1 mpirun_shim 2 "$P" reset

# 3. Both settings are in the configuration check: ranks that differ fail alike.
for kv in NCCLSHIM_ERROR_FEEDBACK=1 NCCLSHIM_ROUNDING=stochastic; do
  name=${kv%%=*}
  NCCLSHIM_COMPRESS=int8 LD_LIBRARY_PATH="$HOSTNCCL_DIR" LD_PRELOAD="$SHIM" timeout 120 mpirun -np 1 -x "$kv" \
    "$TBIN/shimtest" once 5 : -np 1 "$TBIN/shimtest" once 5 >/dev/null 2>"$TMPD/mm.err"
  rc=$?
  [ $rc -eq 0 ] && [ "$(grep -c "$name differs between the ranks" "$TMPD/mm.err")" -eq 2 ] \
    && ok "$name differing between ranks: both fail with ncclInvalidUsage naming it" \
    || { not_ok "$name mismatch: rc=$rc"; sed 's/^/#   /' "$TMPD/mm.err" | head -5; }
done
