#!/usr/bin/env python3
"""check_log.py — checks of the shim's log files against logtest's known
workload (tests/log/logtest.c), for tests/t/50-log.sh.

    check_log.py jsonl  [opts] FILE...   JSON Lines (NCCLSHIM_LOG=calls), one file per rank
    check_log.py trace  [opts] FILE...   Chrome trace files, one per rank
    check_log.py table  [opts] FILE...   summary tables (text), one file (or stderr capture) each

    opts: --iters N --comms C --nranks R [--ring K] [--accum K] [--label TEXT]
          [--open N] [--done-iters M]

--ring K: records leave the ring for the writer thread as they come, so how
many are dropped from detail depends on timing: the check is that call lines
and "kept" agree, kept + dropped = records, the lines are in seq order, each
is the model's record of its seq, and the last K records are all there.
--open N: the last N communicators were still open when the job was killed
(SIGKILL): they have no summary line and their records stop at --done-iters
iterations (exactly: the job slept for more than the writer's second first).
The trace of a killed job lacks its closing "]" (allowed by the trace-event
format); it is checked after appending one, and must otherwise be complete.

Prints one "ok - ..." / "not ok - ..." line per check (the runner counts
them); exits 0 unless it crashed. The expected records come from a model of
logtest's iteration with default shim settings (see logtest.c):
A compressed, B and C passthrough, G1 fused (3 members), G2 two untimed
passthroughs; with --accum K, A follows the accumulation schedule of
shim/accum/accum.c (three learning passes synced, then one sync per K passes).
"""
import argparse
import json
import os
import re
import sys

FLOAT, INT32 = "float", "int32"


def model(iters, accum):
    """Expected records of one communicator, in seq order."""
    recs = []
    for i in range(1, iters + 1):
        a_skip = accum > 1 and i > 3 and (i - 1) % accum != accum - 1
        if a_skip:
            recs.append(dict(action="skipped", dtype=FLOAT, wire_dtype=FLOAT, count=16384, logical_bytes=65536,
                             wire_bytes=0, members=1, timed=False))
        else:
            recs.append(dict(action="compressed", dtype=FLOAT, wire_dtype="half", count=16384, logical_bytes=65536,
                             wire_bytes=32768, members=1, timed=True, casts=True))
        recs.append(dict(action="passthrough", dtype=FLOAT, wire_dtype=FLOAT, count=1000, logical_bytes=4000,
                         wire_bytes=4000, members=1, timed=True, why="min_bytes"))
        recs.append(dict(action="passthrough", dtype=INT32, wire_dtype=INT32, count=256, logical_bytes=1024,
                         wire_bytes=1024, members=1, timed=True, why="datatype"))
        recs.append(dict(action="fused", dtype=FLOAT, wire_dtype="half", count=3 * 8192, logical_bytes=3 * 32768,
                         wire_bytes=3 * 16384, members=3, timed=True, casts=True))
        for _ in range(2):
            recs.append(dict(action="passthrough", dtype=FLOAT, wire_dtype=FLOAT, count=100, logical_bytes=400,
                             wire_bytes=400, members=1, timed=False, why="min_bytes"))
    for n, r in enumerate(recs, 1):
        r["seq"] = n
    return recs


def totals(recs):
    t = {}
    for r in recs:
        a = t.setdefault(r["action"], dict(calls=0, records=0, logical_bytes=0, wire_bytes=0))
        a["calls"] += r["members"]
        a["records"] += 1
        a["logical_bytes"] += r["logical_bytes"]
        a["wire_bytes"] += r["wire_bytes"]
    return t


class Tap:
    def __init__(self, label):
        self.label = label

    def check(self, cond, what, detail=""):
        print("%s - %s%s%s" % ("ok" if cond else "not ok", self.label, what,
                               "" if cond or not detail else " (%s)" % detail))
        return cond


CALL_FIELDS = ("rank", "nranks", "comm", "comm_seq", "seq", "op", "dtype", "wire_dtype", "count", "logical_bytes",
               "wire_bytes", "action", "members", "wall_start_us", "coll_us", "cast_in_us", "cast_out_us",
               "untimed", "result")


def kept_of(a, c, want, got):
    """The model's records that communicator c's call lines should be."""
    if c >= a.comms - a.open:
        return want[:len(model(a.done_iters, a.accum))]
    if not a.ring:
        return want
    seqs = [o["seq"] for o in got]
    tail = [w["seq"] for w in want[-a.ring:]]
    if seqs != sorted(set(seqs)) or not set(tail) <= set(seqs) or not set(seqs) <= {w["seq"] for w in want}:
        return None
    return [w for w in want if w["seq"] in set(seqs)]


def check_jsonl(a, tap):
    want = model(a.iters, a.accum)
    tot = totals(want)
    by_rank = {}
    for path in a.files:
        calls, sums, steps, bad, lines = [], [], [], 0, 0
        with open(path) as f:
            text = f.read()
        for line in text.splitlines():
            lines += 1
            try:
                o = json.loads(line)
            except ValueError:
                bad += 1
                continue
            k = o.get("kind")
            (calls if k == "call" else steps if k == "step" else sums).append(o)
        ranks = {o["rank"] for o in calls + sums + steps}
        name = "%s" % path.rsplit("/", 1)[-1]
        tap.check(bad == 0 and lines > 0 and text.endswith("\n"),
                  "%s: every line parses as JSON, the file ends with a whole line" % name, "%d bad" % bad)
        tap.check(len(ranks) == 1, "%s: one rank per file" % name, str(ranks))
        rank = ranks.pop() if len(ranks) == 1 else -1
        by_rank[rank] = calls
        nsum = a.comms - a.open
        tap.check(len(sums) == nsum and all(s["comm_seq"] < nsum for s in sums),
                  "%s: one summary line per closed communicator (%d)" % (name, nsum), "%d" % len(sums))
        keeps = [kept_of(a, c, want, [o for o in calls if o["comm_seq"] == c]) for c in range(a.comms)]
        nkeep = sum(len(k) for k in keeps if k is not None)
        if a.ring:
            tap.check(None not in keeps, "%s: call lines in seq order, the last %d records among them" % (name, a.ring))
            kept = {s["comm_seq"]: s["kept"] for s in sums}
            tap.check(all(kept.get(c) == len(k) for c, k in enumerate(keeps) if k is not None),
                      "%s: the summary's 'kept' counts the call lines" % name, "%r" % kept)
        else:
            tap.check(len(calls) == nkeep, "%s: %d call lines (%d communicators%s)" %
                      (name, nkeep, a.comms, ", %d killed after %d iterations" % (a.open, a.done_iters)
                       if a.open else ""), "got %d" % len(calls))
        missing = [k for o in calls for k in CALL_FIELDS if k not in o]
        tap.check(not missing, "%s: every call line has all documented fields" % name, str(missing[:5]))
        errs = []
        for c in range(a.comms):
            got = [o for o in calls if o["comm_seq"] == c]
            keep = keeps[c]
            if keep is None or [o["seq"] for o in got] != [w["seq"] for w in keep]:
                errs.append("comm %d: seqs %s..." % (c, [o["seq"] for o in got][:5]))
                continue
            for o, w in zip(got, keep):
                for k in ("action", "dtype", "wire_dtype", "count", "logical_bytes", "wire_bytes", "members"):
                    if o[k] != w[k]:
                        errs.append("comm %d seq %d: %s=%r, expected %r" % (c, w["seq"], k, o[k], w[k]))
                if o.get("why") != w.get("why"):  # passed through: the shim's reason (policy.h); others none
                    errs.append("comm %d seq %d: why=%r, expected %r" % (c, w["seq"], o.get("why"), w.get("why")))
                if o["nranks"] != a.nranks or o["result"] != 0 or o["op"] != "sum":
                    errs.append("comm %d seq %d: nranks/result/op %r" % (c, w["seq"], (o["nranks"], o["result"], o["op"])))
                if w["action"] == "skipped":
                    if o["coll_us"] is not None or o.get("local_us") is None:
                        errs.append("comm %d seq %d: skipped needs coll_us null and local_us" % (c, w["seq"]))
                elif w["timed"] != (o["coll_us"] is not None) or o["untimed"] == w["timed"]:
                    errs.append("comm %d seq %d: timed=%s but coll_us=%r untimed=%r" %
                                (c, w["seq"], w["timed"], o["coll_us"], o["untimed"]))
                if w.get("casts") and (o["cast_in_us"] is None or o["cast_out_us"] is None):
                    errs.append("comm %d seq %d: casts not timed" % (c, w["seq"]))
                if not w.get("casts") and (o["cast_in_us"] is not None or o["cast_out_us"] is not None):
                    errs.append("comm %d seq %d: cast time on a record without casts" % (c, w["seq"]))
                for k in ("coll_us", "cast_in_us", "cast_out_us"):
                    if o[k] is not None and o[k] < 0:
                        errs.append("comm %d seq %d: %s < 0" % (c, w["seq"], k))
            walls = [o["wall_start_us"] for o in got]
            if any(y < x for x, y in zip(walls, walls[1:])):
                errs.append("comm %d: wall_start_us not increasing with seq" % c)
        tap.check(not errs, "%s: each record's seq, action, datatypes, count, bytes, members and timing as issued" %
                  name, "; ".join(errs[:4]))
        errs = []
        for s in sums:
            for act, w in tot.items():
                g = s["actions"][act]
                for k in w:
                    if g[k] != w[k]:
                        errs.append("comm %d %s.%s=%d, expected %d" % (s["comm_seq"], act, k, g[k], w[k]))
            nrec = len(want)
            if s["records"] != nrec or s["kept"] + s["dropped"] != nrec or (not a.ring and s["dropped"]):
                errs.append("comm %d records/kept/dropped %r" % (s["comm_seq"], (s["records"], s["kept"], s["dropped"])))
            nun = sum(1 for w in want if not w["timed"] and w["action"] != "skipped")
            if s["untimed"] != nun or s["unknown"] != 0:
                errs.append("comm %d untimed/unknown %r, expected (%d, 0)" % (s["comm_seq"], (s["untimed"], s["unknown"]), nun))
            if a.accum > 1:
                sk = sum(1 for w in want if w["action"] == "skipped")
                if (s["accum_synced"], s["accum_skipped"]) != (a.iters - sk, sk):
                    errs.append("accumulation %r, expected %r" % ((s["accum_synced"], s["accum_skipped"]),
                                                                  (a.iters - sk, sk)))
        tap.check(not errs, "%s: summary lines: calls, records and bytes per action exact%s" %
                  (name, ", kept + dropped = records" if a.ring else ""), "; ".join(errs[:4]))
        check_steps(a, tap, name, steps, sums)
    tap.check(sorted(by_rank) == list(range(a.nranks)), "files of ranks 0..%d" % (a.nranks - 1), str(sorted(by_rank)))
    # Same seq, same collective on every rank: what the report matches on.
    # With --ring each rank may have dropped different records: those present
    # on several ranks must agree; otherwise every rank has the same ones.
    keys = {r: {(o["comm_seq"], o["seq"]): (o["action"], o["count"]) for o in c} for r, c in by_rank.items()}
    agree = all(keys[r][k] == keys[q][k] for r in keys for q in keys for k in set(keys[r]) & set(keys[q]))
    same = a.ring or len({tuple(sorted(v)) for v in keys.values()}) == 1
    tap.check(agree and same, "records agree across ranks by (comm_seq, seq)")


STEP_FIELDS = ("pass", "opt_step", "micro", "accum_steps", "first_call", "records", "wall_start_us", "wall_us",
               "inflight_us", "exposed_comm_us", "max_gap_us", "cpu_us", "runq_us", "coll_busy_us", "compute_us",
               "input_us", "exposed_comm_share", "input_share", "compute_share", "busy_source", "device", "untimed",
               "captured")
DIAG_FIELDS = ("verdict", "exposed_comm_share", "input_share", "compute_share", "steps", "steps_untimed",
               "steps_captured", "steps_broken", "learned", "pass_buckets", "pass_bytes", "accumulable_calls",
               "relearned", "busy_source", "wall_us", "mean_step_us", "inflight_us", "exposed_comm_us", "input_us",
               "compute_us", "runq_us", "max_gap_us", "runqueue_share", "reason", "suggest")


def step_errors(st, accum):
    """What is wrong with one communicator's step records (in file order)."""
    errs = []
    for o in st:
        miss = [k for k in STEP_FIELDS if k not in o]
        if miss:
            errs.append("pass %s lacks %s" % (o.get("pass"), miss))
            continue
        sh = [o[k] for k in ("exposed_comm_share", "input_share", "compute_share")]
        if o["busy_source"] != "cpu-time" or o["device"] != "host" or None in sh:
            errs.append("pass %d: host steps have CPU-time busy and all shares %r" % (o["pass"], sh))
        elif any(x < 0 or x > 1 for x in sh) or abs(sum(sh) - 1) > 0.002:
            errs.append("pass %d: shares %r do not add up to 1" % (o["pass"], sh))
        if o["opt_step"] != o["pass"] // accum or o["micro"] != o["pass"] % accum or o["accum_steps"] != accum:
            errs.append("pass %d: opt_step/micro %r for K=%d" % (o["pass"], (o["opt_step"], o["micro"]), accum))
        if not (0 <= o["exposed_comm_us"] <= o["inflight_us"] + 0.001 <= o["wall_us"] + 0.002) or o["records"] < 1:
            errs.append("pass %d: times %r" % (o["pass"], (o["exposed_comm_us"], o["inflight_us"], o["wall_us"])))
    for x, y in zip(st, st[1:]):
        if y["pass"] != x["pass"] + 1 or abs(x["wall_start_us"] + x["wall_us"] - y["wall_start_us"]) > 0.5:  # epoch us as doubles: 0.25 us
            errs.append("pass %d then %d: not one after the other" % (x["pass"], y["pass"]))
    return errs


def check_steps(a, tap, name, steps, sums):
    """logtest's pass is its one accumulable call A: the observer locks after
    three passes (pass 2), so iterations 4.. begin passes 3..; every pass but
    the last is a step: iters - 4 per closed communicator (fewer once killed).
    Its grouped G2 calls are untimed: every step counts them."""
    errs = []
    for c in range(a.comms):
        st = [o for o in steps if o["comm_seq"] == c]
        closed = c < a.comms - a.open
        n = max(a.iters - 4, 0) if closed else max(a.done_iters - 4, 0)
        if (closed and len(st) != n) or (not closed and len(st) > max(a.iters - 4, 0)):
            errs.append("comm %d: %d step lines, expected %d" % (c, len(st), n))
        if st and st[0]["pass"] != 3:
            errs.append("comm %d: first step is pass %d, expected 3" % (c, st[0]["pass"]))
        errs += ["comm %d: %s" % (c, e) for e in step_errors(st, max(a.accum, 1))]
    for s in sums:
        d = s.get("diagnosis")
        if d is None or [k for k in DIAG_FIELDS if k not in d]:
            errs.append("comm %d: summary without a complete diagnosis %r" % (s["comm_seq"], d))
            continue
        st = [o for o in steps if o["comm_seq"] == s["comm_seq"]]
        if d["steps"] != len(st) or d["steps_untimed"] != len(st) or not d["learned"] or d["pass_buckets"] != 1:
            errs.append("comm %d: diagnosis steps %r for %d step lines" %
                        (s["comm_seq"], (d["steps"], d["steps_untimed"], d["learned"], d["pass_buckets"]), len(st)))
        if d["verdict"] not in ("input-bound", "communication-bound", "cpu-starved", "compute-bound", "mixed", "unknown"):
            errs.append("comm %d: verdict %r" % (s["comm_seq"], d["verdict"]))
    tap.check(not errs, "%s: step lines (one per pass after the learned ones, consecutive, shares adding up to 1) "
              "and the summary's diagnosis" % name, "; ".join(errs[:4]))


def check_trace(a, tap):
    want = model(a.iters, a.accum)
    for path in a.files:
        name = path.rsplit("/", 1)[-1]
        with open(path) as f:
            text = f.read()
        if a.open:
            closed = text.rstrip().endswith("]")
            tap.check(not closed, "%s: a killed job's trace has no closing ']'" % name)
            text = text if closed else text + "\n]\n"
        try:
            ev = json.loads(text)
        except ValueError as e:
            tap.check(False, "%s: parses as JSON%s" % (name, " once ']' is appended" if a.open else ""), str(e))
            continue
        tap.check(isinstance(ev, list), "%s: parses as a JSON array of trace events" % name)
        # every event of a rank's file on that rank's pid (the process name
        # says which), also in the first writer round (issue 24: pid 0)
        pname = [e for e in ev if e.get("name") == "process_name"]
        pid = pname[0]["pid"] if pname else None
        wrong = [e for e in ev if e.get("pid") != pid]
        tap.check(pname and all(("rank %d " % pid) in e["args"]["name"] for e in pname) and not wrong,
                  "%s: every event on the process's pid, its rank (%s)" % (name, pid),
                  "%d of %d events on other pids, first %r" % (len(wrong), len(ev), wrong[:1]))
        meta = [e for e in ev if e.get("ph") == "M"]
        x = [e for e in ev if e.get("ph") == "X"]
        inst = [e for e in ev if e.get("ph") == "i"]
        tracks = {e["tid"] for e in meta if e["name"] == "thread_name" and not e["args"]["name"].endswith(" steps")}
        step_tracks = {e["tid"] for e in meta if e["name"] == "thread_name" and e["args"]["name"].endswith(" steps")}
        steps = [e for e in x if e["tid"] in step_tracks]
        x = [e for e in x if e["tid"] not in step_tracks]
        errs = []
        for tid in sorted(step_tracks):
            st = sorted((e for e in steps if e["tid"] == tid), key=lambda e: e["ts"])
            args = [dict(e["args"], wall_start_us=e["ts"]) for e in st]
            if any(e["name"] != "step (pass %d)" % e["args"].get("pass", -1) or abs(e["dur"] - e["args"]["wall_us"]) > 0.001
                   for e in st):
                errs.append("track %d: step slices' names or durations differ from their args" % tid)
            errs += ["track %d: %s" % (tid, m) for m in step_errors(args, max(a.accum, 1))]
        tap.check(len(step_tracks) <= a.comms and not errs and
                  len(steps) <= a.comms * max(a.iters - 4, 0) and (a.open or len(steps) == a.comms * max(a.iters - 4, 0)),
                  "%s: a step track per communicator, one slice per step, consecutive, the step's breakdown in args" % name,
                  "%d step slices on %d tracks; %s" % (len(steps), len(step_tracks), "; ".join(errs[:3])))
        tap.check(any(e["name"] == "process_name" for e in meta) and len(tracks) == a.comms,
                  "%s: process name and one track per communicator and stream (%d)" % (name, a.comms),
                  "tracks %r" % sorted(tracks))

        def count(n, evs):
            return sum(1 for e in evs if e["name"] == n)

        per = {}
        nopen = len(model(a.done_iters, a.accum)) if a.open else 0
        weighted = [(w, a.comms - a.open) for w in want] + [(w, a.open) for w in want[:nopen]]
        for w, times in weighted:
            if w["action"] == "skipped":
                per["i:allreduce skipped"] = per.get("i:allreduce skipped", 0) + times
            elif not w["timed"]:
                k = "i:allreduce %s (untimed)" % w["action"]
                per[k] = per.get(k, 0) + times
            else:  # a compressed record names its algorithm: the ring here
                k = "x:allreduce %s" % ("ring compressed" if w["action"] == "compressed" else w["action"])
                per[k] = per.get(k, 0) + times
                if w.get("casts"):
                    per["x:cast-in"] = per.get("x:cast-in", 0) + times
                    per["x:cast-out"] = per.get("x:cast-out", 0) + times
        got = {}
        for e in x:
            got["x:" + e["name"]] = got.get("x:" + e["name"], 0) + 1
        for e in inst:
            got["i:" + e["name"]] = got.get("i:" + e["name"], 0) + 1
        exp = {k: v for k, v in per.items() if v}
        tap.check(got == exp, "%s: slices and markers per kind as issued" % name, "got %r expected %r" % (got, exp))
        errs = []
        for e in x:
            if e["dur"] < 0 or not e["name"].startswith("allreduce"):
                continue
            ar = e["args"]
            if ar["logical_bytes"] <= 0 or "busbw_GBps" not in ar or ar["busbw_GBps"] < 0:
                errs.append("seq %s args %r" % (ar.get("seq"), ar))
        for tid in tracks:
            sl = sorted((e["ts"], e["dur"]) for e in x if e["tid"] == tid)
            for (t0, d0), (t1, _) in zip(sl, sl[1:]):
                if t1 + 0.5 < t0 + d0:  # ns in the file; a double holds epoch us to 0.25 us
                    errs.append("track %d: slice at %.3f overlaps the one before" % (tid, t1))
                    break
        tap.check(not errs, "%s: collective slices carry sizes and bandwidth; slices of a track do not overlap" % name,
                  "; ".join(errs[:3]))


ROW = re.compile(r"^(?:ncclshim\[[^]]*\] )?\s+(passthrough|compressed|skipped|fused|total)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)")


def check_table(a, tap):
    want = totals(model(a.iters, a.accum))
    exp = {k: (v["calls"], 0 if k == "skipped" else v["records"], v["logical_bytes"], v["wire_bytes"])
           for k, v in want.items()}
    allv = [sum(v[i] for v in exp.values()) for i in range(4)]
    exp["total"] = tuple(allv)
    for path in a.files:
        name = path.rsplit("/", 1)[-1]
        with open(path) as f:
            text = f.read()
        heads = re.findall(r"# ncclshim summary: communicator (\d+) \([^)]*\), rank (\d+) of (\d+)", text)
        tap.check(len(heads) == a.comms and all(int(n) == a.nranks for _, _, n in heads),
                  "%s: one table per communicator (%d), %d ranks" % (name, a.comms, a.nranks), str(heads))
        blocks = re.split(r"^.*# ncclshim summary:", text, flags=re.M)[1:]
        errs = []
        for b in blocks:
            rows = {m.group(1): tuple(int(m.group(i)) for i in range(2, 6))
                    for m in (ROW.match(line) for line in b.splitlines()) if m}
            if rows != exp:
                errs.append("rows %r, expected %r" % (rows, exp))
            m = re.search(r"records: (\d+) \((\d+) in detail, (\d+) dropped", b)
            if not m or int(m.group(1)) != len(model(a.iters, a.accum)) or (
                    int(m.group(2)) and int(m.group(2)) + int(m.group(3)) != int(m.group(1))):
                errs.append("records line %r" % (m.group(0) if m else None))
        tap.check(blocks and not errs, "%s: calls, collectives, logical and wire bytes per action exact" % name,
                  "; ".join(errs[:2]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=("jsonl", "trace", "table"))
    ap.add_argument("files", nargs="+")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--comms", type=int, default=1)
    ap.add_argument("--nranks", type=int, default=4)
    ap.add_argument("--ring", type=int, default=0)
    ap.add_argument("--accum", type=int, default=1)
    ap.add_argument("--label", default="")
    ap.add_argument("--open", type=int, default=0)
    ap.add_argument("--done-iters", type=int, default=0)
    a = ap.parse_args()
    tap = Tap(a.label + ": " if a.label else "")
    missing = [f for f in a.files if not os.path.isfile(f)]
    if missing:
        tap.check(False, "log files exist", "missing: %s" % " ".join(missing[:4]))
        return 0
    {"jsonl": check_jsonl, "trace": check_trace, "table": check_table}[a.what](a, tap)
    return 0


if __name__ == "__main__":
    sys.exit(main())
