/*
 * pair_app: two CUDA processes that block on each other, as the ranks of
 * an NCCL all-reduce do.
 *
 *   pair_app CUBIN [LIBRARY]
 *
 * It forks before it uses CUDA; parent (rank 0) and child (rank 1) each
 * run kernel `meet` of CUBIN in a loop. meet publishes the rank's value
 * for the step in memory both processes map, waits until the peer has
 * published its own, and writes the sum. Each rank then checks the sum
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
 * each step also all-reduces on it.
 *
 * On a GPU the page both processes map is registered with the driver
 * (each process's pointer to it is then the device's too); simcuda runs
 * meet as simcuda_kernel_meet below.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "simcuda/simcuda.h"

typedef struct shared {
	volatile unsigned slots[2];
	volatile unsigned vals[4];
	atomic_int hold, stream_sync;
} shared;

static shared *sh;

/* NCCL's, when LIBRARY has it (the ABI of tests/apps/nccl_stub.c). */
typedef struct {
	char internal[128];
} nccl_id;
static nccl_id id;
static int (*nccl_init)(void **, int, nccl_id, int);
static int (*nccl_allreduce)(const void *, void *, size_t, int, int, void *, void *);

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
	check(cuMemHostRegister(sh, 4096, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP), rank,
	      "cuMemHostRegister");
	volatile unsigned *slots = sh->slots, *vals = sh->vals;
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
		if (comm && nccl_allreduce(NULL, NULL, 0, 0, 0, comm, s))
			check(CUDA_ERROR_UNKNOWN, rank, "ncclAllReduce");
		void *args[] = { &slots, &vals, &r, &step, &out };
		check(cuLaunchKernel(meet, 1, 1, 1, 1, 1, 1, 0, s, args, NULL), rank, "cuLaunchKernel");
		if (atomic_load(&sh->stream_sync))
			check(cuStreamSynchronize(s), rank, "cuStreamSynchronize");
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
	if (!get_id || !nccl_init || !nccl_allreduce || get_id(&id))
		nccl_init = NULL;
	setvbuf(stdout, NULL, _IOLBF, 0);
	sh = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
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
