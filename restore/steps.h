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
	/* Member i's pid on this machine: m[i].pid until the restore, then
	 * the pid CRIU gave it in the host's namespace, which differs for a
	 * tree of its own pid namespace (PHOSIMG_MEMBER_NS_INIT). The driver,
	 * /proc, signals and phosfs's tracers go by these; the image's
	 * objects and tables by m[i].pid. */
	pid_t *host;
	bool own_ns;           /* the tree gets a pid namespace of its own */
	pid_t pages;           /* CRIU's lazy-pages daemon, until it ended */
	char pages_dir[4096];  /* its work directory (its socket), "" for none */
	uint32_t job;          /* the member restore names: the root, or the
				* job phos's init started (pid 2 of the namespace) */
} restore_ctx;

/* Opens the image (its structure is checked), waits for its pids to be
 * free, opens the driver and places its GPUs (restore_devices). Errors:
 * phosimg_open's (a bad image), -EBUSY (a pid is taken), -ENOMEM,
 * driver_open's and restore_devices' errors; nothing was started. */
int restore_begin(const restore_args *a, restore_ctx *c, char *err, size_t errlen);

/* Restores the tree with CRIU, finds each member's pid on this machine
 * (c->host), then restores and unlocks each CUDA process in the driver;
 * *a->pid is the pid of member c->job. Errors: -EIO (err says which
 * step), -ESRCH (a member CRIU restored is not there). */
int restore_tree(const restore_args *a, restore_ctx *c, char *err, size_t errlen);

/* With a->lazy_pages: waits until every CPU page is back (the lazy-pages
 * daemon ended), and records when. Errors: criu_pages_wait's (pages that
 * never came back: the caller fails, and the tree is killed). */
int restore_pages_wait(const restore_args *a, restore_ctx *c, uint64_t t0, char *err, size_t errlen);

/* The tree runs: records when (since t0), and tells a->resumed its pid. */
void restore_resumed(const restore_args *a, const restore_ctx *c, uint64_t t0);

/* The end both restores share, given e, the result so far: waits for CPU
 * pages (restore_pages_wait), records when all was back, and where it
 * failed after the tree ran, says that the tree is killed (restore_end
 * does it). Returns the restore's result. */
int restore_finish(const restore_args *a, restore_ctx *c, uint64_t t0, int e, char *err, size_t errlen);

/* Member i's tracer control thread, for unpark; with mine its objects.
 * Returns the tid, 0 when it needs none (untraced, no memory), or
 * -EPROTO when the image holds memory of a process without a tracer
 * (err says so). */
pid_t restore_tracer_of(restore_ctx *c, uint32_t i, const engine_parked *mine, char *err, size_t errlen);

/* After the restore (e: its result): a tree half restored is killed,
 * since half restored is worse than not restored (the image stays); the
 * image is closed and c freed. */
void restore_end(restore_ctx *c, int e);

/* Tells a->served (when asked) that the restore woke pid's tracer. */
void restore_served(const restore_args *a, pid_t pid);

#endif
