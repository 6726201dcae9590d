/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Wrappers of the copies and sets whose destination is a strided area or
 * another context's memory: 2D and 3D copies, peer copies and 2D sets.
 * They pass the gate, and while a CoW copy runs the bytes they write are
 * protected: the exact span from the first byte to the last for 2D, peer
 * and set calls; while a lazy restore runs, the spans they read and write
 * must be back first. 3D copies go through the safety net.
 */
#include "tracer.h"

static bool on_device(CUmemorytype t)
{
	return t == CU_MEMORYTYPE_DEVICE || t == CU_MEMORYTYPE_UNIFIED;
}

/* The reads and writes of a 2D copy: the span from its first byte to its
 * last on each side that is device memory. */
static void protect2d(const CUDA_MEMCPY2D *c, CUstream s)
{
	if (!c || !c->Height || !c->WidthInBytes)
		return;
	uint64_t rows = (c->Height - 1);
	if (on_device(c->srcMemoryType))
		spec_range(c->srcDevice + c->srcY * c->srcPitch + c->srcXInBytes, rows * c->srcPitch + c->WidthInBytes,
			   true, false, s);
	if (on_device(c->dstMemoryType))
		spec_range(c->dstDevice + c->dstY * c->dstPitch + c->dstXInBytes, rows * c->dstPitch + c->WidthInBytes,
			   false, true, s);
}

static void protect3d(const CUDA_MEMCPY3D *c)
{
	if (c && (on_device(c->dstMemoryType) || c->dstMemoryType == CU_MEMORYTYPE_ARRAY ||
		  on_device(c->srcMemoryType)))
		spec_net(NULL);
}

/* A peer copy reads n bytes at src and writes n at d. */
static void peer(CUdeviceptr d, CUdeviceptr src, size_t n, CUstream s)
{
	spec_range(src, n, true, false, s);
	spec_range(d, n, false, true, s);
}

#define WRAP TR_WRAP

WRAP(cuMemcpy2D_v2, (const CUDA_MEMCPY2D *c), (c), protect2d(c, NULL))
WRAP(cuMemcpy2D_v2_ptds, (const CUDA_MEMCPY2D *c), (c), protect2d(c, CU_STREAM_PER_THREAD))
WRAP(cuMemcpy2DUnaligned_v2, (const CUDA_MEMCPY2D *c), (c), protect2d(c, NULL))
WRAP(cuMemcpy2DUnaligned_v2_ptds, (const CUDA_MEMCPY2D *c), (c), protect2d(c, CU_STREAM_PER_THREAD))
WRAP(cuMemcpy2DAsync_v2, (const CUDA_MEMCPY2D *c, CUstream s), (c, s), protect2d(c, s))
WRAP(cuMemcpy2DAsync_v2_ptsz, (const CUDA_MEMCPY2D *c, CUstream s), (c, s),
     protect2d(c, s ? s : CU_STREAM_PER_THREAD))
WRAP(cuMemcpy3D_v2, (const CUDA_MEMCPY3D *c), (c), protect3d(c))
WRAP(cuMemcpy3D_v2_ptds, (const CUDA_MEMCPY3D *c), (c), protect3d(c))
WRAP(cuMemcpy3DAsync_v2, (const CUDA_MEMCPY3D *c, CUstream s), (c, s), protect3d(c))
WRAP(cuMemcpy3DAsync_v2_ptsz, (const CUDA_MEMCPY3D *c, CUstream s), (c, s), protect3d(c))

WRAP(cuMemcpyPeer, (CUdeviceptr d, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n), (d, dc, src, sc, n),
     peer(d, src, n, NULL))
WRAP(cuMemcpyPeer_ptds, (CUdeviceptr d, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n), (d, dc, src, sc, n),
     peer(d, src, n, CU_STREAM_PER_THREAD))
WRAP(cuMemcpyPeerAsync, (CUdeviceptr d, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n, CUstream s),
     (d, dc, src, sc, n, s), peer(d, src, n, s))
WRAP(cuMemcpyPeerAsync_ptsz, (CUdeviceptr d, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n, CUstream s),
     (d, dc, src, sc, n, s), peer(d, src, n, s ? s : CU_STREAM_PER_THREAD))

/* The span of a 2D set: height rows of pitch, the last one width elements. */
#define SPAN(p, w, h, elt) ((h) ? ((uint64_t)(h) - 1) * (p) + (uint64_t)(w) * (elt) : 0)

#define SET2D(name, T, elt)                                                                                   \
	WRAP(name##_v2, (CUdeviceptr d, size_t p, T v, size_t w, size_t h), (d, p, v, w, h),                  \
	     spec_range(d, SPAN(p, w, h, elt), false, true, NULL))                                                   \
	WRAP(name##_v2_ptds, (CUdeviceptr d, size_t p, T v, size_t w, size_t h), (d, p, v, w, h),             \
	     spec_range(d, SPAN(p, w, h, elt), false, true, CU_STREAM_PER_THREAD))                                   \
	WRAP(name##Async, (CUdeviceptr d, size_t p, T v, size_t w, size_t h, CUstream s), (d, p, v, w, h, s), \
	     spec_range(d, SPAN(p, w, h, elt), false, true, s))                                                      \
	WRAP(name##Async_ptsz, (CUdeviceptr d, size_t p, T v, size_t w, size_t h, CUstream s),                \
	     (d, p, v, w, h, s), spec_range(d, SPAN(p, w, h, elt), false, true, s ? s : CU_STREAM_PER_THREAD))

SET2D(cuMemsetD2D8, unsigned char, 1)
SET2D(cuMemsetD2D16, unsigned short, 2)
SET2D(cuMemsetD2D32, unsigned int, 4)
