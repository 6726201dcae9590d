/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Device memory mapped in the job's own context (internal to engine/):
 * the process's objects, imported from their fds, or new
 * allocations for a restore.
 */
#ifndef PHOS_ENGINE_MAPPING_H
#define PHOS_ENGINE_MAPPING_H

#include "driver-api.h"
#include "error.h"

/* One object mapped in phosfs's context. */
typedef struct mapping {
	CUdeviceptr va;
	size_t size; /* mapped */
	uint64_t len; /* copied: the object's size, up to size */
	CUmemGenericAllocationHandle h;
	int device;
} mapping;

/* Maps handle h of size bytes on device dev at a new address (m takes h).
 * Errors: -EIO (er names the call). */
int mapping_map(mapping *m, CUmemGenericAllocationHandle h, size_t size, int dev, perr *er);

/* Imports the object fd of size bytes on dev and maps it. Errors: -EIO. */
int mapping_import(mapping *m, int fd, size_t size, int dev, perr *er);

/* Which of n mappings cut into chunks holds global chunk g, where
 * first[i] counts the chunks of the mappings before i (ascending). */
int mapping_owner(const uint64_t *first, int n, uint64_t g);

/* Unmaps every mapping of maps[0..n), each with its device's context
 * current, and releases the handles. */
void mapping_unmap_all(mapping *maps, int n);

/* A copy thread's streams, one per device, made at first use. Start with
 * { .dev = -1 }; one thread only. */
typedef struct mapping_streams {
	CUstream s[PHOSIMG_DEVICES_MAX];
	int dev; /* whose context is current on this thread */
} mapping_streams;

/* Copies len bytes at src, device memory of dev, into host memory dst,
 * on this thread's stream of dev, and waits for it. Errors: -EINVAL, -EIO
 * (er names the call). */
int mapping_copy_out(mapping_streams *ss, int dev, void *dst, CUdeviceptr src, size_t len, perr *er);

/* Destroys the streams, each in its device's context. */
void mapping_streams_free(mapping_streams *ss);

#endif
