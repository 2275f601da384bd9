"""ddp_compare.py OUT — the GPU check's DDP verdict (section 5 of
tests/gpu/check.sh, on a GPU and on the stand-ins): the shim's JSON Lines
(OUT/ddp-calls.*.jsonl) show at least --min compressed fp32 bucket
all-reduces (the run was transformed, not forwarded), and the loss curve with
the shim (OUT/loss-shim.txt) matches the one without it (OUT/loss-plain.txt)
step for step. Tolerance: the gradients travel in fp16 (relative rounding
2^-11 per element), so losses may differ by a small relative amount; we allow
2e-2 relative per step (documented in bench/README.md). Prints one line of
what it found; exit 1 when a condition fails."""
import argparse
import glob
import json
import sys

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("--steps", type=int, default=50)
p.add_argument("--min", type=int, default=50, help="compressed bucket all-reduces at least")
a = p.parse_args()
plain = [float(x) for x in open(f"{a.out}/loss-plain.txt")]
shim = [float(x) for x in open(f"{a.out}/loss-shim.txt")]
recs = [json.loads(l) for f in glob.glob(f"{a.out}/ddp-calls.*.jsonl") for l in open(f)]
calls = [r for r in recs if r.get("kind") == "call"]
comp = [r for r in calls if r.get("action") in ("compressed", "fused") and r.get("dtype") in ("float", "fp32", 7)]
worst = max((abs(x - y) / max(abs(x), 1e-6) for x, y in zip(plain, shim)), default=float("inf"))
print(f"# {len(calls)} intercepted all-reduces, {len(comp)} compressed (at least {a.min}); steps "
      f"{len(plain)}/{len(shim)}; max relative loss difference {worst:.3e}; first/last loss "
      f"{plain[0]:.4f}/{plain[-1]:.4f} vs {shim[0]:.4f}/{shim[-1]:.4f}")
ok = len(plain) == len(shim) == a.steps and len(comp) >= a.min and worst <= 2e-2
sys.exit(0 if ok else 1)
