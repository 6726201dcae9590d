/* SPDX-License-Identifier: GPL-2.0-only */
/* Contexts: the primary context of each device, created contexts, and the
 * calling thread's context stack. simcuda has one address space, so a
 * context only scopes "is there a current context" and synchronisation. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define STACK_DEPTH 32

/* Guarded by ctx_lock: the primary contexts' refs, flags and limits, the
 * created contexts' list and limits. */
static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static sc_ctx primary[SC_DEVICE_MAX];
static sc_ctx *made;

/* The driver's defaults of CU_LIMIT_STACK_SIZE, _PRINTF_FIFO_SIZE and
 * _MALLOC_HEAP_SIZE. */
static const size_t limit_default[3] = { 1024, 1u << 20, 8u << 20 };
/* Devices a context was ever made on (bit per ordinal). */
static atomic_uint used;
static atomic_ullong next_id = 1;

/* The calling thread's context stack; the top is the current context. */
static _Thread_local CUcontext stack[STACK_DEPTH];
static _Thread_local int depth;

bool sc_ctx_device_used(CUdevice dev)
{
	return dev >= 0 && dev < SC_DEVICE_MAX && (atomic_load(&used) & (1u << dev));
}

CUcontext sc_ctx_current(void)
{
	return depth ? stack[depth - 1] : NULL;
}

CUresult sc_ctx_require(void)
{
	if (!sc_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	return sc_ctx_current() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

static CUresult create(CUcontext *pctx, unsigned flags, CUdevice dev)
{
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = sc_check_device(dev);
	if (r)
		return r;
	if (depth == STACK_DEPTH)
		return CUDA_ERROR_OUT_OF_MEMORY;
	sc_ctx *c = calloc(1, sizeof(*c));
	if (!c)
		return CUDA_ERROR_OUT_OF_MEMORY;
	c->dev = dev;
	c->flags = flags;
	c->id = atomic_fetch_add(&next_id, 1);
	atomic_fetch_or(&used, 1u << dev);
	pthread_mutex_lock(&ctx_lock);
	c->next = made;
	made = c;
	pthread_mutex_unlock(&ctx_lock);
	stack[depth++] = (CUcontext)c;
	*pctx = (CUcontext)c;
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	return create(pctx, flags, dev);
}

SC_EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *params, int n,
				  unsigned int flags, CUdevice dev)
{
	if (n < 0 || (n > 0 && !params))
		return CUDA_ERROR_INVALID_VALUE;
	return create(pctx, flags, dev);
}

SC_EXPORT CUresult cuCtxCreate(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags,
			       CUdevice dev)
{
	(void)params; /* execution affinity and CIG have no meaning here */
	return create(pctx, flags, dev);
}

static void forget(CUcontext ctx)
{
	/* Pop it wherever it is in this thread's stack. */
	for (int i = 0; i < depth; i++) {
		if (stack[i] == ctx) {
			memmove(&stack[i], &stack[i + 1], (size_t)(depth - i - 1) * sizeof(stack[0]));
			depth--;
			i--;
		}
	}
}

static bool is_primary(CUcontext ctx)
{
	return (sc_ctx *)ctx >= primary && (sc_ctx *)ctx < primary + SC_DEVICE_MAX;
}

SC_EXPORT CUresult cuCtxDestroy(CUcontext ctx)
{
	if (!ctx)
		return CUDA_ERROR_INVALID_VALUE;
	if (is_primary(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	sc_streams_drain();
	forget(ctx);
	pthread_mutex_lock(&ctx_lock);
	sc_ctx **pp = &made;
	while (*pp && *pp != (sc_ctx *)ctx)
		pp = &(*pp)->next;
	if (*pp)
		*pp = (*pp)->next;
	pthread_mutex_unlock(&ctx_lock);
	free(ctx);
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx)
{
	CUresult r = sc_check_init();
	if (r)
		return r;
	if (!ctx) {
		if (depth)
			depth--;
		return CUDA_SUCCESS;
	}
	if (depth == 0)
		depth = 1;
	stack[depth - 1] = ctx;
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx)
{
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = sc_check_init();
	if (r)
		return r;
	*pctx = sc_ctx_current();
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuCtxPushCurrent(CUcontext ctx)
{
	if (!ctx)
		return CUDA_ERROR_INVALID_VALUE;
	if (depth == STACK_DEPTH)
		return CUDA_ERROR_OUT_OF_MEMORY;
	stack[depth++] = ctx;
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuCtxPopCurrent(CUcontext *pctx)
{
	if (!depth)
		return CUDA_ERROR_INVALID_CONTEXT;
	CUcontext c = stack[--depth];
	if (pctx)
		*pctx = c;
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuCtxGetDevice(CUdevice *dev)
{
	if (!dev)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = sc_ctx_require();
	if (r)
		return r;
	*dev = ((sc_ctx *)sc_ctx_current())->dev;
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuCtxGetDevice_v2(CUdevice *dev, CUcontext ctx)
{
	if (!ctx)
		return cuCtxGetDevice(dev);
	if (!dev)
		return CUDA_ERROR_INVALID_VALUE;
	*dev = ((sc_ctx *)ctx)->dev;
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuCtxGetFlags(unsigned int *flags)
{
	if (!flags)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = sc_ctx_require();
	if (r)
		return r;
	*flags = ((sc_ctx *)sc_ctx_current())->flags;
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuCtxGetId(CUcontext ctx, unsigned long long *id)
{
	if (!id)
		return CUDA_ERROR_INVALID_VALUE;
	if (!ctx)
		ctx = sc_ctx_current();
	if (!ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	*id = ((sc_ctx *)ctx)->id;
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
	(void)ctx;
	if (!version)
		return CUDA_ERROR_INVALID_VALUE;
	*version = 3020;
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuCtxSynchronize(void)
{
	SC_API();
	CUresult r = sc_ctx_require();
	if (r)
		return r;
	sc_streams_drain();
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = sc_check_device(dev);
	if (r)
		return r;
	pthread_mutex_lock(&ctx_lock);
	sc_ctx *c = &primary[dev];
	atomic_fetch_or(&used, 1u << dev);
	if (c->refs++ == 0) {
		c->dev = dev;
		c->primary = true;
		memset(c->limits, 0, sizeof(c->limits));
		if (!c->id)
			c->id = atomic_fetch_add(&next_id, 1);
	}
	pthread_mutex_unlock(&ctx_lock);
	*pctx = (CUcontext)c;
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
	CUresult r = sc_check_device(dev);
	if (r)
		return r;
	pthread_mutex_lock(&ctx_lock);
	if (primary[dev].refs == 0)
		r = CUDA_ERROR_INVALID_CONTEXT;
	else
		primary[dev].refs--;
	pthread_mutex_unlock(&ctx_lock);
	return r;
}

SC_LEGACY(sc_cuDevicePrimaryCtxRelease_v1, "cuDevicePrimaryCtxRelease", (CUdevice dev))
{
	return cuDevicePrimaryCtxRelease(dev);
}

SC_EXPORT CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)
{
	CUresult r = sc_check_device(dev);
	if (r)
		return r;
	pthread_mutex_lock(&ctx_lock);
	primary[dev].flags = flags;
	pthread_mutex_unlock(&ctx_lock);
	return CUDA_SUCCESS;
}

SC_LEGACY(sc_cuDevicePrimaryCtxSetFlags_v1, "cuDevicePrimaryCtxSetFlags", (CUdevice dev, unsigned int flags))
{
	return cuDevicePrimaryCtxSetFlags(dev, flags);
}

SC_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
	if (!flags || !active)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = sc_check_device(dev);
	if (r)
		return r;
	pthread_mutex_lock(&ctx_lock);
	*flags = primary[dev].flags;
	*active = primary[dev].refs > 0;
	pthread_mutex_unlock(&ctx_lock);
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
	CUresult r = sc_check_device(dev);
	if (r)
		return r;
	sc_streams_drain();
	pthread_mutex_lock(&ctx_lock);
	primary[dev].refs = 0;
	pthread_mutex_unlock(&ctx_lock);
	return CUDA_SUCCESS;
}

SC_LEGACY(sc_cuDevicePrimaryCtxReset_v1, "cuDevicePrimaryCtxReset", (CUdevice dev))
{
	return cuDevicePrimaryCtxReset(dev);
}

/* ---- Peer access ----------------------------------------------------------
 * simcuda keeps it per device pair rather than per context pair: bit p of
 * peers[d] says that device d's contexts may reach device p's cuMemAlloc
 * memory. (VMM memory is reached through cuMemSetAccess instead, as on a
 * GPU, whatever peer access says.) */
static atomic_uint peers[SC_DEVICE_MAX];

bool sc_ctx_peer_enabled(CUdevice from, CUdevice owner)
{
	if (from == owner)
		return true;
	return from >= 0 && from < SC_DEVICE_MAX && owner >= 0 && owner < SC_DEVICE_MAX &&
	       (atomic_load(&peers[from]) & (1u << owner));
}

SC_EXPORT CUresult cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer)
{
	if (!can)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = sc_check_device(dev);
	if (!r)
		r = sc_check_device(peer);
	if (r)
		return r;
	*can = dev != peer;
	return CUDA_SUCCESS;
}

static CUresult peer_access(CUcontext peer, bool on)
{
	CUresult r = sc_ctx_require();
	if (r)
		return r;
	if (!peer)
		return CUDA_ERROR_INVALID_CONTEXT;
	CUdevice me = ((sc_ctx *)sc_ctx_current())->dev, other = ((sc_ctx *)peer)->dev;
	if (me == other)
		return on ? CUDA_ERROR_INVALID_DEVICE : CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
	unsigned bit = 1u << other, was = on ? atomic_fetch_or(&peers[me], bit) : atomic_fetch_and(&peers[me], ~bit);
	if (on && (was & bit))
		return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
	if (!on && !(was & bit))
		return CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags)
{
	SC_API();
	if (flags)
		return CUDA_ERROR_INVALID_VALUE;
	return peer_access(peer, true);
}

SC_EXPORT CUresult cuCtxDisablePeerAccess(CUcontext peer)
{
	SC_API();
	return peer_access(peer, false);
}

static size_t limit_of(const sc_ctx *c, int k)
{
	return c->limits[k] ? c->limits[k] - 1 : limit_default[k];
}

uint64_t sc_ctx_local_bytes(void)
{
	uint64_t n = 0;
	pthread_mutex_lock(&ctx_lock);
	for (int d = 0; d < SC_DEVICE_MAX; d++)
		if (primary[d].refs > 0)
			n += (uint64_t)limit_of(&primary[d], 0) * SC_LOCAL_THREADS;
	for (const sc_ctx *c = made; c; c = c->next)
		n += (uint64_t)limit_of(c, 0) * SC_LOCAL_THREADS;
	pthread_mutex_unlock(&ctx_lock);
	return n;
}

/* The index of limit in sc_ctx.limits (*k), once a context is current.
 * Returns CUDA_ERROR_UNSUPPORTED_LIMIT for a limit simcuda does not keep. */
static CUresult limit_index(CUlimit limit, int *k)
{
	CUresult r = sc_ctx_require();
	if (r)
		return r;
	switch (limit) {
	case CU_LIMIT_STACK_SIZE:
		*k = 0;
		return CUDA_SUCCESS;
	case CU_LIMIT_PRINTF_FIFO_SIZE:
		*k = 1;
		return CUDA_SUCCESS;
	case CU_LIMIT_MALLOC_HEAP_SIZE:
		*k = 2;
		return CUDA_SUCCESS;
	default:
		return CUDA_ERROR_UNSUPPORTED_LIMIT;
	}
}

SC_EXPORT CUresult cuCtxGetLimit(size_t *value, CUlimit limit)
{
	int k;
	CUresult r = value ? limit_index(limit, &k) : CUDA_ERROR_INVALID_VALUE;
	if (r)
		return r;
	pthread_mutex_lock(&ctx_lock);
	*value = limit_of((sc_ctx *)sc_ctx_current(), k);
	pthread_mutex_unlock(&ctx_lock);
	return CUDA_SUCCESS;
}

/* As the driver: a new stack limit waits for the context's work (its local
 * memory is reallocated); the others may not change once work ran, which
 * simcuda does not check. */
SC_EXPORT CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
	SC_API();
	int k;
	CUresult r = value == SIZE_MAX ? CUDA_ERROR_INVALID_VALUE : limit_index(limit, &k);
	if (r)
		return r;
	if (k == 0)
		sc_streams_drain();
	pthread_mutex_lock(&ctx_lock);
	((sc_ctx *)sc_ctx_current())->limits[k] = value + 1;
	pthread_mutex_unlock(&ctx_lock);
	return CUDA_SUCCESS;
}
