/* SPDX-License-Identifier: GPL-2.0-only */
// Fill and check a position-dependent pattern, so that bytes that moved
// are found as well as bytes that changed.
__device__ unsigned pattern(unsigned long long i, unsigned seed)
{
	unsigned long long x = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
	return (unsigned)(x ^ (x >> 29));
}

extern "C" __global__ void fill(unsigned *p, unsigned long long n, unsigned seed)
{
	for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
	     i += (unsigned long long)gridDim.x * blockDim.x)
		p[i] = pattern(i, seed);
}

extern "C" __global__ void check(const unsigned *p, unsigned long long n, unsigned seed, unsigned long long *bad)
{
	unsigned long long mine = 0;
	for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
	     i += (unsigned long long)gridDim.x * blockDim.x)
		mine += p[i] != pattern(i, seed);
	if (mine)
		atomicAdd(bad, mine);
}
