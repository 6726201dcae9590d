/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A gate on a CRIU restore: its FIFO and its action script (criu-gate.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "criu-gate.h"

/* What a gate's folder holds. */
#define GATE_FIFO "fifo"
#define GATE_SCRIPT "gate"

/* The script CRIU runs at each of its actions; at post-restore it waits
 * for the word on the FIFO beside it, at most a backstop timeout (a job
 * killed before the script opened the FIFO leaves no writer, and the
 * open would wait for good; a job that lives kills CRIU and the script
 * itself when its own watchdog runs out). */
static const char script_text[] =
	"#!/bin/sh\n"
	"# phos's gate on this restore: after CRIU restored the tree, the tree\n"
	"# runs only once phos writes \"open\" into the FIFO beside this script.\n"
	"[ \"$CRTOOLS_SCRIPT_ACTION\" = post-restore ] || exit 0\n"
	"exec timeout -s KILL %d sh -c 'read -r word <\"$0\" && [ \"$word\" = open ]' \"${0%%/*}/" GATE_FIFO "\"\n";

int criu_gate_make(const char *dir, int timeout_s, criu_gate *g, perr *er)
{
	*g = (criu_gate){ .fd = -1 };
	char fifo[PATH_MAX + 16];
	if (snprintf(g->dir, sizeof(g->dir), "%s", dir) >= (int)sizeof(g->dir))
		return pr_err(er, -ENAMETOOLONG, "the gate's folder %s is too long", dir);
	snprintf(fifo, sizeof(fifo), "%s/" GATE_FIFO, dir);
	snprintf(g->script, sizeof(g->script), "%s/" GATE_SCRIPT, dir);
	/* CRIU execs the script: not from a file system mounted noexec. */
	char parent[PATH_MAX];
	snprintf(parent, sizeof(parent), "%s", dir);
	char *slash = strrchr(parent, '/');
	if (slash)
		*(slash == parent ? slash + 1 : slash) = 0;
	struct statvfs sv;
	if (statvfs(slash ? parent : ".", &sv) == 0 && (sv.f_flag & ST_NOEXEC)) {
		*g->dir = 0;
		return pr_err(er, -ENOEXEC, "%s is on a file system mounted noexec, where CRIU cannot run a script",
			      slash ? parent : ".");
	}
	if (mkdir(dir, 0700) != 0) {
		int e = -errno;
		*g->dir = 0;
		return pr_err(er, e, "cannot make %s: %s", dir, strerror(-e));
	}
	if (mkfifo(fifo, 0600) != 0)
		return pr_err(er, -errno, "cannot make the FIFO %s: %s", fifo, strerror(errno));
	/* Read and write: opening it never waits, and a word written before
	 * the script reads stays in it. */
	g->fd = open(fifo, O_RDWR | O_CLOEXEC);
	if (g->fd < 0)
		return pr_err(er, -errno, "cannot open the FIFO %s: %s", fifo, strerror(errno));
	int s = open(g->script, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0700);
	if (s < 0)
		return pr_err(er, -errno, "cannot make %s: %s", g->script, strerror(errno));
	int w = dprintf(s, script_text, timeout_s > 0 ? timeout_s : 86400);
	int e = w < 0 ? -EIO : close(s) != 0 ? -errno : 0;
	if (w < 0)
		close(s);
	return e ? pr_err(er, e, "cannot write %s: %s", g->script, strerror(-e)) : 0;
}

void criu_gate_say(criu_gate *g, bool ok)
{
	if (g->fd < 0 || atomic_exchange(&g->said, true))
		return;
	const char *word = ok ? "open\n" : "shut\n";
	/* A FIFO's buffer holds far more than a word: this never waits. */
	ssize_t n;
	while ((n = write(g->fd, word, strlen(word))) < 0 && errno == EINTR)
		;
}

void criu_gate_remove(int dfd, const char *dir)
{
	static const char *const in[] = { GATE_FIFO, GATE_SCRIPT };
	char f[PATH_MAX + 16];
	for (size_t i = 0; i < sizeof(in) / sizeof(*in); i++)
		if (snprintf(f, sizeof(f), "%s/%s", dir, in[i]) < (int)sizeof(f))
			unlinkat(dfd, f, 0);
	unlinkat(dfd, dir, AT_REMOVEDIR);
}

void criu_gate_end(criu_gate *g)
{
	criu_gate_say(g, false);
	if (g->fd >= 0)
		close(g->fd);
	g->fd = -1;
	if (*g->dir)
		criu_gate_remove(AT_FDCWD, g->dir);
	*g->dir = 0;
}
