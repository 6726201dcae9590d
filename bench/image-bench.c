/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * image-bench: times libphosimg writing or reading one image.
 *
 *   image-bench write DIR BYTES [lz4|raw] [THREADS] [ring|dram]
 *   image-bench read DIR [THREADS]
 *
 * write stores BYTES in 8 objects into a new image DIR; read reads every
 * byte of DIR back, checking every chunk. Prints one line:
 * "bytes seconds stored_bytes".
 *
 * The data imitates GPU memory: half of the chunks random (weights), half
 * sparse floats with one value in eight set (activations, fresh buffers).
 * Where the writer's input comes from:
 *   ring  a ring of 8 chunk-sized buffers, as phosfs feeds the writer from
 *         its pinned staging buffers (the default);
 *   dram  a 1 GiB pattern walked through, so that every input byte comes
 *         from memory rather than from the CPU's caches.
 * Either is generated before the clock starts.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "phosimg.h"

#define OBJECTS 8
#define PATTERN (1ull << 30)

static uint8_t *pattern;
static uint64_t pattern_size;
static bool ring;
static phosimg_writer *w;
static phosimg *img;
static uint64_t obj_size, total_chunks;
static uint32_t chunk;
static atomic_uint_fast64_t next_chunk;
static atomic_int failed;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void make_pattern(void)
{
	pattern_size = ring ? 8ull * PHOSIMG_CHUNK_DEFAULT : PATTERN;
	pattern = aligned_alloc(4096, pattern_size);
	if (!pattern) {
		fprintf(stderr, "image-bench: no memory for the pattern\n");
		exit(2);
	}
	uint64_t x = 88172645463325252ull;
	uint64_t *p = (uint64_t *)pattern;
	for (uint64_t i = 0; i < pattern_size / 8; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		uint64_t c = i * 8 / (4u << 20);
		if (c % 2 == 0)
			p[i] = x; /* random */
		else
			p[i] = (i % 4 == 0) ? (x & 0x3fffffff3fffffffull) : 0; /* sparse floats */
	}
}

/* Work is handed out one chunk at a time, to any thread. */
static void *write_worker(void *arg)
{
	(void)arg;
	for (;;) {
		uint64_t k = atomic_fetch_add(&next_chunk, 1);
		if (k >= total_chunks || atomic_load(&failed))
			return NULL;
		uint64_t per = obj_size / chunk, o = k / per, off = (k % per) * chunk;
		uint64_t src = (o * obj_size + off) % pattern_size;
		int e = phosimg_writer_put(w, (uint32_t)o, off, pattern + src, chunk);
		if (e) {
			fprintf(stderr, "image-bench: put: %s\n", phosimg_last_error());
			atomic_store(&failed, 1);
		}
	}
}

static void *read_worker(void *arg)
{
	(void)arg;
	uint8_t *buf = aligned_alloc(4096, chunk);
	for (;;) {
		uint64_t k = atomic_fetch_add(&next_chunk, 1);
		if (!buf || k >= total_chunks || atomic_load(&failed))
			break;
		uint64_t per = obj_size / chunk, o = k / per, off = (k % per) * chunk;
		int e = phosimg_read(img, (uint32_t)o, off, buf, chunk);
		if (e) {
			fprintf(stderr, "image-bench: read: %s\n", phosimg_last_error());
			atomic_store(&failed, 1);
		}
	}
	free(buf);
	return NULL;
}

static void run(void *(*fn)(void *), int threads)
{
	pthread_t t[64];
	for (int i = 0; i < threads; i++)
		pthread_create(&t[i], NULL, fn, NULL);
	for (int i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
}

int main(int argc, char **argv)
{
	if (argc >= 4 && !strcmp(argv[1], "write")) {
		uint64_t bytes = strtoull(argv[3], NULL, 0);
		bool lz4 = argc > 4 && !strcmp(argv[4], "lz4");
		int threads = argc > 5 ? atoi(argv[5]) : 1;
		ring = !(argc > 6 && !strcmp(argv[6], "dram"));
		chunk = PHOSIMG_CHUNK_DEFAULT;
		obj_size = bytes / OBJECTS / chunk * chunk;
		total_chunks = obj_size / chunk * OBJECTS;
		if (!obj_size || threads < 1 || threads > 64)
			return 2;
		make_pattern();
		/* One data file per writer thread, as phosfs writes. */
		phosimg_writer_opts o = { .chunk_size = chunk, .lz4 = lz4, .stripes = (uint32_t)threads };
		double t0 = now();
		if (phosimg_writer_create(argv[2], &o, &w)) {
			fprintf(stderr, "image-bench: %s\n", phosimg_last_error());
			return 1;
		}
		for (int i = 0; i < OBJECTS; i++) {
			phosimg_object ob = { .va = 0x7f0000000000ull + (uint64_t)i * obj_size, .size = obj_size };
			uint32_t id;
			phosimg_writer_add_object(w, &ob, &id);
		}
		run(write_worker, threads);
		uint64_t stored = phosimg_writer_stored_bytes(w);
		if (atomic_load(&failed) || phosimg_writer_finish(w)) {
			fprintf(stderr, "image-bench: %s\n", phosimg_last_error());
			return 1;
		}
		printf("%llu %.4f %llu\n", (unsigned long long)(obj_size * OBJECTS), now() - t0, (unsigned long long)stored);
		return 0;
	}
	if (argc >= 3 && !strcmp(argv[1], "read")) {
		int threads = argc > 3 ? atoi(argv[3]) : 1;
		double t0 = now();
		if (phosimg_open(argv[2], &img)) {
			fprintf(stderr, "image-bench: %s\n", phosimg_last_error());
			return 1;
		}
		const phosimg_info *in = phosimg_get_info(img);
		chunk = in->chunk_size;
		obj_size = in->objects[0].size;
		total_chunks = obj_size / chunk * in->object_count;
		run(read_worker, threads < 1 ? 1 : threads);
		if (atomic_load(&failed))
			return 1;
		printf("%llu %.4f %llu\n", (unsigned long long)in->raw_bytes, now() - t0,
		       (unsigned long long)in->stored_bytes);
		phosimg_close(img);
		return 0;
	}
	fprintf(stderr, "usage: image-bench write DIR BYTES [lz4|raw] [THREADS] [ring|dram]\n"
			"       image-bench read DIR [THREADS]\n");
	return 2;
}
