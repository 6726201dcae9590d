/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The first part of a recopy checkpoint (recopy.c): tracking writes
 * while the memory is copied into staging.
 */
#ifndef PHOS_ENGINE_RECOPY_H
#define PHOS_ENGINE_RECOPY_H

#include <stdatomic.h>
#include <stdint.h>

#include "cow.h"
#include "park.h"
#include "progress.h"

/* The objects handed over at the start of tracking, their TRACK tables,
 * and where in staging each chunk copied since then lies. */
typedef struct engine_recopy {
	engine_parked objs;
	engine_cow tables;
	uint32_t chunk;
	uint64_t *first;   /* per object, its first chunk; first[n]: all */
	uint64_t nchunks;
	uint32_t *slot;    /* per chunk: its staging slot, or UINT32_MAX */
	const cow_object **co; /* per object: its entry in its table */
	int *order;        /* the objects by (pid, VA) */
	_Atomic uint64_t copied; /* bytes copied while the processes ran */
	uint64_t copy_ns;
} engine_recopy;

/* Asks every traced process, one at a time, to quiesce within timeout_ms,
 * hand over its device memory and run on with a TRACK table. Errors: -EIO (a tracer refused; er says why),
 * -EPROTO, -ETIMEDOUT, -ENOMEM, those of engine_cow_prepare. After an
 * error, engine_recopy_free still ends what began. */
int engine_recopy_track(engine_recopy *r, const engine_traced *traced, int ntraced, uint32_t chunk, int timeout_ms,
			perr *er);
/* Copies every chunk not written since tracking began into staging, in
 * slots 0, 1, … (leaving a few free); what does not fit is left for the
 * final stall. Errors: -EIO (driver), -ECANCELED, -ENOMEM. */
int engine_recopy_copy(engine_recopy *r, void *staging, uint64_t staging_bytes, engine_progress *prog, perr *er);
/* After the final park: which tracked object is object o of pid (the
 * same VA, size, device and kind), or -1. */
int engine_recopy_find(const engine_recopy *r, const wire_object *o, pid_t pid);
/* The staging slot holding the bytes at off of tracked object k, still
 * good at the final park (copied, never written, not freed), or
 * UINT32_MAX. */
uint32_t engine_recopy_slot(const engine_recopy *r, int k, uint64_t off);
/* Ends tracking (if it was not) and frees everything. */
void engine_recopy_free(engine_recopy *r);

#endif
