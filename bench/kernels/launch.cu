/* SPDX-License-Identifier: GPL-2.0-only */
// Kernels for bench/tracer's launch rate: one with no parameters, and one
// with four device pointers, so that speculation has work to do.
extern "C" __global__ void empty() {}

__global__ void four(const float *a, const float *b, float *c, float *d) {}
