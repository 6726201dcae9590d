/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Legacy CUDA IPC between traced processes: cuIpcGetMemHandle,
 * cuIpcOpenMemHandle and cuIpcCloseMemHandle, as torch.multiprocessing,
 * inference servers and data pipelines share device memory.
 *
 * The driver gives legacy IPC handles for cuMemAlloc memory only, and
 * every allocation under the tracer is a VMM object (alloc.c): the driver
 * refuses it (CUDA_ERROR_INVALID_VALUE, measured on an H200). So the
 * tracer makes handles of its own. A handle names the exporting process
 * (its pid, its pid namespace, a secret of the process) and the object
 * (its VA and size) and where the allocation begins in it.
 *
 * The exporter serves its handles on an abstract unix socket,
 * "phos-ipc.<pid namespace>.<pid>", from a thread of its own: a request
 * that carries the secret gets the object's fd (SCM_RIGHTS), always the
 * same open file (alloc_share). The importer imports that fd and maps it
 * as the application's own imports are (vmm.c), so a park hands it over
 * as an import, phosfs finds its owner by the open file, and the image
 * records the share once. The importer reserves the VA, maps the whole
 * object, and returns where the allocation begins; a second open of the
 * same handle returns the same address, and the mapping goes with the
 * last close, as the driver does (measured).
 *
 * While its memory is parked, the exporter does not serve: the socket
 * closes before the memory is let go, and opens again at unpark (in a
 * restored tree, under the pid namespace it is restored into, where its
 * pid is the one its handles carry). An importer retries for a while.
 *
 * A handle that is not the tracer's (its exporter is not traced) goes to
 * the driver as it is; if it opens, the process maps memory the driver's
 * checkpoint cannot restore, which vmm.c notes, so that a checkpoint says
 * so. The tracer's handles mean nothing to the driver: an importer that
 * is not traced cannot open them.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "tracer.h"

#define IPC_MAGIC "phos-ipc"
/* How long an open waits for its exporter to serve (it may be parked). */
#define IPC_OPEN_MS 10000

/* The handle, as it lies in CUipcMemHandle's 64 bytes. */
typedef struct ipc_handle {
	char magic[8];
	uint64_t secret;
	int32_t pid;     /* the exporter, as it sees itself */
	uint32_t device; /* the object's */
	uint64_t key;    /* the object's VA in the exporter */
	uint64_t size;   /* the object's size */
	uint64_t offset; /* where the allocation begins in it */
	uint64_t pidns;  /* the exporter's pid namespace (its inode) */
} ipc_handle;
_Static_assert(sizeof(ipc_handle) <= sizeof(CUipcMemHandle), "a handle fits CUipcMemHandle");

typedef struct ipc_request {
	uint64_t secret, key, size;
} ipc_request;

typedef struct ipc_reply {
	int32_t result; /* 0, or a negative errno */
	uint32_t device;
} ipc_reply;

/* The exporter's side. Guarded by lock: secret, serving, listener, wake,
 * server. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t secret;
static bool serving; /* handles were given: serve them while running */
static int listener = -1, wake[2] = { -1, -1 };
static pthread_t server;
static bool server_up;

/* An open handle in the importer. Guarded by lock. */
typedef struct opened {
	uint64_t secret, key, size;
	CUdeviceptr va; /* where the object is mapped */
	CUmemGenericAllocationHandle h;
	int refs;
} opened;
static opened *opens;
static uint32_t nopens, opencap;

static uint64_t pidns_ino(void)
{
	struct stat st;
	return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/* The socket address of pid's server in pid namespace ns. */
static socklen_t address(struct sockaddr_un *a, uint64_t ns, pid_t pid)
{
	memset(a, 0, sizeof(*a));
	a->sun_family = AF_UNIX;
	int n = snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1, "phos-ipc.%llu.%d", (unsigned long long)ns,
			 (int)pid);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* Closes the n fds of fds. */
static void close_all(const int *fds, int n)
{
	for (int i = 0; i < n; i++)
		close(fds[i]);
}

/* Answers one request (IPC_ASK) on connection c with IPC_FD. */
static void answer(int c)
{
	ipc_request q;
	ipc_reply r = { -EPROTO, 0 };
	int fd = -1, got[WIRE_MAX_FDS], ngot = 0;
	struct ucred cred;
	socklen_t cl = sizeof(cred);
	wire_header h;
	if (wire_recv(c, &h, &q, sizeof(q), got, &ngot))
		return;
	close_all(got, ngot);
	if (h.type != WIRE_IPC_ASK || h.length != sizeof(q))
		r.result = -EPROTO;
	else if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &cl) || (cred.uid != getuid() && cred.uid != 0))
		r.result = -EPERM;
	else if (q.secret != secret)
		r.result = -EACCES;
	else {
		/* A lazy restore may not have brought it back yet. */
		lazy_need(q.key, q.size);
		r.result = alloc_share(q.key, q.size, &fd);
	}
	int e = wire_send(c, WIRE_IPC_FD, &r, sizeof(r), 1, fd >= 0 ? &fd : NULL, fd >= 0);
	if (e)
		tr_debug("ipc: an answer was not sent: %s", strerror(-e));
	if (fd >= 0)
		close(fd);
}

static void *serve(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "phos-ipc"); /* by itself: see control_main */
	struct pollfd p[2] = { { listener, POLLIN, 0 }, { wake[0], POLLIN, 0 } };
	for (;;) {
		if (poll(p, 2, -1) < 0 && errno != EINTR)
			break;
		if (p[1].revents)
			break;
		if (p[0].revents & POLLIN) {
			int c = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
			if (c >= 0) {
				/* A peer that sends nothing does not hold the server. */
				struct timeval tv = { 2, 0 };
				setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
				answer(c);
				close(c);
			}
		}
	}
	return NULL;
}

/* Starts serving; lock held. Errors: socket's, bind's (-EADDRINUSE: a
 * process of this pid and pid namespace serves already), pthread's. */
static int start_locked(void)
{
	if (server_up)
		return 0;
	struct sockaddr_un a;
	socklen_t len = address(&a, pidns_ino(), getpid());
	int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -errno;
	if (bind(s, (struct sockaddr *)&a, len) || listen(s, 64) || pipe2(wake, O_CLOEXEC)) {
		int e = -errno;
		close(s);
		return e;
	}
	listener = s;
	int e = pthread_create(&server, NULL, serve, NULL);
	if (e) {
		close(listener);
		close(wake[0]);
		close(wake[1]);
		listener = wake[0] = wake[1] = -1;
		return -e;
	}
	server_up = true;
	return 0;
}

/* Stops serving, and waits for the server; lock held. */
static void stop_locked(void)
{
	if (!server_up)
		return;
	if (write(wake[1], "x", 1) != 1)
		tr_log("ipc: cannot stop the server: %s", strerror(errno));
	pthread_join(server, NULL);
	close(listener);
	close(wake[0]);
	close(wake[1]);
	listener = wake[0] = wake[1] = -1;
	server_up = false;
}

CUresult ipc_get(CUipcMemHandle *out, CUdeviceptr dptr)
{
	ipc_handle h = { .magic = IPC_MAGIC };
	CUdevice dev;
	if (alloc_ipc_of(dptr, &h.key, &h.size, &h.offset, &dev))
		return CUDA_ERROR_NOT_FOUND;
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&lock);
	while (!secret) {
		if (getentropy(&secret, sizeof(secret)))
			secret = (uint64_t)time(NULL) * 2654435761u ^ (uint64_t)getpid() << 32 ^ (uint64_t)(uintptr_t)&h;
	}
	int e = start_locked();
	if (!e)
		serving = true;
	h.secret = secret;
	pthread_mutex_unlock(&lock);
	if (e) {
		tr_log("cannot serve CUDA IPC handles: %s", strerror(-e));
		return CUDA_ERROR_OPERATING_SYSTEM;
	}
	h.pid = getpid();
	h.device = (uint32_t)dev;
	h.pidns = pidns_ino();
	memset(out, 0, sizeof(*out));
	memcpy(out, &h, sizeof(h));
	return CUDA_SUCCESS;
}

void ipc_park(void)
{
	pthread_mutex_lock(&lock);
	stop_locked();
	pthread_mutex_unlock(&lock);
}

void ipc_unpark(void)
{
	pthread_mutex_lock(&lock);
	int e = serving ? start_locked() : 0;
	pthread_mutex_unlock(&lock);
	if (e)
		tr_log("cannot serve CUDA IPC handles again (%s): other processes cannot open this one's handles",
		       strerror(-e));
}

void ipc_forget(void)
{
	/* A forked child: the parent's server is not its own, and no thread
	 * of the parent's runs here. */
	if (listener >= 0)
		close(listener);
	for (int i = 0; i < 2; i++)
		if (wake[i] >= 0)
			close(wake[i]);
	listener = wake[0] = wake[1] = -1;
	server_up = serving = false;
	secret = 0;
	pthread_mutex_init(&lock, NULL);
}

bool ipc_is_ours(const CUipcMemHandle *h)
{
	return !memcmp(h->reserved, IPC_MAGIC, 8);
}

/* Asks the exporter of h at address a for its object's fd: 0 with *fd,
 * or a negative errno (-ECONNREFUSED, -ENOENT: nobody serves there; the
 * exporter's answer, such as -EAGAIN: its memory is away). */
static int ask(const ipc_handle *h, const struct sockaddr_un *a, socklen_t len, int *fd)
{
	int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -errno;
	struct timeval tv = { 5, 0 };
	setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	ipc_request q = { h->secret, h->key, h->size };
	ipc_reply r = { -EPROTO, 0 };
	wire_header rh;
	int got[WIRE_MAX_FDS], ngot = 0;
	int e = connect(s, (const struct sockaddr *)a, len) ? -errno : 0;
	if (!e)
		e = wire_send(s, WIRE_IPC_ASK, &q, sizeof(q), 1, NULL, 0);
	if (!e && (wire_recv(s, &rh, &r, sizeof(r), got, &ngot) || rh.type != WIRE_IPC_FD ||
		   rh.length != sizeof(r)))
		e = -EPROTO;
	if (!e)
		e = r.result ? r.result : ngot == 1 ? 0 : -EPROTO;
	*fd = e ? -1 : got[0];
	close_all(got + !e, ngot - !e);
	close(s);
	return e;
}

/* The object's fd from h's exporter, which is found under this process's
 * pid namespace, else the one it was in when it gave the handle; within
 * IPC_OPEN_MS while nobody serves (it may be parked). */
static int fetch(const ipc_handle *h, int *fd)
{
	struct sockaddr_un mine, theirs;
	socklen_t l1 = address(&mine, pidns_ino(), h->pid), l2 = address(&theirs, h->pidns, h->pid);
	int e = 0;
	for (int waited = 0; waited <= IPC_OPEN_MS; waited += 50) {
		e = ask(h, &mine, l1, fd);
		if ((e == -ECONNREFUSED || e == -ENOENT) && h->pidns != pidns_ino())
			e = ask(h, &theirs, l2, fd);
		if (e != -ECONNREFUSED && e != -ENOENT && e != -EAGAIN)
			break;
		usleep(50000);
	}
	return e;
}

static void ipc_close_mapping(CUdeviceptr va, uint64_t size, CUmemGenericAllocationHandle h);

/* Maps the object of h (from fd) on this process's current device: as
 * the application's own import (vmm.c). lock not held. */
static CUresult map_import(const ipc_handle *h, int fd, CUdeviceptr *va, CUmemGenericAllocationHandle *mh)
{
	REAL(CUresult, cuMemImportFromShareableHandle, (CUmemGenericAllocationHandle *, void *, CUmemAllocationHandleType));
	REAL(CUresult, cuMemAddressReserve, (CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long));
	REAL(CUresult, cuMemAddressFree, (CUdeviceptr, size_t));
	REAL(CUresult, cuMemSetAccess, (CUdeviceptr, size_t, const CUmemAccessDesc *, size_t));
	REAL(CUresult, cuCtxGetDevice, (CUdevice *));
	CUdevice cur;
	CUresult r = real_cuCtxGetDevice(&cur);
	if (!r)
		r = real_cuMemImportFromShareableHandle(mh, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	if (r)
		return r;
	vmm_imported(*mh, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, (void *)(intptr_t)fd);
	r = real_cuMemAddressReserve(va, h->size, 0, 0, 0);
	if (!r) {
		r = vmm_map(*va, h->size, 0, *mh, 0);
		if (r)
			real_cuMemAddressFree(*va, h->size);
	}
	CUmemAccessDesc acc = { .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = cur },
				.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	if (!r) {
		r = real_cuMemSetAccess(*va, h->size, &acc, 1);
		if (r) {
			vmm_unmap(*va, h->size);
			real_cuMemAddressFree(*va, h->size);
		} else {
			vmm_set_access(*va, h->size, &acc, 1);
		}
	}
	if (r)
		vmm_release(*mh);
	return r;
}

CUresult ipc_open(CUdeviceptr *dptr, const CUipcMemHandle *handle)
{
	ipc_handle h;
	memcpy(&h, handle, sizeof(h));
	if (!dptr || !h.size || h.offset >= h.size)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&lock);
	/* The driver refuses a process its own handle. */
	bool own = secret && h.secret == secret && h.pid == getpid();
	uint32_t i = 0;
	while (i < nopens && !(opens[i].secret == h.secret && opens[i].key == h.key && opens[i].size == h.size))
		i++;
	if (!own && i < nopens) {
		opens[i].refs++;
		*dptr = opens[i].va + h.offset;
	}
	pthread_mutex_unlock(&lock);
	if (own)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (i < nopens)
		return CUDA_SUCCESS;

	int fd = -1, e = fetch(&h, &fd);
	if (e) {
		tr_log("cannot open a CUDA IPC handle of process %d (object at 0x%llx): %s%s", (int)h.pid,
		       (unsigned long long)h.key, strerror(-e),
		       e == -ECONNREFUSED || e == -ENOENT ? " (it is gone, or in another network namespace)" : "");
		return e == -ENOENT && h.pid ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_HANDLE;
	}
	opened o = { .secret = h.secret, .key = h.key, .size = h.size, .refs = 1 };
	CUresult r = map_import(&h, fd, &o.va, &o.h);
	close(fd); /* vmm.c keeps its own */
	if (r)
		return r;
	pthread_mutex_lock(&lock);
	bool kept = tr_push(&opens, &nopens, &opencap, &o, sizeof(o));
	pthread_mutex_unlock(&lock);
	if (!kept) {
		ipc_close_mapping(o.va, o.size, o.h);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*dptr = o.va + h.offset;
	return CUDA_SUCCESS;
}

/* Unmaps an opened object, frees its VA and releases its import. */
static void ipc_close_mapping(CUdeviceptr va, uint64_t size, CUmemGenericAllocationHandle h)
{
	REAL(CUresult, cuMemAddressFree, (CUdeviceptr, size_t));
	vmm_unmap(va, size);
	real_cuMemAddressFree(va, size);
	vmm_release(h);
}

CUresult ipc_close(CUdeviceptr dptr, bool *mine)
{
	pthread_mutex_lock(&lock);
	uint32_t i = 0;
	while (i < nopens && !(dptr >= opens[i].va && dptr < opens[i].va + opens[i].size))
		i++;
	*mine = i < nopens;
	opened o = { 0 };
	bool last = *mine && --opens[i].refs == 0;
	if (last) {
		o = opens[i];
		opens[i] = opens[--nopens];
	}
	pthread_mutex_unlock(&lock);
	if (last)
		ipc_close_mapping(o.va, o.size, o.h);
	return CUDA_SUCCESS;
}
