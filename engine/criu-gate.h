/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A gate on a CRIU restore (criu-gate.c): CRIU restores the tree, every
 * page and file of it, and then waits at the gate before it lets the tree
 * run; the restore's job opens the gate (the tree runs) or shuts it (CRIU
 * kills the tree and fails). The job checks what it checks (the page
 * data's checksums, the GPUs) while CRIU works, instead of before.
 *
 * It is CRIU's own hook, an action script (criu --action-script) run at
 * post-restore, whose failure makes CRIU kill the tree: a script of two
 * lines in the gate's folder that reads one word from a FIFO there. The
 * job holds the FIFO open, read and write, so a job that dies after the
 * script opened it shuts the gate; the script waits a backstop timeout
 * at most, for a job that died before.
 */
#ifndef PHOS_ENGINE_CRIU_GATE_H
#define PHOS_ENGINE_CRIU_GATE_H

#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "error.h"

/* A gate's folder is its restore's log path with this added. */
#define CRIU_GATE_SUFFIX ".gate"

typedef struct criu_gate {
	int fd;               /* the FIFO, read and write (close-on-exec); -1 */
	atomic_bool said;     /* opened or shut already: the first word counts */
	char dir[PATH_MAX];   /* the gate's folder, "" when there is none */
	char script[PATH_MAX + 16];
} criu_gate;

/* Makes a gate in the folder dir (made now; it must not exist): its FIFO
 * and its script, g->script, for criu restore --action-script; the script
 * waits for a word at most timeout_s seconds (<= 0: a day), a backstop
 * for a job that died before the script opened the FIFO. On an error g
 * still needs criu_gate_end. Errors: -ENOEXEC (dir's parent is on a file
 * system mounted noexec), -errno of making them (er names which),
 * -ENAMETOOLONG. */
int criu_gate_make(const char *dir, int timeout_s, criu_gate *g, perr *er);

/* Opens the gate (ok: the tree runs) or shuts it (CRIU kills the tree).
 * Only the first call counts; threads may call it at once. */
void criu_gate_say(criu_gate *g, bool ok);

/* Shuts the gate if nothing was said, and removes it. g may be one that
 * criu_gate_make failed on, or zeroed with fd -1. */
void criu_gate_end(criu_gate *g);

/* Removes the gate folder dir (relative to dfd, or AT_FDCWD) and what is
 * in it, as a job killed before criu_gate_end left it; nothing where
 * there is none. */
void criu_gate_remove(int dfd, const char *dir);

#endif
