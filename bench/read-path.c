/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * read-path: what it costs a thread to move image data from a file into
 * a staging buffer and check it, by several ways, for the restore's
 * read path (image-format/reader.c). CPU only.
 *
 *   read-path FILE THREADS...
 *
 * FILE is read in 4 MiB chunks, handed out to the threads one at a time;
 * each way runs over the whole file, per thread count, and prints
 * "WAY threads N GB/s X". READ_PATH_WAYS="WAY WAY…" runs only those.
 * The ways:
 *   pread        pread of the chunk into the buffer (no check)
 *   pread+hash   pread, then XXH3-128 of the buffer (the reader today)
 *   piece+hash   pread in 256 KiB pieces, each hashed while in cache
 *   mmap+copy    memcpy from a MAP_SHARED mapping of the file (no check)
 *   mmap+hash    per 256 KiB piece: hash from the mapping, then memcpy
 *   pread+hashd, piece+hashd   as pread+hash and piece+hash, with
 *                xxHash's x86 dispatch (AVX2 or AVX-512 where the CPU
 *                has them) instead of its portable build
 *   ring+hash    as piece+hash, but each piece goes to the next of a
 *                ring of READ_PATH_RING_KIB (default 2048) KiB of piece
 *                buffers, as a fill that streams pieces would
 *   ring+hashd   ring+hash with xxHash's x86 dispatch
 * READ_PATH_BUFS=N (default 1) has each thread cycle through N chunk
 * buffers, as a fill with N pinned buffers a worker does.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>
#if defined(__x86_64__)
#include <xxh_x86dispatch.h>
#else
#define XXH3_128bits_dispatch XXH3_128bits
#define XXH3_128bits_update_dispatch XXH3_128bits_update
#endif

#define CHUNK (4u << 20)
#define PIECE (256u << 10)

static int fd;
static const uint8_t *map;
static uint64_t size;
static atomic_uint_fast64_t next;
static int way;
static int nbufs = 1;        /* chunk buffers a thread cycles through */
static size_t ring = 2u << 20; /* ring+hash: bytes of piece buffers */
static const char *names[] = { "pread", "pread+hash", "piece+hash", "mmap+copy", "mmap+hash", "pread+hashd",
			       "piece+hashd", "ring+hash", "ring+hashd" };
#define WAYS (int)(sizeof(names) / sizeof(names[0]))

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *worker(void *arg)
{
	(void)arg;
	size_t bytes = (size_t)nbufs * CHUNK > ring ? (size_t)nbufs * CHUNK : ring;
	uint8_t *all = aligned_alloc(4096, bytes), *buf;
	uint64_t sink = 0, pieces = 0;
	if (!all)
		return NULL;
	memset(all, 0, bytes);
	XXH3_state_t *st = XXH3_createState();
	for (uint64_t n = 0;; n++) {
		uint64_t k = atomic_fetch_add(&next, 1), off = k * CHUNK;
		if (off + CHUNK > size)
			break;
		buf = all + (n % (uint64_t)nbufs) * CHUNK;
		switch (way) {
		case 0:
			if (pread(fd, buf, CHUNK, (off_t)off) != CHUNK)
				abort();
			break;
		case 1:
			if (pread(fd, buf, CHUNK, (off_t)off) != CHUNK)
				abort();
			sink ^= XXH3_128bits(buf, CHUNK).low64;
			break;
		case 2:
			XXH3_128bits_reset(st);
			for (uint32_t p = 0; p < CHUNK; p += PIECE) {
				if (pread(fd, buf + p, PIECE, (off_t)(off + p)) != PIECE)
					abort();
				XXH3_128bits_update(st, buf + p, PIECE);
			}
			sink ^= XXH3_128bits_digest(st).low64;
			break;
		case 3:
			memcpy(buf, map + off, CHUNK);
			break;
		case 4:
			XXH3_128bits_reset(st);
			for (uint32_t p = 0; p < CHUNK; p += PIECE) {
				XXH3_128bits_update(st, map + off + p, PIECE);
				memcpy(buf + p, map + off + p, PIECE);
			}
			sink ^= XXH3_128bits_digest(st).low64;
			break;
		case 5:
			if (pread(fd, buf, CHUNK, (off_t)off) != CHUNK)
				abort();
			sink ^= XXH3_128bits_dispatch(buf, CHUNK).low64;
			break;
		case 6:
			XXH3_128bits_reset(st);
			for (uint32_t p = 0; p < CHUNK; p += PIECE) {
				if (pread(fd, buf + p, PIECE, (off_t)(off + p)) != PIECE)
					abort();
				XXH3_128bits_update_dispatch(st, buf + p, PIECE);
			}
			sink ^= XXH3_128bits_digest(st).low64;
			break;
		case 7:
		case 8:
			XXH3_128bits_reset(st);
			for (uint32_t p = 0; p < CHUNK; p += PIECE) {
				uint8_t *piece = all + (pieces++ % (ring / PIECE)) * PIECE;
				if (pread(fd, piece, PIECE, (off_t)(off + p)) != PIECE)
					abort();
				if (way == 7)
					XXH3_128bits_update(st, piece, PIECE);
				else
					XXH3_128bits_update_dispatch(st, piece, PIECE);
			}
			sink ^= XXH3_128bits_digest(st).low64;
			break;
		}
	}
	XXH3_freeState(st);
	free(all);
	return (void *)(uintptr_t)sink;
}

/* Whether the space-separated list names `name`. */
static bool named(const char *list, const char *name)
{
	size_t n = strlen(name);
	for (const char *p = list; (p = strstr(p, name)); p += n)
		if ((p == list || p[-1] == ' ') && (p[n] == 0 || p[n] == ' '))
			return true;
	return false;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: read-path FILE THREADS...\n");
		return 2;
	}
	fd = open(argv[1], O_RDONLY);
	if (fd < 0) {
		perror(argv[1]);
		return 1;
	}
	size = (uint64_t)lseek(fd, 0, SEEK_END);
	map = mmap(NULL, size, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
	if (map == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	const char *nb = getenv("READ_PATH_BUFS"), *rk = getenv("READ_PATH_RING_KIB");
	nbufs = nb && atoi(nb) > 0 ? atoi(nb) : 1;
	if (rk && atoi(rk) >= (int)(PIECE >> 10))
		ring = (size_t)atoi(rk) / (PIECE >> 10) * PIECE;
	const char *only = getenv("READ_PATH_WAYS"); /* a subset, by name: "pread+hash piece+hashd" */
	for (way = 0; way < WAYS; way++) {
		if (only && !named(only, names[way]))
			continue;
		for (int a = 2; a < argc; a++) {
			int n = atoi(argv[a]);
			pthread_t t[128];
			if (n < 1 || n > 128)
				return 2;
			atomic_store(&next, 0);
			double t0 = now();
			for (int i = 0; i < n; i++)
				pthread_create(&t[i], NULL, worker, NULL);
			for (int i = 0; i < n; i++)
				pthread_join(t[i], NULL);
			printf("%-12s threads %-3d GB/s %.1f\n", names[way], n, (double)(size / CHUNK * CHUNK) / (now() - t0) / 1e9);
			fflush(stdout);
		}
	}
	return 0;
}
