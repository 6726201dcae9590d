/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Four threads store the chunks of eight objects at once, each in its own
 * shuffled order, with and without lz4; the image reads back whole.
 */
#include <pthread.h>

#include "imgtest.h"

#define CHUNK (256u << 10)
#define NOBJ 8
#define THREADS 4

static uint64_t sizes[NOBJ];
static uint8_t *data[NOBJ];

typedef struct job {
	phosimg_writer *w;
	int t;
	int err;
} job;

static void *worker(void *arg)
{
	job *j = arg;
	unsigned seed = 100u + (unsigned)j->t;
	/* Thread t stores chunks k with k % THREADS == t, of every object. */
	for (int o = 0; o < NOBJ && !j->err; o++) {
		uint64_t n = sizes[o] / CHUNK + (sizes[o] % CHUNK != 0), *perm = malloc(n * sizeof(*perm));
		shuffle(perm, n, &seed);
		for (uint64_t k = 0; k < n && !j->err; k++) {
			uint64_t c = perm[k];
			if (c % THREADS != (uint64_t)j->t)
				continue;
			uint64_t off = c * CHUNK, len = sizes[o] - off < CHUNK ? sizes[o] - off : CHUNK;
			j->err = phosimg_writer_put(j->w, (uint32_t)o, off, data[o] + off, (size_t)len);
		}
		free(perm);
	}
	return NULL;
}

int main(void)
{
	plan(6);
	char *dir = scratch_dir("threads");
	for (int o = 0; o < NOBJ; o++) {
		sizes[o] = (uint64_t)(o + 1) * 3 * CHUNK + (uint64_t)o * 4097;
		data[o] = malloc(sizes[o]);
		fill(data[o], sizes[o], (uint64_t)o + 10, o % 2);
	}
	for (int lz4 = 0; lz4 < 2; lz4++) {
		char path[PATH_MAX];
		snprintf(path, sizeof(path), "%s/img%d", dir, lz4);
		phosimg_writer *w = start_image(path, CHUNK, lz4, sizes, NOBJ, 0x100000000ull);
		pthread_t t[THREADS];
		job j[THREADS];
		for (int i = 0; i < THREADS; i++) {
			j[i] = (job){ w, i, 0 };
			pthread_create(&t[i], NULL, worker, &j[i]);
		}
		int errs = 0;
		for (int i = 0; i < THREADS; i++) {
			pthread_join(t[i], NULL);
			errs += j[i].err != 0;
		}
		ok(errs == 0 && phosimg_writer_finish(w) == 0, "%s: %d threads store every chunk and the image is published",
		   lz4 ? "lz4" : "raw", THREADS);
		phosimg *img;
		int same = phosimg_open(path, &img) == 0;
		for (int o = 0; same && o < NOBJ; o++)
			same = reads_back(img, (uint32_t)o, data[o], sizes[o]);
		ok(same, "%s: all %d objects read back byte for byte", lz4 ? "lz4" : "raw", NOBJ);
		ok(same && phosimg_verify(img) == 0, "%s: the image verifies", lz4 ? "lz4" : "raw");
		if (same)
			phosimg_close(img);
	}
	for (int o = 0; o < NOBJ; o++)
		free(data[o]);
	rm_rf(dir);
	free(dir);
	return done();
}
