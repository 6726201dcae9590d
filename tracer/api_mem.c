/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Wrappers of the driver's memory calls: allocations become parkable
 * (alloc.c), and copies and sets pass the gate and are counted as reads
 * and writes of the buffers they touch.
 */
#include "tracer.h"

/* alloc_device, tried again while a CoW shadow pool holds the memory it
 * lacks (cow_oom_wait): the pool must never make an allocation fail. */
static CUresult alloc_or_wait(CUdeviceptr *dptr, size_t bytes)
{
	uint64_t until = 0;
	CUresult r;
	while ((r = alloc_device(dptr, bytes)) == CUDA_ERROR_OUT_OF_MEMORY && cow_oom_wait(&until))
		;
	return r;
}

TR_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes)
{
	REAL(CUresult, cuMemAlloc_v2, (CUdeviceptr *, size_t));
	if (!tr_enabled())
		return real_cuMemAlloc_v2(dptr, bytes);
	GATE();
	return alloc_or_wait(dptr, bytes);
}

TR_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
				      unsigned int elem)
{
	REAL(CUresult, cuMemAllocPitch_v2, (CUdeviceptr *, size_t *, size_t, size_t, unsigned int));
	if (!tr_enabled())
		return real_cuMemAllocPitch_v2(dptr, pitch, width, height, elem);
	if (!pitch || !width || !height || (elem != 4 && elem != 8 && elem != 16))
		return CUDA_ERROR_INVALID_VALUE;
	GATE();
	size_t p = (width + 511) / 512 * 512;
	CUresult r = alloc_or_wait(dptr, p * height);
	if (r == CUDA_SUCCESS)
		*pitch = p;
	return r;
}

TR_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	REAL(CUresult, cuMemFree_v2, (CUdeviceptr));
	if (!tr_enabled())
		return real_cuMemFree_v2(dptr);
	if (!dptr)
		return CUDA_SUCCESS;
	GATE();
	CUresult r = alloc_free(dptr);
	/* Not the tracer's (managed memory): the driver's, as untraced. */
	return r == CUDA_ERROR_NOT_FOUND ? real_cuMemFree_v2(dptr) : r;
}

/* Stream-ordered allocation: the memory exists at once, which is within
 * stream order; a free waits for its stream. */
static CUresult alloc_async(CUdeviceptr *dptr, size_t bytes)
{
	GATE();
	return alloc_or_wait(dptr, bytes);
}

static CUresult free_async(CUdeviceptr dptr, CUstream s, CUresult (*sync)(CUstream),
			   CUresult (*real)(CUdeviceptr, CUstream))
{
	GATE();
	CUresult r = sync(s);
	r = r ? r : alloc_free(dptr);
	return r == CUDA_ERROR_NOT_FOUND ? real(dptr, s) : r;
}

TR_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytes, CUstream s)
{
	REAL(CUresult, cuMemAllocAsync, (CUdeviceptr *, size_t, CUstream));
	return tr_enabled() ? alloc_async(dptr, bytes) : real_cuMemAllocAsync(dptr, bytes, s);
}

TR_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytes, CUstream s)
{
	REAL(CUresult, cuMemAllocAsync_ptsz, (CUdeviceptr *, size_t, CUstream));
	return tr_enabled() ? alloc_async(dptr, bytes) : real_cuMemAllocAsync_ptsz(dptr, bytes, s);
}

TR_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool, CUstream s)
{
	REAL(CUresult, cuMemAllocFromPoolAsync, (CUdeviceptr *, size_t, CUmemoryPool, CUstream));
	return tr_enabled() ? alloc_async(dptr, bytes) : real_cuMemAllocFromPoolAsync(dptr, bytes, pool, s);
}

TR_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool, CUstream s)
{
	REAL(CUresult, cuMemAllocFromPoolAsync_ptsz, (CUdeviceptr *, size_t, CUmemoryPool, CUstream));
	return tr_enabled() ? alloc_async(dptr, bytes) : real_cuMemAllocFromPoolAsync_ptsz(dptr, bytes, pool, s);
}

TR_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s)
{
	REAL(CUresult, cuMemFreeAsync, (CUdeviceptr, CUstream));
	REAL(CUresult, cuStreamSynchronize, (CUstream));
	return tr_enabled() ? free_async(dptr, s, real_cuStreamSynchronize, real_cuMemFreeAsync)
			    : real_cuMemFreeAsync(dptr, s);
}

TR_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s)
{
	REAL(CUresult, cuMemFreeAsync_ptsz, (CUdeviceptr, CUstream));
	REAL(CUresult, cuStreamSynchronize_ptsz, (CUstream));
	return tr_enabled() ? free_async(dptr, s, real_cuStreamSynchronize_ptsz, real_cuMemFreeAsync_ptsz)
			    : real_cuMemFreeAsync_ptsz(dptr, s);
}

TR_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytes, unsigned int flags)
{
	REAL(CUresult, cuMemAllocManaged, (CUdeviceptr *, size_t, unsigned int));
	CUresult r = real_cuMemAllocManaged(dptr, bytes, flags);
	if (r == CUDA_SUCCESS && tr_enabled())
		alloc_mark_stop_only("managed memory", "it uses managed memory (cuMemAllocManaged), which cannot be parked");
	return r;
}

/* The application's own VMM allocations get the POSIX fd handle type too,
 * so that they can be exported when parked (vmm.c). */
TR_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
			       unsigned long long flags)
{
	REAL(CUresult, cuMemCreate,
	     (CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long));
	if (!tr_enabled() || !prop || !h)
		return real_cuMemCreate(h, size, prop, flags);
	CUmemAllocationProp p = *prop;
	p.requestedHandleTypes = (CUmemAllocationHandleType)(p.requestedHandleTypes |
							     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	GATE();
	uint64_t until = 0;
	CUresult r;
	while ((r = real_cuMemCreate(h, size, &p, flags)) == CUDA_ERROR_OUT_OF_MEMORY && cow_oom_wait(&until))
		;
	if (r == CUDA_SUCCESS) {
		vmm_created(*h, size, prop->location);
	} else if (r == CUDA_ERROR_NOT_SUPPORTED || r == CUDA_ERROR_INVALID_VALUE) {
		r = real_cuMemCreate(h, size, prop, flags); /* that type is refused here */
		if (r == CUDA_SUCCESS)
			alloc_mark_stop_only("VMM memory without fds", "its VMM allocations cannot be exported as fds");
	}
	return r;
}

TR_EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os,
						 CUmemAllocationHandleType type)
{
	REAL(CUresult, cuMemImportFromShareableHandle, (CUmemGenericAllocationHandle *, void *, CUmemAllocationHandleType));
	if (!tr_enabled())
		return real_cuMemImportFromShareableHandle(h, os, type);
	GATE();
	CUresult r = real_cuMemImportFromShareableHandle(h, os, type);
	if (r == CUDA_SUCCESS && h)
		vmm_imported(*h, type, os);
	return r;
}

/* Legacy IPC (ipc.c): the tracer's memory gets handles of the tracer's;
 * a handle that is not one goes to the driver, and memory opened so is
 * noted (the driver cannot restore a process that maps it). */
TR_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr dptr)
{
	REAL(CUresult, cuIpcGetMemHandle, (CUipcMemHandle *, CUdeviceptr));
	if (!tr_enabled())
		return real_cuIpcGetMemHandle(h, dptr);
	GATE();
	lazy_need(dptr, 1); /* the object must be back to be handed out */
	CUresult r = ipc_get(h, dptr);
	return r == CUDA_ERROR_NOT_FOUND ? real_cuIpcGetMemHandle(h, dptr) : r;
}

static CUresult ipc_open_with(CUresult (*real)(CUdeviceptr *, CUipcMemHandle, unsigned int), CUdeviceptr *dptr,
			      CUipcMemHandle handle, unsigned int flags)
{
	GATE();
	if (ipc_is_ours(&handle))
		return ipc_open(dptr, &handle);
	CUresult r = real(dptr, handle, flags);
	if (r == CUDA_SUCCESS && dptr) {
		static atomic_bool said;
		if (!atomic_exchange(&said, true))
			tr_log("opened a CUDA IPC handle of a process that is not traced: while this process maps its "
			       "memory it cannot be checkpointed (the driver's checkpoint cannot restore such a "
			       "mapping)");
		vmm_ipc_opened(*dptr, true);
	}
	return r;
}

TR_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *dptr, CUipcMemHandle handle, unsigned int flags)
{
	REAL(CUresult, cuIpcOpenMemHandle_v2, (CUdeviceptr *, CUipcMemHandle, unsigned int));
	if (!tr_enabled())
		return real_cuIpcOpenMemHandle_v2(dptr, handle, flags);
	return ipc_open_with(real_cuIpcOpenMemHandle_v2, dptr, handle, flags);
}

/* The first version (cuda.h names it the _v2 one): its arguments are
 * the same. */
TR_EXPORT CUresult tr_cuIpcOpenMemHandle_v1(CUdeviceptr *dptr, CUipcMemHandle handle, unsigned int flags)
	__asm__("cuIpcOpenMemHandle");
CUresult tr_cuIpcOpenMemHandle_v1(CUdeviceptr *dptr, CUipcMemHandle handle, unsigned int flags)
{
	static CUresult (*real)(CUdeviceptr *, CUipcMemHandle, unsigned int);
	if (!real)
		*(void **)&real = tr_real("cuIpcOpenMemHandle");
	if (!real)
		return CUDA_ERROR_NOT_FOUND;
	if (!tr_enabled())
		return real(dptr, handle, flags);
	return ipc_open_with(real, dptr, handle, flags);
}

TR_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
	REAL(CUresult, cuIpcCloseMemHandle, (CUdeviceptr));
	if (!tr_enabled())
		return real_cuIpcCloseMemHandle(dptr);
	GATE();
	bool mine = false;
	CUresult r = ipc_close(dptr, &mine);
	if (mine)
		return r;
	r = real_cuIpcCloseMemHandle(dptr);
	if (r == CUDA_SUCCESS)
		vmm_ipc_opened(dptr, false);
	return r;
}

TR_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h)
{
	REAL(CUresult, cuMemRelease, (CUmemGenericAllocationHandle));
	if (!tr_enabled())
		return real_cuMemRelease(h);
	GATE();
	return vmm_release(h);
}

TR_EXPORT CUresult cuMemMap(CUdeviceptr va, size_t size, size_t offset, CUmemGenericAllocationHandle h,
			    unsigned long long flags)
{
	REAL(CUresult, cuMemMap, (CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long));
	if (!tr_enabled())
		return real_cuMemMap(va, size, offset, h, flags);
	GATE();
	return vmm_map(va, size, offset, h, flags);
}

TR_EXPORT CUresult cuMemUnmap(CUdeviceptr va, size_t size)
{
	REAL(CUresult, cuMemUnmap, (CUdeviceptr, size_t));
	if (!tr_enabled())
		return real_cuMemUnmap(va, size);
	GATE();
	return vmm_unmap(va, size);
}

TR_EXPORT CUresult cuMemSetAccess(CUdeviceptr va, size_t size, const CUmemAccessDesc *desc, size_t count)
{
	REAL(CUresult, cuMemSetAccess, (CUdeviceptr, size_t, const CUmemAccessDesc *, size_t));
	if (!tr_enabled())
		return real_cuMemSetAccess(va, size, desc, count);
	GATE();
	CUresult r = real_cuMemSetAccess(va, size, desc, count);
	if (r == CUDA_SUCCESS && desc)
		vmm_set_access(va, size, desc, count);
	return r;
}

TR_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *addr)
{
	REAL(CUresult, cuMemRetainAllocationHandle, (CUmemGenericAllocationHandle *, void *));
	if (!tr_enabled() || !h)
		return real_cuMemRetainAllocationHandle(h, addr);
	GATE();
	return vmm_retain(h, addr);
}

TR_EXPORT CUresult cuMemExportToShareableHandle(void *out, CUmemGenericAllocationHandle h,
						CUmemAllocationHandleType type, unsigned long long flags)
{
	REAL(CUresult, cuMemExportToShareableHandle,
	     (void *, CUmemGenericAllocationHandle, CUmemAllocationHandleType, unsigned long long));
	if (!tr_enabled())
		return real_cuMemExportToShareableHandle(out, h, type, flags);
	CUresult r = real_cuMemExportToShareableHandle(out, vmm_current(h), type, flags);
	if (r == CUDA_SUCCESS && out && type == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		vmm_exported(h, *(int *)out);
	return r;
}

TR_EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop, CUmemGenericAllocationHandle h)
{
	REAL(CUresult, cuMemGetAllocationPropertiesFromHandle, (CUmemAllocationProp *, CUmemGenericAllocationHandle));
	return real_cuMemGetAllocationPropertiesFromHandle(prop, tr_enabled() ? vmm_current(h) : h);
}

/* ---- copies and sets ------------------------------------------------------ */

#define RD(a, n, st) spec_range((uint64_t)(a), (n), true, false, (st))
#define WR(a, n, st) spec_range((uint64_t)(a), (n), false, true, (st))

/* A copy between two devices' memory that the current device cannot reach
 * (alloc_cross), made the peer copy the driver would have made of
 * cuMemAlloc memory. kind: 0 cuMemcpyPeer, 1 cuMemcpyPeerAsync, 2 and 3
 * their per-thread-stream variants. */
static CUresult peer_copy(int kind, CUdeviceptr d, CUdevice dd, CUdeviceptr s, CUdevice sd, size_t n, CUstream st)
{
	REAL(CUresult, cuMemcpyPeer, (CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t));
	REAL(CUresult, cuMemcpyPeerAsync, (CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t, CUstream));
	REAL(CUresult, cuMemcpyPeer_ptds, (CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t));
	REAL(CUresult, cuMemcpyPeerAsync_ptsz, (CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t, CUstream));
	CUcontext dc = ctx_primary(dd), sc = ctx_primary(sd);
	if (!dc || !sc)
		return CUDA_ERROR_INVALID_CONTEXT;
	switch (kind) {
	case 0:
		return real_cuMemcpyPeer(d, dc, s, sc, n);
	case 1:
		return real_cuMemcpyPeerAsync(d, dc, s, sc, n, st);
	case 2:
		return real_cuMemcpyPeer_ptds ? real_cuMemcpyPeer_ptds(d, dc, s, sc, n) : real_cuMemcpyPeer(d, dc, s, sc, n);
	default:
		return real_cuMemcpyPeerAsync_ptsz ? real_cuMemcpyPeerAsync_ptsz(d, dc, s, sc, n, st)
						   : real_cuMemcpyPeerAsync(d, dc, s, sc, n, st);
	}
}

/* host: the copy crosses PCIe and runs before the call returns, so it
 * counts in the state table's pcie_pending while it runs. peer: for a copy
 * that may go between devices, the peer_copy kind that stands in for it
 * when the current device cannot reach both sides; -1 for the others. */
#define COPY_(name, params, args, dst, src, n, host, st, peer)                  \
	TR_EXPORT CUresult name params                                          \
	{                                                                       \
		REAL(CUresult, name, params);                                   \
		if (!tr_enabled())                                              \
			return real_##name args;                                \
		GATE();                                                         \
		CUstream s_ = tr_stream_of(#name, st);                          \
		RD(src, n, s_);                                                 \
		WR(dst, n, s_);                                                 \
		CUdevice dd_, sd_;                                              \
		if ((peer) >= 0 && alloc_cross((uint64_t)(dst), (uint64_t)(src), (n), &dd_, &sd_)) \
			return peer_copy((peer), (CUdeviceptr)(dst), dd_, (CUdeviceptr)(src), sd_, (n), (st)); \
		if (host)                                                       \
			state_transfer(1);                                      \
		CUresult r_ = real_##name args;                                 \
		if (host)                                                       \
			state_transfer(-1);                                     \
		return r_;                                                      \
	}
#define COPY(name, params, args, dst, src, n, peer) COPY_(name, params, args, dst, src, n, 0, NULL, peer)
#define COPY_ON(name, params, args, dst, src, n, peer) COPY_(name, params, args, dst, src, n, 0, st, peer)
#define HOST_COPY(name, params, args, dst, src, n, peer) COPY_(name, params, args, dst, src, n, 1, NULL, peer)

HOST_COPY(cuMemcpyHtoD_v2, (CUdeviceptr d, const void *h, size_t n), (d, h, n), d, 0, n, -1)
HOST_COPY(cuMemcpyDtoH_v2, (void *h, CUdeviceptr d, size_t n), (h, d, n), 0, d, n, -1)
COPY(cuMemcpyDtoD_v2, (CUdeviceptr d, CUdeviceptr s, size_t n), (d, s, n), d, s, n, 0)
HOST_COPY(cuMemcpy, (CUdeviceptr d, CUdeviceptr s, size_t n), (d, s, n), d, s, n, 0)
COPY_ON(cuMemcpyHtoDAsync_v2, (CUdeviceptr d, const void *h, size_t n, CUstream st), (d, h, n, st), d, 0, n, -1)
COPY_ON(cuMemcpyDtoHAsync_v2, (void *h, CUdeviceptr d, size_t n, CUstream st), (h, d, n, st), 0, d, n, -1)
COPY_ON(cuMemcpyDtoDAsync_v2, (CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st), (d, s, n, st), d, s, n, 1)
COPY_ON(cuMemcpyAsync, (CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st), (d, s, n, st), d, s, n, 1)
HOST_COPY(cuMemcpyHtoD_v2_ptds, (CUdeviceptr d, const void *h, size_t n), (d, h, n), d, 0, n, -1)
HOST_COPY(cuMemcpyDtoH_v2_ptds, (void *h, CUdeviceptr d, size_t n), (h, d, n), 0, d, n, -1)
COPY(cuMemcpyDtoD_v2_ptds, (CUdeviceptr d, CUdeviceptr s, size_t n), (d, s, n), d, s, n, 2)
HOST_COPY(cuMemcpy_ptds, (CUdeviceptr d, CUdeviceptr s, size_t n), (d, s, n), d, s, n, 2)
COPY_ON(cuMemcpyHtoDAsync_v2_ptsz, (CUdeviceptr d, const void *h, size_t n, CUstream st), (d, h, n, st), d, 0, n, -1)
COPY_ON(cuMemcpyDtoHAsync_v2_ptsz, (void *h, CUdeviceptr d, size_t n, CUstream st), (h, d, n, st), 0, d, n, -1)
COPY_ON(cuMemcpyDtoDAsync_v2_ptsz, (CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st), (d, s, n, st), d, s, n, 3)
COPY_ON(cuMemcpyAsync_ptsz, (CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st), (d, s, n, st), d, s, n, 3)

#define SET(name, vtype, width, params, args, st) TR_WRAP(name, params, args, WR(d, n *width, tr_stream_of(#name, st)))

SET(cuMemsetD8_v2, unsigned char, 1, (CUdeviceptr d, unsigned char v, size_t n), (d, v, n), NULL)
SET(cuMemsetD16_v2, unsigned short, 2, (CUdeviceptr d, unsigned short v, size_t n), (d, v, n), NULL)
SET(cuMemsetD32_v2, unsigned int, 4, (CUdeviceptr d, unsigned int v, size_t n), (d, v, n), NULL)
SET(cuMemsetD8_v2_ptds, unsigned char, 1, (CUdeviceptr d, unsigned char v, size_t n), (d, v, n), NULL)
SET(cuMemsetD16_v2_ptds, unsigned short, 2, (CUdeviceptr d, unsigned short v, size_t n), (d, v, n), NULL)
SET(cuMemsetD32_v2_ptds, unsigned int, 4, (CUdeviceptr d, unsigned int v, size_t n), (d, v, n), NULL)
SET(cuMemsetD8Async, unsigned char, 1, (CUdeviceptr d, unsigned char v, size_t n, CUstream s), (d, v, n, s), s)
SET(cuMemsetD16Async, unsigned short, 2, (CUdeviceptr d, unsigned short v, size_t n, CUstream s), (d, v, n, s), s)
SET(cuMemsetD32Async, unsigned int, 4, (CUdeviceptr d, unsigned int v, size_t n, CUstream s), (d, v, n, s), s)
SET(cuMemsetD8Async_ptsz, unsigned char, 1, (CUdeviceptr d, unsigned char v, size_t n, CUstream s), (d, v, n, s), s)
SET(cuMemsetD16Async_ptsz, unsigned short, 2, (CUdeviceptr d, unsigned short v, size_t n, CUstream s),
    (d, v, n, s), s)
SET(cuMemsetD32Async_ptsz, unsigned int, 4, (CUdeviceptr d, unsigned int v, size_t n, CUstream s), (d, v, n, s), s)
