# Every rank issues the same collectives (issue 12), the parts the fuzzer
# (45-fuzz.sh) does not pin down by itself: two-phase inside a user's group
# (issue 15), a failing host allocation of the collectives on one rank
# (NCCLSHIM_FAULT_HOST_ALLOC), and a failing read-back of the configuration
# check's answer on one rank (NCCLSHIM_FAULT_OOB_END). About 10 s.
. "$(dirname "$0")/../lib.sh"
shim_env_clean
export NCCLSHIM_LOG=off NCCLSHIM_BANNER=0
P="$TBIN/shim_twophase" F="$TBIN/shimfault"

# 1. Two-phase inside a (nested) user group, beside forwarded and integer
# members: exact, identical bits, no two-phase member reaching NCCL's
# all-reduce (on the shim before this branch, int8/fp8 members were
# forwarded in fp32 and fp16 members fused into the ring: the test fails).
for w in int8 fp8 fp16; do
  for m in group group-nb; do
    np=3; [ $w = fp8 ] && np=4
    check "two-phase $w inside a user group ($m, $np ranks): exact, identical, 3 two-phase calls per group" \
      with NCCLSHIM_COMPRESS=$w NCCLSHIM_ALGO=twophase NCCLSHIM_MIN_BYTES=0 mpirun_shim $np "$P" $m
  done
done
check "two-phase bf16 inside a user group (2 ranks)" \
  with NCCLSHIM_COMPRESS=bf16 NCCLSHIM_ALGO=twophase NCCLSHIM_MIN_BYTES=0 mpirun_shim 2 "$P" group

# 2./3. One rank's host allocation (the check's list of parked work) or its
# read-back of the check's answer fails: every rank fails that first call
# with ncclSystemError (recvbuff untouched), the next call checks again and
# is exact; no rank is left behind, unchecked (before: the failing rank
# alone failed and checked again at its next call, which its peers paired
# with a compressed all-reduce).
X="-x LD_PRELOAD=$SHIM${SAN_PRELOAD:+:$SAN_PRELOAD} -x LD_LIBRARY_PATH=$HOSTNCCL_DIR"
for f in HOST_ALLOC OOB_END; do
  check "NCCLSHIM_FAULT_$f=1 on rank 0 of 2: the first call fails on both alike, the next is exact" \
    mpirun_checked -np 1 $X -x NCCLSHIM_FAULT_$f=1 "$F" faultoob : -np 1 $X "$F" faultoob
  check "NCCLSHIM_FAULT_$f=1 on rank 2 of 3: the same" \
    mpirun_checked -np 2 $X "$F" faultoob : -np 1 $X -x NCCLSHIM_FAULT_$f=1 "$F" faultoob
done
# The read-back of the confirmation itself (the check's second exchange)
# fails on one rank: that rank had the answer and assumes its peers had it
# too (a single failure): every rank proceeds. One communicator: with two
# (shimtest group), their deferred checks run at once on threads of their own
# since the group end's per-communicator parts, so the process's second
# read-back is another check's answer as often as this one's confirmation.
check "NCCLSHIM_FAULT_OOB_END=2 on rank 1 of 2 (the confirmation): every rank proceeds, the call succeeds" \
  mpirun_checked -np 1 $X "$TBIN/shimtest" once 0 : -np 1 $X -x NCCLSHIM_FAULT_OOB_END=2 "$TBIN/shimtest" once 0
# Host allocations of a group's work items on one rank (from the reserve):
# results exact on both ranks (N=1..4 are the first call's and the deferred
# check's; from 5 on the group's items).
for n in 5 6 8; do
  check "NCCLSHIM_FAULT_HOST_ALLOC=$n on rank 0 of 2, grouped calls: exact on both (the reserve)" \
    mpirun_checked -np 1 $X -x NCCLSHIM_FAULT_HOST_ALLOC=$n "$TBIN/shimtest" group : -np 1 $X "$TBIN/shimtest" group
done
