/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * step-app: a GPU program with a step time, for bench/concurrent.
 *
 *   step-app CUBIN MIB          holds MIB MiB of device memory and runs
 *                               steps for ever: each rewrites the next
 *                               1/16 of it with a kernel and waits for it;
 *                               prints "step N ms T" for every step
 *   step-app --d2h MIB          prints the pinned device-to-host bandwidth
 *                               over MIB MiB (4 streams, 4 MiB copies):
 *                               "d2h GB/s X"
 *   step-app --h2d MIB          the same, host to device: "h2d GB/s X"
 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void check(CUresult r, const char *what)
{
	if (r != CUDA_SUCCESS) {
		const char *s = "?";
		cuGetErrorString(r, &s);
		printf("step-app: %s failed: %s\n", what, s);
		exit(2);
	}
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The best of three rounds of copying `bytes` between the device and
 * 4 pinned 4 MiB buffers, one stream each; to_device picks the way. */
static int bandwidth(size_t bytes, int to_device)
{
	CUdeviceptr d;
	void *h;
	const size_t piece = 4u << 20;
	CUstream s[4];
	check(cuMemAlloc(&d, bytes), "cuMemAlloc");
	check(cuMemAllocHost(&h, 4 * piece), "cuMemAllocHost");
	for (int i = 0; i < 4; i++)
		check(cuStreamCreate(&s[i], CU_STREAM_NON_BLOCKING), "cuStreamCreate");
	check(cuMemsetD8(d, 1, bytes), "cuMemsetD8");
	double best = 0;
	for (int round = 0; round < 3; round++) {
		double t0 = now();
		for (size_t at = 0, k = 0; at + piece <= bytes; at += piece, k++)
			check(to_device ? cuMemcpyHtoDAsync(d + at, (char *)h + (k % 4) * piece, piece, s[k % 4])
					: cuMemcpyDtoHAsync((char *)h + (k % 4) * piece, d + at, piece, s[k % 4]),
			      to_device ? "cuMemcpyHtoDAsync" : "cuMemcpyDtoHAsync");
		check(cuCtxSynchronize(), "cuCtxSynchronize");
		double gbs = (double)(bytes / piece * piece) / (now() - t0) / 1e9;
		best = gbs > best ? gbs : best;
	}
	printf("%s GB/s %.1f\n", to_device ? "h2d" : "d2h", best);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: step-app CUBIN MIB | step-app --d2h MIB | step-app --h2d MIB\n");
		return 2;
	}
	size_t bytes = (size_t)strtoull(argv[2], NULL, 10) << 20;
	CUdevice dev;
	CUcontext ctx;
	check(cuInit(0), "cuInit");
	check(cuDeviceGet(&dev, 0), "cuDeviceGet");
	check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
	check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
	if (!strcmp(argv[1], "--d2h") || !strcmp(argv[1], "--h2d"))
		return bandwidth(bytes, !strcmp(argv[1], "--h2d"));
	CUmodule mod;
	CUfunction f;
	CUdeviceptr p;
	check(cuModuleLoad(&mod, argv[1]), "cuModuleLoad");
	check(cuModuleGetFunction(&f, mod, "step"), "cuModuleGetFunction");
	check(cuMemAlloc(&p, bytes), "cuMemAlloc");
	check(cuMemsetD32(p, 0, bytes / 4), "cuMemsetD32");
	setvbuf(stdout, NULL, _IOLBF, 0);
	unsigned long long n = bytes / 4 / 16;
	for (unsigned long long s = 0;; s++) {
		struct timespec wall;
		clock_gettime(CLOCK_REALTIME, &wall);
		double t0 = now();
		CUdeviceptr w = p + (s % 16) * n * 4;
		float k = (float)s;
		void *args[] = { &w, &n, &k };
		check(cuLaunchKernel(f, (unsigned)((n + 255) / 256), 1, 1, 256, 1, 1, 0, NULL, args, NULL), "cuLaunchKernel");
		check(cuCtxSynchronize(), "cuCtxSynchronize");
		printf("step %llu ms %.3f at %lld.%06ld\n", s, (now() - t0) * 1e3, (long long)wall.tv_sec,
		       wall.tv_nsec / 1000);
	}
}
