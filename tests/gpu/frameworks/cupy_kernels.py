#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""CuPy as people use it: arrays from its memory pool (which keeps freed
blocks for reuse) and a RawKernel compiled by NVRTC at run time.

    cupy_kernels.py [--steps N] [--sleep S] [--managed]

--managed takes the pool's memory from cudaMallocManaged instead, which
phos cannot park: such a process is stop-only."""
import steps
import cupy as cp

args = steps.options(extra=lambda ap: ap.add_argument("--managed", action="store_true"))
if args.managed:
    cp.cuda.set_allocator(cp.cuda.MemoryPool(cp.cuda.malloc_managed).malloc)
saxpy = cp.RawKernel(r'''
extern "C" __global__ void saxpy(float a, const float *x, float *y, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i] * 0.5f;
}''', "saxpy")
n = 1 << 22
rs = cp.random.RandomState(0)
x = rs.rand(n, dtype=cp.float32)
y = cp.zeros(n, dtype=cp.float32)
for i in range(args.steps):
    tmp = cp.sqrt(x + float(i))          # pool blocks freed and reused each step
    saxpy(((n + 255) // 256,), (256,), (cp.float32(0.001), tmp, y, cp.uint32(n)))
    steps.step(i, float(y.astype(cp.float64).sum()), sleep=args.sleep)
steps.params(float(y.astype(cp.float64).sum()))
