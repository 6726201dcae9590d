/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Contexts the application used, so that quiesce can synchronise each one;
 * and the wrappers that tell us about them. Peer access between contexts
 * is passed on to alloc.c, whose objects need it as cuMemSetAccess.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "tracer.h"

#define MAX_CTX 64

/* Guarded by lock. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static CUcontext ctxs[MAX_CTX];
static int nctx;
/* Held while contexts are synchronised, and by a destroy (taken before
 * lock). */
static pthread_mutex_t sync_lock = PTHREAD_MUTEX_INITIALIZER;

/* The synchronising thread's requests; guarded by syncer.lock. */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t wake, ended; /* ended: on CLOCK_MONOTONIC */
	uint64_t asked, started, done;
	CUresult result; /* of request `done` */
	bool running;
} syncer = { .lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER };
static pthread_once_t syncer_once = PTHREAD_ONCE_INIT;

/* Whether the process has loaded NCCL (any copy of libnccl). */
static bool nccl_loaded(void)
{
	FILE *f = fopen("/proc/self/maps", "re");
	char line[512];
	bool yes = false;
	while (f && !yes && fgets(line, sizeof(line), f))
		yes = strstr(line, "/libnccl") != NULL;
	if (f)
		fclose(f);
	return yes;
}

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

/* Synchronises every context once. sync_lock keeps a context from being
 * destroyed while it is synchronised; lock is not held meanwhile, so the
 * application may make contexts current while a synchronisation waits. */
static CUresult synchronize_all(void)
{
	REAL(CUresult, cuCtxPushCurrent_v2, (CUcontext));
	REAL(CUresult, cuCtxPopCurrent_v2, (CUcontext *));
	REAL(CUresult, cuCtxSynchronize, (void));
	CUcontext list[MAX_CTX];
	pthread_mutex_lock(&sync_lock);
	pthread_mutex_lock(&lock);
	int n = nctx;
	memcpy(list, ctxs, (size_t)n * sizeof(*list));
	pthread_mutex_unlock(&lock);
	CUresult res = CUDA_SUCCESS;
	for (int i = 0; i < n; i++) {
		CUcontext popped;
		if (real_cuCtxPushCurrent_v2(list[i]) != CUDA_SUCCESS)
			continue;
		CUresult r = real_cuCtxSynchronize();
		if (r && !res)
			res = r;
		real_cuCtxPopCurrent_v2(&popped);
	}
	pthread_mutex_unlock(&sync_lock);
	return res;
}

/* The synchronising thread: a synchronisation that waits for device work
 * which cannot end (a kernel waiting for another process) must not hold
 * the control thread past its deadline. It serves the requests in turn;
 * one that was given up on still ends, once the work does. */
static void *syncer_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "phos-sync");
	pthread_mutex_lock(&syncer.lock);
	for (;;) {
		while (syncer.started == syncer.asked)
			pthread_cond_wait(&syncer.wake, &syncer.lock);
		uint64_t gen = syncer.started = syncer.asked;
		pthread_mutex_unlock(&syncer.lock);
		CUresult r = synchronize_all();
		pthread_mutex_lock(&syncer.lock);
		syncer.done = gen;
		syncer.result = r;
		pthread_cond_broadcast(&syncer.ended);
	}
	return NULL;
}

static void start_syncer(void)
{
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&syncer.ended, &ca);
	pthread_condattr_destroy(&ca);
	pthread_t t;
	syncer.running = pthread_create(&t, NULL, syncer_main, NULL) == 0;
	if (syncer.running)
		pthread_detach(t);
	else
		tr_log("cannot start the synchronising thread: a checkpoint waits for the device without a deadline");
}

int ctx_synchronize_until(uint64_t deadline, char *why, size_t len)
{
	pthread_once(&syncer_once, start_syncer);
	if (!syncer.running) {
		CUresult r = synchronize_all();
		snprintf(why, len, "synchronising the device failed (CUDA error %d)", (int)r);
		return r ? -EIO : 0;
	}
	struct timespec ts = { (time_t)(deadline / 1000000000u), (long)(deadline % 1000000000u) };
	pthread_mutex_lock(&syncer.lock);
	uint64_t gen = ++syncer.asked;
	pthread_cond_signal(&syncer.wake);
	int w = 0;
	while (syncer.done < gen && w != ETIMEDOUT)
		w = pthread_cond_timedwait(&syncer.ended, &syncer.lock, &ts);
	int e = syncer.done < gen ? -ETIMEDOUT : syncer.result ? -EIO : 0;
	CUresult r = syncer.result;
	pthread_mutex_unlock(&syncer.lock);
	if (e == -ETIMEDOUT)
		snprintf(why, len, "its device work did not finish%s", nccl_loaded()
			 ? "; it has NCCL loaded, and a collective may be waiting for a peer process that "
			   "has not reached it"
			 : " (a kernel waiting for another process?)");
	else if (e)
		snprintf(why, len, "synchronising the device failed (CUDA error %d)", (int)r);
	return e;
}

static void shrunk_forget(CUcontext ctx);

static void forget(CUcontext ctx)
{
	pthread_mutex_lock(&sync_lock);
	pthread_mutex_lock(&lock);
	for (int i = 0; i < nctx; i++)
		if (ctxs[i] == ctx)
			ctxs[i] = ctxs[--nctx];
	pthread_mutex_unlock(&lock);
	shrunk_forget(ctx);
	pthread_mutex_unlock(&sync_lock);
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

/* The primary contexts the tracer retained, by device; guarded by lock. */
static CUcontext primary[MAX_CTX];

CUcontext ctx_primary(CUdevice dev)
{
	REAL(CUresult, cuDevicePrimaryCtxRetain, (CUcontext *, CUdevice));
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

/* The stack limit of each context that a park shrank, to set again at
 * unpark; guarded by sync_lock (a context the application destroys
 * meanwhile, which no gate holds back, leaves it). */
static struct {
	CUcontext ctx;
	size_t limit;
} shrunk[2 * MAX_CTX];
static int nshrunk;

/* sync_lock held. */
static void shrunk_forget(CUcontext ctx)
{
	for (int i = 0; i < nshrunk; i++)
		if (shrunk[i].ctx == ctx)
			shrunk[i--] = shrunk[--nshrunk];
}

/* Whether parks shrink the stack limit: PHOS_STACK_SHRINK unset or not 0. */
static bool shrink_wanted(void)
{
	static int wanted = -1;
	if (wanted < 0)
		wanted = tr_env_on("PHOS_STACK_SHRINK", true);
	return wanted;
}

/* Sets limit `limit` of ctx to value, or reads it (value NULL, into *old). */
static CUresult stack_limit(CUcontext ctx, const size_t *value, size_t *old)
{
	REAL(CUresult, cuCtxPushCurrent_v2, (CUcontext));
	REAL(CUresult, cuCtxPopCurrent_v2, (CUcontext *));
	REAL(CUresult, cuCtxGetLimit, (size_t *, CUlimit));
	REAL(CUresult, cuCtxSetLimit, (CUlimit, size_t));
	if (!real_cuCtxGetLimit || !real_cuCtxSetLimit)
		return CUDA_ERROR_NOT_SUPPORTED;
	CUresult r = real_cuCtxPushCurrent_v2(ctx);
	if (r)
		return r;
	r = value ? real_cuCtxSetLimit(CU_LIMIT_STACK_SIZE, *value) : real_cuCtxGetLimit(old, CU_LIMIT_STACK_SIZE);
	CUcontext popped;
	real_cuCtxPopCurrent_v2(&popped);
	return r;
}

int ctx_stack_shrink(void)
{
	if (!shrink_wanted())
		return 0;
	CUcontext list[2 * MAX_CTX];
	/* sync_lock: no context is destroyed while its limit is changed. */
	pthread_mutex_lock(&sync_lock);
	pthread_mutex_lock(&lock);
	int n = nctx;
	memcpy(list, ctxs, (size_t)n * sizeof(*list));
	for (int d = 0; d < MAX_CTX; d++) {
		int i = 0;
		while (primary[d] && i < n && list[i] != primary[d])
			i++;
		if (primary[d] && i == n)
			list[n++] = primary[d];
	}
	pthread_mutex_unlock(&lock);
	const size_t zero = 0;
	nshrunk = 0;
	for (int i = 0; i < n; i++) {
		size_t old = 0;
		/* One whose limit cannot be read (a primary context the
		 * application released) or is 0 already is left as it is. */
		if (stack_limit(list[i], NULL, &old) != CUDA_SUCCESS || old == 0)
			continue;
		CUresult r = stack_limit(list[i], &zero, NULL);
		if (r) {
			tr_log("cannot lower a context's stack limit for the checkpoint (CUDA error %d): the driver "
			       "saves its local memory too",
			       (int)r);
			continue;
		}
		shrunk[nshrunk].ctx = list[i];
		shrunk[nshrunk++].limit = old;
	}
	int lowered = nshrunk;
	pthread_mutex_unlock(&sync_lock);
	return lowered;
}

void ctx_stack_restore(void)
{
	pthread_mutex_lock(&sync_lock);
	for (int i = 0; i < nshrunk; i++) {
		CUresult r = stack_limit(shrunk[i].ctx, &shrunk[i].limit, NULL);
		if (r)
			tr_log("cannot set a context's stack limit back to %zu bytes (CUDA error %d): the driver "
			       "grows it again for a kernel that needs it",
			       shrunk[i].limit, (int)r);
	}
	nshrunk = 0;
	pthread_mutex_unlock(&sync_lock);
}
