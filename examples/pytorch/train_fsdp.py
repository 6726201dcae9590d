#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""The transformer of train_ddp.py, sharded over the ranks with FSDP
(torch.distributed.fsdp.fully_shard, NCCL).

    torchrun --standalone --nproc_per_node 2 train_fsdp.py [--steps N] [--sleep SECONDS]

Each layer and the whole model are sharded: every step all-gathers the
parameters and reduce-scatters the gradients. Each rank trains on its own
stream of synthetic tokens; rank 0 prints the loss of every step averaged
over the ranks, exactly (repr of the float), and at the end a checksum of
the full parameters, so that a run that was checkpointed or restored can
be compared with one that was not.
"""
from train_ddp import Model, finish, setup, train  # sets up cuBLAS before torch loads

import torch
from torch.distributed.fsdp import fully_shard


def main():
    args, rank, dev = setup()
    model = Model().to(dev)
    for layer in model.body.layers:
        fully_shard(layer)
    fully_shard(model)
    train(model, args, rank, dev)
    with torch.no_grad():
        total = sum(p.full_tensor().double().sum() for p in model.parameters())
    finish(total, rank)


if __name__ == "__main__":
    main()
