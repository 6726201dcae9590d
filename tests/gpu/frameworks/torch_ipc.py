#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""CUDA tensors and events handed between processes by
torch.multiprocessing (spawn), as RL frameworks, inference servers and
data pipelines do: the parent makes each step's tensor on the GPU and
puts it on a queue (CUDA IPC: the child maps the parent's memory); the
child sums it on the GPU, and records an interprocess event after its
own kernel, which the parent waits for before it reads the child's
result from a tensor the child shared back once.

    torch_ipc.py [--steps N] [--sleep S]"""
import steps
import torch
import torch.multiprocessing as mp


def child(inq, outq):
    torch.cuda.set_device(0)
    acc = torch.zeros(1024, device="cuda", dtype=torch.float64)
    done = torch.cuda.Event(interprocess=True)
    outq.put((acc, done.ipc_handle()))      # shared back once
    while True:
        item = inq.get()
        if item is None:
            break
        i, t = item
        acc += t.double().view(1024, -1).sum(1) * (i + 1)
        done.record()
        outq.put(i)
        del t


def main():
    args = steps.options()
    ctx = mp.get_context("spawn")
    inq, outq = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=child, args=(inq, outq))
    p.start()
    acc, handle = outq.get()
    done = torch.cuda.Event.from_ipc_handle(torch.cuda.current_device(), handle)
    g = torch.Generator(device="cuda").manual_seed(0)
    kept = []
    for i in range(args.steps):
        t = torch.rand(1 << 20, device="cuda", generator=g)
        kept.append(t)                       # alive until the child is done with it
        inq.put((i, t))
        assert outq.get() == i
        done.wait()                          # the child's kernel, ordered on our stream
        steps.step(i, float(acc.sum()), sleep=args.sleep)
        if len(kept) > 4:
            kept.pop(0)
    inq.put(None)
    p.join()
    steps.params(float(acc.sum()))


if __name__ == "__main__":
    main()
