#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""PyTorch training fed by a DataLoader with worker processes, as most
training scripts are written: the workers are forked from the CUDA process
(the default start method on Linux) and make the batches on the CPU.

    train_loader.py [--steps N] [--workers W] [--pin-memory] [--sleep S]
                    [--gpu-mib M]

Prints, for every step, a checksum of the batch it trained on and the
loss, exactly (repr of the floats), and at its end a checksum of the
model's parameters, so that two runs can be compared line for line: with fixed seeds and deterministic algorithms they agree, and a
run restored from a checkpoint must go on with the same lines. --gpu-mib
holds that much more device memory (to see how a checkpoint's stall
grows with it).
"""
import argparse
import os
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402


class Synthetic(Dataset):
    """Samples made on the CPU from their index: the same in any worker."""

    def __len__(self):
        return 1 << 20

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        x = torch.randn(512, generator=g)
        y = int(torch.randint(0, 10, (1,), generator=g))
        return x, y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--pin-memory", action="store_true")
    ap.add_argument("--sleep", type=float, default=0.0)
    ap.add_argument("--gpu-mib", type=int, default=0)
    args = ap.parse_args()

    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = "cuda"
    model = torch.nn.Sequential(
        torch.nn.Linear(512, 1024), torch.nn.GELU(),
        torch.nn.Linear(1024, 10),
    ).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ballast = torch.empty(args.gpu_mib << 20, dtype=torch.uint8, device=dev) if args.gpu_mib else None
    loader = DataLoader(Synthetic(), batch_size=64, shuffle=True,
                        generator=torch.Generator().manual_seed(1),
                        num_workers=args.workers, pin_memory=args.pin_memory)
    step = 0
    for x, y in loader:
        if step == args.steps:
            break
        batch = float(x.double().sum())
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        print(f"step {step} batch {batch!r} loss {loss.item()!r}", flush=True)
        step += 1
        if args.sleep:
            time.sleep(args.sleep)
    del ballast
    print(f"params {sum(float(p.double().sum()) for p in model.parameters())!r}", flush=True)


if __name__ == "__main__":
    main()
