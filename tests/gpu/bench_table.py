#!/usr/bin/env python3
"""tests/gpu/bench_table.py RESULTS.jsonl — `make gpu-bench`'s table and
goals (tests/gpu/bench.sh writes RESULTS.jsonl: one bench.py result per line,
with its variant, rank count w and mode, shared or mps).

Prints, per mode and rank count, one row per variant: the ratio to plain
NCCL's time of each all-reduce size and of the DDP step (accum4 against
plain-accum4, the same naive loop without the shim), the calls the shim
compressed (fused members included) out of those it saw, and whether the
replicas ended identical; plain's own row gives its times in ms (a "-":
not measured in that run: the accumulation runs time the DDP loop only). Then the
goals, each PASS or MISS (or "not measured" when its row is missing):
  - no settings (default) <= 1.00x plain in every column of every row;
  - DDP step: fp16 <= 0.60x, int8 <= 0.40x;
  - all-reduce int8 <= 0.35x at the largest size.
Exit 1 when a row says the replicas differ or a result is malformed (a MISS
is a measurement, not a failure).
"""
import json
import sys

GOALS = [("default", "every", 1.00), ("fp16", "ddp", 0.60), ("int8", "ddp", 0.40), ("int8", "largest", 0.35)]


def main():
    rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
    bad = 0
    groups = {}
    for r in rows:
        for k in ("variant", "w", "mode", "allreduce", "ddp", "identical"):
            if k not in r:
                print(f"not ok - a result without '{k}': {r}")
                return 1
        groups.setdefault((r["mode"], r["w"]), {})[r["variant"]] = r
    ratios = {}  # (mode, w, variant) -> {column: ratio}
    for (mode, w), vs in sorted(groups.items()):
        plain = vs.get("plain")
        if not plain:
            print(f"# {mode}, {w} ranks: no plain run, no ratios")
            continue
        sizes = list(plain["allreduce"])
        first = next(iter(vs.values()))
        print(f"\n# {mode}: {w} ranks on {first.get('device', '?')} (torch {first.get('torch', '?')}, NCCL "
              f"{first.get('nccl', '?')}); DDP model of {plain.get('ddp_params', 0) / 1e6:.1f}M parameters")
        head = ["variant"] + [f"AR {s}" for s in sizes] + ["DDP step", "compressed", "identical"]
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        print("| plain (ms) | " + " | ".join(f"{plain['allreduce'][s]:.2f}" for s in sizes) +
              f" | {plain['ddp']:.2f} | - | {'yes' if plain['identical'] else 'NO'} |")
        if not plain["identical"]:
            bad = 1
        for v, r in vs.items():
            if v == "plain":
                continue
            base = vs.get("plain-accum4") if v == "accum4" else plain
            if v == "plain-accum4":
                base = plain
            cols = {}
            for s in sizes:
                if s in r["allreduce"] and plain["allreduce"][s] > 0:
                    cols[s] = r["allreduce"][s] / plain["allreduce"][s]
            cols["ddp"] = r["ddp"] / base["ddp"] if base and base["ddp"] > 0 else float("nan")
            ratios[(mode, w, v)] = cols
            st = r.get("stats")
            comp = f"{st['compressed'] + st['fused']} of {st['calls']}" if st else "-"
            ident = "yes" if r["identical"] else "NO"
            if not r["identical"]:
                bad = 1
            label = v + (" (vs plain-accum4)" if v == "accum4" else " (vs plain)" if v == "plain-accum4" else "")
            print(f"| {label} | " + " | ".join(f"{cols[s]:.2f}x" if s in cols else "-" for s in sizes) +
                  f" | {cols['ddp']:.2f}x | {comp} | {ident} |")
    print("\n# goals")
    for v, col, lim in GOALS:
        found = [(k, c) for k, c in ratios.items() if k[2] == v]
        if not found:
            print(f"goal {v} {col} <= {lim:.2f}x: not measured")
            continue
        worst, where = 0.0, ""
        for (mode, w, _), c in found:
            sizes = [k for k in c if k != "ddp"]
            vals = {"every": list(c.values()), "ddp": [c["ddp"]], "largest": [c[sizes[-1]]] if sizes else []}[col]
            vals = [x for x in vals if x == x]  # nan: no baseline
            for x in vals:
                if x > worst:
                    worst, where = x, f"{mode} {w} ranks"
        print(f"goal {v} {col} <= {lim:.2f}x: {'PASS' if worst <= lim else 'MISS'} (worst {worst:.2f}x, {where})")
    return bad


if __name__ == "__main__":
    sys.exit(main())
