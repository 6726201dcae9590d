/* SPDX-License-Identifier: GPL-2.0-only */
// A CUDA C program built on the build machine (static cudart, sm_90) runs
// on the GPU machine and computes the right result.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda_runtime.h>

#include "tap.h"

__global__ void saxpy(float a, const float *x, float *y, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		y[i] = a * x[i] + y[i];
}

int main()
{
	int count = 0;
	if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0)
		skip_all("no CUDA device");
	plan(2);
	cudaDeviceProp prop;
	cudaGetDeviceProperties(&prop, 0);
	int drv = 0;
	cudaDriverGetVersion(&drv);
	diag("device 0: %s, compute capability %d.%d, driver API %d", prop.name, prop.major, prop.minor, drv);

	const int n = 1 << 24;
	std::vector<float> x(n), y(n);
	for (int i = 0; i < n; i++) {
		x[i] = (float)(i % 1000) * 0.25f;
		y[i] = (float)(i % 7);
	}
	float *dx = nullptr, *dy = nullptr;
	bool ran = cudaMalloc(&dx, n * sizeof(float)) == cudaSuccess &&
		   cudaMalloc(&dy, n * sizeof(float)) == cudaSuccess &&
		   cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess &&
		   cudaMemcpy(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess;
	if (ran) {
		saxpy<<<(n + 255) / 256, 256>>>(2.0f, dx, dy, n);
		ran = cudaGetLastError() == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess;
	}
	ok(ran, "a kernel launches and completes (%s)", cudaGetErrorString(cudaGetLastError()));
	std::vector<float> out(n);
	cudaMemcpy(out.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost);
	long wrong = 0;
	for (int i = 0; i < n; i++)
		wrong += out[i] != 2.0f * x[i] + y[i];
	ok(ran && wrong == 0, "saxpy over %d floats is exact (%ld wrong)", n, wrong);
	cudaFree(dx);
	cudaFree(dy);
	return done();
}
