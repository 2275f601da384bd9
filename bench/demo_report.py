#!/usr/bin/env python3
"""demo_report.py perf|ddp|plots DIR — the demo's side-by-side tables and plots.

perf:  reads DIR/ap-{plain,fp16,bf16}.json (allreduce_perf -J) and prints one
       table: size, time without the shim, with fp16 and bf16 (ratio to no
       shim), the max relative error and #wrong of the compressed runs.
       Writes DIR/perf.tsv. Exit 1 if any run counted a wrong element.
ddp:   reads DIR/ddp-{plain,fp16,fp16-k4}.txt (the 'summary:' line of
       ddp_step) and prints calls, wire bytes and communication time per
       optimizer step, with ratios. Writes DIR/ddp.tsv.
plots: PNGs with gnuplot (busbw vs size; communication time per optimizer
       step) when gnuplot is installed.
"""
import json
import os
import shutil
import subprocess
import sys

VARIANTS = ("plain", "fp16", "bf16")
DDP = (("plain", "plain DDP"), ("fp16", "shim fp16"), ("fp16-k4", "shim fp16 + K=4"))


def load(d, name):
    with open(os.path.join(d, f"ap-{name}.json")) as f:
        return {r["size"]: r for r in json.load(f)["results"]}


def human(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:g} {unit}"
        n /= 1024
    return f"{n:g} TiB"


def perf(d):
    runs = {v: load(d, v) for v in VARIANTS}
    wrong = 0
    rows = []
    print(f"{'size':>10} {'no shim (us)':>14} {'fp16 (us)':>12} {'ratio':>6} {'bf16 (us)':>12} {'ratio':>6}"
          f" {'fp16 maxrelerr':>15} {'bf16 maxrelerr':>15} {'#wrong':>7}")
    for size in sorted(runs["plain"]):
        p = runs["plain"][size]["out_of_place"]
        f = runs["fp16"][size]["out_of_place"]
        b = runs["bf16"][size]["out_of_place"]
        w = sum(runs[v][size][k]["nwrong"] for v in VARIANTS for k in ("out_of_place", "in_place"))
        wrong += w
        rows.append((size, p["time"], f["time"], b["time"], p["bus_bw"], f["bus_bw"], b["bus_bw"]))
        print(f"{human(size):>10} {p['time']:14.0f} {f['time']:12.0f} {f['time'] / p['time']:6.2f}"
              f" {b['time']:12.0f} {b['time'] / p['time']:6.2f} {f.get('max_rel_err', 0):15.2e}"
              f" {b.get('max_rel_err', 0):15.2e} {w:7d}")
    with open(os.path.join(d, "perf.tsv"), "w") as out:
        out.write("# size plain_us fp16_us bf16_us plain_busbw fp16_busbw bf16_busbw\n")
        for r in rows:
            out.write("\t".join(str(x) for x in r) + "\n")
    print("# out-of-place times (us), ratio = shim / no shim; #wrong counts both placements of all three runs")
    return 1 if wrong else 0


def ddp_summary(path):
    with open(path) as f:
        for line in f:
            if line.startswith("summary:"):
                return dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)
    raise SystemExit(f"demo_report: no 'summary:' line in {path}")


def ddp(d):
    s = {name: ddp_summary(os.path.join(d, f"ddp-{name}.txt")) for name, _ in DDP}
    base = s["plain"]
    key_t = next(k for k in base if k.startswith("comm_") or k.endswith("_ms") or "time" in k)
    print(f"{'variant':<18} {'calls':>7} {'real calls':>10} {'wire bytes':>13} {key_t:>14} {'ratio':>6}")
    rows = []
    for name, label in DDP:
        v = s[name]
        t, bt = float(v[key_t]), float(base[key_t])
        rows.append((label, float(v.get("calls", 0)), float(v.get("real_calls", 0)), float(v.get("wire_bytes", 0)), t))
        print(f"{label:<18} {float(v.get('calls', 0)):7.0f} {float(v.get('real_calls', 0)):10.0f}"
              f" {float(v.get('wire_bytes', 0)):13.0f} {t:14.3f} {t / bt if bt else 0:6.3f}")
    with open(os.path.join(d, "ddp.tsv"), "w") as out:
        out.write(f"# variant calls real_calls wire_bytes {key_t}\n")
        for r in rows:
            out.write("\t".join(str(x) for x in r) + "\n")
    print(f"# per optimizer step (medians of the measured steps); ratio = {key_t} / plain DDP's")
    return 0


def plots(d):
    if not shutil.which("gnuplot"):
        print("# gnuplot not found: no plots")
        return 0
    script = f"""
set terminal pngcairo size 900,560 noenhanced
set output '{d}/busbw.png'
set title 'all-reduce bus bandwidth vs size (4 ranks; see demo header for the link)'
set logscale x 2
set xlabel 'size'
set format x '%.0b %BB'
set ylabel 'busbw (GB/s, logical bytes)'
set key left top
plot '{d}/perf.tsv' using 1:5 with linespoints title 'no shim', \
     '' using 1:6 with linespoints title 'shim fp16', \
     '' using 1:7 with linespoints title 'shim bf16'
set output '{d}/ddp_comm_time.png'
set title 'communication time per optimizer step (ddp_step)'
unset logscale x
set xlabel ''
set ylabel 'time inside ncclAllReduce per step'
set style fill solid 0.6
set boxwidth 0.6
set yrange [0:*]
plot '{d}/ddp.tsv' using 0:5:xtic(1) with boxes notitle
"""
    r = subprocess.run(["gnuplot"], input=script, text=True, capture_output=True)
    if r.returncode:
        script = script.replace("pngcairo", "png")
        r = subprocess.run(["gnuplot"], input=script, text=True, capture_output=True)
    if r.returncode:
        print("# gnuplot failed:", r.stderr.strip().splitlines()[-1:] or "")
        return 0
    print(f"# plots: {d}/busbw.png {d}/ddp_comm_time.png")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("perf", "ddp", "plots"):
        raise SystemExit(__doc__)
    sys.exit({"perf": perf, "ddp": ddp, "plots": plots}[sys.argv[1]](sys.argv[2]))
