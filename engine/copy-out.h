/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Copy out (copy-out.c): parked device memory into an image, through a
 * pool of pinned host staging.
 */
#ifndef PHOS_ENGINE_COPY_OUT_H
#define PHOS_ENGINE_COPY_OUT_H

#include <stdbool.h>
#include <stdint.h>

#include "cow.h"
#include "park.h"
#include "progress.h"
#include "recopy.h"

#define ENGINE_CHUNK (4u << 20)          /* default staging, CoW and image chunk size */
#define ENGINE_STAGING (4ull << 30)      /* default host staging pool */
#define ENGINE_WRITERS 8                 /* threads, and data files, writing an image */
#define ENGINE_COPY_GRACE_S 5            /* a cancelled copy's threads end within this, or are left */

typedef struct phosimg_writer phosimg_writer;

/* How a copy out runs. */
typedef struct engine_copy_opts {
	uint32_t chunk;        /* the image's chunk size */
	void *staging;         /* pinned host staging (engine_staging_alloc) */
	uint64_t staging_bytes;
	engine_cow *cow;       /* the processes run: take chunks by their CoW state */
	const engine_recopy *recopy; /* take the chunks it still holds from staging */
	uint64_t t1_ns;        /* CLOCK_MONOTONIC at t1, for prog->off_ns */
} engine_copy_opts;

/* Copies the parked objects into w (one image object each). Copiers move
 * chunks from the device into a pool of pinned host memory at the bus's
 * speed; writers drain the pool into the image at the store's. Objects
 * written most go first; with cow, a chunk a call waits for goes before
 * all, and a chunk is read from its shadow if the tracer made one, and
 * copiers pause while the application moves data to or from the host.
 * Once every chunk is off the GPU, the copy ends for the tracers.
 * Errors: -ECANCELED (prog->cancel), -EIO (driver), image errors. */
int engine_copy_out(const engine_parked *objs, phosimg_writer *w, const engine_copy_opts *o, engine_progress *prog,
		    perr *er);

/* The same in three steps, so that a stop checkpoint lets the process run
 * again once its memory is off the GPU: begin starts the threads (*out is
 * the copy; objs, w, the staging and the CoW tables must outlive it);
 * wait_off returns once every chunk is off the GPU (or the copy failed:
 * its error; with idle_s > 0, -ETIME once no chunk came off for that
 * long: the copy is stuck, and the caller cancels it); end, below. */
typedef struct engine_copy engine_copy;
int engine_copy_begin(const engine_parked *objs, phosimg_writer *w, const engine_copy_opts *o, engine_progress *prog,
		      engine_copy **out, perr *er);
int engine_copy_wait_off(engine_copy *c, int idle_s);
/* Waits until the objects marked WIRE_OBJ_SHARED (copied first) are off
 * the GPU: they are written where no CoW table sees it (by another
 * member, or by the CPU). Errors and idle_s as engine_copy_wait_off. */
int engine_copy_wait_shared(engine_copy *c, int idle_s);
/* The image's id of object k of the objects the copy was begun with. */
uint32_t engine_copy_object_id(const engine_copy *c, int k);
/* Ends a copy: waits for its threads, frees it and returns its error (er
 * says what it was). With idle_s > 0 the wait has deadlines: a copy in
 * which no chunk moved for idle_s is cancelled (-ETIMEDOUT), and the
 * threads of a cancelled one have ENGINE_COPY_GRACE_S to end; if they do
 * not, it returns -ETIMEDOUT and leaves them, and what they use, running
 * (engine_copy_abandoned). */
int engine_copy_end(engine_copy *c, int idle_s, perr *er);
/* Whether engine_copy_end left a copy's threads running: the process
 * should end without freeing what they use. */
bool engine_copy_abandoned(void);
/* Stops a copy that is no longer wanted (the checkpoint failed under
 * it): no more chunks are taken or written, and engine_copy_end returns
 * once each thread has finished the chunk it was on (within
 * ENGINE_COPY_GRACE_S, given an idle_s), with -ECANCELED unless the copy
 * had failed before. */
void engine_copy_cancel(engine_copy *c);
/* The copy's error so far (0: none), without waiting. */
int engine_copy_error(engine_copy *c);

/* Pinned host memory for copies. */
typedef struct engine_staging {
	void *buf;
	uint64_t bytes;
	bool registered; /* the memfd's pages, registered; else the driver's own */
	uint64_t pin_ns; /* how long making it took */
} engine_staging;

/* Pins up to want bytes (less if the host refuses that much, but at least
 * 4 chunks) for copies: the pages of the staging memfd fd that phosfs made
 * once (mapped and registered with the driver), or where fd is -1 or
 * cannot be registered, new pinned memory. Errors: -ENOMEM. */
int engine_staging_alloc(engine_staging *s, int fd, uint64_t want, uint32_t chunk, perr *er);
/* Unpins and unmaps it (s is emptied). */
void engine_staging_free(engine_staging *s);

#endif
