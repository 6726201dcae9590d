/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Cgroups (cgroup.c): the ones a process is in, and a way for a child to
 * join them between fork and exec. A restore puts the restored tree in
 * the cgroups of the process that asked for it, as if it had started the
 * job: a scheduler that kills or limits its step's cgroup reaches the
 * restored job too.
 */
#ifndef PHOS_ENGINE_CGROUP_H
#define PHOS_ENGINE_CGROUP_H

#include <stddef.h>
#include <sys/types.h>

#include "error.h"

#define ENGINE_CGROUPS_TEXT_MAX 4096 /* the longest /proc/PID/cgroup phos takes */
#define ENGINE_CGROUPS_MAX 16        /* hierarchies */

/* The cgroup.procs files to write to join a set of cgroups, in this
 * mount namespace: n paths, each NUL-ended, one after another in procs. */
typedef struct engine_cgroups {
	int n;
	char procs[ENGINE_CGROUPS_MAX * 256];
} engine_cgroups;

/* Reads /proc/PID/cgroup into text (len bytes, at most
 * ENGINE_CGROUPS_TEXT_MAX are wanted). Errors: -ESRCH (pid is gone), -E2BIG
 * (it does not fit), open's and read's. */
int engine_cgroups_read(pid_t pid, char *text, size_t len);

/* The cgroups that text (as /proc/PID/cgroup says them) names, as the
 * cgroup.procs files of the hierarchies this mount namespace has mounted
 * (/proc/self/mountinfo); a hierarchy that is not mounted here, or whose
 * mount does not reach the cgroup, is left out, and so is a cgroup above
 * the writer's cgroup namespace's root ("/../x"). Errors:
 * -EINVAL (a line of text is malformed, er says which), -ENAMETOOLONG,
 * -E2BIG (too many hierarchies), mountinfo's open. */
int engine_cgroups_resolve(const char *text, engine_cgroups *cg, perr *er);

/* Leaves out of cg each cgroup.procs this process may not write (a
 * read-only cgroup mount, as in many containers; no permission): a
 * restore then goes into the cgroups it can join, rather than fail. Says
 * which were left out, and why, in dropped (len bytes; "" when none).
 * Returns how many, or -ENOENT (a cgroup is gone: its processes ended
 * and it was removed; er names it) or another errno of open. */
int engine_cgroups_keep_writable(engine_cgroups *cg, char *dropped, size_t len, perr *er);

/* Moves the calling process into cg's cgroups (writes 0 to each
 * cgroup.procs). Async-signal-safe, for a child between fork and exec.
 * Errors: write's or open's (a cgroup gone, not permitted), with *failed
 * the path that refused. */
int engine_cgroups_enter(const engine_cgroups *cg, const char **failed);

#endif
