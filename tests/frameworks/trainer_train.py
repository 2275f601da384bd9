"""trainer_train.py — a transformers Trainer script as written for GPUs: a
2-layer GPT-2 built from a config (no download), synthetic token data,
TrainingArguments with nothing about devices or backends. Nothing in it knows
about the shim or the CPU.

    torchrun --nproc_per_node 2 trainer_train.py                   (GPUs)
    ncclshim-run --emulate --nproc 2 -- trainer_train.py           (CPU, tests/frameworks/run.sh)

Every rank prints "rank R params SHA256" (its parameters' bytes) at the end,
rank 0 "final loss L" (the mean training loss the Trainer reports).
"""
import argparse
import hashlib
import os
import tempfile

import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=6)
p.add_argument("--accum", type=int, default=1, help="gradient_accumulation_steps (the Trainer's own: no_sync)")
args = p.parse_args()


class Tokens(Dataset):
    """Fixed random token sequences, labels = inputs (causal LM)."""

    def __init__(self, n=256, length=32, vocab=256):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randint(0, vocab, (n, length), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"input_ids": self.x[i], "labels": self.x[i]}


torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=256, n_positions=64))
out = tempfile.mkdtemp(prefix="trainer-")
training_args = TrainingArguments(output_dir=out, max_steps=args.steps, per_device_train_batch_size=8,
                                  learning_rate=1e-3, logging_steps=1, save_strategy="no", report_to=[],
                                  seed=0, data_seed=0, gradient_accumulation_steps=args.accum)
trainer = Trainer(model=model, args=training_args, train_dataset=Tokens())
result = trainer.train()
if trainer.is_world_process_zero():
    print(f"final loss {result.training_loss:.9g}", flush=True)

digest = hashlib.sha256()
for t in trainer.model.state_dict().values():
    digest.update(t.detach().cpu().contiguous().numpy().tobytes())
print(f"rank {int(os.environ.get('RANK', 0))} params {digest.hexdigest()}", flush=True)
