#!/usr/bin/env bash
# 85-pip.sh — the Python package (issue 25), installed as a user installs it:
#   - a fresh virtual environment that reuses the cached torch (a .pth file
#     naming the torch venv's site-packages: torch is never downloaded twice);
#   - a wheel built from this checkout by pip with the in-tree backend
#     (env/ncclshim_build.py, `pip wheel --no-build-isolation --no-index`: no
#     network), then `pip install` of that wheel;
#   - the console scripts ncclshim-run, ncclshim-report, ncclshim-tune (a
#     one-size quick sweep with the packaged allreduce_perf on the host NCCL),
#     ncclshim-model (the packaged model binary, rates and presets);
#     `python -m ncclshim --lib` (an existing file inside the venv), `--check`
#     (this torch links NCCL dynamically: exit 0, the kernels line; a bad
#     NCCLSHIM_* value: exit 1, named, from the packaged ncclshim-envcheck)
#     and `--hook-path` (the packaged hook's directory);
#   - `ncclshim-run --emulate --nproc 2` running tests/torch/plain_ddp.py, an
#     unmodified DDP script (init_process_group("nccl"), CPU tensors), with
#     logs to a directory: every step runs, ncclshim.stats() in the script
#     returns a dict whose counters say it compressed (5 bucket all-reduces,
#     fp16, enabled), and the installed ncclshim-report reads the logs back
#     (10 compressed calls over both ranks);
#   - the errors: stats() without the preloaded library, --emulate without
#     --nproc;
#   - the sdist: the backend's build_sdist holds the sources pip needs.
# About 30 s (torch's start-up is most of it). Must not: download anything,
# or install into the torch venv.
source "$(dirname "$0")/../lib.sh"
if [ ! -x "$TORCH_VENV/bin/python" ]; then
  not_ok "no torch in $TORCH_VENV (make deps installs it)"; exit 0
fi
V="$TMPD/venv"
"$TORCH_VENV/bin/python" -m venv "$V" >"$TMPD/venv.out" 2>&1
check "a fresh virtual environment" test -x "$V/bin/pip"
SP=$("$V/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$TORCH_VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' >"$SP/ncclshim-torch.pth"
check "it imports the cached torch through a .pth file" "$V/bin/python" -c 'import torch'

"$V/bin/pip" wheel --no-deps --no-index --no-build-isolation -w "$TMPD/wheels" "$ROOT" >"$TMPD/wheel.out" 2>&1
whl=$(ls "$TMPD"/wheels/ncclshim-*.whl 2>/dev/null | head -n 1)
check "pip wheel of the checkout (in-tree backend, offline): $(basename "${whl:-none}")" test -n "$whl"
"$V/bin/pip" install --no-index "$whl" >"$TMPD/install.out" 2>&1
check "pip install of that wheel" test $? -eq 0
for s in ncclshim-run ncclshim-report ncclshim-tune ncclshim-model; do
  check "console script $s installed and answers --help" "$V/bin/$s" --help
done

# The packaged benchmark finds a libnccl.so.2 (the host NCCL here: no NVIDIA device) and the
# packaged launcher is executable: a one-size quick sweep writes its env file.
(cd "$TMPD" && timeout 120 "$V/bin/ncclshim-tune" --quick --sizes 256K -o "$TMPD/tune.env") >"$TMPD/tune.out" 2>&1
check "ncclshim-tune --quick from the wheel: runs the packaged allreduce_perf, writes its env file" \
  grep -q 'NCCLSHIM_COMPRESS:=' "$TMPD/tune.env"

lib=$(cd "$TMPD" && "$V/bin/python" -m ncclshim --lib)
case $lib in "$SP"/ncclshim/lib/libncclshim.so) check "python -m ncclshim --lib: $lib" test -f "$lib" ;;
  *) not_ok "python -m ncclshim --lib printed '$lib', not a path inside $SP" ;; esac
(cd "$TMPD" && "$V/bin/python" -m ncclshim --check) >"$TMPD/check.out" 2>&1
check "python -m ncclshim --check: exit 0 for this torch" test $? -eq 0
check_grep "--check: torch links NCCL dynamically" "^torch: .*libtorch_cuda.so imports ncclAllReduce dynamically" "$TMPD/check.out"
check_grep "--check: which kernels a device would get" "^kernels: (fatbin built in|no fatbin was built)" "$TMPD/check.out"

(cd "$TMPD" && NCCLSHIM_COMPRESS=int5 NCCL_SHIM_LOG=calls "$V/bin/python" -m ncclshim --check) >"$TMPD/check.bad" 2>&1
check "python -m ncclshim --check with a bad value and a misspelt name: exit 1" test $? -eq 1
check_grep "... the value named, with the nearest choices" "^settings: REFUSED: NCCLSHIM_COMPRESS='int5' is invalid.*did you mean int8 or int4" "$TMPD/check.bad"
check_grep "... the misspelt name, with the one it meant" "^settings: REFUSED: misspelt variable NCCL_SHIM_LOG: did you mean NCCLSHIM_LOG" "$TMPD/check.bad"
check_grep "python -m ncclshim --check: the settings line (nothing set: accepted)" "^settings: every NCCLSHIM_" "$TMPD/check.out"
hp=$(cd "$TMPD" && "$V/bin/python" -m ncclshim --hook-path)
check "python -m ncclshim --hook-path: $hp holds the hook's sitecustomize.py" test -f "$hp/sitecustomize.py" -a "$hp" = "$SP/ncclshim/site"
(cd "$TMPD" && "$V/bin/ncclshim-model" --nodes 2 --ranks-per-node 4 --nic-gbps 25 --bytes 64M --preset ethernet-25g) >"$TMPD/model.out" 2>&1
check "ncclshim-model from the wheel: the packaged model, rates and preset (a MODELLED table)" \
  grep -q "rates: $SP/ncclshim/scripts/rates-default.txt" "$TMPD/model.out"

(cd "$TMPD" && "$V/bin/python" -c 'import ncclshim; ncclshim.stats()') >"$TMPD/nostats.out" 2>&1
check "ncclshim.stats() without the preloaded library: an error that says so" \
  grep -q "RuntimeError: libncclshim is not loaded in this process" "$TMPD/nostats.out"
(cd "$TMPD" && "$V/bin/ncclshim-run" --emulate -- "$ROOT/tests/torch/plain_ddp.py") >"$TMPD/nonproc.out" 2>&1
rc=$?
check "--emulate without --nproc: exit 2 with a message" \
  bash -c "[ $rc -eq 2 ] && grep -q 'needs --nproc' '$TMPD/nonproc.out'"

mkdir -p "$TMPD/logs"
(cd "$TMPD" && NCCLSHIM_LOG=calls NCCLSHIM_LOG_FILE="$TMPD/logs/" TEST_TIMEOUT=180 \
  timeout 180 "$V/bin/ncclshim-run" --emulate --nproc 2 --link-gbps 10 -- "$ROOT/tests/torch/plain_ddp.py" --steps 5) \
  >"$TMPD/emu.out" 2>&1
check "ncclshim-run --emulate --nproc 2 -- plain_ddp.py (an unmodified DDP script): exit 0" test $? -eq 0
check "the script ran its 5 steps" test "$(grep -c '^step [0-9] loss' "$TMPD/emu.out")" -eq 5
"$V/bin/python" - "$TMPD/emu.out" <<'EOF' >"$TMPD/stats.check" 2>&1
import json, sys
line = [l for l in open(sys.argv[1]) if l.startswith("stats ")]
s = json.loads(line[-1][6:])
assert isinstance(s, dict) and s["enabled"] is True and s["wire"] == "fp16", s
assert s["calls"] == 5 and s["compressed"] == 5 and s["wire_bytes"] * 2 == s["logical_bytes"], s
print("stats", s)
EOF
check "ncclshim.stats() in the job: a dict, 5 bucket all-reduces compressed to fp16 ($(tail -c 160 "$TMPD/stats.check"))" \
  grep -q "^stats " "$TMPD/stats.check"
"$V/bin/ncclshim-report" --json "$TMPD/report.json" "$TMPD/logs" >"$TMPD/report.txt" 2>&1
check "the installed ncclshim-report reads the job's logs" test $? -eq 0
"$V/bin/python" - "$TMPD/report.json" <<'EOF' >"$TMPD/report.check" 2>&1
import json, sys
d = json.load(open(sys.argv[1]))
c = [x for x in d["communicators"] if x["comm_seq"] == 0][0]
n = c["totals"]["compressed"]["calls"]
assert n == 10, c["totals"]
print("compressed", n)
EOF
check "report: 10 compressed calls over the 2 ranks ($(tail -n 1 "$TMPD/report.check"))" grep -q "^compressed 10" "$TMPD/report.check"

"$V/bin/python" - "$ROOT" "$TMPD" <<'EOF' >"$TMPD/sdist.out" 2>&1
import os, sys, tarfile
sys.path.insert(0, os.path.join(sys.argv[1], "env"))
import ncclshim_build
name = ncclshim_build.build_sdist(sys.argv[2])
names = set(tarfile.open(os.path.join(sys.argv[2], name)).getnames())
need = ["pyproject.toml", "Makefile", "env/ncclshim_build.py", "env/ncclshim/__init__.py", "shim/hooks/hooks.c",
        "env/ncclshim/ncclpg.py", "env/ncclshim/hook.py", "env/ncclshim/site/sitecustomize.py", "shim/tools/envcheck.c",
        "bench/model/rates-default.txt", "PKG-INFO"]
missing = [n for n in need if "ncclshim-0.1.0/" + n not in names]
assert not missing, missing
print(name, len(names))
EOF
check "the backend's sdist holds the sources ($(tail -n 1 "$TMPD/sdist.out"))" test $? -eq 0
