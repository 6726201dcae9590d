/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * However a program reaches the driver, it reaches the tracer: through
 * dlsym on a dlopen'd libcuda.so.1, and through cuGetProcAddress with the
 * entry point's version and the per-thread-default-stream variant, the
 * lookup function itself included; what the tracer does not wrap, and
 * cuGetExportTable, pass through untouched. An allocation made through a
 * pointer found so is parkable memory. The test runs itself under
 * libphos.so.
 */
#include <dlfcn.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>

#include "tap.h"
#include "testpath.h"

static int in_libphos(void *p)
{
	Dl_info i;
	return p && dladdr(p, &i) && i.dli_fname && strstr(i.dli_fname, "libphos");
}

static int in_libcuda(void *p)
{
	Dl_info i;
	return p && dladdr(p, &i) && i.dli_fname && strstr(i.dli_fname, "libcuda");
}

int main(int argc, char **argv)
{
	(void)argc;
	if (!getenv("LD_PRELOAD")) {
		char lib[PATH_MAX];
		snprintf(lib, sizeof(lib), "%s", test_path("PHOS_LIBPHOS", "../libphos.so"));
		if (access(lib, R_OK) != 0)
			skip_all("no libphos.so");
		setenv("LD_PRELOAD", lib, 1);
		setenv("ASAN_OPTIONS", "verify_asan_link_order=0", 1);
		setenv("PHOS_SOCKET", "/nonexistent/phos.sock", 1);
		execv("/proc/self/exe", argv);
		bail("cannot run under the tracer");
	}
	plan(8);
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!h)
		bail("no libcuda.so.1");
	CUresult (*init)(unsigned) = (CUresult(*)(unsigned))dlsym(h, "cuInit");
	CUresult (*alloc)(CUdeviceptr *, size_t) = (CUresult(*)(CUdeviceptr *, size_t))dlsym(h, "cuMemAlloc_v2");
	ok(in_libphos((void *)init) && in_libphos((void *)alloc), "dlsym on a dlopen'd libcuda.so.1 gives the wrappers");
	ok(in_libcuda(dlsym(h, "cuDeviceGetName")) && in_libcuda(dlsym(h, "cuGetExportTable")),
	   "entry points it does not wrap, cuGetExportTable too, come from the driver");

	CUresult (*gpa)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *) =
		(CUresult(*)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *))dlsym(
			h, "cuGetProcAddress_v2");
	void *p1 = NULL, *p2 = NULL, *p3 = NULL, *p4 = NULL, *p5 = NULL;
	CUdriverProcAddressQueryResult st;
	init(0);
	gpa("cuMemAlloc", &p1, 12000, 0, &st);
	gpa("cuGetProcAddress", &p2, 12000, 0, &st);
	gpa("cuMemcpyHtoDAsync", &p3, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st);
	gpa("cuDeviceGetName", &p4, 12000, 0, &st);
	gpa("cuLaunchKernel", &p5, 12000, 0, &st);
	ok(in_libphos(gpa) && p1 == dlsym(h, "cuMemAlloc_v2") && in_libphos(p1),
	   "cuGetProcAddress(\"cuMemAlloc\", 12000) gives the cuMemAlloc_v2 wrapper");
	ok(in_libphos(p2), "and for cuGetProcAddress itself, the wrapper, so chained lookups stay wrapped");
	Dl_info i3 = { 0 };
	const char *n3 = p3 && dladdr(p3, &i3) && i3.dli_sname ? i3.dli_sname : "?";
	ok(in_libphos(p3) && !strcmp(n3, "cuMemcpyHtoDAsync_v2_ptsz"),
	   "the per-thread-default-stream flag gives the _ptsz wrapper (%s)", n3);
	ok(in_libcuda(p4) && in_libphos(p5), "an unwrapped entry point comes back as the driver gave it");

	CUdevice dev;
	CUcontext ctx;
	CUdeviceptr d = 0;
	cuDeviceGet(&dev, 0);
	cuDevicePrimaryCtxRetain(&ctx, dev);
	cuCtxSetCurrent(ctx);
	CUresult r = ((CUresult(*)(CUdeviceptr *, size_t))p1)(&d, 3u << 20);
	CUdeviceptr base = 0;
	size_t size = 0;
	CUmemGenericAllocationHandle mh = 0;
	/* Parkable memory: a VMM allocation the driver can name a handle for. */
	CUresult rr = cuMemRetainAllocationHandle(&mh, (void *)d);
	ok(r == CUDA_SUCCESS && rr == CUDA_SUCCESS && mh != 0, "memory allocated through it is a VMM allocation");
	if (rr == CUDA_SUCCESS)
		cuMemRelease(mh);
	ok(cuMemGetAddressRange(&base, &size, d) == CUDA_SUCCESS && base == d && size == 3u << 20,
	   "cuMemGetAddressRange answers with the allocation as asked for");
	cuMemFree(d);
	return done();
}
