/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * launch-rate: kernel launches per second through the driver API.
 *
 *   launch-rate CUBIN [LAUNCHES]
 *
 * Prints "empty RATE" and "four RATE" (launches/s): the median of 5 runs of
 * LAUNCHES launches (default 200000) of a kernel with no parameters, and of
 * one with four device pointers (two const), on one stream.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cuda.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

#define CHECK(call)                                                           \
	do {                                                                  \
		CUresult r_ = (call);                                         \
		if (r_) {                                                     \
			fprintf(stderr, "launch-rate: %s failed: %d\n", #call, (int)r_); \
			exit(1);                                              \
		}                                                             \
	} while (0)

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: launch-rate CUBIN [LAUNCHES]\n");
		return 2;
	}
	int launches = argc > 2 ? atoi(argv[2]) : 200000;
	CUdevice dev;
	CUcontext ctx;
	CUmodule mod;
	CUfunction fn[2];
	CUstream s;
	CHECK(cuInit(0));
	CHECK(cuDeviceGet(&dev, 0));
	CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CHECK(cuCtxSetCurrent(ctx));
	CHECK(cuModuleLoad(&mod, argv[1]));
	CHECK(cuModuleGetFunction(&fn[0], mod, "empty"));
	CHECK(cuModuleGetFunction(&fn[1], mod, "_Z4fourPKfS0_PfS1_"));
	CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CUdeviceptr p[4];
	for (int i = 0; i < 4; i++)
		CHECK(cuMemAlloc(&p[i], 1u << 20));
	void *args[] = { &p[0], &p[1], &p[2], &p[3] };
	const char *names[] = { "empty", "four" };
	for (int k = 0; k < 2; k++) {
		double rates[5];
		for (int rep = 0; rep < 6; rep++) {
			double t0 = now();
			for (int i = 0; i < launches; i++)
				CHECK(cuLaunchKernel(fn[k], 1, 1, 1, 1, 1, 1, 0, s, k ? args : NULL, NULL));
			CHECK(cuStreamSynchronize(s));
			if (rep) /* the first is a warm-up */
				rates[rep - 1] = launches / (now() - t0);
		}
		qsort(rates, 5, sizeof(rates[0]), cmp);
		printf("%s %.0f\n", names[k], rates[2]);
	}
	return 0;
}
