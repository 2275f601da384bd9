#!/usr/bin/env python3
"""check_nvml.py — the diagnosis of a diagtest run on the CUDA driver double
with the NVML double (tests/nvml/fakenvml.c) saying UTIL percent busy, for
tests/t/55-diag.sh.

    check_nvml.py --label L --rank R --util PCT RANK.jsonl     NVML read
    check_nvml.py --label L --rank R --none WORDS RANK.jsonl   no NVML: busy_source
                                                               "none", reason names WORDS

With a constant UTIL the busy time of a step is UTIL % of it exactly (µs
rounding of the step's ends aside), so: every step with busy_source "nvml"
has input_share = 1 - UTIL/100 and compute_share + exposed_comm_share =
UTIL/100 within 0.005; at most one step (the last, which the samples may not
reach before the communicator closes) without one; the summary the same
within 0.005 and the verdict input-bound (UTIL <= 60). Prints one
"ok - ..."/"not ok - ..." line per check; exits 0 unless it crashed.
"""
import argparse
import json


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--label", required=True)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--util", type=float)
    p.add_argument("--none")
    p.add_argument("jsonl")
    a = p.parse_args()
    lines = [json.loads(x) for x in open(a.jsonl) if x.strip()]
    steps = [o for o in lines if o.get("kind") == "step"]
    sums = [o for o in lines if o.get("kind") == "summary" and "diagnosis" in o and o["diagnosis"]["steps"] > 0]
    lab = "%s, rank %d" % (a.label, a.rank)

    def check(cond, what):
        print(("ok - " if cond else "not ok - ") + lab + ": " + what)

    check(len(sums) == 1, "one communicator with steps (%d)" % len(sums))
    if not sums:
        return
    dg = sums[0]["diagnosis"]
    check(all(s["device"] == "gpu" for s in steps) and len(steps) >= 5, "%d steps, all timed on the device" % len(steps))
    if a.none is not None:
        check(dg["busy_source"] == "none" and a.none in dg["busy_why"] and a.none in dg["reason"],
              "busy_source none, the reason says why (%r)" % dg["busy_why"])
        check(dg["input_share"] is None and dg["compute_share"] is None and dg["verdict"] == "unknown",
              "input and compute unknown, verdict unknown (%s)" % dg["verdict"])
        check(all(s["busy_source"] == "none" and s["input_share"] is None for s in steps), "no step has a busy time")
        return
    u = a.util / 100.0
    nv = [s for s in steps if s["busy_source"] == "nvml"]
    check(len(nv) >= len(steps) - 1, "%d of %d steps have NVML's busy time" % (len(nv), len(steps)))
    bad = [s for s in nv if abs(s["input_share"] - (1 - u)) > 0.005
           or abs(s["compute_share"] + s["exposed_comm_share"] - u) > 0.005]
    check(not bad, "each step: input %.2f, compute + exposed %.2f within 0.005 (%s)"
          % (1 - u, u, bad[0] if bad else ""))
    check(dg["busy_source"] == "nvml" and dg["busy_why"] == "", "summary: busy_source nvml")
    check(abs(dg["input_share"] - (1 - u)) <= 0.005 and abs(dg["compute_share"] + dg["exposed_comm_share"] - u) <= 0.005,
          "summary: input %.4f, compute %.4f, exposed %.4f" % (dg["input_share"], dg["compute_share"],
                                                               dg["exposed_comm_share"]))
    check(dg["verdict"] == "input-bound", "verdict input-bound (%s)" % dg["verdict"])


if __name__ == "__main__":
    main()
