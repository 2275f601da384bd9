#!/usr/bin/env python3
"""demo_report.py perf|torch|plots|diag DIR — the demo's side-by-side tables and plots.

perf:  reads DIR/ap-{plain,fp16,bf16}.json (allreduce_perf -J) and prints one
       table: size, time without the shim, with fp16 and bf16 (ratio to no
       shim), the max relative error and #wrong of the compressed runs.
       Writes DIR/perf.tsv. Exit 1 if any run counted a wrong element.
torch: reads DIR/torch-{plain,fp16,fp16-k4}.json (tests/torch/train.py) and
       prints per optimizer step the time, communication time, wire bytes
       and loss of each variant, then medians with ratios to no shim.
       Writes DIR/torch-loss.tsv and DIR/torch-steps.tsv.
diag:  bench/ncclshim-report --json over DIR/diag-{fp16,fp16-k4}/ (the
       shim's calls logs of those runs): per variant the verdict, the shares
       of step time, the straggler and the first suggestions; beside them the
       share of step time inside NCCL calls as train.py measured it (the no
       shim run has only that: nothing to diagnose it with).
plots: PNGs with gnuplot (busbw vs size; the three loss curves overlaid;
       compute and communication per optimizer step) when gnuplot is installed.
"""
import glob
import json
import os
import shutil
import subprocess
import sys

VARIANTS = ("plain", "fp16", "bf16")
TORCH = (("plain", "no shim"), ("fp16", "shim fp16"), ("fp16-k4", "shim fp16 + K=4"))
TORCH_OPTIONAL = (("fp16-auto", "shim fp16 + auto"),)  # bench/ratios.sh torch


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


def torch_warm():
    """The optimizer steps left out of the medians (TORCH_WARM, default 1)."""
    return int(os.environ.get("TORCH_WARM", "1"))


def torch_variants(d):
    """TORCH, and each of TORCH_OPTIONAL that has runs in d."""
    return TORCH + tuple((n, l) for n, l in TORCH_OPTIONAL if glob.glob(os.path.join(d, f"torch-{n}.*json")))


def torch_runs(d):
    """{name: record of torch-NAME.json}, and {name: [records of torch-NAME.*.json]}
    (the rounds of bench/ratios.sh torch) when there are such files."""
    runs, rounds = {}, {}
    for name, label in torch_variants(d):
        for path in sorted(glob.glob(os.path.join(d, f"torch-{name}.json")) +
                           glob.glob(os.path.join(d, f"torch-{name}.[0-9]*.json"))):
            with open(path) as f:
                rec = json.load(f)[name]
            runs.setdefault(name, rec)
            rounds.setdefault(name, []).append(rec)
        if name not in runs:
            raise SystemExit(f"demo_report: no {d}/torch-{name}*.json")
    return runs, rounds


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return (xs[n // 2] + xs[(n - 1) // 2]) / 2 if n else 0.0


def torch_report(d):
    runs, rounds = torch_runs(d)
    variants = torch_variants(d)
    nsteps = len(runs["plain"]["loss"])
    r0 = runs["plain"]
    print(f"# {r0['nparams'] / 1e6:.2f} M parameters, {r0['world']} ranks; per optimizer step "
          f"(4 backward passes): wall time, time inside NCCL calls, bytes all-reduced, loss (rank 0)")
    print(f"{'step':>4}" + "".join(f" | {label:^38}" for _, label in variants))
    print(f"{'':>4}" + "".join(f" | {'time s':>7} {'comm s':>7} {'wire MiB':>9} {'loss':>10}" for _ in variants))
    for i in range(nsteps):
        print(f"{i:>4}" + "".join(
            f" | {runs[n]['step_s'][i]:7.3f} {runs[n]['comm_s'][i]:7.3f} {runs[n]['wire_bytes'][i] / 2**20:9.2f}"
            f" {runs[n]['loss'][i]:10.6f}" for n, _ in variants))
    # The first steps sync every pass: step 0 is the shim's learning phase; with
    # the step hook a window of K passes is seen before passes are skipped, and
    # auto sees its window twice (TORCH_WARM=3). Medians over the rest.
    warm = torch_warm()
    rows = []
    for name, label in variants:
        t, c, w = (median([x for r in rounds[name] for x in r[k][warm:]]) for k in ("step_s", "comm_s", "wire_bytes"))
        rows.append((label, t, c, t - c, w))
    base = rows[0]
    print(f"\n{'variant':<18} {'step s':>8} {'ratio':>6} {'comm s':>8} {'ratio':>6} {'compute s':>9}"
          f" {'wire MiB':>9} {'ratio':>6}  final loss")
    for (label, t, c, comp, w), (name, _) in zip(rows, variants):
        print(f"{label:<18} {t:8.3f} {t / base[1]:6.3f} {c:8.3f} {c / base[2]:6.3f} {comp:9.3f}"
              f" {w / 2**20:9.2f} {w / base[4]:6.3f}  {runs[name]['loss'][-1]:.6f}")
    print(f"# medians of steps {warm}.. of {len(rounds['plain'])} run(s) each (the steps before sync every pass);"
          " ratio = variant / no shim; compute = step - comm")
    with open(os.path.join(d, "torch-loss.tsv"), "w") as out:
        out.write("step\t" + "\t".join(label for _, label in variants) + "\n")
        for i in range(nsteps):
            out.write(f"{i}\t" + "\t".join(f"{runs[n]['loss'][i]:.8f}" for n, _ in variants) + "\n")
    with open(os.path.join(d, "torch-steps.tsv"), "w") as out:
        out.write("# variant\tcompute_s\tcomm_s\n")
        for label, t, c, comp, w in rows:
            out.write(f"{label}\t{comp:.6f}\t{c:.6f}\n")
    return 0


def diag(d):
    runs, _ = torch_runs(d)
    report = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ncclshim-report")
    print("# why the steps took their time: the shim's diagnosis (bench/ncclshim-report over its calls logs);"
          f" 'in NCCL' = share of step time inside NCCL calls as train.py measured it (steps {torch_warm()}..)")
    print(f"{'variant':<18} {'in NCCL':>7}  {'verdict':<20} {'comm':>5} {'input':>5} {'compute':>7}  straggler")
    tries, note = [], []
    for name, label in TORCH:
        r = runs[name]
        meas = sum(r["comm_s"][torch_warm():]) / sum(r["step_s"][torch_warm():])
        logs = os.path.join(d, f"diag-{name}")
        if not os.path.isdir(logs):
            print(f"{label:<18} {meas:7.0%}  (no shim: not diagnosed)")
            continue
        p = subprocess.run([sys.executable, report, "--json", "-", logs], capture_output=True, text=True)
        try:
            j = json.loads(p.stdout)
        except ValueError:
            print(f"{label:<18} {meas:7.0%}  (ncclshim-report failed: {p.stderr.strip()[-200:]})")
            return 1
        pc = (lambda x: "  n/a" if x is None else f"{x:5.0%}")
        strag = "none" if j["straggler"] is None else f"rank {j['straggler']}"
        print(f"{label:<18} {meas:7.0%}  {j['verdict']:<20} {pc(j['exposed_comm_share'])} {pc(j['input_share'])}"
              f" {pc(j['compute_share']):>7}  {strag}")
        tries += [f"# {label}: try: {t}" for t in j.get("suggestions", [])[:1]]
        note = j.get("notes", [])[:1]
    print("\n".join(tries + [f"# note: {n}" for n in note]))
    return 0


def plots(d):
    if not shutil.which("gnuplot"):
        print("# gnuplot not found: no plots")
        return 0
    gbps, ranks = os.environ.get("HOSTNCCL_LINK_GBPS"), os.environ.get("DEMO_NP", "4")
    where = f"host NCCL, emulated {gbps} Gb/s link: not GPU numbers" if gbps else "real NCCL"
    script = f"""
set terminal pngcairo size 900,560 noenhanced
set output '{d}/busbw.png'
set title 'all-reduce bus bandwidth vs size ({ranks} ranks; {where})'
set logscale x 2
set xlabel 'size'
set format x '%.0b %BB'
set ylabel 'busbw (GB/s, logical bytes)'
set key below
plot '{d}/perf.tsv' using 1:5 with linespoints title 'no shim', \
     '' using 1:6 with linespoints title 'shim fp16', \
     '' using 1:7 with linespoints title 'shim bf16'
set datafile separator '\t'
TORCH_PLOTS
set output '{d}/loss.png'
set title 'real PyTorch DDP (torchrun, {ranks} ranks): training loss per optimizer step'
unset logscale x
set format x '%g'
set xlabel 'optimizer step (4 backward passes each)'
set ylabel 'loss (rank 0, mean of its 4 micro-steps)'
set key right top
plot '{d}/torch-loss.tsv' using 1:2 with linespoints lw 2 title columnheader(2), \
     '' using 1:3 with linespoints dt 2 title columnheader(3), \
     '' using 1:4 with linespoints dt 3 title columnheader(4)
set output '{d}/step_time.png'
set title 'time per optimizer step: compute and communication (median of steps {torch_warm()}..)'
set xlabel ''
set ylabel 'seconds per optimizer step'
set xrange [-0.6:2.6]
set style data histograms
set style histogram rowstacked
set style fill solid 0.7 border -1
set boxwidth 0.6
set yrange [0:*]
set key below
plot '{d}/torch-steps.tsv' using 2:xtic(1) title 'compute (step - comm)', '' using 3 title 'communication (inside NCCL calls)'
"""
    has_torch = os.path.exists(os.path.join(d, "torch-loss.tsv"))
    head, _, torch_part = script.partition("TORCH_PLOTS\n")
    script = head + (torch_part if has_torch else "")
    r = subprocess.run(["gnuplot"], input=script, text=True, capture_output=True)
    if r.returncode:
        script = script.replace("pngcairo", "png")
        r = subprocess.run(["gnuplot"], input=script, text=True, capture_output=True)
    if r.returncode:
        print("# gnuplot failed:", r.stderr.strip().splitlines()[-1:] or "")
        return 0
    print(f"# plots: {d}/busbw.png" + (f" {d}/loss.png {d}/step_time.png" if has_torch else ""))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("perf", "torch", "plots", "diag"):
        raise SystemExit(__doc__)
    sys.exit({"perf": perf, "torch": torch_report, "plots": plots, "diag": diag}[sys.argv[1]](sys.argv[2]))
