/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Wrappers of cuInit, module and library loading, function lookups and
 * launches. A launch passes the gate and has its read and write sets
 * speculated before it reaches the driver.
 */
#include <stdio.h>
#include <stdlib.h>

#include "tracer.h"

TR_EXPORT CUresult cuInit(unsigned int flags)
{
	REAL(CUresult, cuInit, (unsigned int));
	if (!real_cuInit)
		return CUDA_ERROR_NOT_INITIALIZED;
	CUresult r = real_cuInit(flags);
	if (r == CUDA_SUCCESS && tr_enabled())
		control_start(); /* registers with phosfs once */
	return r;
}

TR_EXPORT CUresult cuModuleLoadData(CUmodule *m, const void *image)
{
	REAL(CUresult, cuModuleLoadData, (CUmodule *, const void *));
	CUresult r = real_cuModuleLoadData(m, image);
	if (r == CUDA_SUCCESS && tr_enabled())
		module_loaded(*m, image, 0);
	return r;
}

TR_EXPORT CUresult cuModuleLoadDataEx(CUmodule *m, const void *image, unsigned int n, CUjit_option *o, void **v)
{
	REAL(CUresult, cuModuleLoadDataEx, (CUmodule *, const void *, unsigned int, CUjit_option *, void **));
	CUresult r = real_cuModuleLoadDataEx(m, image, n, o, v);
	if (r == CUDA_SUCCESS && tr_enabled())
		module_loaded(*m, image, 0);
	return r;
}

TR_EXPORT CUresult cuModuleLoadFatBinary(CUmodule *m, const void *fatbin)
{
	REAL(CUresult, cuModuleLoadFatBinary, (CUmodule *, const void *));
	CUresult r = real_cuModuleLoadFatBinary(m, fatbin);
	if (r == CUDA_SUCCESS && tr_enabled())
		module_loaded(*m, fatbin, 0);
	return r;
}

/* A module loaded from a file: its image is read again for the layouts. */
static void loaded_from_file(void *handle, const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return;
	char *buf = NULL;
	long n = -1;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && n < (1L << 30) && fseek(f, 0, SEEK_SET) == 0 &&
	    (buf = malloc((size_t)n + 1)) && fread(buf, 1, (size_t)n, f) == (size_t)n) {
		buf[n] = 0;
		module_loaded(handle, buf, (size_t)n);
	}
	free(buf);
	fclose(f);
}

TR_EXPORT CUresult cuModuleLoad(CUmodule *m, const char *path)
{
	REAL(CUresult, cuModuleLoad, (CUmodule *, const char *));
	CUresult r = real_cuModuleLoad(m, path);
	if (r == CUDA_SUCCESS && tr_enabled())
		loaded_from_file(*m, path);
	return r;
}

TR_EXPORT CUresult cuModuleUnload(CUmodule m)
{
	REAL(CUresult, cuModuleUnload, (CUmodule));
	if (tr_enabled())
		module_unloaded(m);
	return real_cuModuleUnload(m);
}

TR_EXPORT CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
	REAL(CUresult, cuModuleGetFunction, (CUfunction *, CUmodule, const char *));
	CUresult r = real_cuModuleGetFunction(f, m, name);
	if (r == CUDA_SUCCESS && tr_enabled())
		module_function(m, *f, name, false);
	return r;
}

TR_EXPORT CUresult cuLibraryLoadData(CUlibrary *lib, const void *code, CUjit_option *jo, void **jv, unsigned int njo,
				     CUlibraryOption *lo, void **lv, unsigned int nlo)
{
	REAL(CUresult, cuLibraryLoadData, (CUlibrary *, const void *, CUjit_option *, void **, unsigned int,
					   CUlibraryOption *, void **, unsigned int));
	CUresult r = real_cuLibraryLoadData(lib, code, jo, jv, njo, lo, lv, nlo);
	if (r == CUDA_SUCCESS && tr_enabled())
		module_loaded(*lib, code, 0);
	return r;
}

TR_EXPORT CUresult cuLibraryLoadFromFile(CUlibrary *lib, const char *path, CUjit_option *jo, void **jv,
					 unsigned int njo, CUlibraryOption *lo, void **lv, unsigned int nlo)
{
	REAL(CUresult, cuLibraryLoadFromFile, (CUlibrary *, const char *, CUjit_option *, void **, unsigned int,
					       CUlibraryOption *, void **, unsigned int));
	CUresult r = real_cuLibraryLoadFromFile(lib, path, jo, jv, njo, lo, lv, nlo);
	if (r == CUDA_SUCCESS && tr_enabled())
		loaded_from_file(*lib, path);
	return r;
}

TR_EXPORT CUresult cuLibraryUnload(CUlibrary lib)
{
	REAL(CUresult, cuLibraryUnload, (CUlibrary));
	if (tr_enabled())
		module_unloaded(lib);
	return real_cuLibraryUnload(lib);
}

TR_EXPORT CUresult cuLibraryGetKernel(CUkernel *k, CUlibrary lib, const char *name)
{
	REAL(CUresult, cuLibraryGetKernel, (CUkernel *, CUlibrary, const char *));
	CUresult r = real_cuLibraryGetKernel(k, lib, name);
	if (r == CUDA_SUCCESS && tr_enabled())
		module_function(lib, *k, name, true);
	return r;
}

TR_EXPORT CUresult cuKernelGetFunction(CUfunction *f, CUkernel k)
{
	REAL(CUresult, cuKernelGetFunction, (CUfunction *, CUkernel));
	CUresult r = real_cuKernelGetFunction(f, k);
	if (r == CUDA_SUCCESS && tr_enabled()) {
		kernel_info *ki = module_kernel((CUfunction)k);
		if (ki)
			module_function(NULL, *f, ki->name, false);
	}
	return r;
}

/* ---- launches -------------------------------------------------------------- */

static void speculate(CUfunction f, void **params, void **extra, CUstream s)
{
	kernel_info *k = module_kernel(f);
	if (k)
		spec_launch(k, params, extra, s);
	else
		spec_net(NULL); /* a function never seen: nothing is known of it */
}

#define LAUNCH(name)                                                                                     \
	TR_EXPORT CUresult name(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, \
				unsigned bz, unsigned shmem, CUstream s, void **params, void **extra)          \
	{                                                                                                \
		REAL(CUresult, name, (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,       \
				      unsigned, unsigned, CUstream, void **, void **));                  \
		if (!tr_enabled())                                                                       \
			return real_##name(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);          \
		GATE();                                                                                  \
		speculate(f, params, extra, tr_stream_of(#name, s));                                         \
		return real_##name(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);                  \
	}

LAUNCH(cuLaunchKernel)
LAUNCH(cuLaunchKernel_ptsz)

#define LAUNCH_EX(name)                                                                         \
	TR_EXPORT CUresult name(const CUlaunchConfig *c, CUfunction f, void **params, void **extra) \
	{                                                                                       \
		REAL(CUresult, name, (const CUlaunchConfig *, CUfunction, void **, void **));   \
		if (!tr_enabled())                                                              \
			return real_##name(c, f, params, extra);                                \
		GATE();                                                                         \
		speculate(f, params, extra, tr_stream_of(#name, c ? c->hStream : NULL));            \
		return real_##name(c, f, params, extra);                                        \
	}

LAUNCH_EX(cuLaunchKernelEx)
LAUNCH_EX(cuLaunchKernelEx_ptsz)

#define LAUNCH_COOP(name)                                                                                \
	TR_EXPORT CUresult name(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, \
				unsigned bz, unsigned shmem, CUstream s, void **params)                        \
	{                                                                                                \
		REAL(CUresult, name, (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,       \
				      unsigned, unsigned, CUstream, void **));                           \
		if (!tr_enabled())                                                                       \
			return real_##name(f, gx, gy, gz, bx, by, bz, shmem, s, params);                 \
		GATE();                                                                                  \
		speculate(f, params, NULL, tr_stream_of(#name, s));                                          \
		return real_##name(f, gx, gy, gz, bx, by, bz, shmem, s, params);                         \
	}

LAUNCH_COOP(cuLaunchCooperativeKernel)
LAUNCH_COOP(cuLaunchCooperativeKernel_ptsz)

/* A graph's nodes are not speculated: while a CoW copy or a lazy
 * restore runs, a graph launch goes through the safety net. */
#define GRAPH_LAUNCH(name)                                             \
	TR_EXPORT CUresult name(CUgraphExec g, CUstream s)             \
	{                                                              \
		REAL(CUresult, name, (CUgraphExec, CUstream));         \
		if (!tr_enabled())                                     \
			return real_##name(g, s);                      \
		GATE();                                                \
		spec_net(NULL);                                         \
		return real_##name(g, s);                              \
	}

GRAPH_LAUNCH(cuGraphLaunch)
GRAPH_LAUNCH(cuGraphLaunch_ptsz)
