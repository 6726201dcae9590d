/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * simcuda: a software CUDA driver (libcuda.so.1) that emulates an NVIDIA GPU
 * in host memory, so that phos can be tested on machines without a GPU.
 *
 * Device pointers are host addresses: a kernel is a host function that reads
 * and writes them directly. Physical device memory is a memfd, so an fd
 * exported with cuMemExportToShareableHandle maps the same bytes in another
 * process.
 *
 * This header is simcuda's own contract, beyond the driver API of cuda.h.
 */
#ifndef SIMCUDA_H
#define SIMCUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What a host kernel is told about its launch. params is the driver's
 * kernelParams array (one pointer per argument), or NULL when the launch
 * passed a packed buffer through `extra`, which then is in arg_buffer. */
typedef struct simcuda_launch {
	unsigned grid[3];
	unsigned block[3];
	unsigned shared_bytes;
	void **params;
	const void *arg_buffer;
	size_t arg_buffer_size;
} simcuda_launch;

/* A kernel's host implementation: runs the whole grid, in any order. */
typedef void (*simcuda_kernel_fn)(const simcuda_launch *launch);

/* Registers fn as the host implementation of the kernel whose (mangled)
 * name is `name`, for every module that has it. Call it from a constructor,
 * or from a library named in SIMCUDA_KERNELS (a colon-separated list of
 * shared objects that simcuda loads at cuInit). A program may instead
 * export a function named simcuda_kernel_<name>, which simcuda finds with
 * dlsym. Returns 0, -EINVAL for a NULL or over-long name, -ENOMEM. */
int simcuda_register_kernel(const char *name, simcuda_kernel_fn fn);

/* Device bytes that the last cuCheckpointProcessCheckpoint of `pid` would
 * have had to copy to host memory: every physical allocation that process
 * held at that moment. A parked process reports 0. Returns 0, -ESRCH when
 * pid runs no simcuda driver, -ENODATA when it was never checkpointed. */
int simcuda_checkpoint_bytes(int pid, uint64_t *bytes);

/* The local memory of `pid`'s contexts that its last checkpoint saved
 * besides: each live context's CU_LIMIT_STACK_SIZE times 132 x 2048
 * threads, as on an H200. Returns as simcuda_checkpoint_bytes. */
int simcuda_checkpoint_local_bytes(int pid, uint64_t *bytes);

/* The 16 bytes of the UUID that device `ordinal` of process `pid` has now:
 * after a restore whose gpuPairs moved it, the new GPU's. Returns 0,
 * -ESRCH when pid runs no simcuda driver, -EINVAL for an ordinal it does
 * not have. */
int simcuda_device_uuid(int pid, int ordinal, unsigned char uuid[16]);

#ifdef __cplusplus
}
#endif
#endif
