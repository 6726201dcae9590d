/*
 * cuGetProcAddress: resolves a driver entry point by its base name and the
 * CUDA version the caller was built for, as the driver does (cuMemAlloc at
 * 12000 is cuMemAlloc_v2; with the per-thread-default-stream flag,
 * cuMemcpyAsync is cuMemcpyAsync_ptsz).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

typedef struct version_map {
	const char *name;
	int since;          /* CUDA version from which suffix applies */
	const char *suffix; /* appended to name */
} version_map;

/* The entry points whose newer version has a suffix. Entries of one name
 * are in ascending version order. */
static const version_map versions[] = {
	{ "cuDeviceTotalMem", 3020, "_v2" },
	{ "cuCtxCreate", 3020, "_v2" },
	{ "cuCtxCreate", 11040, "_v3" },
	{ "cuCtxCreate", 12050, "_v4" },
	{ "cuCtxDestroy", 4000, "_v2" },
	{ "cuCtxPopCurrent", 4000, "_v2" },
	{ "cuCtxPushCurrent", 4000, "_v2" },
	{ "cuMemGetInfo", 3020, "_v2" },
	{ "cuMemAlloc", 3020, "_v2" },
	{ "cuMemAllocPitch", 3020, "_v2" },
	{ "cuMemFree", 3020, "_v2" },
	{ "cuMemGetAddressRange", 3020, "_v2" },
	{ "cuMemAllocHost", 3020, "_v2" },
	{ "cuMemHostRegister", 6050, "_v2" },
	{ "cuMemcpyHtoD", 3020, "_v2" },
	{ "cuMemcpyDtoH", 3020, "_v2" },
	{ "cuMemcpyDtoD", 3020, "_v2" },
	{ "cuMemcpyHtoDAsync", 3020, "_v2" },
	{ "cuMemcpyDtoHAsync", 3020, "_v2" },
	{ "cuMemcpyDtoDAsync", 3020, "_v2" },
	{ "cuMemsetD8", 3020, "_v2" },
	{ "cuMemsetD16", 3020, "_v2" },
	{ "cuMemsetD32", 3020, "_v2" },
	{ "cuStreamDestroy", 4000, "_v2" },
	{ "cuEventDestroy", 4000, "_v2" },
	{ "cuDevicePrimaryCtxRelease", 11000, "_v2" },
	{ "cuDevicePrimaryCtxReset", 11000, "_v2" },
	{ "cuDevicePrimaryCtxSetFlags", 11000, "_v2" },
	{ "cuDeviceGetUuid", 11040, "_v2" },
	{ "cuGetProcAddress", 12000, "_v2" },
	{ "cuEventElapsedTime", 12080, "_v2" },
};

static void *self_handle(void)
{
	static void *self;
	if (!self) {
		Dl_info info;
		if (dladdr((void *)cuInit, &info) && info.dli_fname)
			self = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
	}
	return self;
}

/* Looks name up among this library's own exports. */
static void *own_symbol(const char *name)
{
	void *self = self_handle();
	if (!self)
		return NULL;
	void *p = dlsym(self, name);
	Dl_info info, mine;
	/* Only this library's definitions count, not an interposer's. */
	if (p && dladdr(p, &info) && dladdr((void *)cuInit, &mine) && info.dli_fbase != mine.dli_fbase)
		return NULL;
	return p;
}

static CUresult resolve(const char *symbol, void **pfn, int version, cuuint64_t flags,
			CUdriverProcAddressQueryResult *status)
{
	char name[256];
	if (!symbol || !pfn || strlen(symbol) > 200)
		return CUDA_ERROR_INVALID_VALUE;
	*pfn = NULL;

	/* Pick the version of the entry point. */
	const char *suffix = "";
	for (size_t i = 0; i < sizeof(versions) / sizeof(versions[0]); i++)
		if (strcmp(versions[i].name, symbol) == 0 && version >= versions[i].since)
			suffix = versions[i].suffix;
	snprintf(name, sizeof(name), "%s%s", symbol, suffix);

	void *p = NULL;
	if (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) {
		char ptds[272];
		snprintf(ptds, sizeof(ptds), "%s_ptds", name);
		p = own_symbol(ptds);
		if (!p) {
			snprintf(ptds, sizeof(ptds), "%s_ptsz", name);
			p = own_symbol(ptds);
		}
	}
	if (!p)
		p = own_symbol(name);
	if (!p) {
		if (status)
			*status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
		return CUDA_ERROR_NOT_FOUND;
	}
	*pfn = p;
	if (status)
		*status = CU_GET_PROC_ADDRESS_SUCCESS;
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags,
				    CUdriverProcAddressQueryResult *status)
{
	return resolve(symbol, pfn, version, flags, status);
}

SC_LEGACY(sc_cuGetProcAddress_v1, "cuGetProcAddress",
	  (const char *symbol, void **pfn, int version, cuuint64_t flags))
{
	return resolve(symbol, pfn, version, flags, NULL);
}
