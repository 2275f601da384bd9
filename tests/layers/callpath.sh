#!/usr/bin/env bash
# tests/layers/callpath.sh [SETTINGS...] — the shim's files one intercepted
# call passes through between the hook and its first real NCCL call (issue
# 35): builds instrumented copies of the shim and the host NCCL
# (-finstrument-functions; compress/, shim/backend/ and shim/log/ left out, as
# the issue counts them) into $B/callpath/, runs shim_launches on 4 ranks
# (int8 two-phase of 64 MiB by default: three warm-up calls, the fourth
# traced, tests/layers/tracer.c), and prints rank 0's route: each file as it
# is entered, then "files N, returns R (H into the executor's handlers),
# plan made M times".
#   files   distinct shim .c files entered before the first NCCL call
#   returns entries into a file already left (a file entered again); H of
#           them into the executor's room (shim/exec/: a runner or handler
#           the walk hands back to), the rest anywhere else
#   plans   calls of the planner's entry (nsc_plan_make)
# CALLPATH_NODES="n0 n0 n1 n1" gives the ranks NCCL_HOSTIDs (nodes: with
# NCCLSHIM_ALGO=hier, the hierarchical route). Needs a built tree (make).
# Prints nothing else on success; exit 1 on failure.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=${B:-build}
OUT="$ROOT/$B/callpath"
mkdir -p "$OUT/obj"
CC=${CC:-gcc} MPICC=${MPICC:-mpicc}
NCCL_INC=$(make -s -C "$ROOT" --no-print-directory -f Makefile -f - print-nccl-inc <<'MK' 2>/dev/null
print-nccl-inc: ; @echo $(NCCL_INC) $(SHIM_INC) -I$(B)/gen
MK
)
[ -n "$NCCL_INC" ] || { echo "callpath: cannot read the Makefile's include flags" >&2; exit 1; }
INST="-finstrument-functions -finstrument-functions-exclude-file-list=compress/,shim/backend/,shim/log/"
objs=()
for f in $(cd "$ROOT" && ls shim/*.c shim/*/*.c); do
  o="$OUT/obj/${f//\//_}.o"
  (cd "$ROOT" && $CC -std=gnu11 -O2 -g -fPIC -D_GNU_SOURCE -fvisibility=hidden $INST $NCCL_INC -Icompress -c "$f" -o "$o") || exit 1
  objs+=("$o")
done
$CC -O2 -g -fPIC -c "$ROOT/tests/layers/tracer.c" -o "$OUT/obj/tracer.o" || exit 1
comp=$(ls "$ROOT/$B"/obj/compress/*.o)
sed 's/^    ncclshim_\*;$/    ncclshim_*;\n    nsc_trace_nccl;/' "$ROOT/shim/ncclshim.map" >"$OUT/ncclshim.map"
$CC -shared -o "$OUT/libncclshim.so" "${objs[@]}" "$OUT/obj/tracer.o" $comp -Wl,--version-script="$OUT/ncclshim.map" \
  -ldl -lpthread -lm || exit 1
# the host NCCL, instrumented: its first function entered ends the trace
mkdir -p "$OUT/hostnccl"
hobjs=()
for f in $(cd "$ROOT/tests/hostnccl" && ls *.c | grep -v '^test_'); do
  o="$OUT/obj/hn_$f.o"
  (cd "$ROOT" && $MPICC -std=gnu11 -O2 -g -fPIC -D_GNU_SOURCE -fvisibility=hidden -finstrument-functions \
     -Itests/hostnccl $NCCL_INC -c "tests/hostnccl/$f" -o "$o") || exit 1
  hobjs+=("$o")
done
$CC -O2 -g -fPIC -c "$ROOT/tests/layers/hn_trace.c" -o "$OUT/obj/hn_trace.o" || exit 1
$MPICC -shared -o "$OUT/hostnccl/libnccl.so.2" -Wl,-soname,libnccl.so.2 "${hobjs[@]}" "$OUT/obj/hn_trace.o" \
  -Wl,--version-script="$ROOT/tests/hostnccl/hostnccl.map" -lpthread -lm -ldl || exit 1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
rm -f "$OUT"/trace.*
sets=(-x NCCLSHIM_COMPRESS=int8 -x NCCLSHIM_ALGO=twophase)
for kv in "$@"; do sets+=(-x "$kv"); done
# CALLPATH_NODES="n0 n0 n1 n1": each rank's NCCL_HOSTID (emulated nodes: hier's route)
apps=()
for h in ${CALLPATH_NODES:-"" "" "" ""}; do
  [ ${#apps[@]} -gt 0 ] && apps+=(:)
  apps+=(-np 1 -x LD_LIBRARY_PATH="$OUT/hostnccl" -x LD_PRELOAD="$OUT/libncclshim.so" -x NCCLSHIM_LOG=off
         -x NCCLSHIM_BANNER=0 -x TRACE_FILE="$OUT/trace" "${sets[@]}")
  [ -n "$h" ] && apps+=(-x NCCL_HOSTID="$h")
  apps+=("$ROOT/$B/tests/shim_launches" 16777216)
done
timeout 120 mpirun "${apps[@]}" >"$OUT/run.out" 2>&1 || { cat "$OUT/run.out" >&2; exit 1; }
t=$(ls -t "$OUT"/trace.* | tail -n 1)
[ -n "$t" ] || { echo "callpath: no trace written" >&2; exit 1; }
python3 - "$t" "$ROOT" <<'PY'
import collections, os, subprocess, sys
trace, root = sys.argv[1], sys.argv[2]
rows = [l.split() for l in open(trace) if l.strip()]
by_obj = collections.defaultdict(list)
for i, (obj, off, _) in enumerate(rows):
    by_obj[obj].append((i, off))
where = [None] * len(rows)
for obj, items in by_obj.items():
    out = subprocess.run(["addr2line", "-f", "-e", obj] + [o for _, o in items], capture_output=True, text=True).stdout.split("\n")
    for k, (i, _) in enumerate(items):
        fn, loc = out[2 * k], out[2 * k + 1].split(":")[0]
        where[i] = (fn, os.path.relpath(loc, root) if loc.startswith(root) else loc)
route, left, returns, handlers, plans = [], set(), 0, 0, 0
for (obj, _, _), (fn, f) in zip(rows, where):
    if fn == "nsc_plan_make":
        plans += 1
    if "hostnccl" in obj:
        route.append("NCCL %s" % fn)
        break
    if not f.endswith(".c"):  # a header's inline function: no file entered
        continue
    if route and route[-1] == f:
        continue
    if f in left:
        returns += 1
        handlers += f.startswith("shim/exec/")
    if route:
        left.add(route[-1])
    route.append(f)
shim = [f for f in dict.fromkeys(route) if f.startswith("shim/")]
print("route: " + " > ".join(route))
print("files %d, returns %d (%d into the executor's handlers), plan made %d times%s" % (len(shim), returns, handlers, plans,
      "" if route and route[-1].startswith("NCCL") else " (no NCCL call reached)"))
PY
