#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""A small PyTorch training loop: an MLP on synthetic data, AdamW.

    train_mlp.py [--steps N] [--time] [--sleep SECONDS] [--split]

Prints the loss of every step exactly (repr of the float), so that two runs
can be compared byte for byte: with a fixed seed and deterministic
algorithms they must agree. With --time, prints the median step time
instead (after warm-up). With --sleep, waits that long after each step
(to give a checkpoint time to land in the middle of the run). With --split,
the model is split over two GPUs: its first layer on cuda:0, the rest on
cuda:1 (model parallel), its activations copied between them.
"""
import argparse
import os
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--time", action="store_true")
    ap.add_argument("--width", type=int, default=2048)
    ap.add_argument("--sleep", type=float, default=0.0)
    ap.add_argument("--split", action="store_true")
    args = ap.parse_args()

    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_tf32 = False
    dev, out_dev = ("cuda:0", "cuda:1") if args.split else ("cuda", "cuda")
    w = args.width
    first = torch.nn.Sequential(torch.nn.Linear(512, w), torch.nn.GELU()).to(dev)
    rest = torch.nn.Sequential(
        torch.nn.Linear(w, w), torch.nn.GELU(),
        torch.nn.Linear(w, 10),
    ).to(out_dev)

    def model(inp):
        return rest(first(inp).to(out_dev))

    opt = torch.optim.AdamW(list(first.parameters()) + list(rest.parameters()), lr=1e-3)
    x = torch.randn(1024, 512, device=dev)
    y = torch.randint(0, 10, (1024,), device=out_dev)
    times = []
    for step in range(args.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if args.time:
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        else:
            print(f"step {step} loss {loss.item()!r}", flush=True)
        if args.sleep:
            time.sleep(args.sleep)
    if args.time:
        times = sorted(times[10:])
        print(f"median step {times[len(times) // 2] * 1e3:.4f} ms")


if __name__ == "__main__":
    main()
