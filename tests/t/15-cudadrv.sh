#!/usr/bin/env bash
# 15-cudadrv.sh — the CUDA driver test double (tests/cudadrv): its own unit
# test (devices, contexts, stream ordering, events, capture invalidation in
# each mode, device memory crashing host code, pointer attributes, kernels
# from the shim's fatbin with marshalled parameters, counters), and the
# failing exit of a process that left a violation behind; then the kernel
# checker (tests/gpu/check_kernels, quick form) on the double; and the host
# NCCL running its collectives in stream order on it (2 MPI ranks).
source "$(dirname "$0")/../lib.sh"
CUDADRV_DIR="$BUILD/lib/cudadrv"

if [ ! -x "$TBIN/test_cudadrv" ] || [ ! -e "$CUDADRV_DIR/libcuda.so.1" ]; then
  not_ok "test_cudadrv and libcuda.so.1 are built (make test-build)"
  exit 1
fi
timeout "${TEST_TIMEOUT:-120}" "$TBIN/test_cudadrv" 2>"$TMPD/cudadrv.err"
rc=$?
[ $rc -eq 0 ] || { not_ok "test_cudadrv exited $rc"; sed 's/^/#   /' "$TMPD/cudadrv.err" | tail -n 20; }

# A process that leaves a violation behind fails at exit (status 86).
cat >"$TMPD/viol.c" <<'C'
#include <cuda.h>
int main(void) {
  CUcontext c; CUstream s; cuInit(0); cuDevicePrimaryCtxRetain(&c, 0); cuCtxSetCurrent(c);
  cuStreamCreate(&s, 1); cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL);
  CUdeviceptr p; cuMemAlloc(&p, 64); CUgraph g; cuStreamEndCapture(s, &g); return 0;
}
C
if cc -o "$TMPD/viol" "$TMPD/viol.c" -I"${CUDA_HOME:-/usr/local/cuda}/include" -L"$CUDADRV_DIR" -l:libcuda.so.1 \
     -Wl,-rpath,"$CUDADRV_DIR" 2>"$TMPD/viol.log"; then
  "$TMPD/viol" 2>"$TMPD/viol.err"; rc=$?
  if [ $rc -eq 86 ] && grep -q '^cudadrv: FAIL 1 capture violation' "$TMPD/viol.err"; then
    ok "a process that invalidated a capture exits 86 with a FAIL line"
  else not_ok "a process that invalidated a capture exits 86 with a FAIL line (exit $rc)"; sed 's/^/#   /' "$TMPD/viol.err"; fi
else not_ok "compile the violation probe"; sed 's/^/#   /' "$TMPD/viol.log"; fi


# The kernel checker on the double: the shim's CUDA backend end to end
# (module load, every kernel's marshalling, staging, marks, capture, side
# streams, the out-of-band exchange), bit for bit against the host casts.
if [ -x "$TBIN/check_kernels" ]; then
  LD_LIBRARY_PATH="$CUDADRV_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    timeout "${TEST_TIMEOUT:-300}" "$TBIN/check_kernels" --quick >"$TMPD/ck.log" 2>&1
  rc=$?
  grep -E '^(ok|not ok) ' "$TMPD/ck.log" | sed 's/^\(ok\|not ok\) - /\1 - check_kernels on the double: /'
  if [ $rc -eq 0 ] && grep -q '^# cudadrv test double' "$TMPD/ck.log"; then ok "check_kernels --quick ran on the double and passed"
  else not_ok "check_kernels --quick on the double exited $rc"; grep -v '^ok ' "$TMPD/ck.log" | tail -n 15 | sed 's/^/#   /'; fi
else
  not_ok "check_kernels is built (needs nvcc)"
fi

# The host NCCL on the double: collectives in stream order (2 ranks).
if [ -x "$TBIN/cudadrv_nccl_streams" ]; then
  mpirun_host 2 "$TBIN/cudadrv_nccl_streams" >"$TMPD/ns.log" 2>&1
  rc=$?
  grep -E '^(ok|not ok) ' "$TMPD/ns.log" | sed 's/^\(ok\|not ok\) - /\1 - host NCCL on the double: /'
  [ $rc -eq 0 ] || { not_ok "cudadrv_nccl_streams exited $rc"; tail -n 15 "$TMPD/ns.log" | sed 's/^/#   /'; }
else not_ok "cudadrv_nccl_streams is built"; fi
