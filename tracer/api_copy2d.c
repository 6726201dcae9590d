/*
 * Wrappers of the copies and sets whose destination is a strided area or
 * another context's memory: 2D and 3D copies, peer copies and 2D sets.
 * They pass the gate, and while a CoW copy runs the bytes they write are
 * protected: the exact span from the first byte to the last for 2D, peer
 * and set calls; 3D copies go through the safety net.
 */
#include "tracer.h"

/* The device span a 2D copy writes, or 0 if it writes host memory. */
static uint64_t span2d(const CUDA_MEMCPY2D *c, uint64_t *at)
{
	if (!c || (c->dstMemoryType != CU_MEMORYTYPE_DEVICE && c->dstMemoryType != CU_MEMORYTYPE_UNIFIED) ||
	    !c->Height || !c->WidthInBytes)
		return 0;
	*at = c->dstDevice + c->dstY * c->dstPitch + c->dstXInBytes;
	return (c->Height - 1) * c->dstPitch + c->WidthInBytes;
}

static void protect2d(const CUDA_MEMCPY2D *c, CUstream s)
{
	uint64_t at = 0, n = span2d(c, &at);
	if (n)
		cow_before_write(at, n, s);
}

static void protect3d(const CUDA_MEMCPY3D *c)
{
	if (c && (c->dstMemoryType == CU_MEMORYTYPE_DEVICE || c->dstMemoryType == CU_MEMORYTYPE_UNIFIED ||
		  c->dstMemoryType == CU_MEMORYTYPE_ARRAY))
		cow_net(NULL);
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
     cow_before_write(d, n, NULL))
WRAP(cuMemcpyPeer_ptds, (CUdeviceptr d, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n), (d, dc, src, sc, n),
     cow_before_write(d, n, CU_STREAM_PER_THREAD))
WRAP(cuMemcpyPeerAsync, (CUdeviceptr d, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n, CUstream s),
     (d, dc, src, sc, n, s), cow_before_write(d, n, s))
WRAP(cuMemcpyPeerAsync_ptsz, (CUdeviceptr d, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n, CUstream s),
     (d, dc, src, sc, n, s), cow_before_write(d, n, s ? s : CU_STREAM_PER_THREAD))

/* The span of a 2D set: height rows of pitch, the last one width elements. */
#define SPAN(p, w, h, elt) ((h) ? ((uint64_t)(h) - 1) * (p) + (uint64_t)(w) * (elt) : 0)

#define SET2D(name, T, elt)                                                                                   \
	WRAP(name##_v2, (CUdeviceptr d, size_t p, T v, size_t w, size_t h), (d, p, v, w, h),                  \
	     cow_before_write(d, SPAN(p, w, h, elt), NULL))                                                   \
	WRAP(name##_v2_ptds, (CUdeviceptr d, size_t p, T v, size_t w, size_t h), (d, p, v, w, h),             \
	     cow_before_write(d, SPAN(p, w, h, elt), CU_STREAM_PER_THREAD))                                   \
	WRAP(name##Async, (CUdeviceptr d, size_t p, T v, size_t w, size_t h, CUstream s), (d, p, v, w, h, s), \
	     cow_before_write(d, SPAN(p, w, h, elt), s))                                                      \
	WRAP(name##Async_ptsz, (CUdeviceptr d, size_t p, T v, size_t w, size_t h, CUstream s),                \
	     (d, p, v, w, h, s), cow_before_write(d, SPAN(p, w, h, elt), s ? s : CU_STREAM_PER_THREAD))

SET2D(cuMemsetD2D8, unsigned char, 1)
SET2D(cuMemsetD2D16, unsigned short, 2)
SET2D(cuMemsetD2D32, unsigned int, 4)
