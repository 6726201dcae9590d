/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * counter: a small CUDA program that checks its own state, for trying
 * checkpoint and restore (it is phos's demo).
 *
 *   counter [MIB]        (default 64)
 *
 * It fills MIB MiB of device memory with a pattern, then counts, ten
 * times a second. Each count is stored in device memory twice: in an
 * 8-byte counter, and over the first bytes of page (count mod pages) of
 * the data. Each tick it checks the device counter against the count it
 * keeps in host memory. On SIGUSR1 it checks every byte of the device
 * memory against what it must hold, and prints "verify ok count N" or
 * "verify FAILED …"; on a failed check it exits with status 1.
 *
 * It uses the driver API only, so it runs on a GPU and on any libcuda.
 */
#include <cuda.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096u

static volatile sig_atomic_t verify_asked;

static void on_usr1(int sig)
{
	(void)sig;
	verify_asked = 1;
}

static void check(CUresult r, const char *what)
{
	if (r != CUDA_SUCCESS) {
		const char *s = "?";
		cuGetErrorString(r, &s);
		printf("counter: %s failed: %s\n", what, s);
		exit(2);
	}
}

/* The pattern byte at offset off. */
static uint8_t pattern(uint64_t off)
{
	uint64_t x = (off / 8) * 0x9E3779B97F4A7C15ull;
	return (uint8_t)(x >> (8 * (off % 8)));
}

/* What page p holds at its start after count: the last count that landed
 * there, or the pattern. */
static int expected_page_head(uint64_t p, uint64_t pages, uint64_t count, uint8_t head[8])
{
	/* Tick k (0, 1, …) wrote k + 1 over page k mod pages. */
	if (count == 0 || count - 1 < p)
		return 0;
	uint64_t k = p + (count - 1 - p) / pages * pages;
	uint64_t v = k + 1;
	memcpy(head, &v, 8);
	return 1;
}

/* Whether the device counter equals the count kept in host memory;
 * says so with prefix where it does not. */
static int counter_matches(CUdeviceptr ctr, uint64_t count, const char *prefix)
{
	uint64_t dev = 0;
	check(cuMemcpyDtoH(&dev, ctr, 8), "reading the counter");
	if (dev == count)
		return 1;
	printf("%s: device counter %llu, host count %llu\n", prefix, (unsigned long long)dev,
	       (unsigned long long)count);
	return 0;
}

static int verify(CUdeviceptr data, uint64_t bytes, CUdeviceptr ctr, uint64_t count)
{
	if (!counter_matches(ctr, count, "verify FAILED"))
		return 1;
	uint64_t pages = bytes / PAGE;
	static uint8_t buf[1 << 20];
	for (uint64_t at = 0; at < bytes; at += sizeof(buf)) {
		size_t n = bytes - at < sizeof(buf) ? (size_t)(bytes - at) : sizeof(buf);
		check(cuMemcpyDtoH(buf, data + at, n), "reading device memory");
		for (size_t i = 0; i < n; i++) {
			uint64_t off = at + i;
			uint8_t want = pattern(off);
			if (off % PAGE < 8) {
				uint8_t head[8];
				if (expected_page_head(off / PAGE, pages, count, head))
					want = head[off % PAGE];
			}
			if (buf[i] != want) {
				printf("verify FAILED: byte %llu is 0x%02x, not 0x%02x\n", (unsigned long long)off, buf[i],
				       want);
				return 1;
			}
		}
	}
	printf("verify ok count %llu\n", (unsigned long long)count);
	return 0;
}

int main(int argc, char **argv)
{
	uint64_t mib = argc > 1 ? strtoull(argv[1], NULL, 10) : 64;
	if (mib == 0)
		mib = 1;
	uint64_t bytes = mib << 20;
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGUSR1, on_usr1);
	CUdevice dev;
	CUcontext ctx;
	check(cuInit(0), "cuInit");
	check(cuDeviceGet(&dev, 0), "cuDeviceGet");
	check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
	check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
	CUdeviceptr data, ctr;
	check(cuMemAlloc(&data, bytes), "cuMemAlloc");
	check(cuMemAlloc(&ctr, 8), "cuMemAlloc");
	uint8_t *host = malloc(1 << 20);
	if (!host)
		return 2;
	for (uint64_t at = 0; at < bytes; at += 1 << 20) {
		for (uint64_t i = 0; i < (1 << 20); i++)
			host[i] = pattern(at + i);
		check(cuMemcpyHtoD(data + at, host, 1 << 20), "filling device memory");
	}
	free(host);
	uint64_t count = 0, pages = bytes / PAGE;
	check(cuMemcpyHtoD(ctr, &count, 8), "setting the counter");
	printf("counter: %llu MiB of device memory ready\n", (unsigned long long)mib);
	for (;;) {
		if (!counter_matches(ctr, count, "FAILED"))
			return 1;
		uint64_t next = count + 1;
		check(cuMemcpyHtoD(data + (count % pages) * PAGE, &next, 8), "writing a page");
		check(cuMemcpyHtoD(ctr, &next, 8), "writing the counter");
		count = next;
		if (count % 10 == 0)
			printf("count %llu\n", (unsigned long long)count);
		if (verify_asked) {
			verify_asked = 0;
			if (verify(data, bytes, ctr, count))
				return 1;
		}
		struct timespec ts = { 0, 100000000 };
		nanosleep(&ts, NULL);
	}
}
