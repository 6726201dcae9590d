/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * h2d-ring: the restore fill's copies to the GPU without its reads. Each
 * of THREADS threads has a stream and a ring of PIECES pinned pieces of
 * KIB KiB, and copies its share of MIB MiB to device memory a piece at a
 * time, as engine/fill.c's fill does: before a piece is reused, it waits
 * for the copy that last used it (a blocking-sync event). With `write`,
 * each thread first writes every piece from memory of its own (as the
 * fill's read does), so the CPUs' writes and the GPU's reads share the
 * memory bus; with `write-nt` it writes them with non-temporal stores
 * (SSE2 streaming stores, around the CPU's caches, then a fence), so the
 * GPU reads pieces that no CPU cache holds; with `read` each thread
 * preads every piece from its share of the file H2D_RING_FILE (in the
 * page cache: the fill's read, without its check), and with `read+hash`
 * it also hashes each 4 MiB of it with XXH3-128 in 256 KiB steps right
 * after their read (the fill's read and check, image-format/hash.c);
 * with `none` the pieces are only copied.
 *
 *   h2d-ring MIB THREADS PIECES KIB none|write|write-nt|read|read+hash
 *
 * prints "h2d-ring threads T ring PxK mode M GB/s X wait_s W" (the best
 * of three rounds; W: the threads' time waiting for a piece, summed).
 * H2D_RING_STREAMS=N has the threads share N streams (thread i queues on
 * stream i mod N; the line then ends "streams N") rather than one each;
 * W then also counts a thread's wait behind the others' copies.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "cuda-bench.h"

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#define SOURCE (16u << 20) /* what a writing thread copies from, over and over */
#define CHUNK (4u << 20)   /* read+hash: the bytes of one checksum */
#define STEP (256u << 10)  /* read+hash: read, then hashed while in the cache */

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
	int nt;          /* write them with non-temporal stores */
	int fd;          /* read: the file the pieces are read from; else -1 */
	off_t off;       /* where this thread's share of it starts */
	int hash;        /* read+hash: hash what is read */
	XXH3_state_t *st;
	uint64_t sink;   /* the hashes, so that they are not optimised away */
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

/* Copies len bytes (a multiple of 64; both 16-byte aligned) around the
 * CPU's caches. */
static void copy_nt(char *dst, const char *src, size_t len)
{
#if defined(__x86_64__)
	for (size_t i = 0; i < len; i += 64) {
		__m128i a = _mm_load_si128((const __m128i *)(src + i));
		__m128i b = _mm_load_si128((const __m128i *)(src + i + 16));
		__m128i c = _mm_load_si128((const __m128i *)(src + i + 32));
		__m128i d = _mm_load_si128((const __m128i *)(src + i + 48));
		_mm_stream_si128((__m128i *)(dst + i), a);
		_mm_stream_si128((__m128i *)(dst + i + 16), b);
		_mm_stream_si128((__m128i *)(dst + i + 32), c);
		_mm_stream_si128((__m128i *)(dst + i + 48), d);
	}
	_mm_sfence();
#else
	memcpy(dst, src, len);
#endif
}

static void read_all(int fd, char *p, size_t len, off_t off)
{
	while (len) {
		ssize_t n = pread(fd, p, len, off);
		if (n <= 0) {
			perror("h2d-ring: pread");
			exit(2);
		}
		p += n;
		len -= (size_t)n;
		off += n;
	}
}

/* Reads the piece at `at` of w's share into p; with hash, in steps that
 * it hashes as they come, a checksum every CHUNK bytes. */
static void read_piece(worker *w, char *p, size_t at, size_t len)
{
	if (!w->hash) {
		read_all(w->fd, p, len, w->off + (off_t)at);
		return;
	}
	for (size_t i = 0; i < len; i += STEP) {
		size_t n = len - i < STEP ? len - i : STEP;
		if ((at + i) % CHUNK == 0)
			XXH3_128bits_reset(w->st);
		read_all(w->fd, p + i, n, w->off + (off_t)(at + i));
		XXH3_128bits_update(w->st, p + i, n);
		if ((at + i + n) % CHUNK == 0 || at + i + n == w->bytes)
			w->sink += XXH3_128bits_digest(w->st).low64;
	}
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
		if (w->fd >= 0) {
			read_piece(w, p, at, len);
		} else if (w->src) {
			if (from + len > SOURCE)
				from = 0;
			if (w->nt)
				copy_nt(p, w->src + from, len);
			else
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
	static const char *modes[] = { "none", "write", "write-nt", "read", "read+hash" };
	int mode = -1;
	for (int i = 0; argc == 6 && i < 5; i++)
		if (!strcmp(argv[5], modes[i]))
			mode = i;
	if (mode < 0) {
		fprintf(stderr, "usage: h2d-ring MIB THREADS PIECES KIB none|write|write-nt|read|read+hash\n");
		return 2;
	}
	size_t bytes = (size_t)strtoull(argv[1], NULL, 10) << 20;
	int threads = atoi(argv[2]), pieces = atoi(argv[3]);
	size_t piece = (size_t)strtoull(argv[4], NULL, 10) << 10;
	if (threads < 1 || threads > 256 || pieces < 1 || pieces > 1024 || !piece || !bytes ||
	    ((mode == 1 || mode == 2) && piece > SOURCE)) {
		fprintf(stderr, "h2d-ring: bad sizes\n");
		return 2;
	}
	int fd = -1;
	if (mode >= 3) {
		const char *file = getenv("H2D_RING_FILE");
		fd = file ? open(file, O_RDONLY) : -1;
		struct stat st;
		if (fd < 0 || fstat(fd, &st) != 0 || (size_t)st.st_size < bytes) {
			fprintf(stderr, "h2d-ring: %s needs H2D_RING_FILE, a file of MIB MiB at least\n", argv[5]);
			return 2;
		}
		if (mode == 4 && piece % STEP && CHUNK % piece) {
			fprintf(stderr, "h2d-ring: read+hash needs pieces of a multiple of 256 KiB, or that divide 4 MiB\n");
			return 2;
		}
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
		w[i].nt = mode == 2;
		w[i].fd = fd;
		w[i].off = (off_t)(i * share);
		w[i].hash = mode == 4;
		if (w[i].hash && !(w[i].st = XXH3_createState()))
			return 2;
		setup(&w[i], mode == 1 || mode == 2, nstreams > 0 ? streams[i % nstreams] : NULL);
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
	uint64_t sink = 0;
	for (int i = 0; i < threads; i++) {
		sink ^= w[i].sink;
		XXH3_freeState(w[i].st);
		teardown(&w[i], nstreams <= 0);
	}
	if (fd >= 0)
		close(fd);
	if (sink == 1) /* never, but the hashes are used */
		printf("\n");
	for (int i = 0; i < nstreams; i++)
		cuStreamDestroy(streams[i]);
	free(streams);
	free(w);
	cuMemFree(d);
	return 0;
}
