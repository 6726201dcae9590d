/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * launch_app: a program that launches its kernels every way the driver
 * has, each after asking what lies at its buffers' addresses, as Triton's
 * launchers (its own and Inductor's static one) ask
 * cuPointerGetAttribute of every tensor they launch with.
 *
 *   launch_app CUBIN [--managed]
 *
 * It keeps NBUF buffers of 3 MiB (an object each under the tracer) and
 * two small ones (blocks of a slab), and a copy of each in host memory.
 * Each step it bumps every buffer with kernel `bump` of CUBIN
 * (tests/kernels/cow.cu), launched in turn with cuLaunchKernel,
 * cuLaunchKernelEx (with a cluster dimension, and the cooperative
 * attribute where the grid fits the GPU at once) and, for the small ones,
 * cuLaunchCooperativeKernel, after cuPointerGetAttribute
 * (the device pointer) and cuPointerGetAttributes (its range) of it,
 * which must answer for memory that is there. With --managed one more
 * buffer is managed memory (cuMemAllocManaged), which the tracer cannot
 * park: the process is stop-only; every 100 steps it frees that buffer
 * (cuMemFree, which the tracer leaves to the driver) and makes it again.
 *
 * On SIGUSR1 it compares every buffer with its host copy and prints
 * "verify ok step N" or "verify FAILED …"; "step N" every 50 steps; a
 * failed call prints "launch_app: CALL failed: …" and exits 2.
 */
#include <cuda.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "simcuda/simcuda.h"

#define APP_NAME "launch_app"
#include "app.h"

#define NBUF 6
#define BIG (3u << 20)
#define SMALL 4096u
#define MAXBUF (NBUF + 3)

static void host_bump(uint32_t *p, uint64_t n, uint32_t k)
{
	for (uint64_t i = 0; i < n; i++)
		p[i] = (p[i] ^ (k * 0x9E3779B9u)) + (uint32_t)i;
}

/* The host implementation of bump (simcuda). */
void simcuda_kernel__Z4bumpPjyj(const simcuda_launch *l);
void simcuda_kernel__Z4bumpPjyj(const simcuda_launch *l)
{
	host_bump(*(uint32_t **)l->params[0], *(uint64_t *)l->params[1], *(uint32_t *)l->params[2]);
}

static CUdeviceptr dev[MAXBUF];
static uint32_t *host[MAXBUF];
static size_t size[MAXBUF];
static int nbuf;

/* What Triton asks of a tensor before it launches with it. */
static void ask_pointer(CUdeviceptr p)
{
	CUdeviceptr got = 0, start = 0;
	size_t len = 0;
	check(cuPointerGetAttribute(&got, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, p), "cuPointerGetAttribute");
	CUpointer_attribute a[2] = { CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE };
	void *v[2] = { &start, &len };
	check(cuPointerGetAttributes(2, a, v, p), "cuPointerGetAttributes");
	if (got != p || start > p || start + len < p + 4) {
		printf("launch_app: the driver says 0x%llx is at 0x%llx, in [0x%llx, +%zu)\n", (unsigned long long)p,
		       (unsigned long long)got, (unsigned long long)start, len);
		exit(2);
	}
}

static void launch(CUfunction f, int way, CUstream s, CUdeviceptr p, uint64_t n, uint32_t k)
{
	void *args[] = { &p, &n, &k };
	unsigned blocks = (unsigned)((n + 255) / 256);
	if (way == 0) {
		check(cuLaunchKernel(f, blocks, 1, 1, 256, 1, 1, 0, s, args, NULL), "cuLaunchKernel");
	} else if (way == 1) {
		CUlaunchAttribute at[2];
		memset(at, 0, sizeof(at));
		at[0].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
		at[0].value.clusterDim.x = 1;
		at[0].value.clusterDim.y = 1;
		at[0].value.clusterDim.z = 1;
		at[1].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
		at[1].value.cooperative = 1;
		CUlaunchConfig c = { .gridDimX = blocks, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 256,
				     .blockDimY = 1, .blockDimZ = 1, .hStream = s, .attrs = at, .numAttrs = 2 };
		/* A cooperative grid must fit the GPU at once. */
		if (blocks > 128)
			c.numAttrs = 1;
		check(cuLaunchKernelEx(&c, f, args, NULL), "cuLaunchKernelEx");
	} else {
		check(cuLaunchCooperativeKernel(f, blocks, 1, 1, 256, 1, 1, 0, s, args), "cuLaunchCooperativeKernel");
	}
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2)
		return 1;
	bool managed = argc > 2 && !strcmp(argv[2], "--managed");
	signal(SIGUSR1, on_usr1);
	CUdevice d;
	CUcontext c;
	CUmodule m;
	CUfunction bump;
	CUstream s;
	check(cuInit(0), "cuInit");
	check(cuDeviceGet(&d, 0), "cuDeviceGet");
	check(cuDevicePrimaryCtxRetain(&c, d), "cuDevicePrimaryCtxRetain");
	check(cuCtxSetCurrent(c), "cuCtxSetCurrent");
	check(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
	check(cuModuleLoad(&m, argv[1]), "cuModuleLoad");
	check(cuModuleGetFunction(&bump, m, "_Z4bumpPjyj"), "cuModuleGetFunction");
	for (nbuf = 0; nbuf < NBUF + 2 + managed; nbuf++) {
		size[nbuf] = nbuf < NBUF ? BIG : SMALL;
		if (nbuf == NBUF + 2)
			check(cuMemAllocManaged(&dev[nbuf], BIG, CU_MEM_ATTACH_GLOBAL), "cuMemAllocManaged");
		else
			check(cuMemAlloc(&dev[nbuf], size[nbuf]), "cuMemAlloc");
		if (nbuf == NBUF + 2)
			size[nbuf] = BIG;
		host[nbuf] = calloc(size[nbuf], 1);
		check(cuMemsetD32(dev[nbuf], 0, size[nbuf] / 4), "cuMemsetD32");
	}
	check(cuCtxSynchronize(), "cuCtxSynchronize");
	for (uint32_t step = 1;; step++) {
		for (int i = 0; i < nbuf; i++) {
			uint32_t k = step * 31 + (uint32_t)i;
			ask_pointer(dev[i] + size[i] / 2);
			/* A cooperative launch's grid must fit the GPU at once:
			 * the small buffers' do. */
			int way = (int)((step + (uint32_t)i) % 3);
			launch(bump, way == 2 && size[i] > SMALL ? 1 : way, s, dev[i], size[i] / 4, k);
			host_bump(host[i], size[i] / 4, k);
		}
		check(cuStreamSynchronize(s), "cuStreamSynchronize");
		if (managed && step % 100 == 0) {
			int m = NBUF + 2;
			check(cuMemFree(dev[m]), "cuMemFree (managed)");
			check(cuMemAllocManaged(&dev[m], BIG, CU_MEM_ATTACH_GLOBAL), "cuMemAllocManaged again");
			check(cuMemsetD32(dev[m], 0, BIG / 4), "cuMemsetD32 (managed)");
			memset(host[m], 0, BIG);
		}
		if (step % 50 == 0)
			printf("step %u\n", step);
		if (verify_asked) {
			verify_asked = 0;
			int bad = -1;
			static uint32_t got[BIG / 4];
			for (int i = 0; i < nbuf && bad < 0; i++) {
				check(cuMemcpyDtoH(got, dev[i], size[i]), "cuMemcpyDtoH");
				if (memcmp(got, host[i], size[i]))
					bad = i;
			}
			if (bad < 0)
				printf("verify ok step %u\n", step);
			else
				printf("verify FAILED step %u: buffer %d\n", step, bad);
		}
		usleep(1000);
	}
}
