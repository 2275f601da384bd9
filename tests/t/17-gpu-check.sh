#!/usr/bin/env bash
# 17-gpu-check.sh — `make gpu-check`'s own script (tests/gpu/check.sh), which
# only a GPU machine runs for real, run here on the stand-ins
# (GPU_CHECK_DOUBLE=1: the CUDA driver test double, and PyTorch on CPU
# tensors over the host NCCL) so that what it checks and how it reads its
# outputs is tested in CI: every section, with the shim settings and pass
# conditions a GPU gets (the one-rank sections on the ring, the large calls
# pipelined in 8 chunks); that each check of the shim fails when the shim
# leaves the call untouched (GPU_CHECK_ALGO=auto: on 1 rank nothing is
# compressed, issue 45); that a speed goal missed is reported and never
# fails the run; that the driver and kernel checks fail when they should (a
# driver older than the toolkit that built the fatbin, kernels that cannot
# load). Also: shim_torch.py's view of ncclshim_stats_t is exactly as large
# as the C struct (a smaller one lets ncclshim_get_stats write past it).
source "$(dirname "$0")/../lib.sh"
G="$ROOT/tests/gpu/check.sh"
gc() { # label, VAR=value... : check.sh on the double, output in $TMPD/label.out, exit status in $TMPD/label.rc
  # (every section runs about 60 s alone here, 3 to 4 times that beside other
  # jobs on 2 cores: 600 s, each of its own runs under its own timeout too)
  local label=$1; shift
  env "$@" GPU_CHECK_DOUBLE=1 B="$B" timeout "${GPU_CHECK_TIMEOUT:-600}" bash "$G" >"$TMPD/$label.out" 2>&1
  echo $? >"$TMPD/$label.rc"
}
rc_of() { cat "$TMPD/$1.rc"; }

[ -x "$TORCH_VENV/bin/python3" ] || not_ok "no PyTorch in $TORCH_VENV (make deps): sections 2 and 5 cannot run"
PYT="$TORCH_VENV/bin/python3"
# Every section; the bandwidth rows judged as speed goals (on CPU timings:
# most are missed, which must not fail the run).
gc all PYTHON="$PYT" GPU_CHECK_SPEED=judge
sed -n 's/^\(ok\|not ok\) - /\1 - gpu-check on the stand-ins: /p; /^# skip/p; /^# speed: /p' "$TMPD/all.out"
if [ "$(rc_of all)" -eq 0 ] && grep -q '^21 passed, 0 failed$' "$TMPD/all.out"; then
  ok "gpu-check on the stand-ins: exits 0, 21 checks passed (every section; the busy-GPU and graph checks are GPU-only)"
else
  not_ok "gpu-check on the stand-ins: exit $(rc_of all)"; grep -v '^ok ' "$TMPD/all.out" | tail -n 15 | sed 's/^/#   /'
fi
check_grep "... the kernel checker ran on the double" '^#   # cudadrv test double' "$TMPD/all.out"
check_grep "... speed goals apart from the checks: a summary line of the 13 goals, none of them a failure" \
  '^# speed: [0-9]+ of 13 goals met' "$TMPD/all.out"
n=$(grep -c '^ok - .*compressed in [18] real call(s) (1 compressed, 0 forwarded, [18] real call(s), wire fp16)$' "$TMPD/all.out")
[ "$n" -eq 4 ] && ok "... section 2: each of its 4 exactness checks saw its call compressed (8 chunks, 1 chunk)" \
  || not_ok "... section 2: $n of 4 exactness checks saw their call compressed"
check_grep "... section 3: every allreduce_perf row compressed, the large ones pipelined" \
  '^ok - allreduce_perf with the shim: 2 of 2 rows in fp16 in and out of place, 98 of 98 calls compressed' "$TMPD/all.out"
check_grep "... section 5: the 1-rank DDP run's buckets compressed (at least one per step)" \
  '^ok - the shim compressed the bucket all-reduces; loss curves match: [0-9]+ intercepted all-reduces, [0-9]+ compressed \(at least 50\)' "$TMPD/all.out"
check_grep "... section 5: the 2-rank DDP run in two phases" '^ok - DDP on 2 ranks .*: [0-9]+ of [0-9]+ calls compressed, [0-9]+ in two phases, wire int8$' "$TMPD/all.out"

# The same checks where the shim leaves every call untouched (ALGO=auto on 1
# rank, what gpu-check asked for before issue 45): each must fail.
gc auto PYTHON="$PYT" GPU_CHECK_ALGO=auto GPU_CHECK_SECTIONS="2 3"
nf=$(grep -c '^not ok - ' "$TMPD/auto.out")
[ "$(rc_of auto)" -eq 1 ] && [ "$nf" -eq 7 ] \
  && ok "gpu-check with NCCLSHIM_ALGO=auto on 1 rank (nothing compressed): the 7 checks of what the shim did fail, and the run" \
  || { not_ok "gpu-check with ALGO=auto on 1 rank: exit $(rc_of auto), $nf not ok (want 7)"; grep '^not ok' "$TMPD/auto.out" | sed 's/^/#   /'; }

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
