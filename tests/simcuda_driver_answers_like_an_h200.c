/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * simcuda answers device queries like an H200, resolves entry points by
 * version through cuGetProcAddress as the driver does, keeps cuMemGetInfo
 * truthful, and answers a call it does not implement with
 * CUDA_ERROR_NOT_SUPPORTED and one log line naming it.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>

#include "tap.h"

static void check(CUresult r, const char *what)
{
	if (r != CUDA_SUCCESS)
		bail("%s failed: %d", what, (int)r);
}

static int attr(CUdevice_attribute a)
{
	int v = -1;
	cuDeviceGetAttribute(&v, a, 0);
	return v;
}

/* Whether cuGetProcAddress(name, version, flags) gives the symbol `want`. */
static int resolves(const char *name, int version, cuuint64_t flags, const char *want)
{
	void *p = NULL, *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	CUdriverProcAddressQueryResult st;
	if (!lib || cuGetProcAddress(name, &p, version, flags, &st) != CUDA_SUCCESS)
		return 0;
	int same = p == dlsym(lib, want) && st == CU_GET_PROC_ADDRESS_SUCCESS;
	dlclose(lib);
	return same;
}

int main(void)
{
	plan(10);
	CUdevice dev;
	CUcontext ctx;
	int n = 0, v = 0;
	ok(cuDeviceGetCount(&n) == CUDA_ERROR_NOT_INITIALIZED, "queries before cuInit fail as on a GPU");
	check(cuInit(0), "cuInit");
	check(cuDeviceGetCount(&n), "cuDeviceGetCount");
	check(cuDeviceGet(&dev, 0), "cuDeviceGet");
	check(cuDriverGetVersion(&v), "cuDriverGetVersion");
	char name[128];
	size_t total = 0;
	check(cuDeviceGetName(name, sizeof(name), dev), "cuDeviceGetName");
	check(cuDeviceTotalMem(&total, dev), "cuDeviceTotalMem");
	ok(n == 1 && v == 13000 && strstr(name, "H200") && total > (140ull << 30),
	   "one device, driver 13.0, named '%s', %zu GiB", name, total >> 30);
	ok(attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) == 9 &&
		   attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR) == 0 &&
		   attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) == 132 &&
		   attr(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) == 1 &&
		   attr(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED) == 1,
	   "compute capability 9.0, 132 SMs, VMM with POSIX fds");

	CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
				     .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 } };
	size_t gran = 0;
	check(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), "granularity");
	ok(gran == 2u << 20, "VMM granularity is 2 MiB");

	check(cuDevicePrimaryCtxRetain(&ctx, dev), "retain");
	check(cuCtxSetCurrent(ctx), "set current");
	size_t free0, free1, t;
	CUdeviceptr p;
	check(cuMemGetInfo(&free0, &t), "cuMemGetInfo");
	check(cuMemAlloc(&p, 64u << 20), "cuMemAlloc");
	check(cuMemGetInfo(&free1, &t), "cuMemGetInfo");
	ok(free0 - free1 == 64u << 20 && t == total, "cuMemGetInfo counts a 64 MiB allocation");
	check(cuMemFree(p), "cuMemFree");
	ok(cuMemcpyHtoD(p, name, 1) == CUDA_ERROR_INVALID_VALUE, "a copy to freed device memory is refused");

	ok(resolves("cuMemAlloc", 12000, 0, "cuMemAlloc_v2") && resolves("cuCtxCreate", 11040, 0, "cuCtxCreate_v3") &&
		   resolves("cuCtxCreate", 12080, 0, "cuCtxCreate_v4") &&
		   resolves("cuEventElapsedTime", 12000, 0, "cuEventElapsedTime") &&
		   resolves("cuEventElapsedTime", 13000, 0, "cuEventElapsedTime_v2"),
	   "cuGetProcAddress picks the entry point's version from the caller's CUDA version");
	ok(resolves("cuMemcpyHtoDAsync", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
		    "cuMemcpyHtoDAsync_v2_ptsz") &&
		   resolves("cuLaunchKernel", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
			    "cuLaunchKernel_ptsz") &&
		   resolves("cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2"),
	   "and the per-thread-default-stream variant when asked");
	void *fp = (void *)1;
	CUdriverProcAddressQueryResult st;
	ok(cuGetProcAddress("cuNoSuchCall", &fp, 13000, 0, &st) == CUDA_ERROR_NOT_FOUND && fp == NULL &&
		   st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND,
	   "an unknown name is not found");

	/* An unimplemented call: capture what simcuda logs on stderr. */
	char path[] = "/tmp/simcuda-log-XXXXXX";
	int logfd = mkstemp(path), saved = dup(2);
	dup2(logfd, 2);
	const void *table = NULL;
	CUuuid id = { { 0 } };
	CUresult r = cuGetExportTable(&table, &id);
	dup2(saved, 2);
	char buf[512] = { 0 };
	ssize_t got = pread(logfd, buf, sizeof(buf) - 1, 0);
	ok(r == CUDA_ERROR_NOT_SUPPORTED && got > 0 && strstr(buf, "cuGetExportTable") && !strchr(buf, '\n')[1],
	   "an unimplemented call returns CUDA_ERROR_NOT_SUPPORTED with one log line naming it");
	close(logfd);
	unlink(path);
	cuDevicePrimaryCtxRelease(dev);
	return done();
}
