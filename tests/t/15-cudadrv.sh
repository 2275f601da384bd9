#!/usr/bin/env bash
# 15-cudadrv.sh — the CUDA driver test double (tests/cudadrv): its own unit
# test (devices, contexts, stream ordering, events, capture invalidation in
# each mode, device memory crashing host code, pointer attributes, kernels
# from the shim's fatbin with marshalled parameters, counters), and the
# failing exit of a process that left a violation behind; the host NCCL
# running its collectives in stream order on it (2 MPI ranks), also under the
# shim; then the shim's shimtest suites with device buffers on the double.
# (The kernel checker on the double: 17-gpu-check.sh.)
source "$(dirname "$0")/../lib.sh"
CUDADRV_DIR="$BUILD/lib/cudadrv"

if [ ! -x "$TBIN/test_cudadrv" ] || [ ! -e "$CUDADRV_DIR/libcuda.so.1" ]; then
  not_ok "test_cudadrv and libcuda.so.1 are built (make test-build)"
  exit 1
fi
# The execution model the double runs the kernels on (tests/simt).
if [ -x "$TBIN/test_simt" ]; then
  timeout "${TEST_TIMEOUT:-120}" "$TBIN/test_simt" >"$TMPD/simt.out" 2>&1
  sed -n 's/^\(ok\|not ok\) - /\1 - simt: /p' "$TMPD/simt.out"
  grep -q '^[1-9][0-9]* passed, 0 failed$' "$TMPD/simt.out" || { not_ok "test_simt"; tail -n 5 "$TMPD/simt.out" | sed 's/^/#   /'; }
else
  not_ok "test_simt is built (make test-build)"
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


# The kernel checker (tests/gpu/check_kernels --quick) on the double runs in
# 17-gpu-check.sh, through make gpu-check's own script.

# The host NCCL on the double: collectives in stream order (2 ranks).
if [ -x "$TBIN/cudadrv_nccl_streams" ]; then
  mpirun_host 2 "$TBIN/cudadrv_nccl_streams" >"$TMPD/ns.log" 2>&1
  rc=$?
  grep -E '^(ok|not ok) ' "$TMPD/ns.log" | sed 's/^\(ok\|not ok\) - /\1 - host NCCL on the double: /'
  [ $rc -eq 0 ] || { not_ok "cudadrv_nccl_streams exited $rc"; tail -n 15 "$TMPD/ns.log" | sed 's/^/#   /'; }
  for m in capturefirst capturequery; do
    mpirun_host 2 "$TBIN/cudadrv_nccl_streams" $m >"$TMPD/ns-$m.log" 2>&1
    rc=$?
    grep -E '^(ok|not ok) ' "$TMPD/ns-$m.log" | sed 's/^\(ok\|not ok\) - /\1 - host NCCL on the double: /'
    [ $rc -eq 0 ] || { not_ok "cudadrv_nccl_streams $m exited $rc"; tail -n 15 "$TMPD/ns-$m.log" | sed 's/^/#   /'; }
  done
  # The same under the shim (every all-reduce compressed): still in stream
  # order, captures intact, and no synchronising driver call inside any
  # collective (the context's one-time setup happens in ncclCommInitRank).
  for m in order capturefirst capturequery; do
    LD_LIBRARY_PATH="$CUDADRV_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" NCCLSHIM_MIN_BYTES=0 NCCLSHIM_LOG=off \
      mpirun_shim 2 "$TBIN/cudadrv_nccl_streams" $m >"$TMPD/nss-$m.log" 2>&1
    rc=$?
    grep -E '^(ok|not ok) ' "$TMPD/nss-$m.log" | sed 's/^\(ok\|not ok\) - /\1 - under the shim, on the double ('$m'): /'
    [ $rc -eq 0 ] || { not_ok "cudadrv_nccl_streams $m under the shim exited $rc"; grep -E 'cudadrv|FATAL' "$TMPD/nss-$m.log" | tail -n 8 | sed 's/^/#   /'; }
  done
else not_ok "cudadrv_nccl_streams is built"; fi

# The shim's suites with device buffers: shimtest with SHIMTEST_DEVICE=1
# (tests/shim/devmirror.h) under the shim, on the double: the CUDA backend
# end to end (kernels, staging, fusion, pipelining, accumulation) over the
# host NCCL in stream order. A violation the double records fails the run
# (exit 86), and SHIMTEST_SYNC_AUDIT=1 makes one of them any synchronising
# driver call made inside a user's collective (there must be none: the
# shim's one-time context setup runs in ncclCommInitRank).
P="$TBIN/shimtest"
export LD_LIBRARY_PATH="$CUDADRV_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
dev_shim() { SHIMTEST_DEVICE=1 SHIMTEST_SYNC_AUDIT=1 mpirun_shim "$@"; }
unset NCCLSHIM_COMPRESS
export NCCLSHIM_LOG=off
( unset LD_LIBRARY_PATH; mpirun_host 3 "$P" hash >"$TMPD/plain" 2>"$TMPD/plain.err" )
CUDADRV_STATS=1 dev_shim 3 "$P" hash >"$TMPD/dev" 2>"$TMPD/dev.err"
NCCLSHIM_COMPRESS=off dev_shim 3 "$P" hash >"$TMPD/dev-off" 2>"$TMPD/dev-off.err"
n=$(wc -l <"$TMPD/plain")
[ "$n" -eq 960 ] && ok "host-memory hash run without the double: $n cases" || not_ok "hash run printed $n cases"
check "device buffers, NCCLSHIM_COMPRESS=off: every datatype and op bit-identical to plain NCCL on host memory" \
  cmp "$TMPD/plain" "$TMPD/dev-off"
untouched() { awk '!($2 == 7 && ($4 == 0 || $4 == 4) && $6 >= 16384)' "$1"; }
check "device buffers, default settings: every call not compressed is bit-identical" \
  cmp <(untouched "$TMPD/plain") <(untouched "$TMPD/dev")
! cmp -s "$TMPD/plain" "$TMPD/dev" && ok "device buffers, default settings: the fp32 Sum/Avg cases were compressed" \
  || { not_ok "device buffers: nothing was compressed"; tail -n 5 "$TMPD/dev.err" | sed 's/^/#   /'; }
check_grep "device buffers: the shim's casts ran as kernels on the double" \
  '^cudadrv: stats: [1-9][0-9]* kernel launches \([1-9][0-9]* blocks, largest grid [0-9]*\), [1-9][0-9]* host operations' "$TMPD/dev.err"
for w in fp16 bf16; do
  check "device buffers: exact inputs bit-exact, $w, 3 ranks" with NCCLSHIM_COMPRESS=$w dev_shim 3 "$P" exact
done
check "device buffers: random inputs equal the quantizing reference, 2 ranks" dev_shim 2 "$P" quantized
check "device buffers: pipelined in 64 KiB chunks, exact, 2 ranks" with NCCLSHIM_CHUNK_BYTES=64K dev_shim 2 "$P" exact
check "device buffers: grouped calls exact with fusion, 3 ranks" dev_shim 3 "$P" group
check "device buffers: grouped calls exact, fusion off" with NCCLSHIM_FUSE_BYTES=0 NCCLSHIM_MIN_BYTES=0 dev_shim 2 "$P" group
check "device buffers: special values as documented, fp16" dev_shim 3 "$P" special
check "device buffers: fused groups with NCCLSHIM_ACCUM_STEPS=2, synced or local exactly" \
  with NCCLSHIM_ACCUM_STEPS=2 dev_shim 2 "$P" accumgroup 2
A="$TBIN/shimfault_args"
( unset LD_LIBRARY_PATH; mpirun_host 2 "$A" codes >"$TMPD/codes.plain" 2>"$TMPD/codes.plain.err" )
dev_shim 2 "$A" codes >"$TMPD/codes.dev" 2>"$TMPD/codes.dev.err"
[ "$(wc -l <"$TMPD/codes.plain")" -ge 30 ] && check "device buffers: the table of edge-case calls (codes, hashes) equals plain NCCL on host memory" \
  cmp "$TMPD/codes.plain" "$TMPD/codes.dev" || not_ok "codes table on host memory printed too little"
check "device buffers: misaligned send/recv pointers exact, sendbuff unchanged" dev_shim 2 "$A" misaligned
check "device buffers: Inf/NaN/-0/subnormals the same on every rank, = NCCL on the wire type" dev_shim 3 "$A" special sum
check "device buffers: two communicators interleaved on the legacy and per-thread streams, in and out of groups" \
  dev_shim 2 "$TBIN/shim_threads" streams
