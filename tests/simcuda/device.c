/* SPDX-License-Identifier: GPL-2.0-only */
/* Initialisation, version, device queries and error strings. Each device
 * looks like an H200 (compute capability 9.0, 132 SMs, 141 GiB).
 *
 * The machine has $SIMCUDA_DEVICES devices (1 to SC_DEVICE_MAX; default
 * 1). $SIMCUDA_DEVICE_NAMES (colon-separated) names them, to make a
 * machine of mixed chips, and $SIMCUDA_MACHINE (0 to 255) goes into
 * their UUIDs, to make another machine's GPUs. $SIMCUDA_MEMORY_MIB gives
 * each device that much memory instead of 141 GiB. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static atomic_bool initialized;

/* As on a GPU, a child forked from a CUDA process cannot use CUDA: its
 * device memory mappings are disabled and the driver answers "not
 * initialized" (CUDA is not fork-safe). Its open files stay. */
static void fork_child(void)
{
	atomic_store(&initialized, false);
	sc_mem_fork_child();
	sc_checkpoint_fork_child();
}

#define SC_DEFAULT_NAME "NVIDIA H200 (simcuda)"

/* This process's devices: set at cuInit, moved by a restore with gpuPairs
 * (checkpoint.c's control thread, while the API gate is closed). */
static struct {
	CUuuid uuid;
	char name[64];
} devs[SC_DEVICE_MAX];
static int ndevs = 1;

static void machine_devices(void)
{
	/* A fixed, recognisable UUID per machine and ordinal. */
	static const unsigned char base[16] = { 0x51, 0x6d, 0xc0, 0xda, 0x48, 0x20, 0x40, 0x00,
						0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00 };
	const char *n = getenv("SIMCUDA_DEVICES"), *names = getenv("SIMCUDA_DEVICE_NAMES");
	const char *m = getenv("SIMCUDA_MACHINE");
	int k = n && *n ? atoi(n) : 1;
	ndevs = k < 1 ? 1 : k > SC_DEVICE_MAX ? SC_DEVICE_MAX : k;
	for (int i = 0; i < ndevs; i++) {
		memcpy(devs[i].uuid.bytes, base, sizeof(base));
		devs[i].uuid.bytes[14] = (char)(m ? atoi(m) : 0);
		devs[i].uuid.bytes[15] = (char)i;
		size_t len = names ? strcspn(names, ":") : 0;
		if (len)
			snprintf(devs[i].name, sizeof(devs[i].name), "%.*s", (int)len, names);
		else
			snprintf(devs[i].name, sizeof(devs[i].name), "%s", SC_DEFAULT_NAME);
		names = names ? names + len + (names[len] == ':') : NULL;
	}
}

uint64_t sc_total_mem(void)
{
	static _Atomic uint64_t total;
	uint64_t t = atomic_load(&total);
	if (!t) {
		const char *m = getenv("SIMCUDA_MEMORY_MIB");
		unsigned long long mib = m && *m ? strtoull(m, NULL, 10) : 0;
		t = (mib ? mib : 143771ull) << 20;
		atomic_store(&total, t);
	}
	return t;
}

int sc_device_count(void)
{
	return ndevs;
}

const char *sc_device_name(CUdevice dev)
{
	return devs[dev].name;
}

void sc_device_uuid(CUdevice dev, CUuuid *u)
{
	*u = devs[dev].uuid;
}

int sc_device_of_uuid(const CUuuid *u)
{
	for (int i = 0; i < ndevs; i++)
		if (!memcmp(devs[i].uuid.bytes, u->bytes, sizeof(u->bytes)))
			return i;
	return -1;
}

void sc_device_move(CUdevice dev, const CUuuid *uuid, const char *name)
{
	devs[dev].uuid = *uuid;
	snprintf(devs[dev].name, sizeof(devs[dev].name), "%s", name);
}

static void do_init(void)
{
	machine_devices();
	sc_kernels_load_plugins();
	sc_checkpoint_start_server();
	pthread_atfork(sc_mem_fork_prepare, sc_mem_fork_parent, fork_child);
	atomic_store(&initialized, true);
}

bool sc_initialized(void)
{
	return atomic_load(&initialized);
}

CUresult sc_check_init(void)
{
	return sc_initialized() ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult sc_check_device(CUdevice dev)
{
	if (!sc_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	return (dev >= 0 && dev < ndevs) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

SC_EXPORT CUresult cuInit(unsigned int flags)
{
	if (flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_once(&init_once, do_init);
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuDriverGetVersion(int *version)
{
	if (!version)
		return CUDA_ERROR_INVALID_VALUE;
	*version = SC_DRIVER_VERSION;
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuDeviceGetCount(int *count)
{
	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = sc_check_init();
	if (r)
		return r;
	*count = ndevs;
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuDeviceGet(CUdevice *dev, int ordinal)
{
	if (!dev)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = sc_check_device(ordinal);
	if (r)
		return r;
	*dev = ordinal;
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
	if (!name || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = sc_check_device(dev);
	if (r)
		return r;
	snprintf(name, (size_t)len, "%s", sc_device_name(dev));
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
	if (!uuid)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = sc_check_device(dev);
	if (r)
		return r;
	sc_device_uuid(dev, uuid);
	return CUDA_SUCCESS;
}

SC_LEGACY(sc_cuDeviceGetUuid_v1, "cuDeviceGetUuid", (CUuuid *uuid, CUdevice dev))
{
	return cuDeviceGetUuid(uuid, dev);
}

SC_EXPORT CUresult cuDeviceTotalMem(size_t *bytes, CUdevice dev)
{
	if (!bytes)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = sc_check_device(dev);
	if (r)
		return r;
	*bytes = SC_TOTAL_MEM;
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuDeviceGetPCIBusId(char *id, int len, CUdevice dev)
{
	if (!id || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = sc_check_device(dev);
	if (r)
		return r;
	snprintf(id, (size_t)len, "0000:%02x:00.0", 0x18 + dev);
	return CUDA_SUCCESS;
}

struct attr {
	CUdevice_attribute attr;
	int value;
};

/* The attributes a runtime, a framework or phos asks for; an H200's values. */
static const struct attr attrs[] = {
	{ CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024 },
	{ CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, 1024 },
	{ CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, 1024 },
	{ CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, 64 },
	{ CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, 2147483647 },
	{ CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, 65535 },
	{ CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, 65535 },
	{ CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, 49152 },
	{ CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY, 65536 },
	{ CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32 },
	{ CU_DEVICE_ATTRIBUTE_MAX_PITCH, 2147483647 },
	{ CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, 65536 },
	{ CU_DEVICE_ATTRIBUTE_CLOCK_RATE, 1980000 },
	{ CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, 512 },
	{ CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 132 },
	{ CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT, 0 },
	{ CU_DEVICE_ATTRIBUTE_INTEGRATED, 0 },
	{ CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 1 },
	{ CU_DEVICE_ATTRIBUTE_COMPUTE_MODE, CU_COMPUTEMODE_DEFAULT },
	{ CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS, 1 },
	{ CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, 1 },
	{ CU_DEVICE_ATTRIBUTE_ECC_ENABLED, 1 },
	{ CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 0x18 },
	{ CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, 0 },
	{ CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, 0 },
	{ CU_DEVICE_ATTRIBUTE_TCC_DRIVER, 0 },
	{ CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, 3201000 },
	{ CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, 6144 },
	{ CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, 60 << 20 },
	{ CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, 2048 },
	{ CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, 3 },
	{ CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1 },
	{ CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 9 },
	{ CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0 },
	{ CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED, 1 },
	{ CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED, 1 },
	{ CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED, 1 },
	{ CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, 233472 },
	{ CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, 65536 },
	{ CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, 1 },
	{ CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD, 0 },
	{ CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, 1 },
	{ CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS, 0 },
	{ CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED, 1 },
	{ CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, 1 },
	{ CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 232448 },
	{ CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, 32 },
	{ CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1 },
	{ CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 1 },
	{ CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_HANDLE_SUPPORTED, 0 },
	{ CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED, 0 },
	{ CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 1 },
	{ CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED, 0 },
	{ CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH, 1 },
	{ CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR },
};

SC_EXPORT CUresult cuDeviceGetAttribute(int *value, CUdevice_attribute attr, CUdevice dev)
{
	if (!value)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = sc_check_device(dev);
	if (r)
		return r;
	for (size_t i = 0; i < sizeof(attrs) / sizeof(attrs[0]); i++) {
		if (attrs[i].attr == attr) {
			*value = attrs[i].value;
			return CUDA_SUCCESS;
		}
	}
	/* Unknown attributes read as 0, as for features the device lacks. */
	if ((int)attr <= 0 || attr >= CU_DEVICE_ATTRIBUTE_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	*value = 0;
	return CUDA_SUCCESS;
}

SC_EXPORT CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice dev)
{
	if (!major || !minor)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = sc_check_device(dev);
	if (r)
		return r;
	*major = 9;
	*minor = 0;
	return CUDA_SUCCESS;
}

struct err {
	CUresult code;
	const char *name;
	const char *text;
};

static const struct err errs[] = {
	{ CUDA_SUCCESS, "CUDA_SUCCESS", "no error" },
	{ CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument" },
	{ CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory" },
	{ CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error" },
	{ CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down" },
	{ CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected" },
	{ CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal" },
	{ CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid" },
	{ CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context" },
	{ CUDA_ERROR_ALREADY_MAPPED, "CUDA_ERROR_ALREADY_MAPPED", "resource already mapped" },
	{ CUDA_ERROR_NO_BINARY_FOR_GPU, "CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device" },
	{ CUDA_ERROR_FILE_NOT_FOUND, "CUDA_ERROR_FILE_NOT_FOUND", "file not found" },
	{ CUDA_ERROR_OPERATING_SYSTEM, "CUDA_ERROR_OPERATING_SYSTEM", "OS call failed or operation not supported on this OS" },
	{ CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle" },
	{ CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found" },
	{ CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready" },
	{ CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered" },
	{ CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure" },
	{ CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted" },
	{ CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported" },
	{ CUDA_ERROR_TIMEOUT, "CUDA_ERROR_TIMEOUT", "timeout occurred" },
	{ CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state" },
	{ CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error" },
};

static const struct err *find_err(CUresult code)
{
	for (size_t i = 0; i < sizeof(errs) / sizeof(errs[0]); i++)
		if (errs[i].code == code)
			return &errs[i];
	return NULL;
}

SC_EXPORT CUresult cuGetErrorName(CUresult error, const char **str)
{
	const struct err *e = find_err(error);
	if (!str)
		return CUDA_ERROR_INVALID_VALUE;
	*str = e ? e->name : NULL;
	return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SC_EXPORT CUresult cuGetErrorString(CUresult error, const char **str)
{
	const struct err *e = find_err(error);
	if (!str)
		return CUDA_ERROR_INVALID_VALUE;
	*str = e ? e->text : NULL;
	return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
