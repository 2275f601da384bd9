# The multi-rank shim suite again under sanitizers and memcheck:
#   1. the programs below built with ASan+UBSan (make SAN=1, in build-san/),
#      then tests/t/40-shim.sh, 40-accum.sh and 70-reliability.sh run on that build (the
#      latter with RELIABILITY_QUICK=1: 10^5-call soak, no multi-GiB buffers;
#      50-log.sh left out since 2026-12-05 to keep make test near 20 minutes:
#      the log's threads run under ThreadSanitizer below, and its records in
#      every suite above);
#      any sanitizer report aborts its process, and the reports' log files
#      must not exist at the end (zero reports, failed check or not);
#   2. the shim, the host NCCL and the thread tests built with ThreadSanitizer
#      (make B=build-san/tsan SANFLAGS=-fsanitize=thread: no Makefile mode of
#      its own), run on threads, interleaved streams, abort from a watchdog
#      thread and nonblocking polls;
#   3. valgrind memcheck (plain build) on a subset of the reliability runs,
#      with Open MPI's suppressions and tests/valgrind.supp.
# Leak detection is off (Open MPI leaks at exit). Open MPI's own libraries are
# not instrumented: TSan ignores what happens inside them
# (ignore_noninstrumented_modules), so races through MPI are not seen.
. "$(dirname "$0")/../lib.sh"
export ROOT
shim_env_clean
export NCCLSHIM_LOG=off NCCLSHIM_BANNER=0
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:verify_asan_link_order=0:log_path=$TMPD/asan"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$TMPD/ubsan"
export TSAN_OPTIONS="halt_on_error=1:ignore_noninstrumented_modules=1:log_path=$TMPD/tsan"
export TEST_TIMEOUT=${TEST_TIMEOUT:-120}

# Sanitizer reports written so far (files named by log_path).
reports() { ls "$TMPD"/asan.* "$TMPD"/ubsan.* "$TMPD"/tsan.* 2>/dev/null; }
no_reports() { # description
  local r; r=$(reports)
  if [ -z "$r" ]; then ok "$1"; else
    not_ok "$1 ($(echo "$r" | wc -l) report files)"; head -n 30 $r | sed 's/^/#   /'
    rm -f $r
  fi
}

# ---- 1. ASan + UBSan ------------------------------------------------------------
# Only what the runs below use: the whole test-build compiled unit tests and
# benchmarks that nothing here runs (201 commands against 115). -k: a target
# that fails to build is reported, the suites still run on what built.
SAN_TARGETS="lib/libncclshim.so lib/hostnccl/libnccl.so.2 bin/ddp_step bin/ncclshim-envdoc bin/allreduce_perf
  bin/reduce_scatter_perf tests/shimtest tests/shimfault tests/shimfault_args tests/shimfault_life tests/shim_threads
  tests/shim_abort tests/test_accum tests/shim_twophase tests/shim_cuda_streams tests/shim_onethread tests/test_ef_cuda
  tests/test_simt"
# The plain build's fatbin serves both sanitizer builds (compress/module.mk's
# KERNELS_FROM: device code takes no host sanitizer, and nvcc takes half a
# minute a build).
KF="KERNELS_FROM=$ROOT/$B/obj/compress/kernels.fatbin"
if make -C "$ROOT" --no-print-directory -k B=build-san SAN=1 "$KF" -j2 $(printf 'build-san/%s ' $SAN_TARGETS) \
     >"$TMPD/build-san.log" 2>&1; then
  ok "make SAN=1 of the programs below (ASan+UBSan, build-san/)"
else
  not_ok "make SAN=1 failed"; grep -E 'error:|\*\*\*' "$TMPD/build-san.log" | head -n 8 | sed 's/^/#   /'
fi
S="$ROOT/build-san"
if [ -e "$S/lib/libncclshim.so" ] && [ -e "$S/lib/hostnccl/libnccl.so.2" ] && [ -x "$S/tests/shimtest" ] \
   && [ -x "$S/tests/shimfault" ] && [ -x "$S/tests/shim_threads" ]; then
  for t in 40-shim 40-accum 70-reliability; do
    mkdir -p "$TMPD/$t"
    env -u NCCLSHIM_LOG -u NCCLSHIM_BANNER B=build-san RELIABILITY_QUICK=1 TMPD="$TMPD/$t" \
      bash "$ROOT/tests/t/$t.sh" 2>&1 \
      | sed -n "s/^\(ok\|not ok\) - /\1 - asan+ubsan $t: /p; /^#   /p"
  done
  # Pipelined two-phase pieces (the host codec thread, 4 KiB pieces), every format's digest run.
  for w in $FORMATS; do
    check "asan+ubsan: two-phase $w in 4 KiB pieces with error feedback, 3 ranks" \
      with SHIM="$S/lib/libncclshim.so" HOSTNCCL_DIR="$S/lib/hostnccl" NCCLSHIM_COMPRESS=$w NCCLSHIM_ALGO=twophase \
        NCCLSHIM_ERROR_FEEDBACK=1 NCCLSHIM_TWOPHASE_PIECE_BYTES=4096 mpirun_shim 3 "$S/tests/shim_twophase" digest
  done
  # The hierarchical all-reduce and reduce-scatter (auto on 2 emulated nodes x 2 ranks).
  for w in int8 fp16s; do
    check "asan+ubsan: auto (hierarchical) $w on 2x2 emulated nodes, 4 KiB pieces, error feedback" \
      with SHIM="$S/lib/libncclshim.so" HOSTNCCL_DIR="$S/lib/hostnccl" mpirun_nodes --shim 2 2 -x NCCLSHIM_COMPRESS=$w \
        -x NCCLSHIM_ERROR_FEEDBACK=1 -x NCCLSHIM_TWOPHASE_PIECE_BYTES=4096 -- "$S/tests/shim_twophase" digest
  done
  # The CUDA path on the double (whose kernels run on tests/simt's fibers,
  # ASan told of every switch): streams destroyed after use, and one thread
  # driving 2 devices (a thread per communicator after a group).
  check "asan+ubsan: streams destroyed after use, int8 two-phase with error feedback, 3 ranks, device buffers" \
    with SHIM="$S/lib/libncclshim.so" HOSTNCCL_DIR="$S/lib/hostnccl" NCCLSHIM_COMPRESS=int8 NCCLSHIM_ALGO=twophase \
      NCCLSHIM_ERROR_FEEDBACK=1 NCCLSHIM_LOG=off mpirun_shim 3 "$S/tests/shim_cuda_streams"
  for mem in "" --host; do
    check "asan+ubsan: one thread, 2 ranks (${mem:-device} buffers), fp16s two-phase in pieces" \
      with CUDADRV_DEVICES=2 NCCLSHIM_COMPRESS=fp16s NCCLSHIM_ALGO=twophase NCCLSHIM_TWOPHASE_PIECE_BYTES=65536 \
        NCCLSHIM_LOG=off LD_LIBRARY_PATH="$S/lib/hostnccl" LD_PRELOAD="$S/lib/libncclshim.so${SAN_PRELOAD:+:$SAN_PRELOAD}" \
        timeout "${TEST_TIMEOUT:-120}" "$S/tests/shim_onethread" $mem 2
  done
  # The fabric learner (LAUNCH_BYTES=auto): its samples, marks and agreement,
  # then the plans at the agreed price, a reduce-scatter sweep too.
  for p in allreduce_perf reduce_scatter_perf; do
    check "asan+ubsan: the launch price measured (auto), $p 64 KiB..4 MiB int8, 3 ranks, every result checked" \
      with SHIM="$S/lib/libncclshim.so" HOSTNCCL_DIR="$S/lib/hostnccl" NCCLSHIM_LAUNCH_BYTES=auto NCCLSHIM_COMPRESS=int8 \
        HOSTNCCL_LAUNCH_US=500 mpirun_shim 3 "$S/bin/$p" -b 64K -e 4M -f 2 -n 2 -w 1 -c 1
  done
  check "asan+ubsan: the kernels on tests/simt against the reference (test_ef_cuda) and the model's own faults (test_simt)" \
    sh -c "'$S/tests/test_ef_cuda' >/dev/null && '$S/tests/test_simt' >/dev/null"
  no_reports "no ASan/UBSan report from the multi-rank suite"
else
  not_ok "the ASan+UBSan shim, host NCCL or test programs were not built: suite not run"
fi

# ---- 2. ThreadSanitizer -------------------------------------------------------------
TS=build-san/tsan
if make -C "$ROOT" --no-print-directory -j2 B=$TS SANFLAGS="-fsanitize=thread -fno-omit-frame-pointer" "$KF" \
     $TS/lib/libncclshim.so $TS/lib/hostnccl/libnccl.so.2 $TS/tests/shim_threads $TS/tests/shimfault \
     >"$TMPD/build-tsan.log" 2>&1; then
  tsan() { # description command... (mpirun_shim picks up the TSan shim and host NCCL)
    local desc=$1; shift
    check "tsan: $desc" with SHIM="$ROOT/$TS/lib/libncclshim.so" HOSTNCCL_DIR="$ROOT/$TS/lib/hostnccl" "$@"
  }
  tsan "8 threads x own communicator" mpirun_shim 2 "$ROOT/$TS/tests/shim_threads" threads 8
  tsan "8 threads, fusion off (cast-backs queued per thread)" \
    with NCCLSHIM_FUSE_BYTES=0 mpirun_shim 2 "$ROOT/$TS/tests/shim_threads" threads 8
  tsan "interleaved streams and communicators" mpirun_shim 2 "$ROOT/$TS/tests/shim_threads" streams
  tsan "8 threads with NCCLSHIM_LOG=calls and a trace (the log's writer thread, rings of 16)" \
    with NCCLSHIM_LOG=calls NCCLSHIM_LOG_RING=16 NCCLSHIM_LOG_FILE="$TMPD/tlog.%r.jsonl" \
    NCCLSHIM_TRACE_FILE="$TMPD/tlog.%r.trace.json" mpirun_shim 2 "$ROOT/$TS/tests/shim_threads" threads 8
  tsan "abort from a watchdog thread polling ncclCommGetAsyncError" \
    with NCCLSHIM_MIN_BYTES=0 mpirun_shim 2 "$ROOT/$TS/tests/shim_threads" abort 3
  tsan "nonblocking communicator, cast-backs at completion" mpirun_shim 2 "$ROOT/$TS/tests/shimfault" inprogress
  tsan "8 threads x own communicator, int8 two-phase in 4 KiB pieces (one codec thread serves them all)" \
    with NCCLSHIM_COMPRESS=int8 NCCLSHIM_TWOPHASE_PIECE_BYTES=4096 mpirun_shim 2 "$ROOT/$TS/tests/shim_threads" threads 8
  no_reports "no ThreadSanitizer report"
else
  not_ok "ThreadSanitizer build failed"; tail -n 20 "$TMPD/build-tsan.log" | sed 's/^/#   /'
fi

# ---- 3. valgrind memcheck ---------------------------------------------------------------
if command -v valgrind >/dev/null; then
  make -C "$ROOT" --no-print-directory -s -j2 B="$B" "$B/tests/shimfault" "$B/tests/shimfault_args" \
    "$B/tests/shimfault_life" "$B/tests/shim_threads" >"$TMPD/build-vg.log" 2>&1
  vg=(valgrind -q --error-exitcode=9 --suppressions="$ROOT/tests/valgrind.supp")
  [ -r /usr/share/openmpi/openmpi-valgrind.supp ] && vg+=(--suppressions=/usr/share/openmpi/openmpi-valgrind.supp)
  memcheck() { # description [K=V...] program args...
    local desc=$1; shift
    check "memcheck: $desc" with "$@"
  }
  memcheck "nonblocking communicator" mpirun_shim 2 "${vg[@]}" "$TBIN/shimfault" inprogress
  memcheck "real call failing" HOSTNCCL_FAIL_CALL=4 mpirun_shim 2 "${vg[@]}" "$TBIN/shimfault" failcall 2 0 1
  memcheck "group end failing with queued cast-backs" HOSTNCCL_FAIL_GROUP_END=1 NCCLSHIM_FUSE_BYTES=0 \
    mpirun_shim 2 "${vg[@]}" "$TBIN/shimfault" failgroup
  memcheck "40 communicators created and destroyed" mpirun_shim 2 "${vg[@]}" "$TBIN/shimfault_life" churn 40
  # (misaligned pointers and threads: in 70-reliability under ASan above, and
  # threads under TSan; not under memcheck
  # since 2026-12-05, to keep make test near 20 minutes)
else
  not_ok "valgrind is not installed (make deps)"
fi
