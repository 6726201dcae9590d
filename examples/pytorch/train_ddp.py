#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""A small transformer trained with DistributedDataParallel over NCCL.

    torchrun --standalone --nproc_per_node 2 train_ddp.py [--steps N] [--sleep SECONDS]

Each rank trains on its own stream of synthetic tokens (seeded by its
rank); DDP all-reduces the gradients. Rank 0 prints the loss of every step
averaged over the ranks (an all-reduce of its own), exactly (repr of the
float), and at the end a checksum of the parameters: with a fixed seed and
deterministic algorithms two runs agree byte for byte, so a run that was
checkpointed, or restored, can be compared with one that was not. With
--sleep, each rank waits that long after each step.
"""
import argparse
import os
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

VOCAB, SEQ, BATCH, WIDTH, HEADS, LAYERS = 1024, 64, 16, 256, 4, 4


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        layer = nn.TransformerEncoderLayer(WIDTH, HEADS, 4 * WIDTH, dropout=0.0, batch_first=True)
        self.body = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, x):
        return self.head(self.body(self.embed(x)))


def setup():
    """Joins the process group; each rank's GPU, with deterministic math.
    Returns the step count and sleep asked, the rank and its device."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--sleep", type=float, default=0.0)
    args = ap.parse_args()

    dist.init_process_group("nccl")
    rank = dist.get_rank()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return args, rank, dev


def train(model, args, rank, dev):
    """Trains model args.steps steps; rank 0 prints each step's loss,
    averaged over the ranks."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator(device=dev).manual_seed(1000 + rank)
    for step in range(args.steps):
        x = torch.randint(0, VOCAB, (BATCH, SEQ + 1), device=dev, generator=gen)
        logits = model(x[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        if rank == 0:
            print(f"step {step} loss {(mean.item() / dist.get_world_size())!r}", flush=True)
        if args.sleep:
            time.sleep(args.sleep)


def finish(total, rank):
    """Rank 0 prints the parameters' checksum; the group ends."""
    if rank == 0:
        print(f"params {total.item()!r}", flush=True)
    dist.destroy_process_group()


def main():
    args, rank, dev = setup()
    model = DistributedDataParallel(Model().to(dev), device_ids=[dev.index])
    train(model, args, rank, dev)
    with torch.no_grad():
        total = sum(p.double().sum() for p in model.parameters())
    finish(total, rank)


if __name__ == "__main__":
    main()
