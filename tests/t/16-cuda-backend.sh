#!/usr/bin/env bash
# 16-cuda-backend.sh — the shim's CUDA backend on the CUDA driver test double
# (tests/unit/test_cuda_backend.c), one check per defect of issue 13 that the
# backend alone shows: pointer classification, where the kernels come from
# (fatbin; NVRTC when the fatbin cannot load, as in a build without nvcc; none),
# the exchange on the caller's stream's context, never synchronising,
# queries beside a global-mode capture, no cuMemAlloc fallback, per-thread
# default stream arenas. Every run must also leave the double's violation
# counters at 0 (it exits 86 otherwise).
source "$(dirname "$0")/../lib.sh"
T="$TBIN/test_cuda_backend"
if [ ! -x "$T" ]; then
  not_ok "test_cuda_backend is built (make test-build)"
  exit 1
fi
run() { # label, env..., -- checks...
  local label=$1; shift; local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  env "${envs[@]}" timeout "${TEST_TIMEOUT:-120}" "$T" "$@" >"$TMPD/$label.out" 2>"$TMPD/$label.err"
  local rc=$?
  cat "$TMPD/$label.out"
  [ $rc -eq 0 ] || { not_ok "$label: test_cuda_backend exited $rc"; sed 's/^/#   /' "$TMPD/$label.err" | tail -n 8; }
}
run fatbin -- classify kernels=fatbin oobctx oobsync relaxed perthread vectors counters
run nopools CUDADRV_NO_POOLS=1 -- nopools

# libnvrtc: on the library path, or from pip PyTorch's CUDA wheel when one is
# installed (the shim finds it itself inside a PyTorch process).
NVRTC_DIR=
for d in ${SHIMTEST_TORCH_VENV:-/root/.cache/ncclshim/torch-venv}/lib/python3*/site-packages/nvidia/cu13/lib; do
  [ -e "$d/libnvrtc.so.13" ] && NVRTC_DIR=$d
done
if [ -n "$NVRTC_DIR" ]; then
  run nvrtc CUDADRV_NO_FATBIN=1 LD_LIBRARY_PATH="$NVRTC_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" -- kernels=NVRTC classify
else
  echo "# skip - no libnvrtc.so.13 here (pip PyTorch's nvidia/cu13/lib): the NVRTC path is not run"
fi
# The double checks that an image has code for the device: a device newer
# than every SASS of the fatbin (sm_100) loads its compute_90 PTX; one older
# than all of it (sm_70, which CUDA 13 no longer targets) gets no kernels, and
# without an NVRTC that can compile for it the backend says so and forwards.
run sm100 CUDADRV_SM=100 -- kernels=fatbin
run sm70 CUDADRV_SM=70 -- kernels=none
# Neither a usable fatbin nor a working NVRTC (a stand-in that cannot
# compile): the kernels cannot load; device memory still never reaches host code.
run nokernels CUDADRV_NO_FATBIN=1 LD_PRELOAD="$TBIN/stub/libnvrtc.so.13" -- kernels=none

# Defect 3: a communicator's first all-reduces captured into a graph (alone,
# and in a group): forwarded untouched, the first-call check left for later,
# the capture intact (2 ranks, the shim over the host NCCL on the double).
for m in single group; do
  check "first all-reduces captured ($m): forwarded untouched, no check, no allocation or violation during capture" \
    mpirun_shim 2 "$TBIN/shim_cuda_capture" $m
done

# Defect 1, end to end: rank 0 of 2 cannot run the kernels (no usable fatbin,
# an NVRTC that cannot compile); the check agrees on it, so both ranks forward
# every call untouched: the run is bit-identical to plain NCCL on host memory
# (shimtest hash, device buffers mirrored by tests/shim/devmirror.h).
P="$TBIN/shimtest"
mpirun_host 2 "$P" hash >"$TMPD/plain" 2>"$TMPD/plain.err"
XD="-x SHIMTEST_DEVICE=1 -x NCCLSHIM_LOG=off -x LD_LIBRARY_PATH=$HOSTNCCL_DIR:$BUILD/lib/cudadrv"
timeout "${TEST_TIMEOUT:-180}" mpirun \
  -np 1 $XD -x CUDADRV_NO_FATBIN=1 -x LD_PRELOAD="$SHIM:$TBIN/stub/libnvrtc.so.13" "$P" hash : \
  -np 1 $XD -x LD_PRELOAD="$SHIM" "$P" hash >"$TMPD/nokernels" 2>"$TMPD/nokernels.err"
rc=$?
[ $rc -eq 0 ] && [ "$(wc -l <"$TMPD/nokernels")" -eq "$(wc -l <"$TMPD/plain")" ] && cmp -s "$TMPD/plain" "$TMPD/nokernels" \
  && ok "one rank without kernels: every rank forwards untouched, bit-identical to plain NCCL ($(wc -l <"$TMPD/plain") cases)" \
  || { not_ok "one rank without kernels: rc $rc, outputs differ from plain NCCL"; tail -n 6 "$TMPD/nokernels.err" | sed 's/^/#   /'; }
check_grep "... the rank without kernels says so, once" "rank 0 cannot run the CUDA kernels" "$TMPD/nokernels.err"
[ "$(grep -c 'cannot run the CUDA kernels' "$TMPD/nokernels.err")" -eq 1 ] && ok "... and only once" \
  || not_ok "... said $(grep -c 'cannot run the CUDA kernels' "$TMPD/nokernels.err") times"

# Issue 23, defect 3: beside a caching allocator holding most of rank 1's
# device (CUDADRV_HELD_MB: 1008 of 1024 MiB), the initial staging block
# (32 MiB) cannot be had there; the check agrees on it, so compression stops
# on both ranks and the run is bit-identical to plain NCCL, with one message.
timeout "${TEST_TIMEOUT:-180}" mpirun \
  -np 1 $XD -x LD_PRELOAD="$SHIM" "$P" hash : \
  -np 1 $XD -x CUDADRV_DEVICE_GB=1 -x CUDADRV_HELD_MB=1008 -x LD_PRELOAD="$SHIM" "$P" hash >"$TMPD/held" 2>"$TMPD/held.err"
rc=$?
[ $rc -eq 0 ] && [ "$(wc -l <"$TMPD/held")" -eq "$(wc -l <"$TMPD/plain")" ] && cmp -s "$TMPD/plain" "$TMPD/held" \
  && ok "one rank's device nearly full (a caching allocator's 1008 of 1024 MiB): compression stops on every rank, bit-identical to plain NCCL ($(wc -l <"$TMPD/plain") cases)" \
  || { not_ok "one rank's device nearly full: rc $rc, outputs differ from plain NCCL"; tail -n 6 "$TMPD/held.err" | sed 's/^/#   /'; }
check_grep "... that rank says why, naming the bytes" "compression stopped on communicator .* this rank could not allocate its 33554432 bytes of staging" "$TMPD/held.err"
check_grep "... and rank 0, whose device had room, stops too and says why" "compression stopped on communicator .* a rank could not allocate its 33554432 bytes of staging" "$TMPD/held.err"

# Defect 6: a group that outgrows the agreed fusion block starts an agreement
# on a bigger one and returns without waiting for it (rank 1 makes its group
# only after rank 0's ncclGroupEnd returned: waiting would hang); it applies a
# group later; every result exact (2 ranks, device buffers).
check "staging growth: ncclGroupEnd never waits for the agreement; answer and confirmation read a group later each, fused from the fourth group; exact" \
  with NCCLSHIM_LOG=off NCCLSHIM_STAGING_BYTES=4M TEST_TIMEOUT=60 mpirun_shim 2 "$TBIN/shim_cuda_grow"

# Issue 23, defect 7: streams destroyed after use (4 epochs, a stream each),
# their staging, fusion block and error-feedback residuals kept across
# epochs and freed at the communicator's end: the double counts any use of a
# destroyed stream as an illegal access (exit 86); every sum exact.
for cfg in "NCCLSHIM_COMPRESS=fp16" "NCCLSHIM_COMPRESS=int8 NCCLSHIM_ALGO=twophase NCCLSHIM_ERROR_FEEDBACK=1" \
           "NCCLSHIM_COMPRESS=fp16s NCCLSHIM_ALGO=twophase NCCLSHIM_ERROR_FEEDBACK=1 NCCLSHIM_TWOPHASE_PIECE_BYTES=65536"; do
  check "streams destroyed after use, never named again ($cfg), 3 ranks" \
    with $cfg NCCLSHIM_LOG=off TEST_TIMEOUT=90 mpirun_shim 3 "$TBIN/shim_cuda_streams"
done

# Issue 23, defect 1 (one thread drives every device): tests/t/48-onethread.sh.

# Communicators destroyed or aborted (alternately) with an accumulation
# agreement and a fusion-growth agreement in flight, 40 in a row (a context
# has 32 exchange slots): each gives its slots back once their collectives
# completed, never frees them as staging; every sum exact (2 ranks).
check "40 communicators ended with their agreements in flight: no exchange slot kept or freed under a collective" \
  with NCCLSHIM_ACCUM_STEPS=2 NCCLSHIM_LOG=off TEST_TIMEOUT=90 mpirun_shim 2 "$TBIN/shim_cuda_abort"

# Accumulation's agreements (issue 13 item 3) on device buffers, with every
# third stream of the double 5 ms late per operation (CUDADRV_STREAM_DELAY_US:
# among them the first of the exchange slots' private streams, not the test's
# own stream), so that agreements complete long after the buckets that
# follow them: learning applies each one 4 buckets later by a non-blocking
# read, waiting only if it is not there yet; DDP's default pass learned and
# then answered locally on schedule, every result exact (accumtest plain).
# A mutant that reads without that wait goes off on stale values and fails.
check "accumulation with the exchange streams 5 ms late per operation: learned, skipped on schedule, exact" \
  with SHIMTEST_DEVICE=1 SHIMTEST_SYNC_AUDIT=1 CUDADRV_STREAM_DELAY_US=5000,3 NCCLSHIM_ACCUM_STEPS=2 \
  NCCLSHIM_MIN_BYTES=4096 NCCLSHIM_LOG=off LD_LIBRARY_PATH=$BUILD/lib/cudadrv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
  TEST_TIMEOUT=90 mpirun_shim 2 "$TBIN/accumtest" plain

# Threads, each with its own communicator, device buffers (found on the double
# by the cuda branch): every first-call check has its own private stream, so
# two threads' checks never queue behind each other in rank-dependent orders
# (one shared private stream hung 2 runs of 2); with CU_STREAM_PER_THREAD as
# every thread's stream (one handle), staging and side streams stay per thread.
XT="SHIMTEST_DEVICE=1 SHIMTEST_SYNC_AUDIT=1 NCCLSHIM_LOG=off LD_LIBRARY_PATH=$BUILD/lib/cudadrv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
check "8 threads with their own communicators, device buffers: exact, no hang" \
  with $XT TEST_TIMEOUT=90 mpirun_shim 2 "$TBIN/shim_threads" threads 8
check "... the same with CU_STREAM_PER_THREAD as every thread's stream" \
  with $XT SHIMTEST_PTDS=1 TEST_TIMEOUT=90 mpirun_shim 2 "$TBIN/shim_threads" threads 8

# Issue 15, pipelined two-phase on the CUDA backend: the codec on a side
# stream, each exchange waiting for its piece's encode by an event, each
# decode for its exchange. 3 ranks, int8 with error feedback and fp16, all-
# reduces on device buffers (shim_twophase digest, 3 rounds, in and out of
# place): one piece, 4 KiB pieces, and 4 KiB pieces with every stream (or
# every second one) of the double running late, all give the bits of the host
# backend's one-piece run. A missing wait would read stale bytes there; the
# sync audit fails the run on any synchronising driver call inside a collective.
XDG="-x SHIMTEST_DEVICE=1 -x SHIMTEST_SYNC_AUDIT=1 -x NCCLSHIM_LOG=off -x NCCLSHIM_BANNER=0 -x NCCLSHIM_ALGO=twophase -x LD_PRELOAD=$SHIM"
for w in int8:1 fp16:0; do
  fmt=${w%:*} ef=${w#*:}
  with NCCLSHIM_COMPRESS=$fmt NCCLSHIM_ERROR_FEEDBACK=$ef TP_DIGEST_NO_RS=1 NCCLSHIM_ALGO=twophase \
    mpirun_shim 3 "$TBIN/shim_twophase" digest 2>&1 | grep '^digest' | sort >"$TMPD/cdg.host"
  for v in pb=0 pb=4096 pb=4096,delay=300 pb=4096,delay=300,2; do
    pb=${v#pb=}; pb=${pb%%,*}; delay=; [[ $v == *delay=* ]] && delay=${v#*delay=}
    timeout "${TEST_TIMEOUT:-180}" mpirun -np 3 $XDG -x NCCLSHIM_COMPRESS=$fmt -x NCCLSHIM_ERROR_FEEDBACK=$ef \
      -x NCCLSHIM_TWOPHASE_PIECE_BYTES=$pb ${delay:+-x CUDADRV_STREAM_DELAY_US=$delay} \
      -x LD_LIBRARY_PATH="$HOSTNCCL_DIR:$BUILD/lib/cudadrv" "$TBIN/shim_twophase" digest >"$TMPD/cdg.out" 2>&1
    rc=$?
    grep '^digest' "$TMPD/cdg.out" | sort >"$TMPD/cdg.dev"
    [ $rc -eq 0 ] && [ "$(wc -l <"$TMPD/cdg.host")" = 3 ] && cmp -s "$TMPD/cdg.host" "$TMPD/cdg.dev" \
      && ok "two-phase $fmt (error feedback $ef) on the CUDA backend, $v: the host backend's bits on every rank" \
      || { not_ok "two-phase $fmt on the CUDA backend, $v: rc $rc, bits differ from the host backend"; sed 's/^/#   /' "$TMPD/cdg.out" | tail -6; }
  done
done
