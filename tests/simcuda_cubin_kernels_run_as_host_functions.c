/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Kernels from nvcc-built images (cubin, fatbin, PTX) run on simcuda as the
 * host functions registered under their mangled names, with the parameter
 * layout read from the cubin; arguments are taken by value at launch; bad
 * images and kernels without an implementation fail cleanly.
 */
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>

#include "simcuda/simcuda.h"
#include "tap.h"
#include "testpath.h"

#define N 100000

static void check(CUresult r, const char *what)
{
	if (r != CUDA_SUCCESS)
		bail("%s failed: %d", what, (int)r);
}

/* _Z3addPKfS0_Pfi: add(const float *a, const float *b, float *c, int n) */
static void host_add(const simcuda_launch *l)
{
	const float *a = *(const float **)l->params[0], *b = *(const float **)l->params[1];
	float *c = *(float **)l->params[2];
	int n = *(int *)l->params[3];
	unsigned long threads = (unsigned long)l->grid[0] * l->block[0];
	for (unsigned long i = 0; i < threads && i < (unsigned long)n; i++)
		c[i] = a[i] + b[i];
}

/* fill(unsigned *p, unsigned v, unsigned long long n), found by dlsym. */
void simcuda_kernel_fill(const simcuda_launch *l);
void simcuda_kernel_fill(const simcuda_launch *l)
{
	unsigned *p = *(unsigned **)l->params[0];
	unsigned v = *(unsigned *)l->params[1];
	unsigned long long n = *(unsigned long long *)l->params[2];
	for (unsigned long long i = 0; i < n; i++)
		p[i] = v;
}

static atomic_int released;

/* Holds its stream until the test releases it. */
static void hold(void *arg)
{
	(void)arg;
	while (!atomic_load(&released))
		usleep(1000);
}

static char *kernel_path(const char *file)
{
	static char path[PATH_MAX + 64];
	snprintf(path, sizeof(path), "%s/%s", test_path("PHOS_KERNELS", "../kernels"), file);
	return path;
}

static void *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *buf = malloc((size_t)n + 1);
	if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		buf = NULL;
	}
	if (buf)
		buf[n] = 0;
	fclose(f);
	*len = (size_t)n;
	return buf;
}

/* Runs add on module m and checks c = a + b; returns the number wrong. */
static int run_add(CUmodule m, CUstream s)
{
	CUfunction f;
	if (cuModuleGetFunction(&f, m, "_Z3addPKfS0_Pfi"))
		return -1;
	float *ha = malloc(N * sizeof(float)), *hb = malloc(N * sizeof(float)), *hc = malloc(N * sizeof(float));
	for (int i = 0; i < N; i++) {
		ha[i] = (float)i * 0.5f;
		hb[i] = (float)(N - i);
		hc[i] = -1;
	}
	CUdeviceptr a, b, c;
	check(cuMemAlloc(&a, N * sizeof(float)), "cuMemAlloc a");
	check(cuMemAlloc(&b, N * sizeof(float)), "cuMemAlloc b");
	check(cuMemAlloc(&c, N * sizeof(float)), "cuMemAlloc c");
	check(cuMemcpyHtoD(a, ha, N * sizeof(float)), "HtoD a");
	check(cuMemcpyHtoD(b, hb, N * sizeof(float)), "HtoD b");
	check(cuMemsetD32(c, 0, N), "memset c");
	int n = N;
	void *args[] = { &a, &b, &c, &n };
	int wrong = -1;
	if (cuLaunchKernel(f, (N + 255) / 256, 1, 1, 256, 1, 1, 0, s, args, NULL) == CUDA_SUCCESS &&
	    cuStreamSynchronize(s) == CUDA_SUCCESS && cuMemcpyDtoH(hc, c, N * sizeof(float)) == CUDA_SUCCESS) {
		wrong = 0;
		for (int i = 0; i < N; i++)
			wrong += hc[i] != ha[i] + hb[i];
	}
	cuMemFree(a);
	cuMemFree(b);
	cuMemFree(c);
	free(ha);
	free(hb);
	free(hc);
	return wrong;
}

int main(void)
{
	if (access(kernel_path("vector.cubin"), R_OK) != 0)
		skip_all("no nvcc-built kernels (nvcc missing when building)");
	plan(13);

	CUdevice dev;
	CUcontext ctx;
	CUstream s;
	check(cuInit(0), "cuInit");
	check(cuDeviceGet(&dev, 0), "cuDeviceGet");
	check(cuCtxCreate(&ctx, NULL, 0, dev), "cuCtxCreate");
	check(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
	ok(simcuda_register_kernel("_Z3addPKfS0_Pfi", host_add) == 0, "a host kernel registers");

	CUmodule m;
	ok(cuModuleLoad(&m, kernel_path("vector.cubin")) == CUDA_SUCCESS, "a cubin built by nvcc loads");
	unsigned count = 0;
	cuModuleGetFunctionCount(&count, m);
	ok(count == 3, "its three kernels are read from the ELF (%u)", count);

	CUfunction add;
	size_t off[4], sz[4];
	check(cuModuleGetFunction(&add, m, "_Z3addPKfS0_Pfi"), "cuModuleGetFunction");
	int layout_ok = 1;
	for (int i = 0; i < 4; i++)
		layout_ok &= cuFuncGetParamInfo(add, (size_t)i, &off[i], &sz[i]) == CUDA_SUCCESS;
	ok(layout_ok && off[0] == 0 && off[1] == 8 && off[2] == 16 && off[3] == 24 && sz[0] == 8 && sz[3] == 4,
	   "the parameter layout comes from EIATTR_KPARAM_INFO");
	ok(run_add(m, s) == 0, "add(a, b, c, n) from the cubin computes c = a + b on a stream");
	ok(run_add(m, NULL) == 0, "and on the default stream");

	/* Arguments are copied at launch: changing them afterwards has no effect. */
	CUfunction fill;
	check(cuModuleGetFunction(&fill, m, "fill"), "cuModuleGetFunction fill");
	CUdeviceptr p;
	check(cuMemAlloc(&p, 1024 * sizeof(unsigned)), "cuMemAlloc");
	unsigned v = 7;
	unsigned long long n = 1024;
	void *args[] = { &p, &v, &n };
	check(cuLaunchHostFunc(s, hold, NULL), "cuLaunchHostFunc");
	check(cuLaunchKernel(fill, 4, 1, 1, 256, 1, 1, 0, s, args, NULL), "launch fill");
	v = 9;
	n = 1;
	atomic_store(&released, 1);
	check(cuStreamSynchronize(s), "sync");
	unsigned out[1024];
	check(cuMemcpyDtoH(out, p, sizeof(out)), "DtoH");
	int all7 = 1;
	for (int i = 0; i < 1024; i++)
		all7 &= out[i] == 7;
	ok(all7, "a kernel found by dlsym runs, with its arguments taken by value at launch");

	size_t len;
	void *fat = slurp(kernel_path("vector.fatbin"), &len);
	CUmodule mf = NULL;
	ok(fat && cuModuleLoadData(&mf, fat) == CUDA_SUCCESS && run_add(mf, s) == 0,
	   "the same kernel from a fatbin loaded by cuModuleLoadData runs");
	void *ptx = slurp(kernel_path("vector.ptx"), &len);
	CUmodule mp = NULL;
	ok(ptx && cuModuleLoadData(&mp, ptx) == CUDA_SUCCESS && run_add(mp, s) == 0,
	   "and from PTX text");

	CUfunction orphan;
	check(cuModuleGetFunction(&orphan, m, "orphan"), "cuModuleGetFunction orphan");
	void *oargs[] = { &p };
	ok(cuLaunchKernel(orphan, 1, 1, 1, 1, 1, 1, 0, s, oargs, NULL) == CUDA_ERROR_NOT_SUPPORTED,
	   "a kernel with no host implementation fails with CUDA_ERROR_NOT_SUPPORTED");
	CUfunction none;
	ok(cuModuleGetFunction(&none, m, "nosuch") == CUDA_ERROR_NOT_FOUND, "an unknown kernel name is not found");

	/* Corrupt images: truncated and bit-flipped cubins must not crash. */
	void *cubin = slurp(kernel_path("vector.cubin"), &len);
	int all_rejected_or_ok = 1;
	char path[] = "/tmp/simcuda-bad-XXXXXX";
	int fd = mkstemp(path);
	for (size_t cut = 0; cut < len; cut += len / 64 + 1) {
		CUmodule bad;
		if (ftruncate(fd, 0) || pwrite(fd, cubin, cut, 0) != (ssize_t)cut)
			bail("cannot write %s", path);
		CUresult r = cuModuleLoad(&bad, path);
		if (r == CUDA_SUCCESS)
			cuModuleUnload(bad);
		else
			all_rejected_or_ok &= r == CUDA_ERROR_INVALID_IMAGE || r == CUDA_ERROR_NO_BINARY_FOR_GPU;
	}
	srand(1);
	for (int i = 0; i < 2000; i++) {
		unsigned char *c = malloc(len);
		memcpy(c, cubin, len);
		for (int k = 0; k < 4; k++)
			c[(size_t)rand() % len] ^= (unsigned char)(1u << (rand() % 8));
		CUmodule bad;
		if (ftruncate(fd, 0) || pwrite(fd, c, len, 0) != (ssize_t)len)
			bail("cannot write %s", path);
		if (cuModuleLoad(&bad, path) == CUDA_SUCCESS)
			cuModuleUnload(bad);
		free(c);
	}
	close(fd);
	unlink(path);
	ok(all_rejected_or_ok, "truncated and corrupted cubins are rejected as invalid images, without a crash");
	ok(cuModuleUnload(m) == CUDA_SUCCESS, "the module unloads");

	free(cubin);
	free(fat);
	free(ptx);
	cuModuleUnload(mf);
	cuModuleUnload(mp);
	cuMemFree(p);
	cuStreamDestroy(s);
	cuCtxDestroy(ctx);
	return done();
}
