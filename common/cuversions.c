/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Versions of driver entry points (cuversions.h). */
#include <stdio.h>
#include <string.h>

#include "cuversions.h"

typedef struct version_map {
	const char *name;
	int since;          /* CUDA version from which suffix applies */
	const char *suffix; /* appended to name */
} version_map;

/* The entry points whose newer version has a suffix. Entries of one name
 * are in ascending version order. */
static const version_map versions[] = {
	{ "cuDeviceTotalMem", 3020, "_v2" },
	{ "cuCtxCreate", 3020, "_v2" },
	{ "cuCtxCreate", 11040, "_v3" },
	{ "cuCtxCreate", 12050, "_v4" },
	{ "cuCtxDestroy", 4000, "_v2" },
	{ "cuCtxPopCurrent", 4000, "_v2" },
	{ "cuCtxPushCurrent", 4000, "_v2" },
	{ "cuMemGetInfo", 3020, "_v2" },
	{ "cuMemAlloc", 3020, "_v2" },
	{ "cuMemAllocPitch", 3020, "_v2" },
	{ "cuMemFree", 3020, "_v2" },
	{ "cuMemGetAddressRange", 3020, "_v2" },
	{ "cuIpcOpenMemHandle", 11000, "_v2" },
	{ "cuMemAllocHost", 3020, "_v2" },
	{ "cuMemHostRegister", 6050, "_v2" },
	{ "cuMemcpyHtoD", 3020, "_v2" },
	{ "cuMemcpyDtoH", 3020, "_v2" },
	{ "cuMemcpyDtoD", 3020, "_v2" },
	{ "cuMemcpyHtoDAsync", 3020, "_v2" },
	{ "cuMemcpyDtoHAsync", 3020, "_v2" },
	{ "cuMemcpyDtoDAsync", 3020, "_v2" },
	{ "cuMemsetD8", 3020, "_v2" },
	{ "cuMemsetD16", 3020, "_v2" },
	{ "cuMemsetD32", 3020, "_v2" },
	{ "cuMemsetD2D8", 3020, "_v2" },
	{ "cuMemsetD2D16", 3020, "_v2" },
	{ "cuMemsetD2D32", 3020, "_v2" },
	{ "cuMemcpy2D", 3020, "_v2" },
	{ "cuMemcpy2DUnaligned", 3020, "_v2" },
	{ "cuMemcpy2DAsync", 3020, "_v2" },
	{ "cuMemcpy3D", 3020, "_v2" },
	{ "cuMemcpy3DAsync", 3020, "_v2" },
	{ "cuMemcpyAtoD", 3020, "_v2" },
	{ "cuMemcpyBatchAsync", 13000, "_v2" },
	{ "cuMemcpy3DBatchAsync", 13000, "_v2" },
	{ "cuStreamWriteValue32", 11070, "_v2" },
	{ "cuStreamWriteValue64", 11070, "_v2" },
	{ "cuStreamWaitValue32", 11070, "_v2" },
	{ "cuStreamWaitValue64", 11070, "_v2" },
	{ "cuStreamBatchMemOp", 11070, "_v2" },
	{ "cuStreamDestroy", 4000, "_v2" },
	{ "cuEventDestroy", 4000, "_v2" },
	{ "cuDevicePrimaryCtxRelease", 11000, "_v2" },
	{ "cuDevicePrimaryCtxReset", 11000, "_v2" },
	{ "cuDevicePrimaryCtxSetFlags", 11000, "_v2" },
	{ "cuDeviceGetUuid", 11040, "_v2" },
	{ "cuGetProcAddress", 12000, "_v2" },
	{ "cuEventElapsedTime", 12080, "_v2" },
};

char *cuversion_symbol(const char *name, int cuda_version, char *buf, size_t n)
{
	const char *suffix = "";
	for (size_t i = 0; i < sizeof(versions) / sizeof(versions[0]); i++)
		if (strcmp(versions[i].name, name) == 0 && cuda_version >= versions[i].since)
			suffix = versions[i].suffix;
	int len = snprintf(buf, n, "%s%s", name, suffix);
	return len >= 0 && (size_t)len < n ? buf : NULL;
}
