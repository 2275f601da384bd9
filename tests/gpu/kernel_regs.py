#!/usr/bin/env python3
"""tests/gpu/kernel_regs.py — what the compiler made of the two-phase kernels
(compress/kernels.cu) for sm_90, read without a GPU (issue 45): per kernel
its registers, spill bytes and stack frame (ptxas -v), whether a 64-bit
integer division or remainder lies inside a loop (its PTX: div/rem .u64 or
.s64 between a label and a branch back to it), and, where cuobjdump is
found, the SASS instructions of its hot loops per element (the innermost
loops holding a 128-bit load: their instructions, cold paths the compiler
placed inside their ranges included, divided by the elements one trip of
them handles; an upper bound of the steady state, not a measurement of
time).

    kernel_regs.py [--nvcc NVCC] [--cuobjdump PATH] [--flags "NVCC FLAGS"]
                   [--table] [--check] [--out DIR]

--check: TAP lines, one per two-phase kernel: at most MAX_REGS (64) registers
and 0 spill bytes and no 64-bit division in a loop of a decoder (tp_dec_*,
tp_sum_*); exit 1 if any fails. --table: the Markdown table of
tests/README.md. Without nvcc it prints a "# skip" line and exits 0 (the
targets are compile-time facts of nvcc's output; machines without it build
the kernels with NVRTC at run time).

Must not: need a GPU, or judge speed (instructions per element are printed
for the record, never held to a bound).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

MAX_REGS = 64
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Elements one trip of each kernel's hot loop handles: a 16-byte load of
# codes per operand (decoders: G codes), E = 8 elements per lane (the
# block-scaled encoders' wire blocks of 256), 4 (fp16/bf16 error feedback).
G = {"f16": 8, "bf16": 8, "int8": 16, "fp8": 16, "f16s": 8, "int4": 32}


def per_trip(name):
    kind, fmt = re.match(r"nsc_k_tp_(enc|encx|dec|sum)_(\w+)", name).groups()
    if kind in ("dec", "sum"):
        return G[fmt], "per element" + (" and operand" if kind == "sum" else "")
    return (4 if fmt in ("f16", "bf16") else 8), "per element"


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode:
        sys.exit("kernel_regs: %s failed:\n%s" % (" ".join(cmd), p.stdout))
    return p.stdout


def ptxas_info(text):
    """{kernel: {regs, spill_st, spill_ld, stack}} from ptxas -v output."""
    res, cur = {}, None
    for line in text.splitlines():
        m = re.search(r"Compiling entry function '(\w+)' for 'sm_90'", line)
        if m:
            cur = res.setdefault(m.group(1), {})
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and cur is not None:
            cur["stack"], cur["spill_st"], cur["spill_ld"] = map(int, m.groups())
        m = re.search(r"Used (\d+) registers", line)
        if m and cur is not None:
            cur["regs"] = int(m.group(1))
    return res


def ptx_div_in_loops(ptx):
    """{kernel: number of 64-bit div/rem instructions inside a loop}."""
    res = {}
    for m in re.finditer(r"\.entry (\w+)\((.*?)\n}\n", ptx, re.S):
        lines = m.group(2).splitlines()
        labels = {l.strip()[:-1]: i for i, l in enumerate(lines) if re.match(r"^\$\w+:$", l.strip())}
        loops = []
        for i, l in enumerate(lines):
            b = re.search(r"\bbra(?:\.uni)?\s+(\$\w+);", l)
            if b and b.group(1) in labels and labels[b.group(1)] < i:
                loops.append((labels[b.group(1)], i))
        divs = [i for i, l in enumerate(lines) if re.search(r"\b(div|rem)\.[us]64\b", l)]
        res[m.group(1)] = sum(1 for d in divs if any(a <= d <= b for a, b in loops))
    return res


def sass_hot_loops(sass):
    """{kernel: instructions of the innermost loop holding a 128-bit global load}."""
    res = {}
    for part in re.split(r"\n\s*Function : ", sass)[1:]:
        name = part.split()[0]
        ins = []  # (address, text)
        for l in part.splitlines():
            m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", l)
            if m:
                ins.append((int(m.group(1), 16), m.group(2)))
        addr = [a for a, _ in ins]
        loops = []
        for k, (a, t) in enumerate(ins):
            b = re.search(r"\bBRA\b.*?(0x[0-9a-f]+)\s*$", t)
            if b and int(b.group(1), 16) <= a:
                lo = addr.index(int(b.group(1), 16)) if int(b.group(1), 16) in addr else None
                if lo is not None:
                    loops.append((lo, k))
        loads = [k for k, (_, t) in enumerate(ins) if re.search(r"\bLDG?\.E\.(128|ENL2\.256)", t)]
        held = [(lo, hi) for lo, hi in loops if any(lo <= k <= hi for k in loads)]
        inner = [(lo, hi) for lo, hi in held if not any((a, b) != (lo, hi) and lo <= a and b <= hi for a, b in held)]
        if inner:
            res[name] = sum(hi - lo + 1 for lo, hi in inner)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nvcc", default=shutil.which("nvcc"))
    ap.add_argument("--cuobjdump", default=shutil.which("cuobjdump"))
    ap.add_argument("--flags", default="-O3 -std=c++17 --fmad=false")
    ap.add_argument("--src", default=os.path.join(ROOT, "compress", "kernels.cu"))
    ap.add_argument("--table", action="store_true")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--out")
    a = ap.parse_args()
    if not a.nvcc or not os.path.exists(a.nvcc):
        print("# skip - no nvcc here: the kernels' registers are nvcc's facts (NVRTC builds them at run time)")
        return 0
    out = a.out or tempfile.mkdtemp(prefix="kernel_regs_")
    os.makedirs(out, exist_ok=True)
    inc = ["-I" + os.path.dirname(a.src)]
    flags = a.flags.split()
    cubin = os.path.join(out, "kernels_sm90.cubin")
    # one compile: the cubin, ptxas's report, and the PTX it kept
    info = ptxas_info(run([a.nvcc, "-cubin", "-arch=sm_90", *flags, *inc, "-Xptxas", "-v", "--keep", "--keep-dir", out,
                           "-o", cubin, a.src]))
    ptx = [f for f in os.listdir(out) if f.endswith(".ptx")]
    if len(ptx) != 1:
        sys.exit("kernel_regs: nvcc --keep left %d PTX files in %s" % (len(ptx), out))
    divs = ptx_div_in_loops(open(os.path.join(out, ptx[0])).read())
    hot = {}
    if a.cuobjdump and os.path.exists(a.cuobjdump):
        hot = sass_hot_loops(run([a.cuobjdump, "-sass", cubin]))
    names = sorted(k for k in info if k.startswith("nsc_k_tp_"))
    fails = 0
    if a.table:
        print("| kernel | registers | spill bytes (stores/loads) | stack | 64-bit div/rem in a loop | "
              "hot loop: SASS instructions | per element |")
        print("|---|---|---|---|---|---|---|")
    for k in names:
        r = info[k]
        n, unit = per_trip(k)
        ipe = "%d / %d = %.1f %s" % (hot[k], n, hot[k] / n, unit) if k in hot else "no cuobjdump"
        spill = r.get("spill_st", 0) + r.get("spill_ld", 0)
        dec = re.match(r"nsc_k_tp_(dec|sum)_", k) is not None
        good = r.get("regs", 999) <= MAX_REGS and spill == 0 and (not dec or divs.get(k, 0) == 0)
        if a.table:
            print("| `%s` | %d | %d/%d | %d | %d | %s |" % (k[6:], r["regs"], r["spill_st"], r["spill_ld"], r["stack"],
                                                        divs.get(k, 0), ipe.replace(" = ", " | ", 1) if k in hot else "- | -"))
        else:
            print("%s - %s: %d registers (at most %d), %d spill bytes, %d-byte stack, %d 64-bit div/rem in loops%s; %s" % (
                "ok" if good else "not ok", k, r["regs"], MAX_REGS, spill, r["stack"], divs.get(k, 0),
                " (a decoder: none allowed)" if dec else "", ipe))
        fails += not good
    if not names:
        print("not ok - no two-phase kernel in ptxas's output")
        return 1
    return 1 if (a.check and fails) else 0


if __name__ == "__main__":
    sys.exit(main())
