# SPDX-License-Identifier: GPL-2.0-only
"""What the framework programs of the GPU matrix share: their options and
how they print. Each program prints one line per step, exactly (repr of
the floats), then a "params" line with a checksum of its state, so that
two runs compare line for line: the untraced run, the run under
`phos run`, and every run restored from one of its checkpoints.

    PROGRAM [--steps N] [--sleep S]

--sleep S waits S seconds after each step, so that a checkpoint lands
in the middle of the run.
"""
import argparse
import os
import sys
import time

# Kept off in every job on the GPU machines (NVLink multicast).
for _k, _v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
               ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(_k, _v)


def options(steps=150, sleep=0.05, extra=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=steps)
    ap.add_argument("--sleep", type=float, default=sleep)
    if extra:
        extra(ap)
    return ap.parse_args()


def step(i, *values, sleep=0.0):
    print("step", i, *(repr(v) for v in values), flush=True)
    if sleep:
        time.sleep(sleep)


def params(value):
    print("params", repr(value), flush=True)
    sys.stdout.flush()
