"""check_runs.py — compare the records of tests/torch/train.py runs; one TAP line per check.

    check_runs.py same A.json B.json CASE[=CASE_B]...       final parameters bit-identical
    check_runs.py differs A.json B.json CASE...             final parameters not bit-identical
    check_runs.py loss A.json B.json REL CASE...            |loss_B - loss_A| <= REL * loss_A at every step
    check_runs.py params A.pt B.pt REL                      max |p_B - p_A| <= REL * max |p_A|
    check_runs.py replicas A.json                           every rank holds the same parameters, every case
    check_runs.py compressed A.json MIN CASE...             the preloaded shim compressed at least MIN calls
                                                            in each case (its counters, ncclshim_get_stats)
    check_runs.py skips LOGDIR SEQ MIN_BYTES K WHAT         the shim's call log (NCCLSHIM_LOG=calls) of
                                                            communicator SEQ: in the full cycles after
                                                            learning, K-1 of every K accumulable
                                                            all-reduces skipped, the last one synced
Exit status 0; failures are "not ok" lines (tests/run.sh counts them).
Must not: pass a check on missing data (a missing case or log is a failure).
"""
import glob
import json
import os
import sys


def tap(good, what):
    print(f"{'ok' if good else 'not ok'} - {what}")


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        tap(False, f"{path}: {e}")
        sys.exit(0)


def pairs(specs):
    for s in specs:
        a, _, b = s.partition("=")
        yield a, b or a


def main(cmd, *paths):
    args = list(paths)
    short = [os.path.basename(x) for x in args]
    if cmd in ("same", "differs"):
        A, B = load(args[0]), load(args[1])
        for ca, cb in pairs(args[2:]):
            if ca not in A or cb not in B:
                tap(False, f"{cmd} {ca}: case missing")
                continue
            eq = A[ca]["digest"] == B[cb]["digest"]
            tap(eq == (cmd == "same"), f"{short[1]} {cb} {'bit-identical to' if cmd == 'same' else 'differs from'} "
                                       f"{short[0]} {ca}")
    elif cmd == "loss":
        A, B, rel = load(args[0]), load(args[1]), float(args[2])
        for ca, cb in pairs(args[3:]):
            if ca not in A or cb not in B:
                tap(False, f"loss {ca}: case missing")
                continue
            la, lb = A[ca]["loss"], B[cb]["loss"]
            worst = max((abs(x - y) / abs(x) for x, y in zip(la, lb)), default=float("inf"))
            tap(len(la) == len(lb) and worst <= rel,
                f"{short[1]} {cb}: loss per step within {rel:g} (relative) of {short[0]} {ca} (worst {worst:.3g})")
    elif cmd == "params":
        import torch
        pa, pb, rel = torch.load(args[0]), torch.load(args[1]), float(args[2])
        d = (pa - pb).abs().max().item() / pa.abs().max().item()
        tap(pa.shape == pb.shape and d <= rel, f"{short[1]}: parameters within {rel:g} (max |diff| / max |p|) "
                                               f"of {short[0]} (got {d:.3g})")
    elif cmd == "replicas":
        A = load(args[0])
        bad = [c for c, r in A.items() if not r.get("replicas_equal")]
        tap(A and not bad, f"{short[0]}: every rank holds the same parameters in {len(A)} cases"
                           + (f" (not in: {' '.join(bad)})" if bad else ""))
    elif cmd == "compressed":
        A, least = load(args[0]), int(args[1])
        for c in args[2:]:
            n = A.get(c, {}).get("compressed")
            tap(n is not None and n >= least, f"{short[0]} {c}: the shim compressed {n} calls (at least {least})")
    elif cmd == "skips":
        logdir, seq, min_bytes, k, what = args[0], int(args[1]), int(args[2]), int(args[3]), args[4]
        files = sorted(glob.glob(f"{logdir}/*.jsonl"))
        for f in files:
            acc = []
            with open(f) as fh:
                for line in fh:
                    r = json.loads(line)
                    if (r.get("kind") == "call" and r["comm_seq"] == seq and r["dtype"] == "float"
                            and r["op"] in ("sum", "avg") and r["logical_bytes"] >= min_bytes):
                        acc.append(r["action"] == "skipped")
            # The full cycles: from the first skipped call after the first
            # synced call that follows a skip (learning may end mid-cycle).
            i0 = acc.index(True) if True in acc else len(acc)
            i1 = acc.index(False, i0) if False in acc[i0:] else len(acc)
            i2 = acc.index(True, i1) if True in acc[i1:] else len(acc)
            tail = acc[i2:]
            skipped = sum(tail)
            synced = len(tail) - skipped
            tap(skipped > 0 and skipped == (k - 1) * synced and not tail[-1],
                f"{what}: rank {json.loads(open(f).readline())['rank']} skipped {skipped} of {len(tail)} "
                f"accumulable all-reduces in the full cycles after learning ({k - 1} of every {k}, last synced)")
        if not files:
            tap(False, f"{what}: no call log in {logdir}")
    else:
        tap(False, f"check_runs.py: unknown command {cmd}")


main(*sys.argv[1:])
