/*
 * The steps eager and lazy restores share (internal to restore/).
 */
#ifndef PHOS_RESTORE_STEPS_H
#define PHOS_RESTORE_STEPS_H

#include "restore.h"

typedef struct restore_ctx {
	phosimg *img;          /* open until restore_end */
	const phosimg_info *in;
	phosimg_member *m;     /* the processes of the image */
	uint32_t n;
	engine_devmap map;     /* where its GPUs go */
	bool restored;         /* CRIU brought the tree back */
} restore_ctx;

/* Opens the image (its structure is checked), waits for its pids to be
 * free, opens the driver and places its GPUs (restore_devices). Errors:
 * phosimg_open's (a bad image), -EBUSY (a pid is taken), -ENOMEM,
 * driver_open's and restore_devices' errors; nothing was started. */
int restore_begin(const restore_args *a, restore_ctx *c, char *err, size_t errlen);

/* Restores the tree with CRIU, then restores and unlocks each CUDA
 * process in the driver. Errors: -EIO (err says which step). */
int restore_tree(const restore_args *a, restore_ctx *c, char *err, size_t errlen);

/* Member i's tracer control thread, for unpark; with mine its objects.
 * Returns the tid, 0 when it needs none (untraced, no memory), or
 * -EPROTO when the image holds memory of a process without a tracer
 * (err says so). */
pid_t restore_tracer_of(restore_ctx *c, uint32_t i, const engine_parked *mine, char *err, size_t errlen);

/* After the restore (e: its result): a tree half restored is killed,
 * since half restored is worse than not restored (the image stays); the
 * image is closed and c freed. */
void restore_end(restore_ctx *c, int e);

#endif
