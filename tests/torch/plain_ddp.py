"""plain_ddp.py — a DDP training script as a user writes it (torchrun's
environment, init_process_group("nccl"), DistributedDataParallel, SGD), on CPU
tensors: what `ncclshim-run --emulate` must run unmodified (tests/t/85-pip.sh).

    plain_ddp.py [--steps N] [--width W]

Rank 0 prints one line per step, "step K loss L", and at the end, when the
ncclshim package is importable and its library preloaded, "stats {json}"
(ncclshim.stats()). Must not: import anything of the shim's before
init_process_group (a user script does not).
"""
import argparse
import json
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=5)
p.add_argument("--width", type=int, default=256)
a = p.parse_args()

dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(a.width, a.width), torch.nn.ReLU(), torch.nn.Linear(a.width, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
g = torch.Generator().manual_seed(1 + rank)
for step in range(a.steps):
    x = torch.randn(32, a.width, generator=g)
    loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if rank == 0:
        print(f"step {step} loss {loss.item():.6f}", flush=True)
if rank == 0:
    try:
        import ncclshim
        print("stats " + json.dumps(ncclshim.stats()), flush=True)
    except (ImportError, RuntimeError) as e:
        print(f"stats unavailable: {e}", flush=True)
dist.destroy_process_group()
