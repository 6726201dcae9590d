/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The CUDA driver as jobs use it (driver.c): loaded with dlopen at the
 * first job, the process-checkpoint API on other processes, and where a
 * restore puts an image's GPUs. driver-api.h holds the entry points
 * themselves, for the engine's own files.
 */
#ifndef PHOS_ENGINE_DRIVER_H
#define PHOS_ENGINE_DRIVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../image-format/phosimg.h"
#include "error.h"

/* Loads the driver library and runs cuInit, once per process (what
 * driver_open does before it makes a context): a job started ahead does
 * it while it waits. Errors: -ENOSYS (no driver), -EIO (cuInit). */
int driver_load(perr *er);
/* Loads libcuda.so.1 and makes a context current on this thread.
 * Errors: -ENOSYS (no driver), -EIO (cuInit or the context failed). */
int driver_open(perr *er);

/* A CUDA process's state under the driver's checkpoint API. */
enum driver_state {
	DRIVER_RUNNING,
	DRIVER_LOCKED,
	DRIVER_CHECKPOINTED,
	DRIVER_FAILED,
};

/* Whether pid is a CUDA process the driver can checkpoint, and its state
 * (enum driver_state) in *state. Returns 0, -ESRCH (no CUDA state there). */
int driver_process_state(pid_t pid, int *state);

/* Where a restore puts an image's GPUs: device k of the image (the
 * process's ordinal k) goes to this machine's ordinal to[k]. With pairs,
 * the driver is told (gpuPairs: old[i] -> now[i] by UUID, npairs of them);
 * without, every GPU stays where it was. */
typedef struct engine_devmap {
	uint32_t n;
	int to[PHOSIMG_DEVICES_MAX];
	bool pairs;
	uint32_t npairs;
	uint8_t old[PHOSIMG_DEVICES_MAX][16], now[PHOSIMG_DEVICES_MAX][16];
} engine_devmap;

/* The device an image's device k goes to under map (NULL: k itself). */
int engine_devmap_to(const engine_devmap *map, uint32_t k);

/* cuCheckpointProcessLock / Checkpoint / Restore / Unlock on pid; restore
 * passes map's gpuPairs when it has them (map may be NULL).
 * Errors: -EIO with er naming the call and the driver's message;
 * driver_lock also -ETIMEDOUT (pid's work did not end in timeout_ms);
 * driver_checkpoint also -EOPNOTSUPP (the driver does not checkpoint
 * such a process: one with managed memory). */
int driver_lock(pid_t pid, unsigned timeout_ms, perr *er);
int driver_checkpoint(pid_t pid, perr *er);
int driver_restore(pid_t pid, const engine_devmap *map, perr *er);
int driver_unlock(pid_t pid, perr *er);

/* Makes device's primary context current on this thread (after
 * driver_open). Errors: -EINVAL, -EIO. */
int driver_use(int device, perr *er);

/* Describes up to cap devices. Errors: -EIO. */
int driver_devices(phosimg_device *out, uint32_t cap, uint32_t *n);

#endif
