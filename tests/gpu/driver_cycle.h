/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * What the driver-API tests of tests/gpu/ share: a CUDA error's name, and
 * the driver's checkpoint cycle of another process (lock, checkpoint,
 * restore, unlock), as cuda-checkpoint runs it.
 */
#ifndef PHOS_GPU_DRIVER_CYCLE_H
#define PHOS_GPU_DRIVER_CYCLE_H

#include <stdio.h>
#include <sys/types.h>

#include <cuda.h>

/* The name of r ("CUDA_SUCCESS" for none). */
static inline const char *err_name(CUresult r)
{
	const char *s = "?";
	if (!r)
		return "CUDA_SUCCESS";
	cuGetErrorName(r, &s);
	return s;
}

/* The driver's lock, checkpoint, restore and unlock of pid: NULL, or the
 * step that failed and its error, in buf (n bytes). A checkpoint that
 * failed is unlocked; a restore that failed leaves the process as the
 * driver left it. */
static inline const char *cycle(pid_t pid, char *buf, size_t n)
{
	CUcheckpointLockArgs la = { .timeoutMs = 10000 };
	CUresult r = cuCheckpointProcessLock((int)pid, &la);
	const char *step = "lock";
	if (!r) {
		r = cuCheckpointProcessCheckpoint((int)pid, NULL);
		step = "checkpoint";
		CUresult r2 = r ? cuCheckpointProcessUnlock((int)pid, NULL) : cuCheckpointProcessRestore((int)pid, NULL);
		if (!r && !r2)
			r2 = cuCheckpointProcessUnlock((int)pid, NULL);
		if (!r && r2) {
			r = r2;
			step = "restore or unlock";
		}
	}
	if (!r)
		return NULL;
	snprintf(buf, n, "%s: %s", step, err_name(r));
	return buf;
}

#endif
