#!/usr/bin/env python3
"""tests/layers/issue.py ROOT — every real NCCL call the shim makes on a
communicator of its own accord goes through NSC_ISSUE (shim/comm.h), which
issues nothing once the communicator was destroyed or aborted; so no loop
that "issues the rest anyway" after a failure can reach a freed
communicator.

A real call is `nsc_real.<Fn>(` in a .c or .h file of ROOT/shim, for every
<Fn> that names a communicator (collectives, point-to-point, queries,
polls, splits). Allowed outside NSC_ISSUE, each for its reason:
  - shim/hooks/hooks.c: the hooks forward the caller's own calls;
  - shim/coll/call.c: the caller's own call when the shim is inactive;
  - shim/coll/observe.c: queries during the caller's own forwarded call;
  - shim/coll/lifecycle.c: nsc_async_error, the caller's own poll;
  - shim/exec/hier.c: CommAbort and CommDestroy, which end the shim's own
    sub-communicators.
Prints each offending line and exits 1; prints the count of NSC_ISSUE uses
and exits 0 otherwise.

Must not: change anything; read more than ROOT/shim."""
import os
import re
import sys

FNS = ("AllReduce ReduceScatter AllGather Reduce Broadcast Bcast Send Recv AlltoAll Gather Scatter "
       "CommCount CommUserRank CommCuDevice CommGetAsyncError CommSplit CommAbort CommDestroy CommFinalize").split()
CALL = re.compile(r"nsc_real\.(%s)\s*\(" % "|".join(FNS))
ALLOWED = {
    "shim/hooks/hooks.c": set(FNS),
    "shim/coll/call.c": {"AllReduce", "ReduceScatter"},
    "shim/coll/observe.c": {"CommCount", "CommUserRank"},
    "shim/coll/lifecycle.c": {"CommGetAsyncError"},
    "shim/exec/hier.c": {"CommAbort", "CommDestroy"},
}


def main(root):
    bad, uses = [], 0
    for d, _, files in os.walk(os.path.join(root, "shim")):
        for f in sorted(files):
            if not f.endswith((".c", ".h")):
                continue
            p = os.path.join(d, f)
            rel = os.path.relpath(p, root)
            text = open(p, encoding="utf-8", errors="replace").read()
            uses += sum(len(re.findall(r"\bNSC_ISSUE\(", l)) for l in text.splitlines() if "#define" not in l)
            for n, line in enumerate(text.splitlines(), 1):
                for m in CALL.finditer(line):
                    if m.group(1) not in ALLOWED.get(rel, ()):
                        bad.append("%s:%d: nsc_real.%s outside NSC_ISSUE: %s" % (rel, n, m.group(1), line.strip()))
    for b in bad:
        print(b)
    if bad:
        return 1
    print("%d real calls of the shim's own through NSC_ISSUE, none outside" % uses)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
