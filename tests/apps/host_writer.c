/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * host_writer: a CUDA program whose host memory changes all the time, for
 * checking that a checkpoint saves the host memory of t1 when its pages
 * are written after the process runs on.
 *
 *   host_writer [MIB]
 *
 * A thread sweeps MIB MiB of host memory (default 32) for ever, in three
 * mappings: a plain one, one marked MADV_DONTFORK and one marked
 * MADV_WIPEONFORK (a fork does not copy those as it copies the rest). On
 * sweep g it first checks that every word of a page holds what sweep g-1
 * wrote there, then writes sweep g's words; each word names its sweep,
 * page and place, so a page of another moment or another address fails.
 *
 * The main thread has the device write a pinned host buffer, as DMA: it
 * sets a device buffer to k (cuMemsetD32Async), copies it into the pinned
 * buffer (cuMemcpyDtoHAsync), waits, and notes k. Before each round it
 * checks that the pinned buffer holds one value, k or k+1 (the copy of
 * round k+1 may be done before it is noted), in every word.
 *
 * With HOST_WRITER_ZOMBIE=1 in its environment, the sweeping thread
 * first forks a child that exits at once and is never reaped: a zombie
 * whose parent is a thread other than the main one.
 *
 * A restored copy runs on from the registers and memory of t1, so a byte
 * of the image that is not t1's fails its next check. On SIGUSR1 it
 * prints "verify ok sweeps N rounds K" once a whole sweep and a round
 * have been checked since; a failed check prints "verify FAILED …" and
 * exits 1. It prints "ops 200" once running, as cow_app does.
 */
#include <cuda.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PAGE_WORDS 512u
#define PINNED_WORDS (1u << 20) /* 4 MiB */

static volatile sig_atomic_t verify_asked;
static atomic_ulong sweeps;     /* whole sweeps checked */
static atomic_ulong rounds;     /* DMA rounds checked */

static void on_usr1(int sig)
{
	(void)sig;
	verify_asked = 1;
}

static void die(const char *what)
{
	printf("verify FAILED: %s\n", what);
	fflush(stdout);
	exit(1);
}

static void check(CUresult r, const char *what)
{
	if (r != CUDA_SUCCESS) {
		char m[128];
		snprintf(m, sizeof(m), "%s returned %d", what, (int)r);
		die(m);
	}
}

/* The word w of page p on sweep g. */
static uint64_t word(uint64_t g, uint64_t p, uint64_t w)
{
	return g * 0x9E3779B97F4A7C15ull + p * PAGE_WORDS + w;
}

struct region {
	uint64_t *m;
	size_t pages;
	size_t first; /* its first page's number among all */
};

static struct region regions[3];

static void *sweeper(void *arg)
{
	(void)arg;
	/* HOST_WRITER_ZOMBIE=1: a child of this thread, never reaped */
	const char *z = getenv("HOST_WRITER_ZOMBIE");
	if (z && !strcmp(z, "1") && fork() == 0)
		_exit(0);
	/* sweep 0 wrote word(0, …): the memory starts that way */
	for (uint64_t g = 1;; g++) {
		for (int r = 0; r < 3; r++) {
			struct region *rg = &regions[r];
			for (size_t p = 0; p < rg->pages; p++) {
				uint64_t *pg = rg->m + p * PAGE_WORDS, n = rg->first + p;
				for (unsigned w = 0; w < PAGE_WORDS; w++) {
					if (pg[w] != word(g - 1, n, w)) {
						char m[200];
						snprintf(m, sizeof(m), "sweep %llu, region %d page %zu word %u holds %#llx, not %#llx",
							 (unsigned long long)g, r, p, w, (unsigned long long)pg[w],
							 (unsigned long long)word(g - 1, n, w));
						die(m);
					}
				}
				for (unsigned w = 0; w < PAGE_WORDS; w++)
					pg[w] = word(g, n, w);
			}
		}
		atomic_fetch_add(&sweeps, 1);
	}
	return NULL;
}

static uint64_t *map(size_t pages, int advice)
{
	uint64_t *m = mmap(NULL, pages * PAGE_WORDS * 8, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		die("mmap");
	if (advice >= 0 && madvise(m, pages * PAGE_WORDS * 8, advice))
		die("madvise");
	return m;
}

int main(int argc, char **argv)
{
	size_t mib = argc > 1 ? (size_t)atoi(argv[1]) : 32, pages = mib * 256;
	if (pages < 12)
		pages = 12;
	size_t each[3] = { pages - pages / 4, pages / 8, pages / 4 - pages / 8 };
	const int advice[3] = { -1, MADV_DONTFORK, MADV_WIPEONFORK };
	for (int r = 0, first = 0; r < 3; first += (int)each[r], r++) {
		regions[r] = (struct region){ map(each[r], advice[r]), each[r], (size_t)first };
		for (size_t p = 0; p < each[r]; p++)
			for (unsigned w = 0; w < PAGE_WORDS; w++)
				regions[r].m[p * PAGE_WORDS + w] = word(0, first + p, w);
	}
	signal(SIGUSR1, on_usr1);

	CUdevice dev;
	CUcontext ctx;
	CUstream s;
	CUdeviceptr d;
	uint32_t *pinned;
	check(cuInit(0), "cuInit");
	check(cuDeviceGet(&dev, 0), "cuDeviceGet");
	check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
	check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
	check(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
	check(cuMemAlloc(&d, PINNED_WORDS * 4), "cuMemAlloc");
	check(cuMemAllocHost((void **)&pinned, PINNED_WORDS * 4), "cuMemAllocHost");
	memset(pinned, 0, PINNED_WORDS * 4);

	pthread_t t;
	if (pthread_create(&t, NULL, sweeper, NULL))
		die("pthread_create");
	unsigned long asked_at_sweeps = 0, asked_at_rounds = 0;
	int asked = 0;
	volatile uint32_t noted = 0; /* the last round waited for */
	for (uint32_t k = 1;; k++) {
		uint32_t v = pinned[0];
		if (v != noted && v != noted + 1) {
			char m[128];
			snprintf(m, sizeof(m), "pinned buffer holds round %u, after round %u", v, noted);
			die(m);
		}
		for (unsigned i = 1; i < PINNED_WORDS; i++)
			if (pinned[i] != v) {
				char m[128];
				snprintf(m, sizeof(m), "pinned word %u holds %u, word 0 %u", i, pinned[i], v);
				die(m);
			}
		atomic_fetch_add(&rounds, 1);
		check(cuMemsetD32Async(d, k, PINNED_WORDS, s), "cuMemsetD32Async");
		check(cuMemcpyDtoHAsync(pinned, d, PINNED_WORDS * 4, s), "cuMemcpyDtoHAsync");
		check(cuStreamSynchronize(s), "cuStreamSynchronize");
		noted = k;
		if (k == 200) {
			printf("ops 200\n");
			fflush(stdout);
		}
		if (verify_asked && !asked) {
			asked = 1;
			verify_asked = 0;
			asked_at_sweeps = atomic_load(&sweeps);
			asked_at_rounds = atomic_load(&rounds);
		}
		/* a sweep begun after the ask, and one round, checked whole */
		if (asked && atomic_load(&sweeps) >= asked_at_sweeps + 2 && atomic_load(&rounds) > asked_at_rounds) {
			asked = 0;
			printf("verify ok sweeps %lu rounds %lu\n", atomic_load(&sweeps), atomic_load(&rounds));
			fflush(stdout);
		}
	}
}
