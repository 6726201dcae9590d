/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * page-restore: how fast a restore can bring saved pages back into a
 * process's fresh anonymous memory, the part of CRIU's restore that grows
 * with the process's memory (its restorer preadv()s pages-*.img into the
 * mappings it made, 64 runs a call).
 *
 *   page-restore FILE MIB [THREADS...]
 *
 * FILE is created with MIB MiB of random bytes (put it on the store's
 * file system, /dev/shm for phosfs's default; it is removed at the end)
 * and read back into fresh private anonymous memory in each way, three
 * times each (the best is printed, as "WAY THREADS ms GB/s", with a
 * checksum of what was read compared to what was written):
 *   fault     preadv straight into the mapping, 64 iovecs of 64 KiB a
 *             call: each page is faulted in (zeroed) by the copy, as
 *             CRIU does;
 *   populate  madvise(MADV_POPULATE_WRITE) over each call's range first,
 *             then the same preadv;
 *   huge      madvise(MADV_HUGEPAGE) on the mapping first (where THP is
 *             "madvise" or "always"), then as fault;
 *   threads   as fault, the range split over THREADS readers (default
 *             "2 4 8").
 * Also: the first touch of MIB MiB of fresh memory alone (memset), and
 * the plain preadv into memory already touched (the copy alone).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define RUN (64u << 10) /* one iovec */
#define IOVS 64         /* iovecs a call */

static int fd;
static size_t bytes;

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static uint64_t sum(const uint8_t *p, size_t n)
{
	uint64_t s = 0;
	for (size_t i = 0; i < n; i += 8) {
		uint64_t v;
		memcpy(&v, p + i, 8);
		s = s * 31 + v;
	}
	return s;
}

enum way { FAULT, POPULATE, HUGE, COPY };

typedef struct part {
	uint8_t *base;
	size_t from, to;
	enum way w;
	int err;
} part;

/* Reads [from, to) of the file into base + from, IOVS runs a call. */
static void *read_part(void *arg)
{
	part *p = arg;
	struct iovec iov[IOVS];
	for (size_t off = p->from; off < p->to && !p->err;) {
		int n = 0;
		size_t at = off;
		for (; n < IOVS && at < p->to; n++, at += RUN)
			iov[n] = (struct iovec){ .iov_base = p->base + at, .iov_len = p->to - at < RUN ? p->to - at : RUN };
		if (p->w == POPULATE && madvise(p->base + off, at - off, MADV_POPULATE_WRITE) != 0) {
			p->err = errno;
			break;
		}
		ssize_t r = preadv(fd, iov, n, (off_t)off);
		if (r <= 0) {
			p->err = r < 0 ? errno : EIO;
			break;
		}
		off += (size_t)r;
	}
	return NULL;
}

/* One read of the whole file in way w with t threads: its time in ms, or
 * -1; *s gets the checksum of what was read. */
static double once(enum way w, int t, uint64_t *s)
{
	uint8_t *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return -1;
	if (w == HUGE)
		madvise(m, bytes, MADV_HUGEPAGE);
	if (w == COPY)
		memset(m, 1, bytes);
	part ps[64];
	pthread_t th[64];
	double t0 = now_ms();
	size_t per = (bytes / (size_t)t + RUN - 1) / RUN * RUN;
	for (int i = 0; i < t; i++) {
		size_t from = per * (size_t)i, to = from + per > bytes ? bytes : from + per;
		ps[i] = (part){ .base = m, .from = from < bytes ? from : bytes, .to = to, .w = w };
		if (t == 1 || pthread_create(&th[i], NULL, read_part, &ps[i]) != 0) {
			read_part(&ps[i]);
			th[i] = 0;
		}
	}
	int err = 0;
	for (int i = 0; i < t; i++) {
		if (th[i])
			pthread_join(th[i], NULL);
		err = err ? err : ps[i].err;
	}
	double ms = now_ms() - t0;
	*s = sum(m, bytes);
	munmap(m, bytes);
	if (err)
		fprintf(stderr, "page-restore: %s\n", strerror(err));
	return err ? -1 : ms;
}

static void row(const char *name, enum way w, int t, uint64_t want)
{
	double best = -1;
	int good = 1;
	for (int k = 0; k < 3; k++) {
		uint64_t s = 0;
		double ms = once(w, t, &s);
		good &= ms >= 0 && s == want;
		if (ms >= 0 && (best < 0 || ms < best))
			best = ms;
	}
	printf("%-9s %3d %9.1f %7.2f %s\n", name, t, best, best > 0 ? bytes / best / 1e6 : 0.0,
	       good ? "same bytes" : "DIFFERENT");
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: page-restore FILE MIB [THREADS...]\n");
		return 2;
	}
	bytes = (size_t)atol(argv[2]) << 20;
	if (!bytes) {
		fprintf(stderr, "page-restore: MIB must be a positive number of MiB\n");
		return 2;
	}
	fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		fprintf(stderr, "page-restore: %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	uint8_t *src = malloc(bytes);
	if (!src)
		return 1;
	uint64_t x = 88172645463325252ull;
	for (size_t i = 0; i < bytes; i += 8) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		memcpy(src + i, &x, 8);
	}
	uint64_t want = sum(src, bytes);
	int ok = pwrite(fd, src, bytes, 0) == (ssize_t)bytes;
	if (!ok) {
		fprintf(stderr, "page-restore: cannot write %s\n", argv[1]);
		unlink(argv[1]);
		return 1;
	}
	char thp[64] = "?";
	FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
	if (f) {
		if (!fgets(thp, sizeof(thp), f))
			snprintf(thp, sizeof(thp), "?");
		thp[strcspn(thp, "\n")] = 0;
		fclose(f);
	}
	printf("# page-restore %s: %zu MiB, THP %s; best of 3\n", argv[1], bytes >> 20, thp);
	printf("%-9s %3s %9s %7s\n", "way", "thr", "ms", "GB/s");
	/* The first touch alone. */
	double best = -1;
	for (int k = 0; k < 3; k++) {
		uint8_t *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED)
			break;
		double t0 = now_ms();
		memset(m, 1, bytes);
		double ms = now_ms() - t0;
		munmap(m, bytes);
		best = best < 0 || ms < best ? ms : best;
	}
	printf("%-9s %3d %9.1f %7.2f\n", "touch", 1, best, best > 0 ? bytes / best / 1e6 : 0.0);
	row("copy", COPY, 1, want);
	row("fault", FAULT, 1, want);
	row("populate", POPULATE, 1, want);
	row("huge", HUGE, 1, want);
	const char *def[] = { "2", "4", "8" };
	int nt = argc > 3 ? argc - 3 : 3;
	for (int i = 0; i < nt; i++) {
		int t = atoi(argc > 3 ? argv[3 + i] : def[i]);
		if (t < 1 || t > 64) {
			fprintf(stderr, "page-restore: THREADS must be 1 to 64\n");
			continue;
		}
		row("threads", FAULT, t, want);
	}
	free(src);
	close(fd);
	unlink(argv[1]);
	return 0;
}
