/* SPDX-License-Identifier: GPL-2.0-only */
// A cuBLAS SGEMM program: C = A B for 1024x1024 matrices, checked against
// a double-precision product on the host.
#include <cmath>
#include <cstdio>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "tap.h"

int main()
{
	int count = 0;
	if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0)
		skip_all("no CUDA device");
	plan(2);
	const int n = 1024;
	std::vector<float> a(n * n), b(n * n), c(n * n);
	unsigned x = 12345;
	for (int i = 0; i < n * n; i++) {
		x = x * 1664525u + 1013904223u;
		a[i] = (float)((x >> 8) % 1000) / 500.0f - 1.0f;
		x = x * 1664525u + 1013904223u;
		b[i] = (float)((x >> 8) % 1000) / 500.0f - 1.0f;
	}
	float *da, *db, *dc;
	cudaMalloc(&da, n * n * 4);
	cudaMalloc(&db, n * n * 4);
	cudaMalloc(&dc, n * n * 4);
	cudaMemcpy(da, a.data(), n * n * 4, cudaMemcpyHostToDevice);
	cudaMemcpy(db, b.data(), n * n * 4, cudaMemcpyHostToDevice);
	cublasHandle_t h;
	const float one = 1.0f, zero = 0.0f;
	bool ran = cublasCreate(&h) == CUBLAS_STATUS_SUCCESS &&
		   cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, da, n, db, n, &zero, dc, n) ==
			   CUBLAS_STATUS_SUCCESS &&
		   cudaDeviceSynchronize() == cudaSuccess;
	ok(ran, "cublasSgemm runs");
	cudaMemcpy(c.data(), dc, n * n * 4, cudaMemcpyDeviceToHost);
	double num = 0, den = 0;
	for (int i = 0; i < n; i += 7) { // column-major: c[i + j n] = sum_k a[i + k n] b[k + j n]
		for (int j = 0; j < n; j += 13) {
			double ref = 0;
			for (int k = 0; k < n; k++)
				ref += (double)a[i + k * n] * b[k + j * n];
			num += (c[i + j * n] - ref) * (c[i + j * n] - ref);
			den += ref * ref;
		}
	}
	double rel = sqrt(num / den);
	ok(ran && rel < 1e-3, "its product matches a double-precision reference (relative error %.2e)", rel);
	cublasDestroy(h);
	cudaFree(da);
	cudaFree(db);
	cudaFree(dc);
	return done();
}
