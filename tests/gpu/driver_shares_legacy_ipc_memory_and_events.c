/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * What the driver does with legacy CUDA IPC (cuIpcGetMemHandle and
 * cuIpcGetEventHandle, as torch.multiprocessing shares tensors and
 * events), without phos in the way: the facts the tracer's own IPC
 * handles stand on. The parent exports; the child (this program again,
 * with --child, its socket on fd 3) opens.
 *   1. VMM memory (cuMemCreate, as the tracer makes every allocation)
 *      has no legacy IPC handle: the driver refuses it.
 *   2. cuMemAlloc memory does: the child opens it and reads the parent's
 *      pattern. A second open of the same handle in the child, and an
 *      open in the exporting process, are said (not asserted).
 *   3. An interprocess event opens in the child, and orders the child's
 *      work after the parent's.
 *   4. Once the child closed the memory, the driver's checkpoint cycle
 *      of the child (still holding the event) and of the parent work,
 *   5. and the event still orders the child's work after them.
 *   6. A reserved VA with nothing mapped: cuPointerGetAttribute fails
 *      there (as Triton's launchers ask it of every tensor they launch
 *      with), and works on mapped VMM memory.
 * Said, not asserted: what an importer's maps and fds show of a legacy
 * IPC open and of a VMM import, and the cycle of each process while the
 * child maps the parent's legacy IPC memory (last: it may leave the
 * child unusable).
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda.h>

#include "../tap.h"
#include "driver_cycle.h"

#define BYTES (64ull << 20)

/* One message each way: a word and up to 128 bytes of payload. */
typedef struct msg {
	char what[16];
	uint32_t v;
	uint8_t data[128];
	char text[160];
} msg;

/* Sends m, with fd (-1: none). */
static int say_fd(int sock, const msg *m, int fd)
{
	char cbuf[CMSG_SPACE(sizeof(int))] = { 0 };
	struct iovec io = { (void *)m, sizeof(*m) };
	struct msghdr h = { .msg_iov = &io, .msg_iovlen = 1 };
	if (fd >= 0) {
		h.msg_control = cbuf;
		h.msg_controllen = sizeof(cbuf);
		struct cmsghdr *c = CMSG_FIRSTHDR(&h);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	return sendmsg(sock, &h, 0) == (ssize_t)sizeof(*m) ? 0 : -1;
}

static int say(int sock, const msg *m)
{
	return say_fd(sock, m, -1);
}

/* Receives m, and an fd sent with it into *fd (-1: none). */
static int hear_fd(int sock, msg *m, int *fd)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec io = { m, sizeof(*m) };
	struct msghdr h = { .msg_iov = &io, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf) };
	*fd = -1;
	if (recvmsg(sock, &h, 0) != (ssize_t)sizeof(*m))
		return -1;
	struct cmsghdr *c = CMSG_FIRSTHDR(&h);
	if (c && c->cmsg_type == SCM_RIGHTS)
		memcpy(fd, CMSG_DATA(c), sizeof(int));
	return 0;
}

static int hear(int sock, msg *m)
{
	int fd;
	return hear_fd(sock, m, &fd);
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

static int stamp(CUdeviceptr va, uint32_t v)
{
	for (uint64_t off = 0; off < BYTES; off += 1 << 20) {
		uint32_t w = v + (uint32_t)(off >> 20);
		if (cuMemcpyHtoD(va + off, &w, 4))
			return -1;
	}
	return cuCtxSynchronize() ? -1 : 0;
}

static int child(int sock)
{
	CUdevice d;
	CUcontext c;
	CUdeviceptr va = 0, again = 0;
	CUevent ev = NULL;
	CUstream s;
	msg m, out;
	int fd;
	if (cuInit(0) || cuDeviceGet(&d, 0) || cuDevicePrimaryCtxRetain(&c, d) || cuCtxSetCurrent(c) ||
	    cuStreamCreate(&s, CU_STREAM_NON_BLOCKING))
		return 1;
	while (hear_fd(sock, &m, &fd) == 0) {
		memset(&out, 0, sizeof(out));
		CUresult r = CUDA_SUCCESS;
		if (!strcmp(m.what, "import")) {
			/* A VMM import from the POSIX fd sent, mapped; the fd is
			 * closed, as NCCL does. */
			CUmemGenericAllocationHandle h;
			CUdeviceptr at;
			CUmemAccessDesc a = { .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 },
					      .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
			r = cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
			if (!r)
				r = cuMemAddressReserve(&at, BYTES, 0, 0, 0);
			if (!r)
				r = cuMemMap(at, BYTES, 0, h, 0);
			if (!r)
				r = cuMemSetAccess(at, BYTES, &a, 1);
			close(fd);
			snprintf(out.text, sizeof(out.text), "%s", err_name(r));
		} else if (!strcmp(m.what, "open")) {
			CUipcMemHandle h;
			memcpy(&h, m.data, sizeof(h));
			r = cuIpcOpenMemHandle(&va, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
			const char *bad = r ? err_name(r) : check(va, m.v);
			CUresult r2 = r ? r : cuIpcOpenMemHandle(&again, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
			snprintf(out.text, sizeof(out.text), "%s; a second open: %s%s", bad ? bad : "ok", err_name(r2),
				 !r2 && again == va ? " (the same address)" : !r2 ? " (another address)" : "");
			if (!r2 && again != va)
				cuIpcCloseMemHandle(again);
		} else if (!strcmp(m.what, "close")) {
			r = cuIpcCloseMemHandle(va);
			if (!r && again == va)
				r = cuIpcCloseMemHandle(va);
			snprintf(out.text, sizeof(out.text), "%s", r ? err_name(r) : "ok");
		} else if (!strcmp(m.what, "event")) {
			CUipcEventHandle h;
			memcpy(&h, m.data, sizeof(h));
			r = cuIpcOpenEventHandle(&ev, h);
			snprintf(out.text, sizeof(out.text), "%s", r ? err_name(r) : "ok");
		} else if (!strcmp(m.what, "wait")) {
			/* The parent recorded ev after its work: wait for it on a
			 * stream, then on the host, and ask it. */
			r = cuStreamWaitEvent(s, ev, 0);
			CUresult r2 = r ? r : cuStreamSynchronize(s);
			CUresult r3 = r2 ? r2 : cuEventSynchronize(ev);
			CUresult r4 = r3 ? r3 : cuEventQuery(ev);
			snprintf(out.text, sizeof(out.text), "%s", err_name(r4));
		} else {
			break;
		}
		if (say(sock, &out))
			return 1;
	}
	return 0;
}

/* A process cannot lock itself: the cycles run in a helper forked before
 * anything touched CUDA, which reads a pid from its pipe and answers the
 * cycle's result. */
static int cyc_in = -1, cyc_out = -1;

static void cycler(int in, int out)
{
	pid_t pid;
	char b[96];
	cuInit(0);
	while (read(in, &pid, sizeof(pid)) == (ssize_t)sizeof(pid)) {
		const char *e = cycle(pid, b, sizeof(b));
		char rep[96] = "";
		snprintf(rep, sizeof(rep), "%s", e ? e : "");
		if (write(out, rep, sizeof(rep)) != (ssize_t)sizeof(rep))
			break;
	}
	_exit(0);
}

static const char *cycle_by_helper(pid_t pid, char *buf, size_t n)
{
	char rep[96];
	if (write(cyc_in, &pid, sizeof(pid)) != (ssize_t)sizeof(pid) || read(cyc_out, rep, sizeof(rep)) != (ssize_t)sizeof(rep))
		return "the helper did not answer";
	snprintf(buf, n, "%s", rep);
	return rep[0] ? buf : NULL;
}

/* The lines of /proc/PID/maps and the targets of /proc/PID/fd/ that
 * name a device file, one per line, into buf. */
static void device_view(pid_t pid, char *buf, size_t n)
{
	char path[64], line[512];
	size_t at = 0;
	buf[0] = 0;
	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	FILE *f = fopen(path, "r");
	while (f && fgets(line, sizeof(line), f))
		if (strstr(line, "/dev/") && at + strlen(line) < n)
			at += (size_t)snprintf(buf + at, n - at, "map %s", strchr(line, '/'));
	if (f)
		fclose(f);
	for (int fd = 0; fd < 1024; fd++) {
		char l[64], t[128];
		snprintf(l, sizeof(l), "/proc/%d/fd/%d", (int)pid, fd);
		ssize_t k = readlink(l, t, sizeof(t) - 1);
		if (k > 0 && (t[k] = 0, !strncmp(t, "/dev/", 5)) && at + (size_t)k + 8 < n)
			at += (size_t)snprintf(buf + at, n - at, "fd %s\n", t);
	}
}

/* Says which lines of after (device_view) are not in before. */
static void diag_new(const char *what, const char *before, const char *after)
{
	int news = 0;
	for (const char *l = after; *l;) {
		const char *e = strchr(l, '\n');
		size_t len = e ? (size_t)(e - l) : strlen(l);
		char one[256];
		snprintf(one, sizeof(one), "%.*s", (int)(len < 255 ? len : 255), l);
		if (!strstr(before, one)) {
			diag("%s: new in the importer: %s", what, one);
			news++;
		}
		l += len + (e != NULL);
	}
	if (!news)
		diag("%s: nothing new in the importer's maps and fds", what);
}

static msg ask(int sock, const char *what, uint32_t v, const void *data, size_t len)
{
	msg m = { .v = v }, r = { .text = "no answer" };
	snprintf(m.what, sizeof(m.what), "%s", what);
	if (data)
		memcpy(m.data, data, len);
	if (say(sock, &m) || hear(sock, &r))
		snprintf(r.text, sizeof(r.text), "no answer");
	return r;
}

int main(int argc, char **argv)
{
	/* A driver call that never returns must not hang the suite. */
	alarm(120);
	if (argc == 2 && !strcmp(argv[1], "--child"))
		return child(3);
	/* Forked before the parent touches CUDA; the cycle of the parent
	 * runs in a helper forked the same way (before cuInit) below. */
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
	int to[2], from[2];
	if (pipe(to) || pipe(from))
		return 1;
	if (fork() == 0) {
		close(sv[0]);
		cycler(to[0], from[1]);
	}
	cyc_in = to[1];
	cyc_out = from[0];
	plan(6);
	CUdevice d;
	CUcontext c;
	CUdeviceptr vmm, mem, hole;
	CUmemGenericAllocationHandle h;
	CUevent ev;
	CUstream s;
	CUmemAllocationProp p = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
				  .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
				  .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 } };
	CUmemAccessDesc a = { .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 }, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	if (cuInit(0) || cuDeviceGet(&d, 0) || cuDevicePrimaryCtxRetain(&c, d) || cuCtxSetCurrent(c) ||
	    cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) || cuMemCreate(&h, BYTES, &p, 0) ||
	    cuMemAddressReserve(&vmm, BYTES, 0, 0, 0) || cuMemMap(vmm, BYTES, 0, h, 0) ||
	    cuMemSetAccess(vmm, BYTES, &a, 1) || cuMemAlloc(&mem, BYTES) || stamp(mem, 1000) ||
	    cuEventCreate(&ev, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING) ||
	    cuMemAddressReserve(&hole, BYTES, 0, 0, 0))
		bail("the parent's CUDA set-up failed");

	CUipcMemHandle mh;
	CUresult r = cuIpcGetMemHandle(&mh, vmm);
	ok(r != CUDA_SUCCESS, "VMM memory has no legacy IPC handle (%s)", err_name(r));

	static char before[1 << 16], after[1 << 16];
	device_view(pid, before, sizeof(before));
	r = cuIpcGetMemHandle(&mh, mem);
	msg rep = r ? (msg){ .text = "no handle" } : ask(sv[0], "open", 1000, &mh, sizeof(mh));
	device_view(pid, after, sizeof(after));
	diag_new("cuIpcOpenMemHandle", before, after);
	ok(!r && !strncmp(rep.text, "ok", 2), "the child opens cuMemAlloc memory and reads its pattern (%s)", rep.text);
	CUdeviceptr self = 0;
	CUresult rs = cuIpcOpenMemHandle(&self, mh, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
	diag("the exporter opens its own handle: %s", err_name(rs));
	if (!rs)
		cuIpcCloseMemHandle(self);

	CUipcEventHandle eh;
	r = cuIpcGetEventHandle(&eh, ev);
	rep = r ? (msg){ .text = "no handle" } : ask(sv[0], "event", 0, &eh, sizeof(eh));
	CUresult rec = cuMemsetD32Async(mem, 7, BYTES / 4, s);
	if (!rec)
		rec = cuEventRecord(ev, s);
	msg w = ask(sv[0], "wait", 0, NULL, 0);
	ok(!r && !strcmp(rep.text, "ok") && !rec && !strcmp(w.text, "CUDA_SUCCESS"),
	   "an interprocess event opens in the child and orders its work after the parent's (%s, %s)", rep.text,
	   w.text);

	char why[128], why2[128];
	rep = ask(sv[0], "close", 0, NULL, 0);
	const char *ec = cycle_by_helper(pid, why, sizeof(why));
	const char *ep = cycle_by_helper(getpid(), why2, sizeof(why2));
	ok(!strcmp(rep.text, "ok") && !ec && !ep,
	   "once the child closed it, the driver cycles the child (which holds the event) and the parent (%s; %s; %s)",
	   rep.text, ec ? ec : "ok", ep ? ep : "ok");
	rec = cuMemsetD32Async(mem, 8, BYTES / 4, s);
	if (!rec)
		rec = cuEventRecord(ev, s);
	w = ask(sv[0], "wait", 0, NULL, 0);
	ok(!rec && !strcmp(w.text, "CUDA_SUCCESS"), "after the cycles the event still orders the child's work (%s: %s)",
	   err_name(rec), w.text);

	/* What a VMM import looks like from outside: the fd sent is closed
	 * once imported. */
	int xfd = -1;
	device_view(pid, before, sizeof(before));
	msg im = { .what = "import" };
	if (cuMemExportToShareableHandle(&xfd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) == CUDA_SUCCESS &&
	    say_fd(sv[0], &im, xfd) == 0 && hear(sv[0], &im) == 0) {
		device_view(pid, after, sizeof(after));
		diag("the child imports VMM memory from an fd: %s", im.text);
		diag_new("cuMemImportFromShareableHandle", before, after);
	}
	/* Last: a cycle that fails may leave the child unusable. */
	rep = ask(sv[0], "open", 8, &mh, sizeof(mh));
	ep = cycle_by_helper(getpid(), why2, sizeof(why2));
	ec = cycle_by_helper(pid, why, sizeof(why));
	diag("while the child maps legacy IPC memory (%s): the parent's cycle %s; the child's %s", rep.text,
	     ep ? ep : "works", ec ? ec : "works");

	CUdeviceptr dp = 0, base = 0;
	size_t size = 0;
	CUresult pa = cuPointerGetAttribute(&dp, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, hole);
	CUresult ar = cuMemGetAddressRange(&base, &size, hole);
	CUresult pv = cuPointerGetAttribute(&dp, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, vmm);
	diag("a reserved VA with nothing mapped: cuPointerGetAttribute %s, cuMemGetAddressRange %s; mapped VMM "
	     "memory: %s",
	     err_name(pa), err_name(ar), err_name(pv));
	ok(pa != CUDA_SUCCESS && pv == CUDA_SUCCESS,
	   "the driver answers a pointer query only where memory is mapped (%s where none is)", err_name(pa));
	kill(pid, SIGKILL);
	int st;
	waitpid(pid, &st, 0);
	return done();
}
