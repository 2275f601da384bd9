# tests/lib.sh — sourced by every test script under tests/t/.
#
# Each script prints one TAP-style line per check ("ok - what" or
# "not ok - what"); tests/run.sh counts them. Helpers here run a command and
# turn its exit status into such a line, keeping the output of failures.
# Must not: change the caller's working directory or leave processes behind.

ROOT=${ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
B=${B:-build}
BUILD="$ROOT/$B"
SHIM="$BUILD/lib/libncclshim.so"
HOSTNCCL_DIR="$BUILD/lib/hostnccl"
BIN="$BUILD/bin"
TBIN="$BUILD/tests"
TMPD=${TMPD:-$(mktemp -d "${TMPDIR:-/tmp}/ncclshim-test.XXXXXX")}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
# The host NCCL charges nothing per launch unless HOSTNCCL_LAUNCH_US says so,
# and a test exercises the shim's compression on that fabric: it tells the
# shim that launches are free (NCCLSHIM_LAUNCH_BYTES=0), or at the default
# 4 MiB per launch auto would leave most test-sized calls untouched (issue
# 33). Tests of the launch-aware defaults (49-launches, the fuzzer's draws)
# set their own; scripts that clear NCCLSHIM_* call shim_env_clean.
export NCCLSHIM_LAUNCH_BYTES=${NCCLSHIM_LAUNCH_BYTES:-0}
shim_env_clean() {
  local v
  for v in $(env | grep -o '^NCCLSHIM_[A-Z_]*'); do unset "$v"; done
  export NCCLSHIM_LAUNCH_BYTES=0
}
# Sanitizer builds: leaks inside Open MPI are not ours to report.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# The host NCCL never lets mismatched collectives pass: it prints a
# HOSTNCCL-MISMATCH line naming both calls, appends it to HOSTNCCL_REPORT_FILE
# and aborts the job. Every line there is a failed check of its own, whatever
# the run's exit status and whatever the test expected the call to return:
# reported on this script's stdout (fd 9, so also from inside `check`) after
# each MPI run of the helpers below, and at exit for any other run.
export HOSTNCCL_REPORT_FILE="$TMPD/hostnccl-report.log"
exec 9>&1
hn_reports() {
  [ -s "$HOSTNCCL_REPORT_FILE" ] || return 0
  echo "not ok - the host NCCL reported mismatched collectives ($(wc -l <"$HOSTNCCL_REPORT_FILE") lines): $(head -n 1 "$HOSTNCCL_REPORT_FILE")" >&9
  cat "$HOSTNCCL_REPORT_FILE" >>"$HOSTNCCL_REPORT_FILE.seen"
  : >"$HOSTNCCL_REPORT_FILE"
  return 1
}
trap 'hn_reports || true' EXIT

ok()     { echo "ok - $*"; }
not_ok() { echo "not ok - $*"; }

# check "description" cmd args...: ok when cmd exits 0; else not ok + output tail.
check() {
  local desc=$1; shift
  local log="$TMPD/check.$$.$RANDOM.log"
  if "$@" >"$log" 2>&1; then ok "$desc"; else
    not_ok "$desc (exit $?)"; sed 's/^/#   /' "$log" | tail -n 25
  fi
}

# check_fails "description" cmd args...: ok when cmd exits non-zero.
check_fails() {
  local desc=$1; shift
  if "$@" >"$TMPD/last.log" 2>&1; then not_ok "$desc (succeeded)"; sed 's/^/#   /' "$TMPD/last.log" | tail -n 15
  else ok "$desc"; fi
}

# check_grep "description" PATTERN FILE: ok when FILE has a line matching PATTERN.
check_grep() {
  if grep -Eq -- "$2" "$3"; then ok "$1"; else not_ok "$1 (no /$2/ in $3)"; sed 's/^/#   /' "$3" | tail -n 15; fi
}

# mpirun_checked ARGS...: mpirun under TEST_TIMEOUT; exit 86 (and a failed
# check) when the host NCCL reported mismatched collectives, whatever mpirun's
# status. Every MPI run of a test goes through it (MPMD runs directly).
mpirun_checked() {
  timeout "${TEST_TIMEOUT:-180}" mpirun "$@"
  local rc=$?
  hn_reports || rc=86
  return $rc
}

# Run N ranks of an MPI program against the host NCCL (no shim).
mpirun_host() {
  local n=$1; shift
  mpirun_checked -np "$n" -x LD_LIBRARY_PATH="$HOSTNCCL_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"
}

# The same with the shim preloaded (extra NCCLSHIM_* variables come from the
# environment; mpirun forwards the whole environment to local ranks).
mpirun_shim() {
  local n=$1; shift
  mpirun_checked -np "$n" -x LD_LIBRARY_PATH="$HOSTNCCL_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    -x LD_PRELOAD="$SHIM${SAN_PRELOAD:+:$SAN_PRELOAD}" "$@"
}

# mpirun_nodes [--shim] N L [-x VAR=value ...] -- PROGRAM ARGS...: N emulated
# nodes of L ranks each against the host NCCL (--shim: the shim preloaded
# too): node k's ranks run in a UTS namespace of their own whose
# host name is emunodeK, so the host NCCL and the shim find nodes by host name
# as they do on a cluster, with no test-only switch. The -x settings go to
# every node (in an MPMD run -x is per app context).
mpirun_nodes() {
  local xs=() ctx=() k n l
  [ "$1" = --shim ] && { xs+=(-x LD_PRELOAD="$SHIM${SAN_PRELOAD:+:$SAN_PRELOAD}"); shift; }
  n=$1 l=$2
  shift 2
  while [ "$1" != -- ]; do xs+=("$1"); shift; done
  shift
  for ((k = 0; k < n; k++)); do
    [ $k -gt 0 ] && ctx+=(:)
    ctx+=(-np "$l" -x LD_LIBRARY_PATH="$HOSTNCCL_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "${xs[@]}"
      unshare --uts sh -c 'hostname "$0" && exec "$@"' "emunode$k" "$@")
  done
  mpirun_checked "${ctx[@]}"
}

# expect_mismatch "description" A B mpirun-args...: the host NCCL's own check,
# tested: the run must fail (job aborted) with a HOSTNCCL-MISMATCH line naming
# both calls (EREs A and B, either order), kept apart from the reports that
# fail a test.
expect_mismatch() {
  local desc=$1 pat="($2.*$3|$3.*$2)"; shift 3
  local f="$TMPD/expected-mismatch.$RANDOM.log"
  HOSTNCCL_REPORT_FILE=$f timeout "${TEST_TIMEOUT:-180}" mpirun "$@" >"$f.out" 2>&1
  local rc=$?
  if [ $rc -ne 0 ] && grep -Eq "HOSTNCCL-MISMATCH:.*$pat" "$f" && grep -Eq "HOSTNCCL-MISMATCH:.*$pat" "$f.out"; then
    ok "$desc"
  else
    not_ok "$desc (exit $rc, no /$pat/ reported)"; sed 's/^/#   /' "$f.out" | tail -n 10
  fi
}

# with K=V... cmd args...: run cmd (a function too) with extra exported variables.
# The wire formats' names, from compress/formats.h's rows (ncclshim-envdoc
# --names): every format, the block-scaled ones, the 16-bit floats.
FORMATS=$("$BIN/ncclshim-envdoc" --names 2>/dev/null)
FORMATS_BLOCKED=$("$BIN/ncclshim-envdoc" --names blocked 2>/dev/null)

with() {
  local kv=()
  while [[ "${1:-}" == [A-Za-z_]*=* ]]; do kv+=("$1"); shift; done
  ( [ ${#kv[@]} -eq 0 ] || export "${kv[@]}"; "$@" )
}

# Real PyTorch on CPU (tests/torch/): `make deps` installs it into this cached
# virtual environment. torchrun_host N SCRIPT ARGS...: N ranks of a torch
# program over the host NCCL through the ncclpg backend (torchrun --standalone
# picks a free port); torchrun_shim: the same with the shim preloaded, as a
# user runs it (LD_PRELOAD=libncclshim.so torchrun ...).
TORCH_VENV=${SHIMTEST_TORCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ncclshim/torch-venv}
torchrun_host() {
  local n=$1; shift
  HOSTNCCL_LIB="$HOSTNCCL_DIR/libnccl.so.2" OMP_NUM_THREADS=1 timeout "${TEST_TIMEOUT:-180}" \
    "$TORCH_VENV/bin/torchrun" --standalone --nproc_per_node="$n" "$@"
}
torchrun_shim() { LD_PRELOAD="$SHIM${SAN_PRELOAD:+:$SAN_PRELOAD}" torchrun_host "$@"; }
# torchrun_hooked: the same with the package's in-worker hook on PYTHONPATH,
# as ncclshim-run (and a plain torchrun user, docs/usage.md) runs it.
torchrun_hooked() { PYTHONPATH="$ROOT/env/ncclshim/site${PYTHONPATH:+:$PYTHONPATH}" torchrun_shim "$@"; }
