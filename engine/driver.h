/*
 * The engine's view of the CUDA driver (internal to engine/ and
 * restore/): the entry points it uses, loaded by driver_open.
 */
#ifndef PHOS_ENGINE_DRIVER_H
#define PHOS_ENGINE_DRIVER_H

#include <cuda.h>

#include "../image-format/phosimg.h"
#include "engine.h"

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

/* Fills err with "<what> failed: <message>"; returns -EIO. */
int driver_fail(CUresult r, char *err, size_t errlen, const char *what);

/* Makes device's primary context current on this thread (after
 * driver_open). Errors: -EINVAL, -EIO. */
int driver_use(int device, char *err, size_t errlen);

/* Describes up to cap devices. Errors: -EIO. */
int driver_devices(phosimg_device *out, uint32_t cap, uint32_t *n);

#endif
