#!/usr/bin/env bash
# 07-layers.sh — the shim's rooms (its directories) depend on each other,
# by includes and by calls (the objects' undefined symbols against the
# symbols other rooms define), without a circle (tests/layers/layers.py; no
# header is exempt), so that each layer can be read, and tested, knowing only
# those below it: the log is told what happened and never calls back, the
# executor sits below the path that uses it, the core (shim/*.c) below
# everything that keeps state in a communicator. Inside each room its files
# call each other without a circle too, and the executor's room reads no
# configuration (its plans carry what it needs). The checker itself must
# find each: a circle made by an include and one made by a call, a circle
# inside a room, and the executor reading the configuration, each planted in
# a copy of the tree.
source "$(dirname "$0")/../lib.sh"
L="$ROOT/tests/layers/layers.py"
O="$ROOT/$B/obj"
check "no circle between the shim's rooms, by includes or calls, nor inside one ($(python3 "$L" "$ROOT" "$O" 2>&1 | grep -c ' -> ') rooms in order)" \
  python3 "$L" "$ROOT" "$O"
python3 "$L" "$ROOT" "$O" | sed 's/^/#   /' >&9
check "the executor's room (shim/exec) reads no configuration" python3 "$L" "$ROOT" "$O" --no-config shim/exec
C="$TMPD/tree"
mkdir -p "$C/obj" && cp -r "$ROOT/shim" "$ROOT/compress" "$C/" && cp -r "$O/shim" "$O/compress" "$C/obj/"
# found WHAT PATTERN [ARGS...]: the checker, run on the copy, exits 1 with a line matching PATTERN
found() {
  local what=$1 pat=$2 rc
  shift 2
  python3 "$L" "$C" "$C/obj" "$@" >"$TMPD/found.out" 2>&1
  rc=$?
  [ $rc -eq 1 ] && grep -q "$pat" "$TMPD/found.out" && ok "the checker finds $what and names it" \
    || { not_ok "the checker missed $what (exit $rc)"; sed 's/^/#   /' "$TMPD/found.out"; }
}
printf '#include "comm.h"\n' >>"$C/shim/log/log_trace.c" # the log including the core
found "a circle made by an include in a copy (log_trace.c including comm.h)" \
  '^circle: shim -> shim/log .*shim/log -> shim (shim/log/log_trace.c includes comm.h)'
cp "$ROOT/shim/log/log_trace.c" "$C/shim/log/log_trace.c"
# the log calling back into the core: an object of the log room that needs nsc_comm_put
printf 'void nsc_comm_put(void *c);\nvoid nsc_log_calls_back(void *c) { nsc_comm_put(c); }\n' >"$TMPD/back.c"
cc -c "$TMPD/back.c" -o "$C/obj/shim/log/back.o"
found "a circle made by a call in a copy (a log object calling nsc_comm_put)" \
  '^circle: shim -> shim/log .*shim/log -> shim (shim/log/back.o calls nsc_comm_put)'
rm "$C/obj/shim/log/back.o"
# two files of one room calling each other (walk.o and a planted object)
printf 'void nsc_walk_run(void);\nvoid nsc_planted_twin(void) { nsc_walk_run(); }\n' >"$TMPD/twin.c"
cc -c "$TMPD/twin.c" -o "$C/obj/shim/exec/twin.o"
printf 'void nsc_planted_twin(void);\nvoid nsc_planted_back(void) { nsc_planted_twin(); }\n' >"$TMPD/back2.c"
cc -c "$TMPD/back2.c" -o "$TMPD/back2.o" && ld -r "$C/obj/shim/exec/walk.o" "$TMPD/back2.o" -o "$C/obj/shim/exec/walk.o.new" \
  && mv "$C/obj/shim/exec/walk.o.new" "$C/obj/shim/exec/walk.o"
found "a circle inside a room planted in a copy (two exec objects calling each other)" '^circle inside shim/exec: .*twin.o'
rm "$C/obj/shim/exec/twin.o"
cp "$O/shim/exec/walk.o" "$C/obj/shim/exec/walk.o"
# an executor object reading the global configuration (nsc_g)
printf 'extern struct { int state; } nsc_g;\nint nsc_planted_cfg(void) { return nsc_g.state; }\n' >"$TMPD/cfg.c"
cc -c "$TMPD/cfg.c" -o "$C/obj/shim/exec/cfg.o"
found "the executor reading the configuration in a copy (an object needing nsc_g)" \
  '^reads the configuration: shim/exec (shim/exec/cfg.o needs nsc_g)' --no-config shim/exec
# Nothing issued on an ended communicator: every real call the shim makes of
# its own accord goes through NSC_ISSUE (tests/layers/issue.py); the checker
# must find a bare one planted in a copy.
I="$ROOT/tests/layers/issue.py"
check "the shim's own real calls all go through NSC_ISSUE ($(python3 "$I" "$ROOT" 2>&1 | tail -n 1))" python3 "$I" "$ROOT"
cp "$ROOT/shim/agree/agree.c" "$C/shim/agree/agree.c"
sed -i 's/NSC_ISSUE(c, AllReduce(\(.*\)));/nsc_real.AllReduce(\1);/' "$C/shim/agree/agree.c"
python3 "$I" "$C" >"$TMPD/issue.out" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -q '^shim/agree/agree.c:[0-9]*: nsc_real.AllReduce outside NSC_ISSUE' "$TMPD/issue.out" \
  && ok "the checker finds a bare real call planted in a copy (agree.c's exchange) and names it" \
  || { not_ok "the checker missed a bare real call (exit $rc)"; sed 's/^/#   /' "$TMPD/issue.out"; }
