#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""A small transformer trained through torch.compile, as the PyTorch
tutorials train with it: the model compiled, its loss backpropagated and
stepped by AdamW outside. Inductor makes Triton kernels of it, which its
static launcher launches.

    torch_compile.py [--mode default|reduce-overhead] [--steps N] [--sleep S]

reduce-overhead replays the compiled forward and backward as CUDA graphs.
So that two runs agree to the last bit: no kernel is chosen by timing
(no autotuning), deterministic algorithms are asked for, and attention is
written out (the fused attention kernels' backward adds atomically)."""
import math
import os

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import steps  # noqa: E402
import torch  # noqa: E402
import torch._inductor.config as inductor  # noqa: E402

args = steps.options(extra=lambda ap: ap.add_argument("--mode", default="default"))
inductor.max_autotune = False
inductor.coordinate_descent_tuning = False
torch.manual_seed(0)
torch.use_deterministic_algorithms(True)
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = "cuda"


class Block(torch.nn.Module):
    def __init__(self, d=256, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(d // self.heads)
        att = att.masked_fill(torch.ones(t, t, device=x.device, dtype=torch.bool).triu(1), float("-inf"))
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.mlp(self.ln2(x))


class Net(torch.nn.Module):
    def __init__(self, vocab=512, d=256, layers=2):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, d)
        self.blocks = torch.nn.Sequential(*[Block(d) for _ in range(layers)])
        self.head = torch.nn.Linear(d, vocab)

    def forward(self, t):
        return self.head(self.blocks(self.emb(t)))


model = Net().to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
compiled = torch.compile(model, mode=None if args.mode == "default" else args.mode)
g = torch.Generator(device=dev).manual_seed(1)
for i in range(args.steps):
    x = torch.randint(0, 512, (16, 64), device=dev, generator=g)
    y = torch.roll(x, 1, dims=1)
    if args.mode == "reduce-overhead":
        torch.compiler.cudagraph_mark_step_begin()
    logits = compiled(x)
    loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    steps.step(i, loss.item(), sleep=args.sleep)
steps.params(sum(float(p.double().sum()) for p in model.parameters()))
