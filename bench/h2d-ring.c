/*
 * h2d-ring: the restore fill's copies to the GPU without its reads. Each
 * of THREADS threads has a stream and a ring of PIECES pinned pieces of
 * KIB KiB, and copies its share of MIB MiB to device memory a piece at a
 * time, as engine/copy.c's fill does: before a piece is reused, it waits
 * for the copy that last used it (a blocking-sync event). With `write`,
 * each thread first writes every piece from memory of its own (as the
 * fill's read does), so the CPUs' writes and the GPU's reads share the
 * memory bus; with `none` the pieces are only copied.
 *
 *   h2d-ring MIB THREADS PIECES KIB none|write
 *
 * prints "h2d-ring threads T ring PxK mode M GB/s X wait_s W" (the best
 * of three rounds; W: the threads' time waiting for a piece, summed).
 * H2D_RING_STREAMS=N has the threads share N streams (thread i queues on
 * stream i mod N; the line then ends "streams N") rather than one each;
 * W then also counts a thread's wait behind the others' copies.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda-bench.h"

#define SOURCE (16u << 20) /* what a writing thread copies from, over and over */

typedef struct worker {
	pthread_t th;
	CUcontext ctx;
	CUdeviceptr dst;
	size_t bytes, piece;
	int pieces;
	CUstream s;
	char *ring;      /* pieces x piece, pinned */
	CUevent *done;   /* each piece's last copy */
	char *src;       /* write: what the pieces are written from */
	double wait_s;
} worker;

/* Makes w's stream, ring, events and source, outside the timed rounds. */
static void setup(worker *w, int write, CUstream shared)
{
	if (shared)
		w->s = shared;
	else
		check(cuStreamCreate(&w->s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
	check(cuMemAllocHost((void **)&w->ring, (size_t)w->pieces * w->piece), "cuMemAllocHost");
	w->done = calloc((size_t)w->pieces, sizeof(*w->done));
	w->src = write ? malloc(SOURCE) : NULL;
	if (!w->done || (write && !w->src)) {
		fprintf(stderr, "h2d-ring: out of memory\n");
		exit(2);
	}
	if (w->src)
		memset(w->src, 7, SOURCE);
	memset(w->ring, 7, (size_t)w->pieces * w->piece);
	for (int i = 0; i < w->pieces; i++)
		check(cuEventCreate(&w->done[i], CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING), "cuEventCreate");
}

static void teardown(worker *w, int own_stream)
{
	for (int i = 0; i < w->pieces; i++)
		cuEventDestroy(w->done[i]);
	if (own_stream)
		cuStreamDestroy(w->s);
	cuMemFreeHost(w->ring);
	free(w->done);
	free(w->src);
}

static void *run(void *arg)
{
	worker *w = arg;
	check(cuCtxSetCurrent(w->ctx), "cuCtxSetCurrent");
	size_t from = 0;
	w->wait_s = 0;
	for (size_t at = 0, k = 0; at < w->bytes; at += w->piece, k++) {
		int i = (int)(k % (size_t)w->pieces);
		char *p = w->ring + (size_t)i * w->piece;
		size_t len = w->bytes - at < w->piece ? w->bytes - at : w->piece;
		if (k >= (size_t)w->pieces) {
			double t0 = now();
			check(cuEventSynchronize(w->done[i]), "cuEventSynchronize");
			w->wait_s += now() - t0;
		}
		if (w->src) {
			if (from + len > SOURCE)
				from = 0;
			memcpy(p, w->src + from, len);
			from += len;
		}
		check(cuMemcpyHtoDAsync(w->dst + at, p, len, w->s), "cuMemcpyHtoDAsync");
		check(cuEventRecord(w->done[i], w->s), "cuEventRecord");
	}
	for (int i = 0; i < w->pieces; i++)
		check(cuEventSynchronize(w->done[i]), "cuEventSynchronize");
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 6 || (strcmp(argv[5], "none") && strcmp(argv[5], "write"))) {
		fprintf(stderr, "usage: h2d-ring MIB THREADS PIECES KIB none|write\n");
		return 2;
	}
	size_t bytes = (size_t)strtoull(argv[1], NULL, 10) << 20;
	int threads = atoi(argv[2]), pieces = atoi(argv[3]);
	size_t piece = (size_t)strtoull(argv[4], NULL, 10) << 10;
	if (threads < 1 || threads > 256 || pieces < 1 || pieces > 1024 || !piece || !bytes) {
		fprintf(stderr, "h2d-ring: bad sizes\n");
		return 2;
	}
	CUcontext ctx = primary_context();
	CUdeviceptr d;
	check(cuMemAlloc(&d, bytes), "cuMemAlloc");
	/* Each thread its share, in whole pieces. */
	size_t share = bytes / (size_t)threads / piece * piece;
	if (!share) {
		fprintf(stderr, "h2d-ring: %s MiB is less than a piece a thread\n", argv[1]);
		return 2;
	}
	worker *w = calloc((size_t)threads, sizeof(*w));
	const char *ns = getenv("H2D_RING_STREAMS");
	int nstreams = ns ? atoi(ns) : 0;
	CUstream *streams = calloc(nstreams > 0 ? (size_t)nstreams : 1, sizeof(*streams));
	if (!w || !streams)
		return 2;
	for (int i = 0; i < nstreams; i++)
		check(cuStreamCreate(&streams[i], CU_STREAM_NON_BLOCKING), "cuStreamCreate");
	for (int i = 0; i < threads; i++) {
		w[i] = (worker){ .ctx = ctx, .dst = d + (size_t)i * share, .bytes = share, .piece = piece,
				 .pieces = pieces };
		setup(&w[i], !strcmp(argv[5], "write"), nstreams > 0 ? streams[i % nstreams] : NULL);
	}
	double best = 0, best_wait = 0;
	for (int round = 0; round < 3; round++) {
		double t0 = now();
		for (int i = 0; i < threads; i++) {
			if (pthread_create(&w[i].th, NULL, run, &w[i])) {
				fprintf(stderr, "h2d-ring: cannot start a thread\n");
				return 2;
			}
		}
		double wait = 0;
		for (int i = 0; i < threads; i++) {
			pthread_join(w[i].th, NULL);
			wait += w[i].wait_s;
		}
		double gbs = (double)(share * (size_t)threads) / (now() - t0) / 1e9;
		if (gbs > best) {
			best = gbs;
			best_wait = wait;
		}
	}
	printf("h2d-ring threads %d ring %dx%zu mode %s GB/s %.1f wait_s %.2f", threads, pieces, piece >> 10, argv[5],
	       best, best_wait);
	if (nstreams > 0)
		printf(" streams %d", nstreams);
	printf("\n");
	for (int i = 0; i < threads; i++)
		teardown(&w[i], nstreams <= 0);
	for (int i = 0; i < nstreams; i++)
		cuStreamDestroy(streams[i]);
	free(streams);
	free(w);
	cuMemFree(d);
	return 0;
}
