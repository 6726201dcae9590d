/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * fork-snapshot: what a copy-on-write snapshot of a process's host memory
 * costs when the kernel's fork makes it (issue 29's question: can the
 * pages leave the stall?).
 *
 *   fork-snapshot MIB [PASSES]
 *
 * The process maps MIB MiB of private anonymous memory and writes every
 * page. Then, for each of PASSES rounds (default 3), it prints one line:
 *
 *   fork ms     the fork alone: the part a checkpoint would stall for
 *               (page tables copied, every page shared copy-on-write);
 *   write ms    one pass writing one word in every page, while the child
 *               holds the snapshot: each first write copies the page;
 *   plain ms    the same pass with no child (the pages are private again);
 *   read MB/s   the parent reading the child's whole snapshot with
 *               process_vm_readv in 4 MiB pieces, as a page writer would;
 *   exact       whether every page the parent read back holds the value
 *               it held at the fork, not the one written after it.
 *
 * The child waits on a pipe and exits when the parent closes it.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PIECE (4u << 20)

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* One word in every page gets base + its page's number. */
static void stamp(uint64_t *mem, size_t pages, size_t page, uint64_t base)
{
	size_t words = page / sizeof(uint64_t);
	for (size_t i = 0; i < pages; i++)
		mem[i * words] = base + i;
}

/* Reads the child's copy of [mem, mem + len) and checks each page's
 * word against want; returns MB/s, *exact false on a mismatch. */
static double read_child(pid_t child, uint64_t *mem, size_t len, size_t page, uint64_t want, bool *exact)
{
	uint64_t *buf = malloc(PIECE);
	if (!buf) {
		*exact = false;
		return 0;
	}
	size_t words = page / sizeof(uint64_t);
	double t = now_ms();
	*exact = true;
	for (size_t off = 0; off < len; off += PIECE) {
		size_t n = len - off < PIECE ? len - off : PIECE;
		struct iovec local = { buf, n }, remote = { (char *)mem + off, n };
		ssize_t got = process_vm_readv(child, &local, 1, &remote, 1, 0);
		if (got != (ssize_t)n) {
			fprintf(stderr, "fork-snapshot: process_vm_readv of child %d at offset %zu: %s\n", (int)child,
				off, got < 0 ? strerror(errno) : "short read");
			*exact = false;
			break;
		}
		for (size_t p = 0; p < n / page; p++)
			if (buf[p * words] != want + off / page + p)
				*exact = false;
	}
	double ms = now_ms() - t;
	free(buf);
	return ms > 0 ? len / 1e3 / ms : 0;
}

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 3) {
		fprintf(stderr, "usage: fork-snapshot MIB [PASSES]\n");
		return 2;
	}
	size_t mib = strtoul(argv[1], NULL, 10);
	int passes = argc == 3 ? atoi(argv[2]) : 3;
	if (!mib || passes < 1) {
		fprintf(stderr, "fork-snapshot: MIB and PASSES are positive numbers\n");
		return 2;
	}
	size_t len = mib << 20, page = (size_t)sysconf(_SC_PAGESIZE), pages = len / page;
	uint64_t *mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED) {
		fprintf(stderr, "fork-snapshot: mapping %zu MiB: %s\n", mib, strerror(errno));
		return 1;
	}
	stamp(mem, pages, page, 0);
	printf("# %zu MiB, %zu pages of %zu bytes\n", mib, pages, page);
	printf("%8s %10s %10s %10s %10s %6s\n", "MiB", "fork ms", "write ms", "plain ms", "read MB/s", "exact");
	int rc = 0;
	for (int r = 1; r <= passes; r++) {
		uint64_t at_fork = (uint64_t)r << 40;
		stamp(mem, pages, page, at_fork);
		int p[2];
		if (pipe(p)) {
			perror("fork-snapshot: pipe");
			return 1;
		}
		double t = now_ms();
		pid_t child = fork();
		if (child < 0) {
			perror("fork-snapshot: fork");
			return 1;
		}
		if (child == 0) {
			close(p[1]);
			char c;
			while (read(p[0], &c, 1) < 0 && errno == EINTR)
				;
			_exit(0);
		}
		double fork_ms = now_ms() - t;
		close(p[0]);
		t = now_ms();
		stamp(mem, pages, page, at_fork + (1ull << 32));
		double write_ms = now_ms() - t;
		bool exact;
		double mbs = read_child(child, mem, len, page, at_fork, &exact);
		close(p[1]);
		waitpid(child, NULL, 0);
		t = now_ms();
		stamp(mem, pages, page, at_fork + (2ull << 32));
		double plain_ms = now_ms() - t;
		printf("%8zu %10.1f %10.1f %10.1f %10.0f %6s\n", mib, fork_ms, write_ms, plain_ms, mbs,
		       exact ? "yes" : "NO");
		fflush(stdout);
		if (!exact)
			rc = 1;
	}
	munmap(mem, len);
	return rc;
}
