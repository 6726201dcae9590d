/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The CUDA driver as phosfs uses it: loaded with dlopen at the first job,
 * so that phosfs starts (and shows processes) where there is no driver.
 * phosfs holds the primary context of each device it touches.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "driver-api.h"

/* Set once under once; read-only afterwards. */
struct driver_api cu;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int load_error; /* 0, -ENOSYS or -EIO */
static char load_msg[256];

/* Guards ctxs. */
static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static CUcontext ctxs[64];

#define STR2(x) #x
#define STR(x) STR2(x) /* the name after cuda.h's #define, e.g. cuMemcpyDtoH_v2 */
#define LOAD(h, name)                                                                                        \
	do {                                                                                                 \
		*(void **)&cu.name = dlsym(h, STR(name));                                                    \
		if (!cu.name) {                                                                              \
			snprintf(load_msg, sizeof(load_msg), "the CUDA driver lacks %s", STR(name));         \
			load_error = -ENOSYS;                                                                \
			return;                                                                              \
		}                                                                                            \
	} while (0)

static void load(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		snprintf(load_msg, sizeof(load_msg), "no CUDA driver (libcuda.so.1): %s", dlerror());
		load_error = -ENOSYS;
		return;
	}
	LOAD(h, cuInit);
	LOAD(h, cuGetErrorString);
	LOAD(h, cuDeviceGet);
	LOAD(h, cuDeviceGetCount);
	LOAD(h, cuDeviceGetName);
	LOAD(h, cuDeviceTotalMem);
	LOAD(h, cuDeviceGetUuid);
	LOAD(h, cuDeviceGetAttribute);
	LOAD(h, cuDevicePrimaryCtxRetain);
	LOAD(h, cuCtxSetCurrent);
	LOAD(h, cuMemGetAllocationGranularity);
	LOAD(h, cuMemGetInfo);
	LOAD(h, cuMemCreate);
	LOAD(h, cuMemRelease);
	LOAD(h, cuMemAddressReserve);
	LOAD(h, cuMemAddressFree);
	LOAD(h, cuMemMap);
	LOAD(h, cuMemUnmap);
	LOAD(h, cuMemSetAccess);
	LOAD(h, cuMemExportToShareableHandle);
	LOAD(h, cuMemImportFromShareableHandle);
	LOAD(h, cuMemAllocHost);
	LOAD(h, cuMemFreeHost);
	LOAD(h, cuMemHostRegister);
	LOAD(h, cuMemHostUnregister);
	LOAD(h, cuMemcpyDtoHAsync);
	LOAD(h, cuMemcpyHtoDAsync);
	LOAD(h, cuStreamCreate);
	LOAD(h, cuStreamDestroy);
	LOAD(h, cuStreamSynchronize);
	LOAD(h, cuEventCreate);
	LOAD(h, cuEventDestroy);
	LOAD(h, cuEventRecord);
	LOAD(h, cuEventSynchronize);
	LOAD(h, cuEventQuery);
	LOAD(h, cuCheckpointProcessGetState);
	LOAD(h, cuCheckpointProcessLock);
	LOAD(h, cuCheckpointProcessCheckpoint);
	LOAD(h, cuCheckpointProcessRestore);
	LOAD(h, cuCheckpointProcessUnlock);
	CUresult r = cu.cuInit(0);
	if (r) {
		snprintf(load_msg, sizeof(load_msg), "cuInit failed: %s", driver_error(r));
		load_error = -EIO;
	}
	/* The handle stays open for the life of phosfs. */
}

const char *driver_error(CUresult r)
{
	const char *s = NULL;
	if (cu.cuGetErrorString && cu.cuGetErrorString(r, &s) == CUDA_SUCCESS && s)
		return s;
	return "unknown CUDA error";
}

int driver_fail(CUresult r, perr *er, const char *what)
{
	return pr_err(er, -EIO, "%s failed: %s (CUDA error %d)", what, driver_error(r), (int)r);
}

int driver_use(int device, perr *er)
{
	if (device < 0 || device >= 64)
		return pr_err(er, -EINVAL, "device %d is out of range", device);
	pthread_mutex_lock(&ctx_lock);
	CUresult r = CUDA_SUCCESS;
	if (!ctxs[device]) {
		CUdevice d;
		r = cu.cuDeviceGet(&d, device);
		if (!r)
			r = cu.cuDevicePrimaryCtxRetain(&ctxs[device], d);
	}
	CUcontext c = ctxs[device];
	pthread_mutex_unlock(&ctx_lock);
	if (!r)
		r = cu.cuCtxSetCurrent(c);
	return r ? driver_fail(r, er, "making a context on the device") : 0;
}

int driver_load(perr *er)
{
	pthread_once(&once, load);
	return load_error ? pr_err(er, load_error, "%s", load_msg) : 0;
}

int driver_open(perr *er)
{
	int e = driver_load(er);
	return e ? e : driver_use(0, er);
}

int driver_process_state(pid_t pid, int *state)
{
	CUprocessState s;
	if (cu.cuCheckpointProcessGetState((int)pid, &s) != CUDA_SUCCESS)
		return -ESRCH;
	*state = s == CU_PROCESS_STATE_RUNNING	     ? DRIVER_RUNNING
		 : s == CU_PROCESS_STATE_LOCKED	     ? DRIVER_LOCKED
		 : s == CU_PROCESS_STATE_CHECKPOINTED ? DRIVER_CHECKPOINTED
						     : DRIVER_FAILED;
	return 0;
}

int driver_lock(pid_t pid, unsigned timeout_ms, perr *er)
{
	CUcheckpointLockArgs args = { .timeoutMs = timeout_ms };
	CUresult r = cu.cuCheckpointProcessLock((int)pid, &args);
	/* The r580 driver says NOT_READY when timeoutMs passed (measured:
	 * tests/gpu/phos_blocked_processes_fail_in_time_on_gpu.sh). */
	if (r == CUDA_ERROR_NOT_READY || r == CUDA_ERROR_TIMEOUT)
		return pr_err(er, -ETIMEDOUT,
			      "the driver could not lock process %d within %u ms: a call in flight or its device work "
			      "did not finish (a kernel waiting for another process?)",
			      (int)pid, timeout_ms);
	return r ? pr_err(er, -EIO, "driver lock of process %d failed: %s (CUDA error %d)", (int)pid, driver_error(r),
			  (int)r)
		 : 0;
}

int driver_checkpoint(pid_t pid, perr *er)
{
	CUresult r = cu.cuCheckpointProcessCheckpoint((int)pid, NULL);
	/* Measured with driver 580 on an H200: a process with managed memory
	 * (tests/gpu/phos_matrix_managed_on_gpu.sh). */
	if (r == CUDA_ERROR_NOT_SUPPORTED)
		return pr_err(er, -EOPNOTSUPP,
			      "the driver cannot checkpoint process %d (CUDA error %d, operation not supported), as it "
			      "cannot any process that uses managed memory (cuMemAllocManaged)",
			      (int)pid, (int)r);
	return r ? driver_fail(r, er, "driver checkpoint") : 0;
}

int engine_devmap_to(const engine_devmap *map, uint32_t k)
{
	return map && k < map->n ? map->to[k] : (int)k;
}

int driver_restore(pid_t pid, const engine_devmap *map, perr *er)
{
	CUcheckpointGpuPair pairs[PHOSIMG_DEVICES_MAX];
	CUcheckpointRestoreArgs args;
	memset(&args, 0, sizeof(args));
	bool with = map && map->pairs;
	for (uint32_t i = 0; with && i < map->npairs; i++) {
		memcpy(pairs[i].oldUuid.bytes, map->old[i], 16);
		memcpy(pairs[i].newUuid.bytes, map->now[i], 16);
	}
	args.gpuPairs = pairs;
	args.gpuPairsCount = with ? map->npairs : 0;
	CUresult r = cu.cuCheckpointProcessRestore((int)pid, with ? &args : NULL);
	return r ? driver_fail(r, er, with ? "driver restore onto the GPUs of gpuPairs" : "driver restore") : 0;
}

int driver_unlock(pid_t pid, perr *er)
{
	CUresult r = cu.cuCheckpointProcessUnlock((int)pid, NULL);
	return r ? driver_fail(r, er, "driver unlock") : 0;
}

int driver_devices(phosimg_device *out, uint32_t cap, uint32_t *n)
{
	int count = 0;
	*n = 0;
	if (cu.cuDeviceGetCount(&count))
		return -EIO;
	for (int i = 0; i < count && (uint32_t)i < cap; i++) {
		CUdevice d;
		phosimg_device *o = &out[*n];
		memset(o, 0, sizeof(*o));
		int maj = 0, min = 0;
		size_t total = 0;
		CUuuid u;
		if (cu.cuDeviceGet(&d, i) || cu.cuDeviceGetName(o->name, sizeof(o->name), d) ||
		    cu.cuDeviceTotalMem(&total, d) || cu.cuDeviceGetUuid(&u, d) ||
		    cu.cuDeviceGetAttribute(&maj, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d) ||
		    cu.cuDeviceGetAttribute(&min, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d))
			return -EIO;
		o->ordinal = (uint32_t)i;
		o->cc_major = (uint16_t)maj;
		o->cc_minor = (uint16_t)min;
		o->total_mem = total;
		memcpy(o->uuid, u.bytes, 16);
		(*n)++;
	}
	return 0;
}
