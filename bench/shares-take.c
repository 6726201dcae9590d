/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * bench/shares-take: the time engine_shares_take (engine/shared.c) takes
 * to find the owner of every import of a checkpoint's parked memory, in
 * the stall (the park's "kept" part in status).
 *
 * Two processes each park --objects device memory objects and export
 * --imports of them (WIRE_OBJ_ALIAS records), which the other imports
 * (WIRE_OBJ_IMPORTED, the same open file), as the ranks of a DDP job do
 * with NCCL's buffers. The fds are memfds. Prints the median of --runs.
 *
 *   bench/shares-take [--objects N] [--imports M] [--runs R]
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../engine/shared.h"

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* Adds one record of pid to p. */
static void add(engine_parked *p, pid_t pid, uint64_t key, uint32_t flags, int fd)
{
	wire_object o = { .key = key, .size = 2u << 20, .flags = flags };
	if (fd < 0 || engine_parked_add(p, &o, &fd, pid, 1)) {
		fprintf(stderr, "bench/shares-take: %s\n", fd < 0 ? strerror(errno) : "out of memory");
		exit(1);
	}
}

/* The parked objects of two processes that share m objects each way. */
static void build(engine_parked *p, int n, int m)
{
	memset(p, 0, sizeof(*p));
	for (pid_t pid = 1; pid <= 2; pid++) {
		for (int k = 0; k < n; k++)
			add(p, pid, (uint64_t)k, WIRE_OBJ_APP, memfd_create("obj", MFD_CLOEXEC));
		for (int k = 0; k < m; k++) {
			int fd = memfd_create("export", MFD_CLOEXEC);
			add(p, pid, (uint64_t)k, WIRE_OBJ_APP | WIRE_OBJ_ALIAS, fd);
			/* The peer imported it: the same open file. */
			add(p, 3 - pid, 1000000u + (uint64_t)k, WIRE_OBJ_APP | WIRE_OBJ_IMPORTED, dup(fd));
		}
	}
}

int main(int argc, char **argv)
{
	int n = 300, m = 100, runs = 5;
	for (int i = 1; i + 1 < argc; i += 2) {
		int v = atoi(argv[i + 1]);
		if (!strcmp(argv[i], "--objects"))
			n = v;
		else if (!strcmp(argv[i], "--imports"))
			m = v;
		else if (!strcmp(argv[i], "--runs"))
			runs = v;
	}
	if (n < 1 || m < 0 || m > n || runs < 1 || runs > 100) {
		fprintf(stderr, "usage: bench/shares-take [--objects N] [--imports M<=N] [--runs 1-100]\n");
		return 2;
	}
	double t[100];
	for (int r = 0; r < runs; r++) {
		engine_parked p;
		engine_shares s;
		perr er = { 0 };
		build(&p, n, m);
		uint64_t t0 = engine_now_ns();
		int e = engine_shares_take(&p, &s, &er);
		t[r] = (double)(engine_now_ns() - t0) / 1e6;
		if (e) {
			fprintf(stderr, "bench/shares-take: %s\n", er.msg);
			return 1;
		}
		engine_shares_free(&s);
		engine_parked_free(&p);
	}
	qsort(t, (size_t)runs, sizeof(*t), cmp_double);
	printf("2 processes, %d objects and %d imports each: engine_shares_take %.2f ms (median of %d)\n", n, m,
	       t[runs / 2], runs);
	return 0;
}
