/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Wrappers of the calls that write device memory without a kernel or a
 * plain copy: stream memory operations (cuStreamWriteValue*, the writes
 * of cuStreamBatchMemOp), batched copies (cuMemcpyBatchAsync), copies
 * from arrays (cuMemcpyAtoD) and discards (cuMemDiscard*BatchAsync, whose
 * ranges hold undefined bytes afterwards). They pass the gate, and while a
 * CoW copy runs the bytes they write are protected first, exactly. The
 * batched 3D copies and the 3D peer copies go through the safety net, as
 * the 3D copies do.
 */
#include "tracer.h"

#define WR(a, n, st) spec_range((uint64_t)(a), (n), false, true, (st))
#define RD(a, n, st) spec_range((uint64_t)(a), (n), true, false, (st))

#define WRAP TR_WRAP

/* cuda.h gives the newest version these names; each is wrapped here. */
#undef cuStreamWriteValue32
#undef cuStreamWriteValue64
#undef cuStreamWaitValue32
#undef cuStreamWaitValue64
#undef cuStreamBatchMemOp
#undef cuMemcpyBatchAsync
#undef cuMemcpy3DBatchAsync
#undef cuMemcpyAtoD
#undef cuMemcpy3DPeer
#undef cuMemcpy3DPeerAsync

/* ---- stream memory operations --------------------------------------------- */

#define WRITE_VALUE(name, vtype, width)                                                             \
	WRAP(name, (CUstream s, CUdeviceptr a, vtype v, unsigned int f), (s, a, v, f), \
	     WR(a, width, tr_stream_of(#name, s)))
WRITE_VALUE(cuStreamWriteValue32, cuuint32_t, 4)
WRITE_VALUE(cuStreamWriteValue32_ptsz, cuuint32_t, 4)
WRITE_VALUE(cuStreamWriteValue32_v2, cuuint32_t, 4)
WRITE_VALUE(cuStreamWriteValue32_v2_ptsz, cuuint32_t, 4)
WRITE_VALUE(cuStreamWriteValue64, cuuint64_t, 8)
WRITE_VALUE(cuStreamWriteValue64_ptsz, cuuint64_t, 8)
WRITE_VALUE(cuStreamWriteValue64_v2, cuuint64_t, 8)
WRITE_VALUE(cuStreamWriteValue64_v2_ptsz, cuuint64_t, 8)

/* A wait reads the word it waits on: a lazy restore must have it back. */
#define WAIT_VALUE(name, vtype, width)                                                              \
	WRAP(name, (CUstream s, CUdeviceptr a, vtype v, unsigned int f), (s, a, v, f), \
	     RD(a, width, tr_stream_of(#name, s)))
WAIT_VALUE(cuStreamWaitValue32, cuuint32_t, 4)
WAIT_VALUE(cuStreamWaitValue32_ptsz, cuuint32_t, 4)
WAIT_VALUE(cuStreamWaitValue32_v2, cuuint32_t, 4)
WAIT_VALUE(cuStreamWaitValue32_v2_ptsz, cuuint32_t, 4)
WAIT_VALUE(cuStreamWaitValue64, cuuint64_t, 8)
WAIT_VALUE(cuStreamWaitValue64_ptsz, cuuint64_t, 8)
WAIT_VALUE(cuStreamWaitValue64_v2, cuuint64_t, 8)
WAIT_VALUE(cuStreamWaitValue64_v2_ptsz, cuuint64_t, 8)

/* The bytes each write of the batch changes; an operation this version
 * does not know may write anything, so it goes through the safety net. */
static void protect_memops(unsigned count, const CUstreamBatchMemOpParams *ops, CUstream s)
{
	for (unsigned i = 0; ops && i < count; i++) {
		switch (ops[i].operation) {
		case CU_STREAM_MEM_OP_WRITE_VALUE_32:
			WR(ops[i].writeValue.address, 4, s);
			break;
		case CU_STREAM_MEM_OP_WRITE_VALUE_64:
			WR(ops[i].writeValue.address, 8, s);
			break;
		case CU_STREAM_MEM_OP_WAIT_VALUE_32:
			RD(ops[i].waitValue.address, 4, s);
			break;
		case CU_STREAM_MEM_OP_WAIT_VALUE_64:
			RD(ops[i].waitValue.address, 8, s);
			break;
		case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:
		case CU_STREAM_MEM_OP_BARRIER:
			break;
		default:
			spec_net(NULL);
		}
	}
}

#define BATCH_MEMOP(name)                                                                                 \
	WRAP(name, (CUstream s, unsigned int n, CUstreamBatchMemOpParams *ops, unsigned int f), (s, n, ops, f), \
	     protect_memops(n, ops, tr_stream_of(#name, s)))
BATCH_MEMOP(cuStreamBatchMemOp)
BATCH_MEMOP(cuStreamBatchMemOp_ptsz)
BATCH_MEMOP(cuStreamBatchMemOp_v2)
BATCH_MEMOP(cuStreamBatchMemOp_v2_ptsz)

/* ---- batched copies, array copies, discards --------------------------------- */

/* Every range of a batch: each that is device memory of the process is
 * protected (host destinations are not in the buffer table). */
static void protect_ranges(const CUdeviceptr *at, const size_t *sizes, size_t count, CUstream s)
{
	for (size_t i = 0; at && sizes && i < count; i++)
		WR(at[i], sizes[i], s);
}

/* A batch of copies: its sources are read, its destinations written. */
static void protect_copies(const CUdeviceptr *d, const CUdeviceptr *src, const size_t *sizes, size_t count,
			   CUstream s)
{
	for (size_t i = 0; src && sizes && i < count; i++)
		RD(src[i], sizes[i], s);
	protect_ranges(d, sizes, count, s);
}

#define MEMCPY_BATCH(name)                                                                               \
	WRAP(name,                                                                                       \
	     (CUdeviceptr * d, CUdeviceptr * src, size_t * n, size_t c, CUmemcpyAttributes * a, size_t * ai, \
	      size_t na, CUstream s),                                                                    \
	     (d, src, n, c, a, ai, na, s), protect_copies(d, src, n, c, tr_stream_of(#name, s)))
#define MEMCPY_BATCH_FAIL(name)                                                                          \
	WRAP(name,                                                                                       \
	     (CUdeviceptr * d, CUdeviceptr * src, size_t * n, size_t c, CUmemcpyAttributes * a, size_t * ai, \
	      size_t na, size_t * fail, CUstream s),                                                     \
	     (d, src, n, c, a, ai, na, fail, s), protect_copies(d, src, n, c, tr_stream_of(#name, s)))
MEMCPY_BATCH_FAIL(cuMemcpyBatchAsync)
MEMCPY_BATCH_FAIL(cuMemcpyBatchAsync_ptsz)
MEMCPY_BATCH(cuMemcpyBatchAsync_v2)
MEMCPY_BATCH(cuMemcpyBatchAsync_v2_ptsz)

WRAP(cuMemcpy3DBatchAsync,
     (size_t n, CUDA_MEMCPY3D_BATCH_OP *ops, size_t *fail, unsigned long long f, CUstream s),
     (n, ops, fail, f, s), spec_net(NULL))
WRAP(cuMemcpy3DBatchAsync_ptsz,
     (size_t n, CUDA_MEMCPY3D_BATCH_OP *ops, size_t *fail, unsigned long long f, CUstream s),
     (n, ops, fail, f, s), spec_net(NULL))
WRAP(cuMemcpy3DBatchAsync_v2, (size_t n, CUDA_MEMCPY3D_BATCH_OP *ops, unsigned long long f, CUstream s),
     (n, ops, f, s), spec_net(NULL))
WRAP(cuMemcpy3DBatchAsync_v2_ptsz, (size_t n, CUDA_MEMCPY3D_BATCH_OP *ops, unsigned long long f, CUstream s),
     (n, ops, f, s), spec_net(NULL))
WRAP(cuMemcpy3DPeer, (const CUDA_MEMCPY3D_PEER *c), (c), spec_net(NULL))
WRAP(cuMemcpy3DPeer_ptds, (const CUDA_MEMCPY3D_PEER *c), (c), spec_net(NULL))
WRAP(cuMemcpy3DPeerAsync, (const CUDA_MEMCPY3D_PEER *c, CUstream s), (c, s), spec_net(NULL))
WRAP(cuMemcpy3DPeerAsync_ptsz, (const CUDA_MEMCPY3D_PEER *c, CUstream s), (c, s), spec_net(NULL))

WRAP(cuMemcpyAtoD_v2, (CUdeviceptr d, CUarray a, size_t off, size_t n), (d, a, off, n), WR(d, n, NULL))
WRAP(cuMemcpyAtoD_v2_ptds, (CUdeviceptr d, CUarray a, size_t off, size_t n), (d, a, off, n),
     WR(d, n, CU_STREAM_PER_THREAD))

WRAP(cuMemDiscardBatchAsync, (CUdeviceptr *d, size_t *n, size_t c, unsigned long long f, CUstream s),
     (d, n, c, f, s), protect_ranges(d, n, c, tr_stream_of("cuMemDiscardBatchAsync", s)))
WRAP(cuMemDiscardBatchAsync_ptsz, (CUdeviceptr *d, size_t *n, size_t c, unsigned long long f, CUstream s),
     (d, n, c, f, s), protect_ranges(d, n, c, tr_stream_of("cuMemDiscardBatchAsync_ptsz", s)))
WRAP(cuMemDiscardAndPrefetchBatchAsync,
     (CUdeviceptr *d, size_t *n, size_t c, CUmemLocation *loc, size_t *li, size_t nl, unsigned long long f,
      CUstream s),
     (d, n, c, loc, li, nl, f, s),
     protect_ranges(d, n, c, tr_stream_of("cuMemDiscardAndPrefetchBatchAsync", s)))
WRAP(cuMemDiscardAndPrefetchBatchAsync_ptsz,
     (CUdeviceptr *d, size_t *n, size_t c, CUmemLocation *loc, size_t *li, size_t nl, unsigned long long f,
      CUstream s),
     (d, n, c, loc, li, nl, f, s),
     protect_ranges(d, n, c, tr_stream_of("cuMemDiscardAndPrefetchBatchAsync_ptsz", s)))
