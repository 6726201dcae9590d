/*
 * restore: bringing a checkpointed process back (DESIGN.md, "Restore").
 * Functions return 0 or a negative errno, and fill err with a sentence
 * for people when they fail.
 */
#ifndef PHOS_RESTORE_H
#define PHOS_RESTORE_H

#include "../engine/engine.h"

/* The longest --device list. */
#define RESTORE_DEVICES_MAX 1024

typedef struct restore_args {
	const char *image; /* the image directory, from anywhere */
	const char *devices; /* "OLD=NEW,…" moves of GPUs (restore_devices), or NULL */
	const char *criu;  /* the criu binary */
	const char *log;   /* CRIU's log file */
	/* How to meet the restored tracers, one process at a time. Unused for
	 * an image of untraced processes. */
	const engine_tracer *tracer;
	engine_progress *prog;
	pid_t *pid; /* the restored tree's root, once known */
} restore_args;

/* Checks the syntax of a --device list: "OLD=NEW[,OLD=NEW…]", each side an
 * ordinal or a GPU UUID ("GPU-" and 32 hex digits, dashes anywhere).
 * Returns 0, or -EINVAL with err saying what is wrong. */
int restore_devices_check(const char *spec, char *err, size_t errlen);

/* Decides where each GPU of image `in` goes on this machine (spec: the
 * moves asked for, or NULL), and describes the moves in desc ("" when
 * none). Needs driver_open. Errors: -EINVAL (a bad spec, a GPU named
 * twice or moved onto another chip), -ENODEV (this machine lacks a GPU
 * named, or any free GPU of the chip of one that holds memory), -EIO. */
int restore_devices(const phosimg_info *in, const char *spec, engine_devmap *map, char *desc, size_t desclen,
		    char *err, size_t errlen);

/* Eager restore: checks the image, fills new device memory from it,
 * restores the process tree with CRIU, restores and unlocks each CUDA
 * process in the driver, and gives each tracer its memory; the tree then
 * runs. a->devices moves its GPUs (restore_devices). Errors: -EBADMSG and
 * other phosimg_open errors (a bad image; nothing was started), -EBUSY (a
 * pid of the tree is taken), restore_devices' errors (nothing was
 * started), -EIO (CRIU or the driver failed; err says which). */
int restore_eager(const restore_args *a, char *err, size_t errlen);

#endif
