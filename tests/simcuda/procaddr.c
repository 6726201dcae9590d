/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * cuGetProcAddress: resolves a driver entry point by its base name and the
 * CUDA version the caller was built for, as the driver does (cuMemAlloc at
 * 12000 is cuMemAlloc_v2; with the per-thread-default-stream flag,
 * cuMemcpyAsync is cuMemcpyAsync_ptsz).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "../../common/cuversions.h"
#include "internal.h"

static void *self_handle(void)
{
	static void *self;
	if (!self) {
		Dl_info info;
		if (dladdr((void *)self_handle, &info) && info.dli_fname)
			self = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
	}
	return self;
}

/* glibc's dlsym: the public one may be an interposer's (the tracer's),
 * which answers with its own wrappers. */
static void *libc_dlsym(void *handle, const char *name)
{
	static void *(*fn)(void *, const char *);
	if (!fn) {
		void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
		void *p = libc ? dlvsym(libc, "dlsym", "GLIBC_2.34") : NULL;
		if (!p && libc)
			p = dlvsym(libc, "dlsym", "GLIBC_2.2.5");
		*(void **)&fn = p ? p : (void *)dlsym;
	}
	return fn(handle, name);
}

/* Looks name up among this library's own exports. */
static void *own_symbol(const char *name)
{
	void *self = self_handle();
	if (!self)
		return NULL;
	void *p = libc_dlsym(self, name);
	Dl_info info, mine;
	/* Only this library's definitions count, not an interposer's. */
	if (p && dladdr(p, &info) && dladdr((void *)self_handle, &mine) && info.dli_fbase != mine.dli_fbase)
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

	cuversion_symbol(symbol, version, name, sizeof(name));

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
