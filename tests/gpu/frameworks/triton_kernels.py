#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""Kernels written with @triton.jit and launched by Triton's own launcher:
a fused update of a state vector, and a reduction of it each step.

    triton_kernels.py [--steps N] [--sleep S]"""
import steps
import torch
import triton
import triton.language as tl

args = steps.options()


@triton.jit
def update(x_ptr, w_ptr, out_ptr, n, t, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    x = tl.load(x_ptr + i, mask=m)
    w = tl.load(w_ptr + i, mask=m)
    tl.store(out_ptr + i, x * 0.999 + tl.sin(w * t) * 0.01, mask=m)


@triton.jit
def partial_sums(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    i = pid * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + pid, tl.sum(tl.load(x_ptr + i, mask=i < n, other=0.0), axis=0))


n, block = 1 << 22, 1024
g = torch.Generator(device="cuda").manual_seed(0)
x = torch.rand(n, device="cuda", generator=g)
w = torch.rand(n, device="cuda", generator=g)
y = torch.empty_like(x)
sums = torch.empty(triton.cdiv(n, block), device="cuda")
for i in range(args.steps):
    update[(triton.cdiv(n, block),)](x, w, y, n, float(i), BLOCK=block)
    x, y = y, x
    partial_sums[(triton.cdiv(n, block),)](x, sums, n, BLOCK=block)
    steps.step(i, float(sums.double().sum()), sleep=args.sleep)
steps.params(float(x.double().sum()))
