/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A restore: bringing a checkpointed process tree back, eagerly or
 * lazily (restore.c, lazy.c, devices.c; doc/ARCHITECTURE.md, "The
 * restore protocols").
 * Functions return 0 or a negative errno; when they fail, er says why,
 * in a sentence for people (engine/error.h).
 */
#ifndef PHOS_JOB_RESTORE_H
#define PHOS_JOB_RESTORE_H

#include "../engine/engine.h"

/* The longest --device list. */
#define RESTORE_DEVICES_MAX 1024

typedef struct restore_args {
	const char *image; /* the image directory, from anywhere */
	const char *devices; /* "OLD=NEW,…" moves of GPUs (restore_devices), or NULL */
	const char *criu;  /* the criu binary */
	const char *log;   /* CRIU's log file */
	/* The tree runs right after CRIU and the driver, with only the
	 * application's own VMM objects back; the rest comes back while it
	 * runs. Else all of it is back first (eager). */
	bool lazy;
	/* CPU pages come back while the tree runs (CRIU's lazy-pages daemon,
	 * userfaultfd); the restore ends once the last page is back. */
	bool lazy_pages;
	/* The image's data files are still being written, in order (phos
	 * receive): reads wait for bytes not there yet (phosimg_open_growing). */
	bool growing;
	int fill_threads; /* threads that fill device memory (0: engine_filler_start's default) */
	int timeout_s;    /* a step's deadline (the job's watchdog); CRIU waits at its gate this long at most */
	/* The cgroups the tree goes into, as /proc/PID/cgroup says them;
	 * NULL or "": those the image names (engine_cgroups_resolve, criu_restore). */
	const char *cgroups;
	/* How to meet the restored tracers, one process at a time. Unused for
	 * an image of untraced processes. */
	const engine_tracer *tracer;
	engine_progress *prog;
	pid_t *pid; /* the restored tree's root, once known */
	_Atomic int32_t *resumed; /* set to the job's pid once the tree runs (NULL: not told) */
	/* Each process whose tracer the restore wakes, before resumed (up to
	 * ENGINE_SERVED_MAX; NULL: not told). */
	_Atomic int32_t *served;
	_Atomic uint32_t *nserved;
} restore_args;

/* Checks the syntax of a --device list: "OLD=NEW[,OLD=NEW…]", each side an
 * ordinal or a GPU UUID ("GPU-" and 32 hex digits, dashes anywhere).
 * Returns 0, or -EINVAL with er saying what is wrong. */
int restore_devices_check(const char *spec, perr *er);

/* Decides where each GPU of image `in` goes on this machine (spec: the
 * moves asked for, or NULL), and describes the moves in desc ("" when
 * none). Needs driver_open. Errors: -EINVAL (a bad spec, a GPU named
 * twice or moved onto another chip), -ENODEV (this machine lacks a GPU
 * named, or any free GPU of the chip of one that holds memory), -EIO. */
int restore_devices(const phosimg_info *in, const char *spec, engine_devmap *map, char *desc, size_t desclen,
		    perr *er);

/* Restores the tree of image a->image. Eager: its device memory is
 * filled from the image, the tree restored with CRIU, each CUDA process
 * restored and unlocked in the driver, and each tracer given its memory;
 * the tree then runs. Lazy: as eager, but the tree runs right after CRIU
 * and driver restore, with only the application's own VMM objects back. A
 * call that touches an object not yet back waits until it is filled
 * (first), and the others follow in the order the image records (the
 * tracer's guess at first use); restore_run returns when all is back.
 * a->devices moves its GPUs (restore_devices). *a->resumed is set once
 * the tree runs; prog says how long each step took, and how often and
 * how long calls waited. Errors: -EBADMSG and other phosimg_open errors
 * (a bad image; nothing was started), -EBUSY (a pid of the tree is
 * taken), restore_devices' errors (nothing was started), -EIO (CRIU or
 * the driver failed; er says which). An error after the tree ran (a
 * chunk that does not check, the driver) kills the tree, and er says
 * so. */
int restore_run(const restore_args *a, perr *er);

#endif
