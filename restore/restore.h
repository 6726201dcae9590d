/*
 * restore: bringing a checkpointed process back (DESIGN.md, "Restore").
 * Functions return 0 or a negative errno, and fill err with a sentence
 * for people when they fail.
 */
#ifndef PHOS_RESTORE_H
#define PHOS_RESTORE_H

#include "../engine/engine.h"

typedef struct restore_args {
	const char *image; /* the image directory, from anywhere */
	const char *criu;  /* the criu binary */
	const char *log;   /* CRIU's log file */
	/* How to meet the restored tracers, one process at a time. Unused for
	 * an image of untraced processes. */
	const engine_tracer *tracer;
	engine_progress *prog;
	pid_t *pid; /* the restored tree's root, once known */
} restore_args;

/* Eager restore: checks the image, fills new device memory from it,
 * restores the process tree with CRIU, restores and unlocks each CUDA
 * process in the driver, and gives each tracer its memory; the tree then
 * runs. Errors: -EBADMSG and other phosimg_open errors (a bad image;
 * nothing was started), -EBUSY (a pid of the tree is taken), -EIO (CRIU
 * or the driver failed; err says which). */
int restore_eager(const restore_args *a, char *err, size_t errlen);

#endif
