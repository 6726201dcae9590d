/* SPDX-License-Identifier: GPL-2.0-only */
// Kernels of the CoW harness (tests/apps/cow_app.c), whose effects the
// harness computes on the host. Their C++ names carry the parameter types
// that speculation reads: mix reads src and writes dst; scatter writes
// through a device-resident array of pointers (T**), which speculation
// cannot follow.

// dst[i] = src[i] * 2654435761 + k + i
__global__ void mix(const unsigned *src, unsigned *dst, unsigned long long n, unsigned k)
{
	unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
	if (i < n)
		dst[i] = src[i] * 2654435761u + k + (unsigned)i;
}

// p[i] = (p[i] ^ (k * 0x9E3779B9)) + i
__global__ void bump(unsigned *p, unsigned long long n, unsigned k)
{
	unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
	if (i < n)
		p[i] = (p[i] ^ (k * 0x9E3779B9u)) + (unsigned)i;
}

// ptrs[j][i] += k + j for every j < nptrs, i < n
__global__ void scatter(unsigned **ptrs, unsigned nptrs, unsigned n, unsigned k)
{
	unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		for (unsigned j = 0; j < nptrs; j++)
			ptrs[j][i] += k + j;
}
