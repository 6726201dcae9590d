/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * ipc_app: two CUDA processes that share device memory and an event
 * through legacy CUDA IPC, as torch.multiprocessing shares tensors.
 *
 *   ipc_app
 *
 * It forks before it uses CUDA. Rank 0 allocates A (4 MiB, an object of
 * its own under the tracer) and B (4 KiB, a block of a small-allocation
 * slab, not its first) with cuMemAlloc, fills B, makes an interprocess
 * event, and sends rank 1 the handles of A, B and the event
 * (cuIpcGetMemHandle, cuIpcGetEventHandle). Rank 1 opens them, and opens
 * A a second time, which must give the same address, then closes that
 * once. Each step N:
 *   - rank 0 sets the first half of A to N on its stream, records the
 *     event after it, and tells rank 1;
 *   - rank 1 makes its stream wait for the event, reads the first half
 *     through its mapping (all N?) and B (still the fill?), then sets the
 *     second half of A to N + 1000000, and answers;
 *   - rank 0 reads the second half (all N + 1000000?).
 * Every 25th step rank 0 also shares a fresh 2 MiB allocation, set to N,
 * which rank 1 opens, checks and closes, and rank 0 frees: handles made
 * after a checkpoint or a restore work too.
 * Each rank prints "rank R step N" every 20 steps, and "WRONG …" (and
 * exits 1) when anything is not as it should be.
 *
 * With IPC_UNTRACED_EXPORTER=1 rank 0 runs untraced (PHOS_TRACE=0): its
 * handles are the driver's, which rank 1's tracer passes to the driver.
 *
 * Built without the sanitizers (tests/apps/pair_app.c says why).
 */
#include <cuda.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#define A_BYTES (4u << 20)
#define HALF (A_BYTES / 2)
#define B_BYTES 4096u
#define B_FILL 0xb0b0b0b0u
#define NEW_BYTES (2u << 20)

typedef struct msg {
	char what[8];
	unsigned step;
	CUipcMemHandle a, b, fresh;
	CUipcEventHandle ev;
} msg;

static int sock[2];
static unsigned host[HALF / 4];

static void check(CUresult r, int rank, const char *what)
{
	if (r != CUDA_SUCCESS) {
		printf("WRONG rank %d: %s failed: CUDA error %d\n", rank, what, (int)r);
		exit(1);
	}
}

static void wrong(int rank, const char *what, unsigned step)
{
	printf("WRONG rank %d: %s at step %u\n", rank, what, step);
	exit(1);
}

static void say(int s, const msg *m)
{
	if (send(s, m, sizeof(*m), 0) != (ssize_t)sizeof(*m))
		exit(0); /* the peer is gone */
}

static void hear(int s, msg *m)
{
	if (recv(s, m, sizeof(*m), 0) != (ssize_t)sizeof(*m))
		exit(0);
}

/* Whether n words at va are all v (read to the host). */
static int all(CUdeviceptr va, size_t n, unsigned v, int rank)
{
	check(cuMemcpyDtoH(host, va, n * 4), rank, "cuMemcpyDtoH");
	for (size_t i = 0; i < n; i++)
		if (host[i] != v)
			return 0;
	return 1;
}

static void rank1(void)
{
	CUdevice d;
	CUcontext c;
	CUstream s;
	CUevent ev;
	CUdeviceptr a, again, b;
	msg m;
	check(cuInit(0), 1, "cuInit");
	check(cuDeviceGet(&d, 0), 1, "cuDeviceGet");
	check(cuDevicePrimaryCtxRetain(&c, d), 1, "cuDevicePrimaryCtxRetain");
	check(cuCtxSetCurrent(c), 1, "cuCtxSetCurrent");
	check(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), 1, "cuStreamCreate");
	hear(sock[1], &m);
	check(cuIpcOpenMemHandle(&a, m.a, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), 1, "cuIpcOpenMemHandle (A)");
	check(cuIpcOpenMemHandle(&again, m.a, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), 1, "cuIpcOpenMemHandle (A again)");
	if (again != a)
		wrong(1, "a second open of A gave another address", 0);
	check(cuIpcCloseMemHandle(again), 1, "cuIpcCloseMemHandle (A once)");
	check(cuIpcOpenMemHandle(&b, m.b, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), 1, "cuIpcOpenMemHandle (B)");
	check(cuIpcOpenEventHandle(&ev, m.ev), 1, "cuIpcOpenEventHandle");
	if (!all(b, B_BYTES / 4, B_FILL, 1))
		wrong(1, "B is not what rank 0 wrote", 0);
	printf("rank 1 opened A at 0x%llx and B at 0x%llx\n", (unsigned long long)a, (unsigned long long)b);
	fflush(stdout);
	for (;;) {
		hear(sock[1], &m);
		if (!strcmp(m.what, "fresh")) {
			CUdeviceptr f;
			check(cuIpcOpenMemHandle(&f, m.fresh, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), 1,
			      "cuIpcOpenMemHandle (fresh)");
			if (!all(f, NEW_BYTES / 4 < HALF / 4 ? NEW_BYTES / 4 : HALF / 4, m.step, 1))
				wrong(1, "a fresh allocation is not what rank 0 wrote", m.step);
			check(cuIpcCloseMemHandle(f), 1, "cuIpcCloseMemHandle (fresh)");
			say(sock[1], &m);
			continue;
		}
		check(cuStreamWaitEvent(s, ev, 0), 1, "cuStreamWaitEvent");
		check(cuMemcpyDtoHAsync(host, a, HALF, s), 1, "cuMemcpyDtoHAsync");
		check(cuStreamSynchronize(s), 1, "cuStreamSynchronize");
		for (size_t i = 0; i < HALF / 4; i++)
			if (host[i] != m.step)
				wrong(1, "A's first half is not rank 0's step", m.step);
		if (!all(b, B_BYTES / 4, B_FILL, 1))
			wrong(1, "B changed", m.step);
		check(cuMemsetD32(a + HALF, m.step + 1000000u, HALF / 4), 1, "cuMemsetD32");
		check(cuCtxSynchronize(), 1, "cuCtxSynchronize");
		if (m.step % 20 == 0) {
			printf("rank 1 step %u\n", m.step);
			fflush(stdout);
		}
		say(sock[1], &m);
	}
}

/* Every 25th step: a fresh allocation, shared and freed again. */
static void share_fresh(unsigned step)
{
	CUdeviceptr f;
	msg m = { .what = "fresh", .step = step };
	check(cuMemAlloc(&f, NEW_BYTES), 0, "cuMemAlloc (fresh)");
	check(cuMemsetD32(f, step, NEW_BYTES / 4), 0, "cuMemsetD32 (fresh)");
	check(cuCtxSynchronize(), 0, "cuCtxSynchronize");
	check(cuIpcGetMemHandle(&m.fresh, f), 0, "cuIpcGetMemHandle (fresh)");
	say(sock[0], &m);
	hear(sock[0], &m);
	check(cuMemFree(f), 0, "cuMemFree (fresh)");
}

static void rank0(void)
{
	CUdevice d;
	CUcontext c;
	CUstream s;
	CUevent ev;
	CUdeviceptr a, first, b;
	msg m = { .what = "open" };
	check(cuInit(0), 0, "cuInit");
	check(cuDeviceGet(&d, 0), 0, "cuDeviceGet");
	check(cuDevicePrimaryCtxRetain(&c, d), 0, "cuDevicePrimaryCtxRetain");
	check(cuCtxSetCurrent(c), 0, "cuCtxSetCurrent");
	check(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), 0, "cuStreamCreate");
	check(cuMemAlloc(&a, A_BYTES), 0, "cuMemAlloc (A)");
	check(cuMemAlloc(&first, B_BYTES), 0, "cuMemAlloc (a block before B)");
	check(cuMemAlloc(&b, B_BYTES), 0, "cuMemAlloc (B)");
	check(cuMemsetD32(b, B_FILL, B_BYTES / 4), 0, "cuMemsetD32 (B)");
	check(cuMemsetD32(a, 0, A_BYTES / 4), 0, "cuMemsetD32 (A)");
	check(cuCtxSynchronize(), 0, "cuCtxSynchronize");
	check(cuEventCreate(&ev, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING), 0, "cuEventCreate");
	check(cuIpcGetMemHandle(&m.a, a), 0, "cuIpcGetMemHandle (A)");
	check(cuIpcGetMemHandle(&m.b, b), 0, "cuIpcGetMemHandle (B)");
	check(cuIpcGetEventHandle(&m.ev, ev), 0, "cuIpcGetEventHandle");
	CUdeviceptr self;
	CUresult own = cuIpcOpenMemHandle(&self, m.a, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
	if (own != CUDA_ERROR_INVALID_CONTEXT)
		wrong(0, "opening its own handle did not fail as the driver's does", 0);
	say(sock[0], &m);
	for (unsigned step = 1;; step++) {
		if (step % 25 == 0)
			share_fresh(step);
		check(cuMemsetD32Async(a, step, HALF / 4, s), 0, "cuMemsetD32Async");
		check(cuEventRecord(ev, s), 0, "cuEventRecord");
		m = (msg){ .what = "step", .step = step };
		say(sock[0], &m);
		hear(sock[0], &m);
		if (m.step != step)
			wrong(0, "rank 1 answered another step", step);
		if (!all(a + HALF, HALF / 4, step + 1000000u, 0))
			wrong(0, "A's second half is not rank 1's step", step);
		if (step % 20 == 0) {
			printf("rank 0 step %u\n", step);
			fflush(stdout);
		}
		usleep(2000);
	}
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sock))
		return 1;
	bool untraced = getenv("IPC_UNTRACED_EXPORTER") && !strcmp(getenv("IPC_UNTRACED_EXPORTER"), "1");
	pid_t child = fork();
	if (child < 0)
		return 1;
	if (child == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		rank1();
		return 0;
	}
	if (untraced)
		setenv("PHOS_TRACE", "0", 1);
	rank0();
	return 0;
}
