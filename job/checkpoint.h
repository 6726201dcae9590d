/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A checkpoint (checkpoint.c): the stall stop, cow and recopy share
 * (stall.c), and each one's own short sequence (doc/ARCHITECTURE.md, "The
 * checkpoint protocols").
 */
#ifndef PHOS_JOB_CHECKPOINT_H
#define PHOS_JOB_CHECKPOINT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "../engine/engine.h"

typedef struct checkpoint_args {
	pid_t pid;         /* the root of the tree */
	const char *image; /* where the image is published; must not exist */
	const char *criu;  /* the criu binary */
	const char *log;   /* CRIU's log file */
	bool kill;         /* end the tree after the dump */
	/* With kill: CRIU leaves the tree stopped instead, and once the image
	 * is published it waits up to hold_ms for the release (prog->release):
	 * kill ends it, resume (or no word in time) lets it run on. 0: none. */
	uint32_t hold_ms;
	/* The traced processes of the tree, which park; the rest of its CUDA
	 * processes are checkpointed by the driver, which copies. */
	const engine_traced *traced;
	int ntraced;
	const engine_tracer *tracer; /* meets woken tracers; NULL if ntraced is 0 */
	engine_progress *prog;
	/* Copy-on-write: the traced processes run again right after the
	 * dump, and their memory is copied while they run. Ignored with
	 * kill (nothing runs) and for a tree with no traced process. */
	bool cow;
	/* Recopy: the traced processes run on while their memory is copied,
	 * their writes tracked; then the final stall copies what was written
	 * meanwhile, and the image holds the state at its end (t2). Ignored
	 * for a tree with no traced process. */
	bool recopy;
	uint64_t staging;  /* host staging pool, bytes (0: ENGINE_STAGING) */
	int staging_fd;    /* phosfs's staging memfd, or -1 */
	uint64_t shadow_pool; /* CoW shadow pool per process, bytes */
	uint32_t chunk;    /* bytes (0: ENGINE_CHUNK) */
	/* How long a member may take to quiesce (park, track) and the driver
	 * to lock it, in ms: past it the checkpoint fails and every member
	 * runs on. 0: CHECKPOINT_TIMEOUT_MS. */
	int timeout_ms;
	int dump_timeout_s; /* CRIU's dump, in seconds; 0: CHECKPOINT_DUMP_TIMEOUT_S */
} checkpoint_args;

#define CHECKPOINT_TIMEOUT_MS 5000
#define CHECKPOINT_DUMP_TIMEOUT_S 600

/* Checkpoints the process tree of pid and publishes one image of it: every
 * traced process is parked, every CUDA process driver-checkpointed, then
 * CRIU dumps the tree. With stop, the parked memory is copied before the
 * processes run again; with cow, after. On failure every process runs on
 * (unless it died), nothing is published and earlier images are
 * untouched. */
int checkpoint_run(const checkpoint_args *a, perr *er);

#endif
