#!/usr/bin/env bash
# 07-layers.sh — the shim's rooms (its directories) include each other
# without a circle (tests/layers/layers.py), so that each layer can be read,
# and tested, knowing only those below it: the log is told what happened and
# never calls back, the algorithms sit below the collectives that use them,
# the core (shim/*.c) below everything that keeps state in a communicator.
# The checker itself must find a circle: one is made in a copy of the tree.
source "$(dirname "$0")/../lib.sh"
L="$ROOT/tests/layers/layers.py"
check "no include circle between the shim's rooms ($(python3 "$L" "$ROOT" 2>&1 | wc -l) rooms in order)" \
  python3 "$L" "$ROOT"
python3 "$L" "$ROOT" | sed 's/^/#   /' >&9
C="$TMPD/tree"
mkdir -p "$C" && cp -r "$ROOT/shim" "$ROOT/compress" "$C/"
printf '#include "comm.h"\n' >>"$C/shim/log/log_trace.c" # the log calling back into the core
python3 "$L" "$C" >"$TMPD/circle.out" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -q '^circle: shim -> shim/log .*shim/log -> shim (shim/log/log_trace.c includes comm.h)' "$TMPD/circle.out" \
  && ok "the checker finds a circle made in a copy (log_trace.c including comm.h) and names the include" \
  || { not_ok "the checker missed a circle (exit $rc)"; sed 's/^/#   /' "$TMPD/circle.out"; }
