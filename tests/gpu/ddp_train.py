"""ddp_train.py — a small DDP training run for the GPU check: a 4-layer MLP on
synthetic data (fixed seed), SGD with momentum, gradient accumulation off,
--steps optimizer steps; writes one loss per line to --out and, with --stats
FILE, rank 0's shim counters at the end (ncclshim_get_stats, read in-process;
null without the shim). --one-gpu: every rank on GPU 0, each with its own
NCCL_HOSTID (NCCL refuses two ranks of one host on one GPU; with different
host ids they talk over its network transport). --cpu: the stand-ins (under
ncclshim.emulate: CPU tensors over the host NCCL, the same settings and
verdicts as on a GPU). Must not: judge anything (check.sh and ddp_compare.py
do)."""
import argparse
import json
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from shim_torch import shim_stats

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=50)
p.add_argument("--out", required=True)
p.add_argument("--stats")
p.add_argument("--one-gpu", action="store_true")
p.add_argument("--cpu", action="store_true")
a = p.parse_args()
if a.one_gpu:
    os.environ["NCCL_HOSTID"] = "gpucheck-rank%s" % os.environ.get("RANK", "0")
dist.init_process_group("nccl")
rank = dist.get_rank()
if a.cpu:
    dev = torch.device("cpu")
else:
    dev = torch.device("cuda", 0 if a.one_gpu else int(os.environ.get("LOCAL_RANK", 0)))
    torch.cuda.set_device(dev)
torch.manual_seed(1234)
model = torch.nn.Sequential(
    torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
    torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)).to(dev)
ddp = DDP(model, bucket_cap_mb=1)
opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
g = torch.Generator(device=dev).manual_seed(42 + rank)
X = torch.randn(64 * a.steps, 512, device=dev, generator=g)
Y = torch.randint(0, 10, (64 * a.steps,), device=dev, generator=g)
losses = []
for s in range(a.steps):
    x, y = X[64 * s:64 * (s + 1)], Y[64 * s:64 * (s + 1)]
    loss = torch.nn.functional.cross_entropy(ddp(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
if rank == 0:
    with open(a.out, "w") as f:
        f.write("\n".join(f"{l:.8f}" for l in losses) + "\n")
    if a.stats:
        with open(a.stats, "w") as f:
            json.dump(shim_stats(), f)
dist.destroy_process_group()
