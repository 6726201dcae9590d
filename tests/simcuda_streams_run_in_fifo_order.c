/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Asynchronous work on two streams keeps each stream's order; events order
 * one stream after another; the default stream waits for both.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>

#include "tap.h"

#define CHUNK (1u << 20)
#define ROUNDS 64

static void check(CUresult r, const char *what)
{
	if (r != CUDA_SUCCESS)
		bail("%s failed: %d", what, (int)r);
}

/* Per-stream log of host-function sequence numbers, in execution order. */
typedef struct log {
	atomic_int n;
	int seq[ROUNDS];
} seqlog;

typedef struct mark {
	seqlog *log;
	int seq;
} mark;

static void record(void *arg)
{
	mark *m = arg;
	/* Jitter, so that a reordering stream would show it. */
	usleep((useconds_t)(rand() % 200));
	int i = atomic_fetch_add(&m->log->n, 1);
	m->log->seq[i] = m->seq;
}

static int in_order(const seqlog *l)
{
	if (atomic_load(&l->n) != ROUNDS)
		return 0;
	for (int i = 0; i < ROUNDS; i++)
		if (l->seq[i] != i)
			return 0;
	return 1;
}

static atomic_int released;
static void hold(void *arg)
{
	(void)arg;
	while (!atomic_load(&released))
		usleep(500);
}

int main(void)
{
	plan(6);
	CUdevice dev;
	CUcontext ctx;
	check(cuInit(0), "cuInit");
	check(cuDeviceGet(&dev, 0), "cuDeviceGet");
	check(cuCtxCreate(&ctx, NULL, 0, dev), "cuCtxCreate");

	CUstream s[2];
	check(cuStreamCreate(&s[0], 0), "cuStreamCreate");
	check(cuStreamCreate(&s[1], CU_STREAM_NON_BLOCKING), "cuStreamCreate");

	/* Each stream copies ROUNDS different sources into one destination in
	 * turn; the last copy must win, and host marks must come in order. */
	uint8_t *src[2][ROUNDS];
	CUdeviceptr dst[2];
	seqlog logs[2] = { 0 };
	mark marks[2][ROUNDS];
	for (int k = 0; k < 2; k++) {
		check(cuMemAlloc(&dst[k], CHUNK), "cuMemAlloc");
		for (int i = 0; i < ROUNDS; i++) {
			check(cuMemAllocHost((void **)&src[k][i], CHUNK), "cuMemAllocHost");
			memset(src[k][i], (k * ROUNDS + i) & 0xff, CHUNK);
		}
	}
	for (int i = 0; i < ROUNDS; i++) {
		for (int k = 0; k < 2; k++) {
			marks[k][i] = (mark){ &logs[k], i };
			check(cuLaunchHostFunc(s[k], record, &marks[k][i]), "cuLaunchHostFunc");
			check(cuMemcpyHtoDAsync(dst[k], src[k][i], CHUNK, s[k]), "cuMemcpyHtoDAsync");
		}
	}
	check(cuStreamSynchronize(s[0]), "sync 0");
	check(cuStreamSynchronize(s[1]), "sync 1");
	ok(in_order(&logs[0]) && in_order(&logs[1]), "work on each of two streams runs in issue order");

	uint8_t *out = malloc(CHUNK);
	int last_wins = 1;
	for (int k = 0; k < 2; k++) {
		check(cuMemcpyDtoH(out, dst[k], CHUNK), "DtoH");
		for (size_t j = 0; j < CHUNK; j++)
			last_wins &= out[j] == ((k * ROUNDS + ROUNDS - 1) & 0xff);
	}
	ok(last_wins, "so the last of %d async copies into one buffer is what the buffer holds", ROUNDS);

	/* Stream 1 waits on an event recorded on stream 0 after a held copy. */
	CUevent ev, t0, t1;
	check(cuEventCreate(&ev, 0), "cuEventCreate");
	check(cuEventCreate(&t0, 0), "cuEventCreate");
	check(cuEventCreate(&t1, 0), "cuEventCreate");
	check(cuEventRecord(t0, s[0]), "record t0");
	check(cuLaunchHostFunc(s[0], hold, NULL), "hold");
	check(cuMemsetD8Async(dst[0], 0xAB, CHUNK, s[0]), "memset");
	check(cuEventRecord(ev, s[0]), "record ev");
	check(cuEventRecord(t1, s[0]), "record t1");
	check(cuStreamWaitEvent(s[1], ev, 0), "wait ev");
	check(cuMemcpyDtoDAsync(dst[1], dst[0], CHUNK, s[1]), "DtoD");
	usleep(20000);
	ok(cuStreamQuery(s[1]) == CUDA_ERROR_NOT_READY && cuEventQuery(ev) == CUDA_ERROR_NOT_READY,
	   "a stream waiting on an event that is not yet reached is not ready");
	atomic_store(&released, 1);
	check(cuStreamSynchronize(s[1]), "sync 1");
	check(cuMemcpyDtoH(out, dst[1], CHUNK), "DtoH");
	int copied = 1;
	for (size_t j = 0; j < CHUNK; j++)
		copied &= out[j] == 0xAB;
	ok(copied, "after the event, the second stream sees the first stream's write");
	float ms = -1;
	CUresult er = cuEventElapsedTime(&ms, t0, t1);
	ok(er == CUDA_SUCCESS && ms >= 15.0f,
	   "elapsed time between events spans the held work (%.1f ms)", (double)ms);

	/* The default stream waits for all earlier work on blocking streams. */
	atomic_store(&released, 0);
	check(cuLaunchHostFunc(s[0], hold, NULL), "hold");
	check(cuMemsetD8Async(dst[0], 0x11, CHUNK, s[0]), "memset");
	atomic_store(&released, 1);
	check(cuMemcpyDtoH(out, dst[0], CHUNK), "DtoH on the default stream");
	int seen = 1;
	for (size_t j = 0; j < CHUNK; j++)
		seen &= out[j] == 0x11;
	ok(seen, "a synchronous copy is ordered after earlier work on other streams");

	for (int k = 0; k < 2; k++) {
		for (int i = 0; i < ROUNDS; i++)
			cuMemFreeHost(src[k][i]);
		cuMemFree(dst[k]);
		cuStreamDestroy(s[k]);
	}
	cuEventDestroy(ev);
	cuEventDestroy(t0);
	cuEventDestroy(t1);
	free(out);
	cuCtxDestroy(ctx);
	return done();
}
