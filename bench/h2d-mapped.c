/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * h2d-mapped: the restore fill's copies straight out of the store's page
 * cache, with no CPU copy into pinned memory. FILE (an image's gpu.data,
 * or any file) is mapped read-only; each of THREADS threads takes
 * CHUNK_MIB pieces of it in turn, registers each with the driver
 * (cuMemHostRegister, read-only: the page cache pages are pinned and
 * mapped for the GPU's DMA), copies it to device memory, and unregisters
 * it. MODE says what else happens:
 *   reg       only that;
 *   reg+hash  the CPU also computes the chunk's XXH3-128 while its copy
 *             runs (the fill's check, which reads each byte once);
 *   whole     the whole file is registered at once, then chunks are
 *             copied and hashed, then it is unregistered;
 *   seg       the file is registered in segments of SEG_MIB (a multiple
 *             of CHUNK_MIB, so that no copy spans two), each by
 *             the first thread that needs it, and unregistered at the
 *             end of the round (both timed); chunks are copied and
 *             hashed;
 *   hash      the CPU hashes the chunks, with no copy (the check alone);
 *   par       each thread registers a 1/THREADS share of the file, all at
 *             once (with H2D_MAPPED_POPULATE=1 it first faults its share
 *             in, MADV_POPULATE_READ), then chunks are copied and hashed,
 *             then each unregisters its share: whether registering runs
 *             in parallel.
 * A thread keeps DEPTH (default 2) chunks in flight: it registers and
 * queues the next before it waits for the oldest.
 *
 *   h2d-mapped FILE THREADS CHUNK_MIB MODE [SEG_MIB [DEPTH]]
 *
 * prints "h2d-mapped threads T chunk C seg S depth D mode M GB/s X reg_s
 * R unreg_s U queue_s Q wait_s W hash_s H" (the best of three rounds; R,
 * U, Q, W, H the threads' time registering, unregistering, queueing
 * copies, waiting for them and hashing, summed over them), then "verify
 * ok" when 16 samples of device memory read back equal the file. Each
 * round maps the file afresh and counts the mapping, registrations and
 * unregistrations. The file's first 4096 bytes (gpu.data's header) are
 * skipped.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "cuda-bench.h"

#define DEPTH_MAX 8

enum { REG, REG_HASH, WHOLE, SEG, HASH, PAR };

typedef struct shared {
	CUcontext ctx;
	CUdeviceptr dst;
	const char *base; /* the mapping, from the file's byte 4096 */
	size_t bytes, chunk, seg;
	int mode, depth;
	pthread_mutex_t lock; /* guards segs */
	pthread_cond_t made;
	char *segs;           /* SEG: each segment's state: 0 none, 1 being registered, 2 registered */
	pthread_barrier_t all; /* PAR: every share registered */
	int threads, populate;
	_Atomic size_t next; /* the next chunk's offset */
	_Atomic unsigned long long sink; /* keeps the hashes */
} shared;

typedef struct worker {
	pthread_t th;
	shared *sh;
	CUstream s;
	CUevent done[DEPTH_MAX];
	double reg_s, unreg_s, queue_s, wait_s, hash_s;
	double start, end; /* when it started and ended its work */
	int idx;
} worker;

typedef struct flight {
	const char *p;
	size_t len;
	int busy;
} flight;

static void land(worker *w, flight *f, CUevent e)
{
	if (!f->busy)
		return;
	double t0 = now();
	check(cuEventSynchronize(e), "cuEventSynchronize");
	double t1 = now();
	w->wait_s += t1 - t0;
	if (w->sh->mode == REG || w->sh->mode == REG_HASH)
		check(cuMemHostUnregister((void *)f->p), "cuMemHostUnregister");
	w->unreg_s += now() - t1;
	f->busy = 0;
}

/* SEG: registers segment k unless it is, or waits while another thread does. */
static void seg_get(shared *sh, size_t k)
{
	pthread_mutex_lock(&sh->lock);
	while (sh->segs[k] == 1)
		pthread_cond_wait(&sh->made, &sh->lock);
	if (sh->segs[k] == 2) {
		pthread_mutex_unlock(&sh->lock);
		return;
	}
	sh->segs[k] = 1;
	pthread_mutex_unlock(&sh->lock);
	size_t at = k * sh->seg, len = sh->bytes - at < sh->seg ? sh->bytes - at : sh->seg;
	check(cuMemHostRegister((void *)(sh->base + at), len, CU_MEMHOSTREGISTER_READ_ONLY), "cuMemHostRegister");
	pthread_mutex_lock(&sh->lock);
	sh->segs[k] = 2;
	pthread_cond_broadcast(&sh->made);
	pthread_mutex_unlock(&sh->lock);
}

static void *run(void *arg)
{
	worker *w = arg;
	shared *sh = w->sh;
	w->start = now();
	check(cuCtxSetCurrent(sh->ctx), "cuCtxSetCurrent");
	flight fl[DEPTH_MAX] = { 0 };
	w->reg_s = w->unreg_s = w->queue_s = w->wait_s = w->hash_s = 0;
	/* PAR: whole chunks, so that no copy spans two registrations. */
	size_t mine = sh->bytes / (size_t)sh->threads / sh->chunk * sh->chunk, from = mine * (size_t)w->idx;
	if (w->idx == sh->threads - 1)
		mine = sh->bytes - from;
	if (sh->mode == PAR) {
		double t0 = now();
		if (sh->populate && madvise((void *)(sh->base + from), mine, MADV_POPULATE_READ))
			perror("madvise");
		check(cuMemHostRegister((void *)(sh->base + from), mine, CU_MEMHOSTREGISTER_READ_ONLY),
		      "cuMemHostRegister");
		w->reg_s = now() - t0;
		pthread_barrier_wait(&sh->all);
	}
	for (unsigned k = 0;; k++) {
		size_t at = atomic_fetch_add(&sh->next, sh->chunk);
		if (at >= sh->bytes)
			break;
		size_t len = sh->bytes - at < sh->chunk ? sh->bytes - at : sh->chunk;
		const char *p = sh->base + at;
		int i = (int)(k % (unsigned)sh->depth);
		land(w, &fl[i], w->done[i]);
		if (sh->mode != HASH) {
			double t0 = now();
			if (sh->mode == REG || sh->mode == REG_HASH)
				check(cuMemHostRegister((void *)p, len, CU_MEMHOSTREGISTER_READ_ONLY),
				      "cuMemHostRegister");
			else if (sh->mode == SEG)
				for (size_t g = at / sh->seg; g <= (at + len - 1) / sh->seg; g++)
					seg_get(sh, g);
			double t1 = now();
			w->reg_s += t1 - t0;
			check(cuMemcpyHtoDAsync(sh->dst + at, p, len, w->s), "cuMemcpyHtoDAsync");
			check(cuEventRecord(w->done[i], w->s), "cuEventRecord");
			w->queue_s += now() - t1;
			fl[i] = (flight){ .p = p, .len = len, .busy = 1 };
		}
		if (sh->mode != REG) {
			double t0 = now();
			XXH128_hash_t h = XXH3_128bits(p, len);
			atomic_fetch_add(&sh->sink, h.low64);
			w->hash_s += now() - t0;
		}
	}
	for (int i = 0; i < sh->depth; i++)
		land(w, &fl[i], w->done[i]);
	if (sh->mode == PAR) {
		pthread_barrier_wait(&sh->all);
		double t0 = now();
		check(cuMemHostUnregister((void *)(sh->base + from)), "cuMemHostUnregister");
		w->unreg_s += now() - t0;
	}
	w->end = now();
	return NULL;
}

int main(int argc, char **argv)
{
	static const char *modes[] = { "reg", "reg+hash", "whole", "seg", "hash", "par" };
	if (argc < 5 || argc > 7) {
		fprintf(stderr, "usage: h2d-mapped FILE THREADS CHUNK_MIB reg|reg+hash|whole|seg|hash|par [SEG_MIB [DEPTH]]\n");
		return 2;
	}
	int mode = -1;
	for (int m = 0; m < 6; m++)
		if (!strcmp(argv[4], modes[m]))
			mode = m;
	int threads = atoi(argv[2]), depth = argc > 6 ? atoi(argv[6]) : 2;
	size_t chunk = (size_t)strtoull(argv[3], NULL, 10) << 20;
	size_t seg = (size_t)strtoull(argc > 5 ? argv[5] : "256", NULL, 10) << 20;
	if (mode < 0 || threads < 1 || threads > 256 || !chunk || !seg || seg % chunk || depth < 1 || depth > DEPTH_MAX) {
		fprintf(stderr, "h2d-mapped: bad arguments\n");
		return 2;
	}
	int fd = open(argv[1], O_RDONLY);
	struct stat sb;
	if (fd < 0 || fstat(fd, &sb) || sb.st_size <= 4096) {
		perror(argv[1]);
		return 2;
	}
	size_t size = (size_t)sb.st_size;
	CUcontext ctx = primary_context();
	shared sh = { .ctx = ctx, .bytes = size - 4096, .chunk = chunk, .seg = seg, .mode = mode, .depth = depth };
	pthread_mutex_init(&sh.lock, NULL);
	pthread_cond_init(&sh.made, NULL);
	pthread_barrier_init(&sh.all, NULL, (unsigned)threads);
	sh.threads = threads;
	sh.populate = getenv("H2D_MAPPED_POPULATE") && *getenv("H2D_MAPPED_POPULATE") == '1';
	size_t nseg = (sh.bytes + seg - 1) / seg;
	sh.segs = calloc(nseg, 1);
	worker *w = calloc((size_t)threads, sizeof(*w));
	if (!sh.segs || !w)
		return 2;
	check(cuMemAlloc(&sh.dst, sh.bytes), "cuMemAlloc");
	for (int i = 0; i < threads; i++) {
		w[i].sh = &sh;
		w[i].idx = i;
		check(cuStreamCreate(&w[i].s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
		for (int d = 0; d < depth; d++)
			check(cuEventCreate(&w[i].done[d], CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING),
			      "cuEventCreate");
	}
	/* Each round maps the file afresh, as a restore does: its time counts
	 * the mapping's first touch, the registrations and unregistrations. */
	double best = 0, reg = 0, unreg = 0, queue = 0, wait = 0, hash = 0;
	int bad = 0;
	for (int round = 0; round < 3 && !bad; round++) {
		atomic_store(&sh.next, 0);
		memset(sh.segs, 0, nseg);
		double t0 = now();
		char *map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
		if (map == MAP_FAILED) {
			perror("mmap");
			return 2;
		}
		sh.base = map + 4096;
		double r = 0, u = 0, q = 0, wt = 0, h = 0, first = 1e30, last = 0, t_spawn;
		if (mode == WHOLE)
			check(cuMemHostRegister(map, size, CU_MEMHOSTREGISTER_READ_ONLY), "cuMemHostRegister (whole file)");
		r = now() - t0;
		t_spawn = now();
		for (int i = 0; i < threads; i++)
			if (pthread_create(&w[i].th, NULL, run, &w[i])) {
				fprintf(stderr, "h2d-mapped: cannot start a thread\n");
				return 2;
			}
		for (int i = 0; i < threads; i++) {
			pthread_join(w[i].th, NULL);
			first = w[i].start < first ? w[i].start : first;
			last = w[i].end > last ? w[i].end : last;
			r += w[i].reg_s;
			u += w[i].unreg_s;
			q += w[i].queue_s;
			wt += w[i].wait_s;
			h += w[i].hash_s;
		}
		double t1 = now();
		if (mode == WHOLE)
			check(cuMemHostUnregister(map), "cuMemHostUnregister (whole file)");
		if (mode == SEG)
			for (size_t k = 0; k < nseg; k++)
				if (sh.segs[k] == 2)
					check(cuMemHostUnregister((void *)(sh.base + k * seg)), "cuMemHostUnregister");
		u += now() - t1;
		double t_end = now(), gbs = (double)sh.bytes / (t_end - t0) / 1e9;
		if (getenv("H2D_MAPPED_TRACE"))
			fprintf(stderr, "round %d: %.3f s: before threads %.3f, first start %.3f, work ends %.3f, joined %.3f\n",
				round, t_end - t0, t_spawn - t0, first - t0, last - t0, t1 - t0);
		if (gbs > best) {
			best = gbs;
			reg = r;
			unreg = u;
			queue = q;
			wait = wt;
			hash = h;
		}
		if (mode != HASH) { /* what the device got is the file */
			size_t n = sh.bytes < (16u << 20) ? sh.bytes : (16u << 20);
			char *back = malloc(n);
			bad = !back;
			for (int k = 0; k < 16 && !bad; k++) {
				size_t at = (sh.bytes - n) / 15 * (size_t)k / 4096 * 4096;
				check(cuMemcpyDtoH(back, sh.dst + at, n), "cuMemcpyDtoH");
				bad = memcmp(back, sh.base + at, n) != 0;
			}
			free(back);
			check(cuMemsetD8(sh.dst, 0, sh.bytes), "cuMemsetD8"); /* the next round starts from zeros */
			check(cuCtxSynchronize(), "cuCtxSynchronize");
		}
		munmap(map, size);
	}
	close(fd);
	printf("h2d-mapped threads %d chunk %zu seg %zu depth %d mode %s GB/s %.1f reg_s %.2f unreg_s %.2f queue_s %.2f "
	       "wait_s %.2f hash_s %.2f%s\n",
	       threads, chunk >> 20, seg >> 20, depth, modes[mode], best, reg, unreg, queue, wait, hash,
	       mode == HASH ? "" : bad ? " verify FAILED: the device memory differs from the file" : " verify ok");
	for (int i = 0; i < threads; i++) {
		for (int d = 0; d < depth; d++)
			cuEventDestroy(w[i].done[d]);
		cuStreamDestroy(w[i].s);
	}
	free(w);
	free(sh.segs);
	cuMemFree(sh.dst);
	return bad;
}
