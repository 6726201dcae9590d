/* SPDX-License-Identifier: GPL-2.0-only */
// Kernels for the simcuda tests. nvcc builds them into a cubin, a fatbin
// and PTX; the tests register host implementations under the same names.

// _Z3addPKfS0_Pfi: c = a + b
__global__ void add(const float *a, const float *b, float *c, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		c[i] = a[i] + b[i];
}

// fill: p[i] = v, with mixed parameter sizes (8, 4, 8 bytes)
extern "C" __global__ void fill(unsigned *p, unsigned v, unsigned long long n)
{
	unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
	if (i < n)
		p[i] = v;
}

// no host implementation is registered for this one
extern "C" __global__ void orphan(int *p)
{
	*p = 1;
}
