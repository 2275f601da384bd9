"""lightning_train.py — a PyTorch Lightning script as its users write one for
DDP on CPUs: a LightningModule, Trainer(strategy="ddp", accelerator="cpu",
devices=N). Nothing in it knows about the shim. (Lightning's own CPU DDP asks
for gloo; a GPU script says accelerator="gpu", which needs a GPU, and
devices="auto" counts one CPU device.)

    torchrun --nproc_per_node 2 lightning_train.py --devices 2                 (CPUs, gloo)
    ncclshim-run --emulate --nproc 2 -- lightning_train.py --devices 2         (tests/frameworks/run.sh)

Every rank prints "rank R params SHA256" (its parameters' bytes) at the end,
rank 0 "final loss L" (the last step's, averaged over the ranks by sync_dist).
"""
import argparse
import hashlib

import lightning as L
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=6)
p.add_argument("--devices", type=int, default=2)
p.add_argument("--accum", type=int, default=1, help="accumulate_grad_batches (Lightning's own: no_sync)")
args = p.parse_args()


class Regression(L.LightningModule):
    def __init__(self, width=256):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(64, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
                                       torch.nn.ReLU(), torch.nn.Linear(width, 1))

    def training_step(self, batch, _):
        x, y = batch
        loss = F.mse_loss(self.net(x), y)
        self.log("loss", loss, sync_dist=True, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


L.seed_everything(0)
g = torch.Generator().manual_seed(1)
x = torch.randn(512, 64, generator=g)
y = x[:, :8].sum(dim=1, keepdim=True)
model = Regression()
trainer = L.Trainer(strategy="ddp", accelerator="cpu", devices=args.devices, max_steps=args.steps, logger=False, enable_checkpointing=False,
                    accumulate_grad_batches=args.accum,
                    enable_progress_bar=False, enable_model_summary=False)
trainer.fit(model, DataLoader(TensorDataset(x, y), batch_size=32))
if trainer.is_global_zero:
    print(f"final loss {trainer.callback_metrics['loss'].item():.9g}", flush=True)

digest = hashlib.sha256()
for t in model.state_dict().values():
    digest.update(t.detach().cpu().contiguous().numpy().tobytes())
print(f"rank {trainer.global_rank} params {digest.hexdigest()}", flush=True)
