/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The fill (fill.c): an image's device memory back into new allocations,
 * for a restore.
 */
#ifndef PHOS_ENGINE_FILL_H
#define PHOS_ENGINE_FILL_H

#include <stdbool.h>
#include <stdint.h>

#include "../common/wire.h"
#include "driver.h"
#include "park.h"
#include "progress.h"

#define ENGINE_FILL_THREADS 16           /* threads that fill device memory on restore, at most one a usable CPU */
#define ENGINE_FILL_THREADS_MAX 64

typedef struct phosimg phosimg;

/* Makes a new allocation for every object of img (those with sel[k]
 * set; sel NULL: all), on the device map sends its device to (NULL: the
 * same ordinal), fills it from the image, and returns the records, fds
 * and pids in *out, ready for unpark; the records keep the process's own
 * device ordinals. Errors: -ENOMEM, -EIO (the driver), -ECANCELED, the
 * reader's (a chunk that does not check: -EBADMSG); er says which. */
int engine_copy_in(phosimg *img, const engine_devmap *map, const bool *sel, int threads, engine_parked *out,
		   engine_progress *prog, perr *er);

/* Threads that fill device memory from an image, one object or device at
 * a time; they count the bytes in prog->done. */
typedef struct engine_filler engine_filler;
/* Starts `threads` of them (0: ENGINE_FILL_THREADS, or one for each CPU
 * this process may run on where there are fewer; at most
 * ENGINE_FILL_THREADS_MAX), driver_open first; img must outlive them.
 * Errors: -ENOMEM, errno of pthread_create. */
int engine_filler_start(phosimg *img, int threads, engine_progress *prog, engine_filler **out, perr *er);
/* Makes new memory for image object k on device dev, fills it, and
 * returns its record (as the tracer knows it) and an fd that holds it.
 * Errors: as engine_copy_in. */
int engine_fill_object(engine_filler *f, uint32_t k, int dev, wire_object *rec, int *fd, perr *er);
/* Stops the threads and frees f (NULL: nothing). */
void engine_filler_stop(engine_filler *f);
/* How the fill's workers run, for bench/fill to try other ways; set it
 * before a filler starts. Zero fields keep the defaults. */
typedef struct engine_fill_tuning {
	int pieces;    /* pinned pieces in a worker's ring, per device (default 2, at most 16) */
	int piece_kib; /* KiB of each (default 2048, at most 16384) */
	bool spin;     /* wait for a copy by polling, not sleeping */
} engine_fill_tuning;
extern engine_fill_tuning engine_fill_tune;

#endif
