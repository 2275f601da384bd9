#!/usr/bin/env python3
"""check_diag.py — the diagnosis of a diagtest run (tests/shim/diagtest.c)
against what the run was built to have, for tests/t/55-diag.sh.

    check_diag.py --label L --rank R --verdict V [--input-from-sleep] [--exposed-from-link GBPS]
                  [--max-input X] [--bound B] BUILT.json RANK.jsonl

BUILT.json is what diagtest -o wrote (passes, buckets, elems, sleep and work
per pass). Shares are compared with the built-in part of the measured step:
  --input-from-sleep        input_share vs sleep per pass / mean step
  --exposed-from-link GBPS  exposed_comm_share at least the emulated link's
                            time per pass / mean step (2(n-1) ring steps of S/n
                            bytes per all-reduce, docs/emulation.md "The link
                            model": a lower bound) less the bound
  --max-input X             input_share at most X (nothing sleeps)
within --bound (default 0.15) — never the time itself (no timed assertions).
Prints one "ok - ..."/"not ok - ..." line per check; exits 0 unless it crashed.
"""
import argparse
import json


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--label", required=True)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--verdict", required=True)
    p.add_argument("--input-from-sleep", action="store_true")
    p.add_argument("--exposed-from-link", type=float)
    p.add_argument("--max-input", type=float)
    p.add_argument("--bound", type=float, default=0.15)
    p.add_argument("built")
    p.add_argument("jsonl")
    a = p.parse_args()
    built = json.load(open(a.built))
    lines = [json.loads(x) for x in open(a.jsonl) if x.strip()]
    steps = [o for o in lines if o.get("kind") == "step"]
    sums = [o for o in lines if o.get("kind") == "summary"]
    lab = "%s, rank %d" % (a.label, a.rank)

    def tap(cond, what, detail=""):
        print("%s - %s: %s%s" % ("ok" if cond else "not ok", lab, what, "" if cond else " (%s)" % detail))

    # The observer locks after 3 identical passes (pass 2 with DDP's first whole-model pass, see test_diag.c):
    # passes 3.. begin steps, the last pass is not a step.
    want = built["passes"] - 4
    tap(len(steps) == want and [o["pass"] for o in steps] == list(range(3, 3 + want)),
        "%d step lines, passes 3..%d" % (want, 2 + want), "%r" % [o["pass"] for o in steps])
    tap(len(sums) == 1 and "diagnosis" in sums[0], "one summary line with a diagnosis")
    if not sums or not steps:
        return
    d = sums[0]["diagnosis"]
    mean_us = sum(o["wall_us"] for o in steps) / len(steps)
    tap(d["steps"] == want and d["learned"] and d["pass_buckets"] == built["buckets"] and
        d["pass_bytes"] == built["buckets"] * built["elems"] * built.get("esz", 4) and d["busy_source"] == "cpu-time",
        "the learned pass: %d buckets of %d %d-byte elements, %d steps, busy from CPU time"
        % (built["buckets"], built["elems"], built.get("esz", 4), want),
        "%r" % {k: d[k] for k in ("steps", "learned", "pass_buckets", "pass_bytes", "busy_source")})
    # Host backend: calls run on the calling thread one after the other, so a step's exposed
    # communication is the sum of its records' times (the call lines' coll_us, cast_in_us and
    # cast_out_us: docs/diagnosis.md, the record's interval).
    # A step's records are consecutive in commit order (the lines' seq) from its first bucket's
    # line; the observed calls among them (a broadcast: diagtest -B) carry the call number of
    # the reduction they follow.
    by_seq = {o["seq"]: o for o in lines if o.get("kind") == "call"}
    first = {o["call"]: o["seq"] for o in lines if o.get("kind") == "call" and o.get("action") != "observed"}

    def rec_us(r):
        return sum(r.get(k) or 0 for k in ("coll_us", "cast_in_us", "cast_out_us"))

    errs = []
    for o in steps:
        s0 = first.get(o["first_call"], -1)
        rs = [by_seq.get(q) for q in range(s0, s0 + o["records"])]
        if None in rs or abs(sum(rec_us(r) for r in rs) - o["exposed_comm_us"]) > 0.002 * 3 * len(rs):
            errs.append("pass %d: exposed %.3f, its records %r" % (o["pass"], o["exposed_comm_us"],
                                                                  [r and rec_us(r) for r in rs]))
    tap(not errs, "each step's exposed communication is the sum of its call lines' times", "; ".join(errs[:2]))
    tot = {k: sum(o[k] for o in steps) for k in ("wall_us", "exposed_comm_us", "input_us", "compute_us")}
    exp = {"exposed_comm_share": tot["exposed_comm_us"] / tot["wall_us"], "input_share": tot["input_us"] / tot["wall_us"],
           "compute_share": tot["compute_us"] / tot["wall_us"]}
    tap(all(abs(d[k] - v) < 0.0002 for k, v in exp.items()) and abs(sum(exp.values()) - 1) < 0.001,
        "the summary's shares are the steps' sums (ratios of sums), adding up to 1", "%r vs %r" % (d, exp))
    tap(d["verdict"] == a.verdict, "verdict %s" % a.verdict,
        "%s: exposed %.3f input %.3f compute %.3f; %s" % (d["verdict"], d["exposed_comm_share"], d["input_share"],
                                                          d["compute_share"], d["reason"]))
    if a.input_from_sleep:
        built_in = built["sleep_us_per_pass"] / mean_us
        tap(abs(d["input_share"] - built_in) <= a.bound,
            "input_share within %.2f of the built-in sleep's share (%.3f)" % (a.bound, built_in),
            "input_share %.3f" % d["input_share"])
    if a.exposed_from_link:
        n = built["nranks"]
        per = 2 * (n - 1) * (built["elems"] * built.get("esz", 4) / n) * 8 / (a.exposed_from_link * 1e9) * 1e6  # us per all-reduce
        built_in = built["buckets"] * per / mean_us
        # The emulated link sleeps each ring step to a deadline: its time is a lower bound of the
        # collective's (the exchange, the reduction and a loaded machine's wake-ups add to it).
        tap(d["exposed_comm_share"] >= built_in - a.bound,
            "exposed_comm_share at least the emulated link's share (%.3f) less %.2f" % (built_in, a.bound),
            "exposed_comm_share %.3f" % d["exposed_comm_share"])
    if built.get("bcast"):
        bc = [o for o in lines if o.get("kind") == "call" and o.get("coll") == "broadcast"]
        tap(len(bc) == built["passes"] and all(o["action"] == "observed" and o.get("root") == 0 and o["count"] == 16
                                               and o["timing"] == "done" and o["coll_us"] is not None for o in bc),
            "one observed, timed broadcast line (root 0, 16 floats) per pass",
            "%d lines: %r" % (len(bc), bc[:1]))
        obs = sums[0].get("actions", {}).get("observed", {})
        tap(obs.get("calls") == built["passes"] and obs.get("timed") == built["passes"] and obs.get("busbw_GBps") is None,
            "the summary counts them as observed (timed, no busbw)", "%r" % obs)
    if a.max_input is not None:
        tap(d["input_share"] <= a.max_input, "input_share at most %.2f (nothing sleeps)" % a.max_input,
            "input_share %.3f" % d["input_share"])


if __name__ == "__main__":
    main()
