#!/usr/bin/env bash
# tests/layers/callpath.sh [SETTINGS...] — the shim's files one intercepted
# call passes through, from the exported hook to its first real NCCL call
# and to the hook's return: builds instrumented copies of the shim and the
# host NCCL (-finstrument-functions; compress/, shim/backend/ and shim/log/
# left out) into $B/callpath/, runs shim_launches on 4 ranks (int8 two-phase
# of 64 MiB by default: five warm-up calls, the sixth traced, when the
# staging has grown for it whether grouped or not; tests/layers/tracer.c),
# and prints rank 0's routes: each file as it is
# entered (and each call into NCCL), then "files N, returns R (H into the
# executor's room)", and what the trace counts by role.
#   files   distinct shim .c files entered
#   returns entries into a file already left (a file entered again; a call
#           into NCCL that comes back to the file that made it is not a
#           return); H of them into the executor's room (shim/exec/)
#   roles   calls of the functions that play a part, whatever their names
#           (before and after issue 44): the plan made (nsc_decide), the
#           group planned (nsc_decide_group; before: nsc_fuse_flush), the
#           two-phase layout computed (nsc_tp_plan_init), the policy asked
#           (nsc_policy_ask; before: nsc_policy_compressible)
# CALLPATH_GROUP=1: each call alone in a user group (LAUNCHES_GROUP=1); the
# sixth ncclAllReduce and the sixth ncclGroupEnd are traced, each to its
# return. CALLPATH_NODES="n0 n0 n1 n1" gives the ranks NCCL_HOSTIDs (nodes:
# with NCCLSHIM_ALGO=hier, the hierarchical route). Needs a built tree (make).
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
sets=(-x NCCLSHIM_COMPRESS=int8 -x NCCLSHIM_ALGO=twophase -x LAUNCHES_WARMUP=5 -x TRACE_CALL=6)
for kv in "$@"; do sets+=(-x "$kv"); done
hooks=ncclAllReduce
[ "${CALLPATH_GROUP:-0}" = 1 ] && hooks="ncclAllReduce ncclGroupEnd" && sets+=(-x LAUNCHES_GROUP=1)
for hook in $hooks; do
  rm -f "$OUT"/trace.*
  # CALLPATH_NODES="n0 n0 n1 n1": each rank's NCCL_HOSTID (emulated nodes: hier's route)
  apps=()
  for h in ${CALLPATH_NODES:-"" "" "" ""}; do
    [ ${#apps[@]} -gt 0 ] && apps+=(:)
    apps+=(-np 1 -x LD_LIBRARY_PATH="$OUT/hostnccl" -x LD_PRELOAD="$OUT/libncclshim.so" -x NCCLSHIM_LOG=off
           -x NCCLSHIM_BANNER=0 -x TRACE_FILE="$OUT/trace" -x TRACE_HOOK=$hook -x TRACE_TO=return "${sets[@]}")
    [ -n "$h" ] && apps+=(-x NCCL_HOSTID="$h")
    apps+=("$ROOT/$B/tests/shim_launches" 16777216)
  done
  timeout 120 mpirun "${apps[@]}" >"$OUT/run.out" 2>&1 || { cat "$OUT/run.out" >&2; exit 1; }
  t=$(ls -t "$OUT"/trace.* | tail -n 1)
  [ -n "$t" ] || { echo "callpath: no trace written" >&2; exit 1; }
  python3 - "$t" "$ROOT" "$hook" <<'PY' || exit 1
import collections, glob, os, re, subprocess, sys
trace, root, hook = sys.argv[1], sys.argv[2], sys.argv[3]
# A header's inline function enters no file: known by its definition (the
# line addr2line gives an instrumented copy may be its caller's).
INLINE = re.compile(r"^static inline [^(;=]*?\b(\w+)\(", re.M)
inline = set()
for h in glob.glob(os.path.join(root, "shim", "**", "*.h"), recursive=True) + glob.glob(os.path.join(root, "compress", "*.h")):
    inline.update(INLINE.findall(open(h, encoding="utf-8", errors="replace").read()))
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
ROLES = [("plan made", {"nsc_decide"}), ("group planned", {"nsc_decide_group", "nsc_fuse_flush"}),
         ("layout computed", {"nsc_tp_plan_init"}), ("policy asked", {"nsc_policy_ask", "nsc_policy_compressible"})]

def route(upto_nccl):
    steps, left, prev, returns, handlers = [], set(), None, 0, 0
    roles = collections.Counter()
    for (obj, _, _), (fn, f) in zip(rows, where):
        for name, fns in ROLES:
            roles[name] += fn in fns
        if "hostnccl" in obj:
            steps.append("NCCL %s" % fn)
            if upto_nccl:
                break
            continue
        if not f.endswith(".c") or fn in inline or f == prev:  # a header's inline function: no file entered
            continue
        if f in left:
            returns += 1
            handlers += f.startswith("shim/exec/")
        if prev:
            left.add(prev)
        prev = f
        steps.append(f)
    files = len({x for x in steps if x.startswith("shim/")})
    return steps, files, returns, handlers, roles

for label, upto in (("to the first NCCL call", True), ("to the hook's return", False)):
    steps, files, returns, handlers, roles = route(upto)
    reached = any(x.startswith("NCCL") for x in steps)
    print("%s, %s: %s" % (hook, label, " > ".join(steps)))
    print("  files %d, returns %d (%d into the executor's room)%s" % (files, returns, handlers,
          "" if reached or not upto else " (no NCCL call reached)"))
print("  roles: " + ", ".join("%s %d" % (name, route(False)[4][name]) for name, _ in ROLES))
PY
done
