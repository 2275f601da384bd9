#!/usr/bin/env bash
# 17-gpu-check.sh — `make gpu-check`'s own script (tests/gpu/check.sh), which
# only a GPU machine runs for real, run here on the CUDA driver test double
# (GPU_CHECK_DOUBLE=1) so that what it checks and how it reads its outputs is
# tested in CI: the driver check, the kernel checker (tests/gpu/check_kernels
# --quick, every kernel through the shim's CUDA backend bit for bit against
# the host casts) and its bandwidth table, allreduce_perf with and without
# the shim, the static sync audit; and that its checks fail when they should:
# a driver older than the toolkit that built the fatbin, kernels that cannot
# load. Also: shim_torch.py's view of ncclshim_stats_t is exactly as large as
# the C struct (a smaller one lets ncclshim_get_stats write past it).
source "$(dirname "$0")/../lib.sh"
G="$ROOT/tests/gpu/check.sh"
gc() { # label, VAR=value... : check.sh on the double, output in $TMPD/label.out, exit status in $TMPD/label.rc
  local label=$1; shift
  env "$@" GPU_CHECK_DOUBLE=1 B="$B" timeout "${TEST_TIMEOUT:-180}" bash "$G" >"$TMPD/$label.out" 2>&1
  echo $? >"$TMPD/$label.rc"
}
rc_of() { cat "$TMPD/$1.rc"; }

gc all
sed -n 's/^\(ok\|not ok\) - /\1 - gpu-check on the double: /p; /^# skip/p' "$TMPD/all.out"
if [ "$(rc_of all)" -eq 0 ] && grep -q '^21 passed, 0 failed$' "$TMPD/all.out"; then
  ok "gpu-check on the double: exits 0, 21 checks passed (2 GPU-only sections skipped; 8 of them two-phase, segment and scale bandwidth rows, issue 34)"
else
  not_ok "gpu-check on the double: exit $(rc_of all)"; grep -v '^ok ' "$TMPD/all.out" | tail -n 15 | sed 's/^/#   /'
fi
check_grep "... the kernel checker ran on the double" '^#   # cudadrv test double' "$TMPD/all.out"

# A driver older than the toolkit that built the fatbin (the double reports
# 12.2): the driver check fails, naming both versions, and so does the run.
if [ "$(cat "$BUILD/obj/compress/kernels.mode" 2>/dev/null || echo none)" != none ]; then
  gc olddrv CUDADRV_DRIVER_VERSION=12020 GPU_CHECK_SECTIONS=0
  [ "$(rc_of olddrv)" -eq 1 ] && grep -q '^not ok - CUDA driver 12.2 is older than the CUDA [0-9.]* toolkit' "$TMPD/olddrv.out" \
    && ok "gpu-check: a driver older than the fatbin's toolkit fails the driver check and the run" \
    || { not_ok "gpu-check with an old driver: exit $(rc_of olddrv)"; sed 's/^/#   /' "$TMPD/olddrv.out" | tail -n 5; }
else
  echo "# skip - built without nvcc: no fatbin, so no toolkit version to compare"
fi

# Kernels that cannot load (the fatbin rejected, an NVRTC that cannot
# compile): the kernel check fails and so does the run.
gc nokern CUDADRV_NO_FATBIN=1 LD_PRELOAD="$TBIN/stub/libnvrtc.so.13" PYTHON=/bin/false GPU_CHECK_SECTIONS=1
[ "$(rc_of nokern)" -eq 1 ] && grep -q '^not ok - kernels' "$TMPD/nokern.out" \
  && ok "gpu-check: kernels that cannot load fail the kernel check and the run" \
  || { not_ok "gpu-check without loadable kernels: exit $(rc_of nokern)"; sed 's/^/#   /' "$TMPD/nokern.out" | tail -n 5; }

# shim_torch.py's ncclshim_stats_t: ncclshim_get_stats fills exactly its size.
out=$(python3 - "$ROOT/tests/gpu" "$SHIM" <<'EOF' 2>&1
import ctypes, sys
sys.path.insert(0, sys.argv[1])
import shim_torch
n = ctypes.sizeof(shim_torch.Stats)
buf = (ctypes.c_ubyte * (n + 64))(*([0xAA] * (n + 64)))
lib = ctypes.CDLL(sys.argv[2])
rc = lib.ncclshim_get_stats(buf)
tail_ok = all(b == 0xAA for b in buf[n:])
# the C struct ends with a uint64 after an int: its size is the last written byte + 1, rounded to 8
last = max(i for i in range(n + 64) if buf[i] != 0xAA) if any(b != 0xAA for b in buf) else -1
print(rc, n, int(tail_ok), last)
EOF
)
read -r grc gn gtail glast <<<"$out"
[ "$grc" = 0 ] && [ "$gtail" = 1 ] && [ -n "$glast" ] && [ "$glast" -lt "$gn" ] \
  && ok "shim_torch.py's Stats ($gn bytes) holds all of ncclshim_stats_t (nothing written past it)" \
  || not_ok "shim_torch.py's Stats vs ncclshim_stats_t: $out"
