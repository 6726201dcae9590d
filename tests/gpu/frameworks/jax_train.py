#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""An MLP trained with JAX and optax, XLA's pool preallocated as JAX does
by default (its fraction is XLA_PYTHON_CLIENT_MEM_FRACTION's, which the
matrix sets to what its store can hold), with XLA's deterministic ops.

    jax_train.py [--steps N] [--sleep S]"""
import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_gpu_deterministic_ops=true").strip()
import steps  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402

args = steps.options()
key = jax.random.PRNGKey(0)
k1, k2, k3 = jax.random.split(key, 3)
params = {"w1": jax.random.normal(k1, (512, 1024)) * 0.02, "b1": jnp.zeros(1024),
          "w2": jax.random.normal(k2, (1024, 10)) * 0.02, "b2": jnp.zeros(10)}
opt = optax.adamw(1e-3)
state = opt.init(params)


def loss_fn(p, x, y):
    h = jax.nn.gelu(x @ p["w1"] + p["b1"])
    logits = h @ p["w2"] + p["b2"]
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


@jax.jit
def train_step(p, s, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(p, x, y)
    updates, s = opt.update(grads, s, p)
    return optax.apply_updates(p, updates), s, loss


for i in range(args.steps):
    kx, ky = jax.random.split(jax.random.fold_in(k3, i))
    x = jax.random.normal(kx, (256, 512))
    y = jax.random.randint(ky, (256,), 0, 10)
    params, state, loss = train_step(params, state, x, y)
    steps.step(i, float(loss), sleep=args.sleep)
steps.params(sum(float(jnp.sum(v)) for v in jax.tree_util.tree_leaves(params)))
