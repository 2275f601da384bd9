"""collectives.py — every torch.distributed collective frameworks use on the
CPU, with exact expected results, under `ncclshim-run --emulate` (run by
tests/t/83-frameworks.sh at 3 ranks, so that a root other than 0 and a group
that leaves a rank out are covered).

The script asks for the backends a CPU job asks for (the default group as
"gloo", side groups as "gloo", as "cpu:gloo,cuda:nccl" and with none), and
writes one line per check to OUTDIR/rank.R (R the rank; the ranks' stdout
interleave): "ok - R what" or "not ok - R what: detail", then "backends ..."
(what each group reports).

    collectives.py OUTDIR Inputs are small
integers, so every sum is exact in every dtype used; non-contiguous tensors
(a transposed view) test the staging.

Must not: depend on timing, or issue a collective on one rank only.
"""
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
R, W = dist.get_rank(), dist.get_world_size()
out_file = open(f"{sys.argv[1]}/rank.{R}", "w")
results = []


def say(line):
    print(line, file=out_file, flush=True)


def check(what, got, want):
    ok = torch.equal(got, want) if isinstance(want, torch.Tensor) else got == want
    results.append(ok)
    say(f"{'ok' if ok else 'not ok'} - {R} {what}" + ("" if ok else f": got {got!r}, want {want!r}"))


def ramp(r, n=6, dtype=torch.float32):
    return (torch.arange(n, dtype=torch.float32) + 10 * r).to(dtype)


def noncontig(t):
    """A non-contiguous (transposed) view of a copy of t's values."""
    return t.reshape(3, -1).clone().t()


total = sum(ramp(r) for r in range(W))
for dtype in (torch.float32, torch.bfloat16, torch.int64):
    t = ramp(R, dtype=dtype)
    dist.all_reduce(t)
    check(f"all_reduce sum {dtype}", t, total.to(dtype))
t = noncontig(ramp(R))
assert not t.is_contiguous()
dist.all_reduce(t, op=dist.ReduceOp.MAX)
check("all_reduce max of a non-contiguous tensor", t, noncontig(ramp(W - 1)))
ts = [ramp(R), ramp(R, 3)]
dist.all_reduce_coalesced(ts)
check("all_reduce_coalesced", ts[1], sum(ramp(r, 3) for r in range(W)))

root = W - 1
t = ramp(R)
dist.reduce(t, dst=root)
if R == root:
    check(f"reduce to rank {root}", t, total)
t = ramp(R)
dist.broadcast(t, src=root)
check(f"broadcast from rank {root}", t, ramp(root))

outs = [torch.zeros(6) for _ in range(W)]
dist.all_gather(outs, ramp(R))
check("all_gather", torch.stack(outs), torch.stack([ramp(r) for r in range(W)]))
out = torch.zeros(6 * W)
dist.all_gather_into_tensor(out, ramp(R))
check("all_gather_into_tensor", out, torch.cat([ramp(r) for r in range(W)]))
out = torch.zeros(2)
dist.reduce_scatter_tensor(out, torch.arange(2 * W, dtype=torch.float32) * (R + 1))
check("reduce_scatter_tensor", out, torch.tensor([2.0 * R, 2.0 * R + 1]) * sum(r + 1 for r in range(W)))
out = torch.zeros(2)
dist.reduce_scatter(out, [torch.full((2,), float(R + d)) for d in range(W)])
check("reduce_scatter (list)", out, torch.full((2,), float(sum(r + R for r in range(W)))))

gl = [torch.zeros(6) for _ in range(W)] if R == root else None
dist.gather(ramp(R), gl, dst=root)
if R == root:
    check(f"gather to rank {root}", torch.stack(gl), torch.stack([ramp(r) for r in range(W)]))
out = torch.zeros(6)
dist.scatter(out, [ramp(r) for r in range(W)] if R == 0 else None, src=0)
check("scatter from rank 0", out, ramp(R))
out = torch.zeros(2 * W)
dist.all_to_all_single(out, torch.arange(2 * W, dtype=torch.float32) + 100 * R)
check("all_to_all_single (equal splits)", out,
      torch.cat([torch.tensor([2.0 * R, 2.0 * R + 1]) + 100 * r for r in range(W)]))
# Uneven splits: rank R sends R + 1 rows to every peer and receives p + 1 rows from peer p.
inp = torch.full(((R + 1) * W, 2), float(R))
out = torch.zeros(sum(p + 1 for p in range(W)), 2)
dist.all_to_all_single(out, inp, output_split_sizes=[p + 1 for p in range(W)], input_split_sizes=[R + 1] * W)
check("all_to_all_single (uneven splits)", out, torch.cat([torch.full((p + 1, 2), float(p)) for p in range(W)]))
outs = [torch.zeros(3) for _ in range(W)]
dist.all_to_all(outs, [torch.full((3,), float(10 * R + d)) for d in range(W)])
check("all_to_all (lists)", torch.stack(outs), torch.stack([torch.full((3,), float(10 * p + R)) for p in range(W)]))

objs = [None] * W
dist.all_gather_object(objs, {"rank": R})
check("all_gather_object", objs, [{"rank": r} for r in range(W)])
lst = [R, "x" * (R + 1)] if R == 0 else [None, None]
dist.broadcast_object_list(lst, src=0)
check("broadcast_object_list", lst, [0, "x"])
gath = [None] * W if R == root else None
dist.gather_object(("r", R), gath, dst=root)
if R == root:
    check("gather_object", gath, [("r", r) for r in range(W)])
got = [None]
dist.scatter_object_list(got, [f"to {r}" for r in range(W)] if R == 0 else None, src=0)
check("scatter_object_list", got, [f"to {R}"])
dist.barrier()
check("barrier", True, True)

if R in (0, 1):  # send/recv between two ranks
    t = ramp(7) if R == 0 else torch.zeros(6)
    (dist.send if R == 0 else dist.recv)(t, 1 - R)
    check("send/recv", t, ramp(7))

# Side groups as frameworks make them; a group of ranks 0..W-2 leaves the last out.
backends = {"default": dist.get_backend()}
for name, kw in (("gloo", {"backend": "gloo"}), ("map", {"backend": "cpu:gloo,cuda:nccl"}), ("none", {})):
    g = dist.new_group(**kw)
    t = ramp(R)
    dist.all_reduce(t, group=g)
    check(f"new_group({kw}) all_reduce", t, total)
    backends[name] = dist.get_backend(g)
part = dist.new_group(ranks=list(range(W - 1)), backend="gloo")
if R < W - 1:
    t = ramp(R)
    dist.all_reduce(t, group=part)
    check(f"new_group(ranks 0..{W - 2}) all_reduce", t, sum(ramp(r) for r in range(W - 1)))
    objs = [None] * (W - 1)
    dist.all_gather_object(objs, R, group=part)
    check(f"new_group(ranks 0..{W - 2}) all_gather_object", objs, list(range(W - 1)))
say("backends " + " ".join(f"{k}={v}" for k, v in backends.items()))
dist.destroy_process_group()
sys.exit(0 if all(results) else 1)
