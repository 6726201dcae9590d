/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The process-checkpoint API on another process: lock, checkpoint, restore
 * and unlock move it through its states; lock stops its CUDA calls until
 * unlock; checkpoint counts the device bytes the driver would have copied,
 * and a process that parked its memory behind an exported fd counts none.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda.h>

#include "simcuda/simcuda.h"
#include "tap.h"

#define ALLOC_BYTES (8u << 20)
#define VMM_BYTES (4u << 20)

/* ---- the target process --------------------------------------------------- */

static atomic_ulong *calls; /* shared with the test: CUDA calls completed */
static atomic_int stop;
static CUdeviceptr alloc;
static CUcontext ctx;

static void *worker(void *arg)
{
	(void)arg;
	cuCtxSetCurrent(ctx);
	while (!atomic_load(&stop)) {
		if (cuMemsetD8(alloc, 0x5a, 4096) == CUDA_SUCCESS)
			atomic_fetch_add(calls, 1);
		usleep(200);
	}
	return NULL;
}

static int target(int sock, int counter_fd)
{
	CUdevice dev;
	calls = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, counter_fd, 0);
	if (calls == MAP_FAILED || cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
	    cuCtxSetCurrent(ctx) || cuMemAlloc(&alloc, ALLOC_BYTES))
		return 10;
	CUmemAllocationProp prop = {
		.type = CU_MEM_ALLOCATION_TYPE_PINNED,
		.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
		.location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
	};
	CUmemAccessDesc acc = { .location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	CUmemGenericAllocationHandle h;
	CUdeviceptr va;
	if (cuMemCreate(&h, VMM_BYTES, &prop, 0) || cuMemAddressReserve(&va, VMM_BYTES, 0, 0, 0) ||
	    cuMemMap(va, VMM_BYTES, 0, h, 0) || cuMemSetAccess(va, VMM_BYTES, &acc, 1) ||
	    cuMemsetD32(va, 0xC0FFEE, VMM_BYTES / 4))
		return 11;
	pthread_t t;
	pthread_create(&t, NULL, worker, NULL);
	char c = 'r';
	if (write(sock, &c, 1) != 1)
		return 12;

	int fd = -1;
	while (read(sock, &c, 1) == 1) {
		char reply = 'y';
		if (c == 'p') { /* park: everything goes behind one exported fd */
			atomic_store(&stop, 1);
			pthread_join(t, NULL);
			if (cuMemFree(alloc) ||
			    cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) ||
			    cuMemUnmap(va, VMM_BYTES) || cuMemRelease(h))
				reply = 'n';
		} else if (c == 'u') { /* unpark: the same fd, at the same VA */
			uint32_t *buf = malloc(VMM_BYTES);
			if (cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd,
							   CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) ||
			    cuMemMap(va, VMM_BYTES, 0, h, 0) || cuMemSetAccess(va, VMM_BYTES, &acc, 1) ||
			    cuMemcpyDtoH(buf, va, VMM_BYTES))
				reply = 'n';
			for (size_t i = 0; reply == 'y' && i < VMM_BYTES / 4; i++)
				if (buf[i] != 0xC0FFEE)
					reply = 'n';
			free(buf);
		} else {
			break;
		}
		if (write(sock, &reply, 1) != 1)
			return 13;
	}
	return 0;
}

/* ---- the test ------------------------------------------------------------- */

static int ask(int sock, char c)
{
	char r = 0;
	return write(sock, &c, 1) == 1 && read(sock, &r, 1) == 1 && r == 'y';
}

static unsigned long advance_over(atomic_ulong *n, unsigned ms)
{
	unsigned long a = atomic_load(n);
	usleep(ms * 1000);
	return atomic_load(n) - a;
}

static CUprocessState state_of(int pid)
{
	CUprocessState s = CU_PROCESS_STATE_FAILED;
	cuCheckpointProcessGetState(pid, &s);
	return s;
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "target") == 0)
		return target(atoi(argv[2]), atoi(argv[3]));

	plan(12);
	int counter_fd = memfd_create("calls", 0);
	if (counter_fd < 0 || ftruncate(counter_fd, 4096))
		bail("memfd");
	atomic_ulong *n = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, counter_fd, 0);
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		bail("socketpair");
	pid_t pid = fork();
	if (pid == 0) {
		char a[16], b[16];
		close(sv[0]);
		snprintf(a, sizeof(a), "%d", sv[1]);
		snprintf(b, sizeof(b), "%d", counter_fd);
		execl("/proc/self/exe", argv[0], "target", a, b, (char *)NULL);
		_exit(127);
	}
	close(sv[1]);
	char c;
	if (read(sv[0], &c, 1) != 1 || c != 'r')
		bail("target did not start");

	ok(state_of(pid) == CU_PROCESS_STATE_RUNNING && advance_over(n, 30) > 0,
	   "a running process is RUNNING and its calls proceed");

	CUresult r = cuCheckpointProcessLock(pid, NULL);
	usleep(10000);
	ok(r == CUDA_SUCCESS && state_of(pid) == CU_PROCESS_STATE_LOCKED && advance_over(n, 60) == 0,
	   "lock makes it LOCKED and its CUDA calls block");
	ok(cuCheckpointProcessRestore(pid, NULL) == CUDA_ERROR_ILLEGAL_STATE,
	   "restore of a LOCKED process is refused");

	r = cuCheckpointProcessCheckpoint(pid, NULL);
	uint64_t bytes = 0;
	int e = simcuda_checkpoint_bytes(pid, &bytes);
	ok(r == CUDA_SUCCESS && state_of(pid) == CU_PROCESS_STATE_CHECKPOINTED, "checkpoint makes it CHECKPOINTED");
	ok(e == 0 && bytes == ALLOC_BYTES + VMM_BYTES,
	   "the checkpoint would have copied all its device memory (%llu bytes)", (unsigned long long)bytes);
	ok(cuCheckpointProcessUnlock(pid, NULL) == CUDA_ERROR_ILLEGAL_STATE,
	   "unlock of a CHECKPOINTED process is refused");

	r = cuCheckpointProcessRestore(pid, NULL);
	ok(r == CUDA_SUCCESS && state_of(pid) == CU_PROCESS_STATE_LOCKED && advance_over(n, 30) == 0,
	   "restore brings it back LOCKED");
	r = cuCheckpointProcessUnlock(pid, NULL);
	ok(r == CUDA_SUCCESS && state_of(pid) == CU_PROCESS_STATE_RUNNING && advance_over(n, 50) > 0,
	   "unlock makes it RUNNING and its calls proceed again");

	int tid = 0;
	char task[64];
	r = cuCheckpointProcessGetRestoreThreadId(pid, &tid);
	snprintf(task, sizeof(task), "/proc/%d/task/%d", pid, tid);
	struct stat st;
	ok(r == CUDA_SUCCESS && tid > 0 && stat(task, &st) == 0, "the restore thread is a thread of the process");

	/* Parked: its memory lives only behind the fd it exported. */
	int parked = ask(sv[0], 'p');
	bytes = 1;
	int cycle = cuCheckpointProcessLock(pid, NULL) == CUDA_SUCCESS &&
		    cuCheckpointProcessCheckpoint(pid, NULL) == CUDA_SUCCESS &&
		    simcuda_checkpoint_bytes(pid, &bytes) == 0 && cuCheckpointProcessRestore(pid, NULL) == CUDA_SUCCESS &&
		    cuCheckpointProcessUnlock(pid, NULL) == CUDA_SUCCESS;
	ok(parked && cycle && bytes == 0, "a parked process leaves 0 device bytes to copy (%llu)",
	   (unsigned long long)bytes);
	ok(ask(sv[0], 'u'), "unparked from its fd, its memory holds the same bytes at the same VA");

	CUprocessState s;
	ok(cuCheckpointProcessGetState(getpid(), &s) != CUDA_SUCCESS &&
		   cuCheckpointProcessLock(getpid(), NULL) != CUDA_SUCCESS,
	   "a process without CUDA cannot be queried or locked");

	close(sv[0]);
	int status;
	waitpid(pid, &status, 0);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		diag("target exited with status %d", status);
	return done();
}
