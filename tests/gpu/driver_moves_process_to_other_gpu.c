/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * What the driver needs to restore a process onto another GPU
 * (cuCheckpointProcessRestore with gpuPairs), on a machine with two GPUs,
 * without phos in the way: a child holds 256 MiB on GPU 0, the driver
 * locks, checkpoints and restores it with the pairs given, and the child
 * then checks its bytes and says which GPU its ordinal 0 now names.
 *   1. The pairs of every visible GPU (0 to 1 and 1 to 0), as phosfs gives
 *      them: the memory is on GPU 1, intact.
 *   2. A pair for the moved GPU only (0 to 1): the driver's answer is
 *      reported; if it restores, the memory must be on GPU 1, intact.
 * Skips with fewer than two GPUs. (The child is this program again, run
 * with --child, its pipes on fds 3 and 4.)
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda.h>

#include "../tap.h"

#define BYTES (256ull << 20)

static void uuid_text(const CUuuid *u, char *out)
{
	char *p = out + sprintf(out, "GPU-");
	for (int i = 0; i < 16; i++)
		p += sprintf(p, "%02x%s", (unsigned char)u->bytes[i], i == 3 || i == 5 || i == 7 || i == 9 ? "-" : "");
}

static const char *err_name(CUresult r)
{
	const char *s = "?";
	cuGetErrorName(r, &s);
	return s;
}

/* The child: fills its buffer, says "ready", and on a byte from cmd checks
 * it and writes "ok UUID" or "bad ..." to rep. */
static int child(int cmd, int rep)
{
	CUdevice d;
	CUcontext c;
	CUdeviceptr buf;
	uint32_t *host = malloc(BYTES), *back = malloc(BYTES);
	char line[128];
	if (!host || !back || cuInit(0) || cuDeviceGet(&d, 0) || cuDevicePrimaryCtxRetain(&c, d) ||
	    cuCtxSetCurrent(c) || cuMemAlloc(&buf, BYTES))
		return 1;
	for (size_t i = 0; i < BYTES / 4; i++)
		host[i] = (uint32_t)(i * 2654435761u);
	if (cuMemcpyHtoD(buf, host, BYTES) || cuCtxSynchronize())
		return 1;
	if (write(rep, "ready\n", 6) != 6)
		return 1;
	char go;
	if (read(cmd, &go, 1) != 1)
		return 1;
	CUresult r = cuMemcpyDtoH(back, buf, BYTES);
	CUdevice now;
	CUuuid u;
	if (r || cuCtxGetDevice(&now) || cuDeviceGetUuid(&u, now)) {
		snprintf(line, sizeof(line), "bad: the copy back failed (%s)\n", err_name(r));
	} else if (memcmp(host, back, BYTES)) {
		snprintf(line, sizeof(line), "bad: the bytes differ\n");
	} else {
		char t[48];
		uuid_text(&u, t);
		snprintf(line, sizeof(line), "ok %s\n", t);
	}
	return write(rep, line, strlen(line)) > 0 ? 0 : 1;
}

/* Reads a line from fd into buf. */
static int read_line(int fd, char *buf, size_t n)
{
	size_t at = 0;
	while (at + 1 < n) {
		ssize_t k = read(fd, buf + at, 1);
		if (k <= 0)
			break;
		if (buf[at++] == '\n')
			break;
	}
	buf[at] = 0;
	return at > 0 ? 0 : -1;
}

/* Runs one child through lock, checkpoint, restore with pairs and unlock.
 * *restored: the driver's answer to the restore; says: the child's report. */
static int moved(const CUcheckpointGpuPair *pairs, unsigned n, CUresult *restored, char *says, size_t len)
{
	int cmd[2], rep[2];
	*says = 0;
	if (pipe(cmd) || pipe(rep))
		return -1;
	/* A fresh program: CUDA is not for a forked child of a process that
	 * initialised it. */
	pid_t pid = fork();
	if (pid == 0) {
		if (dup2(cmd[0], 3) < 0 || dup2(rep[1], 4) < 0)
			_exit(1);
		execl("/proc/self/exe", "driver_moves_process_to_other_gpu", "--child", (char *)NULL);
		_exit(127);
	}
	close(cmd[0]);
	close(rep[1]);
	char line[128];
	int e = read_line(rep[0], line, sizeof(line)) || strcmp(line, "ready\n") ? -1 : 0;
	CUcheckpointLockArgs lock = { .timeoutMs = 10000 };
	CUcheckpointRestoreArgs args;
	memset(&args, 0, sizeof(args));
	args.gpuPairs = (CUcheckpointGpuPair *)pairs;
	args.gpuPairsCount = n;
	*restored = CUDA_ERROR_UNKNOWN;
	if (!e && (cuCheckpointProcessLock(pid, &lock) || cuCheckpointProcessCheckpoint(pid, NULL)))
		e = -1;
	if (!e) {
		*restored = cuCheckpointProcessRestore(pid, &args);
		if (*restored == CUDA_SUCCESS && !cuCheckpointProcessUnlock(pid, NULL) && write(cmd[1], "g", 1) == 1)
			read_line(rep[0], says, len);
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	close(cmd[1]);
	close(rep[0]);
	return e;
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "--child"))
		return child(3, 4);
	int n = 0;
	if (cuInit(0) || cuDeviceGetCount(&n))
		skip_all("no CUDA driver");
	if (n < 2)
		skip_all("needs two GPUs");
	plan(2);
	CUuuid u[2];
	char t[2][48];
	for (int i = 0; i < 2; i++) {
		CUdevice d;
		if (cuDeviceGet(&d, i) || cuDeviceGetUuid(&u[i], d))
			bail("cannot read GPU %d's UUID", i);
		uuid_text(&u[i], t[i]);
	}
	CUcheckpointGpuPair every[2] = { { u[0], u[1] }, { u[1], u[0] } };
	CUresult r;
	char says[128];
	int e = moved(every, 2, &r, says, sizeof(says));
	diag("every GPU in gpuPairs: restore %s; the process: %s", err_name(r), *says ? says : "nothing\n");
	char want[64];
	snprintf(want, sizeof(want), "ok %s\n", t[1]);
	ok(!e && r == CUDA_SUCCESS && !strcmp(says, want),
	   "restored with the pairs of every GPU, the process's memory is on GPU 1 and intact");

	e = moved(every, 1, &r, says, sizeof(says));
	diag("only the moved GPU in gpuPairs: restore %s; the process: %s", err_name(r), *says ? says : "nothing\n");
	ok(!e && (r != CUDA_SUCCESS || !strcmp(says, want)),
	   "with a pair for the moved GPU only, the driver %s", r == CUDA_SUCCESS ? "restores it intact on GPU 1" :
	   "refuses the restore");
	return done();
}
