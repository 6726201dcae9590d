#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""A training loop whose device memory is one pool, for bench/pool-cow:
each step prints "step N ms T at S", as bench/step-app does (T the step's
milliseconds, the device synchronised; S its start, the wall clock's
seconds).

    pool-steps.py jax    an MLP trained with optax; XLA preallocates its
                         pool (XLA_PYTHON_CLIENT_MEM_FRACTION, default
                         0.1 here) and every kernel writes into it
    pool-steps.py torch GIB
                         a stack of 8192x8192 layers trained with AdamW,
                         about GIB GiB of weights, gradients and optimizer
                         state in PyTorch's caching allocator

It runs until it is killed."""
import os
import sys
import time

for _k, _v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
               ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(_k, _v)


def report(i, t0, wall, sync):
    sync()
    print("step %d ms %.3f at %.6f" % (i, (time.monotonic() - t0) * 1e3, wall), flush=True)


def jax_loop():
    os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.1")
    import jax
    import jax.numpy as jnp
    import optax

    key = jax.random.PRNGKey(0)
    k1, k2, k3 = jax.random.split(key, 3)
    params = {"w1": jax.random.normal(k1, (4096, 4096)) * 0.02, "b1": jnp.zeros(4096),
              "w2": jax.random.normal(k2, (4096, 4096)) * 0.02, "b2": jnp.zeros(4096)}
    opt = optax.adamw(1e-4)
    state = opt.init(params)

    def loss_fn(p, x):
        h = jax.nn.gelu(x @ p["w1"] + p["b1"])
        return jnp.mean((h @ p["w2"] + p["b2"] - x) ** 2)

    @jax.jit
    def train_step(p, s, x):
        loss, grads = jax.value_and_grad(loss_fn)(p, x)
        updates, s = opt.update(grads, s, p)
        return optax.apply_updates(p, updates), s, loss

    x = jax.random.normal(k3, (1024, 4096))
    loss = None
    for i in range(1 << 62):
        wall, t0 = time.time(), time.monotonic()
        params, state, loss = train_step(params, state, x)
        report(i, t0, wall, loss.block_until_ready)


def torch_loop(gib):
    import torch

    layers = max(1, int(gib))  # 8192^2 fp32: 256 MiB of weights, 1 GiB with grads and AdamW's state
    model = torch.nn.Sequential(*[torch.nn.Linear(8192, 8192, bias=False) for _ in range(layers)]).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    x = torch.randn(256, 8192, device="cuda")
    for i in range(1 << 62):
        wall, t0 = time.time(), time.monotonic()
        opt.zero_grad(set_to_none=False)
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        report(i, t0, wall, torch.cuda.synchronize)


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "jax":
        jax_loop()
    elif len(sys.argv) >= 3 and sys.argv[1] == "torch":
        torch_loop(float(sys.argv[2]))
    else:
        sys.exit(__doc__)
