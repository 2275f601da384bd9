#!/usr/bin/env bash
# tests/gpu/check.sh — `make gpu-check`: everything that needs a real GPU, in
# one run of about 3 minutes on one GPU (181 s on an H200, 2026-12-04), on a
# fresh machine with only pip PyTorch (and the CUDA toolkit, or none: the
# kernels then come from NVRTC). Writes its outputs to $B/gpu-check/ and
# prints one TAP-style line per correctness check, "# speed" lines for the
# bandwidth goals, and two summary lines: "# speed: K of N goals met" and
# "P passed, F failed". The exit status is correctness alone (1 if any check
# failed): a kernel below its speed goal is a measurement, never a failure,
# so `make gpu-check gpu-bench` goes on to the benchmark. Every check can
# fail, and every check of the shim asserts that the shim transformed what
# it claims to test (its counters around the very call checked: compressed,
# in how many real NCCL calls); what cannot run here (no mpicc) is a "# skip"
# line, not a failure.
#   0. the driver: present, and new enough for the kernels this build has
#      (a fatbin needs a driver of at least the toolkit version that built it)
#   1. kernels: every CUDA kernel bit for bit against the host reference
#      (tests/check_kernels: casts, segments, scale; tests/gpu_ef_cuda: the
#      two-phase encode/decode/sum of every format with error feedback and
#      stochastic rounding); their bandwidth against a device-to-device copy
#      (speed goals: 0.9 of the copy's bytes per second for the plain casts,
#      0.8 for the others)
#   2. PyTorch's NCCL, one process (tests/gpu/shim_torch.py), with and without
#      the shim: results bit-exact, each checked call compressed in fp16 by
#      the ring in the expected number of real calls (8 chunks for the large
#      one, 1 for the small); a call issued while the GPU is busy returns at
#      once; a captured call forwarded and replayed exactly; the added GPU
#      time per compressed all-reduce (a speed goal)
#   3. allreduce_perf on the real libnccl with and without the shim (0 wrong),
#      every row compressed in fp16, the large ones pipelined, where mpicc and
#      mpirun exist
#   4. the sync audit: no stream/context/event synchronize in the shim's sources
#   5. torchrun DDP training without and with the shim: the bucket all-reduces
#      compressed, the loss curves match within the stated tolerance; 2 ranks
#      sharing the GPU in int8 two-phase with error feedback, every step's
#      buckets carried in two phases
# One rank: NCCLSHIM_ALGO=auto leaves a call on 1 rank untouched (nothing
# crosses a link, so no plan beats plain NCCL), so sections 2, 3 and 5 ask
# for the ring (GPU_CHECK_ALGO, ring) and, where a call must be pipelined,
# for chunks (NCCLSHIM_CHUNK_BYTES: auto makes one chunk on device memory).
#
# GPU_CHECK_DOUBLE=1 (CI: tests/t/17-gpu-check.sh) runs this same script on
# the stand-ins instead: 0 and 4 as on a GPU; 1 on the CUDA driver test
# double (tests/cudadrv, first on LD_LIBRARY_PATH for that section) with
# --quick and a 1 MiB bandwidth table whose rows must be there but whose
# ratios are not judged (the double's timings say nothing about a GPU); 2, 3
# and 5 with the same shim settings and verdicts on CPU tensors over the host
# NCCL (sections 2 and 5 through ncclshim.emulate, PYTHON with PyTorch;
# smaller sizes, 8 chunks all the same); the busy-GPU and CUDA graph checks
# of section 2 need a GPU and are "# skip" lines there.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=${B:-build}
OUT="$ROOT/$B/gpu-check"
mkdir -p "$OUT"
rm -f "$OUT"/*.json "$OUT"/*.jsonl "$OUT"/loss-*.txt
cd "$ROOT"
pass=0; fail=0; speed_n=0; speed_met=0; speed_below=""
ok()     { echo "ok - $*"; pass=$((pass + 1)); }
not_ok() { echo "not ok - $*"; fail=$((fail + 1)); }
skip()   { echo "# skip - $*"; }
# speed RATIO GOAL WHAT: a speed goal, met or not; never a failure.
speed() {
  speed_n=$((speed_n + 1))
  if awk -v r="$1" -v g="$2" 'BEGIN{exit !(r >= g)}'; then
    speed_met=$((speed_met + 1)); echo "# speed met - $3: $1 x a device-to-device copy (goal $2)"
  else
    speed_below="$speed_below${speed_below:+, }$3 $1"; echo "# speed below - $3: $1 x a device-to-device copy (goal $2)"
  fi
}
# count_lines TEXT: adds a Python verdict's "ok"/"not ok" lines to the totals
# and its "# speed met/below" lines to the speed goals.
count_lines() {
  pass=$((pass + $(grep -c '^ok - ' <<<"$1")))
  fail=$((fail + $(grep -c '^not ok - ' <<<"$1")))
  speed_n=$((speed_n + $(grep -c '^# speed \(met\|below\) - ' <<<"$1")))
  speed_met=$((speed_met + $(grep -c '^# speed met - ' <<<"$1")))
  local b; b=$(sed -n 's/^# speed below - \([^:]*\):.*/\1/p' <<<"$1" | paste -sd, - | sed 's/,/, /g')
  [ -n "$b" ] && speed_below="$speed_below${speed_below:+, }$b"
  return 0
}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
PY=${PYTHON:-python3}
SHIM="$ROOT/$B/lib/libncclshim.so"
GOAL_BW=${GOAL_BW:-0.9}
DOUBLE=${GPU_CHECK_DOUBLE:-0}
# GPU_CHECK_SPEED=judge: judge the bandwidth rows on the stand-ins too (CI
# checks that a goal missed is reported and never fails the run).
SPEED=${GPU_CHECK_SPEED:-}
# The one-rank sections' algorithm: ring (auto leaves a call on 1 rank untouched).
ALGO1=${GPU_CHECK_ALGO:-ring}
# GPU_CHECK_SECTIONS="0 1": only those sections (CI runs parts of it to see them fail).
want() { case " ${GPU_CHECK_SECTIONS:-0 1 2 3 4 5} " in *" $1 "*) return 0 ;; esac; return 1; }
AP_LD=${LD_LIBRARY_PATH:-} # sections 2, 3 and 5's library path: never the double (the host NCCL would take its NULL stream for one)

for v in $(env | grep -o '^NCCLSHIM_[A-Z_]*'); do unset "$v"; done # the caller's settings must not leak into a check

if [ "$DOUBLE" = 1 ]; then
  echo "# gpu-check $(date -u +%Y-%m-%dT%H:%MZ) on the STAND-INS: the CUDA driver test double (tests/cudadrv) and, for PyTorch, CPU tensors over the host NCCL; not a GPU"
  export LD_LIBRARY_PATH="$ROOT/$B/lib/cudadrv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
  echo "# gpu-check $(date -u +%Y-%m-%dT%H:%MZ) on $(nvidia-smi -L 2>/dev/null | head -1)"
fi
[ -f "$SHIM" ] || { not_ok "the shim is built ($SHIM missing)"; echo "$pass passed, $fail failed"; exit 1; }

# PyTorch programs: as they are on a GPU; on the stand-ins through
# ncclshim.emulate (the "nccl" process group served by ncclpg over the host
# NCCL, CPU tensors, --cpu), never with the driver double on the library path.
py1() { # seconds, python script and arguments: one process
  local t=$1; shift
  if [ "$DOUBLE" = 1 ]; then
    env LD_LIBRARY_PATH="$AP_LD" PYTHONPATH="$ROOT/env${PYTHONPATH:+:$PYTHONPATH}" OMP_NUM_THREADS=1 \
      HOSTNCCL_LIB="$ROOT/$B/lib/hostnccl/libnccl.so.2" timeout -k 10 "$t" "$PY" -m ncclshim.emulate "$@" --cpu
  else timeout -k 10 "$t" "$PY" "$@"; fi
}
trun() { # seconds, ranks, python script and arguments: torchrun --standalone
  local t=$1 n=$2; shift 2
  if [ "$DOUBLE" = 1 ]; then
    env LD_LIBRARY_PATH="$AP_LD" PYTHONPATH="$ROOT/env${PYTHONPATH:+:$PYTHONPATH}" OMP_NUM_THREADS=1 \
      HOSTNCCL_LIB="$ROOT/$B/lib/hostnccl/libnccl.so.2" timeout -k 10 "$t" "$PY" -m torch.distributed.run --standalone \
      --nproc_per_node="$n" -m ncclshim.emulate "$@" --cpu
  else timeout -k 10 "$t" "$PY" -m torch.distributed.run --standalone --nproc_per_node="$n" "$@"; fi
}
have_torch() {
  if [ "$DOUBLE" = 1 ]; then LD_LIBRARY_PATH="$AP_LD" "$PY" -c 'import torch' 2>/dev/null
  else "$PY" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; fi
}

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
  sed -n '/^# bandwidth/,$p' "$OUT/kernels.txt" | head -24 | sed 's/^/#   /'
  # Speed goals: the plain casts at GOAL_BW (0.9) of a copy; the two-phase
  # kernels, segments and scales at GOAL_KBW (0.8, issue 34). A row that is
  # missing is a failure (the table is broken); a ratio below its goal is not.
  for k in "to_wire fp16" "to_wire bf16" "from_wire fp16" "from_wire bf16" "to_wire fp16 underflow" \
           "seg_from_wire bf16 x64" "scale fp16" "tp encode int8" "tp encode fp16s" "tp decode-sum int8 x2" \
           "tp decode-sum fp16 x2" "tp encode int4" "tp decode-sum int4 x2"; do
    g=$GOAL_BW; case $k in to_wire*|from_wire*) ;; *) g=${GOAL_KBW:-0.8} ;; esac
    r=$(awk -v k="$k" 'index($0, "  " k " ") == 1 && $NF ~ /^[0-9]+\.[0-9]+$/ {print $NF; exit}' "$OUT/kernels.txt")
    if [ -z "$r" ]; then not_ok "$k: no bandwidth row in $OUT/kernels.txt"
    elif [ "$DOUBLE" = 1 ] && [ "$SPEED" != judge ]; then ok "$k: bandwidth row read ($r x a copy on the double; its goal is judged on a GPU only)"
    else speed "$r" "$g" "$k"; fi
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
if have_torch; then
  # The large call is pipelined in 8 chunks of CHUNK2: 256 MiB in 32 MiB on
  # a GPU; on the stand-ins 16 MiB in 2 MiB, with small sizes (CPU time).
  if [ "$DOUBLE" = 1 ]; then st_args=(--sizes 256K,1M --iters 5 --big 4M --small 256K); CHUNK2=2M
  else st_args=(--big 64M --small 1M); CHUNK2=32M; fi
  # PyTorch's own libnccl (its wheel's, found through its RPATH).
  NCCLSHIM_DISABLE=1 LD_PRELOAD="$SHIM" py1 300 tests/gpu/shim_torch.py "$OUT/torch-plain.json" "${st_args[@]}" \
    >"$OUT/torch-plain.log" 2>&1 || not_ok "shim_torch.py without the shim (see $OUT/torch-plain.log)"
  LD_PRELOAD="$SHIM" NCCLSHIM_LOG=summary NCCLSHIM_ALGO="$ALGO1" NCCLSHIM_CHUNK_BYTES=$CHUNK2 \
    py1 300 tests/gpu/shim_torch.py "$OUT/torch-shim.json" "${st_args[@]}" \
    >"$OUT/torch-shim.log" 2>&1 || not_ok "shim_torch.py with the shim (see $OUT/torch-shim.log)"
  grep -h "CUDA kernels:\|active on communicator" "$OUT/torch-shim.log" | head -2 | sed 's/^/#   /'
  res=$($PY - "$OUT/torch-plain.json" "$OUT/torch-shim.json" "$DOUBLE" <<'EOF'
import json, sys
def load(p):
    try:
        return json.load(open(p))
    except Exception as e:
        print("not ok - %s unreadable (%s)" % (p, e)); return None
plain, shim, double = load(sys.argv[1]), load(sys.argv[2]), sys.argv[3] == "1"
def check(c, msg):
    print(("ok - " if c else "not ok - ") + msg)
def did(r, k):
    return (r.get("did") or {}).get(k) or {}
def said(d):
    return "%s compressed, %s forwarded, %s real call(s), wire %s" % (
        d.get("compressed"), d.get("passthrough"), d.get("real_calls"), d.get("wire"))
if plain:
    check(all(plain["exact_small_" + s] and plain["unchanged_rand_" + s] for s in ("big", "small")) and
          all(did(plain, k).get("compressed", 0) == 0 for k in plain.get("did") or {}),
          "without the shim (NCCLSHIM_DISABLE=1) every all_reduce returns its input bit for bit, none compressed (1 rank)")
if shim:
    st = shim.get("stats") or {}
    check(st.get("compressed", 0) > 0 and st.get("wire") == "fp16",
          "the shim compressed PyTorch's fp32 all_reduces (%s of %s calls compressed, wire %s)" %
          (st.get("compressed"), st.get("calls"), st.get("wire")))
    # Each checked call: compressed once, in fp16, in the expected real calls
    # (8 chunks for the big one, one for the small one), and its bits.
    for s, chunks in (("big", 8), ("small", 1)):
        what = "%d Mi elements%s" % (shim["elems_" + s] >> 20, ", pipelined" if chunks > 1 else "") \
            if shim["elems_" + s] >= 1 << 20 else "%d Ki elements" % (shim["elems_" + s] >> 10)
        for key, label, bits in (("exact_small_" + s, "values exact in fp16 come back bit for bit", shim["exact_small_" + s]),
                                 ("rand_" + s, "random values come back as fp32(fp16(x)) bit for bit, not as x",
                                  shim["exact_rand_" + s] and not shim["unchanged_rand_" + s])):
            d = did(shim, key)
            tr = d.get("compressed") == 1 and d.get("real_calls") == chunks and d.get("wire") == "fp16"
            check(bits and tr, "with the shim, %s: %s; the call compressed in %d real call(s) (%s)" %
                  (what, label, chunks, said(d)))
    if double:
        print("# skip - a call issued while the GPU is busy, and a captured call: need a GPU (CUDA sleep, CUDA graphs)")
    else:
        d = did(shim, "graph")
        check(shim.get("graph_exact") is True and d.get("compressed") == 0,
              "with the shim, an all_reduce captured into a CUDA graph is forwarded (%s) and replays exactly" % said(d))
        bh, bg, d = shim.get("busy_host_ms"), shim.get("busy_gpu_ms"), did(shim, "busy")
        check(bh is not None and bg is not None and bg > 50 and bh < 0.1 * bg and d.get("compressed") == 1,
              "with the shim, a compressed all_reduce (%s) issued while the GPU is busy for %s ms returns in %s ms "
              "(no hidden wait: < 10 %% of it)" % (said(d), bg and round(bg, 1), bh and round(bh, 2)))
if plain and shim:
    # Two casts move 12 bytes per element (4 read + 2 written, then 2 + 4); a
    # copy of the fp32 buffer moves 8. At the goal bandwidth the casts cost
    # 12 / 8 / 0.9 of the copy's time; the goal: 1.25 x that + 40 us. A speed
    # goal (judged on a GPU only), never a failure.
    for n, p in sorted(plain["sizes"].items(), key=lambda kv: int(kv[0])):
        q = shim["sizes"].get(n)
        if not q:
            check(False, "no shim timing for %s elements" % n); continue
        added = (q["allreduce_ms"] - p["allreduce_ms"]) * 1e3
        bound = 1.25 * (12.0 / 8.0 / 0.9) * p["copy_ms"] * 1e3 + 40.0
        msg = "%d KiB fp32: the shim adds %.1f us of GPU time per compressed all_reduce (plain %.1f us, copy %.1f us; " \
              "goal %.1f us)" % (int(n) * 4 >> 10, added, p["allreduce_ms"] * 1e3, p["copy_ms"] * 1e3, bound)
        if double:
            check(True, msg.replace("GPU time", "CPU time") + ": timing read, judged on a GPU only")
        else:
            print("# speed %s - added time at %s" % ("met" if added <= bound else "below", msg))
EOF
)
  echo "$res"
  count_lines "$res"
  grep -q 'ok - with the shim, .*pipelined' <<<"$res" || not_ok "the PyTorch comparison did not check the pipelined results"
else
  not_ok "python3 with $([ "$DOUBLE" = 1 ] && echo "PyTorch" || echo "a CUDA-enabled torch") not found ($PY): PyTorch checks not run"
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
    # ap_did FILE CHUNK: every row compressed in fp16 in and out of place, the
    # counters' calls all compressed, and the rows above CHUNK pipelined (at
    # least ceil(size / CHUNK) - 1 real calls more than the calls, per call).
    ap_did() {
      awk -v chunk="$2" '
        function bytes(s) { return s ~ /M$/ ? s * 1048576 : s ~ /K$/ ? s * 1024 : s + 0 }
        BEGIN { c = bytes(chunk) }
        /^ +[0-9]+ +[0-9]+ +float/ { rows++; if ($(NF-3) == "fp16" && $(NF-1) == "fp16") fp16++;
                                     extra += int(($1 + c - 1) / c) - 1 }
        /^#   calls / { for (i = 2; i < NF; i += 2) k[$i] = $(i+1) }
        END { per = rows ? k["calls"] / rows : 0; need = per * extra
              ok = rows > 0 && fp16 == rows && k["calls"] > 0 && k["compressed"] == k["calls"] && k["passthrough"] == 0 &&
                   k["real_calls"] - k["calls"] >= need
              printf "%d %d of %d rows in fp16 in and out of place, %d of %d calls compressed, %d real calls (at least %d more than the calls: %d chunks past the first per call of each row)\n",
                     ok, fp16, rows, k["compressed"], k["calls"], k["real_calls"], need, extra
              exit !ok }' "$1"
    }
    big=256M rnd=64M chunk3=32M; [ "$DOUBLE" = 1 ] && big=4M rnd=4M chunk3=1M
    shim_env=(LD_PRELOAD="$SHIM" NCCLSHIM_ALGO="$ALGO1" NCCLSHIM_CHUNK_BYTES=$chunk3)
    ap plain -- -b 1M -e $big -f 4 -n 20 -w 5 && ok "allreduce_perf, real NCCL, no shim" || not_ok "allreduce_perf no shim"
    ap shim "${shim_env[@]}" NCCLSHIM_LOG=summary -- -b 1M -e $big -f 4 -n 20 -w 5 \
      && ok "allreduce_perf, real NCCL, shim fp16 (0 wrong)" || not_ok "allreduce_perf with shim"
    grep -q "active on communicator" "$OUT/ap-shim.txt" && ok "shim banner on the real NCCL" || not_ok "no shim banner"
    d=$(ap_did "$OUT/ap-shim.txt" $chunk3) && ok "allreduce_perf with the shim: ${d#* } (ring, chunks of $chunk3)" \
      || not_ok "allreduce_perf with the shim did not compress (or pipeline) what it checked: ${d#* }"
    ap rand "${shim_env[@]}" NCCLSHIM_LOG=off -- -b $rnd -e $rnd -n 10 -w 3 -R 1 \
      && d=$(ap_did "$OUT/ap-rand.txt" $chunk3) && ok "random inputs within the documented fp16 bound: ${d#* }" \
      || not_ok "random inputs (see $OUT/ap-rand.txt): ${d#* }"
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
if have_torch; then
  S1=50 S2=20
  NCCLSHIM_DISABLE=1 trun 300 1 "$ROOT/tests/gpu/ddp_train.py" --steps $S1 --out "$OUT/loss-plain.txt" \
    >"$OUT/ddp-plain.log" 2>&1 && ok "DDP training without the shim" || not_ok "DDP training without the shim"
  LD_PRELOAD="$SHIM" NCCLSHIM_ALGO="$ALGO1" NCCLSHIM_LOG=calls NCCLSHIM_LOG_FILE="$OUT/ddp-calls.%r.jsonl" \
    NCCLSHIM_MIN_BYTES=4096 trun 300 1 "$ROOT/tests/gpu/ddp_train.py" --steps $S1 --out "$OUT/loss-shim.txt" \
    >"$OUT/ddp-shim.log" 2>&1 && ok "DDP training with the shim preloaded" || not_ok "DDP training with the shim"
  r=$($PY "$ROOT/tests/gpu/ddp_compare.py" "$OUT" --steps $S1 --min $S1 2>&1) \
    && ok "the shim compressed the bucket all-reduces; loss curves match: ${r#\# }" \
    || not_ok "DDP comparison: ${r#\# }"
  # Two ranks on the one GPU: NCCL accepts them when their host ids differ
  # (each its own "node", over NCCL's network transport), which runs the
  # two-phase path and fusion on real NCCL; not the hierarchical path (it
  # needs several ranks on a node). Every step's buckets go in two phases.
  LD_PRELOAD="$SHIM" NCCLSHIM_COMPRESS=int8 NCCLSHIM_ALGO=twophase NCCLSHIM_ERROR_FEEDBACK=1 NCCLSHIM_MIN_BYTES=4096 \
    NCCLSHIM_LOG=summary trun 300 2 "$ROOT/tests/gpu/ddp_train.py" --steps $S2 --one-gpu \
    --out "$OUT/loss-2r.txt" --stats "$OUT/ddp-2r-stats.json" >"$OUT/ddp-2r.log" 2>&1
  rc=$?
  d=$($PY -c 'import json, sys; s = json.load(open(sys.argv[1])) or {}; n = int(sys.argv[2])
print(int(s.get("twophase", 0) >= n and s.get("compressed", 0) + s.get("fused", 0) >= n and s.get("wire") == "int8"),
      "%s of %s calls compressed, %s in two phases, wire %s" % (s.get("compressed"), s.get("calls"), s.get("twophase"), s.get("wire")))' \
      "$OUT/ddp-2r-stats.json" $S2 2>/dev/null)
  [ $rc -eq 0 ] && grep -q "active on communicator" "$OUT/ddp-2r.log" && [ "${d%% *}" = 1 ] \
    && ok "DDP on 2 ranks sharing the GPU (NCCL_HOSTID per rank), int8 two-phase with error feedback on real NCCL: ${d#* }" \
    || { not_ok "DDP on 2 ranks sharing the GPU, int8 two-phase (exit $rc; ${d#* }; see $OUT/ddp-2r.log)"; tail -5 "$OUT/ddp-2r.log" | sed 's/^/#   /'; }
else
  not_ok "python3 with $([ "$DOUBLE" = 1 ] && echo "PyTorch" || echo "a CUDA-enabled torch") not found ($PY): DDP checks not run"
fi
fi

if [ "$DOUBLE" = 1 ] && [ "$SPEED" != judge ]; then echo "# speed: not judged on the stand-ins (their timings say nothing about a GPU)"
else echo "# speed: $speed_met of $speed_n goals met${speed_below:+; below: $speed_below}"; fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
