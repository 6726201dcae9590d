/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A restore's gate (engine/criu-gate.c): the action script CRIU runs at
 * each of its actions lets every action but post-restore through at
 * once, and at post-restore waits for the job's word:
 *
 *   1. other actions (pre-restore, post-resume, none) pass at once;
 *   2. post-restore passes once the job said "open", said before or
 *      after the script began to wait;
 *   3. it fails once the job shut the gate, and when the job ended the
 *      gate without a word;
 *   4. a gate whose job is gone before the script opens its FIFO (no
 *      writer left: an open would wait for good) fails after its timeout;
 *   5. criu_gate_end removes the gate's folder, and a gate cannot be made
 *      where its folder exists;
 *   6. nor on a file system mounted noexec, where CRIU could not run the
 *      script: -ENOEXEC, which the restore takes to run its checks before
 *      CRIU (needs root, to mount a tmpfs).
 *
 * The script is run as CRIU runs it: its path alone, the action in
 * $CRTOOLS_SCRIPT_ACTION, no descriptor but 0-2.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../engine/criu-gate.h"
#include "tap.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Starts g's script for action (NULL: none set), as CRIU would. */
static pid_t start(const criu_gate *g, const char *action)
{
	pid_t c = fork();
	if (c == 0) {
		for (int fd = 3; fd < 1024; fd++)
			close(fd);
		if (action)
			setenv("CRTOOLS_SCRIPT_ACTION", action, 1);
		else
			unsetenv("CRTOOLS_SCRIPT_ACTION");
		execl(g->script, g->script, (char *)NULL);
		_exit(127);
	}
	return c;
}

/* Its exit status once it ended, waiting up to limit_s; -1 if it still
 * runs then (it is killed). */
static int ended(pid_t c, double limit_s)
{
	double end = now_s() + limit_s;
	int st;
	while (now_s() < end) {
		pid_t r = waitpid(c, &st, WNOHANG);
		if (r == c)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		usleep(10000);
	}
	kill(c, SIGKILL);
	waitpid(c, &st, 0);
	return -1;
}

int main(void)
{
	plan(6);
	char base[] = "/tmp/phos-gate-XXXXXX";
	if (!mkdtemp(base))
		bail("mkdtemp: %s", strerror(errno));
	char dir[600];
	snprintf(dir, sizeof(dir), "%s/gate", base);
	perr er = { 0 };

	/* 1. */
	criu_gate g;
	if (criu_gate_make(dir, 5, &g, &er))
		bail("criu_gate_make: %s", er.msg);
	int pre = ended(start(&g, "pre-restore"), 5), post = ended(start(&g, "post-resume"), 5),
	    none = ended(start(&g, NULL), 5);
	ok(pre == 0 && post == 0 && none == 0, "pre-restore, post-resume and no action pass at once (%d %d %d)", pre,
	   post, none);

	/* 2. Said after the script began to wait, and before. */
	pid_t c = start(&g, "post-restore");
	usleep(300000);
	int ws;
	int waited = waitpid(c, &ws, WNOHANG) == 0; /* it still waits */
	criu_gate_say(&g, true);
	int after = ended(c, 5);
	criu_gate_end(&g);
	if (criu_gate_make(dir, 5, &g, &er))
		bail("criu_gate_make: %s", er.msg);
	criu_gate_say(&g, true);
	int before = ended(start(&g, "post-restore"), 5);
	criu_gate_end(&g);
	ok(waited && after == 0 && before == 0,
	   "post-restore waits for the word, and passes once the gate is opened, after it began (%d) or before (%d)",
	   after, before);

	/* 3. Shut, and ended without a word. */
	if (criu_gate_make(dir, 5, &g, &er))
		bail("criu_gate_make: %s", er.msg);
	c = start(&g, "post-restore");
	usleep(100000);
	criu_gate_say(&g, false);
	int shut = ended(c, 5);
	criu_gate_end(&g);
	if (criu_gate_make(dir, 5, &g, &er))
		bail("criu_gate_make: %s", er.msg);
	c = start(&g, "post-restore");
	usleep(100000);
	criu_gate_end(&g);
	int unsaid = ended(c, 5);
	ok(shut > 0 && unsaid > 0, "post-restore fails once the gate is shut (%d), and when it ends unsaid (%d)", shut,
	   unsaid);

	/* 4. The job's end of the FIFO gone before the script opens it. */
	if (criu_gate_make(dir, 1, &g, &er))
		bail("criu_gate_make: %s", er.msg);
	close(g.fd);
	g.fd = -1;
	double t0 = now_s();
	int gone = ended(start(&g, "post-restore"), 10);
	double took = now_s() - t0;
	criu_gate_end(&g);
	ok(gone > 0 && took < 5, "with no writer left, post-restore fails after its timeout of 1 s (%d after %.1f s)",
	   gone, took);

	/* 5. */
	struct stat st;
	int removed = stat(dir, &st) != 0 && errno == ENOENT;
	mkdir(dir, 0700);
	criu_gate g2;
	perr er2 = { 0 };
	int e = criu_gate_make(dir, 5, &g2, &er2);
	criu_gate_end(&g2);
	int kept = stat(dir, &st) == 0;
	rmdir(dir);
	ok(removed && e == -EEXIST && kept && strstr(er2.msg, dir),
	   "the gate's folder is removed at its end; one that exists is refused, named, and left (%s)", er2.msg);

	/* 6. */
	char mnt[700], in[800];
	snprintf(mnt, sizeof(mnt), "%s/noexec", base);
	snprintf(in, sizeof(in), "%s/gate", mnt);
	mkdir(mnt, 0700);
	if (geteuid() != 0 || mount("tmpfs", mnt, "tmpfs", MS_NOEXEC, "size=1m") != 0) {
		skip("mounting a tmpfs needs root");
	} else {
		criu_gate g3;
		perr er3 = { 0 };
		e = criu_gate_make(in, 5, &g3, &er3);
		criu_gate_end(&g3);
		int none = stat(in, &st) != 0;
		umount(mnt);
		ok(e == -ENOEXEC && none && strstr(er3.msg, "noexec"),
		   "a gate on a file system mounted noexec is refused with ENOEXEC, nothing made (%s)", er3.msg);
	}
	rmdir(mnt);
	rmdir(base);
	return done();
}
