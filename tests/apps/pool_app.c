/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * pool_app: a program that keeps its device memory in one arena, as XLA
 * and PyTorch's caching allocator do, for the tests of the CoW shadow
 * pool: every write of a step is a write to the whole arena, and each
 * step also allocates memory of its own for a moment.
 *
 *   pool_app MIB GROW_MIB
 *
 * Each step writes the whole arena of MIB MiB with the step's byte (one
 * cuMemsetD8), then allocates GROW_MIB MiB more (cuMemAlloc), sets it and
 * frees it. An allocation that fails ends it: "step N: cuMemAlloc of
 * GROW_MIB MiB failed: ERROR", exit 1. It prints "ops N" every 100 steps.
 *
 * On SIGUSR1 it copies the arena to the host and checks that every byte
 * is the last step's, printing "verify ok ops N" or "verify FAILED at
 * OFFSET: V, not W". Its step counter is host memory, checkpointed with
 * the arena, so a restored copy checks the image's arena against it.
 *
 * With $POOL_APP_STEPS set it also prints every step as bench/step-app
 * does, "step N ms T at S" (T its milliseconds, S its start, the wall
 * clock's seconds), for bench/pool-cow.
 *
 * It uses the driver API alone: it runs on a GPU and on simcuda.
 */
#include <cuda.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define APP_NAME "pool_app"
#include "app.h"

/* Copies the arena out and compares every byte with want. */
static void verify(CUdeviceptr arena, size_t bytes, unsigned char want, unsigned char *host, unsigned long step)
{
	check(cuMemcpyDtoH(host, arena, bytes), "cuMemcpyDtoH");
	for (size_t i = 0; i < bytes; i++) {
		if (host[i] != want) {
			printf("verify FAILED at %zu: %u, not %u (ops %lu)\n", i, host[i], want, step);
			return;
		}
	}
	printf("verify ok ops %lu\n", step);
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: pool_app MIB GROW_MIB\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	size_t bytes = (size_t)strtoull(argv[1], NULL, 10) << 20;
	size_t grow = (size_t)strtoull(argv[2], NULL, 10) << 20;
	signal(SIGUSR1, on_usr1);
	CUdevice dev;
	CUcontext ctx;
	check(cuInit(0), "cuInit");
	check(cuDeviceGet(&dev, 0), "cuDeviceGet");
	check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
	check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
	CUdeviceptr arena;
	check(cuMemAlloc(&arena, bytes), "cuMemAlloc of the arena");
	unsigned char *host = malloc(bytes);
	if (!host)
		return 2;
	unsigned char last = 0;
	check(cuMemsetD8(arena, last, bytes), "cuMemsetD8");
	bool steps = getenv("POOL_APP_STEPS") != NULL;
	for (unsigned long step = 1;; step++) {
		struct timespec wall, t0, t1;
		clock_gettime(CLOCK_REALTIME, &wall);
		clock_gettime(CLOCK_MONOTONIC, &t0);
		if (verify_asked) {
			verify_asked = 0;
			verify(arena, bytes, last, host, step);
		}
		last = (unsigned char)(step * 7 + 1);
		check(cuMemsetD8(arena, last, bytes), "cuMemsetD8");
		if (grow) {
			CUdeviceptr g;
			CUresult r = cuMemAlloc(&g, grow);
			if (r != CUDA_SUCCESS) {
				const char *s = "?";
				cuGetErrorString(r, &s);
				printf("step %lu: cuMemAlloc of %zu MiB failed: %s\n", step, grow >> 20, s);
				return 1;
			}
			check(cuMemsetD8(g, last, grow), "cuMemsetD8");
			check(cuMemFree(g), "cuMemFree");
		}
		check(cuCtxSynchronize(), "cuCtxSynchronize");
		clock_gettime(CLOCK_MONOTONIC, &t1);
		if (steps)
			printf("step %lu ms %.3f at %lld.%06ld\n", step,
			       (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6,
			       (long long)wall.tv_sec, wall.tv_nsec / 1000);
		if (step % 100 == 0)
			printf("ops %lu\n", step);
		struct timespec ts = { 0, 2000000 };
		nanosleep(&ts, NULL);
	}
}
