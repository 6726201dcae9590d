/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A VMM allocation exported as a POSIX fd and imported by a second process
 * maps the same bytes there, in both directions; an allocation made without
 * the POSIX fd handle type cannot be exported.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda.h>

#include "tap.h"

#define SIZE (4u << 20)

static void check(CUresult r, const char *what)
{
	if (r != CUDA_SUCCESS)
		bail("%s failed: %d", what, (int)r);
}

static CUdeviceptr map_handle(CUmemGenericAllocationHandle h)
{
	CUdeviceptr va;
	CUmemAccessDesc acc = { .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
				.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	check(cuMemAddressReserve(&va, SIZE, 0, 0, 0), "cuMemAddressReserve");
	check(cuMemMap(va, SIZE, 0, h, 0), "cuMemMap");
	check(cuMemSetAccess(va, SIZE, &acc, 1), "cuMemSetAccess");
	return va;
}

static void init(CUcontext *ctx)
{
	CUdevice dev;
	check(cuInit(0), "cuInit");
	check(cuDeviceGet(&dev, 0), "cuDeviceGet");
	check(cuDevicePrimaryCtxRetain(ctx, dev), "cuDevicePrimaryCtxRetain");
	check(cuCtxSetCurrent(*ctx), "cuCtxSetCurrent");
}

static uint8_t pattern(size_t i, unsigned seed)
{
	return (uint8_t)((i * 2654435761u) >> 13 ^ seed);
}

/* The second process: imports fd, checks pattern 1, writes pattern 2. */
static int child(int fd)
{
	CUcontext ctx;
	CUmemGenericAllocationHandle h;
	init(&ctx);
	if (cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
		return 10;
	CUdeviceptr va = map_handle(h);
	uint8_t *buf = malloc(SIZE);
	if (!buf || cuMemcpyDtoH(buf, va, SIZE))
		return 11;
	for (size_t i = 0; i < SIZE; i++)
		if (buf[i] != pattern(i, 1))
			return 12;
	for (size_t i = 0; i < SIZE; i++)
		buf[i] = pattern(i, 2);
	if (cuMemcpyHtoD(va, buf, SIZE))
		return 13;
	free(buf);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "child") == 0)
		return child(atoi(argv[2]));

	plan(6);
	CUcontext ctx;
	init(&ctx);

	CUmemAllocationProp prop = {
		.type = CU_MEM_ALLOCATION_TYPE_PINNED,
		.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
		.location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
	};
	CUmemGenericAllocationHandle h;
	check(cuMemCreate(&h, SIZE, &prop, 0), "cuMemCreate");
	CUdeviceptr va = map_handle(h);

	uint8_t *buf = malloc(SIZE);
	for (size_t i = 0; i < SIZE; i++)
		buf[i] = pattern(i, 1);
	check(cuMemcpyHtoD(va, buf, SIZE), "cuMemcpyHtoD");

	int fd = -1;
	ok(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) == CUDA_SUCCESS &&
		   fd >= 0,
	   "the allocation exports as a POSIX fd");

	pid_t pid = fork();
	if (pid == 0) {
		char fds[16];
		snprintf(fds, sizeof(fds), "%d", fd);
		execl("/proc/self/exe", argv[0], "child", fds, (char *)NULL);
		_exit(127);
	}
	int status = 0;
	waitpid(pid, &status, 0);
	ok(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	   "a second process imports the fd and reads the same bytes (exit status %d)",
	   WIFEXITED(status) ? WEXITSTATUS(status) : -1);

	check(cuMemcpyDtoH(buf, va, SIZE), "cuMemcpyDtoH");
	size_t bad = 0;
	for (size_t i = 0; i < SIZE; i++)
		bad += buf[i] != pattern(i, 2);
	ok(bad == 0, "its writes are seen here (%zu bytes differ)", bad);

	/* Unmapping and releasing here leaves the memory alive behind the fd. */
	check(cuMemUnmap(va, SIZE), "cuMemUnmap");
	check(cuMemRelease(h), "cuMemRelease");
	CUmemGenericAllocationHandle h2;
	check(cuMemImportFromShareableHandle(&h2, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
	      "cuMemImportFromShareableHandle");
	CUmemAccessDesc acc = { .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
				.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	check(cuMemMap(va, SIZE, 0, h2, 0), "cuMemMap again");
	check(cuMemSetAccess(va, SIZE, &acc, 1), "cuMemSetAccess again");
	check(cuMemcpyDtoH(buf, va, SIZE), "cuMemcpyDtoH");
	bad = 0;
	for (size_t i = 0; i < SIZE; i++)
		bad += buf[i] != pattern(i, 2);
	ok(bad == 0, "released and re-imported from the fd, the bytes are intact at the same VA");

	prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
	CUmemGenericAllocationHandle h3;
	int fd3 = -1;
	check(cuMemCreate(&h3, SIZE, &prop, 0), "cuMemCreate without fd type");
	ok(cuMemExportToShareableHandle(&fd3, h3, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) ==
		   CUDA_ERROR_INVALID_VALUE,
	   "an allocation created without the POSIX fd type does not export");

	CUmemGenericAllocationHandle bogus;
	int notmem = dup(0);
	ok(cuMemImportFromShareableHandle(&bogus, (void *)(intptr_t)notmem, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) ==
		   CUDA_ERROR_INVALID_VALUE,
	   "an fd that is not device memory does not import");
	close(notmem);

	cuMemRelease(h3);
	cuMemUnmap(va, SIZE);
	cuMemRelease(h2);
	cuMemAddressFree(va, SIZE);
	close(fd);
	free(buf);
	cuDevicePrimaryCtxRelease(0);
	return done();
}
