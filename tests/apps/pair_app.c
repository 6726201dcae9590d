/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * pair_app: two CUDA processes that block on each other, as the ranks of
 * an NCCL all-reduce do.
 *
 *   pair_app CUBIN [LIBRARY]
 *
 * It forks before it uses CUDA; parent (rank 0) and child (rank 1) each
 * run kernel `meet` of CUBIN in a loop. meet publishes the rank's value
 * for the step in device memory both processes map, waits until the peer
 * has published its own, and writes the sum. The memory is shared as
 * NCCL shares its buffers between ranks: rank 0 makes it (cuMemCreate),
 * exports a POSIX fd of it and sends that over a Unix socket; rank 1
 * imports it, maps it, and closes the fd. Each rank then checks the sum
 * and prints "rank R step N" every 20 steps, or "WRONG …" and exits 1.
 *
 * Rank 0 waits for each step in cuMemcpyDtoH, a call the tracer gates;
 * after SIGUSR2 it waits in cuStreamSynchronize instead (and back at the
 * next SIGUSR2). SIGUSR1 (to rank 0) holds rank 1 on the host before its
 * next step, or lets it go again: rank 0 then waits for rank 1 inside
 * the device, and neither can be checkpointed without the other. Rank 1
 * prints "rank 1 holds at step N" when it stops.
 *
 * With LIBRARY (tests/apps/libnccl.so.2, say), it loads that first, as
 * a program that uses NCCL has it loaded; if it has NCCL's API, the ranks
 * make a communicator of 2 from a unique id made before the fork, and
 * each step also all-reduces on it. meet then stands for the collective's
 * kernel: it is launched inside a group with the all-reduce, as NCCL
 * launches a group's kernels in ncclGroupEnd.
 *
 * With PAIR_HOST_MEM=1, rank 0 also makes host memory with cuMemCreate
 * (a HOST_NUMA location, as NCCL makes its host buffers), which the CPU
 * writes each step and checks, and which must stay host memory: it says
 * "WRONG" when it is not (after a restore, say).
 *
 * With PAIR_RING=1 in its environment, rank 0 also sets up an io_uring
 * ring (which CRIU cannot dump: under the tracer, only with
 * PHOS_ALLOW_IO_URING=1) and keeps it.
 *
 * simcuda runs meet as simcuda_kernel_meet below. It is built without
 * the sanitizers even in a SANITIZE build: CRIU's restore of an ASan
 * process that was itself restored crashed it (SIGSEGV while CRIU reads
 * its pages back), and what the tests check is phosfs, the tracer and
 * CRIU, not this program.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <linux/io_uring.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "simcuda/simcuda.h"

/* Host memory both map: what the signals switch. */
typedef struct shared {
	atomic_int hold, stream_sync;
} shared;

static shared *sh;
static int sock[2]; /* rank 0 sends the device memory's fd on sock[0] */

/* NCCL's, when LIBRARY has it (the ABI of tests/apps/nccl_stub.c). */
typedef struct {
	char internal[128];
} nccl_id;
static nccl_id id;
static int (*nccl_init)(void **, int, nccl_id, int);
static int (*nccl_allreduce)(const void *, void *, size_t, int, int, void *, void *);
static int (*nccl_group_start)(void), (*nccl_group_end)(void);

static void on_usr1(int sig)
{
	(void)sig;
	atomic_fetch_xor(&sh->hold, 1);
}

static void on_usr2(int sig)
{
	(void)sig;
	atomic_fetch_xor(&sh->stream_sync, 1);
}

static void check(CUresult r, int rank, const char *what)
{
	if (r != CUDA_SUCCESS) {
		printf("rank %d: %s failed: CUDA error %d\n", rank, what, (int)r);
		exit(1);
	}
}

/* The host implementation of meet (tests/kernels/pair.cu). */
void simcuda_kernel_meet(const simcuda_launch *l)
{
	volatile unsigned *slots = *(volatile unsigned **)l->params[0];
	volatile unsigned *vals = *(volatile unsigned **)l->params[1];
	unsigned rank = *(unsigned *)l->params[2], step = *(unsigned *)l->params[3];
	unsigned *out = *(unsigned **)l->params[4];
	unsigned me = rank & 1, peer = me ^ 1, at = (step & 1) * 2;
	vals[at + me] = step * 3 + rank * 7;
	atomic_thread_fence(memory_order_seq_cst);
	slots[me] = step;
	while (slots[peer] < step)
		usleep(100);
	atomic_thread_fence(memory_order_seq_cst);
	*out = vals[at] + vals[at + 1];
}

static void send_fd(int s, int fd)
{
	char c = 0, ctl[CMSG_SPACE(sizeof(int))] = { 0 };
	struct iovec io = { &c, 1 };
	struct msghdr m = { .msg_iov = &io, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl) };
	struct cmsghdr *h = CMSG_FIRSTHDR(&m);
	h->cmsg_level = SOL_SOCKET;
	h->cmsg_type = SCM_RIGHTS;
	h->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(h), &fd, sizeof(int));
	if (sendmsg(s, &m, 0) != 1)
		check(CUDA_ERROR_UNKNOWN, 0, "sending the memory's fd");
}

static int recv_fd(int s)
{
	char c, ctl[CMSG_SPACE(sizeof(int))];
	struct iovec io = { &c, 1 };
	struct msghdr m = { .msg_iov = &io, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl) };
	struct cmsghdr *h = recvmsg(s, &m, 0) == 1 ? CMSG_FIRSTHDR(&m) : NULL;
	int fd = -1;
	if (h && h->cmsg_type == SCM_RIGHTS)
		memcpy(&fd, CMSG_DATA(h), sizeof(int));
	if (fd < 0)
		check(CUDA_ERROR_UNKNOWN, 1, "receiving the memory's fd");
	return fd;
}

/* The device memory both ranks map, made by rank 0 and imported by
 * rank 1, at *va. */
static void share(int rank, CUdevice dev, CUdeviceptr *va)
{
	CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
				     .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
				     .location = { CU_MEM_LOCATION_TYPE_DEVICE, dev } };
	size_t size;
	check(cuMemGetAllocationGranularity(&size, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), rank,
	      "cuMemGetAllocationGranularity");
	CUmemGenericAllocationHandle h;
	int fd = -1;
	if (rank == 0) {
		check(cuMemCreate(&h, size, &prop, 0), rank, "cuMemCreate");
		check(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), rank,
		      "cuMemExportToShareableHandle");
	} else {
		fd = recv_fd(sock[1]);
		check(cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
		      rank, "cuMemImportFromShareableHandle");
	}
	check(cuMemAddressReserve(va, size, 0, 0, 0), rank, "cuMemAddressReserve");
	check(cuMemMap(*va, size, 0, h, 0), rank, "cuMemMap");
	CUmemAccessDesc acc = { { CU_MEM_LOCATION_TYPE_DEVICE, dev }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	check(cuMemSetAccess(*va, size, &acc, 1), rank, "cuMemSetAccess");
	check(cuMemRelease(h), rank, "cuMemRelease"); /* the mapping keeps it */
	if (rank == 0) {
		check(cuMemsetD8(*va, 0, size), rank, "cuMemsetD8");
		check(cuCtxSynchronize(), rank, "cuCtxSynchronize");
		send_fd(sock[0], fd);
	}
	close(fd);
}

static volatile unsigned *hostmem; /* PAIR_HOST_MEM: rank 0's host memory */

/* Makes hostmem: host memory on NUMA node 0, mapped for the CPU and dev. */
static void host_memory(CUdevice dev)
{
	CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
				     .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
				     .location = { CU_MEM_LOCATION_TYPE_HOST_NUMA, 0 } };
	size_t size;
	check(cuMemGetAllocationGranularity(&size, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), 0,
	      "cuMemGetAllocationGranularity (host)");
	CUmemGenericAllocationHandle h;
	CUdeviceptr va;
	check(cuMemCreate(&h, size, &prop, 0), 0, "cuMemCreate (host)");
	check(cuMemAddressReserve(&va, size, 0, 0, 0), 0, "cuMemAddressReserve (host)");
	check(cuMemMap(va, size, 0, h, 0), 0, "cuMemMap (host)");
	CUmemAccessDesc acc[2] = { { { CU_MEM_LOCATION_TYPE_DEVICE, dev }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE },
				   { { CU_MEM_LOCATION_TYPE_HOST, 0 }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE } };
	check(cuMemSetAccess(va, size, acc, 2), 0, "cuMemSetAccess (host)");
	hostmem = (volatile unsigned *)(uintptr_t)va;
}

/* Rank 0's check of its host memory at step: what it wrote last step is
 * there, and the memory is still host memory. */
static void check_host_memory(unsigned step)
{
	if (*hostmem != step - 1) {
		printf("WRONG: rank 0 step %u: host memory holds %u, not %u\n", step, *hostmem, step - 1);
		exit(1);
	}
	*hostmem = step;
	CUmemGenericAllocationHandle h;
	CUmemAllocationProp prop;
	if (step % 20 == 0 && (cuMemRetainAllocationHandle(&h, (void *)hostmem) != CUDA_SUCCESS ||
			       cuMemGetAllocationPropertiesFromHandle(&prop, h) != CUDA_SUCCESS ||
			       cuMemRelease(h) != CUDA_SUCCESS || prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE)) {
		printf("WRONG: rank 0 step %u: its host memory is not host memory any more\n", step);
		exit(1);
	}
}

static void run(int rank, const char *cubin)
{
	CUdevice dev;
	CUcontext ctx;
	CUmodule mod;
	CUfunction meet;
	CUstream s;
	CUdeviceptr out;
	check(cuInit(0), rank, "cuInit");
	check(cuDeviceGet(&dev, 0), rank, "cuDeviceGet");
	check(cuDevicePrimaryCtxRetain(&ctx, dev), rank, "cuDevicePrimaryCtxRetain");
	check(cuCtxSetCurrent(ctx), rank, "cuCtxSetCurrent");
	check(cuModuleLoad(&mod, cubin), rank, "cuModuleLoad");
	check(cuModuleGetFunction(&meet, mod, "meet"), rank, "cuModuleGetFunction");
	check(cuStreamCreate(&s, CU_STREAM_DEFAULT), rank, "cuStreamCreate");
	check(cuMemAlloc(&out, 4096), rank, "cuMemAlloc");
	CUdeviceptr va;
	share(rank, dev, &va);
	const char *hm = getenv("PAIR_HOST_MEM");
	if (rank == 0 && hm && !strcmp(hm, "1"))
		host_memory(dev);
	const char *ring = getenv("PAIR_RING");
	struct io_uring_params up = { 0 };
	if (rank == 0 && ring && !strcmp(ring, "1") && syscall(SYS_io_uring_setup, 4, &up) < 0)
		printf("rank 0: no io_uring ring: %s\n", strerror(errno));
	CUdeviceptr slots = va, vals = va + 64;
	unsigned r = (unsigned)rank;
	void *comm = NULL;
	if (nccl_init && nccl_init(&comm, 2, id, rank))
		check(CUDA_ERROR_UNKNOWN, rank, "ncclCommInitRank");
	for (unsigned step = 1;; step++) {
		if (rank == 1 && atomic_load(&sh->hold)) {
			printf("rank 1 holds at step %u\n", step);
			while (atomic_load(&sh->hold))
				usleep(1000);
		}
		if (comm && (nccl_group_start() || nccl_allreduce(NULL, NULL, 0, 0, 0, comm, s)))
			check(CUDA_ERROR_UNKNOWN, rank, "ncclAllReduce");
		void *args[] = { &slots, &vals, &r, &step, &out };
		check(cuLaunchKernel(meet, 1, 1, 1, 1, 1, 1, 0, s, args, NULL), rank, "cuLaunchKernel");
		if (comm && nccl_group_end())
			check(CUDA_ERROR_UNKNOWN, rank, "ncclGroupEnd");
		if (atomic_load(&sh->stream_sync))
			check(cuStreamSynchronize(s), rank, "cuStreamSynchronize");
		if (hostmem)
			check_host_memory(step);
		unsigned sum = 0;
		check(cuMemcpyDtoH(&sum, out, sizeof(sum)), rank, "cuMemcpyDtoH");
		if (sum != step * 6 + 7) {
			printf("WRONG: rank %d step %u: sum %u, not %u\n", rank, step, sum, step * 6 + 7);
			exit(1);
		}
		if (step % 20 == 0)
			printf("rank %d step %u\n", rank, step);
	}
}

int main(int argc, char **argv)
{
	if (argc != 2 && argc != 3) {
		fprintf(stderr, "usage: pair_app CUBIN [LIBRARY]\n");
		return 2;
	}
	void *lib = argc == 3 ? dlopen(argv[2], RTLD_NOW | RTLD_GLOBAL) : NULL;
	if (argc == 3 && !lib) {
		fprintf(stderr, "pair_app: %s\n", dlerror());
		return 2;
	}
	int (*get_id)(nccl_id *) = lib ? (int (*)(nccl_id *))dlsym(lib, "ncclGetUniqueId") : NULL;
	*(void **)&nccl_init = lib ? dlsym(lib, "ncclCommInitRank") : NULL;
	*(void **)&nccl_allreduce = lib ? dlsym(lib, "ncclAllReduce") : NULL;
	*(void **)&nccl_group_start = lib ? dlsym(lib, "ncclGroupStart") : NULL;
	*(void **)&nccl_group_end = lib ? dlsym(lib, "ncclGroupEnd") : NULL;
	if (!get_id || !nccl_init || !nccl_allreduce || !nccl_group_start || !nccl_group_end || get_id(&id))
		nccl_init = NULL;
	setvbuf(stdout, NULL, _IOLBF, 0);
	sh = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sock))
		return 1;
	signal(SIGUSR1, on_usr1);
	signal(SIGUSR2, on_usr2);
	pid_t c = fork();
	if (c < 0)
		return 1;
	if (c == 0)
		prctl(PR_SET_PDEATHSIG, SIGKILL); /* it would wait for its peer for ever */
	run(c == 0, argv[1]);
	return 0;
}
