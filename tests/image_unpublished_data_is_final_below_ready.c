/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * While four threads store chunks, a reader follows the unpublished
 * gpu.data up to phosimg_writer_data_ready, as phosfs does for a copy
 * taken during a checkpoint. What it read must be what is published.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "imgtest.h"

#define CHUNK (64u << 10)
#define NOBJ 3
#define THREADS 4

static uint64_t sizes[NOBJ];
static uint8_t *data[NOBJ];

typedef struct writer_job {
	phosimg_writer *w;
	int t;
	int err;
} writer_job;

/* Thread t stores the chunks k with k % THREADS == t of every object. */
static void *store(void *arg)
{
	writer_job *j = arg;
	for (int o = 0; o < NOBJ && !j->err; o++) {
		uint64_t n = (sizes[o] + CHUNK - 1) / CHUNK;
		for (uint64_t c = (uint64_t)j->t; c < n && !j->err; c += THREADS) {
			uint64_t off = c * CHUNK, len = sizes[o] - off < CHUNK ? sizes[o] - off : CHUNK;
			j->err = phosimg_writer_put(j->w, (uint32_t)o, off, data[o] + off, (size_t)len);
		}
	}
	return NULL;
}

typedef struct follower {
	phosimg_writer *w;
	int fd;
	uint8_t *snap; /* what was read below ready, cap bytes */
	uint64_t cap, have;
	bool monotonic, aligned;
	_Atomic bool stop;
} follower;

/* Reads what became ready since the last look; holes read as zeros. */
static void catch_up(follower *f)
{
	uint64_t r = phosimg_writer_data_ready(f->w);
	if (r < f->have)
		f->monotonic = false;
	if (r % 4096)
		f->aligned = false;
	if (r > f->cap)
		r = f->cap;
	while (f->have < r) {
		ssize_t n = pread(f->fd, f->snap + f->have, r - f->have, (off_t)f->have);
		if (n <= 0) {
			memset(f->snap + f->have, 0, r - f->have);
			n = (ssize_t)(r - f->have);
		}
		f->have += (uint64_t)n;
	}
}

static void *follow(void *arg)
{
	follower *f = arg;
	while (!atomic_load(&f->stop))
		catch_up(f);
	return NULL;
}

static bool file_starts_with(const char *path, const uint8_t *want, uint64_t n, uint64_t *size)
{
	int fd = open(path, O_RDONLY);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) != 0)
		return false;
	*size = (uint64_t)st.st_size;
	uint8_t *got = malloc(n ? n : 1);
	bool same = got && n <= *size && pread(fd, got, n, 0) == (ssize_t)n && memcmp(got, want, n) == 0;
	free(got);
	close(fd);
	return same;
}

int main(void)
{
	plan(6);
	char *dir = scratch_dir("ready");
	uint64_t total = 4096;
	for (int o = 0; o < NOBJ; o++) {
		sizes[o] = (uint64_t)(o + 1) * 40 * CHUNK + (uint64_t)o * 4097 + 8;
		data[o] = malloc(sizes[o]);
		fill(data[o], sizes[o], (uint64_t)o + 20, o % 2);
		total += sizes[o] + ((sizes[o] + CHUNK - 1) / CHUNK) * 4096;
	}
	for (int lz4 = 0; lz4 < 2; lz4++) {
		const char *tag = lz4 ? "lz4" : "raw";
		char path[PATH_MAX], tmpdata[PATH_MAX + 16], pubdata[PATH_MAX + 16];
		snprintf(path, sizeof(path), "%s/img%d", dir, lz4);
		phosimg_writer *w = start_image(path, CHUNK, lz4, sizes, NOBJ, 0x200000000ull);
		snprintf(tmpdata, sizeof(tmpdata), "%s/gpu.data", phosimg_writer_tmp_dir(w));
		follower f = { .w = w, .fd = open(tmpdata, O_RDONLY), .cap = total, .monotonic = true, .aligned = true };
		f.snap = malloc(total);
		if (f.fd < 0 || !f.snap)
			bail("open %s: %s", tmpdata, strerror(errno));
		pthread_t rt, t[THREADS];
		writer_job j[THREADS];
		pthread_create(&rt, NULL, follow, &f);
		for (int i = 0; i < THREADS; i++) {
			j[i] = (writer_job){ w, i, 0 };
			pthread_create(&t[i], NULL, store, &j[i]);
		}
		int errs = 0;
		for (int i = 0; i < THREADS; i++) {
			pthread_join(t[i], NULL);
			errs += j[i].err != 0;
		}
		atomic_store(&f.stop, true);
		pthread_join(rt, NULL);
		catch_up(&f);
		ok(errs == 0 && f.monotonic && f.aligned,
		   "%s: ready only grows, in whole 4 KiB blocks, while %d threads store", tag, THREADS);
		uint64_t ready = f.have, size = 0;
		ok(phosimg_writer_finish(w) == 0, "%s: the image is published", tag);
		snprintf(pubdata, sizeof(pubdata), "%s/gpu.data", path);
		bool same = file_starts_with(pubdata, f.snap, ready, &size);
		ok(same && ready == size,
		   "%s: the %llu bytes read before publishing are the published gpu.data, all of it (%llu)", tag,
		   (unsigned long long)ready, (unsigned long long)size);
		close(f.fd);
		free(f.snap);
	}
	for (int o = 0; o < NOBJ; o++)
		free(data[o]);
	rm_rf(dir);
	free(dir);
	return done();
}
