#!/usr/bin/env bash
# tests/gpu/check.sh — `make gpu-check`: everything that needs a real GPU, in
# one run of a few minutes on one GPU (e.g. an H200), on a fresh machine with
# only pip PyTorch (and the CUDA toolkit, or none: the kernels then come from
# NVRTC). Writes its outputs to $B/gpu-check/ and prints one TAP-style line per
# check and a summary; exit 1 if any check failed. Every check can fail; what
# cannot run here (no mpicc) is a "# skip" line, not a failure.
#   0. the driver: present, and new enough for the kernels this build has
#      (a fatbin needs a driver of at least the toolkit version that built it)
#   1. kernels: every CUDA kernel bit for bit against the host reference
#      (tests/check_kernels: casts, segments, scale; tests/gpu_ef_cuda: the
#      two-phase encode/decode/sum of every format with error feedback and
#      stochastic rounding), and the plain cast kernels' bandwidth against a
#      device-to-device copy (goal >= 0.9 of the copy's bytes per second)
#   2. PyTorch's NCCL, one process (tests/gpu/shim_torch.py), with and without
#      the shim: results bit-exact (fp16 on the wire, pipelined for 256 MiB),
#      the shim really compressed, and its added GPU time per compressed
#      all-reduce within what two casts at the goal bandwidth cost
#   3. allreduce_perf on the real libnccl with and without the shim (0 wrong),
#      where mpicc and mpirun exist
#   4. the sync audit: no stream/context/event synchronize in the shim's sources
#   5. torchrun DDP training without and with the shim: it intercepted the
#      bucket all-reduces, and the loss curves match within the stated tolerance
#
# GPU_CHECK_DOUBLE=1 (CI: tests/t/17-gpu-check.sh) runs this same script on
# the CUDA driver test double instead (tests/cudadrv, put first on
# LD_LIBRARY_PATH): 0 and 4 as on a GPU; 1 with --quick and a 1 MiB
# bandwidth table whose rows must be there but whose ratios are not judged
# (the double's timings say nothing about a GPU); 3 on host buffers over the
# host NCCL, without the double; 2 and 5 need PyTorch on a GPU and are
# skipped.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=${B:-build}
OUT="$ROOT/$B/gpu-check"
mkdir -p "$OUT"
cd "$ROOT"
pass=0; fail=0
ok()     { echo "ok - $*"; pass=$((pass + 1)); }
not_ok() { echo "not ok - $*"; fail=$((fail + 1)); }
skip()   { echo "# skip - $*"; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
PY=${PYTHON:-python3}
SHIM="$ROOT/$B/lib/libncclshim.so"
GOAL_BW=${GOAL_BW:-0.9}
DOUBLE=${GPU_CHECK_DOUBLE:-0}
# GPU_CHECK_SECTIONS="0 1": only those sections (CI runs parts of it to see them fail).
want() { case " ${GPU_CHECK_SECTIONS:-0 1 2 3 4 5} " in *" $1 "*) return 0 ;; esac; return 1; }
AP_LD=${LD_LIBRARY_PATH:-} # section 3's library path: never the double (the host NCCL would take its NULL stream for one)

if [ "$DOUBLE" = 1 ]; then
  echo "# gpu-check $(date -u +%Y-%m-%dT%H:%MZ) on the CUDA driver TEST DOUBLE (tests/cudadrv), not a GPU"
  export LD_LIBRARY_PATH="$ROOT/$B/lib/cudadrv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
  echo "# gpu-check $(date -u +%Y-%m-%dT%H:%MZ) on $(nvidia-smi -L 2>/dev/null | head -1)"
fi
[ -f "$SHIM" ] || { not_ok "the shim is built ($SHIM missing)"; echo "$pass passed, $fail failed"; exit 1; }

# The real libnccl: the toolkit's, else the one PyTorch's wheel brings (on the
# double: the host NCCL). (An empty `ls` must not become dirname's ".".)
NCCL_DIR=
if [ "$DOUBLE" = 1 ]; then NCCL_DIR="$ROOT/$B/lib/hostnccl"
else
  nccl_so=$(ls "${NCCL_HOME:-/usr/local/cuda}"/lib*/libnccl.so.2 2>/dev/null | head -1)
  [ -n "$nccl_so" ] && NCCL_DIR=$(dirname "$nccl_so")
  [ -n "$NCCL_DIR" ] || NCCL_DIR=$($PY -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
fi
echo "# real libnccl: ${NCCL_DIR:-none found}"
# NVRTC for a build without nvcc: outside a PyTorch process the shim finds
# libnvrtc only on the library path, so give check_kernels pip's.
NVRTC_DIR=$($PY -c 'import glob, nvidia, os
hits = [os.path.dirname(f) for p in nvidia.__path__ for d in ("cu13/lib", "cuda_nvrtc/lib", "cu12/lib")
        for f in glob.glob(os.path.join(p, d, "libnvrtc.so.1*"))]
print(hits[0] if hits else "")' 2>/dev/null)

# ---- 0. driver ---------------------------------------------------------------
if want 0; then
drv=$($PY - <<'EOF' 2>/dev/null
import ctypes
v = ctypes.c_int(0)
cuda = ctypes.CDLL("libcuda.so.1")
print(v.value if cuda.cuDriverGetVersion(ctypes.byref(v)) == 0 else "")
EOF
)
mode=$(cat "$B/obj/compress/kernels.mode" 2>/dev/null || echo none)
if [ -z "$drv" ]; then
  not_ok "CUDA driver: libcuda.so.1 not loadable or cuDriverGetVersion failed (no GPU driver on this machine?)"
else
  drv_mm="$((drv / 1000)).$(((drv % 1000) / 10))"
  if [ "$mode" = none ]; then
    ok "CUDA driver $drv_mm; this build has no fatbin: kernels are compiled at run time by NVRTC"
  else
    tk=$(${mode%% *} --version 2>/dev/null | sed -n 's/.*release \([0-9]*\.[0-9]*\).*/\1/p')
    # CUDA's minor-version compatibility: a driver of the toolkit's major
    # version loads its SASS whatever the minor; only PTX (a device with no
    # SASS in the fatbin, JIT-compiled) needs a driver at least as new.
    cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')
    [ "$DOUBLE" = 1 ] && cc=90
    sass=0; case " $(echo "$mode" | grep -o 'sm_[0-9]*' | tr -d 'sm_' | tr '\n' ' ') " in *" $cc "*) sass=1 ;; esac
    if [ -z "$tk" ]; then not_ok "cannot tell which toolkit built the fatbin (${mode%% *} --version)"
    elif awk -v d="$drv_mm" -v t="$tk" 'BEGIN{split(d,a,".");split(t,b,".");exit !(a[1]>b[1]||(a[1]==b[1]&&a[2]>=b[2]))}'; then
      ok "CUDA driver $drv_mm runs a fatbin built by the CUDA $tk toolkit"
    elif [ "$sass" = 1 ] && [ "${drv_mm%%.*}" = "${tk%%.*}" ]; then
      ok "CUDA driver $drv_mm loads the SASS (sm_$cc) of a fatbin built by the CUDA $tk toolkit (minor-version compatibility)"
    else
      not_ok "CUDA driver $drv_mm is older than the CUDA $tk toolkit that built the fatbin and the device (sm_${cc:-?}) needs its PTX" \
             "(or another major version): the kernels will not load (update the driver, or rebuild with an older toolkit or" \
             "without nvcc so NVRTC compiles them)"
    fi
  fi
fi
fi

# ---- 1. kernels --------------------------------------------------------------
if want 1; then
if [ -x "$B/tests/check_kernels" ]; then
  ck_args=(); [ "$DOUBLE" = 1 ] && ck_args=(--quick --bw-mib 1)
  if LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}${NVRTC_DIR:+:$NVRTC_DIR}" timeout 600 "$B/tests/check_kernels" "${ck_args[@]}" \
       >"$OUT/kernels.txt" 2>&1; then ok "kernels bit-exact against the host reference"
  else not_ok "kernels (see $OUT/kernels.txt)"; tail -5 "$OUT/kernels.txt" | sed 's/^/#   /'; fi
  grep -h "CUDA kernels\|^# .*sm_" "$OUT/kernels.txt" | head -2 | sed 's/^/#   /'
  sed -n '/^# bandwidth/,$p' "$OUT/kernels.txt" | head -22 | sed 's/^/#   /'
  # The plain casts at GOAL_BW (0.9) of a copy; the two-phase kernels,
  # segments and scales at GOAL_KBW (0.8, issue 34: each of them, on a GPU).
  for k in "to_wire fp16" "to_wire bf16" "from_wire fp16" "from_wire bf16" "to_wire fp16 underflow" \
           "seg_from_wire bf16 x64" "scale fp16" "tp encode int8" "tp encode fp16s" "tp decode-sum int8 x2" \
           "tp decode-sum fp16 x2" "tp encode int4" "tp decode-sum int4 x2"; do
    g=$GOAL_BW; case $k in to_wire*|from_wire*) ;; *) g=${GOAL_KBW:-0.8} ;; esac
    r=$(awk -v k="$k" 'index($0, "  " k " ") == 1 && $NF ~ /^[0-9]+\.[0-9]+$/ {print $NF; exit}' "$OUT/kernels.txt")
    if [ -z "$r" ]; then not_ok "$k: no bandwidth row in $OUT/kernels.txt"
    elif [ "$DOUBLE" = 1 ]; then ok "$k: bandwidth row read ($r x a copy on the double; the goal is judged on a GPU only)"
    elif awk -v r="$r" -v g="$g" 'BEGIN{exit !(r >= g)}'; then ok "$k moves bytes at $r x a device-to-device copy (goal $g)"
    else not_ok "$k moves bytes at $r x a device-to-device copy (goal $g)"; fi
  done
else
  not_ok "tests/check_kernels not built (make gpu-check builds it: it needs only cuda.h, from the toolkit or pip's nvidia/cu13/include)"
fi
# The two-phase kernels: encode (error feedback, stochastic rounding, plain),
# decode and decode-and-sum of every format, misaligned operands, bit for bit
# against the scalar reference (tests/unit/test_ef_cuda.c).
if [ -x "$B/tests/gpu_ef_cuda" ]; then
  if LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}${NVRTC_DIR:+:$NVRTC_DIR}" timeout 300 "$B/tests/gpu_ef_cuda" \
       >"$OUT/wire_kernels.txt" 2>&1; then
    ok "two-phase kernels bit-exact against the reference: $(grep -c '^ok' "$OUT/wire_kernels.txt") checks (every format, error feedback, stochastic rounding, misaligned)"
  else not_ok "two-phase kernels (see $OUT/wire_kernels.txt)"; grep -v '^ok' "$OUT/wire_kernels.txt" | tail -5 | sed 's/^/#   /'; fi
else
  not_ok "tests/gpu_ef_cuda not built (make gpu-check builds it)"
fi
fi

# ---- 2. PyTorch's NCCL, one process ------------------------------------------
if want 2; then
if [ "$DOUBLE" = 1 ]; then
  skip "PyTorch's NCCL on a GPU: not on the double"
elif $PY -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  # PyTorch's own libnccl (its wheel's, found through its RPATH).
  NCCLSHIM_DISABLE=1 LD_PRELOAD="$SHIM" timeout 300 $PY tests/gpu/shim_torch.py "$OUT/torch-plain.json" \
    >"$OUT/torch-plain.log" 2>&1 || not_ok "shim_torch.py without the shim (see $OUT/torch-plain.log)"
  LD_PRELOAD="$SHIM" NCCLSHIM_LOG=summary timeout 300 $PY tests/gpu/shim_torch.py "$OUT/torch-shim.json" \
    >"$OUT/torch-shim.log" 2>&1 || not_ok "shim_torch.py with the shim (see $OUT/torch-shim.log)"
  grep -h "CUDA kernels:\|active on communicator" "$OUT/torch-shim.log" | head -2 | sed 's/^/#   /'
  res=$($PY - "$OUT/torch-plain.json" "$OUT/torch-shim.json" <<'EOF'
import json, sys
def load(p):
    try:
        return json.load(open(p))
    except Exception as e:
        print("not ok - %s unreadable (%s)" % (p, e)); return None
plain, shim = load(sys.argv[1]), load(sys.argv[2])
def check(c, msg):
    print(("ok - " if c else "not ok - ") + msg)
if plain:
    check(all(plain["exact_small_" + s] and plain["unchanged_rand_" + s] for s in ("big", "small")),
          "without the shim every all_reduce returns its input bit for bit (1 rank)")
if shim:
    st = shim.get("stats") or {}
    check(st.get("compressed", 0) > 0 and st.get("wire") == "fp16",
          "the shim compressed PyTorch's fp32 all_reduces (%s compressed, wire %s)" % (st.get("compressed"), st.get("wire")))
    for s, what in (("big", "256 MiB, pipelined"), ("small", "4 MiB, one piece")):
        check(shim["exact_small_" + s], "with the shim, %s: values exact in fp16 come back bit for bit" % what)
        check(shim["exact_rand_" + s], "with the shim, %s: random values come back as fp32(fp16(x)) bit for bit" % what)
if shim:
    check(shim.get("graph_exact") is True, "with the shim, an all_reduce captured into a CUDA graph replays exactly")
    bh, bg = shim.get("busy_host_ms"), shim.get("busy_gpu_ms")
    check(bh is not None and bg is not None and bg > 50 and bh < 0.1 * bg,
          "with the shim, a compressed all_reduce issued while the GPU is busy for %s ms returns in %s ms "
          "(no hidden wait: < 10 %% of it)" % (bg and round(bg, 1), bh and round(bh, 2)))
if plain and shim:
    # Two casts move 12 bytes per element (4 read + 2 written, then 2 + 4); a
    # copy of the fp32 buffer moves 8. At the goal bandwidth the casts cost
    # 12 / 8 / 0.9 of the copy's time; allowed: 1.25 x that + 40 us.
    for n, p in sorted(plain["sizes"].items(), key=lambda kv: int(kv[0])):
        q = shim["sizes"].get(n)
        if not q:
            check(False, "no shim timing for %s elements" % n); continue
        added = (q["allreduce_ms"] - p["allreduce_ms"]) * 1e3
        bound = 1.25 * (12.0 / 8.0 / 0.9) * p["copy_ms"] * 1e3 + 40.0
        check(added <= bound, "%d MiB fp32: the shim adds %.1f us of GPU time per compressed all_reduce "
              "(plain %.1f us, copy %.1f us; bound %.1f us)" % (int(n) * 4 >> 20, added, p["allreduce_ms"] * 1e3,
                                                              p["copy_ms"] * 1e3, bound))
EOF
)
  echo "$res"
  pass=$((pass + $(grep -c '^ok - ' <<<"$res")))
  fail=$((fail + $(grep -c '^not ok - ' <<<"$res")))
  grep -q 'ok - with the shim, 256 MiB' <<<"$res" || not_ok "the PyTorch comparison did not check the 256 MiB results"
else
  not_ok "python3 with a CUDA-enabled torch not found: PyTorch checks not run"
fi
fi

# ---- 3. allreduce_perf on the real libnccl (an MPI program) ---------------------
if want 3; then
# Device buffers need an allreduce_perf built with the CUDA runtime (the
# toolkit's libcudart); on the double, and without the toolkit, host buffers.
AP_MEM=host
if command -v mpicc >/dev/null && command -v mpirun >/dev/null; then
  if make -C "$ROOT" --no-print-directory B="$B" "$B/bin/allreduce_perf" >"$OUT/build-ap.log" 2>&1; then
    if [ "$DOUBLE" != 1 ] && ldd "$ROOT/$B/bin/allreduce_perf" 2>/dev/null | grep -q libcudart; then AP_MEM=cuda
    else echo "# allreduce_perf on host buffers ($([ "$DOUBLE" = 1 ] && echo "the double" || echo "built without the CUDA runtime: no toolkit"))"; fi
    ap() { # name, env assignments, --, args
      local name=$1; shift; local envs=()
      while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
      env "${envs[@]}" LD_LIBRARY_PATH="${NCCL_DIR:+$NCCL_DIR:}$AP_LD" ALLREDUCE_PERF_MEM=$AP_MEM \
        timeout 120 mpirun -np 1 "$ROOT/$B/bin/allreduce_perf" "$@" >"$OUT/ap-$name.txt" 2>&1
    }
    big=256M rnd=64M; [ "$DOUBLE" = 1 ] && big=4M rnd=4M
    ap plain -- -b 1M -e $big -f 4 -n 20 -w 5 && ok "allreduce_perf, real NCCL, no shim" || not_ok "allreduce_perf no shim"
    ap shim LD_PRELOAD="$SHIM" NCCLSHIM_LOG=summary -- -b 1M -e $big -f 4 -n 20 -w 5 \
      && ok "allreduce_perf, real NCCL, shim fp16 (0 wrong)" || not_ok "allreduce_perf with shim"
    grep -q "active on communicator" "$OUT/ap-shim.txt" && ok "shim banner on the real NCCL" || not_ok "no shim banner"
    ap rand LD_PRELOAD="$SHIM" NCCLSHIM_LOG=off -- -b $rnd -e $rnd -n 10 -w 3 -R 1 \
      && ok "random inputs within the documented fp16 bound" || not_ok "random inputs"
  else
    not_ok "allreduce_perf does not build (see $OUT/build-ap.log)"
  fi
else
  skip "no mpicc/mpirun here: allreduce_perf not run (sections 1, 2 and 5 cover the GPU paths)"
fi
fi

# ---- 4. sync audit (static) ----------------------------------------------------
if want 4; then
# No synchronize call at all in the shim's sources (comments aside): the
# configuration check polls an event, the hook path never waits.
grep -nE "cu(Stream|Ctx|Event|Device)Synchronize *\(" shim/*.c shim/*/*.c compress/cu_*.c \
  | grep -vE "^[^:]*:[0-9]+: *(\*|//|/\*)" >"$OUT/syncs.txt"
nsync=$(wc -l <"$OUT/syncs.txt")
[ "$nsync" -eq 0 ] && ok "sync audit: no synchronize call in the shim's sources" \
  || { not_ok "sync audit: $nsync synchronize call(s) in the shim's sources"; sed 's/^/#   /' "$OUT/syncs.txt"; }
fi

# ---- 5. DDP training through torchrun, with and without the shim --------------
if want 5; then
if [ "$DOUBLE" = 1 ]; then
  skip "DDP training on a GPU: not on the double"
elif $PY -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  T="$PY -m torch.distributed.run --standalone --nproc_per_node=1 $ROOT/tests/gpu/ddp_train.py --steps 50"
  NCCLSHIM_DISABLE=1 timeout 300 $T --out "$OUT/loss-plain.txt" >"$OUT/ddp-plain.log" 2>&1 \
    && ok "DDP training without the shim" || not_ok "DDP training without the shim"
  LD_PRELOAD="$SHIM" NCCLSHIM_LOG=calls NCCLSHIM_LOG_FILE="$OUT/ddp-calls.%r.jsonl" NCCLSHIM_MIN_BYTES=4096 \
    timeout 300 $T --out "$OUT/loss-shim.txt" >"$OUT/ddp-shim.log" 2>&1 \
    && ok "DDP training with the shim preloaded" || not_ok "DDP training with the shim"
  $PY "$ROOT/tests/gpu/ddp_compare.py" "$OUT" && ok "shim intercepted the bucket all-reduces; loss curves match" \
    || not_ok "DDP comparison (see above)"
  # Two ranks on the one GPU: NCCL accepts them when their host ids differ
  # (each its own "node", over NCCL's network transport), which runs the
  # two-phase path and fusion on real NCCL; not the hierarchical path (it
  # needs several ranks on a node).
  T2="$PY -m torch.distributed.run --standalone --nproc_per_node=2 $ROOT/tests/gpu/ddp_train.py --steps 20 --one-gpu"
  LD_PRELOAD="$SHIM" NCCLSHIM_COMPRESS=int8 NCCLSHIM_ALGO=twophase NCCLSHIM_ERROR_FEEDBACK=1 NCCLSHIM_MIN_BYTES=4096 \
    NCCLSHIM_LOG=summary timeout 300 $T2 --out "$OUT/loss-2r.txt" >"$OUT/ddp-2r.log" 2>&1 \
    && grep -q "active on communicator" "$OUT/ddp-2r.log" \
    && ok "DDP on 2 ranks sharing the GPU (NCCL_HOSTID per rank), int8 two-phase with error feedback on real NCCL" \
    || { not_ok "DDP on 2 ranks sharing the GPU (see $OUT/ddp-2r.log)"; tail -5 "$OUT/ddp-2r.log" | sed 's/^/#   /'; }
fi
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
