/*
 * Contexts the application used, so that quiesce can synchronise each one;
 * and the wrappers that tell us about them. Peer access between contexts
 * is passed on to alloc.c, whose objects need it as cuMemSetAccess.
 */
#include "tracer.h"

#define MAX_CTX 64

/* Guarded by lock. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static CUcontext ctxs[MAX_CTX];
static int nctx;

void ctx_note(CUcontext ctx)
{
	if (!ctx)
		return;
	pthread_mutex_lock(&lock);
	int i = 0;
	while (i < nctx && ctxs[i] != ctx)
		i++;
	if (i == nctx && nctx < MAX_CTX)
		ctxs[nctx++] = ctx;
	pthread_mutex_unlock(&lock);
}

CUresult ctx_synchronize_all(void)
{
	REAL(CUresult, cuCtxPushCurrent_v2, (CUcontext));
	REAL(CUresult, cuCtxPopCurrent_v2, (CUcontext *));
	REAL(CUresult, cuCtxSynchronize, (void));
	pthread_mutex_lock(&lock);
	CUresult res = CUDA_SUCCESS;
	for (int i = 0; i < nctx; i++) {
		CUcontext popped;
		if (real_cuCtxPushCurrent_v2(ctxs[i]) != CUDA_SUCCESS)
			continue; /* destroyed meanwhile */
		CUresult r = real_cuCtxSynchronize();
		if (r && !res)
			res = r;
		real_cuCtxPopCurrent_v2(&popped);
	}
	pthread_mutex_unlock(&lock);
	return res;
}

static void forget(CUcontext ctx)
{
	pthread_mutex_lock(&lock);
	for (int i = 0; i < nctx; i++)
		if (ctxs[i] == ctx)
			ctxs[i] = ctxs[--nctx];
	pthread_mutex_unlock(&lock);
}

TR_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	REAL(CUresult, cuDevicePrimaryCtxRetain, (CUcontext *, CUdevice));
	CUresult r = real_cuDevicePrimaryCtxRetain(pctx, dev);
	if (r == CUDA_SUCCESS && pctx)
		ctx_note(*pctx);
	return r;
}

TR_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx)
{
	REAL(CUresult, cuCtxSetCurrent, (CUcontext));
	ctx_note(ctx);
	return real_cuCtxSetCurrent(ctx);
}

TR_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
	REAL(CUresult, cuCtxPushCurrent_v2, (CUcontext));
	ctx_note(ctx);
	return real_cuCtxPushCurrent_v2(ctx);
}

TR_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	REAL(CUresult, cuCtxCreate_v2, (CUcontext *, unsigned int, CUdevice));
	CUresult r = real_cuCtxCreate_v2(pctx, flags, dev);
	if (r == CUDA_SUCCESS && pctx)
		ctx_note(*pctx);
	return r;
}

TR_EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *p, int n, unsigned int flags, CUdevice dev)
{
	REAL(CUresult, cuCtxCreate_v3, (CUcontext *, CUexecAffinityParam *, int, unsigned int, CUdevice));
	CUresult r = real_cuCtxCreate_v3(pctx, p, n, flags, dev);
	if (r == CUDA_SUCCESS && pctx)
		ctx_note(*pctx);
	return r;
}

TR_EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *p, unsigned int flags, CUdevice dev)
{
	REAL(CUresult, cuCtxCreate_v4, (CUcontext *, CUctxCreateParams *, unsigned int, CUdevice));
	CUresult r = real_cuCtxCreate_v4(pctx, p, flags, dev);
	if (r == CUDA_SUCCESS && pctx)
		ctx_note(*pctx);
	return r;
}

TR_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
	REAL(CUresult, cuCtxDestroy_v2, (CUcontext));
	forget(ctx);
	return real_cuCtxDestroy_v2(ctx);
}

CUcontext ctx_primary(CUdevice dev)
{
	REAL(CUresult, cuDevicePrimaryCtxRetain, (CUcontext *, CUdevice));
	static CUcontext primary[MAX_CTX]; /* guarded by lock */
	if (dev < 0 || dev >= MAX_CTX)
		return NULL;
	pthread_mutex_lock(&lock);
	CUcontext c = primary[dev];
	if (!c && real_cuDevicePrimaryCtxRetain(&c, dev) != CUDA_SUCCESS)
		c = NULL;
	primary[dev] = c;
	pthread_mutex_unlock(&lock);
	return c;
}

/* The devices of the current context and of ctx. */
static CUresult devices_of(CUcontext ctx, CUdevice *me, CUdevice *other)
{
	REAL(CUresult, cuCtxGetDevice, (CUdevice *));
	REAL(CUresult, cuCtxPushCurrent_v2, (CUcontext));
	REAL(CUresult, cuCtxPopCurrent_v2, (CUcontext *));
	CUresult r = real_cuCtxGetDevice(me);
	if (r)
		return r;
	r = real_cuCtxPushCurrent_v2(ctx);
	if (r)
		return r;
	r = real_cuCtxGetDevice(other);
	CUcontext popped;
	real_cuCtxPopCurrent_v2(&popped);
	return r;
}

TR_EXPORT CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags)
{
	REAL(CUresult, cuCtxEnablePeerAccess, (CUcontext, unsigned int));
	if (!tr_enabled())
		return real_cuCtxEnablePeerAccess(peer, flags);
	GATE();
	CUresult r = real_cuCtxEnablePeerAccess(peer, flags);
	CUdevice me, other;
	if (r || devices_of(peer, &me, &other))
		return r;
	return alloc_peer_access(me, other, true);
}

TR_EXPORT CUresult cuCtxDisablePeerAccess(CUcontext peer)
{
	REAL(CUresult, cuCtxDisablePeerAccess, (CUcontext));
	if (!tr_enabled())
		return real_cuCtxDisablePeerAccess(peer);
	GATE();
	CUdevice me, other;
	/* The devices first: the driver's answer does not change them. */
	bool known = peer && !devices_of(peer, &me, &other);
	CUresult r = real_cuCtxDisablePeerAccess(peer);
	if (r || !known)
		return r;
	return alloc_peer_access(me, other, false);
}
