/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Legacy CUDA IPC: cuIpcGetMemHandle and cuIpcOpenMemHandle for cuMemAlloc
 * memory, and cuIpcGetEventHandle and cuIpcOpenEventHandle for events made
 * with CU_EVENT_INTERPROCESS, as the driver has them (facts measured on an
 * H200 with driver 580, tests/gpu/driver_shares_legacy_ipc_memory_and_events):
 *  - VMM memory (cuMemCreate) has no handle: CUDA_ERROR_INVALID_VALUE;
 *  - the exporting process cannot open its own handle:
 *    CUDA_ERROR_INVALID_CONTEXT;
 *  - a second open of a handle gives the same address, and the memory
 *    stays mapped until the last close;
 *  - the checkpoint API locks and checkpoints a process that maps another
 *    process's memory so, but its restore fails (CUDA_ERROR_INVALID_VALUE)
 *    and leaves the process locked (checkpoint.c).
 * Here a handle names the exporter's pid and the memfd that holds the
 * memory (or the event's counts): the importer opens that fd through
 * /proc, which needs the two processes in one pid namespace.
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

#define MEM_MAGIC "simcIPCm"
#define EVENT_MAGIC "simcIPCe"

typedef struct sc_handle {
	char magic[8];
	int32_t pid, fd;
	uint64_t size;
} sc_handle;
_Static_assert(sizeof(sc_handle) <= sizeof(CUipcMemHandle) && sizeof(sc_handle) <= sizeof(CUipcEventHandle),
	       "a handle fits");

static void make(void *out, size_t cap, const char *magic, int fd, uint64_t size)
{
	sc_handle h = { .pid = getpid(), .fd = fd, .size = size };
	memcpy(h.magic, magic, 8);
	memset(out, 0, cap);
	memcpy(out, &h, sizeof(h));
}

/* Opens the file a handle names: CUDA_ERROR_INVALID_CONTEXT for this
 * process's own, CUDA_ERROR_INVALID_VALUE for a malformed one or a process
 * that is gone. */
static CUresult open_handle(const void *in, const char *magic, int *fd, uint64_t *size)
{
	sc_handle h;
	memcpy(&h, in, sizeof(h));
	if (memcmp(h.magic, magic, 8) || h.pid <= 0 || h.fd < 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (h.pid == getpid())
		return CUDA_ERROR_INVALID_CONTEXT;
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)h.pid, (int)h.fd);
	*fd = open(path, O_RDWR | O_CLOEXEC);
	*size = h.size;
	return *fd < 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

SC_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *handle, CUdeviceptr dptr)
{
	SC_API();
	if (!handle)
		return CUDA_ERROR_INVALID_VALUE;
	int fd;
	size_t size;
	CUdevice dev;
	CUresult r = sc_mem_ipc_export(dptr, &fd, &size, &dev);
	if (!r)
		make(handle, sizeof(*handle), MEM_MAGIC, fd, size);
	return r;
}

static CUresult open_mem(CUdeviceptr *dptr, CUipcMemHandle handle, unsigned int flags)
{
	if (!dptr || (flags & ~CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
		return CUDA_ERROR_INVALID_VALUE;
	int fd;
	uint64_t size;
	CUresult r = open_handle(&handle, MEM_MAGIC, &fd, &size);
	if (r)
		return r;
	uintptr_t va;
	r = sc_mem_ipc_import(fd, size, &va);
	close(fd);
	if (!r)
		*dptr = va;
	return r;
}

SC_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *dptr, CUipcMemHandle handle, unsigned int flags)
{
	SC_API();
	return open_mem(dptr, handle, flags);
}

SC_LEGACY(sc_cuIpcOpenMemHandle_v1, "cuIpcOpenMemHandle", (CUdeviceptr *dptr, CUipcMemHandle handle, unsigned flags))
{
	SC_API();
	return open_mem(dptr, handle, flags);
}

SC_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
	SC_API();
	sc_streams_drain(); /* work in flight may still use it */
	return sc_mem_ipc_close(dptr);
}

SC_EXPORT CUresult cuIpcGetEventHandle(CUipcEventHandle *handle, CUevent event)
{
	SC_API();
	if (!handle)
		return CUDA_ERROR_INVALID_VALUE;
	int fd;
	CUresult r = sc_event_ipc_fd(event, &fd);
	if (!r)
		make(handle, sizeof(*handle), EVENT_MAGIC, fd, 0);
	return r;
}

SC_EXPORT CUresult cuIpcOpenEventHandle(CUevent *event, CUipcEventHandle handle)
{
	SC_API();
	if (!event)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = sc_ctx_require();
	int fd = -1;
	uint64_t size;
	if (!r)
		r = open_handle(&handle, EVENT_MAGIC, &fd, &size);
	if (!r) {
		r = sc_event_ipc_open(fd, event);
		if (r)
			close(fd);
	}
	return r;
}
