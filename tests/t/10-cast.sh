#!/usr/bin/env bash
# 10-cast.sh — the numeric core: the cmocka unit tests of compress/cast.h
# (exhaustive over all fp32 inputs, edge cases, every implementation this CPU
# has) with TAP output; the GPU kernel checker in its quick form (on a machine
# without a GPU it checks that the CUDA backend reports itself unavailable and
# everything falls back to the host backend); a smoke run of the cast
# benchmark (nothing about timings is asserted, only that it runs and prints
# its verdict line).
source "$(dirname "$0")/../lib.sh"

if [ ! -x "$TBIN/test_cast" ]; then
  not_ok "test_cast is built ($TBIN/test_cast missing: make test-build)"
  exit 1
fi
CMOCKA_MESSAGE_OUTPUT=TAP "$TBIN/test_cast"
# The wire formats of the two-phase collectives: fast path = reference, edges, bounds.
if [ -x "$TBIN/test_wire" ]; then CMOCKA_MESSAGE_OUTPUT=TAP "$TBIN/test_wire"
else not_ok "test_wire is built"; fi

if [ -x "$TBIN/check_kernels" ]; then
  # CUDA under ASan needs the shadow gap unprotected.
  ASAN_OPTIONS="$ASAN_OPTIONS:protect_shadow_gap=0" "$TBIN/check_kernels" --quick --allow-no-gpu \
    || { [ $? -ne 1 ] && not_ok "check_kernels ran to the end"; }
fi

if [ -x "$BIN/cast_perf" ]; then
  "$BIN/cast_perf" -s 1 -n 1 >"$TMPD/perf.log" 2>&1
  check_grep "cast_perf runs and prints its verdict" '^# (PASS|FAIL) ' "$TMPD/perf.log"
fi
