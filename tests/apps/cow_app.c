/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * cow_app: a deterministic CUDA program for checking that a checkpoint
 * holds exactly the device state at t1, whenever t1 falls.
 *
 *   cow_app CUBIN [MIB] [SEED]
 *
 * It keeps NBUF device buffers (about MIB MiB in all; default 24) and a
 * copy of each in host memory, and runs operations on them, one after
 * another, on one stream, for ever; after queueing each, it applies the
 * same operation to its host copies. The operations, chosen by SEED and
 * the operation's number, are the harness of the CoW checkpoint:
 *   - mix:     a kernel reads one buffer and writes another;
 *   - bump:    a kernel rewrites a buffer;
 *   - scatter: a kernel writes every buffer through a device-resident
 *              array of pointers (unsigned**): speculation cannot bound
 *              its write set, so CoW must hold it (the safety net);
 *   - memset, a 2D memset of a rectangle, and a copy from the host into
 *     part of a buffer;
 *   - memops:  cuStreamWriteValue32, a 64-bit write of cuStreamBatchMemOp
 *              and a cuMemcpyBatchAsync of a range of one buffer into
 *              another;
 *   - realloc: a buffer is freed and allocated again (perhaps at its old
 *              address, perhaps of another size), set, and the pointer
 *              array updated.
 *
 * On SIGUSR1 it waits for the stream and compares every device buffer
 * byte for byte with its host copy, and prints "verify ok ops N" or
 * "verify FAILED …". Its host memory is checkpointed with the device
 * memory, so a restored copy verifies the image against the host state
 * at t1, and every operation after it. It prints "ops N" every 200.
 *
 * It uses the driver API, so it runs on a GPU and on simcuda, whose host
 * implementations of the kernels are the simcuda_kernel_* functions here.
 */
#include <cuda.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "simcuda/simcuda.h"

#define APP_NAME "cow_app"
#include "app.h"

#define NBUF 8
#define SCATTER_WORDS 256u /* every buffer has at least this many words */

/* ---- the kernels, on the host ------------------------------------------- */

static void host_mix(const uint32_t *src, uint32_t *dst, uint64_t n, uint32_t k)
{
	for (uint64_t i = 0; i < n; i++)
		dst[i] = src[i] * 2654435761u + k + (uint32_t)i;
}

static void host_bump(uint32_t *p, uint64_t n, uint32_t k)
{
	for (uint64_t i = 0; i < n; i++)
		p[i] = (p[i] ^ (k * 0x9E3779B9u)) + (uint32_t)i;
}

static void host_scatter(uint32_t **ptrs, uint32_t nptrs, uint32_t n, uint32_t k)
{
	for (uint32_t j = 0; j < nptrs; j++)
		for (uint32_t i = 0; i < n; i++)
			ptrs[j][i] += k + j;
}

/* simcuda runs these for the kernels (device pointers are host addresses). */
#define ARG(l, i, T) (*(T *)(l)->params[i])
void simcuda_kernel__Z3mixPKjPjyj(const simcuda_launch *l);
void simcuda_kernel__Z3mixPKjPjyj(const simcuda_launch *l)
{
	host_mix(ARG(l, 0, const uint32_t *), ARG(l, 1, uint32_t *), ARG(l, 2, unsigned long long),
		 ARG(l, 3, unsigned));
}
void simcuda_kernel__Z4bumpPjyj(const simcuda_launch *l);
void simcuda_kernel__Z4bumpPjyj(const simcuda_launch *l)
{
	host_bump(ARG(l, 0, uint32_t *), ARG(l, 1, unsigned long long), ARG(l, 2, unsigned));
}
void simcuda_kernel__Z7scatterPPjjjj(const simcuda_launch *l);
void simcuda_kernel__Z7scatterPPjjjj(const simcuda_launch *l)
{
	host_scatter(ARG(l, 0, uint32_t **), ARG(l, 1, unsigned), ARG(l, 2, unsigned), ARG(l, 3, unsigned));
}

/* ---- the program ----------------------------------------------------------- */

typedef struct buffer {
	CUdeviceptr d;
	uint64_t words;
	uint32_t *h; /* the host copy */
} buffer;

static buffer bufs[NBUF];
static CUdeviceptr ptrs; /* NBUF device pointers, for scatter */
static CUstream stream;
static int memops64;         /* the device takes 64-bit stream memory operations */
static int batch_copies = 1; /* cuMemcpyBatchAsync works here */
static CUfunction f_mix, f_bump, f_scatter;
static uint64_t unit_words; /* buffer sizes are multiples of this */
static uint32_t seed;

static uint32_t rnd(uint64_t op, uint32_t salt)
{
	uint64_t x = (op + 1) * 0x9E3779B97F4A7C15ull ^ ((uint64_t)seed << 32 | salt);
	x ^= x >> 31;
	x *= 0xBF58476D1CE4E5B9ull;
	x ^= x >> 27;
	return (uint32_t)(x >> 16);
}

/* Words of buffer i when (re)allocated with salt r: from a quarter of a
 * unit to two and a half units, never below SCATTER_WORDS. */
static uint64_t words_for(uint32_t r)
{
	uint64_t w = unit_words / 4 + (uint64_t)r % (unit_words * 9 / 4);
	return w < SCATTER_WORDS ? SCATTER_WORDS : w;
}

static void set_ptrs(void)
{
	CUdeviceptr v[NBUF];
	for (int i = 0; i < NBUF; i++)
		v[i] = bufs[i].d;
	check(cuMemcpyHtoD(ptrs, v, sizeof(v)), "updating the pointer array");
}

static void alloc_buffer(int i, uint64_t words, uint32_t value)
{
	buffer *b = &bufs[i];
	check(cuMemAlloc(&b->d, words * 4), "cuMemAlloc");
	b->words = words;
	b->h = realloc(b->h, words * 4);
	if (!b->h) {
		printf("cow_app: out of host memory\n");
		exit(2);
	}
	check(cuMemsetD32Async(b->d, value, words, stream), "cuMemsetD32Async");
	for (uint64_t k = 0; k < words; k++)
		b->h[k] = value;
}

static void launch(CUfunction f, uint64_t n, void **args)
{
	unsigned grid = (unsigned)((n + 255) / 256);
	check(cuLaunchKernel(f, grid ? grid : 1, 1, 1, 256, 1, 1, 0, stream, args, NULL), "cuLaunchKernel");
}

/* Queues operation op, and applies it to the host copies. */
static void run_op(uint64_t op)
{
	uint32_t kind = rnd(op, 1) % 10, a = rnd(op, 2) % NBUF, b = rnd(op, 3) % NBUF, k = rnd(op, 4);
	buffer *A = &bufs[a], *B = &bufs[b];
	switch (kind) {
	case 0:
	case 1: { /* mix a -> b */
		if (a == b)
			B = &bufs[(b + 1) % NBUF];
		unsigned long long n = A->words < B->words ? A->words : B->words;
		void *args[] = { &A->d, &B->d, &n, &k };
		launch(f_mix, n, args);
		host_mix(A->h, B->h, n, k);
		break;
	}
	case 2:
	case 3: { /* bump a */
		unsigned long long n = A->words;
		void *args[] = { &A->d, &n, &k };
		launch(f_bump, n, args);
		host_bump(A->h, n, k);
		break;
	}
	case 4: { /* scatter through the pointer array */
		unsigned nptrs = NBUF, n = SCATTER_WORDS;
		void *args[] = { &ptrs, &nptrs, &n, &k };
		launch(f_scatter, n, args);
		uint32_t *hp[NBUF];
		for (int i = 0; i < NBUF; i++)
			hp[i] = bufs[i].h;
		host_scatter(hp, NBUF, n, k);
		break;
	}
	case 5: { /* memset a range of a */
		uint64_t at = rnd(op, 5) % A->words, n = 1 + rnd(op, 6) % (A->words - at);
		check(cuMemsetD32Async(A->d + at * 4, k, n, stream), "cuMemsetD32Async");
		for (uint64_t i = 0; i < n; i++)
			A->h[at + i] = k;
		break;
	}
	case 6: { /* host to device into a range of a (synchronous) */
		uint64_t at = rnd(op, 5) % A->words, n = 1 + rnd(op, 6) % (A->words - at);
		if (n > 65536)
			n = 65536;
		static uint32_t src[65536];
		for (uint64_t i = 0; i < n; i++)
			src[i] = k ^ (uint32_t)i;
		check(cuStreamSynchronize(stream), "cuStreamSynchronize");
		check(cuMemcpyHtoD(A->d + at * 4, src, n * 4), "cuMemcpyHtoD");
		memcpy(A->h + at, src, n * 4);
		break;
	}
	case 7: { /* a 2D set: rows of 1024 words, a rectangle of them */
		const uint64_t pitch = 1024;
		uint64_t rows = A->words / pitch;
		if (!rows)
			break;
		uint64_t r0 = rnd(op, 5) % rows, h = 1 + rnd(op, 6) % (rows - r0), w = 1 + rnd(op, 7) % pitch;
		check(cuMemsetD2D32Async(A->d + r0 * pitch * 4, pitch * 4, k, w, h, stream), "cuMemsetD2D32Async");
		for (uint64_t r = 0; r < h; r++)
			for (uint64_t i = 0; i < w; i++)
				A->h[(r0 + r) * pitch + i] = k;
		break;
	}
	case 8: { /* stream memory operations, and a batched copy of b into a */
		uint64_t at = rnd(op, 5) % A->words;
		check(cuStreamWriteValue32(stream, A->d + at * 4, k, 0), "cuStreamWriteValue32");
		A->h[at] = k;
		if (memops64) {
			uint64_t w = rnd(op, 6) % (A->words / 2) * 2, v = (uint64_t)~k << 32 | k;
			CUstreamBatchMemOpParams p;
			memset(&p, 0, sizeof(p));
			p.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
			p.writeValue.address = A->d + w * 4;
			p.writeValue.value64 = v;
			check(cuStreamBatchMemOp(stream, 1, &p, 0), "cuStreamBatchMemOp");
			memcpy(A->h + w, &v, 8);
		}
		if (batch_copies && a != b) {
			uint64_t most = A->words < B->words ? A->words : B->words;
			uint64_t n = 1 + rnd(op, 7) % most, to = rnd(op, 8) % (A->words - n + 1),
				 from = rnd(op, 9) % (B->words - n + 1);
			CUdeviceptr d = A->d + to * 4, src = B->d + from * 4;
			size_t bytes = n * 4, idx = 0;
			CUmemcpyAttributes attr;
			memset(&attr, 0, sizeof(attr));
			attr.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
			CUresult r = cuMemcpyBatchAsync(&d, &src, &bytes, 1, &attr, &idx, 1, stream);
			if (r == CUDA_ERROR_NOT_SUPPORTED) {
				printf("cow_app: cuMemcpyBatchAsync is not supported here; it is left out\n");
				batch_copies = 0;
				break;
			}
			check(r, "cuMemcpyBatchAsync");
			memmove(A->h + to, B->h + from, bytes);
		}
		break;
	}
	default: { /* realloc a: free, allocate (maybe another size), set */
		check(cuStreamSynchronize(stream), "cuStreamSynchronize");
		check(cuMemFree(A->d), "cuMemFree");
		uint64_t words = rnd(op, 7) % 2 ? A->words : words_for(rnd(op, 8));
		alloc_buffer((int)a, words, k);
		check(cuStreamSynchronize(stream), "cuStreamSynchronize");
		set_ptrs();
		break;
	}
	}
}

static int verify(uint64_t ops)
{
	check(cuStreamSynchronize(stream), "cuStreamSynchronize");
	for (int i = 0; i < NBUF; i++) {
		uint32_t *got = malloc(bufs[i].words * 4);
		if (!got)
			exit(2);
		check(cuMemcpyDtoH(got, bufs[i].d, bufs[i].words * 4), "cuMemcpyDtoH");
		for (uint64_t w = 0; w < bufs[i].words; w++) {
			if (got[w] != bufs[i].h[w]) {
				printf("verify FAILED ops %llu: buffer %d word %llu of %llu is %08x, not %08x\n",
				       (unsigned long long)ops, i, (unsigned long long)w,
				       (unsigned long long)bufs[i].words, got[w], bufs[i].h[w]);
				fflush(stdout);
				free(got);
				return 0;
			}
		}
		free(got);
	}
	printf("verify ok ops %llu\n", (unsigned long long)ops);
	fflush(stdout);
	return 1;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: cow_app CUBIN [MIB] [SEED]\n");
		return 2;
	}
	uint64_t mib = argc > 2 ? strtoull(argv[2], NULL, 10) : 24;
	seed = argc > 3 ? (uint32_t)strtoul(argv[3], NULL, 10) : 1;
	unit_words = (mib << 20) / 4 / NBUF;
	if (unit_words < 4 * SCATTER_WORDS)
		unit_words = 4 * SCATTER_WORDS;
	signal(SIGUSR1, on_usr1);
	setvbuf(stdout, NULL, _IOLBF, 0);
	CUdevice dev;
	CUcontext ctx;
	CUmodule mod;
	check(cuInit(0), "cuInit");
	check(cuDeviceGet(&dev, 0), "cuDeviceGet");
	check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
	check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
	check(cuModuleLoad(&mod, argv[1]), "cuModuleLoad");
	check(cuModuleGetFunction(&f_mix, mod, "_Z3mixPKjPjyj"), "cuModuleGetFunction mix");
	check(cuModuleGetFunction(&f_bump, mod, "_Z4bumpPjyj"), "cuModuleGetFunction bump");
	check(cuModuleGetFunction(&f_scatter, mod, "_Z7scatterPPjjjj"), "cuModuleGetFunction scatter");
	check(cuDeviceGetAttribute(&memops64, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, dev),
	      "cuDeviceGetAttribute");
	check(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
	check(cuMemAlloc(&ptrs, NBUF * sizeof(CUdeviceptr)), "cuMemAlloc");
	for (int i = 0; i < NBUF; i++)
		alloc_buffer(i, words_for(rnd(~0ull - (uint64_t)i, 9)), 0x1000u + (uint32_t)i);
	check(cuStreamSynchronize(stream), "cuStreamSynchronize");
	set_ptrs();
	printf("cow_app: %d buffers, seed %u\n", NBUF, seed);
	for (uint64_t op = 0;; op++) {
		if (verify_asked) {
			verify_asked = 0;
			if (!verify(op))
				return 1;
		}
		run_op(op);
		if ((op + 1) % 200 == 0)
			printf("ops %llu\n", (unsigned long long)(op + 1));
		/* A pace the copy can overlap: about a thousand operations a second. */
		struct timespec ts = { 0, 1000000 };
		nanosleep(&ts, NULL);
	}
}
