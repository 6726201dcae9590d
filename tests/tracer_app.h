/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A driver-API application for the tracer tests to run under libphos.so.
 * It allocates large and small buffers, fills them with known bytes, loads
 * the nvcc-built kernels, and then obeys one-byte commands on a pipe:
 *
 *   l  launch add(a, b, c, n) once          -> 'y'
 *   v  check every buffer's bytes           -> 'y' or 'n'
 *   t  start 8 threads issuing calls        -> 'y'
 *   s  stop them; check nothing was lost    -> 'y' or 'n' (and a diag line)
 *   r  unmap and release its own VMM allocation by its original handle
 *                                           -> 'y' or 'n'
 *   m  make 100000 allocations of 64 bytes  -> 'y' if they fit in little
 *      device memory (slabs, not one VMM object each), and free them
 *   n  NCCL through tests/apps/libnccl.so.2, dlopen'd RTLD_LOCAL and
 *      reached with dlsym (app_nccl)           -> 'y' or 'n'
 *   g  open an NCCL group holding one all-reduce on a communicator of
 *      one rank, made at the first (app_group)        -> 'y' or 'n'
 *   e  end that group                          -> 'y' or 'n'
 *   a  one more all-reduce in that group, on a second communicator of
 *      one rank                                -> 'y' or 'n'
 *   k  set its context's stack limit to APP_STACK bytes -> 'y' or 'n'
 *   K  check that the limit is APP_STACK       -> 'y' or 'n'
 *   f  free its big buffer (BUF_BIG), which 'v' then leaves out
 *                                              -> 'y' or 'n'
 *   q  quit
 *
 * Besides its cuMemAlloc buffers, it maps a VMM allocation of its own
 * (cuMemCreate without asking for an exportable handle), checked by 'v'.
 *
 * At start it writes an app_layout (its buffers' addresses) to the pipe.
 */
#ifndef PHOS_TRACER_APP_H
#define PHOS_TRACER_APP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>
#include <dlfcn.h>

#include "simcuda/simcuda.h"

#define APP_N (1u << 20) /* floats in a, b, c */
#define APP_NBUF 7
#define APP_THREADS 8
#define APP_STACK 4096 /* 'k': bytes per GPU thread */

enum { BUF_A, BUF_B, BUF_C, BUF_S1, BUF_S2, BUF_S3, BUF_BIG };
static const size_t app_sizes[APP_NBUF] = { APP_N * 4, APP_N * 4, APP_N * 4, 1000, 300, 4000, 6u << 20 };

typedef struct app_layout {
	uint64_t va[APP_NBUF];
	uint64_t size[APP_NBUF];
	uint64_t vmm_va; /* its own VMM allocation, APP_VMM_BYTES */
	int ok;
} app_layout;

/* Buffers the tracer lists: APP_NBUF, and the mapping of its own. */
#define APP_LISTED (APP_NBUF + 1)

static CUdeviceptr app_buf[APP_NBUF];
static int app_big_freed; /* 'f' */
static CUcontext app_ctx;
static CUfunction app_add;
static atomic_int app_stop;

/* Its own VMM allocation. */
#define APP_VMM_BYTES (4u << 20)
static CUmemGenericAllocationHandle app_vmm_h;
static CUdeviceptr app_vmm_va;

static inline int app_vmm_make(void)
{
	CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
				     .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 } };
	CUmemAccessDesc acc = { .location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	return cuMemCreate(&app_vmm_h, APP_VMM_BYTES, &prop, 0) ||
	       cuMemAddressReserve(&app_vmm_va, APP_VMM_BYTES, 0, 0, 0) ||
	       cuMemMap(app_vmm_va, APP_VMM_BYTES, 0, app_vmm_h, 0) ||
	       cuMemSetAccess(app_vmm_va, APP_VMM_BYTES, &acc, 1) ||
	       cuMemsetD32(app_vmm_va, 0xA5A5F00Du, APP_VMM_BYTES / 4);
}

static inline int app_vmm_check(void)
{
	uint32_t *h = malloc(APP_VMM_BYTES);
	int ok = h && cuMemcpyDtoH(h, app_vmm_va, APP_VMM_BYTES) == CUDA_SUCCESS;
	for (size_t i = 0; ok && i < APP_VMM_BYTES / 4; i++)
		ok = h[i] == 0xA5A5F00Du;
	free(h);
	return ok;
}

/* Unmaps and releases it by the handle the driver first gave. */
static inline int app_vmm_drop(void)
{
	CUmemAllocationProp p;
	return cuMemGetAllocationPropertiesFromHandle(&p, app_vmm_h) == CUDA_SUCCESS &&
	       cuMemUnmap(app_vmm_va, APP_VMM_BYTES) == CUDA_SUCCESS && cuMemRelease(app_vmm_h) == CUDA_SUCCESS &&
	       cuMemAddressFree(app_vmm_va, APP_VMM_BYTES) == CUDA_SUCCESS;
}

static inline void app_host_add(const simcuda_launch *l)
{
	const float *a = *(const float **)l->params[0], *b = *(const float **)l->params[1];
	float *c = *(float **)l->params[2];
	int n = *(int *)l->params[3];
	for (int i = 0; i < n; i++)
		c[i] = a[i] + b[i];
}

static inline uint8_t app_byte(int buf, size_t i)
{
	return (uint8_t)(i * 31 + (size_t)buf * 7 + (i >> 9));
}

static inline int app_fill(void)
{
	uint8_t *h = malloc(6u << 20);
	int e = 0;
	for (int b = 0; b < APP_NBUF && !e; b++) {
		if (b == BUF_A || b == BUF_B) {
			float *f = (float *)h;
			for (size_t i = 0; i < APP_N; i++)
				f[i] = (float)(i % 1000) * (b == BUF_A ? 1.0f : 0.5f);
		} else {
			for (size_t i = 0; i < app_sizes[b]; i++)
				h[i] = app_byte(b, i);
		}
		if (b == BUF_C)
			e = cuMemsetD32(app_buf[b], 0, APP_N);
		else
			e = cuMemcpyHtoD(app_buf[b], h, app_sizes[b]);
	}
	free(h);
	return e;
}

static inline int app_check(int launched)
{
	uint8_t *h = malloc(6u << 20);
	int ok = 1;
	for (int b = 0; b < APP_NBUF && ok; b++) {
		if (b == BUF_BIG && app_big_freed)
			continue;
		if (cuMemcpyDtoH(h, app_buf[b], app_sizes[b]) != CUDA_SUCCESS) {
			ok = 0;
			break;
		}
		const float *f = (const float *)h;
		for (size_t i = 0; ok && i < app_sizes[b] / (b <= BUF_C ? 4 : 1); i++) {
			if (b == BUF_A)
				ok = f[i] == (float)(i % 1000);
			else if (b == BUF_B)
				ok = f[i] == (float)(i % 1000) * 0.5f;
			else if (b == BUF_C)
				ok = f[i] == (launched ? (float)(i % 1000) * 1.5f : 0.0f);
			else
				ok = h[i] == app_byte(b, i);
		}
	}
	free(h);
	return ok;
}

typedef struct hammer {
	pthread_t t;
	CUdeviceptr buf;
	uint32_t last, errors;
} hammer;

static inline void *app_hammer(void *arg)
{
	hammer *h = arg;
	cuCtxSetCurrent(app_ctx);
	for (uint32_t i = 1; !atomic_load(&app_stop); i++) {
		if (cuMemsetD32(h->buf, i, 1024) == CUDA_SUCCESS)
			h->last = i;
		else
			h->errors++;
	}
	return NULL;
}

/* NCCL's ABI, as tests/apps/nccl_stub.c has it. */
typedef struct {
	char internal[128];
} app_nccl_id;
typedef void *app_comm;

/* Through the stub NCCL (PHOS_NCCL_STUB): communicator A from a unique
 * id, 3 all-reduces, a group of 2 all-reduces, a send and a receive, a
 * broadcast by ncclBcast (which calls ncclBroadcast); split S1 of A
 * (colour 7), destroyed; split S2 (colour 7 again), one all-reduce; a
 * split with no colour; B from the same unique id as A. So A counts 5
 * operations, S2 1, B 0; A and B have one name, S2 another. */
static inline int app_nccl(void)
{
	void *h = dlopen(getenv("PHOS_NCCL_STUB"), RTLD_NOW | RTLD_LOCAL);
	if (!h)
		return 0;
	int (*get_id)(app_nccl_id *) = (int (*)(app_nccl_id *))dlsym(h, "ncclGetUniqueId");
	int (*init)(app_comm *, int, app_nccl_id, int) = (int (*)(app_comm *, int, app_nccl_id, int))dlsym(h, "ncclCommInitRank");
	int (*init_cfg)(app_comm *, int, app_nccl_id, int, void *) =
		(int (*)(app_comm *, int, app_nccl_id, int, void *))dlsym(h, "ncclCommInitRankConfig");
	int (*allreduce)(const void *, void *, size_t, int, int, app_comm, void *) =
		(int (*)(const void *, void *, size_t, int, int, app_comm, void *))dlsym(h, "ncclAllReduce");
	int (*send)(const void *, size_t, int, int, app_comm, void *) =
		(int (*)(const void *, size_t, int, int, app_comm, void *))dlsym(h, "ncclSend");
	int (*recv)(void *, size_t, int, int, app_comm, void *) =
		(int (*)(void *, size_t, int, int, app_comm, void *))dlsym(h, "ncclRecv");
	int (*bcast)(void *, size_t, int, int, app_comm, void *) =
		(int (*)(void *, size_t, int, int, app_comm, void *))dlsym(h, "ncclBcast");
	int (*start)(void) = (int (*)(void))dlsym(h, "ncclGroupStart");
	int (*end)(void) = (int (*)(void))dlsym(h, "ncclGroupEnd");
	int (*split)(app_comm, int, int, app_comm *, void *) =
		(int (*)(app_comm, int, int, app_comm *, void *))dlsym(h, "ncclCommSplit");
	int (*destroy)(app_comm) = (int (*)(app_comm))dlsym(h, "ncclCommDestroy");
	if (!get_id || !init || !init_cfg || !allreduce || !send || !recv || !bcast || !start || !end || !split ||
	    !destroy)
		return 0;
	app_nccl_id id;
	app_comm a, b, s1, s2, none;
	int e = get_id(&id) || init(&a, 1, id, 0);
	for (int i = 0; i < 3 && !e; i++)
		e = allreduce(NULL, NULL, 0, 0, 0, a, NULL);
	e = e || start() || allreduce(NULL, NULL, 0, 0, 0, a, NULL) || allreduce(NULL, NULL, 0, 0, 0, a, NULL) ||
	    send(NULL, 0, 0, 0, a, NULL) || recv(NULL, 0, 0, 0, a, NULL) || end();
	e = e || bcast(NULL, 0, 0, 0, a, NULL);
	e = e || split(a, 7, 0, &s1, NULL) || destroy(s1) || split(a, 7, 0, &s2, NULL) ||
	    allreduce(NULL, NULL, 0, 0, 0, s2, NULL) || split(a, -1, 0, &none, NULL) || none != NULL;
	e = e || init_cfg(&b, 1, id, 0, NULL);
	return !e;
}

/* 'g', 'a' and 'e': a group left open, as a rank is between its
 * collectives and ncclGroupEnd, where NCCL launches the group's kernels. */
static int (*app_group_end)(void);
static int (*app_allreduce)(const void *, void *, size_t, int, int, app_comm, void *);
static app_comm app_g2;

static inline int app_group(void)
{
	void *h = dlopen(getenv("PHOS_NCCL_STUB"), RTLD_NOW | RTLD_LOCAL);
	if (!h)
		return 0;
	int (*get_id)(app_nccl_id *) = (int (*)(app_nccl_id *))dlsym(h, "ncclGetUniqueId");
	int (*init)(app_comm *, int, app_nccl_id, int) = (int (*)(app_comm *, int, app_nccl_id, int))dlsym(h, "ncclCommInitRank");
	int (*allreduce)(const void *, void *, size_t, int, int, app_comm, void *) =
		(int (*)(const void *, void *, size_t, int, int, app_comm, void *))dlsym(h, "ncclAllReduce");
	int (*start)(void) = (int (*)(void))dlsym(h, "ncclGroupStart");
	*(void **)&app_group_end = dlsym(h, "ncclGroupEnd");
	static app_comm g;
	app_nccl_id id, id2;
	app_allreduce = allreduce;
	if (!get_id || !init || !allreduce || !start || !app_group_end || (!g && (get_id(&id) || init(&g, 1, id, 0))) ||
	    (!app_g2 && (get_id(&id2) || init(&app_g2, 1, id2, 0))))
		return 0;
	return !start() && !allreduce(NULL, NULL, 0, 0, 0, g, NULL);
}

static inline int app_main(int fd, const char *kernels)
{
	CUdevice dev;
	CUmodule mod;
	app_layout lay = { .ok = 0 };
	char path[4096];
	snprintf(path, sizeof(path), "%s/vector.cubin", kernels);
	simcuda_register_kernel("_Z3addPKfS0_Pfi", app_host_add);
	if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&app_ctx, dev) || cuCtxSetCurrent(app_ctx))
		goto report;
	for (int b = 0; b < APP_NBUF; b++) {
		if (cuMemAlloc(&app_buf[b], app_sizes[b]))
			goto report;
		lay.va[b] = app_buf[b];
		lay.size[b] = app_sizes[b];
	}
	if (app_fill() || app_vmm_make() || cuModuleLoad(&mod, path) ||
	    cuModuleGetFunction(&app_add, mod, "_Z3addPKfS0_Pfi"))
		goto report;
	lay.vmm_va = app_vmm_va;
	lay.ok = 1;
report:
	if (write(fd, &lay, sizeof(lay)) != (ssize_t)sizeof(lay) || !lay.ok)
		return 1;

	hammer hs[APP_THREADS];
	int launched = 0;
	char c;
	while (read(fd, &c, 1) == 1 && c != 'q') {
		char r = 'y';
		if (c == 'l') {
			int n = (int)APP_N;
			void *args[] = { &app_buf[BUF_A], &app_buf[BUF_B], &app_buf[BUF_C], &n };
			r = cuLaunchKernel(app_add, APP_N / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL) == CUDA_SUCCESS &&
				    cuCtxSynchronize() == CUDA_SUCCESS
			    ? 'y'
			    : 'n';
			launched = 1;
		} else if (c == 'v') {
			r = app_check(launched) && app_vmm_check() ? 'y' : 'n';
		} else if (c == 'r') {
			r = app_vmm_drop() ? 'y' : 'n';
		} else if (c == 't') {
			atomic_store(&app_stop, 0);
			for (int i = 0; i < APP_THREADS; i++) {
				hs[i] = (hammer){ .last = 0 };
				if (cuMemAlloc(&hs[i].buf, 4096 * 4) ||
				    pthread_create(&hs[i].t, NULL, app_hammer, &hs[i]))
					r = 'n';
			}
		} else if (c == 'm') {
			enum { MANY = 100000 };
			CUdeviceptr *v = calloc(MANY, sizeof(*v));
			size_t free0, free1, total;
			int made = 0;
			cuMemGetInfo(&free0, &total);
			while (v && made < MANY && cuMemAlloc(&v[made], 64) == CUDA_SUCCESS)
				made++;
			cuMemGetInfo(&free1, &total);
			uint64_t used = free0 - free1;
			r = made == MANY && used < (64u << 20) ? 'y' : 'n';
			fprintf(stderr, "# %d allocations of 64 bytes took %llu bytes of device memory\n", made,
				(unsigned long long)used);
			for (int i = 0; i < made; i++)
				cuMemFree(v[i]);
			free(v);
		} else if (c == 'k') {
			r = cuCtxSetLimit(CU_LIMIT_STACK_SIZE, APP_STACK) == CUDA_SUCCESS ? 'y' : 'n';
		} else if (c == 'K') {
			size_t v = 0;
			r = cuCtxGetLimit(&v, CU_LIMIT_STACK_SIZE) == CUDA_SUCCESS && v == APP_STACK ? 'y' : 'n';
		} else if (c == 'f') {
			r = !app_big_freed && cuMemFree(app_buf[BUF_BIG]) == CUDA_SUCCESS ? 'y' : 'n';
			app_big_freed = 1;
		} else if (c == 'n') {
			r = app_nccl() ? 'y' : 'n';
		} else if (c == 'g') {
			r = app_group() ? 'y' : 'n';
		} else if (c == 'a') {
			r = app_allreduce && app_g2 && !app_allreduce(NULL, NULL, 0, 0, 0, app_g2, NULL) ? 'y' : 'n';
		} else if (c == 'e') {
			r = app_group_end && !app_group_end() ? 'y' : 'n';
		} else if (c == 's') {
			atomic_store(&app_stop, 1);
			uint32_t errors = 0, calls = 0, lost = 0;
			for (int i = 0; i < APP_THREADS; i++) {
				pthread_join(hs[i].t, NULL);
				uint32_t first = 0;
				cuMemcpyDtoH(&first, hs[i].buf, 4);
				errors += hs[i].errors;
				calls += hs[i].last;
				lost += first != hs[i].last; /* the last call's write is there */
				cuMemFree(hs[i].buf);
			}
			r = errors == 0 && lost == 0 && calls > 0 ? 'y' : 'n';
			fprintf(stderr, "# %u calls by %d threads, %u failed, %u lost\n", calls, APP_THREADS, errors, lost);
		}
		if (write(fd, &r, 1) != 1)
			return 1;
	}
	return 0;
}

#endif
