/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * store-bw: how fast a store takes 4 MiB writes, with several writers.
 *
 *   store-bw DIR GIB THREADS... [--mode files|shared|mmap]...
 *
 * For each mode and each thread count, writes GIB GiB into fresh files
 * under DIR and prints one line: "MODE THREADS GB/s". The modes:
 *   files   each writer has a file of its own (pwrite);
 *   shared  every writer pwrites its share of one file;
 *   mmap    every writer copies its share into one MAP_SHARED mapping of
 *           a file sized in advance.
 * The input is a 4 MiB buffer per writer, written over and over, as the
 * copy path writes its pinned staging buffers. The files are removed
 * after each line.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define CHUNK (4u << 20)
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

enum mode { FILES, SHARED, MMAP };
static const char *const mode_names[] = { "files", "shared", "mmap" };

typedef struct run {
	enum mode mode;
	const char *dir;
	int threads;
	uint64_t chunks; /* per writer */
	int fd;          /* shared, mmap */
	uint8_t *map;    /* mmap */
	_Atomic int error;
} run;

typedef struct writer {
	run *r;
	int i;
} writer;

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int write_all(int fd, const uint8_t *p, size_t n, off_t off)
{
	while (n) {
		ssize_t w = pwrite(fd, p, n, off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		p += w;
		n -= (size_t)w;
		off += w;
	}
	return 0;
}

static void *write_share(void *arg)
{
	writer *wr = arg;
	run *r = wr->r;
	uint8_t *buf = aligned_alloc(4096, CHUNK);
	int fd = r->fd, e = buf ? 0 : -ENOMEM;
	if (!e)
		memset(buf, 0x5a + wr->i, CHUNK);
	if (!e && r->mode == FILES) {
		char path[4096];
		snprintf(path, sizeof(path), "%s/store-bw.%d", r->dir, wr->i);
		fd = open(path, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
		if (fd < 0)
			e = -errno;
	}
	for (uint64_t k = 0; !e && k < r->chunks; k++) {
		/* Shared writers interleave their chunks, as copy workers do. */
		uint64_t at = r->mode == FILES ? k : k * (uint64_t)r->threads + (uint64_t)wr->i;
		if (r->mode == MMAP) {
			uint8_t *dst = r->map + at * CHUNK;
			if (madvise(dst, CHUNK, MADV_POPULATE_WRITE) != 0)
				e = -errno;
			else
				memcpy(dst, buf, CHUNK);
		} else {
			e = write_all(fd, buf, CHUNK, (off_t)(at * CHUNK));
		}
	}
	if (r->mode == FILES && fd >= 0)
		close(fd);
	free(buf);
	if (e)
		r->error = e;
	return NULL;
}

/* One line: mode, threads, GB/s; or the error. */
static int measure(enum mode mode, const char *dir, uint64_t bytes, int threads)
{
	run r = { .mode = mode, .dir = dir, .threads = threads, .fd = -1 };
	r.chunks = bytes / CHUNK / (uint64_t)threads;
	uint64_t total = r.chunks * (uint64_t)threads * CHUNK;
	char one[4096];
	snprintf(one, sizeof(one), "%s/store-bw.one", dir);
	if (mode != FILES) {
		r.fd = open(one, O_CREAT | O_TRUNC | O_RDWR | O_CLOEXEC, 0600);
		if (r.fd < 0) {
			fprintf(stderr, "store-bw: %s: %s\n", one, strerror(errno));
			return -1;
		}
	}
	double t0 = now();
	if (mode == MMAP) {
		if (ftruncate(r.fd, (off_t)total) != 0 ||
		    (r.map = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, r.fd, 0)) == MAP_FAILED) {
			fprintf(stderr, "store-bw: mapping %s: %s\n", one, strerror(errno));
			close(r.fd);
			unlink(one);
			return -1;
		}
	}
	pthread_t th[256];
	writer wr[256];
	int started = 0;
	for (; started < threads; started++) {
		wr[started] = (writer){ &r, started };
		if (pthread_create(&th[started], NULL, write_share, &wr[started]))
			break;
	}
	for (int i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	double dt = now() - t0;
	if (r.map)
		munmap(r.map, total);
	if (r.fd >= 0)
		close(r.fd);
	unlink(one);
	for (int i = 0; i < threads; i++) {
		char path[4096];
		snprintf(path, sizeof(path), "%s/store-bw.%d", dir, i);
		unlink(path);
	}
	if (r.error || started < threads) {
		fprintf(stderr, "store-bw: %s with %d writers: %s\n", mode_names[mode], threads,
			strerror(r.error ? -r.error : EAGAIN));
		return -1;
	}
	printf("%-7s %3d %8.2f\n", mode_names[mode], threads, (double)total / dt / 1e9);
	fflush(stdout);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: store-bw DIR GIB THREADS... [--mode files|shared|mmap]...\n");
		return 2;
	}
	const char *dir = argv[1];
	uint64_t bytes = (uint64_t)strtoull(argv[2], NULL, 10) << 30;
	int threads[32], nt = 0;
	bool want[3] = { false };
	bool any = false;
	for (int i = 3; i < argc; i++) {
		if (strcmp(argv[i], "--mode") == 0 && i + 1 < argc) {
			i++;
			for (int m = 0; m < 3; m++)
				if (strcmp(argv[i], mode_names[m]) == 0)
					want[m] = any = true;
		} else if (nt < 32) {
			int t = atoi(argv[i]);
			if (t < 1 || t > 256) {
				fprintf(stderr, "store-bw: %s: threads must be 1 to 256\n", argv[i]);
				return 2;
			}
			threads[nt++] = t;
		}
	}
	if (!any)
		want[FILES] = true;
	printf("# store-bw %s: %llu GiB in 4 MiB writes\n# mode threads GB/s\n", dir,
	       (unsigned long long)(bytes >> 30));
	int rc = 0;
	for (int m = 0; m < 3; m++)
		for (int i = 0; want[m] && i < nt; i++)
			if (measure((enum mode)m, dir, bytes, threads[i]))
				rc = 1;
	return rc;
}
