/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The job's side of the tables a copy-on-write checkpoint, a recopy and
 * a lazy restore share with the tracer (cow.c; the layout is
 * common/cow.h), and the CoW shadow pool.
 */
#ifndef PHOS_ENGINE_COW_H
#define PHOS_ENGINE_COW_H

#include <stdatomic.h>
#include <stdint.h>

#include "../common/cow.h"
#include "park.h"
#include "progress.h"

/* The CoW shadow pool, per process, by default: as large as the
 * process's memory on its device, as far as the device's free memory
 * allows beyond engine_shadow_reserve. */
#define ENGINE_SHADOW_POOL_AUTO UINT64_MAX
/* What an automatic pool leaves free of a device of total bytes, for what
 * the application and the driver allocate while the copy runs: 1/16 of
 * it, at least 1 GiB, at most a quarter. */
static inline uint64_t engine_shadow_reserve(uint64_t total)
{
	uint64_t r = total / 16 > (1ull << 30) ? total / 16 : 1ull << 30;
	return r < total / 4 ? r : total / 4;
}

/* One traced process's table, and its shadow pool. */
typedef struct engine_cow_member {
	pid_t pid;
	cow_header *t; /* mapped */
	uint64_t bytes;
	int fd;        /* the table's memfd */
	uint32_t pool_device;
	uint64_t pool_bytes; /* 0: no pool (the GPU had no room) */
	int pool_fd;
	uint64_t pool_h;     /* CUmemGenericAllocationHandle */
	uint64_t pool_va;    /* the pool in the job's context */
} engine_cow_member;

typedef struct engine_cow {
	engine_cow_member *m;
	int n;
	uint32_t chunk;
	int *table_of;      /* per parked object: its member */
	uint64_t *first_of; /* per parked object: its first chunk in that table */
} engine_cow;

/* Makes a table (enum cow_mode) for each process of all, and a shadow
 * pool of up to pool bytes (0: none; ENGINE_SHADOW_POOL_AUTO: as large as
 * the device's free memory allows) on the device where it has most
 * memory; the pool's size is in each member's pool_bytes. A LAZY table
 * has one state word per object (chunk unused).
 * Errors:
 * -ENOMEM, errno of memfd_create, -EIO (the driver; er says which call). */
int engine_cow_prepare(engine_cow *c, const engine_parked *all, uint32_t chunk, uint64_t pool, uint32_t mode,
		       perr *er);
/* pid's table, or NULL. */
const engine_cow_member *engine_cow_of(const engine_cow *c, pid_t pid);
/* The state word of chunk `chunk` of parked object k, and its table. */
_Atomic uint32_t *engine_cow_chunk(const engine_cow *c, int k, uint64_t chunk, cow_header **t);
/* Tells waiting tracers that a chunk moved. */
void engine_cow_wake(cow_header *t);
/* Ends the copy for every tracer: they stop protecting and drop the
 * table and the pool. */
void engine_cow_end(engine_cow *c);
/* Sums the tracers' counters into p, and the pools' bytes. */
void engine_cow_stats(const engine_cow *c, engine_progress *p);
/* Ends the copy (if it was not) and frees everything. */
void engine_cow_free(engine_cow *c);

#endif
