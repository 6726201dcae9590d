#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""PyTorch training with the stream-ordered allocator
(PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync: cudaMallocAsync and
the device's memory pool instead of PyTorch's caching allocator).

    torch_async_alloc.py [--steps N] [--sleep S]"""
import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "backend:cudaMallocAsync"
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import steps  # noqa: E402
import torch  # noqa: E402

args = steps.options()
torch.manual_seed(0)
torch.use_deterministic_algorithms(True)
torch.backends.cuda.matmul.allow_tf32 = False
assert torch.cuda.get_allocator_backend() == "cudaMallocAsync"
model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 10)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
g = torch.Generator(device="cuda").manual_seed(1)
for i in range(args.steps):
    x = torch.randn(256, 512, device="cuda", generator=g)
    y = torch.randint(0, 10, (256,), device="cuda", generator=g)
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    steps.step(i, loss.item(), sleep=args.sleep)
steps.params(sum(float(p.double().sum()) for p in model.parameters()))
