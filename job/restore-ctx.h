/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A restore under way: what its steps share (internal to job/; the
 * steps are in restore.c, lazy's own in lazy.c).
 */
#ifndef PHOS_JOB_RESTORE_CTX_H
#define PHOS_JOB_RESTORE_CTX_H

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
	char pages_log[4096 + 16]; /* its log */
	uint32_t job;          /* the member restore names: the root, or the
				* job phos's init started (pid 2 of the namespace) */
} restore_ctx;

#endif
