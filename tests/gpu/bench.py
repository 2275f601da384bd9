#!/usr/bin/env python3
"""tests/gpu/bench.py — one variant of `make gpu-bench` (tests/gpu/bench.sh
runs it once per variant and rank count, under torchrun on a GPU, or under
`ncclshim-run --emulate` on the stand-ins): what a user buys the shim for,
measured in one process group.

    bench.py --out OUT.json [--sizes 16M,64M,256M] [--iters N] [--ddp-params P]
             [--steps S] [--accum K] [--one-gpu]

Rank 0 writes one JSON object:
  allreduce:  per size (bytes of fp32 per rank), the median time of an
              in-place fp32 Sum all_reduce (ms; CUDA events on a GPU, the wall
              clock on the CPU), `iters` of them after 2 warm-up calls (none
              with --accum: the run is the training loop alone);
  ddp:        the median time of one optimizer step of a DDP model of about
              `ddp-params` fp32 parameters (Linear layers of 4096, or smaller
              to fit), `steps` of them after 2 warm-up steps; with --accum K
              a step is K forward/backward passes each synced by DDP (the
              naive accumulation loop: no no_sync), then the optimizer;
  identical:  every rank ended with the same parameters, bit for bit (their
              checksums' minimum and maximum over the ranks agree);
  stats:      the shim's ncclshim_get_stats on rank 0 (None without the shim);
  device, torch, nccl, world.
--one-gpu: every rank on GPU 0 with its own NCCL_HOSTID (NCCL joins them over
its network transport: a slow network beside a fast GPU).

Must not: judge anything (bench.sh does), or keep tensors anywhere but the
device the run has (CUDA, else the CPU).
"""
import argparse
import json
import os

# parse_size, shim_stats (ncclshim.h's ncclshim_stats_t read in-process) and
# median_ms are gpu-check's: tests/gpu/shim_torch.py beside this file.
from shim_torch import median_ms, parse_size, shim_stats


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--sizes", default="16M,64M,256M")
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--ddp-params", default="64M")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--one-gpu", action="store_true")
    a = p.parse_args()
    if a.one_gpu:
        os.environ["NCCL_HOSTID"] = "gpubench-rank%s" % os.environ.get("RANK", "0")
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    gpu = torch.cuda.is_available()
    dev = torch.device("cuda", 0 if a.one_gpu else int(os.environ.get("LOCAL_RANK", 0))) if gpu else torch.device("cpu")
    if gpu:
        torch.cuda.set_device(dev)
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()

    def sync():
        if gpu:
            torch.cuda.synchronize(dev)

    def timed(fn, iters):
        return median_ms(torch, gpu, fn, iters, warmup=2)

    res = {"device": torch.cuda.get_device_name(dev) if gpu else "cpu (stand-in: host NCCL, emulated)",
           "torch": torch.__version__, "world": world, "allreduce": {}, "accum": a.accum}
    try:
        res["nccl"] = ".".join(map(str, torch.cuda.nccl.version())) if gpu else "host NCCL"
    except Exception:  # noqa: BLE001
        res["nccl"] = "?"
    g = torch.Generator(device=dev)
    g.manual_seed(1234 + rank)
    # With --accum the run is the DDP loop alone: all-reduces on a fixed buffer
    # before it would be, to the shim's learner, a metric, not a gradient
    # bucket (it then syncs every pass, as it must).
    for s in a.sizes.split(",") if a.accum == 1 else []:
        n = parse_size(s) // 4
        x = torch.randn(n, device=dev, generator=g)
        res["allreduce"][s] = timed(lambda: dist.all_reduce(x), a.iters)
        del x
    sync()
    # DDP: Linear layers of width w (no bias), about ddp-params parameters in all
    want = parse_size(a.ddp_params)
    w = 4096 if want >= 4 * 4096 * 4096 else max(64, int((want / 4) ** 0.5))
    layers = max(1, round(want / (w * w)))
    torch.manual_seed(4321)
    model = torch.nn.Sequential(*[torch.nn.Linear(w, w, bias=False) for _ in range(layers)]).to(dev)
    ddp = DDP(model, device_ids=[dev] if gpu else None, bucket_cap_mb=25)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-4)
    batch = torch.randn(8, w, device=dev, generator=g)

    def step():
        for _ in range(a.accum):  # the naive loop: DDP syncs every pass
            ddp(batch).float().pow(2).mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=False)

    res["ddp"] = timed(step, a.steps)
    res["ddp_params"] = sum(q.numel() for q in model.parameters())
    sync()
    # the replicas: a checksum of every parameter's bits, min and max over the ranks
    ck = torch.zeros(1, dtype=torch.int64, device=dev)
    for q in model.parameters():
        ck += q.detach().contiguous().view(torch.int32).to(torch.int64).sum()
    lo, hi = ck.clone(), ck.clone()
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    res["identical"] = bool(lo.item() == hi.item())
    res["stats"] = shim_stats()
    if rank == 0:
        with open(a.out, "w") as f:
            json.dump(res, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
