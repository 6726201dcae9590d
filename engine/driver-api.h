/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The CUDA driver's entry points the engine uses, loaded by driver_open
 * (internal to engine/; driver.h is the contract).
 */
#ifndef PHOS_ENGINE_DRIVER_API_H
#define PHOS_ENGINE_DRIVER_API_H

#include <cuda.h>

#include "driver.h"
#include "progress.h"

#define DRV(name) __typeof__(&name) name

/* Filled by driver_open; read-only afterwards. */
struct driver_api {
	DRV(cuInit);
	DRV(cuGetErrorString);
	DRV(cuDeviceGet);
	DRV(cuDeviceGetCount);
	DRV(cuDeviceGetName);
	DRV(cuDeviceTotalMem);
	DRV(cuDeviceGetUuid);
	DRV(cuDeviceGetAttribute);
	DRV(cuDevicePrimaryCtxRetain);
	DRV(cuCtxSetCurrent);
	DRV(cuMemGetAllocationGranularity);
	DRV(cuMemGetInfo);
	DRV(cuMemCreate);
	DRV(cuMemRelease);
	DRV(cuMemAddressReserve);
	DRV(cuMemAddressFree);
	DRV(cuMemMap);
	DRV(cuMemUnmap);
	DRV(cuMemSetAccess);
	DRV(cuMemExportToShareableHandle);
	DRV(cuMemImportFromShareableHandle);
	DRV(cuMemAllocHost);
	DRV(cuMemFreeHost);
	DRV(cuMemHostRegister);
	DRV(cuMemHostUnregister);
	DRV(cuMemcpyDtoHAsync);
	DRV(cuMemcpyHtoDAsync);
	DRV(cuStreamCreate);
	DRV(cuStreamDestroy);
	DRV(cuStreamSynchronize);
	DRV(cuEventCreate);
	DRV(cuEventDestroy);
	DRV(cuEventRecord);
	DRV(cuEventSynchronize);
	DRV(cuEventQuery);
	DRV(cuCheckpointProcessGetState);
	DRV(cuCheckpointProcessLock);
	DRV(cuCheckpointProcessCheckpoint);
	DRV(cuCheckpointProcessRestore);
	DRV(cuCheckpointProcessUnlock);
};
extern struct driver_api cu;

/* The driver's message for r. */
const char *driver_error(CUresult r);

/* Says in er "<what> failed: <message>"; returns -EIO. */
int driver_fail(CUresult r, perr *er, const char *what);

#endif
