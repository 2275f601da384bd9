"""accelerate_train.py — a training script written for GPUs with Hugging Face
accelerate, as its users write one (Accelerator(), prepare, backward): nothing
in it knows about the shim or the CPU.

    accelerate launch --num_processes 2 accelerate_train.py       (GPUs)
    ncclshim-run --emulate --nproc 2 -- accelerate_train.py       (CPU, tests/t/83-frameworks.sh)

A small MLP on a fixed synthetic regression task, --steps optimizer steps.
--accum N: N micro-batches per optimizer step, as accelerate's users write
it (Accelerator(gradient_accumulation_steps=N) and accelerator.accumulate:
DDP syncs the last of each N only); --naive N: N backward passes per
optimizer step in a plain loop (DDP syncs every pass: what
NCCLSHIM_ACCUM_STEPS is for).
Every rank prints "rank R params SHA256" (its parameters' bytes) at the end,
so that a test can see that the replicas are identical; rank 0 prints
"step K loss L" per step and "final loss L" (the last step's).
"""
import argparse
import hashlib

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=6)
p.add_argument("--width", type=int, default=256)
p.add_argument("--accum", type=int, default=1)
p.add_argument("--naive", type=int, default=1)
args = p.parse_args()

accelerator = Accelerator(gradient_accumulation_steps=args.accum)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, args.width), torch.nn.ReLU(), torch.nn.Linear(args.width, args.width),
                            torch.nn.ReLU(), torch.nn.Linear(args.width, 1))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
g = torch.Generator().manual_seed(1)
x = torch.randn(512, 64, generator=g)
y = x[:, :8].sum(dim=1, keepdim=True) + 0.1 * torch.randn(512, 1, generator=g)
loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True, generator=torch.Generator().manual_seed(2))
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

step = micro = 0
while step < args.steps:
    for xb, yb in loader:
        if args.accum > 1:  # accelerate's way: no_sync but on the last micro-batch of each step
            with accelerator.accumulate(model):
                loss = F.mse_loss(model(xb), yb)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
            stepped = accelerator.sync_gradients
        else:  # a plain loop: every backward syncs; the optimizer steps every --naive passes
            loss = F.mse_loss(model(xb), yb) / args.naive
            accelerator.backward(loss)
            micro += 1
            stepped = micro % args.naive == 0
            if stepped:
                optimizer.step()
                optimizer.zero_grad()
        if not stepped:
            continue
        accelerator.print(f"step {step} loss {loss.item():.6f}")
        step += 1
        if step == args.steps:
            break

accelerator.wait_for_everyone()
accelerator.print(f"final loss {loss.item():.9g}")
digest = hashlib.sha256()
for t in accelerator.unwrap_model(model).state_dict().values():
    digest.update(t.detach().cpu().contiguous().numpy().tobytes())
print(f"rank {accelerator.process_index} params {digest.hexdigest()}", flush=True)
