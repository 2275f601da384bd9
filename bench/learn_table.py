"""bench/learn_table.py TMP NODES L LAUNCH_US NIC_PER MODEL — the table of
bench/ratios.sh learn: from the calls logs of three runs (TMP/lj-off,
lj-default, lj-int8: plain, the default, int8), per size the median call
time after the launch price was agreed and its ratio to plain, the plan the
shim ran beside the plan the cost model makes for the emulated costs (its
own simulated learner), and the learned values beside the host NCCL's
charge. Timings are the emulator's, never a GPU's."""
import glob
import json
import statistics
import subprocess
import sys

tmp, nodes, L, us, per, model = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]


def load(v):
    times, plan, fab, calls = {}, {}, None, []
    f = sorted(glob.glob("%s/lj-%s/*.jsonl" % (tmp, v)))[0]  # one rank's: every rank ran the same plans
    for line in open(f):
        r = json.loads(line)
        if r["kind"] == "summary":
            fab = r.get("fabric")
        elif r["kind"] == "call":
            calls.append(r)
    first = fab.get("call", 0) if fab else 0  # the call that first read the agreed price
    for c in calls:
        if v != "off" and c["call"] < first:  # planned at the unknown price, before the agreement
            continue
        times.setdefault(c["logical_bytes"], []).append(c["coll_us"] / 1e3)
        plan[c["logical_bytes"]] = c["algo"]
    return {b: statistics.median(x) for b, x in times.items()}, plan, fab


def modelled(b, comp):
    a = [model, "--fabric", "host", "--nodes", str(nodes), "--ranks-per-node", str(L), "--nic-gbps", "1",
         "--latency-us", "50", "--launch-us", str(us), "--bytes", str(b), "--compress", comp, "--algo", "auto",
         "--json"]
    a += ["--intra-gbps", "50", "--nic-per", per] if nodes > 1 else ["--intra-gbps", "1"]  # one node: its links are 1 Gb/s
    return json.loads(subprocess.run(a, capture_output=True, text=True, check=True).stdout)["plan"]


off = load("off")[0]
res = {v: load(v) for v in ("default", "int8")}
same = total = 0
print("%10s %10s %28s %28s" % ("bytes", "plain ms", "default x (plan/model)", "int8 x (plan/model)"))
for b in sorted(off):
    row = "%10d %10.2f" % (b, off[b])
    for v, comp in (("default", "fp16"), ("int8", "int8")):
        t, plan, _ = res[v]
        if b not in t:
            row += " %28s" % "(learning)"
            continue
        m = modelled(b, comp)
        total += 1
        same += plan[b] == m
        row += " %28s" % ("%.3f %s/%s" % (t[b] / off[b], plan[b], m))
    print(row)
charge = us + 50 * 2 * (nodes * L - 1)
for v in ("default", "int8"):
    f = res[v][2]
    if f and f.get("learned"):
        print("# %s: learned %.0f us per launch (the host NCCL charges %d us: %.2fx), %d ps/B (1 Gb/s: 8000), "
              "price %d link bytes" % (v, f["launch_ns"] / 1e3, charge, f["launch_ns"] / 1e3 / charge,
                                       f["ps_per_byte"], f["launch_bytes"]))
    else:
        print("# %s: %s" % (v, f and f.get("text")))
print("# plan for plan with the model at the emulated costs: %d of %d sizes" % (same, total))
