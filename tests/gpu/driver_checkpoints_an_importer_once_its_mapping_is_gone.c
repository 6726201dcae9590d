/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * What the driver allows for device memory one process exported and
 * another imported (as NCCL shares its buffers between the ranks of one
 * host), without phos in the way. The parent owns 64 MiB made with
 * cuMemCreate (POSIX fd handles) and filled with a pattern; the child
 * imports the fd it is sent (SCM_RIGHTS) and maps it.
 *   1. The child reads the parent's pattern through its mapping.
 *   2. The child unmaps and releases it, keeping the fd (the VA range
 *      stays reserved): the driver locks, checkpoints, restores and
 *      unlocks the child.
 *   3. The child imports the kept fd again, maps it at the same VA, and
 *      reads what the parent wrote meanwhile: the same memory.
 *   4. What names the memory: every exported fd is an open of the same
 *      device file (one st_dev:st_ino for two allocations), and two
 *      exports of one handle are two open files; only the open file the
 *      child got is the parent's (kcmp KCMP_FILE), which is how phosfs
 *      matches an import to its owner.
 *   5. While the child maps it, the driver's cycle fails (its README: no
 *      IPC memory); the step that fails is reported. Last: the child may
 *      be left unusable, and is killed.
 * (The child is this program again, run with --child, its socket on fd 3.)
 */
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/kcmp.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda.h>

#include "../tap.h"
#include "driver_cycle.h"

#define BYTES (64ull << 20)

static int send_fd(int sock, int fd, const char *msg)
{
	char cbuf[CMSG_SPACE(sizeof(int))] = { 0 };
	struct iovec io = { (void *)msg, strlen(msg) + 1 };
	struct msghdr m = { .msg_iov = &io, .msg_iovlen = 1 };
	if (fd >= 0) {
		m.msg_control = cbuf;
		m.msg_controllen = sizeof(cbuf);
		struct cmsghdr *c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	return sendmsg(sock, &m, 0) > 0 ? 0 : -1;
}

/* Receives a message into buf (and an fd into *fd, or -1). */
static int recv_msg(int sock, char *buf, size_t n, int *fd)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec io = { buf, n - 1 };
	struct msghdr m = { .msg_iov = &io, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf) };
	ssize_t k = recvmsg(sock, &m, 0);
	if (k <= 0)
		return -1;
	buf[k] = 0;
	if (fd) {
		*fd = -1;
		struct cmsghdr *c = CMSG_FIRSTHDR(&m);
		if (c && c->cmsg_type == SCM_RIGHTS)
			memcpy(fd, CMSG_DATA(c), sizeof(int));
	}
	return 0;
}

/* Imports fd and maps it at va (reserved), with read-write access on
 * device 0. */
static CUresult map_fd(int fd, CUdeviceptr va, CUmemGenericAllocationHandle *h)
{
	CUresult r = cuMemImportFromShareableHandle(h, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	if (!r)
		r = cuMemMap(va, BYTES, 0, *h, 0);
	CUmemAccessDesc a = { .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 }, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	if (!r)
		r = cuMemSetAccess(va, BYTES, &a, 1);
	return r;
}

/* Whether the first word of every MiB at va is v + its index. */
static const char *check(CUdeviceptr va, uint32_t v)
{
	for (uint64_t off = 0; off < BYTES; off += 1 << 20) {
		uint32_t w = 0;
		if (cuMemcpyDtoH(&w, va + off, 4))
			return "the copy failed";
		if (w != v + (uint32_t)(off >> 20))
			return "the bytes differ";
	}
	return NULL;
}

/* The child: imports, maps and checks on the parent's word; "unmap"
 * unmaps and releases, keeping the fd; "remap" maps it again. */
static int child(int sock)
{
	CUdevice d;
	CUcontext c;
	CUdeviceptr va;
	CUmemGenericAllocationHandle h;
	char m[128], out[160];
	int fd = -1;
	if (cuInit(0) || cuDeviceGet(&d, 0) || cuDevicePrimaryCtxRetain(&c, d) || cuCtxSetCurrent(c) ||
	    cuMemAddressReserve(&va, BYTES, 0, 0, 0))
		return 1;
	while (recv_msg(sock, m, sizeof(m), fd < 0 ? &fd : NULL) == 0) {
		CUresult r = CUDA_SUCCESS;
		const char *bad = NULL;
		uint32_t v = 0;
		if (!strncmp(m, "map", 3) || !strncmp(m, "remap", 5)) {
			sscanf(strchr(m, ' ') + 1, "%u", &v);
			r = map_fd(fd, va, &h);
			bad = r ? err_name(r) : check(va, v);
			snprintf(out, sizeof(out), "%s %d", bad ? bad : "ok", fd);
		} else if (!strcmp(m, "unmap")) {
			r = cuMemUnmap(va, BYTES);
			if (!r)
				r = cuMemRelease(h);
			snprintf(out, sizeof(out), "%s", r ? err_name(r) : "ok");
		} else {
			break;
		}
		if (send_fd(sock, -1, out))
			return 1;
	}
	return 0;
}

/* Writes v + MiB index into the first word of every MiB at va. */
static int stamp(CUdeviceptr va, uint32_t v)
{
	for (uint64_t off = 0; off < BYTES; off += 1 << 20) {
		uint32_t w = v + (uint32_t)(off >> 20);
		if (cuMemcpyHtoD(va + off, &w, 4))
			return -1;
	}
	return cuCtxSynchronize() ? -1 : 0;
}

int main(int argc, char **argv)
{
	if (argc == 2 && !strcmp(argv[1], "--child"))
		return child(3);
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv))
		return 1;
	pid_t pid = fork();
	if (pid == 0) {
		dup2(sv[1], 3);
		execl("/proc/self/exe", argv[0], "--child", (char *)NULL);
		_exit(127);
	}
	close(sv[1]);
	plan(5);
	CUdevice d;
	CUcontext c;
	CUdeviceptr va;
	CUmemGenericAllocationHandle h;
	CUmemAllocationProp p = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
				  .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
				  .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 } };
	CUmemAccessDesc a = { .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 }, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	int fd1 = -1, fd2 = -1, fd3 = -1;
	CUmemGenericAllocationHandle other;
	if (cuInit(0) || cuDeviceGet(&d, 0) || cuDevicePrimaryCtxRetain(&c, d) || cuCtxSetCurrent(c) ||
	    cuMemCreate(&h, BYTES, &p, 0) || cuMemAddressReserve(&va, BYTES, 0, 0, 0) || cuMemMap(va, BYTES, 0, h, 0) ||
	    cuMemSetAccess(va, BYTES, &a, 1) || stamp(va, 1000) ||
	    cuMemExportToShareableHandle(&fd1, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) ||
	    cuMemExportToShareableHandle(&fd2, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) ||
	    cuMemCreate(&other, BYTES, &p, 0) ||
	    cuMemExportToShareableHandle(&fd3, other, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0))
		bail("the parent's CUDA set-up failed");
	struct stat s1, s3;
	fstat(fd1, &s1);
	fstat(fd3, &s3);
	char rep[160], why[96];
	send_fd(sv[0], fd1, "map 1000");
	recv_msg(sv[0], rep, sizeof(rep), NULL);
	ok(!strncmp(rep, "ok", 2), "the child imports the parent's memory and reads its pattern (%s)", rep);
	int cfd = -1;
	sscanf(rep, "%*s %d", &cfd);

	send_fd(sv[0], -1, "unmap");
	recv_msg(sv[0], rep, sizeof(rep), NULL);
	const char *e = !strcmp(rep, "ok") ? cycle(pid, why, sizeof(why)) : rep;
	ok(!e, "unmapped and released (the fd kept), the driver locks, checkpoints, restores and unlocks the child (%s)",
	   e ? e : "ok");

	stamp(va, 2000);
	send_fd(sv[0], -1, "remap 2000");
	recv_msg(sv[0], rep, sizeof(rep), NULL);
	ok(!strncmp(rep, "ok", 2), "mapped again from the kept fd at the same VA, it reads what the parent wrote since (%s)",
	   rep);

	pid_t me = getpid();
	long two = syscall(SYS_kcmp, me, me, KCMP_FILE, fd1, fd2), got = syscall(SYS_kcmp, me, pid, KCMP_FILE, fd1, cfd);
	diag("two allocations' exports: %lu:%lu and %lu:%lu; two exports of one handle are %s open files",
	     (unsigned long)s1.st_dev, (unsigned long)s1.st_ino, (unsigned long)s3.st_dev, (unsigned long)s3.st_ino,
	     two ? "two" : "one");
	ok(got == 0 && two != 0,
	   "only the open file names the memory: the child's fd is the parent's first export (kcmp), a second export "
	   "is another open file, and two allocations' fds are %s device file",
	   s1.st_dev == s3.st_dev && s1.st_ino == s3.st_ino ? "one" : "not one");
	e = cycle(pid, why, sizeof(why));
	diag("the driver's cycle of the child while it maps the memory: %s", e ? e : "it worked");
	ok(e != NULL, "mapped, the driver will not checkpoint and restore the child (%s)", e ? e : "it did");
	kill(pid, SIGKILL);
	int st;
	waitpid(pid, &st, 0);
	return done();
}
