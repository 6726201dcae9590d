/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A checkpoint of a process with much host memory does not need a file
 * descriptor per MiB of it. CRIU (--parallel-pages) keeps a task's pages
 * in pipes until its writers run, a pipe for every MiB or so; where the
 * descriptor limit would not hold them, it once failed with "Too many
 * open files". Now a task whose pages are read from its snapshot clone
 * (cow, recopy, stop) keeps no pipes at all, and one that is not (kill)
 * has its pages written in the stall, in chunks, when its pipes would
 * pass the limit.
 *
 * phosfs (and so CRIU) runs with RLIMIT_NOFILE at 400; host_writer keeps
 * 256 MiB of host memory (some 256 pipes, 512 descriptors, before):
 *   - a cow checkpoint succeeds, and a restore from it holds t1;
 *   - a checkpoint with kill succeeds, and a restore from it runs on
 *     from it, all its memory checked.
 * Where CRIU may raise its own limit (CAP_SYS_RESOURCE), it does, and
 * this passes either way.
 */
#include <sys/resource.h>

#include "phosfs_test.h"

int main(void)
{
	rig r;
	rig_require(&r);
	char app[PATH_MAX];
	rig_app_path("PHOS_HOST_WRITER", "apps/host_writer", app);
	plan(4);
	struct rlimit was, low = { 400, 400 };
	if (getrlimit(RLIMIT_NOFILE, &was) || setrlimit(RLIMIT_NOFILE, &low))
		bail("cannot lower RLIMIT_NOFILE: %s", strerror(errno));
	int mounted = rig_mount(&r, NULL);
	setrlimit(RLIMIT_NOFILE, &was);
	if (mounted)
		bail("phosfs did not mount with 400 descriptors");

	char *const cmd[] = { app, "256", NULL };
	char out[PATH_MAX], last[256] = "", st[4096] = "", img[PATH_MAX], ctl[160], status[160];
	pid_t pid = rig_app_up(&r, cmd, 60000, out);
	ok(pid > 0, "host_writer runs with 256 MiB of host memory (pid %d)", (int)pid);
	if (pid <= 0)
		bail("host_writer did not start");
	int nverify = 0;
	rig_files(&r, pid, ctl, status);
	snprintf(img, sizeof(img), "%s/%d/cow", r.store, (int)pid);
	int good = rig_checkpoint(&r, pid, "checkpoint cow name=cow\n", last, sizeof(last)) && rig_verify(img);
	if (!good && rig_read(status, st, sizeof(st)))
		diag("%s", st);
	int back = good && rig_kill_restore(&r, &pid, 1, img, st, sizeof(st));
	ok(back && rig_cow_verified(pid, out, &nverify, 20000),
	   "a cow checkpoint under 400 descriptors succeeds, and its restore holds t1: %s", last);

	snprintf(img, sizeof(img), "%s/%d/kill", r.store, (int)pid);
	good = rig_checkpoint(&r, pid, "checkpoint stop kill name=kill\n", last, sizeof(last)) && rig_verify(img);
	if (!good && rig_read(status, st, sizeof(st)))
		diag("%s", st);
	ok(good, "a checkpoint with kill under 400 descriptors succeeds: %s", last);
	back = good && rig_kill_restore(&r, &pid, 1, img, st, sizeof(st));
	ok(back && rig_cow_verified(pid, out, &nverify, 20000),
	   "restored from it, it runs on, all its memory checked (pid %d)", (int)pid);
	kill(pid, SIGKILL);
	rig_cleanup(&r);
	return done();
}
