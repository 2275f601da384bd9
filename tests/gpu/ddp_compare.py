"""ddp_compare.py OUT — the GPU check's DDP verdict: the shim's JSON Lines show
compressed bucket all-reduces (fp32 Sum), and the loss curve with the shim
matches the one without it. Tolerance: the gradients travel in fp16 (relative
rounding 2^-11 per element), so losses may differ by a small relative amount;
we allow 2e-2 relative per step (documented in bench/README.md)."""
import glob
import json
import sys

out = sys.argv[1]
plain = [float(x) for x in open(f"{out}/loss-plain.txt")]
shim = [float(x) for x in open(f"{out}/loss-shim.txt")]
recs = [json.loads(l) for f in glob.glob(f"{out}/ddp-calls.*.jsonl") for l in open(f)]
calls = [r for r in recs if r.get("kind") == "call"]
comp = [r for r in calls if r.get("action") in ("compressed", "fused") and r.get("dtype") in ("float", "fp32", 7)]
worst = max(abs(a - b) / max(abs(a), 1e-6) for a, b in zip(plain, shim))
print(f"# {len(calls)} intercepted all-reduces, {len(comp)} compressed; steps {len(plain)}/{len(shim)}; "
      f"max relative loss difference {worst:.3e}; first/last loss {plain[0]:.4f}/{plain[-1]:.4f} vs {shim[0]:.4f}/{shim[-1]:.4f}")
ok = len(plain) == len(shim) == 50 and len(comp) >= 50 and worst <= 2e-2
sys.exit(0 if ok else 1)
