"""deepspeed_train.py — a DeepSpeed script as its users write one:
deepspeed.initialize with a config (ZeRO stage --zero), engine.backward and
engine.step. Nothing in it knows about the shim or the CPU.

    deepspeed --num_gpus 2 deepspeed_train.py --zero 2                   (GPUs)
    ncclshim-run --emulate --nproc 2 -- deepspeed_train.py --zero 2      (CPU, tests/frameworks/run.sh)

Every rank prints "rank R params SHA256" (its parameters' bytes) at the end,
rank 0 "step K loss L" per step and "final loss L" (the last step's).
"""
import argparse
import hashlib

import deepspeed
import torch
import torch.distributed as dist
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=6)
p.add_argument("--zero", type=int, default=0)
p.add_argument("--local_rank", type=int, default=-1)  # the deepspeed launcher passes it
args = p.parse_args()

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(),
                            torch.nn.Linear(256, 1))
config = {"train_micro_batch_size_per_gpu": 32, "gradient_accumulation_steps": 1,
          "zero_optimization": {"stage": args.zero}, "steps_per_print": 1000}
engine, _, _, _ = deepspeed.initialize(model=model, optimizer=torch.optim.AdamW(model.parameters(), lr=1e-3),
                                       config=config)
g = torch.Generator().manual_seed(1 + dist.get_rank())
for step in range(args.steps):
    x = torch.randn(32, 64, generator=g)
    y = x[:, :8].sum(dim=1, keepdim=True)
    loss = F.mse_loss(engine(x.to(engine.device)), y.to(engine.device))
    engine.backward(loss)
    engine.step()
    if dist.get_rank() == 0:
        print(f"step {step} loss {loss.item():.6f}", flush=True)

if dist.get_rank() == 0:
    print(f"final loss {loss.item():.9g}", flush=True)
digest = hashlib.sha256()
for t in engine.module.state_dict().values():
    digest.update(t.detach().cpu().contiguous().numpy().tobytes())
print(f"rank {dist.get_rank()} params {digest.hexdigest()}", flush=True)
