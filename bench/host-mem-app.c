/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * host-mem-app: a CPU-only process holding host memory, for
 * bench/criu-lazy-pages.
 *
 *   host-mem-app [--children K] MIB [WS_MIB]
 *   host-mem-app --fault-cost MIB
 *
 * Maps MIB MiB of private anonymous memory (what CRIU may restore lazily),
 * populated up front (MAP_POPULATE: a first-touch fault costs about 10 us
 * on some VMs, and the fill is not what is measured), and fills it with non-zero, non-repeating 64-bit words; prints
 *   "fill mib M ws_mib W sum S s T"
 * Then runs steps for ever. A step reads all of a working set of WS_MIB
 * MiB (default 64): whole 4 KiB pages spread evenly over the whole
 * mapping, so that a lazily restored process faults in pages from all
 * of it. After every step it prints
 *   "step N T"                  T: CLOCK_REALTIME seconds
 * Steps only read the mapping, so its checksum stays what the fill made
 * it. On SIGUSR1, between two steps, it checksums all of the mapping and
 * prints
 *   "verify sum S ok|BAD ms T"
 * With --children K it forks K children after the fill; they share the
 * mapping copy-on-write, step and verify the same way, and prefix their
 * lines with "childI ". SIGUSR1 to the process group asks all of them.
 * Output goes through write(2), line by line, so that a file opened with
 * O_APPEND sees every line as it is made.
 *
 * --fault-cost maps MIB MiB and prints, in microseconds per 4 KiB page,
 * what a first-touch (write) page fault costs on this machine, what
 * populating the same size in one mmap costs, and what the first read of
 * each page of that populated mapping costs (about 0.01 on bare metal;
 * a VM that builds its page tables for the guest lazily makes it more):
 *   "fault us F populate us P first_read us R"
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096u
#define WORDS (PAGE / sizeof(uint64_t))

static volatile sig_atomic_t verify_asked;
static volatile uint64_t sink;

static void on_usr1(int sig)
{
	(void)sig;
	verify_asked = 1;
}

static double realtime(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void say(const char *fmt, ...)
{
	char line[256];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(line))
		n = sizeof(line) - 1;
	for (int off = 0; off < n;) {
		ssize_t w = write(1, line + off, (size_t)(n - off));
		if (w <= 0)
			return;
		off += (int)w;
	}
}

static uint64_t splitmix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* Fletcher-like: depends on every word and on its place */
static uint64_t checksum(const uint64_t *p, size_t n)
{
	uint64_t a = 0, b = 0;
	for (size_t i = 0; i < n; i++) {
		a += p[i];
		b += a;
	}
	return a ^ (b << 32 | b >> 32);
}

static int fault_cost(size_t bytes)
{
	size_t pages = bytes / PAGE;
	double t0 = realtime();
	volatile char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return 1;
	for (size_t i = 0; i < pages; i++)
		p[i * PAGE] = 1;
	double t1 = realtime();
	munmap((void *)p, bytes);
	double t2 = realtime();
	p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (p == MAP_FAILED)
		return 1;
	double t3 = realtime();
	uint64_t acc = 0;
	for (size_t i = 0; i < pages; i++)
		acc += (unsigned char)p[i * PAGE];
	double t4 = realtime();
	sink = acc;
	munmap((void *)p, bytes);
	say("fault us %.2f populate us %.2f first_read us %.2f\n", (t1 - t0) * 1e6 / pages, (t3 - t2) * 1e6 / pages,
	    (t4 - t3) * 1e6 / pages);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "--fault-cost"))
		return fault_cost(strtoull(argv[2], NULL, 10) << 20);
	int children = 0;
	if (argc > 2 && !strcmp(argv[1], "--children")) {
		children = atoi(argv[2]);
		argc -= 2;
		argv += 2;
	}
	if (argc < 2 || argc > 3 || children < 0) {
		fprintf(stderr, "usage: host-mem-app [--children K] MIB [WS_MIB] | host-mem-app --fault-cost MIB\n");
		return 2;
	}
	size_t mib = strtoull(argv[1], NULL, 10);
	size_t ws_mib = argc > 2 ? strtoull(argv[2], NULL, 10) : 64;
	size_t bytes = mib << 20;
	if (!mib || !ws_mib || ws_mib > mib) {
		fprintf(stderr, "host-mem-app: need 0 < WS_MIB <= MIB\n");
		return 2;
	}
	uint64_t *mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (mem == MAP_FAILED) {
		perror("host-mem-app: mmap");
		return 1;
	}
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_usr1;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGUSR1, &sa, NULL)) {
		perror("host-mem-app: sigaction");
		return 1;
	}

	double t0 = realtime();
	size_t words = bytes / sizeof(uint64_t);
	for (size_t i = 0; i < words; i++) {
		uint64_t x = splitmix64(i);
		mem[i] = x ? x : 1;
	}
	const uint64_t sum = checksum(mem, words);
	say("fill mib %zu ws_mib %zu sum %016llx s %.3f\n", mib, ws_mib, (unsigned long long)sum, realtime() - t0);

	/* children share the mapping copy-on-write and only read it */
	char who[32] = "";
	for (int c = 1; c <= children; c++) {
		pid_t pid = fork();
		if (pid < 0) {
			perror("host-mem-app: fork");
			return 1;
		}
		if (pid == 0) {
			snprintf(who, sizeof(who), "child%d ", c);
			break;
		}
	}

	size_t pages = bytes / PAGE, ws_pages = (ws_mib << 20) / PAGE;
	size_t stride = pages / ws_pages;
	for (unsigned long step = 1;; step++) {
		uint64_t acc = 0;
		for (size_t j = 0; j < ws_pages; j++) {
			const uint64_t *pg = mem + j * stride * WORDS;
			for (size_t k = 0; k < WORDS; k++)
				acc += pg[k];
		}
		sink = acc;
		say("%sstep %lu %.6f\n", who, step, realtime());
		if (verify_asked) {
			verify_asked = 0;
			double v0 = realtime();
			uint64_t s = checksum(mem, words);
			say("%sverify sum %016llx %s ms %.1f\n", who, (unsigned long long)s, s == sum ? "ok" : "BAD",
			    (realtime() - v0) * 1e3);
		}
	}
}
