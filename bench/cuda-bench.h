/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * What the bench programs that call the driver directly (h2d-ring,
 * h2d-mapped) share: a driver call checked, a clock, and device 0's
 * primary context made current.
 */
#ifndef PHOS_BENCH_CUDA_BENCH_H
#define PHOS_BENCH_CUDA_BENCH_H

#include <cuda.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* Exits with 2, naming the program, what failed and the driver's reason,
 * unless r is CUDA_SUCCESS. */
static inline void check(CUresult r, const char *what)
{
	if (r != CUDA_SUCCESS) {
		const char *s = "?";
		cuGetErrorString(r, &s);
		fprintf(stderr, "%s: %s failed: %s\n", program_invocation_short_name, what, s);
		exit(2);
	}
}

/* Seconds on the monotonic clock. */
static inline double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Device 0's primary context, made current on this thread (exits on
 * failure). */
static inline CUcontext primary_context(void)
{
	CUdevice dev;
	CUcontext ctx;
	check(cuInit(0), "cuInit");
	check(cuDeviceGet(&dev, 0), "cuDeviceGet");
	check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
	check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
	return ctx;
}

#endif
